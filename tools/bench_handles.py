#!/usr/bin/env python3
"""bench_handles.py — one configuration timed through several handles in one process, to
tell a drift of the clock from a difference between module loads of one cubin.

For one pair, M and layer: --contexts handles of the named configuration, each from a
context of its own (so each loads its own module of the same cubin, at its own address),
the first of them twice (the same handle again: the spread of one handle), and the pair's
auto handle; their graphs (one launch per weight copy, the copies covering --rotate-mb)
are replayed one after another in each of --turns turns (tools/bench_grid.py's
--interleave), and each handle's time is the median of its turns' medians.

Where the module loads differ by more than the same handle's two readings, the code's
placement matters, and the grid and the tuner should time auto and a named configuration
through one module; where they do not, the grid's spread between two handles of one
kernel is the clock's.

    python3 tools/bench_handles.py --pair w4a16 --m 1024 --nk 8192x28672 \\
        --config "kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=4" --cache-dir tunecache
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_grid import time_interleaved  # noqa: E402
from bench_quant import Qjit  # noqa: E402
from bench_step import PAIRS, capture, make_act, make_weights, qjit_call  # noqa: E402

import qjit  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--pair", default="w4a16")
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--nk", default="8192x28672")
    ap.add_argument("--config", default="kernel=wgmma_wqr tile=256x128x64 warps=1x2 stages=4",
                    help="the configuration fields appended to the pair's descriptor")
    ap.add_argument("--contexts", type=int, default=3)
    ap.add_argument("--turns", type=int, default=9)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rotate-mb", type=int, default=256)
    ap.add_argument("--cache-dir", default="", help="the cache every context reads (its records and kernels)")
    o = ap.parse_args()
    if o.contexts < 1 or o.turns < 1:
        ap.error("--contexts and --turns must be 1 or more")
    if o.cache_dir:
        os.environ["QJIT_CACHE_DIR"] = o.cache_dir  # the default context of Qjit.get
    torch.zeros(1, device="cuda")  # a current CUDA context before the first get
    q = Qjit(o.lib)
    n, k = (int(v) for v in o.nk.split("x"))
    desc, _, wb, sb, _ = PAIRS[o.pair]
    named = f"{desc} {o.config}"

    ctxs = [qjit.Context(cache_dir=o.cache_dir or None) for _ in range(o.contexts)]
    handles = [(f"context {i}", q.get(named, c)) for i, c in enumerate(ctxs)]
    handles.append(("context 0 again", handles[0][1]))
    handles.append(("auto (default context)", q.get(desc)))
    copies = max(1, min(16, -(-o.rotate_mb * 2**20 // int(n * k * (wb + sb)))))
    ws = [make_weights(o.pair, n, k) for _ in range(copies)]
    act = make_act(o.pair, o.m, k)
    out = torch.empty(o.m, n, dtype=torch.bfloat16, device="cuda")
    graphs = [capture([qjit_call(q, h, o.pair, act, w, out, o.m, n, k) for w in ws]) for _, h in handles]
    per = [[] for _ in handles]
    for _ in range(o.turns):
        for i, t in enumerate(time_interleaved(graphs, len(ws), o.reps)):
            per[i].append(t)
    print(f"# {torch.cuda.get_device_name()}; {named}; M = {o.m}, N x K = {n}x{k}; "
          f"{copies} weight copies; {o.turns} turns of {o.reps} interleaved replays")
    base = statistics.median(per[0])
    for (name, h), t in zip(handles, per):
        med = statistics.median(t)
        print(f"{name:24} handle {h.value:#x}  median {med:9.1f} us  ({med / base:.3f} of context 0)  "
              f"turns {min(t):.1f}-{max(t):.1f}")


if __name__ == "__main__":
    main()
