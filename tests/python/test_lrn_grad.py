"""LRN's gradient where oneDNN 3.2 needs help: a reference gradient beside
a jit forward (no workspace), and a forward left on another arrangement."""
import numpy as np
import pytest

import grad_reference as gref
import mkcache
from mkcache import grad
from reference import assert_close

ALPHA, BETA, K = 1e-2, 0.75, 2.0


def to_format(a, fmt):
    """A channels-first array in `fmt`."""
    return a if fmt == "NCHW" else np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def check_gradient(dx, x, dy, size):
    exact = gref.lrn_backward(x, dy, size, ALPHA, BETA, K)
    assert_close(dx.numpy("NCHW"), exact, np.abs(exact) + np.abs(dy), reduction=2 * size)


@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_lrn_backward_without_the_forwards_workspace(transfer, rng):
    """NCHW with 16 channels and size 5: oneDNN's jit forward writes a
    workspace its reference gradient does not take (the gradient used to
    refuse with an internal workspace mismatch)."""
    x, dy = randn(rng, 2, 16, 5, 6), randn(rng, 2, 16, 5, 6)
    if transfer:
        mkcache.lrn(x, 5, ALPHA, BETA, K, training=True)
    check_gradient(grad.lrn(dy, x, 5, ALPHA, BETA, K), x, dy, 5)


ARRANGEMENTS = ["NCHW", "NHWC", "nChw16c", "nChw8c"]


def arranged(a, arrangement):
    if arrangement in ("NCHW", "NHWC"):
        return to_format(a, arrangement), arrangement
    return mkcache.to_layout(a, arrangement), "NCHW"


@pytest.mark.parametrize("forward", ARRANGEMENTS)
@pytest.mark.parametrize("backward", ARRANGEMENTS)
@pytest.mark.parametrize("size", [3, 5])
def test_lrn_backward_after_a_forward_on_another_arrangement(forward, backward, size, rng):
    """The training forward's descriptor is found by name, attributes and
    dims: one for another arrangement of src hints no gradient (oneDNN
    refused the descriptor, or the workspaces differed)."""
    x, dy = randn(rng, 2, 19, 5, 6), randn(rng, 2, 19, 5, 6)
    xf, ff = arranged(x, forward)
    mkcache.lrn(xf, size, ALPHA, BETA, K, data_format=ff, training=True, name="lrn_mixed")
    xb, fb = arranged(x, backward)
    dyb, _ = arranged(dy, backward)
    check_gradient(grad.lrn(dyb, xb, size, ALPHA, BETA, K, data_format=fb, name="lrn_mixed"),
                   x, dy, size)
