"""Patterns exporters write an operator as, folded back into the operator
before the nodes are converted. Each pattern is a matcher over the ONNX
nodes; a match becomes one node of the "mkcache" domain, which only the
importer reads.

    erf GELU   x * 0.5 * (1 + erf(x / sqrt 2)), in the orders torch and
               hand-written models use (x / sqrt 2 or x * (1 / sqrt 2); the
               0.5 on x, on the sum or on the product)
    tanh GELU  x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), x^3
               as Pow(x, 3) or x * (x * x), the 0.5 placed as above
    linear     MatMul by constant weights [K, N], then Add of a constant bias
               of N values: one matmul with its bias (which an activation
               after it then fuses into)
    layer norm ReduceMean, Sub, Pow 2 (or Mul by itself), ReduceMean, Add eps,
               Sqrt, Div over the last axes (then Mul by a constant scale and
               Add of a constant shift, when there): one layer_norm, as
               exporters before LayerNormalization (opset 17) write it
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper, numpy_helper

DOMAIN = "mkcache"


class _Graph:
    """Producers and consumers of the values of a node list."""

    def __init__(self, nodes, known, outputs):
        self.nodes = list(nodes)
        # The initializers, and the values of Constant nodes (the TorchScript
        # exporter writes a pattern's scalars as those).
        self.known = dict(known)
        self.outputs = set(outputs)
        self.producer = {}
        self.consumers = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                self.producer[o] = i
            for name in n.input:
                self.consumers.setdefault(name, []).append(i)
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1:
                value = _constant_value(n.attribute[0])
                if value is not None:
                    self.known[n.output[0]] = value

    def scalar(self, name):
        """The value of a known one-element constant, else None."""
        a = self.known.get(name)
        if a is None or np.size(a) != 1:
            return None
        return float(np.asarray(a).reshape(-1)[0])

    def only_consumer(self, name):
        """The one node reading `name` (not a graph output), else None."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def op(self, i):
        return self.nodes[i].op_type if i is not None and self.nodes[i].domain in ("", "ai.onnx") \
            else None

    def other(self, i, name):
        """The input of binary node i that is not `name` (None if both are)."""
        a, b = self.nodes[i].input[0], self.nodes[i].input[1]
        if a == name and b != name:
            return b
        if b == name and a != name:
            return a
        return None


def _constant_value(attribute):
    """A Constant node's value attribute as an array (None for the sparse
    and string forms, which no pattern reads)."""
    if attribute.name == "value":
        return numpy_helper.to_array(attribute.t)
    if attribute.name in ("value_float", "value_int"):
        return np.asarray(helper.get_attribute_value(attribute))
    if attribute.name in ("value_floats", "value_ints"):
        return np.asarray(list(helper.get_attribute_value(attribute)))
    return None


def _close(value, want):
    return value is not None and math.isclose(value, want, rel_tol=1e-5)


def _erf_gelu(g: _Graph, e: int):
    """(nodes matched, x, output) of the erf GELU around Erf node e, or None."""
    scaled = g.nodes[e].input[0]
    p = g.producer.get(scaled)
    if g.op(p) not in ("Mul", "Div") or g.only_consumer(scaled) != e:
        return None
    pn = g.nodes[p]
    if g.op(p) == "Div":
        x, c = pn.input[0], g.scalar(pn.input[1])
        if not _close(c, math.sqrt(2)):
            return None
    else:
        x = next((n for n in pn.input if g.scalar(n) is None), None)
        if x is None or not _close(g.scalar(g.other(p, x)), 1 / math.sqrt(2)):
            return None
    return _gelu_tail(g, e, x, [p, e])


def _gelu_tail(g: _Graph, e: int, x: str, matched: list):
    """The rest of a GELU after its erf or tanh node e, 0.5 x (1 + e(...)):
    (nodes matched, x, output), or None."""
    a = g.only_consumer(g.nodes[e].output[0])
    if g.op(a) != "Add" or not _close(g.scalar(g.other(a, g.nodes[e].output[0])), 1.0):
        return None
    s = g.nodes[a].output[0]
    m1 = g.only_consumer(s)
    if g.op(m1) != "Mul":
        return None
    other = g.other(m1, s)
    matched = matched + [a, m1]
    if other == x:  # x * s, then * 0.5
        m2 = g.only_consumer(g.nodes[m1].output[0])
        if g.op(m2) != "Mul" or not _close(g.scalar(g.other(m2, g.nodes[m1].output[0])), 0.5):
            return None
        return matched + [m2], x, g.nodes[m2].output[0]
    if _close(g.scalar(other), 0.5):  # s * 0.5, then * x
        m2 = g.only_consumer(g.nodes[m1].output[0])
        if g.op(m2) != "Mul" or g.other(m2, g.nodes[m1].output[0]) != x:
            return None
        return matched + [m2], x, g.nodes[m2].output[0]
    h = g.producer.get(other)  # (x * 0.5) * s
    if g.op(h) != "Mul" or g.only_consumer(other) != m1 or g.other(h, x) is None or \
            not _close(g.scalar(g.other(h, x)), 0.5):
        return None
    return matched + [h], x, g.nodes[m1].output[0]


def _tanh_gelu(g: _Graph, t: int):
    """(nodes matched, x, output) of the tanh GELU around Tanh node t, or None."""
    def product(i, constant):
        """The other operand of Mul node i when one is `constant`, else None."""
        if g.op(i) != "Mul":
            return None
        a, b = g.nodes[i].input[0], g.nodes[i].input[1]
        if _close(g.scalar(a), constant):
            return b
        return a if _close(g.scalar(b), constant) else None

    scaled = g.nodes[t].input[0]
    u = g.producer.get(scaled)
    inner = product(u, math.sqrt(2 / math.pi))
    if inner is None or g.only_consumer(scaled) != t:
        return None
    s = g.producer.get(inner)
    if g.op(s) != "Add" or g.only_consumer(inner) != u:
        return None
    for x in g.nodes[s].input:  # x + 0.044715 x^3, either order
        m = g.producer.get(g.other(s, x))
        cube = product(m, 0.044715)
        if cube is None or g.only_consumer(g.nodes[m].output[0]) != s or \
                g.only_consumer(cube) != m:
            continue
        c = g.producer.get(cube)
        if g.op(c) == "Pow" and g.nodes[c].input[0] == x and _close(g.scalar(g.nodes[c].input[1]), 3.0):
            return _gelu_tail(g, t, x, [c, m, s, u, t])
        square = g.other(c, x) if g.op(c) == "Mul" else None
        q = g.producer.get(square)
        if q is not None and g.op(q) == "Mul" and list(g.nodes[q].input) == [x, x] and \
                g.only_consumer(square) == c:
            return _gelu_tail(g, t, x, [q, c, m, s, u, t])
    return None


def _linear(g: _Graph, m: int):
    """(nodes matched, inputs, output) of a MatMul by constant weights and
    the Add of its bias, or None."""
    a, w = g.nodes[m].input[0], g.nodes[m].input[1]
    weights = g.known.get(w)
    if weights is None or np.ndim(weights) != 2 or a in g.known:
        return None
    y = g.nodes[m].output[0]
    add = g.only_consumer(y)
    if g.op(add) != "Add":
        return None
    bias = g.other(add, y)
    b = g.known.get(bias)
    if b is None or np.size(b) != np.shape(weights)[1] or \
            any(d != 1 for d in np.shape(b)[:-1]):
        return None
    return [m, add], [a, w, bias], g.nodes[add].output[0]


def _reduce_axes(g: _Graph, i: int):
    """A ReduceMean's axes (attribute, or a known input from opset 18), or
    None; and whether it keeps its dims."""
    node = g.nodes[i]
    keep, axes = 1, None
    for a in node.attribute:
        if a.name == "keepdims":
            keep = a.i
        elif a.name == "axes":
            axes = list(a.ints)
    if len(node.input) > 1 and node.input[1] in g.known:
        axes = [int(v) for v in np.asarray(g.known[node.input[1]]).reshape(-1)]
    return axes, bool(keep)


def _layer_norm(g: _Graph, r1: int):
    """(nodes matched, inputs, output, attributes) of a decomposed layer
    norm starting at ReduceMean r1, or None."""
    x = g.nodes[r1].input[0]
    axes, keep = _reduce_axes(g, r1)
    if not keep or not axes or sorted(axes) != list(range(-len(axes), 0)):
        return None  # the last axes, counted from the end
    mean = g.nodes[r1].output[0]
    sub = g.only_consumer(mean)
    if g.op(sub) != "Sub" or g.nodes[sub].input[0] != x or g.nodes[sub].input[1] != mean:
        return None
    d = g.nodes[sub].output[0]
    readers = sorted(set(g.consumers.get(d, [])))  # Mul(d, d) reads it twice
    if len(readers) != 2 or d in g.outputs:
        return None
    square = next((i for i in readers if g.op(i) in ("Pow", "Mul")), None)
    div = next((i for i in readers if g.op(i) == "Div"), None)
    if square is None or div is None or g.nodes[div].input[0] != d:
        return None
    sq = g.nodes[square]
    if not (sq.op_type == "Pow" and sq.input[0] == d and _close(g.scalar(sq.input[1]), 2.0)) and \
            not (sq.op_type == "Mul" and list(sq.input) == [d, d]):
        return None
    r2 = g.only_consumer(sq.output[0])
    if g.op(r2) != "ReduceMean" or _reduce_axes(g, r2) != (axes, True):
        return None
    add = g.only_consumer(g.nodes[r2].output[0])
    if g.op(add) != "Add":
        return None
    eps = g.scalar(g.other(add, g.nodes[r2].output[0]))
    if eps is None or eps < 0:
        return None
    sqrt = g.only_consumer(g.nodes[add].output[0])
    if g.op(sqrt) != "Sqrt" or g.only_consumer(g.nodes[sqrt].output[0]) != div or \
            g.nodes[div].input[1] != g.nodes[sqrt].output[0]:
        return None
    matched, inputs, out = [r1, sub, square, r2, add, sqrt, div], [x], g.nodes[div].output[0]
    for op in ("Mul", "Add"):  # the scale, then the shift, when constant
        nxt = g.only_consumer(out)
        other = g.other(nxt, out) if g.op(nxt) == op else None
        # Per normalised element: a vector over the reduced axes (a layer
        # norm's scale and shift read one value per element).
        if other is None or other not in g.known or \
                np.ndim(g.known[other]) != len(axes) or np.size(g.known[other]) < 2:
            break
        matched.append(nxt)
        inputs.append(other)
        out = g.nodes[nxt].output[0]
    return matched, inputs, out, {"axis": -len(axes), "epsilon": eps}


# Pattern -> (the op type whose nodes start a match, the matcher, the
# folded operator), tried in this order.
_PATTERNS = [("Erf", _erf_gelu, "Gelu"), ("Tanh", _tanh_gelu, "GeluTanh"),
             ("MatMul", _linear, "MatMulBias"),
             ("ReduceMean", _layer_norm, "LayerNorm")]


def fold(nodes, known: dict, outputs) -> tuple:
    """The nodes with every pattern folded, and how many were."""
    count = 0
    for start, matcher, op in _PATTERNS:
        g = _Graph(nodes, known, outputs)
        gone, replaced = set(), {}
        for i in range(len(g.nodes)):
            if g.op(i) != start or i in gone:
                continue
            match = matcher(g, i)
            if match is None or gone.intersection(match[0]):
                continue
            matched, inputs, out = match[:3]
            attrs = match[3] if len(match) > 3 else {}
            gone.update(matched)
            # The folded node stands where the last matched node stood, so
            # every value it reads exists by then.
            inputs = [inputs] if isinstance(inputs, str) else inputs
            replaced[max(matched)] = helper.make_node(
                op, inputs, [out], domain=DOMAIN, name=g.nodes[i].name or out, **attrs)
            count += 1
        nodes = [replaced.get(i, n) for i, n in enumerate(g.nodes)
                 if i not in gone or i in replaced]
    return nodes, count
