/*
 * cache_db.c — the SQL plumbing both sides of the cache share: the schema and its
 * version, statements that wait out locks, row validation (written once, also as the SQL
 * function qjit_row_ok), eviction, and the file-system helpers for the DB's place.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache_db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Give up on a lock only after this long (a process stuck holding it). */
#define RETRY_LIMIT_MS 120000

/* Small columns first: a scan of sizes and times stays on the row's first page. */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS kernels ("
    " key BLOB PRIMARY KEY NOT NULL,"  /* XXH3-128 of material, big-endian */
    " cubin_size INTEGER NOT NULL,"
    " cubin_hash BLOB NOT NULL,"       /* XXH3-128 of cubin */
    " source_size INTEGER NOT NULL,"   /* bytes of source */
    " compile_ms REAL NOT NULL,"
    " created INTEGER NOT NULL,"       /* unix ms */
    " last_used INTEGER NOT NULL,"     /* unix ms, strictly increasing within a DB */
    " arch TEXT NOT NULL,"
    " descriptor TEXT NOT NULL,"
    " material BLOB NOT NULL,"
    " cubin BLOB NOT NULL,"
    " source TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS kernels_lru ON kernels(last_used, cubin_size, source_size);"
    "CREATE INDEX IF NOT EXISTS kernels_arch ON kernels(arch);";

/* Version 2 adds the tuning results: every measured candidate of a problem (a descriptor
 * with auto configuration fields, on one GPU and arch, at one M bucket, N and K); the
 * winner of a problem is its fastest checked row, so it is never stored apart. */
static const char tuning_sql[] =
    "CREATE TABLE IF NOT EXISTS tuning ("
    " gpu TEXT NOT NULL,"              /* device name, "NVIDIA H100 80GB HBM3" */
    " arch TEXT NOT NULL,"
    " problem TEXT NOT NULL,"          /* canonical descriptor, arch=auto */
    " bucket INTEGER NOT NULL,"        /* M bucket (qjit_m_bucket) */
    " n INTEGER NOT NULL,"
    " k INTEGER NOT NULL,"
    " config TEXT NOT NULL,"           /* canonical descriptor of the candidate, resolved */
    " m INTEGER NOT NULL,"             /* the M it was timed at */
    " us REAL NOT NULL,"               /* median time, microseconds */
    " ok INTEGER NOT NULL,"            /* 1: its output matched the reference */
    " created INTEGER NOT NULL,"       /* unix ms */
    " row_hash BLOB NOT NULL,"         /* qjit_db_tuning_hash of the fields above */
    " PRIMARY KEY (gpu, arch, problem, bucket, n, k, config));";

int64_t qjit_db_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(int attempt)
{
    long ms = attempt < 6 ? 1L << attempt : 50;
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

bool qjit_db_is_busy(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* The file is damaged (as opposed to a row, or a lock, or the disk). */
bool qjit_db_is_corrupt(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

char *qjit_db_dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *qjit_db_join_path(const char *a, const char *b)
{
    qjit_buf p = {0};
    if (!qjit_buf_printf(&p, "%s%s", a, b)) {
        qjit_buf_free(&p);
        return NULL;
    }
    return p.data;
}

/* mkdir -p; 0 or an errno. */
int qjit_db_mkdir_p(const char *dir)
{
    char *p = qjit_db_dup_str(dir);
    int err = 0;
    if (!p)
        return ENOMEM;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            err = errno;
            break;
        }
        *s = c;
        if (!c)
            break;
    }
    struct stat st;
    if (!err && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        err = ENOTDIR;
    free(p);
    return err;
}

/* The default directory of the writable DB (allocated); NULL if no variable says. */
char *qjit_db_default_dir(void)
{
    const char *d = getenv("QJIT_CACHE_DIR");
    if (d && *d)
        return qjit_db_dup_str(d);
    d = getenv("XDG_CACHE_HOME");
    if (d && *d == '/') /* the XDG spec ignores relative values */
        return qjit_db_join_path(d, "/qjit");
    d = getenv("HOME");
    if (d && *d)
        return qjit_db_join_path(d, "/.cache/qjit");
    return NULL;
}

/* "file:" URI of a path with a query, for read-only and immutable opens. */
char *qjit_db_file_uri(const char *path, const char *query)
{
    static const char hex[] = "0123456789ABCDEF";
    qjit_buf u = {0};
    bool ok = qjit_buf_append(&u, path[0] == '/' ? "file://" : "file:", path[0] == '/' ? 7 : 5);
    for (const unsigned char *s = (const unsigned char *)path; ok && *s; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
            strchr("/._-~", *s)) {
            ok = qjit_buf_append(&u, s, 1);
        } else {
            char e[3] = {'%', hex[*s >> 4], hex[*s & 15]};
            ok = qjit_buf_append(&u, e, 3);
        }
    }
    ok = ok && qjit_buf_printf(&u, "?%s", query);
    if (!ok) {
        qjit_buf_free(&u);
        return NULL;
    }
    return u.data;
}

/* NULL when a row is whole; else what is wrong with it.  Checks everything a row can
 * check about itself: the key is the hash of the material, the cubin has its size and
 * hash, the source its size. */
const char *qjit_db_row_check(const void *key, int key_len, const void *material, int mlen,
                             const void *cubin, int clen, sqlite3_int64 cubin_size,
                             const void *chash, int chash_len, int source_len,
                             sqlite3_int64 source_size)
{
    uint8_t h[16];
    if (key_len != 16 || !key)
        return "key is not 16 bytes";
    if (mlen <= 0 || !material)
        return "no key material";
    qjit_hash128(material, (size_t)mlen, h);
    if (memcmp(h, key, 16) != 0)
        return "key is not the hash of its material";
    if (clen <= 0 || !cubin || clen != cubin_size)
        return "cubin size";
    if (chash_len != 16 || !chash)
        return "cubin hash missing";
    qjit_hash128(cubin, (size_t)clen, h);
    if (memcmp(h, chash, 16) != 0)
        return "cubin hash";
    if (source_len != source_size)
        return "source size";
    return NULL;
}

/* SQL qjit_row_ok(key, material, cubin, cubin_size, cubin_hash, source, source_size). */
static void sql_row_ok(sqlite3_context *cx, int argc, sqlite3_value **v)
{
    (void)argc;
    const void *key = sqlite3_value_blob(v[0]);
    int key_len = sqlite3_value_bytes(v[0]);
    const void *mat = sqlite3_value_blob(v[1]);
    int mat_len = sqlite3_value_bytes(v[1]);
    const void *cubin = sqlite3_value_blob(v[2]);
    int cubin_len = sqlite3_value_bytes(v[2]);
    const void *ch = sqlite3_value_blob(v[4]);
    int ch_len = sqlite3_value_bytes(v[4]);
    sqlite3_value_text(v[5]);
    int src_len = sqlite3_value_bytes(v[5]);
    const char *why = qjit_db_row_check(key, key_len, mat, mat_len, cubin, cubin_len,
                                sqlite3_value_int64(v[3]), ch, ch_len, src_len,
                                sqlite3_value_int64(v[6]));
    sqlite3_result_int(cx, why == NULL);
}

/* prepare, retrying while the schema is locked. */
int qjit_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    int64_t t0 = mono_ms();
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
        if (!qjit_db_is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
            return rc;
        nap(attempt);
    }
}

/* step, retrying on BUSY.  Only used where a retry is legal: outside an explicit
 * transaction, for BEGIN IMMEDIATE and COMMIT, or inside a write transaction we
 * already hold (where no lock is waited for). */
int qjit_db_step(sqlite3_stmt *st)
{
    int64_t t0 = mono_ms();
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_step(st);
        if (!qjit_db_is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
            return rc;
        nap(attempt);
    }
}

/* Run every statement of sql; SQLITE_OK or the first error. */
int qjit_db_exec(sqlite3 *db, const char *sql)
{
    while (sql && *sql) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        int64_t t0 = mono_ms();
        int rc;
        for (int attempt = 0;; attempt++) {
            rc = sqlite3_prepare_v2(db, sql, -1, &st, &tail);
            if (!qjit_db_is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
                break;
            nap(attempt);
        }
        if (rc != SQLITE_OK)
            return rc;
        if (!st) /* whitespace or a comment */
            break;
        while ((rc = qjit_db_step(st)) == SQLITE_ROW) {
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return rc;
        sql = tail;
    }
    return SQLITE_OK;
}

/* One integer from a query (PRAGMA user_version, count(*)). */
int qjit_db_query_int(sqlite3 *db, const char *sql, sqlite3_int64 *out)
{
    sqlite3_stmt *st = NULL;
    int rc = qjit_db_prepare(db, sql, &st);
    if (rc == SQLITE_OK) {
        rc = qjit_db_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_ERROR;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* Roll back a transaction a failure left open (SQLite closes some by itself). */
void qjit_db_rollback(sqlite3 *db)
{
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int qjit_db_note(qjit_dberr *e, sqlite3 *db, int rc, const char *what)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    e->rc = rc;
    if (strcmp(msg, sqlite3_errstr(rc)) == 0)
        snprintf(e->msg, sizeof e->msg, "%s: %s", what, msg);
    else
        snprintf(e->msg, sizeof e->msg, "%s: %s (%s)", what, msg, sqlite3_errstr(rc));
    return rc;
}

/* Settings every connection gets. */
/* SQL qjit_tuning_ok(gpu, arch, problem, bucket, n, k, config, m, us, ok, row_hash). */
static void sql_tuning_ok(sqlite3_context *cx, int argc, sqlite3_value **v)
{
    (void)argc;
    const char *t[5];
    static const int text_cols[5] = {0, 1, 2, 6, 6};
    for (int i = 0; i < 4; i++) {
        t[i] = (const char *)sqlite3_value_text(v[text_cols[i]]);
        if (!t[i]) {
            sqlite3_result_int(cx, 0);
            return;
        }
    }
    qjit_tuning_row r = {t[0],
                         t[1],
                         t[2],
                         sqlite3_value_int(v[3]),
                         sqlite3_value_int64(v[4]),
                         sqlite3_value_int64(v[5]),
                         t[3],
                         sqlite3_value_int64(v[7]),
                         sqlite3_value_double(v[8]),
                         sqlite3_value_int(v[9])};
    uint8_t h[16];
    qjit_db_tuning_hash(&r, h);
    sqlite3_result_int(cx, sqlite3_value_bytes(v[10]) == 16 &&
                               memcmp(sqlite3_value_blob(v[10]), h, 16) == 0);
}

int qjit_db_configure(sqlite3 *db)
{
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, QJIT_DB_BUSY_TIMEOUT_MS);
    int rc = sqlite3_create_function(db, "qjit_row_ok", 7, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                     NULL, sql_row_ok, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "qjit_tuning_ok", 11,
                                     SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_tuning_ok,
                                     NULL, NULL);
    return rc;
}

/* Whether db (schema "main" or an attached name) has the kernels table. */
static int has_named_table(sqlite3 *db, const char *schema, const char *name, bool *yes)
{
    char sql[192];
    sqlite3_int64 n = 0;
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM \"%s\".sqlite_master WHERE type='table' AND name='%s'",
             schema, name);
    int rc = qjit_db_query_int(db, sql, &n);
    *yes = n > 0;
    return rc;
}

static int has_table(sqlite3 *db, const char *schema, bool *yes)
{
    return has_named_table(db, schema, "kernels", yes);
}

bool qjit_db_has_tuning(sqlite3 *db, const char *schema)
{
    bool yes = false;
    return has_named_table(db, schema, "tuning", &yes) == SQLITE_OK && yes;
}

/* Whether the tables of `schema` have every column qjit reads: a byte damaged inside the
 * schema's own text (the CREATE TABLE statements in page 1) can rename a column and leave
 * a file SQLite opens without complaint.  A missing column reads as SQLITE_CORRUPT, so that
 * the file is repaired like any other damage.  With tuning false, the tuning table is not
 * asked for (a version 1 DB has none). */
static int columns_ok(sqlite3 *db, const char *schema, bool tuning, qjit_dberr *e)
{
    static const char *const tables[2][2] = {
        {"kernels", "key, cubin_size, cubin_hash, source_size, compile_ms, created, last_used, "
                    "arch, descriptor, material, cubin, source"},
        {"tuning", "gpu, arch, problem, bucket, n, k, config, m, us, ok, created, row_hash"},
    };
    for (int t = 0; t < (tuning ? 2 : 1); t++) {
        char sql[320];
        snprintf(sql, sizeof sql, "SELECT %s FROM \"%s\".%s LIMIT 0", tables[t][1], schema,
                 tables[t][0]);
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        sqlite3_finalize(st);
        if (rc == SQLITE_ERROR) { /* no such column or table: the schema text is damaged */
            snprintf(e->msg, sizeof e->msg, "the schema of table %s is damaged (%s)",
                     tables[t][0], sqlite3_errmsg(db));
            return e->rc = SQLITE_CORRUPT;
        }
        if (rc != SQLITE_OK)
            return qjit_db_note(e, db, rc, "read the schema");
    }
    return SQLITE_OK;
}

/* Make the schema current.  A DB of another version is emptied and recreated when
 * allowed (*recreated = old version), else left alone (SQLITE_MISMATCH).  A current
 * schema whose tables lack a column is damage (SQLITE_CORRUPT: see columns_ok). */
int qjit_db_schema_ensure(sqlite3 *db, bool allow_recreate, int *recreated, qjit_dberr *e)
{
    sqlite3_int64 v = 0;
    bool table = false;
    int rc;
    *recreated = -1;
    if ((rc = qjit_db_exec(db, "BEGIN IMMEDIATE")) != SQLITE_OK)
        return qjit_db_note(e, db, rc, "lock for schema");
    if ((rc = qjit_db_query_int(db, "PRAGMA user_version", &v)) != SQLITE_OK ||
        (rc = has_table(db, "main", &table)) != SQLITE_OK) {
        qjit_db_note(e, db, rc, "read schema version");
        goto done;
    }
    if (v == QJIT_DB_SCHEMA_VERSION && table) {
        rc = columns_ok(db, "main", true, e);
        goto done;
    }
    if (v == 1 && table) { /* version 1 lacks only the tuning table: add it, keep every row */
        if ((rc = columns_ok(db, "main", false, e)) != SQLITE_OK)
            goto done;
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", QJIT_DB_SCHEMA_VERSION);
        if ((rc = qjit_db_exec(db, tuning_sql)) != SQLITE_OK ||
            (rc = qjit_db_exec(db, sql)) != SQLITE_OK)
            qjit_db_note(e, db, rc, "add the tuning table (schema 1 -> 2)");
        goto done;
    }
    if (table || v != 0) {
        if (!allow_recreate) {
            rc = SQLITE_MISMATCH;
            snprintf(e->msg, sizeof e->msg,
                     "schema version %lld%s, this qjit reads version %d", (long long)v,
                     table ? "" : " without a kernels table", QJIT_DB_SCHEMA_VERSION);
            e->rc = rc;
            goto done;
        }
        *recreated = (int)v;
        if ((rc = qjit_db_exec(db, "DROP TABLE IF EXISTS kernels; DROP TABLE IF EXISTS tuning")) !=
            SQLITE_OK) {
            qjit_db_note(e, db, rc, "drop old table");
            goto done;
        }
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version=%d", QJIT_DB_SCHEMA_VERSION);
    if ((rc = qjit_db_exec(db, schema_sql)) != SQLITE_OK ||
        (rc = qjit_db_exec(db, tuning_sql)) != SQLITE_OK || (rc = qjit_db_exec(db, sql)) != SQLITE_OK)
        qjit_db_note(e, db, rc, "create schema");
done:
    if (rc == SQLITE_OK && (rc = qjit_db_exec(db, "COMMIT")) != SQLITE_OK)
        qjit_db_note(e, db, rc, "commit schema");
    if (rc != SQLITE_OK)
        qjit_db_rollback(db);
    return rc;
}

/* Check a read-only DB's schema version without writing. */
int qjit_db_schema_check_ro(sqlite3 *db, const char *schema, qjit_dberr *e)
{
    sqlite3_int64 v = 0;
    bool table = false;
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA \"%s\".user_version", schema);
    int rc = qjit_db_query_int(db, sql, &v);
    if (rc == SQLITE_OK)
        rc = has_table(db, schema, &table);
    if (rc != SQLITE_OK)
        return qjit_db_note(e, db, rc, "read schema version");
    /* version 1 reads as 2 without tuning results */
    if ((v != QJIT_DB_SCHEMA_VERSION && v != 1) || !table) {
        snprintf(e->msg, sizeof e->msg, "schema version %lld%s, this qjit reads versions 1 and %d",
                 (long long)v, table ? "" : " without a kernels table", QJIT_DB_SCHEMA_VERSION);
        return e->rc = SQLITE_MISMATCH;
    }
    return columns_ok(db, schema, v == QJIT_DB_SCHEMA_VERSION, e);
}

/* Delete least-recently-used rows until cubin + source bytes <= cap.  Inside a write
 * transaction held by the caller. */
int qjit_db_evict(sqlite3 *db, uint64_t cap, uint64_t *removed, qjit_dberr *e)
{
    sqlite3_stmt *st = NULL, *del = NULL;
    sqlite3_int64 total = 0, *ids = NULL;
    size_t n = 0, nids = 0;
    int rc = qjit_db_query_int(db, "SELECT coalesce(sum(cubin_size + source_size), 0) FROM kernels",
                       &total);
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "sum sizes");
        goto done;
    }
    if ((uint64_t)total <= cap)
        goto done;
    rc = qjit_db_prepare(db, "SELECT rowid, cubin_size + source_size FROM kernels "
                     "ORDER BY last_used, rowid", &st);
    /* collect first, delete after: a table is not changed under an open scan of it */
    while (rc == SQLITE_OK && (uint64_t)total > cap) {
        rc = qjit_db_step(st);
        if (rc != SQLITE_ROW)
            break;
        rc = SQLITE_OK;
        if (n == nids) {
            size_t cap2 = nids ? nids * 2 : 64;
            sqlite3_int64 *g = realloc(ids, cap2 * sizeof *ids);
            if (!g) {
                rc = SQLITE_NOMEM;
                break;
            }
            ids = g;
            nids = cap2;
        }
        ids[n++] = sqlite3_column_int64(st, 0);
        total -= sqlite3_column_int64(st, 1);
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "scan for eviction");
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = qjit_db_prepare(db, "DELETE FROM kernels WHERE rowid = ?1", &del)) != SQLITE_OK) {
        qjit_db_note(e, db, rc, "evict");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int64(del, 1, ids[i]);
        if ((rc = qjit_db_step(del)) != SQLITE_DONE) {
            qjit_db_note(e, db, rc, "evict");
            goto done;
        }
        sqlite3_reset(del);
    }
    rc = SQLITE_OK;
    if (removed)
        *removed += n;
done:
    sqlite3_finalize(st);
    sqlite3_finalize(del);
    free(ids);
    return rc;
}

/* Length-prefixed fields: the bytes a tuning row's hash covers. */
static bool put_field(qjit_buf *b, const char *s)
{
    size_t n = strlen(s);
    return qjit_buf_printf(b, "%zu:", n) && qjit_buf_append(b, s, n);
}

void qjit_db_tuning_hash(const qjit_tuning_row *r, uint8_t out[16])
{
    qjit_buf b = {0};
    char num[160];
    snprintf(num, sizeof num, "%d %lld %lld %lld %.17g %d", r->bucket, (long long)r->n,
             (long long)r->k, (long long)r->m, r->us, r->ok);
    bool ok = put_field(&b, r->gpu) && put_field(&b, r->arch) && put_field(&b, r->problem) &&
              put_field(&b, r->config) && put_field(&b, num);
    if (ok)
        qjit_hash128(b.data, b.len, out);
    else
        memset(out, 0, 16); /* no memory: a hash no row has, so the row reads as damaged */
    qjit_buf_free(&b);
}

/* ---------------------------------------------------------------- check and salvage */
int qjit_db_check(sqlite3 *db, qjit_db_bad_fn fn, void *user, qjit_db_check_result *r)
{
    sqlite3_stmt *q = NULL;
    memset(r, 0, sizeof *r);
    int rc = qjit_db_prepare(db, "PRAGMA quick_check", &q);
    if (rc == SQLITE_OK)
        rc = qjit_db_step(q);
    if (rc == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(q, 0);
        r->integrity_ok = m && strcmp(m, "ok") == 0;
        snprintf(r->integrity, sizeof r->integrity, "%s", m ? m : "");
    } else {
        snprintf(r->integrity, sizeof r->integrity, "%s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(q);
    q = NULL;
    rc = qjit_db_prepare(db, "SELECT rowid, key, descriptor, material, cubin, cubin_size, "
                             "cubin_hash, source, source_size FROM kernels", &q);
    while (rc == SQLITE_OK && (rc = qjit_db_step(q)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        r->rows_checked++;
        sqlite3_column_text(q, 7); /* as text, so bytes counts UTF-8 like source_size */
        const char *why = qjit_db_row_check(
            sqlite3_column_blob(q, 1), sqlite3_column_bytes(q, 1), sqlite3_column_blob(q, 3),
            sqlite3_column_bytes(q, 3), sqlite3_column_blob(q, 4), sqlite3_column_bytes(q, 4),
            sqlite3_column_int64(q, 5), sqlite3_column_blob(q, 6), sqlite3_column_bytes(q, 6),
            sqlite3_column_bytes(q, 7), sqlite3_column_int64(q, 8));
        if (!why)
            continue;
        r->rows_bad++;
        char hex[33] = "";
        if (sqlite3_column_bytes(q, 1) == 16)
            qjit_key_hex(sqlite3_column_blob(q, 1), hex);
        const char *desc = (const char *)sqlite3_column_text(q, 2);
        if (fn && fn(user, sqlite3_column_int64(q, 0), hex, desc ? desc : "", why) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_NOMEM)
        return rc;
    if (rc != SQLITE_DONE) {
        /* rows that cannot be read: the file itself is damaged */
        if (r->integrity_ok || !r->integrity[0])
            snprintf(r->integrity, sizeof r->integrity, "reading rows: %s", sqlite3_errmsg(db));
        r->integrity_ok = 0;
        if (!qjit_db_is_corrupt(rc))
            return rc;
    }
    if (qjit_db_has_tuning(db, "main")) {
        sqlite3_int64 nt = 0, nb = 0;
        if (qjit_db_query_int(db, "SELECT count(*) FROM tuning", &nt) != SQLITE_OK ||
            qjit_db_query_int(db, "SELECT count(*) FROM tuning WHERE NOT " QJIT_DB_TUNING_OK,
                              &nb) != SQLITE_OK) {
            if (r->integrity_ok)
                snprintf(r->integrity, sizeof r->integrity, "reading tuning rows: %s",
                         sqlite3_errmsg(db));
            r->integrity_ok = 0;
        }
        r->tuning_checked = (uint64_t)nt;
        r->tuning_bad = (uint64_t)nb;
    }
    return SQLITE_OK;
}

int qjit_db_copy_verified(sqlite3 *src, sqlite3 *dst, uint64_t *found, uint64_t *kept,
                          qjit_dberr *e)
{
    sqlite3_stmt *q = NULL, *ins = NULL;
    sqlite3_int64 *ids = NULL;
    size_t nids = 0, capids = 0;
    int rc;
    *found = *kept = 0;
    /* the rowids first (table pages only), then each row on its own: a damaged page
     * costs the rows on it, not the rest of the walk */
    rc = qjit_db_prepare(src, "SELECT rowid FROM kernels", &q);
    while (rc == SQLITE_OK && qjit_db_step(q) == SQLITE_ROW) {
        if (nids == capids) {
            capids = capids ? capids * 2 : 64;
            sqlite3_int64 *g = realloc(ids, capids * sizeof *ids);
            if (!g) {
                rc = qjit_db_note(e, NULL, SQLITE_NOMEM, "salvage");
                goto done;
            }
            ids = g;
        }
        ids[nids++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    q = NULL;
    *found = nids;
    if ((rc = qjit_db_prepare(dst, "INSERT INTO kernels(" QJIT_DB_ROW_COLUMNS ") VALUES(?1, ?2, "
                                   "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
                                   "ON CONFLICT(key) DO NOTHING",
                              &ins)) != SQLITE_OK) {
        qjit_db_note(e, dst, rc, "salvage");
        goto done;
    }
    if (qjit_db_prepare(src, "SELECT " QJIT_DB_ROW_COLUMNS " FROM kernels WHERE rowid = ?1 "
                             "AND qjit_row_ok(" QJIT_DB_ROW_OK_ARGS ")", &q) == SQLITE_OK) {
        for (size_t i = 0; i < nids; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, ids[i]);
            if (qjit_db_step(q) != SQLITE_ROW)
                continue; /* gone, damaged, or does not verify */
            for (int c = 0; c < 12; c++)
                sqlite3_bind_value(ins, c + 1, sqlite3_column_value(q, c));
            if ((rc = qjit_db_step(ins)) != SQLITE_DONE) {
                qjit_db_note(e, dst, rc, "copy a row");
                goto done;
            }
            *kept += (uint64_t)sqlite3_changes(dst);
            sqlite3_reset(ins);
        }
    }
    rc = SQLITE_OK;
    sqlite3_finalize(q);
    q = NULL;
    sqlite3_finalize(ins);
    ins = NULL;
    /* the tuning results that still read back whole, as far as the damage lets them */
    if (qjit_db_has_tuning(src, "main") &&
        qjit_db_prepare(src, "SELECT " QJIT_DB_TUNING_COLUMNS " FROM tuning WHERE "
                             QJIT_DB_TUNING_OK, &q) == SQLITE_OK &&
        qjit_db_prepare(dst, "INSERT INTO tuning(" QJIT_DB_TUNING_COLUMNS ") VALUES(?1, ?2, "
                             "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT DO NOTHING",
                        &ins) == SQLITE_OK) {
        while (qjit_db_step(q) == SQLITE_ROW) {
            for (int c = 0; c < 12; c++)
                sqlite3_bind_value(ins, c + 1, sqlite3_column_value(q, c));
            qjit_db_step(ins);
            sqlite3_reset(ins);
        }
    }
done:
    sqlite3_finalize(q);
    sqlite3_finalize(ins);
    free(ids);
    return rc;
}
