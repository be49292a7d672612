"""quantized_matmul against exact integer arithmetic in numpy (int64 sums,
float64 scaling): batch broadcasting, transposes, zero points, per-column
scales, bias, an addend, activations and requantized results, eagerly
and in programs on oneDNN (reading strided views of transposed values)
and on the reference kernel; bad input refused; without VNNI, b outside 7
bits refused rather than saturated."""
import numpy as np
import pytest

import mkcache
from test_quantized_ops import NO_VNNI, W_MAX, check_result

AVX2_ONLY = NO_VNNI


def want(a, b, a_scale, b_scale, a_zero=0, bias=None, addend=None, relu=False,
         dst_dtype="float32", dst_scale=None, dst_zero=0, ta=False, tb=False):
    a64 = a.astype(np.int64) - a_zero
    b64 = b.astype(np.int64)
    if ta:
        a64 = np.swapaxes(a64, -1, -2)
    if tb:
        b64 = np.swapaxes(b64, -1, -2)
    acc = np.matmul(a64, b64)
    y = acc * (a_scale * np.asarray(b_scale, np.float64))
    if bias is not None:
        y = y + bias.astype(np.float64)
    if addend is not None:
        y = y + addend.astype(np.float64)
    if relu:
        y = np.maximum(y, 0)
    if dst_dtype == "float32":
        return y
    info = np.iinfo(dst_dtype)
    return np.clip(np.rint(y / dst_scale) + dst_zero, info.min, info.max)


CASES = [
    # (a shape, b shape, transpose_a, transpose_b)
    ((5, 7), (7, 3), False, False),
    ((2, 3, 5, 17), (2, 3, 17, 4), False, False),
    ((2, 1, 9, 6), (3, 6, 11), False, False),       # batch dims broadcast
    ((2, 3, 6, 5), (2, 3, 4, 6), True, True),        # both read transposed
    ((1, 12, 19, 64), (1, 12, 64, 19), False, False),  # attention scores, odd length
]


@pytest.mark.parametrize("a_shape,b_shape,ta,tb", CASES)
@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("dst_dtype", ["float32", "uint8", "int8"])
def test_against_integer_arithmetic(a_shape, b_shape, ta, tb, a_dtype, dst_dtype):
    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape))
    info = np.iinfo(a_dtype)
    a = rng.integers(info.min, info.max + 1, a_shape).astype(a_dtype)
    b = rng.integers(-W_MAX, W_MAX + 1, b_shape).astype(np.int8)
    a_zero = 100 if a_dtype == "uint8" else 0
    ref = want(a, b, 0.02, 0.01, a_zero, ta=ta, tb=tb)
    dst = {}
    if dst_dtype != "float32":
        dst = dict(dst_scale=float(np.abs(ref).max() / 100), dst_zero_point=7)
    got = mkcache.quantized_matmul(a, b, a_scale=0.02, b_scale=0.01,
                                   a_zero_point=a_zero or None, dst_dtype=dst_dtype,
                                   transpose_a=ta, transpose_b=tb, **dst)
    check_result(got.numpy(), want(a, b, 0.02, 0.01, a_zero, dst_dtype=dst_dtype, ta=ta, tb=tb,
                                   dst_scale=dst.get("dst_scale"), dst_zero=7), dst_dtype)


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 13), (2, 3, 9, 13), (13,), (9, 1)])
def test_bias_addend_relu_and_per_column_scales(mask_shape):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (2, 3, 9, 10)).astype(np.uint8)
    b = rng.integers(-W_MAX, W_MAX + 1, (2, 3, 10, 13)).astype(np.int8)
    b_scale = rng.uniform(0.001, 0.01, 13).astype(np.float32)
    bias = rng.standard_normal(13).astype(np.float32)
    mask = rng.uniform(-3, 3, mask_shape).astype(np.float32)
    got = mkcache.quantized_matmul(a, b, a_scale=0.05, b_scale=b_scale, a_zero_point=128,
                                   bias=bias, addend=mask, activation="relu")
    ref = want(a, b, 0.05, b_scale.astype(np.float64), 128, bias, mask, relu=True)
    check_result(got.numpy(), ref, "float32")


def attention_graph(seq, heads, dim, q_scale, k_scale, mask):
    """[B, S, H*D] uint8 q and int8 k, each viewed as heads by a reshape and
    a transpose: the scores q @ k^T with a mask, float32."""
    g = mkcache.Graph()
    q = g.input("q", (None, seq, heads * dim), dtype="uint8")
    k = g.input("k", (None, seq, heads * dim), dtype="int8")
    m = g.input("mask", (None, 1, 1, seq))
    qh = g.transpose(g.reshape(q, (0, seq, heads, dim)), (0, 2, 1, 3))
    kt = g.transpose(g.reshape(k, (0, seq, heads, dim)), (0, 2, 3, 1))
    g.output(g.quantized_matmul(qh, kt, a_scale=q_scale, b_scale=k_scale, a_zero_point=120,
                                addend=m if mask else None), "scores")
    return g


@pytest.mark.parametrize("impl", ["onednn", "reference"])
@pytest.mark.parametrize("mask", [False, True])
def test_program_reads_views_of_heads(impl, mask):
    batch, seq, heads, dim = 2, 11, 3, 8
    rng = np.random.default_rng(9)
    q = rng.integers(0, 256, (batch, seq, heads * dim)).astype(np.uint8)
    k = rng.integers(-W_MAX, W_MAX + 1, (batch, seq, heads * dim)).astype(np.int8)
    m = rng.uniform(-5, 0, (batch, 1, 1, seq)).astype(np.float32)
    qh = q.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3)
    kt = k.reshape(batch, seq, heads, dim).transpose(0, 2, 3, 1)
    ref = want(qh, kt, 0.03, 0.02, 120, addend=m if mask else None)
    with attention_graph(seq, heads, dim, 0.03, 0.02, mask) as g:
        with g.compile(impl={"quantized_matmul": impl}) as prog:
            out = prog.run(q=q, k=k, mask=m)
            plan = prog.plan()
    check_result(out["scores"], ref, "float32")
    assert f"quantized_matmul" in plan
    if impl == "onednn" and not NO_VNNI:
        # The heads are read where they are: no converter before the matmul.
        assert "converter" not in plan.split("quantized_matmul")[0].split("steps")[-1]


def test_without_vnni_full_range_b_is_refused_not_saturated():
    a = np.full((1, 4, 8), 255, np.uint8)
    b = np.full((1, 8, 4), 127, np.int8)
    if NO_VNNI:
        with pytest.raises(mkcache.UnsupportedError, match="no VNNI.*-63..63"):
            mkcache.quantized_matmul(a, b, a_scale=0.01, b_scale=0.01)
    else:
        check_result(mkcache.quantized_matmul(a, b, a_scale=0.01, b_scale=0.01).numpy(),
                     want(a, b, 0.01, 0.01), "float32")
    # The reference kernel is exact on every CPU; int8 a goes there without VNNI.
    with mkcache.Graph() as g:
        ai = g.input("a", a.shape, dtype="uint8")
        bi = g.input("b", b.shape, dtype="int8")
        g.output(g.quantized_matmul(ai, bi, a_scale=0.01, b_scale=0.01), "y")
        with g.compile(impl={"quantized_matmul": "reference"}) as prog:
            check_result(prog.run(a=a, b=b)["y"], want(a, b, 0.01, 0.01), "float32")
    with mkcache.Graph() as g:
        ai = g.input("a", a.shape, dtype="int8")
        bi = g.input("b", b.shape, dtype="int8")
        g.output(g.quantized_matmul(ai, bi, a_scale=0.01, b_scale=0.01), "y")
        with g.compile() as prog:
            s8 = (a // 2).astype(np.int8)
            small = np.clip(b, -63, 63)
            check_result(prog.run(a=s8, b=small)["y"], want(s8, small, 0.01, 0.01), "float32")
            if NO_VNNI:
                assert "exact for uint8 a only" in prog.plan()


def test_bad_arguments_are_refused():
    a = np.zeros((2, 3, 4), np.uint8)
    b = np.zeros((2, 4, 5), np.int8)
    ok = dict(a_scale=0.1, b_scale=0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="a must be uint8 or int8, got float32"):
        mkcache.quantized_matmul(a.astype(np.float32), b, **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="b must be int8, got uint8"):
        mkcache.quantized_matmul(a, b.astype(np.uint8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="inner dims differ"):
        mkcache.quantized_matmul(a, np.zeros((2, 3, 5), np.int8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="batch dims"):
        mkcache.quantized_matmul(a, np.zeros((3, 4, 5), np.int8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="a_scale and b_scale are required"):
        mkcache.quantized_matmul(a, b, a_scale=0.1, b_scale=None)
    with pytest.raises(mkcache.InvalidArgumentError, match="b_scale must have shape"):
        mkcache.quantized_matmul(a, b, a_scale=0.1, b_scale=np.ones(4, np.float32))
    with pytest.raises(mkcache.InvalidArgumentError, match="does not broadcast into the result"):
        mkcache.quantized_matmul(a, b, addend=np.zeros((4, 5), np.float32), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="addend must be float32"):
        mkcache.quantized_matmul(a, b, addend=np.zeros(5, np.int32), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="needs dst_scale"):
        mkcache.quantized_matmul(a, b, dst_dtype="uint8", **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"a_scale\[0\] is -1"):
        mkcache.quantized_matmul(a, b, a_scale=-1.0, b_scale=0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="bias must have shape"):
        mkcache.quantized_matmul(a, b, bias=np.zeros(4, np.float32), **ok)
