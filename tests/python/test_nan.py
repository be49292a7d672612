"""NaN through the operators, as the README's NaN paragraph states: ops that
compute with a NaN give NaN; those oneDNN builds on a vectorised max or min
keep oneDNN's behaviour, pinned here so that a change of it shows."""
import numpy as np
import pytest

import mkcache

NAN = np.float32(np.nan)


def with_nan(shape, where=(0,)):
    x = np.linspace(-2, 2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x.flat[list(where)] = NAN
    return x


PROPAGATING = ["leaky_relu", "elu", "gelu", "tanh", "sigmoid", "swish", "hardswish", "mish",
               "sqrt", "abs", "log", "square"]


@pytest.mark.parametrize("op", PROPAGATING)
@pytest.mark.parametrize("size", [16, 4096])  # serial and threaded kernels
def test_activations_propagate_nan(op, size):
    x = with_nan((size,), where=(0, size // 2, size - 1))
    y = np.asarray(getattr(mkcache, op)(mkcache.Tensor(x)))
    assert np.isnan(y[[0, size // 2, size - 1]]).all()


def test_arithmetic_propagates_nan(rng):
    a = with_nan((2, 3, 4, 5), where=(7,))
    b = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for op in ("add", "sub", "mul", "div"):
        for x, y in ((a, b), (b, a)):
            out = np.asarray(getattr(mkcache, op)(x, y))
            assert np.isnan(out.flat[7]) and np.isfinite(np.delete(out.ravel(), 7)).all(), op
    w = rng.standard_normal((5, 5)).astype(np.float32)
    m = np.asarray(mkcache.matmul(a, w))
    assert np.isnan(m[0, 0, 1]).all() and np.isfinite(m[0, 0, 0]).all()
    c = np.asarray(mkcache.conv2d(a, rng.standard_normal((3, 3, 1, 1)).astype(np.float32)))
    assert np.isnan(c.reshape(2, 3, 20)[0, :, 7]).all()
    n = np.asarray(mkcache.layer_norm(a))
    assert np.isnan(n[0, 0, 1]).all() and np.isfinite(n[0, 0, 0]).all()


@pytest.mark.parametrize("size", [16, 4096])
def test_max_based_activations_keep_onednn_behaviour(size):
    x = with_nan((size,))
    assert np.asarray(mkcache.relu(mkcache.Tensor(x)))[0] == 0
    assert np.asarray(mkcache.relu6(mkcache.Tensor(x)))[0] == 0
    assert np.asarray(mkcache.clip(mkcache.Tensor(x), -1, 1))[0] == -1
    assert np.asarray(mkcache.exp(mkcache.Tensor(x)))[0] == np.inf


def test_maximum_minimum_and_max_pool_keep_onednn_behaviour():
    a = np.array([NAN, 1, NAN] * 8, np.float32)
    b = np.array([1, NAN, NAN] * 8, np.float32)
    for op in (mkcache.maximum, mkcache.minimum):
        np.testing.assert_array_equal(np.asarray(op(a, b))[:3], [1, NAN, NAN])
        np.testing.assert_array_equal(np.asarray(op(b, a))[:3], [NAN, 1, NAN])
    p = np.ones((1, 1, 4, 4), np.float32)
    p[0, 0, 0, 0] = NAN
    np.testing.assert_array_equal(np.asarray(mkcache.max_pool2d(p, 2)).ravel(), [1, 1, 1, 1])
    avg = np.asarray(mkcache.avg_pool2d(p, 2)).ravel()
    assert np.isnan(avg[0]) and (avg[1:] == 1).all()
