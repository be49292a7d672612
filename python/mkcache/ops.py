"""Operators. Each accepts numpy arrays or Tensors and returns a Tensor that
stays in oneDNN's layout until converted with ``numpy()``."""
from __future__ import annotations

import ctypes
import numbers

import numpy as np

from . import _capi, _checks, _layout, _operators
from . import tensor as tensor_module
from .errors import InvalidArgumentError
from .tensor import (Tensor, check_array, check_writable, data_address, input_owner,
                     wrap_handle)

_lib = _capi.lib
_destroy = _capi.raw["mkc_tensor_destroy"]
_conv2d = _capi.fast["mkc_conv2d"]
_conv3d = _capi.fast["mkc_conv3d"]
_conv2d_transpose = _capi.fast["mkc_conv2d_transpose"]
_activation = _capi.raw["mkc_activation"]  # (int, float, float, char*, void*, void**)
# (mkc_activation_call*, void*, void*): plain buffers, no handles
_activation_plain = _capi.raw["mkc_activation_plain"]
_activation_plain_held = _capi.activation_plain_held
_F32 = np.dtype(np.float32)
# np.empty parses its arguments faster than the np.ndarray constructor.
_ndarray, _empty, _id = np.ndarray, np.empty, id
_DATA_FIELD = tensor_module._DATA_FIELD  # None: data_address() instead
_of_array = Tensor._of_array


# (kind, alpha, beta, name, shape) -> prepared call; relu's keyed by shape
# (and name) alone, the hottest case. Bounded: cleared when large.
_CALLS, _RELU_CALLS = {}, {}


def _remember(cache: dict, key, value):
    """cache[key] = value, the cache emptied first once it holds 4096 (the
    prepared-call caches: bounded, and refilled by the next calls)."""
    if len(cache) > 4096:
        cache.clear()
    cache[key] = value
    return value


_PARAMS = {}  # prepared params structs per builder and distinct arguments (bounded)


def _prepared(build, *arguments):
    """build(*arguments), a params struct, made once per distinct arguments
    and kept: building one costs a few us of Python (a ctypes struct, its
    C init call, field by field), more than the rest of a small call. The
    arguments' types are part of the key (1.0
    equals 1 but is refused where an int is needed); unhashable arguments
    (a list) get a struct built each time. Callers must not modify it."""
    key = (build, arguments, tuple(map(type, arguments)))
    try:
        p = _PARAMS.get(key)
    except TypeError:
        return build(*arguments)
    if p is None:
        p = _remember(_PARAMS, key, build(*arguments))
    return p


def _prepare_call(calls, key, kind, alpha, beta, name, shape, size):
    """Builds the mkc_activation_call for `key` and keeps it in `calls` as
    (what ctypes passes for it, the function to pass it to, the struct):
    arrays small enough to run on the calling thread keep the GIL (cheaper
    than releasing it), larger ones release it. Where numpy arrays' data
    field is known, the function is mkc_activation_plain_ref, passed the
    struct's address and the arrays' data-field addresses as ints."""
    call = _capi.ActivationCall(kind, alpha, beta, name, len(shape))
    call.dims[:len(shape)] = shape
    small = size <= _capi.SERIAL_ELEMENTS
    if _DATA_FIELD is not None:
        fn = _capi.activation_plain_ref_held if small else _capi.activation_plain_ref
        return _remember(calls, key, (ctypes.addressof(call), fn, call))
    fn = _activation_plain_held if small else _activation_plain
    return _remember(calls, key, (ctypes.pointer(call), fn, call))


def _plain_activation(kind, alpha, beta, x, name):
    """The fast path of an activation on a numpy array: one C call on the
    buffers (mkc_activation_plain, three arguments), no tensor handle; the
    result is a Tensor over a new array whose handle is made only if it is
    used further. Returns None when x does not qualify (the general path
    then reports what is wrong)."""
    if not (x.dtype is _F32 and x.flags.c_contiguous):
        return None
    shape = x.shape
    key = (kind, alpha, beta, name, shape)
    entry = _CALLS.get(key)
    if entry is None:
        if not (0 < len(shape) <= _capi.MAX_NDIMS and x.size):
            return None
        entry = _prepare_call(_CALLS, key, kind, alpha, beta, name, shape, x.size)
    return _run_plain(entry, x, shape)


def _run_plain(entry, x, shape):
    call, fn = entry[0], entry[1]
    y = _empty(shape, _F32)
    if _DATA_FIELD is not None:
        status = fn(call, _id(x) + _DATA_FIELD, _id(y) + _DATA_FIELD)
    else:  # pragma: no cover - CPython and NumPy keep the data field's place
        status = fn(call, data_address(x), data_address(y))
    if status:
        _capi.raise_for(status)
    # A layout label matters only from rank 3 on.
    return _of_array(y, _capi.LAYOUT_CHANNELS_FIRST if len(shape) < 3 else _default_layout())


_softmax = _capi.fast["mkc_softmax"]
_binary = _capi.fast["mkc_binary"]
_pool_call = _capi.fast["mkc_pool"]
_matmul = _capi.fast["mkc_matmul"]
_layer_norm = _capi.fast["mkc_layer_norm"]
_batch_norm = _capi.fast["mkc_batch_norm"]
_lrn = _capi.fast["mkc_lrn"]
_linear = _capi.fast["mkc_linear"]


class _Args:
    """Turns operator arguments into C handles for one call. numpy inputs get
    kept read-only handles (tensor.input_owner), held here until the call
    returns; arrays the call writes get their own handle, destroyed after."""

    __slots__ = ("held", "temporaries")

    def __init__(self):
        self.held = []
        self.temporaries = []

    def handle(self, value, argument: str, layout_value: int = _capi.LAYOUT_CHANNELS_FIRST,
               dtypes: tuple = tensor_module.FLOAT32_ONLY):
        """A handle the library only reads (an array of one of `dtypes`)."""
        if isinstance(value, Tensor):
            return value.handle
        if layout_value == _capi.LAYOUT_TARGET:
            return self._own(value, argument, layout_value, dtypes)
        owner = input_owner(value, argument, layout_value, dtypes)
        self.held.append(owner)
        return owner.handle

    def written(self, value, argument: str, layout_value: int = _capi.LAYOUT_CHANNELS_FIRST):
        """A handle the library may write through (an array updated in place
        or filled by the call): made for this call alone."""
        check_writable(value, argument)
        return self._own(value, argument, layout_value)

    def _own(self, value, argument: str, layout_value: int,
             dtypes: tuple = tensor_module.FLOAT32_ONLY):
        if isinstance(value, Tensor):
            return value.handle
        h = wrap_handle(check_array(value, argument, dtypes), layout_value)
        self.temporaries.append(h)
        return h

    def close(self):
        for h in self.temporaries:
            _destroy(h)
        self.held.clear()


def _default_layout() -> int:
    return _layout.explicit_target() or _capi.LAYOUT_CHANNELS_FIRST


def _name(name):
    """A cache name as the C argument (None: the operator's default name)."""
    return None if name is None else _checks.name_bytes(name)


def _result(out, handle):
    if out is not None:
        return out
    return Tensor._adopt(handle)


def _out_handle(out):
    if out is None:
        return _capi.tensor_p()
    if not isinstance(out, Tensor):
        raise InvalidArgumentError("out must be an mkcache.Tensor or None")
    check_writable(out, "out")
    return _capi.tensor_p(out.handle.value)


def _fused_activation(activation) -> tuple:
    if activation is None:
        return (_capi.ACTIVATION_NONE, 0.0, 0.0)
    if isinstance(activation, str) and activation in _operators.ACTIVATIONS:
        return _operators.ACTIVATIONS[activation]
    raise InvalidArgumentError(f"activation must be None or one of "
                               f"{sorted(_operators.ACTIVATIONS)}, got {activation!r}")


def _conv_padding(padding, k, kernel, stride, dilation, spatial) -> tuple:
    """-> (begins, ends) for k spatial dims. int; k values (symmetric); 2k
    values (begin, end per dim: (top, bottom, left, right) in 2-D); "valid";
    "same" (stride-aware, extra cell at the end, as TensorFlow)."""
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return (0,) * k, (0,) * k
        if mode != "same":
            raise InvalidArgumentError(
                f"padding must be 'same', 'valid', an int or a tuple, got {padding!r}")
        begins, ends = [], []
        for size, kk, s, d in zip(spatial, kernel, stride, dilation):
            out = -(-size // s)
            total = max((out - 1) * s + (kk - 1) * d + 1 - size, 0)
            begins.append(total // 2)
            ends.append(total - total // 2)
        return tuple(begins), tuple(ends)
    return _pool_padding(padding, k)


def _conv_params(op, k, x, weight, stride, padding, dilation, groups, data_format, activation,
                 name, output_padding=0, training=False):
    """The mkc_conv_params of a convolution call (shared with mkcache.grad),
    prepared once per distinct arguments (_prepared) except for padding
    "same", which depends on the shapes. Callers must not modify it."""
    if isinstance(padding, str):
        return _build_conv_params(op, k, x, weight, stride, padding, dilation, groups,
                                  data_format, activation, name, output_padding, training)
    return _prepared(_build_conv_params, op, k, None, None, stride, padding, dilation, groups,
                     data_format, activation, name, output_padding, training)


def _build_conv_params(op, k, x, weight, stride, padding, dilation, groups, data_format,
                       activation, name, output_padding=0, training=False):
    fmt = _layout.to_enum(data_format, "data_format")
    if fmt == _capi.LAYOUT_TARGET:
        raise InvalidArgumentError("data_format must be given")
    act = _fused_activation(activation)
    groups = _checks.integer(groups, "groups")
    s = _ntuple(stride, k, "stride")
    d = _ntuple(dilation, k, "dilation")
    op_ = _ntuple(output_padding, k, "output_padding")
    if isinstance(padding, str):
        if op != "conv":
            raise InvalidArgumentError("padding 'same'/'valid' is for convolutions only")
        xs = x.shape if isinstance(x, Tensor) else check_array(x, "x").shape
        ws = weight.shape if isinstance(weight, Tensor) else check_array(weight, "weight").shape
        if len(xs) != k + 2 or len(ws) != k + 2:  # the library names the wrong rank
            begins = ends = (0,) * k
        else:
            spatial = xs[1:1 + k] if fmt == _capi.LAYOUT_CHANNELS_LAST else xs[2:2 + k]
            begins, ends = _conv_padding(padding, k, ws[2:2 + k], s, d, spatial)
    else:
        begins, ends = _pool_padding(padding, k)
    p = _capi.ConvParams()
    _lib.mkc_conv_params_init(ctypes.byref(p))
    p.stride[:k] = s
    p.pad_begin[:k] = begins
    p.pad_end[:k] = ends
    p.dilation[:k] = d
    p.output_padding[:k] = op_
    p.groups = groups
    p.data_format = fmt
    p.activation, p.activation_alpha, p.activation_beta = act
    p.training = 1 if training else 0
    p.name = _name(name)
    return p


def _convolution(fn, op, k, x, weight, bias, stride, padding, dilation, groups, data_format,
                 activation, name, out, output_padding=0, residual=None, training=False) -> Tensor:
    # A residual sets p.sum: that call gets a params struct of its own.
    p = (_conv_params if residual is None else _build_conv_params)(
        op, k, x, weight, stride, padding, dilation, groups, data_format, activation, name,
        output_padding, training)
    fmt = p.data_format
    if residual is not None and out is not None:
        raise InvalidArgumentError("give either residual or out, not both")
    if residual is not None:
        # The sum post-op accumulates into dst: a Tensor residual is updated
        # in place, an array is copied first (the caller's array is kept).
        p.sum = 1
        if isinstance(residual, Tensor):
            check_writable(residual, "residual")
        out = residual if isinstance(residual, Tensor) else Tensor(
            np.array(check_array(residual, "residual")), data_format)
    args = _Args()
    try:
        hx = args.handle(x, "x", fmt)
        hw = args.handle(weight, "weight")
        hb = None if bias is None else args.handle(bias, "bias")
        dst = _out_handle(out)
        status = fn(ctypes.byref(p), hx, hw, hb, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def conv2d(x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
           data_format="NCHW", activation=None, residual=None, training=False, name=None,
           out=None) -> Tensor:
    """2-D convolution.

    x: [N, C, H, W] (or [N, H, W, C] with ``data_format="NHWC"``).
    weight: [O, C/groups, KH, KW], always OIHW. bias: [O] or None.
    padding: int, (ph, pw), (top, bottom, left, right), "same" or "valid".
    activation: None or a name from ``mkcache.ACTIVATIONS`` ("relu", "gelu",
    "relu6", ...), fused as a oneDNN post-op. residual: a tensor of the
    output's shape added to the result before the activation (oneDNN's sum
    post-op; a Tensor residual is updated in place and returned). training:
    run oneDNN's training forward and leave its descriptor for
    ``mkcache.grad.conv2d``. name: the cache name (derived from the
    arguments when None). out: a Tensor to write into.
    """
    return _convolution(_conv2d, "conv", 2, x, weight, bias, stride, padding, dilation, groups,
                        data_format, activation, name, out, residual=residual, training=training)


def conv3d(x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
           data_format="NCDHW", activation=None, residual=None, training=False, name=None,
           out=None) -> Tensor:
    """3-D convolution: x [N, C, D, H, W] (or NDHWC), weight [O, C/groups,
    KD, KH, KW]; padding: int, 3 values, or 6 (front, back, top, bottom,
    left, right). Otherwise as conv2d."""
    return _convolution(_conv3d, "conv", 3, x, weight, bias, stride, padding, dilation, groups,
                        data_format, activation, name, out, residual=residual, training=training)


def conv2d_transpose(x, weight, bias=None, *, stride=1, padding=0, output_padding=0,
                     dilation=1, groups=1, data_format="NCHW", activation=None, training=False,
                     name=None, out=None) -> Tensor:
    """Transposed 2-D convolution (PyTorch's conv_transpose2d): weight
    [C_in, C_out/groups, KH, KW]; output size (in - 1) * stride - pad_begin
    - pad_end + dilation * (k - 1) + 1 + output_padding."""
    return _convolution(_conv2d_transpose, "deconv", 2, x, weight, bias, stride, padding,
                        dilation, groups, data_format, activation, name, out,
                        output_padding=output_padding, training=training)


def activation(x, kind: str, alpha=None, beta=None, *, name=None, out=None) -> Tensor:
    """Element-wise activation `kind` (a name from ``mkcache.ACTIVATIONS``) in
    x's layout; alpha/beta override the kind's default parameters. ``out=x``
    (a Tensor) runs in place."""
    try:
        k, a, b = _operators.ACTIVATIONS[kind]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"activation kind must be one of "
                                   f"{sorted(_operators.ACTIVATIONS)}, got {kind!r}") from None
    if alpha is not None:
        a = _checks.real(alpha, "alpha")
    if beta is not None:
        b = _checks.real(beta, "beta")
    if out is None and type(x) is np.ndarray:
        result = _plain_activation(k, a, b, x, _name(name))
        if result is not None:
            return result
    if isinstance(x, Tensor):
        hx = x.handle
    else:
        # A layout label does not matter to an element-wise op; the result
        # keeps it.
        held = input_owner(x, "x", _default_layout())  # held for the call
        hx = held.handle
    dst = _out_handle(out)
    status = _activation(k, ctypes.c_float(a), ctypes.c_float(b), _name(name), hx,
                         ctypes.byref(dst))
    if status:
        _capi.raise_for(status)
    return _result(out, dst)


_RELU_KIND = _operators.ACTIVATIONS["relu"][0]
_new, _CHANNELS_FIRST = object.__new__, _capi.LAYOUT_CHANNELS_FIRST


def relu(x, *, name=None, out=None) -> Tensor:
    """max(x, 0)."""
    # The hottest call there is, so _plain_activation / _run_plain /
    # Tensor._of_array / data_address are written out here: each Python
    # call level is a sizeable part of relu's own time on small arrays.
    # Its parameters and docstring are its row's in _operators (the Graph
    # method is made from that row; test_operators holds the two alike).
    if out is None and type(x) is _ndarray and x.dtype is _F32 and x.flags.c_contiguous \
            and _DATA_FIELD is not None:
        shape = x.shape
        key = shape if name is None else (shape, name)
        entry = _RELU_CALLS.get(key)
        if entry is None and 0 < len(shape) <= _capi.MAX_NDIMS and x.size:
            entry = _prepare_call(_RELU_CALLS, key, _RELU_KIND, 0.0, 0.0, _name(name), shape,
                                  x.size)
        if entry is not None:
            y = _empty(shape, _F32)
            status = entry[1](entry[0], _id(x) + _DATA_FIELD, _id(y) + _DATA_FIELD)
            if status:
                _capi.raise_for(status)
            t = _new(Tensor)
            t._owner, t._base = None, y
            t._lazy_layout = _CHANNELS_FIRST if len(shape) < 3 else _default_layout()
            return t
    return activation(x, "relu", name=name, out=out)


def _unary(x, call, name, out):
    """Runs `call(handle, name, dst)` on x (a Tensor or a numpy array) and
    returns the result Tensor."""
    if isinstance(x, Tensor):
        hx = x.handle
    else:
        held = input_owner(x, "x", _default_layout())  # held for the call
        hx = held.handle
    dst = _out_handle(out)
    status = call(hx, _name(name), ctypes.byref(dst))
    if status:
        _capi.raise_for(status)
    return _result(out, dst)


def _axis(axis) -> int:
    if type(axis) is int and -2**31 <= axis < 2**31:  # the common case, inline
        return axis
    return _checks.integer(axis, "axis", _checks.INT32)


def _operand(value, argument, args: "_Args"):
    # Arrays and Tensors first: isinstance against the numbers ABC is slow.
    if type(value) is not _ndarray and not isinstance(value, Tensor) \
            and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return args.handle(np.array([_checks.real(value, argument)], dtype=np.float32), argument)
    return args.handle(value, argument, _default_layout())


def _binary_op(kind: int, a, b, name, out) -> Tensor:
    """a <kind> b (an mkc_binary_kind value): the body of add, sub, ..."""
    args = _Args()
    try:
        ha = _operand(a, "a", args)
        hb = _operand(b, "b", args)
        dst = _out_handle(out)
        status = _binary(kind, _name(name), ha, hb, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def _ntuple(value, k: int, argument: str) -> tuple:
    return _checks.integers(value, k, argument)


def _pool_padding(padding, k: int) -> tuple:
    """-> (begins, ends). 2k values are (begin, end) per spatial dim, as in
    conv2d's (top, bottom, left, right)."""
    items = _checks.integers(padding, k, "padding", counts=(k, 2 * k))
    if len(items) == k:
        return items, items
    return items[0::2], items[1::2]


def _pool_params(kind: int, k: int, kernel_size, stride, padding, ceil_mode, data_format, name,
                 global_=False, training=False, dilation=1):
    """The mkc_pool_params of a pooling call (shared with mkcache.grad),
    prepared once per distinct arguments (_prepared). Callers must not
    modify it."""
    return _prepared(_build_pool_params, kind, k, kernel_size, stride, padding, ceil_mode,
                     data_format, name, global_, training, dilation)


def _build_pool_params(kind, k, kernel_size, stride, padding, ceil_mode, data_format, name,
                       global_, training, dilation=1):
    fmt = _layout.to_enum(data_format, "data_format")
    if fmt == _capi.LAYOUT_TARGET:
        raise InvalidArgumentError("data_format must be given")
    p = _capi.PoolParams()
    _lib.mkc_pool_params_init(ctypes.byref(p))
    p.kind = kind
    if not global_:
        kernel = _ntuple(kernel_size, k, "kernel_size")
        strides = kernel if stride is None else _ntuple(stride, k, "stride")
        begins, ends = _pool_padding(padding, k)
        p.kernel[:k] = kernel
        p.stride[:k] = strides
        p.pad_begin[:k] = begins
        p.pad_end[:k] = ends
        p.dilation[:k] = _ntuple(dilation, k, "dilation")
    p.ceil_mode = 1 if ceil_mode else 0
    p.global_ = 1 if global_ else 0
    p.data_format = fmt
    p.training = 1 if training else 0
    p.name = _name(name)
    return p


def _pool(kind: int, x, k: int, kernel_size, stride, padding, ceil_mode, data_format, name,
          out, global_=False, training=False, dilation=1) -> Tensor:
    p = _pool_params(kind, k, kernel_size, stride, padding, ceil_mode, data_format, name, global_,
                     training, dilation)
    args = _Args()
    try:
        hx = args.handle(x, "x", p.data_format)
        dst = _out_handle(out)
        status = _pool_call(ctypes.byref(p), hx, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


# The other activations (leaky_relu, gelu, clip, ...), the pools, the
# binaries, softmax and log_softmax, from their one description, which the
# Graph methods are made from too. relu is written out above for its fast
# path.
def _op_run(op: int, params, inputs, out) -> Tensor:
    """One call of operator `op` (an mkc_op value) of the library's table on
    `inputs` (Tensors or arrays, in its port order; None for an absent
    optional one): the body of erf, reduce_sum, ..."""
    args = _Args()
    try:
        layout_value = _default_layout()
        # Any dtype a tensor may hold: the operator's row says which it takes.
        handles = (_capi.tensor_p * len(inputs))(*(
            None if v is None else args.handle(v, f"input {i}", layout_value,
                                               tensor_module.ANY_DTYPE)
            for i, v in enumerate(inputs)))
        dst = _out_handle(out)
        _lib.mkc_op_run(op, None if params is None else ctypes.byref(params), len(inputs),
                        handles, ctypes.byref(dst))
        return _result(out, dst)
    finally:
        args.close()


_operators.define_functions(globals(), written=("relu",))


def quantize(x, scale, zero_point=None, dtype="uint8", axis=1, *, fast=False, name=None,
             out=None) -> Tensor:
    """float32 x to 8-bit integers as ONNX's QuantizeLinear:
    saturate(round(x / scale) + zero_point), rounding ties to even (NaN to
    the zero point). scale (> 0) and zero_point: one number for the whole
    tensor, or one per index of `axis` (of x's shape as reported); dtype
    uint8 or int8 (a zero point array of that dtype decides it). fast: x
    times 1 / scale on oneDNN's parallel reorder (per-tensor scales): a
    value within float32 rounding of a half step may round either way,
    and NaN gives an unspecified value."""
    if isinstance(zero_point, np.ndarray) and zero_point.dtype in (np.uint8, np.int8):
        dtype = zero_point.dtype
    params = _operators.quantize_params(dtype, axis, name, fast)
    scale, zero_point = _operators.quantization_arrays(
        "quantize", scale, zero_point, tensor_module.NUMPY_DTYPES[params.to])
    return _op_run(_capi.OPS["quantize"], params, (x, scale, zero_point), out)


_QUANTIZED_RESULTS = {"float32": "f32", "uint8": "u8", "int8": "s8"}


def _quantized_ports(op, x, weight, bias, src_scale, weight_scale, src_zero_point, dst_scale,
                     dst_zero_point, dst_dtype):
    """The eight ports of quantized_conv2d / quantized_linear, numbers made
    arrays (scales float32, zero points int32), and the result's mkc_dtype."""
    try:
        to = _capi.enum_value("mkc_dtype", _QUANTIZED_RESULTS[str(np.dtype(dst_dtype))])
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"{op}: dst_dtype must be float32, uint8 or int8, got {dst_dtype!r}") from None

    def vector(v, dtype, what):
        # Tensors, and a Graph's values (its methods pass them on), as they are.
        if v is None or isinstance(v, Tensor) or getattr(v, "_mkcache_graph_value", False):
            return v
        arr = np.asarray(v)
        if dtype == np.int32 and arr.size and (np.any(arr != np.round(arr)) or
                                               np.abs(arr).max() > 2 ** 31 - 1):
            raise InvalidArgumentError(f"{op}: {what} must be integers, got {v!r}")
        return np.ascontiguousarray(arr.astype(dtype).reshape(-1))

    if src_scale is None or weight_scale is None:
        raise InvalidArgumentError(f"{op}: src_scale and weight_scale are required")
    return (x, weight, vector(src_scale, np.float32, "src_scale"),
            vector(weight_scale, np.float32, "weight_scale"), bias,
            vector(src_zero_point, np.int32, "src_zero_point"),
            vector(dst_scale, np.float32, "dst_scale"),
            vector(dst_zero_point, np.int32, "dst_zero_point")), to


def quantized_conv2d(x, weight, bias=None, *, src_scale, weight_scale, src_zero_point=None,
                     dst_scale=None, dst_zero_point=None, dst_dtype="float32", residual=None,
                     sum_scale=1.0, sum_zero_point=0, stride=1, padding=0, dilation=1,
                     groups=1, data_format="NCHW", activation=None, name=None,
                     out=None) -> Tensor:
    """2-D convolution of 8-bit data: x uint8 or int8 (its real values
    src_scale * (x - src_zero_point)), weight int8 [O, C/groups, KH, KW]
    (real: weight_scale * weight, weight_scale one number or one per output
    channel), bias float32 in real units. A residual (of the result's dtype
    and shape; real values sum_scale * (residual - sum_zero_point)) is added
    before the activation. The result is float32, or with dst_dtype
    uint8/int8 requantized: round(y / dst_scale) + dst_zero_point,
    saturated. Sums are exact; oneDNN's int8 kernels run it (grouped and
    depthwise too), the reference kernel where they would not be exact. Other arguments as conv2d."""
    ports, to = _quantized_ports("quantized_conv2d", x, weight, bias, src_scale, weight_scale,
                                 src_zero_point, dst_scale, dst_zero_point, dst_dtype)
    p = _quantized_conv_params(x, weight, stride, padding, dilation, groups, data_format,
                               activation, to, name, residual is not None, sum_scale,
                               sum_zero_point)
    # x (and a residual) are read in data_format's order, the weights always as OIHW.
    ports = ((Tensor(x, data_format) if isinstance(x, np.ndarray) else x),
             (Tensor(weight, "NCHW") if isinstance(weight, np.ndarray) else weight)) + ports[2:]
    if residual is not None:
        ports += (Tensor(residual, data_format) if isinstance(residual, np.ndarray)
                  else residual,)
    return _op_run(_capi.OPS["quantized_conv2d"], p, ports, out)


def _quantized_conv_params(x, weight, stride, padding, dilation, groups, data_format,
                           activation, to, name, residual=False, sum_scale=1.0,
                           sum_zero_point=0):
    conv = _build_conv_params("conv", 2, x, weight, stride, padding, dilation, groups,
                              data_format, activation, None)
    p = _capi.QuantizedConvParams()
    _lib.mkc_quantized_conv_params_init(ctypes.byref(p))
    ctypes.memmove(ctypes.byref(p.conv), ctypes.byref(conv), ctypes.sizeof(conv))
    p.conv.name = None
    p.conv.sum = int(residual)
    p.dst_dtype = to
    p.name = _name(name)
    p.sum_scale = _checks.real(sum_scale, "sum_scale")
    p.sum_zero_point = _checks.integer(sum_zero_point, "sum_zero_point", _checks.INT32)
    return p


def _quantized_linear_params(activation, to, name, residual=False, sum_scale=1.0,
                             sum_zero_point=0):
    p = _capi.QuantizedLinearParams()
    _lib.mkc_quantized_linear_params_init(ctypes.byref(p))
    p.activation, p.activation_alpha, p.activation_beta = _fused_activation(activation)
    p.dst_dtype = to
    p.name = _name(name)
    p.sum = int(residual)
    p.sum_scale = _checks.real(sum_scale, "sum_scale")
    p.sum_zero_point = _checks.integer(sum_zero_point, "sum_zero_point", _checks.INT32)
    return p


def quantized_linear(x, weight, bias=None, *, src_scale, weight_scale, src_zero_point=None,
                     dst_scale=None, dst_zero_point=None, dst_dtype="float32", residual=None,
                     sum_scale=1.0, sum_zero_point=0, activation=None, name=None,
                     out=None) -> Tensor:
    """A fully connected layer of 8-bit data: x [..., K] uint8 or int8,
    weight int8 [N, K], bias float32 [N]: [..., N], scaled, residual added
    and requantized as quantized_conv2d (weight_scale one number or one per
    N)."""
    ports, to = _quantized_ports("quantized_linear", x, weight, bias, src_scale, weight_scale,
                                 src_zero_point, dst_scale, dst_zero_point, dst_dtype)
    p = _quantized_linear_params(activation, to, name, residual is not None, sum_scale,
                                 sum_zero_point)
    if residual is not None:
        ports += (residual,)
    return _op_run(_capi.OPS["quantized_linear"], p, ports, out)


def _quantized_matmul_params(transpose_a, transpose_b, activation, to, name):
    p = _capi.QuantizedMatmulParams()
    _lib.mkc_quantized_matmul_params_init(ctypes.byref(p))
    p.transpose_a, p.transpose_b = int(bool(transpose_a)), int(bool(transpose_b))
    p.activation, p.activation_alpha, p.activation_beta = _fused_activation(activation)
    p.dst_dtype = to
    p.name = _name(name)
    return p


def _quantized_matmul_ports(a, b, a_scale, b_scale, a_zero_point, bias, dst_scale,
                            dst_zero_point, dst_dtype, addend):
    if a_scale is None or b_scale is None:
        raise InvalidArgumentError("quantized_matmul: a_scale and b_scale are required")
    ports, to = _quantized_ports("quantized_matmul", a, b, bias, a_scale, b_scale, a_zero_point,
                                 dst_scale, dst_zero_point, dst_dtype)
    if addend is not None:
        ports += (addend,)
    return ports, to


def quantized_matmul(a, b, *, a_scale, b_scale, a_zero_point=None, bias=None, dst_scale=None,
                     dst_zero_point=None, dst_dtype="float32", addend=None, transpose_a=False,
                     transpose_b=False, activation=None, name=None, out=None) -> Tensor:
    """A batched matmul of 8-bit values: a [..., M, K] uint8 or int8 (real
    values a_scale * (a - a_zero_point)) @ b [..., K, N] int8 (real:
    b_scale * b, b_scale one number or one per column N), batch dims
    broadcast as numpy's; transpose_a / transpose_b swap an operand's last
    two dims. bias float32 [N] and addend float32 (broadcast into the
    result, an attention mask) are added in real units before the
    activation. The result is float32, or requantized as quantized_conv2d's
    with dst_dtype uint8/int8. Sums are exact."""
    ports, to = _quantized_matmul_ports(a, b, a_scale, b_scale, a_zero_point, bias, dst_scale,
                                        dst_zero_point, dst_dtype, addend)
    p = _quantized_matmul_params(transpose_a, transpose_b, activation, to, name)
    return _op_run(_capi.OPS["quantized_matmul"], p, ports, out)


def dequantize(x, scale, zero_point=None, axis=1, *, name=None, out=None) -> Tensor:
    """uint8, int8 or int32 x to float32 as ONNX's DequantizeLinear:
    (x - zero_point) * scale, per tensor or per index of `axis` as quantize;
    a zero point array has x's dtype (numbers are taken as x's dtype)."""
    zero_dtype = getattr(x, "dtype", None)
    if zero_dtype not in (np.uint8, np.int8, np.int32):
        zero_dtype = None  # the operator refuses x, naming its dtype
    scale, zero_point = _operators.quantization_arrays("dequantize", scale, zero_point,
                                                       zero_dtype)
    return _op_run(_capi.OPS["dequantize"], _operators.quantize_params(None, axis, name),
                   (x, scale, zero_point), out)


def _linear_params(activation, name, training=False, residual=False):
    """Prepared once per distinct arguments (_prepared); not to be modified."""
    return _prepared(_build_linear_params, activation, name, training, residual)


def _build_linear_params(activation, name, training, residual=False):
    p = _capi.LinearParams()
    _lib.mkc_linear_params_init(ctypes.byref(p))
    p.activation, p.activation_alpha, p.activation_beta = _fused_activation(activation)
    p.training = 1 if training else 0
    p.name = _name(name)
    p.sum = 1 if residual else 0
    return p


def linear(x, weight, bias=None, *, activation=None, residual=None, training=False, name=None,
           out=None) -> Tensor:
    """x[..., in] @ weight[out, in]^T + bias[out], with an optional fused
    activation. Mark weight ``constant=True`` (a Tensor) to convert it to
    oneDNN's layout once. residual: added before the activation (oneDNN's
    sum post-op; a Tensor residual is updated in place, an array is copied
    first). training: oneDNN's training forward, its descriptor left for
    ``mkcache.grad.linear``."""
    p = _linear_params(activation, name, training, residual is not None)
    if residual is not None:
        if out is not None:
            raise InvalidArgumentError("give either residual or out, not both")
        if isinstance(residual, Tensor):
            check_writable(residual, "residual")
        out = residual if isinstance(residual, Tensor) else Tensor(
            np.array(check_array(residual, "residual")))
    args = _Args()
    try:
        hx = args.handle(x, "x", _default_layout())
        hw = args.handle(weight, "weight")
        hb = None if bias is None else args.handle(bias, "bias")
        dst = _out_handle(out)
        status = _linear(ctypes.byref(p), hx, hw, hb, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def _build_matmul_params(transpose_a, transpose_b, activation, name, scale=1.0):
    p = _capi.MatmulParams()
    _lib.mkc_matmul_params_init(ctypes.byref(p))
    p.transpose_a = 1 if transpose_a else 0
    p.transpose_b = 1 if transpose_b else 0
    p.activation, p.activation_alpha, p.activation_beta = _fused_activation(activation)
    p.name = _name(name)
    p.scale = _checks.real(scale, "scale")
    return p


def matmul(a, b, bias=None, *, transpose_a=False, transpose_b=False, scale=1.0,
           activation=None, name=None, out=None) -> Tensor:
    """a[..., M, K] @ b[..., K, N] (+ bias[N]) with broadcast batch dims,
    times scale, then the activation; transpose_a / transpose_b read a / b
    as their last-two-dims transposes. An attention's scores are
    ``matmul(q, k, transpose_b=True, scale=1 / sqrt(head_dim))``."""
    p = _prepared(_build_matmul_params, transpose_a, transpose_b, activation, name, scale)
    args = _Args()
    try:
        ha = args.handle(a, "a", _default_layout())
        hb = args.handle(b, "b", _default_layout())
        hbias = None if bias is None else args.handle(bias, "bias")
        dst = _out_handle(out)
        status = _matmul(ctypes.byref(p), ha, hb, hbias, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def _layer_norm_params(begin_norm_axis, epsilon, name, training=False):
    """Prepared once per distinct arguments (_prepared); not to be modified."""
    return _prepared(_build_layer_norm_params, begin_norm_axis, epsilon, name, training)


def _build_layer_norm_params(begin_norm_axis, epsilon, name, training):
    p = _capi.LayerNormParams()
    _lib.mkc_layer_norm_params_init(ctypes.byref(p))
    p.begin_norm_axis = _checks.integer(begin_norm_axis, "begin_norm_axis", _checks.INT32)
    p.epsilon = _checks.real(epsilon, "epsilon")
    p.training = 1 if training else 0
    p.name = _name(name)
    return p


def layer_norm(x, scale=None, shift=None, *, begin_norm_axis=-1, epsilon=1e-5, training=False,
               name=None, out=None) -> Tensor:
    """Normalizes over dims [begin_norm_axis, rank): (x - mean) /
    sqrt(var + epsilon) * scale + shift (scale/shift hold one value per
    normalized element). training: run the training forward, whose entry
    ``mkcache.grad.layer_norm`` shares."""
    p = _layer_norm_params(begin_norm_axis, epsilon, name, training)
    args = _Args()
    try:
        hx = args.handle(x, "x", _default_layout())
        hs = None if scale is None else args.handle(scale, "scale")
        hb = None if shift is None else args.handle(shift, "shift")
        dst = _out_handle(out)
        status = _layer_norm(ctypes.byref(p), hx, hs, hb, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def _batch_norm_params(epsilon, momentum, training, data_format, name):
    """Prepared once per distinct arguments (_prepared); not to be modified."""
    return _prepared(_build_batch_norm_params, epsilon, momentum, training, data_format, name)


def _build_batch_norm_params(epsilon, momentum, training, data_format, name):
    p = _capi.BatchNormParams()
    _lib.mkc_batch_norm_params_init(ctypes.byref(p))
    p.epsilon = _checks.real(epsilon, "epsilon")
    p.momentum = _checks.real(momentum, "momentum")
    p.training = 1 if training else 0
    p.data_format = _layout.to_enum(data_format, "data_format")
    p.name = _name(name)
    return p


def batch_norm(x, mean=None, variance=None, scale=None, shift=None, *, epsilon=1e-5,
               training=False, momentum=0.9, data_format="NCHW", name=None, out=None):
    """Batch normalization over the channel dim.

    Inference (default): normalizes with `mean` and `variance` (the running
    statistics) and returns a Tensor. Training: normalizes with the batch's
    statistics, updates `mean` and `variance` in place (numpy arrays or
    Tensors, when given) as momentum * running + (1 - momentum) * batch, and
    returns (y, batch_mean, batch_variance) with numpy statistics.
    """
    p = _batch_norm_params(epsilon, momentum, training, data_format, name)
    fmt = p.data_format
    args = _Args()
    try:
        hx = args.handle(x, "x", fmt)
        # Training updates the running statistics in place.
        stats = args.written if training else args.handle
        hm = None if mean is None else stats(mean, "mean")
        hv = None if variance is None else stats(variance, "variance")
        hs = None if scale is None else args.handle(scale, "scale")
        hb = None if shift is None else args.handle(shift, "shift")
        bm = bv = hbm = hbv = None
        if training:
            if isinstance(x, Tensor):
                shape, last = x.shape, x.layout in ("NHWC", "NDHWC", "NWC")
            else:
                shape, last = x.shape, fmt == _capi.LAYOUT_CHANNELS_LAST
            if len(shape) < 2:
                raise InvalidArgumentError(
                    f"batch_norm: x must have a channel dim (rank >= 2), got shape {shape}")
            c = shape[-1] if last and len(shape) > 2 else shape[1]
            bm = np.empty(c, np.float32)
            bv = np.empty(c, np.float32)
            hbm = args.written(bm, "batch_mean")
            hbv = args.written(bv, "batch_variance")
        dst = _out_handle(out)
        status = _batch_norm(ctypes.byref(p), hx, hm, hv, hs, hb, hbm, hbv, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        y = _result(out, dst)
        return (y, bm, bv) if training else y
    finally:
        args.close()


def _lrn_params(size, alpha, beta, k, data_format, name, training=False):
    """Prepared once per distinct arguments (_prepared); not to be modified."""
    return _prepared(_build_lrn_params, size, alpha, beta, k, data_format, name, training)


def _build_lrn_params(size, alpha, beta, k, data_format, name, training):
    fmt = _layout.to_enum(data_format, "data_format")
    size = _checks.integer(size, "size")
    p = _capi.LrnParams()
    _lib.mkc_lrn_params_init(ctypes.byref(p))
    p.size = size
    p.alpha, p.beta = _checks.real(alpha, "alpha"), _checks.real(beta, "beta")
    p.k = _checks.real(k, "k")
    p.data_format = fmt
    p.training = 1 if training else 0
    p.name = _name(name)
    return p


def lrn(x, size=5, alpha=1e-4, beta=0.75, k=1.0, *, data_format="NCHW", training=False,
        name=None, out=None) -> Tensor:
    """Local response normalization across channels:
    x / (k + alpha / size * sum of x^2 over channels c - (size-1)//2 ..
    c + size//2)^beta - ONNX's LRN, and Caffe's and PyTorch's for an odd
    size; for an even size PyTorch's window is the mirror image (c - size//2
    .. c + (size-1)//2). PaddlePaddle's alpha is alpha / size.
    training: leave the training descriptor for ``mkcache.grad.lrn``."""
    p = _lrn_params(size, alpha, beta, k, data_format, name, training)
    fmt = p.data_format
    args = _Args()
    try:
        hx = args.handle(x, "x", fmt)
        dst = _out_handle(out)
        status = _lrn(ctypes.byref(p), hx, ctypes.byref(dst))
        if status:
            _capi.raise_for(status)
        return _result(out, dst)
    finally:
        args.close()


def concat(tensors, axis=0, *, name=None, out=None) -> Tensor:
    """Concatenates arrays/Tensors along `axis` (of their shape as reported;
    all must share rank and layout)."""
    a = _axis(axis)
    if isinstance(tensors, (np.ndarray, Tensor, str, bytes)) or not hasattr(tensors, "__iter__"):
        raise InvalidArgumentError("tensors must be a sequence of arrays or Tensors")
    items = list(tensors)
    if not items:
        raise InvalidArgumentError("concat needs at least one input")
    args = _Args()
    try:
        handles = (_capi.tensor_p * len(items))(
            *[args.handle(t, f"tensors[{i}]", _default_layout()) for i, t in enumerate(items)])
        dst = _out_handle(out)
        _lib.mkc_concat(a, len(items), handles, _name(name), ctypes.byref(dst))
        return _result(out, dst)
    finally:
        args.close()


def transpose(x, axes=None) -> Tensor:
    """x with its axes permuted, as numpy.transpose (axes None reverses them).
    The result is row-major."""
    args = _Args()
    try:
        if not isinstance(x, Tensor):
            x = check_array(x, "x")
        hx = args.handle(x, "x", _default_layout())
        ndim = x.ndim
        if axes is None:
            perm = tuple(reversed(range(ndim)))
        else:
            perm = _checks.integers(axes, ndim, "axes", _checks.INT32,
                                    counts=(len(axes),) if hasattr(axes, "__len__") else ())
        arr = (ctypes.c_int * max(len(perm), 1))(*perm)
        dst = _capi.tensor_p()
        _lib.mkc_transpose(len(perm), arr, hx, ctypes.byref(dst))
        return Tensor._adopt(dst)
    finally:
        args.close()


def reshape(x, shape) -> Tensor:
    """x's values in row-major order of its shape (as reported) with a new
    shape, as numpy.reshape (one dim may be -1). Returns a row-major copy."""
    n = len(shape) if hasattr(shape, "__len__") and not isinstance(shape, (str, bytes)) else 1
    dims = _checks.integers(shape, n, "shape")
    args = _Args()
    try:
        hx = args.handle(x, "x", _default_layout())
        arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        dst = _capi.tensor_p()
        _lib.mkc_reshape(hx, len(dims), arr, ctypes.byref(dst))
        return Tensor._adopt(dst)
    finally:
        args.close()


def flatten(x, start_dim=1) -> Tensor:
    """x with dims [start_dim, rank) merged into one (PyTorch's flatten;
    [N, C, H, W] -> [N, C*H*W] by default)."""
    if not isinstance(x, Tensor):
        x = check_array(x, "x")
    shape = tuple(x.shape)
    start = _checks.integer(start_dim, "start_dim")
    if not -len(shape) <= start < len(shape):
        raise InvalidArgumentError(f"start_dim {start_dim!r} is out of range for rank {len(shape)}")
    start %= len(shape)
    return reshape(x, shape[:start] + (-1,))


def to_layout(x, layout: str) -> Tensor:
    """A new Tensor in `layout`: "NCHW", "NHWC", "NCDHW", "NDHWC" (plain) or
    "nChw8c", "nChw16c", "nCdhw8c", "nCdhw16c" (oneDNN blocked)."""
    if not isinstance(layout, str):
        raise InvalidArgumentError(f"layout must be a str, got {layout!r}")
    args = _Args()
    try:
        hx = args.handle(x, "x", _default_layout())
        dst = _capi.tensor_p()
        _lib.mkc_tensor_to_layout(hx, _checks.name_bytes(layout, "layout"), ctypes.byref(dst))
        return Tensor._adopt(dst)
    finally:
        args.close()
