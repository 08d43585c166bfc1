#!/usr/bin/env python3
"""bench_peers.py — times qjit's PyTorch peers (DESIGN.md §7) with qjit-bench's method:
CUDA events around each call, inputs rotated over buffer sets larger than twice the L2,
median of the reps.  Writes qjit-bench's CSV columns (section = peer) with --csv."""
import argparse
import csv
import statistics
import sys

try:
    import torch
except ImportError:
    sys.exit("bench_peers.py: PyTorch is not installed")


def sets_for(bytes_per_set, l2):
    """Enough copies of the inputs that they span at least twice the L2."""
    return max(1, min(64, -(-2 * l2 // max(1, bytes_per_set))))


def time_calls(fns, reps, warmup):
    """Median µs of one call; call i uses fns[i % len(fns)]."""
    for i in range(warmup):
        fns[i % len(fns)]()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for i, (a, b) in enumerate(ev):
        a.record()
        fns[i % len(fns)]()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in ev)


def rand(shape, dtype):
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)


def peer_matmul(m, n, k, dtype, l2):
    sets = sets_for((m * k + n * k + m * n) * 2, l2)
    bufs = [(rand((m, k), dtype), rand((n, k), dtype)) for _ in range(sets)]
    return [lambda a=a, w=w: torch.matmul(a, w.t()) for a, w in bufs]


def peer_scaled_mm(m, n, k, l2):
    sets = sets_for(m * k + n * k + m * n * 2, l2)
    bufs = []
    for _ in range(sets):
        a = rand((m, k), torch.float32).to(torch.float8_e4m3fn)
        w = rand((n, k), torch.float32).to(torch.float8_e4m3fn)
        sa = torch.rand((m, 1), device="cuda") + 0.5
        sw = torch.rand((1, n), device="cuda") + 0.5
        bufs.append((a, w, sa, sw))
    return [lambda a=a, w=w, sa=sa, sw=sw: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw,
                                                            out_dtype=torch.bfloat16)
            for a, w, sa, sw in bufs]


def peer_int_mm(m, n, k, l2):
    sets = sets_for(m * k + n * k + m * n * 4, l2)
    bufs = [(torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8),
             torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8))
            for _ in range(sets)]
    return [lambda a=a, w=w: torch._int_mm(a, w.t()) for a, w in bufs]


def peer_w4a16(m, n, k, group, l2):
    sets = sets_for(m * k * 2 + n * k // 2 + n * (k // group) * 4 + m * n * 2, l2)
    bufs = []
    for _ in range(sets):
        a = rand((m, k), torch.bfloat16)
        w = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8)
        wp = torch._convert_weight_to_int4pack(w, 8)
        sz = torch.empty((k // group, n, 2), device="cuda", dtype=torch.bfloat16)
        sz[..., 0] = torch.rand((k // group, n), device="cuda") * 0.01 + 0.001
        sz[..., 1] = 0
        bufs.append((a, wp, sz))
    return [lambda a=a, wp=wp, sz=sz: torch._weight_int4pack_mm(a, wp, group, sz)
            for a, wp, sz in bufs]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_peers.py: no CUDA device visible", file=sys.stderr)
        return 2
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20)
    print(f"bench_peers.py: torch {torch.__version__}, {prop.name}, L2 {l2 >> 20} MiB")

    out = csv.writer(open(args.csv, "w", newline="")) if args.csv else None
    if out:
        out.writerow("section,run,dtype,m,n,k,item,metric,value,unit".split(","))

    def emit(run, dtype, m, n, k, item, metric, value, unit):
        if out:
            out.writerow(["peer", run, dtype, m, n, k, item, metric, f"{value:.9g}", unit])

    bf, f16 = torch.bfloat16, torch.float16
    mm, fp8, i8 = "torch.matmul", "torch._scaled_mm", "torch._int_mm"
    w4 = "torch._weight_int4pack_mm"
    cases = [  # run, dtype, M, N, K, peer, make(m, n, k)
        ("matmul", "bf16", 4096, 4096, 4096, mm, lambda m, n, k: peer_matmul(m, n, k, bf, l2)),
        ("matmul", "f16", 4096, 4096, 4096, mm, lambda m, n, k: peer_matmul(m, n, k, f16, l2)),
        ("matmul", "bf16", 8192, 8192, 8192, mm, lambda m, n, k: peer_matmul(m, n, k, bf, l2)),
        ("matmul", "f16", 8192, 8192, 8192, mm, lambda m, n, k: peer_matmul(m, n, k, f16, l2)),
        ("matmul", "bf16", 16, 8192, 8192, mm, lambda m, n, k: peer_matmul(m, n, k, bf, l2)),
        ("matmul", "f16", 16, 8192, 8192, mm, lambda m, n, k: peer_matmul(m, n, k, f16, l2)),
        ("matmul", "bf16", 1, 28672, 8192, mm, lambda m, n, k: peer_matmul(m, n, k, bf, l2)),
        ("fp8_row", "e4m3", 8192, 8192, 8192, fp8, lambda m, n, k: peer_scaled_mm(m, n, k, l2)),
        ("fp8_row", "e4m3", 16, 28672, 8192, fp8, lambda m, n, k: peer_scaled_mm(m, n, k, l2)),
        ("int8", "s8", 8192, 8192, 8192, i8, lambda m, n, k: peer_int_mm(m, n, k, l2)),
        ("w4a16_g128", "bf16xu4", 1, 28672, 8192, w4,
         lambda m, n, k: peer_w4a16(m, n, k, 128, l2)),
        ("w4a16_g128", "bf16xu4", 16, 28672, 8192, w4,
         lambda m, n, k: peer_w4a16(m, n, k, 128, l2)),
    ]
    print(f"  {'op':<11} {'dtype':<8} {'M x N x K':<18} {'us':>10} {'TFLOP/s':>9}  peer")
    for run, dt, m, n, k, item, make in cases:
        shape = f"{m}x{n}x{k}"
        try:
            us = time_calls(make(m, n, k), args.reps, args.warmup)
        except Exception as e:  # an op missing from this torch build is reported, not fatal
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"  {run:<11} {dt:<8} {shape:<18} {'n/a':>10} {'':>9}  {item}: {first}")
            emit(run, dt, m, n, k, f"{item} n/a: {first}", "us", float("nan"), "us")
            continue
        finally:
            torch.cuda.empty_cache()
        tf = 2.0 * m * n * k / (us * 1e-6) / 1e12
        print(f"  {run:<11} {dt:<8} {shape:<18} {us:>10.1f} {tf:>9.1f}  {item}")
        emit(run, dt, m, n, k, item, "us", us, "us")
        emit(run, dt, m, n, k, item, "tflops", tf, "TFLOP/s")

    # device copy: the bandwidth that memory-bound shapes are judged against
    n = (2 << 30) // 4
    src = torch.empty(n, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    us = time_calls([lambda: dst.copy_(src)], max(10, args.reps // 5), 3)
    tbps = 2 * n * 4 / (us * 1e-6) / 1e12
    print(f"  {'copy':<11} {'f32':<8} {'2 GiB':<18} {us:>10.1f} {'':>9}  "
          f"{tbps:.2f} TB/s read+write")
    emit("copy", "f32", "", "", "", "Tensor.copy_ 2 GiB", "tbps", tbps, "TB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
