// gemm_common.cuh — pieces every GEMM template shares: the kernel parameter (the ABI of
// docs/TEMPLATES.md), small types, shared-memory addresses, cp.async, ldmatrix, and the
// output conversion, store and bias read for OUT.  Include with `% include("gemm_common.cuh")`.

struct qjit_params {
    const void *a, *b;
    void *d;
    const void *bias;
    const void *scale_a, *scale_b, *zeros_b;
    long long m, n, k, lda, ldb, ldd;
};

namespace qc {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
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

// src_bytes 0 reads nothing and fills the 16 bytes with zeros (tails of M, N and K).
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n"
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

// f32 -> OUT with round to nearest even; pairs pack the first value in the low half.
% if OUT == "f32" then
__device__ __forceinline__ void store2(out_t *p, float x, float y, bool paired, bool second)
{
    if (paired) {
        asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" :: "l"(p), "f"(x), "f"(y) : "memory");
    } else {
        p[0] = x;
        if (second)
            p[1] = y;
    }
}
% else
__device__ __forceinline__ u16 cvt_out(float x)
{
    u16 r;
    asm("cvt.rn.$(OUT).f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void store2(out_t *p, float x, float y, bool paired, bool second)
{
    if (paired) {
        u32 r; // the first operand goes to the upper half
        asm("cvt.rn.$(OUT)x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(y), "f"(x));
        *reinterpret_cast<u32 *>(p) = r;
    } else {
        p[0] = cvt_out(x);
        if (second)
            p[1] = cvt_out(y);
    }
}
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

} // namespace qc
