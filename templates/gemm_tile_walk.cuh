// gemm_tile_walk.cuh — the tile walk of the multistage (mma.sync) GEMMs: which output tile
// (m0, n0) this CTA computes, in bands of GROUP_M tile rows.  Included inside the kernel
// body, where GROUP_M, BM and BN are set.
    // Rasterize in bands of GROUP_M tile rows, walking down a band before across it, so
    // that the CTAs resident at one time share their A rows and B columns in L2.
    const int tiles_n = gridDim.x, tiles_m = gridDim.y;
    const int pid = blockIdx.y * tiles_n + blockIdx.x;
    const int band = pid / (GROUP_M * tiles_n), in_band = pid % (GROUP_M * tiles_n);
    const int band_rows = tiles_m - band * GROUP_M < GROUP_M ? tiles_m - band * GROUP_M : GROUP_M;
    const int m0 = (band * GROUP_M + in_band % band_rows) * BM;
    const int n0 = (in_band / band_rows) * BN;
