"""qjit on torch CUDA tensors: Gemm (qjit.get_gemm) and the torch.library op qjit::gemm.

Every argument is checked before anything runs: device (all on one CUDA device), dtype
against the descriptor, shape ([M, K] A, [N, K] B, [M, N] out; 4-bit operands as uint8
or int8 [rows, K/2], two values a byte), rows contiguous, and each scale's shape for its
mode.  The launch goes on torch's current stream of the tensors' device, so it is
captured by torch.cuda.graph like any other kernel; the kernels of a device are got at
the first call on it (get them before capturing: a miss during capture is refused with
QJIT_ERROR_CAPTURING rather than breaking the capture).
"""
import ctypes
import threading

import torch

from . import Desc, QjitError, QuantDesc, _check, _ctx, _desc, _lib, _variants_of
from ._lib import lib

_DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "s8": torch.int8}
for _name, _attr in (("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")):
    if hasattr(torch, _attr):
        _DT[_name] = getattr(torch, _attr)
_PACKED = ("s4", "u4", "e2m1")
_E8M0 = tuple(getattr(torch, n) for n in ("uint8", "float8_e8m0fnu") if hasattr(torch, n))


def _bad(msg):
    return QjitError(_lib.INVALID_ARGUMENT, msg)


def _dtypes(t):
    if t in _PACKED:
        return (torch.uint8, torch.int8)
    if t == "e8m0":
        return _E8M0
    if t not in _DT:
        raise _bad(f"dtype {t} has no torch dtype in this torch build")
    return (_DT[t],)


def _names(dts):
    return " or ".join(str(d).replace("torch.", "") for d in dts)


def _tensor(x, name, device):
    if not isinstance(x, torch.Tensor):
        raise _bad(f"argument '{name}': expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise _bad(f"argument '{name}' is on {x.device}; qjit runs on CUDA tensors")
    if device is not None and x.device != device:
        raise _bad(f"argument '{name}' is on {x.device}, the others on {device}")
    return x


def _matrix(x, name, device, dtype, rows, cols):
    """A 2-D operand of the descriptor's dtype: its row stride in elements (4-bit: values)."""
    _tensor(x, name, device)
    dts = _dtypes(dtype)
    if x.dtype not in dts:
        raise _bad(f"argument '{name}': dtype {_names((x.dtype,))}, the descriptor's {dtype} "
                   f"needs {_names(dts)}")
    per = 2 if dtype in _PACKED else 1
    if x.dim() != 2 or (rows is not None and x.shape[0] != rows) or \
       (cols is not None and x.shape[1] * per != cols):
        shape = f"[{rows}, {cols // per if cols is not None else 'K'}]"
        raise _bad(f"argument '{name}': shape {list(x.shape)}, expected {shape}"
                   + (" (4-bit: two values a byte along K)" if per == 2 else ""))
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise _bad(f"argument '{name}': its rows are not contiguous (stride {list(x.stride())})")
    return (x.stride(0) if x.shape[0] > 1 else x.shape[1]) * per


def _vector(x, name, device, dtypes, shape):
    _tensor(x, name, device)
    if x.dtype not in dtypes:
        raise _bad(f"argument '{name}': dtype {_names((x.dtype,))}, expected {_names(dtypes)}")
    if tuple(x.shape) != tuple(shape) and not (len(shape) == 1 and x.numel() == shape[0]
                                               and x.is_contiguous()):
        raise _bad(f"argument '{name}': shape {list(x.shape)}, expected {list(shape)}")
    if not x.is_contiguous():
        raise _bad(f"argument '{name}' is not contiguous")


def _scale(x, name, device, d, side, m, n, k):
    mode = d.sa if side == "a" else d.sb
    if mode == "none":
        if x is not None:
            raise _bad(f"argument '{name}' is given but the descriptor has s{side}=none")
        return None
    if x is None:
        raise _bad(f"argument '{name}' is missing: the descriptor has s{side}={mode}")
    rows = m if side == "a" else n
    f32 = (torch.float32,)
    if mode == "tensor":
        _vector(x, name, device, f32, (1,))
    elif mode in ("row", "col"):
        _vector(x, name, device, f32, (rows,))
    elif mode == "group":
        _vector(x, name, device, _dtypes(d.group_scale), (n, k // d.group))
    elif mode == "block":
        kb = (k + 127) // 128
        _vector(x, name, device, f32, (m, kb) if side == "a" else ((n + 127) // 128, kb))
    elif mode == "mx":
        _vector(x, name, device, _E8M0, (rows, k // 32))
    return x


def _ptr(x):
    return ctypes.c_void_p(x.data_ptr()) if x is not None else None


class _PerDevice:
    """A descriptor's C handles, one per CUDA device (qjit handles belong to a CUDA
    context), got at first use on each device; _get is the library's get call."""

    def __init__(self, desc, ctx, get):
        self.desc, self.ctx, self._get = desc, ctx, get
        self._handles = {}
        self._lock = threading.Lock()

    def handle(self, device=None, stream=None):
        """The C handle for a CUDA device (default: the current one).  `stream` is the
        one that may be capturing (default: the device's current stream)."""
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        with self._lock:
            h = self._handles.get(dev.index)
        if h is not None:
            return h
        with torch.cuda.device(dev):  # its primary context current on this thread
            if stream is None:
                stream = torch.cuda.current_stream(dev).cuda_stream
            h = ctypes.c_void_p()
            _check(self._get(_ctx(self.ctx), self.desc._c, stream, ctypes.byref(h)))
        with self._lock:
            return self._handles.setdefault(dev.index, h)


class Gemm(_PerDevice):
    """A GEMM of one descriptor on torch tensors; kernels per CUDA device, got on first use."""

    def __init__(self, desc, ctx=None):
        super().__init__(_desc(desc).validate(), ctx, lib.qjit_context_get_gemm)

    def __repr__(self):
        return f"qjit.Gemm({str(self.desc)!r})"

    def info(self, device=None):
        i = _lib.GemmInfo()
        _check(lib.qjit_gemm_get_info(self.handle(device), i))
        return {"desc": Desc._of(i.desc), "threads": i.threads, "shared_bytes": i.shared_bytes,
                "registers": i.registers, "k_multiple": i.k_multiple,
                "ld_multiple": i.ld_multiple, "ptr_align": i.ptr_align, "variants": i.variants}

    def variants(self, device=None):
        h = self.handle(device)
        n = ctypes.c_size_t(0)
        _check(lib.qjit_gemm_get_variants(h, None, 0, ctypes.byref(n)))
        out = (_lib.GemmVariant * max(1, n.value))()
        _check(lib.qjit_gemm_get_variants(h, out, n.value, ctypes.byref(n)))
        return _variants_of(out, n.value)

    def choose(self, m, n, k, device=None):
        v = _lib.GemmVariant()
        _check(lib.qjit_gemm_choose(self.handle(device), m, n, k, v))
        return _variants_of([v], 1)[0]

    def __call__(self, a, b, out=None, bias=None, scale_a=None, scale_b=None, zeros_b=None):
        args, out, lead, n, dev = self._args(a, b, out, bias, scale_a, scale_b, zeros_b)
        stream = torch.cuda.current_stream(dev).cuda_stream
        h = self.handle(dev, stream)
        with torch.cuda.device(dev):
            _check(lib.qjit_gemm_launch(h, args, stream))
        return out.view(lead + (n,)) if len(lead) != 1 else out

    def _args(self, a, b, out, bias, scale_a, scale_b, zeros_b):
        """The launch's GemmArgs with every argument checked, the output (made where out is
        None), the activations' leading shape, N and the device."""
        d = self.desc
        _tensor(a, "a", None)
        dev = a.device
        lead = tuple(a.shape[:-1])
        if a.dim() != 2:  # [..., K] activations: rows must flatten without a copy
            if a.dim() < 2:
                raise _bad(f"argument 'a': shape {list(a.shape)}, expected [M, K] or [..., K]")
            try:
                a = a.view(-1, a.shape[-1])
            except RuntimeError:
                raise _bad(f"argument 'a': shape {list(a.shape)} with strides {list(a.stride())} "
                           "does not flatten to [M, K] without a copy") from None
        m = a.shape[0]
        k = a.shape[1] * (2 if d.a in _PACKED else 1)
        lda = _matrix(a, "a", dev, d.a, m, k)
        _tensor(b, "b", dev)
        if b.dim() != 2:
            raise _bad(f"argument 'b': shape {list(b.shape)}, expected [N, K] (a Linear weight)")
        n = b.shape[0]
        ldb = _matrix(b, "b", dev, d.b, n, k)
        if out is None:
            out = torch.empty((m, n), dtype=_DT[d.out], device=dev)
            ldd = n
        else:
            if out.dim() != 2 and lead and tuple(out.shape) == lead + (n,):
                out = out.view(m, n)
            ldd = _matrix(out, "out", dev, d.out, m, n)
        if d.bias:
            if bias is None:
                raise _bad("argument 'bias' is missing: the descriptor has bias=1")
            _vector(bias, "bias", dev, (_DT[d.out],), (n,))
        elif bias is not None:
            raise _bad("argument 'bias' is given but the descriptor has bias=0")
        _scale(scale_a, "scale_a", dev, d, "a", m, n, k)
        _scale(scale_b, "scale_b", dev, d, "b", m, n, k)
        if d.zeros:
            if zeros_b is None:
                raise _bad("argument 'zeros_b' is missing: the descriptor has zeros=1")
            _vector(zeros_b, "zeros_b", dev, _dtypes(d.group_scale), (n, k // d.group))
        elif zeros_b is not None:
            raise _bad("argument 'zeros_b' is given but the descriptor has zeros=0")
        args = _lib.GemmArgs(_ptr(a), _ptr(b), _ptr(out), _ptr(bias), _ptr(scale_a), _ptr(scale_b),
                             _ptr(zeros_b), m, n, k, lda, ldb, ldd)
        return args, out, lead, n, dev


class Quant(_PerDevice):
    """An activation quantizer of one QuantDesc on torch tensors: quant(x, clip=None) ->
    (q, scale) with q [..., K] (int8 for s8, float8_e4m3fn for e4m3, uint8 [..., K/2] for
    the 4-bit types) and scale as the mode says (row f32 [M], tensor f32 [1], block f32
    [M, ceil(K/128)], mx uint8 [M, K/32]): what a GEMM's sa reads."""

    def __init__(self, desc, ctx=None):
        super().__init__((desc if isinstance(desc, QuantDesc) else QuantDesc(desc)).validate(),
                         ctx, lib.qjit_context_get_quant)

    def __repr__(self):
        return f"qjit.Quant({str(self.desc)!r})"

    def shapes(self, m, k):
        """(q shape, q dtype, scale shape, scale dtype) for x of m rows of k values."""
        d = self.desc
        qshape, qdt = ((m, k // 2), torch.uint8) if d.out in _PACKED else \
            ((m, k), torch.int8 if d.out == "s8" else _DT["e4m3"])
        sshape, sdt = {"row": ((m,), torch.float32), "tensor": ((1,), torch.float32),
                       "block": ((m, (k + 127) // 128), torch.float32),
                       "mx": ((m, k // 32), torch.uint8)}[d.scale]
        return qshape, qdt, sshape, sdt

    def _cols(self, x):
        """layout=cols: x [E, M, K] or [M, K] -> q [E, K, M] ([.., M/2] packed), scales
        [E, K, M/32], one launch for all E."""
        d = self.desc
        dev = x.device
        squeeze = x.dim() == 2
        x3 = x.unsqueeze(0) if squeeze else x
        if x3.dim() != 3:
            raise _bad(f"argument 'x': shape {list(x.shape)}, expected [E, M, K] or [M, K]")
        e, m, k = x3.shape
        if m % 32:
            raise _bad(f"argument 'x': M={m} is not a multiple of 32 (layout=cols blocks run along M)")
        ldx = _matrix(x3[0], "x", dev, d.in_, m, k)
        if e > 1 and x3.stride(0) < m * ldx:
            raise _bad(f"argument 'x': its matrices overlap (strides {list(x3.stride())})")
        per = 2 if d.out in _PACKED else 1
        qdt = torch.uint8 if per == 2 else _DT["e4m3"]
        q = torch.empty((e, k, m // per), dtype=qdt, device=dev)
        sc = torch.empty((e, k, m // 32), dtype=torch.uint8, device=dev)
        args = _lib.QuantArgs(_ptr(x3), _ptr(q), _ptr(sc), None, m, k, ldx, m, 0.0, e,
                              x3.stride(0) if e > 1 else 0, k * m)
        stream = torch.cuda.current_stream(dev).cuda_stream
        h = self.handle(dev, stream)
        with torch.cuda.device(dev):
            _check(lib.qjit_quant_launch(h, args, stream))
        return (q[0], sc[0]) if squeeze else (q, sc)

    def __call__(self, x, clip=None, out=None, scale=None):
        d = self.desc
        _tensor(x, "x", None)
        if d._c.cols:
            if clip not in (None, 1.0) or out is not None or scale is not None:
                raise _bad("layout=cols takes no clip, out or scale arguments")
            return self._cols(x)
        args, qv, scale, ws, dev = self._args(x, clip, out, scale)
        stream = torch.cuda.current_stream(dev).cuda_stream
        h = self.handle(dev, stream)
        with torch.cuda.device(dev):
            _check(lib.qjit_quant_launch(h, args, stream))
        return qv, scale

    def _args(self, x, clip, out, scale):
        """The row-wise launch's QuantArgs with every argument checked, q as [..., K] (made
        where out is None), the scales (made where scale is None), the workspace tensor that
        must live until the launch (or None) and the device."""
        d = self.desc
        dev = x.device
        if x.dim() < 1:
            raise _bad(f"argument 'x': shape {list(x.shape)}, expected [M, K] or [..., K]")
        lead, k = tuple(x.shape[:-1]), x.shape[-1]
        try:
            x2 = x.view(-1, k)
        except RuntimeError:
            raise _bad(f"argument 'x': shape {list(x.shape)} with strides {list(x.stride())} "
                       "does not flatten to [M, K] without a copy") from None
        m = x2.shape[0]
        ldx = _matrix(x2, "x", dev, d.in_, m, k)
        qshape, qdt, sshape, sdt = self.shapes(m, k)
        if d.out in _PACKED and k % 2:
            raise _bad(f"argument 'x': K={k} is odd; {d.out} packs two values a byte")
        if d.scale == "mx" and k % 32:
            raise _bad(f"argument 'x': K={k} is not a multiple of 32, the MX block size")
        if out is None:
            out = torch.empty(qshape, dtype=qdt, device=dev)
        elif tuple(out.shape) != qshape or out.dtype != qdt or not out.is_contiguous() or out.device != dev:
            raise _bad(f"argument 'out': {list(out.shape)} {out.dtype} on {out.device}, expected "
                       f"contiguous {list(qshape)} {qdt} on {dev}")
        if scale is None:
            scale = torch.empty(sshape, dtype=sdt, device=dev)
        elif tuple(scale.shape) != sshape or scale.dtype != sdt or not scale.is_contiguous() or scale.device != dev:
            raise _bad(f"argument 'scale': {list(scale.shape)} {scale.dtype} on {scale.device}, "
                       f"expected contiguous {list(sshape)} {sdt} on {dev}")
        ws = torch.empty(_lib.QUANT_WORKSPACE_BYTES // 4, dtype=torch.float32, device=dev) \
            if d.scale == "tensor" else None
        args = _lib.QuantArgs(_ptr(x2), _ptr(out), _ptr(scale), _ptr(ws), m, k, ldx, k,
                              float(clip) if clip is not None else 0.0)
        qv = out.view(lead + (qshape[1],)) if len(lead) != 1 else out
        return args, qv, scale, ws, dev


def quant_linear(quant, gemm, x, b, bias=None, scale_b=None, zeros_b=None, clip=None):
    """A quantized linear layer: x quantized by `quant` (a Quant, QuantDesc or text), then
    `gemm` (a Gemm, Desc or text) with A and scale_a from the quantizer, on the current
    stream: capturable as one graph.  The GEMM must read what the quantizer writes.  One
    qjit_linear_launch: on sm_90a the GEMM starts early, under the quantizer's run (the
    quantizer writes none of what the GEMM reads before it waits)."""
    q = quant if isinstance(quant, Quant) else _quant_of(str(quant))
    g = gemm if isinstance(gemm, Gemm) else _gemm_of(str(gemm))
    if g.desc.a != q.desc.out or g.desc.sa != q.desc.scale:
        raise _bad(f"{q.desc} writes a={q.desc.out} sa={q.desc.scale}, but {g.desc} reads "
                   f"a={g.desc.a} sa={g.desc.sa}")
    if q.desc._c.cols:
        raise _bad(f"{q.desc}: a layout=cols quantizer does not feed a linear layer")
    _tensor(x, "x", None)
    qa, xq, xs, ws, dev = q._args(x, clip, None, None)
    ga, out, lead, n, _ = g._args(xq, b, None, bias, xs, scale_b, zeros_b)
    la = _lib.LinearArgs(qa.x, qa.ldx, qa.q, qa.scale, qa.workspace, qa.clip, ga)
    stream = torch.cuda.current_stream(dev).cuda_stream
    qh, gh = q.handle(dev, stream), g.handle(dev, stream)
    with torch.cuda.device(dev):
        _check(lib.qjit_linear_launch(qh, gh, la, stream))
    return out.view(lead + (n,)) if len(lead) != 1 else out


# ---------------------------------------------------------------- torch.library
_by_text = {}
_by_text_lock = threading.Lock()


def _quant_of(text):
    with _by_text_lock:
        q = _by_text.get(text)
        if q is None:
            q = _by_text[text] = Quant(text)
        return q


def _gemm_of(text):
    with _by_text_lock:
        g = _by_text.get(text)
        if g is None:
            g = _by_text[text] = Gemm(text)
        return g


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    from typing import Optional, Tuple

    @torch.library.custom_op("qjit::gemm", mutates_args=())
    def gemm_op(desc: str, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
                scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
                zeros_b: Optional[torch.Tensor] = None) -> torch.Tensor:
        """D = A·Bᵀ (+ bias) of descriptor `desc` (text form), on the current stream."""
        return _gemm_of(desc)(a, b, None, bias, scale_a, scale_b, zeros_b)

    @torch.library.custom_op("qjit::quant", mutates_args=())
    def quant_op(desc: str, x: torch.Tensor, clip: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
        """(q, scale) of x by quantization descriptor `desc` (text form), current stream."""
        return _quant_of(desc)(x, clip=clip)

    @torch.library.custom_op("qjit::linear", mutates_args=())
    def linear_op(quant: str, gemm: str, x: torch.Tensor, b: torch.Tensor,
                  bias: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
                  zeros_b: Optional[torch.Tensor] = None, clip: float = 1.0) -> torch.Tensor:
        """x quantized by `quant`, then the GEMM `gemm` (text forms), in one launch call on the
        current stream (quant_linear)."""
        return quant_linear(quant, gemm, x, b, bias, scale_b, zeros_b, clip)

    @linear_op.register_fake
    def _linear_fake(quant, gemm, x, b, bias=None, scale_b=None, zeros_b=None, clip=1.0):
        d = _gemm_of(gemm).desc
        return x.new_empty(tuple(x.shape[:-1]) + (b.shape[0],), dtype=_DT[d.out])

    @quant_op.register_fake
    def _quant_fake(desc, x, clip=1.0):
        q = _quant_of(desc)
        if q.desc._c.cols:
            m, k = x.shape[-2], x.shape[-1]
            per = 2 if q.desc.out in _PACKED else 1
            qdt = torch.uint8 if per == 2 else _DT["e4m3"]
            lead = tuple(x.shape[:-2])
            return (x.new_empty(lead + (k, m // per), dtype=qdt),
                    x.new_empty(lead + (k, m // 32), dtype=torch.uint8))
        k = x.shape[-1]
        m = 1
        for s_ in x.shape[:-1]:
            m = m * s_
        qshape, qdt, sshape, sdt = q.shapes(m, k)
        return (x.new_empty(tuple(x.shape[:-1]) + (qshape[1],), dtype=qdt),
                x.new_empty(sshape, dtype=sdt))

    @gemm_op.register_fake
    def _gemm_fake(desc, a, b, bias=None, scale_a=None, scale_b=None, zeros_b=None):
        d = _gemm_of(desc).desc
        return a.new_empty(tuple(a.shape[:-1]) + (b.shape[0],), dtype=_DT[d.out])
