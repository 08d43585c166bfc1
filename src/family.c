/*
 * family.c — the kernel families: for each template of QJIT_FAMILY_LIST, what it serves,
 * the least arch it runs on, its heuristic configuration, its named configuration spaces,
 * and the plan that checks a configuration and states its launch needs.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    qjit_kernel kernel;
    const char *name, *tmpl;
} list[] = {
#define QJIT_FAMILY_ENTRY(k, n, t) {k, n, t},
    QJIT_FAMILY_LIST(QJIT_FAMILY_ENTRY)
#undef QJIT_FAMILY_ENTRY
};
#define NFAMILIES (int)(sizeof list / sizeof list[0])

int qjit_family_count(void) { return NFAMILIES; }

qjit_kernel qjit_family_at(int i) { return i >= 0 && i < NFAMILIES ? list[i].kernel : QJIT_KERNEL_AUTO; }

const char *qjit_family_template(qjit_kernel k)
{
    for (int i = 0; i < NFAMILIES; i++)
        if (list[i].kernel == k)
            return list[i].tmpl;
    return NULL;
}

void qjit_config_get(const qjit_gemm_desc *d, qjit_config *c)
{
    *c = (qjit_config){d->bm, d->bn, d->bk, d->wm, d->wn, d->stages, d->split_k};
}

void qjit_config_fill(qjit_gemm_desc *d, const qjit_config *c)
{
    if (!d->bm) {
        d->bm = c->bm;
        d->bn = c->bn;
        d->bk = c->bk;
    }
    if (!d->wm) {
        d->wm = c->wm;
        d->wn = c->wn;
    }
    if (!d->stages)
        d->stages = c->stages;
    if (!d->split_k)
        d->split_k = c->split_k;
}

struct qjit_families {
    char *template_dir;
};

qjit_status qjit_family_open(const char *template_dir, qjit_families **out)
{
    qjit_families *fs = calloc(1, sizeof *fs);
    if (!fs || (template_dir && !(fs->template_dir = strdup(template_dir)))) {
        free(fs);
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "kernel families");
    }
    *out = fs;
    return QJIT_OK;
}

void qjit_family_close(qjit_families *fs)
{
    if (!fs)
        return;
    free(fs->template_dir);
    free(fs);
}

/* ------------------------------------------------------------ what each family serves */
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

/* ------------------------------------------------------------ heuristics */
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
           (unsigned)(r->stages * (r->bm + r->bn) * r->bk * 2) > qjit_arch_smem_limit(r->arch))
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

typedef struct family {
    qjit_kernel kernel;
    qjit_arch floor;                          /* QJIT_ARCH_SM90A: sm_90a only */
    bool (*serves)(const qjit_gemm_desc *d);
    void (*fill)(qjit_gemm_desc *r);          /* auto configuration */
    const sweep_point *sweep, *small;
    int nsweep, nsmall;
} family;

#define SW(a, b) a, b, (int)(sizeof a / sizeof a[0]), (int)(sizeof b / sizeof b[0])
static const family families[] = {
    {QJIT_KERNEL_WGMMA, QJIT_ARCH_SM90A, serves_float, fill_wgmma, SW(sweep_wgmma, sweep_wgmma_small)},
    {QJIT_KERNEL_MMA, QJIT_ARCH_SM80, serves_float, fill_mma, SW(sweep_mma, sweep_mma_small)},
    {QJIT_KERNEL_MMA_WQ, QJIT_ARCH_SM80, serves_wq, fill_wq, SW(sweep_quant, sweep_quant_small)},
    {QJIT_KERNEL_MMA_I8, QJIT_ARCH_SM80, serves_i8, fill_i8, SW(sweep_quant, sweep_quant_small)},
    {QJIT_KERNEL_WGMMA_F8, QJIT_ARCH_SM90A, serves_wgmma_f8, fill_wgmma_f8,
     SW(sweep_wgmma_f8, sweep_wgmma_f8_small)},
    {QJIT_KERNEL_MMA_F8, QJIT_ARCH_SM89, serves_f8, fill_f8, SW(sweep_quant, sweep_quant_small)},
};
#undef SW

static const family *family_of(qjit_kernel k)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].kernel == k)
            return &families[i];
    return NULL;
}

bool qjit_family_present(qjit_families *fs, qjit_kernel k)
{
    const char *t = qjit_family_template(k);
    qjit_tmpl_file f;
    if (!t || qjit_tmpl_open(fs->template_dir, t, &f) != QJIT_OK)
        return false;
    qjit_tmpl_close(&f);
    return true;
}

bool qjit_family_serves(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d)
{
    const family *f = family_of(k);
    return f && f->serves(d);
}

qjit_arch qjit_family_floor(qjit_families *fs, qjit_kernel k)
{
    const family *f = family_of(k);
    return f ? f->floor : QJIT_ARCH_AUTO;
}

qjit_status qjit_family_default(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                                int64_t m_max, qjit_config *out)
{
    const family *f = family_of(k);
    if (!f)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no kernel family %d", (int)k);
    qjit_gemm_desc r = *d;
    r.kernel = k;
    f->fill(&r);
    if (!r.split_k)
        r.split_k = 1;
    qjit_config_get(&r, out);
    return QJIT_OK;
}

qjit_status qjit_family_space(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                              const char *name, qjit_config *out, size_t cap, size_t *count)
{
    const family *f = family_of(k);
    bool small = strcmp(name, "small-m") == 0;
    *count = 0;
    if (!f)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no kernel family %d", (int)k);
    if (!small && strcmp(name, "default") != 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "sweep '%s' is not known (sweeps: default, small-m)", name);
    const sweep_point *pts = small ? f->small : f->sweep;
    int n = small ? f->nsmall : f->nsweep;
    for (int i = 0; i < n; i++)
        if ((size_t)i < cap)
            out[i] = (qjit_config){pts[i].bm, pts[i].bn, pts[i].bk, pts[i].wm,
                                   pts[i].wn, pts[i].stages, 1};
    *count = (size_t)n;
    return QJIT_OK;
}

/* ------------------------------------------------------------ expansion and plan */
static const char *mode_name(qjit_scale_mode m)
{
    const char *n = qjit_desc_scale_name(m);
    return n ? n : "?";
}

qjit_status qjit_family_expand(qjit_families *fs, const qjit_gemm_desc *r, qjit_expansion *e)
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
    const char *t = qjit_family_template(r->kernel);
    if (!t)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no template for kernel %d", (int)r->kernel);
    return qjit_sandbox_expand(fs->template_dir, t, p, (int)(sizeof p / sizeof p[0]), NULL, e);
}

/* Reads every line that starts with "// qjit:" strictly: each token must be key=integer
 * with a known key, so a formula or a typo is an error, never a silent wrong value. */
static qjit_status parse_meta(const qjit_buf *src, const char *text, qjit_plan *m)
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

/* C-side rules of kernel mma (its template checks them too). */
static bool mma_rules(const qjit_gemm_desc *r, char *why, size_t cap)
{
#define NO(...)                                                                          \
    do {                                                                                 \
        snprintf(why, cap, __VA_ARGS__);                                                 \
        return false;                                                                    \
    } while (0)
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
#undef NO
    return true;
}

qjit_status qjit_family_plan(qjit_families *fs, const qjit_gemm_desc *r, qjit_plan *out,
                             char *why, size_t cap)
{
    if (r->split_k != 1) {
        snprintf(why, cap, "kernel %s has no split-K path yet (split=%d)",
                 qjit_desc_kernel_name(r->kernel), r->split_k);
        return QJIT_ERROR_UNSUPPORTED;
    }
    if (r->kernel == QJIT_KERNEL_MMA && !mma_rules(r, why, cap))
        return QJIT_ERROR_UNSUPPORTED;
    qjit_expansion e;
    qjit_status st = qjit_family_expand(fs, r, &e);
    if (st != QJIT_OK) { /* UNSUPPORTED from the template, or a template error */
        snprintf(why, cap, "%s", qjit_last_error());
        return st;
    }
    char text[256];
    qjit_desc_text(r, text, sizeof text);
    st = parse_meta(&e.source, text, out);
    qjit_expansion_free(&e);
    if (st != QJIT_OK) {
        snprintf(why, cap, "%s", qjit_last_error());
        return st;
    }
    if (out->smem > qjit_arch_smem_limit(r->arch)) {
        snprintf(why, cap,
                 "tile %dx%dx%d with %d stages needs %u bytes of shared memory; %s allows %u",
                 r->bm, r->bn, r->bk, r->stages, out->smem, qjit_arch_name(r->arch),
                 qjit_arch_smem_limit(r->arch));
        return QJIT_ERROR_UNSUPPORTED;
    }
    return QJIT_OK;
}
