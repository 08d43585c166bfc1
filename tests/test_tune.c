/*
 * test_tune.c — qjit_gemm_tune's refusals, which come before any GPU work: a descriptor
 * with nothing to tune, bad problems, NULL arguments, and, on a machine without a GPU, a
 * clear QJIT_ERROR_NO_DEVICE with nothing recorded.  The measuring itself is
 * test_gpu_tune's.
 */
#include "qjit.h"
#include "testlib.h"

#include <string.h>

int main(void)
{
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
    /* zero problems: nothing to do, and nothing needs a GPU */
    CHECK_OK(qjit_gemm_tune(ctx, &d, p, 0, &to, r));

    /* without a GPU (this machine, CI): a clear refusal, nothing recorded */
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
        CHECK(n == 2, "a refused tune changed the dispatch: %zu variants", n);
    }
    qjit_context_destroy(ctx);
    return tl_finish("test_tune");
}
