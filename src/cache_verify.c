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

/* Rebuild d's file from the rows that still read back and verify: they are copied into a
 * fresh file next to it, the damaged file is moved aside to "<path>.corrupt" (one copy,
 * for a post-mortem, as the runtime store's repair keeps) and the fresh one put in its
 * place.  The rows come through d's own connection when SQLite opened the file (damaged
 * pages), else through a copy given a new header (cache_salvage.c); a file neither reads
 * is rebuilt empty.  For a file deleting rows cannot help. */
static qjit_status rebuild(qjit_cache_db *d, uint64_t *found, uint64_t *kept)
{
    qjit_status st = QJIT_OK;
    sqlite3 *out = NULL, *own = NULL, *src = d->db;
    qjit_dberr e = {0};
    bool reheaded = false;
    int recreated, rc;
    char *tmp = qjit_db_join_path(d->path, ".rebuild");
    char *aside = qjit_db_join_path(d->path, ".corrupt");
    char *scratch = qjit_db_join_path(d->path, ".salvage");
    char *wal = qjit_db_join_path(d->path, "-wal");
    char *shm = qjit_db_join_path(d->path, "-shm");
    *found = *kept = 0;
    if (!tmp || !aside || !scratch || !wal || !shm) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory to rebuild");
        goto done;
    }
    if (!src && qjit_db_open_salvage(d->path, scratch, &own, &reheaded) == SQLITE_OK)
        src = own;
    unlink(tmp);
    rc = sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(out);
    if (rc != SQLITE_OK || (rc = qjit_db_schema_ensure(out, true, &recreated, &e)) != SQLITE_OK ||
        (rc = qjit_db_exec(out, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (src && (rc = qjit_db_copy_verified(src, out, found, kept, &e)) != SQLITE_OK) ||
        (rc = qjit_db_exec(out, "COMMIT")) != SQLITE_OK) {
        if (!e.msg[0])
            qjit_db_note(&e, out, rc, "create");
        st = qjit_err_set(QJIT_ERROR_CACHE, "cache %s: rebuild into %s: %s", d->path, tmp,
                          e.msg);
        goto done;
    }
    sqlite3_close_v2(out);
    out = NULL;
    sqlite3_close_v2(d->db);
    d->db = NULL;
    if (rename(d->path, aside) != 0)
        unlink(d->path);
    if (rename(tmp, d->path) != 0) {
        st = qjit_err_set(QJIT_ERROR_IO, "cache %s: rebuild: rename %s: %s", d->path, tmp,
                          strerror(errno));
    } else {
        unlink(wal);
        unlink(shm);
        free(d->damage);
        d->damage = NULL;
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
    if (out) {
        qjit_db_rollback(out);
        sqlite3_close_v2(out);
        unlink(tmp);
    }
    sqlite3_close_v2(own);
    if (reheaded)
        unlink(scratch);
    free(tmp);
    free(aside);
    free(scratch);
    free(wal);
    free(shm);
    return st;
}

/* The bad rows a check found: reported, and collected for deletion. */
typedef struct bad_rows {
    qjit_cache_bad_fn fn;
    void *user;
    sqlite3_int64 *ids;
    size_t n, cap;
} bad_rows;

static int on_bad(void *user, sqlite3_int64 rowid, const char *key_hex, const char *desc,
                  const char *why)
{
    bad_rows *b = user;
    if (b->fn)
        b->fn(b->user, key_hex, desc, why);
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        sqlite3_int64 *g = realloc(b->ids, cap * sizeof *g);
        if (!g)
            return 1;
        b->ids = g;
        b->cap = cap;
    }
    b->ids[b->n++] = rowid;
    return 0;
}

QJIT_API qjit_status qjit_cache_db_verify(qjit_cache_db *d, int repair_it, qjit_cache_bad_fn fn,
                                          void *user, qjit_cache_verify_report *out)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *del = NULL;
    bad_rows bad = {fn, user, NULL, 0, 0};
    qjit_db_check_result r;
    int rc;
    if (!d || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_verify: %s is NULL",
                            !d ? "db" : "out");
    if (!d->db && !d->damage)
        return qjit_adm_unusable(d);
    memset(out, 0, sizeof *out);
    if (repair_it && !d->writable)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache %s: repair needs a writable handle", d->path);
    if (d->damage) { /* SQLite cannot open it: nothing to check row by row */
        snprintf(out->integrity, sizeof out->integrity, "%s", d->damage);
        if (!repair_it)
            goto done;
        uint64_t found = 0, kept = 0;
        if ((st = rebuild(d, &found, &kept)) == QJIT_OK) {
            out->rebuilt = 1;
            out->rows_kept = kept;
            out->rows_deleted = found - kept;
        }
        goto done;
    }
    if ((rc = qjit_db_check(d->db, on_bad, &bad, &r)) != SQLITE_OK) {
        st = rc == SQLITE_NOMEM ? qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: verify")
                                : qjit_adm_error(d, rc, "verify");
        goto done;
    }
    out->rows_checked = r.rows_checked;
    out->rows_bad = r.rows_bad;
    out->integrity_ok = r.integrity_ok;
    snprintf(out->integrity, sizeof out->integrity, "%s", r.integrity);
    out->tuning_checked = r.tuning_checked;
    out->tuning_bad = r.tuning_bad;
    if (!repair_it)
        goto done;
    if (!out->integrity_ok) {
        uint64_t found = 0, kept = 0;
        st = rebuild(d, &found, &kept);
        if (st == QJIT_OK) {
            out->rebuilt = 1;
            out->rows_kept = kept;
            out->rows_deleted = found > kept ? found - kept : 0;
        }
        goto done;
    }
    if (!bad.n && !out->tuning_bad)
        goto done;
    if ((rc = qjit_db_exec(d->db, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_exec(d->db, "DELETE FROM tuning WHERE NOT " QJIT_DB_TUNING_OK)) != SQLITE_OK ||
        (rc = qjit_db_prepare(d->db, "DELETE FROM kernels WHERE rowid = ?1", &del)) != SQLITE_OK) {
        st = qjit_adm_error(d, rc, "delete bad rows");
        goto done;
    }
    for (size_t i = 0; i < bad.n; i++) {
        sqlite3_bind_int64(del, 1, bad.ids[i]);
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
    sqlite3_finalize(del);
    if (st != QJIT_OK && d->db) {
        qjit_db_rollback(d->db);
        if (repair_it && out->integrity_ok)
            out->rows_deleted = 0;
    }
    free(bad.ids);
    return st;
}
