/*
 * test_desc.c — the GEMM descriptor: text round trips, canonical form, the pair/mode
 * table of DESIGN.md §2, and one rejection per parse error and per validation rule.
 */
#include "qjit_internal.h"
#include "testlib.h"

#include <string.h>

static const char *const all_dtypes[] = {"f16",  "bf16", "f32",  "s8",   "s4",
                                         "u4",   "e4m3", "e5m2", "e2m1", "e8m0"};
#define NDT (int)(sizeof all_dtypes / sizeof all_dtypes[0])

static bool desc_equal(const qjit_gemm_desc *x, const qjit_gemm_desc *y)
{
    return x->a == y->a && x->b == y->b && x->out == y->out && x->sa == y->sa &&
           x->sb == y->sb && x->group == y->group && x->group_scale == y->group_scale &&
           x->zeros == y->zeros && x->bias == y->bias && x->arch == y->arch &&
           x->kernel == y->kernel && x->bm == y->bm && x->bn == y->bn && x->bk == y->bk &&
           x->wm == y->wm && x->wn == y->wn && x->stages == y->stages &&
           x->split_k == y->split_k;
}

static bool contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* ---------------------------------------------------------------- names */

static void test_names(void)
{
    for (int i = 0; i < NDT; i++) {
        qjit_dtype t = (qjit_dtype)(i + 1);
        CHECK(qjit_desc_dtype_name(t) && strcmp(qjit_desc_dtype_name(t), all_dtypes[i]) == 0,
              "dtype %d name %s", i + 1, qjit_desc_dtype_name(t));
    }
    CHECK(qjit_desc_dtype_name(QJIT_DTYPE_COUNT) == NULL, "COUNT has a name");
    CHECK(qjit_desc_dtype_name((qjit_dtype)-1) == NULL, "-1 has a name");
    CHECK(qjit_desc_dtype_bits(QJIT_DTYPE_F16) == 16 && qjit_desc_dtype_bits(QJIT_DTYPE_BF16) == 16,
          "16-bit types");
    CHECK(qjit_desc_dtype_bits(QJIT_DTYPE_F32) == 32, "f32 bits");
    CHECK(qjit_desc_dtype_bits(QJIT_DTYPE_S8) == 8 && qjit_desc_dtype_bits(QJIT_DTYPE_E4M3) == 8 &&
              qjit_desc_dtype_bits(QJIT_DTYPE_E5M2) == 8 &&
              qjit_desc_dtype_bits(QJIT_DTYPE_E8M0) == 8,
          "8-bit types");
    CHECK(qjit_desc_dtype_bits(QJIT_DTYPE_S4) == 4 && qjit_desc_dtype_bits(QJIT_DTYPE_U4) == 4 &&
              qjit_desc_dtype_bits(QJIT_DTYPE_E2M1) == 4,
          "4-bit types");
    CHECK(qjit_desc_dtype_bits(QJIT_DTYPE_COUNT) == 0, "bits of a bad type");

    static const struct {
        qjit_arch a;
        const char *name;
    } archs[] = {{QJIT_ARCH_AUTO, "auto"},  {QJIT_ARCH_SM80, "sm_80"}, {QJIT_ARCH_SM86, "sm_86"},
                 {QJIT_ARCH_SM89, "sm_89"}, {QJIT_ARCH_SM90A, "sm_90a"}};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const char *n = qjit_arch_name(archs[i].a);
        CHECK(n && strcmp(n, archs[i].name) == 0, "arch %d name %s", archs[i].a, n);
        qjit_arch back = (qjit_arch)-1;
        CHECK_OK(qjit_desc_parse_arch(archs[i].name, &back));
        CHECK(back == archs[i].a, "parse_arch(%s) = %d", archs[i].name, back);
    }
    CHECK(qjit_arch_name((qjit_arch)75) == NULL, "sm_75 has a name");
    qjit_arch a = QJIT_ARCH_SM80;
    CHECK_OK(qjit_desc_parse_arch("sm_90", &a));
    CHECK(a == QJIT_ARCH_SM90A, "sm_90 means sm_90a, got %d", a);
    const char *bad_arch[] = {"sm_75", "sm_90A", "90", "", "sm_80 "};
    for (size_t i = 0; i < sizeof bad_arch / sizeof bad_arch[0]; i++) {
        a = QJIT_ARCH_SM86;
        qjit_status st = qjit_desc_parse_arch(bad_arch[i], &a);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "parse_arch('%s') -> %s", bad_arch[i],
              qjit_status_string(st));
        CHECK(a == QJIT_ARCH_SM86, "parse_arch('%s') wrote its output", bad_arch[i]);
        CHECK(contains(qjit_last_error(), bad_arch[i]), "message '%s'", qjit_last_error());
    }
    CHECK(qjit_desc_parse_arch(NULL, &a) == QJIT_ERROR_INVALID_ARGUMENT, "NULL arch text");

    CHECK(strcmp(qjit_kernel_name(QJIT_KERNEL_AUTO), "auto") == 0, "auto kernel");
    /* the values qjit.h names are the ids the family templates declare (qjit_families.h) */
    static const struct {
        qjit_kernel k;
        const char *name;
    } named[] = {{QJIT_KERNEL_MMA, "mma"},           {QJIT_KERNEL_WGMMA, "wgmma"},
                 {QJIT_KERNEL_MMA_WQ, "mma_wq"},     {QJIT_KERNEL_MMA_I8, "mma_i8"},
                 {QJIT_KERNEL_MMA_F8, "mma_f8"},     {QJIT_KERNEL_WGMMA_F8, "wgmma_f8"},
                 {QJIT_KERNEL_WGMMA_I8, "wgmma_i8"}, {QJIT_KERNEL_WGMMA_MX, "wgmma_mx"},
                 {QJIT_KERNEL_WGMMA_WQ, "wgmma_wq"}, {QJIT_KERNEL_WGMMA_TMA, "wgmma_tma"}};
    _Static_assert(sizeof named / sizeof named[0] == QJIT_KERNEL_COUNT - 1, "every named kernel");
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const char *n = qjit_kernel_name(named[i].k);
        CHECK(n && strcmp(n, named[i].name) == 0, "qjit_kernel %d is \"%s\", its template says \"%s\"",
              (int)named[i].k, named[i].name, n ? n : "(none)");
        qjit_gemm_desc d;
        char text[96];
        snprintf(text, sizeof text, "gemm a=bf16 b=bf16 out=bf16 kernel=%s", named[i].name);
        CHECK(qjit_gemm_desc_parse(text, &d) == QJIT_OK && d.kernel == named[i].k, "%s parses", text);
    }
    CHECK(qjit_kernel_name((qjit_kernel)QJIT_FAMILY_ID_LIMIT) == NULL, "a kernel past the families has a name");
    CHECK(qjit_kernel_name((qjit_kernel)-1) == NULL, "kernel -1 has a name");
}

/* ---------------------------------------------------------------- defaults */

static void test_init(void)
{
    qjit_gemm_desc d;
    memset(&d, 0x5a, sizeof d);
    qjit_gemm_desc_init(&d);
    CHECK(d.a == QJIT_DTYPE_F16 && d.b == QJIT_DTYPE_F16 && d.out == QJIT_DTYPE_F16, "types");
    CHECK(d.sa == QJIT_SCALE_NONE && d.sb == QJIT_SCALE_NONE && d.group == 0 &&
              d.group_scale == QJIT_DTYPE_NONE && d.zeros == 0 && d.bias == 0,
          "no scales, no bias");
    CHECK(d.arch == QJIT_ARCH_AUTO && d.kernel == QJIT_KERNEL_AUTO && d.bm == 0 && d.bn == 0 &&
              d.bk == 0 && d.wm == 0 && d.wn == 0 && d.stages == 0 && d.split_k == 0,
          "auto config");
    CHECK_OK(qjit_gemm_desc_validate(&d));
    qjit_gemm_desc_init(NULL); /* must not crash */

    char buf[256];
    CHECK_OK(qjit_gemm_desc_format(&d, buf, sizeof buf, NULL));
    CHECK(strcmp(buf, "gemm a=f16 b=f16 sa=none sb=none out=f16 bias=0 arch=auto kernel=auto "
                      "tile=auto warps=auto stages=auto split=auto") == 0,
          "default text '%s'", buf);

    qjit_gemm_desc p;
    memset(&p, 0x33, sizeof p);
    CHECK_OK(qjit_gemm_desc_parse("gemm", &p));
    CHECK(desc_equal(&p, &d), "'gemm' alone gives the defaults");
}

/* ---------------------------------------------------------------- round trips */

/* Canonical texts: parse then format gives them back byte for byte. */
static const char *const canonical[] = {
    "gemm a=bf16 b=bf16 sa=none sb=none out=bf16 bias=0 arch=sm_90a kernel=mma "
    "tile=128x128x32 warps=2x2 stages=4 split=1",
    "gemm a=f16 b=f16 sa=none sb=none out=f32 bias=1 arch=sm_80 kernel=auto tile=auto "
    "warps=auto stages=auto split=auto",
    "gemm a=bf16 b=s4 sa=none sb=group:128 gs=bf16 zeros=0 out=bf16 bias=0 arch=sm_90a "
    "kernel=mma tile=64x128x64 warps=2x2 stages=3 split=2",
    "gemm a=f16 b=u4 sa=none sb=group:32 gs=f32 zeros=1 out=f16 bias=1 arch=sm_86 "
    "kernel=auto tile=16x256x128 warps=1x8 stages=6 split=64",
    "gemm a=s8 b=s8 sa=row sb=col out=bf16 bias=0 arch=sm_89 kernel=mma tile=256x128x64 "
    "warps=4x2 stages=auto split=auto",
    "gemm a=s8 b=s4 sa=row sb=group:256 gs=f16 zeros=0 out=f16 bias=0 arch=auto kernel=auto "
    "tile=auto warps=4x2 stages=2 split=auto",
    "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 bias=0 arch=sm_90a kernel=auto "
    "tile=128x128x128 warps=auto stages=auto split=auto",
    "gemm a=e5m2 b=e4m3 sa=tensor sb=tensor out=f32 bias=1 arch=sm_89 kernel=auto tile=auto "
    "warps=auto stages=auto split=auto",
    "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 bias=0 arch=sm_90a kernel=auto tile=auto "
    "warps=auto stages=auto split=auto",
    "gemm a=bf16 b=e2m1 sa=none sb=mx out=bf16 bias=0 arch=sm_90a kernel=auto tile=auto "
    "warps=auto stages=5 split=auto",
    /* syntactically fine but semantically invalid: the text form still round-trips */
    "gemm a=e8m0 b=f32 sa=col sb=row out=s4 bias=0 arch=auto kernel=auto tile=auto "
    "warps=auto stages=9 split=100",
    "gemm a=f16 b=f16 sa=group:64 sb=none out=f16 bias=0 arch=auto kernel=auto tile=auto "
    "warps=auto stages=auto split=auto",
};

static void test_text_round_trip(void)
{
    for (size_t i = 0; i < sizeof canonical / sizeof canonical[0]; i++) {
        qjit_gemm_desc d, e;
        char buf[256];
        size_t len = 0;
        CHECK_OK(qjit_gemm_desc_parse(canonical[i], &d));
        CHECK_OK(qjit_gemm_desc_format(&d, buf, sizeof buf, &len));
        CHECK(strcmp(buf, canonical[i]) == 0, "round trip\n  in:  %s\n  out: %s", canonical[i],
              buf);
        CHECK(len == strlen(canonical[i]), "len %zu", len);
        CHECK_OK(qjit_gemm_desc_parse(buf, &e));
        CHECK(desc_equal(&d, &e), "format then parse changed the struct: %s", buf);
    }
}

/* Non-canonical input normalizes: order, whitespace, defaults, sm_90, auto spelled out. */
static void test_canonicalization(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"  gemm\tout=bf16  arch=sm_90 b=bf16 a=bf16 split=1 stages=4 warps=2x2 "
         "tile=128x128x32 kernel=mma\r\n",
         "gemm a=bf16 b=bf16 sa=none sb=none out=bf16 bias=0 arch=sm_90a kernel=mma "
         "tile=128x128x32 warps=2x2 stages=4 split=1"},
        {"gemm tile=auto warps=auto stages=auto split=auto arch=auto kernel=auto",
         "gemm a=f16 b=f16 sa=none sb=none out=f16 bias=0 arch=auto kernel=auto tile=auto "
         "warps=auto stages=auto split=auto"},
        /* gs defaults to f16 and zeros to 0 when sb is group */
        {"gemm a=f16 b=u4 sb=group:64",
         "gemm a=f16 b=u4 sa=none sb=group:64 gs=f16 zeros=0 out=f16 bias=0 arch=auto "
         "kernel=auto tile=auto warps=auto stages=auto split=auto"},
        {"gemm zeros=1 gs=bf16 sb=group:128 b=u4 a=bf16 out=bf16 bias=1",
         "gemm a=bf16 b=u4 sa=none sb=group:128 gs=bf16 zeros=1 out=bf16 bias=1 arch=auto "
         "kernel=auto tile=auto warps=auto stages=auto split=auto"},
        {"gemm stages=0016 a=s8 b=s8 sa=tensor sb=col",
         "gemm a=s8 b=s8 sa=tensor sb=col out=f16 bias=0 arch=auto kernel=auto tile=auto "
         "warps=auto stages=16 split=auto"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qjit_gemm_desc d;
        char buf[256];
        CHECK_OK(qjit_gemm_desc_parse(cases[i].in, &d));
        CHECK_OK(qjit_gemm_desc_format(&d, buf, sizeof buf, NULL));
        CHECK(strcmp(buf, cases[i].out) == 0, "canonical\n  in:  %s\n  got: %s\n  want: %s",
              cases[i].in, buf, cases[i].out);
    }
}

/* Every struct whose fields are consistent with the text form survives struct -> text ->
 * struct, valid or not: all dtypes in every slot, all modes, group sizes, configs. */
static void test_struct_round_trip(void)
{
    static const int tiles[][3] = {{0, 0, 0}, {16, 16, 16}, {128, 256, 64}, {256, 16, 128}};
    static const int warps[][2] = {{0, 0}, {1, 1}, {2, 4}, {8, 2}};
    static const qjit_arch archs[] = {QJIT_ARCH_AUTO, QJIT_ARCH_SM80, QJIT_ARCH_SM86,
                                      QJIT_ARCH_SM89, QJIT_ARCH_SM90A};
    int n = 0, bad = 0;
    for (int a = 1; a < QJIT_DTYPE_COUNT; a++)
        for (int b = 1; b < QJIT_DTYPE_COUNT; b++)
            for (int sb = 0; sb < QJIT_SCALE_COUNT; sb++) {
                qjit_gemm_desc d, e;
                qjit_gemm_desc_init(&d);
                d.a = (qjit_dtype)a;
                d.b = (qjit_dtype)b;
                d.out = (qjit_dtype)(1 + (a + b) % (QJIT_DTYPE_COUNT - 1));
                d.sa = (qjit_scale_mode)((a * 3 + b) % QJIT_SCALE_COUNT);
                if (d.sa == QJIT_SCALE_GROUP)
                    d.sa = QJIT_SCALE_ROW;
                d.sb = (qjit_scale_mode)sb;
                if (sb == QJIT_SCALE_GROUP) {
                    d.group = 32 << (b % 4);
                    d.group_scale = (qjit_dtype)(1 + (a % (QJIT_DTYPE_COUNT - 1)));
                    d.zeros = (a + b) & 1;
                }
                d.bias = b & 1;
                d.arch = archs[(a + sb) % 5];
                d.kernel = (qjit_kernel)((a + b + sb) % QJIT_KERNEL_COUNT);
                const int *t = tiles[(a + 2 * b) % 4], *w = warps[(b + sb) % 4];
                d.bm = t[0], d.bn = t[1], d.bk = t[2];
                d.wm = w[0], d.wn = w[1];
                d.stages = (a * b) % 7;
                d.split_k = (a + b * sb) % 3 == 0 ? 0 : a * b;
                char buf[256];
                memset(&e, 0x77, sizeof e);
                if (qjit_gemm_desc_format(&d, buf, sizeof buf, NULL) != QJIT_OK ||
                    qjit_gemm_desc_parse(buf, &e) != QJIT_OK || !desc_equal(&d, &e)) {
                    if (bad++ < 5)
                        fprintf(stderr, "struct round trip failed: %s (%s)\n", buf,
                                qjit_last_error());
                }
                n++;
            }
    CHECK(bad == 0, "%d of %d structs did not round-trip", bad, n);
    CHECK(n == 10 * 10 * 7, "count %d", n);
}

/* ---------------------------------------------------------------- format */

static void test_format_buffers(void)
{
    qjit_gemm_desc d;
    CHECK_OK(qjit_gemm_desc_parse(canonical[0], &d));
    size_t full = strlen(canonical[0]), len = 0;
    char buf[256];

    /* Length query with no buffer, snprintf style. */
    CHECK(qjit_gemm_desc_format(&d, NULL, 0, &len) == QJIT_ERROR_INVALID_ARGUMENT,
          "cap 0 must report did-not-fit");
    CHECK(len == full, "length query %zu, want %zu", len, full);

    /* Exactly enough. */
    memset(buf, 'x', sizeof buf);
    CHECK_OK(qjit_gemm_desc_format(&d, buf, full + 1, &len));
    CHECK(strcmp(buf, canonical[0]) == 0, "exact fit '%s'", buf);

    /* One short: truncated, terminated, error. */
    memset(buf, 'x', sizeof buf);
    qjit_status st = qjit_gemm_desc_format(&d, buf, full, &len);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "one short -> %s", qjit_status_string(st));
    CHECK(buf[full - 1] == 0 && strlen(buf) == full - 1, "truncated text terminated");
    CHECK(len == full, "len %zu on truncation", len);
    CHECK(buf[full] == 'x', "wrote past cap");

    /* A value with no name cannot be formatted; the message names the field. */
    d.out = (qjit_dtype)42;
    st = qjit_gemm_desc_format(&d, buf, sizeof buf, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "bad enum -> %s", qjit_status_string(st));
    CHECK(contains(qjit_last_error(), "'out'") && contains(qjit_last_error(), "42"),
          "message '%s'", qjit_last_error());
    CHECK(buf[0] == 0, "buffer not emptied on a bad enum");
    d.out = QJIT_DTYPE_F16;
    d.arch = (qjit_arch)75;
    st = qjit_gemm_desc_format(&d, buf, sizeof buf, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), "'arch'"),
          "bad arch -> %s: %s", qjit_status_string(st), qjit_last_error());

    CHECK(qjit_gemm_desc_format(NULL, buf, sizeof buf, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL desc");
    CHECK(qjit_gemm_desc_format(&d, NULL, 10, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL buf with cap");
}

/* ---------------------------------------------------------------- parse errors */

static void expect_parse_error(const char *text, const char *need1, const char *need2,
                               int line)
{
    qjit_gemm_desc d, sentinel;
    memset(&d, 0xa5, sizeof d);
    memset(&sentinel, 0xa5, sizeof sentinel);
    qjit_status st = qjit_gemm_desc_parse(text, &d);
    const char *msg = qjit_last_error();
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "line %d: parse('%s') -> %s", line, text,
          qjit_status_string(st));
    CHECK(memcmp(&d, &sentinel, sizeof d) == 0, "line %d: parse('%s') wrote its output", line,
          text);
    CHECK(need1 == NULL || contains(msg, need1), "line %d: message for '%s' lacks \"%s\": %s",
          line, text, need1, msg);
    CHECK(need2 == NULL || contains(msg, need2), "line %d: message for '%s' lacks \"%s\": %s",
          line, text, need2, msg);
}
#define PARSE_ERR(text, n1, n2) expect_parse_error(text, n1, n2, __LINE__)

static void test_parse_errors(void)
{
    /* the leading token */
    PARSE_ERR("", "'gemm'", NULL);
    PARSE_ERR("   \t ", "'gemm'", NULL);
    PARSE_ERR("gem a=f16", "'gem'", "'gemm'");
    PARSE_ERR("gemmx a=f16", "'gemmx'", NULL);
    PARSE_ERR("a=f16 gemm", "'a=f16'", NULL);
    PARSE_ERR("GEMM", "'GEMM'", NULL);
    /* token shape, unknown and duplicate fields */
    PARSE_ERR("gemm a=f16 bf16", "'bf16'", "key=value");
    PARSE_ERR("gemm a", "'a'", "key=value");
    PARSE_ERR("gemm foo=1", "'foo'", "foo=1");
    PARSE_ERR("gemm =f16", "''", "=f16");
    PARSE_ERR("gemm A=f16", "'A'", NULL);
    PARSE_ERR("gemm group=128", "'group'", NULL);
    PARSE_ERR("gemm a=f16 out=f16 a=bf16", "'a'", "a=bf16");
    PARSE_ERR("gemm tile=auto tile=auto", "'tile'", "tile=auto");
    /* a bad value for every field */
    PARSE_ERR("gemm a=f8", "'a'", "'f8'");
    PARSE_ERR("gemm a=", "'a'", "''");
    PARSE_ERR("gemm a=none", "'a'", "'none'");
    PARSE_ERR("gemm a=F16", "'a'", "'F16'");
    PARSE_ERR("gemm b=int4", "'b'", "'int4'");
    PARSE_ERR("gemm out=fp16", "'out'", "'fp16'");
    PARSE_ERR("gemm a=f16 b=f16 sa=rows", "'sa'", "'rows'");
    PARSE_ERR("gemm sb=group", "'sb'", "'group'");
    PARSE_ERR("gemm sb=group:", "'sb'", "'group:'");
    PARSE_ERR("gemm sb=group:0", "'sb'", "'group:0'");
    PARSE_ERR("gemm sb=group:-128", "'sb'", "'group:-128'");
    PARSE_ERR("gemm sb=group:12x", "'sb'", "'group:12x'");
    PARSE_ERR("gemm sb=col:128", "'sb'", "'col:128'");
    PARSE_ERR("gemm b=s4 sb=group:128 gs=f64", "'gs'", "'f64'");
    PARSE_ERR("gemm b=u4 sb=group:128 zeros=2", "'zeros'", "'2'");
    PARSE_ERR("gemm bias=yes", "'bias'", "'yes'");
    PARSE_ERR("gemm bias=01", "'bias'", "'01'");
    PARSE_ERR("gemm arch=sm_75", "'arch'", "'sm_75'");
    PARSE_ERR("gemm arch=sm_90A", "'arch'", "'sm_90A'");
    PARSE_ERR("gemm arch=90", "'arch'", "'90'");
    PARSE_ERR("gemm kernel=cutlass", "'kernel'", "'cutlass'");
    PARSE_ERR("gemm kernel=MMA", "'kernel'", "'MMA'");
    PARSE_ERR("gemm tile=128x0x32", "'tile'", "'128x0x32'");
    PARSE_ERR("gemm tile=128x128", "'tile'", "'128x128'");
    PARSE_ERR("gemm tile=128x128x20", "'tile'", "'128x128x20'");
    PARSE_ERR("gemm tile=128x128x32x16", "'tile'", "'128x128x32x16'");
    PARSE_ERR("gemm tile=-16x16x16", "'tile'", "'-16x16x16'");
    PARSE_ERR("gemm tile=128xx32", "'tile'", "'128xx32'");
    PARSE_ERR("gemm tile=99999999999x16x16", "'tile'", "'99999999999x16x16'");
    PARSE_ERR("gemm tile=AUTO", "'tile'", "'AUTO'");
    PARSE_ERR("gemm warps=2", "'warps'", "'2'");
    PARSE_ERR("gemm warps=0x2", "'warps'", "'0x2'");
    PARSE_ERR("gemm warps=2x2x2", "'warps'", "'2x2x2'");
    PARSE_ERR("gemm warps=2x", "'warps'", "'2x'");
    PARSE_ERR("gemm stages=0", "'stages'", "'0'");
    PARSE_ERR("gemm stages=-1", "'stages'", "'-1'");
    PARSE_ERR("gemm stages=three", "'stages'", "'three'");
    PARSE_ERR("gemm stages=+4", "'stages'", "'+4'");
    PARSE_ERR("gemm split=0", "'split'", "'0'");
    PARSE_ERR("gemm split=x", "'split'", "'x'");
    PARSE_ERR("gemm split=4.0", "'split'", "'4.0'");
    /* group-mode fields without sb=group */
    PARSE_ERR("gemm a=f16 b=s4 sb=col gs=f16", "'gs'", "gs=f16");
    PARSE_ERR("gemm a=f16 b=u4 zeros=1", "'zeros'", "zeros=1");
    PARSE_ERR("gemm zeros=0 sb=none", "'zeros'", "'none'");
    /* one group size for both sides */
    PARSE_ERR("gemm sa=group:64 sb=group:128", "'sb'", "group:128");

    qjit_gemm_desc d;
    CHECK(qjit_gemm_desc_parse(NULL, &d) == QJIT_ERROR_INVALID_ARGUMENT, "NULL text");
    CHECK(qjit_gemm_desc_parse("gemm", NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL out");
}

/* ---------------------------------------------------------------- validate */

/* DESIGN.md §2's pairs, written out on their own as the reference for the table in
 * desc.c: "A types|B types|sa modes|sb modes". */
static const char *const valid_pairs[] = {
    "f16|f16|none|none",
    "bf16|bf16|none|none",
    "f16,bf16|s4,u4|none|col,group",
    "f16,bf16|s8|none|tensor,col",
    "s8|s8|tensor,row|tensor,col",
    "s8|s4|row|col,group",
    "e4m3,e5m2|e4m3|tensor,row,block|tensor,col,block",
    "e4m3|e4m3|mx|mx",
    "e2m1|e2m1|mx|mx",
    "f16,bf16|e2m1|none|mx",
};

static const char *const mode_names[QJIT_SCALE_COUNT] = {"none",  "tensor", "row", "col",
                                                         "group", "block",  "mx"};

/* Is name one of the comma-separated words of the field `field` (0..3) of spec? */
static bool spec_has(const char *spec, int field, const char *name)
{
    const char *p = spec;
    for (int i = 0; i < field; i++)
        p = strchr(p, '|') + 1;
    size_t n = strlen(name);
    while (*p && *p != '|') {
        size_t w = strcspn(p, ",|");
        if (w == n && memcmp(p, name, n) == 0)
            return true;
        p += w;
        if (*p == ',')
            p++;
    }
    return false;
}

static bool pair_allowed(qjit_dtype a, qjit_dtype b, qjit_scale_mode sa, qjit_scale_mode sb)
{
    for (size_t i = 0; i < sizeof valid_pairs / sizeof valid_pairs[0]; i++)
        if (spec_has(valid_pairs[i], 0, qjit_desc_dtype_name(a)) &&
            spec_has(valid_pairs[i], 1, qjit_desc_dtype_name(b)) &&
            spec_has(valid_pairs[i], 2, mode_names[sa]) &&
            spec_has(valid_pairs[i], 3, mode_names[sb]))
            return true;
    return false;
}

/* Every (a, b, sa, sb) over all enum values: accepted exactly when DESIGN.md lists it. */
static void test_pair_table(void)
{
    int accepted = 0, mismatches = 0;
    for (int a = 0; a < QJIT_DTYPE_COUNT; a++)
        for (int b = 0; b < QJIT_DTYPE_COUNT; b++)
            for (int sa = 0; sa < QJIT_SCALE_COUNT; sa++)
                for (int sb = 0; sb < QJIT_SCALE_COUNT; sb++) {
                    qjit_gemm_desc d;
                    qjit_gemm_desc_init(&d);
                    d.a = (qjit_dtype)a;
                    d.b = (qjit_dtype)b;
                    d.sa = (qjit_scale_mode)sa;
                    d.sb = (qjit_scale_mode)sb;
                    d.out = QJIT_DTYPE_BF16;
                    if (sa == QJIT_SCALE_GROUP || sb == QJIT_SCALE_GROUP)
                        d.group = 128;
                    if (sb == QJIT_SCALE_GROUP)
                        d.group_scale = QJIT_DTYPE_F16;
                    bool want = pair_allowed(d.a, d.b, d.sa, d.sb);
                    qjit_status st = qjit_gemm_desc_validate(&d);
                    if ((st == QJIT_OK) != want) {
                        if (mismatches++ < 10)
                            fprintf(stderr, "pair table: a=%s b=%s sa=%s sb=%s: want %s, got "
                                            "%s: %s\n",
                                    qjit_desc_dtype_name(d.a), qjit_desc_dtype_name(d.b),
                                    mode_names[sa], mode_names[sb], want ? "ok" : "error",
                                    qjit_status_string(st), qjit_last_error());
                    }
                    if (st != QJIT_OK)
                        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT &&
                                  contains(qjit_last_error(), "field '"),
                              "a rejection must name a field: %s", qjit_last_error());
                    accepted += st == QJIT_OK;
                }
    CHECK(mismatches == 0, "%d combinations disagree with DESIGN.md's pair list", mismatches);
    /* 1+1 + 2*2*2 + 2*2 + 2*2 + 2 + 2*3*3 + 1 + 1 + 2 */
    CHECK(accepted == 42, "accepted %d combinations, want 42", accepted);
}

/* Valid descriptors in the text form: each must validate, and round-trip. */
static const char *const valid_texts[] = {
    "gemm",
    "gemm a=bf16 b=bf16 out=f32 bias=1 arch=sm_90a kernel=mma tile=128x256x32 warps=2x4 "
    "stages=3 split=1",
    "gemm a=f16 b=f16 tile=16x16x16 warps=1x1 stages=2 split=64",
    "gemm a=f16 b=f16 tile=256x256x128 warps=4x4 stages=6",
    "gemm a=f16 b=f16 tile=256x128x32",               /* warps auto */
    "gemm a=f16 b=f16 warps=8x2",                     /* tile auto */
    "gemm a=bf16 b=u4 sb=group:32 gs=f32 zeros=1",
    "gemm a=bf16 b=u4 sb=group:256 gs=bf16 zeros=0",
    "gemm a=f16 b=s4 sb=group:64",
    "gemm a=f16 b=u4 sb=col",
    "gemm a=bf16 b=s8 sb=tensor out=bf16",
    "gemm a=s8 b=s8 sa=tensor sb=tensor out=f32",
    "gemm a=s8 b=s4 sa=row sb=group:128 gs=bf16 out=bf16",
    "gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16 arch=sm_89",
    "gemm a=e5m2 b=e4m3 sa=block sb=block out=f32",
    "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16",
    "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=f16",
    "gemm a=f16 b=e2m1 sb=mx",
    "gemm arch=sm_86 kernel=auto",
};

static void test_valid(void)
{
    for (size_t i = 0; i < sizeof valid_texts / sizeof valid_texts[0]; i++) {
        qjit_gemm_desc d, e;
        char buf[256];
        CHECK_OK(qjit_gemm_desc_parse(valid_texts[i], &d));
        qjit_status st = qjit_gemm_desc_validate(&d);
        CHECK(st == QJIT_OK, "'%s' -> %s: %s", valid_texts[i], qjit_status_string(st),
              qjit_last_error());
        CHECK_OK(qjit_gemm_desc_format(&d, buf, sizeof buf, NULL));
        CHECK_OK(qjit_gemm_desc_parse(buf, &e));
        CHECK(desc_equal(&d, &e), "round trip of '%s'", buf);
    }
    CHECK(qjit_gemm_desc_validate(NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL desc");
}

/* A descriptor that validates, changed one field at a time by the cases below. */
static qjit_gemm_desc base(void)
{
    qjit_gemm_desc d;
    qjit_gemm_desc_init(&d);
    d.a = QJIT_DTYPE_BF16;
    d.b = QJIT_DTYPE_BF16;
    d.out = QJIT_DTYPE_BF16;
    d.arch = QJIT_ARCH_SM90A;
    d.kernel = QJIT_KERNEL_MMA;
    d.bm = 128, d.bn = 128, d.bk = 32;
    d.wm = 2, d.wn = 2;
    d.stages = 4;
    d.split_k = 1;
    return d;
}

static qjit_gemm_desc w4(qjit_dtype b, int group)
{
    qjit_gemm_desc d = base();
    d.b = b;
    d.sb = QJIT_SCALE_GROUP;
    d.group = group;
    d.group_scale = QJIT_DTYPE_BF16;
    return d;
}

static qjit_gemm_desc pair(qjit_dtype a, qjit_dtype b, qjit_scale_mode sa, qjit_scale_mode sb)
{
    qjit_gemm_desc d = base();
    d.a = a, d.b = b, d.sa = sa, d.sb = sb;
    return d;
}

static void expect_invalid(qjit_gemm_desc d, const char *field, const char *value, int line)
{
    qjit_gemm_desc copy = d;
    qjit_status st = qjit_gemm_desc_validate(&d);
    const char *msg = qjit_last_error();
    char f[64];
    snprintf(f, sizeof f, "field '%s'", field);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT, "line %d: -> %s (want invalid %s=%s)", line,
          qjit_status_string(st), field, value);
    CHECK(contains(msg, f), "line %d: message lacks \"%s\": %s", line, f, msg);
    CHECK(contains(msg, value), "line %d: message lacks the value \"%s\": %s", line, value, msg);
    CHECK(memcmp(&copy, &d, sizeof d) == 0, "line %d: validate changed the descriptor", line);
}
#define INVALID(expr, field, value)                                                      \
    do {                                                                                 \
        qjit_gemm_desc d_ = base();                                                      \
        expr;                                                                            \
        expect_invalid(d_, field, value, __LINE__);                                      \
    } while (0)
#define INVALID_D(desc, field, value) expect_invalid(desc, field, value, __LINE__)

static void test_invalid(void)
{
    /* An all-zero struct has a=none: not a descriptor (init is needed). */
    qjit_gemm_desc zero;
    memset(&zero, 0, sizeof zero);
    CHECK(qjit_gemm_desc_validate(&zero) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "'none'"),
          "all-zero struct: %s", qjit_last_error());
    qjit_gemm_desc ok = base();
    CHECK_OK(qjit_gemm_desc_validate(&ok));

    /* enum ranges */
    INVALID(d_.a = (qjit_dtype)99, "a", "99");
    INVALID(d_.b = (qjit_dtype)-1, "b", "-1");
    INVALID(d_.out = (qjit_dtype)11, "out", "11");
    INVALID(d_.group_scale = (qjit_dtype)42, "gs", "42");
    INVALID(d_.sa = (qjit_scale_mode)7, "sa", "7");
    INVALID(d_.sb = (qjit_scale_mode)-3, "sb", "-3");
    INVALID(d_.arch = (qjit_arch)75, "arch", "75");
    {
        /* one past every family this build has (the named ones and those of later ids) */
        char count[16];
        snprintf(count, sizeof count, "%d", (int)QJIT_FAMILY_ID_LIMIT);
        INVALID(d_.kernel = (qjit_kernel)QJIT_FAMILY_ID_LIMIT, "kernel", count);
        INVALID(d_.kernel = (qjit_kernel)-1, "kernel", "-1");
    }
    INVALID(d_.bias = 2, "bias", "2");
    INVALID(d_.bias = -1, "bias", "-1");

    /* types per role */
    INVALID(d_.out = QJIT_DTYPE_S8, "out", "s8");
    INVALID(d_.out = QJIT_DTYPE_E4M3, "out", "e4m3");
    INVALID(d_.out = QJIT_DTYPE_NONE, "out", "none");
    INVALID(d_.a = QJIT_DTYPE_S4, "a", "s4");
    INVALID(d_.a = QJIT_DTYPE_U4, "a", "u4");
    INVALID(d_.a = QJIT_DTYPE_F32, "a", "f32");
    INVALID(d_.a = QJIT_DTYPE_E8M0, "a", "e8m0");
    INVALID(d_.a = QJIT_DTYPE_NONE, "a", "none");
    INVALID(d_.b = QJIT_DTYPE_F32, "b", "f32");
    INVALID(d_.b = QJIT_DTYPE_E8M0, "b", "e8m0");
    INVALID(d_.b = QJIT_DTYPE_NONE, "b", "none");

    /* pairs DESIGN.md does not list */
    INVALID(d_.a = QJIT_DTYPE_F16, "b", "bf16"); /* f16 x bf16 */
    INVALID(d_.b = QJIT_DTYPE_E4M3, "b", "e4m3");
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_F16, QJIT_SCALE_ROW, QJIT_SCALE_COL), "b", "f16");
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_U4, QJIT_SCALE_ROW, QJIT_SCALE_COL), "b", "u4");
    INVALID_D(pair(QJIT_DTYPE_E5M2, QJIT_DTYPE_E5M2, QJIT_SCALE_ROW, QJIT_SCALE_COL), "b",
              "e5m2");
    INVALID_D(pair(QJIT_DTYPE_E2M1, QJIT_DTYPE_E4M3, QJIT_SCALE_MX, QJIT_SCALE_MX), "b",
              "e4m3");
    INVALID_D(pair(QJIT_DTYPE_E4M3, QJIT_DTYPE_E2M1, QJIT_SCALE_MX, QJIT_SCALE_MX), "b",
              "e2m1");

    /* modes on the wrong side */
    INVALID(d_.sa = QJIT_SCALE_COL, "sa", "col");
    INVALID((d_.sa = QJIT_SCALE_GROUP, d_.group = 128), "sa", "group:128");
    INVALID(d_.sb = QJIT_SCALE_ROW, "sb", "row");

    /* modes per pair */
    INVALID(d_.sa = QJIT_SCALE_TENSOR, "sa", "tensor");    /* bf16 x bf16 takes none */
    INVALID(d_.sb = QJIT_SCALE_COL, "sb", "col");
    INVALID(d_.sb = QJIT_SCALE_MX, "sb", "mx");
    INVALID_D(pair(QJIT_DTYPE_F16, QJIT_DTYPE_S4, QJIT_SCALE_NONE, QJIT_SCALE_NONE), "sb",
              "none");
    INVALID_D(pair(QJIT_DTYPE_F16, QJIT_DTYPE_U4, QJIT_SCALE_NONE, QJIT_SCALE_TENSOR), "sb",
              "tensor");
    INVALID_D(pair(QJIT_DTYPE_BF16, QJIT_DTYPE_S4, QJIT_SCALE_ROW, QJIT_SCALE_COL), "sa", "row");
    INVALID_D(pair(QJIT_DTYPE_BF16, QJIT_DTYPE_S8, QJIT_SCALE_NONE, QJIT_SCALE_BLOCK), "sb",
              "block");
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_S8, QJIT_SCALE_NONE, QJIT_SCALE_COL), "sa", "none");
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_S8, QJIT_SCALE_ROW, QJIT_SCALE_NONE), "sb", "none");
    INVALID_D(w4(QJIT_DTYPE_S8, 128), "sb", "group:128"); /* W8A16 has no group mode */
    {
        qjit_gemm_desc d = w4(QJIT_DTYPE_S8, 128);
        d.a = QJIT_DTYPE_S8;
        d.sa = QJIT_SCALE_ROW;
        INVALID_D(d, "sb", "group:128"); /* W8A8 neither */
    }
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_S4, QJIT_SCALE_TENSOR, QJIT_SCALE_COL), "sa",
              "tensor");
    INVALID_D(pair(QJIT_DTYPE_S8, QJIT_DTYPE_S4, QJIT_SCALE_ROW, QJIT_SCALE_TENSOR), "sb",
              "tensor");
    INVALID_D(pair(QJIT_DTYPE_E4M3, QJIT_DTYPE_E4M3, QJIT_SCALE_NONE, QJIT_SCALE_COL), "sa",
              "none");
    INVALID_D(pair(QJIT_DTYPE_E4M3, QJIT_DTYPE_E4M3, QJIT_SCALE_ROW, QJIT_SCALE_MX), "sb",
              "mx");
    INVALID_D(pair(QJIT_DTYPE_E4M3, QJIT_DTYPE_E4M3, QJIT_SCALE_MX, QJIT_SCALE_COL), "sb",
              "col"); /* mx on one side needs mx on the other */
    INVALID_D(pair(QJIT_DTYPE_E5M2, QJIT_DTYPE_E4M3, QJIT_SCALE_MX, QJIT_SCALE_MX), "sa", "mx");
    INVALID_D(pair(QJIT_DTYPE_E2M1, QJIT_DTYPE_E2M1, QJIT_SCALE_ROW, QJIT_SCALE_COL), "sa",
              "row");
    INVALID_D(pair(QJIT_DTYPE_E2M1, QJIT_DTYPE_E2M1, QJIT_SCALE_MX, QJIT_SCALE_NONE), "sb",
              "none");
    INVALID_D(pair(QJIT_DTYPE_F16, QJIT_DTYPE_E2M1, QJIT_SCALE_NONE, QJIT_SCALE_COL), "sb", "col");
    INVALID_D(pair(QJIT_DTYPE_F16, QJIT_DTYPE_E2M1, QJIT_SCALE_MX, QJIT_SCALE_MX), "sa", "mx");

    /* group mode */
    {
        qjit_gemm_desc g = w4(QJIT_DTYPE_U4, 128);
        g.zeros = 1;
        CHECK_OK(qjit_gemm_desc_validate(&g));
    }
    INVALID_D(w4(QJIT_DTYPE_S4, 100), "sb", "group:100");
    INVALID_D(w4(QJIT_DTYPE_S4, 16), "sb", "group:16");
    INVALID_D(w4(QJIT_DTYPE_S4, 512), "sb", "group:512");
    INVALID_D(w4(QJIT_DTYPE_S4, 0), "sb", "group:0");
    {
        qjit_gemm_desc d = w4(QJIT_DTYPE_S4, 128);
        d.group_scale = QJIT_DTYPE_S8;
        INVALID_D(d, "gs", "s8");
        d.group_scale = QJIT_DTYPE_NONE;
        INVALID_D(d, "gs", "none");
        d.group_scale = QJIT_DTYPE_E8M0;
        INVALID_D(d, "gs", "e8m0");
    }
    {
        qjit_gemm_desc d = w4(QJIT_DTYPE_U4, 128);
        d.zeros = 2;
        INVALID_D(d, "zeros", "2");
        d = w4(QJIT_DTYPE_S4, 128);
        d.zeros = 1;
        INVALID_D(d, "zeros", "s4"); /* zero points are for u4 only */
    }
    /* group fields set without group mode */
    INVALID(d_.group = 128, "group", "128");
    INVALID(d_.group_scale = QJIT_DTYPE_F16, "gs", "f16");
    INVALID(d_.zeros = 1, "zeros", "1");

    /* tile */
    INVALID(d_.bn = 0, "tile", "128x0x32");
    INVALID((d_.bm = 0, d_.bn = 0), "tile", "0x0x32");
    INVALID(d_.bm = 20, "tile", "20x128x32");
    INVALID(d_.bm = 272, "tile", "272x128x32");
    INVALID(d_.bm = -16, "tile", "-16x128x32");
    INVALID(d_.bn = 8, "tile", "128x8x32");
    INVALID(d_.bn = 512, "tile", "128x512x32");
    INVALID(d_.bk = 144, "tile", "128x128x144");
    INVALID(d_.bk = 40, "tile", "128x128x40");
    /* warps */
    INVALID(d_.wm = 0, "warps", "0x2");
    INVALID(d_.wn = 9, "warps", "2x9");
    INVALID(d_.wm = -1, "warps", "-1x2");
    INVALID((d_.bm = 256, d_.bn = 256, d_.wm = 8, d_.wn = 4), "warps", "8x4"); /* 32 warps */
    /* warps that do not split the tile are the family's to refuse (test_variants) */
    /* stages and split */
    INVALID(d_.stages = 1, "stages", "1");
    INVALID(d_.stages = 33, "stages", "33");
    INVALID(d_.stages = -2, "stages", "-2");
    INVALID(d_.split_k = 65, "split", "65");
    INVALID(d_.split_k = -1, "split", "-1");

    /* The canonical text of the rejected descriptor is in the message. */
    qjit_gemm_desc d = base();
    d.stages = 40;
    qjit_gemm_desc_validate(&d);
    CHECK(contains(qjit_last_error(), "gemm a=bf16 b=bf16 sa=none sb=none out=bf16 bias=0 "
                                      "arch=sm_90a kernel=mma tile=128x128x32 warps=2x2 "
                                      "stages=40 split=1"),
          "message lacks the descriptor: %s", qjit_last_error());
}

/* ---------------------------------------------------------------- manifest lines */

static void test_manifest_line(void)
{
    qjit_gemm_desc want;
    qjit_manifest_item it;

    /* blanks and comments only */
    const char *blank[] = {"", "   ", "\t\r\n", "# a comment", "   # gemm a=bf16", "#"};
    for (size_t i = 0; i < sizeof blank / sizeof blank[0]; i++) {
        memset(&it, 0x5a, sizeof it);
        CHECK(qjit_manifest_line(blank[i], &it) == QJIT_ERROR_NOT_FOUND,
              "'%s' not blank: %s", blank[i], qjit_last_error());
        CHECK(it.kind == 0x5a5a5a5a, "blank line '%s' wrote the item", blank[i]);
    }

    /* a descriptor, with the comment and line end cut off */
    CHECK_OK(qjit_gemm_desc_parse("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", &want));
    CHECK_OK(qjit_manifest_line("  gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16  # W4A16\r\n",
                                &it));
    CHECK(it.kind == QJIT_MANIFEST_GEMM && desc_equal(&it.gemm, &want) && it.sweep[0] == 0,
          "plain line: kind %d sweep '%s'", it.kind, it.sweep);

    /* sweep= anywhere on the line, taken out before parsing */
    const char *swept[] = {"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 sweep=decode",
                           "gemm sweep=decode a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16",
                           "gemm a=bf16 b=s4\tsweep=decode\tsb=group:128 gs=bf16 out=bf16\n"};
    for (size_t i = 0; i < 3; i++) {
        memset(&it, 0, sizeof it);
        CHECK_OK(qjit_manifest_line(swept[i], &it));
        CHECK(desc_equal(&it.gemm, &want) && strcmp(it.sweep, "decode") == 0, "'%s': sweep '%s'",
              swept[i], it.sweep);
    }

    /* quantization kernels */
    CHECK_OK(qjit_manifest_line("quant in=bf16 out=e4m3 scale=mx rule=rceil # MXFP8 acts", &it));
    CHECK(it.kind == QJIT_MANIFEST_QUANT && it.quant.out == QJIT_DTYPE_E4M3 &&
              it.quant.scale == QJIT_SCALE_MX && it.quant.rule == QJIT_MX_RULE_RCEIL,
          "quant line: kind %d", it.kind);

    /* errors name what is wrong and write nothing */
    struct { const char *line, *need; qjit_status s; } bad[] = {
        {"gemm a=bf16 sweep=a sweep=b", "twice", QJIT_ERROR_INVALID_ARGUMENT},
        {"gemm a=bf16 sweep=", "names no sweep", QJIT_ERROR_INVALID_ARGUMENT},
        {"gemm a=bf16 sweep=a_name_far_too_long_for_the_sixty_four_bytes_that_the_item_holds",
         "longer than 63", QJIT_ERROR_INVALID_ARGUMENT},
        {"gemm a=bf16 b=s4 out=bf16 # no group scale", "sb", QJIT_ERROR_INVALID_ARGUMENT},
        {"gemm a=bf17", "bf17", QJIT_ERROR_INVALID_ARGUMENT},
        {"sweep=decode", "gemm", QJIT_ERROR_INVALID_ARGUMENT},
        {"gemm a=bf16 xsweep=decode", "xsweep", QJIT_ERROR_INVALID_ARGUMENT},
        {"quant out=e4m3 sweep=default", "gemm lines", QJIT_ERROR_INVALID_ARGUMENT},
        {"quant out=s8 scale=mx", "scale=mx", QJIT_ERROR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&it, 0x5a, sizeof it);
        qjit_status st = qjit_manifest_line(bad[i].line, &it);
        CHECK(st == bad[i].s && contains(qjit_last_error(), bad[i].need),
              "'%s' -> %s: %s", bad[i].line, qjit_status_string(st), qjit_last_error());
        CHECK(it.kind == 0x5a5a5a5a, "'%s' wrote the item", bad[i].line);
    }
    CHECK(qjit_manifest_line(NULL, &it) == QJIT_ERROR_INVALID_ARGUMENT, "NULL line accepted");
    CHECK(qjit_manifest_line("gemm", NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL item accepted");

    /* every line of the shipped manifests reads */
    const char *manifests[] = {"default.txt", "llama3-8b.txt", "llama3-70b.txt"};
    for (size_t i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/cache/manifests/%s", QJIT_SOURCE_DIR, manifests[i]);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "cannot open %s", path);
        if (!f)
            continue;
        char line[4096];
        int descs = 0;
        while (fgets(line, sizeof line, f)) {
            qjit_status st = qjit_manifest_line(line, &it);
            CHECK(st == QJIT_OK || st == QJIT_ERROR_NOT_FOUND, "%s: '%s': %s", manifests[i],
                  line, qjit_last_error());
            descs += st == QJIT_OK;
        }
        fclose(f);
        CHECK(descs > 0, "%s holds no descriptor", manifests[i]);
    }
}

int main(void)
{
    test_names();
    test_init();
    test_text_round_trip();
    test_canonicalization();
    test_struct_round_trip();
    test_format_buffers();
    test_parse_errors();
    test_pair_table();
    test_valid();
    test_invalid();
    test_manifest_line();
    return tl_finish("test_desc");
}
