"""Binary element-wise ops with numpy broadcasting, both layouts, in place."""
import numpy as np
import pytest

import mkcache
from reference import assert_close_elementwise

OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}
SHAPES = [
    ((2, 3, 5, 7), (2, 3, 5, 7)),
    ((2, 3, 5, 7), (3, 1, 1)),       # per-channel, lower rank
    ((2, 3, 5, 7), (7,)),            # last dim
    ((2, 1, 5, 1), (2, 3, 5, 7)),    # a broadcasts: swapped operands
    ((3, 1), (1, 4)),                # both broadcast: expanded
    ((4, 1, 6), (5, 1)),             # both, different ranks
    ((17,), (1,)),
    ((2, 19, 3, 3), (1, 19, 1, 1)),
]


def _data(shape, rng, op):
    x = rng.standard_normal(shape, dtype=np.float32)
    if op == "div":
        x = np.where(np.abs(x) < 0.2, np.float32(0.7), x)  # keep away from 0
    return x


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
def test_binary_broadcasting(op, shapes, rng):
    a, b = _data(shapes[0], rng, op), _data(shapes[1], rng, op)
    want = OPS[op](a.astype(np.float64), b.astype(np.float64))
    y = getattr(mkcache, op)(a, b)
    assert y.shape == want.shape
    # One rounding (two for a swapped div: 1 / (b / a)).
    assert_close_elementwise(np.asarray(y), want, op, ulps=4)


@pytest.mark.parametrize("op", ["add", "mul", "sub"])
def test_binary_nhwc_broadcasts_in_callers_order(op, rng):
    x = rng.standard_normal((2, 5, 6, 19), dtype=np.float32)  # NHWC, C = 19
    c = rng.standard_normal(19, dtype=np.float32)
    y = getattr(mkcache, op)(mkcache.Tensor(x, "NHWC"), c)
    assert y.layout == "NHWC" and y.shape == x.shape
    assert_close_elementwise(np.asarray(y), OPS[op](x.astype(np.float64), c), ulps=4)


def test_binary_on_blocked_conv_output_in_place_no_reorder(rng):
    x = rng.standard_normal((2, 16, 5, 5), dtype=np.float32)
    w = rng.standard_normal((32, 16, 1, 1), dtype=np.float32) * 0.2
    y = mkcache.conv2d(x, w)
    z = mkcache.conv2d(x, w, name="other")
    before_plain = y.numpy("NCHW") + z.numpy("NCHW")
    count = mkcache.cache.reorder_count()
    r = mkcache.add(y, z, out=y)  # residual add, blocked + blocked, in place
    assert r is y and mkcache.cache.reorder_count() == count
    assert_close_elementwise(y.numpy("NCHW"), before_plain, ulps=4)


def test_binary_scalars_keys_and_errors(rng):
    a = rng.standard_normal((3, 4), dtype=np.float32)
    assert_close_elementwise(np.asarray(mkcache.mul(a, 2.5)), a * 2.5, ulps=2)
    mkcache.mul(a, a, name="m")
    assert mkcache.cache.make_key("m", (3, 4), suffix="M") in [k for _, k in mkcache.cache.keys()]
    with pytest.raises(mkcache.InvalidArgumentError, match="broadcast"):
        mkcache.add(a, np.ones((3, 5), np.float32))
    with pytest.raises(mkcache.DTypeError):
        mkcache.add(a, a.astype(np.float64))
    with pytest.raises(mkcache.Error):
        mkcache.add(a, None)


@pytest.mark.parametrize("op", ["add", "sub", "div"])
def test_binary_calls_remembered_follow_every_argument(op, rng):
    """A binary call is remembered per thread by its raw arguments (kind,
    dtypes, caller layouts, shapes): one name alternating the kind, which
    operand broadcasts (a swapped, non-commutative op), a blocked src0 of
    the same shape as a plain one, a broadcast operand seen through a view
    that is plain and then blocked (same shape: it must be converted
    first), and an expanded pair must each compute what numpy does, every
    time, converting only what must be converted."""
    x = _data((2, 16, 5, 7), rng, op)
    z = _data((2, 16, 5, 7), rng, op)
    ch = _data((1, 16, 1, 1), rng, op)
    blocked_x = mkcache.conv2d(x, np.eye(16, dtype=np.float32)[:, :, None, None])
    # NHWC data [2, 5, 7, 16] with an NCHW-labelled [1, 5, 7, 16] operand:
    # broadcast in the caller's order through a view, which needs b plain.
    nhwc = mkcache.Tensor(_data((2, 5, 7, 16), rng, op), "NHWC")
    side = _data((1, 5, 7, 16), rng, op)
    blocked_side = mkcache.conv2d(side, np.eye(5, dtype=np.float32)[:, :, None, None])
    assert blocked_x.format != "abcd" and blocked_side.format != "abcd"
    col, row = _data((3, 1), rng, op), _data((1, 4), rng, op)
    fn, ref = getattr(mkcache, op), OPS[op]
    other = "sub" if op != "sub" else "add"
    # (function, reference, a, b, converts: a layout conversion is expected)
    variants = [
        (fn, ref, x, z, False), (getattr(mkcache, other), OPS[other], x, z, False),
        (fn, ref, blocked_x, z, False), (fn, ref, x, z, False),
        (fn, ref, x, ch, False), (fn, ref, ch, x, False), (fn, ref, ch, blocked_x, False),
        (fn, ref, nhwc, side, False), (fn, ref, nhwc, blocked_side, True),
        (fn, ref, nhwc, side, False), (fn, ref, col, row, False), (fn, ref, x, z, False),
    ]
    for step in range(2):
        for f, r, a, b, converts in variants:
            plain_a = a.numpy(a.layout) if isinstance(a, mkcache.Tensor) else a
            plain_b = b.numpy(b.layout) if isinstance(b, mkcache.Tensor) else b
            want = r(plain_a.astype(np.float64), plain_b.astype(np.float64))
            for repeat in range(3):
                before = mkcache.cache.reorder_count()
                y = f(a, b, name="remembered_binary")
                converted = mkcache.cache.reorder_count() != before
                got = y.numpy(y.layout) if y.ndim == 4 else np.asarray(y)
                what = (f"step {step} {f.__name__} {getattr(a, 'format', 'array')} "
                        f"{getattr(b, 'format', 'array')} call {repeat}")
                assert converted == converts, what
                assert_close_elementwise(got, want, what, ulps=4)
    s0 = mkcache.cache.stats()
    fn(x, ch, name="remembered_binary")  # replaces the (x, z) entry under the key
    fn(x, ch, name="remembered_binary")
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 1 and s1["misses"] == s0["misses"] + 1
    assert s1["insertions"] == s0["insertions"] + 1
    s0 = mkcache.cache.stats()
    fn(x, ch, name="remembered_binary")
    fn(x, ch, name="remembered_binary")
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 2 and s1["misses"] == s0["misses"]
