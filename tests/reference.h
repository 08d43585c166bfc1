/*
 * reference.h — the CPU reference every qjit GEMM is checked against, written from
 * DESIGN.md §2 alone (no kernel, no library code): decoders of every element type, the
 * GEMM in double for every dtype pair and scale mode, the f32 epilogue of integer
 * pairs for bit-exact checks, output rounding and the normalized error.
 *
 * Not part of the library.  tests/CMakeLists.txt builds each test_*.c with testlib.c
 * only, so a test that needs the reference does #include "reference.c" (once per
 * executable).  Not thread-safe (ref_error keeps one message).
 */
#ifndef QJIT_REFERENCE_H
#define QJIT_REFERENCE_H

#include "qjit.h"

#include <stddef.h>
#include <stdint.h>

/* The value of one element code of type t: f16, bf16, f32 (bits), s8 (low 8 bits, two's
 * complement), s4 (low 4 bits, two's complement), u4, e4m3 (bias 7, 0x7F/0xFF NaN, no
 * inf), e5m2 (bias 15, IEEE specials), e2m1 (low 4 bits), e8m0 (2^(c−127), 0xFF NaN).
 * NaN for a type with no elements (none). */
double ref_value(qjit_dtype t, uint32_t code);

/* Element (r, c) of a row-major matrix of type t at `base`, leading dimension ld in
 * elements.  4-bit types: element i = r·ld + c sits in byte i/2, bits 0-3 when i is
 * even, bits 4-7 when odd (ld even keeps every row on a byte boundary). */
double ref_elem(qjit_dtype t, const void *base, int64_t ld, int64_t r, int64_t c);

/* D = Σ_k Â[m,k]·B̂[n,k] (+ bias[n]) into out, double[M][N] (row-major, ld N), not
 * rounded to d->out.  `a` holds HOST pointers and sizes (a, b, bias, scale_a, scale_b,
 * zeros_b, m, n, k, lda, ldb; d and ldd are ignored), exactly the qjit_gemm_args a
 * launch gets, in host memory.  Dequantization, DESIGN.md §2:
 *   none:    x                      tensor: x · s[0]            (f32)
 *   row (A): x · s[m]  (f32[M])     col (B): x · s[n]           (f32[N])
 *   group:g (B): (q − z[n][k/g]) · s[n][k/g], s and z of type d->group_scale,
 *            [N][K/g] contiguous; z = 0 when d->zeros is 0 (K % g must be 0)
 *   block:   A: s[m][k/128], B: s[n/128][k/128], f32, rows of ⌈K/128⌉
 *   mx:      x · 2^(s[row][k/32] − 127), e8m0 rows of ⌈K/32⌉; 0xFF is NaN
 * Sums run over k in chunks inside which both scales are constant (32 for mx, g for
 * group, 128 for block, else all of K): chunk = Σ a·b in double (exact for integer
 * pairs), D += chunk · s_a · s_b, i.e. DESIGN's "accumulate inside a scale group,
 * then scale", with only double rounding (relative 1e-16) on float pairs.  bias is
 * of type d->out.  Returns 0, or -1 (message in ref_error()) for a combination that
 * DESIGN gives no meaning (row scales on B, group on A, an output type that is not
 * f16/bf16/f32, a missing pointer, K % g != 0). */
int ref_gemm(const qjit_gemm_desc *d, const qjit_gemm_args *a, double *out);

/* The f32 epilogue that integer-pair kernels (a = s8; b = s8, s4 or u4; sa none,
 * tensor or row; sb none, tensor or col) are to reproduce bit for bit:
 *     int32_t acc = Σ_k a·b                     (exact; wraps modulo 2^32 if it must)
 *     float t = (float)acc;                     (RNE)
 *     t = t * sa;                               (f32, RNE; sa = 1 for none)
 *     REF_EPI_MUL_ADD: t = t * sb; t = t + bias;   two roundings (no FMA contraction:
 *                      use __fmul_rn / __fadd_rn in CUDA)
 *     REF_EPI_FMA:     t = fmaf(t, sb, bias);      one rounding (__fmaf_rn)
 *     D = RNE to d->out of t                    (f32 output: t itself)
 * Without bias the two orders agree (t * sb).  out gets the values of the rounded
 * outputs (exactly what a correct kernel's D converts to).  Returns -1 (ref_error())
 * for any other descriptor. */
typedef enum ref_epilogue { REF_EPI_MUL_ADD = 0, REF_EPI_FMA = 1 } ref_epilogue;
int ref_gemm_int_f32(const qjit_gemm_desc *d, const qjit_gemm_args *a, ref_epilogue e,
                     double *out);

/* RNE of x to t ∈ {f16, bf16, f32}, as bits (f16/bf16 in the low 16).  Overflow gives
 * ±inf, NaN the quiet NaN 0x7E00 / 0x7FC0 / 0x7FC00000. */
uint32_t ref_round_bits(qjit_dtype t, double x);
/* The value of that rounding. */
double ref_round(qjit_dtype t, double x);
/* Round an m×n double matrix (ld n) into dst of type t with leading dimension ldd. */
void ref_store(qjit_dtype t, const double *src, int64_t m, int64_t n, void *dst, int64_t ldd);

/* ‖x − ref‖₂ / ‖ref‖₂ over n values (‖x − ref‖₂ when ref is all zeros).  A NaN or inf
 * in both at one place counts as equal; in only one of them gives INFINITY. */
double ref_nerr(const double *x, const double *ref, size_t n);

/* Activation quantization by quantization descriptor d, by the rules of qjit.h
 * ("quantization kernels"), in f32 arithmetic where the rules say f32 (each step RNE):
 * x is f32 [m][k] with row stride ldx; clip 0 means 1.  q gets one int32 per value
 * ([m][k], row stride k): s8/s4 as signed values, e4m3/e2m1 as codes (nearest value,
 * ties to the even code, saturating, the sign kept on zero).  scale gets the scales:
 * row [m], tensor [1], block [m][ceil(k/128)], mx [m][k/32] as the e8m0 codes (0..255).
 * Returns 0, or -1 (ref_error()) for a descriptor or size the rules do not cover. */
int ref_quant(const qjit_quant_desc *d, const float *x, int64_t m, int64_t k, int64_t ldx,
              float clip, int32_t *q, float *scale);

/* The reason of the last -1. */
const char *ref_error(void);

#endif
