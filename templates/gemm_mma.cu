// gemm_mma.cu — multistage tensor-core GEMM for f16×f16 and bf16×bf16, sm_80 … sm_90a.
// D[m,n] = cast_out(sum_k A[m,k]·B[n,k] + bias[n]), f32 accumulation: mma.sync m16n8k16
// fed by ldmatrix.x4 from XOR-swizzled shared memory that a STAGES-deep cp.async pipeline fills.
//
% -- qjit family: name=mma id=1 order=20
% include("gemm_stage_plan.cuh")
% family {
%   floor = 80,
%   measured = true,
%   serves = function() return one_of(A, "f16", "bf16") and B == A and SA == "none" and SB == "none" end,
%   -- 128x256x32, 2x4 warps of 64x64: 0.58x cuBLAS at bf16 8192^3 on H100, the sm_80-class
%   -- path (wgmma is preferred there); the 99 KB targets take 3 stages.
%   -- Up to M = 64: 64x128x32 w2x2 s4, twice the CTAs of the large tile along N and a
%   -- quarter of its rows (0.65x cuBLAS at 16x8192x8192 on H100, the best of the sweep).
%   default = function(m)
%     if m ~= 0 and m <= 64 then return choose(64, 128, 32, 2, 2, 4) end
%     local c = choose(128, 256, 32, 2, 4, SMEM_LIMIT < 160 * 1024 and 3 or 4)
%     while c.stages > 2 and c.stages * (c.bm + c.bn) * c.bk * 2 > SMEM_LIMIT do c.stages = c.stages - 1 end
%     return c
%   end,
%   space = spaces{
%     default = {config(128, 256, 32, 2, 4, 4), config(128, 256, 32, 2, 4, 3), config(256, 128, 32, 4, 2, 3),
%                config(128, 128, 32, 2, 2, 4), config(128, 128, 64, 2, 2, 3), config(64, 128, 32, 2, 2, 4),
%                config(64, 64, 32, 2, 2, 3), config(128, 64, 64, 2, 2, 4)},
%     ["small-m"] = {config(64, 128, 32, 2, 2, 4), config(64, 64, 32, 2, 2, 3), config(64, 128, 64, 2, 2, 3),
%                    config(64, 256, 32, 1, 4, 4)},
%   },
%   plan = function()
%     if (A ~= "f16" and A ~= "bf16") or B ~= A then unsupported("A and B must both be f16 or both bf16 (a=" .. A .. " b=" .. B .. ")") end
%     if OUT ~= "f16" and OUT ~= "bf16" and OUT ~= "f32" then unsupported("OUT must be f16, bf16 or f32 (out=" .. OUT .. ")") end
%     if SA ~= "none" or SB ~= "none" or ZEROS then unsupported("no scales or zero points: f16/bf16 are used as stored") end
%     if ARCH < 80 then unsupported("needs sm_80 or newer") end
%     -- split=S (2..8, sm_90a): K split across a cluster of up to S CTAs per output tile when the
%     -- tiles alone leave SMs idle (chosen at launch), the partial tiles summed in rank order
%     if SPLIT_K ~= 1 and ARCH < 90 then unsupported("kernel mma splits K across a cluster: split=" .. SPLIT_K .. " needs sm_90a") end
%     if SPLIT_K > 8 then unsupported("kernel mma splits K across at most 8 CTAs of a cluster (split=" .. SPLIT_K .. ")") end
%     if not (one_of(BM, 64, 128, 256) and one_of(BN, 64, 128, 256) and one_of(BK, 32, 64)) then
%       unsupported(string.format("kernel mma takes tiles with BM, BN in {64,128,256} and BK in {32,64} (tile=%dx%dx%d)", BM, BN, BK))
%     end
%     if BM % (16 * WM) ~= 0 or BN % (16 * WN) ~= 0 then unsupported(string.format("warps=%dx%d do not split tile %dx%d into warp tiles that are multiples of 16x16", WM, WN, BM, BN)) end
%     if (BM // WM) * (BN // WN) > 64 * 64 then unsupported(string.format("warps=%dx%d split tile %dx%d into warp tiles of %dx%d, which need %d accumulator registers per thread; at most 128 fit (warp tiles of 64x64 at most)", WM, WN, BM, BN, BM // WM, BN // WN, (BM // WM) * (BN // WN) // 32)) end
%     if STAGES < 2 or STAGES > 6 then unsupported("stages=" .. STAGES .. ": kernel mma takes 2..6") end
%     local NP, SMEM = ring_staging("gemm_mma", STAGES * (BM + BN) * BK * 2, BN // WN)
%     local SPLIT = SPLIT_K > 1
%     if SPLIT then SMEM = math.max(SMEM, BM * BN * 4) end -- a rank's f32 tile, for rank 0 to add
%     -- 16-byte cp.async along K for 2-byte elements: K, lda and ldb are multiples of 8
%     return {threads = 32 * WM * WN, smem = SMEM, k_multiple = 8, ld_multiple = 8, align = 16, NP = NP,
%             cluster_k = SPLIT and SPLIT_K or 1, k_chunk = SPLIT and BK or 0, SPLIT = SPLIT}
%   end,
% }
% include("gemm_common.cuh")

namespace {

using qc::u16;
using qc::u32;
using qc::u64;
using qc::out_t;
using qc::smem_addr;
using qc::cp_async16;
using qc::cp_async_commit;
using qc::cp_async_wait;
using qc::ldsm_x4;
% if BIAS then
using qc::bias_at;
% end

% include("gemm_mma_tile.cuh")
constexpr int KSTEPS = BK / 16;
constexpr int CPR = BK / 8;                 // 16-byte chunks per shared-memory row
constexpr int ROW_BYTES = BK * 2;
constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = (BM + BN) * ROW_BYTES;
constexpr int LD_ROWS = THREADS / CPR;      // tile rows one cp.async pass covers

// Chunk c of row r lives at chunk c ^ f(r): the 8 rows that one ldmatrix phase reads (and
// the 8 chunks one cp.async wavefront writes) fall in 8 different 16-byte bank groups.
// With BK=32 two rows share a 128-byte line, so f takes bits 1..2 of the row.
constexpr int SWZ_SHIFT = CPR == 8 ? 0 : 1;
__device__ __forceinline__ u32 swz(int row, int chunk)
{
    return row * ROW_BYTES + ((chunk ^ ((row >> SWZ_SHIFT) & (CPR - 1))) << 4);
}

__device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.$(A).$(B).f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
% ELEM_A, ELEM_B = "u16", "u16"
% include("gemm_tile_walk.cuh")

    // Loads: each thread copies chunk ld_chunk of rows ld_row + i*LD_ROWS of both tiles.
    // Rows past M or N and chunks past K read nothing and land as zeros, so the tails need
    // no other care; tiles past the end are issued the same way (all zeros, never read),
    // which keeps the main loop free of branches.
    const int ld_row = tid / CPR, ld_chunk = tid % CPR;
    const u32 ld_off = swz(ld_row, ld_chunk);
% if SPLIT then
    // K tiles [kt0, kt1) of this CTA: with K split across the gridDim.z CTAs of a cluster,
    // rank blockIdx.z's share (see the plan); loads past kt1 read nothing.
    const int KT = (K + BK - 1) / BK;
    const int per = (KT + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kt0 = min(KT, (int)blockIdx.z * per), kt1 = min(KT, kt0 + per);
    const int k_base = kt0 * BK, k_end = min(K, kt1 * BK);
    const u16 *a_src = A + (long long)(m0 + ld_row) * p.lda + k_base + ld_chunk * 8;
    const u16 *b_src = B + (long long)(n0 + ld_row) * p.ldb + k_base + ld_chunk * 8;
    const long long a_pass = LD_ROWS * p.lda, b_pass = LD_ROWS * p.ldb;
    const int a_rows = M - m0 - ld_row, b_rows = N - n0 - ld_row; // rows this thread may load
    int k_left = k_end - k_base - ld_chunk * 8; // K % 8 == 0: a chunk is all in or all out
% else
    const u16 *a_src = A + (long long)(m0 + ld_row) * p.lda + ld_chunk * 8;
    const u16 *b_src = B + (long long)(n0 + ld_row) * p.ldb + ld_chunk * 8;
    const long long a_pass = LD_ROWS * p.lda, b_pass = LD_ROWS * p.ldb;
    const int a_rows = M - m0 - ld_row, b_rows = N - n0 - ld_row; // rows this thread may load
    int k_left = K - ld_chunk * 8; // K % 8 == 0: a chunk is all in or all out
% end

    const u32 smem0 = smem_addr(smem);
    auto load_tile = [&](u32 stage) {
#pragma unroll
        for (int i = 0; i < (BM + LD_ROWS - 1) / LD_ROWS; ++i) {
            if (BM % LD_ROWS == 0 || ld_row + i * LD_ROWS < BM) {
                const bool ok = k_left > 0 && i * LD_ROWS < a_rows;
                const u32 dst = LD_ROWS % 8 == 0 ? ld_off + i * LD_ROWS * ROW_BYTES : swz(ld_row + i * LD_ROWS, ld_chunk);
                cp_async16(stage + dst, ok ? a_src + i * a_pass : A, ok ? 16 : 0);
            }
        }
#pragma unroll
        for (int i = 0; i < (BN + LD_ROWS - 1) / LD_ROWS; ++i) {
            if (BN % LD_ROWS == 0 || ld_row + i * LD_ROWS < BN) {
                const bool ok = k_left > 0 && i * LD_ROWS < b_rows;
                const u32 dst = LD_ROWS % 8 == 0 ? ld_off + i * LD_ROWS * ROW_BYTES : swz(ld_row + i * LD_ROWS, ld_chunk);
                cp_async16(stage + A_BYTES + dst, ok ? b_src + i * b_pass : B, ok ? 16 : 0);
            }
        }
        a_src += BK;
        b_src += BK;
        k_left -= BK;
    };

    // Fragments. A: lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31 the same rows at
    // k 8-15, giving a0..a3 of m16n8k16. B (N×K, K contiguous, so plain ldmatrix yields the
    // "col" operand): lanes 0-7 rows 0-7 k 0-7, 8-15 rows 0-7 k 8-15, 16-23 rows 8-15 k 0-7,
    // 24-31 rows 8-15 k 8-15, giving b0,b1 of two n8 tiles. Step ks moves 2*ks chunks,
    // which under the swizzle is an XOR of ks << 5 on the lane's offset.
    const u32 a_lane = swz(warp_m * WTM + (lane & 15), lane >> 4);
    const u32 b_lane = A_BYTES + swz(warp_n * WTN + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    auto load_a = [&](u32 (&af)[MT][4], u32 stage, int ks, int mt0, int mt1) { // m-tiles [mt0, mt1)
#pragma unroll
        for (int mt = mt0; mt < mt1; ++mt)
            ldsm_x4(af[mt], stage + (a_lane ^ (ks << 5)) + mt * 16 * ROW_BYTES);
    };
    auto load_b = [&](u32 (&bf)[NT][2], u32 stage, int ks, int p0, int p1) { // n8 pairs [p0, p1)
#pragma unroll
        for (int np = p0; np < p1; ++np) {
            u32 r[4];
            ldsm_x4(r, stage + (b_lane ^ (ks << 5)) + np * 16 * ROW_BYTES);
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
        }
    };
    // A step's fragments take NL ldmatrix.x4: load l is a B pair or an A m-tile, the two
    // alternating while both last, so that issuing one every EVERY mma of the step before
    // spreads them over it.  Pairs from `npair` on are left out.
    constexpr int NPAIR = NT / 2, NL = MT + NPAIR, BOTH = 2 * (MT < NPAIR ? MT : NPAIR);
    constexpr int EVERY = MT * NT / NL; // >= 1
    auto load_nth = [&](u32 (&af)[MT][4], u32 (&bf)[NT][2], u32 stage, int ks, int l, int npair) {
        const bool is_b = l < BOTH ? l % 2 == 0 : NPAIR > MT;
        const int i = l < BOTH ? l / 2 : l - BOTH / 2;
        if (!is_b)
            load_a(af, stage, ks, i, i + 1);
        else if (i < npair)
            load_b(bf, stage, ks, i, i + 1);
    };

    float acc[MT][NT][4];
    qc::zero(acc);

    // Pipeline: tile kt sits in stage kt % STAGES. Before the last k16 step of a tile the
    // next tile is waited for, and one barrier both publishes it and frees the stage read
    // during the previous tile, which the first k16 step of each tile then refills.
    // Fragments are double-buffered: step ks + 1's loads are spread over step ks's mma, and
    // the next tile's first fragments are loaded behind the barrier so that the tensor cores
    // have work while they arrive, all but the last B pair, which is loaded at the start of
    // the tile and used by its last mma (the mma go column by column).  Carrying the whole
    // fragment set across the loop's back edge instead costs ptxas -O3 three times the time
    // on this loop; leaving one pair out costs the 8-warp tiles 2-3% of their speed (7% at
    // BK=64) and gains the 4-warp ones 4% (docs/NOTES.md).
% if not SPLIT then
    const int KT = (K + BK - 1) / BK, kt0 = 0, kt1 = KT;
% end
#pragma unroll 1 // the prologue: rolled, it compiles faster and runs once
    for (int s = 0; s < STAGES - 1; ++s) {
        load_tile(smem0 + s * STAGE_BYTES);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    const u32 smem_end = smem0 + STAGES * STAGE_BYTES;
    u32 rd = smem0, wr = smem0 + (STAGES - 1) * STAGE_BYTES;
    u32 af[2][MT][4], bf[2][NT][2];
    load_a(af[0], rd, 0, 0, MT);
    load_b(bf[0], rd, 0, 0, NPAIR - 1);

    for (int kt = kt0; kt < kt1; ++kt) {
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if (ks == KSTEPS - 1) {
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                rd = rd + STAGE_BYTES == smem_end ? smem0 : rd + STAGE_BYTES;
            }
            if (ks == 0)
                load_b(bf[0], rd, 0, NPAIR - 1, NPAIR);
            const int next = (ks + 1) % KSTEPS, npair = ks + 1 < KSTEPS ? NPAIR : NPAIR - 1;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int i = nt * MT + mt;
                    if (i % EVERY == 0 && i / EVERY < NL)
                        load_nth(af[(ks + 1) & 1], bf[(ks + 1) & 1], rd, next, i / EVERY, npair);
                    mma(acc[mt][nt], af[ks & 1][mt], bf[ks & 1][nt]);
                    if (ks == 0 && i == MT - 1) {
                        load_tile(wr);
                        cp_async_commit();
                        wr = wr + STAGE_BYTES == smem_end ? smem0 : wr + STAGE_BYTES;
                    }
                }
        }
    }
    qc::main_loop_done(); // the epilogue reuses the ring
% if SPLIT then
    // K split across the cluster (qc::cluster_sum): rank 0 adds the other ranks' f32 tiles,
    // passed through their shared memory, in rank order; then it alone goes on.
    if (!qc::cluster_sum<MT * NT * 4, THREADS>(&acc[0][0][0], smem0, tid))
        return;
% end

    // Epilogue, staged (gemm_common.cuh), bias added in f32 before the rounding to OUT.
    // acc[mt][nt] holds rows g and g+8 (g = lane/4), columns 2*(lane%4) and +1.
    finish_tile(acc, acc, as_is(), m0 + warp_m * WTM + (lane >> 2), n0 + warp_n * WTN + (lane & 3) * 2, M, N, p);
    qc::stage_out<BM, BN, WM, WN, $(NP)>(acc, smem0, static_cast<out_t *>(p.d), p.ldd, m0, n0, M, N,
                                         tid);
}
