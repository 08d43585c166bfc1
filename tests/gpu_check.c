/*
 * gpu_check.c — the one driver behind every GPU check: random operands of any dtype pair
 * and scale mode (never all zeros), device buffers, a launch on a poisoned output, and
 * the comparison with tests/reference.c, bit for bit where the math is exact, else within
 * the normalized-error bound of bound_for(), whose reasons it states.
 *
 * Not part of the library: a GPU test does #include "gpu_check.c" (once per executable,
 * after reference.c and with cuda_runtime_api.h available).
 */
#ifndef QJIT_GPU_CHECK_C
#define QJIT_GPU_CHECK_C

#include "qjit.h"
#include "reference.c"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                            \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
                    cudaGetErrorString(e_));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uni(float lo, float hi)
{
    return lo + (hi - lo) * (float)((next_u64() >> 40) & 0xffffff) / 16777216.0f;
}

static int bits_of(qjit_dtype t)
{
    switch (t) {
    case QJIT_DTYPE_S4: case QJIT_DTYPE_U4: case QJIT_DTYPE_E2M1: return 4;
    case QJIT_DTYPE_S8: case QJIT_DTYPE_E4M3: case QJIT_DTYPE_E5M2: case QJIT_DTYPE_E8M0: return 8;
    case QJIT_DTYPE_F16: case QJIT_DTYPE_BF16: return 16;
    default: return 32;
    }
}
static size_t bytes_of(qjit_dtype t, int64_t rows, int64_t ld)
{
    return (size_t)((rows * ld * bits_of(t) + 7) / 8);
}

/* Random elements of type t, never all zeros. */
static void fill_elems(qjit_dtype t, void *p, size_t count)
{
    uint8_t *b = p;
    for (size_t i = 0; i < count; i++) {
        switch (t) {
        case QJIT_DTYPE_F16: ((uint16_t *)p)[i] = qjit_f16_from_f32(uni(-1, 1)); break;
        case QJIT_DTYPE_BF16: ((uint16_t *)p)[i] = qjit_bf16_from_f32(uni(-1, 1)); break;
        case QJIT_DTYPE_F32: ((float *)p)[i] = uni(-1, 1); break;
        case QJIT_DTYPE_S8: b[i] = (uint8_t)(next_u64() >> 56); break;
        case QJIT_DTYPE_E4M3: b[i] = qjit_e4m3_from_f32(uni(-2, 2)); break;
        case QJIT_DTYPE_E5M2: b[i] = qjit_e5m2_from_f32(uni(-2, 2)); break;
        case QJIT_DTYPE_S4: case QJIT_DTYPE_U4: case QJIT_DTYPE_E2M1:
            if (i % 2 == 0)
                b[i / 2] = (uint8_t)(next_u64() >> 56);
            break;
        default: break;
        }
    }
}

/* Scales of a mode, positive, sized to keep outputs near 1.  e8m0 codes alternate between
 * fills: 124..129 (2^-3..2^2) and 120..128 (2^-7..2). */
static void fill_scales(qjit_dtype t, void *p, size_t count, float lo, float hi)
{
    static unsigned fills;
    const bool low = t == QJIT_DTYPE_E8M0 && (fills++ & 1);
    for (size_t i = 0; i < count; i++) {
        if (t == QJIT_DTYPE_E8M0)
            ((uint8_t *)p)[i] = (uint8_t)(low ? 120 + next_u64() % 9 : 124 + next_u64() % 6);
        else if (t == QJIT_DTYPE_F16)
            ((uint16_t *)p)[i] = qjit_f16_from_f32(uni(lo, hi));
        else if (t == QJIT_DTYPE_BF16)
            ((uint16_t *)p)[i] = qjit_bf16_from_f32(uni(lo, hi));
        else
            ((float *)p)[i] = uni(lo, hi);
    }
}

typedef struct buf {
    void *h, *d;
    size_t n;
} buf;

static void buf_make(buf *b, size_t n)
{
    b->n = n ? n : 16;
    b->h = calloc(1, b->n);
    CK(cudaMalloc(&b->d, b->n));
}
static void buf_up(buf *b) { CK(cudaMemcpy(b->d, b->h, b->n, cudaMemcpyHostToDevice)); }
static void buf_free(buf *b)
{
    free(b->h);
    cudaFree(b->d);
    memset(b, 0, sizeof *b);
}

/* Scale tensor shape of a mode on side A (is_a) or B, and its element type. */
static size_t scale_count(const qjit_gemm_desc *d, int is_a, int64_t m, int64_t n, int64_t k,
                          qjit_dtype *t)
{
    qjit_scale_mode mode = is_a ? d->sa : d->sb;
    int64_t rows = is_a ? m : n;
    *t = QJIT_DTYPE_F32;
    switch (mode) {
    case QJIT_SCALE_TENSOR: return 1;
    case QJIT_SCALE_ROW: case QJIT_SCALE_COL: return (size_t)rows;
    case QJIT_SCALE_GROUP: *t = d->group_scale; return (size_t)(rows * (k / d->group));
    case QJIT_SCALE_BLOCK:
        return (size_t)((is_a ? rows : (rows + 127) / 128) * ((k + 127) / 128));
    case QJIT_SCALE_MX: *t = QJIT_DTYPE_E8M0; return (size_t)(rows * ((k + 31) / 32));
    default: return 0;
    }
}

static bool bit_exact_pair(const qjit_gemm_desc *d)
{
    return d->a == QJIT_DTYPE_S8 && (d->b == QJIT_DTYPE_S8 || d->b == QJIT_DTYPE_S4) &&
           (d->sa == QJIT_SCALE_NONE || d->sa == QJIT_SCALE_TENSOR || d->sa == QJIT_SCALE_ROW) &&
           (d->sb == QJIT_SCALE_NONE || d->sb == QJIT_SCALE_TENSOR || d->sb == QJIT_SCALE_COL);
}

/* f16/bf16 activations times weights dequantized to f16/bf16 ((q − z)·s rounds there). */
static bool is_f16bf16_dequant(const qjit_gemm_desc *d)
{
    return (d->a == QJIT_DTYPE_F16 || d->a == QJIT_DTYPE_BF16) && d->b != d->a;
}

/* The normalized-error bound of a non-exact pair: the output rounding plus the
 * precision the dequantized operands are multiplied in. */
static double bound_for(const qjit_gemm_desc *d)
{
    double out = d->out == QJIT_DTYPE_F32 ? 0 : d->out == QJIT_DTYPE_F16 ? 1e-3 : 8e-3;
    double work = 1e-5; /* exact products, f32 accumulation */
    if (is_f16bf16_dequant(d))
        work = d->a == QJIT_DTYPE_BF16 ? 1e-2 : 2e-3;
    /* Hopper's fp8 wgmma adds its products into an accumulator of fewer bits than f32
     * (about 14, as DeepSeek-V3 reports); wgmma_f8 promotes every 128 of K into f32, so
     * the error is that of one K block's sum: up to 1.03e-4 measured on the H100. */
    if (d->kernel == QJIT_KERNEL_WGMMA_F8 ||
        (d->kernel == QJIT_KERNEL_WGMMA_TMA && d->a != QJIT_DTYPE_S8)) /* the same promotion */
        work = 3e-4;
    /* wgmma_mx promotes every 32 of K: at most wgmma_f8's error of one K block (e2m1 is
     * expanded to e4m3 exactly, so MXFP4 has the same bound) */
    if (d->kernel == QJIT_KERNEL_WGMMA_MX)
        work = 3e-4;
    return out + work;
}

/* Where a failing output is wrong, to find a layout or indexing bug from one log: the
 * first bad outputs (row, column, got, want), the rows and columns they span, and how they
 * fall modulo 16 along each side (a fragment or swizzle mistake shows as a pattern).  An
 * output is bad when it differs (exact pairs) or is off by more than 4·bound·rms(ref). */
static void diagnose(const qjit_gemm_desc *d, const char *text, const double *got,
                     const double *ref, int64_t m, int64_t n, double bound)
{
    double rms = 0;
    for (int64_t i = 0; i < m * n; i++)
        rms += ref[i] * ref[i];
    rms = sqrt(rms / (double)(m * n > 0 ? m * n : 1));
    const bool exact = bit_exact_pair(d);
    long bad = 0, rows16[16] = {0}, cols16[16] = {0};
    int64_t r0 = m, r1 = -1, c0 = n, c1 = -1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const double g = got[i * n + j], w = ref[i * n + j];
            const bool wrong = exact ? !(g == w || (isnan(g) && isnan(w)))
                                     : !(fabs(g - w) <= 4 * bound * rms);
            if (!wrong)
                continue;
            if (bad < 4)
                fprintf(stderr, "    bad D[%lld][%lld] = %.6g, want %.6g\n", (long long)i,
                        (long long)j, g, w);
            bad++;
            rows16[i % 16]++;
            cols16[j % 16]++;
            r0 = i < r0 ? i : r0;
            r1 = i > r1 ? i : r1;
            c0 = j < c0 ? j : c0;
            c1 = j > c1 ? j : c1;
        }
    if (!bad)
        return;
    fprintf(stderr, "    %s m=%lld n=%lld: %ld of %lld outputs bad, rows %lld..%lld, columns "
            "%lld..%lld; by row %% 16:", text, (long long)m, (long long)n, bad,
            (long long)(m * n), (long long)r0, (long long)r1, (long long)c0, (long long)c1);
    for (int i = 0; i < 16; i++)
        fprintf(stderr, " %ld", rows16[i]);
    fprintf(stderr, "; by column %% 16:");
    for (int i = 0; i < 16; i++)
        fprintf(stderr, " %ld", cols16[i]);
    fprintf(stderr, "\n");
}

/* A GEMM's sizes; leading dimensions 0 take padded defaults (K plus one or two
 * ld_multiples, N + 3).  twin (may be NULL): another handle of the same pair, run on the
 * same operands into its own poisoned output, which must equal g's byte for byte (a kernel
 * that claims the same sums in the same order as another). */
typedef struct problem {
    int64_t m, n, k, lda, ldb, ldd;
    qjit_gemm *twin;
    int sa_shift; /* scale_a passed this many bytes past its allocation's start (MX codes: any) */
} problem;

/* Runs g (descriptor d, facts info) once on fresh random data of problem p with D poisoned,
 * and checks it against the reference: the normalized error goes to *err and, for the
 * bit-exact integer pairs, the count of outputs that differ to *mismatch.  False on a hard
 * failure: the launch refused, an output left poisoned, a write past N. */
static bool run_problem(qjit_gemm *g, const qjit_gemm_desc *d, const qjit_gemm_info *info,
                        problem p, double *err, long *mismatch)
{
    int64_t pad = info->ld_multiple > 1 ? info->ld_multiple : 2;
    const int64_t m = p.m, n = p.n, k = p.k;
    int64_t lda = p.lda ? p.lda : k + pad, ldb = p.ldb ? p.ldb : k + 2 * pad;
    int64_t ldd = p.ldd ? p.ldd : n + 3;
    buf A, B, D, bias, sa, sb, zb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    memset(&zb, 0, sizeof zb);
    buf_make(&A, bytes_of(d->a, m, lda));
    buf_make(&B, bytes_of(d->b, n, ldb));
    buf_make(&D, bytes_of(d->out, m, ldd));
    buf_make(&bias, bytes_of(d->out, 1, n));
    fill_elems(d->a, A.h, A.n * 8 / bits_of(d->a));
    fill_elems(d->b, B.h, B.n * 8 / bits_of(d->b));
    fill_elems(d->out, bias.h, (size_t)n);
    bool int_pair = d->a == QJIT_DTYPE_S8;
    qjit_dtype st;
    size_t na = scale_count(d, 1, m, n, k, &st);
    const size_t sa_shift = (size_t)p.sa_shift;
    if (na) {
        buf_make(&sa, na * (size_t)(bits_of(st) / 8) + sa_shift);
        fill_scales(st, (char *)sa.h + sa_shift, na, int_pair ? 0.5e-3f : 0.5f, int_pair ? 1.5e-3f : 1.5f);
    }
    size_t nb = scale_count(d, 0, m, n, k, &st);
    if (nb) {
        buf_make(&sb, nb * (size_t)(bits_of(st) / 8));
        bool small = int_pair || d->sb == QJIT_SCALE_GROUP || d->sb == QJIT_SCALE_COL;
        fill_scales(st, sb.h, nb, small ? 0.5e-2f : 0.5f, small ? 1.5e-2f : 1.5f);
        if (d->zeros) {
            buf_make(&zb, sb.n);
            for (size_t i = 0; i < nb; i++) {
                float z = (float)(next_u64() % 16);
                if (st == QJIT_DTYPE_F16) ((uint16_t *)zb.h)[i] = qjit_f16_from_f32(z);
                else if (st == QJIT_DTYPE_BF16) ((uint16_t *)zb.h)[i] = qjit_bf16_from_f32(z);
                else ((float *)zb.h)[i] = z;
            }
        }
    }
    buf *ups[] = {&A, &B, &bias, &sa, &sb, &zb};
    for (int i = 0; i < 6; i++)
        if (ups[i]->d)
            buf_up(ups[i]);
    CK(cudaMemset(D.d, 0xff, D.n)); /* poison: NaN in every output type */
    void *sa_h = sa.h ? (char *)sa.h + sa_shift : NULL, *sa_d = sa.d ? (char *)sa.d + sa_shift : NULL;
    qjit_gemm_args hostargs = {A.h, B.h, NULL, d->bias ? bias.h : NULL, sa_h, sb.h, zb.h,
                               m, n, k, lda, ldb, ldd};
    qjit_gemm_args devargs = {A.d, B.d, D.d, d->bias ? bias.d : NULL, sa_d, sb.d, zb.d,
                              m, n, k, lda, ldb, ldd};
    bool ok = true;
    qjit_status s = qjit_gemm_launch(g, &devargs, NULL);
    if (s != QJIT_OK) {
        fprintf(stderr, "  launch %s m=%lld n=%lld k=%lld: %s\n", info->text, (long long)m,
                (long long)n, (long long)k, qjit_last_error());
        ok = false;
        goto out;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(D.h, D.d, D.n, cudaMemcpyDeviceToHost));
    if (p.twin) {
        buf T;
        buf_make(&T, D.n);
        CK(cudaMemset(T.d, 0xff, T.n));
        devargs.d = T.d;
        if ((s = qjit_gemm_launch(p.twin, &devargs, NULL)) != QJIT_OK) {
            fprintf(stderr, "  launch of the twin of %s: %s\n", info->text, qjit_last_error());
            ok = false;
        } else {
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(T.h, T.d, T.n, cudaMemcpyDeviceToHost));
            long differ = 0;
            const size_t eb = (size_t)bits_of(d->out) / 8;
            for (size_t i = 0; i < D.n / eb; i++)
                differ += memcmp((char *)D.h + i * eb, (char *)T.h + i * eb, eb) != 0;
            if (differ) {
                fprintf(stderr, "  %s m=%lld n=%lld k=%lld: %ld outputs differ from its twin's\n",
                        info->text, (long long)m, (long long)n, (long long)k, differ);
                ok = false;
            }
        }
        buf_free(&T);
    }
    double *ref = malloc((size_t)(m * n) * sizeof(double));
    double *got = malloc((size_t)(m * n) * sizeof(double));
    long poisoned = 0, stray = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldd; j++) {
            double v = ref_elem(d->out, D.h, ldd, i, j);
            if (j >= n)
                stray += !isnan(v);
            else
                got[i * n + j] = v;
        }
    int rc = bit_exact_pair(d) ? ref_gemm_int_f32(d, &hostargs, REF_EPI_MUL_ADD, ref)
                               : ref_gemm(d, &hostargs, ref);
    if (rc != 0) {
        fprintf(stderr, "  reference refused %s: %s\n", info->text, ref_error());
        ok = false;
    } else {
        *mismatch = 0;
        for (int64_t i = 0; i < m * n; i++) {
            if (isnan(got[i]) && !isnan(ref[i]))
                poisoned++;
            if (bit_exact_pair(d) && !(got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i]))))
                (*mismatch)++;
        }
        *err = ref_nerr(got, ref, (size_t)(m * n));
        if (*mismatch || !(*err <= bound_for(d)) || poisoned)
            diagnose(d, info->text, got, ref, m, n, bound_for(d));
        if (poisoned || stray) {
            fprintf(stderr, "  %s m=%lld n=%lld k=%lld: %ld outputs unwritten, %ld stray\n",
                    info->text, (long long)m, (long long)n, (long long)k, poisoned, stray);
            ok = false;
        }
    }
    free(ref);
    free(got);
out:
    buf_free(&A);
    buf_free(&B);
    buf_free(&D);
    buf_free(&bias);
    if (sa.h) buf_free(&sa);
    if (sb.h) buf_free(&sb);
    if (zb.h) buf_free(&zb);
    return ok;
}

/* run_problem at padded leading dimensions. */
static bool run_one(qjit_gemm *g, const qjit_gemm_desc *d, const qjit_gemm_info *info,
                    int64_t m, int64_t n, int64_t k, double *err, long *mismatch)
{
    return run_problem(g, d, info, (problem){m, n, k, 0, 0, 0}, err, mismatch);
}

#endif
