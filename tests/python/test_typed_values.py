"""Typed values: tensors and graph values carry their dtype (float32, and
int32, int64, bool for indices and masks); a node that does not take a
dtype is refused at compile naming the node, the port and the dtype; a run
checks its inputs' dtypes; a cache entry made for one dtype never serves
another."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import mkcache
from mkcache import _capi

RNG = np.random.default_rng(31)
TYPED = [np.int32, np.int64, np.bool_]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32] + TYPED)
def test_tensors_keep_their_dtype(dtype):
    a = (np.arange(2 * 3 * 5).reshape(2, 3, 5) % 3).astype(dtype)
    t = mkcache.Tensor(a)
    assert t.dtype == np.dtype(dtype) and t.shape == (2, 3, 5)
    out = t.numpy()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, a)
    # A tensor the library made reads its dtype from its C handle.
    if dtype is not np.int64:
        made = mkcache.transpose(t, (0, 2, 1))
        assert made.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(made.numpy(), np.swapaxes(a, 1, 2))


def test_int64_is_never_rearranged():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.int64).reshape(2, 3, 4, 5)
    t = mkcache.Tensor(a)
    np.testing.assert_array_equal(t.numpy(layout="NCHW"), a)
    with pytest.raises(mkcache.UnsupportedError, match="int64 data cannot be rearranged"):
        t.numpy(layout="NHWC")
    with pytest.raises(mkcache.UnsupportedError, match="int64 data cannot be rearranged"):
        mkcache.transpose(t, (1, 0, 2, 3))
    # int32 and bool are rearranged bit for bit.
    for dtype in (np.int32, np.bool_):
        b = (a % 7 == 3) if dtype is np.bool_ else (a * 104729 + (1 << 30)).astype(np.int32)
        tb = mkcache.Tensor(b)
        np.testing.assert_array_equal(tb.numpy(layout="NHWC"), np.moveaxis(b, 1, -1))


def test_an_entry_is_never_served_to_another_dtype():
    # One name, one shape, one permutation: float32, then int32 bytes whose
    # values no float reading keeps, then float32 again.
    f = rand(6, 7)
    i = (np.arange(42, dtype=np.int32).reshape(6, 7) * 104729 + (1 << 30)).astype(np.int32)
    for _ in range(2):
        tf = mkcache.transpose(mkcache.Tensor(f), (1, 0)).numpy()
        ti = mkcache.transpose(mkcache.Tensor(i), (1, 0)).numpy()
        assert tf.dtype == np.float32 and ti.dtype == np.int32
        np.testing.assert_array_equal(tf, f.T)
        np.testing.assert_array_equal(ti, i.T)


@pytest.mark.parametrize("dtype", TYPED)
def test_a_node_refuses_a_dtype_naming_node_port_and_dtype(dtype):
    name = np.dtype(dtype).name
    with mkcache.Graph() as g:
        x = g.input("x", (2, 3))
        ids = g.input("ids", (2, 3), dtype=dtype)
        g.output(g.relu(x), "y")
        g.output(g.mul(x, ids, name="m"), "z")
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=rf"node 1 \(binary 'm'\): input 1 \(b\) is {name}; "
                                 r"binary takes float32"):
            g.compile()
        # The same with the reference implementation asked for.
        with pytest.raises(mkcache.InvalidArgumentError, match=rf"input 1 \(b\) is {name}"):
            g.compile(impl={"binary": "reference"})
    with mkcache.Graph() as g:
        x = g.input("x", (3,))
        g.output(g.erf(g.add(x, g.constant(np.arange(3).astype(dtype), name="c"))), "y")
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=rf"node 0 \(binary\): input 1 \(b\) is {name}"):
            g.compile()


def test_typed_inputs_are_checked_at_run():
    with mkcache.Graph() as g:
        g.input("mask", (4,), dtype=np.bool_)
        x = g.input("x", (4,))
        g.output(g.relu(x), "y")
        with g.compile() as prog:
            out = prog.run(mask=np.ones(4, bool), x=np.full(4, -1, np.float32))["y"]
            np.testing.assert_array_equal(out, np.zeros(4, np.float32))
            with pytest.raises(mkcache.Error, match="'mask' is float32, the graph's input is bool"):
                prog.run(mask=np.ones(4, np.float32), x=np.ones(4, np.float32))
            with pytest.raises(mkcache.DTypeError, match="must be bool, got int64"):
                prog.run(mask=np.ones(4, np.int64), x=np.ones(4, np.float32))
            with pytest.raises(mkcache.Error, match="is int32, the graph's input is bool"):
                prog.run(mask=mkcache.Tensor(np.ones(4, np.int32)), x=np.ones(4, np.float32))


def test_typed_outputs_keep_their_dtype():
    with mkcache.Graph() as g:
        x = g.input("x", (None, 4))
        g.output(g.greater(x, 0.0), "positive")
        g.output(g.cast(x, "int64"), "truncated")
        g.output(g.relu(x), "relu")
        with g.compile() as prog:
            x1 = np.array([[-1.5, 2.5, 0.0, 3.0]], np.float32)
            out = prog.run(x=x1)  # the numpy fast path
            assert out["positive"].dtype == np.bool_ and out["truncated"].dtype == np.int64
            np.testing.assert_array_equal(out["positive"], x1 > 0)
            np.testing.assert_array_equal(out["truncated"], np.trunc(x1).astype(np.int64))
            # Through Tensors (the general path), and into arrays given.
            t = prog.run(x=mkcache.Tensor(x1))
            np.testing.assert_array_equal(t["truncated"], out["truncated"])
            given = {"positive": np.zeros((1, 4), np.bool_)}
            assert prog.run(x=x1, outputs=given)["positive"] is given["positive"]
            np.testing.assert_array_equal(given["positive"], x1 > 0)
            with pytest.raises(mkcache.Error, match="must be a plain"):
                prog.run(x=x1, outputs={"positive": np.zeros((1, 4), np.float32)})
    # An int64 input given back as it is: copied, never read as doubles.
    with mkcache.Graph() as g:
        i = g.input("i", (3,), dtype="int64")
        g.output(i, "same")
        with g.compile() as prog:
            ids = np.array([5, 2 ** 62 + 1, -3], np.int64)
            np.testing.assert_array_equal(prog.run(i=ids)["same"], ids)
            assert "convert copy" in prog.plan()


def test_bad_dtypes_are_refused():
    with mkcache.Graph() as g:
        for bad in ("float64", np.uint16, "no-such", 3.5):
            with pytest.raises(mkcache.InvalidArgumentError, match="dtype must be float32, int32"):
                g.input("x", (2,), dtype=bad)
        # From C: an unknown mkc_dtype.
        dims = (ctypes.c_int64 * 1)(2)
        value = ctypes.c_int()
        with pytest.raises(mkcache.InvalidArgumentError, match="dtype must be one of float32, int32, int64, bool, int8"):
            _capi.lib.mkc_graph_input(g.handle, b"y", 99, 1, dims, _capi.LAYOUT_CHANNELS_FIRST,
                                      ctypes.byref(value))
        g.input("x", (2,))  # nothing was lost: the name is still free
    with pytest.raises(mkcache.DTypeError, match="array must be float32 or int32 or int64 or bool or int8 or uint8 or float16"):
        mkcache.Tensor(np.zeros(3, np.float64))


@pytest.mark.parametrize("dtype", TYPED)
def test_eager_operators_refuse_typed_tensors(dtype):
    t = mkcache.Tensor(np.ones((1, 2, 3, 3), dtype))
    for call in (lambda: mkcache.relu(t), lambda: mkcache.softmax(t),
                 lambda: mkcache.conv2d(t, np.ones((1, 2, 1, 1), np.float32)),
                 lambda: mkcache.erf(t), lambda: mkcache.reduce_sum(t)):
        with pytest.raises(mkcache.InvalidArgumentError, match="float32"):
            call()
    with pytest.raises(mkcache.DTypeError, match="must be float32"):
        mkcache.relu(np.ones(3, dtype))
