"""linear and matmul against float64 numpy, with bias, fused activations,
transposes and broadcast batch dims."""
import numpy as np
import pytest

import mkcache
from reference import activation as ref_activation
from reference import assert_close


def _ref_matmul(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64)), \
        np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))


@pytest.mark.parametrize("shape_x", [(5, 17), (3, 4, 33), (128, 768)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("constant", [False, True])
def test_linear(shape_x, bias, activation, constant, rng):
    n_in = shape_x[-1]
    n_out = 3072 if n_in == 768 else 19
    if n_in == 768 and (activation == "gelu" or not constant):
        pytest.skip("the BERT-sized case runs once, with constant weights")
    x = rng.standard_normal(shape_x, dtype=np.float32)
    w = rng.standard_normal((n_out, n_in), dtype=np.float32) * 0.1
    b = rng.standard_normal(n_out, dtype=np.float32) if bias else None
    exact, mag = _ref_matmul(x, w.T)
    if bias:
        exact = exact + b
        mag = mag + np.abs(b)
    if activation:
        exact = ref_activation(activation, exact)
    wt = mkcache.Tensor(w, constant=True) if constant else w
    y = mkcache.linear(x, wt, b, activation=activation)
    assert y.shape == shape_x[:-1] + (n_out,)
    assert_close(np.asarray(y), exact, mag + np.abs(exact), reduction=n_in)
    y2 = mkcache.linear(x, wt, b, activation=activation)  # cache hit, same answer
    np.testing.assert_array_equal(np.asarray(y), np.asarray(y2))


MATMUL_CASES = [
    ((7, 5), (5, 3), False, False),
    ((2, 7, 5), (2, 5, 9), False, False),
    ((2, 5, 7), (2, 9, 5), True, True),
    ((4, 1, 6, 5), (3, 5, 2), False, False),     # broadcast batch, lower rank
    ((1, 12, 16, 64), (1, 12, 64, 16), False, False),
    ((3, 8, 4), (8, 6), True, False),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=[str(c) for c in MATMUL_CASES])
def test_matmul(case, rng):
    sa, sb, ta, tb = case
    a = rng.standard_normal(sa, dtype=np.float32)
    b = rng.standard_normal(sb, dtype=np.float32)
    av = np.swapaxes(a, -1, -2) if ta else a
    bv = np.swapaxes(b, -1, -2) if tb else b
    exact, mag = _ref_matmul(av, bv)
    y = mkcache.matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert y.shape == exact.shape
    assert_close(np.asarray(y), exact, mag, reduction=av.shape[-1])


def test_matmul_bias_activation(rng):
    a = rng.standard_normal((2, 6, 10), dtype=np.float32)
    b = rng.standard_normal((10, 4), dtype=np.float32)
    bias = rng.standard_normal(4, dtype=np.float32)
    exact, mag = _ref_matmul(a, b)
    exact = ref_activation("relu", exact + bias)
    y = mkcache.matmul(a, b, bias, activation="relu")
    assert_close(np.asarray(y), exact, mag + np.abs(bias), reduction=10)


@pytest.mark.parametrize("scale", [0.125, -3.0, 0.0])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_matmul_scale(scale, activation, rng):
    """The result (bias included) times scale, then the activation - an
    attention's scaled scores, with k read transposed."""
    q = rng.standard_normal((2, 3, 7, 16), dtype=np.float32)
    k = rng.standard_normal((2, 3, 9, 16), dtype=np.float32)
    bias = rng.standard_normal(9, dtype=np.float32)
    exact, mag = _ref_matmul(q, np.swapaxes(k, -1, -2))
    exact = scale * (exact + bias)
    if activation:
        exact = ref_activation(activation, exact)
    y = mkcache.matmul(q, k, bias, transpose_b=True, scale=scale, activation=activation)
    assert_close(np.asarray(y), exact, abs(scale) * (mag + np.abs(bias)), reduction=16)
    unscaled = mkcache.matmul(q, k, bias, transpose_b=True, activation=activation)
    if scale != 1.0:  # another entry: not the unscaled one's result
        assert not np.array_equal(np.asarray(unscaled), np.asarray(y))


def test_matmul_scale_errors():
    x = np.ones((3, 4), np.float32)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(mkcache.InvalidArgumentError, match="scale must be finite"):
            mkcache.matmul(x, x, transpose_b=True, scale=bad)
    with pytest.raises(mkcache.InvalidArgumentError, match="scale"):
        mkcache.matmul(x, x, transpose_b=True, scale="2")


def test_linear_matmul_errors(rng):
    x = np.ones((3, 4), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="input features"):
        mkcache.linear(x, np.ones((5, 3), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="bias"):
        mkcache.linear(x, np.ones((5, 4), np.float32), np.ones(4, np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="weights"):
        mkcache.linear(x, np.ones((5, 4, 1), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="inner dims"):
        mkcache.matmul(x, np.ones((3, 2), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="broadcast"):
        mkcache.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 2), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        mkcache.matmul(np.ones(4, np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="activation"):
        mkcache.matmul(x, np.ones((4, 2), np.float32), activation="nope")


def test_linear_residual_eager(rng):
    """residual=: added before the activation (a Tensor residual updated in
    place, an array left as it was); a residual of another shape, or with
    training, refused."""
    x = rng.standard_normal((2, 3, 7), dtype=np.float32)
    w = rng.standard_normal((5, 7), dtype=np.float32)
    b = rng.standard_normal(5, dtype=np.float32)
    r = rng.standard_normal((2, 3, 5), dtype=np.float32)
    kept = r.copy()
    want = np.maximum(x.astype(np.float64) @ w.T + b + r, 0)
    got = mkcache.linear(x, w, b, residual=r, activation="relu")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(r, kept)
    t = mkcache.Tensor(r.copy())
    assert mkcache.linear(x, w, b, residual=t) is t
    np.testing.assert_allclose(t.numpy(), x.astype(np.float64) @ w.T + b + r, rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(mkcache.InvalidArgumentError, match="residual .dst. must be float32"):
        mkcache.linear(x, w, b, residual=np.zeros((2, 3, 4), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="no training forward"):
        mkcache.linear(x, w, b, residual=r, training=True)
    with pytest.raises(mkcache.InvalidArgumentError, match="either residual or out"):
        mkcache.linear(x, w, b, residual=r, out=mkcache.Tensor(r.copy()))
