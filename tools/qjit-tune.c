/*
 * qjit-tune — measure the candidate configurations of descriptors on this machine's GPU
 * for a list of problems (M × N × K) and record the winners in the cache, where every
 * later handle of those descriptors finds them.  Uses only the public API (qjit.h) and
 * the CUDA runtime to make a device current.
 */
#define _POSIX_C_SOURCE 200809L
#include "qjit.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: qjit-tune --nk NxK[,NxK...] [--m LIST] [--sweep NAME] [--reps N] [--warmup N]\n"
    "                 [-j N] [--rotate-mb MB] [--device I] [--cache-dir DIR] [--dry-run]\n"
    "                 [--csv] [--quiet] DESCRIPTOR... [--manifest FILE]...\n"
    "\n"
    "For each descriptor (configuration fields auto) and each problem M x N x K, times\n"
    "the configurations of the named sweep and the heuristic's choice on the GPU, checks\n"
    "each against the heuristic's output, and records every measurement in the cache:\n"
    "handles of the descriptor made afterwards run the fastest correct one for launches\n"
    "of that N and K in that M bucket.  Prints a row per problem as it ends (or CSV with\n"
    "--csv): the heuristic's time, the best, and the seconds the problem took with their\n"
    "parts (operands made, candidates run and checked, timing, final round).\n"
    "\n"
    "  --nk LIST        the layer shapes, N x K (e.g. 6144x4096,4096x4096,28672x4096)\n"
    "  --m LIST         batch sizes (default: one per M bucket:\n"
    "                   1,4,8,16,32,64,128,256,1024,4096)\n"
    "  --manifest FILE  tune every descriptor of a manifest whose configuration is auto\n"
    "  --sweep NAME     candidates: default (all the template declares) or small-m\n"
    "                   (default: small-m for M <= 64, default above)\n"
    "  --reps N         timed CUDA-graph replays per candidate, median kept (default 20)\n"
    "  --warmup N       replays before timing (default 3)\n"
    "  -j N             CPU threads compiling candidates (default: all cores)\n"
    "  --rotate-mb MB   operand copies so that each launch reads weights from DRAM\n"
    "                   (default 256)\n"
    "  --device I       the CUDA device (default 0)\n"
    "  --cache-dir DIR  the writable cache (default: $QJIT_CACHE_DIR, else ~/.cache/qjit)\n"
    "  --dry-run        measure and report, record nothing\n"
    "\n"
    "Exit status: 0 done, 1 a descriptor could not be tuned, 2 usage error.\n";

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("qjit-tune: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(qjit-tune --help for usage)\n", stderr);
    return 2;
}

static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != 0)
        return NULL;
    return *i + 1 < argc ? argv[++*i] : "";
}

/* Whether K suits d's pair: two 4-bit values a byte, whole scale groups, whole MX blocks
 * (what qjit_gemm_launch asks; the kernels' own multiples are the tuner's to skip). */
static bool k_fits(const qjit_gemm_desc *d, int64_t k, char *why, size_t cap)
{
    const bool four = d->a == QJIT_DTYPE_S4 || d->a == QJIT_DTYPE_U4 || d->a == QJIT_DTYPE_E2M1 ||
                      d->b == QJIT_DTYPE_S4 || d->b == QJIT_DTYPE_U4 || d->b == QJIT_DTYPE_E2M1;
    if (d->sb == QJIT_SCALE_GROUP && k % d->group)
        snprintf(why, cap, "k=%lld is not a multiple of the group size %d", (long long)k, d->group);
    else if ((d->sa == QJIT_SCALE_MX || d->sb == QJIT_SCALE_MX) && k % 32)
        snprintf(why, cap, "k=%lld is not a multiple of 32, the MX block size", (long long)k);
    else if (four && k % 2)
        snprintf(why, cap, "k=%lld is odd; 4-bit types pack two values per byte", (long long)k);
    else
        return true;
    return false;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* "1,4,16" -> ms; false on a bad item. */
static bool parse_ms(const char *s, int64_t *ms, size_t cap, size_t *n)
{
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 1 || v > (1ll << 31) || *n == cap ||
            (*end && *end != ','))
            return false;
        ms[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

/* "6144x4096,4096x4096" */
static bool parse_nk(const char *s, int64_t (*nk)[2], size_t cap, size_t *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long long a = strtoll(s, &end, 10), b;
        if (end == s || (*end != 'x' && *end != 'X') || a < 1)
            return false;
        s = end + 1;
        b = strtoll(s, &end, 10);
        if (end == s || b < 1 || (*end && *end != ',') || *n == cap)
            return false;
        nk[*n][0] = a;
        nk[(*n)++][1] = b;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

/* A descriptor that names its whole configuration: nothing to tune. */
static bool fully_named(const qjit_gemm_desc *d)
{
    return d->bm && d->wm && d->stages && d->kernel && d->split_k;
}

/* Descriptors read arch=sm_90 as sm_90a: say so, as qjit-precompile and qjit-cache do. */
static void note_alias(const char *text)
{
    for (const char *p = text; (p = strstr(p, "arch=sm_90")) != NULL; p += 10)
        if ((p == text || p[-1] == ' ' || p[-1] == '\t') && p[10] != 'a') {
            fprintf(stderr, "qjit-tune: note: arch=sm_90 is taken as sm_90a\n");
            return;
        }
}

/* ---------------------------------------------------------------- progress */
typedef struct progress {
    bool quiet, tty, csv;
    const char *desc, *gpu;
    const qjit_tune_result *results; /* the current descriptor's, filled as problems finish */
    double mark;                     /* when the last problem finished (or the descriptor began) */
    int phase;                       /* the stage running since `since` (PHASE_*) */
    double since, spent[4];          /* and the current problem's seconds in each */
} progress;

/* A problem's seconds by stage (the library's progress stages): its operands made; the
 * candidates loaded, run once and checked against the heuristic's output; their timing;
 * the final round (with its load). */
enum { PHASE_OPERANDS, PHASE_CHECK, PHASE_TIME, PHASE_FINAL };
static int phase_of(const char *stage)
{
    return !strcmp(stage, "operands") ? PHASE_OPERANDS
           : !strcmp(stage, "measure") ? PHASE_TIME
           : !strcmp(stage, "final")   ? PHASE_FINAL
                                       : PHASE_CHECK; /* "time", "compile" */
}

static void print_row(const progress *p, const qjit_tune_result *r, double seconds);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_progress(void *user, const char *stage, size_t done, size_t total,
                        const char *what)
{
    progress *p = user;
    const double t = now_s();
    p->spent[p->phase] += t - p->since; /* the stage before ends here */
    p->since = t;
    if (!strcmp(stage, "problem")) { /* a finished problem: its row now, so a cut run keeps it */
        if (p->tty && !p->quiet)
            fputs("\r\033[K", stderr);
        /* its wall time: since the one before finished (the first's includes the wait for
         * the first candidates' compiles), to see where a tuning's time goes */
        print_row(p, &p->results[done - 1], t - p->mark);
        p->mark = t;
        memset(p->spent, 0, sizeof p->spent);
        p->phase = PHASE_CHECK;
        return;
    }
    p->phase = phase_of(stage);
    if (p->quiet || p->phase != PHASE_CHECK) /* shown: "compile" and "time" */
        return;
    if (p->tty) {
        fprintf(stderr, "\r[%s %zu/%zu] %.90s\033[K", stage, done, total, what);
        if (done == total)
            fputc('\n', stderr);
    } else if (done == 0 || done == total) {
        fprintf(stderr, "qjit-tune: %s %zu/%zu\n", stage, done, total);
    }
    fflush(stderr);
}

static void on_log(void *user, qjit_log_level level, const char *msg)
{
    (void)user;
    if (level >= QJIT_LOG_WARN)
        fprintf(stderr, "\nqjit-tune: warning: %s\n", msg);
}

/* The configuration part of a descriptor's text: from "kernel=" on. */
static const char *config_of(const qjit_gemm_desc *d, char *buf, size_t cap)
{
    if (qjit_gemm_desc_format(d, buf, cap, NULL) != QJIT_OK)
        return "?";
    const char *k = strstr(buf, "kernel=");
    return k ? k : buf;
}

/* One problem's row of the table (or CSV line), on stdout; seconds: its wall time, and
 * p->spent its parts by stage. */
static void print_row(const progress *p, const qjit_tune_result *r, double seconds)
{
    char c1[512], c2[512];
    double speedup = r->best_us > 0 ? r->heuristic_us / r->best_us : 0;
    const double *s = p->spent;
    if (p->csv)
        printf("\"%s\",\"%s\",%lld,%lld,%lld,%d,\"%s\",%.3f,\"%s\",%.3f,%.4f,%d,%d,%d,%.3g,%.2f,"
               "%.2f,%.2f,%.2f,%.2f\n",
               p->desc, p->gpu, (long long)r->problem.m, (long long)r->problem.n,
               (long long)r->problem.k, r->bucket, config_of(&r->heuristic, c1, sizeof c1),
               r->heuristic_us, r->passed ? config_of(&r->best, c2, sizeof c2) : "",
               r->best_us, speedup, r->passed, r->failed, r->skipped, r->max_error, seconds,
               s[PHASE_OPERANDS], s[PHASE_CHECK], s[PHASE_TIME], s[PHASE_FINAL]);
    else
        printf("%6lld %6lld %6lld %13.2f %10.2f %7.2fx %6d/%d/%d %6.1f %4.1f %4.1f %4.1f %4.1f  %s\n",
               (long long)r->problem.m, (long long)r->problem.n, (long long)r->problem.k,
               r->heuristic_us, r->best_us, speedup, r->passed, r->failed, r->skipped, seconds,
               s[PHASE_OPERANDS], s[PHASE_CHECK], s[PHASE_TIME], s[PHASE_FINAL],
               r->passed ? config_of(&r->best, c2, sizeof c2) : "(none passed)");
    fflush(stdout);
}

/* ---------------------------------------------------------------- main */
#define MAX_M 64
#define MAX_NK 64
#define MAX_DESCS 256

int main(int argc, char **argv)
{
    int64_t ms[MAX_M] = {1, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
    size_t nms = 10, nnk = 0, ndescs = 0;
    int64_t nk[MAX_NK][2];
    qjit_gemm_desc *descs = calloc(MAX_DESCS, sizeof *descs);
    qjit_tune_options to;
    qjit_tune_options_init(&to);
    const char *cache_dir = NULL;
    long device = 0;
    bool csv = false;
    progress pr = {.tty = isatty(2) == 1};
    if (!descs)
        return 1;
#define USAGE(...)                                                                       \
    do {                                                                                 \
        free(descs);                                                                     \
        return usage_error(__VA_ARGS__);                                                 \
    } while (0)
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            free(descs);
            return 0;
        } else if (strcmp(a, "--csv") == 0) {
            csv = true;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            pr.quiet = true;
        } else if (strcmp(a, "--dry-run") == 0) {
            to.dry_run = 1;
        } else if ((v = opt_value(argc, argv, &i, "--m"))) {
            if (!parse_ms(v, ms, MAX_M, &nms))
                USAGE("--m: bad list '%s' (positive integers separated by commas)", v);
        } else if ((v = opt_value(argc, argv, &i, "--nk"))) {
            if (!parse_nk(v, nk, MAX_NK, &nnk))
                USAGE("--nk: bad list '%s' (NxK items separated by commas)", v);
        } else if ((v = opt_value(argc, argv, &i, "--sweep"))) {
            to.sweep = v;
        } else if ((v = opt_value(argc, argv, &i, "--reps"))) {
            if (!parse_long(v, 1, 100000, &x))
                USAGE("--reps: '%s' is not 1..100000", v);
            to.reps = (int)x;
        } else if ((v = opt_value(argc, argv, &i, "--warmup"))) {
            if (!parse_long(v, 1, 100000, &x))
                USAGE("--warmup: '%s' is not 1..100000", v);
            to.warmup = (int)x;
        } else if ((v = opt_value(argc, argv, &i, "--rotate-mb"))) {
            if (!parse_long(v, 1, 1 << 20, &x))
                USAGE("--rotate-mb: '%s' is not 1..1048576", v);
            to.rotate_bytes = (uint64_t)x << 20;
        } else if ((v = opt_value(argc, argv, &i, "--device"))) {
            if (!parse_long(v, 0, 1024, &device))
                USAGE("--device: '%s' is not a device index", v);
        } else if ((v = opt_value(argc, argv, &i, "--cache-dir"))) {
            if (!*v)
                USAGE("--cache-dir needs a directory");
            cache_dir = v;
        } else if (strncmp(a, "-j", 2) == 0) {
            const char *n = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : "";
            if (!parse_long(n, 1, 4096, &x))
                USAGE("-j needs a thread count of 1..4096, got '%s'", n);
            to.compile_threads = (int)x;
        } else if ((v = opt_value(argc, argv, &i, "--manifest"))) {
            FILE *f = fopen(v, "r");
            if (!f)
                USAGE("--manifest: cannot open '%s': %s", v, strerror(errno));
            char line[4096];
            for (int no = 1; fgets(line, sizeof line, f); no++) {
                qjit_manifest_item it;
                qjit_status st = qjit_manifest_line(line, &it);
                if (st == QJIT_ERROR_NOT_FOUND || (st == QJIT_OK && it.kind != QJIT_MANIFEST_GEMM))
                    continue; /* only GEMMs have configurations to tune */
                qjit_gemm_desc d = it.gemm;
                if (st != QJIT_OK) {
                    fclose(f);
                    USAGE("%s:%d: %s", v, no, qjit_last_error());
                }
                if (fully_named(&d))
                    continue; /* names its whole configuration: nothing to tune */
                note_alias(line);
                if (ndescs == MAX_DESCS) {
                    fclose(f);
                    USAGE("more than %d descriptors", MAX_DESCS);
                }
                descs[ndescs++] = d;
            }
            fclose(f);
        } else if (a[0] == '-') {
            USAGE("unknown option '%s'", a);
        } else {
            if (ndescs == MAX_DESCS)
                USAGE("more than %d descriptors", MAX_DESCS);
            if (qjit_gemm_desc_parse(a, &descs[ndescs]) != QJIT_OK ||
                qjit_gemm_desc_validate(&descs[ndescs]) != QJIT_OK)
                USAGE("%s", qjit_last_error());
            if (fully_named(&descs[ndescs]))
                USAGE("'%s' names its whole configuration: there is nothing to tune", a);
            note_alias(a);
            ndescs++;
        }
    }
    if (!ndescs)
        USAGE("no descriptor given");
    if (!nnk)
        USAGE("--nk is required (the N x K of the layers to tune for)");
    /* every K against what each descriptor's pair needs, before any GPU is looked for */
    for (size_t di = 0; di < ndescs; di++)
        for (size_t i = 0; i < nnk; i++) {
            char why[160];
            if (!k_fits(&descs[di], nk[i][1], why, sizeof why)) {
                char text[256];
                qjit_gemm_desc_format(&descs[di], text, sizeof text, NULL);
                USAGE("--nk %lldx%lld: %s (%s)", (long long)nk[i][0], (long long)nk[i][1], why,
                      text);
            }
        }
#undef USAGE

    /* Every argument is checked above; only now is a GPU looked for. */
    int ndev = 0, driver = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        /* no driver at all reads as "insufficient driver" to the runtime: say what it is */
        if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
            fprintf(stderr, "qjit-tune: no GPU visible (no CUDA driver is installed); tuning "
                            "measures on a GPU\n");
        else
            fprintf(stderr, "qjit-tune: no GPU visible (%s); tuning measures on a GPU\n",
                    ce != cudaSuccess ? cudaGetErrorString(ce) : "no devices");
        free(descs);
        return 1;
    }
    if (device >= ndev) {
        fprintf(stderr, "qjit-tune: --device %ld: only %d GPU%s visible\n", device, ndev,
                ndev == 1 ? "" : "s");
        free(descs);
        return 1;
    }
    struct cudaDeviceProp prop;
    if ((ce = cudaSetDevice((int)device)) != cudaSuccess || (ce = cudaFree(0)) != cudaSuccess ||
        (ce = cudaGetDeviceProperties(&prop, (int)device)) != cudaSuccess) {
        fprintf(stderr, "qjit-tune: device %ld: %s\n", device, cudaGetErrorString(ce));
        free(descs);
        return 1;
    }
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = cache_dir;
    o.log = on_log;
    qjit_context *ctx;
    if (qjit_context_create(&o, &ctx) != QJIT_OK) {
        fprintf(stderr, "qjit-tune: %s\n", qjit_last_error());
        free(descs);
        return 1;
    }
    qjit_cache_info ci;
    qjit_context_cache_info(ctx, &ci);
    if (!ci.persistent && !to.dry_run)
        fprintf(stderr, "qjit-tune: warning: the cache is in memory only (%s): results "
                        "will not outlive this run\n", ci.path);
    to.progress = on_progress;
    to.user = &pr;

    size_t np = nms * nnk;
    qjit_tune_problem *problems = calloc(np, sizeof *problems);
    qjit_tune_result *results = calloc(np, sizeof *results);
    int rc = problems && results ? 0 : 1;
    for (size_t i = 0; i < nnk && !rc; i++)
        for (size_t j = 0; j < nms; j++)
            problems[i * nms + j] = (qjit_tune_problem){ms[j], nk[i][0], nk[i][1]};
    if (csv)
        printf("descriptor,gpu,m,n,k,bucket,heuristic,heuristic_us,best,best_us,speedup,"
               "passed,failed,skipped,max_error,seconds,operands_s,check_s,time_s,final_s\n");
    pr.csv = csv;
    pr.gpu = prop.name;
    pr.results = results;
    for (size_t di = 0; di < ndescs && !rc; di++) {
        char text[512];
        qjit_gemm_desc_format(&descs[di], text, sizeof text, NULL);
        pr.desc = text;
        if (!pr.quiet)
            fprintf(stderr, "qjit-tune: %s on %s\n", text, prop.name);
        if (!csv) /* the rows follow as their problems finish (on_progress) */
            printf("\n%s (%s)\n%6s %6s %6s %13s %10s %8s %13s %6s %4s %4s %4s %4s  %s\n", text,
                   prop.name, "M", "N", "K", "heuristic us", "best us", "speedup",
                   "pass/fail/skip", "s", "data", "chk", "time", "fin", "best configuration");
        fflush(stdout);
        pr.mark = pr.since = now_s();
        pr.phase = PHASE_CHECK;
        memset(pr.spent, 0, sizeof pr.spent);
        if (qjit_gemm_tune(ctx, &descs[di], problems, np, &to, results) != QJIT_OK) {
            fprintf(stderr, "qjit-tune: %s: %s\n", text, qjit_last_error());
            rc = 1;
        }
    }
    if (!rc && !pr.quiet)
        fprintf(stderr, "qjit-tune: %s in %s\n",
                to.dry_run ? "nothing recorded (--dry-run)" : "results recorded", ci.path);
    free(problems);
    free(results);
    free(descs);
    qjit_context_destroy(ctx);
    return rc;
}
