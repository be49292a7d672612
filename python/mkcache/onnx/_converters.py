"""The converters: one function per (ONNX operator, opset range), in one
table. Each takes the import context and the node and gives the node's
outputs: graph values, or numpy arrays where every input is known when the
model is loaded (shape arithmetic). A case a converter cannot take raises
Refusal with the reason; the importer lists every refused node at once."""
from __future__ import annotations

import numpy as np

from . import _symbolic
from ._base import INPUT_TYPES, KNOWN_TYPES, Refusal, attributes

# op type -> [(first opset, last opset, converter)]: the versions of the
# operator's definition (ONNX's since_version) each converter implements.
TABLE: dict = {}
# The newest opset whose definitions were read for this table (those after
# 22 only add element types to the operators here).
LAST_OPSET = 28


def converter(op_type: str, since: int = 1, until: int = LAST_OPSET):
    def register(fn):
        TABLE.setdefault(op_type, []).append((since, until, fn))
        return fn
    return register


def find(op_type: str, opset: int):
    """The converter of `op_type` as the model's opset defines it: the
    version of its definition in force at that opset (ONNX's since_version)
    must lie in a converter's range, so an opset that left the operator as
    it was needs no new entry."""
    try:
        from onnx import defs  # noqa: PLC0415 (the optional dependency)
        version = defs.get_schema(op_type, opset, "").since_version
    except Exception:  # noqa: BLE001 (an operator unknown to this onnx)
        version = opset
    for lo, hi, fn in TABLE.get(op_type, ()):
        if lo <= version <= hi:
            return fn
    return None


def _known(ctx, node) -> list | None:
    """The node's inputs as arrays when every one is known, else None."""
    if all(not n or n in ctx.known for n in node.input):
        return [ctx.known[n] if n else None for n in node.input]
    return None


def _only_first_output(node, what: str = "") -> None:
    if len(node.output) > 1 and any(node.output[1:]):
        raise Refusal(f"its optional outputs{what} are not supported (only the first)")


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Refusal(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# ----------------------------------------------------------- known values

@converter("Constant")
def constant(ctx, node):
    a = attributes(node)
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in a:
            v = a[key]
            if key == "value":
                return [v]
            dtype = np.float32 if "float" in key else np.int64
            return [np.array(v, dtype=dtype)]
    raise Refusal(f"a Constant with {sorted(a)} is not supported")


@converter("Identity")
def identity(ctx, node):
    name = node.input[0]
    if name in ctx.symbolic:
        return [ctx.symbolic[name]]
    return [ctx.known[name] if name in ctx.known else ctx.value(name)]


@converter("Dropout")
def dropout(ctx, node):
    # Inference: the identity; a mask or training mode is not.
    _only_first_output(node, " (the mask)")
    if len(node.input) > 2 and node.input[2]:
        training = ctx.constant(node.input[2], "training_mode")
        if bool(np.asarray(training).reshape(-1)[0]):
            raise Refusal("training_mode is not supported (programs infer)")
    return identity(ctx, node)


@converter("Shape")
def shape(ctx, node):
    # A dim bound at run time is a Dim entry (_symbolic.py): what the shape
    # arithmetic after it computes is known up to those dims.
    dims = ctx.dims(node.input[0])
    a = attributes(node)
    start, end = a.get("start", 0), a.get("end", len(dims))
    out = np.empty(len(dims), dtype=object)
    out[:] = dims
    return [_symbolic.result(out[start:end], np.int64)]


@converter("Size")
def size(ctx, node):
    dims = ctx.shape(node.input[0])
    if dims is None or any(d is None for d in dims):
        raise Refusal("the size depends on a dim bound at run time (not in this version)")
    return [np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)]


@converter("Cast")
def cast(ctx, node):
    return _cast_to(ctx, node, attributes(node)["to"])


@converter("CastLike", since=15)
def cast_like(ctx, node):
    like = node.input[1]
    if like in ctx.known:
        dtype = ctx.known[like].dtype
        to = next((t for t, d in KNOWN_TYPES.items() if d == dtype), None)
    else:
        to = ctx.types.get(like)
    if to is None:
        raise Refusal("the target's element type is not known")
    return _cast_to(ctx, node, to)


def _cast_to(ctx, node, to: int):
    # CastLike's second input gives the dtype alone: only the first matters.
    known = [ctx.known[node.input[0]]] if node.input[0] in ctx.known else None
    if known is not None and to in KNOWN_TYPES:
        return [known[0].astype(KNOWN_TYPES[to])]
    if node.input[0] in ctx.symbolic and to in KNOWN_TYPES:
        x = ctx.symbolic[node.input[0]].array
        if KNOWN_TYPES[to] is np.bool_:  # a dim is never 0
            x = _symbolic.elementwise(lambda v: True if _symbolic.is_dim(v) else bool(v), x)
        return [_symbolic.result(x, KNOWN_TYPES[to])]
    if to not in INPUT_TYPES:
        raise Refusal(f"a cast to ONNX element type {to} (this version casts to float32, "
                      "float16, bfloat16, int8, uint8, int32, int64 and bool)")
    return [ctx.graph.cast(ctx.value(node.input[0]), INPUT_TYPES[to], name=node.name or None)]


@converter("Expand", since=8)
def expand(ctx, node):
    if node.input[1] in ctx.symbolic:
        if node.input[0] in ctx.symbolic:
            raise Refusal("expanding a shape to a shape with dims bound at run time")
        x = ctx.known[node.input[0]] if node.input[0] in ctx.known else node.input[0]
        return [_symbolic.broadcast(ctx, x, _symbolic.entries(ctx, node.input[1]))]
    shape = [int(v) for v in np.asarray(ctx.constant(node.input[1], "the shape")).reshape(-1)]
    if node.input[0] in ctx.symbolic:
        x = ctx.symbolic[node.input[0]]
        return [_symbolic.result(np.broadcast_to(x.array, np.broadcast_shapes(
            x.array.shape, tuple(shape))).copy(), x.dtype)]
    known = _known(ctx, node)
    if known is not None:
        x = known[0]
        return [np.ascontiguousarray(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))))]
    return [ctx.graph.expand(ctx.value(node.input[0]), tuple(shape), name=node.name or None)]


_COMPARISONS = {"Equal": ("equal", np.equal, 11), "Less": ("less", np.less, 9),
                "LessOrEqual": ("less_equal", np.less_equal, 12),
                "Greater": ("greater", np.greater, 9),
                "GreaterOrEqual": ("greater_equal", np.greater_equal, 12)}


def _comparison(method, numpy_fn):
    def convert(ctx, node):
        known = _known(ctx, node)
        if known is not None:
            return [numpy_fn(*known)]
        sym = _symbolic.inputs(ctx, node)
        if sym is not None:  # decided for every run, or refused
            def one(a, b):
                if _symbolic.is_dim(a) or _symbolic.is_dim(b):
                    return _symbolic.compare(node.op_type, a, b)
                return bool(numpy_fn(a, b))
            out = _symbolic.elementwise(one, *(_symbolic.objects(a) for a in sym))
            return [_symbolic.result(out, np.bool_)]
        return [getattr(ctx.graph, method)(ctx.value(node.input[0]), ctx.value(node.input[1]))]
    return convert


for _op, (_method, _fn, _since) in _COMPARISONS.items():
    converter(_op, since=_since)(_comparison(_method, _fn))


def _logical(method, numpy_fn):
    def convert(ctx, node):
        known = _known(ctx, node)
        if known is not None:
            return [numpy_fn(*known)]
        return [getattr(ctx.graph, method)(*(ctx.value(n) for n in node.input))]
    return convert


for _op, (_method, _fn, _since) in {"And": ("logical_and", np.logical_and, 7),
                                    "Or": ("logical_or", np.logical_or, 7),
                                    "Xor": ("logical_xor", np.logical_xor, 7),
                                    "Not": ("logical_not", np.logical_not, 1)}.items():
    converter(_op, since=_since)(_logical(_method, _fn))


@converter("Where", since=9)
def where(ctx, node):
    known = _known(ctx, node)
    if known is not None:
        return [np.where(*known)]
    sym = _symbolic.inputs(ctx, node)
    if sym is not None and node.input[0] in ctx.known:
        dtype = _symbolic.dtype_of(ctx, node.input[1 if node.input[1] in ctx.symbolic else 2])
        return [_symbolic.result(np.where(np.asarray(sym[0], dtype=bool),
                                          _symbolic.objects(sym[1]),
                                          _symbolic.objects(sym[2])), dtype)]
    dtype = _symbolic.dtype_of(ctx, node.input[1])
    if dtype in (np.int32, np.int64, np.bool_):
        return [_integer_where(ctx, node, dtype)]
    return [ctx.graph.where(*(ctx.value(n) for n in node.input))]


def _integer_where(ctx, node, dtype):
    """condition ? x : y on integers (the library's where is float32's), in
    their own arithmetic so every value stays exact: y + c * (x - y), c 0 or
    1, wrapping as the sum does back to x where c is 1. Bools through
    int32."""
    g = ctx.graph
    work = np.dtype(np.int32) if dtype == np.bool_ else np.dtype(dtype)
    c, x, y = ctx.value(node.input[0]), ctx.value(node.input[1]), ctx.value(node.input[2])
    if dtype == np.bool_:
        x, y = g.cast(x, work), g.cast(y, work)
    picked = g.integer_binary(g.cast(c, work), g.integer_binary(x, y, kind="sub"), kind="mul")
    out = g.integer_binary(y, picked, kind="add")
    return g.cast(out, dtype) if dtype == np.bool_ else out


@converter("Gather")
def gather(ctx, node):
    known = _known(ctx, node)
    axis = attributes(node).get("axis", 0)
    if known is not None:
        return [np.take(known[0], known[1], axis=axis)]
    if node.input[0] in ctx.symbolic and node.input[1] in ctx.known:
        x = ctx.symbolic[node.input[0]]
        out = np.asarray(np.take(x.array, ctx.known[node.input[1]], axis=axis), dtype=object)
        return [_symbolic.result(out, x.dtype)]
    y = ctx.graph.gather(ctx.value(node.input[0]), ctx.value(node.input[1]), axis=axis,
                         name=node.name or None)
    if ctx.shape(node.input[1]) == ():
        # A scalar index drops the axis; the graph's constant of it has one
        # element, which keeps it as a 1.
        dims = ctx.dims(node.input[0])
        axis = _axis(axis, len(dims))
        y = _symbolic.squeeze(ctx, y, [1 if i == axis else d for i, d in enumerate(dims)], [axis])
    return [y]


@converter("GatherElements", since=11)
def gather_elements(ctx, node):
    axis = attributes(node).get("axis", 0)
    known = _known(ctx, node)
    if known is not None:
        data, index = known
        axis = _axis(axis, data.ndim)
        if np.any((index < -data.shape[axis]) | (index >= data.shape[axis])):
            raise Refusal("an index out of range")
        return [np.take_along_axis(data, np.where(index < 0, index + data.shape[axis], index),
                                   axis)]
    y = ctx.graph.gather_elements(ctx.value(node.input[0]), ctx.value(node.input[1]),
                                  axis=axis, name=node.name or None)
    if ctx.shape(node.input[1]) is not None:
        ctx.computed[node.output[0]] = ctx.dims(node.input[1])
    return [y]


def _numpy_gather_nd(data, index, batch_dims):
    batch = data.shape[:batch_dims]
    k = index.shape[-1]
    data = data.reshape((-1,) + data.shape[batch_dims:])
    rows = index.reshape(data.shape[0], -1, k)
    bounds = np.array(data.shape[1:1 + k])
    if np.any((rows < -bounds) | (rows >= bounds)):
        raise Refusal("an index out of range")
    rows = np.where(rows < 0, rows + bounds, rows)
    out = np.stack([data[b][tuple(rows[b].T)] for b in range(data.shape[0])])
    return out.reshape(batch + index.shape[batch_dims:-1] + data.shape[1 + k:])


@converter("GatherND", since=11)
def gather_nd(ctx, node):
    batch_dims = attributes(node).get("batch_dims", 0)
    known = _known(ctx, node)
    if known is not None:
        return [_numpy_gather_nd(known[0], known[1], batch_dims)]
    return [ctx.graph.gather_nd(ctx.value(node.input[0]), ctx.value(node.input[1]),
                                batch_dims=batch_dims, name=node.name or None)]


@converter("Unsqueeze")
def unsqueeze(ctx, node):
    axes = _axes_of(ctx, node, 13)
    return _restack(ctx, node, axes, insert=True)


@converter("Squeeze")
def squeeze(ctx, node):
    axes = _axes_of(ctx, node, 13)
    return _restack(ctx, node, axes, insert=False)


def _axes_of(ctx, node, input_since: int):
    if ctx.opset >= input_since:
        if len(node.input) > 1 and node.input[1]:
            return [int(a) for a in ctx.constant(node.input[1], "axes").reshape(-1)]
        return None
    return attributes(node).get("axes")


def _restack(ctx, node, axes, insert: bool):
    name = node.input[0]
    known = _known(ctx, node)
    sym = ctx.symbolic.get(name)
    if known is not None or sym is not None:
        x = known[0] if known is not None else sym.array
        if insert:
            out_rank = x.ndim + len(axes)
            y = np.expand_dims(x, tuple(_axis(a, out_rank) for a in axes))
        elif axes is None:
            y = np.squeeze(x)
        else:
            y = np.squeeze(x, tuple(_axis(a, x.ndim) for a in axes))
        return [y if sym is None else _symbolic.result(y, sym.dtype)]
    if ctx.shape(name) is None:
        raise Refusal("the input's shape is not known")
    # Dims bound at run time as Dims: two of them are the same dim only
    # where they are, so a reshape copies no dim into another's place.
    dims = list(ctx.dims(name))
    if insert:
        out_rank = len(dims) + len(axes)
        at = sorted(_axis(a, out_rank) for a in axes)
        return [_symbolic.unsqueeze(ctx, ctx.value(name), dims, at)]
    at = [i for i, d in enumerate(dims) if d == 1] if axes is None else \
        sorted(_axis(a, len(dims)) for a in axes)
    return [_symbolic.squeeze(ctx, ctx.value(name), dims, at)]


def _reshape_target(src: list, out: list) -> tuple:
    """Reshape dims for `out` from `src` (None: a dim bound at run time): a
    dynamic dim kept at its own index is 0 (the input's dim there), one
    other may be -1."""
    target, free = [], 0
    for i, d in enumerate(out):
        if d is not None:
            target.append(d)
        elif i < len(src) and src[i] is None:
            target.append(0)
        else:
            target.append(-1)
            free += 1
    if free > 1:
        raise Refusal("the new shape has more than one dim bound at run time out of place")
    return tuple(target)


@converter("Reshape", since=5)
def reshape(ctx, node):
    allowzero = bool(attributes(node).get("allowzero", 0))
    if node.input[1] in ctx.symbolic:  # a shape computed from dims bound at run time
        new = _symbolic.entries(ctx, node.input[1])
        src = node.input[0]
        out = _symbolic.reshaped(ctx.dims(src), new)
        try:
            target = _symbolic.reshape_target(ctx, src, new, allowzero)
        except Refusal:
            # A reshape of a reshape is one of the first's input, whose
            # dims may stand where the new ones do ([B*S] back to [B, S]).
            src = ctx.reshaped_from.get(src)
            if src is None or out is None or -1 in [e for e in out if not _symbolic.is_dim(e)]:
                raise
            target = _symbolic.reshape_dims(ctx.dims(src), out)
        y = ctx.graph.reshape(ctx.value(src), target)
        if out is not None:  # what shape inference may have left unnamed
            ctx.computed[node.output[0]] = tuple(out)
        ctx.reshaped_from[node.output[0]] = ctx.reshaped_from.get(src, src)
        return [y]
    target = [int(d) for d in ctx.constant(node.input[1], "the shape").reshape(-1)]
    if allowzero and 0 in target:
        raise Refusal("allowzero with a 0 in the shape is not supported")
    known = _known(ctx, node)
    sym = ctx.symbolic.get(node.input[0])
    if known is not None or sym is not None:
        x = known[0] if known is not None else sym.array
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return [x.reshape(target) if sym is None else _symbolic.result(x.reshape(target),
                                                                        sym.dtype)]
    ctx.reshaped_from[node.output[0]] = ctx.reshaped_from.get(node.input[0], node.input[0])
    if ctx.shape(node.input[0]) is not None:
        out = _symbolic.reshaped(ctx.dims(node.input[0]), target)
        if out is not None:
            ctx.computed[node.output[0]] = tuple(out)
    return [ctx.graph.reshape(ctx.value(node.input[0]), tuple(target))]


@converter("Flatten")
def flatten(ctx, node):
    name = node.input[0]
    if ctx.shape(name) is None:
        raise Refusal("the input's shape is not known")
    dims = ctx.dims(name)
    axis = attributes(node).get("axis", 1)  # in [-rank, rank]
    if not -len(dims) <= axis <= len(dims):
        raise Refusal(f"axis {axis} is out of range for rank {len(dims)}")
    axis = axis + len(dims) if axis < 0 else axis

    def size(part):  # a product of Dims where a dim is bound at run time
        out = 1
        for d in part:
            out = d * out
        return out
    out = [size(dims[:axis]), size(dims[axis:])]
    return [ctx.graph.reshape(ctx.value(name), _symbolic.reshape_dims(dims, out))]


@converter("Slice", since=10)
def slice_(ctx, node):
    def ints(i, what):
        if len(node.input) <= i or not node.input[i]:
            return None
        return [int(v) for v in np.asarray(ctx.constant(node.input[i], what)).reshape(-1)]
    if any(n in ctx.symbolic for n in node.input[1:3]):  # bounds from dims bound at run time
        if node.input[0] in ctx.known:
            return [_slice_constant(ctx, node, ints(3, "axes"), ints(4, "steps"))]
        if node.input[0] not in ctx.values:
            raise Refusal("slicing a shape to a length bound at run time")
        dims = ctx.dims(node.input[0])
        starts, ends = (_symbolic.entries(ctx, node.input[i]) for i in (1, 2))
        axes, steps = ints(3, "axes"), ints(4, "steps")
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
        axes = [_axis(a, len(dims)) for a in axes]
        starts = [_symbolic.slice_bound(b, dims[a]) for b, a in zip(starts, axes)]
        ends = [_symbolic.slice_bound(e, dims[a]) for e, a in zip(ends, axes)]
        return [_graph_slice(ctx, ctx.value(node.input[0]), starts, ends, axes, steps,
                             node.name)]
    starts, ends = ints(1, "starts"), ints(2, "ends")
    axes, steps = ints(3, "axes"), ints(4, "steps")
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if node.input[0] in ctx.symbolic:
        x = ctx.symbolic[node.input[0]]
        index = [slice(None)] * x.array.ndim
        for a, b, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(b, e, st)
        return [_symbolic.result(x.array[tuple(index)], x.dtype)]
    known = _known(ctx, node)
    if known is not None:
        index = [slice(None)] * known[0].ndim
        for a, b, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(b, e, st)
        return [known[0][tuple(index)]]
    return [_graph_slice(ctx, ctx.value(node.input[0]), starts, ends, axes, steps, node.name)]


def _slice_constant(ctx, node, axes, steps):
    """A constant sliced to lengths bound at run time: its rows along each
    such axis gathered by a range from the start to the run-time end (an end
    past the constant's dim fails the run, naming the index)."""
    x = ctx.known[node.input[0]]
    starts, ends = (_symbolic.entries(ctx, node.input[i]) for i in (1, 2))
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index, run_time = [slice(None)] * x.ndim, []
    for a, b, e, st in zip(axes, starts, ends, steps):
        a = _axis(a, x.ndim)
        if not _symbolic.is_dim(b) and not _symbolic.is_dim(e):
            index[a] = slice(b, e, st)
            continue
        if _symbolic.is_dim(b) or st <= 0:
            raise Refusal("slicing a constant from a start bound at run time, or backwards, to "
                          "a length bound at run time")
        b = b + x.shape[a] if b < 0 else b
        run_time.append((a, min(max(b, 0), x.shape[a]), e, st))
    x = np.ascontiguousarray(x[tuple(index)])
    dims = list(x.shape)
    ctx.known[node.output[0] + "/sliced"] = x
    y = ctx.value(node.output[0] + "/sliced")
    for a, b, e, st in run_time:
        d, offset = _symbolic.dim_and_offset(e)
        if d is None:
            raise Refusal(f"slicing a constant to {e!r}: the end must be one dim bound at run "
                          "time plus a constant")
        name, axis = _symbolic.donor(ctx, d)
        rows = ctx.graph.arange(ctx.values[name], axis=axis, start=b, delta=st,
                                limit_offset=offset, dtype=np.int64)
        y = ctx.graph.gather(y, rows, axis=a)
        dims[a] = e - b if st == 1 else None
    if all(v is not None for v in dims):
        ctx.computed[node.output[0]] = tuple(dims)
    return y


@converter("Slice", since=1, until=9)
def slice_attributes(ctx, node):
    """Slice before opset 10: starts, ends and axes as attributes, step 1."""
    a = attributes(node)
    starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
    axes = [int(v) for v in a.get("axes", range(len(starts)))]
    known = _known(ctx, node)
    if known is not None:
        index = [slice(None)] * known[0].ndim
        for ax, b, e in zip(axes, starts, ends):
            index[ax] = slice(b, e)
        return [known[0][tuple(index)]]
    return [_graph_slice(ctx, ctx.value(node.input[0]), starts, ends, axes, [1] * len(starts),
                         node.name)]


def _graph_slice(ctx, x, starts, ends, axes, steps, name=None):
    # ONNX's ends run past int64 in both directions: the library's int64
    # fields take them clamped (any end past the dim is clamped again there).
    big = 1 << 62
    clamp = [max(-big, min(big, e)) for e in ends]
    return ctx.graph.slice(x, starts, clamp, axes, steps, name=name or None)


@converter("Split", since=2)
def split(ctx, node):
    a = attributes(node)
    name = node.input[0]
    dims = ctx.shape(name)
    if dims is None:
        raise Refusal("the input's shape is not known")
    axis = _axis(a.get("axis", 0), len(dims))
    n = dims[axis]
    if n is None:
        raise Refusal("splitting a dim bound at run time")
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in np.asarray(ctx.constant(node.input[1], "split")).reshape(-1)]
    elif ctx.opset < 13 and "split" in a:  # the sizes an attribute before opset 13
        sizes = [int(v) for v in a["split"]]
    else:
        parts = a.get("num_outputs", len(node.output))
        each = -(-n // parts)
        sizes = [min(each, n - i * each) for i in range(parts)]
    if sum(sizes) != n or len(sizes) != len(node.output):
        raise Refusal(f"split sizes {sizes} do not cover the dim of {n} in {len(node.output)} "
                      "parts")
    known = _known(ctx, node)
    outs, at = [], 0
    for size in sizes:
        if known is not None:
            outs.append(np.take(known[0], range(at, at + size), axis=axis))
        else:
            outs.append(_graph_slice(ctx, ctx.value(name), [at], [at + size], [axis], [1]))
        at += size
    return outs


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx, node):
    value = attributes(node).get("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if node.input[0] in ctx.symbolic:  # filled at run time: the fill broadcast to the dims
        new = _symbolic.entries(ctx, node.input[0])
        return [_symbolic.broadcast(ctx, np.full([1] * len(new), fill[0], dtype=fill.dtype), new)]
    shape = [int(v) for v in np.asarray(ctx.constant(node.input[0], "the shape")).reshape(-1)]
    return [np.full(shape, fill[0], dtype=fill.dtype)]


@converter("Range", since=11)
def range_(ctx, node):
    if any(n in ctx.symbolic for n in node.input):
        return [_run_time_range(ctx, node)]
    start, limit, delta = (np.asarray(ctx.constant(n, "a bound")).reshape(()) for n in node.input)
    return [np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta))]


def _run_time_range(ctx, node):
    """A Range whose limit is a dim bound at run time (plus a constant): the
    library's range over a value that has the dim."""
    start, limit, delta = (_symbolic.entries(ctx, n)[0] if n in ctx.symbolic else
                           np.asarray(ctx.constant(n, "a bound")).reshape(()).item()
                           for n in node.input)
    if _symbolic.is_dim(start) or _symbolic.is_dim(delta):
        raise Refusal("a Range whose start or delta is a dim bound at run time (only its limit "
                      "may be)")
    dtype = _symbolic.dtype_of(ctx, node.input[0])
    if dtype not in (np.float32, np.int32, np.int64):
        raise Refusal(f"a Range of {dtype} bound at run time (float32, int32 and int64 are)")
    d, offset = _symbolic.dim_and_offset(limit)
    if d is None:
        raise Refusal(f"a Range to {limit!r}: its limit must be one dim bound at run time plus "
                      "a constant")
    name, axis = _symbolic.donor(ctx, d)
    y = ctx.graph.arange(ctx.values[name], axis=axis, start=start, delta=delta,
                         limit_offset=offset, dtype=dtype, name=node.name or None)
    if delta == 1 and float(start).is_integer():
        ctx.computed[node.output[0]] = (limit - int(start),)
    return y


@converter("Tile", since=6)
def tile(ctx, node):
    """x repeated along each axis, one axis at a time: x seen as [outer, 1,
    dim, inner], expanded to the repeats in the 1, merged back. One repeat
    may be a dim bound at run time (a shape's entry): its axis comes last,
    broadcast to the dim."""
    if node.input[1] in ctx.symbolic:
        return [_tile_to_a_run_time_dim(ctx, node)]
    repeats = [int(r) for r in np.asarray(ctx.constant(node.input[1], "repeats")).reshape(-1)]
    known = _known(ctx, node)
    if known is not None:
        return [np.tile(known[0], repeats)]
    dims = _tiled_dims(ctx, node, repeats)
    return [_tile_static(ctx, ctx.value(node.input[0]), dims, repeats)]


def _tiled_dims(ctx, node, repeats) -> list:
    dims = ctx.shape(node.input[0])
    if dims is None or any(d is None for d in dims):
        raise Refusal("tiling an input whose dims are bound at run time")
    if len(repeats) != len(dims) or any(r < 1 for r in repeats if not _symbolic.is_dim(r)):
        raise Refusal(f"repeats {repeats} for an input of rank {len(dims)}")
    return list(dims)


def _tile_static(ctx, v, dims, repeats):
    g = ctx.graph
    for axis, r in enumerate(repeats):
        if r == 1:
            continue
        outer, inner = int(np.prod(dims[:axis])), int(np.prod(dims[axis + 1:]))
        v = g.expand(g.reshape(v, (outer, 1, dims[axis], inner)), (outer, r, dims[axis], inner))
        dims[axis] *= r
        v = g.reshape(v, tuple(dims))
    return v


def _tile_to_a_run_time_dim(ctx, node):
    repeats = _symbolic.entries(ctx, node.input[1])
    dims = _tiled_dims(ctx, node, repeats)
    run_time = [a for a, r in enumerate(repeats) if _symbolic.is_dim(r)]
    if len(run_time) > 1:
        raise Refusal(f"repeats {repeats}: more than one is a dim bound at run time")
    axis, r = run_time[0], repeats[run_time[0]]
    # The constant repeats first, then the axis of the run-time one.
    v = _tile_static(ctx, ctx.value(node.input[0]), dims,
                     [1 if a == axis else n for a, n in enumerate(repeats)])
    outer, inner = int(np.prod(dims[:axis])), int(np.prod(dims[axis + 1:]))
    seen = node.output[0] + "/seen"
    ctx.values[seen] = ctx.graph.reshape(v, (outer, 1, dims[axis], inner))
    ctx.shapes[seen] = (outer, 1, dims[axis], inner)
    dtype = _symbolic.dtype_of(ctx, node.input[0])
    ctx.types[seen] = next((t for t, d in KNOWN_TYPES.items() if d == dtype), None)
    wide = _symbolic.broadcast(ctx, seen, [outer, r, dims[axis], inner])
    out = list(dims)
    out[axis] = r * dims[axis]
    ctx.computed[node.output[0]] = tuple(out)
    return ctx.graph.reshape(wide, _symbolic.reshape_dims([outer, r, dims[axis], inner], out))


@converter("Transpose")
def transpose(ctx, node):
    name = node.input[0]
    perm = attributes(node).get("perm")
    known = _known(ctx, node)
    if known is not None:
        return [np.transpose(known[0], perm)]
    if perm is None:
        perm = list(reversed(range(ctx.rank(name, "the input"))))
    return [ctx.graph.transpose(ctx.value(name), tuple(perm))]


@converter("Concat", since=4)
def concat(ctx, node):
    axis = attributes(node)["axis"]
    known = _known(ctx, node)
    if known is not None:
        return [np.concatenate(known, axis=axis)]
    sym = _symbolic.inputs(ctx, node)
    if sym is not None:
        return [_symbolic.result(np.concatenate([_symbolic.objects(a) for a in sym], axis=axis),
                                 _symbolic.dtype_of(ctx, node.input[0]))]
    rank = ctx.rank(node.input[0], "the first input")
    axis = _axis(axis, rank)
    dtype = _symbolic.dtype_of(ctx, node.input[0])
    if dtype in (np.int32, np.int64, np.bool_):
        return [_concat_by_pads(ctx, node, axis, dtype)]
    return [ctx.graph.concat([ctx.value(n) for n in node.input], axis=axis)]


def _concat_by_pads(ctx, node, axis, dtype):
    """Integers or bools joined (the library's concat is float32's): each
    padded with zeros to the whole length at its place, the pieces added
    (or-ed)."""
    sizes = []
    for n in node.input:
        shape = ctx.shape(n)
        if shape is None or shape[axis] is None:
            raise Refusal(f"joining {dtype} values along a dim bound at run time")
        sizes.append(int(shape[axis]))
    if len(sizes) == 1:
        return ctx.value(node.input[0])
    total, at, out = sum(sizes), 0, None
    g = ctx.graph
    for n, size in zip(node.input, sizes):
        pads = [0] * (2 * len(ctx.shape(n)))
        pads[axis], pads[len(pads) // 2 + axis] = at, total - at - size
        piece = g.pad(ctx.value(n), pads)
        if out is None:
            out = piece
        elif dtype == np.bool_:
            out = g.logical_or(out, piece)
        else:
            out = g.integer_binary(out, piece, kind="add")
        at += size
    return out


# --------------------------------------------------------------- element-wise

_NUMPY_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": None}
_GRAPH_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


def _binary(op_type):
    def convert(ctx, node):
        known = _known(ctx, node)
        if known is not None:
            a, b = known
            if op_type == "Div":
                if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
                    return [np.trunc(a / b).astype(a.dtype)]
                return [(a / b).astype(a.dtype)]
            return [_NUMPY_BINARY[op_type](a, b).astype(a.dtype)]
        sym = _symbolic.inputs(ctx, node)
        if sym is not None:  # arithmetic on dims bound at run time
            out = _symbolic.elementwise(_symbolic.ARITHMETIC[op_type],
                                        *(_symbolic.objects(a) for a in sym))
            return [_symbolic.result(out, _symbolic.dtype_of(ctx, node.input[0]))]
        if _integer(ctx, node.input):
            return [ctx.graph.integer_binary(ctx.value(node.input[0]), ctx.value(node.input[1]),
                                             kind=_GRAPH_BINARY[op_type])]
        method = getattr(ctx.graph, _GRAPH_BINARY[op_type])
        return [method(ctx.value(node.input[0]), ctx.value(node.input[1]))]
    return convert


def _integer(ctx, names) -> bool:
    """Whether the values are integers (the library's integer arithmetic)."""
    return any(_symbolic.dtype_of(ctx, n) in (np.int32, np.int64) for n in names if n)


for _op in _GRAPH_BINARY:
    converter(_op, since=7)(_binary(_op))


def _legacy_binary(op_type):
    """Add, Sub, Mul, Div before opset 7: B broadcast only with broadcast=1,
    its dims matched against A's from `axis` (numpy matches them from the
    end): B gets trailing 1s to line up, then numpy's rule applies."""
    modern = _binary(op_type)

    def convert(ctx, node):
        a = attributes(node)
        if not a.get("broadcast", 0) or "axis" not in a:
            return modern(ctx, node)
        rank_a, rank_b = ctx.rank(node.input[0], "A"), ctx.rank(node.input[1], "B")
        trailing = rank_a - (a["axis"] % rank_a) - rank_b
        if trailing <= 0:
            return modern(ctx, node)
        b, aligned = node.input[1], node.input[1] + "/aligned"
        if b in ctx.known:
            ctx.known[aligned] = ctx.known[b].reshape(ctx.known[b].shape + (1,) * trailing)
        else:
            ctx.values[aligned] = ctx.graph.reshape(ctx.value(b), (0,) * rank_b + (1,) * trailing)
        from onnx import helper  # noqa: PLC0415 (the optional dependency)
        legacy = helper.make_node(node.op_type, [node.input[0], aligned], list(node.output),
                                  name=node.name)
        return modern(ctx, legacy)
    return convert


for _op in _GRAPH_BINARY:
    converter(_op, since=1, until=6)(_legacy_binary(_op))


def _variadic(method, kind, numpy_fn):
    def convert(ctx, node):
        known = _known(ctx, node)
        if known is not None:
            out = known[0]
            for v in known[1:]:
                out = numpy_fn(out, v).astype(known[0].dtype)
            return [out]
        values = [ctx.value(n) for n in node.input]
        integer = _integer(ctx, node.input)
        out = values[0]
        for v in values[1:]:
            out = ctx.graph.integer_binary(out, v, kind=kind) if integer else \
                getattr(ctx.graph, method)(out, v)
        return [out]
    return convert


# Before opset 8 their inputs had one shape: numpy's rule takes that too.
converter("Max", since=6)(_variadic("maximum", "max", np.maximum))
converter("Min", since=6)(_variadic("minimum", "min", np.minimum))
converter("Sum", since=6)(_variadic("add", "add", np.add))

# ONNX activation -> (Graph method, {attribute: (parameter, default)}).
_ACTIVATIONS = {
    "Relu": ("relu", {}, 6), "Sigmoid": ("sigmoid", {}, 6), "Tanh": ("tanh", {}, 6),
    "Sqrt": ("sqrt", {}, 6), "Abs": ("abs", {}, 6), "Exp": ("exp", {}, 6),
    "Log": ("log", {}, 6), "Erf": ("erf", {}, 9), "HardSwish": ("hardswish", {}, 14),
    "Round": ("round", {}, 11),
    "Mish": ("mish", {}, 18), "Softplus": ("softplus", {}, 1),
    "LeakyRelu": ("leaky_relu", {"alpha": ("negative_slope", 0.01)}, 6),
    "Elu": ("elu", {"alpha": ("alpha", 1.0)}, 6),
}


def _activation(method, params):
    def convert(ctx, node):
        a = attributes(node)
        kwargs = {p: float(a.get(attr, default)) for attr, (p, default) in params.items()}
        return [getattr(ctx.graph, method)(ctx.value(node.input[0]), **kwargs)]
    return convert


for _op, (_method, _params, _since) in _ACTIVATIONS.items():
    converter(_op, since=_since)(_activation(_method, _params))


@converter("PRelu", since=7)
def prelu(ctx, node):
    """x where x > 0, else slope * x (the slope broadcast as ONNX's
    unidirectional rule: numpy's, from the trailing dims)."""
    g, x = ctx.graph, ctx.value(node.input[0])
    return [g.add(g.relu(x), g.mul(ctx.value(node.input[1]), g.minimum(x, 0.0)))]


@converter("Selu", since=6)
def selu(ctx, node):
    a = attributes(node)
    alpha = float(a.get("alpha", 1.67326319217681884765625))
    gamma = float(a.get("gamma", 1.05070102214813232421875))
    return [ctx.graph.mul(ctx.graph.elu(ctx.value(node.input[0]), alpha), gamma)]


@converter("Softsign")
def softsign(ctx, node):
    g, x = ctx.graph, ctx.value(node.input[0])
    return [g.div(x, g.add(g.abs(x), 1.0))]


@converter("Gelu", since=20)
def gelu(ctx, node):
    approximate = attributes(node).get("approximate", "none")
    return [ctx.graph.gelu(ctx.value(node.input[0]), approximate=approximate)]


def _matmul_bias(ctx, node):
    a, w, b = node.input
    bias = np.ascontiguousarray(np.asarray(ctx.known[b], dtype=np.float32).reshape(-1))
    return [_by_weights(ctx, a, w, bias)]


def _by_weights(ctx, a, w, bias=None):
    """a @ w (+ bias): with constant 2-D weights, a linear (oneDNN's inner
    product over a's last dim, on weights [out, in] it arranges once), which
    runs faster than the matmul primitive on the same sizes; else a matmul."""
    weights = ctx.known.get(w)
    if weights is not None and weights.ndim == 2:
        t = np.ascontiguousarray(np.asarray(weights, dtype=np.float32).T)
        return ctx.graph.linear(ctx.value(a), ctx.graph.constant(t, name=w),
                                None if bias is None else ctx.graph.constant(bias))
    return ctx.graph.matmul(ctx.value(a), ctx.value(w), bias)


def _folded_layer_norm(ctx, node):
    a = attributes(node)

    def flat(i):
        if len(node.input) <= i:
            return None
        return ctx.graph.constant(np.ascontiguousarray(
            np.asarray(ctx.known[node.input[i]], dtype=np.float32).reshape(-1)))
    return [ctx.graph.layer_norm(ctx.value(node.input[0]), flat(1), flat(2),
                                 begin_norm_axis=a["axis"], epsilon=a["epsilon"])]


# The operators folded patterns become (_patterns.py), by name.
INTERNAL = {"Gelu": lambda ctx, node: [ctx.graph.gelu(ctx.value(node.input[0]))],
            "GeluTanh": lambda ctx, node: [ctx.graph.gelu(ctx.value(node.input[0]),
                                                          approximate="tanh")],
            "MatMulBias": _matmul_bias, "LayerNorm": _folded_layer_norm}


@converter("Neg", since=6)
def neg(ctx, node):
    known = _known(ctx, node)
    if known is not None:
        return [-known[0]]
    if node.input[0] in ctx.symbolic:
        x = ctx.symbolic[node.input[0]]
        return [_symbolic.result(_symbolic.elementwise(lambda v: -v, x.array), x.dtype)]
    return [ctx.graph.mul(ctx.value(node.input[0]), -1.0)]


def _float_input(ctx, node, what):
    if _symbolic.dtype_of(ctx, node.input[0]) not in (np.float32, None):
        raise Refusal(f"{what} of {_symbolic.dtype_of(ctx, node.input[0])} values (float32 is "
                      "converted)")
    return ctx.value(node.input[0])


@converter("Sign", since=9)
def sign(ctx, node):
    """1 above 0, -1 below, x itself else (a zero keeps its sign, NaN stays)."""
    known = _known(ctx, node)
    if known is not None:
        return [np.sign(known[0])]
    g, x = ctx.graph, _float_input(ctx, node, "Sign")
    return [g.where(g.greater(x, 0.0), 1.0, g.where(g.less(x, 0.0), -1.0, x))]


@converter("Shrink", since=9)
def shrink(ctx, node):
    """x - bias above lambd, x + bias below -lambd, 0 between."""
    a = attributes(node)
    bias, lambd = float(a.get("bias", 0.0)), float(a.get("lambd", 0.5))
    g, x = ctx.graph, _float_input(ctx, node, "Shrink")
    return [g.where(g.greater(x, lambd), g.sub(x, bias),
                    g.where(g.less(x, -lambd), g.add(x, bias), 0.0))]


@converter("Reciprocal", since=6)
def reciprocal(ctx, node):
    return [ctx.graph.div(1.0, ctx.value(node.input[0]))]


@converter("Pow")
def pow_(ctx, node):
    exponents = np.unique(np.asarray(ctx.constant(node.input[1], "the exponent")))
    if exponents.size != 1:
        raise Refusal("an exponent that differs from element to element")
    exponent = float(exponents[0])
    x = ctx.value(node.input[0])
    if exponent == 2.0:
        return [ctx.graph.square(x)]
    if exponent == 0.5:
        return [ctx.graph.sqrt(x)]
    if exponent == 1.0:
        return [x]
    if exponent == int(exponent) and 2 < abs(exponent) <= 8 or exponent == -1.0:
        # A small integer power as products (exact for a negative base,
        # which a power through exp and log is not).
        n, result, base = int(abs(exponent)), None, x
        while n:
            if n & 1:
                result = base if result is None else ctx.graph.mul(result, base)
            n >>= 1
            if n:
                base = ctx.graph.square(base)
        return [result if exponent > 0 else ctx.graph.div(1.0, result)]
    raise Refusal(f"an exponent of {exponent} (this version takes 0.5 and the integers "
                  "-1 and 1 to 8)")


@converter("Clip", since=6)
def clip(ctx, node):
    big = float(np.finfo(np.float32).max)
    if ctx.opset < 11:
        a = attributes(node)
        low, high = a.get("min", -big), a.get("max", big)
    else:
        def bound(i, default):
            if len(node.input) > i and node.input[i]:
                if node.input[i] in ctx.values:
                    return node.input[i]  # given at run time
                return float(np.asarray(ctx.constant(node.input[i], "a bound")).reshape(-1)[0])
            return default
        low, high = bound(1, -big), bound(2, big)
        if isinstance(low, str) or isinstance(high, str):
            # min(max(x, low), high), as ONNX defines it (high where low > high).
            g, y = ctx.graph, ctx.value(node.input[0])
            y = g.maximum(y, ctx.value(low) if isinstance(low, str) else low)
            return [g.minimum(y, ctx.value(high) if isinstance(high, str) else high)]
    low, high = max(low, -big), min(high, big)
    return [ctx.graph.clip(ctx.value(node.input[0]), low, high)]


def _softmax(method):
    def convert(ctx, node):
        name = node.input[0]
        rank = ctx.rank(name, "the input")
        default = -1 if ctx.opset >= 13 else 1
        axis = _axis(attributes(node).get("axis", default), rank)
        x = ctx.value(name)
        if ctx.opset >= 13 or axis == rank - 1:
            return [getattr(ctx.graph, method)(x, axis=axis)]
        # Before opset 13: over the input flattened to 2-D at `axis`.
        dims = list(ctx.shape(name))
        tail = dims[axis:]
        if any(d is None for d in tail):
            raise Refusal("the softmax's flattened dims are bound at run time")
        flat = dims[:axis] + [int(np.prod(tail))]
        y = getattr(ctx.graph, method)(
            ctx.graph.reshape(x, _reshape_target(dims, flat)), axis=-1)
        return [ctx.graph.reshape(y, _reshape_target(flat, dims))]
    return convert


converter("Softmax")(_softmax("softmax"))
converter("LogSoftmax")(_softmax("log_softmax"))


# ------------------------------------------------------------- linear algebra

@converter("MatMul")
def matmul(ctx, node):
    a, b = node.input[0], node.input[1]
    for n, what in ((a, "A"), (b, "B")):
        if ctx.rank(n, what) < 2:
            raise Refusal("a 1-D operand is not supported")
    return [_by_weights(ctx, a, b)]


@converter("Gemm", since=6)
def gemm(ctx, node):
    at = attributes(node)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    trans_a, trans_b = bool(at.get("transA", 0)), bool(at.get("transB", 0))
    a, b = node.input[0], node.input[1]
    c = node.input[2] if len(node.input) > 2 and node.input[2] else None
    b_shape = ctx.shape(b)
    n_out = b_shape[0 if trans_b else 1] if b_shape else None
    bias = None
    if c is not None and c in ctx.known:
        cv = np.asarray(ctx.known[c], dtype=np.float32) * beta
        if cv.size == n_out and cv.ndim <= 2 and (cv.ndim < 2 or cv.shape[0] == 1):
            bias = cv.reshape(-1)
    x = ctx.value(a)
    if b in ctx.known and not trans_a and alpha == 1.0:
        w = np.asarray(ctx.known[b], dtype=np.float32)
        weight = np.ascontiguousarray(w if trans_b else w.T)  # [N, K]
        y = ctx.graph.linear(x, weight, bias)
    else:
        y = ctx.graph.matmul(x, ctx.value(b), bias, transpose_a=trans_a, transpose_b=trans_b,
                             scale=alpha)
    if c is not None and bias is None and beta != 0.0:
        cv = ctx.value(c) if beta == 1.0 else ctx.graph.mul(ctx.value(c), beta)
        y = ctx.graph.add(y, cv)
    return [y]


# ------------------------------------------------------------- convolutions

def _spatial(ctx, node, k: int, kernel: list):
    """(strides, dilations, pads as (begin, end) per dim) of a conv or pool."""
    a = attributes(node)
    strides = list(a.get("strides", [1] * k))
    dilations = list(a.get("dilations", [1] * k))
    pads = list(a.get("pads", [0] * (2 * k)))
    auto_pad = a.get("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        pads = [0] * (2 * k)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        dims = ctx.shape(node.input[0])
        if dims is None or any(d is None for d in dims[2:]):
            raise Refusal(f"auto_pad {auto_pad} on spatial dims bound at run time")
        begins, ends = [], []
        for i in range(k):
            size = dims[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(large if auto_pad == "SAME_LOWER" else small)
            ends.append(small if auto_pad == "SAME_LOWER" else large)
        pads = begins + ends
    elif auto_pad != "NOTSET":
        raise Refusal(f"auto_pad {auto_pad!r}")
    # ONNX: all begins, then all ends; mkcache: (begin, end) per dim.
    padding = tuple(v for i in range(k) for v in (pads[i], pads[k + i]))
    return strides, dilations, padding


class _OneD:
    """A 1-D window (conv, pool) as the 2-D one over [N, C, 1, W]: the
    input, a constant's trailing axis and the window attributes get a
    leading spatial dim of 1; the result drops it."""

    def __init__(self, ctx, node):
        self.ctx, self.attrs = ctx, attributes(node)

    def input(self, name):
        return self.ctx.graph.reshape(self.ctx.value(name), (0, 0, 1, -1))

    def weights(self, name):
        w = self.ctx.known.get(name)
        if w is not None:
            return self.ctx.graph.constant(np.ascontiguousarray(
                np.asarray(w, np.float32)[:, :, None, :]), name=name)
        return self.ctx.graph.reshape(self.ctx.value(name), (0, 0, 1, -1))

    def window(self, kernel):
        """(strides, dilations, padding, kernel) in 2-D."""
        a = self.attrs
        pads = list(a.get("pads", [0, 0]))
        if a.get("auto_pad", "NOTSET") != "NOTSET":
            raise Refusal("auto_pad on a 1-D window")
        return ((1, a.get("strides", [1])[0]), (1, a.get("dilations", [1])[0]),
                (0, 0, pads[0], pads[1]), (1, kernel[0]))

    def result(self, value):
        return self.ctx.graph.reshape(value, (0, 0, -1))


@converter("Conv")
def conv(ctx, node):
    x, w = node.input[0], node.input[1]
    rank = ctx.rank(x, "the input")
    if rank not in (3, 4, 5):
        raise Refusal(f"a {rank - 2}-D convolution (this version takes 1-D to 3-D)")
    wshape = ctx.shape(w)
    if wshape is None or any(d is None for d in wshape):
        raise Refusal("the weights' shape is not known")
    bias = ctx.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if rank == 3:
        one = _OneD(ctx, node)
        return [conv_of(ctx, node, one.input(x), one.weights(w), bias, wshape, rank)]
    return [conv_of(ctx, node, ctx.value(x), ctx.value(w), bias, wshape, rank)]


def conv_of(ctx, node, x, w, bias, wshape, rank: int):
    """The float convolution `node`'s attributes describe, of graph values x
    and w (for a 1-D one, already given their leading spatial dim of 1)."""
    groups = attributes(node).get("group", 1)
    if rank == 3:
        one = _OneD(ctx, node)
        strides, dilations, padding, _ = one.window(list(wshape[2:]))
        return one.result(ctx.graph.conv2d(x, w, bias, stride=strides, padding=padding,
                                           dilation=dilations, groups=groups,
                                           name=node.name or None))
    k = rank - 2
    strides, dilations, padding = _spatial(ctx, node, k, list(wshape[2:]))
    method = ctx.graph.conv2d if k == 2 else ctx.graph.conv3d
    return method(x, w, bias, stride=tuple(strides), padding=padding,
                  dilation=tuple(dilations), groups=groups, name=node.name or None)


@converter("ConvTranspose")
def conv_transpose(ctx, node):
    x, w = node.input[0], node.input[1]
    if ctx.rank(x, "the input") != 4:
        raise Refusal("a transposed convolution of other than 2-D (this version takes 2-D)")
    dims, wshape = ctx.shape(x), ctx.shape(w)
    if wshape is None or any(d is None for d in wshape):
        raise Refusal("the weights' shape is not known")
    a = attributes(node)
    kernel = list(a.get("kernel_shape", wshape[2:]))
    strides = list(a.get("strides", [1, 1]))
    dilations = list(a.get("dilations", [1, 1]))
    extra = list(a.get("output_padding", [0, 0]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    auto_pad = a.get("auto_pad", "NOTSET")
    if "output_shape" in a or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if dims is None or any(d is None for d in dims[2:]):
            raise Refusal("output_shape or auto_pad on spatial dims bound at run time")
        want = list(a["output_shape"])[-2:] if "output_shape" in a else \
            [dims[2 + i] * strides[i] for i in range(2)]
        begins, ends = [], []
        for i in range(2):
            total = strides[i] * (dims[2 + i] - 1) + extra[i] + \
                (kernel[i] - 1) * dilations[i] + 1 - want[i]
            if total < 0:
                raise Refusal(f"an output_shape of {want} needs negative padding")
            # ONNX's rule: the odd cell at the end for SAME_UPPER, else first.
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = begins + ends
    elif auto_pad not in ("NOTSET", "VALID"):
        raise Refusal(f"auto_pad {auto_pad!r}")
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    bias = ctx.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return [ctx.graph.conv2d_transpose(
        ctx.value(x), ctx.value(w), bias, stride=tuple(strides),
        padding=(pads[0], pads[2], pads[1], pads[3]), output_padding=tuple(extra),
        dilation=tuple(dilations), groups=a.get("group", 1), name=node.name or None)]


def _pool(kind):
    def convert(ctx, node):
        _only_first_output(node, " (the indices)")
        x = node.input[0]
        rank = ctx.rank(x, "the input")
        if rank not in (3, 4, 5):
            raise Refusal(f"{rank - 2}-D pooling (this version takes 1-D to 3-D)")
        a = attributes(node)
        kernel = list(a["kernel_shape"])
        kwargs = {"ceil_mode": bool(a.get("ceil_mode", 0))}
        if kind == "avg":
            kwargs["count_include_pad"] = bool(a.get("count_include_pad", 0))
        if rank == 3:
            one = _OneD(ctx, node)
            strides, dilations, padding, kernel = one.window(kernel)
            y = getattr(ctx.graph, f"{kind}_pool2d")(one.input(x), kernel, strides, padding,
                                                     dilation=dilations, name=node.name or None,
                                                     **kwargs)
            return [one.result(y)]
        k = rank - 2
        strides, dilations, padding = _spatial(ctx, node, k, kernel)
        method = getattr(ctx.graph, f"{kind}_pool{k}d")
        return [method(ctx.value(x), tuple(kernel), tuple(strides), padding,
                       dilation=tuple(dilations), name=node.name or None, **kwargs)]
    return convert


converter("MaxPool")(_pool("max"))
converter("AveragePool")(_pool("avg"))


def _global_pool(kind):
    def convert(ctx, node):
        x = node.input[0]
        rank = ctx.rank(x, "the input")
        if rank not in (4, 5):
            raise Refusal(f"{rank - 2}-D global pooling (this version takes 2-D and 3-D)")
        fmt = "NCHW" if rank == 4 else "NCDHW"
        return [getattr(ctx.graph, f"global_{kind}_pool")(ctx.value(x), data_format=fmt)]
    return convert


converter("GlobalMaxPool")(_global_pool("max"))
converter("GlobalAveragePool")(_global_pool("avg"))


# ------------------------------------------------------------- normalisation

@converter("BatchNormalization", since=6)
def batch_norm(ctx, node):
    _only_first_output(node, " (training statistics)")
    a = attributes(node)
    if a.get("training_mode", 0) or (ctx.opset < 7 and not a.get("is_test", 0)):
        raise Refusal("training mode is not supported (programs infer)")
    if not a.get("spatial", 1):
        raise Refusal("spatial=0 (statistics per element) is not supported")
    x, scale, shift, mean, var = node.input[:5]
    rank = ctx.rank(x, "the input")
    if rank not in (2, 3, 4, 5):
        raise Refusal(f"a rank-{rank} input (this version takes 2-D to 5-D)")
    g, v = ctx.graph, ctx.value(x)
    if rank < 4:  # [N, C] and [N, C, L] as [N, C, L, 1]
        v = g.reshape(v, (0, 0, -1, 1))
    y = g.batch_norm(v, ctx.value(mean), ctx.value(var), ctx.value(scale), ctx.value(shift),
                     epsilon=float(a.get("epsilon", 1e-5)),
                     data_format="NCDHW" if rank == 5 else "NCHW", name=node.name or None)
    return [g.reshape(y, (0, 0) if rank == 2 else (0, 0, -1)) if rank < 4 else y]


@converter("LayerNormalization", since=17)
def layer_norm(ctx, node):
    a = attributes(node)
    x = node.input[0]
    rank = ctx.rank(x, "the input")
    axis = _axis(a.get("axis", -1), rank)
    epsilon = float(a.get("epsilon", 1e-5))

    def flat(i):
        if len(node.input) <= i or not node.input[i]:
            return None
        name = node.input[i]
        if name in ctx.known:
            return ctx.graph.constant(np.ascontiguousarray(
                np.asarray(ctx.known[name], dtype=np.float32).reshape(-1)))
        if ctx.rank(name, "the scale") != 1:  # the normalised dims' shape: flattened
            return ctx.graph.reshape(ctx.value(name), (-1,))
        return ctx.value(name)
    y = ctx.graph.layer_norm(ctx.value(x), flat(1), flat(2), begin_norm_axis=axis,
                             epsilon=epsilon, name=node.name or None)
    wanted = [bool(n) for n in node.output[1:3]]
    if not any(wanted):
        return [y]
    # The optional statistics, computed beside the fused normalisation (the
    # library's layer_norm keeps them only in training).
    g, axes = ctx.graph, tuple(range(axis, rank))
    mean = g.reduce_mean(ctx.value(x), axes=axes, keepdims=True)
    centered = g.sub(ctx.value(x), mean)
    variance = g.reduce_mean(g.square(centered), axes=axes, keepdims=True)
    inv_std = g.div(1.0, g.sqrt(g.add(variance, epsilon))) if wanted[-1] else None
    return [y, mean, inv_std]


@converter("InstanceNormalization", since=6)
def instance_norm(ctx, node):
    """Each (sample, channel)'s spatial values normalised, then scaled and
    shifted per channel: reductions over the spatial axes, element-wise
    around them."""
    x = node.input[0]
    rank = ctx.rank(x, "the input")
    if rank < 3:
        raise Refusal(f"a rank-{rank} input (InstanceNormalization needs spatial dims)")
    g, v = ctx.graph, ctx.value(x)
    axes = tuple(range(2, rank))
    eps = float(attributes(node).get("epsilon", 1e-5))
    centered = g.sub(v, g.reduce_mean(v, axes=axes, keepdims=True))
    variance = g.reduce_mean(g.square(centered), axes=axes, keepdims=True)
    y = g.div(centered, g.sqrt(g.add(variance, eps)))

    def per_channel(name):  # [C] -> [C, 1, ...] against [N, C, spatial...]
        known = ctx.known.get(name)
        if known is not None:
            return g.constant(np.ascontiguousarray(np.asarray(known, np.float32).reshape(
                (-1,) + (1,) * (rank - 2))), name=name)
        return g.reshape(ctx.value(name), (-1,) + (1,) * (rank - 2))
    return [g.add(g.mul(y, per_channel(node.input[1])), per_channel(node.input[2]))]


@converter("LRN")
def lrn(ctx, node):
    a = attributes(node)
    if ctx.rank(node.input[0], "the input") != 4:
        raise Refusal("LRN on an input of rank other than 4")
    return [ctx.graph.lrn(ctx.value(node.input[0]), int(a["size"]), float(a.get("alpha", 1e-4)),
                          float(a.get("beta", 0.75)), float(a.get("bias", 1.0)),
                          name=node.name or None)]


# ---------------------------------------------------------------- reductions

def _reduction(ctx, node, axes_input_since: int = 18):
    """A reduction's (axes: a tuple, or None for all; keepdims; noop: no
    axes given and noop_with_empty_axes set, so nothing is reduced)."""
    a = attributes(node)
    axes = _axes_of(ctx, node, axes_input_since)
    noop = not axes and bool(a.get("noop_with_empty_axes", 0))
    return (tuple(axes) if axes else None), bool(a.get("keepdims", 1)), noop


def _reduce(kind, numpy_fn, axes_input_since):
    def convert(ctx, node):
        axes, keepdims, noop = _reduction(ctx, node, axes_input_since)
        if noop:
            return identity(ctx, node)
        known = _known(ctx, node)
        if known is not None:
            return [numpy_fn(known[0], axis=axes, keepdims=keepdims)]
        method = getattr(ctx.graph, f"reduce_{kind}")
        return [method(ctx.value(node.input[0]), axes=axes, keepdims=keepdims,
                       name=node.name or None)]
    return convert


converter("ReduceSum")(_reduce("sum", np.sum, 13))
converter("ReduceMean")(_reduce("mean", np.mean, 18))
converter("ReduceMax")(_reduce("max", np.max, 18))
converter("ReduceMin")(_reduce("min", np.min, 18))


def _composite_reduce(pre, post, numpy_fn):
    """A reduction written with the library's sum: pre(x) element-wise, the
    sum, post(sum) (each a Graph method name, or None)."""
    def convert(ctx, node):
        axes, keepdims, noop = _reduction(ctx, node)
        known = _known(ctx, node)
        if known is not None:
            x = known[0].astype(np.float64)
            return [numpy_fn(x, axes, keepdims, noop).astype(known[0].dtype)]
        g, x = ctx.graph, ctx.value(node.input[0])
        v = getattr(g, pre)(x) if pre else x
        if not noop:
            v = g.reduce_sum(v, axes=axes, keepdims=keepdims)
        return [getattr(g, post)(v) if post else v]
    return convert


def _numpy_composite(pre, post):
    def fn(x, axes, keepdims, noop):
        v = pre(x)
        return post(v if noop else np.sum(v, axis=axes, keepdims=keepdims))
    return fn


for _op, (_pre, _post, _np_pre, _np_post) in {
        "ReduceSumSquare": ("square", None, np.square, lambda v: v),
        "ReduceL1": ("abs", None, np.abs, lambda v: v),
        "ReduceL2": ("square", "sqrt", np.square, np.sqrt),
        "ReduceLogSum": (None, "log", lambda v: v, np.log)}.items():
    converter(_op)(_composite_reduce(_pre, _post, _numpy_composite(_np_pre, _np_post)))


@converter("ReduceLogSumExp")
def reduce_log_sum_exp(ctx, node):
    """log(sum(exp(x - max))) + max, so no exp overflows."""
    over, keepdims, noop = _reduction(ctx, node)
    known = _known(ctx, node)
    if known is not None:
        x = known[0].astype(np.float64)
        if noop:
            return [known[0]]
        m = np.max(x, axis=over, keepdims=True)
        y = np.log(np.sum(np.exp(x - m), axis=over, keepdims=True)) + m
        return [(y if keepdims else np.squeeze(y, axis=over)).astype(known[0].dtype)]
    g, x = ctx.graph, ctx.value(node.input[0])
    if noop:
        return [x]
    m = g.reduce_max(x, axes=over, keepdims=True)
    y = g.add(g.log(g.reduce_sum(g.exp(g.sub(x, m)), axes=over, keepdims=True)), m)
    # Dropping the reduced dims (each 1 now): a max over them changes nothing.
    return [y if keepdims else g.reduce_max(y, axes=over, keepdims=False)]


# ----------------------------------------------------------- pad and resize

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _numpy_pad(x, pads, mode, value, axes):
    """ONNX's Pad on a known array: the negative counts cropped first."""
    k = len(axes)
    crop, width = [slice(None)] * x.ndim, [(0, 0)] * x.ndim
    for i, axis in enumerate(axes):
        b, e = pads[i], pads[k + i]
        crop[axis] = slice(max(-b, 0), x.shape[axis] - max(-e, 0))
        width[axis] = (max(b, 0), max(e, 0))
    kept = x[tuple(crop)]
    if mode == "constant":
        return np.pad(kept, width, mode="constant", constant_values=value).astype(x.dtype)
    return np.pad(kept, width, mode=mode)


def _pad(ctx, node, pads, value, axes):
    mode = attributes(node).get("mode", "constant")
    if mode not in _PAD_MODES:
        raise Refusal(f"Pad mode {mode!r} (this version pads constant, reflect, edge, wrap)")
    name = node.input[0]
    rank = ctx.rank(name, "the input")
    if axes is None:
        axes = list(range(rank))
    axes = [_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise Refusal(f"pads has {len(pads)} entries for {len(axes)} axes (two per axis)")
    if isinstance(value, int) and float(value) != value:
        raise Refusal(f"a constant_value {value} that a float64 does not hold exactly")
    if name in ctx.known:
        return [_numpy_pad(ctx.known[name], pads, mode, value, axes)]
    return [ctx.graph.pad(ctx.value(name), pads, mode=mode, value=float(value), axes=axes,
                          name=node.name or None)]


@converter("Pad", since=1, until=10)
def pad_attributes(ctx, node):
    a = attributes(node)
    pads = a.get("pads", a.get("paddings"))
    if pads is None:
        raise Refusal("a Pad without pads")
    return _pad(ctx, node, [int(p) for p in pads], a.get("value", 0.0), None)


@converter("Pad", since=11)
def pad(ctx, node):
    def given(i):
        return len(node.input) > i and bool(node.input[i])
    pads = [int(p) for p in np.asarray(ctx.constant(node.input[1], "pads")).reshape(-1)]
    value = 0
    if given(2):
        v = np.asarray(ctx.constant(node.input[2], "constant_value")).reshape(-1)
        value = v[0].item() if v.size else 0
    axes = None
    if given(3):
        axes = [int(a) for a in np.asarray(ctx.constant(node.input[3], "axes")).reshape(-1)]
    return _pad(ctx, node, pads, value, axes)


_RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                       "half_pixel_symmetric")
_RESIZE_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_mode(mode):
    if mode not in ("nearest", "linear", "cubic"):
        raise Refusal(f"mode {mode!r}")
    return mode


@converter("Resize", since=11)
def resize(ctx, node):
    a = attributes(node)
    mode = _resize_mode(a.get("mode", "nearest"))
    coordinates = a.get("coordinate_transformation_mode", "half_pixel")
    if coordinates not in _RESIZE_COORDINATES:
        raise Refusal(f"coordinate_transformation_mode {coordinates!r} is not supported "
                      f"(this version takes {', '.join(_RESIZE_COORDINATES)})")
    nearest = a.get("nearest_mode", "round_prefer_floor")
    if nearest not in _RESIZE_NEAREST:
        raise Refusal(f"nearest_mode {nearest!r}")
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Refusal(f"keep_aspect_ratio_policy={a['keep_aspect_ratio_policy']!r} is not "
                      "supported (only 'stretch')")
    # antialias and exclude_outside weigh the elements linear and cubic
    # interpolation read; nearest reads one element whole (onnxruntime
    # refuses both with it too).
    antialias, exclude_outside = bool(a.get("antialias", 0)), bool(a.get("exclude_outside", 0))
    if mode == "nearest" and (antialias or exclude_outside):
        raise Refusal(f"{'antialias' if antialias else 'exclude_outside'}=1 with mode "
                      "'nearest' (it applies to linear and cubic)")
    # The region of interest (input 1) is read by tf_crop_and_resize only.

    def given(i, what):
        if len(node.input) <= i or not node.input[i]:
            return None
        v = np.asarray(ctx.constant(node.input[i], what)).reshape(-1)
        return v if v.size else None
    scales, sizes = given(2, "scales"), given(3, "sizes")
    if (scales is None) == (sizes is None):
        raise Refusal(f"{'both' if scales is not None else 'neither of'} scales and sizes "
                      "given (exactly one)")
    name = node.input[0]
    rank = ctx.rank(name, "the input")
    axes = a.get("axes")
    if axes is not None:  # the other axes keep their dims
        axes = [_axis(ax, rank) for ax in axes]
        given_values = scales if scales is not None else sizes
        if len(given_values) != len(axes):
            raise Refusal(f"{len(given_values)} scales or sizes for {len(axes)} axes")
        if scales is not None:
            full = [1.0] * rank
        else:
            dims = ctx.shape(name)
            if any(dims[i] is None for i in range(rank) if i not in axes):
                raise Refusal("sizes for some axes of an input with a dim bound at run time")
            full = list(dims)
        for ax, v in zip(axes, given_values):
            full[ax] = v
        scales, sizes = (full, None) if scales is not None else (None, full)
    count = len(scales if scales is not None else sizes)
    if count != rank:
        raise Refusal(f"{count} scales or sizes for a rank-{rank} input")
    return [ctx.graph.resize(
        ctx.value(name), sizes=None if sizes is None else [int(s) for s in sizes],
        scales=None if scales is None else [float(s) for s in scales], mode=mode,
        coordinates=coordinates, nearest=nearest,
        cubic_coeff_a=float(a.get("cubic_coeff_a", -0.75)), exclude_outside=exclude_outside,
        antialias=antialias, name=node.name or None)]


def _upsample(ctx, node, scales):
    # Upsample (and Resize before opset 11) maps coordinates asymmetrically
    # and takes the nearest element below.
    mode = attributes(node).get("mode", "nearest")
    if mode not in ("nearest", "linear"):  # cubic came with Resize 11
        raise Refusal(f"mode {mode!r} ({node.op_type} takes nearest and linear)")
    if any(s < 1 for s in scales):
        raise Refusal(f"{node.op_type} before opset 11 with a scale below 1 (its rounding "
                      "is left open there)")
    return [ctx.graph.resize(ctx.value(node.input[0]), scales=[float(s) for s in scales],
                             mode=mode, coordinates="asymmetric", nearest="floor",
                             name=node.name or None)]


@converter("Upsample", since=7, until=7)
def upsample_attribute(ctx, node):
    return _upsample(ctx, node, list(attributes(node)["scales"]))


@converter("Upsample", since=9, until=10)
def upsample(ctx, node):
    return _upsample(ctx, node, list(np.asarray(ctx.constant(node.input[1], "scales"))
                                     .reshape(-1)))


@converter("Resize", since=10, until=10)
def resize_10(ctx, node):
    return _upsample(ctx, node, list(np.asarray(ctx.constant(node.input[1], "scales"))
                                     .reshape(-1)))
