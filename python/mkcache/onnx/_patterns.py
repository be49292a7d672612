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
    QDQ        DequantizeLinear of 8-bit data (one scale) and of constant
               int8 weights with zero point 0 (one scale, or one per output
               channel) into Conv, MatMul or Gemm (a constant or dequantized
               bias; a Relu after it), then QuantizeLinear to 8 bits: one
               quantized convolution or matmul, requantized, as ONNX
               Runtime's quantizer writes a QDQ model
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


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dequantized(g: _Graph, name, constant: bool):
    """(node index, its inputs padded to three, its axis) of the
    DequantizeLinear making `name`, with constant scale and zero point (and
    data constant or not, as asked), else None."""
    d = g.producer.get(name)
    if g.op(d) != "DequantizeLinear":
        return None
    node = g.nodes[d]
    inputs = list(node.input) + [""] * (3 - len(node.input))
    a = _attrs(node)
    if a.get("block_size", 0) or inputs[1] not in g.known or \
            (inputs[2] and inputs[2] not in g.known) or (inputs[0] in g.known) != constant:
        return None
    return d, inputs, a.get("axis", 1)


def _quantized_after(g: _Graph, out):
    """(nodes matched, the activation, QuantizeLinear's inputs, its output)
    when `out` goes only into QuantizeLinear (through a Relu, maybe) of one
    constant scale and zero point, else None."""
    matched, activation = [], ""
    nxt = g.only_consumer(out)
    if g.op(nxt) == "Relu":
        matched.append(nxt)
        activation = "relu"
        nxt = g.only_consumer(g.nodes[nxt].output[0])
    if g.op(nxt) != "QuantizeLinear":
        return None
    q = g.nodes[nxt]
    inputs = list(q.input) + [""] * (3 - len(q.input))
    a = _attrs(q)
    if a.get("block_size", 0) or a.get("output_dtype", 0) or \
            np.size(g.known.get(inputs[1], [])) != 1 or \
            (inputs[2] and (inputs[2] not in g.known or
                            g.known[inputs[2]].dtype not in (np.uint8, np.int8))):
        return None
    return matched + [nxt], activation, inputs[1:], q.output[0]


def _qdq_operands(g: _Graph, x, w, out_axis: int):
    """The dequantized data x (one scale) and the dequantized constant int8
    weights w (zero point 0; one scale or one per index of `out_axis`):
    (nodes matched, x's three inputs, w's three inputs), or None."""
    xd, wd = _dequantized(g, x, False), _dequantized(g, w, True)
    if xd is None or wd is None or np.size(g.known[xd[1][1]]) != 1:
        return None
    weights = g.known[wd[1][0]]
    wz = wd[1][2]
    if weights.dtype != np.int8 or (wz and np.any(g.known[wz] != 0)):
        return None
    scales = np.size(g.known[wd[1][1]])
    if scales != 1 and (wd[2] % weights.ndim != out_axis or scales != weights.shape[out_axis]):
        return None
    # A DequantizeLinear read by other nodes too stays for them.
    matched = [i for i, name in ((xd[0], x), (wd[0], w)) if g.only_consumer(name) is not None]
    return matched, xd[1], wd[1]


def _bias(g: _Graph, name, n):
    """A bias of n values: constant, or the DequantizeLinear of a constant
    (which the importer computes when the model is loaded)."""
    if name in g.known:
        return np.size(g.known[name]) == n
    d = _dequantized(g, name, True)
    return d is not None and np.size(g.known[d[1][0]]) == n


def _qdq_conv(g: _Graph, c: int):
    """(nodes matched, inputs, output, attributes) of a QDQ Conv, or None."""
    node = g.nodes[c]
    operands = _qdq_operands(g, node.input[0], node.input[1], 0)
    if operands is None:
        return None
    matched, x, w = operands
    bias = node.input[2] if len(node.input) > 2 else ""
    if bias and not _bias(g, bias, np.shape(g.known[w[0]])[0]):
        return None
    after = _quantized_after(g, node.output[0])
    if after is None:
        return None
    tail, activation, y, out = after
    return [c] + matched + tail, x + w + y + [bias], out, {**_attrs(node),
                                                          "activation": activation}


def _qdq_matmul(g: _Graph, m: int):
    """(nodes matched, inputs, output, attributes) of a QDQ MatMul by 2-D
    weights, or of a QDQ Gemm (alpha and beta 1, A not transposed)."""
    node = g.nodes[m]
    a = _attrs(node)
    if g.op(m) == "Gemm" and (a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or
                              a.get("transA", 0)):
        return None
    nk = bool(a.get("transB", 0))
    w = g.known.get(g.nodes[g.producer[node.input[1]]].input[0]) \
        if node.input[1] in g.producer else None
    if w is None or np.ndim(w) != 2:
        return None
    operands = _qdq_operands(g, node.input[0], node.input[1], 0 if nk else 1)
    if operands is None:
        return None
    matched, x, wq = operands
    bias = node.input[2] if len(node.input) > 2 else ""
    if bias and not _bias(g, bias, np.shape(w)[0 if nk else 1]):
        return None
    after = _quantized_after(g, node.output[0])
    if after is None:
        return None
    tail, activation, y, out = after
    return [m] + matched + tail, x + wq + y + [bias], out, {"activation": activation,
                                                           "weights_nk": int(nk)}


# Pattern -> (the op type whose nodes start a match, the matcher, the
# folded operator), tried in this order.
_PATTERNS = [("Conv", _qdq_conv, "QDQConv"), ("MatMul", _qdq_matmul, "QDQMatMul"),
             ("Gemm", _qdq_matmul, "QDQMatMul"), ("Erf", _erf_gelu, "Gelu"), ("Tanh", _tanh_gelu, "GeluTanh"),
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
