// gemm_wgmma_i8.cu — warp-specialized Hopper GEMM on the int8 tensor cores, sm_90a only:
// W8A8 (A s8 × B s8, none|tensor|row × none|tensor|col) and W4A8 (A s8 × B s4, with
// none|tensor|row × none|tensor|col|group:g scales; DESIGN §2).  The body is
// gemm_wgmma_q.cuh, shared with wgmma_f8 and wgmma_mx: warpgroup 0 fills a STAGES-deep ring
// of 128-byte-swizzled tiles (one 128-byte row holds BK = 128 int8 values of K) and WM×WN
// consumer warpgroups run wgmma.mma_async m64nNk32 .s32.s8.s8 from shared memory.
//
// s4 weights stay packed in global memory: the producer copies a K tile's packed rows into a
// staging slot with cp.async and, SLOTS − 1 K tiles behind, expands them exactly to s8 into the
// stage's B tile (produce_packed, nib), so the tensor cores see W8A8.
//
// Accumulation.  The int32 sums are exact.  With tensor/col scales the wgmma accumulate
// straight into one s32 accumulator over all of K (half the registers of wgmma_f8: consumer
// tiles of 64x256), keeping one wgmma group in flight while the next stage is waited for;
// the epilogue is the f32 one of tests/reference.h, each step rounded alone:
// t = (float)acc; t = t·sa; t = t·sb; t = t + bias — bit for bit the result of mma_i8.
// With group:g scales each group's int32 sum (exact) is promoted into an f32 total,
// tot = fma((float)sum, s[n][k/g], tot), with the scales the producer stages beside each
// stage (DeepGEMM's promotion, per group); then t = tot·sa + bias.
//
// Parameters: BK = 128.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256 (BN a multiple of 32 for
// s4), whose accumulators ((BM/WM)·(BN/WN)/128 registers, twice that with group scales) fit
// beside ~40 others.
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·128 bytes), group
// scales (STAGES·BN·4·max(1, 128/g)), SLOTS packed slots for s4 (SLOTS·BN·64), 2 KB of alignment
// slack and mbarriers, and the output staging buffer (in NP column passes).
//
// On the H100 its GPU tests pass (test_gpu_quant) and auto runs it where the tuning or the
// default below puts it (measured = true; docs/BENCH.md has the grids).
% -- qjit family: name=wgmma_i8 id=7 order=50
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   -- its GPU tests and compute-sanitizer passes ran clean on the H100 (test_gpu_quant)
%   measured = true,
%   serves = function()
%     return A == "s8" and one_of(SA, "none", "tensor", "row") and
%            ((B == "s8" and one_of(SB, "none", "tensor", "col")) or
%             (B == "s4" and one_of(SB, "none", "tensor", "col", "group")))
%   end,
%   -- One accumulator set (tensor/col scales): a consumer tile of 64x256 fits (128 registers):
%   -- 128x256x128 with two consumer warpgroups (the output leaves in passes), the tile
%   -- CUTLASS's int8 Hopper kernels favour; measured choices below.
%   -- Group scales keep a part and a total: 128x128x128, two consumer warpgroups, 4 stages.
%   default = function(m)
%     -- decode: under auto, mma_i8 (listed after this family)
%     local decode, c = hopper_decode(m, 128)
%     if decode then return c end
%     -- s8 x s8 (qjit-tune on the H100, Llama 3 8B layers): 128x128x128 with 5 stages up to
%     -- M = 256 (1.1-1.9x the 128x256 tile there), 128x256x128 with 3 stages above (1.07-1.10x
%     -- the same tile with 4)
%     -- s4 x s8 without groups (qjit-tune on the eight Llama 3 layers): the 128x256 tile gives
%     -- a 4096-wide layer 16 CTAs at M = 128 and lost 2.7-3.0x there; 128x64x128 with 6 stages
%     -- won 5 of the 8 layers at M = 128, 128x128x128 the wider ones at M = 256, and
%     -- 256x128x128 with 4 stages 15 of the 16 problems at M = 1024-4096 (1.1-1.25x)
%     local s4col = B == "s4" and SB ~= "group" and BM == 0
%     local c = SB == "group" and choose(128, 128, 128, 2, 1, 4) or
%               (B == "s8" and m ~= 0 and m <= 256 and BM == 0) and choose(128, 128, 128, 2, 1, 5) or
%               (s4col and m ~= 0 and m <= 128) and choose(128, 64, 128, 2, 1, 6) or
%               (s4col and m ~= 0 and m <= 256) and choose(128, 128, 128, 2, 1, 5) or
%               (s4col and m ~= 0) and choose(256, 128, 128, 2, 1, 4) or
%               choose(128, 256, 128, 2, 1, 3)
%     return warpgroups(c)
%   end,
%   space = spaces{
%     default = {config(128, 256, 128, 2, 1, 4), config(128, 256, 128, 2, 1, 3), config(128, 128, 128, 2, 1, 5),
%                config(128, 128, 128, 2, 1, 4), config(256, 128, 128, 2, 1, 4), config(64, 256, 128, 1, 1, 5),
%                -- narrow tiles for M = 128-256 on 4096-wide layers (32 tiles of 128x128 for 132 SMs)
%                config(128, 64, 128, 2, 1, 6), config(64, 128, 128, 1, 1, 6)},
%     ["small-m"] = {config(64, 256, 128, 1, 1, 5), config(64, 128, 128, 1, 1, 6), config(64, 64, 128, 1, 1, 8)},
%   },
%   plan = function()
%     local S4, GROUPED = B == "s4", SB == "group"
%     if not (A == "s8" and one_of(SA, "none", "tensor", "row") and
%             ((B == "s8" and one_of(SB, "none", "tensor", "col")) or (S4 and one_of(SB, "none", "tensor", "col", "group")))) then
%       unsupported(string.format("gemm_wgmma_i8 takes a=s8 with sa=none|tensor|row, and b=s8 with sb=none|tensor|col or b=s4 with sb=none|tensor|col|group:g (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_i8: out must be f16, bf16 or f32") end
%     if ZEROS then unsupported("gemm_wgmma_i8: zero points are for u4 weights") end
%     if S4 and BN % 32 ~= 0 then unsupported(string.format("gemm_wgmma_i8: s4 weights need BN a multiple of 32 (tile=%dx%dx%d)", BM, BN, BK)) end
%     -- group scales: a part (s32) and a total (f32), and BN f32 scales per group of the stage
%     local side = GROUPED and BN * 4 * math.max(1, 128 // GROUP) or 0
%     -- the s4 producer expands B and stages scales: 56 registers (40 spill)
%     -- groups of 32 (four scales a producer thread a stage): two slots, or its 56 registers spill
%     local SLOTS = S4 and hopper_pack_slots("gemm_wgmma_i8", BN * 64, side, GROUPED and GROUP < 64 and 2 or nil) or 2
%     local plan = hopper_tile_plan{name = "gemm_wgmma_i8", acc = GROUPED and 2 or 1, side = side,
%                                   fixed = S4 and SLOTS * BN * 64 or 0, producer = S4 and WM * WN <= 2 and 56 or nil}
%     plan.SLOTS = SLOTS
%     -- 16-byte cp.async chunks along K, wholly inside or outside K: 16 int8 values of A or B,
%     -- 32 packed s4 values of B
%     local KMUL = S4 and 32 or 16
%     plan.k_multiple, plan.ld_multiple, plan.align = KMUL, KMUL, 16
%     plan.MMA, plan.ACC_INT, plan.PROMOTE, plan.BLOCK = "s32.s8.s8", true, GROUPED, false
%     plan.FINE, plan.GROUPED, plan.PACKED_A, plan.PACKED_B = GROUPED, GROUPED, false, S4
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
