"""softmax / log_softmax on every axis, both layouts, in place."""
import numpy as np
import pytest

import mkcache
from reference import assert_close_elementwise, softmax as ref_softmax


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(7,), (3, 129), (2, 5, 17), (2, 19, 7, 9), (1, 12, 13, 128)])
def test_softmax_every_axis(shape, log, rng):
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    fn = mkcache.log_softmax if log else mkcache.softmax
    for axis in range(-len(shape), len(shape)):
        y = np.asarray(fn(x, axis=axis))
        # Sums of at most a few hundred terms: a few ulps per term.
        assert_close_elementwise(y, ref_softmax(x, axis, log), f"axis {axis}",
                                 ulps=64 + 2 * shape[axis])


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_softmax_nhwc_axis_is_the_callers(axis, rng):
    x = rng.standard_normal((2, 6, 5, 19), dtype=np.float32)  # NHWC: C = 19
    t = mkcache.Tensor(x, "NHWC")
    y = mkcache.softmax(t, axis=axis)
    assert y.layout == "NHWC" and y.shape == x.shape
    assert_close_elementwise(np.asarray(y), ref_softmax(x, axis), ulps=128)


def test_softmax_on_blocked_conv_output_and_in_place(rng):
    x = rng.standard_normal((2, 16, 5, 5), dtype=np.float32)
    w = rng.standard_normal((24, 16, 1, 1), dtype=np.float32) * 0.3
    y = mkcache.conv2d(x, w)
    plain = y.numpy("NCHW")
    before = mkcache.cache.reorder_count()
    z = mkcache.softmax(y, axis=1, out=y)
    assert z is y and mkcache.cache.reorder_count() == before
    assert_close_elementwise(z.numpy("NCHW"), ref_softmax(plain, 1), ulps=128)


def test_softmax_key_carries_axis_and_bad_axis():
    x = np.ones((2, 3), np.float32)
    mkcache.softmax(x, axis=0, name="sm")
    mkcache.softmax(x, axis=1, name="sm")
    keys = [k for _, k in mkcache.cache.keys()]
    assert mkcache.cache.make_key("sm", (2, 3), suffix=0) in keys
    assert mkcache.cache.make_key("sm", (2, 3), suffix=1) in keys
    with pytest.raises(mkcache.InvalidArgumentError, match="axis"):
        mkcache.softmax(x, axis=2)
    with pytest.raises(mkcache.InvalidArgumentError, match="axis"):
        mkcache.softmax(x, axis=-3)
    with pytest.raises(mkcache.InvalidArgumentError, match="axis"):
        mkcache.log_softmax(x, axis=1.5)


def test_softmax_calls_remembered_follow_every_argument(rng):
    """Inference softmax is remembered per thread by its raw arguments: one
    name alternating axis (also given from the end), log, the caller's
    layout and the exact layout of src (plain, then a blocked conv output
    of the same shape) must each compute what a fresh call would, and a
    repeat must count as a hit."""
    x = rng.standard_normal((2, 16, 5, 7), dtype=np.float32) * 3
    nhwc = mkcache.Tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NHWC")
    blocked = mkcache.conv2d(x, np.eye(16, dtype=np.float32)[:, :, None, None])
    assert blocked.format != "abcd"
    # Each variant runs a few times in a row: a call is remembered once it
    # hits (variants sharing a key replace each other's entry).
    for step in range(2):
        for src, axis, log in ((x, 1, False), (blocked, 1, False), (x, -3, False),
                               (x, 3, False), (x, 1, True), (blocked, 1, True),
                               (nhwc, 1, False), (nhwc, -1, False), (x, 1, False)):
            fn = mkcache.log_softmax if log else mkcache.softmax
            plain = np.asarray(src) if isinstance(src, np.ndarray) else src.numpy()
            want = ref_softmax(plain, axis, log)
            for repeat in range(3):
                before = mkcache.cache.reorder_count()
                y = fn(src, axis=axis, name="remembered_softmax")
                # Each src runs in its own layout, the blocked one too.
                assert mkcache.cache.reorder_count() == before, f"{src.__class__} converted"
                got = y.numpy(src.layout) if isinstance(src, mkcache.Tensor) else np.asarray(y)
                assert_close_elementwise(got, want, f"step {step} axis {axis} log {log} "
                                         f"call {repeat}", ulps=128)
    s0 = mkcache.cache.stats()
    mkcache.softmax(x, axis=1, name="remembered_softmax")
    mkcache.softmax(x, axis=1, name="remembered_softmax")
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 2 and s1["misses"] == s0["misses"]
