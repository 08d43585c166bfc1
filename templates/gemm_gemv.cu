// gemm_gemv.cu — the decode kernel (M ≤ 32): a GEMV at heart on mma.sync, sm_80 … sm_90a.
// f16/bf16 A × B of A's type, or × s4/u4 (col, group of 128 or 256, zeros for u4) or s8
// (col, tensor) weights.
//
// The weights are mma's A operand and the tokens its B operand (D^T = B·A^T): a warp tile is
// 16 weight rows × 8 tokens, so at M = 1 an mma wastes 7 of 8 token columns and none of the
// weights, which are what a decode step streams.  Each thread of a quad (lane%4 = c) loads one
// 16-byte chunk of K of its two rows (lane/4 and +8) straight from global memory into
// registers: a step is four chunks of each of the tile's 16 rows (BK = 4 chunks: 32 k of a
// 16-bit B, 64 of s8, 128 of 4-bit).  The order of k inside a chunk is free as long as the
// token fragment uses the same one, so each thread dequantizes its own chunk into mma
// fragments with a few LOP3/PRMT per 8 values, and the token values (A, read through L1) are
// permuted to match.  Nothing goes through shared memory but the final sum.
//
// Bytes in flight: each warp keeps STAGES steps of loads outstanding in registers (a step is
// 16 rows × 64 bytes = 1 KB of B), used in place and reloaded STAGES·W steps ahead, in a
// straight-line loop body (steps past K load zeros), so no instruction reads a load before
// its step.  W warps of a CTA take the steps of K round-robin and their partial tiles are
// summed in shared memory in warp order, so a result does not depend on timing.
//
// Scales: col and tensor multiply the f32 sum in the epilogue (B̂ = q exactly in A's type).
// group needs each step inside one group (group 128 or 256 for 4-bit B): the step's mmas sum
// q exactly into f32 partials, which are folded in times s; with zeros, minus z times the
// step's sums of A (an mma against ones), so fractional zero points stay exact too.
//
// Configuration: tile=BMxBNxBK is tokens × weight rows × K per step (BM 8, 16 or 32; BN 16 or
// 32; BK as above); warps=1xW: W warps along K; stages: steps in flight per warp.
// Block: 32·W threads; shared memory (W − 1)·BN·BM·4 bytes for the sum.  Grid: N/BN × M/BM.
% -- qjit family: name=gemv id=11 order=5
% include("gemm_stage_plan.cuh")
% -- k per 16-byte chunk of B, and the step (four chunks)
% local function chunk_k() return B == "s8" and 16 or (B == "s4" or B == "u4") and 32 or 8 end
% family {
%   floor = 80,
%   measured = true,
%   serves = function()
%     if not one_of(A, "f16", "bf16") or SA ~= "none" then return false end
%     if B == A then return SB == "none" end
%     if B == "s4" or B == "u4" then return SB == "col" or (SB == "group" and GROUP % 128 == 0) end
%     return B == "s8" and (SB == "col" or SB == "tensor")
%   end,
%   -- Up to M = 16 under auto (a tile of 8 tokens to M = 8, 16 above); the rest of decode
%   -- and prefill go to the tile families, listed after this one.  Measured on the H100 on the
%   -- Llama 3 8B layers at M = 1 (docs/NOTES.md, "The decode kernel"): bf16 1x4 warps, 8
%   -- steps in flight, 0.87-1.15x cuBLAS's time; s4 g128 1x4, 4 steps, 1.7-1.9x the mma_wq decode tile.
%   default = function(m)
%     if (m == 0 or m > 16) and (not NAMED or m > 32) then return nil end
%     local bm = (m ~= 0 and m <= 8) and 8 or 16
%     local c = config(bm, 16, 4 * chunk_k(), 1, 4, (B == A or B == "s8") and (bm == 8 and 8 or 6) or (bm == 8 and 4 or 2))
%     if BM ~= 0 then c.bm, c.bn, c.bk = BM, BN, BK end
%     if WM ~= 0 then c.wm, c.wn = WM, WN end
%     if STAGES ~= 0 then c.stages = STAGES end
%     return c
%   end,
%   space = function(name)
%     if name ~= "small-m" then return nil end
%     local bk, deep = 4 * chunk_k(), (B == A or B == "s8")
%     local s1, s2 = deep and 8 or 4, deep and 4 or 2
%     return {config(8, 16, bk, 1, 4, s1), config(8, 16, bk, 1, 4, s2), config(8, 16, bk, 1, 8, s2),
%             config(8, 32, bk, 1, 4, s2), config(16, 16, bk, 1, 4, s2), config(16, 16, bk, 1, 4, s1),
%             config(32, 16, bk, 1, 4, 2)}
%   end,
%   plan = function()
%     local serves_it = one_of(A, "f16", "bf16") and SA == "none" and
%       ((B == A and SB == "none") or (one_of(B, "s4", "u4") and (SB == "col" or (SB == "group" and GROUP % 128 == 0))) or
%        (B == "s8" and one_of(SB, "col", "tensor")))
%     if not serves_it then
%       unsupported(string.format("kernel gemv takes a=f16|bf16 sa=none with b of a's type (no scales), b=s4|u4 sb=col|group:128|group:256, or b=s8 sb=col|tensor (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if ZEROS and not (B == "u4" and SB == "group") then unsupported("kernel gemv: zero points need b=u4 sb=group") end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("kernel gemv: out must be f16, bf16 or f32") end
%     if ARCH < 80 then unsupported("kernel gemv needs sm_80 or newer") end
%     local KC = chunk_k()
%     if BK ~= 4 * KC then unsupported(string.format("kernel gemv: a step of b=%s is BK=%d (four 16-byte chunks), not %d", B, 4 * KC, BK)) end
%     if not one_of(BM, 8, 16, 32) then unsupported("kernel gemv: BM (tokens a tile) must be 8, 16 or 32, not " .. BM) end
%     if not one_of(BN, 16, 32) then unsupported("kernel gemv: BN (weight rows a tile) must be 16 or 32, not " .. BN) end
%     if WM ~= 1 or not one_of(WN, 1, 2, 4, 8) then unsupported(string.format("kernel gemv: warps=1xW, W = 1, 2, 4 or 8 warps along K (warps=%dx%d)", WM, WN)) end
%     if STAGES < 1 or STAGES > 8 then unsupported("kernel gemv: stages (steps in flight per warp) must be 1..8, not " .. STAGES) end
%     if SPLIT_K ~= 1 then unsupported("kernel gemv splits K across the warps of a CTA, not across CTAs (split=" .. SPLIT_K .. ")") end
%     local NT, RB = BM // 8, BN // 16
%     -- registers: the ring (B chunks, token chunks, scales), accumulators, fragments
%     local REGS = STAGES * (8 * RB + NT * KC // 2 + (SB == "group" and 2 * RB or 0)) + RB * NT * 4 * (SB == "group" and 2 or 1) + 40
%     if REGS > 255 then unsupported(string.format("kernel gemv: tile %dx%dx%d with %d stages needs about %d registers a thread", BM, BN, BK, STAGES, REGS)) end
%     local THREADS = 32 * WN
%     -- 16-byte chunks: K a multiple of a chunk (a chunk is all in or all out); rows of A and
%     -- B 16-byte aligned (lda % 8; ldb % 32 for 4-bit, % 16 for s8, % 8 for 16-bit)
%     return {threads = THREADS, smem = math.max(16, (WN - 1) * BN * BM * 4), k_multiple = KC,
%             ld_multiple = KC, align = 16, KC = KC, NT = NT, RB = RB,
%             Q4 = one_of(B, "s4", "u4"), FOLD = SB == "group"}
%   end,
% }
% include("gemm_common.cuh")

namespace {

using qc::out_t;
using qc::u16;
using qc::u32;

constexpr int KC = $(KC), STEP = 4 * KC;  // k per 16-byte chunk of B, per step
constexpr int NT = $(NT), RB = $(RB);     // token tiles of 8, row blocks of 16
constexpr int W = $(WN), D = $(STAGES);   // warps along K, steps in flight per warp
constexpr int RBYTES_NUM = $(Q4 and 1 or (B == "s8" and 1 or 2)), RBYTES_DEN = $(Q4 and 2 or 1); // bytes a value

// Loads that leave zeros where !p.  The zeros are written in the same asm, so nothing reads
// the destination between the load's issue and its use (a select after a load would wait
// for it, which serializes the ring).  B bypasses L1 (read once); A and scales use it.
__device__ __forceinline__ uint4 ld16_stream(const void *ptr, bool p)
{
    uint4 r;
    asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"
                 "mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
                 "@q ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(ptr), "r"((int)p));
    return r;
}
__device__ __forceinline__ uint4 ld16(const void *ptr, bool p)
{
    uint4 r;
    asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"
                 "mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
                 "@q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(ptr), "r"((int)p));
    return r;
}
% if FOLD then
using qc::gs_t;
using qc::gs_f32;
%   if GS == "f32" then
__device__ __forceinline__ float ld_scale(const float *ptr, bool p)
{
    float r;
    asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\nmov.b32 %0, 0;\n"
                 "@q ld.global.nc.f32 %0, [%1];\n}\n" : "=f"(r) : "l"(ptr), "r"((int)p));
    return r;
}
%   else
__device__ __forceinline__ u16 ld_scale(const u16 *ptr, bool p)
{
    u16 r;
    asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\nmov.b16 %0, 0;\n"
                 "@q ld.global.nc.u16 %0, [%1];\n}\n" : "=h"(r) : "l"(ptr), "r"((int)p));
    return r;
}
%   end
% end

% if OUT ~= "f32" then
__device__ __forceinline__ out_t cvt_out(float x)
{
    out_t r;
    asm("cvt.rn.$(OUT).f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
% end

__device__ __forceinline__ void mma(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.$(A).$(A).f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel)
{
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// One chunk of a weight row as KC/2 pairs of A's type, p[i] standing for k positions
// order(2i) and order(2i+1) of the chunk (the token side permutes to match: tok_pairs).
__device__ __forceinline__ void weight_pairs(const uint4 &w, u32 (&p)[KC / 2])
{
    const u32 v[4] = {w.x, w.y, w.z, w.w};
% if B == A then
    // as stored: pair i is k 2i, 2i+1
#pragma unroll
    for (int i = 0; i < 4; ++i)
        p[i] = v[i];
% elseif Q4 then
    // 8 nibbles a word, k 8i..8i+7: (nibble | magic) is magic + n exactly in A's type
    // (bf16 128, f16 1024, whose last mantissa bits n fills), and one fma takes the magic
    // (and for s4 the bias 8 of n ^ 8) off: pairs (k, k+4) of the word, exact integers.
%   local magic, off = A == "bf16" and "0x43004300u" or "0x64006400u", nil
%   if B == "s4" then off = A == "bf16" and "0xc308c308u" or "0xe408e408u" else off = A == "bf16" and "0xc300c300u" or "0xe400e400u" end
%   local one = A == "bf16" and "0x3f803f80u" or "0x3c003c00u"
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 x = v[i]$(B == "s4" and " ^ 0x88888888u" or "");
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u32 t;
            asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(t) : "r"(x >> (4 * j)), "r"(0x000f000fu), "r"($(magic)));
            asm("fma.rn.$(A)x2 %0, %1, %2, %3;\n" : "=r"(p[4 * i + j]) : "r"(t), "r"($(one)), "r"($(off)));
        }
    }
% else
    // s8, k 4i..4i+3 a word, pairs (k, k+1) in order: each byte u = q + 128 becomes the f32
    // 2^23 + u (PRMT into the mantissa), less 2^23 + 128 is q exactly, two of them rounded
    // (exactly) to a pair of A's type.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 x = v[i] ^ 0x80808080u;
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            f[j] = __uint_as_float(prmt(x, 0x4b00u, 0x5440u | j)) - 8388736.f;
        asm("cvt.rn.$(A)x2.f32 %0, %1, %2;\n" : "=r"(p[2 * i]) : "f"(f[1]), "f"(f[0]));
        asm("cvt.rn.$(A)x2.f32 %0, %1, %2;\n" : "=r"(p[2 * i + 1]) : "f"(f[3]), "f"(f[2]));
    }
% end
}

// A token's KC values of the chunk (a, as loaded: pairs k 2i, 2i+1) in weight_pairs' order.
__device__ __forceinline__ void tok_pairs(const uint4 (&a)[KC / 8], u32 (&t)[KC / 2])
{
#pragma unroll
    for (int i = 0; i < KC / 8; ++i) {
% if Q4 then
        t[4 * i + 0] = prmt(a[i].x, a[i].z, 0x5410u); // k 0, 4
        t[4 * i + 1] = prmt(a[i].x, a[i].z, 0x7632u); // k 1, 5
        t[4 * i + 2] = prmt(a[i].y, a[i].w, 0x5410u); // k 2, 6
        t[4 * i + 3] = prmt(a[i].y, a[i].w, 0x7632u); // k 3, 7
% else
        t[4 * i + 0] = a[i].x;
        t[4 * i + 1] = a[i].y;
        t[4 * i + 2] = a[i].z;
        t[4 * i + 3] = a[i].w;
% end
    }
}

} // namespace

extern "C" __global__ void __launch_bounds__($(threads)) qjit_gemm_kernel(const qjit_params p)
{
    extern __shared__ __align__(16) float red[];
    qc::pdl_enter();
    const int M = (int)p.m, N = (int)p.n, K = (int)p.k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int n0 = blockIdx.x * (16 * RB), m0 = blockIdx.y * (8 * NT);
    const int nsteps = (K + STEP - 1) / STEP;
    const long long row_bytes = p.ldb * RBYTES_NUM / RBYTES_DEN;

    // this thread's weight rows n0 + 16r + g + 8h, chunk c of each step; token rows m0 + g + 8t
    const char *brow[RB][2];
    bool bok[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * r + g + 8 * h;
            bok[r][h] = n < N;
            brow[r][h] = static_cast<const char *>(p.b) + (long long)(n < N ? n : 0) * row_bytes + c * 16;
        }
    const qc::u16 *arow[NT];
    bool aok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const int m = m0 + g + 8 * t;
        aok[t] = m < M;
        arow[t] = static_cast<const qc::u16 *>(p.a) + (long long)(m < M ? m : 0) * p.lda + c * KC;
    }
% if FOLD then
    const int groups = K / $(GROUP);                 // scale entries a row
    const gs_t *srow[RB][2];
%   if ZEROS then
    const gs_t *zrow[RB][2];
%   end
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long at = (long long)(bok[r][h] ? n0 + 16 * r + g + 8 * h : 0) * groups;
            srow[r][h] = static_cast<const gs_t *>(p.scale_b) + at;
%   if ZEROS then
            zrow[r][h] = static_cast<const gs_t *>(p.zeros_b) + at;
%   end
        }
% end

    // the ring: D steps of B chunks, token chunks (and group scales) in registers
    uint4 wb[D][RB][2];
    uint4 ab[D][NT][KC / 8];
% if FOLD then
    gs_t sb[D][RB][2];
%   if ZEROS then
    gs_t zb[D][RB][2];
%   end
% end
    auto load = [&](int d, int s) {
        const bool in = s * STEP + c * KC < K; // this thread's chunk of step s
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                wb[d][r][h] = ld16_stream(brow[r][h] + (long long)s * 64, in && bok[r][h]);
% if FOLD then
                const int grp = s * STEP / $(GROUP);
                sb[d][r][h] = ld_scale(srow[r][h] + grp, s < nsteps && bok[r][h]);
%   if ZEROS then
                zb[d][r][h] = ld_scale(zrow[r][h] + grp, s < nsteps && bok[r][h]);
%   end
% end
            }
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int i = 0; i < KC / 8; ++i)
                ab[d][t][i] = ld16(arow[t] + (long long)s * STEP + 8 * i, in && aok[t]);
    };

    float acc[RB][NT][4];
    qc::zero(acc);
#pragma unroll
    for (int d = 0; d < D; ++d)
        load(d, warp + d * W);
    // A straight-line body: slot d is used in place, then reloaded D·W steps ahead.
    for (int s0 = warp; s0 < nsteps; s0 += D * W) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            u32 tp[NT][KC / 2];
#pragma unroll
            for (int t = 0; t < NT; ++t)
                tok_pairs(ab[d][t], tp[t]);
% if ZEROS then
            // the step's sums of A, per token: an mma of ones against the token pairs
            float asum[NT][4];
            qc::zero(asum);
            const u32 ones = $(A == "bf16" and "0x3f803f80u" or "0x3c003c00u");
#pragma unroll
            for (int t = 0; t < NT; ++t)
#pragma unroll
                for (int j = 0; j < KC / 4; ++j)
                    mma(asum[t], ones, ones, ones, ones, tp[t][2 * j], tp[t][2 * j + 1]);
% end
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                u32 w0[KC / 2], w1[KC / 2];
                weight_pairs(wb[d][r][0], w0);
                weight_pairs(wb[d][r][1], w1);
% if FOLD then
                float part[NT][4];
                qc::zero(part);
% end
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int j = 0; j < KC / 4; ++j)
                        mma($(FOLD and "part[t]" or "acc[r][t]"), w0[2 * j], w1[2 * j], w0[2 * j + 1], w1[2 * j + 1], tp[t][2 * j], tp[t][2 * j + 1]);
% if FOLD then
                // fold the step (inside one group) in: acc += s·(part − z·asum)
                const float s_g = gs_f32(sb[d][r][0]), s_g8 = gs_f32(sb[d][r][1]);
%   if ZEROS then
                const float z_g = gs_f32(zb[d][r][0]), z_g8 = gs_f32(zb[d][r][1]);
%   end
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float sc = i < 2 ? s_g : s_g8;
%   if ZEROS then
                        const float v = __fmaf_rn(-(i < 2 ? z_g : z_g8), asum[t][i], part[t][i]);
%   else
                        const float v = part[t][i];
%   end
                        acc[r][t][i] = __fmaf_rn(sc, v, acc[r][t][i]);
                    }
% end
            }
            load(d, s0 + d * W + D * W);
        }
    }

    // the W warps' tiles summed in warp order by warp 0
    if (W > 1) {
        constexpr int NV = RB * NT * 4;
        if (warp > 0)
#pragma unroll
            for (int v = 0; v < NV; ++v)
                red[((warp - 1) * NV + v) * 32 + lane] = (&acc[0][0][0])[v];
        __syncthreads();
        if (warp > 0)
            return;
        for (int w = 1; w < W; ++w)
#pragma unroll
            for (int v = 0; v < NV; ++v)
                (&acc[0][0][0])[v] += red[((w - 1) * NV + v) * 32 + lane];
    }

    // epilogue: acc[r][t][i] is row n0 + 16r + g + 8(i/2), token m0 + 8t + 2c + i%2; rows g
    // and g + 8 of one token go through finish2 together
    out_t *Dp = static_cast<out_t *>(p.d);
% if SB == "tensor" then
    const float sb_t = static_cast<const float *>(p.scale_b)[0];
% end
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int na = n0 + 16 * r + g, nb = na + 8;
        float s0 = 0.f, s1 = 0.f, b0 = 0.f, b1 = 0.f;
% if SB == "col" then
        s0 = na < N ? static_cast<const float *>(p.scale_b)[na] : 0.f;
        s1 = nb < N ? static_cast<const float *>(p.scale_b)[nb] : 0.f;
% elseif SB == "tensor" then
        s0 = s1 = sb_t;
% end
% if BIAS then
        b0 = na < N ? qc::bias_at(static_cast<const out_t *>(p.bias), na) : 0.f;
        b1 = nb < N ? qc::bias_at(static_cast<const out_t *>(p.bias), nb) : 0.f;
% end
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int m = m0 + 8 * t + 2 * c + e;
                float x = acc[r][t][e], y = acc[r][t][2 + e];
                qc::finish2(x, y, 0.f, s0, s1, b0, b1);
                if (m < M) {
% if OUT == "f32" then
                    if (na < N) Dp[(long long)m * p.ldd + na] = x;
                    if (nb < N) Dp[(long long)m * p.ldd + nb] = y;
% else
                    if (na < N) Dp[(long long)m * p.ldd + na] = cvt_out(x);
                    if (nb < N) Dp[(long long)m * p.ldd + nb] = cvt_out(y);
% end
                }
            }
    }
}
