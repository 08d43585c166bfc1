// gemm_wgmma_q.cuh — the kernel body of the quantized Hopper GEMMs (wgmma_f8, wgmma_i8),
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
// tensor/row/col scales and bias come last, each step rounded alone:
// D = cast_out(((tot·sa)·sb) + bias), tot converted to f32 first when it is s32.
// Launch needs, from the plan (docs/TEMPLATES.md):
// qjit: threads=$(threads) smem=$(smem) k_multiple=$(k_multiple) ld_multiple=$(ld_multiple) align=$(align) persistent=$(persistent)

% include("gemm_common.cuh")
% include("gemm_hopper.cuh")

namespace {

using qc::u32;
using qc::u64;
using qc::out_t;
using qh::ROW_BYTES;
using qh::mbar_arrive;
using qh::mbar_wait;
using qh::fence_proxy_async;
using qh::smem_desc;
using qh::warpgroup_sync;
using qh::bulk_wait;

constexpr int BM = $(BM), BN = $(BN), BK = 128;
constexpr int WM = $(WM), WN = $(WN);
constexpr int STAGES = $(STAGES);
constexpr int NC = WM * WN;                 // consumer warpgroups
constexpr int THREADS = 128 * (NC + 1);
constexpr int WGM = BM / WM, WGN = BN / WN; // consumer warpgroup tile
constexpr int MI = WGM / 64;                // m64 wgmma rows per consumer
constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = (BM + BN) * ROW_BYTES;
constexpr int RING_BYTES = STAGES * STAGE_BYTES;
constexpr int NP = $(NP), SEG = WGN / NP;   // output staging: NP passes of SEG columns
constexpr int EPI_PITCH = WN * SEG * (int)sizeof(out_t) + 16;
static_assert(RING_BYTES + 2048 + BM * EPI_PITCH <= 227 * 1024, "gemm_wgmma_q: tile and stages need more shared memory than an SM has");

% local ACC_T, ACC_C = ACC_INT and "int" or "float", ACC_INT and "+r" or "+f"
typedef $(ACC_T) acc_t;

// d (64×$(WGN) $(ACC_T), this thread's $(WGN // 2)) = A(64×32)·B($(WGN)×32)ᵀ + (add ? d : 0).
__device__ __forceinline__ void wgmma(acc_t (&d)[WGN / 2], u64 a, u64 b, int add)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %$(WGN // 2 + 2), 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n$(WGN)k32.$(MMA) {"
% for i = 0, WGN // 2 - 1 do
                 "%$(i)$(i + 1 < WGN // 2 and "," or "")"
% end
% -- integer wgmma has no operand negation: its last operand is scale-d
                 "}, %$(WGN // 2), %$(WGN // 2 + 1), p$(ACC_INT and "" or ", 1, 1");\n}\n"
                 :
% for i = 0, WGN // 2 - 1 do
                 "$(ACC_C)"(d[$(i)])$(i + 1 < WGN // 2 and "," or "")
% end
                 : "l"(a), "l"(b), "r"(add));
}

// One accumulator as f32, where the epilogue starts: the reference's t = (float)acc.
__device__ __forceinline__ float to_f32(acc_t x)
{
% if ACC_INT then
    return __int2float_rn(x);
% else
    return x;
% end
}

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    const int M = (int)p.m, N = (int)p.n;
    const int tid = threadIdx.x;

    const qh::tile_walk<BM, BN, 1> w(p);
    const int first = w.first, tiles = w.tiles, stride = w.stride, KT = w.k_tiles;

    // The ring (gemm_hopper.cuh) runs on across a CTA's tiles.
    const qh::ring_addrs rg = qh::make_ring<STAGES, NC>(smem, RING_BYTES, tid);
    const u32 ring = rg.base, full0 = rg.full0, empty0 = rg.empty0;

    if (tid < 128) {
% if NC > 1 then
        asm volatile("setmaxnreg.dec.sync.aligned.u32 $(PRODUCER_REGS);\n" ::: "memory");
% end
        qh::produce<BM, BN, STAGES, 1>(p, w, ring, full0, empty0, tid);
    } else {
        // Consumer warpgroup c: rows wg_m*WGM .. +WGM, columns wg_n*WGN .. +WGN of the tile.
% if NC > 1 then
        asm volatile("setmaxnreg.inc.sync.aligned.u32 $(CONSUMER_REGS);\n" ::: "memory");
% end
        const int c = (tid >> 7) - 1, wg_m = c / WN, wg_n = c % WN;
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const u32 a_tile = ring + wg_m * WGM * ROW_BYTES;
        const u32 b_tile = ring + A_BYTES + wg_n * WGN * ROW_BYTES;
        int s = 0;
        u32 phase = 0;
        const u32 epi = full0 + 128;
        const bool vec = (u64)p.d % 16 == 0 && p.ldd * (long long)sizeof(out_t) % 16 == 0;
        const bool sender = (tid & 127) < WGM;
% if SA == "block" then
        const float *__restrict__ SAB = static_cast<const float *>(p.scale_a);
% end
% if SB == "block" then
        const float *__restrict__ SBB = static_cast<const float *>(p.scale_b);
% end
        for (int t = first; t < tiles; t += stride) {
            int m0, n0;
            w.origin(t, m0, n0);
            // This thread's rows: 16*warp + lane/4 + 8*h of each m64 block mi.
            const int row0 = m0 + wg_m * WGM + warp * 16 + (lane >> 2);
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
% if SB == "block" then
            const int bcol = n0 + wg_n * WGN;
            const float *sb_row = bcol < N ? SBB + (long long)(bcol / 128) * KT : nullptr;
% end
% if PROMOTE then
            float tot[MI][WGN / 2], part[MI][WGN / 2];
% else
            acc_t tot[MI][WGN / 2];
% end
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int j = 0; j < WGN / 2; ++j)
                    tot[mi][j] = 0;

#pragma unroll 1
            for (int kt = 0; kt < KT; ++kt) {
% if BLOCK then
                // This K block's scales (a K tile is one 128-block: KT blocks in all), read
                // while its wgmma run.
                float sblk[MI][2];
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
%   if SA == "block" and SB == "block" then
                        sblk[mi][h] = sa_rows[mi][h] && sb_row ? sa_rows[mi][h][kt] * sb_row[kt] : 0.f;
%   elseif SA == "block" then
                        sblk[mi][h] = sa_rows[mi][h] ? sa_rows[mi][h][kt] : 0.f;
%   else
                        sblk[mi][h] = sb_row ? sb_row[kt] : 0.f;
%   end
% end
                mbar_wait(full0 + 8 * s, phase);
                fence_proxy_async(); // wgmma reads what cp.async wrote
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
                    mbar_arrive(empty0 + 8 * s); // the stage is free for the producer
% else
                // One group stays in flight: the one before it is done, and so is its stage.
                qh::wgmma_wait<1>();
                if (lane == 0 && kt > 0)
                    mbar_arrive(empty0 + 8 * (s == 0 ? STAGES - 1 : s - 1));
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
            }
% if not PROMOTE then
            qh::wgmma_wait<0>();
            if (lane == 0 && KT > 0)
                mbar_arrive(empty0 + 8 * (s == 0 ? STAGES - 1 : s - 1)); // the tile's last stage
% end

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
% if SA == "tensor" or SA == "row" then
            const float *__restrict__ sa = static_cast<const float *>(p.scale_a);
% end
% if SB == "tensor" or SB == "col" then
            const float *__restrict__ sb = static_cast<const float *>(p.scale_b);
% end
% if SA == "tensor" then
            const float sa_t = sa[0];
% end
% if SB == "tensor" then
            const float sb0 = sb[0], sb1 = sb0;
% end
% if SA == "row" then
            float sa_r[MI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0 + mi * 64 + h * 8;
                    sa_r[mi][h] = row < M ? sa[row] : 0.f;
                }
% end
% if BIAS then
            const out_t *__restrict__ bias = static_cast<const out_t *>(p.bias);
% end
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                if (sender)
                    bulk_wait<false>();
                warpgroup_sync(1 + c);
#pragma unroll
                for (int jj = 0; jj < SEG / 8; ++jj) {
                    const int j = q * (SEG / 8) + jj;
                    const int col = col0 + j * 8;
% if SB == "col" then
                    const float sb0 = col < N ? sb[col] : 0.f, sb1 = col + 1 < N ? sb[col + 1] : 0.f;
% end
% if BIAS then
                    const float b0 = col < N ? qc::bias_at(bias, col) : 0.f;
                    const float b1 = col + 1 < N ? qc::bias_at(bias, col + 1) : 0.f;
% end
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            float x = to_f32(tot[mi][4 * j + 2 * h]), y = to_f32(tot[mi][4 * j + 2 * h + 1]);
% if SA == "tensor" then
                            x = __fmul_rn(x, sa_t);
                            y = __fmul_rn(y, sa_t);
% elseif SA == "row" then
                            x = __fmul_rn(x, sa_r[mi][h]);
                            y = __fmul_rn(y, sa_r[mi][h]);
% end
% if SB == "tensor" or SB == "col" then
                            x = __fmul_rn(x, sb0);
                            y = __fmul_rn(y, sb1);
% end
% if BIAS then
                            x = __fadd_rn(x, b0);
                            y = __fadd_rn(y, b1);
% end
                            qc::stage2(base + (mi * 64 + h * 8) * EPI_PITCH + jj * 8 * (int)sizeof(out_t), x, y);
                        }
                    }
                }
                fence_proxy_async(); // the bulk copies read what these stores wrote
                warpgroup_sync(1 + c);
                qh::send_pass<WGM, SEG>(bulk, D, p.ldd, own, EPI_PITCH, m0 + wg_m * WGM,
                                        n0 + wg_n * WGN + q * SEG, M, N, vec, tid & 127);
            }
        }
        if (sender)
            bulk_wait<true>();
    }
}
