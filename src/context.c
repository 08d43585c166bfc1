/*
 * context.c — a qjit context: its options (copied), the cache it opened, its kernel
 * families, the in-process map of what it has made and the objects it owns, the builds
 * under way, statistics, and the process-wide default context.  It knows objects only
 * as pointers with a destructor, so it calls into no module that makes them.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"

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
bool qjit_ctx_building(qjit_context *ctx, const qjit_gemm_desc *d, void *cuctx)
{
    for (qjit_inflight *p = ctx->inflight; p; p = p->next)
        if (p->cuctx == cuctx && memcmp(&p->desc, d, sizeof *d) == 0)
            return true;
    return false;
}

void qjit_ctx_build_begin(qjit_context *ctx, qjit_inflight *me)
{
    me->next = ctx->inflight;
    ctx->inflight = me;
}

void qjit_ctx_build_end(qjit_context *ctx, qjit_inflight *me)
{
    for (qjit_inflight **p = &ctx->inflight; *p; p = &(*p)->next)
        if (*p == me) {
            *p = me->next;
            break;
        }
    pthread_cond_broadcast(&ctx->cv);
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
