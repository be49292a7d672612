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



# Geometries inside the bounds check_window_bounds keeps, which must still
# run: windows lying wholly in padding (legal in PyTorch: those outputs are
# the bias alone), large strides, paddings and dilations with small outputs.
WINDOW_EDGES = [  # N, C, H, W, O, kernel, stride, pb, pe, dilation
    (2, 17, 3, 4, 5, (2, 3), (1, 2), (4, 5), (6, 3), (1, 1)),
    (3, 3, 5, 5, 16, (3, 1), (2, 1), (9, 0), (9, 7), (2, 3)),
    (2, 19, 4, 3, 4, (1, 2), (1 << 16, 3), (0, 1), (0, 1), (1, 2)),
    (2, 19, 4, 3, 4, (2, 2), (2, 1 << 10), (1, 1 << 12), (1, 1 << 12), (1, 1 << 12)),
    (1, 5, 6, 2, 3, (2, 2), (1 << 18, 1), (1 << 20, 0), (1 << 20, 0), (1 << 19, 1)),
]


@pytest.mark.parametrize("case", WINDOW_EDGES, ids=[str(c) for c in WINDOW_EDGES])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_conv2d_window_edges_forward_and_grad(case, fmt, rng):
    import fuzz_strategies as fs
    import grad_reference as gref
    n, c, h, w, o, k, s, pb, pe, dil = case
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((o, c) + k, dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32)
    exact, mag = fs.conv2d_gather(x, wt, b, s, pb, pe, dil, 1)
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    pad = (pb[0], pe[0], pb[1], pe[1])
    y = mkcache.conv2d(xin, wt, b, stride=s, padding=pad, dilation=dil, data_format=fmt,
                       training=True)
    assert_close(y.numpy("NCHW"), exact, mag, reduction=c * k[0] * k[1])
    dy = rng.standard_normal(exact.shape, dtype=np.float32)
    dyin = dy if fmt == "NCHW" else np.ascontiguousarray(dy.transpose(0, 2, 3, 1))
    g = mkcache.grad.conv2d(dyin, xin, wt, b, stride=s, padding=pad, dilation=dil,
                            data_format=fmt)
    outs = n * exact.shape[2] * exact.shape[3]
    if max(pb + pe) < 64:  # the reference pads x
        (dx, dw, db), (mx, mw, mb) = gref.conv_backward(x, wt, dy, s, pb, pe, dil, 1)
        assert_close(g.x.numpy("NCHW"), dx, mx, reduction=o * k[0] * k[1], what="dx")
        assert_close(g.weight.numpy(), dw, mw, reduction=outs, what="dw")
    else:  # the reference pads x: past that, the shape and finiteness only
        assert g.x.shape == xin.shape and np.isfinite(g.x.numpy()).all()
    db = dy.astype(np.float64).sum(axis=(0, 2, 3))
    assert_close(g.bias.numpy(), db, np.abs(dy).astype(np.float64).sum(axis=(0, 2, 3)),
                 reduction=outs, what="db")
