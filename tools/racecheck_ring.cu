// racecheck_ring.cu — the smallest form of wgmma_wqr's weight ring, for compute-sanitizer's
// racecheck (a diagnostic, not part of the library):
// one producer warpgroup copies 16-byte chunks of global rows into a ring of STAGES stages
// and arrives on full[s] (MODE 0: cp.async + cp.async.mbarrier.arrive.noinc, as wgmma_wqr;
// MODE 1: ld.global + st.shared + mbarrier.arrive, plain), one consumer warpgroup waits on
// full[s], reads the stage with ld.shared, and releases it: __syncwarp, then lane 0 arrives
// on empty[s].  On the H100 racecheck reports the same hazards for both modes (59520 a
// consumer read; docs/results/h100-racecheck-ring.txt) while every sum is right: it does not
// take an mbarrier wait as ordering shared-memory accesses, cp.async or not.
//   nvcc -arch=sm_90a -O2 -DMODE=0 tools/racecheck_ring.cu -o race0
//   compute-sanitizer --tool racecheck ./race0      (then the same with -DMODE=1)
#include <cstdio>
#include <cstdint>
#include <vector>
#ifndef MODE
#define MODE 0
#endif
constexpr int STAGES = 4, ROWS = 128, ROW_BYTES = 64, STAGE_BYTES = ROWS * ROW_BYTES, KT = 64;
typedef unsigned u32;

__device__ __forceinline__ u32 saddr(const void *p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u32 b, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_arrive(u32 b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory"); }
__device__ __forceinline__ void mbar_wait(u32 b, u32 parity)
{
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(b), "r"(parity) : "memory");
}

__global__ void __launch_bounds__(256, 1) ring(const uint4 *__restrict__ src, unsigned long long *out)
{
    __shared__ __align__(128) unsigned char stage[STAGES * STAGE_BYTES];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const int tid = threadIdx.x;
    const u32 full0 = saddr(bars), empty0 = full0 + 8 * STAGES;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 128);
            mbar_init(empty0 + 8 * s, 4);
        }
    }
    __syncthreads();
    if (tid < 128) { // producer: thread t copies chunks t, t + 128, ... of each K tile
        for (int kt = 0, s = 0, ph = 0; kt < KT; ++kt) {
            if (kt >= STAGES)
                mbar_wait(empty0 + 8 * s, ph ^ 1);
            for (int c = tid; c < STAGE_BYTES / 16; c += 128) {
                const uint4 *g = src + (size_t)kt * (STAGE_BYTES / 16) + c;
                const u32 d = saddr(stage + s * STAGE_BYTES + 16 * c);
#if MODE == 0
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(g) : "memory");
#else
                const uint4 v = *g;
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(d), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#endif
            }
#if MODE == 0
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full0 + 8 * s) : "memory");
#else
            mbar_arrive(full0 + 8 * s);
#endif
            if (++s == STAGES) {
                s = 0;
                ph ^= 1;
            }
        }
    } else { // consumer: thread t reads row t - 128's four chunks of each K tile
        const int r = tid - 128, lane = tid & 31;
        unsigned long long sum = 0;
        for (int kt = 0, s = 0, ph = 0; kt < KT; ++kt) {
            mbar_wait(full0 + 8 * s, ph);
            for (int c = 0; c < ROW_BYTES / 16; ++c) {
                uint4 v;
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                             : "r"(saddr(stage + s * STAGE_BYTES + r * ROW_BYTES + 16 * c)) : "memory");
                sum += (unsigned long long)v.x + v.y + v.z + v.w;
            }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(empty0 + 8 * s);
            if (++s == STAGES) {
                s = 0;
                ph ^= 1;
            }
        }
        out[blockIdx.x * ROWS + r] = sum;
    }
}

int main()
{
    const int blocks = 4;
    const size_t words = (size_t)KT * STAGE_BYTES / 4;
    std::vector<u32> h(words);
    for (size_t i = 0; i < words; ++i)
        h[i] = (u32)(i * 2654435761u) >> 8;
    uint4 *d;
    unsigned long long *o;
    cudaMalloc(&d, words * 4);
    cudaMalloc(&o, blocks * ROWS * 8);
    cudaMemcpy(d, h.data(), words * 4, cudaMemcpyHostToDevice);
    ring<<<blocks, 256>>>(d, o);
    std::vector<unsigned long long> got(blocks * ROWS);
    cudaMemcpy(got.data(), o, got.size() * 8, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int b = 0; b < blocks; ++b)
        for (int r = 0; r < ROWS; ++r) {
            unsigned long long want = 0;
            for (int kt = 0; kt < KT; ++kt)
                for (int w = 0; w < ROW_BYTES / 4; ++w)
                    want += h[(size_t)kt * STAGE_BYTES / 4 + r * ROW_BYTES / 4 + w];
            bad += got[b * ROWS + r] != want;
        }
    printf("MODE %d: %s, %d of %d sums wrong\n", MODE, cudaGetErrorString(cudaGetLastError()), bad, blocks * ROWS);
    return bad != 0;
}
