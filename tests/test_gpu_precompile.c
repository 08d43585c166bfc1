/*
 * test_gpu_precompile.c — what qjit-precompile writes, with no GPU involved, is exactly
 * what a later qjit_get_gemm on the GPU looks up: a fresh context on the precompiled
 * cache gets every kernel of the manifest (arch=auto, resolved from the device) with
 * zero compiles, and every kernel runs.  Skips without an sm_90 GPU.
 */
#include "qjit.h"
#include "testlib.h"

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
};
#define N (int)(sizeof manifest / sizeof manifest[0])

int main(void)
{
    int ndev = 0, major = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
        major != 9) {
        printf("test_gpu_precompile: no sm_90 GPU visible, skipped\n");
        return TL_SKIP;
    }
    const char *dir = tl_tmpdir("gpu-precompile");
    char path[1200], cmd[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return tl_finish("test_gpu_precompile");
    for (int i = 0; i < N; i++)
        fprintf(f, "%s\n", manifest[i]);
    fclose(f);
    /* the real tool, for the named arch, in its own process; found beside this test
     * (build/tests/.. /tools), since the build tree may have moved to the GPU machine */
    char self[1024] = "";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0)
        self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = 0;
    snprintf(cmd, sizeof cmd, "'%s/../tools/qjit-precompile' --quiet --arch sm_90a --cache-dir '%s' '%s'",
             self, dir, path);
    int rc = system(cmd);
    CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "qjit-precompile failed: %d", rc);

    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess)
        return 1;
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = dir;
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    qjit_gemm *g[N];
    for (int i = 0; i < N; i++) {
        qjit_gemm_desc d;
        CHECK_OK(qjit_gemm_desc_parse(manifest[i], &d));
        g[i] = NULL;
        CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g[i]));
    }
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.compiles == 0 && s.disk_hits == (unsigned long long)N,
          "after precompile: %llu compiles, %llu disk hits for %d gets",
          (unsigned long long)s.compiles, (unsigned long long)s.disk_hits, N);
    /* and each loaded kernel runs: a small f16/bf16 launch where the pair allows */
    void *buf;
    if (cudaMalloc(&buf, 1 << 20) == cudaSuccess) {
        cudaMemset(buf, 0, 1 << 20);
        for (int i = 0; i < 3; i++) {
            if (!g[i])
                continue;
            qjit_gemm_args a = {buf, (char *)buf + 65536, (char *)buf + 131072,
                                (char *)buf + 262144, NULL, NULL, NULL, 64, 64, 64, 64, 64, 64};
            CHECK_OK(qjit_gemm_launch(g[i], &a, NULL));
        }
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "launch failed");
        cudaFree(buf);
    }
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_precompile");
}
