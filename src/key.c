/*
 * key.c — the cache key: a length-prefixed serialization of everything that shapes a
 * cubin (format version, descriptor, template bytes, source hash, NVRTC version and
 * options, target arch) and its XXH3-128.  Compiler output is never part of it.
 */
#include "qjit_internal.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

void qjit_hash128(const void *p, size_t n, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(n ? p : "", n));
    memcpy(out, c.digest, 16);
}

void qjit_key_hex(const uint8_t hash[16], char out[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[hash[i] >> 4];
        out[2 * i + 1] = digits[hash[i] & 15];
    }
    out[32] = 0;
}

/* u64 little-endian length, then the bytes: no two different item lists serialize
 * to the same material, whatever bytes the items hold. */
static bool put_bytes(qjit_buf *b, const void *p, size_t n)
{
    uint8_t len[8];
    uint64_t v = n;
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(v >> (8 * i));
    return qjit_buf_append(b, len, sizeof len) && qjit_buf_append(b, p, n);
}

/* A tagged item: the tag names what follows, so items cannot shift into each other. */
static bool put_item(qjit_buf *b, const char *tag, const void *p, size_t n)
{
    return put_bytes(b, tag, strlen(tag)) && put_bytes(b, p, n);
}

static bool put_str(qjit_buf *b, const char *tag, const char *s)
{
    return put_item(b, tag, s, strlen(s));
}

qjit_status qjit_key_build(const char *canonical_desc, const qjit_expansion *e,
                           qjit_arch arch, qjit_key *out)
{
    qjit_status st = QJIT_OK;
    qjit_buf m = {0};
    if (!out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_key_build: out is NULL");
    memset(out, 0, sizeof *out);
    if (!canonical_desc || !e) {
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_key_build: %s is NULL",
                            !canonical_desc ? "canonical_desc" : "expansion");
    }
    if (e->nfiles < 0 || e->nfiles > (int)(sizeof e->files / sizeof e->files[0])) {
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_key_build: expansion nfiles=%d out of range", e->nfiles);
    }
    const char *arch_name = qjit_arch_name(arch);
    const char *nvrtc = qjit_nvrtc_version();
    const char *const *opts = qjit_nvrtc_options(arch);
    if (!arch_name || !nvrtc) {
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_key_build: arch=%d has no name or NVRTC version is unknown",
                            (int)arch);
    }

    char format[64];
    snprintf(format, sizeof format, "qjit-cache-format %d", QJIT_CACHE_FORMAT_VERSION);
    uint8_t src_hash[16];
    qjit_hash128(e->source.data, e->source.len, src_hash);

    bool ok = put_str(&m, "format", format) && put_str(&m, "desc", canonical_desc);
    for (int i = 0; ok && i < e->nfiles; i++) {
        const qjit_tmpl_file *f = &e->files[i];
        if (!f->name || (!f->text && f->len)) {
            st = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                              "qjit_key_build: template file %d has no name or text", i);
            goto done;
        }
        ok = put_str(&m, "template.name", f->name) &&
             put_item(&m, "template.bytes", f->text, f->len);
    }
    ok = ok && put_item(&m, "source.xxh3-128", src_hash, sizeof src_hash) &&
         put_str(&m, "nvrtc.version", nvrtc);
    for (int i = 0; ok && opts && opts[i]; i++)
        ok = put_str(&m, "nvrtc.option", opts[i]);
    ok = ok && put_str(&m, "arch", arch_name);
    if (!ok) {
        st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "qjit_key_build: no memory for key material");
        goto done;
    }
    qjit_hash128(m.data, m.len, out->hash);
    out->material = m;
    m = (qjit_buf){0};
done:
    qjit_buf_free(&m);
    return st;
}

void qjit_key_free(qjit_key *k)
{
    if (!k)
        return;
    qjit_buf_free(&k->material);
}
