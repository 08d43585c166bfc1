/*
 * compiler.c — NVRTC: generated CUDA C++ to a cubin for a named architecture, with no
 * GPU needed.  The options are fixed per architecture and go into the cache key.
 */
#include "qjit_internal.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char version_text[32];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_init(void)
{
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
        major = minor = 0;
    snprintf(version_text, sizeof version_text, "%d.%d", major, minor);
}

const char *qjit_nvrtc_version(void)
{
    pthread_once(&version_once, version_init);
    return version_text;
}

/* No include paths and no host paths: the generated code includes nothing, so
 * --minimal (no texture, surface or device-runtime declarations) costs it nothing and
 * saves the front end a third of its time.  Extra flags from $QJIT_NVRTC_FLAGS (read
 * once; for experiments) join the list, and the list is part of the cache key, so
 * kernels built with other flags never mix. */
#define MAX_OPTS 24
static const char *const common_opts[] = {"--std=c++17", "-default-device", "--minimal",
                                          "--extra-device-vectorization", "-DNDEBUG"};
#define MAX_ARCHS 8
static char arch_flags[MAX_ARCHS][48];
static const char *opt_lists[MAX_ARCHS][MAX_OPTS + 1];
static char extra_flags[512];
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;

static void opts_init(void)
{
    const char *env = getenv("QJIT_NVRTC_FLAGS");
    snprintf(extra_flags, sizeof extra_flags, "%s", env ? env : "");
    const char *extra[MAX_OPTS];
    int nextra = 0;
    for (char *t = strtok(extra_flags, " \t"); t && nextra < 8; t = strtok(NULL, " \t"))
        extra[nextra++] = t;
    for (int a = 0; a < qjit_arch_count() && a < MAX_ARCHS; a++) {
        int n = 0;
        snprintf(arch_flags[a], sizeof arch_flags[a], "--gpu-architecture=%s",
                 qjit_arch_nvrtc_target(qjit_arch_at(a)));
        opt_lists[a][n++] = arch_flags[a];
        for (size_t i = 0; i < sizeof common_opts / sizeof common_opts[0]; i++)
            opt_lists[a][n++] = common_opts[i];
        for (int i = 0; i < nextra; i++)
            opt_lists[a][n++] = extra[i];
        opt_lists[a][n] = NULL;
    }
}

const char *const *qjit_nvrtc_options(qjit_arch arch)
{
    pthread_once(&opts_once, opts_init);
    for (int a = 0; a < qjit_arch_count() && a < MAX_ARCHS; a++)
        if (qjit_arch_at(a) == arch)
            return opt_lists[a];
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

qjit_status qjit_nvrtc_compile(const char *source, size_t len, const char *name, qjit_arch arch,
                               void **cubin, size_t *cubin_len, double *ms)
{
    *cubin = NULL;
    *cubin_len = 0;
    const char *const *opts = qjit_nvrtc_options(arch);
    if (!opts)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "compile %s: arch %d is not a target",
                            name, (int)arch);
    int nopts = 0;
    while (opts[nopts])
        nopts++;
    double t0 = now_ms();
    qjit_status st = QJIT_OK;
    nvrtcProgram prog = NULL;
    char *log = NULL;
    (void)len; /* NVRTC takes a NUL-terminated string; `source` is one */
    nvrtcResult r = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        st = qjit_err_set(QJIT_ERROR_COMPILE, "nvrtcCreateProgram(%s): %s", name,
                          nvrtcGetErrorString(r));
        goto done;
    }
    r = nvrtcCompileProgram(prog, nopts, opts);
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        log = malloc(log_size + 1);
        if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
            log[0] = 0;
    }
    if (r != NVRTC_SUCCESS) {
        st = qjit_err_set(QJIT_ERROR_COMPILE, "NVRTC %s failed to compile %s for %s:\n%s",
                          qjit_nvrtc_version(), name, opts[0] + strlen("--gpu-architecture="),
                          log ? log : nvrtcGetErrorString(r));
        goto done;
    }
    size_t n = 0;
    if ((r = nvrtcGetCUBINSize(prog, &n)) != NVRTC_SUCCESS || n == 0) {
        st = qjit_err_set(QJIT_ERROR_COMPILE, "nvrtcGetCUBINSize(%s): %s", name,
                          nvrtcGetErrorString(r));
        goto done;
    }
    *cubin = malloc(n);
    if (!*cubin) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "compile %s: %zu-byte cubin", name, n);
        goto done;
    }
    if ((r = nvrtcGetCUBIN(prog, *cubin)) != NVRTC_SUCCESS) {
        free(*cubin);
        *cubin = NULL;
        st = qjit_err_set(QJIT_ERROR_COMPILE, "nvrtcGetCUBIN(%s): %s", name,
                          nvrtcGetErrorString(r));
        goto done;
    }
    *cubin_len = n;
done:
    if (ms)
        *ms = now_ms() - t0;
    free(log);
    if (prog)
        nvrtcDestroyProgram(&prog);
    return st;
}
