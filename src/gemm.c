/*
 * gemm.c — the data path of a GEMM handle: descriptor → resolve → key → cache →
 * template → NVRTC → module → handle, the in-process map in front of it (compile
 * once, warm gets without SQLite/Lua/NVRTC), and launch.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The kernel's one by-value parameter; the templates declare the same layout. */
typedef struct gemm_params {
    const void *a, *b;
    void *d;
    const void *bias, *scale_a, *scale_b, *zeros_b;
    long long m, n, k, lda, ldb, ldd;
} gemm_params;

struct qjit_gemm {
    qjit_gemm_desc desc; /* resolved */
    char text[256];
    uint8_t key[16];
    const qjit_cu_api *cu;
    CUcontext cuctx;
    CUmodule module;
    CUfunction fn;
    unsigned threads, smem, registers;
    int bm, bn, split;
    int persistent_ctas; /* > 0: persistent grid of at most this many CTAs (the SM count) */
    int cluster_k, k_chunk, sms; /* K split across a cluster, chosen at launch (see fill_config) */
    int k_multiple, ld_multiple, ptr_align;
    int out_bytes;
};

struct qjit_map_entry {
    uint64_t hash;           /* 0 = empty slot */
    qjit_gemm_desc desc;     /* as the caller passed it */
    CUcontext cuctx;
    qjit_gemm *g;
};

struct qjit_inflight {
    qjit_gemm_desc desc;     /* resolved */
    CUcontext cuctx;
    struct qjit_inflight *next;
};

/* ------------------------------------------------------------ small helpers */
/* "group" for group:G; "?" for a value out of range (messages only) */
static const char *mode_name(qjit_scale_mode m)
{
    const char *n = qjit_desc_scale_name(m);
    return n ? n : "?";
}

static void desc_text(const qjit_gemm_desc *d, char *buf, size_t cap)
{
    if (qjit_gemm_desc_format(d, buf, cap, NULL) != QJIT_OK)
        snprintf(buf, cap, "gemm (unprintable descriptor)");
}

static int dtype_bytes(qjit_dtype t) { return qjit_desc_dtype_bits(t) / 8; }

/* ------------------------------------------------------------ architecture */
/* Maximum dynamic shared memory one block may opt into, per target. */
static unsigned arch_smem_limit(qjit_arch a)
{
    switch (a) {
    case QJIT_ARCH_SM80: return 166912;
    case QJIT_ARCH_SM86:
    case QJIT_ARCH_SM89: return 101376;
    case QJIT_ARCH_SM90A: return 232448;
    default: return 0;
    }
}

/* The target compiled for a device of compute capability major.minor. */
static qjit_arch arch_for_device(int major, int minor)
{
    if (major == 9 && minor == 0)
        return QJIT_ARCH_SM90A;
    if (major == 8)
        return minor >= 9 ? QJIT_ARCH_SM89 : minor >= 6 ? QJIT_ARCH_SM86 : QJIT_ARCH_SM80;
    return QJIT_ARCH_AUTO;
}

/* Whether a cubin for `a` loads on a device of major.minor. */
static bool arch_runs_on(qjit_arch a, int major, int minor)
{
    if (a == QJIT_ARCH_SM90A)
        return major == 9 && minor == 0;
    return major == 8 && minor >= (int)a % 10;
}

static qjit_status current_device(const qjit_cu_api **cu, CUcontext *cuctx, int *major,
                                  int *minor)
{
    qjit_status st = qjit_drv_load(cu);
    if (st != QJIT_OK)
        return st;
    CUresult r = (*cu)->CtxGetCurrent(cuctx);
    if (r != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuCtxGetCurrent");
    if (!*cuctx)
        return qjit_err_set(QJIT_ERROR_NO_DEVICE,
                            "no CUDA context is current on this thread (make one current, e.g. "
                            "cudaSetDevice + cudaFree(0), before qjit_get_gemm)");
    CUdevice dev;
    if ((r = (*cu)->CtxGetDevice(&dev)) != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuCtxGetDevice");
    if ((r = (*cu)->DeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                       dev)) != CUDA_SUCCESS ||
        (r = (*cu)->DeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                       dev)) != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuDeviceGetAttribute(compute capability)");
    return QJIT_OK;
}

/* ------------------------------------------------------------ kernel families */
/* A family is one template and the pairs it serves.  What a kernel needs at launch
 * (threads, shared memory, K and leading-dimension multiples, alignment) is stated by
 * the template itself in `// qjit:` lines of its output, so it lives in one place. */
typedef struct family {
    qjit_kernel kernel;
    const char *tmpl;
    qjit_arch min_arch;                       /* QJIT_ARCH_SM90A: sm_90a only */
    bool (*serves)(const qjit_gemm_desc *d);
    void (*fill)(qjit_gemm_desc *r);          /* auto configuration */
} family;

static bool is_half(qjit_dtype t) { return t == QJIT_DTYPE_F16 || t == QJIT_DTYPE_BF16; }

static bool serves_float(const qjit_gemm_desc *d)
{
    return is_half(d->a) && d->b == d->a && d->sa == QJIT_SCALE_NONE &&
           d->sb == QJIT_SCALE_NONE;
}
static bool serves_wq(const qjit_gemm_desc *d)
{
    return is_half(d->a) && (d->b == QJIT_DTYPE_S4 || d->b == QJIT_DTYPE_U4 ||
                             d->b == QJIT_DTYPE_S8 || d->b == QJIT_DTYPE_E2M1);
}
static bool serves_i8(const qjit_gemm_desc *d)
{
    return d->a == QJIT_DTYPE_S8 && (d->b == QJIT_DTYPE_S8 || d->b == QJIT_DTYPE_S4);
}
static bool serves_f8(const qjit_gemm_desc *d)
{
    return (d->a == QJIT_DTYPE_E4M3 || d->a == QJIT_DTYPE_E5M2 || d->a == QJIT_DTYPE_E2M1) &&
           (d->b == QJIT_DTYPE_E4M3 || d->b == QJIT_DTYPE_E2M1);
}

/* wgmma_f8 takes the plain fp8 pairs; MX and e2m1 stay with mma_f8's dequantize path. */
static bool serves_wgmma_f8(const qjit_gemm_desc *d)
{
    return (d->a == QJIT_DTYPE_E4M3 || d->a == QJIT_DTYPE_E5M2) && d->b == QJIT_DTYPE_E4M3 &&
           d->sa != QJIT_SCALE_MX && d->sb != QJIT_SCALE_MX;
}

static void fill_tile(qjit_gemm_desc *r, int bm, int bn, int bk, int wm, int wn, int stages)
{
    if (!r->bm) {
        r->bm = bm;
        r->bn = bn;
        r->bk = bk;
        if (!r->wm) {
            r->wm = wm;
            r->wn = wn;
        }
    }
    if (!r->wm) {
        /* warp tiles of 64x64 where the tile allows */
        r->wm = r->bm >= 128 ? r->bm / 64 : 2;
        r->wn = r->bn >= 128 ? r->bn / 64 : 2;
        while (r->wm * r->wn > 8 && r->wm > 1)
            r->wm /= 2;
    }
    if (!r->stages)
        r->stages = stages;
}

static void fill_mma(qjit_gemm_desc *r)
{
    bool small_smem = r->arch == QJIT_ARCH_SM86 || r->arch == QJIT_ARCH_SM89;
    fill_tile(r, 128, 256, 32, 2, 4, small_smem ? 3 : 4);
    while (r->stages > 2 &&
           (unsigned)(r->stages * (r->bm + r->bn) * r->bk * 2) > arch_smem_limit(r->arch))
        r->stages--;
}
/* The wgmma families' warps field counts consumer warpgroups (WM along M, WN along N):
 * with a named tile, two along M where the tile allows. */
static void fill_warpgroups(qjit_gemm_desc *r)
{
    if (r->bm && !r->wm) {
        r->wm = r->bm >= 128 ? 2 : 1;
        r->wn = 1;
    }
}
static void fill_wgmma(qjit_gemm_desc *r)
{
    fill_warpgroups(r);
    fill_tile(r, 128, 256, 64, 2, 1, 3); /* 3 stages leave room for the staged epilogue */
}

/* wgmma_f8: part and total accumulators must both fit, so consumer tiles are 64x128:
 * 128x128x128 with two consumer warpgroups. */
static void fill_wgmma_f8(qjit_gemm_desc *r)
{
    fill_warpgroups(r);
    fill_tile(r, 128, 128, 128, 2, 1, 5);
}

/* mma_f8: 430 TFLOP/s at 128x128x128 w2x4 s3 on H100 (e4m3 row/col, 8192^3), where
 * 128x128x64 w2x2 spills. */
static void fill_f8(qjit_gemm_desc *r) { fill_tile(r, 128, 128, 128, 2, 4, 3); }

/* mma_i8, from H100 timings.  W8A8 (s8 x s8) is a prefill kernel: 910 TOPS at 8192^3
 * with 128x128x64 s4.  W4A8 (s8 x s4) is a decode kernel: 16x128x128 w1x4 s4 streams
 * the packed weights at ~2.5 TB/s (47 us at 1x28672x8192); prefill wants 128x128x128. */
static void fill_i8(qjit_gemm_desc *r)
{
    if (r->b == QJIT_DTYPE_S4)
        fill_tile(r, 16, 128, 128, 1, 4, 4);
    else
        fill_tile(r, 128, 128, 64, 2, 2, 4);
}

/* mma_wq (W4A16, W8A16, bf16 x e2m1) is a decode kernel: 16x128x128 w1x4 s3 runs
 * bf16 x s4 g128 at 1x28672x8192 in 65.7 us on H100 (1.84 TB/s), 3.4x faster than
 * 128x128x64 w2x2, which is the one to name for prefill. */
static void fill_wq(qjit_gemm_desc *r) { fill_tile(r, 16, 128, 128, 1, 4, 3); }

/* In order of preference for kernel=auto: on sm_90a wgmma (1.0-1.07x cuBLAS at bf16
 * 8192^3 where mma reaches 0.54x), elsewhere mma; on sm_90a fp8 pairs take wgmma_f8
 * (Hopper's fp8 tensor cores have no mma.sync), MX ones mma_f8. */
static const family families[] = {
    {QJIT_KERNEL_WGMMA, "gemm_wgmma.cu", QJIT_ARCH_SM90A, serves_float, fill_wgmma},
    {QJIT_KERNEL_MMA, "gemm_mma.cu", QJIT_ARCH_SM80, serves_float, fill_mma},
    {QJIT_KERNEL_MMA_WQ, "gemm_wq.cu", QJIT_ARCH_SM80, serves_wq, fill_wq},
    {QJIT_KERNEL_MMA_I8, "gemm_i8.cu", QJIT_ARCH_SM80, serves_i8, fill_i8},
    {QJIT_KERNEL_WGMMA_F8, "gemm_wgmma_f8.cu", QJIT_ARCH_SM90A, serves_wgmma_f8, fill_wgmma_f8},
    {QJIT_KERNEL_MMA_F8, "gemm_f8.cu", QJIT_ARCH_SM89, serves_f8, fill_f8},
};
#define NFAMILIES (int)(sizeof families / sizeof families[0])

static const family *family_of(qjit_kernel k)
{
    for (int i = 0; i < NFAMILIES; i++)
        if (families[i].kernel == k)
            return &families[i];
    return NULL;
}

static bool arch_at_least(qjit_arch a, qjit_arch min)
{
    if (min == QJIT_ARCH_SM90A)
        return a == QJIT_ARCH_SM90A;
    return (int)a >= (int)min;
}

/* Whether the family's template ships (or is in the override directory). */
static bool template_exists(const qjit_context *ctx, const family *f)
{
    qjit_tmpl_file t;
    if (qjit_tmpl_open(ctx ? ctx->template_dir : NULL, f->tmpl, &t) != QJIT_OK)
        return false;
    qjit_tmpl_close(&t);
    return true;
}

/* Fills auto fields for a named arch with family f's heuristic (tuned results, later,
 * come first). */
static void fill_with(const family *f, const qjit_gemm_desc *d, qjit_arch arch,
                      qjit_gemm_desc *r)
{
    *r = *d;
    r->arch = arch;
    if (f) {
        r->kernel = f->kernel;
        f->fill(r);
    } else {
        fill_tile(r, 128, 128, 32, 2, 2, 3); /* keeps the text free of auto */
    }
    if (!r->split_k)
        r->split_k = 1;
}

static qjit_status supports_resolved(const qjit_context *ctx, const qjit_gemm_desc *r,
                                     char *why, size_t cap);

/* With stages=auto, fewer stages until the tile fits the arch's shared memory (the
 * heuristics are written for the largest, sm_80/sm_90a; sm_86/sm_89 have 99 KB). */
static void fit_stages(const qjit_context *ctx, const qjit_gemm_desc *d, qjit_gemm_desc *r)
{
    char why[512];
    while (!d->stages && r->stages > 2 &&
           supports_resolved(ctx, r, why, sizeof why) == QJIT_ERROR_UNSUPPORTED &&
           strstr(why, "shared memory"))
        r->stages--;
}

/* kernel=auto: the first family, in order of preference, that serves the pair on this
 * arch and supports the configuration fields the caller set; if none does, the first
 * that serves the pair, so that the error explains what is wrong with it. */
static void resolve_fill_kernel(const qjit_context *ctx, const qjit_gemm_desc *d,
                                qjit_arch arch, qjit_gemm_desc *r)
{
    if (d->kernel != QJIT_KERNEL_AUTO) {
        fill_with(family_of(d->kernel), d, arch, r);
        return;
    }
    const family *first = NULL;
    for (int i = 0; i < NFAMILIES; i++) {
        const family *f = &families[i];
        qjit_gemm_desc probe = *d;
        probe.arch = arch;
        if (!f->serves(&probe) || !arch_at_least(arch, f->min_arch) ||
            !template_exists(ctx, f))
            continue;
        if (!first)
            first = f;
        bool configured = d->bm || d->wm || d->stages;
        if (!configured) { /* the heuristic's configuration: take the preferred family */
            fill_with(f, d, arch, r);
            return;
        }
        char why[256];
        fill_with(f, d, arch, r);
        if (supports_resolved(ctx, r, why, sizeof why) == QJIT_OK)
            return;
    }
    fill_with(first, d, arch, r);
}

/* The kernel and every auto field for a named arch. */
static void resolve_fill(const qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                         qjit_gemm_desc *r)
{
    resolve_fill_kernel(ctx, d, arch, r);
    /* only the 99 KB targets need it; elsewhere it would cost every cold get an expansion */
    bool small_smem = arch == QJIT_ARCH_SM86 || arch == QJIT_ARCH_SM89;
    if (small_smem && r->kernel != QJIT_KERNEL_AUTO && family_of(r->kernel))
        fit_stages(ctx, d, r);
}

/* Launch needs stated by a template in `// qjit: key=value ...` lines. */
typedef struct kernel_meta {
    unsigned smem, threads;
    int k_multiple, ld_multiple, align;
    int persistent; /* 1: grid of min(tiles, SMs) CTAs that walk the tiles */
    int cluster_k;  /* > 1: K may be split across up to this many CTAs of a cluster */
    int k_chunk;    /* with cluster_k: each CTA's share of K is a multiple of this */
} kernel_meta;

/* Reads every line that starts with "// qjit:" strictly: each token must be key=integer
 * with a known key, so a formula or a typo is an error, never a silent wrong value. */
static qjit_status parse_meta(const qjit_buf *src, const char *text, kernel_meta *m)
{
    memset(m, 0, sizeof *m);
    m->k_multiple = m->ld_multiple = 1;
    m->align = 16;
    const char *p = src->data ? src->data : "";
    while (*p) {
        const char *end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p);
        const char *q = p;
        while (q < end && (*q == ' ' || *q == '\t'))
            q++;
        if ((size_t)(end - q) >= 8 && memcmp(q, "// qjit:", 8) == 0) {
            q += 8;
            while (q < end) {
                while (q < end && (*q == ' ' || *q == '\t'))
                    q++;
                if (q == end)
                    break;
                char key[32];
                long long v;
                int used = 0;
                bool ok = sscanf(q, "%31[a-z_]=%lld%n", key, &v, &used) == 2 &&
                          q + used <= end && (q + used == end || q[used] == ' ' || q[used] == '\t');
                if (ok && !strcmp(key, "smem")) m->smem = (unsigned)v;
                else if (ok && !strcmp(key, "threads")) m->threads = (unsigned)v;
                else if (ok && !strcmp(key, "k_multiple")) m->k_multiple = (int)v;
                else if (ok && !strcmp(key, "ld_multiple")) m->ld_multiple = (int)v;
                else if (ok && !strcmp(key, "align")) m->align = (int)v;
                else if (ok && !strcmp(key, "persistent") && (v == 0 || v == 1)) m->persistent = (int)v;
                else if (ok && !strcmp(key, "cluster_k") && v >= 1 && v <= 8) m->cluster_k = (int)v;
                else if (ok && !strcmp(key, "k_chunk") && v >= 1) m->k_chunk = (int)v;
                else
                    return qjit_err_set(QJIT_ERROR_TEMPLATE,
                                        "%s: bad '// qjit:' token '%.*s' (expected threads=, "
                                        "smem=, k_multiple=, ld_multiple=, align=, persistent=, "
                                        "cluster_k= (1..8) or k_chunk= with an integer)",
                                        text, (int)(strcspn(q, " \t\n")), q);
                q += used;
            }
        }
        p = *end ? end + 1 : end;
    }
    if (!m->threads || m->threads > 1024 || m->threads % 32 || m->k_multiple < 1 ||
        m->ld_multiple < 1 || m->align < 1)
        return qjit_err_set(QJIT_ERROR_TEMPLATE,
                            "%s: the template states no valid '// qjit: threads=... smem=...' "
                            "line (threads=%u smem=%u k_multiple=%d ld_multiple=%d align=%d)",
                            text, m->threads, m->smem, m->k_multiple, m->ld_multiple, m->align);
    return QJIT_OK;
}

/* C-side rules: the pair has a family on this arch, and mma's own shape rules. */
static qjit_status supports_family(const qjit_context *ctx, const qjit_gemm_desc *r, char *why,
                                   size_t cap)
{
#define NO(...)                                                                          \
    do {                                                                                 \
        snprintf(why, cap, __VA_ARGS__);                                                 \
        return QJIT_ERROR_UNSUPPORTED;                                                   \
    } while (0)
    const family *f = family_of(r->kernel);
    if (r->kernel == QJIT_KERNEL_AUTO || !f) {
        /* the serving family that asks least of the arch names the one to have */
        const family *least = NULL;
        for (int i = 0; i < NFAMILIES; i++)
            if (families[i].serves(r) && template_exists(ctx, &families[i]) &&
                (!least || (int)families[i].min_arch < (int)least->min_arch))
                least = &families[i];
        if (least && !arch_at_least(r->arch, least->min_arch))
            NO("pair a=%s b=%s needs %s or newer (kernel %s); %s lacks its tensor-core "
               "instructions",
               qjit_desc_dtype_name(r->a), qjit_desc_dtype_name(r->b),
               qjit_desc_arch_name(least->min_arch), qjit_desc_kernel_name(least->kernel),
               qjit_desc_arch_name(r->arch));
        if (!least)
            NO("pair a=%s b=%s sa=%s sb=%s has no kernel in this build of qjit",
               qjit_desc_dtype_name(r->a), qjit_desc_dtype_name(r->b), mode_name(r->sa),
               mode_name(r->sb));
        NO("no kernel serves this descriptor");
    }
    if (!f->serves(r))
        NO("kernel %s does not serve pair a=%s b=%s sa=%s sb=%s", f->tmpl,
           qjit_desc_dtype_name(r->a), qjit_desc_dtype_name(r->b), mode_name(r->sa),
           mode_name(r->sb));
    if (!arch_at_least(r->arch, f->min_arch))
        NO("kernel %s needs %s (arch=%s)", qjit_desc_kernel_name(r->kernel),
           f->min_arch == QJIT_ARCH_SM90A ? "sm_90a" : qjit_desc_arch_name(f->min_arch),
           qjit_desc_arch_name(r->arch));
    if (!template_exists(ctx, f))
        NO("kernel %s is not in this build of qjit (no template %s)",
           qjit_desc_kernel_name(r->kernel), f->tmpl);
    if (r->split_k != 1)
        NO("kernel %s has no split-K path yet (split=%d)", qjit_desc_kernel_name(r->kernel),
           r->split_k);
    if (r->kernel == QJIT_KERNEL_MMA) {
        if (!((r->bm == 64 || r->bm == 128 || r->bm == 256) &&
              (r->bn == 64 || r->bn == 128 || r->bn == 256) && (r->bk == 32 || r->bk == 64)))
            NO("kernel mma takes tiles with BM, BN in {64,128,256} and BK in {32,64} "
               "(tile=%dx%dx%d)",
               r->bm, r->bn, r->bk);
        if (r->bm % r->wm || r->bn % r->wn || (r->bm / r->wm) % 16 || (r->bn / r->wn) % 16)
            NO("warps=%dx%d do not split tile %dx%d into warp tiles that are multiples of "
               "16x16",
               r->wm, r->wn, r->bm, r->bn);
        int wtm = r->bm / r->wm, wtn = r->bn / r->wn;
        if (wtm * wtn > 64 * 64)
            NO("warp tile %dx%d needs %d accumulator registers per thread (at most 128)", wtm,
               wtn, wtm * wtn / 32);
        if (r->stages < 2 || r->stages > 6)
            NO("stages=%d: kernel mma takes 2..6", r->stages);
    }
#undef NO
    return QJIT_OK;
}

static qjit_status expand(const qjit_context *ctx, const qjit_gemm_desc *r, qjit_expansion *e);

/* Whether the resolved descriptor has a kernel on its arch (its template agreeing, and
 * its shared memory fitting); `why` gets the reason.  Expands the template (no compile). */
static qjit_status supports_resolved(const qjit_context *ctx, const qjit_gemm_desc *r,
                                     char *why, size_t cap)
{
    qjit_status st = supports_family(ctx, r, why, cap);
    if (st != QJIT_OK)
        return st;
    qjit_expansion e;
    st = expand(ctx, r, &e);
    if (st != QJIT_OK) { /* UNSUPPORTED from the template, or a template error */
        snprintf(why, cap, "%s", qjit_last_error());
        return st;
    }
    kernel_meta m;
    char text[256];
    desc_text(r, text, sizeof text);
    st = parse_meta(&e.source, text, &m);
    qjit_expansion_free(&e);
    if (st != QJIT_OK) {
        snprintf(why, cap, "%s", qjit_last_error());
        return st;
    }
    if (m.smem > arch_smem_limit(r->arch)) {
        snprintf(why, cap,
                 "tile %dx%dx%d with %d stages needs %u bytes of shared memory; %s allows %u",
                 r->bm, r->bn, r->bk, r->stages, m.smem, qjit_desc_arch_name(r->arch),
                 arch_smem_limit(r->arch));
        return QJIT_ERROR_UNSUPPORTED;
    }
    return QJIT_OK;
}

/* Validate, pick the arch (named, override, or the device's), fill auto fields. */
static qjit_status resolve(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                           qjit_gemm_desc *r)
{
    qjit_status st = qjit_gemm_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    if (arch == QJIT_ARCH_AUTO)
        arch = d->arch;
    if (arch == QJIT_ARCH_AUTO && ctx)
        arch = ctx->opt.arch;
    if (arch == QJIT_ARCH_AUTO) {
        const qjit_cu_api *cu;
        CUcontext cuctx;
        int major, minor;
        if ((st = current_device(&cu, &cuctx, &major, &minor)) != QJIT_OK)
            return qjit_err_prefix(st, "arch=auto needs the current device");
        arch = arch_for_device(major, minor);
        if (arch == QJIT_ARCH_AUTO)
            return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                                "the current device is sm_%d%d; qjit targets sm_80, sm_86, "
                                "sm_89 and sm_90a",
                                major, minor);
    }
    if (!qjit_nvrtc_options(arch))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "arch %d is not a target", (int)arch);
    resolve_fill(ctx, d, arch, r);
    return QJIT_OK;
}

qjit_status qjit_gemm_resolve(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                              qjit_gemm_desc *resolved)
{
    if (!d || !resolved)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_resolve: NULL argument");
    qjit_gemm_desc r;
    qjit_status st = resolve(ctx, d, arch, &r);
    if (st == QJIT_OK)
        *resolved = r;
    return st;
}

qjit_status qjit_gemm_supports(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                               char *why, size_t why_cap)
{
    char local[512];
    if (!why || !why_cap) {
        why = local;
        why_cap = sizeof local;
    }
    why[0] = 0;
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_supports: desc is NULL");
    qjit_gemm_desc r;
    qjit_status st = resolve(ctx, d, arch, &r);
    if (st != QJIT_OK) {
        snprintf(why, why_cap, "%s", qjit_last_error());
        return st;
    }
    st = supports_resolved(ctx, &r, why, why_cap);
    if (st != QJIT_OK) {
        char text[256];
        desc_text(&r, text, sizeof text);
        return qjit_err_set(st, "%s: %s", text, why);
    }
    return QJIT_OK;
}

/* ------------------------------------------------------------ sweeps */
typedef struct sweep_point {
    short bm, bn, bk, wm, wn, stages;
} sweep_point;

static const sweep_point sweep_mma[] = {
    {128, 256, 32, 2, 4, 4}, {128, 256, 32, 2, 4, 3}, {256, 128, 32, 4, 2, 3},
    {128, 128, 32, 2, 2, 4}, {128, 128, 64, 2, 2, 3}, {64, 128, 32, 2, 2, 4},
    {64, 64, 32, 2, 2, 3},   {128, 64, 64, 2, 2, 4},
};
static const sweep_point sweep_mma_small[] = {
    {64, 128, 32, 2, 2, 4}, {64, 64, 32, 2, 2, 3}, {64, 128, 64, 2, 2, 3}, {64, 256, 32, 1, 4, 4},
};
static const sweep_point sweep_wgmma[] = {
    {128, 256, 64, 2, 1, 4}, {128, 256, 64, 2, 1, 3}, {256, 128, 64, 2, 1, 4},
    {128, 128, 64, 2, 1, 5}, {128, 128, 64, 1, 1, 6}, {64, 256, 64, 1, 1, 4},
};
static const sweep_point sweep_wgmma_small[] = {
    {64, 256, 64, 1, 1, 4}, {64, 128, 64, 1, 1, 6}, {128, 128, 64, 2, 1, 5},
};
static const sweep_point sweep_wgmma_f8[] = {
    {128, 128, 128, 2, 1, 5}, {128, 128, 128, 2, 1, 4}, {128, 128, 128, 2, 1, 6},
    {64, 128, 128, 1, 1, 6},  {128, 64, 128, 2, 1, 6},
};
static const sweep_point sweep_wgmma_f8_small[] = {
    {64, 128, 128, 1, 1, 6}, {64, 64, 128, 1, 1, 6}, {128, 128, 128, 2, 1, 5},
};
static const sweep_point sweep_quant[] = {
    {128, 128, 64, 2, 2, 3}, {128, 256, 64, 2, 4, 3}, {64, 128, 64, 2, 2, 3},
    {64, 64, 64, 2, 2, 3},   {128, 128, 64, 2, 2, 4},
};
static const sweep_point sweep_quant_small[] = {
    {64, 128, 64, 2, 2, 3}, {64, 64, 64, 2, 2, 3}, {64, 64, 64, 2, 2, 4},
};

qjit_status qjit_gemm_sweep(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                            const char *name, qjit_gemm_desc *out, size_t cap, size_t *count)
{
    if (!d || !name || !count || (cap && !out))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_sweep: NULL argument");
    *count = 0;
    bool small = strcmp(name, "small-m") == 0;
    if (!small && strcmp(name, "default") != 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "sweep '%s' is not known (sweeps: default, small-m)", name);
    qjit_gemm_desc base;
    qjit_status st = resolve(ctx, d, arch, &base); /* picks the arch and the family */
    if (st != QJIT_OK)
        return st;
    const sweep_point *pts;
    size_t n;
#define PICK(a, b) (pts = small ? b : a, n = small ? sizeof b / sizeof b[0] : sizeof a / sizeof a[0])
    if (base.kernel == QJIT_KERNEL_MMA)
        PICK(sweep_mma, sweep_mma_small);
    else if (base.kernel == QJIT_KERNEL_WGMMA)
        PICK(sweep_wgmma, sweep_wgmma_small);
    else if (base.kernel == QJIT_KERNEL_WGMMA_F8)
        PICK(sweep_wgmma_f8, sweep_wgmma_f8_small);
    else
        PICK(sweep_quant, sweep_quant_small);
#undef PICK
    size_t k = 0;
    for (size_t i = 0; i <= n; i++) {
        qjit_gemm_desc c = *d;
        c.arch = base.arch;
        c.kernel = base.kernel;
        if (i == 0 && !small) { /* the heuristic's choice first */
            c = base;
        } else {
            if (i == 0)
                continue;
            const sweep_point *p = &pts[i - 1];
            if (!c.bm) {
                c.bm = p->bm;
                c.bn = p->bn;
                c.bk = p->bk;
            }
            if (!c.wm) {
                c.wm = p->wm;
                c.wn = p->wn;
            }
            if (!c.stages)
                c.stages = p->stages;
            if (!c.split_k)
                c.split_k = 1;
        }
        char why[512];
        if (qjit_gemm_desc_validate(&c) != QJIT_OK ||
            supports_resolved(ctx, &c, why, sizeof why) != QJIT_OK)
            continue;
        bool dup = false;
        for (size_t j = 0; j < k && j < cap; j++)
            dup |= memcmp(&out[j], &c, sizeof c) == 0;
        if (dup)
            continue;
        if (k < cap)
            out[k] = c;
        k++;
    }
    qjit_err_clear();
    *count = k;
    return QJIT_OK;
}

/* ------------------------------------------------------------ build: expand, key, cubin */
static qjit_status expand(const qjit_context *ctx, const qjit_gemm_desc *r, qjit_expansion *e)
{
    qjit_tparam p[] = {
        {"A", QJIT_TP_STR, 0, qjit_desc_dtype_name(r->a)},
        {"B", QJIT_TP_STR, 0, qjit_desc_dtype_name(r->b)},
        {"OUT", QJIT_TP_STR, 0, qjit_desc_dtype_name(r->out)},
        {"SA", QJIT_TP_STR, 0, mode_name(r->sa)},
        {"SB", QJIT_TP_STR, 0, mode_name(r->sb)},
        {"GROUP", QJIT_TP_INT, r->sb == QJIT_SCALE_GROUP ? r->group : 0, NULL},
        {"GS", QJIT_TP_STR, 0,
         r->sb == QJIT_SCALE_GROUP ? qjit_desc_dtype_name(r->group_scale) : "none"},
        {"ZEROS", QJIT_TP_BOOL, r->zeros, NULL},
        {"BIAS", QJIT_TP_BOOL, r->bias, NULL},
        {"ARCH", QJIT_TP_INT, (int)r->arch, NULL},
        {"KERNEL", QJIT_TP_STR, 0, qjit_desc_kernel_name(r->kernel)},
        {"BM", QJIT_TP_INT, r->bm, NULL},
        {"BN", QJIT_TP_INT, r->bn, NULL},
        {"BK", QJIT_TP_INT, r->bk, NULL},
        {"WM", QJIT_TP_INT, r->wm, NULL},
        {"WN", QJIT_TP_INT, r->wn, NULL},
        {"STAGES", QJIT_TP_INT, r->stages, NULL},
        {"SPLIT_K", QJIT_TP_INT, r->split_k, NULL},
    };
    const family *f = family_of(r->kernel);
    if (!f)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no template for kernel %d", (int)r->kernel);
    return qjit_sandbox_expand(ctx ? ctx->template_dir : NULL, f->tmpl, p,
                               (int)(sizeof p / sizeof p[0]), NULL, e);
}

/* The cubin of a resolved, supported descriptor: from a cache, else compiled and
 * stored.  Compiles outside any cache transaction. */
static qjit_status obtain_cubin(qjit_context *ctx, const qjit_gemm_desc *r, const char *text,
                                bool must_store, uint8_t key_out[16], kernel_meta *meta,
                                void **cubin, size_t *cubin_len, int *was_cached)
{
    qjit_expansion e;
    qjit_key key = {{0}, {0}};
    qjit_status st = expand(ctx, r, &e);
    if (st != QJIT_OK)
        return qjit_err_prefix(st, "%s", text);
    if ((st = parse_meta(&e.source, text, meta)) != QJIT_OK)
        goto done;
    if (meta->smem > arch_smem_limit(r->arch)) {
        st = qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                          "%s: needs %u bytes of shared memory; %s allows %u", text, meta->smem,
                          qjit_desc_arch_name(r->arch), arch_smem_limit(r->arch));
        goto done;
    }
    if ((st = qjit_key_build(text, &e, r->arch, &key)) != QJIT_OK)
        goto done;
    memcpy(key_out, key.hash, 16);
    st = qjit_cache_get(ctx->cache, key.hash, key.material.data, key.material.len, cubin,
                        cubin_len);
    if (st == QJIT_OK) {
        *was_cached = 1;
        goto done;
    }
    if (st != QJIT_ERROR_NOT_FOUND)
        goto done;
    *was_cached = 0;
    double ms = 0;
    st = qjit_nvrtc_compile(e.source.data, e.source.len, e.files[0].name, r->arch, cubin,
                            cubin_len, &ms);
    pthread_mutex_lock(&ctx->mu);
    ctx->stats.compiles++;
    ctx->stats.compile_ms += ms;
    if (st != QJIT_OK)
        ctx->stats.compile_failures++;
    pthread_mutex_unlock(&ctx->mu);
    if (st != QJIT_OK) {
        qjit_err_prefix(st, "%s", text);
        goto done;
    }
    qjit_cache_row row = {{0},
                          key.material.data,
                          key.material.len,
                          text,
                          qjit_desc_arch_name(r->arch),
                          *cubin,
                          *cubin_len,
                          e.source.data,
                          e.source.len,
                          ms};
    memcpy(row.key, key.hash, 16);
    qjit_status pst = qjit_cache_put(ctx->cache, &row, NULL);
    if (pst != QJIT_OK && must_store) { /* precompile exists to fill the cache */
        st = qjit_err_prefix(pst, "%s: compiled but not stored", text);
        goto done;
    }
    if (pst != QJIT_OK) /* a get still has a good kernel; only the cache failed to keep it */
        qjit_log(ctx, QJIT_LOG_WARN, "qjit: could not store %s in the cache: %s", text,
                 qjit_last_error());
    qjit_log(ctx, QJIT_LOG_INFO, "qjit: compiled %s in %.0f ms", text, ms);
done:
    qjit_key_free(&key);
    qjit_expansion_free(&e);
    return st;
}

qjit_status qjit_gemm_precompile(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                                 int *was_cached)
{
    if (!ctx || !d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_precompile: NULL argument");
    if (arch == QJIT_ARCH_AUTO && d->arch == QJIT_ARCH_AUTO && ctx->opt.arch == QJIT_ARCH_AUTO)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_precompile: name an arch (sm_80, sm_86, sm_89, sm_90a)");
    qjit_gemm_desc r;
    char why[512], text[256];
    qjit_status st = resolve(ctx, d, arch, &r);
    if (st != QJIT_OK)
        return st;
    desc_text(&r, text, sizeof text);
    if ((st = supports_family(ctx, &r, why, sizeof why)) != QJIT_OK)
        return qjit_err_set(st, "%s: %s", text, why);
    void *cubin = NULL;
    size_t n = 0;
    uint8_t key[16];
    kernel_meta meta;
    int cached = 0;
    st = obtain_cubin(ctx, &r, text, true, key, &meta, &cubin, &n, &cached);
    free(cubin);
    if (st == QJIT_OK && was_cached)
        *was_cached = cached;
    return st;
}

/* ------------------------------------------------------------ handles */
static qjit_status make_handle(qjit_context *ctx, const qjit_cu_api *cu, CUcontext cuctx,
                               const qjit_gemm_desc *r, qjit_gemm **out)
{
    char text[256];
    desc_text(r, text, sizeof text);
    void *cubin = NULL;
    size_t n = 0;
    int cached = 0;
    qjit_gemm *g = calloc(1, sizeof *g);
    if (!g)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "%s", text);
    kernel_meta meta;
    qjit_status st = obtain_cubin(ctx, r, text, false, g->key, &meta, &cubin, &n, &cached);
    if (st != QJIT_OK)
        goto fail;
    CUresult cr = cu->ModuleLoadData(&g->module, cubin);
    if (cr != CUDA_SUCCESS) {
        st = qjit_drv_fail(cu, cr, "cuModuleLoadData");
        qjit_err_prefix(st, "%s", text);
        goto fail;
    }
    if ((cr = cu->ModuleGetFunction(&g->fn, g->module, "qjit_gemm_kernel")) != CUDA_SUCCESS) {
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuModuleGetFunction(qjit_gemm_kernel)"), "%s",
                             text);
        goto fail;
    }
    g->desc = *r;
    memcpy(g->text, text, sizeof g->text);
    g->cu = cu;
    g->cuctx = cuctx;
    g->threads = meta.threads;
    g->smem = meta.smem;
    g->bm = r->bm;
    g->bn = r->bn;
    g->split = r->split_k;
    if (meta.persistent || meta.cluster_k > 1) {
        CUdevice dev;
        int sms = 0;
        if (cu->CtxGetDevice(&dev) == CUDA_SUCCESS &&
            cu->DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
                CUDA_SUCCESS &&
            sms > 0) {
            g->persistent_ctas = meta.persistent ? sms : 0;
            g->sms = sms;
        }
    }
    if (meta.cluster_k > 1 && meta.k_chunk > 0 && g->sms > 0) {
        g->cluster_k = meta.cluster_k;
        g->k_chunk = meta.k_chunk;
    }
    g->k_multiple = meta.k_multiple;
    g->ld_multiple = meta.ld_multiple;
    g->ptr_align = meta.align;
    g->out_bytes = dtype_bytes(r->out);
    if ((cr = cu->FuncSetAttribute(g->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   (int)g->smem)) != CUDA_SUCCESS) {
        st = qjit_err_prefix(qjit_drv_fail(cu, cr, "cuFuncSetAttribute(max dynamic smem)"), "%s",
                             text);
        goto fail;
    }
    int regs = 0;
    if (cu->FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, g->fn) == CUDA_SUCCESS)
        g->registers = (unsigned)regs;
    pthread_mutex_lock(&ctx->mu);
    if (cached)
        ctx->stats.disk_hits++;
    pthread_mutex_unlock(&ctx->mu);
    free(cubin);
    *out = g;
    return QJIT_OK;
fail:
    if (g->module)
        cu->ModuleUnload(g->module);
    free(g);
    free(cubin);
    return st;
}

static uint64_t map_hash(const qjit_gemm_desc *d, CUcontext cuctx)
{
    struct {
        qjit_gemm_desc d;
        CUcontext c;
    } k;
    memset(&k, 0, sizeof k);
    k.d = *d;
    k.c = cuctx;
    uint64_t h = XXH3_64bits(&k, sizeof k);
    return h ? h : 1;
}

/* Caller holds ctx->mu. */
static qjit_gemm *map_find(qjit_context *ctx, const qjit_gemm_desc *d, CUcontext cuctx,
                           uint64_t h)
{
    if (!ctx->nslots)
        return NULL;
    for (size_t i = h & (ctx->nslots - 1);; i = (i + 1) & (ctx->nslots - 1)) {
        qjit_map_entry *e = &ctx->slots[i];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->cuctx == cuctx && memcmp(&e->desc, d, sizeof *d) == 0)
            return e->g;
    }
}

/* Caller holds ctx->mu. */
static bool map_insert(qjit_context *ctx, const qjit_gemm_desc *d, CUcontext cuctx,
                       qjit_gemm *g)
{
    if ((ctx->nused + 1) * 2 > ctx->nslots) {
        size_t n = ctx->nslots ? ctx->nslots * 2 : 64;
        qjit_map_entry *s = calloc(n, sizeof *s);
        if (!s)
            return false;
        for (size_t i = 0; i < ctx->nslots; i++) {
            qjit_map_entry *e = &ctx->slots[i];
            if (!e->hash)
                continue;
            size_t j = e->hash & (n - 1);
            while (s[j].hash)
                j = (j + 1) & (n - 1);
            s[j] = *e;
        }
        free(ctx->slots);
        ctx->slots = s;
        ctx->nslots = n;
    }
    uint64_t h = map_hash(d, cuctx);
    size_t j = h & (ctx->nslots - 1);
    while (ctx->slots[j].hash)
        j = (j + 1) & (ctx->nslots - 1);
    ctx->slots[j] = (qjit_map_entry){h, *d, cuctx, g};
    ctx->nused++;
    return true;
}

static qjit_inflight **inflight_find(qjit_context *ctx, const qjit_gemm_desc *r,
                                     CUcontext cuctx)
{
    for (qjit_inflight **p = &ctx->inflight; *p; p = &(*p)->next)
        if ((*p)->cuctx == cuctx && memcmp(&(*p)->desc, r, sizeof *r) == 0)
            return p;
    return NULL;
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
    uint64_t h = map_hash(d, cuctx);
    pthread_mutex_lock(&ctx->mu);
    ctx->stats.gets++;
    qjit_gemm *g = map_find(ctx, d, cuctx, h);
    if (g)
        ctx->stats.memory_hits++;
    pthread_mutex_unlock(&ctx->mu);
    if (g) {
        *out = g;
        return QJIT_OK;
    }

    /* cold path */
    int major = 0, minor = 0;
    if ((st = current_device(&cu, &cuctx, &major, &minor)) != QJIT_OK)
        return st;
    qjit_gemm_desc r;
    if ((st = resolve(ctx, d, QJIT_ARCH_AUTO, &r)) != QJIT_OK)
        return st;
    char text[256], why[512];
    desc_text(&r, text, sizeof text);
    if (!arch_runs_on(r.arch, major, minor))
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                            "%s: a cubin for %s does not run on the current device (sm_%d%d)",
                            text, qjit_desc_arch_name(r.arch), major, minor);
    if ((st = supports_family(ctx, &r, why, sizeof why)) != QJIT_OK)
        return qjit_err_set(st, "%s: %s", text, why);

    pthread_mutex_lock(&ctx->mu);
    for (;;) {
        g = map_find(ctx, &r, cuctx, map_hash(&r, cuctx));
        if (g || !inflight_find(ctx, &r, cuctx))
            break;
        pthread_cond_wait(&ctx->cv, &ctx->mu); /* another thread is building this key */
    }
    if (g) {
        map_insert(ctx, d, cuctx, g); /* alias for the caller's spelling; best effort */
        ctx->stats.memory_hits++;
        pthread_mutex_unlock(&ctx->mu);
        *out = g;
        return QJIT_OK;
    }
    if (capture_stream) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
        cr = cu->StreamIsCapturing((CUstream)capture_stream, &cs);
        if (cr != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) {
            pthread_mutex_unlock(&ctx->mu);
            return qjit_err_set(QJIT_ERROR_CAPTURING,
                                "%s is not loaded yet and the stream is capturing: loading a "
                                "module now would break the capture; get the kernel before "
                                "cuStreamBeginCapture",
                                text);
        }
    }
    qjit_inflight me = {r, cuctx, ctx->inflight};
    ctx->inflight = &me;
    pthread_mutex_unlock(&ctx->mu);

    st = make_handle(ctx, cu, cuctx, &r, &g);

    pthread_mutex_lock(&ctx->mu);
    *inflight_find(ctx, &r, cuctx) = me.next;
    if (st == QJIT_OK) {
        bool ok = true;
        if (ctx->nhandles == ctx->cap_handles) {
            size_t n = ctx->cap_handles ? ctx->cap_handles * 2 : 16;
            qjit_gemm **p = realloc(ctx->handles, n * sizeof *p);
            if (p) {
                ctx->handles = p;
                ctx->cap_handles = n;
            } else {
                ok = false;
            }
        }
        ok = ok && map_insert(ctx, &r, cuctx, g);
        if (ok) {
            ctx->handles[ctx->nhandles++] = g;
            if (memcmp(&r, d, sizeof r) != 0)
                map_insert(ctx, d, cuctx, g);
        } else {
            g->cu->ModuleUnload(g->module);
            free(g);
            st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "%s: handle map", text);
        }
    }
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
    if (st == QJIT_OK)
        *out = g;
    return st;
}

qjit_status qjit_get_gemm(const qjit_gemm_desc *d, qjit_gemm **out)
{
    qjit_context *ctx;
    qjit_status st = qjit_default_context(&ctx);
    if (st != QJIT_OK)
        return st;
    return qjit_context_get_gemm(ctx, d, NULL, out);
}

void qjit_gemm_destroy_all(qjit_context *ctx)
{
    for (size_t i = 0; i < ctx->nhandles; i++) {
        qjit_gemm *g = ctx->handles[i];
        /* the module belongs to the CUDA context it was loaded in */
        if (g->cu->CtxPushCurrent(g->cuctx) == CUDA_SUCCESS) {
            g->cu->ModuleUnload(g->module);
            CUcontext popped;
            g->cu->CtxPopCurrent(&popped);
        }
        free(g);
    }
    free(ctx->handles);
    free(ctx->slots);
    ctx->handles = NULL;
    ctx->slots = NULL;
    ctx->nhandles = ctx->cap_handles = ctx->nslots = ctx->nused = 0;
}

qjit_status qjit_gemm_get_info(const qjit_gemm *g, qjit_gemm_info *o)
{
    if (!g || !o)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_get_info: NULL argument");
    memset(o, 0, sizeof *o);
    o->desc = g->desc;
    memcpy(o->text, g->text, sizeof o->text);
    memcpy(o->key, g->key, 16);
    o->threads = g->threads;
    o->shared_bytes = g->smem;
    o->registers = g->registers;
    o->k_multiple = g->k_multiple;
    o->ld_multiple = g->ld_multiple;
    o->ptr_align = g->ptr_align;
    return QJIT_OK;
}

/* ------------------------------------------------------------ launch */
/* Everything checked on the host before any kernel runs; nothing touches the device. */
static qjit_status check_args(const qjit_gemm *g, const qjit_gemm_args *a)
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
    if ((uintptr_t)a->a % (uintptr_t)g->ptr_align || (uintptr_t)a->b % (uintptr_t)g->ptr_align)
        BAD("%s: argument '%s' = %p is not %d-byte aligned", g->text,
            (uintptr_t)a->a % (uintptr_t)g->ptr_align ? "a" : "b",
            (uintptr_t)a->a % (uintptr_t)g->ptr_align ? a->a : a->b, g->ptr_align);
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
    if ((qjit_desc_dtype_bits(d->a) == 4 || qjit_desc_dtype_bits(d->b) == 4) && a->k % 2)
        BAD("%s: k=%lld is odd; 4-bit types pack two values per byte along K", g->text,
            (long long)a->k);
    if (d->sb == QJIT_SCALE_GROUP && a->k % d->group)
        BAD("%s: k=%lld is not a multiple of the group size %d", g->text, (long long)a->k,
            d->group);
    if ((d->sa == QJIT_SCALE_MX || d->sb == QJIT_SCALE_MX) && a->k % 32)
        BAD("%s: k=%lld is not a multiple of 32, the MX block size", g->text, (long long)a->k);
    if (a->k == 0 || a->k % g->k_multiple)
        BAD("%s: k=%lld must be a positive multiple of %d (this kernel's loads along K)",
            g->text, (long long)a->k, g->k_multiple);
    if (a->lda < a->k || a->lda % g->ld_multiple)
        BAD("%s: lda=%lld must be >= k=%lld and a multiple of %d", g->text, (long long)a->lda,
            (long long)a->k, g->ld_multiple);
    if (a->ldb < a->k || a->ldb % g->ld_multiple)
        BAD("%s: ldb=%lld must be >= k=%lld and a multiple of %d", g->text, (long long)a->ldb,
            (long long)a->k, g->ld_multiple);
    if (a->ldd < a->n)
        BAD("%s: ldd=%lld must be >= n=%lld", g->text, (long long)a->ldd, (long long)a->n);
    if ((a->m + g->bm - 1) / g->bm > 65535)
        BAD("%s: m=%lld needs more than 65535 row tiles of %d", g->text, (long long)a->m, g->bm);
    if ((a->n + g->bn - 1) / g->bn > 0x7fffffff)
        BAD("%s: n=%lld is too large", g->text, (long long)a->n);
#undef BAD
    return QJIT_OK;
}

/* The grid, and for kernels that split K across a cluster (cluster_k), how many CTAs share
 * each output tile: when there are no more tiles than SMs, enough for about two CTAs per
 * SM, at most cluster_k and one K chunk each.  It depends only on the sizes, so a replayed launch
 * splits the same way and sums the partial tiles in the same order. */
static unsigned fill_config(const qjit_gemm *g, const qjit_gemm_args *a, unsigned grid[3],
                            gemm_params *p)
{
    *p = (gemm_params){a->a,       a->b,       a->d,       a->bias, a->scale_a,
                       a->scale_b, a->zeros_b, a->m,       a->n,    a->k,
                       a->lda,     a->ldb,     a->ldd};
    grid[0] = (unsigned)((a->n + g->bn - 1) / g->bn);
    grid[1] = (unsigned)((a->m + g->bm - 1) / g->bm);
    grid[2] = (unsigned)g->split;
    uint64_t tiles = (uint64_t)grid[0] * grid[1];
    if (g->persistent_ctas && tiles > (uint64_t)g->persistent_ctas) {
        grid[0] = (unsigned)g->persistent_ctas; /* the CTAs walk the tiles */
        grid[1] = 1;
    }
    unsigned cluster = 1;
    if (g->cluster_k > 1 && tiles <= (uint64_t)g->sms) {
        const int64_t chunks = (a->k + g->k_chunk - 1) / g->k_chunk;
        cluster = (unsigned)(2 * (uint64_t)g->sms / tiles); /* about two CTAs per SM */
        if (cluster > (unsigned)g->cluster_k)
            cluster = (unsigned)g->cluster_k;
        if ((int64_t)cluster > chunks) /* k > 0 here, so chunks >= 1 */
            cluster = (unsigned)chunks;
        grid[2] = cluster;
    }
    return cluster;
}

qjit_status qjit_gemm_launch(const qjit_gemm *g, const qjit_gemm_args *a,
                             struct CUstream_st *stream)
{
    if (!g || !a)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_launch: NULL argument");
    qjit_status st = check_args(g, a);
    if (st != QJIT_OK || a->m == 0 || a->n == 0)
        return st;
    gemm_params p;
    unsigned grid[3];
    const unsigned cluster = fill_config(g, a, grid, &p);
    void *params[] = {&p};
    CUresult r;
    const char *what = "cuLaunchKernel";
    if (cluster > 1) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = 1;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = cluster;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = grid[0];
        cfg.gridDimY = grid[1];
        cfg.gridDimZ = grid[2];
        cfg.blockDimX = g->threads;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.sharedMemBytes = g->smem;
        cfg.hStream = (CUstream)stream;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        r = g->cu->LaunchKernelEx(&cfg, g->fn, params, NULL);
        what = "cuLaunchKernelEx (cluster)";
    } else {
        r = g->cu->LaunchKernel(g->fn, grid[0], grid[1], grid[2], g->threads, 1, 1, g->smem,
                                (CUstream)stream, params, NULL);
    }
    if (r != CUDA_SUCCESS)
        return qjit_err_prefix(qjit_drv_fail(g->cu, r, what), "%s", g->text);
    return QJIT_OK;
}

qjit_status qjit_gemm_launch_config(const qjit_gemm *g, const qjit_gemm_args *a,
                                    qjit_launch_config *cfg)
{
    if (!g || !a || !cfg)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_launch_config: NULL argument");
    qjit_status st = check_args(g, a);
    if (st != QJIT_OK)
        return st;
    memset(cfg, 0, sizeof *cfg);
    gemm_params p;
    cfg->cluster_z = fill_config(g, a, cfg->grid, &p);
    cfg->function = g->fn;
    cfg->block[0] = g->threads;
    cfg->block[1] = cfg->block[2] = 1;
    cfg->shared_bytes = g->smem;
    memcpy(cfg->params, &p, sizeof p);
    cfg->params_size = sizeof p;
    return QJIT_OK;
}
