/*
 * cache.c — the SQLite store of compiled kernels: a writable DB (WAL, waits out locks,
 * schema version, self-repair), a read-only shipped DB under it, an in-memory fallback;
 * and the public cache administration calls (list, stats, verify, prune, export, merge).
 */
#define _POSIX_C_SOURCE 200809L
#include "qjit_internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The row layout is part of the cache format: user_version holds it. */
#define SCHEMA_VERSION QJIT_CACHE_FORMAT_VERSION
/* SQLite waits this long for a lock by itself; our loops retry on top of it. */
#define BUSY_TIMEOUT_MS 10000
/* Give up on a lock only after this long (a process stuck holding it). */
#define RETRY_LIMIT_MS 120000
/* A last-use update is a courtesy: never wait long for it. */
#define TOUCH_TIMEOUT_MS 200
#define MEMORY_PATH ":memory:"

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

#define ROW_COLUMNS                                                                      \
    "key, cubin_size, cubin_hash, source_size, compile_ms, created, last_used, arch, "   \
    "descriptor, material, cubin, source"
#define ROW_OK_ARGS "key, material, cubin, cubin_size, cubin_hash, source, source_size"

/* ---------------------------------------------------------------- helpers */

static int64_t now_ms(void)
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

static bool is_busy(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* The file is damaged (as opposed to a row, or a lock, or the disk). */
static bool is_corrupt(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static char *join_path(const char *a, const char *b)
{
    qjit_buf p = {0};
    if (!qjit_buf_printf(&p, "%s%s", a, b)) {
        qjit_buf_free(&p);
        return NULL;
    }
    return p.data;
}

/* mkdir -p; 0 or an errno. */
static int mkdir_p(const char *dir)
{
    char *p = dup_str(dir);
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
static char *default_dir(void)
{
    const char *d = getenv("QJIT_CACHE_DIR");
    if (d && *d)
        return dup_str(d);
    d = getenv("XDG_CACHE_HOME");
    if (d && *d == '/') /* the XDG spec ignores relative values */
        return join_path(d, "/qjit");
    d = getenv("HOME");
    if (d && *d)
        return join_path(d, "/.cache/qjit");
    return NULL;
}

/* "file:" URI of a path with a query, for read-only and immutable opens. */
static char *file_uri(const char *path, const char *query)
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
static const char *row_check(const void *key, int key_len, const void *material, int mlen,
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
    const char *why = row_check(key, key_len, mat, mat_len, cubin, cubin_len,
                                sqlite3_value_int64(v[3]), ch, ch_len, src_len,
                                sqlite3_value_int64(v[6]));
    sqlite3_result_int(cx, why == NULL);
}

/* prepare, retrying while the schema is locked. */
static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    int64_t t0 = mono_ms();
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
        if (!is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
            return rc;
        nap(attempt);
    }
}

/* step, retrying on BUSY.  Only used where a retry is legal: outside an explicit
 * transaction, for BEGIN IMMEDIATE and COMMIT, or inside a write transaction we
 * already hold (where no lock is waited for). */
static int step(sqlite3_stmt *st)
{
    int64_t t0 = mono_ms();
    for (int attempt = 0;; attempt++) {
        int rc = sqlite3_step(st);
        if (!is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
            return rc;
        nap(attempt);
    }
}

/* Run every statement of sql; SQLITE_OK or the first error. */
static int exec(sqlite3 *db, const char *sql)
{
    while (sql && *sql) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        int64_t t0 = mono_ms();
        int rc;
        for (int attempt = 0;; attempt++) {
            rc = sqlite3_prepare_v2(db, sql, -1, &st, &tail);
            if (!is_busy(rc) || mono_ms() - t0 > RETRY_LIMIT_MS)
                break;
            nap(attempt);
        }
        if (rc != SQLITE_OK)
            return rc;
        if (!st) /* whitespace or a comment */
            break;
        while ((rc = step(st)) == SQLITE_ROW) {
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return rc;
        sql = tail;
    }
    return SQLITE_OK;
}

/* One integer from a query (PRAGMA user_version, count(*)). */
static int query_int(sqlite3 *db, const char *sql, sqlite3_int64 *out)
{
    sqlite3_stmt *st = NULL;
    int rc = prepare(db, sql, &st);
    if (rc == SQLITE_OK) {
        rc = step(st);
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
static void rollback(sqlite3 *db)
{
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

/* The message of the last failure on db, before a rollback overwrites it. */
typedef struct dberr {
    int rc;
    char msg[512];
} dberr;

static int note(dberr *e, sqlite3 *db, int rc, const char *what)
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
static int configure(sqlite3 *db)
{
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    return sqlite3_create_function(db, "qjit_row_ok", 7, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                   NULL, sql_row_ok, NULL, NULL);
}

/* Whether db (schema "main" or an attached name) has the kernels table. */
static int has_table(sqlite3 *db, const char *schema, bool *yes)
{
    char sql[160];
    sqlite3_int64 n = 0;
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM \"%s\".sqlite_master WHERE type='table' AND name='kernels'",
             schema);
    int rc = query_int(db, sql, &n);
    *yes = n > 0;
    return rc;
}

/* Make the schema current.  A DB of another version is emptied and recreated when
 * allowed (*recreated = old version), else left alone (SQLITE_MISMATCH). */
static int schema_ensure(sqlite3 *db, bool allow_recreate, int *recreated, dberr *e)
{
    sqlite3_int64 v = 0;
    bool table = false;
    int rc;
    *recreated = -1;
    if ((rc = exec(db, "BEGIN IMMEDIATE")) != SQLITE_OK)
        return note(e, db, rc, "lock for schema");
    if ((rc = query_int(db, "PRAGMA user_version", &v)) != SQLITE_OK ||
        (rc = has_table(db, "main", &table)) != SQLITE_OK) {
        note(e, db, rc, "read schema version");
        goto done;
    }
    if (v == SCHEMA_VERSION && table)
        goto done;
    if (table || v != 0) {
        if (!allow_recreate) {
            rc = SQLITE_MISMATCH;
            snprintf(e->msg, sizeof e->msg,
                     "schema version %lld%s, this qjit reads version %d", (long long)v,
                     table ? "" : " without a kernels table", SCHEMA_VERSION);
            e->rc = rc;
            goto done;
        }
        *recreated = (int)v;
        if ((rc = exec(db, "DROP TABLE IF EXISTS kernels")) != SQLITE_OK) {
            note(e, db, rc, "drop old table");
            goto done;
        }
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version=%d", SCHEMA_VERSION);
    if ((rc = exec(db, schema_sql)) != SQLITE_OK || (rc = exec(db, sql)) != SQLITE_OK)
        note(e, db, rc, "create schema");
done:
    if (rc == SQLITE_OK && (rc = exec(db, "COMMIT")) != SQLITE_OK)
        note(e, db, rc, "commit schema");
    if (rc != SQLITE_OK)
        rollback(db);
    return rc;
}

/* Check a read-only DB's schema version without writing. */
static int schema_check_ro(sqlite3 *db, const char *schema, dberr *e)
{
    sqlite3_int64 v = 0;
    bool table = false;
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA \"%s\".user_version", schema);
    int rc = query_int(db, sql, &v);
    if (rc == SQLITE_OK)
        rc = has_table(db, schema, &table);
    if (rc != SQLITE_OK)
        return note(e, db, rc, "read schema version");
    if (v != SCHEMA_VERSION || !table) {
        snprintf(e->msg, sizeof e->msg, "schema version %lld%s, this qjit reads version %d",
                 (long long)v, table ? "" : " without a kernels table", SCHEMA_VERSION);
        return e->rc = SQLITE_MISMATCH;
    }
    return SQLITE_OK;
}

/* Delete least-recently-used rows until cubin + source bytes <= cap.  Inside a write
 * transaction held by the caller. */
static int evict(sqlite3 *db, uint64_t cap, uint64_t *removed, dberr *e)
{
    sqlite3_stmt *st = NULL, *del = NULL;
    sqlite3_int64 total = 0, *ids = NULL;
    size_t n = 0, nids = 0;
    int rc = query_int(db, "SELECT coalesce(sum(cubin_size + source_size), 0) FROM kernels",
                       &total);
    if (rc != SQLITE_OK) {
        note(e, db, rc, "sum sizes");
        goto done;
    }
    if ((uint64_t)total <= cap)
        goto done;
    rc = prepare(db, "SELECT rowid, cubin_size + source_size FROM kernels "
                     "ORDER BY last_used, rowid", &st);
    /* collect first, delete after: a table is not changed under an open scan of it */
    while (rc == SQLITE_OK && (uint64_t)total > cap) {
        rc = step(st);
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
        note(e, db, rc, "scan for eviction");
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = prepare(db, "DELETE FROM kernels WHERE rowid = ?1", &del)) != SQLITE_OK) {
        note(e, db, rc, "evict");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int64(del, 1, ids[i]);
        if ((rc = step(del)) != SQLITE_DONE) {
            note(e, db, rc, "evict");
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

/* ---------------------------------------------------------------- the library's cache */

struct qjit_cache {
    pthread_mutex_t mu;          /* guards everything below: one user at a time */
    sqlite3 *rw;                 /* the writable file DB, or the in-memory one */
    sqlite3 *ro;                 /* the shipped DB, or NULL */
    char *dir;                   /* its directory */
    char *file;                  /* path of the writable DB file (NULL: memory only) */
    char *shipped;
    const char *path;            /* file, or ":memory:" once degraded */
    dev_t dev;                   /* identity of the file opened, so that a repair */
    ino_t ino;                   /* never moves a file another process put there */
    uint64_t max_bytes;
    const qjit_context *log_ctx;
};

static int open_memory(qjit_cache *c, dberr *e)
{
    int recreated;
    int rc = sqlite3_open_v2(MEMORY_PATH, &c->rw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                             NULL);
    if (rc == SQLITE_OK)
        rc = configure(c->rw);
    if (rc == SQLITE_OK)
        rc = schema_ensure(c->rw, true, &recreated, e);
    else
        note(e, c->rw, rc, "open in-memory cache");
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(c->rw);
        c->rw = NULL;
        return rc;
    }
    c->path = MEMORY_PATH;
    return SQLITE_OK;
}

/* Open (creating) the writable DB file in WAL mode with the current schema. */
static int open_file(qjit_cache *c, dberr *e)
{
    sqlite3 *db = NULL;
    int recreated = -1;
    struct stat st;
    int rc = sqlite3_open_v2(c->file, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        note(e, db, rc, "open");
        goto done;
    }
    if (stat(c->file, &st) == 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
    }
    if ((rc = configure(db)) != SQLITE_OK) {
        note(e, db, rc, "configure");
        goto done;
    }
    if (sqlite3_db_readonly(db, "main") == 1) {
        rc = note(e, db, SQLITE_READONLY, "open for writing");
        goto done;
    }
    /* WAL: readers never wait for the writer, and a crash never leaves a torn DB */
    if ((rc = exec(db, "PRAGMA journal_mode=WAL")) != SQLITE_OK ||
        (rc = exec(db, "PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864")) !=
            SQLITE_OK) {
        note(e, db, rc, "set journal mode");
        goto done;
    }
    if ((rc = schema_ensure(db, true, &recreated, e)) != SQLITE_OK)
        goto done;
    if (recreated >= 0)
        qjit_log(c->log_ctx, QJIT_LOG_WARN,
                 "cache %s: schema version %d is not %d: emptied and recreated", c->file,
                 recreated, SCHEMA_VERSION);
done:
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(db);
        db = NULL;
    }
    c->rw = db;
    if (db)
        c->path = c->file;
    return rc;
}

/* The writable DB file is damaged: move it aside (one copy, for a post-mortem), drop
 * its -wal/-shm, and start a new one; memory if even that fails. */
static void repair(qjit_cache *c, const char *what)
{
    dberr e = {0};
    struct stat st;
    qjit_log(c->log_ctx, QJIT_LOG_WARN,
             "cache %s: the database is damaged (%s): moved aside to %s.corrupt and recreated",
             c->file, what, c->file);
    sqlite3_close_v2(c->rw);
    c->rw = NULL;
    if (stat(c->file, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino) {
        char *aside = join_path(c->file, ".corrupt");
        char *wal = join_path(c->file, "-wal");
        char *shm = join_path(c->file, "-shm");
        if (!aside || rename(c->file, aside) != 0)
            unlink(c->file);
        if (wal)
            unlink(wal);
        if (shm)
            unlink(shm);
        free(aside);
        free(wal);
        free(shm);
    }
    int rc = open_file(c, &e);
    if (rc != SQLITE_OK && is_corrupt(rc)) {
        /* still damaged: someone else's half-written file; ours now */
        unlink(c->file);
        rc = open_file(c, &e);
    }
    if (rc != SQLITE_OK) {
        qjit_log(c->log_ctx, QJIT_LOG_WARN,
                 "cache %s: cannot recreate (%s): caching in memory from now on", c->file,
                 e.msg);
        if (open_memory(c, &e) != SQLITE_OK)
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache: no in-memory cache either: %s", e.msg);
    }
}

/* The file was moved or deleted under us (another process's repair, or a person
 * clearing the cache): open whatever is at the path now, making it if need be. */
static void reopen(qjit_cache *c, const char *what)
{
    dberr e = {0};
    sqlite3_close_v2(c->rw);
    c->rw = NULL;
    int err = mkdir_p(c->dir);
    int rc = err ? SQLITE_CANTOPEN : open_file(c, &e);
    if (rc == SQLITE_OK) {
        qjit_log(c->log_ctx, QJIT_LOG_INFO, "cache %s: %s: reopened", c->file, what);
    } else if (is_corrupt(rc)) {
        repair(c, e.msg);
    } else {
        qjit_log(c->log_ctx, QJIT_LOG_WARN,
                 "cache %s: %s, and it cannot be reopened (%s): caching in memory from now on",
                 c->file, what, err ? strerror(err) : e.msg);
        if (open_memory(c, &e) != SQLITE_OK)
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache: no in-memory cache either: %s", e.msg);
    }
}

/* SQLite keeps using a file that was unlinked or replaced (WAL mode does not notice):
 * one stat per call, and a reopen when the path now names another file or none. */
static void follow_path(qjit_cache *c)
{
    struct stat st;
    if (c->path != c->file)
        return;
    if (stat(c->file, &st) != 0)
        reopen(c, "the file was deleted");
    else if (st.st_dev != c->dev || st.st_ino != c->ino)
        reopen(c, "the file was replaced");
}

static qjit_status oom(qjit_cache *c, const char *what)
{
    return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache %s: no memory for %s",
                        c ? c->path : "", what);
}

static void open_shipped(qjit_cache *c)
{
    dberr e = {0};
    struct stat st;
    char *uri = NULL;
    int rc;
    if (stat(c->shipped, &st) != 0) {
        qjit_log(c->log_ctx, QJIT_LOG_WARN, "shipped cache %s: %s: not used", c->shipped,
                 strerror(errno));
        return;
    }
    /* immutable: nothing is ever written next to it (no -shm, no lock), so a shipped
     * file in a read-only place stays byte-identical */
    uri = file_uri(c->shipped, "immutable=1");
    if (!uri) {
        rc = note(&e, NULL, SQLITE_NOMEM, "open");
        goto done;
    }
    rc = sqlite3_open_v2(uri, &c->ro, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK)
        rc = configure(c->ro);
    if (rc != SQLITE_OK) {
        note(&e, c->ro, rc, "open");
        goto done;
    }
    rc = schema_check_ro(c->ro, "main", &e);
done:
    if (rc != SQLITE_OK) {
        qjit_log(c->log_ctx, QJIT_LOG_WARN, "shipped cache %s: %s: not used", c->shipped,
                 e.msg);
        sqlite3_close_v2(c->ro);
        c->ro = NULL;
    }
    free(uri);
}

qjit_status qjit_cache_open(const qjit_cache_config *cfg, qjit_cache **out)
{
    qjit_status st = QJIT_OK;
    qjit_cache *c = NULL;
    char *dir = NULL;
    dberr e = {0};
    if (!cfg || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_open: %s is NULL",
                            !cfg ? "cfg" : "out");
    *out = NULL;
    c = calloc(1, sizeof *c);
    if (!c)
        return oom(NULL, "the cache");
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = cfg->max_bytes;
    c->log_ctx = cfg->log_ctx;
    c->path = MEMORY_PATH;
    if (cfg->shipped && *cfg->shipped) {
        if (!(c->shipped = dup_str(cfg->shipped))) {
            st = oom(c, "the shipped path");
            goto done;
        }
        open_shipped(c);
    }
    if (!cfg->memory_only) {
        dir = cfg->dir && *cfg->dir ? dup_str(cfg->dir) : default_dir();
        int err = dir ? mkdir_p(dir) : ENOENT;
        if (!dir) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN,
                     "cache: no QJIT_CACHE_DIR, XDG_CACHE_HOME or HOME: caching in memory");
        } else if (err) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache dir %s: %s: caching in memory", dir,
                     strerror(err));
        } else if (!(c->file = join_path(dir, "/qjit.db"))) {
            st = oom(c, "the cache path");
            goto done;
        } else {
            c->dir = dir;
            int rc = open_file(c, &e);
            if (is_corrupt(rc)) {
                repair(c, e.msg);
            } else if (rc != SQLITE_OK) {
                qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache %s: %s: caching in memory",
                         c->file, e.msg);
            }
        }
    }
    if (!c->rw && open_memory(c, &e) != SQLITE_OK) {
        st = qjit_err_set(QJIT_ERROR_CACHE, "cache: cannot open an in-memory database: %s",
                          e.msg);
        goto done;
    }
    if (c->dir != dir) /* the cache owns dir only when it has a file there */
        free(dir);
    dir = NULL;
    *out = c;
    c = NULL;
done:
    if (c && c->dir == dir)
        dir = NULL;
    free(dir);
    qjit_cache_close(c);
    return st;
}

void qjit_cache_close(qjit_cache *c)
{
    if (!c)
        return;
    sqlite3_close_v2(c->rw);
    sqlite3_close_v2(c->ro);
    free(c->dir);
    free(c->file);
    free(c->shipped);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *qjit_cache_path(const qjit_cache *c) { return c ? c->path : MEMORY_PATH; }

typedef enum lookup_result { LOOKUP_HIT, LOOKUP_MISS, LOOKUP_BAD, LOOKUP_ERROR } lookup_result;

/* Find key in db and check it against material, size and hash. */
static lookup_result lookup(sqlite3 *db, const uint8_t key[16], const void *material,
                            size_t material_len, void **cubin, size_t *cubin_len,
                            sqlite3_int64 *rowid, const char **why, dberr *e)
{
    sqlite3_stmt *st = NULL;
    lookup_result r = LOOKUP_ERROR;
    int rc = prepare(db, "SELECT rowid, material, cubin, cubin_size, cubin_hash "
                         "FROM kernels WHERE key = ?1", &st);
    if (rc != SQLITE_OK) {
        note(e, db, rc, "look up");
        goto done;
    }
    sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
    rc = step(st);
    if (rc == SQLITE_DONE) {
        r = LOOKUP_MISS;
        goto done;
    }
    if (rc != SQLITE_ROW) {
        note(e, db, rc, "look up");
        goto done;
    }
    *rowid = sqlite3_column_int64(st, 0);
    const void *mat = sqlite3_column_blob(st, 1);
    size_t mlen = (size_t)sqlite3_column_bytes(st, 1);
    const void *bin = sqlite3_column_blob(st, 2);
    int blen = sqlite3_column_bytes(st, 2);
    const void *hash = sqlite3_column_blob(st, 4);
    uint8_t h[16];
    r = LOOKUP_BAD;
    if (mlen != material_len || !mat || memcmp(mat, material, mlen) != 0) {
        *why = "key material differs (a hash collision or a damaged row)";
        goto done;
    }
    if (blen <= 0 || !bin || blen != sqlite3_column_int64(st, 3)) {
        *why = "cubin size differs from the size stored with it";
        goto done;
    }
    qjit_hash128(bin, (size_t)blen, h);
    if (sqlite3_column_bytes(st, 4) != 16 || memcmp(h, hash, 16) != 0) {
        *why = "cubin hash differs from the hash stored with it";
        goto done;
    }
    if (!(*cubin = malloc((size_t)blen))) {
        rc = note(e, db, SQLITE_NOMEM, "copy cubin");
        r = LOOKUP_ERROR;
        goto done;
    }
    memcpy(*cubin, bin, (size_t)blen);
    *cubin_len = (size_t)blen;
    r = LOOKUP_HIT;
done:
    sqlite3_finalize(st);
    return r;
}

/* Mark a row used, best effort: a busy DB just skips it. */
static void touch(sqlite3 *db, sqlite3_int64 rowid)
{
    sqlite3_stmt *st = NULL;
    sqlite3_busy_timeout(db, TOUCH_TIMEOUT_MS);
    if (sqlite3_prepare_v2(db,
                           "UPDATE kernels SET last_used = max(?1, (SELECT max(last_used) "
                           "FROM kernels) + 1) WHERE rowid = ?2",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, now_ms());
        sqlite3_bind_int64(st, 2, rowid);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
}

static void delete_row(qjit_cache *c, const uint8_t key[16], sqlite3_int64 rowid)
{
    sqlite3_stmt *st = NULL;
    /* by rowid too: a good row another process put in since is not ours to delete */
    if (prepare(c->rw, "DELETE FROM kernels WHERE key = ?1 AND rowid = ?2", &st) ==
        SQLITE_OK) {
        sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, rowid);
        step(st);
    }
    sqlite3_finalize(st);
}

qjit_status qjit_cache_get(qjit_cache *c, const uint8_t key[16], const void *material,
                           size_t material_len, void **cubin, size_t *cubin_len)
{
    char hex[33];
    dberr e = {0};
    sqlite3_int64 rowid = 0;
    const char *why = NULL;
    lookup_result r = LOOKUP_MISS;
    if (!c || !key || !material || !material_len || !cubin || !cubin_len)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_cache_get: NULL or empty argument (cache, key, material, "
                            "cubin or cubin_len)");
    *cubin = NULL;
    *cubin_len = 0;
    qjit_key_hex(key, hex);
    pthread_mutex_lock(&c->mu);
    follow_path(c);
    if (c->ro) {
        r = lookup(c->ro, key, material, material_len, cubin, cubin_len, &rowid, &why, &e);
        if (r == LOOKUP_BAD) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "shipped cache %s: row %s: %s: ignored",
                     c->shipped, hex, why);
        } else if (r == LOOKUP_ERROR && is_corrupt(e.rc)) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "shipped cache %s: %s: not used any more",
                     c->shipped, e.msg);
            sqlite3_close_v2(c->ro);
            c->ro = NULL;
        } else if (r == LOOKUP_ERROR) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "shipped cache %s: %s", c->shipped, e.msg);
        }
    }
    if (r != LOOKUP_HIT && c->rw) {
        r = lookup(c->rw, key, material, material_len, cubin, cubin_len, &rowid, &why, &e);
        if (r == LOOKUP_HIT) {
            touch(c->rw, rowid);
        } else if (r == LOOKUP_BAD) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache %s: row %s: %s: deleted", c->path, hex,
                     why);
            delete_row(c, key, rowid);
        } else if (r == LOOKUP_ERROR && e.rc == SQLITE_NOMEM) {
            pthread_mutex_unlock(&c->mu);
            return oom(c, "a cubin");
        } else if (r == LOOKUP_ERROR && is_corrupt(e.rc) && c->path == c->file) {
            repair(c, e.msg);
        } else if (r == LOOKUP_ERROR) {
            qjit_log(c->log_ctx, QJIT_LOG_WARN, "cache %s: %s: treated as a miss", c->path,
                     e.msg);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (r == LOOKUP_HIT)
        return QJIT_OK;
    return qjit_err_set(QJIT_ERROR_NOT_FOUND, "cache: no kernel with key %s", hex);
}

/* One short write transaction: insert unless present, then evict down to the cap. */
static int insert(qjit_cache *c, const qjit_cache_row *row, const uint8_t chash[16],
                  int *inserted, dberr *e)
{
    sqlite3 *db = c->rw;
    sqlite3_stmt *st = NULL;
    int rc = exec(db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK) {
        note(e, db, rc, "begin");
        goto done;
    }
    rc = prepare(db,
                 "INSERT INTO kernels(" ROW_COLUMNS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                 "max(?6, (SELECT coalesce(max(last_used), 0) + 1 FROM kernels)), "
                 "?7, ?8, ?9, ?10, ?11) ON CONFLICT(key) DO NOTHING",
                 &st);
    if (rc != SQLITE_OK) {
        note(e, db, rc, "insert");
        goto done;
    }
    const char *src = row->source ? row->source : "";
    size_t src_len = row->source ? row->source_len : 0;
    sqlite3_bind_blob(st, 1, row->key, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)row->cubin_len);
    sqlite3_bind_blob(st, 3, chash, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)src_len);
    sqlite3_bind_double(st, 5, row->compile_ms);
    sqlite3_bind_int64(st, 6, now_ms());
    sqlite3_bind_text(st, 7, row->arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, row->desc, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 9, row->material, row->material_len, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 10, row->cubin, row->cubin_len, SQLITE_STATIC);
    sqlite3_bind_text64(st, 11, src, src_len, SQLITE_STATIC, SQLITE_UTF8);
    if ((rc = step(st)) != SQLITE_DONE) {
        note(e, db, rc, "insert");
        goto done;
    }
    rc = SQLITE_OK;
    *inserted = sqlite3_changes(db) > 0;
    if (c->max_bytes && *inserted && (rc = evict(db, c->max_bytes, NULL, e)) != SQLITE_OK)
        goto done;
    if ((rc = exec(db, "COMMIT")) != SQLITE_OK)
        note(e, db, rc, "commit");
done:
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        rollback(db);
    return rc;
}

qjit_status qjit_cache_put(qjit_cache *c, const qjit_cache_row *row, int *inserted)
{
    dberr e = {0};
    int ins = 0;
    uint8_t chash[16];
    qjit_status st = QJIT_OK;
    if (inserted)
        *inserted = 0;
    if (!c || !row || !row->material || !row->material_len || !row->cubin ||
        !row->cubin_len || !row->desc || !row->arch || (!row->source && row->source_len))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_cache_put: NULL or empty field (cache, row, material, "
                            "cubin, desc, arch or source)");
    if (row->cubin_len > INT32_MAX || row->material_len > INT32_MAX ||
        row->source_len > INT32_MAX)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_cache_put: %s: a field over 2 GiB", row->desc);
    if (c->max_bytes && row->cubin_len + row->source_len > c->max_bytes) {
        qjit_log(c->log_ctx, QJIT_LOG_WARN,
                 "cache: %s: %zu bytes is more than the cache cap %llu: not stored", row->desc,
                 row->cubin_len + row->source_len, (unsigned long long)c->max_bytes);
        return QJIT_OK;
    }
    qjit_hash128(row->cubin, row->cubin_len, chash);
    pthread_mutex_lock(&c->mu);
    follow_path(c);
    int rc = insert(c, row, chash, &ins, &e);
    if (rc != SQLITE_OK && c->path == c->file &&
        (is_corrupt(rc) || rc == SQLITE_READONLY_DBMOVED)) {
        /* a damaged file, or one another process moved aside: start over once */
        if (is_corrupt(rc))
            repair(c, e.msg);
        else
            reopen(c, e.msg);
        rc = c->rw ? insert(c, row, chash, &ins, &e) : note(&e, NULL, SQLITE_CANTOPEN, "reopen");
    }
    if (rc != SQLITE_OK)
        st = rc == SQLITE_NOMEM ? oom(c, "a row")
                                : qjit_err_set(QJIT_ERROR_CACHE, "cache %s: %s: %s", c->path,
                                               row->desc, e.msg);
    pthread_mutex_unlock(&c->mu);
    if (inserted)
        *inserted = ins;
    return st;
}

/* ---------------------------------------------------------------- administration */

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

static qjit_status db_fail(qjit_cache_db *d, qjit_status st, const dberr *e)
{
    return qjit_err_set(st, "cache %s: %s", d ? d->path : "", e->msg);
}

static qjit_status db_error(qjit_cache_db *d, int rc, const char *what)
{
    dberr e;
    note(&e, d->db, rc, what);
    if (is_corrupt(rc))
        snprintf(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg),
                 "; the file is damaged: verify with repair rebuilds it");
    return db_fail(d, rc == SQLITE_NOMEM ? QJIT_ERROR_OUT_OF_MEMORY : QJIT_ERROR_CACHE, &e);
}

QJIT_API qjit_status qjit_cache_default_path(char *buf, size_t cap, size_t *len)
{
    char *dir = default_dir();
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
static int open_ro(qjit_cache_db *d, dberr *e)
{
    static const char *const queries[] = {"mode=ro", "immutable=1"};
    int rc = SQLITE_CANTOPEN;
    for (int i = 0; i < 2; i++) {
        sqlite3_close_v2(d->db);
        d->db = NULL;
        free(d->uri);
        if (!(d->uri = file_uri(d->path, queries[i])))
            return note(e, NULL, SQLITE_NOMEM, "open");
        rc = sqlite3_open_v2(d->uri, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
        if (rc == SQLITE_OK)
            rc = configure(d->db);
        if (rc == SQLITE_OK)
            rc = schema_check_ro(d->db, "main", e);
        else
            note(e, d->db, rc, "open");
        if (rc == SQLITE_OK || is_corrupt(rc) || rc == SQLITE_MISMATCH)
            return rc;
    }
    return rc;
}

static int open_rw(qjit_cache_db *d, dberr *e)
{
    int recreated;
    int rc;
    if (!(d->uri = file_uri(d->path, "mode=rwc")))
        return note(e, NULL, SQLITE_NOMEM, "open");
    rc = sqlite3_open_v2(d->uri, &d->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK)
        rc = configure(d->db);
    if (rc != SQLITE_OK)
        return note(e, d->db, rc, "open");
    if (sqlite3_db_readonly(d->db, "main") == 1)
        return note(e, d->db, SQLITE_READONLY, "open for writing");
    if ((rc = exec(d->db, "PRAGMA journal_mode=WAL")) != SQLITE_OK ||
        (rc = exec(d->db, "PRAGMA synchronous=NORMAL")) != SQLITE_OK)
        return note(e, d->db, rc, "set journal mode");
    return schema_ensure(d->db, false, &recreated, e);
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
    dberr e = {0};
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
        d->path = dup_str(path);
    } else if ((dir = default_dir())) {
        d->path = join_path(dir, "/qjit.db");
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
        int err = mkdir_p(dir);
        if (err) {
            st = qjit_err_set(QJIT_ERROR_IO, "cache dir %s: %s", dir, strerror(err));
            goto done;
        }
    }
    int rc = d->writable ? open_rw(d, &e) : open_ro(d, &e);
    if (is_corrupt(rc) && d->db && is_sqlite_file(d->path)) {
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
    int rc = prepare(d->db, "SELECT " ENTRY_COLUMNS " FROM kernels WHERE " FILTER_SQL
                            " ORDER BY arch, descriptor", &q);
    if (rc != SQLITE_OK) {
        st = db_error(d, rc, "list");
        goto done;
    }
    if ((st = bind_filter(q, f)) != QJIT_OK)
        goto done;
    while ((rc = step(q)) == SQLITE_ROW) {
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
    char *p = join_path(path, suffix);
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
    if ((rc = exec(d->db, "BEGIN")) != SQLITE_OK)
        return db_error(d, rc, "stats");
    if ((rc = query_int(d->db, "PRAGMA user_version", &v)) != SQLITE_OK ||
        (rc = prepare(d->db, "SELECT count(*), coalesce(sum(cubin_size), 0), "
                             "coalesce(sum(source_size), 0) FROM kernels", &q)) != SQLITE_OK ||
        (rc = step(q)) != SQLITE_ROW) {
        st = db_error(d, rc, "stats");
        goto done;
    }
    out->schema_version = (int)v;
    out->rows = (uint64_t)sqlite3_column_int64(q, 0);
    out->cubin_bytes = (uint64_t)sqlite3_column_int64(q, 1);
    out->source_bytes = (uint64_t)sqlite3_column_int64(q, 2);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = prepare(d->db, "SELECT arch, count(*), sum(cubin_size + source_size) "
                             "FROM kernels GROUP BY arch ORDER BY arch LIMIT 16", &q)) != SQLITE_OK) {
        st = db_error(d, rc, "stats");
        goto done;
    }
    while ((rc = step(q)) == SQLITE_ROW) {
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
    rollback(d->db);
    return st;
}

/* Copy the rows of d that verify into a fresh file next to it, then put that file in
 * its place: for a file whose pages are damaged, where deleting rows cannot help. */
static qjit_status rebuild(qjit_cache_db *d, uint64_t *found, uint64_t *kept)
{
    qjit_status st = QJIT_OK;
    sqlite3 *out = NULL;
    sqlite3_stmt *q = NULL, *ins = NULL;
    dberr e = {0};
    int recreated, rc;
    char *tmp = join_path(d->path, ".rebuild");
    char *wal = join_path(d->path, "-wal");
    char *shm = join_path(d->path, "-shm");
    sqlite3_int64 *ids = NULL;
    size_t nids = 0, capids = 0;
    if (!tmp || !wal || !shm) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache: no memory to rebuild");
        goto done;
    }
    /* the rowids first (table pages only), then each row on its own: a damaged page
     * costs the rows on it, not the rest of the walk */
    rc = prepare(d->db, "SELECT rowid FROM kernels", &q);
    while (rc == SQLITE_OK && step(q) == SQLITE_ROW) {
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
        rc = configure(out);
    if (rc != SQLITE_OK || (rc = schema_ensure(out, true, &recreated, &e)) != SQLITE_OK ||
        (rc = exec(out, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = prepare(out, "INSERT INTO kernels(" ROW_COLUMNS ") VALUES(?1, ?2, ?3, ?4, ?5, "
                           "?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT(key) DO NOTHING",
                      &ins)) != SQLITE_OK) {
        if (!e.msg[0])
            note(&e, out, rc, "create");
        st = qjit_err_set(QJIT_ERROR_CACHE, "cache %s: rebuild into %s: %s", d->path, tmp,
                          e.msg);
        goto done;
    }
    rc = prepare(d->db, "SELECT " ROW_COLUMNS " FROM kernels WHERE rowid = ?1 "
                        "AND qjit_row_ok(" ROW_OK_ARGS ")", &q);
    for (size_t i = 0; rc == SQLITE_OK && i < nids; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, ids[i]);
        if (step(q) != SQLITE_ROW)
            continue; /* gone, damaged, or does not verify */
        for (int c = 0; c < 12; c++)
            sqlite3_bind_value(ins, c + 1, sqlite3_column_value(q, c));
        if ((rc = step(ins)) != SQLITE_DONE) {
            note(&e, out, rc, "copy a row");
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
    if ((rc = exec(out, "COMMIT")) != SQLITE_OK) {
        note(&e, out, rc, "commit");
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
        rollback(out);
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
    rc = prepare(d->db, "PRAGMA quick_check", &q);
    if (rc == SQLITE_OK)
        rc = step(q);
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

    rc = prepare(d->db, "SELECT rowid, key, descriptor, material, cubin, cubin_size, "
                        "cubin_hash, source, source_size FROM kernels", &q);
    while (rc == SQLITE_OK && (rc = step(q)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        out->rows_checked++;
        sqlite3_column_text(q, 7); /* as text, so bytes counts UTF-8 like source_size */
        const char *why = row_check(
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
        if (!is_corrupt(rc)) {
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
    if ((rc = exec(d->db, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = prepare(d->db, "DELETE FROM kernels WHERE rowid = ?1", &del)) != SQLITE_OK) {
        st = db_error(d, rc, "delete bad rows");
        goto done;
    }
    for (size_t i = 0; i < nbad; i++) {
        sqlite3_bind_int64(del, 1, bad[i]);
        if ((rc = step(del)) != SQLITE_DONE) {
            st = db_error(d, rc, "delete bad rows");
            goto done;
        }
        out->rows_deleted += (uint64_t)sqlite3_changes(d->db);
        sqlite3_reset(del);
    }
    if ((rc = exec(d->db, "COMMIT")) != SQLITE_OK)
        st = db_error(d, rc, "delete bad rows");
done:
    sqlite3_finalize(q);
    sqlite3_finalize(del);
    if (st != QJIT_OK && d->db) {
        rollback(d->db);
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
    int rc = prepare(d->db, "DELETE FROM kernels WHERE last_used < ?1", &q);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, now_ms() - seconds * 1000);
        rc = step(q);
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
    dberr e = {0};
    uint64_t n = 0;
    qjit_status st = need_writable(d, "qjit_cache_db_prune_size");
    if (removed)
        *removed = 0;
    if (st != QJIT_OK)
        return st;
    int rc = exec(d->db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK)
        note(&e, d->db, rc, "begin");
    else if ((rc = evict(d->db, max_bytes, &n, &e)) == SQLITE_OK &&
             (rc = exec(d->db, "COMMIT")) != SQLITE_OK)
        note(&e, d->db, rc, "commit");
    if (rc != SQLITE_OK) {
        rollback(d->db);
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
    int rc = exec(d->db, "VACUUM");
    if (rc == SQLITE_OK)
        rc = exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE)");
    return rc == SQLITE_OK ? QJIT_OK : db_error(d, rc, "vacuum");
}

/* ATTACH a file read-only under the name `as`, checking its schema version. */
static int attach(sqlite3 *db, const char *uri, const char *as, bool *attached, dberr *e)
{
    sqlite3_stmt *q = NULL;
    char sql[64];
    snprintf(sql, sizeof sql, "ATTACH ?1 AS %s", as);
    int rc = prepare(db, sql, &q);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(q, 1, uri, -1, SQLITE_STATIC);
        rc = step(q);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_OK)
        return note(e, db, rc, "attach");
    *attached = true;
    return schema_check_ro(db, as, e);
}

QJIT_API qjit_status qjit_cache_db_export(qjit_cache_db *d, const char *out_path,
                                          const qjit_cache_filter *f, uint64_t *copied,
                                          uint64_t *bad)
{
    qjit_status st = QJIT_OK;
    sqlite3 *out = NULL;
    sqlite3_stmt *q = NULL;
    dberr e = {0};
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
    if (!(out_uri = file_uri(out_path, "mode=rwc")))
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache export: no memory");
    rc = sqlite3_open_v2(out_uri, &out,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL);
    free(out_uri);
    created = rc == SQLITE_OK;
    if (rc == SQLITE_OK)
        rc = configure(out);
    if (rc != SQLITE_OK) {
        note(&e, out, rc, "create");
        st = (rc & 0xff) == SQLITE_CANTOPEN ? QJIT_ERROR_IO : QJIT_ERROR_CACHE;
        goto fail;
    }
    /* rollback journal, not WAL: the result is one self-contained file to ship */
    if ((rc = exec(out, "PRAGMA journal_mode=DELETE")) != SQLITE_OK ||
        (rc = schema_ensure(out, true, &recreated, &e)) != SQLITE_OK ||
        (rc = attach(out, d->uri, "src", &attached, &e)) != SQLITE_OK) {
        if (!e.msg[0])
            note(&e, out, rc, "create");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if ((rc = exec(out, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = prepare(out, "INSERT INTO main.kernels(" ROW_COLUMNS ") SELECT " ROW_COLUMNS
                           " FROM src.kernels WHERE " FILTER_SQL
                           " AND qjit_row_ok(" ROW_OK_ARGS ") ORDER BY rowid", &q)) != SQLITE_OK) {
        note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    bind_filter(q, f);
    if ((rc = step(q)) != SQLITE_DONE) {
        note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if (copied)
        *copied = (uint64_t)sqlite3_changes(out);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = prepare(out, "SELECT count(*) FROM src.kernels WHERE " FILTER_SQL
                           " AND NOT qjit_row_ok(" ROW_OK_ARGS ")", &q)) != SQLITE_OK) {
        note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    bind_filter(q, f);
    if ((rc = step(q)) != SQLITE_ROW) {
        note(&e, out, rc, "export");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if (bad)
        *bad = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = exec(out, "COMMIT")) != SQLITE_OK || (rc = exec(out, "DETACH src")) != SQLITE_OK) {
        note(&e, out, rc, "export commit");
        st = QJIT_ERROR_CACHE;
        goto fail;
    }
    if ((rc = sqlite3_close(out)) != SQLITE_OK) {
        note(&e, out, rc, "close");
        st = QJIT_ERROR_IO;
        goto fail;
    }
    return QJIT_OK;
fail:
    sqlite3_finalize(q);
    if (out) {
        rollback(out);
        sqlite3_close_v2(out);
    }
    if (created) {
        char *j = join_path(out_path, "-journal");
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
    dberr e = {0};
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
    if (!(uri = file_uri(other_path, "mode=ro"))) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "cache merge: no memory");
        goto done;
    }
    if ((rc = attach(d->db, uri, "other", &attached, &e)) != SQLITE_OK) {
        st = attached ? QJIT_ERROR_CACHE : QJIT_ERROR_IO;
        goto done;
    }
    if ((rc = exec(d->db, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = prepare(d->db, "INSERT INTO main.kernels(" ROW_COLUMNS ") SELECT " ROW_COLUMNS
                             " FROM other.kernels WHERE qjit_row_ok(" ROW_OK_ARGS
                             ") ORDER BY rowid ON CONFLICT(key) DO NOTHING", &q)) != SQLITE_OK ||
        (rc = step(q)) != SQLITE_DONE) {
        note(&e, d->db, rc, "merge");
        st = QJIT_ERROR_CACHE;
        goto done;
    }
    if (added)
        *added = (uint64_t)sqlite3_changes(d->db);
    sqlite3_finalize(q);
    q = NULL;
    sqlite3_int64 nbad = 0;
    if ((rc = query_int(d->db, "SELECT count(*) FROM other.kernels WHERE NOT qjit_row_ok("
                               ROW_OK_ARGS ")", &nbad)) != SQLITE_OK ||
        (rc = exec(d->db, "COMMIT")) != SQLITE_OK) {
        note(&e, d->db, rc, "merge");
        st = QJIT_ERROR_CACHE;
        goto done;
    }
    if (bad)
        *bad = (uint64_t)nbad;
done:
    sqlite3_finalize(q);
    if (st != QJIT_OK) {
        rollback(d->db);
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
    rc = prepare(d->db, "SELECT " ENTRY_COLUMNS ", source FROM kernels "
                        "WHERE substr(hex(key), 1, length(?1)) = upper(?1) LIMIT 9", &q);
    if (rc != SQLITE_OK) {
        st = db_error(d, rc, "source");
        goto done;
    }
    sqlite3_bind_text(q, 1, key_prefix, -1, SQLITE_STATIC);
    while ((rc = step(q)) == SQLITE_ROW) {
        qjit_cache_entry en;
        fill_entry(q, &en);
        if (n < 8)
            qjit_buf_printf(&list, "\n  %s %s", en.key, en.desc);
        if (n++)
            continue;
        const char *src = (const char *)sqlite3_column_text(q, 8);
        size_t sl = (size_t)sqlite3_column_bytes(q, 8);
        char *copy = malloc(sl + 1);
        char *dd = dup_str(en.desc), *da = dup_str(en.arch);
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
