// gemm_wgmma_i8.cu — warp-specialized Hopper GEMM on the int8 tensor cores, sm_90a only:
// W8A8, A s8 × B s8 with none|tensor|row × none|tensor|col scales (DESIGN §2).  The body is
// gemm_wgmma_q.cuh, shared with wgmma_f8: warpgroup 0 fills a STAGES-deep ring of
// 128-byte-swizzled tiles (one 128-byte row holds BK = 128 int8 values of K) with cp.async
// and mbarriers; WM×WN consumer warpgroups run wgmma.mma_async m64nNk32 .s32.s8.s8 from
// shared memory.
//
// Accumulation.  The int32 sums are exact, so the wgmma accumulate straight into one s32
// accumulator over all of K (no part to promote: half the registers of wgmma_f8, room for
// consumer tiles of 64x256), keeping one wgmma group in flight while the next stage is
// waited for.  The epilogue is the f32 one of tests/reference.h, each step rounded alone:
// t = (float)acc; t = t·sa; t = t·sb; t = t + bias — bit for bit the result of mma_i8.
//
// Parameters: BK = 128.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256, whose (BM/WM)·(BN/WN)/128
// accumulator registers fit beside ~40 others.
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·128 bytes), 2 KB
// of alignment slack and mbarriers, and the output staging buffer (in NP column passes).
//
// Not yet measured on a GPU (written in a session without one): `auto` keeps choosing
// mma_i8 until test_gpu_quant has passed this kernel on the H100 and qjit-bench has timed
// it; until then it runs when a descriptor names kernel=wgmma_i8.
% include("gemm_family.cuh")
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   serves = function() return A == "s8" and B == "s8" and one_of(SA, "none", "tensor", "row") and one_of(SB, "none", "tensor", "col") end,
%   -- One accumulator set, so a consumer tile of 64x256 fits (128 registers): 128x256x128
%   -- with two consumer warpgroups, 4 stages (192 KB of ring; the output leaves in passes).
%   -- Predicted, not measured: the tile CUTLASS's int8 Hopper kernels favour.
%   default = function(m)
%     local c = choose(128, 256, 128, 2, 1, 4)
%     if BM ~= 0 and WM == 0 then c.wm, c.wn = BM >= 128 and 2 or 1, 1 end
%     return c
%   end,
%   space = spaces{
%     default = {config(128, 256, 128, 2, 1, 4), config(128, 256, 128, 2, 1, 3), config(128, 128, 128, 2, 1, 5),
%                config(128, 128, 128, 2, 1, 6), config(256, 128, 128, 2, 1, 4), config(64, 256, 128, 1, 1, 5)},
%     ["small-m"] = {config(64, 256, 128, 1, 1, 5), config(64, 128, 128, 1, 1, 6), config(64, 64, 128, 1, 1, 8)},
%   },
%   plan = function()
%     if not (A == "s8" and B == "s8" and one_of(SA, "none", "tensor", "row") and one_of(SB, "none", "tensor", "col")) then
%       unsupported(string.format("gemm_wgmma_i8 takes a=s8 b=s8 with sa=none|tensor|row sb=none|tensor|col (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_i8: out must be f16, bf16 or f32") end
%     local plan = hopper_tile_plan("gemm_wgmma_i8", 1)
%     -- 16-byte cp.async chunks of 16 int8 values along K, wholly inside or outside K
%     plan.k_multiple, plan.ld_multiple, plan.align = 16, 16, 16
%     plan.MMA, plan.ACC_INT, plan.PROMOTE, plan.BLOCK = "s32.s8.s8", true, false, false
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
