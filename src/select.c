/*
 * select.c — choosing what runs: the target arch, the kernel family (kernel=auto takes
 * the first of QJIT_FAMILY_LIST that serves the pair there), and every auto field from
 * the family's heuristic; whether a resolved descriptor has a kernel; named sweeps.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <string.h>

static const char *mode_name(qjit_scale_mode m)
{
    const char *n = qjit_desc_scale_name(m);
    return n ? n : "?";
}

/* ctx, or the default context when it is NULL. */
static qjit_status context_of(qjit_context **ctx)
{
    return *ctx ? QJIT_OK : qjit_default_context(ctx);
}

/* Whether family k may be chosen for d (its pair) on arch by kernel=auto: it serves the
 * pair there and has been measured on a GPU. */
static qjit_status usable(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                          qjit_arch arch, bool *yes)
{
    qjit_gemm_desc probe = *d;
    probe.arch = arch;
    qjit_status st = qjit_family_serves(fs, k, &probe, yes);
    *yes = *yes && qjit_arch_at_least(arch, qjit_family_floor(fs, k)) &&
           qjit_family_measured(fs, k);
    return st;
}

/* d with arch and kernel set and its auto fields filled by family k's heuristic (with
 * no family, a placeholder configuration that keeps the text free of auto, for errors). */
static qjit_status fill_with(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                             qjit_arch arch, int64_t m_max, qjit_gemm_desc *r)
{
    *r = *d;
    r->arch = arch;
    qjit_config c = {128, 128, 32, 2, 2, 3, 1};
    if (qjit_family_template(k) && qjit_family_present(fs, k)) {
        r->kernel = k;
        qjit_status st = qjit_family_default(fs, k, r, m_max, &c);
        if (st == QJIT_ERROR_NOT_FOUND && m_max) /* named, but not its size: its general choice */
            st = qjit_family_default(fs, k, r, 0, &c);
        if (st == QJIT_ERROR_NOT_FOUND)
            return qjit_err_set(QJIT_ERROR_TEMPLATE, "template %s: default(0) gave no "
                                "configuration", qjit_family_template(k));
        if (st != QJIT_OK)
            return st;
    } else if (qjit_family_template(k)) {
        r->kernel = k; /* not in this build: check() says so */
    }
    qjit_config_fill(r, &c);
    if (!r->split_k)
        r->split_k = 1;
    return QJIT_OK;
}

/* With stages=auto, fewer stages until the tile fits the arch's shared memory (the
 * heuristics are written for the largest, sm_80/sm_90a; sm_86/sm_89 have 99 KB). */
static void fit_stages(qjit_context *ctx, const qjit_gemm_desc *d, qjit_gemm_desc *r)
{
    char why[512];
    while (!d->stages && r->stages > 2 &&
           qjit_select_check(ctx, r, NULL, why, sizeof why) == QJIT_ERROR_UNSUPPORTED &&
           strstr(why, "shared memory"))
        r->stages--;
}

/* kernel=auto: the first family, in order of preference, that serves the pair on this
 * arch and supports the configuration fields the caller set; if none does, the first
 * that serves the pair, so that the error explains what is wrong with it. */
static qjit_status fill_kernel(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                               int64_t m_max, qjit_gemm_desc *r)
{
    qjit_families *fs = ctx->families;
    if (d->kernel != QJIT_KERNEL_AUTO)
        return fill_with(fs, d->kernel, d, arch, m_max, r);
    qjit_kernel first = QJIT_KERNEL_AUTO;
    bool configured = d->bm || d->wm || d->stages;
    for (int i = 0; i < qjit_family_count(); i++) {
        qjit_kernel k = qjit_family_at(i);
        bool yes;
        qjit_status st = usable(fs, k, d, arch, &yes);
        if (st != QJIT_OK)
            return st;
        if (!yes)
            continue;
        if (first == QJIT_KERNEL_AUTO)
            first = k;
        qjit_config c;
        qjit_gemm_desc probe = *d;
        probe.arch = arch;
        st = qjit_family_default(fs, k, &probe, m_max, &c);
        if (st == QJIT_ERROR_NOT_FOUND)
            continue; /* it leaves this M to the next family */
        if (st != QJIT_OK || (st = fill_with(fs, k, d, arch, m_max, r)) != QJIT_OK)
            return st;
        char why[256];
        if (!configured || qjit_select_check(ctx, r, NULL, why, sizeof why) == QJIT_OK)
            return QJIT_OK;
    }
    return fill_with(fs, first, d, arch, m_max, r);
}

qjit_status qjit_select_resolve(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                                int64_t m_max, qjit_gemm_desc *r)
{
    qjit_status st = qjit_gemm_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    if (arch == QJIT_ARCH_AUTO)
        arch = d->arch;
    if (arch == QJIT_ARCH_AUTO)
        arch = ctx->opt.arch;
    if (arch == QJIT_ARCH_AUTO) {
        const qjit_cu_api *cu;
        CUcontext cuctx;
        CUdevice dev;
        int major, minor;
        if ((st = qjit_drv_current(&cu, &cuctx, &dev, &major, &minor)) != QJIT_OK)
            return qjit_err_prefix(st, "arch=auto needs the current device");
        arch = qjit_arch_for_device(major, minor);
        if (arch == QJIT_ARCH_AUTO)
            return qjit_err_set(QJIT_ERROR_UNSUPPORTED,
                                "the current device is sm_%d%d; qjit targets %s", major, minor,
                                qjit_arch_list());
    }
    if (!qjit_arch_name(arch))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "arch %d is not a target", (int)arch);
    if ((st = fill_kernel(ctx, d, arch, m_max, r)) != QJIT_OK)
        return st;
    /* only the 99 KB targets need it; elsewhere it would cost every cold get a check */
    if (qjit_arch_smem_limit(arch) < 160 * 1024 && qjit_family_template(r->kernel))
        fit_stages(ctx, d, r);
    return QJIT_OK;
}

qjit_status qjit_select_check(qjit_context *ctx, const qjit_gemm_desc *r, qjit_plan *plan,
                              char *why, size_t cap)
{
#define NO(...)                                                                          \
    do {                                                                                 \
        snprintf(why, cap, __VA_ARGS__);                                                 \
        return QJIT_ERROR_UNSUPPORTED;                                                   \
    } while (0)
    qjit_families *fs = ctx->families;
    if (!qjit_family_template(r->kernel)) {
        /* the serving family that asks least of the arch names the one to have */
        qjit_kernel least = QJIT_KERNEL_AUTO;
        for (int i = 0; i < qjit_family_count(); i++) {
            qjit_kernel k = qjit_family_at(i);
            bool yes;
            if (qjit_family_serves(fs, k, r, &yes) != QJIT_OK) {
                snprintf(why, cap, "%s", qjit_last_error());
                return QJIT_ERROR_TEMPLATE;
            }
            if (yes && (least == QJIT_KERNEL_AUTO ||
                 !qjit_arch_at_least(qjit_family_floor(fs, k), qjit_family_floor(fs, least))))
                least = k;
        }
        if (least == QJIT_KERNEL_AUTO)
            NO("pair a=%s b=%s sa=%s sb=%s has no kernel in this build of qjit",
               qjit_desc_dtype_name(r->a), qjit_desc_dtype_name(r->b), mode_name(r->sa),
               mode_name(r->sb));
        if (!qjit_arch_at_least(r->arch, qjit_family_floor(fs, least)))
            NO("pair a=%s b=%s needs %s or newer (kernel %s); %s lacks its tensor-core "
               "instructions",
               qjit_desc_dtype_name(r->a), qjit_desc_dtype_name(r->b),
               qjit_arch_name(qjit_family_floor(fs, least)), qjit_kernel_name(least),
               qjit_arch_name(r->arch));
        NO("no kernel serves this descriptor");
    }
    bool serves;
    if (qjit_family_serves(fs, r->kernel, r, &serves) != QJIT_OK) {
        snprintf(why, cap, "%s", qjit_last_error());
        return QJIT_ERROR_TEMPLATE;
    }
    if (!qjit_family_present(fs, r->kernel))
        NO("kernel %s is not in this build of qjit (no template %s)",
           qjit_kernel_name(r->kernel), qjit_family_template(r->kernel));
    if (!serves)
        NO("kernel %s does not serve pair a=%s b=%s sa=%s sb=%s",
           qjit_family_template(r->kernel), qjit_desc_dtype_name(r->a),
           qjit_desc_dtype_name(r->b), mode_name(r->sa), mode_name(r->sb));
    if (!qjit_arch_at_least(r->arch, qjit_family_floor(fs, r->kernel)))
        NO("kernel %s needs %s (arch=%s)", qjit_kernel_name(r->kernel),
           qjit_arch_name(qjit_family_floor(fs, r->kernel)), qjit_arch_name(r->arch));
#undef NO
    qjit_plan local;
    return qjit_family_plan(fs, r, plan ? plan : &local, why, cap);
}

/* ------------------------------------------------------------ the public calls */
qjit_status qjit_gemm_resolve(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                              qjit_gemm_desc *resolved)
{
    if (!d || !resolved)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_resolve: NULL argument");
    qjit_gemm_desc r;
    qjit_status st = context_of(&ctx);
    if (st == QJIT_OK)
        st = qjit_select_resolve(ctx, d, arch, 0, &r);
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
    qjit_status st = context_of(&ctx);
    if (st == QJIT_OK)
        st = qjit_select_resolve(ctx, d, arch, 0, &r);
    if (st != QJIT_OK) {
        snprintf(why, why_cap, "%s", qjit_last_error());
        return st;
    }
    st = qjit_select_check(ctx, &r, NULL, why, why_cap);
    if (st != QJIT_OK) {
        char text[256];
        qjit_desc_text(&r, text, sizeof text);
        return qjit_err_set(st, "%s: %s", text, why);
    }
    return QJIT_OK;
}

/* Appends the candidates c to out (at most cap; counted in *k), skipping those the arch
 * cannot run and repeats. */
static void sweep_add(qjit_context *ctx, const qjit_gemm_desc *c, qjit_gemm_desc *out,
                      size_t cap, size_t *k)
{
    char why[512];
    if (qjit_gemm_desc_validate(c) != QJIT_OK ||
        qjit_select_check(ctx, c, NULL, why, sizeof why) != QJIT_OK)
        return;
    for (size_t j = 0; j < *k && j < cap; j++)
        if (memcmp(&out[j], c, sizeof *c) == 0)
            return;
    if (*k < cap)
        out[*k] = *c;
    (*k)++;
}

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
    qjit_status st = context_of(&ctx);
    if (st == QJIT_OK) /* picks the arch and the family */
        st = qjit_select_resolve(ctx, d, arch, 0, &base);
    if (st != QJIT_OK)
        return st;
    size_t k = 0;
    if (!small) /* the heuristic's choice first */
        sweep_add(ctx, &base, out, cap, &k);
    /* the named kernel's space; with kernel=auto, the heuristic's family's and then every
     * other measured family's that serves the pair on this arch, in QJIT_FAMILY_LIST order */
    for (int f = -1; f < qjit_family_count(); f++) {
        qjit_kernel kern = f < 0 ? base.kernel : qjit_family_at(f);
        if (f >= 0) {
            bool yes = false;
            if (d->kernel != QJIT_KERNEL_AUTO || kern == base.kernel ||
                usable(ctx->families, kern, &base, base.arch, &yes) != QJIT_OK || !yes)
                continue;
        }
        if (!qjit_family_template(kern))
            continue;
        qjit_gemm_desc fam = *d; /* the family's own reading of the fields d names */
        fam.arch = base.arch;
        fam.kernel = kern;
        qjit_config pts[64];
        size_t n = 0;
        if ((st = qjit_family_space(ctx->families, kern, &fam, name, pts, 64, &n)) != QJIT_OK) {
            if (f < 0)
                return st;
            continue; /* another family without this sweep adds nothing */
        }
        for (size_t i = 0; i < n && i < 64; i++) {
            qjit_gemm_desc c = fam;
            qjit_config_fill(&c, &pts[i]);
            sweep_add(ctx, &c, out, cap, &k);
        }
    }
    qjit_err_clear();
    *count = k;
    return QJIT_OK;
}

/* ------------------------------------------------------------ M buckets */
/* Bucket of M by the bit length of M - 1: 1 | 2-4 | 5-8 | 9-16 | ... | 129-256 | 257-1024 |
 * 1025 and up. */
static const uint8_t bucket_of_bits[65] = {0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 9, 9, 9, 9,
                                           9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
                                           9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
                                           9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
_Static_assert(QJIT_M_BUCKETS == 10, "bucket_of_bits and bucket_max follow the header");
static const int64_t bucket_max[QJIT_M_BUCKETS] = {1,  4,   8,   16,   32,
                                                   64, 128, 256, 1024, INT64_MAX};

int qjit_m_bucket(int64_t m)
{
    if (m <= 1)
        return 0;
    return bucket_of_bits[64 - __builtin_clzll((unsigned long long)(m - 1))];
}

int64_t qjit_m_bucket_max(int b)
{
    return b >= 0 && b < QJIT_M_BUCKETS ? bucket_max[b] : 0;
}


/* ------------------------------------------------------------ dispatch */
bool qjit_select_fully_named(const qjit_gemm_desc *d)
{
    return d->kernel != QJIT_KERNEL_AUTO && d->bm && d->wm && d->stages && d->split_k;
}

void qjit_select_problem_text(const qjit_gemm_desc *d, char *buf, size_t cap)
{
    qjit_gemm_desc p = *d;
    p.arch = QJIT_ARCH_AUTO;
    qjit_desc_text(&p, buf, cap);
}

/* The rows of the tuning results read back, before the winners are picked. */
typedef struct tuned_row {
    char gpu[64], config[256];
    int bucket, layer;
    int64_t n, k;
    double us;
} tuned_row;
typedef struct tuned_rows {
    tuned_row *v;
    size_t n, cap;
    bool oom;
} tuned_rows;

static void collect(void *user, const qjit_tuning_row *r, int layer)
{
    tuned_rows *t = user;
    if (r->bucket < 0 || r->bucket >= QJIT_M_BUCKETS || r->n < 1 || r->k < 1)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        tuned_row *v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            t->oom = true;
            return;
        }
        t->v = v;
        t->cap = cap;
    }
    tuned_row *x = &t->v[t->n++];
    snprintf(x->gpu, sizeof x->gpu, "%s", r->gpu);
    snprintf(x->config, sizeof x->config, "%s", r->config);
    x->bucket = r->bucket;
    x->layer = layer;
    x->n = r->n;
    x->k = r->k;
    x->us = r->us;
}

bool qjit_select_config_of(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                           const qjit_gemm_desc *c, char *why, size_t cap)
{
    qjit_gemm_desc x = *c;
    x.arch = d->arch;
    x.kernel = d->kernel ? x.kernel : QJIT_KERNEL_AUTO;
    if (!d->bm)
        x.bm = x.bn = x.bk = 0;
    if (!d->wm)
        x.wm = x.wn = 0;
    if (!d->stages)
        x.stages = 0;
    if (!d->split_k)
        x.split_k = 0;
    if (memcmp(&x, d, sizeof x) != 0 || !qjit_select_fully_named(c) ||
        c->arch == QJIT_ARCH_AUTO || (arch != QJIT_ARCH_AUTO && c->arch != arch) ||
        (d->arch != QJIT_ARCH_AUTO && c->arch != d->arch)) {
        snprintf(why, cap, "it is not a configuration of this descriptor (it must keep the "
                           "pair, modes, output and every field the descriptor names, and name "
                           "the rest, arch included)");
        return false;
    }
    return qjit_select_check(ctx, c, NULL, why, cap) == QJIT_OK;
}

static int row_order(const void *pa, const void *pb)
{
    const tuned_row *a = pa, *b = pb;
    int c = strcmp(a->gpu, b->gpu);
    if (c)
        return c;
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    if (a->k != b->k)
        return a->k < b->k ? -1 : 1;
    if (a->bucket != b->bucket)
        return a->bucket - b->bucket;
    if (a->layer != b->layer) /* the writable DB's results before the shipped ones */
        return a->layer - b->layer;
    return a->us < b->us ? -1 : a->us > b->us;
}

void qjit_dispatch_free(qjit_dispatch *dp)
{
    if (!dp)
        return;
    free(dp->problems);
    dp->problems = NULL;
    dp->nproblems = 0;
}

/* The tuned winners of d's problem on arch (gpu NULL: every GPU's), in dp->problems. */
static qjit_status tuned_winners(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                                 const char *gpu, qjit_dispatch *dp)
{
    char problem[256];
    qjit_select_problem_text(d, problem, sizeof problem);
    tuned_rows t = {0};
    qjit_status st = qjit_cache_tuned(ctx->cache, gpu, qjit_arch_name(arch), problem, collect, &t);
    if (st == QJIT_OK && t.oom)
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "%s: tuning results", problem);
    if (st != QJIT_OK || t.n == 0) {
        free(t.v);
        return st;
    }
    qsort(t.v, t.n, sizeof *t.v, row_order);
    bool taken = false; /* the current (gpu, n, k, bucket) has its winner */
    for (size_t i = 0; i < t.n; i++) {
        const tuned_row *w = &t.v[i];
        if (i == 0 || strcmp(w->gpu, t.v[i - 1].gpu) || w->n != t.v[i - 1].n ||
            w->k != t.v[i - 1].k || w->bucket != t.v[i - 1].bucket)
            taken = false;
        if (taken)
            continue; /* slower than its (gpu, n, k, bucket)'s winner */
        qjit_gemm_desc c;
        char why[512];
        if (qjit_gemm_desc_parse(w->config, &c) != QJIT_OK) {
            snprintf(why, sizeof why, "%s", qjit_last_error());
            c.kernel = QJIT_KERNEL_AUTO;
        }
        if (c.kernel == QJIT_KERNEL_AUTO || !qjit_select_config_of(ctx, d, arch, &c, why, sizeof why)) {
            qjit_log(&ctx->log, QJIT_LOG_WARN,
                     "qjit: tuned result '%s' for %s (n=%lld k=%lld, M bucket %d) is not "
                     "usable (%s): the next result, else the heuristic, stands in",
                     w->config, problem, (long long)w->n, (long long)w->k, w->bucket, why);
            continue;
        }
        taken = true;
        qjit_dispatch_problem *p = dp->nproblems ? &dp->problems[dp->nproblems - 1] : NULL;
        if (!p || p->n != w->n || p->k != w->k || strcmp(p->gpu, w->gpu)) {
            p = realloc(dp->problems, (dp->nproblems + 1) * sizeof *p);
            if (!p) {
                free(t.v);
                return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "%s: tuning results", problem);
            }
            dp->problems = p;
            p = &dp->problems[dp->nproblems++];
            memset(p, 0, sizeof *p);
            p->n = w->n;
            p->k = w->k;
            snprintf(p->gpu, sizeof p->gpu, "%s", w->gpu);
        }
        p->has[w->bucket] = true;
        p->desc[w->bucket] = c;
        p->us[w->bucket] = w->us;
    }
    free(t.v);
    return QJIT_OK;
}

qjit_status qjit_select_dispatch(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                                 const char *gpu, bool tuned, qjit_dispatch *dp)
{
    memset(dp, 0, sizeof *dp);
    bool named = qjit_select_fully_named(d);
    dp->nbuckets = named ? 1 : QJIT_M_BUCKETS;
    qjit_status st = QJIT_OK;
    for (int b = 0; b < dp->nbuckets && st == QJIT_OK; b++)
        st = qjit_select_resolve(ctx, d, arch, named ? 0 : bucket_max[b], &dp->base[b]);
    for (int b = dp->nbuckets; b < QJIT_M_BUCKETS && st == QJIT_OK; b++)
        dp->base[b] = dp->base[0];
    if (st == QJIT_OK && !named && tuned)
        st = tuned_winners(ctx, d, dp->base[0].arch, gpu, dp);
    if (st != QJIT_OK)
        qjit_dispatch_free(dp);
    return st;
}

static void push_variant(qjit_gemm_variant *out, size_t cap, size_t *count,
                         const qjit_gemm_desc *r, int b0, int b1, int64_t n, int64_t k,
                         const char *gpu, double us)
{
    if (*count < cap) {
        qjit_gemm_variant *v = &out[*count];
        memset(v, 0, sizeof *v);
        v->desc = *r;
        qjit_desc_text(r, v->text, sizeof v->text);
        v->m_min = b0 ? bucket_max[b0 - 1] + 1 : 1;
        v->m_max = bucket_max[b1];
        v->n = n;
        v->k = k;
        v->tuned = gpu != NULL;
        v->us = us;
        snprintf(v->gpu, sizeof v->gpu, "%s", gpu ? gpu : "");
    }
    (*count)++;
}

qjit_status qjit_gemm_variants(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                               qjit_gemm_variant *out, size_t cap, size_t *count)
{
    if (!d || !count || (cap && !out))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_variants: NULL argument");
    *count = 0;
    qjit_status st = context_of(&ctx);
    if (st != QJIT_OK)
        return st;
    char gpu[64], *who = NULL;
    if (arch == QJIT_ARCH_AUTO && d->arch == QJIT_ARCH_AUTO && ctx->opt.arch == QJIT_ARCH_AUTO) {
        const qjit_cu_api *cu;
        CUcontext cuctx;
        CUdevice dev;
        int major, minor;
        if ((st = qjit_drv_current(&cu, &cuctx, &dev, &major, &minor)) != QJIT_OK ||
            (st = qjit_drv_device_name(cu, dev, gpu, sizeof gpu)) != QJIT_OK)
            return qjit_err_prefix(st, "arch=auto needs the current device");
        who = gpu;
    }
    qjit_dispatch dp;
    if ((st = qjit_select_dispatch(ctx, d, arch, who, true, &dp)) != QJIT_OK)
        return st;
    for (int b = 0, b0 = 0; b < QJIT_M_BUCKETS; b++)
        if (b + 1 == QJIT_M_BUCKETS || memcmp(&dp.base[b + 1], &dp.base[b], sizeof dp.base[b])) {
            push_variant(out, cap, count, &dp.base[b], b0, b, 0, 0, NULL, 0);
            b0 = b + 1;
        }
    for (size_t p = 0; p < dp.nproblems; p++) {
        const qjit_dispatch_problem *t = &dp.problems[p];
        for (int b = 0, b0 = 0; b < QJIT_M_BUCKETS; b++) {
            bool end = b + 1 == QJIT_M_BUCKETS || t->has[b + 1] != t->has[b] ||
                       (t->has[b] && memcmp(&t->desc[b + 1], &t->desc[b], sizeof t->desc[b]));
            if (!end)
                continue;
            if (t->has[b])
                push_variant(out, cap, count, &t->desc[b], b0, b, t->n, t->k, t->gpu, t->us[b]);
            b0 = b + 1;
        }
    }
    qjit_dispatch_free(&dp);
    return QJIT_OK;
}
