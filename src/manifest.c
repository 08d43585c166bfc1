/*
 * manifest.c — one line of a manifest (cache/manifests/): a GEMM descriptor with an
 * optional sweep=NAME, or a quantization descriptor; '#' to the end of a line a comment.
 */
#include "qjit_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* A slice of the line. */
typedef struct span {
    const char *p;
    size_t n;
} span;

qjit_status qjit_manifest_line(const char *line, qjit_manifest_item *out)
{
    if (!line || !out)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "manifest line: NULL argument");
    size_t n = strcspn(line, "#");
    char *text = malloc(n + 1);
    if (!text)
        return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "manifest line: out of memory");
    memcpy(text, line, n);
    text[n] = 0;

    /* Find the sweep token (blanked below, so that the rest parses as a descriptor). */
    const size_t cap = sizeof out->sweep;
    span name = {NULL, 0}, head = {NULL, 0};
    qjit_status s = QJIT_OK;
    for (char *p = text; *p && s == QJIT_OK;) {
        while (qjit_is_blank(*p))
            p++;
        if (!*p)
            break;
        size_t len = 0;
        while (p[len] && !qjit_is_blank(p[len]))
            len++;
        if (!head.p)
            head = (span){p, len};
        if (len >= 6 && !memcmp(p, "sweep=", 6)) {
            if (name.p)
                s = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                 "manifest line: sweep= given twice in '%s'", text);
            else if (len == 6)
                s = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                 "manifest line: sweep= names no sweep in '%s'", text);
            else if (len - 6 >= cap)
                s = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                 "manifest line: sweep name '%.*s' is longer than %zu bytes",
                                 (int)(len - 6), p + 6, cap - 1);
            name = (span){p + 6, len - 6};
        }
        p += len;
    }
    if (s == QJIT_OK && !head.p)
        s = qjit_err_set(QJIT_ERROR_NOT_FOUND, "manifest line: blank");
    qjit_manifest_item t;
    memset(&t, 0, sizeof t);
    if (s == QJIT_OK && qjit_word_is(head.p, head.n, "quant")) {
        t.kind = QJIT_MANIFEST_QUANT;
        if (name.p)
            s = qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                             "manifest line: sweep= is for gemm lines, not '%s'", text);
        if (s == QJIT_OK)
            s = qjit_quant_desc_parse(text, &t.quant);
        if (s == QJIT_OK)
            s = qjit_quant_desc_validate(&t.quant);
    } else if (s == QJIT_OK) {
        t.kind = QJIT_MANIFEST_GEMM;
        if (name.p) {
            snprintf(t.sweep, cap, "%.*s", (int)name.n, name.p);
            memset((char *)name.p - 6, ' ', name.n + 6);
        }
        s = qjit_gemm_desc_parse(text, &t.gemm);
        if (s == QJIT_OK)
            s = qjit_gemm_desc_validate(&t.gemm);
    }
    if (s == QJIT_OK)
        *out = t;
    free(text);
    return s;
}
