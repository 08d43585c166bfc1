/*
 * test_quant_desc.c — the quantization kernel descriptor and its build path, with no
 * GPU: text round trips and canonical form, one rejection per parse error and per
 * validation rule, and every valid (in, out, scale, rule) compiled by NVRTC for sm_90a
 * (and the int ones for sm_80) into a cache, found there again by a second precompile,
 * and listed by the cache with its text.
 */
#include "qjit.h"
#include "testlib.h"

#include <stdbool.h>
#include <string.h>

static bool contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_text(void)
{
    qjit_quant_desc d, e;
    qjit_quant_desc_init(&d);
    char buf[256];
    CHECK_OK(qjit_quant_desc_format(&d, buf, sizeof buf, NULL));
    CHECK(strcmp(buf, "quant in=bf16 out=s8 scale=row arch=auto") == 0, "default: %s", buf);
    struct { const char *in, *canon; } cases[] = {
        {"quant", "quant in=bf16 out=s8 scale=row arch=auto"},
        {"  quant out=e4m3 in=f16\tscale=tensor arch=sm_90a\n",
         "quant in=f16 out=e4m3 scale=tensor arch=sm_90a"},
        {"quant in=f32 out=e4m3 scale=block", "quant in=f32 out=e4m3 scale=block arch=auto"},
        {"quant out=e4m3 scale=mx rule=rceil", "quant in=bf16 out=e4m3 scale=mx rule=rceil arch=auto"},
        {"quant out=e2m1 scale=mx", "quant in=bf16 out=e2m1 scale=mx rule=floor arch=auto"},
        {"quant out=s4 arch=sm_80", "quant in=bf16 out=s4 scale=row arch=sm_80"},
        {"quant layout=cols out=e4m3 scale=mx", "quant in=bf16 out=e4m3 scale=mx rule=floor arch=auto layout=cols"},
        {"quant out=e2m1 scale=mx layout=rows", "quant in=bf16 out=e2m1 scale=mx rule=floor arch=auto"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_OK(qjit_quant_desc_parse(cases[i].in, &d));
        CHECK_OK(qjit_quant_desc_format(&d, buf, sizeof buf, NULL));
        CHECK(strcmp(buf, cases[i].canon) == 0, "'%s' -> '%s'", cases[i].in, buf);
        CHECK_OK(qjit_quant_desc_parse(buf, &e));
        CHECK(memcmp(&d, &e, sizeof d) == 0, "'%s' does not round-trip", buf);
        CHECK_OK(qjit_quant_desc_validate(&d));
    }
    size_t len = 0;
    CHECK(qjit_quant_desc_format(&d, buf, 10, &len) == QJIT_ERROR_INVALID_ARGUMENT &&
              len == strlen(cases[7].canon) && buf[0] == 0,
          "short buffer: len %zu", len);

    struct { const char *text, *need; } bad[] = {
        {"gemm a=bf16", "'quant'"},
        {"quant in=s8", "'in'"},
        {"quant out=bf16", "'out'"},
        {"quant scale=col", "'scale'"},
        {"quant scale=group:128", "'scale'"},
        {"quant rule=round scale=mx out=e4m3", "'rule'"},
        {"quant arch=sm_99", "sm_99"},
        {"quant in=bf16 in=f16", "twice"},
        {"quant colour=red", "colour"},
        {"quant out", "field=value"},
        {"quant rule=rceil", "scale=mx only"},
        {"quant layout=diagonal", "'layout'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&d, 0x5a, sizeof d);
        qjit_status st = qjit_quant_desc_parse(bad[i].text, &d);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), bad[i].need),
              "'%s' -> %s: %s", bad[i].text, qjit_status_string(st), qjit_last_error());
        CHECK(((unsigned char *)&d)[0] == 0x5a, "'%s' wrote the descriptor", bad[i].text);
    }

    struct { const char *text, *need; } invalid[] = {
        {"quant out=s8 scale=mx", "scale=mx"},
        {"quant out=e2m1 scale=row", "needs scale=mx"},
        {"quant out=s8 scale=block", "1x128"},
        {"quant out=e4m3 arch=sm_80", "sm_89"},
        {"quant out=e4m3 scale=mx arch=sm_86", "sm_89"},
        {"quant out=s8 scale=row layout=cols", "needs scale=mx"},
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        CHECK_OK(qjit_quant_desc_parse(invalid[i].text, &d));
        qjit_status st = qjit_quant_desc_validate(&d);
        CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), invalid[i].need),
              "'%s' -> %s: %s", invalid[i].text, qjit_status_string(st), qjit_last_error());
    }
    qjit_quant_desc_init(&d);
    d.rule = QJIT_MX_RULE_RCEIL; /* a struct can say what the text cannot */
    CHECK(qjit_quant_desc_validate(&d) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "rule"),
          "rule without mx: %s", qjit_last_error());
    d.rule = QJIT_MX_RULE_FLOOR;
    d.in = QJIT_DTYPE_S8;
    CHECK(qjit_quant_desc_validate(&d) == QJIT_ERROR_INVALID_ARGUMENT &&
              contains(qjit_last_error(), "'in'"),
          "in=s8: %s", qjit_last_error());
}

static int count_rows(void *user, const qjit_cache_entry *e)
{
    int *n = user;
    *n += strncmp(e->desc, "quant ", 6) == 0;
    return 0;
}

static void test_compile(void)
{
    qjit_options o;
    qjit_options_init(&o);
    o.cache_dir = tl_tmpdir("quant-desc");
    qjit_context *ctx;
    CHECK_OK(qjit_context_create(&o, &ctx));
    static const char *const ins[] = {"f16", "bf16", "f32"};
    static const char *const combos[] = {
        "out=s8 scale=row",    "out=s4 scale=row",    "out=e4m3 scale=row",
        "out=s8 scale=tensor", "out=s4 scale=tensor", "out=e4m3 scale=tensor",
        "out=e4m3 scale=block", "out=e4m3 scale=mx rule=floor", "out=e4m3 scale=mx rule=rceil",
        "out=e2m1 scale=mx rule=floor", "out=e2m1 scale=mx rule=rceil",
        "out=e4m3 scale=mx rule=floor layout=cols", "out=e4m3 scale=mx rule=rceil layout=cols",
        "out=e2m1 scale=mx rule=floor layout=cols", "out=e2m1 scale=mx rule=rceil layout=cols",
    };
    const int ncombos = (int)(sizeof combos / sizeof combos[0]);
    int compiled = 0;
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < ncombos; c++) {
            char text[256];
            snprintf(text, sizeof text, "quant in=%s %s", ins[i], combos[c]);
            qjit_quant_desc d;
            CHECK_OK(qjit_quant_desc_parse(text, &d));
            int cached = -1;
            qjit_status st = qjit_quant_precompile(ctx, &d, QJIT_ARCH_SM90A, &cached);
            CHECK(st == QJIT_OK && cached == 0, "%s for sm_90a: %s", text, qjit_last_error());
            compiled += st == QJIT_OK;
            /* the int and e2m1 ones run on sm_80 too; e4m3 is refused there */
            bool fp8 = strstr(combos[c], "e4m3") != NULL;
            st = qjit_quant_precompile(ctx, &d, QJIT_ARCH_SM80, &cached);
            if (fp8)
                CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), "sm_89"),
                      "%s for sm_80: %s", text, qjit_status_string(st));
            else
                CHECK(st == QJIT_OK, "%s for sm_80: %s", text, qjit_last_error());
            compiled += st == QJIT_OK;
        }
    /* everything is cached now, and listed with its text */
    qjit_quant_desc d;
    CHECK_OK(qjit_quant_desc_parse("quant in=bf16 out=e4m3 scale=mx rule=rceil", &d));
    int cached = 0;
    CHECK_OK(qjit_quant_precompile(ctx, &d, QJIT_ARCH_SM90A, &cached));
    CHECK(cached == 1, "a second precompile compiled again");
    qjit_stats s;
    qjit_context_stats(ctx, &s);
    CHECK(s.compiles == (uint64_t)compiled, "%llu compiles for %d kernels",
          (unsigned long long)s.compiles, compiled);
    qjit_cache_info ci;
    qjit_context_cache_info(ctx, &ci);
    qjit_cache_db *db;
    CHECK_OK(qjit_cache_db_open(ci.path, 0, &db));
    int rows = 0;
    CHECK_OK(qjit_cache_db_list(db, NULL, count_rows, &rows));
    CHECK(rows == compiled, "%d quant rows listed, %d compiled", rows, compiled);
    qjit_cache_verify_report rep;
    CHECK_OK(qjit_cache_db_verify(db, 0, NULL, NULL, &rep));
    CHECK(rep.integrity_ok && rep.rows_bad == 0, "verify: %llu bad", (unsigned long long)rep.rows_bad);
    qjit_cache_db_close(db);

    /* arch=auto with nothing to take it from */
    CHECK_OK(qjit_quant_desc_parse("quant", &d));
    qjit_status st = qjit_quant_precompile(ctx, &d, QJIT_ARCH_AUTO, NULL);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && contains(qjit_last_error(), "arch"),
          "auto arch: %s", qjit_last_error());
    qjit_context_destroy(ctx);
}

/* Without a GPU: gets are refused with a clear status, launches of nothing too. */
static void test_no_gpu(void)
{
    qjit_quant_desc d;
    qjit_quant *q = NULL;
    CHECK_OK(qjit_quant_desc_parse("quant in=bf16 out=s8", &d));
    qjit_status st = qjit_context_get_quant(NULL, &d, NULL, &q);
    if (st == QJIT_OK) {
        printf("test_quant_desc: a GPU is visible; its part is test_gpu_quant_kernels'\n");
    } else {
        CHECK(st == QJIT_ERROR_NO_DEVICE && q == NULL && *qjit_last_error(),
              "get without a GPU: %s: %s", qjit_status_string(st), qjit_last_error());
    }
    qjit_quant_args a;
    memset(&a, 0, sizeof a);
    CHECK(qjit_quant_launch(NULL, &a, NULL) == QJIT_ERROR_INVALID_ARGUMENT, "NULL handle launched");
    CHECK(qjit_context_get_quant(NULL, NULL, NULL, &q) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL descriptor accepted");
    qjit_linear_args la;
    memset(&la, 0, sizeof la);
    CHECK(qjit_linear_launch(NULL, NULL, &la, NULL) == QJIT_ERROR_INVALID_ARGUMENT,
          "NULL linear accepted");
    CHECK(qjit_quant_get_desc(NULL, &d, NULL, 0) == QJIT_ERROR_INVALID_ARGUMENT, "NULL get_desc");
    d.in = QJIT_DTYPE_S4; /* invalid: refused before any device work */
    st = qjit_context_get_quant(NULL, &d, NULL, &q);
    CHECK(st == QJIT_ERROR_INVALID_ARGUMENT && strstr(qjit_last_error(), "'in'"),
          "bad descriptor: %s: %s", qjit_status_string(st), qjit_last_error());
}

int main(void)
{
    test_text();
    test_compile();
    test_no_gpu();
    return tl_finish("test_quant_desc");
}
