"""Programs: a model written once as a graph, compiled, run many times.

    g = mkcache.Graph()
    x = g.input("x", (None, 3, 224, 224))      # None: bound at run time
    y = g.conv2d(x, w, b, padding=1, activation="relu")   # arrays -> constants
    y = g.global_avg_pool(y); y = g.flatten(y); y = g.linear(y, w2, b2)
    g.output(y, "logits")
    with g.compile() as prog:
        out = prog.run(x=batch)                 # {"logits": ndarray}
        print(prog.plan())

The Graph's methods take the eager operators' arguments (``name=`` is the
node's cache name; there is no ``out=`` or ``training=``: a program infers).
A numpy array or Tensor where a value is expected becomes a constant, copied
into the graph.
"""
from __future__ import annotations

import ctypes
import numbers
import os
import threading

import numpy as np

from . import _capi, _checks, _layout, _operators, ops
from .errors import Error, InvalidArgumentError
from . import tensor as _tensor
from .tensor import Tensor, _Owner, check_array, input_owner, wrap_handle

_lib = _capi.lib
# (program*, int64*, void**, void**) without argtypes: every argument is
# passed as the ctypes object it already is. With CPython's and NumPy's
# layout known (_DATA_FIELD), the _ref form reads each array's data pointer
# from its object: the arrays' pointer slots are then the addresses of
# those fields, plain integers, with no pointer object made per array.
_run_plain = _capi.raw["mkc_program_run_plain"]
_run_plain_ref = _capi.raw["mkc_program_run_plain_ref"]
_F32 = np.dtype(np.float32)
_ndarray, _empty = np.ndarray, np.empty
_DATA_FIELD = _tensor._DATA_FIELD


if _DATA_FIELD is not None:
    def _slot(array, _id=id, _field=_DATA_FIELD) -> int:
        """What the run's pointer arrays hold for `array`: the address of
        its data-pointer field (for the _ref call)."""
        return _id(array) + _field
    _run = _run_plain_ref
else:  # pragma: no cover - CPython and NumPy keep the data field's place
    def _slot(array) -> int:
        return _tensor.data_pointer(array)
    _run = _run_plain


class Value:
    """A value of a Graph: an input, a constant or a node's result."""
    __slots__ = ("graph", "index")
    _mkcache_graph_value = True  # what an eager operator's argument check tells apart

    def __init__(self, graph: "Graph", index: int):
        self.graph, self.index = graph, index

    def __repr__(self):
        return f"<mkcache.graph.Value {self.index}>"


def _params(cls, init, **fields):
    p = cls()
    init(ctypes.byref(p))
    for k, v in fields.items():
        setattr(p, k, v)
    return p


class _Closed:
    """close() on collection and at the end of a `with` block."""

    def close(self) -> None:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Graph(_Closed):
    """A model's graph, built node by node from one thread."""

    def __init__(self):
        self._handle = ctypes.c_void_p()
        self._input_layouts = {}  # name -> layout value, for the programs' runs
        self._input_ranks = {}
        self._input_dtypes = {}
        _lib.mkc_graph_create(ctypes.byref(self._handle))

    def close(self) -> None:
        if self._handle:
            _lib.mkc_graph_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    @property
    def handle(self):
        if not self._handle:
            raise InvalidArgumentError("the graph is closed")
        return self._handle

    # -------------------------------------------------------------- values
    def input(self, name: str, shape, layout: str = "NCHW", dtype="float32") -> Value:
        """An input of the runs, passed by `name`; None (or -1) in `shape`
        for a dim bound at run time. layout "NHWC" (or NDHWC/NWC) for
        channels-last data, shape then given in that order. dtype: float32,
        or int32, int64 or bool (a numpy dtype or its name) for indices and
        masks, int8, uint8, float16 or mkcache.bfloat16 (passed as Tensors
        of that dtype); a node that does not take it is refused at
        compile, naming the node, the port and the dtype."""
        dims = tuple(-1 if d is None else _checks.integer(d, "shape") for d in shape)
        fmt = _layout.to_enum(layout, "layout")
        if fmt == _capi.LAYOUT_TARGET:
            raise InvalidArgumentError("layout must be given")
        dtype_value = _tensor.dtype_value(dtype, "dtype")
        arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        value = ctypes.c_int()
        _lib.mkc_graph_input(self.handle, _checks.name_bytes(name, "name"),
                             dtype_value, len(dims), arr, fmt, ctypes.byref(value))
        self._input_layouts[name] = fmt
        self._input_ranks[name] = len(dims)
        self._input_dtypes[name] = _tensor.dtype_of_value(dtype_value)
        return Value(self, value.value)

    def constant(self, array, name: str | None = None, layout: str | None = None) -> Value:
        """A constant: a copy of `array`'s values (a numpy array or Tensor;
        an array's layout label is `layout`, channels-first by default)."""
        return self._constant(array, name, None if layout is None
                              else _layout.to_enum(layout, "layout"))

    def _constant(self, array, name, fmt) -> Value:
        if isinstance(array, Tensor):
            handle = array.handle
        else:
            if fmt is None:
                fmt = _capi.LAYOUT_CHANNELS_FIRST
            owner = input_owner(check_array(array, "array", _tensor.ANY_DTYPE), "array", fmt,
                                _tensor.ANY_DTYPE)  # held for the call
            handle = owner.handle
        value = ctypes.c_int()
        _lib.mkc_graph_constant(self.handle, handle,
                                None if name is None else _checks.name_bytes(name, "name"),
                                ctypes.byref(value))
        return Value(self, value.value)

    def output(self, value: Value, name: str) -> None:
        """Marks `value` as an output of the runs, by `name`."""
        _lib.mkc_graph_output(self.handle, self._value(value, "value"),
                              _checks.name_bytes(name, "name"))

    def _value(self, v, argument: str, layout: int | None = None) -> int:
        if isinstance(v, Value):
            if v.graph is not self:
                raise InvalidArgumentError(f"{argument} is a value of another graph")
            # The C call takes an int: a larger index would wrap to another value.
            return _checks.integer(v.index, argument, _checks.INT32)
        if v is None:
            return -1
        if not isinstance(v, (np.ndarray, Tensor)) and isinstance(v, numbers.Real) \
                and not isinstance(v, bool):
            v = np.array([_checks.real(v, argument)], dtype=np.float32)
        return self._constant(v, argument, layout).index

    def _node(self, op: str, params, inputs) -> Value:
        arr = (ctypes.c_int * max(len(inputs), 1))(*inputs)
        out = ctypes.c_int()
        _lib.mkc_graph_node(self.handle, _capi.OPS[op], ctypes.byref(params), len(inputs), arr,
                            ctypes.byref(out))
        return Value(self, out.value)

    def _table_node(self, op: int, params, inputs) -> Value:
        """A node of operator `op` (an mkc_op value) of the library's table:
        the body of erf, reduce_sum, ..."""
        ids = [self._value(v, f"input {i}") for i, v in enumerate(inputs)]
        arr = (ctypes.c_int * max(len(ids), 1))(*ids)
        out = ctypes.c_int()
        _lib.mkc_graph_node(self.handle, op, None if params is None else ctypes.byref(params),
                            len(ids), arr, ctypes.byref(out))
        return Value(self, out.value)

    @staticmethod
    def _inputs(*values) -> list:
        """Trailing absent optional inputs dropped; -1 for absent ones before
        a given one."""
        items = list(values)
        while items and items[-1] == -1:
            items.pop()
        return items

    # ---------------------------------------------------------- operators
    def _conv(self, op, k, x, weight, bias, stride, padding, dilation, groups, data_format,
              activation, name, output_padding=0):
        if isinstance(padding, str):
            if padding.lower() != "valid":
                raise InvalidArgumentError(
                    "padding 'same' in a Graph: give the padding as numbers (the input's size "
                    "may be bound only at run time)")
            padding = 0
        p = ops._build_conv_params("conv" if op != "conv2d_transpose" else "deconv", k, None,
                                   None, stride, padding, dilation, groups, data_format,
                                   activation, name, output_padding)
        fmt = p.data_format
        return self._node(op, p, self._inputs(self._value(x, "x", fmt),
                                              self._value(weight, "weight"),
                                              self._value(bias, "bias")))

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
               data_format="NCHW", activation=None, name=None) -> Value:
        """As mkcache.conv2d (padding as numbers or "valid")."""
        return self._conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups,
                          data_format, activation, name)

    def conv3d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
               data_format="NCDHW", activation=None, name=None) -> Value:
        return self._conv("conv3d", 3, x, weight, bias, stride, padding, dilation, groups,
                          data_format, activation, name)

    def conv2d_transpose(self, x, weight, bias=None, *, stride=1, padding=0, output_padding=0,
                         dilation=1, groups=1, data_format="NCHW", activation=None,
                         name=None) -> Value:
        return self._conv("conv2d_transpose", 2, x, weight, bias, stride, padding, dilation,
                          groups, data_format, activation, name, output_padding)

    def quantized_conv2d(self, x, weight, bias=None, *, src_scale, weight_scale,
                         src_zero_point=None, dst_scale=None, dst_zero_point=None,
                         dst_dtype="float32", residual=None, sum_scale=1.0,
                         sum_zero_point=0, stride=1, padding=0, dilation=1, groups=1,
                         data_format="NCHW", activation=None, name=None) -> Value:
        """As mkcache.quantized_conv2d (padding as numbers); scales and zero
        points numbers, arrays (made constants) or Values."""
        if isinstance(padding, str):
            raise InvalidArgumentError("quantized_conv2d in a Graph: give the padding as numbers")
        ports, to = ops._quantized_ports("quantized_conv2d", x, weight, bias, src_scale,
                                         weight_scale, src_zero_point, dst_scale,
                                         dst_zero_point, dst_dtype)
        p = ops._quantized_conv_params(None, None, stride, padding, dilation, groups,
                                       data_format, activation, to, name, residual is not None,
                                       sum_scale, sum_zero_point)
        if residual is not None:
            ports += (residual,)
        return self._quantized_node("quantized_conv2d", p, ports, p.conv.data_format)

    def quantized_linear(self, x, weight, bias=None, *, src_scale, weight_scale,
                         src_zero_point=None, dst_scale=None, dst_zero_point=None,
                         dst_dtype="float32", residual=None, sum_scale=1.0, sum_zero_point=0,
                         activation=None, name=None) -> Value:
        """As mkcache.quantized_linear; scales and zero points as for
        quantized_conv2d."""
        ports, to = ops._quantized_ports("quantized_linear", x, weight, bias, src_scale,
                                         weight_scale, src_zero_point, dst_scale,
                                         dst_zero_point, dst_dtype)
        if residual is not None:
            ports += (residual,)
        return self._quantized_node(
            "quantized_linear", ops._quantized_linear_params(
                activation, to, name, residual is not None, sum_scale, sum_zero_point),
            ports, None)

    def quantized_matmul(self, a, b, *, a_scale, b_scale, a_zero_point=None, bias=None,
                         dst_scale=None, dst_zero_point=None, dst_dtype="float32", addend=None,
                         transpose_a=False, transpose_b=False, activation=None,
                         name=None) -> Value:
        """As mkcache.quantized_matmul."""
        ports, to = ops._quantized_matmul_ports(a, b, a_scale, b_scale, a_zero_point, bias,
                                                dst_scale, dst_zero_point, dst_dtype, addend)
        p = ops._quantized_matmul_params(transpose_a, transpose_b, activation, to, name)
        names = ("a", "b", "a_scale", "b_scale", "bias", "a_zero_point", "dst_scale",
                 "dst_zero_point", "addend")
        values = [self._value(v, what) for v, what in zip(ports, names)]
        return self._node("quantized_matmul", p, self._inputs(*values))

    _QUANTIZED_PORTS = ("x", "weight", "src_scale", "weight_scale", "bias", "src_zero_point",
                        "dst_scale", "dst_zero_point", "residual")

    def _quantized_node(self, op, params, ports, fmt) -> Value:
        values = [self._value(v, what, fmt if i in (0, 8) else None)
                  for i, (v, what) in enumerate(zip(ports, self._QUANTIZED_PORTS))]
        return self._node(op, params, self._inputs(*values))

    def activation(self, x, kind: str, alpha=None, beta=None, *, name=None) -> Value:
        try:
            k, a, b = _operators.ACTIVATIONS[kind]
        except (KeyError, TypeError):
            raise InvalidArgumentError(
                f"activation kind must be one of {sorted(_operators.ACTIVATIONS)}, "
                f"got {kind!r}") from None
        if alpha is not None:
            a = _checks.real(alpha, "alpha")
        if beta is not None:
            b = _checks.real(beta, "beta")
        p = _params(_capi.ActivationParams, _lib.mkc_activation_params_init, kind=k, alpha=a,
                    beta=b, name=ops._name(name))
        return self._node("activation", p, [self._value(x, "x")])

    # The bodies of the methods made from the operators' description
    # (_operators): softmax and log_softmax, add, sub, ..., max_pool2d, ...
    def _softmax(self, x, axis, log, name):
        p = _params(_capi.SoftmaxParams, _lib.mkc_softmax_params_init,
                    axis=_checks.integer(axis, "axis", _checks.INT32), log=log,
                    name=ops._name(name))
        return self._node("softmax", p, [self._value(x, "x")])

    def _binary(self, kind, a, b, name):
        p = _params(_capi.BinaryParams, _lib.mkc_binary_params_init, kind=kind,
                    name=ops._name(name))
        return self._node("binary", p, [self._value(a, "a"), self._value(b, "b")])

    def _pool(self, kind, x, k, kernel_size, stride, padding, ceil_mode, data_format, name,
              global_=False, dilation=1):
        p = ops._build_pool_params(kind, k, kernel_size, stride, padding, ceil_mode,
                                   data_format, name, global_, False, dilation)
        return self._node("pool", p, [self._value(x, "x")])

    def linear(self, x, weight, bias=None, *, activation=None, name=None) -> Value:
        p = ops._build_linear_params(activation, name, False)
        return self._node("linear", p, self._inputs(self._value(x, "x"),
                                                    self._value(weight, "weight"),
                                                    self._value(bias, "bias")))

    def matmul(self, a, b, bias=None, *, transpose_a=False, transpose_b=False, scale=1.0,
               activation=None, addend=None, name=None) -> Value:
        """activation(scale * (a @ b + bias) + addend): the addend (an
        attention mask) broadcasts into the product, never widening it. The
        compile fuses a following add into the matmul this way itself."""
        p = ops._build_matmul_params(transpose_a, transpose_b, activation, name, scale)
        return self._node("matmul", p, self._inputs(self._value(a, "a"), self._value(b, "b"),
                                                    self._value(bias, "bias"),
                                                    self._value(addend, "addend")))

    def layer_norm(self, x, scale=None, shift=None, *, begin_norm_axis=-1, epsilon=1e-5,
                   name=None) -> Value:
        p = ops._build_layer_norm_params(begin_norm_axis, epsilon, name, False)
        return self._node("layer_norm", p, self._inputs(self._value(x, "x"),
                                                        self._value(scale, "scale"),
                                                        self._value(shift, "shift")))

    def batch_norm(self, x, mean, variance, scale=None, shift=None, *, epsilon=1e-5,
                   data_format="NCHW", name=None) -> Value:
        """Inference batch normalization with the running statistics."""
        p = ops._build_batch_norm_params(epsilon, 0.9, False, data_format, name)
        return self._node("batch_norm", p, self._inputs(
            self._value(x, "x"), self._value(mean, "mean"), self._value(variance, "variance"),
            self._value(scale, "scale"), self._value(shift, "shift")))

    def lrn(self, x, size=5, alpha=1e-4, beta=0.75, k=1.0, *, data_format="NCHW",
            name=None) -> Value:
        p = ops._build_lrn_params(size, alpha, beta, k, data_format, name, False)
        return self._node("lrn", p, [self._value(x, "x")])

    def concat(self, values, axis=0, *, name=None) -> Value:
        items = list(values)
        if not items:
            raise InvalidArgumentError("concat needs at least one input")
        p = _params(_capi.ConcatParams, _lib.mkc_concat_params_init,
                    axis=_checks.integer(axis, "axis", _checks.INT32), name=ops._name(name))
        return self._node("concat", p, [self._value(v, f"values[{i}]")
                                        for i, v in enumerate(items)])

    def transpose(self, x, axes) -> Value:
        """x with its axes permuted (dst axis i is x's axis axes[i])."""
        perm = _checks.integers(axes, len(axes), "axes", _checks.INT32)
        if not 1 <= len(perm) <= _capi.MAX_NDIMS:
            raise InvalidArgumentError(f"axes must have 1..{_capi.MAX_NDIMS} entries")
        p = _params(_capi.TransposeParams, _lib.mkc_transpose_params_init, ndims=len(perm))
        p.perm[:len(perm)] = perm
        return self._node("transpose", p, [self._value(x, "x")])

    def quantize(self, x, scale, zero_point=None, dtype="uint8", axis=1, *, fast=False,
                 name=None) -> Value:
        """mkcache.quantize in a graph: scale and zero_point numbers, arrays
        (made constants) or Values."""
        if isinstance(zero_point, np.ndarray) and zero_point.dtype in (np.uint8, np.int8):
            dtype = zero_point.dtype
        p = _operators.quantize_params(dtype, axis, name, fast)
        return self._quantization("quantize", p, x, scale, zero_point,
                                  _tensor.NUMPY_DTYPES[p.to])

    def dequantize(self, x, scale, zero_point=None, axis=1, *, name=None) -> Value:
        """mkcache.dequantize in a graph: scale a number, an array or a
        Value; zero_point an array of x's dtype or a Value."""
        if zero_point is not None and not isinstance(zero_point, (np.ndarray, Tensor, Value)):
            raise InvalidArgumentError(
                "dequantize: in a graph, give zero_point as a numpy array of x's dtype "
                "(uint8, int8 or int32) or a Value")
        return self._quantization("dequantize", _operators.quantize_params(None, axis, name), x,
                                  scale, zero_point, None)

    def _quantization(self, op, params, x, scale, zero_point, zero_dtype) -> Value:
        if not isinstance(scale, Value):
            scale, _ = _operators.quantization_arrays(op, scale, None, None)
        if zero_point is not None and not isinstance(zero_point, Value):
            _, zero_point = _operators.quantization_arrays(op, 1.0, zero_point, zero_dtype)
        values = [x, scale] + ([] if zero_point is None else [zero_point])
        return self._table_node(_capi.OPS[op], params, values)

    def reshape(self, x, shape) -> Value:
        """x's values in row-major order with a new shape: one dim may be -1
        (inferred), a 0 keeps x's dim at that place."""
        dims = _checks.integers(shape, len(shape), "shape")
        if not 1 <= len(dims) <= _capi.MAX_NDIMS:
            raise InvalidArgumentError(f"shape must have 1..{_capi.MAX_NDIMS} dims")
        p = _params(_capi.ReshapeParams, _lib.mkc_reshape_params_init, ndims=len(dims))
        p.dims[:len(dims)] = dims
        return self._node("reshape", p, [self._value(x, "x")])

    def flatten(self, x, start_dim=1) -> Value:
        """Dims [start_dim, rank) merged into one (x's leading dims kept)."""
        start = _checks.integer(start_dim, "start_dim")
        if start < 0:
            raise InvalidArgumentError("start_dim must be >= 0 in a Graph")
        return self.reshape(x, (0,) * start + (-1,))

    # ------------------------------------------------------------ compile
    def compile(self, *, fuse: bool = True, inplace: bool = True, reuse: bool = True,
                capacity: int = 0, impl: dict | None = None, choose: str = "priority",
                choices=None, dump=None, precision: str = "f32", precision_per_op=None,
                calibration=None, calibration_method: str | None = None,
                calibration_percentile: float | None = None,
                exact_plans: int = 8) -> "Program":
        """A Program of this graph (the graph may be built further or closed
        afterwards). fuse: merge what oneDNN runs as one primitive (an
        activation into the conv/linear/matmul before it, an add into the
        conv before it, an inference batch_norm into the conv's weights, a
        multiplication by a constant scalar into the matmul before it; and,
        where the scores of all heads outgrow the L2 caches of the threads
        in use, an attention's scores matmul, softmax and context matmul
        into one step run in blocks of rows per thread); results then move
        by rounding only. inplace: a conv's sum writes into
        its residual at the residual's last use (element-wise and normalising
        nodes write over their input there too), and reshape / transpose read
        their input's bytes where they are (no copy; a matmul reads such a
        transposed view directly). reuse: values whose lives
        do not overlap share arena bytes. capacity > 0: at most that many
        input-shape plans kept, a new one dropping the plan used least
        recently (counted in mkcache.cache.stats()'s evictions).
        exact_plans: the plans (input shapes, per OpenMP thread count)
        compiled with every primitive made for their own shapes; the plans
        after them run each float32 linear layer that would be on oneDNN's
        matmul in two parts, its rows' whole multiples of 128 and the rest,
        on primitives the plans of other shapes share ("onednn_matmul_shared"
        in the plan): far less memory over many input shapes, a few percent
        slower where a layer has two parts. 0: every plan so; < 0: none.
        impl: {operator: implementation} for every
        node of that operator ("conv2d", "activation", "matmul", ... as the
        plan names them; "onednn", "reference", or the variants
        "onednn_matmul" (a linear layer on oneDNN's matmul, not its inner
        product), "onednn_matmul_shared" (the same in shared row parts),
        "onednn_conv1x1" (a linear layer as a 1x1 convolution over its
        rows) and "onednn_contiguous" (a node reading strided views, on
        contiguous copies of them)), before MKCACHE_IMPL; an implementation
        that cannot run such a node is an error. choose: "priority" (the
        best that supports each node; never a variant) or "measure" (each
        node's candidates, the variants among them, timed on the first run
        of an input shape; the fastest kept, a later one by priority only
        when more than 3% faster; each attention chain timed as one step and
        as three; the plan shows the times). choices: a file written by
        Program.save_choices (or its text as bytes), taken as it is for the
        nodes it names, so a deployment need not measure. dump: a path the
        compiler appends its IR to as text after every pass (the graph as
        built and after fusion, then each plan after bind_inputs, infer,
        precision, choose, attention, lower, outputs and plan_memory); None: the path
        MKCACHE_DUMP names, if any. precision: "f32"; "int8": each conv2d (grouped,
        depthwise and with a fused residual sum included) and linear layer
        with constant weights runs quantized (its src to uint8 over the
        calibrated range, its weights to int8 per output channel, 7 bits on
        CPUs without VNNI), the rest float32; "bf16": every convolution,
        linear, matmul, pooling, activation, softmax, batch and layer norm,
        binary, concat and transpose computes in bfloat16 (biases and the
        norms' statistics, scales and shifts stay float32), converted at the
        edges, the outputs float32
        (needs AVX-512 or AVX2-VNNI-2, else impl= must put those operators
        on "reference"); "auto": "int8" when calibration is given, else
        "bf16" where the CPU computes bfloat16 natively, else "f32" (the
        plan's first lines say which). precision_per_op: {operator: "f32" |
        "bf16"} for operators that compute otherwise than the program ("int8"
        keeps them float32; "f32" or "bf16" plans take either), also written
        into precision as "bf16,layer_norm=f32". calibration (int8, auto): batches (an iterable of input
        dicts: a float32 program of this graph is compiled, calibrated on
        them and closed, its cache entries going with it), or the text
        Program.calibration() gave (str or bytes), or a path to a file
        Program.save_calibration wrote. calibration_method,
        calibration_percentile: how batches are made into ranges
        (Program.calibrate's method and percentile); a text or file holds
        its ranges already, and takes neither."""
        if impl is None:
            impl_text = None
        elif isinstance(impl, dict):
            for op, name in impl.items():
                if not (isinstance(op, str) and isinstance(name, str)):
                    raise InvalidArgumentError("impl: operators and implementations must be "
                                               f"str, got {op!r}: {name!r}")
            impl_text = ",".join(f"{op}={name}" for op, name in impl.items()).encode()
        else:
            raise InvalidArgumentError(
                f"impl must be a dict {{operator: implementation}}, got {type(impl).__name__}")
        if choose not in ("priority", "measure"):
            raise InvalidArgumentError(f"choose must be 'priority' or 'measure', got {choose!r}")
        if choices is None or isinstance(choices, bytes):
            choices_text = choices
        elif isinstance(choices, (str, os.PathLike)):
            # A path only: an int would be taken for a file descriptor (and
            # closed).
            try:
                with open(choices, "rb") as f:
                    choices_text = f.read()
            except OSError as e:
                raise InvalidArgumentError(f"choices: cannot read {choices!r}: {e}") from e
        else:
            raise InvalidArgumentError("choices must be a path or the text as bytes, got "
                                       f"{type(choices).__name__}")
        if dump is None:
            dump_text = None
        elif isinstance(dump, (str, os.PathLike)):
            dump_text = os.fsencode(dump)
        else:
            raise InvalidArgumentError(f"dump must be a path, got {type(dump).__name__}")
        for what, text in (("impl", impl_text), ("choices", choices_text), ("dump", dump_text)):
            if text is not None and b"\0" in text:
                raise InvalidArgumentError(f"{what} holds a NUL byte (text after it would be lost)")
        if not isinstance(precision, str):
            raise InvalidArgumentError(f"precision must be a str, got {type(precision).__name__}")
        precision, _, per_op = precision.partition(",")
        if precision not in ("f32", "bf16", "int8", "auto"):
            raise InvalidArgumentError(
                f"precision must be 'f32', 'bf16', 'int8' or 'auto', got {precision!r}")
        if precision_per_op is not None:
            if not isinstance(precision_per_op, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in precision_per_op.items()):
                raise InvalidArgumentError("precision_per_op must be a dict {operator: 'f32' | "
                                           f"'bf16'}}, got {precision_per_op!r}")
            per_op = ",".join([per_op] * bool(per_op) +
                              [f"{op}={p}" for op, p in precision_per_op.items()])
        if "\0" in per_op:
            raise InvalidArgumentError("precision holds a NUL byte")
        calibration_text = None
        if calibration is None and (calibration_method, calibration_percentile) != (None, None):
            raise InvalidArgumentError(
                "calibration_method and calibration_percentile are for calibration batches "
                "(none given)")
        if precision == "int8" or (precision == "auto" and calibration is not None):
            calibration_text = self._calibration_text(
                calibration, dict(fuse=fuse, inplace=inplace, reuse=reuse, impl=impl,
                                  choose=choose, choices=choices),
                dict(method=calibration_method, percentile=calibration_percentile))
        elif calibration is not None:
            raise InvalidArgumentError("calibration is for precision='int8' (or 'auto')")
        o = _params(_capi.ProgramOptions, _lib.mkc_program_options_init,
                    fuse=1 if fuse else 0, inplace=1 if inplace else 0,
                    reuse=1 if reuse else 0, capacity=_checks.integer(capacity, "capacity"),
                    impl=impl_text, measure=1 if choose == "measure" else 0,
                    choices=choices_text, dump=dump_text,
                    precision=(precision + ("," + per_op if per_op else "")).encode(),
                    calibration=calibration_text,
                    exact_plans=_checks.integer(exact_plans, "exact_plans"))
        handle = ctypes.c_void_p()
        _lib.mkc_program_compile(self.handle, ctypes.byref(o), ctypes.byref(handle))
        return Program(handle, dict(self._input_layouts), dict(self._input_ranks),
                       dict(self._input_dtypes))

    def _calibration_text(self, calibration, options: dict, method: dict) -> bytes:
        """The calibration an int8 compile reads, as bytes: text or a file
        as given, or made by calibrating a float32 program on batches by
        `method` (Program.calibrate's method and percentile)."""
        given = isinstance(calibration, (bytes, str, os.PathLike))
        if given and any(v is not None for v in method.values()):
            raise InvalidArgumentError(
                "calibration_method and calibration_percentile are for calibration batches; "
                "a calibration text or file holds its ranges already")
        if calibration is None:
            raise InvalidArgumentError(
                "precision='int8' needs calibration: batches of inputs, or what "
                "Program.calibration() gave")
        if isinstance(calibration, bytes):
            text = calibration
        elif isinstance(calibration, str) and "\t" in calibration:
            text = calibration.encode()
        elif isinstance(calibration, (str, os.PathLike)):
            try:
                with open(calibration, "rb") as f:
                    text = f.read()
            except OSError as e:
                raise InvalidArgumentError(f"calibration: cannot read {calibration!r}: {e}") \
                    from e
        else:
            # The float32 warm-up: its program (and its cache entries) go
            # once the ranges are read.
            with self.compile(**options) as warm:
                text = warm.calibrate(calibration, **method).encode()
        if b"\0" in text:
            raise InvalidArgumentError("calibration holds a NUL byte")
        return text


# The activation aliases (relu, gelu, clip, ...), pools, binaries, softmax
# and log_softmax: made from the description the eager functions are made
# from, with the same parameters but out= and training=.
_operators.define_methods(Graph, globals())


class Program(_Closed):
    """A compiled graph. run() may be called from many threads at once."""

    def __init__(self, handle, input_layouts: dict, input_ranks: dict, input_dtypes: dict):
        self._handle = handle
        self._input_layouts = input_layouts
        self._input_ranks = input_ranks
        self._input_dtypes = input_dtypes
        # The numpy fast path of run() passes float32 buffers only.
        self._all_float32 = all(d == np.float32 for d in input_dtypes.values())
        # Input shapes -> (their dims as the C call takes them, the output
        # shapes): what the numpy fast path of run() needs per shape.
        self._shapes = {}
        n = ctypes.c_int()
        name = ctypes.c_char_p()
        _lib.mkc_program_inputs(handle, ctypes.byref(n))
        self.input_names = []
        for i in range(n.value):
            _lib.mkc_program_input_name(handle, i, ctypes.byref(name))
            self.input_names.append(name.value.decode())
        _lib.mkc_program_outputs(handle, ctypes.byref(n))
        self.output_names = []
        for i in range(n.value):
            _lib.mkc_program_output_name(handle, i, ctypes.byref(name))
            self.output_names.append(name.value.decode())
        self._ranks = tuple(input_ranks[n] for n in self.input_names)
        self._output_set = frozenset(self.output_names)
        # The pointer arrays the plain-buffer call reads, one pair per
        # thread: run() may be called from many threads at once.
        self._per_thread = threading.local()

    @property
    def handle(self):
        if not self._handle:
            raise InvalidArgumentError("the program is closed")
        return self._handle

    def close(self) -> None:
        """Destroys the program and every cache entry it made."""
        if self._handle:
            _lib.mkc_program_destroy(self._handle)
            self._handle = None

    def run(self, outputs: dict | None = None, **inputs) -> dict:
        """Runs the program on the inputs (numpy arrays or Tensors, by name)
        and returns {output name: numpy array}, each of its output's dtype
        (float32, or bool, int32, int64 where the model computes one).
        outputs: {name: array} to fill preallocated C-contiguous arrays of
        those dtypes instead (returned as they are)."""
        fast = self._run_arrays(inputs, outputs)
        if fast is not None:
            return fast
        self._check_input_names(inputs, "run")
        in_handles, owners = self._input_handles(inputs)  # owners: held for the call
        given = dict(outputs or {})
        unknown = [n for n in given if n not in self.output_names]
        if unknown:
            raise InvalidArgumentError(f"run: unknown outputs {unknown}; the program gives "
                                       f"{self.output_names}")
        out_owners = {}
        out_handles = (_capi.tensor_p * len(self.output_names))()
        for i, n in enumerate(self.output_names):
            if n in given:
                arr = given[n]
                if not (isinstance(arr, np.ndarray) and arr.dtype in _tensor.DTYPES
                        and arr.flags.c_contiguous and arr.flags.writeable):
                    raise InvalidArgumentError(
                        f"run: outputs[{n!r}] must be a writable C-contiguous array of the "
                        "output's dtype")
                # Labelled channels-first: an output in channels-last order is
                # filled through a Tensor of that layout instead.
                out_owners[n] = _Owner(wrap_handle(arr, _capi.LAYOUT_CHANNELS_FIRST))
                out_handles[i] = out_owners[n].handle
        _lib.mkc_program_run(self.handle, len(self.input_names), in_handles,
                             len(self.output_names), out_handles)
        result = {}
        for i, n in enumerate(self.output_names):
            if n in given:
                result[n] = given[n]
            else:
                result[n] = Tensor._adopt(_capi.tensor_p(out_handles[i])).numpy()
        return result

    __call__ = run

    def _check_input_names(self, inputs: dict, what: str) -> None:
        missing = [n for n in self.input_names if n not in inputs]
        extra = [n for n in inputs if n not in self.input_names]
        if missing or extra:
            raise InvalidArgumentError(
                f"{what}: the program takes inputs {self.input_names}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {extra}" if extra else ""))

    def _input_handles(self, inputs: dict):
        """The C array of the inputs' handles in the program's order, and the
        owners of the handles made for numpy arrays."""
        handles, owners = [], []
        for n in self.input_names:
            v = inputs[n]
            if isinstance(v, Tensor):
                handles.append(v.handle)
            else:
                owners.append(input_owner(v, n, self._input_layouts[n],
                                          (self._input_dtypes[n],)))
                handles.append(owners[-1].handle)
        return (_capi.tensor_p * max(len(handles), 1))(*handles), owners

    def _shapes_for(self, key):
        """(the input dims as the C call takes them, the output shapes) for
        input shapes `key` (one input: its shape; else a tuple of shapes),
        remembered; None when a shape has another rank than its input or an
        empty dim (the general path then says what is wrong)."""
        shapes = (key,) if len(self._ranks) == 1 else key
        if any(len(shape) != rank or 0 in shape for shape, rank in zip(shapes, self._ranks)):
            return None
        flat = [d for shape in shapes for d in shape]
        dims = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        out = []
        nd = ctypes.c_int()
        dtype = ctypes.c_int()
        buf = (ctypes.c_int64 * _capi.MAX_NDIMS)()
        for i in range(len(self.output_names)):
            _lib.mkc_program_output_shape(self.handle, dims, i, ctypes.byref(nd), buf)
            _lib.mkc_program_output_dtype(self.handle, dims, i, ctypes.byref(dtype))
            if dtype.value not in _tensor.NUMPY_DTYPES:
                return None  # a bfloat16 result: the general path exports it as float32
            out.append((tuple(buf[:nd.value]), _tensor.NUMPY_DTYPES[dtype.value]))
        if len(self._shapes) >= 1024:
            self._shapes.clear()
        entry = self._shapes[key] = (dims, tuple((n, s, d) for n, (s, d) in
                                                 zip(self.output_names, out)))
        return entry

    def _run_arrays(self, inputs: dict, outputs):
        """run() for numpy inputs (float32, C-contiguous, of the graph's
        ranks) with one C call on their buffers; None: take the general
        path (which also reports what is wrong). What is checked once per
        input shape (ranks, no empty dim) is checked in _shapes_for."""
        names = self.input_names
        if len(inputs) != len(names) or not self._handle or not self._all_float32:
            return None
        if len(names) == 1:  # the usual case, without the loops
            a = inputs.get(names[0])
            if type(a) is not _ndarray or a.dtype is not _F32 or not a.flags.c_contiguous:
                return None
            arrays = (a,)
            key = a.shape
        else:
            arrays = [inputs.get(n) for n in names]
            for a in arrays:
                if type(a) is not _ndarray or a.dtype is not _F32 or not a.flags.c_contiguous:
                    return None
            key = tuple([a.shape for a in arrays])
        entry = self._shapes.get(key) or self._shapes_for(key)
        if entry is None:
            return None
        dims, out_shapes = entry
        local = self._per_thread
        try:
            in_ptrs, out_ptrs = local.in_ptrs, local.out_ptrs
        except AttributeError:
            in_ptrs = local.in_ptrs = (ctypes.c_void_p * max(len(names), 1))()
            out_ptrs = local.out_ptrs = (ctypes.c_void_p * max(len(self.output_names), 1))()
        result = {}
        if outputs is None:
            for i, (n, shape, dtype) in enumerate(out_shapes):
                y = result[n] = _empty(shape, dtype)
                out_ptrs[i] = _slot(y)
        else:
            if not outputs.keys() <= self._output_set:
                return None
            for i, (n, shape, dtype) in enumerate(out_shapes):
                y = outputs.get(n)
                if y is None:
                    y = _empty(shape, dtype)
                elif not (type(y) is _ndarray and y.dtype == dtype and y.shape == shape
                          and y.flags.c_contiguous and y.flags.writeable):
                    return None
                result[n] = y
                out_ptrs[i] = _slot(y)
        for i, a in enumerate(arrays):
            in_ptrs[i] = _slot(a)
        status = _run(self._handle, dims, in_ptrs, out_ptrs)
        if status:
            _capi.raise_for(status)
        return result

    def profile(self, **inputs) -> list:
        """One run with every step timed on its own: [{"step", "what", "impl",
        "us", "flops", "arithmetic", "gflops", "peak"}, ...] in plan order
        ("what": the node or "convert"; "impl": the implementation, e.g.
        "onednn:jit:avx2"; "flops": the arithmetic of a conv, linear or
        matmul step, else 0, in "arithmetic" ("f32", "bf16" or "int8");
        "gflops": its rate; "peak": that rate's share of what the calling
        thread's OpenMP threads can reach, mkcache.peak_flops(arithmetic)
        each). The
        steps then run one after another, so their sum exceeds a plain run's
        time."""
        missing = [n for n in self.input_names if n not in inputs]
        if missing or len(inputs) != len(self.input_names):
            raise InvalidArgumentError(f"profile: the program takes inputs {self.input_names}")
        in_handles, owners = self._input_handles(inputs)  # owners: held for the call
        out_handles = (_capi.tensor_p * max(len(self.output_names), 1))()
        _lib.mkc_program_profile(self.handle, len(self.input_names), in_handles,
                                 len(self.output_names), out_handles)
        for i in range(len(self.output_names)):
            _lib.mkc_tensor_destroy(out_handles[i])
        text = _capi.call_with_buffer(_lib.mkc_program_profile_text, self.handle)
        from . import get_num_threads, peak_flops  # the package imports this module
        threads = get_num_threads()
        machine = {}  # arithmetic -> what the threads reach
        steps = []
        for line in text.splitlines():
            step, what, impl, us, flops, arithmetic = line.split("\t")
            rate = int(flops) / (float(us) * 1e-6) if float(us) > 0 else 0.0
            if int(flops) and arithmetic not in machine:
                machine[arithmetic] = peak_flops(arithmetic) * threads
            limit = machine.get(arithmetic, 0.0)
            steps.append({"step": int(step), "what": what, "impl": impl, "us": float(us),
                          "flops": int(flops), "arithmetic": arithmetic, "gflops": rate / 1e9,
                          "peak": rate / limit if limit > 0 else 0.0})
        return steps

    def plan(self) -> str:
        """The last compiled plan: one line per step, then the totals."""
        return _capi.call_with_buffer(_lib.mkc_program_plan, self.handle)

    def choices(self) -> str:
        """The implementation choices measured so far (or read back), one
        line each: key, implementation, each candidate's microseconds."""
        return _capi.call_with_buffer(_lib.mkc_program_choices, self.handle)

    def calibrate(self, batches, method: str | None = None,
                  percentile: float | None = None) -> str:
        """Float32 runs recording the range of every value an 8-bit plan
        quantizes (the src of each conv2d and linear node, both operands of
        each matmul, as the plan numbers the nodes), merged with earlier
        calls: `batches` an iterable of input dicts as run takes them (at
        least one). method: how a value's range is chosen: "minmax" (its
        extremes), "percentile" (all but (100 - percentile) / 2 percent of
        the values cut at each end; percentile in (0, 100], default 99.999)
        "mse" (the range quantizing its histogram with the least squared
        error) or "kl" (TensorRT's entropy calibration: the threshold on |x|
        whose clipped histogram loses the least KL divergence when
        quantized); None: the library's default (mkcache.h,
        mkc_calibrate_options). Every call on one program takes the same
        method. Returns calibration(). A batch of the wrong shape or dtype,
        or one giving NaN or infinities, is an error naming it; the ranges
        of the batches before it are kept."""
        if method is not None and not isinstance(method, str):
            raise InvalidArgumentError(f"method must be a str, got {type(method).__name__}")
        if percentile is not None and (isinstance(percentile, bool) or
                                       not isinstance(percentile, (int, float))):
            raise InvalidArgumentError(
                f"percentile must be a number, got {type(percentile).__name__}")
        if method is not None and "\0" in method:
            raise InvalidArgumentError("method holds a NUL byte")
        if percentile is not None and not 0 < percentile <= 100:  # 0 would be C's default
            raise InvalidArgumentError(f"calibrate: percentile {percentile} is not in (0, 100]")
        options = _params(_capi.CalibrateOptions, _lib.mkc_calibrate_options_init,
                          method=None if method is None else method.encode(),
                          percentile=0.0 if percentile is None else float(percentile))
        count = 0
        for i, inputs in enumerate(batches):
            if not isinstance(inputs, dict):
                raise InvalidArgumentError(
                    f"calibrate: batch {i} is a {type(inputs).__name__}; each batch is a dict "
                    "of inputs, as run takes them")
            self._check_input_names(inputs, f"calibrate: batch {i}")
            in_handles, owners = self._input_handles(inputs)  # owners: held for the call
            try:
                _lib.mkc_program_calibrate_with(self.handle, len(self.input_names), in_handles,
                                                ctypes.byref(options))
            except Error as e:
                raise type(e)(f"batch {i}: {e}", e.status) from None
            count += 1
        if count == 0:
            raise InvalidArgumentError("calibrate: no batches (give at least one input dict)")
        return self.calibration()

    def calibration(self) -> str:
        """The ranges calibrate() recorded: "# calibration method: <method>",
        then one line per value: "node<n>|<operator>|<name>|<port>\t<min>\t<max>\t<runs>",
        the range the method chose."""
        return _capi.call_with_buffer(_lib.mkc_program_calibration, self.handle)

    def save_calibration(self, path) -> None:
        """Writes calibration() to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.calibration())

    def save_choices(self, path) -> None:
        """Writes choices() to `path`, for compile(choices=path)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.choices())

    def steps(self) -> list:
        """The last compiled plan's steps and views, in order, as dicts:
        step (None for a view: it runs as no step), node (the fused graph's
        node number; None for a conversion), kind ("node", "convert",
        "view"), impl, choice (why that implementation: "priority",
        "override (option)", ... then the better ones' refusals; None for a
        view or conversion), inputs and outputs ([(place, format)]: a place is
        "input:i", "const:i", "arena:offset:bytes" or "output:i"), note ("in
        place", a conversion's reason, or None)."""
        def buffers(field):
            if field == "-":
                return []
            return [tuple(entry.split(" ", 1)) for entry in field.split(", ")]
        text = _capi.call_with_buffer(_lib.mkc_program_steps, self.handle)
        steps = []
        for line in text.splitlines():
            step, node, kind, impl, choice, ins, outs, note = line.split("\t")
            steps.append({"step": None if step == "-" else int(step),
                          "node": None if node == "-1" else int(node), "kind": kind,
                          "impl": None if impl == "-" else impl,
                          "choice": None if choice == "-" else choice, "inputs": buffers(ins),
                          "outputs": buffers(outs), "note": None if note == "-" else note})
        return steps

    @property
    def memory(self) -> dict:
        """arena_bytes, lower_bound_bytes, naive_bytes, constant_bytes, steps,
        converters, plans, in_place, views of the last compiled plan, and
        held_constant_bytes: the converted constants of every plan kept, each
        copy once (plans of other input shapes share a linear's weights in
        one arrangement)."""
        m = _capi.ProgramMemory()
        _lib.mkc_program_memory_info(self.handle, ctypes.byref(m))
        return {name: getattr(m, name) for name, _ in _capi.ProgramMemory._fields_}

    @property
    def executor_id(self) -> int:
        e = ctypes.c_uint64()
        _lib.mkc_program_executor(self.handle, ctypes.byref(e))
        return e.value
