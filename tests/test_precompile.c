/*
 * test_precompile.c — the qjit-precompile tool end to end, with no GPU: compile a small
 * manifest into a fresh cache, find it all cached the second time, four processes at
 * once into one cache, and the errors (bad lines with file:line, usage).
 */
#define _POSIX_C_SOURCE 200809L
#include "qjit.h"
#include "testlib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOOL QJIT_BINARY_DIR "/tools/qjit-precompile"
#define DEADLINE_S 600

/* Small sm_80 kernels: quick to compile, and every one is in the mma kernel's range. */
static const char *const pool[] = {
    "gemm a=f16 b=f16 out=f16 bias=0 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 "
    "stages=2 split=1",
    "gemm a=bf16 b=bf16 out=bf16 bias=1 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 "
    "stages=2 split=1",
    "gemm a=f16 b=f16 out=f32 bias=0 arch=sm_80 kernel=mma tile=64x128x32 warps=2x2 "
    "stages=3 split=1",
    "gemm a=bf16 b=bf16 out=f32 bias=0 arch=sm_80 kernel=mma tile=64x64x32 warps=2x2 "
    "stages=3 split=1",
    "gemm a=f16 b=f16 out=bf16 bias=1 arch=sm_80 kernel=mma tile=64x64x64 warps=2x2 "
    "stages=2 split=1",
};

typedef struct result {
    int rc;     /* exit status, or -1 if it did not exit normally */
    char *out;  /* stdout and stderr together */
    long compiled, cached, failed; /* from the summary line; -1 if absent */
} result;

static void result_free(result *r)
{
    free(r->out);
    r->out = NULL;
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    if (buf)
        buf[len] = 0;
    fclose(f);
    return buf;
}

/* Start the tool with argv (NULL-terminated, without argv[0]), output into `log`. */
static pid_t spawn(const char *const *args, const char *log)
{
    const char *argv[32] = {TOOL};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        execv(TOOL, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Wait for pid with a deadline (a hung tool fails the test instead of hanging it). */
static int wait_for(pid_t pid)
{
    if (pid < 0)
        return -1;
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (long waited = 0; waited < DEADLINE_S * 50L; waited++) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (r < 0)
            return -1;
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fprintf(stderr, "qjit-precompile (pid %d) ran past %d s; killed\n", (int)pid, DEADLINE_S);
    return -1;
}

/* Read the summary "qjit-precompile: N compiled, N already cached, N failed". */
static void parse_summary(result *r)
{
    r->compiled = r->cached = r->failed = -1;
    const char *p = r->out;
    while (p && (p = strstr(p, "qjit-precompile: ")) != NULL) {
        long a, b, c;
        if (sscanf(p, "qjit-precompile: %ld compiled, %ld already cached, %ld failed", &a, &b,
                   &c) == 3)
            r->compiled = a, r->cached = b, r->failed = c;
        p += 1;
    }
}

static result finish(pid_t pid, const char *log)
{
    result r = {0};
    r.rc = wait_for(pid);
    r.out = read_file(log);
    if (!r.out)
        r.out = strdup("");
    parse_summary(&r);
    return r;
}

static result run_tool(const char *const *args, const char *log)
{
    return finish(spawn(args, log), log);
}

/* pool[0] again, its fields in another order and spacing: the same kernel. */
static const char pool0_again[] = "  gemm\tsplit=1 stages=2 warps=2x2 tile=64x64x32 kernel=mma "
                                  "arch=sm_80 bias=0 out=f16 b=f16 a=f16";

/* A manifest of the pool entries whose bits are set in `mask`, with a comment, a blank
 * line and (when dup) pool[0] a second time. */
static bool write_manifest(const char *path, unsigned mask, bool dup)
{
    char text[4096] = "# test manifest\n\n";
    for (int i = 0; i < (int)(sizeof pool / sizeof pool[0]); i++)
        if (mask & (1u << i)) {
            strcat(text, pool[i]);
            strcat(text, i % 2 ? "   # trailing comment\n" : "\n");
        }
    if (dup) {
        strcat(text, pool0_again);
        strcat(text, "\n");
    }
    return write_file(path, text);
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

static void test_compile_then_cached(const char *dir)
{
    char manifest[1200], cache[1200], log[1200], db[1300];
    snprintf(manifest, sizeof manifest, "%s/small.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache1", dir);
    snprintf(log, sizeof log, "%s/run1.log", dir);
    snprintf(db, sizeof db, "%s/qjit.db", cache);
    CHECK(write_manifest(manifest, 0x7, true), "write %s", manifest);

    const char *args[] = {"-j", "3", "--cache-dir", cache, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 0, "first run exit %d:\n%s", r.rc, r.out);
    CHECK(r.compiled == 3 && r.cached == 0 && r.failed == 0,
          "first run: compiled %ld cached %ld failed %ld:\n%s", r.compiled, r.cached, r.failed,
          r.out);
    CHECK(strstr(r.out, "1 duplicate skipped") != NULL, "the duplicate line was not skipped:\n%s",
          r.out);
    CHECK(strstr(r.out, "] compiled gemm a=f16 b=f16") != NULL, "no per-job line:\n%s", r.out);
    struct stat st;
    CHECK(stat(db, &st) == 0 && st.st_size > 0, "no cache file at %s", db);
    result_free(&r);

    /* Same manifest again: everything is a hit, nothing is compiled. */
    snprintf(log, sizeof log, "%s/run2.log", dir);
    r = run_tool(args, log);
    CHECK(r.rc == 0, "second run exit %d:\n%s", r.rc, r.out);
    CHECK(r.compiled == 0 && r.cached == 3 && r.failed == 0,
          "second run: compiled %ld cached %ld failed %ld:\n%s", r.compiled, r.cached,
          r.failed, r.out);
    result_free(&r);

    /* --quiet prints the summary and nothing per job. */
    snprintf(log, sizeof log, "%s/run3.log", dir);
    const char *quiet[] = {"--quiet", "--cache-dir", cache, manifest, NULL};
    r = run_tool(quiet, log);
    CHECK(r.rc == 0 && r.cached == 3, "quiet run exit %d:\n%s", r.rc, r.out);
    CHECK(strstr(r.out, "] cached") == NULL, "--quiet printed per-job lines:\n%s", r.out);
    result_free(&r);
}

static void test_concurrent(const char *dir)
{
    /* Four overlapping subsets of the pool, into one fresh cache, all at once. */
    static const unsigned masks[4] = {0x07, 0x0e, 0x1c, 0x19};
    char cache[1200], manifest[4][1200], log[4][1200];
    snprintf(cache, sizeof cache, "%s/shared-cache", dir);
    pid_t pids[4];
    const char *args[4][6];
    for (int i = 0; i < 4; i++) {
        snprintf(manifest[i], sizeof manifest[i], "%s/m%d.txt", dir, i);
        snprintf(log[i], sizeof log[i], "%s/par%d.log", dir, i);
        CHECK(write_manifest(manifest[i], masks[i], false), "write %s", manifest[i]);
    }
    for (int i = 0; i < 4; i++) {
        const char *a[] = {"-j", "2", "--cache-dir", cache, manifest[i], NULL};
        memcpy(args[i], a, sizeof a);
        pids[i] = spawn(args[i], log[i]);
        CHECK(pids[i] > 0, "fork %d", i);
    }
    long compiled = 0;
    for (int i = 0; i < 4; i++) {
        result r = finish(pids[i], log[i]);
        CHECK(r.rc == 0, "process %d exit %d:\n%s", i, r.rc, r.out);
        CHECK(r.failed == 0 && r.compiled + r.cached == 3,
              "process %d: compiled %ld cached %ld failed %ld:\n%s", i, r.compiled, r.cached,
              r.failed, r.out);
        CHECK(!contains_ci(r.out, "busy") && !contains_ci(r.out, "locked"),
              "process %d saw a busy database:\n%s", i, r.out);
        CHECK(!contains_ci(r.out, "warning") && !strstr(r.out, "FAILED"),
              "process %d warned or failed:\n%s", i, r.out);
        compiled += r.compiled > 0 ? r.compiled : 0;
        result_free(&r);
    }
    CHECK(compiled >= 5, "only %ld compiles for 5 distinct kernels", compiled);

    /* Every kernel any of them compiled is in the shared cache now. */
    char all[1200], alllog[1200];
    snprintf(all, sizeof all, "%s/all.txt", dir);
    snprintf(alllog, sizeof alllog, "%s/all.log", dir);
    CHECK(write_manifest(all, 0x1f, false), "write %s", all);
    const char *a[] = {"--cache-dir", cache, all, NULL};
    result r = run_tool(a, alllog);
    CHECK(r.rc == 0 && r.compiled == 0 && r.cached == 5 && r.failed == 0,
          "after the parallel runs: exit %d compiled %ld cached %ld failed %ld:\n%s", r.rc,
          r.compiled, r.cached, r.failed, r.out);
    result_free(&r);
}

static void test_bad_lines(const char *dir)
{
    char manifest[1200], cache[1200], log[1200], text[2048];
    snprintf(manifest, sizeof manifest, "%s/bad.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache-bad", dir);
    snprintf(log, sizeof log, "%s/bad.log", dir);
    snprintf(text, sizeof text,
             "# line 1\n"
             "%s\n"
             "gemm a=f16 b=f16 tile=128x0x32 arch=sm_80\n"  /* line 3: parse error */
             "\n"
             "gemm a=s4 b=f16 arch=sm_80\n"                 /* line 5: invalid */
             "matmul a=f16\n",                              /* line 6: not a descriptor */
             pool[0]);
    CHECK(write_file(manifest, text), "write %s", manifest);
    const char *args[] = {"--cache-dir", cache, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 1, "bad manifest exit %d (want 1):\n%s", r.rc, r.out);
    CHECK(r.compiled == 1 && r.failed == 3, "compiled %ld failed %ld:\n%s", r.compiled,
          r.failed, r.out);
    char where[1300];
    snprintf(where, sizeof where, "%s:3", manifest);
    CHECK(strstr(r.out, where) && strstr(r.out, "'tile'") && strstr(r.out, "128x0x32"),
          "no '%s' with the field and value:\n%s", where, r.out);
    snprintf(where, sizeof where, "%s:5", manifest);
    CHECK(strstr(r.out, where) && strstr(r.out, "'a'") && strstr(r.out, "s4"),
          "no '%s':\n%s", where, r.out);
    snprintf(where, sizeof where, "%s:6", manifest);
    CHECK(strstr(r.out, where) != NULL, "no '%s':\n%s", where, r.out);
    result_free(&r);

    /* A manifest that does not exist is a failure, named. */
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/no-such-manifest.txt", dir);
    const char *m[] = {"--cache-dir", cache, missing, NULL};
    r = run_tool(m, log);
    CHECK(r.rc == 1 && strstr(r.out, missing) && strstr(r.out, "cannot open"),
          "missing manifest exit %d:\n%s", r.rc, r.out);
    result_free(&r);
}

/* --arch builds every descriptor for each named target; without it, arch=auto means
 * sm_90a.  The summary names the targets of each kernel. */
static void test_archs(const char *dir)
{
    char manifest[1200], cache[1200], log[1200];
    snprintf(manifest, sizeof manifest, "%s/auto.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache-arch", dir);
    snprintf(log, sizeof log, "%s/arch.log", dir);
    CHECK(write_file(manifest, "gemm a=f16 b=f16 out=f16 tile=64x64x32 warps=2x2 stages=2\n"),
          "write %s", manifest);
    const char *two[] = {"--arch", "sm_80,sm_86", "--arch=sm_80", "--cache-dir", cache,
                         manifest, NULL};
    result r = run_tool(two, log);
    CHECK(r.rc == 0 && r.compiled == 2 && r.failed == 0, "--arch sm_80,sm_86: exit %d:\n%s",
          r.rc, r.out);
    CHECK(strstr(r.out, "arch=sm_80 kernel=mma tile=64x64x32") &&
              strstr(r.out, "arch=sm_86 kernel=mma tile=64x64x32"),
          "kernels not resolved for both targets:\n%s", r.out);
    result_free(&r);

    const char *dflt[] = {"--cache-dir", cache, manifest, NULL};
    r = run_tool(dflt, log);
    CHECK(r.rc == 0 && r.compiled == 1 && strstr(r.out, "arch=sm_90a kernel=mma"),
          "arch=auto without --arch: exit %d:\n%s", r.rc, r.out);
    result_free(&r);
}

/* A cache directory qjit cannot use stops the run before any compile: the kernels
 * would otherwise land in memory and be lost. */
static void test_unusable_cache(const char *dir)
{
    char file[1200], manifest[1200], log[1200];
    snprintf(file, sizeof file, "%s/not-a-dir", dir);
    snprintf(manifest, sizeof manifest, "%s/small.txt", dir);
    snprintf(log, sizeof log, "%s/unusable.log", dir);
    CHECK(write_file(file, "x"), "write %s", file);
    const char *args[] = {"--cache-dir", file, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 1 && contains_ci(r.out, "warning") && strstr(r.out, "no writable cache") &&
              r.compiled == -1,
          "unusable cache dir: exit %d:\n%s", r.rc, r.out);
    result_free(&r);
}

static void test_usage(const char *dir)
{
    char log[1200], manifest[1200];
    snprintf(log, sizeof log, "%s/usage.log", dir);
    snprintf(manifest, sizeof manifest, "%s/small.txt", dir);
    const char *none[] = {NULL};
    const char *badj[] = {"-j", "0", manifest, NULL};
    const char *badarch[] = {"--arch", "sm_75", manifest, NULL};
    const char *autoarch[] = {"--arch=auto", manifest, NULL};
    const char *unknown[] = {"--frobnicate", manifest, NULL};
    const char *const *cases[] = {none, badj, badarch, autoarch, unknown};
    const char *need[] = {"no manifest", "-j", "sm_75", "auto", "--frobnicate"};
    for (int i = 0; i < 5; i++) {
        result r = run_tool(cases[i], log);
        CHECK(r.rc == 2, "usage case %d exit %d (want 2):\n%s", i, r.rc, r.out);
        CHECK(strstr(r.out, need[i]) != NULL, "usage case %d lacks '%s':\n%s", i, need[i],
              r.out);
        result_free(&r);
    }
    const char *help[] = {"--help", NULL};
    result r = run_tool(help, log);
    CHECK(r.rc == 0 && strstr(r.out, "usage: qjit-precompile"), "--help exit %d:\n%s", r.rc,
          r.out);
    result_free(&r);
}

/* A line ending in sweep=NAME compiles every point of the named sweep; a second run
 * finds them all; an unknown sweep is a failure naming it. */
static void test_sweep(const char *dir)
{
    char manifest[1200], cache[1200], log[1200];
    snprintf(manifest, sizeof manifest, "%s/sweep.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache-sweep", dir);
    snprintf(log, sizeof log, "%s/sweep1.log", dir);
    CHECK(write_file(manifest, "gemm a=f16 b=f16 out=f16 arch=sm_80 sweep=small-m\n"),
          "write %s", manifest);
    const char *args[] = {"--cache-dir", cache, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 0 && r.compiled >= 3 && r.failed == 0, "sweep run exit %d, compiled %ld:\n%s",
          r.rc, r.compiled, r.out);
    CHECK(strstr(r.out, "tile=64x64x32") && strstr(r.out, "tile=64x128x32"),
          "sweep points missing:\n%s", r.out);
    long first = r.compiled;
    result_free(&r);
    snprintf(log, sizeof log, "%s/sweep2.log", dir);
    r = run_tool(args, log);
    CHECK(r.rc == 0 && r.compiled == 0 && r.cached == first, "second sweep run:\n%s", r.out);
    result_free(&r);
    CHECK(write_file(manifest, "gemm a=f16 b=f16 out=f16 arch=sm_80 sweep=nosuch\n"), "write");
    snprintf(log, sizeof log, "%s/sweep3.log", dir);
    r = run_tool(args, log);
    CHECK(r.rc == 1 && strstr(r.out, "sweep 'nosuch' is not known") && strstr(r.out, "sweep.txt:1"),
          "unknown sweep:\n%s", r.out);
    result_free(&r);
}

/* A run killed (SIGKILL) while it compiles leaves a valid DB: every row verifies,
 * quick_check passes, and the next run completes the set. */
static void test_killed(const char *dir)
{
    char manifest[1200], cache[1200], log[1200], db[1300];
    snprintf(manifest, sizeof manifest, "%s/kill.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache-kill", dir);
    snprintf(log, sizeof log, "%s/kill1.log", dir);
    snprintf(db, sizeof db, "%s/qjit.db", cache);
    CHECK(write_file(manifest, "gemm a=f16 b=f16 out=f16 arch=sm_80 sweep=default\n"
                               "gemm a=bf16 b=bf16 out=f32 arch=sm_80 sweep=default\n"),
          "write %s", manifest);
    const char *args[] = {"-j", "2", "--cache-dir", cache, manifest, NULL};
    pid_t pid = spawn(args, log);
    /* wait for the first row, so that the kill lands with compiles and writes going on */
    uint64_t rows = 0;
    for (int i = 0; i < DEADLINE_S * 20 && rows == 0; i++) {
        qjit_cache_db *h = NULL;
        qjit_cache_stats st;
        if (access(db, F_OK) == 0 && qjit_cache_db_open(db, 0, &h) == QJIT_OK &&
            qjit_cache_db_stats(h, &st) == QJIT_OK)
            rows = st.rows;
        qjit_cache_db_close(h);
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status), "precompile ended before the kill (rows %llu)",
          (unsigned long long)rows);
    qjit_cache_db *h = NULL;
    qjit_cache_verify_report rep;
    memset(&rep, 0, sizeof rep);
    CHECK_OK(qjit_cache_db_open(db, 0, &h));
    CHECK_OK(qjit_cache_db_verify(h, 0, NULL, NULL, &rep));
    CHECK(rep.integrity_ok && rep.rows_bad == 0 && rep.rows_checked >= 1,
          "after the kill: integrity %d (%s), %llu bad of %llu", rep.integrity_ok, rep.integrity,
          (unsigned long long)rep.rows_bad, (unsigned long long)rep.rows_checked);
    qjit_cache_db_close(h);
    snprintf(log, sizeof log, "%s/kill2.log", dir);
    result r = run_tool(args, log);
    CHECK(r.rc == 0 && r.failed == 0 && r.cached >= (long)rep.rows_checked && r.compiled > 0,
          "run after the kill: exit %d compiled %ld cached %ld:\n%s", r.rc, r.compiled, r.cached,
          r.out);
    result_free(&r);
}

/* Quantization kernels in a manifest: compiled per arch, the fp8 ones refused for sm_80
 * with the reason, a bad quant line reported with its line number, all cached the
 * second time. */
static void test_quant_lines(const char *dir)
{
    char manifest[1200], cache[1200], log[1200];
    snprintf(manifest, sizeof manifest, "%s/quant.txt", dir);
    snprintf(cache, sizeof cache, "%s/cache-quant", dir);
    snprintf(log, sizeof log, "%s/quant1.log", dir);
    CHECK(write_file(manifest, "# activation quantizers\n"
                               "quant in=bf16 out=s8 scale=row\n"
                               "quant in=bf16 out=e4m3 scale=mx rule=rceil   # MXFP8\n"
                               "quant in=bf16 out=s8 scale=mx\n"),
          "write %s", manifest);
    const char *args[] = {"--arch", "sm_80,sm_90a", "--cache-dir", cache, manifest, NULL};
    result r = run_tool(args, log);
    /* s8 row on both archs, e4m3 mx on sm_90a only; line 4 is refused outright */
    CHECK(r.rc == 1 && r.compiled == 3 && r.failed == 2,
          "quant run: exit %d compiled %ld failed %ld:\n%s", r.rc, r.compiled, r.failed, r.out);
    CHECK(strstr(r.out, "quant.txt:4") && strstr(r.out, "scale=mx") && strstr(r.out, "sm_89"),
          "the refusals are not named:\n%s", r.out);
    result_free(&r);
    snprintf(log, sizeof log, "%s/quant2.log", dir);
    r = run_tool(args, log);
    CHECK(r.compiled == 0 && r.cached == 3, "quant rerun: compiled %ld cached %ld:\n%s",
          r.compiled, r.cached, r.out);
    result_free(&r);
}

/* Lines with auto fields: the tool stores every kernel a get of each line loads (one per
 * run of M buckets and the tuned winners the cache records, qjit_gemm_variants), the same
 * set as qjit_gemm_precompile of each line (what `python -m qjit precompile` calls), and
 * nothing more. */
static const char *const auto_lines[] = {
    "gemm a=bf16 b=bf16 out=bf16 arch=sm_90a",
    "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16",
    "gemm a=f16 b=f16 out=f16 arch=sm_80",
};

static uint64_t rows_in(const char *cache)
{
    char db[1300];
    snprintf(db, sizeof db, "%s/qjit.db", cache);
    qjit_cache_db *h = NULL;
    qjit_cache_stats s = {0};
    if (qjit_cache_db_open(db, 0, &h) != QJIT_OK)
        return 0;
    qjit_status st = qjit_cache_db_stats(h, &s);
    qjit_cache_db_close(h);
    return st == QJIT_OK ? s.rows : 0;
}

static void test_auto_lines(const char *dir)
{
    char manifest[1200], tool_cache[1200], api_cache[1200], log[1200];
    snprintf(manifest, sizeof manifest, "%s/auto.txt", dir);
    snprintf(tool_cache, sizeof tool_cache, "%s/auto-tool", dir);
    snprintf(api_cache, sizeof api_cache, "%s/auto-api", dir);
    snprintf(log, sizeof log, "%s/auto.log", dir);
    const size_t nl = sizeof auto_lines / sizeof auto_lines[0];
    char text[1024] = "";
    for (size_t i = 0; i < nl; i++) {
        strcat(text, auto_lines[i]);
        strcat(text, "\n");
    }
    CHECK(write_file(manifest, text), "write %s", manifest);
    /* a tuned winner already recorded in both caches (another GPU's, as a shipped record
     * would be): a get on that GPU loads it, so both ways of precompiling store it */
    qjit_options o;
    qjit_options_init(&o);
    qjit_context *ctx = NULL;
    qjit_gemm_desc d0, win;
    CHECK_OK(qjit_gemm_desc_parse(auto_lines[0], &d0));
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 arch=sm_90a kernel=wgmma "
                                  "tile=128x128x64 warps=2x1 stages=5 split=1", &win));
    const qjit_tune_measurement meas = {"NVIDIA H100 80GB HBM3", 16, 4096, 4096, &win, 10.0, 1};
    const char *caches[] = {tool_cache, api_cache};
    for (int c = 0; c < 2; c++) {
        o.cache_dir = caches[c];
        CHECK_OK(qjit_context_create(&o, &ctx));
        CHECK_OK(qjit_tune_record(ctx, &d0, &meas));
        qjit_context_destroy(ctx);
    }
    const char *args[] = {"--quiet", "--cache-dir", tool_cache, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 0 && r.failed == 0, "auto lines: exit %d:\n%s", r.rc, r.out);

    /* every variant of every line is a hit in the tool's cache: nothing compiles */
    o.cache_dir = tool_cache;
    CHECK_OK(qjit_context_create(&o, &ctx));
    size_t tuned = 0;
    size_t variants = 0;
    for (size_t i = 0; ctx && i < nl; i++) {
        qjit_gemm_desc d;
        CHECK_OK(qjit_gemm_desc_parse(auto_lines[i], &d));
        const qjit_arch arch = d.arch == QJIT_ARCH_AUTO ? QJIT_ARCH_SM90A : d.arch;
        qjit_gemm_variant v[32];
        size_t nv = 0;
        CHECK_OK(qjit_gemm_variants(ctx, &d, arch, v, 32, &nv));
        CHECK(nv >= 2 || arch == QJIT_ARCH_SM80, "%s: %zu variants (a decode and a prefill "
              "kernel expected on sm_90a)", auto_lines[i], nv);
        for (size_t j = 0; j < nv && j < 32; j++) {
            int cached = 0;
            CHECK_OK(qjit_gemm_precompile(ctx, &v[j].desc, arch, &cached));
            CHECK(cached == 1, "%s: variant %s (M %lld..%lld) was not in the cache",
                  auto_lines[i], v[j].text, (long long)v[j].m_min, (long long)v[j].m_max);
            variants++;
            tuned += v[j].tuned != 0;
        }
    }
    qjit_stats st;
    qjit_context_stats(ctx, &st);
    CHECK(st.compiles == 0, "%llu compiles after the tool ran", (unsigned long long)st.compiles);
    CHECK(tuned == 1, "%zu tuned variants among the lines' (the recorded winner)", tuned);
    qjit_context_destroy(ctx);

    /* qjit_gemm_precompile of each auto line stores the same number of kernels */
    o.cache_dir = api_cache;
    CHECK_OK(qjit_context_create(&o, &ctx));
    for (size_t i = 0; ctx && i < nl; i++) {
        qjit_gemm_desc d;
        CHECK_OK(qjit_gemm_desc_parse(auto_lines[i], &d));
        CHECK_OK(qjit_gemm_precompile(ctx, &d, d.arch == QJIT_ARCH_AUTO ? QJIT_ARCH_SM90A : d.arch,
                                      NULL));
    }
    qjit_context_destroy(ctx);
    const uint64_t a = rows_in(tool_cache), b = rows_in(api_cache);
    CHECK(a == b && a == variants, "the tool stored %llu kernels, qjit_gemm_precompile %llu "
          "(%zu variants)", (unsigned long long)a, (unsigned long long)b, variants);
    printf("auto lines: %zu lines, %zu variants, %llu kernels stored by the tool and by the API\n",
           nl, variants, (unsigned long long)a);
    result_free(&r);
}

/* A descriptor tuned on many layers has more variants than the tool's fixed array once held
 * (64, which dropped the rest): a winner recorded last, of a configuration no earlier one
 * has, is still stored. */
static void test_many_variants(const char *dir)
{
    char manifest[1200], cache[1200], log[1200];
    snprintf(manifest, sizeof manifest, "%s/many.txt", dir);
    snprintf(cache, sizeof cache, "%s/many", dir);
    snprintf(log, sizeof log, "%s/many.log", dir);
    CHECK(write_file(manifest, "gemm a=bf16 b=bf16 out=bf16 arch=sm_90a\n"), "write %s", manifest);
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = cache;
    qjit_context *ctx = NULL;
    qjit_gemm_desc d0, win, last;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 arch=sm_90a", &d0));
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 arch=sm_90a kernel=wgmma "
                                  "tile=128x128x64 warps=2x1 stages=5 split=1", &win));
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 arch=sm_90a kernel=wgmma "
                                  "tile=256x128x64 warps=2x1 stages=4 split=1", &last));
    CHECK_OK(qjit_context_create(&o, &ctx));
    const int problems = 80;
    for (int i = 0; ctx && i < problems; i++) {
        const qjit_tune_measurement m = {"NVIDIA H100 80GB HBM3", 1024, 256 * (i + 1), 4096,
                                         i + 1 < problems ? &win : &last, 10.0, 1};
        CHECK_OK(qjit_tune_record(ctx, &d0, &m));
    }
    size_t nv = 0;
    CHECK_OK(qjit_gemm_variants(ctx, &d0, QJIT_ARCH_SM90A, NULL, 0, &nv));
    CHECK(nv > 64, "%zu variants: the test needs more than 64", nv);
    qjit_context_destroy(ctx);
    const char *args[] = {"--quiet", "--cache-dir", cache, manifest, NULL};
    result r = run_tool(args, log);
    CHECK(r.rc == 0 && r.failed == 0, "many variants: exit %d:\n%s", r.rc, r.out);
    CHECK_OK(qjit_context_create(&o, &ctx));
    int cached = 0;
    CHECK_OK(qjit_gemm_precompile(ctx, &last, QJIT_ARCH_SM90A, &cached));
    CHECK(cached == 1, "the winner recorded last (variant %zu of %zu) was not stored", nv, nv);
    qjit_context_destroy(ctx);
    result_free(&r);
}

int main(void)
{
    if (access(TOOL, X_OK) != 0) {
        fprintf(stderr, "%s is not built\n", TOOL);
        return 1;
    }
    const char *dir = tl_tmpdir("precompile");
    CHECK(dir != NULL, "tmpdir");
    if (!dir)
        return tl_finish("test_precompile");
    test_compile_then_cached(dir);
    test_concurrent(dir);
    test_bad_lines(dir);
    test_archs(dir);
    test_unusable_cache(dir);
    test_usage(dir);
    test_sweep(dir);
    test_auto_lines(dir);
    test_many_variants(dir);
    test_quant_lines(dir);
    test_killed(dir);
    return tl_finish("test_precompile");
}
