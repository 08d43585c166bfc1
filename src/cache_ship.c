/*
 * cache_ship.c — qjit_cache_db_export and qjit_cache_db_merge: a cache's verified rows,
 * kernels and tuning results, into a new self-contained file to ship, or into another DB.
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

/* The tuning rows of `from` (an attached schema) that verify and match f (arch, and match
 * against the problem; none when f selects by key) into main.  Where main already has a row
 * of the same candidate (gpu, arch, problem, bucket, n, k, config), the newer measurement
 * stays: a re-tuning shipped later replaces the old one, an older file does not undo it.
 * Inside the caller's write transaction. */
static int copy_tuning(sqlite3 *db, const char *from, const qjit_cache_filter *f, qjit_dberr *e)
{
    if (!qjit_db_has_tuning(db, from) || (f && f->key_prefix && *f->key_prefix))
        return SQLITE_OK;
    char sql[900];
    snprintf(sql, sizeof sql,
             "INSERT INTO main.tuning(" QJIT_DB_TUNING_COLUMNS ") SELECT " QJIT_DB_TUNING_COLUMNS
             " FROM %s.tuning WHERE (?1 IS NULL OR instr(arch, ?1) > 0) AND "
             "(?2 IS NULL OR instr(problem, ?2) > 0) AND " QJIT_DB_TUNING_OK
             " ORDER BY rowid ON CONFLICT(gpu, arch, problem, bucket, n, k, config) DO UPDATE "
             "SET m = excluded.m, us = excluded.us, ok = excluded.ok, created = excluded.created, "
             "row_hash = excluded.row_hash WHERE excluded.created > main.tuning.created",
             from);
    sqlite3_stmt *q = NULL;
    int rc = qjit_db_prepare(db, sql, &q);
    if (rc == SQLITE_OK) {
        const char *v[2] = {f ? f->arch : NULL, f ? f->match : NULL};
        for (int i = 0; i < 2; i++)
            if (v[i] && *v[i])
                sqlite3_bind_text(q, i + 1, v[i], -1, SQLITE_STATIC);
        rc = qjit_db_step(q);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_OK ? rc : qjit_db_note(e, db, rc, "copy tuning results");
}

/* ATTACH a file read-only under the name `as`, checking its schema version. */
int qjit_adm_attach(sqlite3 *db, const char *uri, const char *as, bool *attached, qjit_dberr *e)
{
    sqlite3_stmt *q = NULL;
    char sql[64];
    snprintf(sql, sizeof sql, "ATTACH ?1 AS %s", as);
    int rc = qjit_db_prepare(db, sql, &q);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(q, 1, uri, -1, SQLITE_STATIC);
        rc = qjit_db_step(q);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_OK)
        return qjit_db_note(e, db, rc, "attach");
    *attached = true;
    return qjit_db_schema_check_ro(db, as, e);
}

QJIT_API qjit_status qjit_cache_db_export(qjit_cache_db *d, const char *out_path,
                                          const qjit_cache_filter *f, uint64_t *copied,
                                          uint64_t *bad)
{
    qjit_status st = QJIT_OK;
    sqlite3 *out = NULL;
    sqlite3_stmt *q = NULL;
    qjit_dberr e = {0};
    int recreated, rc;
    bool created = false, attached = false;
    char *out_uri = NULL;
    struct stat sb;
    if (copied)
        *copied = 0;
    if (bad)
        *bad = 0;
    if (!d || !out_path || !*out_path)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_export: %s is NULL",
                            !d ? "db" : "out_path");
    if (!d->db)
        return qjit_adm_unusable(d);
    if (f && f->key_prefix && *f->key_prefix && qjit_adm_check_prefix(f->key_prefix, 1) != QJIT_OK)
        return QJIT_ERROR_INVALID_ARGUMENT;
    if (stat(out_path, &sb) == 0)
        return qjit_err_set(QJIT_ERROR_IO, "cache export: %s already exists", out_path);
    if (!(out_uri = qjit_db_file_uri(out_path, "mode=rwc")))
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache export: no memory");
    rc = sqlite3_open_v2(out_uri, &out,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL);
    free(out_uri);
    created = rc == SQLITE_OK;
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(out);
    if (rc != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "create");
        st = (rc & 0xff) == SQLITE_CANTOPEN ? QJIT_ERROR_IO : QJIT_ERROR_CACHE;
        goto fail;
    }
    /* rollback journal, not WAL: the result is one self-contained file to ship */
    if ((rc = qjit_db_exec(out, "PRAGMA journal_mode=DELETE")) != SQLITE_OK ||
        (rc = qjit_db_schema_ensure(out, true, &recreated, &e)) != SQLITE_OK ||
        (rc = qjit_adm_attach(out, d->uri, "src", &attached, &e)) != SQLITE_OK) {
        if (!e.msg[0])
            qjit_db_note(&e, out, rc, "create");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if ((rc = qjit_db_exec(out, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_prepare(out, "INSERT INTO main.kernels(" ROW_COLUMNS ") SELECT " ROW_COLUMNS
                           " FROM src.kernels WHERE " FILTER_SQL
                           " AND qjit_row_ok(" ROW_OK_ARGS ") ORDER BY rowid", &q)) != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    qjit_adm_bind_filter(q, f);
    if ((rc = qjit_db_step(q)) != SQLITE_DONE) {
        qjit_db_note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if (copied)
        *copied = (uint64_t)sqlite3_changes(out);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = qjit_db_prepare(out, "SELECT count(*) FROM src.kernels WHERE " FILTER_SQL
                           " AND NOT qjit_row_ok(" ROW_OK_ARGS ")", &q)) != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    qjit_adm_bind_filter(q, f);
    if ((rc = qjit_db_step(q)) != SQLITE_ROW) {
        qjit_db_note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if (bad)
        *bad = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = copy_tuning(out, "src", f, &e)) != SQLITE_OK) {
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if ((rc = qjit_db_exec(out, "COMMIT")) != SQLITE_OK ||
        (rc = qjit_db_exec(out, "DETACH src")) != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "export commit");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if ((rc = sqlite3_close(out)) != SQLITE_OK) {
        qjit_db_note(&e, out, rc, "close");
        st = QJIT_ERROR_IO;
        goto fail;
    }
    return QJIT_OK;
fail:
    sqlite3_finalize(q);
    if (out) {
        qjit_db_rollback(out);
        sqlite3_close_v2(out);
    }
    if (created) {
        char *j = qjit_db_join_path(out_path, "-journal");
        unlink(out_path);
        if (j)
            unlink(j);
        free(j);
    }
    if (copied)
        *copied = 0;
    return qjit_err_set(st, "cache export %s -> %s: %s", d->path, out_path, e.msg);
}

QJIT_API qjit_status qjit_cache_db_merge(qjit_cache_db *d, const char *other_path,
                                         uint64_t *added, uint64_t *bad)
{
    qjit_status st = qjit_adm_need_writable(d, "qjit_cache_db_merge");
    sqlite3_stmt *q = NULL;
    qjit_dberr e = {0};
    char *uri = NULL;
    struct stat a, b;
    bool attached = false;
    int rc;
    if (added)
        *added = 0;
    if (bad)
        *bad = 0;
    if (st != QJIT_OK)
        return st;
    if (!other_path || !*other_path)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_merge: other_path is NULL");
    if (stat(other_path, &b) != 0)
        return qjit_err_set(QJIT_ERROR_IO, "cache merge: %s: %s", other_path, strerror(errno));
    if (stat(d->path, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache merge: %s is the database itself", other_path);
    if (!(uri = qjit_db_file_uri(other_path, "mode=ro"))) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache merge: no memory");
        goto done;
    }
    if ((rc = qjit_adm_attach(d->db, uri, "other", &attached, &e)) != SQLITE_OK) {
        st = attached ? QJIT_ERROR_CACHE : QJIT_ERROR_IO;
        goto done;
    }
    if ((rc = qjit_db_exec(d->db, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_prepare(d->db, "INSERT INTO main.kernels(" ROW_COLUMNS ") SELECT " ROW_COLUMNS
                             " FROM other.kernels WHERE qjit_row_ok(" ROW_OK_ARGS
                             ") ORDER BY rowid ON CONFLICT(key) DO NOTHING", &q)) != SQLITE_OK ||
        (rc = qjit_db_step(q)) != SQLITE_DONE) {
        qjit_db_note(&e, d->db, rc, "merge");
        st = QJIT_ERROR_CACHE;
        goto done;
    }
    if (added)
        *added = (uint64_t)sqlite3_changes(d->db);
    sqlite3_finalize(q);
    q = NULL;
    sqlite3_int64 nbad = 0;
    if ((rc = copy_tuning(d->db, "other", NULL, &e)) != SQLITE_OK) {
        st = QJIT_ERROR_CACHE;
        goto done;
    }
    if ((rc = qjit_db_query_int(d->db, "SELECT count(*) FROM other.kernels WHERE NOT qjit_row_ok("
                               ROW_OK_ARGS ")", &nbad)) != SQLITE_OK ||
        (rc = qjit_db_exec(d->db, "COMMIT")) != SQLITE_OK) {
        qjit_db_note(&e, d->db, rc, "merge");
        st = QJIT_ERROR_CACHE;
        goto done;
    }
    if (bad)
        *bad = (uint64_t)nbad;
done:
    sqlite3_finalize(q);
    if (st != QJIT_OK) {
        qjit_db_rollback(d->db);
        if (added)
            *added = 0;
        if (e.msg[0])
            qjit_err_set(st, "cache merge %s -> %s: %s", other_path, d->path, e.msg);
    }
    if (attached)
        sqlite3_exec(d->db, "DETACH other", NULL, NULL, NULL);
    free(uri);
    return st;
}

