"""Backward operators against independent numpy gradients (grad_reference.py),
the references themselves checked by finite differences, in both data
formats, with and without the forward's transfer through the cache."""
import ctypes
import threading

import numpy as np
import pytest

import grad_reference as gref
import mkcache
import reference as ref
from mkcache import grad
from reference import assert_close, assert_close_elementwise

lib = mkcache._capi.lib

CL = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}   # channels-first -> channels-last
CF = {4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}   # channels-last -> channels-first


def to_format(a, fmt):
    """A channels-first array in `fmt` (NCHW/NCDHW unchanged)."""
    return a if fmt in ("NCHW", "NCDHW") else np.ascontiguousarray(a.transpose(CL[a.ndim]))


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


# --------------------------------------------------------------- the references

def test_references_match_finite_differences(rng):
    """Each analytic reference gradient equals central differences of the
    corresponding forward reference (float64, tiny shapes)."""
    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    x, w = rng.standard_normal((2, 4, 5, 4)), rng.standard_normal((6, 2, 2, 3))
    args = dict(stride=(2, 1), pad_begin=(1, 0), pad_end=(0, 2), dilation=(1, 2), groups=2)
    y, _ = ref.conv_nd(x, w, None, *args.values())
    dy = rng.standard_normal(y.shape)
    (dx, dw, _), _ = gref.conv_backward(x, w, dy, *args.values())
    close(dx, gref.numeric_gradient(lambda v: ref.conv_nd(v, w, None, *args.values())[0], x, dy))
    close(dw, gref.numeric_gradient(lambda v: ref.conv_nd(x, v, None, *args.values())[0], w, dy))

    xt, wt = rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2))
    targs = dict(stride=(2, 1), pad_begin=(1, 0), pad_end=(0, 1), output_padding=(1, 0),
                 dilation=(1, 2), groups=2)
    y, _ = ref.conv_transpose2d(xt, wt, None, **targs)
    dy = rng.standard_normal(y.shape)
    (dx, dw, _), _ = gref.conv_transpose_backward(xt, wt, dy, targs["stride"],
                                                  targs["pad_begin"], targs["dilation"], 2)
    close(dx, gref.numeric_gradient(lambda v: ref.conv_transpose2d(v, wt, None, **targs)[0],
                                    xt, dy))
    close(dw, gref.numeric_gradient(lambda v: ref.conv_transpose2d(xt, v, None, **targs)[0],
                                    wt, dy))

    xp = rng.standard_normal((2, 3, 7, 6))
    for kind in ("max", "avg_include", "avg_exclude"):
        pool = dict(kernel=(3, 2), stride=(2, 2), pad_begin=(1, 0), pad_end=(1, 1))
        y = ref.pool(xp, kind, **pool)
        dy = rng.standard_normal(y.shape)
        close(gref.pool_backward(xp, dy, kind, **pool),
              gref.numeric_gradient(lambda v: ref.pool(v, kind, **pool), xp, dy))

    xa = rng.standard_normal((3, 7)) + 0.05  # away from kinks
    for kind, a, b in (("relu", 0.1, 0.0), ("elu", 1.0, 0.0), ("gelu", 0, 0), ("gelu_tanh", 0, 0),
                       ("tanh", 0, 0), ("sigmoid", 0, 0), ("swish", 1.5, 0),
                       ("hardswish", 1 / 6, 0.5), ("mish", 0, 0), ("clip", -0.5, 0.7),
                       ("abs", 0, 0), ("exp", 0, 0), ("square", 0, 0),
                       ("softplus", 1.5, 0)):
        dy = rng.standard_normal(xa.shape)
        close(gref.activation_backward(kind, xa, dy, a, b),
              gref.numeric_gradient(lambda v: ref.activation(kind, v, a, b), xa, dy))
    xpos = np.abs(xa) + 0.5
    for kind in ("sqrt", "log"):
        dy = rng.standard_normal(xa.shape)
        close(gref.activation_backward(kind, xpos, dy),
              gref.numeric_gradient(lambda v: ref.activation(kind, v), xpos, dy))

    xs = rng.standard_normal((3, 5, 4))
    for log in (False, True):
        dy = rng.standard_normal(xs.shape)
        close(gref.softmax_backward(ref.softmax(xs, 1, log), dy, 1, log),
              gref.numeric_gradient(lambda v: ref.softmax(v, 1, log), xs, dy))

    scale, shift = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    dy = rng.standard_normal(xs.shape)
    dx, ds, db = gref.layer_norm_backward(xs, dy, 1, scale)
    close(dx, gref.numeric_gradient(lambda v: ref.layer_norm(v, 1, scale, shift), xs, dy))
    close(ds, gref.numeric_gradient(lambda v: ref.layer_norm(xs, 1, v, shift), scale, dy))
    close(db, gref.numeric_gradient(lambda v: ref.layer_norm(xs, 1, scale, v), shift, dy))

    xb, sc, sh = rng.standard_normal((3, 4, 2, 3)), rng.standard_normal(4), rng.standard_normal(4)

    def bn(v, s=sc, b=sh):
        axes = (0, 2, 3)
        return ref.batch_norm_nchw(v, v.mean(axis=axes), v.var(axis=axes), s, b)

    dy = rng.standard_normal(xb.shape)
    dx, ds, db = gref.batch_norm_backward(xb, dy, sc)
    close(dx, gref.numeric_gradient(bn, xb, dy))
    close(ds, gref.numeric_gradient(lambda v: bn(xb, v, sh), sc, dy))
    close(db, gref.numeric_gradient(lambda v: bn(xb, sc, v), sh, dy))

    xl = rng.standard_normal((2, 6, 3, 2))
    for size in (3, 4):
        dy = rng.standard_normal(xl.shape)
        close(gref.lrn_backward(xl, dy, size, 0.3, 0.75, 2.0),
              gref.numeric_gradient(lambda v: ref.lrn_nchw(v, size, 0.3, 0.75, 2.0), xl, dy))

    a, b = rng.standard_normal((2, 1, 3)), rng.standard_normal((4, 1)) + 3
    fs = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}
    for kind, f in fs.items():
        dy = rng.standard_normal(np.broadcast_shapes(a.shape, b.shape))
        da, db = gref.binary_backward(kind, a, b, dy)
        close(da, gref.numeric_gradient(lambda v: f(v, b), a, dy))
        close(db, gref.numeric_gradient(lambda v: f(a, v), b, dy))

    ma, mb = rng.standard_normal((2, 4, 3)), rng.standard_normal((5, 4))
    dy = rng.standard_normal((2, 3, 5))
    da, db, _ = gref.matmul_backward(ma, mb, dy, transpose_a=True, transpose_b=True)
    close(da, gref.numeric_gradient(lambda v: np.swapaxes(v, -1, -2) @ mb.T, ma, dy))
    close(db, gref.numeric_gradient(lambda v: np.swapaxes(ma, -1, -2) @ v.T, mb, dy))


# ---------------------------------------------------------------- convolutions

CONV2D = [  # N, C, H, W, O, kernel, stride, pad (t, b, l, r), dilation, groups
    (1, 3, 9, 7, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 5, 11, 8, 7, (3, 2), (2, 1), (0, 2, 1, 0), (1, 2), 1),
    (3, 6, 7, 9, 9, (3, 3), (2, 2), (1, 0, 1, 1), (2, 1), 3),
    (2, 17, 6, 5, 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 17),  # depthwise
    (1, 19, 5, 6, 10, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("case", CONV2D, ids=[str(c[:5]) for c in CONV2D])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_conv2d_backward(case, fmt, transfer, rng):
    n, c, h, w, o, k, s, pad, dil, g = case
    x, wt, b = randn(rng, n, c, h, w), randn(rng, o, c // g, *k), randn(rng, o)
    pb, pe = pad[0::2], pad[1::2]
    y_ref, _ = ref.conv_nd(x, wt, b, s, pb, pe, dil, g)
    dy = randn(rng, *y_ref.shape)
    kw = dict(stride=s, padding=pad, dilation=dil, groups=g, data_format=fmt, name="conv")
    if transfer:
        mkcache.conv2d(to_format(x, fmt), wt, b, training=True, **kw)
    gr = grad.conv2d(to_format(dy, fmt), to_format(x, fmt), wt, b, **kw)
    (dx, dw, db), (mx, mw, mb) = gref.conv_backward(x, wt, dy, s, pb, pe, dil, g)
    assert gr.x.layout == fmt and gr.x.shape == to_format(x, fmt).shape
    assert gr.weight.shape == wt.shape and gr.bias.shape == (o,)
    assert_close(gr.x.numpy("NCHW"), dx, mx, reduction=(o // g) * k[0] * k[1], what="dx")
    assert_close(gr.weight.numpy(), dw, mw, reduction=n * y_ref.shape[2] * y_ref.shape[3],
                 what="dw")
    assert_close(gr.bias.numpy(), db, mb, reduction=n * y_ref.shape[2] * y_ref.shape[3],
                 what="db")


def test_conv2d_backward_partial_and_no_bias(rng):
    x, wt = randn(rng, 2, 4, 6, 6), randn(rng, 8, 4, 3, 3)
    dy = randn(rng, 2, 8, 4, 4)
    (dx, dw, _), (mx, mw, _) = gref.conv_backward(x, wt, dy, (1, 1), (0, 0), (0, 0), (1, 1), 1)
    only_x = grad.conv2d(dy, x, wt, wrt="x")
    assert only_x.weight is None and only_x.bias is None
    assert_close(only_x.x.numpy(), dx, mx, reduction=72)
    only_w = grad.conv2d(dy, x, wt, wrt=("weight",))
    assert only_w.x is None and only_w.bias is None
    assert_close(only_w.weight.numpy(), dw, mw, reduction=32)


CONV3D = [  # N, C, D, H, W, O, kernel, stride, pb, pe, dilation, groups
    (2, 3, 5, 6, 4, 5, (3, 2, 3), (1, 2, 1), (1, 0, 1), (1, 1, 0), (1, 1, 2), 1),
    (1, 4, 4, 5, 5, 6, (2, 3, 3), (2, 1, 1), (0, 1, 1), (1, 1, 1), (1, 1, 1), 2),
]


@pytest.mark.parametrize("case", CONV3D, ids=[str(c[:6]) for c in CONV3D])
@pytest.mark.parametrize("fmt", ["NCDHW", "NDHWC"])
def test_conv3d_backward(case, fmt, rng):
    n, c, d, h, w, o, k, s, pb, pe, dil, g = case
    x, wt, b = randn(rng, n, c, d, h, w), randn(rng, o, c // g, *k), randn(rng, o)
    y_ref, _ = ref.conv_nd(x, wt, b, s, pb, pe, dil, g)
    dy = randn(rng, *y_ref.shape)
    pad = tuple(v for pair in zip(pb, pe) for v in pair)
    kw = dict(stride=s, padding=pad, dilation=dil, groups=g, data_format=fmt)
    mkcache.conv3d(to_format(x, fmt), wt, b, training=True, **kw)
    gr = grad.conv3d(to_format(dy, fmt), to_format(x, fmt), wt, b, **kw)
    (dx, dw, db), (mx, mw, mb) = gref.conv_backward(x, wt, dy, s, pb, pe, dil, g)
    spatial = int(np.prod(y_ref.shape[2:]))
    assert_close(gr.x.numpy("NCDHW"), dx, mx, reduction=(o // g) * int(np.prod(k)), what="dx")
    assert_close(gr.weight.numpy(), dw, mw, reduction=n * spatial, what="dw")
    assert_close(gr.bias.numpy(), db, mb, reduction=n * spatial, what="db")


DECONV = [  # N, C_in, H, W, C_out, kernel, stride, pb, pe, output_padding, dilation, groups
    (2, 4, 5, 4, 6, (3, 3), (2, 2), (1, 1), (1, 1), (1, 0), (1, 1), 1),
    (1, 6, 4, 5, 9, (2, 3), (1, 2), (0, 1), (1, 0), (0, 1), (2, 1), 3),
]


@pytest.mark.parametrize("case", DECONV, ids=[str(c[:5]) for c in DECONV])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_conv2d_transpose_backward(case, fmt, rng):
    n, c, h, w, o, k, s, pb, pe, op, dil, g = case
    x, wt, b = randn(rng, n, c, h, w), randn(rng, c, o // g, *k), randn(rng, o)
    y_ref, _ = ref.conv_transpose2d(x, wt, b, s, pb, pe, op, dil, g)
    dy = randn(rng, *y_ref.shape)
    pad = (pb[0], pe[0], pb[1], pe[1])
    kw = dict(stride=s, padding=pad, output_padding=op, dilation=dil, groups=g, data_format=fmt)
    mkcache.conv2d_transpose(to_format(x, fmt), wt, b, training=True, **kw)
    gr = grad.conv2d_transpose(to_format(dy, fmt), to_format(x, fmt), wt, b, **kw)
    (dx, dw, db), (mx, mw, mb) = gref.conv_transpose_backward(x, wt, dy, s, pb, dil, g)
    assert gr.weight.shape == wt.shape
    assert_close(gr.x.numpy("NCHW"), dx, mx, reduction=(o // g) * k[0] * k[1], what="dx")
    assert_close(gr.weight.numpy(), dw, mw, reduction=n * h * w, what="dw")
    assert_close(gr.bias.numpy(), db, mb, reduction=n * y_ref.size // (n * o), what="db")


# --------------------------------------------------------------------- pooling

POOL = [  # kernel, stride, padding (t, b, l, r), ceil_mode
    ((3, 3), (2, 2), (1, 1, 1, 1), False),
    ((2, 2), (2, 2), (0, 0, 0, 0), False),
    ((3, 2), (2, 1), (1, 0, 0, 1), True),
    ((3, 3), (1, 1), (0, 0, 0, 0), False),
]


@pytest.mark.parametrize("case", POOL, ids=[str(c) for c in POOL])
@pytest.mark.parametrize("kind", ["max", "avg_include", "avg_exclude"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_pool2d_backward(case, kind, fmt, rng):
    kernel, stride, pad, ceil = case
    x = randn(rng, 2, 11, 9, 8)
    pb, pe = pad[0::2], pad[1::2]
    y_ref = ref.pool(x, kind, kernel, stride, pb, pe, ceil)
    dy = randn(rng, *y_ref.shape)
    kw = dict(stride=stride, padding=pad, ceil_mode=ceil, data_format=fmt, name="pool")
    if kind == "max":
        fwd, bwd = mkcache.max_pool2d, grad.max_pool2d
    else:
        kw["count_include_pad"] = kind == "avg_include"
        fwd, bwd = mkcache.avg_pool2d, grad.avg_pool2d
    y = fwd(to_format(x, fmt), kernel, training=True, **kw)
    assert y.shape == to_format(y_ref, fmt).shape
    dx = bwd(to_format(dy, fmt), to_format(x, fmt), kernel, **kw)
    assert dx.layout == fmt
    exact = gref.pool_backward(x, dy, kind, kernel, stride, pb, pe, ceil)
    assert_close(dx.numpy("NCHW"), exact, gref.pool_backward(x, np.abs(dy), kind, kernel, stride,
                                                             pb, pe, ceil), reduction=9)


@pytest.mark.parametrize("fmt", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("kind", ["max", "avg_exclude"])
def test_pool3d_and_global_backward(fmt, kind, rng):
    x = randn(rng, 2, 5, 5, 6, 7)
    kernel, stride, pb, pe = (2, 3, 2), (2, 2, 1), (1, 1, 0), (0, 1, 1)
    dy = randn(rng, *ref.pool(x, kind, kernel, stride, pb, pe).shape)
    pad = tuple(v for pair in zip(pb, pe) for v in pair)
    if kind == "max":
        dx = grad.max_pool3d(to_format(dy, fmt), to_format(x, fmt), kernel, stride, pad,
                             data_format=fmt)
    else:
        dx = grad.avg_pool3d(to_format(dy, fmt), to_format(x, fmt), kernel, stride, pad,
                             count_include_pad=False, data_format=fmt)
    exact = gref.pool_backward(x, dy, kind, kernel, stride, pb, pe)
    assert_close(dx.numpy("NCDHW"), exact, np.abs(exact) + 1e-3, reduction=12)

    gy = randn(rng, 2, 5, 1, 1, 1)
    gfn = grad.global_max_pool if kind == "max" else grad.global_avg_pool
    exact = gref.pool_backward(x, gy, "max" if kind == "max" else "avg_include", (5, 6, 7),
                               (1, 1, 1), (0, 0, 0), (0, 0, 0))
    got = gfn(to_format(gy, fmt), to_format(x, fmt), data_format=fmt)
    assert_close(got.numpy("NCDHW"), exact, np.abs(exact) + 1e-3, reduction=1)


def test_max_pool_indices_travel_through_the_cache(rng):
    """The training forward leaves its indices under a key without thread id;
    another x (or none left) makes the backward recompute, never reuse."""
    x1, x2 = randn(rng, 1, 4, 8, 8), randn(rng, 1, 4, 8, 8)
    dy = randn(rng, 1, 4, 4, 4)
    exact1 = gref.pool_backward(x1, dy, "max", (2, 2), (2, 2), (0, 0), (0, 0))
    exact2 = gref.pool_backward(x2, dy, "max", (2, 2), (2, 2), (0, 0), (0, 0))
    t1 = mkcache.Tensor(x1)
    mkcache.max_pool2d(t1, 2, training=True, name="mp")
    keys = [k for _, k in mkcache.cache.keys()]
    assert any(k.startswith("mp||") and k.endswith("|train") for k in keys), keys
    np.testing.assert_array_equal(grad.max_pool2d(dy, t1, 2, name="mp").numpy(), exact1)
    # Another x under the same name: the indices of x1 must not be used.
    np.testing.assert_array_equal(grad.max_pool2d(dy, x2, 2, name="mp").numpy(), exact2)
    mkcache.cache.clear()  # nothing left at all: recomputed
    np.testing.assert_array_equal(grad.max_pool2d(dy, t1, 2, name="mp").numpy(), exact1)


# ------------------------------------------------------------ element-wise ops

ACTIVATIONS = [("relu", {}), ("leaky_relu", {"alpha": 0.2}), ("elu", {}), ("gelu", {}),
               ("gelu_tanh", {}), ("tanh", {}), ("sigmoid", {}), ("swish", {}), ("silu", {}),
               ("hardswish", {}), ("mish", {}), ("relu6", {}), ("clip", {"alpha": -0.4,
                                                                          "beta": 0.9}),
               ("sqrt", {}), ("abs", {}), ("exp", {}), ("log", {}), ("square", {}),
               ("softplus", {})]


@pytest.mark.parametrize("kind,params", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("shape", [(3, 17), (2, 5, 7, 3)])
def test_activation_backward(kind, params, shape, rng):
    x = randn(rng, *shape) * 2
    x = np.where(np.abs(x) < 0.05, 0.3, x).astype(np.float32)  # away from kinks
    if kind in ("sqrt", "log"):
        x = np.abs(x) + 0.25
    if kind == "relu6":
        x = np.where(np.abs(x - 6) < 0.05, 5.0, x).astype(np.float32)
    if kind == "clip":
        x = np.where((np.abs(x + 0.4) < 0.05) | (np.abs(x - 0.9) < 0.05), 0.1, x).astype(
            np.float32)
    dy = randn(rng, *shape)
    dx = grad.activation(dy, x, kind, params.get("alpha"), params.get("beta"))
    _, a, b = mkcache.ACTIVATIONS[kind]
    a, b = params.get("alpha", a), params.get("beta", b)
    base = {"leaky_relu": "relu", "silu": "swish", "relu6": "clip"}.get(kind, kind)
    exact = gref.activation_backward(base, x, dy, a, b)
    assert_close_elementwise(dx.numpy(), exact, what=kind, ulps=256)


def test_activation_backward_keeps_blocked_layout_and_runs_in_place(rng):
    x = randn(rng, 2, 16, 5, 5)
    y = mkcache.conv2d(x, randn(rng, 16, 16, 1, 1))  # a oneDNN-chosen layout
    dy = mkcache.Tensor(randn(rng, 2, 16, 5, 5))
    exact = gref.activation_backward("tanh", y.numpy(), dy.numpy())
    dx = grad.tanh(dy, y)
    assert dx.format == y.format
    assert_close_elementwise(dx.numpy(), exact, ulps=256)
    dy_copy = dy.numpy()
    same = mkcache._capi.tensor_p(dy.handle.value)  # diff_src = diff_dst: in place
    lib.mkc_activation_backward(5, 0.0, 0.0, None, y.handle, dy.handle, ctypes.byref(same))
    assert same.value == dy.handle.value
    assert_close_elementwise(dy.numpy(), gref.activation_backward("tanh", y.numpy(), dy_copy),
                             ulps=256)


def test_activation_backward_in_place_into_another_layout(rng):
    """dy owned in a plain layout, x blocked: diff_src = dy must read dy
    before its storage takes the result's layout."""
    x = mkcache.to_layout(randn(rng, 2, 16, 5, 5), "nChw8c")
    dy = mkcache.to_layout(randn(rng, 2, 16, 5, 5), "NCHW")  # owned, plain
    exact = gref.activation_backward("tanh", x.numpy(), dy.numpy())
    same = mkcache._capi.tensor_p(dy.handle.value)
    lib.mkc_activation_backward(5, 0.0, 0.0, None, x.handle, dy.handle, ctypes.byref(same))
    assert_close_elementwise(dy.numpy(), exact, ulps=256)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_softmax_backward(axis, log, fmt, rng):
    x = mkcache.Tensor(to_format(randn(rng, 2, 7, 3, 5), fmt), fmt)
    fwd, bwd = (mkcache.log_softmax, grad.log_softmax) if log else (mkcache.softmax, grad.softmax)
    y = fwd(x, axis)
    dy = randn(rng, *x.shape)
    dx = bwd(dy, y, axis)
    exact = gref.softmax_backward(y.numpy(), dy, axis % 4, log)
    assert_close(dx.numpy(), exact, np.abs(exact) + np.abs(dy), reduction=x.shape[axis])


# --------------------------------------------------------------- dense layers

@pytest.mark.parametrize("shape", [(5, 13), (2, 3, 19)])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_linear_backward(shape, transfer, rng):
    x, w, b = randn(rng, *shape), randn(rng, 11, shape[-1]), randn(rng, 11)
    dy = randn(rng, *shape[:-1], 11)
    if transfer:
        mkcache.linear(x, w, b, training=True, name="fc")
    g = grad.linear(dy, x, w, b, name="fc")
    x2, dy2 = x.reshape(-1, shape[-1]).astype(np.float64), dy.reshape(-1, 11).astype(np.float64)
    rows = x2.shape[0]
    assert g.x.shape == shape and g.weight.shape == w.shape and g.bias.shape == (11,)
    assert_close(g.x.numpy(), (dy2 @ w).reshape(shape), (np.abs(dy2) @ np.abs(w)).reshape(shape),
                 reduction=11)
    assert_close(g.weight.numpy(), dy2.T @ x2, np.abs(dy2).T @ np.abs(x2), reduction=rows)
    assert_close(g.bias.numpy(), dy2.sum(0), np.abs(dy2).sum(0), reduction=rows)


MATMUL = [((3, 4), (4, 5), False, False), ((2, 4, 3), (4, 5), True, False),
          ((2, 3, 4), (2, 5, 4), False, True), ((4, 3), (3, 1, 5, 4), True, True)]


@pytest.mark.parametrize("case", MATMUL, ids=[str(c) for c in MATMUL])
def test_matmul_backward(case, rng):
    sa, sb, ta, tb = case
    a, b, bias = randn(rng, *sa), randn(rng, *sb), randn(rng, 5)
    y = mkcache.matmul(a, b, bias, transpose_a=ta, transpose_b=tb)
    dy = randn(rng, *y.shape)
    g = grad.matmul(dy, a, b, bias, transpose_a=ta, transpose_b=tb)
    da, db, dbias = gref.matmul_backward(a, b, dy, ta, tb)
    ma, mb, mbias = gref.matmul_backward(np.abs(a), np.abs(b), np.abs(dy), ta, tb)
    assert_close(g.a.numpy(), da, ma, reduction=int(np.prod(y.shape)) // 3, what="da")
    assert_close(g.b.numpy(), db, mb, reduction=int(np.prod(y.shape)) // 3, what="db")
    assert_close(g.bias.numpy(), dbias, mbias, reduction=int(np.prod(y.shape)), what="dbias")


@pytest.mark.parametrize("case", MATMUL[1:3], ids=[str(c) for c in MATMUL[1:3]])
def test_matmul_backward_with_scale(case, rng):
    """y = s (op(a) op(b) + bias): every gradient is s times the unscaled one."""
    sa, sb, ta, tb = case
    a, b, bias = randn(rng, *sa), randn(rng, *sb), randn(rng, 5)
    s = 0.125
    y = mkcache.matmul(a, b, bias, transpose_a=ta, transpose_b=tb, scale=s)
    dy = randn(rng, *y.shape)
    g = grad.matmul(dy, a, b, bias, transpose_a=ta, transpose_b=tb, scale=s)
    da, db, dbias = gref.matmul_backward(a, b, dy, ta, tb)
    ma, mb, mbias = gref.matmul_backward(np.abs(a), np.abs(b), np.abs(dy), ta, tb)
    n = int(np.prod(y.shape))
    assert_close(g.a.numpy(), s * da, s * ma, reduction=n // 3, what="da")
    assert_close(g.b.numpy(), s * db, s * mb, reduction=n // 3, what="db")
    assert_close(g.bias.numpy(), s * dbias, s * mbias, reduction=n, what="dbias")


BINARY = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((2, 1, 5), (3, 1)),
          ((2, 5, 3, 4), (1, 5, 1, 1))]


@pytest.mark.parametrize("shapes", BINARY, ids=[str(s) for s in BINARY])
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_backward(shapes, kind, rng):
    a, b = randn(rng, *shapes[0]), randn(rng, *shapes[1])
    b = np.where(np.abs(b) < 0.3, 0.7, b).astype(np.float32)  # no division by ~0
    a[..., 0] = 0.25  # some ties for maximum/minimum
    b[..., 0] = 0.25
    dy = randn(rng, *np.broadcast_shapes(a.shape, b.shape))
    g = getattr(grad, kind)(dy, a, b)
    da, db = gref.binary_backward(kind, a, b, dy)
    ma, mb = gref.binary_backward(kind, np.abs(a), np.abs(b), np.abs(dy)) \
        if kind not in ("maximum", "minimum") else (np.abs(da) + 1, np.abs(db) + 1)
    red = max(1, dy.size // min(a.size, b.size))
    assert g.a.shape == a.shape and g.b.shape == b.shape
    assert_close(g.a.numpy(), da, np.abs(ma) + np.abs(da), reduction=red, what="da")
    assert_close(g.b.numpy(), db, np.abs(mb) + np.abs(db), reduction=red, what="db")


def test_binary_backward_nhwc_operand(rng):
    a = mkcache.Tensor(randn(rng, 2, 4, 5, 3), "NHWC")  # caller dims [2, 4, 5, 3]
    b = randn(rng, 3)
    dy = randn(rng, 2, 4, 5, 3)
    g = grad.mul(dy, a, b)
    da, db = gref.binary_backward("mul", a.numpy(), b, dy)
    assert g.a.layout == "NHWC" and g.a.shape == (2, 4, 5, 3)
    assert_close(g.a.numpy(), da, np.abs(da), reduction=1)
    assert_close(g.b.numpy(), db, gref.reduce_to(np.abs(dy * a.numpy()), (3,)), reduction=40)


# ---------------------------------------------------------------- normalizers

@pytest.mark.parametrize("shape,axis", [((4, 13), -1), ((2, 3, 10), 1), ((3, 6, 5), -1)])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_layer_norm_backward(shape, axis, transfer, rng):
    x = randn(rng, *shape)
    norm_shape = shape[axis % len(shape):]
    scale, shift = randn(rng, *norm_shape), randn(rng, *norm_shape)
    dy = randn(rng, *shape)
    if transfer:
        mkcache.layer_norm(x, scale, shift, begin_norm_axis=axis, training=True)
    g = grad.layer_norm(dy, x, scale, shift, begin_norm_axis=axis)
    dx, ds, db = gref.layer_norm_backward(x, dy, axis, scale)
    m = int(np.prod(norm_shape))
    assert g.scale.shape == norm_shape and g.shift.shape == norm_shape
    assert_close(g.x.numpy(), dx, np.abs(dx) + np.abs(dy * scale), reduction=m, what="dx")
    rows = x.size // m
    assert_close(g.scale.numpy(), ds, np.abs(ds) + 3 * np.abs(dy).sum(
        axis=tuple(range(len(shape) - len(norm_shape)))), reduction=rows, what="dscale")
    assert_close(g.shift.numpy(), db, np.abs(dy).sum(
        axis=tuple(range(len(shape) - len(norm_shape)))), reduction=rows, what="dshift")


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_backward(fmt, affine, rng):
    x = randn(rng, 3, 7, 5, 4)
    scale, shift = (randn(rng, 7), randn(rng, 7)) if affine else (None, None)
    _, bm, bv = mkcache.batch_norm(to_format(x, fmt), None, None, scale, shift, training=True,
                                   data_format=fmt)
    dy = randn(rng, *x.shape)
    g = grad.batch_norm(to_format(dy, fmt), to_format(x, fmt), bm, bv, scale, shift,
                        data_format=fmt)
    dx, ds, db = gref.batch_norm_backward(x, dy, scale)
    m = x.size // 7
    bound_x = np.abs(dx) + 3 * np.abs(dy) * (np.abs(scale).reshape(1, -1, 1, 1) if affine else 1)
    assert_close(g.x.numpy("NCHW"), dx, bound_x, reduction=m, what="dx")
    if affine:
        assert_close(g.scale.numpy(), ds, np.abs(ds) + 3 * np.abs(dy).sum((0, 2, 3)),
                     reduction=m, what="dscale")
        assert_close(g.shift.numpy(), db, np.abs(dy).sum((0, 2, 3)), reduction=m, what="dshift")
    else:
        assert g.scale is None and g.shift is None


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_lrn_backward(fmt, size, transfer, rng):
    x = randn(rng, 2, 9, 5, 6)
    dy = randn(rng, *x.shape)
    if transfer:
        mkcache.lrn(to_format(x, fmt), size, 1e-2, 0.75, 2.0, data_format=fmt, training=True)
    dx = grad.lrn(to_format(dy, fmt), to_format(x, fmt), size, 1e-2, 0.75, 2.0, data_format=fmt)
    exact = gref.lrn_backward(x, dy, size, 1e-2, 0.75, 2.0)
    assert_close(dx.numpy("NCHW"), exact, np.abs(exact) + np.abs(dy), reduction=2 * size)


# ---------------------------------------------------------------- shape ops

@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_concat_backward(fmt, rng):
    xs = [to_format(randn(rng, 2, c, 3, 4), fmt) for c in (3, 5, 2)]
    axis = 1 if fmt == "NCHW" else 3
    ts = [mkcache.Tensor(x, fmt) for x in xs]
    y = mkcache.concat(ts, axis=axis)
    dy = randn(rng, *y.shape)
    gs = grad.concat(dy, ts, axis=axis)
    for g, part in zip(gs, np.split(dy, [3, 8], axis=axis)):
        assert g.layout == fmt
        np.testing.assert_array_equal(g.numpy(), part)


def test_reshape_and_flatten(rng):
    x = randn(rng, 2, 3, 4, 5)
    np.testing.assert_array_equal(mkcache.reshape(x, (6, -1)).numpy(), x.reshape(6, -1))
    nhwc = mkcache.Tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NHWC")
    flat = mkcache.flatten(nhwc)  # the caller's order: N, H, W, C
    np.testing.assert_array_equal(flat.numpy(), x.transpose(0, 2, 3, 1).reshape(2, -1))
    blocked = mkcache.conv2d(x, randn(rng, 16, 3, 1, 1))  # oneDNN's layout in, plain out
    np.testing.assert_array_equal(mkcache.flatten(blocked).numpy(),
                                  blocked.numpy().reshape(2, -1))
    back = grad.reshape(flat.numpy(), nhwc)
    assert back.shape == nhwc.shape
    with pytest.raises(mkcache.InvalidArgumentError, match="cannot be viewed"):
        mkcache.reshape(x, (7, 5, 2))
    with pytest.raises(mkcache.InvalidArgumentError, match="cannot infer"):
        mkcache.reshape(x, (7, -1, 2))
    with pytest.raises(mkcache.InvalidArgumentError, match="only one dim"):
        mkcache.reshape(x, (-1, -1))


# ------------------------------------------------- forward -> backward transfer

def test_forward_on_one_thread_backward_on_another(rng):
    """The training forward's descriptor is found by the grad op on another
    thread (which recomputes the max-pool indices), and the gradients are
    the same as on the forward's thread."""
    x, w = randn(rng, 2, 6, 10, 10), randn(rng, 8, 6, 3, 3)
    dy_conv, dy_pool = randn(rng, 2, 8, 10, 10), randn(rng, 2, 6, 5, 5)
    xt = mkcache.Tensor(x)
    mkcache.conv2d(xt, w, padding=1, training=True, name="c")
    mkcache.max_pool2d(xt, 2, training=True, name="p")
    here = (grad.conv2d(dy_conv, xt, w, padding=1, name="c"),
            grad.max_pool2d(dy_pool, xt, 2, name="p").numpy())
    mkcache.cache.clear()

    mkcache.conv2d(xt, w, padding=1, training=True, name="c")  # forward on this thread
    mkcache.max_pool2d(xt, 2, training=True, name="p")
    transfers = [k for _, k in mkcache.cache.keys() if k.endswith("|train")]
    # No thread field (|t<hash>) in these keys: any thread finds them.
    assert len(transfers) == 2
    assert all(f == "train" or not f.startswith("t") for k in transfers for f in k.split("|"))
    results = {}

    def backward():
        results["conv"] = grad.conv2d(dy_conv, xt, w, padding=1, name="c")
        results["pool"] = grad.max_pool2d(dy_pool, xt, 2, name="p").numpy()

    t = threading.Thread(target=backward)
    t.start()
    t.join()
    np.testing.assert_array_equal(results["conv"].x.numpy(), here[0].x.numpy())
    np.testing.assert_array_equal(results["conv"].weight.numpy(), here[0].weight.numpy())
    np.testing.assert_array_equal(results["pool"], here[1])
    exact = gref.pool_backward(x, dy_pool, "max", (2, 2), (2, 2), (0, 0), (0, 0))
    np.testing.assert_array_equal(results["pool"], exact)


def test_many_threads_train_concurrently(rng):
    """8 threads, each its own forward/backward pairs on shared names and
    shapes: every gradient matches the reference (no thread takes another's
    max-pool indices)."""
    xs = [randn(rng, 1, 3, 8, 8) for _ in range(8)]
    dy = randn(rng, 1, 3, 4, 4)
    errors = []

    def work(i):
        try:
            for _ in range(20):
                x = xs[(i + _) % len(xs)]
                mkcache.max_pool2d(x, 2, training=True, name="shared")
                got = grad.max_pool2d(dy, x, 2, name="shared").numpy()
                exact = gref.pool_backward(x, dy, "max", (2, 2), (2, 2), (0, 0), (0, 0))
                if not np.array_equal(got, exact):
                    errors.append(i)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_transfer_with_other_arguments_is_never_used(rng):
    """Same name, other stride: the backward must not take that forward's
    descriptor (its signature differs) and still computes right."""
    x, w = randn(rng, 1, 4, 9, 9), randn(rng, 4, 4, 3, 3)
    mkcache.conv2d(x, w, stride=2, training=True, name="same")
    dy = randn(rng, 1, 4, 7, 7)
    g = grad.conv2d(dy, x, w, stride=1, name="same")
    (dx, dw, _), (mx, mw, _) = gref.conv_backward(x, w, dy, (1, 1), (0, 0), (0, 0), (1, 1), 1)
    assert_close(g.x.numpy(), dx, mx, reduction=36)
    assert_close(g.weight.numpy(), dw, mw, reduction=49)


# ---------------------------------------------------------------- bad input

def test_backward_errors(rng):
    x, w = randn(rng, 1, 4, 6, 6), randn(rng, 8, 4, 3, 3)
    with pytest.raises(mkcache.InvalidArgumentError, match="diff_dst"):
        grad.conv2d(randn(rng, 1, 8, 5, 5), x, w)  # forward output is 4x4
    tx, tw, tdy = mkcache.Tensor(x), mkcache.Tensor(w), mkcache.Tensor(randn(rng, 1, 8, 4, 4))
    out = mkcache._capi.tensor_p()
    with pytest.raises(mkcache.InvalidArgumentError, match="fused activation"):
        lib.mkc_conv2d_backward(ctypes.byref(_relu_conv_params()), tx.handle, tw.handle,
                                tdy.handle, ctypes.byref(out), None, None)
    assert not out.value  # nothing handed out on failure
    with pytest.raises(mkcache.InvalidArgumentError, match="wrt"):
        grad.conv2d(randn(rng, 1, 8, 4, 4), x, w, wrt=("bogus",))
    with pytest.raises(mkcache.InvalidArgumentError, match="bias is None"):
        grad.conv2d(randn(rng, 1, 8, 4, 4), x, w, wrt="bias")
    with pytest.raises(mkcache.InvalidArgumentError, match="diff_dst"):
        grad.max_pool2d(randn(rng, 1, 4, 2, 2), x, 2)
    with pytest.raises(mkcache.InvalidArgumentError, match="diff_dst"):
        grad.relu(randn(rng, 1, 4, 6, 5), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="diff_scale needs scale"):
        lib.mkc_layer_norm_backward(ctypes.byref(_layer_norm_params()), tx.handle, None, None,
                                    tx.handle, None, ctypes.byref(out), None)
    with pytest.raises(mkcache.InvalidArgumentError, match="do not broadcast"):
        grad.add(randn(rng, 3, 4), randn(rng, 3, 4), randn(rng, 5))
    with pytest.raises(mkcache.InvalidArgumentError, match="no gradient requested"):
        lib.mkc_pool_backward(
            ctypes.byref(mkcache.ops._pool_params(1, 2, 2, None, 0, False, "NCHW", None)),
            tx.handle, tdy.handle, None)
    dx = mkcache.Tensor(randn(rng, 1, 4, 6, 6))
    with pytest.raises(mkcache.InvalidArgumentError, match="must not be one of the inputs"):
        same = mkcache._capi.tensor_p(dx.handle.value)
        lib.mkc_activation_backward(1, 0.0, 0.0, None, dx.handle, dx.handle, ctypes.byref(same))
    # Nothing was lost: the library still works after every error.
    assert grad.relu(x, x).shape == x.shape


def _relu_conv_params():
    return mkcache.ops._conv_params("conv", 2, np.zeros((1, 4, 6, 6)), np.zeros((8, 4, 3, 3)), 1,
                                    0, 1, 1, "NCHW", "relu", None)


def _layer_norm_params():
    return mkcache.ops._layer_norm_params(-1, 1e-5, None)
