"""Each transcendental activation evaluated exactly enough to measure a
float32 result against (float64 on the same float32 input, written so no
step cancels), numpy's float32 counterpart where numpy has one, and the
error in float32 ulps. Shared by tests/python/test_accuracy.py and
tests/bench/ulp_table.py."""
from __future__ import annotations

import math

import numpy as np

SQRT_2_OVER_PI = 0.79788456080286535588
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _sigmoid(v):
    # exp(-v) overflows to inf for v < -709: 1 / inf is the 0 float32 rounds to.
    return 1.0 / (1.0 + np.exp(-v))


def _gelu(v):
    # 0.5 v (1 + erf(v / sqrt 2)) with 1 + erf(t) as erfc(-t): no cancellation
    # where erf is near -1.
    return 0.5 * v * _erfc(-v / math.sqrt(2.0)).astype(np.float64)


def _gelu_tanh(v):
    # 0.5 (1 + tanh(u)) is sigmoid(2u).
    return v * _sigmoid(2.0 * SQRT_2_OVER_PI * (v + 0.044715 * v * v * v))


def _exact(f):
    def on_float32(x):
        with np.errstate(all="ignore"):
            return f(np.asarray(x, dtype=np.float32).astype(np.float64))
    return on_float32


# The default parameters of each kind (mkcache.ACTIVATIONS): elu alpha 1,
# swish beta 1.
EXACT = {
    "log": _exact(np.log),
    "exp": _exact(np.exp),
    "sqrt": _exact(np.sqrt),
    "tanh": _exact(np.tanh),
    "sigmoid": _exact(_sigmoid),
    "gelu": _exact(_gelu),
    "gelu_tanh": _exact(_gelu_tanh),
    "elu": _exact(lambda v: np.where(v > 0, v, np.expm1(v))),
    "swish": _exact(lambda v: v * _sigmoid(v)),
    "mish": _exact(lambda v: v * np.tanh(np.log1p(np.exp(v)))),
    "softplus": _exact(lambda v: np.logaddexp(0.0, v)),
}


def _mish_grad(v):
    # tanh(sp) = n / (n + 2) and 1 - tanh(sp)^2 = 4 (n + 1) / (n + 2)^2 with
    # n = u (u + 2), u = e^v; d sp / dv = sigmoid(v). Past v = 300 the
    # fractions are 1 and 0 in double ((n + 2)^2 overflows, n does not).
    u = np.exp(np.minimum(v, 300.0))
    n = u * (u + 2.0)
    return n / (n + 2.0) + v * (4.0 * (n + 1.0) / (n + 2.0) ** 2) * _sigmoid(v)


def _gelu_tanh_grad(v):
    u2 = 2.0 * SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)
    du2 = 2.0 * SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * v * v)
    return _sigmoid(u2) + v * _sigmoid(u2) * _sigmoid(-u2) * du2


# The derivatives, as mkcache.grad.activation computes them (dy = 1).
GRAD = {
    "log": _exact(lambda v: 1.0 / v),
    "exp": _exact(np.exp),
    "sqrt": _exact(lambda v: 0.5 / np.sqrt(v)),
    "tanh": _exact(lambda v: 1.0 / np.cosh(v) ** 2),
    "sigmoid": _exact(lambda v: _sigmoid(v) * _sigmoid(-v)),
    "gelu": _exact(lambda v: 0.5 * _erfc(-v / math.sqrt(2.0)).astype(np.float64)
                   + v * np.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)),
    "gelu_tanh": _exact(_gelu_tanh_grad),
    "elu": _exact(lambda v: np.where(v > 0, 1.0, np.exp(v))),
    "swish": _exact(lambda v: _sigmoid(v) + v * _sigmoid(v) * _sigmoid(-v)),
    "mish": _exact(_mish_grad),
    "softplus": _exact(_sigmoid),
}


def _float32(f):
    def on_float32(x):
        with np.errstate(all="ignore"):
            return f(np.asarray(x, dtype=np.float32))
    return on_float32


# numpy's float32 functions, and for the activations numpy lacks the usual
# float32 composition of them (gelu: numpy has no erf).
NUMPY = {
    "log": _float32(np.log),
    "exp": _float32(np.exp),
    "sqrt": _float32(np.sqrt),
    "tanh": _float32(np.tanh),
    "sigmoid": _float32(lambda x: 1 / (1 + np.exp(-x))),
    "gelu_tanh": _float32(lambda x: 0.5 * x * (1 + np.tanh(
        np.float32(SQRT_2_OVER_PI) * (x + np.float32(0.044715) * x * x * x)))),
    "elu": _float32(lambda x: np.where(x > 0, x, np.expm1(x))),
    "swish": _float32(lambda x: x / (1 + np.exp(-x))),
    "mish": _float32(lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    "softplus": _float32(lambda x: np.log1p(np.exp(x))),
}


def domain(op: str, x: np.ndarray) -> np.ndarray:
    """The finite float32 inputs of `x` where `op` is real-valued (log and
    sqrt: x >= 0)."""
    x = x[np.isfinite(x)]
    return x[x >= 0] if op in ("log", "sqrt") else x


def ulp_error(got, exact) -> np.ndarray:
    """|got - exact| in float32 ulps at exact's magnitude (the denormal
    spacing below the normal range). An infinity or NaN on either side is
    0 when got is what exact rounds to, else inf."""
    got = np.asarray(got, dtype=np.float32).astype(np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    with np.errstate(all="ignore"):
        rounded = exact.astype(np.float32).astype(np.float64)
        _, e = np.frexp(np.abs(exact))
        ulp = np.where(exact == 0, 2.0**-149, np.ldexp(1.0, np.maximum(e - 24, -149)))
        err = np.abs(got - exact) / ulp
        special = ~np.isfinite(rounded) | ~np.isfinite(got)
        same = (got == rounded) | (np.isnan(got) & np.isnan(exact))
    return np.where(special, np.where(same, 0.0, np.inf), err)
