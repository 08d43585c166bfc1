#!/usr/bin/env python3
"""probe_decode.py — one GEMM of each pair and its torch peer, a few launches each, for a
profiler to look at (scripts/ncu-decode.sh runs it under ncu).  Nothing is timed here: the
launches are what ncu measures, one kernel at a time.  Decode shapes by default; with
--prefill the peer is the prefill one (tools/bench_grid.py), and --named adds configurations
of the pair by name beside auto's (';'-separated, e.g. "kernel=wgmma_wq tile=128x128x64
warps=2x1 stages=5"), each profiled in turn.

    LD_LIBRARY_PATH=build QJIT_CACHE_DIR=tunecache python3 tools/probe_decode.py
        [--shape 1x4096x4096] [--pairs bf16,w4a16,w8a8,fp8,w4a8] [--launches 2]
        [--prefill] [--named "kernel=... tile=...;..."]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quant import Qjit  # noqa: E402
from bench_step import PAIRS, make_act, make_weights, peer_call, qjit_call  # noqa: E402
from bench_grid import prefill_peer_calls  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--shape", default="1x4096x4096", help="MxNxK")
    ap.add_argument("--pairs", default="bf16,w4a16,w8a8,fp8,w4a8")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--prefill", action="store_true", help="the prefill peers")
    ap.add_argument("--named", default="", help="';'-separated configurations beside auto")
    o = ap.parse_args()
    m, n, k = (int(x) for x in o.shape.split("x"))
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    q = Qjit(o.lib)
    for pair in o.pairs.split(","):
        desc, peer, _, _, _ = PAIRS[pair]
        w, act = make_weights(pair, n, k), make_act(pair, m, k)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        calls = [("qjit " + pair, qjit_call(q, q.get(desc), pair, act, w, out, m, n, k))]
        for cfg in filter(None, (c.strip() for c in o.named.split(";"))):
            try:  # a configuration names one family; the pairs it does not serve are left out
                h = q.get(f"{desc} {cfg}")
            except RuntimeError as e:
                print(f"{pair} {cfg}: left out ({e})", flush=True)
                continue
            calls.append((f"qjit {pair} {cfg}", qjit_call(q, h, pair, act, w, out, m, n, k)))
        if o.prefill:
            name, pcalls = prefill_peer_calls(pair, m, n, k, out, 1)
            calls.append((f"{name} {pair}", pcalls[0]))
        elif peer:
            calls.append((peer + " " + pair, peer_call(pair, act, w, out)))
        for name, call in calls:
            call()  # lazy set-up (cuBLAS handles, module loads) outside the range
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("probe")  # what scripts/ncu-decode.sh profiles
            for _ in range(o.launches):
                call()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"{name}: {o.launches} launches at {o.shape}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
