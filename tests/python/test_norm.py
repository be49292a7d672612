"""layer_norm, batch_norm (inference and training forward) and LRN against
numpy references, both layouts."""
import numpy as np
import pytest

import mkcache
from reference import (assert_close_elementwise, batch_norm_nchw, layer_norm as ref_ln,
                       lrn_nchw)


@pytest.mark.parametrize("shape, axis", [((5, 17), -1), ((3, 4, 33), -1), ((2, 3, 5, 7), 2),
                                         ((128, 768), -1), ((2, 6, 9), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape, axis, affine, rng):
    x = rng.standard_normal(shape, dtype=np.float32) * 3 + 1
    norm_shape = shape[axis % len(shape):]
    scale = rng.standard_normal(norm_shape, dtype=np.float32) if affine else None
    shift = rng.standard_normal(norm_shape, dtype=np.float32) if affine else None
    y = mkcache.layer_norm(x, scale, shift, begin_norm_axis=axis, epsilon=1e-5)
    assert y.shape == shape
    n = int(np.prod(norm_shape))
    assert_close_elementwise(np.asarray(y), ref_ln(x, axis, scale, shift), ulps=16 + n // 8)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_inference(fmt, affine, rng):
    x = rng.standard_normal((2, 19, 7, 5), dtype=np.float32)
    c = 19
    mean = rng.standard_normal(c, dtype=np.float32)
    var = rng.random(c, dtype=np.float32) + 0.5
    scale = rng.standard_normal(c, dtype=np.float32) if affine else None
    shift = rng.standard_normal(c, dtype=np.float32) if affine else None
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.batch_norm(xin, mean, var, scale, shift, epsilon=1e-3, data_format=fmt)
    assert y.layout == fmt
    assert_close_elementwise(y.numpy("NCHW"), batch_norm_nchw(x, mean, var, scale, shift, 1e-3),
                             ulps=16)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_batch_norm_training(fmt, rng):
    x = rng.standard_normal((3, 7, 5, 6), dtype=np.float32) * 2 + 0.5
    c = 7
    running_mean = np.zeros(c, np.float32)
    running_var = np.ones(c, np.float32)
    scale = rng.standard_normal(c, dtype=np.float32)
    shift = rng.standard_normal(c, dtype=np.float32)
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y, bm, bv = mkcache.batch_norm(xin, running_mean, running_var, scale, shift, training=True,
                                   momentum=0.9, data_format=fmt)
    x64 = x.astype(np.float64)
    want_mean = x64.mean(axis=(0, 2, 3))
    want_var = x64.var(axis=(0, 2, 3))
    assert_close_elementwise(bm, want_mean, ulps=256)
    assert_close_elementwise(bv, want_var, ulps=256)
    assert_close_elementwise(y.numpy("NCHW"), batch_norm_nchw(x, want_mean, want_var, scale, shift),
                             ulps=256)
    assert_close_elementwise(running_mean, 0.1 * want_mean, ulps=256)
    assert_close_elementwise(running_var, 0.9 + 0.1 * want_var, ulps=256)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 20])
def test_lrn(fmt, size, rng):
    """ONNX's window for every size: an even one sums `size` channels, one
    more above c than below."""
    x = rng.standard_normal((2, 19, 5, 7), dtype=np.float32) * 2
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.lrn(xin, size, 1e-2, 0.75, 2.0, data_format=fmt)
    assert_close_elementwise(y.numpy("NCHW"), lrn_nchw(x, size, 1e-2, 0.75, 2.0), ulps=64)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_window_by_hand(size):
    """One pixel, channels 1..5, alpha = size so that the divisor is
    k + the window's sum of squares, beta 1: the window of channel 2 is
    channels 2, 3 (size 2) or 1 .. 4 (size 4), counted from 0."""
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 5, 1, 1)
    y = np.asarray(mkcache.lrn(x, size, float(size), 1.0, 1.0)).ravel()
    window = [2, 3] if size == 2 else [1, 2, 3, 4]
    assert y[2] == pytest.approx(3 / (1 + sum((c + 1) ** 2 for c in window)), rel=1e-6)
    # The top channel's window is clipped: size 2 holds channel 4 alone.
    top = [4] if size == 2 else [3, 4]
    assert y[4] == pytest.approx(5 / (1 + sum((c + 1) ** 2 for c in top)), rel=1e-6)


def test_norm_errors():
    x = np.ones((2, 3, 4, 4), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="begin_norm_axis"):
        mkcache.layer_norm(x, begin_norm_axis=4)
    with pytest.raises(mkcache.InvalidArgumentError, match="scale"):
        mkcache.layer_norm(x, np.ones(3, np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="mean"):
        mkcache.batch_norm(x, np.zeros(4, np.float32), np.ones(3, np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="running"):
        mkcache.batch_norm(x)
    with pytest.raises(mkcache.InvalidArgumentError, match="size"):
        mkcache.lrn(x, 0)
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        mkcache.lrn(np.ones((2, 3), np.float32))


def test_layer_norm_calls_remembered_follow_every_argument(rng):
    """Inference layer_norm is remembered per thread by its raw arguments:
    one name alternating epsilon, axis (also from the end), scale/shift
    present or not, their shapes, and src's shape must each compute what a
    fresh call would; a training call in between leaves its statistics; a
    repeat counts as a hit."""
    x = rng.standard_normal((3, 4, 10), dtype=np.float32) * 2 + 1
    s40, b40 = rng.standard_normal((4, 10), dtype=np.float32), rng.standard_normal((4, 10),
                                                                                  dtype=np.float32)
    s10, b10 = s40[0].copy(), b40[0].copy()
    x2 = x.reshape(12, 10).copy()
    variants = [(x, -1, 1e-5, s10, b10), (x, 2, 1e-5, s10, b10), (x, -1, 0.3, s10, b10),
                (x, -1, 1e-5, None, b10), (x, -1, 1e-5, s10, None), (x, -1, 1e-5, None, None),
                (x, 1, 1e-5, s40, b40), (x, 1, 1e-5, s40, b40.reshape(40)),  # shift's shape
                (x, -2, 1e-5, s40.reshape(40), b40.reshape(40)),
                (x2, -1, 1e-5, s10, b10)]
    # Each variant runs a few times in a row: a call is remembered once it
    # hits, and variants sharing a key (the name and shape; epsilon is in the
    # signature) replace each other's entry, which forgets remembered calls.
    for step in range(2):
        for src, axis, eps, scale, shift in variants:
            norm_shape = src.shape[axis % src.ndim:]
            want = ref_ln(src, axis, None if scale is None else scale.reshape(norm_shape),
                          None if shift is None else shift.reshape(norm_shape), eps=eps)
            for repeat in range(3):
                y = mkcache.layer_norm(src, scale, shift, begin_norm_axis=axis, epsilon=eps,
                                       name="remembered_ln")
                assert_close_elementwise(np.asarray(y), want,
                                         f"step {step} axis {axis} eps {eps} call {repeat}",
                                         ulps=512)
        mkcache.layer_norm(x, s10, b10, training=True, name="remembered_ln")
    s0 = mkcache.cache.stats()
    mkcache.layer_norm(x, s10, b10, name="remembered_ln")  # replaces the training entry
    mkcache.layer_norm(x, s10, b10, name="remembered_ln")
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 1 and s1["misses"] == s0["misses"] + 1
    assert s1["insertions"] == s0["insertions"] + 1
    s0 = mkcache.cache.stats()
    mkcache.layer_norm(x, s10, b10, name="remembered_ln")
    mkcache.layer_norm(x, s10, b10, name="remembered_ln")
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 2 and s1["misses"] == s0["misses"]
    with pytest.raises(mkcache.InvalidArgumentError, match="scale"):
        mkcache.layer_norm(x, s40, b10, name="remembered_ln")  # 40 values, 10 normalized


def test_batch_norm_calls_remembered_follow_every_argument(rng):
    """Inference batch_norm is remembered per thread by its raw arguments:
    one name alternating epsilon, data_format, scale/shift present or not,
    and src's exact layout (plain, then a blocked conv output of the same
    shape) must each compute what a fresh call would; a training call in
    between updates the running statistics the next calls read."""
    x = rng.standard_normal((2, 16, 5, 6), dtype=np.float32) * 2 + 0.5
    c = 16
    mean, var = rng.standard_normal(c, dtype=np.float32), rng.random(c, dtype=np.float32) + 0.5
    scale, shift = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(c,
                                                                                dtype=np.float32)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    blocked = mkcache.conv2d(x, np.eye(c, dtype=np.float32)[:, :, None, None])
    assert blocked.format != "abcd"
    # Neighbours differ in one argument each: a stale remembered call would
    # show on the next variant's first call.
    variants = [(x, "NCHW", 1e-5, scale, shift), (x, "NCHW", 0.5, scale, shift),
                (blocked, "NCHW", 0.5, scale, shift), (x, "NCHW", 1e-5, None, shift),
                (x, "NCHW", 1e-5, scale, None), (x, "NCHW", 1e-5, None, None),
                (x_nhwc, "NHWC", 1e-5, scale, shift), (blocked, "NCHW", 0.5, None, None)]
    for step in range(2):
        for src, fmt, eps, sc, sh in variants:  # each a few times in a row (see layer_norm's)
            want = batch_norm_nchw(x, mean, var, sc, sh, eps)
            for repeat in range(3):
                before = mkcache.cache.reorder_count()
                y = mkcache.batch_norm(src, mean, var, sc, sh, epsilon=eps, data_format=fmt,
                                       name="remembered_bn")
                assert mkcache.cache.reorder_count() == before, "src converted"
                assert_close_elementwise(y.numpy("NCHW"), want,
                                         f"step {step} {fmt} eps {eps} call {repeat}", ulps=16)
        mkcache.batch_norm(x, mean, var, scale, shift, training=True, momentum=0.5,
                           name="remembered_bn")  # mean and var change in place


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_lrn_calls_remembered_follow_every_argument(fmt, rng):
    """Inference LRN is remembered per thread by its raw arguments: one name
    alternating size, alpha, beta and k (each alone) and src's exact layout
    must each compute what a fresh call would."""
    x = rng.standard_normal((2, 16, 5, 7), dtype=np.float32) * 2
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    blocked = mkcache.conv2d(xin, np.eye(16, dtype=np.float32)[:, :, None, None],
                             data_format=fmt)
    variants = [(xin, 5, 1e-2, 0.75, 2.0), (blocked, 5, 1e-2, 0.75, 2.0), (xin, 3, 1e-2, 0.75, 2.0),
                (xin, 5, 0.5, 0.75, 2.0), (xin, 5, 1e-2, 0.5, 2.0), (xin, 5, 1e-2, 0.75, 1.0)]
    for step in range(2):
        for src, size, alpha, beta, k in variants:
            want = lrn_nchw(x, size, alpha, beta, k)
            for repeat in range(3):
                before = mkcache.cache.reorder_count()
                y = mkcache.lrn(src, size, alpha, beta, k, data_format=fmt, name="remembered_lrn")
                assert mkcache.cache.reorder_count() == before, "src converted"
                assert_close_elementwise(y.numpy("NCHW"), want,
                                         f"step {step} size {size} alpha {alpha} beta {beta} "
                                         f"k {k} call {repeat}", ulps=64)
