"""relu: plain and blocked inputs, in place, no reorder after a conv."""
import numpy as np
import pytest

import mkcache
from reference import conv2d_nchw, relu


@pytest.mark.parametrize("shape", [(1, 16), (7,), (3, 5, 7), (2, 17, 9, 5), (1, 3, 2, 5, 7)])
def test_relu_matches_reference(shape, rng):
    x = rng.standard_normal(shape, dtype=np.float32)
    y = mkcache.relu(x)
    assert y.shape == shape
    np.testing.assert_array_equal(np.asarray(y), relu(x))


def test_relu_in_place_equals_out_of_place(rng):
    x = rng.standard_normal((2, 5, 6, 7), dtype=np.float32)
    expected = relu(x)
    t = mkcache.Tensor(x.copy())
    same = mkcache.relu(t, out=t)
    assert same is t
    np.testing.assert_array_equal(np.asarray(t), expected)
    np.testing.assert_array_equal(np.asarray(mkcache.relu(x)), expected)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_conv_then_relu_performs_no_reorder(data_format, rng):
    x = rng.standard_normal((2, 16, 9, 9), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
    exact, _ = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    xin = x if data_format == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.conv2d(xin, w, padding=1, data_format=data_format)
    before = mkcache.cache.reorder_count()
    z = mkcache.relu(y)
    assert mkcache.cache.reorder_count() == before, "relu converted its input"
    assert z.format == y.format
    assert z.layout == data_format
    out = np.asarray(z)
    if data_format == "NHWC":
        out = out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, relu(exact), rtol=1e-4, atol=1e-4)


def test_relu_into_wrapped_buffer(rng):
    x = rng.standard_normal((3, 4), dtype=np.float32)
    buf = np.full((3, 4), 7, dtype=np.float32)
    mkcache.relu(x, out=mkcache.Tensor(buf))
    np.testing.assert_array_equal(buf, relu(x))
