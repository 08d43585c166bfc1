/*
 * test_gpu_multi.c — one qjit context driving two GPUs (tensor parallelism in one
 * process): a descriptor got on each device gives one handle per CUDA context, built
 * from one compile; both are right against the CPU reference, also when launched
 * concurrently from two threads; graphs captured on each device replay bit-identically
 * with new inputs; a handle launched from the other device's context, or onto its
 * stream, is refused before anything runs.  Skips unless two GPUs are visible.
 */
#include "qjit.h"
#include "testlib.h"

#include "gpu_check.c" /* the reference and the check driver */

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#define NDEV 2
/* bf16 with a fully named configuration (one kernel), and W4A16 with auto configuration
 * (a kernel per M bucket: the dispatch of a real decode + prefill layer). */
static const char *const named = "gemm a=bf16 b=bf16 out=bf16 bias=1 kernel=mma "
                                 "tile=128x128x32 warps=2x2 stages=4";
static const char *const dispatched = "gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16";

/* Operands of one problem on one device: the same bytes on every device. */
typedef struct operands {
    qjit_gemm_desc d;
    int64_t m, n, k;
    size_t na, nb, nd, ns;
    void *ha, *hb, *hs, *hbias;   /* host copies (shared by the devices) */
    void *a[NDEV], *b[NDEV], *s[NDEV], *bias[NDEV], *out[NDEV], *out2[NDEV];
} operands;

static void operands_make(operands *o, const char *text, int64_t m, int64_t n, int64_t k)
{
    memset(o, 0, sizeof *o);
    CHECK_OK(qjit_gemm_desc_parse(text, &o->d));
    o->m = m, o->n = n, o->k = k;
    o->na = bytes_of(o->d.a, m, k);
    o->nb = bytes_of(o->d.b, n, k);
    o->nd = bytes_of(o->d.out, m, n);
    qjit_dtype st = QJIT_DTYPE_F32;
    size_t scount = scale_count(&o->d, 0, m, n, k, &st);
    o->ns = scount * (size_t)(bits_of(st) / 8);
    o->ha = malloc(o->na);
    o->hb = malloc(o->nb);
    o->hbias = malloc(bytes_of(o->d.out, 1, n));
    fill_elems(o->d.a, o->ha, o->na * 8 / bits_of(o->d.a));
    fill_elems(o->d.b, o->hb, o->nb * 8 / bits_of(o->d.b));
    fill_elems(o->d.out, o->hbias, (size_t)n);
    if (o->ns) {
        o->hs = malloc(o->ns);
        fill_scales(st, o->hs, scount, 0.5e-2f, 1.5e-2f);
    }
    for (int dev = 0; dev < NDEV; dev++) {
        CK(cudaSetDevice(dev));
        CK(cudaMalloc(&o->a[dev], o->na));
        CK(cudaMalloc(&o->b[dev], o->nb));
        CK(cudaMalloc(&o->bias[dev], bytes_of(o->d.out, 1, n)));
        CK(cudaMalloc(&o->out[dev], o->nd));
        CK(cudaMalloc(&o->out2[dev], o->nd));
        CK(cudaMemcpy(o->a[dev], o->ha, o->na, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(o->b[dev], o->hb, o->nb, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(o->bias[dev], o->hbias, bytes_of(o->d.out, 1, n), cudaMemcpyHostToDevice));
        if (o->ns) {
            CK(cudaMalloc(&o->s[dev], o->ns));
            CK(cudaMemcpy(o->s[dev], o->hs, o->ns, cudaMemcpyHostToDevice));
        }
    }
}

static void operands_free(operands *o)
{
    for (int dev = 0; dev < NDEV; dev++) {
        CK(cudaSetDevice(dev));
        cudaFree(o->a[dev]);
        cudaFree(o->b[dev]);
        cudaFree(o->s[dev]);
        cudaFree(o->bias[dev]);
        cudaFree(o->out[dev]);
        cudaFree(o->out2[dev]);
    }
    free(o->ha);
    free(o->hb);
    free(o->hs);
    free(o->hbias);
}

static qjit_gemm_args args_of(const operands *o, int dev, void *out)
{
    return (qjit_gemm_args){o->a[dev], o->b[dev], out, o->d.bias ? o->bias[dev] : NULL,
                            NULL,      o->s[dev], NULL, o->m, o->n, o->k, o->k, o->k, o->n};
}

/* The normalized error of device output `out` (host bytes) against the reference. */
static double error_of(const operands *o, const void *out)
{
    qjit_gemm_args host = {o->ha, o->hb, NULL, o->d.bias ? o->hbias : NULL, NULL, o->hs, NULL,
                           o->m, o->n, o->k, o->k, o->k, o->n};
    size_t cells = (size_t)(o->m * o->n);
    double *ref = malloc(cells * sizeof *ref), *got = malloc(cells * sizeof *got);
    double e = 1e30;
    if (ref_gemm(&o->d, &host, ref) == 0) {
        for (int64_t i = 0; i < o->m; i++)
            for (int64_t j = 0; j < o->n; j++)
                got[i * o->n + j] = ref_elem(o->d.out, out, o->n, i, j);
        e = ref_nerr(got, ref, cells);
    } else {
        fprintf(stderr, "  reference refused: %s\n", ref_error());
    }
    free(ref);
    free(got);
    return e;
}

/* ------------------------------------------------------------ one compile, two handles */
static void test_handles(qjit_context *ctx, const char *text, qjit_gemm *g[NDEV])
{
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse(text, &d));
    qjit_stats s0, s1, s2;
    qjit_context_stats(ctx, &s0);
    CK(cudaSetDevice(0));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g[0]));
    qjit_context_stats(ctx, &s1);
    CK(cudaSetDevice(1));
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &g[1]));
    qjit_context_stats(ctx, &s2);
    qjit_gemm_info info;
    CHECK_OK(qjit_gemm_get_info(g[0], &info));
    CHECK(g[0] && g[1] && g[0] != g[1], "%s: one handle for two devices", text);
    CHECK(s1.compiles - s0.compiles == (uint64_t)info.variants,
          "%s: device 0 compiled %llu kernels for %d variants", text,
          (unsigned long long)(s1.compiles - s0.compiles), info.variants);
    CHECK(s2.compiles == s1.compiles, "%s: device 1 compiled %llu more", text,
          (unsigned long long)(s2.compiles - s1.compiles));
    /* the same device again: the same handle, from the map */
    qjit_gemm *again = NULL;
    CHECK_OK(qjit_context_get_gemm(ctx, &d, NULL, &again));
    CHECK(again == g[1], "%s: a second get on device 1 made a new handle", text);
}

/* ------------------------------------------------------------ concurrent launches */
typedef struct worker {
    const operands *o;
    qjit_gemm *g;
    int dev, rounds;
    qjit_status st;
    char err[512];
} worker;

static void *work(void *p)
{
    worker *w = p;
    cudaSetDevice(w->dev);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    qjit_gemm_args a = args_of(w->o, w->dev, w->o->out[w->dev]);
    w->st = QJIT_OK;
    for (int r = 0; r < w->rounds && w->st == QJIT_OK; r++)
        w->st = qjit_gemm_launch(w->g, &a, (struct CUstream_st *)s);
    if (w->st != QJIT_OK)
        snprintf(w->err, sizeof w->err, "%s", qjit_last_error());
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    return NULL;
}

static void test_concurrent(const operands *o, qjit_gemm *g[NDEV], double bound)
{
    worker w[NDEV];
    pthread_t t[NDEV];
    for (int dev = 0; dev < NDEV; dev++) {
        CK(cudaSetDevice(dev));
        CK(cudaMemset(o->out[dev], 0xff, o->nd));
        CK(cudaDeviceSynchronize());
        w[dev] = (worker){o, g[dev], dev, 50, QJIT_OK, ""};
        pthread_create(&t[dev], NULL, work, &w[dev]);
    }
    for (int dev = 0; dev < NDEV; dev++)
        pthread_join(t[dev], NULL);
    void *host[NDEV];
    for (int dev = 0; dev < NDEV; dev++) {
        CHECK(w[dev].st == QJIT_OK, "device %d launches: %s", dev, w[dev].err);
        host[dev] = malloc(o->nd);
        CK(cudaSetDevice(dev));
        CK(cudaMemcpy(host[dev], o->out[dev], o->nd, cudaMemcpyDeviceToHost));
        double e = error_of(o, host[dev]);
        CHECK(e <= bound, "device %d: normalized error %.3g > %.3g", dev, e, bound);
    }
    /* one cubin, one GPU model, the same inputs: the same bits */
    CHECK(memcmp(host[0], host[1], o->nd) == 0, "devices 0 and 1 disagree");
    for (int dev = 0; dev < NDEV; dev++)
        free(host[dev]);
}

/* ------------------------------------------------------------ graphs on each device */
static void test_graphs(operands *o, qjit_gemm *g[NDEV])
{
    for (int dev = 0; dev < NDEV; dev++) {
        CK(cudaSetDevice(dev));
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        qjit_gemm_args a = args_of(o, dev, o->out2[dev]);
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        qjit_status st = qjit_gemm_launch(g[dev], &a, (struct CUstream_st *)s);
        CK(cudaStreamEndCapture(s, &graph));
        CHECK(st == QJIT_OK, "device %d capture: %s", dev, qjit_last_error());
        CK(cudaGraphInstantiate(&exec, graph, 0));
        void *x = malloc(o->nd), *y = malloc(o->nd);
        int same = 1;
        for (int round = 0; round < 10; round++) {
            /* new activations each round: the graph must read them */
            fill_elems(o->d.a, o->ha, o->na * 8 / bits_of(o->d.a));
            CK(cudaMemcpy(o->a[dev], o->ha, o->na, cudaMemcpyHostToDevice));
            CK(cudaMemset(o->out[dev], 0xff, o->nd));
            CK(cudaMemset(o->out2[dev], 0xff, o->nd));
            CK(cudaDeviceSynchronize()); /* s is non-blocking: it does not wait for these */
            qjit_gemm_args e = args_of(o, dev, o->out[dev]);
            CHECK_OK(qjit_gemm_launch(g[dev], &e, (struct CUstream_st *)s));
            CK(cudaGraphLaunch(exec, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(x, o->out[dev], o->nd, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y, o->out2[dev], o->nd, cudaMemcpyDeviceToHost));
            same &= memcmp(x, y, o->nd) == 0;
            if (round == 9) {
                double err = error_of(o, y);
                CHECK(err <= bound_for(&o->d), "device %d graph: error %.3g", dev, err);
            }
        }
        CHECK(same, "device %d: graph replays differ from eager launches", dev);
        free(x);
        free(y);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        CK(cudaStreamDestroy(s));
        /* the other devices' copies of the activations follow */
        for (int other = 0; other < NDEV; other++) {
            CK(cudaSetDevice(other));
            CK(cudaMemcpy(o->a[other], o->ha, o->na, cudaMemcpyHostToDevice));
        }
    }
}

/* ------------------------------------------------------------ wrong device */
static void test_wrong_device(const operands *o, qjit_gemm *g[NDEV])
{
    void *host = malloc(o->nd);
    for (int dev = 0; dev < NDEV; dev++) {
        int other = 1 - dev;
        /* device `other` current, g[dev] launched on the legacy stream */
        CK(cudaSetDevice(dev));
        CK(cudaMemset(o->out[dev], 0xff, o->nd));
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(other));
        qjit_gemm_args a = args_of(o, dev, o->out[dev]);
        qjit_status st = qjit_gemm_launch(g[dev], &a, NULL);
        char want[64];
        snprintf(want, sizeof want, "device %d", dev);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), want),
              "handle of device %d launched from device %d: %s: %s", dev, other,
              qjit_status_string(st), qjit_last_error());
        /* its own device current, but a stream of the other device */
        cudaStream_t s;
        CK(cudaStreamCreate(&s)); /* on `other` */
        CK(cudaSetDevice(dev));
        st = qjit_gemm_launch(g[dev], &a, (struct CUstream_st *)s);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "stream"),
              "handle of device %d onto a stream of device %d: %s: %s", dev, other,
              qjit_status_string(st), qjit_last_error());
        qjit_launch_config cfg;
        CK(cudaSetDevice(other));
        st = qjit_gemm_launch_config(g[dev], &a, &cfg);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "launch_config from device %d: %s", other,
              qjit_status_string(st));
        CK(cudaStreamDestroy(s));
        /* nothing ran: the output is still poisoned */
        CK(cudaSetDevice(dev));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(host, o->out[dev], o->nd, cudaMemcpyDeviceToHost));
        size_t touched = 0;
        for (size_t i = 0; i < o->nd; i++)
            touched += ((unsigned char *)host)[i] != 0xff;
        CHECK(touched == 0, "device %d: a refused launch wrote %zu bytes", dev, touched);
    }
    free(host);
}

/* ------------------------------------------------------------ concurrent first gets */
typedef struct getter {
    qjit_context *ctx;
    qjit_gemm_desc d;
    int dev;
    qjit_gemm *g;
    qjit_status st;
} getter;

static void *get_on(void *p)
{
    getter *w = p;
    cudaSetDevice(w->dev);
    cudaFree(0);
    w->st = qjit_context_get_gemm(w->ctx, &w->d, NULL, &w->g);
    return NULL;
}

static void test_concurrent_gets(qjit_context *ctx)
{
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse("gemm a=f16 b=f16 out=f32 kernel=mma tile=64x128x32 "
                                  "warps=2x2 stages=3", &d));
    qjit_stats before, after;
    qjit_context_stats(ctx, &before);
    getter w[NDEV];
    pthread_t t[NDEV];
    for (int dev = 0; dev < NDEV; dev++) {
        w[dev] = (getter){ctx, d, dev, NULL, QJIT_OK};
        pthread_create(&t[dev], NULL, get_on, &w[dev]);
    }
    for (int dev = 0; dev < NDEV; dev++)
        pthread_join(t[dev], NULL);
    qjit_context_stats(ctx, &after);
    CHECK(w[0].st == QJIT_OK && w[1].st == QJIT_OK && w[0].g != w[1].g,
          "concurrent gets on two devices: %s, %s", qjit_status_string(w[0].st),
          qjit_status_string(w[1].st));
    CHECK(after.compiles - before.compiles == 1,
          "two devices asking at once compiled %llu times",
          (unsigned long long)(after.compiles - before.compiles));
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < NDEV) {
        printf("test_gpu_multi: needs %d GPUs, %d visible: skipped\n", NDEV, n);
        return TL_SKIP;
    }
    int major[NDEV];
    for (int dev = 0; dev < NDEV; dev++) {
        CK(cudaSetDevice(dev));
        CK(cudaFree(0));
        CK(cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev));
    }
    if (major[0] != 9 || major[1] != 9) {
        printf("test_gpu_multi: written for two sm_90 GPUs, skipped\n");
        return TL_SKIP;
    }
    qjit_options opt;
    qjit_options_init(&opt);
    opt.cache_dir = tl_tmpdir("gpu-multi");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&opt, &ctx));

    const char *texts[] = {named, dispatched};
    const int64_t ms[] = {333, 1, 17, 1000};
    for (int t = 0; t < 2; t++) {
        qjit_gemm *g[NDEV] = {NULL, NULL};
        test_handles(ctx, texts[t], g);
        if (!g[0] || !g[1])
            continue;
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            operands o;
            operands_make(&o, texts[t], ms[i], 4096 + 136, 1024 + 128);
            test_concurrent(&o, g, bound_for(&o.d));
            if (i == 0) {
                test_graphs(&o, g);
                test_wrong_device(&o, g);
            }
            operands_free(&o);
        }
    }
    test_concurrent_gets(ctx);
    qjit_context_destroy(ctx);
    return tl_finish("test_gpu_multi");
}
