/*
 * quant_kernel.c — quantization kernel handles: a descriptor resolved for an arch, its
 * template (templates/quant.cu) expanded and built through the GEMMs' path (build.c:
 * key, cache, NVRTC), loaded once per CUDA context; launch (checks, then one or two
 * cuLaunchKernel); precompile; and the quantize-then-GEMM helper of a linear layer.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUANT_TEMPLATE "quant.cu"
#define THREADS 256
#define UNITS 4 /* block and mx: chunks of 16 bytes a lane loads before the first reduction */
#define ROW_CHUNKS 8 /* row and tensor: 16-byte chunks a thread holds (rows_per_cta) */
#define COL_BLOCKS 4 /* layout=cols: MX blocks along M a CTA takes (the template's NB) */
#define COL_K (THREADS / COL_BLOCKS) /* layout=cols: columns a CTA takes */
#define MAX_PARTS 1024 /* tensor scale: partial maxima, one float each in the workspace */
_Static_assert(MAX_PARTS * 4 <= QJIT_QUANT_WORKSPACE_BYTES, "the tensor workspace");

struct qjit_quant {
    qjit_quant_desc desc; /* resolved */
    char text[128];
    uint8_t key[16];
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev;
    CUmodule module;
    CUfunction fn, amax; /* amax: scale=tensor's first kernel */
    bool pdl;             /* launched with programmatic stream serialization (sm_90a, unless QJIT_PDL=0) */
};

/* The context's map keys objects by a GEMM descriptor's bytes; a quant descriptor's bytes,
 * zero-padded, under their own kind. */
_Static_assert(sizeof(qjit_quant_desc) <= sizeof(qjit_gemm_desc), "map key");
static qjit_gemm_desc map_key(const qjit_quant_desc *d)
{
    qjit_gemm_desc k;
    memset(&k, 0, sizeof k);
    memcpy(&k, d, sizeof *d);
    return k;
}

static int in_bytes(qjit_dtype t) { return qjit_desc_dtype_bits(t) / 8; }

/* ------------------------------------------------------------ resolve and build */
/* d with its arch named (the given one, else the context's override, else the device's),
 * validated for that arch. */
static qjit_status resolve(qjit_context *ctx, const qjit_quant_desc *d, qjit_arch arch,
                           int major, int minor, qjit_quant_desc *r)
{
    qjit_status st = qjit_quant_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    *r = *d;
    if (r->arch == QJIT_ARCH_AUTO)
        r->arch = arch != QJIT_ARCH_AUTO ? arch : ctx->opt.arch;
    if (r->arch == QJIT_ARCH_AUTO && major > 0)
        r->arch = qjit_arch_for_device(major, minor);
    if (r->arch == QJIT_ARCH_AUTO)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "quant descriptor: arch=auto with no device to take it from; name "
                            "one (%s)",
                            qjit_arch_list());
    return qjit_quant_desc_validate(r);
}

static qjit_status build(qjit_context *ctx, const qjit_quant_desc *r, bool must_store,
                         uint8_t key[16], void **cubin, size_t *n, int *cached)
{
    char text[128];
    qjit_quant_text(r, text, sizeof text);
    static const char *const rules[] = {"floor", "rceil"};
    const char *scale = r->scale == QJIT_SCALE_ROW      ? "row"
                        : r->scale == QJIT_SCALE_TENSOR ? "tensor"
                        : r->scale == QJIT_SCALE_BLOCK  ? "block"
                                                        : "mx";
    const qjit_tparam p[] = {
        {"IN", QJIT_TP_STR, 0, qjit_desc_dtype_name(r->in)},
        {"OUT", QJIT_TP_STR, 0, qjit_desc_dtype_name(r->out)},
        {"SCALE", QJIT_TP_STR, 0, scale},
        {"RULE", QJIT_TP_STR, 0, rules[r->rule]},
        {"COLS", QJIT_TP_BOOL, r->cols, NULL},
        {"ARCH", QJIT_TP_INT, (long long)r->arch, NULL},
        {"QPARAMS_BYTES", QJIT_TP_INT, (long long)sizeof(qjit_quant_kernel_params), NULL},
        {"UNITS", QJIT_TP_INT, UNITS, NULL},
        {"ROW_CHUNKS", QJIT_TP_INT, ROW_CHUNKS, NULL},
        {"COL_BLOCKS", QJIT_TP_INT, COL_BLOCKS, NULL},
    };
    qjit_expansion e;
    qjit_status st = qjit_sandbox_expand(ctx->opt.template_dir, QUANT_TEMPLATE, p,
                                         (int)(sizeof p / sizeof p[0]), NULL, &e);
    if (st != QJIT_OK)
        return qjit_err_prefix(st, "%s", text);
    return qjit_build_expanded(ctx, text, r->arch, &e, must_store, key, cubin, n, cached);
}

qjit_status qjit_quant_precompile(qjit_context *ctx, const qjit_quant_desc *d, qjit_arch arch,
                                  int *was_cached)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_quant_precompile: NULL argument");
    qjit_status st = ctx ? QJIT_OK : qjit_default_context(&ctx);
    qjit_quant_desc r;
    if (st == QJIT_OK)
        st = resolve(ctx, d, arch, 0, 0, &r);
    if (st != QJIT_OK)
        return st;
    void *cubin = NULL;
    size_t n = 0;
    uint8_t key[16];
    int cached = 0;
    st = build(ctx, &r, true, key, &cubin, &n, &cached);
    free(cubin);
    if (st == QJIT_OK && was_cached)
        *was_cached = cached;
    return st;
}

/* ------------------------------------------------------------ handles */
static void quant_destroy(void *p)
{
    qjit_quant *q = p;
    if (q->module && q->cu->CtxPushCurrent(q->cuctx) == CUDA_SUCCESS) {
        q->cu->ModuleUnload(q->module);
        CUcontext popped;
        q->cu->CtxPopCurrent(&popped);
    }
    free(q);
}

static qjit_status quant_make(qjit_context *ctx, const qjit_cu_api *cu, CUcontext cuctx,
                              CUdevice dev, const qjit_quant_desc *r, qjit_quant **out)
{
    qjit_quant *q = calloc(1, sizeof *q);
    if (!q)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "a quant handle");
    q->desc = *r;
    qjit_quant_text(r, q->text, sizeof q->text);
    q->cu = cu;
    q->cuctx = cuctx;
    q->dev = dev;
    q->pdl = ctx->pdl_quant && r->arch == QJIT_ARCH_SM90A;
    void *cubin = NULL;
    size_t n = 0;
    int cached = 0;
    qjit_status st = build(ctx, r, false, q->key, &cubin, &n, &cached);
    CUresult cr = CUDA_SUCCESS;
    if (st == QJIT_OK && (cr = cu->ModuleLoadData(&q->module, cubin)) != CUDA_SUCCESS)
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleLoadData"), "%s", q->text);
    if (st == QJIT_OK &&
        (cr = cu->ModuleGetFunction(&q->fn, q->module, "qjit_quant_kernel")) != CUDA_SUCCESS)
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleGetFunction(qjit_quant_kernel)"),
                             "%s", q->text);
    if (st == QJIT_OK && r->scale == QJIT_SCALE_TENSOR &&
        (cr = cu->ModuleGetFunction(&q->amax, q->module, "qjit_quant_amax")) != CUDA_SUCCESS)
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleGetFunction(qjit_quant_amax)"),
                             "%s", q->text);
    free(cubin);
    if (st != QJIT_OK) {
        quant_destroy(q);
        return st;
    }
    pthread_mutex_lock(&ctx->mu);
    if (cached)
        ctx->stats.disk_hits++;
    pthread_mutex_unlock(&ctx->mu);
    *out = q;
    return QJIT_OK;
}

/* What quant_make needs, for qjit_ctx_obtain. */
typedef struct quant_order {
    qjit_context *ctx;
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev;
    const qjit_quant_desc *r;
} quant_order;

static qjit_status quant_order_make(void *arg, void **obj)
{
    const quant_order *o = arg;
    return quant_make(o->ctx, o->cu, o->cuctx, o->dev, o->r, (qjit_quant **)obj);
}

qjit_status qjit_context_get_quant(qjit_context *ctx, const qjit_quant_desc *d,
                                   struct CUstream_st *capture_stream, qjit_quant **out)
{
    if (!d || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_get_quant: NULL argument");
    qjit_status st = qjit_quant_desc_validate(d); /* bad input first, whatever the device */
    if (st == QJIT_OK && !ctx)
        st = qjit_default_context(&ctx);
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUdevice dev;
    int major, minor;
    if (st == QJIT_OK)
        st = qjit_drv_current(&cu, &cuctx, &dev, &major, &minor);
    qjit_quant_desc r;
    if (st == QJIT_OK)
        st = resolve(ctx, d, QJIT_ARCH_AUTO, major, minor, &r);
    if (st != QJIT_OK)
        return st;
    char text[128];
    qjit_quant_text(&r, text, sizeof text);
    if (!qjit_arch_runs_on(r.arch, major, minor))
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                            "%s: a cubin for %s does not run on the current device (sm_%d%d)",
                            text, qjit_arch_name(r.arch), major, minor);
    const qjit_gemm_desc key = map_key(&r);
    quant_order o = {ctx, cu, cuctx, dev, &r};
    void *q = NULL;
    bool hit = false;
    st = qjit_ctx_obtain(ctx, QJIT_OBJ_QUANT, &key, cuctx, capture_stream, text, quant_order_make,
                         quant_destroy, &o, &q, &hit);
    pthread_mutex_lock(&ctx->mu);
    ctx->stats.gets++;
    ctx->stats.memory_hits += hit;
    pthread_mutex_unlock(&ctx->mu);
    if (st == QJIT_OK)
        *out = q;
    return st;
}

qjit_status qjit_quant_get_desc(const qjit_quant *q, qjit_quant_desc *out, char *text,
                                size_t cap)
{
    if (!q)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_quant_get_desc: NULL handle");
    if (out)
        *out = q->desc;
    if (text && cap)
        snprintf(text, cap, "%s", q->text);
    return QJIT_OK;
}

/* ------------------------------------------------------------ launch */
/* Row and tensor: the rows a CTA takes, as the template's rows_per_cta: one up to 512 rows,
 * else the fewest threads (256 / rows, at least a warp) that hold a row of k values in
 * ROW_CHUNKS chunks each. */
static int64_t rows_per_cta(int64_t m, int64_t k, int64_t vec)
{
    int64_t rows = 1;
    while (m > 512 && rows < 8 && k <= THREADS / (2 * rows) * ROW_CHUNKS * vec)
        rows *= 2;
    return rows;
}

/* The grid of a launch (256 threads a CTA): row and tensor a CTA per rows_per_cta rows;
 * block and mx a warp per 32 x UNITS chunks of 16 bytes (8 values, 4 for f32), so
 * UNITS x 32 x vec / g groups of g values, as the template's kernels take them; cols a CTA
 * per 32 * COL_BLOCKS rows x COL_K columns.  A batch is grid y (cols: z). */
static void grid_of(const qjit_quant_desc *d, const qjit_quant_args *a, int64_t grid[3])
{
    const int64_t batch = a->batch > 1 ? a->batch : 1;
    grid[1] = batch;
    grid[2] = 1;
    const int64_t vec = d->in == QJIT_DTYPE_F32 ? 4 : 8;
    if (d->cols) {
        grid[0] = (a->k + COL_K - 1) / COL_K;
        grid[1] = (a->m + 32 * COL_BLOCKS - 1) / (32 * COL_BLOCKS);
        grid[2] = batch;
    } else if (d->scale == QJIT_SCALE_BLOCK || d->scale == QJIT_SCALE_MX) {
        const int64_t g = d->scale == QJIT_SCALE_BLOCK ? 128 : 32;
        const int64_t groups = a->m * ((a->k + g - 1) / g), per_cta = 8 * UNITS * (32 * vec / g);
        grid[0] = (groups + per_cta - 1) / per_cta;
    } else {
        const int64_t rows = rows_per_cta(a->m, a->k, vec);
        grid[0] = (a->m + rows - 1) / rows;
    }
}

static qjit_status check_args(const qjit_quant *q, const qjit_quant_args *a, float *clip)
{
    const qjit_quant_desc *d = &q->desc;
    const char *t = q->text;
#define BAD(...) return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, __VA_ARGS__)
    if (a->m < 0 || a->k < 1)
        BAD("%s: m=%lld k=%lld (m >= 0, k >= 1)", t, (long long)a->m, (long long)a->k);
    *clip = a->clip == 0.0f ? 1.0f : a->clip;
    if (!(*clip > 0.0f && *clip <= 1.0f))
        BAD("%s: clip=%g must be in (0, 1] (0 means 1)", t, (double)a->clip);
    if (d->scale == QJIT_SCALE_MX && *clip != 1.0f)
        BAD("%s: clip=%g: the MX scale rules take no clip ratio", t, (double)a->clip);
    const int64_t batch = a->batch > 0 ? a->batch : 1;
    if (a->batch < 0)
        BAD("%s: batch=%lld is negative", t, (long long)a->batch);
    if (batch > 1 && d->scale == QJIT_SCALE_TENSOR)
        BAD("%s: batch=%lld: scale=tensor takes one matrix a launch", t, (long long)batch);
    if (batch > 65535)
        BAD("%s: batch=%lld is more than 65535 matrices", t, (long long)batch);
    if (a->m == 0)
        return QJIT_OK;
    if (!a->x || !a->q || !a->scale)
        BAD("%s: argument '%s' is NULL", t, !a->x ? "x" : !a->q ? "q" : "scale");
    if (d->scale == QJIT_SCALE_TENSOR && !a->workspace)
        BAD("%s: argument 'workspace' is NULL; scale=tensor needs %d bytes of device memory",
            t, QJIT_QUANT_WORKSPACE_BYTES);
    const bool packed = qjit_desc_dtype_bits(d->out) == 4;
    if ((uintptr_t)a->x % (uintptr_t)in_bytes(d->in))
        BAD("%s: argument 'x' = %p is not %d-byte aligned", t, a->x, in_bytes(d->in));
    if (d->scale != QJIT_SCALE_MX && (uintptr_t)a->scale % 4)
        BAD("%s: argument 'scale' = %p is not 4-byte aligned", t, a->scale);
    if (d->scale == QJIT_SCALE_TENSOR && (uintptr_t)a->workspace % 4)
        BAD("%s: argument 'workspace' = %p is not 4-byte aligned", t, a->workspace);
    if (a->ldx < a->k)
        BAD("%s: ldx=%lld must be >= k=%lld", t, (long long)a->ldx, (long long)a->k);
    /* q is [M][K], or [K][M] for layout=cols; the blocks run along its rows either way */
    const int64_t q_rows = d->cols ? a->k : a->m, q_len = d->cols ? a->m : a->k;
    if (a->ldq < q_len)
        BAD("%s: ldq=%lld must be >= %s=%lld", t, (long long)a->ldq, d->cols ? "m" : "k",
            (long long)q_len);
    if (packed && (q_len % 2 || a->ldq % 2))
        BAD("%s: %s=%lld and ldq=%lld must be even: 4-bit values pack two a byte", t,
            d->cols ? "m" : "k", (long long)q_len, (long long)a->ldq);
    if (d->scale == QJIT_SCALE_MX && q_len % 32)
        BAD("%s: %s=%lld is not a multiple of 32, the MX block size", t, d->cols ? "m" : "k",
            (long long)q_len);
    if (batch > 1 && (a->x_batch_stride < a->m * a->ldx || a->q_batch_stride < q_rows * a->ldq))
        BAD("%s: x_batch_stride=%lld and q_batch_stride=%lld must hold a matrix each (%lld, "
            "%lld elements)",
            t, (long long)a->x_batch_stride, (long long)a->q_batch_stride,
            (long long)(a->m * a->ldx), (long long)(q_rows * a->ldq));
    if (batch > 1 && packed && a->q_batch_stride % 2)
        BAD("%s: q_batch_stride=%lld must be even for 4-bit q", t, (long long)a->q_batch_stride);
    int64_t grid[3];
    grid_of(d, a, grid);
    if (grid[0] > 0x7fffffff || grid[1] > 65535 || grid[2] > 65535)
        BAD("%s: m=%lld k=%lld is too large for one launch", t, (long long)a->m,
            (long long)a->k);
#undef BAD
    return QJIT_OK;
}

qjit_status qjit_quant_launch(const qjit_quant *q, const qjit_quant_args *a,
                              struct CUstream_st *stream)
{
    if (!q || !a)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_quant_launch: NULL argument");
    float clip = 1.0f;
    qjit_status st = check_args(q, a, &clip);
    if (st == QJIT_OK)
        st = qjit_drv_check_context(q->cu, q->cuctx, q->dev, (CUstream)stream, q->text);
    if (st != QJIT_OK || a->m == 0)
        return st;
    const int parts = (int)(a->m < MAX_PARTS ? a->m : MAX_PARTS);
    const unsigned batch = a->batch > 1 ? (unsigned)a->batch : 1;
    qjit_quant_kernel_params p = {a->x,   a->q,   a->scale, a->workspace, a->m,
                                  a->k,   a->ldx, a->ldq,   clip,         parts,
                                  batch > 1 ? a->x_batch_stride : 0,
                                  batch > 1 ? a->q_batch_stride : 0};
    void *params[] = {&p};
    int64_t grid[3];
    grid_of(&q->desc, a, grid);
    /* with an early start where q->pdl (the kernels wait for the one before them before
     * they read, and let the next one start at once: templates/quant.cu) */
    const unsigned amax_grid[3] = {(unsigned)parts, 1, 1};
    const unsigned main_grid[3] = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
    const char *what = "cuLaunchKernel";
    CUresult r = CUDA_SUCCESS;
    if (q->desc.scale == QJIT_SCALE_TENSOR)
        r = qjit_drv_launch(q->cu, q->amax, amax_grid, THREADS, 0, (CUstream)stream, params, NULL,
                            q->pdl, &what);
    if (r == CUDA_SUCCESS)
        r = qjit_drv_launch(q->cu, q->fn, main_grid, THREADS, 0, (CUstream)stream, params, NULL,
                            q->pdl, &what);
    if (r != CUDA_SUCCESS)
        return qjit_err_prefix(qjit_drv_fail(q->cu, r, what), "%s", q->text);
    return QJIT_OK;
}

/* ------------------------------------------------------------ a linear layer */
typedef struct span {
    const char *name;
    uintptr_t lo, hi; /* [lo, hi) */
} span;

static span span_of(const char *name, const void *p, qjit_dtype t, int64_t elems)
{
    const uintptr_t lo = (uintptr_t)p;
    return (span){name, lo, p && elems > 0 ? lo + qjit_desc_bytes(t, 1, elems) : lo};
}

/* The first of the GEMM's weight-side operands (B, scale_b, zeros_b) that overlaps what the
 * quantizer writes (xq, xs, workspace), or QJIT_OK: gemv reads the weight side before it
 * waits for the quantizer (the early start), so they must be apart.  The quantizer's
 * outputs are the GEMM's A side (a = q's out, sa = q's scale: checked before), so both
 * sides' extents come from the GEMM's descriptor. */
static qjit_status apart(const qjit_gemm_desc *g, const qjit_quant_args *qa,
                         const qjit_gemm_args *ga)
{
    qjit_dtype sat, sbt;
    const int64_t nsa = qjit_desc_scale_count(g, true, ga->m, ga->n, ga->k, &sat),
                  nsb = qjit_desc_scale_count(g, false, ga->m, ga->n, ga->k, &sbt);
    const span wrote[3] = {
        span_of("xq", qa->q, g->a, ga->m * ga->k), span_of("xs", qa->scale, sat, nsa),
        span_of("workspace", qa->workspace, QJIT_DTYPE_S8,
                g->sa == QJIT_SCALE_TENSOR ? QJIT_QUANT_WORKSPACE_BYTES : 0)};
    const span read[3] = {span_of("b", ga->b, g->b, ga->n * ga->ldb),
                          span_of("scale_b", ga->scale_b, sbt, nsb),
                          span_of("zeros_b", ga->zeros_b, g->group_scale, g->zeros ? nsb : 0)};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (wrote[i].lo < read[j].hi && read[j].lo < wrote[i].hi)
                return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                    "qjit_linear_launch: argument '%s' (%p, %llu bytes) overlaps "
                                    "'%s' (%p, %llu bytes), which the GEMM reads",
                                    wrote[i].name, (void *)wrote[i].lo,
                                    (unsigned long long)(wrote[i].hi - wrote[i].lo), read[j].name,
                                    (void *)read[j].lo,
                                    (unsigned long long)(read[j].hi - read[j].lo));
    return QJIT_OK;
}

qjit_status qjit_linear_launch(const qjit_quant *q, const qjit_gemm *g,
                               const qjit_linear_args *a, struct CUstream_st *stream)
{
    if (!q || !g || !a)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_linear_launch: NULL argument");
    qjit_gemm_info info;
    qjit_status st = qjit_gemm_get_info(g, &info);
    if (st != QJIT_OK)
        return st;
    if (info.desc.a != q->desc.out || info.desc.sa != q->desc.scale)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_linear_launch: %s writes a=%s sa=%s, but %s reads a=%s sa=%s",
                            q->text, qjit_desc_dtype_name(q->desc.out),
                            qjit_desc_scale_name(q->desc.scale), info.text,
                            qjit_desc_dtype_name(info.desc.a),
                            qjit_desc_scale_name(info.desc.sa));
    qjit_quant_args qa = {a->x, a->xq, a->xs, a->workspace, a->gemm.m, a->gemm.k, a->ldx,
                          a->gemm.k, a->clip, 1, 0, 0};
    qjit_gemm_args ga = a->gemm;
    ga.a = a->xq;
    ga.scale_a = a->xs;
    ga.lda = a->gemm.k;
    /* both checked before either runs */
    float clip;
    if ((st = check_args(q, &qa, &clip)) != QJIT_OK)
        return st;
    if (ga.m > 0 && ga.n > 0 && (st = qjit_gemm_check_launch(g, &ga)) != QJIT_OK)
        return st;
    if (ga.m > 0 && ga.n > 0 && (st = apart(&info.desc, &qa, &ga)) != QJIT_OK)
        return st;
    if ((st = qjit_quant_launch(q, &qa, stream)) != QJIT_OK)
        return st;
    /* the kernel just before the GEMM is the quantizer launched here, which writes none of
     * the weight side (checked above): the GEMM may start early on sm_90a (gemv's weights
     * then load, and with 8-bit weights ask more into L2, while the quantizer runs) */
    return qjit_gemm_launch_early(g, &ga, stream);
}
