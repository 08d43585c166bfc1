#!/usr/bin/env python3
"""bench_quantize.py — qjit's activation quantization kernels on the GPU, in one run:

1. the copy bandwidth of this GPU (torch copy_, read + write), the ideal;
2. every quantization mode at 8192x8192 and 4096x14336 bf16: qjit's time, its bandwidth
   (input + q + scales, each moved once) as a share of the copy bandwidth, and the same
   quantization written in PyTorch and compiled with torch.compile, timed alike;
3. the column-wise MX kernel on 3-D expert weights (E, N, K) for E in 1 … 256 and (N, K) in
   (8192, 5120), (2048, 7168), one launch for all experts;
4. a quantized linear layer (quantize -> GEMM) against the GEMM alone at M = 1..16.

Every time is a CUDA-graph replay: a graph of several launches, each on its own copy of the
input, so that the inputs together exceed the L2 (50 MB on the H100, 60 on the H200) four
times over and no host-side cost (Python, the
ctypes call, torch.compile's guards) is inside the timed interval.  The figure is the median
over --reps replays (CUDA events) after --warmup, divided by the launches in the graph.

    PYTHONPATH=python QJIT_LIBRARY=build/libqjit.so python3 tools/bench_quantize.py [--csv F]
"""
import argparse
import math
import statistics

import torch

import qjit


def l2_bytes():
    """The GPU's L2 (torch's device properties), 50 MB where torch does not say."""
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 << 20


def median_us(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0)
    return statistics.median(times)


def graph_us(fn, launches, warmup, reps):
    """Median µs of one fn() as replays of a graph of `launches` calls."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(launches):
            fn()
    return median_us(g.replay, warmup, reps) / launches


def rotated_us(fn, inputs, warmup, reps):
    """Median µs of fn(x) as graph replays, x cycling through `inputs` (one launch each, at
    least 4, or 2 for inputs over 1 GiB): the graph's outputs are allocated once, in its
    pool."""
    big = inputs[0].numel() * inputs[0].element_size() > (1 << 30)
    launches = max(2 if big else 4, len(inputs))
    for x in inputs[:2]:
        fn(x)  # compile / warm up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(launches):
            fn(inputs[i % len(inputs)])
    us = median_us(g.replay, warmup, reps) / launches
    del g
    torch.cuda.empty_cache()
    return us


def copies(x, out_bytes):
    """x and enough copies of it that the inputs exceed L2 by 4x, within the free memory
    (the graph's outputs, out_bytes each, counted)."""
    nbytes = x.numel() * x.element_size()
    want = max(1, math.ceil(4 * l2_bytes() / nbytes))
    fit = int(torch.cuda.mem_get_info()[0] * 0.5 // (nbytes + out_bytes))
    n = max(1, min(want, fit))
    return [x] + [x.clone() for _ in range(n - 1)]


def copy_gbps(warmup, reps):
    src = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src), warmup, reps)
    return 2 * src.numel() / us / 1e3  # read + write, GB/s


# ---------------------------------------------------------------- PyTorch peers
def fresh_compile(f):
    """torch.compile(f) with dynamo's caches cleared first: every peer here shares one code
    object, so without the reset its guards pile up across modes and shapes until dynamo's
    recompile limit sends the later ones to eager PyTorch."""
    torch._dynamo.reset()
    return torch.compile(f)


def torch_quant(out, scale, clip=1.0):
    qmax = {"s8": 127.0, "e4m3": 448.0}[out]

    def f(x):
        xf = x.float()
        if scale == "row":
            amax = xf.abs().amax(dim=-1, keepdim=True)
        elif scale == "tensor":
            amax = xf.abs().amax()
        else:  # block 1x128
            xf = xf.view(x.shape[0], -1, 128)
            amax = xf.abs().amax(dim=-1, keepdim=True)
        s = amax * clip / qmax
        t = xf / s
        if out == "s8":
            q = torch.round(t).clamp(-128, 127).to(torch.int8)
        else:
            q = t.clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.view(x.shape), s
    return fresh_compile(f)


def torch_mx(elem, cols):
    """MXFP8 with the rceil rule in PyTorch (e4m3 only: torch has no e2m1 type)."""
    def f(x):
        xf = x.float()
        if cols:
            xf = xf.transpose(-1, -2)
        blocks = xf.reshape(*xf.shape[:-1], -1, 32)
        amax = blocks.abs().amax(dim=-1, keepdim=True)
        e = torch.ceil(torch.log2(amax / 448.0)).clamp(-127, 127)
        q = (blocks * torch.exp2(-e)).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.reshape(xf.shape), (e + 127).to(torch.uint8)
    return fresh_compile(f)


def layer_table(a, rows):
    """A quantized linear layer (quantize, then GEMM, in one graph) against its GEMM alone."""
    print("\nquantized linear layer (W8A8, 28672x8192) vs its GEMM alone, CUDA-graph replays")
    print(f"{'M':>4} {'quantize us':>12} {'GEMM us':>9} {'quantize+GEMM us':>17} {'ratio':>7}")
    n, k = 28672, 8192
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
    ws = torch.rand(n, device="cuda") * 1e-2
    quant = qjit.get_quant("quant in=bf16 out=s8 scale=row")
    # auto's GEMM, then each configuration --layer-config names (the GEMM's own time and
    # the layer's both under that configuration)
    for cfg in [""] + [c.strip() for c in a.layer_config.split(";") if c.strip()]:
        try:
            gemm = qjit.get_gemm(("gemm a=s8 b=s8 sa=row sb=col out=bf16 " + cfg).strip())
        except RuntimeError as e:  # a configuration this pair or shape refuses: the next one
            print(f"  GEMM {cfg}: {str(e).splitlines()[0][:100]}")
            continue
        if cfg:
            print(f"  GEMM {cfg}")
        for m in (1, 2, 4, 8, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xq, xs = quant(x)
            t_quant = graph_us(lambda: quant(x), 20, a.warmup, a.reps)
            t_gemm = graph_us(lambda: gemm(xq, w, scale_a=xs, scale_b=ws), 20, a.warmup, a.reps)
            t_layer = graph_us(lambda: qjit.ops.quant_linear(quant, gemm, x, w, scale_b=ws), 20,
                               a.warmup, a.reps)
            print(f"{m:4d} {t_quant:12.1f} {t_gemm:9.1f} {t_layer:17.1f} {t_layer / t_gemm:7.3f}")
            rows.append((f"{m}x{n}x{k}", "layer W8A8 s8 row" + (" " + cfg if cfg else ""), 1,
                         t_layer, t_layer / t_gemm, t_gemm, ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--skip-rows", action="store_true", help="no row-wise tables")
    ap.add_argument("--skip-3d", action="store_true")
    ap.add_argument("--skip-layer", action="store_true")
    ap.add_argument("--layer-config", default="",
                    help="';'-separated GEMM configurations (kernel=... tile=...) the layer "
                         "table also times")
    ap.add_argument("--csv", help="also write every row to this CSV file")
    a = ap.parse_args()
    torch.manual_seed(0)
    bw = copy_gbps(a.warmup, a.reps)
    rows = []
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {bw:.0f} GB/s (read + write), "
          f"qjit {qjit.version()}, torch {torch.__version__}")

    def share(nbytes, us):
        return nbytes / us / 1e3 / bw

    modes = [("s8", "row", ""), ("s4", "row", ""), ("e4m3", "row", ""), ("s8", "tensor", ""),
             ("e4m3", "tensor", ""), ("e4m3", "block", ""), ("e4m3", "mx", "rule=floor"),
             ("e4m3", "mx", "rule=rceil"), ("e2m1", "mx", "rule=rceil")]
    for m, k in () if a.skip_rows else ((8192, 8192), (4096, 14336)):
        print(f"\n{m}x{k} bf16 -> q, scales (graph replays, inputs rotated past L2)")
        print(f"{'mode':44} {'qjit us':>9} {'share':>7} {'torch.compile us':>17} {'share':>7}")
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for out, scale, extra in modes:
            desc = f"quant in=bf16 out={out} scale={scale} {extra}".strip()
            q = qjit.get_quant(desc)
            qs, _, ss, sdt = q.shapes(m, k)
            sbytes = math.prod(ss) * (4 if sdt == torch.float32 else 1)
            nbytes = x.numel() * 2 + qs[0] * qs[1] + sbytes
            xs = copies(x, qs[0] * qs[1] + sbytes)
            us = rotated_us(q, xs, a.warmup, a.reps)
            f = None
            if scale in ("row", "tensor", "block") and out in ("s8", "e4m3"):
                f = torch_quant(out, scale)
            elif scale == "mx" and out == "e4m3" and "rceil" in extra:
                f = torch_mx("e4m3", False)
            pus = rotated_us(f, xs, a.warmup, a.reps) if f else None
            del xs
            peer = f"{pus:17.1f} {share(nbytes, pus):7.1%}" if pus else ""
            print(f"{desc:44} {us:9.1f} {share(nbytes, us):7.1%} {peer}", flush=True)
            rows.append((f"{m}x{k}", desc, 1, us, share(nbytes, us), pus or "",
                         share(nbytes, pus) if pus else ""))

    if not a.skip_3d:
        print("\n3-D column-wise MX (E, N, K) bf16 -> q [E][K][N], scales [E][K][N/32], rceil")
        print(f"{'E':>4} {'N x K':>12} {'qjit us':>10} {'share':>7} {'torch.compile us':>17} {'share':>7}")
        desc = "quant in=bf16 out=e4m3 scale=mx rule=rceil layout=cols"
        q = qjit.get_quant(desc)
        f = torch_mx("e4m3", True)
        for n, k in ((8192, 5120), (2048, 7168)):
            for e in (1, 2, 8, 32, 128, 256):
                out_bytes = e * n * k + e * n * k // 32
                if e * n * k * 2 + 2 * out_bytes > torch.cuda.mem_get_info()[0] * 0.8:
                    print(f"{e:4d} {n:>5}x{k:<6} (does not fit)")
                    continue
                w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
                nbytes = w.numel() * 2 + out_bytes
                ws = copies(w, out_bytes)
                reps = max(5, a.reps // 3)
                us = rotated_us(q, ws, 2, reps)
                # torch.compile's kernel holds f32 copies of its input (about 10 bytes a
                # value in all): where those would not fit, it is not tried, since running
                # out of memory inside a graph capture can leave the stream unusable
                pus = None
                if w.numel() * 10 * len(ws) > torch.cuda.mem_get_info()[0] * 0.6:
                    peer = "  (torch.compile: not enough memory)"
                else:
                    try:
                        pus = rotated_us(f, ws, 2, reps)
                        peer = f"{pus:17.1f} {share(nbytes, pus):7.1%}"
                    except Exception as ex:  # noqa: BLE001  (out of memory in the peer)
                        peer = f"  ({type(ex).__name__})"
                print(f"{e:4d} {n:>5}x{k:<6} {us:10.1f} {share(nbytes, us):7.1%} {peer}", flush=True)
                rows.append((f"{e}x{n}x{k}", desc, e, us, share(nbytes, us), pus or "",
                             share(nbytes, pus) if pus else ""))
                del w, ws
                torch.cuda.empty_cache()

    if not a.skip_layer:
        layer_table(a, rows)

    if a.csv:
        with open(a.csv, "w") as fh:
            fh.write("shape,mode,e,qjit_us,qjit_share_or_ratio,peer_us,peer_share\n")
            for r in rows:
                fh.write(",".join(str(v) for v in r) + "\n")

if __name__ == "__main__":
    main()
