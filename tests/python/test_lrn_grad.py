"""LRN's gradient where oneDNN 3.2 needs help: windows of one channel on
channels-last data (its kernel crashes), a reference gradient beside a jit
forward (no workspace), and a forward left on another arrangement."""
import numpy as np
import pytest

import grad_reference as gref
import mkcache
import reference as ref
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


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("shape", [(3, 7, 5, 4), (2, 16, 3, 5), (2, 19, 1, 1), (2, 1, 4, 3)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_lrn_backward_every_window_in_both_formats(fmt, size, shape, transfer, rng):
    """Size 1 on channels-last data crashed inside oneDNN 3.2 (its avx512
    nhwc gradient kernel); the training forward of it was right."""
    x, dy = randn(rng, *shape), randn(rng, *shape)
    if transfer:
        y = mkcache.lrn(to_format(x, fmt), size, ALPHA, BETA, K, data_format=fmt, training=True)
        assert_close(y.numpy("NCHW"), ref.lrn_nchw(x, size, ALPHA, BETA, K), np.abs(x),
                     reduction=size + 8)
    for _ in range(2):  # the second call hits the cache
        dx = grad.lrn(to_format(dy, fmt), to_format(x, fmt), size, ALPHA, BETA, K,
                      data_format=fmt)
        assert dx.layout == fmt
        check_gradient(dx, x, dy, size)


def test_lrn_backward_size_2_in_channels_last_as_channels_first(rng):
    """Size 2 (oneDNN's kernel rounded even windows down to one channel and
    crashed alike) runs on the even-window kernel: both layouts agree."""
    x, dy = randn(rng, 3, 7, 5, 4), randn(rng, 3, 7, 5, 4)
    want = grad.lrn(dy, x, 2, ALPHA, BETA, K).numpy("NCHW")
    got = grad.lrn(to_format(dy, "NHWC"), to_format(x, "NHWC"), 2, ALPHA, BETA, K,
                   data_format="NHWC")
    np.testing.assert_allclose(got.numpy("NCHW"), want, rtol=1e-6, atol=1e-7)
    check_gradient(got, x, dy, 2)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_lrn_backward_of_one_channel_and_one_pixel_refuses_size_1(fmt, rng):
    """No arrangement of an N x 1 x 1 x 1 src escapes the crashing kernel:
    size 1 is refused; larger ones, and size 2 (the even-window kernel),
    computed."""
    x, dy = randn(rng, 4, 1, 1, 1), randn(rng, 4, 1, 1, 1)
    with pytest.raises(mkcache.InvalidArgumentError, match="one channel and one pixel"):
        grad.lrn(to_format(dy, fmt), to_format(x, fmt), 1, data_format=fmt)
    for size in (2, 3):
        check_gradient(grad.lrn(to_format(dy, fmt), to_format(x, fmt), size, ALPHA, BETA, K,
                                data_format=fmt), x, dy, size)


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
@pytest.mark.parametrize("size", [1, 4, 5])
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
