/*
 * test_tools.c — the command-line tools keep their word, with no GPU: exit codes as
 * their help states them, targets named the same way by all three, nothing written on
 * bad input, and messages that read right (no name said twice, singulars, a missing GPU
 * called that, after the arguments are checked).
 */
#define _GNU_SOURCE
#include "qjit.h"
#include "testlib.h"

#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRECOMPILE QJIT_BINARY_DIR "/tools/qjit-precompile"
#define CACHE QJIT_BINARY_DIR "/tools/qjit-cache"
#define TUNE QJIT_BINARY_DIR "/tools/qjit-tune"

static const char *const small =
    "gemm a=f16 b=f16 out=f16 bias=0 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 stages=2 "
    "split=1\n";

typedef struct result {
    int rc;
    char out[32768]; /* stdout and stderr together */
} result;

/* Run tool with args (NULL-terminated), env "NAME=VALUE" entries added (NULL-ended). */
static void run(result *r, const char *tool, const char *const *args, const char *const *env)
{
    r->rc = tl_run(tool, args, env, r->out, sizeof r->out);
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static result R; /* big: one, reused */

/* Exit codes: 0 when every kernel compiled or was cached, even when qjit warned and
 * recovered (a damaged cache repaired); 1 when a kernel or a line failed; --help says so. */
static void test_exit_codes(const char *dir)
{
    char manifest[1200], cache[1200], db[1300];
    snprintf(manifest, sizeof manifest, "%s/one.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(db, sizeof db, "%s/qjit.db", cache);
    CHECK(write_file(manifest, small), "write %s", manifest);
    const char *args[] = {"--cache-dir", cache, manifest, NULL};
    run(&R, PRECOMPILE, args, NULL);
    CHECK(R.rc == 0, "first run: exit %d:\n%s", R.rc, R.out);

    /* damage the cache: the tool warns, repairs, finds the kernel, and exits 0 */
    FILE *f = fopen(db, "r+b");
    for (int i = 0; f && i < 100; i++)
        fputc(0x5a, f);
    if (f)
        fclose(f);
    run(&R, PRECOMPILE, args, NULL);
    CHECK(R.rc == 0 && strstr(R.out, "warning") && strstr(R.out, "repaired"),
          "a repaired cache: exit %d (0 expected, with the warning):\n%s", R.rc, R.out);

    /* a bad line: 1 */
    char bad[1200];
    snprintf(bad, sizeof bad, "%s/bad.txt", dir);
    char text[1024];
    snprintf(text, sizeof text, "%sgemm a=f16 b=f16 out=f16 tile=7x7x7\n", small);
    CHECK(write_file(bad, text), "write %s", bad);
    const char *badargs[] = {"--cache-dir", cache, bad, NULL};
    run(&R, PRECOMPILE, badargs, NULL);
    CHECK(R.rc == 1, "a bad line: exit %d:\n%s", R.rc, R.out);

    /* --help states that rule, and not "1 ... qjit warned" */
    const char *help[] = {"--help", NULL};
    run(&R, PRECOMPILE, help, NULL);
    CHECK(R.rc == 0 && strstr(R.out, "also when qjit warned and") &&
              !strstr(R.out, "or qjit warned"),
          "--help's exit status:\n%s", R.out);
}

/* A target qjit has no kernels for is refused by qjit-cache as by qjit-precompile (exit
 * 2, "--arch: bad target"); sm_90, taken as sm_90a, is said to be by all three tools. */
static void test_archs(const char *dir)
{
    char db[1200], manifest[1200];
    snprintf(db, sizeof db, "%s/cache/qjit.db", dir);
    snprintf(manifest, sizeof manifest, "%s/one.txt", dir);
    const char *p75[] = {"--arch", "sm_75", manifest, NULL};
    run(&R, PRECOMPILE, p75, NULL);
    CHECK(R.rc == 2 && strstr(R.out, "--arch: bad target"), "precompile sm_75: exit %d:\n%s",
          R.rc, R.out);
    const char *c75[] = {"--db", db, "list", "--arch", "sm_75", NULL};
    run(&R, CACHE, c75, NULL);
    CHECK(R.rc == 2 && strstr(R.out, "--arch: bad target 'sm_75'") &&
              strstr(R.out, "sm_90a") && !strstr(R.out, "0 kernels"),
          "qjit-cache list --arch sm_75: exit %d:\n%s", R.rc, R.out);
    const char *c90[] = {"--db", db, "list", "--arch", "sm_90", NULL};
    run(&R, CACHE, c90, NULL);
    CHECK(R.rc == 0 && strstr(R.out, "note: --arch sm_90 is taken as sm_90a"),
          "qjit-cache list --arch sm_90: exit %d:\n%s", R.rc, R.out);
    const char *c80[] = {"--db", db, "list", "--arch", "sm_80", NULL};
    run(&R, CACHE, c80, NULL);
    CHECK(R.rc == 0 && strstr(R.out, "1 kernel\n") && !strstr(R.out, "note:"),
          "qjit-cache list --arch sm_80: exit %d:\n%s", R.rc, R.out);
    char cache[1200];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    const char *p90[] = {"--arch", "sm_90", "--cache-dir", cache, manifest, NULL};
    run(&R, PRECOMPILE, p90, NULL);
    CHECK(strstr(R.out, "note: --arch sm_90 is taken as sm_90a") != NULL,
          "qjit-precompile --arch sm_90 says nothing:\n%s", R.out);
    const char *t90[] = {"--nk", "4096x4096", "--dry-run",
                         "gemm a=bf16 b=bf16 out=bf16 arch=sm_90", NULL};
    const char *nogpu[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    run(&R, TUNE, t90, nogpu);
    CHECK(strstr(R.out, "note: arch=sm_90 is taken as sm_90a") != NULL,
          "qjit-tune arch=sm_90 says nothing: exit %d:\n%s", R.rc, R.out);
}

/* A manifest whose every line is bad writes nothing: no cache directory, no qjit.db. */
static void test_nothing_written(const char *dir)
{
    char manifest[1200], cache[1200], missing[1200];
    snprintf(manifest, sizeof manifest, "%s/allbad.txt", dir);
    snprintf(cache, sizeof cache, "%s/never-made", dir);
    snprintf(missing, sizeof missing, "%s/no-such-manifest.txt", dir);
    CHECK(write_file(manifest, "# only bad lines\ngemm a=f16 b=zz out=f16\ngemm tile=1x\n"),
          "write");
    const char *args[] = {"--cache-dir", cache, manifest, missing, NULL};
    run(&R, PRECOMPILE, args, NULL);
    CHECK(R.rc == 1, "bad manifests: exit %d:\n%s", R.rc, R.out);
    CHECK(!exists(cache), "bad input made the cache directory %s:\n%s", cache, R.out);
    /* the missing manifest is named once in the summary, not "path: path" */
    char twice[2600];
    snprintf(twice, sizeof twice, "%s: %s", missing, missing);
    CHECK(strstr(R.out, missing) && !strstr(R.out, twice), "the missing manifest:\n%s", R.out);
    CHECK(strstr(R.out, "0 kernels from 2 descriptors in 2 manifests"), "summary:\n%s", R.out);
}

/* Singulars: one kernel from one descriptor on one thread. */
static void test_plurals(const char *dir)
{
    char manifest[1200], cache[1200];
    snprintf(manifest, sizeof manifest, "%s/one.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    const char *args[] = {"-j", "1", "--cache-dir", cache, manifest, NULL};
    run(&R, PRECOMPILE, args, NULL);
    CHECK(R.rc == 0 && strstr(R.out, "1 kernel from 1 descriptor in 1 manifest") &&
              strstr(R.out, ", 1 thread\n"),
          "singulars:\n%s", R.out);
}

/* qjit-tune checks every argument before it looks for a GPU, and says plainly that none
 * is visible (not that the driver is too old). */
static void test_tune_order(void)
{
    const char *nogpu[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    const char *named[] = {"--nk", "40x96",
                           "gemm a=bf16 b=bf16 out=bf16 arch=sm_80 kernel=mma tile=64x64x32 "
                           "warps=2x2 stages=2 split=1",
                           NULL};
    run(&R, TUNE, named, nogpu);
    CHECK(R.rc == 2 && strstr(R.out, "nothing to tune") && !strstr(R.out, "GPU"),
          "a fully named descriptor is refused first: exit %d:\n%s", R.rc, R.out);
    const char *badnk[] = {"--nk", "40x", "gemm a=bf16 b=bf16 out=bf16", NULL};
    run(&R, TUNE, badnk, nogpu);
    CHECK(R.rc == 2 && strstr(R.out, "--nk: bad list '40x'"), "--nk 40x: exit %d:\n%s", R.rc,
          R.out);
    /* a K the pair cannot take is refused before the GPU check, naming the rule */
    const char *badk[] = {"--nk", "40x96", "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", NULL};
    run(&R, TUNE, badk, nogpu);
    CHECK(R.rc == 2 && strstr(R.out, "k=96") && strstr(R.out, "group size 128") &&
              !strstr(R.out, "GPU"),
          "--nk 40x96 with group:128: exit %d:\n%s", R.rc, R.out);
    const char *ok[] = {"--nk", "40x96", "gemm a=bf16 b=bf16 out=bf16", NULL};
    run(&R, TUNE, ok, nogpu);
    CHECK(R.rc == 1 && strstr(R.out, "no GPU visible") && !strstr(R.out, "driver version"),
          "no GPU: exit %d:\n%s", R.rc, R.out);
}

int main(void)
{
    if (access(PRECOMPILE, X_OK) || access(CACHE, X_OK) || access(TUNE, X_OK)) {
        fprintf(stderr, "the tools are not built\n");
        return 1;
    }
    const char *dir = tl_tmpdir("tools");
    CHECK(dir != NULL, "tmpdir");
    if (!dir)
        return tl_finish("test_tools");
    test_exit_codes(dir);
    test_archs(dir);
    test_nothing_written(dir);
    test_plurals(dir);
    test_tune_order();
    return tl_finish("test_tools");
}
