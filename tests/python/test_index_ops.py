"""range, gather_elements, gather_nd, integer_binary and gather of any
dtype: eagerly and in programs (where a range follows a dim bound at run
time), against numpy (exact: these copy or compute integers), with odd
shapes, batches > 1 and bad input."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import mkcache
from mkcache import _capi

RNG = np.random.default_rng(31)
DTYPES = [np.float32, np.int32, np.int64, np.bool_]


def data_of(dtype, *shape):
    if dtype == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype == np.float32:
        return RNG.standard_normal(shape).astype(np.float32)
    return RNG.integers(-1000, 1000, shape).astype(dtype)


def ranged(count, start, delta, dtype):
    """numpy's sequence in double, converted: what the library computes."""
    return (start + np.arange(count, dtype=np.float64) * delta).astype(dtype)


# -------------------------------------------------------------------- range

@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
@pytest.mark.parametrize("start,delta,offset", [(0, 1, 0), (3, 2, 0), (-2.5, 0.5, 1),
                                                (10, -3, -20), (0, 1, -4)])
def test_range_matches_numpy(dtype, start, delta, offset):
    like = np.zeros((3, 13, 2), np.float32)
    limit = 13 + offset
    want = np.arange(start, limit, delta, dtype=np.float64)
    got = mkcache.arange(like, axis=1, start=start, delta=delta, limit_offset=offset,
                         dtype=dtype).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, ranged(len(want), start, delta, dtype))


def test_range_follows_a_run_time_dim_in_a_program():
    with mkcache.Graph() as g:
        x = g.input("x", (None, None), dtype="bool")
        seq = g.arange(x, axis=-1, start=1, limit_offset=1)            # 1 .. T
        batch = g.arange(x, axis=0, dtype="float32", delta=0.5)        # 0, 0.5, ..
        g.output(seq, "seq")
        g.output(batch, "batch")
        with g.compile() as prog:
            for n, t in ((1, 1), (4, 9), (3, 2)):
                out = prog.run(x=np.zeros((n, t), bool))
                np.testing.assert_array_equal(out["seq"], np.arange(1, t + 1))
                assert out["seq"].dtype == np.int64
                np.testing.assert_array_equal(out["batch"], np.arange(0, n, 0.5))
            assert "(range) reference" in prog.plan()


def test_range_bad_arguments():
    like = np.zeros((2, 5), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="range: delta is 0"):
        mkcache.arange(like, axis=1, delta=0)
    with pytest.raises(mkcache.InvalidArgumentError, match="range: the sequence .* is empty"):
        mkcache.arange(like, axis=1, start=5)
    with pytest.raises(mkcache.InvalidArgumentError, match="range: the sequence .* is empty"):
        mkcache.arange(like, axis=1, delta=-1)
    with pytest.raises(mkcache.InvalidArgumentError, match="range: axis 2 is out of range"):
        mkcache.arange(like, axis=2)
    with pytest.raises(mkcache.InvalidArgumentError, match="arange: dtype must be"):
        mkcache.arange(like, dtype="bool")
    with pytest.raises(mkcache.InvalidArgumentError, match="range: start, limit_offset and delta"):
        mkcache.arange(like, start=float("nan"))
    with pytest.raises(mkcache.InvalidArgumentError, match="longer than 2"):
        mkcache.arange(like, delta=1e-30)
    # An empty range in a program fails that run, naming it; others work.
    with mkcache.Graph() as g:
        x = g.input("x", (None,))
        g.output(g.arange(x, start=3), "y")
        with g.compile() as prog:
            with pytest.raises(mkcache.InvalidArgumentError, match="range: .* is empty"):
                prog.run(x=np.zeros(3, np.float32))
            np.testing.assert_array_equal(prog.run(x=np.zeros(5, np.float32))["y"], [3, 4])


# ----------------------------------------------------------- gather (dtypes)

@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_copies_any_dtype(dtype):
    data = data_of(dtype, 3, 7, 5)
    idx = np.array([[6, -7], [0, 3], [-1, 2]])
    got = mkcache.gather(data, idx, axis=1).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.take(data, idx, axis=1))


# ---------------------------------------------------------- gather_elements

def numpy_gather_elements(data, index, axis):
    """out[p] = data[p with p[axis] = index[p]], for index dims off the
    axis at most data's."""
    place = list(np.indices(index.shape))
    place[axis] = np.where(index < 0, index + data.shape[axis], index)
    return data[tuple(place)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_numpy(dtype, axis):
    data = data_of(dtype, 3, 7, 5)
    shape = [2, 5, 4]
    shape[axis] = 9  # along the axis indices may be longer than data
    n = data.shape[axis]
    for index_dtype in (np.int32, np.int64):
        index = RNG.integers(-n, n, shape).astype(index_dtype)
        got = mkcache.gather_elements(data, index, axis=axis).numpy()
        assert got.dtype == dtype and got.shape == tuple(shape)
        np.testing.assert_array_equal(got, numpy_gather_elements(data, index, axis))


def test_gather_elements_bad_input():
    data = data_of(np.float32, 3, 4)
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="gather_elements: index 3 is out of range for a dim of 3"):
        mkcache.gather_elements(data, np.array([[0, 3]]), axis=0)
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="gather_elements: index -5 is out of range"):
        mkcache.gather_elements(data, np.array([[0, -5]]), axis=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="the same rank"):
        mkcache.gather_elements(data, np.array([0, 1]), axis=0)
    with pytest.raises(mkcache.InvalidArgumentError, match="larger than data"):
        mkcache.gather_elements(data, np.zeros((4, 4), np.int64), axis=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="axis 2 is out of range"):
        mkcache.gather_elements(data, np.zeros((3, 4), np.int64), axis=2)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"input 1 \(indices\) is float32"):
        mkcache.gather_elements(data, np.zeros((3, 4), np.float32))


# ---------------------------------------------------------------- gather_nd

def numpy_gather_nd(data, index, batch_dims):
    batch = data.shape[:batch_dims]
    k = index.shape[-1]
    flat = data.reshape((-1,) + data.shape[batch_dims:])
    rows = index.reshape(flat.shape[0], -1, k)
    bounds = np.array(flat.shape[1:1 + k])
    rows = np.where(rows < 0, rows + bounds, rows)
    out = np.stack([flat[b][tuple(rows[b].T)] for b in range(flat.shape[0])])
    return out.reshape(batch + index.shape[batch_dims:-1] + flat.shape[1 + k:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_dims,k,index_shape", [(0, 1, (4,)), (0, 2, (3, 2)),
                                                      (0, 3, (2, 5)), (1, 1, (3, 4)),
                                                      (1, 2, (3, 1, 2)), (2, 1, (3, 5, 2))])
def test_gather_nd_matches_numpy(dtype, batch_dims, k, index_shape):
    data = data_of(dtype, 3, 5, 7)
    shape = tuple(data.shape[:batch_dims]) + tuple(index_shape[batch_dims:]) + (k,) \
        if batch_dims else tuple(index_shape) + (k,)
    bounds = np.array(data.shape[batch_dims:batch_dims + k])
    index = (RNG.integers(0, 1 << 30, shape) % (2 * bounds) - bounds).astype(np.int64)
    got = mkcache.gather_nd(data, index, batch_dims=batch_dims).numpy()
    want = numpy_gather_nd(data, index, batch_dims)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want.reshape(want.shape or (1,)))


def test_gather_nd_in_a_program_with_run_time_dims():
    with mkcache.Graph() as g:
        mask = g.input("mask", (None, None), dtype="bool")
        index = g.input("index", (None, None, 2), dtype="int64")
        g.output(g.gather_nd(mask, index), "y")
        with g.compile() as prog:
            for n, t in ((2, 5), (1, 1), (3, 8)):
                m = RNG.integers(0, 2, (n, t)).astype(bool)
                i = np.stack([RNG.integers(-n, n, (4, t)), RNG.integers(-t, t, (4, t))], -1)
                np.testing.assert_array_equal(prog.run(mask=m, index=i)["y"],
                                              numpy_gather_nd(m, i, 0))
            with pytest.raises(mkcache.InvalidArgumentError,
                               match="gather_nd: index 2 is out of range for a dim of 2"):
                prog.run(mask=np.ones((2, 3), bool), index=np.array([[[2, 0]]]))


def test_gather_nd_bad_arguments():
    data = data_of(np.float32, 3, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"last dim \(3\) must be 1..2"):
        mkcache.gather_nd(data, np.zeros((2, 3), np.int64))
    with pytest.raises(mkcache.InvalidArgumentError, match="batch_dims must be 0..0"):
        mkcache.gather_nd(data, np.zeros((3,), np.int64), batch_dims=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="batch dims .* differ"):
        mkcache.gather_nd(data, np.zeros((2, 1), np.int64), batch_dims=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="batch_dims must be"):
        mkcache.gather_nd(data, np.zeros((3, 1), np.int64), batch_dims=-1)


# ----------------------------------------------------------- integer_binary

KINDS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
         "min": np.minimum, "div": lambda a, b: (np.trunc(a / b)).astype(a.dtype)}


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", KINDS)
def test_integer_binary_matches_numpy(dtype, kind):
    a = RNG.integers(-1000, 1000, (3, 1, 5)).astype(dtype)
    b = RNG.integers(-1000, 1000, (4, 1)).astype(dtype)
    b[b == 0] = 7
    got = mkcache.integer_binary(a, b, kind=kind).numpy()
    assert got.dtype == dtype and got.shape == (3, 4, 5)
    if kind == "div":  # numpy's integer // floors; ONNX's (and C's) truncates
        want = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    else:
        want = KINDS[kind](a, b)
    np.testing.assert_array_equal(got, want)


def test_integer_binary_is_exact_past_float_precision_and_wraps():
    big = np.array([(1 << 53) + 1, -(1 << 62)], np.int64)
    np.testing.assert_array_equal(mkcache.integer_binary(big, np.array([2]), kind="mul").numpy(),
                                  [(1 << 54) + 2, -(1 << 63)])
    low = np.array([np.iinfo(np.int32).min], np.int32)
    np.testing.assert_array_equal(
        mkcache.integer_binary(low, np.array([-1], np.int32), kind="div").numpy(), low)
    np.testing.assert_array_equal(
        mkcache.integer_binary(low, np.array([1], np.int32), kind="sub").numpy(),
        [np.iinfo(np.int32).max])


def test_integer_binary_bad_input():
    a = np.arange(6).reshape(2, 3)
    with pytest.raises(mkcache.InvalidArgumentError, match="integer_binary: a divisor is 0"):
        mkcache.integer_binary(a, np.array([1, 0, 2]), kind="div")
    with pytest.raises(mkcache.InvalidArgumentError, match="both of one dtype"):
        mkcache.integer_binary(a, np.array([1], np.int32))
    with pytest.raises(mkcache.InvalidArgumentError, match=r"input 0 \(a\) is float32"):
        mkcache.integer_binary(a.astype(np.float32), a.astype(np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="do not broadcast"):
        mkcache.integer_binary(a, np.arange(4))
    with pytest.raises(mkcache.InvalidArgumentError, match="kind must be one of"):
        mkcache.integer_binary(a, a, kind="pow")
    with mkcache.Graph() as g:
        x = g.input("x", (None,), dtype="int64")
        g.output(g.integer_binary(np.array([12], np.int64), x, kind="div"), "y")
        with g.compile() as prog:
            np.testing.assert_array_equal(prog.run(x=np.array([5, -5, 12]))["y"], [2, -2, 1])
            with pytest.raises(mkcache.InvalidArgumentError, match="a divisor is 0"):
                prog.run(x=np.array([1, 0]))


def test_params_structs_are_sized_and_default():
    r = _capi.RangeParams()
    _capi.lib.mkc_range_params_init(ctypes.byref(r))
    assert (r.axis, r.start, r.limit_offset, r.delta) == (0, 0.0, 0.0, 1.0)
    assert r.dtype == _capi.enum_value("mkc_dtype", "s64")
    n = _capi.GatherNdParams()
    _capi.lib.mkc_gather_nd_params_init(ctypes.byref(n))
    assert n.batch_dims == 0 and n.struct_size == ctypes.sizeof(n)


def test_range_refuses_integers_past_their_dtype():
    like = np.zeros((4,), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="leaves .* range"):
        mkcache.arange(like, start=3e9, limit_offset=3e9, dtype="int32")
    with pytest.raises(mkcache.InvalidArgumentError, match="leaves .* range"):
        mkcache.arange(like, start=1e19, delta=-1e18, dtype="int64")
    np.testing.assert_array_equal(
        mkcache.arange(like, start=2147483640, limit_offset=2147483640, dtype="int32").numpy(),
        [2147483640, 2147483641, 2147483642, 2147483643])
