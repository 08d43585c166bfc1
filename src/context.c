/*
 * context.c — a qjit context: its options (copied), the cache it opened, its kernel
 * families, the in-process map of what it has made and the objects it owns, the builds
 * under way, statistics, and the process-wide default context.  It knows objects only
 * as pointers with a destructor, so it calls into no module that makes them.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void qjit_options_init(qjit_options *o)
{
    memset(o, 0, sizeof *o);
    o->arch = QJIT_ARCH_AUTO;
}

static char *dup_or_env(const char *s, const char *env)
{
    if (!s || !*s)
        s = getenv(env);
    return (s && *s) ? strdup(s) : NULL;
}

qjit_status qjit_context_create(const qjit_options *o, qjit_context **out)
{
    if (!out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_context_create: out is NULL");
    *out = NULL;
    qjit_options defaults;
    if (!o) {
        qjit_options_init(&defaults);
        o = &defaults;
    }
    if (o->arch != QJIT_ARCH_AUTO && !qjit_arch_name(o->arch))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_options: field 'arch' has bad value %d", (int)o->arch);
    qjit_context *c = calloc(1, sizeof *c);
    if (!c)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_context_create");
    qjit_status st = QJIT_OK;
    c->opt = *o;
    c->cache_dir = dup_or_env(o->cache_dir, "QJIT_CACHE_DIR");
    c->shipped = dup_or_env(o->shipped_cache, "QJIT_SHIPPED_CACHE");
    c->template_dir = dup_or_env(o->template_dir, "QJIT_TEMPLATE_DIR");
    c->opt.cache_dir = c->cache_dir;
    c->opt.shipped_cache = c->shipped;
    c->opt.template_dir = c->template_dir;
    c->log = (qjit_logger){o->log, o->log_user};
    if (!c->opt.cache_max_bytes) {
        const char *m = getenv("QJIT_CACHE_MAX_BYTES");
        if (m && *m)
            c->opt.cache_max_bytes = strtoull(m, NULL, 10);
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    /* QJIT_PDL: unset (or 2), every launch starts early, the GEMMs reading nothing before their
     * wait; 0, none; any other value, all, gemv reading its first weights before its wait (the
     * caller vouches that no kernel writes a GEMM's weights just before it) */
    const char *pdl = getenv("QJIT_PDL");
    const bool off = pdl && strcmp(pdl, "0") == 0;
    c->pdl = !off;
    c->pdl_weights = !off && pdl && *pdl && strcmp(pdl, "2") != 0;
    c->pdl_quant = !off;
    const char *occ = getenv("QJIT_SPLIT_OCC");
    c->split_occ = occ && *occ && strcmp(occ, "0") != 0;
    const char *v = getenv("QJIT_CACHE_VERIFY");
    qjit_cache_config cfg = {c->cache_dir, c->shipped, o->memory_only, c->opt.cache_max_bytes,
                             c->log, o->verify_cache || (v && *v && strcmp(v, "0") != 0)};
    if ((st = qjit_cache_open(&cfg, &c->cache)) != QJIT_OK ||
        (st = qjit_family_open(c->template_dir, &c->families)) != QJIT_OK) {
        qjit_context_destroy(c);
        return st;
    }
    *out = c;
    return QJIT_OK;
}

struct qjit_owned {
    void *obj;
    void (*destroy)(void *obj);
};

void qjit_context_destroy(qjit_context *c)
{
    if (!c)
        return;
    /* newest first: an object may use the ones made before it */
    for (size_t i = c->nowned; i-- > 0;)
        c->owned[i].destroy(c->owned[i].obj);
    free(c->owned);
    free(c->slots);
    qjit_family_close(c->families);
    qjit_cache_close(c->cache);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->cache_dir);
    free(c->shipped);
    free(c->template_dir);
    free(c);
}

void qjit_context_stats(qjit_context *c, qjit_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

void qjit_context_cache_info(qjit_context *c, qjit_cache_info *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (c)
        qjit_cache_info_get(c->cache, out);
}

/* ------------------------------------------------------------ the map */
struct qjit_map_entry {
    uint64_t hash; /* 0 = empty slot */
    int kind;
    qjit_gemm_desc desc;
    void *cuctx;
    void *obj;
};

static uint64_t map_hash(int kind, const qjit_gemm_desc *d, void *cuctx)
{
    struct {
        qjit_gemm_desc d;
        void *c;
        int kind;
    } k;
    memset(&k, 0, sizeof k); /* padding too: the bytes are hashed */
    k.d = *d;
    k.c = cuctx;
    k.kind = kind;
    uint64_t h = XXH3_64bits(&k, sizeof k);
    return h ? h : 1;
}

void *qjit_ctx_find(qjit_context *ctx, int kind, const qjit_gemm_desc *d, void *cuctx)
{
    if (!ctx->nslots)
        return NULL;
    uint64_t h = map_hash(kind, d, cuctx);
    for (size_t i = h & (ctx->nslots - 1);; i = (i + 1) & (ctx->nslots - 1)) {
        qjit_map_entry *e = &ctx->slots[i];
        if (!e->hash)
            return NULL;
        if (e->hash == h && e->kind == kind && e->cuctx == cuctx &&
            memcmp(&e->desc, d, sizeof *d) == 0)
            return e->obj;
    }
}

bool qjit_ctx_insert(qjit_context *ctx, int kind, const qjit_gemm_desc *d, void *cuctx,
                     void *obj)
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
    uint64_t h = map_hash(kind, d, cuctx);
    size_t j = h & (ctx->nslots - 1);
    while (ctx->slots[j].hash)
        j = (j + 1) & (ctx->nslots - 1);
    ctx->slots[j] = (qjit_map_entry){h, kind, *d, cuctx, obj};
    ctx->nused++;
    return true;
}

bool qjit_ctx_adopt(qjit_context *ctx, void *obj, void (*fn)(void *obj))
{
    if (ctx->nowned == ctx->cap_owned) {
        size_t n = ctx->cap_owned ? ctx->cap_owned * 2 : 16;
        qjit_owned *p = realloc(ctx->owned, n * sizeof *p);
        if (!p)
            return false;
        ctx->owned = p;
        ctx->cap_owned = n;
    }
    ctx->owned[ctx->nowned++] = (qjit_owned){obj, fn};
    return true;
}

/* ------------------------------------------------------------ builds under way */
/* Caller holds ctx->mu. */
static bool building(qjit_context *ctx, int kind, const qjit_gemm_desc *d, void *cuctx)
{
    for (qjit_inflight *p = ctx->inflight; p; p = p->next)
        if (p->kind == kind && p->cuctx == cuctx && memcmp(&p->desc, d, sizeof *d) == 0)
            return true;
    return false;
}

static void build_end(qjit_context *ctx, qjit_inflight *me)
{
    for (qjit_inflight **p = &ctx->inflight; *p; p = &(*p)->next)
        if (*p == me) {
            *p = me->next;
            break;
        }
    pthread_cond_broadcast(&ctx->cv);
}

/* Whether the stream is capturing (or cannot say): no module may load then. */
static bool capturing(struct CUstream_st *stream)
{
    const qjit_cu_api *cu;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    return qjit_drv_load(&cu) != QJIT_OK ||
           cu->StreamIsCapturing((CUstream)stream, &cs) != CUDA_SUCCESS ||
           cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

qjit_status qjit_ctx_obtain(qjit_context *ctx, int kind, const qjit_gemm_desc *key, void *cuctx,
                            struct CUstream_st *capture_stream, const char *text,
                            qjit_make_fn make, void (*destroy)(void *obj), void *arg,
                            void **out, bool *hit)
{
    void *obj;
    pthread_mutex_lock(&ctx->mu);
    for (;;) {
        obj = qjit_ctx_find(ctx, kind, key, cuctx);
        if (obj || !building(ctx, kind, key, cuctx))
            break;
        pthread_cond_wait(&ctx->cv, &ctx->mu); /* another thread is making it */
    }
    if (hit)
        *hit = obj != NULL;
    if (obj) {
        pthread_mutex_unlock(&ctx->mu);
        *out = obj;
        return QJIT_OK;
    }
    if (capture_stream && capturing(capture_stream)) {
        pthread_mutex_unlock(&ctx->mu);
        return qjit_err_set(QJIT_ERROR_CAPTURING,
                            "%s is not loaded yet and the stream is capturing: loading a "
                            "module now would break the capture; get it before "
                            "cuStreamBeginCapture",
                            text);
    }
    qjit_inflight me = {kind, *key, cuctx, ctx->inflight};
    ctx->inflight = &me;
    pthread_mutex_unlock(&ctx->mu);

    qjit_status st = make(arg, &obj);

    pthread_mutex_lock(&ctx->mu);
    if (st == QJIT_OK && !qjit_ctx_adopt(ctx, obj, destroy)) {
        destroy(obj);
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "%s: the context's list of objects", text);
    }
    if (st == QJIT_OK) /* best effort: one not in the map is only found again by a rebuild */
        qjit_ctx_insert(ctx, kind, key, cuctx, obj);
    build_end(ctx, &me);
    pthread_mutex_unlock(&ctx->mu);
    if (st == QJIT_OK)
        *out = obj;
    return st;
}

/* ------------------------------------------------------------ the default context */
static qjit_context *default_ctx;
static qjit_status default_status;
static char default_msg[1024];
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void)
{
    qjit_options o;
    qjit_options_init(&o);
    const char *arch = getenv("QJIT_ARCH");
    if (arch && *arch && qjit_desc_parse_arch(arch, &o.arch) != QJIT_OK)
        o.arch = QJIT_ARCH_AUTO;
    default_status = qjit_context_create(&o, &default_ctx);
    if (default_status != QJIT_OK)
        snprintf(default_msg, sizeof default_msg, "%s", qjit_last_error());
}

qjit_status qjit_default_context(qjit_context **out)
{
    pthread_once(&default_once, default_init);
    *out = default_ctx;
    if (default_status != QJIT_OK)
        return qjit_err_set(default_status, "default qjit context: %s", default_msg);
    return QJIT_OK;
}
