"""NaN through the operators, as the README's NaN paragraph states:
arithmetic propagates it; what the max/min-based and approximated kernels
make of a NaN is unspecified, but every element not computed from a NaN is
exact beside it."""
import numpy as np
import pytest

import mkcache
import reference as ref

NAN = np.float32(np.nan)


def with_nan(shape, where=(0,)):
    x = np.linspace(-2, 2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x.flat[list(where)] = NAN
    return x


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
    lin = np.asarray(mkcache.linear(a, w))
    assert np.isnan(lin[0, 0, 1]).all() and np.isfinite(lin[0, 0, 0]).all()
    c = np.asarray(mkcache.conv2d(a, rng.standard_normal((3, 3, 1, 1)).astype(np.float32)))
    assert np.isnan(c.reshape(2, 3, 20)[0, :, 7]).all()
    assert np.isfinite(c.reshape(2, 3, 20)[:, :, 8:]).all()
    n = np.asarray(mkcache.layer_norm(a))
    assert np.isnan(n[0, 0, 1]).all() and np.isfinite(n[0, 0, 0]).all()
    bn = np.asarray(mkcache.batch_norm(a, np.zeros(3, np.float32), np.ones(3, np.float32)))
    assert np.isnan(bn.flat[7]) and np.isfinite(np.delete(bn.ravel(), 7)).all()


KINDS = ["relu", "leaky_relu", "elu", "gelu", "tanh", "sigmoid", "swish", "hardswish", "mish",
         "relu6", "clip", "sqrt", "abs", "exp", "log", "square", "softplus"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ["numpy", "plain", "blocked"])
def test_activations_exact_beside_a_nan(kind, layout):
    x = with_nan((2, 9, 3, 3), where=(0, 40, 161))
    if kind in ("sqrt", "log"):
        x = np.abs(x) + 0.5
    args = (-1.0, 1.0) if kind == "clip" else ()
    src = {"numpy": x, "plain": mkcache.Tensor(x),
           "blocked": mkcache.to_layout(mkcache.Tensor(x), "nChw8c")}[layout]
    y = np.asarray(getattr(mkcache, kind)(src, *args))
    with np.errstate(invalid="ignore"):  # the reference meets the NaN too
        want = ref.activation(kind, x.astype(np.float64),
                              *((-1.0, 1.0) if kind == "clip" else
                                (0.01, 0.0) if kind == "leaky_relu" else
                                (1.0, 0.0) if kind in ("elu", "swish") else
                                (1 / 6, 0.5) if kind == "hardswish" else
                                (0.0, 6.0) if kind == "relu6" else ()))
    fine = ~np.isnan(x)
    ref.assert_close_elementwise(y[fine], want[fine], kind)


@pytest.mark.parametrize("op,fn", [("maximum", np.maximum), ("minimum", np.minimum)])
def test_maximum_minimum_exact_beside_a_nan(op, fn, rng):
    a = with_nan((3, 8), where=(1, 9))
    b = rng.standard_normal((3, 8)).astype(np.float32)
    b.flat[[9, 20]] = NAN
    for x, y in ((a, b), (b, a), (a, b[0]), (b[:1], a)):
        got = np.asarray(getattr(mkcache, op)(x, y))
        want = fn(x, y)
        fine = ~np.isnan(want)
        np.testing.assert_array_equal(got[fine], want[fine])


def test_max_pool_exact_beside_a_nan():
    p = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    p[0, 0, 0, 0] = NAN
    got = np.asarray(mkcache.max_pool2d(p, 2))
    want = ref.pool(p, "max", (2, 2), (2, 2), (0, 0), (0, 0))
    fine = ~np.isnan(want)
    np.testing.assert_array_equal(got[fine], want[fine])
    avg = np.asarray(mkcache.avg_pool2d(p, 2))
    assert np.isnan(avg[0, 0, 0, 0]) and np.isfinite(avg.ravel()[1:]).all()


def test_max_pool_of_minus_infinity_is_the_lowest_float():
    p = np.full((1, 1, 2, 2), -np.inf, np.float32)
    got = np.asarray(mkcache.max_pool2d(p, 2))
    assert got.ravel()[0] in (-np.inf, np.finfo(np.float32).min)
