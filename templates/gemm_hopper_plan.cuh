% -- gemm_hopper_plan.cuh — the launch plan that gemm_wgmma.cu and gemm_wgmma_f8.cu share, in
% -- Lua only (it writes no code): `% include("gemm_hopper_plan.cuh")` before the `// qjit:` line.
% --
% -- hopper_regs(nc): the block of one producer and nc consumer warpgroups gets the per-thread
% -- cap that __launch_bounds__(threads, 1) allows, in steps of 8; setmaxnreg drops the producer
% -- to 40 (24 beside 3-4 consumers) and the consumers share the rest.  Returns threads,
% -- producer registers, consumer registers, and what one consumer thread may use.
% function hopper_regs(nc)
%   local threads = 128 * (nc + 1)
%   local cap = math.min(255, 65536 // threads) // 8 * 8
%   local producer = nc > 2 and 24 or 40
%   local consumer = math.min(240, (cap * threads - producer * 128) // (128 * nc) // 8 * 8)
%   return threads, producer, consumer, nc > 1 and consumer or 255
% end
% --
% -- hopper_staging(name, ring, wgn): the output tile leaves through a staging buffer beside the
% -- ring (ring bytes, alignment slack and mbarriers included), in np passes over each consumer's
% -- wgn columns when the whole tile of OUT does not fit in the 227 KB left.  Returns np and
% -- the dynamic shared memory in bytes; refuses what does not fit.
% function hopper_staging(name, ring, wgn)
%   local limit, out_bytes = 232448, OUT == "f32" and 4 or 2
%   local what = string.format("%s: %d stages of %dx%dx%d", name, STAGES, BM, BN, BK)
%   if ring > limit then unsupported(what .. " need more than 227 KB of shared memory") end
%   local np = 1
%   while wgn % (16 * np) == 0 and ring + BM * ((BN // np) * out_bytes + 16) > limit do np = np * 2 end
%   local smem = ring + BM * ((BN // np) * out_bytes + 16)
%   if smem > limit then unsupported(what .. " leave too little shared memory to stage the " .. OUT .. " output") end
%   return np, smem
% end
