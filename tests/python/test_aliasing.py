"""out= sharing memory with an input, in every input position of every
operator that takes out=: the result must be what a separate output would
hold, whatever layouts the tensors are in."""
import numpy as np
import pytest

import mkcache
import reference as ref

ACCUM = 64  # element-wise results: a few ulps; reductions: checked with assert_close


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def make(arr, kind):
    """A Tensor holding arr's values: wrapped caller memory ("plain"), or
    library-owned in a blocked layout ("blocked") or plain ("owned")."""
    arr = np.ascontiguousarray(arr, dtype=np.float32).copy()
    if kind == "plain":
        return mkcache.Tensor(arr)
    if kind == "blocked":
        return mkcache.to_layout(mkcache.Tensor(arr), "nChw8c")
    if kind == "owned":
        return mkcache.mul(mkcache.Tensor(arr), np.ones((1,), np.float32))
    raise ValueError(kind)


KINDS4 = ["plain", "blocked", "owned"]

BINARY = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
          ("maximum", np.maximum), ("minimum", np.minimum)]


@pytest.mark.parametrize("op,fn", BINARY)
@pytest.mark.parametrize("ka", KINDS4)
@pytest.mark.parametrize("kb", KINDS4)
@pytest.mark.parametrize("position", ["a", "b"])
def test_binary_out_is_an_operand(rng, op, fn, ka, kb, position):
    a_np, b_np = randn(rng, 2, 5, 7, 7), randn(rng, 2, 5, 7, 7)
    if op == "div":
        b_np = np.where(np.abs(b_np) < 0.1, 0.5, b_np).astype(np.float32)
    a, b = make(a_np, ka), make(b_np, kb)
    out = a if position == "a" else b
    r = getattr(mkcache, op)(a, b, out=out)
    assert r is out
    ref.assert_close_elementwise(np.asarray(out), fn(a_np.astype(np.float64), b_np), ulps=ACCUM)


def test_residual_add_idiom_after_conv(rng):
    """add(identity, y, out=y) with y in the convolution's own layout."""
    x, w, ident = randn(rng, 2, 5, 7, 7), randn(rng, 5, 5, 3, 3), randn(rng, 2, 5, 7, 7)
    for order in ("identity first", "y first"):
        y = mkcache.conv2d(x, w, padding=1)
        before = np.asarray(y).astype(np.float64)
        if order == "identity first":
            mkcache.add(ident, y, out=y)
        else:
            mkcache.add(y, ident, out=y)
        ref.assert_close_elementwise(np.asarray(y), before + ident, ulps=ACCUM)


@pytest.mark.parametrize("kind", KINDS4)
def test_binary_broadcast_operand_written_in_place(rng, kind):
    full, vec = randn(rng, 2, 5, 7, 7), randn(rng, 1, 5, 1, 1)
    y = make(full, kind)
    mkcache.sub(vec, y, out=y)  # y is the operand of the result's shape
    ref.assert_close_elementwise(np.asarray(y), vec.astype(np.float64) - full, ulps=ACCUM)
    y = make(full, kind)
    mkcache.div(y, vec, out=y)
    ref.assert_close_elementwise(np.asarray(y), full.astype(np.float64) / vec, ulps=ACCUM)


def test_binary_same_tensor_three_times(rng):
    x_np = randn(rng, 3, 9, 5, 4)
    for kind in KINDS4:
        x = make(x_np, kind)
        mkcache.mul(x, x, out=x)
        ref.assert_close_elementwise(np.asarray(x), x_np.astype(np.float64) ** 2, ulps=ACCUM)


def test_out_wrapping_the_array_given_as_input(rng):
    """Two handles over one buffer: the numpy input and a Tensor over it."""
    a_np, b_np = randn(rng, 6, 6), randn(rng, 6, 6)
    want = a_np.astype(np.float64) @ b_np
    buf = a_np.copy()
    out = mkcache.Tensor(buf)
    mkcache.matmul(buf, b_np, out=out)
    np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)
    x_np = randn(rng, 2, 5, 6, 6)
    buf = x_np.copy()
    mkcache.add(np.ones((5, 1, 1), np.float32), buf, out=mkcache.Tensor(buf))
    np.testing.assert_allclose(buf, x_np + 1, rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS4)
@pytest.mark.parametrize("act", ["relu", "gelu", "tanh", "sigmoid", "square", "abs"])
def test_activation_in_place(rng, kind, act):
    x_np = randn(rng, 2, 5, 7, 7)
    x = make(x_np, kind)
    getattr(mkcache, act)(x, out=x)
    want = ref.activation(act, x_np)
    ref.assert_close_elementwise(np.asarray(x), want)


@pytest.mark.parametrize("kind", KINDS4)
def test_activation_out_of_another_layout_over_same_values(rng, kind):
    """out= holds the input's values in another layout (a separate buffer)."""
    x_np = randn(rng, 2, 5, 7, 7)
    x, out = make(x_np, kind), make(x_np, "blocked" if kind != "blocked" else "plain")
    mkcache.relu(x, out=out)
    np.testing.assert_array_equal(np.asarray(out), np.maximum(x_np, 0))


@pytest.mark.parametrize("kind", KINDS4)
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_in_place(rng, kind, axis):
    x_np = randn(rng, 2, 5, 3, 7)
    x = make(x_np, kind)
    mkcache.softmax(x, axis, out=x)
    ref.assert_close_elementwise(np.asarray(x), ref.softmax(x_np, axis), ulps=256)


@pytest.mark.parametrize("kind", KINDS4)
def test_conv_out_is_its_input(rng, kind):
    """A 1x1 convolution with as many outputs as inputs: out=x must not be
    overwritten while it is read."""
    x_np, w_np, b_np = randn(rng, 2, 6, 5, 5), randn(rng, 6, 6, 1, 1), randn(rng, 6)
    exact, mag = ref.conv2d_nchw(x_np, w_np, b_np)
    x = make(x_np, kind)
    mkcache.conv2d(x, w_np, b_np, out=x)
    ref.assert_close(np.asarray(x), exact, mag, 6)


@pytest.mark.parametrize("kind", KINDS4)
def test_conv_residual_is_its_input(rng, kind):
    """residual=x with x also the convolution's input (a 1x1 convolution)."""
    x_np, w_np = randn(rng, 2, 6, 5, 5), randn(rng, 6, 6, 1, 1)
    exact, mag = ref.conv2d_nchw(x_np, w_np)
    x = make(x_np, kind)
    r = mkcache.conv2d(x, w_np, residual=x, activation="relu")
    assert r is x
    want = np.maximum(exact + x_np, 0)
    ref.assert_close(np.asarray(x), want, mag + np.abs(x_np), 7)


def test_conv_out_is_its_weights(rng):
    x_np, w_np = randn(rng, 4, 4, 1, 1), randn(rng, 4, 4, 1, 1)
    exact, mag = ref.conv2d_nchw(x_np, w_np)
    w = make(w_np, "plain")
    mkcache.conv2d(x_np, w, out=w)
    ref.assert_close(np.asarray(w), exact, mag, 4)


@pytest.mark.parametrize("kind", KINDS4)
@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
def test_pool_out_is_its_input(rng, kind, pool):
    x_np = randn(rng, 2, 5, 6, 6)
    x = make(x_np, kind)
    getattr(mkcache, pool)(x, 3, stride=1, padding=1, out=x)
    want = ref.pool(x_np, "max" if pool == "max_pool2d" else "avg_include", (3, 3), (1, 1),
                    (1, 1), (1, 1))
    np.testing.assert_allclose(np.asarray(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("position", ["x", "weight"])
def test_linear_out_is_an_input(rng, position):
    x_np, w_np, b_np = randn(rng, 6, 6), randn(rng, 6, 6), randn(rng, 6)
    want = x_np.astype(np.float64) @ w_np.T + b_np
    x, w = make(x_np, "plain"), make(w_np, "plain")
    mkcache.linear(x, w, b_np, out=x if position == "x" else w)
    np.testing.assert_allclose(np.asarray(x if position == "x" else w), want, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("position", ["a", "b"])
@pytest.mark.parametrize("kind", ["plain", "owned"])
def test_matmul_out_is_an_operand(rng, position, kind):
    a_np, b_np = randn(rng, 3, 7, 7), randn(rng, 3, 7, 7)
    want = a_np.astype(np.float64) @ b_np
    a, b = make(a_np, kind), make(b_np, kind)
    out = a if position == "a" else b
    mkcache.matmul(a, b, out=out)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS4)
def test_layer_norm_in_place(rng, kind):
    x_np, s, h = randn(rng, 2, 5, 3, 8), randn(rng, 8), randn(rng, 8)
    x = make(x_np, kind)
    mkcache.layer_norm(x, s, h, out=x)
    np.testing.assert_allclose(np.asarray(x), ref.layer_norm(x_np, -1, s, h), rtol=1e-4,
                               atol=1e-4)


def test_layer_norm_out_is_its_scale(rng):
    x_np, s_np = randn(rng, 8, 8), randn(rng, 8)
    x = make(x_np, "plain")
    s = make(np.tile(s_np, 1), "plain")
    # The output has x's shape: scale cannot be it, but x can hold scale's bytes.
    mkcache.layer_norm(x, s_np, out=x)
    np.testing.assert_allclose(np.asarray(x), ref.layer_norm(x_np, -1, s_np), rtol=1e-4,
                               atol=1e-4)
    assert s.shape == (8,)


@pytest.mark.parametrize("kind", KINDS4)
def test_batch_norm_in_place(rng, kind):
    x_np = randn(rng, 2, 5, 4, 4)
    m, v = randn(rng, 5), np.abs(randn(rng, 5)) + 0.5
    x = make(x_np, kind)
    mkcache.batch_norm(x, m, v, out=x)
    np.testing.assert_allclose(np.asarray(x), ref.batch_norm_nchw(x_np, m, v), rtol=1e-4,
                               atol=1e-4)


def test_batch_norm_training_statistics_apart(rng):
    x_np = randn(rng, 2, 5, 4, 4)
    stats = np.ones(5, np.float32)
    mean, var = mkcache.Tensor(stats), mkcache.Tensor(stats)  # one buffer twice
    with pytest.raises(mkcache.InvalidArgumentError, match="must not share memory"):
        mkcache.batch_norm(x_np, mean, var, training=True)
    np.testing.assert_array_equal(stats, 1)  # nothing written


@pytest.mark.parametrize("kind", KINDS4)
def test_lrn_out_is_its_input(rng, kind):
    x_np = randn(rng, 2, 7, 4, 4)
    x = make(x_np, kind)
    mkcache.lrn(x, 3, 1e-2, 0.75, 1.0, out=x)
    np.testing.assert_allclose(np.asarray(x), ref.lrn_nchw(x_np, 3, 1e-2, 0.75, 1.0),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS4)
def test_global_pool_out_is_its_input(rng, kind):
    x_np = randn(rng, 3, 9, 1, 1)
    x = make(x_np, kind)
    mkcache.global_max_pool(x, out=x)
    np.testing.assert_array_equal(np.asarray(x), x_np)


@pytest.mark.parametrize("kind", KINDS4)
def test_concat_out_is_an_input(rng, kind):
    x_np = randn(rng, 2, 5, 3, 3)
    x = make(x_np, kind)
    mkcache.concat([x], axis=1, out=x)
    np.testing.assert_array_equal(np.asarray(x), x_np)
    # Two halves of one buffer concatenated into that buffer, swapped.
    buf = randn(rng, 2, 6)
    left, right = buf[:, :3].copy(), buf[:, 3:].copy()
    whole = mkcache.Tensor(buf)
    lo, hi = mkcache.Tensor(np.ascontiguousarray(buf[0])), mkcache.Tensor(buf[1])
    mkcache.concat([hi, lo], axis=0, out=mkcache.Tensor(buf.reshape(12)))
    np.testing.assert_array_equal(buf.reshape(12), np.concatenate([
        np.concatenate([left[1], right[1]]), np.concatenate([left[0], right[0]])]))
    assert whole.shape == (2, 6)


def test_grad_outputs_sharing_memory_refused(rng):
    x_np, w_np = randn(rng, 2, 4, 5, 5), randn(rng, 4, 4, 3, 3)
    dy_np = randn(rng, 2, 4, 5, 5)
    buf = x_np.copy()
    with pytest.raises(mkcache.InvalidArgumentError, match="must not be one of the inputs"):
        _grad_via_c(buf, w_np, dy_np)
    np.testing.assert_array_equal(buf, x_np)


def _grad_via_c(x_np, w_np, dy_np):
    """conv2d_backward with diff_src over the bytes of src (two handles)."""
    import ctypes
    x, w, dy = mkcache.Tensor(x_np), mkcache.Tensor(w_np), mkcache.Tensor(dy_np)
    same = mkcache.Tensor(x_np)
    out = mkcache._capi.tensor_p(same.handle.value)
    p = mkcache.ops._conv_params("conv", 2, x_np, w_np, 1, 1, 1, 1, "NCHW", None, None)
    status = mkcache._capi.lib.mkc_conv2d_backward(ctypes.byref(p), x.handle, w.handle,
                                                   dy.handle, ctypes.byref(out), None, None)
    mkcache._capi.raise_for(status)


@pytest.mark.parametrize("kind", ["plain", "blocked"])
def test_activation_grad_in_place_over_diff_dst(rng, kind):
    x_np, dy_np = randn(rng, 2, 5, 4, 4), randn(rng, 2, 5, 4, 4)
    import ctypes
    x, dy = make(x_np, "plain"), make(dy_np, kind)
    out = mkcache._capi.tensor_p(dy.handle.value)
    status = mkcache._capi.lib.mkc_activation_backward(1, 0.0, 0.0, None, x.handle, dy.handle,
                                                       ctypes.byref(out))
    if status:
        mkcache._capi.raise_for(status)
    np.testing.assert_array_equal(np.asarray(dy), np.where(x_np > 0, dy_np, 0))
