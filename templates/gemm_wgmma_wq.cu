// gemm_wgmma_wq.cu — warp-specialized Hopper GEMM for the weight-only pairs on the f16/bf16
// tensor cores, sm_90a only: A f16|bf16 × B s4|u4 with col or group:g scales (zeros for u4
// groups; W4A16), × s8 with tensor or col scales (W8A16), × e2m1 with mx scales (DESIGN §2).  The body is gemm_wgmma_q.cuh, shared with the other
// quantized Hopper families: the producer warpgroup copies A's K tiles (64 values, one
// 128-byte row) into the ring with cp.async and B's packed rows (32 bytes) into a staging slot,
// and, SLOTS − 1 K tiles behind, dequantizes them into the stage's B tile in A's type (wq_conv, a
// thread a row): B̂ = q with tensor/col scales (applied in the epilogue), B̂ = (q − z)·s
// rounded once with groups, B̂ = q·2^(e−127) with mx (exact where A's type holds it), each
// row's scales and zeros loaded a stage ahead.  B is never expanded in global memory.  WM×WN
// consumer warpgroups run wgmma.mma_async m64nNk16 from shared memory into one f32
// accumulator over all of K, one wgmma group in flight.  D = cast_out(acc·sb + bias).
//
// Parameters: BK = 64.  WM, WN count the consumer warpgroups; each owns a (BM/WM)×(BN/WN)
// tile, BM/WM a multiple of 64, BN/WN a multiple of 16 up to 256, BN a multiple of 64 for
// 4-bit B and 32 for s8 (the producer's passes over packed rows); (BM/WM)·(BN/WN)/128
// accumulator registers beside ~40.
// Block: 128·(WM·WN + 1) threads.  Shared memory: the ring (STAGES·(BM+BN)·128 bytes), SLOTS
// staging slots (BN·32 bytes each, BN·64 for s8; hopper_pack_slots), 2 KB of alignment slack
// and mbarriers, and the output staging buffer.
//
// Correct on the H100 (test_gpu_quant, compute-sanitizer); auto runs it past M = 64.
% -- qjit family: name=wgmma_wq id=9 order=30
% include("gemm_hopper_plan.cuh")
% family {
%   floor = 90,
%   -- its GPU tests and compute-sanitizer passes ran clean on the H100 (test_gpu_quant)
%   measured = true,
%   -- the weight-only pairs of DESIGN §2: W4A16 (col, group; zeros for u4), W8A16 (tensor,
%   -- col), f16/bf16 × e2m1 (mx)
%   serves = function()
%     local ok = {s4 = {col = 1, group = 1}, u4 = {col = 1, group = 1}, s8 = {col = 1, tensor = 1}, e2m1 = {mx = 1}}
%     return one_of(A, "f16", "bf16") and SA == "none" and ok[B] ~= nil and ok[B][SB] ~= nil
%   end,
%   -- From qjit-tune on the H100 (bf16 x s4 g128, the eight Llama 3 layers, cache/tune/h100.db):
%   -- past M = 256, 256x128x64 with 4 stages won every layer (about 10% ahead of 128x256x64,
%   -- 3 stages); up to 256, 128x128x64 with 5 stages won 11 of 16 (1.5-1.7x 128x256x64 there:
%   -- the wider tile leaves most SMs idle on these grids).
%   default = function(m)
%     -- decode: under auto, mma_wq (listed after this family)
%     local decode, c = hopper_decode(m, 64)
%     if decode then return c end
%     -- a named tile or named warps keep the configuration around them that they had
%     -- before the tuning (128x256x64, 3 stages: 4 stages of a named 128x256 tile do not
%     -- fit with s8 weights)
%     if BM ~= 0 or WM ~= 0 then return warpgroups(choose(128, 256, 64, 2, 1, 3)) end
%     return (m ~= 0 and m <= 256) and choose(128, 128, 64, 2, 1, 5) or choose(256, 128, 64, 2, 1, 4)
%   end,
%   space = spaces{
%     default = {config(128, 256, 64, 2, 1, 3), config(128, 256, 64, 2, 1, 4), config(128, 128, 64, 2, 1, 5),
%                config(256, 128, 64, 2, 1, 4), config(64, 256, 64, 1, 1, 4)},
%     ["small-m"] = {config(64, 256, 64, 1, 1, 4), config(64, 128, 64, 1, 1, 6), config(128, 128, 64, 2, 1, 5)},
%   },
%   plan = function()
%     local ok = {s4 = {col = 1, group = 1}, u4 = {col = 1, group = 1}, s8 = {col = 1, tensor = 1}, e2m1 = {mx = 1}}
%     if not (one_of(A, "f16", "bf16") and SA == "none" and ok[B] ~= nil and ok[B][SB] ~= nil) then
%       unsupported(string.format("gemm_wgmma_wq takes a=f16|bf16 sa=none with b=s4|u4 sb=col|group:g, b=s8 sb=tensor|col, or b=e2m1 sb=mx (got a=%s b=%s sa=%s sb=%s)", A, B, SA, SB))
%     end
%     if ZEROS and not (B == "u4" and SB == "group") then unsupported("gemm_wgmma_wq: zero points need b=u4 sb=group") end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_wq: out must be f16, bf16 or f32") end
%     local IB = B == "s8" and 8 or 4
%     -- the producer's passes over packed rows: 64 rows (4-bit, 2 chunks a row) or 32 (s8)
%     local PASS = IB == 4 and 64 or 32
%     if BN % PASS ~= 0 then unsupported(string.format("gemm_wgmma_wq: BN must be a multiple of %d for b=%s (tile=%dx%dx%d)", PASS, B, BM, BN, BK)) end
%     -- one accumulator set; SLOTS staging slots of packed B; the producer dequantizes whole
%     -- rows (a scale and a zero each per group): 72 registers
%     local SLOTS = hopper_pack_slots("gemm_wgmma_wq", BN * 8 * IB)
%     local plan = hopper_tile_plan{name = "gemm_wgmma_wq", acc = 1, fixed = SLOTS * BN * 8 * IB,
%                                   producer = WM * WN <= 2 and 72 or nil, es = 2}
%     plan.SLOTS = SLOTS
%     -- K and the leading dimensions: whole 16-byte chunks of B (32 4-bit values, 16 s8)
%     local KMUL = IB == 4 and 32 or 16
%     plan.k_multiple, plan.ld_multiple, plan.align = KMUL, KMUL, 16
%     plan.MMA, plan.ACC_INT, plan.PROMOTE, plan.BLOCK = "f32." .. A .. "." .. A, false, false, false
%     plan.FINE, plan.PACKED_A, plan.PACKED_B, plan.ES, plan.IB, plan.WQ = false, false, true, 2, IB, true
%     return plan
%   end,
% }
% include("gemm_wgmma_q.cuh")
