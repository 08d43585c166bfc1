/*
 * cache_admin.c — the public administration of cache DB files (qjit_cache_db_*), for
 * deployment pipelines and qjit-cache: list, stats, verify and rebuild, prune, vacuum,
 * export, merge, source.  No qjit_context is involved.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache_db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROW_COLUMNS QJIT_DB_ROW_COLUMNS
#define ROW_OK_ARGS QJIT_DB_ROW_OK_ARGS

struct qjit_cache_db {
    sqlite3 *db;
    char *path;
    char *uri;          /* how it was opened, to attach it elsewhere the same way */
    int writable;
    char *entry_desc, *entry_arch; /* what qjit_cache_db_source's entry points at */
};

/* A handle whose file could not be reopened after a rebuild. */
static qjit_status unusable(qjit_cache_db *d)
{
    return qjit_err_set(QJIT_ERROR_CACHE, "cache %s: not open (a rebuild failed to reopen it)",
                        d->path);
}

static qjit_status db_fail(qjit_cache_db *d, qjit_status st, const qjit_dberr *e)
{
    return qjit_err_set(st, "cache %s: %s", d ? d->path : "", e->msg);
}

static qjit_status db_error(qjit_cache_db *d, int rc, const char *what)
{
    qjit_dberr e;
    qjit_db_note(&e, d->db, rc, what);
    if (qjit_db_is_corrupt(rc))
        snprintf(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg),
                 "; the file is damaged: verify with repair rebuilds it");
    return db_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_CACHE, &e);
}

QJIT_API qjit_status qjit_cache_default_path(char *buf, size_t cap, size_t *len)
{
    char *dir = qjit_db_default_dir();
    if (!dir)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache: none of QJIT_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
    int n = snprintf(buf, buf ? cap : 0, "%s/qjit.db", dir);
    free(dir);
    if (len)
        *len = (size_t)n;
    if (!buf || (size_t)n >= cap)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_cache_default_path: needs %d bytes, buffer has %zu", n + 1,
                            buf ? cap : 0);
    return QJIT_OK;
}

QJIT_API void qjit_cache_free(void *p) { free(p); }

QJIT_API void qjit_cache_db_close(qjit_cache_db *d)
{
    if (!d)
        return;
    sqlite3_close_v2(d->db);
    free(d->path);
    free(d->uri);
    free(d->entry_desc);
    free(d->entry_arch);
    free(d);
}

/* Open d->path read-only: plain, or immutable when even a -shm cannot be made (a
 * read-only directory holding a WAL-mode file). */
static int open_ro(qjit_cache_db *d, qjit_dberr *e)
{
    static const char *const queries[] = {"mode=ro", "immutable=1"};
    int rc = SQLITE_CANTOPEN;
    for (int i = 0; i < 2; i++) {
        sqlite3_close_v2(d->db);
        d->db = NULL;
        free(d->uri);
        if (!(d->uri = qjit_db_file_uri(d->path, queries[i])))
            return qjit_db_note(e, NULL, SQLITE_NOMEM, "open");
        rc = sqlite3_open_v2(d->uri, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
        if (rc == SQLITE_OK)
            rc = qjit_db_configure(d->db);
        if (rc == SQLITE_OK)
            rc = qjit_db_schema_check_ro(d->db, "main", e);
        else
            qjit_db_note(e, d->db, rc, "open");
        if (rc == SQLITE_OK || qjit_db_is_corrupt(rc) || rc == SQLITE_MISMATCH)
            return rc;
    }
    return rc;
}

static int open_rw(qjit_cache_db *d, qjit_dberr *e)
{
    int recreated;
    int rc;
    if (!(d->uri = qjit_db_file_uri(d->path, "mode=rwc")))
        return qjit_db_note(e, NULL, SQLITE_NOMEM, "open");
    rc = sqlite3_open_v2(d->uri, &d->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(d->db);
    if (rc != SQLITE_OK)
        return qjit_db_note(e, d->db, rc, "open");
    if (sqlite3_db_readonly(d->db, "main") == 1)
        return qjit_db_note(e, d->db, SQLITE_READONLY, "open for writing");
    if ((rc = qjit_db_exec(d->db, "PRAGMA journal_mode=WAL")) != SQLITE_OK ||
        (rc = qjit_db_exec(d->db, "PRAGMA synchronous=NORMAL")) != SQLITE_OK)
        return qjit_db_note(e, d->db, rc, "set journal mode");
    return qjit_db_schema_ensure(d->db, false, &recreated, e);
}

/* Whether a file starts with SQLite's header: repairs never touch anything else. */
static bool is_sqlite_file(const char *path)
{
    char head[16] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    return n == sizeof head && memcmp(head, "SQLite format 3", 16) == 0;
}

QJIT_API qjit_status qjit_cache_db_open(const char *path, int writable, qjit_cache_db **out)
{
    qjit_status st = QJIT_OK;
    qjit_dberr e = {0};
    qjit_cache_db *d = NULL;
    char *dir = NULL;
    struct stat sb;
    if (!out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_open: out is NULL");
    *out = NULL;
    if (!(d = calloc(1, sizeof *d)))
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_cache_db_open: no memory");
    d->writable = writable != 0;
    if (path && *path) {
        d->path = qjit_db_dup_str(path);
    } else if ((dir = qjit_db_default_dir())) {
        d->path = qjit_db_join_path(dir, "/qjit.db");
    } else {
        st = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                          "cache: no path given and none of QJIT_CACHE_DIR, XDG_CACHE_HOME, "
                          "HOME is set");
        goto done;
    }
    if (!d->path) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_cache_db_open: no memory");
        goto done;
    }
    if (!d->writable && stat(d->path, &sb) != 0) {
        st = qjit_err_set(QJIT_ERROR_IO, "cache %s: %s", d->path, strerror(errno));
        goto done;
    }
    if (d->writable && !(path && *path)) {
        int err = qjit_db_mkdir_p(dir);
        if (err) {
            st = qjit_err_set(QJIT_ERROR_IO, "cache dir %s: %s", dir, strerror(err));
            goto done;
        }
    }
    int rc = d->writable ? open_rw(d, &e) : open_ro(d, &e);
    if (qjit_db_is_corrupt(rc) && d->db && is_sqlite_file(d->path)) {
        /* damaged pages: open anyway, so that verify can rebuild it; every other call
         * reports the damage */
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        st = db_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY
                        : (rc & 0xff) == SQLITE_CANTOPEN ? QJIT_ERROR_IO
                                                         : QJIT_ERROR_CACHE,
                     &e);
        goto done;
    }
    *out = d;
    d = NULL;
done:
    free(dir);
    qjit_cache_db_close(d);
    return st;
}

/* The filter as three bound parameters of a WHERE clause. */
#define FILTER_SQL                                                                       \
    "(?1 IS NULL OR instr(arch, ?1) > 0) AND (?2 IS NULL OR instr(descriptor, ?2) > 0) " \
    "AND (?3 IS NULL OR substr(hex(key), 1, length(?3)) = upper(?3))"

static qjit_status check_prefix(const char *p, int min_len)
{
    size_t n = strlen(p);
    if ((int)n < min_len || n > 32 || strspn(p, "0123456789abcdefABCDEF") != n)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache: key prefix \"%s\" is not %d to 32 hex digits", p, min_len);
    return QJIT_OK;
}

static qjit_status bind_filter(sqlite3_stmt *st, const qjit_cache_filter *f)
{
    const char *v[3] = {f ? f->arch : NULL, f ? f->match : NULL, f ? f->key_prefix : NULL};
    if (v[2] && *v[2] && check_prefix(v[2], 1) != QJIT_OK)
        return QJIT_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < 3; i++) {
        if (v[i] && *v[i])
            sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, i + 1);
    }
    return QJIT_OK;
}

static void fill_entry(sqlite3_stmt *st, qjit_cache_entry *en)
{
    memset(en, 0, sizeof *en);
    if (sqlite3_column_bytes(st, 0) == 16)
        qjit_key_hex(sqlite3_column_blob(st, 0), en->key);
    en->desc = (const char *)sqlite3_column_text(st, 1);
    en->arch = (const char *)sqlite3_column_text(st, 2);
    en->desc = en->desc ? en->desc : "";
    en->arch = en->arch ? en->arch : "";
    en->cubin_bytes = (uint64_t)sqlite3_column_int64(st, 3);
    en->source_bytes = (uint64_t)sqlite3_column_int64(st, 4);
    en->compile_ms = sqlite3_column_double(st, 5);
    en->created = sqlite3_column_int64(st, 6) / 1000;
    en->last_used = sqlite3_column_int64(st, 7) / 1000;
}

#define ENTRY_COLUMNS                                                                    \
    "key, descriptor, arch, cubin_size, source_size, compile_ms, created, last_used"

QJIT_API qjit_status qjit_cache_db_list(qjit_cache_db *d, const qjit_cache_filter *f,
                                        qjit_cache_entry_fn fn, void *user)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL;
    if (!d || !fn)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_list: %s is NULL",
                            !d ? "db" : "fn");
    if (!d->db)
        return unusable(d);
    int rc = qjit_db_prepare(d->db, "SELECT " ENTRY_COLUMNS " FROM kernels WHERE " FILTER_SQL
                            " ORDER BY arch, descriptor", &q);
    if (rc != SQLITE_OK) {
        st = db_error(d, rc, "list");
        goto done;
    }
    if ((st = bind_filter(q, f)) != QJIT_OK)
        goto done;
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        qjit_cache_entry en;
        fill_entry(q, &en);
        if (fn(user, &en))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = db_error(d, rc, "list");
done:
    sqlite3_finalize(q);
    return st;
}

static uint64_t file_size(const char *path, const char *suffix)
{
    struct stat sb;
    char *p = qjit_db_join_path(path, suffix);
    uint64_t n = p && stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    free(p);
    return n;
}

QJIT_API qjit_status qjit_cache_db_stats(qjit_cache_db *d, qjit_cache_stats *out)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL;
    sqlite3_int64 v = 0;
    int rc;
    if (!d || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_stats: %s is NULL",
                            !d ? "db" : "out");
    if (!d->db)
        return unusable(d);
    memset(out, 0, sizeof *out);
    /* one read transaction: the numbers agree with each other */
    if ((rc = qjit_db_exec(d->db, "BEGIN")) != SQLITE_OK)
        return db_error(d, rc, "stats");
    if ((rc = qjit_db_query_int(d->db, "PRAGMA user_version", &v)) != SQLITE_OK ||
        (rc = qjit_db_prepare(d->db, "SELECT count(*), coalesce(sum(cubin_size), 0), "
                             "coalesce(sum(source_size), 0) FROM kernels", &q)) != SQLITE_OK ||
        (rc = qjit_db_step(q)) != SQLITE_ROW) {
        st = db_error(d, rc, "stats");
        goto done;
    }
    out->schema_version = (int)v;
    out->rows = (uint64_t)sqlite3_column_int64(q, 0);
    out->cubin_bytes = (uint64_t)sqlite3_column_int64(q, 1);
    out->source_bytes = (uint64_t)sqlite3_column_int64(q, 2);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = qjit_db_prepare(d->db, "SELECT arch, count(*), sum(cubin_size + source_size) "
                             "FROM kernels GROUP BY arch ORDER BY arch LIMIT 16", &q)) != SQLITE_OK) {
        st = db_error(d, rc, "stats");
        goto done;
    }
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        qjit_cache_arch_stats *a = &out->arch[out->narch++];
        const char *name = (const char *)sqlite3_column_text(q, 0);
        snprintf(a->arch, sizeof a->arch, "%s", name ? name : "");
        a->rows = (uint64_t)sqlite3_column_int64(q, 1);
        a->bytes = (uint64_t)sqlite3_column_int64(q, 2);
    }
    if (rc != SQLITE_DONE)
        st = db_error(d, rc, "stats");
    out->file_bytes = file_size(d->path, "") + file_size(d->path, "-wal");
done:
    sqlite3_finalize(q);
    qjit_db_rollback(d->db);
    return st;
}

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
    if (open_rw(d, &e) != SQLITE_OK) {
        sqlite3_close_v2(d->db);
        d->db = NULL;
        if (st == QJIT_OK)
            st = db_fail(d, QJIT_ERROR_CACHE, &e);
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
        return unusable(d);
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
            st = db_error(d, rc, "verify");
            goto done;
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    if (!repair_it)
        goto done;
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
        st = db_error(d, rc, "delete bad rows");
        goto done;
    }
    for (size_t i = 0; i < nbad; i++) {
        sqlite3_bind_int64(del, 1, bad[i]);
        if ((rc = qjit_db_step(del)) != SQLITE_DONE) {
            st = db_error(d, rc, "delete bad rows");
            goto done;
        }
        out->rows_deleted += (uint64_t)sqlite3_changes(d->db);
        sqlite3_reset(del);
    }
    if ((rc = qjit_db_exec(d->db, "COMMIT")) != SQLITE_OK)
        st = db_error(d, rc, "delete bad rows");
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

static qjit_status need_writable(qjit_cache_db *d, const char *fn)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: db is NULL", fn);
    if (!d->db)
        return unusable(d);
    if (!d->writable)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: cache %s was opened read-only",
                            fn, d->path);
    return QJIT_OK;
}

QJIT_API qjit_status qjit_cache_db_prune_age(qjit_cache_db *d, int64_t seconds,
                                             uint64_t *removed)
{
    sqlite3_stmt *q = NULL;
    qjit_status st = need_writable(d, "qjit_cache_db_prune_age");
    if (removed)
        *removed = 0;
    if (st != QJIT_OK)
        return st;
    if (seconds < 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_cache_db_prune_age: seconds=%lld is negative",
                            (long long)seconds);
    int rc = qjit_db_prepare(d->db, "DELETE FROM kernels WHERE last_used < ?1", &q);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, qjit_db_now_ms() - seconds * 1000);
        rc = qjit_db_step(q);
    }
    if (rc != SQLITE_DONE)
        st = db_error(d, rc, "prune");
    else if (removed)
        *removed = (uint64_t)sqlite3_changes(d->db);
    sqlite3_finalize(q);
    return st;
}

QJIT_API qjit_status qjit_cache_db_prune_size(qjit_cache_db *d, uint64_t max_bytes,
                                              uint64_t *removed)
{
    qjit_dberr e = {0};
    uint64_t n = 0;
    qjit_status st = need_writable(d, "qjit_cache_db_prune_size");
    if (removed)
        *removed = 0;
    if (st != QJIT_OK)
        return st;
    int rc = qjit_db_exec(d->db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK)
        qjit_db_note(&e, d->db, rc, "begin");
    else if ((rc = qjit_db_evict(d->db, max_bytes, &n, &e)) == SQLITE_OK &&
             (rc = qjit_db_exec(d->db, "COMMIT")) != SQLITE_OK)
        qjit_db_note(&e, d->db, rc, "commit");
    if (rc != SQLITE_OK) {
        qjit_db_rollback(d->db);
        return db_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_CACHE, &e);
    }
    if (removed)
        *removed = n;
    return QJIT_OK;
}

QJIT_API qjit_status qjit_cache_db_vacuum(qjit_cache_db *d)
{
    qjit_status st = need_writable(d, "qjit_cache_db_vacuum");
    if (st != QJIT_OK)
        return st;
    int rc = qjit_db_exec(d->db, "VACUUM");
    if (rc == SQLITE_OK)
        rc = qjit_db_exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE)");
    return rc == SQLITE_OK ? QJIT_OK : db_error(d, rc, "vacuum");
}

/* ATTACH a file read-only under the name `as`, checking its schema version. */
static int attach(sqlite3 *db, const char *uri, const char *as, bool *attached, qjit_dberr *e)
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
        return unusable(d);
    if (f && f->key_prefix && *f->key_prefix && check_prefix(f->key_prefix, 1) != QJIT_OK)
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
        (rc = attach(out, d->uri, "src", &attached, &e)) != SQLITE_OK) {
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
    bind_filter(q, f);
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
    bind_filter(q, f);
    if ((rc = qjit_db_step(q)) != SQLITE_ROW) {
        qjit_db_note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if (bad)
        *bad = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = qjit_db_exec(out, "COMMIT")) != SQLITE_OK || (rc = qjit_db_exec(out, "DETACH src")) != SQLITE_OK) {
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
    qjit_status st = need_writable(d, "qjit_cache_db_merge");
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
    if ((rc = attach(d->db, uri, "other", &attached, &e)) != SQLITE_OK) {
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

QJIT_API qjit_status qjit_cache_db_source(qjit_cache_db *d, const char *key_prefix,
                                          char **source, size_t *len, qjit_cache_entry *entry)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL;
    qjit_buf list = {0};
    int n = 0, rc;
    if (!d || !key_prefix || !source)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_source: %s is NULL",
                            !d ? "db" : !key_prefix ? "key_prefix" : "source");
    if (!d->db)
        return unusable(d);
    *source = NULL;
    if (len)
        *len = 0;
    if ((st = check_prefix(key_prefix, 4)) != QJIT_OK)
        return st;
    rc = qjit_db_prepare(d->db, "SELECT " ENTRY_COLUMNS ", source FROM kernels "
                        "WHERE substr(hex(key), 1, length(?1)) = upper(?1) LIMIT 9", &q);
    if (rc != SQLITE_OK) {
        st = db_error(d, rc, "source");
        goto done;
    }
    sqlite3_bind_text(q, 1, key_prefix, -1, SQLITE_STATIC);
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        qjit_cache_entry en;
        fill_entry(q, &en);
        if (n < 8)
            qjit_buf_printf(&list, "\n  %s %s", en.key, en.desc);
        if (n++)
            continue;
        const char *src = (const char *)sqlite3_column_text(q, 8);
        size_t sl = (size_t)sqlite3_column_bytes(q, 8);
        char *copy = malloc(sl + 1);
        char *dd = qjit_db_dup_str(en.desc), *da = qjit_db_dup_str(en.arch);
        if (!copy || !dd || !da) {
            free(copy);
            free(dd);
            free(da);
            st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory for a source");
            goto done;
        }
        memcpy(copy, src ? src : "", src ? sl : 0);
        copy[src ? sl : 0] = 0;
        *source = copy;
        if (len)
            *len = src ? sl : 0;
        free(d->entry_desc);
        free(d->entry_arch);
        d->entry_desc = dd;
        d->entry_arch = da;
        if (entry) {
            *entry = en;
            entry->desc = dd;
            entry->arch = da;
        }
    }
    if (rc != SQLITE_DONE) {
        st = db_error(d, rc, "source");
    } else if (n == 0) {
        st = qjit_err_set(QJIT_ERROR_NOT_FOUND, "cache %s: no key starts with %s", d->path,
                          key_prefix);
    } else if (n > 1) {
        st = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                          "cache %s: key prefix %s matches %s%d keys:%s", d->path, key_prefix,
                          n > 8 ? "more than " : "", n > 8 ? 8 : n, list.data ? list.data : "");
    }
done:
    if (st != QJIT_OK) {
        free(*source);
        *source = NULL;
        if (len)
            *len = 0;
    }
    sqlite3_finalize(q);
    qjit_buf_free(&list);
    return st;
}
