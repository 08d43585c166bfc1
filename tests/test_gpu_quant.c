/*
 * test_gpu_quant.c — every quantized pair × scale mode of DESIGN.md §2, at two or more tile
 * configurations, against the double reference of tests/reference.c: fresh random data,
 * poisoned outputs, tail shapes (M ∈ {1, 5, 64, 333}, and 1000 and 4097 for the Hopper
 * wgmma kernels; N and K off the tile).  Integer pairs with tensor/row/col scales must
 * match the reference's f32 epilogue bit for bit; every other pair must stay within the
 * normalized-error bound printed beside it.
 * Also: bad launch input (missing scale or zero pointer, K off the group) is refused
 * with nothing written.  Skips without an sm_90 GPU.  QJIT_TEST_FILTER=a|b|... runs
 * the descriptors whose text contains one of the substrings, QJIT_TEST_SKIP=a|b|... leaves
 * out those that contain one; QJIT_TEST_SHAPES=n only the first n shapes (a
 * quick pass, e.g. under compute-sanitizer); QJIT_TEST_PER_CONFIG=n at most n descriptors
 * of each configuration.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the check driver, built into each GPU test */

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "quant_list.h"

/* The weight-only kernel, and mma when named with split=S, split K across a cluster when
 * the output tiles leave SMs idle (chosen at launch).  For decode shapes: the split is taken
 * (launch_config says so), its result is right at M = 1, 3, 16, 17, 64 with N and K off the
 * tile, two eager launches agree bit for bit (the partial tiles are summed in a fixed
 * order), and a graph captured in global mode replays them bit for bit, over 100 rounds of
 * new input contents.  Without want_split, the same checks of any configuration (the
 * split is not asked for). */
static void test_cluster_split(qjit_context *ctx, const char *text, int max_shapes, bool want_split)
{
    qjit_gemm_desc d;
    qjit_gemm *g;
    CHECK_OK(qjit_gemm_desc_parse(text, &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    qjit_gemm_info info;
    qjit_gemm_get_info(g, &info);
    const int64_t M = 1, N = 520, K = 128 * 16;
    double err = 0, worst = 0;
    long mism = 0;
    /* decode sizes and one of several tile rows, N and K off the tile (few enough output
     * tiles that the split is taken) */
    static const int64_t ms[] = {1, 3, 16, 17, 64, 333};
    const int64_t unit = d.sb == QJIT_SCALE_GROUP ? d.group : 3 * info.k_multiple;
    const int nms = max_shapes > 0 && max_shapes < 6 ? max_shapes : 6;
    for (int i = 0; i < nms; i++) {
        CHECK(run_one(g, &info.desc, &info, ms[i], N, K + unit, &err, &mism) &&
                  err <= bound_for(&info.desc) && (!bit_exact_pair(&info.desc) || mism == 0),
              "%s split m=%lld: error %.3g > %.1e, or %ld outputs not bit-exact", info.text,
              (long long)ms[i], err, bound_for(&info.desc), mism);
        worst = err > worst ? err : worst;
    }
    err = worst;
    /* scales of whatever modes the pair has (tests/gpu_check.c's shapes and types) */
    qjit_dtype sat, sbt;
    const size_t na = scale_count(&d, 1, M, N, K, &sat), nb = scale_count(&d, 0, M, N, K, &sbt);
    buf A, B, SA, S, Z, BIAS, D[3];
    buf_make(&A, bytes_of(d.a, M, K));
    /* zero points (u4 groups), in the group-scale type, fractional ones too */
    const size_t nz = d.zeros ? (size_t)N * (size_t)(K / d.group) : 0;
    buf_make(&Z, nz ? nz * (size_t)(bits_of(d.group_scale) / 8) : 16);
    if (nz) {
        fill_scales(d.group_scale, Z.h, nz, 0.f, 15.f);
        buf_up(&Z);
    }
    buf_make(&BIAS, bytes_of(d.out, 1, N)); /* a descriptor with bias=1 needs one */
    fill_elems(d.out, BIAS.h, (size_t)N);
    buf_up(&BIAS);
    buf_make(&B, bytes_of(d.b, N, K));
    buf_make(&SA, na ? na * (size_t)(bits_of(sat) / 8) : 16);
    buf_make(&S, nb ? nb * (size_t)(bits_of(sbt) / 8) : 16);
    const bool int_pair = d.a == QJIT_DTYPE_S8;
    fill_scales(sat, SA.h, na, int_pair ? 0.5e-3f : 0.5f, int_pair ? 1.5e-3f : 1.5f);
    buf_up(&SA);
    for (int i = 0; i < 3; i++)
        buf_make(&D[i], bytes_of(d.out, M, N));
    qjit_gemm_args a = {A.d, B.d, D[0].d, d.bias ? BIAS.d : NULL, na ? SA.d : NULL,
                        nb ? S.d : NULL, nz ? Z.d : NULL, M, N, K, K, K, N};
    /* launch_config refuses kernels that take tensor maps (wgmma_tma, wgmma_wqr), and says
     * so; those are checked below all the same, as launched by qjit_gemm_launch, and a split
     * one's cluster is not visible here */
    qjit_launch_config cfg = {0};
    const qjit_status cs = qjit_gemm_launch_config(g, &a, &cfg);
    if (cs != QJIT_ERROR_UNSUPPORTED)
        CHECK_OK(cs);
    else
        CHECK(strstr(qjit_last_error(), "tensor maps") != NULL, "%s: launch_config refused it: %s",
              info.text, qjit_last_error());
    CHECK(!want_split || cs != QJIT_OK || (cfg.cluster_z > 1 && cfg.grid[2] == cfg.cluster_z),
          "%s m=%lld n=%lld k=%lld: no split across a cluster (cluster_z %u, grid z %u)",
          info.text, (long long)M, (long long)N, (long long)K, cfg.cluster_z, cfg.grid[2]);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    a.d = D[2].d;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const int rounds = max_shapes > 0 ? 2 : want_split ? 100 : 10; /* fewer under QJIT_TEST_SHAPES */
    for (int round = 0; round < rounds; round++) { /* replays, each with new inputs */
        fill_elems(d.a, A.h, (size_t)(M * K));
        fill_elems(d.b, B.h, (size_t)(N * K));
        if (nb)
            fill_scales(sbt, S.h, nb, 0.5e-2f, 1.5e-2f);
        buf_up(&A);
        buf_up(&B);
        buf_up(&S);
        for (int i = 0; i < 3; i++)
            CK(cudaMemset(D[i].d, 0xff, D[i].n));
        CK(cudaDeviceSynchronize()); /* st is non-blocking: it does not wait for these */
        for (int i = 0; i < 2; i++) {
            a.d = D[i].d;
            CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)st));
        }
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        for (int i = 0; i < 3; i++)
            CK(cudaMemcpy(D[i].h, D[i].d, D[i].n, cudaMemcpyDeviceToHost));
        CHECK(memcmp(D[0].h, D[1].h, D[0].n) == 0, "round %d: two eager split launches differ",
              round);
        CHECK(memcmp(D[0].h, D[2].h, D[0].n) == 0, "round %d: graph replay differs from eager",
              round);
    }
    printf("%-96s clusters of %u CTAs along K: %d exact replays, error %.2e (M 1..333)\n",
           info.text, cfg.cluster_z, rounds, err);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
    buf *all[] = {&A, &B, &SA, &S, &Z, &BIAS, &D[0], &D[1], &D[2]};
    for (int i = 0; i < 9; i++)
        buf_free(all[i]);
}

/* wgmma_tma does wgmma_f8's sums in wgmma_f8's order (its promotion overlaps the next K
 * tile's wgmma; its tiles arrive by TMA, B multicast across a CTA pair when M has two tile
 * rows or more), and wgmma's for f16/bf16, so at the same tile its output must equal
 * theirs byte for byte: at
 * M = 1 and 64 (one tile row: no cluster), 333 (an odd count of tile rows: one CTA of the
 * last pair works past M), 1000 and 4097, N and K off the tile, against the reference too.
 * Then a graph of one launch at M = 333 replays bit for bit like eager launches over 20
 * rounds of new inputs (the tensor maps are captured with the launch). */
static void test_tma_twins(qjit_context *ctx)
{
    static const struct {
        const char *pair, *twin, *tile;
    } cases[] = {
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16", "wgmma_f8", " tile=128x128x128 warps=2x1 stages=5"},
        {"gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16", "wgmma_f8", " tile=64x128x128 warps=1x1 stages=6"},
        {"gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16", "wgmma_f8", " tile=128x128x128 warps=2x1 stages=5"},
        {"gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16", "wgmma_f8", " tile=128x64x128 warps=2x1 stages=6"},
        {"gemm a=e5m2 b=e4m3 sa=tensor sb=block out=f32 bias=1", "wgmma_f8", " tile=128x128x128 warps=2x1 stages=5"},
        {"gemm a=e4m3 b=e4m3 sa=row sb=tensor out=f16", "wgmma_f8", " tile=64x128x128 warps=1x1 stages=6"},
        /* f16/bf16: one f32 accumulator over K, the same wgmma in the same order as wgmma */
        {"gemm a=bf16 b=bf16 out=bf16", "wgmma", " tile=128x256x64 warps=2x1 stages=3"},
        {"gemm a=f16 b=f16 out=f32", "wgmma", " tile=128x128x64 warps=2x1 stages=4"},
    };
    static const int64_t ms[] = {1, 64, 333, 1000, 4097};
    const int64_t N = 520, K = 128 * 8 + 48;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256], twin[256];
        snprintf(text, sizeof text, "%s kernel=wgmma_tma%s", cases[i].pair, cases[i].tile);
        snprintf(twin, sizeof twin, "%s kernel=%s%s", cases[i].pair, cases[i].twin, cases[i].tile);
        qjit_gemm_desc d, dt;
        qjit_gemm *g, *gt;
        CHECK_OK(qjit_gemm_desc_parse(text, &d));
        CHECK_OK(qjit_gemm_desc_parse(twin, &dt));
        CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
        CHECK_OK(qjit_context_get_gemm(ctx, &dt, NULL, &gt));
        qjit_gemm_info info;
        qjit_gemm_get_info(g, &info);
        double worst = 0;
        for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
            double err = 0;
            long mism = 0;
            CHECK(run_problem(g, &info.desc, &info, (problem){ms[j], N, K, 0, 0, 0, gt}, &err, &mism) &&
                      err <= bound_for(&info.desc),
                  "%s m=%lld: error %.3g (bound %.1e), or it differs from %s", text,
                  (long long)ms[j], err, bound_for(&info.desc), cases[i].twin);
            worst = err > worst ? err : worst;
        }
        printf("%-96s = %s byte for byte, error %.2e (M 1..4097)\n", info.text, cases[i].twin, worst);
    }

    /* graph replay at M = 333: clusters of two, the last pair half past M */
    qjit_gemm_desc d;
    qjit_gemm *g;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=wgmma_tma", &d));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g));
    const int64_t M = 333;
    buf A, B, SA, SB, D[2];
    buf_make(&A, bytes_of(d.a, M, K));
    buf_make(&B, bytes_of(d.b, N, K));
    buf_make(&SA, (size_t)M * 4);
    buf_make(&SB, (size_t)N * 4);
    for (int i = 0; i < 2; i++)
        buf_make(&D[i], bytes_of(d.out, M, N));
    fill_scales(QJIT_DTYPE_F32, SA.h, (size_t)M, 0.5f, 1.5f);
    fill_scales(QJIT_DTYPE_F32, SB.h, (size_t)N, 0.5f, 1.5f);
    buf_up(&SA);
    buf_up(&SB);
    qjit_gemm_args a = {A.d, B.d, D[1].d, NULL, SA.d, SB.d, NULL, M, N, K, K, K, N};
    /* a kernel that takes tensor maps is refused by launch_config, naming the way to launch
     * it, and the config is left as it was */
    qjit_launch_config cfg, before;
    memset(&cfg, 0x5a, sizeof cfg);
    before = cfg;
    qjit_status ls = qjit_gemm_launch_config(g, &a, &cfg);
    CHECK(ls == QJIT_ERROR_UNSUPPORTED && strstr(qjit_last_error(), "qjit_gemm_launch") &&
              memcmp(&cfg, &before, sizeof cfg) == 0,
          "launch_config of wgmma_tma: %s '%s' (expected a refusal that writes nothing)",
          qjit_status_string(ls), qjit_last_error());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    int same = 0;
    for (int round = 0; round < 20; round++) {
        fill_elems(d.a, A.h, (size_t)(M * K));
        fill_elems(d.b, B.h, (size_t)(N * K));
        buf_up(&A);
        buf_up(&B);
        for (int i = 0; i < 2; i++)
            CK(cudaMemset(D[i].d, 0xff, D[i].n));
        CK(cudaDeviceSynchronize()); /* st is non-blocking: it does not wait for these */
        a.d = D[0].d;
        CHECK_OK(qjit_gemm_launch(g, &a, (struct CUstream_st *)st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        for (int i = 0; i < 2; i++)
            CK(cudaMemcpy(D[i].h, D[i].d, D[i].n, cudaMemcpyDeviceToHost));
        CHECK(memcmp(D[0].h, D[1].h, D[0].n) == 0, "wgmma_tma round %d: graph replay differs from eager",
              round);
        same += memcmp(D[0].h, D[1].h, D[0].n) == 0;
    }
    printf("wgmma_tma m=%lld: %d/20 graph replays equal to eager\n", (long long)M, same);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
    buf *all[] = {&A, &B, &SA, &SB, &D[0], &D[1]};
    for (int i = 0; i < 6; i++)
        buf_free(all[i]);
}

/* Configurations, appended to each descriptor that contains one of `only`'s '|'-separated
 * parts (NULL: every one).  The
 * required ones must be supported; the others run where the kernel supports them and are
 * reported where not.  The kernels named by name are those `auto` does not choose yet. */
#define WEIGHT_ONLY "a=f16 b=|a=bf16 b=" /* W4A16, W8A16, f16/bf16 x e2m1 */
#define WQR_PAIRS "b=s4|b=u4|b=s8 sb=col|a=bf16 b=e2m1|a=e2m1 b=e2m1" /* 4-bit, s8, bf16 x e2m1 and MXFP4: wgmma_wqr runs those it serves */
#define FP8_PAIRS "b=e4m3 sa=tensor|b=e4m3 sa=row|b=e4m3 sa=block" /* FP8, not MX */
#define TMA_PAIRS FP8_PAIRS "|a=s8 b=s8" /* FP8 (not MX), W8A8 */
/* the pairs the decode kernel serves: weight-only 4-bit col and group 128/256, s8 col, e2m1
 * mx; W8A8; W4A8 col and group 128/256; FP8 tensor/row/block x tensor/col/block */
#define GEMV_WQ "16 b=s4 sb=col|16 b=u4 sb=col|16 b=s4 sb=group:128|16 b=s4 sb=group:256|" \
                "16 b=u4 sb=group:128|16 b=u4 sb=group:256|16 b=s8 sb=col|16 b=e2m1 sb=mx"
#define GEMV_I8 "a=s8 b=s8|a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:128|a=s8 b=s4 sa=row sb=group:256"
#define GEMV_F8 "b=e4m3 sa=tensor|b=e4m3 sa=row|b=e4m3 sa=block"
#define GEMV_PAIRS GEMV_WQ "|" GEMV_I8 "|" GEMV_F8
static const struct {
    const char *fields, *only;
    bool required;
} configs[] = {
    {"", NULL, true},
    {" tile=64x64x64 warps=2x2 stages=3", NULL, true},
    {" tile=128x128x64 warps=2x2 stages=3", NULL, false},
    {" tile=64x128x128 warps=1x1 stages=6", NULL, false},
    {" tile=128x64x128 warps=2x1 stages=6", NULL, false},
    {" kernel=wgmma_i8", "a=s8 b=s", true}, /* W8A8 and W4A8 */
    {" kernel=wgmma_i8 tile=64x128x128 warps=1x1 stages=6", "a=s8 b=s", true},
    {" kernel=wgmma_i8 tile=256x128x128 warps=2x1 stages=4", "a=s8 b=s", false},
    {" kernel=wgmma_mx", "sa=mx sb=mx", true}, /* MXFP8 and MXFP4 */
    {" kernel=wgmma_mx tile=64x128x128 warps=1x1 stages=6", "sa=mx sb=mx", true},
    {" kernel=wgmma_mx tile=128x64x128 warps=2x1 stages=6", "sa=mx sb=mx", true},
    /* 64x96 consumer tiles: MXFP4 with two parts and a total (overlapped promotion) */
    {" kernel=wgmma_mx tile=128x96x128 warps=2x1 stages=5", "sa=mx sb=mx", true},
    /* mma_wq's decode tiles of 16 and 32 tokens: the group fold (with bf16 tokens and zero
     * points it also carries the LOP3's offset, through the sums of A) */
    {" kernel=mma_wq tile=16x128x128 warps=1x4 stages=3", WEIGHT_ONLY, false},
    {" kernel=mma_wq tile=32x128x128 warps=1x4 stages=4", WEIGHT_ONLY, false},
    {" kernel=wgmma_wq", WEIGHT_ONLY, true},
    {" kernel=wgmma_wq tile=64x128x64 warps=1x1 stages=6", WEIGHT_ONLY, true},
    {" kernel=wgmma_wq tile=128x128x64 warps=2x1 stages=5", WEIGHT_ONLY, true},
    /* the heuristic's tile past M = 256 */
    {" kernel=wgmma_wq tile=256x128x64 warps=2x1 stages=4", WEIGHT_ONLY, true},
    /* the weights dequantized in registers (4-bit, col or group scales of A's type): its
     * heuristic, the 128- and 64-token tiles with two consumers, one consumer of 256 and
     * of 64 tokens */
    {" kernel=wgmma_wqr", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=6", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=64x128x64 warps=1x2 stages=8", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=256x64x64 warps=1x1 stages=5", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=64x64x64 warps=1x1 stages=3", WQR_PAIRS, false},
    /* a tile of 96 tokens: A's tiles past M by TMA boxes of 32 rows */
    {" kernel=wgmma_wqr tile=96x128x64 warps=1x2 stages=6", WQR_PAIRS, false},
    /* MXFP4's tokens two K tiles in flight (5 stages: LAG 2; 4 stages give 1, 6 and more 3) */
    {" kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=5", "a=e2m1 b=e2m1", false},
    /* the output in two passes (5 stages of 256x128 leave room for half the tile) */
    {" kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=5", WQR_PAIRS, false},
    /* and with K split across a cluster of up to 2 and 4 (the launch splits where the tiles
     * leave SMs idle: the tests' narrow N) */
    {" kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=6 split=2", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=128x64x64 warps=1x1 stages=8 split=4", WQR_PAIRS, false},
    /* the decode tiles: 16 and 32 tokens (the wgmma's N) by two consumers of 64 weights, 16
     * tokens by one (W4A8's K tile is 128: these are refused for it, by name) */
    {" kernel=wgmma_wqr tile=16x128x64 warps=1x2 stages=8", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=32x128x64 warps=1x2 stages=8", WQR_PAIRS, false},
    {" kernel=wgmma_wqr tile=16x64x64 warps=1x1 stages=8", WQR_PAIRS, false},
    /* W4A8 (int8 wgmma, 128 of K a tile): the 128-token tile of two consumers (with groups: a
     * part and a total), 256 tokens in one and in two output passes, one consumer of 64 */
    {" kernel=wgmma_wqr tile=128x128x128 warps=1x2 stages=6", "a=s8 b=s4", false},
    {" kernel=wgmma_wqr tile=256x128x128 warps=1x2 stages=3", "a=s8 b=s4", false},
    {" kernel=wgmma_wqr tile=256x128x128 warps=1x2 stages=4", "a=s8 b=s4", false},
    {" kernel=wgmma_wqr tile=64x64x128 warps=1x1 stages=3", "a=s8 b=s4", false},
    {" kernel=wgmma_wqr tile=256x64x128 warps=1x1 stages=5", "a=s8 b=s4", false},
    /* packed producers with 3 and 4 staging slots (loads two and three K tiles ahead) */
    {" kernel=wgmma_i8 tile=128x128x128 warps=2x1 stages=5", "a=s8 b=s4", true},
    {" kernel=wgmma_mx tile=64x128x128 warps=1x1 stages=5", "a=e2m1", true},
    /* MXFP8's codes decoded one pass after their copy (3 stages; two from 4 up) */
    {" kernel=wgmma_mx tile=128x128x128 warps=2x1 stages=3", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=wgmma_f8", FP8_PAIRS, true},
    {" kernel=wgmma_tma", TMA_PAIRS, true},
    {" kernel=wgmma_tma tile=64x128x128 warps=1x1 stages=6", TMA_PAIRS, true},
    {" kernel=wgmma_tma tile=128x64x128 warps=2x1 stages=6", TMA_PAIRS, true},
    /* gemv: its heuristic (the M bucket decides), one token tile of 8 with one warp, and
     * tiles of 16 and 32 tokens with 32 rows and eight warps along K */
    {" kernel=gemv", GEMV_PAIRS, true},
    {" kernel=gemv tile=8x16x128 warps=1x1 stages=3", "16 b=s4 sb=col|16 b=u4 sb=col|16 b=s4 sb=group:128|16 b=u4 sb=group:256|16 b=e2m1 sb=mx", true},
    {" kernel=gemv tile=16x32x128 warps=1x8 stages=2", "16 b=s4 sb=col|16 b=u4 sb=group:128", true},
    {" kernel=gemv tile=32x16x64 warps=1x2 stages=4", "16 b=s8 sb=col", true},
    {" kernel=gemv tile=16x32x64 warps=1x2 stages=3", "a=s8 b=s8|" GEMV_F8, true},
    {" kernel=gemv tile=8x64x64 warps=1x8 stages=2", "16 b=s8 sb=col|a=s8 b=s8|b=e4m3 sa=row", true},
    {" kernel=gemv tile=16x32x128 warps=1x4 stages=2", "16 b=s4 sb=col|16 b=e2m1 sb=mx", true},
    /* 4-bit weights, 32 rows a warp and 4 steps in flight (the small-m sweep) */
    {" kernel=gemv tile=8x32x128 warps=1x4 stages=4", "16 b=s4 sb=col|16 b=s4 sb=group:128|16 b=u4 sb=group:128|16 b=e2m1|a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:128|a=e2m1", true},
    /* warps across the rows (WM > 1): 64 and 128 rows a CTA, each warp its own 16-32 */
    {" kernel=gemv tile=16x64x128 warps=2x4 stages=2", "16 b=s4 sb=col|16 b=s4 sb=group:128|16 b=u4 sb=group:128|16 b=e2m1 sb=mx|a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:128", true},
    {" kernel=gemv tile=16x64x128 warps=4x2 stages=2", "16 b=u4 sb=group:256|a=s8 b=s4 sa=row sb=col", true},
    {" kernel=gemv tile=8x128x64 warps=4x2 stages=2", "16 b=s8 sb=col|a=s8 b=s8|" GEMV_F8, true},
    /* one tile of 32 or 64 tokens (M = 33-64) */
    {" kernel=gemv tile=64x64x64 warps=4x2 stages=2", "a=s8 b=s8|" GEMV_F8, true},
    {" kernel=gemv tile=32x64x128 warps=4x2 stages=2", "16 b=s4 sb=group:128|a=s8 b=s4 sa=row sb=group:128", true},
    /* MXFP8 on gemv: both sides dequantized into bf16 with their block scales (mx_regs),
     * the register ring, eight warps along K, and the shared-memory ring */
    {" kernel=gemv", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=gemv tile=16x32x64 warps=1x8 stages=3", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=gemv tile=16x64x64 warps=2x2 stages=2", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=gemv tile=8x16x64 warps=1x4 stages=16", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=gemv tile=16x32x64 warps=1x4 stages=9", "a=e4m3 b=e4m3 sa=mx", true},
    {" kernel=gemv tile=8x16x128 warps=1x1 stages=3", "a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:256", true},
    /* MXFP4 (e2m1 x e2m1) on gemv, by name until it has passed on the H100 */
    {" kernel=gemv", "a=e2m1", true},
    {" kernel=gemv tile=16x32x128 warps=1x4 stages=2", "a=e2m1", true},
    {" kernel=gemv tile=16x64x128 warps=2x2 stages=2", "a=e2m1", true},
    {" kernel=gemv tile=8x16x128 warps=1x1 stages=3", "a=e2m1", true},
    /* weights and tokens through a shared-memory ring (stages 9..32), 4-, 8- and 16-bit weights; one
     * warp along K with a ring of 9 steps wraps it at the long-K shape */
    {" kernel=gemv tile=16x32x128 warps=1x4 stages=9", "16 b=s4 sb=col|16 b=u4 sb=col|16 b=s4 sb=group:128|16 b=u4 sb=group:128|16 b=s4 sb=group:256|16 b=u4 sb=group:256|16 b=e2m1|a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:128|a=e2m1", true},
    {" kernel=gemv tile=8x16x128 warps=1x1 stages=9", "16 b=s4 sb=group:128|16 b=u4 sb=group:128|16 b=e2m1|a=s8 b=s4 sa=row sb=group:128|a=e2m1", true},
    {" kernel=gemv tile=16x64x128 warps=2x2 stages=9", "16 b=u4 sb=group:128|16 b=e2m1|a=e2m1", true},
    {" kernel=gemv tile=8x16x64 warps=1x4 stages=16", "16 b=s8 sb=col|a=s8 b=s8|" GEMV_F8, true},
    {" kernel=gemv tile=16x16x64 warps=1x1 stages=9", "16 b=s8 sb=col|a=s8 b=s8 sa=row|b=e4m3 sa=block", true},
    /* eight warps along K at M = 9-32 */
    {" kernel=gemv tile=16x32x128 warps=1x8 stages=2", "16 b=s4 sb=group:128|a=s8 b=s4 sa=row sb=col|a=s8 b=s4 sa=row sb=group:128", true},
    {" kernel=gemv tile=16x16x64 warps=1x8 stages=4", "16 b=s8 sb=col|a=s8 b=s8|" GEMV_F8, true},
};
#define NCONFIGS (int)(sizeof configs / sizeof configs[0])

static const char *skip; /* QJIT_TEST_SKIP: descriptors containing one of its parts are left out */

/* Descriptor i with configuration c in text; false when c does not apply to it or is skipped. */
static bool config_text(int i, int c, char *text, size_t cap)
{
    if (configs[c].only && !tl_matches_any(descs[i], configs[c].only))
        return false;
    snprintf(text, cap, "%s%s", descs[i], configs[c].fields);
    return !(skip && tl_matches_any(text, skip));
}

static void bad_input(qjit_gemm *g, const qjit_gemm_desc *d, const qjit_gemm_info *info)
{
    /* the smallest valid problem, then one field broken at a time */
    int64_t k = 256, m = 8, n = 8;
    void *dA, *dB, *dD, *dS, *dZ, *dBias;
    CK(cudaMalloc(&dA, 1 << 16));
    CK(cudaMalloc(&dB, 1 << 16));
    CK(cudaMalloc(&dD, 1 << 16));
    CK(cudaMalloc(&dS, 1 << 16));
    CK(cudaMalloc(&dZ, 1 << 16));
    CK(cudaMalloc(&dBias, 1 << 12));
    CK(cudaMemset(dD, 0x5a, 1 << 16));
    qjit_gemm_args ok = {dA, dB, dD, dBias, dS, dS, dZ, m, n, k, k, k, n};
    struct {
        const char *what, *needle;
        qjit_gemm_args a;
        bool applies;
    } bad[] = {
        {"no scale_b", "'scale_b'", ok, d->sb != QJIT_SCALE_NONE},
        {"no scale_a", "'scale_a'", ok, d->sa != QJIT_SCALE_NONE},
        {"no zeros_b", "'zeros_b'", ok, d->zeros != 0},
        {"k off group", "group", ok, d->sb == QJIT_SCALE_GROUP},
        {"k off mx", "32", ok, d->sa == QJIT_SCALE_MX || d->sb == QJIT_SCALE_MX},
        {"odd k for 4-bit", "odd", ok, bits_of(d->a) == 4 || bits_of(d->b) == 4},
    };
    bad[0].a.scale_b = NULL;
    bad[1].a.scale_a = NULL;
    bad[2].a.zeros_b = NULL;
    bad[3].a.k = d->group ? d->group + d->group / 2 : 0;
    bad[4].a.k = 48;
    bad[5].a.k = 255;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!bad[i].applies)
            continue;
        qjit_status st = qjit_gemm_launch(g, &bad[i].a, NULL);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), bad[i].needle),
              "%s, %s: %s '%s'", info->text, bad[i].what, qjit_status_string(st),
              qjit_last_error());
    }
    CK(cudaDeviceSynchronize());
    unsigned char *h = malloc(1 << 16);
    CK(cudaMemcpy(h, dD, 1 << 16, cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (int i = 0; i < (1 << 16); i++)
        untouched &= h[i] == 0x5a;
    CHECK(untouched, "%s: a rejected launch wrote the output", info->text);
    free(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dD);
    cudaFree(dS);
    cudaFree(dZ);
    cudaFree(dBias);
}

/* Compile texts[0..n) first, on all cores (precompile fills the context's cache; the
 * gets that follow are then disk hits); a failure shows at the get. */
typedef struct text_job {
    qjit_context *ctx;
    char (*text)[256];
    int n, next;
    pthread_mutex_t mu;
} text_job;

static void *text_worker(void *p)
{
    text_job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n)
            return NULL;
        qjit_gemm_desc d;
        if (qjit_gemm_desc_parse(j->text[i], &d) == QJIT_OK)
            qjit_gemm_precompile(j->ctx, &d, QJIT_ARCH_SM90A, NULL);
    }
}

static void precompile_texts(qjit_context *ctx, char (*text)[256], int n)
{
    text_job j = {ctx, text, n, 0, PTHREAD_MUTEX_INITIALIZER};
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t th[64];
    int nt = nc < 1 ? 1 : nc > 64 ? 64 : (int)nc;
    for (int i = 0; i < nt; i++)
        pthread_create(&th[i], NULL, text_worker, &j);
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
}

/* Every listed kernel that the filter keeps. */
static void precompile_all(qjit_context *ctx, const char *filter)
{
    char(*text)[256] = malloc((size_t)ndesc * NCONFIGS * sizeof *text);
    int n = 0;
    for (int i = 0; text && i < ndesc * NCONFIGS; i++)
        if (config_text(i / NCONFIGS, i % NCONFIGS, text[n], sizeof text[n]) &&
            (!filter || tl_matches_any(text[n], filter)))
            n++;
    precompile_texts(ctx, text, n);
    free(text);
}

/* The configurations that the shipped tuning records (cache/tune/NAME.db.tar.xz, one a GPU)
 * make auto run on their GPUs:
 * every winner, checked as test_cluster_split checks a descriptor (decode and multi-tile M,
 * N and K off the tile, graph replays against eager launches), since a record serves every
 * M of its bucket while the tuner checked it at one. */
typedef struct winners {
    char (*text)[256];
    int n, cap;
} winners;

static int collect_winner(void *user, const qjit_cache_tuning_entry *e)
{
    winners *w = user;
    if (!e->winner || !e->ok)
        return 0;
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->text[i], e->config))
            return 0;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        char(*t)[256] = realloc(w->text, (size_t)cap * sizeof *t);
        if (!t)
            return 1;
        w->text = t;
        w->cap = cap;
    }
    snprintf(w->text[w->n++], sizeof w->text[0], "%s", e->config);
    return 0;
}

static void test_shipped_winners(qjit_context *ctx, const char *filter, int max_shapes)
{
    /* the repository's records (tl_shipped_records), or QJIT_TUNE_DB alone; a winner that
     * two GPUs share is checked once */
    const char *only = getenv("QJIT_TUNE_DB");
    winners w = {0};
    for (int i = 0; i < (only ? 1 : tl_nshipped_gpus); i++) {
        const char *path = only ? only : tl_shipped_records(tl_shipped_gpus[i]);
        CHECK(path != NULL, "no shipped records %s", tl_shipped_gpus[i]);
        if (!path)
            continue;
        const int before = w.n;
        qjit_cache_db *db = NULL;
        CHECK_OK(qjit_cache_db_open(path, 0, &db));
        if (db) {
            CHECK_OK(qjit_cache_db_tuning(db, NULL, collect_winner, &w));
            qjit_cache_db_close(db);
        }
        CHECK(w.n - before >= (before ? 1 : 20), "%s: %d winning configurations not seen before",
              path, w.n - before);
        printf("shipped tuning records: %d winning configurations in %s not seen before\n",
               w.n - before, path);
    }
    int keep = 0;
    for (int i = 0; i < w.n; i++)
        if ((!filter || tl_matches_any(w.text[i], filter)) && !(skip && tl_matches_any(w.text[i], skip)))
            memmove(w.text[keep++], w.text[i], sizeof w.text[0]);
    precompile_texts(ctx, w.text, keep);
    for (int i = 0; i < keep; i++)
        test_cluster_split(ctx, w.text[i], max_shapes, false);
    printf("shipped tuning records: %d winning configurations, %d checked\n", w.n, keep);
    free(w.text);
}

/* test_cluster_split over each of texts that QJIT_TEST_FILTER keeps and QJIT_TEST_SKIP does not
 * leave out. */
static void replay_each(qjit_context *ctx, const char *const *texts, size_t n, const char *filter,
                        int max_shapes, bool want_split)
{
    for (size_t i = 0; i < n; i++)
        if ((!filter || tl_matches_any(texts[i], filter)) && !(skip && tl_matches_any(texts[i], skip)))
            test_cluster_split(ctx, texts[i], max_shapes, want_split);
}

/* --list: parse every descriptor and ask qjit_gemm_supports for sm_90a (no GPU). */
static int list_only(void)
{
    qjit_context *ctx;
    qjit_options o;
    qjit_options_init(&o);
    o.memory_only = 1;
    CHECK_OK(qjit_context_create(&o, &ctx));
    build_list();
    for (int i = 0; i < ndesc; i++)
        for (int c = 0; c < NCONFIGS; c++) {
            char text[256], why[512] = "";
            if (!config_text(i, c, text, sizeof text))
                continue;
            qjit_gemm_desc d;
            qjit_status st = qjit_gemm_desc_parse(text, &d);
            if (st == QJIT_OK)
                st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM90A, why, sizeof why);
            printf("%-80s %s %s\n", text, qjit_status_string(st),
                   st == QJIT_OK ? "" : why[0] ? why : qjit_last_error());
        }
    qjit_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    skip = getenv("QJIT_TEST_SKIP");
    if (skip && !*skip)
        skip = NULL;
    if (argc > 1 && strcmp(argv[1], "--list") == 0)
        return list_only();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_gpu_quant: no GPU visible, skipped\n");
        return TL_SKIP;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    int major = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major != 9) {
        printf("test_gpu_quant: written for sm_90, skipped\n");
        return TL_SKIP;
    }
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("gpu-quant");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    build_list();
    const char *filter = getenv("QJIT_TEST_FILTER");
    const int max_shapes = getenv("QJIT_TEST_SHAPES") ? atoi(getenv("QJIT_TEST_SHAPES")) : 0;
    precompile_all(ctx, filter);
    /* K split across a cluster, on the kernels that offer it (by name, split=S, or chosen
     * at launch for weight-only decode); QJIT_TEST_FILTER applies to these texts too */
    static const char *const splits[] = {
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=mma_wq tile=16x128x128 warps=1x4 stages=3",
        "gemm a=bf16 b=bf16 out=bf16 kernel=mma tile=64x128x32 warps=2x2 stages=4 split=8",
        "gemm a=f16 b=f16 out=f32 bias=0 kernel=mma tile=64x64x32 warps=2x2 stages=3 split=4",
        "gemm a=bf16 b=bf16 out=bf16 bias=1 kernel=wgmma tile=128x256x64 warps=2x1 stages=3 split=8",
        "gemm a=f16 b=f16 out=f32 bias=0 kernel=wgmma tile=128x128x64 warps=2x1 stages=5 split=4",
        "gemm a=bf16 b=bf16 out=f16 kernel=wgmma tile=64x256x64 warps=1x1 stages=4 split=8",
        /* the small-m sweep's decode tiles of wgmma split by 8, and 64x64 by 4 */
        "gemm a=bf16 b=bf16 out=bf16 kernel=wgmma tile=64x128x64 warps=1x1 stages=6 split=8",
        "gemm a=f16 b=f16 out=f16 bias=1 kernel=wgmma tile=64x64x64 warps=1x1 stages=8 split=4",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=bf16 kernel=mma_wq tile=16x128x128 warps=1x4 stages=3",
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wqr tile=128x64x64 warps=1x1 stages=8 split=4",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=f32 bias=1 kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=6 split=2",
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=wgmma_wqr tile=128x64x64 warps=1x1 stages=8 split=4",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=wgmma_wqr tile=128x128x64 warps=1x2 stages=6 split=2",
        /* its decode tiles split by 2 and 4 */
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wqr tile=16x128x64 warps=1x2 stages=8 split=2",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=bf16 kernel=wgmma_wqr tile=16x64x64 warps=1x1 stages=8 split=4",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=wgmma_wqr tile=32x64x64 warps=1x1 stages=8 split=4",
        "gemm a=f16 b=s4 sb=group:128 gs=f16 out=f16 bias=1 kernel=wgmma_wqr tile=16x64x64 warps=1x1 stages=8 split=4",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=s8 b=s4 sa=row sb=group:256 gs=bf16 out=f32 kernel=mma_i8 tile=16x128x64 warps=1x4 stages=4 split=4",
        "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=mma_f8 tile=16x128x64 warps=1x4 stages=4 split=8",
        "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=f32 kernel=mma_f8 tile=16x128x128 warps=1x4 stages=4 split=4",
        /* the small-m sweep's decode tiles of eight warps along the columns (mma_wq splits K
         * at launch where the tiles leave SMs idle, the others by name; unsplit: below) */
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=mma_wq tile=16x256x128 warps=1x8 stages=4",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=bf16 kernel=mma_wq tile=16x256x128 warps=1x8 stages=4",
        "gemm a=f16 b=s4 sb=group:128 gs=f16 out=f16 kernel=mma_wq tile=16x128x128 warps=1x8 stages=4",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=mma_wq tile=16x256x128 warps=1x8 stages=4",
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=mma_wq tile=16x128x128 warps=1x8 stages=4",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x8 stages=4 split=8",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x8 stages=4 split=8",
        /* gemv's split: each transform, the register and the shared-memory rings, int32 sums
         * as they are and folded */
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x64x128 warps=4x2 stages=2 split=8",
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x64x128 warps=2x2 stages=9 split=4",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=f32 bias=1 kernel=gemv tile=8x64x128 warps=4x2 stages=4 split=8",
        "gemm a=bf16 b=bf16 out=bf16 kernel=gemv tile=16x128x32 warps=4x2 stages=4 split=8",
        "gemm a=f16 b=f16 out=f16 kernel=gemv tile=8x64x32 warps=4x2 stages=8 split=8",
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=gemv tile=16x128x64 warps=4x2 stages=4 split=8",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=gemv tile=16x128x64 warps=4x2 stages=4 split=8",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=gemv tile=16x64x64 warps=2x2 stages=9 split=2",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=gemv tile=8x64x128 warps=4x2 stages=2 split=8",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=gemv tile=16x64x64 warps=4x2 stages=4 split=8",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=gemv tile=16x64x128 warps=4x2 stages=2 split=8",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 kernel=gemv tile=8x64x128 warps=4x2 stages=4 split=8",
        "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=gemv tile=16x64x64 warps=4x2 stages=4 split=8",
    };
    replay_each(ctx, splits, sizeof splits / sizeof splits[0], filter, max_shapes, true);
    /* the decode kernel (gemv, auto's choice to M = 16): its K shared by the warps of a CTA
     * and summed in warp order, so eager launches and graph replays agree bit for bit */
    static const char *const replays[] = {
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv",
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x64x128 warps=2x4 stages=2",
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=16x32x128 warps=1x4 stages=9",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=gemv tile=16x64x128 warps=2x2 stages=9",
        "gemm a=bf16 b=bf16 out=bf16 kernel=gemv tile=8x16x32 warps=1x4 stages=16",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=gemv tile=8x128x64 warps=4x2 stages=2",
        "gemm a=f16 b=u4 sb=group:128 gs=f16 zeros=1 out=f16 bias=1 kernel=gemv tile=16x32x128 warps=1x8 stages=2",
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=gemv",
        "gemm a=bf16 b=bf16 out=bf16 kernel=gemv",
        "gemm a=f16 b=f16 out=f32 bias=1 kernel=gemv tile=32x16x32 warps=1x8 stages=2",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=gemv",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=gemv",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=wgmma_wqr tile=128x128x128 warps=1x2 stages=6",
        "gemm a=s8 b=s4 sa=row sb=col out=f16 bias=1 kernel=wgmma_wqr tile=256x128x128 warps=1x2 stages=4",
        "gemm a=bf16 b=s8 sb=col out=bf16 kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=3",
        "gemm a=bf16 b=e2m1 sb=mx out=f16 bias=1 kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=4",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=4",
        "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 bias=1 kernel=gemv tile=16x32x64 warps=1x8 stages=3",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=gemv",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 kernel=gemv",
        "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=gemv",
        /* the quantized mma families' decode tiles of eight warps along the columns */
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x256x128 warps=1x8 stages=4",
        "gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x256x128 warps=1x8 stages=4",
        "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 kernel=mma_f8 tile=16x256x128 warps=1x8 stages=4",
        "gemm a=e4m3 b=e4m3 sa=tensor sb=tensor out=bf16 kernel=mma_f8 tile=16x256x128 warps=1x8 stages=4",
        "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=mma_f8 tile=16x256x128 warps=1x8 stages=4",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 kernel=mma_f8 tile=16x256x128 warps=1x8 stages=4",
    };
    replay_each(ctx, replays, sizeof replays / sizeof replays[0], filter, max_shapes, false);
    if ((!filter || tl_matches_any("kernel=wgmma_tma", filter)) &&
        !(skip && tl_matches_any("kernel=wgmma_tma", skip)))
        test_tma_twins(ctx);
    test_shipped_winners(ctx, filter, max_shapes);
    printf("%-96s %-22s %s\n", "descriptor (resolved)", "max error (bound)", "shapes");
    /* QJIT_TEST_PER_CONFIG=n: at most n descriptors of each configuration (a quick pass
     * over every kernel family, e.g. under compute-sanitizer) */
    const int per_config = getenv("QJIT_TEST_PER_CONFIG") ? atoi(getenv("QJIT_TEST_PER_CONFIG")) : 0;
    int ran[NCONFIGS] = {0};
    for (int i = 0; i < ndesc; i++) {
        for (int c = 0; c < NCONFIGS; c++) {
            char text[256];
            if (!config_text(i, c, text, sizeof text) || (filter && !tl_matches_any(text, filter)) ||
                (per_config > 0 && ran[c] >= per_config))
                continue;
            ran[c]++;
            qjit_gemm_desc d;
            qjit_status st = qjit_gemm_desc_parse(text, &d);
            CHECK(st == QJIT_OK, "%s: %s", text, qjit_last_error());
            if (st != QJIT_OK)
                continue;
            char why[512];
            if (!configs[c].required &&
                qjit_gemm_supports(ctx, &d, QJIT_ARCH_AUTO, why, sizeof why) == QJIT_ERROR_UNSUPPORTED) {
                printf("%-96s not run: %s\n", text, why);
                continue;
            }
            qjit_gemm *g = NULL;
            st = qjit_context_get_gemm(ctx, &d, NULL, &g);
            CHECK(st == QJIT_OK, "%s: %s: %s", text, qjit_status_string(st), qjit_last_error());
            if (st != QJIT_OK) {
                printf("%-96s %s\n", text, qjit_status_string(st));
                continue;
            }
            qjit_gemm_info info;
            qjit_gemm_get_info(g, &info);
            int64_t unit = info.k_multiple;
            if (d.sb == QJIT_SCALE_GROUP && d.group > unit)
                unit = d.group;
            if ((d.sa == QJIT_SCALE_MX || d.sb == QJIT_SCALE_MX) && unit < 32)
                unit = 32;
            /* The warp-specialized Hopper kernels also at prefill M (several tiles along M,
             * and a persistent grid walking more tiles than it has CTAs), with K a multiple
             * of 128 (MX's scale codes then travel by cp.async, a word a row and K tile), and
             * with one K chunk (fewer K tiles than a packed producer keeps in flight). */
            const int64_t shapes[7][3] = {
                {1, 257, unit * 3},  {5, 1000, unit * 7},  {64, 136, unit * 5},
                {333, 520, unit * 9}, {1000, 264, unit * 12}, {4097, 136, unit * 5},
                {17, 200, unit}};
            /* gemv: also a long K (40 steps of K at 128 k a step), so that a warp's weight
             * ring of 9 steps wraps */
            const int64_t long_k[3] = {3, 136, (unit > 128 ? unit : 128) * 40 + unit};
            const bool hopper = info.desc.kernel == QJIT_KERNEL_WGMMA_I8 ||
                                info.desc.kernel == QJIT_KERNEL_WGMMA_F8 ||
                                info.desc.kernel == QJIT_KERNEL_WGMMA_MX ||
                                info.desc.kernel == QJIT_KERNEL_WGMMA_WQ ||
                                info.desc.kernel == QJIT_KERNEL_WGMMA_TMA;
            int nshapes = hopper ? 7 : 4;
            if (max_shapes > 0 && nshapes > max_shapes) /* QJIT_TEST_SHAPES: the first n */
                nshapes = max_shapes;
            const char *kname = qjit_kernel_name(info.desc.kernel);
            const bool gemv = kname && strcmp(kname, "gemv") == 0;
            double worst = 0;
            long worst_bits = 0;
            bool exact = bit_exact_pair(&info.desc);
            for (int sh = 0; sh < nshapes + (gemv && max_shapes == 0); sh++) {
                const int64_t *shp = sh < nshapes ? shapes[sh] : long_k;
                double e = 0;
                long mism = 0;
                bool ok = run_one(g, &info.desc, &info, shp[0], shp[1], shp[2], &e, &mism);
                CHECK(ok, "%s m=%lld: hard failure", info.text, (long long)shp[0]);
                if (exact)
                    CHECK(mism == 0, "%s m=%lld n=%lld k=%lld: %ld outputs differ from the "
                          "exact f32 epilogue (nerr %.3g)", info.text, (long long)shp[0],
                          (long long)shp[1], (long long)shp[2], mism, e);
                else
                    CHECK(e <= bound_for(&info.desc), "%s m=%lld n=%lld k=%lld: error %.3g > %.1e",
                          info.text, (long long)shp[0], (long long)shp[1],
                          (long long)shp[2], e, bound_for(&info.desc));
                if (!(e <= worst))
                    worst = e;
                if (mism > worst_bits)
                    worst_bits = mism;
            }
            /* MX token codes at every alignment (they may start at any byte): wgmma_wqr's
             * MXFP4 copies them a word at a time where they are 4-byte aligned, and byte by
             * byte where not */
            for (int shift = 1; d.sa == QJIT_SCALE_MX && shift <= 3 && max_shapes == 0; shift += 2) {
                const int64_t sm = shift == 1 ? 333 : 64, sn = shift == 1 ? 520 : 136, sk = unit * (shift == 1 ? 9 : 5);
                double e = 0;
                long mism = 0;
                bool ok = run_problem(g, &info.desc, &info, (problem){sm, sn, sk, 0, 0, 0, NULL, shift}, &e, &mism);
                CHECK(ok && (exact ? mism == 0 : e <= bound_for(&info.desc)),
                      "%s m=%lld n=%lld k=%lld, scale_a %d bytes off: %s, error %.3g, %ld differ",
                      info.text, (long long)sm, (long long)sn, (long long)sk, shift,
                      ok ? "ran" : "hard failure", e, mism);
                if (!(e <= worst))
                    worst = e;
            }
            char col[64];
            if (exact)
                snprintf(col, sizeof col, "%ld differ (exact)", worst_bits);
            else
                snprintf(col, sizeof col, "%.2e (%.0e)", worst, bound_for(&info.desc));
            printf("%-96s %-22s 4\n", info.text, col);
            if (c == 0)
                bad_input(g, &info.desc, &info);
        }
    }
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_quant");
}
