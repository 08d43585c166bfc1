// gemm_wgmma_q.cuh — the kernel body of the quantized Hopper GEMMs (wgmma_f8, wgmma_i8, wgmma_mx, wgmma_wq),
// sm_90a: one producer warpgroup fills a STAGES-deep ring of 128-byte-swizzled tiles (one
// 128-byte row holds BK = 128 one-byte values of K) with cp.async and mbarriers
// (gemm_hopper.cuh); WM×WN consumer warpgroups run wgmma.mma_async m64nNk32 on both operands
// in shared memory and leave through the staged epilogue.  Include it after the family
// declaration; the family's plan() states, beside the launch fields:
//   NC, WGN, NP, PRODUCER_REGS, CONSUMER_REGS   hopper_tile_plan (gemm_hopper_plan.cuh)
//   MMA      the wgmma's type suffix: "f32.e4m3.e4m3", "s32.s8.s8", ...
//   ACC_INT  the accumulator is s32 (exact integer sums) instead of f32
//   PROMOTE  each K tile is summed apart from zero and promoted into an f32 total at its end
//            (fp8: the tensor core's accumulator is narrower than f32; block scales).  Without
//            it the wgmma accumulate into the total across all of K, keeping one wgmma group
//            in flight while the next stage is waited for.
//   BLOCK    sa or sb is block (needs PROMOTE): tot = fma(part, sa[row, kb]·sb[n/128, kb], tot)
//   FINE     scales that change along K inside a K tile, every PK of K (needs PROMOTE): each
//            PK of K is summed apart and promoted with the scales the producer staged beside
//            the stage (side data, decoded to f32):
//   MX       sa = sb = mx, PK = 32: tot = fma(part, 2^(ea−127)·2^(eb−127), tot) (mx_side)
//   GROUPED  sb = group:PK (32..256), B's group scales s[n][k/PK]:
//            tot = fma((float)part, s, tot), part an exact int32 sum (group_side)
//   PACKED_A, PACKED_B  A or B is 4-bit (s4, e2m1), expanded to one byte a value (s8, e4m3)
//            into the stage's tile by the producer (produce_packed in gemm_hopper.cuh, nib)
//   ES       bytes of a value in the tiles: 1 (above), or 2 for the weight-only pairs:
//   WQ       A f16/bf16, B s4/u4/s8/e2m1 in IB bits, dequantized by the producer into A's
//            type (wq_conv); wgmma m64nNk16, one f32 accumulator over all of K
//   TMA      one producer thread loads the tiles with bulk tensor copies (produce_tma in
//            gemm_hopper.cuh; the kernel takes the two tensor maps after qjit_params), and in a
//            cluster of two CTAs along M (the launch's choice: tiles of two rows or more) each
//            loads half of B for both; plain operands (ES bytes a value), no side data
//   OVERLAP  (with PROMOTE, not FINE; or MX) two parts: K tile kt's wgmma (MX: 32 of K) run
//            into one while kt − 1's is promoted from the other, so the tensor cores do not
//            wait for the promotion
// tensor/row/col scales and bias come last, each step rounded alone:
// D = cast_out(((tot·sa)·sb) + bias), tot converted to f32 first when it is s32.
% include("gemm_common.cuh")
% include("gemm_hopper.cuh")

namespace {

% include("gemm_hopper_tile.cuh")
constexpr int BK = 128;                     // bytes of K a stage (one row: 128 or 64 values)
% local PK = MX and 32 or GROUPED and GROUP or 0
% local G_TILE = PK == 0 and 0 or PK >= 128 and 1 or 128 // PK -- scale blocks a K tile
constexpr int PK = $(PK), G_TILE = $(G_TILE); // promotion period along K; its blocks a K tile
% if MX then
constexpr int SA_BYTES = BM * 4 * 4; // a stage's MX scales: f32 A [BM][4], then B [4][BN]
% else
constexpr int SA_BYTES = 0;          // a stage's group scales: f32 B [G_TILE][BN]
% end
% if MX and not PACKED_A then
constexpr int RAW_BYTES = (BM + BN) * 4; // and its codes as copied: a word a row, [BM + BN]
% else
constexpr int RAW_BYTES = 0;
% end
constexpr int SC_BYTES = SA_BYTES + G_TILE * BN * 4 + RAW_BYTES;
constexpr int SIDE_BYTES = STAGES * SC_BYTES; // after the ring's tiles, before its mbarriers
constexpr int ES = $(ES or 1);              // bytes of a value in the tiles (A's, and B's as expanded)
constexpr int IB = $(IB or 4);              // bits of a packed operand's stored values
constexpr int SLOTS = $(SLOTS or 2);      // packed operands' staging slots (hopper_pack_slots)
constexpr int SLOT_BYTES = SLOTS * ($(PACKED_A and "BM" or "0") + $(PACKED_B and "BN" or "0")) * 16 * IB / ES; // after that
static_assert(RING_BYTES + SIDE_BYTES + SLOT_BYTES + 2048 + BM * EPI_PITCH <= 227 * 1024, "gemm_wgmma_q: tile and stages need more shared memory than an SM has");

% local ACC_T, ACC_C = ACC_INT and "int" or "float", ACC_INT and "+r" or "+f"
typedef $(ACC_T) acc_t;

% local KS = 32 // (ES or 1) -- values of K in one wgmma: 32 bytes of each row
% -- trailing immediates: none for integers; operand scales (fp8); and no transposes (16-bit)
% local TAIL = ACC_INT and "" or (ES == 2 and ", 1, 1, 0, 0" or ", 1, 1")
% -- wgmma_fn(name, add): the wrapper of one wgmma; add: d accumulates when the last argument
% -- is not zero; without it d is output only (scale-d false), so that a new sum needs no copy
% -- of the registers it replaces (which ptxas would count as reads of an accumulator in
% -- flight across a loop's back edge, C7514)
% local function wgmma_fn(name, add)
%   local C = add and ACC_C or (ACC_INT and "=r" or "=f")
__device__ __forceinline__ void $(name)(acc_t (&d)[WGN / 2], u64 a, u64 b$(add and ", int add" or ""))
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, $(add and "%" .. (WGN // 2 + 2) or "0"), 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n$(WGN)k$(KS).$(MMA) {"
%   for i = 0, WGN // 2 - 1 do
                 "%$(i)$(i + 1 < WGN // 2 and "," or "")"
%   end
                 "}, %$(WGN // 2), %$(WGN // 2 + 1), p$(TAIL);\n}\n"
                 :
%   for i = 0, WGN // 2 - 1 do
                 "$(C)"(d[$(i)])$(i + 1 < WGN // 2 and "," or "")
%   end
                 : "l"(a), "l"(b)$(add and ', "r"(add)' or ""));
}
% end
// d (64×$(WGN) $(ACC_T), this thread's $(WGN // 2)) = A(64×$(KS))·B($(WGN)×$(KS))ᵀ + (add ? d : 0).
% wgmma_fn("wgmma", true)

% if OVERLAP and MX then
// d = A·Bᵀ with no addend: each 32 of K's sum of the MX path is a new value.
%   wgmma_fn("wgmma_new", false)

% end
// A sum as f32, where a promotion or the epilogue starts: the reference's t = (float)acc.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(int x) { return __int2float_rn(x); }

% if (PACKED_A or PACKED_B) and not WQ then
%   if A == "e2m1" then
// e2m1 nibbles -> e4m3 bytes worth value·2^-6, exactly: e2m1's sign, exponent and mantissa
// bits land on e4m3's sign and lowest bits, whose subnormals extend the same way (0.5 ->
// 2^-7).  The MX scales carry the 2^6 back (e8m0 below).
struct nib {
    static __device__ __forceinline__ u32 even(u32 x) { return ((x & 0x08080808u) << 4) | ((x & 0x07070707u) << 2); }
    static __device__ __forceinline__ u32 odd(u32 x) { return (x & 0x80808080u) | ((x >> 2) & 0x1c1c1c1cu); }
};
%   else
// s4 nibbles -> s8 bytes: ((n ^ 8) + 0x78) ^ 0x80 sign-extends each nibble n in its byte
// with no carry between bytes.
struct nib {
    static __device__ __forceinline__ u32 even(u32 x) { return (((x & 0x0F0F0F0Fu) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u; }
    static __device__ __forceinline__ u32 odd(u32 x) { return ((((x >> 4) & 0x0F0F0F0Fu) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u; }
};
%   end
typedef qh::nibble_expand<nib> expand4;
% end

% if SB == "group" then
using qc::gs_t;
using qc::gs_f32;
% end

% if SA == "mx" or SB == "mx" then
%   local OFF = A == "e2m1" and 6 or 0
// e8m0 code c as f32: 2^(c − 127 + $(OFF)), exactly (2^-127 is an f32 subnormal); 0xFF is NaN.
%   if OFF > 0 then
// The 2^6 undoes nib's 2^-6 on each operand; codes above 248 (2^121) then leave f32's range
// and give inf, a limit of this kernel (real MXFP4 scales sit far below it).
%   end
__device__ __forceinline__ float e8m0(u32 c)
{
    const u32 e = c + $(OFF);
    return c == 0xFFu ? __uint_as_float(0x7FC00000u) : e >= 255 ? __uint_as_float(0x7F800000u)
                      : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}
% end

% if WQ then
%   local SCALED = SB == "group" or SB == "mx" -- B̂ carries its scale; col/tensor: the epilogue does
%   local GSZ = SB == "mx" and 32 or SB == "group" and GROUP or 64
%   -- 4-bit integers with group scales of A's own type and no zero points: B̂ = (q − o)·s in
%   -- A's two-lane arithmetic, bit for bit the f32 path's value (see chunk)
%   local FAST = (B == "s4" or B == "u4") and SB == "group" and not ZEROS and GS == A
%   local MAGIC = A == "bf16" and 0x4300 or 0x6400 -- 128.0 (bf16), 1024.0 (f16): ulp 1
// The weight-only pairs' conversion (produce_packed, OB = 2): a K tile of B, 64 values a row
// ($(16 * (IB or 4) // 2) bytes of the slot), to B̂ in A's type, K order, in the swizzle layout.
// col/tensor: B̂ = q, exactly (the scale comes in the epilogue).  group: B̂ = (q − z)·s
// computed in f32 and rounded once to $(A).  mx: B̂ = q·2^(e−127), exact where $(A) holds
// it.  Thread t dequantizes whole rows, t + 128i, so that it needs only their few scales (and
// zeros), which prepare() loads a stage ahead.
struct wq_conv {
    static constexpr int ROWS = (BN + 127) / 128; // rows a thread dequantizes
    static constexpr int G = $(64 // math.min(GSZ, 64)); // scale groups a K tile
    static constexpr int PROW = 16 * IB / 2;      // packed bytes a row
%   if SCALED then
%     if SB == "mx" then
    const unsigned char *__restrict__ sg;
%     else
    const gs_t *__restrict__ sg;
%     end
%     if ZEROS then
    const gs_t *__restrict__ zg;
    float z[ROWS][G];
%     end
    int N, NG; // NG: groups a row of K
%     if FAST then
    u32 s[ROWS][G]; // the scale twice, in both halves
%     else
    float s[ROWS][G];
%     end
    __device__ __forceinline__ void prepare(int, int n0, int kt)
    {
        const int t = threadIdx.x & 127;
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const int n = n0 + t + 128 * i, grp = (kt * 64 + g * (64 / G)) / $(GSZ);
                const bool in = n < N && grp < NG;
                const long long at = (long long)n * NG + grp;
%     if SB == "mx" then
                s[i][g] = e8m0(in ? sg[at] : 127u); // 0xFF is NaN
%     elseif FAST then
                s[i][g] = in ? (u32)sg[at] * 0x10001u : 0u;
%     else
                s[i][g] = in ? gs_f32(sg[at]) : 0.f;
%     end
%     if ZEROS then
                z[i][g] = in ? gs_f32(zg[at]) : 0.f;
%     end
            }
    }
%   else
    __device__ __forceinline__ void prepare(int, int, int) {}
%   end
    // Value e (0..7) of a chunk from its packed words: 8 values in one word (4-bit) or two.
    static __device__ __forceinline__ float value(const u32 *w, int e)
    {
%   if B == "s8" then
        return (float)(int)(signed char)(w[e >> 2] >> (8 * (e & 3)));
%   else
        const u32 q = (w[0] >> (4 * e)) & 15u;
%     if B == "s4" then
        return (float)((int)(q ^ 8u) - 8);
%     elseif B == "u4" then
        return (float)q;
%     else
        // e2m1 (sign, 2 exponent bits of bias 1, 1 mantissa bit) put on f32's sign, lowest
        // exponent bits and top mantissa bit is its value times 2^-126, subnormals included
        // (0.5 -> 2^-127, -0 -> -0); the multiply by 2^126 is exact.
        return __fmul_rn(__uint_as_float(((q & 8u) << 28) | ((q & 7u) << 22)), 0x1p126f);
%     end
%   end
    }
%   if FAST then
    // One 16-byte output chunk (8 values, one packed word) with row i's group g, two lanes at
    // a time: lop3 puts nibbles e and e + 4 into the mantissas of $(string.format("0x%04x", MAGIC)) ($(MAGIC == 0x4300 and "128" or "1024"), whose ulp is
    // 1; s4 flips each nibble's top bit, so the halves hold $(MAGIC == 0x4300 and "128" or "1024") + q$(B == "s4" and " ^ 8" or ""), exactly.  Subtracting
    // $(MAGIC == 0x4300 and "128" or "1024")$(B == "s4" and " + 8" or "") leaves the integer value exactly, and one multiply by s rounds the product
    // once: the f32 path's (q − o)·s, which is exact in f32, rounded once to $(A).  prmt puts
    // the pairs back in K order.
    __device__ __forceinline__ uint4 chunk(const u32 *w, int i, int g) const
    {
        const u32 x = w[0], bias = $(string.format("0x%08xu", (MAGIC + (B == "s4" and 8 or 0)) * 0x10001));
        u32 v[4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            u32 h;
            asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(h) : "r"(x >> (4 * p)), "r"(0x000f000fu),
                "r"($(string.format("0x%08xu", MAGIC * 0x10001 + (B == "s4" and 0x00080008 or 0)))));
            asm("sub.rn.$(A)x2 %0, %1, %2;\n" : "=r"(h) : "r"(h), "r"(bias));
            asm("mul.rn.$(A)x2 %0, %1, %2;\n" : "=r"(v[p]) : "r"(h), "r"(s[i][g]));
        }
        // v[p] holds values p (low half) and p + 4 (high half)
        return make_uint4(__byte_perm(v[0], v[1], 0x5410), __byte_perm(v[2], v[3], 0x5410),
                          __byte_perm(v[0], v[1], 0x7632), __byte_perm(v[2], v[3], 0x7632));
    }
%   elseif A == "f16" and B == "s8" then
    // One 16-byte output chunk (8 values, two words) of s8 for f16 A, two lanes at a time:
    // q ^ 0x80 = q + 128 is put into the low byte of 0x64.. (1024, ulp 1) by prmt, and
    // subtracting 1152 leaves q, exactly (col/tensor scales come in the epilogue).
    __device__ __forceinline__ uint4 chunk(const u32 *w, int, int) const
    {
        u32 out[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 x = w[h] ^ 0x80808080u;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const u32 f = __byte_perm(x, 0x64646464u, j ? 0x4342 : 0x4140);
                asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(out[2 * h + j]) : "r"(f), "r"(0x64806480u));
            }
        }
        return make_uint4(out[0], out[1], out[2], out[3]);
    }
%   else
    // One 16-byte output chunk (8 values) from its packed words, with row i's group g.
    __device__ __forceinline__ uint4 chunk(const u32 *w, int i, int g) const
    {
        u32 out[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float v[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                v[e] = value(w, 2 * j + e);
%   if ZEROS then
                v[e] = __fmul_rn(__fsub_rn(v[e], z[i][g]), s[i][g]);
%   elseif SCALED then
                v[e] = __fmul_rn(v[e], s[i][g]);
%   end
            }
            asm("cvt.rn.$(A)x2.f32 %0, %1, %2;\n" : "=r"(out[j]) : "f"(v[1]), "f"(v[0]));
        }
        return make_uint4(out[0], out[1], out[2], out[3]);
    }
%   end
    template <int R> __device__ __forceinline__ void run(u32 tile, u32 slot, int t) const
    {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int row = t + 128 * i;
            if (row < R) {
                u32 w[PROW / 4];
#pragma unroll
                for (int q = 0; q < PROW / 16; ++q)
                    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(w[4 * q]), "=r"(w[4 * q + 1]), "=r"(w[4 * q + 2]), "=r"(w[4 * q + 3])
                                 : "r"(slot + row * PROW + 16 * q));
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    const uint4 v = chunk(w + c * IB / 4, i, c * G / 8);
                    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
                                 :: "r"(tile + row * qh::ROW_BYTES + ((c ^ (row & 7)) << 4)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
                }
            }
        }
    }
};
% end

% if FINE then
__device__ __forceinline__ float4 lds128(u32 addr)
{
    const uint4 v = qc::lds16(addr);
    return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}
__device__ __forceinline__ float2 lds64(u32 addr)
{
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}
__device__ __forceinline__ void sts32(u32 addr, float x)
{
    asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(addr), "f"(x) : "memory");
}
% end

% if GROUPED then
// The producer's side data: the group scales of the stage's K tile for the tile's BN
// columns, as f32 [G_TILE][BN] (group kt·G_TILE + g, or kt/2 for groups of 256); columns
// past N and groups past K get 0 (their sums are zeros or never stored).
struct group_side {
    // prefetched where they are a register or two a thread (groups of 32 are four: held
    // across a pass they spill the producer's 56 registers)
    static constexpr bool ARRIVES = true, PREFETCH = (G_TILE * BN + 127) / 128 <= 2, RAW = false, FILLS_A = false;
    static constexpr int PER = (G_TILE * BN + 127) / 128; // scales a producer thread stores a stage
    const gs_t *__restrict__ sg;
    int N, NG; // NG: groups a row of K
    u32 sc0;
    float v[PER]; // the prepared K tile's
    __device__ __forceinline__ float load(int n0, int kt, int i) const
    {
        const int g = i / BN, n = i % BN;
        const int grp = PK >= 256 ? kt / 2 : kt * G_TILE + g;
        return n0 + n < N && grp < NG ? gs_f32(sg[(long long)(n0 + n) * NG + grp]) : 0.f;
    }
    __device__ __forceinline__ void prepare(int, int n0, int kt, int tid)
    {
#pragma unroll
        for (int j = 0; j < PER; ++j)
            v[j] = tid + 128 * j < G_TILE * BN ? load(n0, kt, tid + 128 * j) : 0.f;
    }
    __device__ __forceinline__ void operator()(int s, int tid) const
    {
        const u32 dst = sc0 + s * SC_BYTES;
#pragma unroll
        for (int j = 0; j < PER; ++j)
            if (tid + 128 * j < G_TILE * BN)
                sts32(dst + (tid + 128 * j) * 4, v[j]);
    }
    // without PREFETCH: loaded and stored in one pass
    __device__ __forceinline__ void now(int s, int, int n0, int kt, int tid) const
    {
        const u32 dst = sc0 + s * SC_BYTES;
#pragma unroll
        for (int i = tid; i < G_TILE * BN; i += 128)
            sts32(dst + i * 4, load(n0, kt, i));
    }
};
% end

% if MX then
// The producer's side data (gemm_hopper.cuh): stage s's K tile kt spans the 32-blocks
// 4kt .. 4kt+3; their codes for the tile's BM rows of A and BN rows of B are read (a row's
// four codes by four adjacent threads), decoded, and stored as f32 A [BM][4] and B [4][BN].
// Rows past M or N and blocks past K get 1.0 through now(), 2^-127 through the copied words
// (zeros); either way their tiles are zeros or their outputs never stored.
struct mx_side {
    // RAW: where K is a multiple of 128 and the scale arrays are 4-byte aligned, a row's
    // four codes of a K tile are one aligned word, which the producer copies with cp.async
    // beside the stage (issue) and decodes to f32 once it has landed (decode, some passes
    // later: produce), each thread its own words; else they are read and stored in one
    // pass (now).  Held in registers across a pass instead, the codes spilled the
    // producer's 40-56 registers (ptxas).  MXFP4's expanding producer reads them in one
    // pass (its registers did not hold the copies either).
    static constexpr bool ARRIVES = true, PREFETCH = false, RAW = true, FILLS_A = false;
    const unsigned char *__restrict__ sa, *__restrict__ sb;
    int M, N, KB; // KB: 32-blocks per row of K
    u32 sc0;      // stage 0's scales
    bool raw_ok;  // the aligned words above
    __device__ __forceinline__ void issue(int s, int m0, int n0, int kt, int tid) const
    {
        const u32 raw = sc0 + s * SC_BYTES + SA_BYTES + G_TILE * BN * 4;
#pragma unroll
        for (int i = tid; i < BM + BN; i += 128) {
            const bool a = i < BM;
            const int row = a ? m0 + i : n0 + i - BM;
            const bool in = row < (a ? M : N);
            const unsigned char *src = (a ? sa : sb) + (long long)(in ? row : 0) * KB + kt * 4;
            qc::cp_async4(raw + i * 4, src, in ? 4 : 0); // a row past M or N: codes 0 (its tile is 0)
        }
    }
    __device__ __forceinline__ void decode(int s, int tid) const
    {
        const u32 dst = sc0 + s * SC_BYTES, raw = dst + SA_BYTES + G_TILE * BN * 4;
#pragma unroll
        for (int i = tid; i < BM + BN; i += 128) {
            u32 w;
            asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w) : "r"(raw + i * 4) : "memory");
            if (i < BM) // a row of A's four, one 16-byte store (four 4-byte ones conflict 4-way)
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n"
                             :: "r"(dst + i * 16), "f"(e8m0(w & 0xFFu)), "f"(e8m0((w >> 8) & 0xFFu)),
                                "f"(e8m0((w >> 16) & 0xFFu)), "f"(e8m0(w >> 24)) : "memory");
            else
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    sts32(dst + BM * 16 + (e * BN + i - BM) * 4, e8m0((w >> (8 * e)) & 0xFFu));
        }
    }
    __device__ __forceinline__ void now(int s, int m0, int n0, int kt, int tid) const
    {
        const u32 dst = sc0 + s * SC_BYTES;
#pragma unroll
        for (int i = tid; i < (BM + BN) * 4; i += 128) {
            const int r = i >> 2, e = i & 3, kb = kt * 4 + e;
            u32 c = 127;
            u32 at;
            if (r < BM) { // uniform per pass: BM*4 is a multiple of 128
                if (m0 + r < M && kb < KB)
                    c = qc::ld_u8_coherent(sa + (long long)(m0 + r) * KB + kb); // the quantizer's, maybe
                at = dst + i * 4;
            } else {
                const int n = r - BM;
                if (n0 + n < N && kb < KB)
                    c = __ldg(sb + (long long)(n0 + n) * KB + kb);
                at = dst + BM * 16 + (e * BN + n) * 4;
            }
            sts32(at, e8m0(c));
        }
    }
};
% end

} // namespace

% if TMA then
extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p, const __grid_constant__ qh::tmap ta,
                                                                         const __grid_constant__ qh::tmap tb,
                                                                         const __grid_constant__ qh::tmap tr)
% else
extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
% end
{
    extern __shared__ __align__(1024) unsigned char smem[];
    qc::pdl_wait(); // the next kernel is let start after the main loops (below)
    const int M = (int)p.m, N = (int)p.n;
    const int tid = threadIdx.x;

% if TMA then
    // A cluster of two shares B (produce_tma); peer: the other CTA's rank, or -1 alone.
    const int cl = (int)qh::cluster_size(), rank = (int)qh::cluster_rank(), peer = cl > 1 ? rank ^ 1 : -1;
    const qh::tile_walk<BM, BN, ES> w(p, cl, rank);
% else
    const qh::tile_walk<BM, BN, ES> w(p);
% end
    const int first = w.first, tiles = w.tiles, stride = w.stride, KT = w.k_tiles;

    // The ring (gemm_hopper.cuh) runs on across a CTA's tiles.
    // full[s]: with side data, produce's cp.async arrival and a plain one per producer thread;
    // produce_packed's plain one; produce_tma's expect_tx arrival.
% if TMA then
    const qh::ring_addrs rg = qh::make_ring<STAGES, NC, 1, true>(smem, RING_BYTES, tid, cl);
    if (cl > 1) // the peer's barriers are initialized (and fenced) before anything reaches them
        qc::cluster_sync<false>();
% else
    const qh::ring_addrs rg = qh::make_ring<STAGES, NC$(FINE and not (PACKED_A or PACKED_B) and ", 256" or "")>(smem, RING_BYTES + SIDE_BYTES + SLOT_BYTES, tid);
% end
    const u32 ring = rg.base, full0 = rg.full0, empty0 = rg.empty0;
% if MX or GROUPED or FINE or PACKED_A or PACKED_B then
    const u32 sc0 = ring + RING_BYTES; // side data, then packed B's slots
% end

    if (tid < 128) {
% if NC > 1 then
        asm volatile("setmaxnreg.dec.sync.aligned.u32 $(PRODUCER_REGS);\n" ::: "memory");
% end
% if MX then
        // the library guarantees K % 32 == 0 for mx
        mx_side side = {static_cast<const unsigned char *>(p.scale_a),
                        static_cast<const unsigned char *>(p.scale_b), M, N, (int)(p.k / 32), sc0,
                        p.k % 128 == 0 && (reinterpret_cast<unsigned long long>(p.scale_a) & 3) == 0 &&
                            (reinterpret_cast<unsigned long long>(p.scale_b) & 3) == 0};
% elseif GROUPED then
        // and K % PK == 0 for group scales
        group_side side = {static_cast<const gs_t *>(p.scale_b), N, (int)(p.k / PK), sc0};
% elseif not TMA then
        qh::no_side side{};
% end
% if WQ then
%   if SB == "group" then
        wq_conv conv = {static_cast<const gs_t *>(p.scale_b),
%     if ZEROS then
                        static_cast<const gs_t *>(p.zeros_b), {},
%     end
                        N, (int)(p.k / $(GROUP)), {}};
%   elseif SB == "mx" then
        // the library guarantees K % 32 == 0 for mx
        wq_conv conv = {static_cast<const unsigned char *>(p.scale_b), N, (int)(p.k / 32), {}};
%   else
        wq_conv conv;
%   end
% elseif PACKED_A or PACKED_B then
        expand4 conv;
% end
% if TMA then
        if (tid == 0)
            qh::produce_tma<BM, BN, STAGES, ES, $(TMA_ROWS)>(ta, tb, tr, w, ring, full0, empty0, (int)p.m);
% elseif PACKED_A or PACKED_B then
        qh::produce_packed<BM, BN, STAGES, $(PACKED_A and "true" or "false"), $(PACKED_B and "true" or "false"), ES, IB, SLOTS>(
            p, w, ring, full0, empty0, sc0 + SIDE_BYTES, tid, conv, side);
% else
        qh::produce<BM, BN, STAGES, ES>(p, w, ring, full0, empty0, tid, side);
% end
    } else {
% include("gemm_hopper_consumer.cuh")
        // A consumer warp's release of a stage: to every CTA whose producer writes into it.
        auto release = [&](u32 bar) {
            mbar_arrive(bar);
% if TMA then
            if (peer >= 0)
                qh::mbar_arrive_peer(bar, (u32)peer);
% end
        };
% if SA == "block" then
        const float *__restrict__ SAB = static_cast<const float *>(p.scale_a);
% end
% if SB == "block" then
        const float *__restrict__ SBB = static_cast<const float *>(p.scale_b);
% end
        for (int t = first; t < tiles; t += stride) {
            int m0, n0;
            w.origin(t, m0, n0);
% if SA == "row" or SA == "block" then
            // This thread's rows: 16*warp + lane/4 + 8*h of each m64 block mi.
            const int row0 = m0 + wg_m * WGM + warp * 16 + (lane >> 2);
% end
% if SA == "block" then
            const float *sa_rows[MI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0 + mi * 64 + h * 8;
                    sa_rows[mi][h] = row < M ? SAB + (long long)row * KT : nullptr;
                }
% end
% if FINE then
            // This thread's B scales: columns 2*(lane%4) + 8*jb (+1) of the consumer tile,
            // block g at scb + 4*BN*g; with MX, its A scales: its rows' [4] at sca + 16*row.
            const u32 scb = sc0 + SA_BYTES + (wg_n * WGN + (lane & 3) * 2) * 4;
%   if MX then
            const u32 sca = sc0 + (wg_m * WGM + warp * 16 + (lane >> 2)) * 16;
%   end
% end
% if SB == "block" then
            const int bcol = n0 + wg_n * WGN;
            const float *sb_row = bcol < N ? SBB + (long long)(bcol / 128) * KT : nullptr;
% end
% if OVERLAP then
            float tot[MI][WGN / 2];
            float part[2][MI][WGN / 2];
% elseif PROMOTE then
            float tot[MI][WGN / 2];
            acc_t part[MI][WGN / 2];
% else
            acc_t tot[MI][WGN / 2];
% end
            qc::zero(tot);
% -- block_scales(v, kt): the scale product of K tile kt (one 128-block) for this thread's
% -- rows into v[MI][2], 0 past M or N
% local function block_scales(v, kt)
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
%   if SA == "block" and SB == "block" then
                        $(v)[mi][h] = sa_rows[mi][h] && sb_row ? sa_rows[mi][h][$(kt)] * sb_row[$(kt)] : 0.f;
%   elseif SA == "block" then
                        $(v)[mi][h] = sa_rows[mi][h] ? sa_rows[mi][h][$(kt)] : 0.f;
%   else
                        $(v)[mi][h] = sb_row ? sb_row[$(kt)] : 0.f;
%   end
% end

% if OVERLAP and MX then
            // MX with two parts: each 32 of K (one scale block, ks = 0..3 of a K tile) is one
            // wgmma into part[ks & 1], issued before block ks − 1's part is promoted with its
            // scales, so a consumer keeps a wgmma group in flight through three of the four
            // promotions of a K tile; the fourth waits for the last group (the other consumer
            // warpgroups' wgmma run meanwhile).  No group stays in flight across K tiles: where
            // one did, ptxas could not see which part a wait had retired and serialized every
            // wgmma (C7514).  Same blocks, same order, same fma as the plain path.
%   local comp = {"x", "y", "z", "w"}
%   local function promote(Q, g)
#pragma unroll
                for (int jb = 0; jb < WGN / 8; ++jb) {
                    const float2 cb = lds64(scb + ss + $(g) * BN * 4 + jb * 32);
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int j = 4 * jb + 2 * h;
                            const float r = ra[mi][h].$(comp[g + 1]);
                            tot[mi][j] = fmaf(part[$(Q)][mi][j], r * cb.x, tot[mi][j]);
                            tot[mi][j + 1] = fmaf(part[$(Q)][mi][j + 1], r * cb.y, tot[mi][j + 1]);
                        }
                }
%   end
#pragma unroll 1
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full0 + 8 * s, phase);
                fence_proxy_async(); // wgmma reads what the producer wrote
                const u32 st = s * STAGE_BYTES, ss = s * SC_BYTES;
                float4 ra[MI][2]; // this stage's A scales, block ks in x, y, z, w
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        ra[mi][h] = lds128(sca + ss + (mi * 64 + h * 8) * 16);
%   for ks = 0, 3 do
                qh::wgmma_fence();
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
                    wgmma_new(part[$(ks % 2)][mi], smem_desc(a_tile + st + mi * 64 * ROW_BYTES + $(ks * 32)),
                              smem_desc(b_tile + st + $(ks * 32)));
                qh::wgmma_commit();
%     if ks > 0 then
                qh::wgmma_wait<1>(); // block ks − 1 is done
%       promote((ks - 1) % 2, ks - 1)
%     end
%   end
                qh::wgmma_wait<0>();
%   promote(1, 3)
                if (lane == 0)
                    release(empty0 + 8 * s); // tiles and scales read: the stage is free
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
% elseif OVERLAP then
%   if FINE or not PROMOTE then error("gemm_wgmma_q: OVERLAP is for PROMOTE without FINE, or MX") end
            // K tile kt's wgmma run into part[kt & 1] while kt − 1's part is promoted.  The loop
            // body is straight-line (two K tiles a pass, the last one or two after it) so that
            // ptxas can see that the part being promoted has no wgmma outstanding.
            float sblk0[MI][2], sblk1[MI][2]; // block scales of the K tile in part 0 / part 1
            int sq0 = 0, sq1 = 0;             // and its stage
            (void)sblk0, (void)sblk1;
%   local function issue(P, kt)
%     if BLOCK then block_scales("sblk" .. P, kt) end
                mbar_wait(full0 + 8 * s, phase);
%     if not TMA then
                fence_proxy_async(); // wgmma reads what cp.async wrote
%     end
                qh::wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BK / 32; ++ks)
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi)
                        wgmma(part[$(P)][mi], smem_desc(a_tile + s * STAGE_BYTES + mi * 64 * ROW_BYTES + ks * 32),
                              smem_desc(b_tile + s * STAGE_BYTES + ks * 32), ks);
                qh::wgmma_commit();
                sq$(P) = s;
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
%   end
%   local function promote(Q)
                if (lane == 0)
                    release(empty0 + 8 * sq$(Q));
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int j = 0; j < WGN / 2; ++j)
%     if BLOCK then
                        tot[mi][j] = fmaf(part[$(Q)][mi][j], sblk$(Q)[mi][(j >> 1) & 1], tot[mi][j]);
%     else
                        tot[mi][j] += part[$(Q)][mi][j];
%     end
%   end
%   issue(0, "0")
            int kt = 1; // part 0 holds K tile kt − 1
#pragma unroll 1
            for (; kt + 1 < KT; kt += 2) {
%   issue(1, "kt")
                qh::wgmma_wait<1>();
%   promote(0)
%   issue(0, "kt + 1")
                qh::wgmma_wait<1>();
%   promote(1)
            }
            if (kt < KT) {
%   issue(1, "kt")
                qh::wgmma_wait<1>();
%   promote(0)
                qh::wgmma_wait<0>();
%   promote(1)
            } else {
                qh::wgmma_wait<0>();
%   promote(0)
            }
% else
#pragma unroll 1
            for (int kt = 0; kt < KT; ++kt) {
% if BLOCK then
                // This K block's scales (a K tile is one 128-block: KT blocks in all), read
                // while its wgmma run.
                float sblk[MI][2];
%   block_scales("sblk", "kt")
% end
                mbar_wait(full0 + 8 * s, phase);
%   if not TMA then
                fence_proxy_async(); // wgmma reads what cp.async wrote
%   end
% if FINE then
                // Every PK of K apart: its wgmma, then its promotion with its scales; the other
                // consumer warpgroups' wgmma run meanwhile.
                const u32 st = s * STAGE_BYTES, ss = s * SC_BYTES;
%   if MX then
                float4 ra[MI][2];
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        ra[mi][h] = lds128(sca + ss + (mi * 64 + h * 8) * 16);
%   end
#pragma unroll
                for (int ks = 0; ks < BK / 32; ++ks) {
                    // a block starts from zero at its first 32 of K (groups of 256: even K tiles)
                    const int add = PK >= 256 ? (kt & 1) | ks : (ks * 32) % PK;
                    qh::wgmma_fence();
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi)
                        wgmma(part[mi], smem_desc(a_tile + st + mi * 64 * ROW_BYTES + ks * 32),
                              smem_desc(b_tile + st + ks * 32), add);
                    if (((ks + 1) * 32) % (PK < 128 ? PK : 128) != 0)
                        continue; // the block goes on
                    qh::wgmma_commit();
                    qh::wgmma_wait<0>();
                    if (PK >= 256 && !(kt & 1) && kt + 1 < KT)
                        continue; // a group of 256 ends with the next K tile
                    const int g = PK >= 128 ? 0 : ks * 32 / PK;
#pragma unroll
                    for (int jb = 0; jb < WGN / 8; ++jb) {
                        const float2 cb = lds64(scb + ss + g * BN * 4 + jb * 32);
#pragma unroll
                        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                const int j = 4 * jb + 2 * h;
%   if MX then
                                const float r = ks == 0 ? ra[mi][h].x : ks == 1 ? ra[mi][h].y : ks == 2 ? ra[mi][h].z : ra[mi][h].w;
                                tot[mi][j] = fmaf(part[mi][j], r * cb.x, tot[mi][j]);
                                tot[mi][j + 1] = fmaf(part[mi][j + 1], r * cb.y, tot[mi][j + 1]);
%   else
%     if ACC_INT then
                                // (an int32 group sum of s8 × s4 is within ±2^18: qc::exact_f32)
                                tot[mi][j] = fmaf(qc::exact_f32(part[mi][j]), cb.x, tot[mi][j]);
                                tot[mi][j + 1] = fmaf(qc::exact_f32(part[mi][j + 1]), cb.y, tot[mi][j + 1]);
%     else
                                tot[mi][j] = fmaf(to_f32(part[mi][j]), cb.x, tot[mi][j]);
                                tot[mi][j + 1] = fmaf(to_f32(part[mi][j + 1]), cb.y, tot[mi][j + 1]);
%     end
%   end
                            }
                    }
                }
                if (lane == 0)
                    release(empty0 + 8 * s); // tiles and scales read: the stage is free
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
% else
                qh::wgmma_fence();
                const u32 st = s * STAGE_BYTES;
#pragma unroll
                for (int ks = 0; ks < BK / 32; ++ks)
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi)
% if PROMOTE then
                        wgmma(part[mi], smem_desc(a_tile + st + mi * 64 * ROW_BYTES + ks * 32),
                              smem_desc(b_tile + st + ks * 32), ks);
% else
                        wgmma(tot[mi], smem_desc(a_tile + st + mi * 64 * ROW_BYTES + ks * 32),
                              smem_desc(b_tile + st + ks * 32), 1);
% end
                qh::wgmma_commit();
% if PROMOTE then
                qh::wgmma_wait<0>();
                if (lane == 0)
                    release(empty0 + 8 * s); // the stage is free for the producer
% else
                // One group stays in flight: the one before it is done, and so is its stage.
                qh::wgmma_wait<1>();
                if (lane == 0 && kt > 0)
                    release(empty0 + 8 * (s == 0 ? STAGES - 1 : s - 1));
% end
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
% if PROMOTE then
                // Promote: part[mi][4*j + 2*h + e] is row 8*h (+16*warp + lane/4) of block mi.
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int j = 0; j < WGN / 2; ++j)
%   if BLOCK then
                        tot[mi][j] = fmaf(part[mi][j], sblk[mi][(j >> 1) & 1], tot[mi][j]);
%   else
                        tot[mi][j] += part[mi][j];
%   end
% end
% end
            }
% end
% if not PROMOTE then
            qh::wgmma_wait<0>();
            if (lane == 0 && KT > 0)
                release(empty0 + 8 * (s == 0 ? STAGES - 1 : s - 1)); // the tile's last stage
% end

            w.main_loops_done(t);

            // Epilogue, staged as in gemm_wgmma.cu: pass q stages columns [q*SEG, (q+1)*SEG)
            // of the consumer's tile, scaled and biased in f32, rounded once to OUT.  Value by
            // value (stage2): 16x16 blocks through stmatrix ran 2.7% slower for fp8 at 8192^3
            // (docs/NOTES.md).
            out_t *__restrict__ D = static_cast<out_t *>(p.d);
            const bool bulk = vec && m0 + BM <= M && n0 + BN <= N;
            const u32 base = epi + (wg_m * WGM + warp * 16 + (lane >> 2)) * EPI_PITCH +
                             (wg_n * SEG + (lane & 3) * 2) * (int)sizeof(out_t);
            const u32 own = epi + wg_m * WGM * EPI_PITCH + wg_n * SEG * (int)sizeof(out_t);
            const int col0 = n0 + wg_n * WGN + (lane & 3) * 2;
            const qc::factors f(p);
% if SA == "row" then
            float sa_r[MI][2]; // the rows' A scales, read once
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    sa_r[mi][h] = f.row(row0 + mi * 64 + h * 8, M);
% end
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                qh::pass_open(sender, 1 + c);
#pragma unroll
                for (int jj = 0; jj < SEG / 8; ++jj) {
                    const int j = q * (SEG / 8) + jj;
                    const int col = col0 + j * 8;
                    float sb0, sb1, b0, b1;
                    f.cols(col, N, sb0, sb1, b0, b1);
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            float x = to_f32(tot[mi][4 * j + 2 * h]), y = to_f32(tot[mi][4 * j + 2 * h + 1]);
                            qc::finish2(x, y, $(SA == "row" and "sa_r[mi][h]" or "f.sa_t"), sb0, sb1, b0, b1);
                            qc::stage2(base + (mi * 64 + h * 8) * EPI_PITCH + jj * 8 * (int)sizeof(out_t), x, y);
                        }
                    }
                }
                qh::pass_send<WGM, SEG>(1 + c, q, bulk, D, p.ldd, own, EPI_PITCH, m0 + wg_m * WGM,
                                        n0 + wg_n * WGN, M, N, vec, tid & 127);
            }
        }
        if (sender)
            bulk_wait<true>();
    }
% if TMA then
    // No CTA leaves while its peer may still write into its stages or arrive on its barriers.
    if (cl > 1)
        qc::cluster_sync<false>();
% end
}
