/*
 * test_gpu_gemm.c — every f16/bf16 tile and stage variant against the CPU reference of
 * tests/reference.c (through gpu_check.c) on fresh random data, with poisoned outputs,
 * tail shapes and padded leading dimensions; CUDA graph
 * capture replaying bit-identically; bad launch input rejected with nothing written;
 * a miss during capture refused without breaking the capture; a chain of GEMMs launched
 * with an early start (QJIT_PDL) equal to the synchronized chain, and under QJIT_PDL=2 GEMMs
 * whose weights the kernel before wrote.  Skips with no GPU.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the check driver, built into each GPU test */

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ variants */
static const char *const configs[] = {
    "kernel=mma tile=128x128x32 warps=2x2 stages=4",   "kernel=mma tile=128x256x32 warps=2x4 stages=3",
    "kernel=mma tile=128x256x32 warps=2x4 stages=4",   "kernel=mma tile=256x128x32 warps=4x2 stages=3",
    "kernel=mma tile=128x128x64 warps=2x2 stages=3",   "kernel=mma tile=64x64x32 warps=2x2 stages=2",
    "kernel=mma tile=64x128x32 warps=2x2 stages=5",    "kernel=mma tile=128x64x64 warps=2x2 stages=6",
    "kernel=wgmma tile=128x256x64 warps=2x1 stages=3", "kernel=wgmma tile=128x256x64 warps=2x1 stages=4",
    "kernel=wgmma tile=256x128x64 warps=2x1 stages=4", "kernel=wgmma tile=128x128x64 warps=1x1 stages=5",
    "kernel=wgmma tile=64x256x64 warps=1x1 stages=4",  "kernel=wgmma tile=128x128x64 warps=2x2 stages=2",
    "kernel=gemv tile=8x16x32 warps=1x4 stages=8",    "kernel=gemv tile=16x32x32 warps=1x2 stages=3",
    "kernel=gemv tile=32x16x32 warps=1x8 stages=2",    "kernel=gemv",
    "kernel=gemv tile=8x64x32 warps=2x4 stages=6",     "kernel=gemv tile=16x128x32 warps=4x2 stages=3",
    "kernel=gemv tile=64x64x32 warps=4x2 stages=2",
    /* weights and tokens through a shared-memory ring (stages 9..32); one warp along K wraps its
     * ring of 9 steps at K = 1000 */
    "kernel=gemv tile=8x16x32 warps=1x4 stages=16",    "kernel=gemv tile=16x32x32 warps=1x1 stages=9",
    "tile=auto",
};
#define NCONF (int)(sizeof configs / sizeof configs[0])

typedef struct job {
    qjit_context *ctx;
    char text[256];
} job;

static void *precompile_one(void *p)
{
    job *j = p;
    qjit_gemm_desc d;
    if (qjit_gemm_desc_parse(j->text, &d) == QJIT_OK)
        qjit_gemm_precompile(j->ctx, &d, QJIT_ARCH_SM90A, NULL);
    return NULL;
}

static void test_variants(qjit_context *ctx)
{
    static const char *const types[] = {"f16", "bf16"};
    static const char *const outs[] = {"f16", "bf16", "f32"};
    static const problem shapes[] = {
        {1, 200, 264, 264, 264, 200},     {7, 257, 40, 48, 40, 259},
        {128, 128, 256, 256, 256, 128},   {1000, 333, 1000, 1000, 1000, 336},
        {129, 1, 8, 8, 8, 1},             {77, 600, 520, 520, 528, 601},
    };
    /* QJIT_TEST_FILTER=a|b: only descriptors containing a or b; QJIT_TEST_SHAPES=n: the
     * first n shapes (a quick pass, e.g. under compute-sanitizer) */
    const char *filter = getenv("QJIT_TEST_FILTER");
    size_t nshapes = sizeof shapes / sizeof shapes[0];
    if (getenv("QJIT_TEST_SHAPES") && atoi(getenv("QJIT_TEST_SHAPES")) > 0 &&
        (size_t)atoi(getenv("QJIT_TEST_SHAPES")) < nshapes)
        nshapes = (size_t)atoi(getenv("QJIT_TEST_SHAPES"));
    job jobs[2 * 3 * NCONF];
    int nj = 0;
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 3; o++)
            for (int c = 0; c < NCONF; c++) {
                jobs[nj].ctx = ctx;
                snprintf(jobs[nj].text, sizeof jobs[nj].text, "gemm a=%s b=%s out=%s bias=%d %s",
                         types[t], types[t], outs[o], (c + o) % 2, configs[c]);
                if (!filter || tl_matches_any(jobs[nj].text, filter))
                    nj++;
            }
    /* compile in parallel first (precompile fills the cache), then get = disk hits */
    pthread_t th[2 * 3 * NCONF];
    for (int i = 0; i < nj; i++)
        pthread_create(&th[i], NULL, precompile_one, &jobs[i]);
    for (int i = 0; i < nj; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < nj; i++) {
        qjit_gemm_desc d;
        qjit_gemm *g = NULL;
        CHECK_OK(qjit_gemm_desc_parse(jobs[i].text, &d));
        qjit_status st = qjit_context_get_gemm(ctx, &d, NULL, &g);
        CHECK(st == QJIT_OK, "%s: %s", jobs[i].text, qjit_last_error());
        if (st != QJIT_OK)
            continue;
        qjit_gemm_info info;
        qjit_gemm_get_info(g, &info);
        double worst = 0;
        for (size_t s = 0; s < nshapes; s++) {
            double e = -1;
            long mismatch = 0;
            if (!run_problem(g, &d, &info, shapes[s], &e, &mismatch))
                e = -1;
            CHECK(e >= 0 && e <= bound_for(&d), "%s m=%lld n=%lld k=%lld: error %.3g (bound %.0e)",
                  info.text, (long long)shapes[s].m, (long long)shapes[s].n,
                  (long long)shapes[s].k, e, bound_for(&d));
            if (e > worst || e < 0)
                worst = e < 0 ? INFINITY : e;
        }
        printf("  %-110s regs %3u  max err %.2e\n", info.text, info.registers, worst);
    }
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.disk_hits > 0, "gets after precompile were not disk hits (%llu)",
          (unsigned long long)s.disk_hits);
}

/* ------------------------------------------------------------ graphs */
static void test_graph(qjit_context *ctx)
{
    qjit_gemm_desc d;
    qjit_gemm *g;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 bias=1", &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    const int64_t M = 333, N = 520, K = 776, L = 10;
    size_t na = M * K, nb = N * K, nd = M * N;
    uint16_t *h = malloc((na + nb + N) * 2);
    void *da, *db, *dbias, *dd[10], *de[10];
    CK(cudaMalloc(&da, na * 2));
    CK(cudaMalloc(&db, nb * 2));
    CK(cudaMalloc(&dbias, N * 2));
    for (int i = 0; i < L; i++) {
        CK(cudaMalloc(&dd[i], nd * 2));
        CK(cudaMalloc(&de[i], nd * 2));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* a kernel never loaded, asked for during capture: refused, capture intact */
    qjit_gemm_desc other;
    qjit_gemm *og = NULL;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=f16 b=f16 out=f32 tile=64x64x64 warps=2x2 stages=2", &other));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    qjit_status st = qjit_context_get_gemm(ctx, &other, (struct CUstream_st *)s, &og);
    CHECK(st == QJIT_ERROR_CAPTURING, "miss during capture gave %s", qjit_status_string(st));
    CHECK(strstr(qjit_last_error(), "capturing") != NULL, "msg: %s", qjit_last_error());
    qjit_gemm *g2 = NULL;
    CHECK_OK(qjit_context_get_gemm(ctx, &d, (struct CUstream_st *)s, &g2)); /* a hit is fine */
    CHECK(g2 == g, "hit during capture returned another handle");
    for (int i = 0; i < L; i++) {
        qjit_gemm_args a = {da, db, dd[i], dbias, NULL, NULL, NULL, M, N - i, K, K, K, N};
        CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)s));
    }
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));

    for (int round = 0; round < 3; round++) {
        /* fresh contents each round: the graph must pick them up */
        fill_elems(QJIT_DTYPE_BF16, h, na + nb + N);
        CK(cudaMemcpy(da, h, na * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, h + na, nb * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dbias, h + na + nb, N * 2, cudaMemcpyHostToDevice));
        for (int i = 0; i < L; i++) {
            CK(cudaMemset(dd[i], 0xff, nd * 2));
            CK(cudaMemset(de[i], 0xff, nd * 2));
            CK(cudaDeviceSynchronize()); /* s is non-blocking: it does not wait for these */
            qjit_gemm_args a = {da, db, de[i], dbias, NULL, NULL, NULL, M, N - i, K, K, K, N};
            CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)s));
        }
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        int same = 1;
        uint16_t *x = malloc(nd * 2), *y = malloc(nd * 2);
        for (int i = L - 1; i >= 0; i--) { /* ends with launch 0, the one with n = N */
            CK(cudaMemcpy(x, dd[i], nd * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y, de[i], nd * 2, cudaMemcpyDeviceToHost));
            same &= memcmp(x, y, nd * 2) == 0;
        }
        /* and the eager result of launch 0 is right, not just equal */
        double num = 0, den = 0;
        for (int64_t i = 0; i < M; i += 37)
            for (int64_t j = 0; j < N; j += 11) {
                double r = qjit_bf16_to_f32(h[na + nb + j]);
                for (int64_t k = 0; k < K; k++)
                    r += (double)qjit_bf16_to_f32(h[i * K + k]) * qjit_bf16_to_f32(h[na + j * K + k]);
                double q = qjit_bf16_to_f32(y[i * N + j]);
                num += (q - r) * (q - r);
                den += r * r;
            }
        free(x);
        free(y);
        CHECK(same, "round %d: graph replay differs from eager launches", round);
        CHECK(sqrt(num / den) < 1e-2, "round %d: error %.3g", round, sqrt(num / den));
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(s));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dbias);
    for (int i = 0; i < L; i++) {
        cudaFree(dd[i]);
        cudaFree(de[i]);
    }
    free(h);
}

/* ------------------------------------------------------------ bad input */
static void test_bad_launch(qjit_context *ctx)
{
    qjit_gemm_desc d;
    qjit_gemm *g;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=f16 b=f16 out=f16 bias=1", &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    void *da, *db, *dd, *dbias;
    CK(cudaMalloc(&da, 1 << 20));
    CK(cudaMalloc(&db, 1 << 20));
    CK(cudaMalloc(&dd, 1 << 20));
    CK(cudaMalloc(&dbias, 1 << 12));
    CK(cudaMemset(dd, 0x5a, 1 << 20));
    qjit_gemm_args ok = {da, db, dd, dbias, NULL, NULL, NULL, 64, 64, 64, 64, 64, 64};
    struct {
        const char *what, *needle;
        qjit_gemm_args a;
    } bad[] = {
        {"null a", "'a'", ok},  {"null d", "'d'", ok},  {"null bias", "'bias'", ok},
        {"misaligned a", "aligned", ok},       {"misaligned b", "aligned", ok},
        {"odd d", "aligned", ok},              {"k not multiple", "k=60", ok},
        {"lda small", "lda=32", ok},           {"ldb odd", "ldb=65", ok},
        {"ldd small", "ldd=63", ok},           {"negative m", "negative", ok},
    };
    bad[0].a.a = NULL;
    bad[1].a.d = NULL;
    bad[2].a.bias = NULL;
    bad[3].a.a = (char *)da + 8;
    bad[4].a.b = (char *)db + 2;
    bad[5].a.d = (char *)dd + 1;
    bad[6].a.k = 60;
    bad[6].a.lda = bad[6].a.ldb = 64;
    bad[7].a.lda = 32;
    bad[8].a.ldb = 65;
    bad[9].a.ldd = 63;
    bad[10].a.m = -1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qjit_status st = qjit_gemm_launch(g, &bad[i].a, NULL);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "%s: %s", bad[i].what, qjit_status_string(st));
        CHECK(strstr(qjit_last_error(), bad[i].needle) != NULL, "%s: message '%s'",
              bad[i].what, qjit_last_error());
    }
    CK(cudaDeviceSynchronize());
    unsigned char *h = malloc(1 << 20);
    CK(cudaMemcpy(h, dd, 1 << 20, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (int i = 0; i < (1 << 20); i++)
        untouched &= h[i] == 0x5a;
    CHECK(untouched, "a rejected launch wrote the output");
    /* M == 0 is a no-op that succeeds */
    qjit_gemm_args empty = ok;
    empty.m = 0;
    CHECK_OK(qjit_gemm_launch(g, &empty, NULL));
    free(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    cudaFree(dbias);
}

/* ------------------------------------------------------------ early start (QJIT_PDL) */
/* n device matrices [h][h] of bf16 values in ±0.04. */
static void small_weights(void **w, int n, int h)
{
    uint16_t *hw = malloc((size_t)h * h * 2);
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < (size_t)h * h; j++)
            hw[j] = qjit_bf16_from_f32(uni(-1.0f, 1.0f) * 0.04f);
        CK(cudaMalloc(&w[i], (size_t)h * h * 2));
        CK(cudaMemcpy(w[i], hw, (size_t)h * h * 2, cudaMemcpyHostToDevice));
    }
    free(hw);
}

/* Two contexts over one cache, one made under QJIT_PDL=pdl and one under QJIT_PDL=0 (no early
 * start), and the bf16 auto handle of each. */
static void early_and_plain(const char *dir, const char *pdl, qjit_context **early,
                            qjit_context **plain, qjit_gemm **ge, qjit_gemm **gp)
{
    setenv("QJIT_PDL", pdl, 1);
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    CHECK_OK(qjit_context_create(&o, early));
    setenv("QJIT_PDL", "0", 1);
    CHECK_OK(qjit_context_create(&o, plain));
    unsetenv("QJIT_PDL");
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16", &d));
    CHECK_OK(qjit_context_get_gemm(*early, &d, NULL, ge));
    CHECK_OK(qjit_context_get_gemm(*plain, &d, NULL, gp));
}

/* A chain of GEMMs where each reads the previous one's output (X1 = X0·W1ᵀ, X2 = X1·W2ᵀ,
 * ...), launched back to back with programmatic stream serialization (a context made with
 * QJIT_PDL=1): each kernel may start before the previous one ends, and its
 * griddepcontrol.wait must hold its reads until that one's writes are visible.  The
 * outputs must equal, bit for bit, the same chain run with a synchronize between steps in
 * a context without it, eagerly and as a graph replayed over new inputs.  Decode shapes
 * (M = 1, 16) and a prefill one (M = 333), the auto handle's kernels. */
static void test_pdl_chain(const char *dir)
{
    qjit_context *early, *plain;
    qjit_gemm *ge, *gp;
    early_and_plain(dir, "1", &early, &plain, &ge, &gp);
    enum { STEPS = 6, H = 2048 };
    static const int64_t ms[] = {1, 16, 333};
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *w[STEPS];
    small_weights(w, STEPS, H); /* the chain's values stay near 1 */
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int64_t m = ms[mi];
        const size_t nb = (size_t)m * H * 2;
        void *xe[STEPS + 1], *xp[STEPS + 1], *xg[STEPS + 1];
        for (int i = 0; i <= STEPS; i++) {
            CK(cudaMalloc(&xe[i], nb));
            CK(cudaMalloc(&xp[i], nb));
            CK(cudaMalloc(&xg[i], nb));
        }
        uint16_t *hx = malloc(nb), *he = malloc(nb), *hp = malloc(nb), *hg = malloc(nb);
        /* the graph of the early-start chain, captured once, replayed over new inputs */
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < STEPS; i++) {
            qjit_gemm_args a = {xg[i], w[i], xg[i + 1], NULL, NULL, NULL, NULL, m, H, H, H, H, H};
            CHECK_OK(qjit_gemm_launch(ge, &a, (struct CUstream_st *)st));
        }
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        bool eager_same = true, graph_same = true;
        for (int round = 0; round < 5; round++) {
            for (size_t j = 0; j < nb / 2; j++)
                hx[j] = qjit_bf16_from_f32(uni(-1.0f, 1.0f));
            CK(cudaMemcpy(xe[0], hx, nb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(xp[0], hx, nb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(xg[0], hx, nb, cudaMemcpyHostToDevice));
            for (int i = 1; i <= STEPS; i++) { /* poisoned; the graph's only before its first
                                                * replay, then left to it, as in a model (a
                                                * kernel that read a replay before's values
                                                * would show) */
                CK(cudaMemset(xe[i], 0xff, nb));
                CK(cudaMemset(xp[i], 0xff, nb));
                if (round == 0)
                    CK(cudaMemset(xg[i], 0xff, nb));
            }
            CK(cudaDeviceSynchronize()); /* st is non-blocking: it does not wait for these */
            for (int i = 0; i < STEPS; i++) { /* step by step, synchronized */
                qjit_gemm_args a = {xp[i], w[i], xp[i + 1], NULL, NULL, NULL, NULL, m, H, H, H, H, H};
                CHECK_OK(qjit_gemm_launch(gp, &a, (struct CUstream_st *)st));
                CK(cudaStreamSynchronize(st));
            }
            for (int i = 0; i < STEPS; i++) { /* back to back, each may start early */
                qjit_gemm_args a = {xe[i], w[i], xe[i + 1], NULL, NULL, NULL, NULL, m, H, H, H, H, H};
                CHECK_OK(qjit_gemm_launch(ge, &a, (struct CUstream_st *)st));
            }
            CK(cudaGraphLaunch(exec, st));
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(hp, xp[STEPS], nb, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(he, xe[STEPS], nb, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hg, xg[STEPS], nb, cudaMemcpyDeviceToHost));
            eager_same &= memcmp(hp, he, nb) == 0;
            graph_same &= memcmp(hp, hg, nb) == 0;
        }
        bool finite = true; /* the chain's end holds values, not the poison */
        for (size_t j = 0; j < nb / 2; j++)
            finite &= isfinite(qjit_bf16_to_f32(hp[j])) && hp[j] != 0xffff;
        CHECK(finite, "m=%lld: the synchronized chain left poison or overflowed", (long long)m);
        CHECK(eager_same, "m=%lld: early-start launches differ from synchronized ones", (long long)m);
        CHECK(graph_same, "m=%lld: the early-start graph differs from synchronized launches",
              (long long)m);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        for (int i = 0; i <= STEPS; i++) {
            cudaFree(xe[i]);
            cudaFree(xp[i]);
            cudaFree(xg[i]);
        }
        free(hx);
        free(he);
        free(hp);
        free(hg);
    }
    for (int i = 0; i < STEPS; i++)
        cudaFree(w[i]);
    CK(cudaStreamDestroy(st));
    qjit_context_destroy(early);
    qjit_context_destroy(plain);
}

/* Under QJIT_PDL=2 every GEMM starts early but reads nothing before its wait, so a GEMM
 * whose weights the kernel just before it wrote is right too: Y = X·Wᵢᵀ (16 × H, X's first
 * 16 rows, zero past M), then Z = X·Yᵀ with Y as B (N = 16), the second `gemv` at decode M, back to back eagerly and as a
 * graph, equal bit for bit to the synchronized launches of a context without the early
 * start.  (Under QJIT_PDL=1 `gemv` reads its first weights before the wait: the caller
 * vouches that no kernel writes them just before.) */
static void test_pdl_weights_written(const char *dir)
{
    qjit_context *early, *plain;
    qjit_gemm *ge, *gp;
    early_and_plain(dir, "2", &early, &plain, &ge, &gp);
    enum { PAIRS = 4, H = 2048, R = 16 };
    static const int64_t ms[] = {1, 16};
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *w[PAIRS];
    small_weights(w, PAIRS, H);
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int64_t m = ms[mi];
        /* per run (0 synchronized, 1 eager early, 2 graph): X [m][H], Y_i [R][H], Z_i [m][R] */
        void *x[3], *y[3][PAIRS], *z[3][PAIRS];
        const size_t xb = (size_t)m * H * 2, yb = (size_t)R * H * 2, zb = (size_t)m * R * 2;
        for (int r = 0; r < 3; r++) {
            CK(cudaMalloc(&x[r], xb));
            for (int i = 0; i < PAIRS; i++) {
                CK(cudaMalloc(&y[r][i], yb));
                CK(cudaMalloc(&z[r][i], zb));
            }
        }
        /* Y = X·Wᵀ needs M = R rows of X: the first R rows of a 16-row X, its rows past m zero */
        void *x16[3];
        for (int r = 0; r < 3; r++) {
            CK(cudaMalloc(&x16[r], (size_t)R * H * 2));
            CK(cudaMemset(x16[r], 0, (size_t)R * H * 2));
        }
#define PAIR_LAUNCHES(g, r)                                                                     \
    for (int i = 0; i < PAIRS; i++) {                                                           \
        qjit_gemm_args ya = {x16[r], w[i], y[r][i], NULL, NULL, NULL, NULL, R, H, H, H, H, H};   \
        qjit_gemm_args za = {x[r], y[r][i], z[r][i], NULL, NULL, NULL, NULL, m, R, H, H, H, R};  \
        CHECK_OK(qjit_gemm_launch(g, &ya, (struct CUstream_st *)st));                           \
        if (r == 0)                                                                              \
            CK(cudaStreamSynchronize(st));                                                       \
        CHECK_OK(qjit_gemm_launch(g, &za, (struct CUstream_st *)st));                           \
        if (r == 0)                                                                              \
            CK(cudaStreamSynchronize(st));                                                       \
    }
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        PAIR_LAUNCHES(ge, 2)
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        uint16_t *hx = malloc((size_t)R * H * 2), *hz[3];
        for (int r = 0; r < 3; r++)
            hz[r] = malloc(zb);
        bool eager_same = true, graph_same = true, written = true;
        for (int round = 0; round < 5; round++) {
            for (size_t j = 0; j < (size_t)R * H; j++)
                hx[j] = j < (size_t)m * H ? qjit_bf16_from_f32(uni(-1.0f, 1.0f)) : 0;
            for (int r = 0; r < 3; r++) {
                CK(cudaMemcpy(x16[r], hx, (size_t)R * H * 2, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(x[r], hx, xb, cudaMemcpyHostToDevice));
                for (int i = 0; i < PAIRS && (r < 2 || round == 0); i++) {
                    CK(cudaMemset(y[r][i], 0xff, yb));
                    CK(cudaMemset(z[r][i], 0xff, zb));
                }
            }
            CK(cudaDeviceSynchronize());
            PAIR_LAUNCHES(gp, 0)
            PAIR_LAUNCHES(ge, 1)
            CK(cudaGraphLaunch(exec, st));
            CK(cudaStreamSynchronize(st));
            for (int i = 0; i < PAIRS; i++) {
                for (int r = 0; r < 3; r++)
                    CK(cudaMemcpy(hz[r], z[r][i], zb, cudaMemcpyDeviceToHost));
                eager_same &= memcmp(hz[0], hz[1], zb) == 0;
                graph_same &= memcmp(hz[0], hz[2], zb) == 0;
                for (size_t j = 0; j < zb / 2; j++)
                    written &= isfinite(qjit_bf16_to_f32(hz[0][j])) && hz[0][j] != 0xffff;
            }
        }
#undef PAIR_LAUNCHES
        CHECK(written, "m=%lld: the synchronized pairs left poison or overflowed", (long long)m);
        CHECK(eager_same, "m=%lld: QJIT_PDL=2 launches of a GEMM whose B the kernel before wrote "
                          "differ from synchronized ones", (long long)m);
        CHECK(graph_same, "m=%lld: the QJIT_PDL=2 graph of those GEMMs differs from synchronized "
                          "launches", (long long)m);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        free(hx);
        for (int r = 0; r < 3; r++) {
            free(hz[r]);
            cudaFree(x[r]);
            cudaFree(x16[r]);
            for (int i = 0; i < PAIRS; i++) {
                cudaFree(y[r][i]);
                cudaFree(z[r][i]);
            }
        }
    }
    for (int i = 0; i < PAIRS; i++)
        cudaFree(w[i]);
    CK(cudaStreamDestroy(st));
    qjit_context_destroy(early);
    qjit_context_destroy(plain);
}

static void test_warm_get(qjit_context *ctx)
{
    qjit_gemm_desc d;
    qjit_gemm *g1, *g2;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=f32", &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g1));
    qjit_stats before, after;
    qjit_context_stats(ctx, &before);
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g2));
    qjit_context_stats(ctx, &after);
    CHECK(g1 == g2, "second get returned another handle");
    CHECK(after.memory_hits == before.memory_hits + 1 && after.compiles == before.compiles &&
              after.disk_hits == before.disk_hits,
          "second get was not an in-memory hit");
    /* an arch the device cannot run is refused up front */
    qjit_gemm_desc d80 = d;
    d80.arch = QJIT_ARCH_SM80;
    qjit_gemm *g3 = NULL;
    qjit_status st = qjit_context_get_gemm(ctx, &d80, NULL, &g3);
    CHECK(st == QJIT_ERROR_UNSUPPORTED && strstr(qjit_last_error(), "sm_80"),
          "sm_80 kernel on sm_90: %s %s", qjit_status_string(st), qjit_last_error());
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_gpu_gemm: no GPU visible, skipped\n");
        return TL_SKIP;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major != 9) {
        printf("test_gpu_gemm: written for sm_90 (device is sm_%d0), skipped\n", major);
        return TL_SKIP;
    }
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("gpu-gemm");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    test_variants(ctx);
    if (!getenv("QJIT_TEST_FILTER")) {
        test_graph(ctx);
        test_bad_launch(ctx);
        test_warm_get(ctx);
        test_pdl_chain(o.cache_dir);
        test_pdl_weights_written(o.cache_dir);
    }
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_gemm");
}
