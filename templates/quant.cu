// quant.cu — activation quantization: x [M][K] (f16, bf16 or f32, K contiguous, row
// stride ldx) into q [M][K] (s8, s4, e4m3 or e2m1; 4-bit packed two a byte along K) and the
// scales the GEMMs read (DESIGN §2): row f32[M], tensor f32[1], block f32[M][ceil(K/128)],
// mx e8m0[M][K/32].  The rules are those of qjit.h ("quantization kernels"), bit for bit:
//   a group G (a row, the tensor, 128 values of a row, 32 values of a row) with a NaN or an
//   infinity gets scale NaN (mx: 0xFF) and every q of G = 0; else amax = max|x| over G,
//   s = (amax · clip) / QMAX in f32 (each step rounded to nearest even), and
//   s8/s4: q = clamp(rne(x / s), -QMAX-1, QMAX); e4m3: q = e4m3(x / s), saturating;
//   s = 0 gives q = 0.  mx: c = the e8m0 code of amax by RULE (qjit_e8m0_from_amax),
//   q = elem(x · 2^(127-c)), the scaling exact, the conversion saturating.
// Every scale is reduced and applied inside the CTA (row, tensor) or warp (block, mx) that
// owns its group, so nothing depends on timing.  The tensor scale takes two kernels in one
// launch: qjit_quant_amax writes one partial max per CTA into the caller's workspace (a
// fixed partition of the rows), and every CTA of qjit_quant_kernel reduces all partials in
// the same order before it quantizes; max is exact, so the order could not matter anyway.
//
// A batch of matrices (MoE experts) is one launch: grid y (cols: z) is the matrix, whose x,
// q and scales start x_batch and q_batch elements and one matrix's scales further on.
// layout=cols (mx only) quantizes along M instead: 32 rows of x a block, q written
// transposed, [K][M], with scales [K][M/32] (the B operand of a GEMM reducing over M).
//
// Parameters: IN, OUT, SCALE, RULE ("floor"/"rceil", mx only), COLS (bool), ARCH (80, 86,
// 89, 90), QPARAMS_BYTES (the library's qjit_quant_kernel_params), UNITS (block and mx: the
// chunks a lane loads before its first reduction), ROW_CHUNKS (row and tensor: the chunks a
// thread holds) and COL_BLOCKS (cols: the MX blocks along M a CTA takes); the library's grid
// counts on those three.
% local QMAX = ({s8 = 127, s4 = 7, e4m3 = 448, e2m1 = 6})[OUT]
% local PACKED = OUT == "s4" or OUT == "e2m1"
% local INT = OUT == "s8" or OUT == "s4"
% if (OUT == "e4m3") and ARCH < 89 then unsupported("e4m3 output needs sm_89 or later (cvt to fp8)") end
% if SCALE == "mx" and OUT ~= "e4m3" and OUT ~= "e2m1" then unsupported("scale=mx needs out=e4m3 or e2m1") end
% if SCALE ~= "mx" and OUT == "e2m1" then unsupported("out=e2m1 needs scale=mx") end
% if SCALE == "block" and OUT ~= "e4m3" then unsupported("scale=block (1x128) needs out=e4m3") end
% if COLS and SCALE ~= "mx" then unsupported("layout=cols needs scale=mx") end
% local VEC = IN == "f32" and 4 or 8 -- values a chunk of a row: one 16-byte load
% local QB = PACKED and VEC // 2 or VEC -- bytes of q a chunk
% local QW = QB >= 4 and QB // 4 or 1 -- words of a chunk's codes (mx: packed as q holds them)
% local ESZ = IN == "f32" and 4 or 2
struct qjit_quant_params {
    const void *x;
    void *q, *scale, *workspace;
    long long m, k, ldx, ldq;
    float clip;
    int parts;
    long long x_batch, q_batch; // matrix blockIdx.y (cols: blockIdx.z) starts this far on
};
static_assert(sizeof(qjit_quant_params) == $(QPARAMS_BYTES), "qjit_quant_params: the library's qjit_quant_kernel_params");

namespace qq {
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

// The value of x's raw bits (one element: the low 16 bits for f16 and bf16).
__device__ __forceinline__ float raw_value(u32 raw)
{
% if IN == "f32" then
    return __uint_as_float(raw);
% elseif IN == "bf16" then
    return __uint_as_float(raw << 16);
% else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)raw));
    return f;
% end
}

__device__ __forceinline__ float nan_f() { return __uint_as_float(0x7fc00000u); }

% if OUT == "e4m3" then
// Two values as e4m3 codes (round to nearest even, saturating): lo in bits 0-7, hi in 8-15.
__device__ __forceinline__ u32 e4m3x2(float hi, float lo)
{
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
% end

// Programmatic dependent launch (sm_90), as the GEMMs: wait for the kernel before this one
// in the stream (and its writes), then let the kernel after it be scheduled at once: a
// GEMM launched with an early start (QJIT_PDL=1) then sets up and streams its first weights
// while the activations are quantized, and waits for them in its own griddepcontrol.wait.
// Without that launch attribute both are no-ops.
__device__ __forceinline__ void pdl_enter()
{
% if ARCH >= 90 then
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
% end
}

// The kernels move x in chunks of $(VEC) values (16 bytes) and q in $(QB) bytes a
// chunk when every address of the launch allows (vec_ok), else value by value; the math is
// the same either way.  A group's amax is taken on magnitudes as bits (|x| is the value
// with its sign bit cleared, and such bits order as the values do), so that one integer
// max gives both the amax and, at or above the bits of infinity, the nonfinite flag.
__device__ __forceinline__ bool vec_ok(const qjit_quant_params &p)
{
    return (unsigned long long)p.x % 16 == 0 && (unsigned long long)p.q % $(QB) == 0 &&
           p.k % $(VEC) == 0 && p.ldx % $(VEC) == 0 && p.x_batch % $(VEC) == 0 &&
           p.ldq % $(VEC) == 0 && p.q_batch % $(VEC) == 0;
}

// The raw bits of the chunk at value i of the row at x + base (i a multiple of $(VEC)):
// values at or past `end` read as 0, a magnitude that changes no max and a code never
// stored.  ld16 when vec_ok, ld_values otherwise; callers branch once, outside their loops,
// so that a thread's loads issue together.  x is what the kernel before this one may have
// written, and under the early start that kernel runs during this one's life: a coherent
// load, never the read-only path (ld.global.nc, __ldg), whose data must not change while the
// kernel runs.
__device__ __forceinline__ uint4 ld16(const void *x, long long base, long long i, long long end)
{
    uint4 r = make_uint4(0, 0, 0, 0);
    if (i < end)
        asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"((const char *)x + (base + i) * $(ESZ)));
    return r;
}

__device__ __forceinline__ uint4 ld_values(const void *x, long long base, long long i, long long end)
{
    u32 u[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < $(VEC); j++)
        if (i + j < end)
%   if IN == "f32" then
            u[j] = ((const u32 *)x)[base + i + j];
%   else
            u[j / 2] |= (u32)((const u16 *)x)[base + i + j] << (16 * (j % 2));
%   end
    return make_uint4(u[0], u[1], u[2], u[3]);
}

// N chunks of one row at values i0, i0 + step, ...
template <int N>
__device__ __forceinline__ void load_chunks(uint4 (&w)[N], const void *x, long long base, long long i0,
                                            long long step, long long end, bool vec)
{
    if (vec) {
#pragma unroll
        for (int t = 0; t < N; t++)
            w[t] = ld16(x, base, i0 + t * step, end);
    } else {
#pragma unroll
        for (int t = 0; t < N; t++)
            w[t] = ld_values(x, base, i0 + t * step, end);
    }
}

// The largest magnitude among a chunk's values, as bits (sm_90: 16-bit values two an
// instruction, max.u16x2, then the two halves).
__device__ __forceinline__ u32 chunk_mag(const uint4 &w)
{
    const u32 u[4] = {w.x, w.y, w.z, w.w};
    u32 m = 0;
%   if IN == "f32" then
#pragma unroll
    for (int j = 0; j < 4; j++)
        m = max(m, u[j] & 0x7fffffffu);
%   elseif ARCH >= 90 then
#pragma unroll
    for (int j = 0; j < 4; j++)
        asm("max.u16x2 %0, %1, %2;" : "=r"(m) : "r"(m), "r"(u[j] & 0x7fff7fffu));
    m = max(m & 0xffffu, m >> 16);
%   else
#pragma unroll
    for (int j = 0; j < 4; j++)
        m = max(m, max(u[j] & 0x7fffu, (u[j] >> 16) & 0x7fffu));
%   end
    return m;
}

// A magnitude's nonfinite flag (its value is raw_value's), and one value's magnitude.
__device__ __forceinline__ int mag_bad(u32 m) { return m >= $(({f32 = "0x7f800000u", bf16 = "0x7f80u", f16 = "0x7c00u"})[IN]); }

__device__ __forceinline__ u32 raw_mag(u32 raw) { return raw & $(IN == "f32" and "0x7fffffffu" or "0x7fffu"); }

// The chunk's $(VEC) values.
__device__ __forceinline__ void unpack(const uint4 &w, float (&v)[$(VEC)])
{
    const u32 u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
%   if IN == "f32" then
        v[j] = raw_value(u[j]);
%   else
        v[2 * j] = raw_value(u[j] & 0xffffu);
        v[2 * j + 1] = raw_value(u[j] >> 16);
%   end
    }
}

// The chunk's codes into the row of q at qrow (value i at byte i, or nibble i of byte i/2),
// those at or past `end` not at all.  A code is the low byte (nibble) of c[j]; the bits
// above it are anything (code_of leaves its rounding constant there), so the bytes are
// gathered by PRMT, which takes whole low bytes, and a nibble pair as 16·c1 + (c0 & 15),
// whose bits past the byte PRMT leaves behind.
__device__ __forceinline__ void store_codes(u8 *qrow, long long i, const u32 (&c)[$(VEC)], long long end, bool vec)
{
    if (i >= end)
        return;
%   if PACKED then
    if (vec) {
        u32 b[$(VEC // 2)]; // a byte of two codes in the low byte of each
#pragma unroll
        for (int j = 0; j < $(VEC // 2); j++)
            b[j] = c[2 * j + 1] * 16u + (c[2 * j] & 0xfu);
%     if VEC == 8 then
        *(u32 *)(qrow + i / 2) = __byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410);
%     else
        *(unsigned short *)(qrow + i / 2) = (unsigned short)__byte_perm(b[0], b[1], 0x0040);
%     end
        return;
    }
#pragma unroll
    for (int j = 0; j < $(VEC); j += 2) // K is even: a pair is in or out together
        if (i + j < end)
            qrow[(i + j) / 2] = (u8)((c[j] & 0xfu) | c[j + 1] << 4);
%   else
    if (vec) {
%     if VEC == 8 then
        *(uint2 *)(qrow + i) = make_uint2(__byte_perm(__byte_perm(c[0], c[1], 0x0040), __byte_perm(c[2], c[3], 0x0040), 0x5410),
                                          __byte_perm(__byte_perm(c[4], c[5], 0x0040), __byte_perm(c[6], c[7], 0x0040), 0x5410));
%     else
        *(u32 *)(qrow + i) = __byte_perm(__byte_perm(c[0], c[1], 0x0040), __byte_perm(c[2], c[3], 0x0040), 0x5410);
%     end
        return;
    }
#pragma unroll
    for (int j = 0; j < $(VEC); j++)
        if (i + j < end)
            qrow[i + j] = (u8)c[j];
%   end
}

// Row r of matrix blockIdx.y in q.
__device__ __forceinline__ u8 *q_row(const qjit_quant_params &p, long long r)
{
    return (u8 *)p.q + (blockIdx.y * p.q_batch + r * p.ldq)$(PACKED and " / 2" or "");
}

// The max of m over the thread's segment of `seg` threads (a multiple of 32 that divides
// the CTA's 256: 256 is the whole CTA); every thread of the segment gets it.
__device__ __forceinline__ u32 seg_max(u32 m, int seg)
{
    __shared__ u32 sm[8];
    m = __reduce_max_sync(0xffffffffu, m);
    if (threadIdx.x % 32 == 0)
        sm[threadIdx.x / 32] = m;
    __syncthreads();
    const int w0 = (int)threadIdx.x / seg * (seg / 32);
    m = sm[w0];
    for (int i = 1; i < seg / 32; i++)
        m = max(m, sm[w0 + i]);
    __syncthreads(); // the array may be reused
    return m;
}

__device__ __forceinline__ u32 cta_max(u32 m) { return seg_max(m, 256); }

% if SCALE ~= "mx" then
// x / s correctly rounded from r = 1/s correctly rounded: x·r corrected once by the residual
// x − q·s, exact in an FMA (Markstein); three dependent FMAs and no branch, where __fdiv_rn
// costs a reciprocal, its refinement and a check for its slow path per value.  It equals
// the division while s is far from the subnormals and overflow and the quotient stays
// small; callers check their ranges.
__device__ __forceinline__ float div_by(float x, float s, float r)
{
    const float q = __fmul_rn(x, r);
    return __fmaf_rn(__fmaf_rn(-q, s, x), r, q);
}

// The scale of a group from its amax: NaN for a non-finite group, else (amax·clip)/QMAX,
// correctly rounded: between 2^-100 and 2^100 by div_by (equal to the division for every
// float there, checked for 127, 7 and 448), elsewhere (0 among them) by __fdiv_rn.
__device__ __forceinline__ float scale_of(float amax, int bad, float clip)
{
    const float a = __fmul_rn(amax, clip);
    if (bad)
        return nan_f();
    if (a >= 0x1p-100f && a <= 0x1p100f)
        return div_by(a, $(QMAX).0f, 1.0f / $(QMAX).0f);
    return __fdiv_rn(a, $(QMAX).0f);
}

// A group's scale and how values are divided by it: by div_by for the quotients a code can
// tell apart while s is within 2^-64..2^64 and clip at least 2^-32 (|x|/s <= QMAX / clip),
// else by __fdiv_rn.  Both give x / s to the bit (checked against every float x for twenty
// scales, significands of all ones among them).
struct divisor {
    float s, r;
    bool fast;
};

__device__ __forceinline__ divisor divisor_of(float s, float clip)
{
    divisor d;
    d.s = s;
    d.fast = s >= 0x1p-64f && s <= 0x1p64f && clip >= 0x1p-32f;
    d.r = d.fast ? __frcp_rn(s) : 0.0f;
    return d;
}

%   if INT then
// The code of a quotient: rounded to the nearest integer, ties to even, saturated, as the
// low $(OUT == "s4" and "nibble" or "byte") of the result (two's complement; the bits above are not the code's).
// The clamp first and then the rounding (its bounds are integers, so the clamped value rounds
// to the clamp of the rounded one), and the rounding by adding 1.5·2^23: the sum lies where
// floats step by 1, so it is rounded to an integer, ties to even, and that integer is its
// low significand bits.  Three floating-point operations and no conversion.  t is finite
// here (the fast path: a finite group, a normal scale).
__device__ __forceinline__ u32 code_of(float t)
{
    const float c = fminf(fmaxf(t, -$(QMAX + 1).0f), $(QMAX).0f);
    return __float_as_uint(__fadd_rn(c, 12582912.0f));
}

// The same by conversion, for the slow path, where t may be NaN (code 0) or infinite.
__device__ __forceinline__ u32 code_of_any(float t)
{
    int q = __float2int_rn(t);
    q = q < -$(QMAX + 1) ? -$(QMAX + 1) : q > $(QMAX) ? $(QMAX) : q;
    return (u32)q & $(OUT == "s4" and "0xfu" or "0xffu");
}
%   end

// The code of v under scale s by __fdiv_rn (s NaN or 0: 0), out of line: its slow paths
// stay out of the unrolled loops (and the instruction cache) of the common case, and a
// value in and a code out keep the callers' arrays in registers.
__device__ __noinline__ u32 encode_slow(float v, float s)
{
    if (!(s > 0.0f))
        return 0;
    const float t = __fdiv_rn(v, s);
%   if INT then
    return code_of_any(t);
%   else
    return e4m3x2(0.0f, t);
%   end
}

// The codes of a chunk's values (one branch a chunk on the way of dividing).
__device__ __forceinline__ void encode_chunk(const uint4 &w, const divisor &d, u32 (&c)[$(VEC)])
{
    float v[$(VEC)];
    unpack(w, v);
    if (d.fast) {
#pragma unroll
        for (int j = 0; j < $(VEC); j += 2) {
            const float t0 = div_by(v[j], d.s, d.r), t1 = div_by(v[j + 1], d.s, d.r);
%   if INT then
            c[j] = code_of(t0);
            c[j + 1] = code_of(t1);
%   else
            const u32 r = e4m3x2(t1, t0); // one conversion for two codes
            c[j] = r & 0xffu;
            c[j + 1] = r >> 8;
%   end
        }
    } else {
#pragma unroll
        for (int j = 0; j < $(VEC); j++)
            c[j] = encode_slow(v[j], d.s);
    }
}
% else
// 2^e as a float, exactly, for e in [-149, 127].
__device__ __forceinline__ float pow2(int e)
{
    return e >= -126 ? __uint_as_float((u32)(e + 127) << 23) : __uint_as_float(1u << (e + 149));
}

// The e8m0 code of a block's amax (finite, >= 0) by RULE, as qjit_e8m0_from_amax.
__device__ __forceinline__ u32 e8m0_of(float a)
{
%   local EMAX = ({e4m3 = 8, e2m1 = 2})[OUT]
    if (a == 0.0f)
        return 0;
    const u32 bits = __float_as_uint(a);
    const int ex = (int)((bits >> 23) & 0xffu);
    const int fl = ex ? ex - 127 : (31 - __clz(bits & 0x7fffffu)) - 149; // floor(log2 a)
%   if RULE == "floor" then
    int e = fl - $(EMAX);
%   else
    // the least e with a <= max_elem · 2^e: a · 2^-(fl - emax) = sig · 2^emax, sig in [1, 2) a's
    // significand, and 2^(emax+1) > max_elem for both elements, so it is fl - emax, or one
    // more when sig > max_elem / 2^emax ($(QMAX / 2 ^ EMAX)): when sig's fraction bits (a's
    // own, or a subnormal's shifted up to its leading one) pass $(OUT == "e4m3" and "0x600000" or "0x400000")
    const u32 frac = (ex ? bits : bits << (23 - (31 - __clz(bits)))) & 0x7fffffu;
    const int e = fl - $(EMAX) + (frac > $(OUT == "e4m3" and "0x600000u" or "0x400000u"));
%   end
    const int c = e + 127;
    return (u32)(c < 0 ? 0 : c > 254 ? 254 : c);
}

%   if OUT == "e2m1" then
// The e2m1 code of t as qjit_e2m1_from_f32 makes it: {0, .5, 1, 1.5, 2, 3, 4, 6}, round to
// nearest, ties to the even code, saturating.  Below 1 the codes are 2|t| rounded (0, 1,
// 2); from 1 up, |t|'s bits rounded to one mantissa bit, ties to even, are (exponent,
// mantissa bit) and so the code plus 252 (a NaN or anything from 7 up saturates).  Equal
// to the comparisons of qjit_e2m1_from_f32 on every float; no branch, a handful of integer
// operations.
__device__ __forceinline__ u32 e2m1_code(float t)
{
    const u32 u = __float_as_uint(t) & 0x7fffffffu;
    const u32 lo = __float_as_uint(__fmaf_rn(__uint_as_float(u), 2.0f, 8388608.0f)) & 3u; // 2|t| + 2^23, rounded
    const u32 hi = min(((u + 0x1fffffu + ((u >> 22) & 1u)) >> 22) - 252u, 7u);
    return (u < 0x3f800000u ? lo : hi) | ((__float_as_uint(t) >> 28) & 8u);
}

%     if IN == "bf16" then
// Two bf16 values' e2m1 codes under f2 = 2^(127 − c) (as two bf16), from their raw pair P
// (one value a half), each in the low nibble of its half.  In each half: t = |x|·f, exact (a
// power of two), at most 6; d = 2^max(E, 0), E = floor(log2 t); s = d·64 + t rounded to
// bf16 rounds t to the step of the codes of its binade (2^(E−1); ½ below 2), ties to the
// even code, and leaves the steps q in s's mantissa, so that the code is q + 2E =
// s − d + d/64 − 1022 (no carry crosses a half); the sign is x's.  Three bf16x2 operations
// and six integer ones for two values, where e2m1_code takes about a dozen for one.  Equal
// to e2m1_code(x · 2^(127 − c)) for every bf16 x and every c a finite block can have
// (0-253), checked on the CPU against qjit_e2m1_from_f32 for all of them.
__device__ __forceinline__ u32 e2m1x2_bf16(u32 P, u32 f2)
{
    u32 t, d, s;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t) : "r"(P & 0x7fff7fffu), "r"(f2), "r"(0x80008000u)); // |x|·f − 0
    asm("min.bf16x2 %0, %1, %2;" : "=r"(t) : "r"(t), "r"(0x40c040c0u));                            // 6
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(t & 0x7f807f80u), "r"(0x3f803f80u));              // 1
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(s) : "r"(d), "r"(0x42804280u), "r"(t));             // d·64 + t
    return (s - d + (d >> 6) - 0x03fe03feu) | ((P >> 12) & 0x00080008u);
}

// Eight bf16 values' e2m1 codes under e8m0 code c (finite: at most 253), packed as q holds
// them (value i in nibble i), from the pairs Pj = (value j, value j + 4): the four codes
// words then combine with shifts of 4.
__device__ __forceinline__ u32 e2m1x8_bf16(u32 p0, u32 p1, u32 p2, u32 p3, u32 c)
{
    const u32 f2 = ((254u - c) << 7) * 0x10001u;
    return e2m1x2_bf16(p0, f2) | e2m1x2_bf16(p1, f2) << 4 | e2m1x2_bf16(p2, f2) << 8 | e2m1x2_bf16(p3, f2) << 12;
}
%     end
%   end

// The codes of v0 and v1 scaled by 2^(127 - c) (exactly), converted as qjit_<OUT>_from_f32
// does: v0's in the low $(OUT == "e4m3" and "byte" or "nibble"), v1's in the next (e4m3: one conversion for both).
__device__ __forceinline__ u32 encode_mx2(float v0, float v1, u32 c)
{
    const float f = pow2(127 - (int)c);
%   if OUT == "e4m3" then
    return e4m3x2(v1 * f, v0 * f);
%   else
    return e2m1_code(v0 * f) | e2m1_code(v1 * f) << 4;
%   end
}

// A chunk's codes under e8m0 code c, packed as q holds them ($(QB) bytes in $(QW) word(s)), and
// ANDed with keep (0 for a nonfinite block).
__device__ __forceinline__ void mx_chunk(const uint4 &w, u32 c, u32 keep, u32 (&pk)[$(QW)])
{
%   if OUT == "e2m1" and IN == "bf16" then
    pk[0] = e2m1x8_bf16(__byte_perm(w.x, w.z, 0x5410), __byte_perm(w.x, w.z, 0x7632),
                        __byte_perm(w.y, w.w, 0x5410), __byte_perm(w.y, w.w, 0x7632), c) & keep;
%   else
    float v[$(VEC)];
    unpack(w, v);
    u32 r[$(VEC // 2)];
#pragma unroll
    for (int j = 0; j < $(VEC); j += 2)
        r[j / 2] = encode_mx2(v[j], v[j + 1], c);
%     if OUT == "e4m3" then
#pragma unroll
    for (int i = 0; i < $(QW); i++)
        pk[i] = (r[2 * i] | r[2 * i + 1] << 16) & keep;
%     else
    u32 x = 0;
#pragma unroll
    for (int i = 0; i < $(VEC // 2); i++)
        x |= r[i] << (8 * i);
    pk[0] = x & keep;
%     end
%   end
}

// A chunk's packed codes into the row of q at qrow, at value i.
__device__ __forceinline__ void store_packed(u8 *qrow, long long i, const u32 (&pk)[$(QW)], bool vec)
{
    u8 *dst = qrow + i$(PACKED and " / 2" or "");
    if (vec) {
%   if QB == 8 then
        *(uint2 *)dst = make_uint2(pk[0], pk[1]);
%   elseif QB == 4 then
        *(u32 *)dst = pk[0];
%   else
        *(u16 *)dst = (u16)pk[0];
%   end
        return;
    }
#pragma unroll
    for (int b = 0; b < $(QB); b++)
        dst[b] = (u8)(pk[b / 4] >> (8 * (b % 4)));
}
% end
} // namespace qq

% if SCALE == "row" or SCALE == "tensor" then
% local RMAX = ROW_CHUNKS -- chunks a thread holds
// The rows a CTA takes: a row of up to $(256 * RMAX * VEC) values is held by 256 / rows
// threads, the fewest that hold it in $(RMAX) chunks each (at most 8 rows, a warp or more a
// row), so that every thread has the same bytes in flight whatever K is.  Up to 512 rows
// (decode) a CTA takes one row: its time is then a thread's chain of chunks, not bandwidth,
// and 256 threads a row make that chain the shortest.  The library's grid
// (src/quant_kernel.c, rows_per_cta) computes the same.
__device__ __forceinline__ int rows_per_cta(long long m, long long k)
{
    int rows = 1;
    while (m > 512 && rows < 8 && k <= (long long)(256 / (2 * rows)) * $(RMAX * VEC))
        rows *= 2;
    return rows;
}

// A CTA per rows_per_cta(M, K) rows, TPR = 256 / rows threads a row (a constant, so that a
// thread's loads are one address and immediate offsets).  A row held in registers is read
// once, every chunk of a thread loaded before the first is used; its amax (row) or the
// tensor's from the partials (tensor) gives the scale, and the codes are made from the
// registers.  Longer rows (a CTA each) are read twice (amax, then codes; the second read
// mostly from L2).
template <int TPR>
__device__ __forceinline__ void quant_rows(const qjit_quant_params &p)
{
    using namespace qq;
    const int lt = (int)threadIdx.x % TPR;
%   if SCALE == "tensor" then
    // the last rows first: qjit_quant_amax read them last, and some are still in L2
    const long long cta = gridDim.x - 1 - blockIdx.x;
%   else
    const long long cta = blockIdx.x;
%   end
    const long long r = cta * (256 / TPR) + (int)threadIdx.x / TPR;
    const bool live = r < p.m; // a row past M loads nothing and stores nothing, but reduces
    const long long end = live ? p.k : 0;
    const long long xrow = (live ? r : 0) * p.ldx + blockIdx.y * p.x_batch;
    const bool vec = vec_ok(p);
    u8 *qrow = q_row(p, live ? r : 0);
    const bool held = TPR < 256 || p.k <= TPR * $(RMAX * VEC); // more rows a CTA: short rows
    uint4 w[$(RMAX)];
%   if SCALE == "row" then
    u32 m = 0;
%   end
    if (held) {
        load_chunks(w, p.x, xrow, lt * $(VEC), TPR * $(VEC), end, vec);
%   if SCALE == "row" then
#pragma unroll
        for (int t = 0; t < $(RMAX); t++)
            m = max(m, chunk_mag(w[t]));
%   end
    }
%   if SCALE == "row" then
    else {
        for (long long i = lt * $(VEC); i < end; i += TPR * $(VEC))
            m = max(m, chunk_mag(vec ? ld16(p.x, xrow, i, end) : ld_values(p.x, xrow, i, end)));
    }
    m = seg_max(m, TPR);
    const float s = scale_of(raw_value(m), mag_bad(m), p.clip);
    if (lt == 0 && live)
        ((float *)p.scale)[blockIdx.y * p.m + r] = s;
%   else
    // the partials are f32 magnitudes or NaN: as bits they order as the values do, and a
    // NaN's are at or above infinity's
    u32 pm = 0;
    for (int i = threadIdx.x; i < p.parts; i += 256)
        pm = max(pm, __float_as_uint(((const float *)p.workspace)[i]));
    pm = cta_max(pm);
    const float s = scale_of(__uint_as_float(pm), pm >= 0x7f800000u, p.clip);
    if (threadIdx.x == 0 && blockIdx.x == 0)
        ((float *)p.scale)[0] = s;
%   end
    const divisor d = divisor_of(s, p.clip);
    if (held) {
        // only the chunks inside the row: a short row leaves a thread's last ones empty
#pragma unroll
        for (int t = 0; t < $(RMAX); t++) {
            const long long i = ((long long)t * TPR + lt) * $(VEC);
            if (i >= end)
                break;
            u32 c[$(VEC)];
            encode_chunk(w[t], d, c);
            store_codes(qrow, i, c, end, vec);
        }
        return;
    }
    for (long long i = lt * $(VEC); i < end; i += TPR * $(VEC)) {
        u32 c[$(VEC)];
        encode_chunk(vec ? ld16(p.x, xrow, i, end) : ld_values(p.x, xrow, i, end), d, c);
        store_codes(qrow, i, c, end, vec);
    }
}

extern "C" __global__ void __launch_bounds__(256) qjit_quant_kernel(const qjit_quant_params p)
{
    qq::pdl_enter();
    switch (rows_per_cta(p.m, p.k)) {
    case 8: quant_rows<32>(p); break;
    case 4: quant_rows<64>(p); break;
    case 2: quant_rows<128>(p); break;
    default: quant_rows<256>(p); break;
    }
}
% end

% if SCALE == "tensor" then
// Partial max of |x| over rows blockIdx.x, blockIdx.x + gridDim.x, ... into
// workspace[blockIdx.x] (NaN when one of them holds a NaN or an infinity), four chunks a
// thread in flight.
extern "C" __global__ void __launch_bounds__(256) qjit_quant_amax(const qjit_quant_params p)
{
    using namespace qq;
    pdl_enter();
    // only x's side of vec_ok: this kernel writes no q
    const bool vec = (unsigned long long)p.x % 16 == 0 && p.k % $(VEC) == 0 && p.ldx % $(VEC) == 0;
    u32 m = 0;
    for (long long r = blockIdx.x; r < p.m; r += gridDim.x)
        for (long long i = threadIdx.x * $(VEC); i < p.k; i += 4 * 256 * $(VEC)) {
            uint4 w[4];
            load_chunks(w, p.x, r * p.ldx, i, 256 * $(VEC), p.k, vec);
#pragma unroll
            for (int t = 0; t < 4; t++)
                m = max(m, chunk_mag(w[t]));
        }
    m = cta_max(m);
    if (threadIdx.x == 0)
        ((float *)p.workspace)[blockIdx.x] = mag_bad(m) ? nan_f() : raw_value(m);
}
% end

% if SCALE == "block" or (SCALE == "mx" and not COLS) then
% local G = SCALE == "block" and 128 or 32 -- values a group (K is a multiple of 32 for mx)
% local CPL = UNITS -- chunks a lane takes of one group (16-bit mx: all of it)
% local UN = UNITS // CPL -- groups a lane takes: a lane has UNITS chunks either way
% local LPG = G // (VEC * CPL) -- lanes a group
% if LPG < 1 or G % (VEC * CPL) ~= 0 then unsupported(string.format("UNITS=%d: a lane's chunks must split a group of %d values evenly", UNITS, G)) end
% local GPW = 32 // LPG -- groups a warp covers with CPL chunks a lane
// A warp takes $(UN) x $(GPW) consecutive groups in (row, block) order, $(LPG) lane(s) a group
// and $(CPL) chunk(s) of it a lane: a block's lane holds a quarter of its group, so that its
// max takes two shuffles and its scale and reciprocal are made once for 32 values; an MX
// block of 16-bit values is one lane's, so that its e8m0 code is made once, with no
// shuffle, and its codes leave in 16-byte stores.  A lane's $(UNITS) loads are in flight
// together before the first group is reduced.  No lane leaves before the last shuffle.
extern "C" __global__ void __launch_bounds__(256) qjit_quant_kernel(const qjit_quant_params p)
{
    using namespace qq;
    pdl_enter();
    const long long nb = (p.k + $(G - 1)) / $(G);
    const int lane = threadIdx.x % 32, sub = lane % $(LPG);
    const long long g = ((long long)blockIdx.x * 8 + threadIdx.x / 32) * $(UN * GPW) + lane / $(LPG);
    const bool vec = vec_ok(p);
%   if SCALE == "mx" and LPG == 1 then
    // a block's codes in 16-byte stores: q's rows start on 16 bytes
    const bool wide = (unsigned long long)p.q % 16 == 0 && p.ldq % $(PACKED and 32 or 16) == 0 &&
                      p.q_batch % $(PACKED and 32 or 16) == 0;
%   end
    // the first group's row and block: a 32-bit division where the numbers allow (a 64-bit
    // one is a long call in every thread)
    long long r, b;
    if (g <= 0xffffffffll && nb <= 0xffffffffll) {
        r = (unsigned)g / (unsigned)nb;
        b = (unsigned)g - (unsigned)r * (unsigned)nb;
    } else {
        r = g / nb;
        b = g % nb;
    }
    long long rs[$(UN)], bs[$(UN)];
#pragma unroll
    for (int u = 0; u < $(UN); u++) {
        rs[u] = r;
        bs[u] = b;
        for (b += $(GPW); b >= nb; b -= nb)
            r++;
    }
    // chunk t of this lane's part of group u: values (sub + $(LPG)·t)·$(VEC) of the group
    // (one branch on vec outside the loops, so that a lane's loads issue together)
    uint4 w[$(UN)][$(CPL)];
% for _, ld in ipairs({"ld16", "ld_values"}) do
    $(ld == "ld16" and "if (vec) {" or "} else {")
#pragma unroll
        for (int u = 0; u < $(UN); u++)
#pragma unroll
            for (int t = 0; t < $(CPL); t++)
                w[u][t] = $(ld)(p.x, blockIdx.y * p.x_batch + rs[u] * p.ldx, bs[u] * $(G) + (sub + $(LPG) * t) * $(VEC),
                               rs[u] < p.m ? p.k : 0);
% end
    }
#pragma unroll
    for (int u = 0; u < $(UN); u++) {
        u32 m = 0;
#pragma unroll
        for (int t = 0; t < $(CPL); t++)
            m = max(m, chunk_mag(w[u][t]));
#pragma unroll
        for (int o = $(LPG // 2); o > 0; o /= 2)
            m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (rs[u] >= p.m)
            continue;
        const long long sidx = (blockIdx.y * p.m + rs[u]) * nb + bs[u];
        u8 *qrow = q_row(p, rs[u]);
%   if SCALE == "block" then
        const float s = scale_of(raw_value(m), mag_bad(m), p.clip);
        if (sub == 0)
            ((float *)p.scale)[sidx] = s;
        const divisor d = divisor_of(s, p.clip);
#pragma unroll
        for (int t = 0; t < $(CPL); t++) {
            u32 c[$(VEC)];
            encode_chunk(w[u][t], d, c);
            store_codes(qrow, bs[u] * $(G) + (sub + $(LPG) * t) * $(VEC), c, p.k, vec);
        }
%   else
        const u32 e = mag_bad(m) ? 0xffu : e8m0_of(raw_value(m));
        if (sub == 0)
            ((u8 *)p.scale)[sidx] = (u8)e;
        // a nonfinite block's codes are 0: every code is made, then masked (no branch a value)
        const u32 keep = e == 0xffu ? 0u : ~0u;
        u32 pk[$(CPL)][$(QW)];
#pragma unroll
        for (int t = 0; t < $(CPL); t++)
            mx_chunk(w[u][t], e, keep, pk[t]);
%     if LPG == 1 then
        if (wide) { // the lane's chunks are its block's $(CPL * QB) consecutive bytes of q
            uint4 *dst = (uint4 *)(qrow + bs[u] * $(PACKED and G // 2 or G));
#pragma unroll
            for (int i = 0; i < $(CPL * QW); i += 4)
                dst[i / 4] = make_uint4(pk[i / $(QW)][i % $(QW)], pk[(i + 1) / $(QW)][(i + 1) % $(QW)],
                                        pk[(i + 2) / $(QW)][(i + 2) % $(QW)], pk[(i + 3) / $(QW)][(i + 3) % $(QW)]);
            continue;
        }
%     end
#pragma unroll
        for (int t = 0; t < $(CPL); t++)
            store_packed(qrow, bs[u] * $(G) + (sub + $(LPG) * t) * $(VEC), pk[t], vec);
%   end
    }
}
% end

% if COLS then
%   local TW = IN == "f32" and "u32" or "u16" -- x's raw bits, as the tile keeps them
%   local NB = COL_BLOCKS -- MX blocks along M a CTA takes
%   local KT = 256 // NB -- columns a CTA takes: a thread a (column, block)
%   local CPR = KT // VEC -- chunks a tile row
%   local NCH = 32 * NB * CPR // 256 -- chunks a thread loads
%   local BPAD = 8 -- a block's rows start this far on (values) past the 32 rows before it
// Column-wise MX: a CTA takes $(32 * NB) rows ($(NB) blocks along M) by $(KT) columns of matrix
// blockIdx.z into shared memory as raw bits, in 16-byte chunks along K ($(NCH) a thread, all
// in flight before the first is stored; value by value where the launch's addresses do not
// allow).  Thread t then quantizes the 32 values of block t % $(NB) in column k0 + t / $(NB)
// and writes them as q[k][m0 + 32·b ...] (32 bytes, or 16 packed) with the scale
// [k][m0/32 + b]: the $(NB) lanes of a column write $(NB) consecutive pieces of q's row k,
// so a warp's stores are whole lines of $(8) rows, where a tile of one block left every
// row of q to 32-byte pieces written by different CTAs.  Rows of the tile are padded by 16
// bytes (a warp's chunk stores fill a row's contiguous bytes) and each block by 8 values
// more (a warp's lanes read 8 columns of $(NB) blocks from distinct banks).  M is a multiple of
// 32; a CTA's blocks past M load nothing and store nothing.
extern "C" __global__ void __launch_bounds__(256) qjit_quant_kernel(const qjit_quant_params p)
{
    using namespace qq;
    pdl_enter();
    __shared__ __align__(16) $(TW) tile[$(NB)][32 * ($(KT) + $(16 // ESZ)) + $(BPAD)];
    const long long m0 = (long long)blockIdx.y * $(32 * NB), k0 = (long long)blockIdx.x * $(KT);
    const long long xb = blockIdx.z * p.x_batch;
    // only x's side of vec_ok: q is written below, 16 bytes where its row allows
    const bool vec = (unsigned long long)p.x % 16 == 0 && p.k % $(VEC) == 0 && p.ldx % $(VEC) == 0 &&
                     p.x_batch % $(VEC) == 0;
    uint4 v[$(NCH)];
#pragma unroll
    for (int i = 0; i < $(NCH); i++) {
        const int idx = threadIdx.x + 256 * i, r = idx / $(CPR), cc = idx % $(CPR) * $(VEC);
        const long long end = m0 + r < p.m ? p.k : 0;
        v[i] = vec ? ld16(p.x, xb + (m0 + r) * p.ldx, k0 + cc, end)
                   : ld_values(p.x, xb + (m0 + r) * p.ldx, k0 + cc, end);
    }
#pragma unroll
    for (int i = 0; i < $(NCH); i++) {
        const int idx = threadIdx.x + 256 * i, r = idx / $(CPR), cc = idx % $(CPR) * $(VEC);
        *reinterpret_cast<uint4 *>(&tile[r / 32][(r % 32) * ($(KT) + $(16 // ESZ)) + cc]) = v[i];
    }
    __syncthreads();
    const int blk = (int)threadIdx.x % $(NB), col = (int)threadIdx.x / $(NB);
    const long long k = k0 + col, mb = m0 + 32 * blk;
    if (k >= p.k || mb >= p.m)
        return;
    const $(TW) *colv = &tile[blk][col];
    u32 mag = 0;
#pragma unroll
    for (int r = 0; r < 32; r++)
        mag = max(mag, raw_mag(colv[r * ($(KT) + $(16 // ESZ))]));
    const u32 c = mag_bad(mag) ? 0xffu : e8m0_of(raw_value(mag));
    ((u8 *)p.scale)[(blockIdx.z * p.k + k) * (p.m / 32) + mb / 32] = (u8)c;
    // The block's 32 codes, packed as they lie in q's row k (value r at byte r, or nibble r
    // of byte r/2 for e2m1), leave in 16-byte stores where the row allows.
%   local WORDS = OUT == "e2m1" and 4 or 8
%   local PER = OUT == "e2m1" and 8 or 4 -- values a word
    const u32 keep = c == 0xffu ? 0u : ~0u; // a nonfinite block's codes are 0
    u32 w[$(WORDS)];
%   local STR = KT + 16 // ESZ -- a tile row, values
#pragma unroll
    for (int i = 0; i < $(WORDS); ++i) {
%   if OUT == "e2m1" and IN == "bf16" then
        const $(TW) *v8 = colv + i * 8 * $(STR);
        w[i] = e2m1x8_bf16(v8[0] | (u32)v8[4 * $(STR)] << 16, v8[$(STR)] | (u32)v8[5 * $(STR)] << 16,
                           v8[2 * $(STR)] | (u32)v8[6 * $(STR)] << 16, v8[3 * $(STR)] | (u32)v8[7 * $(STR)] << 16, c) & keep;
%   else
        u32 x = 0;
#pragma unroll
        for (int j = 0; j < $(PER); j += 2)
            x |= (encode_mx2(raw_value(colv[(i * $(PER) + j) * $(STR)]),
                             raw_value(colv[(i * $(PER) + j + 1) * $(STR)]), c) & keep) << ($(32 // PER) * j);
        w[i] = x;
%   end
    }
    u8 *qrow = (u8 *)p.q + (blockIdx.z * p.q_batch + k * p.ldq + mb)$(OUT == "e2m1" and " / 2" or "");
    if ((reinterpret_cast<unsigned long long>(qrow) & 15) == 0) {
#pragma unroll
        for (int i = 0; i < $(WORDS); i += 4)
            *reinterpret_cast<uint4 *>(qrow + 4 * i) = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < $(WORDS * 4); ++i)
            qrow[i] = (u8)(w[i / 4] >> (8 * (i % 4)));
    }
}
% end
