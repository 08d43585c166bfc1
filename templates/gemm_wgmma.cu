// gemm_wgmma.cu — warp-specialized Hopper GEMM for f16×f16 and bf16×bf16, sm_90a only.
// D[m,n] = cast_out(sum_k A[m,k]·B[n,k] + bias[n]), f32 accumulation in registers. Warpgroup 0
// fills a STAGES-deep ring of 128-byte-swizzled shared-memory tiles with cp.async, each stage
// handed over through mbarriers; WM×WN consumer warpgroups (registers moved to them with
// setmaxnreg) run wgmma.mma_async m64nNk16 on both operands in shared memory, keeping one
// wgmma group in flight. Where shared memory allows, whole output tiles leave through a
// staging buffer and bulk copies (cp.async.bulk), which overlap the next tile's math.
//
// Parameters: BK must be 64 (a tile row of halves is one 128-byte swizzle row). WM and WN count
// the consumer warpgroups along M and N; each owns a (BM/WM)×(BN/WN) tile, BM/WM a multiple of
// 64 (m64 wgmma rows) and BN/WN a multiple of 16 up to 256 (the wgmma N), its accumulators
// fitting its registers. STAGES 2..8 within 227 KB of shared memory; with bf16/f16 output the
// staging buffer fits beside 3 stages of 128x256x64 or 256x128x64 and 5 of 128x128x64.
// Block: one producer warpgroup plus WM*WN consumer warpgroups: threads = 128*(WM*WN+1).
// Dynamic shared memory in bytes: the ring, 1024-byte alignment slack and the mbarriers, then,
// where it still fits in 227 KB (232448 bytes), the staging buffer for the output tile (EPI):
// BASE = STAGES*(BM+BN)*BK*2+2048, EPI = BM*(BN*OUT_BYTES+16), OUT_BYTES = 4 for f32 else 2.
// Grid: any size. One CTA per tile, grid (ceil(N/BN), ceil(M/BM), 1), is the plain launch; a
// smaller grid makes the kernel persistent (each CTA walks the tiles with a stride of the
// grid size; then best one CTA per SM), which the metadata line below asks the library for.
// SPLIT_K = S (2..8): K may be split across the gridDim.z CTAs of a cluster (1x1xS, grid z
// up to S, as the launch chooses when the tiles leave SMs idle, which gives each CTA one
// tile): rank r sums whole K tiles [KT·r/S, KT·(r+1)/S), leaves its f32 tile in its ring
// (which must hold BM·(BN+8)·4 bytes), and finishes rows [BM·r/S, BM·(r+1)/S) of the tile
// from every rank's, added in rank order; with grid z = 1 it runs as without SPLIT_K.
% -- qjit family: name=wgmma id=2 order=10
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   measured = true,
%   serves = function() return one_of(A, "f16", "bf16") and B == A and SA == "none" and SB == "none" end,
%   -- 128x256x64, two consumer warpgroups, 3 stages (room for the staged epilogue beside the
%   -- ring): 1.000x cuBLAS at bf16 8192^3 on H100.  A named tile gets two consumer
%   -- warpgroups along M where it allows.  Up to M = 64 (no tile named): 64x128x64, one
%   -- consumer warpgroup, 6 stages; qjit-tune on the H100 found it the fastest of wgmma's and
%   -- mma's small-m tiles (or within 2.5% of wgmma_tma's) at bf16 M = 1, 16, 64 on the Llama 3
%   -- 8B layers, 1.06-1.95x mma's 64x128x32 that auto ran before (docs/BENCH.md).  From
%   -- M = 65 to 1024: 128x128x64, one consumer warpgroup, 6 stages, twice the CTAs of
%   -- 128x256 (qjit-tune, H100: 1.74x it at M = 128 and 256 on 4096x4096, 1.19x on 6144x4096
%   -- at M = 1024, within 5% of the best of 19 candidates on the 8B layers); above, 128x256.
%   default = function(m)
%     if m ~= 0 and m <= 64 and BM == 0 then return choose(64, 128, 64, 1, 1, 6) end
%     if m ~= 0 and m <= 1024 and BM == 0 then return choose(128, 128, 64, 1, 1, 6) end
%     local c = choose(128, 256, 64, 2, 1, 3)
%     return warpgroups(c)
%   end,
%   space = spaces{
%     default = {config(128, 256, 64, 2, 1, 4), config(128, 256, 64, 2, 1, 3), config(256, 128, 64, 2, 1, 4),
%                config(128, 128, 64, 2, 1, 5), config(128, 128, 64, 1, 1, 6), config(64, 256, 64, 1, 1, 4),
%                -- narrow tiles for M = 128-256 on 4096-wide layers (32 tiles of 128x128 for 132 SMs)
%                config(128, 64, 64, 2, 1, 8), config(64, 128, 64, 1, 1, 8)},
%     -- and the decode tile with K split across a cluster (narrow layers: 4096 wide is 32
%     -- tiles of 64x128 for 132 SMs; the launch splits only where tiles leave SMs idle), by 4
%     -- and 8, and 64x64 by 4 (256 CTAs there): at M = 64 on 4096x4096 auto runs 64x128 unsplit
%     -- at 0.68x cuBLAS on the H200 and 4096x14336 the 4-way split at 0.83x (docs/BENCH.md)
%     ["small-m"] = {config(64, 256, 64, 1, 1, 4), config(64, 128, 64, 1, 1, 6), config(128, 128, 64, 2, 1, 5),
%                    config(64, 128, 64, 1, 1, 6, 4), config(64, 128, 64, 1, 1, 6, 8), config(64, 64, 64, 1, 1, 8, 4)},
%   },
%   plan = function()
%     if not ((A == "f16" or A == "bf16") and B == A) then unsupported("gemm_wgmma: A and B must both be f16 or both bf16") end
%     if not (OUT == "f16" or OUT == "bf16" or OUT == "f32") then unsupported("gemm_wgmma: OUT must be f16, bf16 or f32") end
%     if not (ARCH == 90) then unsupported("gemm_wgmma: needs sm_90a (wgmma, setmaxnreg)") end
%     if not (BK == 64) then unsupported("gemm_wgmma: BK must be 64") end
%     if not (WM >= 1 and WN >= 1 and WM * WN <= 4) then unsupported("gemm_wgmma: WM*WN must be 1..4 consumer warpgroups") end
%     if not (BM % (64 * WM) == 0) then unsupported("gemm_wgmma: BM/WM must be a multiple of 64") end
%     local WGN = BN // WN
%     if not (BN % WN == 0 and WGN % 16 == 0 and WGN <= 256) then unsupported("gemm_wgmma: BN/WN must be a multiple of 16 up to 256") end
%     if not (STAGES >= 2 and STAGES <= 8) then unsupported("gemm_wgmma: STAGES must be 2..8") end
%     -- split=S (2..8): K split across a cluster of up to S CTAs per output tile when the tiles
%     -- leave SMs idle (the launch chooses how many: one tile a CTA), the ranks' f32 tiles
%     -- added in rank order, each rank finishing a band of the tile's rows
%     if not (SPLIT_K >= 1 and SPLIT_K <= 8) then unsupported("gemm_wgmma: split must be 1..8 (split=" .. SPLIT_K .. ")") end
%     local SPLIT, RING = SPLIT_K > 1, STAGES * (BM + BN) * BK * 2
%     if SPLIT and RING < BM * (BN + 8) * 4 then
%       unsupported(string.format("gemm_wgmma: split=%d keeps the f32 tile (%d bytes) in the ring, which holds %d at stages=%d", SPLIT_K, BM * (BN + 8) * 4, RING, STAGES))
%     end
%     local NC = WM * WN
%     local THREADS, PRODUCER_REGS, CONSUMER_REGS, REG_BUDGET = hopper_regs(NC)
%     -- ptxas checks each wgmma against the entry cap, so above 384 threads a wide consumer
%     -- tile is computed by two wgmma of half the width.
%     local IN = (THREADS > 384 and WGN > 128) and WGN // 2 or WGN
%     if not ((BM // WM // 64) * (WGN // 2) + 32 <= REG_BUDGET) then unsupported("gemm_wgmma: the consumer tile's accumulators do not fit in its registers") end
%     local NP, SMEM = hopper_staging("gemm_wgmma", RING + 2048, WGN)
%     return hopper_split{threads = THREADS, smem = SMEM, k_multiple = 8, ld_multiple = 8, align = 16, persistent = 1,
%                         NC = NC, IN = IN, NP = NP, PRODUCER_REGS = PRODUCER_REGS, CONSUMER_REGS = CONSUMER_REGS}
%   end,
% }
% include("gemm_common.cuh")
% include("gemm_hopper.cuh")

namespace {

using qc::u16;

% include("gemm_hopper_tile.cuh")
constexpr int BK = 64;                       // values of K a stage (one 128-byte row)
constexpr int IN = $(IN), NSPLIT = WGN / IN; // wgmma N, wgmma per m64 row and k16 step
constexpr int QJIT_SMEM_BYTES = RING_BYTES + 2048 + BM * EPI_PITCH;
static_assert(QJIT_SMEM_BYTES <= 227 * 1024, "gemm_wgmma: tile and stages need more shared memory than an SM has");

// d (64×$(IN) f32) += A(64×64)·B($(IN)×64)ᵀ, both from the ring: one K tile (gemm_hopper.cuh)
% wgmma_k64(IN, A .. "." .. B, false)

% if BIAS then
using qc::bias_at;
% end
% if SPLIT then

// K split across the gridDim.z CTAs of a cluster (rank blockIdx.z; the launch gives each CTA
// one tile).  Rank r sums K tiles [KT·r/c, KT·(r+1)/c) of 64 values: a GEMM of its own over A
// and B from column 64·kt0 on.
__device__ __forceinline__ qjit_params rank_part(const qjit_params &p)
{
    qjit_params q = p;
    const int c = (int)gridDim.z, r = (int)blockIdx.z;
    const long long kt_all = (p.k + BK - 1) / BK, kt0 = kt_all * r / c, kt1 = kt_all * (r + 1) / c;
    q.a = static_cast<const u16 *>(p.a) + kt0 * BK;
    q.b = static_cast<const u16 *>(p.b) + kt0 * BK;
    q.k = (kt1 * BK < p.k ? kt1 * BK : p.k) - kt0 * BK;
    return q;
}

constexpr int SUM_PITCH = qh::sum_pitch(BN); // f32 a row of a rank's tile in its ring

// The split tile's end, for every consumer thread (ct of NC*128): once every consumer's wgmma
// are done with the ring, each rank leaves its f32 tile there row-major, then qh::split_sum
// finishes this rank's rows from every rank's (between two cluster barriers).
// acc[mi][ni][4*j + 2*h + e] is row wg_m*WGM + 64*mi +
// 16*warp + lane/4 + 8*h, column wg_n*WGN + IN*ni + 8*j + 2*(lane%4) + e of the tile.
__device__ __forceinline__ void split_finish(const float (&acc)[MI][NSPLIT][IN / 2], u32 ring, int ct, int wg_m,
                                             int wg_n, int warp, int lane, const qjit_params &p, int m0, int n0,
                                             bool vec)
{
    asm volatile("bar.sync 14, $(NC * 128);\n" ::: "memory"); // the consumers' wgmma have read the ring
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NSPLIT; ++ni)
#pragma unroll
            for (int j = 0; j < IN / 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = wg_m * WGM + 64 * mi + 16 * warp + (lane >> 2) + 8 * h;
                    const int col = wg_n * WGN + IN * ni + 8 * j + 2 * (lane & 3);
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n"
                                 :: "r"(ring + (row * SUM_PITCH + col) * 4), "f"(acc[mi][ni][4 * j + 2 * h]),
                                    "f"(acc[mi][ni][4 * j + 2 * h + 1]) : "memory");
                }
    qh::split_sum<BM, BN, NC * 128>(ring, ct, p, m0, n0, vec);
}
% end

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
% PRODUCE_ARGS = "" -- B as A: 128-byte rows
% include("gemm_hopper_start.cuh")
% include("gemm_hopper_consumer.cuh")
        auto release = [&](int q) { // frees stage q for the producer
            if (lane == 0)
                mbar_arrive(empty0 + 8 * q);
        };
        for (int t = first; t < tiles; t += stride) {
            float acc[MI][NSPLIT][IN / 2];
            qc::zero(acc);

            int prev = s;
#pragma unroll 1
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full0 + 8 * s, phase);
                fence_proxy_async(); // wgmma reads what cp.async wrote
                wgmma_fence();
                const u32 st = s * STAGE_BYTES;
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int ni = 0; ni < NSPLIT; ++ni)
                        wgmma_ktile(acc[mi][ni], smem_desc(a_tile + st + mi * 64 * ROW_BYTES),
                                    smem_desc(b_tile + st + ni * IN * ROW_BYTES));
                wgmma_commit();
                // Keep this tile's group in flight; the previous one has finished reading its stage.
                wgmma_wait<1>();
                if (kt > 0)
                    release(prev);
                prev = s;
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
% if SPLIT then
            if (KT > 0) // a rank of a split may have no K tile
                release(prev);
% else
            release(prev);
% end
            w.main_loops_done(t);
            int m0, n0;
            w.origin(t, m0, n0);
% if SPLIT then
            if (gridDim.z > 1) {
                split_finish(acc, ring, tid - 128, wg_m, wg_n, warp, lane, p, m0, n0, vec);
                continue;
            }
% end

            // Epilogue, staged: pass q stages columns [q*SEG, (q+1)*SEG) of the consumer's tile,
            // bias added in f32 before the rounding to OUT, into its part of the buffer (rows
            // wg_m*WGM.., columns wg_n*SEG..). acc[mi][ni][4*j + 2*h + e] is row
            // 16*warp + lane/4 + 8*h of m64 block mi, column IN*ni + 8*j + 2*(lane%4) + e.
            // Whole tiles leave by one bulk copy per row, others through checked stores.
            out_t *__restrict__ D = static_cast<out_t *>(p.d);
            const bool bulk = vec && m0 + BM <= M && n0 + BN <= N;
            const u32 own = epi + wg_m * WGM * EPI_PITCH + wg_n * SEG * (int)sizeof(out_t);
            const u32 warp_stage = own + warp * 16 * EPI_PITCH;
% if BIAS then
            const out_t *__restrict__ bias = static_cast<const out_t *>(p.bias);
            const int bias_col = n0 + wg_n * WGN + (lane & 3) * 2;
#pragma unroll
            for (int j = 0; j < WGN / 8; ++j) {
                const int col = bias_col + j * 8;
                float b0, b1;
                qc::bias_pair(bias, col, N, b0, b1);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    float *a = acc[mi][j / (IN / 8)] + 4 * (j % (IN / 8));
                    a[0] += b0;
                    a[1] += b1;
                    a[2] += b0;
                    a[3] += b1;
                }
            }
% end
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                qh::pass_open(sender, 1 + c);
#pragma unroll
                for (int jj = 0; jj < SEG / 8; jj += 2) {
                    const int j = q * (SEG / 8) + jj;
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi)
                        qc::stage16x16(warp_stage + mi * 64 * EPI_PITCH + jj * 8 * (int)sizeof(out_t),
                                       EPI_PITCH, acc[mi][j / (IN / 8)] + 4 * (j % (IN / 8)),
                                       acc[mi][(j + 1) / (IN / 8)] + 4 * ((j + 1) % (IN / 8)), lane);
                }
                qh::pass_send<WGM, SEG>(1 + c, q, bulk, D, p.ldd, own, EPI_PITCH, m0 + wg_m * WGM,
                                        n0 + wg_n * WGN, M, N, vec, tid & 127);
            }
        }
        if (sender)
            bulk_wait<true>();
    }
}
