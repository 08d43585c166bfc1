/*
 * context.c — a qjit context: options (copied), the cache it opened, the in-process
 * map of loaded handles, statistics, and the process-wide default context.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qjit_options_init(qjit_options *o)
{
    memset(o, 0, sizeof *o);
    o->arch = QJIT_ARCH_AUTO;
}

void qjit_log(const qjit_context *ctx, qjit_log_level lvl, const char *fmt, ...)
{
    if (!ctx || !ctx->opt.log)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->opt.log(ctx->opt.log_user, lvl, msg);
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
    if (o->arch != QJIT_ARCH_AUTO && !qjit_desc_arch_name(o->arch))
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
    if (!c->opt.cache_max_bytes) {
        const char *m = getenv("QJIT_CACHE_MAX_BYTES");
        if (m && *m)
            c->opt.cache_max_bytes = strtoull(m, NULL, 10);
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    qjit_cache_config cfg = {c->cache_dir, c->shipped, o->memory_only, c->opt.cache_max_bytes, c};
    st = qjit_cache_open(&cfg, &c->cache);
    if (st != QJIT_OK) {
        qjit_context_destroy(c);
        return st;
    }
    *out = c;
    return QJIT_OK;
}

void qjit_context_destroy(qjit_context *c)
{
    if (!c)
        return;
    qjit_gemm_destroy_all(c);
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
