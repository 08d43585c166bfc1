% -- gemm_stage_plan.cuh — the output-staging plan of the mma.sync templates (gemm_mma.cu,
% -- gemm_wq.cu, gemm_i8.cu, gemm_f8.cu), in Lua only (it writes no code): include it at
% -- the top of a template, before its family{...} declaration.
% include("gemm_family.cuh") -- what every family{...} declaration uses
% --
% -- ring_staging(name, ring, wtn): the output tile goes through the pipeline's shared memory
% -- once the main loop is done with it (qc::stage_out), BM rows of the tile's columns in np
% -- passes over each warp's wtn, np doubling while the staging area is larger than the ring
% -- and wtn still splits into 16-column blocks.  Returns np and the dynamic shared memory
% -- in bytes (the larger of the two); refuses what does not fit in 227 KB.
% function ring_staging(name, ring, wtn)
%   local out_bytes = OUT == "f32" and 4 or 2
%   local np = 1
%   while wtn % (16 * np * 2) == 0 and BM * ((BN // np) * out_bytes + 16) > ring do np = np * 2 end
%   local smem = math.max(ring, BM * ((BN // np) * out_bytes + 16))
%   if smem > 227 * 1024 then
%     unsupported(string.format("%s: %d stages of tile %dx%dx%d need %d bytes of shared memory",
%       name, STAGES, BM, BN, BK, smem))
%   end
%   return np, smem
% end
% --
% -- quant_mma_space: the configurations the quantized mma.sync families (mma_wq, mma_i8,
% -- mma_f8) sweep: 64x64 warp tiles over 64..256-wide tiles of BK 64, and for small M the
% -- decode tiles of 16 rows (a K tile of 128, one warp row of four: the heuristic's
% -- 16x128x128 w1x4 at 3 stages and neighbours with more loads in flight -- deeper rings, wider tiles --
% -- which is what the weight stream is short of at 1.7 CTAs an SM, docs/NOTES.md), then
% -- tiles of 32 and 64 rows.  Their family{...} says `space = quant_mma_space`.
% quant_mma_space = spaces{
%   default = {config(128, 128, 64, 2, 2, 3), config(128, 256, 64, 2, 4, 3), config(64, 128, 64, 2, 2, 3),
%              config(64, 64, 64, 2, 2, 3), config(128, 128, 64, 2, 2, 4)},
%   ["small-m"] = {config(16, 128, 128, 1, 4, 3), config(16, 128, 128, 1, 4, 4), config(16, 128, 128, 1, 4, 6),
%                  config(16, 256, 128, 1, 4, 4),
%                  config(16, 64, 128, 1, 4, 6), config(32, 128, 128, 1, 4, 4),
%                  config(64, 128, 64, 2, 2, 3), config(64, 64, 64, 2, 2, 3), config(64, 64, 64, 2, 2, 4),
%                  -- K split across a cluster where the tiles leave SMs idle (mma_i8, mma_f8)
%                  config(16, 64, 128, 1, 4, 6, 4), config(16, 128, 128, 1, 4, 4, 8),
%                  -- eight warps along the columns: twice the warps an SM at the same shared
%                  -- memory.  On the H200 they won W8A8 and FP8 at M = 16 on the widest layers
%                  -- (2-5%); W4A16 ties the four-warp tile, its bound being the ALU pipe, not
%                  -- warps (docs/NOTES.md).  mma_wq takes the unsplit one only (it splits at launch)
%                  config(16, 256, 128, 1, 8, 4), config(16, 128, 128, 1, 8, 4, 8)},
% }
