/*
 * fuzz_desc.c — libFuzzer harness for the GEMM descriptor text form.
 *
 * Text input (read as a GEMM descriptor and as a quantization descriptor): whatever
 * qjit_gemm_desc_parse or qjit_quant_desc_parse accepts must format, parse back to the
 * same descriptor and format to the same text; validation of the two must agree; what
 * it rejects must leave *d untouched and say why.  Input starting with a zero byte:
 * the rest is taken as a raw qjit_gemm_desc (any bit pattern a caller could pass) and
 * validate and format must answer without reading out of bounds.
 * Any broken property aborts, which libFuzzer reports as a crash with its input.
 */
#include "qjit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c)                                                                       \
    do {                                                                                 \
        if (!(c))                                                                        \
            abort();                                                                     \
    } while (0)

static int same(const qjit_gemm_desc *x, const qjit_gemm_desc *y)
{
    return x->a == y->a && x->b == y->b && x->out == y->out && x->sa == y->sa &&
           x->sb == y->sb && x->group == y->group && x->group_scale == y->group_scale &&
           x->zeros == y->zeros && x->bias == y->bias && x->arch == y->arch &&
           x->kernel == y->kernel && x->bm == y->bm && x->bn == y->bn && x->bk == y->bk &&
           x->wm == y->wm && x->wn == y->wn && x->stages == y->stages &&
           x->split_k == y->split_k;
}

static void raw_struct(const uint8_t *data, size_t size)
{
    qjit_gemm_desc d;
    qjit_gemm_desc_init(&d);
    memcpy(&d, data, size < sizeof d ? size : sizeof d);
    qjit_status v = qjit_gemm_desc_validate(&d);
    REQUIRE(v == QJIT_OK || (v == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error()));
    char text[1024];
    size_t len = 0;
    qjit_status f = qjit_gemm_desc_format(&d, text, sizeof text, &len);
    REQUIRE(f == QJIT_OK || *qjit_last_error());
    REQUIRE(memchr(text, 0, sizeof text) != NULL);
    if (v == QJIT_OK) {
        /* a valid descriptor always has a text form, and it reads back */
        REQUIRE(f == QJIT_OK && strlen(text) == len);
        qjit_gemm_desc e;
        REQUIRE(qjit_gemm_desc_parse(text, &e) == QJIT_OK && same(&d, &e));
    }
}

/* The quantization descriptor's text: the same properties. */
static void quant_text(const char *text)
{
    qjit_quant_desc d, e, untouched;
    memset(&d, 0xa5, sizeof d);
    untouched = d;
    qjit_status s = qjit_quant_desc_parse(text, &d);
    if (s != QJIT_OK) {
        REQUIRE(s == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error());
        REQUIRE(memcmp(&d, &untouched, sizeof d) == 0);
        return;
    }
    char one[256], two[256];
    REQUIRE(qjit_quant_desc_format(&d, one, sizeof one, NULL) == QJIT_OK);
    REQUIRE(qjit_quant_desc_parse(one, &e) == QJIT_OK && memcmp(&d, &e, sizeof d) == 0);
    REQUIRE(qjit_quant_desc_format(&e, two, sizeof two, NULL) == QJIT_OK && !strcmp(one, two));
    qjit_status v = qjit_quant_desc_validate(&d);
    REQUIRE(v == QJIT_OK || (v == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error()));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == 0) {
        raw_struct(data + 1, size - 1);
        return 0;
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;

    quant_text(text);
    qjit_gemm_desc d, untouched;
    memset(&d, 0xa5, sizeof d);
    untouched = d;
    qjit_status s = qjit_gemm_desc_parse(text, &d);
    if (s != QJIT_OK) {
        REQUIRE(s == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error());
        REQUIRE(memcmp(&d, &untouched, sizeof d) == 0);
        free(text);
        return 0;
    }
    char one[1024], two[1024];
    size_t len = 0;
    REQUIRE(qjit_gemm_desc_format(&d, one, sizeof one, &len) == QJIT_OK);
    REQUIRE(strlen(one) == len);
    /* a buffer one byte short is refused, with the length still reported */
    char *shorter = malloc(len);
    if (shorter) {
        size_t need = 0;
        REQUIRE(qjit_gemm_desc_format(&d, shorter, len, &need) == QJIT_ERROR_INVALID_ARGUMENT);
        REQUIRE(need == len && memchr(shorter, 0, len) != NULL);
        free(shorter);
    }
    qjit_gemm_desc e;
    REQUIRE(qjit_gemm_desc_parse(one, &e) == QJIT_OK);
    REQUIRE(same(&d, &e));
    REQUIRE(qjit_gemm_desc_format(&e, two, sizeof two, NULL) == QJIT_OK);
    REQUIRE(strcmp(one, two) == 0);
    qjit_status v1 = qjit_gemm_desc_validate(&d), v2 = qjit_gemm_desc_validate(&e);
    REQUIRE(v1 == v2 && (v1 == QJIT_OK || v1 == QJIT_ERROR_INVALID_ARGUMENT));
    free(text);
    return 0;
}
