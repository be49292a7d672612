"""Random program graphs for test_program_fuzz.py, and the two oracles
their outputs are checked against.

A graph is a `Spec`: inputs, nodes and outputs as plain data. Every node
is (method, arguments, keywords) where method is the name shared by
mkcache.Graph and the eager operators (g.conv2d / mkcache.conv2d, g.relu /
mkcache.relu, ...), so the same Spec builds the Graph and runs eagerly with
one loop. Arguments refer to values (("v", i): input or node result i) or
constants (("c", seed, shape, kind): made from a seed, so a Spec prints as
a self-contained reproducer, see Spec.source).

The float64 reference carries, next to every value, an element-wise bound
of how far a float32 computation of it may be from the exact value: the
operator's own rounding (benchdnn-style: a K-term sum is off by a few
K * eps of the sum of the terms' magnitudes, element-wise functions by a
few dozen ulps) plus its inputs' bounds carried through it (a conv carries
them through |w|, an element-wise function through its slope, measured
at x +- bound). A node whose exact value is not finite, huge, or only
known to within more than a small fraction of its magnitude is never
generated: every check then means something, on every ISA.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import mkcache
import reference as ref
from fuzz_strategies import data
from reference import EPS_F32

LAYOUTS = ("NCHW", "NHWC")
# Every activation kind, with the parameters the tests pass (None: the
# library's default).
ACTIVATIONS = {
    "relu": {}, "leaky_relu": {"negative_slope": 0.3}, "elu": {"alpha": 0.7}, "gelu": {},
    "tanh": {}, "sigmoid": {}, "swish": {"beta": 1.5}, "silu": {},
    "hardswish": {}, "mish": {}, "clip": {"min": -0.5, "max": 0.8}, "relu6": {}, "sqrt": {},
    "abs": {}, "exp": {}, "log": {}, "square": {},
}
# The fused activations of conv / linear / matmul: the library's defaults.
FUSED = [None, "relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "elu", "hardswish", "clip", "relu6",
         "square", "abs", "swish", "mish", "leaky_relu"]
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
# Tolerated: a value known to within this fraction of its magnitude (else
# the node is not generated: its check would be too loose to mean much).
MAX_RELATIVE_BOUND = 1e-3
MAX_MAGNITUDE = 1e4


# ------------------------------------------------------------------ specs

def constant(seed, shape, kind="normal"):
    """A constant's values: "normal" (standard normal, times 0.5),
    "positive" (in [0.5, 2)), "variance" (in [0.2, 2))."""
    if kind == "normal":
        return data(seed, *shape, scale=0.5)
    rng = np.random.default_rng(seed)
    low = 0.5 if kind == "positive" else 0.2
    return rng.uniform(low, 2.0, size=shape).astype(np.float32)


@dataclass
class Spec:
    inputs: list = field(default_factory=list)   # (name, shape, layout, dynamic batch)
    nodes: list = field(default_factory=list)    # (method, args, kwargs)
    outputs: list = field(default_factory=list)  # (name, value index)
    seed: int = 0                                # of the input data

    def input_arrays(self, seed=None, batch=None):
        """The inputs' data; `batch`: another size of the dynamic dims."""
        seed = self.seed if seed is None else seed
        return {name: data(seed + i, *((batch,) + tuple(shape[1:]) if batch and dyn else shape))
                for i, (name, shape, _, dyn) in enumerate(self.inputs)}

    # -------------------------------------------------------------- build
    def _arg(self, a, values):
        if isinstance(a, list):
            return [self._arg(v, values) for v in a]
        if isinstance(a, tuple) and a and a[0] == "v":
            return values[a[1]]
        if isinstance(a, tuple) and a and a[0] == "c":
            return constant(*a[1:])
        return a

    def graph(self) -> mkcache.Graph:
        g = mkcache.Graph()
        values = [g.input(name, (None,) + tuple(shape[1:]) if dyn else shape, layout)
                  for name, shape, layout, dyn in self.inputs]
        for method, args, kwargs in self.nodes:
            values.append(getattr(g, method)(*[self._arg(a, values) for a in args], **kwargs))
        for name, index in self.outputs:
            g.output(values[index], name)
        return g

    def eager(self, arrays) -> list:
        """Every value computed by the eager operators (numpy, in the order
        of the reported shape). The inputs are Tensors labelled with their
        layout and results stay Tensors, as a Graph's values: an operator's
        data_format then only says what the label says already."""
        values = [mkcache.Tensor(arrays[name], layout) if len(shape) in (4, 5)
                  else arrays[name]
                  for name, shape, layout, _ in self.inputs]
        for method, args, kwargs in self.nodes:
            args = [self._arg(a, values) for a in args]
            values.append(getattr(mkcache, method)(*args, **_resolved(method, args, kwargs)))
        return [v.numpy() if isinstance(v, mkcache.Tensor) else np.asarray(v) for v in values]

    def reference(self, arrays) -> list:
        """[(exact float64 value, error bound)] of every value."""
        values = [(arrays[name].astype(np.float64), np.zeros(arrays[name].shape))
                  for name, *_ in self.inputs]
        for method, args, kwargs in self.nodes:
            args = [self._arg(a, values) for a in args]
            values.append(evaluate(method, args, _resolved(method, args, kwargs)))
        return values

    # ------------------------------------------------------------- source
    def source(self) -> str:
        """The graph as Python source over fuzz_strategies / this module."""
        def arg(a):
            if isinstance(a, list):
                return "[" + ", ".join(arg(v) for v in a) + "]"
            if isinstance(a, tuple) and a and a[0] == "v":
                return f"v{a[1]}"
            if isinstance(a, tuple) and a and a[0] == "c":
                return f"constant{a[1:]!r}"
            return repr(a)
        lines = ["g = mkcache.Graph()"]
        for i, (name, shape, layout, dyn) in enumerate(self.inputs):
            shown = (None,) + tuple(shape[1:]) if dyn else tuple(shape)
            lines.append(f"v{i} = g.input({name!r}, {shown!r}, {layout!r})")
        for j, (method, args, kwargs) in enumerate(self.nodes):
            parts = [arg(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
            lines.append(f"v{len(self.inputs) + j} = g.{method}({', '.join(parts)})")
        for name, index in self.outputs:
            lines.append(f"g.output(v{index}, {name!r})")
        shapes = ", ".join(f"{name}=data({self.seed + i}, *{tuple(shape)!r})"
                           for i, (name, shape, _, _) in enumerate(self.inputs))
        lines.append(f"# prog = g.compile(...); prog.run({shapes})")
        return "\n".join(lines)

    def value_shapes(self) -> list:
        return [v[0].shape for v in self.reference(self.input_arrays())]


def _resolved(method, args, kwargs):
    """A reshape's 0 ("x's dim there", a Graph's form for a dynamic batch)
    replaced by that dim, for the eager operator and the reference."""
    if method != "reshape" or 0 not in kwargs["shape"]:
        return kwargs
    x = args[0][0] if isinstance(args[0], tuple) else args[0]
    return dict(kwargs, shape=tuple(x.shape[i] if d == 0 else d
                                    for i, d in enumerate(kwargs["shape"])))


# ------------------------------------------------------------ references

def _nchw(a):
    return np.moveaxis(a, -1, 1)


def _nhwc(a):
    return np.moveaxis(a, 1, -1)


def _own(values, ulps=64):
    return ulps * EPS_F32 * np.maximum(np.abs(values), 1.0)


def _through(fn, x, t):
    """fn(x) and the bound of fn(x +- t): the largest change of fn over
    the interval, sampled (the functions are smooth or piecewise linear)."""
    y = fn(x)
    spread = np.zeros_like(y)
    for f in (-1.0, -0.5, 0.5, 1.0):
        with np.errstate(all="ignore"):
            spread = np.maximum(spread, np.abs(fn(x + f * t) - y))
    return y, spread


def _activation_fn(kind, **kw):
    alpha, beta = mkcache.ACTIVATIONS[kind][1:]
    if kind == "gelu" and kw.get("approximate") == "tanh":
        kind = "gelu_tanh"
    if kind == "leaky_relu":
        alpha = kw.get("negative_slope", alpha)
    elif kind == "elu":
        alpha = kw.get("alpha", alpha)
    elif kind == "swish":
        alpha = kw.get("beta", alpha)
    elif kind == "clip":
        alpha, beta = kw.get("min", alpha), kw.get("max", beta)
    return lambda v: ref.activation(kind, v, alpha, beta)


def _activate(y, t, kind, **kw):
    if kind is None:
        return y, t
    z, spread = _through(_activation_fn(kind, **kw), y, t)
    return z, spread + _own(z)


def _conv(x, w, b, kw, transpose=False):
    (xv, xt), wv = x, w.astype(np.float64)
    nhwc = kw.get("data_format", "NCHW") in ("NHWC", "NDHWC")
    if nhwc:
        xv, xt = _nchw(xv), _nchw(xt)
    if xv.ndim == 5:
        k = 3
        s, d = (_ntuple(kw.get(n, 1), 3) for n in ("stride", "dilation"))
        p = _ntuple(kw.get("padding", 0), 3)
        g = kw.get("groups", 1)
        exact, mag = ref.conv_nd(xv, wv, b, s, p, p, d, g)
        carried, _ = ref.conv_nd(xt, np.abs(wv), None, s, p, p, d, g)
        t = 4.0 * (int(np.prod(w.shape[1:])) + 2) * EPS_F32 * mag + carried
        y, t = _activate(exact, t, kw.get("activation"))
        del k
        return (_nhwc(y), _nhwc(t)) if nhwc else (y, t)
    s = _pair(kw.get("stride", 1))
    p = kw.get("padding", 0)
    p = (p, p, p, p) if isinstance(p, int) else (p[0], p[0], p[1], p[1]) if len(p) == 2 else p
    d = _pair(kw.get("dilation", 1))
    g = kw.get("groups", 1)
    if transpose:
        op = _pair(kw.get("output_padding", 0))
        exact, mag = ref.conv_transpose2d(xv, wv, b, s, (p[0], p[2]), (p[1], p[3]), op, d, g)
        carried, _ = ref.conv_transpose2d(xt, np.abs(wv), None, s, (p[0], p[2]), (p[1], p[3]),
                                          op, d, g)
        terms = w.shape[0] // g * w.shape[2] * w.shape[3]
    else:
        exact, mag = ref.conv2d_nchw(xv, wv, b, s, p, d, g)
        carried, _ = ref.conv2d_nchw(xt, np.abs(wv), None, s, p, d, g)
        terms = w.shape[1] * w.shape[2] * w.shape[3]
    t = 4.0 * (terms + 2) * EPS_F32 * mag + carried
    y, t = _activate(exact, t, kw.get("activation"))
    return (_nhwc(y), _nhwc(t)) if nhwc else (y, t)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _ntuple(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _pool(method, x, kw):
    xv, xt = x
    nhwc = kw.get("data_format", "NCHW") in ("NHWC", "NDHWC")
    if nhwc:
        xv, xt = _nchw(xv), _nchw(xt)
    n = xv.ndim - 2
    if method.startswith("global"):
        axes = tuple(range(2, xv.ndim))
        if method == "global_max_pool":
            y = xv.max(axis=axes, keepdims=True)
            t = xt.max(axis=axes, keepdims=True)
        else:
            y = xv.mean(axis=axes, keepdims=True)
            count = int(np.prod(xv.shape[2:]))
            t = (xt.max(axis=axes, keepdims=True)
                 + 4.0 * (count + 1) * EPS_F32 * np.abs(xv).max(axis=axes, keepdims=True))
    else:
        k = _ntuple(kw["kernel_size"], n)
        s = _ntuple(kw.get("stride") or k, n)
        p = _ntuple(kw.get("padding", 0), n)
        ceil = kw.get("ceil_mode", False)
        if method.startswith("max_pool"):
            kind = "max"
        else:
            kind = "avg_include" if kw.get("count_include_pad", True) else "avg_exclude"
        y = ref.pool(xv, kind, k, s, p, p, ceil)
        t = ref.pool(xt, "max", k, s, p, p, ceil)
        if kind != "max":
            t = t + 4.0 * (int(np.prod(k)) + 1) * EPS_F32 * ref.pool(np.abs(xv), "max", k, s, p,
                                                                     p, ceil)
    return (_nhwc(y), _nhwc(t)) if nhwc else (y, t)


def _matmul(a, b, kw, bias=None):
    (av, at), (bv, bt) = a, b
    if kw.get("transpose_a"):
        av, at = np.swapaxes(av, -1, -2), np.swapaxes(at, -1, -2)
    if kw.get("transpose_b"):
        bv, bt = np.swapaxes(bv, -1, -2), np.swapaxes(bt, -1, -2)
    scale = kw.get("scale", 1.0)  # (a @ b + bias) * scale, as mkcache.matmul
    exact = av @ bv
    mag = np.abs(av) @ np.abs(bv)
    if bias is not None:
        exact = exact + bias
        mag = mag + np.abs(bias)
    carried = (at @ np.abs(bv) + np.abs(av) @ bt + at @ bt) * abs(scale)
    exact, mag = exact * scale, mag * abs(scale)
    t = 4.0 * (av.shape[-1] + 2) * EPS_F32 * mag + carried
    return _activate(exact, t, kw.get("activation"))


def _binary(method, a, b):
    (av, at), (bv, bt) = a, b
    if method == "add":
        y, t = av + bv, at + bt
    elif method == "sub":
        y, t = av - bv, at + bt
    elif method == "mul":
        y, t = av * bv, np.abs(av) * bt + np.abs(bv) * at + at * bt
    elif method == "div":  # divisors are positive constants (bt == 0)
        y, t = av / bv, at / np.abs(bv)
    elif method == "maximum":
        y, t = np.maximum(av, bv), np.maximum(at, bt)
    else:
        y, t = np.minimum(av, bv), np.maximum(at, bt)
    t = np.broadcast_to(t, y.shape)
    return y, t + 4 * EPS_F32 * np.abs(y)


def _lrn(x, size, alpha, beta, k):
    """The library's window, ONNX's: size channels from
    c - (size - 1) // 2 (see mkcache.lrn)."""
    return ref.lrn_nchw(x, size, alpha, beta, k)


def _value(a):
    """An argument as (exact, bound): constants and scalars are exact."""
    if isinstance(a, tuple):
        return a
    v = np.asarray(a, dtype=np.float64)
    return v, np.zeros(v.shape)


def evaluate(method, args, kw):
    """(exact, bound) of one node from its arguments' (exact, bound)."""
    if method in ACTIVATIONS:
        (xv, xt), = args
        y, spread = _through(_activation_fn(method, **kw), xv, xt)
        return y, spread + _own(y)
    if method in ("conv2d", "conv3d", "conv2d_transpose"):
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else kw.get("bias")
        return _conv(x, w, None if b is None else np.asarray(b, np.float64), kw,
                     method == "conv2d_transpose")
    if "pool" in method:
        return _pool(method, args[0], kw)
    if method in BINARY:
        return _binary(method, _value(args[0]), _value(args[1]))
    if method == "linear":
        (xv, xt), w = args[0], np.asarray(args[1], np.float64)
        bias = np.asarray(args[2], np.float64) if len(args) > 2 else None
        return _matmul((xv, xt), (w.T, np.zeros(w.T.shape)), kw, bias)
    if method == "matmul":
        bias = np.asarray(args[2], np.float64) if len(args) > 2 else None
        return _matmul(args[0], _value(args[1]), kw, bias)
    if method in ("softmax", "log_softmax"):
        (xv, xt), axis = args[0], kw.get("axis", -1)
        log = method == "log_softmax"
        y = ref.softmax(xv, axis, log)
        n = xv.shape[axis]
        worst = xt.max(axis=axis, keepdims=True)
        carried = 2 * worst * (1.0 if log else np.abs(y))
        return y, carried + (64 + 4 * n) * EPS_F32 * np.maximum(np.abs(y), 1.0)
    if method == "layer_norm":
        (xv, xt) = args[0]
        begin = kw.get("begin_norm_axis", -1) % xv.ndim
        axes = tuple(range(begin, xv.ndim))
        n = int(np.prod([xv.shape[a] for a in axes]))
        eps = kw.get("epsilon", 1e-5)
        std = np.sqrt(xv.var(axis=axes, keepdims=True) + eps)
        norm = (xv - xv.mean(axis=axes, keepdims=True)) / std
        worst = xt.max(axis=axes, keepdims=True)
        spread = np.abs(xv).max(axis=axes, keepdims=True)
        t = ((2 + np.abs(norm)) * worst / std
             + 4.0 * (n + 2) * EPS_F32 * spread / std * (2 + np.abs(norm)) + _own(norm))
        scale = np.asarray(args[1], np.float64) if len(args) > 1 and args[1] is not None else 1.0
        shift = np.asarray(args[2], np.float64) if len(args) > 2 else 0.0
        y = norm * scale + shift
        return y, t * np.abs(scale) + 4 * EPS_F32 * (np.abs(y) + np.abs(norm * scale))
    if method == "batch_norm":
        (xv, xt) = args[0]
        mean, var, scale, shift = (np.asarray(a, np.float64) for a in args[1:5])
        nhwc = kw.get("data_format", "NCHW") in ("NHWC", "NDHWC")
        shape = [1] * xv.ndim
        shape[-1 if nhwc else 1] = -1
        a = (scale / np.sqrt(var + kw.get("epsilon", 1e-5))).reshape(shape)
        centred = xv - mean.reshape(shape)
        y = centred * a + shift.reshape(shape)
        t = xt * np.abs(a) + 8 * EPS_F32 * (np.abs(centred * a) + np.abs(y) + np.abs(xv * a))
        return y, t + _own(y, 8)
    if method == "lrn":
        (xv, xt) = args[0]
        nhwc = kw.get("data_format", "NCHW") == "NHWC"
        size, alpha, beta, k = (kw[n] for n in ("size", "alpha", "beta", "k"))
        xc = _nchw(xv) if nhwc else xv
        y = _lrn(xc, size, alpha, beta, k)
        y = _nhwc(y) if nhwc else y
        worst = xt.max()
        t = (1 + 2 * beta * size) * worst * k ** -beta + _own(y) + 4 * size * EPS_F32 * np.abs(y)
        return y, np.broadcast_to(t, y.shape)
    if method == "concat":
        items, axis = args[0], kw.get("axis", 0)
        items = [_value(v) for v in items]
        return (np.concatenate([v for v, _ in items], axis),
                np.concatenate([t for _, t in items], axis))
    if method == "transpose":
        (xv, xt), axes = args[0], kw["axes"]
        return np.transpose(xv, axes), np.transpose(xt, axes)
    if method == "reshape":
        (xv, xt), shape = args[0], kw["shape"]
        return np.reshape(xv, shape), np.reshape(xt, shape)
    if method == "flatten":
        (xv, xt) = args[0]
        start = kw.get("start_dim", 1)
        shape = xv.shape[:start] + (-1,)
        return np.reshape(xv, shape), np.reshape(xt, shape)
    raise ValueError(method)


def usable(value) -> bool:
    """Whether a node's (exact, bound) is worth checking (see the module's
    docstring)."""
    y, t = value
    if y.size == 0 or not (np.all(np.isfinite(y)) and np.all(np.isfinite(t))):
        return False
    top = float(np.abs(y).max())
    return top <= MAX_MAGNITUDE and float(t.max()) <= MAX_RELATIVE_BOUND * max(top, 1.0)


# ------------------------------------------------------------- strategies
# Imported here (not at the top) so the references above stay usable
# without hypothesis, e.g. from a child process.
from hypothesis import strategies as st  # noqa: E402

# Size-1 dims and odd ones are the interesting ones; 16 and 17 straddle
# oneDNN's channel blocks.
DIMS = st.sampled_from([1, 1, 2, 3, 4, 5, 6, 7])
CHANNELS = st.sampled_from([1, 2, 3, 4, 5, 7, 16, 16, 17])
MAX_RANK = 5
SEEDS = st.integers(0, 2 ** 16)


def _const(draw, shape, kind="normal"):
    return ("c", draw(SEEDS), tuple(int(d) for d in shape), kind)


def data_format(label, rank):
    """An operator's data_format for a value of `rank` labelled `label`."""
    if rank == 5:
        return "NDHWC" if label == "NHWC" else "NCDHW"
    return label


def _channel_axis(rank, fmt):
    return rank - 1 if fmt == "NHWC" else 1


def _conv_out(size, k, s, pb, pe, d):
    return (size + pb + pe - ((k - 1) * d + 1)) // s + 1


def _draw_padding(draw, limit=2):
    form = draw(st.sampled_from(["int", "pair", "four"]))
    if form == "int":
        return draw(st.integers(0, limit))
    if form == "pair":
        return (draw(st.integers(0, limit)), draw(st.integers(0, limit)))
    return tuple(draw(st.integers(0, limit)) for _ in range(4))


def _pads4(p):
    if isinstance(p, int):
        return (p, p, p, p)
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else tuple(p)


def _draw_conv(draw, x, shape, fmt, transpose=False):
    if len(shape) != 4:
        return None
    c = shape[_channel_axis(4, fmt)]
    h, w = (shape[1], shape[2]) if fmt == "NHWC" else (shape[2], shape[3])
    groups = draw(st.sampled_from(sorted({1, 1, c} | ({2} if c % 2 == 0 else set())
                                         | ({3} if c % 3 == 0 else set()))))
    per_group = draw(st.sampled_from([1, 2, 3, 5]) if groups > 1 else CHANNELS)
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    kw = {"stride": stride if stride[0] != stride[1] else stride[0]}
    if transpose:
        padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
        outpad = tuple(draw(st.integers(0, s - 1)) for s in stride)
        sizes = [(n - 1) * s - 2 * p + d * (kk - 1) + 1 + o
                 for n, s, p, d, kk, o in zip((h, w), stride, padding, dilation, k, outpad)]
        weight = _const(draw, (c, per_group) + k)
        kw.update(padding=padding, output_padding=outpad)
    else:
        padding = _draw_padding(draw)
        p = _pads4(padding)
        sizes = [_conv_out(h, k[0], stride[0], p[0], p[1], dilation[0]),
                 _conv_out(w, k[1], stride[1], p[2], p[3], dilation[1])]
        weight = _const(draw, (groups * per_group, c // groups) + k)
        kw["padding"] = padding
    if min(sizes) < 1:
        return None
    kw.update(dilation=dilation, groups=groups, data_format=fmt,
              activation=draw(st.sampled_from(FUSED)))
    out_channels = per_group * groups
    args = [x, weight]
    if draw(st.booleans()):
        args.append(_const(draw, (out_channels,)))
    return ["conv2d_transpose" if transpose else "conv2d", args, kw]


def _draw_conv3d(draw, x, shape, fmt):
    last = fmt == "NHWC"
    c = shape[-1] if last else shape[1]
    spatial = shape[1:4] if last else shape[2:]
    groups = draw(st.sampled_from([1, c] if c > 1 else [1]))
    per_group = draw(st.sampled_from([1, 2, 3, 16]))
    k = tuple(draw(st.integers(1, 2)) for _ in range(3))
    stride, padding, dilation = (draw(st.integers(lo, 2)) for lo in (1, 0, 1))
    sizes = [_conv_out(n, kk, stride, padding, padding, dilation) for n, kk in zip(spatial, k)]
    if min(sizes) < 1:
        return None
    args = [x, _const(draw, (groups * per_group, c // groups) + k)]
    if draw(st.booleans()):
        args.append(_const(draw, (groups * per_group,)))
    return ["conv3d", args, {"stride": stride, "padding": padding, "dilation": dilation,
                             "groups": groups, "data_format": data_format(fmt, 5),
                             "activation": draw(st.sampled_from(FUSED))}]


def _draw_pool3d(draw, x, shape, fmt):
    spatial = shape[1:4] if fmt == "NHWC" else shape[2:]
    kind = draw(st.sampled_from(["max_pool3d", "avg_pool3d", "global_max_pool",
                                 "global_avg_pool"]))
    kw = {"data_format": data_format(fmt, 5)}
    if not kind.startswith("global"):
        k = draw(st.integers(1, 2))
        if min(spatial) < k:
            return None
        kw.update(kernel_size=k, stride=draw(st.sampled_from([None, 1, 2])),
                  padding=draw(st.integers(0, k // 2)))
        if kind == "avg_pool3d":
            kw["count_include_pad"] = draw(st.booleans())
    return [kind, [x], kw]


def _draw_pool(draw, x, shape, fmt):
    if len(shape) != 4:
        return None
    kind = draw(st.sampled_from(["max_pool2d", "avg_pool2d", "global_max_pool",
                                 "global_avg_pool"]))
    if kind.startswith("global"):
        return [kind, [x], {"data_format": fmt}]
    h, w = (shape[1], shape[2]) if fmt == "NHWC" else (shape[2], shape[3])
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.sampled_from([None, 1, 2, (1, 2), (3, 1)]))
    s = k if stride is None else _pair(stride)
    p = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    if (h + 2 * p[0] - k[0]) < 0 or (w + 2 * p[1] - k[1]) < 0:
        return None
    kw = {"kernel_size": k if k[0] != k[1] else k[0], "stride": stride,
          "padding": p, "ceil_mode": draw(st.booleans()), "data_format": fmt}
    if kind == "avg_pool2d":
        kw["count_include_pad"] = draw(st.booleans())
    del s
    return [kind, [x], kw]


def _broadcast_partner(draw, shape):
    """A constant's shape that broadcasts with `shape` (numpy's rules):
    a suffix of it with some dims 1, sometimes with a leading dim more."""
    keep = draw(st.integers(0, len(shape)))
    part = [1 if draw(st.integers(0, 2)) == 0 else d for d in shape[len(shape) - keep:]]
    if len(shape) < MAX_RANK and draw(st.integers(0, 5)) == 0:
        part = [draw(st.integers(1, 3))] + [d for d in shape]
    return tuple(part) or (1,)


def _draw_binary(draw, x, shape, values):
    method = draw(st.sampled_from(BINARY))
    if method == "div":
        return [method, [x, _const(draw, _broadcast_partner(draw, shape), "positive")], {}]
    how = draw(st.sampled_from(["constant", "constant", "value", "self"]))
    if how == "self":
        return [method, [x, x], {}]
    if how == "value":
        partners = [i for i, (v, _) in enumerate(values) if _broadcasts(v.shape, shape)
                    and len(np.broadcast_shapes(v.shape, shape)) <= MAX_RANK]
        other = ("v", draw(st.sampled_from(partners)))
    else:
        other = _const(draw, _broadcast_partner(draw, shape))
    return [method, [other, x] if draw(st.booleans()) else [x, other], {}]


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _draw_matmul(draw, x, shape):
    if len(shape) < 2:
        return None
    kw = {}
    if draw(st.booleans()):
        kw["transpose_a"] = True
    m, k = (shape[-1], shape[-2]) if kw.get("transpose_a") else (shape[-2], shape[-1])
    how = draw(st.sampled_from(["constant", "constant", "self"]))
    if how == "self":  # x times its own transpose: the same value read twice
        if kw.get("transpose_a"):
            other, n = x, shape[-1]
        else:
            other, n = x, shape[-2]
            kw["transpose_b"] = True
    else:
        n = draw(CHANNELS)
        batch = tuple(1 if draw(st.booleans()) else d for d in shape[:-2])
        batch = batch[len(batch) - draw(st.integers(0, len(batch))):]
        if draw(st.booleans()):
            kw["transpose_b"] = True
            other = _const(draw, batch + (n, k))
        else:
            other = _const(draw, batch + (k, n))
    kw["scale"] = draw(st.sampled_from([1.0, 1.0, 0.5, -2.0]))
    kw["activation"] = draw(st.sampled_from(FUSED))
    args = [x, other]
    if draw(st.booleans()):
        args.append(_const(draw, (n,)))
    del m
    return ["matmul", args, kw]


def _draw_reshape(draw, x, shape):
    dims = list(shape)
    for _ in range(draw(st.integers(1, 2))):
        move = draw(st.sampled_from(["merge", "split", "insert", "drop"]))
        if move == "merge" and len(dims) > 1:
            i = draw(st.integers(0, len(dims) - 2))
            dims[i:i + 2] = [dims[i] * dims[i + 1]]
        elif move == "split":
            i = draw(st.integers(0, len(dims) - 1))
            factors = [f for f in range(2, dims[i]) if dims[i] % f == 0]
            if factors and len(dims) < MAX_RANK:
                f = draw(st.sampled_from(factors))
                dims[i:i + 1] = [f, dims[i] // f]
        elif move == "insert" and len(dims) < MAX_RANK:
            dims.insert(draw(st.integers(0, len(dims))), 1)
        elif move == "drop" and 1 in dims and len(dims) > 1:
            dims.remove(1)
    if draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return ["reshape", [x], {"shape": tuple(dims)}]


def label(method, args, labels, values):
    """The layout label of a node's 4-D result ("NCHW" / "NHWC"), as the
    library gives it: operators with a data_format, element-wise ones,
    softmax, layer_norm and concat keep their (first) input's; a binary
    op takes the label of its first 4-D / 5-D operand of the result's
    shape, else its first operand's (channels-first unless that is a 4-D /
    5-D value: mul(c[16], x_nhwc) is NCHW, mul(x_nhwc, c[16]) NHWC); reshape, transpose, matmul, linear give a
    plain (channels-first) result."""
    def of(a, shape=None):
        if isinstance(a, tuple) and a[0] == "v":
            own = values[a[1]][0].shape
            return labels[a[1]] if len(own) in (4, 5) and shape in (None, own) else None
        if isinstance(a, tuple) and a[0] == "c":
            return "NCHW" if len(a[2]) in (4, 5) and shape in (None, a[2]) else None
        return None
    if method in ("reshape", "flatten", "transpose", "matmul", "linear"):
        return "NCHW"
    if method in BINARY:
        shapes = [values[a[1]][0].shape if a[0] == "v" else a[2] for a in args]
        out = np.broadcast_shapes(*shapes)
        return of(args[0], out) or of(args[1], out) or of(args[0]) or "NCHW"
    first = args[0][0] if method == "concat" else args[0]
    return of(first) or "NCHW"


def _node(draw, values, labels):
    """One node (or a few: sqrt and log first make their input positive)
    reading some of `values` [(exact, bound)] labelled `labels`; None when
    the drawn operator does not apply."""
    # Mostly the latest values (long chains), sometimes any (wide DAGs).
    last = len(values) - 1
    # The one before the latest too: after a view made twice, the other
    # view of the same bytes.
    pick = draw(st.integers(0, 3))
    i = last if pick < 2 else max(last - 1, 0) if pick == 2 else draw(st.integers(0, last))
    x, shape = ("v", i), values[i][0].shape
    rank = len(shape)
    fmt = labels[i] if rank in (4, 5) else "NCHW"  # what data_format must say
    op = draw(st.sampled_from(["activation", "activation", "binary", "binary", "conv2d",
                               "conv2d", "conv2d_transpose", "pool", "pool", "linear", "matmul",
                               "softmax", "layer_norm", "batch_norm", "lrn", "concat",
                               "transpose", "reshape", "flatten"]))
    if op == "activation":
        kind = draw(st.sampled_from(sorted(ACTIVATIONS) + ["gelu_tanh"]))
        if kind == "gelu_tanh":  # a method of its own only as a fused activation
            return [["gelu", [x], {"approximate": "tanh"}]]
        if kind in ("sqrt", "log") and values[i][0].min() < 0.05:
            return [["abs", [x], {}], ["add", [("v", last + 1), _const(draw, (1,), "positive")],
                                       {}], [kind, [("v", last + 2)], ACTIVATIONS[kind]]]
        return [[kind, [x], ACTIVATIONS[kind]]]
    if op == "binary":
        return [_draw_binary(draw, x, shape, values)]
    if op in ("conv2d", "conv2d_transpose"):
        node = _draw_conv3d(draw, x, shape, fmt) if rank == 5 else _draw_conv(
            draw, x, shape, fmt, op == "conv2d_transpose")
    elif op == "pool":
        node = _draw_pool3d(draw, x, shape, fmt) if rank == 5 else _draw_pool(
            draw, x, shape, fmt)
    elif op == "linear":
        out = draw(CHANNELS)
        args = [x, _const(draw, (out, shape[-1]))]
        if draw(st.booleans()):
            args.append(_const(draw, (out,)))
        node = ["linear", args, {"activation": draw(st.sampled_from(FUSED))}] \
            if rank >= 2 else None
    elif op == "matmul":
        node = _draw_matmul(draw, x, shape)
    elif op == "softmax":
        node = [draw(st.sampled_from(["softmax", "log_softmax"])), [x],
                {"axis": draw(st.integers(-rank, rank - 1))}]
    elif op == "layer_norm":
        begin = draw(st.integers(max(1, rank - 3), rank - 1)) if rank > 1 else 0
        norm = shape[begin:]
        args = [x]
        if draw(st.booleans()):
            args += [_const(draw, norm), _const(draw, norm)]
        node = ["layer_norm", args, {"begin_norm_axis": begin - rank if draw(st.booleans())
                                     else begin, "epsilon": draw(st.sampled_from([1e-5, 1e-3]))}]
    elif op == "batch_norm":
        c = shape[_channel_axis(rank, fmt)] if rank >= 2 else None
        node = None if c is None else ["batch_norm", [
            x, _const(draw, (c,)), _const(draw, (c,), "variance"), _const(draw, (c,)),
            _const(draw, (c,))], {"epsilon": 1e-3, "data_format": data_format(fmt, rank)}]
    elif op == "lrn":
        node = None if rank != 4 else ["lrn", [x], {
            "size": draw(st.integers(1, 5)), "alpha": 0.5, "beta": 0.75,
            "k": draw(st.sampled_from([1.0, 2.0])),
            "data_format": fmt}]
    elif op == "concat":
        axis = draw(st.integers(-rank, rank - 1))
        items = [x]
        for _ in range(draw(st.integers(1, 2))):
            how = draw(st.sampled_from(["self", "constant", "value"]))
            # The items of a concat share a label (a 4-D constant's is NCHW).
            alike = [j for j, (v, _) in enumerate(values) if len(v.shape) == rank and all(
                a == b for d, (a, b) in enumerate(zip(v.shape, shape)) if d != axis % rank)
                and (rank not in (4, 5) or labels[j] == fmt)]
            if how == "value" and alike:
                items.append(("v", draw(st.sampled_from(alike))))
            elif how == "constant" and fmt == "NCHW":
                other = list(shape)
                other[axis] = draw(st.integers(1, 3))
                items.append(_const(draw, other))
            else:
                items.append(x)
        node = ["concat", [items], {"axis": axis}]
    elif op == "transpose":
        node = ["transpose", [x], {"axes": tuple(draw(st.permutations(range(rank))))}]
    elif op == "reshape":
        node = _draw_reshape(draw, x, shape)
    else:
        node = ["flatten", [x], {"start_dim": draw(st.integers(0, rank - 1))}] \
            if rank > 1 else None
    return None if node is None else [node]


def _batch_free(node, values):
    """`node` made valid for any size of dim 0 (the batch every value
    keeps there), or None when it cannot be: no constant may span dim 0,
    no transpose or reshape may move it, no concat may extend it."""
    method, args, kw = node
    x = values[args[0][1]][0] if args and isinstance(args[0], tuple) and args[0][0] == "v" \
        else None

    def spans_batch(a, rank):
        if isinstance(a, tuple) and a[0] == "c":
            return len(a[2]) > rank or (len(a[2]) == rank and a[2][0] != 1)
        if isinstance(a, tuple) and a[0] == "v":
            return values[a[1]][0].ndim != rank
        return False

    if method == "transpose":
        return node if kw["axes"][0] == 0 else None
    if method == "reshape":
        dims = kw["shape"]
        if dims[0] != x.shape[0] or dims[0] == -1:
            return None
        return (method, args, dict(kw, shape=(0,) + tuple(dims[1:])))
    if method == "flatten":
        return node if kw["start_dim"] >= 1 else None
    if method == "concat":
        items = args[0]
        x = values[items[0][1]][0]
        if kw["axis"] % x.ndim == 0 or any(spans_batch(a, x.ndim) or a[0] == "c"
                                           for a in items):
            return None
        return node
    if method in BINARY:
        ranks = [values[a[1]][0].ndim for a in args if isinstance(a, tuple) and a[0] == "v"]
        return None if any(spans_batch(a, max(ranks)) for a in args) else node
    if method == "matmul":
        other = args[1]
        if x.ndim < 3 and (kw.get("transpose_a") or other[0] == "v"):
            return None
        if other[0] == "c" and len(other[2]) > 2:
            return None
        return node
    return node


@st.composite
def specs(draw, max_nodes=8, min_outputs=1, batch_free=False):
    """A random program graph with its inputs' data (a Spec). batch_free:
    every input's dim 0 is one dynamic batch, and the graph is valid for
    any size of it (see _batch_free)."""
    spec = Spec(seed=draw(SEEDS))
    batch = draw(st.integers(1, 3))
    for i in range(draw(st.integers(1, 2))):
        rank = draw(st.sampled_from([2, 3, 4, 4, 4, 5]))
        first = batch if batch_free else draw(st.integers(1, 3))
        shape = (first,) + tuple(draw(DIMS) for _ in range(rank - 1))
        if rank == 4 and draw(st.booleans()):  # room for 3x3 windows
            shape = shape[:2] + tuple(d + 3 for d in shape[2:])
        layout = data_format(draw(st.sampled_from(["NHWC", "NCHW"])) if rank >= 4 else "NCHW",
                             rank)
        spec.inputs.append((f"x{i}", shape, layout,
                            batch_free or draw(st.integers(0, 3)) == 0))
    values = spec.reference(spec.input_arrays())
    # Labels as "NCHW" (channels-first) / "NHWC" (channels-last), any rank.
    labels = [{"NCDHW": "NCHW", "NDHWC": "NHWC"}.get(layout, layout)
              for _, _, layout, _ in spec.inputs]
    for _ in range(draw(st.integers(1, max_nodes))):
        for _attempt in range(5):
            nodes = _node(draw, values, labels)
            if nodes is None:
                continue
            made = []
            try:
                with np.errstate(all="ignore"):  # overflow etc.: not usable(), below
                    for method, args, kw in nodes:
                        args = [spec._arg(a, values + made) for a in args]
                        made.append(evaluate(method, args, _resolved(method, args, kw)))
            except ValueError:  # e.g. a concat of a constant whose other dims do not fit
                continue
            if batch_free:
                nodes = [_batch_free(n, values + made[:k]) for k, n in enumerate(nodes)]
                if None in nodes:
                    continue
            if all(usable(v) for v in made):
                for (method, args, kw), v in zip(nodes, made):
                    # A view made twice of the same value: two views of
                    # one set of bytes, each read or given out separately.
                    twice = method in ("reshape", "flatten", "transpose") and draw(
                        st.integers(0, 2)) == 0
                    for _ in range(2 if twice else 1):
                        labels.append(label(method, args, labels, values))
                        spec.nodes.append((method, args, kw))
                        values.append(v)
                break
    first = len(spec.inputs)
    if not spec.nodes:
        spec.nodes.append(("relu", [("v", 0)], {}))
        values.append(evaluate("relu", [values[0]], {}))
    last = len(values) - 1
    chosen = [last] + [j for j in range(first, last) if draw(st.integers(0, 2)) == 0]
    if draw(st.integers(0, 7)) == 0:
        chosen.append(draw(st.integers(0, first - 1)))   # an input given back as it is
    if draw(st.integers(0, 5)) == 0:
        chosen.append(draw(st.sampled_from(chosen)))     # one value under two names
    while len(chosen) < min_outputs:
        chosen.append(draw(st.integers(first, last)))
    spec.outputs = [(f"y{k}", j) for k, j in enumerate(chosen)]
    return spec
