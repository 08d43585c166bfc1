// gemm_tile_walk.cuh — the start of the multistage (mma.sync) GEMM kernels' body: the
// shared memory, the wait for the kernel before (qc::pdl_wait; the kernel lets the next one
// start with qc::pdl_launch after its main loop), A and B as ELEM_A and
// ELEM_B, the sizes, this thread's warp, and the tile walk: which output tile (m0, n0)
// this CTA computes, in bands of GROUP_M tile rows.  Included first in the kernel body,
// where GROUP_M, BM, BN, WN, ELEM_A and ELEM_B are set.
    extern __shared__ __align__(128) unsigned char smem[];
    qc::pdl_wait();
    const $(ELEM_A) *__restrict__ A = static_cast<const $(ELEM_A) *>(p.a);
    const $(ELEM_B) *__restrict__ B = static_cast<const $(ELEM_B) *>(p.b);
    const int M = (int)p.m, N = (int)p.n, K = (int)p.k;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WN, warp_n = warp % WN;

    // Rasterize in bands of GROUP_M tile rows, walking down a band before across it, so
    // that the CTAs resident at one time share their A rows and B columns in L2.
    const int tiles_n = gridDim.x, tiles_m = gridDim.y;
    const int pid = blockIdx.y * tiles_n + blockIdx.x;
    const int band = pid / (GROUP_M * tiles_n), in_band = pid % (GROUP_M * tiles_n);
    const int band_rows = tiles_m - band * GROUP_M < GROUP_M ? tiles_m - band * GROUP_M : GROUP_M;
    const int m0 = (band * GROUP_M + in_band % band_rows) * BM;
    const int n0 = (in_band / band_rows) * BN;
