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
@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(fmt, size, rng):
    x = rng.standard_normal((2, 19, 5, 7), dtype=np.float32) * 2
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.lrn(xin, size, 1e-2, 0.75, 2.0, data_format=fmt)
    assert_close_elementwise(y.numpy("NCHW"), lrn_nchw(x, size, 1e-2, 0.75, 2.0), ulps=64)


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
