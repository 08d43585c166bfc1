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
