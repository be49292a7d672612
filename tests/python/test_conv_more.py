"""conv3d, conv2d_transpose and the residual sum post-op against numpy."""
import numpy as np
import pytest

import mkcache
from reference import activation as ref_activation
from reference import assert_close, conv_nd, conv_transpose2d

CONV3D = [  # N, C, D, H, W, O, kernel, stride, pb, pe, dilation, groups
    (1, 3, 5, 7, 6, 8, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    (2, 4, 6, 5, 7, 6, (2, 3, 1), (2, 1, 1), (0, 1, 0), (1, 0, 0), (1, 1, 1), 2),
    (1, 17, 4, 9, 5, 5, (3, 1, 3), (1, 2, 1), (2, 0, 1), (2, 0, 1), (2, 1, 1), 1),
]


@pytest.mark.parametrize("case", CONV3D, ids=[str(c[:6]) for c in CONV3D])
@pytest.mark.parametrize("fmt", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv3d(case, fmt, bias, rng):
    n, c, d, h, w, o, k, s, pb, pe, dil, g = case
    x = rng.standard_normal((n, c, d, h, w), dtype=np.float32)
    wt = rng.standard_normal((o, c // g) + k, dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32) if bias else None
    exact, mag = conv_nd(x, wt, b, s, pb, pe, dil, g)
    xin = x if fmt == "NCDHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    pad = tuple(v for pair in zip(pb, pe) for v in pair)
    y = mkcache.conv3d(xin, wt, b, stride=s, padding=pad, dilation=dil, groups=g, data_format=fmt)
    assert y.layout == fmt
    assert_close(y.numpy("NCDHW"), exact, mag, reduction=(c // g) * int(np.prod(k)))


DECONV = [  # N, C_in, H, W, C_out, kernel, stride, pb, pe, output_padding, dilation, groups
    (1, 3, 5, 4, 7, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 6, 5, 6, (4, 3), (2, 1), (1, 0), (1, 0), (0, 0), (1, 1), 2),
    (1, 16, 7, 7, 8, (3, 3), (1, 1), (0, 0), (0, 0), (0, 0), (2, 2), 1),
    (2, 6, 3, 5, 9, (2, 2), (3, 2), (0, 1), (1, 0), (2, 1), (1, 1), 3),
]


@pytest.mark.parametrize("case", DECONV, ids=[str(c[:5]) for c in DECONV])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_transpose(case, fmt, bias, rng):
    n, ci, h, w, co, k, s, pb, pe, op, dil, g = case
    x = rng.standard_normal((n, ci, h, w), dtype=np.float32)
    wt = rng.standard_normal((ci, co // g) + k, dtype=np.float32)
    b = rng.standard_normal(co, dtype=np.float32) if bias else None
    exact, mag = conv_transpose2d(x, wt, b, s, pb, pe, op, dil, g)
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.conv2d_transpose(xin, wt, b, stride=s, padding=(pb[0], pe[0], pb[1], pe[1]),
                                 output_padding=op, dilation=dil, groups=g, data_format=fmt)
    assert y.numpy("NCHW").shape == exact.shape
    assert_close(y.numpy("NCHW"), exact, mag, reduction=(ci // g) * k[0] * k[1])


@pytest.mark.parametrize("residual_kind", ["tensor_same_layout", "numpy", "tensor_plain"])
def test_conv_residual_sum(residual_kind, rng):
    x = rng.standard_normal((2, 16, 7, 7), dtype=np.float32)
    w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32) * 0.2
    r = rng.standard_normal((2, 16, 7, 7), dtype=np.float32)
    exact, mag = conv_nd(x, w, pad_begin=(1, 1), pad_end=(1, 1))
    want = ref_activation("relu", exact + r)
    if residual_kind == "tensor_same_layout":
        res = mkcache.conv2d(r, np.eye(16, dtype=np.float32)[:, :, None, None])  # blocked like y
    elif residual_kind == "tensor_plain":
        res = mkcache.Tensor(r.copy())
    else:
        res = r
    y = mkcache.conv2d(x, w, padding=1, activation="relu", residual=res)
    if isinstance(res, mkcache.Tensor):
        assert y is res  # updated in place
    else:
        np.testing.assert_array_equal(res, r)  # the caller's array is kept
    assert_close(y.numpy("NCHW"), want, mag + np.abs(r), reduction=16 * 9 + 1)


def test_conv_more_errors():
    x = np.ones((1, 4, 5, 5), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="output_padding"):
        mkcache.conv2d_transpose(x, np.ones((4, 2, 3, 3), np.float32), stride=1, output_padding=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="5-D"):
        mkcache.conv3d(x, np.ones((2, 4, 3, 3, 3), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="channels"):
        mkcache.conv2d_transpose(x, np.ones((3, 2, 3, 3), np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="shape"):
        mkcache.conv2d(x, np.ones((2, 4, 3, 3), np.float32), residual=np.ones((1, 2, 4, 4), np.float32))
