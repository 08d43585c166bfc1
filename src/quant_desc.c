/*
 * quant_desc.c — the quantization kernel descriptor: defaults, the canonical text form
 * ("quant in=bf16 out=e4m3 scale=mx rule=rceil arch=sm_90a"), parsing and validation.
 */
#include "qjit_internal.h"

#include <stdio.h>
#include <string.h>

void qjit_quant_desc_init(qjit_quant_desc *d)
{
    if (!d)
        return;
    memset(d, 0, sizeof *d);
    d->in = QJIT_DTYPE_BF16;
    d->out = QJIT_DTYPE_S8;
    d->scale = QJIT_SCALE_ROW;
    d->rule = QJIT_MX_RULE_FLOOR;
    d->arch = QJIT_ARCH_AUTO;
}

static const char *const rule_names[QJIT_MX_RULE_COUNT] = {"floor", "rceil"};

static const char *scale_name(qjit_scale_mode m)
{
    switch (m) {
    case QJIT_SCALE_ROW: return "row";
    case QJIT_SCALE_TENSOR: return "tensor";
    case QJIT_SCALE_BLOCK: return "block";
    case QJIT_SCALE_MX: return "mx";
    default: return NULL;
    }
}


/* The value names of a field, for messages. */
static const char *const expect_in = "f16 bf16 f32";
static const char *const expect_out = "s8 s4 e4m3 e2m1";
static const char *const expect_scale = "row tensor block mx";
static const char *const expect_rule = "floor rceil";


static bool dtype_of(const char *p, size_t n, const char *allowed, qjit_dtype *out)
{
    for (int t = 1; t < QJIT_DTYPE_COUNT; t++) {
        const char *name = qjit_desc_dtype_name((qjit_dtype)t);
        if (!name || !qjit_word_is(p, n, name))
            continue;
        /* the name must be one of the allowed words */
        for (const char *a = allowed; *a;) {
            size_t l = strcspn(a, " ");
            if (l == n && memcmp(a, p, n) == 0) {
                *out = (qjit_dtype)t;
                return true;
            }
            a += l + (a[l] == ' ');
        }
    }
    return false;
}

qjit_status qjit_quant_desc_parse(const char *text, qjit_quant_desc *d)
{
    if (!text || !d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "quant descriptor: NULL argument");
    qjit_quant_desc t;
    qjit_quant_desc_init(&t);
    const char *p = text;
    while (qjit_is_blank(*p))
        p++;
    size_t n = strcspn(p, " \t\r\n");
    if (!qjit_word_is(p, n, "quant"))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "quant descriptor: must start with 'quant', got '%.*s'", (int)n, p);
    p += n;
    bool seen[6] = {false};
    static const char *const fields[6] = {"in", "out", "scale", "rule", "arch", "layout"};
    for (;;) {
        while (qjit_is_blank(*p))
            p++;
        if (!*p)
            break;
        n = strcspn(p, " \t\r\n");
        const char *eq = memchr(p, '=', n);
        if (!eq)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "quant descriptor: token '%.*s' is not field=value", (int)n, p);
        size_t kn = (size_t)(eq - p), vn = n - kn - 1;
        const char *v = eq + 1;
        int f = -1;
        for (int i = 0; i < 6; i++)
            if (qjit_word_is(p, kn, fields[i]))
                f = i;
        if (f < 0)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "quant descriptor: unknown field '%.*s' (fields: in out scale "
                                "rule arch layout)",
                                (int)kn, p);
        if (seen[f])
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "quant descriptor: field '%s' given twice", fields[f]);
        seen[f] = true;
        bool ok = false;
        const char *expect = "";
        switch (f) {
        case 0: ok = dtype_of(v, vn, expect_in, &t.in); expect = expect_in; break;
        case 1: ok = dtype_of(v, vn, expect_out, &t.out); expect = expect_out; break;
        case 2:
            expect = expect_scale;
            for (int m = 0; m < QJIT_SCALE_COUNT && !ok; m++)
                if (scale_name((qjit_scale_mode)m) && qjit_word_is(v, vn, scale_name((qjit_scale_mode)m))) {
                    t.scale = (qjit_scale_mode)m;
                    ok = true;
                }
            break;
        case 3:
            expect = expect_rule;
            for (int r = 0; r < QJIT_MX_RULE_COUNT && !ok; r++)
                if (qjit_word_is(v, vn, rule_names[r])) {
                    t.rule = (qjit_mx_rule)r;
                    ok = true;
                }
            break;
        case 4:
            ok = qjit_arch_parse(v, vn, &t.arch);
            expect = qjit_arch_list();
            break;
        default:
            expect = "rows cols";
            ok = qjit_word_is(v, vn, "rows") || qjit_word_is(v, vn, "cols");
            t.cols = qjit_word_is(v, vn, "cols");
            break;
        }
        if (!ok)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "quant descriptor: field '%s' has bad value '%.*s' (expected "
                                "one of %s)",
                                fields[f], (int)vn, v, expect);
        p += n;
    }
    if (seen[3] && t.scale != QJIT_SCALE_MX)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "quant descriptor: field 'rule' is for scale=mx only (scale=%s)",
                            scale_name(t.scale));
    *d = t;
    return QJIT_OK;
}

/* The text into buf; NULL when a field has no name (then nothing is promised of buf). */
static const char *quant_write(const qjit_quant_desc *d, char *buf, size_t cap, size_t *len)
{
    const char *in = qjit_desc_dtype_name(d->in), *out = qjit_desc_dtype_name(d->out);
    const char *sc = scale_name(d->scale), *ar = qjit_arch_name(d->arch);
    const char *ru = (unsigned)d->rule < QJIT_MX_RULE_COUNT ? rule_names[d->rule] : NULL;
    const char *bad = !in ? "in" : !out ? "out" : !sc ? "scale" : !ar ? "arch"
                      : (!ru && d->scale == QJIT_SCALE_MX) ? "rule" : NULL;
    int n;
    if (bad)
        n = snprintf(buf, cap, "quant (field '%s' out of range)", bad);
    else if (d->scale == QJIT_SCALE_MX)
        n = snprintf(buf, cap, "quant in=%s out=%s scale=%s rule=%s arch=%s%s", in, out, sc, ru,
                     ar, d->cols ? " layout=cols" : "");
    else if (d->cols)
        n = snprintf(buf, cap, "quant in=%s out=%s scale=%s arch=%s layout=cols", in, out, sc, ar);
    else
        n = snprintf(buf, cap, "quant in=%s out=%s scale=%s arch=%s", in, out, sc, ar);
    *len = n > 0 ? (size_t)n : 0;
    return bad;
}

void qjit_quant_text(const qjit_quant_desc *d, char *buf, size_t cap)
{
    size_t len;
    quant_write(d, buf, cap, &len);
}

qjit_status qjit_quant_desc_format(const qjit_quant_desc *d, char *buf, size_t cap, size_t *len)
{
    if (!d || (!buf && cap > 0))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "quant descriptor format: NULL argument");
    char local[256];
    size_t n = 0;
    const char *bad = quant_write(d, local, sizeof local, &n);
    if (len)
        *len = n;
    if (bad) {
        if (cap)
            buf[0] = 0;
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "quant descriptor: field '%s' has a value with no name", bad);
    }
    if (n >= cap) {
        if (cap)
            buf[0] = 0;
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "quant descriptor format: needs %zu bytes, buffer has %zu", n + 1,
                            cap);
    }
    memcpy(buf, local, n + 1);
    return QJIT_OK;
}

qjit_status qjit_quant_desc_validate(const qjit_quant_desc *d)
{
    if (!d)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "quant descriptor: NULL");
    char text[256];
    qjit_quant_text(d, text, sizeof text);
#define BAD(...)                                                                         \
    do {                                                                                 \
        char detail_[512];                                                               \
        snprintf(detail_, sizeof detail_, __VA_ARGS__);                                  \
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "quant descriptor: %s in '%s'",  \
                            detail_, text);                                              \
    } while (0)
    if (d->in != QJIT_DTYPE_F16 && d->in != QJIT_DTYPE_BF16 && d->in != QJIT_DTYPE_F32)
        BAD("field 'in' is %d (must be f16, bf16 or f32)", (int)d->in);
    if (d->out != QJIT_DTYPE_S8 && d->out != QJIT_DTYPE_S4 && d->out != QJIT_DTYPE_E4M3 &&
        d->out != QJIT_DTYPE_E2M1)
        BAD("field 'out' is %d (must be s8, s4, e4m3 or e2m1)", (int)d->out);
    if (!scale_name(d->scale))
        BAD("field 'scale' is %d (must be row, tensor, block or mx)", (int)d->scale);
    if ((unsigned)d->rule >= QJIT_MX_RULE_COUNT)
        BAD("field 'rule' is %d (must be floor or rceil)", (int)d->rule);
    if (!qjit_arch_name(d->arch))
        BAD("field 'arch' is %d (must be one of %s)", (int)d->arch, qjit_arch_list());
    const char *out = qjit_desc_dtype_name(d->out), *sc = scale_name(d->scale);
    if (d->scale != QJIT_SCALE_MX && d->rule != QJIT_MX_RULE_FLOOR)
        BAD("field 'rule' is for scale=mx only (scale=%s)", sc);
    if (d->scale == QJIT_SCALE_MX && d->out != QJIT_DTYPE_E4M3 && d->out != QJIT_DTYPE_E2M1)
        BAD("field 'out' has value '%s', which scale=mx cannot write (e4m3 or e2m1)", out);
    if (d->out == QJIT_DTYPE_E2M1 && d->scale != QJIT_SCALE_MX)
        BAD("field 'out' has value 'e2m1', which needs scale=mx (scale=%s)", sc);
    if (d->scale == QJIT_SCALE_BLOCK && d->out != QJIT_DTYPE_E4M3)
        BAD("field 'out' has value '%s'; scale=block (1x128) writes e4m3", out);
    if (d->cols != 0 && d->cols != 1)
        BAD("field 'layout' is %d (0 rows, 1 cols)", d->cols);
    if (d->cols && d->scale != QJIT_SCALE_MX)
        BAD("field 'layout' has value 'cols', which needs scale=mx (scale=%s)", sc);
    if (d->out == QJIT_DTYPE_E4M3 && d->arch != QJIT_ARCH_AUTO &&
        !qjit_arch_at_least(d->arch, QJIT_ARCH_SM89))
        BAD("field 'arch' has value '%s'; out=e4m3 needs sm_89 or later",
            qjit_arch_name(d->arch));
#undef BAD
    return QJIT_OK;
}
