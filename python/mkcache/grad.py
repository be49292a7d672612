"""Backward (grad) operators: the gradients of the forward ops.

Each function takes ``dy`` (the gradient of the loss with respect to the
forward's output) followed by the forward's own arguments, and returns the
gradients with respect to the forward's inputs. Ops with several inputs
return a named tuple (``None`` for what was not asked with ``wrt``)::

    y = mkcache.conv2d(x, w, b, padding=1, training=True, name="conv1")
    g = mkcache.grad.conv2d(dy, x, w, b, padding=1, name="conv1")
    g.x, g.weight, g.bias

Forward -> backward: a forward run with
``training=True`` leaves its oneDNN primitive descriptor in the cache under
a key without thread id; the grad call with the same arguments and name finds
it on any thread (without it the grad op builds its own), and it never uses
what a forward with other arguments left. Data of one execution (max-pool
indices, the LRN workspace, layer-norm statistics) is recomputed from the x
given to the grad op, so it is right whatever x holds now.
Gradients come back like the forward's outputs: dx in the forward's layout,
weight/bias/scale gradients plain in the parameter's shape. Fused
activations and residual sums have no backward: run them as separate ops.

dtypes: float32, or bfloat16 for mixed-precision training (where oneDNN has
bfloat16 kernels: AVX-512 or AVX2-VNNI-2). dy has the forward's data dtype;
the data gradients (x, a binary's or a matmul's a and b, concat's inputs)
come back in it, the weight, bias, scale and shift gradients always in
float32 (accumulated in float32), for float32 master weights::

    w16 = mkcache.cast(w, mkcache.bfloat16)            # w: the float32 master
    y = mkcache.conv2d(x16, w16, b, training=True, name="conv1")  # bfloat16
    g = grad.conv2d(dy16, x16, w16, b, name="conv1")
    g.x.dtype, g.weight.dtype                          # bfloat16, float32
"""
from __future__ import annotations

import ctypes
from collections import namedtuple

from . import _capi, _checks, _operators, ops
from .errors import InvalidArgumentError
from .tensor import Tensor

_lib = _capi.lib

ConvGrads = namedtuple("ConvGrads", "x weight bias")
BinaryGrads = namedtuple("BinaryGrads", "a b")
MatmulGrads = namedtuple("MatmulGrads", "a b bias")
LinearGrads = namedtuple("LinearGrads", "x weight bias")
NormGrads = namedtuple("NormGrads", "x scale shift")

__all__ = [
    "ConvGrads", "LinearGrads", "NormGrads", "BinaryGrads", "MatmulGrads",
    "add", "sub", "mul", "div", "maximum", "minimum", "matmul", "concat", "reshape", "conv2d", "conv3d", "conv2d_transpose",
    "max_pool2d", "avg_pool2d", "max_pool3d", "avg_pool3d", "global_max_pool", "global_avg_pool",
    "activation", "softmax", "log_softmax", "linear", "layer_norm", "batch_norm", "lrn",
]


def _wants(wrt, allowed: tuple) -> set:
    if isinstance(wrt, str):
        wrt = (wrt,)
    if not isinstance(wrt, (tuple, list, set, frozenset)) or \
            not all(isinstance(w, str) for w in wrt):
        raise InvalidArgumentError(f"wrt must be a name or a sequence of names of {allowed}, "
                                   f"got {wrt!r}")
    chosen = set(wrt)
    unknown = chosen - set(allowed)
    if unknown or not chosen:
        raise InvalidArgumentError(
            f"wrt must name some of {allowed}, got {tuple(wrt)!r}")
    return chosen


def _wants_with_bias(wrt, allowed: tuple, bias) -> set:
    """_wants, without "bias" when the forward had none."""
    wanted = _wants(wrt, allowed)
    if bias is None:
        wanted.discard("bias")
        if not wanted:
            raise InvalidArgumentError("wrt asks only for the bias gradient but bias is None")
    return wanted


def _outs(names, wanted):
    """One out-pointer per gradient: a c_void_p to fill, or None."""
    return [(_capi.tensor_p() if n in wanted else None) for n in names]


def _ref(ptr):
    return None if ptr is None else ctypes.byref(ptr)


def _adopt(ptr):
    return None if ptr is None or not ptr.value else Tensor._adopt(ptr)


def _call(fn, *args):
    status = fn(*args)
    if status:
        _capi.raise_for(status)


# ------------------------------------------------------------------ convolution

def _convolution(fn, op, k, dy, x, weight, bias, stride, padding, dilation, groups,
                 data_format, name, wrt, output_padding=0) -> ConvGrads:
    wanted = _wants_with_bias(wrt, ("x", "weight", "bias"), bias)
    if "bias" in wanted:
        wanted.add("weight")  # oneDNN computes them together
    p = ops._conv_params(op, k, x, weight, stride, padding, dilation, groups, data_format, None,
                         name, output_padding, training=True)
    args = ops._Args()
    try:
        hx = args.handle(x, "x", p.data_format)
        hw = args.handle(weight, "weight")
        hdy = args.handle(dy, "dy", p.data_format)
        dx, dw, db = _outs(("x", "weight", "bias"), wanted)
        _call(fn, ctypes.byref(p), hx, hw, hdy, _ref(dx), _ref(dw), _ref(db))
        return ConvGrads(_adopt(dx), _adopt(dw), _adopt(db))
    finally:
        args.close()


def conv2d(dy, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
           data_format="NCHW", name=None, wrt=("x", "weight", "bias")) -> ConvGrads:
    """Gradients of ``mkcache.conv2d`` called with the same arguments: a
    ConvGrads(x, weight, bias); bias only when the forward had one."""
    return _convolution(_lib.mkc_conv2d_backward, "conv", 2, dy, x, weight, bias, stride,
                        padding, dilation, groups, data_format, name, wrt)


def conv3d(dy, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
           data_format="NCDHW", name=None, wrt=("x", "weight", "bias")) -> ConvGrads:
    """Gradients of ``mkcache.conv3d``."""
    return _convolution(_lib.mkc_conv3d_backward, "conv", 3, dy, x, weight, bias, stride,
                        padding, dilation, groups, data_format, name, wrt)


def conv2d_transpose(dy, x, weight, bias=None, *, stride=1, padding=0, output_padding=0,
                     dilation=1, groups=1, data_format="NCHW", name=None,
                     wrt=("x", "weight", "bias")) -> ConvGrads:
    """Gradients of ``mkcache.conv2d_transpose`` (weight [C_in, C_out/groups,
    KH, KW])."""
    return _convolution(_lib.mkc_conv2d_transpose_backward, "deconv", 2, dy, x, weight, bias,
                        stride, padding, dilation, groups, data_format, name, wrt,
                        output_padding)


# ---------------------------------------------------------------------- pooling

_MAX, _AVG, _AVG_EXCLUDE_PAD = (_operators.POOL_KINDS[k]
                                for k in ("max", "avg_include_pad", "avg_exclude_pad"))


def _pool(kind, k, dy, x, kernel_size, stride, padding, ceil_mode, data_format, name,
          global_=False, dilation=1) -> Tensor:
    p = ops._pool_params(kind, k, kernel_size, stride, padding, ceil_mode, data_format, name,
                         global_, training=True, dilation=dilation)
    return _dx_of(_lib.mkc_pool_backward, p, x, dy)


def _dx_of(backward, p, x, dy) -> Tensor:
    """dx from a backward op called as (params*, x, dy, &dx)."""
    args = ops._Args()
    try:
        hx = args.handle(x, "x", p.data_format)
        hdy = args.handle(dy, "dy", p.data_format)
        dx = _capi.tensor_p()
        _call(backward, ctypes.byref(p), hx, hdy, ctypes.byref(dx))
        return Tensor._adopt(dx)
    finally:
        args.close()


def max_pool2d(dy, x, kernel_size, stride=None, padding=0, dilation=1, *,
               ceil_mode=False, data_format="NCHW", name=None) -> Tensor:
    """Gradient of ``mkcache.max_pool2d`` with respect to x. Uses the
    indices a ``training=True`` forward of this x left (recomputed when
    there are none)."""
    return _pool(_MAX, 2, dy, x, kernel_size, stride, padding, ceil_mode, data_format, name,
                 dilation=dilation)


def avg_pool2d(dy, x, kernel_size, stride=None, padding=0, dilation=1, *,
               ceil_mode=False, count_include_pad=True, data_format="NCHW", name=None) -> Tensor:
    """Gradient of ``mkcache.avg_pool2d`` with respect to x."""
    return _pool(_AVG if count_include_pad else _AVG_EXCLUDE_PAD, 2, dy, x, kernel_size, stride,
                 padding, ceil_mode, data_format, name, dilation=dilation)


def max_pool3d(dy, x, kernel_size, stride=None, padding=0, dilation=1, *,
               ceil_mode=False, data_format="NCDHW", name=None) -> Tensor:
    """Gradient of ``mkcache.max_pool3d``."""
    return _pool(_MAX, 3, dy, x, kernel_size, stride, padding, ceil_mode, data_format, name,
                 dilation=dilation)


def avg_pool3d(dy, x, kernel_size, stride=None, padding=0, dilation=1, *,
               ceil_mode=False, count_include_pad=True, data_format="NCDHW", name=None) -> Tensor:
    """Gradient of ``mkcache.avg_pool3d``."""
    return _pool(_AVG if count_include_pad else _AVG_EXCLUDE_PAD, 3, dy, x, kernel_size, stride,
                 padding, ceil_mode, data_format, name, dilation=dilation)


def global_max_pool(dy, x, *, data_format="NCHW", name=None) -> Tensor:
    """Gradient of ``mkcache.global_max_pool``."""
    return _pool(_MAX, 0, dy, x, None, None, 0, False, data_format, name, global_=True)


def global_avg_pool(dy, x, *, data_format="NCHW", name=None) -> Tensor:
    """Gradient of ``mkcache.global_avg_pool``."""
    return _pool(_AVG, 0, dy, x, None, None, 0, False, data_format, name, global_=True)


# ------------------------------------------------------------- element-wise ops

def activation(dy, x, kind: str, alpha=None, beta=None, *, name=None) -> Tensor:
    """Gradient of ``mkcache.activation(x, kind, alpha, beta)``, computed from
    the forward's input x."""
    try:
        k, a, b = _operators.ACTIVATIONS[kind]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"activation kind must be one of "
                                   f"{sorted(_operators.ACTIVATIONS)}, got {kind!r}") from None
    a = a if alpha is None else _checks.real(alpha, "alpha")
    b = b if beta is None else _checks.real(beta, "beta")
    args = ops._Args()
    try:
        layout = x._layout_value if isinstance(x, Tensor) else ops._default_layout()
        hx = args.handle(x, "x", layout)
        hdy = args.handle(dy, "dy", layout)
        dx = _capi.tensor_p()
        _call(_lib.mkc_activation_backward, k, a, b, ops._name(name), hx, hdy, ctypes.byref(dx))
        return Tensor._adopt(dx)
    finally:
        args.close()


def _make_activation_grad(kind: str):
    def grad(dy, x, *, name=None) -> Tensor:
        return activation(dy, x, kind, name=name)
    grad.__name__ = grad.__qualname__ = kind
    grad.__doc__ = f"Gradient of ``mkcache.{kind}`` with respect to x."
    return grad


for _kind in ("relu", "elu", "gelu", "gelu_tanh", "tanh", "sigmoid", "swish", "silu",
              "hardswish", "mish", "relu6", "sqrt", "abs", "exp", "log", "square", "softplus"):
    globals()[_kind] = _make_activation_grad(_kind)
    __all__.append(_kind)


def leaky_relu(dy, x, negative_slope=0.01, *, name=None) -> Tensor:
    """Gradient of ``mkcache.leaky_relu``."""
    return activation(dy, x, "leaky_relu", negative_slope, name=name)


def clip(dy, x, min, max, *, name=None) -> Tensor:  # noqa: A002 (numpy's names)
    """Gradient of ``mkcache.clip``."""
    return activation(dy, x, "clip", min, max, name=name)


__all__ += ["leaky_relu", "clip"]


def _softmax(log: int, dy, y, axis, name) -> Tensor:
    a = ops._axis(axis)
    args = ops._Args()
    try:
        layout = y._layout_value if isinstance(y, Tensor) else ops._default_layout()
        hy = args.handle(y, "y", layout)
        hdy = args.handle(dy, "dy", layout)
        dx = _capi.tensor_p()
        _call(_lib.mkc_softmax_backward, a, log, ops._name(name), hy, hdy, ctypes.byref(dx))
        return Tensor._adopt(dx)
    finally:
        args.close()


def softmax(dy, y, axis=-1, *, name=None) -> Tensor:
    """Gradient of ``mkcache.softmax``, from the forward's *output* y."""
    return _softmax(0, dy, y, axis, name)


def log_softmax(dy, y, axis=-1, *, name=None) -> Tensor:
    """Gradient of ``mkcache.log_softmax``, from the forward's *output* y."""
    return _softmax(1, dy, y, axis, name)


# ---------------------------------------------------------------- dense layers

def linear(dy, x, weight, bias=None, *, name=None, wrt=("x", "weight", "bias")) -> LinearGrads:
    """Gradients of ``mkcache.linear``: LinearGrads(x, weight [out, in],
    bias [out])."""
    wanted = _wants_with_bias(wrt, ("x", "weight", "bias"), bias)
    if "bias" in wanted:
        wanted.add("weight")
    p = ops._linear_params(None, name, training=True)
    args = ops._Args()
    try:
        layout = ops._default_layout()
        hx = args.handle(x, "x", layout)
        hw = args.handle(weight, "weight")
        hdy = args.handle(dy, "dy", layout)
        dx, dw, db = _outs(("x", "weight", "bias"), wanted)
        _call(_lib.mkc_linear_backward, ctypes.byref(p), hx, hw, hdy, _ref(dx), _ref(dw),
              _ref(db))
        return LinearGrads(_adopt(dx), _adopt(dw), _adopt(db))
    finally:
        args.close()


# ------------------------------------------------------------------ normalizers

def _norm_wants(wrt, scale, shift) -> set:
    wanted = _wants(wrt, ("x", "scale", "shift"))
    if scale is None:
        wanted.discard("scale")
    if shift is None:
        wanted.discard("shift")
    if not wanted:
        raise InvalidArgumentError("wrt asks only for gradients of parameters that are None")
    return wanted


def layer_norm(dy, x, scale=None, shift=None, *, begin_norm_axis=-1, epsilon=1e-5, name=None,
               wrt=("x", "scale", "shift")) -> NormGrads:
    """Gradients of ``mkcache.layer_norm``: NormGrads(x, scale, shift), the
    parameter gradients shaped as the normalized trailing dims. The
    statistics are recomputed from this x."""
    wanted = _norm_wants(wrt, scale, shift)
    p = ops._layer_norm_params(begin_norm_axis, epsilon, name, training=True)
    args = ops._Args()
    try:
        layout = x._layout_value if isinstance(x, Tensor) else ops._default_layout()
        hx = args.handle(x, "x", layout)
        hs = None if scale is None else args.handle(scale, "scale")
        hb = None if shift is None else args.handle(shift, "shift")
        hdy = args.handle(dy, "dy", layout)
        dx, ds, db = _outs(("x", "scale", "shift"), wanted)
        _call(_lib.mkc_layer_norm_backward, ctypes.byref(p), hx, hs, hb, hdy, _ref(dx),
              _ref(ds), _ref(db))
        return NormGrads(_adopt(dx), _adopt(ds), _adopt(db))
    finally:
        args.close()


def batch_norm(dy, x, batch_mean, batch_variance, scale=None, shift=None, *, epsilon=1e-5,
               data_format="NCHW", name=None, wrt=("x", "scale", "shift")) -> NormGrads:
    """Gradients of a training ``mkcache.batch_norm``; batch_mean and
    batch_variance are the statistics that forward returned."""
    wanted = _norm_wants(wrt, scale, shift)
    # The momentum (the library's default) only matters to the forward.
    p = ops._batch_norm_params(epsilon, 0.9, True, data_format, name)
    fmt = p.data_format
    args = ops._Args()
    try:
        hx = args.handle(x, "x", fmt)
        hm = args.handle(batch_mean, "batch_mean")
        hv = args.handle(batch_variance, "batch_variance")
        hs = None if scale is None else args.handle(scale, "scale")
        hb = None if shift is None else args.handle(shift, "shift")
        hdy = args.handle(dy, "dy", fmt)
        dx, ds, db = _outs(("x", "scale", "shift"), wanted)
        _call(_lib.mkc_batch_norm_backward, ctypes.byref(p), hx, hm, hv, hs, hb, hdy, _ref(dx),
              _ref(ds), _ref(db))
        return NormGrads(_adopt(dx), _adopt(ds), _adopt(db))
    finally:
        args.close()


def lrn(dy, x, size=5, alpha=1e-4, beta=0.75, k=1.0, *, data_format="NCHW",
        name=None) -> Tensor:
    """Gradient of ``mkcache.lrn`` with respect to x."""
    p = ops._lrn_params(size, alpha, beta, k, data_format, name, training=True)
    return _dx_of(_lib.mkc_lrn_backward, p, x, dy)



# ------------------------------------------------------------ binary and matmul

def _binary(kind: str, dy, a, b, name, wrt) -> BinaryGrads:
    wanted = _wants(wrt, ("a", "b"))
    args = ops._Args()
    try:
        ha = ops._operand(a, "a", args)
        hb = ops._operand(b, "b", args)
        hdy = args.handle(dy, "dy", ops._default_layout())
        da, db = _outs(("a", "b"), wanted)
        _call(_lib.mkc_binary_backward, _operators.BINARY[kind], ops._name(name), ha, hb, hdy,
              _ref(da), _ref(db))
        return BinaryGrads(_adopt(da), _adopt(db))
    finally:
        args.close()


def _make_binary_grad(kind: str):
    def grad(dy, a, b, *, name=None, wrt=("a", "b")) -> BinaryGrads:
        return _binary(kind, dy, a, b, name, wrt)
    grad.__name__ = grad.__qualname__ = kind
    grad.__doc__ = (f"Gradients of ``mkcache.{kind}(a, b)``: BinaryGrads(a, b), each summed "
                    "over the dims it was broadcast along (a Python-number operand gets a "
                    "[1] gradient).")
    return grad


for _kind in _operators.BINARY_TABLE:
    globals()[_kind] = _make_binary_grad(_kind)


def matmul(dy, a, b, bias=None, *, transpose_a=False, transpose_b=False, scale=1.0,
           name=None, wrt=("a", "b", "bias")) -> MatmulGrads:
    """Gradients of ``mkcache.matmul``: MatmulGrads(a, b, bias), summed over
    broadcast batch dims."""
    wanted = _wants_with_bias(wrt, ("a", "b", "bias"), bias)
    p = ops._prepared(ops._build_matmul_params, transpose_a, transpose_b, None, name, scale)
    args = ops._Args()
    try:
        layout = ops._default_layout()
        ha = args.handle(a, "a", layout)
        hb = args.handle(b, "b", layout)
        hbias = None if bias is None else args.handle(bias, "bias")
        hdy = args.handle(dy, "dy", layout)
        da, db, dbias = _outs(("a", "b", "bias"), wanted)
        _call(_lib.mkc_matmul_backward, ctypes.byref(p), ha, hb, hbias, hdy, _ref(da), _ref(db),
              _ref(dbias))
        return MatmulGrads(_adopt(da), _adopt(db), _adopt(dbias))
    finally:
        args.close()


def concat(dy, tensors, axis=0) -> list:
    """Gradients of ``mkcache.concat(tensors, axis)``: one Tensor per input,
    the slice of dy it contributed."""
    a = ops._axis(axis)
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise InvalidArgumentError("concat: tensors must be a sequence of the forward's "
                                   f"inputs, got {type(tensors).__name__}")
    items = list(tensors)
    if not items:
        raise InvalidArgumentError("concat needs at least one input")
    args = ops._Args()
    try:
        layout = ops._default_layout()
        handles = (_capi.tensor_p * len(items))(
            *[args.handle(t, f"tensors[{i}]", layout) for i, t in enumerate(items)])
        hdy = args.handle(dy, "dy", layout)
        outs = (_capi.tensor_p * len(items))()
        _call(_lib.mkc_concat_backward, a, len(items), handles, hdy, outs)
        return [Tensor._adopt(_capi.tensor_p(h)) for h in outs]
    finally:
        args.close()


def reshape(dy, x) -> Tensor:
    """Gradient of ``mkcache.reshape(x, shape)`` (or flatten): dy reshaped to
    x's shape."""
    shape = getattr(x, "shape", None)
    if not isinstance(shape, tuple):
        raise InvalidArgumentError("reshape: x must be the forward's input (an array or a "
                                   f"Tensor), got {type(x).__name__}")
    return ops.reshape(dy, shape)
