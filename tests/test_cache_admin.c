/*
 * test_cache_admin.c — the cache administration keeps its word: verify with repair
 * rebuilds a file whose header is damaged (through the API and through qjit-cache),
 * keeping the rows that still verify and saying how many it kept and lost, and prune
 * --max-size leaves a file no larger than the cap.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"
#include "cache_db.h"
#include "testlib.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CACHE_TOOL QJIT_BINARY_DIR "/tools/qjit-cache"

static const qjit_logger quiet = {NULL, NULL};

/* n synthetic rows of `size`-byte cubins into dir/qjit.db, through the runtime store. */
static void fill(const char *dir, int n, size_t size)
{
    qjit_cache_config cfg = {dir, NULL, 0, 0, quiet};
    qjit_cache *c = NULL;
    CHECK_OK(qjit_cache_open(&cfg, &c));
    uint8_t *cubin = malloc(size);
    for (int i = 0; c && cubin && i < n; i++) {
        char material[64], desc[160], source[2048];
        snprintf(material, sizeof material, "material of kernel %d", i);
        snprintf(desc, sizeof desc, "gemm a=f16 b=f16 out=f16 arch=sm_80 kernel=mma "
                 "tile=64x64x%d warps=2x2 stages=2 split=1", 32 + i);
        memset(source, 'a' + i % 26, sizeof source - 1);
        source[sizeof source - 1] = 0;
        uint32_t x = 2654435761u * (uint32_t)(i + 1);
        for (size_t j = 0; j < size; j++) {
            x = x * 1664525u + 1013904223u;
            cubin[j] = (uint8_t)(x >> 24);
        }
        qjit_cache_row r = {0};
        qjit_hash128(material, strlen(material), r.key);
        r.material = material;
        r.material_len = strlen(material);
        r.desc = desc;
        r.arch = "sm_80";
        r.cubin = cubin;
        r.cubin_len = size;
        r.source = source;
        r.source_len = strlen(source);
        int ins = 0;
        CHECK_OK(qjit_cache_put(c, &r, &ins));
    }
    free(cubin);
    qjit_cache_close(c);
}

static void overwrite(const char *path, long at, size_t n, int byte)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (!f)
        return;
    fseek(f, at, SEEK_SET);
    for (size_t i = 0; i < n; i++)
        fputc(byte, f);
    fclose(f);
}

static uint64_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Run qjit-cache with args (NULL-terminated); its exit status, output into *out. */
static int run_cache_tool(const char *const *args, char *out, size_t cap)
{
    return tl_run(CACHE_TOOL, args, NULL, out, cap);
}

/* The case: the first 100 bytes overwritten.  SQLite no longer sees a database;
 * repair moves the file aside and rebuilds it with every row (they all still verify). */
static void test_header_api(void)
{
    const char *dir = tl_tmpdir("admin-header");
    char db[1100], aside[1200];
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    snprintf(aside, sizeof aside, "%s.corrupt", db);
    fill(dir, 12, 20000);
    overwrite(db, 0, 100, 0x5a);

    qjit_cache_db *h = NULL;
    qjit_cache_verify_report r;
    /* read-only: reported as damaged, not refused at open */
    CHECK_OK(qjit_cache_db_open(db, 0, &h));
    if (h) {
        CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &r));
        CHECK(!r.integrity_ok && strstr(r.integrity, "not a database") && !r.rebuilt,
              "verify of a damaged header: ok %d '%s'", r.integrity_ok, r.integrity);
        qjit_cache_stats s;
        CHECK(qjit_cache_db_stats(h, &s) == QJIT_ERROR_CACHE &&
                  strstr(qjit_last_error(), "verify with repair"),
              "stats on a damaged file: %s", qjit_last_error());
        CHECK(qjit_cache_db_verify(h, 1, NULL, NULL, &r) == QJIT_ERROR_INVALID_ARGUMENT,
              "repair through a read-only handle");
    }
    qjit_cache_db_close(h);
    h = NULL;
    CHECK_OK(qjit_cache_db_open(db, 1, &h));
    if (h) {
        CHECK_OK(qjit_cache_db_verify(h, 1, NULL, NULL, &r));
        CHECK(r.rebuilt == 1 && r.rows_kept == 12 && r.rows_deleted == 0,
              "repair: rebuilt %d kept %llu lost %llu", r.rebuilt,
              (unsigned long long)r.rows_kept, (unsigned long long)r.rows_deleted);
        CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &r));
        CHECK(r.integrity_ok && r.rows_checked == 12 && r.rows_bad == 0,
              "after repair: ok %d, %llu rows, %llu bad", r.integrity_ok,
              (unsigned long long)r.rows_checked, (unsigned long long)r.rows_bad);
    }
    qjit_cache_db_close(h);
    CHECK(size_of(aside) > 0, "the damaged file was not kept at %s", aside);

    /* header and every page after the first gone (the schema text left on page 1 says
     * what the file was): no row can be read, the file is rebuilt empty */
    uint64_t whole = size_of(db);
    overwrite(db, 0, 100, 0x5a);
    overwrite(db, 4096, (size_t)(whole - 4096), 0xa5);
    h = NULL;
    CHECK_OK(qjit_cache_db_open(db, 1, &h));
    if (h) {
        CHECK_OK(qjit_cache_db_verify(h, 1, NULL, NULL, &r));
        CHECK(r.rebuilt == 1 && r.rows_kept == 0, "repair of an unreadable file: rebuilt %d "
              "kept %llu", r.rebuilt, (unsigned long long)r.rows_kept);
        CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &r));
        CHECK(r.integrity_ok && r.rows_checked == 0, "after: ok %d rows %llu", r.integrity_ok,
              (unsigned long long)r.rows_checked);
    }
    qjit_cache_db_close(h);

    /* a file that is no qjit cache is still refused, and left alone */
    char other[1100];
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *f = fopen(other, "w");
    for (int i = 0; f && i < 200; i++)
        fputs("not a database, a person's notes\n", f);
    if (f)
        fclose(f);
    h = NULL;
    CHECK(qjit_cache_db_open(other, 1, &h) == QJIT_ERROR_CACHE && h == NULL &&
              strstr(qjit_last_error(), "not a qjit cache"),
          "a foreign file opened as a cache: %s", qjit_last_error());
    qjit_cache_db_close(h);
    char other_aside[1200];
    snprintf(other_aside, sizeof other_aside, "%s.corrupt", other);
    CHECK(size_of(other) == 200 * 33 && size_of(other_aside) == 0, "the foreign file was touched");
}

/* The same through the tool, as a user types it. */
static void test_header_tool(void)
{
    const char *dir = tl_tmpdir("admin-tool");
    char db[1100], out[16384];
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    fill(dir, 5, 20000);
    overwrite(db, 0, 100, 0x5a);
    const char *verify[] = {"--db", db, "verify", NULL};
    int rc = run_cache_tool(verify, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "not a database") && !strstr(out, "open:"),
          "verify of a damaged header: exit %d:\n%s", rc, out);
    const char *repair[] = {"--db", db, "verify", "--repair", NULL};
    rc = run_cache_tool(repair, out, sizeof out);
    CHECK(rc == 0, "verify --repair: exit %d:\n%s", rc, out);
    CHECK(strstr(out, "kept 5 kernels, lost 0") && strstr(out, ".corrupt"),
          "verify --repair does not say what it kept and lost:\n%s", out);
    CHECK(strstr(out, "after     file ok, 5 rows, 0 bad"), "after the repair:\n%s", out);
    const char *list[] = {"--db", db, "list", NULL};
    rc = run_cache_tool(list, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "5 kernels"), "list after repair: exit %d:\n%s", rc, out);
}

/* prune --max-size: the file (with its -wal) fits the cap afterwards, not only the
 * kernels' bytes; and what is left still verifies. */
static void test_prune_fits(void)
{
    const char *dir = tl_tmpdir("admin-prune");
    char db[1100], wal[1200], out[16384];
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", db);
    fill(dir, 50, 48000);
    const uint64_t cap = 1024 * 1024;
    CHECK(size_of(db) + size_of(wal) > 2 * cap, "the file is only %llu bytes",
          (unsigned long long)(size_of(db) + size_of(wal)));
    qjit_cache_db *h = NULL;
    uint64_t removed = 0;
    CHECK_OK(qjit_cache_db_open(db, 1, &h));
    if (h) {
        CHECK_OK(qjit_cache_db_prune_size(h, cap, &removed));
        qjit_cache_stats s;
        CHECK_OK(qjit_cache_db_stats(h, &s));
        CHECK(s.file_bytes <= cap && s.rows > 0 && removed + s.rows == 50,
              "after prune to %llu: file %llu bytes, %llu rows, %llu removed",
              (unsigned long long)cap, (unsigned long long)s.file_bytes,
              (unsigned long long)s.rows, (unsigned long long)removed);
        qjit_cache_verify_report r;
        CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &r));
        CHECK(r.integrity_ok && r.rows_bad == 0, "verify after prune");
    }
    qjit_cache_db_close(h);
    CHECK(size_of(db) + size_of(wal) <= cap, "file %llu + wal %llu bytes over the cap",
          (unsigned long long)size_of(db), (unsigned long long)size_of(wal));

    /* the tool says what the file came to */
    const char *prune[] = {"--db", db, "prune", "--max-size", "512K", NULL};
    int rc = run_cache_tool(prune, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "the cap 512.0 KiB"), "prune: exit %d:\n%s", rc, out);
    CHECK(size_of(db) + size_of(wal) <= 512 * 1024, "after the tool's prune: %llu bytes",
          (unsigned long long)(size_of(db) + size_of(wal)));
}

int main(void)
{
    if (access(CACHE_TOOL, X_OK) != 0) {
        fprintf(stderr, "%s is not built\n", CACHE_TOOL);
        return 1;
    }
    test_header_api();
    test_header_tool();
    test_prune_fits();
    return tl_finish("test_cache_admin");
}
