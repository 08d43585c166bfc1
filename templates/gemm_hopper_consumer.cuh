// gemm_hopper_consumer.cuh — what a consumer warpgroup of the Hopper GEMMs (gemm_wgmma.cu and
// the shared body gemm_wgmma_q.cuh) knows of itself.  Included inside the kernel body at the
// top of the consumers' branch, where tid, p, ring and full0 are set; it takes the registers
// the producer gave up and declares:
//   c, wg_m, wg_n  consumer warpgroup c computes rows wg_m*WGM .. +WGM, columns
//                  wg_n*WGN .. +WGN of the tile
//   warp, lane     this thread's warp in its warpgroup, and lane
//   a_tile, b_tile its A and B rows in stage 0 of the ring
//   s, phase       the ring stage it reads next, and that stage's mbarrier phase
//   epi            the output staging buffer, past the mbarriers (16-byte aligned)
//   vec            whether D takes 16-byte stores (address and row pitch)
//   sender         whether this thread sends rows tid%128 + 128*i of its warpgroup's tile
% if NC > 1 then
        asm volatile("setmaxnreg.inc.sync.aligned.u32 $(CONSUMER_REGS);\n" ::: "memory");
% end
        const int c = (tid >> 7) - 1, wg_m = c / WN, wg_n = c % WN;
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const u32 a_tile = ring + wg_m * WGM * ROW_BYTES;
        const u32 b_tile = ring + A_BYTES + wg_n * WGN * ROW_BYTES;
        int s = 0;
        u32 phase = 0;
        const u32 epi = full0 + 128;
        const bool vec = (u64)p.d % 16 == 0 && p.ldd * (long long)sizeof(out_t) % 16 == 0;
        const bool sender = (tid & 127) < WGM;
