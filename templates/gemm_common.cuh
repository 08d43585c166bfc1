// gemm_common.cuh — pieces every GEMM template shares: the kernel parameter (the ABI of
// docs/TEMPLATES.md), small types, shared-memory addresses, cp.async, ldmatrix, and the
// output conversion, store and bias read for OUT.  Include with `% include("gemm_common.cuh")`,
// after the family's plan: it first writes the plan's launch needs.

// Launch needs, from the family's plan (docs/TEMPLATES.md):
// qjit: threads=$(threads) smem=$(smem) k_multiple=$(k_multiple) ld_multiple=$(ld_multiple) align=$(align)$(persistent and " persistent=" .. persistent or "")
% if cluster_k and cluster_k > 1 then
// qjit: cluster_k=$(cluster_k) k_chunk=$(k_chunk)
% end

struct qjit_params {
    const void *a, *b;
    void *d;
    const void *bias;
    const void *scale_a, *scale_b, *zeros_b;
    long long m, n, k, lda, ldb, ldd;
    unsigned long long flags; // how the kernel was launched: qc::EARLY_START
};
static_assert(sizeof(qjit_params) == $(PARAMS_BYTES), "qjit_params: the library's qjit_kernel_params");

namespace qc {

// Programmatic dependent launch (sm_90): pdl_wait waits until the kernel before this one in
// the stream has finished and its writes are visible; every GEMM calls it before it reads
// anything that kernel could have written (gemv loads its first weights before it).
// pdl_launch lets the kernel after this one be scheduled early (it waits in turn): each GEMM
// calls it after its main loop (a persistent one after its last tile's), so that under a
// launch that asks for an early start (QJIT_PDL=1) the next kernel's launch and set-up
// overlap this one's epilogue and drain, not its stream of loads.  Without that launch
// attribute both are no-ops.
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// p.flags bit: the launch asked for that early start (QJIT_KERNEL_EARLY), so pdl_wait may
// wait for the whole kernel before this one
constexpr unsigned long long EARLY_START = 1;
// p.flags bit: the kernel before writes none of B, scale_b and zeros_b (QJIT_KERNEL_EARLY_WEIGHTS:
// QJIT_PDL=1, or a quantizer's GEMM in qjit_linear_launch), so they may be read before the
// wait; without it a kernel reads nothing before pdl_wait
constexpr unsigned long long EARLY_WEIGHTS = 2;
// bytes (a multiple of 16) from p (16-byte aligned) asked into L2, no register written and
// nothing waited for (sm_90: one bulk prefetch; a hint, elsewhere nothing).
__device__ __forceinline__ void prefetch_l2(const void *p, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// An int32 x with |x| <= 2^22 as a float, exactly: added to the bits of 1.5·2^23 it reads
// as the float 1.5·2^23 + x.  An IADD and an FADD, where I2F issues at a quarter of their rate.
__device__ __forceinline__ float exact_f32(int x) { return __int_as_float(x + 0x4B400000) - 12582912.0f; }

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
// One byte of what the kernel before this one may have written (A's scales): a coherent load,
// never the read-only path (ld.global.nc, __ldg), whose data must not change while the
// kernel runs; under an early start the kernel before runs during this one's life (read
// that way, gemv's tokens held the previous graph replay's on the H100).
__device__ __forceinline__ u32 ld_u8_coherent(const void *p)
{
    u32 r;
    asm volatile("ld.global.u8 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}
% if OUT == "f32" then
typedef float out_t;
% else
typedef u16 out_t; // $(OUT) bits
% end

__device__ __forceinline__ u32 smem_addr(const void *p)
{
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16 bytes of shared memory at a (asm volatile: kept after the waits and barriers before it)
__device__ __forceinline__ uint4 lds16(u32 a)
{
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a));
    return r;
}

// src_bytes 0 reads nothing and fills the 16 bytes with zeros (tails of M, N and K).
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 4 bytes (dst and src 4-byte aligned), zeros where src_bytes is 0
__device__ __forceinline__ void cp_async4(u32 dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// The end of a multistage main loop: the ring's last copies (the zero fills past K) have
// landed, every load is issued and used so the next kernel may be scheduled (QJIT_PDL=1: its
// launch and first weights overlap this epilogue, not the loads), and a barrier hands the
// ring to the epilogue.
__device__ __forceinline__ void main_loop_done()
{
    cp_async_wait<0>();
    pdl_launch();
    __syncthreads();
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 (&r)[2], u32 addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// Staged epilogue.  The tile's values are written to shared memory as OUT (one unrolled
// pass over the accumulators, no branches), then leave in 16-byte chunks through one rolled
// loop that checks bounds per chunk.  Branch-free staging keeps the generated code small,
// which is most of a kernel's compile time, and the chunked stores coalesce.

// Writes x, y as two adjacent OUT elements at shared address `addr`.
__device__ __forceinline__ void stage2(u32 addr, float x, float y)
{
% if OUT == "f32" then
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(addr), "f"(x), "f"(y) : "memory");
% else
    u32 r; // the first operand goes to the upper half
    asm("cvt.rn.$(OUT)x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(r) : "memory");
% end
}

// Writes a 16x16 block of accumulators as OUT at shared address `tl`, its top-left corner,
// rows `pitch` bytes apart.  c0 is the m16n8 fragment of columns 0-7 and c1 that of columns
// 8-15: c[0], c[1] are row lane/4 and c[2], c[3] row lane/4 + 8, at columns 2*(lane%4) and
// +1.  On sm_90 a 16-bit OUT leaves in one stmatrix.x4, whose four 8x8 matrices are exactly
// these fragments' halves (lane l gives the address of row l%16, columns 8*(l/16)): one
// instruction where stage2 takes eight, which also shortens the compile.
__device__ __forceinline__ void stage16x16(u32 tl, int pitch, const float *c0, const float *c1,
                                           int lane)
{
% if OUT ~= "f32" and ARCH >= 90 then
    asm volatile("{\n.reg .b32 r<4>;\n"
                 "cvt.rn.$(OUT)x2.f32 r0, %2, %1;\n"
                 "cvt.rn.$(OUT)x2.f32 r1, %4, %3;\n"
                 "cvt.rn.$(OUT)x2.f32 r2, %6, %5;\n"
                 "cvt.rn.$(OUT)x2.f32 r3, %8, %7;\n"
                 "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {r0, r1, r2, r3};\n}\n"
                 :: "r"(tl + (lane & 15) * pitch + (lane >> 4) * 16), "f"(c0[0]), "f"(c0[1]),
                    "f"(c0[2]), "f"(c0[3]), "f"(c1[0]), "f"(c1[1]), "f"(c1[2]), "f"(c1[3])
                 : "memory");
% else
    const u32 a = tl + (lane >> 2) * pitch + (lane & 3) * 2 * (int)sizeof(out_t);
    stage2(a, c0[0], c0[1]);
    stage2(a + 8 * pitch, c0[2], c0[3]);
    stage2(a + 8 * (int)sizeof(out_t), c1[0], c1[1]);
    stage2(a + 8 * pitch + 8 * (int)sizeof(out_t), c1[2], c1[3]);
% end
}

constexpr int OUT_VEC = 16 / (int)sizeof(out_t); // elements per 16-byte chunk

// Copies a staged ROWS x COLS slab from shared memory (row pitch `pitch` bytes, starting at
// `buf`) to D.  Slab column c is global column col0 + (c / SEG) * SEG_STRIDE + c % SEG: the
// slab may gather SEG-wide column runs of several warps.  Row r is global row row0 + r.
// A chunk goes out as one 16-byte store when it is inside M and N and D allows it (`vec`);
// otherwise element by element inside M and N.  The caller synchronizes around it.
template <int ROWS, int COLS, int SEG, int SEG_STRIDE, int NTHREADS>
__device__ __forceinline__ void copy_out(u32 buf, int pitch, out_t *D, long long ldd, int row0,
                                         int col0, int M, int N, bool vec, int tid)
{
    static_assert(SEG % OUT_VEC == 0 && COLS % SEG == 0, "copy_out: runs must be whole chunks");
    constexpr int CH = COLS / OUT_VEC; // chunks per slab row
#pragma unroll 1
    for (int i = tid; i < ROWS * CH; i += NTHREADS) {
        const int r = i / CH, c = (i % CH) * OUT_VEC;
        const int row = row0 + r;
        if (row >= M)
            continue;
        const int col = col0 + (c / SEG) * SEG_STRIDE + c % SEG;
        const u32 src = buf + r * pitch + c * (int)sizeof(out_t);
        out_t *dst = D + (long long)row * ldd + col;
        if (vec && col + OUT_VEC <= N) {
            u32 v0, v1, v2, v3;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(src));
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n"
                         :: "l"(dst), "r"(v0), "r"(v1), "r"(v2), "r"(v3) : "memory");
        } else {
#pragma unroll 1
            for (int e = 0; e < OUT_VEC && col + e < N; ++e) {
% if OUT == "f32" then
                float v;
                asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(src + 4 * e));
% else
                u16 v;
                asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(v) : "r"(src + 2 * e));
% end
                dst[e] = v;
            }
        }
    }
}

// The epilogue of the mma.sync templates, after the main loop is done with the ring (the
// caller synchronizes first): v holds each warp's finished values in f32, m16n8 fragments
// (v[mt][nt]: rows lane/4 and +8 of m-tile mt, columns 2*(lane%4) and +1 of n8 tile nt).
// They are written as OUT to shared memory from smem0 on, NP passes of the warps'
// WTN/NP-wide column runs (gemm_stage_plan.cuh sizes them), each copied out to D.
template <int BM, int BN, int WM, int WN, int NP, int MT, int NT>
__device__ __forceinline__ void stage_out(const float (&v)[MT][NT][4], u32 smem0, out_t *D,
                                          long long ldd, int m0, int n0, int M, int N, int tid)
{
    constexpr int WTM = BM / WM, WTN = BN / WN, SEG = WTN / NP;
    constexpr int PITCH = WN * SEG * (int)sizeof(out_t) + 16;
    static_assert(MT * 16 == WTM && NT * 8 == WTN && (NT / NP) % 2 == 0, "stage_out: warp tile");
    const int lane = tid & 31, warp = tid >> 5, warp_m = warp / WN, warp_n = warp % WN;
    const bool vec = ldd * (long long)sizeof(out_t) % 16 == 0 && (u64)D % 16 == 0;
    const u32 warp_stage = smem0 + warp_m * WTM * PITCH + warp_n * SEG * (int)sizeof(out_t);
#pragma unroll
    for (int q = 0; q < NP; ++q) {
#pragma unroll
        for (int j = 0; j < NT / NP; j += 2)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                stage16x16(warp_stage + mt * 16 * PITCH + j * 8 * (int)sizeof(out_t), PITCH,
                           v[mt][q * (NT / NP) + j], v[mt][q * (NT / NP) + j + 1], lane);
        __syncthreads();
        copy_out<BM, WN * SEG, SEG, WTN, 32 * WM * WN>(smem0, PITCH, D, ldd, m0, n0 + q * SEG, M,
                                                       N, vec, tid);
        if (q + 1 < NP)
            __syncthreads();
    }
}

// Two adjacent outputs of one row, x and y, finished in f32 as DESIGN §2's epilogue says:
// times the A scale (tensor, row), times the B scales of their columns (tensor, col), plus
// the bias, each step rounded alone; a step the descriptor's modes do not have is skipped
// (its argument unused).  Every GEMM's epilogue goes through here.
__device__ __forceinline__ void finish2(float &x, float &y, float sa, float sb0, float sb1, float b0,
                                        float b1)
{
% if SA == "tensor" or SA == "row" then
    x = __fmul_rn(x, sa);
    y = __fmul_rn(y, sa);
% end
% if SB == "tensor" or SB == "col" then
    x = __fmul_rn(x, sb0);
    y = __fmul_rn(y, sb1);
% end
% if BIAS then
    x = __fadd_rn(x, b0);
    y = __fadd_rn(y, b1);
% end
}

% if SB == "group" then
// A group scale as stored (GS: f32, f16 or bf16) and as f32.
%   if GS == "f32" then
typedef float gs_t;
__device__ __forceinline__ float gs_f32(float s) { return s; }
%   elseif GS == "f16" then
typedef u16 gs_t;
__device__ __forceinline__ float gs_f32(u16 s)
{
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(s));
    return f;
}
%   else
typedef u16 gs_t;
__device__ __forceinline__ float gs_f32(u16 s) { return __uint_as_float((u32)s << 16); }
%   end
% end

// bias[n] (of type OUT) as f32.
__device__ __forceinline__ float bias_at(const out_t *bias, long long n)
{
% if OUT == "f32" then
    return bias[n];
% elseif OUT == "f16" then
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(bias[n]));
    return f;
% else
    return __uint_as_float((u32)bias[n] << 16); // bf16 is the top half of an f32
% end
}

// Every element of an accumulator array (of any rank) set to v, or to zero.
template <class T, class V> __device__ __forceinline__ void fill(T &x, V v) { x = v; }
template <class T, int N, class V> __device__ __forceinline__ void fill(T (&a)[N], V v)
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        fill(a[i], v);
}
template <class T> __device__ __forceinline__ void zero(T &a) { fill(a, 0); }

// bias[col] and bias[col + 1] in f32, 0 past N: the columns of one accumulator pair.
__device__ __forceinline__ void bias_pair(const out_t *bias, int col, int N, float &b0, float &b1)
{
    b0 = col < N ? bias_at(bias, col) : 0.f;
    b1 = col + 1 < N ? bias_at(bias, col + 1) : 0.f;
}

// finish2's factors, read from the launch's parameter as the descriptor's modes have them: the
// A scale of row r (tensor: its one value; row: the row's, 0 past M), the B scales and the
// bias of columns col and col + 1 (0 past N).  A step the modes lack gets 0 (finish2 skips it).
// The scalars (tensor modes) are read once, where the epilogue makes this.
struct factors {
    const float *sa, *sb;
    const out_t *bias;
    float sa_t, sb_t;
    __device__ __forceinline__ explicit factors(const qjit_params &p)
        : sa(static_cast<const float *>(p.scale_a)), sb(static_cast<const float *>(p.scale_b)),
          bias(static_cast<const out_t *>(p.bias)), sa_t(0.f), sb_t(0.f)
    {
% if SA == "tensor" then
        sa_t = sa[0];
% end
% if SB == "tensor" then
        sb_t = sb[0];
% end
    }
    __device__ __forceinline__ float row(int r, int M) const
    {
% if SA == "row" then
        return r < M ? sa[r] : 0.f;
% else
        return sa_t;
% end
    }
    // The A scales of a thread's accumulator rows, read once: rows row0 + i·STEP and 8 below
    // it, for i < R (an mma.sync fragment's two rows per 16-row tile, STEP 16; a wgmma's per
    // 64-row slice, STEP 64).
    template <int R, int STEP> __device__ __forceinline__ void rows(float (&s)[R][2], int row0, int M) const
    {
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                s[i][h] = row(row0 + i * STEP + h * 8, M);
    }
    __device__ __forceinline__ void cols(int col, int N, float &s0, float &s1, float &b0, float &b1) const
    {
% if SB == "col" then
        s0 = col < N ? sb[col] : 0.f;
        s1 = col + 1 < N ? sb[col + 1] : 0.f;
% else
        s0 = s1 = sb_t;
% end
% if BIAS then
        bias_pair(bias, col, N, b0, b1);
% else
        b0 = b1 = 0.f;
% end
    }
};

// K split across a cluster of gridDim.z CTAs (sm_90, the launch's cluster dimension), each
// having summed its share of K into v[NV] (its f32 or exact int32 accumulators, thread tid
// of THREADS): every rank leaves them in its shared memory at smem0 (free by now; NV·THREADS·4
// bytes), value j of thread tid at word j·THREADS + tid, and rank 0 adds ranks 1, 2, ... in
// that order, so the sum does not depend on timing (int32 sums are exact in any order).  The
// second cluster barrier keeps each rank's shared memory alive until rank 0 has read it.
// True where the tile is then complete (rank 0, or no split): that CTA goes on to the
// epilogue, the others return.  With a split, it first waits for the block's cp.async copies
// and synchronizes the block.
__device__ __forceinline__ void cluster_put(u32 at, float x) { asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(at), "f"(x) : "memory"); }
__device__ __forceinline__ void cluster_put(u32 at, int x) { asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(x) : "memory"); }
__device__ __forceinline__ void cluster_add(float &v, u32 at)
{
    float x;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(x) : "r"(at) : "memory");
    v += x;
}
__device__ __forceinline__ void cluster_add(int &v, u32 at)
{
    int x;
    asm volatile("ld.shared::cluster.b32 %0, [%1];\n" : "=r"(x) : "r"(at) : "memory");
    v += x;
}
// Every thread of every CTA of the cluster arrives, then waits for the others.  ALIGNED: the
// threads of each warp get there together (else they may arrive apart, as the TMA
// producer's warp does).
template <bool ALIGNED = true> __device__ __forceinline__ void cluster_sync()
{
    if (ALIGNED)
        asm volatile("barrier.cluster.arrive.release.aligned;\n"
                     "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    else
        asm volatile("barrier.cluster.arrive.release;\n"
                     "barrier.cluster.wait.acquire;\n" ::: "memory");
}
template <int NV, int THREADS, class T>
__device__ __forceinline__ bool cluster_sum(T *v, u32 smem0, int tid)
{
    if (gridDim.z <= 1)
        return true;
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < NV; ++j)
        cluster_put(smem0 + (j * THREADS + tid) * 4, v[j]);
    cluster_sync();
    if (blockIdx.z == 0)
        for (int r = 1; r < (int)gridDim.z; ++r) {
            u32 base;
            asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(base) : "r"(smem0), "r"(r));
#pragma unroll
            for (int j = 0; j < NV; ++j)
                cluster_add(v[j], base + (j * THREADS + tid) * 4);
        }
    cluster_sync();
    return blockIdx.z == 0;
}

} // namespace qc
