"""quantize / dequantize (ONNX's QuantizeLinear and DequantizeLinear),
eagerly and in programs, against numpy's float32 arithmetic and, where
installed, onnx's reference evaluator; bad scales, zero points and dtypes
refused before anything is written."""
import numpy as np
import pytest

import mkcache


def quantize_ref(x, scale, zero, dtype, axis=1):
    """numpy: float32 division, rounding ties to even, the zero point added,
    saturated; NaN to the zero point."""
    info = np.iinfo(dtype)
    shape = [1] * x.ndim
    if np.size(scale) > 1:
        shape[axis] = -1
    s = np.asarray(scale, np.float32).reshape(shape)
    z = np.asarray(zero, np.float32).reshape(shape)
    q = (x / s).astype(np.float32)
    v = np.where(np.isnan(q), z, np.rint(q) + z)
    return np.clip(v, info.min, info.max).astype(dtype)


def dequantize_ref(q, scale, zero, axis=1):
    shape = [1] * q.ndim
    if np.size(scale) > 1:
        shape[axis] = -1
    s = np.asarray(scale, np.float32).reshape(shape)
    z = np.asarray(zero, np.int64).reshape(shape)
    return ((q.astype(np.int64) - z).astype(np.float32) * s).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_per_tensor_against_numpy(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 7)) * 4).astype(np.float32)
    # Ties (k + 0.5) * scale exactly, out-of-range values and NaN.
    x.flat[:6] = [0.25, 0.75, -0.25, 1e9, -1e9, np.nan]
    zero = 128 if dtype == np.uint8 else -3
    q = mkcache.quantize(x, 0.5, zero, dtype=dtype)
    assert q.dtype == dtype and q.shape == x.shape
    want = quantize_ref(x, 0.5, zero, dtype)
    np.testing.assert_array_equal(np.asarray(q), want)
    assert np.asarray(q).flat[0] == zero + 0 and np.asarray(q).flat[1] == zero + 2  # even ties
    back = mkcache.dequantize(q, 0.5, zero)
    np.testing.assert_array_equal(np.asarray(back), dequantize_ref(want, 0.5, zero))
    # Without a zero point: 0, of the dtype asked for.
    np.testing.assert_array_equal(np.asarray(mkcache.quantize(x, 0.5, dtype=dtype)),
                                  quantize_ref(x, 0.5, 0, dtype))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_per_axis_against_numpy(axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 6, 3, 5)) * 3).astype(np.float32)
    n = x.shape[axis]
    scale = rng.uniform(0.01, 0.2, n).astype(np.float32)
    zero = rng.integers(-20, 20, n).astype(np.int8)
    q = mkcache.quantize(x, scale, zero, axis=axis)
    assert q.dtype == np.int8  # the zero point's dtype
    want = quantize_ref(x, scale, zero, np.int8, axis % 4)
    np.testing.assert_array_equal(np.asarray(q), want)
    np.testing.assert_array_equal(np.asarray(mkcache.dequantize(q, scale, zero, axis=axis)),
                                  dequantize_ref(want, scale, zero, axis % 4))
    # int32 data (a bias, an accumulator) dequantizes too.
    acc = rng.integers(-2 ** 20, 2 ** 20, x.shape).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(mkcache.dequantize(acc, scale, axis=axis)),
                                  dequantize_ref(acc, scale, 0, axis % 4))


def test_against_onnx_reference_evaluator():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 4)) * 10).astype(np.float32)
    scale = np.array([0.05, 0.1, 0.3], np.float32)
    zero = np.array([120, 128, 3], np.uint8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, x.shape),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    q_ref, y_ref = ReferenceEvaluator(model).run(None, {"x": x})
    q = mkcache.quantize(x, scale, zero)
    np.testing.assert_array_equal(np.asarray(q), q_ref)
    np.testing.assert_array_equal(np.asarray(mkcache.dequantize(q, scale, zero)), y_ref)


def test_in_a_program():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 4, 3, 3)) * 2).astype(np.float32)
    scale = np.array([0.02, 0.05, 0.1, 0.2], np.float32)
    with mkcache.Graph() as g:
        xi = g.input("x", (None, 4, 3, 3))
        q = g.quantize(xi, scale, np.array([0, 10, 20, 30], np.int8))
        g.output(q, "q")
        g.output(g.dequantize(q, scale, np.array([0, 10, 20, 30], np.int8)), "y")
        g.output(g.quantize(xi, 0.1, 100), "q_u8")
        with g.compile() as prog:
            out = prog.run(x=x)
            assert "quantize" in prog.plan()
    want = quantize_ref(x, scale, np.array([0, 10, 20, 30]), np.int8)
    np.testing.assert_array_equal(out["q"], want)
    np.testing.assert_array_equal(out["y"], dequantize_ref(want, scale, [0, 10, 20, 30]))
    np.testing.assert_array_equal(out["q_u8"], quantize_ref(x, 0.1, 100, np.uint8))
    # Channels-last data: axis counts in the order the caller gives, and the
    # result stays channels-last (a quantized_conv2d in NHWC reads it as such).
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    qh = mkcache.quantize(mkcache.Tensor(xh, "NHWC"), scale, axis=-1, dtype="int8")
    assert qh.layout == "NHWC" and qh.shape == xh.shape
    np.testing.assert_array_equal(np.asarray(qh), quantize_ref(xh, scale, 0, np.int8, 3))
    qn = quantize_ref(x, scale, 0, np.int8, 1)
    np.testing.assert_array_equal(qh.numpy("NCHW"), qn)
    w = np.random.default_rng(4).integers(-63, 64, (3, 4, 1, 1)).astype(np.int8)
    yh = mkcache.quantized_conv2d(qh, w, src_scale=0.1, weight_scale=0.01, data_format="NHWC")
    y = mkcache.quantized_conv2d(qn, w, src_scale=0.1, weight_scale=0.01)
    np.testing.assert_allclose(yh.numpy("NCHW"), np.asarray(y), rtol=1e-6)


def test_bad_arguments_are_refused():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"quantize: scale\[0\] is 0"):
        mkcache.quantize(x, 0.0)
    with pytest.raises(mkcache.InvalidArgumentError, match=r"scale\[1\] is nan"):
        mkcache.quantize(x, [0.1, np.nan, 0.1])
    with pytest.raises(mkcache.InvalidArgumentError, match="scale has 2 elements; one, or one per"):
        mkcache.quantize(x, [0.1, 0.2])
    with pytest.raises(mkcache.InvalidArgumentError, match="axis 2 is out of range"):
        mkcache.quantize(x, [0.1, 0.2, 0.3], axis=2)
    with pytest.raises(mkcache.InvalidArgumentError, match="zero_point must be integers in 0..255"):
        mkcache.quantize(x, 0.1, 256)
    with pytest.raises(mkcache.InvalidArgumentError, match="zero_point must be integers in -128"):
        mkcache.quantize(x, 0.1, 1.5, dtype="int8")
    with pytest.raises(mkcache.InvalidArgumentError, match="dtype must be uint8 or int8"):
        mkcache.quantize(x, 0.1, dtype="int32")
    with pytest.raises(mkcache.InvalidArgumentError, match="input 0 .src. is int32; quantize"):
        mkcache.quantize(np.ones(3, np.int32), 0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="input 0 .src. is float32; dequantize"):
        mkcache.dequantize(x, 0.1)
    q = mkcache.quantize(x, 0.1)
    with pytest.raises(mkcache.InvalidArgumentError, match="zero_point is int8, src uint8"):
        mkcache.dequantize(q, 0.1, np.array([1], np.int8))
    with pytest.raises(mkcache.InvalidArgumentError, match="zero_point has 3 elements, scale 1"):
        mkcache.dequantize(q, 0.1, np.array([1, 2, 3], np.uint8))
    with mkcache.Graph() as g:
        xi = g.input("x", (2, 3))
        with pytest.raises(mkcache.InvalidArgumentError, match="give zero_point as a numpy"):
            g.dequantize(xi, 0.1, 3)
    # Nothing was lost: the same call with good arguments works.
    np.testing.assert_array_equal(np.asarray(mkcache.quantize(x, 0.1)), np.full((2, 3), 10))


def near_half(x, scale):
    """Where x / scale lies within a few float32 steps of a half: there the
    fast path's x * (1 / scale) may round to the other neighbour."""
    q = np.asarray(x, np.float64) / np.float64(scale)
    return np.abs(np.abs(q - np.floor(q)) - 0.5) <= 4 * np.spacing(np.float32(np.abs(q) + 1))


@pytest.mark.parametrize("dtype,zero", [(np.uint8, 128), (np.int8, -3), (np.uint8, None)])
def test_fast_runs_on_onednn_within_a_step_at_halves(dtype, zero):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, 7, 9, 5)) * 10).astype(np.float32)
    scale = np.float32(0.1234567)
    x.flat[:4] = [(k + 0.5) * scale for k in (1, 2, -3, 40)]  # halves, as float32 makes them
    want = quantize_ref(x, scale, zero or 0, dtype)
    got = np.asarray(mkcache.quantize(x, float(scale), zero, dtype=dtype, fast=True))
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1
    assert np.all(diff[~near_half(x, scale)] == 0)
    # In a program the step is oneDNN's (and reads a conv's blocked output
    # where it is); without fast, the reference kernel's.
    w = rng.standard_normal((6, 7, 3, 3)).astype(np.float32)
    for fast, impl in ((True, "onednn"), (False, "reference")):
        with mkcache.Graph() as g:
            xi = g.input("x", (None, 7, 9, 5))
            y = g.conv2d(xi, w, padding=1)
            g.output(g.quantize(y, float(scale), zero, dtype=dtype, fast=fast), "q")
            g.output(y, "y")
            with g.compile() as prog:
                out = prog.run(x=x)
                step = [s for s in prog.plan().splitlines() if "(quantize)" in s][0]
        assert impl in step, step
        want = quantize_ref(out["y"], scale, zero or 0, dtype)
        diff = np.abs(out["q"].astype(np.int64) - want.astype(np.int64))
        assert diff.max() <= (1 if fast else 0)
        assert np.all(diff[~near_half(out["y"], scale)] == 0)


def test_fast_per_axis_and_bad_scales():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    scales = np.array([0.1, 0.2, 0.3], np.float32)
    # Per-axis scales are the reference kernel's: exact.
    np.testing.assert_array_equal(
        np.asarray(mkcache.quantize(x, scales, np.full(3, 5, np.uint8), fast=True, axis=1)),
        quantize_ref(x, scales, 5, np.uint8, axis=1))
    with mkcache.Graph() as g:
        xi = g.input("x", (2, 3, 4))
        s = g.input("s", (1,))
        g.output(g.quantize(xi, s, fast=True), "q")
        with g.compile(impl={"quantize": "onednn"}) as prog:
            for bad in (0.0, -1.0, np.inf, np.nan):
                with pytest.raises(mkcache.InvalidArgumentError, match="scale.*finite and > 0"):
                    prog.run(x=x, s=np.array([bad], np.float32))
            np.testing.assert_array_equal(prog.run(x=x, s=np.array([0.5], np.float32))["q"],
                                          quantize_ref(x, 0.5, 0, np.uint8))
    with mkcache.Graph() as g:
        xi = g.input("x", (2, 3, 4))
        g.output(g.quantize(xi, scales, fast=False), "q")
        with pytest.raises(mkcache.Error, match="multiplies by 1 / scale"):
            g.compile(impl={"quantize": "onednn"})
