/*
 * cache_admin.c — the public administration of cache DB files (qjit_cache_db_*), for
 * deployment pipelines and qjit-cache: open, list, stats, prune, vacuum, source and the
 * tuning results.  Verify and rebuild are in cache_verify.c, export and merge in
 * cache_ship.c.  No qjit_context is involved.
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

/* A handle with no file open: a damaged one, or one a rebuild could not reopen. */
qjit_status qjit_adm_unusable(qjit_cache_db *d)
{
    if (d->damage)
        return qjit_err_set(QJIT_ERROR_CACHE,
                            "cache %s: the file is damaged (%s): verify with repair rebuilds "
                            "it",
                            d->path, d->damage);
    return qjit_err_set(QJIT_ERROR_CACHE, "cache %s: not open (a rebuild failed to reopen it)",
                        d->path);
}

qjit_status qjit_adm_fail(qjit_cache_db *d, qjit_status st, const qjit_dberr *e)
{
    return qjit_err_set(st, "cache %s: %s", d ? d->path : "", e->msg);
}

qjit_status qjit_adm_error(qjit_cache_db *d, int rc, const char *what)
{
    qjit_dberr e;
    qjit_db_note(&e, d->db, rc, what);
    if (qjit_db_is_corrupt(rc))
        snprintf(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg),
                 "; the file is damaged: verify with repair rebuilds it");
    return qjit_adm_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_CACHE, &e);
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
    free(d->damage);
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

int qjit_adm_open_rw(qjit_cache_db *d, qjit_dberr *e)
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
    int rc = d->writable ? qjit_adm_open_rw(d, &e) : open_ro(d, &e);
    if (qjit_db_is_corrupt(rc) && d->db && is_sqlite_file(d->path)) {
        /* damaged pages: open anyway, so that verify can rebuild it; every other call
         * reports the damage */
        rc = SQLITE_OK;
    } else if (qjit_db_is_corrupt(rc) && qjit_db_looks_like_cache(d->path)) {
        /* a qjit cache SQLite cannot open at all (its header damaged): a handle with no
         * file open, which verify reports and repair rebuilds */
        sqlite3_close_v2(d->db);
        d->db = NULL;
        if (!(d->damage = qjit_db_dup_str(sqlite3_errstr(rc)))) {
            st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_cache_db_open: no memory");
            goto done;
        }
        rc = SQLITE_OK;
    } else if ((rc & 0xff) == SQLITE_NOTADB) {
        snprintf(e.msg, sizeof e.msg, "not a qjit cache (%s, and no qjit table in it): left "
                 "as it is", sqlite3_errstr(rc));
    }
    if (rc != SQLITE_OK) {
        st = qjit_adm_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY
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

qjit_status qjit_adm_check_prefix(const char *p, int min_len)
{
    size_t n = strlen(p);
    if ((int)n < min_len || n > 32 || strspn(p, "0123456789abcdefABCDEF") != n)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "cache: key prefix \"%s\" is not %d to 32 hex digits", p, min_len);
    return QJIT_OK;
}

qjit_status qjit_adm_bind_filter(sqlite3_stmt *st, const qjit_cache_filter *f)
{
    const char *v[3] = {f ? f->arch : NULL, f ? f->match : NULL, f ? f->key_prefix : NULL};
    if (v[2] && *v[2] && qjit_adm_check_prefix(v[2], 1) != QJIT_OK)
        return QJIT_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < 3; i++) {
        if (v[i] && *v[i])
            sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, i + 1);
    }
    return QJIT_OK;
}

void qjit_adm_fill_entry(sqlite3_stmt *st, qjit_cache_entry *en)
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

QJIT_API qjit_status qjit_cache_db_list(qjit_cache_db *d, const qjit_cache_filter *f,
                                        qjit_cache_entry_fn fn, void *user)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL;
    if (!d || !fn)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_list: %s is NULL",
                            !d ? "db" : "fn");
    if (!d->db)
        return qjit_adm_unusable(d);
    int rc = qjit_db_prepare(d->db, "SELECT " ENTRY_COLUMNS " FROM kernels WHERE " FILTER_SQL
                            " ORDER BY arch, descriptor", &q);
    if (rc != SQLITE_OK) {
        st = qjit_adm_error(d, rc, "list");
        goto done;
    }
    if ((st = qjit_adm_bind_filter(q, f)) != QJIT_OK)
        goto done;
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        qjit_cache_entry en;
        qjit_adm_fill_entry(q, &en);
        if (fn(user, &en))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = qjit_adm_error(d, rc, "list");
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
        return qjit_adm_unusable(d);
    memset(out, 0, sizeof *out);
    /* one read transaction: the numbers agree with each other */
    if ((rc = qjit_db_exec(d->db, "BEGIN")) != SQLITE_OK)
        return qjit_adm_error(d, rc, "stats");
    if ((rc = qjit_db_query_int(d->db, "PRAGMA user_version", &v)) != SQLITE_OK ||
        (rc = qjit_db_prepare(d->db, "SELECT count(*), coalesce(sum(cubin_size), 0), "
                             "coalesce(sum(source_size), 0) FROM kernels", &q)) != SQLITE_OK ||
        (rc = qjit_db_step(q)) != SQLITE_ROW) {
        st = qjit_adm_error(d, rc, "stats");
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
        st = qjit_adm_error(d, rc, "stats");
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
        st = qjit_adm_error(d, rc, "stats");
    out->file_bytes = file_size(d->path, "") + file_size(d->path, "-wal");
    if (st == QJIT_OK && qjit_db_has_tuning(d->db, "main")) {
        sqlite3_int64 nt = 0;
        if ((rc = qjit_db_query_int(d->db, "SELECT count(*) FROM tuning", &nt)) != SQLITE_OK)
            st = qjit_adm_error(d, rc, "stats");
        out->tuning_rows = (uint64_t)nt;
    }
done:
    sqlite3_finalize(q);
    qjit_db_rollback(d->db);
    return st;
}

qjit_status qjit_adm_need_writable(qjit_cache_db *d, const char *fn)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: db is NULL", fn);
    if (!d->db)
        return qjit_adm_unusable(d);
    if (!d->writable)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: cache %s was opened read-only",
                            fn, d->path);
    return QJIT_OK;
}

QJIT_API qjit_status qjit_cache_db_prune_age(qjit_cache_db *d, int64_t seconds,
                                             uint64_t *removed)
{
    sqlite3_stmt *q = NULL;
    qjit_status st = qjit_adm_need_writable(d, "qjit_cache_db_prune_age");
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
        st = qjit_adm_error(d, rc, "prune");
    else if (removed)
        *removed = (uint64_t)sqlite3_changes(d->db);
    sqlite3_finalize(q);
    return st;
}

/* One eviction down to `cap` bytes of kernels, in its own write transaction. */
static int evict_once(qjit_cache_db *d, uint64_t cap, uint64_t *n, qjit_dberr *e)
{
    int rc = qjit_db_exec(d->db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK)
        qjit_db_note(e, d->db, rc, "begin");
    else if ((rc = qjit_db_evict(d->db, cap, n, e)) == SQLITE_OK &&
             (rc = qjit_db_exec(d->db, "COMMIT")) != SQLITE_OK)
        qjit_db_note(e, d->db, rc, "commit");
    if (rc != SQLITE_OK)
        qjit_db_rollback(d->db);
    return rc;
}

/* The file (and its -wal) fits max_bytes, not only its kernels: evict least recently used
 * kernels, VACUUM, and while the file is still over, evict again to a kernel budget scaled
 * by the overhead the file showed (key material, indexes, page slack). */
QJIT_API qjit_status qjit_cache_db_prune_size(qjit_cache_db *d, uint64_t max_bytes,
                                              uint64_t *removed)
{
    qjit_dberr e = {0};
    uint64_t n = 0, budget = max_bytes;
    qjit_status st = qjit_adm_need_writable(d, "qjit_cache_db_prune_size");
    if (removed)
        *removed = 0;
    if (st != QJIT_OK)
        return st;
    int rc = SQLITE_OK;
    for (int round = 0; round < 16 && rc == SQLITE_OK; round++) {
        sqlite3_int64 kernels = 0;
        if ((rc = evict_once(d, budget, &n, &e)) != SQLITE_OK)
            break;
        if ((rc = qjit_db_exec(d->db, "VACUUM")) != SQLITE_OK ||
            (rc = qjit_db_exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE)")) != SQLITE_OK ||
            (rc = qjit_db_query_int(d->db, "SELECT coalesce(sum(cubin_size + source_size), 0) "
                                           "FROM kernels", &kernels)) != SQLITE_OK) {
            qjit_db_note(&e, d->db, rc, "vacuum");
            break;
        }
        uint64_t file = file_size(d->path, "") + file_size(d->path, "-wal");
        if (file <= max_bytes || kernels == 0)
            break; /* fits, or holds no kernel: an empty cache is as small as it gets */
        uint64_t next = (uint64_t)((double)kernels * ((double)max_bytes / (double)file));
        budget = next < (uint64_t)kernels ? next : (uint64_t)kernels - 1;
    }
    if (removed)
        *removed = n;
    if (rc != SQLITE_OK)
        return qjit_adm_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_CACHE,
                             &e);
    return QJIT_OK;
}

QJIT_API qjit_status qjit_cache_db_vacuum(qjit_cache_db *d)
{
    qjit_status st = qjit_adm_need_writable(d, "qjit_cache_db_vacuum");
    if (st != QJIT_OK)
        return st;
    int rc = qjit_db_exec(d->db, "VACUUM");
    if (rc == SQLITE_OK)
        rc = qjit_db_exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE)");
    return rc == SQLITE_OK ? QJIT_OK : qjit_adm_error(d, rc, "vacuum");
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
        return qjit_adm_unusable(d);
    *source = NULL;
    if (len)
        *len = 0;
    if ((st = qjit_adm_check_prefix(key_prefix, 4)) != QJIT_OK)
        return st;
    rc = qjit_db_prepare(d->db, "SELECT " ENTRY_COLUMNS ", source FROM kernels "
                        "WHERE substr(hex(key), 1, length(?1)) = upper(?1) LIMIT 9", &q);
    if (rc != SQLITE_OK) {
        st = qjit_adm_error(d, rc, "source");
        goto done;
    }
    sqlite3_bind_text(q, 1, key_prefix, -1, SQLITE_STATIC);
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        qjit_cache_entry en;
        qjit_adm_fill_entry(q, &en);
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
        st = qjit_adm_error(d, rc, "source");
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

QJIT_API qjit_status qjit_cache_db_tuning(qjit_cache_db *d, const qjit_cache_filter *f,
                                          qjit_cache_tuning_fn fn, void *user)
{
    qjit_status st = QJIT_OK;
    sqlite3_stmt *q = NULL;
    if (!d || !fn)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_db_tuning: %s is NULL",
                            !d ? "db" : "fn");
    if (!d->db)
        return qjit_adm_unusable(d);
    if (!qjit_db_has_tuning(d->db, "main") || (f && f->key_prefix && *f->key_prefix))
        return QJIT_OK;
    /* the winner: no faster ok row of the same problem point */
    int rc = qjit_db_prepare(
        d->db,
        "SELECT gpu, arch, problem, config, bucket, m, n, k, us, ok, created, "
        "ok = 1 AND NOT EXISTS (SELECT 1 FROM tuning u WHERE u.gpu = t.gpu AND u.arch = t.arch "
        "AND u.problem = t.problem AND u.bucket = t.bucket AND u.n = t.n AND u.k = t.k AND "
        "u.ok = 1 AND (u.us < t.us OR (u.us = t.us AND u.rowid < t.rowid))) "
        "FROM tuning t WHERE (?1 IS NULL OR instr(arch, ?1) > 0) AND "
        "(?2 IS NULL OR instr(problem, ?2) > 0) AND " QJIT_DB_TUNING_OK
        " ORDER BY gpu, arch, problem, n, k, bucket, us",
        &q);
    if (rc != SQLITE_OK)
        return qjit_adm_error(d, rc, "tuning");
    const char *v[2] = {f ? f->arch : NULL, f ? f->match : NULL};
    for (int i = 0; i < 2; i++)
        if (v[i] && *v[i])
            sqlite3_bind_text(q, i + 1, v[i], -1, SQLITE_STATIC);
    while ((rc = qjit_db_step(q)) == SQLITE_ROW) {
        const char *t[4];
        for (int i = 0; i < 4; i++) {
            t[i] = (const char *)sqlite3_column_text(q, i);
            t[i] = t[i] ? t[i] : "";
        }
        qjit_cache_tuning_entry en = {t[0], t[1], t[2], t[3], sqlite3_column_int(q, 4),
                                      sqlite3_column_int64(q, 5), sqlite3_column_int64(q, 6),
                                      sqlite3_column_int64(q, 7), sqlite3_column_double(q, 8),
                                      sqlite3_column_int(q, 9),
                                      sqlite3_column_int(q, 11),
                                      sqlite3_column_int64(q, 10) / 1000};
        if (fn(user, &en))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        st = qjit_adm_error(d, rc, "tuning");
    sqlite3_finalize(q);
    return st;
}
