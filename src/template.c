/*
 * template.c — finds a template file's bytes: the override directory first (for
 * development), else the copy built into the library from templates/.
 */
#define _GNU_SOURCE
#include "qjit_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qjit_embedded {
    const char *name;
    const char *text;
    size_t len;
};
extern const struct qjit_embedded qjit_embedded_templates[];

/* A template name is a plain file name: no directories, no dot-files. */
static bool name_ok(const char *name)
{
    if (!name || !*name || name[0] == '.' || strlen(name) > 128)
        return false;
    for (const char *p = name; *p; p++)
        if (!(*p == '_' || *p == '-' || *p == '.' || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

qjit_status qjit_tmpl_open(const char *override_dir, const char *name, qjit_tmpl_file *out)
{
    memset(out, 0, sizeof *out);
    if (!name_ok(name))
        return qjit_err_set(QJIT_ERROR_TEMPLATE, "template name '%s' is not a plain file name",
                            name ? name : "(null)");
    out->name = NULL;
    if (override_dir && *override_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", override_dir, name);
        FILE *f = fopen(path, "rb");
        if (f) {
            char chunk[8192];
            size_t n;
            qjit_status st = QJIT_OK;
            while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
                if (!qjit_buf_append(&out->owned, chunk, n)) {
                    st = qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "reading template %s", path);
                    break;
                }
            if (st == QJIT_OK && ferror(f))
                st = qjit_err_set(QJIT_ERROR_IO, "reading template %s: %s", path, strerror(errno));
            fclose(f);
            if (st != QJIT_OK) {
                qjit_buf_free(&out->owned);
                return st;
            }
            if (!out->owned.data && !qjit_buf_append(&out->owned, "", 0))
                return qjit_err_set(QJIT_ERROR_OUT_OF_MEMORY, "reading template %s", path);
            for (const struct qjit_embedded *e = qjit_embedded_templates; e->name; e++)
                if (strcmp(e->name, name) == 0)
                    out->name = e->name;
            out->name = out->name ? out->name : strdup(name) /* freed below */;
            out->text = out->owned.data;
            out->len = out->owned.len;
            return QJIT_OK;
        }
    }
    for (const struct qjit_embedded *e = qjit_embedded_templates; e->name; e++)
        if (strcmp(e->name, name) == 0) {
            out->name = e->name;
            out->text = e->text;
            out->len = e->len;
            return QJIT_OK;
        }
    return qjit_err_set(QJIT_ERROR_TEMPLATE, "no template named '%s'%s%s", name,
                        override_dir ? " in the built-in set or in " : "",
                        override_dir ? override_dir : "");
}

static bool is_embedded_name(const char *name)
{
    for (const struct qjit_embedded *e = qjit_embedded_templates; e->name; e++)
        if (e->name == name)
            return true;
    return false;
}

void qjit_tmpl_close(qjit_tmpl_file *f)
{
    if (!f)
        return;
    if (f->name && !is_embedded_name(f->name))
        free((void *)f->name);
    qjit_buf_free(&f->owned);
    memset(f, 0, sizeof *f);
}

static const char *builtin_names[64];
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_fill(void)
{
    int n = 0;
    for (const struct qjit_embedded *e = qjit_embedded_templates; e->name && n < 63; e++)
        builtin_names[n++] = e->name;
    builtin_names[n] = NULL;
}

const char *const *qjit_tmpl_builtin_names(void)
{
    pthread_once(&builtin_once, builtin_fill);
    return builtin_names;
}
