"""bfloat16 training (mixed precision): the training forwards and the
gradients on bfloat16 data, each gradient against the float64 numpy
gradients of grad_reference.py computed from the bfloat16-rounded inputs.

The dtypes: a data gradient (dx, diff_src, a binary's or a matmul's
operands) is bfloat16 like its forward's data; the gradients of weights,
biases and normalisation parameters are float32 (oneDNN accumulates them in
float32 and writes them so, for float32 master weights).

The bounds (bf16_support.assert_bf16_close): a bfloat16 gradient is rounded
once from a float32 accumulation, so it is within 2^-8 of its exact value
plus float32's reduction error over its terms' magnitude; a float32
gradient has only the latter. Where the computation rounds intermediate
values to bfloat16 (a binary's product, a matmul's product before its
batch sum) each such rounding adds 2^-8 of the terms' magnitude.

Also: the forward -> backward transfer of a bfloat16 forward, mismatched
dtypes refused, and UNSUPPORTED naming the ISA where oneDNN has no
bfloat16 kernels (a child process on AVX2's kernels, so on every CPU)."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import grad_reference as gref
import mkcache
import reference as ref
from bf16_support import assert_bf16_close, bf16, needs_bf16, rand, run_child, values
from mkcache import grad

lib = mkcache._capi.lib

CL = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}  # channels-first -> channels-last


def in_layout(values64, layout):
    """A bfloat16 Tensor of channels-first float64 values (exactly
    bfloat16) in `layout` (NCHW, NHWC, NCDHW, NDHWC)."""
    a = np.asarray(values64, np.float32)
    if layout in ("NHWC", "NDHWC"):
        a = np.ascontiguousarray(a.transpose(CL[a.ndim]))
    t = mkcache.Tensor(a, layout=layout).astype("bf16")
    return t


def channels_first(t):
    """A bfloat16 Tensor's values, channels-first, as float64."""
    assert t.dtype == mkcache.bfloat16, t.dtype
    return t.numpy("NCDHW" if len(t.shape) == 5 else "NCHW").astype(np.float64)


def float32_values(t):
    assert t.dtype == np.float32, t.dtype
    return t.numpy().astype(np.float64)


def distinct(*shape, seed=0):
    """Values exactly representable in bfloat16 and all different (so a
    window's maximum is unique): +-(1 + j/128) 2^e, shuffled."""
    j, e, s = np.meshgrid(np.arange(128), np.arange(-5, 5), (-1.0, 1.0), indexing="ij")
    pool = (s * (1 + j / 128) * 2.0 ** e).ravel()
    n = int(np.prod(shape))
    assert n <= pool.size
    return np.random.default_rng(seed).permutation(pool)[:n].reshape(shape)


# ---------------------------------------------------------------- convolution

CONV_CASES = [
    dict(n=2, c=5, h=9, w=11, o=7, k=3, stride=1, pad=1, dil=1, groups=1),
    dict(n=3, c=17, h=8, w=7, o=19, k=3, stride=2, pad=2, dil=2, groups=1),
    dict(n=2, c=6, h=10, w=10, o=9, k=1, stride=1, pad=0, dil=1, groups=3),
    dict(n=2, c=12, h=7, w=9, o=12, k=3, stride=1, pad=1, dil=1, groups=12),
]


@needs_bf16
@pytest.mark.parametrize("case", CONV_CASES, ids=["3x3", "strided-dilated", "grouped-1x1",
                                                  "depthwise"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_conv2d(case, layout, transfer):
    n, c, o, g, k = case["n"], case["c"], case["o"], case["groups"], case["k"]
    s, p, d = case["stride"], case["pad"], case["dil"]
    _, xv = bf16(rand(n, c, case["h"], case["w"], seed=1))
    w, wv = bf16(rand(o, c // g, k, k, seed=2, scale=0.3))
    b = rand(o, seed=3)  # the bias stays float32 (the master copy)
    x = in_layout(xv, layout)
    args = dict(stride=s, padding=p, dilation=d, groups=g, data_format=layout, name="conv")
    y_exact, y_mag = ref.conv2d_nchw(xv, wv, b, (s, s), (p,) * 4, (d, d), g)
    if transfer:
        y = mkcache.conv2d(x, w, b, training=True, **args)
        assert_bf16_close(channels_first(y), y_exact, y_mag, c // g * k * k, what="forward")
    _, dyv = bf16(rand(*y_exact.shape, seed=4))
    gr = grad.conv2d(in_layout(dyv, layout), x, w, b, **args)
    (dx, dw, db), (mx, mw, mb) = gref.conv_backward(xv, wv, dyv, (s, s), (p, p), (p, p),
                                                    (d, d), g)
    assert gr.x.layout == layout
    spatial = int(np.prod(y_exact.shape[2:]))
    assert_bf16_close(channels_first(gr.x), dx, mx, o // g * k * k, what="dx")
    assert_bf16_close(float32_values(gr.weight), dw, mw, n * spatial, roundings=0, what="dw")
    assert_bf16_close(float32_values(gr.bias), db, mb, n * spatial, roundings=0, what="db")


@needs_bf16
@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_conv3d(layout):
    _, xv = bf16(rand(2, 3, 5, 6, 7, seed=5))
    w, wv = bf16(rand(4, 3, 3, 2, 3, seed=6, scale=0.3))
    x = in_layout(xv, layout)
    args = dict(stride=(1, 2, 1), padding=1, data_format=layout, name="conv3")
    y = mkcache.conv3d(x, w, training=True, **args)
    y_exact, _ = ref.conv_nd(xv, wv, None, (1, 2, 1), (1, 1, 1), (1, 1, 1))
    _, dyv = bf16(rand(*y_exact.shape, seed=7))
    assert y.shape == in_layout(dyv, layout).shape
    gr = grad.conv3d(in_layout(dyv, layout), x, w, **args)
    (dx, dw, _), (mx, mw, _) = gref.conv_backward(xv, wv, dyv, (1, 2, 1), (1, 1, 1), (1, 1, 1),
                                                  (1, 1, 1), 1)
    assert gr.bias is None
    assert_bf16_close(channels_first(gr.x), dx, mx, 4 * 18, what="dx")
    assert_bf16_close(float32_values(gr.weight), dw, mw, dyv[0, 0].size * 2, roundings=0,
                      what="dw")


@needs_bf16
@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d_transpose(groups):
    _, xv = bf16(rand(2, 6, 5, 4, seed=8))
    w, wv = bf16(rand(6, 3, 3, 3, seed=9, scale=0.3))
    b = rand(3 * groups, seed=10)
    x = in_layout(xv, "NCHW")
    args = dict(stride=2, padding=1, output_padding=1, groups=groups, name="deconv")
    y = mkcache.conv2d_transpose(x, w, b, training=True, **args)
    y_exact, _ = ref.conv_transpose2d(xv, wv, b, (2, 2), (1, 1), (1, 1), (1, 1), (1, 1), groups)
    assert y.dtype == mkcache.bfloat16 and y.shape == y_exact.shape
    _, dyv = bf16(rand(*y_exact.shape, seed=11))
    gr = grad.conv2d_transpose(in_layout(dyv, "NCHW"), x, w, b, **args)
    (dx, dw, db), (mx, mw, mb) = gref.conv_transpose_backward(xv, wv, dyv, (2, 2), (1, 1),
                                                              (1, 1), groups)
    assert_bf16_close(channels_first(gr.x), dx, mx, 3 * 9, what="dx")
    assert_bf16_close(float32_values(gr.weight), dw, mw, 2 * 5 * 4, roundings=0, what="dw")
    assert_bf16_close(float32_values(gr.bias), db, mb, dyv[:, 0].size, roundings=0, what="db")


# --------------------------------------------------------------------- pooling

POOL_CASES = [
    ("max", dict(kernel=3, stride=2, pad=1, ceil=False)),
    ("max", dict(kernel=2, stride=2, pad=0, ceil=True)),
    ("avg_include", dict(kernel=3, stride=2, pad=1, ceil=True)),
    ("avg_exclude", dict(kernel=3, stride=1, pad=1, ceil=False)),
]


@needs_bf16
@pytest.mark.parametrize("kind,case", POOL_CASES,
                         ids=["max-overlapping", "max-ceil", "avg-ceil", "avg-exclude-pad"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_pool2d(kind, case, layout, transfer):
    xv = distinct(2, 5, 9, 11, seed=12)  # unique maxima: the first is the only one
    x = in_layout(xv, layout)
    k, s, p, ceil = case["kernel"], case["stride"], case["pad"], case["ceil"]
    want = ref.pool(xv, kind, (k, k), (s, s), (p, p), (p, p), ceil_mode=ceil)
    if kind == "max":
        forward, backward, extra = mkcache.max_pool2d, grad.max_pool2d, {}
    else:
        forward, backward = mkcache.avg_pool2d, grad.avg_pool2d
        extra = dict(count_include_pad=kind == "avg_include")
    args = dict(ceil_mode=ceil, data_format=layout, name="pool", **extra)
    if transfer:
        y = forward(x, k, s, p, training=True, **args)
        got = channels_first(y)
        if kind == "max":
            np.testing.assert_array_equal(got, want)
        else:
            assert_bf16_close(got, want, reduction=k * k, roundings=2, what="forward")
    _, dyv = bf16(rand(*want.shape, seed=13))
    dx = backward(in_layout(dyv, layout), x, k, s, p, **args)
    assert dx.layout == layout
    exact = gref.pool_backward(xv, dyv, kind, (k, k), (s, s), (p, p), (p, p), ceil_mode=ceil)
    magnitude = gref.pool_backward(xv, np.abs(dyv), kind, (k, k), (s, s), (p, p), (p, p),
                                   ceil_mode=ceil)
    # Each input cell gathers at most ceil(k/s)^2 windows' gradients, which
    # oneDNN may add up in bfloat16 (channels-last: in diff_src itself, each
    # addition rounded); ceil mode's rescaled diff_dst is rounded to
    # bfloat16 before it is spread.
    windows = (-(-k // s)) ** 2
    assert_bf16_close(channels_first(dx), exact, magnitude, windows,
                      inner=windows - 1 + (1 if ceil else 0), what="dx")


@needs_bf16
@pytest.mark.parametrize("kind", ["max", "avg_include"])
def test_pool3d(kind):
    xv = distinct(2, 3, 5, 6, 7, seed=14)
    x = in_layout(xv, "NCDHW")
    want = ref.pool(xv, kind, (2, 3, 2), (2, 2, 1), (0, 1, 0), (0, 1, 0))
    _, dyv = bf16(rand(*want.shape, seed=15))
    forward = mkcache.max_pool3d if kind == "max" else mkcache.avg_pool3d
    backward = grad.max_pool3d if kind == "max" else grad.avg_pool3d
    forward(x, (2, 3, 2), (2, 2, 1), (0, 1, 0), training=True, name="pool3")
    dx = backward(in_layout(dyv, "NCDHW"), x, (2, 3, 2), (2, 2, 1), (0, 1, 0), name="pool3")
    exact = gref.pool_backward(xv, dyv, kind, (2, 3, 2), (2, 2, 1), (0, 1, 0), (0, 1, 0))
    magnitude = gref.pool_backward(xv, np.abs(dyv), kind, (2, 3, 2), (2, 2, 1), (0, 1, 0),
                                   (0, 1, 0))
    assert_bf16_close(channels_first(dx), exact, magnitude, 3, what="dx")


# ---------------------------------------------------- element-wise and softmax

ACTIVATIONS = ["relu", "leaky_relu", "elu", "gelu", "gelu_tanh", "tanh", "sigmoid", "swish",
               "hardswish", "mish", "softplus", "clip", "abs", "exp", "square"]


@needs_bf16
@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_activation(kind):
    x, xv = bf16(rand(3, 7, 33, seed=16, scale=2.0))
    dy, dyv = bf16(rand(3, 7, 33, seed=17))
    _, alpha, beta = mkcache.ACTIVATIONS[kind]
    if kind == "clip":
        alpha, beta = -1.0, 1.5
    dx = grad.activation(dy, x, kind, alpha, beta)
    # grad_reference's relu takes the negative slope as alpha.
    exact = gref.activation_backward("relu" if kind == "leaky_relu" else kind, xv, dyv, alpha,
                                     beta)
    # The derivative in float32 (oneDNN's approximations of exp, tanh, erf
    # are a few float32 ulps), times dy, rounded once.
    floor = 64 * ref.EPS_F32 * np.abs(dyv) * np.maximum(1.0, np.abs(xv))
    assert_bf16_close(values(dx), exact, floor=floor, what=kind)


@needs_bf16
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax(log, axis):
    x, _ = bf16(rand(4, 6, 29, seed=18, scale=3.0))
    y = (mkcache.log_softmax if log else mkcache.softmax)(x, axis=axis)
    yv = values(y)
    dy, dyv = bf16(rand(4, 6, 29, seed=19))
    dx = (grad.log_softmax if log else grad.softmax)(dy, y, axis=axis)
    exact = gref.softmax_backward(yv, dyv, axis, log)
    if log:
        magnitude = np.abs(dyv) + np.exp(yv) * np.abs(dyv).sum(axis=axis, keepdims=True)
    else:
        magnitude = np.abs(yv) * (np.abs(dyv) + np.abs(dyv * yv).sum(axis=axis, keepdims=True))
    assert_bf16_close(values(dx), exact, magnitude, yv.shape[axis], what="dx")


# ---------------------------------------------------------------- dense layers

@needs_bf16
@pytest.mark.parametrize("shape", [(3, 5, 37), (7, 16)])
@pytest.mark.parametrize("bias_dtype", ["f32", "bf16", None])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_linear(shape, bias_dtype, transfer):
    x, xv = bf16(rand(*shape, seed=20))
    w, wv = bf16(rand(23, shape[-1], seed=21, scale=0.2))
    b = None if bias_dtype is None else rand(23, seed=22)
    if bias_dtype == "bf16":
        b, _ = bf16(b)
    if transfer:
        y = mkcache.linear(x, w, b, training=True, name="fc")
        assert y.dtype == mkcache.bfloat16
    dy, dyv = bf16(rand(*shape[:-1], 23, seed=23))
    gr = grad.linear(dy, x, w, b, name="fc")
    rows = int(np.prod(shape[:-1]))
    x2, dy2 = xv.reshape(rows, -1), dyv.reshape(rows, -1)
    assert gr.x.shape == shape
    assert_bf16_close(values(gr.x), dyv @ wv, np.abs(dyv) @ np.abs(wv), 23, what="dx")
    assert_bf16_close(float32_values(gr.weight), dy2.T @ x2, np.abs(dy2).T @ np.abs(x2), rows,
                      roundings=0, what="dw")
    if b is None:
        assert gr.bias is None
    else:
        assert_bf16_close(float32_values(gr.bias), dy2.sum(0), np.abs(dy2).sum(0), rows,
                          roundings=0, what="db")


@needs_bf16
@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, True)])
def test_matmul(transpose_a, transpose_b):
    a_shape = (2, 1, 13, 6) if transpose_a else (2, 1, 6, 13)
    b_shape = (3, 11, 13) if transpose_b else (3, 13, 11)
    a, av = bf16(rand(*a_shape, seed=24))
    b, bv = bf16(rand(*b_shape, seed=25))
    bias = rand(11, seed=26)
    y = mkcache.matmul(a, b, bias, transpose_a=transpose_a, transpose_b=transpose_b)
    dy, dyv = bf16(rand(*y.shape, seed=27))
    gr = grad.matmul(dy, a, b, bias, transpose_a=transpose_a, transpose_b=transpose_b)
    da, db, dbias = gref.matmul_backward(av, bv, dyv, transpose_a, transpose_b)
    ma, mb, mbias = gref.matmul_backward(np.abs(av), np.abs(bv), np.abs(dyv), transpose_a,
                                         transpose_b)
    # Each product is rounded to bfloat16, then summed over the broadcast
    # batch dims (a along b's 3, b along a's 2) and rounded again.
    assert_bf16_close(values(gr.a), da, ma, 11 * 3, inner=1, what="da")
    assert_bf16_close(values(gr.b), db, mb, 6 * 2, inner=1, what="db")
    assert_bf16_close(float32_values(gr.bias), dbias, mbias, dyv.size // 11, roundings=0,
                      what="dbias")


# ---------------------------------------------------------------- normalizers

@needs_bf16
@pytest.mark.parametrize("shape,axis", [((4, 13), -1), ((2, 3, 10), 1)])
@pytest.mark.parametrize("transfer", [True, False], ids=["after-training-forward", "alone"])
def test_layer_norm(shape, axis, transfer):
    x, xv = bf16(rand(*shape, seed=28))
    norm_shape = shape[axis % len(shape):]
    scale, shift = rand(*norm_shape, seed=29), rand(*norm_shape, seed=30)
    if transfer:
        y = mkcache.layer_norm(x, scale, shift, begin_norm_axis=axis, training=True, name="ln")
        assert y.dtype == mkcache.bfloat16
    dy, dyv = bf16(rand(*shape, seed=31))
    gr = grad.layer_norm(dy, x, scale, shift, begin_norm_axis=axis, name="ln")
    dx, ds, db = gref.layer_norm_backward(xv, dyv, axis, scale)
    m = int(np.prod(norm_shape))
    lead = tuple(range(len(shape) - len(norm_shape)))
    assert_bf16_close(values(gr.x), dx, np.abs(dx) + np.abs(dyv * scale), m, what="dx")
    rows = xv.size // m
    assert_bf16_close(float32_values(gr.scale), ds, np.abs(ds) + 3 * np.abs(dyv).sum(axis=lead),
                      rows, roundings=0, what="dscale")
    assert_bf16_close(float32_values(gr.shift), db, np.abs(dyv).sum(axis=lead), rows,
                      roundings=0, what="dshift")


@needs_bf16
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(layout, affine):
    _, xv = bf16(rand(3, 7, 5, 4, seed=32))
    x = in_layout(xv, layout)
    scale, shift = (rand(7, seed=33), rand(7, seed=34)) if affine else (None, None)
    y, bm, bv = mkcache.batch_norm(x, None, None, scale, shift, training=True, data_format=layout,
                                   name="bn")
    assert y.dtype == mkcache.bfloat16 and bm.dtype == np.float32
    np.testing.assert_allclose(bm, xv.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bv, xv.var(axis=(0, 2, 3)), rtol=1e-4)
    _, dyv = bf16(rand(*xv.shape, seed=35))
    gr = grad.batch_norm(in_layout(dyv, layout), x, bm, bv, scale, shift, data_format=layout,
                         name="bn")
    dx, ds, db = gref.batch_norm_backward(xv, dyv, scale)
    m = xv.size // 7
    bound_x = np.abs(dx) + 3 * np.abs(dyv) * (np.abs(scale).reshape(1, -1, 1, 1) if affine else 1)
    assert gr.x.layout == layout
    assert_bf16_close(channels_first(gr.x), dx, bound_x, m, what="dx")
    if affine:
        assert_bf16_close(float32_values(gr.scale), ds, np.abs(ds) + 3 * np.abs(dyv).sum((0, 2, 3)),
                          m, roundings=0, what="dscale")
        assert_bf16_close(float32_values(gr.shift), db, np.abs(dyv).sum((0, 2, 3)), m,
                          roundings=0, what="dshift")
    else:
        assert gr.scale is None and gr.shift is None


# ------------------------------------------------------ binary, concat, reshape

@needs_bf16
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("b_shape", [(6, 1), (4, 6, 29)], ids=["broadcast", "same-shape"])
def test_binary(kind, b_shape):
    a, av = bf16(distinct(4, 6, 29, seed=36))
    bvals = distinct(*b_shape, seed=37)
    if kind == "div":
        bvals = np.where(np.abs(bvals) < 0.25, 0.25, bvals)  # away from 0 (exact in bfloat16)
    b, bv = bf16(bvals)
    dy, dyv = bf16(rand(4, 6, 29, seed=38))
    gr = getattr(grad, kind)(dy, a, b)
    da, db = gref.binary_backward(kind, av, bv, dyv)
    a_full, b_full = np.broadcast_arrays(av, bv)
    adv, bdv = np.abs(dyv), np.abs(dyv)
    if kind == "mul":
        adv, bdv = np.abs(dyv * b_full), np.abs(dyv * a_full)
    elif kind == "div":
        adv, bdv = np.abs(dyv / b_full), np.abs(dyv * a_full / b_full ** 2)
    ma, mb = gref.reduce_to(adv, av.shape), gref.reduce_to(bdv, bv.shape)
    # Intermediate roundings: mul one (the product), div up to three (the
    # quotient, times a, over b); add, sub, maximum, minimum none.
    inner = {"mul": 1, "div": 3}.get(kind, 0)
    red = dyv.size // bv.size
    assert gr.a.dtype == mkcache.bfloat16 and gr.b.dtype == mkcache.bfloat16
    assert_bf16_close(values(gr.a), da, ma, 1, inner=min(inner, 1), what="da")
    assert_bf16_close(values(gr.b), db, mb, red, inner=inner, what="db")


@needs_bf16
def test_concat_and_reshape():
    x, xv = bf16(rand(2, 3, 5, seed=39))
    y, yv = bf16(rand(2, 4, 5, seed=40))
    dy, dyv = bf16(rand(2, 7, 5, seed=41))
    dx, dyy = grad.concat(dy, [x, y], axis=1)
    np.testing.assert_array_equal(values(dx), dyv[:, :3])
    np.testing.assert_array_equal(values(dyy), dyv[:, 3:])
    f = mkcache.flatten(x)
    assert f.dtype == mkcache.bfloat16
    back = grad.reshape(bf16(rand(2, 15, seed=42))[0], x)
    assert back.dtype == mkcache.bfloat16 and back.shape == (2, 3, 5)


# ------------------------------------------------------ forward -> backward

def gradient_lookups(forward, backward):
    """The cache's hits and misses of `backward`, after `forward` (or on an
    empty cache when it is None)."""
    mkcache.cache.clear()
    if forward:
        forward()
    s0 = mkcache.cache.stats()
    backward()
    s1 = mkcache.cache.stats()
    return s1["hits"] - s0["hits"], s1["misses"] - s0["misses"]


@needs_bf16
def test_backward_finds_the_bfloat16_forward():
    """A bfloat16 training forward leaves its descriptor; the gradient finds
    it (more hits, fewer misses than alone), whether the bias was float32 or
    bfloat16 - and never takes a float32 forward's under the same name."""
    x, xv = bf16(rand(2, 3, 8, 8, seed=43))
    w, _ = bf16(rand(5, 3, 3, 3, seed=44))
    dy, _ = bf16(rand(2, 5, 8, 8, seed=45))
    x32, w32 = xv.astype(np.float32), w.numpy()
    for bias in (rand(5, seed=46), bf16(rand(5, seed=46))[0]):
        def backward():
            g = grad.conv2d(dy, x, w, bias, padding=1, name="c")
            assert g.x.dtype == mkcache.bfloat16 and g.weight.dtype == np.float32

        alone = gradient_lookups(None, backward)
        after = gradient_lookups(
            lambda: mkcache.conv2d(x, w, bias, padding=1, training=True, name="c"), backward)
        assert after[0] > alone[0] and after[1] < alone[1], (alone, after)
        other = gradient_lookups(
            lambda: mkcache.conv2d(x32, w32, rand(5), padding=1, training=True, name="c"),
            backward)
        assert other == alone
    xl, _ = bf16(rand(6, 10, seed=47))
    wl, _ = bf16(rand(4, 10, seed=48))
    dyl, _ = bf16(rand(6, 4, seed=49))
    bl = rand(4, seed=50)

    def linear_backward():
        grad.linear(dyl, xl, wl, bl, name="fc")

    alone = gradient_lookups(None, linear_backward)
    after = gradient_lookups(lambda: mkcache.linear(xl, wl, bl, training=True, name="fc"),
                             linear_backward)
    assert after[0] > alone[0] and after[1] < alone[1], (alone, after)
    xp, _ = bf16(rand(2, 3, 8, 8, seed=51))
    dyp, _ = bf16(rand(2, 3, 4, 4, seed=52))

    def pool_backward():
        grad.max_pool2d(dyp, xp, 2, name="p")

    alone = gradient_lookups(None, pool_backward)
    after = gradient_lookups(lambda: mkcache.max_pool2d(xp, 2, training=True, name="p"),
                             pool_backward)
    assert after[0] > alone[0] and after[1] < alone[1], (alone, after)


# ---------------------------------------------------------------- bad input

def test_mismatched_dtypes_refused():
    """A gradient has its forward's dtype: float32 diff_dst of a bfloat16
    forward (and the reverse) is an InvalidArgumentError naming both. The
    checks come before any kernel is chosen: on every CPU."""
    x, _ = bf16(rand(1, 4, 6, 6, seed=53))
    w, _ = bf16(rand(8, 4, 3, 3, seed=54))
    x32, w32 = rand(1, 4, 6, 6, seed=53), rand(8, 4, 3, 3, seed=54)
    dy32 = rand(1, 8, 4, 4, seed=55)
    dy, _ = bf16(dy32)
    bad = mkcache.InvalidArgumentError
    with pytest.raises(bad, match="conv2d_backward: diff_dst is float32 but src is bfloat16 "
                                  r"\(a gradient has its forward's dtype\)"):
        grad.conv2d(dy32, x, w)
    with pytest.raises(bad, match="conv2d_backward: diff_dst is bfloat16 but src is float32"):
        grad.conv2d(dy, x32, w32)
    with pytest.raises(bad, match="conv2d_backward: weights is float32 but src is bfloat16"):
        grad.conv2d(dy, x, w32)
    with pytest.raises(bad, match="max_pool_backward: diff_dst is float32 but src is bfloat16"):
        grad.max_pool2d(rand(1, 4, 3, 3), x, 2)
    with pytest.raises(bad, match="avg_pool_backward: diff_dst is bfloat16 but src is float32"):
        grad.avg_pool2d(bf16(rand(1, 4, 3, 3))[0], x32, 2)
    with pytest.raises(bad, match="activation_backward: diff_dst is float32 but src is bfloat16"):
        grad.relu(x32, x)
    with pytest.raises(bad, match="softmax_backward: diff_dst is float32 but dst is bfloat16"):
        grad.softmax(x32, x)
    with pytest.raises(bad, match="log_softmax_backward: diff_dst is bfloat16 but dst is float32"):
        grad.log_softmax(x, x32)
    xl, _ = bf16(rand(3, 8, seed=56))
    wl, _ = bf16(rand(5, 8, seed=57))
    with pytest.raises(bad, match="linear_backward: diff_dst is float32 but src is bfloat16"):
        grad.linear(rand(3, 5), xl, wl)
    with pytest.raises(bad, match="linear_backward: weights is float32 but src is bfloat16"):
        grad.linear(bf16(rand(3, 5))[0], xl, rand(5, 8))
    with pytest.raises(bad, match="layer_norm_backward: diff_dst is float32 but src is bfloat16"):
        grad.layer_norm(rand(3, 8), xl, rand(8), rand(8))
    with pytest.raises(bad, match="batch_norm_backward: diff_dst is float32 but src is bfloat16"):
        grad.batch_norm(x32, x, rand(4), np.ones(4, np.float32))
    with pytest.raises(bad, match="add_backward: diff_dst is float32 but a is bfloat16"):
        grad.add(rand(3, 8), xl, xl)
    with pytest.raises(bad, match="mul_backward: b is float32 but src is bfloat16"):
        grad.mul(bf16(rand(3, 8))[0], xl, rand(3, 8))
    with pytest.raises(bad, match="matmul_backward: diff_dst is float32 but a is bfloat16"):
        grad.matmul(rand(3, 5), xl, bf16(rand(8, 5))[0])
    with pytest.raises(bad, match="concat_backward: diff_dst is float32 but srcs.0. is bfloat16"):
        grad.concat(rand(3, 16), [xl, xl], axis=1)
    with pytest.raises(bad, match="concat_backward: input 1 is float32 but input 0 is bfloat16"):
        grad.concat(bf16(rand(3, 16))[0], [xl, rand(3, 8)], axis=1)


@needs_bf16
def test_float32_result_tensor_required_for_weight_gradients():
    """A caller's tensor for a weight gradient must be float32 (the
    gradient's dtype); one for diff_src must be bfloat16."""
    x, _ = bf16(rand(1, 4, 6, 6, seed=58))
    w, _ = bf16(rand(8, 4, 3, 3, seed=59))
    dy, _ = bf16(rand(1, 8, 4, 4, seed=60))
    p = mkcache.ops._conv_params("conv", 2, x, w, 1, 0, 1, 1, "NCHW", None, None, 0,
                                 training=True)
    wrong = bf16(rand(8, 4, 3, 3))[0]
    dw = mkcache._capi.tensor_p(wrong.handle.value)
    with pytest.raises(mkcache.InvalidArgumentError, match="dst is bfloat16 but the result float32"):
        mkcache._capi.raise_for(lib.mkc_conv2d_backward(ctypes.byref(p), x.handle, w.handle,
                                                        dy.handle, None, ctypes.byref(dw), None))
    float32 = mkcache.Tensor(rand(1, 4, 6, 6))
    dx = mkcache._capi.tensor_p(float32.handle.value)
    with pytest.raises(mkcache.InvalidArgumentError, match="dst dtype does not match"):
        mkcache._capi.raise_for(lib.mkc_conv2d_backward(ctypes.byref(p), x.handle, w.handle,
                                                        dy.handle, ctypes.byref(dx), None, None))


def test_without_bf16_kernels_training_names_the_isa():
    """On AVX2's kernels (on any CPU): every bfloat16 training forward and
    gradient is an UnsupportedError naming the ISA, and float32 training
    still works."""
    proc = run_child("""
        def bf(*shape):
            return mkcache.Tensor(np.ones(shape, np.float32)).astype("bf16")
        x, w, dy = bf(1, 2, 4, 4), bf(3, 2, 3, 3), bf(1, 3, 2, 2)
        xl, wl, dyl = bf(2, 4), bf(3, 4), bf(2, 3)
        calls = {
            "conv2d": lambda: mkcache.conv2d(x, w, training=True),
            "conv2d_backward": lambda: grad.conv2d(dy, x, w),
            "max_pool": lambda: mkcache.max_pool2d(x, 2, training=True),
            "max_pool_backward": lambda: grad.max_pool2d(bf(1, 2, 2, 2), x, 2),
            "linear": lambda: mkcache.linear(xl, wl, training=True),
            "linear_backward": lambda: grad.linear(dyl, xl, wl),
            "activation_backward": lambda: grad.relu(x, x),
            "softmax_backward": lambda: grad.softmax(xl, xl),
            "layer_norm": lambda: mkcache.layer_norm(xl, training=True),
            "layer_norm_backward": lambda: grad.layer_norm(xl, xl),
            "batch_norm": lambda: mkcache.batch_norm(x, training=True),
            "batch_norm_backward": lambda: grad.batch_norm(
                x, x, np.zeros(2, np.float32), np.ones(2, np.float32)),
            "add_backward": lambda: grad.add(xl, xl, bf(1, 4)),
            "matmul_backward": lambda: grad.matmul(bf(2, 2), xl, bf(4, 2)),
        }
        for op, call in calls.items():
            try:
                call()
                print("RAN", op)
            except mkcache.UnsupportedError as e:
                print("UNSUPPORTED", op, "|", e)
        x32 = np.ones((1, 2, 4, 4), np.float32)
        g = grad.conv2d(np.ones((1, 3, 2, 2), np.float32), x32, np.ones((3, 2, 3, 3), np.float32))
        print("F32", float(g.weight.numpy().sum()))
        """, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    refused = [s for s in lines if s.startswith("UNSUPPORTED")]
    assert not [s for s in lines if s.startswith("RAN")], proc.stdout
    assert len(refused) == 14, proc.stdout
    for line in refused:
        assert "oneDNN has no bfloat16 kernels for avx2" in line, line
    # 54 weights, each the sum of 4 products of ones.
    assert "F32 216.0" in proc.stdout


def test_digits_example_bf16_needs_the_kernels():
    """examples/train_digits.py --precision bf16 on AVX2's kernels stops
    before training with a message naming the ISA (scikit-learn is not
    needed to get there)."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_digits.py")
    proc = subprocess.run([sys.executable, example, "--precision", "bf16"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs oneDNN's bfloat16 kernels" in proc.stderr
    assert "oneDNN has none for this CPU's ISA, avx2" in proc.stderr
