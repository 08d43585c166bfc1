#!/usr/bin/env python3
"""bench_grid.py — for each pair, layer shape and M: the auto handle, every named
configuration the tuner would try (the best of them reported), and torch's path for the
pair, all timed the same way in the same run.

Each time is the median of CUDA-graph replays of one launch per weight copy, the copies
covering --rotate-mb (so that weights come from DRAM, as in a model), divided by the
copies.  The auto handle is a get of the pair's descriptor through a context on the given
cache (so tuned records there are used, as in a server); the named configurations are
the pair's sweep on sm_90a (small-m up to M = 64, default above) with the bucket's
heuristic; auto is timed after them in turns with the fastest of them (three times each,
the median of each compared: the minimum over a sweep is biased low, and the turns put a
drift of the clocks on both), six turns more where auto is over the best (or the --then
auto) by 3% (--confirm, --confirm-above).  Each row names auto's configuration and whether a tuned record chose it,
and gives auto's and the peer's share of the cell's ideal: its minimum bytes over the copy
bandwidth measured at the start of the run (the decode issue's measure).  The summary gives, per
pair and model, auto's worst and median ratio to the peer across M and auto's worst ratio
to the best named configuration.

With --then FILE (a JSON file that tools/auto_then.py wrote from an earlier revision's
library: the configuration its auto handle ran for each pair and M range), that
configuration is timed in the same turns as auto and the best, and each row gives auto's
time over it: whether auto got slower anywhere than the auto of that revision, run by
today's library.

With --interleave each turn replays the handles' graphs one after another (auto, the best,
the --then auto; each graph captured once a cell) instead of each handle's replays back to
back: at the board's power limit the clock swings within a turn, and one handle timed twice
in turns read up to 4.9% apart on compute-bound cells (docs/NOTES.md).  On the H100 the
prefill grid so timed had no cell of auto running the best's own configuration over 5%
(docs/BENCH.md, "The prefill grid with the handles replayed in turns").

With --prefill (M >= 128, the prefill issue's table) the peers are those the formats
promise to meet: bf16 cuBLAS for the weight-only pairs, fp8 row-wise `_scaled_mm` for FP8
row and block and W4A8, fp8 tensor-wise `_scaled_mm` for FP8 tensor and MX, `_int_mm` for
W8A8; each row also gives auto's TFLOP/s and its share of the dense peak its MMAs run at
(989 TFLOP/s for 16-bit activations, 1979 for 8- and 4-bit ones).

    LD_LIBRARY_PATH=build PYTHONPATH=python QJIT_LIBRARY=build/libqjit.so \\
        python3 tools/bench_grid.py [--pairs bf16,w8a8] [--m 1,16,128,4096]
        [--models 8b,70b] [--nk 14336x4096] [--cache-dir DIR] [--csv grid.csv] [--each]
        [--also 'kernel=mma_wq tile=16x224x128 warps=1x7 stages=4;...']
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quant import Qjit  # noqa: E402
from bench_step import (MODELS, PAIRS, capture, copy_bandwidth, layer_bytes,  # noqa: E402
                        make_act, make_weights, peer_call, qjit_call, time_graph)

import qjit  # noqa: E402  (the package, for the sweep and the heuristic)


# the prefill peers: what each pair's format is measured against at M >= 128
PREFILL_PEER = {"bf16": "cuBLAS", "w4a16": "cuBLAS", "w8a16": "cuBLAS", "w4a16z": "cuBLAS",
                "w4a16mx": "cuBLAS", "w8a8": "_int_mm", "fp8": "_scaled_mm row",
                "fp8blk": "_scaled_mm row", "w4a8": "_scaled_mm row", "w4a8c": "_scaled_mm row",
                "fp8t": "_scaled_mm tensor", "mxfp8": "_scaled_mm tensor",
                "mxfp4": "_scaled_mm tensor"}
SIXTEEN_BIT_A = ("bf16", "w4a16", "w8a16", "w4a16z", "w4a16mx")


def first_line(e, width=100):
    """An exception's first line, for a one-line note in the table."""
    return (str(e).splitlines() or [repr(e)])[0][:width]


def prefill_peer_calls(pair, m, n, k, out, copies):
    """(name, one call per weight copy) of the pair's prefill peer, on its own operands."""
    name = PREFILL_PEER[pair]
    calls = []
    if name == "cuBLAS":
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        for _ in range(copies):
            wt = (torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02).t()
            calls.append(lambda wt=wt: torch.mm(x, wt, out=out))
    elif name == "_int_mm":
        x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        for _ in range(copies):
            wt = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()
            calls.append(lambda wt=wt: torch._int_mm(x, wt))
    else:
        x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        rowwise = name.endswith("row")
        sa = torch.rand(m, 1, device="cuda") * 1e-2 if rowwise else torch.rand((), device="cuda") * 1e-2
        for _ in range(copies):
            wt = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
            sb = (torch.rand(1, n, device="cuda") * 1e-2).contiguous() if rowwise \
                else torch.rand((), device="cuda") * 1e-2
            calls.append(lambda wt=wt, sb=sb: torch._scaled_mm(x, wt, scale_a=sa, scale_b=sb,
                                                               out_dtype=torch.bfloat16))
    return name, calls


def time_launches(calls, reps):
    """Median µs of one call, as graph replays of all of them (one per weight copy)."""
    return time_graph(calls, len(calls), reps)


def time_interleaved(graphs, layers, reps, wait_each=False):
    """Median µs of one call of each graph (of `layers` calls), their replays interleaved: one
    replay of each in turn, the order reversed every round, so that a drift of the clock
    within the cell falls on all of them alike.  wait_each: each replay waited for before
    the next is issued (the GPU idle for the host between them)."""
    marks = []
    for r in range(reps):
        order = range(len(graphs)) if r % 2 == 0 else reversed(range(len(graphs)))
        for i in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graphs[i].replay()
            e.record()
            if wait_each:
                e.synchronize()
            marks.append((i, s, e))
    torch.cuda.synchronize()
    times = [[] for _ in graphs]
    for i, s, e in marks:
        times[i].append(s.elapsed_time(e) * 1e3 / layers)
    return [statistics.median(t) for t in times]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--pairs", default="bf16,w4a16,w8a8,fp8,w4a8,mxfp8,w8a16,fp8blk,w4a16mx,w4a16z,fp8t,w4a8c,mxfp4")
    ap.add_argument("--models", default="8b,70b")
    ap.add_argument("--m", default="1,4,16,32,64,128,256,1024,4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rotate-mb", type=int, default=256)
    ap.add_argument("--cache-dir", default="", help="the cache whose tuned records auto uses")
    ap.add_argument("--no-named", action="store_true", help="time auto and the peer only")
    ap.add_argument("--turns", type=int, default=3,
                    help="auto and the sweep's winner timed in turns, this many times each")
    ap.add_argument("--confirm", type=int, default=6,
                    help="more turns for a cell whose auto is over the best (or the --then auto) by --confirm-above")
    ap.add_argument("--confirm-above", type=float, default=0.03)
    ap.add_argument("--each", action="store_true", help="print each named configuration's time")
    ap.add_argument("--also", default="", metavar="FIELDS;FIELDS",
                    help="more named configurations, timed beside the sweep's in each cell where the "
                         "pair takes them (e.g. 'kernel=mma_i8 tile=16x224x128 warps=1x7 stages=4')")
    ap.add_argument("--interleave", action="store_true",
                    help="in each turn, replay auto's, the best's and the earlier auto's graphs "
                         "one after another (each graph captured once a cell), not each handle's "
                         "replays back to back")
    ap.add_argument("--csv", default="")
    ap.add_argument("--nk", default="",
                    help="NxK,... layers to time instead of each model's four (e.g. the dispatch "
                         "issue's unfused 14336x4096), each under every model named")
    ap.add_argument("--then", default="", metavar="JSON",
                    help="an earlier revision's auto configurations (tools/auto_then.py), timed beside auto")
    ap.add_argument("--prefill", action="store_true",
                    help="the prefill peers and TFLOP/s (M defaults to 128,256,1024,4096)")
    o = ap.parse_args()
    if o.turns < 1:
        ap.error("--turns must be 1 or more")
    if o.prefill and o.m == ap.get_default("m"):
        o.m = "128,256,1024,4096"
    then = {}
    if o.then:
        import json
        with open(o.then, encoding="utf-8") as fh:
            then = json.load(fh)
        if then.get("arch", "sm_90a") != "sm_90a":
            print(f"# --then: configurations for {then.get('arch')}, not sm_90a: refused ones are not timed")
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    q = Qjit(o.lib)
    ctx = qjit.Context(cache_dir=o.cache_dir) if o.cache_dir else None
    if o.cache_dir:
        os.environ["QJIT_CACHE_DIR"] = o.cache_dir  # the ctypes gets of bench_quant's Qjit
    # the ideal of a decode cell: its minimum bytes (weights, scales, activations, output, each
    # moved once) over the copy bandwidth measured here (none for prefill: the MMAs bound it)
    bw = None if o.prefill else copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; µs per launch, median "
          f"of {o.reps} graph replays over weight copies covering {o.rotate_mb} MB" +
          (f"; copy bandwidth {bw / 1e9:.0f} GB/s (the ideal: a cell's bytes over it)" if bw else ""))
    print(q.records_note(torch.cuda.get_device_name()))  # the cache of QJIT_CACHE_DIR, set above
    print(f"{'model':5} {'pair':6} {'M':>5} {'N x K':>12} {'auto us':>9} {'best us':>9} "
          f"{'auto/best':>9} {'peer us':>9} {'peer/auto':>9} {'TFLOP/s':>8} {'%peak':>6} "
          f"{'%ideal':>6} {'peer%':>6}  best named")
    rows = []
    ms = [int(x) for x in o.m.split(",")]
    extra = [tuple(int(v) for v in s.split("x")) for s in o.nk.split(",") if s]
    for model in o.models.split(","):
        for n, k in extra or MODELS[model]:
            for pair in o.pairs.split(","):
                desc, peer, wb, sb, _ = PAIRS[pair]
                g = q.get(desc)
                auto_h = qjit.get_gemm(desc, ctx)  # what auto runs, for each row
                heur = qjit.variants(desc, "sm_90a", ctx)  # each bucket's heuristic kernel
                copies = max(1, min(16, -(-o.rotate_mb * 2**20 // int(n * k * (wb + sb)))))
                ws = [make_weights(pair, n, k) for _ in range(copies)]
                for m in ms:
                    act = make_act(pair, m, k)
                    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                    launch = lambda h, w: qjit_call(q, h, pair, act, w, out, m, n, k)
                    if m == ms[0]:
                        # the first graph on new weights runs slow (up to 1.25x on the H100,
                        # whichever configuration goes first): one untimed pass
                        time_launches([launch(g, w) for w in ws], o.reps)
                    best, best_cfg = None, ""
                    if not o.no_named:
                        sweep = "small-m" if m <= 64 else "default"
                        cands = [str(v["desc"]) for v in heur
                                 if not v["tuned"] and v["m_min"] <= m <= v["m_max"]]
                        cands += [str(c) for c in qjit.sweep(desc, "sm_90a", sweep, ctx)]
                        cands += [f"{desc} arch=sm_90a {x.strip()}" for x in o.also.split(";") if x.strip()]
                        for c in dict.fromkeys(cands):
                            try:
                                h = q.get(c)
                                t = time_launches([launch(h, w) for w in ws], o.reps)
                            except RuntimeError:
                                continue  # sizes this configuration refuses
                            if o.each:
                                print(f"    {t:9.1f}  {c.split('kernel=')[-1]}", flush=True)
                            if best is None or t < best:
                                best, best_cfg, best_h = t, c.split("kernel=")[-1].replace(" split=1", ""), h
                    # auto after the sweep, beside its winner timed again: the fastest of
                    # some twenty noisy timings is biased low (on the H100, auto's own
                    # configuration came out up to 10% ahead of auto in the sweep), so those
                    # two times are the ones compared
                    # in turns, the median of each: a drift of the clocks during the cell
                    # falls on both alike
                    ta, tb, tt = [], [], []
                    # the earlier revision's auto configuration for this M (--then), by name
                    then_cfg, then_h = "", None
                    for v in then.get("pairs", {}).get(desc, []):
                        if v["m_min"] <= m <= v["m_max"]:
                            then_cfg = v["config"]
                            try:
                                then_h = q.get(then_cfg)
                            except RuntimeError as e:
                                print(f"  then {then_cfg.split('kernel=')[-1]}: not timed: {first_line(e)}")
                            break

                    graphs = {}  # --interleave: each handle's graph, captured at its first turn

                    def turns(count):
                        nonlocal then_h
                        done = len(ta)  # turns so far: the order alternates across calls too
                        if o.interleave:
                            if not graphs:
                                graphs["auto"] = capture([launch(g, w) for w in ws])
                                if best is not None:
                                    graphs["best"] = capture([launch(best_h, w) for w in ws])
                                if then_h is not None:
                                    try:
                                        graphs["then"] = capture([launch(then_h, w) for w in ws])
                                    except RuntimeError as e:  # sizes it refuses
                                        print(f"  then {then_cfg.split('kernel=')[-1]}: not timed: {first_line(e)}")
                                        then_h = None
                            names = list(graphs)
                            for i in range(count):
                                t = time_interleaved([graphs[n] for n in names], len(ws), o.reps)
                                for n, v in zip(names, t):
                                    {"auto": ta, "best": tb, "then": tt}[n].append(v)
                            return
                        for i in range(count):
                            # auto, best (, then), then the reverse: auto and the best swap
                            # places each turn; with --then the best stays in the middle
                            order = ["auto", "best", "then"] if (done + i) % 2 == 0 else ["then", "best", "auto"]
                            for who in order:
                                if who == "best" and best is not None:
                                    tb.append(time_launches([launch(best_h, w) for w in ws], o.reps))
                                elif who == "then" and then_h is not None:
                                    try:
                                        tt.append(time_launches([launch(then_h, w) for w in ws], o.reps))
                                    except RuntimeError as e:  # sizes it refuses
                                        print(f"  then {then_cfg.split('kernel=')[-1]}: not timed: {first_line(e)}")
                                        then_h = None
                                elif who == "auto":
                                    ta.append(time_launches([launch(g, w) for w in ws], o.reps))
                    turns(o.turns)
                    # a close call (auto over the best by more than --confirm-above) gets
                    # --confirm more turns before the medians are taken: compute-bound
                    # candidates within a few percent swap places with the SM clock, which
                    # swings 1515-1980 MHz at the board's power limit (docs/NOTES.md)
                    confirmed = False
                    # (and so does one where auto is over the earlier revision's auto by as much)
                    if o.confirm > 0 and ta and (
                            (tb and statistics.median(ta) > (1 + o.confirm_above) * statistics.median(tb)) or
                            (tt and statistics.median(ta) > (1 + o.confirm_above) * statistics.median(tt))):
                        turns(o.confirm)
                        confirmed = True
                    t_auto = statistics.median(ta)
                    best = statistics.median(tb) if tb else best
                    t_then = statistics.median(tt) if tt else None
                    try:  # the configuration auto runs for this problem, and whether a record chose it
                        v = auto_h.choose(m, n, k)
                        auto_cfg = str(v["desc"]).split("kernel=")[-1].replace(" split=1", "")
                        auto_src = "tuned" if v["tuned"] else "heuristic"
                    except Exception:  # noqa: BLE001
                        auto_cfg, auto_src = "", ""
                    t_peer, peer_name = None, peer
                    try:
                        if o.prefill:
                            peer_name, pcalls = prefill_peer_calls(pair, m, n, k, out, min(copies, 4))
                            time_launches(pcalls, o.reps)  # new weights: one untimed pass, as auto's
                            t_peer = time_launches(pcalls, o.reps)
                            del pcalls
                        elif peer:
                            t_peer = time_launches([peer_call(pair, act, w, out) for w in ws], o.reps)
                    except Exception as e:  # noqa: BLE001
                        print(f"  {peer_name} failed: {first_line(e)}")
                    tflops = 2.0 * m * n * k / t_auto / 1e6
                    ideal_us = layer_bytes(pair, [(n, k)], m) / bw * 1e6 if bw else None
                    peak = 989.0 if pair in SIXTEEN_BIT_A else 1979.0
                    r = dict(model=model, pair=pair, m=m, n=n, k=k, auto_us=t_auto, best_us=best,
                             best=best_cfg, peer=peer_name or "", peer_us=t_peer, tflops=tflops,
                             peak_share=tflops / peak, auto=auto_cfg, auto_source=auto_src,
                             turns=len(ta), ideal_share=ideal_us / t_auto if ideal_us else None,
                             peer_ideal_share=ideal_us / t_peer if ideal_us and t_peer else None,
                             then_us=t_then, then=then_cfg.split("kernel=")[-1].replace(" split=1", ""))
                    # auto running the best's own configuration (or the earlier auto's): the
                    # two handles run one kernel, and their ratio is the noise between them
                    r["auto_is_best"] = bool(auto_cfg) and auto_cfg == best_cfg
                    r["auto_is_then"] = bool(auto_cfg) and auto_cfg == r["then"]
                    rows.append(r)
                    f = lambda v, p=1, w=9: f"{v:{w}.{p}f}" if v is not None else f"{'—':>{w}}"
                    print(f"{model:5} {pair:6} {m:5d} {n:6d}x{k:<5d} {f(t_auto)} {f(best)} "
                          f"{f(t_auto / best if best else None, 2)} {f(t_peer)} "
                          f"{f(t_peer / t_auto if t_peer else None, 2)} {f(tflops, 0, 8)} "
                          f"{f(100 * tflops / peak, 0, 5)}% {f(100 * r['ideal_share'] if ideal_us else None, 0, 5)}% "
                          f"{f(100 * r['peer_ideal_share'] if r['peer_ideal_share'] else None, 0, 5)}%  {best_cfg}"
                          f"{' (confirmed)' if confirmed else ''}  [auto: "
                          f"{'the same' if r['auto_is_best'] else auto_cfg}, {auto_src}]"
                          + (f"  [then {then.get('rev', '')}: {f(t_then)} us, auto/then "
                             f"{f(t_auto / t_then if t_then else None, 3, 5)}]" if then else ""),
                          flush=True)
                del ws
                torch.cuda.empty_cache()
    print("\n# summary: peer time / auto time across M and shapes (> 1: auto faster), and auto / best named")
    for model in o.models.split(","):
        for pair in o.pairs.split(","):
            rs = [r for r in rows if r["model"] == model and r["pair"] == pair]
            vs = [r["peer_us"] / r["auto_us"] for r in rs if r["peer_us"]]
            bs = [r["auto_us"] / r["best_us"] for r in rs if r["best_us"]]
            print(f"{model:5} {pair:6} peer/auto worst {min(vs):.2f} median {statistics.median(vs):.2f}"
                  if vs else f"{model:5} {pair:6} (no peer)", end="")
            # (cells where auto runs that very configuration counted apart: what is left
            # there is the noise between two handles of one kernel)
            over = [r for r in rs if r["best_us"] and r["auto_us"] > 1.05 * r["best_us"]]
            print(f"; auto/best worst {max(bs):.3f}, over 1.05 in {len(over)} of {len(bs)}"
                  f" ({sum(r['auto_is_best'] for r in over)} of them auto's own configuration)"
                  if bs else "", end="")
            ts = [r["auto_us"] / r["then_us"] for r in rs if r.get("then_us")]
            slow = [r for r in rs if r.get("then_us") and r["auto_us"] > 1.03 * r["then_us"]]
            print(f"; auto/then worst {max(ts):.3f}, over 1.00 in {sum(t > 1.0 for t in ts)}, over "
                  f"1.03 in {len(slow)} ({sum(r['auto_is_then'] for r in slow)} of them the same "
                  f"configuration) and over 1.05 in {sum(t > 1.05 for t in ts)} of {len(ts)}"
                  if ts else "", end="")
            ds = [r["ideal_share"] for r in rs if r["m"] <= 16 and r["ideal_share"]]
            print(f"; % of the ideal at M <= 16 worst {100 * min(ds):.0f}, median "
                  f"{100 * statistics.median(ds):.0f}" if ds else "")
    if o.csv:
        keys = ["model", "pair", "m", "n", "k", "auto_us", "best_us", "best", "peer", "peer_us",
                "tflops", "peak_share", "auto", "auto_source", "turns", "ideal_share",
                "peer_ideal_share", "then_us", "then", "auto_is_best", "auto_is_then"]
        with open(o.csv, "w") as fh:
            fh.write(",".join(keys) + "\n")
            for r in rows:
                fh.write(",".join("" if r.get(x) is None else str(r.get(x)) for x in keys) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
