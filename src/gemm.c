/*
 * gemm.c — GEMM handles: qjit_get_gemm (the warm path: one lock and one probe of the
 * context's map; the cold path: select, build and load each kernel once), and launch
 * (check the arguments, pick the kernel, cuLaunchKernel) with nothing else on its path but,
 * for TMA kernels, the host-side encoding of two tensor maps (no device call).
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(qjit_kernel_params) <= sizeof(((qjit_launch_config *)0)->params),
               "qjit_launch_config.params holds the kernel parameter");

/* One loaded kernel: a resolved descriptor's module and function with its launch needs.
 * Shared by every handle that runs it; owned by the context. */
typedef struct kernel {
    qjit_gemm_desc desc; /* resolved */
    char text[256];
    uint8_t key[16];
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev; /* cuctx's device, for messages */
    CUmodule module;
    CUfunction fn;
    qjit_plan plan;
    unsigned registers;
    qjit_grid_facts gf; /* what the launch geometry depends on besides the sizes */
    int out_bytes;
    bool pdl;   /* launched with programmatic stream serialization (QJIT_PDL, sm_90a) */
    bool pdl_weights; /* and told it may read B before its wait (QJIT_PDL not 2) */
    bool early; /* may be so launched where the caller vouches for it (sm_90a, QJIT_PDL not 0) */
} kernel;

static int dtype_bytes(qjit_dtype t) { return qjit_desc_dtype_bits(t) / 8; }

/* "group" for group:G; "?" for a value out of range (messages only) */
static const char *mode_name(qjit_scale_mode m)
{
    const char *n = qjit_desc_scale_name(m);
    return n ? n : "?";
}

static void kernel_destroy(void *p)
{
    kernel *k = p;
    /* the module belongs to the CUDA context it was loaded in */
    if (k->cu->CtxPushCurrent(k->cuctx) == CUDA_SUCCESS) {
        k->cu->ModuleUnload(k->module);
        CUcontext popped;
        k->cu->CtxPopCurrent(&popped);
    }
    free(k);
}

/* How many clusters of plan.cluster_m CTAs the GPU holds at once for kernel k (a GPC with an
 * odd count of free SMs holds one CTA fewer than half of them), so that a persistent grid
 * of clusters is one wave; half the SMs when the driver cannot say. */
static int max_clusters(const kernel *k)
{
    int n = 0;
    if (k->cu->OccupancyMaxActiveClusters) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = (unsigned)k->plan.cluster_m;
        attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = (unsigned)(k->plan.cluster_m * (k->gf.sms > 0 ? k->gf.sms : 1));
        cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = k->plan.threads;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.sharedMemBytes = k->plan.smem;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        if (k->cu->OccupancyMaxActiveClusters(&n, k->fn, &cfg) != CUDA_SUCCESS)
            n = 0;
    }
    return n > 0 ? n : k->gf.sms / k->plan.cluster_m;
}

/* Build (or load from a cache) and load the kernel of a resolved, checked descriptor. */
static qjit_status kernel_make(qjit_context *ctx, const qjit_cu_api *cu, CUcontext cuctx,
                               CUdevice dev, const qjit_gemm_desc *r, const qjit_plan *plan,
                               kernel **out)
{
    void *cubin = NULL;
    size_t n = 0;
    int cached = 0;
    kernel *k = calloc(1, sizeof *k);
    if (!k)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "a kernel");
    k->desc = *r;
    qjit_desc_text(r, k->text, sizeof k->text);
    const char *text = k->text;
    qjit_status st = qjit_build_cubin(ctx, r, text, false, k->key, &cubin, &n, &cached);
    if (st != QJIT_OK)
        goto fail;
    CUresult cr = cu->ModuleLoadData(&k->module, cubin);
    if (cr != CUDA_SUCCESS) {
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleLoadData"), "%s", text);
        goto fail;
    }
    if ((cr = cu->ModuleGetFunction(&k->fn, k->module, "qjit_gemm_kernel")) != CUDA_SUCCESS) {
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleGetFunction(qjit_gemm_kernel)"), "%s",
                             text);
        goto fail;
    }
    k->cu = cu;
    k->cuctx = cuctx;
    k->dev = dev;
    k->plan = *plan;
    k->out_bytes = dtype_bytes(r->out);
    k->pdl = ctx->pdl && r->arch == QJIT_ARCH_SM90A;
    k->pdl_weights = k->pdl && ctx->pdl_weights;
    k->early = ctx->pdl_quant && r->arch == QJIT_ARCH_SM90A;
    k->gf = (qjit_grid_facts){r->bm, r->bn, r->split_k, 0, 1, 0, 1, 0, 0, 0};
    if (plan->persistent || plan->cluster_k > 1 || plan->cluster_m > 1) {
        int sms = 0;
        if (cu->DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
                CUDA_SUCCESS &&
            sms > 0) {
            k->gf.persistent_ctas = plan->persistent ? sms : 0;
            k->gf.sms = sms;
        }
    }
    if (plan->cluster_k > 1 && plan->k_chunk > 0 && k->gf.sms > 0) {
        k->gf.cluster_k = plan->cluster_k;
        k->gf.k_chunk = plan->k_chunk;
    } else if (plan->cluster_k > 1) {
        k->gf.split_k = 1; /* no SM count to split by: its ranks would have no cluster */
    }
    k->gf.cluster_m = plan->cluster_m;
    if ((cr = cu->FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   (int)plan->smem)) != CUDA_SUCCESS) {
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuFuncSetAttribute(max dynamic smem)"), "%s",
                             text);
        goto fail;
    }
    if (plan->cluster_m > 1)
        k->gf.max_clusters = max_clusters(k);
    /* QJIT_SPLIT_OCC: a kernel that splits K across a cluster at launch plans for as many CTAs
     * a SM as fit at once (registers, shared memory, threads), not two */
    int fit = 0;
    if (ctx->split_occ && k->gf.cluster_k > 1 && !plan->persistent &&
        cu->OccupancyMaxActiveBlocksPerMultiprocessor &&
        cu->OccupancyMaxActiveBlocksPerMultiprocessor(&fit, k->fn, plan->threads, plan->smem) ==
            CUDA_SUCCESS &&
        fit > 0)
        k->gf.per_sm = fit < 8 ? fit : 8;
    int regs = 0;
    if (cu->FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->fn) == CUDA_SUCCESS)
        k->registers = (unsigned)regs;
    pthread_mutex_lock(&ctx->mu);
    if (cached)
        ctx->stats.disk_hits++;
    pthread_mutex_unlock(&ctx->mu);
    free(cubin);
    *out = k;
    return QJIT_OK;
fail:
    if (k->module)
        cu->ModuleUnload(k->module);
    free(k);
    free(cubin);
    return st;
}

/* What kernel_get's make needs. */
typedef struct kernel_order {
    qjit_context *ctx;
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev;
    const qjit_gemm_desc *r;
    const char *text;
} kernel_order;

static qjit_status kernel_order_make(void *arg, void **obj)
{
    const kernel_order *o = arg;
    char why[512];
    qjit_plan plan;
    qjit_status st = qjit_select_check(o->ctx, o->r, &plan, why, sizeof why);
    if (st != QJIT_OK)
        return qjit_err_set(st, "%s: %s", o->text, why);
    return kernel_make(o->ctx, o->cu, o->cuctx, o->dev, o->r, &plan, (kernel **)obj);
}

/* The loaded kernel of resolved descriptor r in cuctx, made once (qjit_ctx_obtain). */
static qjit_status kernel_get(qjit_context *ctx, const qjit_cu_api *cu, CUcontext cuctx,
                              CUdevice dev, const qjit_gemm_desc *r,
                              struct CUstream_st *capture_stream, const kernel **out)
{
    char text[256];
    qjit_desc_text(r, text, sizeof text);
    kernel_order o = {ctx, cu, cuctx, dev, r, text};
    void *k = NULL;
    qjit_status st = qjit_ctx_obtain(ctx, QJIT_OBJ_KERNEL, r, cuctx, capture_stream, text,
                                     kernel_order_make, kernel_destroy, &o, &k, NULL);
    if (st == QJIT_OK)
        *out = k;
    return st;
}

/* ------------------------------------------------------------ handles */
#define MAX_KERNELS 255 /* distinct kernels of one handle: indices are uint8_t */

/* A tuned (N, K): the kernel of each bucket that has a tuned winner (-1: the bucket's
 * heuristic kernel). */
typedef struct tuned_problem {
    int64_t n, k;
    int16_t pick[QJIT_M_BUCKETS];
} tuned_problem;

struct qjit_gemm {
    qjit_gemm_desc desc; /* as asked for: configuration fields may be auto */
    char text[256];
    int nkernels;
    const kernel **kernels;
    bool *kernel_tuned;           /* kernels[i] was chosen by a tuned result */
    uint8_t pick[QJIT_M_BUCKETS]; /* M bucket -> kernels[], the heuristic's */
    size_t nproblems;
    tuned_problem *problems;
};

static void handle_destroy(void *p)
{
    qjit_gemm *g = p;
    if (!g)
        return;
    free(g->kernels);
    free(g->kernel_tuned);
    free(g->problems);
    free(g);
}

/* The index of resolved descriptor r's kernel in g, got (built or loaded) when new. */
static qjit_status add_kernel(qjit_context *ctx, qjit_gemm *g, const qjit_cu_api *cu,
                              CUcontext cuctx, CUdevice dev, int major, int minor,
                              const qjit_gemm_desc *r, bool tuned,
                              struct CUstream_st *capture_stream, int *index)
{
    for (int i = 0; i < g->nkernels; i++)
        if (memcmp(&g->kernels[i]->desc, r, sizeof *r) == 0) {
            *index = i;
            return QJIT_OK;
        }
    char text[256];
    qjit_desc_text(r, text, sizeof text);
    if (g->nkernels == MAX_KERNELS)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "%s: more than %d kernels in one handle",
                            g->text, MAX_KERNELS);
    if (!qjit_arch_runs_on(r->arch, major, minor))
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                            "%s: a cubin for %s does not run on the current device (sm_%d%d)",
                            text, qjit_arch_name(r->arch), major, minor);
    const kernel *k = NULL;
    qjit_status st = kernel_get(ctx, cu, cuctx, dev, r, capture_stream, &k);
    if (st != QJIT_OK)
        return st;
    g->kernels[g->nkernels] = k;
    g->kernel_tuned[g->nkernels] = tuned;
    *index = g->nkernels++;
    return QJIT_OK;
}

/* The handle of d: the dispatch select.c plans (each bucket's kernel, and tuned results
 * of this GPU for their N and K), each kernel got once. */
static qjit_status handle_make(qjit_context *ctx, const qjit_gemm_desc *d,
                               struct CUstream_st *capture_stream, qjit_gemm **out)
{
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev;
    int major = 0, minor = 0;
    char gpu[64];
    qjit_dispatch dp;
    qjit_status st = qjit_drv_current(&cu, &cuctx, &dev, &major, &minor);
    if (st == QJIT_OK)
        st = qjit_drv_device_name(cu, dev, gpu, sizeof gpu);
    if (st == QJIT_OK)
        st = qjit_select_dispatch(ctx, d, QJIT_ARCH_AUTO, gpu, true, &dp);
    if (st != QJIT_OK)
        return st;
    if (d->kernel != QJIT_KERNEL_AUTO && !qjit_family_measured(ctx->families, d->kernel)) {
        char text[256];
        qjit_desc_text(d, text, sizeof text);
        qjit_log(&ctx->log, QJIT_LOG_WARN,
                 "qjit: kernel %s has not yet passed qjit's GPU tests; check its results "
                 "before relying on them (%s)", qjit_kernel_name(d->kernel), text);
    }
    size_t cap = QJIT_M_BUCKETS * (1 + dp.nproblems);
    cap = cap < MAX_KERNELS ? cap : MAX_KERNELS;
    qjit_gemm *g = calloc(1, sizeof *g);
    if (!g || !(g->kernels = calloc(cap, sizeof *g->kernels)) ||
        !(g->kernel_tuned = calloc(cap, sizeof *g->kernel_tuned)) ||
        (dp.nproblems && !(g->problems = calloc(dp.nproblems, sizeof *g->problems)))) {
        handle_destroy(g);
        qjit_dispatch_free(&dp);
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "a handle");
    }
    g->desc = *d;
    qjit_desc_text(d, g->text, sizeof g->text);
    for (int b = 0; b < QJIT_M_BUCKETS && st == QJIT_OK; b++) {
        int i = 0;
        st = add_kernel(ctx, g, cu, cuctx, dev, major, minor, &dp.base[b], false,
                        capture_stream, &i);
        g->pick[b] = (uint8_t)i;
    }
    for (size_t p = 0; p < dp.nproblems && st == QJIT_OK; p++) {
        tuned_problem *t = &g->problems[g->nproblems++];
        t->n = dp.problems[p].n;
        t->k = dp.problems[p].k;
        for (int b = 0; b < QJIT_M_BUCKETS && st == QJIT_OK; b++) {
            int i = -1;
            if (dp.problems[p].has[b])
                st = add_kernel(ctx, g, cu, cuctx, dev, major, minor, &dp.problems[p].desc[b],
                                true, capture_stream, &i);
            t->pick[b] = (int16_t)i;
        }
    }
    qjit_dispatch_free(&dp);
    if (st != QJIT_OK) {
        handle_destroy(g);
        return st;
    }
    /* a second thread may have made the same handle meanwhile: keep the first */
    pthread_mutex_lock(&ctx->mu);
    qjit_gemm *old = qjit_ctx_find(ctx, QJIT_OBJ_HANDLE, d, cuctx);
    if (old) {
        handle_destroy(g);
        g = old;
    } else if (!qjit_ctx_adopt(ctx, g, handle_destroy)) {
        handle_destroy(g);
        g = NULL;
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "the context's list of handles");
    } else {
        qjit_ctx_insert(ctx, QJIT_OBJ_HANDLE, d, cuctx, g); /* best effort */
    }
    pthread_mutex_unlock(&ctx->mu);
    *out = g;
    return st;
}

qjit_status qjit_context_get_gemm(qjit_context *ctx, const qjit_gemm_desc *d,
                                  struct CUstream_st *capture_stream, qjit_gemm **out)
{
    if (!ctx || !d || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_get_gemm: NULL argument");
    const qjit_cu_api *cu;
    qjit_status st = qjit_drv_load(&cu);
    if (st != QJIT_OK)
        return st;
    CUcontext cuctx = NULL;
    CUresult cr = cu->CtxGetCurrent(&cuctx);
    if (cr != CUDA_SUCCESS)
        return qjit_drv_fail(cu, cr, "cuCtxGetCurrent");

    /* warm path: one lock, one probe */
    pthread_mutex_lock(&ctx->mu);
    ctx->stats.gets++;
    qjit_gemm *g = qjit_ctx_find(ctx, QJIT_OBJ_HANDLE, d, cuctx);
    if (g)
        ctx->stats.memory_hits++;
    pthread_mutex_unlock(&ctx->mu);
    if (!g && (st = handle_make(ctx, d, capture_stream, &g)) != QJIT_OK)
        return st;
    *out = g;
    return QJIT_OK;
}

qjit_status qjit_get_gemm(const qjit_gemm_desc *d, qjit_gemm **out)
{
    qjit_context *ctx;
    qjit_status st = qjit_default_context(&ctx);
    if (st != QJIT_OK)
        return st;
    return qjit_context_get_gemm(ctx, d, NULL, out);
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }
static int lcm(int a, int b) { return (int)(a / gcd64(a, b) * b); }

/* What K a launch of k accepts: its loads' multiple and what the pair needs
 * (qjit_desc_k_unit); check_args refuses the rest, naming the rule. */
static int k_multiple(const kernel *k)
{
    return lcm(k->plan.k_multiple, qjit_desc_k_unit(&k->desc));
}

static void kernel_info(const kernel *k, qjit_gemm_info *o)
{
    memset(o, 0, sizeof *o);
    o->desc = k->desc;
    memcpy(o->text, k->text, sizeof o->text);
    memcpy(o->key, k->key, 16);
    o->threads = k->plan.threads;
    o->shared_bytes = k->plan.smem;
    o->registers = k->registers;
    o->k_multiple = k_multiple(k);
    o->ld_multiple = k->plan.ld_multiple;
    o->ptr_align = k->plan.align;
}

/* The kernel a launch runs: a tuned result for its N and K at its M bucket, else the
 * bucket's heuristic kernel.  A table lookup and a short scan, nothing else. */
static inline int pick_index(const qjit_gemm *h, int64_t m, int64_t n, int64_t k, bool *tuned)
{
    const int b = qjit_m_bucket(m);
    for (size_t i = 0; i < h->nproblems; i++)
        if (h->problems[i].n == n && h->problems[i].k == k) {
            if (h->problems[i].pick[b] >= 0) {
                *tuned = true;
                return h->problems[i].pick[b];
            }
            break;
        }
    *tuned = false;
    return h->pick[b];
}

static inline const kernel *pick(const qjit_gemm *h, const qjit_gemm_args *a)
{
    bool tuned;
    return h->kernels[pick_index(h, a->m, a->n, a->k, &tuned)];
}

qjit_status qjit_gemm_get_info(const qjit_gemm *g, qjit_gemm_info *o)
{
    if (!g || !o)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_get_info: NULL argument");
    kernel_info(g->kernels[g->pick[QJIT_M_BUCKETS - 1]], o);
    /* what every kernel of the handle accepts */
    for (int i = 0; i < g->nkernels; i++) {
        const qjit_plan *p = &g->kernels[i]->plan;
        o->k_multiple = lcm(o->k_multiple, k_multiple(g->kernels[i]));
        o->ld_multiple = lcm(o->ld_multiple, p->ld_multiple);
        o->ptr_align = o->ptr_align > p->align ? o->ptr_align : p->align;
    }
    o->variants = g->nkernels;
    return QJIT_OK;
}

/* Variants: runs of buckets that pick one kernel, first the heuristic's, then each tuned
 * (N, K)'s. */
static void add_variant(qjit_gemm_variant *out, size_t cap, size_t *count, const kernel *k,
                        int b0, int b1, int64_t n, int64_t kk, bool tuned)
{
    if (*count < cap) {
        qjit_gemm_variant *v = &out[*count];
        memset(v, 0, sizeof *v);
        v->desc = k->desc;
        memcpy(v->text, k->text, sizeof v->text);
        v->m_min = b0 ? qjit_m_bucket_max(b0 - 1) + 1 : 1;
        v->m_max = qjit_m_bucket_max(b1);
        v->n = n;
        v->k = kk;
        v->tuned = tuned;
    }
    (*count)++;
}

qjit_status qjit_gemm_get_variants(const qjit_gemm *g, qjit_gemm_variant *out, size_t cap,
                                   size_t *count)
{
    if (!g || !count || (cap && !out))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_get_variants: NULL argument");
    *count = 0;
    for (int b = 0, b0 = 0; b < QJIT_M_BUCKETS; b++)
        if (b + 1 == QJIT_M_BUCKETS || g->pick[b + 1] != g->pick[b]) {
            add_variant(out, cap, count, g->kernels[g->pick[b]], b0, b, 0, 0, false);
            b0 = b + 1;
        }
    for (size_t p = 0; p < g->nproblems; p++) {
        const tuned_problem *t = &g->problems[p];
        for (int b = 0, b0 = 0; b < QJIT_M_BUCKETS; b++)
            if (b + 1 == QJIT_M_BUCKETS || t->pick[b + 1] != t->pick[b]) {
                if (t->pick[b] >= 0)
                    add_variant(out, cap, count, g->kernels[t->pick[b]], b0, b, t->n, t->k, true);
                b0 = b + 1;
            }
    }
    return QJIT_OK;
}

qjit_status qjit_gemm_choose(const qjit_gemm *g, int64_t m, int64_t n, int64_t k,
                             qjit_gemm_variant *out)
{
    if (!g || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_choose: NULL argument");
    bool tuned;
    int i = pick_index(g, m, n, k, &tuned);
    int b = qjit_m_bucket(m);
    add_variant(out, 1, &(size_t){0}, g->kernels[i], b, b, tuned ? n : 0, tuned ? k : 0, tuned);
    return QJIT_OK;
}

/* ------------------------------------------------------------ launch */
/* Everything checked on the host before any kernel runs; nothing touches the device. */
static qjit_status check_args(const kernel *g, const qjit_gemm_args *a)
{
#define BAD(...) return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, __VA_ARGS__)
    if (a->m < 0 || a->n < 0 || a->k < 0)
        BAD("%s: negative size m=%lld n=%lld k=%lld", g->text, (long long)a->m,
            (long long)a->n, (long long)a->k);
    if (a->m == 0 || a->n == 0)
        return QJIT_OK;
    if (!a->a || !a->b || !a->d)
        BAD("%s: argument '%s' is NULL", g->text, !a->a ? "a" : !a->b ? "b" : "d");
    if (g->desc.bias && !a->bias)
        BAD("%s: argument 'bias' is NULL but the descriptor has bias=1", g->text);
    if ((uintptr_t)a->a % (uintptr_t)g->plan.align || (uintptr_t)a->b % (uintptr_t)g->plan.align)
        BAD("%s: argument '%s' = %p is not %d-byte aligned", g->text,
            (uintptr_t)a->a % (uintptr_t)g->plan.align ? "a" : "b",
            (uintptr_t)a->a % (uintptr_t)g->plan.align ? a->a : a->b, g->plan.align);
    if ((uintptr_t)a->d % (uintptr_t)g->out_bytes)
        BAD("%s: argument 'd' = %p is not %d-byte aligned", g->text, a->d, g->out_bytes);
    if (g->desc.bias && (uintptr_t)a->bias % (uintptr_t)g->out_bytes)
        BAD("%s: argument 'bias' = %p is not %d-byte aligned", g->text, a->bias, g->out_bytes);
    const qjit_gemm_desc *d = &g->desc;
    if (d->sa != QJIT_SCALE_NONE && !a->scale_a)
        BAD("%s: argument 'scale_a' is NULL but sa=%s needs it", g->text, mode_name(d->sa));
    if (d->sb != QJIT_SCALE_NONE && !a->scale_b)
        BAD("%s: argument 'scale_b' is NULL but sb=%s needs it", g->text, mode_name(d->sb));
    if (d->zeros && !a->zeros_b)
        BAD("%s: argument 'zeros_b' is NULL but the descriptor has zeros=1", g->text);
    int sa_align = d->sa == QJIT_SCALE_MX ? 1 : 4;
    int sb_align = d->sb == QJIT_SCALE_MX      ? 1
                   : d->sb == QJIT_SCALE_GROUP ? dtype_bytes(d->group_scale)
                                               : 4;
    if (d->sa != QJIT_SCALE_NONE && (uintptr_t)a->scale_a % (uintptr_t)sa_align)
        BAD("%s: argument 'scale_a' = %p is not %d-byte aligned", g->text, a->scale_a, sa_align);
    if (d->sb != QJIT_SCALE_NONE && (uintptr_t)a->scale_b % (uintptr_t)sb_align)
        BAD("%s: argument 'scale_b' = %p is not %d-byte aligned", g->text, a->scale_b, sb_align);
    if (d->zeros && (uintptr_t)a->zeros_b % (uintptr_t)sb_align)
        BAD("%s: argument 'zeros_b' = %p is not %d-byte aligned", g->text, a->zeros_b, sb_align);
    char why[128];
    if (!qjit_desc_k_fits(d, a->k, why, sizeof why))
        BAD("%s: %s", g->text, why);
    if (a->k == 0 || a->k % g->plan.k_multiple)
        BAD("%s: k=%lld must be a positive multiple of %d (this kernel's loads along K)",
            g->text, (long long)a->k, g->plan.k_multiple);
    if (a->lda < a->k || a->lda % g->plan.ld_multiple)
        BAD("%s: lda=%lld must be >= k=%lld and a multiple of %d", g->text, (long long)a->lda,
            (long long)a->k, g->plan.ld_multiple);
    if (a->ldb < a->k || a->ldb % g->plan.ld_multiple)
        BAD("%s: ldb=%lld must be >= k=%lld and a multiple of %d", g->text, (long long)a->ldb,
            (long long)a->k, g->plan.ld_multiple);
    if (a->ldd < a->n)
        BAD("%s: ldd=%lld must be >= n=%lld", g->text, (long long)a->ldd, (long long)a->n);
    if ((a->m + g->desc.bm - 1) / g->desc.bm > 65535)
        BAD("%s: m=%lld needs more than 65535 row tiles of %d", g->text, (long long)a->m, g->desc.bm);
    if ((a->n + g->desc.bn - 1) / g->desc.bn > 0x7fffffff)
        BAD("%s: n=%lld is too large", g->text, (long long)a->n);
#undef BAD
    return QJIT_OK;
}

/* The grid and the cluster shape (qjit_internal.h).  Kernels that split K across a cluster
 * (cluster_k) plan for per_sm CTAs a SM: two (QJIT_SPLIT_OCC: as many as fit), one for a
 * persistent kernel, which is made to fill an SM alone.  When the tiles fill at most half of
 * those, each output tile gets enough CTAs for about per_sm a SM, at most cluster_k and one K
 * chunk each (clusters along z); each CTA then has one tile.  Kernels that
 * share B across CTAs of the same columns (cluster_m) go in clusters of cluster_m along x
 * when the output has that many tile rows, on a one-dimensional grid of whole clusters that
 * walk the units of cluster_m tiles (when persistent, as many as fit at once).  Both depend
 * only on the sizes, so a replayed launch splits and groups the same way. */
void qjit_launch_grid(const qjit_grid_facts *f, int64_t m, int64_t n, int64_t k, unsigned grid[3],
                      unsigned cluster[3])
{
    cluster[0] = cluster[1] = cluster[2] = 1;
    grid[0] = (unsigned)((n + f->bn - 1) / f->bn);
    grid[1] = (unsigned)((m + f->bm - 1) / f->bm);
    /* a kernel that splits K across a cluster splits it only as chosen below */
    grid[2] = f->cluster_k > 1 ? 1 : (unsigned)f->split_k;
    uint64_t tiles = (uint64_t)grid[0] * grid[1];
    if (f->cluster_m > 1) {
        const unsigned cl = grid[1] >= (unsigned)f->cluster_m ? (unsigned)f->cluster_m : 1;
        uint64_t units = (uint64_t)grid[0] * ((grid[1] + cl - 1) / cl);
        /* persistent: as many CTAs (or clusters) as fit at once walk the units */
        const uint64_t most = cl > 1 ? (uint64_t)f->max_clusters : (uint64_t)f->persistent_ctas;
        if (f->persistent_ctas && most > 0 && units > most)
            units = most;
        grid[0] = (unsigned)(units * cl);
        grid[1] = grid[2] = 1;
        cluster[0] = cl;
        return;
    }
    if (f->persistent_ctas && tiles > (uint64_t)f->persistent_ctas) {
        grid[0] = (unsigned)f->persistent_ctas; /* the CTAs walk the tiles */
        grid[1] = 1;
    }
    const uint64_t per_sm = f->persistent_ctas ? 1 : f->per_sm > 0 ? (uint64_t)f->per_sm : 2;
    if (f->cluster_k > 1 && f->sms > 0 && 2 * tiles <= per_sm * (uint64_t)f->sms) {
        const int64_t chunks = (k + f->k_chunk - 1) / f->k_chunk;
        unsigned c = (unsigned)(per_sm * (uint64_t)f->sms / tiles);
        if (c > (unsigned)f->cluster_k)
            c = (unsigned)f->cluster_k;
        if ((int64_t)c > chunks) /* k > 0 here, so chunks >= 1 */
            c = (unsigned)chunks;
        grid[2] = cluster[2] = c;
    }
}

/* The kernel's parameter with no flags (a launch that asks for an early start sets
 * QJIT_KERNEL_EARLY), its grid and cluster. */
static void fill_config(const kernel *g, const qjit_gemm_args *a, unsigned grid[3],
                        unsigned cluster[3], qjit_kernel_params *p)
{
    *p = (qjit_kernel_params){a->a,       a->b,       a->d,       a->bias, a->scale_a,
                       a->scale_b, a->zeros_b, a->m,       a->n,    a->k,
                       a->lda,     a->ldb,     a->ldd,     0};
    qjit_launch_grid(&g->gf, a->m, a->n, a->k, grid, cluster);
}

/* The tensor maps of a TMA kernel (plan.tma): A's rows [m][k] and B's [n][k] of one- or
 * two-byte values (A and B alike), 128-byte swizzle, boxes of one 128-byte row of K by BM
 * rows (A) and BN/2 rows (B: two boxes a tile, or one from each CTA of a cluster pair), zeros
 * outside the tensor; with plan.tma 2, A's alone (B is copied as stored, packed).  With
 * plan.tma_rows, A's again in boxes of that many rows (the kernel copies a tile that passes M
 * box by box, up to M).  The kernel's tiles are laid out the way these boxes land
 * (gemm_hopper.cuh, produce_tma and produce).  Host work only, no device call: legal while a
 * stream is captured.  maps: A, B, A by tma_rows (the launch passes them after the
 * parameter struct in that order, B left out where plan.tma is 2). */
static qjit_status encode_maps(const kernel *g, const qjit_gemm_args *a, CUtensorMap maps[3])
{
    if (!g->cu->TensorMapEncodeTiled)
        return qjit_err_set(QJIT_ERROR_NO_DEVICE,
                            "%s: this CUDA driver has no cuTensorMapEncodeTiled (CUDA 12 or later "
                            "is needed for TMA kernels)",
                            g->text);
    const struct {
        const void *base;
        int64_t rows, ld;
        unsigned box_rows;
        const char *what;
    } op[3] = {{a->a, a->m, a->lda, (unsigned)g->desc.bm, "cuTensorMapEncodeTiled(a)"},
               {a->b, a->n, a->ldb, (unsigned)g->desc.bn / 2, "cuTensorMapEncodeTiled(b)"},
               {a->a, a->m, a->lda, (unsigned)g->plan.tma_rows, "cuTensorMapEncodeTiled(a, rows)"}};
    const int es = dtype_bytes(g->desc.a); /* 1 or 2: the plan takes A and B of one size */
    for (int i = 0; i < 3; i++) {
        if ((i == 1 && g->plan.tma == 2) || (i == 2 && !g->plan.tma_rows))
            continue;
        const cuuint64_t dims[2] = {(cuuint64_t)a->k, (cuuint64_t)op[i].rows};
        const cuuint64_t strides[1] = {(cuuint64_t)(op[i].ld * es)}; /* bytes */
        const cuuint32_t box[2] = {(cuuint32_t)(128 / es), op[i].box_rows}, step[2] = {1, 1};
        CUresult r = g->cu->TensorMapEncodeTiled(
            &maps[i], es == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
            (void *)op[i].base, dims, strides, box,
            step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return qjit_err_prefix(qjit_drv_fail(g->cu, r, op[i].what), "%s", g->text);
    }
    return QJIT_OK;
}

/* The kernel a launch runs, with its arguments and context checked. */
static qjit_status checked(const qjit_gemm *h, const qjit_gemm_args *a, CUstream stream,
                           const kernel **out)
{
    const kernel *k = pick(h, a);
    qjit_status st = check_args(k, a);
    if (st == QJIT_OK)
        st = qjit_drv_check_context(k->cu, k->cuctx, k->dev, stream, k->text);
    *out = k;
    return st;
}

qjit_status qjit_gemm_check_launch(const qjit_gemm *h, const qjit_gemm_args *a)
{
    const kernel *k;
    return checked(h, a, NULL, &k);
}

/* The launch of qjit_gemm_launch; early: the caller vouches that the kernel before this one
 * in the stream writes none of B, scale_b, zeros_b, so the early start is safe whatever
 * QJIT_PDL asks for GEMMs (qjit_gemm_launch_early). */
static qjit_status launch(const qjit_gemm *h, const qjit_gemm_args *a, CUstream stream,
                          bool early)
{
    if (!h || !a)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_launch: NULL argument");
    const kernel *k;
    qjit_status st = checked(h, a, stream, &k);
    if (st != QJIT_OK || a->m == 0 || a->n == 0)
        return st;
    const bool pdl = k->pdl || (early && k->early);
    qjit_kernel_params p;
    unsigned grid[3], cluster[3];
    fill_config(k, a, grid, cluster, &p);
    /* as the launch below asks; the weight side early where the caller vouches for it */
    p.flags = pdl ? QJIT_KERNEL_EARLY | (early || k->pdl_weights ? QJIT_KERNEL_EARLY_WEIGHTS : 0) : 0;
    /* the kernel's parameters: p, then its maps (A, B where plan.tma is 1, A by tma_rows) */
    CUtensorMap maps[3];
    void *params[4] = {&p, &maps[0], &maps[1], &maps[2]};
    if (k->plan.tma == 2)
        params[2] = &maps[2];
    if (k->plan.tma && (st = encode_maps(k, a, maps)) != QJIT_OK)
        return st;
    /* a cluster shape, and an early start: the kernel's griddepcontrol.wait (qc::pdl_wait)
     * holds it until the previous kernel in the stream has finished */
    const char *what = "cuLaunchKernel";
    const CUresult r = qjit_drv_launch(k->cu, k->fn, grid, k->plan.threads, k->plan.smem,
                                       stream, params, cluster, pdl, &what);
    if (r != CUDA_SUCCESS)
        return qjit_err_prefix(qjit_drv_fail(k->cu, r, what), "%s", k->text);
    return QJIT_OK;
}

qjit_status qjit_gemm_launch(const qjit_gemm *h, const qjit_gemm_args *a,
                             struct CUstream_st *stream)
{
    return launch(h, a, (CUstream)stream, false);
}

qjit_status qjit_gemm_launch_early(const qjit_gemm *h, const qjit_gemm_args *a,
                                   struct CUstream_st *stream)
{
    return launch(h, a, (CUstream)stream, true);
}

qjit_status qjit_gemm_launch_config(const qjit_gemm *h, const qjit_gemm_args *a,
                                    qjit_launch_config *cfg)
{
    if (!h || !a || !cfg)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_launch_config: NULL argument");
    const kernel *g;
    qjit_status st = checked(h, a, NULL, &g);
    if (st != QJIT_OK)
        return st;
    if (g->plan.tma)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                            "%s: this kernel takes tensor maps beside its parameter, which "
                            "qjit_launch_config does not describe; launch it with "
                            "qjit_gemm_launch",
                            g->text);
    memset(cfg, 0, sizeof *cfg);
    qjit_kernel_params p; /* flags 0: a raw launch asks for no early start */
    unsigned cluster[3];
    fill_config(g, a, cfg->grid, cluster, &p);
    cfg->cluster_z = cluster[2];
    cfg->function = g->fn;
    cfg->block[0] = g->plan.threads;
    cfg->block[1] = cfg->block[2] = 1;
    cfg->shared_bytes = g->plan.smem;
    memcpy(cfg->params, &p, sizeof p);
    cfg->params_size = sizeof p;
    return QJIT_OK;
}
