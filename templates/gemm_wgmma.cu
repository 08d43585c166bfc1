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
% if not ((A == "f16" or A == "bf16") and B == A) then unsupported("gemm_wgmma: A and B must both be f16 or both bf16") end
% if not (OUT == "f16" or OUT == "bf16" or OUT == "f32") then unsupported("gemm_wgmma: OUT must be f16, bf16 or f32") end
% if not (ARCH == 90) then unsupported("gemm_wgmma: needs sm_90a (wgmma, setmaxnreg)") end
% if not (BK == 64) then unsupported("gemm_wgmma: BK must be 64") end
% if not (WM >= 1 and WN >= 1 and WM * WN <= 4) then unsupported("gemm_wgmma: WM*WN must be 1..4 consumer warpgroups") end
% if not (BM % (64 * WM) == 0) then unsupported("gemm_wgmma: BM/WM must be a multiple of 64") end
% local WGN = BN // WN
% if not (BN % WN == 0 and WGN % 16 == 0 and WGN <= 256) then unsupported("gemm_wgmma: BN/WN must be a multiple of 16 up to 256") end
% if not (STAGES >= 2 and STAGES <= 8) then unsupported("gemm_wgmma: STAGES must be 2..8") end
% if not (SPLIT_K == 1) then unsupported("gemm_wgmma: SPLIT_K must be 1") end
% local NC = WM * WN
% -- Registers: the launch gets the per-thread cap that __launch_bounds__(threads, 1) allows,
% -- in steps of 8; the producer drops to 40 (24 beside 3-4 consumers) and the consumers share the rest.
% local THREADS = 128 * (NC + 1)
% local CAP = math.min(255, 65536 // THREADS) // 8 * 8
% local PRODUCER_REGS = NC > 2 and 24 or 40
% local CONSUMER_REGS = math.min(240, (CAP * THREADS - PRODUCER_REGS * 128) // (128 * NC) // 8 * 8)
% -- ptxas checks each wgmma against the entry cap, so above 384 threads a wide consumer
% -- tile is computed by two wgmma of half the width.
% local IN = (THREADS > 384 and WGN > 128) and WGN // 2 or WGN
% if not ((BM // WM // 64) * (WGN // 2) + 32 <= (NC > 1 and CONSUMER_REGS or 255)) then unsupported("gemm_wgmma: the consumer tile's accumulators do not fit in its registers") end
% local OUT_BYTES = OUT == "f32" and 4 or 2
% -- The output tile leaves through a staging buffer beside the ring, in NP passes over each
% -- consumer's columns when the whole tile of OUT does not fit in the shared memory left.
% local RING = STAGES * (BM + BN) * BK * 2 + 2048
% if RING > 232448 then unsupported("gemm_wgmma: " .. STAGES .. " stages of " .. BM .. "x" .. BN .. "x64 need more than 227 KB of shared memory") end
% local NP = 1
% while WGN % (16 * NP) == 0 and RING + BM * ((BN // NP) * OUT_BYTES + 16) > 232448 do NP = NP * 2 end
% local SMEM = RING + BM * ((BN // NP) * OUT_BYTES + 16)
% if SMEM > 232448 then unsupported("gemm_wgmma: " .. STAGES .. " stages of " .. BM .. "x" .. BN .. "x64 leave too little shared memory to stage the " .. OUT .. " output") end
// qjit: threads=$(THREADS) smem=$(SMEM) k_multiple=8 ld_multiple=8 align=16 persistent=1

% include("gemm_common.cuh")

namespace {

using qc::u16;
using qc::u32;
using qc::u64;
using qc::out_t;
using qc::smem_addr;
using qc::cp_async16;

constexpr int BM = $(BM), BN = $(BN), BK = 64;
constexpr int WM = $(WM), WN = $(WN);
constexpr int STAGES = $(STAGES);
constexpr int NC = WM * WN;                 // consumer warpgroups
constexpr int THREADS = 128 * (NC + 1);
constexpr int WGM = BM / WM, WGN = BN / WN; // consumer warpgroup tile
constexpr int MI = WGM / 64;                // m64 wgmma rows per consumer
constexpr int IN = $(IN), NSPLIT = WGN / IN; // wgmma N, wgmma per m64 row and k16 step
constexpr int ROW_BYTES = BK * 2;           // 128: one swizzle row
constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = (BM + BN) * ROW_BYTES;
constexpr int RING_BYTES = STAGES * STAGE_BYTES;
// Output tiles leave through a shared-memory buffer (rows padded by 16 bytes against bank
// conflicts), NP passes of SEG columns per consumer, and whole ones by bulk copies, so that
// the consumers return to the tensor cores without waiting for their global stores.
constexpr int NP = $(NP), SEG = WGN / NP;
constexpr int EPI_PITCH = WN * SEG * (int)sizeof(out_t) + 16;
constexpr int QJIT_SMEM_BYTES = RING_BYTES + 2048 + BM * EPI_PITCH;
static_assert(QJIT_SMEM_BYTES <= 227 * 1024, "gemm_wgmma: tile and stages need more shared memory than an SM has");
constexpr int LD_ROWS = 16;                 // tile rows one pass of 128 producer threads covers
constexpr int GROUP_M = 8;                  // tile rows per rasterization band

// One arrival on `bar` once every cp.async this thread issued so far has landed; noinc: the
// arrival is one of the barrier's expected count, not an extra one.
__device__ __forceinline__ void cp_async_arrive(u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
// p + bytes, opaque to the compiler so that it adds as it goes instead of keeping one
// precomputed address per row in the producer's few registers.
__device__ __forceinline__ const char *advance(const char *p, long long bytes)
{
    const char *r;
    asm("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(p), "l"(bytes));
    return r;
}
__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_init(u32 bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
// Returns once the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" :: "r"(bar), "r"(parity) : "memory");
}


// cp.async writes through the generic proxy and wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Shared-memory matrix descriptor for a K-major tile in the 128-byte swizzle layout: rows of
// 128 bytes, chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms 1024 bytes apart
// (stride byte offset). The leading byte offset is unused by this layout. The tile base is
// 1024-byte aligned; a k16 step inside the row adds 32 bytes to the start address.
__device__ __forceinline__ u64 smem_desc(u32 addr)
{
    return (1ull << 62) | ((u64)(1024 >> 4) << 32) | (1ull << 16) | ((addr & 0x3FFFF) >> 4);
}

// d (64×$(IN) f32, this thread's $(IN // 2) of it) += A(64×64)·B($(IN)×64)ᵀ: one K tile as four
// k16 wgmma in one asm statement (an asm with 128 operands costs NVVM as much as four), the
// descriptors of step ks being a + 2*ks and b + 2*ks (32 bytes into the swizzled rows).
__device__ __forceinline__ void wgmma_ktile(float (&d)[IN / 2], u64 a, u64 b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %$(IN // 2 + 8), 0;\n"
% for ks = 0, 3 do
                 "wgmma.mma_async.sync.aligned.m64n$(IN)k16.f32.$(A).$(B) {"
%   for i = 0, IN // 2 - 1 do
                 "%$(i)$(i + 1 < IN // 2 and "," or "")"
%   end
                 "}, %$(IN // 2 + 2 * ks), %$(IN // 2 + 2 * ks + 1), p, 1, 1, 0, 0;\n"
% end
                 "}\n"
                 :
% for i = 0, IN // 2 - 1 do
                 "+f"(d[$(i)])$(i + 1 < IN // 2 and "," or "")
% end
                 : "l"(a), "l"(b), "l"(a + 2), "l"(b + 2), "l"(a + 4), "l"(b + 4), "l"(a + 6), "l"(b + 6),
                   "r"(1)); // scale-d true: d += a·b
}

// Barrier among the 128 threads of one warpgroup (ids 1.. ; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int id)
{
    asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory");
}
// Bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) from shared to global memory.
__device__ __forceinline__ void bulk_store(void *dst, u32 src, u32 bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 :: "l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until this thread's bulk stores have read their source (WRITTEN=false) or are done.
template <bool WRITTEN> __device__ __forceinline__ void bulk_wait()
{
    if (WRITTEN)
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
% if BIAS then
using qc::bias_at;
% end

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    const int M = (int)p.m, N = (int)p.n, K = (int)p.k;
    const int tid = threadIdx.x;

    // Tiles are numbered in bands of GROUP_M tile rows, walking down a band before across
    // it, so that the CTAs resident at one time share their A rows and B columns in L2. A
    // grid smaller than the tile count makes the kernel persistent: each CTA walks the tiles
    // with a stride of the grid, and its producer runs ahead into the next tile while the
    // consumers store the last one.
    const int tiles_n = (N + BN - 1) / BN, tiles_m = (M + BM - 1) / BM;
    const int tiles = tiles_n * tiles_m, stride = gridDim.x * gridDim.y;
    const int first = blockIdx.y * gridDim.x + blockIdx.x;
    auto tile_origin = [&](int t, int &m0, int &n0) {
        const int band = t / (GROUP_M * tiles_n), in_band = t % (GROUP_M * tiles_n);
        const int band_rows = tiles_m - band * GROUP_M < GROUP_M ? tiles_m - band * GROUP_M : GROUP_M;
        m0 = (band * GROUP_M + in_band % band_rows) * BM;
        n0 = (in_band / band_rows) * BN;
    };

    // Stage s holds A rows [0, BM) then B rows [0, BN), 128 bytes each; the ring runs on
    // across a CTA's tiles. full[s]: the stage's data is all in shared memory. empty[s]: every
    // consumer warp has finished the wgmma that read it.
    const u32 ring = (smem_addr(smem) + 1023) & ~1023u;
    const u32 full0 = ring + RING_BYTES, empty0 = full0 + 8 * STAGES;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 128);
            mbar_init(empty0 + 8 * s, 4 * NC);
        }
    }
    __syncthreads();
    const int KT = (K + BK - 1) / BK;

    if (tid < 128) {
        // Producer. Thread t copies 16-byte chunk t%8 of rows t/8 + 16*i; 16 rows keep the
        // row's swizzle phase, so the destination offset is fixed and steps by 16 rows.
% if NC > 1 then
        asm volatile("setmaxnreg.dec.sync.aligned.u32 $(PRODUCER_REGS);\n" ::: "memory");
% end
        const int ld_row = tid >> 3, ld_chunk = tid & 7;
        const u32 ld_off = ld_row * ROW_BYTES + ((ld_chunk ^ (ld_row & 7)) << 4);
        const long long a_pass = LD_ROWS * p.lda * 2, b_pass = LD_ROWS * p.ldb * 2;
        int s = 0, n = 0; // stage, K tiles issued
        u32 phase = 0;
        for (int t = first; t < tiles; t += stride) {
            int m0, n0;
            tile_origin(t, m0, n0);
            const char *a_src = static_cast<const char *>(p.a) + ((long long)(m0 + ld_row) * p.lda + ld_chunk * 8) * 2;
            const char *b_src = static_cast<const char *>(p.b) + ((long long)(n0 + ld_row) * p.ldb + ld_chunk * 8) * 2;
            const int a_rows = M - m0 - ld_row, b_rows = N - n0 - ld_row; // pass i is in while 16*i < rows
            for (int kt = 0; kt < KT; ++kt, ++n) {
                if (n >= STAGES)
                    mbar_wait(empty0 + 8 * s, phase ^ 1);
                const u32 st = ring + s * STAGE_BYTES + ld_off;
                const int k = kt * BK;
                const bool k_ok = k + ld_chunk * 8 < K; // K % 8 == 0: a chunk is all in or all out
                // Out-of-range rows and chunks copy 0 source bytes: their addresses are never read.
                const char *src = a_src + k * 2;
#pragma unroll
                for (int i = 0; i < BM / LD_ROWS; ++i) {
                    cp_async16(st + i * LD_ROWS * ROW_BYTES, src, k_ok && i * LD_ROWS < a_rows ? 16 : 0);
                    src = advance(src, a_pass);
                }
                src = b_src + k * 2;
#pragma unroll
                for (int i = 0; i < BN / LD_ROWS; ++i) {
                    cp_async16(st + A_BYTES + i * LD_ROWS * ROW_BYTES, src, k_ok && i * LD_ROWS < b_rows ? 16 : 0);
                    src = advance(src, b_pass);
                }
                cp_async_arrive(full0 + 8 * s);
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
        }
        cp_async_wait_all();
    } else {
        // Consumer warpgroup c computes rows wg_m*WGM .. +WGM, columns wg_n*WGN .. +WGN.
% if NC > 1 then
        asm volatile("setmaxnreg.inc.sync.aligned.u32 $(CONSUMER_REGS);\n" ::: "memory");
% end
        const int c = (tid >> 7) - 1, wg_m = c / WN, wg_n = c % WN;
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const u32 a_tile = ring + wg_m * WGM * ROW_BYTES;
        const u32 b_tile = ring + A_BYTES + wg_n * WGN * ROW_BYTES;
        int s = 0;
        u32 phase = 0;
        const u32 epi = full0 + 128; // past the mbarriers, 16-byte aligned
        const bool vec = (u64)p.d % 16 == 0 && p.ldd * (long long)sizeof(out_t) % 16 == 0;
        const bool sender = (tid & 127) < WGM; // sends rows tid%128 + 128*i of its warpgroup's tile
        auto release = [&](int q) { // frees stage q for the producer
            if (lane == 0)
                mbar_arrive(empty0 + 8 * q);
        };
        for (int t = first; t < tiles; t += stride) {
            float acc[MI][NSPLIT][IN / 2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NSPLIT; ++ni)
#pragma unroll
                    for (int j = 0; j < IN / 2; ++j)
                        acc[mi][ni][j] = 0.f;

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
            release(prev);
            int m0, n0;
            tile_origin(t, m0, n0);

            // Epilogue, staged: pass q stages columns [q*SEG, (q+1)*SEG) of the consumer's tile,
            // bias added in f32 before the rounding to OUT, into its part of the buffer (rows
            // wg_m*WGM.., columns wg_n*SEG..). acc[mi][ni][4*j + 2*h + e] is row
            // 16*warp + lane/4 + 8*h of m64 block mi, column IN*ni + 8*j + 2*(lane%4) + e.
            // Whole tiles leave by one bulk copy per row, others through checked stores.
            out_t *__restrict__ D = static_cast<out_t *>(p.d);
            const bool bulk = vec && m0 + BM <= M && n0 + BN <= N;
            const u32 base = epi + (wg_m * WGM + warp * 16 + (lane >> 2)) * EPI_PITCH +
                             (wg_n * SEG + (lane & 3) * 2) * (int)sizeof(out_t);
            const u32 own = epi + wg_m * WGM * EPI_PITCH + wg_n * SEG * (int)sizeof(out_t);
% if BIAS then
            const out_t *__restrict__ bias = static_cast<const out_t *>(p.bias);
            const int bias_col = n0 + wg_n * WGN + (lane & 3) * 2;
% end
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                // The buffer's last bulk copies must have read it, and every thread its last
                // checked stores, before it is written again.
                if (sender)
                    bulk_wait<false>();
                warpgroup_sync(1 + c);
#pragma unroll
                for (int jj = 0; jj < SEG / 8; ++jj) {
                    const int j = q * (SEG / 8) + jj;
% if BIAS then
                    const int col = bias_col + j * 8;
                    const float b0 = col < N ? bias_at(bias, col) : 0.f;
                    const float b1 = col + 1 < N ? bias_at(bias, col + 1) : 0.f;
% end
#pragma unroll
                    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const float *a = acc[mi][j / (IN / 8)] + 4 * (j % (IN / 8)) + 2 * h;
                            const u32 at = base + (mi * 64 + h * 8) * EPI_PITCH + jj * 8 * (int)sizeof(out_t);
% if BIAS then
                            qc::stage2(at, a[0] + b0, a[1] + b1);
% else
                            qc::stage2(at, a[0], a[1]);
% end
                        }
                    }
                }
                fence_proxy_async(); // the bulk copies read what these stores wrote
                warpgroup_sync(1 + c);
                if (bulk) {
                    for (int r = tid & 127; r < WGM; r += 128)
                        bulk_store(D + (long long)(m0 + wg_m * WGM + r) * p.ldd + n0 + wg_n * WGN + q * SEG,
                                   own + r * EPI_PITCH, SEG * (int)sizeof(out_t));
                } else {
                    qc::copy_out<WGM, SEG, SEG, SEG, 128>(own, EPI_PITCH, D, p.ldd, m0 + wg_m * WGM,
                                                          n0 + wg_n * WGN + q * SEG, M, N, vec, tid & 127);
                }
            }
        }
        if (sender)
            bulk_wait<true>();
    }
}
