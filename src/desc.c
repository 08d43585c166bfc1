/*
 * desc.c — the GEMM descriptor: defaults, the canonical text form (parse and format),
 * and the semantic check of every field and combination (DESIGN.md §2 and §3).
 */
#include "qjit_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

static const char *const dtype_names[QJIT_DTYPE_COUNT] = {
    [QJIT_DTYPE_NONE] = "none", [QJIT_DTYPE_F16] = "f16",   [QJIT_DTYPE_BF16] = "bf16",
    [QJIT_DTYPE_F32] = "f32",   [QJIT_DTYPE_S8] = "s8",     [QJIT_DTYPE_S4] = "s4",
    [QJIT_DTYPE_U4] = "u4",     [QJIT_DTYPE_E4M3] = "e4m3", [QJIT_DTYPE_E5M2] = "e5m2",
    [QJIT_DTYPE_E2M1] = "e2m1", [QJIT_DTYPE_E8M0] = "e8m0",
};

static const int dtype_bits[QJIT_DTYPE_COUNT] = {
    [QJIT_DTYPE_F16] = 16, [QJIT_DTYPE_BF16] = 16, [QJIT_DTYPE_F32] = 32,
    [QJIT_DTYPE_S8] = 8,   [QJIT_DTYPE_S4] = 4,    [QJIT_DTYPE_U4] = 4,
    [QJIT_DTYPE_E4M3] = 8, [QJIT_DTYPE_E5M2] = 8,  [QJIT_DTYPE_E2M1] = 4,
    [QJIT_DTYPE_E8M0] = 8,
};

static const char *const scale_names[QJIT_SCALE_COUNT] = {
    [QJIT_SCALE_NONE] = "none", [QJIT_SCALE_TENSOR] = "tensor", [QJIT_SCALE_ROW] = "row",
    [QJIT_SCALE_COL] = "col",   [QJIT_SCALE_GROUP] = "group",   [QJIT_SCALE_BLOCK] = "block",
    [QJIT_SCALE_MX] = "mx",
};

/* The families of this build (qjit_families.h): every named qjit_kernel, and any more the
 * templates declare, with ids up to QJIT_FAMILY_ID_LIMIT. */
_Static_assert(QJIT_FAMILY_ID_LIMIT >= QJIT_KERNEL_COUNT,
               "qjit.h names more qjit_kernel values than templates/ declares families");
static const char *const kernel_names[QJIT_FAMILY_ID_LIMIT] = {
    [QJIT_KERNEL_AUTO] = "auto",
#define QJIT_FAMILY_NAME(k, name, tmpl) [k] = name,
    QJIT_FAMILY_LIST(QJIT_FAMILY_NAME)
#undef QJIT_FAMILY_NAME
};

#define DTYPE_LIST "f16 bf16 f32 s8 s4 u4 e4m3 e5m2 e2m1 e8m0"
#define SCALE_LIST "none tensor row col group:G block mx"
/* The kernel names of QJIT_FAMILY_LIST and "auto", for messages. */
#define QJIT_FAMILY_WORD(k, name, tmpl) name " "
#define KERNEL_LIST QJIT_FAMILY_LIST(QJIT_FAMILY_WORD) "auto"

const char *qjit_desc_dtype_name(qjit_dtype t)
{
    return (unsigned)t < QJIT_DTYPE_COUNT ? dtype_names[t] : NULL;
}

int qjit_desc_dtype_bits(qjit_dtype t)
{
    return (unsigned)t < QJIT_DTYPE_COUNT ? dtype_bits[t] : 0;
}

size_t qjit_desc_bytes(qjit_dtype t, int64_t rows, int64_t cols)
{
    return (size_t)((rows * cols * qjit_desc_dtype_bits(t) + 7) / 8);
}

int64_t qjit_desc_scale_count(const qjit_gemm_desc *d, bool is_a, int64_t m, int64_t n,
                              int64_t k, qjit_dtype *type)
{
    qjit_scale_mode mode = is_a ? d->sa : d->sb;
    int64_t rows = is_a ? m : n;
    *type = QJIT_DTYPE_F32;
    switch (mode) {
    case QJIT_SCALE_TENSOR: return 1;
    case QJIT_SCALE_ROW: case QJIT_SCALE_COL: return rows;
    case QJIT_SCALE_GROUP: *type = d->group_scale; return rows * (k / d->group);
    case QJIT_SCALE_BLOCK: return (is_a ? rows : (rows + 127) / 128) * ((k + 127) / 128);
    case QJIT_SCALE_MX: *type = QJIT_DTYPE_E8M0; return rows * ((k + 31) / 32);
    default: return 0;
    }
}

static bool four_bit(const qjit_gemm_desc *d)
{
    return qjit_desc_dtype_bits(d->a) == 4 || qjit_desc_dtype_bits(d->b) == 4;
}

static bool mx(const qjit_gemm_desc *d)
{
    return d->sa == QJIT_SCALE_MX || d->sb == QJIT_SCALE_MX;
}

int qjit_desc_k_unit(const qjit_gemm_desc *d)
{
    /* the group sizes (32..256) and 32 are powers of two, so the largest is the multiple */
    int u = four_bit(d) ? 2 : 1;
    if (d->sb == QJIT_SCALE_GROUP && d->group > u)
        u = d->group;
    if (mx(d) && 32 > u)
        u = 32;
    return u;
}

bool qjit_desc_k_fits(const qjit_gemm_desc *d, int64_t k, char *why, size_t cap)
{
    if (four_bit(d) && k % 2)
        snprintf(why, cap, "k=%lld is odd; 4-bit types pack two values per byte along K",
                 (long long)k);
    else if (d->sb == QJIT_SCALE_GROUP && d->group > 0 && k % d->group)
        snprintf(why, cap, "k=%lld is not a multiple of the group size %d", (long long)k,
                 d->group);
    else if (mx(d) && k % 32)
        snprintf(why, cap, "k=%lld is not a multiple of 32, the MX block size", (long long)k);
    else
        return true;
    return false;
}

const char *qjit_desc_scale_name(qjit_scale_mode m)
{
    return (unsigned)m < QJIT_SCALE_COUNT ? scale_names[m] : NULL;
}

QJIT_API const char *qjit_kernel_name(qjit_kernel k)
{
    return (unsigned)k < QJIT_FAMILY_ID_LIMIT ? kernel_names[k] : NULL;
}

/* ---------------------------------------------------------------- tokens */

/* A slice of the input text: tokens are never copied, so no length limit applies. */
typedef struct span {
    const char *p;
    size_t n;
} span;

static bool span_is(span s, const char *word) { return qjit_word_is(s.p, s.n, word); }


/* Decimal integer in [1, 1000000]: larger is never meaningful and stays far from
 * int overflow. */
static bool span_posint(span s, int *out)
{
    if (s.n == 0 || s.n > 7)
        return false;
    int v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
        v = v * 10 + (s.p[i] - '0');
    }
    if (v < 1 || v > 1000000)
        return false;
    *out = v;
    return true;
}

/* Split s at the 'x' separators into exactly n positive integers. */
static bool span_dims(span s, int n, int *out)
{
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        while (len < s.n && s.p[len] != 'x')
            len++;
        if (i < n - 1 && len == s.n)
            return false;
        if (i == n - 1 && len != s.n)
            return false;
        if (!span_posint((span){s.p, len}, &out[i]))
            return false;
        if (i < n - 1) {
            s.p += len + 1;
            s.n -= len + 1;
        }
    }
    return true;
}

static bool parse_dtype(span s, qjit_dtype *out)
{
    /* "none" is not a type a field can name; it only marks an unused gs. */
    for (int t = QJIT_DTYPE_NONE + 1; t < QJIT_DTYPE_COUNT; t++)
        if (span_is(s, dtype_names[t])) {
            *out = (qjit_dtype)t;
            return true;
        }
    return false;
}

static bool parse_scale(span s, qjit_scale_mode *out, int *group)
{
    static const char gp[] = "group:";
    if (s.n > sizeof gp - 1 && memcmp(s.p, gp, sizeof gp - 1) == 0) {
        span g = {s.p + sizeof gp - 1, s.n - (sizeof gp - 1)};
        if (!span_posint(g, group))
            return false;
        *out = QJIT_SCALE_GROUP;
        return true;
    }
    for (int m = 0; m < QJIT_SCALE_COUNT; m++)
        if (m != QJIT_SCALE_GROUP && span_is(s, scale_names[m])) {
            *out = (qjit_scale_mode)m;
            *group = 0;
            return true;
        }
    return false;
}

static bool parse_arch_span(span s, qjit_arch *out) { return qjit_arch_parse(s.p, s.n, out); }

qjit_status qjit_desc_parse_arch(const char *s, qjit_arch *out)
{
    if (!s || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "arch: NULL argument");
    if (!parse_arch_span((span){s, strlen(s)}, out))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "arch: bad value '%s' (expected %s)", s, qjit_arch_list());
    return QJIT_OK;
}

/* ---------------------------------------------------------------- defaults */

void qjit_gemm_desc_init(qjit_gemm_desc *d)
{
    if (!d)
        return;
    memset(d, 0, sizeof *d);
    d->a = QJIT_DTYPE_F16;
    d->b = QJIT_DTYPE_F16;
    d->out = QJIT_DTYPE_F16;
    d->sa = QJIT_SCALE_NONE;
    d->sb = QJIT_SCALE_NONE;
    d->group_scale = QJIT_DTYPE_NONE;
    d->arch = QJIT_ARCH_AUTO;
    d->kernel = QJIT_KERNEL_AUTO;
}

/* ---------------------------------------------------------------- parse */

enum field {
    F_A, F_B, F_SA, F_SB, F_GS, F_ZEROS, F_OUT, F_BIAS, F_ARCH, F_KERNEL,
    F_TILE, F_WARPS, F_STAGES, F_SPLIT, F_COUNT
};

static const char *const field_names[F_COUNT] = {
    [F_A] = "a",         [F_B] = "b",           [F_SA] = "sa",         [F_SB] = "sb",
    [F_GS] = "gs",       [F_ZEROS] = "zeros",   [F_OUT] = "out",       [F_BIAS] = "bias",
    [F_ARCH] = "arch",   [F_KERNEL] = "kernel", [F_TILE] = "tile",     [F_WARPS] = "warps",
    [F_STAGES] = "stages", [F_SPLIT] = "split",
};

/* What each field accepts, for the message when a value is rejected. */
static const char *const field_expect[F_COUNT] = {
    [F_A] = "one of " DTYPE_LIST,
    [F_B] = "one of " DTYPE_LIST,
    [F_SA] = "one of " SCALE_LIST,
    [F_SB] = "one of " SCALE_LIST,
    [F_GS] = "one of " DTYPE_LIST,
    [F_ZEROS] = "0 or 1",
    [F_OUT] = "one of " DTYPE_LIST,
    [F_BIAS] = "0 or 1",
    [F_ARCH] = NULL, /* qjit_arch_list() */
    [F_KERNEL] = "one of " KERNEL_LIST,
    [F_TILE] = "BMxBNxBK with positive multiples of 8, or auto",
    [F_WARPS] = "WMxWN with positive integers, or auto",
    [F_STAGES] = "a positive integer, or auto",
    [F_SPLIT] = "a positive integer, or auto",
};

static bool parse_bit(span s, int *out)
{
    if (span_is(s, "0") || span_is(s, "1")) {
        *out = s.p[0] - '0';
        return true;
    }
    return false;
}

static bool parse_count_or_auto(span s, int *out)
{
    if (span_is(s, "auto")) {
        *out = 0;
        return true;
    }
    return span_posint(s, out);
}

/* Parse value v of field f into t.  false: the value is bad. */
static bool parse_value(enum field f, span v, qjit_gemm_desc *t, int *group_sa, int *group_sb)
{
    int dims[3];
    switch (f) {
    case F_A: return parse_dtype(v, &t->a);
    case F_B: return parse_dtype(v, &t->b);
    case F_OUT: return parse_dtype(v, &t->out);
    case F_GS: return parse_dtype(v, &t->group_scale);
    case F_SA: return parse_scale(v, &t->sa, group_sa);
    case F_SB: return parse_scale(v, &t->sb, group_sb);
    case F_ZEROS: return parse_bit(v, &t->zeros);
    case F_BIAS: return parse_bit(v, &t->bias);
    case F_ARCH: return parse_arch_span(v, &t->arch);
    case F_KERNEL:
        for (int k = 0; k < QJIT_FAMILY_ID_LIMIT; k++)
            if (kernel_names[k] && span_is(v, kernel_names[k])) {
                t->kernel = (qjit_kernel)k;
                return true;
            }
        return false;
    case F_TILE:
        if (span_is(v, "auto")) {
            t->bm = t->bn = t->bk = 0;
            return true;
        }
        if (!span_dims(v, 3, dims))
            return false;
        for (int i = 0; i < 3; i++)
            if (dims[i] % 8)
                return false;
        t->bm = dims[0];
        t->bn = dims[1];
        t->bk = dims[2];
        return true;
    case F_WARPS:
        if (span_is(v, "auto")) {
            t->wm = t->wn = 0;
            return true;
        }
        if (!span_dims(v, 2, dims))
            return false;
        t->wm = dims[0];
        t->wn = dims[1];
        return true;
    case F_STAGES: return parse_count_or_auto(v, &t->stages);
    case F_SPLIT: return parse_count_or_auto(v, &t->split_k);
    case F_COUNT: break;
    }
    return false;
}

qjit_status qjit_gemm_desc_parse(const char *text, qjit_gemm_desc *d)
{
    if (!text || !d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "gemm descriptor: NULL argument");

    qjit_gemm_desc t;
    qjit_gemm_desc_init(&t);
    span tok[F_COUNT] = {{0}};
    bool seen[F_COUNT] = {false};
    int group_sa = 0, group_sb = 0;

    const char *p = text;
    while (qjit_is_blank(*p))
        p++;
    span head = {p, 0};
    while (p[head.n] && !qjit_is_blank(p[head.n]))
        head.n++;
    if (!span_is(head, "gemm"))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "gemm descriptor: first token is '%.*s' (expected 'gemm')",
                            (int)head.n, head.p);
    p += head.n;

    for (;;) {
        while (qjit_is_blank(*p))
            p++;
        if (!*p)
            break;
        span s = {p, 0};
        while (p[s.n] && !qjit_is_blank(p[s.n]))
            s.n++;
        p += s.n;

        const char *eq = memchr(s.p, '=', s.n);
        if (!eq)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "gemm descriptor: token '%.*s' is not key=value", (int)s.n,
                                s.p);
        span key = {s.p, (size_t)(eq - s.p)};
        span val = {eq + 1, s.n - key.n - 1};
        int f = 0;
        while (f < F_COUNT && !span_is(key, field_names[f]))
            f++;
        if (f == F_COUNT)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "gemm descriptor: unknown field '%.*s' in token '%.*s' "
                                "(fields: a b sa sb gs zeros out bias arch kernel tile "
                                "warps stages split)",
                                (int)key.n, key.p, (int)s.n, s.p);
        if (seen[f])
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "gemm descriptor: field '%s' given twice (token '%.*s' "
                                "after '%.*s')",
                                field_names[f], (int)s.n, s.p, (int)tok[f].n, tok[f].p);
        if (!parse_value((enum field)f, val, &t, &group_sa, &group_sb))
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "gemm descriptor: field '%s' has bad value '%.*s' "
                                "(expected %s)",
                                field_names[f], (int)val.n, val.p,
                                f == F_ARCH ? qjit_arch_list() : field_expect[f]);
        seen[f] = true;
        tok[f] = s;
    }

    /* One group size field serves both sides; they cannot disagree. */
    if (group_sa && group_sb && group_sa != group_sb)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "gemm descriptor: field 'sb' has bad value 'group:%d' (sa has "
                            "group size %d; the two must agree)",
                            group_sb, group_sa);
    t.group = group_sb ? group_sb : group_sa;

    /* gs and zeros belong to sb=group:G; given without it they would be lost when the
     * descriptor is printed, so refuse them rather than drop them silently. */
    if (t.sb != QJIT_SCALE_GROUP) {
        for (int f = F_GS; f <= F_ZEROS; f++)
            if (seen[f])
                return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                    "gemm descriptor: field '%s' (token '%.*s') needs "
                                    "sb=group:G, but sb is '%s'",
                                    field_names[f], (int)tok[f].n, tok[f].p,
                                    scale_names[t.sb]);
    } else if (!seen[F_GS]) {
        t.group_scale = QJIT_DTYPE_F16;
    }

    *d = t;
    return QJIT_OK;
}

/* ---------------------------------------------------------------- format */

/* Appends with snprintf semantics: len counts everything, buf holds what fits. */
typedef struct writer {
    char *buf;
    size_t cap, len;
} writer;

__attribute__((format(printf, 2, 3))) static void w_printf(writer *w, const char *fmt, ...)
{
    char *dst = w->len < w->cap ? w->buf + w->len : NULL;
    size_t room = w->len < w->cap ? w->cap - w->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->len += (size_t)n;
}

static void w_name(writer *w, const char *key, const char *name, int raw)
{
    if (name)
        w_printf(w, " %s=%s", key, name);
    else
        w_printf(w, " %s=?%d", key, raw);
}

static void w_scale(writer *w, const char *key, qjit_scale_mode m, int group)
{
    if (m == QJIT_SCALE_GROUP)
        w_printf(w, " %s=group:%d", key, group);
    else
        w_name(w, key, qjit_desc_scale_name(m), (int)m);
}

/* Write the text of d, including out-of-range values (as "?N") so that messages can
 * show any descriptor.  Returns the first field that has no name, or NULL. */
static const char *desc_write(const qjit_gemm_desc *d, writer *w)
{
    const char *bad = NULL;
#define NAMED(key, name, raw)                                                            \
    do {                                                                                 \
        const char *nm_ = (name);                                                        \
        if (!nm_ && !bad)                                                                \
            bad = key;                                                                   \
        w_name(w, key, nm_, (int)(raw));                                                 \
    } while (0)

    w_printf(w, "gemm");
    NAMED("a", qjit_desc_dtype_name(d->a), d->a);
    NAMED("b", qjit_desc_dtype_name(d->b), d->b);
    if (!qjit_desc_scale_name(d->sa) && !bad)
        bad = "sa";
    w_scale(w, "sa", d->sa, d->group);
    if (!qjit_desc_scale_name(d->sb) && !bad)
        bad = "sb";
    w_scale(w, "sb", d->sb, d->group);
    if (d->sb == QJIT_SCALE_GROUP) {
        NAMED("gs", qjit_desc_dtype_name(d->group_scale), d->group_scale);
        w_printf(w, " zeros=%d", d->zeros);
    }
    NAMED("out", qjit_desc_dtype_name(d->out), d->out);
    w_printf(w, " bias=%d", d->bias);
    NAMED("arch", qjit_arch_name(d->arch), d->arch);
    NAMED("kernel", qjit_kernel_name(d->kernel), d->kernel);
    if (d->bm == 0 && d->bn == 0 && d->bk == 0)
        w_printf(w, " tile=auto");
    else
        w_printf(w, " tile=%dx%dx%d", d->bm, d->bn, d->bk);
    if (d->wm == 0 && d->wn == 0)
        w_printf(w, " warps=auto");
    else
        w_printf(w, " warps=%dx%d", d->wm, d->wn);
    if (d->stages == 0)
        w_printf(w, " stages=auto");
    else
        w_printf(w, " stages=%d", d->stages);
    if (d->split_k == 0)
        w_printf(w, " split=auto");
    else
        w_printf(w, " split=%d", d->split_k);
#undef NAMED
    return bad;
}

void qjit_desc_text(const qjit_gemm_desc *d, char *buf, size_t cap)
{
    writer w = {buf, cap, 0};
    if (desc_write(d, &w) || w.len >= cap)
        snprintf(buf, cap, "gemm (unprintable descriptor)");
}

qjit_status qjit_gemm_desc_format(const qjit_gemm_desc *d, char *buf, size_t cap, size_t *len)
{
    if (!d || (!buf && cap > 0))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "gemm descriptor format: NULL argument");
    writer w = {buf, cap, 0};
    const char *bad = desc_write(d, &w);
    if (len)
        *len = w.len;
    if (bad) {
        char text[512];
        writer t = {text, sizeof text, 0};
        desc_write(d, &t);
        if (cap > 0)
            buf[0] = 0;
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "gemm descriptor: field '%s' has a value with no name, cannot "
                            "format '%s'",
                            bad, text);
    }
    if (w.len >= cap)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "gemm descriptor format: needs %zu bytes, buffer has %zu",
                            w.len + 1, cap);
    return QJIT_OK;
}

/* ---------------------------------------------------------------- validate */

/* Set the message "gemm descriptor: <detail> in '<text of d>'". */
__attribute__((format(printf, 2, 3))) static qjit_status bad(const qjit_gemm_desc *d,
                                                              const char *fmt, ...)
{
    char detail[1024], text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    writer w = {text, sizeof text, 0};
    desc_write(d, &w);
    return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "gemm descriptor: %s in '%s'", detail,
                        text);
}

#define BIT(x) (1u << (x))
#define DT(x) BIT(QJIT_DTYPE_##x)
#define SM(x) BIT(QJIT_SCALE_##x)

/* The A×B pairs of DESIGN.md §2 with the scale modes each takes. */
static const struct pair_rule {
    unsigned a, b;    /* dtype sets */
    unsigned sa, sb;  /* scale-mode sets */
    const char *what;
} pair_rules[] = {
    {DT(F16), DT(F16), SM(NONE), SM(NONE), "f16 x f16"},
    {DT(BF16), DT(BF16), SM(NONE), SM(NONE), "bf16 x bf16"},
    {DT(F16) | DT(BF16), DT(S4) | DT(U4), SM(NONE), SM(COL) | SM(GROUP), "W4A16"},
    {DT(F16) | DT(BF16), DT(S8), SM(NONE), SM(TENSOR) | SM(COL), "W8A16"},
    {DT(S8), DT(S8), SM(TENSOR) | SM(ROW), SM(TENSOR) | SM(COL), "W8A8"},
    {DT(S8), DT(S4), SM(ROW), SM(COL) | SM(GROUP), "W4A8"},
    {DT(E4M3) | DT(E5M2), DT(E4M3), SM(TENSOR) | SM(ROW) | SM(BLOCK),
     SM(TENSOR) | SM(COL) | SM(BLOCK), "FP8"},
    {DT(E4M3), DT(E4M3), SM(MX), SM(MX), "MXFP8"},
    {DT(E2M1), DT(E2M1), SM(MX), SM(MX), "MXFP4"},
    {DT(F16) | DT(BF16), DT(E2M1), SM(NONE), SM(MX), "f16/bf16 x MXFP4"},
};
#define NRULES (sizeof pair_rules / sizeof pair_rules[0])

static const unsigned a_types = DT(F16) | DT(BF16) | DT(S8) | DT(E4M3) | DT(E5M2) | DT(E2M1);
static const unsigned b_types =
    DT(F16) | DT(BF16) | DT(S8) | DT(S4) | DT(U4) | DT(E4M3) | DT(E5M2) | DT(E2M1);
static const unsigned out_types = DT(F16) | DT(BF16) | DT(F32);
static const unsigned gs_types = DT(F16) | DT(BF16) | DT(F32);
static const unsigned sa_modes = SM(NONE) | SM(TENSOR) | SM(ROW) | SM(BLOCK) | SM(MX);
static const unsigned sb_modes =
    SM(NONE) | SM(TENSOR) | SM(COL) | SM(GROUP) | SM(BLOCK) | SM(MX);

/* "a, b or c" of the names of the set bits, into buf. */
static const char *set_list(unsigned set, const char *const *names, int count, char *buf,
                            size_t cap)
{
    writer w = {buf, cap, 0};
    int total = 0, done = 0;
    for (int i = 0; i < count; i++)
        total += (set >> i) & 1;
    buf[0] = 0;
    for (int i = 0; i < count; i++) {
        if (!((set >> i) & 1))
            continue;
        const char *name = names[i];
        if (names == scale_names && i == QJIT_SCALE_GROUP)
            name = "group:G";
        w_printf(&w, "%s%s", done == 0 ? "" : done == total - 1 ? " or " : ", ", name);
        done++;
    }
    return buf;
}

static const char *dtypes_str(unsigned set, char *buf, size_t cap)
{
    return set_list(set, dtype_names, QJIT_DTYPE_COUNT, buf, cap);
}

static const char *modes_str(unsigned set, char *buf, size_t cap)
{
    return set_list(set, scale_names, QJIT_SCALE_COUNT, buf, cap);
}

/* A mode as the text form writes it ("group:128"), into buf. */
static const char *mode_text(qjit_scale_mode m, int group, char *buf, size_t cap)
{
    if (m == QJIT_SCALE_GROUP)
        snprintf(buf, cap, "group:%d", group);
    else
        snprintf(buf, cap, "%s", scale_names[m]);
    return buf;
}

static bool in_range_step(int v, int lo, int hi, int step)
{
    return v >= lo && v <= hi && v % step == 0;
}

static qjit_status check_types_and_modes(const qjit_gemm_desc *d)
{
    char list[256], sa_text[32], sb_text[32];
    const char *an = dtype_names[d->a], *bn = dtype_names[d->b];
    const char *sa = mode_text(d->sa, d->group, sa_text, sizeof sa_text);
    const char *sb = mode_text(d->sb, d->group, sb_text, sizeof sb_text);

    if (!(BIT(d->out) & out_types))
        return bad(d, "field 'out' has value '%s' (output must be %s)", dtype_names[d->out],
                   dtypes_str(out_types, list, sizeof list));
    if (!(BIT(d->a) & a_types))
        return bad(d, "field 'a' has value '%s' (A must be %s)", an,
                   dtypes_str(a_types, list, sizeof list));
    if (!(BIT(d->b) & b_types))
        return bad(d, "field 'b' has value '%s' (B must be %s)", bn,
                   dtypes_str(b_types, list, sizeof list));
    if (!(BIT(d->sa) & sa_modes))
        return bad(d, "field 'sa' has value '%s' (that scale mode applies to B only; sa "
                      "must be %s)",
                   sa, modes_str(sa_modes, list, sizeof list));
    if (!(BIT(d->sb) & sb_modes))
        return bad(d, "field 'sb' has value '%s' (that scale mode applies to A only; sb "
                      "must be %s)",
                   sb, modes_str(sb_modes, list, sizeof list));

    /* The pair, then the modes that pair takes. */
    unsigned b_with_a = 0, sa_ok = 0, sb_ok = 0;
    for (size_t i = 0; i < NRULES; i++)
        if (pair_rules[i].a & BIT(d->a))
            b_with_a |= pair_rules[i].b;
    if (!(b_with_a & BIT(d->b)))
        return bad(d, "field 'b' has value '%s', which does not pair with a=%s (with A=%s, "
                      "B must be %s)",
                   bn, an, an, dtypes_str(b_with_a, list, sizeof list));
    for (size_t i = 0; i < NRULES; i++)
        if ((pair_rules[i].a & BIT(d->a)) && (pair_rules[i].b & BIT(d->b)))
            sa_ok |= pair_rules[i].sa;
    if (!(sa_ok & BIT(d->sa)))
        return bad(d, "field 'sa' has value '%s', which a=%s b=%s does not take (sa must "
                      "be %s)",
                   sa, an, bn, modes_str(sa_ok, list, sizeof list));
    for (size_t i = 0; i < NRULES; i++)
        if ((pair_rules[i].a & BIT(d->a)) && (pair_rules[i].b & BIT(d->b)) &&
            (pair_rules[i].sa & BIT(d->sa)))
            sb_ok |= pair_rules[i].sb;
    if (!(sb_ok & BIT(d->sb)))
        return bad(d, "field 'sb' has value '%s', which a=%s b=%s sa=%s does not take (sb "
                      "must be %s)",
                   sb, an, bn, sa, modes_str(sb_ok, list, sizeof list));
    return QJIT_OK;
}

static qjit_status check_group(const qjit_gemm_desc *d)
{
    if (d->sb != QJIT_SCALE_GROUP) {
        /* Fields of group mode must stay clear, so that text and struct agree. */
        if (d->group != 0)
            return bad(d, "field 'group' has value %d but sb is '%s' (a group size goes "
                          "with sb=group:G only; set it to 0)",
                       d->group, scale_names[d->sb]);
        if (d->group_scale != QJIT_DTYPE_NONE)
            return bad(d, "field 'gs' has value '%s' but sb is '%s' (gs goes with "
                          "sb=group:G only; set it to none)",
                       dtype_names[d->group_scale], scale_names[d->sb]);
        if (d->zeros != 0)
            return bad(d, "field 'zeros' has value %d but sb is '%s' (zeros go with "
                          "sb=group:G only; set it to 0)",
                       d->zeros, scale_names[d->sb]);
        return QJIT_OK;
    }
    if (d->group != 32 && d->group != 64 && d->group != 128 && d->group != 256)
        return bad(d, "field 'sb' has value 'group:%d' (group size must be 32, 64, 128 or "
                      "256)",
                   d->group);
    if (!(BIT(d->group_scale) & gs_types))
        return bad(d, "field 'gs' has value '%s' (group scales must be f16, bf16 or f32)",
                   dtype_names[d->group_scale]);
    if (d->zeros != 0 && d->zeros != 1)
        return bad(d, "field 'zeros' has value %d (must be 0 or 1)", d->zeros);
    if (d->zeros && d->b != QJIT_DTYPE_U4)
        return bad(d, "field 'zeros' has value 1 but b is '%s' (zero points exist for b=u4 "
                      "only)",
                   dtype_names[d->b]);
    return QJIT_OK;
}

static qjit_status check_config(const qjit_gemm_desc *d)
{
    bool tile_auto = d->bm == 0 && d->bn == 0 && d->bk == 0;
    bool warps_auto = d->wm == 0 && d->wn == 0;

    if (!tile_auto) {
        if (d->bm == 0 || d->bn == 0 || d->bk == 0)
            return bad(d, "field 'tile' has value '%dx%dx%d' (all three of BMxBNxBK are set, "
                          "or all are auto)",
                       d->bm, d->bn, d->bk);
        /* BM 8: the decode kernel's tile of 8 tokens (gemm_gemv.cu) */
        if (!in_range_step(d->bm, 8, 256, 8))
            return bad(d, "field 'tile' has value '%dx%dx%d' (BM=%d must be a multiple of "
                          "8 in 8..256)",
                       d->bm, d->bn, d->bk, d->bm);
        if (!in_range_step(d->bn, 16, 256, 16))
            return bad(d, "field 'tile' has value '%dx%dx%d' (BN=%d must be a multiple of "
                          "16 in 16..256)",
                       d->bm, d->bn, d->bk, d->bn);
        if (!in_range_step(d->bk, 16, 128, 16))
            return bad(d, "field 'tile' has value '%dx%dx%d' (BK=%d must be a multiple of "
                          "16 in 16..128)",
                       d->bm, d->bn, d->bk, d->bk);
    }
    if (!warps_auto) {
        if (d->wm < 1 || d->wm > 8 || d->wn < 1 || d->wn > 8)
            return bad(d, "field 'warps' has value '%dx%d' (WM and WN must each be 1..8, or "
                          "both auto)",
                       d->wm, d->wn);
        if (d->wm * d->wn > 16)
            return bad(d, "field 'warps' has value '%dx%d' (at most 16 warps, 512 threads, "
                          "per CTA)",
                       d->wm, d->wn);
    }
    /* How warps split a tile is the family's to say (a warp tile of 16x16 fragments in
     * the mma.sync families, warpgroups of 64 rows on Hopper, warps along K in gemv): each
     * family's plan() refuses the layouts it cannot run, with the reason. */
    /* a bound of the text form only: each family states the depths it takes in its plan */
    if (d->stages != 0 && (d->stages < 2 || d->stages > 32))
        return bad(d, "field 'stages' has value %d (must be 2..32, or auto)", d->stages);
    if (d->split_k < 0 || d->split_k > 64)
        return bad(d, "field 'split' has value %d (must be 1..64, or auto)", d->split_k);
    return QJIT_OK;
}

qjit_status qjit_gemm_desc_validate(const qjit_gemm_desc *d)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "gemm descriptor: NULL argument");

    /* Enum ranges first: everything after indexes name tables with them. */
    const struct {
        const char *field;
        qjit_dtype v;
    } dtypes[] = {{"a", d->a}, {"b", d->b}, {"out", d->out}, {"gs", d->group_scale}};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if ((unsigned)dtypes[i].v >= QJIT_DTYPE_COUNT)
            return bad(d, "field '%s' has value %d, which is not a qjit_dtype", dtypes[i].field,
                       (int)dtypes[i].v);
    if ((unsigned)d->sa >= QJIT_SCALE_COUNT)
        return bad(d, "field 'sa' has value %d, which is not a qjit_scale_mode", (int)d->sa);
    if ((unsigned)d->sb >= QJIT_SCALE_COUNT)
        return bad(d, "field 'sb' has value %d, which is not a qjit_scale_mode", (int)d->sb);
    if (!qjit_arch_name(d->arch))
        return bad(d, "field 'arch' has value %d (must be QJIT_ARCH_AUTO, _SM80, _SM86, _SM89 "
                      "or _SM90A)",
                   (int)d->arch);
    if (!qjit_kernel_name(d->kernel))
        return bad(d, "field 'kernel' has value %d, which is not a qjit_kernel", (int)d->kernel);
    if (d->bias != 0 && d->bias != 1)
        return bad(d, "field 'bias' has value %d (must be 0 or 1)", d->bias);

    qjit_status st = check_types_and_modes(d);
    if (st == QJIT_OK)
        st = check_group(d);
    if (st == QJIT_OK)
        st = check_config(d);
    return st;
}
