// gemm_wq.cu — f16/bf16 activations × quantized weights (s4, u4, s8, e2m1), mma.sync m16n8k16
// in A's type with f32 accumulation, sm_80 … sm_90a.  B travels packed (global → cp.async →
// shared → ldmatrix) and each thread dequantizes its own fragment in registers.
//
// The trick that keeps that cheap: the order of k inside one 16-byte chunk of B is free,
// as long as A uses the same order.  ldmatrix on a packed chunk hands thread t (= lane%4) the
// 4 bytes 4t..4t+3, i.e. the values k = 8t..8t+7 (4-bit) or 4t..4t+3 (s8).  We let those be
// the k that mma positions 2t, 2t+1, 2t+8, 2t+9 of the k16 steps stand for, pairing values
// j and j+4 (4-bit: the same nibble of both 16-bit halves, so one mask serves both halves)
// or j and j+2 (s8), and A is read with one ld.shared of the same k range and permuted to
// match with prmt (amortized over all n tiles of the warp).
//
// Scales: col and tensor multiply the f32 accumulator in the epilogue (B̂ is an exact small
// integer in A's type).  group, on warp tiles of at most two m16 tiles, keeps B̂ = q − round(z)
// exact too and sums each group into f32 partials that are folded in times s (minus the
// fractional rest of z times the group's sums of A, an mma against ones); with bf16 A and
// zero points the fold takes the whole offset instead, B̂ = 128 + q as the LOP3 leaves it,
// minus (128 + z)·s times the group's sums of A; on taller warp
// tiles, short of registers, it builds B̂ = (q − z)·s in A's type, q − z exact and the
// product rounded once.  mx sums each 32-k block apart too and adds it times 2^(e−127),
// which keeps any e8m0 exponent in range and propagates 0xFF as NaN.
% -- qjit family: name=mma_wq id=3 order=40
% include("gemm_stage_plan.cuh")
% family {
%   floor = 80,
%   measured = true,
%   serves = function() return one_of(A, "f16", "bf16") and one_of(B, "s4", "u4", "s8", "e2m1") end,
%   -- Decode (M <= 64, or M unknown): 16x128x128 w1x4 s3 runs bf16 x s4 g128 at 1x28672x8192
%   -- in 65.7 us on H100 (1.84 TB/s), 3.4x faster than 128x128x64 w2x2.  Prefill (M > 64):
%   -- 128x128x64 w2x2 s3, which reads each weight tile once per 128 rows of A where the
%   -- decode tile reads it once per 16 (predicted faster from M = 65 on; docs/NOTES.md).
%   default = function(m)
%     if m == 0 or m <= 64 then return choose(16, 128, 128, 1, 4, 3) end
%     return choose(128, 128, 64, 2, 2, 3)
%   end,
%   space = quant_mma_space, -- gemm_stage_plan.cuh
%   plan = function()
%     local ok_b = {s4 = {col = 1, group = 1}, u4 = {col = 1, group = 1}, s8 = {col = 1, tensor = 1}, e2m1 = {mx = 1}}
%     if A ~= "f16" and A ~= "bf16" then unsupported("gemm_wq: A must be f16 or bf16, not " .. A) end
%     if not ok_b[B] then unsupported("gemm_wq: B must be s4, u4, s8 or e2m1, not " .. B) end
%     if SA ~= "none" then unsupported("gemm_wq: sa must be none (A is not quantized), not " .. SA) end
%     if not ok_b[B][SB] then unsupported("gemm_wq: b=" .. B .. " does not take sb=" .. SB) end
%     if ZEROS and not (B == "u4" and SB == "group") then unsupported("gemm_wq: zero points need b=u4 sb=group") end
%     if OUT ~= "f16" and OUT ~= "bf16" and OUT ~= "f32" then unsupported("gemm_wq: out must be f16, bf16 or f32") end
%     if BK ~= 32 and BK ~= 64 and BK ~= 128 then unsupported("gemm_wq: BK must be 32, 64 or 128, not " .. BK) end
%     if BM % (16 * WM) ~= 0 or BN % (16 * WN) ~= 0 then unsupported("gemm_wq: the warp tile must be a multiple of 16x16") end
%     if STAGES < 2 or STAGES > 6 then unsupported("gemm_wq: STAGES must be 2..6") end
%     if SPLIT_K ~= 1 then unsupported("gemm_wq: split-K is not implemented (SPLIT_K must be 1)") end
%     if ARCH < 80 then unsupported("gemm_wq: needs sm_80 or newer") end
%     local THREADS = 32 * WM * WN
%     local BITS = B == "s8" and 8 or 4
%     local KC = 128 // BITS                   -- k values in one 16-byte chunk of B
%     local RB = BK * BITS // 8                -- bytes of one B tile row
%     local MT_, NT_ = BM // WM // 16, BN // WN // 8
%     -- Fragment buffers (see the main loop): two, indexed by step parity, need an even
%     -- number of steps per tile; A gets two only on warp tiles of few rows.
%     local BBUF = (BK // KC) % 2 == 0 and 2 or 1
%     local ABUF = MT_ <= 2 and BBUF or 1
%     -- Group scales on warp tiles with room for a second set of accumulators: B̂ = q − round(z)
%     -- exactly, each group summed apart in f32 and folded in times s (see the main loop).
%     local FOLD = SB == "group" and MT_ <= 2
%     -- With bf16 tokens and zero points the fold also takes B's offset: B̂ is the LOP3's
%     -- value, B + q exactly (B = MAGIC + OFF, below), and −(B + z)·s times the group's sums
%     -- of A (the mma against ones the zero points need anyway) is folded in f32, where the
%     -- add of each pair would otherwise cost an HFMA2 (H200: u4 with zeros 5-8% faster at
%     -- M = 16-32; s4, which would need the sums of A only for this, was level at 16 tokens
%     -- and 3-6% slower at 32, so it keeps the add).  f16 keeps it too: its magic of 1024
%     -- would leave the sums too little of f32's precision.
%     local RAW = FOLD and A == "bf16" and ZEROS
%     local GPT, ES = 0, 0                     -- scale entries per B tile row, bytes per entry
%     if SB == "group" then GPT = math.max(1, BK // GROUP); ES = FOLD and (RAW and 8 or ZEROS and 12 or 4) or (ZEROS and 8 or 4) end
%     if SB == "mx" then GPT = BK // 32; ES = 2 end
%     local STAGE_BYTES = BM * BK * 2 + BN * RB + BN * GPT * ES
%     local NP, SMEM = ring_staging("gemm_wq", STAGES * STAGE_BYTES, BN // WN)
%     -- On sm_90 the library may split K across a cluster of up to 8 CTAs per output tile
%     -- (chosen at launch when the tiles alone leave SMs idle): each sums a range of whole
%     -- groups and rank 0 adds the others' f32 tiles, which pass through shared memory.
%     local CLUSTER = ARCH >= 90
%     local KG = (SB == "group" and GROUP > BK) and GROUP // BK or 1 -- K tiles per split unit
%     if CLUSTER then SMEM = math.max(SMEM, BM * BN * 4) end
%     -- A needs 16-byte rows (lda % 8) and B too (ldb % 32 for 4-bit, % 16 for s8).  The
%     -- loads would take any K (a chunk across K is copied in part), but K is asked to be a
%     -- multiple of ld_multiple too, so that a padded ld = K + ld_multiple stays legal.
%     local LDM = BITS == 4 and 32 or 16
%     local KMUL = LDM
%     -- CTAs per SM to ask ptxas for: registers estimated as accumulators (twice with FOLD),
%     -- A and B fragments, scale operands, and some 64 for addresses and temporaries.
%     local REGS = MT_ * NT_ * 4 * (FOLD and 2 or 1) + ABUF * MT_ * (BITS == 4 and 8 or 4) + 2 * NT_ + NT_ * 2 + 64
%     if FOLD and ZEROS then REGS = REGS + NT_ * 3 + MT_ * 4 end
%     local MINB = math.max(1, math.min(4, 65536 // (THREADS * REGS), 229376 // SMEM))
%     return {threads = THREADS, smem = SMEM, k_multiple = KMUL, ld_multiple = LDM, align = 16,
%             cluster_k = CLUSTER and 8 or 1, k_chunk = CLUSTER and BK * KG or 0,
%             THREADS = THREADS, BITS = BITS, KC = KC, RB = RB, MT_ = MT_, NT_ = NT_, BBUF = BBUF,
%             ABUF = ABUF, FOLD = FOLD, RAW = RAW, GPT = GPT, ES = ES, STAGE_BYTES = STAGE_BYTES, NP = NP,
%             SMEM = SMEM, CLUSTER = CLUSTER, KG = KG, LDM = LDM, KMUL = KMUL, REGS = REGS, MINB = MINB}
%   end,
% }
% -- Bits of an exactly representable value in A's type, and of the pair (v, v).
% local function hbits(v)
%   local sign = 0
%   if v < 0 then sign = 0x8000; v = -v end
%   if v == 0 then return sign end
%   local e = 0
%   while v >= 2 do v = v / 2; e = e + 1 end
%   while v < 1 do v = v * 2; e = e - 1 end
%   if A == "f16" then return sign | ((e + 15) << 10) | math.tointeger((v - 1) * 1024) end
%   return sign | ((e + 127) << 7) | math.tointeger((v - 1) * 128)
% end
% local function h2(v) local b = hbits(v); return string.format("0x%08xu", (b << 16) | b) end
% local MAGIC = A == "f16" and 1024 or 128 -- a nibble ORed into its mantissa reads MAGIC + q
% local OFF = B == "s4" and 8 or 0         -- s4 nibbles are biased by 8 (see deq4)
//
% include("gemm_common.cuh")

namespace {
using namespace qc;

% include("gemm_mma_tile.cuh")
constexpr int BITS = $(BITS);
constexpr int KC = $(KC);                   // k values per 16-byte chunk of B (one step)
constexpr int KSTEPS = BK / KC;
constexpr int RA = BK * 2, CPRA = BK / 8;   // A tile row: bytes, 16-byte chunks
constexpr int RB = $(RB), CPRB = RB / 16;   // B tile row
constexpr int A_BYTES = BM * RA, B_BYTES = BN * RB;
constexpr int GPT = $(GPT), ES = $(ES);     // scale entries per B row and tile, entry bytes
constexpr int SC_OFF = A_BYTES + B_BYTES, SC_N = BN * GPT;
constexpr int STAGE_BYTES = $(STAGE_BYTES);
constexpr int LDA_ROWS = THREADS / CPRA, LDB_ROWS = THREADS / CPRB; // rows per cp.async pass
constexpr int SC_PER = (SC_N + THREADS - 1) / THREADS;              // scale entries per thread
static_assert(STAGES * STAGE_BYTES <= $(SMEM), "gemm_wq: the ring needs more shared memory than the launch asks for");

// A: chunk c of row r sits at c ^ fa(r).  The consumer reads per 8-lane phase rows 2p, 2p+1
// at four chunks each (4-bit B: ld.shared.v4) or per 16-lane phase rows 4q..4q+3 at two
// chunks each (s8: ld.shared.v2); bit 2 of fa follows bit 0 of the row and bits 1..2 differ
// over four rows, so both land on 8 distinct bank groups (with BK=32 two rows share a line).
__device__ __forceinline__ u32 swz_a(int r, int c)
{
    const int f = ((r & 1) << 2) | (r & 2) | ((r >> 2) & 1);
    return r * RA + ((c ^ (f & (CPRA - 1))) << 4);
}
// B: the 8 rows of one ldmatrix 8x8 (one chunk each) must cover 8 bank groups; rows shorter
// than 128 bytes share a line, so the XOR takes the row bits above those.
constexpr int B_SHIFT = CPRB >= 8 ? 0 : CPRB == 4 ? 1 : CPRB == 2 ? 2 : 3;
__device__ __forceinline__ u32 swz_b(int r, int c)
{
    return r * RB + ((c ^ ((r >> B_SHIFT) & (CPRB - 1))) << 4);
}

// cp.async for B, whose rows are read a few tiles' worth at a time: 256-byte L2 fills.
__device__ __forceinline__ void cp_async16_b(u32 dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.$(A).$(A).f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
% if SB == "mx" then
// d = a·b with a zero accumulator (the partial sum of one 32-k block).
__device__ __forceinline__ void mma0(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.$(A).$(A).f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}
% end

// Paired arithmetic in A's type.  bf16 add/mul need sm_90, so bf16 goes through fma.
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c)
{
    u32 d;
    asm("fma.rn.$(A)x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ u32 hadd2(u32 a, u32 b)
{
    u32 d;
% if A == "f16" then
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
% else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"($(h2(1))), "r"(b));
% end
    return d;
}
% if B == "e2m1" or SB == "group" then
__device__ __forceinline__ u32 hmul2(u32 a, u32 b)
{
%   if A == "f16" then
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
%   else
    return hfma2(a, b, 0x80008000u); // + (−0) keeps every product, −0 included
%   end
}
% end
% if SB == "group" then
// f32 ↔ A's type (round to nearest even).
__device__ __forceinline__ u32 to_h(float x)
{
    u16 r;
    asm("cvt.rn.$(A).f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float from_h(u32 h)
{
%   if A == "f16" then
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"((u16)h));
    return f;
%   else
    return __uint_as_float(h << 16);
%   end
}
// A group scale or zero of type $(GS), as f32.
__device__ __forceinline__ float gs_f32(u32 bits)
{
%   if GS == "f32" then
    return __uint_as_float(bits);
%   elseif GS == "f16" then
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"((u16)bits));
    return f;
%   else
    return __uint_as_float(bits << 16);
%   end
}
% end

% if BITS == 4 then
// Thread t's 8 values k = 8t..8t+7 of one chunk are the nibbles of x (value 2i in the low
// nibble of byte i).  o[j] pairs value j (low half) with value j+4: nibble j of each 16-bit
// half, so one mask serves both.  o[0] and o[1] are mma k-step 0's b0 and b1, o[2] and
// o[3] step 1's.
%   if B == "e2m1" then
// e2m1 (s e e m) → A's type: sign to bit 15, e e m to the top of the mantissa and the bottom
// of the exponent, which reads the value times 2^-(bias difference) exactly (subnormal for
// e = 0), then one exact multiply restores it.
__device__ __forceinline__ void deq4(u32 (&o)[4], u32 x)
{
    const u32 S = 0x80008000u;
%     if A == "f16" then
    const u32 E = 0x0e000e00u; // bits 9..11
    o[0] = hmul2(((x << 12) & S) | ((x << 9) & E), $(h2(2 ^ 14)));
    o[1] = hmul2(((x << 8) & S) | ((x << 5) & E), $(h2(2 ^ 14)));
    o[2] = hmul2(((x << 4) & S) | ((x << 1) & E), $(h2(2 ^ 14)));
    o[3] = hmul2((x & S) | ((x >> 3) & E), $(h2(2 ^ 14)));
%     else
    const u32 E = 0x01c001c0u; // bits 6..8
    o[0] = hmul2(((x << 12) & S) | ((x << 6) & E), $(h2(2 ^ 126)));
    o[1] = hmul2(((x << 8) & S) | ((x << 2) & E), $(h2(2 ^ 126)));
    o[2] = hmul2(((x << 4) & S) | ((x >> 2) & E), $(h2(2 ^ 126)));
    o[3] = hmul2((x & S) | ((x >> 6) & E), $(h2(2 ^ 126)));
%     end
}
%   else
// Integer nibbles: one lop3 per pair ORs the nibble into the mantissa of $(MAGIC) (exact:
// its ulp is 1), for s4 flipping its top bit on the way, which turns two's complement q
// into q + 8; adding nz = −round($(MAGIC) + $(OFF) + z) then leaves q − z exactly when z is
// whole.  The rest r of z is carried apart: by ns in B̂ = (q − z)·s + ns (in-fragment group
// scales, rounded once) or by the f32 fold; col, tensor and plain groups get the exact q.
// Under RAW (zero points, bf16) the fold carries the whole offset and B̂ is the LOP3's
// $(MAGIC) + q.
__device__ __forceinline__ u32 nib2(u32 y)
{
    u32 d; // b ? a ^ c : c with b = the two nibble masks, c = the magic and the flip bits
    asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(d) : "r"(y), "r"(0x000f000fu), "r"($(string.format("0x%08xu", (hbits(MAGIC) * 0x10001) | (OFF == 8 and 0x00080008 or 0)))));
    return d;
}
%     if SB == "group" and not FOLD then
__device__ __forceinline__ void deq4(u32 (&o)[4], u32 x, u32 nz, u32 s, u32 ns)
{
    o[0] = hfma2(hadd2(nib2(x), nz), s, ns);
    o[1] = hfma2(hadd2(nib2(x >> 4), nz), s, ns);
    o[2] = hfma2(hadd2(nib2(x >> 8), nz), s, ns);
    o[3] = hfma2(hadd2(nib2(x >> 12), nz), s, ns);
}
%     elseif RAW then
__device__ __forceinline__ void deq4(u32 (&o)[4], u32 x)
{
    o[0] = nib2(x);
    o[1] = nib2(x >> 4);
    o[2] = nib2(x >> 8);
    o[3] = nib2(x >> 12);
}
%     elseif FOLD and ZEROS then
__device__ __forceinline__ void deq4(u32 (&o)[4], u32 x, u32 nz)
{
    o[0] = hadd2(nib2(x), nz);
    o[1] = hadd2(nib2(x >> 4), nz);
    o[2] = hadd2(nib2(x >> 8), nz);
    o[3] = hadd2(nib2(x >> 12), nz);
}
%     else
__device__ __forceinline__ void deq4(u32 (&o)[4], u32 x)
{
    o[0] = hadd2(nib2(x), $(h2(-(MAGIC + OFF))));
    o[1] = hadd2(nib2(x >> 4), $(h2(-(MAGIC + OFF))));
    o[2] = hadd2(nib2(x >> 8), $(h2(-(MAGIC + OFF))));
    o[3] = hadd2(nib2(x >> 12), $(h2(-(MAGIC + OFF))));
}
%     end
%   end
% else
// s8: thread t's values k = 4t..4t+3 of one chunk are the bytes of x.  o[0] pairs values
// 0 and 2 (b0), o[1] values 1 and 3 (b1).  Flipping the sign bit gives u = q + 128.
__device__ __forceinline__ void deq8(u32 (&o)[2], u32 x)
{
    x ^= 0x80808080u;
%   if A == "f16" then
    // u in the low byte of 1024 (0x6400): exact, as its ulp is 1.
    o[0] = hadd2(__byte_perm(x, 0x64646464u, 0x4240), $(h2(-1152)));
    o[1] = hadd2(__byte_perm(x, 0x64646464u, 0x4341), $(h2(-1152)));
%   else
    // bf16 has 8 significant bits: go through f32, u in the low byte of 2^23.
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        f[i] = __uint_as_float(__byte_perm(x, 0x4b000000u, 0x7440 + i)) - 8388736.f;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(o[0]) : "f"(f[2]), "f"(f[0]));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(o[1]) : "f"(f[3]), "f"(f[1]));
%   end
}
% end

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, $(MINB)) qjit_gemm_kernel(const qjit_params p)
{
% ELEM_A, ELEM_B = "u16", "u8"
% include("gemm_tile_walk.cuh")
    const int g = lane >> 2, t = lane & 3;

    // Loads: each thread copies chunk ld_c of rows ld_r + i*LD_ROWS of each tile; a chunk
    // past K is zero-filled, one that straddles it is copied in part.
    const int a_r = tid / CPRA, a_c = tid % CPRA;
    const int b_r = tid / CPRB, b_c = tid % CPRB;
    const u16 *a_src = A + (long long)(m0 + a_r) * p.lda + a_c * 8;
    const long long ldb_bytes = p.ldb * BITS / 8;
    const u8 *b_src = B + (long long)(n0 + b_r) * ldb_bytes + b_c * 16;
    const long long a_pass = LDA_ROWS * p.lda, b_pass = LDB_ROWS * ldb_bytes;
    const int a_rows = M - m0 - a_r, b_rows = N - n0 - b_r; // rows of A and B left to read
    const bool b_rows_full = n0 + BN <= N;                   // every B row of the tile in N

    // K tiles [kt0, kt1) of this CTA: all of them, or with K split across the gridDim.z CTAs
    // of a cluster (see the top), rank blockIdx.z's share of whole $(KG)-tile units.
    const int KT = (K + BK - 1) / BK;
    const int units = (KT + $(KG) - 1) / $(KG), per = (units + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kt0 = min(KT, (int)blockIdx.z * per * $(KG)), kt1 = min(KT, kt0 + per * $(KG));

    const u32 smem0 = smem_addr(smem);
    auto load_tile = [&](u32 stage, int kt) {
        const int ka = kt * BK + a_c * 8, kb = kt * BK + b_c * KC;
        const int a_bytes = K - ka >= 8 ? 16 : K - ka > 0 ? (K - ka) * 2 : 0;
        const int b_bytes = K - kb >= KC ? 16 : K - kb > 0 ? (K - kb) * BITS / 8 : 0;
        // One running pointer per tile: hoisted per-pass pointers would cost registers.
        // Rows past M (or N) are zero-filled on the first pass through each stage only;
        // nothing writes them again.
        const u16 *pa = a_src + kt * BK;
#pragma unroll
        for (int i = 0; i < (BM + LDA_ROWS - 1) / LDA_ROWS; ++i, pa += a_pass) {
            const int r = a_r + i * LDA_ROWS;
            const bool in = i * LDA_ROWS < a_rows;
            if ((BM % LDA_ROWS == 0 || r < BM) && (in || kt - kt0 < STAGES))
                cp_async16(stage + swz_a(r, a_c), in && a_bytes ? pa : A, in ? a_bytes : 0);
        }
        const u8 *pb = b_src + kt * BK * BITS / 8;
        if (b_rows_full && (kt + 1) * BK <= K) { // the tile wholly inside N and K: no bounds
#pragma unroll
            for (int i = 0; i < (BN + LDB_ROWS - 1) / LDB_ROWS; ++i, pb += b_pass) {
                const int r = b_r + i * LDB_ROWS;
                if (BN % LDB_ROWS == 0 || r < BN)
                    cp_async16_b(stage + A_BYTES + swz_b(r, b_c), pb, 16);
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < (BN + LDB_ROWS - 1) / LDB_ROWS; ++i, pb += b_pass) {
            const int r = b_r + i * LDB_ROWS;
            const bool in = i * LDB_ROWS < b_rows;
            if ((BN % LDB_ROWS == 0 || r < BN) && (in || kt - kt0 < STAGES))
                cp_async16_b(stage + A_BYTES + swz_b(r, b_c), in && b_bytes ? pb : B, in ? b_bytes : 0);
        }
    };

% if SB == "group" or SB == "mx" then
    // Scales travel through registers: fetch() reads tile kt's from global memory into
    // `pend` when its cp.async is issued, put() converts and stores them in that tile's
    // stage a step later, before the barrier that publishes the tile.
%   if SB == "group" then
    // Entry e = gi*BN + row: group kt*BK/GROUP + gi of B row n0 + row ([gi][BN]), stored
%     if FOLD then
    // in planes of [GPT][BN]: the f32 s (exact for any GS), read as a pair for the two
    // columns a thread holds; with zeros also c = −r·s and the pair nz, nz (see deq4),
    // where nz = −round(B + z) and r = B + z − round(B + z) is the rest of z (B = $(MAGIC + OFF));
    // under RAW s and c = −(B + z)·s only.
%     else
    // as deq4's operands: the pair (s, s); with zeros, s | nz << 16 (split again at use,
    // which holds fewer registers) and the pair (ns, ns).
%     end
    const int kgroups = K / $(GROUP);
    u32 pend_s[SC_PER], pend_z[SC_PER];
    auto fetch = [&](int kt) {
#pragma unroll
        for (int i = 0; i < SC_PER; ++i) {
            const int e = tid + i * THREADS, row = e % BN, grp = kt * BK / $(GROUP) + e / BN;
            pend_s[i] = pend_z[i] = 0;
            if ((SC_N % THREADS == 0 || e < SC_N) && n0 + row < N && grp < kgroups) {
                const long long at = (long long)(n0 + row) * kgroups + grp;
%     local gst = GS == "f32" and "u32" or "u16"
                pend_s[i] = static_cast<const $(gst) *>(p.scale_b)[at];
%     if ZEROS then
                pend_z[i] = static_cast<const $(gst) *>(p.zeros_b)[at];
%     end
            }
        }
    };
    auto put = [&](u32 stage) {
#pragma unroll
        for (int i = 0; i < SC_PER; ++i) {
            const int e = tid + i * THREADS;
            if (SC_N % THREADS == 0 || e < SC_N) {
                const float s = gs_f32(pend_s[i]);
%     if FOLD then
                float *plane = reinterpret_cast<float *>(smem + stage - smem0 + SC_OFF);
                plane[e] = s;
%       if RAW then
                plane[SC_N + e] = -($(MAGIC + OFF).f + gs_f32(pend_z[i])) * s;
%       elseif ZEROS then
                const float zb = $(MAGIC + OFF).f + gs_f32(pend_z[i]);
                const u32 zh = to_h(zb);
                plane[SC_N + e] = -(zb - from_h(zh)) * s;
                reinterpret_cast<u32 *>(plane)[2 * SC_N + e] = (zh ^ 0x8000u) * 0x10001u;
%       end
%     else
                const u32 sh = to_h(s);
%     end
%     if ZEROS and not FOLD then
                // nz = −round(B + z) is exact in A's type; ns = −(B + z − round(B + z))·s
                const float zb = $(MAGIC + OFF).f + gs_f32(pend_z[i]);
                const u32 zh = to_h(zb);
                const u32 ns = to_h(-(zb - from_h(zh)) * s);
                *reinterpret_cast<uint2 *>(smem + stage - smem0 + SC_OFF + e * 8) =
                    make_uint2(sh | (zh ^ 0x8000u) << 16, ns * 0x10001u);
%     elseif not FOLD then
                *reinterpret_cast<u32 *>(smem + stage - smem0 + SC_OFF + e * 4) = sh * 0x10001u;
%     end
            }
        }
    };
%   else
    // Entry e = blk*BN + row: e8m0 of 32-k block kt*BK/32 + blk of B row n0 + row, stored as
    // 2^(e−127) in bf16, which holds every e8m0 value exactly in 16 bits, [blk][BN] so that
    // a thread's two columns are one word.
    const int kblocks = K / 32;
    u32 pend_s[SC_PER];
    auto fetch = [&](int kt) {
#pragma unroll
        for (int i = 0; i < SC_PER; ++i) {
            const int e = tid + i * THREADS, row = e % BN, blk = kt * BK / 32 + e / BN;
            pend_s[i] = 127;
            if ((SC_N % THREADS == 0 || e < SC_N) && n0 + row < N && blk < kblocks)
                pend_s[i] = static_cast<const u8 *>(p.scale_b)[(long long)(n0 + row) * kblocks + blk];
        }
    };
    auto put = [&](u32 stage) {
#pragma unroll
        for (int i = 0; i < SC_PER; ++i) {
            const int e = tid + i * THREADS;
            if (SC_N % THREADS == 0 || e < SC_N) {
                const u32 x = pend_s[i];
                // 2^-127 is the bf16 subnormal 0x0040; 0xff is NaN
                const u32 bits = x == 0 ? 0x0040u : x == 255 ? 0x7fc0u : x << 7;
                *reinterpret_cast<u16 *>(smem + stage - smem0 + SC_OFF + e * 2) = (u16)bits;
            }
        }
    };
%   end
% end

    // Fragments.  A: lane (g, t) reads rows g and g+8 of each m16 tile at the k range of
    // its B values (16 bytes for 4-bit B, 8 for s8) and permutes them to B's pairing.  B:
    // ldmatrix.x4 over one chunk and four n8 tiles: lanes 8i..8i+7 address the rows of
    // tile i.  Step s moves A by s*64 (or 32) bytes and B by one chunk, which under the
    // swizzles is an XOR on the lane's offset.
% if BITS == 4 then
    const u32 a_lane = swz_a(warp_m * WTM + g, t);
% else
    const u32 a_lane = swz_a(warp_m * WTM + g, t >> 1) + 8 * (t & 1);
% end
    const u32 b_lane = A_BYTES + swz_b(warp_n * WTN + (lane & 7) + ((lane >> 3) << 3), 0);
    // A fragments in B's k order, [mt][k16 step][a0..a3]: 4-bit pairs (k0,k4), (k1,k5) in
    // step 0 and (k2,k6), (k3,k7) in step 1 (k relative to 8t); s8 pairs (k0,k2), (k1,k3).
% local KS16 = BITS == 4 and 2 or 1
    typedef u32 afrag[MT][$(KS16)][4];
    auto load_a = [&](afrag &af, u32 stage, int s) {
        const unsigned char *sa = smem + (stage - smem0) + (a_lane ^ (s << $(BITS == 4 and 6 or 5)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
% if BITS == 4 then
                const uint4 v = *reinterpret_cast<const uint4 *>(sa + (mt * 16 + h * 8) * RA);
                af[mt][0][h] = __byte_perm(v.x, v.z, 0x5410);
                af[mt][0][2 + h] = __byte_perm(v.x, v.z, 0x7632);
                af[mt][1][h] = __byte_perm(v.y, v.w, 0x5410);
                af[mt][1][2 + h] = __byte_perm(v.y, v.w, 0x7632);
% else
                const uint2 v = *reinterpret_cast<const uint2 *>(sa + (mt * 16 + h * 8) * RA);
                af[mt][0][h] = __byte_perm(v.x, v.y, 0x5410);
                af[mt][0][2 + h] = __byte_perm(v.x, v.y, 0x7632);
% end
            }
    };
    auto load_b = [&](u32 (&bq)[NT], u32 stage, int s) {
#pragma unroll
        for (int j = 0; j < NT / 4; ++j) {
            u32 r[4];
            ldsm_x4(r, stage + (b_lane ^ (s << 4)) + j * 32 * RB);
            bq[4 * j] = r[0];
            bq[4 * j + 1] = r[1];
            bq[4 * j + 2] = r[2];
            bq[4 * j + 3] = r[3];
        }
        if (NT % 4 != 0) {
            u32 r[2];
            ldsm_x2(r, stage + (b_lane ^ (s << 4)) + (NT / 4) * 32 * RB);
            bq[NT - 2] = r[0];
            bq[NT - 1] = r[1];
        }
    };

    float acc[MT][NT][4];
    qc::zero(acc);

    // Pipeline: tile kt sits in stage kt % STAGES.  Before the last step of a tile the next
    // tile is waited for, and one barrier both publishes it and frees the stage read during
    // the previous tile, which the first step of each tile then refills.
% if SB == "group" or SB == "mx" then
    // Scales of the prologue tiles: stored at once, except the last one's when STAGES > 2,
    // which the first step puts (the general case).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        fetch(kt0 + s);
        if (STAGES == 2 || s < STAGES - 2)
            put(smem0 + s * STAGE_BYTES);
    }
% end
#pragma unroll 1 // the prologue: rolled, it compiles faster and runs once
    for (int s = 0; s < STAGES - 1; ++s) {
        if (kt0 + s < kt1)
            load_tile(smem0 + s * STAGE_BYTES, kt0 + s);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    const u32 smem_end = smem0 + STAGES * STAGE_BYTES;
    u32 rd = smem0, wr = smem0 + (STAGES - 1) * STAGE_BYTES;
% if SB == "group" or SB == "mx" then
    u32 wr_prev = smem0 + (STAGES - 2) * STAGE_BYTES; // stage of the tile fetch() last read
% end
    int kt_next = kt0 + STAGES - 1;
    // A step's B fragments are read during the step before, across the barrier that ends
    // a tile, so their latency hides under that step's mma; A's too when the warp tile has
    // few rows (with more, their registers go to accumulators and A is read in its step).
    // Buffers alternate with the step's parity, so a tile of one step reads its own.
    afrag af[$(ABUF)];
    u32 bq[$(BBUF)][NT];
% if ABUF == 2 then
    load_a(af[0], rd, 0);
% end
% if BBUF == 2 then
    load_b(bq[0], rd, 0);
% end
% if FOLD then
    // Each group's sum apart, folded into acc times s (columns 2t, 2t+1) at the group's end.
    float part[MT][NT][4];
    qc::zero(part);
    float2 fs[NT];
%   if ZEROS then
    // With zero points the group's part holds Σ A·(q − z + r), under RAW Σ A·(B + q): rs, the
    // group's sums of A (an mma against ones), carries the −r·s or −(B + z)·s correction,
    // c = fc.
    float rs[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
            rs[mt][j] = 0.f;
    float2 fc[NT];
%   end
%   if ZEROS and not RAW then
    u32 nzr[NT]; // nz of the B row this lane dequantizes, for the current group
    auto read_nz = [&](u32 stage, int nt, int s) {
        const int gi = GPT > 1 ? s * KC / $(GROUP) : 0;
        nzr[nt] = reinterpret_cast<const u32 *>(smem + (stage - smem0) + SC_OFF)
            [2 * SC_N + gi * BN + warp_n * WTN + nt * 8 + g];
    };
%   end
% end
% if SB == "group" then
%   if not FOLD then
    u32 sc[NT][$(ZEROS and 2 or 1)]; // s, or s|nz << 16 and ns (see put)
%   end
    auto read_sc = [&](u32 stage, int nt, int s) {
        const int gi = GPT > 1 ? s * KC / $(GROUP) : 0;
%   if FOLD then
        const float *plane = reinterpret_cast<const float *>(smem + (stage - smem0) + SC_OFF);
        fs[nt] = *reinterpret_cast<const float2 *>(plane + gi * BN + warp_n * WTN + nt * 8 + 2 * t);
%     if ZEROS then
        fc[nt] = *reinterpret_cast<const float2 *>(plane + SC_N + gi * BN + warp_n * WTN + nt * 8 + 2 * t);
%     end
%   else
        const unsigned char *e = smem + (stage - smem0) + SC_OFF + (gi * BN + warp_n * WTN + nt * 8 + g) * ES;
%   if ZEROS then
        const uint2 v = *reinterpret_cast<const uint2 *>(e);
        sc[nt][0] = v.x;
        sc[nt][1] = v.y;
%   else
        sc[nt][0] = *reinterpret_cast<const u32 *>(e);
%   end
%   end
    };
% elseif SB == "mx" then
    u32 mxs[NT]; // bf16 2^(e−127) of the step's 32-k block for columns 2t (low) and 2t+1
    auto read_sc = [&](u32 stage, int nt, int s) {
        mxs[nt] = *reinterpret_cast<const u32 *>(
            smem + (stage - smem0) + SC_OFF + (s * BN + warp_n * WTN + nt * 8 + 2 * t) * 2);
    };
% end
    // End of a tile: wait for the next one, publish it and free the stage just read.
    auto next_tile = [&]() {
% if SB == "group" or SB == "mx" then
        if (STAGES == 2)
            put(wr_prev);
% end
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        rd = rd + STAGE_BYTES == smem_end ? smem0 : rd + STAGE_BYTES;
    };

    for (int kt = kt0; kt < kt1; ++kt) {
#pragma unroll
        for (int s = 0; s < KSTEPS; ++s) {
            // What this step reads of its own stage, before the barrier can free it.
% if ABUF == 1 then
            load_a(af[0], rd, s);
% end
% if BBUF == 1 then
            load_b(bq[0], rd, s);
% end
% if FOLD then
%   local GEND = GROUP <= BK and "(s + 1) * KC % " .. GROUP .. " == 0" or "s == KSTEPS - 1 && (kt + 1) % " .. (GROUP // BK) .. " == 0"
            const bool gend = $(GEND); // this step ends a group
            if (gend)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    read_sc(rd, nt, s);
%   if ZEROS and not RAW then
            if (s * KC % $(GROUP) == 0) // a new group (or a new tile of one)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    read_nz(rd, nt, s);
%   end
% elseif SB == "group" then
            if (s * KC % $(GROUP) == 0) // a new group
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    read_sc(rd, nt, s);
% elseif SB == "mx" then
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                read_sc(rd, nt, s);
% end
            if (s == 0) {
% if SB == "group" or SB == "mx" then
                if (STAGES > 2)
                    put(wr_prev);
% end
                if (kt_next < kt1) {
                    load_tile(wr, kt_next);
% if SB == "group" or SB == "mx" then
                    fetch(kt_next);
% end
                }
                cp_async_commit(); // possibly empty: keeps the group count in step
                ++kt_next;
% if SB == "group" or SB == "mx" then
                wr_prev = wr;
% end
                wr = wr + STAGE_BYTES == smem_end ? smem0 : wr + STAGE_BYTES;
            }
            if (s == KSTEPS - 1)
                next_tile();
% if ABUF == 2 then
            load_a(af[(s + 1) & 1], rd, (s + 1) % KSTEPS);
% end
% if BBUF == 2 then
            load_b(bq[(s + 1) & 1], rd, (s + 1) % KSTEPS);
% end
            const afrag &a = af[$(ABUF == 2 and "s & 1" or "0")];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
% if BITS == 8 then
                u32 b[2];
                deq8(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    mma(acc[mt][nt], a[mt][0], b[0], b[1]);
% else
                u32 b[4];
%   if B == "e2m1" then
                deq4(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt]);
%   elseif SB == "group" and ZEROS and not FOLD then
                deq4(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt], __byte_perm(sc[nt][0], 0, 0x3232),
                     __byte_perm(sc[nt][0], 0, 0x1010), sc[nt][1]);
%   elseif FOLD and ZEROS and not RAW then
                deq4(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt], nzr[nt]);
%   elseif SB == "group" and not FOLD then
                deq4(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt], $(h2(-(MAGIC + OFF))), sc[nt][0], 0x80008000u);
%   else
                deq4(b, bq[$(BBUF == 2 and "s & 1" or "0")][nt]);
%   end
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
%   if SB == "mx" then
                    float part[4];
                    mma0(part, a[mt][0], b[0], b[1]);
                    mma(part, a[mt][1], b[2], b[3]);
                    const float sx = __uint_as_float(mxs[nt] << 16);
                    const float sy = __uint_as_float(mxs[nt] & 0xffff0000u);
                    acc[mt][nt][0] = fmaf(part[0], sx, acc[mt][nt][0]);
                    acc[mt][nt][1] = fmaf(part[1], sy, acc[mt][nt][1]);
                    acc[mt][nt][2] = fmaf(part[2], sx, acc[mt][nt][2]);
                    acc[mt][nt][3] = fmaf(part[3], sy, acc[mt][nt][3]);
%   elseif FOLD then
                    mma(part[mt][nt], a[mt][0], b[0], b[1]);
                    mma(part[mt][nt], a[mt][1], b[2], b[3]);
%   else
                    mma(acc[mt][nt], a[mt][0], b[0], b[1]);
                    mma(acc[mt][nt], a[mt][1], b[2], b[3]);
%   end
                }
% end
            }
% if FOLD and ZEROS then
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma(rs[mt], a[mt][0], $(h2(1)), $(h2(1)));
                mma(rs[mt], a[mt][1], $(h2(1)), $(h2(1)));
            }
% end
% if FOLD then
            if (gend) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            float x = acc[mt][nt][j];
%   if ZEROS then
                            x = fmaf(rs[mt][j], j & 1 ? fc[nt].y : fc[nt].x, x);
%   end
                            acc[mt][nt][j] = fmaf(part[mt][nt][j], j & 1 ? fs[nt].y : fs[nt].x, x);
                            part[mt][nt][j] = 0.f;
                        }
%   if ZEROS then
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        rs[mt][j] = 0.f;
%   end
                }
            }
% end
        }
    }
% if CLUSTER then

    // K split across the cluster (qc::cluster_sum): rank 0 adds the other ranks' f32 tiles,
    // passed through their shared memory (the ring is free), in rank order.
    if (!qc::cluster_sum<MT * NT * 4, THREADS>(&acc[0][0][0], smem0, tid))
        return;
% end

    // Epilogue. acc[mt][nt] holds rows g and g+8, columns 2t and 2t+1; D = acc·s[n] + bias
    // in that order, each rounded (the f32 epilogue of DESIGN.md §2), finished in place with
    // scales and bias past N reading as 0, then staged out through shared memory
    // (gemm_common.cuh), which writes nothing past M or N.
    finish_tile(acc, acc, as_is(), m0 + warp_m * WTM + g, n0 + warp_n * WTN + 2 * t, M, N, p);
    qc::main_loop_done(); // the epilogue reuses the ring
    stage_out<BM, BN, WM, WN, $(NP)>(acc, smem0, static_cast<out_t *>(p.d), p.ldd, m0, n0, M, N, tid);
}
