/*
 * test_gpu_precompile.c — what qjit-precompile writes, with no GPU involved, is exactly
 * what a later qjit_get_gemm on the GPU loads: as scripts/run.sh does, the shipped tuning
 * records (cache/tune/NAME.db.tar.xz) are merged into a fresh cache and the tool fills it for
 * sm_90a from a small manifest and from the GEMM lines of cache/manifests/default.txt that
 * run there; a fresh context on that cache then gets every descriptor (arch=auto lines
 * resolved from the device), launches each at M = 1, 16, 256 and 4096 (every M bucket's
 * kernel of an auto handle, checked against the reference), and has compiled nothing:
 * one disk hit for each distinct kernel the handles hold.  Skips without an sm_90 GPU.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the check driver */

#include <cuda_runtime_api.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const manifest[] = {
    "gemm a=bf16 b=bf16 out=bf16",
    "gemm a=f16 b=f16 out=f32 bias=1",
    "gemm a=bf16 b=bf16 out=bf16 kernel=mma tile=128x256x32 warps=2x4 stages=4",
    "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16",
    "gemm a=s8 b=s8 sa=row sb=col out=bf16",
    "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16",
    "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16",
    "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16",
};
#define NSMALL (int)(sizeof manifest / sizeof manifest[0])
#define MAXLINES 256

int main(void)
{
    int ndev = 0, major = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
        major != 9) {
        printf("test_gpu_precompile: no sm_90 GPU visible, skipped\n");
        return TL_SKIP;
    }
    /* the tool and the default manifest beside this test (build/tests/.. is build/, its
     * parent the source tree), since the build tree may have moved to the GPU machine */
    char self[1024] = "";
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sn > 0)
        self[sn] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;
    static char lines[MAXLINES][256];
    int n = 0;
    for (int i = 0; i < NSMALL; i++)
        snprintf(lines[n++], sizeof lines[0], "%s", manifest[i]);
    char defpath[1200];
    snprintf(defpath, sizeof defpath, "%s/../../cache/manifests/default.txt", self);
    FILE *df = fopen(defpath, "r");
    CHECK(df != NULL, "cannot read %s", defpath);
    int from_default = 0;
    char line[512];
    while (df && fgets(line, sizeof line, df) && n < MAXLINES) {
        line[strcspn(line, "#\r\n")] = 0;
        if (strncmp(line, "gemm ", 5) != 0 ||
            (strstr(line, "arch=") && !strstr(line, "arch=sm_90a") && !strstr(line, "arch=auto")))
            continue; /* quantizers, and kernels for other GPUs */
        snprintf(lines[n++], sizeof lines[0], "%s", line);
        from_default++;
    }
    if (df)
        fclose(df);
    CHECK(from_default >= 20, "only %d sm_90a GEMM lines in %s", from_default, defpath);

    const char *dir = tl_tmpdir("gpu-precompile");
    char path[1200], cmd[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return tl_finish("test_gpu_precompile");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", lines[i]);
    fclose(f);
    /* as scripts/run.sh: the shipped tuning records first, so their winners are compiled
     * too and this GPU's handles load them */
    char db[1300];
    snprintf(db, sizeof db, "%s/qjit.db", dir);
    qjit_cache_db *h = NULL;
    CHECK_OK(qjit_cache_db_open(db, 1, &h));
    for (int i = 0; h && i < tl_nshipped_gpus; i++) {
        const char *shipped = tl_shipped_records(tl_shipped_gpus[i]);
        uint64_t merged = 0, bad = 0;
        CHECK(shipped != NULL, "no shipped records %s", tl_shipped_gpus[i]);
        if (shipped)
            CHECK_OK(qjit_cache_db_merge(h, shipped, &merged, &bad));
    }
    if (h)
        qjit_cache_db_close(h);
    snprintf(cmd, sizeof cmd, "'%s/../tools/qjit-precompile' --quiet --arch sm_90a --cache-dir '%s' '%s'",
             self, dir, path);
    int rc = system(cmd);
    CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "qjit-precompile failed: %d", rc);

    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    /* every distinct kernel the handles hold: each must be a disk hit, none a compile */
    static qjit_gemm_desc kernels[MAXLINES * 8];
    int nkernels = 0, launches = 0, tuned = 0;
    static const int64_t ms[] = {1, 16, 256, 4096};
    for (int i = 0; i < n; i++) {
        qjit_gemm_desc d;
        qjit_gemm *g = NULL;
        CHECK_OK(qjit_gemm_desc_parse(lines[i], &d));
        if (qjit_context_get_gemm(ctx, &d, NULL, &g) != QJIT_OK) {
            CHECK(0, "%s: %s", lines[i], qjit_last_error());
            continue;
        }
        /* room for every kernel a handle can hold: the shipped records give a tuned
         * descriptor many variants */
        static qjit_gemm_variant v[256];
        size_t nv = 0;
        CHECK_OK(qjit_gemm_get_variants(g, v, 256, &nv));
        CHECK(nv <= 256, "%s: %zu variants, more than the test holds", lines[i], nv);
        for (size_t j = 0; j < nv && j < 256; j++) {
            tuned += v[j].tuned;
            bool seen = false;
            for (int q = 0; q < nkernels && !seen; q++)
                seen = memcmp(&kernels[q], &v[j].desc, sizeof v[j].desc) == 0;
            if (!seen && nkernels < MAXLINES * 8)
                kernels[nkernels++] = v[j].desc;
        }
        qjit_gemm_info info;
        CHECK_OK(qjit_gemm_get_info(g, &info));
        for (int j = 0; j < 4; j++) {
            qjit_gemm_variant c;
            const int64_t km = info.k_multiple, k = km * ((520 + km - 1) / km);
            CHECK_OK(qjit_gemm_choose(g, ms[j], 136, k, &c));
            double err = 0;
            long mism = 0;
            /* a narrow N keeps the CPU reference quick at M = 4096 */
            bool ok = run_one(g, &c.desc, &info, ms[j], 136, k, &err, &mism);
            CHECK(ok && err <= bound_for(&c.desc) && (!bit_exact_pair(&c.desc) || mism == 0),
                  "%s m=%lld (%s): error %.3g, %ld not exact", lines[i], (long long)ms[j],
                  c.text, err, mism);
            launches++;
        }
    }
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    printf("test_gpu_precompile: %d descriptors (%d from default.txt), %d kernels (%d tuned "
           "variants), %d checked launches: %llu compiles, %llu disk hits\n",
           n, from_default, nkernels, tuned, launches, (unsigned long long)s.compiles,
           (unsigned long long)s.disk_hits);
    CHECK(s.compiles == 0 && s.disk_hits == (unsigned long long)nkernels,
          "after precompile: %llu compiles, %llu disk hits for %d kernels",
          (unsigned long long)s.compiles, (unsigned long long)s.disk_hits, nkernels);
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_precompile");
}
