"""Shape values known at load time up to dims bound at run time.

Exporters compute the shapes they reshape and expand to: Shape of a value,
then Gather, Slice, Unsqueeze, Concat, arithmetic, Equal and Where on the
result. Where every dim is static that is plain numpy at load time. Where a
dim is bound at run time (a batch, a sequence), the Shape is a vector whose
entries are ints or `Dim`s - a dim named by ONNX's shape inference (its
dim_param: two values with the same one have the same dim) or, unnamed, by
(value, axis) - and the same shape arithmetic runs on numpy object arrays of
them. The consumers (Reshape, Expand, ConstantOfShape, Slice) then say what
the library takes: a 0 where the entry is the input's own dim at that index,
-1 for the one dim left to infer, a broadcast against a value that has the
dim. A value whose entries would be needed as data at run time is refused:
no operator computes a shape in a program.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

from ._base import Refusal


def _terms(x) -> dict:
    if isinstance(x, Dim):
        return x.terms
    if isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, bool):
        return {(): int(x)} if int(x) else {}
    raise Refusal(f"shape arithmetic on {x!r} with a dim bound at run time")


def _normal(terms: dict):
    """An int where no symbol is left, else a Dim."""
    terms = {k: c for k, c in terms.items() if c}
    if not terms:
        return 0
    if list(terms) == [()]:
        return terms[()]
    return Dim(terms)


class Dim:
    """A dim bound at run time, or an integer polynomial of such dims
    (B * S, S - 1): {sorted tuple of symbols: coefficient}. Every dim is at
    least 1 (programs refuse empty dims), which decides comparisons like
    Equal(dim, -1)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict):
        self.terms = dict(terms)
        self._hash = hash(frozenset(self.terms.items()))

    @staticmethod
    def named(symbol, label: str) -> "Dim":
        return Dim({((symbol, label),): 1})

    def __hash__(self):
        return self._hash

    def __eq__(self, other):  # the same polynomial (not ONNX's Equal: see compare)
        return isinstance(other, Dim) and other.terms == self.terms

    def __repr__(self):
        parts = []
        for mono, c in sorted(self.terms.items(), key=lambda kv: (len(kv[0]), str(kv[0]))):
            names = "*".join(label for _, label in mono)
            parts.append(str(c) if not mono else names if c == 1 else f"{c}*{names}")
        return " + ".join(parts).replace("+ -", "- ")

    def __add__(self, other):
        out = dict(self.terms)
        for k, c in _terms(other).items():
            out[k] = out.get(k, 0) + c
        return _normal(out)

    __radd__ = __add__

    def __neg__(self):
        return _normal({k: -c for k, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-_normal(_terms(other)))

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        out = {}
        for k1, c1 in self.terms.items():
            for k2, c2 in _terms(other).items():
                k = tuple(sorted(k1 + k2))
                out[k] = out.get(k, 0) + c1 * c2
        return _normal(out)

    __rmul__ = __mul__

    def lower_bound(self):
        """The least value over dims >= 1, or None when a negative term
        leaves it unbounded below."""
        if any(c < 0 for k, c in self.terms.items() if k):
            return None
        return sum(self.terms.values())

    def upper_bound(self):
        if any(c > 0 for k, c in self.terms.items() if k):
            return None
        return sum(self.terms.values())


def is_dim(x) -> bool:
    return isinstance(x, Dim)


def sign(d):
    """-1, 0 or 1: the sign of an int or Dim for every run, or None when it
    depends on the dims bound at run time."""
    if not isinstance(d, Dim):
        return (d > 0) - (d < 0)
    low, high = d.lower_bound(), d.upper_bound()
    if low is not None and low > 0:
        return 1
    if high is not None and high < 0:
        return -1
    return None


def divide(a, b):
    """ONNX's integer Div (toward zero) where a or b is a Dim: exact
    divisions only."""
    if isinstance(b, Dim):
        if a == b:
            return 1
        raise Refusal(f"dividing {a!r} by the dim bound at run time {b!r}")
    b = int(b)
    if b == 0:
        raise Refusal("a division by zero in shape arithmetic")
    if isinstance(a, Dim):
        if all(c % b == 0 for c in a.terms.values()):
            return _normal({k: c // b for k, c in a.terms.items()})
        raise Refusal(f"{a!r} / {b} is not exact for every run")
    q = abs(int(a)) // abs(b)
    return q if (int(a) >= 0) == (b > 0) else -q


# ONNX's integer arithmetic on entries of shapes.
ARITHMETIC = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": divide}

_ORDER = {"Equal": lambda s: s == 0, "Less": lambda s: s < 0, "LessOrEqual": lambda s: s <= 0,
          "Greater": lambda s: s > 0, "GreaterOrEqual": lambda s: s >= 0}


def compare(op_type: str, a, b) -> bool:
    """ONNX's comparison of two entries, at least one a Dim, for every run."""
    s = sign(a - b)
    if s is None:
        raise Refusal(f"{op_type} of {a!r} and {b!r} depends on the dims bound at run time")
    return _ORDER[op_type](s)


class Symbolic:
    """A value known at load time up to dims bound at run time: a numpy
    object array of ints and Dims, and the numpy dtype it stands for."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype):
        self.array = array
        self.dtype = np.dtype(dtype)

    def __repr__(self):
        return repr(self.array.tolist())


def objects(a) -> np.ndarray:
    """An array (numeric or of Dims) as an object array of Python ints and
    Dims."""
    if isinstance(a, Symbolic):
        return a.array
    a = np.asarray(a)
    if a.dtype == object:
        return a
    if np.issubdtype(a.dtype, np.floating):
        if not np.all(np.equal(np.mod(a, 1), 0)):
            raise Refusal("shape arithmetic mixing fractions with a dim bound at run time")
    out = np.empty(a.shape, dtype=object)
    out.reshape(-1)[:] = [int(v) for v in a.reshape(-1)] if a.size else []
    return out


def result(array, dtype):
    """A converter's output: a numpy array of `dtype` where no Dim is left,
    else a Symbolic."""
    array = np.asarray(array, dtype=object) if not isinstance(array, np.ndarray) else array
    if array.dtype != object:
        return array.astype(dtype)
    flat = array.reshape(-1)
    if any(isinstance(v, Dim) for v in flat):
        return Symbolic(array, dtype)
    return np.array(flat.tolist(), dtype=dtype).reshape(array.shape)


def elementwise(fn, *arrays) -> np.ndarray:
    """fn applied entry by entry with numpy broadcasting, on object arrays."""
    return np.asarray(np.frompyfunc(fn, len(arrays), 1)(*arrays), dtype=object)


# ------------------------------------------------------- what converters use

def inputs(ctx, node) -> list | None:
    """The node's inputs when every one is known at load time and at least
    one holds dims bound at run time (as object arrays; numeric ones as
    they are), else None."""
    names = [n for n in node.input if n]
    if not any(n in ctx.symbolic for n in names) or \
            not all(n in ctx.known or n in ctx.symbolic for n in names):
        return None
    return [None if not n else ctx.symbolic[n].array if n in ctx.symbolic else ctx.known[n]
            for n in node.input]


def dtype_of(ctx, name: str):
    """The numpy dtype of `name`, or None where it is not known."""
    from ._base import KNOWN_TYPES  # noqa: PLC0415
    if name in ctx.symbolic:
        return ctx.symbolic[name].dtype
    if name in ctx.known:
        return ctx.known[name].dtype
    t = ctx.types.get(name)
    return np.dtype(KNOWN_TYPES[t]) if t in KNOWN_TYPES else None


def entries(ctx, name: str) -> list:
    """The entries of a shape vector (ints and Dims)."""
    if name in ctx.symbolic:
        return list(ctx.symbolic[name].array.reshape(-1))
    return [int(v) for v in np.asarray(ctx.constant(name, "the shape")).reshape(-1)]


def reshape_target(ctx, name: str, new: list, allowzero: bool) -> tuple:
    """The library's reshape dims taking `name` to `new` (ints and Dims)."""
    return reshape_dims(ctx.dims(name), new, allowzero)


def reshape_dims(src: list, new: list, allowzero: bool = False) -> tuple:
    """The library's reshape dims from `src` to `new` (ints and Dims): a
    Dim that is the input's own dim at its index is 0 (copied); one other
    dim may be left to infer (-1)."""
    if -1 in new and sum(is_dim(e) for e in new) and any(
            is_dim(e) and not (i < len(src) and src[i] == e) for i, e in enumerate(new)):
        # Two dims to infer: the -1 is the input's size over the others',
        # where that is a product of dims for every run ([N*T, -1] of
        # [N, T, 6] is [N*T, 6]).
        known = 1
        for e in new:
            known = e * known if e != -1 else known
        size = 1
        for d in src:
            size = d * size
        quotient = _monomial_quotient(size, known)
        if quotient is not None:
            new = [quotient if not is_dim(e) and e == -1 else e for e in new]
    target, free = [], 0
    for i, e in enumerate(new):
        if is_dim(e):
            if i < len(src) and src[i] == e:
                target.append(0)
                continue
            target.append(-1)
            free += 1
            continue
        if e == 0 and allowzero:
            raise Refusal("allowzero with a 0 in the shape is not supported")
        free += e == -1
        target.append(int(e))
    if free > 1:
        raise Refusal(f"the new shape {list(new)} leaves more than one dim to infer at run time "
                      f"(the input's dims are {list(src)})")
    return tuple(target)


def reshaped(src: list, new: list):
    """The dims a reshape to `new` (ONNX's 0 and -1 allowed) gives `src`,
    or None where the -1 is not a product of dims for every run."""
    out = [src[i] if not is_dim(e) and e == 0 and i < len(src) else e
           for i, e in enumerate(new)]
    if -1 not in [e for e in out if not is_dim(e)]:
        return out
    known, size = 1, 1
    for e in out:
        known = e * known if is_dim(e) or e != -1 else known
    for d in src:
        size = d * size
    quotient = _monomial_quotient(size, known)
    if quotient is None:
        return None
    return [quotient if not is_dim(e) and e == -1 else e for e in out]


def _monomial_quotient(a, b):
    """a / b where both are products of dims times an int and the division
    is exact, else None."""
    ta, tb = _terms(a), _terms(b)
    if len(ta) != 1 or len(tb) != 1:
        return None
    (ka, ca), (kb, cb) = next(iter(ta.items())), next(iter(tb.items()))
    rest = list(ka)
    for symbol in kb:
        if symbol not in rest:
            return None
        rest.remove(symbol)
    if cb == 0 or ca % cb:
        return None
    return _normal({tuple(rest): ca // cb})


def squeeze(ctx, y, src: list, axes: list):
    """Graph value `y` of dims `src` without its unit axes `axes`: one
    reshape where its dims allow, else the axes moved last first (a
    transpose), so every kept dim is copied where it stands."""
    kept = [i for i in range(len(src)) if i not in axes]
    try:
        return ctx.graph.reshape(y, reshape_dims(src, [src[i] for i in kept]))
    except Refusal:
        pass
    y = ctx.graph.transpose(y, tuple(kept + sorted(axes)))
    return ctx.graph.reshape(y, (0,) * len(kept) or (1,))


def unsqueeze(ctx, y, src: list, at: list):
    """Graph value `y` of dims `src` with unit axes inserted at `at` (the
    output's axes): one reshape where its dims allow, else the 1s appended
    and moved in place (a transpose)."""
    out = list(src)
    for a in sorted(at):
        out.insert(a, 1)
    try:
        return ctx.graph.reshape(y, reshape_dims(src, out))
    except Refusal:
        pass
    r = len(src)
    y = ctx.graph.reshape(y, (0,) * r + (1,) * len(at))
    old, added = iter(range(r)), iter(range(r, len(out)))
    return ctx.graph.transpose(y, tuple(next(added) if p in at else next(old)
                                        for p in range(len(out))))


def slice_bound(bound, dim):
    """A slice start or end given as a Dim, on an axis of `dim`: the
    library's fixed bound that means the same for every run (the dim itself
    or past it: clamped to the end; the dim less k: -k)."""
    if not is_dim(bound):
        return int(bound)
    past = bound - dim
    if is_dim(past):
        raise Refusal(f"a slice bound of {bound!r} on a dim of {dim!r}: the library's slice "
                      "bounds are fixed when the program is built")
    return 1 << 62 if past >= 0 else past


def broadcast(ctx, x, target: list):
    """The graph value of `x` (a value's name, or a known array) broadcast
    with `target` (ints and Dims), as ONNX's Expand. A Dim the input has at
    that place is kept by the library's expand (a 1 there); one the input
    lacks comes from a value that has it, as ones multiplied in."""
    if isinstance(x, str):
        xdims, dtype = ctx.dims(x), dtype_of(ctx, x)
    else:
        x = np.asarray(x)
        xdims, dtype = tuple(x.shape), x.dtype
    n = max(len(xdims), len(target))
    xd = (1,) * (n - len(xdims)) + tuple(xdims)
    td = (1,) * (n - len(target)) + tuple(target)
    static, missing = [], []
    for i, (a, b) in enumerate(zip(xd, td)):
        if not is_dim(b):
            static.append(int(b))
            continue
        static.append(1)
        if a == b:
            continue
        if a != 1:
            raise Refusal(f"expanding a dim of {a!r} to {b!r}: whether they agree depends on "
                          "the run")
        missing.append((i, b))
    integer = dtype in (np.int32, np.int64)
    if missing and dtype not in (np.float32, np.float64, np.bool_) and not integer:
        raise Refusal(f"broadcasting a {dtype} value to a dim bound at run time")
    if isinstance(x, str):
        y = ctx.value(x)
    else:
        x = x.reshape((1,) * (n - x.ndim) + x.shape)
        xdims = x.shape
        y = ctx.graph.constant(np.ascontiguousarray(
            x.astype(np.float32) if x.dtype == np.float64 else x))
    if len(static) > len(xdims) or any(s != 1 for s in static):
        y = ctx.graph.expand(y, tuple(static))
    if not missing:
        return y
    ones = None
    for i, d in missing:
        r = _ones_along(ctx, d, i, n)
        ones = r if ones is None else ctx.graph.mul(ones, r)
    if integer:  # the ones in the integers' own arithmetic
        return ctx.graph.integer_binary(y, ctx.graph.cast(ones, np.dtype(dtype)), kind="mul")
    is_float = dtype in (np.float32, np.float64)
    if not is_float:  # bool: through float32
        y = ctx.graph.cast(y, np.float32)
    y = ctx.graph.mul(y, ones)
    if not is_float:
        y = ctx.graph.cast(y, np.dtype(dtype))
    return y


def _ones_along(ctx, d, at: int, rank: int):
    """Float32 ones of `rank` dims, all 1 but `d` at `at`: a slice of a
    value that has the dim, its values made ones."""
    key = (d, at, rank)
    if key in ctx.rulers:
        return ctx.rulers[key]
    donor = ctx.donors.get(d)
    if donor is None:
        raise Refusal(f"no value of the graph has the dim {d!r} to broadcast to")
    name, axis = donor
    v = ctx.values[name]
    others = [a for a in range(len(ctx.shape(name))) if a != axis]
    if others:
        k = len(others)
        v = ctx.graph.slice(v, [0] * k, [1] * k, others, [1] * k)
    v = ctx.graph.reshape(v, tuple(-1 if k == at else 1 for k in range(rank)))
    ones = ctx.rulers[key] = ctx.graph.where(ctx.graph.cast(v, np.bool_), 1.0, 1.0)
    return ones


# ------------------------------------------------- shapes read as data

def dim_and_offset(e):
    """(d, c) where `e` is one dim bound at run time plus a constant, d + c;
    else (None, None)."""
    if not is_dim(e):
        return None, None
    monos = [k for k in e.terms if k]
    if len(monos) != 1 or len(monos[0]) != 1 or e.terms[monos[0]] != 1:
        return None, None
    return Dim({monos[0]: 1}), e.terms.get((), 0)


def donor(ctx, d):
    """(a graph value's name, its axis) that has the dim `d`."""
    found = ctx.donors.get(d)
    if found is None:
        raise Refusal(f"no value of the graph has the dim {d!r} to read it at run time")
    return found


def _symbol_value(ctx, d):
    """A graph value [1] (int64) holding the dim `d` (one symbol) at run
    time: the last of 1, 2, ..., d, a range as long as a value that has it."""
    name, axis = donor(ctx, d)
    seq = ctx.graph.arange(ctx.values[name], axis=axis, start=1, limit_offset=1,
                           dtype=np.int64)
    return ctx.graph.slice(seq, [-1], [1 << 62], [0], [1])


def dim_value(ctx, d):
    """A graph value [1] (int64) holding the int or Dim `d` at run time."""
    g = ctx.graph
    if not is_dim(d):
        return g.constant(np.array([int(d)], np.int64))
    key = ("value", d)
    if key in ctx.rulers:
        return ctx.rulers[key]
    total = None
    for mono, c in sorted(d.terms.items(), key=lambda kv: (len(kv[0]), str(kv[0]))):
        piece = None
        for symbol in mono:
            s = _symbol_value(ctx, Dim({(symbol,): 1}))
            piece = s if piece is None else g.integer_binary(piece, s, kind="mul")
        if piece is None:
            piece = g.constant(np.array([c], np.int64))
        elif c != 1:
            piece = g.integer_binary(piece, np.array([c], np.int64), kind="mul")
        total = piece if total is None else g.integer_binary(total, piece, kind="add")
    ctx.rulers[key] = total
    return total


def materialize(ctx, sym: Symbolic):
    """The graph value of a shape value holding dims bound at run time (a
    shape read as data: an index, a bound compared with): its int entries
    a constant, each dim's value added in at its place."""
    g = ctx.graph
    if sym.dtype not in (np.int64, np.int32, np.float32, np.bool_):
        raise Refusal(f"a shape of {sym.dtype} read as data")
    flat = list(sym.array.reshape(-1))
    n = len(flat)
    ints = np.array([0 if is_dim(v) else int(v) for v in flat], np.int64)
    total = g.constant(ints)
    for i, v in enumerate(flat):
        if is_dim(v):
            piece = dim_value(ctx, v)
            if n > 1:
                piece = g.pad(piece, [i, n - 1 - i])
            total = g.integer_binary(total, piece, kind="add")
    if sym.dtype != np.int64:
        total = g.cast(total, sym.dtype)
    if sym.array.ndim > 1:
        total = g.reshape(total, tuple(sym.array.shape))
    return total
