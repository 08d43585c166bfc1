/*
 * error.c — status strings, the per-thread error message, logging through a logger,
 * and the small growable buffer every module uses.
 */
#include "qjit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QJIT_MSG_CAP 16384

static _Thread_local char tls_msg[QJIT_MSG_CAP];

static const char *const status_names[QJIT_STATUS_COUNT] = {
    [QJIT_OK] = "QJIT_OK",
    [QJIT_ERROR_INVALID_ARGUMENT] = "QJIT_ERROR_INVALID_ARGUMENT",
    [QJIT_ERROR_UNSUPPORTED] = "QJIT_ERROR_UNSUPPORTED",
    [QJIT_ERROR_OUT_OF_MEMORY] = "QJIT_ERROR_OUT_OF_MEMORY",
    [QJIT_ERROR_TEMPLATE] = "QJIT_ERROR_TEMPLATE",
    [QJIT_ERROR_COMPILE] = "QJIT_ERROR_COMPILE",
    [QJIT_ERROR_CACHE] = "QJIT_ERROR_CACHE",
    [QJIT_ERROR_CUDA] = "QJIT_ERROR_CUDA",
    [QJIT_ERROR_NO_DEVICE] = "QJIT_ERROR_NO_DEVICE",
    [QJIT_ERROR_CAPTURING] = "QJIT_ERROR_CAPTURING",
    [QJIT_ERROR_NOT_FOUND] = "QJIT_ERROR_NOT_FOUND",
    [QJIT_ERROR_IO] = "QJIT_ERROR_IO",
};

QJIT_API const char *qjit_status_string(qjit_status s)
{
    if ((unsigned)s < QJIT_STATUS_COUNT && status_names[s])
        return status_names[s];
    return "QJIT_STATUS_UNKNOWN";
}

QJIT_API const char *qjit_last_error(void) { return tls_msg; }

QJIT_API unsigned qjit_version_number(void) { return QJIT_VERSION_NUMBER; }

QJIT_API const char *qjit_version_string(void)
{
#define QJIT_STR2(x) #x
#define QJIT_STR(x) QJIT_STR2(x)
    return QJIT_STR(QJIT_VERSION_MAJOR) "." QJIT_STR(QJIT_VERSION_MINOR) "." QJIT_STR(
        QJIT_VERSION_PATCH);
}

qjit_status qjit_err_set(qjit_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    return st;
}

qjit_status qjit_err_prefix(qjit_status st, const char *fmt, ...)
{
    char old[QJIT_MSG_CAP];
    memcpy(old, tls_msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    /* append ": old", cut at the buffer's end */
    size_t used = n < 0 ? 0 : (size_t)n < sizeof tls_msg ? (size_t)n : sizeof tls_msg - 1;
    size_t room = sizeof tls_msg - 1 - used;
    size_t oldlen = strnlen(old, sizeof old - 1);
    if (room >= 2) {
        memcpy(tls_msg + used, ": ", 2);
        used += 2;
        room -= 2;
        if (oldlen > room)
            oldlen = room;
        memcpy(tls_msg + used, old, oldlen);
        used += oldlen;
    }
    tls_msg[used] = 0;
    return st;
}

void qjit_err_clear(void) { tls_msg[0] = 0; }

void qjit_log(const qjit_logger *lg, qjit_log_level lvl, const char *fmt, ...)
{
    if (!lg || !lg->fn)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lg->fn(lg->user, lvl, msg);
}

bool qjit_buf_append(qjit_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return false;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool qjit_buf_printf(qjit_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    if ((size_t)n < sizeof small)
        return qjit_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = qjit_buf_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void qjit_buf_free(qjit_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
