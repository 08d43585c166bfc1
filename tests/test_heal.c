/*
 * test_heal.c — a damaged cache heals in the run that finds it.  A good cache of a small
 * manifest is truncated at random offsets and has random bytes flipped (header pages
 * included), 22 trials of each; every time the very next qjit-precompile exits 0 with
 * every kernel present and the file verifying clean.  The same through the C API in one
 * process (the call that finds the damage stores what it compiles), and a write past a
 * file-size limit: a clear error, never a wrong kernel.  No GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include "qjit.h"
#include "testlib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOOL QJIT_BINARY_DIR "/tools/qjit-precompile"
#define TRIALS 22

static const char *const manifest_lines[] = {
    "gemm a=f16 b=f16 out=f16 bias=0 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 stages=2 "
    "split=1",
    "gemm a=bf16 b=bf16 out=f32 bias=1 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 stages=2 "
    "split=1",
};
#define NKERNELS 2

static uint64_t rng = 0x5eed1234abcd9876ull;
static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        b[n] = 0;
    *len = (size_t)n;
    return b;
}

static bool spill(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Run qjit-precompile on the manifest into dir; its exit status (-1 if it did not exit),
 * its output in `log`.  fsize > 0: under that file-size limit, SIGXFSZ ignored. */
static int precompile(const char *dir, const char *manifest, const char *log, long fsize)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        if (fsize > 0) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execl(TOOL, TOOL, "-j", "2", "--cache-dir", dir, manifest, (char *)NULL);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_row(void *user, const qjit_cache_entry *e)
{
    (void)e;
    (*(int *)user)++;
    return 0;
}

/* The DB at path verifies clean and holds `want` kernels. */
static bool clean_with(const char *path, int want, const char *what)
{
    qjit_cache_db *db = NULL;
    qjit_cache_verify_report r;
    int rows = 0;
    bool ok = qjit_cache_db_open(path, 0, &db) == QJIT_OK &&
              qjit_cache_db_verify(db, 0, NULL, NULL, &r) == QJIT_OK &&
              qjit_cache_db_list(db, NULL, count_row, &rows) == QJIT_OK;
    CHECK(ok && r.integrity_ok && r.rows_bad == 0 && rows == want,
          "%s: open/verify %s, integrity %d (%s), bad rows %llu, kernels %d of %d", what,
          ok ? "ok" : qjit_last_error(), ok ? r.integrity_ok : -1, ok ? r.integrity : "",
          ok ? (unsigned long long)r.rows_bad : 0ULL, rows, want);
    qjit_cache_db_close(db);
    return ok && r.integrity_ok && r.rows_bad == 0 && rows == want;
}

static void trials(const char *base, const char *manifest, const char *good, size_t n)
{
    char dir[1024], db[1100], log[1100];
    snprintf(dir, sizeof dir, "%s/trial", base);
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    snprintf(log, sizeof log, "%s/trial.log", base);
    mkdir(dir, 0755);
    int passed[2] = {0, 0};
    for (int t = 0; t < 2 * TRIALS; t++) {
        bool flip = t >= TRIALS;
        char *bytes = malloc(n);
        memcpy(bytes, good, n);
        size_t len = n;
        char what[160];
        if (!flip) {
            /* a few inside the first two pages (header and schema), the rest anywhere */
            len = t < 4 ? (size_t)rnd(8192) : (size_t)rnd(n);
            snprintf(what, sizeof what, "truncated to %zu of %zu bytes", len, n);
        } else {
            size_t at[4];
            for (int i = 0; i < 4; i++) {
                at[i] = (t - TRIALS) % 2 ? (size_t)rnd(8192 < n ? 8192 : n) : (size_t)rnd(n);
                bytes[at[i]] ^= (char)(1 + rnd(255));
            }
            snprintf(what, sizeof what, "bytes flipped at %zu %zu %zu %zu of %zu", at[0], at[1],
                     at[2], at[3], n);
        }
        char path[1100];
        snprintf(path, sizeof path, "%s.corrupt", db);
        unlink(path);
        CHECK(spill(db, bytes, len), "write %s", db);
        free(bytes);
        int rc = precompile(dir, manifest, log, 0);
        size_t ln;
        char *out = slurp(log, &ln);
        CHECK(rc == 0, "%s: the next precompile exit %d:\n%s", what, rc, out ? out : "");
        bool ok = rc == 0 && clean_with(db, NKERNELS, what);
        passed[flip] += ok;
        free(out);
    }
    printf("damaged caches healed by the next run: %d of %d truncations, %d of %d flips\n",
           passed[0], TRIALS, passed[1], TRIALS);
}

static void api_after_damage(const char *base, const char *good, size_t n)
{
    /* one process: the context finds the damage when it opens the file (header page
     * flipped) or when a call reaches it (the file cut short), repairs it, and the
     * compile that follows is stored */
    for (int t = 0; t < 2; t++) {
        char dir[1024], db[1100];
        snprintf(dir, sizeof dir, "%s/api%d", base, t);
        snprintf(db, sizeof db, "%s/qjit.db", dir);
        mkdir(dir, 0755);
        char *bytes = malloc(n);
        memcpy(bytes, good, n);
        size_t len = n;
        if (t == 0)
            bytes[20] ^= 0x5a, bytes[100] ^= 0x33; /* the header page */
        else
            len = n / 2;
        CHECK(spill(db, bytes, len), "write");
        free(bytes);
        qjit_options o;
        qjit_options_init(&o);
        o.cache_dir = dir;
        qjit_context *ctx;
        CHECK_OK(qjit_context_create(&o, &ctx));
        qjit_gemm_desc d;
        CHECK_OK(qjit_gemm_desc_parse(manifest_lines[0], &d));
        CHECK_OK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_AUTO, NULL));
        qjit_cache_info ci;
        qjit_context_cache_info(ctx, &ci);
        CHECK(ci.persistent && strcmp(ci.path, db) == 0, "after damage %d: cache %s persistent %d",
              t, ci.path, ci.persistent);
        qjit_context_destroy(ctx);
        qjit_cache_db *adm;
        int rows = 0;
        qjit_cache_filter f = {NULL, "tile=64x64x32 warps=2x2 stages=2", NULL};
        CHECK(qjit_cache_db_open(db, 0, &adm) == QJIT_OK &&
                  qjit_cache_db_list(adm, &f, count_row, &rows) == QJIT_OK && rows >= 1,
              "damage %d: the kernel compiled after the repair is not on disk (%d rows): %s", t,
              rows, qjit_last_error());
        qjit_cache_db_close(adm);
    }
}

static void disk_full(const char *base, const char *manifest)
{
    /* a file-size limit far below what the manifest needs: the tool fails clearly, and
     * what is in the file is whole */
    char dir[1024], db[1100], log[1100];
    snprintf(dir, sizeof dir, "%s/full", base);
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    snprintf(log, sizeof log, "%s/full.log", base);
    int rc = precompile(dir, manifest, log, 48 * 1024);
    size_t n;
    char *out = slurp(log, &n);
    CHECK(rc == 1, "under a 48 KiB file limit: exit %d\n%s", rc, out ? out : "");
    CHECK(out && (strstr(out, "not stored") || strstr(out, "no writable cache") ||
                  strstr(out, "full") || strstr(out, "disk I/O")),
          "no clear message:\n%s", out ? out : "");
    free(out);
    qjit_cache_db *adm = NULL;
    qjit_cache_verify_report r;
    if (qjit_cache_db_open(db, 0, &adm) == QJIT_OK) {
        CHECK(qjit_cache_db_verify(adm, 0, NULL, NULL, &r) == QJIT_OK && r.rows_bad == 0,
              "a row past the limit does not verify");
        qjit_cache_db_close(adm);
    }
}

/* A byte damaged inside the schema's own text (page 1 holds the CREATE TABLE statements)
 * can rename a column and leave a file SQLite opens without complaint; it is found when
 * the cache opens the file and healed like other damage: the next precompile exits 0 with
 * every kernel present.  (Found by the random flips above, at one layout of the file.) */
static void schema_text(const char *base, const char *manifest, const char *good, size_t n)
{
    static const char *const columns[] = {"source TEXT", "cubin_hash BLOB", "row_hash BLOB"};
    char dir[1024], db[1100], log[1100];
    snprintf(dir, sizeof dir, "%s/schema", base);
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    snprintf(log, sizeof log, "%s/schema.log", base);
    mkdir(dir, 0755);
    for (size_t c = 0; c < sizeof columns / sizeof columns[0]; c++) {
        char *bytes = malloc(n);
        memcpy(bytes, good, n);
        const size_t len = strlen(columns[c]);
        char *at = NULL;
        for (size_t i = 0; i + len <= n && i < 8192 && !at; i++)
            if (memcmp(bytes + i, columns[c], len) == 0)
                at = bytes + i;
        CHECK(at != NULL, "'%s' is not in the first two pages of the file", columns[c]);
        if (at) {
            at[2] = 'X'; /* "source" -> "soXrce": the column qjit reads is gone */
            char path[1100];
            snprintf(path, sizeof path, "%s.corrupt", db);
            unlink(path);
            CHECK(spill(db, bytes, n), "write %s", db);
            int rc = precompile(dir, manifest, log, 0);
            size_t ln;
            char *out = slurp(log, &ln);
            CHECK(rc == 0, "column '%s' renamed: the next precompile exit %d:\n%s", columns[c], rc,
                  out ? out : "");
            CHECK(rc == 0 && clean_with(db, NKERNELS, columns[c]), "column '%s' renamed: not healed",
                  columns[c]);
            free(out);
        }
        free(bytes);
    }
}

int main(void)
{
    const char *base = tl_tmpdir("heal");
    char manifest[1024], gooddir[1100], gooddb[1200], log[1100];
    snprintf(manifest, sizeof manifest, "%s/m.txt", base);
    snprintf(gooddir, sizeof gooddir, "%s/good", base);
    snprintf(gooddb, sizeof gooddb, "%s/qjit.db", gooddir);
    snprintf(log, sizeof log, "%s/good.log", base);
    FILE *f = fopen(manifest, "w");
    for (int i = 0; i < NKERNELS; i++)
        fprintf(f, "%s\n", manifest_lines[i]);
    fclose(f);
    CHECK(precompile(gooddir, manifest, log, 0) == 0, "the first precompile failed");
    CHECK(clean_with(gooddb, NKERNELS, "the good cache"), "good cache");
    size_t n = 0;
    char *good = slurp(gooddb, &n);
    CHECK(good && n > 8192, "good cache of %zu bytes", n);
    if (!good || n <= 8192)
        return tl_finish("test_heal");
    trials(base, manifest, good, n);
    schema_text(base, manifest, good, n);
    api_after_damage(base, good, n);
    disk_full(base, manifest);
    free(good);
    return tl_finish("test_heal");
}
