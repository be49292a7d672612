"""Property-based tests (hypothesis): valid calls against float64 numpy
references, bad calls must raise mkcache.Error.

Valid calls: odd shapes, channels that are not multiples of 16, batch > 1,
stride / padding (every form) / dilation / groups, NCHW and NHWC, inputs and
outputs as numpy arrays (also read-only ones), wrapped Tensors, library-owned
Tensors in oneDNN's blocked layouts (conv outputs, to_layout(x, "nChw8c")),
``out=`` (also aliasing an input, in every position), NaN and infinities in
element-wise ops, binary ops and pooling (numpy's semantics: NaN propagates),
and cache names reused by calls with other arguments. Tolerances are those of
the other tests (benchdnn-style, see reference.py).

Bad calls (wrong shapes, negative / zero / huge / wrapping ints, floats or
strings where ints belong, axes out of range, names with NUL bytes or lone
surrogates, wrong dtypes and ranks, read-only outputs, non-arrays) must raise
mkcache.Error and nothing else, leave the arrays they may not write as they
were, and leave the library working (a few valid calls are checked after
each one). Calls that might crash the process (huge geometry) run in a worker
process.

Budgets (see fuzz_strategies.py):

    python -m pytest tests/python/test_fuzz.py                    # CI: ~1 minute
    MKCACHE_FUZZ_PROFILE=long python -m pytest tests/python/test_fuzz.py   # 20x, shrinking
    MKCACHE_FUZZ_SCALE=5 ...       # any multiple of the CI budget (ASan: 0.5 by default)
    MKCACHE_FUZZ_EXAMPLES=500 ...  # the same number of examples for every test
    MKCACHE_FUZZ_RANDOM=1 ...      # a fresh random seed (CI is derandomized)
    MKCACHE_FUZZ_SHRINK=1 ...      # shrink failures to minimal examples

The example database is off (nothing is written into the repository).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import fuzz_strategies as fs
import mkcache
from fuzz_strategies import Case, assert_close_nan, assert_equal_nan, logical, operand
from reference import activation as ref_activation
from reference import assert_close, conv2d_nchw, conv_nd, conv_transpose2d
from reference import layer_norm as ref_layer_norm
from reference import pool as ref_pool
from reference import softmax as ref_softmax
from reference import EPS_F32

# ------------------------------------------------------------------ settings

# Hypothesis keeps caches (e.g. constants found in the source) in a
# .hypothesis directory of the working directory: keep them out of the
# repository unless a storage directory is chosen explicitly.
if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:  # pragma: no cover - older hypothesis
        pass
    else:
        set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(),
                                             f"mkcache-hypothesis-{os.getuid()}"))

_PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + ((Phase.shrink,) if fs.SHRINK else ())
# Budgets are set per test (examples()); CI runs must be fast and the same
# every time, whatever the machine: no deadline, no health check about slow
# or large data.
_SUPPRESS = [getattr(HealthCheck, name) for name in
             ("too_slow", "data_too_large", "filter_too_much", "large_base_example")
             if hasattr(HealthCheck, name)]
settings.register_profile(
    "mkcache-fuzz-ci", derandomize=True, database=None, deadline=None, print_blob=False,
    suppress_health_check=_SUPPRESS, phases=_PHASES)
settings.register_profile("mkcache-fuzz-long", settings.get_profile("mkcache-fuzz-ci"))
_BASE = settings.get_profile(f"mkcache-fuzz-{fs.PROFILE}")


def fuzz(ci: int, **kwargs):
    """Settings of a test whose CI budget is `ci` examples."""
    kwargs.setdefault("phases", _PHASES)
    return settings(_BASE, max_examples=fs.examples(ci), derandomize=not fs.RANDOM, **kwargs)


SEEDS = st.integers(0, 2 ** 32 - 1)
# A few names shared by every test: calls with other arguments reuse them.
NAMES = st.sampled_from([None, None, "fz", "fz2"])
ODD_CHANNELS = [1, 2, 3, 5, 7, 8, 16, 17, 19]


def _nchw(a):
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


def _nhwc(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def _unchanged(originals):
    """Inputs a call did not own must keep their values."""
    for what, value, before in originals:
        assert_equal_nan(logical(value), before, f"input {what} was modified")


def _shape_list(draw, rank, low=1, high=6, extra=()):
    sides = st.one_of(st.integers(low, high), st.sampled_from(extra)) if extra else \
        st.integers(low, high)
    return tuple(draw(sides) for _ in range(rank))


# ======================================================= valid: convolution

@st.composite
def conv2d_cases(draw, same_shape=False):
    """same_shape: the output has the input's shape (out= x is possible)."""
    if same_shape:
        groups = draw(st.sampled_from([1, 1, 2, 3]))
        cg = draw(st.sampled_from(ODD_CHANNELS))
        k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        dil = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
        pads = []
        for i in range(2):  # begin + end = extent - 1 keeps the size (stride 1)
            total = (k[i] - 1) * dil[i]
            begin = draw(st.integers(0, total))
            pads += [begin, total - begin]
        padding = draw(st.sampled_from([tuple(pads), "same"]))
        if padding == "same":
            pads = [*fs.same_padding(h, k[0], 1, dil[0]), *fs.same_padding(w, k[1], 1, dil[1])]
        return dict(n=draw(st.integers(1, 3)), c=cg * groups, o=cg * groups, cg=cg,
                    groups=groups, h=h, w=w, k=k, stride=(1, 1), dil=dil, pads=tuple(pads),
                    padding=padding)
    if draw(st.integers(0, 3)) == 0:  # depthwise
        groups = draw(st.sampled_from([2, 3, 8, 17, 19]))
        cg, og = 1, draw(st.integers(1, 2))
    else:
        groups = draw(st.sampled_from([1, 1, 1, 2, 3]))
        cg = draw(st.sampled_from(ODD_CHANNELS))
        og = draw(st.sampled_from([1, 2, 3, 4, 5, 9, 16, 19]))
    n = draw(st.integers(1, 3))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    ext = [(k[i] - 1) * dil[i] + 1 for i in range(2)]
    form = draw(st.sampled_from(["int", "pair", "quad", "same", "valid"]))
    if form == "int":
        p = draw(st.integers(0, 3))
        pads, padding = (p, p, p, p), p
    elif form == "pair":
        ph, pw = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        pads, padding = (ph, ph, pw, pw), draw(st.sampled_from([(ph, pw), [ph, pw]]))
    elif form == "quad":
        pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
        padding = pads
    else:
        pads, padding = None, draw(st.sampled_from([form, form.upper()]))
    spatial = []
    for i in range(2):
        low = 1 if form == "same" else max(1, ext[i] - (0 if pads is None else
                                                          pads[2 * i] + pads[2 * i + 1]))
        spatial.append(draw(st.integers(low, low + 9)))
    h, w = spatial
    if form == "same":
        (t, b), (l, r) = (fs.same_padding(h, k[0], stride[0], dil[0]),
                          fs.same_padding(w, k[1], stride[1], dil[1]))
        pads = (t, b, l, r)
    elif form == "valid":
        pads = (0, 0, 0, 0)
    return dict(n=n, c=cg * groups, o=og * groups, cg=cg, groups=groups, h=h, w=w, k=k,
                stride=stride, dil=dil, pads=pads, padding=padding)


def _int_pair(draw, pair):
    """An int pair as the caller may write it: int (when equal), tuple, list,
    numpy ints."""
    forms = ["tuple", "list", "numpy"] + (["int"] if pair[0] == pair[1] else [])
    form = draw(st.sampled_from(forms))
    if form == "int":
        return pair[0]
    if form == "numpy":
        return (np.int64(pair[0]), np.int32(pair[1]))
    return list(pair) if form == "list" else tuple(pair)


CONV_OUTS = ["none", "wrapped_same", "wrapped_other", "owned_NCHW", "owned_NHWC",
             "owned_nChw8c", "owned_nChw16c", "residual_numpy", "residual_tensor",
             "residual_blocked", "alias_x"]


@pytest.mark.parametrize("out_kind", CONV_OUTS)
@fuzz(12)
@given(fmt=st.sampled_from(["NCHW", "NHWC"]), seed=SEEDS, bias=st.booleans(),
       activation=st.sampled_from([None, "relu"]), name=NAMES, data=st.data())
def test_conv2d(out_kind, fmt, seed, bias, activation, name, data):
    """out_kind: no out=; out= a wrapped array in the data format or the other
    layout; out= a library-owned Tensor (plain or blocked, re-laid out as
    needed); residual= an array, a wrapped Tensor, a blocked Tensor; out= x
    itself (README: out= may share memory with any input)."""
    c_ = data.draw(conv2d_cases(same_shape=out_kind == "alias_x"), "case")
    x = fs.data(seed, c_["n"], c_["c"], c_["h"], c_["w"])
    wt = fs.data(seed + 1, c_["o"], c_["cg"], *c_["k"], scale=0.5)
    b = fs.data(seed + 2, c_["o"]) if bias else None
    exact, mag = conv2d_nchw(x, wt, b, c_["stride"], c_["pads"], c_["dil"], c_["groups"])
    reduction = c_["cg"] * c_["k"][0] * c_["k"][1]
    nhwc = fmt == "NHWC"
    x_kinds = ["numpy", "readonly", "tensor_nhwc", "owned_nhwc"] if nhwc else \
        fs.operand_kinds(4, nhwc=False)
    if out_kind == "alias_x":
        x_kinds = [k for k in x_kinds if k not in ("numpy", "readonly")]
    x_kind = data.draw(st.sampled_from(x_kinds), "x_kind")
    x_view = _nhwc(x) if nhwc else x
    xin = operand(x_view, x_kind)
    w_kind = data.draw(st.sampled_from(["numpy", "readonly", "tensor", "constant"]), "w_kind")
    win = mkcache.Tensor(wt.copy(), constant=True) if w_kind == "constant" else \
        operand(wt, w_kind)
    out_nchw_shape = exact.shape
    out_shape = (exact.shape[0],) + exact.shape[2:] + (exact.shape[1],) if nhwc else exact.shape
    out = residual = buf = None
    buf_layout = None
    if out_kind == "alias_x":
        assert isinstance(xin, mkcache.Tensor) and out_nchw_shape == x.shape
        out = xin
    if out_kind.startswith("residual"):
        r = fs.data(seed + 3, *out_nchw_shape)
        if out_kind == "residual_numpy":
            residual = _nhwc(r) if nhwc else r
        elif out_kind == "residual_tensor":
            residual = mkcache.Tensor(_nhwc(r) if nhwc else r, fmt)
        else:
            residual = mkcache.to_layout(r, "nChw16c" if not nhwc else "NHWC")
        exact = exact + r
        mag = mag + np.abs(r)
        reduction += 1
    elif out_kind in ("wrapped_same", "wrapped_other"):
        other = out_kind == "wrapped_other"
        buf_layout = ("NCHW" if nhwc else "NHWC") if other else fmt
        buf = np.full(out_nchw_shape if buf_layout == "NCHW" else
                      (out_nchw_shape[0],) + out_nchw_shape[2:] + (out_nchw_shape[1],),
                      np.nan, np.float32)
        out = mkcache.Tensor(buf, buf_layout)
    elif out_kind.startswith("owned_"):
        out = mkcache.to_layout(np.full(out_nchw_shape, np.nan, np.float32), out_kind[6:])
    want = np.maximum(exact, 0) if activation == "relu" else exact
    kwargs = dict(stride=_int_pair(data.draw, c_["stride"]), padding=c_["padding"],
                  dilation=_int_pair(data.draw, c_["dil"]), groups=c_["groups"],
                  data_format=fmt, activation=activation, name=name)
    note(f"x {x_kind} {x.shape} (NCHW), w {w_kind} {wt.shape}, out {out_kind}, {kwargs}")
    originals = [("weight", win, wt)] + ([] if out is xin else [("x", xin, x_view)])
    if residual is not None and not isinstance(residual, mkcache.Tensor):
        originals.append(("residual (an array is copied)", residual, residual.copy()))
    y = mkcache.conv2d(xin, win, b, out=out, residual=residual, **kwargs)
    if out is not None:
        assert y is out, "conv2d(out=t) must return t"
    elif isinstance(residual, mkcache.Tensor):
        assert y is residual, "a Tensor residual is updated in place and returned"
    else:
        assert y.layout == fmt and y.shape == out_shape, (y.layout, y.shape, out_shape)
    assert_close(y.numpy("NCHW"), want, mag, reduction, what=f"conv2d ({out_kind})")
    if buf is not None:
        got = _nchw(buf) if buf_layout == "NHWC" else buf
        assert_close(got, want, mag, reduction, what="the out= array itself")
    _unchanged(originals)


@st.composite
def conv3d_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2]))
    cg, og = draw(st.sampled_from([1, 2, 3, 5])), draw(st.sampled_from([1, 2, 3, 7]))
    k = tuple(draw(st.integers(1, 3)) for _ in range(3))
    s = tuple(draw(st.integers(1, 2)) for _ in range(3))
    d = tuple(draw(st.integers(1, 2)) for _ in range(3))
    pb = tuple(draw(st.integers(0, 2)) for _ in range(3))
    pe = tuple(draw(st.integers(0, 2)) for _ in range(3))
    spatial = tuple(draw(st.integers(max(1, (k[i] - 1) * d[i] + 1 - pb[i] - pe[i]),
                                     max(1, (k[i] - 1) * d[i] + 1 - pb[i] - pe[i]) + 4))
                    for i in range(3))
    return dict(n=draw(st.integers(1, 2)), cg=cg, og=og, groups=groups, k=k, s=s, d=d, pb=pb,
                pe=pe, spatial=spatial)


@fuzz(25)
@given(case=conv3d_cases(), fmt=st.sampled_from(["NCDHW", "NDHWC"]), seed=SEEDS,
       bias=st.booleans(), name=NAMES, data=st.data())
def test_conv3d(case, fmt, seed, bias, name, data):
    c_ = case
    g = c_["groups"]
    x = fs.data(seed, c_["n"], c_["cg"] * g, *c_["spatial"])
    wt = fs.data(seed + 1, c_["og"] * g, c_["cg"], *c_["k"], scale=0.5)
    b = fs.data(seed + 2, c_["og"] * g) if bias else None
    exact, mag = conv_nd(x, wt, b, c_["s"], c_["pb"], c_["pe"], c_["d"], g)
    last = fmt == "NDHWC"
    kind = data.draw(st.sampled_from(["numpy", "readonly", "tensor_nhwc", "owned_nhwc"] if last
                                     else ["numpy", "readonly", "tensor", "nCdhw8c",
                                           "nCdhw16c"]), "x_kind")
    xin = operand(_nhwc(x) if last else x, kind)
    pad = tuple(v for pair in zip(c_["pb"], c_["pe"]) for v in pair)
    note(f"x {kind} {x.shape}, w {wt.shape}, {c_}")
    y = mkcache.conv3d(xin, wt, b, stride=c_["s"], padding=pad, dilation=c_["d"], groups=g,
                       data_format=fmt, name=name)
    assert y.layout == fmt
    assert_close(y.numpy("NCDHW"), exact, mag, reduction=c_["cg"] * int(np.prod(c_["k"])))


@pytest.mark.parametrize("output_padding", ["within_end_padding", "past_end_padding",
                                            "past_end_padding_dilated"])
@fuzz(15)
@given(seed=SEEDS, fmt=st.sampled_from(["NCHW", "NHWC"]), bias=st.booleans(), name=NAMES,
       data=st.data())
def test_conv2d_transpose(output_padding, seed, fmt, bias, name, data):
    """PyTorch's conv_transpose2d: output_padding < stride or < dilation.
    past_end_padding: output_padding larger than the end padding in some dim,
    e.g. ConvTranspose2d(k=3, stride=2, padding=0, output_padding=1) (a
    negative end padding to oneDNN), no dilation; past_end_padding_dilated:
    the same with a dilation > 1 there (output_padding may then reach the
    stride)."""
    draw = data.draw
    g = draw(st.sampled_from([1, 1, 2, 3]), "groups")
    ci, co = g * draw(st.sampled_from([1, 2, 3, 5, 17])), g * draw(st.sampled_from([1, 2, 7]))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    pb = [draw(st.integers(0, 2)), draw(st.integers(0, 2))]
    pe = [draw(st.integers(0, 2)), draw(st.integers(0, 2))]
    if output_padding == "past_end_padding":
        d = (1, 1)
    op = [draw(st.integers(0, max(s[i], d[i]) - 1)) for i in range(2)]
    if output_padding == "within_end_padding":
        op = [min(op[i], pe[i]) for i in range(2)]
    else:
        i = draw(st.integers(0, 1))
        if output_padding == "past_end_padding":
            s = tuple(max(v, 2) if j == i else v for j, v in enumerate(s))
        else:
            d = tuple(draw(st.integers(2, 3)) if j == i else v for j, v in enumerate(d))
        op[i] = draw(st.integers(1, max(s[i], d[i]) - 1))
        pe[i] = draw(st.integers(0, op[i] - 1))
    for i, size in enumerate((h, w)):  # keep at least one output cell
        if (size - 1) * s[i] - pb[i] - pe[i] + d[i] * (k[i] - 1) + 1 + op[i] < 1:
            pb[i] = 0
            pe[i] = min(pe[i], op[i])  # now at least one cell
    x = fs.data(seed, draw(st.integers(1, 2)), ci, h, w)
    wt = fs.data(seed + 1, ci, co // g, *k, scale=0.5)
    b = fs.data(seed + 2, co) if bias else None
    exact, mag = conv_transpose2d(x, wt, b, s, tuple(pb), tuple(pe), tuple(op), d, g)
    nhwc = fmt == "NHWC"
    kind = draw(st.sampled_from(["numpy", "tensor_nhwc", "owned_nhwc"] if nhwc else
                                ["numpy", "readonly", "tensor", "nChw8c", "nChw16c"]), "x_kind")
    xin = operand(_nhwc(x) if nhwc else x, kind)
    note(f"x {kind} {x.shape} w {wt.shape} s {s} d {d} pads {pb} {pe} output_padding {op} g {g}")
    try:
        y = mkcache.conv2d_transpose(xin, wt, b, stride=s, padding=(pb[0], pe[0], pb[1], pe[1]),
                                     output_padding=tuple(op), dilation=d, groups=g,
                                     data_format=fmt, name=name)
    except mkcache.UnsupportedError as e:
        # A negative end padding with a dilation: oneDNN has no deconvolution
        # for some of these, and the library says so (the README's limitation).
        assert output_padding == "past_end_padding_dilated", e
        assert "output_padding larger than the end padding" in str(e), e
        return
    assert_close(y.numpy("NCHW"), exact, mag, reduction=(ci // g) * k[0] * k[1])


# ============================================================ valid: pooling

POOL_KINDS = ["max", "avg_include", "avg_exclude"]


@st.composite
def pool_cases(draw, kind=None, same_shape=False):
    kind = kind or draw(st.sampled_from(POOL_KINDS))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = None if draw(st.booleans()) else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pb = tuple(draw(st.integers(0, k[i] - 1)) for i in range(2))
    pe = tuple(draw(st.integers(0, k[i] - 1)) for i in range(2))
    if same_shape:  # stride 1, begin + end = kernel - 1: the output has x's shape
        stride = (1, 1)
        pe = tuple(k[i] - 1 - pb[i] for i in range(2))
    spatial = tuple(draw(st.integers(max(1, k[i] - pb[i] - pe[i]),
                                     max(1, k[i] - pb[i] - pe[i]) + 9)) for i in range(2))
    return dict(kind=kind, k=k, stride=stride, pb=pb, pe=pe, spatial=spatial,
                ceil=draw(st.booleans()) and not same_shape, n=draw(st.integers(1, 3)),
                c=draw(st.sampled_from(ODD_CHANNELS)))


def _pool_padding(pb, pe, draw):
    if pb == pe and pb[0] == pb[1] and draw(st.booleans()):
        return pb[0]
    if pb == pe and draw(st.booleans()):
        return tuple(pb)
    return (pb[0], pe[0], pb[1], pe[1])


def _run_pool(case, seed, fmt, name, out_kind, data, nonfinite):
    c_ = case
    x = fs.data(seed, c_["n"], c_["c"], *c_["spatial"])
    if nonfinite:
        x = fs.inject_nonfinite(x, seed, data.draw(st.sampled_from([0.02, 0.1, 0.5]), "frac"),
                                infinities=c_["kind"] == "max")
    k, s = c_["k"], c_["stride"] or c_["k"]
    with np.errstate(invalid="ignore"):  # inf - inf in a window: NaN, as wanted
        want = ref_pool(x, c_["kind"], k, s, c_["pb"], c_["pe"], c_["ceil"])
    nhwc = fmt == "NHWC"
    kinds = ["numpy", "readonly", "tensor_nhwc", "owned_nhwc"] if nhwc else \
        fs.operand_kinds(4, finite=not nonfinite, nhwc=False)
    if out_kind == "alias_x":
        kinds = [k for k in kinds if k not in ("numpy", "readonly")]
    x_kind = data.draw(st.sampled_from(kinds), "x_kind")
    x_view = _nhwc(x) if nhwc else x
    xin = operand(x_view, x_kind)
    out = buf = None
    if out_kind == "alias_x":
        assert isinstance(xin, mkcache.Tensor) and want.shape == x.shape
        out = xin
    elif out_kind == "wrapped":
        buf = np.full(want.shape if not nhwc else _nhwc(want).shape, np.nan, np.float32)
        out = mkcache.Tensor(buf, fmt)
    elif out_kind in ("nChw8c", "nChw16c"):
        out = mkcache.to_layout(np.full(want.shape, np.nan, np.float32), out_kind)
    padding = _pool_padding(c_["pb"], c_["pe"], data.draw)
    stride = c_["stride"] if c_["stride"] is None or data.draw(st.booleans()) else list(s)
    note(f"x {x_kind} {x.shape} (NCHW) {fmt}, out {out_kind}, padding {padding}, stride {stride}")
    if c_["kind"] == "max":
        y = mkcache.max_pool2d(xin, k, stride, padding, ceil_mode=c_["ceil"],
                               data_format=fmt, name=name, out=out)
    else:
        y = mkcache.avg_pool2d(xin, k, stride, padding, ceil_mode=c_["ceil"],
                               count_include_pad=c_["kind"] == "avg_include",
                               data_format=fmt, name=name, out=out)
    if out is not None:
        assert y is out
    else:
        assert y.layout == fmt
    got = y.numpy("NCHW")
    unspecified = c_["kind"] == "max"  # the README: max pooling's NaN is unspecified
    assert_close_nan(got, want, f"{c_['kind']} pool", ulps=4 * k[0] * k[1],
                     nan_unspecified=unspecified)
    if buf is not None:
        assert_close_nan(_nchw(buf) if nhwc else buf, want, "the out= array itself",
                         ulps=4 * k[0] * k[1], nan_unspecified=unspecified)
    if out is not xin:
        _unchanged([("x", xin, x_view)])


@pytest.mark.parametrize("out_kind", ["none", "wrapped", "nChw8c", "nChw16c", "alias_x"])
@fuzz(16)
@given(seed=SEEDS, fmt=st.sampled_from(["NCHW", "NHWC"]), name=NAMES, data=st.data())
def test_pool2d(out_kind, seed, fmt, name, data):
    """out= none, a wrapped array, a blocked Tensor, x itself."""
    if fmt == "NHWC" and out_kind.startswith("nChw"):
        fmt = "NCHW"
    case = data.draw(pool_cases(same_shape=out_kind == "alias_x"), "case")
    _run_pool(case, seed, fmt, name, out_kind, data, nonfinite=False)


@pytest.mark.parametrize("kind", POOL_KINDS)
@fuzz(15)
@given(seed=SEEDS, fmt=st.sampled_from(["NCHW", "NHWC"]), name=NAMES, data=st.data())
def test_pool2d_nan(kind, seed, fmt, name, data):
    """NaN in a window makes its max (and its average) NaN, as numpy's max;
    infinities win a max, and a window of -inf has the max -inf."""
    case = data.draw(pool_cases(kind), "case")
    _run_pool(case, seed, fmt, name, "none", data, nonfinite=True)


@fuzz(20)
@given(seed=SEEDS, rank=st.sampled_from([4, 5]), nonfinite=st.booleans(), data=st.data())
def test_global_pool(seed, rank, nonfinite, data):
    shape = (data.draw(st.integers(1, 3)), data.draw(st.sampled_from(ODD_CHANNELS))) + \
        tuple(data.draw(st.integers(1, 6)) for _ in range(rank - 2))
    x = fs.data(seed, *shape)
    if nonfinite:
        x = fs.inject_nonfinite(x, seed, 0.05, infinities=False)
    fmt = "NCHW" if rank == 4 else "NCDHW"
    axes = tuple(range(2, rank))
    x64 = x.astype(np.float64)
    assert_close_nan(np.asarray(mkcache.global_max_pool(x, data_format=fmt)),
                     x64.max(axis=axes, keepdims=True), "global max", ulps=0,
                     nan_unspecified=True)
    assert_close_nan(np.asarray(mkcache.global_avg_pool(x, data_format=fmt)),
                     x64.mean(axis=axes, keepdims=True), "global avg", ulps=64)


# ====================================================== valid: linear algebra

MATMUL_SIDES = [1, 2, 3, 5, 7, 16, 17, 33]


@pytest.mark.parametrize("out_kind", ["none", "wrapped", "alias_a", "alias_b"])
@fuzz(15)
@given(batches=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
       m=st.sampled_from(MATMUL_SIDES), k=st.sampled_from(MATMUL_SIDES),
       n=st.sampled_from(MATMUL_SIDES), ta=st.booleans(), tb=st.booleans(), bias=st.booleans(),
       activation=st.sampled_from([None, "relu"]), seed=SEEDS, name=NAMES, data=st.data())
def test_matmul(out_kind, batches, m, k, n, ta, tb, bias, activation, seed, name, data):
    """out= none, a wrapped array, a or b itself."""
    (ba, bb), batch = batches.input_shapes, batches.result_shape
    if out_kind.startswith("alias"):  # the aliased operand has the result's shape
        m = k = n
        if out_kind == "alias_a":
            ba = batch
        else:
            bb = batch
    a = fs.data(seed, *ba, *((k, m) if ta else (m, k)))
    b = fs.data(seed + 1, *bb, *((n, k) if tb else (k, n)))
    bv = fs.data(seed + 2, n) if bias else None
    av = np.swapaxes(a, -1, -2) if ta else a
    bw = np.swapaxes(b, -1, -2) if tb else b
    exact = np.matmul(av.astype(np.float64), bw.astype(np.float64))
    mag = np.matmul(np.abs(av).astype(np.float64), np.abs(bw).astype(np.float64))
    if bias:
        exact, mag = exact + bv, mag + np.abs(bv)
    want = np.maximum(exact, 0) if activation == "relu" else exact
    a_kind = data.draw(st.sampled_from(fs.operand_kinds(a.ndim, nhwc=False)), "a_kind")
    b_kind = data.draw(st.sampled_from(fs.operand_kinds(b.ndim, nhwc=False)), "b_kind")
    ain, bin_ = operand(a, a_kind), operand(b, b_kind)
    out = buf = None
    if out_kind == "alias_a":
        assert a.shape == want.shape
        out = ain = _as_tensor(ain)
    elif out_kind == "alias_b":
        assert b.shape == want.shape
        out = bin_ = _as_tensor(bin_)
    elif out_kind == "wrapped":
        buf = np.full(want.shape, np.nan, np.float32)
        out = mkcache.Tensor(buf)
    note(f"a {a_kind} {a.shape} b {b_kind} {b.shape} out {out_kind}")
    y = mkcache.matmul(ain, bin_, bv, transpose_a=ta, transpose_b=tb, activation=activation,
                       name=name, out=out)
    assert y.shape == want.shape
    if out is not None:
        assert y is out
    assert_close(logical(y), want, mag, reduction=k, what="matmul")
    if buf is not None:
        assert_close(buf, want, mag, reduction=k, what="the out= array itself")
    _unchanged([(w, v, o) for w, v, o in (("a", ain, a), ("b", bin_, b)) if v is not out])


@fuzz(40)
@given(batch=st.lists(st.integers(1, 4), max_size=2), n_in=st.sampled_from([1, 3, 5, 16, 17, 33]),
       n_out=st.sampled_from([1, 2, 7, 16, 19]), bias=st.booleans(),
       activation=st.sampled_from([None, "relu"]), seed=SEEDS, name=NAMES,
       w_kind=st.sampled_from(["numpy", "readonly", "tensor", "constant"]),
       x_kind=st.sampled_from(["numpy", "readonly", "tensor"]), wrapped_out=st.booleans())
def test_linear(batch, n_in, n_out, bias, activation, seed, name, w_kind, x_kind, wrapped_out):
    x = fs.data(seed, *batch, n_in)
    w = fs.data(seed + 1, n_out, n_in)
    b = fs.data(seed + 2, n_out) if bias else None
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    mag = np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64)
    if bias:
        exact, mag = exact + b, mag + np.abs(b)
    want = np.maximum(exact, 0) if activation == "relu" else exact
    win = mkcache.Tensor(w.copy(), constant=True) if w_kind == "constant" else operand(w, w_kind)
    buf = np.full(want.shape, np.nan, np.float32) if wrapped_out else None
    out = mkcache.Tensor(buf) if wrapped_out else None
    y = mkcache.linear(operand(x, x_kind), win, b, activation=activation, name=name, out=out)
    assert y.shape == want.shape
    assert_close(logical(y), want, mag, reduction=n_in, what="linear")
    if buf is not None:
        assert_close(buf, want, mag, reduction=n_in, what="the out= array itself")


# =========================================================== valid: binary

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}


def _binary_data(seed, shape, op):
    x = fs.data(seed, *shape)
    if op == "div":  # keep away from 0 (a swapped div is computed as 1 / (b / a))
        x = np.where(np.abs(x) < 0.2, np.float32(0.7), x).astype(np.float32)
    return x


def _label(kind):
    return "NHWC" if fs.channels_last_label(kind) else "NCHW"


def _as_tensor(value):
    """A Tensor to write into: a Tensor as it is, an array wrapped (a
    writable copy of a read-only one: writing through a read-only array is
    refused)."""
    if isinstance(value, mkcache.Tensor):
        return value
    return mkcache.Tensor(value if value.flags.writeable else value.copy())


@st.composite
def binary_operands(draw, finite=True, alias=False, op=None, nan_in="both"):
    op = op or draw(st.sampled_from(sorted(BINARY)))
    rank4 = alias and draw(st.booleans())  # the ranks with blocked layouts, more often
    shapes = draw(mutually_broadcastable_shapes(num_shapes=2, min_dims=4 if rank4 else 1,
                                                max_dims=4 if rank4 else 5, max_side=5))
    (sa, sb), result = shapes.input_shapes, shapes.result_shape
    if alias:  # make out=a / out=b possible
        which = draw(st.sampled_from(["both", "both", "a", "b", "any"]))
        if which in ("both", "a"):
            sa = result
        if which in ("both", "b"):
            sb = result
    seed = draw(SEEDS)
    a, b = _binary_data(seed, sa, op), _binary_data(seed + 1, sb, op)
    if not finite:
        if nan_in in ("a", "both"):
            a = fs.inject_nonfinite(a, seed, draw(st.sampled_from([0.05, 0.3, 1.0])), True)
        if nan_in in ("b", "both"):
            b = fs.inject_nonfinite(b, seed + 1, draw(st.sampled_from([0.05, 0.3, 1.0])), True)
    def kind(rank):
        kinds = fs.operand_kinds(rank, finite)
        blocked = [k for k in kinds if k.startswith("nC") or k == "conv"]
        if alias and blocked and draw(st.booleans()):
            return draw(st.sampled_from(blocked))
        return draw(st.sampled_from(kinds))

    a_kind = kind(a.ndim)
    scalar = not alias and draw(st.integers(0, 7)) == 0
    if scalar:
        value = float(b.reshape(-1)[0])
        b_kind = draw(st.sampled_from(["float", "float32"]))
        return op, a, np.array(value, np.float32).reshape(1), a_kind, b_kind, value
    b_kind = kind(b.ndim)
    return op, a, b, a_kind, b_kind, None


def _binary_call(op, a, b, a_kind, b_kind, scalar, out_kind="none", name=None,
                 must_alias=False):
    ain = operand(a, a_kind)
    if scalar is not None:
        bin_ = scalar if b_kind == "float" else np.float32(scalar)
    else:
        bin_ = operand(b, b_kind)
    with np.errstate(all="ignore"):  # numpy's NaN / inf results are the reference
        want = BINARY[op](a.astype(np.float64), b.astype(np.float64))
    out = buf = None
    same_label = scalar is None and _label(a_kind) == _label(b_kind)
    if out_kind == "alias_a" and same_label and a.shape == want.shape:
        out = ain = _as_tensor(ain)
    elif out_kind == "alias_b" and same_label and b.shape == want.shape:
        out = bin_ = _as_tensor(bin_)
    elif out_kind == "alias_both" and same_label and a.shape == b.shape == want.shape:
        out = ain = bin_ = _as_tensor(ain)
        with np.errstate(all="ignore"):
            want = BINARY[op](a.astype(np.float64), a.astype(np.float64))
    elif out_kind == "wrapped" and same_label:
        buf = np.full(want.shape, np.nan, np.float32)
        out = mkcache.Tensor(buf, _label(a_kind) if len(want.shape) in (4, 5) else None)
    elif out_kind in ("nChw8c", "nChw16c") and same_label and _label(a_kind) == "NCHW" and \
            len(want.shape) == 4:
        out = mkcache.to_layout(np.full(want.shape, np.nan, np.float32), out_kind)
    else:
        assert not must_alias, "the case cannot alias"
        out_kind = "none"
    note(f"{op}: a {a_kind} {a.shape}, b {b_kind} {b.shape}, out {out_kind}")
    originals = [(w, v, o) for w, v, o in (("a", ain, a), ("b", bin_, b))
                 if v is not out and not np.isscalar(v) and not isinstance(v, float)]
    y = getattr(mkcache, op)(ain, bin_, name=name, out=out)
    if out is not None:
        assert y is out, "out= must be returned"
    assert tuple(y.shape) == want.shape, (y.shape, want.shape)
    unspecified = op in ("maximum", "minimum")  # the README: their NaN is unspecified
    assert_close_nan(logical(y), want, f"{op} (out {out_kind})", ulps=4,
                     nan_unspecified=unspecified)
    if buf is not None:
        assert_close_nan(buf, want, "the out= array itself", ulps=4,
                         nan_unspecified=unspecified)
    _unchanged(originals)


@fuzz(120)
@given(case=binary_operands(), name=NAMES)
def test_binary(case, name):
    _binary_call(*case, name=name)


@pytest.mark.parametrize("nan_in", ["a", "b", "both"])
@pytest.mark.parametrize("op", sorted(BINARY))
@fuzz(6)
@given(name=NAMES, data=st.data())
def test_binary_nan(op, nan_in, name, data):
    """numpy's results with NaN and infinities in either operand (or both):
    np.maximum / np.minimum propagate NaN from either side, inf - inf is
    NaN, ..."""
    _binary_call(*data.draw(binary_operands(finite=False, op=op, nan_in=nan_in), "case"),
                 name=name)


@fuzz(80)
@given(case=binary_operands(alias=True),
       out_kind=st.sampled_from(["wrapped", "nChw8c", "nChw16c"]), name=NAMES)
def test_binary_out(case, out_kind, name):
    """out= a new Tensor (a wrapped array or a library-owned blocked one)."""
    _binary_call(*case, out_kind=out_kind, name=name)


# out= one of the operands (in place), every position, every pairing of the
# operands' layouts (plain, blocked by to_layout, blocked conv output;
# channels-last with channels-last).
_ALIASABLE = ["tensor", "nChw8c", "nChw16c", "conv"]
_ANY = ["numpy"] + _ALIASABLE
_NHWC_KINDS = ["tensor_nhwc", "owned_nhwc"]
BINARY_ALIAS_CASES = (
    [("a", ka, kb) for ka in _ALIASABLE for kb in _ANY]
    + [("b", ka, kb) for ka in _ANY for kb in _ALIASABLE]
    + [("both", k, k) for k in _ALIASABLE + _NHWC_KINDS]
    + [(p, ka, kb) for p in "ab" for ka in _NHWC_KINDS for kb in _NHWC_KINDS])


@pytest.mark.parametrize("position,a_kind,b_kind", BINARY_ALIAS_CASES)
@fuzz(4)
@given(op=st.sampled_from(sorted(BINARY)), seed=SEEDS, name=NAMES, data=st.data())
def test_binary_out_is_an_operand(position, a_kind, b_kind, op, seed, name, data):
    result = (data.draw(st.integers(1, 3)), data.draw(st.sampled_from(ODD_CHANNELS)),
              data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5)))
    other = tuple(data.draw(st.sampled_from([d, 1])) for d in result)
    sa = result if position in ("a", "both") else other
    sb = result if position in ("b", "both") else other
    a, b = _binary_data(seed, sa, op), _binary_data(seed + 1, sb, op)
    _binary_call(op, a, b, a_kind, b_kind, None, out_kind=f"alias_{position}", name=name,
                 must_alias=True)


# ====================================================== valid: activations

KINDS = sorted(mkcache.ACTIVATIONS)
POSITIVE_ONLY = {"sqrt", "log"}


@st.composite
def elementwise_shapes(draw, max_rank=5, min_rank=1):
    rank = draw(st.integers(min_rank, max_rank))
    return _shape_list(draw, rank, 1, 6, extra=(16, 17, 19) if rank <= 3 else ())


def _activation_params(kind, draw):
    _, alpha, beta = mkcache.ACTIVATIONS[kind]
    if kind == "leaky_relu":
        alpha = draw(st.sampled_from([0.01, 0.2, 1.5]))
    elif kind == "elu":
        alpha = draw(st.sampled_from([1.0, 0.5]))
    elif kind == "clip":
        alpha, beta = draw(st.sampled_from([(-1.0, 1.0), (0.0, 6.0), (-0.5, -0.5), (-2.5, 0.3)]))
    elif kind == "swish":
        alpha = draw(st.sampled_from([1.0, 2.0]))
    return alpha, beta


def _run_activation(kind, shape, seed, nonfinite, out_kind, name, data, layouts=None):
    x = fs.data(seed, *shape, scale=3.0)
    if kind in POSITIVE_ONLY:
        x = (np.abs(x) + np.float32(0.05)).astype(np.float32)
    if nonfinite:
        x = fs.inject_nonfinite(x, seed, data.draw(st.sampled_from([0.05, 0.3, 1.0]), "frac"),
                                infinities=False)
    alpha, beta = _activation_params(kind, data.draw)
    with np.errstate(invalid="ignore"):  # NaN in, NaN out
        want = ref_activation(kind, x, alpha, beta)
    kinds = [k for k in fs.operand_kinds(len(shape), not nonfinite)
             if layouts is None or k in layouts]
    x_kind = data.draw(st.sampled_from(kinds), "x_kind")
    xin = operand(x, x_kind)
    out = buf = None
    if out_kind == "alias_x":
        out = xin = _as_tensor(xin)
    elif out_kind == "wrapped":
        buf = np.full(shape, np.nan, np.float32)
        out = mkcache.Tensor(buf, _label(x_kind) if len(shape) in (4, 5) else None)
    elif out_kind == "blocked" and len(shape) == 4 and _label(x_kind) == "NCHW":
        out = mkcache.to_layout(np.full(shape, np.nan, np.float32), "nChw16c")
    note(f"{kind}({alpha}, {beta}): x {x_kind} {shape}, out {out_kind}")
    style = data.draw(st.sampled_from(["activation", "named"]), "style")
    if style == "named" and kind == "clip":
        y = mkcache.clip(xin, alpha, beta, name=name, out=out)
    elif style == "named" and kind in ("relu", "tanh", "sigmoid", "abs", "square", "exp",
                                       "relu6", "silu", "hardswish", "mish", "sqrt", "log"):
        y = getattr(mkcache, kind)(xin, name=name, out=out)
    else:
        y = mkcache.activation(xin, kind, alpha, beta, name=name, out=out)
    if out is not None:
        assert y is out
    assert_close_nan(logical(y), want, kind, nan_unspecified=nonfinite)
    if buf is not None:
        assert_close_nan(buf, want, "the out= array itself", nan_unspecified=nonfinite)
    if out is not xin:
        _unchanged([("x", xin, x)])


@fuzz(80)
@given(kind=st.sampled_from(KINDS), shape=elementwise_shapes(), seed=SEEDS, name=NAMES,
       out_kind=st.sampled_from(["none", "alias_x", "wrapped", "blocked"]), data=st.data())
def test_activation(kind, shape, seed, name, out_kind, data):
    _run_activation(kind, shape, seed, False, out_kind, name, data)


_NAN_LAYOUTS = {"numpy": ("numpy", "readonly"), "tensor": ("tensor", "tensor_nhwc"),
                "blocked": ("nChw8c", "nChw16c", "nCdhw8c", "nCdhw16c")}


@pytest.mark.parametrize("layout", sorted(_NAN_LAYOUTS))
@pytest.mark.parametrize("kind", KINDS)
@fuzz(3)
@given(seed=SEEDS, name=NAMES, out_kind=st.sampled_from(["none", "alias_x"]), data=st.data())
def test_activation_nan(kind, layout, seed, name, out_kind, data):
    """Every activation of NaN is NaN (relu(NaN) = NaN, clip(NaN) = NaN), as
    numpy computes them, whatever the layout of x (numpy arrays take another
    code path than Tensors; blocked layouts other kernels)."""
    shape = data.draw(elementwise_shapes(min_rank=4 if layout != "numpy" else 1), "shape")
    _run_activation(kind, shape, seed, True, out_kind, name, data, layouts=_NAN_LAYOUTS[layout])


# ============================================ valid: softmax and layer_norm

def _norm_out(out_kind, x_kind, xin, shape):
    if out_kind == "alias_x":
        t = _as_tensor(xin)
        return t, t, None
    if out_kind == "wrapped":
        buf = np.full(shape, np.nan, np.float32)
        return xin, mkcache.Tensor(buf, _label(x_kind) if len(shape) in (4, 5) else None), buf
    if out_kind == "blocked" and len(shape) == 4 and _label(x_kind) == "NCHW":
        return xin, mkcache.to_layout(np.full(shape, np.nan, np.float32), "nChw8c"), None
    return xin, None, None


@fuzz(60)
@given(shape=elementwise_shapes(), log=st.booleans(), seed=SEEDS, name=NAMES,
       out_kind=st.sampled_from(["none", "alias_x", "wrapped", "blocked"]), data=st.data())
def test_softmax(shape, log, seed, name, out_kind, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "axis")
    x = fs.data(seed, *shape, scale=4.0)
    want = ref_softmax(x, axis, log)
    x_kind = data.draw(st.sampled_from(fs.operand_kinds(len(shape))), "x_kind")
    xin, out, buf = _norm_out(out_kind, x_kind, operand(x, x_kind), shape)
    note(f"x {x_kind} {shape} axis {axis} out {out_kind}")
    fn = mkcache.log_softmax if log else mkcache.softmax
    y = fn(xin, axis=axis, name=name, out=out)
    if out is not None:
        assert y is out
    ulps = 64 + 2 * shape[axis]
    assert_close_nan(logical(y), want, "log_softmax" if log else "softmax", ulps=ulps)
    if buf is not None:
        assert_close_nan(buf, want, "the out= array itself", ulps=ulps)
    if out is not xin:
        _unchanged([("x", xin, x)])


def _assert_layer_norm(got, x, axis, scale=None, shift=None, epsilon=1e-5, what="layer_norm"):
    """The existing tests' bound, 16 + n / 8 ulps (n normalized elements),
    relative to the magnitude of the terms (|normalized * scale| + |shift|:
    |result| without scale and shift) and times the conditioning of the
    centring, rms(x) / sqrt(var + eps) per normalized group (~1 for most
    data; large where a group is nearly constant, e.g. two close values)."""
    want = ref_layer_norm(x, axis, scale, shift, epsilon)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    axes = tuple(range(axis % x.ndim, x.ndim))
    n = int(np.prod([x.shape[a] for a in axes]))
    x64 = x.astype(np.float64)
    cond = np.sqrt((x64 ** 2).mean(axis=axes, keepdims=True) /
                   (x64.var(axis=axes, keepdims=True) + epsilon))
    normalized = ref_layer_norm(x, axis, None, None, epsilon)
    mag = np.abs(normalized) * (1.0 if scale is None else np.abs(scale)) + \
        (0.0 if shift is None else np.abs(shift))
    bound = (16 + n // 8) * EPS_F32 * np.maximum(mag, 1.0) * np.maximum(cond, 1.0)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {bad.sum()} elements off, first at {tuple(np.argwhere(bad)[0])}: "
        f"error {err[bad].max():.3g} > bound {bound[bad].min():.3g}")


@fuzz(60)
@given(shape=elementwise_shapes(max_rank=4), affine=st.sampled_from(["none", "scale", "both"]),
       epsilon=st.sampled_from([1e-5, 1e-3, 0.1]), seed=SEEDS, name=NAMES,
       out_kind=st.sampled_from(["none", "alias_x", "wrapped", "blocked"]), data=st.data())
def test_layer_norm(shape, affine, epsilon, seed, name, out_kind, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "begin_norm_axis")
    x = fs.data(seed, *shape, scale=3.0) + np.float32(1)
    norm_shape = shape[axis % len(shape):]
    scale = fs.data(seed + 1, *norm_shape) if affine != "none" else None
    shift = fs.data(seed + 2, *norm_shape) if affine == "both" else None
    x_kind = data.draw(st.sampled_from(fs.operand_kinds(len(shape))), "x_kind")
    xin, out, buf = _norm_out(out_kind, x_kind, operand(x, x_kind), shape)
    v_kind = data.draw(st.sampled_from(["numpy", "readonly", "tensor"]), "scale_kind")
    sin = None if scale is None else operand(scale, v_kind)
    hin = None if shift is None else operand(shift, v_kind)
    note(f"x {x_kind} {shape} axis {axis} out {out_kind} scale/shift {v_kind}")
    y = mkcache.layer_norm(xin, sin, hin, begin_norm_axis=axis, epsilon=epsilon, name=name,
                           out=out)
    if out is not None:
        assert y is out
    _assert_layer_norm(logical(y), x, axis, scale, shift, epsilon)
    if buf is not None:
        _assert_layer_norm(buf, x, axis, scale, shift, epsilon, "the out= array itself")
    if out is not xin:
        _unchanged([("x", xin, x)])


# ============================================== valid: out= sharing memory

SHARING_OPS = ["add", "sub", "mul", "div", "maximum", "minimum", "relu", "sigmoid", "softmax",
               "layer_norm", "conv2d_1x1", "matmul"]


@pytest.mark.parametrize("op", SHARING_OPS)
@fuzz(8)
@given(seed=SEEDS, data=st.data())
def test_out_shares_memory(op, seed, data):
    """out= a Tensor over memory an input also uses, as numpy's out= may:
    the same bytes through another Tensor, or a partly overlapping view of
    one buffer. The result is what it would be into fresh memory (README)."""
    draw = data.draw
    binary = op in BINARY
    if op == "conv2d_1x1":
        shape = (draw(st.integers(1, 2)), draw(st.sampled_from(ODD_CHANNELS)),
                 draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    elif op == "matmul":
        shape = (draw(st.integers(1, 6)), draw(st.sampled_from([1, 2, 5, 16, 17])))
    else:
        shape = _shape_list(draw, draw(st.integers(1, 4)), 1, 5)
    size = int(np.prod(shape))
    shift = draw(st.integers(-size, size), "shift")  # out's offset from the input's
    base = np.zeros(size + abs(shift) + 2, np.float32)
    at = 1 + max(0, -shift)
    src = base[at:at + size].reshape(shape)
    src[...] = _binary_data(seed, shape, op) if binary else fs.data(seed, *shape)
    out_view = base[at + shift:at + shift + size].reshape(shape)
    x = src.copy()
    other = None
    position = draw(st.sampled_from(["a", "b"]), "position") if binary else "a"
    as_tensor = draw(st.booleans(), "input_as_tensor")
    shared = mkcache.Tensor(src) if as_tensor else src
    note(f"{op} {shape}, out shifted by {shift} elements from input {position}")
    ulps, mag, reduction = 64, None, 0
    out = mkcache.Tensor(out_view)
    if binary:
        other = _binary_data(seed + 1, shape, op)
        a, b = (x, other) if position == "a" else (other, x)
        want = BINARY[op](a.astype(np.float64), b.astype(np.float64))
        args = (shared, other) if position == "a" else (other, shared)
        y = getattr(mkcache, op)(*args, out=out)
        ulps = 4
    elif op in ("relu", "sigmoid"):
        want = ref_activation(op, x)
        y = getattr(mkcache, op)(shared, out=out)
    elif op == "softmax":
        axis = draw(st.integers(-len(shape), len(shape) - 1), "axis")
        want = ref_softmax(x, axis)
        y = mkcache.softmax(shared, axis=axis, out=out)
        ulps = 64 + 2 * shape[axis]
    elif op == "layer_norm":
        x = x * 3 + 1
        src[...] = x
        y = mkcache.layer_norm(shared, begin_norm_axis=-1, out=out)
        assert y is out
        _assert_layer_norm(logical(y), x, -1)
        _assert_layer_norm(out_view, x, -1, what="the out= array itself")
        return
    elif op == "conv2d_1x1":
        w = fs.data(seed + 1, shape[1], shape[1], 1, 1)
        want, mag = conv2d_nchw(x, w)
        reduction = shape[1]
        y = mkcache.conv2d(shared, w, out=out)
    else:
        w = fs.data(seed + 1, shape[1], shape[1])
        want = x.astype(np.float64) @ w
        mag = np.abs(x).astype(np.float64) @ np.abs(w)
        reduction = shape[1]
        y = mkcache.matmul(shared, w, out=out)
    assert y is out
    for what, got in (("result", logical(y)), ("the out= array itself", out_view)):
        if mag is None:
            assert_close_nan(got, want, f"{op} {what}", ulps=ulps)
        else:
            assert_close(got, want, mag, reduction, what=f"{op} {what}")


# ===================================================== valid: reshape, concat

def _factorizations(draw, total, rank):
    """`rank` dims whose product is `total`, from its prime factors."""
    primes, left, p = [], total, 2
    while left > 1:
        while left % p == 0:
            primes.append(p)
            left //= p
        p += 1
    dims = [1] * rank
    for q in primes:
        dims[draw(st.integers(0, rank - 1))] *= q
    return tuple(dims)


@fuzz(60)
@given(shape=elementwise_shapes(), seed=SEEDS, nonfinite=st.booleans(), data=st.data())
def test_reshape(shape, seed, nonfinite, data):
    x = fs.data(seed, *shape)
    if nonfinite:
        x = fs.inject_nonfinite(x, seed, 0.1, infinities=True)
    total = x.size
    target = _factorizations(data.draw, total, data.draw(st.integers(1, 5), "rank"))
    if data.draw(st.booleans(), "infer"):
        i = data.draw(st.integers(0, len(target) - 1))
        target = target[:i] + (-1,) + target[i + 1:]
    kind = data.draw(st.sampled_from(fs.operand_kinds(len(shape), finite=not nonfinite)), "kind")
    xin = operand(x, kind)
    note(f"x {kind} {shape} -> {target}")
    if data.draw(st.booleans(), "flatten") and len(shape) > 1:
        start = data.draw(st.integers(-len(shape), len(shape) - 1))
        y = mkcache.flatten(xin, start)
        want = x.reshape(shape[:start % len(shape)] + (-1,))
    else:
        form = data.draw(st.sampled_from([tuple, list]))
        y = mkcache.reshape(xin, form(target))
        want = x.reshape(target)
    assert tuple(y.shape) == want.shape
    assert_equal_nan(logical(y), want, "reshape")
    _unchanged([("x", xin, x)])


def _concat_case(draw, count, seed, nonfinite):
    rank = draw(st.integers(1, 5))
    axis = draw(st.integers(-rank, rank - 1))
    base = list(_shape_list(draw, rank, 1, 4))
    nhwc = rank in (4, 5) and draw(st.booleans())
    arrays = []
    for i in range(count):
        shape = list(base)
        shape[axis] = draw(st.integers(1, 4))
        a = fs.data(seed + i, *shape)
        if nonfinite:
            a = fs.inject_nonfinite(a, seed + i, 0.1, infinities=True)
        arrays.append(a)
    kinds_all = fs.operand_kinds(rank, finite=not nonfinite)
    kinds = [k for k in kinds_all if fs.channels_last_label(k) == nhwc]
    chosen = [draw(st.sampled_from(kinds)) for _ in arrays]
    return axis, arrays, chosen


@fuzz(60)
@given(count=st.integers(1, 10), seed=SEEDS, nonfinite=st.booleans(), name=NAMES,
       out_kind=st.sampled_from(["none", "wrapped", "blocked"]), data=st.data())
def test_concat(count, seed, nonfinite, name, out_kind, data):
    _run_concat(count, seed, nonfinite, name, out_kind, data)


@fuzz(12)
@given(count=st.integers(11, 40), seed=SEEDS, name=NAMES, data=st.data())
def test_concat_many(count, seed, name, data):
    """11 and more inputs (a network's dense block concatenates dozens)."""
    _run_concat(count, seed, False, name, "none", data)


def _run_concat(count, seed, nonfinite, name, out_kind, data):
    axis, arrays, kinds = _concat_case(data.draw, count, seed, nonfinite)
    want = np.concatenate(arrays, axis=axis)
    inputs = [operand(a, k) for a, k in zip(arrays, kinds)]
    out = buf = None
    if out_kind == "wrapped":
        buf = np.full(want.shape, np.nan, np.float32)
        out = mkcache.Tensor(buf, _label(kinds[0]) if want.ndim in (4, 5) else None)
    elif out_kind == "blocked" and want.ndim == 4 and _label(kinds[0]) == "NCHW":
        out = mkcache.to_layout(np.full(want.shape, np.nan, np.float32), "nChw16c")
    note(f"{count} inputs {[a.shape for a in arrays]} {kinds} axis {axis} out {out_kind}")
    y = mkcache.concat(inputs if data.draw(st.booleans()) else tuple(inputs), axis=axis,
                       name=name, out=out)
    if out is not None:
        assert y is out
    assert tuple(y.shape) == want.shape
    assert_equal_nan(logical(y), want, "concat")
    if buf is not None:
        assert_equal_nan(buf, want, "the out= array itself")
    _unchanged([(f"tensors[{i}]", v, a) for i, (v, a) in enumerate(zip(inputs, arrays))])


@pytest.mark.parametrize("op", ["relu", "sigmoid", "add", "softmax", "reshape", "concat",
                                "layer_norm", "transpose"])
@fuzz(3)
@given(seed=SEEDS, data=st.data())
def test_rank6(op, seed, data):
    """Rank 6 is the documented maximum: every operator takes and returns it."""
    shape = _shape_list(data.draw, 6, 1, 3)
    x = fs.data(seed, *shape)
    xin = operand(x, data.draw(st.sampled_from(["numpy", "tensor"]), "kind"))
    if op in ("relu", "sigmoid"):
        y, want = getattr(mkcache, op)(xin), ref_activation(op, x)
    elif op == "add":
        b = fs.data(seed + 1, *shape[-2:])
        y, want = mkcache.add(xin, b), x.astype(np.float64) + b
    elif op == "softmax":
        y, want = mkcache.softmax(xin, axis=2), ref_softmax(x, 2)
    elif op == "layer_norm":
        y = mkcache.layer_norm(xin, begin_norm_axis=4)
        _assert_layer_norm(logical(y), x, 4)
        return
    elif op == "transpose":
        perm = tuple(data.draw(st.permutations(range(6))))
        y, want = mkcache.transpose(xin, perm), np.transpose(x, perm)
    elif op == "concat":
        y, want = mkcache.concat([xin, x], axis=3), np.concatenate([x, x], axis=3)
    else:
        src = fs.data(seed, int(np.prod(shape)))
        y, want = mkcache.reshape(src, shape), src.reshape(shape)
    assert tuple(y.shape) == want.shape
    assert_close_nan(logical(y), want, op, ulps=64)


# ================================================ huge geometry (isolated)

_BIG = [2 ** 10, 2 ** 16, 2 ** 20, 2 ** 24, 2 ** 29, 2 ** 30 - 1, 2 ** 30]


def _mixed(draw, low=0):
    return draw(st.one_of(st.integers(low, 3), st.sampled_from(_BIG)))


@st.composite
def huge_geometry(draw, seed):
    """A convolution / transposed convolution / max pooling with huge
    strides, paddings or dilations and either a small output (the call must
    compute the right values, or raise mkcache.Error) or one of more than
    2**56 bytes (past the bound inputs have: it must be refused); never a
    crash."""
    op = draw(st.sampled_from(["conv2d", "conv2d", "conv2d_transpose", "max_pool2d"]))
    fmt = draw(st.sampled_from(["NCHW", "NHWC"]))
    n, c = draw(st.integers(1, 2)), draw(st.sampled_from([1, 3, 16, 17]))
    o = draw(st.sampled_from([1, 4, 16]))
    h, w = draw(st.integers(2, 9)), draw(st.integers(2, 9))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    huge_out = draw(st.integers(0, 2)) == 0
    stride, pb, pe, dil = [], [], [], []
    huge = st.sampled_from([2 ** 28, 2 ** 29, 2 ** 30 - 1, 2 ** 30])
    if huge_out and op == "max_pool2d":
        k = (draw(huge), draw(huge))
    for i, size in enumerate((h, w)):
        if huge_out:
            # Each output dim >= 2**28: the result has >= 2**56 elements.
            if op == "conv2d":
                s, d, b, e = 1, 1, draw(huge), draw(huge)
            elif op == "conv2d_transpose":
                s, d, b, e = draw(huge), 1, draw(st.integers(0, 3)), draw(st.integers(0, 3))
            else:
                s, d, b, e = 1, 1, k[i] - 1, k[i] - 1
            stride.append(s), pb.append(b), pe.append(e), dil.append(d)
            continue
        if op == "max_pool2d":
            d = 1
            b, e = draw(st.integers(0, k[i] - 1)), draw(st.integers(0, k[i] - 1))
        else:
            d = _mixed(draw, 1)
            b, e = _mixed(draw), _mixed(draw)
        ext = (k[i] - 1) * d + 1
        if op == "conv2d_transpose":
            s = _mixed(draw, 1)
            full = (size - 1) * s + ext  # output before padding is cut
            target = draw(st.integers(1, 4))
            cut = max(full - target, 0)
            b = draw(st.integers(0, cut)) if cut <= 2 ** 62 else cut // 2
            e = cut - b
        else:
            span = size + b + e - ext
            s = _mixed(draw, 1)
            if span >= 0 and span // s + 1 > 3:
                s = max(s, -(-span // 2))  # at most 3 outputs
        stride.append(s), pb.append(b), pe.append(e), dil.append(d)
    shape = (n, c, h, w)
    x_src = (f"data({seed}, {n}, {h}, {w}, {c})" if fmt == "NHWC" else
             f"data({seed}, {n}, {c}, {h}, {w})")
    pad = (pb[0], pe[0], pb[1], pe[1])
    if op == "conv2d":
        wshape = (o, c, *k)
        call = (f"mkcache.conv2d({x_src}, data({seed + 1}, {o}, {c}, {k[0]}, {k[1]}), "
                f"stride={tuple(stride)}, padding={pad}, dilation={tuple(dil)}, "
                f"data_format={fmt!r})")
    elif op == "conv2d_transpose":
        wshape = (c, o, *k)
        call = (f"mkcache.conv2d_transpose({x_src}, data({seed + 1}, {c}, {o}, {k[0]}, {k[1]}), "
                f"stride={tuple(stride)}, padding={pad}, dilation={tuple(dil)}, "
                f"data_format={fmt!r})")
    else:
        wshape = None
        ceil = draw(st.booleans())
        call = (f"mkcache.max_pool2d({x_src}, {k}, {tuple(stride)}, {pad}, ceil_mode={ceil}, "
                f"data_format={fmt!r})")
    return dict(op=op, fmt=fmt, shape=shape, wshape=wshape, k=k, stride=tuple(stride),
                pb=tuple(pb), pe=tuple(pe), dil=tuple(dil), seed=seed, huge_out=huge_out,
                ceil=op == "max_pool2d" and ceil,
                case=Case(call, note="a result of more than 2**56 bytes" if huge_out else ""))


def _huge_reference(g):
    x = fs.data(g["seed"], *g["shape"]) if g["fmt"] == "NCHW" else \
        _nchw(fs.data(g["seed"], g["shape"][0], *g["shape"][2:], g["shape"][1]))
    if g["op"] == "conv2d":
        wt = fs.data(g["seed"] + 1, *g["wshape"])
        for i in range(2):
            if g["shape"][2 + i] + g["pb"][i] + g["pe"][i] < (g["k"][i] - 1) * g["dil"][i] + 1:
                return None  # no output: must be refused
        exact, mag = fs.conv2d_gather(x, wt, None, g["stride"], g["pb"], g["pe"], g["dil"], 1)
        return exact, mag, g["shape"][1] * g["k"][0] * g["k"][1]
    if g["op"] == "conv2d_transpose":
        wt = fs.data(g["seed"] + 1, *g["wshape"])
        exact, mag = fs.conv_transpose2d_gather(x, wt, None, g["stride"], g["pb"], g["pe"],
                                                (0, 0), g["dil"], 1)
        if min(exact.shape[2:]) < 1:
            return None
        return exact, mag, g["shape"][1] * g["k"][0] * g["k"][1]
    outs = []
    for i in range(2):
        size, k, s, b, e = g["shape"][2 + i], g["k"][i], g["stride"][i], g["pb"][i], g["pe"][i]
        span = size + b + e - k
        if span < 0:
            return None
        o = span // s + 1
        if g["ceil"] and span % s:
            o += 1
            if (o - 1) * s >= size + b:
                o -= 1
        outs.append(o)
    return fs.max_pool2d_gather(x, g["k"], g["stride"], g["pb"], outs), None, 0


def _check_isolated(worker, g):
    case = g["case"]
    outcome, health = worker.run(case)
    if g["huge_out"]:
        assert outcome[0] == "raised", f"{case!r}\n  was accepted"
        assert fs.is_library_error(outcome[1]), (
            f"{case!r}\n  raised {outcome[2]} (not an mkcache.Error)")
        assert health is None, f"after {case!r}:\n  {health}"
        return
    expected = _huge_reference(g)
    if outcome[0] == "raised":
        assert fs.is_library_error(outcome[1]), (
            f"{case!r}\n  raised {outcome[2]} (not an mkcache.Error)")
    else:
        got = outcome[1]
        assert expected is not None, f"{case!r}\n  has no output but was accepted"
        exact, mag, reduction = expected
        got = _nchw(got) if g["fmt"] == "NHWC" else got
        if mag is None:
            assert_equal_nan(got, exact, f"{case!r}")
        else:
            assert_close(got, exact, mag, reduction, what=f"{case!r}")
    assert health is None, f"after {case!r}:\n  {health}"


@fuzz(3, phases=(Phase.explicit, Phase.generate))
@given(data=st.data(), count=st.integers(15, 25))
def test_huge_geometry(data, count):
    """Huge strides / paddings / dilations with a small output, one after the
    other in one worker process (a crash or hang fails the test and prints
    the calls to replay; state carried from call to call is part of it)."""
    worker = fs.IsolatedWorker()
    try:
        for i in range(count):
            _check_isolated(worker, data.draw(huge_geometry(seed=i), f"call {i}"))
    finally:
        worker.close()


def _sequence(*calls):
    return [Case(c) for c in calls]


_REFUSED = "a result of more than 2**56 bytes: must be refused"
_UNRUNNABLE = "past the sizes oneDNN's kernels index: must be refused, naming the dim"
ISOLATED_SEQUENCES = {
    # Results too large for any buffer (SIGSEGV / SIGFPE inside oneDNN once).
    "conv2d-huge-padding": [Case(
        "mkcache.conv2d(ones(1, 1, 1, 1), ones(1, 1, 1, 1), "
        "padding=(2**30, 2**30 - 1, 2**30, 2**30 - 1))", note=_REFUSED)],
    "conv2d_transpose-huge-stride": [Case(
        "mkcache.conv2d_transpose(ones(1, 1, 2, 2), ones(1, 1, 1, 1), stride=2**30)",
        note=_REFUSED)],
    "max_pool2d-huge-kernel": [Case(
        "mkcache.max_pool2d(ones(1, 1, 1, 1), 2**30, stride=1, padding=2**30 - 1)",
        note=_REFUSED)],
    "conv2d-nhwc-huge-padding": [Case(
        "mkcache.conv2d(ones(2, 3, 3, 17), ones(16, 17, 3, 3), padding=2**29, "
        "data_format='NHWC')", note=_REFUSED)],
    # One refused convolution (oneDNN cannot create its primitive), then
    # every later call must still work.
    "failed-primitive-then-valid": _sequence(
        "mkcache.conv2d(ones(1, 5, 1, 17), ones(4, 17, 1, 3), stride=(21847, 536903677), "
        "padding=(0, 65536, 65536, 1073741823), dilation=(5, 3), data_format='NHWC')"),
    # A refused geometry, then one whose brgemm kernel oneDNN could not
    # generate but built anyway: SIGSEGV (AVX2) or every later call failing.
    "refused-then-unrunnable-conv": [
        Case("mkcache.conv2d(ones(1, 17, 4, 5), ones(1, 17, 2, 1), stride=(536870913, 16777216), "
             "padding=(3, 1073741823, 16777216, 16777216), dilation=(3, 2))", note=_UNRUNNABLE),
        Case("mkcache.conv2d(ones(1, 5, 1, 17), ones(4, 17, 1, 3), stride=(21847, 536903677), "
             "padding=(0, 65536, 65536, 1073741823), dilation=(5, 3), data_format='NHWC')",
             note=_UNRUNNABLE),
        Case("mkcache.conv2d(ramp(1, 5, 3, 17), ramp(4, 17, 1, 3), data_format='NHWC')")],
    "unrunnable-conv-then-valid": [
        Case("mkcache.conv2d(ones(1, 5, 1, 17), ones(4, 17, 1, 3), stride=(21847, 536903677), "
             "padding=(0, 65536, 65536, 1073741823), dilation=(5, 3), data_format='NHWC')",
             note=_UNRUNNABLE),
        Case("mkcache.conv2d(ones(1, 5, 3, 17), ones(4, 17, 1, 3), data_format='NHWC')")],
    "three-huge-convs": _sequence(
        "mkcache.conv2d(ones(1, 17, 1, 1), ones(4, 17, 1, 1), stride=(357914283, 5), "
        "padding=(1024, 1073741823, 0, 1), dilation=(1048576, 7))",
        "mkcache.conv2d(ones(1, 5, 1, 17), ones(4, 17, 1, 3), stride=(21847, 536903677), "
        "padding=(0, 65536, 65536, 1073741823), dilation=(5, 3), data_format='NHWC')",
        "mkcache.conv2d(ones(2, 5, 6, 17), ones(4, 17, 1, 1), stride=(65536, 1073741823), "
        "padding=(7, 2, 1, 3), dilation=(1, 2), data_format='NHWC')"),
}


@pytest.mark.parametrize("isa", [None, "AVX2"], ids=["default-isa", "avx2"])
@pytest.mark.parametrize("name", sorted(ISOLATED_SEQUENCES))
def test_isolated_sequences(name, isa):
    """Sequences found by test_huge_geometry, replayed in a fresh process
    (under this machine's ISA and under AVX2's kernels, which users' CPUs
    may have only): each call raises mkcache.Error or succeeds, and the
    process survives with the library working."""
    worker = fs.IsolatedWorker(env={"ONEDNN_MAX_CPU_ISA": isa} if isa else None)
    try:
        for case in ISOLATED_SEQUENCES[name]:
            outcome, health = worker.run(case)
            if outcome[0] == "raised":
                assert fs.is_library_error(outcome[1]), f"{case!r}: {outcome[2]}"
                if case.note == _UNRUNNABLE:
                    assert "mkcache.errors.UnsupportedError" in outcome[1] and \
                        "spatial dim" in outcome[2], (
                        f"{case!r}: {outcome[2]}")
            else:
                assert case.note not in (_REFUSED, _UNRUNNABLE), f"{case!r} was accepted"
            assert health is None, f"after {case!r}:\n  {health}"
    finally:
        worker.close()


# ============================================================ bad input

X4, W4 = "ramp(1, 4, 6, 6)", "ramp(8, 4, 3, 3)"


def _conv(**kw):
    args = ", ".join(f"{k}={v}" for k, v in kw.items())
    return f"mkcache.conv2d({X4}, {W4}{', ' if args else ''}{args})"


def _ro(call, shape, note, name="buf"):
    return Case(call, setup=((name, f"readonly(zeros{tuple(shape)})"),), unchanged=(name,),
                note=note)


NAMED_BAD = {
    # (9) ints silently masked / truncated, floats and strings as ints
    "conv2d-stride-2**64+2": Case(_conv(stride="2**64 + 2"), note="masked to 2"),
    "conv2d-stride-2**64": Case(_conv(stride="2**64")),
    "conv2d-stride-(2,2**64+1)": Case(_conv(stride="(2, 2**64 + 1)")),
    "conv2d-stride-(1.9,1.9)": Case(_conv(stride="(1.9, 1.9)"), note="truncated to 1"),
    "conv2d-stride-'22'": Case(_conv(stride="'22'"), note="read as (2, 2)"),
    "conv2d-stride-2**63": Case(_conv(stride="2**63")),
    "conv2d-padding-0.5": Case(_conv(padding="0.5")),
    "conv2d-padding-(0.5,0.5)": Case(_conv(padding="(0.5, 0.5)"), note="truncated to 0"),
    "conv2d-padding-(1,1,1,1.5)": Case(_conv(padding="(1, 1, 1, 1.5)")),
    "conv2d-padding-2**64+1": Case(_conv(padding="2**64 + 1"), note="masked to 1"),
    "conv2d-dilation-2**64+1": Case(_conv(dilation="2**64 + 1")),
    "conv2d-dilation-'1'": Case(_conv(dilation="'1'")),
    "conv2d-groups-1.0": Case(_conv(groups="1.0")),
    "conv2d-groups-2**64+1": Case(_conv(groups="2**64 + 1")),
    "conv2d_transpose-output_padding-2**64+1": Case(
        "mkcache.conv2d_transpose(ramp(1, 4, 5, 5), ramp(4, 2, 3, 3), stride=2, "
        "output_padding=2**64 + 1)"),
    "conv2d_transpose-output_padding-0.5": Case(
        "mkcache.conv2d_transpose(ramp(1, 4, 5, 5), ramp(4, 2, 3, 3), stride=2, "
        "output_padding=0.5)"),
    "max_pool2d-kernel-2**64+2": Case("mkcache.max_pool2d(ramp(1, 4, 6, 6), 2**64 + 2)"),
    "max_pool2d-stride-(1.5,1.5)": Case("mkcache.max_pool2d(ramp(1, 4, 6, 6), 2, (1.5, 1.5))"),
    "max_pool2d-kernel-'22'": Case("mkcache.max_pool2d(ramp(1, 4, 6, 6), '22')"),
    "avg_pool2d-padding-2**64+1": Case("mkcache.avg_pool2d(ramp(1, 4, 6, 6), 3, 1, 2**64 + 1)"),
    "softmax-axis-2**32": Case("mkcache.softmax(ramp(2, 3), axis=2**32)", note="read as 0"),
    "softmax-axis-2**32+1": Case("mkcache.softmax(ramp(2, 3), axis=2**32 + 1)"),
    "log_softmax-axis-2**63": Case("mkcache.log_softmax(ramp(2, 3), axis=2**63)"),
    "softmax-axis-2**64+1": Case("mkcache.softmax(ramp(2, 3), axis=2**64 + 1)"),
    "layer_norm-axis-2**32+1": Case("mkcache.layer_norm(ramp(2, 3), begin_norm_axis=2**32 + 1)"),
    "concat-axis-2**32": Case("mkcache.concat([ramp(2, 3), ramp(2, 3)], axis=2**32)"),
    "transpose-axes-(0,2**32+1)": Case("mkcache.transpose(ramp(2, 3), (0, 2**32 + 1))"),
    "transpose-axes-strings": Case("mkcache.transpose(ramp(2, 3), ('1', '0'))"),
    "reshape-(2**64+8,)": Case("mkcache.reshape(ramp(2, 4), (2**64 + 8,))", note="masked to 8"),
    "reshape-floats": Case("mkcache.reshape(ramp(2, 4), (2.9, 4.9))", note="truncated"),
    "reshape-strings": Case("mkcache.reshape(ramp(2, 4), ('2', '4'))"),
    "lrn-size-2**64+5": Case("mkcache.lrn(ramp(1, 8, 3, 3), size=2**64 + 5)"),
    "lrn-size-5.5": Case("mkcache.lrn(ramp(1, 8, 3, 3), size=5.5)"),
    # (3) reshape with a wrapping product of dims
    "reshape-(4,2**62+2)": Case("mkcache.reshape(ramp(2, 4), (4, 2**62 + 2))",
                                note="4 * (2**62 + 2) = 2**64 + 8"),
    "reshape-(4,2**62+3)": Case("mkcache.reshape(ramp(2, 4), (4, 2**62 + 3))"),
    "reshape-(2,2,2**62+1)": Case("mkcache.reshape(ramp(3, 4), (2, 2, 2**62 + 3))",
                                  note="2 * 2 * (2**62 + 3) = 2**64 + 12"),
    "reshape-(2**32,2**32+12)": Case("mkcache.reshape(ramp(3, 4), (2**32, 2**32, 1))"),
    # (11) NUL bytes in names, (10) lone surrogates and other non-mkcache errors
    "relu-name-NUL": Case("mkcache.relu(ramp(2, 3), name='a\\x00b')"),
    "conv2d-name-NUL": Case(_conv(name="'conv\\x00x'")),
    "add-name-NUL": Case("mkcache.add(ramp(2, 3), ramp(2, 3), name='\\x00')"),
    "softmax-name-NUL": Case("mkcache.softmax(ramp(2, 3), name='s\\x00')"),
    "to_layout-NUL": Case("mkcache.to_layout(ramp(1, 3, 4, 5), 'nChw8c\\x00')"),
    "relu-name-surrogate": Case("mkcache.relu(ramp(2, 3), name='a\\udc80b')"),
    "conv2d-name-surrogate": Case(_conv(name="'\\ud800'")),
    "max_pool2d-name-surrogate": Case("mkcache.max_pool2d(ramp(1, 2, 4, 4), 2, name='\\udcff')"),
    "concat-name-surrogate": Case("mkcache.concat([ramp(2, 3)], name='\\udc80')"),
    "to_layout-surrogate": Case("mkcache.to_layout(ramp(1, 3, 4, 5), '\\udc80')"),
    "layer_norm-epsilon-'abc'": Case("mkcache.layer_norm(ramp(2, 3), epsilon='abc')"),
    "layer_norm-epsilon-None": Case("mkcache.layer_norm(ramp(2, 3), epsilon=None)"),
    "batch_norm-momentum-'abc'": Case(
        "mkcache.batch_norm(ramp(2, 3, 4, 4), zeros(3), ones(3), training=True, momentum='abc')"),
    "activation-alpha-'abc'": Case("mkcache.activation(ramp(2, 3), 'leaky_relu', 'abc')"),
    "clip-min-'a'": Case("mkcache.clip(ramp(2, 3), 'a', 1.0)"),
    "clip-min-None": Case("mkcache.clip(ramp(2, 3), None, 1.0)"),
    "lrn-alpha-'abc'": Case("mkcache.lrn(ramp(1, 8, 3, 3), alpha='abc')"),
    "flatten-non-array": Case("mkcache.flatten([1.0, 2.0])"),
    "transpose-non-array": Case("mkcache.transpose([[1.0, 2.0]])"),
    "transpose-axes-None-entries": Case("mkcache.transpose(ramp(2, 3), (None, 0))"),
    "reshape-shape-None-entries": Case("mkcache.reshape(ramp(2, 3), (None, 6))"),
    "conv2d-padding-'same'-bad-x": Case(
        "mkcache.conv2d([[1.0]], ramp(8, 4, 3, 3), padding='same')"),
    "max_pool2d-kernel-list-of-None": Case("mkcache.max_pool2d(ramp(1, 4, 6, 6), [None, None])"),
    # (4) read-only arrays written through out= / residual= / running statistics
    "relu-out-readonly": _ro("mkcache.relu(ramp(2, 3), out=T(buf))", (2, 3), "read-only out"),
    "sigmoid-out-readonly-in-place": Case(
        "mkcache.sigmoid(t, out=t)", setup=(("buf", "readonly(ramp(2, 3))"), ("t", "T(buf)")),
        unchanged=("buf",)),
    "add-out-readonly": _ro("mkcache.add(ramp(2, 3), ramp(2, 3), out=T(buf))", (2, 3), ""),
    "add-out-readonly-b": Case("mkcache.add(ramp(2, 3), t, out=t)",
                               setup=(("buf", "readonly(ramp(2, 3))"), ("t", "T(buf)")),
                               unchanged=("buf",)),
    "conv2d-out-readonly": _ro(_conv(out="T(buf)"), (1, 8, 4, 4), ""),
    "conv2d-residual-readonly": _ro(_conv(residual="T(buf)"), (1, 8, 4, 4), ""),
    "max_pool2d-out-readonly": _ro("mkcache.max_pool2d(ramp(1, 2, 4, 4), 2, out=T(buf))",
                                   (1, 2, 2, 2), ""),
    "matmul-out-readonly": _ro("mkcache.matmul(ramp(2, 3), ramp(3, 4), out=T(buf))", (2, 4), ""),
    "linear-out-readonly": _ro("mkcache.linear(ramp(2, 3), ramp(4, 3), out=T(buf))", (2, 4), ""),
    "softmax-out-readonly": _ro("mkcache.softmax(ramp(2, 3), out=T(buf))", (2, 3), ""),
    "layer_norm-out-readonly": _ro("mkcache.layer_norm(ramp(2, 3), out=T(buf))", (2, 3), ""),
    "concat-out-readonly": _ro("mkcache.concat([ramp(2, 3), ramp(1, 3)], out=T(buf))", (3, 3), ""),
    "batch_norm-running-mean-readonly": _ro(
        "mkcache.batch_norm(ramp(2, 3, 4, 4), buf, ones(3), training=True)", (3,), ""),
    "batch_norm-running-var-readonly": Case(
        "mkcache.batch_norm(ramp(2, 3, 4, 4), zeros(3), var, training=True)",
        setup=(("var", "readonly(ones(3))"),), unchanged=("var",)),
    "batch_norm-running-mean-readonly-tensor": _ro(
        "mkcache.batch_norm(ramp(2, 3, 4, 4), T(buf), ones(3), training=True)", (3,), ""),
    "batch_norm-out-readonly": _ro(
        "mkcache.batch_norm(ramp(2, 3, 4, 4), zeros(3), ones(3), out=T(buf))", (2, 3, 4, 4), ""),
    "lrn-out-readonly": _ro("mkcache.lrn(ramp(1, 8, 3, 3), out=T(buf))", (1, 8, 3, 3), ""),
    # errors that must stay errors (already refused today)
    "conv2d-channels-mismatch": Case("mkcache.conv2d(ramp(1, 5, 6, 6), ramp(8, 4, 3, 3))"),
    "conv2d-groups-mismatch": Case(_conv(groups=3)),
    "conv2d-x-rank-3": Case("mkcache.conv2d(ramp(4, 6, 6), ramp(8, 4, 3, 3))"),
    "conv2d-x-float64": Case(
        "mkcache.conv2d(ramp(1, 4, 6, 6, dtype=np.float64), ramp(8, 4, 3, 3))"),
    "conv2d-x-list": Case("mkcache.conv2d([[1.0]], ramp(8, 4, 3, 3))"),
    "conv2d-kernel-too-large": Case("mkcache.conv2d(ramp(1, 4, 6, 6), ramp(8, 4, 9, 9))"),
    "conv2d-stride-'bogus'": Case(_conv(stride="'bogus'")),
    "pool-padding-not-smaller-than-kernel": Case("mkcache.max_pool2d(ramp(1, 2, 6, 6), 3, 1, 3)"),
    "matmul-inner-mismatch": Case("mkcache.matmul(ramp(2, 3), ramp(4, 2))"),
    "binary-not-broadcastable": Case("mkcache.add(ramp(3, 4), ramp(3, 5))"),
    "binary-complex-scalar": Case("mkcache.mul(ramp(3, 4), 1j)"),
    "binary-out-is-broadcast-operand": Case("mkcache.add(ramp(3, 4), t, out=t)",
                                            setup=(("t", "T(ramp(1, 4))"),)),
    "softmax-axis-2": Case("mkcache.softmax(ramp(2, 3), axis=2)"),
    "concat-empty": Case("mkcache.concat([])"),
    "concat-mismatch-12-inputs": Case("mkcache.concat([ramp(2, 3)] * 11 + [ramp(2, 4)])"),
    "reshape-two-inferred": Case("mkcache.reshape(ramp(2, 4), (-1, -1))"),
    "reshape-rank-7": Case("mkcache.reshape(ramp(2, 4), (1, 1, 1, 1, 1, 2, 4))"),
    "relu-rank-7": Case("mkcache.relu(ramp(1, 1, 1, 1, 1, 2, 4))"),
    "relu-0-d": Case("mkcache.relu(np.array(1.0, np.float32))"),
    "relu-out-numpy": Case("mkcache.relu(ramp(2, 3), out=zeros(2, 3))"),
    "tensor-bad-layout": Case("mkcache.Tensor(ramp(1, 2, 3, 4), 'NCWH')"),
    "tensor-layout-surrogate": Case("mkcache.Tensor(ramp(1, 2, 3, 4), '\\udc80')"),
}


@pytest.mark.parametrize("case", list(NAMED_BAD.values()), ids=list(NAMED_BAD))
def test_named_bad_input(case):
    """Each bad call of the table raises mkcache.Error (and only that),
    modifies nothing it may not write, and the library still works."""
    fs.check_refused(case)


# Bad values, as source text, by what they replace.
BAD_INT = ["0", "-1", "-7", "-2**31", "-2**63", "-2**63 - 1", "2**63", "2**64", "2**64 + 1",
           "2**64 + 2", "2**65 + 3", "2**128 + 1", "1.9", "2.0", "1.0", "0.5", "-1.5",
           "float('nan')", "float('inf')", "'22'", "'2'", "'1'", "b'2'", "None", "1j", "[]",
           "np.float32(2.0)", "np.float64(1.0)", "object()", "dict()", "'bogus'"]
BAD_PAD = ["-1", "-2**63 - 1", "2**63", "2**64", "2**64 + 1", "2**64 + 2", "0.5", "1.5", "1.0",
           "float('nan')", "'22'", "'1'", "b'same'", "'bogus'", "'same\\x00'", "None", "1j",
           "[]", "(1, 2, 3)", "(1,) * 5", "((1, 1), (1, 1))", "np.float64(1.0)", "object()"]
BAD_AXIS = ["{r}", "-{r} - 1", "2**31", "-2**31 - 1", "2**32", "2**32 + 1", "2**63", "2**64",
            "-2**64 + 1", "1.0", "1.5", "'1'", "'0'", "None", "np.float64(1.0)", "[1]", "1j"]
BAD_NAME = ["'a\\x00b'", "'\\x00'", "'\\udc80'", "'x\\ud800y'", "b'name'", "5", "['a']",
            "1.5", "object()"]
BAD_ARRAY = ["None", "[[1.0, 2.0]]", "'abc'", "1.5", "dict()", "object()", "np.float32(1.0)",
             "np.array(1.0, np.float32)", "{a}.astype(np.float64)", "{a}.astype(np.int32)",
             "{a}.astype(np.float16)", "{a} > 0", "{a}.astype(np.complex64)",
             "np.stack([{a}] * 2, -1)[..., 0] if {a}.size > 1 else {a}.astype(np.float64)",
             "np.repeat({a}, 2, axis=-1)[..., ::2] if {a}.size > 1 else None",
             "ones(1, 1, 1, 1, 1, 1, 1)",
             "np.empty((0,) + {a}.shape[1:], np.float32)", "{a}.tolist()"]

BAD_BIAS = [v for v in BAD_ARRAY if v != "None"]  # bias=None means no bias


def _call(function, args, kwargs):
    """Source of a call: function(arg, ..., name=value, ...)."""
    return f"{function}({', '.join(list(args) + [f'{k}={v}' for k, v in kwargs.items()])})"


def _tuple_forms(draw, bad, k):
    form = draw(st.sampled_from(["scalar", "one", "all"]))
    if form == "scalar":
        return bad
    if form == "all":
        return "(" + ", ".join([bad] * k) + ")"
    i = draw(st.integers(0, k - 1))
    return "(" + ", ".join(bad if j == i else "1" for j in range(k)) + ")"


@st.composite
def bad_conv_calls(draw):
    op = draw(st.sampled_from(["conv2d", "conv2d", "conv2d", "conv2d_transpose", "conv3d"]))
    k = 3 if op == "conv3d" else 2
    groups = draw(st.sampled_from([1, 2]))
    c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(2, 3))
    spatial = [draw(st.integers(3, 6)) for _ in range(k)]
    kernel = [draw(st.integers(1, 3)) for _ in range(k)]
    x = f"ramp(2, {c}, {', '.join(map(str, spatial))})"
    w = (f"ramp({c}, {o // groups}, {', '.join(map(str, kernel))})" if op == "conv2d_transpose"
         else f"ramp({o}, {c // groups}, {', '.join(map(str, kernel))})")
    kwargs = {"groups": str(groups)}
    args = [x, w]
    what = draw(st.sampled_from(["stride", "padding", "dilation", "groups", "data_format",
                                 "activation", "name", "x", "weight", "bias", "out", "residual",
                                 "output_padding"]))
    setup, unchanged = (), ()
    bad_pad = [v if (k, v) != (3, "(1, 2, 3)") else "(1, 2)" for v in BAD_PAD]
    if what in ("stride", "dilation"):
        kwargs[what] = _tuple_forms(draw, draw(st.sampled_from(BAD_INT)), k)
    elif what == "padding":
        kwargs[what] = _tuple_forms(draw, draw(st.sampled_from(bad_pad)), k)
    elif what == "groups":
        kwargs[what] = draw(st.sampled_from(["0", "-1", "1.0", "2.5", "'1'", "None", "2**64 + 1",
                                             "2**63", "1j", "[1]", str(c + 1), "2**32 + 1"]))
    elif what == "data_format":
        kwargs[what] = draw(st.sampled_from(["'NCWH'", "''", "'NCHW\\x00'", "'NHWC '", "5",
                                             "None", "b'NCHW'", "'\\udc80'", "['NCHW']"]))
    elif what == "activation":
        kwargs[what] = draw(st.sampled_from(["'bogus'", "5", "'relu\\x00'", "''", "b'relu'",
                                             "'\\udc80'", "['relu']", "'RELU '"]))
    elif what == "name":
        kwargs[what] = draw(st.sampled_from(BAD_NAME))
    elif what == "x":
        sp = ", ".join(map(str, spatial))
        args[0] = draw(st.sampled_from(BAD_ARRAY + [f"ramp(2, {c + 1}, {sp})",
                                                    f"ramp({c}, {sp})"])).format(a=x)
    elif what == "weight":
        ks = ", ".join(map(str, kernel))
        wrong = ([f"ramp({c + 1}, {o // groups}, {ks})", f"ramp({c}, {o // groups})"]
                 if op == "conv2d_transpose" else
                 [f"ramp({o}, {c // groups + 1}, {ks})", f"ramp({o}, {c // groups})",
                  f"ramp({o}, {c // groups}, {', '.join(str(s + 9) for s in spatial)})"])
        args[1] = draw(st.sampled_from(BAD_ARRAY + wrong)).format(a=w)
    elif what == "bias":
        args.append(draw(st.sampled_from(BAD_BIAS + [f"ramp({o + 1})", f"ramp({o}, 1)",
                                                      f"ramp(1)", f"[0.0] * {o}"]
                                         )).format(a=f"ramp({o})"))
    elif what in ("out", "residual") and op == "conv2d":
        out_shape = (2, o) + tuple(s - kk + 1 for s, kk in zip(spatial, kernel))
        choice = draw(st.sampled_from(["readonly", "numpy", "wrong", "string", "both"]))
        if choice == "readonly":
            setup, unchanged = (("buf", f"readonly(zeros{out_shape})"),), ("buf",)
            kwargs[what] = "T(buf)"
        elif choice == "numpy" and what == "out":
            kwargs[what] = f"zeros{out_shape}"
        elif choice in ("wrong", "numpy"):
            wrong = out_shape[:-1] + (out_shape[-1] + 1,)
            kwargs[what] = f"T(zeros{wrong})"
        elif choice == "string":
            kwargs[what] = "'out'"
        else:
            kwargs["out"] = f"T(zeros{out_shape})"
            kwargs["residual"] = f"T(zeros{out_shape})"
    elif what == "output_padding" and op == "conv2d_transpose":
        kwargs[what] = _tuple_forms(draw, draw(st.sampled_from(
            ["2", "-1", "1.5", "'1'", "2**64", "2**64 + 1", "None", "1j"])), k)
        kwargs["stride"] = "2"
    else:
        kwargs["padding"] = "'same'" if op == "conv2d_transpose" else \
            _tuple_forms(draw, draw(st.sampled_from(bad_pad)), k)
    if op == "conv2d_transpose" and "output_padding" not in kwargs and draw(st.booleans()):
        kwargs["output_padding"] = "0"
    call = _call(f"mkcache.{op}", args, kwargs)
    return Case(call, setup=setup, unchanged=unchanged, note=f"bad {what}")


@fuzz(150)
@given(case=bad_conv_calls())
def test_bad_conv(case):
    fs.check_refused(case)


@st.composite
def bad_pool_calls(draw):
    op = draw(st.sampled_from(["max_pool2d", "avg_pool2d", "max_pool3d", "avg_pool3d"]))
    k = 3 if op.endswith("3d") else 2
    spatial = [draw(st.integers(4, 7)) for _ in range(k)]
    c = draw(st.sampled_from([1, 3, 17]))
    x = f"ramp(2, {c}, {', '.join(map(str, spatial))})"
    args, kwargs = [x, "3"], {}
    what = draw(st.sampled_from(["kernel", "stride", "padding", "data_format", "name", "x",
                                 "out"]))
    setup, unchanged = (), ()
    if what == "kernel":
        too_large = str(max(spatial) + 3)
        args[1] = _tuple_forms(draw, draw(st.sampled_from(BAD_INT + [too_large])), k)
        if draw(st.booleans()):
            args[1] = draw(st.sampled_from(["(3,) * 4", "(3,)", "()", "[None]", "'3'"]))
    elif what == "stride":
        bad = draw(st.sampled_from([v for v in BAD_INT if v != "None"]))
        args.append(_tuple_forms(draw, bad, k))
    elif what == "padding":
        args += ["1", _tuple_forms(draw, draw(st.sampled_from(BAD_PAD + ["3", "4"])), k)]
    elif what == "data_format":
        kwargs["data_format"] = draw(st.sampled_from(["'NCWH'", "''", "'NCHW\\x00'", "5",
                                                      "None", "'\\udc80'"]))
    elif what == "name":
        kwargs["name"] = draw(st.sampled_from(BAD_NAME))
    elif what == "x":
        wrong = ["ramp(2, 3, 6)", "ramp(2, 3, 2, 2)"]
        args[0] = draw(st.sampled_from(BAD_ARRAY + wrong)).format(a=x)
    else:
        out_shape = (2, c) + tuple(s // 3 for s in spatial)
        choice = draw(st.sampled_from(["readonly", "numpy", "wrong"]))
        if choice == "readonly":
            setup, unchanged = (("buf", f"readonly(zeros{out_shape})"),), ("buf",)
            kwargs["out"] = "T(buf)"
        elif choice == "numpy":
            kwargs["out"] = f"zeros{out_shape}"
        else:
            kwargs["out"] = f"T(zeros{out_shape[:-1] + (out_shape[-1] + 1,)})"
    call = _call(f"mkcache.{op}", args, kwargs)
    return Case(call, setup=setup, unchanged=unchanged, note=f"bad {what}")


@fuzz(100)
@given(case=bad_pool_calls())
def test_bad_pool(case):
    fs.check_refused(case)


@st.composite
def bad_linear_algebra_calls(draw):
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(2, 5))
    a, b = f"ramp({m}, {k})", f"ramp({k}, {n})"
    setup, unchanged = (), ()
    if draw(st.booleans()):  # matmul
        what = draw(st.sampled_from(["a", "b", "inner", "batch", "bias", "activation", "name",
                                     "out", "rank1"]))
        args, kwargs = [a, b], {}
        if what == "a":
            args[0] = draw(st.sampled_from(BAD_ARRAY)).format(a=a)
        elif what == "b":
            args[1] = draw(st.sampled_from(BAD_ARRAY)).format(a=b)
        elif what == "inner":
            args[1] = f"ramp({k + 1}, {n})"
        elif what == "batch":
            args = [f"ramp(2, {m}, {k})", f"ramp(3, {k}, {n})"]
        elif what == "rank1":
            args[draw(st.integers(0, 1))] = f"ramp({k})"
        elif what == "bias":
            args.append(draw(st.sampled_from(BAD_BIAS + [f"ramp({n + 1})", f"ramp({n}, 2)"]))
                        .format(a=f"ramp({n})"))
        elif what == "activation":
            kwargs["activation"] = draw(st.sampled_from(["'bogus'", "5", "'relu\\x00'"]))
        elif what == "name":
            kwargs["name"] = draw(st.sampled_from(BAD_NAME))
        else:
            choice = draw(st.sampled_from(["readonly", "numpy", "wrong"]))
            if choice == "readonly":
                setup, unchanged = (("buf", f"readonly(zeros({m}, {n}))"),), ("buf",)
                kwargs["out"] = "T(buf)"
            elif choice == "numpy":
                kwargs["out"] = f"zeros({m}, {n})"
            else:
                kwargs["out"] = f"T(zeros({m}, {n + 1}))"
        call = _call("mkcache.matmul", args, kwargs)
    else:  # linear: x [m, k] @ w [n, k]^T
        what = draw(st.sampled_from(["x", "weight", "in", "bias", "activation", "name", "out"]))
        args, kwargs = [a, f"ramp({n}, {k})"], {}
        if what == "x":
            args[0] = draw(st.sampled_from(BAD_ARRAY)).format(a=a)
        elif what == "weight":
            args[1] = draw(st.sampled_from(BAD_ARRAY + [f"ramp({n}, {k}, 1)", f"ramp({k})"])
                           ).format(a=args[1])
        elif what == "in":
            args[1] = f"ramp({n}, {k + 1})"
        elif what == "bias":
            args.append(draw(st.sampled_from(BAD_BIAS + [f"ramp({n + 1})", f"ramp({n}, 2)"]))
                        .format(a=f"ramp({n})"))
        elif what == "activation":
            kwargs["activation"] = draw(st.sampled_from(["'bogus'", "5", "'relu\\x00'"]))
        elif what == "name":
            kwargs["name"] = draw(st.sampled_from(BAD_NAME))
        else:
            setup, unchanged = (("buf", f"readonly(zeros({m}, {n}))"),), ("buf",)
            kwargs["out"] = "T(buf)"
        call = _call("mkcache.linear", args, kwargs)
    return Case(call, setup=setup, unchanged=unchanged, note=f"bad {what}")


@fuzz(80)
@given(case=bad_linear_algebra_calls())
def test_bad_matmul_linear(case):
    fs.check_refused(case)


@st.composite
def bad_binary_calls(draw):
    op = draw(st.sampled_from(sorted(BINARY)))
    shape = _shape_list(draw, draw(st.integers(1, 4)), 2, 4)
    a = f"ramp{shape}" if len(shape) > 1 else f"ramp({shape[0]})"
    b = a
    what = draw(st.sampled_from(["a", "b", "scalar", "broadcast", "name", "out"]))
    setup, unchanged, kwargs = (), (), {}
    args = [a, b]
    if what in ("a", "b"):  # (a Python or numpy number is a valid operand)
        bad = [v for v in BAD_ARRAY if v not in ("1.5", "np.float32(1.0)")]
        args[0 if what == "a" else 1] = draw(st.sampled_from(bad)).format(a=a)
    elif what == "scalar":
        args[1] = draw(st.sampled_from(["True", "1j", "'2'", "b'2'", "None", "[2.0]", "(2.0,)",
                                        "object()"]))
    elif what == "broadcast":
        bad = list(shape)
        bad[-1] += 1
        args[1] = f"ramp{tuple(bad)}"
    elif what == "name":
        kwargs["name"] = draw(st.sampled_from(BAD_NAME))
    else:
        choice = draw(st.sampled_from(["readonly", "readonly_alias", "numpy", "wrong",
                                       "broadcast_operand"]))
        if choice == "readonly":
            setup, unchanged = (("buf", f"readonly(zeros{shape})"),), ("buf",)
            kwargs["out"] = "T(buf)"
        elif choice == "readonly_alias":
            setup = (("buf", f"readonly(ramp{shape})"), ("t", "T(buf)"))
            unchanged = ("buf",)
            args[draw(st.integers(0, 1))] = "t"
            kwargs["out"] = "t"
        elif choice == "numpy":
            kwargs["out"] = f"zeros{shape}"
        elif choice == "wrong":
            kwargs["out"] = f"T(zeros{shape + (2,)})"
        else:
            small = (1,) * (len(shape) - 1) + (shape[-1],)
            setup = (("t", f"T(ramp{small})"),)
            args[1] = "t"
            kwargs["out"] = "t"
            if small == shape:
                kwargs["out"] = "'t'"
    call = _call(f"mkcache.{op}", args, kwargs)
    return Case(call, setup=setup, unchanged=unchanged, note=f"bad {what}")


@fuzz(100)
@given(case=bad_binary_calls())
def test_bad_binary(case):
    fs.check_refused(case)


@st.composite
def bad_axis_calls(draw):
    """softmax / log_softmax / layer_norm / concat / flatten / transpose with a
    bad axis, and the norms' other scalar arguments."""
    rank = draw(st.integers(1, 4))
    shape = _shape_list(draw, rank, 2, 4)
    x = f"ramp{shape}" if rank > 1 else f"ramp({shape[0]})"
    bad = draw(st.sampled_from(BAD_AXIS)).format(r=rank)
    op = draw(st.sampled_from(["softmax", "log_softmax", "layer_norm", "concat", "flatten",
                               "transpose", "layer_norm_args", "lrn", "batch_norm"]))
    setup, unchanged = (), ()
    if op in ("softmax", "log_softmax"):
        call = f"mkcache.{op}({x}, axis={bad})"
    elif op == "layer_norm":
        call = f"mkcache.layer_norm({x}, begin_norm_axis={bad})"
    elif op == "concat":
        call = f"mkcache.concat([{x}, {x}], axis={bad})"
    elif op == "flatten":
        call = f"mkcache.flatten({x}, {bad})"
    elif op == "transpose":
        perm = list(range(rank))
        perm[draw(st.integers(0, rank - 1))] = bad
        if rank > 1 and draw(st.booleans()):
            perm = [0] * rank  # not a permutation
        call = f"mkcache.transpose({x}, ({', '.join(map(str, perm))},))"
    elif op == "layer_norm_args":
        what = draw(st.sampled_from(["epsilon", "scale", "name"]))
        if what == "epsilon":
            eps = draw(st.sampled_from(["'1e-5'", "'abc'", "[1e-5]", "1j", "None", "object()"]))
            call = f"mkcache.layer_norm({x}, epsilon={eps})"
        elif what == "scale":
            call = f"mkcache.layer_norm({x}, ramp({shape[-1] + 1}))"
        else:
            call = f"mkcache.layer_norm({x}, name={draw(st.sampled_from(BAD_NAME))})"
    elif op == "lrn":
        size = draw(st.sampled_from(["0", "-1", "1.5", "'5'", "2**64 + 5", "None"]))
        call = f"mkcache.lrn(ramp(1, 5, 3, 3), size={size})"
    else:
        what = draw(st.sampled_from(["epsilon", "momentum", "data_format", "mean", "name"]))
        value = {"epsilon": "'abc'", "momentum": "'abc'", "data_format": "'NCWH'",
                 "mean": None, "name": "'bn\\x00'"}[what]
        if what == "mean":
            call = "mkcache.batch_norm(ramp(2, 3, 4, 4), zeros(4), ones(3))"
        else:
            call = f"mkcache.batch_norm(ramp(2, 3, 4, 4), zeros(3), ones(3), {what}={value})"
    return Case(call, setup=setup, unchanged=unchanged, note=op)


@fuzz(100)
@given(case=bad_axis_calls())
def test_bad_axis_and_norms(case):
    fs.check_refused(case)


@st.composite
def bad_shape_calls(draw):
    """reshape targets that are not the element count (also through wrapping
    products, masked huge ints, floats, strings), concat and to_layout
    misuse, activations' bad parameters."""
    what = draw(st.sampled_from(["reshape", "reshape_wrap", "concat", "to_layout", "activation",
                                 "tensor"]))
    if what in ("reshape", "reshape_wrap"):
        dims = _shape_list(draw, draw(st.integers(1, 4)), 1, 4)
        size = int(np.prod(dims)) * 4
        x = f"ramp({size})"
        if what == "reshape_wrap":
            # Dims < 2**63 whose product is size + 2**64: it wraps to size.
            wrapped = 2 ** 64 + size  # size is a multiple of 4: 4 divides it
            small = [a for a in range(2, 4096) if wrapped % a == 0 and wrapped // a < 2 ** 63]
            a = draw(st.sampled_from(small))
            parts = [a, wrapped // a]
            rest = [b for b in range(2, 64) if parts[1] % b == 0]
            if rest and draw(st.booleans()):  # three dims
                b = draw(st.sampled_from(rest))
                parts = [a, b, parts[1] // b]
            if draw(st.booleans()):
                parts.append(1)
            target = "(" + ", ".join(map(str, draw(st.permutations(parts)))) + ")"
        else:
            good = list(dims[:-1]) + [dims[-1] * 4]
            i = draw(st.integers(0, len(good) - 1))
            bad = draw(st.sampled_from(["-2", "0", "2**64 + {d}", "{d} + 0.9", "'{d}'", "None",
                                        "{d} + 1", "2**63", "-2**63", "[{d}]", "float('nan')"]))
            good[i] = bad.format(d=good[i])
            target = "(" + ", ".join(map(str, good)) + ",)"
            if draw(st.integers(0, 4)) == 0:
                target = draw(st.sampled_from(["None", "'abc'", "(-1, -1)", "(1,) * 6 + (-1,)",
                                               "5.0", "object()"]))
        call = f"mkcache.reshape({x}, {target})"
    elif what == "concat":
        n = draw(st.integers(2, 14))  # (one input of any shape is a valid concat)
        axis = draw(st.sampled_from(["0", "1", "-1"]))
        items = ["ramp(2, 3)"] * n
        mismatch = "ramp(2, 4)" if axis == "0" else "ramp(3, 3)"
        items[draw(st.integers(0, n - 1))] = draw(st.sampled_from(
            BAD_ARRAY + [mismatch, "ramp(2, 3, 1)", "ramp(6)"])).format(a="ramp(2, 3)")
        call = f"mkcache.concat([{', '.join(items)}], axis={axis})"
        if draw(st.integers(0, 5)) == 0:
            bad = draw(st.sampled_from(["None", "5", "'abc'", "[]", "()", "object()"]))
            call = f"mkcache.concat({bad})"
    elif what == "to_layout":
        layout = draw(st.sampled_from(["'nChw4c'", "''", "'nChw8c\\x00'", "'\\udc80'", "5",
                                       "None", "b'NCHW'", "'nchw8c '", "'nCdhw8c'"]))
        call = f"mkcache.to_layout(ramp(1, 3, 4, 5), {layout})"
    elif what == "activation":
        call = draw(st.sampled_from([
            "mkcache.activation(ramp(2, 3), 'bogus')", "mkcache.activation(ramp(2, 3), None)",
            "mkcache.activation(ramp(2, 3), 5)", "mkcache.activation(ramp(2, 3), 'relu\\x00')",
            "mkcache.activation(ramp(2, 3), 'elu', 'abc')",
            "mkcache.activation(ramp(2, 3), 'elu', [1.0])",
            "mkcache.activation(ramp(2, 3), 'clip', 0.0, 'x')",
            "mkcache.clip(ramp(2, 3), 2.0, 1.0)", "mkcache.clip(ramp(2, 3), 'a', 'b')",
            "mkcache.clip(ramp(2, 3), float('nan'), 1.0)", "mkcache.leaky_relu(ramp(2, 3), 'x')",
            "mkcache.gelu(ramp(2, 3), approximate='fast')", "mkcache.relu(ramp(2, 3), out='x')",
            "mkcache.sigmoid(ramp(2, 3), out=T(zeros(3, 2)))",
            "mkcache.relu(ramp(2, 3), name='\\udc80')", "mkcache.tanh(ramp(2, 3), name='t\\x00')",
            "mkcache.relu(ramp(2, 3).astype(np.float64))", "mkcache.relu([1.0, -1.0])",
            "mkcache.relu(None)", "mkcache.exp(ramp(2, 3)[:, ::2])",
            "mkcache.sqrt(ones(1, 1, 1, 1, 1, 1, 1))"]))
    else:
        call = draw(st.sampled_from([
            "mkcache.Tensor(None)", "mkcache.Tensor([1.0, 2.0])",
            "mkcache.Tensor(ramp(2, 3).astype(np.float64))",
            "mkcache.Tensor(ramp(2, 3, 4, 5), 'NCWH')",
            "mkcache.Tensor(ramp(2, 3, 4, 5), 5)", "mkcache.Tensor(ramp(2, 3, 4, 5), '\\udc80')",
            "mkcache.Tensor(np.empty((2, 0), np.float32))",
            "mkcache.Tensor(ones(1, 1, 1, 1, 1, 1, 1))",
            "mkcache.Tensor(ramp(4, 4)[::2])"]))
    return Case(call, note=what)


@fuzz(100)
@given(case=bad_shape_calls())
def test_bad_shape_ops_and_parameters(case):
    fs.check_refused(case)
