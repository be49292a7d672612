"""Every activation against the numpy reference: plain and blocked inputs,
both layouts, in place, and fused into conv2d."""
import numpy as np
import pytest

import mkcache
from reference import activation as ref_activation
from reference import assert_close, assert_close_elementwise, conv2d_nchw

KINDS = sorted(mkcache.ACTIVATIONS)
POSITIVE_ONLY = {"sqrt", "log"}


def _input(kind, shape, rng):
    x = rng.standard_normal(shape, dtype=np.float32) * 3
    if kind in POSITIVE_ONLY:
        x = np.abs(x) + np.float32(0.05)
    return x


def _params(kind):
    _, a, b = mkcache.ACTIVATIONS[kind]
    return a, b


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(1, 16), (3, 17, 5), (2, 19, 7, 9)])
def test_activation_matches_reference(kind, shape, rng):
    x = _input(kind, shape, rng)
    y = mkcache.activation(x, kind)
    assert y.shape == shape
    assert_close_elementwise(np.asarray(y), ref_activation(kind, x, *_params(kind)), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_activation_in_place_equals_out_of_place(kind, rng):
    x = _input(kind, (2, 5, 6, 7), rng)
    expected = np.asarray(mkcache.activation(x, kind))
    t = mkcache.Tensor(x.copy())
    assert mkcache.activation(t, kind, out=t) is t
    np.testing.assert_array_equal(np.asarray(t), expected)


@pytest.mark.parametrize("kind", ["gelu", "tanh", "hardswish", "elu", "sigmoid"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_activation_on_blocked_conv_output(kind, data_format, rng):
    x = rng.standard_normal((2, 16, 7, 9), dtype=np.float32)
    w = rng.standard_normal((20, 16, 3, 3), dtype=np.float32) * 0.2
    exact, _ = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    xin = x if data_format == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.conv2d(xin, w, padding=1, data_format=data_format)
    before = mkcache.cache.reorder_count()
    z = mkcache.activation(y, kind)
    assert mkcache.cache.reorder_count() == before
    out = z.numpy("NCHW")
    want = ref_activation(kind, np.asarray(y.numpy("NCHW")), *_params(kind))
    assert_close_elementwise(out, want, kind)


@pytest.mark.parametrize("kind", ["relu", "leaky_relu", "gelu", "gelu_tanh", "relu6",
                                  "sigmoid", "swish", "hardswish", "elu", "tanh", "mish",
                                  "softplus"])
def test_conv2d_fused_activation(kind, rng):
    x = rng.standard_normal((2, 5, 9, 8), dtype=np.float32)
    w = rng.standard_normal((11, 5, 3, 3), dtype=np.float32) * 0.3
    b = rng.standard_normal(11, dtype=np.float32)
    exact, mag = conv2d_nchw(x, w, b, pads=(1, 1, 1, 1))
    y = np.asarray(mkcache.conv2d(x, w, b, padding=1, activation=kind))
    # Activations are 1-Lipschitz-ish here: the conv error bound carries
    # over; add the activation's own few ulps.
    want = ref_activation(kind, exact, *_params(kind))
    assert_close(y, want, mag + np.abs(want), reduction=5 * 9 + 64)


def test_named_helpers_and_parameters(rng):
    x = rng.standard_normal((4, 9), dtype=np.float32) * 4
    assert_close_elementwise(np.asarray(mkcache.leaky_relu(x, 0.2)),
                             ref_activation("relu", x, 0.2))
    assert_close_elementwise(np.asarray(mkcache.elu(x, 0.5)), ref_activation("elu", x, 0.5))
    assert_close_elementwise(np.asarray(mkcache.clip(x, -1.5, 2.0)),
                             ref_activation("clip", x, -1.5, 2.0))
    assert_close_elementwise(np.asarray(mkcache.swish(x, 2.0)), ref_activation("swish", x, 2.0))
    assert_close_elementwise(np.asarray(mkcache.softplus(x, beta=2.5)),
                             ref_activation("softplus", x, 2.5))
    assert_close_elementwise(np.asarray(mkcache.gelu(x, approximate="tanh")),
                             ref_activation("gelu_tanh", x))
    for fn in ("relu", "tanh", "sigmoid", "silu", "hardswish", "mish", "relu6", "abs",
               "exp", "square", "softplus"):
        assert_close_elementwise(np.asarray(getattr(mkcache, fn)(x)),
                                 ref_activation(fn, x, *_params(fn)), fn)
    pos = np.abs(x) + np.float32(0.1)
    assert_close_elementwise(np.asarray(mkcache.sqrt(pos)), np.sqrt(pos.astype(np.float64)))
    assert_close_elementwise(np.asarray(mkcache.log(pos)), np.log(pos.astype(np.float64)))


def test_activation_keys_carry_the_algorithm():
    x = np.ones((1, 8), np.float32)
    mkcache.tanh(x, name="act")
    mkcache.sigmoid(x, name="act")
    keys = [k for _, k in mkcache.cache.keys()]
    assert mkcache.cache.make_key("act", (1, 8), suffix=5) in keys
    assert mkcache.cache.make_key("act", (1, 8), suffix=6) in keys


def test_activation_bad_input():
    with pytest.raises(mkcache.InvalidArgumentError, match="kind"):
        mkcache.activation(np.ones(3, np.float32), "nope")
    with pytest.raises(mkcache.InvalidArgumentError, match="min"):
        mkcache.clip(np.ones(3, np.float32), 2, 1)
    with pytest.raises(mkcache.InvalidArgumentError, match="approximate"):
        mkcache.gelu(np.ones(3, np.float32), approximate="fast")
    t = mkcache.Tensor(np.ones(3, np.float32))
    dst = mkcache._capi.tensor_p()
    with pytest.raises(mkcache.InvalidArgumentError, match="kind"):
        mkcache._capi.lib.mkc_activation(99, 0.0, 0.0, None, t.handle,
                                         mkcache._capi.ctypes.byref(dst))
    assert not dst.value


def test_softplus_refuses_a_beta_that_is_not_positive():
    x = np.ones((2, 3), np.float32)
    for beta in (0.0, -1.0):
        with pytest.raises(mkcache.InvalidArgumentError, match="softplus takes alpha > 0"):
            mkcache.softplus(x, beta=beta)
    with pytest.raises(mkcache.InvalidArgumentError, match="softplus takes alpha > 0"):
        mkcache.activation(x, "softplus", 0.0)
    g = mkcache.Graph()
    g.output(g.softplus(g.input("x", x.shape), beta=-2.0), "y")
    with pytest.raises(mkcache.InvalidArgumentError, match="softplus takes alpha > 0"):
        g.compile().run(x=x)
