/*
 * qjit_internal.h — declarations shared between qjit's modules.  Each module's
 * functions carry its prefix (qjit_err_, qjit_desc_, qjit_tmpl_, qjit_sandbox_,
 * qjit_nvrtc_, qjit_key_, qjit_cache_, qjit_drv_, qjit_gemm_); none are exported.
 */
#ifndef QJIT_INTERNAL_H
#define QJIT_INTERNAL_H

#include "qjit.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QJIT_HIDDEN __attribute__((visibility("hidden")))

/* Bumped whenever the key material or the row layout changes meaning. */
#define QJIT_CACHE_FORMAT_VERSION 1

/* ---------------------------------------------------------------- error.c */
/* Set this thread's message (printf-style) and return st. */
QJIT_HIDDEN qjit_status qjit_err_set(qjit_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "text: " (adds context while unwinding). */
QJIT_HIDDEN qjit_status qjit_err_prefix(qjit_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
QJIT_HIDDEN void qjit_err_clear(void);
/* Log through the context's callback (ctx may be NULL: dropped). */
QJIT_HIDDEN void qjit_log(const qjit_context *ctx, qjit_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- buf (error.c) */
/* A growable byte buffer; zero-initialise, free with qjit_buf_free. */
typedef struct qjit_buf {
    char *data;
    size_t len, cap;
} qjit_buf;
QJIT_HIDDEN bool qjit_buf_append(qjit_buf *b, const void *p, size_t n);
QJIT_HIDDEN bool qjit_buf_printf(qjit_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
QJIT_HIDDEN void qjit_buf_free(qjit_buf *b);

/* ---------------------------------------------------------------- desc.c */
QJIT_HIDDEN const char *qjit_desc_dtype_name(qjit_dtype t);      /* "bf16"; NULL if bad */
QJIT_HIDDEN const char *qjit_desc_arch_name(qjit_arch a);        /* "sm_90a"; "auto" */
QJIT_HIDDEN const char *qjit_desc_kernel_name(qjit_kernel k);    /* "mma"; "auto" */
QJIT_HIDDEN const char *qjit_desc_scale_name(qjit_scale_mode m); /* "group" (no size); NULL if bad */
QJIT_HIDDEN int qjit_desc_dtype_bits(qjit_dtype t);              /* 16, 8, 4, 32 */
QJIT_HIDDEN qjit_status qjit_desc_parse_arch(const char *s, qjit_arch *out);

/* ---------------------------------------------------------------- template.c */
/* A template file's bytes: from the override directory if it has the file, else the
 * copy built into the library.  `text` is owned by the library (embedded) or by
 * `owned` (free with qjit_buf_free). */
typedef struct qjit_tmpl_file {
    const char *name;
    const char *text;
    size_t len;
    qjit_buf owned;
} qjit_tmpl_file;
QJIT_HIDDEN qjit_status qjit_tmpl_open(const char *override_dir, const char *name,
                                       qjit_tmpl_file *out);
QJIT_HIDDEN void qjit_tmpl_close(qjit_tmpl_file *f);
/* Names of the built-in templates, NULL-terminated (for tests). */
QJIT_HIDDEN const char *const *qjit_tmpl_builtin_names(void);

/* ---------------------------------------------------------------- sandbox.c */
/* One template parameter, set as a Lua global before expansion. */
typedef struct qjit_tparam {
    const char *name;
    enum { QJIT_TP_INT, QJIT_TP_STR, QJIT_TP_BOOL } kind;
    long long i;
    const char *s;
} qjit_tparam;

typedef struct qjit_sandbox_limits {
    size_t max_memory;       /* Lua allocator cap, bytes */
    long long max_steps;     /* VM instructions */
    size_t max_output;       /* bytes of generated source */
} qjit_sandbox_limits;
QJIT_HIDDEN void qjit_sandbox_default_limits(qjit_sandbox_limits *l);

/* Files a template expansion read (the root first, then includes in first-use order),
 * with their bytes, for the cache key. */
typedef struct qjit_expansion {
    qjit_buf source;             /* generated CUDA C++ with #line marks */
    int nfiles;
    qjit_tmpl_file files[16];
} qjit_expansion;
QJIT_HIDDEN void qjit_expansion_free(qjit_expansion *e);

/* Expand template `root` with the parameters.  Deterministic. On error returns
 * QJIT_ERROR_TEMPLATE with "file:line: message" and a traceback. */
QJIT_HIDDEN qjit_status qjit_sandbox_expand(const char *override_dir, const char *root,
                                            const qjit_tparam *params, int nparams,
                                            const qjit_sandbox_limits *lim,
                                            qjit_expansion *out);

/* ---------------------------------------------------------------- compiler.c */
/* NVRTC version as "13.0"; static storage. */
QJIT_HIDDEN const char *qjit_nvrtc_version(void);
/* Options used for arch (NULL-terminated, static storage); part of the key. */
QJIT_HIDDEN const char *const *qjit_nvrtc_options(qjit_arch arch);
/* Compile to a cubin (malloc'd, caller frees).  On failure QJIT_ERROR_COMPILE with the
 * log in the message. */
QJIT_HIDDEN qjit_status qjit_nvrtc_compile(const char *source, size_t len, const char *name,
                                           qjit_arch arch, void **cubin, size_t *cubin_len,
                                           double *ms);

/* ---------------------------------------------------------------- key.c */
/* Length-prefixed serialization of everything that shapes the cubin, and its
 * XXH3-128 (canonical big-endian 16 bytes). */
typedef struct qjit_key {
    uint8_t hash[16];
    qjit_buf material;
} qjit_key;
QJIT_HIDDEN qjit_status qjit_key_build(const char *canonical_desc, const qjit_expansion *e,
                                       qjit_arch arch, qjit_key *out);
QJIT_HIDDEN void qjit_key_free(qjit_key *k);
QJIT_HIDDEN void qjit_key_hex(const uint8_t hash[16], char out[33]);
/* XXH3-128 of bytes, canonical big-endian. */
QJIT_HIDDEN void qjit_hash128(const void *p, size_t n, uint8_t out[16]);

/* ---------------------------------------------------------------- cache.c */
typedef struct qjit_cache qjit_cache;

typedef struct qjit_cache_config {
    const char *dir;           /* writable DB directory (NULL: default location) */
    const char *shipped;       /* read-only DB file consulted first, or NULL */
    int memory_only;
    uint64_t max_bytes;        /* 0 = unlimited */
    const qjit_context *log_ctx; /* for warnings (read-only dir, repaired rows) */
} qjit_cache_config;

/* Never fails for an unusable directory: degrades to memory and warns. */
QJIT_HIDDEN qjit_status qjit_cache_open(const qjit_cache_config *cfg, qjit_cache **out);
QJIT_HIDDEN void qjit_cache_close(qjit_cache *c);

/* What one row holds. */
typedef struct qjit_cache_row {
    uint8_t key[16];
    const void *material; size_t material_len;
    const char *desc;          /* canonical descriptor text */
    const char *arch;          /* "sm_90a" */
    const void *cubin; size_t cubin_len;
    const char *source; size_t source_len; /* generated source, for inspection */
    double compile_ms;
} qjit_cache_row;

/* Lookup by key, comparing key material; verifies cubin size and hash.  QJIT_OK with a
 * malloc'd cubin on a hit; QJIT_ERROR_NOT_FOUND on a miss.  A corrupt row is deleted
 * (from the writable DB) and reported as a miss with a warning.  Updates last use. */
QJIT_HIDDEN qjit_status qjit_cache_get(qjit_cache *c, const uint8_t key[16],
                                       const void *material, size_t material_len,
                                       void **cubin, size_t *cubin_len);
/* Insert (ON CONFLICT DO NOTHING), then evict down to max_bytes.  *inserted (may be
 * NULL) gets 0 when the row was already there. */
QJIT_HIDDEN qjit_status qjit_cache_put(qjit_cache *c, const qjit_cache_row *row, int *inserted);
/* Path of the writable DB, or ":memory:". */
QJIT_HIDDEN const char *qjit_cache_path(const qjit_cache *c);

/* ---------------------------------------------------------------- driver.c */
/* The subset of the CUDA driver API qjit uses, loaded from libcuda.so.1 on first use.
 * Types are opaque here so that no cuda.h is needed by the rest of the library. */
typedef int qjit_cu_result;          /* CUresult */
typedef struct qjit_cu_api qjit_cu_api;
/* Load once (thread-safe); QJIT_ERROR_NO_DEVICE with the dlerror text on failure. */
QJIT_HIDDEN qjit_status qjit_drv_load(const qjit_cu_api **out);
/* "CUDA_ERROR_...: description" of a result. */
QJIT_HIDDEN const char *qjit_drv_error_name(qjit_cu_result r);

/* ---------------------------------------------------------------- context.c */
typedef struct qjit_map_entry qjit_map_entry;
typedef struct qjit_inflight qjit_inflight;

struct qjit_context {
    qjit_options opt;            /* strings point at the owned copies below */
    char *cache_dir, *shipped, *template_dir;
    qjit_cache *cache;
    pthread_mutex_t mu;          /* guards everything below */
    pthread_cond_t cv;           /* signalled when an in-flight build ends */
    qjit_map_entry *slots;       /* open addressing, power-of-two size */
    size_t nslots, nused;
    struct qjit_gemm **handles;  /* every handle made, for destroy */
    size_t nhandles, cap_handles;
    qjit_inflight *inflight;     /* builds under way, for compile-once */
    qjit_stats stats;
};
/* Frees the handles of a context (gemm.c). */
QJIT_HIDDEN void qjit_gemm_destroy_all(qjit_context *ctx);

#endif /* QJIT_INTERNAL_H */
