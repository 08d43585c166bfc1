/*
 * reference.c — the CPU reference GEMM in double and its helpers (see reference.h).
 * Written from DESIGN.md §2 and the format definitions only; it shares no code with
 * the library, so that the library's converters can be checked against it.
 */
#include "reference.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char ref_msg[512];

const char *ref_error(void) { return ref_msg; }

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref_msg, sizeof ref_msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---------------------------------------------------------------- decoding */

static double f16_value(uint32_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

double ref_value(qjit_dtype t, uint32_t c)
{
    static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    switch (t) {
    case QJIT_DTYPE_F16: return f16_value(c & 0xffff);
    case QJIT_DTYPE_BF16:
    case QJIT_DTYPE_F32: {
        uint32_t u = t == QJIT_DTYPE_BF16 ? (c & 0xffff) << 16 : c;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case QJIT_DTYPE_S8: return (int8_t)(c & 0xff);
    case QJIT_DTYPE_S4: return (c & 8) ? (double)(c & 15) - 16 : (double)(c & 15);
    case QJIT_DTYPE_U4: return c & 15;
    case QJIT_DTYPE_E4M3: {
        int e = (c >> 3) & 15, m = c & 7;
        double v = (e == 15 && m == 7) ? NAN : e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
        return (c & 0x80) ? -v : v;
    }
    case QJIT_DTYPE_E5M2: return f16_value((c & 0xff) << 8); /* e5m2 is f16's top byte */
    case QJIT_DTYPE_E2M1: return (c & 8) ? -e2m1[c & 7] : e2m1[c & 7];
    case QJIT_DTYPE_E8M0: return (c & 0xff) == 0xff ? NAN : ldexp(1, (int)(c & 0xff) - 127);
    default: return NAN;
    }
}

static int dtype_bits(qjit_dtype t)
{
    switch (t) {
    case QJIT_DTYPE_F32: return 32;
    case QJIT_DTYPE_F16:
    case QJIT_DTYPE_BF16: return 16;
    case QJIT_DTYPE_S8:
    case QJIT_DTYPE_E4M3:
    case QJIT_DTYPE_E5M2:
    case QJIT_DTYPE_E8M0: return 8;
    case QJIT_DTYPE_S4:
    case QJIT_DTYPE_U4:
    case QJIT_DTYPE_E2M1: return 4;
    default: return 0;
    }
}

double ref_elem(qjit_dtype t, const void *base, int64_t ld, int64_t r, int64_t c)
{
    int64_t i = r * ld + c;
    const uint8_t *p = base;
    uint32_t code = 0;
    switch (dtype_bits(t)) {
    case 4: code = (p[i / 2] >> (i % 2 ? 4 : 0)) & 15; break;
    case 8: code = p[i]; break;
    case 16: code = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8; break; /* little endian */
    case 32: memcpy(&code, p + 4 * i, 4); break;
    default: return NAN;
    }
    return ref_value(t, code);
}

/* ---------------------------------------------------------------- rounding */

/* RNE to f16 or bf16 by search: the largest code whose value is ≤ |x|, then the nearer
 * of it and the next code, the even one on a tie.  The infinity code stands for
 * 2^(emax+1), the value it would have with an unbounded exponent (IEEE overflow). */
static uint32_t round16(qjit_dtype t, double x)
{
    uint32_t inf = t == QJIT_DTYPE_F16 ? 0x7c00 : 0x7f80, sign = signbit(x) ? 0x8000 : 0;
    double top = t == QJIT_DTYPE_F16 ? 65536.0 : ldexp(1, 128);
    if (isnan(x))
        return t == QJIT_DTYPE_F16 ? 0x7e00 : 0x7fc0;
    double a = fabs(x);
    if (a >= top)
        return inf | sign;
    uint32_t lo = 0, hi = inf; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (ref_value(t, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = ref_value(t, lo), vhi = hi == inf ? top : ref_value(t, hi);
    double dlo = a - vlo, dhi = vhi - a; /* exact: Sterbenz, or vlo = 0 */
    uint32_t c = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    return c | sign;
}

uint32_t ref_round_bits(qjit_dtype t, double x)
{
    if (t == QJIT_DTYPE_F32) {
        float f = (float)x; /* C's conversion is RNE in the default rounding mode */
        uint32_t u;
        if (isnan(x))
            return 0x7fc00000u;
        memcpy(&u, &f, 4);
        return u;
    }
    return round16(t, x);
}

double ref_round(qjit_dtype t, double x) { return ref_value(t, ref_round_bits(t, x)); }

void ref_store(qjit_dtype t, const double *src, int64_t m, int64_t n, void *dst, int64_t ldd)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            uint32_t b = ref_round_bits(t, src[i * n + j]);
            if (t == QJIT_DTYPE_F32)
                memcpy((char *)dst + 4 * (i * ldd + j), &b, 4);
            else {
                uint16_t h = (uint16_t)b;
                memcpy((char *)dst + 2 * (i * ldd + j), &h, 2);
            }
        }
    }
}

double ref_nerr(const double *x, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i])) {
            bool both_nan = isnan(x[i]) && isnan(ref[i]);
            if (both_nan || x[i] == ref[i])
                continue;
            return INFINITY;
        }
        num += (x[i] - ref[i]) * (x[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---------------------------------------------------------------- operands */

/* One operand: A (rows M) or B (rows N), as the descriptor and arguments give it. */
typedef struct operand {
    char name;             /* 'A' or 'B' */
    qjit_dtype t;
    qjit_scale_mode mode;
    const void *x, *s, *z; /* values, scales, zero points */
    int64_t rows, k, ld;
    int group;             /* group:g */
    qjit_dtype gs;         /* group scale (and zero point) type */
} operand;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Length of the k-runs over which the operand's scale is constant. */
static int64_t period(const operand *o)
{
    switch (o->mode) {
    case QJIT_SCALE_GROUP: return o->group;
    case QJIT_SCALE_BLOCK: return 128;
    case QJIT_SCALE_MX: return 32;
    default: return o->k > 0 ? o->k : 1;
    }
}

static double scale_at(const operand *o, int64_t r, int64_t k)
{
    const float *f = o->s;
    switch (o->mode) {
    case QJIT_SCALE_NONE: return 1.0;
    case QJIT_SCALE_TENSOR: return f[0];
    case QJIT_SCALE_ROW:
    case QJIT_SCALE_COL: return f[r];
    case QJIT_SCALE_GROUP: return ref_elem(o->gs, o->s, o->k / o->group, r, k / o->group);
    case QJIT_SCALE_BLOCK:
        return o->name == 'A' ? f[r * cdiv(o->k, 128) + k / 128]
                              : f[(r / 128) * cdiv(o->k, 128) + k / 128];
    case QJIT_SCALE_MX: return ref_elem(QJIT_DTYPE_E8M0, o->s, cdiv(o->k, 32), r, k / 32);
    default: return NAN;
    }
}

static int check_operand(const operand *o)
{
    if (dtype_bits(o->t) == 0 || o->t == QJIT_DTYPE_E8M0)
        return fail("%c: type %d is not an element type", o->name, (int)o->t);
    if (!o->x && o->rows > 0 && o->k > 0)
        return fail("%c: NULL values", o->name);
    if (o->ld < o->k)
        return fail("%c: ld %lld < k %lld", o->name, (long long)o->ld, (long long)o->k);
    bool ok = o->mode == QJIT_SCALE_NONE || o->mode == QJIT_SCALE_TENSOR ||
              o->mode == QJIT_SCALE_BLOCK || o->mode == QJIT_SCALE_MX ||
              (o->name == 'A' && o->mode == QJIT_SCALE_ROW) ||
              (o->name == 'B' && (o->mode == QJIT_SCALE_COL || o->mode == QJIT_SCALE_GROUP));
    if (!ok)
        return fail("%c: scale mode %d does not apply to %c", o->name, (int)o->mode, o->name);
    if (o->mode != QJIT_SCALE_NONE && !o->s)
        return fail("%c: scale mode %d with a NULL scale", o->name, (int)o->mode);
    if (o->mode == QJIT_SCALE_GROUP) {
        if (o->group != 32 && o->group != 64 && o->group != 128 && o->group != 256)
            return fail("B: group %d", o->group);
        if (o->k % o->group)
            return fail("B: k %lld is not a multiple of group %d", (long long)o->k, o->group);
        if (o->gs != QJIT_DTYPE_F16 && o->gs != QJIT_DTYPE_BF16 && o->gs != QJIT_DTYPE_F32)
            return fail("B: group scale type %d", (int)o->gs);
    }
    return 0;
}

static int make_operands(const qjit_gemm_desc *d, const qjit_gemm_args *a, operand *A,
                         operand *B)
{
    *A = (operand){'A', d->a, d->sa, a->a, a->scale_a, NULL, a->m, a->k, a->lda, 0, 0};
    *B = (operand){'B', d->b, d->sb, a->b, a->scale_b, d->zeros ? a->zeros_b : NULL,
                   a->n, a->k, a->ldb, d->group, d->group_scale};
    if (a->m < 0 || a->n < 0 || a->k < 0)
        return fail("negative size");
    if (d->out != QJIT_DTYPE_F16 && d->out != QJIT_DTYPE_BF16 && d->out != QJIT_DTYPE_F32)
        return fail("output type %d is not f16/bf16/f32", (int)d->out);
    if (d->bias && !a->bias && a->n > 0)
        return fail("bias on with a NULL bias");
    if (d->zeros && (d->sb != QJIT_SCALE_GROUP || !a->zeros_b))
        return fail("zeros need sb=group and a zeros_b pointer");
    if (check_operand(A) || check_operand(B))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- GEMM */

int ref_gemm(const qjit_gemm_desc *d, const qjit_gemm_args *a, double *out)
{
    operand A, B;
    if (make_operands(d, a, &A, &B))
        return -1;
    int64_t M = a->m, N = a->n, K = a->k;
    int64_t chunk = period(&A) < period(&B) ? period(&A) : period(&B);
    int64_t nc = K > 0 ? cdiv(K, chunk) : 0;
    /* Raw values (zero points taken off) and per-chunk scales, decoded once. */
    double *av = malloc(sizeof(double) * (size_t)(M * K + 1)),
           *bv = malloc(sizeof(double) * (size_t)(N * K + 1)),
           *as = malloc(sizeof(double) * (size_t)(M * nc + 1)),
           *bs = malloc(sizeof(double) * (size_t)(N * nc + 1));
    int rc = 0;
    if (!av || !bv || !as || !bs) {
        rc = fail("out of memory");
        goto done;
    }
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++)
            av[m * K + k] = ref_elem(A.t, A.x, A.ld, m, k);
        for (int64_t c = 0; c < nc; c++)
            as[m * nc + c] = scale_at(&A, m, c * chunk);
    }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            double z = B.z ? ref_elem(B.gs, B.z, K / B.group, n, k / B.group) : 0;
            bv[n * K + k] = ref_elem(B.t, B.x, B.ld, n, k) - z;
        }
        for (int64_t c = 0; c < nc; c++)
            bs[n * nc + c] = scale_at(&B, n, c * chunk);
    }
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t c = 0; c < nc; c++) {
                const double *x = av + m * K, *y = bv + n * K;
                double part = 0;
                int64_t end = (c + 1) * chunk < K ? (c + 1) * chunk : K;
                for (int64_t k = c * chunk; k < end; k++)
                    part += x[k] * y[k];
                acc += part * as[m * nc + c] * bs[n * nc + c];
            }
            if (d->bias)
                acc += ref_elem(d->out, a->bias, 0, 0, n);
            out[m * N + n] = acc;
        }
    }
done:
    free(av);
    free(bv);
    free(as);
    free(bs);
    return rc;
}

int ref_gemm_int_f32(const qjit_gemm_desc *d, const qjit_gemm_args *a, ref_epilogue e,
                     double *out)
{
    operand A, B;
    if (make_operands(d, a, &A, &B))
        return -1;
    if (d->a != QJIT_DTYPE_S8 ||
        (d->b != QJIT_DTYPE_S8 && d->b != QJIT_DTYPE_S4 && d->b != QJIT_DTYPE_U4))
        return fail("the f32 epilogue is for a=s8 and b=s8/s4/u4 (a=%d b=%d)", (int)d->a,
                    (int)d->b);
    if (d->sa != QJIT_SCALE_NONE && d->sa != QJIT_SCALE_TENSOR && d->sa != QJIT_SCALE_ROW)
        return fail("the f32 epilogue takes sa none/tensor/row (sa=%d)", (int)d->sa);
    if (d->sb != QJIT_SCALE_NONE && d->sb != QJIT_SCALE_TENSOR && d->sb != QJIT_SCALE_COL)
        return fail("the f32 epilogue takes sb none/tensor/col (sb=%d)", (int)d->sb);
    for (int64_t m = 0; m < a->m; m++) {
        for (int64_t n = 0; n < a->n; n++) {
            uint32_t acc = 0; /* int32 arithmetic, wrapping as the hardware does */
            for (int64_t k = 0; k < a->k; k++)
                acc += (uint32_t)(int32_t)(ref_elem(A.t, A.x, A.ld, m, k) *
                                           ref_elem(B.t, B.x, B.ld, n, k));
            /* volatile: every step is its own f32 rounding, never contracted */
            volatile float t = (float)(int32_t)acc;
            float sa = (float)scale_at(&A, m, 0), sb = (float)scale_at(&B, n, 0);
            t = t * sa;
            if (!d->bias) {
                t = t * sb;
            } else {
                float bias = (float)ref_elem(d->out, a->bias, 0, 0, n);
                if (e == REF_EPI_FMA) {
                    t = fmaf(t, sb, bias);
                } else {
                    t = t * sb;
                    t = t + bias;
                }
            }
            out[m * a->n + n] = ref_round(d->out, t);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- quantization */

/* The code of v in an 8-bit (e4m3) or 4-bit (e2m1) float type: the nearest finite value,
 * ties to the even code, saturating at the largest; the sign bit from v (so -0 and
 * negatives that round to 0 keep it).  By search over the codes' values (ref_value). */
static int32_t nearest_code(qjit_dtype t, double v)
{
    static double e4m3[0x7f], e2m1[0x8]; /* the values of the non-negative finite codes */
    static bool filled;
    if (!filled) {
        for (int c = 0; c < 0x7f; c++)
            e4m3[c] = ref_value(QJIT_DTYPE_E4M3, (uint32_t)c);
        for (int c = 0; c < 0x8; c++)
            e2m1[c] = ref_value(QJIT_DTYPE_E2M1, (uint32_t)c);
        filled = true;
    }
    const bool f8 = t == QJIT_DTYPE_E4M3;
    const double *val = f8 ? e4m3 : e2m1;
    const int sign_bit = f8 ? 0x80 : 0x8;
    const int top = f8 ? 0x7e : 0x7; /* the largest finite magnitude */
    double a = fabs(v);
    int best = 0;
    for (int c = 1; c <= top; c++) {
        double dc = fabs(val[c] - a), db = fabs(val[best] - a);
        if (dc < db || (dc == db && c % 2 == 0))
            best = c;
    }
    if (a > val[top])
        best = top;
    return best | (signbit(v) ? sign_bit : 0);
}

int ref_quant(const qjit_quant_desc *d, const float *x, int64_t m, int64_t k, int64_t ldx,
              float clip, int32_t *q, float *scale)
{
    if (clip == 0.0f)
        clip = 1.0f;
    const bool mx = d->scale == QJIT_SCALE_MX;
    const int64_t g = d->scale == QJIT_SCALE_BLOCK ? 128 : mx ? 32 : k; /* along a row */
    if (mx && k % 32)
        return fail("ref_quant: k=%lld is not a multiple of 32", (long long)k);
    const bool tensor = d->scale == QJIT_SCALE_TENSOR;
    const int64_t per_row = (k + g - 1) / g;
    float tensor_amax = 0.0f;
    bool tensor_bad = false;
    if (tensor)
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < k; i++) {
                float v = x[r * ldx + i];
                tensor_bad |= !isfinite(v);
                tensor_amax = fabsf(v) > tensor_amax ? fabsf(v) : tensor_amax;
            }
    for (int64_t r = 0; r < m; r++)
        for (int64_t b = 0; b < per_row; b++) {
            const int64_t i0 = b * g, i1 = i0 + g < k ? i0 + g : k;
            float amax = 0.0f;
            bool bad = false;
            for (int64_t i = i0; i < i1; i++) {
                float v = x[r * ldx + i];
                bad |= !isfinite(v);
                amax = fabsf(v) > amax ? fabsf(v) : amax;
            }
            if (tensor) {
                amax = tensor_amax;
                bad = tensor_bad;
            }
            if (mx) {
                const double max_elem = d->out == QJIT_DTYPE_E4M3 ? 448.0 : 6.0;
                const int emax = d->out == QJIT_DTYPE_E4M3 ? 8 : 2;
                int c;
                if (bad) {
                    c = 0xff;
                } else if (amax == 0.0f) {
                    c = 0;
                } else {
                    int e2;
                    frexp((double)amax, &e2);
                    int e = e2 - 1 - emax; /* floor(log2 amax) - emax */
                    if (d->rule == QJIT_MX_RULE_RCEIL) {
                        e = e2 - 1 - emax - 1;
                        while ((double)amax > ldexp(max_elem, e))
                            e++;
                    }
                    c = e + 127 < 0 ? 0 : e + 127 > 254 ? 254 : e + 127;
                }
                scale[r * per_row + b] = (float)c;
                for (int64_t i = i0; i < i1; i++)
                    q[r * k + i] = c == 0xff ? 0
                                             : nearest_code(d->out, ldexp((double)x[r * ldx + i],
                                                                         127 - c));
                continue;
            }
            const float qmax = d->out == QJIT_DTYPE_S8 ? 127.0f : d->out == QJIT_DTYPE_S4 ? 7.0f
                                                                                         : 448.0f;
            volatile float t = amax * clip; /* volatile: one f32 rounding per step */
            float s = bad ? NAN : t / qmax;
            if (tensor) {
                if (r == 0 && b == 0)
                    scale[0] = s;
            } else {
                scale[r * per_row + b] = s;
            }
            for (int64_t i = i0; i < i1; i++) {
                int32_t code = 0;
                if (s > 0.0f) {
                    volatile float v = x[r * ldx + i] / s;
                    if (d->out == QJIT_DTYPE_E4M3) {
                        code = nearest_code(QJIT_DTYPE_E4M3, (double)v);
                    } else {
                        float rv = rintf(v); /* RNE in the default rounding mode */
                        float lo = -qmax - 1.0f;
                        code = (int32_t)(rv < lo ? lo : rv > qmax ? qmax : rv);
                    }
                }
                q[r * k + i] = code;
            }
        }
    return 0;
}
