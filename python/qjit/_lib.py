"""The C library through ctypes: where it is, its structs, and each function's types.

The structs mirror include/qjit.h field for field; tests/python checks their sizes and
offsets against the C compiler's (tests/abi_dump.c), so a change to the header that is
not made here fails the tests instead of corrupting memory.
"""
import ctypes
import os

c_int, c_int64, c_uint, c_uint64, c_size_t = (ctypes.c_int, ctypes.c_int64, ctypes.c_uint,
                                              ctypes.c_uint64, ctypes.c_size_t)
c_char_p, c_void_p, c_double = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_double
P = ctypes.POINTER

STATUS = ["QJIT_OK", "QJIT_ERROR_INVALID_ARGUMENT", "QJIT_ERROR_UNSUPPORTED",
          "QJIT_ERROR_OUT_OF_MEMORY", "QJIT_ERROR_TEMPLATE", "QJIT_ERROR_COMPILE",
          "QJIT_ERROR_CACHE", "QJIT_ERROR_CUDA", "QJIT_ERROR_NO_DEVICE", "QJIT_ERROR_CAPTURING",
          "QJIT_ERROR_NOT_FOUND", "QJIT_ERROR_IO"]
OK, INVALID_ARGUMENT, NOT_FOUND = 0, 1, 10

DTYPES = {"f16": 1, "bf16": 2, "f32": 3, "s8": 4, "s4": 5, "u4": 6, "e4m3": 7, "e5m2": 8,
          "e2m1": 9, "e8m0": 10}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
SCALES = {"none": 0, "tensor": 1, "row": 2, "col": 3, "group": 4, "block": 5, "mx": 6}
SCALE_NAMES = {v: k for k, v in SCALES.items()}
ARCHS = {"auto": 0, "sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90a": 90}
MX_RULES = {"floor": 0, "rceil": 1}
M_BUCKETS = 10


class GemmDesc(ctypes.Structure):
    _fields_ = [(n, c_int) for n in ("a", "b", "out", "sa", "sb", "group", "group_scale",
                                     "zeros", "bias", "arch", "kernel", "bm", "bn", "bk",
                                     "wm", "wn", "stages", "split_k")]


class GemmArgs(ctypes.Structure):
    _fields_ = [(n, c_void_p) for n in ("a", "b", "d", "bias", "scale_a", "scale_b",
                                        "zeros_b")] + \
               [(n, c_int64) for n in ("m", "n", "k", "lda", "ldb", "ldd")]


class QuantDesc(ctypes.Structure):
    _fields_ = [(n, c_int) for n in ("in_", "out", "scale", "rule", "arch", "cols")]


class QuantArgs(ctypes.Structure):
    _fields_ = [("x", c_void_p), ("q", c_void_p), ("scale", c_void_p), ("workspace", c_void_p),
                ("m", c_int64), ("k", c_int64), ("ldx", c_int64), ("ldq", c_int64),
                ("clip", ctypes.c_float), ("batch", c_int64), ("x_batch_stride", c_int64),
                ("q_batch_stride", c_int64)]


class LinearArgs(ctypes.Structure):
    _fields_ = [("x", c_void_p), ("ldx", c_int64), ("xq", c_void_p), ("xs", c_void_p),
                ("workspace", c_void_p), ("clip", ctypes.c_float), ("gemm", GemmArgs)]


class ManifestItem(ctypes.Structure):
    _fields_ = [("kind", c_int), ("gemm", GemmDesc), ("quant", QuantDesc),
                ("sweep", ctypes.c_char * 64)]


QUANT_WORKSPACE_BYTES = 4096

LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class Options(ctypes.Structure):
    _fields_ = [("cache_dir", c_char_p), ("shipped_cache", c_char_p), ("memory_only", c_int),
                ("cache_max_bytes", c_uint64), ("template_dir", c_char_p), ("arch", c_int),
                ("log", LOG_FN), ("log_user", c_void_p), ("verify_cache", c_int)]


class Stats(ctypes.Structure):
    _fields_ = [(n, c_uint64) for n in ("gets", "memory_hits", "disk_hits", "compiles",
                                        "compile_failures")] + [("compile_ms", c_double)]


class CacheInfo(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char * 1024), ("persistent", c_int), ("shipped", c_int),
                ("repairs", c_uint64), ("rows_dropped", c_uint64)]


class GemmInfo(ctypes.Structure):
    _fields_ = [("desc", GemmDesc), ("text", ctypes.c_char * 256), ("key", ctypes.c_uint8 * 16),
                ("threads", c_uint), ("shared_bytes", c_uint), ("registers", c_uint),
                ("k_multiple", c_int), ("ld_multiple", c_int), ("ptr_align", c_int),
                ("variants", c_int)]


class GemmVariant(ctypes.Structure):
    _fields_ = [("desc", GemmDesc), ("text", ctypes.c_char * 256), ("m_min", c_int64),
                ("m_max", c_int64), ("n", c_int64), ("k", c_int64), ("tuned", c_int),
                ("us", c_double), ("gpu", ctypes.c_char * 64)]


class TuneMeasurement(ctypes.Structure):
    _fields_ = [("gpu", c_char_p), ("m", c_int64), ("n", c_int64), ("k", c_int64),
                ("config", P(GemmDesc)), ("us", c_double), ("ok", c_int)]


class TuneProblem(ctypes.Structure):
    _fields_ = [("m", c_int64), ("n", c_int64), ("k", c_int64)]


TUNE_PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_size_t, c_size_t, c_char_p)


class TuneOptions(ctypes.Structure):
    _fields_ = [("sweep", c_char_p), ("warmup", c_int), ("reps", c_int),
                ("compile_threads", c_int), ("rotate_bytes", c_uint64), ("dry_run", c_int),
                ("progress", TUNE_PROGRESS_FN), ("user", c_void_p)]


class TuneResult(ctypes.Structure):
    _fields_ = [("problem", TuneProblem), ("bucket", c_int), ("candidates", c_int),
                ("passed", c_int), ("failed", c_int), ("skipped", c_int),
                ("heuristic", GemmDesc), ("heuristic_us", c_double), ("best", GemmDesc),
                ("best_us", c_double), ("max_error", c_double)]


class CacheArchStats(ctypes.Structure):
    _fields_ = [("arch", ctypes.c_char * 24), ("rows", c_uint64), ("bytes", c_uint64)]


class CacheStats(ctypes.Structure):
    _fields_ = [("rows", c_uint64), ("cubin_bytes", c_uint64), ("source_bytes", c_uint64),
                ("file_bytes", c_uint64), ("schema_version", c_int), ("narch", c_int),
                ("arch", CacheArchStats * 16), ("tuning_rows", c_uint64)]


class VerifyReport(ctypes.Structure):
    _fields_ = [("rows_checked", c_uint64), ("rows_bad", c_uint64), ("rows_deleted", c_uint64),
                ("integrity_ok", c_int), ("integrity", ctypes.c_char * 256),
                ("tuning_checked", c_uint64), ("tuning_bad", c_uint64), ("rebuilt", c_int),
                ("rows_kept", c_uint64)]


STRUCTS = {"qjit_gemm_desc": GemmDesc, "qjit_gemm_args": GemmArgs, "qjit_options": Options,
           "qjit_stats": Stats, "qjit_cache_info": CacheInfo, "qjit_gemm_info": GemmInfo,
           "qjit_gemm_variant": GemmVariant, "qjit_tune_measurement": TuneMeasurement,
           "qjit_tune_problem": TuneProblem, "qjit_tune_options": TuneOptions,
           "qjit_tune_result": TuneResult, "qjit_quant_desc": QuantDesc,
           "qjit_quant_args": QuantArgs, "qjit_linear_args": LinearArgs,
           "qjit_manifest_item": ManifestItem,
           "qjit_cache_stats": CacheStats, "qjit_cache_verify_report": VerifyReport}

# name: (restype, argtypes)
_S = c_int  # qjit_status
SIGNATURES = {
    "qjit_version_string": (c_char_p, []),
    "qjit_version_number": (c_uint, []),
    "qjit_status_string": (c_char_p, [c_int]),
    "qjit_last_error": (c_char_p, []),
    "qjit_arch_name": (c_char_p, [c_int]),
    "qjit_kernel_name": (c_char_p, [c_int]),
    "qjit_gemm_desc_init": (None, [P(GemmDesc)]),
    "qjit_gemm_desc_parse": (_S, [c_char_p, P(GemmDesc)]),
    "qjit_gemm_desc_format": (_S, [P(GemmDesc), c_char_p, c_size_t, P(c_size_t)]),
    "qjit_gemm_desc_validate": (_S, [P(GemmDesc)]),
    "qjit_manifest_line": (_S, [c_char_p, P(ManifestItem)]),
    "qjit_quant_desc_init": (None, [P(QuantDesc)]),
    "qjit_quant_desc_parse": (_S, [c_char_p, P(QuantDesc)]),
    "qjit_quant_desc_format": (_S, [P(QuantDesc), c_char_p, c_size_t, P(c_size_t)]),
    "qjit_quant_desc_validate": (_S, [P(QuantDesc)]),
    "qjit_context_get_quant": (_S, [c_void_p, P(QuantDesc), c_void_p, P(c_void_p)]),
    "qjit_quant_precompile": (_S, [c_void_p, P(QuantDesc), c_int, P(c_int)]),
    "qjit_quant_launch": (_S, [c_void_p, P(QuantArgs), c_void_p]),
    "qjit_quant_get_desc": (_S, [c_void_p, P(QuantDesc), c_char_p, c_size_t]),
    "qjit_linear_launch": (_S, [c_void_p, c_void_p, P(LinearArgs), c_void_p]),
    "qjit_f16_from_f32": (ctypes.c_uint16, [ctypes.c_float]),
    "qjit_f16_to_f32": (ctypes.c_float, [ctypes.c_uint16]),
    "qjit_bf16_from_f32": (ctypes.c_uint16, [ctypes.c_float]),
    "qjit_bf16_to_f32": (ctypes.c_float, [ctypes.c_uint16]),
    "qjit_e4m3_from_f32": (ctypes.c_uint8, [ctypes.c_float]),
    "qjit_e4m3_to_f32": (ctypes.c_float, [ctypes.c_uint8]),
    "qjit_e5m2_from_f32": (ctypes.c_uint8, [ctypes.c_float]),
    "qjit_e5m2_to_f32": (ctypes.c_float, [ctypes.c_uint8]),
    "qjit_e2m1_from_f32": (ctypes.c_uint8, [ctypes.c_float]),
    "qjit_e2m1_to_f32": (ctypes.c_float, [ctypes.c_uint8]),
    "qjit_e8m0_to_f32": (ctypes.c_float, [ctypes.c_uint8]),
    "qjit_quant_pack4": (_S, [c_int, c_int64, c_int64, c_void_p, c_int64, c_void_p, c_int64]),
    "qjit_quant_unpack4": (_S, [c_int, c_int64, c_int64, c_void_p, c_int64, c_void_p, c_int64]),
    "qjit_quant_group4": (_S, [c_int, c_int, c_int, c_int64, c_int64, c_void_p, c_int64,
                               c_void_p, c_int64, c_void_p, c_void_p]),
    "qjit_e8m0_from_amax": (_S, [ctypes.c_float, c_int, c_int, P(ctypes.c_uint8)]),
    "qjit_quant_mx": (_S, [c_int, c_int, c_int64, c_int64, c_void_p, c_int64, c_void_p,
                           c_int64, c_void_p]),
    "qjit_options_init": (None, [P(Options)]),
    "qjit_context_create": (_S, [P(Options), P(c_void_p)]),
    "qjit_context_destroy": (None, [c_void_p]),
    "qjit_default_context": (_S, [P(c_void_p)]),
    "qjit_context_stats": (None, [c_void_p, P(Stats)]),
    "qjit_context_cache_info": (None, [c_void_p, P(CacheInfo)]),
    "qjit_m_bucket": (c_int, [c_int64]),
    "qjit_m_bucket_max": (c_int64, [c_int]),
    "qjit_context_get_gemm": (_S, [c_void_p, P(GemmDesc), c_void_p, P(c_void_p)]),
    "qjit_gemm_resolve": (_S, [c_void_p, P(GemmDesc), c_int, P(GemmDesc)]),
    "qjit_gemm_supports": (_S, [c_void_p, P(GemmDesc), c_int, c_char_p, c_size_t]),
    "qjit_gemm_sweep": (_S, [c_void_p, P(GemmDesc), c_int, c_char_p, P(GemmDesc), c_size_t,
                             P(c_size_t)]),
    "qjit_gemm_precompile": (_S, [c_void_p, P(GemmDesc), c_int, P(c_int)]),
    "qjit_tune_record": (_S, [c_void_p, P(GemmDesc), P(TuneMeasurement)]),
    "qjit_tune_options_init": (None, [P(TuneOptions)]),
    "qjit_gemm_tune": (_S, [c_void_p, P(GemmDesc), P(TuneProblem), c_size_t, P(TuneOptions),
                            P(TuneResult)]),
    "qjit_gemm_launch": (_S, [c_void_p, P(GemmArgs), c_void_p]),
    "qjit_gemm_get_info": (_S, [c_void_p, P(GemmInfo)]),
    "qjit_gemm_get_variants": (_S, [c_void_p, P(GemmVariant), c_size_t, P(c_size_t)]),
    "qjit_gemm_choose": (_S, [c_void_p, c_int64, c_int64, c_int64, P(GemmVariant)]),
    "qjit_gemm_variants": (_S, [c_void_p, P(GemmDesc), c_int, P(GemmVariant), c_size_t,
                                P(c_size_t)]),
    "qjit_cache_default_path": (_S, [c_char_p, c_size_t, P(c_size_t)]),
    "qjit_cache_db_open": (_S, [c_char_p, c_int, P(c_void_p)]),
    "qjit_cache_db_close": (None, [c_void_p]),
    "qjit_cache_db_stats": (_S, [c_void_p, P(CacheStats)]),
    "qjit_cache_db_verify": (_S, [c_void_p, c_int, c_void_p, c_void_p, P(VerifyReport)]),
    "qjit_cache_db_merge": (_S, [c_void_p, c_char_p, P(c_uint64), P(c_uint64)]),
}


def _candidates():
    env = os.environ.get("QJIT_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "lib", "libqjit.so"), os.path.join(here, "lib", "libqjit.so.0"),
            "libqjit.so.0"]


def load():
    """The C library with every function typed.  QJIT_LIBRARY names it explicitly (a
    build tree's libqjit.so); else the copy inside the package, else the system's."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("qjit: the C library libqjit.so could not be loaded (" +
                          "; ".join(errors) + "); install the package with pip, or set "
                          "QJIT_LIBRARY to a libqjit.so")
    for name, (res, args) in SIGNATURES.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


lib = load()
