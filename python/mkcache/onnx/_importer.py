"""Reading an ONNX model into a mkcache.Graph: the values, the walk over the
nodes, and what is computed at load time. The operators themselves are the
converters' (``_converters.py``)."""
from __future__ import annotations

import os
import re

import numpy as np

from .. import errors
from ..graph import Graph
from . import _converters, _dims, _patterns, _shape_data, _symbolic
from . import _quantized  # noqa: F401 (registers the quantized operators' converters)
from ..tensor import Tensor, bfloat16
from ._base import INPUT_TYPES, NUMPY_BFLOAT16, Pending, Refusal
from ._symbolic import Dim, Symbolic
# Declared shapes past this many elements are refused before anything is
# allocated (a hostile or broken file).
_MAX_ELEMENTS = 1 << 40
# A compile error naming a low-precision input an operator does not take.
_NARROW_DTYPE_REFUSED = re.compile(r"is (u?int8|float16|bfloat16); \w+ takes")


def _onnx():
    try:
        import onnx  # noqa: PLC0415 (the optional dependency, imported when used)
    except ImportError as e:
        raise errors.UnsupportedError(
            "mkcache.onnx needs the onnx package: pip install 'mkcache[onnx]'") from e
    return onnx


def supported() -> dict:
    """{ONNX operator: [(first opset, last opset), ...]} this version converts."""
    return {op: [(lo, hi) for lo, hi, _ in ranges]
            for op, ranges in sorted(_converters.TABLE.items())}


class Context:
    """What a converter works with: the graph being built, the ONNX values
    made so far (graph values, numpy arrays known at load time, or shape
    values known up to dims bound at run time), their static shapes from
    ONNX's shape inference, and the model's opset."""

    def __init__(self, graph: Graph, opset: int, shapes: dict, dim_params: dict | None = None,
                 types: dict | None = None):
        self.graph = graph
        self.opset = opset
        self.shapes = shapes   # name -> tuple of dims (None: symbolic), or absent
        # name -> tuple of each dim's dim_param (None where static or unnamed)
        self.dim_params = dim_params or {}
        self.types = types or {}  # name -> ONNX element type, where inference gave one
        self.values = {}       # name -> graph Value
        self.known = {}        # name -> numpy array (known when the model is loaded)
        self.symbolic = {}     # name -> _symbolic.Symbolic (a shape with run-time dims)
        # Dim -> (graph value name, axis): a value that has the dim, for
        # broadcasting to it at run time; and the ones made from them.
        self.donors = {}
        self.rulers = {}
        # name -> dims (ints and Dims) a converter worked out where shape
        # inference left a dim unnamed (a reshape's -1).
        self.computed = {}
        # name -> the graph value a chain of reshapes started from.
        self.reshaped_from = {}
        # Values made from shape data not given yet (load's check of a model
        # with shape data): whatever reads them is converted later.
        self.pending = set()

    def has(self, name: str) -> bool:
        return (name in self.values or name in self.known or name in self.symbolic
                or name in self.pending)

    def _not_pending(self, name: str) -> None:
        if name in self.pending:
            raise Pending(name)

    def value(self, name: str):
        """The graph value of `name` (a known array becomes a constant)."""
        self._not_pending(name)
        if name in self.values:
            return self.values[name]
        if name in self.symbolic:  # a shape read as data: its dims' values at run time
            v = self.values[name] = _symbolic.materialize(self, self.symbolic[name])
            return v
        array = self.known[name]
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype not in (np.float32, np.int32, np.int64, np.bool_, np.int8, np.uint8,
                                 np.float16) and array.dtype != NUMPY_BFLOAT16:
            raise Refusal(f"a constant of dtype {array.dtype}")
        if array.ndim == 0:
            array = array.reshape(1)
        array = np.ascontiguousarray(array)
        if array.dtype == NUMPY_BFLOAT16:  # mkcache takes bfloat16 as its bits
            array = Tensor(array.view(np.uint16), dtype=bfloat16)
        v = self.values[name] = self.graph.constant(array, name=name)
        return v

    def constant(self, name: str, what: str) -> np.ndarray:
        """The array `name` holds, which must be known at load time."""
        self._not_pending(name)
        if name in self.symbolic:
            raise Refusal(f"{what} depends on dims bound at run time ({self.symbolic[name]!r})")
        if name not in self.known:
            raise Refusal(f"{what} must be a constant (an initializer or computed from them)")
        return self.known[name]

    def shape(self, name: str):
        """The static shape of `name` (dims may be None), or None if unknown."""
        self._not_pending(name)
        if name in self.known:
            return tuple(self.known[name].shape)
        if name in self.symbolic:
            return tuple(self.symbolic[name].array.shape)
        return self.shapes.get(name)

    def dims(self, name: str) -> tuple:
        """The dims of `name`: ints, and a Dim for each dim bound at run
        time (named by its dim_param where shape inference gave one)."""
        shape = self.shape(name)
        if shape is None:
            raise Refusal(f"the shape of {name!r} is not known (ONNX shape inference gave none)")
        params = self.dim_params.get(name, ())
        computed = self.computed.get(name, ())
        out = []
        for axis, d in enumerate(shape):
            if d is not None:
                out.append(int(d))
                continue
            if len(computed) == len(shape):
                out.append(computed[axis])
                continue
            param = params[axis] if axis < len(params) else None
            dim = Dim.named(("param", param), param) if param else \
                Dim.named(("dim", name, axis), f"dim {axis} of {name!r}")
            if name in self.values:
                self.donors.setdefault(dim, (name, axis))
            out.append(dim)
        return tuple(out)

    def rank(self, name: str, what: str) -> int:
        shape = self.shape(name)
        if shape is None:
            raise Refusal(f"the rank of {what} is not known (ONNX shape inference gave none)")
        return len(shape)


def _model_of(path_or_model):
    onnx = _onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(path_or_model))
        except Exception as e:  # noqa: BLE001 (protobuf raises its own kinds)
            raise errors.InvalidArgumentError(f"onnx: not an ONNX model: {e}") from e
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise errors.InvalidArgumentError(
            "onnx.load takes a path, the model's bytes or an onnx.ModelProto, got "
            f"{type(path_or_model).__name__}")
    path = os.fspath(path_or_model)
    try:
        model = onnx.load(path, load_external_data=False)
    except OSError as e:
        raise errors.InvalidArgumentError(f"onnx: cannot read {path!r}: {e}") from e
    except Exception as e:  # noqa: BLE001 (a truncated or foreign file)
        raise errors.InvalidArgumentError(f"onnx: {path!r} is not an ONNX model: {e}") from e
    # Initializers kept in files beside the model (as torch's dynamo exporter
    # writes them by default) are read from the model's folder.
    if any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer):
        try:
            onnx.external_data_helper.load_external_data_for_model(
                model, os.path.dirname(os.path.abspath(path)))
        except Exception as e:  # noqa: BLE001 (a missing file, or a location outside the folder)
            raise errors.InvalidArgumentError(
                f"onnx: cannot read the external data of {path!r}: {e}") from e
    return model


def _opset(model) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise errors.InvalidArgumentError("onnx: the model imports no opset of the default domain")


def _static_shapes(onnx, model, bound: dict) -> tuple:
    """(name -> dims (None for a symbolic one), name -> each dim's dim_param
    (None where it has none), name -> element type) of every value ONNX's
    shape inference gives a shape. Its data propagation carries shapes computed by Shape, Gather,
    Concat, ... into the dims of what they reshape, so a dim keeps its name
    (the same dim_param: the same dim) across a reshape."""
    inferred = model
    light = _without_weights(onnx, model, bound)
    for options in ({"data_prop": True}, {}):
        try:
            inferred = onnx.shape_inference.infer_shapes(light, **options)
            break
        except Exception:  # noqa: BLE001,S112 (inference refuses some valid models)
            continue
    shapes, params, types = {}, {}, {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.input) + \
            list(inferred.graph.output):
        t = info.type.tensor_type
        if t.elem_type:
            types[info.name] = t.elem_type
        if not t.HasField("shape"):
            continue
        shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                  for d in t.shape.dim)
        params[info.name] = tuple(d.dim_param if d.HasField("dim_param") and d.dim_param
                                  else None for d in t.shape.dim)
    return shapes, params, types


def inference_error(model, bound: dict) -> str | None:
    """What ONNX's shape inference, strict, says against `model` with the
    inputs `bound` given by value (the first node it faults), or None: told
    beside an error compiling it, where a value out of range for the model
    (an axis past the rank) surfaces downstream as an unknown shape."""
    onnx = _onnx()
    try:
        onnx.shape_inference.infer_shapes(_without_weights(onnx, model, bound),
                                          strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 (onnx raises its own kinds)
        lines = [line.strip() for line in str(e).splitlines() if "(op_type:" in line]
        return lines[0] if lines else str(e).strip()
    return None


# Initializers of more elements than this are given to shape inference as
# inputs of their type and shape: inference copies the model it is given
# (twice, through its serialised form), and needs the values of the small
# ones only (the shapes and axes that data propagation carries).
_INFERENCE_VALUES = 1024


def _without_weights(onnx, model, bound: dict):
    """The model as shape inference needs it: its graph with the large
    initializers declared as inputs instead, and the inputs given by value
    (`bound`) made initializers, so that what they shape is inferred."""
    light = onnx.ModelProto()
    for field in ("ir_version", "opset_import", "functions", "domain", "model_version"):
        if field in ("opset_import", "functions"):
            getattr(light, field).extend(getattr(model, field))
        else:
            setattr(light, field, getattr(model, field))
    g, lg = model.graph, light.graph
    lg.name = g.name
    lg.node.extend(g.node)
    lg.input.extend(i for i in g.input if i.name not in bound)
    lg.initializer.extend(onnx.numpy_helper.from_array(np.asarray(v), name)
                          for name, v in bound.items())
    lg.output.extend(g.output)
    lg.value_info.extend(g.value_info)
    declared = {i.name for i in g.input}
    for init in g.initializer:
        if int(np.prod(init.dims, dtype=np.float64)) <= _INFERENCE_VALUES:
            lg.initializer.append(init)
        elif init.name not in declared:
            lg.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type,
                                                               list(init.dims)))
    return light


def _input_dims(info, input_shapes: dict) -> tuple:
    name = info.name
    t = info.type.tensor_type
    if name in input_shapes:
        dims = tuple(input_shapes[name])
        declared = [d for d in t.shape.dim] if t.HasField("shape") else None
        if declared is not None and len(declared) != len(dims):
            raise errors.InvalidArgumentError(
                f"onnx: input_shapes[{name!r}] has rank {len(dims)}, the model's input "
                f"{len(declared)}")
        return tuple(None if d is None or d == -1 else int(d) for d in dims)
    if not t.HasField("shape"):
        raise errors.InvalidArgumentError(
            f"onnx: input {name!r} has no declared shape: give it in input_shapes")
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                 for d in t.shape.dim)
    static = [d for d in dims if d is not None]
    if static and int(np.prod(static, dtype=np.float64)) > _MAX_ELEMENTS:
        raise errors.InvalidArgumentError(
            f"onnx: input {name!r} declares {dims}: more than 2^40 elements")
    return dims


def load(path_or_model, *, input_shapes: dict | None = None, max_specializations: int = 16,
         **compile_options):
    """A compiled Program of an ONNX model: a path, the model's bytes or an
    onnx.ModelProto. input_shapes: {input name: shape} pinning dims (None
    keeps a dim bound at run time). compile_options go to Graph.compile
    (fuse, inplace, impl, choose, dump, ...). A scalar (rank-0) input is
    given to the program's runs as an array of shape (1,), and a result of
    no dims comes out so.

    A model whose inputs include shape data (an input every use of which is
    a port taking axes, a shape, scales, sizes, bounds, pads or counts:
    Reshape's shape, Resize's scales, Slice's starts, ...; see
    ``_shape_data``) gives a ``ShapeDataProgram`` instead: the same
    run/plan/close interface, taking those inputs by value at each run and
    compiling one program per distinct set of their values (the values
    folded in as constants), the last ``max_specializations`` kept."""
    onnx = _onnx()
    model = _model_of(path_or_model)
    if input_shapes is not None and not isinstance(input_shapes, dict):
        raise errors.InvalidArgumentError("input_shapes must be a dict {input name: shape}")
    input_shapes = dict(input_shapes or {})
    if isinstance(max_specializations, bool) or not isinstance(max_specializations, int) \
            or max_specializations < 1:
        raise errors.InvalidArgumentError(
            f"max_specializations must be a positive int, got {max_specializations!r}")
    opset = _opset(model)
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            raise errors.UnsupportedError(
                f"onnx: initializer {init.name!r} is stored outside the model file "
                "(external data): load the model with its data first")
    initializers = {init.name: onnx.numpy_helper.to_array(init)
                    for init in model.graph.initializer}
    declared = [i.name for i in model.graph.input if i.name not in initializers]
    unknown = set(input_shapes) - set(declared)
    if unknown:
        raise errors.InvalidArgumentError(
            f"onnx: input_shapes names {sorted(unknown)}, which are not the model's inputs "
            f"({declared})")
    shape_data = _shape_data.inputs_of(model.graph, initializers)
    if not shape_data:
        return compile_model(model, opset, input_shapes, initializers, {}, compile_options)
    pinned = sorted(set(input_shapes) & set(shape_data))
    if pinned:
        raise errors.InvalidArgumentError(
            f"onnx: input_shapes names {pinned}, which are shape data (bound by value at each "
            "run, of the shape the model declares)")
    for info in model.graph.input:
        elem = info.type.tensor_type.elem_type
        if info.name in declared and info.name not in shape_data and elem not in INPUT_TYPES:
            raise errors.UnsupportedError(
                f"onnx: input {info.name!r} has ONNX element type {elem}; this version "
                "takes float32, float16, bfloat16, int8, uint8, int32, int64 and bool")
    # Every node that does not wait for the shape data is checked now, as
    # load checks any model.
    compile_model(model, opset, input_shapes, initializers, {}, compile_options,
                  pending=tuple(shape_data))
    return _shape_data.ShapeDataProgram(
        model, opset, input_shapes, initializers, shape_data, compile_options,
        max_specializations)


def compile_model(model, opset: int, input_shapes: dict, initializers: dict, bound: dict,
                  compile_options: dict, pending: tuple = ()):
    """The Program of `model`: its initializers as numpy arrays, and `bound`
    {input name: array}, inputs given by value (folded in as constants, as
    initializers are). With `pending` (the names of shape data inputs not
    given yet), only checks the model: every node is converted but those
    that read the pending values or what is made from them, and what cannot
    be is raised as at a compile; nothing is compiled (None)."""
    onnx = _onnx()
    graph_proto = model.graph
    shapes, dim_params, types = _static_shapes(onnx, model, bound)
    g = Graph()
    try:
        ctx = Context(g, opset, shapes, dim_params, types)
        ctx.known.update(initializers)
        ctx.known.update(bound)
        ctx.pending.update(pending)
        inputs = [i for i in graph_proto.input
                  if i.name not in ctx.known and i.name not in ctx.pending]
        for info in inputs:
            elem = info.type.tensor_type.elem_type
            if elem not in INPUT_TYPES:
                raise errors.UnsupportedError(
                    f"onnx: input {info.name!r} has ONNX element type {elem}; this version "
                    "takes float32, float16, bfloat16, int8, uint8, int32, int64 and bool")
            dims = _input_dims(info, input_shapes)
            layout = "NCHW"
            # A scalar (rank 0) is run as [1], as a result of no dims comes
            # out; its ONNX rank stays 0 for the converters.
            ctx.values[info.name] = g.input(info.name, dims or (1,), layout=layout,
                                           dtype=INPUT_TYPES[elem])
            # The program's dims: those input_shapes pins are static for the
            # shapes computed from them too.
            ctx.shapes[info.name] = dims
            ctx.dims(info.name)  # each run-time dim's first donor: the input
        nodes, _ = _patterns.fold(graph_proto.node, ctx.known,
                                  [o.name for o in graph_proto.output])
        _convert_nodes(ctx, nodes)
        if pending:
            return None
        for out in graph_proto.output:
            if not ctx.has(out.name):
                raise errors.InvalidArgumentError(f"onnx: output {out.name!r} is never made")
            try:
                g.output(ctx.value(out.name), out.name)
            except Refusal as r:
                raise errors.UnsupportedError(f"onnx: output {out.name!r}: {r}") from None
        try:
            return g.compile(**compile_options)
        except errors.InvalidArgumentError as e:
            # int8, uint8, float16 and bfloat16 values may reach an operator
            # that computes on float32 only (an Add of uint8): a model this
            # version does not take, not an invalid one.
            if _NARROW_DTYPE_REFUSED.search(str(e)):
                raise errors.UnsupportedError(f"onnx: {e}") from None
            raise
    finally:
        g.close()


def _convert_nodes(ctx: Context, nodes) -> None:
    """Converts every node in order; refusals are collected and raised
    together, so a model's every problem is told at once."""
    refusals = []
    for index, node in enumerate(nodes):
        what = f"node {index} ({node.op_type} {node.name!r})" if node.name else \
            f"node {index} ({node.op_type})"
        if node.domain == _patterns.DOMAIN:  # a pattern folded back into one operator
            entry = _converters.INTERNAL[node.op_type]
        elif node.domain not in ("", "ai.onnx"):
            refusals.append(f"{what}: operator domain {node.domain!r} is not supported")
            continue
        else:
            entry = _converters.find(node.op_type, ctx.opset)
        if entry is None:
            known = _converters.TABLE.get(node.op_type)
            refusals.append(f"{what}: " + (
                f"not supported at opset {ctx.opset} (supported: "
                f"{', '.join(f'{lo}..{hi}' for lo, hi, _ in known)})" if known
                else "operator not supported"))
            continue
        missing = [n for n in node.input if n and not ctx.has(n)]
        if missing:
            if not refusals:  # a graph out of order, not the echo of a refusal
                raise errors.InvalidArgumentError(
                    f"onnx: {what} reads {missing} before any node makes them (the nodes are "
                    "not in topological order, or the graph has a cycle)")
            refusals.append(f"{what}: reads the output of a node refused above")
            continue
        try:
            outputs = entry(ctx, node)
        except Pending:
            ctx.pending.update(n for n in node.output if n)
            continue
        except Refusal as r:
            refusals.append(f"{what}: {r}")
            continue
        except errors.Error as e:
            raise type(e)(f"onnx: {what}: {e}") from e
        if any(n in ctx.pending for n in node.input):
            # Made from shape data not given yet: what reads it waits too
            # (it may take it as a constant once it is one).
            ctx.pending.update(n for n in node.output if n)
            continue
        for name, value in zip(node.output, outputs):
            if not name:
                continue
            if isinstance(value, Symbolic):
                ctx.symbolic[name] = value
            elif isinstance(value, (np.ndarray, np.generic)):  # numpy gives scalars as np.generic
                ctx.known[name] = np.asarray(value)
            else:
                ctx.values[name] = value
        _dims.propagate(ctx, node)
    if refusals:
        raise errors.UnsupportedError(
            f"onnx: {len(refusals)} node{'s' if len(refusals) > 1 else ''} cannot be "
            "converted:\n  " + "\n  ".join(refusals))
