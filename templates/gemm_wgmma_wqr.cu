// gemm_wgmma_wqr.cu — Hopper GEMM for 4- and 8-bit weights dequantized in registers, sm_90a
// only: W4A16, A f16|bf16 (the tokens) × B s4|u4 (the weights) with col or group:g scales
// (zeros for u4 groups), W8A16, A f16|bf16 × B s8 with col scales, and W4A8, A s8 with row
// scales × B s4 with col or f32 group:g scales (g a multiple of 128), bf16 × e2m1 with e8m0
// scales per 32 of K (MX weights), and MXFP4 (e2m1 × e2m1, both mx: the tokens expanded to
// bf16 by the producer, mx4_tokens).  The weights are wgmma's A operand, taken from
// registers, and the tokens its B operand, from shared memory: each consumer warpgroup
// computes Dᵀ for its 64 weight rows and all BM tokens of the tile (wgmma m64nBMk16, W4A8
// m64nBMk32 on the int8 tensor cores), so that a weight row is dequantized once for BM
// tokens, in the consumer's own registers, while the tensor cores run the K tile before it.
// No dequantized copy of B is written to shared memory, and no producer waits on an
// expansion.
//
// The producer warpgroup fills a stage of the ring with each K tile's BM token rows (one
// 128-byte swizzled row: 64 values of 16 bits, or 128 of 8), as bulk tensor copies (TMA) of
// its rows up to M (under a K split from the rank's first value of K), and the tile's BN packed
// weight rows (32 or 64 bytes each, as stored) by cp.async (qh::produce with PB_ROW).  W4A16: a
// consumer thread holds, for each of its m64 blocks, rows g and g + 8 of its warp's 16 (g =
// lane/4) at k = 2t, 2t + 1, 2t + 8, 2t + 9 of each k16 step (t = lane%4): byte t of each
// 4-byte word of a packed row.  One prmt puts that byte in both halves of a word (bf16: its
// high nibble from the word shifted by 4, as bf16's 7 mantissa bits hold one nibble, not 16
// times one), one lop3 puts the two nibbles into the mantissas of 128.0 (bf16) or 1024.0
// (f16), whose ulp is 1, one fma in A's two-lane arithmetic leaves q − z exactly, and one
// multiply by the group's scale rounds (q − z)·s once: the reference's B̂.  col: B̂ = q
// exactly, the scale in the epilogue.  W4A8: the same rows at k = 4t .. 4t + 3 and 4t + 16 ..
// 4t + 19 of each k32 step (the same bytes of a 32-byte step); a prmt doubles the two bytes
// of four values and a shift and two logic operations move each nibble to the high half of
// its own byte, the s8 value 16·q exactly, whose 1/16 is taken back in f32 (exactly).  Its
// int32 sums are exact for K up to 2^17 (|16·q·a| ≤ 2^14, the bound of the int8 families'
// s8 × s8 products); with groups, each K tile's are promoted into an f32 total with the
// group's scale once the K tile's wgmma are done (the fma of the reference, bit for bit).
// W8A16: W4A16's values, bytes 2t, 2t + 1 of each 8-byte half of a 16-byte chunk; f16 by a
// prmt, a lop3 into 1024 + q + 128 and a subtraction, bf16 through f32.  bf16 × e2m1: W4A16's
// bytes and prmt, then two shifts and two logic operations place each nibble's sign and
// e e m as bf16 bits worth q·2^-126, and two multiplies (by 2^126, by the block's
// 2^(x−127) as bf16) give B̂ = q·2^(x−127) exactly for every code x ≤ 252.  K tile kt + 1 is
// dequantized into the second register set while K tile kt's wgmma run.
//
// The accumulators hold Dᵀ (weights along the wgmma's M); the epilogue pairs two weights of
// one token through a lane exchange and stages the tile as D's rows (tokens) in the staging
// buffer of the other Hopper kernels, which leaves by bulk copies.
//
// Parameters: BK = 64 (W4A16, W8A16) or 128 (W4A8).  WM = 1 and WN = 1 or 2 consumer warpgroups
// along N, each owning BN/WN = 64 weight rows (one m64 block; the code is written for NI
// blocks, but two made ptxas serialize the wgmma) and all BM tokens (a multiple of 16 up to
// 256: the wgmma's N); BM/2 accumulator registers (W4A8 with groups: twice that, a part and a
// total) and 32 for the two register sets of weights, beside ~56.  STAGES 3..8; the output
// staged in one pass, or two where the tile does not fit beside the ring.  K split across a
// cluster (split=2..4) for W4A16 and W8A16.
// Block: 128·(WN + 1) threads.  Shared memory: the ring (STAGES·(BM·128 + BN·PROW) bytes,
// PROW = 32 or 64), 2 KB of alignment slack and mbarriers, and the output staging buffer,
// BM·(BN·OUT_BYTES + 16).
//
// Correct on the H100 (test_gpu_quant over every tile of its sweeps and the tests' own, every
// pair and scale mode it serves, tails, padded leading dimensions, K splits and graph replays:
// 5881 passed, 0 failed; W4A8 col bit-exact; bf16 × e2m1 1484 and MXFP4 1783 passed); auto
// runs it past M = 64, before wgmma_wq, wgmma_i8 and mma_f8, which keep the pairs and modes
// this family does not serve (tensor scales, scales of another type, groups under 128 for
// W4A8, f16 × e2m1, MX tokens of e4m3).
% -- qjit family: name=wgmma_wqr id=12 order=25
% include("gemm_hopper_plan.cuh")
% -- the pairs and scale modes the register dequantization is exact for.  W4A16: 4-bit
% -- weights, col scales, or group scales of A's own type (and zero points of it, u4 only) in
% -- groups of a multiple of 32 values.  W4A8 (int8 wgmma): s8 tokens with row scales, s4
% -- weights with col scales, or f32 group scales in groups of a multiple of 128, one K tile:
% -- each K tile's exact int32 sums are promoted into f32.  W8A16: s8 weights with col scales
% -- (q exactly in A's type).  The modes its GPU tests run; the others of these pairs (tensor
% -- scales, group scales of 16 bits) stay with wgmma_i8 and wgmma_wq.
% local function wqr_pair()
%   if A == "s8" then
%     if not (SA == "row" and B == "s4" and not ZEROS) then return false end
%     return SB == "col" or (SB == "group" and GROUP % 128 == 0 and GS == "f32")
%   end
%   if one_of(A, "f16", "bf16") and SA == "none" and B == "s8" then
%     return SB == "col" and not ZEROS
%   end
%   if not (one_of(A, "f16", "bf16") and SA == "none" and one_of(B, "s4", "u4")) then return false end
%   if SB == "col" then return not ZEROS end
%   return SB == "group" and GS == A and GROUP % 32 == 0 and (not ZEROS or B == "u4")
% end
% -- bf16 × e2m1 with e8m0 scales per 32 of K (MX weights): B̂ = q·2^(x−127) in bf16, exact for
% -- every code x up to 252 (6·2^125; 253 and 254 overflow where |q| ≥ 4, 255 is NaN), as a
% -- group of 32.  Not f16, which holds q·2^(x−127) only for x in 106..140.
% local function wqr_mx() return A == "bf16" and SA == "none" and B == "e2m1" and SB == "mx" and not ZEROS end
% -- MXFP4 (e2m1 × e2m1, mx both): the weights as bf16 × e2m1's; the tokens, packed with their
% -- block scales, expanded by the producer into bf16 rows of the stage (q·2^(x−127), exact as
% -- the weights' are), so the consumers run bf16 wgmma on both; no K split.
% local function wqr_mx4() return A == "e2m1" and B == "e2m1" and SA == "mx" and SB == "mx" and not ZEROS end
% -- a configuration: BM tokens by BN weights, the consumers along N; a named tile without named
% -- warps gets a warpgroup for every 64 weights (at most two), a named one keeps its warps
% local function wqr_bk() return A == "s8" and 128 or 64 end -- values of K a K tile: one 128-byte token row
% local function wqr_choose(bm, bn, wn, stages)
%   local c = config(bm, bn, wqr_bk(), 1, wn, stages)
%   if BM ~= 0 then c.bm, c.bn, c.bk, c.wm, c.wn = BM, BN, BK, 1, math.max(1, math.min(2, BN // 64)) end
%   if WM ~= 0 then c.wm, c.wn = WM, WN end
%   if STAGES ~= 0 then c.stages = STAGES end
%   return c
% end
% -- the tuner's candidates: W4A16 and W8A16 (BK = 64), W4A8 (BK = 128)
% local wqr_space16 = {
%   default = {config(256, 128, 64, 1, 2, 4), config(256, 128, 64, 1, 2, 3), config(128, 128, 64, 1, 2, 6),
%              config(128, 128, 64, 1, 2, 4), config(64, 128, 64, 1, 2, 8), config(256, 64, 64, 1, 1, 5),
%              config(128, 64, 64, 1, 1, 8),
%              -- K split across a cluster where the tiles leave SMs idle (M = 128-256 on
%              -- 4096-8192-wide layers)
%              config(128, 64, 64, 1, 1, 8, 4), config(128, 128, 64, 1, 2, 6, 2), config(256, 128, 64, 1, 2, 4, 2),
%              config(256, 64, 64, 1, 1, 5, 4)},
%   ["small-m"] = {config(64, 128, 64, 1, 2, 8), config(128, 128, 64, 1, 2, 6), config(64, 64, 64, 1, 1, 8)},
% }
% local wqr_space8 = {
%   default = {config(256, 128, 128, 1, 2, 3), config(256, 128, 128, 1, 2, 4), config(128, 128, 128, 1, 2, 6),
%              config(128, 128, 128, 1, 2, 4), config(64, 128, 128, 1, 2, 8), config(256, 64, 128, 1, 1, 5),
%              config(128, 64, 128, 1, 1, 8)},
%   ["small-m"] = {config(64, 128, 128, 1, 2, 8), config(128, 128, 128, 1, 2, 6), config(64, 64, 128, 1, 1, 8)},
% }
% family {
%   floor = 90,
%   -- its GPU tests ran clean on the H100 (test_gpu_quant)
%   measured = true,
%   serves = function() return wqr_pair() or wqr_mx() or wqr_mx4() end,
%   -- Past M = 128: 256 tokens by 128 weights, two consumers of 64 weights: a weight row is
%   -- dequantized once for 256 tokens.  Up to 128, and for f32 output (whose staged 256-token
%   -- tile does not fit beside the ring): 128x128, twice the CTAs.  Decode (M <= 64): gemv and
%   -- mma_wq under auto; named, 64 tokens by 128 weights.  MX weights at M = 33-64 take that
%   -- tile under auto too: it won the M = 64 bucket on 7 of the 9 Llama 3 layers for bf16 x e2m1
%   -- and MXFP4 (qjit-tune on the H100: 1.3-2.7x mma_wq 16x128x128, the heuristic before; gemv
%   -- took the 4096-wide ones).
%   default = function(m)
%     if m ~= 0 and m <= 64 and BM == 0 then
%       return (NAMED or (B == "e2m1" and m > 32)) and wqr_choose(64, 128, 2, 8) or nil
%     end
%     -- a named tile or named warps: one configuration at every M, 4 stages
%     if BM ~= 0 or WM ~= 0 then return wqr_choose(128, 128, 2, 4) end
%     -- W4A8: 128 tokens by 128 weights, 6 stages; with groups a part and a total of 64
%     -- registers each (256 tokens do not fit).  Without groups, past M = 1024, 256x128 with 4
%     -- stages: with the tokens by TMA it won every layer of the tuning at M = 4096 (by up
%     -- to 26%; docs/BENCH.md), while at M = 1024 the 4096-deep layers kept 128x128.
%     if A == "s8" then
%       if SB ~= "group" and m > 1024 then return wqr_choose(256, 128, 2, 4) end
%       return wqr_choose(128, 128, 2, 6)
%     end
%     -- W4A16 and W8A16: 128x128 to M = 128; past it 256 tokens (at M = 256 the tuning with
%     -- the tokens by TMA took 256-token tiles on every layer, by 10-54% over 128x128)
%     if (m ~= 0 and m <= 128) or OUT == "f32" then return wqr_choose(128, 128, 2, 6) end
%     -- (W8A16 too, though its 256-token stage is 40 KB, its weights twice W4A16's: four stages
%     -- with the output in two passes were 5-15% faster than three in one, the H100, M = 1024
%     -- and 4096 on three layers)
%     return wqr_choose(256, 128, 2, 4)
%   end,
%   space = function(name)
%     if A ~= "s8" then return wqr_space16[name] end
%     local t = {}
%     for _, c in ipairs(wqr_space8[name] or {}) do
%       -- a part and a total of 256 tokens do not fit a consumer's registers
%       if not (SB == "group" and c.bm > 128) then t[#t + 1] = c end
%     end
%     return t
%   end,
%   plan = function()
%     if not (wqr_pair() or wqr_mx() or wqr_mx4()) then
%       unsupported(string.format("gemm_wgmma_wqr takes a=f16|bf16 sa=none with b=s4|u4 and sb=col, or sb=group:g (g a multiple of 32) with gs=a (zeros for u4), or with b=s8 and sb=col; a=bf16 sa=none with b=e2m1 and sb=mx; a=e2m1 b=e2m1 with sa=sb=mx; or a=s8 sa=row with b=s4 and sb=col, or sb=group:g (g a multiple of 128) with gs=f32 (got a=%s b=%s sa=%s sb=%s gs=%s group=%d zeros=%d)", A, B, SA, SB, GS or "-", GROUP or 0, ZEROS and 1 or 0))
%     end
%     if not one_of(OUT, "f16", "bf16", "f32") then unsupported("gemm_wgmma_wqr: out must be f16, bf16 or f32") end
%     if ARCH ~= 90 then unsupported(string.format("gemm_wgmma_wqr: needs sm_90a (wgmma, setmaxnreg) (arch=sm_%d)", ARCH)) end
%     local INT, PROMOTE = A == "s8", A == "s8" and SB == "group"
%     if BK ~= wqr_bk() then unsupported(string.format("gemm_wgmma_wqr: BK must be %d for a=%s, one 128-byte row of tokens (tile=%dx%dx%d)", wqr_bk(), A, BM, BN, BK)) end
%     if WM ~= 1 or WN < 1 or WN > 2 then unsupported(string.format("gemm_wgmma_wqr: the consumers split the weights: warps=1x1 or 1x2 (warps=%dx%d)", WM, WN)) end
%     local WGN = BN // WN
%     -- one m64 block of weights a consumer: with two, ptxas serialized the wgmma (C7520,
%     -- nvcc 13.0) and the tokens' shared-memory reads a FLOP are the same either way
%     if BN % WN ~= 0 or WGN ~= 64 then unsupported(string.format("gemm_wgmma_wqr: BN/WN must be 64, one m64 block of weights a consumer (tile=%dx%d warps=1x%d)", BM, BN, WN)) end
%     if BM < 16 or BM > 256 or BM % 16 ~= 0 then unsupported(string.format("gemm_wgmma_wqr: BM must be a multiple of 16 up to 256, the wgmma's N (tile=%dx%d)", BM, BN)) end
%     -- a consumer waits for K tile j's stage before it frees K tile j − 2's: two stages
%     -- would wait on each other
%     if STAGES < 3 or STAGES > 8 then unsupported(string.format("gemm_wgmma_wqr: STAGES must be 3..8 (stages=%d)", STAGES)) end
%     -- split=S (2..4): K split across a cluster of up to S CTAs per output tile when the tiles
%     -- leave SMs idle (the launch chooses how many: one tile a CTA), the ranks' f32 tiles
%     -- added in rank order (qh::split_sum), each rank finishing a band of the tile's rows
%     if not (SPLIT_K >= 1 and SPLIT_K <= 4) then unsupported("gemm_wgmma_wqr: split must be 1..4 (split=" .. SPLIT_K .. ")") end
%     if INT and SPLIT_K ~= 1 then unsupported("gemm_wgmma_wqr: a=s8 takes no K split (split=" .. SPLIT_K .. ")") end
%     if wqr_mx4() and SPLIT_K ~= 1 then unsupported("gemm_wgmma_wqr: a=e2m1 takes no K split (split=" .. SPLIT_K .. ")") end
%     -- MXFP4: its tokens reach a stage LAG K tiles after its weights (the producer expands them
%     -- then; mx4_tokens), and a consumer frees a stage once the one two K tiles on is full
%     if wqr_mx4() and STAGES < 4 then unsupported("gemm_wgmma_wqr: a=e2m1 needs 4 stages or more (stages=" .. STAGES .. ")") end
%     local PROW = B == "s8" and BK or BK // 2 -- packed bytes of a weight row a K tile
%     -- MXFP4: each stage's packed token rows (32 bytes a row a K tile) as copied, after the ring
%     local RAW = wqr_mx4() and STAGES * BM * 32 or 0
%     local RING = STAGES * (BM * 128 + BN * PROW) + RAW
%     if SPLIT_K > 1 and RING - RAW < BM * (BN + 8) * 4 then
%       unsupported(string.format("gemm_wgmma_wqr: split=%d keeps the f32 tile (%d bytes) in the ring, which holds %d at stages=%d", SPLIT_K, BM * (BN + 8) * 4, RING, STAGES))
%     end
%     local NC = WN
%     -- (MXFP4's producer expands the tokens: 72 registers, for its pending codes (two or three
%     -- K tiles of them in flight at five stages or more) and the block's byte tables of the
%     -- expansion, where 56 spilled 8-16 bytes and 64 did for 160-token tiles: its two
%     -- consumers keep 216 either way)
%     local mx4_regs = wqr_mx4() and 72 or nil
%     local THREADS, PRODUCER_REGS, CONSUMER_REGS, REG_BUDGET = hopper_regs(NC, mx4_regs)
%     local NI = WGN // 64
%     -- W4A8 with groups: each K tile's int32 part beside the f32 total
%     local ACC = NI * BM // 2 * (PROMOTE and 2 or 1)
%     if ACC + 32 * NI + 56 > REG_BUDGET then
%       unsupported(string.format("gemm_wgmma_wqr: a consumer of %d weights by %d tokens needs %d accumulator and %d weight registers, more than fit in %d", WGN, BM, ACC, 32 * NI, REG_BUDGET - 56))
%     end
%     local NP, SMEM = hopper_staging("gemm_wgmma_wqr", RING + 2048, WGN)
%     if NP > 2 then unsupported(string.format("gemm_wgmma_wqr: %d stages of %dx%dx%d leave too little shared memory to stage the %s output in two passes", STAGES, BM, BN, BK, OUT)) end
%     -- the tokens by TMA (tensor maps of A: tiles inside A as one box, tiles past M by boxes
%     -- of tma_rows rows up to M): on the H100 W4A16 3.5-13%, W8A16 11-13% and W4A8 col 1-3.4%
%     -- faster than by cp.async; W4A8 with groups, once half its sums went by I2F, 1.0-1.4%
%     -- more at M = 1024 and mixed at 4096 (it was 5.6-8.6% slower with the promotion all by
%     -- the magic number); the K-split tiles 4-10% at M = 128-256.  MXFP4's tokens are
%     -- expanded by the producer instead.
%     local TMA_A = not wqr_mx4()
%     return hopper_split{threads = THREADS, smem = SMEM, k_multiple = 32, ld_multiple = 32, align = 16, persistent = 1,
%                         NC = NC, NP = NP, NI = NI, PRODUCER_REGS = PRODUCER_REGS, CONSUMER_REGS = CONSUMER_REGS, PB_ROW = PROW,
%                         tma = TMA_A and 2 or 0, tma_rows = TMA_A and hopper_tma_rows(BM) or 0, TMA_ROWS = hopper_tma_rows(BM),
%                         TMA_A = TMA_A, RAW_BYTES = RAW}
%   end,
% }
% include("gemm_common.cuh")
% include("gemm_hopper.cuh")

namespace {

% include("gemm_hopper_tile.cuh")
constexpr int BK = $(BK);       // values of K a stage: one 128-byte row of tokens
constexpr int PROW = $(PB_ROW); // packed bytes of a weight row a K tile
constexpr int NI = $(NI);     // m64 blocks of weights a consumer
constexpr int RAW_BYTES = $(RAW_BYTES); // MXFP4: the stages' packed token rows, after the ring
constexpr int QJIT_SMEM_BYTES = RING_BYTES + RAW_BYTES + 2048 + BM * EPI_PITCH;
static_assert(QJIT_SMEM_BYTES <= 227 * 1024, "gemm_wgmma_wqr: tile and stages need more shared memory than an SM has");
static_assert(NP <= 2 && WM == 1 && WGN == 64 * NI, "gemm_wgmma_wqr: one or two output passes, consumers along N");

% local MX4 = A == "e2m1"                 -- MXFP4: tokens expanded to bf16 by the producer
% local T = MX4 and "bf16" or A          -- the tokens' type in the stage, and the wgmma's
% local MX = SB == "mx"                   -- e2m1 weights: e8m0 scales a group of 32, as bf16
% local GROUPED = SB == "group" or MX
% local GSZ = MX and 32 or GROUP          -- values of K a scale
% local INT = A == "s8"                   -- W4A8: int8 wgmma on the weights as s8 bytes 16·q
% local PROMOTE = INT and GROUPED         -- each K tile's int32 sums promoted into an f32 total
% local BYTE = INT or B == "s8"           -- 64-byte weight rows a K tile (W4A8, W8A16), in chunks
% local MV = T == "bf16" and 128 or 1024 -- the magic's value: 0x4300 (bf16) or 0x6400 (f16)
% local O = B == "s4" and 8 or 0          -- s4 is stored as q ^ 8 = q + 8 after the lop3
% -- f16 (10 mantissa bits) takes a byte's high nibble where it stands, 16 times its value; bf16
% -- (7 bits) takes it from the word shifted right by 4, at its value
% local HI = T == "bf16" and 1 or 16
% local XOR = (T == "bf16" and 0x43004300 or 0x64006400) ~ (B == "s4" and (HI == 16 and 0x00800008 or 0x00080008) or 0)
% local GK = GROUPED and math.max(1, BK // GSZ) or 1 -- scale groups a K tile
% if MX then
typedef qc::u16 gs_t; // a block's scale 2^(x−127) as bf16 bits, made from its e8m0 code x by fetch
% elseif GROUPED then
using qc::gs_t;
using qc::gs_f32;
% end

% if not BYTE then
// Two f32 as A's two-lane type, lo in the low half (exact for the small integers used here).
__device__ __forceinline__ u32 pack2(float lo, float hi)
{
    u32 r;
    asm("cvt.rn.$(T)x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
% end

% if MX then
// Byte `sel` picks of packed word w (two e2m1 values, k in its low nibble, k + 1 in its high)
// as q·2^(x−127) in bf16, k in the low half: the sign to bit 15 and e e m to bits 8..6, which
// reads q·2^-126 exactly (a subnormal for e = 0: 0 and 0.5), then times 2^126 and the block's
// scale sc (2^(x−127) as bf16, in both halves), each product exact while bf16 holds it.
__device__ __forceinline__ u32 e2m1_bf16x2(u32 w, u32 sel, u32 sc)
{
    u32 y, h;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(y) : "r"(w), "r"(w >> 4), "r"(sel)); // nibbles at bits 0, 16
    h = ((y << 12) & 0x80008000u) | ((y << 6) & 0x01C001C0u);
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(h) : "r"(h), "r"(0x7E807E80u)); // 2^126
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(h) : "r"(h), "r"(sc));
    return h;
}
// An e8m0 code's 2^(x−127) as bf16 bits: x << 7, but x = 0 is the subnormal 0x0040 and 0xFF NaN
__device__ __forceinline__ u32 e8m0_bf16(u32 x) { return (x << 7) | (x == 0 || x == 255 ? 0x40u : 0u); }
% end
% if MX4 then
% include("gemm_e2m1.cuh")
% end

// This consumer thread's weights: rows g and g + 8 (g = lane/4) of its warp's 16 in each of
// its NI m64 blocks, dequantized K tile by K tile into wgmma A fragments f[ni][ks][r].  W4A16:
// r = 0, 1 rows g, g + 8 at k = 16ks + 2t, + 1; r = 2, 3 the same rows at k = 16ks + 2t + 8,
// + 9.  W4A8: r = 0, 1 rows g, g + 8 at k = 32ks + 4t .. + 3; r = 2, 3 at k = 32ks + 4t + 16
// .. + 19: the same bytes of a 32-byte step, a k32 step's s8 values.  W8A16: W4A16's values,
// which are bytes 2t, 2t + 1 of each 8-byte half of a 16-byte chunk, as W4A8's nibbles are.
struct wqr_weights {
% if BYTE then
    u32 rows;  // row g of block 0 in stage 0, at its chunk 0 (chunk c at c ^ (row/2 % 4): pb_chunk)
    u32 sel;   // prmt: bytes 2t, 2t, 2t + 1, 2t + 1 of a word pair (W4A8: k = 4t, 4t + 1 | 4t + 2, 4t + 3)
% else
    u32 rows;  // row g of block 0 in stage 0 (its first half; the halves swap with pb_half)
    u32 sel;   // prmt: byte t of a word into byte 0, and byte t of it (f16) or of it >> 4 (bf16) into byte 2
    u32 mulc;  // (1, 1/$(HI)): the high lane holds $(HI)·q
% end
% if GROUPED then
%   if MX then
    const qc::u8 *__restrict__ sg; // e8m0 codes [N][K/32]
%   else
    const gs_t *__restrict__ sg;
%   end
%   if ZEROS then
    const gs_t *__restrict__ zg;
    gs_t z[NI][2][$(GK)];
%   end
    gs_t s[NI][2][$(GK)]; // K tile kt's scales (and zeros) as stored, loaded a K tile ahead
    long long at[NI][2];  // each row's first group
    bool in[NI][2];       // the row is inside N
    int NG;               // groups a row
%   if SPLIT then
    int k0;               // the first value of K this CTA sums (a rank of a split: its part's)
%   end
% elseif not BYTE then
    u32 addc;             // (−(magic + o), −(magic/$(HI) + o)), o = $(O)
% end
% if PROMOTE then
    float ps[NI][2];      // the scales of the K tile in flight over 16 (its s8 bytes are 16·q)
% end

    __device__ __forceinline__ wqr_weights(const qjit_params &p, u32 stage0_b, int wg_n, int warp, int lane)
    {
        const int g = lane >> 2, t = lane & 3;
        const int r0 = wg_n * WGN + 16 * warp + g; // the tile's row of block 0, row g
% if BYTE then
        rows = stage0_b + r0 * PROW + (qh::pb_chunk<PROW>(r0, 0) << 4);
        sel = (u32)(2 * t) * 0x11u | (u32)(2 * t + 1) * 0x1100u;
% else
        rows = stage0_b + r0 * PROW + (qh::pb_half(r0, 0) << 4);
        sel = (u32)t | ((u32)(t + $(HI == 16 and 0 or 4)) << 8);
        mulc = pack2(1.f, $(HI == 16 and "0.0625f" or "1.f"));
% end
% if GROUPED then
        sg = static_cast<const $(MX and "qc::u8" or "gs_t") *>(p.scale_b);
%   if ZEROS then
        zg = static_cast<const gs_t *>(p.zeros_b);
%   end
        NG = (int)(p.k / $(GSZ));
%   if SPLIT then
        k0 = 0;
%   end
% elseif not BYTE then
        addc = pack2(-$(MV + O).f, -$(MV // HI + O).f);
% end
    }
% if GROUPED then
    // The output tile at n0: each row's first group, and whether it is inside N.
    __device__ __forceinline__ void tile(int n0, int wg_n, int warp, int lane, int N)
    {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = n0 + wg_n * WGN + 64 * ni + 16 * warp + (lane >> 2) + 8 * h;
                in[ni][h] = n < N;
                at[ni][h] = (long long)(n < N ? n : 0) * NG;
            }
    }
    // K tile kt's scales (and zeros) into registers, 0 past K; called a K tile ahead of use.
    __device__ __forceinline__ void fetch(int kt)
    {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < $(GK); ++j) {
                    const int grp = ($(SPLIT and "k0 + " or "")kt * $(BK) + j * 32) / $(GSZ);
                    const bool ok = in[ni][h] && grp < NG;
%   if MX then
                    s[ni][h][j] = ok ? (gs_t)e8m0_bf16(sg[at[ni][h] + grp]) : (gs_t)0;
%   else
                    s[ni][h][j] = ok ? sg[at[ni][h] + grp] : (gs_t)0;
%   end
%   if ZEROS then
                    z[ni][h][j] = ok ? zg[at[ni][h] + grp] : (gs_t)0;
%   end
                }
    }
% else
    __device__ __forceinline__ void tile(int, int, int, int, int) {}
    __device__ __forceinline__ void fetch(int) {}
% end
% if BYTE then
%   if INT then
    // Four values of a row, k = 4t .. 4t + 3 (bytes 2t, 2t + 1 of the word pair w0, w1, low
    // nibble first), as the s8 bytes 16·q, k in the low byte: each nibble moved to the high
    // half of its own byte, exactly (the 1/16 is taken back in f32, exactly).
    __device__ __forceinline__ u32 frag(u32 w0, u32 w1) const
    {
        const u32 v = __byte_perm(w0, w1, sel); // bytes b, b, c, c: k, k + 1 in b; k + 2, k + 3 in c
        return ((v << 4) & 0x00F000F0u) | (v & 0xF000F000u);
    }
%   elseif A == "f16" then
    // Two values of a row, k = 2t, 2t + 1 (bytes 2t, 2t + 1 of the word pair w0, w1), as f16,
    // exactly, k in the low half: u = q + 128 in the low byte of 1024 (0x6400, whose ulp is
    // 1), less 1152.
    __device__ __forceinline__ u32 frag(u32 w0, u32 w1) const
    {
        u32 h;
        asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(h) : "r"(__byte_perm(w0, w1, sel)), "r"(0x00FF00FFu), "r"(0x64806480u));
        asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(h) : "r"(h), "r"(0x64806480u));
        return h;
    }
%   else
    // Two values of a row, k = 2t, 2t + 1 (bytes 2t, 2t + 1 of the word pair w0, w1), as bf16,
    // exactly, k in the low half.  bf16's 8 significant bits hold q but not 128 + q in a
    // magic's mantissa: each value goes through f32, u = q + 128 in the low byte of 2^23
    // (exact), less 2^23 + 128; q's f32 has its top half as bf16's q.
    __device__ __forceinline__ u32 frag(u32 w0, u32 w1) const
    {
        const u32 x = __byte_perm(w0, w1, sel) ^ 0x80808080u; // bytes u0, u0, u1, u1
        const float f0 = __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7440)) - 8388736.f;
        const float f1 = __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7442)) - 8388736.f;
        return __byte_perm(__float_as_uint(f0), __float_as_uint(f1), 0x7632);
    }
%   end
    // Stage st's packed rows into f: a row's K tile is 64 bytes, four 16-byte chunks, chunk ks
    // the values of step ks (W4A8: 32 values of k32; W8A16: 16 of k16), its first 8 bytes
    // r = 0, 1 and its last 8 r = 2, 3.
    __device__ __forceinline__ void decode(u32 (&f)[NI][4][4], int st, int)
    {
        uint4 c[NI][2][4]; // every chunk loaded before the first is converted
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // rows g and g + 8 (and 64 rows on) have the same chunk order (pb_chunk)
                const u32 at_row = rows + st * STAGE_BYTES + (64 * ni + 8 * h) * PROW;
#pragma unroll
                for (int ks = 0; ks < 4; ++ks)
                    c[ni][h][ks] = qc::lds16(at_row ^ (u32)(ks << 4));
            }
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    f[ni][ks][h] = frag(c[ni][h][ks].x, c[ni][h][ks].y);
                    f[ni][ks][2 + h] = frag(c[ni][h][ks].z, c[ni][h][ks].w);
                }
    }
%   if PROMOTE then
    // The K tile kt − 1's scales (fetched a K tile ahead) for its promotion, and K tile kt's
    // loads issued.  Called as K tile kt − 1 is issued.
    __device__ __forceinline__ void next_scales(int kt)
    {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                ps[ni][h] = gs_f32(s[ni][h][0]) * 0.0625f;
        fetch(kt);
    }
    // tot += the K tile's exact int32 sums (16·q·a, within ±2^21) as f32, times their row's
    // scale over 16: bit for bit fma((float)sum, s, tot).  Half the sums become f32 by an I2F,
    // the other half by adding them to the bits of 1.5·2^23 and subtracting that float (an IADD
    // and an FADD, exact as the I2F is within ±2^22): the I2F issues once where the magic
    // number issues twice, but its pipe takes a quarter of the FMA pipe's rate, so the two
    // share the work (on the H100 half by I2F was 2-7% faster than none, three quarters or
    // all no faster than none).
    __device__ __forceinline__ void promote(float (&tot)[NI][BM / 2], const int (&part)[NI][BM / 2]) const
    {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) {
                const float x = i % 2 == 0 ? __int2float_rn(part[ni][i])
                                           : __int_as_float(part[ni][i] + 0x4B400000) - 12582912.f;
                tot[ni][i] = __fmaf_rn(x, ps[ni][(i >> 1) & 1], tot[ni][i]);
            }
    }
%   end
% else
%   if MX then
    // One pair of values: byte t of packed word w (k, k + 1 in its low and high nibble), e2m1,
    // as B̂ = q·2^(x−127) in bf16, k in the low half (e2m1_bf16x2).
    __device__ __forceinline__ u32 pair(u32 w, u32, u32 sc) const { return e2m1_bf16x2(w, sel, sc); }
%   else
    // One pair of values: byte t of packed word w (k, k + 1 in its low and high nibble) as
    // B̂ in A's type, k in the low half.
    __device__ __forceinline__ u32 pair(u32 w, u32 addc, u32 sc) const
    {
        u32 y, v, h;
        asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(y) : "r"(w), "r"(w$(HI == 16 and "" or " >> 4")), "r"(sel));
        asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(v) : "r"(y), "r"($(HI == 16 and "0x00F0000Fu" or "0x000F000Fu")), "r"($(string.format("0x%08Xu", XOR))));
        asm("fma.rn.$(T)x2 %0, %1, %2, %3;\n" : "=r"(h) : "r"(v), "r"(mulc), "r"(addc));
% if GROUPED then
        asm("mul.rn.$(T)x2 %0, %1, %2;\n" : "=r"(h) : "r"(h), "r"(sc));
% else
        (void)sc;
% end
        return h;
    }
%   end
    // Stage st's packed rows, K tile kt, into f; then the next K tile's scales are fetched.
    __device__ __forceinline__ void decode(u32 (&f)[NI][4][4], int st, int kt)
    {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // rows g and g + 8 are 8 rows apart: the same half order (pb_half)
                const u32 at_row = rows + st * STAGE_BYTES + (64 * ni + 8 * h) * PROW;
                const uint4 lo = qc::lds16(at_row), hi = qc::lds16(at_row ^ 16u);
                const u32 w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                for (int j = 0; j < $(GK); ++j) {
% if GROUPED then
%   if MX then
                    const u32 addc = 0;
%   elseif ZEROS then
                    const float zf = gs_f32(z[ni][h][j]);
                    const u32 addc = pack2(-($(MV).f + zf), -($(MV // HI).f + zf));
%   else
                    const u32 addc = pack2(-$(MV + O).f, -$(MV // HI + O).f);
%   end
                    const u32 sc = (u32)s[ni][h][j] * 0x10001u;
% else
                    const u32 sc = 0;
% end
#pragma unroll
                    for (int ks = j * 4 / $(GK); ks < (j + 1) * 4 / $(GK); ++ks) {
                        f[ni][ks][h] = pair(w[2 * ks], addc, sc);
                        f[ni][ks][2 + h] = pair(w[2 * ks + 1], addc, sc);
                    }
                }
            }
        fetch(kt + 1);
    }
% end
};

// d (64×BM: f32, W4A8 s32) += A(64×BK, the weights in registers)·B(BM×BK, the tokens in the
// ring)ᵀ: one K tile (gemm_hopper.cuh)
% wgmma_k64(BM, INT and "s8.s8" or T .. "." .. T, true, INT)

% if SPLIT then

// K split across the gridDim.z CTAs of a cluster (rank blockIdx.z; the launch gives each CTA
// one tile).  Rank r sums whole K tiles [KT·r/c, KT·(r+1)/c) of 64 values: a GEMM of its own
// over the tokens and the packed weights from value 64·kt0 on (kt0·32 bytes of a packed row),
// whose scales are the groups from there (wqr_weights::k0).
__device__ __forceinline__ qjit_params rank_part(const qjit_params &p)
{
    qjit_params q = p;
    const int c = (int)gridDim.z, r = (int)blockIdx.z;
    const long long kt_all = (p.k + BK - 1) / BK, kt0 = kt_all * r / c, kt1 = kt_all * (r + 1) / c;
    q.a = static_cast<const qc::u16 *>(p.a) + kt0 * BK;
    q.b = static_cast<const char *>(p.b) + kt0 * PROW;
    q.k = (kt1 * BK < p.k ? kt1 * BK : p.k) - kt0 * BK;
    return q;
}

// The split tile's end, for every consumer thread (ct of NC*128): once every consumer's wgmma
// are done with the ring, each rank leaves its f32 tile there as D's tile (Dᵀ's acc[ni][4j +
// 2h + e], weight 64ni + 16warp + g + 8h of consumer wg_n and token 8j + 2t + e, at row
// token, column wg_n·WGN + weight), then qh::split_sum finishes this rank's rows.
__device__ __forceinline__ void split_finish(const float (&acc)[NI][BM / 2], u32 ring, int ct, int wg_n, int warp,
                                             int lane, const qjit_params &p, int m0, int n0, bool vec)
{
    constexpr int SUM_PITCH = qh::sum_pitch(BN);
    asm volatile("bar.sync 14, $(NC * 128);\n" ::: "memory"); // the consumers' wgmma have read the ring
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = wg_n * WGN + 64 * ni + 16 * warp + (lane >> 2) + 8 * h;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int row = 8 * j + 2 * (lane & 3) + e;
                    asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(ring + (row * SUM_PITCH + col) * 4),
                                 "f"(acc[ni][4 * j + 2 * h + e]) : "memory");
                }
        }
    qh::split_sum<BM, BN, NC * 128>(ring, ct, p, m0, n0, vec);
}
% end

% if MX4 then

// MXFP4's tokens (a side of qh::produce that fills A's tile: FILLS_A, RAW).  Producer thread t
// copies 16-byte chunk c = t % 2 of token rows t/2 + 64i of each K tile as stored (K values
// 32c .. 32c + 31: one scale block) into the stage's raw rows after the ring, and loads the
// block's e8m0 code for each row; LAG K tiles later, once those copies have landed, it
// expands its own chunks into the stage's bf16 token rows, q·2^(x−127) (the weights'
// arithmetic: exact for x ≤ 252), as the 16-byte chunks 4c .. 4c + 3 of each row at their
// swizzled places, and makes them visible to the wgmma (async proxy) before its arrival.
// Rows past M and blocks past K copy zeros with code 0.
struct mx4_tokens {
    static constexpr bool ARRIVES = true, PREFETCH = false, RAW = true, FILLS_A = true;
    static constexpr int RPT = (BM + 63) / 64;            // token rows a producer thread, t/2 + 64i below BM
    // produce's passes between issue and decode: as many as the stages allow (STAGES − LAG ≥ 3,
    // qh::produce), up to 3; each is a K tile of the tokens' copies more in flight
    static constexpr int LAG = STAGES - 3 < 3 ? STAGES - 3 : 3;
    bool raw_ok;
    const qc::u8 *__restrict__ a;
    const qc::u8 *__restrict__ sa;
    long long lda; // bytes a row of packed tokens
    int M, NG;     // NG: scale blocks a row
    u32 ring, raw;
    // the pending K tiles' codes, a row each, the newest at [LAG]: loaded as issue copies its
    // rows and read only by decode LAG passes later, so their latency is not the producer's
    u32 codes[LAG + 1][RPT];
    int issued, decoded;
    __device__ __forceinline__ mx4_tokens(const qjit_params &p, u32 ring0)
        : raw_ok(true), a(static_cast<const qc::u8 *>(p.a)), sa(static_cast<const qc::u8 *>(p.scale_a)),
          lda(p.lda / 2), M((int)p.m), NG((int)(p.k / 32)), ring(ring0), raw(ring0 + RING_BYTES), issued(0), decoded(0)
    {
#pragma unroll
        for (int j = 0; j <= LAG; ++j)
#pragma unroll
            for (int i = 0; i < RPT; ++i)
                codes[j][i] = 0;
    }
    __device__ __forceinline__ void issue(int st, int m0, int, int kt, int tid)
    {
        const int c = tid & 1, r0 = tid >> 1, blk = 2 * kt + c;
#pragma unroll
        for (int j = 0; j < LAG; ++j)
#pragma unroll
            for (int i = 0; i < RPT; ++i)
                codes[j][i] = codes[j + 1][i];
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int rr = r0 + 64 * i, row = m0 + rr;
            const bool ok = rr < BM && row < M && blk < NG;
            if (rr < BM)
                qc::cp_async16(raw + st * (BM * 32) + rr * 32 + c * 16, a + (long long)(ok ? row : 0) * lda + (ok ? blk : 0) * 16,
                               ok ? 16 : 0);
            codes[LAG][i] = ok ? (u32)sa[(long long)row * NG + blk] : 0u;
        }
        ++issued;
    }
    __device__ __forceinline__ void decode(int st, int tid)
    {
        const int c = tid & 1, r0 = tid >> 1, pos = LAG - (issued - 1 - decoded);
        ++decoded;
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int rr = r0 + 64 * i;
            if (rr >= BM)
                continue;
            const uint4 w = qc::lds16(raw + st * (BM * 32) + rr * 32 + c * 16);
            u32 x = 0;
#pragma unroll
            for (int j = 0; j <= LAG; ++j)
                if (j == pos)
                    x = codes[j][i];
            u32 t[4];
            e2m1_tables(e8m0_bf16(x) * 0x10001u, t);
            const u32 row = ring + st * STAGE_BYTES + rr * ROW_BYTES;
            const u32 ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int q = 0; q < 4; ++q) { // word q: values 8q .. 8q + 7 of the chunk
                u32 o[4];
                e2m1_bf16x8(ws[q], t, o);
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
                             :: "r"(row + (((4 * c + q) ^ (rr & 7)) << 4)), "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3])
                             : "memory");
            }
        }
        qh::fence_proxy_async(); // the wgmma read these rows through the async proxy
    }
    // (produce's path for a side whose raw copies are refused: never taken, raw_ok is true)
    __device__ __forceinline__ void now(int st, int m0, int n0, int kt, int tid)
    {
        issue(st, m0, n0, kt, tid);
        qc::cp_async_commit();
        qc::cp_async_wait<0>();
        decode(st, tid);
    }
};
% end

} // namespace

% if TMA_A then
extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p, const __grid_constant__ qh::tmap ta,
                                                                         const __grid_constant__ qh::tmap tr)
% else
extern "C" __global__ void __launch_bounds__(THREADS, 1) qjit_gemm_kernel(const qjit_params p)
% end
{
% PRODUCE_ARGS = (MX4 and ", mx4_tokens" or ", qh::no_side") .. ", PROW" .. (TMA_A and ", true, " .. TMA_ROWS or "") -- B as stored, PROW bytes a row a K tile
% -- the tokens by TMA; under a split, a rank's coordinates start at its part of K
% PRODUCE_CALL = TMA_A and (", qh::no_side(), &ta, &tr" .. (SPLIT and ", (int)((static_cast<const char *>(q.a) - static_cast<const char *>(p.a)) / " .. (INT and 1 or 2) .. ")" or "")) or nil
% -- MXFP4: its tokens expanded by the producer (mx4_tokens), one more arrival a thread, its
% -- raw rows after the ring
% if MX4 then PRODUCE_CALL, RING_ARGS, RING_EXTRA = ", mx4_tokens(p, ring)", ", 256", "RAW_BYTES" end
% PRODUCE_ES = INT and 1 or 2
% RING_TMA = TMA_A
% include("gemm_hopper_start.cuh")
% PRODUCE_ES, PRODUCE_CALL, RING_TMA, RING_ARGS, RING_EXTRA = nil, nil, nil, nil, nil
% include("gemm_hopper_consumer.cuh")
        // frees stage q for the producer.  Every lane read the stage's weights with its own
        // loads, and an arrival releases only its own thread's accesses: the warp's barrier
        // orders the other lanes' reads before lane 0's arrival (compute-sanitizer's
        // racecheck flagged the producer's next copy into the stage without it).
        auto release = [&](int q) {
            __syncwarp();
            if (lane == 0)
                mbar_arrive(empty0 + 8 * q);
        };
        auto next = [&]() {
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        };
        wqr_weights wt(p, ring + A_BYTES, wg_n, warp, lane);
% if SPLIT and GROUPED then
        wt.k0 = (int)(static_cast<const qc::u16 *>(q.a) - static_cast<const qc::u16 *>(p.a)); // this rank's groups
% end
        u32 fa[NI][4][4], fb[NI][4][4]; // K tiles kt (even) and kt + 1
        for (int t = first; t < tiles; t += stride) {
            int m0, n0;
            w.origin(t, m0, n0);
% if INT then
            int acc[NI][BM / 2]; // W4A8: the exact int32 sums of 16·q·a (with groups, a K tile's)
            qc::zero(acc);
%   if PROMOTE then
            float tot[NI][BM / 2]; // and their f32 total, each K tile's promoted with its scales
            qc::zero(tot);
%   end
% else
            float acc[NI][BM / 2];
            qc::zero(acc);
% end
            wt.tile(n0, wg_n, warp, lane, N);
            wt.fetch(0);
% -- issue(R, S): the K tile in register set R, its tokens in stage S
% local function issue(R, S)
% if not TMA_A then
            fence_proxy_async(); // wgmma reads what cp.async wrote
% end
            wgmma_fence();       // and the registers written since the last wgmma
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
                wgmma_ktile(acc[ni], $(R)[ni], smem_desc(a_tile + $(S) * STAGE_BYTES)$(INT and (PROMOTE and ", 1" or ", 0") or ""));
            wgmma_commit();
% end
% -- step(R, S, KT_, OLD): K tile KT_ into register set R once its stage is full and the
% -- wgmma that read R last are done (their stage S freed when OLD), then issued
% local function step(R, S, KT_, OLD)
            mbar_wait(full0 + 8 * s, phase);
            wgmma_wait<1>(); // the wgmma of two K tiles ago (set $(R)) are done
%   if OLD then
            release($(S));
%   end
            wt.decode($(R), s, $(KT_));
            $(S) = s;
            next();
%   issue(R, S)
% end
            int sa = s, sb = s; // the stages of fa's and fb's K tiles
% if PROMOTE then
% -- load(R, S, KT_): K tile KT_ into register set R once its stage is full
% local function load(R, S, KT_)
            mbar_wait(full0 + 8 * s, phase);
            wt.decode($(R), s, $(KT_));
            $(S) = s;
            next();
% end
% -- retire(S, KT_): the K tile of stage S done, its stage freed and its sums promoted, and
% -- the scales of K tile KT_ − 1 made ready for its promotion
% local function retire(S, KT_)
            wgmma_wait<0>();
            release($(S));
            wt.promote(tot, acc);
            wt.next_scales($(KT_));
% end
            // W4A8 with groups: each K tile's sums start from zero and are promoted once its
            // wgmma are done.  K tiles alternate between the register sets fa and fb: K tile
            // kt + 1 is dequantized while kt's wgmma run, and kt's sums are waited for and
            // promoted before kt + 1 is issued.  No wgmma stays in flight across iterations:
            // where one did, ptxas serialized the wgmma (C7514), unable to see which a wait
            // had retired before the promotion reads its accumulators.
            if (KT > 0) {
% load("fa", "sa", "0")
                wt.next_scales(1);
            }
#pragma unroll 1
            for (int kt = 0; kt < KT; kt += 2) {
% issue("fa", "sa")
                if (kt + 1 < KT) {
% load("fb", "sb", "kt + 1")
                }
% retire("sa", "kt + 2")
                if (kt + 1 >= KT)
                    break;
% issue("fb", "sb")
                if (kt + 2 < KT) {
% load("fa", "sa", "kt + 2")
                }
% retire("sb", "kt + 3")
            }
% else
            // K tiles alternate between the register sets fa and fb: each is dequantized once
            // the wgmma that last read its set are done, while the other set's wgmma run.  The
            // code is straight-line over two K tiles (the first two and the last one apart), so
            // that ptxas sees which set each wgmma reads.
            int kt = 1;         // the next K tile
            if (KT > 0) {
                mbar_wait(full0 + 8 * s, phase);
                wt.decode(fa, s, 0);
                sa = s;
                next();
% issue("fa", "sa")
            }
            if (KT > 1) {
% step("fb", "sb", "1", false)
                kt = 2;
            }
#pragma unroll 1
            for (; kt + 1 < KT; kt += 2) {
% step("fa", "sa", "kt", true)
% step("fb", "sb", "kt + 1", true)
            }
            if (kt < KT) { // an odd count of three or more: the last one in fa
% step("fa", "sa", "kt", true)
            }
            wgmma_wait<0>(); // on every path, so that ptxas sees the accumulators settled
            if (KT > 1)
                release(sb);
            if (KT > 0)
                release(sa);
% end
            w.main_loops_done(t);
% if SPLIT then
            if (gridDim.z > 1) {
                split_finish(acc, ring, tid - 128, wg_n, warp, lane, p, m0, n0, vec);
                continue;
            }
% end

            // Epilogue: acc[ni][4j + 2h + e] is weight 64ni + 16warp + g + 8h (g = lane/4) and
            // token 8j + 2t + e (t = lane%4) of the consumer's part.  Each value is finished in
            // f32 (row scale, col scale, bias), then lanes g and g ^ 1 trade one value so that each holds
            // two adjacent weights of one token: even g those of token 8j + 2t, odd g of
            // 8j + 2t + 1, which it stages as one pair of D's row.  In NP passes of SEG weights
            // (two where the whole tile does not fit beside the ring: the warps of the first
            // half, then of the second).
            out_t *__restrict__ D = static_cast<out_t *>(p.d);
            const bool bulk = vec && m0 + BM <= M && n0 + BN <= N;
            const u32 own = epi + wg_n * SEG * (int)sizeof(out_t);
            const int g = lane >> 2, tq = lane & 3, odd = g & 1;
            const qc::factors f(p);
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                qh::pass_open(sender, 1 + c);
                if (NP == 1 || 16 * warp / SEG == q) { // this warp's 16 weights are in pass q
#pragma unroll
                    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int col = 64 * ni + 16 * warp + g + 8 * h; // the consumer's weight row
                            float sb0, sb1, b0, b1;
                            f.cols(n0 + wg_n * WGN + col, N, sb0, sb1, b0, b1); // sb0, b0: this row's
                            (void)sb1, (void)b1;
                            const u32 at = own + (col - q * SEG - odd) * (int)sizeof(out_t) + (2 * tq + odd) * EPI_PITCH;
#pragma unroll
                            for (int j = 0; j < BM / 8; ++j) {
% if PROMOTE then
                                float x = tot[ni][4 * j + 2 * h], y = tot[ni][4 * j + 2 * h + 1];
% elseif INT then
                                // (float)(16·sum)/16 = (float)sum exactly
                                float x = (float)acc[ni][4 * j + 2 * h] * 0.0625f, y = (float)acc[ni][4 * j + 2 * h + 1] * 0.0625f;
% else
                                float x = acc[ni][4 * j + 2 * h], y = acc[ni][4 * j + 2 * h + 1];
% end
% if SA == "row" then
                                // x and y are two tokens: each its own row scale first, as finish2 would
                                x = __fmul_rn(x, f.row(m0 + 8 * j + 2 * tq, M));
                                y = __fmul_rn(y, f.row(m0 + 8 * j + 2 * tq + 1, M));
                                qc::finish2(x, y, 1.f, sb0, sb0, b0, b0);
% else
                                qc::finish2(x, y, f.sa_t, sb0, sb0, b0, b0);
% end
                                const float other = __shfl_xor_sync(0xffffffffu, odd ? x : y, 4);
                                qc::stage2(at + 8 * j * EPI_PITCH, odd ? other : x, odd ? y : other);
                            }
                        }
                }
                qh::pass_send<BM, SEG>(1 + c, q, bulk, D, p.ldd, own, EPI_PITCH, m0, n0 + wg_n * WGN, M, N, vec,
                                       tid & 127);
            }
        }
        if (sender)
            bulk_wait<true>();
    }
}
