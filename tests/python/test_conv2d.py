"""conv2d forward against the numpy reference, in both layouts."""
import numpy as np
import pytest

import mkcache
from reference import assert_close, conv2d_nchw, relu, to_nchw, to_nhwc

# (N, C, H, W, O, KH, KW, stride, pads(t,b,l,r), dilation, groups)
CASES = [
    (1, 3, 7, 5, 17, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 5, 9, 11, 7, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (3, 6, 13, 10, 9, 3, 2, (2, 1), (1, 0, 2, 1), (1, 1), 3),   # asymmetric pad, groups
    (2, 8, 15, 15, 8, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 8),   # depthwise, dilated
    (2, 24, 11, 9, 40, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1
    (1, 19, 17, 23, 33, 5, 5, (2, 2), (2, 1, 0, 3), (1, 2), 1),
    (4, 16, 8, 8, 32, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 2),
    (1, 64, 14, 14, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 12, 7, 7, 12, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), 12),
    (1, 3, 1, 1, 5, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


def _ids(case):
    n, c, h, w, o, kh, kw, s, p, d, g = case
    return f"n{n}c{c}h{h}w{w}o{o}k{kh}x{kw}s{s[0]}{s[1]}p{''.join(map(str, p))}d{d[0]}{d[1]}g{g}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_conv2d_matches_reference(case, data_format, bias, activation, rng):
    n, c, h, w, o, kh, kw, stride, pads, dilation, groups = case
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((o, c // groups, kh, kw), dtype=np.float32)
    b = rng.standard_normal(o, dtype=np.float32) if bias else None
    exact, mag = conv2d_nchw(x, wt, b, stride, pads, dilation, groups)
    if activation == "relu":
        exact = relu(exact)
    xin = to_nhwc(x) if data_format == "NHWC" else x
    y = mkcache.conv2d(xin, wt, b, stride=stride, padding=pads, dilation=dilation,
                       groups=groups, data_format=data_format, activation=activation)
    out = np.asarray(y)
    assert y.layout == data_format
    if data_format == "NHWC":
        assert y.shape == (n, exact.shape[2], exact.shape[3], o)
        out = to_nchw(out)
    else:
        assert y.shape == exact.shape
    assert_close(out, exact, mag, reduction=(c // groups) * kh * kw)


def test_second_call_hits_and_agrees(rng):
    x = rng.standard_normal((2, 5, 9, 9), dtype=np.float32)
    w = rng.standard_normal((7, 5, 3, 3), dtype=np.float32)
    first = np.asarray(mkcache.conv2d(x, w, padding=1, name="c"))
    s0 = mkcache.cache.stats()
    second = np.asarray(mkcache.conv2d(x, w, padding=1, name="c"))
    s1 = mkcache.cache.stats()
    np.testing.assert_array_equal(first, second)
    assert s1["hits"] > s0["hits"]
    assert s1["insertions"] == s0["insertions"]


def test_padding_same_and_valid(rng):
    x = rng.standard_normal((1, 4, 10, 7), dtype=np.float32)
    w = rng.standard_normal((6, 4, 4, 3), dtype=np.float32)
    y = mkcache.conv2d(x, w, padding="same")
    assert y.shape == (1, 6, 10, 7)
    exact, mag = conv2d_nchw(x, w, pads=(1, 2, 1, 1))
    assert_close(np.asarray(y), exact, mag, 4 * 4 * 3)
    assert mkcache.conv2d(x, w, padding="valid").shape == (1, 6, 7, 5)


def test_constant_weights_converted_once(rng):
    x = rng.standard_normal((1, 32, 14, 14), dtype=np.float32)
    w = mkcache.Tensor(rng.standard_normal((32, 32, 3, 3), dtype=np.float32), constant=True)
    mkcache.conv2d(x, w, padding=1, name="cw")
    exact, mag = conv2d_nchw(x, np.asarray(w), pads=(1, 1, 1, 1))
    before = mkcache.cache.reorder_count()
    y = mkcache.conv2d(x, w, padding=1, name="cw")
    # The weights are not converted again; only src may be.
    assert mkcache.cache.reorder_count() - before <= 1
    assert_close(np.asarray(y), exact, mag, 32 * 9)


def test_constant_weights_changed_after_unmarking(rng):
    """The converted copy of constant weights is remembered per primitive
    (bound again without the tensor's lock): un-marking the tensor drops its
    copies, so weights changed in place and marked again are converted anew
    and the next call sees them; a new constant Tensor likewise."""
    x = rng.standard_normal((2, 5, 9, 7), dtype=np.float32)
    w_np = rng.standard_normal((11, 5, 3, 3), dtype=np.float32)
    w = mkcache.Tensor(w_np, constant=True)
    for _ in range(3):
        y = mkcache.conv2d(x, w, padding=1, name="cw_changed")
    exact, mag = conv2d_nchw(x, w_np, pads=(1, 1, 1, 1))
    assert_close(np.asarray(y), exact, mag, 5 * 9, what="first weights")
    w.set_constant(False)
    w_np *= -0.5
    w.set_constant(True)
    for step in range(2):
        y = mkcache.conv2d(x, w, padding=1, name="cw_changed")
        exact, mag = conv2d_nchw(x, w_np, pads=(1, 1, 1, 1))
        assert_close(np.asarray(y), exact, mag, 5 * 9, what=f"changed weights, call {step}")
    for step in range(3):
        w2_np = rng.standard_normal((11, 5, 3, 3), dtype=np.float32)
        w2 = mkcache.Tensor(w2_np, constant=True)
        y = mkcache.conv2d(x, w2, padding=1, name="cw_changed")
        exact, mag = conv2d_nchw(x, w2_np, pads=(1, 1, 1, 1))
        assert_close(np.asarray(y), exact, mag, 5 * 9, what=f"new weights {step}")
        del w2


def test_conv_output_into_existing_tensor(rng):
    x = rng.standard_normal((2, 3, 8, 8), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    exact, mag = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    # Into a library tensor (re-laid out as needed) and into a wrapped array.
    out = mkcache.conv2d(x, w, padding=1)
    same = mkcache.conv2d(x, w, padding=1, out=out)
    assert same is out
    assert_close(np.asarray(out), exact, mag, 27)
    buf = np.zeros((2, 4, 8, 8), dtype=np.float32)
    mkcache.conv2d(x, w, padding=1, out=mkcache.Tensor(buf, "NCHW"))
    assert_close(buf, exact, mag, 27)


def test_cached_conv_reads_each_calls_buffers(rng):
    """One cached entry, inputs and outputs that change every call: the
    entry re-binds a buffer only when it differs from the one bound last
    time, so alternating Tensors (and a constant weight kept converted)
    must still give each call its own result."""
    xs = [rng.standard_normal((2, 6, 9, 7), dtype=np.float32) for _ in range(2)]
    ws = [rng.standard_normal((10, 6, 3, 3), dtype=np.float32) for _ in range(2)]
    exact = {(i, j): conv2d_nchw(xs[i], ws[j], pads=(1, 1, 1, 1)) for i in range(2) for j in range(2)}
    tx = [mkcache.Tensor(x) for x in xs]
    tw = [mkcache.Tensor(w, constant=True) for w in ws]
    outs = [None, None]
    for step in range(6):
        i, j = step % 2, (step // 2) % 2
        outs[i] = mkcache.conv2d(tx[i], tw[j], padding=1, name="rebinding", out=outs[i])
        want, mag = exact[i, j]
        assert_close(np.asarray(outs[i]), want, mag, reduction=6 * 9, what=f"step {step}")


def test_prepared_params_follow_every_argument(rng):
    """Convolution parameters are prepared once per distinct arguments: a
    value equal to a cached one but of a rejected type still fails, list
    arguments work, and a residual call (which sets the sum post-op) does not
    leak into the next plain call with the same arguments."""
    x = rng.standard_normal((1, 4, 6, 6), dtype=np.float32)
    w = rng.standard_normal((4, 4, 3, 3), dtype=np.float32)
    exact, mag = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    for _ in range(2):
        assert_close(np.asarray(mkcache.conv2d(x, w, padding=1, stride=1)), exact, mag, 36)
    with pytest.raises(mkcache.InvalidArgumentError, match="stride"):
        mkcache.conv2d(x, w, padding=1, stride=1.0)
    assert_close(np.asarray(mkcache.conv2d(x, w, padding=[1, 1], stride=[1, 1])), exact, mag, 36)
    residual = rng.standard_normal(exact.shape, dtype=np.float32)
    summed = np.asarray(mkcache.conv2d(x, w, padding=1, stride=1, residual=residual))
    assert_close(summed, exact + residual, mag + np.abs(residual), 36)
    assert_close(np.asarray(mkcache.conv2d(x, w, padding=1, stride=1)), exact, mag, 36)
    exact2, mag2 = conv2d_nchw(x, w, stride=(2, 2), pads=(1, 1, 1, 1))
    assert_close(np.asarray(mkcache.conv2d(x, w, padding=1, stride=2)), exact2, mag2, 36)
