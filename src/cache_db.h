/*
 * cache_db.h — the SQL plumbing shared by the cache's runtime store (cache.c) and its
 * administration (cache_admin.c); see cache_db.c.  Internal to those two files.
 */
#ifndef QJIT_CACHE_DB_H
#define QJIT_CACHE_DB_H

#include "qjit_internal.h"

#include <sqlite3.h>

/* The tables' layout: user_version holds it.  2: kernels and tuning; 1 (kernels only) is
 * migrated in place when opened writable and read as is when read-only. */
#define QJIT_DB_SCHEMA_VERSION 2
/* A connection's lock wait, restored after a short-wait statement. */
#define QJIT_DB_BUSY_TIMEOUT_MS 10000
#define QJIT_DB_MEMORY_PATH ":memory:"

#define QJIT_DB_ROW_COLUMNS                                                              \
    "key, cubin_size, cubin_hash, source_size, compile_ms, created, last_used, arch, "   \
    "descriptor, material, cubin, source"
#define QJIT_DB_ROW_OK_ARGS "key, material, cubin, cubin_size, cubin_hash, source, source_size"
#define QJIT_DB_TUNING_COLUMNS                                                           \
    "gpu, arch, problem, bucket, n, k, config, m, us, ok, created, row_hash"
/* qjit_tuning_ok(...): 1 when a tuning row's hash matches its fields */
#define QJIT_DB_TUNING_OK "qjit_tuning_ok(gpu, arch, problem, bucket, n, k, config, m, us, ok, row_hash)"

/* The message of the last failure on db, before a rollback overwrites it. */
typedef struct qjit_dberr {
    int rc;
    char msg[512];
} qjit_dberr;

QJIT_HIDDEN int64_t qjit_db_now_ms(void);              /* unix ms */
QJIT_HIDDEN bool qjit_db_is_busy(int rc);
QJIT_HIDDEN bool qjit_db_is_corrupt(int rc);           /* the file is damaged */
QJIT_HIDDEN char *qjit_db_dup_str(const char *s);      /* malloc'd; NULL on no memory */
QJIT_HIDDEN char *qjit_db_join_path(const char *a, const char *b);
QJIT_HIDDEN int qjit_db_mkdir_p(const char *dir);      /* 0 or an errno */
/* The default directory of the writable DB (malloc'd); NULL if no variable says. */
QJIT_HIDDEN char *qjit_db_default_dir(void);
/* "file:" URI of a path with a query (malloc'd). */
QJIT_HIDDEN char *qjit_db_file_uri(const char *path, const char *query);
/* NULL when a row is whole, else what is wrong with it. */
QJIT_HIDDEN const char *qjit_db_row_check(const void *key, int key_len, const void *material,
                                          int mlen, const void *cubin, int clen,
                                          sqlite3_int64 cubin_size, const void *chash,
                                          int chash_len, int source_len,
                                          sqlite3_int64 source_size);
/* prepare / step / exec, retrying while locked (see cache_db.c for where that is legal). */
QJIT_HIDDEN int qjit_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st);
QJIT_HIDDEN int qjit_db_step(sqlite3_stmt *st);
QJIT_HIDDEN int qjit_db_exec(sqlite3 *db, const char *sql);
QJIT_HIDDEN int qjit_db_query_int(sqlite3 *db, const char *sql, sqlite3_int64 *out);
QJIT_HIDDEN void qjit_db_rollback(sqlite3 *db);
/* Record rc and db's message as "what: message" in *e; returns rc. */
QJIT_HIDDEN int qjit_db_note(qjit_dberr *e, sqlite3 *db, int rc, const char *what);
/* Settings every connection gets (extended codes, busy timeout, qjit_row_ok). */
QJIT_HIDDEN int qjit_db_configure(sqlite3 *db);
/* Make the schema current; a DB of another version is recreated when allowed
 * (*recreated = its version), else SQLITE_MISMATCH. */
QJIT_HIDDEN int qjit_db_schema_ensure(sqlite3 *db, bool allow_recreate, int *recreated,
                                      qjit_dberr *e);
QJIT_HIDDEN int qjit_db_schema_check_ro(sqlite3 *db, const char *schema, qjit_dberr *e);
/* Whether the DB (schema "main" or an attached name) has the tuning table (version 2). */
QJIT_HIDDEN bool qjit_db_has_tuning(sqlite3 *db, const char *schema);
/* XXH3-128 over a tuning row's fields, stored with it and checked on every read. */
QJIT_HIDDEN void qjit_db_tuning_hash(const qjit_tuning_row *r, uint8_t out[16]);
/* Delete least-recently-used rows until cubin + source bytes <= cap (in the caller's
 * write transaction). */
QJIT_HIDDEN int qjit_db_evict(sqlite3 *db, uint64_t cap, uint64_t *removed, qjit_dberr *e);

/* What a full check of a DB found: SQLite's quick_check and every row's own checks. */
typedef struct qjit_db_check_result {
    int integrity_ok;           /* quick_check said ok and every row could be read */
    char integrity[256];        /* else the first message */
    uint64_t rows_checked, rows_bad;
    uint64_t tuning_checked, tuning_bad;
} qjit_db_check_result;
/* Called for each bad kernel row; non-zero stops the check (it returns SQLITE_NOMEM). */
typedef int (*qjit_db_bad_fn)(void *user, sqlite3_int64 rowid, const char *key_hex,
                              const char *desc, const char *why);
/* Check db (quick_check, then every kernel and tuning row).  SQLITE_OK when the check ran,
 * whatever it found (read *r); another code when it could not. */
QJIT_HIDDEN int qjit_db_check(sqlite3 *db, qjit_db_bad_fn fn, void *user,
                              qjit_db_check_result *r);
/* Copy the rows of src (possibly damaged) that still read back and verify into dst, in
 * the caller's transaction on dst: kernels row by row (a damaged page costs only its own
 * rows), then tuning results.  *found: kernel rows src listed; *kept: rows copied. */
QJIT_HIDDEN int qjit_db_copy_verified(sqlite3 *src, sqlite3 *dst, uint64_t *found,
                                      uint64_t *kept, qjit_dberr *e);

/* cache_salvage.c.  Whether the file at path is (what is left of) a qjit cache: SQLite's
 * header, or the kernels table's schema text on its first pages.  Repairs move aside and
 * rebuild only such files. */
QJIT_HIDDEN bool qjit_db_looks_like_cache(const char *path);
/* Open the damaged file at path read-only to copy its rows out (qjit_db_copy_verified):
 * as it is when SQLite reads it, else, when its header is damaged (SQLITE_NOTADB), through
 * a copy at `scratch` with a header written anew (*reheaded = true; the caller closes *out
 * and then unlinks scratch).  SQLITE_NOTADB when neither reads. */
QJIT_HIDDEN int qjit_db_open_salvage(const char *path, const char *scratch, sqlite3 **out,
                                     bool *reheaded);

#endif
