#!/usr/bin/env python3
"""bench_step.py — a model's decode step through qjit's auto handles and through torch's
path for the same pair, in the same run, as CUDA-graph replays.

A step of one layer is its four projections (qkv, o, gate_up, down), each a GEMM of the
layer's activations [M, K] by its weight [N, K]. L layers' worth of distinct weights
(enough that L2, 50 MB on the H100 and 60 on the H200, holds none of them at the next
replay) go into one CUDA graph of 4·L launches; the time per layer is the median replay
over L. The ideal is the layer's minimum bytes (weights, scales, activations and outputs,
each moved once) over the copy bandwidth measured in the same run. Peers: cuBLAS
(`torch.mm`) for bf16, `torch._weight_int4pack_mm` for W4A16 g128, `torch._int_mm` for
W8A8 (int32 out, no scales; M padded to 32 where it needs M > 16), `torch._scaled_mm` with
row-wise scales for FP8 (M padded to 16). W8A16, W4A8 and MXFP8 have no torch path here
and run alone. Activations are already in each pair's type (the quantizers are
bench_quantize.py's); with --quantize, the pairs of quantized activations are timed again
(rows "PAIR+q", no peer) with each projection's quantizer (bf16 in, qjit's quantizer of
the pair's mode) launched before its GEMM in the graph, as a W8A8 or FP8 model runs them:
one qjit_linear_launch a projection, as qjit.ops.quant_linear and qjit.nn launch a
quantized layer (on sm_90a the GEMM starts under its quantizer), or with --quantize-apart
two plain launches.

    LD_LIBRARY_PATH=build python3 tools/bench_step.py [--lib build/libqjit.so]
        [--models 8b,70b] [--m 1,4,16,32,64] [--quantize [--quantize-apart]] [--csv out.csv]
        [--png step.png]
"""
import argparse
import os
import statistics
import sys

try:
    import torch
except ImportError:  # drawing a plot from a CSV (bench_step.py --plot) needs no torch
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_quant import Args, LinearArgs, Qjit, ptr  # noqa: E402  (ctypes over the public C API)

MODELS = {  # a layer's projections, (N, K) each: qkv, o, gate_up, down
    "8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
    "70b": [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)],
}

# pair: (qjit descriptor, peer name or None, bytes per weight element, scale bytes per
# weight element, activation bytes per element)
PAIRS = {
    "bf16": ("gemm a=bf16 b=bf16 out=bf16", "cuBLAS", 2.0, 0.0, 2),
    "w4a16": ("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16", "torch int4", 0.5, 2 / 128, 2),
    "w8a16": ("gemm a=bf16 b=s8 sb=col out=bf16", None, 1.0, 0.0, 2),
    "w8a8": ("gemm a=s8 b=s8 sa=row sb=col out=bf16", "_int_mm", 1.0, 0.0, 1),
    "fp8": ("gemm a=e4m3 b=e4m3 sa=row sb=col out=bf16", "_scaled_mm", 1.0, 0.0, 1),
    "w4a8": ("gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16", None, 0.5, 4 / 128, 1),
    "mxfp8": ("gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16", None, 1.0, 1 / 32, 1),
    "fp8blk": ("gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16", None, 1.0, 4 / (128 * 128), 1),
    "w4a16mx": ("gemm a=bf16 b=e2m1 sb=mx out=bf16", None, 0.5, 1 / 32, 2),
    # the rest of the decode issue's pairs: u4 with zero points, FP8 per tensor, W4A8 per column
    "w4a16z": ("gemm a=bf16 b=u4 sb=group:128 gs=bf16 zeros=1 out=bf16", None, 0.5, 4 / 128, 2),
    "fp8t": ("gemm a=e4m3 b=e4m3 sa=tensor sb=tensor out=bf16", None, 1.0, 0.0, 1),
    "w4a8c": ("gemm a=s8 b=s4 sa=row sb=col out=bf16", None, 0.5, 0.0, 1),
    "mxfp4": ("gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16", None, 0.5, 1 / 32, 0.5),
}


# the quantizer before each projection of a pair of quantized activations (--quantize)
QUANTIZERS = {
    "w8a8": "quant in=bf16 out=s8 scale=row", "w4a8": "quant in=bf16 out=s8 scale=row",
    "w4a8c": "quant in=bf16 out=s8 scale=row", "fp8": "quant in=bf16 out=e4m3 scale=row",
    "fp8t": "quant in=bf16 out=e4m3 scale=tensor", "fp8blk": "quant in=bf16 out=e4m3 scale=block",
    "mxfp8": "quant in=bf16 out=e4m3 scale=mx rule=rceil",
    "mxfp4": "quant in=bf16 out=e2m1 scale=mx rule=rceil",
}


def quantized_calls(quant, q, g, pair, m, shapes, weights, outs, layers, apart=False):
    """Each projection's quantizer (bf16 activations in, into buffers of the pair's type),
    then its GEMM over them, for every layer: one qjit_linear_launch each, as a quantized
    layer runs (the GEMM may start under the quantizer), or with apart two plain launches."""
    calls, per = [], []
    qh = q.get_quant(QUANTIZERS[pair])
    for n, k in shapes:
        qshape, qdt, sshape, sdt = quant.shapes(m, k)
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        xq = torch.empty(qshape, dtype=qdt, device="cuda")
        xs = torch.empty(sshape, dtype=sdt, device="cuda")
        ws = torch.empty(4096, dtype=torch.uint8, device="cuda")  # scale=tensor's workspace
        per.append((x, xq, xs, ws))
    for l in range(layers):
        for i, (n, k) in enumerate(shapes):
            x, xq, xs, ws = per[i]
            if apart:
                calls.append(lambda x=x, xq=xq, xs=xs: quant(x, out=xq, scale=xs))
                calls.append(qjit_call(q, g, pair, {"x": xq, "s": xs}, weights[l][i], outs[i], m, n, k))
                continue
            ga = qjit_args(pair, {"x": xq, "s": xs}, weights[l][i], outs[i], m, n, k)
            la = LinearArgs(ptr(x), k, ptr(xq), ptr(xs), ptr(ws), 0.0, ga)
            calls.append(lambda la=la: q.linear(qh, g, la))
    return calls


def copy_bandwidth():
    """Bytes read + written per second of a 1 GiB device copy (median of 20)."""
    src = torch.empty(1 << 29, dtype=torch.int16, device="cuda").random_()
    dst = torch.empty_like(src)
    times = []
    for i in range(25):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        if i >= 5:
            times.append(s.elapsed_time(e) * 1e-3)
    return 2 * src.numel() * 2 / statistics.median(times)


def layer_bytes(pair, shapes, m):
    _, _, wb, sb, ab = PAIRS[pair]
    return sum(n * k * (wb + sb) + m * k * ab + m * n * 2 for n, k in shapes)


def make_weights(pair, n, k):
    """One projection's weight in the pair's form, for qjit and for the peer."""
    d = {}
    if pair in ("bf16",):
        d["w"] = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
    elif pair in ("w4a16", "w4a8", "w4a16mx", "w4a16z", "w4a8c"):
        d["w"] = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        if pair == "w4a16mx":  # e2m1 values, e8m0 scales near 2^0
            d["s"] = torch.randint(120, 134, (n, k // 32), dtype=torch.uint8, device="cuda")
            return d
        if pair == "w4a16z":  # u4 with a zero point near the middle of each group
            d["s"] = (torch.rand(n, k // 128, device="cuda") * 0.01 + 0.005).to(torch.bfloat16)
            d["z"] = torch.randint(6, 10, (n, k // 128), device="cuda").to(torch.bfloat16)
            return d
        if pair == "w4a8c":
            d["s"] = torch.rand(n, device="cuda") * 1e-2
            return d
        if pair == "w4a16":
            d["s"] = (torch.rand(n, k // 128, device="cuda") * 0.01 + 0.005).to(torch.bfloat16)
            d["packed"] = torch._convert_weight_to_int4pack(d["w"], 8)
            d["sz"] = torch.ones(k // 128, n, 2, dtype=torch.bfloat16, device="cuda")
        else:
            d["s"] = torch.rand(n, k // 128, device="cuda") * 1e-2
    elif pair in ("w8a16", "w8a8"):
        d["w"] = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        d["s"] = torch.rand(n, device="cuda") * 1e-3
        if pair == "w8a8":
            d["wt"] = d["w"].t()
    elif pair == "mxfp4":  # e2m1 values two a byte, e8m0 scales near 2^0
        d["w"] = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        d["s"] = torch.randint(120, 134, (n, k // 32), dtype=torch.uint8, device="cuda")
    elif pair in ("fp8", "mxfp8", "fp8blk", "fp8t"):
        d["w"] = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        if pair == "fp8t":
            d["s"] = torch.rand(1, device="cuda") * 1e-2
        elif pair == "fp8blk":  # 128x128 blocks
            d["s"] = torch.rand((n + 127) // 128, (k + 127) // 128, device="cuda") * 1e-2
        elif pair == "fp8":
            d["s"] = (torch.rand(1, n, device="cuda") * 1e-2).contiguous()
            d["wt"] = d["w"].t()
        else:
            d["s"] = torch.randint(120, 134, (n, k // 32), dtype=torch.uint8, device="cuda")
    return d


def make_act(pair, m, k):
    d = {}
    if pair in ("bf16", "w4a16", "w8a16", "w4a16mx", "w4a16z"):
        d["x"] = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    elif pair in ("w8a8", "w4a8", "w4a8c"):
        d["x"] = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        d["s"] = torch.rand(m, device="cuda") * 1e-3
        d["xp"] = d["x"] if m > 16 else torch.randint(-128, 128, (32, k), dtype=torch.int8, device="cuda")
    elif pair == "mxfp4":
        d["x"] = torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, device="cuda")
        d["s"] = torch.randint(120, 134, (m, k // 32), dtype=torch.uint8, device="cuda")
    else:
        d["x"] = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        if pair == "fp8blk":  # 1x128 blocks
            d["s"] = torch.rand(m, (k + 127) // 128, device="cuda") * 1e-2
        elif pair == "fp8t":
            d["s"] = torch.rand(1, device="cuda") * 1e-2
        elif pair == "fp8":
            mp = (m + 15) // 16 * 16
            d["s"] = torch.rand(m, 1, device="cuda") * 1e-2
            d["xp"] = d["x"] if mp == m else torch.randn(mp, k, device="cuda").to(torch.float8_e4m3fn)
            d["sp"] = d["s"] if mp == m else torch.rand(mp, 1, device="cuda") * 1e-2
        else:
            d["s"] = torch.randint(120, 134, (m, k // 32), dtype=torch.uint8, device="cuda")
    return d


def qjit_args(pair, act, w, out, m, n, k):
    """The launch arguments of one projection: A's scales where the pair has them."""
    sa = act.get("s") if pair in ("w8a8", "w4a8", "fp8", "mxfp8", "fp8blk", "fp8t", "w4a8c", "mxfp4") else None
    return Args(ptr(act["x"]), ptr(w["w"]), ptr(out), None, ptr(sa), ptr(w.get("s")), ptr(w.get("z")),
                m, n, k, k, k, n)


def qjit_call(q, g, pair, act, w, out, m, n, k):
    a = qjit_args(pair, act, w, out, m, n, k)
    return lambda: q.launch(g, a)


def peer_call(pair, act, w, out):
    if pair == "bf16":
        wt = w["w"].t()
        return lambda: torch.mm(act["x"], wt, out=out)
    if pair == "w4a16":
        return lambda: torch._weight_int4pack_mm(act["x"], w["packed"], 128, w["sz"])
    if pair == "w8a8":
        return lambda: torch._int_mm(act["xp"], w["wt"])
    if pair == "fp8":
        return lambda: torch._scaled_mm(act["xp"], w["wt"], scale_a=act["sp"], scale_b=w["s"],
                                        out_dtype=torch.bfloat16)
    return None


def capture(calls):
    """One CUDA graph of every call, warmed up outside the capture, then replayed thrice."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for c in calls:  # warm-up outside capture (cuBLAS workspaces, lazy module loads)
            c()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    for _ in range(3):
        graph.replay()
    return graph


def time_graph(calls, layers, reps):
    """Median µs per layer of replays of one graph of every call."""
    graph = capture(calls)
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / layers)
    del graph
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--models", default="8b,70b")
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--m", default="1,4,16,32,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-weight-mb", type=int, default=512,
                    help="layers per graph: enough for this many MB of weights")
    ap.add_argument("--quantize", action="store_true",
                    help="also time the quantized pairs with each projection's quantizer")
    ap.add_argument("--quantize-apart", action="store_true",
                    help="with --quantize: the quantizer and the GEMM as two plain launches, "
                         "not one qjit_linear_launch")
    ap.add_argument("--csv", default="")
    ap.add_argument("--png", default="")
    ap.add_argument("--plot", default="", metavar="CSV",
                    help="no GPU: draw --png from a CSV an earlier run wrote, and stop")
    o = ap.parse_args()
    if o.plot:
        return plot_csv(o.plot, o.png or os.path.splitext(o.plot)[0] + ".png")
    if torch is None:
        sys.exit("bench_step.py: the benchmark needs torch with CUDA (pip install torch); "
                 "--plot CSV draws a plot without it")
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # the primary context, current for qjit too
    q = Qjit(o.lib)
    bw = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy bandwidth "
          f"{bw / 1e12:.2f} TB/s (read + write); µs per layer, median of {o.reps} graph replays")
    print(q.records_note(torch.cuda.get_device_name()))
    print(f"{'model':5} {'pair':6} {'M':>4} {'layers':>6} {'qjit us':>9} {'peer us':>9} "
          f"{'qjit %ideal':>11} {'peer %ideal':>11} {'peer/qjit':>9} {'bf16 cuBLAS/qjit':>16}")
    rows = []
    ms = [int(x) for x in o.m.split(",")]
    for model in o.models.split(","):
        shapes = MODELS[model]
        for pair in o.pairs.split(","):
            desc, peer, wb, sb, _ = PAIRS[pair]
            g = q.get(desc)
            wbytes = sum(n * k * (wb + sb) for n, k in shapes)
            layers = max(1, min(32, -(-o.min_weight_mb * 2**20 // int(wbytes))))
            weights = [[make_weights(pair, n, k) for n, k in shapes] for _ in range(layers)]
            for m in ms:
                acts = [make_act(pair, m, k) for _, k in shapes]
                outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for n, _ in shapes]
                qcalls = [qjit_call(q, g, pair, acts[i], weights[l][i], outs[i], m, n, k)
                          for l in range(layers) for i, (n, k) in enumerate(shapes)]
                if m == ms[0]:
                    # the first graph on new weights runs slow (70B FP8 block at M = 1 on the
                    # H100: 349 µs, then 311 µs for the same M later in the run): one untimed pass
                    time_graph(qcalls, layers, 1)
                tq = time_graph(qcalls, layers, o.reps)
                tp = None
                if peer:
                    pcalls = [peer_call(pair, acts[i], weights[l][i], outs[i])
                              for l in range(layers) for i in range(len(shapes))]
                    try:
                        tp = time_graph(pcalls, layers, o.reps)
                    except Exception as e:  # noqa: BLE001 — a peer that cannot run is reported
                        print(f"  {model} {pair} M={m}: {peer} failed: {str(e).splitlines()[0][:80]}")
                ideal = layer_bytes(pair, shapes, m) / bw * 1e6
                rows.append(dict(model=model, pair=pair, m=m, layers=layers, qjit_us=tq,
                                 peer=peer or "", peer_us=tp, ideal_us=ideal,
                                 gpu=torch.cuda.get_device_name(), copy_tbps=bw / 1e12))
                if o.quantize and pair in QUANTIZERS:
                    import qjit  # the package's quantizer callables (PYTHONPATH=python)
                    quant = qjit.get_quant(QUANTIZERS[pair])
                    qc = quantized_calls(quant, q, g, pair, m, shapes, weights, outs, layers,
                                         o.quantize_apart)
                    tqq = time_graph(qc, layers, o.reps)
                    # the ideal adds the quantizers' bytes: bf16 in, the pair's codes out
                    extra = sum(m * k * 2 + m * k * PAIRS[pair][4] for _, k in shapes)
                    rows.append(dict(model=model, pair=pair + "+q", m=m, layers=layers,
                                     qjit_us=tqq, peer="", peer_us=None,
                                     ideal_us=ideal + extra / bw * 1e6,
                                     gpu=torch.cuda.get_device_name(), copy_tbps=bw / 1e12))
        # the bf16 cuBLAS step of this model at each M: the ratio's reference
        base = {r["m"]: r["peer_us"] for r in rows if r["model"] == model and r["pair"] == "bf16"}
        for r in rows:
            if r["model"] != model:
                continue
            r["vs_bf16"] = base.get(r["m"]) / r["qjit_us"] if base.get(r["m"]) else None
            r["peer_vs_bf16"] = (base.get(r["m"]) / r["peer_us"]
                                 if base.get(r["m"]) and r["peer_us"] else None)
            f = lambda v, w=9, p=1: f"{v:{w}.{p}f}" if v is not None else f"{'—':>{w}}"
            print(f"{r['model']:5} {r['pair']:6} {r['m']:4d} {r['layers']:6d} {f(r['qjit_us'])} "
                  f"{f(r['peer_us'])} {f(100 * r['ideal_us'] / r['qjit_us'], 11)} "
                  f"{f(100 * r['ideal_us'] / r['peer_us'] if r['peer_us'] else None, 11)} "
                  f"{f(r['peer_us'] / r['qjit_us'] if r['peer_us'] else None, 9, 2)} "
                  f"{f(r['vs_bf16'], 16, 2)}")
    if o.csv:
        keys = ["model", "pair", "m", "layers", "qjit_us", "peer", "peer_us", "ideal_us", "vs_bf16",
                "peer_vs_bf16", "gpu", "copy_tbps"]
        with open(o.csv, "w") as fh:
            fh.write(",".join(keys) + "\n")
            for r in rows:
                fh.write(",".join("" if r.get(k) is None else str(r.get(k)) for k in keys) + "\n")
    if o.png:
        plot(rows, o.png, bw, torch.cuda.get_device_name())
    return 0


def plot_csv(csv_path, png):
    """The plot of a CSV this tool wrote (older ones lack the gpu and copy_tbps columns)."""
    import csv
    rows = []
    with open(csv_path) as fh:
        for r in csv.DictReader(fh):
            for k in ("m", "layers"):
                r[k] = int(r[k])
            for k in ("qjit_us", "peer_us", "ideal_us"):
                r[k] = float(r[k]) if r.get(k) else None
            rows.append(r)
    gpu = rows[0].get("gpu") or "H100"
    bw = float(rows[0]["copy_tbps"]) * 1e12 if rows[0].get("copy_tbps") else None
    plot(rows, png, bw, gpu)
    print(f"{png}: {len(rows)} rows of {csv_path}")
    return 0


def plot(rows, path, bw, gpu):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({r["model"] for r in rows}, key=lambda s: int(s.rstrip("b")))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]  # 13 pairs: no colour twice
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    for ax, model in zip(axes[0], models):
        for i, pair in enumerate(pairs):
            rs = [r for r in rows if r["model"] == model and r["pair"] == pair]
            if not rs:
                continue
            c = colors[i % len(colors)]
            ax.plot([r["m"] for r in rs], [r["qjit_us"] for r in rs], "-" + "osD^v"[i % 5], color=c,
                    label=f"qjit {pair}")
            if any(r["peer_us"] for r in rs):
                ax.plot([r["m"] for r in rs if r["peer_us"]], [r["peer_us"] for r in rs if r["peer_us"]],
                        "--x", color=c, label=f"{rs[0]['peer']} ({pair})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ms = sorted({r["m"] for r in rows})
        ax.set_xticks(ms)
        ax.set_xticklabels([str(m) for m in ms])
        ax.set_xlabel("M (tokens in the batch)")
        ax.set_ylabel("µs per layer (4 projections, graph replay)")
        ax.set_title(f"Llama 3 {model.upper()} decode step, {gpu}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle("qjit auto (solid) against torch's path (dashed)" +
                 (f"; copy bandwidth {bw / 1e12:.2f} TB/s" if bw else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
