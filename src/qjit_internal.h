/*
 * qjit_internal.h — declarations shared between qjit's modules, in the order of the data
 * path: descriptor → arch → family → select → build (template, key, cache, NVRTC) →
 * driver → handle (gemm) → launch, with context, error and buffers beside them.  Each
 * module's functions carry its prefix (qjit_err_, qjit_desc_, qjit_arch_, qjit_family_,
 * qjit_select_, qjit_build_, qjit_tmpl_, qjit_sandbox_, qjit_nvrtc_, qjit_key_,
 * qjit_cache_, qjit_drv_, qjit_ctx_, qjit_gemm_); none are exported.
 */
#ifndef QJIT_INTERNAL_H
#define QJIT_INTERNAL_H

#include "qjit.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QJIT_HIDDEN __attribute__((visibility("hidden")))

/* Bumped whenever the key material or a cubin row's meaning changes (it is part of every
 * key).  The DB's table layout has its own version (cache_db.h). */
#define QJIT_CACHE_FORMAT_VERSION 1

/* ---------------------------------------------------------------- error.c */
/* Set this thread's message (printf-style) and return st. */
QJIT_HIDDEN qjit_status qjit_err_set(qjit_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "text: " (adds context while unwinding). */
QJIT_HIDDEN qjit_status qjit_err_prefix(qjit_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
QJIT_HIDDEN void qjit_err_clear(void);
/* Where a module's warnings go: a context's callback, copied into whatever logs. */
typedef struct qjit_logger {
    qjit_log_fn fn; /* NULL: dropped */
    void *user;
} qjit_logger;
QJIT_HIDDEN void qjit_log(const qjit_logger *lg, qjit_log_level lvl, const char *fmt, ...)
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
QJIT_HIDDEN const char *qjit_desc_scale_name(qjit_scale_mode m); /* "group" (no size); NULL if bad */
QJIT_HIDDEN int qjit_desc_dtype_bits(qjit_dtype t);              /* 16, 8, 4, 32 */
/* Bytes of a rows × cols matrix of t (4-bit types two a byte). */
QJIT_HIDDEN size_t qjit_desc_bytes(qjit_dtype t, int64_t rows, int64_t cols);
/* Elements of the scale tensor of side A (is_a) or B of an M×N×K problem, as a launch reads
 * them (dense; a zero-point tensor has as many), and their type. */
QJIT_HIDDEN int64_t qjit_desc_scale_count(const qjit_gemm_desc *d, bool is_a, int64_t m,
                                          int64_t n, int64_t k, qjit_dtype *type);
QJIT_HIDDEN qjit_status qjit_desc_parse_arch(const char *s, qjit_arch *out);
/* The canonical text, or "gemm (unprintable descriptor)" (messages and map keys). */
QJIT_HIDDEN void qjit_desc_text(const qjit_gemm_desc *d, char *buf, size_t cap);
/* What K the pair of d needs whatever the kernel: two 4-bit values a byte, whole scale
 * groups, whole MX blocks of 32.  qjit_desc_k_unit: the least common multiple of those;
 * qjit_desc_k_fits: whether k meets them, else `why` says which ("k=96 is not a multiple
 * of the group size 128"). */
QJIT_HIDDEN int qjit_desc_k_unit(const qjit_gemm_desc *d);
QJIT_HIDDEN bool qjit_desc_k_fits(const qjit_gemm_desc *d, int64_t k, char *why, size_t cap);

/* ---------------------------------------------------------------- arch.c */
/* qjit_arch_name is public (qjit.h) */
QJIT_HIDDEN const char *qjit_arch_nvrtc_target(qjit_arch a);  /* "sm_90a"; NULL if bad */
QJIT_HIDDEN unsigned qjit_arch_smem_limit(qjit_arch a);       /* bytes a block may use; 0 if bad */
QJIT_HIDDEN int qjit_arch_count(void);                        /* targets, oldest first */
QJIT_HIDDEN qjit_arch qjit_arch_at(int i);
QJIT_HIDDEN bool qjit_arch_parse(const char *s, size_t n, qjit_arch *out); /* names and "auto" */
QJIT_HIDDEN const char *qjit_arch_list(void);                 /* the names, for messages */
QJIT_HIDDEN qjit_arch qjit_arch_for_device(int major, int minor); /* AUTO: none */
QJIT_HIDDEN bool qjit_arch_runs_on(qjit_arch a, int major, int minor);
QJIT_HIDDEN bool qjit_arch_at_least(qjit_arch a, qjit_arch floor);

/* ---------------------------------------------------------------- the kernel families */
/* Every kernel family: QJIT_FAMILY_LIST(X) gives X(id, name, template) for each, in
 * kernel=auto's order of preference (a family whose declaration says measured = false is
 * skipped by kernel=auto wherever it stands).  It is generated at build time
 * (cmake/families.cmake) from the one line each family template carries,
 * `% -- qjit family: name=NAME id=ID order=ORDER`: id is the family's qjit_kernel value (the
 * first ten have names in qjit.h), order its place in the preference.  So a family is its
 * template, and everything else about it the template declares (family.c); adding one
 * needs no edit here.  Tests check every list of kernel names shown to users against it. */
#include "qjit_families.h"

/* ---------------------------------------------------------------- the kernel ABI */
/* Every GEMM kernel's one by-value parameter (docs/TEMPLATES.md).  gemm_common.cuh declares
 * the same struct and asserts its size against PARAMS_BYTES, a template parameter set from
 * sizeof this one, so a kernel built against another layout does not compile.  flags tells
 * the kernel how it was launched (QJIT_KERNEL_*). */
typedef struct qjit_kernel_params {
    const void *a, *b;
    void *d;
    const void *bias, *scale_a, *scale_b, *zeros_b;
    long long m, n, k, lda, ldb, ldd;
    unsigned long long flags;
} qjit_kernel_params;
_Static_assert(sizeof(qjit_kernel_params) == 112 && __builtin_offsetof(qjit_kernel_params, m) == 56,
               "qjit_kernel_params: fourteen 8-byte fields, as docs/TEMPLATES.md states");
/* flags: the launch asked for an early start (programmatic dependent launch, QJIT_PDL=1), so
 * the kernel's qc::pdl_wait may wait for the whole kernel before it (gemm_common.cuh,
 * qc::EARLY_START); and the kernel before writes none of B, scale_b, zeros_b, so they may be
 * read before that wait (qc::EARLY_WEIGHTS: QJIT_PDL set but not 2, or qjit_linear_launch) */
#define QJIT_KERNEL_EARLY 1ull
#define QJIT_KERNEL_EARLY_WEIGHTS 2ull

/* ---------------------------------------------------------------- family.c */
/* The configuration fields of a descriptor: what chooses among a family's kernels. */
typedef struct qjit_config {
    int bm, bn, bk, wm, wn, stages, split_k;
} qjit_config;
QJIT_HIDDEN void qjit_config_get(const qjit_gemm_desc *d, qjit_config *c);
/* Sets the fields d leaves auto (all of tile, of warps, stages, split) from c. */
QJIT_HIDDEN void qjit_config_fill(qjit_gemm_desc *d, const qjit_config *c);

/* What one kernel needs at launch, as its family states it for a configuration. */
typedef struct qjit_plan {
    unsigned threads, smem;
    int k_multiple, ld_multiple, align;
    int persistent; /* 1: a grid of at most one CTA per SM that walks the tiles */
    int cluster_k;  /* > 1: K may be split across up to this many CTAs of a cluster */
    int k_chunk;    /* with cluster_k: at most ceil(K / k_chunk) ranks, so each has about
                       this much of K (gemv deals its steps evenly, the others whole chunks) */
    int tma;        /* 1: the kernel takes tensor maps of A and B after its parameter struct,
                       2: of A alone (gemm.c encodes them at each launch: encode_maps) */
    int cluster_m;  /* > 1: CTAs go in clusters of this many along M when the output has
                       that many tile rows (the kernel shares B across them) */
    int tma_rows;   /* with tma: the kernel also takes A's map in boxes of this many rows
                       (after its other maps), for tiles that pass M, copied up to M */
} qjit_plan;

typedef struct qjit_families qjit_families; /* one per context: its templates' declarations */
struct qjit_expansion;
QJIT_HIDDEN qjit_status qjit_family_open(const char *template_dir, qjit_families **out);
QJIT_HIDDEN void qjit_family_close(qjit_families *fs);
QJIT_HIDDEN int qjit_family_count(void);            /* QJIT_FAMILY_LIST, in order */
QJIT_HIDDEN qjit_kernel qjit_family_at(int i);
QJIT_HIDDEN const char *qjit_family_template(qjit_kernel k); /* NULL: not a family */
/* Whether family k is in this build (its template exists). */
QJIT_HIDDEN bool qjit_family_present(qjit_families *fs, qjit_kernel k);
/* Whether family k computes d's pair and scale modes (configuration ignored); a family
 * not in this build serves nothing.  QJIT_ERROR_TEMPLATE when its declaration is broken. */
QJIT_HIDDEN qjit_status qjit_family_serves(qjit_families *fs, qjit_kernel k,
                                           const qjit_gemm_desc *d, bool *yes);
/* Whether family k has been run on a GPU (its declaration's `measured`): kernel=auto
 * neither picks nor sweeps a family that has not; it runs when named. */
QJIT_HIDDEN bool qjit_family_measured(qjit_families *fs, qjit_kernel k);
/* The least arch family k runs on (QJIT_ARCH_SM90A: that target only). */
QJIT_HIDDEN qjit_arch qjit_family_floor(qjit_families *fs, qjit_kernel k);
/* The heuristic's configuration of family k for d on d->arch, for problems of at most
 * m_max rows (0: M unknown).  QJIT_ERROR_NOT_FOUND (no message) when the family leaves
 * problems of that size to the next family (its default() gives nil). */
QJIT_HIDDEN qjit_status qjit_family_default(qjit_families *fs, qjit_kernel k,
                                            const qjit_gemm_desc *d, int64_t m_max,
                                            qjit_config *out);
/* Check a resolved descriptor against its family's rules and the arch's shared memory,
 * and state its launch needs.  QJIT_ERROR_UNSUPPORTED with the reason in `why`. */
QJIT_HIDDEN qjit_status qjit_family_plan(qjit_families *fs, const qjit_gemm_desc *r,
                                         qjit_plan *out, char *why, size_t cap);
/* The configurations of family k's named space ("default", "small-m"), in order. */
QJIT_HIDDEN qjit_status qjit_family_space(qjit_families *fs, qjit_kernel k,
                                          const qjit_gemm_desc *d, const char *name,
                                          qjit_config *out, size_t cap, size_t *count);
/* Expand the template of a resolved descriptor into CUDA source (build.c compiles it). */
QJIT_HIDDEN qjit_status qjit_family_expand(qjit_families *fs, const qjit_gemm_desc *r,
                                           struct qjit_expansion *e);

/* ---------------------------------------------------------------- select.c */
/* Validate d, pick the arch (named, else the context's override, else the current
 * device's) and the kernel, and fill every auto field with the family's heuristic for
 * problems of at most m_max rows (0: M unknown). */
QJIT_HIDDEN qjit_status qjit_select_resolve(qjit_context *ctx, const qjit_gemm_desc *d,
                                            qjit_arch arch, int64_t m_max, qjit_gemm_desc *r);
/* Whether a resolved descriptor has a kernel: its family serves it on its arch and its
 * plan holds.  QJIT_ERROR_UNSUPPORTED with the reason in `why`; *plan (may be NULL) gets
 * the launch needs. */
QJIT_HIDDEN qjit_status qjit_select_check(qjit_context *ctx, const qjit_gemm_desc *r,
                                          qjit_plan *plan, char *why, size_t cap);

/* What a handle of d loads: per M bucket the heuristic's kernel (one for every bucket when
 * d names its whole configuration), and per tuned (N, K) the winners of the buckets that
 * were tuned. */
typedef struct qjit_dispatch_problem {
    char gpu[64];
    int64_t n, k;
    bool has[QJIT_M_BUCKETS];
    qjit_gemm_desc desc[QJIT_M_BUCKETS];
    double us[QJIT_M_BUCKETS];
} qjit_dispatch_problem;
typedef struct qjit_dispatch {
    int nbuckets; /* 1: a fully named descriptor, base[] all alike */
    qjit_gemm_desc base[QJIT_M_BUCKETS];
    size_t nproblems;
    qjit_dispatch_problem *problems; /* malloc'd; qjit_dispatch_free */
} qjit_dispatch;
/* The dispatch of d on arch (AUTO: as resolve picks it).  tuned: read the tuning results
 * of gpu (NULL: of every GPU) from the cache; unusable ones are skipped with a warning. */
QJIT_HIDDEN qjit_status qjit_select_dispatch(qjit_context *ctx, const qjit_gemm_desc *d,
                                             qjit_arch arch, const char *gpu, bool tuned,
                                             qjit_dispatch *dp);
QJIT_HIDDEN void qjit_dispatch_free(qjit_dispatch *dp);
/* Whether d names its whole configuration (one kernel for every M). */
QJIT_HIDDEN bool qjit_select_fully_named(const qjit_gemm_desc *d);
/* Whether c is a configuration of d on arch (AUTO: any): the same pair, modes and output,
 * every field d names kept, the rest named, and a kernel that takes it (else why). */
QJIT_HIDDEN bool qjit_select_config_of(qjit_context *ctx, const qjit_gemm_desc *d,
                                       qjit_arch arch, const qjit_gemm_desc *c, char *why,
                                       size_t cap);
/* The key of d's tuning results: its canonical text with arch=auto. */
QJIT_HIDDEN void qjit_select_problem_text(const qjit_gemm_desc *d, char *buf, size_t cap);

/* ---------------------------------------------------------------- build.c */
/* The cubin of a resolved, checked descriptor (text: its canonical form): from a cache,
 * else compiled outside any cache transaction and stored.  must_store: a failure to
 * store is an error (precompile), else a warning.  *cubin is malloc'd. */
QJIT_HIDDEN qjit_status qjit_build_cubin(qjit_context *ctx, const qjit_gemm_desc *r,
                                         const char *text, bool must_store, uint8_t key[16],
                                         void **cubin, size_t *cubin_len, int *was_cached);

/* The same from an expansion already made (which it takes over and frees): the key of
 * text + expansion + arch, the cache, else NVRTC and a store.  Any kernel kind. */
QJIT_HIDDEN qjit_status qjit_build_expanded(qjit_context *ctx, const char *text, qjit_arch arch,
                                            struct qjit_expansion *e, bool must_store,
                                            uint8_t key[16], void **cubin, size_t *cubin_len,
                                            int *was_cached);

/* ---------------------------------------------------------------- text (desc.c, quant_desc.c,
 * manifest.c): the blanks between tokens, and a token of n bytes at p equal to word. */
static inline bool qjit_is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static inline bool qjit_word_is(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(p, word, n) == 0;
}

/* ---------------------------------------------------------------- quant (quant_*.c) */
/* The by-value kernel parameter of templates/quant.cu (its struct qjit_quant_params). */
typedef struct qjit_quant_kernel_params {
    const void *x;
    void *q, *scale, *workspace;
    long long m, k, ldx, ldq;
    float clip;
    int parts;
    long long x_batch, q_batch;
} qjit_quant_kernel_params;
_Static_assert(sizeof(qjit_quant_kernel_params) == 88, "templates/quant.cu's qjit_quant_params");
/* Canonical text, or "quant (field 'x' out of range)"; always NUL-terminated. */
QJIT_HIDDEN void qjit_quant_text(const qjit_quant_desc *d, char *buf, size_t cap);

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
 * QJIT_ERROR_TEMPLATE with "file:line: message" and a traceback, QJIT_ERROR_UNSUPPORTED
 * with the template's reason, or QJIT_ERROR_OUT_OF_MEMORY past the allocator cap. */
QJIT_HIDDEN qjit_status qjit_sandbox_expand(const char *override_dir, const char *root,
                                            const qjit_tparam *params, int nparams,
                                            const qjit_sandbox_limits *lim,
                                            qjit_expansion *out);
/* Expansions run by this process so far (tests count them). */
QJIT_HIDDEN long long qjit_sandbox_expansions(void);

/* A persistent sandbox holding templates' family{...} declarations, queried without
 * expanding any kernel text.  Not thread-safe: one caller at a time. */
typedef struct qjit_sandbox qjit_sandbox;
QJIT_HIDDEN qjit_status qjit_sandbox_open(const char *override_dir,
                                          const qjit_sandbox_limits *lim, qjit_sandbox **out);
QJIT_HIDDEN void qjit_sandbox_close(qjit_sandbox *S);
/* Run template root's top level up to its family{...} and keep the table. */
QJIT_HIDDEN qjit_status qjit_sandbox_declare(qjit_sandbox *S, const char *root);

/* Integer fields read from a declaration's answer: one record per table. */
#define QJIT_RECORD_MISSING (-0x7fffffffffffffffLL - 1)
typedef struct qjit_records {
    const char *const *fields; /* in: the names to read */
    int nfields;
    int cap;                   /* in: records vals holds */
    long long *vals;           /* out: [cap][nfields], QJIT_RECORD_MISSING where absent */
    int n;                     /* out: records read */
    int more;                  /* out: records past cap */
} qjit_records;
/* Field `what` of root's declaration, called with arg (NULL: none) when it is a function,
 * the parameters set as globals.  The answer is read into rec: nil or false give no
 * record, true one with no fields, an integer one with it as the first field, a table
 * one, a list of tables one each.  QJIT_ERROR_UNSUPPORTED with the reason when it calls
 * unsupported(); QJIT_ERROR_TEMPLATE with a traceback on any other error. */
QJIT_HIDDEN qjit_status qjit_sandbox_query(qjit_sandbox *S, const char *root, const char *what,
                                           const qjit_tparam *params, int nparams,
                                           const qjit_tparam *arg, qjit_records *rec);

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
    qjit_logger log;           /* warnings (read-only dir, repaired rows) */
    int verify;                /* 1: check the writable file fully at open and repair it */
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
/* What the cache is now: its path, whether it keeps kernels, its repairs. */
QJIT_HIDDEN void qjit_cache_info_get(qjit_cache *c, qjit_cache_info *out);

/* One measured candidate of a tuning problem (schema of cache_db.c). */
typedef struct qjit_tuning_row {
    const char *gpu, *arch;
    const char *problem; /* canonical descriptor as asked, arch=auto */
    int bucket;          /* M bucket */
    int64_t n, k;
    const char *config;  /* canonical descriptor of the candidate, resolved */
    int64_t m;           /* the M it was timed at */
    double us;           /* median time */
    int ok;              /* 1: its output matched the reference */
} qjit_tuning_row;
/* Store a measurement (replacing an earlier one of the same candidate) in the writable
 * DB. */
QJIT_HIDDEN qjit_status qjit_cache_put_tuning(qjit_cache *c, const qjit_tuning_row *row);
/* Calls fn for every checked (ok) row of (gpu, arch, problem) that verifies, from the
 * writable DB (layer 0) and the shipped one (layer 1); gpu NULL: any GPU.  Rows that do
 * not verify are skipped with a warning (and deleted from the writable DB). */
typedef void (*qjit_tuning_fn)(void *user, const qjit_tuning_row *r, int layer);
QJIT_HIDDEN qjit_status qjit_cache_tuned(qjit_cache *c, const char *gpu, const char *arch,
                                         const char *problem, qjit_tuning_fn fn, void *user);

/* ---------------------------------------------------------------- driver.c */
/* The subset of the CUDA driver API qjit uses, loaded from libcuda.so.1 on first use.
 * Types are opaque here so that no cuda.h is needed by the rest of the library. */
typedef int qjit_cu_result;          /* CUresult */
typedef struct qjit_cu_api qjit_cu_api;
/* Load once (thread-safe); QJIT_ERROR_NO_DEVICE with the dlerror text on failure. */
QJIT_HIDDEN qjit_status qjit_drv_load(const qjit_cu_api **out);
/* "CUDA_ERROR_...: description" of a result. */
QJIT_HIDDEN const char *qjit_drv_error_name(qjit_cu_result r);

/* ---------------------------------------------------------------- gemm.c */
/* What qjit_gemm_launch checks before it runs anything (the kernel for the launch's M, its
 * arguments, the current context), without launching: the linear helper checks its GEMM
 * before its quantizer runs. */
QJIT_HIDDEN qjit_status qjit_gemm_check_launch(const qjit_gemm *h, const qjit_gemm_args *a);
/* qjit_gemm_launch with the early start on sm_90a (unless QJIT_PDL=0), whatever QJIT_PDL asks
 * for GEMMs: for a caller that knows the kernel just before this one in the stream writes
 * none of B, scale_b and zeros_b, which gemv reads before its wait (qjit_linear_launch: the
 * quantizer it launched itself). */
QJIT_HIDDEN qjit_status qjit_gemm_launch_early(const qjit_gemm *h, const qjit_gemm_args *a,
                                               struct CUstream_st *stream);
/* What a kernel's launch geometry depends on besides the sizes: its resolved tile and split
 * field, and from its plan and GPU: a persistent grid of at most persistent_ctas CTAs (0:
 * not persistent); K split across up to cluster_k CTAs of a cluster in chunks of k_chunk
 * (1: never); clusters of cluster_m CTAs along M (1: none), max_clusters of which fit at
 * once (0: unknown); the SM count (0: unknown). */
typedef struct qjit_grid_facts {
    int bm, bn, split_k;
    int persistent_ctas;
    int cluster_k, k_chunk;
    int cluster_m, max_clusters;
    int sms;
    int per_sm; /* CTAs a SM a K split plans for (0: two; a persistent kernel: one) */
} qjit_grid_facts;
/* The grid and cluster dimensions of an m×n×k launch: arithmetic only (gemm.c says how). */
QJIT_HIDDEN void qjit_launch_grid(const qjit_grid_facts *f, int64_t m, int64_t n, int64_t k,
                                  unsigned grid[3], unsigned cluster[3]);

/* ---------------------------------------------------------------- context.c */
typedef struct qjit_map_entry qjit_map_entry;
typedef struct qjit_owned qjit_owned;

/* A build under way, for compile-once: lives in the builder's frame. */
typedef struct qjit_inflight {
    int kind;
    qjit_gemm_desc desc;
    void *cuctx;
    struct qjit_inflight *next;
} qjit_inflight;

/* A compile under way, for compile-once across CUDA contexts and devices: a cubin does
 * not depend on the device that loads it, only on its key.  Lives in the compiler's frame. */
typedef struct qjit_compiling {
    uint8_t key[16];
    struct qjit_compiling *next;
} qjit_compiling;

struct qjit_context {
    qjit_options opt;            /* strings point at the owned copies below */
    char *cache_dir, *shipped, *template_dir;
    qjit_logger log;
    qjit_cache *cache;
    qjit_families *families;
    pthread_mutex_t mu;          /* guards everything below */
    pthread_cond_t cv;           /* signalled when an in-flight build ends */
    qjit_map_entry *slots;       /* open addressing, power-of-two size */
    size_t nslots, nused;
    qjit_owned *owned;           /* every object made, destroyed with the context */
    size_t nowned, cap_owned;
    qjit_inflight *inflight;     /* builds under way */
    qjit_compiling *compiling;   /* compiles under way, by cache key (any CUDA context) */
    bool pdl;                    /* $QJIT_PDL: sm_90 GEMM launches may start early */
    bool pdl_weights;            /* and read their weights before the wait (QJIT_PDL not 2) */
    bool pdl_quant;              /* and quantizer launches (unless QJIT_PDL=0) */
    bool split_occ;              /* $QJIT_SPLIT_OCC: a K split fills the SMs' occupancy */
    qjit_stats stats;
};

/* The in-process map: (kind, descriptor, CUDA context) -> object.  Kinds keep a handle,
 * a loaded kernel and a quantizer apart (a quantizer's descriptor goes in as its bytes,
 * zero-padded).  Caller holds ctx->mu. */
enum { QJIT_OBJ_HANDLE = 1, QJIT_OBJ_KERNEL = 2, QJIT_OBJ_QUANT = 3 };
QJIT_HIDDEN void *qjit_ctx_find(qjit_context *ctx, int kind, const qjit_gemm_desc *d,
                                void *cuctx);
QJIT_HIDDEN bool qjit_ctx_insert(qjit_context *ctx, int kind, const qjit_gemm_desc *d,
                                 void *cuctx, void *obj);
/* The context destroys obj with fn when it is destroyed.  Caller holds ctx->mu. */
QJIT_HIDDEN bool qjit_ctx_adopt(qjit_context *ctx, void *obj, void (*fn)(void *obj));
/* The object of (kind, key) in CUDA context cuctx: from the map, else made once by
 * make(arg, &obj) however many threads ask (the others wait for it), then owned by the
 * context (destroy frees it) and in the map.  One not made yet while capture_stream
 * captures is QJIT_ERROR_CAPTURING (`text` names it): making it would load a module,
 * which breaks the capture.  *hit (may be NULL) says it came from the map.  Takes
 * ctx->mu itself. */
typedef qjit_status (*qjit_make_fn)(void *arg, void **obj);
QJIT_HIDDEN qjit_status qjit_ctx_obtain(qjit_context *ctx, int kind, const qjit_gemm_desc *key,
                                        void *cuctx, struct CUstream_st *capture_stream,
                                        const char *text, qjit_make_fn make,
                                        void (*destroy)(void *obj), void *arg, void **out,
                                        bool *hit);

#endif /* QJIT_INTERNAL_H */
