/*
 * test_reference.c — the CPU reference GEMM (tests/reference.c): its decoders and
 * rounding against the library's converters on every code, hand-computed cases for
 * each dtype pair and scale mode, a cross-check against a separately written
 * dequantize-then-multiply path over the whole DESIGN.md pair table with tail shapes,
 * and the f32 epilogue of integer pairs.
 */
#include "qjit.h"
#include "testlib.h"

/* tests/CMakeLists.txt builds each test_*.c with testlib.c only: the reference comes
 * in as source. */
#include "reference.c"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static uint64_t rng = 0x853c49e6748fea9bull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f; }

static bool same(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    return x == y && signbit(x) == signbit(y);
}

/* ---------------------------------------------------------------- decoders, rounding */

static void test_decoders(void)
{
    int bad = 0;
    for (uint32_t c = 0; c < 65536; c++) {
        bad += !same(ref_value(QJIT_DTYPE_F16, c), qjit_f16_to_f32((uint16_t)c));
        bad += !same(ref_value(QJIT_DTYPE_BF16, c), qjit_bf16_to_f32((uint16_t)c));
    }
    for (uint32_t c = 0; c < 256; c++) {
        bad += !same(ref_value(QJIT_DTYPE_E4M3, c), qjit_e4m3_to_f32((uint8_t)c));
        bad += !same(ref_value(QJIT_DTYPE_E5M2, c), qjit_e5m2_to_f32((uint8_t)c));
        bad += !same(ref_value(QJIT_DTYPE_E8M0, c), qjit_e8m0_to_f32((uint8_t)c));
        bad += ref_value(QJIT_DTYPE_S8, c) != (double)(int8_t)c;
    }
    for (uint32_t c = 0; c < 16; c++) {
        bad += !same(ref_value(QJIT_DTYPE_E2M1, c), qjit_e2m1_to_f32((uint8_t)c));
        int8_t s[2];
        uint8_t u[2], byte = (uint8_t)(c | c << 4);
        qjit_quant_unpack4(QJIT_DTYPE_S4, 1, 2, &byte, 2, s, 2);
        bad += ref_value(QJIT_DTYPE_S4, c) != s[0] || ref_value(QJIT_DTYPE_S4, c) != s[1];
        qjit_quant_unpack4(QJIT_DTYPE_U4, 1, 2, &byte, 2, u, 2);
        bad += ref_value(QJIT_DTYPE_U4, c) != u[0] || ref_value(QJIT_DTYPE_U4, c) != u[1];
    }
    CHECK(bad == 0, "%d codes decode differently in the reference and the library", bad);
    CHECK(ref_value(QJIT_DTYPE_E4M3, 0x7E) == 448 && isnan(ref_value(QJIT_DTYPE_E4M3, 0x7F)) &&
              ref_value(QJIT_DTYPE_E5M2, 0x7B) == 57344 && ref_value(QJIT_DTYPE_S4, 0x8) == -8 &&
              ref_value(QJIT_DTYPE_E2M1, 0xF) == -6,
          "known codes");

    /* 4-bit element addressing: row 1 of a ld-6 matrix starts at byte 3 */
    uint8_t p[6] = {0x21, 0x43, 0x65, 0x87, 0xA9, 0xCB};
    CHECK(ref_elem(QJIT_DTYPE_U4, p, 6, 0, 0) == 1 && ref_elem(QJIT_DTYPE_U4, p, 6, 0, 1) == 2 &&
              ref_elem(QJIT_DTYPE_U4, p, 6, 1, 0) == 7 && ref_elem(QJIT_DTYPE_U4, p, 6, 1, 5) == 12 &&
              ref_elem(QJIT_DTYPE_S4, p, 6, 1, 5) == -4,
          "4-bit addressing");
}

static void test_rounding(void)
{
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd();
        float x;
        memcpy(&x, &u, 4);
        if (isnan(x))
            continue;
        bad += ref_round_bits(QJIT_DTYPE_F16, x) != qjit_f16_from_f32(x);
        bad += ref_round_bits(QJIT_DTYPE_BF16, x) != qjit_bf16_from_f32(x);
        float y = ldexpf(frand(-1, 1), (int)(rnd() % 40) - 26); /* the f16 range */
        bad += ref_round_bits(QJIT_DTYPE_F16, y) != qjit_f16_from_f32(y);
    }
    CHECK(bad == 0, "%d floats round differently in the reference and the library", bad);
    /* doubles that no float holds: just above and below a tie */
    CHECK(ref_round_bits(QJIT_DTYPE_F16, 1 + 0x1p-11) == 0x3C00 &&
              ref_round_bits(QJIT_DTYPE_F16, 1 + 0x1p-11 + 0x1p-40) == 0x3C01 &&
              ref_round_bits(QJIT_DTYPE_F16, 1 + 0x1p-11 - 0x1p-40) == 0x3C00 &&
              ref_round_bits(QJIT_DTYPE_BF16, 1 + 0x1p-8 + 0x1p-45) == 0x3F81 &&
              ref_round_bits(QJIT_DTYPE_F16, 65520.0 - 0x1p-30) == 0x7BFF &&
              ref_round_bits(QJIT_DTYPE_F16, 65520.0) == 0x7C00 &&
              ref_round_bits(QJIT_DTYPE_F16, -1e300) == 0xFC00 &&
              ref_round_bits(QJIT_DTYPE_F32, 1 + 0x1p-24 + 0x1p-50) == 0x3F800001 &&
              ref_round_bits(QJIT_DTYPE_F16, 0x1p-25 + 0x1p-60) == 0x0001 &&
              ref_round_bits(QJIT_DTYPE_F16, NAN) == 0x7E00 &&
              ref_round_bits(QJIT_DTYPE_BF16, -0.0) == 0x8000,
          "double rounding cases");
    CHECK(ref_round(QJIT_DTYPE_BF16, 3.14159) == 3.140625, "bf16(pi) = %.9g",
          ref_round(QJIT_DTYPE_BF16, 3.14159));

    double x[4] = {1, 2, NAN, INFINITY}, r[4] = {1, 2, NAN, INFINITY};
    CHECK(ref_nerr(x, r, 4) == 0, "equal vectors");
    x[1] = 2.5;
    CHECK(fabs(ref_nerr(x, r, 2) - 0.5 / sqrt(5)) < 1e-15, "nerr %g", ref_nerr(x, r, 2));
    x[2] = 1;
    CHECK(isinf(ref_nerr(x, r, 4)), "NaN in ref only must fail");
    x[2] = NAN;
    x[3] = -INFINITY;
    CHECK(isinf(ref_nerr(x, r, 4)), "-inf vs inf must fail");
    double z[2] = {0, 0}, w[2] = {3, 4};
    CHECK(ref_nerr(w, z, 2) == 5, "zero reference gives the absolute norm");

    double src[4] = {1.0, 65520.0, -0.5, 1 + 0x1p-10};
    uint16_t dst[2 * 3];
    memset(dst, 0x77, sizeof dst);
    ref_store(QJIT_DTYPE_F16, src, 2, 2, dst, 3);
    CHECK(dst[0] == 0x3C00 && dst[1] == 0x7C00 && dst[2] == 0x7777 && dst[3] == 0xB800 &&
              dst[4] == 0x3C01 && dst[5] == 0x7777,
          "ref_store");
}

/* ---------------------------------------------------------------- building operands */

/* A rows×k matrix of type t whose element (r, c) is f(r, c), which must be exact in
 * t; leading dimension ld.  Encoded with the library's converters and packing. */
typedef double (*valfn)(int64_t r, int64_t c, const void *ctx);

static void *make(qjit_dtype t, int64_t rows, int64_t k, int64_t ld, valfn f, const void *ctx)
{
    size_t n = (size_t)(rows * ld);
    uint8_t *codes = calloc(n + 2, 1);
    void *out = NULL;
    if (t == QJIT_DTYPE_F16 || t == QJIT_DTYPE_BF16) {
        uint16_t *h = calloc(n + 1, 2);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < k; c++) {
                float v = (float)f(r, c, ctx);
                h[r * ld + c] = t == QJIT_DTYPE_F16 ? qjit_f16_from_f32(v) : qjit_bf16_from_f32(v);
            }
        out = h;
    } else if (t == QJIT_DTYPE_F32) {
        float *g = calloc(n + 1, 4);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < k; c++)
                g[r * ld + c] = (float)f(r, c, ctx);
        out = g;
    } else {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < k; c++) {
                double v = f(r, c, ctx);
                uint8_t code;
                switch (t) {
                case QJIT_DTYPE_S8:
                case QJIT_DTYPE_S4: code = (uint8_t)(int8_t)v; break;
                case QJIT_DTYPE_U4:
                case QJIT_DTYPE_E8M0: code = (uint8_t)v; break; /* e8m0: f gives the code */
                case QJIT_DTYPE_E4M3: code = qjit_e4m3_from_f32((float)v); break;
                case QJIT_DTYPE_E5M2: code = qjit_e5m2_from_f32((float)v); break;
                case QJIT_DTYPE_E2M1: code = qjit_e2m1_from_f32((float)v); break;
                default: code = 0;
                }
                codes[r * ld + c] = code;
            }
        if (t == QJIT_DTYPE_S4 || t == QJIT_DTYPE_U4 || t == QJIT_DTYPE_E2M1) {
            out = calloc(n / 2 + 2, 1);
            qjit_status s = qjit_quant_pack4(t, rows, k, codes, ld, out, ld);
            CHECK(s == QJIT_OK, "pack: %s", qjit_last_error());
        } else {
            out = codes;
            codes = NULL;
        }
    }
    free(codes);
    return out;
}

static double f_const(int64_t r, int64_t c, const void *ctx) { return *(const double *)ctx; }
/* ctx: a table indexed [r][c] with `cols` columns (a double array led by cols) */
static double f_table(int64_t r, int64_t c, const void *ctx)
{
    const double *t = ctx;
    return t[1 + r * (int64_t)t[0] + c];
}

static qjit_gemm_desc desc_of(const char *text)
{
    qjit_gemm_desc d;
    qjit_gemm_desc_init(&d);
    qjit_status s = qjit_gemm_desc_parse(text, &d);
    CHECK(s == QJIT_OK, "parse '%s': %s", text, qjit_last_error());
    return d;
}

static void expect(const char *what, const qjit_gemm_desc *d, const qjit_gemm_args *a,
                   const double *want)
{
    double got[64];
    int rc = ref_gemm(d, a, got);
    CHECK(rc == 0, "%s: ref_gemm failed: %s", what, ref_error());
    if (rc)
        return;
    for (int64_t i = 0; i < a->m * a->n; i++)
        CHECK(same(got[i], want[i]), "%s: D[%lld][%lld] = %.17g, want %.17g", what,
              (long long)(i / a->n), (long long)(i % a->n), got[i], want[i]);
}

/* ---------------------------------------------------------------- hand cases */
/* Shapes M×N×K = 2×3×64 unless said; values constant along k within a scale group
 * so that every answer is a few multiplications, worked out in the comments. */

static double f_am(int64_t r, int64_t c, const void *ctx) { return r + 1.0; }           /* A = m+1 */
static double f_half_split(int64_t r, int64_t c, const void *ctx) { return c < 32 ? r + 1.0 : 0.5; }
static double f_nm1(int64_t r, int64_t c, const void *ctx) { return r - 1.0; }          /* B = n-1 */
static double f_2n3(int64_t r, int64_t c, const void *ctx) { return 2.0 * r - 3; }      /* B = 2n-3 */
static double f_np1(int64_t r, int64_t c, const void *ctx) { return r + 1.0; }          /* B = n+1 */
static double f_alt(int64_t r, int64_t c, const void *ctx) { return c % 2 ? -(r + 1.0) : 2 * (r + 1.0); }
static double f_s4g(int64_t r, int64_t c, const void *ctx) { return c < 32 ? r + 1.0 : -(r + 1.0); }

static void test_hand_float(void)
{
    qjit_gemm_args a = {.m = 2, .n = 3, .k = 64, .lda = 64, .ldb = 64};
    /* f16 x f16, bias: A = m+1 for k < 32, 0.5 after; B = n-1.
     * D = (n-1)(32(m+1) + 16) + bias[n]: m=0: -48, 0, 48; m=1: -80, 0, 80. */
    qjit_gemm_desc d = desc_of("gemm a=f16 b=f16 out=f16 bias=1");
    double btab[4] = {3, 0.25, -1, 2}; /* bias, as a 1x3 table */
    a.a = make(QJIT_DTYPE_F16, 2, 64, 64, f_half_split, NULL);
    a.b = make(QJIT_DTYPE_F16, 3, 64, 64, f_nm1, NULL);
    a.bias = make(QJIT_DTYPE_F16, 1, 3, 3, f_table, btab);
    expect("f16xf16", &d, &a, (double[]){-47.75, -1, 50, -79.75, -1, 82});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.bias);

    d = desc_of("gemm a=bf16 b=bf16 out=bf16 bias=1");
    a.a = make(QJIT_DTYPE_BF16, 2, 64, 64, f_half_split, NULL);
    a.b = make(QJIT_DTYPE_BF16, 3, 64, 64, f_nm1, NULL);
    a.bias = make(QJIT_DTYPE_BF16, 1, 3, 3, f_table, btab);
    expect("bf16xbf16", &d, &a, (double[]){-47.75, -1, 50, -79.75, -1, 82});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.bias);

    /* f16 x s4 group:32, f16 scales: A = m+1; q = n+1 (k < 32), -(n+1) after;
     * s = 0.5, 0.25.  D = (m+1)(32(n+1)·0.5 − 32(n+1)·0.25) = 8(m+1)(n+1). */
    d = desc_of("gemm a=f16 b=s4 sb=group:32 gs=f16 out=f32");
    double gs[1 + 3 * 2] = {2, 0.5, 0.25, 0.5, 0.25, 0.5, 0.25};
    a.a = make(QJIT_DTYPE_F16, 2, 64, 64, f_am, NULL);
    a.b = make(QJIT_DTYPE_S4, 3, 64, 64, f_s4g, NULL);
    a.scale_b = make(QJIT_DTYPE_F16, 3, 2, 2, f_table, gs);
    expect("f16xs4 group", &d, &a, (double[]){8, 16, 24, 16, 32, 48});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_b);

    /* bf16 x u4 group:64 with zeros, bf16 scales, K = 128: A = m+1; q = 9 then 3;
     * z = 8 then n; s = 2 then 0.5.  D = (m+1)(64·1·2 + 64(3−n)·0.5) =
     * (m+1)(128 + 32(3−n)): 224, 192, 160 and twice that. */
    a.k = a.lda = a.ldb = 128;
    d = desc_of("gemm a=bf16 b=u4 sb=group:64 gs=bf16 zeros=1 out=bf16");
    double q2[1 + 3 * 128], z2[1 + 3 * 2] = {2, 8, 0, 8, 1, 8, 2}, s2[1 + 3 * 2] = {2, 2, .5, 2, .5, 2, .5};
    q2[0] = 128;
    for (int i = 0; i < 3 * 128; i++)
        q2[1 + i] = i % 128 < 64 ? 9 : 3;
    a.a = make(QJIT_DTYPE_BF16, 2, 128, 128, f_am, NULL);
    a.b = make(QJIT_DTYPE_U4, 3, 128, 128, f_table, q2);
    a.scale_b = make(QJIT_DTYPE_BF16, 3, 2, 2, f_table, s2);
    a.zeros_b = make(QJIT_DTYPE_BF16, 3, 2, 2, f_table, z2);
    expect("bf16xu4 group zeros", &d, &a, (double[]){224, 192, 160, 448, 384, 320});
    /* the same without zeros: (m+1)(64·9·2 + 64·3·0.5) = 1248 (m+1) */
    d.zeros = 0;
    expect("bf16xu4 group", &d, &a, (double[]){1248, 1248, 1248, 2496, 2496, 2496});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_b);
    free((void *)a.zeros_b);
    a.zeros_b = NULL;
    a.k = a.lda = a.ldb = 64;

    /* f16 x s8 col: A = m+1; B = 2n−3; s = 0.5(n+1).  D = 64(m+1)(2n−3)·0.5(n+1):
     * −96, −64, 96 and twice that. */
    d = desc_of("gemm a=f16 b=s8 sb=col out=f16");
    float col[3] = {0.5f, 1.0f, 1.5f};
    a.a = make(QJIT_DTYPE_F16, 2, 64, 64, f_am, NULL);
    a.b = make(QJIT_DTYPE_S8, 3, 64, 64, f_2n3, NULL);
    a.scale_b = col;
    expect("f16xs8 col", &d, &a, (double[]){-96, -64, 96, -192, -128, 192});
    free((void *)a.a);
    free((void *)a.b);
}

static void test_hand_int(void)
{
    qjit_gemm_args a = {.m = 2, .n = 3, .k = 64, .lda = 64, .ldb = 64};
    /* s8 x s8 tensor x col: A alternates 2(m+1), −(m+1): Σ = 32(m+1); B = n+1;
     * sa = 0.5, sb = 1, 0.25, 2.  D = 16(m+1)(n+1)·sb: 16, 8, 96; 32, 16, 192. */
    qjit_gemm_desc d = desc_of("gemm a=s8 b=s8 sa=tensor sb=col out=bf16");
    float sa = 0.5f, sb[3] = {1, 0.25f, 2};
    a.a = make(QJIT_DTYPE_S8, 2, 64, 64, f_alt, NULL);
    a.b = make(QJIT_DTYPE_S8, 3, 64, 64, f_np1, NULL);
    a.scale_a = &sa;
    a.scale_b = sb;
    expect("s8xs8 tensor col", &d, &a, (double[]){16, 8, 96, 32, 16, 192});
    free((void *)a.a);

    /* s8 x s8 row x tensor: A = 1 -> Σ = 64(n+1); sa = 1, 3; sb = 0.125.
     * D = 8(n+1)·sa: 8, 16, 24; 24, 48, 72. */
    d = desc_of("gemm a=s8 b=s8 sa=row sb=tensor out=f32");
    double one = 1;
    float rows[2] = {1, 3}, st = 0.125f;
    a.a = make(QJIT_DTYPE_S8, 2, 64, 64, f_const, &one);
    a.scale_a = rows;
    a.scale_b = &st;
    expect("s8xs8 row tensor", &d, &a, (double[]){8, 16, 24, 24, 48, 72});
    free((void *)a.a);
    free((void *)a.b);

    /* s8 x s4 row x group:32 f32: A = 2; q = 7 then −8; s = n+1 then 0.5; sa = 1, 0.5.
     * D = sa(2·7·32(n+1) − 2·8·32·0.5) = sa(448(n+1) − 256): 192, 640, 1088; half. */
    d = desc_of("gemm a=s8 b=s4 sa=row sb=group:32 gs=f32 out=f32");
    double two = 2, q[1 + 3 * 64];
    q[0] = 64;
    for (int i = 0; i < 3 * 64; i++)
        q[1 + i] = i % 64 < 32 ? 7 : -8;
    float gsc[6] = {1, 0.5f, 2, 0.5f, 3, 0.5f}, ra[2] = {1, 0.5f};
    a.a = make(QJIT_DTYPE_S8, 2, 64, 64, f_const, &two);
    a.b = make(QJIT_DTYPE_S4, 3, 64, 64, f_table, q);
    a.scale_a = ra;
    a.scale_b = gsc;
    expect("s8xs4 row group", &d, &a, (double[]){192, 640, 1088, 96, 320, 544});
    /* and row x col on the same data: Σ = 2·32·7 − 2·32·8 = −64; D = −64 sa sb */
    d = desc_of("gemm a=s8 b=s4 sa=row sb=col out=f32");
    float cb[3] = {1, 2, 4};
    a.scale_b = cb;
    expect("s8xs4 row col", &d, &a, (double[]){-64, -128, -256, -32, -64, -128});
    free((void *)a.a);
    free((void *)a.b);
}

static void test_hand_fp8_mx(void)
{
    qjit_gemm_args a = {.m = 2, .n = 3, .k = 64, .lda = 64, .ldb = 64};
    /* e5m2 x e4m3 tensor x tensor: A = 1.5, B = −2, sa = 0.5, sb = 4: D = 64·(−3)·2 */
    qjit_gemm_desc d = desc_of("gemm a=e5m2 b=e4m3 sa=tensor sb=tensor out=bf16");
    double v15 = 1.5, vm2 = -2, v3 = 3, v1 = 1;
    float s05 = 0.5f, s4 = 4;
    a.a = make(QJIT_DTYPE_E5M2, 2, 64, 64, f_const, &v15);
    a.b = make(QJIT_DTYPE_E4M3, 3, 64, 64, f_const, &vm2);
    a.scale_a = &s05;
    a.scale_b = &s4;
    expect("e5m2xe4m3 tensor", &d, &a, (double[]){-384, -384, -384, -384, -384, -384});
    free((void *)a.a);
    free((void *)a.b);

    /* e4m3 x e4m3 row x col: A = 3, B = 1: D = 192 sa sb */
    d = desc_of("gemm a=e4m3 b=e4m3 sa=row sb=col out=f16");
    float ra[2] = {1, 2}, cb[3] = {1, 0.5f, 0.25f};
    a.a = make(QJIT_DTYPE_E4M3, 2, 64, 64, f_const, &v3);
    a.b = make(QJIT_DTYPE_E4M3, 3, 64, 64, f_const, &v1);
    a.scale_a = ra;
    a.scale_b = cb;
    expect("e4m3 row col", &d, &a, (double[]){192, 96, 48, 384, 192, 96});
    free((void *)a.a);
    free((void *)a.b);

    /* e4m3 x e4m3 block, M = 1, N = 3, K = 200 (a partial second block): A = 1,
     * B = 0.5(n+1); sa = 2, 4; sb = 0.5, 3 (one block row: N < 128).
     * D = (n+1)(128·0.5·2·0.5 + 72·0.5·4·3) = 496(n+1). */
    qjit_gemm_args b = {.m = 1, .n = 3, .k = 200, .lda = 208, .ldb = 200};
    d = desc_of("gemm a=e4m3 b=e4m3 sa=block sb=block out=f32");
    double bt[1 + 3 * 200];
    bt[0] = 200;
    for (int i = 0; i < 600; i++)
        bt[1 + i] = 0.5 * (i / 200 + 1);
    float sab[2] = {2, 4}, sbb[2] = {0.5f, 3};
    b.a = make(QJIT_DTYPE_E4M3, 1, 200, 208, f_const, &v1);
    b.b = make(QJIT_DTYPE_E4M3, 3, 200, 200, f_table, bt);
    b.scale_a = sab;
    b.scale_b = sbb;
    expect("e4m3 block K=200", &d, &b, (double[]){496, 992, 1488});
    free((void *)b.a);
    free((void *)b.b);

    /* MXFP8: A = 1, B = 2; A codes 127, 128 (1, 2) per block; B codes 127−n, 127.
     * D = 32·2·2^−n + 32·2·2 = 64·2^−n + 128: 192, 160, 144. */
    d = desc_of("gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16");
    double sat[1 + 4] = {2, 127, 128, 127, 128}, sbt[1 + 6] = {2, 127, 127, 126, 127, 125, 127};
    a.a = make(QJIT_DTYPE_E4M3, 2, 64, 64, f_const, &v1);
    a.b = make(QJIT_DTYPE_E4M3, 3, 64, 64, f_const, &(double){2});
    a.scale_a = make(QJIT_DTYPE_E8M0, 2, 2, 2, f_table, sat);
    a.scale_b = make(QJIT_DTYPE_E8M0, 3, 2, 2, f_table, sbt);
    expect("mxfp8", &d, &a, (double[]){192, 160, 144, 192, 160, 144});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_a);
    free((void *)a.scale_b);

    /* MXFP4: A = 1.5, B = −4; A codes 126, 127 (row 1 block 1: 0xFF, NaN); B 127, 129.
     * D = 32(−6)·0.5·1 + 32(−6)·1·4 = −96 − 768 = −864; row 1 NaN. */
    d = desc_of("gemm a=e2m1 b=e2m1 sa=mx sb=mx out=f32");
    double sa4[1 + 4] = {2, 126, 127, 126, 255}, sb4[1 + 6] = {2, 127, 129, 127, 129, 127, 129};
    a.a = make(QJIT_DTYPE_E2M1, 2, 64, 64, f_const, &v15);
    a.b = make(QJIT_DTYPE_E2M1, 3, 64, 64, f_const, &(double){-4});
    a.scale_a = make(QJIT_DTYPE_E8M0, 2, 2, 2, f_table, sa4);
    a.scale_b = make(QJIT_DTYPE_E8M0, 3, 2, 2, f_table, sb4);
    expect("mxfp4", &d, &a, (double[]){-864, -864, -864, NAN, NAN, NAN});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_a);

    /* f16 x e2m1 mx: A = 0.25(m+1); B = 6; B codes 128, 126 (2, 0.5):
     * D = (m+1)·0.25·6·(32·2 + 32·0.5) = 120(m+1). */
    d = desc_of("gemm a=f16 b=e2m1 sb=mx out=f16");
    double sbm[1 + 6] = {2, 128, 126, 128, 126, 128, 126}, q25[1 + 2 * 64];
    q25[0] = 64;
    for (int i = 0; i < 128; i++)
        q25[1 + i] = 0.25 * (i / 64 + 1);
    a.a = make(QJIT_DTYPE_F16, 2, 64, 64, f_table, q25);
    a.b = make(QJIT_DTYPE_E2M1, 3, 64, 64, f_const, &(double){6});
    a.scale_a = NULL;
    free((void *)a.scale_b);
    a.scale_b = make(QJIT_DTYPE_E8M0, 3, 2, 2, f_table, sbm);
    expect("f16 x mxfp4", &d, &a, (double[]){120, 120, 120, 240, 240, 240});
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_b);
}

static void test_rejects(void)
{
    qjit_gemm_args a = {.m = 1, .n = 1, .k = 64, .lda = 64, .ldb = 64};
    uint8_t buf[256] = {0};
    float s = 1;
    a.a = a.b = buf;
    a.scale_a = a.scale_b = &s;
    double out[1];
    qjit_gemm_desc d = desc_of("gemm a=s8 b=s8 sa=col sb=col out=f32");
    CHECK(ref_gemm(&d, &a, out) == -1 && strstr(ref_error(), "A"), "col on A: %s", ref_error());
    d = desc_of("gemm a=s8 b=s8 sa=row sb=row out=f32");
    CHECK(ref_gemm(&d, &a, out) == -1, "row on B accepted");
    d = desc_of("gemm a=f16 b=s4 sb=group:128 gs=f16 out=f16");
    CHECK(ref_gemm(&d, &a, out) == -1 && strstr(ref_error(), "multiple"), "K 64 g 128: %s",
          ref_error());
    d = desc_of("gemm a=s8 b=s8 sa=tensor sb=col out=f32");
    a.scale_b = NULL;
    CHECK(ref_gemm(&d, &a, out) == -1, "NULL scale accepted");
    d = desc_of("gemm a=f16 b=f16 out=f16");
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_MUL_ADD, out) == -1, "f16 in the int epilogue");
    d = desc_of("gemm a=s8 b=s4 sa=row sb=group:32 gs=f32 out=f32");
    a.scale_b = &s;
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_MUL_ADD, out) == -1, "group in the int epilogue");
}

/* ---------------------------------------------------------------- int epilogue */

static void test_int_epilogue(void)
{
    /* acc = 2^24 + 1 (1040·127·127 + 127·24 + 3·3), sb = 3: the exact result
     * 50331651 rounds to 50331652 in f32, the epilogue's (float)acc = 2^24 gives
     * 50331648. */
    qjit_gemm_args a = {.m = 1, .n = 1, .k = 1042, .lda = 1042, .ldb = 1042};
    double at[1 + 1042], bt[1 + 1042];
    at[0] = bt[0] = 1042;
    for (int i = 0; i < 1040; i++)
        at[1 + i] = bt[1 + i] = 127;
    at[1 + 1040] = 127, bt[1 + 1040] = 24, at[1 + 1041] = 3, bt[1 + 1041] = 3;
    a.a = make(QJIT_DTYPE_S8, 1, 1042, 1042, f_table, at);
    a.b = make(QJIT_DTYPE_S8, 1, 1042, 1042, f_table, bt);
    float one = 1, three = 3;
    a.scale_a = &one;
    a.scale_b = &three;
    qjit_gemm_desc d = desc_of("gemm a=s8 b=s8 sa=tensor sb=col out=f32");
    double exact, epi;
    CHECK(ref_gemm(&d, &a, &exact) == 0 && exact == 50331651.0, "exact %.17g", exact);
    CHECK(ref_round(QJIT_DTYPE_F32, exact) == 50331652.0, "exact rounded");
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_MUL_ADD, &epi) == 0 && epi == 50331648.0,
          "epilogue %.17g: %s", epi, ref_error());
    free((void *)a.a);
    free((void *)a.b);

    /* acc = 4097 (32·127 + 33), sb = 1 + 2^−12, bias −4098: acc·sb = 4098 + 2^−12 is a
     * tie in f32 (spacing 2^−11) that goes to 4098, so mul-then-add gives 0; the FMA
     * keeps 2^−12, as does the exact sum. */
    a.k = a.lda = a.ldb = 33;
    double a2[1 + 33], b1 = 1;
    a2[0] = 33;
    for (int i = 0; i < 32; i++)
        a2[1 + i] = 127;
    a2[1 + 32] = 33;
    a.a = make(QJIT_DTYPE_S8, 1, 33, 33, f_table, a2);
    a.b = make(QJIT_DTYPE_S8, 1, 33, 33, f_const, &b1);
    float sb = 1 + 0x1p-12f, bias = -4098;
    a.scale_b = &sb;
    a.bias = &bias;
    d = desc_of("gemm a=s8 b=s8 sa=tensor sb=col out=f32 bias=1");
    double fma_out, muladd;
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_MUL_ADD, &muladd) == 0 && muladd == 0,
          "mul-add %.17g", muladd);
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_FMA, &fma_out) == 0 && fma_out == 0x1p-12,
          "fma %.17g", fma_out);
    CHECK(ref_gemm(&d, &a, &exact) == 0 && exact == 0x1p-12, "exact %.17g", exact);
    /* out = bf16: the f32 result 2^-12 rounds to itself; 4097·(1+2^-12) without bias
     * rounds to 4098 (f32) then 4096 (bf16, spacing 32 at 4096) */
    d.out = QJIT_DTYPE_BF16;
    d.bias = 0;
    CHECK(ref_gemm_int_f32(&d, &a, REF_EPI_MUL_ADD, &muladd) == 0 && muladd == 4096,
          "bf16 out %.17g", muladd);
    free((void *)a.a);
    free((void *)a.b);

    /* random s8 x s4 row x col: the epilogue stays within f32 rounding of the exact */
    qjit_gemm_args r = {.m = 4, .n = 7, .k = 96, .lda = 96, .ldb = 96};
    double ta[1 + 4 * 96], tb[1 + 7 * 96], ex[28], ep[28];
    ta[0] = tb[0] = 96;
    for (int i = 0; i < 4 * 96; i++)
        ta[1 + i] = (int)(rnd() % 256) - 128;
    for (int i = 0; i < 7 * 96; i++)
        tb[1 + i] = (int)(rnd() % 16) - 8;
    float ra[4], cb[7];
    for (int i = 0; i < 4; i++)
        ra[i] = frand(0.001f, 0.01f);
    for (int i = 0; i < 7; i++)
        cb[i] = frand(0.01f, 0.1f);
    r.a = make(QJIT_DTYPE_S8, 4, 96, 96, f_table, ta);
    r.b = make(QJIT_DTYPE_S4, 7, 96, 96, f_table, tb);
    r.scale_a = ra;
    r.scale_b = cb;
    d = desc_of("gemm a=s8 b=s4 sa=row sb=col out=f32");
    CHECK(ref_gemm(&d, &r, ex) == 0 && ref_gemm_int_f32(&d, &r, REF_EPI_FMA, ep) == 0, "random");
    int bad = 0;
    for (int i = 0; i < 28; i++)
        bad += fabs(ep[i] - ex[i]) > 3 * 0x1p-24 * fabs(ex[i]);
    CHECK(bad == 0, "%d epilogue values beyond 3 f32 roundings", bad);
    free((void *)r.a);
    free((void *)r.b);
}

/* ---------------------------------------------------------------- cross-check */
/* A second, naive path: dequantize both operands with the library's decoders and a
 * per-element scale lookup, then a plain triple loop. */

static double naive_raw(qjit_dtype t, const void *p, int64_t ld, int64_t r, int64_t c,
                        int64_t k)
{
    switch (t) {
    case QJIT_DTYPE_F16: return qjit_f16_to_f32(((const uint16_t *)p)[r * ld + c]);
    case QJIT_DTYPE_BF16: return qjit_bf16_to_f32(((const uint16_t *)p)[r * ld + c]);
    case QJIT_DTYPE_F32: return ((const float *)p)[r * ld + c];
    case QJIT_DTYPE_S8: return ((const int8_t *)p)[r * ld + c];
    case QJIT_DTYPE_E4M3: return qjit_e4m3_to_f32(((const uint8_t *)p)[r * ld + c]);
    case QJIT_DTYPE_E5M2: return qjit_e5m2_to_f32(((const uint8_t *)p)[r * ld + c]);
    default: break;
    }
    /* 4-bit: unpack this row with the library */
    uint8_t row[1024];
    qjit_quant_unpack4(t, 1, k + (k % 2), (const uint8_t *)p + r * ld / 2, ld, row, k + 1);
    if (t == QJIT_DTYPE_S4)
        return (int8_t)row[c];
    if (t == QJIT_DTYPE_U4)
        return row[c];
    return qjit_e2m1_to_f32(row[c]);
}

static double naive_scale(qjit_scale_mode mode, const qjit_gemm_desc *d, const void *s,
                          bool is_b, int64_t r, int64_t c, int64_t K)
{
    const float *f = s;
    int64_t nb128 = (K + 127) / 128, nb32 = (K + 31) / 32;
    switch (mode) {
    case QJIT_SCALE_NONE: return 1;
    case QJIT_SCALE_TENSOR: return f[0];
    case QJIT_SCALE_ROW:
    case QJIT_SCALE_COL: return f[r];
    case QJIT_SCALE_GROUP: {
        int64_t i = r * (K / d->group) + c / d->group;
        return naive_raw(d->group_scale, s, 0, 0, i, 0);
    }
    case QJIT_SCALE_BLOCK: return is_b ? f[(r / 128) * nb128 + c / 128] : f[r * nb128 + c / 128];
    case QJIT_SCALE_MX: return qjit_e8m0_to_f32(((const uint8_t *)s)[r * nb32 + c / 32]);
    default: return NAN;
    }
}

static void naive_gemm(const qjit_gemm_desc *d, const qjit_gemm_args *a, double *out)
{
    int64_t M = a->m, N = a->n, K = a->k;
    double *A = malloc(sizeof(double) * (size_t)(M * K)), *B = malloc(sizeof(double) * (size_t)(N * K));
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            A[m * K + k] = naive_raw(d->a, a->a, a->lda, m, k, K) *
                           naive_scale(d->sa, d, a->scale_a, false, m, k, K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double z = d->zeros ? naive_raw(d->group_scale, a->zeros_b, 0, 0,
                                            n * (K / d->group) + k / d->group, 0)
                                : 0;
            B[n * K + k] = (naive_raw(d->b, a->b, a->ldb, n, k, K) - z) *
                           naive_scale(d->sb, d, a->scale_b, true, n, k, K);
        }
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += A[m * K + k] * B[n * K + k];
            out[m * N + n] = s + (d->bias ? naive_raw(d->out, a->bias, 0, 0, n, 0) : 0);
        }
    free(A);
    free(B);
}

/* Random element values (exact in t) and random scales of each mode. */
static double f_rand_elem(int64_t r, int64_t c, const void *ctx)
{
    qjit_dtype t = *(const qjit_dtype *)ctx;
    switch (t) {
    case QJIT_DTYPE_S8: return (int)(rnd() % 256) - 128;
    case QJIT_DTYPE_S4: return (int)(rnd() % 16) - 8;
    case QJIT_DTYPE_U4: return rnd() % 16;
    case QJIT_DTYPE_E2M1: return qjit_e2m1_to_f32((uint8_t)(rnd() % 16));
    case QJIT_DTYPE_E4M3: return qjit_e4m3_to_f32(qjit_e4m3_from_f32(frand(-300, 300)));
    case QJIT_DTYPE_E5M2: return qjit_e5m2_to_f32(qjit_e5m2_from_f32(frand(-300, 300)));
    default: return frand(-2, 2); /* rounded by make() */
    }
}
static double f_rand_scale(int64_t r, int64_t c, const void *ctx) { return frand(0.01f, 1); }
static double f_rand_e8m0(int64_t r, int64_t c, const void *ctx) { return 120 + rnd() % 14; }
static double f_rand_zero(int64_t r, int64_t c, const void *ctx) { return rnd() % 16; }

static void *make_scale(qjit_scale_mode mode, const qjit_gemm_desc *d, bool is_b, int64_t rows,
                        int64_t K)
{
    switch (mode) {
    case QJIT_SCALE_NONE: return NULL;
    case QJIT_SCALE_TENSOR: return make(QJIT_DTYPE_F32, 1, 1, 1, f_rand_scale, NULL);
    case QJIT_SCALE_ROW:
    case QJIT_SCALE_COL: return make(QJIT_DTYPE_F32, 1, rows, rows, f_rand_scale, NULL);
    case QJIT_SCALE_GROUP:
        return make(d->group_scale, rows, K / d->group, K / d->group, f_rand_scale, NULL);
    case QJIT_SCALE_BLOCK: {
        int64_t r = is_b ? (rows + 127) / 128 : rows, c = (K + 127) / 128;
        return make(QJIT_DTYPE_F32, r, c, c, f_rand_scale, NULL);
    }
    case QJIT_SCALE_MX: return make(QJIT_DTYPE_E8M0, rows, (K + 31) / 32, (K + 31) / 32, f_rand_e8m0, NULL);
    default: return NULL;
    }
}

static void cross_check(const char *text, int64_t M, int64_t N, int64_t K)
{
    qjit_gemm_desc d = desc_of(text);
    qjit_gemm_args a = {.m = M, .n = N, .k = K, .lda = K + 2, .ldb = K + 4};
    a.a = make(d.a, M, K, a.lda, f_rand_elem, &d.a);
    a.b = make(d.b, N, K, a.ldb, f_rand_elem, &d.b);
    a.scale_a = make_scale(d.sa, &d, false, M, K);
    a.scale_b = make_scale(d.sb, &d, true, N, K);
    if (d.zeros)
        a.zeros_b = make(d.group_scale, N, K / d.group, K / d.group, f_rand_zero, NULL);
    if (d.bias)
        a.bias = make(d.out, 1, N, N, f_rand_scale, NULL);
    double *ref = malloc(sizeof(double) * (size_t)(M * N)), *nv = malloc(sizeof(double) * (size_t)(M * N));
    int rc = ref_gemm(&d, &a, ref);
    CHECK(rc == 0, "%s: %s", text, ref_error());
    if (rc == 0) {
        naive_gemm(&d, &a, nv);
        double e = ref_nerr(nv, ref, (size_t)(M * N)), norm = 0;
        for (int64_t i = 0; i < M * N; i++)
            norm += ref[i] * ref[i];
        CHECK(e <= 1e-13 && norm > 0, "%s %lldx%lldx%lld: naive vs reference error %g (norm %g)",
              text, (long long)M, (long long)N, (long long)K, e, norm);
    }
    free((void *)a.a);
    free((void *)a.b);
    free((void *)a.scale_a);
    free((void *)a.scale_b);
    free((void *)a.zeros_b);
    free((void *)a.bias);
    free(ref);
    free(nv);
}

static void test_cross(void)
{
    static const char *const cases[] = {
        "gemm a=f16 b=f16 out=f16",
        "gemm a=f16 b=f16 out=f32 bias=1",
        "gemm a=bf16 b=bf16 out=bf16 bias=1",
        "gemm a=f16 b=s4 sb=col out=f16",
        "gemm a=bf16 b=s4 sb=group:32 gs=bf16 out=bf16",
        "gemm a=f16 b=s4 sb=group:128 gs=f16 out=f16 bias=1",
        "gemm a=f16 b=u4 sb=col out=f16",
        "gemm a=f16 b=u4 sb=group:64 gs=f16 zeros=1 out=f16",
        "gemm a=bf16 b=u4 sb=group:256 gs=f32 zeros=1 out=f32",
        "gemm a=bf16 b=u4 sb=group:128 gs=bf16 out=bf16",
        "gemm a=f16 b=s8 sb=col out=f16",
        "gemm a=bf16 b=s8 sb=col out=bf16 bias=1",
        "gemm a=s8 b=s8 sa=tensor sb=tensor out=f32",
        "gemm a=s8 b=s8 sa=row sb=col out=bf16 bias=1",
        "gemm a=s8 b=s8 sa=tensor sb=col out=f16",
        "gemm a=s8 b=s4 sa=row sb=col out=bf16",
        "gemm a=s8 b=s4 sa=row sb=group:128 gs=f16 out=f16",
        "gemm a=e4m3 b=e4m3 sa=tensor sb=tensor out=bf16",
        "gemm a=e5m2 b=e4m3 sa=row sb=col out=f16",
        "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16",
        "gemm a=e5m2 b=e4m3 sa=block sb=block out=f32 bias=1",
        "gemm a=e4m3 b=e4m3 sa=row sb=block out=bf16",
        "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16",
        "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=f32",
        "gemm a=f16 b=e2m1 sb=mx out=f16",
        "gemm a=bf16 b=e2m1 sb=mx out=bf16 bias=1",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_gemm_desc d = desc_of(cases[i]);
        /* K: three groups; 200 for block (a partial 128-block); 160 for mx (5 blocks) */
        int64_t K = d.sb == QJIT_SCALE_GROUP ? 3 * d.group
                    : d.sa == QJIT_SCALE_BLOCK || d.sb == QJIT_SCALE_BLOCK ? 200
                    : d.sa == QJIT_SCALE_MX || d.sb == QJIT_SCALE_MX       ? 160
                                                                           : 70;
        cross_check(cases[i], 1, 3, K);  /* M = 1, odd N */
        cross_check(cases[i], 5, 130, K); /* a second block row of B, N not even */
    }
}

/* ---------------------------------------------------------------- quantization */
/* ref_quant against the library's host functions, two separate writings of one rule:
 * MX against qjit_quant_mx (both rules, e4m3 and e2m1, with zeros, NaN and infinities),
 * and the e4m3 codes of row scales against qjit_e4m3_from_f32; and hand cases. */
static void test_quant(void)
{
    const int64_t m = 7, k = 256, ldx = 260;
    float *x = malloc((size_t)(m * ldx) * sizeof *x);
    int32_t *q = malloc((size_t)(m * k) * sizeof *q);
    float *s = malloc((size_t)(m * k) * sizeof *s);
    uint8_t *hq = malloc((size_t)(m * k)), hs[7 * 8];
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = frand(-1, 1) * (float)(1 << (rnd() % 12)) / 64.0f;
    for (int64_t i = 0; i < 32; i++)
        x[1 * ldx + i] = 0.0f;       /* a zero block */
    x[2 * ldx + 40] = NAN;           /* a NaN block */
    x[3 * ldx + 70] = -INFINITY;     /* an infinite block */
    x[4 * ldx + 3] = -0.0f;
    qjit_dtype elems[] = {QJIT_DTYPE_E4M3, QJIT_DTYPE_E2M1};
    long diff = 0, checked = 0;
    for (int e = 0; e < 2; e++)
        for (int rule = 0; rule < 2; rule++) {
            qjit_quant_desc d = {QJIT_DTYPE_F32, elems[e], QJIT_SCALE_MX, (qjit_mx_rule)rule,
                                 QJIT_ARCH_SM90A};
            CHECK(ref_quant(&d, x, m, k, ldx, 0.0f, q, s) == 0, "ref_quant: %s", ref_error());
            CHECK_OK(qjit_quant_mx(elems[e], (qjit_mx_rule)rule, m, k, x, ldx, hq, k, hs));
            for (int64_t r = 0; r < m; r++) {
                for (int64_t b = 0; b < k / 32; b++)
                    diff += (int)s[r * (k / 32) + b] != hs[r * (k / 32) + b];
                for (int64_t i = 0; i < k; i++) {
                    uint32_t h = e == 0 ? hq[r * k + i]
                                        : (i % 2 ? hq[r * (k / 2) + i / 2] >> 4
                                                 : hq[r * (k / 2) + i / 2] & 15u);
                    diff += (uint32_t)q[r * k + i] != h;
                    checked++;
                }
            }
        }
    CHECK(diff == 0 && checked == 4 * m * k, "MX: %ld of %ld differ from qjit_quant_mx", diff,
          checked);
    /* row scales, e4m3: scale = amax/448 in f32, codes qjit_e4m3_from_f32(x / s) */
    qjit_quant_desc d = {QJIT_DTYPE_F32, QJIT_DTYPE_E4M3, QJIT_SCALE_ROW, QJIT_MX_RULE_FLOOR,
                         QJIT_ARCH_SM90A};
    CHECK(ref_quant(&d, x, m, k, ldx, 0.0f, q, s) == 0, "%s", ref_error());
    diff = 0;
    for (int64_t r = 4; r < m; r++) { /* the finite rows */
        float amax = 0;
        for (int64_t i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(x[r * ldx + i]));
        volatile float sc = amax / 448.0f;
        diff += !(s[r] == sc);
        for (int64_t i = 0; i < k; i++) {
            volatile float v = x[r * ldx + i] / sc;
            diff += (uint32_t)q[r * k + i] != qjit_e4m3_from_f32(v);
        }
    }
    CHECK(diff == 0, "e4m3 rows: %ld differ from qjit_e4m3_from_f32", diff);
    CHECK(isnan(s[2]) && isnan(s[3]) && q[2 * k + 1] == 0, "non-finite rows: scale %g, %g",
          (double)s[2], (double)s[3]);
    /* hand cases, s8 row with clip: x = {1, -2, 0.5, 4}, clip 0.5 -> s = 2/127 */
    float hx[4] = {1.0f, -2.0f, 0.5f, 4.0f};
    int32_t hq8[4];
    float hs8;
    d = (qjit_quant_desc){QJIT_DTYPE_F32, QJIT_DTYPE_S8, QJIT_SCALE_ROW, QJIT_MX_RULE_FLOOR,
                          QJIT_ARCH_SM80};
    CHECK(ref_quant(&d, hx, 1, 4, 4, 0.5f, hq8, &hs8) == 0, "%s", ref_error());
    CHECK(hs8 == 2.0f / 127.0f && hq8[0] == 64 && hq8[1] == -127 && hq8[2] == 32 &&
              hq8[3] == 127,
          "s8 clip: s %.9g q %d %d %d %d", (double)hs8, hq8[0], hq8[1], hq8[2], hq8[3]);
    /* s4 tensor: x = {7, -7, 3.5, 0.5} -> s = 1; 3.5 ties to 4, 0.5 ties to 0 */
    float tx[4] = {7.0f, -7.0f, 3.5f, 0.5f};
    d.out = QJIT_DTYPE_S4;
    d.scale = QJIT_SCALE_TENSOR;
    CHECK(ref_quant(&d, tx, 2, 2, 2, 0.0f, hq8, &hs8) == 0, "%s", ref_error());
    CHECK(hs8 == 1.0f && hq8[0] == 7 && hq8[1] == -7 && hq8[2] == 4 && hq8[3] == 0,
          "s4 tensor: s %g q %d %d %d %d", (double)hs8, hq8[0], hq8[1], hq8[2], hq8[3]);
    free(x);
    free(q);
    free(s);
    free(hq);
}

int main(void)
{
    test_decoders();
    test_rounding();
    test_hand_float();
    test_hand_int();
    test_hand_fp8_mx();
    test_rejects();
    test_int_epilogue();
    test_cross();
    test_quant();
    return tl_finish("test_reference");
}
