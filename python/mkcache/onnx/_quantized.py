"""The converters of ONNX's quantized operators: QuantizeLinear and
DequantizeLinear, QLinearConv and QLinearMatMul, ConvInteger and
MatMulInteger, and the quantized convolutions and matmuls the QDQ pattern
folds (_patterns.py).

A QLinear operator whose weights are constant int8 with zero point 0 runs
as mkcache's quantized_conv2d / quantized_linear (exact integer sums,
requantized inside the operator). Every other case goes through float32:
each input minus its zero point (an exact small integer), the float
convolution or matmul, the product of the scales, and quantize. The float
sums are the integer sums exactly while every partial sum stays below 2^24
(float32's 24-bit significand holds every integer up to there); past that a
sum rounds by less than 2^-24 of itself, far below the result's quantization
step. ConvInteger and MatMulInteger promise exact int32 results, so they are
converted only where a bound on the sums proves them exact."""
from __future__ import annotations

import numpy as np

from ._base import KNOWN_TYPES, Refusal, attributes
from ._converters import INTERNAL, _axis, _spatial, conv_of, converter

_U8, _S8, _S32, _F32, _F16, _BF16 = 2, 3, 6, 1, 10, 16
_EIGHT_BIT = {_U8: np.uint8, _S8: np.int8}
# Past this, float32 no longer holds every integer.
_EXACT = 2 ** 24


def _type_name(t) -> str:
    try:
        from onnx import helper  # noqa: PLC0415 (the optional dependency)
        return helper.tensor_dtype_to_string(t).replace("TensorProto.", "").lower()
    except Exception:  # noqa: BLE001 (a type this onnx does not know)
        return f"element type {t}"


def _type_of(ctx, name):
    """The ONNX element type of `name`, or None where it is not known."""
    if name in ctx.known:
        dtype = ctx.known[name].dtype
        t = next((t for t, d in KNOWN_TYPES.items() if np.dtype(d) == dtype), None)
        if t is None:
            from onnx import helper  # noqa: PLC0415
            try:
                t = helper.np_dtype_to_tensor_dtype(dtype)
            except Exception:  # noqa: BLE001
                return None
        return t
    return ctx.types.get(name)


def _input(node, i):
    return node.input[i] if len(node.input) > i and node.input[i] else None


def _size(ctx, name) -> int | None:
    shape = ctx.shape(name)
    if shape is None or any(d is None for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _float_scale(ctx, name):
    """A scale as float32: a [n] array when known (float16 and bfloat16
    scales convert exactly), else its graph value cast to float32."""
    if name in ctx.known:
        s = np.asarray(ctx.known[name]).astype(np.float32).reshape(-1)
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise Refusal(f"scale {name!r} must be finite and > 0, got {s}")
        return s
    v = ctx.value(name)
    return v if _type_of(ctx, name) == _F32 else ctx.graph.cast(v, np.float32)


def _zero_point(ctx, name, dtype):
    """A zero point as an array of `dtype` ([n]) when known, else its graph
    value (cast to int32 where `dtype` is int32)."""
    if name in ctx.known:
        return np.ascontiguousarray(np.asarray(ctx.known[name]).astype(dtype).reshape(-1))
    v = ctx.value(name)
    return ctx.graph.cast(v, np.int32) if dtype == np.int32 else v


def _per_axis(ctx, scale, x, axis_attr):
    """The axis quantize / dequantize apply a scale of more than one value
    along (1 where there is one value: the library's per-tensor case)."""
    n = _size(ctx, scale)
    if n is None:
        raise Refusal(f"the size of scale {scale!r} is not known")
    if n == 1:
        return 1, n
    if len(ctx.shape(scale) or ()) != 1:
        raise Refusal("a scale of more than one dim (block quantization) is not supported")
    return _axis(axis_attr, ctx.rank(x, "the input")), n


def _broadcast_along(a, axis, rank):
    """Array `a` ([n], or one value) shaped to broadcast along `axis` of a
    rank-`rank` array."""
    a = np.asarray(a).reshape(-1)
    if a.size == 1:
        return a.reshape(())
    return a.reshape([-1] + [1] * (rank - 1 - axis))


# ------------------------------------------------- QuantizeLinear, DequantizeLinear

def _refuse_blocks(a):
    if a.get("block_size", 0):
        raise Refusal("block quantization (block_size) is not supported")


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx, node):
    a = attributes(node)
    _refuse_blocks(a)
    x, scale, zp = node.input[0], node.input[1], _input(node, 2)
    to = _type_of(ctx, zp) if zp else (a.get("output_dtype", 0) or _U8)
    if zp and a.get("output_dtype", 0) not in (0, to):
        raise Refusal("output_dtype differs from the zero point's type")
    if to not in _EIGHT_BIT:
        raise Refusal(f"quantizing to {_type_name(to)} (this version quantizes to uint8 and "
                      "int8)")
    dtype = _EIGHT_BIT[to]
    axis, _ = _per_axis(ctx, scale, x, a.get("axis", 1))
    known = x in ctx.known and scale in ctx.known and (zp is None or zp in ctx.known)
    if known:
        rank = ctx.known[x].ndim
        s = _broadcast_along(_float_scale(ctx, scale), axis, rank)
        z = 0 if zp is None else _broadcast_along(ctx.known[zp], axis, rank).astype(np.int64)
        info = np.iinfo(dtype)
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.rint(np.asarray(ctx.known[x], np.float32) / s)
        q = np.where(np.isnan(q), 0, q)
        return [np.clip(q + z, info.min, info.max).astype(dtype)]
    xv = _float_input(ctx, x)
    z = None if zp is None else _zero_point(ctx, zp, dtype)
    return [ctx.graph.quantize(xv, _float_scale(ctx, scale), z, dtype=dtype, axis=axis,
                               name=node.name or None)]


def _float_input(ctx, name):
    """Graph value `name` as float32 (float16 and bfloat16 convert exactly)."""
    t = _type_of(ctx, name)
    if t not in (_F32, _F16, _BF16, None):
        raise Refusal(f"an input of {_type_name(t)} (this version quantizes float32, float16 "
                      "and bfloat16)")
    v = ctx.value(name)
    return v if t in (_F32, None) else ctx.graph.cast(v, np.float32)


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx, node):
    a = attributes(node)
    _refuse_blocks(a)
    x, scale, zp = node.input[0], node.input[1], _input(node, 2)
    t = _type_of(ctx, x)
    if t not in (_U8, _S8, _S32):
        raise Refusal(f"dequantizing {_type_name(t)} (this version dequantizes uint8, int8 "
                      "and int32)")
    out = _type_of(ctx, scale)
    if a.get("output_dtype", 0) not in (0, out):
        raise Refusal("output_dtype differs from the scale's type")
    axis, _ = _per_axis(ctx, scale, x, a.get("axis", 1))
    if x in ctx.known and scale in ctx.known and (zp is None or zp in ctx.known):
        rank = ctx.known[x].ndim
        s = _broadcast_along(_float_scale(ctx, scale), axis, rank)
        z = 0 if zp is None else _broadcast_along(ctx.known[zp], axis, rank).astype(np.int64)
        y = (ctx.known[x].astype(np.int64) - z).astype(np.float32) * s
        return [y.astype(KNOWN_TYPES.get(out, np.float32))]
    z = None if zp is None else _zero_point(ctx, zp, np.dtype(KNOWN_TYPES[t]))
    y = ctx.graph.dequantize(ctx.value(x), _float_scale(ctx, scale), z, axis=axis,
                             name=node.name or None)
    if out in (_F16, _BF16):  # the result has the scale's type
        y = ctx.graph.cast(y, "float16" if out == _F16 else "bfloat16")
    return [y]


# ------------------------------------------------- DynamicQuantizeLinear

def _dynamic_quantization(x):
    """DynamicQuantizeLinear of a known array, as ONNX's reference computes
    it (float32 throughout): (y, y_scale, y_zero_point)."""
    x = np.asarray(x, np.float32)
    hi = np.float32(max(0.0, x.max())) if x.size else np.float32(0)
    lo = np.float32(min(0.0, x.min())) if x.size else np.float32(0)
    with np.errstate(over="ignore", under="ignore"):
        scale = np.float32(1.0 if hi == lo else hi - lo) / np.float32(255)
    if not (np.all(np.isfinite(x)) and np.isfinite(scale) and scale > 0):
        raise Refusal("a constant input whose scale is not finite and > 0 (a NaN or an "
                      "infinity in it, or a range float32 cannot hold)")
    zero = np.float32(np.rint(np.clip(-lo / scale, 0, 255)))
    y = np.clip(np.rint(x / scale) + zero, 0, 255)
    return [y.astype(np.uint8), np.array(scale, np.float32), np.array(zero).astype(np.uint8)]


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node):
    """uint8 quantization of x by its own range widened to hold 0:
    scale = (max(0, max x) - min(0, min x)) / 255, zero point = the
    saturated round(-min(0, min x) / scale), y = QuantizeLinear's result of
    x by them. The graph takes the range, then quantizes -min(0, min x) by
    the scale (which rounds and saturates as the zero point wants) and x by
    both; every step is one float32 operation rounded once, the reference's
    arithmetic, so the three results are the reference's exactly.

    An input of zeros only has max = min: ONNX's reference then takes the
    range as 1 (scale 1/255; onnxruntime gives 1); y and the zero point are
    0 either way. Where ONNX leaves the results undefined - a NaN or an
    infinity in x (the sum of x * 0 is then NaN and is added to the range),
    a range past float32's largest, or one so small that the scale rounds
    to 0 - the scale is not finite and > 0, and the run fails as
    quantize does on such a scale."""
    x = node.input[0]
    t = _type_of(ctx, x)
    if t not in (_F32, None):
        raise Refusal(f"an input of {_type_name(t)} (DynamicQuantizeLinear takes float32)")
    if x in ctx.known:
        return _dynamic_quantization(ctx.known[x])
    g, xv = ctx.graph, ctx.value(x)
    hi = g.maximum(g.reduce_max(xv), 0.0)
    lo = g.minimum(g.reduce_min(xv), 0.0)
    span = g.add(g.sub(hi, lo), g.reduce_sum(g.mul(xv, 0.0)))
    span = g.where(g.equal(span, 0.0), 1.0, span)
    scale = g.div(span, 255.0)
    zero = g.quantize(g.mul(lo, -1.0), scale, dtype=np.uint8)
    return [g.quantize(xv, scale, zero, dtype=np.uint8, name=node.name or None), scale, zero]


# ------------------------------------------------- the float32 route

def _range_from_zero(ctx, name, zp):
    """The largest |x - zero point| x's type allows (its zero points known,
    else their worst)."""
    t = _type_of(ctx, name)
    lo, hi = (0, 255) if t == _U8 else (-128, 127)
    if zp is not None and zp in ctx.known:
        z = np.asarray(ctx.known[zp], np.int64).reshape(-1)
        return int(max(hi - z.min(), z.max() - lo))
    return hi - lo


def _shifted(ctx, name, zp, axis, runs=None, run_axis=0):
    """float32 x - zero point (exact: small integers), a constant where both
    are known; the zero point one value, or one per index of `axis`. With
    `runs` ([start, end) along `run_axis`), the list of those parts."""
    t = _type_of(ctx, name)
    if t not in _EIGHT_BIT:
        raise Refusal(f"{name!r} is {_type_name(t)} (this version takes uint8 and int8)")
    whole = runs is None
    if whole or len(runs) == 1:  # the whole of x
        runs = [(None, None)]
    if name in ctx.known and (zp is None or zp in ctx.known):
        x = ctx.known[name].astype(np.int32)
        z = 0 if zp is None else _broadcast_along(ctx.known[zp], axis, x.ndim).astype(np.int32)
        d = np.moveaxis((x - z).astype(np.float32), run_axis, 0)
        parts = [ctx.graph.constant(np.ascontiguousarray(np.moveaxis(d[k0:k1], 0, run_axis)))
                 for k0, k1 in runs]
        return parts[0] if whole else parts
    v = ctx.value(name)
    if zp is None:
        v = ctx.graph.cast(v, np.float32)
    else:
        n = _size(ctx, zp)
        if n is None:
            raise Refusal(f"the size of zero point {zp!r} is not known")
        z = _zero_point(ctx, zp, _EIGHT_BIT[t])
        v = ctx.graph.dequantize(v, np.ones(n, np.float32), z, axis=axis if n > 1 else 1)
    if whole:
        return v
    if runs == [(None, None)]:
        return [v]
    return [ctx.graph.slice(v, [k0], [k1], axes=[run_axis]) for k0, k1 in runs]


def _times_scales(ctx, acc, factors, rank):
    """acc times its scales, each (name, the axis of acc it runs along):
    known ones multiplied first (in float32, as ONNX Runtime does), then
    those given at run time."""
    product = np.ones((), np.float32)
    values = []
    for name, axis in factors:
        s = _float_scale(ctx, name)
        if isinstance(s, np.ndarray):
            product = product * _broadcast_along(s, axis, rank)
            continue
        n = _size(ctx, name)
        if n is None:
            raise Refusal(f"the size of scale {name!r} is not known")
        values.append(s if n == 1 else ctx.graph.reshape(s, [-1] + [1] * (rank - 1 - axis)))
    y = acc
    if product.ndim == 0:
        product = product.reshape(1)
    if not np.all(product == 1) or not values:
        y = ctx.graph.mul(y, ctx.graph.constant(np.ascontiguousarray(product.astype(np.float32))))
    for v in values:
        y = ctx.graph.mul(y, v)
    return y


def _requantize(ctx, node, y, scale, zp):
    to = _type_of(ctx, zp) if zp else _U8
    if to not in _EIGHT_BIT:
        raise Refusal(f"a result of {_type_name(to)} (this version gives uint8 and int8)")
    dtype = _EIGHT_BIT[to]
    z = None if zp is None else _zero_point(ctx, zp, dtype)
    return ctx.graph.quantize(y, _float_scale(ctx, scale), z, dtype=dtype,
                              name=node.name or None)


def _scale_size(ctx, name, what):
    n = _size(ctx, name)
    if n is None:
        raise Refusal(f"the size of {what} is not known")
    return n


# ------------------------------------------------- QLinearConv, ConvInteger

class _QConv:
    """The inputs of a quantized convolution by role: QLinearConv's order
    (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point, B); B an int32 bias in units of x_scale * w_scale, or, for
    the folded QDQ pattern, a float bias in real units."""

    def __init__(self, node):
        (self.x, self.xs, self.xz, self.w, self.ws, self.wz, self.ys, self.yz, self.b) = (
            _input(node, i) for i in range(9))


def _symmetric_int8(ctx, w, wz):
    """The constant int8 weights when their zero points are all 0, else None."""
    if w not in ctx.known or ctx.known[w].dtype != np.int8:
        return None
    if wz is not None and (wz not in ctx.known or np.any(np.asarray(ctx.known[wz]) != 0)):
        return None
    return ctx.known[w]


def _seven_bit_kernels() -> bool:
    """Whether oneDNN's int8 kernels on this CPU (no VNNI) add pairs of
    products in 16 bits, so that they need weights in -63..63."""
    from .. import build_info  # noqa: PLC0415 (the package imports this module)
    return build_info()["isa"] in ("sse41", "avx", "avx2", "avx512_core")


def _kernel_weights(weights):
    """Constant int8 weights the quantized operators take on this CPU: full
    8-bit ones go the float32 route where the int8 kernels need 7 bits (a
    program's oneDNN node would otherwise saturate them)."""
    if weights is not None and _seven_bit_kernels() and \
            np.abs(weights.astype(np.int16)).max() > 63:
        return None
    return weights


def _qlinear_conv(ctx, node, float_bias: bool, activation):
    q = _QConv(node)
    rank = ctx.rank(q.x, "the input")
    if rank not in (3, 4, 5):
        raise Refusal(f"a {rank - 2}-D convolution (this version takes 1-D to 3-D)")
    wshape = ctx.shape(q.w)
    if wshape is None or any(d is None for d in wshape):
        raise Refusal("the weights' shape is not known")
    if _type_of(ctx, q.x) not in _EIGHT_BIT:
        raise Refusal(f"x of {_type_name(_type_of(ctx, q.x))} (uint8 and int8 are taken)")
    if _scale_size(ctx, q.xs, "x_scale") != 1:
        raise Refusal("a per-channel x_scale is not supported (ONNX gives one per tensor)")
    n_out = wshape[0]
    if _scale_size(ctx, q.ws, "w_scale") not in (1, n_out):
        raise Refusal(f"w_scale must have 1 or {n_out} values")
    weights = _kernel_weights(_symmetric_int8(ctx, q.w, q.wz))
    known_scales = q.xs in ctx.known and q.ws in ctx.known
    if weights is not None and rank == 4 and (q.b is None or (known_scales and q.b in ctx.known)):
        return _quantized_conv(ctx, node, q, weights, float_bias, activation)
    return _float_route_conv(ctx, node, q, rank, wshape, float_bias, activation)


def _bias_in_real_units(ctx, q, float_bias):
    if q.b is None:
        return None
    b = np.asarray(ctx.known[q.b])
    if float_bias:
        return np.ascontiguousarray(b.astype(np.float32).reshape(-1))
    # B counts units of x_scale * w_scale[o].
    scale = (_float_scale(ctx, q.xs) * _float_scale(ctx, q.ws)).astype(np.float64)
    return np.ascontiguousarray((b.astype(np.float64).reshape(-1) * scale).astype(np.float32))


def _quantized_conv(ctx, node, q, weights, float_bias, activation):
    strides, dilations, padding = _spatial(ctx, node, 2, list(weights.shape[2:]))
    to = _type_of(ctx, q.yz) if q.yz else _U8
    if to not in _EIGHT_BIT:
        raise Refusal(f"a result of {_type_name(to)} (this version gives uint8 and int8)")
    return [ctx.graph.quantized_conv2d(
        ctx.value(q.x), np.ascontiguousarray(weights), _bias_in_real_units(ctx, q, float_bias),
        src_scale=_float_scale(ctx, q.xs), weight_scale=_float_scale(ctx, q.ws),
        src_zero_point=None if q.xz is None else _zero_point(ctx, q.xz, np.int32),
        dst_scale=_float_scale(ctx, q.ys),
        dst_zero_point=None if q.yz is None else _zero_point(ctx, q.yz, np.int32),
        dst_dtype=_EIGHT_BIT[to], stride=tuple(strides), padding=padding,
        dilation=tuple(dilations), groups=attributes(node).get("group", 1),
        activation=activation, name=node.name or None)]


def _conv_sums(ctx, node, x, xz, w, wz, bias, rank, wshape):
    """The float32 convolution of x - x_zero_point by w - w_zero_point (the
    zero points of w one per output channel or one for all)."""
    xf, wf = _shifted(ctx, x, xz, 1), _shifted(ctx, w, wz, 0)
    if rank == 3:  # a 1-D convolution as the 2-D one over [N, C, 1, W]
        xf = ctx.graph.reshape(xf, (0, 0, 1, -1))
        wf = ctx.graph.reshape(wf, (0, 0, 1, -1))
    return conv_of(ctx, node, xf, wf, bias, wshape, rank)


def _float_route_conv(ctx, node, q, rank, wshape, float_bias, activation):
    int_bias = None
    if q.b is not None and not float_bias:  # integer units: added to the sums, exactly
        int_bias = ctx.graph.constant(np.ascontiguousarray(
            np.asarray(ctx.known[q.b]).astype(np.float32).reshape(-1))) if q.b in ctx.known \
            else ctx.graph.cast(ctx.value(q.b), np.float32)
    acc = _conv_sums(ctx, node, q.x, q.xz, q.w, q.wz, int_bias, rank, wshape)
    y = _times_scales(ctx, acc, [(q.xs, 1), (q.ws, 1)], rank)
    if q.b is not None and float_bias:
        b = np.asarray(ctx.known[q.b], np.float32).reshape([-1] + [1] * (rank - 2))
        y = ctx.graph.add(y, ctx.graph.constant(np.ascontiguousarray(b)))
    if activation == "relu":
        y = ctx.graph.relu(y)
    return [_requantize(ctx, node, y, q.ys, q.yz)]


@converter("QLinearConv", since=10)
def qlinear_conv(ctx, node):
    return _qlinear_conv(ctx, node, float_bias=False, activation=None)


def _exact_runs(rows, span, what):
    """Runs [start, end) of a reduction axis whose sums float32 holds
    exactly: rows [K, N] bound |w - zero point| summed over the rest of one
    output's reduction, per index of the axis and output (N 1: one bound for
    every output); span the largest |x - zero point|. Each run ends before
    an output's partial sums could reach 2^24 (the integer sums are then
    exact in any order); one run where the whole axis stays below."""
    csum = np.cumsum(np.asarray(rows, np.int64), axis=0)
    runs, start, k = [], 0, csum.shape[0]
    while start < k:
        base = csum[start - 1] if start else 0
        peak = (csum[start:] - base).max(axis=1) * span  # nondecreasing along the axis
        n = int(np.searchsorted(peak, _EXACT))
        if n == 0:
            raise Refusal(f"{what}: the sums over one index of its reduced axis may reach "
                          f"{int(peak[0])} (float32, which this version computes them in, "
                          "holds integers exactly only below 2^24)")
        runs.append((start, start + n))
        start += n
    return runs or [(0, k)]


def _weight_rows(ctx, w, wz, axis, out_axis):
    """|w - zero point| summed over every axis of w but the reduction axis
    `axis` and the output axis `out_axis`, as [reduction, outputs] from
    constant weights, else its worst per index of `axis` as [reduction, 1];
    the zero points one value, or one per index of `out_axis`."""
    shape = ctx.shape(w)
    if shape is None or any(d is None for d in shape):
        raise Refusal(f"the shape of {w!r} is not known")
    if w in ctx.known and (wz is None or wz in ctx.known):
        wv = ctx.known[w].astype(np.int64)
        z = 0 if wz is None else _broadcast_along(ctx.known[wz], out_axis, wv.ndim).astype(
            np.int64)
        d = np.moveaxis(np.abs(wv - z), (axis, out_axis), (0, 1))
        return d.reshape(d.shape[0], d.shape[1], -1).sum(2)
    inner = [d for i, d in enumerate(shape) if i not in (axis, out_axis)]
    per_row = int(np.prod(inner, dtype=np.int64)) * _range_from_zero(ctx, w, wz)
    return np.full((shape[axis], 1), per_row, np.int64)


@converter("ConvInteger", since=10)
def conv_integer(ctx, node):
    """The int32 sums as float32 convolutions, exact below 2^24: where the
    bound on an output's sum passes that, a convolution per run of input
    channels (one group only), their sums added as int32."""
    x, w, xz, wz = node.input[0], node.input[1], _input(node, 2), _input(node, 3)
    rank = ctx.rank(x, "the input")
    if rank not in (3, 4, 5):
        raise Refusal(f"a {rank - 2}-D convolution (this version takes 1-D to 3-D)")
    wshape = ctx.shape(w)
    if wshape is None or any(d is None for d in wshape):
        raise Refusal("the weights' shape is not known")
    runs = _exact_runs(_weight_rows(ctx, w, wz, 1, 0), _range_from_zero(ctx, x, xz),
                       "ConvInteger")
    if len(runs) > 1 and attributes(node).get("group", 1) != 1:
        raise Refusal("ConvInteger: a grouped convolution whose integer sums may reach 2^24 "
                      "(float32, which this version computes them in, holds integers exactly "
                      "only below 2^24)")
    g, sums = ctx.graph, None
    parts = zip(runs, _shifted(ctx, x, xz, 1, runs, 1), _shifted(ctx, w, wz, 0, runs, 1))
    for (c0, c1), xs, ws in parts:
        shape = list(wshape) if len(runs) == 1 else [wshape[0], c1 - c0] + list(wshape[2:])
        if rank == 3:  # a 1-D convolution as the 2-D one over [N, C, 1, W]
            xs, ws = g.reshape(xs, (0, 0, 1, -1)), g.reshape(ws, (0, 0, 1, -1))
        part = g.cast(conv_of(ctx, node, xs, ws, None, shape, rank), np.int32)
        sums = part if sums is None else g.integer_binary(sums, part)
    return [sums]


# ------------------------------------------------- QLinearMatMul, MatMulInteger

def _qlinear_matmul(ctx, node, bias_name, weights_nk: bool, activation):
    """QLinearMatMul's inputs (a, a_scale, a_zero_point, b, b_scale,
    b_zero_point, y_scale, y_zero_point); `bias_name` a float bias in real
    units (the folded QDQ pattern); weights_nk: b is [N, K] (a Gemm's
    transB)."""
    a, as_, az, b, bs, bz, ys, yz = (_input(node, i) for i in range(8))
    ra, rb = ctx.rank(a, "A"), ctx.rank(b, "B")
    if ra < 2 or rb < 2:
        raise Refusal("a 1-D operand is not supported")
    if _type_of(ctx, a) not in _EIGHT_BIT:
        raise Refusal(f"a of {_type_name(_type_of(ctx, a))} (uint8 and int8 are taken)")
    bshape = ctx.shape(b)
    n = bshape[-2] if weights_nk else bshape[-1]
    if _scale_size(ctx, bs, "b_scale") not in (1, n):
        raise Refusal(f"b_scale must have 1 or {n} values")
    a_rows = _scale_size(ctx, as_, "a_scale")
    weights = _kernel_weights(_symmetric_int8(ctx, b, bz))
    if weights is not None and weights.ndim == 2 and a_rows == 1:
        w = weights if weights_nk else weights.T
        to = _type_of(ctx, yz) if yz else _U8
        if to not in _EIGHT_BIT:
            raise Refusal(f"a result of {_type_name(to)} (this version gives uint8 and int8)")
        bias = None if bias_name is None else np.ascontiguousarray(
            np.asarray(ctx.known[bias_name], np.float32).reshape(-1))
        return [ctx.graph.quantized_linear(
            ctx.value(a), np.ascontiguousarray(w), bias, src_scale=_float_scale(ctx, as_),
            weight_scale=_float_scale(ctx, bs),
            src_zero_point=None if az is None else _zero_point(ctx, az, np.int32),
            dst_scale=_float_scale(ctx, ys),
            dst_zero_point=None if yz is None else _zero_point(ctx, yz, np.int32),
            dst_dtype=_EIGHT_BIT[to], activation=activation, name=node.name or None)]
    acc = _matmul_sums(ctx, a, az, b, bz, weights_nk)
    rank = max(ra, rb)
    y = _times_scales(ctx, acc, [(as_, rank - 2), (bs, rank - 1)], rank)
    if bias_name is not None:
        y = ctx.graph.add(y, ctx.graph.constant(np.ascontiguousarray(
            np.asarray(ctx.known[bias_name], np.float32).reshape(-1))))
    if activation == "relu":
        y = ctx.graph.relu(y)
    return [_requantize(ctx, node, y, ys, yz)]


def _matmul_sums(ctx, a, az, b, bz, weights_nk=False):
    """The float32 matmul of a - a_zero_point (one per row or one for all)
    by b - b_zero_point (one per column or one for all)."""
    ra, rb = ctx.rank(a, "A"), ctx.rank(b, "B")
    af = _shifted(ctx, a, az, ra - 2)
    bf = _shifted(ctx, b, bz, rb - 2 if weights_nk else rb - 1)
    return ctx.graph.matmul(af, bf, transpose_b=weights_nk)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node):
    return _qlinear_matmul(ctx, node, None, False, None)


@converter("MatMulInteger", since=10)
def matmul_integer(ctx, node):
    """The int32 sums as float32 matmuls, exact below 2^24: where the bound
    on an output's sum passes that (a long inner dim of full 8-bit values),
    a matmul per run of the inner dim, their sums added as int32."""
    a, b, az, bz = node.input[0], node.input[1], _input(node, 2), _input(node, 3)
    ra, rb = ctx.rank(a, "A"), ctx.rank(b, "B")
    if ra < 2 or rb < 2:
        raise Refusal("a 1-D operand is not supported")
    if rb == 2:
        rows = _weight_rows(ctx, b, bz, 0, 1)
    else:  # batched B: each index of the inner dim at its worst
        inner = ctx.shape(b)[-2]
        if inner is None:
            raise Refusal("the inner dim of B is not known")
        rows = np.full((inner, 1), _range_from_zero(ctx, b, bz), np.int64)
    runs = _exact_runs(rows, _range_from_zero(ctx, a, az), "MatMulInteger")
    g, sums = ctx.graph, None
    parts = zip(_shifted(ctx, a, az, ra - 2, runs, ra - 1),
                _shifted(ctx, b, bz, rb - 1, runs, rb - 2))
    for ap, bp in parts:
        part = g.cast(g.matmul(ap, bp), np.int32)
        sums = part if sums is None else g.integer_binary(sums, part)
    return [sums]


# The QDQ pattern's folded operators (_patterns.py): QLinearConv's and
# QLinearMatMul's inputs, a float bias in real units as the last, and the
# activation between the float operator and its QuantizeLinear.
def _qdq_conv(ctx, node):
    return _qlinear_conv(ctx, node, float_bias=True,
                         activation=attributes(node).get("activation") or None)


def _qdq_matmul(ctx, node):
    a = attributes(node)
    return _qlinear_matmul(ctx, node, _input(node, 8), bool(a.get("weights_nk", 0)),
                           a.get("activation") or None)


INTERNAL.update({"QDQConv": _qdq_conv, "QDQMatMul": _qdq_matmul})
