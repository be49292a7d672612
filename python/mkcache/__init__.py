"""mkcache: oneDNN operators on numpy arrays, with every oneDNN object cached.

    import numpy as np, mkcache
    x = np.random.rand(1, 3, 32, 32).astype(np.float32)
    w = np.random.rand(8, 3, 3, 3).astype(np.float32)
    y = mkcache.relu(mkcache.conv2d(x, w, padding=1))   # stays in oneDNN layout
    print(y.shape, y.format, np.asarray(y).sum())
"""
from __future__ import annotations

import ctypes
import json

__version__ = "0.1.0"

from . import _capi  # noqa: E402  (loads the library)
from . import _checks  # noqa: E402
from . import cache  # noqa: E402
from . import grad  # noqa: E402
from ._layout import get_target_layout, target_layout  # noqa: E402
from .errors import (BufferTooSmallError, DTypeError, Error, InternalError,  # noqa: E402
                     InvalidArgumentError, InvalidHandleError, OneDNNError, OutOfMemoryError,
                     UnsupportedError)
from . import _operators  # noqa: E402
from ._operators import ACTIVATIONS  # noqa: E402
from .ops import (abs, activation, add, clip, conv2d, div, elu, exp, gelu,  # noqa: E402,A004
                  hardswish, maximum, minimum, mul, sub, max_pool2d, avg_pool2d, max_pool3d,
                  avg_pool3d, global_max_pool, global_avg_pool, linear, matmul, layer_norm,
                  batch_norm, lrn, concat, transpose, to_layout, reshape, flatten, conv3d, conv2d_transpose,
                  leaky_relu, log, log_softmax, mish, relu, relu6, sigmoid, silu, softmax, sqrt,
                  square, swish, tanh, quantize, dequantize, quantized_conv2d,
                  quantized_linear, quantized_matmul)
from . import ops as _ops  # noqa: E402
from .tensor import Tensor, bfloat16  # noqa: E402
from .graph import Graph, Program  # noqa: E402
from ._trace import trace  # noqa: E402


def library_version() -> str:
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _capi.lib.mkc_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return f"{major.value}.{minor.value}.{patch.value}"


def build_info() -> dict:
    """version, onednn_version, isa, max_threads, ... of the loaded library."""
    text = ctypes.c_char_p()
    _capi.lib.mkc_get_build_info(ctypes.byref(text))
    info = json.loads(text.value.decode())
    info["library_path"] = _capi.lib._name
    return info


def set_num_threads(threads: int) -> None:
    """The OpenMP thread count of the calling thread's operator calls,
    program runs and compiles (OpenMP keeps it per thread). Entries and plans
    are made per count, so the next call builds what the new count needs."""
    _capi.lib.mkc_set_num_threads(_checks.integer(threads, "threads", _checks.INT32))


def peak_flops(arithmetic: str = "f32") -> float:
    """Operations per second one thread reaches on this CPU in `arithmetic`
    (a multiply-add counted as two; measured once per process, about 20 ms
    each): "f32" fused multiply-adds on the widest vectors oneDNN uses here,
    "bf16" bfloat16 dot products where oneDNN runs them natively (else
    f32's), "int8" 8-bit dot products as oneDNN computes them (VNNI's, else
    pairs summed in 16 bits). Program.profile's share of peak is a step's
    rate over its arithmetic's peak times the threads."""
    dtypes = {"f32": "f32", "bf16": "bf16", "int8": "s8"}
    if arithmetic not in dtypes:
        raise InvalidArgumentError(
            f"peak_flops: arithmetic must be one of {sorted(dtypes)}, got {arithmetic!r}")
    flops = ctypes.c_double()
    if arithmetic == "f32":
        _capi.lib.mkc_get_peak_flops(ctypes.byref(flops))
    else:
        _capi.lib.mkc_get_peak_ops(_capi.enum_value("mkc_dtype", dtypes[arithmetic]),
                                   ctypes.byref(flops))
    return flops.value


def get_num_threads() -> int:
    """The calling thread's OpenMP thread count (see set_num_threads)."""
    threads = ctypes.c_int()
    _capi.lib.mkc_get_num_threads(ctypes.byref(threads))
    return threads.value


if library_version() != __version__:
    raise ImportError(
        f"libmkcache {library_version()} was loaded from {_capi.lib._name}, "
        f"but the mkcache package is {__version__}; reinstall, or fix MKCACHE_LIBRARY")

__all__ = [
    "__version__", "build_info", "set_num_threads", "get_num_threads", "peak_flops", "cache", "grad", "reshape", "flatten", "conv2d", "activation", "ACTIVATIONS", "relu",
    "leaky_relu", "elu", "gelu", "tanh", "sigmoid", "swish", "silu", "hardswish", "mish",
    "clip", "relu6", "sqrt", "abs", "exp", "log", "square", "softmax", "log_softmax",
    "add", "sub", "mul", "div", "maximum", "minimum", "max_pool2d", "avg_pool2d",
    "max_pool3d", "avg_pool3d", "global_max_pool", "global_avg_pool", "linear", "matmul",
    "layer_norm", "batch_norm", "lrn", "concat", "transpose", "to_layout", "conv3d",
    "conv2d_transpose",
    "quantize", "dequantize", "quantized_conv2d", "quantized_linear", "quantized_matmul",
    "Tensor", "bfloat16", "Graph", "Program", "trace", "target_layout",
    "get_target_layout", "Error", "InvalidArgumentError", "InvalidHandleError", "DTypeError",
    "UnsupportedError", "OutOfMemoryError", "BufferTooSmallError", "OneDNNError",
    "InternalError",
]
# Every operator of the one description (mkcache._operators), those listed
# above and whatever was added to it since.
globals().update({_name: getattr(_ops, _name) for _name in _operators.functions()})
__all__ += [_name for _name in _operators.functions() if _name not in __all__]
