/*
 * test_variants.c — every descriptor of the shipped default manifest (GEMMs and
 * quantizers) resolves, is supported, and compiles under NVRTC for sm_80 and sm_90a (no
 * GPU needed); the
 * cubin is found again under the same key; unsupported descriptors say why.
 */
#include "qjit.h"
#include "testlib.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define MAXJ 512
static char lines[MAXJ][256];
static int nlines, next_job;
static qjit_context *ctx;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const qjit_arch archs[] = {QJIT_ARCH_SM80, QJIT_ARCH_SM90A};
static int failures;

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&mu);
        int j = next_job++;
        pthread_mutex_unlock(&mu);
        if (j >= nlines * 2)
            return NULL;
        qjit_manifest_item it;
        qjit_arch arch = archs[j % 2];
        qjit_status st = qjit_manifest_line(lines[j / 2], &it);
        const qjit_gemm_desc d = it.gemm;
        bool hopper_only = st == QJIT_OK && it.kind == QJIT_MANIFEST_GEMM &&
                           d.kernel == QJIT_KERNEL_WGMMA;
        /* fp8 and fp4 operands need sm_89's tensor cores (or Hopper's) */
        bool ada_up = st == QJIT_OK && it.kind == QJIT_MANIFEST_GEMM &&
                      (d.a == QJIT_DTYPE_E4M3 || d.a == QJIT_DTYPE_E5M2 || d.a == QJIT_DTYPE_E2M1);
        const char *floor = hopper_only ? "sm_90a" : "sm_89";
        if (st == QJIT_OK)
            st = it.kind == QJIT_MANIFEST_QUANT ? qjit_quant_precompile(ctx, &it.quant, arch, NULL)
                                                : qjit_gemm_precompile(ctx, &d, arch, NULL);
        if ((hopper_only || ada_up) && arch != QJIT_ARCH_SM90A) {
            /* refused up front with the supports message, never compiled */
            if (st != QJIT_ERROR_UNSUPPORTED || !strstr(qjit_last_error(), floor)) {
                pthread_mutex_lock(&mu);
                failures++;
                fprintf(stderr, "FAIL %s for arch %d: expected unsupported, got %s: %s\n",
                        lines[j / 2], (int)arch, qjit_status_string(st), qjit_last_error());
                pthread_mutex_unlock(&mu);
            }
            continue;
        }
        if (st != QJIT_OK) {
            pthread_mutex_lock(&mu);
            failures++;
            fprintf(stderr, "FAIL %s for arch %d: %s\n", lines[j / 2], (int)arch,
                    qjit_last_error());
            pthread_mutex_unlock(&mu);
        }
    }
}

int main(void)
{
    FILE *f = fopen(QJIT_SOURCE_DIR "/cache/manifests/default.txt", "r");
    CHECK(f != NULL, "default manifest missing");
    if (!f)
        return tl_finish("test_variants");
    char buf[512];
    while (fgets(buf, sizeof buf, f) && nlines < MAXJ) {
        char *p = buf + strspn(buf, " \t");
        p[strcspn(p, "#\r\n")] = 0;
        if (!*p)
            continue;
        snprintf(lines[nlines++], sizeof lines[0], "%s", p);
    }
    fclose(f);
    CHECK(nlines >= 8, "only %d descriptors in the default manifest", nlines);

    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("variants");
    CHECK_OK(qjit_context_create(&o, &ctx));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu > 1 ? (int)ncpu : 1;
    pthread_t th[64];
    if (nt > 64)
        nt = 64;
    for (int i = 0; i < nt; i++)
        pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    CHECK(failures == 0, "%d of %d compiles failed", failures, nlines * 2);
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.compiles > 0 && s.compile_failures == 0, "compiles %llu failures %llu",
          (unsigned long long)s.compiles, (unsigned long long)s.compile_failures);
    printf("compiled %llu kernels, %.0f ms NVRTC time in all (%.0f ms each)\n",
           (unsigned long long)s.compiles, s.compile_ms,
           s.compiles ? s.compile_ms / (double)s.compiles : 0.0);

    /* a second precompile of each is a cache hit: same key, no compile */
    int cached_all = 1;
    for (int i = 0; i < nlines; i++) {
        qjit_manifest_item it;
        int was = 0;
        if (qjit_manifest_line(lines[i], &it) != QJIT_OK ||
            (it.kind == QJIT_MANIFEST_QUANT
                 ? qjit_quant_precompile(ctx, &it.quant, QJIT_ARCH_SM90A, &was)
                 : qjit_gemm_precompile(ctx, &it.gemm, QJIT_ARCH_SM90A, &was)) != QJIT_OK ||
            !was)
            cached_all = 0;
    }
    qjit_stats s2;
    qjit_context_stats(ctx, &s2);
    CHECK(cached_all && s2.compiles == s.compiles, "re-precompile compiled again");

    /* what has no kernel is refused with the reason, before any compile */
    static const char *const unsupported[] = {
        "gemm a=bf16 b=bf16 out=bf16 tile=256x256x64 warps=2x2 stages=6",
        "gemm a=f16 b=f16 out=f16 split=12", /* mma splits across at most 8 */
        "gemm a=f16 b=f16 out=f16 tile=128x128x32 warps=1x1 stages=3",
        /* a packed operand's producer with 2 stages would wait on its consumers */
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wq tile=128x128x64 warps=2x1 stages=2",
        "gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=wgmma_i8 tile=128x128x128 warps=2x1 stages=2",
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        qjit_gemm_desc d;
        char why[512];
        CHECK_OK(qjit_gemm_desc_parse(unsupported[i], &d));
        qjit_status st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM90A, why, sizeof why);
        CHECK(st == QJIT_ERROR_UNSUPPORTED && why[0], "%s: %s '%s'", unsupported[i],
              qjit_status_string(st), why);
        st = qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, NULL);
        CHECK(st == QJIT_ERROR_UNSUPPORTED, "precompile of %s: %s", unsupported[i],
              qjit_status_string(st));
    }
    /* warps that do not split the tile: the descriptor parses (how warps split a tile is the
     * family's to say) and the family refuses it, naming the warps, before any compile */
    static const char *const bad_warps[] = {
        "gemm a=bf16 b=bf16 out=bf16 kernel=mma tile=64x64x32 warps=8x1 stages=3",
        "gemm a=bf16 b=bf16 out=bf16 kernel=wgmma tile=64x128x64 warps=2x1 stages=4",
        "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=gemv tile=8x16x128 warps=2x2 stages=2",
    };
    for (size_t i = 0; i < sizeof bad_warps / sizeof bad_warps[0]; i++) {
        qjit_gemm_desc d;
        char why[512] = "";
        CHECK_OK(qjit_gemm_desc_parse(bad_warps[i], &d));
        qjit_status st = qjit_gemm_supports(ctx, &d, QJIT_ARCH_SM90A, why, sizeof why);
        CHECK(st == QJIT_ERROR_UNSUPPORTED && (strstr(why, "warps") || strstr(why, "WM")),
              "%s: %s '%s'", bad_warps[i], qjit_status_string(st), why);
        CHECK(qjit_gemm_precompile(ctx, &d, QJIT_ARCH_SM90A, NULL) == QJIT_ERROR_UNSUPPORTED,
              "precompile of %s", bad_warps[i]);
    }
    qjit_stats s3;
    qjit_context_stats(ctx, &s3);
    CHECK(s3.compiles == s.compiles, "an unsupported descriptor reached NVRTC");
    qjit_context_destroy(ctx);
    return tl_finish("test_variants");
}
