/*
 * testlib.h — the few helpers every qjit test uses: checks that count and report,
 * a GPU-skip exit code, and a scratch directory.
 */
#ifndef QJIT_TESTLIB_H
#define QJIT_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>

extern int tl_passed, tl_failed;

#define TL_SKIP 77

/* CHECK(cond, fmt, ...): count a pass, or print the failure with file:line. */
#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (cond) {                                                                      \
            tl_passed++;                                                                 \
        } else {                                                                         \
            tl_failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
        }                                                                                \
    } while (0)

/* CHECK_OK(status_expr): the call returned QJIT_OK; prints qjit_last_error() if not. */
#define CHECK_OK(expr)                                                                   \
    do {                                                                                 \
        qjit_status tl_s_ = (expr);                                                      \
        CHECK(tl_s_ == QJIT_OK, "%s -> %s: %s", #expr, qjit_status_string(tl_s_),        \
              qjit_last_error());                                                        \
    } while (0)

/* Print "N passed, N failed" and return the exit code for main. */
int tl_finish(const char *name);
/* A fresh empty directory under $TMPDIR (or /tmp); static storage per call.  Removed
 * with everything in it when the process exits (QJIT_TEST_KEEP=1 keeps it). */
const char *tl_tmpdir(const char *tag);
/* The tuning records shipped as cache/tune/NAME.db.tar.xz, as an SQLite file: the build's
 * unpacked copy (build/tune/NAME.db of the build this test is of, else of the working
 * directory: a GPU machine runs the tests from a copy of the repository), else the archive
 * unpacked with tar into a scratch directory.  Static storage per call; NULL if none. */
const char *tl_shipped_records(const char *name);
/* The names of the shipped records: every GPU the repository carries tuning for. */
extern const char *const tl_shipped_gpus[];
extern const int tl_nshipped_gpus;
/* Whether text contains one of the '|'-separated substrings of `any` (the GPU tests'
 * QJIT_TEST_FILTER and QJIT_TEST_SKIP). */
int tl_matches_any(const char *text, const char *any);
/* Run the program `tool` with args (NULL-terminated, without argv[0]) and env "NAME=VALUE"
 * entries added (NULL-terminated, or NULL); its stdout and stderr together into out (at
 * most cap - 1 bytes kept, NUL-terminated).  Its exit status, or -1. */
int tl_run(const char *tool, const char *const *args, const char *const *env, char *out,
           size_t cap);

#endif
