"""qjit: JIT-generated (quantized) GEMM kernels for NVIDIA GPUs, from Python.

    import torch, qjit
    gemm = qjit.get_gemm("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16")
    y = gemm(x, w_packed, scale_b=w_scales)          # on the current stream
    y = torch.ops.qjit.gemm(desc, x, w_packed, None, None, w_scales, None)  # torch.compile

Everything but launching works without a GPU and without torch: descriptors, the
offline calls (resolve, supports, sweep, variants, precompile), the cache, and the host
packing and quantization helpers (on numpy arrays or CPU torch tensors).  Errors raise
QjitError, whose message names the field and value (the C library's qjit_last_error).
"""
import ctypes
import os

from . import _lib
from ._lib import lib

__all__ = ["QjitError", "Desc", "QuantDesc", "get_quant", "Context", "default_context", "version", "resolve",
           "supports", "sweep", "variants", "precompile", "precompile_manifest",
           "read_manifest_line", "m_bucket", "m_bucket_max", "cache_default_path",
           "cache_stats", "cache_verify", "cache_merge", "shipped_records",
           "merge_shipped_records", "get_gemm", "tune_record", "tune"]
__version__ = lib.qjit_version_string().decode()


class QjitError(RuntimeError):
    """A qjit call failed.  .status is the status name (e.g. "QJIT_ERROR_INVALID_ARGUMENT"),
    the message the library's detail."""

    def __init__(self, status, message):
        self.status = _lib.STATUS[status] if 0 <= status < len(_lib.STATUS) else str(status)
        super().__init__(message)


def _check(status):
    if status != _lib.OK:
        raise QjitError(status, lib.qjit_last_error().decode(errors="replace"))


def _arch(arch):
    if arch is None:
        return 0
    if isinstance(arch, int):
        return arch
    if arch not in _lib.ARCHS:
        raise QjitError(_lib.INVALID_ARGUMENT,
                        f"arch '{arch}' is not one of {', '.join(_lib.ARCHS)}")
    return _lib.ARCHS[arch]


def version():
    """The version of the C library loaded, e.g. "0.1.0"."""
    return __version__


# ---------------------------------------------------------------- descriptors
class Desc:
    """A GEMM descriptor (DESIGN §4): Desc("gemm a=bf16 b=s4 sb=group:128 gs=bf16 out=bf16").
    str() is its canonical text; equal descriptors compare equal."""

    __slots__ = ("_c",)

    def __init__(self, text=None):
        self._c = _lib.GemmDesc()
        if isinstance(text, Desc):
            ctypes.pointer(self._c)[0] = text._c
        elif text is None:
            lib.qjit_gemm_desc_init(self._c)
        else:
            _check(lib.qjit_gemm_desc_parse(str(text).encode(), self._c))

    @classmethod
    def _of(cls, c):
        d = cls.__new__(cls)
        d._c = _lib.GemmDesc()
        ctypes.pointer(d._c)[0] = c
        return d

    def __str__(self):
        buf = ctypes.create_string_buffer(512)
        _check(lib.qjit_gemm_desc_format(self._c, buf, len(buf), None))
        return buf.value.decode()

    def __repr__(self):
        return f"qjit.Desc({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Desc) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def validate(self):
        """Raise QjitError naming the first bad field, else return self."""
        _check(lib.qjit_gemm_desc_validate(self._c))
        return self

    # field views by their text names
    a = property(lambda s: _lib.DTYPE_NAMES.get(s._c.a))
    b = property(lambda s: _lib.DTYPE_NAMES.get(s._c.b))
    out = property(lambda s: _lib.DTYPE_NAMES.get(s._c.out))
    sa = property(lambda s: _lib.SCALE_NAMES.get(s._c.sa))
    sb = property(lambda s: _lib.SCALE_NAMES.get(s._c.sb))
    group = property(lambda s: s._c.group)
    group_scale = property(lambda s: _lib.DTYPE_NAMES.get(s._c.group_scale))
    zeros = property(lambda s: bool(s._c.zeros))
    bias = property(lambda s: bool(s._c.bias))
    arch = property(lambda s: lib.qjit_arch_name(s._c.arch).decode())
    kernel = property(lambda s: "auto" if s._c.kernel == 0 else lib.qjit_kernel_name(s._c.kernel).decode())


def _desc(d):
    return d if isinstance(d, Desc) else Desc(d)


class QuantDesc:
    """A quantization kernel descriptor (qjit.h "quantization kernels"):
    QuantDesc("quant in=bf16 out=e4m3 scale=mx rule=rceil").  str() is its canonical text."""

    __slots__ = ("_c",)

    def __init__(self, text=None):
        self._c = _lib.QuantDesc()
        if isinstance(text, QuantDesc):
            ctypes.pointer(self._c)[0] = text._c
        elif text is None:
            lib.qjit_quant_desc_init(self._c)
        else:
            _check(lib.qjit_quant_desc_parse(str(text).encode(), self._c))

    @classmethod
    def _of(cls, c):
        d = cls.__new__(cls)
        d._c = _lib.QuantDesc()
        ctypes.pointer(d._c)[0] = c
        return d

    def __str__(self):
        buf = ctypes.create_string_buffer(256)
        _check(lib.qjit_quant_desc_format(self._c, buf, len(buf), None))
        return buf.value.decode()

    def __repr__(self):
        return f"qjit.QuantDesc({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, QuantDesc) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def validate(self):
        _check(lib.qjit_quant_desc_validate(self._c))
        return self

    in_ = property(lambda s: _lib.DTYPE_NAMES.get(s._c.in_))
    out = property(lambda s: _lib.DTYPE_NAMES.get(s._c.out))
    scale = property(lambda s: _lib.SCALE_NAMES.get(s._c.scale))
    rule = property(lambda s: {0: "floor", 1: "rceil"}.get(s._c.rule))


def read_manifest_line(line):
    """One manifest line: (Desc, sweep name or "") for a gemm line, (QuantDesc, "") for a
    quant line, or None for a blank/comment line."""
    it = _lib.ManifestItem()
    st = lib.qjit_manifest_line(line.encode(), it)
    if st == _lib.NOT_FOUND:
        return None
    _check(st)
    if it.kind == 2:
        return QuantDesc._of(it.quant), ""
    return Desc._of(it.gemm), it.sweep.decode()


def m_bucket(m):
    """The M bucket of a launch of M rows (qjit.h: 1 | 2-4 | ... | 1025 and up)."""
    return lib.qjit_m_bucket(m)


def m_bucket_max(b):
    return lib.qjit_m_bucket_max(b)


# ---------------------------------------------------------------- contexts
class Context:
    """A qjit context: its own cache directory (or memory), shipped cache, size cap,
    target override and log.  Handles it gives out live as long as it does."""

    def __init__(self, cache_dir=None, shipped_cache=None, memory_only=False,
                 cache_max_bytes=0, template_dir=None, arch=None, verify_cache=False, log=None):
        o = _lib.Options()
        lib.qjit_options_init(o)
        enc = lambda s: None if s is None else os.fspath(s).encode()
        o.cache_dir, o.shipped_cache, o.template_dir = enc(cache_dir), enc(shipped_cache), enc(template_dir)
        o.memory_only = int(bool(memory_only))
        o.cache_max_bytes = int(cache_max_bytes)
        o.arch = _arch(arch)
        o.verify_cache = int(bool(verify_cache))
        self._log = None
        if log is not None:
            # kept alive with the context: the library calls it from any thread
            self._log = _lib.LOG_FN(lambda user, level, msg: log(level, msg.decode(errors="replace")))
            o.log = self._log
        self._ptr = ctypes.c_void_p()
        self._owned = True
        _check(lib.qjit_context_create(o, ctypes.byref(self._ptr)))

    @classmethod
    def _wrap(cls, ptr):
        c = cls.__new__(cls)
        c._ptr, c._owned, c._log = ptr, False, None
        return c

    def close(self):
        """Destroy the context and its handles (none may be in use)."""
        if self._owned and self._ptr:
            lib.qjit_context_destroy(self._ptr)
        self._ptr = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self):
        s = _lib.Stats()
        lib.qjit_context_stats(self._ptr, s)
        return {f: getattr(s, f) for f, _ in s._fields_}

    def cache_info(self):
        i = _lib.CacheInfo()
        lib.qjit_context_cache_info(self._ptr, i)
        return {"path": i.path.decode(), "persistent": bool(i.persistent),
                "shipped": bool(i.shipped), "repairs": i.repairs, "rows_dropped": i.rows_dropped}


_default = None


def default_context():
    """The process-wide context behind qjit_get_gemm (configured from QJIT_* variables)."""
    global _default
    if _default is None:
        p = ctypes.c_void_p()
        _check(lib.qjit_default_context(ctypes.byref(p)))
        _default = Context._wrap(p)
    return _default


def _ctx(ctx):
    return (ctx or default_context())._ptr


# ---------------------------------------------------------------- offline calls
def resolve(desc, arch=None, ctx=None):
    """The descriptor with its auto fields filled as a get on `arch` would fill them for
    M = 1 (variants() lists the kernel of every M bucket)."""
    out = _lib.GemmDesc()
    _check(lib.qjit_gemm_resolve(_ctx(ctx), _desc(desc)._c, _arch(arch), out))
    return Desc._of(out)


def supports(desc, arch=None, ctx=None):
    """(True, "") when desc can run on arch, else (False, the reason)."""
    why = ctypes.create_string_buffer(512)
    st = lib.qjit_gemm_supports(_ctx(ctx), _desc(desc)._c, _arch(arch), why, len(why))
    if st == _lib.OK:
        return True, ""
    return False, why.value.decode(errors="replace") or lib.qjit_last_error().decode()


def sweep(desc, arch, name="default", ctx=None):
    """The configurations of a named sweep ("default", "small-m") for desc on arch."""
    n = ctypes.c_size_t(0)
    _check(lib.qjit_gemm_sweep(_ctx(ctx), _desc(desc)._c, _arch(arch), name.encode(), None, 0,
                               ctypes.byref(n)))
    out = (_lib.GemmDesc * max(1, n.value))()
    c = ctypes.c_size_t(0)
    _check(lib.qjit_gemm_sweep(_ctx(ctx), _desc(desc)._c, _arch(arch), name.encode(), out,
                               n.value, ctypes.byref(c)))
    return [Desc._of(out[i]) for i in range(min(n.value, c.value))]


def _variants_of(arr, count):
    return [{"desc": Desc._of(v.desc), "m_min": v.m_min, "m_max": v.m_max, "n": v.n, "k": v.k,
             "tuned": bool(v.tuned), "us": v.us, "gpu": v.gpu.decode()} for v in arr[:count]]


def variants(desc, arch=None, ctx=None):
    """The kernels a get of desc would load on arch, each with the M range it serves
    (and, for tuned results, the N and K), without compiling anything."""
    n = ctypes.c_size_t(0)
    _check(lib.qjit_gemm_variants(_ctx(ctx), _desc(desc)._c, _arch(arch), None, 0, ctypes.byref(n)))
    out = (_lib.GemmVariant * max(1, n.value))()
    _check(lib.qjit_gemm_variants(_ctx(ctx), _desc(desc)._c, _arch(arch), out, n.value, ctypes.byref(n)))
    return _variants_of(out, n.value)


def precompile(desc, arch, ctx=None):
    """Compile every kernel a get of desc (a GEMM descriptor, or a QuantDesc / "quant ..."
    text) loads on arch into the context's cache, with no GPU.  Returns True when all of
    them were cached already."""
    cached = ctypes.c_int(0)
    if isinstance(desc, QuantDesc) or (isinstance(desc, str) and desc.split()[:1] == ["quant"]):
        q = desc if isinstance(desc, QuantDesc) else QuantDesc(desc)
        _check(lib.qjit_quant_precompile(_ctx(ctx), q._c, _arch(arch), ctypes.byref(cached)))
    else:
        _check(lib.qjit_gemm_precompile(_ctx(ctx), _desc(desc)._c, _arch(arch),
                                        ctypes.byref(cached)))
    return bool(cached.value)


def precompile_manifest(path, archs=("sm_90a",), ctx=None):
    """Precompile every line of a manifest (cache/manifests format) for each arch, one at
    a time (qjit-precompile does the same in parallel).  Returns a dict: compiled,
    cached, and failed as a list of (line number, text, message)."""
    res = {"compiled": 0, "cached": 0, "failed": []}
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            try:
                got = read_manifest_line(line)
                if got is None:
                    continue
                d, sweep_name = got
                for arch in archs:
                    if isinstance(d, QuantDesc):
                        res["cached" if precompile(d, arch, ctx) else "compiled"] += 1
                        continue
                    for c in (sweep(d, arch, sweep_name, ctx) if sweep_name else [d]):
                        res["cached" if precompile(c, arch, ctx) else "compiled"] += 1
            except QjitError as e:
                res["failed"].append((no, line.strip(), str(e)))
    return res


def tune_record(desc, config, m, n, k, us, ok=True, gpu=None, ctx=None):
    """Store one measured candidate `config` (a fully named configuration of desc) of the
    problem (desc, gpu, M bucket of m, n, k): later handles of desc run the fastest ok
    candidate for launches of that N, K and bucket."""
    cfg = _desc(config)
    meas = _lib.TuneMeasurement(gpu.encode() if gpu else None, m, n, k, ctypes.pointer(cfg._c),
                                float(us), int(bool(ok)))
    _check(lib.qjit_tune_record(_ctx(ctx), _desc(desc)._c, meas))


def tune(desc, problems, sweep=None, reps=0, warmup=0, compile_threads=0, rotate_mb=0,
         dry_run=False, progress=None, ctx=None):
    """Measure desc's candidate configurations on the current CUDA device for each
    (m, n, k) of `problems` and record them (qjit_gemm_tune; with torch, make the device
    current first, e.g. torch.cuda.set_device).  progress(stage, done, total, what) is
    called as work advances: stages "compile", "operands", "time" (a candidate loaded, run
    and checked), "measure" (its timing), "final" (the final round), and "problem" once each
    problem's result is final.  Returns one dict per problem: heuristic and best
    configuration with their times (µs), passed/failed/skipped counts and max_error."""
    probs = (_lib.TuneProblem * max(1, len(problems)))(*[_lib.TuneProblem(*p) for p in problems])
    res = (_lib.TuneResult * max(1, len(problems)))()
    o = _lib.TuneOptions()
    lib.qjit_tune_options_init(o)
    o.sweep = sweep.encode() if sweep else None
    o.reps, o.warmup, o.compile_threads = int(reps), int(warmup), int(compile_threads)
    o.rotate_bytes = int(rotate_mb) << 20
    o.dry_run = int(bool(dry_run))
    cb = None
    if progress is not None:
        cb = _lib.TUNE_PROGRESS_FN(lambda u, st, d, t, w: progress(st.decode(), d, t, w.decode()))
        o.progress = cb
    _check(lib.qjit_gemm_tune(_ctx(ctx), _desc(desc)._c, probs, len(problems), o, res))
    return [{"m": r.problem.m, "n": r.problem.n, "k": r.problem.k, "bucket": r.bucket,
             "candidates": r.candidates, "passed": r.passed, "failed": r.failed,
             "skipped": r.skipped, "heuristic": Desc._of(r.heuristic),
             "heuristic_us": r.heuristic_us, "best": Desc._of(r.best) if r.passed else None,
             "best_us": r.best_us, "max_error": r.max_error} for r in res[:len(problems)]]


# ---------------------------------------------------------------- cache files
def cache_default_path():
    buf = ctypes.create_string_buffer(4096)
    _check(lib.qjit_cache_default_path(buf, len(buf), None))
    return buf.value.decode()


class _DB:
    def __init__(self, path, writable):
        self.p = ctypes.c_void_p()
        _check(lib.qjit_cache_db_open(None if path is None else os.fspath(path).encode(),
                                      int(writable), ctypes.byref(self.p)))

    def __enter__(self):
        return self.p

    def __exit__(self, *exc):
        lib.qjit_cache_db_close(self.p)


def cache_stats(path=None):
    """Rows, bytes, schema version, per-arch counts and tuning rows of a cache DB file
    (default: the default writable cache)."""
    s = _lib.CacheStats()
    with _DB(path, False) as db:
        _check(lib.qjit_cache_db_stats(db, s))
    return {"rows": s.rows, "cubin_bytes": s.cubin_bytes, "source_bytes": s.source_bytes,
            "file_bytes": s.file_bytes, "schema_version": s.schema_version,
            "tuning_rows": s.tuning_rows,
            "archs": {s.arch[i].arch.decode(): {"rows": s.arch[i].rows, "bytes": s.arch[i].bytes}
                      for i in range(s.narch)}}


def cache_verify(path=None, repair=False):
    """Recheck every row of a cache DB file; repair=True deletes bad rows and rebuilds a
    damaged file (rebuilt: 1, rows_kept kept, rows_deleted lost, the damaged file moved
    to path + ".corrupt"), also one whose header is damaged.  Returns the report as a
    dict (ok: nothing bad was found; path: the file)."""
    r = _lib.VerifyReport()
    with _DB(path, repair) as db:
        _check(lib.qjit_cache_db_verify(db, int(bool(repair)), None, None, r))
    rep = {f: getattr(r, f) for f, _ in r._fields_}
    rep["integrity"] = r.integrity.decode()
    rep["path"] = os.fspath(path) if path else cache_default_path()
    rep["ok"] = bool(r.integrity_ok) and r.rows_bad == 0 and r.tuning_bad == 0
    return rep


def cache_merge(other, path=None):
    """Add the rows of the cache DB file other to a cache DB file (default: the default
    writable cache), as `qjit-cache merge` does: rows it already has stay, rows that do not
    verify are skipped, and tuning records are added (the newer measurement of a candidate
    stays).  Returns (kernels added, kernels skipped)."""
    target = os.fspath(path) if path else cache_default_path()
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    added, bad = ctypes.c_uint64(), ctypes.c_uint64()
    with _DB(target, True) as db:
        _check(lib.qjit_cache_db_merge(db, os.fspath(other).encode(), ctypes.byref(added),
                                       ctypes.byref(bad)))
    return added.value, bad.value


def shipped_records():
    """The tuning records qjit ships, one packed SQLite file a GPU they were measured on
    (NAME.db.tar.xz: h100, h200): the installed package's tune/, or cache/tune/ of the
    source tree the package is imported from."""
    import glob
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "tune"), os.path.join(here, "..", "..", "cache", "tune")):
        found = sorted(glob.glob(os.path.join(d, "*.db.tar.xz")))
        if found:
            return found
    return []


def merge_shipped_records(path=None):
    """Merge the shipped tuning records into a cache DB file (default: the default cache),
    as scripts/run.sh does: a handle on a GPU they were measured on then runs their winners,
    and another GPU's ignores them.  Returns {archive: tuning records added}."""
    import shutil
    import tarfile
    import tempfile
    target = os.fspath(path) if path else cache_default_path()
    out = {}
    for archive in shipped_records():
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive, "r:xz") as t:
            member = next((m for m in t.getmembers() if m.isfile() and m.name.endswith(".db")), None)
            if member is None:
                raise QjitError(_lib.STATUS.index("QJIT_ERROR_CACHE"), f"{archive}: holds no .db file")
            db = os.path.join(tmp, "records.db")
            with t.extractfile(member) as src, open(db, "wb") as dst:
                shutil.copyfileobj(src, dst)
            before = cache_stats(target)["tuning_rows"] if os.path.exists(target) else 0
            cache_merge(db, target)
            out[os.path.basename(archive)] = cache_stats(target)["tuning_rows"] - before
    return out


# ---------------------------------------------------------------- GPU (torch)
def get_gemm(desc, ctx=None):
    """A callable GEMM of torch CUDA tensors: gemm(a, b, out=None, bias=None, scale_a=None,
    scale_b=None, zeros_b=None) -> out, launched on the current stream (see qjit.ops).
    Needs torch; the kernels are got per device at the first call on it."""
    from . import ops
    return ops.Gemm(_desc(desc), ctx)


def get_quant(desc, ctx=None):
    """A callable activation quantizer of torch CUDA tensors: quant(x, clip=None) -> (q,
    scale), on the current stream (see qjit.ops).  Needs torch."""
    from . import ops
    return ops.Quant(desc if isinstance(desc, QuantDesc) else QuantDesc(desc), ctx)


from . import host  # noqa: E402  (the packing and quantization helpers)
from .host import (pack4, unpack4, quant_group4, quant_mx, e8m0_from_amax,  # noqa: E402,F401
                   from_f32, to_f32)

__all__ += ["host", "pack4", "unpack4", "quant_group4", "quant_mx", "e8m0_from_amax",
            "from_f32", "to_f32"]

try:  # torch is optional: with it, Gemm and the op torch.ops.qjit.gemm are registered
    import torch as _torch  # noqa: F401
except ImportError:
    _torch = None
if _torch is not None:
    from . import ops  # noqa: E402,F401
