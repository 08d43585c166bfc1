/*
 * test_quant_compile.c — every quantized pair × scale mode compiles under NVRTC, with
 * no GPU, for sm_80, sm_89 and sm_90a at its default configuration; a pair an
 * architecture cannot run (fp8 and MX below sm_89) is refused up front with the
 * supports message, and never reaches NVRTC.  The kernels that `auto` does not choose yet
 * (wgmma_i8, wgmma_mx, wgmma_wq, wgmma_tma, and mma_i8 and mma_f8 with split) compile by name for sm_90a and are refused elsewhere with a message
 * naming it.
 */
#include "qjit.h"
#include "testlib.h"

#include "quant_list.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

static const qjit_arch archs[] = {QJIT_ARCH_SM80, QJIT_ARCH_SM89, QJIT_ARCH_SM90A};
#define NARCH 3
static qjit_context *ctx;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int next_job, failures, refused;

static bool needs_sm89(const qjit_gemm_desc *d)
{
    return d->a == QJIT_DTYPE_E4M3 || d->a == QJIT_DTYPE_E5M2 || d->a == QJIT_DTYPE_E2M1;
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&mu);
        int j = next_job++;
        pthread_mutex_unlock(&mu);
        if (j >= ndesc * NARCH)
            return NULL;
        qjit_arch arch = archs[j % NARCH];
        const char *text = descs[j / NARCH];
        qjit_gemm_desc d;
        char why[512] = "";
        qjit_status st = qjit_gemm_desc_parse(text, &d);
        bool refuse = st == QJIT_OK && needs_sm89(&d) && arch == QJIT_ARCH_SM80;
        qjit_status sup = st == QJIT_OK ? qjit_gemm_supports(ctx, &d, arch, why, sizeof why) : st;
        if (st == QJIT_OK)
            st = qjit_gemm_precompile(ctx, &d, arch, NULL);
        pthread_mutex_lock(&mu);
        if (refuse) {
            if (sup != QJIT_ERROR_UNSUPPORTED || st != QJIT_ERROR_UNSUPPORTED ||
                !strstr(why, "sm_89")) {
                failures++;
                fprintf(stderr, "FAIL %s on arch %d: expected a refusal naming sm_89, got %s / %s '%s'\n",
                        text, (int)arch, qjit_status_string(sup), qjit_status_string(st), why);
            } else {
                refused++;
            }
        } else if (sup != QJIT_OK || st != QJIT_OK) {
            failures++;
            fprintf(stderr, "FAIL %s on arch %d: supports %s, precompile %s: %s\n", text,
                    (int)arch, qjit_status_string(sup), qjit_status_string(st), qjit_last_error());
        }
        pthread_mutex_unlock(&mu);
    }
}

/* The kernels `auto` does not choose yet, by name: each descriptor they serve compiles for
 * sm_90a at the kernel's default and at a one-warpgroup configuration, and is refused for
 * sm_89 with a reason naming sm_90a. */
static void test_named(void)
{
    static const struct {
        const char *only, *kernel, *small;
    } named[] = {
        {"a=s8 b=s", "wgmma_i8", " tile=64x128x128 warps=1x1 stages=6"},
        {"sa=mx sb=mx", "wgmma_mx", " tile=64x128x128 warps=1x1 stages=6"},
        {"a=f16 b=|a=bf16 b=", "wgmma_wq", " tile=64x128x64 warps=1x1 stages=6"},
        {"b=e4m3 sa=tensor|b=e4m3 sa=row|b=e4m3 sa=block|a=s8 b=s8", "wgmma_tma",
         " tile=64x128x128 warps=1x1 stages=6"},
    };
    for (size_t n = 0; n < sizeof named / sizeof named[0]; n++) {
        int compiled = 0;
        for (int i = 0; i < ndesc; i++) {
            if (!tl_matches_any(descs[i], named[n].only))
                continue;
            for (int v = 0; v < 2; v++) {
                char text[256], why[512] = "";
                snprintf(text, sizeof text, "%s kernel=%s%s", descs[i], named[n].kernel,
                         v ? named[n].small : "");
                qjit_gemm_desc d;
                CHECK_OK(qjit_gemm_desc_parse(text, &d));
                qjit_status st = qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, NULL);
                CHECK(st == QJIT_OK, "%s on sm_90a: %s: %s", text, qjit_status_string(st),
                      qjit_last_error());
                compiled += st == QJIT_OK;
                st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM89, why, sizeof why);
                CHECK(st == QJIT_ERROR_UNSUPPORTED && strstr(why, "sm_90a"),
                      "%s on sm_89: %s '%s' (expected a refusal naming sm_90a)", text,
                      qjit_status_string(st), why);
            }
        }
        CHECK(compiled >= 2, "only %d %s kernels compiled", compiled, named[n].kernel);
    }
    /* wgmma_tma also serves f16/bf16 (not in the quantized list); mma_i8 splits K across a
     * cluster when named with split=2..8 (sm_90a only), and so do mma_f8 and wgmma */
    static const char *const halves[] = {
        "gemm a=bf16 b=bf16 out=bf16 kernel=wgmma_tma",
        "gemm a=f16 b=f16 out=f32 bias=1 kernel=wgmma_tma tile=64x128x64 warps=1x1 stages=8",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8",
        "gemm a=s8 b=s4 sa=row sb=group:256 gs=bf16 out=f32 bias=1 kernel=mma_i8 tile=16x128x64 "
        "warps=1x4 stages=4 split=4",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=mma_f8 tile=16x128x64 warps=1x4 "
        "stages=4 split=8",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=f32 bias=1 kernel=mma_f8 tile=16x128x128 warps=1x4 "
        "stages=4 split=4",
        "gemm a=bf16 b=bf16 out=bf16 bias=1 kernel=wgmma tile=128x256x64 warps=2x1 stages=3 split=8",
        "gemm a=f16 b=f16 out=f32 kernel=wgmma tile=64x256x64 warps=1x1 stages=4 split=3",
    };
    for (size_t i = 0; i < sizeof halves / sizeof halves[0]; i++) {
        qjit_gemm_desc d;
        char why[512] = "";
        CHECK_OK(qjit_gemm_desc_parse(halves[i], &d));
        qjit_status st = qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, NULL);
        CHECK(st == QJIT_OK, "%s on sm_90a: %s: %s", halves[i], qjit_status_string(st),
              qjit_last_error());
        st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM89, why, sizeof why);
        CHECK(st == QJIT_ERROR_UNSUPPORTED && strstr(why, "sm_90a"),
              "%s on sm_89: %s '%s' (expected a refusal naming sm_90a)", halves[i],
              qjit_status_string(st), why);
    }
    /* wgmma's split keeps a rank's f32 tile in the ring: a ring too small for it is refused */
    qjit_gemm_desc d;
    char why[512] = "";
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16 kernel=wgmma tile=256x128x64 "
                                  "warps=2x1 stages=2 split=2", &d));
    qjit_status st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM90A, why, sizeof why);
    CHECK(st == QJIT_ERROR_UNSUPPORTED && strstr(why, "split=2") && strstr(why, "ring"),
          "wgmma split=2 with a 2-stage 256x128 ring: %s '%s' (expected a refusal naming the "
          "split and the ring)", qjit_status_string(st), why);
    qjit_stats before, after;
    qjit_context_stats(ctx, &before);
    st = qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, NULL);
    qjit_context_stats(ctx, &after);
    CHECK(st == QJIT_ERROR_UNSUPPORTED && after.compiles == before.compiles,
          "precompile of the refused split: %s, %llu compiles (expected a refusal, none)",
          qjit_status_string(st), (unsigned long long)(after.compiles - before.compiles));
}

int main(void)
{
    build_list();
    qjit_options o;
    qjit_options_init(&o);
    o.memory_only = 1;
    CHECK_OK(qjit_context_create(&o, &ctx));
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = n < 1 ? 1 : n > 32 ? 32 : (int)n;
    pthread_t th[32];
    for (int i = 0; i < nt; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    test_named();
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(failures == 0, "%d of %d jobs failed", failures, ndesc * NARCH);
    CHECK(refused > 0, "no pair was refused on sm_80");
    CHECK(s.compile_failures == 0, "%llu NVRTC failures", (unsigned long long)s.compile_failures);
    printf("%d descriptors x %d archs: %llu compiled (%.0f ms NVRTC in all), %d refused with "
           "the supports message\n",
           ndesc, NARCH, (unsigned long long)s.compiles, s.compile_ms, refused);
    qjit_context_destroy(ctx);
    return tl_finish("test_quant_compile");
}
