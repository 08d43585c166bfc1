/*
 * build.c — the cold path of a get and of precompile: a resolved descriptor's template
 * expanded, its key made, the cubin looked up in the cache, else compiled by NVRTC
 * outside any cache transaction and stored.
 */
#include "qjit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Caller holds ctx->mu. */
static bool compiling(const qjit_context *ctx, const uint8_t key[16])
{
    for (const qjit_compiling *p = ctx->compiling; p; p = p->next)
        if (memcmp(p->key, key, 16) == 0)
            return true;
    return false;
}

static void compile_end(qjit_context *ctx, qjit_compiling *me)
{
    pthread_mutex_lock(&ctx->mu);
    for (qjit_compiling **p = &ctx->compiling; *p; p = &(*p)->next)
        if (*p == me) {
            *p = me->next;
            break;
        }
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
}

qjit_status qjit_build_cubin(qjit_context *ctx, const qjit_gemm_desc *r, const char *text,
                             bool must_store, uint8_t key_out[16], void **cubin,
                             size_t *cubin_len, int *was_cached)
{
    qjit_expansion e;
    qjit_status st = qjit_family_expand(ctx->families, r, &e);
    if (st != QJIT_OK)
        return qjit_err_prefix(st, "%s", text);
    return qjit_build_expanded(ctx, text, r->arch, &e, must_store, key_out, cubin, cubin_len,
                               was_cached);
}

qjit_status qjit_build_expanded(qjit_context *ctx, const char *text, qjit_arch arch,
                                qjit_expansion *e_in, bool must_store, uint8_t key_out[16],
                                void **cubin, size_t *cubin_len, int *was_cached)
{
    qjit_expansion e = *e_in; /* ours now: freed below */
    memset(e_in, 0, sizeof *e_in);
    qjit_key key = {{0}, {0}};
    qjit_status st = qjit_key_build(text, &e, arch, &key);
    if (st != QJIT_OK)
        goto done;
    memcpy(key_out, key.hash, 16);
    qjit_compiling me;
    for (;;) {
        st = qjit_cache_get(ctx->cache, key.hash, key.material.data, key.material.len, cubin,
                            cubin_len);
        if (st == QJIT_OK) {
            *was_cached = 1;
            goto done;
        }
        if (st != QJIT_ERROR_NOT_FOUND)
            goto done;
        /* the same key being compiled by another thread (for another device, or another
         * handle that shares the kernel): wait for it, then look again */
        pthread_mutex_lock(&ctx->mu);
        bool waited = false;
        while (compiling(ctx, key.hash)) {
            pthread_cond_wait(&ctx->cv, &ctx->mu);
            waited = true;
        }
        if (!waited) {
            me = (qjit_compiling){{0}, ctx->compiling};
            memcpy(me.key, key.hash, 16);
            ctx->compiling = &me;
        }
        pthread_mutex_unlock(&ctx->mu);
        if (waited)
            continue;
        /* a compile of this key may have ended between the miss above and the lock: one
         * more look, now that another thread would wait for this one */
        st = qjit_cache_get(ctx->cache, key.hash, key.material.data, key.material.len, cubin,
                            cubin_len);
        if (st == QJIT_ERROR_NOT_FOUND)
            break;
        compile_end(ctx, &me);
        if (st == QJIT_OK)
            *was_cached = 1;
        goto done;
    }
    *was_cached = 0;
    double ms = 0;
    st = qjit_nvrtc_compile(e.source.data, e.source.len, e.files[0].name, arch, cubin,
                            cubin_len, &ms);
    pthread_mutex_lock(&ctx->mu);
    ctx->stats.compiles++;
    ctx->stats.compile_ms += ms;
    if (st != QJIT_OK)
        ctx->stats.compile_failures++;
    pthread_mutex_unlock(&ctx->mu);
    if (st != QJIT_OK) {
        qjit_err_prefix(st, "%s", text);
        compile_end(ctx, &me);
        goto done;
    }
    qjit_cache_row row = {{0},
                          key.material.data,
                          key.material.len,
                          text,
                          qjit_arch_name(arch),
                          *cubin,
                          *cubin_len,
                          e.source.data,
                          e.source.len,
                          ms};
    memcpy(row.key, key.hash, 16);
    qjit_status pst = qjit_cache_put(ctx->cache, &row, NULL);
    compile_end(ctx, &me); /* stored (or not storable): a waiter looks again */
    if (pst != QJIT_OK && must_store) { /* precompile exists to fill the cache */
        free(*cubin);
        *cubin = NULL;
        st = qjit_err_prefix(pst, "%s: compiled but not stored", text);
        goto done;
    }
    if (pst != QJIT_OK) /* a get still has a good kernel; only the cache failed to keep it */
        qjit_log(&ctx->log, QJIT_LOG_WARN, "qjit: could not store %s in the cache: %s", text,
                 qjit_last_error());
    qjit_log(&ctx->log, QJIT_LOG_INFO, "qjit: compiled %s in %.0f ms", text, ms);
done:
    qjit_key_free(&key);
    qjit_expansion_free(&e);
    return st;
}

/* One resolved descriptor into the cache. */
static qjit_status precompile_one(qjit_context *ctx, const qjit_gemm_desc *r, int *cached)
{
    char why[512], text[256];
    qjit_desc_text(r, text, sizeof text);
    qjit_status st = qjit_select_check(ctx, r, NULL, why, sizeof why);
    if (st != QJIT_OK)
        return qjit_err_set(st, "%s: %s", text, why);
    void *cubin = NULL;
    size_t n = 0;
    uint8_t key[16];
    st = qjit_build_cubin(ctx, r, text, true, key, &cubin, &n, cached);
    free(cubin);
    return st;
}

qjit_status qjit_gemm_precompile(qjit_context *ctx, const qjit_gemm_desc *d, qjit_arch arch,
                                 int *was_cached)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_gemm_precompile: NULL argument");
    if (!ctx) {
        qjit_status st = qjit_default_context(&ctx);
        if (st != QJIT_OK)
            return st;
    }
    if (arch == QJIT_ARCH_AUTO && d->arch == QJIT_ARCH_AUTO && ctx->opt.arch == QJIT_ARCH_AUTO)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_gemm_precompile: name an arch (%s)", qjit_arch_list());
    /* every kernel a get would load: each bucket's, and the tuned ones of every GPU */
    qjit_dispatch dp;
    qjit_status st = qjit_select_dispatch(ctx, d, arch, NULL, true, &dp);
    if (st != QJIT_OK)
        return st;
    int all_cached = 1;
    const qjit_gemm_desc *done[QJIT_M_BUCKETS * 8];
    size_t ndone = 0;
    for (size_t p = 0; p <= dp.nproblems && st == QJIT_OK; p++)
        for (int b = 0; b < QJIT_M_BUCKETS && st == QJIT_OK; b++) {
            const qjit_gemm_desc *r = NULL;
            if (p == 0)
                r = &dp.base[b];
            else if (dp.problems[p - 1].has[b])
                r = &dp.problems[p - 1].desc[b];
            bool seen = !r;
            for (size_t i = 0; i < ndone && !seen; i++)
                seen = memcmp(done[i], r, sizeof *r) == 0;
            if (seen)
                continue;
            int cached = 0;
            st = precompile_one(ctx, r, &cached);
            all_cached &= cached;
            if (ndone < sizeof done / sizeof done[0])
                done[ndone++] = r;
        }
    qjit_dispatch_free(&dp);
    if (st == QJIT_OK && was_cached)
        *was_cached = all_cached;
    return st;
}
