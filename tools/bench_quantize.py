#!/usr/bin/env python3
"""bench_quantize.py — qjit's activation quantization kernels on the GPU, in one run:

1. the copy bandwidth of this GPU (torch copy_, read + write), the ideal;
2. every quantization mode at 8192x8192 bf16: qjit's time, its bandwidth (input + q +
   scales, each moved once) as a share of the copy bandwidth, and the same quantization
   written in PyTorch and compiled with torch.compile, timed alike;
3. the column-wise MX kernel on 3-D expert weights (E, N, K) for E in 1, 2, 8, 32, 128
   and (N, K) in (8192, 5120), (2048, 7168), one launch for all experts;
4. a quantized linear layer (quantize -> GEMM) against the GEMM alone at M = 1..16, both
   as CUDA-graph replays of repeated launches (the way decode runs).

Each time is the median over --reps timed repetitions (CUDA events) after --warmup.

    PYTHONPATH=python QJIT_LIBRARY=build/libqjit.so python3 tools/bench_quantize.py
"""
import argparse
import statistics

import torch

import qjit


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


def copy_gbps(warmup, reps):
    src = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src), warmup, reps)
    return 2 * src.numel() / us / 1e3  # read + write, GB/s


# ---------------------------------------------------------------- PyTorch peers
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
    return torch.compile(f)


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
    return torch.compile(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--skip-3d", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    bw = copy_gbps(a.warmup, a.reps)
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {bw:.0f} GB/s (read + write), "
          f"qjit {qjit.version()}, torch {torch.__version__}")

    print("\n8192x8192 bf16 -> q, scales")
    print(f"{'mode':44} {'qjit us':>9} {'share':>7} {'torch.compile us':>17} {'share':>7}")
    m = k = 8192
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    modes = [("s8", "row", ""), ("s4", "row", ""), ("e4m3", "row", ""), ("s8", "tensor", ""),
             ("e4m3", "tensor", ""), ("e4m3", "block", ""), ("e4m3", "mx", "rule=floor"),
             ("e4m3", "mx", "rule=rceil"), ("e2m1", "mx", "rule=rceil")]
    for out, scale, extra in modes:
        desc = f"quant in=bf16 out={out} scale={scale} {extra}".strip()
        q = qjit.get_quant(desc)
        qs, _, ss, sdt = q.shapes(m, k)
        nbytes = x.numel() * 2 + qs[0] * qs[1] * 1 + \
            (ss[0] * (ss[1] if len(ss) > 1 else 1)) * (4 if sdt == torch.float32 else 1)
        us = median_us(lambda: q(x), a.warmup, a.reps)
        peer = ""
        if scale in ("row", "tensor", "block") and out in ("s8", "e4m3"):
            f = torch_quant(out, scale)
            pus = median_us(lambda: f(x), a.warmup, a.reps)
            peer = f"{pus:17.1f} {nbytes / pus / 1e3 / bw:7.1%}"
        elif scale == "mx" and out == "e4m3" and "rceil" in extra:
            f = torch_mx("e4m3", False)
            pus = median_us(lambda: f(x), a.warmup, a.reps)
            peer = f"{pus:17.1f} {nbytes / pus / 1e3 / bw:7.1%}"
        print(f"{desc:44} {us:9.1f} {nbytes / us / 1e3 / bw:7.1%} {peer}")

    if not a.skip_3d:
        print("\n3-D column-wise MX (E, N, K) bf16 -> q [E][K][N], scales [E][K][N/32], rceil")
        print(f"{'E':>4} {'N x K':>12} {'qjit us':>10} {'share':>7} {'torch.compile us':>17} {'share':>7}")
        q = qjit.get_quant("quant in=bf16 out=e4m3 scale=mx rule=rceil layout=cols")
        f = torch_mx("e4m3", True)
        for n, k in ((8192, 5120), (2048, 7168)):
            for e in (1, 2, 8, 32, 128):
                if e * n * k * 3 > torch.cuda.mem_get_info()[0] * 0.8:
                    print(f"{e:4d} {n:>5}x{k:<6} (does not fit)")
                    continue
                w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
                nbytes = w.numel() * 2 + w.numel() + w.numel() // 32
                us = median_us(lambda: q(w), 2, max(5, a.reps // 3))
                try:
                    pus = median_us(lambda: f(w), 2, max(5, a.reps // 3))
                    peer = f"{pus:17.1f} {nbytes / pus / 1e3 / bw:7.1%}"
                except Exception as ex:  # noqa: BLE001  (out of memory in the peer)
                    peer = f"  ({type(ex).__name__})"
                print(f"{e:4d} {n:>5}x{k:<6} {us:10.1f} {nbytes / us / 1e3 / bw:7.1%} {peer}")
                del w
                torch.cuda.empty_cache()

    print("\nquantized linear layer (W8A8, 28672x8192) vs its GEMM alone, CUDA-graph replays")
    print(f"{'M':>4} {'GEMM us':>9} {'quantize+GEMM us':>17} {'ratio':>7}")
    n, k = 28672, 8192
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
    ws = torch.rand(n, device="cuda") * 1e-2
    quant = qjit.get_quant("quant in=bf16 out=s8 scale=row")
    gemm = qjit.get_gemm("gemm a=s8 b=s8 sa=row sb=col out=bf16")
    for m in (1, 2, 4, 8, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = quant(x)
        t_gemm = graph_us(lambda: gemm(xq, w, scale_a=xs, scale_b=ws), 20, a.warmup, a.reps)
        t_layer = graph_us(lambda: qjit.ops.quant_linear(quant, gemm, x, w, scale_b=ws), 20,
                           a.warmup, a.reps)
        print(f"{m:4d} {t_gemm:9.1f} {t_layer:17.1f} {t_layer / t_gemm:7.3f}")


if __name__ == "__main__":
    main()
