/*
 * test_context.c — the public API around contexts on a machine without a GPU (or
 * without a current CUDA context): version, status strings, options, the default
 * context, and a get that fails clearly instead of crashing; resolve and precompile
 * need no GPU when the arch is named; threads asking for one kernel at once compile it
 * once.
 */
#include "qjit.h"
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Threads precompiling one kernel at once into one context: compiled once (a cubin is
 * shared by its cache key whoever asks, as two devices' gets are), every thread OK. */
typedef struct racer {
    qjit_context *ctx;
    qjit_gemm_desc d;
    qjit_status st;
} racer;

static void *race(void *p)
{
    racer *r = p;
    r->st = qjit_gemm_precompile(r->ctx, &r->d, QJIT_ARCH_SM80, NULL);
    return NULL;
}

static void test_compile_once(void)
{
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("context-once");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    enum { T = 4 };
    racer r[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        r[i].ctx = ctx;
        r[i].st = QJIT_ERROR_CUDA; /* until the thread says */
        CHECK_OK(qjit_gemm_desc_parse("gemm a=f16 b=f16 out=f16 kernel=mma tile=64x64x32 "
                                      "warps=2x2 stages=2 split=1", &r[i].d));
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(r[i].st);
    }
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.compiles == 1, "%d threads asking at once compiled %llu times", T,
          (unsigned long long)s.compiles);
    qjit_context_destroy(ctx);
}

static void on_log(void *user, qjit_log_level lvl, const char *msg)
{
    (void)lvl;
    (void)msg;
    ++*(int *)user;
}

int main(void)
{
    CHECK(qjit_version_number() == QJIT_VERSION_NUMBER, "version %u", qjit_version_number());
    CHECK(strcmp(qjit_version_string(), "0.1.0") == 0, "%s", qjit_version_string());
    for (int s = 0; s < QJIT_STATUS_COUNT; s++)
        CHECK(strncmp(qjit_status_string((qjit_status)s), "QJIT_", 5) == 0, "status %d", s);
    CHECK(strcmp(qjit_status_string((qjit_status)999), "QJIT_STATUS_UNKNOWN") == 0, "bad status");

    qjit_options o;
    qjit_options_init(&o);
    o.arch = (qjit_arch)77;
    qjit_context *ctx = (qjit_context *)0x1;
    CHECK(qjit_context_create(&o, &ctx) == QJIT_ERROR_INVALID_ARGUMENT, "bad arch accepted");
    CHECK(strstr(qjit_last_error(), "'arch'") && strstr(qjit_last_error(), "77"), "msg %s",
          qjit_last_error());

    int logs = 0;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("context");
    o.log = on_log;
    o.log_user = &logs;
    CHECK_OK(qjit_context_create(&o, &ctx));

    /* resolve with a named arch touches no GPU and fills every auto field */
    qjit_gemm_desc d, r;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16", &d));
    CHECK_OK(qjit_gemm_resolve(ctx, &d, QJIT_ARCH_SM90A, &r));
    CHECK(r.arch == QJIT_ARCH_SM90A && r.kernel == QJIT_KERNEL_WGMMA && r.bm && r.bn && r.bk &&
              r.wm && r.wn && r.stages && r.split_k == 1,
          "resolve for sm_90a: kernel %d, auto fields left", (int)r.kernel);
    qjit_gemm_desc r80;
    CHECK_OK(qjit_gemm_resolve(ctx, &d, QJIT_ARCH_SM80, &r80));
    CHECK(r80.kernel == QJIT_KERNEL_MMA && r80.bm && r80.stages, "resolve for sm_80: kernel %d",
          (int)r80.kernel);
    char text[256];
    CHECK_OK(qjit_gemm_desc_format(&r, text, sizeof text, NULL));
    CHECK(strstr(text, "auto") == NULL, "resolved text has auto: %s", text);
    CHECK_OK(qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM86, NULL, 0));

    /* precompile needs a named arch, not a GPU */
    CHECK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_AUTO, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "precompile without an arch");
    int was = -1;
    CHECK_OK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM80, &was));
    CHECK(was == 0, "first precompile was_cached=%d", was);
    CHECK_OK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM80, &was));
    CHECK(was == 1, "second precompile was_cached=%d", was);

    /* another context on the same directory sees the row: a new "process" */
    qjit_context *ctx2;
    CHECK_OK(qjit_context_create(&o, &ctx2));
    CHECK_OK(qjit_gemm_precompile(ctx2, &d, QJIT_ARCH_SM80, &was));
    CHECK(was == 1, "other context missed the row");
    qjit_stats s;
    qjit_context_stats(ctx2, &s);
    CHECK(s.compiles == 0, "other context compiled");
    qjit_context_destroy(ctx2);

    /* with no GPU (or no current CUDA context) a get fails clearly */
    qjit_gemm *g = (qjit_gemm *)0x1;
    qjit_status st = qjit_context_get_gemm(ctx, &d, NULL, &g);
    if (st != QJIT_OK) {
        CHECK(st == QJIT_ERROR_NO_DEVICE, "get without GPU: %s", qjit_status_string(st));
        CHECK(strlen(qjit_last_error()) > 10, "no message");
        CHECK(g == (qjit_gemm *)0x1, "output written on failure");
        printf("get without a GPU: %s: %s\n", qjit_status_string(st), qjit_last_error());
    }
    /* invalid descriptors are refused before anything else */
    d.stages = 40;
    st = qjit_context_get_gemm(ctx, &d, NULL, &g);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT || st == QJIT_ERROR_NO_DEVICE, "stages=40: %s",
          qjit_status_string(st));
    CHECK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM80, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "stages=40 precompiled");
    CHECK(strstr(qjit_last_error(), "stages"), "msg %s", qjit_last_error());
    qjit_context_destroy(ctx);
    qjit_context_destroy(NULL);
    test_compile_once();
    return tl_finish("test_context");
}
