/*
 * cache_salvage.c — reading rows out of a damaged cache file: as SQLite opens it, or,
 * when its 100-byte header is damaged and SQLite no longer sees a database, through a
 * copy given a new header.  Used by the runtime store's repair (cache.c) and by verify
 * with repair (cache_verify.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "cache_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 100
/* What the first pages of a qjit cache hold whatever became of its header: the kernels
 * table's own CREATE statement, in the schema table that starts on page 1. */
#define SCHEMA_MARK "CREATE TABLE kernels"
#define MARK_WINDOW 65536

bool qjit_db_looks_like_cache(const char *path)
{
    static const char magic[16] = "SQLite format 3";
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char *buf = malloc(MARK_WINDOW);
    size_t n = buf ? fread(buf, 1, MARK_WINDOW, f) : 0;
    fclose(f);
    bool yes = n >= sizeof magic && memcmp(buf, magic, sizeof magic) == 0;
    for (size_t i = 0; !yes && n >= sizeof SCHEMA_MARK && i + sizeof SCHEMA_MARK - 1 <= n; i++)
        yes = memcmp(buf + i, SCHEMA_MARK, sizeof SCHEMA_MARK - 1) == 0;
    free(buf);
    return yes;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A database header for a file of `pages` pages of `page_size` bytes: the values SQLite
 * writes for a fresh file (no free list, UTF-8), the change counter and the page count
 * valid together so that the count is believed.  See SQLite's "Database File Format". */
static void make_header(unsigned char h[HEADER_BYTES], uint32_t page_size, uint32_t pages)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, "SQLite format 3", 16);
    h[16] = (unsigned char)(page_size == 65536 ? 0 : page_size >> 8);
    h[17] = (unsigned char)(page_size == 65536 ? 1 : page_size & 0xff);
    h[18] = h[19] = 1;           /* rollback journal: the copy is read alone, no WAL */
    h[21] = 64;                  /* payload fractions, fixed by the format */
    h[22] = h[23] = 32;
    put32(h + 24, 1);            /* change counter */
    put32(h + 28, pages);
    put32(h + 40, 1);            /* schema cookie */
    put32(h + 44, 4);            /* schema format */
    put32(h + 56, 1);            /* UTF-8 */
    put32(h + 60, QJIT_DB_SCHEMA_VERSION);
    put32(h + 92, 1);            /* version-valid-for = change counter */
    put32(h + 96, (uint32_t)SQLITE_VERSION_NUMBER);
}

/* Copy the file at `from` to `to` (replacing it), whole. */
static bool copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char *buf = malloc(1 << 16);
    bool ok = in && out && buf;
    size_t n;
    while (ok && (n = fread(buf, 1, 1 << 16, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    free(buf);
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = false;
    return ok;
}

static bool write_header(const char *path, uint32_t page_size, uint32_t pages)
{
    unsigned char h[HEADER_BYTES];
    make_header(h, page_size, pages);
    FILE *f = fopen(path, "r+b");
    bool ok = f && fwrite(h, 1, sizeof h, f) == sizeof h;
    if (f && fclose(f) != 0)
        ok = false;
    return ok;
}

/* Open path read-only and immutable (nothing written next to it), with qjit's functions. */
static int open_immutable(const char *path, sqlite3 **out)
{
    char *uri = qjit_db_file_uri(path, "immutable=1");
    int rc = uri ? sqlite3_open_v2(uri, out, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL)
                 : SQLITE_NOMEM;
    free(uri);
    if (rc == SQLITE_OK)
        rc = qjit_db_configure(*out);
    if (rc != SQLITE_OK) {
        sqlite3_close_v2(*out);
        *out = NULL;
    }
    return rc;
}

/* How many kernel rows of db verify; -1 when it cannot say (not a database to it). */
static sqlite3_int64 rows_that_verify(sqlite3 *db)
{
    sqlite3_int64 n = -1;
    if (qjit_db_query_int(db, "SELECT count(*) FROM kernels WHERE qjit_row_ok("
                              QJIT_DB_ROW_OK_ARGS ")", &n) != SQLITE_OK)
        return -1;
    return n;
}

int qjit_db_open_salvage(const char *path, const char *scratch, sqlite3 **out, bool *reheaded)
{
    sqlite3 *db = NULL;
    struct stat st;
    *out = NULL;
    *reheaded = false;
    int rc = open_immutable(path, &db);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_int64 v = 0;
    rc = qjit_db_query_int(db, "SELECT count(*) FROM sqlite_schema", &v);
    if ((rc & 0xff) != SQLITE_NOTADB) { /* SQLite reads it (damaged or not): as it is */
        *out = db;
        return SQLITE_OK;
    }
    sqlite3_close_v2(db);
    db = NULL;
    /* The header is gone: every page size SQLite allows is tried on a copy with a new
     * header, and the one under which the most rows verify is kept. */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 1024 ||
        !qjit_db_looks_like_cache(path) || !copy_file(path, scratch)) {
        unlink(scratch);
        return SQLITE_NOTADB;
    }
    uint32_t best = 0;
    sqlite3_int64 best_rows = 0;
    for (uint32_t ps = 512; ps <= 65536; ps *= 2) {
        if ((uint64_t)st.st_size < ps || !write_header(scratch, ps, (uint32_t)(st.st_size / ps)))
            continue;
        sqlite3_int64 n = open_immutable(scratch, &db) == SQLITE_OK ? rows_that_verify(db) : -1;
        sqlite3_close_v2(db);
        db = NULL;
        if (n > best_rows || (n >= 0 && !best)) {
            best = ps;
            best_rows = n;
        }
    }
    if (!best || !write_header(scratch, best, (uint32_t)(st.st_size / best)) ||
        open_immutable(scratch, &db) != SQLITE_OK) {
        unlink(scratch);
        return SQLITE_NOTADB;
    }
    *out = db;
    *reheaded = true;
    return SQLITE_OK;
}
