"""Host packing and quantization of weights (the host functions of qjit.h), on 2-D numpy
arrays or CPU torch tensors; results come back in the input's kind.  Rows must be
contiguous (stride 1 along the last axis); a row stride larger than the row is fine.

    q, s, z = qjit.quant_group4(w, group=128, qtype="s4", scale_type="bf16")
    # -> descriptor "gemm a=bf16 b=s4 sb=group:128 gs=bf16", q is [N, K/2] uint8

Scale and zero outputs of type bf16 are torch.bfloat16 tensors, or numpy uint16 arrays
of the bf16 bit patterns (numpy has no bf16); f16 ones are float16 in both.
"""
import ctypes

from . import _lib
from ._lib import lib


def _error(msg):
    from . import QjitError
    return QjitError(_lib.INVALID_ARGUMENT, msg)


def _check(st):
    from . import _check as c
    c(st)


def _kind(x, name):
    mod = type(x).__module__.split(".")[0]
    if mod in ("torch", "numpy"):
        return mod
    raise _error(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")


def _dtype_name(x, kind):
    return str(x.dtype).replace("torch.", "")


def _view(x, name, dtypes):
    """(pointer, rows, cols, row stride in elements) of a 2-D array of one of `dtypes`."""
    kind = _kind(x, name)
    dt = _dtype_name(x, kind)
    if dt not in dtypes:
        raise _error(f"{name}: dtype {dt}, expected {' or '.join(dtypes)}")
    if kind == "torch":
        if x.device.type != "cpu":
            raise _error(f"{name}: on {x.device}; the host helpers take CPU tensors")
        if x.dim() != 2:
            raise _error(f"{name}: {x.dim()}-D, expected 2-D [rows, cols]")
        rows, cols = x.shape
        if cols > 1 and x.stride(1) != 1:
            raise _error(f"{name}: its rows are not contiguous (stride {tuple(x.stride())})")
        return x.data_ptr(), rows, cols, (x.stride(0) if rows > 1 else cols)
    if x.ndim != 2:
        raise _error(f"{name}: {x.ndim}-D, expected 2-D [rows, cols]")
    rows, cols = x.shape
    item = x.dtype.itemsize
    if cols > 1 and x.strides[1] != item:
        raise _error(f"{name}: its rows are not contiguous (strides {x.strides})")
    if rows > 1 and x.strides[0] % item:
        raise _error(f"{name}: row stride {x.strides[0]} is not a multiple of the element size")
    return x.ctypes.data, rows, cols, (x.strides[0] // item if rows > 1 else cols)


def _empty(kind, shape, dtype):
    """dtype: a torch dtype name; numpy gets its equivalent (bfloat16 -> uint16)."""
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype))
    import numpy as np
    return np.empty(shape, dtype={"bfloat16": "uint16", "float8_e4m3fn": "uint8",
                                  "float8_e5m2": "uint8"}.get(dtype, dtype))


def _code(name, table, what):
    if name not in table:
        raise _error(f"{what} '{name}' is not one of {', '.join(table)}")
    return table[name]


def pack4(values, dtype="s4"):
    """[rows, k] 4-bit values one per byte (int8 in [-8, 7] for s4; uint8 codes in
    [0, 15] for u4 and e2m1) -> [rows, k/2] uint8, element 2i in bits 0-3 of byte i."""
    t = _code(dtype, {"s4": 5, "u4": 6, "e2m1": 9}, "4-bit dtype")
    ptr, rows, k, ld = _view(values, "values", ("int8",) if t == 5 else ("uint8",))
    if k % 2:
        raise _error(f"values: k={k} is odd; two values pack into a byte")
    out = _empty(_kind(values, "values"), (rows, k // 2), "uint8")
    _check(lib.qjit_quant_pack4(t, rows, k, ptr, ld, _view(out, "out", ("uint8",))[0], k))
    return out


def unpack4(packed, dtype="s4"):
    """The inverse of pack4: [rows, k/2] uint8 -> [rows, k] int8 (s4) or uint8 (u4, e2m1)."""
    t = _code(dtype, {"s4": 5, "u4": 6, "e2m1": 9}, "4-bit dtype")
    ptr, rows, half, ld = _view(packed, "packed", ("uint8", "int8"))
    out = _empty(_kind(packed, "packed"), (rows, 2 * half), "int8" if t == 5 else "uint8")
    _check(lib.qjit_quant_unpack4(t, rows, 2 * half, ptr, 2 * ld,
                                  _view(out, "out", ("int8", "uint8"))[0], 2 * half))
    return out


_SCALE_OUT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def quant_group4(w, group=128, qtype="s4", scale_type="bf16"):
    """Per-group int4 quantization of float32 weights [n, k] along k (qjit_quant_group4):
    returns (q [n, k/2] uint8, scales [n, k/group], zeros [n, k/group] or None).  qtype
    "s4" is symmetric (no zeros); "u4" has zero points (descriptor zeros=1)."""
    qt = _code(qtype, {"s4": 5, "u4": 6}, "qtype")
    st = _code(scale_type, {"f16": 1, "bf16": 2, "f32": 3}, "scale_type")
    ptr, n, k, ld = _view(w, "w", ("float32",))
    kind = _kind(w, "w")
    if group <= 0 or k % group:
        raise _error(f"w: k={k} is not a multiple of group={group}")
    q = _empty(kind, (n, k // 2), "uint8")
    s = _empty(kind, (n, k // group), _SCALE_OUT[scale_type])
    z = _empty(kind, (n, k // group), _SCALE_OUT[scale_type]) if qt == 6 else None
    zp = _view(z, "zeros", ("float16", "bfloat16", "uint16", "float32"))[0] if z is not None else None
    _check(lib.qjit_quant_group4(qt, group, st, n, k, ptr, ld, _view(q, "q", ("uint8",))[0], k,
                                 _view(s, "scales", ("float16", "bfloat16", "uint16", "float32"))[0],
                                 zp))
    return q, s, z


def quant_mx(x, elem="e4m3", rule="floor"):
    """MX quantization of float32 x [rows, k] in blocks of 32 along k (qjit_quant_mx):
    returns (q, scales [rows, k/32] uint8 e8m0 codes); q is [rows, k] of e4m3/e5m2 codes
    (torch: float8 tensors) or, for e2m1, [rows, k/2] packed uint8."""
    e = _code(elem, {"e4m3": 7, "e5m2": 8, "e2m1": 9}, "elem")
    r = _code(rule, _lib.MX_RULES, "rule")
    ptr, rows, k, ld = _view(x, "x", ("float32",))
    kind = _kind(x, "x")
    if k % 32:
        raise _error(f"x: k={k} is not a multiple of 32, the MX block size")
    qdt = {7: "float8_e4m3fn", 8: "float8_e5m2", 9: "uint8"}[e]
    if kind == "torch":
        import torch
        if not hasattr(torch, qdt):
            qdt = "uint8"
    q = _empty(kind, (rows, k // 2 if e == 9 else k), qdt)
    s = _empty(kind, (rows, k // 32), "uint8")
    qptr = q.data_ptr() if kind == "torch" else q.ctypes.data
    _check(lib.qjit_quant_mx(e, r, rows, k, ptr, ld, qptr, k, _view(s, "scales", ("uint8",))[0]))
    return q, s


def e8m0_from_amax(amax, elem="e4m3", rule="floor"):
    """The e8m0 code of an MX block's scale for a block of largest magnitude amax."""
    code = ctypes.c_uint8(0)
    _check(lib.qjit_e8m0_from_amax(float(amax), _code(elem, {"e4m3": 7, "e5m2": 8, "e2m1": 9}, "elem"),
                                   _code(rule, _lib.MX_RULES, "rule"), ctypes.byref(code)))
    return code.value


_FROM = {"f16": "qjit_f16_from_f32", "bf16": "qjit_bf16_from_f32", "e4m3": "qjit_e4m3_from_f32",
         "e5m2": "qjit_e5m2_from_f32", "e2m1": "qjit_e2m1_from_f32"}
_TO = {"f16": "qjit_f16_to_f32", "bf16": "qjit_bf16_to_f32", "e4m3": "qjit_e4m3_to_f32",
       "e5m2": "qjit_e5m2_to_f32", "e2m1": "qjit_e2m1_to_f32", "e8m0": "qjit_e8m0_to_f32"}


def from_f32(x, dtype):
    """The code (bit pattern) of float x in dtype, rounded to nearest even, saturating
    for the fp8/fp4 types (qjit.h states each rule)."""
    _code(dtype, _FROM, "dtype")
    return getattr(lib, _FROM[dtype])(float(x))


def to_f32(code, dtype):
    """The exact value of code in dtype."""
    _code(dtype, _TO, "dtype")
    return getattr(lib, _TO[dtype])(int(code))
