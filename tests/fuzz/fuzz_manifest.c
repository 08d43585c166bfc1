/*
 * fuzz_manifest.c — libFuzzer harness for the manifest line reader (qjit_manifest_line).
 *
 * A line that reads gives a valid GEMM descriptor with a sweep name taken from the line,
 * or a valid quantization descriptor; either written back as a line reads to the same
 * result.  A line
 * called blank has nothing but blanks before its first '#'.  A rejected line leaves the
 * outputs untouched and says why.  Any broken property aborts.
 */
#include "qjit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c)                                                                       \
    do {                                                                                 \
        if (!(c))                                                                        \
            abort();                                                                     \
    } while (0)

static int blank_before_hash(const char *s)
{
    for (; *s && *s != '#'; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size + 1);
    if (!line)
        return 0;
    memcpy(line, data, size);
    line[size] = 0;

    qjit_manifest_item it, untouched;
    memset(&it, 0x5a, sizeof it);
    untouched = it;
    qjit_status s = qjit_manifest_line(line, &it);
    if (s == QJIT_ERROR_NOT_FOUND) {
        REQUIRE(blank_before_hash(line));
    } else if (s != QJIT_OK) {
        REQUIRE(s == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error());
        REQUIRE(!blank_before_hash(line));
    }
    if (s != QJIT_OK) {
        REQUIRE(memcmp(&it, &untouched, sizeof it) == 0);
        free(line);
        return 0;
    }
    char text[1024], again[1200], text2[1024];
    qjit_manifest_item back;
    if (it.kind == QJIT_MANIFEST_QUANT) {
        REQUIRE(qjit_quant_desc_validate(&it.quant) == QJIT_OK);
        REQUIRE(qjit_quant_desc_format(&it.quant, text, sizeof text, NULL) == QJIT_OK);
        snprintf(again, sizeof again, "%s # written back", text);
        REQUIRE(qjit_manifest_line(again, &back) == QJIT_OK && back.kind == QJIT_MANIFEST_QUANT);
        REQUIRE(qjit_quant_desc_format(&back.quant, text2, sizeof text2, NULL) == QJIT_OK);
        REQUIRE(strcmp(text, text2) == 0);
        free(line);
        return 0;
    }
    REQUIRE(it.kind == QJIT_MANIFEST_GEMM);
    REQUIRE(memchr(it.sweep, 0, sizeof it.sweep) != NULL);
    REQUIRE(qjit_gemm_desc_validate(&it.gemm) == QJIT_OK);
    if (*it.sweep) {
        char token[80];
        snprintf(token, sizeof token, "sweep=%s", it.sweep);
        REQUIRE(strstr(line, token) != NULL);
    }
    REQUIRE(qjit_gemm_desc_format(&it.gemm, text, sizeof text, NULL) == QJIT_OK);
    /* written back as "<canonical text> sweep=<name> # comment" */
    snprintf(again, sizeof again, "%s%s%s # written back", text, *it.sweep ? " sweep=" : "",
             it.sweep);
    REQUIRE(qjit_manifest_line(again, &back) == QJIT_OK && back.kind == QJIT_MANIFEST_GEMM);
    REQUIRE(strcmp(it.sweep, back.sweep) == 0);
    REQUIRE(qjit_gemm_desc_format(&back.gemm, text2, sizeof text2, NULL) == QJIT_OK);
    REQUIRE(strcmp(text, text2) == 0);
    free(line);
    return 0;
}
