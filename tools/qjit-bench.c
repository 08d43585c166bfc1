/*
 * qjit-bench — measures qjit on the GPU against its peer (cuBLAS) in the same run:
 * GEMM throughput with a correctness check, JIT costs (compile on a miss, a cold-process
 * cache hit, a warm get) and the host cost of a launch.  Uses only qjit's public API.
 */
#define _GNU_SOURCE
#include <qjit.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SHAPES 32
#define MAX_SWEEP 64
#define MAX_SETS 64
#define MAX_RESULTS 512
#define MAX_JIT_DESCS 64
#define ERR_LIMIT 1e-2
#define EXIT_NO_DEVICE 2

/* ---------------------------------------------------------------- failures */
/* A tool may exit: every CUDA/cuBLAS failure is fatal and says which call failed. */
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("qjit-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void cuda_check(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess)
        die("line %d: %s failed: %s (%s)", line, what, cudaGetErrorName(e), cudaGetErrorString(e));
}
#define CUDA_CHECK(call) cuda_check((call), #call, __LINE__)

static void cublas_check(cublasStatus_t s, const char *what, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        die("line %d: %s failed: %s (%s)", line, what, cublasGetStatusName(s),
            cublasGetStatusString(s));
}
#define CUBLAS_CHECK(call) cublas_check((call), #call, __LINE__)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of host memory (%zu bytes)", n);
    return p;
}

/* ---------------------------------------------------------------- small helpers */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double cpu_ns(void) /* CPU time of the whole process, all its threads */
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v).  NAN for n == 0. */
static double median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double max_of(const double *v, int n)
{
    double m = NAN;
    for (int i = 0; i < n; i++)
        if (isnan(m) || v[i] > m)
            m = v[i];
    return m;
}

/* splitmix64: a fast, well-mixed host PRNG; the inputs only need to be non-trivial. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *dtype_name(qjit_dtype t)
{
    switch (t) {
    case QJIT_DTYPE_F16: return "f16";
    case QJIT_DTYPE_BF16: return "bf16";
    case QJIT_DTYPE_F32: return "f32";
    default: return "?";
    }
}

static size_t dtype_size(qjit_dtype t)
{
    return t == QJIT_DTYPE_F32 ? 4 : 2;
}

static cudaDataType_t dtype_cuda(qjit_dtype t)
{
    return t == QJIT_DTYPE_F16 ? CUDA_R_16F : t == QJIT_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static float elem_to_f32(const void *base, size_t i, qjit_dtype t)
{
    if (t == QJIT_DTYPE_F32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return t == QJIT_DTYPE_BF16 ? qjit_bf16_to_f32(h) : qjit_f16_to_f32(h);
}

/* ---------------------------------------------------------------- options */
typedef struct shape {
    int64_t m, n, k;
} shape;

typedef struct bench_opts {
    int do_gemm, do_jit, do_launch, do_sweep;
    int want_bf16, want_f16;
    shape shapes[MAX_SHAPES];
    int nshapes;
    const char *desc_text; /* --desc: replaces "gemm a=T b=T out=T" */
    const char *sweep[MAX_SWEEP];
    int nsweep;
    int reps, warmup;
    const char *csv_path;
    const char *cache_dir; /* GEMM and launch sections; NULL = qjit's default */
    long get_iters;
    int get_batches;
    int jit_kernels; /* --jit-kernels N: N generated descriptors instead of jit_descs */
    int launch_count, launch_batch, launch_rounds;
    int64_t launch_m, launch_n, launch_k; /* --launch-m, --launch-nk: the launch problem */
    int device;
    uint64_t seed;
} bench_opts;

static const char *const default_sweep[] = {
    "tile=128x128x32 warps=2x2 stages=4", "tile=128x256x32 warps=2x4 stages=3",
    "tile=256x128x32 warps=4x2 stages=3", "tile=128x128x64 warps=2x2 stages=3",
    "tile=64x128x32 warps=2x2 stages=4",  "tile=128x256x32 warps=2x4 stages=4",
};

/* Distinct kernels for the compile-on-miss measurement (tiles, stages, outputs, bias). */
static const char *const jit_descs[] = {
    "gemm a=bf16 b=bf16 out=bf16 tile=128x128x32 warps=2x2 stages=4",
    "gemm a=bf16 b=bf16 out=bf16 tile=128x256x32 warps=2x4 stages=3",
    "gemm a=bf16 b=bf16 out=bf16 tile=256x128x32 warps=4x2 stages=3",
    "gemm a=bf16 b=bf16 out=bf16 tile=64x128x32 warps=2x2 stages=4",
    "gemm a=f16 b=f16 out=f16 tile=128x128x32 warps=2x2 stages=4",
    "gemm a=f16 b=f16 out=f16 tile=128x128x64 warps=2x2 stages=3",
    "gemm a=bf16 b=bf16 out=f32 tile=128x128x32 warps=2x2 stages=4",
    "gemm a=f16 b=f16 out=f32 tile=128x256x32 warps=2x4 stages=4",
    "gemm a=bf16 b=bf16 out=bf16 bias=1 tile=128x128x32 warps=2x2 stages=3",
    "gemm a=f16 b=f16 out=f16 bias=1 tile=64x128x32 warps=2x2 stages=3",
};
#define N_JIT_DESCS ((int)(sizeof jit_descs / sizeof jit_descs[0]))

static void usage(FILE *f)
{
    fputs(
        "usage: qjit-bench [gemm] [jit] [launch] [options]      (no section: all three)\n"
        "  gemm      qjit vs cuBLAS throughput, bf16 and f16, with an error check\n"
        "  jit       compile on a miss, cold-process cache hit, warm get\n"
        "  launch    host cost of qjit_gemm_launch vs a raw cuLaunchKernel (and cuBLAS)\n"
        "options:\n"
        "  --shape MxNxK       add a GEMM shape (repeatable)\n"
        "  --no-default-shapes drop 4096^3, 8192^3, 16x8192x8192\n"
        "  --dtype bf16|f16|both  (default both)\n"
        "  --desc TEXT         qjit descriptor instead of 'gemm a=T b=T out=T'\n"
        "  --sweep             also time explicit tile configs (gemm section)\n"
        "  --sweep-config TEXT replace the sweep list, e.g. 'tile=128x128x32 warps=2x2 stages=4'\n"
        "  --reps N            timed launches per library and config (default 100)\n"
        "  --warmup N          untimed launches first (default 10)\n"
        "  --csv FILE          write every number to FILE\n"
        "  --cache-dir DIR     qjit cache of the gemm/launch sections (default: qjit's)\n"
        "  --get-iters N       warm gets per batch (default 1000000), --get-batches N (5)\n"
        "  --jit-kernels N     jit section over N generated distinct kernels (<= 64), with\n"
        "                      totals: compile all N vs a cold process loading all N\n"
        "  --launch-count N    launches per mode per round (default 20000)\n"
        "  --launch-batch N    launches between synchronizations (default 500)\n"
        "  --launch-rounds N   alternating rounds (default 5)\n"
        "  --launch-m M        M of the launch problem (default 128): M <= 16 times an auto\n"
        "                      handle's decode variant\n"
        "  --launch-nk NxK     N and K of the launch problem (default 128x128); a layer's\n"
        "                      shape (4096x4096) times the variant its tuned record names\n"
        "  --device N          CUDA device (default 0)\n"
        "  --seed N            input PRNG seed\n",
        f);
}

static long parse_long(const char *s, const char *opt, long lo)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo)
        die("%s: bad value '%s' (an integer >= %ld)", opt, s, lo);
    return v;
}

static void parse_args(int argc, char **argv, bench_opts *o)
{
    static const shape defaults[] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16, 8192, 8192}};
    int sections = 0, default_shapes = 1;
    shape extra[MAX_SHAPES];
    int nextra = 0;

    memset(o, 0, sizeof *o);
    o->want_bf16 = o->want_f16 = 1;
    o->reps = 100;
    o->warmup = 10;
    o->get_iters = 1000000;
    o->get_batches = 5;
    o->launch_count = 20000;
    o->launch_batch = 500;
    o->launch_rounds = 5;
    o->launch_m = o->launch_n = o->launch_k = 128;
    o->seed = 0x5eed;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                     \
    do {                                                                                 \
        if (!v)                                                                          \
            die("%s needs a value (see --help)", a);                                     \
        i++;                                                                             \
    } while (0)
        if (!strcmp(a, "gemm")) {
            o->do_gemm = 1, sections = 1;
        } else if (!strcmp(a, "jit")) {
            o->do_jit = 1, sections = 1;
        } else if (!strcmp(a, "launch")) {
            o->do_launch = 1, sections = 1;
        } else if (!strcmp(a, "all")) {
            o->do_gemm = o->do_jit = o->do_launch = 1, sections = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--shape")) {
            NEED_VALUE();
            long long m, n, k;
            char tail;
            if (sscanf(v, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 || k < 1)
                die("--shape: bad value '%s' (MxNxK, e.g. 16x8192x8192)", v);
            if (nextra == MAX_SHAPES)
                die("--shape: at most %d shapes", MAX_SHAPES);
            extra[nextra++] = (shape){m, n, k};
        } else if (!strcmp(a, "--no-default-shapes")) {
            default_shapes = 0;
        } else if (!strcmp(a, "--dtype")) {
            NEED_VALUE();
            if (!strcmp(v, "bf16"))
                o->want_bf16 = 1, o->want_f16 = 0;
            else if (!strcmp(v, "f16"))
                o->want_bf16 = 0, o->want_f16 = 1;
            else if (!strcmp(v, "both"))
                o->want_bf16 = o->want_f16 = 1;
            else
                die("--dtype: bad value '%s' (bf16, f16 or both)", v);
        } else if (!strcmp(a, "--desc")) {
            NEED_VALUE();
            o->desc_text = v;
        } else if (!strcmp(a, "--sweep")) {
            o->do_sweep = 1;
        } else if (!strcmp(a, "--sweep-config")) {
            NEED_VALUE();
            if (o->nsweep == MAX_SWEEP)
                die("--sweep-config: at most %d", MAX_SWEEP);
            o->sweep[o->nsweep++] = v;
            o->do_sweep = 1;
        } else if (!strcmp(a, "--reps")) {
            NEED_VALUE();
            o->reps = (int)parse_long(v, a, 1);
        } else if (!strcmp(a, "--warmup")) {
            NEED_VALUE();
            o->warmup = (int)parse_long(v, a, 0);
        } else if (!strcmp(a, "--csv")) {
            NEED_VALUE();
            o->csv_path = v;
        } else if (!strcmp(a, "--cache-dir")) {
            NEED_VALUE();
            o->cache_dir = v;
        } else if (!strcmp(a, "--get-iters")) {
            NEED_VALUE();
            o->get_iters = parse_long(v, a, 1);
        } else if (!strcmp(a, "--get-batches")) {
            NEED_VALUE();
            o->get_batches = (int)parse_long(v, a, 1);
        } else if (!strcmp(a, "--jit-kernels")) {
            NEED_VALUE();
            o->jit_kernels = (int)parse_long(v, a, 1);
            if (o->jit_kernels > MAX_JIT_DESCS)
                die("--jit-kernels: at most %d", MAX_JIT_DESCS);
        } else if (!strcmp(a, "--launch-count")) {
            NEED_VALUE();
            o->launch_count = (int)parse_long(v, a, 1);
        } else if (!strcmp(a, "--launch-batch")) {
            NEED_VALUE();
            o->launch_batch = (int)parse_long(v, a, 1);
        } else if (!strcmp(a, "--launch-rounds")) {
            NEED_VALUE();
            o->launch_rounds = (int)parse_long(v, a, 1);
        } else if (!strcmp(a, "--launch-m")) {
            NEED_VALUE();
            o->launch_m = parse_long(v, a, 1);
            if (o->launch_m > 65536)
                die("--launch-m: at most 65536");
        } else if (!strcmp(a, "--launch-nk")) {
            NEED_VALUE();
            long long nn = 0, kk = 0;
            if (sscanf(v, "%lldx%lld", &nn, &kk) != 2 || nn < 1 || kk < 1 || nn > 65536 ||
                kk > 65536)
                die("--launch-nk: NxK, each 1..65536 (got '%s')", v);
            o->launch_n = nn;
            o->launch_k = kk;
        } else if (!strcmp(a, "--device")) {
            NEED_VALUE();
            o->device = (int)parse_long(v, a, 0);
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            o->seed = (uint64_t)parse_long(v, a, 0);
        } else {
            usage(stderr);
            die("unknown argument '%s'", a);
        }
#undef NEED_VALUE
    }
    if (!sections)
        o->do_gemm = o->do_jit = o->do_launch = 1;
    if (o->do_sweep)
        o->do_gemm = 1;
    if (default_shapes)
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            o->shapes[o->nshapes++] = defaults[i];
    for (int i = 0; i < nextra && o->nshapes < MAX_SHAPES; i++)
        o->shapes[o->nshapes++] = extra[i];
    if (o->do_gemm && o->nshapes == 0)
        die("no GEMM shape: --no-default-shapes needs at least one --shape");
    if (o->nsweep == 0) {
        for (size_t i = 0; i < sizeof default_sweep / sizeof default_sweep[0]; i++)
            o->sweep[o->nsweep++] = default_sweep[i];
    }
    if (o->launch_batch > o->launch_count)
        o->launch_batch = o->launch_count;
}

/* ---------------------------------------------------------------- CSV and results */
static FILE *csv;

/* One number per row: section,run,dtype,m,n,k,item,metric,value,unit.  Flushed at once
 * so a run cut short (lease ended, a faulting kernel) keeps what it measured. */
static void csv_row(const char *section, const char *run, const char *dtype, const shape *s,
                    const char *item, const char *metric, double value, const char *unit)
{
    if (!csv)
        return;
    fprintf(csv, "%s,%s,%s,", section, run ? run : "", dtype ? dtype : "");
    if (s)
        fprintf(csv, "%lld,%lld,%lld,", (long long)s->m, (long long)s->n, (long long)s->k);
    else
        fputs(",,,", csv);
    fputc('"', csv);
    for (const char *p = item ? item : ""; *p; p++) {
        if (*p == '"')
            fputc('"', csv);
        fputc(*p, csv);
    }
    fprintf(csv, "\",%s,%.9g,%s\n", metric, value, unit);
    fflush(csv);
}

typedef struct gemm_result {
    char what[16];    /* "auto", "sweep" */
    qjit_dtype dtype; /* of A and B */
    shape s;
    char config[64];  /* resolved tile/warps/stages, or the failure */
    double q_us, c_us, q_min, c_min; /* median and fastest launch */
    double err, spot_q, spot_c;
    int q_ok;
} gemm_result;

static gemm_result results[MAX_RESULTS];
static int nresults;

typedef struct jit_summary {
    int ran, n_ok;
    double ctx_ms, first_touch_ms, miss_med_ms, miss_cpu_med_ms, miss_max_ms;
    uint64_t compiles, disk_hits;
    int child_ok;
    double child_init_ms, child_ctx_ms, child_get_med_ms, child_get_max_ms, child_total_ms;
    uint64_t child_compiles, child_disk_hits, child_gets;
    double warm_get_ns, parse_ns;
} jit_summary;

typedef struct launch_summary {
    int ran;
    double qjit_ns, raw_ns, cublas_ns, diff_ns; /* diff: median of paired batches */
    int identical;
} launch_summary;

static jit_summary jitsum;
static launch_summary launchsum;

/* ---------------------------------------------------------------- environment */
typedef CUresult(CUDAAPI *launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                            unsigned, unsigned, unsigned, CUstream, void **,
                                            void **);
typedef CUresult(CUDAAPI *launch_kernel_ex_fn)(const CUlaunchConfig *, CUfunction, void **,
                                               void **);

typedef struct bench_env {
    const bench_opts *o;
    struct cudaDeviceProp prop;
    cudaStream_t stream;
    cublasHandle_t blas;
    qjit_context *ctx; /* gemm/launch sections */
} bench_env;

static void on_log(void *user, qjit_log_level level, const char *message)
{
    (void)user;
    if (level >= QJIT_LOG_WARN)
        fprintf(stderr, "qjit-bench: [qjit %s] %s\n", level == QJIT_LOG_WARN ? "warn" : "error",
                message);
}

/* Select the device and initialize the runtime; a missing driver or GPU ends the run
 * with a message that says so (exit status 2). */
static void init_device(int device, struct cudaDeviceProp *prop)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        /* with no driver at all, cudart says "driver version is insufficient" */
        fprintf(stderr, "qjit-bench: no usable CUDA device (cudaGetDeviceCount: %s): no NVIDIA "
                "driver, no visible GPU, or a driver older than this CUDA runtime (%d)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", CUDART_VERSION);
        exit(EXIT_NO_DEVICE);
    }
    if (device >= count) {
        fprintf(stderr, "qjit-bench: --device %d, but only %d device(s) visible\n", device, count);
        exit(EXIT_NO_DEVICE);
    }
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaFree(0)); /* make the primary context current, for qjit too */
    if (prop)
        CUDA_CHECK(cudaGetDeviceProperties(prop, device));
}

static qjit_context *make_context(const char *cache_dir)
{
    qjit_options opt;
    qjit_context *ctx = NULL;
    qjit_options_init(&opt);
    opt.cache_dir = cache_dir;
    opt.log = on_log;
    qjit_status s = qjit_context_create(&opt, &ctx);
    if (s != QJIT_OK)
        die("qjit_context_create(cache_dir=%s): %s: %s", cache_dir ? cache_dir : "(default)",
            qjit_status_string(s), qjit_last_error());
    return ctx;
}

/* ---------------------------------------------------------------- descriptors */
/* Build the descriptor of one run: --desc or "gemm a=T b=T out=T", with the tile fields
 * of `cfg` (a sweep entry, may be NULL) laid over it.  0 on success, else *why is set. */
static int make_desc(const char *base, qjit_dtype t, const char *cfg, qjit_gemm_desc *d,
                     char *why, size_t why_cap)
{
    char text[512];
    qjit_status s;
    if (base)
        snprintf(text, sizeof text, "%s", base);
    else
        snprintf(text, sizeof text, "gemm a=%s b=%s out=%s", dtype_name(t), dtype_name(t),
                 dtype_name(t));
    s = qjit_gemm_desc_parse(text, d);
    if (s != QJIT_OK) {
        snprintf(why, why_cap, "parse '%.200s': %s", text, qjit_last_error());
        return -1;
    }
    if (cfg) {
        qjit_gemm_desc c;
        snprintf(text, sizeof text, "gemm %s", cfg);
        s = qjit_gemm_desc_parse(text, &c);
        if (s != QJIT_OK) {
            snprintf(why, why_cap, "parse '%.200s': %s", text, qjit_last_error());
            return -1;
        }
        if (c.bm)
            d->bm = c.bm, d->bn = c.bn, d->bk = c.bk;
        if (c.wm)
            d->wm = c.wm, d->wn = c.wn;
        if (c.stages)
            d->stages = c.stages;
        if (c.split_k != 1)
            d->split_k = c.split_k;
        if (c.kernel != QJIT_KERNEL_AUTO)
            d->kernel = c.kernel;
    }
    return 0;
}

static void short_config(const qjit_gemm *g, char *buf, size_t cap)
{
    qjit_gemm_info info;
    if (qjit_gemm_get_info(g, &info) != QJIT_OK) {
        snprintf(buf, cap, "(no info: %s)", qjit_last_error());
        return;
    }
    const qjit_gemm_desc *d = &info.desc;
    snprintf(buf, cap, "%dx%dx%d w%dx%d s%d k%d", d->bm, d->bn, d->bk, d->wm, d->wn, d->stages,
             d->split_k);
}

/* ---------------------------------------------------------------- GEMM section */
typedef struct gemm_problem {
    shape s;
    qjit_dtype in, out;
    size_t a_bytes, b_bytes, d_bytes;
    int nsets;
    void *a[MAX_SETS], *b[MAX_SETS], *d[MAX_SETS];
    uint16_t *ha, *hb; /* host copies of the inputs (every set holds the same values) */
} gemm_problem;

static void fill_host(uint16_t *h, size_t n, qjit_dtype t, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < n; i += 2) {
        uint64_t r = rng_next(&st);
        /* two uniforms in [-1, 1) from 24 random bits each */
        float u0 = (float)(int32_t)((r & 0xffffffu) - 0x800000u) * (1.0f / 8388608.0f);
        float u1 = (float)(int32_t)(((r >> 32) & 0xffffffu) - 0x800000u) * (1.0f / 8388608.0f);
        h[i] = t == QJIT_DTYPE_BF16 ? qjit_bf16_from_f32(u0) : qjit_f16_from_f32(u0);
        if (i + 1 < n)
            h[i + 1] = t == QJIT_DTYPE_BF16 ? qjit_bf16_from_f32(u1) : qjit_f16_from_f32(u1);
    }
}

/* Allocate enough buffer sets that the sets together are at least twice the L2, so a
 * timed launch never starts with its inputs cached by the previous one.  0, or -1 when
 * the device lacks the memory (the shape is skipped). */
static int problem_alloc(gemm_problem *p, const bench_env *env, shape s, qjit_dtype in,
                         qjit_dtype out)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->in = in;
    p->out = out;
    p->a_bytes = (size_t)s.m * (size_t)s.k * dtype_size(in);
    p->b_bytes = (size_t)s.n * (size_t)s.k * dtype_size(in);
    p->d_bytes = (size_t)s.m * (size_t)s.n * dtype_size(out);
    size_t set = p->a_bytes + p->b_bytes + p->d_bytes;
    size_t want = 2 * (size_t)(env->prop.l2CacheSize > 0 ? env->prop.l2CacheSize : 50 << 20);
    p->nsets = (int)((want + set - 1) / set);
    if (p->nsets < 1)
        p->nsets = 1;
    if (p->nsets > MAX_SETS)
        p->nsets = MAX_SETS;

    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    /* leave room for cuBLAS's workspace and the kernels */
    if ((double)set * p->nsets > (double)free_b - (512.0 * 1024 * 1024)) {
        if ((double)set > (double)free_b - (512.0 * 1024 * 1024))
            return -1;
        p->nsets = 1;
    }
    p->ha = xmalloc(p->a_bytes);
    p->hb = xmalloc(p->b_bytes);
    fill_host(p->ha, p->a_bytes / 2, in, env->o->seed * 2 + 1);
    fill_host(p->hb, p->b_bytes / 2, in, env->o->seed * 2 + 2);
    for (int i = 0; i < p->nsets; i++) {
        CUDA_CHECK(cudaMalloc(&p->a[i], p->a_bytes));
        CUDA_CHECK(cudaMalloc(&p->b[i], p->b_bytes));
        CUDA_CHECK(cudaMalloc(&p->d[i], p->d_bytes));
        CUDA_CHECK(cudaMemcpy(p->a[i], p->ha, p->a_bytes, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(p->b[i], p->hb, p->b_bytes, cudaMemcpyHostToDevice));
    }
    return 0;
}

static void problem_free(gemm_problem *p)
{
    for (int i = 0; i < p->nsets; i++) {
        CUDA_CHECK(cudaFree(p->a[i]));
        CUDA_CHECK(cudaFree(p->b[i]));
        CUDA_CHECK(cudaFree(p->d[i]));
    }
    free(p->ha);
    free(p->hb);
    memset(p, 0, sizeof *p);
}

static qjit_status launch_qjit(const qjit_gemm *g, const gemm_problem *p, int set,
                               cudaStream_t stream)
{
    qjit_gemm_args a = {.a = p->a[set], .b = p->b[set], .d = p->d[set],
                        .m = p->s.m, .n = p->s.n, .k = p->s.k,
                        .lda = p->s.k, .ldb = p->s.k, .ldd = p->s.n};
    return qjit_gemm_launch(g, &a, stream);
}

/* D (M×N row-major) = A (M×K row-major) · B (N×K row-major)^T.  Column-major, cuBLAS sees
 * D as D^T (N×M, ld N), A as A^T (K×M, ld K) and B as B^T (K×N, ld K), so
 * D^T = (B^T)^T · A^T = op_T(B^T) · op_N(A^T) with m=N, n=M, k=K. */
static void launch_cublas(const bench_env *env, const gemm_problem *p, int set)
{
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(env->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->s.n, (int)p->s.m,
                              (int)p->s.k, &alpha, p->b[set], dtype_cuda(p->in), (int)p->s.k,
                              p->a[set], dtype_cuda(p->in), (int)p->s.k, &beta, p->d[set],
                              dtype_cuda(p->out), (int)p->s.n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

/* Relative error of `d` at a few random entries against a double-precision host dot
 * product of the inputs: checks the peer as well as qjit. */
static double spot_error(const gemm_problem *p, const void *d, uint64_t seed)
{
    uint64_t st = seed;
    double num = 0, den = 0;
    for (int t = 0; t < 64; t++) {
        int64_t i = (int64_t)(rng_next(&st) % (uint64_t)p->s.m);
        int64_t j = (int64_t)(rng_next(&st) % (uint64_t)p->s.n);
        double ref = 0;
        for (int64_t k = 0; k < p->s.k; k++)
            ref += (double)elem_to_f32(p->ha, (size_t)(i * p->s.k + k), p->in) *
                   (double)elem_to_f32(p->hb, (size_t)(j * p->s.k + k), p->in);
        double got = elem_to_f32(d, (size_t)(i * p->s.n + j), p->out);
        num += (got - ref) * (got - ref);
        den += ref * ref;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Run qjit and cuBLAS once each on set 0 with a poisoned (NaN) output, and compare the
 * whole outputs: ‖q−c‖/‖c‖.  NaN when qjit wrote nothing or wrote NaN. */
static int verify(const bench_env *env, const qjit_gemm *g, const gemm_problem *p, double *err,
                  double *spot_q, double *spot_c, char *why, size_t why_cap)
{
    size_t n = (size_t)p->s.m * (size_t)p->s.n;
    void *hq = xmalloc(p->d_bytes), *hc = xmalloc(p->d_bytes);
    int rc = 0;

    CUDA_CHECK(cudaMemsetAsync(p->d[0], 0xff, p->d_bytes, env->stream));
    qjit_status s = launch_qjit(g, p, 0, env->stream);
    if (s != QJIT_OK) {
        snprintf(why, why_cap, "launch: %s: %s", qjit_status_string(s), qjit_last_error());
        rc = -1;
        goto done;
    }
    cudaError_t e = cudaStreamSynchronize(env->stream);
    if (e != cudaSuccess)
        die("the qjit kernel failed on its first run (%s); the CUDA context is lost",
            cudaGetErrorString(e));
    CUDA_CHECK(cudaMemcpy(hq, p->d[0], p->d_bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemsetAsync(p->d[0], 0xff, p->d_bytes, env->stream));
    launch_cublas(env, p, 0);
    CUDA_CHECK(cudaStreamSynchronize(env->stream));
    CUDA_CHECK(cudaMemcpy(hc, p->d[0], p->d_bytes, cudaMemcpyDeviceToHost));

    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double q = elem_to_f32(hq, i, p->out), c = elem_to_f32(hc, i, p->out);
        num += (q - c) * (q - c);
        den += c * c;
    }
    *err = den > 0 ? sqrt(num / den) : sqrt(num);
    *spot_q = spot_error(p, hq, env->o->seed + 99);
    *spot_c = spot_error(p, hc, env->o->seed + 99);
done:
    free(hq);
    free(hc);
    return rc;
}

/* Warm up, then time `reps` launches of each library, interleaved launch by launch, each
 * between its own pair of events; medians in µs.  g == NULL times cuBLAS alone.  Launch j
 * uses buffer set j % nsets, so consecutive launches read different memory. */
static int time_pair(const bench_env *env, const qjit_gemm *g, const gemm_problem *p,
                     gemm_result *res, char *why, size_t why_cap)
{
    int reps = env->o->reps, lib_n = g ? 2 : 1, rc = 0;
    cudaEvent_t *ev = xmalloc(sizeof *ev * (size_t)reps * 4);
    double *tq = xmalloc(sizeof *tq * (size_t)reps), *tc = xmalloc(sizeof *tc * (size_t)reps);
    qjit_status s;

    for (int i = 0; i < reps * 4; i++)
        CUDA_CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < env->o->warmup; i++) {
        if (g && (s = launch_qjit(g, p, (2 * i) % p->nsets, env->stream)) != QJIT_OK)
            goto launch_failed;
        launch_cublas(env, p, (2 * i + 1) % p->nsets);
    }
    for (int r = 0; r < reps; r++) {
        int j = lib_n * r;
        if (g) {
            CUDA_CHECK(cudaEventRecord(ev[4 * r], env->stream));
            if ((s = launch_qjit(g, p, j % p->nsets, env->stream)) != QJIT_OK)
                goto launch_failed;
            CUDA_CHECK(cudaEventRecord(ev[4 * r + 1], env->stream));
            j++;
        }
        CUDA_CHECK(cudaEventRecord(ev[4 * r + 2], env->stream));
        launch_cublas(env, p, j % p->nsets);
        CUDA_CHECK(cudaEventRecord(ev[4 * r + 3], env->stream));
    }
    cudaError_t e = cudaStreamSynchronize(env->stream);
    if (e != cudaSuccess)
        die("a timed kernel failed (%s); the CUDA context is lost", cudaGetErrorString(e));
    for (int r = 0; r < reps; r++) {
        float ms;
        if (g) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[4 * r], ev[4 * r + 1]));
            tq[r] = ms * 1e3;
        }
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[4 * r + 2], ev[4 * r + 3]));
        tc[r] = ms * 1e3;
    }
    res->q_us = g ? median(tq, reps) : NAN; /* median() sorts: [0] is then the min */
    res->q_min = g ? tq[0] : NAN;
    res->c_us = median(tc, reps);
    res->c_min = tc[0];
    goto done;

launch_failed:
    snprintf(why, why_cap, "launch: %s: %s", qjit_status_string(s), qjit_last_error());
    CUDA_CHECK(cudaStreamSynchronize(env->stream));
    rc = -1;
done:
    for (int i = 0; i < reps * 4; i++)
        CUDA_CHECK(cudaEventDestroy(ev[i]));
    free(ev);
    free(tq);
    free(tc);
    return rc;
}

static double tflops(const shape *s, double us)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / (us * 1e-6) / 1e12;
}

static void print_gemm_header(void)
{
    printf("  %-5s %-18s %-26s %10s %8s %10s %8s %7s %9s %s\n", "dtype", "M x N x K",
           "qjit config", "qjit us", "TFLOP/s", "cuBLAS us", "TFLOP/s", "q/c", "err", "");
}

static void print_gemm_row(const gemm_result *r)
{
    char shp[40];
    snprintf(shp, sizeof shp, "%lldx%lldx%lld", (long long)r->s.m, (long long)r->s.n,
             (long long)r->s.k);
    if (!r->q_ok) {
        printf("  %-5s %-18s %-26.26s %10s %8s %10.1f %8.1f %7s %9s %s\n", dtype_name(r->dtype),
               shp, "qjit n/a", "-", "-", r->c_us, tflops(&r->s, r->c_us), "-", "-",
               r->config);
        return;
    }
    /* err compares with cuBLAS; the spot checks compare both with a host reference, so a
     * wrong peer is told apart from a wrong qjit */
    int bad = !(r->err <= ERR_LIMIT) || !(r->spot_q <= ERR_LIMIT);
    int peer_bad = !(r->spot_c <= ERR_LIMIT);
    printf("  %-5s %-18s %-26.26s %10.1f %8.1f %10.1f %8.1f %7.3f %9.2e %s%s\n",
           dtype_name(r->dtype), shp, r->config, r->q_us, tflops(&r->s, r->q_us), r->c_us,
           tflops(&r->s, r->c_us), r->c_us / r->q_us, r->err, bad ? "WRONG " : "",
           peer_bad ? "PEER-WRONG" : "");
}

/* Time one descriptor on one problem against cuBLAS and record the row. */
static void bench_one(bench_env *env, gemm_problem *p, const char *what, const char *cfg)
{
    gemm_result *r = nresults < MAX_RESULTS ? &results[nresults++] : &results[MAX_RESULTS - 1];
    char why[512] = "", dtn[8];
    qjit_gemm_desc d;
    qjit_gemm *g = NULL;

    memset(r, 0, sizeof *r);
    snprintf(r->what, sizeof r->what, "%s", what);
    r->dtype = p->in;
    r->s = p->s;
    r->err = r->spot_q = r->spot_c = r->q_us = r->q_min = NAN;
    snprintf(dtn, sizeof dtn, "%s", dtype_name(p->in));

    if (make_desc(env->o->desc_text, p->in, cfg, &d, why, sizeof why) == 0) {
        qjit_status s = qjit_context_get_gemm(env->ctx, &d, NULL, &g);
        if (s != QJIT_OK) {
            snprintf(why, sizeof why, "get: %s: %s", qjit_status_string(s), qjit_last_error());
            g = NULL;
        }
    }
    if (g) {
        short_config(g, r->config, sizeof r->config);
        if (verify(env, g, p, &r->err, &r->spot_q, &r->spot_c, why, sizeof why) != 0)
            g = NULL;
    }
    if (time_pair(env, g, p, r, why, sizeof why) != 0) {
        char unused[8];
        g = NULL;
        time_pair(env, NULL, p, r, unused, sizeof unused);
    }
    r->q_ok = g != NULL;
    if (!r->q_ok) {
        /* keep the first line of the reason: NVRTC logs are long */
        char *nl = strchr(why, '\n');
        if (nl)
            *nl = 0;
        snprintf(r->config, sizeof r->config, "%.63s", why);
        fprintf(stderr, "qjit-bench: %s %s %lldx%lldx%lld%s%s: qjit skipped: %s\n", what, dtn,
                (long long)p->s.m, (long long)p->s.n, (long long)p->s.k, cfg ? " " : "",
                cfg ? cfg : "", why);
    }
    print_gemm_row(r);

    char item[256];
    if (g) {
        qjit_gemm_info info;
        if (qjit_gemm_get_info(g, &info) == QJIT_OK)
            snprintf(item, sizeof item, "%s", info.text);
        else
            snprintf(item, sizeof item, "%s", r->config);
        csv_row("gemm", what, dtn, &p->s, item, "qjit_us", r->q_us, "us");
        csv_row("gemm", what, dtn, &p->s, item, "qjit_us_min", r->q_min, "us");
        csv_row("gemm", what, dtn, &p->s, item, "qjit_tflops", tflops(&p->s, r->q_us), "TFLOP/s");
        csv_row("gemm", what, dtn, &p->s, item, "cublas_us", r->c_us, "us");
        csv_row("gemm", what, dtn, &p->s, item, "cublas_us_min", r->c_min, "us");
        csv_row("gemm", what, dtn, &p->s, item, "cublas_tflops", tflops(&p->s, r->c_us), "TFLOP/s");
        csv_row("gemm", what, dtn, &p->s, item, "qjit_vs_cublas", r->c_us / r->q_us, "x");
        csv_row("gemm", what, dtn, &p->s, item, "rel_err_vs_cublas", r->err, "");
        csv_row("gemm", what, dtn, &p->s, item, "spot_err_qjit", r->spot_q, "");
        csv_row("gemm", what, dtn, &p->s, item, "spot_err_cublas", r->spot_c, "");
    } else {
        snprintf(item, sizeof item, "qjit n/a: %s", r->config);
        csv_row("gemm", what, dtn, &p->s, item, "cublas_us", r->c_us, "us");
        csv_row("gemm", what, dtn, &p->s, item, "cublas_tflops", tflops(&p->s, r->c_us), "TFLOP/s");
    }
}

static void run_gemm(bench_env *env)
{
    const bench_opts *o = env->o;
    qjit_dtype list[2];
    int nl = 0;

    if (o->desc_text) {
        qjit_gemm_desc d;
        qjit_status s = qjit_gemm_desc_parse(o->desc_text, &d);
        if (s != QJIT_OK)
            die("--desc '%s': %s", o->desc_text, qjit_last_error());
        if (d.a != d.b || (d.a != QJIT_DTYPE_F16 && d.a != QJIT_DTYPE_BF16) ||
            d.sa != QJIT_SCALE_NONE || d.sb != QJIT_SCALE_NONE || d.bias ||
            (d.out != QJIT_DTYPE_F16 && d.out != QJIT_DTYPE_BF16 && d.out != QJIT_DTYPE_F32))
            die("--desc '%s': the gemm section compares with cuBLAS, so a and b must both be "
                "f16 or both bf16, with no scales and no bias, and out f16, bf16 or f32",
                o->desc_text);
        list[nl++] = d.a;
    } else {
        if (o->want_bf16)
            list[nl++] = QJIT_DTYPE_BF16;
        if (o->want_f16)
            list[nl++] = QJIT_DTYPE_F16;
    }

    printf("\n== GEMM: qjit vs cuBLAS (median of %d interleaved launches, %d warm-up; "
           "q/c = cuBLAS time / qjit time)\n",
           o->reps, o->warmup);
    print_gemm_header();
    for (int si = 0; si < o->nshapes; si++) {
        for (int ti = 0; ti < nl; ti++) {
            gemm_problem p;
            qjit_dtype out = list[ti];
            if (o->desc_text) {
                qjit_gemm_desc d;
                if (qjit_gemm_desc_parse(o->desc_text, &d) == QJIT_OK)
                    out = d.out;
            }
            if (o->shapes[si].m > INT32_MAX || o->shapes[si].n > INT32_MAX ||
                o->shapes[si].k > INT32_MAX) {
                fprintf(stderr, "qjit-bench: shape too large for cublasGemmEx; skipped\n");
                continue;
            }
            if (problem_alloc(&p, env, o->shapes[si], list[ti], out) != 0) {
                fprintf(stderr, "qjit-bench: %lldx%lldx%lld %s does not fit in device memory; "
                        "skipped\n", (long long)o->shapes[si].m, (long long)o->shapes[si].n,
                        (long long)o->shapes[si].k, dtype_name(list[ti]));
                continue;
            }
            csv_row("gemm", NULL, dtype_name(list[ti]), &p.s, "", "buffer_sets", p.nsets, "");
            bench_one(env, &p, "auto", NULL);
            if (o->do_sweep)
                for (int ci = 0; ci < o->nsweep; ci++)
                    bench_one(env, &p, "sweep", o->sweep[ci]);
            problem_free(&p);
        }
    }
}

/* ---------------------------------------------------------------- JIT section */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "qjit-bench: could not remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* The child side of the JIT measurements, a fresh process so that nothing compiled or
 * loaded earlier in the parent (by NVRTC, the driver or qjit) helps:
 *   miss: an empty cache; every first get compiles; then the warm-get and parse loops.
 *   hit:  the cache the miss child filled; every first get is a disk hit.
 * Prints "key value..." lines on stdout for the parent (run_child) to read. */
static int child_jit(const bench_opts *o, int miss, const char *dir, int n, char **descs)
{
    qjit_gemm *first = NULL;
    qjit_gemm_desc first_desc;
    int first_i = -1;

    double t0 = now_ns();
    init_device(o->device, NULL);
    double t1 = now_ns();
    qjit_context *ctx = make_context(dir);
    double t2 = now_ns();
    printf("cuda_init_ms %.6f\nctx_create_ms %.6f\n", (t1 - t0) / 1e6, (t2 - t1) / 1e6);

    /* Resolving with arch=auto asks the device: this takes qjit's lazy driver load out of
     * the first timed get. */
    if (n > 0) {
        qjit_gemm_desc d, r;
        if (qjit_gemm_desc_parse(descs[0], &d) == QJIT_OK) {
            t0 = now_ns();
            qjit_status s = qjit_gemm_resolve(ctx, &d, QJIT_ARCH_AUTO, &r);
            printf("first_touch_ms %.6f\n", (now_ns() - t0) / 1e6);
            if (s != QJIT_OK)
                fprintf(stderr, "qjit-bench: qjit_gemm_resolve: %s: %s\n",
                        qjit_status_string(s), qjit_last_error());
        }
    }
    for (int i = 0; i < n; i++) {
        qjit_gemm_desc d;
        qjit_gemm *g;
        qjit_status s = qjit_gemm_desc_parse(descs[i], &d);
        if (s == QJIT_OK) {
            double a = now_ns(), ca = cpu_ns();
            s = qjit_context_get_gemm(ctx, &d, NULL, &g);
            double b = now_ns(), cb = cpu_ns();
            if (s == QJIT_OK) {
                printf("get_ms %d %.6f\n", i, (b - a) / 1e6);
                printf("get_cpu_ms %d %.6f\n", i, (cb - ca) / 1e6);
                if (!first)
                    first = g, first_desc = d, first_i = i;
                continue;
            }
        }
        const char *msg = qjit_last_error(), *nl = strchr(msg, '\n');
        printf("get_fail %d %s: %.*s\n", i, qjit_status_string(s),
               nl ? (int)(nl - msg) : (int)strlen(msg), msg);
        fprintf(stderr, "qjit-bench: get '%s': %s: %s\n", descs[i], qjit_status_string(s), msg);
    }
    qjit_stats st;
    qjit_context_stats(ctx, &st);
    printf("stats %llu %llu %llu %llu %llu %.6f\n", (unsigned long long)st.gets,
           (unsigned long long)st.memory_hits, (unsigned long long)st.disk_hits,
           (unsigned long long)st.compiles, (unsigned long long)st.compile_failures,
           st.compile_ms);

    if (miss && first) {
        /* warm get: the in-process map, as a server's hot path sees it */
        double *per = xmalloc(sizeof *per * (size_t)o->get_batches);
        qjit_gemm *g;
        for (int b = 0; b < o->get_batches; b++) {
            t0 = now_ns();
            for (long i = 0; i < o->get_iters; i++)
                if (qjit_context_get_gemm(ctx, &first_desc, NULL, &g) != QJIT_OK || g != first)
                    die("warm get failed or gave another handle: %s", qjit_last_error());
            per[b] = (now_ns() - t0) / (double)o->get_iters;
        }
        printf("warm_get_ns %d %.6f\n", first_i, median(per, o->get_batches));
        /* parse: what a caller that keeps descriptors as text pays on top */
        long piters = o->get_iters / 10 > 0 ? o->get_iters / 10 : 1;
        for (int b = 0; b < o->get_batches; b++) {
            qjit_gemm_desc d;
            t0 = now_ns();
            for (long i = 0; i < piters; i++)
                if (qjit_gemm_desc_parse(descs[first_i], &d) != QJIT_OK)
                    die("parse failed: %s", qjit_last_error());
            per[b] = (now_ns() - t0) / (double)piters;
        }
        printf("parse_ns %.6f\n", median(per, o->get_batches));
        free(per);
    }
    qjit_context_destroy(ctx);
    return 0;
}

typedef struct child_result {
    int ok;
    double init_ms, ctx_ms, touch_ms, wall_ms, warm_ns, parse_ns;
    double get_ms[MAX_JIT_DESCS];
    double get_cpu_ms[MAX_JIT_DESCS]; /* the process's CPU time over the same get */
    int got[MAX_JIT_DESCS];           /* 1: get_ms[i] is valid */
    char fail[MAX_JIT_DESCS][160];    /* first line of a failed get */
    unsigned long long gets, memory_hits, disk_hits, compiles, compile_failures;
    double compile_ms;
} child_result;

/* Run `qjit-bench --device N --get-iters I --get-batches B --child-jit MODE DIR DESC...`
 * from /proc/self/exe, with HOME set to `home`, and read its lines into *cr. */
static void run_child(const bench_env *env, const char *mode, const char *dir,
                      const char *home, int n, const char *const *descs, child_result *cr)
{
    char dev[24], iters[24], batches[24];
    char **argv = xmalloc(sizeof *argv * (size_t)(n + 12));
    int k = 0, fds[2], nget = 0, have_stats = 0;

    memset(cr, 0, sizeof *cr);
    snprintf(dev, sizeof dev, "%d", env->o->device);
    snprintf(iters, sizeof iters, "%ld", env->o->get_iters);
    snprintf(batches, sizeof batches, "%d", env->o->get_batches);
    argv[k++] = "qjit-bench";
    argv[k++] = "--device";
    argv[k++] = dev;
    argv[k++] = "--get-iters";
    argv[k++] = iters;
    argv[k++] = "--get-batches";
    argv[k++] = batches;
    argv[k++] = "--child-jit";
    argv[k++] = (char *)mode;
    argv[k++] = (char *)dir;
    for (int i = 0; i < n; i++)
        argv[k++] = (char *)descs[i];
    argv[k] = NULL;

    fflush(stdout);
    fflush(stderr);
    if (pipe(fds) != 0)
        die("pipe: %s", strerror(errno));
    double t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        setenv("HOME", home, 1);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "qjit-bench: exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    if (!f)
        die("fdopen: %s", strerror(errno));
    char line[512];
    while (fgets(line, sizeof line, f)) {
        int idx, pos = 0;
        double v;
        if (sscanf(line, "cuda_init_ms %lf", &v) == 1)
            cr->init_ms = v;
        else if (sscanf(line, "ctx_create_ms %lf", &v) == 1)
            cr->ctx_ms = v;
        else if (sscanf(line, "first_touch_ms %lf", &v) == 1)
            cr->touch_ms = v;
        else if (sscanf(line, "get_ms %d %lf", &idx, &v) == 2 && idx >= 0 && idx < n)
            cr->get_ms[idx] = v, cr->got[idx] = 1, nget++;
        else if (sscanf(line, "get_cpu_ms %d %lf", &idx, &v) == 2 && idx >= 0 && idx < n)
            cr->get_cpu_ms[idx] = v;
        else if (sscanf(line, "get_fail %d %n", &idx, &pos) == 1 && idx >= 0 && idx < n) {
            line[strcspn(line, "\n")] = 0;
            snprintf(cr->fail[idx], sizeof cr->fail[idx], "%s", line + pos);
        } else if (sscanf(line, "stats %llu %llu %llu %llu %llu %lf", &cr->gets,
                          &cr->memory_hits, &cr->disk_hits, &cr->compiles,
                          &cr->compile_failures, &cr->compile_ms) == 6)
            have_stats = 1;
        else if (sscanf(line, "warm_get_ns %d %lf", &idx, &v) == 2)
            cr->warm_ns = v;
        else if (sscanf(line, "parse_ns %lf", &v) == 1)
            cr->parse_ns = v;
    }
    fclose(f);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    cr->wall_ms = (now_ns() - t0) / 1e6;
    cr->ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && have_stats;
    if (!cr->ok)
        fprintf(stderr, "qjit-bench: the %s child failed (%s %d, %d of %d gets); see its "
                "messages above\n", mode, WIFEXITED(status) ? "exit status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), nget, n);
    free(argv);
}

static void run_jit(bench_env *env)
{
    jit_summary *js = &jitsum;
    char dir[] = "/tmp/qjit-bench-XXXXXX", home[64];
    const char *ok_descs[MAX_JIT_DESCS];
    double ms[MAX_JIT_DESCS];
    child_result *miss = xmalloc(sizeof *miss), *hit = xmalloc(sizeof *hit);
    int n = N_JIT_DESCS < MAX_JIT_DESCS ? N_JIT_DESCS : MAX_JIT_DESCS, n_ok = 0;
    const char *const *descs = jit_descs;
    /* --jit-kernels: distinct kernels from types x outputs x bias x the tile configs: eight
     * of the mma.sync kernel, and on sm_90 two of the wgmma kernel, which is the one that
     * arch=auto f16/bf16 descriptors get there */
    static char gen[MAX_JIT_DESCS][160];
    static const char *gen_ptr[MAX_JIT_DESCS];
    static const char *const tiles[] = {
        "tile=128x256x32 warps=2x4 stages=4", "tile=128x256x32 warps=2x4 stages=3",
        "tile=256x128x32 warps=4x2 stages=3", "tile=128x128x32 warps=2x2 stages=4",
        "tile=128x128x64 warps=2x2 stages=3", "tile=64x128x32 warps=2x2 stages=4",
        "tile=64x64x32 warps=2x2 stages=3",   "tile=128x64x64 warps=2x2 stages=4",
        "kernel=wgmma tile=128x256x64 warps=2x1 stages=3",
        "kernel=wgmma tile=256x128x64 warps=2x1 stages=4"};
    const int n_tiles = env->prop.major == 9 && env->prop.minor == 0 ? 10 : 8;
    if (env->o->jit_kernels > 0) {
        n = env->o->jit_kernels;
        for (int i = 0; i < n; i++) {
            const int c = i / n_tiles;
            const char *t = c % 2 ? "f16" : "bf16";
            const char *out = (c / 2) % 2 ? "f32" : t;
            snprintf(gen[i], sizeof gen[i], "gemm a=%s b=%s out=%s bias=%d %s", t, t, out,
                     (c / 4) % 2, tiles[i % n_tiles]);
            gen_ptr[i] = gen[i];
        }
        descs = gen_ptr;
    }

    memset(js, 0, sizeof *js);
    js->ran = 1;
    if (!mkdtemp(dir))
        die("mkdtemp %s: %s", dir, strerror(errno));
    /* NVRTC 13 keeps its own persistent cache under $HOME (~/.nv): a source compiled
     * before by any process of the user compiles again in ~25 ms instead of ~500 ms on
     * the H100 machine.  The children get an empty HOME so that a miss is a real one. */
    snprintf(home, sizeof home, "%s/home", dir);
    if (mkdir(home, 0700) != 0)
        die("mkdir %s: %s", home, strerror(errno));
    /* a shipped cache would turn the misses into hits; the children inherit this */
    if (getenv("QJIT_SHIPPED_CACHE")) {
        fprintf(stderr, "qjit-bench: ignoring QJIT_SHIPPED_CACHE in the jit section\n");
        unsetenv("QJIT_SHIPPED_CACHE");
    }
    printf("\n== JIT costs (fresh processes; fresh cache dir %s)\n", dir);

    run_child(env, "miss", dir, home, n, descs, miss);
    /* CPU time beside wall time: the lent machines' shared CPUs run the same compile at
     * speeds 1.5x apart from run to run, and time taken by other tenants shows as wall
     * time without CPU time */
    double cpu[MAX_JIT_DESCS];
    printf("  %-72s %10s %10s\n", "compile on a miss (descriptor)", "ms", "cpu ms");
    for (int i = 0; i < n; i++) {
        if (miss->got[i]) {
            printf("  %-72s %10.1f %10.1f\n", descs[i], miss->get_ms[i], miss->get_cpu_ms[i]);
            csv_row("jit", "miss", NULL, NULL, descs[i], "miss_get_ms", miss->get_ms[i],
                    "ms");
            csv_row("jit", "miss", NULL, NULL, descs[i], "miss_get_cpu_ms",
                    miss->get_cpu_ms[i], "ms");
            cpu[n_ok] = miss->get_cpu_ms[i];
            ms[n_ok] = miss->get_ms[i];
            ok_descs[n_ok++] = descs[i];
        } else {
            printf("  %-72s %10s  %s\n", descs[i], "failed",
                   miss->fail[i][0] ? miss->fail[i] : "(no result)");
        }
    }
    js->n_ok = n_ok;
    js->ctx_ms = miss->ctx_ms;
    js->first_touch_ms = miss->touch_ms;
    js->compiles = miss->compiles;
    js->disk_hits = miss->disk_hits;
    js->miss_max_ms = max_of(ms, n_ok);
    js->miss_med_ms = median(ms, n_ok);
    js->warm_get_ns = miss->warm_ns;
    js->parse_ns = miss->parse_ns;
    js->miss_cpu_med_ms = median(cpu, n_ok);
    printf("  misses: %d kernels, median %.1f ms (CPU %.1f ms), max %.1f ms; stats: %llu "
           "compiles, %llu disk hits, %.1f ms in NVRTC%s\n", n_ok, js->miss_med_ms,
           js->miss_cpu_med_ms, js->miss_max_ms,
           miss->compiles, miss->disk_hits, miss->compile_ms,
           n_ok && miss->compiles < (unsigned long long)n_ok
               ? "  <-- EXPECTED one compile per miss" : "");
    printf("  (that process: CUDA init %.1f ms, qjit context %.2f ms, first GPU touch %.1f ms)\n",
           miss->init_ms, miss->ctx_ms, miss->touch_ms);
    csv_row("jit", "miss", NULL, NULL, "", "ctx_create_ms", miss->ctx_ms, "ms");
    csv_row("jit", "miss", NULL, NULL, "", "first_gpu_touch_ms", miss->touch_ms, "ms");
    csv_row("jit", "miss", NULL, NULL, "", "miss_median_ms", js->miss_med_ms, "ms");
    csv_row("jit", "miss", NULL, NULL, "", "miss_cpu_median_ms", js->miss_cpu_med_ms, "ms");
    csv_row("jit", "miss", NULL, NULL, "", "miss_max_ms", js->miss_max_ms, "ms");
    csv_row("jit", "miss", NULL, NULL, "", "miss_compiles", (double)miss->compiles, "");
    csv_row("jit", "miss", NULL, NULL, "", "nvrtc_ms_total", miss->compile_ms, "ms");

    if (n_ok && miss->ok) {
        printf("  warm get: %.1f ns/call (median of %d batches of %ld); desc parse: %.1f "
               "ns/call\n", miss->warm_ns, env->o->get_batches, env->o->get_iters,
               miss->parse_ns);
        csv_row("jit", "warm", NULL, NULL, ok_descs[0], "warm_get_ns", miss->warm_ns, "ns");
        csv_row("jit", "warm", NULL, NULL, ok_descs[0], "desc_parse_ns", miss->parse_ns, "ns");

        run_child(env, "hit", dir, home, n_ok, ok_descs, hit);
        int nh = 0;
        for (int i = 0; i < n_ok; i++)
            if (hit->got[i]) {
                csv_row("jit", "cold_hit", NULL, NULL, ok_descs[i], "cold_hit_get_ms",
                        hit->get_ms[i], "ms");
                ms[nh++] = hit->get_ms[i];
            }
        if (hit->ok && nh == n_ok) {
            js->child_ok = 1;
            js->child_init_ms = hit->init_ms;
            js->child_ctx_ms = hit->ctx_ms;
            js->child_get_max_ms = max_of(ms, nh);
            js->child_get_med_ms = median(ms, nh);
            js->child_total_ms = hit->wall_ms;
            js->child_gets = hit->gets;
            js->child_disk_hits = hit->disk_hits;
            js->child_compiles = hit->compiles;
            printf("  cold process: CUDA init %.1f ms, qjit context %.2f ms, first get per kernel "
                   "median %.2f ms (max %.2f); stats: %llu gets, %llu disk hits, %llu "
                   "compiles%s\n", hit->init_ms, hit->ctx_ms, js->child_get_med_ms,
                   js->child_get_max_ms, hit->gets, hit->disk_hits, hit->compiles,
                   hit->compiles == 0 && hit->disk_hits == (unsigned long long)n_ok
                       ? "" : "  <-- EXPECTED 0 compiles and all disk hits");
            printf("  cold process wall, fork to exit (exec, loading cuBLAS, the above): %.0f ms\n",
                   hit->wall_ms);
            double miss_total = 0, hit_total = 0;
            for (int i = 0; i < n_ok; i++)
                hit_total += ms[i];
            for (int i = 0; i < n; i++)
                if (miss->got[i])
                    miss_total += miss->get_ms[i];
            printf("  %d kernels in all: compiling them %.0f ms; a cold process loading them "
                   "from the warm DB %.1f ms (+ %.0f ms CUDA init, %.2f ms qjit context)\n",
                   n_ok, miss_total, hit_total, hit->init_ms, hit->ctx_ms);
            csv_row("jit", "cold_hit", NULL, NULL, "", "all_miss_total_ms", miss_total, "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "all_cold_hit_total_ms", hit_total, "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_cuda_init_ms", hit->init_ms, "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_ctx_create_ms", hit->ctx_ms, "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_first_gpu_touch_ms", hit->touch_ms,
                    "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_hit_median_ms", js->child_get_med_ms,
                    "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_hit_max_ms", js->child_get_max_ms,
                    "ms");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_disk_hits", (double)hit->disk_hits,
                    "");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_compiles", (double)hit->compiles, "");
            csv_row("jit", "cold_hit", NULL, NULL, "", "cold_process_wall_ms", hit->wall_ms, "ms");
        }
    }
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(miss);
    free(hit);
}

/* ---------------------------------------------------------------- launch section */
static void run_launch(bench_env *env)
{
    const bench_opts *o = env->o;
    launch_summary *ls = &launchsum;
    const int64_t LM = o->launch_m, LN = o->launch_n, LK = o->launch_k;
    const char *text = o->desc_text ? o->desc_text : "gemm a=bf16 b=bf16 out=bf16";
    qjit_gemm_desc d;
    qjit_gemm *g;
    qjit_status s;

    memset(ls, 0, sizeof *ls);
    printf("\n== Launch overhead (host time per enqueue, %lldx%lldx%lld, %s)\n", (long long)LM,
           (long long)LN, (long long)LK, text);
    if ((s = qjit_gemm_desc_parse(text, &d)) != QJIT_OK ||
        (s = qjit_context_get_gemm(env->ctx, &d, NULL, &g)) != QJIT_OK) {
        printf("  skipped: %s: %s\n", qjit_status_string(s), qjit_last_error());
        return;
    }
    qjit_dtype in = d.a, out = d.out == QJIT_DTYPE_NONE ? d.a : d.out;
    /* A plain f16/bf16 descriptor gets a host spot check too; a quantized one (any pair,
     * scales, bias) is checked by the raw launch's bytes against qjit_gemm_launch's, on
     * operands of small codes and moderate scales (bytes 0x3c: f32 and bf16 0.0115, f16 1.06;
     * e8m0 127, that is 1), and its cuBLAS column is the bf16 GEMM of the same shape.  The
     * peer's output is the descriptor's where cuBLAS has that pair of types, else f32. */
    const bool plain = (in == QJIT_DTYPE_F16 || in == QJIT_DTYPE_BF16) && d.a == d.b && !d.sa &&
                       !d.sb && !d.bias;
    const qjit_dtype pin = plain ? in : QJIT_DTYPE_BF16;
    const qjit_dtype pout = (out == pin || out == QJIT_DTYPE_F32) ? out : QJIT_DTYPE_F32;
    void *extra[4] = {NULL, NULL, NULL, NULL}; /* scale_a, scale_b, zeros_b, bias */

    gemm_problem p;
    memset(&p, 0, sizeof p);
    p.s = (shape){LM, LN, LK};
    p.in = pin;
    p.out = out; /* what qjit writes (the spot check reads it so) */
    p.nsets = 1;
    p.a_bytes = (size_t)(LM * LK) * 2; /* room for any A type (at most 16 bits) */
    p.b_bytes = (size_t)(LN * LK) * 2;
    p.d_bytes = (size_t)(LM * LN) * (dtype_size(out) > dtype_size(pout) ? dtype_size(out) : dtype_size(pout));
    p.ha = xmalloc(p.a_bytes);
    p.hb = xmalloc(p.b_bytes);
    if (plain) {
        fill_host(p.ha, p.a_bytes / 2, in, o->seed + 7);
        fill_host(p.hb, p.b_bytes / 2, in, o->seed + 8);
    } else {
        /* 16-bit A as values in [-1, 1); 8- and 4-bit codes of small magnitude (bits 0x37 of
         * each byte: no e4m3 NaN, s8 within 0..55) */
        uint64_t st = o->seed + 7;
        if (in == QJIT_DTYPE_F16 || in == QJIT_DTYPE_BF16)
            fill_host(p.ha, p.a_bytes / 2, in, o->seed + 7);
        else
            for (size_t i = 0; i < p.a_bytes; i++)
                ((unsigned char *)p.ha)[i] = (unsigned char)(rng_next(&st) & 0x37u);
        for (size_t i = 0; i < p.b_bytes; i++)
            ((unsigned char *)p.hb)[i] = (unsigned char)(rng_next(&st) & 0x37u);
        /* scales, zeros and bias: bytes 0x3c, e8m0 127; room for the largest mode of each
         * side (row, block, group, mx: at most one 4-byte value an element of a row) */
        const int64_t rows = LM > LN ? LM : LN;
        const size_t n = (size_t)(rows * LK) * 4;
        for (int i = 0; i < 4; i++) {
            const bool mx = (i == 0 && d.sa == QJIT_SCALE_MX) || (i == 1 && d.sb == QJIT_SCALE_MX);
            CUDA_CHECK(cudaMalloc(&extra[i], n));
            CUDA_CHECK(cudaMemset(extra[i], mx ? 0x7f : 0x3c, n));
        }
    }
    CUDA_CHECK(cudaMalloc(&p.a[0], p.a_bytes));
    CUDA_CHECK(cudaMalloc(&p.b[0], p.b_bytes));
    CUDA_CHECK(cudaMalloc(&p.d[0], p.d_bytes));
    CUDA_CHECK(cudaMemcpy(p.a[0], p.ha, p.a_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(p.b[0], p.hb, p.b_bytes, cudaMemcpyHostToDevice));

    qjit_gemm_args args = {.a = p.a[0], .b = p.b[0], .d = p.d[0], .m = LM, .n = LN, .k = LK,
                           .lda = LK, .ldb = LK, .ldd = LN};
    {
        qjit_gemm_variant v;
        if (qjit_gemm_choose(g, LM, LN, LK, &v) == QJIT_OK)
            printf("  runs %s (%s)\n", v.text, v.tuned ? "tuned" : "heuristic");
    }
    if (!plain) {
        args.scale_a = d.sa ? extra[0] : NULL;
        args.scale_b = d.sb ? extra[1] : NULL;
        args.zeros_b = d.zeros ? extra[2] : NULL;
        args.bias = d.bias ? extra[3] : NULL;
    }
    qjit_launch_config cfg;
    if ((s = qjit_gemm_launch_config(g, &args, &cfg)) != QJIT_OK) {
        printf("  skipped: qjit_gemm_launch_config: %s: %s\n", qjit_status_string(s),
               qjit_last_error());
        goto done;
    }
    if (!cfg.function || cfg.params_size == 0 || cfg.params_size > sizeof cfg.params)
        die("qjit_gemm_launch_config gave function %p, params_size %zu", cfg.function,
            cfg.params_size);

    launch_kernel_fn launch_kernel = NULL;
    launch_kernel_ex_fn launch_kernel_ex = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&launch_kernel, 12000,
                                                cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !launch_kernel)
        die("cuLaunchKernel not found in the driver (query result %d)", (int)q);
    /* a variant in clusters (K split across a cluster) is launched raw as it must be: with
     * cuLaunchKernelEx and the cluster dimension */
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", (void **)&launch_kernel_ex,
                                                12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !launch_kernel_ex)
        die("cuLaunchKernelEx not found in the driver (query result %d)", (int)q);

    void *kparams[1] = {cfg.params};
    CUfunction fn = (CUfunction)cfg.function;
    CUstream cs = (CUstream)env->stream;
    CUlaunchAttribute cluster_attr;
    memset(&cluster_attr, 0, sizeof cluster_attr);
    cluster_attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster_attr.value.clusterDim.x = 1;
    cluster_attr.value.clusterDim.y = 1;
    cluster_attr.value.clusterDim.z = cfg.cluster_z;
    CUlaunchConfig lc = {.gridDimX = cfg.grid[0], .gridDimY = cfg.grid[1], .gridDimZ = cfg.grid[2],
                         .blockDimX = cfg.block[0], .blockDimY = cfg.block[1],
                         .blockDimZ = cfg.block[2], .sharedMemBytes = cfg.shared_bytes,
                         .hStream = cs, .attrs = &cluster_attr, .numAttrs = 1};
#define RAW_LAUNCH()                                                                       \
    (cfg.cluster_z > 1 ? launch_kernel_ex(&lc, fn, kparams, NULL)                          \
                       : launch_kernel(fn, cfg.grid[0], cfg.grid[1], cfg.grid[2],          \
                                       cfg.block[0], cfg.block[1], cfg.block[2],            \
                                       cfg.shared_bytes, cs, kparams, NULL))

    /* The raw launch must compute what qjit's does, or the comparison means nothing. */
    {
        void *h1 = xmalloc(p.d_bytes), *h2 = xmalloc(p.d_bytes);
        CUDA_CHECK(cudaMemsetAsync(p.d[0], 0xff, p.d_bytes, env->stream));
        CUresult cr = RAW_LAUNCH();
        if (cr != CUDA_SUCCESS)
            die("cuLaunchKernel of the qjit kernel failed: CUresult %d", (int)cr);
        CUDA_CHECK(cudaStreamSynchronize(env->stream));
        CUDA_CHECK(cudaMemcpy(h1, p.d[0], p.d_bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemsetAsync(p.d[0], 0xff, p.d_bytes, env->stream));
        if ((s = qjit_gemm_launch(g, &args, env->stream)) != QJIT_OK)
            die("qjit_gemm_launch: %s: %s", qjit_status_string(s), qjit_last_error());
        CUDA_CHECK(cudaStreamSynchronize(env->stream));
        CUDA_CHECK(cudaMemcpy(h2, p.d[0], p.d_bytes, cudaMemcpyDeviceToHost));
        ls->identical = memcmp(h1, h2, p.d_bytes) == 0;
        if (plain) {
            double e = spot_error(&p, h2, o->seed + 3);
            printf("  raw launch output %s qjit_gemm_launch's; spot error vs host %.2e%s\n",
                   ls->identical ? "==" : "!=", e, e <= ERR_LIMIT ? "" : "  <-- WRONG");
        } else {
            printf("  raw launch output %s qjit_gemm_launch's (a quantized pair: no host check)%s\n",
                   ls->identical ? "==" : "!=", ls->identical ? "" : "  <-- WRONG");
        }
        free(h1);
        free(h2);
    }

    int batches = o->launch_count / o->launch_batch;
    int nmeas = batches * o->launch_rounds;
    double *m[3], *diff = xmalloc(sizeof(double) * (size_t)nmeas);
    int nm = 0;
    for (int i = 0; i < 3; i++)
        m[i] = xmalloc(sizeof(double) * (size_t)nmeas);
    const float alpha = 1.0f, beta = 0.0f;

    /* warm-up of all three paths */
    for (int i = 0; i < o->launch_batch; i++) {
        if (qjit_gemm_launch(g, &args, env->stream) != QJIT_OK || RAW_LAUNCH() != CUDA_SUCCESS)
            die("warm-up launch failed: %s", qjit_last_error());
        CUBLAS_CHECK(cublasGemmEx(env->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)LN, (int)LM, (int)LK,
                                  &alpha, p.b[0], dtype_cuda(pin), (int)LK, p.a[0],
                                  dtype_cuda(pin), (int)LK, &beta, p.d[0], dtype_cuda(pout),
                                  (int)LN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    CUDA_CHECK(cudaStreamSynchronize(env->stream));

    /* The paths alternate batch by batch, in a rotating order, so that each batch of qjit
     * launches has a raw batch next to it under the same conditions: the paired
     * differences are much less noisy than the difference of two medians. */
    for (int r = 0; r < o->launch_rounds; r++) {
        for (int b = 0; b < batches; b++, nm++) {
            for (int step = 0; step < 3; step++) {
                int mode = (step + b + r) % 3;
                double t0 = now_ns();
                int bad = 0;
                if (mode == 0) {
                    for (int i = 0; i < o->launch_batch; i++)
                        bad |= qjit_gemm_launch(g, &args, env->stream) != QJIT_OK;
                } else if (mode == 1) {
                    for (int i = 0; i < o->launch_batch; i++)
                        bad |= RAW_LAUNCH() != CUDA_SUCCESS;
                } else {
                    /* the peer's host cost for the same GEMM */
                    for (int i = 0; i < o->launch_batch; i++)
                        bad |= cublasGemmEx(env->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)LN, (int)LM,
                                            (int)LK, &alpha, p.b[0], dtype_cuda(pin), (int)LK,
                                            p.a[0], dtype_cuda(pin), (int)LK, &beta, p.d[0],
                                            dtype_cuda(pout), (int)LN, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
                }
                double t1 = now_ns();
                if (bad)
                    die("a launch failed in the timed loop (path %d): %s", mode,
                        qjit_last_error());
                m[mode][nm] = (t1 - t0) / o->launch_batch;
                CUDA_CHECK(cudaStreamSynchronize(env->stream));
            }
            diff[nm] = m[0][nm] - m[1][nm];
        }
    }
#undef RAW_LAUNCH
    ls->ran = 1;
    ls->qjit_ns = median(m[0], nm);
    ls->raw_ns = median(m[1], nm);
    ls->cublas_ns = median(m[2], nm);
    ls->diff_ns = median(diff, nm);
    printf("  %-28s %10s\n", "path", "ns/launch");
    printf("  %-28s %10.0f\n", "qjit_gemm_launch", ls->qjit_ns);
    printf("  %-28s %10.0f\n", "cuLaunchKernel (same kernel)", ls->raw_ns);
    printf("  %-28s %10.0f\n", "qjit - raw (paired)", ls->diff_ns);
    printf("  %-28s %10.0f\n", "cublasGemmEx (peer)", ls->cublas_ns);
    printf("  (median of %d batches of %d enqueues per path, synchronized between batches; grid "
           "%ux%ux%u, block %ux%ux%u, %u B shared, %zu B params)\n",
           nm, o->launch_batch, cfg.grid[0], cfg.grid[1], cfg.grid[2], cfg.block[0],
           cfg.block[1], cfg.block[2], cfg.shared_bytes, cfg.params_size);
    shape sh = p.s;
    csv_row("launch", NULL, plain ? dtype_name(in) : "quant", &sh, text, "qjit_launch_ns", ls->qjit_ns, "ns");
    csv_row("launch", NULL, plain ? dtype_name(in) : "quant", &sh, text, "raw_culaunchkernel_ns", ls->raw_ns, "ns");
    csv_row("launch", NULL, plain ? dtype_name(in) : "quant", &sh, text, "qjit_minus_raw_ns", ls->diff_ns, "ns");
    csv_row("launch", NULL, plain ? dtype_name(in) : "quant", &sh, text, "cublas_launch_ns", ls->cublas_ns, "ns");
    csv_row("launch", NULL, plain ? dtype_name(in) : "quant", &sh, text, "raw_output_identical", ls->identical, "");
    for (int i = 0; i < 3; i++)
        free(m[i]);
    free(diff);
done:
    for (int i = 0; i < 4; i++)
        if (extra[i])
            CUDA_CHECK(cudaFree(extra[i]));
    problem_free(&p);
}

/* ---------------------------------------------------------------- summary */
static void print_summary(const bench_env *env)
{
    printf("\n== Summary (%s, sm_%d%d, %d SMs)\n", env->prop.name, env->prop.major,
           env->prop.minor, env->prop.multiProcessorCount);
    if (nresults) {
        printf("  GEMM (best qjit config per shape and dtype; q/c = cuBLAS time / qjit time)\n");
        print_gemm_header();
        for (int i = 0; i < nresults; i++) {
            const gemm_result *r = &results[i];
            /* one row per shape and dtype: the fastest working qjit config, else the
             * first (failed) row */
            int best = 1;
            for (int j = 0; j < nresults && best; j++) {
                const gemm_result *o = &results[j];
                if (j == i || o->dtype != r->dtype || o->s.m != r->s.m || o->s.n != r->s.n ||
                    o->s.k != r->s.k)
                    continue;
                if (r->q_ok)
                    best = !(o->q_ok && (o->q_us < r->q_us || (o->q_us == r->q_us && j < i)));
                else
                    best = !(o->q_ok || j < i);
            }
            if (best)
                print_gemm_row(r);
        }
    }
    if (jitsum.ran) {
        const jit_summary *j = &jitsum;
        printf("  JIT\n");
        if (j->n_ok == 0) {
            printf("    %-44s %12s\n", "compile on a miss", "all failed");
        } else {
            printf("    %-44s %12.1f ms  (median of %d; max %.1f; %llu compiles; CPU %.1f)\n",
                   "compile on a miss, per kernel", j->miss_med_ms, j->n_ok, j->miss_max_ms,
                   (unsigned long long)j->compiles, j->miss_cpu_med_ms);
            printf("    %-44s %12.1f ns\n", "warm get (in-process hit)", j->warm_get_ns);
            printf("    %-44s %12.1f ns\n", "descriptor parse", j->parse_ns);
        }
        if (j->child_ok) {
            printf("    %-44s %12.1f ms\n", "cold process: CUDA init", j->child_init_ms);
            printf("    %-44s %12.2f ms\n", "cold process: qjit context create", j->child_ctx_ms);
            printf("    %-44s %12.2f ms  (max %.2f; %llu disk hits, %llu compiles)\n",
                   "cold process: first get (disk hit)", j->child_get_med_ms, j->child_get_max_ms,
                   (unsigned long long)j->child_disk_hits,
                   (unsigned long long)j->child_compiles);
        } else {
            printf("    %-44s %12s\n", "cold process", j->n_ok ? "failed" : "not run");
        }
    }
    if (launchsum.ran) {
        const launch_summary *l = &launchsum;
        printf("  Launch (host ns per enqueue)\n");
        printf("    %-44s %12.0f ns\n", "qjit_gemm_launch", l->qjit_ns);
        printf("    %-44s %12.0f ns\n", "cuLaunchKernel, same kernel", l->raw_ns);
        printf("    %-44s %12.0f ns\n", "qjit overhead (paired difference)", l->diff_ns);
        printf("    %-44s %12.0f ns\n", "cublasGemmEx (peer)", l->cublas_ns);
    }
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_env env;

    /* A child of the jit section: [options] --child-jit miss|hit DIR DESC... */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--child-jit")) {
            if (i + 2 >= argc || (strcmp(argv[i + 1], "miss") && strcmp(argv[i + 1], "hit")))
                die("--child-jit needs miss|hit DIR DESC...");
            parse_args(i, argv, &o);
            return child_jit(&o, !strcmp(argv[i + 1], "miss"), argv[i + 2], argc - i - 3,
                             argv + i + 3);
        }
    }
    parse_args(argc, argv, &o);
    memset(&env, 0, sizeof env);
    env.o = &o;

    if (o.csv_path) {
        csv = fopen(o.csv_path, "w");
        if (!csv)
            die("--csv %s: %s", o.csv_path, strerror(errno));
        fputs("section,run,dtype,m,n,k,item,metric,value,unit\n", csv);
    }

    init_device(o.device, &env.prop);
    int rt = 0, drv = 0, blas_ver = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    CUDA_CHECK(cudaDriverGetVersion(&drv));
    CUDA_CHECK(cudaStreamCreateWithFlags(&env.stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&env.blas));
    CUBLAS_CHECK(cublasSetStream(env.blas, env.stream));
    CUBLAS_CHECK(cublasGetVersion(env.blas, &blas_ver));
    printf("qjit-bench: qjit %s; device %d: %s (sm_%d%d, %d SMs, %.0f GiB, L2 %d MiB); CUDA "
           "runtime %d, driver %d, cuBLAS %d\n",
           qjit_version_string(), o.device, env.prop.name, env.prop.major, env.prop.minor,
           env.prop.multiProcessorCount, (double)env.prop.totalGlobalMem / (1 << 30),
           env.prop.l2CacheSize >> 20, rt, drv, blas_ver);
    csv_row("device", NULL, NULL, NULL, env.prop.name, "sm",
            env.prop.major * 10 + env.prop.minor, "");
    csv_row("device", NULL, NULL, NULL, env.prop.name, "sms", env.prop.multiProcessorCount, "");
    csv_row("device", NULL, NULL, NULL, env.prop.name, "cuda_driver", drv, "");
    csv_row("device", NULL, NULL, NULL, env.prop.name, "cublas_version", blas_ver, "");

    if (o.do_gemm || o.do_launch)
        env.ctx = make_context(o.cache_dir);
    if (o.do_gemm)
        run_gemm(&env);
    if (o.do_jit)
        run_jit(&env);
    if (o.do_launch)
        run_launch(&env);
    print_summary(&env);

    qjit_context_destroy(env.ctx);
    CUBLAS_CHECK(cublasDestroy(env.blas));
    CUDA_CHECK(cudaStreamDestroy(env.stream));
    if (csv && fclose(csv) != 0)
        die("--csv %s: %s", o.csv_path, strerror(errno));
    return 0;
}
