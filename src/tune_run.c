/*
 * tune_run.c — qjit_gemm_tune: measure a descriptor's candidate configurations on the
 * current GPU and record them (tune.c) for the dispatch of later handles.
 *
 * Per problem: candidates (the named sweep plus the bucket's heuristic) compiled on CPU
 * threads first; then random operands, filled once and copied on the device into several
 * buffers (so that repeated launches read the weights from DRAM), the heuristic's output
 * as the reference, each candidate run once on a poisoned output and checked, then timed
 * as replays of a CUDA graph of launches over the copies (the way decode runs), median of
 * the replays.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CANDIDATES 72
#define MAX_COPIES 32
#define MIN_LAUNCHES 8 /* launches per graph, at least */
/* Timing's budget, so that prefill problems (a replay of 8 launches of milliseconds each)
 * do not take the tuning's time: a graph whose first warm-up replay took over
 * LONG_REPLAY_MS is replayed only as often as REPLAY_BUDGET_MS allows (at least
 * MIN_LONG_REPS times, with no further warm-up), and there a candidate whose first timed
 * replay is over PRUNE times the fastest so far stops (that replay is its time).  Shorter
 * graphs (decode) are cheap to time and noisier a replay: every candidate gets its median. */
#define LONG_REPLAY_MS 20.0
#define REPLAY_BUDGET_MS 200.0
#define MIN_LONG_REPS 3
#define PRUNE 1.25
/* The final round: the fastest of a sweep is the minimum of many noisy medians, biased low,
 * and a winner within a few percent of the runner-up is often the luckier one.  The passed
 * candidates within FINAL_WINDOW of the fastest (FINAL_MAX of them at most), and the
 * heuristic's kernel where it passed, are timed FINAL_ROUNDS more times, in turn, and each
 * one's time becomes the median of its FINAL_ROUNDS + 1 medians, recorded.  The winner is
 * the fastest of all passed candidates by their recorded times (the others keep their sweep
 * time), which is what dispatch reads back. */
#define FINAL_WINDOW 1.05
#define FINAL_MAX 3
#define FINAL_ROUNDS 2

void qjit_tune_options_init(qjit_tune_options *o)
{
    if (o)
        memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------ operands */
static int bits_of(qjit_dtype t) { return qjit_desc_dtype_bits(t); }

static size_t bytes_of(qjit_dtype t, int64_t rows, int64_t cols)
{
    return (size_t)((rows * cols * bits_of(t) + 7) / 8);
}

/* Elements of the scale tensor of side A (is_a) or B, and their type. */
static int64_t scale_count(const qjit_gemm_desc *d, bool is_a, int64_t m, int64_t n, int64_t k,
                           qjit_dtype *t)
{
    qjit_scale_mode mode = is_a ? d->sa : d->sb;
    int64_t rows = is_a ? m : n;
    *t = QJIT_DTYPE_F32;
    switch (mode) {
    case QJIT_SCALE_TENSOR: return 1;
    case QJIT_SCALE_ROW: case QJIT_SCALE_COL: return rows;
    case QJIT_SCALE_GROUP: *t = d->group_scale; return rows * (k / d->group);
    case QJIT_SCALE_BLOCK: return (is_a ? rows : (rows + 127) / 128) * ((k + 127) / 128);
    case QJIT_SCALE_MX: *t = QJIT_DTYPE_E8M0; return rows * ((k + 31) / 32);
    default: return 0;
    }
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float uni(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((next(s) >> 40) & 0xffffff) / 16777216.0f;
}

/* Operand values [lo, hi) of t from the generator state s (see fill). */
static void fill_range(uint64_t s, qjit_dtype t, uint8_t *p, int64_t lo, int64_t hi)
{
    /* random sign, mantissa and an exponent in a small range, written as bits (a few ns a
     * value; through floats it was about 22): magnitudes in [1/16, 1) for f16/bf16, [1/8, 2)
     * for e4m3, [1/4, 4) for e5m2, never NaN or zero */
    for (int64_t i = lo; i < hi; i++) {
        const uint64_t r = next(&s);
        switch (t) {
        case QJIT_DTYPE_F16:
            ((uint16_t *)p)[i] = (uint16_t)((r & 0x83ff) | ((11 + ((r >> 10) & 3)) << 10));
            break;
        case QJIT_DTYPE_BF16:
            ((uint16_t *)p)[i] = (uint16_t)((r & 0x807f) | ((123 + ((r >> 7) & 3)) << 7));
            break;
        case QJIT_DTYPE_F32: ((float *)p)[i] = uni(&s, -1, 1); break;
        case QJIT_DTYPE_E4M3: p[i] = (uint8_t)((r & 0x87) | ((4 + ((r >> 3) & 3)) << 3)); break;
        case QJIT_DTYPE_E5M2: p[i] = (uint8_t)((r & 0x83) | ((13 + ((r >> 2) & 3)) << 2)); break;
        case QJIT_DTYPE_S8: p[i] = (uint8_t)(r >> 56); break;
        default: /* 4-bit: two a byte (lo and hi even) */
            if (i % 2 == 0)
                p[i / 2] = (uint8_t)(r >> 56);
            break;
        }
    }
}

/* fn(arg, c, lo, hi) over the chunks [c·chunk, min((c+1)·chunk, count)) of count values, on
 * up to CHUNK_THREADS threads (this one among them), each chunk once.  What a chunk computes
 * must depend on c alone, so that the result does not depend on how many threads ran.  The
 * tuner's operand fill and output check: hundreds of millions of values a prefill problem. */
#define CHUNK_THREADS 16
typedef void chunk_fn(void *arg, int64_t c, int64_t lo, int64_t hi);
typedef struct chunk_job {
    chunk_fn *fn;
    void *arg;
    int64_t count, chunk, chunks, next;
    pthread_mutex_t mu;
} chunk_job;

static void *chunk_worker(void *p)
{
    chunk_job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int64_t c = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (c >= j->chunks)
            return NULL;
        const int64_t lo = c * j->chunk;
        j->fn(j->arg, c, lo, lo + j->chunk < j->count ? lo + j->chunk : j->count);
    }
}

static void chunked(int64_t count, int64_t chunk, chunk_fn *fn, void *arg)
{
    chunk_job j = {.fn = fn, .arg = arg, .count = count, .chunk = chunk,
                   .chunks = (count + chunk - 1) / chunk};
    pthread_mutex_init(&j.mu, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t want = cores > 1 ? cores : 1;
    want = want < CHUNK_THREADS ? want : CHUNK_THREADS;
    want = want < j.chunks ? want : j.chunks;
    pthread_t tid[CHUNK_THREADS];
    int started = 0;
    for (int64_t i = 1; i < want; i++)
        if (pthread_create(&tid[started], NULL, chunk_worker, &j) == 0)
            started++;
    chunk_worker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.mu);
}

/* Operands fill in chunks of 1 M values, each from its own generator state (the chunk's
 * index mixed into the caller's), so the values do not depend on the thread count (2.6 s
 * for 57344×8192 bf16 weights on one core). */
#define FILL_CHUNK ((int64_t)1 << 20)
typedef struct fill_job {
    uint64_t base;
    qjit_dtype t;
    uint8_t *p;
} fill_job;

static uint64_t chunk_state(uint64_t base, int64_t c)
{
    uint64_t z = base + 0x9e3779b97f4a7c15ull * (uint64_t)(c + 1); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z ? z : 1; /* xorshift's state is never 0 */
}

static void fill_chunk(void *arg, int64_t c, int64_t lo, int64_t hi)
{
    const fill_job *j = arg;
    fill_range(chunk_state(j->base, c), j->t, j->p, lo, hi);
}

/* count random elements of t (never all zero); scales in [lo, hi] when scale is set. */
static void fill(uint64_t *s, qjit_dtype t, uint8_t *p, int64_t count, bool scale, float lo,
                 float hi)
{
    if (scale) { /* scales: few, uniform in [lo, hi] */
        for (int64_t i = 0; i < count; i++) {
            float x = uni(s, lo, hi);
            switch (t) {
            case QJIT_DTYPE_F16: ((uint16_t *)p)[i] = qjit_f16_from_f32(x); break;
            case QJIT_DTYPE_BF16: ((uint16_t *)p)[i] = qjit_bf16_from_f32(x); break;
            case QJIT_DTYPE_E8M0: p[i] = (uint8_t)(125 + next(s) % 5); break; /* 2^-2 .. 2^2 */
            default: ((float *)p)[i] = x; break;
            }
        }
        return;
    }
    fill_job j = {.base = next(s), .t = t, .p = p};
    chunked(count, FILL_CHUNK, fill_chunk, &j);
}

/* One problem's operands in `copies` copies (A, B, scales), a bias, and two outputs. */
typedef struct operands {
    const qjit_cu_api *cu;
    int copies;
    size_t a_bytes, b_bytes, sa_bytes, sb_bytes, d_bytes, bias_bytes;
    CUdeviceptr a[MAX_COPIES], b[MAX_COPIES], sa[MAX_COPIES], sb[MAX_COPIES], zb[MAX_COPIES];
    CUdeviceptr bias, out;
} operands;

static void operands_free(operands *o)
{
    CUdeviceptr *all[] = {o->a, o->b, o->sa, o->sb, o->zb};
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < MAX_COPIES; c++)
            if (all[i][c])
                o->cu->MemFree(all[i][c]);
    if (o->bias)
        o->cu->MemFree(o->bias);
    if (o->out)
        o->cu->MemFree(o->out);
    memset(o, 0, sizeof *o);
}

static qjit_status upload(const qjit_cu_api *cu, CUdeviceptr *dst, const void *src, size_t n)
{
    CUresult r = cu->MemAlloc(dst, n ? n : 16);
    if (r == CUDA_SUCCESS && n && src) /* src NULL: an output, written by the kernels */
        r = cu->MemcpyHtoD(*dst, src, n);
    return r == CUDA_SUCCESS ? QJIT_OK : qjit_drv_fail(cu, r, "tuning operands");
}

/* copies[0..count) of n bytes, each holding host's bytes: one upload, then device copies
 * (the copies exist for their addresses, so that launches over them read from DRAM). */
static qjit_status replicate(const qjit_cu_api *cu, CUdeviceptr *copies, int count,
                             const void *host, size_t n)
{
    qjit_status st = upload(cu, &copies[0], host, n);
    for (int c = 1; c < count && st == QJIT_OK; c++) {
        CUresult r = cu->MemAlloc(&copies[c], n ? n : 16);
        if (r == CUDA_SUCCESS && n)
            r = cu->MemcpyDtoD(copies[c], copies[0], n);
        if (r != CUDA_SUCCESS)
            st = qjit_drv_fail(cu, r, "tuning operands");
    }
    return st;
}

static qjit_status operands_make(const qjit_cu_api *cu, const qjit_gemm_desc *d,
                                 const qjit_tune_problem *p, uint64_t rotate, operands *o)
{
    memset(o, 0, sizeof *o);
    o->cu = cu;
    const int64_t m = p->m, n = p->n, k = p->k;
    qjit_dtype sat, sbt;
    int64_t nsa = scale_count(d, true, m, n, k, &sat), nsb = scale_count(d, false, m, n, k, &sbt);
    o->a_bytes = bytes_of(d->a, m, k);
    o->b_bytes = bytes_of(d->b, n, k);
    o->sa_bytes = bytes_of(sat, 1, nsa);
    o->sb_bytes = bytes_of(sbt, 1, nsb);
    o->d_bytes = bytes_of(d->out, m, n);
    o->bias_bytes = bytes_of(d->out, 1, n);
    uint64_t per = o->a_bytes + o->b_bytes + o->sa_bytes + 2 * o->sb_bytes;
    uint64_t want = (rotate + per - 1) / per;
    o->copies = (int)(want < 1 ? 1 : want > MAX_COPIES ? MAX_COPIES : want);

    size_t biggest = o->a_bytes > o->b_bytes ? o->a_bytes : o->b_bytes;
    biggest = biggest > o->bias_bytes ? biggest : o->bias_bytes;
    biggest = biggest > o->sa_bytes ? biggest : o->sa_bytes;
    biggest = biggest > o->sb_bytes ? biggest : o->sb_bytes;
    uint8_t *h = malloc(biggest + 64);
    if (!h)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "tuning operands (%zu bytes)", biggest);
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(m * 31 + n * 17 + k);
    bool int_pair = d->a == QJIT_DTYPE_S8;
    bool small_b = int_pair || d->sb == QJIT_SCALE_GROUP || d->sb == QJIT_SCALE_COL;
    /* random contents once (never zeros), the same in every copy */
    fill(&seed, d->a, h, m * k, false, 0, 0);
    qjit_status st = replicate(cu, o->a, o->copies, h, o->a_bytes);
    if (st == QJIT_OK) {
        fill(&seed, d->b, h, n * k, false, 0, 0);
        st = replicate(cu, o->b, o->copies, h, o->b_bytes);
    }
    if (st == QJIT_OK && nsa) {
        fill(&seed, sat, h, nsa, true, int_pair ? 0.5e-3f : 0.5f, int_pair ? 1.5e-3f : 1.5f);
        st = replicate(cu, o->sa, o->copies, h, o->sa_bytes);
    }
    if (st == QJIT_OK && nsb) {
        fill(&seed, sbt, h, nsb, true, small_b ? 0.5e-2f : 0.5f, small_b ? 1.5e-2f : 1.5f);
        st = replicate(cu, o->sb, o->copies, h, o->sb_bytes);
    }
    if (st == QJIT_OK && d->zeros) { /* integer zero points in [0, 15] */
        for (int64_t i = 0; i < nsb; i++) {
            float z = (float)(next(&seed) % 16);
            if (sbt == QJIT_DTYPE_F16) ((uint16_t *)h)[i] = qjit_f16_from_f32(z);
            else if (sbt == QJIT_DTYPE_BF16) ((uint16_t *)h)[i] = qjit_bf16_from_f32(z);
            else ((float *)h)[i] = z;
        }
        st = replicate(cu, o->zb, o->copies, h, o->sb_bytes);
    }
    if (st == QJIT_OK) {
        fill(&seed, d->out, h, n, false, 0, 0);
        st = upload(cu, &o->bias, h, o->bias_bytes);
    }
    if (st == QJIT_OK)
        st = upload(cu, &o->out, NULL, o->d_bytes);
    free(h);
    if (st != QJIT_OK)
        operands_free(o);
    return st;
}

static qjit_gemm_args args_of(const operands *o, const qjit_gemm_desc *d,
                              const qjit_tune_problem *p, int copy)
{
    return (qjit_gemm_args){(const void *)o->a[copy], (const void *)o->b[copy], (void *)o->out,
                            d->bias ? (const void *)o->bias : NULL,
                            o->sa[copy] ? (const void *)o->sa[copy] : NULL,
                            o->sb[copy] ? (const void *)o->sb[copy] : NULL,
                            o->zb[copy] ? (const void *)o->zb[copy] : NULL,
                            p->m, p->n, p->k, p->k, p->k, p->n};
}

/* ------------------------------------------------------------ checking */
/* f16 → f32 for every code: the check reads each output value twice, hundreds of millions
 * of them for a prefill problem, where a library call a value took seconds a candidate
 * (docs/NOTES.md, "The tuner's check"). */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;
static void f16_table_make(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        f16_table[h] = qjit_f16_to_f32((uint16_t)h);
}

static inline double out_value(qjit_dtype t, const uint8_t *p, int64_t i)
{
    switch (t) {
    case QJIT_DTYPE_F16: return f16_table[((const uint16_t *)p)[i]];
    case QJIT_DTYPE_BF16: {
        const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    default: return ((const float *)p)[i];
    }
}

/* Twice the normalized-error bound of a pair (tests/gpu_check.c states the reasons): two
 * right kernels differ by at most the sum of their errors. */
static double tolerance(const qjit_gemm_desc *d)
{
    double out = d->out == QJIT_DTYPE_F32 ? 0 : d->out == QJIT_DTYPE_F16 ? 1e-3 : 8e-3;
    double work = 1e-5;
    bool f16ish = d->a == QJIT_DTYPE_F16 || d->a == QJIT_DTYPE_BF16;
    if (f16ish && d->b != d->a)
        work = d->a == QJIT_DTYPE_BF16 ? 1e-2 : 2e-3;
    if (d->a == QJIT_DTYPE_E4M3 || d->a == QJIT_DTYPE_E5M2 || d->a == QJIT_DTYPE_E2M1)
        work = 3e-4;
    return 2 * (out + work);
}

/* The normalized error of got against ref, summed in chunks of NERR_CHUNK values (chunked);
 * each chunk's sums are kept apart and added in chunk order.  < 0 when got has a NaN where
 * ref has none (an output left poisoned). */
#define NERR_CHUNK ((int64_t)1 << 21)
typedef struct nerr_job {
    qjit_dtype t;
    const uint8_t *got, *ref;
    double *num, *den; /* per chunk */
    bool *nan;         /* per chunk */
} nerr_job;

static void nerr_chunk(void *arg, int64_t c, int64_t lo, int64_t hi)
{
    nerr_job *j = arg;
    double num = 0, den = 0;
    bool nan = false;
    for (int64_t i = lo; i < hi; i++) {
        const double g = out_value(j->t, j->got, i), r = out_value(j->t, j->ref, i);
        if (isnan(r))
            continue;
        if (isnan(g)) {
            nan = true;
            break;
        }
        num += (g - r) * (g - r);
        den += r * r;
    }
    j->num[c] = num;
    j->den[c] = den;
    j->nan[c] = nan;
}

static double nerr(qjit_dtype t, const uint8_t *got, const uint8_t *ref, int64_t count)
{
    pthread_once(&f16_once, f16_table_make);
    int64_t chunk = NERR_CHUNK, chunks = (count + chunk - 1) / chunk;
    double num1, den1;
    bool nan1;
    nerr_job j = {.t = t, .got = got, .ref = ref, .num = &num1, .den = &den1, .nan = &nan1};
    if (chunks > 1) {
        j.num = malloc((size_t)chunks * sizeof *j.num);
        j.den = malloc((size_t)chunks * sizeof *j.den);
        j.nan = malloc((size_t)chunks * sizeof *j.nan);
        if (!j.num || !j.den || !j.nan) { /* no memory for the partial sums: one chunk */
            free(j.num);
            free(j.den);
            free(j.nan);
            j.num = &num1, j.den = &den1, j.nan = &nan1;
        }
    }
    if (j.num == &num1)
        chunk = count > 0 ? count : 1, chunks = 1;
    chunked(count, chunk, nerr_chunk, &j);
    double num = 0, den = 0;
    bool nan = false;
    for (int64_t c = 0; c < chunks && count > 0; c++) {
        num += j.num[c];
        den += j.den[c];
        nan |= j.nan[c];
    }
    if (j.num != &num1) {
        free(j.num);
        free(j.den);
        free(j.nan);
    }
    if (nan)
        return -1;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ------------------------------------------------------------ compiling */
/* The candidates compile on CPU threads while the calling thread measures: a problem's
 * candidates come first in the list, so the first problem starts as soon as its own are
 * built, and later ones compile under its measurements. */
typedef struct compile_job {
    qjit_context *ctx;
    const qjit_gemm_desc *cands;
    qjit_status *status;
    bool *done;
    size_t n, next, finished;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} compile_job;

static void *compile_worker(void *p)
{
    compile_job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n)
            return NULL;
        qjit_status st = qjit_gemm_precompile(j->ctx, &j->cands[i], j->cands[i].arch, NULL);
        pthread_mutex_lock(&j->mu);
        j->status[i] = st;
        j->done[i] = true;
        j->finished++;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
}

/* Start `threads` compile threads (0: the CPU count) over the job; returns how many
 * started (0: the caller compiles everything itself first). */
static int compile_start(compile_job *j, int threads, pthread_t *tid, int cap)
{
    if (threads < 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if ((size_t)threads > j->n)
        threads = (int)j->n;
    int started = 0;
    for (int i = 0; i < threads && i < cap; i++)
        if (pthread_create(&tid[started], NULL, compile_worker, j) == 0)
            started++;
    if (started == 0)
        compile_worker(j);
    return started;
}

/* Wait until candidate u is built; its status.  Reports compile progress meanwhile. */
static qjit_status compile_wait(compile_job *j, size_t u, const qjit_tune_options *o,
                                size_t *reported)
{
    pthread_mutex_lock(&j->mu);
    while (!j->done[u])
        pthread_cond_wait(&j->cv, &j->mu);
    qjit_status st = j->status[u];
    size_t finished = j->finished;
    pthread_mutex_unlock(&j->mu);
    if (o->progress && finished != *reported) {
        *reported = finished;
        o->progress(o->user, "compile", finished, j->n, "");
    }
    return st;
}

/* ------------------------------------------------------------ timing */
/* Median µs of one launch of g over the copies, as replays of a graph of launches; within
 * the budget above (cutoff_us: the time past which a candidate stops after one replay, 0 for
 * none). */
static qjit_status time_launches(const qjit_cu_api *cu, qjit_gemm *g, const operands *ops,
                                 const qjit_gemm_desc *d, const qjit_tune_problem *p,
                                 int warmup, int reps, double cutoff_us, double *us)
{
    CUstream s = NULL;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUevent e0 = NULL, e1 = NULL;
    double *t = calloc((size_t)reps, sizeof *t);
    qjit_status st = QJIT_OK;
    CUresult r = t ? cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = cu->EventCreate(&e0, CU_EVENT_DEFAULT);
    if (r == CUDA_SUCCESS)
        r = cu->EventCreate(&e1, CU_EVENT_DEFAULT);
    const int launches = ops->copies * ((MIN_LAUNCHES + ops->copies - 1) / ops->copies);
    if (r == CUDA_SUCCESS)
        r = cu->StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r == CUDA_SUCCESS) {
        for (int i = 0; i < launches && st == QJIT_OK; i++) {
            qjit_gemm_args a = args_of(ops, d, p, i % ops->copies);
            st = qjit_gemm_launch(g, &a, (struct CUstream_st *)s);
        }
        CUresult er = cu->StreamEndCapture(s, &graph);
        r = st == QJIT_OK ? er : CUDA_SUCCESS;
    }
    if (st == QJIT_OK && r == CUDA_SUCCESS)
        r = cu->GraphInstantiate(&exec, graph, 0);
    /* a replay between events: its time in ms */
    float ms = 0;
#define REPLAY()                                                                                \
    do {                                                                                       \
        r = cu->EventRecord(e0, s);                                                            \
        if (r == CUDA_SUCCESS)                                                                 \
            r = cu->GraphLaunch(exec, s);                                                      \
        if (r == CUDA_SUCCESS)                                                                 \
            r = cu->EventRecord(e1, s);                                                        \
        if (r == CUDA_SUCCESS)                                                                 \
            r = cu->EventSynchronize(e1);                                                      \
        if (r == CUDA_SUCCESS)                                                                 \
            r = cu->EventElapsedTime(&ms, e0, e1);                                             \
    } while (0)
    /* the first warm-up replay, timed, sets the budget */
    if (st == QJIT_OK && r == CUDA_SUCCESS)
        REPLAY();
    const bool long_graph = st == QJIT_OK && r == CUDA_SUCCESS && ms > LONG_REPLAY_MS;
    if (long_graph) {
        const int fit = (int)ceil(REPLAY_BUDGET_MS / ms), want = fit < MIN_LONG_REPS ? MIN_LONG_REPS : fit;
        if (want < reps) /* never more than t holds */
            reps = want;
        warmup = 1;
    }
    for (int i = 1; i < warmup && st == QJIT_OK && r == CUDA_SUCCESS; i++)
        r = cu->GraphLaunch(exec, s);
    int n = 0;
    for (; n < reps && st == QJIT_OK && r == CUDA_SUCCESS; n++) {
        REPLAY();
        t[n] = 1000.0 * ms / launches;
        if (n == 0 && long_graph && cutoff_us > 0 && t[0] > cutoff_us) {
            n = 1; /* clearly slower than the best so far: this replay is its time */
            break;
        }
    }
#undef REPLAY
    if (st == QJIT_OK && r != CUDA_SUCCESS)
        st = qjit_drv_fail(cu, r, "timing a candidate");
    if (st == QJIT_OK) {
        for (int i = 1; i < n; i++) /* insertion sort: n is small */
            for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
                double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        *us = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    }
    if (s)
        cu->StreamSynchronize(s);
    if (exec)
        cu->GraphExecDestroy(exec);
    if (graph)
        cu->GraphDestroy(graph);
    if (e0)
        cu->EventDestroy(e0);
    if (e1)
        cu->EventDestroy(e1);
    if (s)
        cu->StreamDestroy(s);
    free(t);
    return st;
}

/* Run g once on copy 0 into a poisoned output and read it back into host. */
static qjit_status run_once(const qjit_cu_api *cu, qjit_gemm *g, const operands *ops,
                            const qjit_gemm_desc *d, const qjit_tune_problem *p, uint8_t *host)
{
    CUresult r = cu->MemsetD8(ops->out, 0xff, ops->d_bytes); /* NaN in every output type */
    if (r != CUDA_SUCCESS)
        return qjit_drv_fail(cu, r, "poisoning the output");
    qjit_gemm_args a = args_of(ops, d, p, 0);
    qjit_status st = qjit_gemm_launch(g, &a, NULL);
    if (st != QJIT_OK)
        return st;
    if ((r = cu->StreamSynchronize(NULL)) != CUDA_SUCCESS ||
        (r = cu->MemcpyDtoH(host, ops->out, ops->d_bytes)) != CUDA_SUCCESS)
        return qjit_drv_fail(cu, r, "running a candidate");
    return QJIT_OK;
}

/* ------------------------------------------------------------ one problem */
typedef struct tuner {
    qjit_context *ctx;
    const qjit_cu_api *cu;
    const qjit_gemm_desc *d;
    const qjit_tune_options *o;
    char gpu[64];
    size_t done, total; /* measurements, for progress */
    compile_job *job;   /* the candidates being compiled */
    size_t compiled;    /* compiles reported to progress */
} tuner;

/* The final round (FINAL_WINDOW above): first[i] is candidate i's time in the sweep, 0
 * where it did not pass.  Updates res (best, best_us, heuristic_us) and the records. */
static qjit_status final_round(tuner *T, const qjit_tune_problem *p, const qjit_gemm_desc *cands,
                               const double *first, size_t ncands, const operands *ops,
                               qjit_tune_result *res)
{
    size_t pick[FINAL_MAX + 1];
    int npick = 0;
    /* the fastest FINAL_MAX within the window, fastest first */
    for (int k = 0; k < FINAL_MAX; k++) {
        size_t b = ncands;
        for (size_t i = 0; i < ncands; i++) {
            bool taken = false;
            for (int j = 0; j < npick; j++)
                taken |= pick[j] == i;
            if (!taken && first[i] > 0 && first[i] <= FINAL_WINDOW * res->best_us &&
                (b == ncands || first[i] < first[b]))
                b = i;
        }
        if (b == ncands)
            break;
        pick[npick++] = b;
    }
    if (npick < 2)
        return QJIT_OK;
    /* and the heuristic's kernel, so that the speed-up printed compares like with like */
    for (size_t i = 0; i < ncands; i++)
        if (first[i] > 0 && !memcmp(&cands[i], &res->heuristic, sizeof cands[i])) {
            bool taken = false;
            for (int j = 0; j < npick; j++)
                taken |= pick[j] == i;
            if (!taken)
                pick[npick++] = i;
            break;
        }
    const int warmup = T->o->warmup > 0 ? T->o->warmup : 3;
    const int reps = T->o->reps > 0 ? T->o->reps : 20;
    double t[FINAL_MAX + 1][FINAL_ROUNDS + 1];
    for (int j = 0; j < npick; j++)
        t[j][0] = first[pick[j]];
    qjit_status st = QJIT_OK;
    for (int r = 1; r <= FINAL_ROUNDS && st == QJIT_OK; r++)
        for (int j = 0; j < npick && st == QJIT_OK; j++) {
            qjit_gemm *g = NULL;
            st = qjit_context_get_gemm(T->ctx, &cands[pick[j]], NULL, &g);
            if (st == QJIT_OK)
                st = time_launches(T->cu, g, ops, T->d, p, warmup, reps, 0, &t[j][r]);
        }
    if (st != QJIT_OK)
        return qjit_err_prefix(st, "m=%lld n=%lld k=%lld: the final round", (long long)p->m,
                               (long long)p->n, (long long)p->k);
    /* the passed candidates not timed again keep their sweep times */
    res->best_us = 0;
    for (size_t i = 0; i < ncands; i++) {
        bool taken = false;
        for (int j = 0; j < npick; j++)
            taken |= pick[j] == i;
        if (!taken && first[i] > 0 && (res->best_us == 0 || first[i] < res->best_us)) {
            res->best_us = first[i];
            res->best = cands[i];
        }
    }
    for (int j = 0; j < npick && st == QJIT_OK; j++) {
        double *v = t[j]; /* the median of FINAL_ROUNDS + 1 times (sorted in place) */
        for (int a = 1; a <= FINAL_ROUNDS; a++)
            for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
                double x = v[b];
                v[b] = v[b - 1];
                v[b - 1] = x;
            }
        const int n = FINAL_ROUNDS + 1;
        const double us = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        const qjit_gemm_desc *c = &cands[pick[j]];
        if (res->best_us == 0 || us < res->best_us) {
            res->best_us = us;
            res->best = *c;
        }
        if (!memcmp(c, &res->heuristic, sizeof *c))
            res->heuristic_us = us;
        if (!T->o->dry_run) {
            qjit_tune_measurement m = {T->gpu, p->m, p->n, p->k, c, us, true};
            st = qjit_tune_record(T->ctx, T->d, &m);
        }
    }
    return st;
}

static qjit_status tune_problem(tuner *T, const qjit_tune_problem *p, const qjit_gemm_desc *cands,
                                const size_t *uidx, size_t ncands, qjit_tune_result *res)
{
    const qjit_gemm_desc *d = T->d;
    const qjit_cu_api *cu = T->cu;
    const int warmup = T->o->warmup > 0 ? T->o->warmup : 3;
    const int reps = T->o->reps > 0 ? T->o->reps : 20;
    operands ops;
    qjit_status st = operands_make(cu, &res->heuristic, p,
                                   T->o->rotate_bytes ? T->o->rotate_bytes : 256ull << 20, &ops);
    if (st != QJIT_OK)
        return st;
    uint8_t *ref = malloc(ops.d_bytes), *got = malloc(ops.d_bytes);
    qjit_gemm *hg = NULL;
    if (!ref || !got)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "tuning outputs (%zu bytes)", ops.d_bytes);
    /* the reference: the bucket's heuristic kernel (candidate 0) */
    if (st == QJIT_OK)
        compile_wait(T->job, uidx[0], T->o, &T->compiled);
    if (st == QJIT_OK)
        st = qjit_context_get_gemm(T->ctx, &res->heuristic, NULL, &hg);
    if (st == QJIT_OK)
        st = run_once(cu, hg, &ops, d, p, ref);
    if (st != QJIT_OK) {
        char text[256];
        qjit_desc_text(&res->heuristic, text, sizeof text);
        st = qjit_err_prefix(st, "m=%lld n=%lld k=%lld: the heuristic's kernel %s",
                             (long long)p->m, (long long)p->n, (long long)p->k, text);
    }
    const double tol = tolerance(d);
    /* the passed candidates' first times, for the final round */
    double *first = calloc(ncands ? ncands : 1, sizeof *first);
    if (!first && st == QJIT_OK)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "tuning times (%zu candidates)", ncands);
    for (size_t i = 0; i < ncands && st == QJIT_OK; i++) {
        char text[256];
        qjit_desc_text(&cands[i], text, sizeof text);
        if (T->o->progress)
            T->o->progress(T->o->user, "time", T->done, T->total, text);
        T->done++;
        qjit_gemm *g = NULL;
        double us = 0, e = 0;
        /* a candidate that did not compile is not tried again (a failure to store it
         * is not one: the get below compiles it) */
        const qjit_status built = compile_wait(T->job, uidx[i], T->o, &T->compiled);
        bool unbuildable = built == QJIT_ERROR_COMPILE || built == QJIT_ERROR_TEMPLATE ||
                           built == QJIT_ERROR_UNSUPPORTED;
        if (unbuildable || qjit_context_get_gemm(T->ctx, &cands[i], NULL, &g) != QJIT_OK ||
            run_once(cu, g, &ops, d, p, got) != QJIT_OK) {
            res->skipped++; /* not built, or sizes this kernel refuses */
            continue;
        }
        e = nerr(d->out, got, ref, p->m * p->n);
        bool ok = e >= 0 && e <= tol;
        /* a candidate that is wrong cannot win: it is timed for the record, and pruned as
         * any other once it is clearly slower */
        const double cutoff = res->best_us > 0 ? PRUNE * res->best_us : 0;
        if ((st = time_launches(cu, g, &ops, d, p, warmup, reps, cutoff, &us)) != QJIT_OK) {
            st = qjit_err_prefix(st, "m=%lld n=%lld k=%lld: %s", (long long)p->m,
                                 (long long)p->n, (long long)p->k, text);
            break;
        }
        if (ok) {
            first[i] = us;
            res->passed++;
            res->max_error = e > res->max_error ? e : res->max_error;
            if (res->best_us == 0 || us < res->best_us) {
                res->best_us = us;
                res->best = cands[i];
            }
        } else {
            res->failed++;
        }
        if (!memcmp(&cands[i], &res->heuristic, sizeof cands[i]))
            res->heuristic_us = us;
        if (!T->o->dry_run) {
            qjit_tune_measurement m = {T->gpu, p->m, p->n, p->k, &cands[i], us, ok};
            if ((st = qjit_tune_record(T->ctx, d, &m)) != QJIT_OK)
                break;
        }
    }
    if (st == QJIT_OK && res->passed >= 2)
        st = final_round(T, p, cands, first, ncands, &ops, res);
    free(first);
    free(ref);
    free(got);
    operands_free(&ops);
    return st;
}

/* ------------------------------------------------------------ the call */
static bool contains(const qjit_gemm_desc *list, size_t n, const qjit_gemm_desc *x)
{
    for (size_t i = 0; i < n; i++)
        if (!memcmp(&list[i], x, sizeof *x))
            return true;
    return false;
}

qjit_status qjit_gemm_tune(qjit_context *ctx, const qjit_gemm_desc *d,
                           const qjit_tune_problem *problems, size_t n,
                           const qjit_tune_options *opt, qjit_tune_result *results)
{
    if (!d || (n && (!problems || !results)))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_tune: NULL argument");
    qjit_tune_options defaults;
    qjit_tune_options_init(&defaults);
    const qjit_tune_options *o = opt ? opt : &defaults;
    qjit_status st = ctx ? QJIT_OK : qjit_default_context(&ctx);
    if (st == QJIT_OK)
        st = qjit_gemm_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    char problem[256];
    qjit_select_problem_text(d, problem, sizeof problem);
    if (qjit_select_fully_named(d))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_tune: %s names its whole configuration: there is "
                            "nothing to tune",
                            problem);
    for (size_t i = 0; i < n; i++)
        if (problems[i].m < 1 || problems[i].n < 1 || problems[i].k < 1)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "qjit_gemm_tune: problem %zu has m=%lld n=%lld k=%lld (each "
                                "must be positive)",
                                i, (long long)problems[i].m, (long long)problems[i].n,
                                (long long)problems[i].k);
    for (size_t i = 0; i < n; i++) { /* K as the launch will ask, before any GPU work */
        char why[128];
        if (!qjit_desc_k_fits(d, problems[i].k, why, sizeof why))
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_tune: problem %zu: %s",
                                i, why);
    }
    if (n == 0)
        return QJIT_OK; /* nothing to measure: no GPU needed */
    tuner T = {ctx, NULL, d, o, "", 0, 0, NULL, 0};
    CUcontext cuctx;
    CUdevice dev;
    int major, minor;
    if ((st = qjit_drv_current(&T.cu, &cuctx, &dev, &major, &minor)) != QJIT_OK ||
        (st = qjit_drv_device_name(T.cu, dev, T.gpu, sizeof T.gpu)) != QJIT_OK)
        return qjit_err_prefix(st, "qjit_gemm_tune");

    /* every problem's candidates: the bucket's heuristic first, then the sweep's (when none
     * is named: the small-m sweep up to M = 64, the default one above) */
    size_t per = MAX_CANDIDATES;
    qjit_gemm_desc *cands = calloc(n * per, sizeof *cands);
    size_t *count = calloc(n, sizeof *count);
    qjit_gemm_desc *uniq = calloc(n * per, sizeof *uniq);
    size_t *uidx = calloc(n * per, sizeof *uidx);
    qjit_status *ustatus = calloc(n * per, sizeof *ustatus);
    bool *udone = calloc(n * per, sizeof *udone);
    size_t nuniq = 0;
    if (!cands || !count || !uniq || !uidx || !ustatus || !udone)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_gemm_tune: candidate lists");
    for (size_t i = 0; i < n && st == QJIT_OK; i++) {
        qjit_tune_result *r = &results[i];
        memset(r, 0, sizeof *r);
        r->problem = problems[i];
        r->bucket = qjit_m_bucket(problems[i].m);
        qjit_gemm_desc *c = &cands[i * per];
        st = qjit_select_resolve(ctx, d, QJIT_ARCH_AUTO, qjit_m_bucket_max(r->bucket),
                                 &r->heuristic);
        if (st != QJIT_OK)
            break;
        c[count[i]++] = r->heuristic;
        size_t np = 0;
        qjit_gemm_desc pts[MAX_CANDIDATES];
        const char *sweep = o->sweep && *o->sweep ? o->sweep
                            : problems[i].m <= 64  ? "small-m"
                                                   : "default";
        st = qjit_gemm_sweep(ctx, d, r->heuristic.arch, sweep, pts, MAX_CANDIDATES - 1, &np);
        for (size_t j = 0; st == QJIT_OK && j < np && j < MAX_CANDIDATES - 1; j++)
            if (!contains(c, count[i], &pts[j]))
                c[count[i]++] = pts[j];
        for (size_t j = 0; st == QJIT_OK && j < count[i]; j++) {
            size_t u = 0;
            while (u < nuniq && memcmp(&uniq[u], &c[j], sizeof uniq[u]))
                u++;
            if (u == nuniq)
                uniq[nuniq++] = c[j];
            uidx[i * per + j] = u;
        }
        T.total += count[i];
        r->candidates = (int)count[i];
    }
    /* compile on CPU threads while this thread measures */
    compile_job job = {ctx, uniq, ustatus, udone, nuniq, 0, 0, PTHREAD_MUTEX_INITIALIZER,
                       PTHREAD_COND_INITIALIZER};
    pthread_t tid[64];
    int started = 0;
    if (st == QJIT_OK) {
        if (o->progress)
            o->progress(o->user, "compile", 0, nuniq, "");
        started = compile_start(&job, o->compile_threads, tid, 64);
        T.job = &job;
    }
    for (size_t i = 0; i < n && st == QJIT_OK; i++) {
        st = tune_problem(&T, &problems[i], &cands[i * per], &uidx[i * per], count[i],
                          &results[i]);
        if (st == QJIT_OK && o->progress) /* results[i] is final: a caller can show it now */
            o->progress(o->user, "problem", i + 1, n, "");
    }
    if (started) { /* after an error, the rest of the list is not wanted */
        pthread_mutex_lock(&job.mu);
        job.next = job.n;
        pthread_mutex_unlock(&job.mu);
        for (int t = 0; t < started; t++)
            pthread_join(tid[t], NULL);
    }
    if (st == QJIT_OK && o->progress)
        o->progress(o->user, "time", T.total, T.total, "");
    free(cands);
    free(count);
    free(uniq);
    free(uidx);
    free(ustatus);
    free(udone);
    return st;
}
