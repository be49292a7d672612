"""quantized_conv2d and quantized_linear against exact integer arithmetic
in numpy (int64 sums, float64 scaling), on oneDNN's int8 kernels and on
the reference kernel, eagerly and in programs; on CPUs without VNNI,
weights outside 7 bits are refused rather than saturated."""
import numpy as np
import pytest

import mkcache

ISA = mkcache.build_info()["isa"]
NO_VNNI = ISA in ("sse41", "avx", "avx2", "avx512_core")
# Without VNNI oneDNN's kernels need 7-bit weights; with it, the full range.
W_MAX = 63 if NO_VNNI else 127


def conv_sums(x, w, stride, pad, dilation, groups):
    """int64 sums of a grouped 2-D convolution, NCHW / OIHW; pad is
    (top, bottom, left, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    oh = (h + pad[0] + pad[1] - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + pad[2] + pad[3] - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dilation:i * dilation + stride * oh:stride,
                           j * dilation:j * dilation + stride * ow:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return out


def finish(acc, channel_axis, src_scale, weight_scale, bias, relu, dst_dtype, dst_scale,
           dst_zero):
    """Scale, bias, activation and requantization of int64 sums."""
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    scale = src_scale * np.asarray(weight_scale, np.float64).reshape(shape if np.size(
        weight_scale) > 1 else [1] * acc.ndim)
    y = acc * scale
    if bias is not None:
        y = y + bias.astype(np.float64).reshape(shape)
    if relu:
        y = np.maximum(y, 0)
    if dst_dtype == "float32":
        return y
    info = np.iinfo(dst_dtype)
    return np.clip(np.rint(y / dst_scale) + dst_zero, info.min, info.max)


def check_result(got, want, dst_dtype):
    got = np.asarray(got)
    if dst_dtype == "float32":
        assert got.dtype == np.float32
        tol = 1e-5 * max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    else:
        assert got.dtype == np.dtype(dst_dtype)
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        # The primitive scales in float32: a value within rounding of a tie
        # may land one step away.
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.99


CONV_CASES = [
    # (n, c, h, w, o, k, stride, pad, dilation, groups)
    (1, 3, 9, 9, 5, 3, 1, (1, 1, 1, 1), 1, 1),
    (2, 5, 11, 7, 6, 3, 2, (0, 1, 2, 0), 1, 1),
    (2, 17, 8, 8, 19, 1, 1, (0, 0, 0, 0), 1, 1),
    (1, 4, 10, 10, 8, 3, 1, (2, 2, 2, 2), 2, 1),
    (2, 6, 7, 7, 6, 3, 1, (1, 1, 1, 1), 1, 3),  # grouped
    (2, 19, 9, 8, 19, 3, 2, (1, 1, 0, 2), 1, 19),  # depthwise
    (1, 8, 6, 6, 16, 3, 1, (1, 1, 1, 1), 2, 4),  # grouped, each group widening
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("src_dtype,dst_dtype,per_channel,zero_points,relu", [
    ("uint8", "float32", True, True, False),
    ("uint8", "uint8", True, False, True),
    ("int8", "int8", False, True, False),
    ("int8", "float32", True, False, True),
])
def test_conv2d_against_integer_arithmetic(case, src_dtype, dst_dtype, per_channel, zero_points,
                                           relu):
    n, c, h, w_, o, k, stride, pad, dilation, groups = case
    rng = np.random.default_rng(hash(case) % 2 ** 32)
    info = np.iinfo(src_dtype)
    x = rng.integers(info.min, info.max + 1, (n, c, h, w_)).astype(src_dtype)
    w = rng.integers(-W_MAX, W_MAX + 1, (o, c // groups, k, k)).astype(np.int8)
    bias = rng.standard_normal(o).astype(np.float32)
    src_scale = 0.02
    weight_scale = rng.uniform(0.002, 0.01, o).astype(np.float32) if per_channel else 0.005
    src_zero = (7 if src_dtype == "uint8" else -5) if zero_points else 0
    dst_scale, dst_zero = 0.08, (3 if zero_points else 0)
    kwargs = dict(src_scale=src_scale, weight_scale=weight_scale,
                  src_zero_point=src_zero if zero_points else None, dst_dtype=dst_dtype,
                  stride=stride, padding=pad, dilation=dilation, groups=groups,
                  activation="relu" if relu else None)
    if dst_dtype != "float32":
        kwargs.update(dst_scale=dst_scale, dst_zero_point=dst_zero if zero_points else None)
    got = mkcache.quantized_conv2d(x, w, bias, **kwargs)
    acc = conv_sums(x.astype(np.int64) - src_zero, w, stride, pad, dilation, groups)
    want = finish(acc, 1, src_scale, weight_scale, bias, relu, dst_dtype, dst_scale,
                  dst_zero if zero_points else 0)
    check_result(got, want, dst_dtype)
    # Channels-last data gives the same values in its order.
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got_h = mkcache.quantized_conv2d(mkcache.Tensor(xh, "NHWC"), w, bias, data_format="NHWC",
                                     **{k_: v for k_, v in kwargs.items()})
    check_result(np.asarray(got_h).transpose(0, 3, 1, 2), want, dst_dtype)


@pytest.mark.parametrize("shape", [(7, 20), (2, 3, 33), (1, 64)])
@pytest.mark.parametrize("src_dtype,dst_dtype,zero_points", [
    ("uint8", "float32", True), ("int8", "int8", False), ("uint8", "uint8", True),
    ("int8", "float32", False)])
def test_linear_against_integer_arithmetic(shape, src_dtype, dst_dtype, zero_points):
    rng = np.random.default_rng(sum(shape))
    info = np.iinfo(src_dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(src_dtype)
    n_out = 13
    w = rng.integers(-W_MAX, W_MAX + 1, (n_out, shape[-1])).astype(np.int8)
    bias = rng.standard_normal(n_out).astype(np.float32)
    weight_scale = rng.uniform(0.001, 0.01, n_out).astype(np.float32)
    src_zero = (100 if src_dtype == "uint8" else 9) if zero_points else 0
    kwargs = dict(src_scale=0.05, weight_scale=weight_scale,
                  src_zero_point=src_zero if zero_points else None, dst_dtype=dst_dtype,
                  activation="relu")
    if dst_dtype != "float32":
        kwargs.update(dst_scale=0.1, dst_zero_point=5 if zero_points else None)
    got = mkcache.quantized_linear(x, w, bias, **kwargs)
    assert got.shape == shape[:-1] + (n_out,)
    acc = (x.astype(np.int64) - src_zero) @ w.T.astype(np.int64)
    want = finish(acc, acc.ndim - 1, 0.05, weight_scale, bias, True, dst_dtype, 0.1,
                  5 if zero_points else 0)
    check_result(got, want, dst_dtype)


@pytest.mark.parametrize("dst_dtype,sum_zero,relu", [
    ("float32", 0, True), ("uint8", 0, True), ("uint8", 9, False), ("int8", -4, False)])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_conv2d_residual_against_integer_arithmetic(dst_dtype, sum_zero, relu, data_format):
    """A residual added before the activation: real value sum_scale *
    (residual - sum_zero_point), in the result's dtype; eagerly and in
    programs on each implementation (there the output buffer holds the
    residual, in place when nothing reads it after)."""
    rng = np.random.default_rng(11)
    n, c, h, w_, o = 2, 5, 7, 9, 6
    x = rng.integers(0, 256, (n, c, h, w_)).astype(np.uint8)
    w = rng.integers(-W_MAX, W_MAX + 1, (o, c, 3, 3)).astype(np.int8)
    bias = rng.standard_normal(o).astype(np.float32)
    shape = (n, o, h, w_)
    if dst_dtype == "float32":
        r = rng.standard_normal(shape).astype(np.float32)
        sum_scale, dst = 1.0, {}
    else:
        info = np.iinfo(dst_dtype)
        r = rng.integers(info.min, info.max + 1, shape).astype(dst_dtype)
        sum_scale, dst = 0.07, dict(dst_scale=0.09, dst_zero_point=3)
    acc = conv_sums(x.astype(np.int64) - 5, w, 1, (1, 1, 1, 1), 1, 1)
    y = acc * (0.02 * 0.004) + bias.reshape(1, -1, 1, 1) + sum_scale * (r.astype(np.float64)
                                                                         - sum_zero)
    if relu:
        y = np.maximum(y, 0)
    if dst_dtype == "float32":
        want = y
    else:
        info = np.iinfo(dst_dtype)
        want = np.clip(np.rint(y / 0.09) + 3, info.min, info.max)
    kwargs = dict(src_scale=0.02, weight_scale=0.004, src_zero_point=5, dst_dtype=dst_dtype,
                  sum_scale=sum_scale, sum_zero_point=sum_zero, padding=1,
                  activation="relu" if relu else None, data_format=data_format, **dst)
    to_fmt = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) \
        if data_format == "NHWC" else (lambda a: a)
    back = (lambda a: np.asarray(a).transpose(0, 3, 1, 2)) if data_format == "NHWC" \
        else np.asarray
    xin, rin = mkcache.Tensor(to_fmt(x), data_format), mkcache.Tensor(to_fmt(r), data_format)
    check_result(back(mkcache.quantized_conv2d(xin, w, bias, residual=rin, **kwargs)), want,
                 dst_dtype)
    for impl in ("onednn", "reference"):
        with mkcache.Graph() as g:
            xi = g.input("x", xin.shape, dtype=np.uint8, layout=data_format)
            ri = g.input("r", rin.shape, dtype=r.dtype, layout=data_format)
            g.output(g.quantized_conv2d(xi, w, bias, residual=ri, **kwargs), "y")
            with g.compile(impl={"quantized_conv2d": impl}) as prog:
                got = prog.run(x=to_fmt(x), r=to_fmt(r))["y"]
        check_result(back(got), want, dst_dtype)


@pytest.mark.parametrize("groups,c,o", [(3, 6, 9), (17, 17, 17)])
def test_grouped_conv2d_runs_on_onednn_in_programs(groups, c, o):
    """Grouped and depthwise convolutions on oneDNN's int8 kernels (the
    weights read through a grouped view, scales per output channel), forced
    in a program, against int64 arithmetic."""
    rng = np.random.default_rng(groups)
    x = rng.integers(0, 256, (2, c, 10, 9)).astype(np.uint8)
    w = rng.integers(-W_MAX, W_MAX + 1, (o, c // groups, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.002, 0.01, o).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    acc = conv_sums(x.astype(np.int64) - 3, w, 1, (1, 1, 1, 1), 1, groups)
    want = finish(acc, 1, 0.03, ws, bias, True, "uint8", 0.05, 0)
    with mkcache.Graph() as g:
        xi = g.input("x", x.shape, dtype=np.uint8)
        g.output(g.quantized_conv2d(xi, w, bias, src_scale=0.03, weight_scale=ws,
                                    src_zero_point=3, dst_scale=0.05, dst_dtype="uint8",
                                    padding=1, groups=groups, activation="relu"), "y")
        with g.compile(impl={"quantized_conv2d": "onednn"}) as prog:
            got = prog.run(x=x)["y"]
            assert "quantized_conv2d) onednn" in prog.plan()
    check_result(got, want, "uint8")


@pytest.mark.parametrize("dst_dtype,sum_scale,sum_zero", [
    ("float32", 1.0, 0), ("uint8", 0.06, 7), ("int8", 0.05, -3)])
def test_linear_residual_against_integer_arithmetic(dst_dtype, sum_scale, sum_zero):
    rng = np.random.default_rng(21)
    x = rng.integers(0, 256, (3, 5, 29)).astype(np.uint8)
    w = rng.integers(-W_MAX, W_MAX + 1, (11, 29)).astype(np.int8)
    bias = rng.standard_normal(11).astype(np.float32)
    if dst_dtype == "float32":
        r = rng.standard_normal((3, 5, 11)).astype(np.float32)
        dst = {}
    else:
        info = np.iinfo(dst_dtype)
        r = rng.integers(info.min, info.max + 1, (3, 5, 11)).astype(dst_dtype)
        dst = dict(dst_scale=0.08, dst_zero_point=2)
    acc = (x.astype(np.int64) - 4) @ w.T.astype(np.int64)
    y = acc * (0.03 * 0.002) + bias + sum_scale * (r.astype(np.float64) - sum_zero)
    if dst_dtype == "float32":
        want = y
    else:
        info = np.iinfo(dst_dtype)
        want = np.clip(np.rint(y / 0.08) + 2, info.min, info.max)
    kwargs = dict(src_scale=0.03, weight_scale=0.002, src_zero_point=4, dst_dtype=dst_dtype,
                  sum_scale=sum_scale, sum_zero_point=sum_zero, **dst)
    check_result(mkcache.quantized_linear(x, w, bias, residual=r, **kwargs), want, dst_dtype)
    for impl in ("onednn", "reference"):
        with mkcache.Graph() as g:
            xi = g.input("x", x.shape, dtype=np.uint8)
            ri = g.input("r", r.shape, dtype=r.dtype)
            g.output(g.quantized_linear(xi, w, bias, residual=ri, **kwargs), "y")
            with g.compile(impl={"quantized_linear": impl}) as prog:
                got = prog.run(x=x, r=r)["y"]
        check_result(got, want, dst_dtype)
    with pytest.raises(mkcache.InvalidArgumentError, match="shape"):
        mkcache.quantized_linear(x, w, bias, residual=np.ascontiguousarray(r[:, :4]), **kwargs)


def test_conv2d_residual_is_checked():
    x = np.zeros((1, 2, 4, 4), np.uint8)
    w = np.ones((3, 2, 1, 1), np.int8)
    common = dict(src_scale=0.1, weight_scale=0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="residual.*float32.*uint8"):
        mkcache.quantized_conv2d(x, w, residual=np.zeros((1, 3, 4, 4), np.float32),
                                 dst_dtype="uint8", dst_scale=0.1, **common)
    with pytest.raises(mkcache.InvalidArgumentError, match="shape"):
        mkcache.quantized_conv2d(x, w, residual=np.zeros((1, 3, 4, 5), np.float32), **common)
    with pytest.raises(mkcache.InvalidArgumentError, match="sum_scale"):
        mkcache.quantized_conv2d(x, w, residual=np.zeros((1, 3, 4, 4), np.float32),
                                 sum_scale=0.0, **common)
    with pytest.raises(mkcache.InvalidArgumentError, match="sum_zero_point"):
        mkcache.quantized_conv2d(x, w, residual=np.zeros((1, 3, 4, 4), np.float32),
                                 sum_zero_point=2, **common)
    with pytest.raises(mkcache.InvalidArgumentError, match="sum_zero_point"):
        mkcache.quantized_conv2d(x, w, residual=np.zeros((1, 3, 4, 4), np.uint8),
                                 dst_dtype="uint8", dst_scale=0.1, sum_zero_point=300, **common)


def test_in_programs_on_each_implementation():
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (2, 4, 6, 6)).astype(np.float32)
    w = rng.integers(-W_MAX, W_MAX + 1, (5, 4, 3, 3)).astype(np.int8)
    wl = rng.integers(-W_MAX, W_MAX + 1, (7, 5 * 6 * 6)).astype(np.int8)
    bias = rng.standard_normal(5).astype(np.float32)
    q_ref = np.clip(np.rint(x / np.float32(0.05)) + 128, 0, 255).astype(np.uint8)
    acc = conv_sums(q_ref.astype(np.int64) - 128, w, 1, (1, 1, 1, 1), 1, 1)
    conv_ref = finish(acc, 1, 0.05, 0.004, bias, True, "uint8", 0.1, 0)
    lin_acc = conv_ref.reshape(2, -1).astype(np.int64) @ wl.T.astype(np.int64)
    lin_ref = finish(lin_acc, 1, 0.1, 0.003, None, False, "float32", None, 0)
    for impl in ("onednn", "reference"):
        with mkcache.Graph() as g:
            xi = g.input("x", (None, 4, 6, 6))
            q = g.quantize(xi, 0.05, 128)
            y = g.quantized_conv2d(q, w, bias, src_scale=0.05, weight_scale=0.004,
                                   src_zero_point=128, dst_scale=0.1, dst_dtype="uint8",
                                   padding=1, activation="relu")
            g.output(y, "conv")
            flat = g.reshape(y, (-1, 5 * 6 * 6))
            g.output(g.quantized_linear(flat, wl, src_scale=0.1, weight_scale=0.003), "linear")
            with g.compile(impl={"quantized_conv2d": impl, "quantized_linear": impl}) as prog:
                out = prog.run(x=x)
                assert "quantized_conv2d" in prog.plan()
        check_result(out["conv"], conv_ref, "uint8")
        # The linear reads the program's own uint8 conv output: compare with
        # the sums of what it read.
        read = out["conv"].reshape(2, -1).astype(np.int64)
        want = finish(read @ wl.T.astype(np.int64), 1, 0.1, 0.003, None, False, "float32",
                      None, 0)
        check_result(out["linear"], want, "float32")
        assert np.abs(out["linear"] - lin_ref).max() <= 0.1 * 0.003 * np.abs(wl).sum(1).max()


def test_without_vnni_full_range_weights_are_refused_not_saturated():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (1, 8, 5, 5)).astype(np.uint8)
    w = np.full((4, 8, 3, 3), 127, np.int8)
    kwargs = dict(src_scale=0.01, weight_scale=0.01, padding=1)
    if NO_VNNI:
        with pytest.raises(mkcache.UnsupportedError, match="no VNNI.*-63..63"):
            mkcache.quantized_conv2d(x, w, **kwargs)
        with pytest.raises(mkcache.UnsupportedError, match="no VNNI"):
            mkcache.quantized_linear(x.reshape(1, -1)[:, :72], w.reshape(4, -1), src_scale=0.01,
                                     weight_scale=0.01)
    else:  # with VNNI the full range is exact
        want = finish(conv_sums(x, w, 1, (1, 1, 1, 1), 1, 1), 1, 0.01, 0.01, None, False,
                      "float32", None, 0)
        check_result(mkcache.quantized_conv2d(x, w, **kwargs), want, "float32")
    # In a program too (constant weights, bound once).
    with mkcache.Graph() as g:
        xi = g.input("x", x.shape, dtype="uint8")
        g.output(g.quantized_conv2d(xi, w, **kwargs), "y")
        with g.compile(impl={"quantized_conv2d": "onednn"}) as prog:
            if NO_VNNI:
                with pytest.raises(mkcache.UnsupportedError, match="no VNNI.*-63..63"):
                    prog.run(x=x)
            else:
                check_result(prog.run(x=x)["y"], finish(
                    conv_sums(x, w, 1, (1, 1, 1, 1), 1, 1), 1, 0.01, 0.01, None, False,
                    "float32", None, 0), "float32")
    # A scale that is not > 0, given at run time to a program, is refused.
    with mkcache.Graph() as g:
        xi = g.input("x", x.shape, dtype="uint8")
        s = g.input("s", (1,))
        g.output(g.quantized_conv2d(xi, np.clip(w, -63, 63), src_scale=s, weight_scale=0.01,
                                    padding=1), "y")
        with g.compile(impl={"quantized_conv2d": "onednn"}) as prog:
            with pytest.raises(mkcache.InvalidArgumentError, match=r"src_scale\[0\] is 0"):
                prog.run(x=x, s=np.zeros(1, np.float32))
            assert prog.run(x=x, s=np.ones(1, np.float32))["y"].shape == (1, 4, 5, 5)
    # The reference kernel is exact on every CPU.
    with mkcache.Graph() as g:
        xi = g.input("x", x.shape, dtype="uint8")
        g.output(g.quantized_conv2d(xi, w, **kwargs), "y")
        with g.compile(impl={"quantized_conv2d": "reference"}) as prog:
            got = prog.run(x=x)["y"]
    want = finish(conv_sums(x, w, 1, (1, 1, 1, 1), 1, 1), 1, 0.01, 0.01, None, False, "float32",
                  None, 0)
    check_result(got, want, "float32")


def test_bad_arguments_are_refused():
    x = np.zeros((1, 3, 5, 5), np.uint8)
    w = np.zeros((4, 3, 3, 3), np.int8)
    ok = dict(src_scale=0.1, weight_scale=0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="src must be uint8 or int8, got float32"):
        mkcache.quantized_conv2d(x.astype(np.float32), w, **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="weights must be int8, got uint8"):
        mkcache.quantized_conv2d(x, w.astype(np.uint8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="needs dst_scale"):
        mkcache.quantized_conv2d(x, w, dst_dtype="uint8", **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="are for uint8 and int8 results"):
        mkcache.quantized_conv2d(x, w, dst_scale=0.1, **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"weight_scale must have shape \[1\] or \[4\]"):
        mkcache.quantized_conv2d(x, w, src_scale=0.1, weight_scale=[0.1, 0.2])
    with pytest.raises(mkcache.InvalidArgumentError, match=r"weight_scale\[1\] is 0"):
        mkcache.quantized_conv2d(x, w, src_scale=0.1, weight_scale=[0.1, 0, 0.1, 0.1])
    with pytest.raises(mkcache.InvalidArgumentError, match=r"src_scale\[0\] is -1"):
        mkcache.quantized_linear(x.reshape(1, 75), w.reshape(4, 27)[:, :1].repeat(75, 1),
                                 src_scale=-1.0, weight_scale=0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="dst_dtype must be float32, uint8"):
        mkcache.quantized_conv2d(x, w, dst_dtype="int32", **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="src has 3 channels but weights"):
        mkcache.quantized_conv2d(x, np.zeros((4, 2, 3, 3), np.int8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="src's last dim is 5"):
        mkcache.quantized_linear(x, np.zeros((4, 6), np.int8), **ok)
    with pytest.raises(mkcache.InvalidArgumentError, match="src_scale and weight_scale are required"):
        mkcache.quantized_linear(x, np.zeros((4, 5), np.int8), src_scale=0.1, weight_scale=None)
    # Nothing was lost: a good call works.
    y = mkcache.quantized_conv2d(x, w, **ok)
    assert np.asarray(y).shape == (1, 4, 3, 3) and not np.asarray(y).any()
