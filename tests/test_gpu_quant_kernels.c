/*
 * test_gpu_quant_kernels.c — the activation quantization kernels against ref_quant
 * (tests/reference.c), bit for bit: every (in, out, scale, rule) at M ∈ {1, 3, 16, 17,
 * 64, 333} with K off the 128 block where the mode allows and padded row strides, on
 * random data holding exact zeros, a zero row, a row with an infinity and one with a
 * NaN, with clip ratios; batches of matrices in one launch, and the column-wise MX layout
 * of MoE expert weights against the reference of their transposes; outputs poisoned and checked fully written and nothing past K;
 * every finite bf16 value under every e8m0 code (MX, row- and column-wise); graph replays
 * with new inputs bit-identical to eager launches at several M; bad
 * arguments refused with nothing written; a W8A8 linear layer (qjit_linear_launch) equal
 * to its two launches and right against the GEMM reference.  Skips with no GPU.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the device helpers */

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

static const char *const combos[] = {
    "out=s8 scale=row",    "out=s4 scale=row",    "out=e4m3 scale=row",
    "out=s8 scale=tensor", "out=s4 scale=tensor", "out=e4m3 scale=tensor",
    "out=e4m3 scale=block", "out=e4m3 scale=mx rule=floor", "out=e4m3 scale=mx rule=rceil",
    "out=e2m1 scale=mx rule=floor", "out=e2m1 scale=mx rule=rceil",
};
#define NCOMBOS (int)(sizeof combos / sizeof combos[0])
static const char *const ins[] = {"f16", "bf16", "f32"};

/* x as its input type, and the f32 values those codes hold (what the kernel reads). */
static void make_x(qjit_dtype in, int64_t m, int64_t k, int64_t ldx, int special, void *host,
                   float *vals)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < ldx; i++) {
            float v = i < k ? uni(-4, 4) * (float)(1 + r % 3) : 1e30f; /* padding: huge */
            if (i < k && next_u64() % 17 == 0)
                v = 0.0f;
            if (special && m > 3 && r == 1 && i < k)
                v = 0.0f; /* a zero row */
            if (special && m > 3 && r == 2 && i == k / 2)
                v = INFINITY;
            if (special && m > 3 && r == 3 && i == k - 1)
                v = NAN;
            size_t at = (size_t)(r * ldx + i);
            if (in == QJIT_DTYPE_F16) {
                ((uint16_t *)host)[at] = qjit_f16_from_f32(v);
                v = qjit_f16_to_f32(((uint16_t *)host)[at]);
            } else if (in == QJIT_DTYPE_BF16) {
                ((uint16_t *)host)[at] = qjit_bf16_from_f32(v);
                v = qjit_bf16_to_f32(((uint16_t *)host)[at]);
            } else {
                ((float *)host)[at] = v;
            }
            vals[at] = v;
        }
}

static size_t scale_elems(const qjit_quant_desc *d, int64_t m, int64_t k)
{
    switch (d->scale) {
    case QJIT_SCALE_TENSOR: return 1;
    case QJIT_SCALE_BLOCK: return (size_t)(m * ((k + 127) / 128));
    case QJIT_SCALE_MX: return (size_t)(m * (k / 32));
    default: return (size_t)m;
    }
}

/* The code of q value (r, i) as ref_quant states it. */
static int32_t code_at(const qjit_quant_desc *d, const uint8_t *q, int64_t ldq, int64_t r,
                       int64_t i)
{
    if (bits_of(d->out) == 4) {
        uint8_t byte = q[r * (ldq / 2) + i / 2];
        uint32_t nib = i % 2 ? byte >> 4 : byte & 15u;
        return d->out == QJIT_DTYPE_S4 ? (int32_t)(nib ^ 8u) - 8 : (int32_t)nib;
    }
    return d->out == QJIT_DTYPE_S8 ? (int32_t)(int8_t)q[r * ldq + i] : (int32_t)q[r * ldq + i];
}

/* One run of d at m x k with clip: kernel vs ref_quant.  false on any difference. */
static bool check_one(qjit_quant *qh, const qjit_quant_desc *d, int64_t m, int64_t k, float clip,
                      int special, int64_t q_pad)
{
    const int in_bytes = bits_of(d->in) / 8;
    const bool packed = bits_of(d->out) == 4;
    const int64_t ldx = k + 8, ldq = k + q_pad; /* q_pad 8: the 16-byte path where k allows */
    const size_t qbytes = (size_t)(packed ? m * ldq / 2 : m * ldq);
    const size_t ns = scale_elems(d, m, k), sbytes = ns * (d->scale == QJIT_SCALE_MX ? 1 : 4);
    buf X, Q, S, W;
    buf_make(&X, (size_t)(m * ldx) * (size_t)in_bytes);
    buf_make(&Q, qbytes);
    buf_make(&S, sbytes);
    buf_make(&W, QJIT_QUANT_WORKSPACE_BYTES);
    float *vals = malloc((size_t)(m * ldx) * sizeof *vals);
    int32_t *rq = malloc((size_t)(m * k) * sizeof *rq);
    float *rs = malloc(ns * sizeof *rs);
    make_x(d->in, m, k, ldx, special, X.h, vals);
    buf_up(&X);
    CK(cudaMemset(Q.d, 0xa5, qbytes)); /* poison */
    CK(cudaMemset(S.d, 0xa5, sbytes));
    qjit_quant_args a = {X.d, Q.d, S.d, W.d, m, k, ldx, ldq, clip};
    bool ok = true;
    qjit_status st = qjit_quant_launch(qh, &a, NULL);
    if (st != QJIT_OK) {
        fprintf(stderr, "  launch m=%lld k=%lld: %s\n", (long long)m, (long long)k, qjit_last_error());
        ok = false;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(Q.h, Q.d, qbytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(S.h, S.d, sbytes, cudaMemcpyDeviceToHost));
    if (ok && ref_quant(d, vals, m, k, ldx, clip, rq, rs) != 0) {
        fprintf(stderr, "  reference: %s\n", ref_error());
        ok = false;
    }
    long bad_q = 0, bad_s = 0, stray = 0;
    for (size_t i = 0; ok && i < ns; i++) {
        float got = d->scale == QJIT_SCALE_MX ? (float)((uint8_t *)S.h)[i] : ((float *)S.h)[i];
        bool same = got == rs[i] || (isnan(got) && isnan(rs[i]));
        if (!same && bad_s++ < 3)
            fprintf(stderr, "  scale %zu: got %.9g want %.9g\n", i, (double)got, (double)rs[i]);
    }
    for (int64_t r = 0; ok && r < m; r++) {
        for (int64_t i = 0; i < k; i++) {
            int32_t got = code_at(d, Q.h, ldq, r, i), want = rq[r * k + i];
            if (got != want && bad_q++ < 3)
                fprintf(stderr, "  q[%lld][%lld]: got %d want %d (x %.9g)\n", (long long)r,
                        (long long)i, got, want, (double)vals[r * ldx + i]);
        }
        /* nothing written past K in the row's padding */
        const uint8_t *row = (const uint8_t *)Q.h + r * (packed ? ldq / 2 : ldq);
        for (int64_t j = packed ? k / 2 : k; j < (packed ? ldq / 2 : ldq); j++)
            stray += row[j] != 0xa5;
    }
    if (bad_q || bad_s || stray) {
        char text[128];
        qjit_quant_get_desc(qh, NULL, text, sizeof text);
        fprintf(stderr, "  %s m=%lld k=%lld clip=%g: %ld q, %ld scales differ, %ld bytes past K\n",
                text, (long long)m, (long long)k, (double)clip, bad_q, bad_s, stray);
        ok = false;
    }
    free(vals);
    free(rq);
    free(rs);
    buf_free(&X);
    buf_free(&Q);
    buf_free(&S);
    buf_free(&W);
    return ok;
}

static void test_modes(qjit_context *ctx)
{
    static const int64_t ms[] = {1, 3, 16, 17, 64, 333};
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < NCOMBOS; c++) {
            char text[128];
            snprintf(text, sizeof text, "quant in=%s %s", ins[i], combos[c]);
            qjit_quant_desc d;
            qjit_quant *qh;
            CHECK_OK(qjit_quant_desc_parse(text, &d));
            if (qjit_context_get_quant(ctx, &d, NULL, &qh) != QJIT_OK) {
                CHECK(0, "%s: %s", text, qjit_last_error());
                continue;
            }
            const bool mx = d.scale == QJIT_SCALE_MX;
            for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++)
                for (int v = 0; v < 3; v++) {
                    /* K off the 128 block (mx: a multiple of 32), and clip for some */
                    const int64_t k = mx ? 32 * (9 + v * 17) : 200 + 130 * v + (v == 2 ? 2 : 0);
                    const float clip = mx || v == 0 ? 0.0f : v == 1 ? 0.9f : 0.5f;
                    /* q's rows padded by 8 or 4; MX at v = 1 unpadded (K = 832), so that q's
                     * rows start on 16 bytes and a lane's block leaves in 16-byte stores */
                    CHECK(check_one(qh, &d, ms[j], k, clip, d.scale != QJIT_SCALE_TENSOR || v == 2,
                                    v == 0 ? 8 : mx && v == 1 ? 0 : 4),
                          "%s m=%lld k=%lld clip=%g", text, (long long)ms[j], (long long)k,
                          (double)clip);
                }
            /* the edges of the kernels' plans: a row of exactly what a CTA holds in registers
             * and rows past it (the two-pass path, 16-byte and value by value) for row and
             * tensor, and, past 512 rows, the rows a CTA takes changing from 1 to 2, 4 and 8
             * (M = 517 and 1029 leave the last CTA part empty); one group a row for block
             * (K = 100) and mx (K = 32), where a warp's groups span several rows */
            const int64_t held = 256 * 8 * (d.in == QJIT_DTYPE_F32 ? 4 : 8);
            const int64_t edge_k[] = {held,         held + 8,     held + 10,    held / 2,
                                      held / 2 + 8, held / 4 + 2, held / 8,     held / 8 + 8};
            const bool rows = d.scale == QJIT_SCALE_ROW || d.scale == QJIT_SCALE_TENSOR;
            const int nedge = rows ? (int)(sizeof edge_k / sizeof edge_k[0]) : 1;
            for (int v = 0; v < nedge; v++) {
                const int64_t k = rows ? edge_k[v] : mx ? 32 : 100;
                const int64_t m = !rows ? 77 : k > held / 2 ? 5 : v % 2 ? 1029 : 517;
                CHECK(check_one(qh, &d, m, k, 0.0f, 1, 8), "%s m=%lld k=%lld (the plan's edge)",
                      text, (long long)m, (long long)k);
            }
        }
}

/* ------------------------------------------------------------ batches, columns */
/* A batch of E matrices [M][K] in one launch, row-wise (the descriptor's groups along K)
 * or column-wise (layout=cols: blocks along M, q [K][M]); each matrix against ref_quant of
 * that matrix (column-wise: of its transpose, row-wise). */
static void check_batch(qjit_context *ctx, const char *text, int64_t E, int64_t m, int64_t k)
{
    qjit_quant_desc d;
    qjit_quant *qh;
    CHECK_OK(qjit_quant_desc_parse(text, &d));
    if (qjit_context_get_quant(ctx, &d, NULL, &qh) != QJIT_OK) {
        CHECK(0, "%s: %s", text, qjit_last_error());
        return;
    }
    const bool packed = bits_of(d.out) == 4;
    const int64_t qrows = d.cols ? k : m, qlen = d.cols ? m : k;
    const int64_t ldx = k + 8, ldq = qlen + 4, xbs = m * ldx + 16, qbs = qrows * ldq + 8;
    const size_t ns1 = d.cols ? (size_t)(k * (m / 32)) : scale_elems(&d, m, k);
    const size_t sb1 = ns1 * (d.scale == QJIT_SCALE_MX ? 1 : 4);
    const int in_bytes = bits_of(d.in) / 8;
    buf X, Q, S;
    buf_make(&X, (size_t)(E * xbs) * (size_t)in_bytes);
    buf_make(&Q, (size_t)(packed ? E * qbs / 2 : E * qbs));
    buf_make(&S, sb1 * (size_t)E);
    float *vals = malloc((size_t)(E * xbs) * sizeof *vals);
    for (int64_t e = 0; e < E; e++)
        make_x(d.in, m, k, ldx, e == 1, (char *)X.h + e * xbs * in_bytes, vals + e * xbs);
    buf_up(&X);
    CK(cudaMemset(Q.d, 0xa5, Q.n));
    CK(cudaMemset(S.d, 0xa5, S.n));
    qjit_quant_args a = {X.d, Q.d, S.d, NULL, m, k, ldx, ldq, 0.0f, E, xbs, qbs};
    CHECK_OK(qjit_quant_launch(qh, &a, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(Q.h, Q.d, Q.n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(S.h, S.d, S.n, cudaMemcpyDeviceToHost));
    qjit_quant_desc rows = d;
    rows.cols = 0;
    float *t = malloc((size_t)(m * k) * sizeof *t);
    int32_t *rq = malloc((size_t)(m * k) * sizeof *rq);
    float *rs = malloc(ns1 * sizeof *rs);
    long bad = 0;
    for (int64_t e = 0; e < E; e++) {
        const float *xe = vals + e * xbs;
        int rc;
        if (d.cols) { /* the transpose [K][M], quantized along its rows */
            for (int64_t r = 0; r < m; r++)
                for (int64_t c = 0; c < k; c++)
                    t[c * m + r] = xe[r * ldx + c];
            rc = ref_quant(&rows, t, k, m, m, 0.0f, rq, rs);
        } else {
            rc = ref_quant(&rows, xe, m, k, ldx, 0.0f, rq, rs);
        }
        CHECK(rc == 0, "reference: %s", ref_error());
        const uint8_t *qe = (const uint8_t *)Q.h + (packed ? e * qbs / 2 : e * qbs);
        for (int64_t r = 0; r < qrows; r++)
            for (int64_t i = 0; i < qlen; i++)
                bad += code_at(&d, qe, ldq, r, i) != rq[r * qlen + i];
        for (size_t i = 0; i < ns1; i++) {
            float got = d.scale == QJIT_SCALE_MX ? (float)((uint8_t *)S.h)[e * (int64_t)ns1 + (int64_t)i]
                                                 : ((float *)S.h)[e * (int64_t)ns1 + (int64_t)i];
            bad += !(got == rs[i] || (isnan(got) && isnan(rs[i])));
        }
    }
    CHECK(bad == 0, "%s E=%lld m=%lld k=%lld: %ld values or scales differ", text, (long long)E,
          (long long)m, (long long)k, bad);
    free(t);
    free(rq);
    free(rs);
    free(vals);
    buf_free(&X);
    buf_free(&Q);
    buf_free(&S);
}

static void test_batches(qjit_context *ctx)
{
    static const char *const cols[] = {
        "quant in=bf16 out=e4m3 scale=mx rule=floor layout=cols",
        "quant in=bf16 out=e4m3 scale=mx rule=rceil layout=cols",
        "quant in=bf16 out=e2m1 scale=mx rule=floor layout=cols",
        "quant in=bf16 out=e2m1 scale=mx rule=rceil layout=cols",
    };
    for (int i = 0; i < 4; i++)
        for (int64_t E = 1; E <= 3; E += 2) {
            check_batch(ctx, cols[i], E, 64, 300);
            check_batch(ctx, cols[i], E, 96, 512);
            /* several CTAs of 128 rows along M, the last one part empty */
            check_batch(ctx, cols[i], E, 288, 136);
        }
    /* f16 and f32 through the column-wise tile too (16-byte chunks where K allows) */
    check_batch(ctx, "quant in=f32 out=e4m3 scale=mx rule=rceil layout=cols", 3, 64, 512);
    check_batch(ctx, "quant in=f32 out=e4m3 scale=mx rule=floor layout=cols", 1, 160, 72);
    check_batch(ctx, "quant in=f32 out=e2m1 scale=mx rule=floor layout=cols", 1, 32, 300);
    check_batch(ctx, "quant in=f16 out=e2m1 scale=mx rule=floor layout=cols", 3, 64, 512);
    check_batch(ctx, "quant in=f16 out=e4m3 scale=mx rule=rceil layout=cols", 1, 96, 300);
    check_batch(ctx, "quant in=bf16 out=s8 scale=row", 3, 17, 200);
    check_batch(ctx, "quant in=bf16 out=s4 scale=row", 3, 5, 64);
    check_batch(ctx, "quant in=bf16 out=e4m3 scale=block", 3, 9, 300);
    check_batch(ctx, "quant in=bf16 out=e4m3 scale=mx rule=rceil", 3, 33, 256);
}

/* ------------------------------------------------------------ graphs */
static void test_graphs(qjit_context *ctx)
{
    const char *texts[] = {"quant in=bf16 out=s8 scale=row", "quant in=bf16 out=e4m3 scale=tensor",
                           "quant in=bf16 out=e4m3 scale=mx rule=rceil"};
    const int64_t k = 4096;
    for (int t = 0; t < 3; t++) {
        qjit_quant_desc d;
        qjit_quant *qh;
        CHECK_OK(qjit_quant_desc_parse(texts[t], &d));
        CHECK_OK(qjit_context_get_quant(ctx, &d, NULL, &qh));
        for (int64_t m = 1; m <= 256; m *= 4) {
            size_t xb = (size_t)(m * k) * 2, qb = (size_t)(m * k), sb = scale_elems(&d, m, k) * 4;
            buf X, Q1, Q2, S1, S2, W;
            buf_make(&X, xb);
            buf_make(&Q1, qb);
            buf_make(&Q2, qb);
            buf_make(&S1, sb);
            buf_make(&S2, sb);
            buf_make(&W, QJIT_QUANT_WORKSPACE_BYTES);
            cudaStream_t s;
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            qjit_quant_args eager = {X.d, Q1.d, S1.d, W.d, m, k, k, k, 0.0f};
            qjit_quant_args graphed = {X.d, Q2.d, S2.d, W.d, m, k, k, k, 0.0f};
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            qjit_status st = qjit_quant_launch(qh, &graphed, (struct CUstream_st *)s);
            CK(cudaStreamEndCapture(s, &graph));
            CHECK(st == QJIT_OK, "%s m=%lld capture: %s", texts[t], (long long)m, qjit_last_error());
            CK(cudaGraphInstantiate(&exec, graph, 0));
            bool same = true;
            for (int round = 0; round < 20; round++) {
                for (size_t i = 0; i < xb / 2; i++)
                    ((uint16_t *)X.h)[i] = qjit_bf16_from_f32(uni(-8, 8));
                buf_up(&X);
                CK(cudaDeviceSynchronize()); /* s is non-blocking: it does not wait for the upload */
                CK(cudaMemsetAsync(Q1.d, 0xa5, qb, s));
                CK(cudaMemsetAsync(Q2.d, 0x5a, qb, s));
                CHECK_OK(qjit_quant_launch(qh, &eager, (struct CUstream_st *)s));
                CK(cudaStreamSynchronize(s)); /* the workspace is not shared by concurrent launches */
                CK(cudaGraphLaunch(exec, s));
                CK(cudaStreamSynchronize(s));
                CK(cudaMemcpy(Q1.h, Q1.d, qb, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(Q2.h, Q2.d, qb, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(S1.h, S1.d, sb, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(S2.h, S2.d, sb, cudaMemcpyDeviceToHost));
                same &= !memcmp(Q1.h, Q2.h, qb) && !memcmp(S1.h, S2.h, d.scale == QJIT_SCALE_MX ? sb / 4 : sb);
            }
            CHECK(same, "%s m=%lld: graph replays differ from eager launches", texts[t], (long long)m);
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
            CK(cudaStreamDestroy(s));
            buf *all[] = {&X, &Q1, &Q2, &S1, &S2, &W};
            for (int i = 0; i < 6; i++)
                buf_free(all[i]);
        }
    }
}

/* ------------------------------------------------------------ bad arguments */
static void test_bad(qjit_context *ctx)
{
    qjit_quant_desc d;
    qjit_quant *qh;
    CHECK_OK(qjit_quant_desc_parse("quant in=bf16 out=e4m3 scale=mx", &d));
    CHECK_OK(qjit_context_get_quant(ctx, &d, NULL, &qh));
    buf X, Q, S;
    buf_make(&X, 1 << 16);
    buf_make(&Q, 1 << 16);
    buf_make(&S, 1 << 12);
    CK(cudaMemset(Q.d, 0xa5, 1 << 16));
    struct { qjit_quant_args a; const char *need; } cases[] = {
        {{X.d, Q.d, S.d, NULL, 4, 100, 100, 100, 0}, "multiple of 32"},
        {{X.d, Q.d, S.d, NULL, 4, 64, 32, 64, 0}, "ldx"},
        {{X.d, NULL, S.d, NULL, 4, 64, 64, 64, 0}, "'q'"},
        {{(char *)X.d + 1, Q.d, S.d, NULL, 4, 64, 64, 64, 0}, "aligned"},
        {{X.d, Q.d, S.d, NULL, 4, 64, 64, 64, 0.5f}, "clip"},
        {{X.d, Q.d, S.d, NULL, -1, 64, 64, 64, 0}, "m=-1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_status st = qjit_quant_launch(qh, &cases[i].a, NULL);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), cases[i].need),
              "case %zu: %s: %s", i, qjit_status_string(st), qjit_last_error());
    }
    CHECK_OK(qjit_quant_desc_parse("quant in=bf16 out=s8 scale=tensor", &d));
    CHECK_OK(qjit_context_get_quant(ctx, &d, NULL, &qh));
    qjit_quant_args a = {X.d, Q.d, S.d, NULL, 4, 64, 64, 64, 0};
    qjit_status st = qjit_quant_launch(qh, &a, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "workspace"),
          "tensor without workspace: %s", qjit_last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(Q.h, Q.d, 1 << 16, cudaMemcpyDeviceToHost));
    long touched = 0;
    for (int i = 0; i < 1 << 16; i++)
        touched += ((uint8_t *)Q.h)[i] != 0xa5;
    CHECK(touched == 0, "refused launches wrote %ld bytes", touched);
    buf_free(&X);
    buf_free(&Q);
    buf_free(&S);
}

/* ------------------------------------------------------------ every bf16 value, MX */
/* bf16 → MX, every finite bf16 value under every e8m0 code a block can get, bit for bit
 * against ref_quant.  A block's first value sets its amax, A = 1.5·2^e for every binade
 * of bf16 (subnormals included), and its other 31 run through every bf16 x with
 * |x| <= A, both signs; the blocks fill rows of K = 8192 (about 8.6 M values).  The
 * row-wise kernel reads them as they are, in 16-byte stores (q unpadded); the
 * column-wise one reads the transpose, whose blocks along M are the same blocks.  Random
 * data reaches neither the subnormal products of the kernels' bf16 arithmetic nor every
 * tie at every code step; this does. */
static void test_mx_every_bf16(qjit_context *ctx)
{
    const int64_t k = 8192;
    /* the amax of each binade: 1.5·2^(E−127) for E = 1..254, then the subnormals 96 >> j
     * (1.5·2^-127 .. 1.5·2^-132) */
    uint16_t amax[262];
    int na = 0;
    for (int e = 1; e <= 254; e++)
        amax[na++] = (uint16_t)(e << 7 | 0x40);
    for (int j = 0; j < 6; j++)
        amax[na++] = (uint16_t)(96 >> j);
    int64_t nblocks = 0;
    for (int a = 0; a < na; a++)
        nblocks += (2 * ((int64_t)amax[a] + 1) + 30) / 31;
    const int64_t m = (nblocks * 32 + k - 1) / k;
    uint16_t *xh = calloc((size_t)(m * k), sizeof *xh);
    float *vals = calloc((size_t)(m * k), sizeof *vals);
    int64_t at = 0;
    for (int a = 0; a < na; a++) {
        const int64_t nx = 2 * ((int64_t)amax[a] + 1); /* |x| <= A, both signs */
        for (int64_t i = 0; i < nx; i++) {
            if (i % 31 == 0) {
                xh[at++] = amax[a]; /* the block's amax first */
            }
            xh[at++] = (uint16_t)((i / 2) | (i % 2 ? 0x8000u : 0u));
        }
        at = (at + 31) / 32 * 32; /* the last block's rest: zeros */
    }
    for (int64_t i = 0; i < m * k; i++)
        vals[i] = qjit_bf16_to_f32(xh[i]);
    static const char *const texts[] = {
        "quant in=bf16 out=e2m1 scale=mx rule=rceil", "quant in=bf16 out=e2m1 scale=mx rule=floor",
        "quant in=bf16 out=e4m3 scale=mx rule=rceil", "quant in=bf16 out=e4m3 scale=mx rule=floor",
    };
    int32_t *rq = malloc((size_t)(m * k) * sizeof *rq);
    float *rs = malloc((size_t)(m * (k / 32)) * sizeof *rs);
    uint16_t *xt = malloc((size_t)(m * k) * sizeof *xt);
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < k; c++)
            xt[c * m + r] = xh[r * k + c];
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++)
        for (int cols = 0; cols < 2; cols++) {
            qjit_quant_desc d;
            qjit_quant *qh;
            char text[128];
            snprintf(text, sizeof text, "%s%s", texts[t], cols ? " layout=cols" : "");
            CHECK_OK(qjit_quant_desc_parse(text, &d));
            if (qjit_context_get_quant(ctx, &d, NULL, &qh) != QJIT_OK) {
                CHECK(0, "%s: %s", text, qjit_last_error());
                continue;
            }
            qjit_quant_desc rows = d;
            rows.cols = 0;
            CHECK(ref_quant(&rows, vals, m, k, k, 0.0f, rq, rs) == 0, "reference: %s", ref_error());
            const bool packed = bits_of(d.out) == 4;
            buf X, Q, S;
            buf_make(&X, (size_t)(m * k) * 2);
            memcpy(X.h, cols ? xt : xh, X.n);
            buf_up(&X);
            buf_make(&Q, (size_t)(packed ? m * k / 2 : m * k));
            buf_make(&S, (size_t)(m * (k / 32)));
            CK(cudaMemset(Q.d, 0xa5, Q.n));
            CK(cudaMemset(S.d, 0xa5, S.n));
            /* row-wise: x [m][k]; column-wise: x [k][m] (M = k rows, K = m columns), q
             * [m][k] either way */
            qjit_quant_args qa = {X.d, Q.d, S.d, NULL, cols ? k : m, cols ? m : k, cols ? m : k, k, 0.0f};
            CHECK_OK(qjit_quant_launch(qh, &qa, NULL));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(Q.h, Q.d, Q.n, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(S.h, S.d, S.n, cudaMemcpyDeviceToHost));
            long bad = 0;
            for (int64_t r = 0; r < m; r++)
                for (int64_t i = 0; i < k; i++) {
                    const int32_t got = code_at(&d, Q.h, k, r, i), want = rq[r * k + i];
                    if (got != want && bad++ < 3)
                        fprintf(stderr, "  %s: q[%lld][%lld] = %d, want %d (x bits %04x)\n", text,
                                (long long)r, (long long)i, got, want, xh[r * k + i]);
                }
            for (int64_t i = 0; i < m * (k / 32); i++)
                bad += (float)((uint8_t *)S.h)[i] != rs[i];
            CHECK(bad == 0, "%s, every bf16 value (%lld x %lld): %ld codes or scales differ", text,
                  (long long)m, (long long)k, bad);
            buf_free(&X);
            buf_free(&Q);
            buf_free(&S);
        }
    free(xh);
    free(xt);
    free(vals);
    free(rq);
    free(rs);
}

/* ------------------------------------------------------------ a decode step */
/* The seed scenario: a decode step (quantize the activations, then the GEMM that reads
 * them: one qjit_linear_launch) captured once as a CUDA graph and replayed with new
 * activations gives the bytes of eager launches (the two plain ones), q, scales and output
 * alike, at batch 1 to 4, for every quantizer mode (s4 row has no GEMM reading it: the
 * quantizer alone): replays one at a time with the host between, then replays queued
 * back to back. */
static void test_decode_step(qjit_context *ctx)
{
    static const struct {
        const char *quant, *gemm;
    } steps[] = {
        {"quant in=bf16 out=s8 scale=row", "gemm a=s8 b=s8 sa=row sb=col out=bf16"},
        {"quant in=bf16 out=s4 scale=row", NULL},
        {"quant in=bf16 out=e4m3 scale=row", "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16"},
        {"quant in=bf16 out=s8 scale=tensor", "gemm a=s8 b=s8 sa=tensor sb=col out=bf16"},
        {"quant in=bf16 out=e4m3 scale=tensor", "gemm a=e4m3 b=e4m3 sa=tensor sb=tensor out=bf16"},
        {"quant in=bf16 out=e4m3 scale=block", "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16"},
        {"quant in=bf16 out=e4m3 scale=mx rule=floor", "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16"},
        {"quant in=bf16 out=e4m3 scale=mx rule=rceil", "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16"},
        {"quant in=bf16 out=e2m1 scale=mx rule=rceil", "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16"},
    };
    const int64_t n = 384, k = 2048;
    for (size_t t = 0; t < sizeof steps / sizeof steps[0]; t++) {
        qjit_quant_desc qd;
        qjit_gemm_desc gd;
        qjit_quant *qh;
        qjit_gemm *g = NULL;
        CHECK_OK(qjit_quant_desc_parse(steps[t].quant, &qd));
        if (qjit_context_get_quant(ctx, &qd, NULL, &qh) != QJIT_OK) {
            CHECK(0, "%s: %s", steps[t].quant, qjit_last_error());
            continue;
        }
        if (steps[t].gemm) {
            CHECK_OK(qjit_gemm_desc_parse(steps[t].gemm, &gd));
            if (qjit_context_get_gemm(ctx, &gd, NULL, &g) != QJIT_OK) {
                CHECK(0, "%s: %s", steps[t].gemm, qjit_last_error());
                continue;
            }
        }
        const bool packed = bits_of(qd.out) == 4;
        buf B = {0}, SB = {0};
        if (g) {
            qjit_dtype st;
            const size_t nsb = scale_count(&gd, 0, 4, n, k, &st);
            buf_make(&B, bytes_of(gd.b, n, k));
            buf_make(&SB, nsb * (size_t)(bits_of(st) / 8));
            fill_elems(gd.b, B.h, (size_t)(n * k));
            fill_scales(st, SB.h, nsb, 0.5e-2f, 1.5e-2f);
            buf_up(&B);
            buf_up(&SB);
        }
        for (int64_t m = 1; m <= 4; m++) {
            const size_t xb = (size_t)(m * k) * 2, qb = (size_t)(packed ? m * k / 2 : m * k);
            const size_t sb = scale_elems(&qd, m, k) * (qd.scale == QJIT_SCALE_MX ? 1 : 4);
            const size_t db = (size_t)(m * n) * 2;
            buf X, Q[2], S[2], D[2], W;
            buf_make(&X, xb);
            buf_make(&W, QJIT_QUANT_WORKSPACE_BYTES);
            for (int e = 0; e < 2; e++) {
                buf_make(&Q[e], qb);
                buf_make(&S[e], sb);
                buf_make(&D[e], db);
            }
            cudaStream_t s;
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            qjit_quant_args qa[2];
            qjit_gemm_args ga[2];
            for (int e = 0; e < 2; e++) {
                qjit_quant_args a = {X.d, Q[e].d, S[e].d, W.d, m, k, k, k, 0.0f};
                qjit_gemm_args b = {Q[e].d, B.d, D[e].d, NULL, S[e].d, SB.d, NULL, m, n, k, k, k, n};
                qa[e] = a;
                ga[e] = b;
            }
            /* [0] eager, [1] the graph's */
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            /* the graph holds the layer as qjit_linear_launch makes it (on sm_90a the GEMM
             * starts early, under the quantizer), eager the two plain launches: the GEMM must
             * read this replay's tokens, never what a replay before left */
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            qjit_status st;
            if (g) {
                qjit_linear_args la = {X.d, k, Q[1].d, S[1].d, W.d, 0.0f, ga[1]};
                la.gemm.a = NULL;
                la.gemm.scale_a = NULL;
                st = qjit_linear_launch(qh, g, &la, (struct CUstream_st *)s);
            } else {
                st = qjit_quant_launch(qh, &qa[1], (struct CUstream_st *)s);
            }
            CK(cudaStreamEndCapture(s, &graph));
            CHECK(st == QJIT_OK, "%s m=%lld capture: %s", steps[t].quant, (long long)m, qjit_last_error());
            CK(cudaGraphInstantiate(&exec, graph, 0));
            long differ = 0, unwritten = 0;
            for (int round = 0; round < 20; round++) {
                for (size_t i = 0; i < xb / 2; i++)
                    ((uint16_t *)X.h)[i] = qjit_bf16_from_f32(uni(-4, 4));
                buf_up(&X);
                CK(cudaDeviceSynchronize()); /* s is non-blocking: it does not wait for the upload */
                /* poisons that differ: equal bytes were written.  The graph's buffers only
                 * before the first replay: between replays nothing but the graph writes them,
                 * as in a model (a GEMM that read its tokens by the read-only path under the
                 * early start kept a replay before's in Python's graph test, not here while
                 * each round wrote them) */
                for (int e = 0; e < (round ? 1 : 2); e++) {
                    CK(cudaMemsetAsync(Q[e].d, e ? 0x5a : 0xa5, qb, s));
                    CK(cudaMemsetAsync(S[e].d, e ? 0x5a : 0xa5, sb, s));
                    CK(cudaMemsetAsync(D[e].d, e ? 0x5a : 0xa5, db, s));
                }
                CHECK_OK(qjit_quant_launch(qh, &qa[0], (struct CUstream_st *)s));
                if (g)
                    CHECK_OK(qjit_gemm_launch(g, &ga[0], (struct CUstream_st *)s));
                CK(cudaStreamSynchronize(s)); /* the tensor workspace is shared */
                CK(cudaGraphLaunch(exec, s));
                CK(cudaStreamSynchronize(s));
                buf *all[3][2] = {{&Q[0], &Q[1]}, {&S[0], &S[1]}, {&D[0], &D[1]}};
                bool same = true;
                for (int w = 0; w < (g ? 3 : 2); w++) {
                    CK(cudaMemcpy(all[w][0]->h, all[w][0]->d, all[w][0]->n, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(all[w][1]->h, all[w][1]->d, all[w][1]->n, cudaMemcpyDeviceToHost));
                    same &= !memcmp(all[w][0]->h, all[w][1]->h, all[w][0]->n);
                }
                differ += !same;
                /* the step read this round's activations: its output is not the poison */
                const uint8_t *out = g ? D[0].h : Q[0].h;
                size_t poisoned = 0;
                for (size_t i = 0; i < (g ? db : qb); i++)
                    poisoned += out[i] == 0xa5;
                unwritten += poisoned == (g ? db : qb);
            }
            CHECK(differ == 0 && unwritten == 0,
                  "%s%s%s m=%lld: %ld of 20 replays differ from eager launches, %ld left the output unwritten",
                  steps[t].quant, g ? " -> " : "", g ? steps[t].gemm : "", (long long)m, differ, unwritten);
            /* Back to back, as a model replays it (and as Python's graph test did when the
             * read-only token loads kept a replay before's): NR replays queued with no host
             * wait between, each after a device copy of its own activations into the graph's
             * input and followed by copies of its q, scales and output; then each against
             * eager launches on the same activations. */
            enum { NR = 8 };
            const size_t ob = qb + sb + (g ? db : 0);
            buf XR, OR;
            buf_make(&XR, NR * xb);
            buf_make(&OR, NR * ob);
            for (size_t i = 0; i < NR * xb / 2; i++)
                ((uint16_t *)XR.h)[i] = qjit_bf16_from_f32(uni(-4, 4));
            buf_up(&XR);
            for (int r = 0; r < NR; r++) {
                char *o = (char *)OR.d + r * ob;
                CK(cudaMemcpyAsync(X.d, (char *)XR.d + r * xb, xb, cudaMemcpyDeviceToDevice, s));
                CK(cudaGraphLaunch(exec, s));
                CK(cudaMemcpyAsync(o, Q[1].d, qb, cudaMemcpyDeviceToDevice, s));
                CK(cudaMemcpyAsync(o + qb, S[1].d, sb, cudaMemcpyDeviceToDevice, s));
                if (g)
                    CK(cudaMemcpyAsync(o + qb + sb, D[1].d, db, cudaMemcpyDeviceToDevice, s));
            }
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(OR.h, OR.d, OR.n, cudaMemcpyDeviceToHost));
            long late = 0;
            for (int r = 0; r < NR; r++) {
                CK(cudaMemcpy(X.d, (char *)XR.d + r * xb, xb, cudaMemcpyDeviceToDevice));
                CK(cudaMemset(Q[0].d, 0xa5, qb));
                CK(cudaMemset(D[0].d, 0xa5, db));
                CHECK_OK(qjit_quant_launch(qh, &qa[0], (struct CUstream_st *)s));
                if (g)
                    CHECK_OK(qjit_gemm_launch(g, &ga[0], (struct CUstream_st *)s));
                CK(cudaStreamSynchronize(s));
                const char *o = (const char *)OR.h + r * ob;
                CK(cudaMemcpy(Q[0].h, Q[0].d, qb, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(S[0].h, S[0].d, sb, cudaMemcpyDeviceToHost));
                bool same = !memcmp(Q[0].h, o, qb) && !memcmp(S[0].h, o + qb, sb);
                if (g) {
                    CK(cudaMemcpy(D[0].h, D[0].d, db, cudaMemcpyDeviceToHost));
                    same &= !memcmp(D[0].h, o + qb + sb, db);
                }
                late += !same;
            }
            CHECK(late == 0, "%s%s%s m=%lld: %ld of %d back-to-back replays differ from eager launches on their activations",
                  steps[t].quant, g ? " -> " : "", g ? steps[t].gemm : "", (long long)m, late, (int)NR);
            buf_free(&XR);
            buf_free(&OR);
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(graph));
            CK(cudaStreamDestroy(s));
            buf_free(&X);
            buf_free(&W);
            for (int e = 0; e < 2; e++) {
                buf_free(&Q[e]);
                buf_free(&S[e]);
                buf_free(&D[e]);
            }
        }
        if (g) {
            buf_free(&B);
            buf_free(&SB);
        }
    }
}

/* ------------------------------------------------------------ a linear layer */
static void test_linear(qjit_context *ctx)
{
    qjit_quant_desc qd;
    qjit_gemm_desc gd;
    qjit_quant *qh;
    qjit_gemm *g;
    CHECK_OK(qjit_quant_desc_parse("quant in=bf16 out=s8 scale=row", &qd));
    CHECK_OK(qjit_gemm_desc_parse("gemm a=s8 b=s8 sa=row sb=col out=bf16", &gd));
    CHECK_OK(qjit_context_get_quant(ctx, &qd, NULL, &qh));
    CHECK_OK(qjit_context_get_gemm(ctx, &gd, NULL, &g));
    const int64_t n = 1024 + 136, k = 2048;
    buf B, SB, X, XQ, XS, D1, D2;
    buf_make(&B, (size_t)(n * k));
    buf_make(&SB, (size_t)n * 4);
    fill_elems(QJIT_DTYPE_S8, B.h, (size_t)(n * k));
    fill_scales(QJIT_DTYPE_F32, SB.h, (size_t)n, 0.5e-2f, 1.5e-2f);
    buf_up(&B);
    buf_up(&SB);
    for (int64_t m = 1; m <= 64; m *= 4) {
        buf_make(&X, (size_t)(m * k) * 2);
        buf_make(&XQ, (size_t)(m * k));
        buf_make(&XS, (size_t)m * 4);
        buf_make(&D1, (size_t)(m * n) * 2);
        buf_make(&D2, (size_t)(m * n) * 2);
        for (int64_t i = 0; i < m * k; i++)
            ((uint16_t *)X.h)[i] = qjit_bf16_from_f32(uni(-2, 2));
        buf_up(&X);
        qjit_linear_args la = {X.d, k, XQ.d, XS.d, NULL, 0.0f,
                               {NULL, B.d, D1.d, NULL, NULL, SB.d, NULL, m, n, k, 0, k, n}};
        CHECK_OK(qjit_linear_launch(qh, g, &la, NULL));
        /* the same two launches by hand */
        qjit_quant_args qa = {X.d, XQ.d, XS.d, NULL, m, k, k, k, 0.0f};
        CHECK_OK(qjit_quant_launch(qh, &qa, NULL));
        qjit_gemm_args ga = {XQ.d, B.d, D2.d, NULL, XS.d, SB.d, NULL, m, n, k, k, k, n};
        CHECK_OK(qjit_gemm_launch(g, &ga, NULL));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(D1.h, D1.d, D1.n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(D2.h, D2.d, D2.n, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(D1.h, D2.h, D1.n), "m=%lld: the linear launch differs from its two launches",
              (long long)m);
        /* and the layer approximates x·Wᵀ·sb within int8 activation error */
        double num = 0, den = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c += 7) {
                double ref = 0;
                for (int64_t i = 0; i < k; i++)
                    ref += (double)qjit_bf16_to_f32(((uint16_t *)X.h)[r * k + i]) *
                           (double)((int8_t *)B.h)[c * k + i];
                ref *= ((float *)SB.h)[c];
                double got = qjit_bf16_to_f32(((uint16_t *)D1.h)[r * n + c]);
                num += (got - ref) * (got - ref);
                den += ref * ref;
            }
        CHECK(sqrt(num / den) < 2e-2, "m=%lld: layer error %.3g", (long long)m, sqrt(num / den));
        buf *all[] = {&X, &XQ, &XS, &D1, &D2};
        for (int i = 0; i < 5; i++)
            buf_free(all[i]);
    }
    /* quantizer outputs that overlap the weight side are refused, nothing launched: the GEMM
     * starts early and reads its weights before it waits for the quantizer */
    {
        const int64_t m = 4;
        buf_make(&X, (size_t)(m * k) * 2);
        buf_make(&XQ, (size_t)(m * k));
        buf_make(&XS, (size_t)m * 4);
        buf_make(&D1, (size_t)(m * n) * 2);
        for (int64_t i = 0; i < m * k; i++)
            ((uint16_t *)X.h)[i] = qjit_bf16_from_f32(uni(-2, 2));
        buf_up(&X);
        memset(D1.h, 0x5a, D1.n);
        buf_up(&D1);
        CK(cudaMemcpy(B.h, B.d, B.n, cudaMemcpyDeviceToHost));
        void *b_row = (char *)B.d + (size_t)(n / 2) * (size_t)k; /* xq inside B */
        const struct {
            void *xq, *xs;
            const char *want;
        } cases[2] = {{b_row, XS.d, "argument 'xq'"}, {XQ.d, (char *)SB.d + 8, "argument 'xs'"}};
        for (int c = 0; c < 2; c++) {
            qjit_linear_args ov = {X.d, k, cases[c].xq, cases[c].xs, NULL, 0.0f,
                                   {NULL, B.d, D1.d, NULL, NULL, SB.d, NULL, m, n, k, 0, k, n}};
            qjit_status st = qjit_linear_launch(qh, g, &ov, NULL);
            CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), cases[c].want) &&
                      strstr(qjit_last_error(), "overlaps"),
                  "overlap %d: %s", c, qjit_last_error());
        }
        CK(cudaDeviceSynchronize());
        uint8_t *h = malloc(B.n > D1.n ? B.n : D1.n);
        CK(cudaMemcpy(h, B.d, B.n, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(h, B.h, B.n), "a refused linear launch wrote into b");
        CK(cudaMemcpy(h, D1.d, D1.n, cudaMemcpyDeviceToHost));
        CHECK(!memcmp(h, D1.h, D1.n), "a refused linear launch wrote into d");
        free(h);
        buf_free(&X);
        buf_free(&XQ);
        buf_free(&XS);
        buf_free(&D1);
    }
    /* a GEMM that does not read what the quantizer writes is refused */
    CHECK_OK(qjit_gemm_desc_parse("gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16", &gd));
    CHECK_OK(qjit_context_get_gemm(ctx, &gd, NULL, &g));
    qjit_linear_args bad = {B.d, k, B.d, SB.d, NULL, 0.0f,
                            {NULL, B.d, B.d, NULL, NULL, SB.d, NULL, 1, n, k, 0, k, n}};
    qjit_status st = qjit_linear_launch(qh, g, &bad, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "reads a=e4m3"),
          "mismatched pair: %s", qjit_last_error());
    buf_free(&B);
    buf_free(&SB);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_gpu_quant_kernels: no GPU, skipped\n");
        return TL_SKIP;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) {
        printf("test_gpu_quant_kernels: written for sm_90 (device is sm_%d0), skipped\n", major);
        return TL_SKIP;
    }
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("gpu-quant-kernels");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    /* QJIT_TEST_ONLY=decode_step (a part of a name) runs only the tests it names */
    const char *only = getenv("QJIT_TEST_ONLY");
#define RUN(t) \
    if (!only || strstr(#t, only)) \
        t(ctx)
    RUN(test_modes);
    RUN(test_batches);
    RUN(test_mx_every_bf16);
    RUN(test_graphs);
    RUN(test_decode_step);
    RUN(test_bad);
    RUN(test_linear);
#undef RUN
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_quant_kernels");
}
