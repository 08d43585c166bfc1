/*
 * test_gpu_dispatch.c — handles of auto descriptors on the GPU: each M bucket's kernel
 * against the CPU reference (M = 1, 3, 17, 65, 333, 1000, 4097; N and K off the tile;
 * outputs poisoned), CUDA graphs captured at several batch sizes replaying bit-identically
 * with new inputs, and qjit_gemm_tune: its results recorded, picked by a handle made
 * afterwards for that N, K and bucket, and right.  Skips with no GPU.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the check driver */

#include <cuda_runtime_api.h>
#include <string.h>

static const char *const auto_descs[] = {
    "gemm a=bf16 b=bf16 out=bf16 bias=1",
    "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16",
    "gemm a=f16 b=u4 sb=group:64 gs=f16 zeros=1 out=f16",
    "gemm a=bf16 b=s8 sb=col out=bf16",
    "gemm a=s8 b=s8 sa=row sb=col out=bf16",
    "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16",
    "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16",
    "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16",
};
#define NDESCS (int)(sizeof auto_descs / sizeof auto_descs[0])
static const int64_t ms[] = {1, 3, 17, 65, 333, 1000, 4097};
#define NMS (int)(sizeof ms / sizeof ms[0])

/* ------------------------------------------------------------ every bucket */
static void test_buckets(qjit_context *ctx)
{
    for (int i = 0; i < NDESCS; i++) {
        qjit_gemm_desc d;
        qjit_gemm *g;
        CHECK_OK(qjit_gemm_desc_parse(auto_descs[i], &d));
        if (qjit_context_get_gemm(ctx, &d, NULL, &g) != QJIT_OK) {
            CHECK(0, "%s: %s", auto_descs[i], qjit_last_error());
            continue;
        }
        qjit_gemm_info info;
        CHECK_OK(qjit_gemm_get_info(g, &info));
        /* about 1100, a multiple of what every kernel of the handle needs: off the K tile
         * where that allows (1104 for the f16/bf16 kernels), 1152 for group:128 */
        const int64_t km = info.k_multiple > 0 ? info.k_multiple : 1;
        const int64_t k = km * ((1100 + km - 1) / km);
        for (int j = 0; j < NMS; j++) {
            /* N off the tile; narrower at large M, where the CPU reference dominates */
            const int64_t n = (ms[j] >= 1000 ? 264 : 520) + (ms[j] % 2 ? 8 : 136);
            qjit_gemm_variant v;
            CHECK_OK(qjit_gemm_choose(g, ms[j], n, k, &v));
            CHECK(ms[j] >= v.m_min && ms[j] <= v.m_max && !v.tuned,
                  "%s m=%lld: variant for %lld..%lld", auto_descs[i], (long long)ms[j],
                  (long long)v.m_min, (long long)v.m_max);
            double err = 0;
            long mismatch = 0;
            bool ran = run_one(g, &v.desc, &info, ms[j], n, k, &err, &mismatch);
            double bound = bound_for(&v.desc);
            CHECK(ran && (bit_exact_pair(&d) ? mismatch == 0 : err <= bound),
                  "%s m=%lld n=%lld k=%lld (%s): error %.3g (bound %.3g), %ld mismatches",
                  auto_descs[i], (long long)ms[j], (long long)n, (long long)k, v.text, err,
                  bound, mismatch);
        }
    }
}

/* ------------------------------------------------------------ graphs per batch size */
static void test_graphs(qjit_context *ctx)
{
    qjit_gemm_desc d;
    qjit_gemm *g;
    CHECK_OK(qjit_gemm_desc_parse(auto_descs[1], &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    const int64_t n = 4096 + 136, k = 2048;
    const int64_t batch[] = {1, 4, 16, 64, 256};
    size_t nb = bytes_of(d.b, n, k), ns = (size_t)(n * (k / 128)) * 2;
    buf B, S;
    buf_make(&B, nb);
    buf_make(&S, ns);
    fill_elems(d.b, B.h, (size_t)(n * k));
    fill_scales(QJIT_DTYPE_BF16, S.h, (size_t)(n * (k / 128)), 0.5e-2f, 1.5e-2f);
    buf_up(&B);
    buf_up(&S);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t bi = 0; bi < sizeof batch / sizeof batch[0]; bi++) {
        const int64_t m = batch[bi];
        size_t na = (size_t)(m * k) * 2, nd = (size_t)(m * n) * 2;
        buf A, D, E;
        buf_make(&A, na);
        buf_make(&D, nd);
        buf_make(&E, nd);
        qjit_gemm_args ga = {A.d, B.d, D.d, NULL, NULL, S.d, NULL, m, n, k, k, k, n};
        qjit_gemm_args ea = ga;
        ea.d = E.d;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        qjit_status st = qjit_gemm_launch(g, &ga, (struct CUstream_st *)s);
        CK(cudaStreamEndCapture(s, &graph));
        CHECK(st == QJIT_OK, "m=%lld capture: %s", (long long)m, qjit_last_error());
        CK(cudaGraphInstantiate(&exec, graph, 0));
        bool same = true;
        for (int round = 0; round < 5; round++) {
            fill_elems(QJIT_DTYPE_BF16, A.h, (size_t)(m * k));
            buf_up(&A);
            CK(cudaMemset(D.d, 0xff, nd));
            CK(cudaMemset(E.d, 0xff, nd));
            /* s is non-blocking: it does not wait for the legacy stream's upload and poison */
            CK(cudaDeviceSynchronize());
            CHECK_OK(qjit_gemm_launch(g, &ea, (struct CUstream_st *)s));
            CK(cudaGraphLaunch(exec, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(D.h, D.d, nd, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(E.h, E.d, nd, cudaMemcpyDeviceToHost));
            same &= memcmp(D.h, E.h, nd) == 0;
        }
        /* and the replayed result is right */
        qjit_gemm_args host = {A.h, B.h, NULL, NULL, NULL, S.h, NULL, m, n, k, k, k, n};
        double *ref = malloc((size_t)(m * n) * sizeof *ref), *got = malloc((size_t)(m * n) * sizeof *got);
        CHECK(ref_gemm(&d, &host, ref) == 0, "reference: %s", ref_error());
        for (int64_t i = 0; i < m * n; i++)
            got[i] = qjit_bf16_to_f32(((uint16_t *)D.h)[i]);
        double err = ref_nerr(got, ref, (size_t)(m * n));
        CHECK(same, "m=%lld: graph replays differ from eager launches", (long long)m);
        CHECK(err <= 2e-2, "m=%lld: graph output error %.3g", (long long)m, err);
        free(ref);
        free(got);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        buf_free(&A);
        buf_free(&D);
        buf_free(&E);
    }
    CK(cudaStreamDestroy(s));
    buf_free(&B);
    buf_free(&S);
}

/* ------------------------------------------------------------ tuning */
static void test_tune(const char *dir)
{
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse(auto_descs[1], &d));
    qjit_tune_problem p[2] = {{16, 4096, 4096}, {333, 4096, 4096}};
    qjit_tune_result r[2];
    qjit_tune_options to;
    qjit_tune_options_init(&to);
    to.sweep = "small-m";
    to.reps = 5;
    CHECK_OK(qjit_gemm_tune(ctx, &d, p, 2, &to, r));
    for (int i = 0; i < 2; i++) {
        char text[256];
        qjit_gemm_desc_format(&r[i].best, text, sizeof text, NULL);
        printf("  tuned m=%lld: %d candidates, %d passed, %d failed, %d skipped; heuristic "
               "%.2f us, best %.2f us (%s), max error %.3g\n",
               (long long)p[i].m, r[i].candidates, r[i].passed, r[i].failed, r[i].skipped,
               r[i].heuristic_us, r[i].best_us, text, r[i].max_error);
        CHECK(r[i].passed >= 1 && r[i].best_us > 0 && r[i].heuristic_us > 0 &&
                  r[i].best_us <= r[i].heuristic_us,
              "m=%lld: %d passed, best %.2f, heuristic %.2f", (long long)p[i].m, r[i].passed,
              r[i].best_us, r[i].heuristic_us);
        CHECK(r[i].passed + r[i].failed + r[i].skipped == r[i].candidates, "counts");
    }
    qjit_context_destroy(ctx);

    /* a later process (a new context on the same cache) picks the winners */
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm *g;
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    for (int i = 0; i < 2; i++) {
        qjit_gemm_variant v;
        CHECK_OK(qjit_gemm_choose(g, p[i].m, p[i].n, p[i].k, &v));
        CHECK(v.tuned && memcmp(&v.desc, &r[i].best, sizeof v.desc) == 0,
              "m=%lld: the handle runs %s (tuned %d), not the winner", (long long)p[i].m,
              v.text, v.tuned);
        qjit_gemm_info info;
        CHECK_OK(qjit_gemm_get_info(g, &info));
        double err = 0;
        long mismatch = 0;
        bool ran = run_problem(g, &d, &info, (problem){p[i].m, p[i].n, p[i].k, p[i].k, p[i].k, p[i].n},
                               &err, &mismatch);
        CHECK(ran && err <= bound_for(&v.desc), "tuned m=%lld: error %.3g", (long long)p[i].m, err);
        /* another N keeps the heuristic */
        CHECK_OK(qjit_gemm_choose(g, p[i].m, 2048, p[i].k, &v));
        CHECK(!v.tuned, "m=%lld n=2048 picked a tuned kernel", (long long)p[i].m);
    }
    qjit_context_destroy(ctx);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_gpu_dispatch: no GPU, skipped\n");
        return TL_SKIP;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major != 9) {
        printf("test_gpu_dispatch: written for sm_90 (device is sm_%d0), skipped\n", major);
        return TL_SKIP;
    }
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("gpu-dispatch");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    test_buckets(ctx);
    test_graphs(ctx);
    qjit_context_destroy(ctx);
    test_tune(tl_tmpdir("gpu-tune"));
    return tl_finish("test_gpu_dispatch");
}
