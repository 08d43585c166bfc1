/*
 * qjit.h — the whole public API of qjit, a JIT generator of (quantized) GEMM kernels
 * for NVIDIA GPUs.  This header is the specification: every function says what it
 * takes, what it returns, who owns what, and whether it is thread-safe.
 *
 * Semantics (see DESIGN.md §2):  D[m,n] = cast_out( sum_k Â[m,k]·B̂[n,k] (+ bias[n]) )
 *   A is M×K (K contiguous), B is N×K (K contiguous, a Linear layer's weight),
 *   D is M×N (N contiguous).  Leading dimensions are in elements.
 *
 * Main call sequence:
 *
 *     qjit_gemm_desc d;
 *     qjit_gemm *g;
 *     if (qjit_gemm_desc_parse("gemm a=bf16 b=bf16 out=bf16", &d) != QJIT_OK ||
 *         qjit_get_gemm(&d, &g) != QJIT_OK) {
 *         fprintf(stderr, "qjit: %s\n", qjit_last_error());
 *         return 1;
 *     }
 *     qjit_gemm_args a = { .a = dA, .b = dB, .d = dD, .m = M, .n = N, .k = K,
 *                          .lda = K, .ldb = K, .ldd = N };
 *     qjit_status s = qjit_gemm_launch(g, &a, stream);   // legal inside graph capture
 *
 * Errors: every call returns a qjit_status.  The detail (field name and value, NVRTC
 * log with template file:line, Lua traceback, CUresult name, SQLite message) is kept
 * per thread and read with qjit_last_error().  The library never aborts, exits or
 * prints; warnings go to the log callback of the context.
 */
#ifndef QJIT_H
#define QJIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define QJIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define QJIT_API __attribute__((visibility("default")))
#else
#define QJIT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */
#define QJIT_VERSION_MAJOR 0
#define QJIT_VERSION_MINOR 1
#define QJIT_VERSION_PATCH 0
#define QJIT_VERSION_NUMBER (QJIT_VERSION_MAJOR * 10000 + QJIT_VERSION_MINOR * 100 + QJIT_VERSION_PATCH)

/* Run-time version: QJIT_VERSION_NUMBER of the library actually linked. */
QJIT_API unsigned qjit_version_number(void);
/* "0.1.0"; static storage. */
QJIT_API const char *qjit_version_string(void);

/* ---------------------------------------------------------------- status */
typedef enum qjit_status {
    QJIT_OK = 0,
    QJIT_ERROR_INVALID_ARGUMENT = 1, /* a field or argument is out of its domain */
    QJIT_ERROR_UNSUPPORTED = 2,      /* valid, but no kernel/arch can do it */
    QJIT_ERROR_OUT_OF_MEMORY = 3,
    QJIT_ERROR_TEMPLATE = 4,         /* Lua template failed (traceback in message) */
    QJIT_ERROR_COMPILE = 5,          /* NVRTC failed (log in message) */
    QJIT_ERROR_CACHE = 6,            /* SQLite failure that could not be degraded */
    QJIT_ERROR_CUDA = 7,             /* a driver call failed (CUresult name in message) */
    QJIT_ERROR_NO_DEVICE = 8,        /* no driver, no device, or no current context */
    QJIT_ERROR_CAPTURING = 9,        /* a miss while the caller's stream is capturing */
    QJIT_ERROR_NOT_FOUND = 10,       /* a lookup found nothing (cache tools) */
    QJIT_ERROR_IO = 11,              /* a file could not be read or written */
    QJIT_STATUS_COUNT
} qjit_status;

/* Name of a status, e.g. "QJIT_ERROR_COMPILE"; never NULL. */
QJIT_API const char *qjit_status_string(qjit_status s);
/* Detailed message of the last failing call on this thread ("" if none).  The string
 * stays valid until the next qjit call on this thread. */
QJIT_API const char *qjit_last_error(void);

/* ---------------------------------------------------------------- types */
/* Element types.  Explicit values; new ones only at the end. */
typedef enum qjit_dtype {
    QJIT_DTYPE_NONE = 0,
    QJIT_DTYPE_F16 = 1,
    QJIT_DTYPE_BF16 = 2,
    QJIT_DTYPE_F32 = 3,
    QJIT_DTYPE_S8 = 4,
    QJIT_DTYPE_S4 = 5,   /* two per byte along K, element 2i in bits 0-3 */
    QJIT_DTYPE_U4 = 6,
    QJIT_DTYPE_E4M3 = 7,
    QJIT_DTYPE_E5M2 = 8,
    QJIT_DTYPE_E2M1 = 9, /* OCP FP4, packed like s4 */
    QJIT_DTYPE_E8M0 = 10,/* MX scale */
    QJIT_DTYPE_COUNT
} qjit_dtype;

typedef enum qjit_scale_mode {
    QJIT_SCALE_NONE = 0,
    QJIT_SCALE_TENSOR = 1, /* one f32 in device memory */
    QJIT_SCALE_ROW = 2,    /* A: f32[M] */
    QJIT_SCALE_COL = 3,    /* B: f32[N] */
    QJIT_SCALE_GROUP = 4,  /* B: [N][K/g] of f16/bf16/f32, optional zeros */
    QJIT_SCALE_BLOCK = 5,  /* 1x128 (A) / 128x128 (B), f32 */
    QJIT_SCALE_MX = 6,     /* e8m0 [rows][K/32] */
    QJIT_SCALE_COUNT
} qjit_scale_mode;

/* Target architectures.  QJIT_ARCH_AUTO: the context's override, else the device's. */
typedef enum qjit_arch {
    QJIT_ARCH_AUTO = 0,
    QJIT_ARCH_SM80 = 80,
    QJIT_ARCH_SM86 = 86,
    QJIT_ARCH_SM89 = 89,
    QJIT_ARCH_SM90A = 90
} qjit_arch;

/* Kernel templates.  AUTO: chosen by tuned results, else the heuristic.  Each family is a
 * template that declares its id (its value here) and name; the ten below are named here,
 * and a build may hold more families, with ids from QJIT_KERNEL_COUNT on, which
 * descriptors name by their text ("kernel=NAME") and qjit_kernel_name() names. */
typedef enum qjit_kernel {
    QJIT_KERNEL_AUTO = 0,
    QJIT_KERNEL_MMA = 1,    /* "mma": f16/bf16, multistage mma.sync + ldmatrix + cp.async (sm_80+) */
    QJIT_KERNEL_WGMMA = 2,  /* "wgmma": f16/bf16 on Hopper warpgroup MMA (sm_90a) */
    QJIT_KERNEL_MMA_WQ = 3, /* "mma_wq": f16/bf16 x quantized weights, dequantized in registers */
    QJIT_KERNEL_MMA_I8 = 4, /* "mma_i8": s8 x s8 / s8 x s4 on int8 tensor cores */
    QJIT_KERNEL_MMA_F8 = 5, /* "mma_f8": fp8 tensor cores (sm_89+); MX through dequantization */
    QJIT_KERNEL_WGMMA_F8 = 6, /* "wgmma_f8": fp8 on Hopper warpgroup MMA (sm_90a), tensor|row|block x tensor|col|block */
    QJIT_KERNEL_WGMMA_I8 = 7, /* "wgmma_i8": s8 x s8 / s8 x s4 on Hopper warpgroup MMA (sm_90a), in auto above M = 64 */
    QJIT_KERNEL_WGMMA_MX = 8, /* "wgmma_mx": MXFP8/MXFP4 on Hopper fp8 warpgroup MMA (sm_90a), in auto above M = 64 */
    QJIT_KERNEL_WGMMA_WQ = 9, /* "wgmma_wq": f16/bf16 x s4/u4/s8/e2m1 on Hopper warpgroup MMA (sm_90a), in auto above M = 64 */
    QJIT_KERNEL_WGMMA_TMA = 10, /* "wgmma_tma": fp8, s8 x s8 and f16/bf16 on Hopper warpgroup MMA with TMA loads, B multicast across CTA pairs and (fp8) overlapped promotion (sm_90a), in auto above M = 64 */
    QJIT_KERNEL_COUNT /* one past the named families */
} qjit_kernel;

/* Names as descriptors write them: qjit_arch_name(QJIT_ARCH_SM90A) is "sm_90a" and
 * QJIT_ARCH_AUTO "auto"; qjit_kernel_name(QJIT_KERNEL_MMA) is "mma".  NULL for a value
 * that is not one (not a family of this build).  Static storage; thread-safe. */
QJIT_API const char *qjit_arch_name(qjit_arch a);
QJIT_API const char *qjit_kernel_name(qjit_kernel k);

/* ---------------------------------------------------------------- descriptor */
/* Names one kernel.  Plain data: copy it freely.  Configuration fields that are 0 mean
 * "auto".  Canonical text form (qjit_gemm_desc_format), fields in this order:
 *   gemm a=bf16 b=bf16 sa=none sb=none out=bf16 bias=0 arch=sm_90a kernel=mma
 *        tile=128x128x32 warps=2x2 stages=4 split=1
 * For sb=group:G, "gs=<dtype>" (group-scale type) and "zeros=0|1" follow sb.
 * Auto fields print as "auto" (tile=auto, warps=auto, stages=auto, split=auto, arch=auto,
 * kernel=auto).  Parsing accepts the fields in any order; omitted fields take the
 * defaults of qjit_gemm_desc_init. */
typedef struct qjit_gemm_desc {
    qjit_dtype a, b, out;
    qjit_scale_mode sa, sb;
    int group;              /* group size g for QJIT_SCALE_GROUP (32, 64, 128, 256) */
    qjit_dtype group_scale; /* f16/bf16/f32 for QJIT_SCALE_GROUP */
    int zeros;              /* 1: zero points for u4 group mode */
    int bias;               /* 1: add bias[n] (type = out) */
    qjit_arch arch;
    qjit_kernel kernel;
    int bm, bn, bk;         /* tile; 0 = auto (all three together) */
    int wm, wn;             /* warps along M and N; 0 = auto */
    int stages;             /* pipeline depth; 0 = auto.  The descriptor takes 2..32; each kernel
                               family takes its own range (qjit_gemm_supports says which) */
    int split_k;            /* 1 = none; 0 = auto.  mma, mma_i8, mma_f8 and wgmma on sm_90a take
                               2..8: the most CTAs of a cluster one output tile's K is split
                               across, chosen at launch when the tiles leave SMs idle and summed
                               in a fixed order (int32 sums exactly); mma_wq makes that choice
                               itself (up to 8) at split=1.  The launch plans for two CTAs an
                               SM; with QJIT_SPLIT_OCC=1 in the environment when the context
                               is made, for as many as fit (an experiment: the shipped tuning
                               records were measured without it; docs/NOTES.md) */
} qjit_gemm_desc;

/* Fill with defaults: a=f16 b=f16 out=f16, no scales, no bias, everything else auto. */
QJIT_API void qjit_gemm_desc_init(qjit_gemm_desc *d);
/* Parse the text form.  On error nothing is written to *d and the message names the
 * token, field and value.  Thread-safe. */
QJIT_API qjit_status qjit_gemm_desc_parse(const char *text, qjit_gemm_desc *d);
/* Canonical text into buf (always NUL-terminated when cap > 0).  *len (may be NULL)
 * gets the full length; QJIT_ERROR_INVALID_ARGUMENT if it did not fit. */
QJIT_API qjit_status qjit_gemm_desc_format(const qjit_gemm_desc *d, char *buf, size_t cap,
                                           size_t *len);
/* Check every field on its own and in combination; the message names the first bad
 * field and its value.  Auto fields are valid. */
QJIT_API qjit_status qjit_gemm_desc_validate(const qjit_gemm_desc *d);

/* ---- packing and quantization (host) ---- */
/* Host-side helpers that produce the operand formats of DESIGN.md §2: number
 * conversions, the 4-bit packing, per-group int4 weights and MX (e8m0-scaled) blocks.
 * Plain computations on host memory: no context, no GPU, thread-safe, and on any error
 * nothing is written.  Every rounding is round-to-nearest, ties to even (RNE); a
 * conversion rounds once (never through an intermediate format), whatever the
 * floating-point environment.  Sizes and leading dimensions count elements; a 4-bit
 * matrix row of leading dimension ld starts at byte r·ld/2, so its ld must be even.
 *
 *     // W4A16 weights, group 128, bf16 scales, from float w[N][K]:
 *     uint8_t *q = malloc(N * K / 2);                      // [N][K/2]
 *     uint16_t *s = malloc(N * (K / 128) * 2);             // [N][K/128] bf16
 *     if (qjit_quant_group4(QJIT_DTYPE_S4, 128, QJIT_DTYPE_BF16, N, K, w, K,
 *                           q, K, s, NULL) != QJIT_OK)
 *         fprintf(stderr, "qjit: %s\n", qjit_last_error());
 *     // -> descriptor "a=bf16 b=s4 sb=group:128 gs=bf16", args.ldb = K
 */

/* Scalar conversions.  x_from_f32: RNE.  f16 and bf16 overflow to ±inf like IEEE
 * (f16 max 65504); NaN gives the quiet NaN 0x7E00 / 0x7FC0 with x's sign.
 * e4m3 (bias 7, no inf, max 448 = 0x7E, NaN = 0x7F) and e5m2 (bias 15, max 57344 =
 * 0x7B) saturate: a finite value or infinity beyond the max gives ±max, as the PTX
 * ".satfinite" conversions do; NaN gives 0x7F / 0x7E (sign kept).  e2m1 (values
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives; the code is in bits 0-3, bit 3 the sign)
 * saturates to ±6; it has no NaN, so NaN gives +0 (code 0) -- carry NaN in an MX
 * scale (0xFF) instead.  -0 keeps its sign everywhere.
 * x_to_f32: exact.  e4m3 0x7F/0xFF and e5m2 exponent 31 with a mantissa decode to NaN,
 * e5m2 0x7C/0xFC to ±inf; e2m1 reads bits 0-3 only; e8m0 c gives 2^(c−127) (0: 2^-127)
 * and 0xFF gives NaN. */
QJIT_API uint16_t qjit_f16_from_f32(float x);
QJIT_API float qjit_f16_to_f32(uint16_t h);
QJIT_API uint16_t qjit_bf16_from_f32(float x);
QJIT_API float qjit_bf16_to_f32(uint16_t h);
QJIT_API uint8_t qjit_e4m3_from_f32(float x);
QJIT_API float qjit_e4m3_to_f32(uint8_t c);
QJIT_API uint8_t qjit_e5m2_from_f32(float x);
QJIT_API float qjit_e5m2_to_f32(uint8_t c);
QJIT_API uint8_t qjit_e2m1_from_f32(float x);
QJIT_API float qjit_e2m1_to_f32(uint8_t c);
QJIT_API float qjit_e8m0_to_f32(uint8_t c);

/* Pack a rows×k matrix of 4-bit values held one per byte into the layout of DESIGN.md
 * §2 (element 2i in bits 0-3 of byte i, element 2i+1 in bits 4-7).  t selects the
 * source element type and its range: QJIT_DTYPE_S4: int8_t in [-8, 7] (stored as the
 * two's complement nibble); QJIT_DTYPE_U4: uint8_t in [0, 15]; QJIT_DTYPE_E2M1:
 * uint8_t codes in [0, 15].  k must be even; src has leading dimension ld_src ≥ k
 * (bytes), dst ld_dst ≥ k (elements, even).  Only the k/2 bytes of each dst row are
 * written.  A value out of range gives QJIT_ERROR_INVALID_ARGUMENT naming its row,
 * column and value, with nothing written. */
QJIT_API qjit_status qjit_quant_pack4(qjit_dtype t, int64_t rows, int64_t k,
                                      const void *src, int64_t ld_src,
                                      void *dst, int64_t ld_dst);
/* The inverse: s4 nibbles to sign-extended int8_t, u4 and e2m1 nibbles to uint8_t in
 * [0, 15].  Same sizes and leading dimensions (src: packed, ld_src elements, even). */
QJIT_API qjit_status qjit_quant_unpack4(qjit_dtype t, int64_t rows, int64_t k,
                                        const void *src, int64_t ld_src,
                                        void *dst, int64_t ld_dst);

/* Per-group int4 quantization of f32 weights w[n][k] (leading dimension ldw ≥ k) along
 * k, group size `group` ∈ {32, 64, 128, 256}, k % group == 0.  For each row r and
 * group j (the values w of columns j·g .. j·g+g−1), with RNE_T the rounding to the
 * scale type T ∈ {f16, bf16, f32} of a quotient computed in double, and rne() the
 * rounding to an integer, ties to even, of w / s computed in double:
 *   qtype S4 (symmetric): s = RNE_T(max|w| / 7); q = clamp(rne(w / s), -8, 7).
 *     Dequantized value q·s.
 *   qtype U4 (asymmetric): lo = min(0, min w), hi = max(0, max w) -- the range always
 *     holds 0, so that the zero point lies in [0, 15] and 0 is exact;
 *     s = RNE_T((hi − lo) / 15); z = clamp(rne(−lo / s), 0, 15);
 *     q = clamp(rne(w / s) + z, 0, 15).  Dequantized value (q − z)·s.
 *   The quotients use the stored (rounded) s, so |w − dequantized| ≤ s/2 + 7.5·u,
 *   u the spacing of T's values at s; the u term comes from the rounding of s and
 *   shows only on values clamped at a range end (for s4 only when s is subnormal).
 *   A group whose s is 0 (all zeros, or s below half of T's smallest subnormal)
 *   stores s = 0, z = 0 and q = 0: it dequantizes to 0.
 * Outputs: q packed as qjit_quant_pack4 makes it, leading dimension ldq ≥ k elements
 * (even); scales [n][k/group] of scale_type, contiguous; zeros (U4 only, NULL for S4)
 * [n][k/group] of scale_type too, holding the integers z exactly -- the layout a
 * descriptor "sb=group:G gs=T zeros=1" reads.  QJIT_ERROR_INVALID_ARGUMENT, nothing
 * written, for a non-finite w (message names row and column), a scale that overflows
 * T (e.g. max|w| > 7·65504 for f16), or bad sizes. */
QJIT_API qjit_status qjit_quant_group4(qjit_dtype qtype, int group, qjit_dtype scale_type,
                                       int64_t n, int64_t k, const float *w, int64_t ldw,
                                       void *q, int64_t ldq, void *scales, void *zeros);

/* How an MX block's shared exponent e is chosen from amax = max|x| of its 32 values,
 * for an element type of largest finite value max_elem = m·2^emax_elem (e4m3: 448 =
 * 1.75·2^8, e5m2: 57344 = 1.75·2^15, e2m1: 6 = 1.5·2^2). */
typedef enum qjit_mx_rule {
    /* OCP MX v1.0: e = floor(log2(amax)) − emax_elem.  amax/2^e may exceed max_elem
     * (up to 2^(emax_elem+1)); such values saturate to ±max_elem. */
    QJIT_MX_RULE_FLOOR = 0,
    /* e = ceil(log2(amax / max_elem)): the least e with amax ≤ max_elem·2^e, so no
     * value saturates. */
    QJIT_MX_RULE_RCEIL = 1,
    QJIT_MX_RULE_COUNT
} qjit_mx_rule;

/* The e8m0 code of an MX block's scale: e + 127 clamped to [0, 254], computed exactly
 * (no log2 rounding).  amax == 0 gives code 0 (the clamped limit of both rules);
 * NaN or infinite amax gives 0xFF.  The sign of amax is ignored.  elem ∈ {e4m3, e5m2,
 * e2m1}, else QJIT_ERROR_INVALID_ARGUMENT. */
QJIT_API qjit_status qjit_e8m0_from_amax(float amax, qjit_dtype elem, qjit_mx_rule rule,
                                         uint8_t *code);

/* MX quantization of x[rows][k] (leading dimension ldx ≥ k), blocks of 32 along k,
 * k % 32 == 0.  Each block gets code c = qjit_e8m0_from_amax(max|x|) in
 * scales[r][k/32] (contiguous) and its values the codes of elem(x · 2^−(c−127)),
 * converted as qjit_<elem>_from_f32 does (RNE, saturating; the scaling is exact).  A
 * block with a NaN or infinity gets scale 0xFF (it dequantizes to NaN) and element
 * codes 0.  q: elem = e4m3/e5m2: one byte per value, leading dimension ldq ≥ k;
 * elem = e2m1: packed as qjit_quant_pack4 makes it, ldq ≥ k elements, even.  Dequant
 * is value(q)·2^(c−127), the "mx" scale mode. */
QJIT_API qjit_status qjit_quant_mx(qjit_dtype elem, qjit_mx_rule rule, int64_t rows,
                                   int64_t k, const float *x, int64_t ldx, void *q,
                                   int64_t ldq, uint8_t *scales);
/* ---- end of packing and quantization ---- */

/* ---------------------------------------------------------------- context */
typedef struct qjit_context qjit_context;

typedef enum qjit_log_level {
    QJIT_LOG_DEBUG = 0,
    QJIT_LOG_INFO = 1,
    QJIT_LOG_WARN = 2,
    QJIT_LOG_ERROR = 3
} qjit_log_level;
typedef void (*qjit_log_fn)(void *user, qjit_log_level level, const char *message);

typedef struct qjit_options {
    /* Directory of the writable cache DB (qjit.db inside).  NULL: $QJIT_CACHE_DIR,
     * else $XDG_CACHE_HOME/qjit, else $HOME/.cache/qjit.  An unusable directory
     * degrades to an in-memory cache with a warning. */
    const char *cache_dir;
    /* Read-only DB file consulted first (a shipped cache).  NULL: $QJIT_SHIPPED_CACHE. */
    const char *shipped_cache;
    /* 1: no DB at all, memory only. */
    int memory_only;
    /* Cap on the kernels in the writable DB, in cubin + generated source bytes: a put
     * that takes them past it evicts the least recently used.  The file is larger by the
     * key material, indexes and free pages (qjit_cache_db_prune_size caps the file
     * itself).  0: $QJIT_CACHE_MAX_BYTES or unlimited. */
    uint64_t cache_max_bytes;
    /* Directory whose files override the built-in templates (development). NULL:
     * $QJIT_TEMPLATE_DIR or none. */
    const char *template_dir;
    /* Target override for descriptors with arch=auto; AUTO = the current device's. */
    qjit_arch arch;
    /* Warnings and info; NULL = silent. Called from any thread. */
    qjit_log_fn log;
    void *log_user;
    /* 1: check the writable cache fully when the context opens it (SQLite's quick_check
     * and every row's hashes, as qjit_cache_db_verify does) and repair what is damaged
     * before going on; costs a read of the whole file.  0: $QJIT_CACHE_VERIFY, else
     * damage is found and repaired when a call reaches it.  qjit-precompile sets it. */
    int verify_cache;
} qjit_options;

QJIT_API void qjit_options_init(qjit_options *o);
/* Create a context.  Touches no GPU (the driver loads at the first GPU use).  The
 * strings in *o are copied.  Thread-safe. */
QJIT_API qjit_status qjit_context_create(const qjit_options *o, qjit_context **out);
/* Destroys the context and every handle it gave out (their modules are unloaded).
 * NULL is fine.  No handle of it may be in use. */
QJIT_API void qjit_context_destroy(qjit_context *ctx);
/* The process-wide context behind qjit_get_gemm, created on first use from the
 * environment (QJIT_CACHE_DIR, QJIT_SHIPPED_CACHE, QJIT_TEMPLATE_DIR, ...). */
QJIT_API qjit_status qjit_default_context(qjit_context **out);

typedef struct qjit_stats {
    uint64_t gets;          /* qjit_*get_gemm calls */
    uint64_t memory_hits;   /* served from the in-process map */
    uint64_t disk_hits;     /* served from a DB */
    uint64_t compiles;      /* NVRTC compilations */
    uint64_t compile_failures;
    double compile_ms;      /* total NVRTC time */
} qjit_stats;
QJIT_API void qjit_context_stats(qjit_context *ctx, qjit_stats *out);

/* Where a context keeps what it compiles.  A damaged cache file is repaired in the call
 * that finds it (moved aside to qjit.db.corrupt, recreated with the rows that still
 * verify), and the call goes on with it; a directory that cannot hold a file degrades
 * the context to memory (persistent = 0), with one warning. */
typedef struct qjit_cache_info {
    char path[1024];        /* the writable DB file, or ":memory:" */
    int persistent;         /* 1: kernels compiled now are kept in that file */
    int shipped;            /* 1: a read-only shipped cache is layered under it */
    uint64_t repairs;       /* damaged files or rows this context found and repaired */
    uint64_t rows_dropped;  /* kernel rows the repairs could not keep (rebuilt on demand) */
} qjit_cache_info;
QJIT_API void qjit_context_cache_info(qjit_context *ctx, qjit_cache_info *out);

/* ---------------------------------------------------------------- gemm handles */
typedef struct qjit_gemm qjit_gemm;

/* M buckets.  A handle whose descriptor leaves configuration fields auto holds one
 * kernel per bucket of M (buckets that resolve alike share one) and picks it at launch
 * from M alone, by a table lookup.  The buckets, by M:
 *   1 | 2-4 | 5-8 | 9-16 | 17-32 | 33-64 | 65-128 | 129-256 | 257-1024 | 1025 and up. */
#define QJIT_M_BUCKETS 10
/* The bucket of M (M <= 1: bucket 0). */
QJIT_API int qjit_m_bucket(int64_t m);
/* The largest M of bucket b (INT64_MAX for the last; 0 for b out of range). */
QJIT_API int64_t qjit_m_bucket_max(int b);
struct CUstream_st; /* = CUstream of cuda.h; NULL is the legacy default stream */

/* Get (compile, or load from a cache) the kernel of a descriptor, for the CUDA context
 * current on this thread, through the default context.  The handle is immutable and
 * owned by the qjit context: valid until qjit_context_destroy, never freed by the
 * caller.  Thread-safe; concurrent requests for one descriptor compile once. */
QJIT_API qjit_status qjit_get_gemm(const qjit_gemm_desc *d, qjit_gemm **out);
/* Same, with an explicit context.  If `capture_stream` is not NULL and is capturing,
 * a descriptor not yet loaded gives QJIT_ERROR_CAPTURING (nothing is compiled or
 * loaded, so the capture is not broken); a loaded one is returned. */
QJIT_API qjit_status qjit_context_get_gemm(qjit_context *ctx, const qjit_gemm_desc *d,
                                           struct CUstream_st *capture_stream,
                                           qjit_gemm **out);

/* The calls from here to qjit_gemm_precompile take ctx = NULL for the default context.
 *
 * Fill the "auto" fields of *d for `arch` (AUTO: the context's override, else the
 * current device's) with one configuration: the family's choice when M is not known (its
 * template's default(m) at m = 0; for f16/bf16 on sm_90a that is the M > 64 kernel, for
 * the weight-only and W4A8 pairs the decode tile).  A handle of d holds one kernel per
 * run of M buckets: qjit_gemm_variants lists them.  Touches no GPU when arch is named. */
QJIT_API qjit_status qjit_gemm_resolve(qjit_context *ctx, const qjit_gemm_desc *d,
                                       qjit_arch arch, qjit_gemm_desc *resolved);
/* Whether descriptor d can run on arch (after resolving auto fields); on
 * QJIT_ERROR_UNSUPPORTED `why` gets the reason.  No compile. */
QJIT_API qjit_status qjit_gemm_supports(qjit_context *ctx, const qjit_gemm_desc *d,
                                        qjit_arch arch, char *why, size_t why_cap);

/* The configurations of a named sweep for d on arch: each is d with its auto
 * configuration fields (tile, warps, stages) set to one point of the sweep, for
 * precompiling or timing every candidate.  Sweeps: "default" (the configurations qjit
 * considers for the descriptor's kernel family, the heuristic's choice first) and
 * "small-m" (tiles for M ≤ 64).  With kernel=auto, the points of every other family
 * that serves the pair on arch and has been measured on a GPU follow, in the order of
 * preference (so f16/bf16 on sm_90a sweeps wgmma's tiles and then mma's).  Fields d
 * already names are kept, and sweep points that the arch cannot run are left out.  Writes at most `cap` descriptors to out and
 * the number of points to *count (may exceed cap).  No GPU needed when arch is named. */
QJIT_API qjit_status qjit_gemm_sweep(qjit_context *ctx, const qjit_gemm_desc *d,
                                     qjit_arch arch, const char *name, qjit_gemm_desc *out,
                                     size_t cap, size_t *count);

/* Compile d for a named arch and store it in the context's cache, with no GPU.  The
 * key is the one qjit_get_gemm looks up on a device of that arch.  *was_cached (may be
 * NULL) gets 1 when it was already there.  Thread-safe. */
QJIT_API qjit_status qjit_gemm_precompile(qjit_context *ctx, const qjit_gemm_desc *d,
                                          qjit_arch arch, int *was_cached);

/* ---- tuning ---- */
/* One measured candidate of a problem.  A problem is a descriptor with auto configuration
 * fields on one GPU and arch, at one M bucket, N and K; its winner is its fastest candidate
 * whose output matched the reference, and handles of that descriptor made later (in this
 * process or another using the same cache) run the winner for launches of that N and K in
 * that bucket. */
typedef struct qjit_tune_measurement {
    const char *gpu;              /* the device's name; NULL: the current device's */
    int64_t m, n, k;              /* the sizes timed (m picks the bucket) */
    const qjit_gemm_desc *config; /* the candidate: d with every field named, arch included */
    double us;                    /* its time, microseconds (a median) */
    int ok;                       /* 1: its output matched the reference; 0: it may not win */
} qjit_tune_measurement;
/* Store a measurement of descriptor d's problem in the context's writable cache DB,
 * replacing an earlier one of the same candidate (others are kept).  The candidate must
 * be a configuration of d that its kernel supports (QJIT_ERROR_INVALID_ARGUMENT with the
 * reason if not).  Thread-safe. */
QJIT_API qjit_status qjit_tune_record(qjit_context *ctx, const qjit_gemm_desc *d,
                                      const qjit_tune_measurement *m);

/* Autotuning: measure the candidate configurations of descriptor d (its configuration
 * fields auto) on the current device for each problem (M, N, K), and record every
 * measurement with qjit_tune_record, so that handles of d made later (in any process
 * using this cache) run each problem's winner.
 *
 * For each problem: the candidates are the points of the named sweep (qjit_gemm_sweep
 * on the device's arch) and the bucket's heuristic choice.  They compile on
 * compile_threads CPU threads (misses only; what a cache holds loads) while the calling
 * thread measures: each problem waits for its own candidates only.  On the GPU, with
 * fresh random operands (never zeros): the heuristic's kernel computes the
 * reference output; each candidate runs once on a poisoned output and passes when its
 * normalized error against the reference is within twice the pair's bound (the output
 * rounding plus the precision the operands are multiplied in); its time is the median,
 * over `reps` replays of a CUDA graph of repeated launches, issued back to back so that
 * the GPU does not idle between them, of one launch, with each
 * launch reading its own copy of the weights (B, its scales and zero points) until
 * rotate_bytes are read, so that the weights come from DRAM as they do in a model, not
 * from L2, and every launch the same activations (A, its scales), which a model's kernel
 * finds in L2 after the kernel that wrote them.  A candidate whose
 * launch is refused (sizes it cannot do) is skipped; one whose output fails is
 * recorded with ok = 0 and cannot win.  The passed candidates within 10% of the fastest
 * (four at most) and the heuristic's kernel are then timed again side by side, their
 * graphs replayed in turns on one stream (at the board's power limit the clock drifts
 * between two candidates timed apart), and the fastest of them there wins; their records
 * hold those times on the sweep's scale (the winner's is the sweep's fastest).  For M above
 * 64 their replays first run untimed for 250 ms, so that the board is as loaded as a
 * prefill keeps it; QJIT_TUNE_WARM_MS=N in the environment (milliseconds, 0 to 60000) sets
 * that load for every problem.  Needs a current CUDA context; allocates and
 * frees its own device memory; the current stream is not used.  Not for use while
 * another thread captures a graph on this device. */
typedef struct qjit_tune_problem {
    int64_t m, n, k;
} qjit_tune_problem;
/* Called as work advances: stage "compile" (done/total candidates), "time" (done/total
 * measurements: a candidate is loaded, run and checked), "measure" (its timing begins),
 * what = the candidate's canonical text; "operands" (a problem's operands are made) and
 * "final" (its final round begins), what = ""; and "problem" each time a problem is
 * finished (done of total problems: results[done - 1] is complete, and recorded unless
 * dry_run), what = "".  Each stage lasts until the next call.  From the calling thread. */
typedef void (*qjit_tune_progress_fn)(void *user, const char *stage, size_t done,
                                      size_t total, const char *what);
typedef struct qjit_tune_options {
    const char *sweep;          /* candidates: "default" or "small-m"; NULL: small-m for
                                   problems of M <= 64, default above */
    int warmup;                 /* graph replays before timing (0: 3) */
    int reps;                   /* timed replays; the median is kept (0: 20).  A graph whose
                                   first replay takes over 1 ms (prefill sizes) gets that
                                   replay as its warm-up and as many as 100 ms allow, at
                                   least 3, unless that first replay is over 1.25x the
                                   fastest so far: then it is the candidate's time */
    int compile_threads;        /* (0: the CPU count) */
    uint64_t rotate_bytes;      /* weight bytes read before a copy is read again (0: 256 MB) */
    int dry_run;                /* 1: measure, report, record nothing */
    qjit_tune_progress_fn progress;
    void *user;
} qjit_tune_options;
QJIT_API void qjit_tune_options_init(qjit_tune_options *o);
/* One problem's outcome. */
typedef struct qjit_tune_result {
    qjit_tune_problem problem;
    int bucket;                 /* qjit_m_bucket(m) */
    int candidates;             /* configurations tried (heuristic included) */
    int passed, failed, skipped;/* right; wrong (recorded, ok = 0); refused or not built */
    qjit_gemm_desc heuristic;   /* the bucket's heuristic choice, and its time */
    double heuristic_us;
    qjit_gemm_desc best;        /* the fastest candidate that passed, and its time */
    double best_us;
    double max_error;           /* the largest normalized error among those that passed */
} qjit_tune_result;
/* Tune d for problems[0..n) (results[i] for problems[i]).  QJIT_ERROR_INVALID_ARGUMENT
 * for a descriptor that names its whole configuration or a bad problem; other errors
 * name the problem and candidate.  Results recorded before an error stay recorded. */
QJIT_API qjit_status qjit_gemm_tune(qjit_context *ctx, const qjit_gemm_desc *d,
                                    const qjit_tune_problem *problems, size_t n,
                                    const qjit_tune_options *o, qjit_tune_result *results);

/* Launch arguments.  Device pointers; sizes and leading dimensions in elements (for
 * 4-bit types, in elements too: lda/ldb count values, two per byte). */
typedef struct qjit_gemm_args {
    const void *a, *b;
    void *d;
    const void *bias;     /* [N] of the output type, when the descriptor has bias */
    const void *scale_a;  /* per sa */
    const void *scale_b;  /* per sb */
    const void *zeros_b;  /* group zero points, when zeros=1 */
    int64_t m, n, k;
    int64_t lda, ldb, ldd;
} qjit_gemm_args;

/* Launch on `stream`.  Validates everything first (null/misaligned pointers, sizes
 * the kernel cannot do, leading dimensions too small, and the CUDA context: the one
 * current on this thread, and the stream's, must be the handle's, else
 * QJIT_ERROR_INVALID_ARGUMENT names the devices) and launches nothing on error.
 * Does not allocate, synchronize, read device memory or load modules: legal inside
 * stream capture in any mode.  M == 0 or N == 0 launches nothing and returns QJIT_OK.
 * sm_90a GEMMs, like the quantizers (qjit_quant_launch), are launched with programmatic
 * stream serialization unless QJIT_PDL=0 was in the environment when the context was made:
 * a kernel may be scheduled while the previous one in the stream finishes, and waits
 * (griddepcontrol.wait) until that one's writes are visible before it reads anything; CUDA
 * graphs keep the edge.  Results are the same bit for bit.  With QJIT_PDL=1 the gemv family
 * also reads its first weights (B, scale_b, zeros_b) before that wait: they must then not be
 * written by the kernel just before it in the stream.  Under it, gemv with 8-bit weights behind
 * 8-bit tokens also asks each row's next bytes into L2 before that wait (a hint: it reads
 * nothing into registers).  On the H200 the GEMMs' early start made the Llama 3 8B decode
 * steps of tools/bench_step.py 3-5% faster for W4A16 and W8A8 at M = 1 and moved the 70B
 * steps by -1.7% to +1.0% (docs/NOTES.md, "The GEMMs' early start by default").
 * Thread-safe. */
QJIT_API qjit_status qjit_gemm_launch(const qjit_gemm *g, const qjit_gemm_args *args,
                                      struct CUstream_st *stream);

/* What a launch would do, without launching: for tools that drive cuLaunchKernel
 * themselves (benchmarks of launch overhead).  Validates like qjit_gemm_launch.  A kernel
 * that takes more than its one parameter (kernel=wgmma_tma: tensor maps of A and B;
 * kernel=wgmma_wqr: tensor maps of A; all encoded at each launch)
 * gives QJIT_ERROR_UNSUPPORTED: launch it with qjit_gemm_launch.  params tells the kernel
 * it has no early start, whatever QJIT_PDL says: a raw launch asks for none. */
typedef struct qjit_launch_config {
    void *function;         /* CUfunction */
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    unsigned char params[128]; /* the kernel's single by-value parameter */
    size_t params_size;
    unsigned cluster_z; /* > 1: the grid goes in clusters of 1x1xcluster_z CTAs, which a raw
                           launch must ask for (cuLaunchKernelEx, cluster dimension) */
} qjit_launch_config;
QJIT_API qjit_status qjit_gemm_launch_config(const qjit_gemm *g, const qjit_gemm_args *args,
                                             qjit_launch_config *cfg);

/* Facts of a handle. */
typedef struct qjit_gemm_info {
    qjit_gemm_desc desc;        /* resolved: no auto fields */
    char text[256];             /* canonical text of desc */
    uint8_t key[16];            /* cache key (XXH3-128, big-endian) */
    unsigned threads, shared_bytes, registers;
    int k_multiple;             /* K must be a multiple of this (the kernel's loads, whole
                                   scale groups, MX blocks of 32, 4-bit pairs) */
    int ld_multiple;            /* lda, ldb must be multiples of this */
    int ptr_align;              /* a, b must be aligned to this many bytes */
    int variants;               /* kernels the handle holds (qjit_gemm_get_variants) */
} qjit_gemm_info;
/* Facts of a handle: desc, text, key, threads, shared_bytes and registers are those of the
 * kernel that runs the largest M; k_multiple, ld_multiple and ptr_align are what every
 * kernel of the handle accepts, so a launch that meets them is valid at any M. */
QJIT_API qjit_status qjit_gemm_get_info(const qjit_gemm *g, qjit_gemm_info *out);

/* One kernel of a handle (or of a descriptor's dispatch) and the launches that run it. */
typedef struct qjit_gemm_variant {
    qjit_gemm_desc desc;        /* resolved */
    char text[256];             /* its canonical text */
    int64_t m_min, m_max;       /* it runs for M in [m_min, m_max] (whole buckets) */
    int64_t n, k;               /* 0, 0: any N and K; else only this N and K (a tuned result) */
    int tuned;                  /* 1: a tuned result chose it; 0: its family's heuristic */
    double us;                  /* tuned: the time it was measured at (qjit_gemm_variants) */
    char gpu[64];               /* tuned: the GPU it was measured on (qjit_gemm_variants) */
} qjit_gemm_variant;
/* The kernels of a handle: first one per run of M buckets that pick the same kernel by
 * the heuristic, then, for each tuned N and K, one per run of tuned buckets.  Writes at
 * most cap entries and the number there are to *count. */
QJIT_API qjit_status qjit_gemm_get_variants(const qjit_gemm *g, qjit_gemm_variant *out,
                                            size_t cap, size_t *count);
/* The variant a launch of m, n, k runs, and why (tuned or heuristic).  Checks nothing
 * else about the sizes. */
QJIT_API qjit_status qjit_gemm_choose(const qjit_gemm *g, int64_t m, int64_t n, int64_t k,
                                      qjit_gemm_variant *out);
/* The kernels a get of d would load on arch, in the same form, without compiling or
 * loading anything (no GPU needed when arch is named).  Tuned results are those of the
 * current GPU when arch is AUTO, of every GPU when it is named (gpu says whose). */
QJIT_API qjit_status qjit_gemm_variants(qjit_context *ctx, const qjit_gemm_desc *d,
                                        qjit_arch arch, qjit_gemm_variant *out, size_t cap,
                                        size_t *count);

/* ---------------------------------------------------------------- quantization kernels */
/* Activation quantization on the GPU (DESIGN §9): x [M][K] (f16, bf16 or f32, K
 * contiguous, row stride ldx) into q [M][K] and the scales a GEMM reads, by a kernel of
 * its own kind on the same path as the GEMMs (descriptor, cache key, template
 * templates/quant.cu, handle).  Canonical text, fields in this order:
 *   quant in=bf16 out=e4m3 scale=mx rule=rceil arch=sm_90a
 *   in     f16 | bf16 | f32
 *   out    s8 | s4 | e4m3 | e2m1 (4-bit packed two a byte along K, as DESIGN §2)
 *   scale  row    f32[M], one per row (per token)            out s8, s4, e4m3
 *          tensor f32[1] for the whole of x                  out s8, s4, e4m3
 *          block  f32[M][ceil(K/128)], 1x128 (DeepSeek)       out e4m3
 *          mx     e8m0 u8[M][K/32], K a multiple of 32        out e4m3 (MXFP8), e2m1 (MXFP4)
 *   rule   floor | rceil: how mx picks a block's exponent (qjit_mx_rule); only with mx
 *   arch   as for GEMMs (e4m3 needs sm_89 or later); auto
 *   layout=cols (mx only; printed only when set): column-wise, see qjit_quant_desc.cols
 * The rules, bit for bit, for each group G of x that shares a scale (a row, the tensor,
 * 128 values of a row, 32 values of a row):
 *   - a G holding a NaN or an infinity gets scale NaN (mx: 0xFF) and every q of G is 0;
 *   - else amax = max |x| over G; s = (amax · clip) / QMAX in f32, each step rounded to
 *     nearest even (QMAX: s8 127, s4 7, e4m3 448); s = 0 (amax = 0) gives q = 0;
 *   - s8, s4: q = clamp(rne(x / s), -QMAX-1, QMAX) with x / s an f32 division;
 *     e4m3: q = e4m3(x / s), RNE, saturating to ±448 (values past a clip saturate);
 *   - mx: c = qjit_e8m0_from_amax(amax, out, rule) and q = out(x · 2^(127-c)) as
 *     qjit_quant_mx computes it (clip does not apply).
 * The dequantized value is q · s (mx: q · 2^(c-127)): the scale tensors are exactly what
 * a GEMM descriptor's sa=row / tensor / block / mx reads.  A group's scale is reduced and
 * applied inside the CTA or warp that owns the group; scale=tensor reduces partial
 * maxima in a fixed partition through a caller-given workspace.  Nothing depends on
 * timing: the same x gives the same bits eagerly and in graph replay, at any M. */
typedef struct qjit_quant_desc {
    qjit_dtype in, out;
    qjit_scale_mode scale;  /* ROW, TENSOR, BLOCK or MX */
    qjit_mx_rule rule;      /* mx only (FLOOR otherwise) */
    qjit_arch arch;
    int cols;               /* 0: rows (the groups run along K, the layout above).
                               1 ("layout=cols", mx only): column-wise, for a weight used
                               transposed (a MoE backward pass): x is [M][K] per batch and
                               the 32-value blocks run along M; q is written transposed,
                               [K][M] (row stride ldq >= M), with scales e8m0 [K][M/32]
                               (contiguous per batch): exactly the B operand [N=K][K'=M]
                               of an MX GEMM whose reduction runs over M.  M a multiple of
                               32; K any. */
} qjit_quant_desc;
/* Defaults: in=bf16 out=s8 scale=row, arch auto. */
QJIT_API void qjit_quant_desc_init(qjit_quant_desc *d);
/* Parse the text form (fields in any order, omitted ones default); on error nothing is
 * written and the message names the field and value.  Thread-safe. */
QJIT_API qjit_status qjit_quant_desc_parse(const char *text, qjit_quant_desc *d);
QJIT_API qjit_status qjit_quant_desc_format(const qjit_quant_desc *d, char *buf, size_t cap,
                                            size_t *len);
/* Check each field and their combination; the message names the first bad field. */
QJIT_API qjit_status qjit_quant_desc_validate(const qjit_quant_desc *d);

typedef struct qjit_quant qjit_quant;
/* The handle of a quantization descriptor for the CUDA context current on this thread
 * (compiled, or loaded from the cache), as qjit_context_get_gemm does it: owned by ctx
 * (NULL: the default context), shared by threads, compile-once; a miss while
 * capture_stream captures gives QJIT_ERROR_CAPTURING. */
QJIT_API qjit_status qjit_context_get_quant(qjit_context *ctx, const qjit_quant_desc *d,
                                            struct CUstream_st *capture_stream,
                                            qjit_quant **out);
/* Compile d for a named arch into the context's cache (ctx NULL: the default), no GPU. */
QJIT_API qjit_status qjit_quant_precompile(qjit_context *ctx, const qjit_quant_desc *d,
                                           qjit_arch arch, int *was_cached);

/* Workspace bytes scale=tensor needs (at most 4096); other modes need none. */
#define QJIT_QUANT_WORKSPACE_BYTES 4096
typedef struct qjit_quant_args {
    const void *x;          /* [M][K] of in, row stride ldx elements */
    void *q;                /* [M][K] of out, row stride ldq elements (4-bit: even) */
    void *scale;            /* as the scale mode says */
    void *workspace;        /* scale=tensor: QJIT_QUANT_WORKSPACE_BYTES of device memory,
                               4-byte aligned, not shared by concurrent launches */
    int64_t m, k, ldx, ldq;
    float clip;             /* clip ratio in (0, 1]; 0 means 1.  Not with mx */
    /* A batch of equal matrices (MoE experts: one launch, one descriptor for all E):
     * batch 0 or 1 is one.  Matrix e starts at x + e·x_batch_stride and q + e·
     * q_batch_stride (elements; 4-bit q: even), and its scales right after matrix e-1's
     * (the scale tensor is [batch][...] contiguous).  Not with scale=tensor. */
    int64_t batch, x_batch_stride, q_batch_stride;
} qjit_quant_args;
/* Launch on `stream`: checks every argument first (NULL or misaligned pointers, sizes,
 * leading dimensions, K a multiple of 32 for mx and even for 4-bit, clip, the CUDA
 * context) and launches nothing on error.  No allocation, synchronization or module
 * load: legal inside stream capture.  M == 0 launches nothing.  Thread-safe. */
QJIT_API qjit_status qjit_quant_launch(const qjit_quant *q, const qjit_quant_args *args,
                                       struct CUstream_st *stream);
/* The descriptor (resolved) and canonical text of a handle. */
QJIT_API qjit_status qjit_quant_get_desc(const qjit_quant *q, qjit_quant_desc *out,
                                         char *text, size_t cap);

/* A quantized linear layer in one call: x quantized by q into xq and xs (caller-owned
 * device buffers shaped as qjit_quant_args says), then the GEMM g with A = xq, scale_a =
 * xs and the rest from gemm_args (its .a and .scale_a are ignored), both on `stream` in
 * that order, so one graph captures both.  g's descriptor must read what q writes: a =
 * q's out and sa = q's scale; both are checked before anything is launched.  On sm_90a
 * the GEMM is launched with the early start of QJIT_PDL=1, its first weights read before its
 * wait, whatever QJIT_PDL says (unless QJIT_PDL=0): the kernel just before it is the
 * quantizer, which writes none of what the GEMM reads before its wait.  So xq, xs and workspace must not overlap b, scale_b or
 * zeros_b: QJIT_ERROR_INVALID_ARGUMENT names the two, and nothing is launched.  Results are
 * those of the two launches one after the other, bit for bit. */
typedef struct qjit_linear_args {
    const void *x;          /* activations [M][K] of q's in, row stride ldx */
    int64_t ldx;
    void *xq, *xs;          /* the quantized activations [M][K] (row stride K) and scales */
    void *workspace;        /* scale=tensor only */
    float clip;
    qjit_gemm_args gemm;    /* b, d, bias, scale_b, zeros_b, m, n, k, ldb, ldd */
} qjit_linear_args;
QJIT_API qjit_status qjit_linear_launch(const qjit_quant *q, const qjit_gemm *g,
                                        const qjit_linear_args *args,
                                        struct CUstream_st *stream);

/* ---------------------------------------------------------------- manifests */
/* One line of a manifest (the files of cache/manifests/, read by qjit-precompile): a GEMM
 * descriptor ("gemm ...") or a quantization descriptor ("quant ..."), in text form; on a
 * gemm line a token "sweep=NAME" anywhere (its auto configuration fields then stand for
 * every point of that named sweep, qjit_gemm_sweep); '#' to the end of the line a
 * comment. */
typedef struct qjit_manifest_item {
    int kind;               /* QJIT_MANIFEST_GEMM or QJIT_MANIFEST_QUANT */
    qjit_gemm_desc gemm;    /* kind GEMM: parsed and validated */
    qjit_quant_desc quant;  /* kind QUANT: parsed and validated */
    char sweep[64];         /* kind GEMM: the sweep's name, "" when the line names none */
} qjit_manifest_item;
#define QJIT_MANIFEST_GEMM 1
#define QJIT_MANIFEST_QUANT 2
/* QJIT_OK: *out is the line's item.  QJIT_ERROR_NOT_FOUND: the line holds only blanks
 * and comments.  QJIT_ERROR_INVALID_ARGUMENT: the message names the bad token or field
 * (a second sweep=, an empty or over-long NAME, sweep= on a quant line).  On any error
 * *out is left as it was.  Thread-safe. */
QJIT_API qjit_status qjit_manifest_line(const char *line, qjit_manifest_item *out);

/* ---- cache administration ---- */
/* Work on a cache DB file directly, by path, with no qjit_context: for deployment
 * pipelines and the qjit-cache tool.  A DB may be in use by running processes while
 * these calls run; they wait for locks (never fail with "busy") and see a consistent
 * snapshot.  A qjit_cache_db handle is not thread-safe: use it from one thread at a
 * time.
 *
 *     qjit_cache_db *db;
 *     qjit_cache_filter f = { .arch = "sm_90a" };
 *     if (qjit_cache_db_open(NULL, 0, &db) == QJIT_OK &&
 *         qjit_cache_db_export(db, "shipped.db", &f, NULL) == QJIT_OK)
 *         ...   // shipped.db: a self-contained file for qjit_options.shipped_cache
 *     qjit_cache_db_close(db);
 */
typedef struct qjit_cache_db qjit_cache_db;

/* Path of the default writable cache DB, "<dir>/qjit.db" with dir = $QJIT_CACHE_DIR,
 * else $XDG_CACHE_HOME/qjit, else $HOME/.cache/qjit.  Into buf (NUL-terminated when
 * cap > 0); *len (may be NULL) gets the full length; QJIT_ERROR_INVALID_ARGUMENT if it
 * did not fit or no variable is set.  Creates nothing. */
QJIT_API qjit_status qjit_cache_default_path(char *buf, size_t cap, size_t *len);

/* Open the DB at `path` (NULL: the default path).  writable = 0: read-only, the file
 * must exist (QJIT_ERROR_IO if not).  writable = 1: created with its directory if
 * missing.  QJIT_ERROR_CACHE when the file is not a qjit cache DB of this schema
 * version (it is never modified then).  A damaged qjit cache opens all the same, so that
 * qjit_cache_db_verify can report and repair it, also one SQLite cannot read as a
 * database (its header damaged, but the cache's schema text still on its first page);
 * other calls on such a handle return QJIT_ERROR_CACHE saying so.  Free with
 * qjit_cache_db_close. */
QJIT_API qjit_status qjit_cache_db_open(const char *path, int writable, qjit_cache_db **out);
/* NULL is fine. */
QJIT_API void qjit_cache_db_close(qjit_cache_db *db);

/* Selects rows; every field NULL or "" means "any".  All given fields must match. */
typedef struct qjit_cache_filter {
    const char *arch;       /* substring of the arch, e.g. "sm_90" */
    const char *match;      /* substring of the canonical descriptor, e.g. "a=s8 b=s4" */
    const char *key_prefix; /* hex prefix of the key (either case) */
} qjit_cache_filter;

/* One row, as list sees it.  Pointers are valid during the callback only. */
typedef struct qjit_cache_entry {
    char key[33];           /* 32 lowercase hex digits */
    const char *desc;       /* canonical descriptor text */
    const char *arch;       /* "sm_90a" */
    uint64_t cubin_bytes, source_bytes;
    double compile_ms;      /* NVRTC time when it was built */
    int64_t created, last_used; /* unix seconds */
} qjit_cache_entry;
/* Return 0 to go on, non-zero to stop the listing (which then returns QJIT_OK). */
typedef int (*qjit_cache_entry_fn)(void *user, const qjit_cache_entry *e);

/* Call fn for every row matching f (NULL: all), ordered by arch then descriptor. */
QJIT_API qjit_status qjit_cache_db_list(qjit_cache_db *db, const qjit_cache_filter *f,
                                        qjit_cache_entry_fn fn, void *user);

typedef struct qjit_cache_arch_stats {
    char arch[24];
    uint64_t rows, bytes;   /* bytes: cubin + source */
} qjit_cache_arch_stats;
typedef struct qjit_cache_stats {
    uint64_t rows;
    uint64_t cubin_bytes, source_bytes;
    uint64_t file_bytes;    /* the DB file plus its -wal file */
    int schema_version;
    int narch;              /* entries used in arch[] (the first 16 archs by name) */
    qjit_cache_arch_stats arch[16];
    uint64_t tuning_rows;   /* tuning results (qjit_cache_db_tuning) */
} qjit_cache_stats;
QJIT_API qjit_status qjit_cache_db_stats(qjit_cache_db *db, qjit_cache_stats *out);

/* Called for each bad row verify finds; why: "cubin size", "cubin hash", "key is not
 * the hash of its material", ... */
typedef void (*qjit_cache_bad_fn)(void *user, const char *key_hex, const char *desc,
                                  const char *why);
typedef struct qjit_cache_verify_report {
    uint64_t rows_checked, rows_bad, rows_deleted;
    int integrity_ok;       /* PRAGMA quick_check said "ok" */
    char integrity[256];    /* its first message when not ok */
    uint64_t tuning_checked, tuning_bad; /* tuning rows rechecked, and those whose hash
                                            does not match (repair deletes them) */
    int rebuilt;            /* repair rebuilt the damaged file: the damaged one is now
                               "<path>.corrupt", the new one holds rows_kept kernel rows,
                               and rows_deleted is how many others it listed that did not
                               read back or verify (rows on pages past reading are not
                               counted: a file whose header is damaged may list none) */
    uint64_t rows_kept;
} qjit_cache_verify_report;
/* Recheck every row (cubin size and XXH3-128, key = hash of its material, fields
 * present) and run PRAGMA quick_check.  repair = 1 (writable handle only) deletes bad
 * rows and, when the file itself is damaged, rebuilds it from the rows that still read
 * back intact (rebuilt = 1).  A file SQLite cannot open at all (see qjit_cache_db_open)
 * reports integrity_ok = 0 with SQLite's message and no rows checked; repair rebuilds it
 * from what a new header lets SQLite read, else empty.  Returns QJIT_OK when the check
 * ran, whatever it found: read *out. */
QJIT_API qjit_status qjit_cache_db_verify(qjit_cache_db *db, int repair,
                                          qjit_cache_bad_fn fn, void *user,
                                          qjit_cache_verify_report *out);

/* One tuning result, as qjit_cache_db_tuning sees it.  Pointers valid during the callback
 * only. */
typedef struct qjit_cache_tuning_entry {
    const char *gpu, *arch;
    const char *problem;    /* the descriptor tuned, as asked (arch=auto) */
    const char *config;     /* the candidate measured */
    int bucket;             /* M bucket */
    int64_t m, n, k;        /* the sizes timed */
    double us;              /* its time */
    int ok;                 /* its output matched the reference */
    int winner;             /* the fastest ok row of its (gpu, arch, problem, bucket, n, k) */
    int64_t created;        /* unix seconds */
} qjit_cache_tuning_entry;
typedef int (*qjit_cache_tuning_fn)(void *user, const qjit_cache_tuning_entry *e);
/* Call fn for every tuning row matching f (arch; match: a substring of the problem; a
 * key_prefix matches none), ordered by gpu, arch, problem, n, k, bucket and time.  Rows
 * whose hash does not match their fields are left out (verify reports them). */
QJIT_API qjit_status qjit_cache_db_tuning(qjit_cache_db *db, const qjit_cache_filter *f,
                                          qjit_cache_tuning_fn fn, void *user);

/* Delete rows not used for more than `seconds` (writable handle).  *removed (may be
 * NULL) gets the number of rows deleted. */
QJIT_API qjit_status qjit_cache_db_prune_age(qjit_cache_db *db, int64_t seconds,
                                             uint64_t *removed);
/* Make the file fit max_bytes: delete least-recently-used kernel rows, VACUUM, and
 * repeat while the file plus its -wal is still larger (a row costs more than its cubin +
 * source: key material, indexes, page slack).  Tuning rows are kept.  A file left with
 * no kernel rows stays at its empty size, which a cap of a few KiB can be below.
 * (The runtime cap, qjit_options.cache_max_bytes, counts cubin + source bytes only.) */
QJIT_API qjit_status qjit_cache_db_prune_size(qjit_cache_db *db, uint64_t max_bytes,
                                              uint64_t *removed);
/* Give free pages back to the file system (VACUUM; waits for other users). */
QJIT_API qjit_status qjit_cache_db_vacuum(qjit_cache_db *db);

/* Copy the rows matching f (NULL: all) that verify into a NEW file out_path
 * (QJIT_ERROR_IO if it exists), as one self-contained file (no -wal) fit to ship as a
 * read-only cache.  *copied / *bad (may be NULL) get the rows copied / skipped. */
QJIT_API qjit_status qjit_cache_db_export(qjit_cache_db *db, const char *out_path,
                                          const qjit_cache_filter *f, uint64_t *copied,
                                          uint64_t *bad);
/* Add the rows of the DB file other_path (opened read-only) to db (writable handle).
 * Keys already present are kept as they are; incoming rows that do not verify are
 * skipped.  *added / *bad (may be NULL) get the counts. */
QJIT_API qjit_status qjit_cache_db_merge(qjit_cache_db *db, const char *other_path,
                                         uint64_t *added, uint64_t *bad);

/* The generated CUDA source of the row whose key starts with key_prefix (hex, at least
 * 4 digits).  *source gets a NUL-terminated malloc'd copy, freed with qjit_cache_free;
 * *len (may be NULL) its length; *entry (may be NULL) the row's facts (its pointers
 * valid until the next call on db).  QJIT_ERROR_NOT_FOUND if no key matches,
 * QJIT_ERROR_INVALID_ARGUMENT if several do (the message lists them). */
QJIT_API qjit_status qjit_cache_db_source(qjit_cache_db *db, const char *key_prefix,
                                          char **source, size_t *len,
                                          qjit_cache_entry *entry);
/* Free memory returned by the qjit_cache_db_* calls.  NULL is fine. */
QJIT_API void qjit_cache_free(void *p);
/* ---- end of cache administration ---- */

#ifdef __cplusplus
}
#endif
#endif /* QJIT_H */
