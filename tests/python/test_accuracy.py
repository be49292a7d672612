"""Every transcendental activation within a bound in float32 ulps of the
exact value (float64 on the same float32 input), on a fixed sample of its
whole float32 domain: the eager call, a program's `reference` and `onednn`
implementations, and the gradient. tests/bench/ulp_table.py measures the same on a far
denser sample and prints the table."""
import numpy as np
import pytest

import mkcache
from accuracy import EXACT, GRAD, domain, ulp_error

# Where our own kernel or a double evaluation computes the op: half an ulp
# and a little; tanh and sqrt are oneDNN's (sqrt correctly rounded).
BOUND = {op: 1.0 for op in EXACT}
BOUND["tanh"] = 2.0
# The gradients (dy = 1: the derivative): our kernel's, but for log's and
# sqrt's (oneDNN's); gelu's loses an ulp where it crosses 0 (x = -0.75).
GRAD_BOUND = {op: 1.0 for op in GRAD}
GRAD_BOUND.update(gelu=2.0, sqrt=2.0)


def sample(op):
    """Every 2^16-th float32 bit pattern (zero, denormals, the largest
    magnitudes), every 2^11-th where the functions bend and saturate
    (1/16 <= |x| < 128), the 2^11 patterns around 1.0, both signs, and
    inputs where a kernel went wrong before."""
    bits = np.concatenate([
        np.arange(0, 0x7F800000, 1 << 16, dtype=np.uint32),
        np.arange(0x3D800000, 0x43000000, 1 << 11, dtype=np.uint32),
        np.arange(0x3F800000 - 1024, 0x3F800000 + 1024, dtype=np.uint32),
    ])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    known = np.float32([1.0000001, 1.0000459, -2.2204460e-16, -10.6399, -6.18738, -28.296,
                        -86.9902, -89.0532, -103.97, 1.7014118e38, -3.4024e38])
    return domain(op, np.concatenate([bits.view(np.float32), known]))


def worst(op, got, x, exact=EXACT):
    err = ulp_error(got, exact[op](x))
    i = int(np.argmax(err))
    return err[i], x[i], got[i]


@pytest.mark.parametrize("op", sorted(EXACT))
def test_eager_within_bound(op):
    x = sample(op)
    err, at, got = worst(op, np.asarray(mkcache.activation(x, op)), x)
    assert err <= BOUND[op], f"{op}({at!r}) = {got!r}: {err:.3g} ulp"


@pytest.mark.parametrize("op", sorted(EXACT))
def test_reference_implementation_within_bound(op):
    x = sample(op)
    with mkcache.trace(lambda x: mkcache.activation(x, op), x,
                       impl={"activation": "reference"}) as prog:
        got = np.asarray(prog.run(x=x)["output"])
        assert all(s["impl"] == "reference" for s in prog.steps() if s["kind"] == "node")
    err, at, value = worst(op, got, x)
    assert err <= BOUND[op], f"{op}({at!r}) = {value!r}: {err:.3g} ulp"


@pytest.mark.parametrize("op", sorted(EXACT))
def test_program_onednn_implementation_within_bound(op):
    """A program's default implementation of the node runs the same kernel
    as the eager call."""
    x = sample(op)
    with mkcache.trace(lambda x: mkcache.activation(x, op), x,
                       impl={"activation": "onednn"}) as prog:
        got = np.asarray(prog.run(x=x)["output"])
    err, at, value = worst(op, got, x)
    assert err <= BOUND[op], f"{op}({at!r}) = {value!r}: {err:.3g} ulp"


@pytest.mark.parametrize("op", sorted(EXACT))
def test_blocked_input_within_bound(op):
    """A blocked input (channels padded 9 -> 16) is computed the same and
    comes back in its own layout."""
    x = sample(op)
    x = x[np.linspace(0, x.size - 1, 8 * 9 * 11 * 13).astype(np.int64)].reshape(8, 9, 11, 13)
    t = mkcache.to_layout(mkcache.Tensor(x), "nChw8c")
    y = mkcache.activation(t, op)
    got = np.asarray(y).ravel()
    err, at, value = worst(op, got, x.ravel())
    assert err <= BOUND[op], f"{op}({at!r}) = {value!r}: {err:.3g} ulp"


@pytest.mark.parametrize("op", sorted(GRAD))
def test_gradient_within_bound(op):
    x = sample(op)
    got = np.asarray(mkcache.grad.activation(np.ones_like(x), x, op))
    err, at, value = worst(op, got, x, GRAD)
    assert err <= GRAD_BOUND[op], f"{op}'({at!r}) = {value!r}: {err:.3g} ulp"


@pytest.mark.parametrize("op", ["exp", "log", "sigmoid", "swish", "mish", "elu", "gelu",
                                "gelu_tanh", "softplus"])
def test_infinities_give_the_limits(op):
    x = np.float32([-np.inf, np.inf])
    want = {"exp": [0, np.inf], "log": [np.nan, np.inf], "sigmoid": [0, 1], "softplus": [0, np.inf],
            "swish": [0, np.inf], "mish": [0, np.inf], "elu": [-1, np.inf],
            "gelu": [0, np.inf], "gelu_tanh": [0, np.inf]}[op]
    np.testing.assert_array_equal(np.asarray(mkcache.activation(x, op)), np.float32(want))
