/*
 * family.c — the kernel families.  Each template of QJIT_FAMILY_LIST declares its family
 * in Lua, in a family{...} table at its top (docs/TEMPLATES.md): what it serves, the
 * least arch it runs on, its heuristic configuration, its named configuration spaces, and
 * the plan that checks a configuration and states its launch needs.  A context reads
 * each declaration once, into one persistent sandbox, and answers every question from
 * it; the kernel text is expanded only to build.
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
#define QJIT_FAMILY_ENTRY(k, n, t) {(qjit_kernel)(k), n, t},
    QJIT_FAMILY_LIST(QJIT_FAMILY_ENTRY)
#undef QJIT_FAMILY_ENTRY
};
#define NFAMILIES (int)(sizeof list / sizeof list[0])

int qjit_family_count(void) { return NFAMILIES; }

qjit_kernel qjit_family_at(int i)
{
    return i >= 0 && i < NFAMILIES ? list[i].kernel : QJIT_KERNEL_AUTO;
}

static int index_of(qjit_kernel k)
{
    for (int i = 0; i < NFAMILIES; i++)
        if (list[i].kernel == k)
            return i;
    return -1;
}

const char *qjit_family_template(qjit_kernel k)
{
    int i = index_of(k);
    return i < 0 ? NULL : list[i].tmpl;
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

/* ------------------------------------------------------------ the declarations */
enum { UNKNOWN, MISSING, LOADED, BROKEN };

struct qjit_families {
    char *template_dir;
    pthread_mutex_t mu; /* one query at a time: the sandbox is one Lua state */
    qjit_sandbox *S;
    int state[NFAMILIES];
    qjit_arch floor[NFAMILIES];
    bool measured[NFAMILIES];
    char error[NFAMILIES][512]; /* why a declaration is BROKEN */
};

qjit_status qjit_family_open(const char *template_dir, qjit_families **out)
{
    qjit_families *fs = calloc(1, sizeof *fs);
    if (!fs || (template_dir && !(fs->template_dir = strdup(template_dir)))) {
        free(fs);
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "kernel families");
    }
    pthread_mutex_init(&fs->mu, NULL);
    *out = fs;
    return QJIT_OK;
}

void qjit_family_close(qjit_families *fs)
{
    if (!fs)
        return;
    qjit_sandbox_close(fs->S);
    pthread_mutex_destroy(&fs->mu);
    free(fs->template_dir);
    free(fs);
}

static const char *mode_name(qjit_scale_mode m)
{
    const char *n = qjit_desc_scale_name(m);
    return n ? n : "?";
}

/* The descriptor as the globals every template reads (docs/TEMPLATES.md). */
#define NPARAMS 21
static void params_of(const qjit_gemm_desc *r, bool named, qjit_tparam p[NPARAMS])
{
    const qjit_tparam q[NPARAMS] = {
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
        {"SMEM_LIMIT", QJIT_TP_INT, qjit_arch_smem_limit(r->arch), NULL},
        {"KERNEL", QJIT_TP_STR, 0, qjit_kernel_name(r->kernel)},
        {"NAMED", QJIT_TP_BOOL, named, NULL},
        {"BM", QJIT_TP_INT, r->bm, NULL},
        {"BN", QJIT_TP_INT, r->bn, NULL},
        {"BK", QJIT_TP_INT, r->bk, NULL},
        {"WM", QJIT_TP_INT, r->wm, NULL},
        {"WN", QJIT_TP_INT, r->wn, NULL},
        {"STAGES", QJIT_TP_INT, r->stages, NULL},
        {"SPLIT_K", QJIT_TP_INT, r->split_k, NULL},
        {"PARAMS_BYTES", QJIT_TP_INT, sizeof(qjit_kernel_params), NULL},
    };
    memcpy(p, q, sizeof q);
}

/* Loads family i's declaration if it is not yet.  Caller holds fs->mu. */
static qjit_status load(qjit_families *fs, int i)
{
    if (fs->state[i] == LOADED)
        return QJIT_OK;
    if (fs->state[i] == BROKEN)
        return qjit_err_set(QJIT_ERROR_TEMPLATE, "%s", fs->error[i]);
    if (fs->state[i] == MISSING)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "kernel %s is not in this build of qjit "
                            "(no template %s)", list[i].name, list[i].tmpl);
    qjit_tmpl_file f;
    if (qjit_tmpl_open(fs->template_dir, list[i].tmpl, &f) != QJIT_OK) {
        fs->state[i] = MISSING;
        return load(fs, i);
    }
    qjit_tmpl_close(&f);
    qjit_status st = fs->S ? QJIT_OK : qjit_sandbox_open(fs->template_dir, NULL, &fs->S);
    if (st != QJIT_OK)
        return st; /* no state (out of memory): nothing is remembered, a later call retries */
    static const char *const floor_field[] = {"floor"};
    long long v = 0, m = 0;
    qjit_records rec = {floor_field, 1, 1, &v, 0, 0}, mrec = {floor_field, 1, 1, &m, 0, 0};
    st = qjit_sandbox_declare(fs->S, list[i].tmpl);
    if (st == QJIT_OK)
        st = qjit_sandbox_query(fs->S, list[i].tmpl, "floor", NULL, 0, NULL, &rec);
    /* measured = true reads as one record, false as none */
    if (st == QJIT_OK)
        st = qjit_sandbox_query(fs->S, list[i].tmpl, "measured", NULL, 0, NULL, &mrec);
    if (st == QJIT_OK && (rec.n != 1 || v < 0 || v > 1000 || !qjit_arch_name((qjit_arch)v) ||
                          v == QJIT_ARCH_AUTO))
        st = qjit_err_set(QJIT_ERROR_TEMPLATE,
                          "template %s: family{...} floor = %lld is not an arch (80, 86, 89 "
                          "or 90 for sm_90a)",
                          list[i].tmpl, rec.n ? v : -1LL);
    if (st == QJIT_ERROR_OUT_OF_MEMORY)
        return st; /* not the template's fault: try again next time */
    if (st != QJIT_OK) {
        fs->state[i] = BROKEN;
        snprintf(fs->error[i], sizeof fs->error[i], "%s", qjit_last_error());
        return QJIT_ERROR_TEMPLATE;
    }
    fs->floor[i] = (qjit_arch)v;
    fs->measured[i] = mrec.n == 1;
    fs->state[i] = LOADED;
    return QJIT_OK;
}

/* A query of family k's declaration with d's parameters. */
static qjit_status query(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                         const char *what, const qjit_tparam *arg, qjit_records *rec)
{
    int i = index_of(k);
    if (i < 0)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no kernel family %d", (int)k);
    qjit_tparam p[NPARAMS];
    qjit_gemm_desc r = *d;
    r.kernel = k;
    params_of(&r, d->kernel == k, p); /* NAMED: the descriptor names this family */
    pthread_mutex_lock(&fs->mu);
    qjit_status st = load(fs, i);
    if (st == QJIT_OK)
        st = qjit_sandbox_query(fs->S, list[i].tmpl, what, p, NPARAMS, arg, rec);
    pthread_mutex_unlock(&fs->mu);
    return st;
}

bool qjit_family_present(qjit_families *fs, qjit_kernel k)
{
    int i = index_of(k);
    if (i < 0)
        return false;
    pthread_mutex_lock(&fs->mu);
    qjit_status st = load(fs, i);
    pthread_mutex_unlock(&fs->mu);
    return st != QJIT_ERROR_UNSUPPORTED; /* a broken declaration is there: it says why */
}

qjit_status qjit_family_serves(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                               bool *yes)
{
    qjit_records rec = {NULL, 0, 1, NULL, 0, 0};
    long long unused;
    rec.vals = &unused;
    *yes = false;
    qjit_status st = query(fs, k, d, "serves", NULL, &rec);
    if (st == QJIT_ERROR_UNSUPPORTED && !qjit_family_present(fs, k))
        return QJIT_OK; /* not in this build: serves nothing */
    *yes = st == QJIT_OK && rec.n > 0;
    return st;
}

qjit_arch qjit_family_floor(qjit_families *fs, qjit_kernel k)
{
    int i = index_of(k);
    if (i < 0)
        return QJIT_ARCH_AUTO;
    pthread_mutex_lock(&fs->mu);
    qjit_arch a = load(fs, i) == QJIT_OK ? fs->floor[i] : QJIT_ARCH_AUTO;
    pthread_mutex_unlock(&fs->mu);
    return a;
}

bool qjit_family_measured(qjit_families *fs, qjit_kernel k)
{
    int i = index_of(k);
    if (i < 0)
        return false;
    pthread_mutex_lock(&fs->mu);
    bool yes = load(fs, i) == QJIT_OK && fs->measured[i];
    pthread_mutex_unlock(&fs->mu);
    return yes;
}

static const char *const config_fields[] = {"bm", "bn", "bk", "wm", "wn", "stages", "split"};
#define NCONFIG 7

/* A record of config_fields as a configuration; false when a field is missing or not
 * positive. */
static bool config_of(const long long *v, qjit_config *c)
{
    for (int f = 0; f < NCONFIG - 1; f++)
        if (v[f] == QJIT_RECORD_MISSING || v[f] < 1 || v[f] > 1000000)
            return false;
    long long split = v[NCONFIG - 1] == QJIT_RECORD_MISSING ? 1 : v[NCONFIG - 1];
    if (split < 1 || split > 1000000)
        return false;
    *c = (qjit_config){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5],
                       (int)split};
    return true;
}

qjit_status qjit_family_default(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                                int64_t m_max, qjit_config *out)
{
    long long v[NCONFIG];
    qjit_records rec = {config_fields, NCONFIG, 1, v, 0, 0};
    qjit_tparam m = {"m", QJIT_TP_INT, m_max > 0 ? m_max : 0, NULL};
    qjit_status st = query(fs, k, d, "default", &m, &rec);
    if (st != QJIT_OK)
        return st;
    if (rec.n == 0) /* nil: the family leaves problems of this size to the next one */
        return QJIT_ERROR_NOT_FOUND;
    if (rec.n != 1 || !config_of(v, out))
        return qjit_err_set(QJIT_ERROR_TEMPLATE,
                            "template %s: default() must return a configuration {bm, bn, bk, "
                            "wm, wn, stages[, split]} of positive integers",
                            qjit_family_template(k));
    return QJIT_OK;
}

qjit_status qjit_family_space(qjit_families *fs, qjit_kernel k, const qjit_gemm_desc *d,
                              const char *name, qjit_config *out, size_t cap, size_t *count)
{
    enum { MAXPTS = 256 };
    long long *v = malloc(sizeof *v * NCONFIG * MAXPTS);
    if (!v)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "a configuration space");
    qjit_records rec = {config_fields, NCONFIG, MAXPTS, v, 0, 0};
    qjit_tparam arg = {"name", QJIT_TP_STR, 0, name};
    *count = 0;
    qjit_status st = query(fs, k, d, "space", &arg, &rec);
    if (st == QJIT_OK && rec.n == 0)
        st = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                          "kernel %s has no configuration space '%s'",
                          qjit_kernel_name(k), name);
    for (int i = 0; st == QJIT_OK && i < rec.n; i++) {
        qjit_config c;
        if (!config_of(v + (size_t)i * NCONFIG, &c))
            st = qjit_err_set(QJIT_ERROR_TEMPLATE,
                              "template %s: space('%s') entry %d is not a configuration",
                              qjit_family_template(k), name, i + 1);
        else if ((size_t)i < cap)
            out[i] = c;
    }
    if (st == QJIT_OK)
        *count = (size_t)rec.n;
    free(v);
    return st;
}

qjit_status qjit_family_plan(qjit_families *fs, const qjit_gemm_desc *r, qjit_plan *out,
                             char *why, size_t cap)
{
    static const char *const fields[] = {"threads",    "smem",       "k_multiple",
                                         "ld_multiple", "align",     "persistent",
                                         "cluster_k",  "k_chunk",    "tma",
                                         "cluster_m",  "tma_rows"};
    long long v[11];
    qjit_records rec = {fields, 11, 1, v, 0, 0};
    qjit_status st = query(fs, r->kernel, r, "plan", NULL, &rec);
    if (st == QJIT_OK && rec.n != 1)
        st = qjit_err_set(QJIT_ERROR_TEMPLATE, "template %s: plan() returned no table",
                          qjit_family_template(r->kernel));
    if (st != QJIT_OK) {
        snprintf(why, cap, "%s", qjit_last_error());
        return st;
    }
#define GET(f, dflt) (v[f] == QJIT_RECORD_MISSING ? (dflt) : v[f])
    *out = (qjit_plan){(unsigned)GET(0, 0), (unsigned)GET(1, 0), (int)GET(2, 1), (int)GET(3, 1),
                       (int)GET(4, 16), (int)GET(5, 0), (int)GET(6, 1), (int)GET(7, 0),
                       (int)GET(8, 0),  (int)GET(9, 1), (int)GET(10, 0)};
#undef GET
    if (v[0] == QJIT_RECORD_MISSING || out->threads == 0 || out->threads > 1024 ||
        out->threads % 32 || v[1] < 0 || out->k_multiple < 1 || out->ld_multiple < 1 ||
        out->align < 1 || (out->persistent != 0 && out->persistent != 1) ||
        out->cluster_k < 1 || out->cluster_k > 8 || (out->cluster_k > 1 && out->k_chunk < 1) ||
        out->tma < 0 || out->tma > 2 || (out->cluster_m != 1 && out->cluster_m != 2) ||
        (out->cluster_m > 1 && (out->tma != 1 || out->cluster_k > 1)) ||
        (out->tma == 1 && out->cluster_k > 1) || out->tma_rows < 0 || out->tma_rows > 256 ||
        (out->tma_rows > 0 && (out->tma == 0 || out->tma_rows % 8 || r->bm % out->tma_rows != 0))) {
        snprintf(why, cap,
                 "template %s: plan() states no valid launch (threads=%u smem=%u k_multiple=%d "
                 "ld_multiple=%d align=%d persistent=%d cluster_k=%d k_chunk=%d tma=%d "
                 "cluster_m=%d tma_rows=%d)",
                 qjit_family_template(r->kernel), out->threads, out->smem, out->k_multiple,
                 out->ld_multiple, out->align, out->persistent, out->cluster_k, out->k_chunk,
                 out->tma, out->cluster_m, out->tma_rows);
        return qjit_err_set(QJIT_ERROR_TEMPLATE, "%s", why);
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

qjit_status qjit_family_expand(qjit_families *fs, const qjit_gemm_desc *r, qjit_expansion *e)
{
    qjit_tparam p[NPARAMS];
    params_of(r, true, p);
    const char *t = qjit_family_template(r->kernel);
    if (!t)
        return qjit_err_set(QJIT_ERROR_UNSUPPORTED, "no template for kernel %d", (int)r->kernel);
    return qjit_sandbox_expand(fs->template_dir, t, p, NPARAMS, NULL, e);
}
