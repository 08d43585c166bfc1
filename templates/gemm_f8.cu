// gemm_f8.cu — fp8 and MX GEMM for sm_89+: A e4m3|e5m2 × B e4m3 with tensor|row|block ×
// tensor|col|block scales; MXFP8 (e4m3 × e4m3) and MXFP4 (e2m1 × e2m1, unpacked to e4m3 in
// registers) with e8m0 scales per 32 of K.  Multistage cp.async pipeline, swizzled smem, ldmatrix.
//
// Tensor cores.  sm_89 runs mma.sync m16n8k32 .e4m3/.e5m2 natively.  sm_90 has no such
// instruction: ptxas emulates each one by converting its operands to f16 for two HMMAs, so
// there the kernel converts each fragment once (e4m3/e5m2 -> f16 is exact) and issues the two
// m16n8k16 f16 mma itself.  (The fast sm_90a path would be wgmma, which reads fp8 directly.)
// Accumulation.  Partial sums are promoted into f32 registers at least every 128 of K (DESIGN
// §2).  On sm_90 with warp tiles up to 64x32, a K tile's HMMAs (64 or 128 of K, inside one
// 128-block) chain through C and the tile's sums are added, times the block scales, at its end,
// as DeepGEMM does.  Otherwise each k32 step starts from C = 0 and is added at once: always
// for MX (its scales change every 32) and on sm_89, whose fp8 mma is reported to keep only 13
// mantissa bits of a chained C.  tensor/row/col scales come last: D = ((acc·sa)·sb) + bias.
// Configurations measured on H100 (e4m3 row/col -> bf16, 8192^3): 128x128x128 warps 2x4
// stages 3: 430 TFLOP/s; 64x64x128 2x2 s4: 426; 128x128x64 2x2 s3: 342 (64x64 warp tiles
// promote every k32 and spill a little).  16x28672x8192: 16x128x128 1x4 s4, 90 us.  block x
// block 342 (128x128x128 2x4 s3); MXFP8 and MXFP4 200 (128x128x64 2x4 s4).
% -- qjit family: name=mma_f8 id=5 order=100
% include("gemm_stage_plan.cuh")
% family {
%   floor = 89,
%   measured = true,
%   serves = function() return one_of(A, "e4m3", "e5m2", "e2m1") and one_of(B, "e4m3", "e2m1") end,
%   -- 430 TFLOP/s at 128x128x128 w2x4 s3 on H100 (e4m3 row/col, 8192^3), where 128x128x64
%   -- w2x2 spills.
%   default = function(m)
%     -- MXFP4 on sm_90 (qjit-tune on the H100, the eight Llama 3 layers): 64x64x64 won most
%     -- problems to M = 1024, 128x128x64 most above (where the other won, by 1-4%)
%     if A == "e2m1" and ARCH >= 90 and BM == 0 then
%       return (m ~= 0 and m <= 1024) and choose(64, 64, 64, 2, 2, 3) or choose(128, 128, 64, 2, 2, 3)
%     end
%     return choose(128, 128, 128, 2, 4, 3)
%   end,
%   -- the shared sweep (gemm_stage_plan.cuh), and in the default one this family's own
%   -- 128x128x128 w2x4 s3 (BK 128): MXFP4's heuristic before it was tuned, which beat the
%   -- shared sweep's best by up to 6% on some prefill layers (bench_grid.py --then on the
%   -- H100, docs/NOTES.md)
%   space = function(name)
%     local c = quant_mma_space(name)
%     if name ~= "default" or not c then return c end
%     local t = {}
%     for i = 1, #c do t[i] = c[i] end
%     t[#t + 1] = config(128, 128, 128, 2, 4, 3)
%     return t
%   end,
%   plan = function()
%     local FP4 = A == "e2m1"
%     local MX = SA == "mx"
%     local BLOCK = SA == "block" or SB == "block"
%     local NATIVE = ARCH < 90 -- mma.sync on fp8 operands (sm_89); else f16 HMMA (sm_90)
%     if ARCH < 89 then
%       unsupported(string.format("gemm_f8: fp8 tensor cores (mma .e4m3) need sm_89 or newer (arch=sm_%d)", ARCH))
%     end
%     local plain = one_of(A, "e4m3", "e5m2") and B == "e4m3" and one_of(SA, "none", "tensor", "row", "block")
%                   and one_of(SB, "none", "tensor", "col", "block")
%     local mx = (A == B and one_of(A, "e4m3", "e2m1")) and SA == "mx" and SB == "mx"
%     if not (plain or mx) then
%       unsupported(string.format("gemm_f8 takes a=e4m3|e5m2 b=e4m3 with sa=tensor|row|block sb=tensor|col|block, " ..
%         "or a=b=e4m3|e2m1 with sa=sb=mx (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_f8: out must be f16, bf16 or f32") end
%     local WTM, WTN = BM // WM, BN // WN
%     local UNIT_N = FP4 and 32 or 16 -- warp-tile columns one B ldmatrix.x4 covers
%     local KMUL = FP4 and 32 or 16   -- elements in a 16-byte chunk along K
%     if BK ~= 64 and BK ~= 128 then
%       unsupported(string.format("gemm_f8: BK must be 64 or 128 (tile=%dx%dx%d)", BM, BN, BK))
%     end
%     if BM % WM ~= 0 or BN % WN ~= 0 or WTM % 16 ~= 0 or WTN % UNIT_N ~= 0 then
%       unsupported(string.format("gemm_f8: warps=%dx%d must split tile %dx%d into warp tiles that are multiples of 16x%d",
%         WM, WN, BM, BN, UNIT_N))
%     end
%     if WTM * WTN > 64 * 64 then
%       unsupported(string.format("gemm_f8: warp tile %dx%d needs more than 128 accumulator registers per thread", WTM, WTN))
%     end
%     if SB == "block" and 128 % WTN ~= 0 then
%       unsupported(string.format("gemm_f8: sb=block needs warp tiles whose width divides 128 (warp tile %dx%d)", WTM, WTN))
%     end
%     if WM * WN > 8 then
%       unsupported(string.format("gemm_f8: warps=%dx%d: more than 8 warps leave under 128 registers a thread", WM, WN))
%     end
%     if STAGES < 2 or STAGES > 8 then unsupported(string.format("gemm_f8: stages=%d, takes 2..8", STAGES)) end
%     -- split=S (2..8, sm_90a): K split across a cluster of up to S CTAs per output tile when the
%     -- tiles alone leave SMs idle (chosen at launch); each CTA sums whole 128-blocks of K
%     -- (block scales) or K tiles, and rank 0 adds the others' f32 sums in rank order
%     if SPLIT_K ~= 1 and ARCH < 90 then unsupported(string.format("gemm_f8 splits K across a cluster: split=%d needs sm_90a", SPLIT_K)) end
%     if SPLIT_K > 8 then unsupported(string.format("gemm_f8 splits K across at most 8 CTAs of a cluster (split=%d)", SPLIT_K)) end
%     -- promote once per K tile where a second accumulator set fits (see the top)
%     local PART = not NATIVE and not MX and (WTM // 16) * (WTN // 8) <= 16
%     local EBITS = FP4 and 4 or 8
%     local ROW_BYTES = BK * EBITS // 8
%     local STAGE_BYTES = (BM + BN) * ROW_BYTES + (MX and (BM + BN) * (BK // 32) * 4 or 0)
%     local NP, SMEM = ring_staging("gemm_f8", STAGES * STAGE_BYTES, WTN)
%     local SPLIT = SPLIT_K > 1
%     if SPLIT then SMEM = math.max(SMEM, BM * BN * 4) end -- a rank's f32 sums, for rank 0 to add
%     local GT = BLOCK and 128 // BK or 1 -- K tiles a rank's share is a multiple of
%     return {threads = 32 * WM * WN, smem = SMEM, k_multiple = KMUL, ld_multiple = KMUL, align = 16,
%             cluster_k = SPLIT and SPLIT_K or 1, k_chunk = SPLIT and GT * BK or 0, SPLIT = SPLIT, GT = GT,
%             FP4 = FP4, MX = MX, BLOCK = BLOCK, NATIVE = NATIVE, WTM = WTM, WTN = WTN, UNIT_N = UNIT_N,
%             KMUL = KMUL, PART = PART, EBITS = EBITS, ROW_BYTES = ROW_BYTES, STAGE_BYTES = STAGE_BYTES,
%             NP = NP, SMEM = SMEM}
%   end,
% }
//
// The plan's k_multiple: 16-byte cp.async chunks along K, which are wholly inside or outside
// K, so K and the leading dimensions are multiples of 16 elements (32 for e2m1).
% include("gemm_common.cuh")

namespace {

using qc::u32;
using qc::u64;
using qc::u8;
using qc::out_t;

% include("gemm_mma_tile.cuh")
constexpr int KSTEPS = BK / 32;             // k32 steps per K tile
constexpr int ROW_BYTES = $(ROW_BYTES);     // one tile row of K in shared memory
constexpr int CPR = ROW_BYTES / 16;         // 16-byte chunks per row: 2, 4 or 8
constexpr int A_BYTES = BM * ROW_BYTES, B_BYTES = BN * ROW_BYTES;
constexpr int STAGE_BYTES = $(STAGE_BYTES);
static_assert(STAGES * STAGE_BYTES <= 227 * 1024, "gemm_f8: tile and stages need more shared memory than an SM has");
constexpr int LD_ROWS = THREADS / CPR;      // tile rows one cp.async pass covers

// Chunk c of row r lives at chunk c ^ f(r): the 8 rows that one ldmatrix phase reads (and
// the 8 chunks one cp.async wavefront writes) fall in 8 different 16-byte bank groups.
// 128/ROW_BYTES rows share a 128-byte line, so f takes the row bits above those.
constexpr int SWZ_SHIFT = CPR == 8 ? 0 : CPR == 4 ? 1 : 2;
__device__ __forceinline__ u32 swz(int row, int chunk)
{
    return row * ROW_BYTES + ((chunk ^ ((row >> SWZ_SHIFT) & (CPR - 1))) << 4);
}

% local AT = FP4 and "e4m3" or A -- A's fp8 type in registers (e2m1 is unpacked to e4m3)
% if NATIVE then
// One k32 step's operands: the m16n8k32 fragments themselves.
constexpr int AW = 4, BW = 2;
__device__ __forceinline__ void make_a(u32 (&o)[AW], const u32 (&f)[4])
{
    for (int i = 0; i < 4; ++i)
        o[i] = f[i];
}
__device__ __forceinline__ void make_b(u32 (&o)[BW], const u32 (&f)[2])
{
    o[0] = f[0];
    o[1] = f[1];
}
// d = a·b over one k32 step, from C = 0.
__device__ __forceinline__ void mma_k32(float (&d)[4], const u32 (&a)[AW], const u32 (&b)[BW])
{
    asm("mma.sync.aligned.m16n8k32.row.col.f32.$(AT).e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(0.f), "f"(0.f), "f"(0.f), "f"(0.f));
}
% else
// One k32 step's operands as f16 for two m16n8k16 mma.  A register of 4 fp8 (k0..k3 of one
// row or column) becomes (k0,k1) and (k2,k3); both operands put (k0,k1) in the f16 slots
// k 2t,2t+1 and (k2,k3) in k 2t+8,2t+9, so the products pair up.  h = 0 takes the fp8
// fragment's k 0-15 (a0, a1, b0), h = 1 its k 16-31 (a2, a3, b1).
constexpr int AW = 8, BW = 4;
template <int E5> __device__ __forceinline__ void f16x2_of(u32 x, u32 &lo, u32 &hi)
{
    if (E5)
        asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e5m2x2 %0, l;\n"
            " cvt.rn.f16x2.e5m2x2 %1, h;\n}" : "=r"(lo), "=r"(hi) : "r"(x));
    else
        asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
            " cvt.rn.f16x2.e4m3x2 %1, h;\n}" : "=r"(lo), "=r"(hi) : "r"(x));
}
__device__ __forceinline__ void make_a(u32 (&o)[AW], const u32 (&f)[4])
{
#pragma unroll
    for (int i = 0; i < 4; ++i) // f[i]: row g (i even) or g+8, k half i/2
        f16x2_of<$(AT == "e5m2" and 1 or 0)>(f[i], o[4 * (i >> 1) + (i & 1)], o[4 * (i >> 1) + (i & 1) + 2]);
}
__device__ __forceinline__ void make_b(u32 (&o)[BW], const u32 (&f)[2])
{
    f16x2_of<0>(f[0], o[0], o[1]);
    f16x2_of<0>(f[1], o[2], o[3]);
}
__device__ __forceinline__ void mma16(float (&d)[4], const u32 *a, const u32 *b)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d = a·b over one k32 step, from C = 0; mma_k32_acc adds it to d.
__device__ __forceinline__ void mma_k32(float (&d)[4], const u32 (&a)[AW], const u32 (&b)[BW])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(0.f), "f"(0.f), "f"(0.f), "f"(0.f));
    mma16(d, a + 4, b + 2);
}
__device__ __forceinline__ void mma_k32_acc(float (&d)[4], const u32 (&a)[AW], const u32 (&b)[BW])
{
    mma16(d, a, b);
    mma16(d, a + 4, b + 2);
}
% end

% if FP4 then
// e2m1 nibbles -> e4m3 bytes worth value·2^-6, exactly: e2m1's exponent and mantissa bits land
// on e4m3's lowest ones, whose subnormals extend the same way (0.5 -> 2^-7).  lo() takes the
// low nibbles (even k), hi() the high ones; A and B use one k order, so the products pair up.
__device__ __forceinline__ u32 fp4_lo(u32 x)
{
    return ((x & 0x08080808u) << 4) | ((x & 0x07070707u) << 2);
}
__device__ __forceinline__ u32 fp4_hi(u32 x)
{
    return (x & 0x80808080u) | ((x >> 2) & 0x1c1c1c1cu);
}
% end
% if MX then
%   local OFF = FP4 and 6 or 0
// e8m0 code c -> 2^(c − 127 + $(OFF)) as f32, 0xFF -> NaN (which every sum it scales then
// carries); 2^-127 is an f32 subnormal.
%   if FP4 then
// The 2^6 undoes fp4_lo/hi's 2^-6 on each operand; codes above 248 (2^121) then leave f32's
// range and give inf, a limit of this kernel (real MXFP4 scales sit far below it).
%   end
__device__ __forceinline__ float e8m0(u32 c)
{
    const u32 e = c + $(OFF);
    u32 bits = e >= 255 ? 0x7f800000u : e == 0 ? 0x00400000u : e << 23;
    if (c == 255)
        bits = 0x7fc00000u;
    return __uint_as_float(bits);
}
% end

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
{
% ELEM_A, ELEM_B = "u8", "u8"
% include("gemm_tile_walk.cuh")
% if FP4 then
    const int K_BYTES = K / 2; // two values per byte along K; lda, ldb count values
    const long long lda = p.lda / 2, ldb = p.ldb / 2;
% else
    const int K_BYTES = K;
    const long long lda = p.lda, ldb = p.ldb;
% end
    const int g = lane >> 2, tig = lane & 3; // mma fragment coordinates

    // Loads: each thread copies chunk ld_chunk of rows ld_row + i*LD_ROWS of both tiles.
    const int ld_row = tid / CPR, ld_chunk = tid % CPR;
    const u32 ld_off = swz(ld_row, ld_chunk);
    const u8 *a_src = A + (long long)(m0 + ld_row) * lda + ld_chunk * 16;
    const u8 *b_src = B + (long long)(n0 + ld_row) * ldb + ld_chunk * 16;
    const long long a_pass = LD_ROWS * lda, b_pass = LD_ROWS * ldb;

    const u32 smem0 = qc::smem_addr(smem);
    auto load_tile = [&](u32 stage, int kt) {
        const int k = kt * ROW_BYTES;
        const bool k_ok = k + ld_chunk * 16 < K_BYTES; // K_BYTES % 16 == 0: all in or all out
#pragma unroll
        for (int i = 0; i < (BM + LD_ROWS - 1) / LD_ROWS; ++i) {
            const int row = ld_row + i * LD_ROWS;
            if (BM % LD_ROWS == 0 || row < BM) {
                const bool ok = k_ok && m0 + row < M;
                const u32 dst = LD_ROWS % 8 == 0 ? ld_off + i * LD_ROWS * ROW_BYTES : swz(row, ld_chunk);
                qc::cp_async16(stage + dst, ok ? a_src + i * a_pass + k : A, ok ? 16 : 0);
            }
        }
#pragma unroll
        for (int i = 0; i < (BN + LD_ROWS - 1) / LD_ROWS; ++i) {
            const int row = ld_row + i * LD_ROWS;
            if (BN % LD_ROWS == 0 || row < BN) {
                const bool ok = k_ok && n0 + row < N;
                const u32 dst = LD_ROWS % 8 == 0 ? ld_off + i * LD_ROWS * ROW_BYTES : swz(row, ld_chunk);
                qc::cp_async16(stage + A_BYTES + dst, ok ? b_src + i * b_pass + k : B, ok ? 16 : 0);
            }
        }
    };

% if FP4 then
    // Fragments of packed e2m1.  An 8x8 b16 ldmatrix matrix is 8 rows x 16 bytes (32 values),
    // and a thread receives 4 bytes of row g: k = 8*tig .. 8*tig+7 of the k32 step, which
    // fp4_lo/hi spread over the two e4m3 registers m16n8k32 wants (a0/a2 for rows g, a1/a3 for
    // rows g+8, b0/b1 for column g).  A: lanes 0-15 address rows 0-15 at the step's chunk (x2);
    // B: lanes 0-31 rows 0-31, four n8 tiles (x4).  Step ks is chunk ks: an XOR of ks << 4.
    const u32 a_lane = swz(warp_m * WTM + (lane & 15), 0);
    const u32 b_lane = A_BYTES + swz(warp_n * WTN + lane, 0);
    auto load_a = [&](u32 (&af)[4], u32 stage, int ks, int mt) {
        u32 r[2];
        qc::ldsm_x2(r, stage + (a_lane ^ (ks << 4)) + mt * 16 * ROW_BYTES);
        af[0] = fp4_lo(r[0]);
        af[1] = fp4_lo(r[1]);
        af[2] = fp4_hi(r[0]);
        af[3] = fp4_hi(r[1]);
    };
    auto load_b = [&](u32 (&bf)[NT][2], u32 stage, int ks) {
#pragma unroll
        for (int nq = 0; nq < NT / 4; ++nq) {
            u32 r[4];
            qc::ldsm_x4(r, stage + (b_lane ^ (ks << 4)) + nq * 32 * ROW_BYTES);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                bf[4 * nq + j][0] = fp4_lo(r[j]);
                bf[4 * nq + j][1] = fp4_hi(r[j]);
            }
        }
    };
% else
    // Fragments.  With 1-byte elements an 8x8 b16 ldmatrix matrix is 8 rows x 16 k, and a
    // thread receives 4 consecutive k of row g, exactly an m16n8k32 register.  A: lanes 0-15
    // address rows 0-15 at k 0-15, lanes 16-31 the same rows at k 16-31 (a0..a3).  B (N×K is
    // the "col" operand as stored): lanes 0-7 rows 0-7 k 0-15, 8-15 rows 0-7 k 16-31, 16-31
    // the same for rows 8-15, giving b0,b1 of two n8 tiles.  Step ks moves 2*ks chunks,
    // which under the swizzle is an XOR of ks << 5 on the lane's offset.
    const u32 a_lane = swz(warp_m * WTM + (lane & 15), lane >> 4);
    const u32 b_lane = A_BYTES + swz(warp_n * WTN + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    auto load_a = [&](u32 (&af)[4], u32 stage, int ks, int mt) {
        qc::ldsm_x4(af, stage + (a_lane ^ (ks << 5)) + mt * 16 * ROW_BYTES);
    };
    auto load_b = [&](u32 (&bf)[NT][2], u32 stage, int ks) {
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            u32 r[4];
            qc::ldsm_x4(r, stage + (b_lane ^ (ks << 5)) + np * 16 * ROW_BYTES);
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
        }
    };
% end

% if MX then
    // MX scales travel with their tile: each stage ends with f32 [KSTEPS][BM] for A and
    // [KSTEPS][BN] for B, decoded once per CTA.  The e8m0 codes of tile kt + STAGES - 1 are
    // fetched into registers one tile before, then stored with that tile's cp.async group
    // under the same barrier, so their global latency hides behind a whole K tile.
    constexpr int SC_ITEMS = (BM + BN) * KSTEPS, SC_PER_THREAD = (SC_ITEMS + THREADS - 1) / THREADS;
    const u8 *__restrict__ SA8 = static_cast<const u8 *>(p.scale_a);
    const u8 *__restrict__ SB8 = static_cast<const u8 *>(p.scale_b);
    const int KB32 = K / 32; // the library guarantees K % 32 == 0 for mx
    u32 sc_code[SC_PER_THREAD];
    auto fetch_scales = [&](int kt) {
#pragma unroll
        for (int i = 0; i < SC_PER_THREAD; ++i) {
            const int idx = tid + i * THREADS;
            u32 c = 127; // 1.0 past M, N or K, where the tile holds zeros
            if (SC_ITEMS % THREADS == 0 || idx < SC_ITEMS) {
                const bool is_a = idx < BM * KSTEPS;
                const int j = is_a ? idx : idx - BM * KSTEPS, rows = is_a ? BM : BN;
                const int r = j % rows, kb = kt * KSTEPS + j / rows;
                if (r < (is_a ? M - m0 : N - n0) && kb < KB32)
                    c = is_a ? SA8[(long long)(m0 + r) * KB32 + kb] : SB8[(long long)(n0 + r) * KB32 + kb];
            }
            sc_code[i] = c;
        }
    };
    auto store_scales = [&](u32 stage) {
        float *dst = reinterpret_cast<float *>(smem + (stage - smem0) + A_BYTES + B_BYTES);
#pragma unroll
        for (int i = 0; i < SC_PER_THREAD; ++i) {
            const int idx = tid + i * THREADS;
            if (SC_ITEMS % THREADS == 0 || idx < SC_ITEMS)
                dst[idx] = e8m0(sc_code[i]);
        }
    };
    // This thread's scales at step ks: rows g (+8) of each m16 tile, columns 2*tig (+1) of each n8.
    float sa_f[MT][2], sb_f[NT][2];
    auto load_scale_frags = [&](u32 stage, int ks) {
        const float *s = reinterpret_cast<const float *>(smem + (stage - smem0) + A_BYTES + B_BYTES);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                sa_f[mt][h] = s[ks * BM + warp_m * WTM + mt * 16 + h * 8 + g];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float2 v = *reinterpret_cast<const float2 *>(s + BM * KSTEPS + ks * BN + warp_n * WTN + nt * 8 + 2 * tig);
            sb_f[nt][0] = v.x;
            sb_f[nt][1] = v.y;
        }
    };
% end
% if BLOCK then
    // Block scales (DeepSeek 1x128 on A, 128x128 on B): the scales of K block kb multiply
    // the partial sums of that block.  A warp's columns lie in one 128-column block.  The
    // next block's scales are fetched a block ahead into registers.
    const int KB128 = (K + 127) / 128;
    constexpr int TILES_PER_BLOCK = 128 / BK;
%   if SA == "block" then
    const float *__restrict__ SAB = static_cast<const float *>(p.scale_a);
    float sa_next[MT][2];
%   end
%   if SB == "block" then
    const float *__restrict__ SBB = static_cast<const float *>(p.scale_b);
    const int wn0 = n0 + warp_n * WTN;
    const long long sb_row = (long long)(wn0 / 128) * KB128;
    float sb_next;
%   end
    float s_blk[MT][2]; // sa · sb of this thread's rows for the current block
    auto fetch_block = [&](int kb) {
        const bool in = kb < KB128;
%   if SA == "block" then
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + warp_m * WTM + mt * 16 + h * 8 + g;
                sa_next[mt][h] = in && row < M ? SAB[(long long)row * KB128 + kb] : 0.f;
            }
%   end
%   if SB == "block" then
        sb_next = in && wn0 < N ? SBB[sb_row + kb] : 0.f;
%   end
    };
    auto take_block = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                s_blk[mt][h] = $(SA == "block" and "sa_next[mt][h]" or "1.f")$(SB == "block" and " * sb_next" or "");
    };
% end

    float acc[MT][NT][4];
    qc::zero(acc);

    // Pipeline: tile kt sits in stage kt % STAGES. Before the last k32 step of a tile the
    // next tile is waited for, and one barrier both publishes it and frees the stage read
    // during the previous tile, which the first k32 step of each tile then refills.
    const int KT = (K_BYTES + ROW_BYTES - 1) / ROW_BYTES;
% if SPLIT then
    // K tiles [kt0, kt1) of this CTA: with K split across the gridDim.z CTAs of a cluster,
    // rank blockIdx.z's share, whole 128-blocks with block scales (GT K tiles; see the plan).
    const int per = ((KT + (int)gridDim.z - 1) / (int)gridDim.z + $(GT) - 1) / $(GT) * $(GT);
    const int kt0 = min(KT, (int)blockIdx.z * per), kt1 = min(KT, kt0 + per);
% end
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if ($(SPLIT and "kt0 + s < kt1" or "s < KT"))
            load_tile(smem0 + s * STAGE_BYTES, $(SPLIT and "kt0 + " or "")s);
        qc::cp_async_commit();
% if MX then
        fetch_scales($(SPLIT and "kt0 + " or "")s);
        store_scales(smem0 + s * STAGE_BYTES);
% end
    }
% if MX then
    fetch_scales($(SPLIT and "kt0 + " or "")STAGES - 1);
% end
% if BLOCK then
    fetch_block($(SPLIT and "kt0 / TILES_PER_BLOCK" or "0"));
% end
    qc::cp_async_wait<STAGES - 2>();
    __syncthreads();

    const u32 smem_end = smem0 + STAGES * STAGE_BYTES;
    u32 rd = smem0, wr = smem0 + (STAGES - 1) * STAGE_BYTES;
% if MX then
    u32 wr_prev = wr; // the stage whose scales store_scales writes
% end
    int kt_next = $(SPLIT and "kt0 + " or "")STAGES - 1;
    // Fragments of the coming k32 step.  Each step first turns them into mma operands (B
    // for all n8 tiles, then A one m16 tile at a time) and refills each set with the next
    // step's fragments as soon as it is consumed, which keeps one set of registers.
    u32 af[MT][4], bf[NT][2];
% if PART then
    float part[MT][NT][4]; // the current K tile's sums, promoted into acc at its end
% end
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        load_a(af[mt], rd, 0, mt);
    load_b(bf, rd, 0);

    for (int kt = $(SPLIT and "kt0" or "0"); kt < $(SPLIT and "kt1" or "KT"); ++kt) {
% if BLOCK then
        if (kt % TILES_PER_BLOCK == 0) {
            take_block();
            fetch_block(kt / TILES_PER_BLOCK + 1);
        }
% end
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
% if MX then
            load_scale_frags(rd, ks);
% end
            u32 bop[NT][BW];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                make_b(bop[nt], bf[nt]);
            if (ks == KSTEPS - 1) {
% if MX then
                store_scales(wr_prev); // tile kt + STAGES - 1, published by the barrier below
                fetch_scales(kt + STAGES);
% end
                qc::cp_async_wait<STAGES - 2>();
                __syncthreads();
                rd = rd + STAGE_BYTES == smem_end ? smem0 : rd + STAGE_BYTES;
            }
            const int kn = (ks + 1) % KSTEPS; // the next step, in rd's tile
            load_b(bf, rd, kn);
            if (ks == 0) {
                if (kt_next < $(SPLIT and "kt1" or "KT"))
                    load_tile(wr, kt_next);
                qc::cp_async_commit(); // possibly empty: keeps the group count in step
                ++kt_next;
% if MX then
                wr_prev = wr;
% end
                wr = wr + STAGE_BYTES == smem_end ? smem0 : wr + STAGE_BYTES;
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                u32 aop[AW];
                make_a(aop, af[mt]);
                load_a(af[mt], rd, kn, mt);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
% if PART then
                    if (ks == 0)
                        mma_k32(part[mt][nt], aop, bop[nt]);
                    else
                        mma_k32_acc(part[mt][nt], aop, bop[nt]);
% else
                    float t[4];
                    mma_k32(t, aop, bop[nt]);
#pragma unroll
                    for (int j = 0; j < 4; ++j)
%   if MX then
                        acc[mt][nt][j] = fmaf(t[j] * sa_f[mt][j >> 1], sb_f[nt][j & 1], acc[mt][nt][j]);
%   elseif BLOCK then
                        acc[mt][nt][j] = fmaf(t[j], s_blk[mt][j >> 1], acc[mt][nt][j]);
%   else
                        acc[mt][nt][j] += t[j];
%   end
% end
                }
            }
        }
% if PART then
        // Promote the tile's partial sums (one 128-block holds the whole tile).
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j)
%   if BLOCK then
                    acc[mt][nt][j] = fmaf(part[mt][nt][j], s_blk[mt][j >> 1], acc[mt][nt][j]);
%   else
                    acc[mt][nt][j] += part[mt][nt][j];
%   end
% end
    }

% if SPLIT then
    // K split across the cluster (qc::cluster_sum): rank 0 adds the other ranks' f32 sums,
    // passed through their shared memory, in rank order; then it alone goes on.
    if (!qc::cluster_sum<MT * NT * 4, THREADS>(&acc[0][0][0], smem0, tid))
        return;
% end
    // Epilogue. acc[mt][nt] holds rows g and g+8, columns 2*tig and +1.  Each value is
    // finished in f32 in place, scales and bias past M or N reading as 0, then staged out
    // through shared memory (gemm_common.cuh), which writes nothing past M or N.
    finish_tile(acc, acc, as_is(), m0 + warp_m * WTM + g, n0 + warp_n * WTN + tig * 2, M, N, p);
    qc::main_loop_done(); // the epilogue reuses the ring
    qc::stage_out<BM, BN, WM, WN, $(NP)>(acc, smem0, static_cast<out_t *>(p.d), p.ldd, m0, n0, M, N,
                                         tid);
}
