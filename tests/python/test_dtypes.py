"""The low-precision dtypes a tensor holds on every CPU: int8, uint8,
float16 and bfloat16 - made, converted (cast / Tensor.astype), moved
(reshape, slice, pad, expand, exported in any plain layout) and passed
through programs. Conversions are checked against numpy (float16, the
integers) and against an exact nearest-value search (bfloat16)."""
import ctypes

import numpy as np
import pytest

import mkcache
from mkcache import _capi

LOW = ("int8", "uint8", "float16", mkcache.bfloat16)


def float_samples(n=20000, seed=0):
    """float32 values of every class: random bit patterns (normals,
    subnormals, infinities, NaNs), bfloat16 and float16 ties, the edges."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2 ** 16, 200, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    edges = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 2.0 ** -14, 2.0 ** -24,
                      2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -25 * 1.0000001, 6.1e-5,
                      np.finfo(np.float32).max, np.finfo(np.float32).tiny, 1e-45,
                      np.inf, -np.inf, np.nan, 127.5, -128.5, 255.9, 300, -300], np.float32)
    return np.concatenate([bits.view(np.float32), ties.view(np.float32), edges])


def bf16_nearest(x):
    """bfloat16 bits of float32 `x` by search: of the two bfloat16 values
    around x, the nearer in float64 (ties to the even one); NaN quiet."""
    u = x.view(np.uint32)
    with np.errstate(invalid="ignore"):  # NaN bits
        down = (u & 0xFFFF0000).view(np.float32).astype(np.float64)  # toward zero
    up_bits = (u & 0xFFFF0000) + 0x10000                          # away from zero
    with np.errstate(invalid="ignore"):
        up = up_bits.view(np.float32).astype(np.float64)
    # Above bfloat16's largest finite value the next step is 2^128, which
    # rounds as a number would and is encoded as infinity.
    up[(up_bits & 0x7FFFFFFF) == 0x7F800000] = 2.0 ** 128
    up = np.copysign(up, x.astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        down = np.copysign(down, x.astype(np.float64))
        d_down = np.abs(x.astype(np.float64) - down)
        d_up = np.abs(up - x.astype(np.float64))
    take_up = (d_up < d_down) | ((d_up == d_down) & ((u >> 16) & 1 == 1))
    out = np.where(take_up, up_bits >> 16, u >> 16).astype(np.uint16)
    # Past bfloat16's largest finite value the step up is infinity, which is
    # its own encoding; infinities and NaNs themselves are not rounded.
    special = ~np.isfinite(x)
    out[special] = (u[special] >> 16).astype(np.uint16)
    out[np.isnan(x)] |= 0x40
    return out


def test_float32_to_bfloat16_rounds_to_nearest_even():
    x = float_samples()
    got = mkcache.Tensor(x).astype(mkcache.bfloat16)
    assert got.dtype is mkcache.bfloat16
    bits = got.numpy(raw=True)
    assert bits.dtype == np.uint16
    want = bf16_nearest(x)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[~nan], want[~nan])
    assert np.isnan(np.asarray(got)[nan]).all()
    # Back to float32: exact (the top half of the float32 bits).
    np.testing.assert_array_equal(np.asarray(got)[~nan],
                                  (want[~nan].astype(np.uint32) << 16).view(np.float32))
    np.testing.assert_array_equal(got.astype("float32").numpy(), got.numpy())


def test_float32_to_float16_matches_numpy():
    x = float_samples(seed=1)
    got = mkcache.Tensor(x).astype("float16")
    assert got.dtype == np.float16
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(np.asarray(got)[~nan].view(np.uint16),
                                  want[~nan].view(np.uint16))
    assert np.isnan(np.asarray(got)[nan]).all()
    # float16 to float32 (every one of the 65536 bit patterns): exact.
    halves = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    back = mkcache.cast(halves, "float32").numpy()
    finite = ~np.isnan(halves)
    np.testing.assert_array_equal(back[finite], halves[finite].astype(np.float32))
    assert np.isnan(back[~finite]).all()


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_to_8_bit_integers_truncates_and_saturates(dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([np.linspace(-400, 400, 1601, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, -0.99, 0.99], np.float32)])
    got = mkcache.cast(x, dtype).numpy()
    assert got.dtype == np.dtype(dtype)
    with np.errstate(invalid="ignore"):
        want = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(got, want)
    # Integer sources saturate too; and back to float32 and int64 exactly.
    ints = np.array([-2 ** 31, -129, -128, -1, 0, 127, 128, 255, 256, 2 ** 31 - 1], np.int32)
    np.testing.assert_array_equal(mkcache.cast(ints, dtype).numpy(),
                                  np.clip(ints, info.min, info.max).astype(dtype))
    every = np.arange(info.min, info.max + 1).astype(dtype)
    np.testing.assert_array_equal(mkcache.cast(every, "float32").numpy(), every.astype(np.float32))
    np.testing.assert_array_equal(mkcache.cast(every, "int64").numpy(), every.astype(np.int64))
    np.testing.assert_array_equal(mkcache.cast(every, bool).numpy(), every != 0)


def test_integers_to_bfloat16_round_once():
    # Large int32 values: rounded to bfloat16 in one step (through float32
    # first, which double rounding leaves correct for an 8-bit significand).
    ints = np.array([2 ** 24 + 1, 16777217 * 3, 2 ** 31 - 1, -(2 ** 31), 257, 259, 65535],
                    np.int32)
    got = mkcache.cast(ints, mkcache.bfloat16).numpy()
    exact = ints.astype(np.float64)
    candidates = np.asarray(mkcache.Tensor(ints.astype(np.float32)).astype(mkcache.bfloat16))
    # The result is one of the two bfloat16 neighbours and no farther than the other.
    assert (np.abs(got - exact) <= np.abs(candidates - exact) + 1e-9 * np.abs(exact)).all()
    np.testing.assert_array_equal(got[4:], [256, 260, 65536])  # 257: tie to even; 259: up


@pytest.mark.parametrize("dtype", LOW)
def test_moved_and_exported_in_every_plain_layout(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 5, 7)) * 50).astype(np.float32)
    t = mkcache.Tensor(x).astype(dtype)
    ref = np.asarray(t)  # the converted values, NCHW
    assert ref.shape == x.shape
    np.testing.assert_array_equal(t.numpy("NHWC"), ref.transpose(0, 2, 3, 1))
    assert t.numpy("NHWC", raw=True).dtype == (np.uint16 if dtype is mkcache.bfloat16
                                               else np.dtype(dtype))
    np.testing.assert_array_equal(np.asarray(mkcache.reshape(t, (6, 35))), ref.reshape(6, 35))
    np.testing.assert_array_equal(np.asarray(mkcache.slice(t, [1], [4], [3], [2])),
                                  ref[:, :, :, 1:4:2])
    np.testing.assert_array_equal(np.asarray(mkcache.expand(mkcache.slice(t, [0], [1]),
                                                            (3, 3, 5, 7))),
                                  np.broadcast_to(ref[:1], (3, 3, 5, 7)))
    padded = np.asarray(mkcache.pad(t, [0, 0, 1, 2, 0, 0, 2, 1], mode="constant", value=3))
    np.testing.assert_array_equal(padded, np.pad(ref, [(0, 0), (0, 0), (1, 2), (2, 1)],
                                                 constant_values=3))
    np.testing.assert_array_equal(np.asarray(mkcache.pad(t, [0, 0, 1, 1, 0, 0, 1, 1],
                                                         mode="reflect")),
                                  np.pad(ref, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="reflect"))


@pytest.mark.parametrize("dtype", [mkcache.bfloat16, "float16"])
def test_layout_moves_keep_every_bit_pattern(dtype):
    # Denormals, infinities and NaNs included: moving data between layouts
    # copies bits, it never goes through float32 with denormals flushed.
    bits = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).reshape(4, 16, 32, 32)
    t = (mkcache.Tensor(bits, dtype=mkcache.bfloat16) if dtype is mkcache.bfloat16
         else mkcache.Tensor(bits.view(np.float16)))
    moved = t.numpy("NHWC", raw=True) if dtype is mkcache.bfloat16 else t.numpy("NHWC")
    np.testing.assert_array_equal(moved.view(np.uint16), bits.transpose(0, 2, 3, 1))


def test_bfloat16_bits_wrap_without_copying():
    bits = np.array([[0x3F80, 0xC020, 0x7F80]], np.uint16)  # 1, -2.5, inf
    t = mkcache.Tensor(bits, dtype=mkcache.bfloat16)
    assert t.dtype is mkcache.bfloat16 and t.shape == (1, 3)
    np.testing.assert_array_equal(np.asarray(t), [[1.0, -2.5, np.inf]])
    bits[0, 0] = 0x4000  # wrapped, not copied
    assert np.asarray(t)[0, 0] == 2.0
    np.testing.assert_array_equal(t.numpy(raw=True), bits)


def test_program_with_low_precision_values():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    with mkcache.Graph() as g:
        xi = g.input("x", (None, 3, 4, 5))
        b = g.cast(xi, mkcache.bfloat16)
        h = g.cast(xi, "float16")
        q = g.cast(g.mul(xi, g.constant(np.array([40.0], np.float32))), "int8")
        g.output(g.cast(g.slice(b, [1], [3], [1]), "float32"), "b_back")
        g.output(b, "b")
        g.output(h, "h")
        g.output(g.pad(q, [0, 1, 0, 0, 0, 0, 0, 0], value=-5), "q")
        bits_in = g.input("bits", (2, 2), dtype=mkcache.bfloat16)
        g.output(g.cast(bits_in, "float32"), "from_bits")
        with g.compile() as prog:
            out = prog.run(x=x, bits=mkcache.Tensor(np.array([[0x3F80, 0x4000],
                                                              [0xBF80, 0]], np.uint16),
                                                    dtype=mkcache.bfloat16))
    b_ref = np.asarray(mkcache.Tensor(x).astype(mkcache.bfloat16))
    np.testing.assert_array_equal(out["b"], b_ref)  # bfloat16 outputs come back as float32
    assert out["b"].dtype == np.float32
    np.testing.assert_array_equal(out["b_back"], b_ref[:, 1:3])
    np.testing.assert_array_equal(out["h"], x.astype(np.float16))
    want_q = np.clip(np.trunc(x * 40), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out["q"], np.pad(want_q, [(0, 0), (1, 0), (0, 0), (0, 0)],
                                                   constant_values=-5))
    np.testing.assert_array_equal(out["from_bits"], [[1, 2], [-1, 0]])


def test_bad_low_precision_input_is_refused():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(mkcache.DTypeError, match="wraps a uint16 array of bfloat16 bits"):
        mkcache.Tensor(x, dtype=mkcache.bfloat16)
    with pytest.raises(mkcache.DTypeError, match="Tensor wraps without converting"):
        mkcache.Tensor(x, dtype="int8")
    with pytest.raises(mkcache.InvalidArgumentError, match="dtype must be float32, int32"):
        mkcache.Tensor(x).astype("complex64")
    with pytest.raises(mkcache.InvalidArgumentError, match="float16 or bfloat16"):
        mkcache.cast(x, "bfloat8")
    # Arithmetic operators compute on float32 or bfloat16 and say so.
    q = mkcache.Tensor(x).astype("int8")
    with pytest.raises(mkcache.Error, match="src must be float32 or bfloat16, got int8"):
        mkcache.relu(q)
    h = mkcache.Tensor(x).astype("float16")
    with pytest.raises(mkcache.Error, match="a must be float32 or bfloat16, got float16"):
        mkcache.add(h, h)
    with pytest.raises(mkcache.Error, match="src must be float32 or bfloat16, got float16"):
        mkcache.softmax(h)
    # A pad value the dtype cannot hold.
    with pytest.raises(mkcache.InvalidArgumentError, match="is not an integer of uint8"):
        mkcache.pad(mkcache.Tensor(x).astype("uint8"), [0, 1, 0, 0], value=256)
    with pytest.raises(mkcache.InvalidArgumentError, match="is not an integer of int8"):
        mkcache.pad(q, [0, 1, 0, 0], value=0.5)
    # The C enum names the new dtypes.
    value = ctypes.c_int32()
    for name in ("s8", "u8", "bf16", "f16"):
        assert _capi.lib.mkc_enum_value(b"mkc_dtype", name.encode(), ctypes.byref(value)) == 0
        text = ctypes.c_char_p()
        _capi.lib.mkc_enum_name(b"mkc_dtype", value.value, ctypes.byref(text))
        assert text.value.decode() == name
