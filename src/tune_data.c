/*
 * tune_data.c — a tuning problem's operands and the check of a candidate's output: random
 * values filled in chunks of a fixed size, each from its own generator state, on up to 16
 * threads (the values do not depend on the thread count), uploaded once and copied on the
 * device so that repeated launches read the weights from DRAM; and the normalized error of
 * an output against the heuristic's, summed over fixed chunks on those threads in chunk
 * order (the same result for any thread count).
 */
#define _GNU_SOURCE
#include "tune_data.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ operands */

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


void qjit_tune_operands_free(qjit_tune_operands *o)
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

qjit_status qjit_tune_operands_make(const qjit_cu_api *cu, const qjit_gemm_desc *d,
                                 const qjit_tune_problem *p, uint64_t rotate, qjit_tune_operands *o)
{
    memset(o, 0, sizeof *o);
    o->cu = cu;
    const int64_t m = p->m, n = p->n, k = p->k;
    qjit_dtype sat, sbt;
    int64_t nsa = qjit_desc_scale_count(d, true, m, n, k, &sat),
            nsb = qjit_desc_scale_count(d, false, m, n, k, &sbt);
    o->a_bytes = qjit_desc_bytes(d->a, m, k);
    o->b_bytes = qjit_desc_bytes(d->b, n, k);
    o->sa_bytes = qjit_desc_bytes(sat, 1, nsa);
    o->sb_bytes = qjit_desc_bytes(sbt, 1, nsb);
    o->d_bytes = qjit_desc_bytes(d->out, m, n);
    o->bias_bytes = qjit_desc_bytes(d->out, 1, n);
    /* the weights (B, its scales and zero points) in copies, read from DRAM as a model's
     * are; the activations (A and its scales) once, warm in L2 as a model's are when the
     * kernel before wrote them: with A in copies too, the tuner preferred prefill tiles
     * 6-9% slower than the grid's best where A stays in L2 (docs/NOTES.md) */
    uint64_t per = o->b_bytes + 2 * o->sb_bytes;
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
    qjit_status st = replicate(cu, o->a, 1, h, o->a_bytes);
    if (st == QJIT_OK) {
        fill(&seed, d->b, h, n * k, false, 0, 0);
        st = replicate(cu, o->b, o->copies, h, o->b_bytes);
    }
    if (st == QJIT_OK && nsa) {
        fill(&seed, sat, h, nsa, true, int_pair ? 0.5e-3f : 0.5f, int_pair ? 1.5e-3f : 1.5f);
        st = replicate(cu, o->sa, 1, h, o->sa_bytes);
    }
    if (st == QJIT_OK && nsb) {
        fill(&seed, sbt, h, nsb, true, small_b ? 0.5e-2f : 0.5f, small_b ? 1.5e-2f : 1.5f);
        st = replicate(cu, o->sb, o->copies, h, o->sb_bytes);
    }
    if (st == QJIT_OK && d->zeros) {
        /* integer zero points in [6, 9], near the middle of u4 as a quantizer's are (and as
         * bench_grid's are): on the H100, at M = 256 on 8192x8192, wgmma_wq ran 5% slower
         * with these than with zero points spread over [0, 15], mma_wq the same (docs/NOTES.md,
         * "The tuner and the grid disagree") */
        for (int64_t i = 0; i < nsb; i++) {
            float z = (float)(6 + next(&seed) % 4);
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
        qjit_tune_operands_free(o);
    return st;
}

qjit_gemm_args qjit_tune_args(const qjit_tune_operands *o, const qjit_gemm_desc *d,
                              const qjit_tune_problem *p, int copy)
{
    return (qjit_gemm_args){(const void *)o->a[0], (const void *)o->b[copy], (void *)o->out,
                            d->bias ? (const void *)o->bias : NULL,
                            o->sa[0] ? (const void *)o->sa[0] : NULL,
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
double qjit_tune_tolerance(const qjit_gemm_desc *d)
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

double qjit_tune_nerr(qjit_dtype t, const uint8_t *got, const uint8_t *ref, int64_t count)
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

int qjit_tune_final_pick(const double *sweep, const double *final, int n, double *recorded)
{
    int w = 0;
    double sweep_best = sweep[0];
    for (int j = 1; j < n; j++) {
        w = final[j] < final[w] ? j : w;
        sweep_best = sweep[j] < sweep_best ? sweep[j] : sweep_best;
    }
    const double scale = sweep_best / final[w];
    for (int j = 0; j < n; j++)
        recorded[j] = final[j] * scale;
    recorded[w] = sweep_best; /* exactly: no rounding puts another record below it */
    return w;
}
