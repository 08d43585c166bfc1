/*
 * quant.c — host-side number formats and quantization: exact round-to-nearest-even
 * conversions between f32 and f16/bf16/fp8/fp4, the 4-bit packing of DESIGN.md §2,
 * per-group int4 weights, and MX blocks with e8m0 scales.  No GPU, no state.
 */
#include "qjit_internal.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- formats */
/* A binary floating-point format small enough that every value and every rounding
 * step is exact in double (at most 24 significant bits). */
typedef struct qfmt {
    const char *name;
    int man;           /* stored mantissa bits */
    int ebits;         /* exponent bits */
    int bias;
    double max;        /* largest finite value */
    uint32_t maxcode;  /* its code */
    uint32_t inf;      /* code of +inf; 0: the format has none */
    uint32_t nan;      /* code of the positive NaN written; 0: the format has none */
    bool only_ones_nan; /* e4m3: only S.1111.111 is NaN, the top exponent is finite */
} qfmt;

static const qfmt FMT_F32 = {"f32", 23, 8, 127, 0x1.fffffep127, 0x7f7fffffu,
                             0x7f800000u, 0x7fc00000u, false};
static const qfmt FMT_F16 = {"f16", 10, 5, 15, 65504.0, 0x7bffu, 0x7c00u, 0x7e00u, false};
static const qfmt FMT_BF16 = {"bf16", 7, 8, 127, 0x1.fep127, 0x7f7fu, 0x7f80u, 0x7fc0u,
                              false};
static const qfmt FMT_E4M3 = {"e4m3", 3, 4, 7, 448.0, 0x7eu, 0, 0x7fu, true};
static const qfmt FMT_E5M2 = {"e5m2", 2, 5, 15, 57344.0, 0x7bu, 0x7cu, 0x7eu, false};
static const qfmt FMT_E2M1 = {"e2m1", 1, 2, 1, 6.0, 0x7u, 0, 0, false};

static const qfmt *fmt_of(qjit_dtype t)
{
    switch (t) {
    case QJIT_DTYPE_F32: return &FMT_F32;
    case QJIT_DTYPE_F16: return &FMT_F16;
    case QJIT_DTYPE_BF16: return &FMT_BF16;
    case QJIT_DTYPE_E4M3: return &FMT_E4M3;
    case QJIT_DTYPE_E5M2: return &FMT_E5M2;
    case QJIT_DTYPE_E2M1: return &FMT_E2M1;
    default: return NULL;
    }
}

/* Nearest integer, ties to even, of a non-negative double below 2^53.  Written out
 * rather than rint() so that the caller's rounding mode does not matter. */
static double rne_pos(double n)
{
    double f = floor(n), d = n - f; /* exact: d is n's fraction bits */
    if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0))
        f += 1.0;
    return f;
}

static double rne_int(double x) { return x < 0 ? -rne_pos(-x) : rne_pos(x); }

static uint32_t fmt_encode(const qfmt *f, double x, bool saturate)
{
    uint32_t sign = signbit(x) ? 1u << (f->man + f->ebits) : 0;
    if (isnan(x))
        return f->nan ? (f->nan | sign) : 0;
    double a = fabs(x);
    uint32_t over = (saturate || !f->inf ? f->maxcode : f->inf) | sign;
    if (isinf(a))
        return over;
    if (a == 0)
        return sign;
    int e2;
    frexp(a, &e2); /* a = fr·2^e2, fr in [0.5, 1): the leading bit is 2^(e2-1) */
    int ex = e2 - 1, emin = 1 - f->bias;
    if (ex < emin)
        ex = emin; /* subnormal: the spacing stays that of the smallest normal */
    double r = rne_pos(ldexp(a, f->man - ex)); /* a in units of the spacing, exact */
    if (r >= ldexp(1.0, f->man + 1)) {         /* rounded up into the next binade */
        r = ldexp(1.0, f->man);
        ex++;
    }
    if (ldexp(r, ex - f->man) > f->max)
        return over;
    uint32_t ir = (uint32_t)r, mag;
    if (ir < (1u << f->man))
        mag = ir; /* subnormal (or zero after rounding): biased exponent 0 */
    else
        mag = ((uint32_t)(ex + f->bias) << f->man) | (ir - (1u << f->man));
    return mag | sign;
}

static double fmt_decode(const qfmt *f, uint32_t c)
{
    uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->man) - 1;
    uint32_t e = (c >> f->man) & emask, m = c & mmask;
    bool neg = (c >> (f->man + f->ebits)) & 1;
    double v;
    if (f->inf && e == emask)
        v = m ? NAN : INFINITY;
    else if (f->only_ones_nan && e == emask && m == mmask)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->man);
    else
        v = ldexp((double)((1u << f->man) | m), (int)e - f->bias - f->man);
    return neg ? -v : v;
}

/* ---------------------------------------------------------------- scalar API */

QJIT_API uint16_t qjit_f16_from_f32(float x) { return (uint16_t)fmt_encode(&FMT_F16, x, false); }
QJIT_API float qjit_f16_to_f32(uint16_t h) { return (float)fmt_decode(&FMT_F16, h); }
QJIT_API uint16_t qjit_bf16_from_f32(float x)
{
    return (uint16_t)fmt_encode(&FMT_BF16, x, false);
}
QJIT_API float qjit_bf16_to_f32(uint16_t h) { return (float)fmt_decode(&FMT_BF16, h); }
QJIT_API uint8_t qjit_e4m3_from_f32(float x) { return (uint8_t)fmt_encode(&FMT_E4M3, x, true); }
QJIT_API float qjit_e4m3_to_f32(uint8_t c) { return (float)fmt_decode(&FMT_E4M3, c); }
QJIT_API uint8_t qjit_e5m2_from_f32(float x) { return (uint8_t)fmt_encode(&FMT_E5M2, x, true); }
QJIT_API float qjit_e5m2_to_f32(uint8_t c) { return (float)fmt_decode(&FMT_E5M2, c); }
QJIT_API uint8_t qjit_e2m1_from_f32(float x) { return (uint8_t)fmt_encode(&FMT_E2M1, x, true); }
QJIT_API float qjit_e2m1_to_f32(uint8_t c) { return (float)fmt_decode(&FMT_E2M1, c & 0xfu); }

QJIT_API float qjit_e8m0_to_f32(uint8_t c)
{
    return c == 0xff ? NAN : ldexpf(1.0f, (int)c - 127);
}

/* ---------------------------------------------------------------- argument checks */

static const char *dtype_name(qjit_dtype t)
{
    const char *n = qjit_desc_dtype_name(t);
    return n ? n : "?";
}

/* A rows×cols matrix at p with leading dimension ld (elements); `packed`: two per byte,
 * so ld must be even. */
static qjit_status check_matrix(const char *fn, const char *name, const void *p,
                                int64_t rows, int64_t cols, int64_t ld, bool packed)
{
    if (ld < cols || ld < 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: leading dimension of %s is %lld, less than its %lld columns",
                            fn, name, (long long)ld, (long long)cols);
    if (packed && ld % 2)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: leading dimension of %s is %lld; a packed 4-bit row must "
                            "start on a byte, so it must be even",
                            fn, name, (long long)ld);
    if (!p && rows > 0 && cols > 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    return QJIT_OK;
}

static qjit_status check_sizes(const char *fn, int64_t rows, int64_t k)
{
    if (rows < 0 || k < 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: sizes %lld x %lld are negative",
                            fn, (long long)rows, (long long)k);
    return QJIT_OK;
}

/* ---------------------------------------------------------------- 4-bit packing */

static void put_nibble(uint8_t *row, int64_t c, unsigned v)
{
    uint8_t *b = row + c / 2;
    if (c % 2)
        *b = (uint8_t)((*b & 0x0f) | (v << 4));
    else
        *b = (uint8_t)((*b & 0xf0) | (v & 0x0f));
}

/* The arguments pack4 and unpack4 share: a 4-bit type, sizes, an even K, and the two
 * matrices, the packed one (ld in values, even) being dst for pack4 and src for unpack4. */
static qjit_status check_4bit_args(const char *fn, qjit_dtype t, int64_t rows, int64_t k,
                                   const void *src, int64_t ld_src, const void *dst,
                                   int64_t ld_dst, bool src_packed)
{
    qjit_status st;
    if (t != QJIT_DTYPE_S4 && t != QJIT_DTYPE_U4 && t != QJIT_DTYPE_E2M1)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: type is '%s' (%d); must be s4, u4 or e2m1", fn,
                            dtype_name(t), (int)t);
    if ((st = check_sizes(fn, rows, k)) != QJIT_OK)
        return st;
    if (k % 2)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: k = %lld is odd; two 4-bit values share a byte", fn,
                            (long long)k);
    if ((st = check_matrix(fn, "src", src, rows, k, ld_src, src_packed)) != QJIT_OK ||
        (st = check_matrix(fn, "dst", dst, rows, k, ld_dst, !src_packed)) != QJIT_OK)
        return st;
    return QJIT_OK;
}

QJIT_API qjit_status qjit_quant_pack4(qjit_dtype t, int64_t rows, int64_t k, const void *src,
                                      int64_t ld_src, void *dst, int64_t ld_dst)
{
    static const char fn[] = "qjit_quant_pack4";
    qjit_status st = check_4bit_args(fn, t, rows, k, src, ld_src, dst, ld_dst, false);
    if (st != QJIT_OK)
        return st;

    /* Check every value before writing any, so that a rejected call writes nothing. */
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < k; c++) {
            if (t == QJIT_DTYPE_S4) {
                int v = ((const int8_t *)src)[r * ld_src + c];
                if (v < -8 || v > 7)
                    return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                        "%s: s4 value at row %lld, column %lld is %d "
                                        "(must be in [-8, 7])",
                                        fn, (long long)r, (long long)c, v);
            } else {
                unsigned v = ((const uint8_t *)src)[r * ld_src + c];
                if (v > 15)
                    return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                        "%s: %s value at row %lld, column %lld is %u "
                                        "(must be in [0, 15])",
                                        fn, dtype_name(t), (long long)r, (long long)c, v);
            }
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + r * ld_src;
        uint8_t *d = (uint8_t *)dst + r * (ld_dst / 2);
        for (int64_t i = 0; i < k / 2; i++) /* two's complement: the low 4 bits */
            d[i] = (uint8_t)((s[2 * i] & 0x0f) | (s[2 * i + 1] & 0x0f) << 4);
    }
    return QJIT_OK;
}

QJIT_API qjit_status qjit_quant_unpack4(qjit_dtype t, int64_t rows, int64_t k,
                                        const void *src, int64_t ld_src, void *dst,
                                        int64_t ld_dst)
{
    qjit_status st = check_4bit_args("qjit_quant_unpack4", t, rows, k, src, ld_src, dst, ld_dst,
                                     true);
    if (st != QJIT_OK)
        return st;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + r * (ld_src / 2);
        uint8_t *d = (uint8_t *)dst + r * ld_dst;
        for (int64_t c = 0; c < k; c++) {
            unsigned v = (s[c / 2] >> (4 * (c % 2))) & 0x0f;
            if (t == QJIT_DTYPE_S4)
                ((int8_t *)d)[c] = (int8_t)((int)(v ^ 8u) - 8); /* sign-extend bit 3 */
            else
                d[c] = (uint8_t)v;
        }
    }
    return QJIT_OK;
}

/* ---------------------------------------------------------------- int4 groups */

/* One group's parameters: scale code and value (as stored), zero point. */
typedef struct group_params {
    uint32_t scode;
    double s;
    int z;
} group_params;

/* Finds the group's range and scale; fails on a non-finite weight or a scale beyond
 * the scale type's range. */
static qjit_status group_scan(const char *fn, qjit_dtype qtype, const qfmt *sf,
                              const float *w, int g, int64_t r, int64_t c0, group_params *p)
{
    double lo = 0, hi = 0; /* u4's range always holds 0; s4 uses hi = max|w| */
    for (int i = 0; i < g; i++) {
        double v = w[i];
        if (!isfinite(v))
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "%s: weight at row %lld, column %lld is %g (not finite)", fn,
                                (long long)r, (long long)(c0 + i), v);
        if (qtype == QJIT_DTYPE_S4) {
            if (fabs(v) > hi)
                hi = fabs(v);
        } else {
            if (v < lo)
                lo = v;
            if (v > hi)
                hi = v;
        }
    }
    double exact = qtype == QJIT_DTYPE_S4 ? hi / 7.0 : (hi - lo) / 15.0;
    p->scode = fmt_encode(sf, exact, false);
    p->s = fmt_decode(sf, p->scode);
    if (isinf(p->s))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: scale of row %lld, columns %lld..%lld is %g, beyond the "
                            "range of %s",
                            fn, (long long)r, (long long)c0, (long long)(c0 + g - 1), exact,
                            sf->name);
    p->z = 0;
    if (p->s != 0 && qtype == QJIT_DTYPE_U4) {
        double z = rne_int(-lo / p->s);
        p->z = z < 0 ? 0 : z > 15 ? 15 : (int)z;
    }
    return QJIT_OK;
}

static void put_scalar(void *base, int64_t i, const qfmt *sf, uint32_t code)
{
    if (sf == &FMT_F32) {
        memcpy((char *)base + 4 * i, &code, 4); /* the caller's buffer is float[] */
    } else {
        uint16_t h = (uint16_t)code;
        memcpy((char *)base + 2 * i, &h, 2);
    }
}

QJIT_API qjit_status qjit_quant_group4(qjit_dtype qtype, int group, qjit_dtype scale_type,
                                       int64_t n, int64_t k, const float *w, int64_t ldw,
                                       void *q, int64_t ldq, void *scales, void *zeros)
{
    static const char fn[] = "qjit_quant_group4";
    qjit_status st;
    if (qtype != QJIT_DTYPE_S4 && qtype != QJIT_DTYPE_U4)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: qtype is '%s' (%d); must be s4 or u4", fn,
                            dtype_name(qtype), (int)qtype);
    if (group != 32 && group != 64 && group != 128 && group != 256)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: group is %d; must be 32, 64, 128 or 256", fn, group);
    if (scale_type != QJIT_DTYPE_F16 && scale_type != QJIT_DTYPE_BF16 &&
        scale_type != QJIT_DTYPE_F32)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: scale_type is '%s' (%d); must be f16, bf16 or f32", fn,
                            dtype_name(scale_type), (int)scale_type);
    if ((st = check_sizes(fn, n, k)) != QJIT_OK)
        return st;
    if (k % group)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: k = %lld is not a multiple of the group size %d", fn,
                            (long long)k, group);
    int64_t ng = k / group;
    if ((st = check_matrix(fn, "w", w, n, k, ldw, false)) != QJIT_OK ||
        (st = check_matrix(fn, "q", q, n, k, ldq, true)) != QJIT_OK ||
        (st = check_matrix(fn, "scales", scales, n, ng, ng, false)) != QJIT_OK)
        return st;
    if (qtype == QJIT_DTYPE_U4 && !zeros && n > 0 && k > 0)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: zeros is NULL; u4 quantization writes zero points", fn);
    if (qtype == QJIT_DTYPE_S4 && zeros)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: zeros given for s4, which is symmetric (pass NULL)", fn);
    const qfmt *sf = fmt_of(scale_type);

    /* Pass 1 rejects bad input before anything is written; pass 2 recomputes the same
     * parameters (cheaper than storing them) and writes. */
    group_params p;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < ng; j++)
            if ((st = group_scan(fn, qtype, sf, w + r * ldw + j * group, group, r, j * group,
                                 &p)) != QJIT_OK)
                return st;

    for (int64_t r = 0; r < n; r++) {
        uint8_t *qrow = (uint8_t *)q + r * (ldq / 2);
        for (int64_t j = 0; j < ng; j++) {
            const float *wg = w + r * ldw + j * group;
            group_scan(fn, qtype, sf, wg, group, r, j * group, &p);
            put_scalar(scales, r * ng + j, sf, p.scode);
            if (zeros)
                put_scalar(zeros, r * ng + j, sf, fmt_encode(sf, p.z, false));
            for (int i = 0; i < group; i++) {
                int v = 0;
                if (p.s != 0) {
                    double t = rne_int((double)wg[i] / p.s);
                    if (qtype == QJIT_DTYPE_S4)
                        v = t < -8 ? -8 : t > 7 ? 7 : (int)t;
                    else
                        v = t + p.z < 0 ? 0 : t + p.z > 15 ? 15 : (int)t + p.z;
                }
                put_nibble(qrow, j * group + i, (unsigned)v & 0x0fu);
            }
        }
    }
    return QJIT_OK;
}

/* ---------------------------------------------------------------- MX */

static int mx_emax(qjit_dtype elem)
{
    switch (elem) {
    case QJIT_DTYPE_E4M3: return 8;
    case QJIT_DTYPE_E5M2: return 15;
    case QJIT_DTYPE_E2M1: return 2;
    default: return INT32_MIN;
    }
}

static uint8_t e8m0_code(double amax, const qfmt *f, int emax, qjit_mx_rule rule)
{
    double a = fabs(amax);
    if (!isfinite(a))
        return 0xff;
    if (a == 0)
        return 0;
    int e2;
    frexp(a, &e2);
    int fl = e2 - 1; /* floor(log2(a)), exactly */
    int e;
    if (rule == QJIT_MX_RULE_FLOOR) {
        e = fl - emax;
    } else {
        /* The answer lies in [fl - emax, fl - emax + 1]; start below it and step up
         * while a block value would still exceed max_elem (exact in double). */
        e = fl - emax - 1;
        while (a > ldexp(f->max, e))
            e++;
    }
    e += 127;
    return (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
}

static qjit_status check_mx_kind(const char *fn, qjit_dtype elem, qjit_mx_rule rule)
{
    if (mx_emax(elem) == INT32_MIN)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: element type is '%s' (%d); must be e4m3, e5m2 or e2m1", fn,
                            dtype_name(elem), (int)elem);
    if ((unsigned)rule >= QJIT_MX_RULE_COUNT)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: rule is %d; must be QJIT_MX_RULE_FLOOR or _RCEIL", fn,
                            (int)rule);
    return QJIT_OK;
}

QJIT_API qjit_status qjit_e8m0_from_amax(float amax, qjit_dtype elem, qjit_mx_rule rule,
                                         uint8_t *code)
{
    static const char fn[] = "qjit_e8m0_from_amax";
    qjit_status st = check_mx_kind(fn, elem, rule);
    if (st != QJIT_OK)
        return st;
    if (!code)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "%s: code is NULL", fn);
    *code = e8m0_code(amax, fmt_of(elem), mx_emax(elem), rule);
    return QJIT_OK;
}

QJIT_API qjit_status qjit_quant_mx(qjit_dtype elem, qjit_mx_rule rule, int64_t rows,
                                   int64_t k, const float *x, int64_t ldx, void *q,
                                   int64_t ldq, uint8_t *scales)
{
    static const char fn[] = "qjit_quant_mx";
    qjit_status st;
    if ((st = check_mx_kind(fn, elem, rule)) != QJIT_OK ||
        (st = check_sizes(fn, rows, k)) != QJIT_OK)
        return st;
    if (k % 32)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: k = %lld is not a multiple of the MX block size 32", fn,
                            (long long)k);
    bool packed = elem == QJIT_DTYPE_E2M1;
    int64_t nb = k / 32;
    if ((st = check_matrix(fn, "x", x, rows, k, ldx, false)) != QJIT_OK ||
        (st = check_matrix(fn, "q", q, rows, k, ldq, packed)) != QJIT_OK ||
        (st = check_matrix(fn, "scales", scales, rows, nb, nb, false)) != QJIT_OK)
        return st;
    const qfmt *f = fmt_of(elem);
    int emax = mx_emax(elem);

    for (int64_t r = 0; r < rows; r++) {
        uint8_t *qrow = (uint8_t *)q + r * (packed ? ldq / 2 : ldq);
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + r * ldx + b * 32;
            double amax = 0;
            for (int i = 0; i < 32 && !isnan(amax); i++) /* fmax would drop a NaN */
                amax = isnan(xb[i]) ? NAN : fmax(amax, fabs((double)xb[i]));
            uint8_t c = e8m0_code(amax, f, emax, rule);
            scales[r * nb + b] = c;
            for (int i = 0; i < 32; i++) {
                uint32_t v = c == 0xff ? 0 : fmt_encode(f, ldexp(xb[i], 127 - (int)c), true);
                if (packed)
                    put_nibble(qrow, b * 32 + i, v);
                else
                    qrow[b * 32 + i] = (uint8_t)v;
            }
        }
    }
    return QJIT_OK;
}
