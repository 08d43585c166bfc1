% -- gemm_family.cuh — what every family{...} declaration uses, in Lua only (it writes no
% -- code); the two plans, gemm_stage_plan.cuh and gemm_hopper_plan.cuh, include it, and a
% -- template includes one of them at its top, before family{...} (docs/TEMPLATES.md).
% --
% -- one_of(x, ...): whether x is one of the values.
% function one_of(x, ...)
%   for _, v in ipairs({...}) do if x == v then return true end end
%   return false
% end
% --
% -- config(bm, bn, bk, wm, wn, stages[, split]): one configuration, as default() and space()
% -- return them.
% function config(bm, bn, bk, wm, wn, stages, split)
%   return {bm = bm, bn = bn, bk = bk, wm = wm, wn = wn, stages = stages, split = split or 1}
% end
% --
% -- choose(bm, bn, bk, wm, wn, stages): a heuristic's configuration around the fields the
% -- descriptor names (BM, WM, STAGES not 0): a named tile keeps its size, and without named
% -- warps it gets warp tiles of 64x64 where the tile allows (two warps along a side of 32
% -- to 64, one along a side of 16; at most 8 warps).  The library takes from it only the
% -- fields left auto.
% local function warps_along(side) return side >= 128 and side // 64 or side >= 32 and 2 or 1 end
% function choose(bm, bn, bk, wm, wn, stages)
%   local c = config(bm, bn, bk, wm, wn, stages)
%   if BM ~= 0 then
%     c.bm, c.bn, c.bk = BM, BN, BK
%     c.wm = warps_along(BM)
%     c.wn = warps_along(BN)
%     while c.wm * c.wn > 8 and c.wm > 1 do c.wm = c.wm // 2 end
%   end
%   if WM ~= 0 then c.wm, c.wn = WM, WN end
%   if STAGES ~= 0 then c.stages = STAGES end
%   return c
% end
% --
% -- warpgroups(c): a Hopper family's configuration c, whose warps are consumer warpgroups:
% -- a named tile without named warps gets two along M from 128 rows, else one.
% function warpgroups(c)
%   if BM ~= 0 and WM == 0 then c.wm, c.wn = BM >= 128 and 2 or 1, 1 end
%   return c
% end
% --
% -- spaces(t): space() for a table of named configuration lists, e.g.
% --   space = spaces{default = {config(...), ...}, ["small-m"] = {...}}
% function spaces(t)
%   return function(name) return t[name] end
% end
