/*
 * test_tune.c — qjit_gemm_tune's refusals, which come before any GPU work: a descriptor
 * with nothing to tune, bad problems, NULL arguments, and, on a machine without a GPU, a
 * clear QJIT_ERROR_NO_DEVICE with nothing recorded.  The measuring itself is
 * test_gpu_dispatch's.  And the tuning records shipped in cache/tune/ (measured on the
 * H100 and the H200 by scripts/tune.sh): merged into a fresh cache as scripts/run.sh
 * merges them, they give each GPU's handles its own winners and leave another GPU's on
 * the heuristic.
 */
#include "qjit.h"
#include "qjit_internal.h"
#include "tune_data.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define H100 "NVIDIA H100 80GB HBM3"
#define H200 "NVIDIA H200"

static void test_shipped(void)
{
    const char *dir = tl_tmpdir("tune-shipped");
    char db[1200];
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    qjit_cache_db *h = NULL;
    CHECK_OK(qjit_cache_db_open(db, 1, &h));
    if (!h)
        return;
    /* as scripts/run.sh merges them: cache/tune/NAME.db.tar.xz as the build unpacked them */
    for (int i = 0; i < tl_nshipped_gpus; i++) {
        const char *path = tl_shipped_records(tl_shipped_gpus[i]);
        CHECK(path != NULL, "no shipped records %s", tl_shipped_gpus[i]);
        if (!path)
            continue;
        uint64_t added = 0, bad = 0;
        qjit_cache_stats before, after;
        CHECK_OK(qjit_cache_db_stats(h, &before));
        CHECK_OK(qjit_cache_db_merge(h, path, &added, &bad));
        CHECK_OK(qjit_cache_db_stats(h, &after));
        CHECK(bad == 0 && after.tuning_rows >= before.tuning_rows + 200,
              "%s: %llu tuning rows added, %llu bad", path,
              (unsigned long long)(after.tuning_rows - before.tuning_rows), (unsigned long long)bad);
    }
    qjit_cache_db_close(h);

    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    /* the fastest measured at m, 4096 x 4096, on each GPU; the last three differ between
     * the two, so each GPU's handle must take its own records */
    static const struct {
        const char *gpu, *desc, *winner;
        int64_t m;
    } cases[] = {
        {H100, "gemm a=bf16 b=bf16 out=bf16", "kernel=gemv tile=8x16x32 warps=1x4 stages=8", 1},
        {H100, "gemm a=s8 b=s8 sa=row sb=col out=bf16", "kernel=wgmma_i8 tile=128x256x128 warps=2x1 stages=3", 4096},
        {H100, "gemm a=bf16 b=bf16 out=bf16", "kernel=gemv tile=32x16x32 warps=1x4 stages=2", 64},
        {H200, "gemm a=bf16 b=bf16 out=bf16", "kernel=wgmma tile=64x64x64 warps=1x1 stages=8 split=4", 64},
        {H100, "gemm a=s8 b=s8 sa=row sb=col out=bf16", "kernel=gemv tile=8x16x64 warps=1x4 stages=4", 16},
        {H200, "gemm a=s8 b=s8 sa=row sb=col out=bf16", "kernel=gemv tile=16x16x64 warps=1x8 stages=4", 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_gemm_desc d;
        CHECK_OK(qjit_gemm_desc_parse(cases[i].desc, &d));
        const int b = qjit_m_bucket(cases[i].m);
        /* the GPU the records were measured on: its problems tuned, the winner as measured */
        qjit_dispatch dp;
        CHECK_OK(qjit_select_dispatch(ctx, &d, QJIT_ARCH_SM90A, cases[i].gpu, true, &dp));
        bool found = false;
        for (size_t p = 0; p < dp.nproblems; p++) {
            if (dp.problems[p].n != 4096 || dp.problems[p].k != 4096)
                continue;
            found = dp.problems[p].has[b];
            char text[256];
            qjit_desc_text(&dp.problems[p].desc[b], text, sizeof text);
            CHECK(found && strstr(text, cases[i].winner), "%s m=%lld 4096x4096 on %s: "
                  "tuned %d, runs %s", cases[i].desc, (long long)cases[i].m, cases[i].gpu, found, text);
        }
        CHECK(found && dp.nproblems >= 3, "%s: %zu tuned problems on %s, 4096x4096 %s",
              cases[i].desc, dp.nproblems, cases[i].gpu, found ? "found" : "missing");
        qjit_dispatch_free(&dp);
        /* another GPU: no record is its, so every problem runs the heuristic */
        CHECK_OK(qjit_select_dispatch(ctx, &d, QJIT_ARCH_SM90A, "NVIDIA A100-SXM4-80GB", true, &dp));
        CHECK(dp.nproblems == 0, "%s: %zu tuned problems for another GPU", cases[i].desc,
              dp.nproblems);
        qjit_dispatch_free(&dp);
    }
    qjit_context_destroy(ctx);
}

/* The final round's pick (no GPU): the finalist fastest in its own turns wins, even where
 * another had the faster sweep time, and its record is the problem's lowest. */
static void test_final_pick(void)
{
    /* the bf16 cell the tuner once got wrong: 256x128 s4 luckier in the sweep, 128x256 s3
     * faster side by side on a loaded board, a third finalist behind both */
    const double sweep[3] = {331.0, 338.0, 345.0}, final[3] = {385.7, 366.8, 390.0};
    double rec[3];
    int w = qjit_tune_final_pick(sweep, final, 3, rec);
    CHECK(w == 1, "final pick: finalist %d won, want 1 (the fastest in the final round)", w);
    CHECK(rec[1] == 331.0, "final pick: the winner's record %.3f, want the sweep's fastest 331", rec[1]);
    for (int j = 0; j < 3; j++)
        CHECK(j == w || rec[j] > rec[w], "final pick: record %d (%.3f) not above the winner's %.3f", j,
              rec[j], rec[w]);
    CHECK(fabs(rec[0] / rec[1] - 385.7 / 366.8) < 1e-12 && fabs(rec[2] / rec[1] - 390.0 / 366.8) < 1e-12,
          "final pick: records %.3f %.3f %.3f not in the final round's proportions", rec[0], rec[1], rec[2]);
    /* one finalist, and a tie (the first kept) */
    const double one_s[1] = {12.5}, one_f[1] = {13.0};
    w = qjit_tune_final_pick(one_s, one_f, 1, rec);
    CHECK(w == 0 && rec[0] == 12.5, "final pick of one: %d, %.3f", w, rec[0]);
    const double tie_s[2] = {10.0, 9.5}, tie_f[2] = {11.0, 11.0};
    w = qjit_tune_final_pick(tie_s, tie_f, 2, rec);
    CHECK(w == 0 && rec[0] == 9.5 && rec[1] >= rec[0], "final pick of a tie: %d, %.3f %.3f", w, rec[0], rec[1]);
}

int main(void)
{
    test_final_pick();
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("tune");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm_desc d, named;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", &d));
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 arch=sm_90a kernel=wgmma "
                                  "tile=128x256x64 warps=2x1 stages=3 split=1", &named));
    qjit_tune_problem p[2] = {{16, 4096, 4096}, {0, 4096, 4096}};
    qjit_tune_result r[2];
    qjit_tune_options to;
    qjit_tune_options_init(&to);
    to.dry_run = 1;

    qjit_status st = qjit_gemm_tune(ctx, &named, p, 1, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "nothing to tune"),
          "fully named: %s: %s", qjit_status_string(st), qjit_last_error());
    st = qjit_gemm_tune(ctx, &d, p, 2, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "problem 1") &&
              strstr(qjit_last_error(), "m=0"),
          "m=0: %s: %s", qjit_status_string(st), qjit_last_error());
    st = qjit_gemm_tune(ctx, NULL, p, 1, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "NULL descriptor: %s", qjit_status_string(st));
    st = qjit_gemm_tune(ctx, &d, p, 1, &to, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "NULL results: %s", qjit_status_string(st));
    qjit_gemm_desc bad = d;
    bad.group = 100;
    st = qjit_gemm_tune(ctx, &bad, p, 1, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "100"),
          "bad descriptor: %s: %s", qjit_status_string(st), qjit_last_error());
    /* a K the pair cannot take: refused before any GPU work, naming the rule */
    qjit_tune_problem offk = {16, 4096, 4096 + 64};
    st = qjit_gemm_tune(ctx, &d, &offk, 1, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "k=4160") &&
              strstr(qjit_last_error(), "group size 128"),
          "k off the group: %s: %s", qjit_status_string(st), qjit_last_error());
    /* zero problems: nothing to do, and nothing needs a GPU */
    CHECK_OK(qjit_gemm_tune(ctx, &d, p, 0, &to, r));
    /* the final round's warm load (QJIT_TUNE_WARM_MS): a value that is not milliseconds is
     * refused by name, before any GPU work */
    static const char *const bad_warm[] = {"abc", "-5", "1e9", "30ms"};
    size_t before_warm = 0, after_warm = 0;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, NULL, 0, &before_warm));
    to.dry_run = 0; /* refused before anything: nothing is recorded even where it would be */
    for (size_t i = 0; i < sizeof bad_warm / sizeof *bad_warm; i++) {
        setenv("QJIT_TUNE_WARM_MS", bad_warm[i], 1);
        st = qjit_gemm_tune(ctx, &d, p, 1, &to, r);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "QJIT_TUNE_WARM_MS") &&
                  strstr(qjit_last_error(), bad_warm[i]),
              "QJIT_TUNE_WARM_MS=%s: %s: %s", bad_warm[i], qjit_status_string(st), qjit_last_error());
    }
    to.dry_run = 1;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, NULL, 0, &after_warm));
    CHECK(after_warm == before_warm,
          "a refused QJIT_TUNE_WARM_MS changed the dispatch: %zu variants, %zu before", after_warm,
          before_warm);
    /* and a value in range passes the parse: the call goes on to the problems' own checks
     * (problem 1's m=0), never to a GPU */
    setenv("QJIT_TUNE_WARM_MS", "250", 1);
    st = qjit_gemm_tune(ctx, &d, p, 2, &to, r);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "m=0") &&
              !strstr(qjit_last_error(), "QJIT_TUNE_WARM_MS"),
          "QJIT_TUNE_WARM_MS=250: %s: %s", qjit_status_string(st), qjit_last_error());
    unsetenv("QJIT_TUNE_WARM_MS");

    /* without a GPU (this machine, CI): a clear refusal, nothing recorded */
    size_t before = 0;
    CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, NULL, 0, &before));
    to.dry_run = 0;
    st = qjit_gemm_tune(ctx, &d, p, 1, &to, r);
    if (st != QJIT_ERROR_NO_DEVICE) {
        printf("test_tune: a GPU is visible (%s); its part is test_gpu_tune's\n",
               qjit_status_string(st));
    } else {
        CHECK(strstr(qjit_last_error(), "qjit_gemm_tune") != NULL, "message: %s",
              qjit_last_error());
        size_t n = 0;
        CHECK_OK(qjit_gemm_variants(ctx, &d, QJIT_ARCH_SM90A, NULL, 0, &n));
        CHECK(n == before && n >= 2, "a refused tune changed the dispatch: %zu variants, %zu before",
              n, before);
    }
    qjit_context_destroy(ctx);
    test_shipped();
    return tl_finish("test_tune");
}
