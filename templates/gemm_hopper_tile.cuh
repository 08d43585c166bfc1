// gemm_hopper_tile.cuh — the tile constants of the Hopper GEMMs (gemm_wgmma.cu, gemm_wgmma_wqr.cu
// and the shared body gemm_wgmma_q.cuh), from the configuration: a producer warpgroup and
// WM×WN consumer warpgroups, a ring of STAGES stages each holding A's BM and B's BN rows of
// one 128-byte row of K (B's packed where PB_ROW is set), and the output staged in NP passes
// of SEG columns per consumer.  Included inside each one's anonymous namespace, before its
// own constants.
constexpr int BM = $(BM), BN = $(BN);
constexpr int WM = $(WM), WN = $(WN);
constexpr int STAGES = $(STAGES);
constexpr int NC = WM * WN;                 // consumer warpgroups
constexpr int THREADS = 128 * (NC + 1);
constexpr int WGM = BM / WM, WGN = BN / WN; // consumer warpgroup tile
constexpr int MI = WGM / 64;                // m64 wgmma rows per consumer
// B's bytes a row in a stage: one 128-byte ring row, or its packed 4-bit values as stored
// (wgmma_wqr: PB_ROW = 32)
constexpr int B_ROW_BYTES = $(PB_ROW or 128);
constexpr int A_BYTES = BM * ROW_BYTES, STAGE_BYTES = A_BYTES + BN * B_ROW_BYTES;
constexpr int RING_BYTES = STAGES * STAGE_BYTES;
// Output tiles leave through a shared-memory buffer (rows padded by 16 bytes against bank
// conflicts), NP passes of SEG columns per consumer, and whole ones by bulk copies, so that
// the consumers return to the tensor cores without waiting for their global stores.
constexpr int NP = $(NP), SEG = WGN / NP;
constexpr int EPI_PITCH = WN * SEG * (int)sizeof(out_t) + 16;
