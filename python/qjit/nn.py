"""qjit.nn — a quantized linear layer for PyTorch models.

    layer = qjit.nn.QuantLinear.from_linear(linear, "w8a8")   # linear: a torch.nn.Linear
    y = layer(x)                                               # x: [..., in_features] CUDA

`from_linear` quantizes the weight once (on the CPU, with qjit's host helpers or torch's
round-to-nearest-even, then moved to the weight's device) into the layout of DESIGN §2;
`forward` is one activation quantizer (where the scheme has one) and one GEMM on the current
stream, through the `qjit::linear` torch.library op (`qjit::gemm` without a quantizer), so
that `torch.compile` traces it whole and a CUDA graph captures it; on sm_90a the GEMM starts
under its quantizer's run (qjit_linear_launch).  The activations keep their
dtype (bf16 or f16); so does the output.

Schemes (weights; activations):
    "w4a16"  s4, groups of 128 along K, scales in the activations' dtype; as they are
    "w8a16"  s8, one scale per output channel;                           as they are
    "w8a8"   s8, one scale per output channel;        s8, one scale per token
    "w4a8"   s4, groups of 128 along K, f32 scales;    s8, one scale per token
    "fp8"    e4m3, one scale per output channel;      e4m3, one scale per token
    "mxfp8"  e4m3 with e8m0 scales per 32 of K;       the same (rceil rule)

`config` (optional) is appended to the GEMM's descriptor to pick a kernel or configuration by
name instead of `auto`, e.g. config="kernel=wgmma_tma" for fp8/w8a8 or "kernel=wgmma_wq" for
w4a16; it is parsed and validated when the layer is made.
"""
try:
    import torch
except ImportError as e:  # a plain word instead of a traceback into the package
    raise ImportError("qjit.nn needs PyTorch: pip install torch (or pip install 'qjit[torch]')") from e

from . import Desc
from . import host
from . import ops  # noqa: F401  (registers the qjit::quant and qjit::gemm torch.library ops)

SCHEMES = ("w4a16", "w8a16", "w8a8", "w4a8", "fp8", "mxfp8")
_ACT = {torch.bfloat16: "bf16", torch.float16: "f16"}


def _per_channel(w, qmax):
    """w [n, k] f32 -> (w / s, s [n] f32) with s = amax(row) / qmax (1 for an all-zero row)."""
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    return w / s[:, None], s


def quantize_weight(w, scheme, act="bf16"):
    """A weight [out, in] (any float dtype, any device) quantized for `scheme`: returns
    (weight, scale_b) as the scheme's GEMM reads them, on w's device."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
    dev = w.device
    w = w.detach().to(device="cpu", dtype=torch.float32).contiguous()
    n, k = w.shape
    if scheme in ("w4a16", "w4a8"):
        if k % 128:
            raise ValueError(f"scheme {scheme}: in_features={k} is not a multiple of the group, 128")
        q, s, _ = host.quant_group4(w, 128, "s4", act if scheme == "w4a16" else "f32")
    elif scheme in ("w8a16", "w8a8"):
        x, s = _per_channel(w, 127.0)
        q = torch.round(x).clamp_(-127, 127).to(torch.int8)  # round half to even
    elif scheme == "fp8":
        x, s = _per_channel(w, 448.0)
        q = x.clamp_(-448.0, 448.0).to(torch.float8_e4m3fn)
    else:  # mxfp8
        if k % 32:
            raise ValueError(f"scheme mxfp8: in_features={k} is not a multiple of 32, the MX block")
        q, s = host.quant_mx(w, "e4m3", "rceil")
    return q.to(dev), s.to(dev)


def descriptors(scheme, act="bf16", bias=False, config=""):
    """(quantizer text or None, GEMM text) of a scheme for activations of dtype `act`; config
    (e.g. "kernel=wgmma_tma") is appended to the GEMM text."""
    b = 1 if bias else 0
    quant, gemm = {
        "w4a16": (None, f"gemm a={act} b=s4 sb=group:128 gs={act} out={act} bias={b}"),
        "w8a16": (None, f"gemm a={act} b=s8 sb=col out={act} bias={b}"),
        "w8a8": (f"quant in={act} out=s8 scale=row",
                 f"gemm a=s8 b=s8 sa=row sb=col out={act} bias={b}"),
        "w4a8": (f"quant in={act} out=s8 scale=row",
                 f"gemm a=s8 b=s4 sa=row sb=group:128 gs=f32 out={act} bias={b}"),
        "fp8": (f"quant in={act} out=e4m3 scale=row",
                f"gemm a=e4m3 b=e4m3 sa=row sb=col out={act} bias={b}"),
        "mxfp8": (f"quant in={act} out=e4m3 scale=mx rule=rceil",
                  f"gemm a=e4m3 b=e4m3 sa=mx sb=mx out={act} bias={b}"),
    }[scheme]
    if config:
        gemm = f"{gemm} {config}"
    return quant, gemm


class QuantLinear(torch.nn.Module):
    """y = x·Ŵᵀ (+ bias) with Ŵ quantized by `scheme` (see the module's text).  Build it with
    from_linear, or from an already quantized weight and its scales."""

    def __init__(self, weight, scale_b, scheme, bias=None, act_dtype=torch.bfloat16, config=""):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
        if act_dtype not in _ACT:
            raise ValueError(f"act_dtype {act_dtype}: expected torch.bfloat16 or torch.float16")
        self.scheme, self.act_dtype = scheme, act_dtype
        self.quant, self.gemm = descriptors(scheme, _ACT[act_dtype], bias is not None, config)
        Desc(self.gemm).validate()  # a bad config fails here, naming the field
        self.register_buffer("weight", weight)
        self.register_buffer("scale_b", scale_b)
        self.register_buffer("bias", None if bias is None else bias.detach().to(act_dtype))
        packed = scheme in ("w4a16", "w4a8")
        self.out_features = weight.shape[0]
        self.in_features = weight.shape[1] * (2 if packed else 1)

    @classmethod
    def from_linear(cls, linear, scheme, act_dtype=None, config=""):
        """A QuantLinear of a torch.nn.Linear's weight and bias; activations of act_dtype
        (default: the Linear's dtype when it is bf16 or f16, else bf16); config as above."""
        if act_dtype is None:
            act_dtype = linear.weight.dtype if linear.weight.dtype in _ACT else torch.bfloat16
        w, s = quantize_weight(linear.weight, scheme, _ACT[act_dtype])
        return cls(w, s, scheme, linear.bias, act_dtype, config)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"scheme={self.scheme!r}, bias={self.bias is not None}")

    def forward(self, x):
        if x.dtype != self.act_dtype:
            raise TypeError(f"qjit QuantLinear ({self.scheme}): input dtype {x.dtype}, "
                            f"expected {self.act_dtype}")
        if self.quant is None:
            return torch.ops.qjit.gemm(self.gemm, x, self.weight, self.bias, None, self.scale_b)
        return torch.ops.qjit.linear(self.quant, self.gemm, x, self.weight, self.bias,
                                     self.scale_b)
