/*
 * fuzz_manifest.c — libFuzzer harness for the manifest line reader (qjit_manifest_line).
 *
 * A line that reads gives a valid descriptor and a sweep name taken from the line; the
 * same descriptor and name written back as a line read to the same result.  A line
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
    /* the first byte picks the sweep buffer size, so short buffers are exercised too */
    size_t cap = size ? (size_t)(data[0] % 40) + 1 : 16;
    if (size) {
        data++;
        size--;
    }
    char *line = malloc(size + 1);
    char *sweep = malloc(cap);
    if (!line || !sweep) {
        free(line);
        free(sweep);
        return 0;
    }
    memcpy(line, data, size);
    line[size] = 0;
    memset(sweep, 'x', cap);

    qjit_gemm_desc d, untouched;
    memset(&d, 0x5a, sizeof d);
    untouched = d;
    qjit_status s = qjit_manifest_line(line, &d, sweep, cap);
    if (s == QJIT_ERROR_NOT_FOUND) {
        REQUIRE(blank_before_hash(line));
    } else if (s != QJIT_OK) {
        REQUIRE(s == QJIT_ERROR_INVALID_ARGUMENT && *qjit_last_error());
        REQUIRE(!blank_before_hash(line));
    }
    if (s != QJIT_OK) {
        REQUIRE(memcmp(&d, &untouched, sizeof d) == 0 && sweep[0] == 'x');
        free(line);
        free(sweep);
        return 0;
    }
    REQUIRE(memchr(sweep, 0, cap) != NULL && strlen(sweep) < cap);
    REQUIRE(qjit_gemm_desc_validate(&d) == QJIT_OK);
    if (*sweep) {
        char token[64];
        snprintf(token, sizeof token, "sweep=%s", sweep);
        REQUIRE(strstr(line, token) != NULL);
    }
    char text[1024], again[1200];
    REQUIRE(qjit_gemm_desc_format(&d, text, sizeof text, NULL) == QJIT_OK);
    qjit_gemm_desc e;
    char sweep2[64];
    /* written back as "<canonical text> sweep=<name> # comment" */
    snprintf(again, sizeof again, "%s%s%s # written back", text, *sweep ? " sweep=" : "", sweep);
    REQUIRE(qjit_manifest_line(again, &e, sweep2, sizeof sweep2) == QJIT_OK);
    REQUIRE(strcmp(sweep, sweep2) == 0);
    char text2[1024];
    REQUIRE(qjit_gemm_desc_format(&e, text2, sizeof text2, NULL) == QJIT_OK);
    REQUIRE(strcmp(text, text2) == 0);
    free(line);
    free(sweep);
    return 0;
}
