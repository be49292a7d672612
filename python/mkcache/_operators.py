"""One description of the operators that are a C operator run with a fixed
kind: the activation aliases (relu, gelu, clip, ...), the pools, the
binaries, softmax and log_softmax.

A row says which kind of the library the operator runs (by its name in
mkcache.h; the number is read from the loaded library), the operator's own
parameters with their defaults and checks, and its documentation. The eager
functions of mkcache.ops and the methods of mkcache.Graph are both made from
the rows (define_functions, define_methods), so the two cannot drift apart in
names, parameters, defaults, checks or documentation.

They are made from source text, as collections.namedtuple makes its classes:
the operators keep PyTorch's parameter names (negative_slope, approximate,
count_include_pad, ...), which callers pass by keyword, and a function with
real parameters costs a call no more than one written by hand, where a
generic wrapper taking *args would bind its arguments on every call.
"""
from __future__ import annotations

import ctypes
import linecache
import numbers
from typing import NamedTuple

import numpy as np

from . import _capi, _checks, tensor
from .errors import InvalidArgumentError


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # the default of a parameter that has none


class Param(NamedTuple):
    """A parameter of an activation alias (after x)."""
    name: str
    default: object = REQUIRED
    sets: str = "alpha"  # the activation parameter it gives: "alpha" or "beta"
    # Instead of a parameter: its allowed values -> the activation name each
    # runs (gelu's approximate).
    choices: dict | None = None


class Activation(NamedTuple):
    kind: str            # its mkc_activation_kind name
    alpha: float = 0.0   # the parameters PyTorch's defaults imply
    beta: float = 0.0
    params: tuple = ()   # Params: what the caller may give instead of alpha, beta
    ordered: bool = False  # the two params must be given in order (min <= max)
    doc: str = ""
    function: bool = True  # also mkcache.<name> and Graph.<name> (else a kind only)


class Pool(NamedTuple):
    kind: str  # "max", or "avg": count_include_pad picks the mkc_pool_kind
    rank: int  # the window's spatial dims; 0: the whole extent (global)
    doc: str


class Binary(NamedTuple):
    kind: str  # its mkc_binary_kind name
    doc: str


class Softmax(NamedTuple):
    log: bool
    doc: str


class TableOp(NamedTuple):
    """An operator run through the library's operator table: eagerly by
    mkc_op_run, in a graph by mkc_graph_node (one row serves both)."""
    op: str              # its mkc_op name
    params: tuple = ()   # its parameters after its inputs, as source ("axes=None")
    build: str = ""      # source of its params struct from them and `name`, a call
                         # of a function of this module ("": the operator has none)
    doc: str = ""
    inputs: tuple = ("x",)  # its inputs' names, in port order


# Every name mkcache.activation(x, kind) takes; with `function`, also an
# operator of its own.
ACTIVATION_TABLE = {
    "relu": Activation("relu", doc="max(x, 0)."),
    "leaky_relu": Activation("relu", 0.01, params=(Param("negative_slope", 0.01),),
                             doc="x if x > 0 else negative_slope * x."),
    "elu": Activation("elu", 1.0, params=(Param("alpha", 1.0),),
                      doc="x if x > 0 else alpha * (exp(x) - 1)."),
    "gelu": Activation("gelu_erf", params=(
        Param("approximate", "none", choices={"none": "gelu", "tanh": "gelu_tanh"}),),
        doc='0.5 x (1 + erf(x / sqrt(2))); approximate="tanh" for the tanh form.'),
    "gelu_tanh": Activation("gelu_tanh", function=False),
    "tanh": Activation("tanh", doc="tanh(x)."),
    "sigmoid": Activation("sigmoid", doc="1 / (1 + exp(-x))."),
    "swish": Activation("swish", 1.0, params=(Param("beta", 1.0, "alpha"),),
                        doc="x * sigmoid(beta * x)."),
    "silu": Activation("swish", 1.0, doc="x * sigmoid(x)."),
    "hardswish": Activation("hardswish", 1.0 / 6.0, 0.5, doc="x * relu6(x + 3) / 6."),
    "mish": Activation("mish", doc="x * tanh(softplus(x))."),
    "clip": Activation("clip", params=(Param("min", sets="alpha"), Param("max", sets="beta")),
                       ordered=True, doc="min(max(x, min), max)."),
    "relu6": Activation("clip", 0.0, 6.0, doc="min(max(x, 0), 6)."),
    "sqrt": Activation("sqrt", doc="sqrt(x)."),
    "abs": Activation("abs", doc="|x|."),
    "exp": Activation("exp", doc="exp(x)."),
    "log": Activation("log", doc="The natural logarithm of x."),
    "square": Activation("square", doc="x * x."),
    "softplus": Activation("softplus", 1.0, params=(Param("beta", 1.0, "alpha"),),
                           doc="log(1 + exp(beta * x)) / beta (beta > 0)."),
}

POOL_TABLE = {
    "max_pool2d": Pool("max", 2, "Max pooling over H, W. stride defaults to kernel_size "
                                 "(as PyTorch)."),
    "avg_pool2d": Pool("avg", 2, "Average pooling over H, W; count_include_pad as PyTorch."),
    "max_pool3d": Pool("max", 3, "Max pooling over D, H, W."),
    "avg_pool3d": Pool("avg", 3, "Average pooling over D, H, W."),
    "global_max_pool": Pool("max", 0, "Max over all spatial dims (4-D or 5-D input); spatial "
                                      "dims become 1."),
    "global_avg_pool": Pool("avg", 0, "Mean over all spatial dims (4-D or 5-D input); spatial "
                                      "dims become 1."),
}

BINARY_TABLE = {
    "add": Binary("add", "a + b with numpy broadcasting (b may be a Python number)."),
    "sub": Binary("sub", "a - b with numpy broadcasting."),
    "mul": Binary("mul", 'a * b with numpy broadcasting (key suffix "M").'),
    "div": Binary("div", "a / b with numpy broadcasting."),
    "maximum": Binary("max", "The larger of a and b, element by element, with numpy "
                             "broadcasting."),
    "minimum": Binary("min", "The smaller of a and b, element by element, with numpy "
                             "broadcasting."),
}

SOFTMAX_TABLE = {
    "softmax": Softmax(False, "exp(x) / sum(exp(x)) along `axis` (of x's shape as reported)."),
    "log_softmax": Softmax(True, "x - log(sum(exp(x))) along `axis`."),
}

_REDUCE_DOC = ("The {what} of x over `axes` (an int or a sequence of x's axes as reported, "
               "negative from the end; None: every axis). keepdims: reduced axes stay as 1s "
               "and x's layout is kept; else they are dropped (a result of no dims is [1]) and "
               "the result is channels-first.")

TABLE_OP_TABLE = {
    "erf": TableOp("erf", doc="The error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 "
                              "to x, element by element."),
    "round": TableOp("round", doc="float32 x rounded to the nearest integer element by "
                                  "element, ties to even (numpy's rint, ONNX's Round): 2.5 "
                                  "-> 2, -0.5 -> -0; infinities and NaN kept."),
    "gather": TableOp("gather", ("axis=0",), "gather_params(axis, name)",
                      "The slices of `data` (any dtype) along `axis` picked by int32 or int64 "
                      "`indices` (negative ones count from the end): data's dims before the "
                      "axis, then the indices', then data's after it - ONNX's Gather; an "
                      "embedding lookup is axis 0. An index out of range is an error.",
                      inputs=("data", "indices")),
    "gather_elements": TableOp(
        "gather_elements", ("axis=0",), "gather_params(axis, name)",
        "ONNX's GatherElements: `data` (any dtype) read at int32 or int64 `indices` of its "
        "rank along `axis` (negative ones count from the end), every other coordinate the "
        "index's own: out[i][j] = data[indices[i][j]][j] for axis 0. The result has the "
        "indices' dims (each at most data's off the axis). An index out of range is an error.",
        inputs=("data", "indices")),
    "gather_nd": TableOp(
        "gather_nd", ("batch_dims=0",), "gather_nd_params(batch_dims, name)",
        "ONNX's GatherND: each row of int32 or int64 `indices`' last dim (k coordinates, "
        "negative ones from the end) picks a slice of `data` (any dtype) over its last "
        "rank - batch_dims - k dims, within the batch of the first batch_dims dims (which "
        "data and indices share). The result: indices' dims but the last, then the slice's. "
        "An index out of range is an error.", inputs=("data", "indices")),
    "arange": TableOp(
        "range", ("axis=0", "start=0", "delta=1", "limit_offset=0", 'dtype="int64"'),
        "range_params(axis, start, delta, limit_offset, dtype, name)",
        "The 1-D sequence start, start + delta, ... up to (not including) x.shape[axis] + "
        "limit_offset (ONNX's Range with that limit; delta < 0 counts down to it), as "
        "`dtype` (float32, int32 or int64): a sequence as long as a dim of x, which gives "
        "its dims only. An empty sequence is an error."),
    "integer_binary": TableOp(
        "integer_binary", ('kind="add"',), "integer_binary_params(kind, name)",
        "a (kind) b on int32 or int64 values of one dtype with numpy broadcasting: kind "
        "'add', 'sub', 'mul', 'div' (toward zero; a zero divisor is an error), 'max' or "
        "'min'; sums and products wrap on overflow.", inputs=("a", "b")),
    "cast": TableOp("cast", ("dtype",), "cast_params(dtype, name)",
                    "x converted element by element to `dtype` (float32, int32, int64, "
                    "bool, int8, uint8, float16 - a numpy dtype or its name - or "
                    "mkcache.bfloat16): floats to integers truncated toward zero, saturated "
                    "at the integer's range (NaN to 0); to bool: not zero; to float16 and "
                    "bfloat16 rounded to the nearest, ties to even."),
    "slice": TableOp("slice", ("starts", "ends", "axes=None", "steps=None"),
                     "slice_params(starts, ends, axes, steps, name)",
                     "x[start:end:step] along each of `axes` (default 0, 1, ... as many as "
                     "`starts`), numpy's slicing with ONNX's rules: negative starts and ends "
                     "count from the end, both clamped to the dim; any dtype. An empty "
                     "slice is an error."),
    "expand": TableOp("expand", ("shape",), "expand_params(shape, name)",
                      "x broadcast with `shape` as numpy broadcasts (ONNX's Expand): the "
                      "result has the broadcast of both; any dtype."),
    **{name: TableOp("compare", (), f"compare_params({name!r}, name)",
                     f"a {sign} b element by element with numpy broadcasting: a bool result "
                     "(a and b of one dtype, float32, int32 or int64).", inputs=("a", "b"))
       for name, sign in (("equal", "=="), ("less", "<"), ("less_equal", "<="),
                          ("greater", ">"), ("greater_equal", ">="))},
    **{f"logical_{name}": TableOp("logical", (), f"logical_params({name!r}, name)",
                                  f"a {word} b element by element on bool values with numpy "
                                  "broadcasting: a bool result.", inputs=("a", "b"))
       for name, word in (("and", "and"), ("or", "or"), ("xor", "exclusive or"))},
    "logical_not": TableOp("logical", (), "logical_params('not', name)",
                           "not x element by element on a bool value: a bool result."),
    "pad": TableOp("pad", ("pads", 'mode="constant"', "value=0.0", "axes=None"),
                   "pad_params(pads, mode, value, axes, name)",
                   "x grown along `axes` as ONNX's Pad: `pads` is every axis's count before, "
                   "then every axis's count after ([b0, b1, ..., e0, e1, ...]; negative "
                   "counts remove elements, before any is added); `axes` default 0, 1, ... as "
                   "many as pads gives. mode: 'constant' (`value`, which x's dtype must hold "
                   "exactly), 'reflect' (mirrored without the border; at most n - 1 on a "
                   "side), 'edge' (the border repeated) or 'wrap'. Any dtype; the result is "
                   "channels-first."),
    "resize": TableOp("resize", ("sizes=None", "scales=None", 'mode="nearest"',
                                 'coordinates="half_pixel"', 'nearest="round_prefer_floor"',
                                 "cubic_coeff_a=-0.75", "exclude_outside=False",
                                 "antialias=False"),
                      "resize_params(sizes, scales, mode, coordinates, nearest, cubic_coeff_a, "
                      "exclude_outside, antialias, name)",
                      "float32 x resized as ONNX's Resize (no region of interest): to "
                      "`sizes`, or to floor(dim * scale) by `scales` (one entry per dim of x, "
                      "exactly one of the two given; a scale of 1 keeps a dim). mode: "
                      "'nearest', 'linear' (bi-, trilinear) or 'cubic' (Keys' cubic "
                      "convolution with parameter `cubic_coeff_a`: ONNX's default -0.75 is "
                      "PyTorch's bicubic, -0.5 TensorFlow's). coordinates: ONNX's "
                      "coordinate_transformation_mode, 'half_pixel', 'pytorch_half_pixel', "
                      "'align_corners', 'asymmetric' or 'half_pixel_symmetric'. "
                      "nearest: ONNX's nearest_mode, 'round_prefer_floor', "
                      "'round_prefer_ceil', 'floor' or 'ceil'. exclude_outside (linear and "
                      "cubic): elements past x's border weigh 0 and the others are scaled to "
                      "sum to 1, instead of the border element being read there. antialias "
                      "(linear and cubic): along an axis that shrinks the filter is stretched "
                      "by 1 / scale, as ONNX's Resize of opset 18 defines it. The result "
                      "keeps x's layout."),
    "where": TableOp("where", doc="condition ? x : y element by element (condition bool, x "
                                  "and y float32), the three broadcast as numpy does.",
                     inputs=("condition", "x", "y")),
    **{f"reduce_{kind}": TableOp("reduce", ("axes=None", "keepdims=False"),
                                 f"reduce_params({kind!r}, axes, keepdims, name)",
                                 _REDUCE_DOC.format(what=what))
       for kind, what in (("sum", "sum"), ("mean", "mean"), ("max", "maximum"),
                          ("min", "minimum"))},
}

# The rows' kinds as the library numbers them, read once at import.
# name -> (mkc_activation_kind, alpha, beta).
ACTIVATIONS = {name: (_capi.enum_value("mkc_activation_kind", row.kind), row.alpha, row.beta)
               for name, row in ACTIVATION_TABLE.items()}
BINARY = {name: _capi.enum_value("mkc_binary_kind", row.kind)
          for name, row in BINARY_TABLE.items()}
POOL_KINDS = _capi.enum_values("mkc_pool_kind", ("max", "avg_include_pad", "avg_exclude_pad"))
REDUCE_KINDS = _capi.enum_values("mkc_reduce_kind", ("sum", "mean", "max", "min"))
COMPARE_KINDS = _capi.enum_values("mkc_compare_kind", ("equal", "less", "less_equal", "greater",
                                                       "greater_equal"))
LOGICAL_KINDS = _capi.enum_values("mkc_logical_kind", ("and", "or", "xor", "not"))
INTEGER_KINDS = _capi.enum_values("mkc_binary_kind", ("add", "sub", "mul", "div", "max", "min"))


def _name_bytes(name):
    return None if name is None else name.encode() if isinstance(name, str) else name

PAD_MODES = _capi.enum_values("mkc_pad_mode", ("constant", "reflect", "edge", "wrap"))
RESIZE_MODES = _capi.enum_values("mkc_resize_mode", ("nearest", "linear", "cubic"))
RESIZE_COORDINATES = _capi.enum_values("mkc_resize_coordinates", (
    "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"))
RESIZE_NEAREST = _capi.enum_values("mkc_resize_nearest", (
    "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))


def _choice(op: str, what: str, value, choices: dict, extra: str = "") -> int:
    if not isinstance(value, str) or value not in choices:
        names = ", ".join(repr(c) for c in choices)
        raise InvalidArgumentError(f"{op}: {what} must be one of {names}{extra}, got {value!r}")
    return choices[value]


def _int_list(op: str, what: str, v, kind=_checks.INT64) -> list:
    items = tuple(v) if isinstance(v, (tuple, list, np.ndarray)) else None
    if items is None or not 1 <= len(items) <= 2 * _capi.MAX_NDIMS:
        raise InvalidArgumentError(f"{op}: {what} must be a sequence of ints, got {v!r}")
    return [_checks.integer(i, what, kind) for i in items]


def pad_params(pads, mode, value, axes, name):
    """The mkc_pad_params of a pad call."""
    pads = _int_list("pad", "pads", pads)
    if len(pads) % 2 or len(pads) > 2 * _capi.MAX_NDIMS:
        raise InvalidArgumentError(f"pad: pads must hold a count before and after per axis "
                                   f"(an even number, at most {2 * _capi.MAX_NDIMS}), got "
                                   f"{len(pads)}")
    k = len(pads) // 2
    axes = list(range(k)) if axes is None else _int_list("pad", "axes", axes, _checks.INT32)
    if len(axes) != k:
        raise InvalidArgumentError(f"pad: pads has {k} axes' counts, axes {len(axes)} axes")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"pad: value must be a real number, got {value!r}")
    p = _capi.PadParams()
    _capi.lib.mkc_pad_params_init(ctypes.byref(p))
    p.mode = _choice("pad", "mode", mode, PAD_MODES)
    p.value = float(value)
    p.naxes = k
    for i in range(k):
        p.axes[i], p.begin[i], p.end[i] = axes[i], pads[i], pads[k + i]
    p.name = _name_bytes(name)
    return p


def resize_params(sizes, scales, mode, coordinates, nearest, cubic_coeff_a, exclude_outside,
                  antialias, name):
    """The mkc_resize_params of a resize call."""
    if (sizes is None) == (scales is None):
        raise InvalidArgumentError("resize: give exactly one of sizes and scales, got "
                                   f"{'both' if sizes is not None else 'neither'}")
    p = _capi.ResizeParams()
    _capi.lib.mkc_resize_params_init(ctypes.byref(p))
    p.mode = _choice("resize", "mode", mode, RESIZE_MODES)
    p.coordinates = _choice("resize", "coordinates", coordinates, RESIZE_COORDINATES)
    p.nearest = _choice("resize", "nearest", nearest, RESIZE_NEAREST)
    p.cubic_coeff_a = _checks.real(cubic_coeff_a, "cubic_coeff_a")
    for what, flag in (("exclude_outside", exclude_outside), ("antialias", antialias)):
        if not isinstance(flag, (bool, np.bool_)) and flag not in (0, 1):
            raise InvalidArgumentError(f"resize: {what} must be True or False, got {flag!r}")
        setattr(p, what, int(bool(flag)))
    given = sizes if sizes is not None else scales
    items = tuple(given) if isinstance(given, (tuple, list, np.ndarray)) else None
    what = "sizes" if sizes is not None else "scales"
    if items is None or not 1 <= len(items) <= _capi.MAX_NDIMS:
        raise InvalidArgumentError(f"resize: {what} must be a sequence of 1..{_capi.MAX_NDIMS} "
                                   f"numbers (one per dim of x), got {given!r}")
    if sizes is not None:
        p.nsizes = len(items)
        for i, v in enumerate(items):
            p.sizes[i] = _checks.integer(v, "sizes")
    else:
        p.nscales = len(items)
        for i, v in enumerate(items):
            p.scales[i] = _checks.real(v, "scales")
    p.name = _name_bytes(name)
    return p


def cast_params(dtype, name):
    """The mkc_cast_params of a cast call."""
    to = tensor.dtype_value(dtype, "cast: dtype")
    p = _capi.CastParams()
    _capi.lib.mkc_cast_params_init(ctypes.byref(p))
    p.to = to
    p.name = _name_bytes(name)
    return p


_QUANTIZED = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "s8"}


def quantize_params(dtype, axis, name, fast=False):
    """The mkc_quantize_params of a quantize or dequantize call (dtype:
    quantize's result, uint8 or int8; None for dequantize)."""
    p = _capi.QuantizeParams()
    _capi.lib.mkc_quantize_params_init(ctypes.byref(p))
    if dtype is not None:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            np_dtype = None
        if np_dtype not in _QUANTIZED:
            raise InvalidArgumentError(f"quantize: dtype must be uint8 or int8, got {dtype!r}")
        p.to = tensor.DTYPES[np_dtype]
    p.axis = _checks.integer(axis, "axis")
    p.name = _name_bytes(name)
    p.fast = int(bool(fast))
    return p


def quantization_arrays(op: str, scale, zero_point, zero_dtype):
    """scale as float32 [n] and zero_point [n] (or None): numbers and lists
    as `zero_dtype`, integer arrays as they are; Tensors pass through. A
    number the dtype cannot hold is refused here (numpy would wrap it)."""
    if not isinstance(scale, tensor.Tensor):
        scale = np.ascontiguousarray(np.asarray(scale, dtype=np.float32).reshape(-1))
    if zero_point is None or isinstance(zero_point, tensor.Tensor):
        return scale, zero_point
    if isinstance(zero_point, np.ndarray) and zero_point.dtype.kind in "iu":
        # An array keeps its dtype: the operator checks it against the data's.
        return scale, np.ascontiguousarray(zero_point.reshape(-1))
    given = np.asarray(zero_point)
    if zero_dtype is None:  # dequantize: the zero point's own integer dtype
        if given.dtype not in (np.uint8, np.int8, np.int32):
            raise InvalidArgumentError(
                f"{op}: zero_point must be a uint8, int8 or int32 array (src's dtype), got "
                f"{given.dtype}")
        return scale, np.ascontiguousarray(given.reshape(-1))
    info = np.iinfo(zero_dtype)
    if given.size and (not np.all(np.isfinite(given)) or np.any(given != np.round(given))
                       or given.min() < info.min or given.max() > info.max):
        raise InvalidArgumentError(f"{op}: zero_point must be integers in {info.min}..{info.max} "
                                   f"({np.dtype(zero_dtype)}), got {zero_point!r}")
    return scale, np.ascontiguousarray(given.astype(zero_dtype).reshape(-1))


def expand_params(shape, name):
    """The mkc_expand_params of an expand call."""
    items = tuple(shape) if isinstance(shape, (tuple, list, np.ndarray)) else None
    if items is None or not 1 <= len(items) <= _capi.MAX_NDIMS:
        raise InvalidArgumentError(f"expand: shape must be 1..{_capi.MAX_NDIMS} ints, got "
                                   f"{shape!r}")
    p = _capi.ExpandParams()
    _capi.lib.mkc_expand_params_init(ctypes.byref(p))
    p.ndims = len(items)
    for i, d in enumerate(items):
        p.dims[i] = _checks.integer(d, "shape")
    p.name = _name_bytes(name)
    return p


def _kind_params(mirror, init, kind: int, name):
    """A params struct whose fields are its kind and name."""
    p = mirror()
    init(ctypes.byref(p))
    p.kind = kind
    p.name = _name_bytes(name)
    return p


def compare_params(kind: str, name):
    """The mkc_compare_params of an equal, less, ... call."""
    return _kind_params(_capi.CompareParams, _capi.lib.mkc_compare_params_init,
                        COMPARE_KINDS[kind], name)


def logical_params(kind: str, name):
    """The mkc_logical_params of a logical_and, ... call."""
    return _kind_params(_capi.LogicalParams, _capi.lib.mkc_logical_params_init,
                        LOGICAL_KINDS[kind], name)


def slice_params(starts, ends, axes, steps, name):
    """The mkc_slice_params of a slice call."""

    def ints(v, what, kind):
        items = (v,) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else \
            tuple(v) if isinstance(v, (tuple, list, np.ndarray)) else None
        if items is None or not 1 <= len(items) <= _capi.MAX_NDIMS:
            raise InvalidArgumentError(f"slice: {what} must be an int or 1..{_capi.MAX_NDIMS} "
                                       f"ints, got {v!r}")
        return [_checks.integer(i, what, kind) for i in items]
    starts = ints(starts, "starts", _checks.INT64)
    ends = ints(ends, "ends", _checks.INT64)
    axes = list(range(len(starts))) if axes is None else ints(axes, "axes", _checks.INT32)
    steps = [1] * len(starts) if steps is None else ints(steps, "steps", _checks.INT64)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise InvalidArgumentError("slice: starts, ends, axes and steps must have one entry "
                                   "per sliced axis")
    p = _capi.SliceParams()
    _capi.lib.mkc_slice_params_init(ctypes.byref(p))
    p.naxes = len(starts)
    for k in range(len(starts)):
        p.axes[k], p.starts[k], p.ends[k], p.steps[k] = axes[k], starts[k], ends[k], steps[k]
    p.name = _name_bytes(name)
    return p


def gather_params(axis, name):
    """The mkc_gather_params of a gather call."""
    p = _capi.GatherParams()
    _capi.lib.mkc_gather_params_init(ctypes.byref(p))
    p.axis = _checks.integer(axis, "axis", _checks.INT32)
    p.name = _name_bytes(name)
    return p


def gather_nd_params(batch_dims, name):
    """The mkc_gather_nd_params of a gather_nd call."""
    p = _capi.GatherNdParams()
    _capi.lib.mkc_gather_nd_params_init(ctypes.byref(p))
    p.batch_dims = _checks.integer(batch_dims, "batch_dims", _checks.INT32)
    p.name = _name_bytes(name)
    return p


_RANGE_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64))


def range_params(axis, start, delta, limit_offset, dtype, name):
    """The mkc_range_params of an arange call."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype not in _RANGE_DTYPES:
        raise InvalidArgumentError(f"arange: dtype must be float32, int32 or int64, got "
                                   f"{dtype!r}")
    p = _capi.RangeParams()
    _capi.lib.mkc_range_params_init(ctypes.byref(p))
    p.axis = _checks.integer(axis, "axis", _checks.INT32)
    p.start = _checks.real(start, "start")
    p.delta = _checks.real(delta, "delta")
    p.limit_offset = _checks.real(limit_offset, "limit_offset")
    p.dtype = tensor.DTYPES[np_dtype]
    p.name = _name_bytes(name)
    return p


def integer_binary_params(kind, name):
    """The mkc_binary_params of an integer_binary call."""
    return _kind_params(_capi.BinaryParams, _capi.lib.mkc_binary_params_init,
                        _choice("integer_binary", "kind", kind, INTEGER_KINDS), name)


def reduce_params(kind: str, axes, keepdims, name):
    """The mkc_reduce_params of a reduce_<kind> call."""
    p = _capi.ReduceParams()
    _capi.lib.mkc_reduce_params_init(ctypes.byref(p))
    p.kind = REDUCE_KINDS[kind]
    if axes is None:
        p.naxes = 0
    else:
        items = (axes,) if isinstance(axes, numbers.Integral) and not isinstance(axes, bool) \
            else tuple(axes) if isinstance(axes, (tuple, list)) else None
        if items is None or not 1 <= len(items) <= _capi.MAX_NDIMS:
            raise InvalidArgumentError(f"reduce_{kind}: axes must be None, an int or a sequence "
                                       f"of 1..{_capi.MAX_NDIMS} ints, got {axes!r}")
        p.naxes = len(items)
        for i, a in enumerate(items):
            p.axes[i] = _checks.integer(a, "axes", _checks.INT32)
    if not isinstance(keepdims, (bool, np.bool_)):
        raise InvalidArgumentError(f"reduce_{kind}: keepdims must be a bool, got {keepdims!r}")
    p.keepdims = int(keepdims)
    p.name = _name_bytes(name)
    return p


def functions() -> list:
    """The names of every operator made from the rows, in table order."""
    return [name for name, row in ACTIVATION_TABLE.items() if row.function] + \
        list(POOL_TABLE) + list(BINARY_TABLE) + list(SOFTMAX_TABLE) + list(TABLE_OP_TABLE)


# ----------------------------------------------------------- the source text
# Each maker gives (parameters, keyword-only parameters before name, body
# lines, docstring) for one row; `graph` picks the Graph method's
# form (no out=, no training=: a program infers) over the eager function's.

def _activation_code(name: str, row: Activation, graph: bool):
    params, lines, given = [], [], {}
    kind = repr(name)
    for p in row.params:
        params.append(p.name if p.default is REQUIRED else f"{p.name}={p.default!r}")
        if p.choices is None:
            given[p.sets] = p.name
            continue
        keys = list(p.choices)
        allowed = repr(keys[-1]) if len(keys) == 1 else \
            f"{', '.join(map(repr, keys[:-1]))} or {keys[-1]!r}"
        lines += [f"if {p.name} not in {tuple(keys)!r}:",
                  f'    raise InvalidArgumentError(f"{p.name} must be {allowed}, '
                  f'got {{{p.name}!r}}")']
        kind = repr(p.choices[keys[-1]])
        for key in reversed(keys[:-1]):
            kind = f"{p.choices[key]!r} if {p.name} == {key!r} else {kind}"
    if row.ordered:
        low, high = given["alpha"], given["beta"]
        lines += [f'if not _checks.real({low}, "{low}") <= _checks.real({high}, "{high}"):',
                  f'    raise InvalidArgumentError(f"{name}: {low} ({{{low}}}) must be <= '
                  f'{high} ({{{high}}})")']
    args = [kind]
    if "beta" in given:
        args += [given.get("alpha", "None"), given["beta"]]
    elif "alpha" in given:
        args.append(given["alpha"])
    call = "self.activation" if graph else "activation"
    tail = "name=name" if graph else "name=name, out=out"
    lines.append(f"return {call}(x, {', '.join(args)}, {tail})")
    return ["x"] + params, [], lines, row.doc


def _pool_code(name: str, row: Pool, graph: bool):
    windowed = row.rank > 0
    if row.kind == "max":
        kind = str(POOL_KINDS["max"])
    elif windowed:
        kind = (f"{POOL_KINDS['avg_include_pad']} if count_include_pad "
                f"else {POOL_KINDS['avg_exclude_pad']}")
    else:  # no padding: including it or not is the same
        kind = str(POOL_KINDS["avg_include_pad"])
    fmt = "NCDHW" if row.rank == 3 else "NCHW"
    doc = row.doc
    if windowed:
        params = ["x", "kernel_size", "stride=None", "padding=0", "dilation=1"]
        keywords = ["ceil_mode=False"] + (["count_include_pad=True"] if row.kind == "avg" else [])
        keywords.append(f"data_format={fmt!r}")
        window = "kernel_size, stride, padding, ceil_mode"
        if not graph:
            keywords.append("training=False")
            doc += f"\ntraining: leave the training descriptor for ``mkcache.grad.{name}``."
        extra = ", dilation=dilation" if graph else ", training=training, dilation=dilation"
    else:
        params, keywords = ["x"], [f"data_format={fmt!r}"]
        window, extra = "None, None, 0, False", ", global_=True"
    if graph:
        body = f"return self._pool({kind}, x, {row.rank}, {window}, data_format, name{extra})"
    else:
        body = f"return _pool({kind}, x, {row.rank}, {window}, data_format, name, out{extra})"
    return params, keywords, [body], doc


def _binary_code(name: str, row: Binary, graph: bool):
    kind = BINARY[name]
    body = (f"return self._binary({kind}, a, b, name)" if graph
            else f"return _binary_op({kind}, a, b, name, out)")
    return ["a", "b"], [], [body], row.doc


def _softmax_code(name: str, row: Softmax, graph: bool):
    log = int(row.log)
    if graph:
        return ["x", "axis=-1"], [], [f"return self._softmax(x, axis, {log}, name)"], row.doc
    return ["x", "axis=-1"], [], [
        "a = _axis(axis)",
        f"return _unary(x, lambda h, n, d: _softmax(a, {log}, n, h, d), name, out)"], row.doc


def _table_op_code(name: str, row: TableOp, graph: bool):
    op = _capi.OPS[row.op]
    params = f"_operators.{row.build}" if row.build else "None"
    inputs = "(" + "".join(f"{name}, " for name in row.inputs) + ")"
    body = (f"return self._table_node({op}, {params}, {inputs})" if graph
            else f"return _op_run({op}, {params}, {inputs}, out)")
    return list(row.inputs) + list(row.params), [], [body], row.doc


def _rows():
    for name, row in ACTIVATION_TABLE.items():
        if row.function:
            yield name, row, _activation_code
    for table, maker in ((POOL_TABLE, _pool_code), (BINARY_TABLE, _binary_code),
                         (SOFTMAX_TABLE, _softmax_code), (TABLE_OP_TABLE, _table_op_code)):
        for name, row in table.items():
            yield name, row, maker


def _make(namespace: dict, name: str, row, maker, graph: bool):
    """The function `maker` writes for `row`, its globals `namespace` (the
    module it belongs to: the body calls that module's helpers)."""
    params, keywords, lines, doc = maker(name, row, graph)
    # An operator without a params struct has no cache name to give.
    named = not isinstance(row, TableOp) or bool(row.build)
    keywords = keywords + (["name=None"] if named else []) + ([] if graph else ["out=None"])
    head = (["self"] if graph else []) + params
    # Left a string: compile() inherits this module's deferred annotations.
    result = "Value" if graph else "Tensor"
    star = f", *, {', '.join(keywords)}" if keywords else ""
    source = f"def {name}({', '.join(head)}{star}) -> {result}:\n" + \
        "".join(f"    {line}\n" for line in lines)
    # Registered with linecache so tracebacks and inspect show the source.
    filename = f"<mkcache {'Graph' if graph else 'function'} {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    made = {}
    exec(compile(source, filename, "exec"), namespace, made)  # noqa: S102 (our own text)
    fn = made[name]
    fn.__doc__ = doc
    return fn


def define_functions(namespace: dict, written: tuple = ()) -> None:
    """Defines the eager function of every row in `namespace` (mkcache.ops'
    globals), but those `written` out by hand there (relu: its fast path)."""
    for name, row, maker in _rows():
        if name not in written:
            namespace[name] = _make(namespace, name, row, maker, graph=False)


def define_methods(cls, namespace: dict) -> None:
    """Defines the Graph method of every row on `cls` (`namespace`: the
    globals of its module)."""
    for name, row, maker in _rows():
        fn = _make(namespace, name, row, maker, graph=True)
        fn.__qualname__ = f"{cls.__name__}.{name}"
        setattr(cls, name, fn)
