"""ONNX's quantized operators imported (QuantizeLinear, DequantizeLinear,
QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger, the QDQ pattern,
casts to and from the 8- and 16-bit dtypes), checked against onnxruntime on
models built with onnx.helper and on models onnxruntime's quantizer wrote.
Requantized 8-bit results may differ from onnxruntime's by 1 where y / scale
lands near a tie (the scales are multiplied in another order); the tests use
7-bit weights (or reduce_range) so that oneDNN runs them on every CPU, and
check the refusal of 8-bit weights on CPUs without VNNI."""
import functools
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mkcache  # noqa: E402
import mkcache.models  # noqa: E402
import mkcache.onnx  # noqa: E402
from mkcache.onnx import _patterns  # noqa: E402

NO_VNNI = mkcache.build_info()["isa"] in ("sse41", "avx", "avx2", "avx512_core")
U8, S8, F32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def both(m, feeds):
    """(mkcache's outputs, onnxruntime's), in the model's output order."""
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    # A scalar input runs as [1] in a program.
    out = mkcache.onnx.load(m).run(**{k: v.reshape(1) if v.ndim == 0 else v
                                      for k, v in feeds.items()})
    return [out[o.name] for o in m.graph.output], want


def assert_within_one(got, want):
    assert got.dtype == want.dtype
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, diff.max()
    assert (diff == 0).mean() > 0.95


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def qlinear_conv_model(w, w_scale, w_zero, bias, x_dtype, y_dtype, stride, pads, group=1,
                       weights_input=False):
    elem = {np.uint8: U8, np.int8: S8}
    inits = [init("xs", np.float32(0.02)), init("xz", np.array(7 if x_dtype == np.uint8 else -3,
                                                                  x_dtype)),
             init("ws", np.asarray(w_scale, np.float32)), init("wz", w_zero),
             init("ys", np.float32(0.05)),
             init("yz", np.array(120 if y_dtype == np.uint8 else 5, y_dtype))]
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    graph_inputs = [helper.make_tensor_value_info("x", elem[x_dtype], [2, w.shape[1] * group,
                                                                      11, 9])]
    if weights_input:
        graph_inputs.append(helper.make_tensor_value_info("w", elem[w.dtype.type], w.shape))
    else:
        inits.append(init("w", w))
    if bias is not None:
        inits.append(init("b", bias))
        ins.append("b")
    node = helper.make_node("QLinearConv", ins, ["y"], strides=[stride, stride], pads=pads,
                            group=group)
    return model([node], graph_inputs, [helper.make_tensor_value_info("y", elem[y_dtype], None)],
                 inits, opset=10)


@pytest.mark.parametrize("x_dtype,y_dtype,per_channel,stride,pads", [
    (np.uint8, np.uint8, True, 2, [1, 0, 2, 1]),
    (np.uint8, np.uint8, False, 1, [1, 1, 1, 1]),
    (np.int8, np.int8, True, 2, [0, 0, 0, 0]),
])
def test_qlinear_conv_constant_int8_weights(x_dtype, y_dtype, per_channel, stride, pads):
    rng = np.random.default_rng(1)
    o, c = 5, 3
    w = rng.integers(-63, 64, (o, c, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.005, 0.02, o) if per_channel else 0.01
    bias = rng.integers(-500, 500, o).astype(np.int32)
    m = qlinear_conv_model(w, ws, np.zeros(o if per_channel else (), np.int8), bias, x_dtype,
                           y_dtype, stride, pads)
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, (2, c, 11, 9)).astype(x_dtype)
    (got,), (want,) = both(m, {"x": x})
    assert got.shape == want.shape
    assert_within_one(got, want)


def test_qlinear_conv_through_float_uint8_weights_groups_and_run_time_weights():
    rng = np.random.default_rng(2)
    # uint8 weights with a zero point per output channel: the float route.
    w = rng.integers(0, 256, (6, 3, 3, 3)).astype(np.uint8)
    m = qlinear_conv_model(w, rng.uniform(0.005, 0.02, 6), rng.integers(100, 150, 6).astype(
        np.uint8), rng.integers(-300, 300, 6).astype(np.int32), np.uint8, np.uint8, 2,
        [1, 1, 1, 1])
    x = rng.integers(0, 256, (2, 3, 11, 9)).astype(np.uint8)
    (got,), (want,) = both(m, {"x": x})
    assert_within_one(got, want)
    # int8 weights given at run time, 3 groups. The full int8 range: on a CPU
    # without VNNI onnxruntime's u8 x s8 kernels add products in pairs into
    # saturating 16 bits (a result 66 off was seen), so the reference here is
    # float64 numpy, onnxruntime only where it is exact.
    w = rng.integers(-128, 128, (6, 1, 3, 3)).astype(np.int8)
    m = qlinear_conv_model(w, 0.01, np.array(0, np.int8), None, np.uint8, np.uint8, 1,
                           [1, 1, 1, 1], group=3, weights_input=True)
    (got,), (from_ort,) = both(m, {"x": x, "w": w})
    xp = np.pad((x.astype(np.float64) - 7) * 0.02, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros(got.shape)
    for o in range(6):  # two outputs per group, one input channel each
        for i in range(3):
            for j in range(3):
                y[:, o] += xp[:, o // 2, i:i + 11, j:j + 9] * (w[o, 0, i, j] * 0.01)
    want = np.clip(np.round(y / 0.05) + 120, 0, 255).astype(np.uint8)
    assert_within_one(got, want)
    if onnxruntime_u8s8_is_exact():
        assert_within_one(from_ort, want)


def test_qlinear_matmul_constant_and_activation_weights():
    rng = np.random.default_rng(3)
    k, n = 13, 7
    inits = [init("as", np.float32(0.03)), init("az", np.uint8(9)),
             init("bs", rng.uniform(0.01, 0.02, n).astype(np.float32)),
             init("bz", np.zeros(n, np.int8)), init("ys", np.float32(0.1)),
             init("yz", np.uint8(100)),
             init("b", rng.integers(-63, 64, (k, n)).astype(np.int8))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    m = model([node], [helper.make_tensor_value_info("a", U8, [2, 3, k])],
              [helper.make_tensor_value_info("y", U8, None)], inits, opset=10)
    a = rng.integers(0, 256, (2, 3, k)).astype(np.uint8)
    (got,), (want,) = both(m, {"a": a})
    assert_within_one(got, want)
    # Both operands activations.
    inits = [i for i in inits if i.name not in ("b", "bs", "bz")] + [
        init("bs", np.float32(0.02)), init("bz", np.uint8(130))]
    m = model([node], [helper.make_tensor_value_info("a", U8, [2, 3, k]),
                       helper.make_tensor_value_info("b", U8, [2, k, n])],
              [helper.make_tensor_value_info("y", U8, None)], inits, opset=10)
    b = rng.integers(0, 256, (2, k, n)).astype(np.uint8)
    (got,), (want,) = both(m, {"a": a, "b": b})
    assert_within_one(got, want)


def test_conv_integer_and_matmul_integer_are_exact():
    rng = np.random.default_rng(4)
    w = rng.integers(0, 256, (5, 3, 3, 3)).astype(np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1],
                            strides=[2, 2])
    m = model([node], [helper.make_tensor_value_info("x", U8, [2, 3, 11, 9])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
              [init("w", w), init("xz", np.uint8(100)), init("wz", np.uint8(128))], opset=10)
    x = rng.integers(0, 256, (2, 3, 11, 9)).astype(np.uint8)
    (got,), (want,) = both(m, {"x": x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    m = model([node], [helper.make_tensor_value_info("a", S8, [2, 4, 17]),
                       helper.make_tensor_value_info("b", S8, [17, 5])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
              [init("az", np.int8(-5)), init("bz", np.int8(3))], opset=10)
    a = rng.integers(-128, 128, (2, 4, 17)).astype(np.int8)
    b = rng.integers(-128, 128, (17, 5)).astype(np.int8)
    (got,), (want,) = both(m, {"a": a, "b": b})
    np.testing.assert_array_equal(got, want)


def test_integer_sums_past_float32_exactness_split_along_the_reduction():
    # Full-range run-time values, 512 channels of 3x3 (sums up to 600
    # million) and an inner dim of 3000 (up to 190 million): float32 would
    # round them; the sums of runs below 2^24 each are exact, added as int32.
    rng = np.random.default_rng(9)
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    m = model([node], [helper.make_tensor_value_info("x", U8, [2, 512, 3, 4]),
                       helper.make_tensor_value_info("w", U8, [4, 512, 3, 3])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], opset=10)
    x = rng.integers(200, 256, (2, 512, 3, 4)).astype(np.uint8)
    w = rng.integers(200, 256, (4, 512, 3, 3)).astype(np.uint8)
    (got,), (want,) = both(m, {"x": x, "w": w})
    assert want.max() > 2 ** 27
    np.testing.assert_array_equal(got, want)
    m = model([node], [helper.make_tensor_value_info("x", U8, [2, 512, 3, 4])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [init("w", w)],
              opset=10)  # the weights constant: each run's part made at load
    (got,), (want,) = both(m, {"x": x})
    np.testing.assert_array_equal(got, want)
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    b = rng.integers(-128, 128, (3000, 5)).astype(np.int8)
    b[:, 0] = -128  # a column at the bound
    m = model([node], [helper.make_tensor_value_info("a", U8, [3, 3000])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
              [init("b", b), init("az", np.uint8(0))], opset=10)
    a = np.full((3, 3000), 255, np.uint8)
    a[1] = rng.integers(0, 256, 3000)
    (got,), (from_ort,) = both(m, {"a": a})
    want = a.astype(np.int64) @ b.astype(np.int64)  # onnxruntime's is exact only with VNNI
    assert -want.min() > 2 ** 26
    np.testing.assert_array_equal(got, want)
    if onnxruntime_u8s8_is_exact():
        np.testing.assert_array_equal(from_ort, want)
    # A grouped convolution is not split.
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], group=2)
    m = model([node], [helper.make_tensor_value_info("x", U8, [1, 1024, 3, 3]),
                       helper.make_tensor_value_info("w", U8, [4, 512, 3, 3])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], opset=10)
    with pytest.raises(mkcache.UnsupportedError, match="grouped convolution.*2\\^24"):
        mkcache.onnx.load(m)


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_quantize_dequantize_per_tensor_and_per_axis(opset):
    rng = np.random.default_rng(5)
    x = (rng.normal(0, 3, (2, 5, 3, 4)) * 4).astype(np.float32)
    x[0, 0, 0, :2] = [0.25, 0.75]  # exact ties (scale 0.5): to even
    per_axis = opset >= 13
    scale = np.linspace(0.05, 0.5, 5).astype(np.float32) if per_axis else np.float32(0.5)
    zero = (np.arange(5) * 10 - 20).astype(np.int8) if per_axis else np.int8(3)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    if opset < 13:
        for n in nodes:
            del n.attribute[:]
    m = model(nodes, [helper.make_tensor_value_info("x", F32, x.shape)],
              [helper.make_tensor_value_info("q", S8, None),
               helper.make_tensor_value_info("y", F32, None)],
              [init("s", scale), init("z", zero)], opset=opset)
    (q, y), (wq, wy) = both(m, {"x": x})
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_allclose(y, wy, rtol=1e-6)
    # Scale and zero point given at run time: uint8, no zero point -> 0.
    m = model([helper.make_node("QuantizeLinear", ["x", "s"], ["q"])],
              [helper.make_tensor_value_info("x", F32, x.shape),
               helper.make_tensor_value_info("s", F32, [])],
              [helper.make_tensor_value_info("q", U8, None)], opset=opset)
    (q,), (wq,) = both(m, {"x": x, "s": np.array(0.25, np.float32)})
    np.testing.assert_array_equal(q, wq)


def test_quantize_refusals_are_clear():
    x = helper.make_tensor_value_info("x", F32, [2, 4])
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=2)],
              [x], [helper.make_tensor_value_info("q", U8, None)],
              [init("s", np.ones((2, 2), np.float32)), init("z", np.zeros((2, 2), np.uint8))])
    with pytest.raises(mkcache.UnsupportedError, match="block quantization"):
        mkcache.onnx.load(m)
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], [x],
              [helper.make_tensor_value_info("q", TensorProto.INT16, None)],
              [init("s", np.float32(1)), init("z", np.int16(0))])
    with pytest.raises(mkcache.UnsupportedError, match="int16.*uint8 and int8"):
        mkcache.onnx.load(m)
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)], [x],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, None)])
    with pytest.raises(mkcache.UnsupportedError, match="a cast to ONNX element type 17"):
        mkcache.onnx.load(m)
    # An Add of uint8 data: a model this version does not take.
    u = helper.make_tensor_value_info("u", U8, [2, 4])
    m = model([helper.make_node("Add", ["u", "u"], ["y"])], [u],
              [helper.make_tensor_value_info("y", U8, None)])
    with pytest.raises(mkcache.UnsupportedError, match="uint8; binary takes float32"):
        mkcache.onnx.load(m)


@pytest.mark.parametrize("to", [TensorProto.INT8, TensorProto.UINT8, TensorProto.FLOAT16])
def test_casts_to_and_from_the_narrow_dtypes(to):
    rng = np.random.default_rng(6)
    x = (rng.normal(0, 60, (3, 7))).astype(np.float32)
    if to != TensorProto.FLOAT16:  # in range: ONNX leaves out-of-range casts undefined
        x = np.clip(x, -128 if to == TensorProto.INT8 else 0, 127 if to == TensorProto.INT8
                    else 255)
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=to),
             helper.make_node("Cast", ["c"], ["y"], to=F32)]
    m = model(nodes, [helper.make_tensor_value_info("x", F32, x.shape)],
              [helper.make_tensor_value_info("c", to, None),
               helper.make_tensor_value_info("y", F32, None)])
    (c, y), (wc, wy) = both(m, {"x": x})
    assert c.dtype == wc.dtype
    np.testing.assert_array_equal(c, wc)
    np.testing.assert_array_equal(y, wy)


def test_bfloat16_cast_through_the_backend():
    import ml_dtypes  # noqa: PLC0415 (onnx's dependency)

    import mkcache.onnx.backend as backend  # noqa: PLC0415
    x = np.random.default_rng(7).normal(0, 100, (4, 5)).astype(np.float32)
    m = model([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
               helper.make_node("Cast", ["b"], ["y"], to=F32)],
              [helper.make_tensor_value_info("x", F32, x.shape)],
              [helper.make_tensor_value_info("b", TensorProto.BFLOAT16, x.shape),
               helper.make_tensor_value_info("y", F32, x.shape)])
    b, y = backend.prepare(m).run([x])
    assert b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(y, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_full_range_weights_on_every_cpu():
    # Without VNNI oneDNN's int8 kernels need 7-bit weights: full 8-bit
    # constant weights then go the float32 route, with the same results.
    rng = np.random.default_rng(8)
    w = np.full((4, 8, 3, 3), 127, np.int8)
    w[1] = -128
    m = qlinear_conv_model(w, 0.001, np.zeros((), np.int8), None, np.uint8, np.uint8, 1,
                           [1, 1, 1, 1])
    x = rng.integers(0, 256, (2, 8, 11, 9)).astype(np.uint8)
    (got,), (want,) = both(m, {"x": x})
    assert_within_one(got, want)
    got = mkcache.onnx.load(m, impl={"quantized_conv2d": "reference"}).run(x=x)["y"]
    assert_within_one(got, want)


# ------------------------------------------------- onnxruntime's quantizer

def small_cnn(seed=0):
    """Conv 3->5 (3x3, pad 1), Relu, conv 5->7 (3x3, stride 2, pad 1),
    Relu, conv 7->6 (1x1), flatten, MatMul to 10, Add of a bias."""
    rng = np.random.default_rng(seed)
    inits = []

    def t(name, a):
        inits.append(init(name, a.astype(np.float32)))
        return name
    nodes = [
        helper.make_node("Conv", ["x", t("w1", rng.normal(0, 0.3, (5, 3, 3, 3))),
                                  t("b1", rng.normal(0, 0.1, 5))], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", t("w2", rng.normal(0, 0.2, (7, 5, 3, 3))),
                                  t("b2", rng.normal(0, 0.1, 7))], ["c2"], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", t("w3", rng.normal(0, 0.3, (6, 7, 1, 1))),
                                  t("b3", rng.normal(0, 0.1, 6))], ["c3"]),
        helper.make_node("Reshape", ["c3", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", t("w4", rng.normal(0, 0.1, (150, 10)))], ["m"]),
        helper.make_node("Add", ["m", t("b4", rng.normal(0, 0.1, 10))], ["y"]),
    ]
    inits.append(init("shape", np.array([-1, 150], np.int64)))
    return model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 3, 9, 9])],
                 [helper.make_tensor_value_info("y", F32, ["N", 10])], inits, opset=17)


@pytest.mark.parametrize("fmt", ["QOperator", "QDQ"])
def test_onnxruntime_quantize_static_cnn(tmp_path, fmt):
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.default_rng(i).normal(0, 1, (2, 3, 9, 9))
                                  .astype(np.float32)} for i in range(8)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(small_cnn(), src)
    quantization.quantize_static(
        str(src), str(dst), Reader(), quant_format=getattr(quantization.QuantFormat, fmt),
        per_channel=True, activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8, reduce_range=True,
        op_types_to_quantize=["Conv", "MatMul"])
    q = onnx.load(dst)
    ops = [n.op_type for n in q.graph.node]
    if fmt == "QOperator":
        assert ops.count("QLinearConv") == 3 and ops.count("QLinearMatMul") == 1
    else:  # every quantized Conv and MatMul folded into one quantized operator
        nodes, count = _patterns.fold(q.graph.node,
                                      {i.name: numpy_helper.to_array(i) for i in
                                       q.graph.initializer}, ["y"])
        assert count == 4
        assert not {"Conv", "MatMul"} & {n.op_type for n in nodes}
    x = np.random.default_rng(99).normal(0, 1, (64, 3, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = mkcache.onnx.load(str(dst)).run(x=x)["y"]
    # The results are dequantized 8-bit values: near-ties may move one step
    # of the last layer's output scale.
    add = next(n for n in q.graph.node if n.op_type == "Add")
    last = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and
                n.output[0] in add.input)
    step = float(numpy_helper.to_array(next(i for i in q.graph.initializer
                                            if i.name == last.input[1])))
    assert np.abs(got - want).max() <= 2 * step + 1e-6
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.95


# ------------------------------------------------- DynamicQuantizeLinear

def dynamic_quantize_model(shape, opset=13, x_type=F32):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"], name="dq")
    return model([node], [helper.make_tensor_value_info("x", x_type, shape)],
                 [helper.make_tensor_value_info("y", U8, None),
                  helper.make_tensor_value_info("scale", F32, None),
                  helper.make_tensor_value_info("zero", U8, None)], opset=opset)


def _ties():
    # Range 255, so scale 1: halves are exact ties of y (to even), and the
    # zero point round(2.5) a tie too (2).
    return np.array([[-2.5, 252.5, 0.5, 1.5, -0.5, 3.5, 100.5, 251.5]], np.float32)


DYNAMIC_INPUTS = {
    "normal": lambda rng: rng.normal(0.3, 2, (3, 5, 7)).astype(np.float32),
    "positive only": lambda rng: rng.uniform(1, 9, (2, 11)).astype(np.float32),
    "negative only": lambda rng: -rng.uniform(1e-3, 4e-3, (4, 3, 2, 5)).astype(np.float32),
    "zeros": lambda rng: np.zeros((3, 4), np.float32),
    "ties": lambda rng: _ties(),
    "one element": lambda rng: np.full((1, 1), -7.25, np.float32),
    "tiny range": lambda rng: np.array([[1e-40, -3e-40, 2e-41]], np.float32),
    "wide range": lambda rng: np.array([[3e37, -1e38, 1.0, -1.0]], np.float32),
}


@pytest.mark.parametrize("case", list(DYNAMIC_INPUTS))
@pytest.mark.parametrize("opset", [11, 13, 21])
def test_dynamic_quantize_linear_matches_the_reference_exactly(case, opset):
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    x = DYNAMIC_INPUTS[case](np.random.default_rng(10))
    m = dynamic_quantize_model([None] * x.ndim, opset)
    got = mkcache.onnx.load(m).run(x=x)
    y, scale, zero = ReferenceEvaluator(m).run(None, {"x": x})
    assert got["y"].dtype == np.uint8 and got["zero"].dtype == np.uint8
    np.testing.assert_array_equal(got["y"], y)
    assert got["scale"].shape == (1,) and got["scale"][0].tobytes() == scale.tobytes()
    assert got["zero"][0] == zero
    if case == "ties":
        np.testing.assert_array_equal(y, [[0, 254, 2, 4, 2, 6, 102, 254]])
        assert zero == 2 and scale == 1
    # onnxruntime agrees, but for the scale of an input of zeros (its 1
    # against the reference's 1/255; y and the zero point are 0 either way).
    (wy, wscale, wzero) = ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got["y"], wy)
    assert got["zero"][0] == wzero
    assert got["scale"][0] == (wscale / 255 if case == "zeros" else wscale)


def test_dynamic_quantize_linear_ties_and_sizes_against_the_reference():
    # Many ranges and sizes, in one program with the dims bound at run time;
    # a third of the inputs multiples of half a scale (ties).
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    rng = np.random.default_rng(11)
    m = dynamic_quantize_model([None, 3, None])
    reference = ReferenceEvaluator(m)
    with mkcache.onnx.load(m) as prog:
        for i in range(60):
            shape = (int(rng.integers(1, 4)), 3, int(rng.integers(1, 300)))
            x = rng.normal(rng.normal(0, 2), 10 ** rng.uniform(-5, 5), shape).astype(np.float32)
            if i % 3 == 0:
                hi, lo = np.float32(rng.uniform(0.1, 9)), np.float32(-rng.uniform(0, 9))
                step = (hi - lo) / np.float32(255)
                x = (rng.integers(-600, 600, shape) * np.float32(0.5) * step).astype(np.float32)
                x.reshape(-1)[:2] = hi, lo
            got = prog.run(x=x)
            y, scale, zero = reference.run(None, {"x": x})
            np.testing.assert_array_equal(got["y"], y)
            assert got["scale"][0].tobytes() == scale.tobytes() and got["zero"][0] == zero


def test_dynamic_quantize_linear_of_a_constant_is_computed_at_load():
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    c = np.random.default_rng(12).normal(0, 1, (4, 6)).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["c"], ["q", "s", "z"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Add", ["x", "d"], ["y"])]
    m = model(nodes, [helper.make_tensor_value_info("x", F32, [4, 6])],
              [helper.make_tensor_value_info("y", F32, None)], [init("c", c)], opset=21)
    x = np.ones((4, 6), np.float32)
    got = mkcache.onnx.load(m).run(x=x)["y"]
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)
    # A constant with a NaN: refused at load, as a run would fail.
    c[1, 2] = np.nan
    m.graph.initializer[0].CopyFrom(init("c", c))
    with pytest.raises(mkcache.UnsupportedError, match="scale is not finite and > 0"):
        mkcache.onnx.load(m)


def test_dynamic_quantize_linear_bad_input():
    # Not float32: refused when the model is loaded.
    with pytest.raises(mkcache.UnsupportedError,
                       match=r"DynamicQuantizeLinear 'dq'.*an input of float16 "
                             r"\(DynamicQuantizeLinear takes float32\)"):
        mkcache.onnx.load(dynamic_quantize_model([2, 3], x_type=TensorProto.FLOAT16))
    with pytest.raises(mkcache.UnsupportedError, match="an input of int32"):
        mkcache.onnx.load(dynamic_quantize_model([2, 3], x_type=TensorProto.INT32))
    # A NaN or an infinity, or a range float32 cannot hold: no scale the
    # results can be given by (ONNX leaves them undefined), an error.
    with mkcache.onnx.load(dynamic_quantize_model([None])) as prog:
        for x in ([1.0, np.nan, -1.0], [np.inf, 2.0], [-np.inf], [3e38, -3e38]):
            with pytest.raises(mkcache.InvalidArgumentError,
                               match="scale.*every scale must be finite and > 0"):
                prog.run(x=np.array(x, np.float32))
        # The program runs on after them.
        assert prog.run(x=np.array([2.0, -1.0], np.float32))["zero"][0] == 85


# ------------------------------------- onnxruntime's quantize_dynamic (QOperator)
# DynamicQuantizeLinear before each quantized MatMul or Conv, then
# MatMulInteger / ConvInteger, Cast to float, Mul by the product of the
# scales and Add of the bias: the same integer arithmetic in mkcache and in
# onnxruntime (which fuses the MatMul chains into its DynamicQuantizeMatMul
# and MatMulIntegerToFloat kernels, and Add with LayerNormalization).

@functools.lru_cache(maxsize=None)
def onnxruntime_u8s8_is_exact() -> bool:
    """Whether onnxruntime's uint8 x int8 products are exact on this CPU.
    Without VNNI (an AVX2-only CPU, AVX-512 without VNNI) its kernels add
    the products in pairs into saturating 16 bits, so 255 * -128 + 255 * -128
    comes out as -32768: its documentation advises 7-bit weights there."""
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    m = model([node], [helper.make_tensor_value_info("a", U8, [1, 2])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
              [init("b", np.full((2, 1), -128, np.int8))], opset=10)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": np.full((1, 2), 255, np.uint8)})[0]
    return int(y[0, 0]) == -65280


def quantize_dynamic(tmp_path, m, per_channel, name="q", **options):
    """`m` quantized by onnxruntime's quantize_dynamic with int8 weights;
    7-bit ones (reduce_range) where onnxruntime's products are not exact
    otherwise, so that its results stay the reference."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    src, dst = tmp_path / f"{name}_float.onnx", tmp_path / f"{name}.onnx"
    onnx.save(m, src)
    options.setdefault("reduce_range", not onnxruntime_u8s8_is_exact())
    quantization.quantize_dynamic(str(src), str(dst), per_channel=per_channel,
                                  weight_type=quantization.QuantType.QInt8, **options)
    return str(dst)


def session(path, optimized=True):
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_linear_is_exact(tmp_path, per_channel):
    # One MatMul (an inner dim of 3072, BERT-base's FFN output) and its
    # bias: the int32 sums are exact (two runs of the inner dim here), the
    # float steps after them the same operations in the same order, so
    # mkcache's results are onnxruntime's bit for bit, fused or not.
    rng = np.random.default_rng(13)
    k, n = 3072, 40
    m = model([helper.make_node("MatMul", ["x", "w"], ["m"]),
               helper.make_node("Add", ["m", "b"], ["y"])],
              [helper.make_tensor_value_info("x", F32, ["batch", "seq", k])],
              [helper.make_tensor_value_info("y", F32, None)],
              [init("w", rng.normal(0, k ** -0.5, (k, n)).astype(np.float32)),
               init("b", rng.normal(0, 0.1, n).astype(np.float32))], opset=17)
    path = quantize_dynamic(tmp_path, m, per_channel)
    ops = [node.op_type for node in onnx.load(path).graph.node]
    assert "DynamicQuantizeLinear" in ops and "MatMulInteger" in ops
    fused, plain = session(path), session(path, optimized=False)
    with mkcache.onnx.load(path) as prog:
        for shape in ((2, 5, k), (1, 3, k)):
            x = rng.normal(0, 1, shape).astype(np.float32)
            got = prog.run(x=x)["y"]
            np.testing.assert_array_equal(got, plain.run(None, {"x": x})[0])
            np.testing.assert_array_equal(got, fused.run(None, {"x": x})[0])


def assert_near_onnxruntime(got, want, reference):
    """mkcache's result of a quantize_dynamic model beside onnxruntime's.
    Both compute the same integers, but the float operators between the
    quantized ones (softmax, erf, layer norm, ...) round differently in
    their last bits. Where such a difference moves a value of a
    DynamicQuantizeLinear across a rounding boundary, or moves the tensor's
    max or min and so its scale, one quantized input differs by one step:
    the token that reads it differs by about that step times a weight (BERT
    layer, seed 0: one token of 18, by 9e-4, 1.2% of the quantization
    error; with the 7-bit weights of a CPU without VNNI, by 8.5e-3, 6.7%),
    and through the attention of later layers its whole sequence. So: most
    values within 1e-5 of the result's magnitude (a quarter at least, for
    one such sequence of a batch of 2), none past 10% of what quantizing
    itself costs (onnxruntime's result against the float one), and no
    farther from the float result than onnxruntime's."""
    assert got.shape == want.shape
    diff = np.abs(got.astype(np.float64) - want)
    agree = (diff <= 1e-5 * float(np.abs(want).max())).mean()
    assert agree >= 0.25, f"only {agree:.0%} of the values agree"
    quantization_error = float(np.abs(want - reference).max())
    assert diff.max() <= 0.1 * quantization_error, (diff.max(), quantization_error)
    assert np.abs(got - reference).max() <= 1.01 * quantization_error


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_bert_layer(tmp_path, per_channel):
    """BERT-base's encoder layer (hidden 768, FFN 3072) quantized by
    quantize_dynamic (int8 weights, per tensor or per output channel),
    batch and sequence bound at run time, two sizes through one program."""
    layer = mkcache.models.BertLayer(0)
    path = quantize_dynamic(tmp_path, layer.onnx_model(), per_channel)
    ops = [node.op_type for node in onnx.load(path).graph.node]
    assert ops.count("DynamicQuantizeLinear") == 4 and ops.count("MatMulInteger") == 6
    rng = np.random.default_rng(14)
    sess = session(path)
    with mkcache.onnx.load(path) as prog:
        for shape in ((2, 9, 768), (1, 5, 768)):
            x = rng.normal(0, 1, shape).astype(np.float32)
            want = sess.run(None, {"x": x})[0]
            assert_near_onnxruntime(prog.run(x=x)["y"], want, layer.reference(x))


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_transformers_bert(tmp_path, per_channel):
    """transformers' BertModel (2 layers, hidden 64, 4 heads, intermediate
    128, vocabulary 100; random weights) exported by torch.onnx's
    TorchScript exporter, then quantize_dynamic: every MatMul of the
    encoder and the pooler through MatMulInteger, the embedding tables int8
    through DequantizeLinear."""
    torch = pytest.importorskip("torch")
    from torch_support import import_transformers  # noqa: PLC0415
    transformers = import_transformers()
    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=100, max_position_embeddings=64, type_vocab_size=2,
        attn_implementation="eager")).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    rng = np.random.default_rng(15)

    def feeds(batch, seq):
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq - 2:] = 0  # the last sequence padded
        return {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64),
                "attention_mask": mask}

    names, outputs = ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]
    src = tmp_path / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), tuple(torch.from_numpy(v) for v in feeds(2, 7).values()),
                          str(src), input_names=names, output_names=outputs, dynamo=False,
                          opset_version=17,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    path = quantize_dynamic(tmp_path, onnx.load(src), per_channel)
    ops = [node.op_type for node in onnx.load(path).graph.node]
    assert ops.count("MatMulInteger") == 13 and "DynamicQuantizeLinear" in ops
    sess, float_sess = session(path), session(str(src))
    with mkcache.onnx.load(path) as prog:
        for shape in ((2, 7), (3, 11)):
            f = feeds(*shape)
            got = prog.run(**f)
            for name, want, reference in zip(outputs, sess.run(None, f), float_sess.run(None, f)):
                assert_near_onnxruntime(got[name], want, reference)


def test_quantize_dynamic_cnn(tmp_path):
    """small_cnn quantized by quantize_dynamic per channel: its convolutions
    through ConvInteger, its MatMul through MatMulInteger (onnxruntime fuses
    that one into DynamicQuantizeMatMul); no float operator between the
    quantized ones but Relu, so the results are onnxruntime's exactly."""
    path = quantize_dynamic(tmp_path, small_cnn(), True, op_types_to_quantize=["Conv", "MatMul"])
    ops = [node.op_type for node in onnx.load(path).graph.node]
    if "ConvInteger" not in ops:
        pytest.skip("this onnxruntime's quantize_dynamic leaves Conv in float")
    assert ops.count("ConvInteger") == 3 and ops.count("DynamicQuantizeLinear") == 4
    rng = np.random.default_rng(16)
    sess = session(path)
    with mkcache.onnx.load(path) as prog:
        for n in (5, 1):
            x = rng.normal(0, 1, (n, 3, 9, 9)).astype(np.float32)
            np.testing.assert_array_equal(prog.run(x=x)["y"], sess.run(None, {"x": x})[0])
