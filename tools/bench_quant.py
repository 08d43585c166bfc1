#!/usr/bin/env python3
"""bench_quant.py — qjit's quantized GEMMs against the torch peers, in the same run.

qjit is called through ctypes on libqjit.so (its public C API), on torch-allocated
buffers and torch's current stream; the peers are torch._weight_int4pack_mm (W4A16),
torch._int_mm (W8A8) and torch._scaled_mm (FP8, tensor and rowwise scales).  Each
timing is the median of --reps launches, each between its own CUDA events, after
--warmup launches; qjit and its peer alternate launch by launch.  Columns: time (µs),
GB/s of the minimum bytes (A, B, scales and D, each moved once), TFLOP/s (2·M·N·K).

    LD_LIBRARY_PATH=build python3 tools/bench_quant.py [--lib build/libqjit.so]
"""
import argparse
import ctypes
import os
import sqlite3
import statistics
import sys

try:
    import torch
except ImportError:  # drawing a plot from a CSV (bench_step.py --plot) needs no torch
    torch = None

SHAPES = [(1, 28672, 8192), (16, 28672, 8192), (64, 28672, 8192), (1024, 28672, 8192), (4096, 28672, 8192),
          (8192, 8192, 8192)]


class Args(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("a", "b", "d", "bias", "scale_a", "scale_b", "zeros_b")] + \
               [(n, ctypes.c_int64) for n in ("m", "n", "k", "lda", "ldb", "ldd")]


class LinearArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("ldx", ctypes.c_int64), ("xq", ctypes.c_void_p),
                ("xs", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("clip", ctypes.c_float),
                ("gemm", Args)]


class Qjit:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.qjit_last_error.restype = ctypes.c_char_p
        self.lib.qjit_gemm_launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(Args), ctypes.c_void_p]
        self.lib.qjit_context_get_gemm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                   ctypes.POINTER(ctypes.c_void_p)]
        self.lib.qjit_context_get_quant.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                    ctypes.POINTER(ctypes.c_void_p)]
        self.lib.qjit_linear_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.POINTER(LinearArgs), ctypes.c_void_p]

    def records_note(self, gpu, path=None):
        """A line saying how many tuning records the cache (path, or the default cache that
        the default context uses) holds for this GPU: with none, every auto handle runs the
        heuristics, and a benchmark of auto says so at its top."""
        if path is None:
            buf = ctypes.create_string_buffer(4096)
            if self.lib.qjit_cache_default_path(buf, ctypes.c_size_t(len(buf)), None) != 0:
                return f"# tuning records: no default cache ({self.lib.qjit_last_error().decode()})"
            path = buf.value.decode()
        if not os.path.exists(path):
            return f"# tuning records: none for {gpu} ({path} does not exist): auto runs the heuristics"
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            n = db.execute("SELECT count(*) FROM tuning WHERE gpu = ?", (gpu,)).fetchone()[0]
            db.close()
        except sqlite3.Error as e:
            return f"# tuning records: {path} unreadable ({e})"
        if n == 0:
            return f"# tuning records: none for {gpu} in {path}: auto runs the heuristics"
        return f"# tuning records: {n} for {gpu} in {path}"

    def get(self, text, ctx=None):
        """The handle of a descriptor, through the default context or ctx (a qjit.Context, or
        a qjit_context pointer)."""
        desc = (ctypes.c_int * 64)()  # qjit_gemm_desc is 18 ints; room to spare
        g = ctypes.c_void_p()
        got = self.lib.qjit_gemm_desc_parse(text.encode(), desc) == 0 and (
            self.lib.qjit_get_gemm(desc, ctypes.byref(g)) if ctx is None else
            self.lib.qjit_context_get_gemm(getattr(ctx, "_ptr", ctx), desc, None, ctypes.byref(g))) == 0
        if not got:
            raise RuntimeError(self.lib.qjit_last_error().decode())
        return g

    def launch(self, g, args):
        s = self.lib.qjit_gemm_launch(g, ctypes.byref(args), torch.cuda.current_stream().cuda_stream)
        if s != 0:
            raise RuntimeError(self.lib.qjit_last_error().decode())

    def get_quant(self, text):
        """The quantizer handle of a descriptor, through the default context."""
        desc = (ctypes.c_int * 16)()  # qjit_quant_desc is 6 ints
        ctx, h = ctypes.c_void_p(), ctypes.c_void_p()
        got = (self.lib.qjit_quant_desc_parse(text.encode(), desc) == 0 and
               self.lib.qjit_default_context(ctypes.byref(ctx)) == 0 and
               self.lib.qjit_context_get_quant(ctx, desc, None, ctypes.byref(h)) == 0)
        if not got:
            raise RuntimeError(self.lib.qjit_last_error().decode())
        return h

    def linear(self, qh, g, la):
        """qjit_linear_launch: the quantizer qh, then the GEMM g (LinearArgs la)."""
        s = self.lib.qjit_linear_launch(qh, g, ctypes.byref(la), torch.cuda.current_stream().cuda_stream)
        if s != 0:
            raise RuntimeError(self.lib.qjit_last_error().decode())


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def time_pair(fns, warmup, reps):
    """Median µs of each callable, alternating them launch by launch."""
    for f in fns:
        for _ in range(warmup):
            f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            times[i].append(s.elapsed_time(e) * 1e3)
    return [statistics.median(t) for t in times]


def rand_int8(shape):
    return torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda")


def row(name, shape, us, nbytes, note=""):
    m, n, k = shape
    if us is None:
        print(f"  {name:34s} {m:5d}x{n:5d}x{k:5d}  {'n/a':>9s}  {'':>8s}  {'':>8s}  {note}")
        return
    gbs = nbytes / (us * 1e-6) / 1e9
    tfl = 2.0 * m * n * k / (us * 1e-6) / 1e12
    print(f"  {name:34s} {m:5d}x{n:5d}x{k:5d}  {us:9.1f}  {gbs:8.0f}  {tfl:8.1f}  {note}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libqjit.so")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--shapes", default="", help="MxNxK,... instead of the defaults")
    ap.add_argument("--fp8-config", default="",
                    help="descriptor fields added to the fp8 tensor/rowwise/block rows, e.g. 'stages=4'")
    ap.add_argument("--w4a16-config", default="",
                    help="descriptor fields added to the W4A16 row, e.g. 'tile=16x64x128 warps=1x4'")
    o = ap.parse_args()
    if torch is None:
        sys.exit("bench_quant.py: needs torch with CUDA (pip install torch)")
    shapes = [tuple(int(x) for x in s.split("x")) for s in o.shapes.split(",")] if o.shapes else SHAPES
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # makes the primary context current for qjit
    q = Qjit(o.lib)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; median of {o.reps}; "
          f"GB/s of the minimum bytes; TFLOP/s = 2MNK/t")
    print(f"  {'kernel':34s} {'M x N x K':>17s}  {'us':>9s}  {'GB/s':>8s}  {'TFLOP/s':>8s}")

    for (m, n, k) in shapes:
        print(f"-- {m}x{n}x{k}")
        x16 = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        out16 = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

        # W4A16 g128: qjit bf16 x s4 group:128 vs torch._weight_int4pack_mm
        wq = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        sc = (torch.rand(n, k // 128, device="cuda") * 0.01 + 0.005).to(torch.bfloat16)
        nbytes = m * k * 2 + n * k // 2 + sc.numel() * 2 + m * n * 2
        args = Args(ptr(x16), ptr(wq), ptr(out16), None, None, ptr(sc), None, m, n, k, k, k, n)
        try:
            g = q.get(f"gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 {o.w4a16_config}".strip())
            fq = lambda: q.launch(g, args)
        except RuntimeError as e:
            fq, err = None, str(e).splitlines()[0][:80]
        try:
            raw = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
            packed = torch._convert_weight_to_int4pack(raw, 8)
            sz = torch.ones(k // 128, n, 2, dtype=torch.bfloat16, device="cuda")
            fp = lambda: torch._weight_int4pack_mm(x16, packed, 128, sz)
            fp()
        except Exception as e:  # noqa: BLE001 — report any peer failure and go on
            fp, perr = None, str(e).splitlines()[0][:80]
        # the weight-only wgmma kernel by name (auto keeps mma_wq until it is measured)
        try:
            gwq = q.get("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16 kernel=wgmma_wq")
            fwq = lambda: q.launch(gwq, args)
        except RuntimeError as e:
            fwq, wqerr = None, str(e).splitlines()[0][:80]
        ts = time_pair([f for f in (fq, fwq, fp) if f], o.warmup, o.reps)
        it = iter(ts)
        row("qjit W4A16 bf16 x s4 g128", (m, n, k), next(it) if fq else None, nbytes, "" if fq else err)
        row("qjit W4A16 kernel=wgmma_wq", (m, n, k), next(it) if fwq else None, nbytes, "" if fwq else wqerr)
        row("torch._weight_int4pack_mm g128", (m, n, k), next(it) if fp else None, nbytes, "" if fp else perr)

        # W8A8: qjit s8 x s8 row/col -> bf16 vs torch._int_mm (int32 out)
        a8, b8 = rand_int8((m, k)), rand_int8((n, k))
        sa = torch.rand(m, device="cuda") * 1e-3
        sb = torch.rand(n, device="cuda") * 1e-3
        nbytes = m * k + n * k + 4 * (m + n) + m * n * 2
        args8 = Args(ptr(a8), ptr(b8), ptr(out16), None, ptr(sa), ptr(sb), None, m, n, k, k, k, n)
        try:
            g8 = q.get("gemm a=s8 b=s8 sa=row sb=col out=bf16")
            fq = lambda: q.launch(g8, args8)
        except RuntimeError as e:
            fq, err = None, str(e).splitlines()[0][:80]
        # the int8 wgmma kernel by name (auto keeps mma_i8 until it is measured)
        try:
            gw = q.get("gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=wgmma_i8")
            fw = lambda: q.launch(gw, args8)
        except RuntimeError as e:
            fw, werr = None, str(e).splitlines()[0][:80]
        # ... and with TMA loads and B multicast across CTA pairs (by name, not yet measured);
        # for decode, mma_i8 with K split across a cluster (by name, not yet measured)
        try:
            gt = q.get("gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=wgmma_tma" if m > 64 else
                       "gemm a=s8 b=s8 sa=row sb=col out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8")
            ft = lambda: q.launch(gt, args8)
        except RuntimeError as e:
            ft, terr = None, str(e).splitlines()[0][:80]
        # torch._int_mm needs M > 16: smaller M is timed padded to 32 rows, and says so
        pad = "" if m > 16 else "(M padded to 32)"
        ap8 = a8 if m > 16 else rand_int8((32, k))
        try:
            bt = b8.t()
            fp = lambda: torch._int_mm(ap8, bt)
            fp()
        except Exception as e:  # noqa: BLE001
            fp, perr = None, str(e).splitlines()[0][:80]
        ts = time_pair([f for f in (fq, fw, ft, fp) if f], o.warmup, o.reps)
        it = iter(ts)
        row("qjit W8A8 s8 x s8 row/col -> bf16", (m, n, k), next(it) if fq else None, nbytes, "" if fq else err)
        row("qjit W8A8 kernel=wgmma_i8", (m, n, k), next(it) if fw else None, nbytes, "" if fw else werr)
        row("qjit W8A8 kernel=wgmma_tma" if m > 64 else "qjit W8A8 mma_i8 split=8", (m, n, k),
            next(it) if ft else None, nbytes, "" if ft else terr)
        row("torch._int_mm (int32 out)", (m, n, k), next(it) if fp else None, m * k + n * k + 4 * m * n,
            pad if fp else perr)

        # FP8 e4m3: tensor and rowwise scales vs torch._scaled_mm
        af = (torch.randn(m, k, device="cuda")).to(torch.float8_e4m3fn)
        bf = (torch.randn(n, k, device="cuda")).to(torch.float8_e4m3fn)
        one = torch.ones(1, device="cuda")
        for mode, qa, qb, tsa, tsb in (("tensor", "tensor", "tensor", one, one),
                                       ("rowwise", "row", "col", sa.view(m, 1).contiguous(),
                                        sb.view(1, n).contiguous())):
            nbytes = m * k + n * k + m * n * 2
            argsf = Args(ptr(af), ptr(bf), ptr(out16), None, ptr(tsa), ptr(tsb), None, m, n, k, k, k, n)
            try:
                gf = q.get(f"gemm a=e4m3 b=e4m3 sa={qa} sb={qb} out=bf16 {o.fp8_config}".strip())
                fq = (lambda gf=gf, argsf=argsf: q.launch(gf, argsf))
            except RuntimeError as e:
                fq, err = None, str(e).splitlines()[0][:80]
            # the TMA / multicast / overlapped-promotion kernel by name (not yet measured)
            try:
                gt = q.get(f"gemm a=e4m3 b=e4m3 sa={qa} sb={qb} out=bf16 kernel=wgmma_tma" if m > 64 else
                           f"gemm a=e4m3 b=e4m3 sa={qa} sb={qb} out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x4 stages=4 split=8")
                ft = (lambda gt=gt, argsf=argsf: q.launch(gt, argsf))
            except RuntimeError as e:
                ft, terr = None, str(e).splitlines()[0][:80]
            # torch._scaled_mm wants M a multiple of 16: smaller M is padded to 16 rows
            mp = (m + 15) // 16 * 16
            pad = "" if mp == m else f"(M padded to {mp})"
            afp = af if mp == m else torch.randn(mp, k, device="cuda").to(torch.float8_e4m3fn)
            tsap = tsa if (mp == m or tsa.numel() == 1) else torch.ones(mp, 1, device="cuda")
            try:
                fp = (lambda tsap=tsap, tsb=tsb, afp=afp: torch._scaled_mm(
                    afp, bf.t(), scale_a=tsap, scale_b=tsb, out_dtype=torch.bfloat16))
                fp()
            except Exception as e:  # noqa: BLE001
                fp, perr = None, str(e).splitlines()[0][:80]
            ts = time_pair([f for f in (fq, ft, fp) if f], o.warmup, o.reps)
            it = iter(ts)
            row(f"qjit FP8 e4m3 {mode}", (m, n, k), next(it) if fq else None, nbytes, "" if fq else err)
            row(f"qjit FP8 {mode} kernel=wgmma_tma" if m > 64 else f"qjit FP8 {mode} mma_f8 split=8", (m, n, k),
                next(it) if ft else None, nbytes, "" if ft else terr)
            row(f"torch._scaled_mm {mode}", (m, n, k), next(it) if fp else None, nbytes, pad if fp else perr)

        # pairs with no torch peer on this GPU: timed alone
        e8a = torch.randint(120, 134, (m, k // 32), dtype=torch.uint8, device="cuda")
        e8b = torch.randint(120, 134, (n, k // 32), dtype=torch.uint8, device="cuda")
        a4 = torch.randint(0, 256, (m, k // 2), dtype=torch.uint8, device="cuda")
        b4 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        sb4 = torch.rand(n, k // 128, device="cuda") * 1e-2
        kb = (k + 127) // 128
        sab = torch.rand(m, kb, device="cuda") * 1e-2
        sbb = torch.rand((n + 127) // 128, kb, device="cuda") * 1e-2
        alone = [
            ("qjit FP8 e4m3 block 1x128/128x128", f"gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 {o.fp8_config}".strip(),
             Args(ptr(af), ptr(bf), ptr(out16), None, ptr(sab), ptr(sbb), None, m, n, k, k, k, n),
             m * k + n * k + 4 * (sab.numel() + sbb.numel()) + m * n * 2),
            ("qjit FP8 block kernel=wgmma_tma", "gemm a=e4m3 b=e4m3 sa=block sb=block out=bf16 kernel=wgmma_tma",
             Args(ptr(af), ptr(bf), ptr(out16), None, ptr(sab), ptr(sbb), None, m, n, k, k, k, n),
             m * k + n * k + 4 * (sab.numel() + sbb.numel()) + m * n * 2),
            ("qjit W8A16 bf16 x s8 col", "gemm a=bf16 b=s8 sb=col out=bf16",
             Args(ptr(x16), ptr(b8), ptr(out16), None, None, ptr(sb), None, m, n, k, k, k, n),
             m * k * 2 + n * k + 4 * n + m * n * 2),
            ("qjit W4A8 s8 x s4 row/group128", "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16",
             Args(ptr(a8), ptr(wq), ptr(out16), None, ptr(sa), ptr(sb4), None, m, n, k, k, k, n),
             m * k + n * k // 2 + sb4.numel() * 4 + m * n * 2),
            ("qjit W4A8 kernel=wgmma_i8", "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=wgmma_i8",
             Args(ptr(a8), ptr(wq), ptr(out16), None, ptr(sa), ptr(sb4), None, m, n, k, k, k, n),
             m * k + n * k // 2 + sb4.numel() * 4 + m * n * 2),
            ("qjit W4A8 g128 mma_i8 split=8", "gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out=bf16 kernel=mma_i8 tile=16x128x128 warps=1x4 stages=4 split=8",
             Args(ptr(a8), ptr(wq), ptr(out16), None, ptr(sa), ptr(sb4), None, m, n, k, k, k, n),
             m * k + n * k // 2 + sb4.numel() * 4 + m * n * 2),
            ("qjit MXFP8 mma_f8 split=8", "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=mma_f8 tile=16x128x128 warps=1x4 stages=4 split=8",
             Args(ptr(af), ptr(bf), ptr(out16), None, ptr(e8a), ptr(e8b), None, m, n, k, k, k, n),
             m * k + n * k + (m + n) * k // 32 + m * n * 2),
            ("qjit W4A8 col kernel=wgmma_i8", "gemm a=s8 b=s4 sa=row sb=col out=bf16 kernel=wgmma_i8",
             Args(ptr(a8), ptr(wq), ptr(out16), None, ptr(sa), ptr(sb), None, m, n, k, k, k, n),
             m * k + n * k // 2 + 4 * (m + n) + m * n * 2),
            ("qjit MXFP8 e4m3 mx", "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16",
             Args(ptr(af), ptr(bf), ptr(out16), None, ptr(e8a), ptr(e8b), None, m, n, k, k, k, n),
             m * k + n * k + (m + n) * k // 32 + m * n * 2),
            ("qjit MXFP8 kernel=wgmma_mx", "gemm a=e4m3 b=e4m3 sa=mx sb=mx out=bf16 kernel=wgmma_mx",
             Args(ptr(af), ptr(bf), ptr(out16), None, ptr(e8a), ptr(e8b), None, m, n, k, k, k, n),
             m * k + n * k + (m + n) * k // 32 + m * n * 2),
            ("qjit MXFP4 e2m1 mx", "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16",
             Args(ptr(a4), ptr(b4), ptr(out16), None, ptr(e8a), ptr(e8b), None, m, n, k, k, k, n),
             (m + n) * k // 2 + (m + n) * k // 32 + m * n * 2),
            ("qjit MXFP4 kernel=wgmma_mx", "gemm a=e2m1 b=e2m1 sa=mx sb=mx out=bf16 kernel=wgmma_mx",
             Args(ptr(a4), ptr(b4), ptr(out16), None, ptr(e8a), ptr(e8b), None, m, n, k, k, k, n),
             (m + n) * k // 2 + (m + n) * k // 32 + m * n * 2),
            ("qjit bf16 x e2m1 mx", "gemm a=bf16 b=e2m1 sb=mx out=bf16",
             Args(ptr(x16), ptr(b4), ptr(out16), None, None, ptr(e8b), None, m, n, k, k, k, n),
             m * k * 2 + n * k // 2 + n * k // 32 + m * n * 2),
        ]
        for name, text, a, nbytes in alone:
            if "split=" in name and m > 64:
                continue  # the decode tiles with K split across a cluster: decode shapes only
            try:
                g = q.get(text)
                (us,) = time_pair([lambda g=g, a=a: q.launch(g, a)], o.warmup, o.reps)
                row(name, (m, n, k), us, nbytes)
            except RuntimeError as e:
                row(name, (m, n, k), None, nbytes, str(e).splitlines()[0][:80])
        torch.cuda.synchronize()
        del x16, out16, wq, a8, b8, af, bf
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
