"""ONNX's quantized operators imported (QuantizeLinear, DequantizeLinear,
QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger, the QDQ pattern,
casts to and from the 8- and 16-bit dtypes), checked against onnxruntime on
models built with onnx.helper and on models onnxruntime's quantizer wrote.
Requantized 8-bit results may differ from onnxruntime's by 1 where y / scale
lands near a tie (the scales are multiplied in another order); the tests use
7-bit weights (or reduce_range) so that oneDNN runs them on every CPU, and
check the refusal of 8-bit weights on CPUs without VNNI."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mkcache  # noqa: E402
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
    # int8 weights given at run time, 3 groups.
    w = rng.integers(-128, 128, (6, 1, 3, 3)).astype(np.int8)
    m = qlinear_conv_model(w, 0.01, np.array(0, np.int8), None, np.uint8, np.uint8, 1,
                           [1, 1, 1, 1], group=3, weights_input=True)
    (got,), (want,) = both(m, {"x": x, "w": w})
    assert_within_one(got, want)


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


def test_conv_integer_refused_where_float32_may_round_the_sums():
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    m = model([node], [helper.make_tensor_value_info("x", U8, [1, 512, 3, 3]),
                       helper.make_tensor_value_info("w", U8, [4, 512, 3, 3])],
              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], opset=10)
    with pytest.raises(mkcache.UnsupportedError, match="2\\^24"):
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
