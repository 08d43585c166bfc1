/*
 * test_quant.c — host packing and quantization (src/quant.c): 4-bit pack/unpack round
 * trips and rejections that write nothing, number conversions checked against
 * hand-written values and exhaustively, int4 group quantization, e8m0 rules and MX.
 */
#include "qjit.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f; }

static bool contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Same value, NaN equal to NaN, -0 different from +0. */
static bool same(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    return x == y && signbit(x) == signbit(y);
}

/* ---------------------------------------------------------------- packing */

static void test_pack_known(void)
{
    /* 3 rows (odd), k = 6, source ld 8, packed ld 10 elements = 5 bytes */
    int8_t src[3 * 8];
    memset(src, 0x55, sizeof src); /* padding: out of range, must not be read */
    const int8_t rows[3][6] = {{-8, 7, -1, 0, 1, -2}, {0, 0, 3, -3, -4, 4}, {7, 7, -8, -8, 5, -5}};
    for (int r = 0; r < 3; r++)
        memcpy(src + r * 8, rows[r], 6);
    uint8_t dst[3 * 5];
    memset(dst, 0xA5, sizeof dst);
    CHECK_OK(qjit_quant_pack4(QJIT_DTYPE_S4, 3, 6, src, 8, dst, 10));
    const uint8_t want[3][3] = {{0x78, 0x0F, 0xE1}, {0x00, 0xD3, 0x4C}, {0x77, 0x88, 0xB5}};
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 3; i++)
            CHECK(dst[r * 5 + i] == want[r][i], "row %d byte %d = 0x%02x, want 0x%02x", r, i,
                  dst[r * 5 + i], want[r][i]);
        CHECK(dst[r * 5 + 3] == 0xA5 && dst[r * 5 + 4] == 0xA5, "row %d padding written", r);
    }
    int8_t back[3 * 7];
    memset(back, 0x55, sizeof back);
    CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_S4, 3, 6, dst, 10, back, 7));
    for (int r = 0; r < 3; r++) {
        CHECK(memcmp(back + r * 7, rows[r], 6) == 0, "s4 row %d does not round-trip", r);
        CHECK(back[r * 7 + 6] == 0x55, "unpack wrote padding of row %d", r);
    }

    /* u4 and e2m1: nibble i of a byte pair in order */
    uint8_t u[4] = {0, 15, 9, 6};
    uint8_t pu[2];
    CHECK_OK(qjit_quant_pack4(QJIT_DTYPE_U4, 1, 4, u, 4, pu, 4));
    CHECK(pu[0] == 0xF0 && pu[1] == 0x69, "u4 bytes 0x%02x 0x%02x", pu[0], pu[1]);
    CHECK_OK(qjit_quant_pack4(QJIT_DTYPE_E2M1, 1, 4, u, 4, pu, 4));
    CHECK(pu[0] == 0xF0 && pu[1] == 0x69, "e2m1 bytes 0x%02x 0x%02x", pu[0], pu[1]);
    uint8_t ub[4];
    CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_U4, 1, 4, pu, 4, ub, 4));
    CHECK(memcmp(ub, u, 4) == 0, "u4 round trip");
}

static void test_pack_random(void)
{
    const qjit_dtype types[3] = {QJIT_DTYPE_S4, QJIT_DTYPE_U4, QJIT_DTYPE_E2M1};
    for (int it = 0; it < 60; it++) {
        qjit_dtype t = types[it % 3];
        int64_t rows = 1 + rnd() % 9, k = 2 * (rnd() % 40), lds = k + rnd() % 5,
                ldd = k + 2 * (rnd() % 3);
        uint8_t *src = malloc((size_t)(rows * lds + 1)), *dst = malloc((size_t)(rows * ldd / 2 + 1)),
                *back = malloc((size_t)(rows * lds + 1));
        for (int64_t i = 0; i < rows * lds; i++)
            src[i] = t == QJIT_DTYPE_S4 ? (uint8_t)(int8_t)((int)(rnd() % 16) - 8)
                                        : (uint8_t)(rnd() % 16);
        CHECK_OK(qjit_quant_pack4(t, rows, k, src, lds, dst, ldd));
        CHECK_OK(qjit_quant_unpack4(t, rows, k, dst, ldd, back, lds));
        bool ok = true;
        for (int64_t r = 0; r < rows; r++)
            ok = ok && memcmp(src + r * lds, back + r * lds, (size_t)k) == 0;
        CHECK(ok, "type %d rows %lld k %lld lds %lld ldd %lld: no round trip", (int)t,
              (long long)rows, (long long)k, (long long)lds, (long long)ldd);
        free(src);
        free(dst);
        free(back);
    }
}

static void expect_pack_reject(qjit_dtype t, int bad_row, int bad_col, int value,
                               const char *shown)
{
    uint8_t src[4 * 8] = {0};
    src[bad_row * 8 + bad_col] = (uint8_t)value;
    uint8_t dst[4 * 4], before[4 * 4];
    memset(dst, 0xC3, sizeof dst);
    memcpy(before, dst, sizeof dst);
    qjit_status s = qjit_quant_pack4(t, 4, 8, src, 8, dst, 8);
    CHECK(s == QJIT_ERROR_INVALID_ARGUMENT, "type %d value %d accepted (%d)", (int)t, value,
          (int)s);
    char where[64];
    snprintf(where, sizeof where, "row %d, column %d", bad_row, bad_col);
    CHECK(contains(qjit_last_error(), where) && contains(qjit_last_error(), shown),
          "message lacks '%s' / '%s': %s", where, shown, qjit_last_error());
    CHECK(memcmp(dst, before, sizeof dst) == 0, "rejected pack wrote output");
}

static void test_pack_reject(void)
{
    expect_pack_reject(QJIT_DTYPE_S4, 2, 3, 8, "is 8");
    expect_pack_reject(QJIT_DTYPE_S4, 3, 7, (int8_t)-9, "is -9");
    expect_pack_reject(QJIT_DTYPE_S4, 0, 0, (int8_t)-128, "is -128");
    expect_pack_reject(QJIT_DTYPE_U4, 1, 6, 16, "is 16");
    expect_pack_reject(QJIT_DTYPE_U4, 3, 0, 200, "is 200");
    expect_pack_reject(QJIT_DTYPE_E2M1, 0, 5, 0xF0, "is 240");

    uint8_t src[16] = {0}, dst[16];
    CHECK(qjit_quant_pack4(QJIT_DTYPE_S4, 1, 3, src, 4, dst, 4) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "odd"),
          "odd k: %s", qjit_last_error());
    CHECK(qjit_quant_pack4(QJIT_DTYPE_S4, 2, 4, src, 4, dst, 5) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "even"),
          "odd ld_dst: %s", qjit_last_error());
    CHECK(qjit_quant_pack4(QJIT_DTYPE_S4, 2, 4, src, 3, dst, 4) == QJIT_ERROR_INVALID_ARGUMENT,
          "ld_src < k accepted");
    CHECK(qjit_quant_pack4(QJIT_DTYPE_S8, 1, 4, src, 4, dst, 4) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "s8"),
          "s8 accepted: %s", qjit_last_error());
    CHECK(qjit_quant_pack4(QJIT_DTYPE_U4, 1, 4, NULL, 4, dst, 4) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL src accepted");
    CHECK(qjit_quant_unpack4(QJIT_DTYPE_U4, 1, 4, src, 3, dst, 4) == QJIT_ERROR_INVALID_ARGUMENT,
          "unpack with odd packed ld accepted");
    CHECK_OK(qjit_quant_pack4(QJIT_DTYPE_U4, 0, 4, NULL, 4, NULL, 4)); /* empty is fine */
}

/* ---------------------------------------------------------------- conversions */

static void test_fp8(void)
{
    /* hand-written values of e4m3 (bias 7) and e5m2 (bias 15) */
    const struct {
        uint8_t c;
        double v;
    } e4[] = {{0x00, 0.0},      {0x01, 0x1p-9},   {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6},
              {0x38, 1.0},      {0x39, 1.125},    {0x40, 2.0},        {0x77, 240.0},
              {0x78, 256.0},    {0x7E, 448.0},    {0x7F, NAN},        {0x80, -0.0},
              {0xB8, -1.0},     {0xFE, -448.0},   {0xFF, NAN}},
      e5[] = {{0x00, 0.0},      {0x01, 0x1p-16},  {0x04, 0x1p-14},    {0x3C, 1.0},
              {0x3D, 1.25},     {0x7B, 57344.0},  {0x7C, INFINITY},   {0x7D, NAN},
              {0x7E, NAN},      {0x7F, NAN},      {0xBC, -1.0},       {0xFB, -57344.0},
              {0xFC, -INFINITY}};
    for (size_t i = 0; i < sizeof e4 / sizeof e4[0]; i++)
        CHECK(same(qjit_e4m3_to_f32(e4[i].c), e4[i].v), "e4m3 0x%02x -> %g, want %g", e4[i].c,
              qjit_e4m3_to_f32(e4[i].c), e4[i].v);
    for (size_t i = 0; i < sizeof e5 / sizeof e5[0]; i++)
        CHECK(same(qjit_e5m2_to_f32(e5[i].c), e5[i].v), "e5m2 0x%02x -> %g, want %g", e5[i].c,
              qjit_e5m2_to_f32(e5[i].c), e5[i].v);

    /* every code: positive codes increase, negatives mirror them, encode(decode) = code */
    int nan4 = 0, nan5 = 0;
    for (int c = 0; c < 256; c++) {
        float v4 = qjit_e4m3_to_f32((uint8_t)c), v5 = qjit_e5m2_to_f32((uint8_t)c);
        nan4 += isnan(v4);
        nan5 += isnan(v5);
        if (c & 0x80) {
            CHECK(same(v4, -qjit_e4m3_to_f32((uint8_t)(c & 0x7f))), "e4m3 0x%02x not mirrored", c);
            CHECK(same(v5, -qjit_e5m2_to_f32((uint8_t)(c & 0x7f))), "e5m2 0x%02x not mirrored", c);
        } else if (c > 0) {
            if (c != 0x7f)
                CHECK(v4 > qjit_e4m3_to_f32((uint8_t)(c - 1)), "e4m3 0x%02x not increasing", c);
            if (c <= 0x7c)
                CHECK(v5 > qjit_e5m2_to_f32((uint8_t)(c - 1)), "e5m2 0x%02x not increasing", c);
        }
        if (!isnan(v4))
            CHECK(qjit_e4m3_from_f32(v4) == c, "e4m3 0x%02x -> %g -> 0x%02x", c, v4,
                  qjit_e4m3_from_f32(v4));
        if (!isnan(v5) && !isinf(v5))
            CHECK(qjit_e5m2_from_f32(v5) == c, "e5m2 0x%02x -> %g -> 0x%02x", c, v5,
                  qjit_e5m2_from_f32(v5));
    }
    CHECK(nan4 == 2 && nan5 == 6, "NaN codes: e4m3 %d (want 2), e5m2 %d (want 6)", nan4, nan5);

    /* saturation, infinities, NaN */
    CHECK(qjit_e4m3_from_f32(1e9f) == 0x7E && qjit_e4m3_from_f32(-1e9f) == 0xFE, "e4m3 1e9");
    CHECK(qjit_e4m3_from_f32(INFINITY) == 0x7E && qjit_e4m3_from_f32(-INFINITY) == 0xFE, "e4m3 inf");
    CHECK(qjit_e4m3_from_f32(NAN) == 0x7F && qjit_e4m3_from_f32(-NAN) == 0xFF, "e4m3 NaN");
    CHECK(qjit_e4m3_from_f32(470.0f) == 0x7E, "e4m3 470 (nearer 480, not a value) saturates");
    CHECK(qjit_e5m2_from_f32(1e9f) == 0x7B && qjit_e5m2_from_f32(-1e9f) == 0xFB, "e5m2 1e9");
    CHECK(qjit_e5m2_from_f32(INFINITY) == 0x7B, "e5m2 inf saturates");
    CHECK(qjit_e5m2_from_f32(NAN) == 0x7E && qjit_e5m2_from_f32(-NAN) == 0xFE, "e5m2 NaN");
    CHECK(qjit_e4m3_from_f32(-0.0f) == 0x80 && qjit_e5m2_from_f32(-0.0f) == 0x80, "-0");

    /* ties to even: exact midpoints between neighbouring codes */
    CHECK(qjit_e4m3_from_f32(1.0625f) == 0x38, "1.0625 -> 0x%02x (1.0)", qjit_e4m3_from_f32(1.0625f));
    CHECK(qjit_e4m3_from_f32(1.1875f) == 0x3A, "1.1875 -> 0x%02x (1.25)", qjit_e4m3_from_f32(1.1875f));
    CHECK(qjit_e4m3_from_f32(1.0626f) == 0x39, "just above a tie rounds up");
    CHECK(qjit_e4m3_from_f32(464.0f) == 0x7E, "464 (tie 448/480) -> 448");
    CHECK(qjit_e4m3_from_f32(0x1p-10f) == 0x00, "half the smallest subnormal -> 0");
    CHECK(qjit_e4m3_from_f32(0x1.000002p-10f) == 0x01, "just above half of it -> 0x01");
    CHECK(qjit_e4m3_from_f32(3 * 0x1p-10f) == 0x02, "tie between subnormals 1 and 2 -> 2");
    CHECK(qjit_e4m3_from_f32(15 * 0x1p-10f) == 0x08, "largest subnormal tie rounds to 2^-6");
    CHECK(qjit_e5m2_from_f32(1.125f) == 0x3C && qjit_e5m2_from_f32(1.375f) == 0x3E,
          "e5m2 ties: 0x%02x 0x%02x", qjit_e5m2_from_f32(1.125f), qjit_e5m2_from_f32(1.375f));
    CHECK(qjit_e5m2_from_f32(61440.0f) == 0x7B, "e5m2 tie above max saturates");

    /* random values: the code is the nearest (ties even) among all finite codes */
    for (int i = 0; i < 20000; i++) {
        float x = ldexpf(frand(-1, 1), (int)(rnd() % 30) - 18);
        uint8_t c = qjit_e4m3_from_f32(x);
        double v = qjit_e4m3_to_f32(c), err = fabs(v - x);
        bool ok = true;
        for (int d = 0; d < 256; d++) {
            double w = qjit_e4m3_to_f32((uint8_t)d);
            if (isnan(w))
                continue;
            if (fabs(w - x) < err || (fabs(w - x) == err && w != v && (d & 1) == 0 && (c & 1)))
                ok = false;
        }
        if (fabs(x) > 448)
            ok = v == (x > 0 ? 448 : -448);
        CHECK(ok, "e4m3(%a) = 0x%02x is not the nearest even code", x, c);
    }
}

static void test_e2m1(void)
{
    const double v[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++) {
        double want = c < 8 ? v[c] : -v[c - 8];
        CHECK(same(qjit_e2m1_to_f32((uint8_t)c), want), "e2m1 %d -> %g", c, qjit_e2m1_to_f32((uint8_t)c));
        CHECK(qjit_e2m1_to_f32((uint8_t)(c | 0xA0)) == qjit_e2m1_to_f32((uint8_t)c), "high bits read");
        CHECK(qjit_e2m1_from_f32((float)want) == c, "e2m1 %g -> %d", want, qjit_e2m1_from_f32((float)want));
    }
    const struct {
        float x;
        uint8_t c;
    } r[] = {{0.25f, 0},  {0.26f, 1}, {0.75f, 2},   {1.25f, 2},  {1.75f, 4}, {2.5f, 4},
             {3.5f, 6},   {5.0f, 6},  {5.01f, 7},   {7.0f, 7},   {100.f, 7}, {-100.f, 15},
             {-0.75f, 10}, {INFINITY, 7}, {NAN, 0}, {-0.1f, 8}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        CHECK(qjit_e2m1_from_f32(r[i].x) == r[i].c, "e2m1(%g) = %d, want %d", r[i].x,
              qjit_e2m1_from_f32(r[i].x), r[i].c);
}

static void test_f16_bf16(void)
{
    const struct {
        float x;
        uint16_t h;
    } f16[] = {{1.0f, 0x3C00},          {-2.0f, 0xC000},         {65504.0f, 0x7BFF},
               {65519.0f, 0x7BFF},      {65520.0f, 0x7C00},      {1e9f, 0x7C00},
               {0x1p-24f, 0x0001},      {0x1p-25f, 0x0000},      {0x1.8p-25f, 0x0001},
               {3 * 0x1p-25f, 0x0002},  {1 + 0x1p-11f, 0x3C00},  {1 + 3 * 0x1p-11f, 0x3C02},
               {-0.0f, 0x8000},         {INFINITY, 0x7C00},      {0x1.ffcp-15f, 0x0400}};
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
        CHECK(qjit_f16_from_f32(f16[i].x) == f16[i].h, "f16(%a) = 0x%04x, want 0x%04x", f16[i].x,
              qjit_f16_from_f32(f16[i].x), f16[i].h);
    CHECK(qjit_f16_from_f32(NAN) == 0x7E00 && qjit_f16_from_f32(-NAN) == 0xFE00, "f16 NaN");
    CHECK(qjit_bf16_from_f32(1.0f) == 0x3F80 && qjit_bf16_from_f32(1 + 0x1p-8f) == 0x3F80 &&
              qjit_bf16_from_f32(1 + 3 * 0x1p-8f) == 0x3F82 &&
              qjit_bf16_from_f32(bits_f32(0x7F7FFFFF)) == 0x7F80 &&
              qjit_bf16_from_f32(NAN) == 0x7FC0 && qjit_bf16_from_f32(bits_f32(1)) == 0,
          "bf16 hand values");

    /* every code decodes and encodes back; NaN codes decode to NaN */
    for (uint32_t c = 0; c < 65536; c++) {
        float h = qjit_f16_to_f32((uint16_t)c), b = qjit_bf16_to_f32((uint16_t)c);
        bool hnan = (c & 0x7c00) == 0x7c00 && (c & 0x3ff), bnan = (c & 0x7f80) == 0x7f80 && (c & 0x7f);
        CHECK(isnan(h) == hnan && (hnan || qjit_f16_from_f32(h) == c), "f16 code 0x%04x", c);
        CHECK(isnan(b) == bnan && (bnan || qjit_bf16_from_f32(b) == c), "bf16 code 0x%04x", c);
        CHECK(bnan || f32_bits(b) == c << 16, "bf16 0x%04x is not the top half of f32", c);
    }
    /* random f32: bf16 by the add-half-then-truncate formula; f16 by the compiler */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd();
        float x = bits_f32(u);
        if (isnan(x))
            continue;
        uint16_t want = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16); /* carries to inf */
        CHECK(qjit_bf16_from_f32(x) == want, "bf16(%a) = 0x%04x, want 0x%04x", x,
              qjit_bf16_from_f32(x), want);
#ifdef __FLT16_MAX__
        float y = ldexpf(frand(-1, 1), (int)(rnd() % 44) - 28);
        _Float16 hy = (_Float16)y;
        uint16_t hb;
        memcpy(&hb, &hy, 2);
        CHECK(qjit_f16_from_f32(y) == hb, "f16(%a) = 0x%04x, compiler 0x%04x", y,
              qjit_f16_from_f32(y), hb);
#endif
    }
    CHECK(qjit_e8m0_to_f32(127) == 1.0f && qjit_e8m0_to_f32(0) == 0x1p-127f &&
              qjit_e8m0_to_f32(254) == 0x1p127f && qjit_e8m0_to_f32(130) == 8.0f &&
              isnan(qjit_e8m0_to_f32(255)),
          "e8m0 decode");
}

/* ---------------------------------------------------------------- e8m0 and MX */

static uint8_t e8(float amax, qjit_dtype t, qjit_mx_rule r)
{
    uint8_t c = 0x5A;
    qjit_status s = qjit_e8m0_from_amax(amax, t, r, &c);
    CHECK(s == QJIT_OK, "e8m0(%g): %s", amax, qjit_last_error());
    return c;
}

static void test_e8m0(void)
{
    const qjit_dtype E4 = QJIT_DTYPE_E4M3, E2 = QJIT_DTYPE_E2M1, E5 = QJIT_DTYPE_E5M2;
    const qjit_mx_rule F = QJIT_MX_RULE_FLOOR, R = QJIT_MX_RULE_RCEIL;
    const struct {
        float amax;
        qjit_dtype t;
        uint8_t floor, rceil;
    } cases[] = {
        /* e4m3, emax 8, max 448.  300: floor(log2 300) = 8 -> 2^0; 300 <= 448 -> 2^0 */
        {300, E4, 127, 127},
        {448, E4, 127, 127},
        {449, E4, 127, 128}, /* floor keeps 2^0 (449 saturates); rceil 2^1 (224.5) */
        {500, E4, 127, 128},
        {256, E4, 127, 127}, /* 2^8: floor -> 0; rceil: 256 <= 448 -> 0 */
        {255, E4, 126, 127}, /* floor(log2 255) = 7 -> -1; rceil: 255 <= 448 -> 0 */
        {1.0f, E4, 119, 119},
        {1.9f, E4, 119, 120}, /* 1.9 > 1.75 = 448·2^-8 */
        {1.75f, E4, 119, 119},
        /* e2m1, emax 2, max 6 */
        {6, E2, 127, 127},
        {7, E2, 127, 128},
        {1, E2, 125, 125},
        {4, E2, 127, 127},
        {3.9f, E2, 126, 127}, /* floor(log2 3.9) = 1 -> -1; rceil: 3.9 <= 6 -> 0 */
        /* e5m2, emax 15, max 57344 */
        {57344, E5, 127, 127},
        {60000, E5, 127, 128},
        {1.0f, E5, 112, 112},
        /* clamps: tiny values go to code 0, the largest f32 stays in range */
        {0x1p-149f, E4, 0, 0},
        {0x1p-119f, E4, 0, 0},  /* floor: -119 - 8 + 127 = 0 */
        {0x1p-118f, E4, 1, 1},  /* a power of two: both give 2^-126 */
        {0x1.e66666p-119f, E4, 0, 1}, /* 1.9·2^-119 > 1.75·2^-119 = 448·2^-127 */
        {0x1.fffffep127f, E4, 246, 247},
        {0x1.fffffep127f, E2, 252, 253},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t f = e8(cases[i].amax, cases[i].t, F), r = e8(cases[i].amax, cases[i].t, R);
        CHECK(f == cases[i].floor, "floor(%a, type %d) = %d, want %d", cases[i].amax,
              (int)cases[i].t, f, cases[i].floor);
        CHECK(r == cases[i].rceil, "rceil(%a, type %d) = %d, want %d", cases[i].amax,
              (int)cases[i].t, r, cases[i].rceil);
        CHECK(e8(-cases[i].amax, cases[i].t, F) == f, "sign of amax matters");
    }
    CHECK(e8(0, E4, F) == 0 && e8(0, E2, R) == 0, "amax 0 -> code 0");
    CHECK(e8(NAN, E4, F) == 0xFF && e8(NAN, E2, R) == 0xFF && e8(INFINITY, E4, R) == 0xFF,
          "non-finite -> 0xFF");

    /* rceil never saturates and is the least such exponent; floor puts amax in the top
     * binade of the element type */
    for (int i = 0; i < 5000; i++) {
        float a = ldexpf(frand(0.01f, 1), (int)(rnd() % 200) - 100);
        for (int t = 0; t < 3; t++) {
            qjit_dtype ty = t == 0 ? E4 : t == 1 ? E5 : E2;
            double mx = ty == E4 ? 448 : ty == E5 ? 57344 : 6;
            int emax = ty == E4 ? 8 : ty == E5 ? 15 : 2;
            int er = e8(a, ty, R) - 127, ef = e8(a, ty, F) - 127;
            CHECK(ldexp(a, -er) <= mx && ldexp(a, -(er - 1)) > mx, "rceil(%a) = %d", a, er);
            CHECK(ldexp(a, -ef) >= ldexp(1, emax) && ldexp(a, -ef) < ldexp(1, emax + 1),
                  "floor(%a) = %d", a, ef);
        }
    }
    uint8_t c = 0x5A;
    CHECK(qjit_e8m0_from_amax(1, QJIT_DTYPE_F16, F, &c) == QJIT_ERROR_INVALID_ARGUMENT &&
              c == 0x5A && contains(qjit_last_error(), "f16"),
          "f16 elements accepted: %s", qjit_last_error());
    CHECK(qjit_e8m0_from_amax(1, E4, (qjit_mx_rule)7, &c) == QJIT_ERROR_INVALID_ARGUMENT,
          "rule 7 accepted");
    CHECK(qjit_e8m0_from_amax(1, E4, F, NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL out");
}

static void test_mx(void)
{
    /* one block by hand: 500 with e4m3 */
    float x[32] = {500.0f, -3.0f, 0.1f};
    uint8_t q[32], s;
    CHECK_OK(qjit_quant_mx(QJIT_DTYPE_E4M3, QJIT_MX_RULE_FLOOR, 1, 32, x, 32, q, 32, &s));
    CHECK(s == 127 && q[0] == 0x7E && qjit_e4m3_to_f32(q[1]) == -3.0f && q[3] == 0,
          "floor block: s %d q0 0x%02x q1 %g", s, q[0], qjit_e4m3_to_f32(q[1]));
    CHECK_OK(qjit_quant_mx(QJIT_DTYPE_E4M3, QJIT_MX_RULE_RCEIL, 1, 32, x, 32, q, 32, &s));
    /* 500 / 2 = 250 -> nearest of 240, 256 is 256; -3 / 2 = -1.5 exactly */
    CHECK(s == 128 && qjit_e4m3_to_f32(q[0]) == 256.0f && qjit_e4m3_to_f32(q[1]) == -1.5f,
          "rceil block: s %d q0 %g q1 %g", s, qjit_e4m3_to_f32(q[0]), qjit_e4m3_to_f32(q[1]));

    /* random matrices for each element type and rule, against the scalar definition */
    const qjit_dtype el[3] = {QJIT_DTYPE_E4M3, QJIT_DTYPE_E5M2, QJIT_DTYPE_E2M1};
    for (int t = 0; t < 3; t++) {
        for (int rule = 0; rule < 2; rule++) {
            int64_t rows = 3, k = 96, ldx = 100, ldq = 98;
            bool packed = el[t] == QJIT_DTYPE_E2M1;
            float *xs = malloc(sizeof(float) * (size_t)(rows * ldx));
            for (int64_t i = 0; i < rows * ldx; i++)
                xs[i] = ldexpf(frand(-1, 1), (int)(rnd() % 12) - 6);
            xs[1 * ldx + 40] = NAN; /* row 1, block 1 */
            size_t qbytes = (size_t)(rows * (packed ? ldq / 2 : ldq));
            uint8_t *qq = malloc(qbytes), *un = malloc((size_t)(rows * k)), sc[9];
            memset(qq, 0xEE, qbytes);
            CHECK_OK(qjit_quant_mx(el[t], (qjit_mx_rule)rule, rows, k, xs, ldx, qq, ldq, sc));
            if (packed)
                CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_E2M1, rows, k, qq, ldq, un, k));
            else
                for (int64_t r = 0; r < rows; r++)
                    memcpy(un + r * k, qq + r * ldq, (size_t)k);
            int bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t b = 0; b < 3; b++) {
                    const float *xb = xs + r * ldx + b * 32;
                    if (r == 1 && b == 1) {
                        CHECK(sc[r * 3 + b] == 0xFF, "NaN block scale %d", sc[r * 3 + b]);
                        for (int i = 0; i < 32; i++)
                            bad += un[r * k + b * 32 + i] != 0;
                        continue;
                    }
                    float amax = 0;
                    for (int i = 0; i < 32; i++)
                        amax = fmaxf(amax, fabsf(xb[i]));
                    uint8_t want = e8(amax, el[t], (qjit_mx_rule)rule);
                    CHECK(sc[r * 3 + b] == want, "scale %d, want %d", sc[r * 3 + b], want);
                    for (int i = 0; i < 32; i++) {
                        float y = ldexpf(xb[i], 127 - want);
                        uint8_t w = el[t] == QJIT_DTYPE_E4M3   ? qjit_e4m3_from_f32(y)
                                    : el[t] == QJIT_DTYPE_E5M2 ? qjit_e5m2_from_f32(y)
                                                               : qjit_e2m1_from_f32(y);
                        bad += un[r * k + b * 32 + i] != w;
                    }
                }
                if (!packed)
                    bad += qq[r * ldq + 96] != 0xEE || qq[r * ldq + 97] != 0xEE;
                else
                    bad += qq[r * ldq / 2 + 48] != 0xEE;
            }
            CHECK(bad == 0, "type %d rule %d: %d wrong codes or padding writes", t, rule, bad);
            free(xs);
            free(qq);
            free(un);
        }
    }
    uint8_t qb[64], sb[2] = {7, 7};
    memset(qb, 0x11, sizeof qb);
    float xz[64] = {0};
    CHECK(qjit_quant_mx(QJIT_DTYPE_E4M3, QJIT_MX_RULE_FLOOR, 1, 48, xz, 48, qb, 48, sb) ==
                  QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "48") && qb[0] == 0x11 && sb[0] == 7,
          "k = 48: %s", qjit_last_error());
    CHECK(qjit_quant_mx(QJIT_DTYPE_E2M1, QJIT_MX_RULE_FLOOR, 2, 32, xz, 32, qb, 33, sb) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "odd packed ldq accepted");
    CHECK(qjit_quant_mx(QJIT_DTYPE_S4, QJIT_MX_RULE_FLOOR, 1, 32, xz, 32, qb, 32, sb) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "s4 MX accepted");
    CHECK_OK(qjit_quant_mx(QJIT_DTYPE_E2M1, QJIT_MX_RULE_RCEIL, 1, 32, xz, 32, qb, 32, sb));
    CHECK(sb[0] == 0 && qb[0] == 0 && qb[15] == 0 && qb[16] == 0x11, "zero block: s %d", sb[0]);
}

/* ---------------------------------------------------------------- int4 groups */

static float scale_value(qjit_dtype st, const void *base, int64_t i)
{
    if (st == QJIT_DTYPE_F32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return st == QJIT_DTYPE_F16 ? qjit_f16_to_f32(h) : qjit_bf16_to_f32(h);
}

static void test_group_known(void)
{
    /* s4, f32 scales: max|w| = 7 -> s = 1, q = rne(w) */
    float w[64] = {-7, 7, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.49f, 6.6f, -6.5f};
    /* second group: max|w| = 14 -> s = 2 */
    w[32] = 14;
    w[33] = 3;   /* 1.5 -> 2 */
    w[34] = 5;   /* 2.5 -> 2 */
    w[35] = -13; /* -6.5 -> -6 */
    uint8_t q[32];
    float s[2];
    memset(q, 0, sizeof q);
    CHECK_OK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_F32, 1, 64, w, 64, q, 64, s, NULL));
    int8_t v[64];
    CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_S4, 1, 64, q, 64, v, 64));
    const int8_t want[10] = {-7, 7, 0, 2, 2, 0, -2, 3, 7, -6};
    CHECK(s[0] == 1.0f && s[1] == 2.0f, "scales %g %g", s[0], s[1]);
    CHECK(memcmp(v, want, 10) == 0 && v[10] == 0 && v[31] == 0, "group 0 q %d %d %d %d %d %d %d %d %d %d",
          v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]);
    CHECK(v[32] == 7 && v[33] == 2 && v[34] == 2 && v[35] == -6, "group 1 q %d %d %d %d", v[32],
          v[33], v[34], v[35]);
    CHECK(q[0] == 0x79, "first byte 0x%02x (-7 -> 9 low, 7 high)", q[0]);

    /* u4, f16 scales and zeros: min -2, max 13 -> s = 1, z = 2, q = rne(w) + 2 */
    float u[32] = {-2, 13, 0.5f, 1.5f, -1.5f, 2.5f, 12.6f};
    uint8_t qu[16];
    uint16_t su, zu;
    CHECK_OK(qjit_quant_group4(QJIT_DTYPE_U4, 32, QJIT_DTYPE_F16, 1, 32, u, 32, qu, 32, &su, &zu));
    uint8_t vu[32];
    CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_U4, 1, 32, qu, 32, vu, 32));
    CHECK(su == 0x3C00 && zu == 0x4000, "u4 scale 0x%04x zero 0x%04x", su, zu);
    const uint8_t wu[7] = {0, 15, 2, 4, 0, 4, 15};
    CHECK(memcmp(vu, wu, 7) == 0 && vu[7] == 2, "u4 q %d %d %d %d %d %d %d %d", vu[0], vu[1],
          vu[2], vu[3], vu[4], vu[5], vu[6], vu[7]);

    /* u4 on values that are all positive: the range still holds 0, z = 0 */
    float p[32];
    for (int i = 0; i < 32; i++)
        p[i] = 1.0f + (float)i / 15.5f; /* up to 3 */
    p[31] = 3.0f;
    float sp, zp;
    CHECK_OK(qjit_quant_group4(QJIT_DTYPE_U4, 32, QJIT_DTYPE_F32, 1, 32, p, 32, qu, 32, &sp, &zp));
    CHECK_OK(qjit_quant_unpack4(QJIT_DTYPE_U4, 1, 32, qu, 32, vu, 32));
    CHECK(sp == 0.2f && zp == 0.0f && vu[31] == 15 && vu[0] == 5, "positive group: s %g z %g q %d %d",
          sp, zp, vu[0], vu[31]);

    /* an all-zero group stores scale 0 and q 0 */
    float zw[32] = {0};
    memset(qu, 0xFF, sizeof qu);
    uint16_t sz = 0x1234, zz = 0x1234;
    CHECK_OK(qjit_quant_group4(QJIT_DTYPE_U4, 32, QJIT_DTYPE_BF16, 1, 32, zw, 32, qu, 32, &sz, &zz));
    CHECK(sz == 0 && zz == 0 && qu[0] == 0 && qu[15] == 0, "zero group s 0x%04x z 0x%04x", sz, zz);
}

static void test_group_random(void)
{
    const int groups[4] = {32, 64, 128, 256};
    const qjit_dtype st[3] = {QJIT_DTYPE_F32, QJIT_DTYPE_F16, QJIT_DTYPE_BF16};
    for (int qi = 0; qi < 2; qi++) {
        qjit_dtype qt = qi ? QJIT_DTYPE_U4 : QJIT_DTYPE_S4;
        for (int gi = 0; gi < 4; gi++) {
            for (int si = 0; si < 3; si++) {
                int g = groups[gi];
                int64_t n = 5, k = 2 * g, ldw = k + 3, ldq = k + 6, ng = k / g;
                float *w = malloc(sizeof(float) * (size_t)(n * ldw));
                for (int64_t i = 0; i < n * ldw; i++)
                    w[i] = ldexpf(frand(-1, 1), (int)(rnd() % 10) - 8) + (qi ? 0.01f : 0);
                uint8_t *q = malloc((size_t)(n * ldq / 2)), *v = malloc((size_t)(n * k));
                float sc[32], zr[32];
                memset(q, 0xAB, (size_t)(n * ldq / 2));
                CHECK_OK(qjit_quant_group4(qt, g, st[si], n, k, w, ldw, q, ldq, sc,
                                           qi ? zr : NULL));
                CHECK_OK(qjit_quant_unpack4(qt, n, k, q, ldq, v, k));
                int bad = 0;
                double worst = 0;
                for (int64_t r = 0; r < n; r++) {
                    bad += q[r * ldq / 2 + k / 2] != 0xAB || q[r * ldq / 2 + k / 2 + 2] != 0xAB;
                    for (int64_t j = 0; j < ng; j++) {
                        double s = scale_value(st[si], sc, r * ng + j);
                        double z = qi ? scale_value(st[si], zr, r * ng + j) : 0;
                        double lo = 0, hi = 0;
                        for (int i = 0; i < g; i++) {
                            double x = w[r * ldw + j * g + i];
                            lo = fmin(lo, qi ? x : -fabs(x));
                            hi = fmax(hi, fabs(qi ? fmax(x, 0) : x));
                        }
                        double exact = qi ? (hi - lo) / 15 : hi / 7;
                        int e2;
                        frexp(s, &e2);
                        int man = st[si] == QJIT_DTYPE_F32 ? 23 : st[si] == QJIT_DTYPE_F16 ? 10 : 7;
                        double u = ldexp(1, e2 - 1 - man); /* spacing of T at s */
                        bad += !(fabs(s - exact) <= u / 2) || s <= 0;
                        bad += z != floor(z) || z < 0 || z > 15;
                        for (int i = 0; i < g; i++) {
                            int qv = qi ? v[r * k + j * g + i] : (int8_t)v[r * k + j * g + i];
                            bad += qi ? (qv < 0 || qv > 15) : (qv < -8 || qv > 7);
                            double err = fabs(w[r * ldw + j * g + i] - (qv - z) * s);
                            bad += err > s / 2 + 7.5 * u;
                            worst = fmax(worst, err / s);
                        }
                    }
                }
                CHECK(bad == 0, "qtype %d group %d scale %d: %d violations (worst err %g s)",
                      (int)qt, g, (int)st[si], bad, worst);
                CHECK(worst > 0.3 && worst <= 0.56, "worst error %g s is implausible", worst);
                free(w);
                free(q);
                free(v);
            }
        }
    }
}

static void test_group_reject(void)
{
    float w[2 * 64];
    for (int i = 0; i < 128; i++)
        w[i] = (float)(i % 7) - 3;
    uint8_t q[64], q0[64];
    float s[4], z[4], s0[4], z0[4];
    memset(q, 0x3C, sizeof q);
    memset(s, 0x3C, sizeof s);
    memset(z, 0x3C, sizeof z);
    memcpy(q0, q, sizeof q);
    memcpy(s0, s, sizeof s);
    memcpy(z0, z, sizeof z);
#define UNCHANGED (memcmp(q, q0, sizeof q) == 0 && memcmp(s, s0, sizeof s) == 0 && memcmp(z, z0, sizeof z) == 0)
    w[64 + 37] = NAN;
    CHECK(qjit_quant_group4(QJIT_DTYPE_U4, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, z) ==
                  QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "row 1, column 37") && UNCHANGED,
          "NaN weight: %s", qjit_last_error());
    w[64 + 37] = INFINITY;
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, NULL) ==
                  QJIT_ERROR_INVALID_ARGUMENT && UNCHANGED,
          "inf weight: %s", qjit_last_error());
    w[64 + 37] = 1e6f; /* scale 142857 > 65504 */
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_F16, 2, 64, w, 64, q, 64, s, NULL) ==
                  QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "f16") && contains(qjit_last_error(), "row 1") &&
              UNCHANGED,
          "f16 scale overflow: %s", qjit_last_error());
    CHECK_OK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_BF16, 2, 64, w, 64, q, 64, s, NULL));
    w[64 + 37] = 0;
    memcpy(q, q0, sizeof q);
    memcpy(s, s0, sizeof s);
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 16, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, NULL) ==
                  QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), "16") && UNCHANGED,
          "group 16: %s", qjit_last_error());
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 64, QJIT_DTYPE_F32, 1, 96, w, 96, q, 96, s, NULL) ==
              QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), "96"),
          "k 96 group 64: %s", qjit_last_error());
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, z) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "zeros with s4 accepted");
    CHECK(qjit_quant_group4(QJIT_DTYPE_U4, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, NULL) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "u4 without zeros accepted");
    CHECK(qjit_quant_group4(QJIT_DTYPE_S8, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 64, s, NULL) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "s8 accepted");
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_E4M3, 2, 64, w, 64, q, 64, s, NULL) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "e4m3 scales accepted");
    CHECK(qjit_quant_group4(QJIT_DTYPE_S4, 32, QJIT_DTYPE_F32, 2, 64, w, 64, q, 62, s, NULL) ==
              QJIT_ERROR_INVALID_ARGUMENT,
          "ldq < k accepted");
    CHECK(UNCHANGED, "a rejected call wrote output");
#undef UNCHANGED
}

int main(void)
{
    test_pack_known();
    test_pack_random();
    test_pack_reject();
    test_fp8();
    test_e2m1();
    test_f16_bf16();
    test_e8m0();
    test_mx();
    test_group_known();
    test_group_random();
    test_group_reject();
    return tl_finish("test_quant");
}
