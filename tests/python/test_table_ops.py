"""Operators that exist only through the operator table - erf and round
(reference kernels) and reduce_sum / _mean / _max / _min (oneDNN's
reduction primitive for sum and mean, and a reference kernel) - eager, in
graphs and from C, against float64 numpy on odd shapes in both layouts."""
from __future__ import annotations

import contextlib
import ctypes
import math
import re

import numpy as np
import pytest

import mkcache
from mkcache import _capi

RNG = np.random.default_rng(23)
_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def nhwc(a):
    """`a` (NCHW values) as an NHWC tensor: the same values, the caller's
    shape [N, H, W, C]."""
    return mkcache.Tensor(np.ascontiguousarray(np.moveaxis(a, 1, -1)), layout="NHWC")


# ------------------------------------------------------------------- erf

ERF_EDGES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-3, 0.5, 0.9, 1.0, 2.0, 3.9, 4.0, 6.0, 10.0,
                      -10.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38], dtype=np.float32)


@pytest.mark.parametrize("shape", [(7,), (3, 5, 11), (2, 17, 5, 3)])
def test_erf_matches_float64(shape):
    x = rand(*shape) * 3
    y = mkcache.erf(x).numpy()
    ref = _erf64(x.astype(np.float64))
    # The kernel rounds erf computed in double once: within one float ulp.
    np.testing.assert_allclose(y, ref, rtol=2 ** -23, atol=1e-38)


def test_erf_edges():
    y = mkcache.erf(ERF_EDGES).numpy()
    ref = _erf64(ERF_EDGES.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(y, ref)  # nan compares equal here too


def test_erf_channels_last_keeps_the_layout():
    a = rand(2, 17, 5, 3)
    y = mkcache.erf(nhwc(a))
    assert y.layout == "NHWC" and y.shape == (2, 5, 3, 17)
    np.testing.assert_allclose(y.numpy(layout="NCHW"), _erf64(a), rtol=2 ** -23)


def test_erf_out_and_aliasing():
    a = rand(3, 5)
    out = mkcache.Tensor(np.zeros((3, 5), np.float32))
    assert mkcache.erf(a, out=out) is out
    np.testing.assert_allclose(out.numpy(), _erf64(a), rtol=2 ** -23)
    # The output over its own input: computed as if apart.
    t = mkcache.Tensor(a.copy())
    mkcache.erf(t, out=t)
    np.testing.assert_allclose(t.numpy(), _erf64(a), rtol=2 ** -23)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"erf: dst's shape \[5, 3\]"):
        mkcache.erf(a, out=mkcache.Tensor(np.zeros((5, 3), np.float32)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_erf_in_a_graph(layout):
    a = rand(2, 6, 5, 3)
    x_in = np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a
    with mkcache.Graph() as g:
        x = g.input("x", x_in.shape, layout=layout)
        g.output(g.erf(g.relu(x)), "y")
        with g.compile() as prog:
            y = prog.run(x=x_in)["y"]
            plan = prog.plan()
        # No oneDNN primitive: the reference kernel, and the plan says why.
        assert "(erf) reference (priority; onednn: no oneDNN primitive is bound for erf)" in plan
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"node 1 \(erf\): implementation 'onednn' was asked for"):
            g.compile(impl={"erf": "onednn"})
    ref = _erf64(np.maximum(x_in, 0))
    np.testing.assert_allclose(y, ref, rtol=2 ** -23, atol=1e-38)


# ------------------------------------------------------------------ round

ROUND_EDGES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 0.0, -0.0,
                        -0.4, 1e-45, 3.7, -3.7, 4194303.5, 4194304.5, 8388607.5, -8388607.5,
                        8388608.0, 8388609.0, 16777217.0, 3.4e38, -3.4e38, np.inf, -np.inf,
                        np.nan], dtype=np.float32)


def assert_same_floats(got, want):
    """Equal to the bit (the sign of a zero, NaN where NaN)."""
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def test_round_is_rint_to_the_bit():
    # Ties to even, -0 kept, integers past 2^23 and the special values
    # unchanged; then every kind of float: random bit patterns.
    assert_same_floats(mkcache.round(ROUND_EDGES).numpy(), np.rint(ROUND_EDGES))
    bits = RNG.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[~np.isnan(x)]  # NaN payloads: numpy may quiet them
    assert_same_floats(mkcache.round(x).numpy(), np.rint(x))
    halves = (RNG.integers(-2 ** 23, 2 ** 23, 4099) + 0.5).astype(np.float32)
    assert_same_floats(mkcache.round(halves).numpy(), np.rint(halves))


def test_round_layout_out_and_a_graph():
    a = rand(2, 17, 5, 3) * 4
    y = mkcache.round(nhwc(a))
    assert y.layout == "NHWC" and y.shape == (2, 5, 3, 17)
    assert_same_floats(y.numpy(layout="NCHW"), np.rint(a))
    t = mkcache.Tensor(a.copy())
    assert mkcache.round(t, out=t) is t
    assert_same_floats(t.numpy(), np.rint(a))
    with mkcache.Graph() as g:
        x = g.input("x", (None, 17, 5, 3))
        g.output(g.round(g.mul(x, 2.0)), "y")
        with g.compile() as prog:
            for n in (2, 3):
                b = rand(n, 17, 5, 3)
                assert_same_floats(prog.run(x=b)["y"], np.rint(b * 2))
            assert "(round) reference" in prog.plan()
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"input 0 \(src\) is int32; round takes float32"):
        mkcache.round(np.arange(4, dtype=np.int32))


# ---------------------------------------------------------------- reduce

REDUCES = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
AXES = [None, 0, 1, -1, (0, 2), (1, -1), (0, 1, 2)]


def reference(kind, a, axes, keepdims):
    r = REDUCES[kind](a.astype(np.float64), axis=axes, keepdims=keepdims)
    r = np.asarray(r)
    return r.reshape(1) if r.ndim == 0 else r


def tolerance(kind, a, axes):
    # Sums in float32 by oneDNN: a few ulps of the sum of magnitudes.
    if kind in ("max", "min"):
        return 0.0
    n = a.size if axes is None else np.prod([a.shape[i] for i in np.atleast_1d(axes)])
    return 4 * np.finfo(np.float32).eps * max(1.0, math.log2(n)) * float(np.abs(a).max()) * n


@pytest.mark.parametrize("kind", list(REDUCES))
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_eager_matches_float64(kind, axes, keepdims):
    a = rand(3, 5, 7)
    fn = getattr(mkcache, f"reduce_{kind}")
    y = fn(a, axes=axes, keepdims=keepdims).numpy()
    ref = reference(kind, a, axes, keepdims)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=tolerance(kind, a, axes))


@pytest.mark.parametrize("kind", list(REDUCES))
@pytest.mark.parametrize("axes", [1, (2, 3), (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_channels_last(kind, axes, keepdims):
    a = rand(2, 17, 5, 3)  # NCHW values
    t = nhwc(a)  # axes count in the tensor's own order: N, H, W, C
    fn = getattr(mkcache, f"reduce_{kind}")
    y = fn(t, axes=axes, keepdims=keepdims)
    ref = reference(kind, np.moveaxis(a, 1, -1), axes, keepdims)
    assert y.shape == ref.shape
    # Kept axes keep the layout; dropped ones leave a channels-first result.
    assert (y.layout == "NHWC") == keepdims
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6,
                               atol=tolerance(kind, a, axes))


@pytest.mark.parametrize("kind,impl", [(k, "reference") for k in REDUCES] +
                         [("sum", "onednn"), ("mean", "onednn")])
def test_reduce_in_a_graph_both_implementations(kind, impl):
    """Max and min run on the reference kernel only (see below)."""
    a = rand(2, 6, 5, 3)
    with mkcache.Graph() as g:
        x = g.input("x", (None, 6, 5, 3))
        y = getattr(g, f"reduce_{kind}")(g.relu(x), axes=(2, 3), keepdims=True, name="r")
        g.output(g.reduce_mean(y, axes=1), "y")
        with g.compile(impl={"reduce": impl}) as prog:
            got = prog.run(x=a)["y"]
            assert f"(reduce 'r') {impl}" in prog.plan()
    inner = REDUCES[kind](np.maximum(a, 0).astype(np.float64), axis=(2, 3), keepdims=True)
    ref = inner.mean(axis=1)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-5)


def test_reduce_reference_kernel_propagates_nan():
    a = rand(3, 4)
    a[1, 2] = np.nan
    with mkcache.Graph() as g:
        x = g.input("x", a.shape)
        g.output(g.reduce_max(x, axes=1), "max")
        g.output(g.reduce_sum(x, axes=1), "sum")
        with g.compile(impl={"reduce": "reference"}) as prog:
            out = prog.run(x=a)
    for name in ("max", "sum"):
        assert np.isnan(out[name][1]) and not np.isnan(out[name][[0, 2]]).any()


def test_reduce_bad_arguments():
    a = rand(3, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match="reduce: axis 2 is out of range"):
        mkcache.reduce_sum(a, axes=2)
    with pytest.raises(mkcache.InvalidArgumentError, match="reduce: axis -1 is given twice"):
        mkcache.reduce_sum(a, axes=(1, -1))
    with pytest.raises(mkcache.InvalidArgumentError, match="axes must be None, an int"):
        mkcache.reduce_mean(a, axes="1")
    with pytest.raises(mkcache.InvalidArgumentError, match="axes must be None, an int"):
        mkcache.reduce_mean(a, axes=())
    with pytest.raises(mkcache.InvalidArgumentError, match="keepdims must be a bool"):
        mkcache.reduce_max(a, keepdims=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="reduce: naxes must be 0..2"):
        mkcache.reduce_min(a, axes=(0, 1, 0))
    with mkcache.Graph() as g:
        x = g.input("x", (3, 4))
        g.output(g.reduce_sum(x, axes=5), "y")
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"node 0 \(reduce\): reduce: axis 5 is out of range"):
            g.compile()
    # Nothing was lost: the same calls with good arguments work.
    assert mkcache.reduce_sum(a, axes=1).shape == (3,)


def test_reduce_cache_names_keep_calls_apart():
    a = rand(4, 6)
    # One name, two kinds: two entries, each call its own result.
    s = mkcache.reduce_sum(a, axes=1, name="r").numpy()
    m = mkcache.reduce_max(a, axes=1, name="r").numpy()
    np.testing.assert_allclose(s, a.astype(np.float64).sum(1), rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(m, a.max(1))


# ------------------------------------------------------------------ mkc_op_run

def _op_run(op, params, inputs):
    arr = (_capi.tensor_p * len(inputs))(*[t.handle if t is not None else None for t in inputs])
    dst = _capi.tensor_p()
    status = _capi.lib["mkc_op_run"]
    status.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_capi.tensor_p),
                       ctypes.POINTER(_capi.tensor_p)]
    status.restype = ctypes.c_int
    rc = status(op, params, len(inputs), arr, ctypes.byref(dst))
    return rc, dst


def test_op_run_refuses_bad_calls():
    t = mkcache.Tensor(rand(3, 4))
    rc, dst = _op_run(999, None, [t])
    assert rc != 0 and "op_run: unknown operator 999" in _capi.lib.mkc_last_error().decode()
    assert not dst.value
    p = _capi.ReduceParams()
    _capi.lib.mkc_reduce_params_init(ctypes.byref(p))
    rc, _ = _op_run(_capi.OPS["erf"], ctypes.addressof(p), [t])
    assert rc != 0 and "op_run (erf): takes no params" in _capi.lib.mkc_last_error().decode()
    rc, _ = _op_run(_capi.OPS["reduce"], None, [t])
    assert rc != 0 and "op_run (reduce): params is NULL" in _capi.lib.mkc_last_error().decode()
    rc, _ = _op_run(_capi.OPS["erf"], None, [None])
    assert rc != 0 and "erf: input 0 is required" in _capi.lib.mkc_last_error().decode()
    rc, _ = _op_run(_capi.OPS["erf"], None, [t, t])
    assert rc != 0 and "erf: takes 1 inputs, got 2" in _capi.lib.mkc_last_error().decode()
    rc, _ = _op_run(_capi.OPS["round"], ctypes.addressof(p), [t])
    assert rc != 0 and "op_run (round): takes no params" in _capi.lib.mkc_last_error().decode()
    # Other operators of the table run through it too, as their nodes do.
    rc, dst = _op_run(_capi.OPS["activation"], None, [t])
    assert rc != 0 and "op_run (activation): params is NULL" in _capi.lib.mkc_last_error().decode()


@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_in_a_graph_channels_last(keepdims):
    a = rand(2, 17, 5, 3)  # NCHW values
    w = rand(6, 17, 3, 3)
    x_in = np.ascontiguousarray(np.moveaxis(a, 1, -1))  # [N, H, W, C]
    with mkcache.Graph() as g:
        x = g.input("x", x_in.shape, layout="NHWC")
        # After a channels-last conv, whose output may be blocked: the
        # reduction reads it plain in its label (a converter if need be).
        y = g.conv2d(x, w, padding=1, data_format="NHWC")
        g.output(g.reduce_mean(y, axes=(1, 2), keepdims=keepdims), "y")
        with g.compile() as prog:
            got = prog.run(x=x_in)["y"]
    conv = mkcache.conv2d(nhwc(a), w, padding=1, data_format="NHWC").numpy()  # NHWC
    ref = conv.astype(np.float64).mean(axis=(1, 2), keepdims=keepdims)
    assert got.shape == ref.shape == ((2, 1, 1, 6) if keepdims else (2, 6))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ gather

@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis,indices", [(0, [[3, 0, 3], [-1, 1, 2]]), (1, [2, -5]),
                                          (-1, [[0], [6]]), (2, 0)])
def test_gather_matches_numpy(index_dtype, axis, indices):
    data = rand(4, 5, 7)
    idx = np.array(indices, dtype=index_dtype)
    want = np.take(data, idx, axis=axis)
    got = mkcache.gather(data, idx if idx.ndim else idx.reshape(1), axis=axis).numpy()
    np.testing.assert_array_equal(got, want if idx.ndim else np.take(data, idx.reshape(1),
                                                                      axis=axis))


def test_gather_embedding_in_a_graph():
    table = rand(11, 6)
    with mkcache.Graph() as g:
        ids = g.input("ids", (None, None), dtype="int64")
        e = g.gather(table, ids, name="embed")
        g.output(g.layer_norm(e), "y")
        with g.compile() as prog:
            for shape in ((1, 4), (3, 9)):
                i = RNG.integers(-11, 11, size=shape)
                e_ref = table[i].astype(np.float64)
                mean = e_ref.mean(-1, keepdims=True)
                ref = (e_ref - mean) / np.sqrt(e_ref.var(-1, keepdims=True) + 1e-5)
                np.testing.assert_allclose(prog.run(ids=i)["y"], ref, rtol=1e-5, atol=1e-5)
            assert "(gather 'embed') reference" in prog.plan()
            # An index out of range fails the run, naming it; the next run works.
            with pytest.raises(mkcache.InvalidArgumentError,
                               match="gather: index 11 is out of range for a dim of 11"):
                prog.run(ids=np.array([[0, 11]]))
            assert prog.run(ids=np.array([[0, 10]]))["y"].shape == (1, 2, 6)


def test_gather_refuses_float_indices_naming_the_port():
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"input 1 \(indices\) is float32; gather takes int32 or int64 there"):
        mkcache.gather(rand(4, 3), np.array([1.0], np.float32))
    with mkcache.Graph() as g:
        x = g.input("x", (2,))
        g.output(g.gather(rand(4, 3), x), "y")
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"node 0 \(gather\): input 1 \(indices\) is float32"):
            g.compile()
    with pytest.raises(mkcache.InvalidArgumentError, match="gather: axis 2 is out of range"):
        mkcache.gather(rand(4, 3), np.array([1]), axis=2)


# ------------------------------------------------------------- cast, where

CAST_VALUES = np.array([-2.7, -0.5, -0.0, 0.5, 3.9, np.nan, 1e20, -1e20, 2.5e9], np.float32)


def _numpy_cast(a, dtype):
    """The library's rule in numpy: truncation toward zero, saturated, NaN
    to 0; to bool: not zero (NaN is not zero)."""
    if np.dtype(dtype) == np.bool_:
        return (a != 0) | np.isnan(a) if a.dtype.kind == "f" else a != 0
    if np.dtype(dtype).kind == "i" and a.dtype.kind == "f":
        info = np.iinfo(dtype)
        # Element by element in Python ints: float64 cannot hold int64's max.
        return np.array([0 if np.isnan(v) else max(info.min, min(info.max, int(v)))
                         for v in a.astype(np.float64)], dtype=dtype)
    return a.astype(dtype)


@pytest.mark.parametrize("to", [np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("source", ["float32", "int32", "int64", "bool"])
def test_cast_every_pair(source, to):
    if source == "float32":
        a = CAST_VALUES
    elif source == "bool":
        a = np.array([True, False, True])
    else:
        a = np.array([-7, 0, 3, 2 ** 31 - 1, -2 ** 31], dtype=source)
    got = mkcache.cast(a, to).numpy()
    assert got.dtype == np.dtype(to)
    np.testing.assert_array_equal(got, _numpy_cast(a, to))


def test_int64_survives_cast_to_itself_exactly():
    a = np.array([2 ** 62 + 1, -(2 ** 53) - 1], np.int64)
    np.testing.assert_array_equal(mkcache.cast(a, np.int64).numpy(), a)


def test_where_broadcasts_three_ways():
    cond = RNG.random((3, 1, 5)) > 0.5
    x, y = rand(4, 5), rand(3, 4, 1)
    np.testing.assert_array_equal(mkcache.where(cond, x, y).numpy(), np.where(cond, x, y))
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"input 0 \(condition\) is float32; where takes bool"):
        mkcache.where(x, x, y)
    with pytest.raises(mkcache.InvalidArgumentError, match="do not broadcast"):
        mkcache.where(cond, rand(4, 6), y)


def test_typed_values_flow_through_a_graph():
    # An attention mask as exporters write it (int64 -> float), ids cast to
    # indices, a bool mask choosing values: typed values between nodes.
    table = rand(10, 4)
    with mkcache.Graph() as g:
        mask = g.input("mask", (2, 4), dtype="int64")
        ids = g.input("ids", (2, 4))                      # float ids, cast to int64
        keep = g.input("keep", (2, 4, 1), dtype=np.bool_)
        m = g.mul(g.sub(1.0, g.cast(mask, "float32")), -10000.0)
        e = g.gather(table, g.cast(ids, "int64"))
        g.output(g.add(g.where(keep, e, g.reduce_mean(e, axes=-1, keepdims=True)),
                       g.reshape(m, (2, 4, 1))), "y")
        with g.compile() as prog:
            mk = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.int64)
            fi = np.array([[0, 3.7, 9, 2], [1, 1, 5.2, 8]], np.float32)
            kp = RNG.random((2, 4, 1)) > 0.5
            got = prog.run(mask=mk, ids=fi, keep=kp)["y"]
    e = table[np.trunc(fi).astype(np.int64)]
    want = np.where(kp, e, e.mean(-1, keepdims=True)) + ((1 - mk) * -10000.0)[..., None]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)
    with pytest.raises(mkcache.InvalidArgumentError, match="cast: dtype must be"):
        mkcache.cast(rand(3), np.float64)


# ------------------------------------------------------------------- slice

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("spec", [
    ([1], [3], [1], [1]),                   # a[:, 1:3]
    ([-1, 4], [0, 0], [2, 1], [-2, -1]),    # a[:, 4:0:-1, -1:0:-2]
    ([0, 2], [2 ** 62, 3], [0, 2], [2, 1]),  # a[::2, :, 2:3], an end past the dim
    ([-100], [100], [-1], [3]),             # starts and ends clamped
])
def test_slice_matches_numpy(dtype, spec):
    a = (np.arange(5 * 6 * 7).reshape(5, 6, 7) % 11).astype(dtype)
    starts, ends, axes, steps = spec
    index = [slice(None)] * 3
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[ax] = slice(s, e, st)
    got = mkcache.slice(a, starts, ends, axes, steps).numpy()
    np.testing.assert_array_equal(got, a[tuple(index)])
    assert got.dtype == a.dtype


def test_slice_bad_arguments():
    a = rand(3, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match="slice: a step is 0"):
        mkcache.slice(a, [0], [2], [1], [0])
    with pytest.raises(mkcache.InvalidArgumentError, match="slice: axis 1 is empty"):
        mkcache.slice(a, [3], [1], [1])
    with pytest.raises(mkcache.InvalidArgumentError, match="slice: axis 2 is out of range"):
        mkcache.slice(a, [0], [1], [2])
    with pytest.raises(mkcache.InvalidArgumentError, match="one entry per sliced axis"):
        mkcache.slice(a, [0, 1], [1], [0, 1])


# -------------------------------------------------------- expand, compare

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_expand_matches_numpy(dtype):
    a = (np.arange(3 * 1 * 4).reshape(3, 1, 4) % 5).astype(dtype)
    for shape in ((2, 3, 5, 4), (1, 6, 1), (4,)):
        want = np.broadcast_to(a, np.broadcast_shapes(a.shape, shape))
        got = mkcache.expand(a, shape).numpy()
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, want)
    with pytest.raises(mkcache.InvalidArgumentError, match="do not broadcast"):
        mkcache.expand(a, (2, 5))


COMPARE = {"equal": np.equal, "less": np.less, "less_equal": np.less_equal,
           "greater": np.greater, "greater_equal": np.greater_equal}


@pytest.mark.parametrize("name", list(COMPARE))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_comparisons_match_numpy(name, dtype):
    a = RNG.integers(-3, 3, size=(4, 1, 5)).astype(dtype)
    b = RNG.integers(-3, 3, size=(3, 1)).astype(dtype)
    if dtype == np.float32:
        a[0, 0, 0] = np.nan
    got = getattr(mkcache, name)(a, b).numpy()
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, COMPARE[name](a, b))


def test_int64_compares_exactly_and_dtypes_must_match():
    a = np.array([2 ** 62 + 1], np.int64)
    b = np.array([2 ** 62], np.int64)  # equal as doubles
    assert not mkcache.equal(a, b).numpy()[0] and mkcache.greater(a, b).numpy()[0]
    with pytest.raises(mkcache.InvalidArgumentError, match="compare: a is int64, b float32"):
        mkcache.less(a, rand(1))


# ----------------------------------------------------------------- logical

@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_binaries_match_numpy(name):
    a = RNG.random((4, 1, 5)) < 0.5
    b = RNG.random((3, 1)) < 0.5
    got = getattr(mkcache, name)(a, b).numpy()
    assert got.dtype == np.bool_ and got.shape == (4, 3, 5)
    np.testing.assert_array_equal(got, getattr(np, name)(a, b))


def test_logical_not_and_in_a_graph():
    a = RNG.random((2, 7, 3)) < 0.5
    np.testing.assert_array_equal(mkcache.logical_not(a).numpy(), ~a)
    g = mkcache.Graph()
    x = g.input("x", (None, 7, 3), dtype="bool")
    m = g.input("m", (1, 3), dtype="bool")
    g.output(g.logical_and(g.logical_not(x), g.logical_or(m, g.logical_not(m))), "y")
    with g.compile() as prog:
        for n in (2, 5):
            xs = RNG.random((n, 7, 3)) < 0.5
            np.testing.assert_array_equal(prog.run(x=xs, m=np.array([[1, 0, 1]], bool))["y"],
                                          ~xs)


def test_logical_refusals():
    a = np.array([True, False])
    with pytest.raises(mkcache.InvalidArgumentError, match="is float32; logical takes bool"):
        mkcache.logical_and(a.astype(np.float32), a)
    with pytest.raises(mkcache.InvalidArgumentError, match="broadcast"):
        mkcache.logical_or(a, np.ones(3, bool))
    op = mkcache._capi.enum_value("mkc_op", "logical")
    for kind, inputs, message in (("not", 2, "NOT takes one input"),
                                  ("and", 1, "take two inputs")):
        with mkcache.Graph() as g, pytest.raises(mkcache.InvalidArgumentError, match=message):
            x = g.input("x", (2,), dtype="bool")
            g.output(g._table_node(op, mkcache._operators.logical_params(kind, None),
                                   [x] * inputs), "y")
            g.compile()


# --------------------------------------------------------------------- pad

def pad_reference(a, pads, mode, value=0, axes=None):
    """ONNX's Pad in numpy: the negative counts cropped first, then np.pad."""
    k = len(pads) // 2
    axes = list(range(k)) if axes is None else [ax % a.ndim for ax in axes]
    crop = [slice(None)] * a.ndim
    width = [(0, 0)] * a.ndim
    for i, ax in enumerate(axes):
        b, e = pads[i], pads[k + i]
        crop[ax] = slice(max(-b, 0), a.shape[ax] - max(-e, 0))
        width[ax] = (max(b, 0), max(e, 0))
    kept = a[tuple(crop)]
    if mode == "constant":
        return np.pad(kept, width, mode="constant", constant_values=value)
    return np.pad(kept, width, mode=mode)


PAD_SPECS = [
    ([1, 2], None),                        # a 1-D prefix: axis 0 only
    ([0, 1, 2, 2, 0, 1], None),            # every axis
    ([2, -1, 1, 3], [2, 0]),               # axes, one crops
    ([-1, 0, 2, -2], [-1, 1]),             # negative axes, crop and pad one axis
    ([1, 1, 1, 1, 1, 1], [1, 2, 0]),       # axes out of order
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("spec", PAD_SPECS)
def test_pad_matches_numpy(dtype, mode, spec):
    a = (np.arange(5 * 6 * 7).reshape(5, 6, 7) % 13 - 4).astype(dtype)
    pads, axes = spec
    value = 1 if dtype == np.bool_ else -7
    got = mkcache.pad(a, pads, mode=mode, value=value, axes=axes).numpy()
    want = pad_reference(a, pads, mode, value, axes)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, want)


def test_pad_float_value_and_odd_batch():
    a = rand(3, 5, 7, 9)  # batch 3, 5 channels
    pads = [0, 0, 1, 2, 0, 3, 2, 0]
    got = mkcache.pad(a, pads, value=-0.25).numpy()
    np.testing.assert_array_equal(got, pad_reference(a, pads, "constant", -0.25))
    got = mkcache.pad(a, pads, value=float("nan")).numpy()
    assert np.isnan(got[:, 5:]).all() and np.isnan(got[:, :, 0]).all()
    assert not np.isnan(got[:, :5, 1:8, 2:]).any()


def test_pad_channels_last_counts_in_the_callers_order():
    a = rand(2, 17, 5, 3)  # NCHW values
    t = nhwc(a)  # axes count in its own order: N, H, W, C
    y = mkcache.pad(t, [1, 1, 2, 2], mode="reflect", axes=[1, 2])
    assert y.layout == "NCHW" and y.shape == (2, 8, 6, 17)  # channels-first, the same order
    want = pad_reference(np.moveaxis(a, 1, -1), [1, 1, 2, 2], "reflect", axes=[1, 2])
    np.testing.assert_array_equal(y.numpy(), want)


def test_pad_in_a_graph():
    a = rand(2, 3, 6, 5)
    with mkcache.Graph() as g:
        x = g.input("x", (None, 3, 6, 5))
        p = g.pad(g.relu(x), [1, 1, -1, 2], mode="edge", axes=[2, 3], name="p")
        g.output(g.add(p, p), "y")
        with g.compile() as prog:
            got = prog.run(x=a)["y"]
            assert "(pad 'p') reference" in prog.plan()
    want = 2 * pad_reference(np.maximum(a, 0), [1, 1, -1, 2], "edge", axes=[2, 3])
    np.testing.assert_array_equal(got, want)


def test_pad_bad_arguments():
    a = rand(3, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match="an even number"):
        mkcache.pad(a, [1, 2, 3])
    with pytest.raises(mkcache.InvalidArgumentError, match="pads has 2 axes' counts, axes 1"):
        mkcache.pad(a, [1, 2, 3, 4], axes=[1])
    with pytest.raises(mkcache.InvalidArgumentError, match="pad: naxes must be 1..2"):
        mkcache.pad(a, [1, 1, 1, 1, 1, 1])
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="pad: axis 1 removes 3 before and 1 after of its 4 elements"):
        mkcache.pad(a, [0, -3, 0, -1])
    past = r"pad: axis 1 removes more than its 4 elements \(-5 before, 6 after\)"
    with pytest.raises(mkcache.InvalidArgumentError, match=past):
        mkcache.pad(a, [0, -5, 0, 6])  # crops past the dim, whatever is added after
    with pytest.raises(mkcache.InvalidArgumentError, match="removes more than its 3 elements"):
        mkcache.pad(a, [-2 ** 63, 0, 0, 0])
    with pytest.raises(mkcache.InvalidArgumentError, match="REFLECT adds at most 3 on a side"):
        mkcache.pad(a, [0, 4, 0, 0], mode="reflect")
    with pytest.raises(mkcache.InvalidArgumentError, match="pad: mode must be one of"):
        mkcache.pad(a, [1, 1], mode="symmetric")
    with pytest.raises(mkcache.InvalidArgumentError, match="pad: axis -1 is given twice"):
        mkcache.pad(a, [1, 1, 1, 1], axes=[1, -1])
    with pytest.raises(mkcache.InvalidArgumentError, match="pad: value 0.5 is not an integer of int32"):
        mkcache.pad(a.astype(np.int32), [1, 1], value=0.5)
    with pytest.raises(mkcache.InvalidArgumentError, match="is not a bool"):
        mkcache.pad(a > 0, [1, 1], value=2)
    with pytest.raises(mkcache.InvalidArgumentError, match="at most 2\\^40"):
        mkcache.pad(a, [2 ** 62, 0])
    # The C struct's own checks: a mode out of range.
    p = mkcache._operators.pad_params([1, 1], "constant", 0.0, None, None)
    p.mode = 9
    rc, dst = _op_run(_capi.OPS["pad"], ctypes.addressof(p), [mkcache.Tensor(a)])
    assert rc != 0 and not dst.value
    assert "pad: mode must be CONSTANT, REFLECT, EDGE or WRAP, got 9" in \
        _capi.lib.mkc_last_error().decode()
    assert mkcache.pad(a, [1, 1]).shape == (5, 4)  # nothing was lost


# ------------------------------------------------------------------ resize

def resize_reference(a, mode="nearest", coordinates="half_pixel", nearest="round_prefer_floor",
                     sizes=None, scales=None):
    """ONNX's Resize (opset 11+, no roi) in float64 numpy, one axis at a
    time: the result's dims and the length each axis's coordinates map
    with follow the spec's rule for sizes and for scales."""
    r = a.astype(np.float64)
    for ax, n in enumerate(a.shape):
        if sizes is not None:
            m = sizes[ax]
            scale = m / n
        else:
            scale = float(np.float32(scales[ax]))
            m = int(np.floor(scale * n))
        length = scale * n
        y = np.arange(m, dtype=np.float64)
        if coordinates == "half_pixel":
            x = (y + 0.5) / scale - 0.5
        elif coordinates == "pytorch_half_pixel":
            x = np.full(m, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
        elif coordinates == "align_corners":
            x = np.zeros(m) if length == 1 else y * (n - 1) / (length - 1)
        elif coordinates == "half_pixel_symmetric":
            x = n / 2 * (1 - m / length) + (y + 0.5) / scale - 0.5
        else:
            x = y / scale
        if mode == "nearest":
            i = {"round_prefer_floor": np.ceil(x - 0.5), "round_prefer_ceil": np.floor(x + 0.5),
                 "floor": np.floor(x), "ceil": np.ceil(x)}[nearest]
            r = np.take(r, np.clip(i, 0, n - 1).astype(np.intp), axis=ax)
        else:
            x0 = np.floor(x)
            w = (x - x0).reshape([-1 if i == ax else 1 for i in range(a.ndim)])
            lo = np.clip(x0, 0, n - 1).astype(np.intp)
            hi = np.clip(x0 + 1, 0, n - 1).astype(np.intp)
            r = np.take(r, lo, axis=ax) * (1 - w) + np.take(r, hi, axis=ax) * w
    return r


COORDINATES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
RESIZE_CASES = [  # shape, sizes, scales
    ((2, 3, 7), None, [1, 1, 2.5]),                 # 3-D, odd width, a fractional scale
    ((2, 5, 6, 4), [2, 5, 3, 9], None),             # 4-D by sizes: down and up
    ((1, 3, 8, 5), None, [1, 1, 0.5, 1.7]),         # halves fall on ties down by 2
    ((2, 17, 4, 3, 5), None, [1, 1, 2, 0.67, 1]),   # 5-D, 17 channels
    ((3, 2, 6, 1), [3, 2, 1, 4], None),             # a dim to 1, a dim from 1
    ((2, 4, 9), None, [1, 2, 0.34]),                # the channels resized too
]


@pytest.mark.parametrize("shape,sizes,scales", RESIZE_CASES)
@pytest.mark.parametrize("coordinates", COORDINATES)
def test_resize_linear_matches_float64(shape, sizes, scales, coordinates):
    a = rand(*shape)
    got = mkcache.resize(a, sizes=sizes, scales=scales, mode="linear",
                         coordinates=coordinates).numpy()
    want = resize_reference(a, "linear", coordinates, sizes=sizes, scales=scales)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,sizes,scales", RESIZE_CASES)
@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("nearest", NEAREST)
def test_resize_nearest_matches_float64(shape, sizes, scales, coordinates, nearest):
    a = rand(*shape)
    got = mkcache.resize(a, sizes=sizes, scales=scales, coordinates=coordinates,
                         nearest=nearest).numpy()
    want = resize_reference(a, "nearest", coordinates, nearest, sizes=sizes, scales=scales)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_resize_nearest_rounds_halves_as_asked():
    # Down by 2 with half_pixel: every coordinate is a half (2y + 0.5).
    a = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    down = {n: mkcache.resize(a, scales=[1, 1, 0.5], nearest=n).numpy().ravel().tolist()
            for n in NEAREST}
    assert down["round_prefer_floor"] == down["floor"] == [0, 2, 4, 6]
    assert down["round_prefer_ceil"] == down["ceil"] == [1, 3, 5, 7]


def test_resize_matches_onnx_reference_evaluator():
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper  # noqa: PLC0415
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    a = rand(2, 3, 5, 7)
    for mode, coordinates, nearest, sizes, scales in [
            ("linear", "half_pixel", "round_prefer_floor", None, [1, 1, 1.5, 0.6]),
            ("linear", "align_corners", "round_prefer_floor", [2, 3, 9, 4], None),
            ("linear", "pytorch_half_pixel", "round_prefer_floor", [2, 3, 1, 10], None),
            ("nearest", "asymmetric", "floor", None, [1, 1, 2.2, 0.5]),
            ("nearest", "half_pixel", "round_prefer_ceil", None, [1, 1, 0.4, 3]),
            ("linear", "half_pixel_symmetric", "round_prefer_floor", None, [1, 1, 1.7, 0.7])]:
        inputs = ["x", "", "scales" if scales else "", "sizes" if sizes else ""]
        node = helper.make_node("Resize", [i for i in inputs if i or inputs.index(i) < 2],
                                ["y"], mode=mode, coordinate_transformation_mode=coordinates,
                                nearest_mode=nearest)
        if sizes:
            node.input[:] = ["x", "", "", "sizes"]
            init = [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
        else:
            node.input[:] = ["x", "", "scales"]
            init = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            "x", onnx.TensorProto.FLOAT, a.shape)], [helper.make_tensor_value_info(
                "y", onnx.TensorProto.FLOAT, None)], init)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        want = ReferenceEvaluator(model).run(None, {"x": a})[0]
        got = mkcache.resize(a, sizes=sizes, scales=scales, mode=mode, coordinates=coordinates,
                             nearest=nearest).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{mode} {coordinates}")


def _resize_graph(shape, impl, layout="NCHW", **kw):
    """A program resizing an input (after a relu, so it is a node's result)."""
    with mkcache.Graph() as g:
        x = g.input("x", shape, layout=layout)
        g.output(g.resize(g.relu(x), name="r", **kw), "y")
        return g.compile(impl={"resize": impl})


ONEDNN_CASES = [  # shape, layout, resize's arguments: what oneDNN computes as defined
    ((2, 3, 7), "NCHW", dict(scales=[1, 1, 2.0], mode="linear")),
    ((2, 5, 6, 4), "NCHW", dict(sizes=[2, 5, 3, 9], mode="linear")),
    ((2, 5, 6, 4), "NCHW", dict(sizes=[2, 5, 9, 3], nearest="round_prefer_ceil")),
    ((1, 3, 8, 4), "NCHW", dict(scales=[1, 1, 0.5, 1.25], nearest="round_prefer_ceil")),
    ((2, 17, 4, 3, 5), "NCDHW", dict(sizes=[2, 17, 7, 6, 2], mode="linear",
                                     coordinates="pytorch_half_pixel")),
    ((2, 3, 6, 4), "NCHW", dict(sizes=[2, 3, 3, 7], mode="linear",
                                coordinates="half_pixel_symmetric")),
    ((2, 4, 6, 17), "NHWC", dict(scales=[1, 2, 0.5, 1], mode="linear")),  # caller order
    ((2, 4, 6, 17), "NHWC", dict(sizes=[2, 9, 5, 17], nearest="round_prefer_ceil")),
]


@pytest.mark.parametrize("shape,layout,kw", ONEDNN_CASES)
def test_resize_onednn_equals_reference(shape, layout, kw):
    a = rand(*shape)
    results = {}
    for impl in ("onednn", "reference"):
        with _resize_graph(shape, impl, layout, **kw) as prog:
            results[impl] = prog.run(x=a)["y"]
            assert f"(resize 'r') {impl}" in prog.plan()
    if kw.get("mode") == "linear":
        # oneDNN weighs in float, the reference in double.
        np.testing.assert_allclose(results["onednn"], results["reference"], rtol=1e-6,
                                   atol=1e-6)
    else:
        np.testing.assert_array_equal(results["onednn"], results["reference"])
    # And both are the operator: float64 numpy on the caller's order.
    want = resize_reference(np.maximum(a, 0), kw.get("mode", "nearest"),
                            kw.get("coordinates", "half_pixel"),
                            kw.get("nearest", "round_prefer_floor"),
                            sizes=kw.get("sizes"), scales=kw.get("scales"))
    np.testing.assert_allclose(results["reference"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw,why", [
    (dict(scales=[1, 1, 2, 2], mode="linear", coordinates="align_corners"),
     "oneDNN maps coordinates as HALF_PIXEL only, got align_corners"),
    (dict(scales=[1, 1, 2, 2]), "oneDNN's nearest rounds halves up"),
    (dict(scales=[1, 1, 1.3, 2], mode="linear"), "oneDNN maps coordinates by the result's dims"),
    (dict(sizes=[2, 3, 1, 4], mode="linear", coordinates="pytorch_half_pixel"),
     "oneDNN maps a dim resized to 1 as HALF_PIXEL"),
    (dict(scales=[1, 2, 1, 1], mode="linear"), "oneDNN resizes the spatial dims only"),
])
def test_resize_onednn_refuses_what_it_computes_otherwise(kw, why):
    shape = (2, 3, 5, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match=re.escape(why)):
        _resize_graph(shape, "onednn", **kw)
    # Left to the choice, the reference kernel runs it.
    with mkcache.Graph() as g:
        x = g.input("x", shape)
        g.output(g.resize(x, name="r", **kw), "y")
        with g.compile() as prog:
            assert "(resize 'r') reference" in prog.plan()


def test_resize_eager_picks_onednn_where_it_can():
    a = rand(2, 3, 5, 4)
    y = mkcache.resize(a, scales=[1, 1, 2, 2], mode="linear").numpy()
    want = resize_reference(a, "linear", scales=[1, 1, 2, 2])
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    # The primitive's entry: oneDNN ran it.
    assert any(key.startswith("resize:m2:o10x8|") for _, key in mkcache.cache.keys())


def test_resize_channels_last_keeps_the_layout():
    a = rand(2, 17, 5, 3)  # NCHW values
    y = mkcache.resize(nhwc(a), scales=[1, 2, 1.5, 1], mode="linear",
                       coordinates="align_corners")
    assert y.layout == "NHWC" and y.shape == (2, 10, 4, 17)
    want = resize_reference(np.moveaxis(a, 1, -1), "linear", "align_corners",
                            scales=[1, 2, 1.5, 1])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)


def test_resize_bad_arguments():
    a = rand(1, 2, 4, 4)
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="exactly one of sizes and scales, got both"):
        mkcache.resize(a, sizes=[1, 2, 8, 8], scales=[1, 1, 2, 2])
    with pytest.raises(mkcache.InvalidArgumentError, match="got neither"):
        mkcache.resize(a)
    with pytest.raises(mkcache.InvalidArgumentError, match="mode must be one of"):
        mkcache.resize(a, scales=[1, 1, 2, 2], mode="bicubic")
    with pytest.raises(mkcache.InvalidArgumentError, match="coordinates must be one of"):
        mkcache.resize(a, scales=[1, 1, 2, 2], coordinates="tf_crop_and_resize")
    with pytest.raises(mkcache.InvalidArgumentError, match="nearest must be one of"):
        mkcache.resize(a, scales=[1, 1, 2, 2], nearest="round")
    with pytest.raises(mkcache.InvalidArgumentError, match="nscales must be src's rank 4, got 2"):
        mkcache.resize(a, scales=[2, 2])
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"scales\[2\] = 0.2 leaves dim 2 of 4 empty"):
        mkcache.resize(a, scales=[1, 1, 0.2, 1])
    with pytest.raises(mkcache.InvalidArgumentError, match=r"scales\[3\] is -1 \(each > 0\)"):
        mkcache.resize(a, scales=[1, 1, 1, -1])
    with pytest.raises(mkcache.InvalidArgumentError, match=r"sizes\[1\] is 0 \(each >= 1\)"):
        mkcache.resize(a, sizes=[1, 0, 4, 4])
    with pytest.raises(mkcache.InvalidArgumentError, match="input 0 \\(src\\) is int32; resize "
                                                           "takes float32"):
        mkcache.resize(a.astype(np.int32), scales=[1, 1, 2, 2])
    # The C struct's own checks: both given, a mode out of range.
    p = mkcache._operators.resize_params(None, [1, 1, 2, 2], "nearest", "half_pixel",
                                         "round_prefer_floor", -0.75, False, False, None)
    p.nsizes = 4
    t = mkcache.Tensor(a)
    rc, dst = _op_run(_capi.OPS["resize"], ctypes.addressof(p), [t])
    assert rc != 0 and not dst.value
    assert "resize: sizes and scales are both given" in _capi.lib.mkc_last_error().decode()
    p.nsizes, p.mode = 0, 9
    rc, _ = _op_run(_capi.OPS["resize"], ctypes.addressof(p), [t])
    assert "resize: mode must be NEAREST, LINEAR or CUBIC, got 9" in \
        _capi.lib.mkc_last_error().decode()
    assert mkcache.resize(a, scales=[1, 1, 2, 2]).shape == (1, 2, 8, 8)  # nothing was lost


@pytest.mark.parametrize("kind", ["max", "min", "sum", "mean"])
def test_reduce_propagates_nan_wherever_it_stands(kind):
    """The default implementation (eager and in programs): a NaN anywhere
    in a reduced group makes that result NaN, whatever values stand before
    or after it (oneDNN's own max and min do not: [1, NaN, -1] gave -1),
    and leaves the other groups as numpy computes them."""
    a = rand(5, 3)
    for row in range(3):
        a[row, row] = np.nan  # first, middle, last of its group
    a[3] = [1.0, np.nan, -1.0]
    want = REDUCES[kind](a.astype(np.float64), axis=1)
    fn = getattr(mkcache, f"reduce_{kind}")
    with mkcache.Graph() as g:
        x = g.input("x", a.shape)
        g.output(getattr(g, f"reduce_{kind}")(x, axes=1), "y")
        with g.compile() as prog:
            got_program = prog.run(x=a)["y"]
        with pytest.raises(mkcache.InvalidArgumentError, match="do not propagate NaN") \
                if kind in ("max", "min") else contextlib.nullcontext():
            g.compile(impl={"reduce": "onednn"}).close()
    for got in (fn(a, axes=1).numpy(), got_program):
        assert np.isnan(got[:4]).all(), got
        np.testing.assert_allclose(got[4], want[4], rtol=1e-6)
