"""The dims of converted values where ONNX's shape inference left a dim
unnamed: worked out from the inputs' dims (ints and Dims) by each
operator's shape rule, so a dim bound at run time keeps its name through
the values computed from a range, a gather or a broadcast (inference names
their dims afresh, and the shapes read from them later would hold dims no
value has)."""
from __future__ import annotations

from ._base import Refusal, attributes
from ._symbolic import is_dim

# Operators whose result has their first input's dims.
_SAME = {"Cast", "CastLike", "Not", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Erf", "Sqrt",
         "Exp", "Log", "Softmax", "LogSoftmax", "LayerNormalization", "Identity", "Dropout",
         "Gelu", "Reciprocal", "Clip", "LeakyRelu", "Elu", "Softplus", "HardSwish", "Mish",
         "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf",
         "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
         "GeluTanh", "LayerNorm"}  # the last two: patterns folded into one operator
# Operators that broadcast their inputs as numpy does.
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "And", "Or",
              "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Where",
              "BitShift", "Mod", "PRelu"}


def _unnamed(ctx, name) -> bool:
    """Whether inference left a dim of `name` bound at run time without a
    name of the model's own (unk__ names are inference's)."""
    shape = ctx.shapes.get(name)
    if shape is None:
        return True
    params = ctx.dim_params.get(name, ())
    return any(d is None and (i >= len(params) or params[i] is None or
                              params[i].startswith("unk__"))
               for i, d in enumerate(shape))


def _broadcast(ctx, names, inferred):
    dims = [ctx.dims(n) for n in names if n]
    rank = max(len(d) for d in dims)
    out = []
    for axis in range(rank):
        entries = {d[axis - rank + len(d)] for d in dims if axis - rank + len(d) >= 0}
        entries.discard(1)
        if not entries:
            out.append(1)
        elif len(entries) == 1:
            out.append(entries.pop())
        elif inferred is not None and len(inferred) == rank:
            out.append(inferred[axis])  # whether they agree depends on the run
        else:
            return None
    return out


def _rule(ctx, node, inferred):
    op, ins = node.op_type, node.input
    if op in _SAME:
        return list(ctx.dims(ins[0]))
    if op in _BROADCAST:
        return _broadcast(ctx, ins, inferred)
    if op == "Gather":
        data, index = ctx.dims(ins[0]), ctx.dims(ins[1])
        axis = attributes(node).get("axis", 0) % len(data)
        if ins[1] in ctx.known and ctx.known[ins[1]].ndim == 0:
            index = ()
        return list(data[:axis]) + list(index) + list(data[axis + 1:])
    if op in ("Unsqueeze", "Squeeze"):
        dims = list(ctx.dims(ins[0]))
        if len(ins) > 1 and ins[1] in ctx.known:
            axes = [int(a) for a in ctx.known[ins[1]].reshape(-1)]
        else:
            axes = attributes(node).get("axes")
        if axes is None:
            return None if op == "Unsqueeze" else [d for d in dims if d != 1]
        if op == "Squeeze":
            axes = {a % len(dims) for a in axes}
            return [d for i, d in enumerate(dims) if i not in axes]
        rank = len(dims) + len(axes)
        for a in sorted(a % rank for a in axes):
            dims.insert(a, 1)
        return dims
    if op == "Expand" and ins[1] in ctx.symbolic:
        target = list(ctx.symbolic[ins[1]].array.reshape(-1))
        return _broadcast_dims(ctx.dims(ins[0]), target)
    if op == "Flatten":
        dims = ctx.dims(ins[0])
        axis = attributes(node).get("axis", 1) % (len(dims) + 1)
        return [_product(dims[:axis]), _product(dims[axis:])]
    if op == "Concat":
        parts = [ctx.dims(n) for n in ins]
        axis = attributes(node)["axis"] % len(parts[0])
        out = list(parts[0])
        out[axis] = sum((p[axis] for p in parts[1:]), parts[0][axis])
        return out
    if op == "MatMulBias":  # a folded MatMul by constant weights and its bias
        a, w = ctx.dims(ins[0]), ctx.dims(ins[1])
        return list(a[:-1]) + [w[-1]]
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a, b = ctx.dims(ins[0]), ctx.dims(ins[3 if op == "QLinearMatMul" else 1])
        if len(a) < 2 or len(b) < 2:
            return None
        batch = _broadcast_dims(a[:-2], b[:-2])
        return None if batch is None else batch + [a[-2], b[-1]]
    if op == "Transpose":
        dims = ctx.dims(ins[0])
        perm = attributes(node).get("perm", list(reversed(range(len(dims)))))
        return [dims[p] for p in perm]
    return None


def _product(dims):
    out = 1
    for d in dims:
        out = d * out
    return out


def _broadcast_dims(a, b):
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return out


def propagate(ctx, node) -> None:
    """Records the dims of the node's graph-value outputs that inference
    left unnamed, where its operator's rule gives them."""
    for name in node.output[:1]:
        if not name or name not in ctx.values or name in ctx.computed or \
                not _unnamed(ctx, name):
            continue
        inferred = ctx.shapes.get(name)
        try:
            if any(n and ctx.shape(n) is None for n in node.input):
                continue
            out = _rule(ctx, node, ctx.dims(name) if inferred is not None else None)
        except (Refusal, KeyError, IndexError, ZeroDivisionError, TypeError, ValueError):
            continue  # no rule for this case (or a malformed node, which its converter took)
        if out is None or (inferred is not None and len(out) != len(inferred)):
            continue
        if inferred is not None and any(not is_dim(d) and i is not None and d != i
                                        for d, i in zip(out, inferred)):
            continue  # a rule that disagrees with inference's static dims
        ctx.computed[name] = tuple(out)
        if inferred is None:
            ctx.shapes[name] = tuple(None if is_dim(d) else int(d) for d in out)
