// gemm_hopper_start.cuh — the start of the body of the Hopper GEMMs of one ring of cp.async
// tiles (gemm_wgmma.cu, gemm_wgmma_wqr.cu): the shared memory, the wait for the kernel before
// (qc::pdl_wait; the kernel lets the next one start with w.main_loops_done after its main
// loops), the sizes, the persistent tile walk over the GEMM the producer sees (p, or with
// SPLIT a rank's part q = rank_part(p), which the includer defines), the ring of STAGES
// stages with its mbarriers, and the producer warpgroup's whole branch (qh::produce, with
// PRODUCE_ARGS after its first four template arguments, PRODUCE_CALL after its arguments,
// A's bytes a value PRODUCE_ES, 2 where unset, RING_TMA where a bulk tensor copy completes
// the ring's barriers, or RING_ARGS (make_ring's arguments after NC) and RING_EXTRA (bytes
// after the ring, before its barriers: a side's); under a split, its part in the consumers' two
// cluster barriers of qh::split_sum).  Included first in the kernel body; it ends inside the
// consumers' branch, which the includer writes and closes.
    extern __shared__ __align__(1024) unsigned char smem[];
    qc::pdl_wait(); // the next kernel is let start after the main loops (below)
    const int M = (int)p.m, N = (int)p.n;
    const int tid = threadIdx.x;
% if SPLIT then
    const qjit_params q = gridDim.z > 1 ? rank_part(p) : p; // this rank's part of K
% end
% local WALK_P = SPLIT and "q" or "p" -- the GEMM the producer and the walk see
% local ES_A = PRODUCE_ES or 2
    const qh::tile_walk<BM, BN, $(ES_A)> w($(WALK_P));
    const int first = w.first, tiles = w.tiles, stride = w.stride, KT = w.k_tiles;

    // The ring (gemm_hopper.cuh) runs on across a CTA's tiles.
    const qh::ring_addrs rg = qh::make_ring<STAGES, NC$(RING_ARGS or (RING_TMA and ", 128, true" or ""))>(smem, RING_BYTES$(RING_EXTRA and (" + " .. RING_EXTRA) or ""), tid);
    const u32 ring = rg.base, full0 = rg.full0, empty0 = rg.empty0;

    if (tid < 128) {
% if NC > 1 then
        asm volatile("setmaxnreg.dec.sync.aligned.u32 $(PRODUCER_REGS);\n" ::: "memory");
% end
        qh::produce<BM, BN, STAGES, $(ES_A)$(PRODUCE_ARGS)>($(WALK_P), w, ring, full0, empty0, tid$(PRODUCE_CALL or ""));
% if SPLIT then
        if (gridDim.z > 1 && first < tiles) { // the consumers' two cluster barriers (qh::split_sum)
            qc::cluster_sync();
            qc::cluster_sync();
        }
% end
    } else {
