"""ONNX models as programs (mkcache.onnx.load): each converter on small
models built with onnx.helper (odd sizes, batch > 1, both opset forms where
ONNX changed an operator), checked against onnx's reference evaluator and
ONNX Runtime; whole models against ONNX Runtime; bad files and unsupported
operators refused before anything runs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import mkcache  # noqa: E402
import mkcache.onnx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

RNG = np.random.default_rng(41)
F = TensorProto.FLOAT


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, inputs, outputs, initializers=(), opset=17):
    """A model of `nodes`; inputs/outputs as (name, dims) (float32)."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, F, d) for n, d in inputs],
        [helper.make_tensor_value_info(n, F, d) for n, d in outputs],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)  # what onnxruntime reads
    # Outputs' shapes are left to shape inference, which the checker does
    # not run: check the inferred model.
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(m))
    return m


def check(m, feeds, rtol=1e-5, evaluator=True, **load_options):
    """mkcache's outputs against the reference evaluator's (unless told:
    it does not implement every opset's semantics) and, when installed, ONNX
    Runtime's, relative to each output's largest value. A result of no dims
    comes out as [1]."""
    with mkcache.onnx.load(m, **load_options) as prog:
        got = prog.run(**feeds)
    names = [o.name for o in m.graph.output]
    references = [ReferenceEvaluator(m).run(None, feeds)] if evaluator else []
    try:
        import onnxruntime as ort  # noqa: PLC0415
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        references.append(sess.run(None, feeds))
    except ImportError:
        if not evaluator:
            pytest.skip("onnxruntime is not installed")
    for ref in references:
        for name, w in zip(names, ref):
            g = got[name]
            w = w.reshape(1) if w.ndim == 0 else w
            assert g.shape == w.shape, (name, g.shape, w.shape)
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(g, w, rtol=0, atol=rtol * scale, err_msg=name)
    return got


# ------------------------------------------------------------ convolutions

@pytest.mark.parametrize("attrs", [
    dict(pads=[1, 1, 1, 1]),
    dict(strides=[2, 1], pads=[0, 2, 1, 0], dilations=[1, 2]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 3]),
    dict(auto_pad="VALID", group=3),
])
def test_conv(attrs):
    groups = attrs.get("group", 1)
    w = rand(6, 6 // groups, 3, 3, scale=0.3)
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
              [("x", [2, 6, 11, 9])], [("y", None)], [("w", w), ("b", rand(6))])
    check(m, {"x": rand(2, 6, 11, 9)})


def test_conv3d_and_dynamic_batch():
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 1, 0, 1]),
               helper.make_node("Relu", ["y"], ["z"])],
              [("x", ["N", 3, 5, 6, 7])], [("z", None)], [("w", rand(4, 3, 3, 2, 3, scale=0.3))])
    with mkcache.onnx.load(m) as prog:
        for n in (1, 3):
            x = rand(n, 3, 5, 6, 7)
            want = ReferenceEvaluator(m).run(None, {"x": x})[0]
            np.testing.assert_allclose(prog.run(x=x)["z"], want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 3], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2],
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[2, 3], dilations=[3, 2], pads=[1, 2, 0, 1])),
    ("MaxPool", dict(kernel_shape=[3, 2], dilations=[2, 2], strides=[2, 1], ceil_mode=1)),
])
def test_pools(op, attrs):
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)],
              [("x", [2, 5, 11, 10])], [("y", None)])
    check(m, {"x": rand(2, 5, 11, 10)})


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], pads=[1, 0, 0, 1]),
    dict(strides=[2, 3], output_padding=[1, 2], dilations=[1, 2]),
    dict(strides=[2, 2], output_shape=[13, 17]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[3, 2], auto_pad="SAME_LOWER", group=2),
])
def test_conv_transpose(attrs):
    groups = attrs.get("group", 1)
    w = rand(6, 4, 3, 3, scale=0.3)  # [C_in, C_out / groups, k, k]
    m = model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
              [("x", [2, 6, 7, 8])], [("y", None)], [("w", w), ("b", rand(4 * groups))])
    # onnx's reference evaluator fails on several of these: ONNX Runtime alone.
    check(m, {"x": rand(2, 6, 7, 8)}, evaluator=False)


@pytest.mark.parametrize("node", [
    ("Conv", dict(strides=[2], pads=[1, 2], dilations=[2], group=3)),
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("AveragePool", dict(kernel_shape=[2], strides=[1], pads=[0, 1], count_include_pad=1)),
])
def test_one_dimensional_windows(node):
    op, attrs = node
    inputs = ["x", "w"] if op == "Conv" else ["x"]
    m = model([helper.make_node(op, inputs, ["y"], **attrs)], [("x", [2, 6, 11])], [("y", None)],
              [("w", rand(9, 2, 3, scale=0.3))] if op == "Conv" else [])
    check(m, {"x": rand(2, 6, 11)})


def test_prelu_selu_softsign_and_a_3d_batch_norm():
    c = helper.make_node
    m = model([c("PRelu", ["x", "slope"], ["p"]), c("Selu", ["x"], ["s"], alpha=1.5, gamma=0.9),
               c("Softsign", ["x"], ["t"]),
               c("BatchNormalization", ["x", "g", "b", "mu", "var"], ["n"])],
              [("x", [2, 5, 7])], [("p", None), ("s", None), ("t", None), ("n", None)],
              [("slope", rand(5, 1)), ("g", rand(5)), ("b", rand(5)), ("mu", rand(5)),
               ("var", np.abs(rand(5)) + np.float32(0.5))])
    check(m, {"x": rand(2, 5, 7, scale=2)})


def test_tile_and_instance_normalization():
    c = helper.make_node
    m = model([c("Tile", ["x", "reps"], ["t"]),
               c("InstanceNormalization", ["x", "s", "b"], ["n"], epsilon=1e-3)],
              [("x", [2, 3, 4, 5])], [("t", None), ("n", None)],
              [("reps", np.array([1, 2, 3, 2], np.int64)), ("s", rand(3)), ("b", rand(3))])
    check(m, {"x": rand(2, 3, 4, 5, scale=3)})


def test_add_before_opset_7_broadcasts_from_its_axis():
    # Add-6: B of shape [5] added along axis 1 of A [2, 5, 3] (numpy would
    # match it against the last dim).
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)], "legacy",
        [helper.make_tensor_value_info("a", F, [2, 5, 3])],
        [helper.make_tensor_value_info("y", F, [2, 5, 3])],
        [numpy_helper.from_array(rand(5), "b")]),
        opset_imports=[helper.make_opsetid("", 6)])
    a = rand(2, 5, 3)
    b = numpy_helper.to_array(m.graph.initializer[0])
    with mkcache.onnx.load(m) as prog:
        np.testing.assert_allclose(prog.run(a=a)["y"], a + b[None, :, None], rtol=1e-6)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op):
    m = model([helper.make_node(op, ["x"], ["y"])], [("x", [3, 7, 5, 6])], [("y", None)])
    check(m, {"x": rand(3, 7, 5, 6)})


# --------------------------------------------------------- linear algebra

@pytest.mark.parametrize("attrs,c_shape,b_const", [
    (dict(transB=1), (7,), True),
    (dict(), (1, 7), True),
    (dict(transA=1, alpha=0.5, beta=2.0), (5, 7), True),
    (dict(transB=1, beta=0.0), (7,), False),
    (dict(alpha=1.5), None, False),
])
def test_gemm(attrs, c_shape, b_const):
    a_shape = (9, 5) if attrs.get("transA") else (5, 9)
    b_shape = (7, 9) if attrs.get("transB") else (9, 7)
    inputs = [("a", list(a_shape))]
    inits = []
    names = ["a", "b"]
    if b_const:
        inits.append(("b", rand(*b_shape)))
    else:
        inputs.append(("b", list(b_shape)))
    if c_shape is not None:
        inits.append(("c", rand(*c_shape)))
        names.append("c")
    m = model([helper.make_node("Gemm", names, ["y"], **attrs)], inputs, [("y", None)], inits)
    feeds = {"a": rand(*a_shape)}
    if not b_const:
        feeds["b"] = rand(*b_shape)
    check(m, feeds)


def test_matmul_batched_and_constant():
    m = model([helper.make_node("MatMul", ["a", "b"], ["ab"]),
               helper.make_node("MatMul", ["ab", "w"], ["y"])],
              [("a", [2, 3, 5, 7]), ("b", [2, 3, 7, 4])], [("y", None)], [("w", rand(4, 6))])
    check(m, {"a": rand(2, 3, 5, 7), "b": rand(2, 3, 7, 4)})


# ------------------------------------------------------------- element-wise

@pytest.mark.parametrize("op,attrs,opset", [
    ("Relu", {}, 17), ("Sigmoid", {}, 17), ("Tanh", {}, 17), ("Exp", {}, 17),
    ("Abs", {}, 17), ("Erf", {}, 17), ("LeakyRelu", dict(alpha=0.2), 17),
    ("Elu", dict(alpha=0.7), 17), ("HardSwish", {}, 17), ("Mish", {}, 18),
    ("Gelu", {}, 20), ("Gelu", dict(approximate="tanh"), 20), ("Neg", {}, 17),
    ("Softplus", {}, 17),
])
def test_activations(op, attrs, opset):
    m = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [3, 5, 7])], [("y", None)],
              opset=opset)
    check(m, {"x": rand(3, 5, 7, scale=2)})


def test_sqrt_log_reciprocal_pow():
    m = model([helper.make_node("Sqrt", ["x"], ["s"]), helper.make_node("Log", ["s"], ["l"]),
               helper.make_node("Reciprocal", ["x"], ["r"]),
               helper.make_node("Pow", ["x", "two"], ["p"]),
               helper.make_node("Pow", ["x", "half"], ["q"])],
              [("x", [4, 9])], [("l", None), ("r", None), ("p", None), ("q", None)],
              [("two", np.array(2.0, np.float32)), ("half", np.array(0.5, np.float32))])
    check(m, {"x": np.abs(rand(4, 9)) + 0.1})


@pytest.mark.parametrize("exponent", [3.0, 4.0, 7.0, -1.0])
def test_integer_powers_of_negative_bases(exponent):
    m = model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", [3, 8])], [("y", None)],
              [("e", np.array(exponent, np.float32))])
    check(m, {"x": rand(3, 8) + np.float32(0.05)})


@pytest.mark.parametrize("opset", [6, 13])
def test_clip_both_forms(opset):
    if opset == 6:
        node = helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7)
        inits = []
    else:
        node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
        inits = [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.7, np.float32))]
    m = model([node], [("x", [5, 6])], [("y", None)], inits, opset=opset)
    check(m, {"x": rand(5, 6)})


def test_binaries_broadcast_and_fold():
    # (c + d) * 2 is computed when the model is loaded; the rest at run time.
    m = model([helper.make_node("Add", ["c", "d"], ["cd"]),
               helper.make_node("Mul", ["cd", "two"], ["k"]),
               helper.make_node("Add", ["x", "k"], ["a"]),
               helper.make_node("Sub", ["a", "y"], ["s"]),
               helper.make_node("Div", ["s", "k"], ["q"]),
               helper.make_node("Max", ["q", "x", "y"], ["m"]),
               helper.make_node("Min", ["m", "k"], ["out"])],
              [("x", [2, 3, 4]), ("y", [4])], [("out", None)],
              [("c", rand(3, 1)), ("d", rand(1, 4)), ("two", np.array(2.0, np.float32))])
    check(m, {"x": rand(2, 3, 4), "y": rand(4)})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (13, 1), (13, -1)])
def test_softmax_axis_rules(op, opset, axis):
    # Before opset 13 the input is flattened to 2-D at the axis.
    m = model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", [2, 3, 5])],
              [("y", None)], opset=opset)
    # onnx's reference evaluator applies opset 13's rule to every opset:
    # ONNX Runtime is the reference there.
    check(m, {"x": rand(2, 3, 5)}, evaluator=opset >= 13)


# ------------------------------------------------------------ normalisation

def test_batch_norm():
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                epsilon=1e-3)],
              [("x", [2, 5, 4, 3])], [("y", None)],
              [("s", rand(5)), ("b", rand(5)), ("m", rand(5)), ("v", np.abs(rand(5)) + 0.5)])
    check(m, {"x": rand(2, 5, 4, 3)})


@pytest.mark.parametrize("axis", [-1, -2])
def test_layer_norm(axis):
    shape = [5] if axis == -1 else [4, 5]
    m = model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis,
                                epsilon=1e-4)],
              [("x", [2, 3, 4, 5])], [("y", None)], [("s", rand(*shape)), ("b", rand(*shape))])
    check(m, {"x": rand(2, 3, 4, 5)})


@pytest.mark.parametrize("outputs", [["y", "mean", "inv_std"], ["y", "mean"], ["y", "", "inv_std"]])
def test_layer_norm_statistics_outputs(outputs):
    m = model([helper.make_node("LayerNormalization", ["x", "s"], outputs, axis=2,
                                epsilon=1e-3)],
              [("x", [2, 3, 4, 5])], [(o, None) for o in outputs if o],
              [("s", rand(4, 5))])
    check(m, {"x": rand(2, 3, 4, 5, scale=3) + np.float32(1.5)})


def test_lrn():
    m = model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=1e-3, beta=0.7, bias=1.5)],
              [("x", [2, 7, 4, 5])], [("y", None)])
    # onnx's reference evaluator disagrees with ONNX Runtime here (by up to
    # 0.2%), which agrees with mkcache: ONNX Runtime is the reference.
    check(m, {"x": rand(2, 7, 4, 5)}, evaluator=False)


def test_reductions_both_forms():
    m13 = model([helper.make_node("ReduceMean", ["x"], ["a"], axes=[1], keepdims=0),
                 helper.make_node("ReduceMax", ["x"], ["b"], axes=[-1, 0]),
                 helper.make_node("ReduceSum", ["x", "ax"], ["c"], keepdims=0)],
                [("x", [3, 5, 7])], [("a", None), ("b", None), ("c", None)],
                [("ax", np.array([2], np.int64))], opset=13)
    check(m13, {"x": rand(3, 5, 7)})
    m18 = model([helper.make_node("ReduceMean", ["x", "ax"], ["a"]),
                 helper.make_node("ReduceMin", ["x"], ["b"], keepdims=0)],
                [("x", [3, 5, 7])], [("a", None), ("b", None)],
                [("ax", np.array([0, 2], np.int64))], opset=18)
    check(m18, {"x": rand(3, 5, 7)})


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                "ReduceLogSumExp"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_written_with_the_sum(op, opset):
    axes = dict(axes=[1, -1]) if opset == 13 else {}
    inputs = ["x"] if opset == 13 else ["x", "ax"]
    m = model([helper.make_node(op, inputs, ["y"], keepdims=0, **axes),
               helper.make_node(op, ["x"], ["z"])],  # all axes, kept
              [("x", [3, 5, 7])], [("y", None), ("z", None)],
              [] if opset == 13 else [("ax", np.array([1, -1], np.int64))], opset=opset)
    x = np.abs(rand(3, 5, 7)) + np.float32(0.1) if op == "ReduceLogSum" else rand(3, 5, 7) * 30
    check(m, {"x": x})


# ------------------------------------------------------------- data movement

def test_shape_subgraph_folds_at_load():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write
    # a flatten: all known at load, so the plan has no step for them.
    m = model([helper.make_node("Shape", ["x"], ["shape"]),
               helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
               helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
               helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
               helper.make_node("Reshape", ["x", "target"], ["y"]),
               helper.make_node("Transpose", ["y"], ["t"], perm=[1, 0]),
               helper.make_node("Identity", ["t"], ["out"])],
              [("x", [3, 4, 5])], [("out", [20, 3])],
              [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)),
               ("minus1", np.array([-1], np.int64))], opset=13)
    got = check(m, {"x": rand(3, 4, 5)})
    assert got["out"].shape == (20, 3)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_flatten_concat(opset):
    if opset == 11:
        un = helper.make_node("Unsqueeze", ["x"], ["u"], axes=[1, -1])
        sq = helper.make_node("Squeeze", ["u"], ["s"], axes=[1])
        inits = []
    else:
        un = helper.make_node("Unsqueeze", ["x", "ua"], ["u"])
        sq = helper.make_node("Squeeze", ["u", "sa"], ["s"])
        inits = [("ua", np.array([1, -1], np.int64)), ("sa", np.array([1], np.int64))]
    m = model([un, sq, helper.make_node("Flatten", ["s"], ["f"], axis=2),
               helper.make_node("Concat", ["f", "f"], ["c"], axis=-1),
               helper.make_node("Dropout", ["c"], ["out"])],
              [("x", [2, 3, 4])], [("out", None)], inits, opset=opset)
    check(m, {"x": rand(2, 3, 4)})


def test_flatten_with_a_dynamic_batch():
    m = model([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [("x", ["N", 3, 4])],
              [("y", None)])
    with mkcache.onnx.load(m) as prog:
        for n in (1, 5):
            x = rand(n, 3, 4)
            np.testing.assert_array_equal(prog.run(x=x)["y"], x.reshape(n, 12))


# ------------------------------------------------------------ whole models

@pytest.mark.parametrize("which", ["resnet18", "resnet50", "mobilenetv2", "bert"])
def test_models_against_onnxruntime(which):
    ort = pytest.importorskip("onnxruntime")
    from mkcache.models import BertLayer, MobileNetV2, ResNet18, ResNet50  # noqa: PLC0415
    cnns = {"resnet18": ResNet18, "resnet50": ResNet50, "mobilenetv2": MobileNetV2}
    if which in cnns:  # a small image keeps the test fast; the nodes are the same
        m, x = cnns[which](0).onnx_model(image=64), rand(2, 3, 64, 64)
    else:
        m, x = BertLayer(0).onnx_model(), rand(2, 9, 768)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    with mkcache.onnx.load(m) as prog:
        got = prog.run(x=x)[m.graph.output[0].name]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-4


def test_input_shapes_pin_dims(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", "S", 4])], [("y", None)])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with mkcache.onnx.load(str(path), input_shapes={"x": (2, None, 4)}) as prog:
        x = rand(2, 7, 4)
        np.testing.assert_array_equal(prog.run(x=x)["y"], np.maximum(x, 0))
        with pytest.raises(mkcache.InvalidArgumentError, match="dim 0 must be 2"):
            prog.run(x=rand(3, 7, 4))


# ------------------------------------------------------------------ errors

def test_unsupported_operators_are_all_listed():
    m = model([helper.make_node("Relu", ["x"], ["a"]),
               helper.make_node("Celu", ["a"], ["b"], name="first"),
               helper.make_node("Relu", ["b"], ["c"]),
               helper.make_node("MaxPool", ["a"], ["d", "idx"], kernel_shape=[2, 2], name="p"),
               helper.make_node("Hardmax", ["x"], ["e"])],
              [("x", [1, 2, 4, 4])], [("d", None), ("e", None)], opset=17)
    with pytest.raises(mkcache.UnsupportedError) as e:
        mkcache.onnx.load(m)
    text = str(e.value)
    assert "4 nodes cannot be converted" in text
    assert "node 1 (Celu 'first'): operator not supported" in text
    assert "node 2 (Relu): reads the output of a node refused above" in text
    assert "node 3 (MaxPool 'p'): its optional outputs (the indices) are not supported" in text
    assert "node 4 (Hardmax): operator not supported" in text


def test_bad_files_are_clear_errors(tmp_path):
    good = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2, 3])], [("y", None)])
    data = good.SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(mkcache.InvalidArgumentError, match="is not an ONNX model"):
        mkcache.onnx.load(truncated)
    with pytest.raises(mkcache.InvalidArgumentError, match="not an ONNX model"):
        mkcache.onnx.load(b"\x00\xffnot a model at all" * 10)
    with pytest.raises(mkcache.InvalidArgumentError, match="cannot read"):
        mkcache.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(mkcache.InvalidArgumentError, match="takes a path"):
        mkcache.onnx.load(42)
    huge = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1 << 20, 1 << 20, 4])],
                 [("y", None)])
    with pytest.raises(mkcache.InvalidArgumentError, match="more than 2\\^40 elements"):
        mkcache.onnx.load(huge)
    with pytest.raises(mkcache.InvalidArgumentError, match="not the model's inputs"):
        mkcache.onnx.load(good, input_shapes={"nope": (1,)})
    # Nothing was lost: the good model still loads and runs.
    with mkcache.onnx.load(good) as prog:
        assert prog.run(x=np.ones((2, 3), np.float32))["y"].shape == (2, 3)


def test_supported_lists_the_table():
    table = mkcache.onnx.supported()
    assert table["Conv"] == [(1, 28)] and table["Gelu"] == [(20, 28)]
    assert "Gemm" in table and "ReduceMean" in table


def test_the_core_package_never_imports_onnx():
    import subprocess  # noqa: PLC0415
    code = ("import sys, numpy as np, mkcache; mkcache.relu(np.ones(3, np.float32)); "
            "assert 'onnx' not in sys.modules, 'onnx imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 3])
def test_flatten_every_axis(axis):
    m = model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [("x", [2, 3, 4, 5])],
              [("y", None)])
    check(m, {"x": rand(2, 3, 4, 5)})


def _gelu_nodes(form):
    """The erf GELU of x as exporters write it, ending in output 'y'."""
    c = helper.make_node
    if form == "torch":  # x * (erf(x / sqrt2) + 1) * 0.5
        return [c("Div", ["x", "sqrt2"], ["d"]), c("Erf", ["d"], ["e"]),
                c("Add", ["e", "one"], ["s"]), c("Mul", ["x", "s"], ["m"]),
                c("Mul", ["m", "half"], ["y"])]
    if form == "half_first":  # (x * 0.5) * (1 + erf(x * 1/sqrt2))
        return [c("Mul", ["x", "inv_sqrt2"], ["d"]), c("Erf", ["d"], ["e"]),
                c("Add", ["one", "e"], ["s"]), c("Mul", ["x", "half"], ["h"]),
                c("Mul", ["h", "s"], ["y"])]
    return [c("Mul", ["inv_sqrt2", "x"], ["d"]), c("Erf", ["d"], ["e"]),  # x * ((1 + erf) * 0.5)
            c("Add", ["e", "one"], ["s"]), c("Mul", ["s", "half"], ["m"]),
            c("Mul", ["x", "m"], ["y"])]


GELU_CONSTANTS = [("sqrt2", np.array(np.sqrt(2), np.float32)),
                  ("inv_sqrt2", np.array(1 / np.sqrt(2), np.float32)),
                  ("one", np.array(1.0, np.float32)), ("half", np.array(0.5, np.float32))]


@pytest.mark.parametrize("form", ["torch", "half_first", "half_on_sum"])
def test_erf_gelu_is_folded_into_one_step(form):
    m = model(_gelu_nodes(form), [("x", [3, 17])], [("y", None)], GELU_CONSTANTS)
    check(m, {"x": rand(3, 17, scale=3)})
    with mkcache.onnx.load(m, fuse=False) as prog:
        plan = prog.plan()
    assert plan.count("(activation") == 1 and "(erf)" not in plan, plan


@pytest.mark.parametrize("form", ["torchscript", "dynamo"])
def test_tanh_gelu_is_folded_into_one_step(form):
    """The tanh GELU as torch's two exporters write it: x^3 as x * (x * x)
    and 0.5 last, or as Pow(x, 3) and 0.5 on the sum."""
    c = helper.make_node
    if form == "torchscript":  # its scalars are Constant nodes
        scalars = [c("Constant", [], [f"{n}_c"], value=numpy_helper.from_array(
            np.array(v, np.float32))) for n, v in (("k", 0.044715), ("root", np.sqrt(2 / np.pi)),
                                                  ("one", 1.0), ("half", 0.5))]
        nodes = scalars + [
            c("Mul", ["x", "x"], ["sq"]), c("Mul", ["x", "sq"], ["cube"]),
            c("Mul", ["k_c", "cube"], ["kc"]), c("Add", ["x", "kc"], ["in"]),
            c("Mul", ["root_c", "in"], ["u"]), c("Tanh", ["u"], ["t"]),
            c("Add", ["one_c", "t"], ["s"]), c("Mul", ["x", "s"], ["m"]),
            c("Mul", ["half_c", "m"], ["y"])]
    else:
        nodes = [c("Pow", ["x", "three"], ["cube"]), c("Mul", ["kc_k", "cube"], ["kc"]),
                 c("Add", ["x", "kc"], ["in"]), c("Mul", ["root", "in"], ["u"]),
                 c("Tanh", ["u"], ["t"]), c("Add", ["t", "one"], ["s"]),
                 c("Mul", ["half", "s"], ["h"]), c("Mul", ["x", "h"], ["y"])]
    consts = [("k", np.array(0.044715, np.float32)), ("kc_k", np.array(0.044715, np.float32)),
              ("root", np.array(np.sqrt(2 / np.pi), np.float32)),
              ("three", np.array(3.0, np.float32)), ("one", np.array(1.0, np.float32)),
              ("half", np.array(0.5, np.float32))]
    m = model(nodes, [("x", [3, 17])], [("y", None)], consts)
    check(m, {"x": rand(3, 17, scale=3)})
    with mkcache.onnx.load(m, fuse=False) as prog:
        plan = prog.plan()
    steps = [line for line in plan.splitlines() if line[:1].isdigit()]
    assert len(steps) == 1 and "(activation" in steps[0], plan


def test_a_gelu_whose_parts_are_read_elsewhere_is_not_folded():
    nodes = _gelu_nodes("torch") + [helper.make_node("Relu", ["e"], ["other"])]
    m = model(nodes, [("x", [3, 5])], [("y", None), ("other", None)], GELU_CONSTANTS)
    check(m, {"x": rand(3, 5)})
    with mkcache.onnx.load(m) as prog:
        assert "(erf)" in prog.plan()


def test_matmul_and_bias_fold_with_the_activation_after():
    m = model([helper.make_node("MatMul", ["x", "w"], ["xw"]),
               helper.make_node("Add", ["xw", "b"], ["y"]),
               helper.make_node("Relu", ["y"], ["r"]),
               helper.make_node("MatMul", ["r", "w2"], ["z"]),
               helper.make_node("Add", ["bm", "z"], ["out"])],
              [("x", [2, 3, 9])], [("out", None)],
              [("w", rand(9, 7)), ("b", rand(7)), ("w2", rand(7, 5)), ("bm", rand(1, 1, 5))])
    check(m, {"x": rand(2, 3, 9)})
    with mkcache.onnx.load(m) as prog:
        plan = prog.plan()
    steps = [line for line in plan.splitlines() if line[:1].isdigit()]
    # Two linears (constant 2-D weights) with their biases, the relu fused
    # into the first.
    assert len(steps) == 2 and all("(linear" in line for line in steps), plan
    assert "node 1 (activation) fused into node 0 (linear)" in plan


def test_the_run_command(tmp_path):
    import subprocess  # noqa: PLC0415
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"])],
              [("x", ["N", 3, 8, 8])], [("y", None)], [("w", rand(4, 3, 3, 3))])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    args = [sys.executable, "-m", "mkcache", "run", str(path), "--input", "x=2x3x8x8",
            "--plan", "--profile", "--runs", "3"]
    try:
        import onnxruntime  # noqa: F401,PLC0415
        args += ["--compare", "onnxruntime"]
    except ImportError:
        pass
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "plan program:2x3x8x8" in out.stdout and "slowest steps (GFLOP/s" in out.stdout
    assert "GFLOP/s measured" in out.stdout
    assert "run: " in out.stdout
    if "--compare" in args:
        assert "y: max |difference|" in out.stdout and "mkcache / onnxruntime" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "mkcache", "run", str(path), "--input", "x"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "expected name=shape" in bad.stderr


def test_embedding_gather_with_int64_ids():
    table = rand(13, 8)
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0)],
        "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", F, None)], [numpy_helper.from_array(table, "table")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = min(m.ir_version, 10)
    check(m, {"ids": RNG.integers(0, 13, size=(2, 5)).astype(np.int64)})


def test_the_run_command_feeds_ids_within_their_table_and_masks_of_ones():
    from mkcache.__main__ import _random_feeds  # noqa: PLC0415
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("Gather", ["types", "tt"], ["t"], axis=0),
         helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["e", "t"], ["et"]),
         helper.make_node("ReduceMean", ["et"], ["r"], axes=[2], keepdims=0),
         helper.make_node("Mul", ["r", "m"], ["y"])],
        "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"]),
                  helper.make_tensor_value_info("tt", TensorProto.INT32, ["B", "S"]),
                  helper.make_tensor_value_info("mask", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(rand(13, 8), "table"), numpy_helper.from_array(rand(2, 8), "types")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    feeds = _random_feeds(m, {"ids": (3, 40)}, np.random.default_rng(0))
    assert feeds["ids"].shape == (3, 40) and feeds["ids"].dtype == np.int64
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 13 and len(np.unique(feeds["ids"])) > 1
    assert feeds["tt"].dtype == np.int32 and set(np.unique(feeds["tt"])) <= {0, 1}
    assert feeds["mask"].shape == (1, 1) and np.all(feeds["mask"] == 1)
    m.ir_version = min(m.ir_version, 10)
    check(m, feeds)


@pytest.mark.parametrize("square", ["Pow", "Mul"])
@pytest.mark.parametrize("affine", [True, False])
def test_decomposed_layer_norm_is_folded(square, affine):
    c = helper.make_node
    nodes = [c("ReduceMean", ["x"], ["mean"], axes=[-1]), c("Sub", ["x", "mean"], ["d"]),
             c("Pow", ["d", "two"], ["sq"]) if square == "Pow" else c("Mul", ["d", "d"], ["sq"]),
             c("ReduceMean", ["sq"], ["var"], axes=[-1]), c("Add", ["var", "eps"], ["ve"]),
             c("Sqrt", ["ve"], ["std"]), c("Div", ["d", "std"], ["n"])]
    if affine:
        nodes += [c("Mul", ["n", "gamma"], ["g"]), c("Add", ["g", "beta"], ["y"])]
    else:
        nodes += [c("Identity", ["n"], ["y"])]
    m = model(nodes, [("x", [2, 5, 16])], [("y", None)],
              [("two", np.array(2.0, np.float32)), ("eps", np.array(1e-5, np.float32)),
               ("gamma", rand(16)), ("beta", rand(16))], opset=13)
    check(m, {"x": rand(2, 5, 16, scale=3)}, rtol=2e-5)
    with mkcache.onnx.load(m) as prog:
        plan = prog.plan()
    steps = [line for line in plan.splitlines() if line[:1].isdigit()]
    assert len(steps) == 1 and "(layer_norm" in steps[0], plan


def test_attention_mask_and_where():
    # BERT's additive mask as exporters write it: int64 mask -> Unsqueeze ->
    # Cast -> (1 - m) * -10000 -> added to the scores; and a Where.
    c = helper.make_node
    nodes = [c("Unsqueeze", ["mask", "axes12"], ["m4"]), c("Cast", ["m4"], ["mf"], to=F),
             c("Sub", ["one", "mf"], ["inv"]), c("Mul", ["inv", "big"], ["add_mask"]),
             c("Add", ["scores", "add_mask"], ["masked"]),
             c("Softmax", ["masked"], ["probs"], axis=-1),
             c("Cast", ["keep"], ["keep_b"], to=TensorProto.BOOL),
             c("Where", ["keep_b", "probs", "zero"], ["y"])]
    g = helper.make_graph(
        nodes, "mask",
        [helper.make_tensor_value_info("scores", F, [2, 3, 5, 5]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 5]),
         helper.make_tensor_value_info("keep", TensorProto.INT64, [2, 3, 5, 5])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array([1, 2], np.int64), "axes12"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(-10000.0, np.float32), "big"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = min(m.ir_version, 10)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    check(m, {"scores": rand(2, 3, 5, 5), "mask": mask,
              "keep": RNG.integers(0, 2, size=(2, 3, 5, 5)).astype(np.int64)})


def test_slice_split_and_shape_constants():
    c = helper.make_node
    nodes = [c("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
             c("Split", ["s", "sizes"], ["p0", "p1"], axis=2),
             c("Add", ["p0", "p1"], ["q"]),
             c("ConstantOfShape", ["shp"], ["ones"], value=numpy_helper.from_array(
                 np.array([2.0], np.float32))),
             c("Mul", ["q", "ones"], ["y"]),
             c("Range", ["r0", "r1", "r2"], ["idx"]),
             c("Gather", ["x", "idx"], ["g"], axis=1)]
    m = model(nodes, [("x", [2, 9, 8])], [("y", None), ("g", None)],
              [("st", np.array([1, 0], np.int64)), ("en", np.array([-1, 8], np.int64)),
               ("ax", np.array([1, 2], np.int64)), ("sp", np.array([2, 1], np.int64)),
               ("sizes", np.array([4, 4], np.int64)), ("shp", np.array([1, 1, 4], np.int64)),
               ("r0", np.array(8, np.int64)), ("r1", np.array(0, np.int64)),
               ("r2", np.array(-3, np.int64))], opset=13)
    check(m, {"x": rand(2, 9, 8)})


def test_mask_by_equal_where_and_expand():
    c = helper.make_node
    nodes = [c("Equal", ["mask", "zero_i"], ["pad"]),
             c("Unsqueeze", ["pad", "axes12"], ["pad4"]),
             c("Expand", ["pad4", "shape"], ["padx"]),
             c("Where", ["padx", "neg", "scores"], ["masked"]),
             c("Softmax", ["masked"], ["y"], axis=-1)]
    g = helper.make_graph(
        nodes, "mask",
        [helper.make_tensor_value_info("scores", F, [2, 3, 4, 4]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
         numpy_helper.from_array(np.array([1, 2], np.int64), "axes12"),
         numpy_helper.from_array(np.array([2, 3, 4, 4], np.int64), "shape"),
         numpy_helper.from_array(np.array(-1e9, np.float32), "neg")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = min(m.ir_version, 10)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int64)
    check(m, {"scores": rand(2, 3, 4, 4), "mask": mask})


# ----------------------------------------------------------- pad and resize

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_opset_18_with_axes_and_a_crop(mode):
    c = helper.make_node
    nodes = [c("Relu", ["x"], ["r"]),
             c("Pad", ["r", "pads", "value", "axes"], ["p"], mode=mode),
             c("Add", ["p", "p"], ["y"])]
    pads = np.array([1, -1, 2, 0], np.int64)  # H: +1 before, +2 after; W: one removed
    m = model(nodes, [("x", [2, 3, 5, 7])], [("y", None)],
              [("pads", pads), ("value", np.array(-1.5, np.float32)),
               ("axes", np.array([2, -1], np.int64))], opset=18)
    # The reference evaluator pads with numpy, which refuses negative counts.
    check(m, {"x": rand(2, 3, 5, 7)}, evaluator=False)


@pytest.mark.parametrize("opset", [2, 11, 13])
def test_pad_every_axis_both_opset_forms(opset):
    c = helper.make_node
    pads = [0, 0, 2, 1, 0, 1, 0, 3]
    if opset < 11:
        nodes = [c("Pad", ["x"], ["y"], mode="reflect", pads=pads)]
        init = []
    else:
        nodes = [c("Pad", ["x", "pads"], ["y"], mode="reflect")]
        init = [("pads", np.array(pads, np.int64))]
    m = model(nodes, [("x", [3, 2, 5, 4])], [("y", None)], init, opset=opset)
    check(m, {"x": rand(3, 2, 5, 4)})


def test_pad_of_a_known_shape_tensor_at_load():
    c = helper.make_node
    nodes = [c("Shape", ["x"], ["s"]),
             c("Pad", ["s", "pads", "one"], ["s2"]),  # [2, 3, 4] -> [1, 2, 3, 4]
             c("Reshape", ["x", "s2"], ["y"])]
    m = model(nodes, [("x", [2, 3, 4])], [("y", [1, 2, 3, 4])],
              [("pads", np.array([1, 0], np.int64)), ("one", np.array(1, np.int64))],
              opset=13)
    assert check(m, {"x": rand(2, 3, 4)})["y"].shape == (1, 2, 3, 4)


RESIZES = [  # attributes, scales, sizes
    (dict(mode="linear"), [1, 1, 2, 1.5], None),
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [2, 3, 9, 4]),
    (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), None,
     [2, 3, 3, 1]),
    (dict(mode="linear", coordinate_transformation_mode="asymmetric"), [1, 1, 0.6, 2.5], None),
    (dict(mode="nearest"), [1, 1, 0.5, 3], None),
    (dict(mode="nearest", nearest_mode="round_prefer_ceil"), None, [2, 3, 3, 14]),
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
     [1, 1, 2, 2], None),
    (dict(mode="nearest", coordinate_transformation_mode="align_corners",
          nearest_mode="ceil"), None, [2, 3, 8, 5]),
    (dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),  # opset 19 on
     [1, 1, 1.7, 0.7], None),
    (dict(mode="cubic"), [1, 1, 1.5, 0.6], None),
    (dict(mode="cubic", coordinate_transformation_mode="align_corners", cubic_coeff_a=-0.5),
     None, [2, 3, 9, 4]),
    (dict(mode="cubic", exclude_outside=1, coordinate_transformation_mode="asymmetric"),
     [1, 1, 0.8, 2.5], None),
]


@pytest.mark.parametrize("attrs,scales,sizes", RESIZES)
@pytest.mark.parametrize("opset", [11, 13, 19])
def test_resize(attrs, scales, sizes, opset):
    if attrs.get("coordinate_transformation_mode") == "half_pixel_symmetric" and opset < 19:
        pytest.skip("half_pixel_symmetric came in opset 19")
    c = helper.make_node
    init = [("roi", np.array([], np.float32))]
    if scales is not None:
        init.append(("scales", np.array(scales, np.float32)))
        inputs = ["r", "roi", "scales"]
    else:
        init += [("no_scales", np.array([], np.float32)), ("sizes", np.array(sizes, np.int64))]
        inputs = ["r", "roi", "no_scales" if opset == 11 else "", "sizes"]
    nodes = [c("Relu", ["x"], ["r"]), c("Resize", inputs, ["y"], **attrs)]
    m = model(nodes, [("x", [2, 3, 6, 5])], [("y", None)], init, opset=opset)
    check(m, {"x": rand(2, 3, 6, 5)})


def test_resize_opset_18_axes():
    c = helper.make_node
    nodes = [c("Resize", ["x", "", "", "sizes"], ["a"], axes=[3, 2], mode="linear"),
             c("Resize", ["a", "", "scales"], ["y"], axes=[3], mode="nearest")]
    m = model(nodes, [("x", [1, 2, 4, 5])], [("y", None)],
              [("sizes", np.array([7, 3], np.int64)), ("scales", np.array([2], np.float32))],
              opset=18)
    check(m, {"x": rand(1, 2, 4, 5)})


@pytest.mark.parametrize("opset", [7, 9, 10])
def test_upsample_and_resize_10_nearest(opset):
    c = helper.make_node
    scales = [1.0, 1.0, 2.0, 3.0]
    if opset == 7:
        nodes = [c("Upsample", ["x"], ["y"], scales=scales)]
        init = []
    else:
        nodes = [c("Upsample" if opset == 9 else "Resize", ["x", "scales"], ["y"])]
        init = [("scales", np.array(scales, np.float32))]
    m = model(nodes, [("x", [2, 3, 4, 5])], [("y", None)], init, opset=opset)
    with mkcache.onnx.load(m) as prog:
        got = prog.run(x=(x := rand(2, 3, 4, 5)))["y"]
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))


def test_pad_and_resize_refusals():
    c = helper.make_node
    nodes = [c("Resize", ["x", "", "s_cubic"], ["a"], mode="bicubic", name="cubic"),
             c("Resize", ["x", "roi", "s"], ["b"], mode="linear",
               coordinate_transformation_mode="tf_crop_and_resize", name="crop"),
             c("Resize", ["x", "", "s"], ["d"], antialias=1, mode="nearest", name="aa"),
             c("Resize", ["x", "", "", "sz"], ["e"], keep_aspect_ratio_policy="not_larger",
               name="keep"),
             c("Resize", ["x", "", "s"], ["f"], exclude_outside=1, name="excl"),
             c("Resize", ["x", "", "s", "sz"], ["g"], name="both"),
             c("Resize", ["x", "", "run_s"], ["h"], name="dynamic"),
             c("Pad", ["x", "run_pads"], ["i"], name="pads"),
             c("Pad", ["x", "short"], ["j"], name="short"),
             c("Pad", ["x", "pp"], ["k"], mode="symmetric", name="mode"),
             c("Upsample", ["x", "down"], ["l"], name="down")]
    init = [("s_cubic", np.array([1, 1, 2, 2], np.float32)),
            ("s", np.array([1, 1, 2, 2], np.float32)),
            ("roi", np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)),
            ("sz", np.array([1, 2, 8, 8], np.int64)),
            ("short", np.array([1, 1], np.int64)),
            ("pp", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
            ("down", np.array([1, 1, 0.5, 0.5], np.float32))]
    # Not through model(): the checker refuses the Pad mode before the importer can.
    m = helper.make_model(helper.make_graph(
        nodes, "refused",
        [helper.make_tensor_value_info("x", F, [1, 2, 4, 4]),
         helper.make_tensor_value_info("run_s", F, [4]),
         helper.make_tensor_value_info("run_pads", TensorProto.INT64, [8])],
        [helper.make_tensor_value_info(o, F, None) for o in "abdefghijkl"],
        [numpy_helper.from_array(a, n) for n, a in init]),
        opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(mkcache.UnsupportedError) as e:
        mkcache.onnx.load(m)
    text = str(e.value)
    for name, why in [
            ("cubic", "mode 'bicubic'"),
            ("crop", "coordinate_transformation_mode 'tf_crop_and_resize' is not supported"),
            ("aa", "antialias=1 with mode 'nearest' (it applies to linear and cubic)"),
            ("keep", "keep_aspect_ratio_policy='not_larger' is not supported"),
            ("excl", "exclude_outside=1 with mode 'nearest'"),
            ("both", "both scales and sizes given"),
            ("short", "pads has 2 entries for 4 axes"),
            ("mode", "Pad mode 'symmetric'"),
            ("down", "Upsample before opset 11 with a scale below 1")]:
        assert f"(Resize '{name}')" in text or f"(Pad '{name}')" in text or \
            f"(Upsample '{name}')" in text, name
        assert why in text, (name, text)
    # Scales and pads given as inputs are shape data, bound at each run:
    # those nodes wait for their values, and are not refused.
    assert "'dynamic'" not in text and "(Pad 'pads')" not in text


def test_upsample_linear_against_onnxruntime():
    # The reference evaluator implements Upsample's nearest only.
    m = model([helper.make_node("Upsample", ["x", "scales"], ["y"], mode="linear")],
              [("x", [2, 3, 4, 5])], [("y", None)],
              [("scales", np.array([1, 1, 2.5, 2], np.float32))], opset=9)
    check(m, {"x": rand(2, 3, 4, 5)}, evaluator=False)


def test_decoder_block_as_pytorch_exports_it():
    # F.interpolate(scale_factor=2) (nearest: asymmetric, floor), a skip
    # connection, F.pad(mode="reflect") and a 3x3 conv without padding.
    c = helper.make_node
    nodes = [c("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             c("Relu", ["a"], ["r"]),
             c("Resize", ["r", "", "scales"], ["up"], mode="nearest",
               coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             c("Concat", ["up", "skip"], ["cat"], axis=1),
             c("Pad", ["cat", "pads"], ["p"], mode="reflect"),
             c("Conv", ["p", "w2"], ["c2"]),
             c("Resize", ["c2", "", "", "sizes"], ["y"], mode="linear",
               coordinate_transformation_mode="pytorch_half_pixel")]
    m = model(nodes, [("x", [2, 5, 6, 7]), ("skip", [2, 3, 12, 14])], [("y", None)],
              [("w1", rand(4, 5, 3, 3, scale=0.3)), ("w2", rand(6, 7, 3, 3, scale=0.3)),
               ("scales", np.array([1, 1, 2, 2], np.float32)),
               ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
               ("sizes", np.array([2, 6, 9, 20], np.int64))], opset=13)
    check(m, {"x": rand(2, 5, 6, 7), "skip": rand(2, 3, 12, 14)})


def test_external_data_beside_the_model_file(tmp_path):
    # As torch's dynamo exporter writes a model by default: the weights in a
    # file of their own beside it, read when the model is loaded by path.
    w = rand(4, 3)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 3])], [("y", None)],
              [("w", w.T.copy())])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="m.data",
                    size_threshold=0)
    assert (tmp_path / "m.data").exists()
    x = rand(2, 3)
    with mkcache.onnx.load(path) as prog:
        np.testing.assert_allclose(prog.run(x=x)["y"], x @ w.T, rtol=1e-5, atol=1e-6)
    (tmp_path / "m.data").unlink()
    with pytest.raises(mkcache.InvalidArgumentError, match="external data"):
        mkcache.onnx.load(path)
    without = onnx.load(str(path), load_external_data=False)
    with pytest.raises(mkcache.UnsupportedError, match="external data"):
        mkcache.onnx.load(without)


# ------------------------------------------------------------ sign and shrink

def test_sign_and_shrink_with_their_edges():
    """Sign keeps a zero's sign and NaN; Shrink's bounds are strict (x at
    lambd is 0). Odd shapes, against the evaluator and ONNX Runtime."""
    nodes = [helper.make_node("Sign", ["x"], ["s"]),
             helper.make_node("Shrink", ["x"], ["h"], bias=0.25, lambd=0.5),
             helper.make_node("Shrink", ["x"], ["d"])]
    x = rand(3, 5, 7)
    x.reshape(-1)[:6] = [0.0, -0.0, 0.5, -0.5, np.nan, -np.inf]
    m = model(nodes, [("x", [3, 5, 7])], [("s", None), ("h", None), ("d", None)])
    got = check(m, {"x": x})
    np.testing.assert_array_equal(np.signbit(got["s"].reshape(-1)[:2]), [False, True])
    assert np.isnan(got["s"].reshape(-1)[4])


def test_sign_of_integers_is_refused():
    m = model([helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
               helper.make_node("Sign", ["i"], ["s"]),
               helper.make_node("Cast", ["s"], ["y"], to=F)], [("x", [4])], [("y", None)])
    with pytest.raises(mkcache.UnsupportedError, match="Sign of int64 values"):
        mkcache.onnx.load(m)


def test_scalar_inputs_run_as_one_element_and_clip_bounds_given_at_run_time():
    """A rank-0 input is fed as shape (1,) (the backend reshapes a 0-d
    array); Clip's bounds may be such inputs: min(max(x, low), high)."""
    g = helper.make_graph(
        [helper.make_node("Clip", ["x", "low", "high"], ["y"]),
         helper.make_node("Mul", ["low", "high"], ["p"])], "scalars",
        [helper.make_tensor_value_info("x", F, [3, 5]),
         helper.make_tensor_value_info("low", F, []),
         helper.make_tensor_value_info("high", F, [])],
        [helper.make_tensor_value_info("y", F, [3, 5]), helper.make_tensor_value_info("p", F, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    x = rand(3, 5)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with mkcache.onnx.load(m) as prog:
        for low, high in ((-0.5, 0.5), (0.3, -0.2)):  # the second: high wins
            want_y, want_p = sess.run(None, {"x": x, "low": np.array(low, np.float32),
                                             "high": np.array(high, np.float32)})
            got = prog.run(x=x, low=np.array([low], np.float32),
                           high=np.array([high], np.float32))
            np.testing.assert_array_equal(got["y"], want_y)
            np.testing.assert_allclose(got["p"], want_p.reshape(1))
    import mkcache.onnx.backend as backend  # noqa: PLC0415
    rep = backend.prepare(m)
    y, p = rep.run([x, np.array(-0.5, np.float32), np.array(0.5, np.float32)])
    assert p.shape == () and y.shape == (3, 5)
