// gemm_wgmma_tma.cu — the Hopper GEMMs of wgmma_f8, wgmma_i8 and wgmma with the loads of a
// peer-class kernel, sm_90a only: A e4m3|e5m2 × B e4m3 (tensor|row|block × tensor|col|block),
// A s8 × B s8 (none|tensor|row × none|tensor|col) and f16×f16, bf16×bf16 (no scales),
// DESIGN §2.  The body is gemm_wgmma_q.cuh with two of its switches on:
// - TMA: one producer thread loads each K tile with bulk tensor copies (produce_tma in
//   gemm_hopper.cuh) from two tensor maps that the library encodes at each launch, instead of
//   128 threads issuing 16-byte cp.async; the boxes land in the same 128-byte swizzle layout.
//   When the output has two tile rows or more the launch groups the CTAs in clusters of two
//   along M that work on tiles of the same columns, and each loads half of their B tile into
//   both CTAs (multicast): B leaves L2 once a pair instead of once a CTA.
// - OVERLAP (fp8): each K tile is summed apart and promoted into f32 as in wgmma_f8 (the fp8
//   tensor core's accumulator is narrower than f32), but into two alternating parts: K tile
//   kt's wgmma run into one while kt − 1's is promoted from the other, so a consumer never
//   waits for its own wgmma before issuing the next ones.  Same sums, same order, same
//   rounding as wgmma_f8: its results are bit-identical to wgmma_f8's at the same tile.
// int8 keeps one exact s32 accumulator over all of K, as wgmma_i8 does; f16/bf16 one f32
// accumulator over all of K, as wgmma does (wgmma m64nNk16, BK = 64 values a 128-byte row).
//
// Parameters: BK = 128 one-byte values or 64 two-byte ones.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256; BM ≤ 256 and BN ≤ 512 (TMA
// boxes of at most 256 rows).  Accumulators: fp8 three sets (two parts and a total) of
// (BM/WM)·(BN/WN)/128 registers, int8 and f16/bf16 one, beside ~40 others.  sb=block needs consumer tiles
// whose width divides 128.
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·128 bytes), 2 KB of
// alignment slack and mbarriers, and the output staging buffer (in NP column passes).
// The kernel takes three tensor maps after qjit_params (A, B, and A again in boxes of
// the plan's tma_rows rows for tiles that pass M), so qjit_gemm_launch_config, which describes a
// single parameter, refuses it; qjit_gemm_launch runs it.
//
// On the H100 its GPU tests pass (test_gpu_quant, byte for byte against its twins) and auto
// runs it where the tuning or the default below puts it (measured = true).
% -- qjit family: name=wgmma_tma id=10 order=70
% include("gemm_hopper_plan.cuh")
% local function fp8() return one_of(A, "e4m3", "e5m2") and B == "e4m3" and one_of(SA, "none", "tensor", "row", "block") and one_of(SB, "none", "tensor", "col", "block") end
% local function int8() return A == "s8" and B == "s8" and one_of(SA, "none", "tensor", "row") and one_of(SB, "none", "tensor", "col") end
% local function half() return one_of(A, "f16", "bf16") and B == A and SA == "none" and SB == "none" end
% family {
%   floor = 90,
%   -- its GPU tests and compute-sanitizer passes ran clean on the H100 (test_gpu_quant)
%   measured = true,
%   serves = function() return fp8() or int8() or half() end,
%   -- Chosen before the H100 ran it (qjit-tune measures it against the rest).  fp8: two parts and a total fit consumer tiles of 64x128 (192
%   -- registers): 128x128x128 with two consumer warpgroups, 5 stages, wgmma_f8's tile.  int8:
%   -- wgmma_i8's 128x256x128, two consumer warpgroups, 4 stages.  f16/bf16: wgmma's 128x256x64
%   -- with two consumer warpgroups, 4 stages (the output leaves in passes).
%   default = function(m)
%     -- decode: under auto, the families after this one
%     local decode, c = hopper_decode(m, half() and 64 or 128)
%     if decode then return c end
%     local c = half() and choose(128, 256, 64, 2, 1, 4) or A == "s8" and choose(128, 256, 128, 2, 1, 4) or choose(128, 128, 128, 2, 1, 5)
%     return warpgroups(c)
%   end,
%   space = function(name)
%     if half() then
%       if name == "small-m" then return {config(64, 128, 64, 1, 1, 8), config(64, 256, 64, 1, 1, 6), config(128, 128, 64, 2, 1, 6)} end
%       if name ~= "default" then return nil end
%       -- 128x64: M = 128 on a 4096-wide layer is 32 tiles of 128x128 for 132 SMs
%       return {config(128, 256, 64, 2, 1, 4), config(128, 256, 64, 2, 1, 3), config(128, 128, 64, 2, 1, 6),
%               config(256, 128, 64, 2, 1, 4), config(128, 256, 64, 2, 2, 4), config(128, 64, 64, 2, 1, 8)}
%     end
%     if name == "small-m" then return {config(64, 128, 128, 1, 1, 6), config(64, 64, 128, 1, 1, 8), config(128, 128, 128, 2, 1, 5)} end
%     if name ~= "default" then return nil end
%     if A == "s8" then
%       return {config(128, 256, 128, 2, 1, 4), config(128, 256, 128, 2, 1, 3), config(128, 128, 128, 2, 1, 5),
%               config(256, 128, 128, 2, 1, 4), config(64, 256, 128, 1, 1, 5), config(128, 64, 128, 2, 1, 6),
%               config(64, 128, 128, 1, 1, 6)}
%     end
%     return {config(128, 128, 128, 2, 1, 5), config(128, 128, 128, 2, 1, 4), config(128, 128, 128, 2, 1, 6),
%             config(64, 128, 128, 1, 1, 6), config(128, 64, 128, 2, 1, 6)}
%   end,
%   plan = function()
%     if not (fp8() or int8() or half()) then
%       unsupported(string.format("gemm_wgmma_tma takes a=e4m3|e5m2 b=e4m3 with sa=none|tensor|row|block sb=none|tensor|col|block, a=s8 b=s8 with sa=none|tensor|row sb=none|tensor|col, or a=b=f16|bf16 with no scales (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_tma: out must be f16, bf16 or f32") end
%     if BM > 256 or BN > 512 then unsupported(string.format("gemm_wgmma_tma: a TMA box holds at most 256 rows: BM <= 256 and BN <= 512 (tile=%dx%dx%d)", BM, BN, BK)) end
%     local F8, ES = fp8(), half() and 2 or 1
%     local plan = hopper_tile_plan{name = "gemm_wgmma_tma", acc = F8 and 3 or 1, es = ES}
%     if SB == "block" and 128 % plan.WGN ~= 0 then unsupported(string.format("gemm_wgmma_tma: sb=block needs consumer tiles whose width divides 128 (BN/WN=%d)", plan.WGN)) end
%     -- rows of K are 16-byte aligned for the tensor maps (their strides and base addresses)
%     plan.k_multiple, plan.ld_multiple, plan.align = 16 // ES, 16 // ES, 16
%     -- A's map again in boxes of tma_rows rows, for tiles that pass M (produce_tma's TR)
%     plan.tma, plan.cluster_m, plan.tma_rows = 1, 2, hopper_tma_rows(BM)
%     plan.TMA_ROWS = plan.tma_rows
%     plan.TMA, plan.ES, plan.ACC_INT = true, ES, A == "s8"
%     plan.MMA = A == "s8" and "s32.s8.s8" or ("f32." .. A .. "." .. B)
%     plan.PROMOTE, plan.OVERLAP, plan.BLOCK = F8, F8, SA == "block" or SB == "block"
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
