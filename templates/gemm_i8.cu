// gemm_i8.cu — integer tensor-core GEMM for s8×s8 (W8A8) and s8×s4 (W4A8), sm_80 … sm_90a.
// D[m,n] = cast_out(Â·B̂ + bias[n]) with mma.sync m16n8k32 s8 and exact int32 sums, fed from
// XOR-swizzled shared memory that a STAGES-deep cp.async pipeline fills. s4 weights stay
// packed in memory and in shared memory; each lane widens its nibbles to s8 in registers
// (unpack_x16) and permutes its A bytes to the same k order.
//
// Scales: sa none|tensor|row, sb none|tensor|col: one int32 sum over all of K, then
// t = (float)acc; t = t*sa; t = t*sb; t = t+bias, each step rounded alone (the f32 epilogue
// of tests/reference.h, bit for bit). sb=group:g: an int32 sum per group of g along K is
// added into an f32 total as (float)sum * s[n][k/g]; then t = total*sa + bias.
//
// Parameters: BK 64 or 128 (bytes of A per tile row); warp tiles of 16x16 multiples, up to
// 64x64 (64x32 with groups, which keep an int32 and an f32 accumulator each); STAGES 2..6.
// On an H100 at 8192^3: s8×s8 best at 128x128x64 warps 2x2 stages 4; s4 col at 128x128x128
// (or x64) warps 2x2 stages 4; s4 group at 128x128x128 warps 2x4 stages 4. For M <= 16,
// tile 16x128x128 warps 1x4 stages 4 streams the weights at about 2.4-2.7 TB/s.
// Launch needs: 16-byte cp.async along K: K and lda/ldb multiples of 16 values for s8 B,
// 32 values (16 bytes) for s4 B.
% -- qjit family: name=mma_i8 id=4 order=60
% include("gemm_stage_plan.cuh")
% family {
%   floor = 80,
%   measured = true,
%   serves = function() return A == "s8" and one_of(B, "s8", "s4") end,
%   -- From H100 timings.  W8A8 (s8 x s8): 910 TOPS at 8192^3 with 128x128x64 s4, at every M.
%   -- W4A8 (s8 x s4) at M <= 64 (or M unknown): 16x128x128 w1x4 s4 streams the packed
%   -- weights at ~2.5 TB/s (47 us at 1x28672x8192); above, tiles of more rows read each
%   -- weight tile fewer times: 128x128x64 w2x2 s3 with col scales, 64x64x64 w2x2 s3 with
%   -- group scales (whose warp tiles hold at most 64x32), both checked on the H100 by
%   -- test_gpu_quant (predicted faster from M = 65 on; docs/NOTES.md).
%   default = function(m)
%     -- s8 x s8 decode: 16x64x128, 6 stages: twice the CTAs of 16x128 and a deep ring; qjit-tune
%     -- on the H100 found it 2.1-2.6x the 128x128x64 tile at M = 1-64 on 4096- and 6144-wide
%     -- layers (docs/BENCH.md)
%     if B == "s8" and m ~= 0 and m <= 64 and BM == 0 then return choose(16, 64, 128, 1, 4, 6) end
%     if B == "s8" then return choose(128, 128, 64, 2, 2, 4) end
%     if m == 0 or m <= 64 then return choose(16, 128, 128, 1, 4, 4) end
%     if SB == "group" then return choose(64, 64, 64, 2, 2, 3) end
%     return choose(128, 128, 64, 2, 2, 3)
%   end,
%   space = quant_mma_space, -- gemm_stage_plan.cuh
%   plan = function()
%     if A ~= "s8" or (B ~= "s8" and B ~= "s4") then unsupported("A must be s8 and B s8 or s4") end
%     if OUT ~= "f16" and OUT ~= "bf16" and OUT ~= "f32" then unsupported("OUT must be f16, bf16 or f32") end
%     if SA ~= "none" and SA ~= "tensor" and SA ~= "row" then unsupported("sa must be none, tensor or row (sa=" .. SA .. ")") end
%     if SB ~= "none" and SB ~= "tensor" and SB ~= "col" and SB ~= "group" then unsupported("sb must be none, tensor, col or group:g (sb=" .. SB .. ")") end
%     if ZEROS then unsupported("zero points are for u4 weights") end
%     if ARCH < 80 then unsupported("needs sm_80 or newer") end
%     -- split=S (2..8, sm_90a): K split across a cluster of up to S CTAs per output tile when the
%     -- tiles alone leave SMs idle (chosen at launch); each CTA sums whole groups, and rank 0
%     -- adds the others' sums in rank order (exact int32 sums, or f32 totals with groups)
%     if SPLIT_K ~= 1 and ARCH < 90 then unsupported("kernel mma_i8 splits K across a cluster: split=" .. SPLIT_K .. " needs sm_90a") end
%     if SPLIT_K > 8 then unsupported("kernel mma_i8 splits K across at most 8 CTAs of a cluster (split=" .. SPLIT_K .. ")") end
%     if BK ~= 64 and BK ~= 128 then unsupported("BK must be 64 or 128 (tile=" .. BM .. "x" .. BN .. "x" .. BK .. ")") end
%     if STAGES < 2 or STAGES > 6 then unsupported("STAGES must be 2..6") end
%     if BM % (16 * WM) ~= 0 or BN % (16 * WN) ~= 0 then unsupported("warps=" .. WM .. "x" .. WN .. " do not split tile " .. BM .. "x" .. BN .. " into multiples of 16x16") end
%     local S4 = B == "s4"
%     local GROUPED = SB == "group"
%     local WTM, WTN = BM // WM, BN // WN
%     local ACC_MAX = GROUPED and 64 * 32 or 64 * 64
%     if WTM * WTN > ACC_MAX then
%       unsupported(string.format("warps=%dx%d split tile %dx%d into warp tiles of %dx%d, which need %d accumulator registers per thread%s; at most 128 fit (%s)", WM, WN, BM, BN, WTM, WTN, WTM * WTN // 32 * (GROUPED and 2 or 1), GROUPED and " (an int32 group sum and an f32 total each)" or "", GROUPED and "warp tiles of 64x32 at most, e.g. warps=2x4 for 128x128" or "warp tiles of 64x64 at most"))
%     end
%     local B_ROW = S4 and BK // 2 or BK
%     local NP, SMEM = ring_staging("gemm_i8", STAGES * (BM * BK + BN * B_ROW), WTN)
%     local KMUL = S4 and 32 or 16
%     local DISPATCH = S4 and not GROUPED -- x16 unpack for K < 2^17, exact beyond (see unpack_x16)
%     local SPLIT = SPLIT_K > 1
%     if SPLIT then SMEM = math.max(SMEM, BM * BN * 4) end -- a rank's sums, for rank 0 to add
%     -- K tiles a rank's share is a multiple of: whole groups
%     local GT = GROUPED and GROUP > BK and GROUP // BK or 1
%     return {threads = 32 * WM * WN, smem = SMEM, k_multiple = KMUL, ld_multiple = KMUL, align = 16,
%             cluster_k = SPLIT and SPLIT_K or 1, k_chunk = SPLIT and GT * BK or 0, SPLIT = SPLIT, GT = GT,
%             S4 = S4, GROUPED = GROUPED, WTM = WTM, WTN = WTN, B_ROW = B_ROW, NP = NP, SMEM = SMEM,
%             KMUL = KMUL, DISPATCH = DISPATCH}
%   end,
% }
% include("gemm_common.cuh")

namespace {

using qc::u8;
using qc::u16;
using qc::u32;
using qc::u64;
using qc::out_t;

% include("gemm_mma_tile.cuh")
constexpr int KSTEPS = BK / 32;
constexpr int A_ROW = BK, B_ROW = $(B_ROW); // bytes per shared-memory row
constexpr int A_CPR = A_ROW / 16, B_CPR = B_ROW / 16; // 16-byte chunks per row
constexpr int A_BYTES = BM * A_ROW, STAGE_BYTES = A_BYTES + BN * B_ROW;

// Chunk c of row r lives at chunk c ^ f(r), so that the 8 rows one ldmatrix phase reads sit
// in 8 different 16-byte bank groups. Rows shorter than 128 bytes share a line, so f takes
// higher row bits: the shift is log2(8 / chunks per row). f has a period of 8 rows.
% local function shift_for(cpr) return cpr == 8 and 0 or cpr == 4 and 1 or 2 end
constexpr int A_SHIFT = $(shift_for(BK // 16)), B_SHIFT = $(shift_for(B_ROW // 16));
__device__ __forceinline__ u32 swz_b(int row, int chunk)
{
    return row * B_ROW + ((chunk ^ ((row >> B_SHIFT) & (B_CPR - 1))) << 4);
}
% if S4 then
// A is read with 8-byte loads, two chunks of one row per quarter warp: f is even (it flips
// chunk pairs), and 4 consecutive rows fill the 8 bank groups.
__device__ __forceinline__ u32 swz_a(int row, int chunk)
{
    return row * A_ROW + ((chunk ^ (((row >> A_SHIFT) & (A_CPR / 2 - 1)) << 1)) << 4);
}
% else
__device__ __forceinline__ u32 swz_a(int row, int chunk)
{
    return row * A_ROW + ((chunk ^ ((row >> A_SHIFT) & (A_CPR - 1))) << 4);
}
% end

__device__ __forceinline__ void mma(int (&c)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

% if S4 then
__device__ __forceinline__ u32 prmt(u32 x, u32 y, u32 sel)
{
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(y), "r"(sel));
    return r;
}
__device__ __forceinline__ void lds64(u32 &x, u32 &y, u32 addr)
{
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(x), "=r"(y) : "r"(addr));
}

// Four packed bytes w hold nibbles k0..k7 (k0 in bits 0-3): lo gets k0,k2,k4,k6 and hi
// k1,k3,k5,k7, a byte each; the A fragment is permuted to match (prmt 0x6420 / 0x7531).
//
// Times 16, the fast way: each nibble goes to the top of its byte, an exact s8 of 16x, and
// the int32 sum is 16x the true one. That is exact while |sum| < 2^27: always inside a
// group (256*128*8 = 2^18), and over all of K while K < 2^17 (|a*x| <= 2^10).
__device__ __forceinline__ void unpack_x16(u32 w, u32 &lo, u32 &hi)
{
    lo = (w << 4) & 0xF0F0F0F0u;
    hi = w & 0xF0F0F0F0u;
}
%   if DISPATCH then
// Exact, for longer K: ((n ^ 8) + 0x78) ^ 0x80 sign-extends a nibble n per byte with no carry
// between bytes.
__device__ __forceinline__ void unpack_exact(u32 w, u32 &lo, u32 &hi)
{
    lo = (((w & 0x0F0F0F0Fu) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
    hi = ((((w >> 4) & 0x0F0F0F0Fu) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
}
%   end
% end
template <bool V> struct flag { static constexpr bool value = V; };

% if GROUPED then
// An int32 x in [-2^22, 2^22] added to the bits of 1.5*2^23 reads as the float 1.5*2^23 + x,
// exactly: the group sums start from these bits and convert with one FADD. A group sum is
// within that range: at most 256*128*8*16 (s4 times 16) or 256*128*128 (s8) = 2^22.
constexpr int MAGIC_BITS = 0x4B400000;
constexpr float MAGIC = 12582912.0f;

using qc::gs_t;
using qc::gs_f32;
% end

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
% ELEM_A, ELEM_B = "u8", "u8"
% include("gemm_tile_walk.cuh")
% if SPLIT then
    // K tiles [kt0, kt1) of this CTA: with K split across the gridDim.z CTAs of a cluster,
    // rank blockIdx.z's share, a whole number of groups (GT K tiles each; see the plan).
    const int KT = (K + BK - 1) / BK;
    const int per = ((KT + (int)gridDim.z - 1) / (int)gridDim.z + $(GT) - 1) / $(GT) * $(GT);
    const int kt0 = min(KT, (int)blockIdx.z * per), kt1 = min(KT, kt0 + per);
% end

    // Loads: thread t copies chunk t % CPR of rows t / CPR + i * (THREADS / CPR). A chunk
    // is 16 bytes: 16 values of A or s8 B, 32 of s4 B; K is a multiple of that.
    constexpr int A_LD_ROWS = THREADS / A_CPR, B_LD_ROWS = THREADS / B_CPR;
    const int a_row = tid / A_CPR, a_chunk = tid % A_CPR;
    const int b_row = tid / B_CPR, b_chunk = tid % B_CPR;
    const long long lda = p.lda, ldb_bytes = p.ldb$(S4 and " / 2" or "");
    const u8 *a_src = A + (long long)(m0 + a_row) * lda + a_chunk * 16;
    const u8 *b_src = B + (long long)(n0 + b_row) * ldb_bytes + b_chunk * 16;
    const int k_bytes_b = K$(S4 and " / 2" or "");

    const u32 smem0 = qc::smem_addr(smem);
    auto load_tile = [&](u32 stage, int kt) {
        const bool a_k_ok = kt * BK + a_chunk * 16 < K;
        const bool b_k_ok = kt * B_ROW + b_chunk * 16 < k_bytes_b;
#pragma unroll
        for (int i = 0; i < (BM + A_LD_ROWS - 1) / A_LD_ROWS; ++i) {
            const int row = a_row + i * A_LD_ROWS;
            if (BM % A_LD_ROWS == 0 || row < BM) {
                const bool ok = a_k_ok && m0 + row < M;
                qc::cp_async16(stage + swz_a(row, a_chunk),
                               ok ? a_src + i * A_LD_ROWS * lda + kt * A_ROW : (const u8 *)A,
                               ok ? 16 : 0);
            }
        }
#pragma unroll
        for (int i = 0; i < (BN + B_LD_ROWS - 1) / B_LD_ROWS; ++i) {
            const int row = b_row + i * B_LD_ROWS;
            if (BN % B_LD_ROWS == 0 || row < BN) {
                const bool ok = b_k_ok && n0 + row < N;
                qc::cp_async16(stage + A_BYTES + swz_b(row, b_chunk),
                               ok ? b_src + i * B_LD_ROWS * ldb_bytes + kt * B_ROW : (const u8 *)B,
                               ok ? 16 : 0);
            }
        }
    };

    // Fragments of m16n8k32 (s8): a0 = row g, k bytes 4t..4t+3; a1 = row g+8; a2, a3 the
    // same at k+16; b0 = column g, k 4t..4t+3; b1 at k+16 (g = lane/4, t = lane%4). Over
    // 8-bit data these are the f16 m16n8k16 fragments, so ldmatrix .b16 yields them.
% if S4 then
    // s4 B: ldmatrix of packed rows gives lane (g, t) the 8 nibbles k = 8t..8t+7 of column
    // g (one 16-byte chunk per k32 step), unpacked to lo = k 8t+{0,2,4,6} as b0 and hi =
    // k 8t+{1,3,5,7} as b1. Any order of k inside one mma is the same sum, so A follows
    // suit: lane (g, t) reads the 8 bytes k = 8t..8t+7 of rows g and g+8 and permutes them
    // into a0/a1 (even k) and a2/a3 (odd k). Lanes 0-31 address columns 0-31 (4 n8 tiles).
    const u32 a_lane = swz_a(warp_m * WTM + (lane >> 2), (lane & 3) >> 1) + (lane & 1) * 8;
    const u32 b_lane = A_BYTES + swz_b(warp_n * WTN + lane, 0);
    typedef u32 bfrag_t[NT]; // packed words
    auto load_frags = [&](u32 (&af)[MT][4], bfrag_t &bf, u32 stage, int ks) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                u32 x, y;
                lds64(x, y, stage + (a_lane ^ (ks << 5)) + (mt * 16 + h * 8) * A_ROW);
                af[mt][h] = prmt(x, y, 0x6420);
                af[mt][2 + h] = prmt(x, y, 0x7531);
            }
#pragma unroll
        for (int q = 0; q < NT / 4; ++q) {
            u32 r[4];
            qc::ldsm_x4(r, stage + (b_lane ^ (ks << 4)) + q * 32 * B_ROW);
#pragma unroll
            for (int i = 0; i < 4; ++i)
                bf[4 * q + i] = r[i];
        }
        if (NT % 4 == 2) {
            u32 r[2];
            qc::ldsm_x2(r, stage + (b_lane ^ (ks << 4)) + (NT / 4) * 32 * B_ROW);
            bf[NT - 2] = r[0];
            bf[NT - 1] = r[1];
        }
    };
    // x16: flag<true> for unpack_x16 (the sums come out 16x), flag<false> for unpack_exact.
    auto mma_step = [&](auto x16, int (&c)[MT][NT][4], const u32 (&af)[MT][4], const bfrag_t &bf) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            u32 lo, hi;
%   if DISPATCH then
            if constexpr (decltype(x16)::value)
                unpack_x16(bf[nt], lo, hi);
            else
                unpack_exact(bf[nt], lo, hi);
%   else
            unpack_x16(bf[nt], lo, hi);
%   end
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                mma(c[mt][nt], af[mt], lo, hi);
        }
    };
% else
    // A: lanes 0-15 address rows 0-15 at chunk 0, lanes 16-31 the same rows at chunk 1.
    // B (N×K, so plain ldmatrix yields the "col" operand): lanes 0-7 rows 0-7 chunk 0,
    // 8-15 rows 0-7 chunk 1, 16-23 rows 8-15 chunk 0, 24-31 rows 8-15 chunk 1: b0, b1 of
    // two n8 tiles. Step ks moves 2 chunks: an XOR of ks << 5 under the swizzle.
    const u32 a_lane = swz_a(warp_m * WTM + (lane & 15), lane >> 4);
    const u32 b_lane = A_BYTES + swz_b(warp_n * WTN + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    typedef u32 bfrag_t[NT][2];
    auto load_frags = [&](u32 (&af)[MT][4], bfrag_t &bf, u32 stage, int ks) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            qc::ldsm_x4(af[mt], stage + (a_lane ^ (ks << 5)) + mt * 16 * A_ROW);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            u32 r[4];
            qc::ldsm_x4(r, stage + (b_lane ^ (ks << 5)) + np * 16 * B_ROW);
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
        }
    };
    auto mma_step = [&](auto, int (&c)[MT][NT][4], const u32 (&af)[MT][4], const bfrag_t &bf) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                mma(c[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    };
% end

    // acc[mt][nt] holds rows g and g+8 (g = lane/4), columns 2*(lane%4) and +1.
    const int row0 = m0 + warp_m * WTM + (lane >> 2);
    const int col0 = n0 + warp_n * WTN + (lane & 3) * 2;
% if GROUPED then
    int acc[MT][NT][4];   // int32 sum of the current group, offset by MAGIC_BITS
    float tot[MT][NT][4]; // f32 sum of the finished groups
    qc::fill(acc, MAGIC_BITS);
    qc::zero(tot);
    // Group scales of this thread's 2*NT columns, s[n][k/g]: sc for the group being summed,
    // sc_next for the one after, loaded a group ahead. Columns past N and groups past K
    // read as 0 (their sums are 0 too).
    const int KG = K / $(GROUP);
    const gs_t *s_col = static_cast<const gs_t *>(p.scale_b) + (long long)col0 * KG;
    float sc[NT][2], sc_next[NT][2];
    auto load_scales = [&](float (&s)[NT][2], int kg) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                s[nt][j] = col0 + nt * 8 + j < N && kg < KG ? gs_f32(s_col[(nt * 8 + j) * KG + kg]) : 0.f;
    };
% if SPLIT then
    load_scales(sc, kt0 * BK / $(GROUP));
    load_scales(sc_next, kt0 * BK / $(GROUP) + 1);
% else
    load_scales(sc, 0);
    load_scales(sc_next, 1);
% end
    // Ends group kg: tot += (float)acc * s, then the scales move up one group.
    auto flush = [&](int kg) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float x = __int_as_float(acc[mt][nt][j]) - MAGIC;
                    tot[mt][nt][j] = __fmaf_rn(x, sc[nt][j & 1], tot[mt][nt][j]);
                    acc[mt][nt][j] = MAGIC_BITS;
                }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                sc[nt][j] = sc_next[nt][j];
        load_scales(sc_next, kg + 2);
    };
% else
    int acc[MT][NT][4];
    qc::zero(acc);
% end

    // The k loop, once per unpack of s4 (see unpack_x16).
    auto k_loop = [&](auto x16) {
        // Pipeline: tile kt sits in stage kt % STAGES. Before the last k32 step of a tile the
        // next tile is waited for, and one barrier both publishes it and frees the stage read
        // during the previous tile, which the first k32 step of each tile then refills.
% if SPLIT then
#pragma unroll 1 // the prologue: rolled, it compiles faster and runs once
        for (int s = 0; s < STAGES - 1; ++s) {
            if (kt0 + s < kt1)
                load_tile(smem0 + s * STAGE_BYTES, kt0 + s);
            qc::cp_async_commit();
        }
% else
        const int KT = (K + BK - 1) / BK, kt0 = 0, kt1 = KT;
#pragma unroll 1 // the prologue: rolled, it compiles faster and runs once
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < KT)
                load_tile(smem0 + s * STAGE_BYTES, s);
            qc::cp_async_commit();
        }
% end
        qc::cp_async_wait<STAGES - 2>();
        __syncthreads();

        const u32 smem_end = smem0 + STAGES * STAGE_BYTES;
        u32 rd = smem0, wr = smem0 + (STAGES - 1) * STAGE_BYTES;
        int kt_next = $(SPLIT and "kt0 + " or "")STAGES - 1;
        u32 af[2][MT][4]; // double-buffered across k32 steps
        bfrag_t bf[2];
        load_frags(af[0], bf[0], rd, 0);

        for (int kt = kt0; kt < kt1; ++kt) {
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ++ks) {
                if (ks == KSTEPS - 1) {
                    qc::cp_async_wait<STAGES - 2>();
                    __syncthreads();
                    rd = rd + STAGE_BYTES == smem_end ? smem0 : rd + STAGE_BYTES;
                }
                load_frags(af[(ks + 1) & 1], bf[(ks + 1) & 1], rd, (ks + 1) % KSTEPS);
                if (ks == 0) {
                    if (kt_next < kt1)
                        load_tile(wr, kt_next);
                    qc::cp_async_commit(); // possibly empty: keeps the group count in step
                    ++kt_next;
                    wr = wr + STAGE_BYTES == smem_end ? smem0 : wr + STAGE_BYTES;
                }
                mma_step(x16, acc, af[ks & 1], bf[ks & 1]);
% if GROUPED and GROUP <= BK then
                if ((ks + 1) % $(GROUP // 32) == 0)
                    flush(kt * $(BK // GROUP) + ks / $(GROUP // 32));
% elseif GROUPED then
                if (ks == KSTEPS - 1 && (kt + 1) % $(GROUP // BK) == 0) // K % g == 0: the last tile ends a group
                    flush(kt / $(GROUP // BK));
% end
            }
        }
    };
% if DISPATCH then
    if (K < (1 << 17)) {
        k_loop(flag<true>());
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    acc[mt][nt][j] >>= 4; // exact: a multiple of 16 with no wrap
    } else {
        k_loop(flag<false>());
    }
% else
    k_loop(flag<$(S4 and "true" or "false")>());
% end
% if SPLIT then
    // K split across the cluster (qc::cluster_sum): rank 0 adds the other ranks' sums (exact
    // int32, or f32 totals of whole groups), passed through their shared memory, in rank
    // order; then it alone goes on.
    if (!qc::cluster_sum<MT * NT * 4, THREADS>(&$(GROUPED and "tot" or "acc")[0][0][0], smem0, tid))
        return;
% end

    // Epilogue: the sums as f32 (an int32 sum rounded once; a group total as it is, s4's
    // factor 16 taken back out exactly, a power of 2), finished by finish_tile (scales, then
    // bias, each step rounded alone, past M or N reading as 0), then staged out through
    // shared memory (gemm_common.cuh), which writes nothing past M or N.
% if GROUPED then
    float (&v)[MT][NT][4] = tot;
% else
    float v[MT][NT][4];
% end
% if GROUPED and S4 then
    finish_tile(v, tot, [](float x) { return __fmul_rn(x, 0.0625f); }, row0, col0, M, N, p);
% elseif GROUPED then
    finish_tile(v, tot, as_is(), row0, col0, M, N, p);
% else
    finish_tile(v, acc, [](int x) { return __int2float_rn(x); }, row0, col0, M, N, p);
% end
    qc::main_loop_done(); // the epilogue reuses the ring
    qc::stage_out<BM, BN, WM, WN, $(NP)>(v, smem0, static_cast<out_t *>(p.d), p.ldd, m0, n0, M, N,
                                         tid);
}
