// gemm_mma_tile.cuh — the tile constants of the multistage mma.sync GEMMs (gemm_mma.cu,
// gemm_wq.cu, gemm_i8.cu, gemm_f8.cu), from the configuration.  Included inside each one's
// anonymous namespace, before its own constants.
constexpr int BM = $(BM), BN = $(BN), BK = $(BK);
constexpr int WM = $(WM), WN = $(WN);
constexpr int STAGES = $(STAGES);
constexpr int THREADS = 32 * WM * WN;
constexpr int WTM = BM / WM, WTN = BN / WN; // warp tile
constexpr int MT = WTM / 16, NT = WTN / 8;  // m16n8 mma tiles per warp
constexpr int GROUP_M = 8;                  // tile rows per rasterization band (gemm_tile_walk.cuh)

// The epilogue's f32 steps on a warp's tile: v = conv(src) (the sums as f32), then qc::finish2
// (scales, then bias, each rounded alone; past M or N they read as 0).  src[mt][nt] and v[mt][nt]
// hold rows row0 + 16·mt and + 8, columns col0 + 8·nt and + 1, where row0 is the warp's first
// row + lane/4 and col0 its first column + 2·(lane%4).  v may be src (f32 sums, conv the
// identity: finished in place).
struct as_is {
    __device__ __forceinline__ float operator()(float x) const { return x; }
};
template <class T, class Conv>
__device__ __forceinline__ void finish_tile(float (&v)[MT][NT][4], const T (&src)[MT][NT][4], Conv conv, int row0,
                                            int col0, int M, int N, const qjit_params &p)
{
    const qc::factors f(p);
% if SA == "row" then
    float sa[MT][2]; // the rows' A scales, read once
    f.rows<MT, 16>(sa, row0, M);
% end
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float sb0, sb1, b0, b1;
        f.cols(col0 + nt * 8, N, sb0, sb1, b0, b1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float x = conv(src[mt][nt][2 * h]), y = conv(src[mt][nt][2 * h + 1]);
                qc::finish2(x, y, $(SA == "row" and "sa[mt][h]" or "f.sa_t"), sb0, sb1, b0, b1);
                v[mt][nt][2 * h] = x;
                v[mt][nt][2 * h + 1] = y;
            }
        }
    }
}
