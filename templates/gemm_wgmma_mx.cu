// gemm_wgmma_mx.cu — warp-specialized Hopper GEMM for MXFP8 and MXFP4 on the fp8 tensor
// cores, sm_90a only: A × B both e4m3 or both e2m1, with e8m0 scales per 32 of K on both sides
// (sa = sb = mx, DESIGN §2).  e2m1 stays packed in global memory: the producer copies each K
// tile's packed rows into a staging slot and, SLOTS − 1 K tiles behind, expands them exactly to
// e4m3 (worth value·2^-6, which the scales carry back) into the stage's tiles.
// The body is gemm_wgmma_q.cuh, shared with wgmma_f8 and wgmma_i8: warpgroup 0 fills a
// STAGES-deep ring of 128-byte-swizzled tiles (BK = 128 fp8 values of K a row) with cp.async,
// and beside each stage the K tile's scales, decoded to f32; WM×WN consumer warpgroups run
// wgmma.mma_async m64nNk32 .e4m3.e4m3 from shared memory.
//
// Accumulation.  Each 32 of K (one scale block) is summed apart by one wgmma, starting from
// zero, and promoted into f32 registers: tot = fma(part, 2^(ea−127)·2^(eb−127), tot), the
// product of the two powers of two exact while it stays inside f32's range (scales whose
// exponents sum below −149 flush to zero, above 127 give inf: far outside real MX data).
// Where two parts and a total fit (consumer tiles up to 64x128), the next 32's wgmma is
// issued before a 32 is promoted (OVERLAP in gemm_wgmma_q.cuh), so the promotion's FMAs run
// while the tensor core works; else a consumer waits for each 32's wgmma before promoting it
// and the other consumer warpgroups' wgmma run meanwhile.  Then D = cast_out(tot + bias).
//
// Parameters: BK = 128.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256; a part and a total
// accumulator of (BM/WM)·(BN/WN)/128 registers each must fit beside ~40 others.
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·(128+20) bytes,
// MXFP4 128+16: tiles, f32 scales and MXFP8's codes as copied), 2 KB of alignment slack and
// mbarriers, and the output staging buffer.
//
// On the H100 its GPU tests pass (test_gpu_quant) and auto runs it for MXFP8 above decode
// where the tuning or the default below puts it (measured = true); MXFP4 runs it by name.
% -- qjit family: name=wgmma_mx id=8 order=90
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   -- its GPU tests and compute-sanitizer passes ran clean on the H100 (test_gpu_quant)
%   measured = true,
%   serves = function() return one_of(A, "e4m3", "e2m1") and B == A and SA == "mx" and SB == "mx" end,
%   -- Chosen before the H100 ran it (qjit-tune measures it against the rest): wgmma_f8's tile (part and total accumulators, consumer tiles
%   -- of 64x128) with 5 stages; MXFP4 (both operands through the expanding producer) 4.
%   default = function(m)
%     -- MXFP4 unnamed: mma_f8 (listed after this family) ran every problem of the prefill
%     -- tuning faster, 1.17-4.0x (qjit-tune on the H100, the eight Llama 3 layers at M = 128-4096:
%     -- e2m1 expanded to e4m3 in this producer costs more than the tensor cores save)
%     if A == "e2m1" and BM == 0 and not NAMED then return nil end
%     -- decode (M <= 64, no tile named): one consumer warpgroup of 64 rows, 6 stages; named
%     -- by hand on the H100 it ran MXFP8 1x28672x8192 in 190 us, mma_f8's 128x128x128 tile
%     -- (auto's choice before) in 375 us
%     if m ~= 0 and m <= 64 and BM == 0 then
%       return choose(64, 128, 128, 1, 1, 6)
%     end
%     local c = choose(128, 128, 128, 2, 1, A == "e2m1" and 4 or 5)
%     return warpgroups(c)
%   end,
%   space = spaces{
%     -- 128x96: consumer tiles of 64x96 keep two parts and a total for MXFP4 too (its
%     -- producer leaves the consumers room for three sets only up to 96 columns)
%     default = {config(128, 128, 128, 2, 1, 5), config(128, 128, 128, 2, 1, 4), config(128, 64, 128, 2, 1, 6),
%                config(64, 128, 128, 1, 1, 6), config(128, 96, 128, 2, 1, 5)},
%     ["small-m"] = {config(64, 128, 128, 1, 1, 6), config(64, 64, 128, 1, 1, 8), config(128, 128, 128, 2, 1, 5)},
%   },
%   plan = function()
%     local FP4 = A == "e2m1"
%     if not (one_of(A, "e4m3", "e2m1") and B == A and SA == "mx" and SB == "mx") then
%       unsupported(string.format("gemm_wgmma_mx takes a=b=e4m3 or a=b=e2m1 with sa=mx sb=mx (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_mx: out must be f16, bf16 or f32") end
%     if FP4 and BM % 32 + BN % 32 ~= 0 then unsupported(string.format("gemm_wgmma_mx: e2m1 needs BM and BN multiples of 32 (tile=%dx%dx%d)", BM, BN, BK)) end
%     -- two parts and a total where they fit (the promotion of each 32 of K overlaps the next
%     -- one's wgmma), else a part and a total; 16 bytes of f32 scales and 4 of their codes per tile row per stage;
%     -- e2m1: staging slots of both operands' packed rows (hopper_pack_slots), and a producer
%     -- of 56 registers
%     local producer = FP4 and WM * WN <= 2 and 56 or nil
%     local OVERLAP = hopper_acc_fits(3, producer)
%     local SLOTS = FP4 and hopper_pack_slots("gemm_wgmma_mx", (BM + BN) * 64, (BM + BN) * 16) or 2
%     local side = (BM + BN) * (FP4 and 16 or 20) -- f32 scales, and MXFP8's codes as copied
%     local plan = hopper_tile_plan{name = "gemm_wgmma_mx", acc = OVERLAP and 3 or 2, side = side,
%                                   fixed = FP4 and SLOTS * (BM + BN) * 64 or 0, producer = producer}
%     plan.SLOTS = SLOTS
%     -- K a multiple of 32 (one e8m0 scale per 32, and whole 16-byte chunks of e2m1); leading
%     -- dimensions of whole 16-byte chunks
%     plan.k_multiple, plan.ld_multiple, plan.align = 32, FP4 and 32 or 16, 16
%     plan.MMA, plan.ACC_INT, plan.PROMOTE, plan.BLOCK = "f32.e4m3.e4m3", false, true, false
%     plan.FINE, plan.MX, plan.PACKED_A, plan.PACKED_B, plan.OVERLAP = true, true, FP4, FP4, OVERLAP
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
