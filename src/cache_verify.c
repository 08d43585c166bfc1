/*
 * cache_verify.c — qjit_cache_db_verify: every row rechecked, the file checked by SQLite,
 * bad rows deleted and a damaged file rebuilt from the rows that still read back whole.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache_admin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROW_COLUMNS QJIT_DB_ROW_COLUMNS
#define ROW_OK_ARGS QJIT_DB_ROW_OK_ARGS
#define FILTER_SQL QJIT_ADM_FILTER_SQL
#define ENTRY_COLUMNS QJIT_ADM_ENTRY_COLUMNS

/* Copy the rows of d that verify into a fresh file next to it, then put that file in
 * its place: for a file whose pages are damaged, where deleting rows cannot help. */
static qjit_status rebuild(qjit_cache_db *d, uint64_t *found, uint64_t *kept)
{
    qjit_status st = QJIT_OK;
    sqlite3 *out = NULL;
    sqlite3_stmt *q = NULL, *ins = NULL;
    qjit_dberr e = {0};
    int recreated, rc;
    char *tmp = qjit_db_join_path(d->path, ".rebuild");
    char *wal = qjit_db_join_path(d->path, "-wal");
    char *shm = qjit_db_join_path(d->path, "-shm");
    sqlite3_int64 *ids = NULL;
    size_t nids = 0, capids = 0;
    if (!tmp || !wal || !shm) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory to rebuild");
        goto done;
    }
    /* the rowids first (table pages only), then each row on its own: a damaged page
     * costs the rows on it, not the rest of the walk */
    rc = qjit_db_prepare(d->db, "SELECT rowid FROM kernels", &q);
    while (rc == SQLITE_OK && qjit_db_step(q) == SQLITE_ROW) {
        if (nids == capids) {
            capids = capids ? capids * 2 : 64;
            sqlite3_int64 *g = realloc(ids, capids * sizeof *ids);
            if (!g) {
                st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory to rebuild");
                goto done;
            }
            ids = g;
        }
        ids[nids++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    q = NULL;
    *found = nids;

    unlink(tmp);
    rc = sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(out);
    if (rc != SQLITE_OK || (rc = qjit_db_schema_ensure(out, true, &recreated, &e)) != SQLITE_OK ||
        (rc = qjit_db_exec(out, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_prepare(out, "INSERT INTO kernels(" ROW_COLUMNS ") VALUES(?1, ?2, ?3, ?4, ?5, "
                           "?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT(key) DO NOTHING",
                      &ins)) != SQLITE_OK) {
        if (!e.msg[0])
            qjit_db_note(&e, out, rc, "create");
        st = qjit_err_set(QJIT_ERROR_CACHE, "cache %s: rebuild into %s: %s", d->path, tmp,
                          e.msg);
        goto done;
    }
    rc = qjit_db_prepare(d->db, "SELECT " ROW_COLUMNS " FROM kernels WHERE rowid = ?1 "
                        "AND qjit_row_ok(" ROW_OK_ARGS ")", &q);
    for (size_t i = 0; rc == SQLITE_OK && i < nids; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, ids[i]);
        if (qjit_db_step(q) != SQLITE_ROW)
            continue; /* gone, damaged, or does not verify */
        for (int c = 0; c < 12; c++)
            sqlite3_bind_value(ins, c + 1, sqlite3_column_value(q, c));
        if ((rc = qjit_db_step(ins)) != SQLITE_DONE) {
            qjit_db_note(&e, out, rc, "copy a row");
            st = qjit_err_set(QJIT_ERROR_CACHE, "cache %s: rebuild: %s", d->path, e.msg);
            goto done;
        }
        rc = SQLITE_OK;
        *kept += (uint64_t)sqlite3_changes(out);
        sqlite3_reset(ins);
    }
    sqlite3_finalize(q);
    q = NULL;
    sqlite3_finalize(ins);
    ins = NULL;
    /* the tuning results that still read back whole, as far as the damage lets them */
    if (qjit_db_has_tuning(d->db, "main") &&
        qjit_db_prepare(d->db, "SELECT " QJIT_DB_TUNING_COLUMNS " FROM tuning WHERE "
                               QJIT_DB_TUNING_OK, &q) == SQLITE_OK &&
        qjit_db_prepare(out, "INSERT INTO tuning(" QJIT_DB_TUNING_COLUMNS ") VALUES(?1, ?2, "
                             "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT DO NOTHING",
                        &ins) == SQLITE_OK) {
        while (qjit_db_step(q) == SQLITE_ROW) {
            for (int c = 0; c < 12; c++)
                sqlite3_bind_value(ins, c + 1, sqlite3_column_value(q, c));
            qjit_db_step(ins);
            sqlite3_reset(ins);
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    sqlite3_finalize(ins);
    ins = NULL;
    if ((rc = qjit_db_exec(out, "COMMIT")) != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "commit");
        st = qjit_err_set(QJIT_ERROR_CACHE, "cache %s: rebuild: %s", d->path, e.msg);
        goto done;
    }
    sqlite3_close_v2(out);
    out = NULL;
    sqlite3_close_v2(d->db);
    d->db = NULL;
    if (rename(tmp, d->path) != 0) {
        st = qjit_err_set(QJIT_ERROR_IO, "cache %s: rebuild: rename %s: %s", d->path, tmp,
                          strerror(errno));
    } else {
        unlink(wal);
        unlink(shm);
    }
    free(d->uri);
    d->uri = NULL;
    if (qjit_adm_open_rw(d, &e) != SQLITE_OK) {
        sqlite3_close_v2(d->db);
        d->db = NULL;
        if (st == QJIT_OK)
            st = qjit_adm_fail(d, QJIT_ERROR_CACHE, &e);
    }
done:
    sqlite3_finalize(q);
    sqlite3_finalize(ins);
    if (out) {
        qjit_db_rollback(out);
        sqlite3_close_v2(out);
        unlink(tmp);
    }
    free(ids);
    free(tmp);
    free(wal);
    free(shm);
    return st;
}

QJIT_API qjit_status qjit_cache_db_verify(qjit_cache_db *d, int repair_it, qjit_cache_bad_fn fn,
                                          void *user, qjit_cache_verify_report *out)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL, *del = NULL;
    sqlite3_int64 *bad = NULL;
    size_t nbad = 0, capbad = 0;
    int rc;
    if (!d || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_verify: %s is NULL",
                            !d ? "db" : "out");
    if (!d->db)
        return qjit_adm_unusable(d);
    memset(out, 0, sizeof *out);
    if (repair_it && !d->writable)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache %s: repair needs a writable handle", d->path);
    rc = qjit_db_prepare(d->db, "PRAGMA quick_check", &q);
    if (rc == SQLITE_OK)
        rc = qjit_db_step(q);
    if (rc == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(q, 0);
        out->integrity_ok = m && strcmp(m, "ok") == 0;
        snprintf(out->integrity, sizeof out->integrity, "%s", m ? m : "");
    } else {
        out->integrity_ok = 0;
        snprintf(out->integrity, sizeof out->integrity, "%s", sqlite3_errmsg(d->db));
    }
    sqlite3_finalize(q);
    q = NULL;

    rc = qjit_db_prepare(d->db, "SELECT rowid, key, descriptor, material, cubin, cubin_size, "
                        "cubin_hash, source, source_size FROM kernels", &q);
    while (rc == SQLITE_OK && (rc = qjit_db_step(q)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        out->rows_checked++;
        sqlite3_column_text(q, 7); /* as text, so bytes counts UTF-8 like source_size */
        const char *why = qjit_db_row_check(
            sqlite3_column_blob(q, 1), sqlite3_column_bytes(q, 1), sqlite3_column_blob(q, 3),
            sqlite3_column_bytes(q, 3), sqlite3_column_blob(q, 4), sqlite3_column_bytes(q, 4),
            sqlite3_column_int64(q, 5), sqlite3_column_blob(q, 6), sqlite3_column_bytes(q, 6),
            sqlite3_column_bytes(q, 7), sqlite3_column_int64(q, 8));
        if (!why)
            continue;
        out->rows_bad++;
        if (fn) {
            char hex[33] = "";
            if (sqlite3_column_bytes(q, 1) == 16)
                qjit_key_hex(sqlite3_column_blob(q, 1), hex);
            const char *desc = (const char *)sqlite3_column_text(q, 2);
            fn(user, hex, desc ? desc : "", why);
        }
        if (nbad == capbad) {
            capbad = capbad ? capbad * 2 : 16;
            sqlite3_int64 *g = realloc(bad, capbad * sizeof *bad);
            if (!g) {
                st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory to verify");
                goto done;
            }
            bad = g;
        }
        bad[nbad++] = sqlite3_column_int64(q, 0);
    }
    if (rc != SQLITE_DONE) {
        /* rows that cannot be read: the file itself is damaged */
        if (out->integrity_ok) {
            out->integrity_ok = 0;
            snprintf(out->integrity, sizeof out->integrity, "reading rows: %s",
                     sqlite3_errmsg(d->db));
        }
        if (!qjit_db_is_corrupt(rc)) {
            st = qjit_adm_error(d, rc, "verify");
            goto done;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    if (qjit_db_has_tuning(d->db, "main")) {
        sqlite3_int64 nt = 0, nb = 0;
        if (qjit_db_query_int(d->db, "SELECT count(*) FROM tuning", &nt) != SQLITE_OK ||
            qjit_db_query_int(d->db, "SELECT count(*) FROM tuning WHERE NOT " QJIT_DB_TUNING_OK,
                              &nb) != SQLITE_OK) {
            if (out->integrity_ok) {
                out->integrity_ok = 0;
                snprintf(out->integrity, sizeof out->integrity, "reading tuning rows: %s",
                         sqlite3_errmsg(d->db));
            }
        }
        out->tuning_checked = (uint64_t)nt;
        out->tuning_bad = (uint64_t)nb;
    }
    if (!repair_it)
        goto done;
    if (out->integrity_ok && out->tuning_bad &&
        (rc = qjit_db_exec(d->db, "DELETE FROM tuning WHERE NOT " QJIT_DB_TUNING_OK)) != SQLITE_OK) {
        st = qjit_adm_error(d, rc, "delete bad tuning rows");
        goto done;
    }
    if (!out->integrity_ok) {
        uint64_t found = 0, kept = 0;
        st = rebuild(d, &found, &kept);
        if (st == QJIT_OK)
            out->rows_deleted = found > kept ? found - kept : 0;
        goto done;
    }
    if (!nbad)
        goto done;
    if ((rc = qjit_db_exec(d->db, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_prepare(d->db, "DELETE FROM kernels WHERE rowid = ?1", &del)) != SQLITE_OK) {
        st = qjit_adm_error(d, rc, "delete bad rows");
        goto done;
    }
    for (size_t i = 0; i < nbad; i++) {
        sqlite3_bind_int64(del, 1, bad[i]);
        if ((rc = qjit_db_step(del)) != SQLITE_DONE) {
            st = qjit_adm_error(d, rc, "delete bad rows");
            goto done;
        }
        out->rows_deleted += (uint64_t)sqlite3_changes(d->db);
        sqlite3_reset(del);
    }
    if ((rc = qjit_db_exec(d->db, "COMMIT")) != SQLITE_OK)
        st = qjit_adm_error(d, rc, "delete bad rows");
done:
    sqlite3_finalize(q);
    sqlite3_finalize(del);
    if (st != QJIT_OK && d->db) {
        qjit_db_rollback(d->db);
        if (repair_it && out->integrity_ok)
            out->rows_deleted = 0;
    }
    free(bad);
    return st;
}

