% -- gemm_hopper_plan.cuh — the launch plan that the sm_90a families share, in
% -- Lua only (it writes no code): `% include("gemm_hopper_plan.cuh")` at the top of a template,
% -- before its family{...} declaration.
% include("gemm_family.cuh") -- what every family{...} declaration uses
% --
% -- hopper_decode(m, bk): at decode (M <= 64, no tile named) a Hopper family stays out of
% -- auto, whose families listed after it serve those M; named, it takes one consumer
% -- warpgroup of 64 rows, 64x128xbk with 6 stages.  Returns true and that choice (nil under
% -- auto) at decode, false elsewhere.
% function hopper_decode(m, bk)
%   if m ~= 0 and m <= 64 and BM == 0 then return true, NAMED and choose(64, 128, bk, 1, 1, 6) or nil end
%   return false
% end
% --
% -- hopper_regs(nc): the block of one producer and nc consumer warpgroups gets the per-thread
% -- cap that __launch_bounds__(threads, 1) allows, in steps of 8; setmaxnreg drops the producer
% -- to 40 (24 beside 3-4 consumers, or what the caller asks) and the consumers share the rest.  Returns threads,
% -- producer registers, consumer registers, and what one consumer thread may use.
% function hopper_regs(nc, producer)
%   local threads = 128 * (nc + 1)
%   local cap = math.min(255, 65536 // threads) // 8 * 8
%   producer = producer or (nc > 2 and 24 or 40)
%   local consumer = math.min(240, (cap * threads - producer * 128) // (128 * nc) // 8 * 8)
%   return threads, producer, consumer, nc > 1 and consumer or 255
% end
% --
% -- hopper_staging(name, ring, wgn): the output tile leaves through a staging buffer beside the
% -- ring (ring bytes, alignment slack and mbarriers included), in np passes over each consumer's
% -- wgn columns when the whole tile of OUT does not fit in the 227 KB left.  Returns np and
% -- the dynamic shared memory in bytes; refuses what does not fit.
% -- (hopper_passes(ring, wgn): the passes and the shared memory that hopper_staging settles
% -- on, without refusing; the limit)
% local SMEM_LIMIT = 232448
% function hopper_passes(ring, wgn)
%   local out_bytes = OUT == "f32" and 4 or 2
%   local np = 1
%   while wgn % (16 * np) == 0 and ring + BM * ((BN // np) * out_bytes + 16) > SMEM_LIMIT do np = np * 2 end
%   return np, ring + BM * ((BN // np) * out_bytes + 16)
% end
% function hopper_staging(name, ring, wgn)
%   local what = string.format("%s: %d stages of %dx%dx%d", name, STAGES, BM, BN, BK)
%   if ring > SMEM_LIMIT then unsupported(what .. " need more than 227 KB of shared memory") end
%   local np, smem = hopper_passes(ring, wgn)
%   if smem > SMEM_LIMIT then unsupported(what .. " leave too little shared memory to stage the " .. OUT .. " output") end
%   return np, smem
% end
% --
% -- hopper_tile_plan{name=, acc=, side=, fixed=, producer=, es=}: the checks of a consumer
% -- layout that the quantized wgmma families (gemm_wgmma_q.cuh: one 128-byte ring row a K
% -- tile, BK = 128/es values of es bytes) share, and the launch fields it gives: sm_90a; WM×WN
% -- = 1..4 consumer warpgroups, each owning a (BM/WM)×(BN/WN) tile, BM/WM a multiple of 64 and
% -- BN/WN a multiple of 16 up to 256; STAGES 2..8; acc register arrays of that tile (a total,
% -- and a part where K blocks are promoted) beside ~40 others; side bytes per stage beside its
% -- tiles (scales that travel with their K tile) and fixed bytes once (staging slots), 0 for
% -- none; producer: its registers after setmaxnreg when it needs more than hopper_regs gives.
% -- Returns the plan's table, which the family extends.
% -- Whether acc accumulator sets a consumer (a part and a total: 2; two parts and a total: 3)
% -- fit its registers at this configuration, beside 40 for everything else; false where WM,
% -- WN do not divide the tile (hopper_tile_plan says why).
% function hopper_acc_fits(acc, producer)
%   if not (WM >= 1 and WN >= 1 and BN % WN == 0) then return false end
%   local _, _, _, budget = hopper_regs(WM * WN, producer)
%   return (BM // WM // 64) * (BN // WN // 2) * acc + 40 <= budget
% end
% -- hopper_pack_slots(per_slot, side, most): the staging slots of a packed producer
% -- (produce_packed): STAGES − 1 of them, 2 to `most` (4), so that SLOTS − 1 K tiles of
% -- loads are in flight beyond the one being expanded while the ring stays deeper than the
% -- slots (consumers that release a stage only once the next is full need SLOTS < STAGES:
% -- with STAGES = 2 and two slots they would wait on each other, so a packed producer takes
% -- 3 stages or more); fewer where shared memory would not hold them without more output
% -- passes than two slots leave.  per_slot: a slot's bytes; side: the ring's side bytes a stage.
% function hopper_pack_slots(name, per_slot, side, most)
%   if STAGES < 3 then unsupported(string.format("%s: a packed operand's producer needs 3 stages or more (stages=%d)", name, STAGES)) end
%   if not (WN >= 1 and BN % WN == 0 and BN // WN >= 16) then return 2 end -- hopper_tile_plan says why
%   local base = STAGES * ((BM + BN) * 128 + (side or 0)) + 2048
%   local np, smem2 = hopper_passes(base + 2 * per_slot, BN // WN)
%   local slots = math.max(2, math.min(most or 4, STAGES - 1))
%   while slots > 2 and smem2 + (slots - 2) * per_slot > SMEM_LIMIT do slots = slots - 1 end
%   return slots
% end
% -- hopper_split(plan): the plan with the launch fields of a K split across a cluster of up
% -- to SPLIT_K CTAs in chunks of BK (none where SPLIT_K is 1), and SPLIT for the kernel text.
% -- hopper_tma_rows(bm): the rows of the boxes in which a TMA kernel copies A's tiles that
% -- pass M (the plan's tma_rows, and TMA_ROWS for the kernel text, gemm_hopper.cuh's TR): the tile
% -- itself up to 64 rows, else the largest of 64, 32, 16 that divides it.
% function hopper_tma_rows(bm)
%   if bm <= 64 then return bm end
%   return bm % 64 == 0 and 64 or bm % 32 == 0 and 32 or 16
% end
% function hopper_split(plan)
%   local split = SPLIT_K > 1
%   plan.cluster_k, plan.k_chunk, plan.SPLIT = split and SPLIT_K or 1, split and BK or 0, split
%   return plan
% end
% function hopper_tile_plan(o)
%   local name, es = o.name, o.es or 1
%   if ARCH ~= 90 then unsupported(string.format("%s: needs sm_90a (wgmma, setmaxnreg) (arch=sm_%d)", name, ARCH)) end
%   if BK * es ~= 128 then unsupported(string.format("%s: BK must be %d (tile=%dx%dx%d)", name, 128 // es, BM, BN, BK)) end
%   if not (WM >= 1 and WN >= 1 and WM * WN <= 4) then unsupported(name .. ": WM*WN must be 1..4 consumer warpgroups") end
%   if BM % (64 * WM) ~= 0 then unsupported(string.format("%s: BM/WM must be a multiple of 64 (tile=%dx%d warps=%dx%d)", name, BM, BN, WM, WN)) end
%   local WGN = BN // WN
%   if not (BN % WN == 0 and WGN % 16 == 0 and WGN <= 256) then unsupported(name .. ": BN/WN must be a multiple of 16 up to 256") end
%   if STAGES < 2 or STAGES > 8 then unsupported(name .. ": STAGES must be 2..8") end
%   if SPLIT_K ~= 1 then unsupported(name .. ": SPLIT_K must be 1") end
%   local NC = WM * WN
%   local THREADS, PRODUCER_REGS, CONSUMER_REGS, REG_BUDGET = hopper_regs(NC, o.producer)
%   local MI = BM // WM // 64
%   if not hopper_acc_fits(o.acc, o.producer) then
%     unsupported(string.format("%s: a consumer tile of %dx%d needs %d accumulator registers%s, more than fit in %d", name, BM // WM, WGN, MI * (WGN // 2) * o.acc, o.acc == 2 and " (part and total)" or o.acc == 3 and " (two parts and a total)" or "", REG_BUDGET - 40))
%   end
%   local NP, SMEM = hopper_staging(name, STAGES * ((BM + BN) * 128 + (o.side or 0)) + (o.fixed or 0) + 2048, WGN)
%   return {threads = THREADS, smem = SMEM, persistent = 1, NC = NC, WGN = WGN, NP = NP,
%           PRODUCER_REGS = PRODUCER_REGS, CONSUMER_REGS = CONSUMER_REGS}
% end
