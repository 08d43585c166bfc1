// gemm_wgmma_f8.cu — warp-specialized Hopper GEMM on the fp8 tensor cores, sm_90a only:
// A e4m3|e5m2 × B e4m3 with tensor|row|block × tensor|col|block scales (DESIGN §2).
// The body is gemm_wgmma_q.cuh, shared with wgmma_i8: warpgroup 0 fills a STAGES-deep ring of
// 128-byte-swizzled tiles (one 128-byte row holds BK = 128 fp8 values of K) with cp.async and
// mbarriers; WM×WN consumer warpgroups run wgmma.mma_async m64nNk32 .e4m3/.e5m2 from shared
// memory.
//
// Accumulation.  Hopper's fp8 wgmma keeps a reduced-precision accumulator, so each K tile
// (128 of K, one scale block) is summed apart, starting from zero (scale-d false on its first
// k32 step), and promoted into f32 registers at its end: tot += part, or with block scales
// tot = fma(part, sa[row, kb]·sb[n/128, kb], tot), as DESIGN §2 asks (at least every 128 of
// K).  A consumer waits for its K tile's wgmma before promoting; the other consumer
// warpgroups keep the tensor cores busy meanwhile.  tensor/row/col scales come last:
// D = cast_out(((tot·sa)·sb) + bias).
//
// Parameters: BK = 128.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256; a part and a total
// accumulator of (BM/WM)·(BN/WN)/128 registers each must fit beside ~40 others.  sb=block
// needs consumer tiles whose width divides 128 (one scale per K block).
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·128 bytes), 2 KB
// of alignment slack and mbarriers, and the output staging buffer (in NP column passes).
% -- qjit family: name=wgmma_f8 id=6 order=80
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   measured = true,
%   -- the plain fp8 pairs; MX and e2m1 stay with mma_f8's dequantize path
%   serves = function() return one_of(A, "e4m3", "e5m2") and B == "e4m3" and SA ~= "mx" and SB ~= "mx" end,
%   -- part and total accumulators must both fit, so consumer tiles are 64x128: 128x128x128
%   -- with two consumer warpgroups, 5 stages (958-1043 TFLOP/s at 8192^3 on H100).
%   default = function(m)
%     local c = choose(128, 128, 128, 2, 1, 5)
%     return warpgroups(c)
%   end,
%   space = spaces{
%     default = {config(128, 128, 128, 2, 1, 5), config(128, 128, 128, 2, 1, 4), config(128, 128, 128, 2, 1, 6),
%                config(64, 128, 128, 1, 1, 6), config(128, 64, 128, 2, 1, 6)},
%     ["small-m"] = {config(64, 128, 128, 1, 1, 6), config(64, 64, 128, 1, 1, 6), config(128, 128, 128, 2, 1, 5)},
%   },
%   plan = function()
%     if not (one_of(A, "e4m3", "e5m2") and B == "e4m3" and one_of(SA, "none", "tensor", "row", "block") and one_of(SB, "none", "tensor", "col", "block")) then
%       unsupported(string.format("gemm_wgmma_f8 takes a=e4m3|e5m2 b=e4m3 with sa=tensor|row|block sb=tensor|col|block (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_f8: out must be f16, bf16 or f32") end
%     local plan = hopper_tile_plan{name = "gemm_wgmma_f8", acc = 2} -- part and total accumulators
%     if SB == "block" and 128 % plan.WGN ~= 0 then unsupported(string.format("gemm_wgmma_f8: sb=block needs consumer tiles whose width divides 128 (BN/WN=%d)", plan.WGN)) end
%     -- 16-byte cp.async chunks of 16 fp8 values along K, wholly inside or outside K, so K and
%     -- the leading dimensions are multiples of 16
%     plan.k_multiple, plan.ld_multiple, plan.align = 16, 16, 16
%     plan.MMA, plan.ACC_INT, plan.PROMOTE = "f32." .. A .. "." .. B, false, true
%     plan.BLOCK = SA == "block" or SB == "block"
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
