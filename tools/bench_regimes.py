#!/usr/bin/env python3
"""bench_regimes.py — two or more named configurations of one cell, timed in turns under
three ways of keeping the GPU busy, to tell whether their ranking depends on the board's
state rather than on the kernels.

qjit-tune and tools/bench_grid.py have ranked near-ties of a cell apart by more than either's
noise (docs/NOTES.md, "The tuner and the grid disagree"), with one kernel reading 13-15%
faster under the tuner in the same process.  The tuner's GPU idles between candidates (their
compiles, the check of each output on the host) and its final round lasts milliseconds; the
grid's runs for seconds without a pause.  At the H100's power limit, a board that has idled
runs its first milliseconds at a higher clock, and two configurations that draw different
power can swap places between a cool board and a hot one.  Here each configuration's graph
(one launch per weight copy, the copies covering --rotate-mb) is captured once and timed in
--turns turns of --reps replays, one replay of each in turn (the order reversed every
round), under each regime:

  hot     --warm-ms of the first configuration's graph replayed without a pause, then the
          turns back to back (the grid's way: a busy board at its power limit);
  cool    before each turn the GPU idles --idle-ms (the tuner's way between candidates);
  synced  the turns back to back, but each replay waited for before the next is issued
          (the tuner's way before its replays went back to back).

Each configuration's time in a regime is the median of its turns' medians, with their ratio
to the first configuration's.  Where the order changes between hot and cool, the tuner has
to time at the grid's state to pick the grid's winner.

    python3 tools/bench_regimes.py --pair bf16 --m 1024 --nk 28672x4096 --cache-dir tunecache \\
        --config "kernel=wgmma tile=256x128x64 warps=2x1 stages=4" \\
        --config "kernel=wgmma tile=128x256x64 warps=2x1 stages=3"
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_grid import time_interleaved  # noqa: E402
from bench_quant import Qjit  # noqa: E402
from bench_step import PAIRS, capture, make_act, make_weights, qjit_call  # noqa: E402


def warm(graph, ms):
    """Replay graph without a pause for about ms milliseconds."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(4):
            graph.replay()
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--pair", default="bf16")
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--nk", default="28672x4096")
    ap.add_argument("--config", action="append", default=[],
                    help="configuration fields appended to the pair's descriptor (two or more)")
    ap.add_argument("--turns", type=int, default=7)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warm-ms", type=float, default=3000.0)
    ap.add_argument("--idle-ms", type=float, default=300.0)
    ap.add_argument("--rotate-mb", type=int, default=256)
    ap.add_argument("--regimes", default="hot,cool,synced")
    ap.add_argument("--cache-dir", default="", help="the cache the handles' kernels come from")
    o = ap.parse_args()
    if len(o.config) < 2:
        ap.error("name two or more configurations with --config")
    if o.turns < 1 or o.reps < 1:
        ap.error("--turns and --reps must be 1 or more")
    regimes = o.regimes.split(",")
    for r in regimes:
        if r not in ("hot", "cool", "synced"):
            ap.error(f"--regimes: {r!r} is not hot, cool or synced")
    if o.cache_dir:
        os.environ["QJIT_CACHE_DIR"] = o.cache_dir  # the default context of Qjit.get
    torch.zeros(1, device="cuda")  # a current CUDA context before the first get
    torch.manual_seed(0)
    q = Qjit(o.lib)
    n, k = (int(v) for v in o.nk.split("x"))
    desc, _, wb, sb, _ = PAIRS[o.pair]
    handles = [q.get(f"{desc} {c}") for c in o.config]
    copies = max(1, min(16, -(-o.rotate_mb * 2**20 // int(n * k * (wb + sb)))))
    ws = [make_weights(o.pair, n, k) for _ in range(copies)]
    act = make_act(o.pair, o.m, k)
    out = torch.empty(o.m, n, dtype=torch.bfloat16, device="cuda")
    graphs = [capture([qjit_call(q, h, o.pair, act, w, out, o.m, n, k) for w in ws]) for h in handles]
    print(f"# {torch.cuda.get_device_name()}; {desc}; M = {o.m}, N x K = {n}x{k}; {copies} weight "
          f"copies; {o.turns} turns of {o.reps} replays in turns; warm {o.warm_ms:.0f} ms, idle "
          f"{o.idle_ms:.0f} ms; µs a launch, median of the turns' medians")
    for regime in regimes:
        per = [[] for _ in graphs]
        if regime == "hot":
            warm(graphs[0], o.warm_ms)
        for _ in range(o.turns):
            if regime == "cool":
                torch.cuda.synchronize()
                time.sleep(o.idle_ms / 1e3)
            t = time_interleaved(graphs, len(ws), o.reps, wait_each=regime == "synced")
            for i, v in enumerate(t):
                per[i].append(v)
        meds = [statistics.median(p) for p in per]
        print(f"{regime:6} " + "  ".join(f"{c.replace('kernel=', '')}: {m:8.1f} ({m / meds[0]:.3f})"
                                         for c, m in zip(o.config, meds)), flush=True)


if __name__ == "__main__":
    main()
