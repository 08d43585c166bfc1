/* examples/offline.c — resolve a W4A16 descriptor for the H100 and compile its kernels
 * into the cache.  Needs no GPU: this is what a build machine runs. */
#include <qjit.h>
#include <stdio.h>

int main(void)
{
    qjit_gemm_desc d, r;
    char text[512];
    int cached = 0;
    if (qjit_gemm_desc_parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", &d) != QJIT_OK ||
        qjit_gemm_resolve(NULL, &d, QJIT_ARCH_SM90A, &r) != QJIT_OK ||
        qjit_gemm_desc_format(&r, text, sizeof text, NULL) != QJIT_OK ||
        qjit_gemm_precompile(NULL, &d, QJIT_ARCH_SM90A, &cached) != QJIT_OK) {
        fprintf(stderr, "qjit: %s\n", qjit_last_error());
        return 1;
    }
    printf("qjit %s: %s\n%s\n", qjit_version_string(), text,
           cached ? "already in the cache" : "compiled into the cache");
    return 0;
}
