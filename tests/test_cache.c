/*
 * test_cache.c — the SQLite kernel cache: hits and misses, damaged rows and files
 * repairing themselves, degraded directories, the shipped layer, eviction, several
 * processes and threads at once, a writer killed mid-write, and the admin API.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"
#include "cache_db.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- fixtures */

static int warnings;
static char last_warning[1024];

static void on_log(void *user, qjit_log_level lvl, const char *msg)
{
    (void)user;
    if (lvl == QJIT_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof last_warning, "%s", msg);
    }
}

static const qjit_logger log_ctx = {on_log, NULL};

/* A synthetic row i: material, key = its hash, a cubin of `size` bytes. */
typedef struct test_row {
    char material[96];
    char desc[160];
    char source[128];
    uint8_t *cubin;
    size_t cubin_len;
    qjit_cache_row row;
} test_row;

static void row_make(test_row *r, int i, const char *arch, size_t size)
{
    memset(r, 0, sizeof *r);
    snprintf(r->material, sizeof r->material, "material of kernel %d for %s", i, arch);
    snprintf(r->desc, sizeof r->desc,
             "gemm a=s8 b=s4 sa=row sb=col out=bf16 bias=0 arch=%s kernel=mma tile=128x128x%d "
             "warps=2x2 stages=4 split=1",
             arch, 32 + i);
    snprintf(r->source, sizeof r->source, "// kernel %d\n__global__ void k%d() {}\n", i, i);
    r->cubin_len = size;
    r->cubin = malloc(size);
    uint32_t x = 2654435761u * (uint32_t)(i + 1);
    for (size_t j = 0; j < size; j++) {
        x = x * 1664525u + 1013904223u;
        r->cubin[j] = (uint8_t)(x >> 24);
    }
    qjit_hash128(r->material, strlen(r->material), r->row.key);
    r->row.material = r->material;
    r->row.material_len = strlen(r->material);
    r->row.desc = r->desc;
    r->row.arch = arch;
    r->row.cubin = r->cubin;
    r->row.cubin_len = size;
    r->row.source = r->source;
    r->row.source_len = strlen(r->source);
    r->row.compile_ms = 12.5 + i;
}

static void row_free(test_row *r) { free(r->cubin); }

static qjit_cache *open_cache(const char *dir, const char *shipped, uint64_t max_bytes)
{
    qjit_cache_config cfg = {dir, shipped, 0, max_bytes, log_ctx};
    qjit_cache *c = NULL;
    CHECK_OK(qjit_cache_open(&cfg, &c));
    return c;
}

/* get must hit and give back exactly the row's cubin. */
static int expect_hit(qjit_cache *c, const test_row *r)
{
    void *bin = NULL;
    size_t len = 0;
    qjit_status st = qjit_cache_get(c, r->row.key, r->row.material, r->row.material_len, &bin,
                                    &len);
    int ok = st == QJIT_OK && len == r->cubin_len && bin && memcmp(bin, r->cubin, len) == 0;
    free(bin);
    return ok;
}

static int expect_miss(qjit_cache *c, const test_row *r)
{
    void *bin = (void *)1;
    size_t len = 1;
    qjit_status st = qjit_cache_get(c, r->row.key, r->row.material, r->row.material_len, &bin,
                                    &len);
    return st == QJIT_ERROR_NOT_FOUND && bin == NULL && len == 0;
}

static char *path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* XXH3-128 of a whole file's bytes; 0 if it cannot be read. */
static int hash_file(const char *path, uint8_t out[16])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    qjit_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        qjit_buf_append(&b, chunk, n);
    fclose(f);
    qjit_hash128(b.data, b.len, out);
    qjit_buf_free(&b);
    return 1;
}

/* Run SQL on a DB file directly, as a person with the sqlite3 shell would. */
static int raw_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 10000);
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK)
        fprintf(stderr, "raw_sql %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc;
}

static long long raw_count(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long long n = -1;
    if (sqlite3_open(path, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Flip one byte inside the stored cubin of a key. */
static int raw_flip_cubin_byte(const char *path, const uint8_t key[16], size_t at)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int ok = 0;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        goto done;
    if (sqlite3_prepare_v2(db, "SELECT cubin FROM kernels WHERE key = ?1", -1, &st, NULL))
        goto done;
    sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW)
        goto done;
    size_t n = (size_t)sqlite3_column_bytes(st, 0);
    uint8_t *b = malloc(n);
    memcpy(b, sqlite3_column_blob(st, 0), n);
    sqlite3_finalize(st);
    st = NULL;
    b[at % n] ^= 0x40;
    if (sqlite3_prepare_v2(db, "UPDATE kernels SET cubin = ?2 WHERE key = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_blob(st, 1, key, 16, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, b, (int)n, SQLITE_TRANSIENT);
        ok = sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1;
    }
    free(b);
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

static int verify_file(const char *path, qjit_cache_verify_report *rep)
{
    qjit_cache_db *db = NULL;
    memset(rep, 0, sizeof *rep);
    if (qjit_cache_db_open(path, 0, &db) != QJIT_OK)
        return 0;
    qjit_status st = qjit_cache_db_verify(db, 0, NULL, NULL, rep);
    qjit_cache_db_close(db);
    return st == QJIT_OK;
}

/* ---------------------------------------------------------------- tests */

static void test_miss_then_hit(void)
{
    const char *dir = tl_tmpdir("cache-basic");
    char *sub = path_in(dir, "a/b/c"); /* created with its parents */
    test_row r;
    int ins = -1;
    row_make(&r, 1, "sm_90a", 5000);
    qjit_cache *c = open_cache(sub, NULL, 0);
    char *db = path_in(sub, "qjit.db");
    CHECK(strcmp(qjit_cache_path(c), db) == 0, "path %s", qjit_cache_path(c));
    CHECK(expect_miss(c, &r), "empty cache did not miss");
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(ins == 1, "first put inserted=%d", ins);
    CHECK(expect_hit(c, &r), "no hit after put");
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(ins == 0, "second put of the same key inserted=%d", ins);
    qjit_cache_close(c);

    /* another instance (as another process would) sees it; one row only */
    c = open_cache(sub, NULL, 0);
    CHECK(expect_hit(c, &r), "no hit after reopening");
    qjit_cache_close(c);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "row count");
    CHECK(raw_count(db, "PRAGMA user_version") == QJIT_DB_SCHEMA_VERSION, "user_version");
    CHECK(raw_count(db, "SELECT count(*) FROM kernels WHERE descriptor LIKE 'gemm a=s8%' AND "
                        "arch = 'sm_90a' AND cubin_size = 5000 AND length(cubin_hash) = 16 AND "
                        "source LIKE '// kernel 1%' AND compile_ms = 13.5 AND created > 0") == 1,
          "stored fields");

    /* bad arguments are refused, not crashed on */
    CHECK(qjit_cache_put(NULL, &r.row, NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL cache");
    qjit_cache_row empty = r.row;
    empty.cubin_len = 0;
    c = open_cache(sub, NULL, 0);
    CHECK(qjit_cache_put(c, &empty, NULL) == QJIT_ERROR_INVALID_ARGUMENT, "empty cubin");
    void *bin;
    size_t len;
    CHECK(qjit_cache_get(c, r.row.key, NULL, 0, &bin, &len) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL material");
    qjit_cache_close(c);
    qjit_cache_close(NULL);
    row_free(&r);
    free(sub);
    free(db);
}

static void test_material_mismatch(void)
{
    const char *dir = tl_tmpdir("cache-material");
    test_row r, other;
    int ins;
    row_make(&r, 2, "sm_90a", 3000);
    row_make(&other, 2, "sm_89", 3000);
    qjit_cache *c = open_cache(dir, NULL, 0);
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    /* same key, different material: a collision (or a damaged row) is a miss */
    int w = warnings;
    void *bin = NULL;
    size_t len = 0;
    CHECK(qjit_cache_get(c, r.row.key, other.material, strlen(other.material), &bin, &len) ==
              QJIT_ERROR_NOT_FOUND,
          "mismatching material was a hit");
    CHECK(bin == NULL, "cubin given on a miss");
    CHECK(warnings == w + 1, "no warning for the mismatch");
    CHECK(strstr(last_warning, "material") != NULL, "warning: %s", last_warning);
    /* the row was deleted; a later put works */
    CHECK(expect_miss(c, &r), "row still there after the mismatch");
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(ins == 1 && expect_hit(c, &r), "put after the mismatch");
    qjit_cache_close(c);
    row_free(&r);
    row_free(&other);
}

static void test_damaged_row(void)
{
    const char *dir = tl_tmpdir("cache-row");
    char *db = path_in(dir, "qjit.db");
    test_row r, r2;
    int ins;
    row_make(&r, 3, "sm_90a", 70000); /* spans overflow pages */
    row_make(&r2, 4, "sm_90a", 1000);
    qjit_cache *c = open_cache(dir, NULL, 0);
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK_OK(qjit_cache_put(c, &r2.row, &ins));
    qjit_cache_close(c);

    CHECK(raw_flip_cubin_byte(db, r.row.key, 40000), "could not edit the DB");
    qjit_cache_verify_report rep;
    CHECK(verify_file(db, &rep) && rep.rows_bad == 1 && rep.integrity_ok,
          "verify: bad=%llu ok=%d", (unsigned long long)rep.rows_bad, rep.integrity_ok);

    c = open_cache(dir, NULL, 0);
    int w = warnings;
    CHECK(expect_miss(c, &r), "flipped cubin byte was a hit");
    CHECK(warnings == w + 1 && strstr(last_warning, "hash"), "warning: %s", last_warning);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "bad row not deleted");
    CHECK(expect_hit(c, &r2), "the good row was lost");
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(ins == 1 && expect_hit(c, &r), "put after a damaged row");
    qjit_cache_close(c);

    /* a size that disagrees with the blob */
    CHECK(raw_sql(db, "UPDATE kernels SET cubin_size = cubin_size + 1") == SQLITE_OK, "edit");
    c = open_cache(dir, NULL, 0);
    CHECK(expect_miss(c, &r2) && strstr(last_warning, "size"), "size mismatch: %s",
          last_warning);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "size-mismatch row not deleted");
    qjit_cache_close(c);
    row_free(&r);
    row_free(&r2);
    free(db);
}

/* Damage the DB file in one of several ways, then check the cache repairs itself. */
static void damage_and_reopen(const char *tag, int how)
{
    const char *dir = tl_tmpdir(tag);
    char *db = path_in(dir, "qjit.db");
    char *aside = path_in(dir, "qjit.db.corrupt");
    test_row rows[20];
    int ins;
    qjit_cache *c = open_cache(dir, NULL, 0);
    for (int i = 0; i < 20; i++) {
        row_make(&rows[i], 100 + i, "sm_80", 20000);
        CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    }
    qjit_cache_close(c);
    struct stat st;
    CHECK(stat(db, &st) == 0 && st.st_size > 100000, "DB size %lld", (long long)st.st_size);

    if (how == 0) { /* truncated */
        CHECK(truncate(db, 1000) == 0, "truncate");
    } else if (how == 1) { /* garbage from the start */
        FILE *f = fopen(db, "r+b");
        for (int i = 0; i < 65536; i++)
            fputc((i * 7919) & 0xff, f);
        fclose(f);
    } else { /* header intact, pages after it garbage */
        FILE *f = fopen(db, "r+b");
        fseek(f, 4096, SEEK_SET);
        for (long i = 4096; i < st.st_size; i++)
            fputc(0x5a, f);
        fclose(f);
    }
    int w = warnings;
    c = open_cache(dir, NULL, 0);
    CHECK(c != NULL, "open after damage (%s)", tag);
    if (!c)
        goto done;
    for (int i = 0; i < 20; i++)
        CHECK(expect_miss(c, &rows[i]), "%s: row %d was a hit in a damaged DB", tag, i);
    CHECK(warnings > w, "%s: no warning", tag);
    CHECK(strcmp(qjit_cache_path(c), db) == 0, "%s: not repaired in place (path %s)", tag,
          qjit_cache_path(c));
    CHECK_OK(qjit_cache_put(c, &rows[0].row, &ins));
    CHECK(ins == 1 && expect_hit(c, &rows[0]), "%s: put/get after repair", tag);
    qjit_cache_close(c);
    CHECK(file_exists(aside), "%s: damaged file not kept aside", tag);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "%s: repaired DB rows", tag);
    qjit_cache_verify_report rep;
    CHECK(verify_file(db, &rep) && rep.integrity_ok && rep.rows_bad == 0, "%s: verify", tag);
done:
    for (int i = 0; i < 20; i++)
        row_free(&rows[i]);
    free(db);
    free(aside);
}

static void test_damaged_file(void)
{
    damage_and_reopen("cache-trunc", 0);
    damage_and_reopen("cache-garbage", 1);
    damage_and_reopen("cache-pages", 2);
}

/* The cache directory is deleted under a running cache (a person clearing it): later
 * puts recreate it rather than writing into a file no one can open again. */
static void test_dir_removed(void)
{
    const char *base = tl_tmpdir("cache-removed");
    char *dir = path_in(base, "cache");
    char *db = path_in(dir, "qjit.db");
    test_row r1, r2;
    int ins = 0;
    row_make(&r1, 20, "sm_90a", 3000);
    row_make(&r2, 21, "sm_90a", 3000);
    qjit_cache *c = open_cache(dir, NULL, 0);
    CHECK_OK(qjit_cache_put(c, &r1.row, &ins));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0 && !file_exists(dir), "remove the cache dir");
    CHECK_OK(qjit_cache_put(c, &r2.row, &ins));
    CHECK(ins == 1 && expect_hit(c, &r2), "put after the dir was removed");
    CHECK(strcmp(qjit_cache_path(c), db) == 0, "path %s", qjit_cache_path(c));
    qjit_cache_close(c);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 1, "recreated DB rows: %lld",
          raw_count(db, "SELECT count(*) FROM kernels"));
    row_free(&r1);
    row_free(&r2);
    free(dir);
    free(db);
}

/* A cache that cannot have its file still caches, in memory. */
static void expect_memory_cache(const char *dir, const char *what)
{
    test_row r;
    int ins = 0;
    row_make(&r, 5, "sm_86", 2000);
    int w = warnings;
    qjit_cache *c = open_cache(dir, NULL, 0);
    CHECK(c != NULL, "%s: open failed", what);
    if (c) {
        CHECK(strcmp(qjit_cache_path(c), ":memory:") == 0, "%s: path %s", what,
              qjit_cache_path(c));
        CHECK(warnings > w, "%s: no warning", what);
        CHECK(expect_miss(c, &r), "%s: miss", what);
        CHECK_OK(qjit_cache_put(c, &r.row, &ins));
        CHECK(ins == 1 && expect_hit(c, &r), "%s: in-memory put then get", what);
    }
    qjit_cache_close(c);
    row_free(&r);
}

static void test_unusable_dir(void)
{
    const char *dir = tl_tmpdir("cache-rodir");
    /* a regular file where the directory should be: fails even for root */
    char *file = path_in(dir, "not-a-dir");
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    expect_memory_cache(file, "file as dir");
    char *below = path_in(file, "sub/dir");
    expect_memory_cache(below, "dir below a file");

    /* chmod 0555: only binding when not running as root */
    char *ro = path_in(dir, "ro");
    mkdir(ro, 0755);
    chmod(ro, 0555);
    char *probe = path_in(ro, "probe");
    int fd = open(probe, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
        printf("note: running with rights that ignore chmod 0555; read-only dir case covered "
               "by the file-as-dir case\n");
    } else {
        expect_memory_cache(ro, "chmod 0555 dir");
        char *ro_sub = path_in(ro, "sub");
        expect_memory_cache(ro_sub, "missing dir under a read-only one");
        free(ro_sub);
    }
    chmod(ro, 0755);

    /* memory_only */
    qjit_cache_config cfg = {dir, NULL, 1, 0, log_ctx};
    qjit_cache *c = NULL;
    test_row r;
    int ins = 0;
    row_make(&r, 6, "sm_86", 100);
    CHECK_OK(qjit_cache_open(&cfg, &c));
    CHECK(c && strcmp(qjit_cache_path(c), ":memory:") == 0, "memory_only path");
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(expect_hit(c, &r), "memory_only put then get");
    char *mem_db = path_in(dir, "qjit.db");
    CHECK(!file_exists(mem_db), "memory_only wrote a file");
    free(mem_db);
    qjit_cache_close(c);
    row_free(&r);
    free(file);
    free(below);
    free(ro);
    free(probe);
}

static void test_default_dir(void)
{
    const char *dir = tl_tmpdir("cache-default");
    char *env = path_in(dir, "from-env");
    char buf[1024];
    size_t len = 0;
    setenv("QJIT_CACHE_DIR", env, 1);
    CHECK_OK(qjit_cache_default_path(buf, sizeof buf, &len));
    char *want = path_in(env, "qjit.db");
    CHECK(strcmp(buf, want) == 0 && len == strlen(want), "default path %s", buf);
    CHECK(qjit_cache_default_path(buf, 5, &len) == QJIT_ERROR_INVALID_ARGUMENT &&
              len == strlen(want),
          "short buffer");
    qjit_cache *c = open_cache(NULL, NULL, 0);
    CHECK(c && strcmp(qjit_cache_path(c), want) == 0, "cache in $QJIT_CACHE_DIR: %s",
          c ? qjit_cache_path(c) : "");
    qjit_cache_close(c);

    char *old = getenv("QJIT_CACHE_DIR") ? strdup(getenv("QJIT_CACHE_DIR")) : NULL;
    unsetenv("QJIT_CACHE_DIR");
    setenv("XDG_CACHE_HOME", dir, 1);
    CHECK_OK(qjit_cache_default_path(buf, sizeof buf, NULL));
    char *xdg = path_in(dir, "qjit/qjit.db");
    CHECK(strcmp(buf, xdg) == 0, "XDG path %s", buf);
    unsetenv("XDG_CACHE_HOME");
    if (getenv("HOME")) {
        CHECK_OK(qjit_cache_default_path(buf, sizeof buf, NULL));
        CHECK(strstr(buf, "/.cache/qjit/qjit.db") != NULL, "HOME path %s", buf);
    }
    setenv("QJIT_CACHE_DIR", old ? old : env, 1);
    free(old);
    free(env);
    free(want);
    free(xdg);
}

static void test_shipped(void)
{
    const char *src_dir = tl_tmpdir("cache-ship-src");
    const char *run_dir = tl_tmpdir("cache-ship-run");
    const char *ship_dir = tl_tmpdir("cache-ship");
    char *src_db = path_in(src_dir, "qjit.db");
    char *shipped = path_in(ship_dir, "shipped.db");
    char *run_db = path_in(run_dir, "qjit.db");
    test_row rows[6];
    int ins;
    qjit_cache *c = open_cache(src_dir, NULL, 0);
    for (int i = 0; i < 6; i++) {
        row_make(&rows[i], 200 + i, "sm_90a", 9000);
        if (i < 5)
            CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    }
    qjit_cache_close(c);
    /* one row of the shipped file is damaged (before it is shipped) */
    CHECK(raw_flip_cubin_byte(src_db, rows[4].row.key, 7), "edit");
    qjit_cache_db *adm = NULL;
    uint64_t copied = 0, bad = 0;
    CHECK_OK(qjit_cache_db_open(src_db, 0, &adm));
    /* export skips the damaged row, so put it back in afterwards by hand */
    CHECK_OK(qjit_cache_db_export(adm, shipped, NULL, &copied, &bad));
    CHECK(copied == 4 && bad == 1, "export copied=%llu bad=%llu", (unsigned long long)copied,
          (unsigned long long)bad);
    qjit_cache_db_close(adm);
    char attach[2048], hex4[33];
    qjit_key_hex(rows[4].row.key, hex4);
    snprintf(attach, sizeof attach,
             "ATTACH '%s' AS s; INSERT INTO main.kernels SELECT * FROM s.kernels WHERE key = "
             "x'%s'",
             src_db, hex4);
    CHECK(raw_sql(shipped, attach) == SQLITE_OK, "append damaged row");
    CHECK(raw_count(shipped, "SELECT count(*) FROM kernels") == 5, "shipped rows");
    char *shm = path_in(ship_dir, "shipped.db-shm");
    char *wal = path_in(ship_dir, "shipped.db-wal");
    CHECK(!file_exists(wal), "export left a -wal");

    uint8_t before[16], after[16];
    struct stat st0, st1;
    CHECK(hash_file(shipped, before) && stat(shipped, &st0) == 0, "hash shipped");
    chmod(shipped, 0444);

    c = open_cache(run_dir, shipped, 0);
    for (int i = 0; i < 4; i++)
        CHECK(expect_hit(c, &rows[i]), "shipped row %d not served", i);
    int w = warnings;
    CHECK(expect_miss(c, &rows[4]), "damaged shipped row was a hit");
    CHECK(warnings > w && strstr(last_warning, "shipped"), "warning: %s", last_warning);
    CHECK(expect_miss(c, &rows[5]), "row in neither was a hit");
    CHECK_OK(qjit_cache_put(c, &rows[4].row, &ins)); /* lands in the writable DB */
    CHECK_OK(qjit_cache_put(c, &rows[5].row, &ins));
    CHECK(expect_hit(c, &rows[4]) && expect_hit(c, &rows[5]), "writable rows under shipped");
    qjit_cache_close(c);
    CHECK(raw_count(run_db, "SELECT count(*) FROM kernels") == 2,
          "hits from the shipped DB were copied into the writable one (or puts were lost)");
    CHECK(hash_file(shipped, after) && memcmp(before, after, 16) == 0,
          "shipped DB bytes changed");
    CHECK(stat(shipped, &st1) == 0 && st1.st_mtime == st0.st_mtime, "shipped mtime changed");
    CHECK(!file_exists(shm) && !file_exists(wal), "files written next to the shipped DB");

    /* a WAL-mode DB (a writable cache copied as is) works as a shipped one too */
    c = open_cache(run_dir, src_db, 0);
    CHECK(expect_hit(c, &rows[0]), "WAL-mode file as shipped cache");
    qjit_cache_close(c);

    /* a missing or garbage shipped file: warned about, writable cache still works */
    w = warnings;
    c = open_cache(run_dir, "/nonexistent/shipped.db", 0);
    CHECK(warnings > w && expect_hit(c, &rows[5]), "missing shipped file");
    qjit_cache_close(c);
    char *garbage = path_in(ship_dir, "garbage.db");
    FILE *f = fopen(garbage, "w");
    for (int i = 0; i < 5000; i++)
        fputc(i & 0xff, f);
    fclose(f);
    w = warnings;
    c = open_cache(run_dir, garbage, 0);
    CHECK(warnings > w && expect_hit(c, &rows[5]) && expect_miss(c, &rows[0]),
          "garbage shipped file");
    qjit_cache_close(c);
    chmod(shipped, 0644);
    for (int i = 0; i < 6; i++)
        row_free(&rows[i]);
    free(src_db);
    free(shipped);
    free(run_db);
    free(shm);
    free(wal);
    free(garbage);
}

typedef struct listed {
    int n;
    char keys[64][33];
    char descs[64][160];
    uint64_t cubin[64];
} listed;

static int collect(void *user, const qjit_cache_entry *e)
{
    listed *l = user;
    if (l->n < 64) {
        snprintf(l->keys[l->n], 33, "%s", e->key);
        snprintf(l->descs[l->n], 160, "%s", e->desc);
        l->cubin[l->n] = e->cubin_bytes;
    }
    l->n++;
    return 0;
}

static int stop_after_two(void *user, const qjit_cache_entry *e)
{
    (void)e;
    return ++*(int *)user >= 2;
}

static void test_export_merge(void)
{
    const char *dir = tl_tmpdir("cache-export");
    const char *dir2 = tl_tmpdir("cache-merge");
    char *db = path_in(dir, "qjit.db");
    char *all = path_in(dir, "all.db");
    char *sm80 = path_in(dir, "sm80.db");
    char *db2 = path_in(dir2, "qjit.db");
    test_row rows[20];
    int ins;
    qjit_cache *c = open_cache(dir, NULL, 0);
    for (int i = 0; i < 20; i++) {
        row_make(&rows[i], 300 + i, i % 2 ? "sm_80" : "sm_90a", 1000 + 100 * i);
        CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    }
    qjit_cache_close(c);

    qjit_cache_db *a = NULL, *b = NULL;
    uint64_t n = 0, bad = 0;
    CHECK_OK(qjit_cache_db_open(db, 0, &a));
    CHECK_OK(qjit_cache_db_export(a, all, NULL, &n, &bad));
    CHECK(n == 20 && bad == 0, "export all: %llu %llu", (unsigned long long)n,
          (unsigned long long)bad);
    qjit_cache_filter f = {.arch = "sm_80"};
    CHECK_OK(qjit_cache_db_export(a, sm80, &f, &n, &bad));
    CHECK(n == 10, "export sm_80: %llu", (unsigned long long)n);
    CHECK(qjit_cache_db_export(a, sm80, &f, &n, &bad) == QJIT_ERROR_IO && n == 0,
          "export over an existing file");

    /* merge into an empty DB: every row, byte for byte */
    CHECK_OK(qjit_cache_db_open(db2, 1, &b));
    CHECK_OK(qjit_cache_db_merge(b, all, &n, &bad));
    CHECK(n == 20 && bad == 0, "merge: added %llu bad %llu", (unsigned long long)n,
          (unsigned long long)bad);
    CHECK_OK(qjit_cache_db_merge(b, all, &n, &bad));
    CHECK(n == 0, "merging again added %llu", (unsigned long long)n);
    CHECK(qjit_cache_db_merge(b, db2, &n, &bad) == QJIT_ERROR_INVALID_ARGUMENT,
          "merge into itself");
    CHECK(qjit_cache_db_merge(b, "/nonexistent.db", &n, &bad) == QJIT_ERROR_IO, "missing");
    listed la = {0}, lb = {0};
    CHECK_OK(qjit_cache_db_list(a, NULL, collect, &la));
    CHECK_OK(qjit_cache_db_list(b, NULL, collect, &lb));
    CHECK(la.n == 20 && lb.n == 20, "list counts %d %d", la.n, lb.n);
    for (int i = 0; i < la.n && i < lb.n; i++)
        CHECK(strcmp(la.keys[i], lb.keys[i]) == 0 && strcmp(la.descs[i], lb.descs[i]) == 0 &&
                  la.cubin[i] == lb.cubin[i],
              "row %d differs after export+merge", i);
    qjit_cache_db_close(b);
    c = open_cache(dir2, NULL, 0);
    for (int i = 0; i < 20; i++)
        CHECK(expect_hit(c, &rows[i]), "merged row %d does not read back", i);
    qjit_cache_close(c);

    /* a damaged incoming row is not merged */
    CHECK(raw_flip_cubin_byte(sm80, rows[1].row.key, 3), "edit");
    const char *dir3 = tl_tmpdir("cache-merge3");
    char *db3 = path_in(dir3, "qjit.db");
    CHECK_OK(qjit_cache_db_open(db3, 1, &b));
    CHECK_OK(qjit_cache_db_merge(b, sm80, &n, &bad));
    CHECK(n == 9 && bad == 1, "merge with a bad row: added %llu bad %llu",
          (unsigned long long)n, (unsigned long long)bad);
    qjit_cache_db_close(b);

    /* filters */
    listed l = {0};
    qjit_cache_filter m = {.match = "tile=128x128x337 "}; /* row 305 */
    CHECK_OK(qjit_cache_db_list(a, &m, collect, &l));
    CHECK(l.n == 1 && strstr(l.descs[0], "x337 "), "match filter: %d", l.n);
    char prefix[5];
    memcpy(prefix, la.keys[3], 4);
    prefix[4] = 0;
    qjit_cache_filter k = {.key_prefix = prefix};
    l.n = 0;
    CHECK_OK(qjit_cache_db_list(a, &k, collect, &l));
    CHECK(l.n >= 1 && strncmp(l.keys[0], prefix, 4) == 0, "key filter");
    qjit_cache_filter both = {.arch = "sm_90", .match = "x301 "};
    l.n = 0;
    CHECK_OK(qjit_cache_db_list(a, &both, collect, &l));
    CHECK(l.n == 0, "arch and match must both hold: %d", l.n);
    qjit_cache_filter badk = {.key_prefix = "xyz"};
    CHECK(qjit_cache_db_list(a, &badk, collect, &l) == QJIT_ERROR_INVALID_ARGUMENT, "bad hex");
    int seen = 0;
    CHECK_OK(qjit_cache_db_list(a, NULL, stop_after_two, &seen));
    CHECK(seen == 2, "callback stop: %d", seen);
    qjit_cache_db_close(a);
    for (int i = 0; i < 20; i++)
        row_free(&rows[i]);
    free(db);
    free(all);
    free(sm80);
    free(db2);
    free(db3);
}

static void test_eviction(void)
{
    const char *dir = tl_tmpdir("cache-evict");
    char *db = path_in(dir, "qjit.db");
    test_row rows[12];
    int ins;
    for (int i = 0; i < 12; i++)
        row_make(&rows[i], 400 + i, "sm_90a", 10000);
    size_t one = rows[0].cubin_len + rows[0].row.source_len;
    uint64_t cap = 5 * one + one / 2; /* room for 5 rows */
    qjit_cache *c = open_cache(dir, NULL, cap);
    for (int i = 0; i < 5; i++)
        CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    CHECK(expect_hit(c, &rows[0]), "row 0"); /* row 0 is now the most recently used */
    CHECK_OK(qjit_cache_put(c, &rows[5].row, &ins));
    CHECK(expect_hit(c, &rows[0]), "recently used row 0 was evicted");
    CHECK(expect_miss(c, &rows[1]), "least recently used row 1 was kept");
    for (int i = 6; i < 12; i++)
        CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    qjit_cache_close(c);
    long long total = raw_count(db, "SELECT sum(cubin_size + source_size) FROM kernels");
    CHECK(total > 0 && (uint64_t)total <= cap, "total %lld over cap %llu", total,
          (unsigned long long)cap);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 5, "rows kept");
    c = open_cache(dir, NULL, cap);
    for (int i = 7; i < 12; i++)
        CHECK(expect_hit(c, &rows[i]), "newest row %d evicted", i);
    qjit_cache_close(c);

    /* a row bigger than the cap is not stored, and says so */
    int w = warnings;
    c = open_cache(dir, NULL, one / 2);
    CHECK_OK(qjit_cache_put(c, &rows[1].row, &ins));
    CHECK(ins == 0 && warnings > w, "oversized row");
    qjit_cache_close(c);

    /* admin pruning */
    qjit_cache_db *a = NULL;
    uint64_t removed = 0;
    CHECK_OK(qjit_cache_db_open(db, 0, &a));
    CHECK(qjit_cache_db_prune_size(a, 0, &removed) == QJIT_ERROR_INVALID_ARGUMENT,
          "prune on a read-only handle");
    qjit_cache_db_close(a);
    CHECK_OK(qjit_cache_db_open(db, 1, &a));
    /* the cap is on the file (with its -wal), which holds more than the kernels' bytes:
     * 8 kernels' worth leaves room for some of the 5, not all */
    CHECK_OK(qjit_cache_db_prune_size(a, 8 * one, &removed));
    qjit_cache_stats s;
    CHECK_OK(qjit_cache_db_stats(a, &s));
    const uint64_t left = s.rows;
    CHECK(removed >= 1 && left >= 2 && removed + left == 5 && s.file_bytes <= 8 * one,
          "prune_size to %zu: removed %llu, %llu left, file %llu bytes", 8 * one,
          (unsigned long long)removed, (unsigned long long)left,
          (unsigned long long)s.file_bytes);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels WHERE last_used < (SELECT min(last_used) "
                        "FROM kernels)") == 0, "sanity");
    CHECK_OK(qjit_cache_db_prune_age(a, 3600, &removed));
    CHECK(removed == 0, "prune_age removed fresh rows: %llu", (unsigned long long)removed);
    CHECK(raw_sql(db, "UPDATE kernels SET last_used = last_used - 7200000 WHERE rowid = "
                      "(SELECT min(rowid) FROM kernels)") == SQLITE_OK, "age a row");
    CHECK_OK(qjit_cache_db_prune_age(a, 3600, &removed));
    CHECK(removed == 1, "prune_age removed %llu", (unsigned long long)removed);
    CHECK_OK(qjit_cache_db_vacuum(a));
    CHECK_OK(qjit_cache_db_stats(a, &s));
    CHECK(s.rows == left - 1 && s.narch == 1 && s.arch[0].rows == left - 1 &&
              strcmp(s.arch[0].arch, "sm_90a") == 0 && s.file_bytes > 0 &&
              s.schema_version == QJIT_DB_SCHEMA_VERSION,
          "stats rows=%llu narch=%d", (unsigned long long)s.rows, s.narch);
    qjit_cache_db_close(a);
    for (int i = 0; i < 12; i++)
        row_free(&rows[i]);
    free(db);
}

/* ---- several processes */

/* Child: put keys [lo, hi) then read them back; exit 0 only if every call worked. */
static int child_put_range(const char *dir, int lo, int hi)
{
    int fails = 0, ins;
    qjit_cache_config cfg = {dir, NULL, 0, 0, NULL};
    qjit_cache *c = NULL;
    if (qjit_cache_open(&cfg, &c) != QJIT_OK)
        return 2;
    if (strcmp(qjit_cache_path(c), ":memory:") == 0)
        fails++;
    for (int i = lo; i < hi; i++) {
        test_row r;
        row_make(&r, i, i % 3 ? "sm_90a" : "sm_89", 4000 + 37 * (size_t)i);
        if (qjit_cache_put(c, &r.row, &ins) != QJIT_OK) {
            fprintf(stderr, "child put %d: %s\n", i, qjit_last_error());
            fails++;
        }
        if (!expect_hit(c, &r))
            fails++;
        row_free(&r);
    }
    qjit_cache_close(c);
    return fails ? 1 : 0;
}

static void test_processes(void)
{
    const char *dir = tl_tmpdir("cache-procs");
    char *db = path_in(dir, "qjit.db");
    pid_t pids[4];
    /* the DB does not exist yet: creating it races too */
    fflush(NULL);
    for (int p = 0; p < 4; p++) {
        pids[p] = fork();
        if (pids[p] == 0)
            _exit(child_put_range(dir, p * 25, p * 25 + 60));
    }
    for (int p = 0; p < 4; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status %d)", p,
              status);
    }
    /* keys 0..134 (75 + 60 - 1), each once and valid */
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 135, "rows: %lld",
          raw_count(db, "SELECT count(*) FROM kernels"));
    CHECK(raw_count(db, "SELECT count(DISTINCT key) FROM kernels") == 135, "distinct keys");
    qjit_cache_verify_report rep;
    CHECK(verify_file(db, &rep) && rep.integrity_ok && rep.rows_bad == 0 &&
              rep.rows_checked == 135,
          "verify after concurrent writers: checked %llu bad %llu (%s)",
          (unsigned long long)rep.rows_checked, (unsigned long long)rep.rows_bad,
          rep.integrity);
    qjit_cache *c = open_cache(dir, NULL, 0);
    int hits = 0;
    for (int i = 0; i < 135; i++) {
        test_row r;
        row_make(&r, i, i % 3 ? "sm_90a" : "sm_89", 4000 + 37 * (size_t)i);
        hits += expect_hit(c, &r);
        row_free(&r);
    }
    CHECK(hits == 135, "hits %d", hits);
    qjit_cache_close(c);
    free(db);
}

/* Child: insert forever; never returns. */
static void child_insert_forever(const char *dir, int base)
{
    qjit_cache_config cfg = {dir, NULL, 0, 0, NULL};
    qjit_cache *c = NULL;
    if (qjit_cache_open(&cfg, &c) != QJIT_OK)
        _exit(2);
    for (int i = base;; i++) {
        test_row r;
        int ins;
        row_make(&r, i, "sm_90a", 150000);
        qjit_cache_put(c, &r.row, &ins);
        row_free(&r);
    }
}

/* Child: open a transaction with the raw API, write, and die before COMMIT. */
static void child_die_in_transaction(const char *db)
{
    sqlite3 *h = NULL;
    if (sqlite3_open(db, &h) != SQLITE_OK)
        _exit(2);
    sqlite3_busy_timeout(h, 10000);
    sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    sqlite3_exec(h, "DELETE FROM kernels", NULL, NULL, NULL);
    sqlite3_exec(h, "INSERT INTO kernels SELECT x'00112233445566778899aabbccddeeff', 1, x'00', "
                    "0, 0, 0, 0, 'sm_90a', 'junk', x'00', x'00', ''",
                 NULL, NULL, NULL);
    raise(SIGKILL);
}

static void test_killed_writer(void)
{
    const char *dir = tl_tmpdir("cache-kill");
    char *db = path_in(dir, "qjit.db");
    test_row keep;
    int ins;
    row_make(&keep, 9999, "sm_90a", 1234);
    qjit_cache *c = open_cache(dir, NULL, 0);
    CHECK_OK(qjit_cache_put(c, &keep.row, &ins));
    qjit_cache_close(c);

    for (int round = 0; round < 4; round++) {
        fflush(NULL); /* a child must not print the parent's buffered output again */
        pid_t pid = fork();
        if (pid == 0)
            child_insert_forever(dir, 10000 + round * 100000);
        struct timespec ts = {0, (40 + 70 * round) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status), "round %d: child was not killed", round);
        qjit_cache_verify_report rep;
        CHECK(verify_file(db, &rep) && rep.integrity_ok && rep.rows_bad == 0,
              "round %d: DB after SIGKILL: %s, bad %llu", round, rep.integrity,
              (unsigned long long)rep.rows_bad);
        CHECK(rep.rows_checked >= 1, "round %d: rows %llu", round,
              (unsigned long long)rep.rows_checked);
    }
    long long rows = raw_count(db, "SELECT count(*) FROM kernels");

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        child_die_in_transaction(db);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status), "transaction child was not killed");
    /* its transaction never happened, and its lock died with it */
    c = open_cache(dir, NULL, 0);
    CHECK(expect_hit(c, &keep), "row lost to a killed transaction");
    test_row r;
    row_make(&r, 77, "sm_80", 500);
    CHECK_OK(qjit_cache_put(c, &r.row, &ins));
    CHECK(ins == 1 && expect_hit(c, &r), "put after a killed transaction");
    qjit_cache_close(c);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == rows + 1, "rows %lld -> %lld", rows,
          raw_count(db, "SELECT count(*) FROM kernels"));
    qjit_cache_verify_report rep;
    CHECK(verify_file(db, &rep) && rep.integrity_ok && rep.rows_bad == 0, "final verify");
    row_free(&r);
    row_free(&keep);
    free(db);
}

/* ---- threads sharing one cache */

typedef struct thread_arg {
    qjit_cache *c;
    int id, fails;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 40; i++) {
        test_row r;
        int ins;
        row_make(&r, 5000 + (i + a->id * 7) % 60, "sm_90a", 3000);
        void *bin = NULL;
        size_t len;
        qjit_status st = qjit_cache_get(a->c, r.row.key, r.row.material, r.row.material_len,
                                        &bin, &len);
        if (st == QJIT_OK)
            a->fails += len != r.cubin_len || memcmp(bin, r.cubin, len) != 0;
        else if (st != QJIT_ERROR_NOT_FOUND || qjit_cache_put(a->c, &r.row, &ins) != QJIT_OK)
            a->fails++;
        free(bin);
        row_free(&r);
    }
    return NULL;
}

static void test_threads(void)
{
    const char *dir = tl_tmpdir("cache-threads");
    qjit_cache *c = open_cache(dir, NULL, 0);
    pthread_t t[8];
    thread_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (thread_arg){c, i, 0};
        pthread_create(&t[i], NULL, thread_main, &a[i]);
    }
    int fails = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        fails += a[i].fails;
    }
    CHECK(fails == 0, "%d failures across threads", fails);
    char *db = path_in(dir, "qjit.db");
    qjit_cache_close(c);
    CHECK(raw_count(db, "SELECT count(*) FROM kernels") == 60, "rows %lld",
          raw_count(db, "SELECT count(*) FROM kernels"));
    free(db);
}

/* ---- admin: verify/repair, source, schema versions */

static int bad_rows_seen;
static void on_bad(void *user, const char *key, const char *desc, const char *why)
{
    (void)user;
    (void)desc;
    bad_rows_seen++;
    if (strlen(key) != 32 || !why || !*why)
        bad_rows_seen += 1000;
}

static void test_admin(void)
{
    const char *dir = tl_tmpdir("cache-admin");
    char *db = path_in(dir, "qjit.db");
    test_row rows[10];
    int ins;
    qjit_cache *c = open_cache(dir, NULL, 0);
    for (int i = 0; i < 10; i++) {
        row_make(&rows[i], 600 + i, "sm_90a", 30000);
        CHECK_OK(qjit_cache_put(c, &rows[i].row, &ins));
    }
    qjit_cache_close(c);

    qjit_cache_db *a = NULL;
    CHECK(qjit_cache_db_open("/nonexistent/x.db", 0, &a) == QJIT_ERROR_IO && a == NULL,
          "read-only open of a missing file");

    /* source by key prefix */
    CHECK_OK(qjit_cache_db_open(db, 0, &a));
    char hex[33], *src = NULL;
    size_t len = 0;
    qjit_cache_entry en;
    qjit_key_hex(rows[3].row.key, hex);
    hex[10] = 0;
    CHECK_OK(qjit_cache_db_source(a, hex, &src, &len, &en));
    CHECK(src && strcmp(src, rows[3].source) == 0 && len == strlen(rows[3].source),
          "source: %s", src ? src : "(null)");
    CHECK(strcmp(en.desc, rows[3].desc) == 0 && en.cubin_bytes == 30000 &&
              strncmp(en.key, hex, 10) == 0 && en.created > 1600000000,
          "entry of source");
    qjit_cache_free(src);
    for (char *p = hex; *p; p++) /* upper case works too */
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    CHECK_OK(qjit_cache_db_source(a, hex, &src, NULL, NULL));
    qjit_cache_free(src);
    CHECK(qjit_cache_db_source(a, "ab", &src, NULL, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "2-digit prefix");
    CHECK(qjit_cache_db_source(a, "zzzz", &src, NULL, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "non-hex prefix");
    /* find a prefix that no key has, and one that two share (4 digits, 10 keys) */
    char missing[5] = "0000";
    for (int v = 0; v < 65536; v++) {
        snprintf(missing, 5, "%04x", v);
        int used = 0;
        for (int i = 0; i < 10; i++) {
            qjit_key_hex(rows[i].row.key, hex);
            used |= strncmp(hex, missing, 4) == 0;
        }
        if (!used)
            break;
    }
    CHECK(qjit_cache_db_source(a, missing, &src, NULL, NULL) == QJIT_ERROR_NOT_FOUND &&
              src == NULL,
          "unknown prefix");
    qjit_cache_db_close(a);
    CHECK(raw_sql(db, "INSERT INTO kernels SELECT x'0123456789abcdef0000000000000000', "
                      "cubin_size, cubin_hash, source_size, compile_ms, created, last_used, arch, "
                      "descriptor, material, cubin, source FROM kernels LIMIT 1;"
                      "INSERT INTO kernels SELECT x'0123456789abcdef1111111111111111', "
                      "cubin_size, cubin_hash, source_size, compile_ms, created, last_used, arch, "
                      "descriptor, material, cubin, source FROM kernels LIMIT 1") == SQLITE_OK,
          "add rows with wrong keys");
    CHECK_OK(qjit_cache_db_open(db, 0, &a));
    CHECK(qjit_cache_db_source(a, "01234567", &src, NULL, NULL) == QJIT_ERROR_INVALID_ARGUMENT &&
              strstr(qjit_last_error(), "0123456789abcdef1111"),
          "ambiguous prefix: %s", qjit_last_error());

    /* verify finds the two rows whose key is not the hash of their material, and a
     * flipped cubin byte */
    CHECK(raw_flip_cubin_byte(db, rows[5].row.key, 29999), "edit");
    qjit_cache_verify_report rep;
    bad_rows_seen = 0;
    CHECK_OK(qjit_cache_db_verify(a, 0, on_bad, NULL, &rep));
    CHECK(rep.rows_checked == 12 && rep.rows_bad == 3 && rep.rows_deleted == 0 &&
              rep.integrity_ok && bad_rows_seen == 3,
          "verify: checked %llu bad %llu seen %d", (unsigned long long)rep.rows_checked,
          (unsigned long long)rep.rows_bad, bad_rows_seen);
    CHECK(qjit_cache_db_verify(a, 1, NULL, NULL, &rep) == QJIT_ERROR_INVALID_ARGUMENT,
          "repair through a read-only handle");
    qjit_cache_db_close(a);
    CHECK_OK(qjit_cache_db_open(db, 1, &a));
    CHECK_OK(qjit_cache_db_verify(a, 1, NULL, NULL, &rep));
    CHECK(rep.rows_bad == 3 && rep.rows_deleted == 3, "repair deleted %llu",
          (unsigned long long)rep.rows_deleted);
    CHECK_OK(qjit_cache_db_verify(a, 0, NULL, NULL, &rep));
    CHECK(rep.rows_checked == 9 && rep.rows_bad == 0, "after repair: %llu rows",
          (unsigned long long)rep.rows_checked);
    CHECK_OK(qjit_cache_db_vacuum(a)); /* no free pages left: damage lands on rows */
    qjit_cache_db_close(a);

    /* damaged pages: verify says so, repair rebuilds from what still reads */
    struct stat st;
    stat(db, &st);
    FILE *f = fopen(db, "r+b");
    fseek(f, st.st_size / 2, SEEK_SET);
    for (int i = 0; i < 8192; i++)
        fputc(0xa5, f);
    fclose(f);
    CHECK_OK(qjit_cache_db_open(db, 1, &a));
    if (a) {
        CHECK_OK(qjit_cache_db_verify(a, 0, NULL, NULL, &rep));
        CHECK(!rep.integrity_ok, "quick_check missed damaged pages");
        CHECK_OK(qjit_cache_db_verify(a, 1, NULL, NULL, &rep));
        uint64_t lost = rep.rows_deleted;
        CHECK(lost >= 1 && lost < 9, "rebuild reports %llu rows lost", (unsigned long long)lost);
        CHECK_OK(qjit_cache_db_verify(a, 0, NULL, NULL, &rep));
        CHECK(rep.rows_checked + lost == 9, "rows kept %llu + lost %llu != 9",
              (unsigned long long)rep.rows_checked, (unsigned long long)lost);
        CHECK(rep.integrity_ok && rep.rows_bad == 0 && rep.rows_checked >= 1 &&
                  rep.rows_checked < 9,
              "after rebuild: ok=%d rows=%llu (%s)", rep.integrity_ok,
              (unsigned long long)rep.rows_checked, rep.integrity);
        qjit_cache_db_close(a);
    }
    c = open_cache(dir, NULL, 0);
    int hits = 0;
    for (int i = 0; i < 10; i++)
        hits += expect_hit(c, &rows[i]);
    CHECK(hits == (int)rep.rows_checked, "hits %d after rebuild", hits);
    qjit_cache_close(c);

    /* a file that is not SQLite at all is refused, and left alone */
    char *text = path_in(dir, "notes.txt");
    f = fopen(text, "w");
    fputs("these are not kernels\n", f);
    fclose(f);
    CHECK(qjit_cache_db_open(text, 1, &a) == QJIT_ERROR_CACHE, "text file opened");
    f = fopen(text, "r");
    char line[64] = "";
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "these are not kernels\n") == 0,
          "text file modified");
    if (f)
        fclose(f);

    /* another schema version: admin refuses, the library recreates with a warning */
    CHECK(raw_sql(db, "PRAGMA user_version = 99") == SQLITE_OK, "set version");
    CHECK(qjit_cache_db_open(db, 0, &a) == QJIT_ERROR_CACHE &&
              strstr(qjit_last_error(), "99"),
          "admin opened version 99: %s", qjit_last_error());
    CHECK(qjit_cache_db_open(db, 1, &a) == QJIT_ERROR_CACHE, "admin rw opened version 99");
    CHECK(raw_count(db, "PRAGMA user_version") == 99, "admin changed the version");
    int w = warnings;
    c = open_cache(dir, NULL, 0);
    CHECK(warnings > w && strstr(last_warning, "99"), "warning: %s", last_warning);
    CHECK(expect_miss(c, &rows[0]), "rows of another version were used");
    CHECK_OK(qjit_cache_put(c, &rows[0].row, &ins));
    CHECK(expect_hit(c, &rows[0]), "put after recreate");
    qjit_cache_close(c);
    CHECK(raw_count(db, "PRAGMA user_version") == QJIT_DB_SCHEMA_VERSION, "version");
    for (int i = 0; i < 10; i++)
        row_free(&rows[i]);
    free(db);
    free(text);
}

int main(void)
{
    test_miss_then_hit();
    test_material_mismatch();
    test_damaged_row();
    test_damaged_file();
    test_dir_removed();
    test_unusable_dir();
    test_default_dir();
    test_shipped();
    test_export_merge();
    test_eviction();
    test_processes();
    test_killed_writer();
    test_threads();
    test_admin();
    return tl_finish("test_cache");
}
