"""concat, transpose and to_layout: exact copies, any layout."""
import numpy as np
import pytest

import mkcache


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_concat_plain(axis, rng):
    shapes = [[2, 3, 4, 5]] * 3
    arrays = []
    for i, s in enumerate(shapes):
        s = list(s)
        s[axis] += i
        arrays.append(rng.standard_normal(s, dtype=np.float32))
    y = mkcache.concat(arrays, axis=axis)
    np.testing.assert_array_equal(np.asarray(y), np.concatenate(arrays, axis=axis))


def test_concat_blocked_and_nhwc(rng):
    x = rng.standard_normal((1, 16, 6, 6), dtype=np.float32)
    w1 = rng.standard_normal((16, 16, 1, 1), dtype=np.float32)
    w2 = rng.standard_normal((24, 16, 1, 1), dtype=np.float32)
    a, b = mkcache.conv2d(x, w1), mkcache.conv2d(x, w2)
    y = mkcache.concat([a, b], axis=1)  # inception-style channel concat
    np.testing.assert_array_equal(y.numpy("NCHW"),
                                  np.concatenate([a.numpy("NCHW"), b.numpy("NCHW")], axis=1))
    xs = [rng.standard_normal((2, 4, 5, c), dtype=np.float32) for c in (3, 7)]
    t = mkcache.concat([mkcache.Tensor(v, "NHWC") for v in xs], axis=-1)
    assert t.layout == "NHWC"
    np.testing.assert_array_equal(np.asarray(t), np.concatenate(xs, axis=-1))


@pytest.mark.parametrize("shape, axes", [((2, 3), None), ((2, 3, 4), (1, 0, 2)),
                                         ((2, 3, 4, 5), (0, 2, 3, 1)), ((3, 1, 4, 2, 5), (4, 2, 0, 3, 1))])
def test_transpose(shape, axes, rng):
    x = rng.standard_normal(shape, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(mkcache.transpose(x, axes)), np.transpose(x, axes))


def test_transpose_of_blocked_and_nhwc(rng):
    x = rng.standard_normal((1, 16, 5, 7), dtype=np.float32)
    y = mkcache.conv2d(x, rng.standard_normal((16, 16, 1, 1), dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(mkcache.transpose(y, (0, 2, 3, 1))),
                                  y.numpy("NCHW").transpose(0, 2, 3, 1))
    h = rng.standard_normal((2, 3, 4, 5), dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(mkcache.transpose(mkcache.Tensor(h, "NHWC"), (3, 0, 1, 2))),
                                  h.transpose(3, 0, 1, 2))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC", "nChw8c", "nChw16c"])
def test_to_layout_round_trip(fmt, rng):
    x = rng.standard_normal((2, 19, 5, 3), dtype=np.float32)
    t = mkcache.to_layout(x, fmt)
    np.testing.assert_array_equal(t.numpy("NCHW"), x)
    if fmt.startswith("nC"):
        assert t.format == "aBcd" + fmt[4:-1] + "b"
    back = mkcache.to_layout(t, "NCHW")
    assert back.format == "abcd"
    np.testing.assert_array_equal(np.asarray(back), x)


def test_shape_op_errors(rng):
    a = np.ones((2, 3), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="outside"):
        mkcache.concat([a, np.ones((3, 3), np.float32)], axis=1)
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        mkcache.concat([a, np.ones(3, np.float32)])
    with pytest.raises(mkcache.InvalidArgumentError, match="axis"):
        mkcache.concat([a, a], axis=2)
    with pytest.raises(mkcache.InvalidArgumentError):
        mkcache.concat([])
    with pytest.raises(mkcache.InvalidArgumentError, match="permutation"):
        mkcache.transpose(a, (0, 0))
    with pytest.raises(mkcache.InvalidArgumentError, match="perm"):
        mkcache.transpose(a, (0, 1, 2))
    with pytest.raises(mkcache.InvalidArgumentError, match="format"):
        mkcache.to_layout(a, "nChw4c")
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        mkcache.to_layout(a, "nChw16c")


@pytest.mark.parametrize("shape, fmt, name", [((2, 19, 5, 3), "nChw8c", "aBcd8b"),
                                               ((2, 19, 5, 3), "nChw16c", "aBcd16b"),
                                               ((1, 5, 2, 3, 4), "nCdhw16c", "aBcde16b"),
                                               ((2, 3, 4, 5), "NHWC", "acdb"),
                                               ((1, 3, 2, 4, 5), "NDHWC", "acdeb")])
def test_format_names_in_tensors_and_reorder_keys(shape, fmt, name, rng):
    """Format names follow oneDNN's tags, also in the cache keys of the
    conversions that export a tensor ("reorder:<from>-><to>")."""
    x = rng.standard_normal(shape, dtype=np.float32)
    t = mkcache.to_layout(x, fmt)
    assert t.format == name
    plain = "abcd" if len(shape) == 4 else "abcde"
    np.testing.assert_array_equal(t.numpy("NCHW" if len(shape) == 4 else "NCDHW"), x)
    keys = [k for _, k in mkcache.cache.keys()]
    assert any(k.startswith(f"reorder:{name}->{plain}|") for k in keys), keys
