// gemm_gemv.cu — the decode kernel (auto to M = 16, by name to 64): a GEMV at heart on
// mma.sync, sm_80 … sm_90a.
// f16/bf16 A × B of A's type, or × s4/u4 (col, group of 128 or 256, zeros for u4) or s8
// (col, tensor) weights; s8 A (tensor, row) × s8 (tensor, col) or s4 (col, group of 128 or
// 256) weights, whose sums are exact int32; e4m3/e5m2 A × e4m3 (tensor, row, block × tensor,
// col, block), sm_89 and up; MXFP4 and MXFP8 (e2m1 or e4m3 on both sides, mx × mx), both
// sides dequantized into bf16 with their block scales, sm_89 and up.
//
// The weights are mma's A operand and the tokens its B operand (D^T = B·A^T): a warp tile is
// 16 weight rows × 8 tokens, so at M = 1 an mma wastes 7 of 8 token columns and none of the
// weights, which are what a decode step streams.  Each thread of a quad (lane%4 = c) loads one
// 16-byte chunk of K of its two rows (lane/4 and +8) straight from global memory into
// registers: a step is four chunks of each of the tile's 16 rows (BK = 4 chunks: 32 k of a
// 16-bit B, 64 of s8, 128 of 4-bit).  The order of k inside a chunk is free as long as the
// token fragment uses the same one, so each thread dequantizes its own chunk into mma
// fragments with a few LOP3/PRMT per 8 values, and the token values (A, read through L1) are
// permuted to match.  With stages 1..8 nothing goes through shared memory but the final sum.
//
// Bytes in flight: each warp keeps STAGES steps of loads outstanding in registers (a step is
// 16 rows × 64 bytes = 1 KB of B), used in place and reloaded STAGES·W steps ahead, in a
// straight-line loop body (steps past K load zeros), so no instruction reads a load before
// its step.  With stages 9..32 the weights and tokens of STAGES steps go through a ring in
// shared memory instead: each lane copies its own chunks with cp.async (one group a step),
// reads them back after cp.async.wait_group, and refills the slot STAGES steps ahead; no
// other lane reads them, so no barrier is needed.  The scales keep a register ring of 2-8
// steps, refilled a pass at a time: every global load of a warp shares one scoreboard, so a
// use waits for all of them (docs/NOTES.md).  W warps of a CTA take the steps of K
// round-robin and their partial tiles are summed in shared memory in the order of their
// steps (per row group, with warps across the rows), so a result does not depend on timing.
// On sm_90a, split=S also splits K across a cluster of up to S CTAs (the launch takes the
// split only where the tiles leave SMs idle): each rank takes a contiguous share of the
// steps, and rank 0 adds the others' partial tiles from distributed shared memory in rank
// order (qjit-tune's small-m sweep offers it; not yet run on the H100).
//
// The 8-bit activations use m16n8k32 (s8 into s32, fp8 into f32) with the same fragments, a
// register holding four values instead of two; s4 weights against s8 tokens become bytes of
// 16·q (a shift and a mask), taken off again exactly as a factor 1/16 in f32.
//
// Scales: col and tensor multiply the f32 sum in the epilogue (B̂ = q exactly in A's type);
// the tokens' tensor or row scale too.
// group needs each step inside one group (group 128 or 256 for 4-bit B): the step's mmas sum
// q exactly into f32 partials, which are folded in times s; with zeros, minus z times the
// step's sums of A (an mma against ones), so fractional zero points stay exact too.
//
// Configuration: tile=BMxBNxBK is tokens × weight rows × K per step (BM 8, 16, 32 or 64; BN 16
// to 128; BK as above); warps=WRxW: WR warps across the rows (BN/WR each, 16, 32 or 64) and
// W along K; stages: steps in flight per warp.  More rows a CTA read each token chunk from
// L2 once for more weights (the WR warps of a step share it through L1).  Block: 32·WR·W
// threads; shared memory (W − 1)·BN·BM·4 bytes for the sum, and with stages 9..32 the ring,
// WR·W·STAGES·(2·RB + NT·RA)·512 bytes (with split, at least W·BN·BM·4 for a rank's tile).
// Grid: N/BN × M/BM, the token tiles of a row tile neighbours in launch order (× the ranks
// of a split along z).
% -- qjit family: name=gemv id=11 order=5
% include("gemm_stage_plan.cuh")
% -- k per 16-byte chunk of B, and the step (four chunks)
% local function chunk_k() return one_of(B, "s8", "e4m3") and 16 or one_of(B, "s4", "u4", "e2m1") and 32 or 8 end
% -- the pairs and scale modes this family computes
% local function gemv_serves()
%   if one_of(A, "f16", "bf16") then
%     if SA ~= "none" then return false end
%     if B == A then return SB == "none" end
%     if one_of(B, "s4", "u4") then return SB == "col" or (SB == "group" and GROUP % 128 == 0) end
%     if B == "e2m1" then return SB == "mx" end
%     return B == "s8" and one_of(SB, "col", "tensor")
%   end
%   if A == "s8" then
%     if B == "s8" then return one_of(SA, "tensor", "row") and one_of(SB, "tensor", "col") end
%     return B == "s4" and SA == "row" and (SB == "col" or (SB == "group" and GROUP % 128 == 0))
%   end
%   -- MXFP4 (e2m1 × e2m1, mx × mx): both sides dequantized into bf16 with their block
%   -- scales (a thread's chunk is one 32-k block of each)
%   if A == "e2m1" then return B == "e2m1" and SA == "mx" and SB == "mx" and ARCH >= 89 end
%   -- MXFP8 (e4m3 × e4m3, mx × mx) the same way: a thread's chunk is 16 values, half a block
%   if A == "e4m3" and B == "e4m3" and SA == "mx" and SB == "mx" then return ARCH >= 89 end
%   return one_of(A, "e4m3", "e5m2") and B == "e4m3" and ARCH >= 89 and one_of(SA, "tensor", "row", "block") and
%     one_of(SB, "tensor", "col", "block")
% end
% family {
%   floor = 80,
%   measured = true,
%   serves = gemv_serves,
%   -- Up to M = 16 under auto (a tile of 8 tokens to M = 8, 16 above); the rest of decode
%   -- and prefill go to the tile families, listed after this one.  Measured on the H100 on the
%   -- Llama 3 8B layers at M = 1 (docs/NOTES.md, "The decode kernel"): bf16 1x4 warps, 8
%   -- steps in flight, 0.87-1.15x cuBLAS's time; s4 g128 1x4, 2-4 steps, 1.7-1.9x the mma_wq
%   -- decode tile.  At M = 9-16, 4-bit weights take 32 rows a CTA: qjit-tune's best on every
%   -- 8B and 70B layer it reached, up to 1.86x the 16-row tile (8192x8192 at M = 16).
%   default = function(m)
%     -- MX weights to M = 32 under auto (MXFP4; bf16 x e2m1 on sm_90a): gemv's 16-token tile,
%     -- two of them a column, won the M = 32 bucket on 6 of the 9 Llama 3 layers for each
%     -- (qjit-tune on the H100: 1.5-1.9x mma_wq 16x128x128 for bf16 x e2m1, 2.2-8.0x wgmma_mx
%     -- for MXFP4)
%     local top = (A == "e2m1" or (A == "bf16" and B == "e2m1" and ARCH == 90)) and 32 or 16
%     if (m == 0 or m > top) and (not NAMED or m > 32) then return nil end
%     -- a tile of 64 tokens (M = 33-64) by name only (kernel=gemv, the sweep, tuned records)
%     -- until it has been measured against the tile families that auto runs there
%     if BM == 64 and not NAMED then return nil end
%     local bm = (m ~= 0 and m <= 8) and 8 or 16
%     local deep = not one_of(B, "s4", "u4", "e2m1") -- 8- and 16-bit weights: more steps in flight
%     local c = config(bm, (bm == 16 and not deep) and 32 or 16, 4 * chunk_k(), 1, 4, deep and (bm == 8 and 8 or 6) or 2)
%     -- MXFP8: qjit-tune's winners on the H100 (8B and 70B layers): 4 steps and 8 warps along
%     -- K to M = 8 (1.08-1.16x the 8-step tile there), 32 rows of 2 steps at M = 9-16 (up to 1.46x)
%     if SA == "mx" and A == "e4m3" then c = bm == 8 and config(8, 16, c.bk, 1, 8, 4) or config(16, 32, c.bk, 1, 4, 2) end
%     if BM ~= 0 then c.bm, c.bn, c.bk = BM, BN, BK end
%     if WM ~= 0 then
%       c.wm, c.wn = WM, WN
%     elseif c.bn >= 64 then -- a named tile of 64 or 128 rows: 32 rows a warp, 8 warps
%       c.wm = math.min(4, c.bn // 32)
%       c.wn = 8 // c.wm
%     end
%     if STAGES ~= 0 then c.stages = STAGES end
%     return c
%   end,
%   space = function(name)
%     if name ~= "small-m" then return nil end
%     local bk, deep = 4 * chunk_k(), not one_of(B, "s4", "u4", "e2m1")
%     local s1, s2 = deep and 8 or 4, deep and 4 or 2
%     -- more rows a CTA read each token chunk for more weights (what M = 16 is short of):
%     -- a warp's own rows (BN/WM), or WM warps across the rows sharing it through L1
%     local c = {config(8, 16, bk, 1, 4, s1), config(8, 16, bk, 1, 4, s2), config(8, 16, bk, 1, 8, s2),
%                config(8, 32, bk, 1, 4, s2), config(16, 16, bk, 1, 4, s2), config(16, 16, bk, 1, 4, s1),
%                config(32, 16, bk, 1, 4, 2), config(16, 32, bk, 1, 4, 2), config(8, 32, bk, 2, 4, s2)}
%     -- the heavier transforms (zero points, e2m1, per-step scale folds) spill registers in
%     -- CTAs of 8 warps (ptxas, 60-520 bytes): theirs are of 4
%     if ZEROS or B == "e2m1" or one_of(SA, "mx", "block") or SB == "block" then
%       c[#c + 1], c[#c + 2] = config(16, 64, bk, 2, 2, 2), config(16, 64, bk, 4, 1, 2)
%     else
%       c[#c + 1], c[#c + 2], c[#c + 3] = config(16, 64, bk, 2, 4, 2), config(16, 64, bk, 4, 2, 2), config(16, 128, bk, 4, 2, 2)
%       -- M = 33-64 in one tile of tokens (4-bit weights: 32, their operands take the rest)
%       c[#c + 1] = config(32, 64, bk, 4, 2, 2)
%       -- 64 tokens: 8- and 16-bit weights, but not s8 under 16-bit tokens (its conversion
%       -- through f32 spills there)
%       if not one_of(B, "s4", "u4") and not (B == "s8" and A ~= "s8") then c[#c + 1] = config(64, 64, bk, 4, 2, 2) end
%     end
%     if not one_of(B, "s4", "u4", "e2m1") then c[#c + 1] = config(8, 64, bk, 1, 4, 2) end
%     -- 4-bit weights: 32 rows a warp, 4 steps in flight, so that a warp waits out half as
%     -- many memory latencies (a pass's first use waits for every load in flight) as at 2
%     -- steps, two CTAs an SM at 200-255 registers (ptxas, sm_90a: up to 48 bytes of spills
%     -- with f16 tokens or zero points, none with bf16 s4, e2m1 or 8-bit tokens)
%     if not deep then c[#c + 1] = config(8, 32, bk, 1, 4, s1) end
%     -- weights and tokens through shared memory, 9-16 steps a warp in flight (at most 222
%     -- KB a CTA for 4-bit weights under 16-bit tokens)
%     do
%       c[#c + 1], c[#c + 2], c[#c + 3] = config(8, 16, bk, 1, 4, 16), config(16, 16, bk, 1, 4, 10), config(16, 32, bk, 1, 4, 9)
%       c[#c + 1] = config(16, 64, bk, 2, 2, 9)
%     end
%     -- eight warps along K at M = 9-32: a 4096-wide layer has 128 CTAs of 32 rows (256 of
%     -- 16), one an SM, so the warps a CTA are the warps a scheduler (ncu at M = 16 on
%     -- 4096x14336: one warp a scheduler, issuing once every 3.45 cycles, DRAM at 33%)
%     if one_of(B, "s4", "u4", "e2m1") then
%       if not (ZEROS or B == "e2m1") then c[#c + 1] = config(16, 32, bk, 1, 8, 2) end
%     else
%       c[#c + 1] = config(16, 16, bk, 1, 8, s2)
%     end
%     -- K split across a cluster of up to 8 CTAs (sm_90a): a CTA of 64 or 128 rows reads
%     -- each token chunk from L2 once for them, and a 4096-wide layer still has 256 CTAs
%     -- (64 tiles of 64 rows, 4 ranks each; the launch splits only where the tiles leave SMs
%     -- idle).  Warps of 16 rows: 102-180 registers for 4-bit weights (ptxas, sm_90a), where
%     -- 32 rows a warp take all 255 and spill with the split's bounds
%     if ARCH >= 90 then
%       c[#c + 1], c[#c + 2] = config(8, 64, bk, 4, 2, s1, 8), config(16, 64, bk, 4, 2, s2, 8)
%       if deep and not (one_of(SA, "mx", "block") or SB == "block") then c[#c + 1] = config(16, 128, bk, 4, 2, s2, 8) end
%       -- the shared-memory ring of 9 steps (one CTA an SM, 72 KB of 4-bit weights and their
%       -- tokens in flight) split in two: a 4096-wide layer's 64 tiles of 64 rows fill 128 SMs
%       c[#c + 1] = config(16, 64, bk, 2, 2, 9, 2)
%     end
%     return c
%   end,
%   plan = function()
%     if not gemv_serves() then
%       unsupported(string.format("kernel gemv takes a=f16|bf16 sa=none with b of a's type (no scales), b=s4|u4 sb=col|group:128|group:256, b=s8 sb=col|tensor or b=e2m1 sb=mx; a=s8 sa=tensor|row b=s8 sb=tensor|col, or sa=row b=s4 sb=col|group:128|group:256; a=e4m3|e5m2 sa=tensor|row|block b=e4m3 sb=tensor|col|block; a=e4m3 b=e4m3 or a=e2m1 b=e2m1 with sa=mx sb=mx, on sm_89 and up (got a=%s b=%s sa=%s sb=%s arch=%d)", A, B, SA, SB, ARCH))
%     end
%     if ZEROS and not (B == "u4" and SB == "group") then unsupported("kernel gemv: zero points need b=u4 sb=group") end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("kernel gemv: out must be f16, bf16 or f32") end
%     if ARCH < 80 then unsupported("kernel gemv needs sm_80 or newer") end
%     local KC = chunk_k()
%     if BK ~= 4 * KC then unsupported(string.format("kernel gemv: a step of b=%s is BK=%d (four 16-byte chunks), not %d", B, 4 * KC, BK)) end
%     if not one_of(BM, 8, 16, 32, 64) then unsupported("kernel gemv: BM (tokens a tile) must be 8, 16, 32 or 64, not " .. BM) end
%     if not one_of(BN, 16, 32, 64, 128) then unsupported("kernel gemv: BN (weight rows a tile) must be 16, 32, 64 or 128, not " .. BN) end
%     if not one_of(WM, 1, 2, 4) or not one_of(WN, 1, 2, 4, 8) or WM * WN > 8 then unsupported(string.format("kernel gemv: warps=WMxWN, WM = 1, 2 or 4 warps across the tile's rows, WN = 1, 2, 4 or 8 along K, at most 8 in all (warps=%dx%d)", WM, WN)) end
%     if BN % (16 * WM) ~= 0 or BN // WM > 64 then unsupported(string.format("kernel gemv: warps=%dx%d: the %d warps across the rows take 16, 32 or 64 rows each, and BN=%d rows do not split so", WM, WN, WM, BN)) end
%     if STAGES < 1 or STAGES > 32 then unsupported("kernel gemv: stages (steps in flight per warp) must be 1..8 (in registers) or 9..32 (the weights in shared memory), not " .. STAGES) end
%     -- stages 9..32: the weights' and the tokens' chunks go through a shared-memory ring of
%     -- STAGES steps a warp (cp.async, each lane its own chunks), the scales through a
%     -- register ring refilled a pass at a time: both operands that many steps ahead, without
%     -- registers
%     local SR = STAGES > 8
%     local MAGICF = one_of(B, "s4", "u4") and A == "bf16" and BM >= 16
%     -- (with the ring, the per-step scales' register ring is 8 steps (4 with zero points or
%     -- block scales), refilled a pass at a time; without per-step scales, 2)
%     local PERSTEP = SB == "group" or SA == "block" or SB == "block" or SB == "mx"
%     local DR = SR and (PERSTEP and math.min((ZEROS or SA == "block" or SB == "block") and 4 or 8, STAGES) or 2) or STAGES
%     -- split=S (2..8, sm_90a): K split across a cluster of up to S CTAs a tile when the tiles
%     -- alone leave SMs idle (chosen at launch: a 4096-wide layer in tiles of 128 rows is 32
%     -- CTAs), each rank's partial tile added to rank 0's through distributed shared memory
%     -- in rank order, so a result does not depend on timing
%     local SPLIT = SPLIT_K > 1
%     if SPLIT and ARCH < 90 then unsupported("kernel gemv splits K across a cluster: split=" .. SPLIT_K .. " needs sm_90a") end
%     if SPLIT_K > 8 then unsupported("kernel gemv splits K across at most 8 CTAs of a cluster (split=" .. SPLIT_K .. ")") end
%     local NT, RB = BM // 8, BN // (16 * WM) -- a warp's token tiles and row blocks
%     -- MX tokens (MXFP4, MXFP8) become bf16 mma operands with their block scales: T is the
%     -- 16-bit operands' type
%     local AMX = SA == "mx"
%     local T = AMX and "bf16" or A
%     local AB = (one_of(A, "f16", "bf16") or AMX) and 2 or 1 -- bytes of a token value in the mma
%     local R = KC * AB // 4                          -- registers of a chunk as mma operands
%     local RA = AMX and 1 or R // 4                  -- 16-byte loads of a token chunk
%     -- registers: the ring (B chunks, token chunks, scales), accumulators, fragments
%     local REGS = DR * ((SR and 0 or 8 * RB + NT * RA * 4) + (SB == "group" and 2 * RB or 0)) + (SR and 8 * RB + NT * RA * 4 or 0) + RB * NT * 4 * (SB == "group" and 2 or 1) + 40
%     -- four row blocks of 4-bit weights: their operands alone spill (255 registers and 84
%     -- bytes of spills at tile 8x64x128, 2 stages)
%     if RB == 4 and one_of(B, "s4", "u4", "e2m1") then unsupported("kernel gemv: 64 rows a warp take 8- and 16-bit weights (4-bit ones spill registers)") end
%     if REGS > 255 then unsupported(string.format("kernel gemv: tile %dx%dx%d with %d stages needs about %d registers a thread", BM, BN, BK, STAGES, REGS)) end
%     local THREADS = 32 * WM * WN -- at most 256: 255 registers a thread still fit the SM
%     -- shared memory: the sum of the W warps along K, then the ring (16 bytes a lane for
%     -- each of a warp's 2·RB rows and NT·RA token chunks, STAGES steps)
%     local RED_BYTES = (WN - 1) * BN * BM * 4
%     local RING_BYTES = SR and WM * WN * STAGES * (RB * 2 + NT * RA) * 512 or 0
%     -- the shared memory a block may have: 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/89
%     local SMEM_MAX = ARCH >= 90 and 232448 or ARCH == 80 and 166912 or 101376
%     if RED_BYTES + RING_BYTES > SMEM_MAX then unsupported(string.format("kernel gemv: %d warps with %d steps of %d rows each in shared memory need %d bytes, more than the %d KB of sm_%d", WM * WN, STAGES, 16 * RB, RED_BYTES + RING_BYTES, SMEM_MAX // 1024, ARCH)) end
%     -- 16-byte chunks: K a multiple of a chunk (a chunk is all in or all out); rows of A and
%     -- B 16-byte aligned (lda % 8; ldb % 32 for 4-bit, % 16 for s8, % 8 for 16-bit)
%     -- (a split's rank leaves every thread's partial tile in shared memory: BN·BM·4 bytes a
%     -- warp along K, qc::cluster_sum)
%     return {threads = THREADS, smem = math.max(16, RED_BYTES + RING_BYTES, SPLIT and BN * BM * 4 * WN or 0), k_multiple = KC, SR = SR, DR = DR, RED_BYTES = RED_BYTES,
%             SPLIT = SPLIT, cluster_k = SPLIT and SPLIT_K or 1, k_chunk = SPLIT and 4 * KC * WN or 0,
%             ld_multiple = KC, align = 16, KC = KC, NT = NT, RB = RB, AB = AB, R = R, RA = RA, T = T, AMX = AMX,
%             AE2 = A == "e2m1", Q4 = one_of(B, "s4", "u4"), E2M1 = B == "e2m1", INT = A == "s8",
%             -- weights with e8m0 block scales, dequantized into T with them by mx_regs (the
%             -- tokens of MXFP4 and MXFP8 too: a chunk is one block, or half of one)
%             BMX = SB == "mx",
%             -- each step folded into f32 times its scales: groups (one a step), 128-k blocks
%             GROUPF = SB == "group", SREL = SB == "group" and GROUP == BK, BLOCK = SA == "block" or SB == "block",
%             FOLD = SB == "group" or SA == "block" or SB == "block" or MAGICF,
%             -- bf16 × s4/u4: the weights enter the mma as 128 + q (u4) or 136 + q (s4), and each
%             -- step's sum starts from −OFF times the tokens' sum (weight_regs)
%             MAGICF = MAGICF, OFFV = B == "s4" and 136 or 128,
%             -- the mma: m16n8k16 in A's type for 16-bit tokens, m16n8k32 for 8-bit ones
%             MMA = AB == 2 and string.format("m16n8k16.row.col.f32.%s.%s.f32", T, T) or
%               (A == "s8" and "m16n8k32.row.col.s32.s8.s8.s32" or string.format("m16n8k32.row.col.f32.%s.%s.f32", B, A))}
%   end,
% }
% include("gemm_common.cuh")

namespace {

using qc::out_t;
using qc::u16;
using qc::u32;

constexpr int KC = $(KC), STEP = 4 * KC;  // k per 16-byte chunk of B, per step
constexpr int R = $(R), AB = $(AB);       // a chunk as mma registers; bytes of a token value
constexpr int RA = $(RA);                  // 16-byte loads of a token chunk
constexpr int ANUM = $(AMX and 1 or AB), ADEN = $(AE2 and 2 or 1); // bytes of a token value as stored
constexpr int NT = $(NT), RB = $(RB);     // token tiles of 8, row blocks of 16
constexpr int W = $(WN), D = $(DR);        // warps along K, steps in the register ring
% if SR then
constexpr int DB = $(STAGES);              // steps in flight a warp (shared memory)
constexpr int WCH = RB * 2;                // a lane's weight chunks a step, then its token chunks
constexpr int SLOT = (WCH + NT * RA) * 512; // a warp's slot: those × 32 lanes × 16 bytes
% end
constexpr int WR = $(WM);                  // warps across the rows, 16·RB rows each
constexpr int RBYTES_NUM = $(one_of(B, "f16", "bf16") and 2 or 1), RBYTES_DEN = $((Q4 or E2M1) and 2 or 1); // bytes a value
% if INT then
typedef int acc_t; // exact int32 sums
% else
typedef float acc_t;
% end

// Loads that leave zeros where !p.  The zeros are written in the same asm, so nothing reads
// the destination between the load's issue and its use (a select after a load would wait
// for it, which serializes the ring).  B bypasses L1 (read once); A and scales use it.  B
// and its scales take the read-only path (ld.global.nc); A and its scales, which the kernel
// before may have written, coherent loads (ld16, lda_*): under an early start that kernel
// runs during this one's life, which .nc's contract forbids, and on the H100 the tokens read
// by .nc held the previous graph replay's (ld.global.cg cost up to 28% at M = 16, the
// warps across the rows no longer sharing them through L1).
// G = false: the loads of the passes wholly inside K, which need neither (a row past N or a
// token past M reads row 0, and only outputs that are never stored use it).
template <bool G> struct guard { static constexpr bool on = G; };
% local A_LD = "ld.global"
% for _, f in ipairs({{"ld16_stream", "ld.global.nc.L1::no_allocate"}, {"ld16", A_LD}}) do
template <bool G> __device__ __forceinline__ uint4 $(f[1])(const void *ptr, bool p)
{
    uint4 r;
    if (G)
        asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n"
                     "mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
                     "@q $(f[2]).v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(ptr), "r"((int)p));
    else
        asm volatile("$(f[2]).v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(ptr));
    return r;
}
% end
% if SR then
using qc::lds16; // a lane's 16 bytes of the ring, after the cp.async wait
// 16 bytes of tokens into the ring through L1 (the warps across the rows copy the same
// chunks at about the same time: one L2 read), zeros where src_bytes is 0
__device__ __forceinline__ void cp_async16_ca(u32 dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
% end
% if BMX then
// An e8m0 scale, 2^(e−127), as f32 (e = 0: 2^-127, 0xFF: NaN)
__device__ __forceinline__ float e8m0(u16 e)
{
    return e == 255 ? __uint_as_float(0x7fc00000u) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float((u32)e << 23);
}
% end
% if GROUPF then
using qc::gs_t;
using qc::gs_f32;
% end
// The scales, loaded as the weights are (zero where !p): f32 group or block scales, 16-bit
// group scales, e8m0 bytes; ld_* for B's, lda_* (coherent) for A's.
% local loaders = {}
% if (GROUPF and GS == "f32") or BLOCK then loaders[#loaders + 1] = {"float", "f32", "f", "b32"} end
% if GROUPF and GS ~= "f32" then loaders[#loaders + 1] = {"u16", "u16", "h", "b16"} end
% if BMX then loaders[#loaders + 1] = {"u16", "u8", "h", "b16"} end
% for _, l in ipairs(loaders) do
%   for _, side in ipairs({{"ld_", "ld.global.nc"}, {"lda_", A_LD}}) do
template <bool G> __device__ __forceinline__ $(l[1]) $(side[1])$(l[2])(const void *ptr, bool p)
{
    $(l[1]) r;
    if (!G)
        asm volatile("$(side[2]).$(l[2]) %0, [%1];\n" : "=$(l[3])"(r) : "l"(ptr));
    else
        asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\nmov.$(l[4]) %0, 0;\n"
                     "@q $(side[2]).$(l[2]) %0, [%1];\n}\n" : "=$(l[3])"(r) : "l"(ptr), "r"((int)p));
    return r;
}
%   end
% end
% LDG = GROUPF and (GS == "f32" and "ld_f32" or "ld_u16") or nil

% if OUT ~= "f32" then
__device__ __forceinline__ out_t cvt_out(float x)
{
    out_t r;
    asm("cvt.rn.$(OUT).f32 %0, %1;\n" : "=h"(r) : "f"(x));
    return r;
}
% end

// One mma: 16 weight rows (a: rows g, g+8 at two k positions each) × 8 tokens (b).
__device__ __forceinline__ void mma(acc_t (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
% local cc = INT and "r" or "f"
    asm("mma.sync.aligned.$(MMA) "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+$(cc)"(c[0]), "+$(cc)"(c[1]), "+$(cc)"(c[2]), "+$(cc)"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel)
{
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// One chunk of a weight row as R mma registers; register i stands for k positions order(i)
// of the chunk, which the token side takes the same way (tok_regs).
% if BMX then
// An e8m0 scale as a pair of T (the 16-bit operands' type): 2^(e−127) (e = 0 is 2^-127, 0xFF
// NaN), rounded to T (f16 holds 2^-24 to 2^15 of it).
__device__ __forceinline__ u32 mx_scale(u16 e)
{
    u32 r;
    asm("cvt.rn.$(T)x2.f32 %0, %1, %1;\n" : "=r"(r) : "f"(e8m0(e)));
    return r;
}

// Bits placed as a value times 2^-b, taken back by k = 2^b and times the block's scale sc (pairs
// of T): two fmas, each exact where T holds its result.
__device__ __forceinline__ u32 unbias_scale(u32 t, u32 k, u32 sc)
{
    asm("fma.rn.$(T)x2 %0, %1, %2, %3;\n" : "=r"(t) : "r"(t), "r"(k), "r"(0x80008000u));
    asm("fma.rn.$(T)x2 %0, %1, %2, %3;\n" : "=r"(t) : "r"(t), "r"(sc), "r"(0x80008000u)); // + (−0): a product
    return t;
}

%   local BF = T == "bf16"
// A chunk of MX weights (or tokens) as R pairs of T, times its block's 2^(e−127).
// e2m1 (sign, two exponent bits, one mantissa bit), 32 values, pairs (k, k+4) of a word as in
// the 4-bit integers: the bits placed at the top of T's exponent and mantissa are the value
// times 2^-126 (bf16) or 2^-14 (f16), subnormals included; one fma takes that back exactly,
// and one more the block's scale (exact where T holds the product).  (One fma by 2^(e−1)
// where that is a number of T, chosen per warp by a vote, ran slower on the H100: the kernel
// took more registers, and a CTA less of the SM.)
// e4m3 (sign, four exponent bits, three mantissa bits), 16 values, pairs (k, k+1) in order, T
// bf16: PRMT puts each byte beside a byte of its sign (the selector's sign-replicating mode);
// one shift and one mask then leave its seven low bits at the bottom of bf16's exponent and
// the top of its mantissa, under its sign: the value times 2^-120, subnormals included (an
// e4m3 subnormal is a bf16 one).  One fma by 2^120 takes that back exactly, one more the
// block's scale (exact where bf16 holds the product: scale exponents −124 to +119 for every
// code).  The code S.1111.111, e4m3's NaN, reads as ±480 here; qjit's quantizers never write
// it (a group with a NaN or an infinity gets scale 0xFF, which is NaN in mx_scale, and codes 0).
%   if AE2 then
% include("gemm_e2m1.cuh")
%   end
__device__ __forceinline__ void mx_regs(const uint4 &w, u32 (&p)[R], u16 e)
{
    const u32 v[4] = {w.x, w.y, w.z, w.w};
    const u32 sc = mx_scale(e);
%   if AE2 then
    // MXFP4: both sides come through here, so a chunk's k order is free: register 4i + q holds
    // nibbles 2q, 2q + 1 of word i, by byte tables (about 2.2 instructions a value, where the
    // pairs (k, k + 4) below take about 3.5)
    u32 t[4];
    e2m1_tables(sc, t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 o[4];
        e2m1_bf16x8(v[i], t, o);
#pragma unroll
        for (int q = 0; q < 4; ++q)
            p[4 * i + q] = o[q];
    }
%   else
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < R / 4; ++j) {
%   if E2M1 then
            const u32 x = v[i] >> (4 * j);
            const u32 t = ((x << 12) & 0x80008000u) | ((x << $(BF and 6 or 9)) & $(BF and "0x01c001c0u" or "0x0e000e00u"));
            p[4 * i + j] = unbias_scale(t, $(BF and "0x7e807e80u" or "0x74007400u"), sc); // 2^126, 2^14
%   else
            // bytes 2j, 2j + 1 of the word: [byte, its sign, byte, its sign]
            p[2 * i + j] = unbias_scale((prmt(v[i], 0u, j ? 0xB3A2u : 0x9180u) << 4) & 0x87f087f0u, 0x7b807b80u, sc); // 2^120
%   end
        }
%   end
}

% else
__device__ __forceinline__ void weight_regs(const uint4 &w, u32 (&p)[R])
{
    const u32 v[4] = {w.x, w.y, w.z, w.w};
% if B == A or (AB == 1 and B ~= "s4") then
    // as stored: register i is the values of bytes 4i..4i+3 (two 16-bit or four 8-bit values)
#pragma unroll
    for (int i = 0; i < 4; ++i)
        p[i] = v[i];
% elseif AB == 1 then
    // s4 against s8 tokens: word i (k 8i..8i+7) as two registers of bytes 16·q, k 8i + 0, 2,
    // 4, 6 (the low nibbles moved up) and k 8i + 1, 3, 5, 7 (the high nibbles in place)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        p[2 * i] = (v[i] << 4) & 0xf0f0f0f0u;
        p[2 * i + 1] = v[i] & 0xf0f0f0f0u;
    }
% elseif Q4 and A == "bf16" then
    // 8 nibbles a word, k 8i..8i+7, pairs (k, k+4): (nibble | 128) is 128 + n exactly in
    // bf16 (ulp 1 at 128).  For s4 the lop3 is (x & mask) ^ (128 | 8), the OR of the magic
    // and the sign bit's XOR in one (the masked nibble and the magic share no bit): n ^ 8 =
    // q + 8.  With MAGICF that is the mma operand as it is: the step's sum then holds
    // OFF·(the tokens' sum), which starts the sum off (below) in place of one fma a pair
    // here; without it (8 tokens a tile, where the tokens' sums cost more than the fmas:
    // measured on the H100), one fma takes OFF off.
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u32 t;
            asm("lop3.b32 %0, %1, %2, %3, $(B == "s4" and "0x6a" or "0xea");\n" : "=r"(t) : "r"(v[i] >> (4 * j)), "r"(0x000f000fu), "r"($(B == "s4" and "0x43084308u" or "0x43004300u")));
%   if MAGICF then
            p[4 * i + j] = t;
%   else
            asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(p[4 * i + j]) : "r"(t), "r"(0x3f803f80u), "r"($(B == "s4" and "0xc308c308u" or "0xc300c300u"))); // − OFF
%   end
        }
% elseif Q4 then
    // 8 nibbles a word, k 8i..8i+7, pairs (k, k+4): the low nibbles of a byte pair ORed into
    // 1024 (ulp 1) are 1024 + n, the high ones in place 1024 + 16n (f16's 10-bit mantissa
    // holds them exactly), so a word takes one shift: one fma takes 1024 off the first, and
    // one by 1/16 takes 64 off the second (for s4 with the bias 8 of n ^ 8, the sign bit's
    // XOR folded into the lop3: (x & mask) ^ (magic | sign bit)).  Exact integers.
%   local s4 = B == "s4"
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 x = h ? v[i] >> 8 : v[i];
            u32 lo, hi;
            asm("lop3.b32 %0, %1, %2, %3, $(s4 and "0x6a" or "0xea");\n" : "=r"(lo) : "r"(x), "r"(0x000f000fu), "r"($(s4 and "0x64086408u" or "0x64006400u")));
            asm("lop3.b32 %0, %1, %2, %3, $(s4 and "0x6a" or "0xea");\n" : "=r"(hi) : "r"(x), "r"(0x00f000f0u), "r"($(s4 and "0x64806480u" or "0x64006400u")));
            asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(p[4 * i + 2 * h]) : "r"(lo), "r"(0x3c003c00u), "r"($(s4 and "0xe408e408u" or "0xe400e400u"))); // − (1024 + 8)
            asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(p[4 * i + 2 * h + 1]) : "r"(hi), "r"(0x2c002c00u), "r"($(s4 and "0xd480d480u" or "0xd400d400u"))); // /16 − (64 + 8)
        }
% else
    // s8 against 16-bit tokens, k 4i..4i+3 a word, pairs (k, k+1) in order: each byte
    // u = q + 128 becomes the f32 2^23 + u (PRMT into the mantissa), less 2^23 + 128 is q
    // exactly, two of them rounded (exactly) to a pair of A's type.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 x = v[i] ^ 0x80808080u;
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            f[j] = __uint_as_float(prmt(x, 0x4b00u, 0x5440u | j)) - 8388736.f;
        asm("cvt.rn.$(A)x2.f32 %0, %1, %2;\n" : "=r"(p[2 * i]) : "f"(f[1]), "f"(f[0]));
        asm("cvt.rn.$(A)x2.f32 %0, %1, %2;\n" : "=r"(p[2 * i + 1]) : "f"(f[3]), "f"(f[2]));
    }
% end
}
% end

% if not AMX then
// A token's chunk (a, as loaded: KC values in order) as R registers in weight_regs' order.
__device__ __forceinline__ void tok_regs(const uint4 (&a)[R / 4], u32 (&t)[R])
{
#pragma unroll
    for (int i = 0; i < R / 4; ++i) {
% if (Q4 or E2M1) and AB == 2 then
        t[4 * i + 0] = prmt(a[i].x, a[i].z, 0x5410u); // k 0, 4
        t[4 * i + 1] = prmt(a[i].x, a[i].z, 0x7632u); // k 1, 5
        t[4 * i + 2] = prmt(a[i].y, a[i].w, 0x5410u); // k 2, 6
        t[4 * i + 3] = prmt(a[i].y, a[i].w, 0x7632u); // k 3, 7
% elseif Q4 then
        t[4 * i + 0] = prmt(a[i].x, a[i].y, 0x6420u); // k 0, 2, 4, 6
        t[4 * i + 1] = prmt(a[i].x, a[i].y, 0x7531u); // k 1, 3, 5, 7
        t[4 * i + 2] = prmt(a[i].z, a[i].w, 0x6420u);
        t[4 * i + 3] = prmt(a[i].z, a[i].w, 0x7531u);
% else
        t[4 * i + 0] = a[i].x;
        t[4 * i + 1] = a[i].y;
        t[4 * i + 2] = a[i].z;
        t[4 * i + 3] = a[i].w;
% end
    }
}
% end

} // namespace

extern "C" __global__ void __launch_bounds__($(threads)) qjit_gemm_kernel(const qjit_params p)
{
    extern __shared__ __align__(16) float red[];
    const int M = (int)p.m, N = (int)p.n, K = (int)p.k;
    // warp = wr + WR·wk: its rows (wr) and its steps of K (wk); the WR warps of one wk take
    // the same steps at about the same time, so their token chunks come from L1 after the
    // first of them
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int wr = warp % WR, wk = warp / WR;
    // The grid is N/BN × M/BM, taken in launch order with the token tiles of one row tile
    // next to each other: the CTAs that read the same weights run at about the same time, so
    // DRAM serves them once and L2 the others (with the row tiles in launch order, a grid of
    // several waves read the weights once a token tile)
    const unsigned lin = blockIdx.x + gridDim.x * blockIdx.y;
    const int rt = (int)(lin / gridDim.y), mt = (int)(lin % gridDim.y);
    const int n0 = rt * (16 * RB * WR) + wr * (16 * RB), m0 = mt * (8 * NT);
% if SPLIT then
    // K split across the gridDim.z CTAs of a cluster: this rank's steps [k_s0, nsteps) (zeros
    // past nsteps, as past K), the steps dealt evenly (the launch gives no more ranks than
    // steps, so none is empty)
    const int all_steps = (K + STEP - 1) / STEP;
    const int k_s0 = (int)((long long)blockIdx.z * all_steps / gridDim.z),
              nsteps = (int)((long long)(blockIdx.z + 1) * all_steps / gridDim.z);
% else
    const int nsteps = (K + STEP - 1) / STEP;
% end
    const long long row_bytes = p.ldb * RBYTES_NUM / RBYTES_DEN;

    // this thread's weight rows n0 + 16r + g + 8h, chunk c of each step; token rows m0 + g + 8t
    const char *brow[RB][2];
    bool bok[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * r + g + 8 * h;
            bok[r][h] = n < N;
            brow[r][h] = static_cast<const char *>(p.b) + (long long)(n < N ? n : 0) * row_bytes + c * 16;
        }
    const char *arow[NT];
    bool aok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const int m = m0 + g + 8 * t;
        aok[t] = m < M;
        arow[t] = static_cast<const char *>(p.a) + ((long long)(m < M ? m : 0) * p.lda + c * KC) * ANUM / ADEN;
    }
% if GROUPF then
    const int groups = K / $(GROUP);                 // scale entries a row
    const gs_t *srow[RB][2];
%   if ZEROS then
    const gs_t *zrow[RB][2];
%   end
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long at = (long long)(bok[r][h] ? n0 + 16 * r + g + 8 * h : 0) * groups;
            srow[r][h] = static_cast<const gs_t *>(p.scale_b) + at;
%   if ZEROS then
            zrow[r][h] = static_cast<const gs_t *>(p.zeros_b) + at;
%   end
        }
% end
% if BLOCK then
    // 1x128 (A) and 128x128 (B) blocks: a step (64 k) lies in one block; the CTA's rows in one
    // block row of B (BN divides 128)
    const int kb = (K + 127) / 128;
%   if SA == "block" then
    const float *farow[NT][2];
    bool faok[NT][2];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int m = m0 + 8 * t + 2 * c + e; // the tokens of this thread's accumulators
            faok[t][e] = m < M;
            farow[t][e] = static_cast<const float *>(p.scale_a) + (long long)(m < M ? m : 0) * kb;
        }
%   end
%   if SB == "block" then
    const float *fbrow = static_cast<const float *>(p.scale_b) + (long long)(n0 / 128) * kb;
%   end
% end
% if BMX then
    // e8m0 scales: this thread's chunk of a step lies in one 32-k block (it is the block of
    // 4-bit values, half of it of 8-bit ones)
    const unsigned char *erow[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            erow[r][h] = static_cast<const unsigned char *>(p.scale_b) +
                         (long long)(bok[r][h] ? n0 + 16 * r + g + 8 * h : 0) * (K / 32) + c * KC / 32;
% end
% if AMX then
    // and the tokens' (rows m0 + g + 8t, as arow)
    const unsigned char *etok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t)
        etok[t] = static_cast<const unsigned char *>(p.scale_a) + (long long)(aok[t] ? m0 + g + 8 * t : 0) * (K / 32) + c * KC / 32;
% end

% if SR then
    // the ring in shared memory: this lane's chunks of a step at slot·SLOT + i·512 + 16·lane
    // of its warp's DB slots (i = 2r + h for the weights, WCH + RA·t + i for the tokens),
    // which no other lane reads
    const u32 ring = qc::smem_addr(red) + $(RED_BYTES) + warp * (DB * SLOT) + lane * 16;
    // the register ring: D steps of scales
% else
    // the ring: D steps of B chunks, token chunks (and group scales) in registers
    uint4 wb[D][RB][2];
% end
% if not SR then
    uint4 ab[D][NT][RA];
% end
% if AMX then
    u16 ea[D][NT];
% end
% if GROUPF then
    gs_t sb[D][RB][2];
%   if ZEROS then
    gs_t zb[D][RB][2];
%   end
% end
% if SA == "block" then
    float fa[D][NT][2];
% end
% if SB == "block" then
    float fb[D];
% end
% if BMX then
    u16 eb[D][RB][2];
% end
    // step s into slot d: the weights (and their scales), then the tokens
    auto load_b = [&](int d, int s0, int rel, auto gd) {
        constexpr bool G = decltype(gd)::on;
        const int s = s0 + rel;
        (void)G;
        const bool in = $(SPLIT and "s < nsteps && " or "")s * STEP + c * KC < K; // this thread's chunk of step s
        (void)in;
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
% if not SR then
                wb[d][r][h] = ld16_stream<G>(brow[r][h] + rel * 64, in && bok[r][h]);
% end
% if GROUPF then
                const int grp = $(SREL and "rel" or string.format("s * STEP / %d", GROUP));
                sb[d][r][h] = $(LDG)<G>(srow[r][h] + grp, s < nsteps && bok[r][h]);
%   if ZEROS then
                zb[d][r][h] = $(LDG)<G>(zrow[r][h] + grp, s < nsteps && bok[r][h]);
%   end
% end
% if BMX then
                eb[d][r][h] = ld_u8<G>(erow[r][h] + s * (STEP / 32), in && bok[r][h]);
% end
            }
% if SB == "block" then
        fb[d] = ld_f32<G>(fbrow + s * STEP / 128, s < nsteps);
% end
    };
% if SR then
    // step s's weight chunks, then its token chunks and the commit that closes the step's
    // cp.async group, into ring slot j (zeros past K, N and M)
    auto load_ww = [&](int j, int s0, int rel, auto gd) {
        constexpr bool G = decltype(gd)::on;
        const int s = s0 + rel;
        (void)G;
        const bool in = $(SPLIT and "s < nsteps && " or "")s * STEP + c * KC < K;
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                qc::cp_async16(ring + j * SLOT + (2 * r + h) * 512, brow[r][h] + rel * 64,
                               !G || (in && bok[r][h]) ? 16 : 0);
    };
    auto load_wa = [&](int j, int s0, int rel, auto gd) {
        constexpr bool G = decltype(gd)::on;
        const int s = s0 + rel;
        (void)G;
        const bool in = $(SPLIT and "s < nsteps && " or "")s * STEP + c * KC < K;
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int i = 0; i < RA; ++i)
                cp_async16_ca(ring + j * SLOT + (WCH + RA * t + i) * 512,
                              arow[t] + rel * (STEP * ANUM / ADEN) + 16 * i, !G || (in && aok[t]) ? 16 : 0);
        qc::cp_async_commit();
    };
% end
    auto load_a = [&](int d, int s0, int rel, auto gd) {
        constexpr bool G = decltype(gd)::on;
        const int s = s0 + rel;
        (void)G;
        const bool in = $(SPLIT and "s < nsteps && " or "")s * STEP + c * KC < K;
% if not SR then
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int i = 0; i < RA; ++i)
                ab[d][t][i] = ld16<G>(arow[t] + rel * (STEP * ANUM / ADEN) + 16 * i, in && aok[t]);
% end
        (void)in;
% if AMX then
#pragma unroll
        for (int t = 0; t < NT; ++t)
            ea[d][t] = lda_u8<G>(etok[t] + s * (STEP / 32), in && aok[t]);
% end
% if SA == "block" then
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                fa[d][t][e] = lda_f32<G>(farow[t][e] + s * STEP / 128, s < nsteps && faok[t][e]);
% end
    };

    // The weight, token (and scale) pointers stand at this warp's step s0, so that a load's
    // address is a pointer plus a constant; each pass moves them D·W steps on.
    auto advance = [&](int steps) {
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                brow[r][h] += steps * 64;
% if SREL then
                srow[r][h] += steps;
%   if ZEROS then
                zrow[r][h] += steps;
%   end
% end
            }
#pragma unroll
        for (int t = 0; t < NT; ++t)
            arow[t] += steps * (STEP * ANUM / ADEN);
    };
    advance($(SPLIT and "k_s0 + wk" or "wk"));

% if FOLD then
    float acc[RB][NT][4]; // the folded sum
% else
    acc_t acc[RB][NT][4];
% end
    qc::zero(acc);
% if one_of(A, "s8", "e4m3") and one_of(B, "s8", "e4m3") then
    // 8-bit weights behind 8-bit tokens, whose quantizer is the kernel before: under an early
    // start the wait below lasts that one's run (1-3 µs), the first loads long landed and DRAM
    // idle, so each of the CTA's rows asks its next PF_BYTES (four steps) past the steps in
    // flight into L2 (one bulk prefetch a row, sm_90) to stream meanwhile.  On the H100 the
    // W8A8 layer (quantize, then this) costs 1.012-1.023x its GEMM alone with it; its gain
    // alone was measured only while the tokens were read by the read-only path, which the
    // early start made wrong (docs/NOTES.md), and is to be measured again.  Without the early
    // start the prefetch only repeats the loads that come next and costs 1-9%, 4-bit weights
    // the most; hence the two gates, and only where the weights may be read before the wait
    // (qc::EARLY_WEIGHTS, which comes with the early start).  Before the ring's loads, while
    // none of its registers is live (after them, ptxas spilled the 255-register tiles).
    if (p.flags & qc::EARLY_WEIGHTS) {
        constexpr int PF_BYTES = 256, BNC = 16 * RB * WR; // the CTA's rows
        const long long kb = (long long)K * RBYTES_NUM / RBYTES_DEN; // a row's bytes of K
%   if SPLIT then
        const long long end = kb < (long long)nsteps * 64 ? kb : (long long)nsteps * 64; // this rank's
        const long long off = (long long)(k_s0 + $(SR and "DB" or "D") * W) * 64;
%   else
        const long long end = kb, off = (long long)($(SR and "DB" or "D") * W) * 64;
%   end
        if (off < end)
            for (int i = threadIdx.x; i < BNC; i += blockDim.x) {
                const int n = rt * BNC + i;
                const long long left = end - off;
                if (n < N)
                    qc::prefetch_l2(static_cast<const char *>(p.b) + n * row_bytes + off,
                                    (unsigned)((left < PF_BYTES ? left : PF_BYTES) & ~15ll));
            }
    }
% end
    // The weights do not depend on the kernel before this one where the launch says so
    // (qc::EARLY_WEIGHTS: QJIT_PDL=1, or the quantizer's GEMM of qjit_linear_launch): the
    // first D steps of weights are then on their way before the wait for it, and load under
    // that kernel's tail.  Otherwise (an early start under QJIT_PDL=2, where the kernel before
    // may have written them) the wait comes first.  The next kernel is let start after the
    // main loop (below).
    if (!(p.flags & qc::EARLY_WEIGHTS))
        qc::pdl_wait();
% if SR then
    // the ring's weights too, not yet committed: the tokens depend on the kernel before, so
    // they follow the wait, and step 0's commit closes a first group that holds every
    // weight of the first DB steps (a superset of its step: the count of groups holds)
#pragma unroll
    for (int j = 0; j < DB; ++j)
        load_ww(j, $(SPLIT and "k_s0 + wk" or "wk"), j * W, guard<true>());
% end
#pragma unroll
    for (int d = 0; d < D; ++d)
        load_b(d, $(SPLIT and "k_s0 + wk" or "wk"), d * W, guard<true>());
    qc::pdl_wait();
% if SR then
#pragma unroll
    for (int j = 0; j < DB; ++j)
        load_wa(j, $(SPLIT and "k_s0 + wk" or "wk"), j * W, guard<true>());
% end
#pragma unroll
    for (int d = 0; d < D; ++d)
        load_a(d, $(SPLIT and "k_s0 + wk" or "wk"), d * W, guard<true>());
    // A straight-line body: slot d is used in place, then reloaded D·W steps ahead (the
    // weights' ring slot j, DB·W steps ahead).
% if SR then
    int j = 0; // this warp's step count: ring slot j of the step s0 + d·W
% end
    // Two passes of the same body: first while every load of a pass (the last one D − 1 + LA
    // steps of this warp ahead) lies wholly inside K, with no predicate and no zero fill;
    // then the last passes, guarded.
    constexpr int LA = $(SR and "DB" or "D"); // how far ahead a slot is reloaded, in steps of this warp
    int s0 = $(SPLIT and "k_s0 + wk" or "wk");
% for _, G in ipairs({"false", "true"}) do
%   if G == "false" then
    for (; s0 < nsteps && (s0 + (D - 1 + LA) * W + 1) * STEP <= K$(SPLIT and " && s0 + (D - 1 + LA) * W < nsteps" or ""); s0 += D * W) {
%   else
    for (; s0 < nsteps; s0 += D * W) {
%   end
#pragma unroll
        for (int d = 0; d < D; ++d) {
% if SR then
            // the step's chunks have landed once at most DB − 1 later groups are pending
            qc::cp_async_wait<DB - 1>();
            uint4 wcur[RB][2], acur[NT][RA];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    wcur[r][h] = lds16(ring + j * SLOT + (2 * r + h) * 512);
#pragma unroll
            for (int t = 0; t < NT; ++t)
#pragma unroll
                for (int i = 0; i < RA; ++i)
                    acur[t][i] = lds16(ring + j * SLOT + (WCH + RA * t + i) * 512);
% end
            u32 tp[NT][R];
#pragma unroll
            for (int t = 0; t < NT; ++t)
% if AMX then
                mx_regs($(SR and "acur" or "ab[d]")[t][0], tp[t], ea[d][t]);
% else
                tok_regs($(SR and "acur" or "ab[d]")[t], tp[t]);
% end
% if ZEROS or MAGICF then
            // the step's sums of A, per token: an mma of ones against the token pairs
            acc_t asum[NT][4];
            qc::zero(asum);
            const u32 ones = $(A == "bf16" and "0x3f803f80u" or "0x3c003c00u");
#pragma unroll
            for (int t = 0; t < NT; ++t)
#pragma unroll
                for (int j = 0; j < R / 2; ++j)
                    mma(asum[t], ones, ones, ones, ones, tp[t][2 * j], tp[t][2 * j + 1]);
% end
% if MAGICF and not ZEROS then
            // bf16 × 4-bit: the weights are OFF + q (weight_regs), so a step's sum starts from
            // −OFF times the tokens' sum (one rounding; the sum then comes back to Σq·a)
            float ca[NT][4];
#pragma unroll
            for (int t = 0; t < NT; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    ca[t][i] = -$(OFFV).f * asum[t][i];
% end
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                u32 w0[R], w1[R];
% local WB = SR and "wcur" or "wb[d]" -- this step's weight chunks
% if BMX then
                mx_regs($(WB)[r][0], w0, eb[d][r][0]);
                mx_regs($(WB)[r][1], w1, eb[d][r][1]);
% else
                weight_regs($(WB)[r][0], w0);
                weight_regs($(WB)[r][1], w1);
% end
% if FOLD then
                acc_t part[NT][4];
%   if INT then
                // the step's int32 sums start from the bits of 1.5·2^23 (as mma_i8's do): a
                // sum x within ±2^22 (a step of s8 × 16·s4 is within ±2^21) reads as the float
                // 1.5·2^23 + x exactly, one FADD where an I2F (a quarter-rate pipe) was (adding
                // the bits afterwards, qc::exact_f32, spilled this kernel: ptxas)
                qc::fill(part, 0x4B400000);
%   elseif MAGICF then
%     if ZEROS then
                // with zero points z the weights are 128 + q, less (128 + z): start from
                // −(128 + z) times the tokens' sum
                const float oz = -($(OFFV).f + gs_f32(zb[d][r][0])), oz8 = -($(OFFV).f + gs_f32(zb[d][r][1]));
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        part[t][i] = (i < 2 ? oz : oz8) * asum[t][i];
%     else
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        part[t][i] = ca[t][i];
%     end
%   else
                qc::zero(part);
%   end
% end
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int j = 0; j < R / 2; ++j)
                        mma($(FOLD and "part[t]" or "acc[r][t]"), w0[2 * j], w1[2 * j], w0[2 * j + 1], w1[2 * j + 1], tp[t][2 * j], tp[t][2 * j + 1]);
% if GROUPF then
                // fold the step (inside one group) in: acc += s·(part − z·asum)
                const float s_g = gs_f32(sb[d][r][0]), s_g8 = gs_f32(sb[d][r][1]);
%   if ZEROS and not MAGICF then
                const float z_g = gs_f32(zb[d][r][0]), z_g8 = gs_f32(zb[d][r][1]);
%   end
% end
% if FOLD then
#pragma unroll
                for (int t = 0; t < NT; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
%   if GROUPF then
                        const float sc = i < 2 ? s_g : s_g8;
%   else
                        // the step's 128-k block: token and weight block scales
                        const float sc = $(SA == "block" and "fa[d][t][i & 1]" or "1.f") * $(SB == "block" and "fb[d]" or "1.f");
%   end
%   if ZEROS and not MAGICF then
                        const float v = __fmaf_rn(-(i < 2 ? z_g : z_g8), asum[t][i], part[t][i]);
%   else
                        const float v = $(INT and "__int_as_float(part[t][i]) - 12582912.f" or "(float)part[t][i]");
%   end
                        acc[r][t][i] = __fmaf_rn(sc, v, acc[r][t][i]);
                    }
% end
            }
% if not SR then
            load_b(d, s0, d * W + D * W, guard<$(G)>());
            load_a(d, s0, d * W + D * W, guard<$(G)>());
% else
            // the slot's values are in registers and used: refill it DB steps ahead
            load_ww(j, s0, d * W + DB * W, guard<$(G)>());
            load_wa(j, s0, d * W + DB * W, guard<$(G)>());
            j = j + 1 == DB ? 0 : j + 1;
% end
        }
% if SR then
        // the scales of the next pass's D steps, all at its end: a load's first use waits
        // for every global load still in flight (one scoreboard serves them all), so loads
        // issued one a step would make every step wait out a whole latency; a batch makes
        // one wait a pass
#pragma unroll
        for (int d = 0; d < D; ++d) {
            load_b(d, s0, d * W + D * W, guard<$(G)>());
            load_a(d, s0, d * W + D * W, guard<$(G)>());
        }
% end
        advance(D * W);
    }
% end
% if SR then
    qc::cp_async_wait<0>(); // the zero fills past K, before the shared memory is reused
% end
    // Every load of this thread is issued and used: under an early start (QJIT_PDL=1) the
    // next kernel may be scheduled now, so that its launch and first weight loads overlap
    // this kernel's sum and stores, not its stream of weights (the next grid's CTAs start
    // when every CTA of this one has passed here or exited).
    qc::pdl_launch();

    // the W warps' tiles of the same rows summed in the order of their steps by the first
    // of them (int32 sums as their bits: exact)
    if (W > 1) {
        constexpr int NV = RB * NT * 4;
        auto *v = &acc[0][0][0];
        float *mine = red + wr * (W - 1) * NV * 32;
        if (wk > 0)
#pragma unroll
            for (int i = 0; i < NV; ++i)
                mine[((wk - 1) * NV + i) * 32 + lane] = $(INT and not FOLD and "__int_as_float(v[i])" or "v[i]");
        __syncthreads();
% if not SPLIT then
        if (wk > 0)
            return;
% else
        if (wk == 0)
% end
        for (int w = 1; w < W; ++w)
#pragma unroll
            for (int i = 0; i < NV; ++i)
                v[i] += $(INT and not FOLD and "__float_as_int(mine[((w - 1) * NV + i) * 32 + lane])" or "mine[((w - 1) * NV + i) * 32 + lane]");
    }
% if SPLIT then
    // then the ranks' tiles, added by rank 0 in rank order (qc::cluster_sum; the warps along K
    // after the first carry their own parts along, unused); a launch that did not split skips it
    if (!qc::cluster_sum<RB * NT * 4, $(threads)>(&acc[0][0][0], qc::smem_addr(red), (int)threadIdx.x) || wk > 0)
        return;
% end

    // epilogue: acc[r][t][i] is row n0 + 16r + g + 8(i/2), token m0 + 8t + 2c + i%2; rows g
    // and g + 8 of one token go through finish2 together
    out_t *Dp = static_cast<out_t *>(p.d);
% if SB == "tensor" then
    const float sb_t = static_cast<const float *>(p.scale_b)[0];
% end
% if SA == "tensor" then
    const float sa_t = static_cast<const float *>(p.scale_a)[0];
% end
    // s4 against s8 tokens summed 16·q (weight_regs): 1/16 is exact
    constexpr float unit = $(INT and Q4 and "0.0625f" or "1.f");
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int na = n0 + 16 * r + g, nb = na + 8;
        float s0 = 0.f, s1 = 0.f, b0 = 0.f, b1 = 0.f;
% if SB == "col" then
        s0 = na < N ? static_cast<const float *>(p.scale_b)[na] : 0.f;
        s1 = nb < N ? static_cast<const float *>(p.scale_b)[nb] : 0.f;
% elseif SB == "tensor" then
        s0 = s1 = sb_t;
% end
% if BIAS then
        b0 = na < N ? qc::bias_at(static_cast<const out_t *>(p.bias), na) : 0.f;
        b1 = nb < N ? qc::bias_at(static_cast<const out_t *>(p.bias), nb) : 0.f;
% end
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int m = m0 + 8 * t + 2 * c + e;
                float sa = 0.f;
% if SA == "row" then
                sa = m < M ? static_cast<const float *>(p.scale_a)[m] : 0.f;
% elseif SA == "tensor" then
                sa = sa_t;
% end
                float x = (float)acc[r][t][e] * unit, y = (float)acc[r][t][2 + e] * unit;
                qc::finish2(x, y, sa, s0, s1, b0, b1);
                if (m < M) {
% if OUT == "f32" then
                    if (na < N) Dp[(long long)m * p.ldd + na] = x;
                    if (nb < N) Dp[(long long)m * p.ldd + nb] = y;
% else
                    if (na < N) Dp[(long long)m * p.ldd + na] = cvt_out(x);
                    if (nb < N) Dp[(long long)m * p.ldd + nb] = cvt_out(y);
% end
                }
            }
    }
}
