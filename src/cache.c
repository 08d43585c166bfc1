/*
 * cache.c — the runtime store behind qjit_get_gemm: a writable DB file (WAL, waits out
 * locks, repairs itself), a read-only shipped DB consulted first, and an in-memory
 * fallback.  Administration of DB files lives in cache_admin.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache_db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A last-use update is a courtesy: never wait long for it. */
#define TOUCH_TIMEOUT_MS 200
#define MEMORY_PATH QJIT_DB_MEMORY_PATH
#define SCHEMA_VERSION QJIT_DB_SCHEMA_VERSION
#define ROW_COLUMNS QJIT_DB_ROW_COLUMNS

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
    qjit_logger log;
    uint64_t repairs, dropped;   /* damaged files repaired, rows they could not keep */
};

static int open_memory(qjit_cache *c, qjit_dberr *e)
{
    int recreated;
    int rc = sqlite3_open_v2(MEMORY_PATH, &c->rw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                             NULL);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(c->rw);
    if (rc == SQLITE_OK)
        rc = qjit_db_schema_ensure(c->rw, true, &recreated, e);
    else
        qjit_db_note(e, c->rw, rc, "open in-memory cache");
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(c->rw);
        c->rw = NULL;
        return rc;
    }
    c->path = MEMORY_PATH;
    return SQLITE_OK;
}

/* Open (creating) the writable DB file in WAL mode with the current schema. */
static int open_file(qjit_cache *c, qjit_dberr *e)
{
    sqlite3 *db = NULL;
    int recreated = -1;
    struct stat st;
    int rc = sqlite3_open_v2(c->file, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "open");
        goto done;
    }
    if (stat(c->file, &st) == 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
    }
    if ((rc = qjit_db_configure(db)) != SQLITE_OK) {
        qjit_db_note(e, db, rc, "configure");
        goto done;
    }
    if (sqlite3_db_readonly(db, "main") == 1) {
        rc = qjit_db_note(e, db, SQLITE_READONLY, "open for writing");
        goto done;
    }
    /* WAL: readers never wait for the writer, and a crash never leaves a torn DB */
    if ((rc = qjit_db_exec(db, "PRAGMA journal_mode=WAL")) != SQLITE_OK ||
        (rc = qjit_db_exec(db, "PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864")) !=
            SQLITE_OK) {
        qjit_db_note(e, db, rc, "set journal mode");
        goto done;
    }
    if ((rc = qjit_db_schema_ensure(db, true, &recreated, e)) != SQLITE_OK)
        goto done;
    if (recreated >= 0)
        qjit_log(&c->log, QJIT_LOG_WARN,
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

/* The rows of the damaged file moved aside to `aside` that still read back and verify,
 * into the new writable DB; returns how many were kept (and found, in *found). */
static uint64_t salvage(qjit_cache *c, const char *aside, uint64_t *found)
{
    sqlite3 *src = NULL;
    uint64_t kept = 0;
    qjit_dberr e = {0};
    bool reheaded = false;
    *found = 0;
    char *scratch = qjit_db_join_path(aside, ".salvage");
    if (!scratch || !c->rw || qjit_db_open_salvage(aside, scratch, &src, &reheaded) != SQLITE_OK)
        goto done;
    if (qjit_db_exec(c->rw, "BEGIN IMMEDIATE") == SQLITE_OK) {
        if (qjit_db_copy_verified(src, c->rw, found, &kept, &e) == SQLITE_OK &&
            qjit_db_exec(c->rw, "COMMIT") == SQLITE_OK) {
        } else {
            qjit_db_rollback(c->rw);
            kept = 0;
        }
    }
done:
    sqlite3_close_v2(src);
    if (reheaded)
        unlink(scratch);
    free(scratch);
    return kept;
}

/* The writable DB file is damaged: move it aside (one copy, for a post-mortem), drop
 * its -wal/-shm, start a new one and copy into it the rows of the old one that still
 * verify; memory if even that fails.  The caller carries on with the new file. */
static void repair(qjit_cache *c, const char *what)
{
    qjit_dberr e = {0};
    struct stat st;
    char *aside = qjit_db_join_path(c->file, ".corrupt");
    bool moved = false;
    sqlite3_close_v2(c->rw);
    c->rw = NULL;
    if (stat(c->file, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino) {
        char *wal = qjit_db_join_path(c->file, "-wal");
        char *shm = qjit_db_join_path(c->file, "-shm");
        moved = aside && rename(c->file, aside) == 0;
        if (!moved)
            unlink(c->file);
        if (wal)
            unlink(wal);
        if (shm)
            unlink(shm);
        free(wal);
        free(shm);
    }
    int rc = open_file(c, &e);
    if (rc != SQLITE_OK && qjit_db_is_corrupt(rc)) {
        /* still damaged: someone else's half-written file; ours now */
        unlink(c->file);
        rc = open_file(c, &e);
    }
    c->repairs++;
    if (rc != SQLITE_OK) {
        qjit_log(&c->log, QJIT_LOG_WARN,
                 "cache %s: the database is damaged (%s) and cannot be recreated (%s): caching "
                 "in memory from now on",
                 c->file, what, e.msg);
        if (open_memory(c, &e) != SQLITE_OK)
            qjit_log(&c->log, QJIT_LOG_WARN, "cache: no in-memory cache either: %s", e.msg);
        free(aside);
        return;
    }
    uint64_t found = 0, kept = moved ? salvage(c, aside, &found) : 0;
    c->dropped += found - kept;
    qjit_log(&c->log, QJIT_LOG_WARN,
             "cache %s: the database was damaged (%s): moved aside to %s.corrupt and "
             "recreated with the %llu of %llu kernels that still verify",
             c->file, what, c->file, (unsigned long long)kept, (unsigned long long)found);
    free(aside);
}

/* A full check of the writable file (qjit_options.verify_cache): damaged pages are
 * repaired as above; rows that do not verify are deleted. */
static void check_file(qjit_cache *c)
{
    qjit_db_check_result r;
    int rc = qjit_db_check(c->rw, NULL, NULL, &r);
    if (rc == SQLITE_OK && !r.integrity_ok) {
        repair(c, r.integrity);
        return;
    }
    if (rc != SQLITE_OK) {
        qjit_dberr e = {0};
        qjit_db_note(&e, c->rw, rc, "check");
        if (qjit_db_is_corrupt(rc))
            repair(c, e.msg);
        else
            qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: %s: not checked", c->file, e.msg);
        return;
    }
    if (!r.rows_bad && !r.tuning_bad)
        return;
    sqlite3_stmt *q = NULL;
    qjit_dberr e = {0};
    if ((rc = qjit_db_exec(c->rw, "BEGIN IMMEDIATE")) != SQLITE_OK ||
        (rc = qjit_db_exec(c->rw, "DELETE FROM tuning WHERE NOT " QJIT_DB_TUNING_OK)) != SQLITE_OK ||
        (rc = qjit_db_exec(c->rw, "DELETE FROM kernels WHERE NOT qjit_row_ok(" QJIT_DB_ROW_OK_ARGS
                                  ")")) != SQLITE_OK ||
        (rc = qjit_db_exec(c->rw, "COMMIT")) != SQLITE_OK) {
        qjit_db_note(&e, c->rw, rc, "delete bad rows");
        qjit_db_rollback(c->rw);
        if (qjit_db_is_corrupt(rc))
            repair(c, e.msg);
        else
            qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: %s", c->file, e.msg);
    } else {
        c->repairs++;
        c->dropped += r.rows_bad;
        qjit_log(&c->log, QJIT_LOG_WARN,
                 "cache %s: %llu kernel rows and %llu tuning rows did not verify: deleted",
                 c->file, (unsigned long long)r.rows_bad, (unsigned long long)r.tuning_bad);
    }
    sqlite3_finalize(q);
}

/* The file was moved or deleted under us (another process's repair, or a person
 * clearing the cache): open whatever is at the path now, making it if need be. */
static void reopen(qjit_cache *c, const char *what)
{
    qjit_dberr e = {0};
    sqlite3_close_v2(c->rw);
    c->rw = NULL;
    int err = qjit_db_mkdir_p(c->dir);
    int rc = err ? SQLITE_CANTOPEN : open_file(c, &e);
    if (rc == SQLITE_OK) {
        qjit_log(&c->log, QJIT_LOG_INFO, "cache %s: %s: reopened", c->file, what);
    } else if (qjit_db_is_corrupt(rc)) {
        repair(c, e.msg);
    } else {
        qjit_log(&c->log, QJIT_LOG_WARN,
                 "cache %s: %s, and it cannot be reopened (%s): caching in memory from now on",
                 c->file, what, err ? strerror(err) : e.msg);
        if (open_memory(c, &e) != SQLITE_OK)
            qjit_log(&c->log, QJIT_LOG_WARN, "cache: no in-memory cache either: %s", e.msg);
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
    qjit_dberr e = {0};
    struct stat st;
    char *uri = NULL;
    int rc;
    if (stat(c->shipped, &st) != 0) {
        qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: %s: not used", c->shipped,
                 strerror(errno));
        return;
    }
    /* immutable: nothing is ever written next to it (no -shm, no lock), so a shipped
     * file in a read-only place stays byte-identical */
    uri = qjit_db_file_uri(c->shipped, "immutable=1");
    if (!uri) {
        rc = qjit_db_note(&e, NULL, SQLITE_NOMEM, "open");
        goto done;
    }
    rc = sqlite3_open_v2(uri, &c->ro, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(c->ro);
    if (rc != SQLITE_OK) {
        qjit_db_note(&e, c->ro, rc, "open");
        goto done;
    }
    rc = qjit_db_schema_check_ro(c->ro, "main", &e);
done:
    if (rc != SQLITE_OK) {
        qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: %s: not used", c->shipped,
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
    qjit_dberr e = {0};
    if (!cfg || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_open: %s is NULL",
                            !cfg ? "cfg" : "out");
    *out = NULL;
    c = calloc(1, sizeof *c);
    if (!c)
        return oom(NULL, "the cache");
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = cfg->max_bytes;
    c->log = cfg->log;
    c->path = MEMORY_PATH;
    if (cfg->shipped && *cfg->shipped) {
        if (!(c->shipped = qjit_db_dup_str(cfg->shipped))) {
            st = oom(c, "the shipped path");
            goto done;
        }
        open_shipped(c);
    }
    if (!cfg->memory_only) {
        dir = cfg->dir && *cfg->dir ? qjit_db_dup_str(cfg->dir) : qjit_db_default_dir();
        int err = dir ? qjit_db_mkdir_p(dir) : ENOENT;
        if (!dir) {
            qjit_log(&c->log, QJIT_LOG_WARN,
                     "cache: no QJIT_CACHE_DIR, XDG_CACHE_HOME or HOME: caching in memory");
        } else if (err) {
            qjit_log(&c->log, QJIT_LOG_WARN, "cache dir %s: %s: caching in memory", dir,
                     strerror(err));
        } else if (!(c->file = qjit_db_join_path(dir, "/qjit.db"))) {
            st = oom(c, "the cache path");
            goto done;
        } else {
            c->dir = dir;
            int rc = open_file(c, &e);
            if (qjit_db_is_corrupt(rc)) {
                repair(c, e.msg);
            } else if (rc == SQLITE_OK && cfg->verify) {
                check_file(c);
            } else if (rc != SQLITE_OK) {
                qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: %s: caching in memory",
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

void qjit_cache_info_get(qjit_cache *c, qjit_cache_info *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    snprintf(out->path, sizeof out->path, "%s", c->path);
    out->persistent = c->path == c->file && c->rw != NULL;
    out->shipped = c->ro != NULL;
    out->repairs = c->repairs;
    out->rows_dropped = c->dropped;
    pthread_mutex_unlock(&c->mu);
}

typedef enum lookup_result { LOOKUP_HIT, LOOKUP_MISS, LOOKUP_BAD, LOOKUP_ERROR } lookup_result;

/* Find key in db and check it against material, size and hash. */
static lookup_result lookup(sqlite3 *db, const uint8_t key[16], const void *material,
                            size_t material_len, void **cubin, size_t *cubin_len,
                            sqlite3_int64 *rowid, const char **why, qjit_dberr *e)
{
    sqlite3_stmt *st = NULL;
    lookup_result r = LOOKUP_ERROR;
    int rc = qjit_db_prepare(db, "SELECT rowid, material, cubin, cubin_size, cubin_hash "
                         "FROM kernels WHERE key = ?1", &st);
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "look up");
        goto done;
    }
    sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
    rc = qjit_db_step(st);
    if (rc == SQLITE_DONE) {
        r = LOOKUP_MISS;
        goto done;
    }
    if (rc != SQLITE_ROW) {
        qjit_db_note(e, db, rc, "look up");
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
        rc = qjit_db_note(e, db, SQLITE_NOMEM, "copy cubin");
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
        sqlite3_bind_int64(st, 1, qjit_db_now_ms());
        sqlite3_bind_int64(st, 2, rowid);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    sqlite3_busy_timeout(db, QJIT_DB_BUSY_TIMEOUT_MS);
}

static void delete_row(qjit_cache *c, const uint8_t key[16], sqlite3_int64 rowid)
{
    sqlite3_stmt *st = NULL;
    /* by rowid too: a good row another process put in since is not ours to delete */
    if (qjit_db_prepare(c->rw, "DELETE FROM kernels WHERE key = ?1 AND rowid = ?2", &st) ==
        SQLITE_OK) {
        sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, rowid);
        qjit_db_step(st);
    }
    sqlite3_finalize(st);
}

qjit_status qjit_cache_get(qjit_cache *c, const uint8_t key[16], const void *material,
                           size_t material_len, void **cubin, size_t *cubin_len)
{
    char hex[33];
    qjit_dberr e = {0};
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
            qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: row %s: %s: ignored",
                     c->shipped, hex, why);
        } else if (r == LOOKUP_ERROR && qjit_db_is_corrupt(e.rc)) {
            qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: %s: not used any more",
                     c->shipped, e.msg);
            sqlite3_close_v2(c->ro);
            c->ro = NULL;
        } else if (r == LOOKUP_ERROR) {
            qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: %s", c->shipped, e.msg);
        }
    }
    if (r != LOOKUP_HIT && c->rw) {
        r = lookup(c->rw, key, material, material_len, cubin, cubin_len, &rowid, &why, &e);
        if (r == LOOKUP_HIT) {
            touch(c->rw, rowid);
        } else if (r == LOOKUP_BAD) {
            qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: row %s: %s: deleted", c->path, hex,
                     why);
            delete_row(c, key, rowid);
        } else if (r == LOOKUP_ERROR && e.rc == SQLITE_NOMEM) {
            pthread_mutex_unlock(&c->mu);
            return oom(c, "a cubin");
        } else if (r == LOOKUP_ERROR && qjit_db_is_corrupt(e.rc) && c->path == c->file) {
            repair(c, e.msg);
        } else if (r == LOOKUP_ERROR) {
            qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: %s: treated as a miss", c->path,
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
                  int *inserted, qjit_dberr *e)
{
    sqlite3 *db = c->rw;
    sqlite3_stmt *st = NULL;
    int rc = qjit_db_exec(db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "begin");
        goto done;
    }
    rc = qjit_db_prepare(db,
                 "INSERT INTO kernels(" ROW_COLUMNS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                 "max(?6, (SELECT coalesce(max(last_used), 0) + 1 FROM kernels)), "
                 "?7, ?8, ?9, ?10, ?11) ON CONFLICT(key) DO NOTHING",
                 &st);
    if (rc != SQLITE_OK) {
        qjit_db_note(e, db, rc, "insert");
        goto done;
    }
    const char *src = row->source ? row->source : "";
    size_t src_len = row->source ? row->source_len : 0;
    sqlite3_bind_blob(st, 1, row->key, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)row->cubin_len);
    sqlite3_bind_blob(st, 3, chash, 16, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)src_len);
    sqlite3_bind_double(st, 5, row->compile_ms);
    sqlite3_bind_int64(st, 6, qjit_db_now_ms());
    sqlite3_bind_text(st, 7, row->arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, row->desc, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 9, row->material, row->material_len, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 10, row->cubin, row->cubin_len, SQLITE_STATIC);
    sqlite3_bind_text64(st, 11, src, src_len, SQLITE_STATIC, SQLITE_UTF8);
    if ((rc = qjit_db_step(st)) != SQLITE_DONE) {
        qjit_db_note(e, db, rc, "insert");
        goto done;
    }
    rc = SQLITE_OK;
    *inserted = sqlite3_changes(db) > 0;
    if (c->max_bytes && *inserted && (rc = qjit_db_evict(db, c->max_bytes, NULL, e)) != SQLITE_OK)
        goto done;
    if ((rc = qjit_db_exec(db, "COMMIT")) != SQLITE_OK)
        qjit_db_note(e, db, rc, "commit");
done:
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        qjit_db_rollback(db);
    return rc;
}

qjit_status qjit_cache_put(qjit_cache *c, const qjit_cache_row *row, int *inserted)
{
    qjit_dberr e = {0};
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
        qjit_log(&c->log, QJIT_LOG_WARN,
                 "cache: %s: %zu bytes is more than the cache cap %llu: not stored", row->desc,
                 row->cubin_len + row->source_len, (unsigned long long)c->max_bytes);
        return QJIT_OK;
    }
    qjit_hash128(row->cubin, row->cubin_len, chash);
    pthread_mutex_lock(&c->mu);
    follow_path(c);
    int rc = insert(c, row, chash, &ins, &e);
    if (rc != SQLITE_OK && c->path == c->file &&
        (qjit_db_is_corrupt(rc) || rc == SQLITE_READONLY_DBMOVED)) {
        /* a damaged file, or one another process moved aside: start over once */
        if (qjit_db_is_corrupt(rc))
            repair(c, e.msg);
        else
            reopen(c, e.msg);
        rc = c->rw ? insert(c, row, chash, &ins, &e) : qjit_db_note(&e, NULL, SQLITE_CANTOPEN, "reopen");
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

/* ---------------------------------------------------------------- tuning results */
qjit_status qjit_cache_put_tuning(qjit_cache *c, const qjit_tuning_row *r)
{
    qjit_dberr e = {0};
    uint8_t h[16];
    sqlite3_stmt *st = NULL;
    if (!c || !r || !r->gpu || !r->arch || !r->problem || !r->config)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_put_tuning: NULL field");
    qjit_db_tuning_hash(r, h);
    pthread_mutex_lock(&c->mu);
    follow_path(c);
    int rc = qjit_db_prepare(c->rw,
                             "INSERT INTO tuning(gpu, arch, problem, bucket, n, k, config, m, us, "
                             "ok, created, row_hash) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                             "?10, ?11, ?12) ON CONFLICT(gpu, arch, problem, bucket, n, k, config) "
                             "DO UPDATE SET m = ?8, us = ?9, ok = ?10, created = ?11, "
                             "row_hash = ?12",
                             &st);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, r->gpu, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->arch, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r->problem, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, r->bucket);
        sqlite3_bind_int64(st, 5, r->n);
        sqlite3_bind_int64(st, 6, r->k);
        sqlite3_bind_text(st, 7, r->config, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 8, r->m);
        sqlite3_bind_double(st, 9, r->us);
        sqlite3_bind_int(st, 10, r->ok);
        sqlite3_bind_int64(st, 11, qjit_db_now_ms());
        sqlite3_bind_blob(st, 12, h, 16, SQLITE_STATIC);
        rc = qjit_db_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK)
        qjit_db_note(&e, c->rw, rc, "store a tuning result");
    sqlite3_finalize(st);
    qjit_status s = QJIT_OK;
    if (rc != SQLITE_OK)
        s = rc == SQLITE_NOMEM ? oom(c, "a tuning row")
                               : qjit_err_set(QJIT_ERROR_CACHE, "cache %s: %s: %s", c->path,
                                              r->problem, e.msg);
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* The ok rows of one DB for (gpu or any, arch, problem), verified.  Returns SQLite's code. */
static int tuned_rows(qjit_cache *c, sqlite3 *db, int layer, const char *gpu, const char *arch,
                      const char *problem, qjit_tuning_fn fn, void *user)
{
    if (!qjit_db_has_tuning(db, "main"))
        return SQLITE_OK; /* a version 1 DB: no results */
    sqlite3_stmt *st = NULL;
    int rc = qjit_db_prepare(db,
                             "SELECT rowid, gpu, arch, problem, bucket, n, k, config, m, us, ok, "
                             "row_hash FROM tuning WHERE (?1 IS NULL OR gpu = ?1) AND arch = ?2 "
                             "AND problem = ?3 AND ok = 1 ORDER BY bucket, n, k, us",
                             &st);
    if (rc != SQLITE_OK)
        return rc;
    if (gpu)
        sqlite3_bind_text(st, 1, gpu, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_text(st, 2, arch, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, problem, -1, SQLITE_STATIC);
    while ((rc = qjit_db_step(st)) == SQLITE_ROW) {
        const char *t[4];
        for (int i = 0; i < 3; i++)
            t[i] = (const char *)sqlite3_column_text(st, 1 + i);
        t[3] = (const char *)sqlite3_column_text(st, 7);
        qjit_tuning_row r = {t[0] ? t[0] : "", t[1] ? t[1] : "", t[2] ? t[2] : "",
                             sqlite3_column_int(st, 4), sqlite3_column_int64(st, 5),
                             sqlite3_column_int64(st, 6), t[3] ? t[3] : "",
                             sqlite3_column_int64(st, 8), sqlite3_column_double(st, 9),
                             sqlite3_column_int(st, 10)};
        uint8_t h[16];
        qjit_db_tuning_hash(&r, h);
        if (sqlite3_column_bytes(st, 11) != 16 || memcmp(sqlite3_column_blob(st, 11), h, 16)) {
            qjit_log(&c->log, QJIT_LOG_WARN,
                     "%s %s: tuning row %s at bucket %d, n=%lld k=%lld does not verify: ignored",
                     layer ? "shipped cache" : "cache", layer ? c->shipped : c->path, r.config,
                     r.bucket, (long long)r.n, (long long)r.k);
            if (!layer) {
                sqlite3_stmt *del = NULL;
                if (qjit_db_prepare(db, "DELETE FROM tuning WHERE rowid = ?1", &del) ==
                    SQLITE_OK) {
                    sqlite3_bind_int64(del, 1, sqlite3_column_int64(st, 0));
                    qjit_db_step(del);
                }
                sqlite3_finalize(del);
            }
            continue;
        }
        fn(user, &r, layer);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

qjit_status qjit_cache_tuned(qjit_cache *c, const char *gpu, const char *arch,
                             const char *problem, qjit_tuning_fn fn, void *user)
{
    if (!c || !arch || !problem || !fn)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_cache_tuned: NULL argument");
    pthread_mutex_lock(&c->mu);
    follow_path(c);
    qjit_dberr e = {0};
    int rc = c->rw ? tuned_rows(c, c->rw, 0, gpu, arch, problem, fn, user) : SQLITE_OK;
    if (rc != SQLITE_OK) {
        qjit_db_note(&e, c->rw, rc, "read tuning results");
        qjit_log(&c->log, QJIT_LOG_WARN, "cache %s: %s: the heuristics stand in", c->path,
                 e.msg);
    }
    if (c->ro && (rc = tuned_rows(c, c->ro, 1, gpu, arch, problem, fn, user)) != SQLITE_OK) {
        qjit_db_note(&e, c->ro, rc, "read tuning results");
        qjit_log(&c->log, QJIT_LOG_WARN, "shipped cache %s: %s: the heuristics stand in",
                 c->shipped, e.msg);
    }
    pthread_mutex_unlock(&c->mu);
    return QJIT_OK;
}
