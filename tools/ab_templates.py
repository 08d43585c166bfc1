#!/usr/bin/env python3
"""ab_templates.py — one named configuration compiled from two template directories and
timed in turns in one process: context A on the library's own templates, context B on
QJIT_TEMPLATE_DIR=DIR (a copy of templates/ with a change).  Each handle is timed as
bench_grid.py times (graph replays of one launch per weight copy, the copies covering 256
MB), in alternating turns, and the medians compared; the two outputs are compared bit for
bit on the same operands.

    LD_LIBRARY_PATH=build PYTHONPATH=python python3 tools/ab_templates.py DIR \\
        "w4a8c:128x128x128 warps=1x2 stages=6,w8a16:256x128x64 warps=1x2 stages=4" \\
        28672x4096,8192x8192 1024,4096 [--kernel wgmma_wqr] [--turns 5]
"""
import argparse
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quant import Qjit  # noqa: E402
from bench_step import PAIRS, make_act, make_weights, qjit_call, time_graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", help="the template directory of context B")
    ap.add_argument("cases", help="pair:tile-and-fields,... (the pairs of bench_step.py)")
    ap.add_argument("shapes", help="NxK,...")
    ap.add_argument("m", help="M,...")
    ap.add_argument("--kernel", default="wgmma_wqr")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--lib", default="build/libqjit.so")
    args = ap.parse_args()
    q = Qjit(args.lib)
    lib = q.lib
    lib.qjit_context_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    torch.zeros(1, device="cuda")
    torch.manual_seed(0)

    def context(template_dir):
        # the context reads QJIT_TEMPLATE_DIR when it is created
        if template_dir:
            os.environ["QJIT_TEMPLATE_DIR"] = template_dir
        else:
            os.environ.pop("QJIT_TEMPLATE_DIR", None)
        c = ctypes.c_void_p()
        if lib.qjit_context_create(None, ctypes.byref(c)) != 0:
            raise RuntimeError(lib.qjit_last_error().decode())
        os.environ.pop("QJIT_TEMPLATE_DIR", None)
        return c

    ca, cb = context(None), context(os.path.abspath(args.dir))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for case in args.cases.split(","):
        pair, fields = case.split(":", 1)
        text = f"{PAIRS[pair][0]} kernel={args.kernel} tile={fields}"
        ha, hb = q.get(text, ca), q.get(text, cb)
        for n, k in shapes:
            copies = max(1, min(16, -(-256 * 2**20 // int(n * k * PAIRS[pair][2]))))
            ws = [make_weights(pair, n, k) for _ in range(copies)]
            for m in (int(v) for v in args.m.split(",")):
                act = make_act(pair, m, k)
                oa = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                ob = oa.clone()
                qjit_call(q, ha, pair, act, ws[0], oa, m, n, k)()
                qjit_call(q, hb, pair, act, ws[0], ob, m, n, k)()
                torch.cuda.synchronize()
                same = torch.equal(oa, ob)
                ta, tb = [], []
                for _ in range(args.turns):
                    ta.append(time_graph([qjit_call(q, ha, pair, act, w, oa, m, n, k) for w in ws], len(ws), 10))
                    tb.append(time_graph([qjit_call(q, hb, pair, act, w, ob, m, n, k) for w in ws], len(ws), 10))
                a, b = statistics.median(ta), statistics.median(tb)
                print(f"{pair:6} {fields:32} M={m:5} {n}x{k}: A {a:8.1f} us  B {b:8.1f} us  B/A {b / a:.3f}"
                      f"  outputs {'equal' if same else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
