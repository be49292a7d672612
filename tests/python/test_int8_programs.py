"""compile(precision="int8"): the float32 warm-up calibration, then a plan
running each conv2d and linear layer quantized; its outputs against the
float32 program's, the calibration reused as text and as a file, the
warm-up's cache entries gone, and a calibration of another graph refused."""
import numpy as np
import pytest

import mkcache

ISA = mkcache.build_info()["isa"]


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


W1, B1 = rand(16, 3, 3, 3, seed=1, scale=0.3), rand(16, seed=2, scale=0.1)
W2, B2 = rand(24, 16, 3, 3, seed=3, scale=0.1), rand(24, seed=4, scale=0.1)
W3, B3 = rand(10, 24 * 4 * 5, seed=5, scale=0.05), rand(10, seed=6, scale=0.1)


def build(layout="NCHW"):
    g = mkcache.Graph()
    shape = (None, 8, 10, 3) if layout == "NHWC" else (None, 3, 8, 10)
    x = g.input("x", shape, layout=layout)
    y = g.conv2d(x, W1, B1, padding=1, activation="relu", data_format=layout, name="c1")
    y = g.max_pool2d(y, 2, data_format=layout)
    y = g.conv2d(y, W2, B2, padding=1, activation="relu", data_format=layout, name="c2")
    if layout == "NHWC":
        y = g.transpose(y, (0, 3, 1, 2))
    g.output(g.linear(g.flatten(y), W3, B3, name="fc"), "logits")
    return g


def batches(n, batch=4, layout="NCHW"):
    shape = (batch, 8, 10, 3) if layout == "NHWC" else (batch, 3, 8, 10)
    return [{"x": rand(*shape, seed=100 + i)} for i in range(n)]


def cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_int8_plan_agrees_with_float32(layout):
    with build(layout) as g, g.compile() as f32, \
            g.compile(precision="int8", calibration=batches(4, layout=layout)) as q:
        for b in batches(3, batch=5, layout=layout):
            want, got = f32.run(**b)["logits"], q.run(**b)["logits"]
            assert cosine(want, got) > 0.999
            assert (want.argmax(1) == got.argmax(1)).mean() >= 0.8
        plan = q.plan()
        assert plan.count("quantized_conv2d") == 2 and plan.count("quantized_linear") == 1
        assert "(quantize)" in plan


def test_calibration_text_and_file_give_the_same_plan(tmp_path):
    with build() as g:
        with g.compile() as warm:
            text = warm.calibrate(batches(3))
            warm.save_calibration(tmp_path / "cal.txt")
        x = batches(1, batch=2)[0]
        outs = []
        for calibration in (text, text.encode(), str(tmp_path / "cal.txt"), tmp_path / "cal.txt",
                            batches(3)):
            with g.compile(precision="int8", calibration=calibration) as q:
                outs.append(q.run(**x)["logits"])
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])


def test_the_warm_up_entries_are_reset():
    mkcache.cache.clear()
    with build() as g:
        before = mkcache.cache.stats()["entries"]
        q = g.compile(precision="int8", calibration=batches(2))
        # The float32 warm-up program (and its calibration program) ran and
        # were closed: none of their entries is left.
        assert mkcache.cache.stats()["entries"] == before
        q.run(**batches(1)[0])
        assert mkcache.cache.stats()["entries"] > before
        q.close()
        assert mkcache.cache.stats()["entries"] == before


def test_bad_calibrations_are_refused():
    with build() as g:
        with pytest.raises(mkcache.InvalidArgumentError, match="needs calibration"):
            g.compile(precision="int8")
        with pytest.raises(mkcache.InvalidArgumentError, match="precision must be"):
            g.compile(precision="int4")
        with pytest.raises(mkcache.InvalidArgumentError, match="calibration is for"):
            g.compile(calibration="x")
        with pytest.raises(mkcache.InvalidArgumentError, match="no batches"):
            g.compile(precision="int8", calibration=[])
        with pytest.raises(mkcache.InvalidArgumentError, match="is empty"):
            g.compile(precision="int8", calibration=b"")
        for bad in ("node0|conv2d|c1|0\tfoo\t1\t1\n", "node0|conv2d|c1|0\t2\t1\t1\n",
                    "node0|conv2d|c1|0\tnan\t1\n", "node0|conv2d|c1|0\t0\t1\t1\t5\n",
                    "node0|conv2d|c1|0\t0\n", "node0|conv2d|c1|0\t0\t1x\t1\n",
                    "node0|conv2d|c1|0\t\t1\t1\n"):
            with pytest.raises(mkcache.InvalidArgumentError, match="line 1: .* is not <key>"):
                g.compile(precision="int8", calibration=bad)
        with pytest.raises(mkcache.InvalidArgumentError, match="cannot read"):
            g.compile(precision="int8", calibration="/no/such/file")
        # A calibration of another graph: a line naming no node of this one,
        # or a node to quantize without its line.
        with mkcache.Graph() as other:
            y = other.conv2d(other.input("x", (None, 3, 8, 10)), W1, name="z")
            other.output(y, "y")
            with other.compile() as warm:
                foreign = warm.calibrate(batches(1))
        with pytest.raises(mkcache.InvalidArgumentError, match="names no node of this graph"):
            g.compile(precision="int8", calibration=foreign)
        with g.compile() as warm:
            mine = warm.calibrate(batches(1))
        partial = "".join(line + "\n" for line in mine.splitlines() if "|fc|" not in line)
        with pytest.raises(mkcache.InvalidArgumentError, match="has no calibration line"):
            g.compile(precision="int8", calibration=partial)
        nan = batches(1)[0]
        nan["x"][0, 0, 0, 0] = np.inf
        with pytest.raises(mkcache.InvalidArgumentError, match="read inf"):
            g.compile(precision="int8", calibration=[nan])
        # Nothing was lost: a good compile works.
        with g.compile(precision="int8", calibration=mine) as q:
            assert q.run(**batches(1)[0])["logits"].shape == (4, 10)


# A small residual network: a stem, a block adding its input back, a block
# adding a strided 1x1 projection, global pooling and a classifier; channels
# not multiples of 16, batch above 1.
RW = {k: rand(*shape, seed=200 + i, scale=s) for i, (k, shape, s) in enumerate([
    ("stem", (12, 3, 3, 3), 0.3), ("a1", (12, 12, 1, 1), 0.3), ("a2", (12, 12, 3, 3), 0.1),
    ("a3", (12, 12, 1, 1), 0.3), ("b1", (20, 12, 1, 1), 0.3), ("b2", (20, 20, 3, 3), 0.1),
    ("b3", (20, 20, 1, 1), 0.3), ("proj", (20, 12, 1, 1), 0.3), ("fc", (7, 20), 0.3)])}


def build_residual():
    g = mkcache.Graph()
    x = g.input("x", (None, 3, 11, 13))
    stem = g.conv2d(x, RW["stem"], padding=1, activation="relu", name="stem")
    y = g.conv2d(stem, RW["a1"], activation="relu", name="a1")
    y = g.conv2d(y, RW["a2"], padding=1, activation="relu", name="a2")
    y = g.conv2d(y, RW["a3"], name="a3")
    a = g.relu(g.add(y, stem))
    y = g.conv2d(a, RW["b1"], activation="relu", name="b1")
    y = g.conv2d(y, RW["b2"], stride=2, padding=1, activation="relu", name="b2")
    y = g.conv2d(y, RW["b3"], name="b3")
    b = g.relu(g.add(y, g.conv2d(a, RW["proj"], stride=2, name="proj")))
    pooled = g.flatten(g.global_avg_pool(b))
    g.output(g.linear(pooled, RW["fc"], name="fc"), "logits")
    return g


def residual_batches(n, batch=3, seed=300):
    return [{"x": rand(batch, 3, 11, 13, seed=seed + i)} for i in range(n)]


def test_int8_results_pass_between_layers_as_uint8():
    """Each quantized layer writes the uint8 its quantized readers take
    (requantized inside its primitive), the residual sums add in uint8, and
    the plan quantizes only the network's input: against the float32
    program, and against the same plan on the reference kernels (the
    integer arithmetic computed independently)."""
    with build_residual() as g, g.compile() as f32:
        calibration = f32.calibrate(residual_batches(4))
        impls = {"quantized_conv2d": "reference", "quantized_linear": "reference"}
        with g.compile(precision="int8", calibration=calibration) as q, \
                g.compile(precision="int8", calibration=calibration, impl=impls) as ref:
            q.run(**residual_batches(1)[0])
            plan = q.plan()
            assert plan.count("quantized_conv2d") == 8 and plan.count("quantized_linear") == 1
            # Quantize steps for the input and the pooled features only; the
            # last block (read by the pooling) and its projection write
            # float32, so nothing is dequantized.
            assert plan.count("(quantize)") == 2 and "(dequantize)" not in plan, plan
            assert "6 result(s) passed on in 8 bits" in plan
            assert "node 3 (conv2d 'a3'): src uint8" in plan and \
                "adds its residual in uint8" in plan
            assert "adds its residual in float32" in plan
            for b in residual_batches(3, batch=4, seed=400):
                want, got, exact = f32.run(**b)["logits"], q.run(**b)["logits"], \
                    ref.run(**b)["logits"]
                assert cosine(want, got) > 0.995
                # oneDNN's kernels scale in float32: a value at a rounding tie
                # may land one step away, and the step carries on.
                assert cosine(exact, got) > 0.9999
                np.testing.assert_allclose(got, exact, rtol=0,
                                           atol=0.02 * np.abs(exact).max())


def test_onnx_load_int8_mobilenetv2_depthwise_and_residuals():
    """mkcache.onnx.load(precision="int8", calibration=...) on MobileNetV2's
    ONNX export (depthwise convolutions, relu6, residual adds, a classifier),
    small images and batch 2: every conv and the classifier quantized, the
    depthwise ones on oneDNN's int8 kernels; against the float32 import, and
    against onnxruntime's own quantize_static model when it is installed."""
    pytest.importorskip("onnx")
    import mkcache.onnx
    from mkcache.models import MobileNetV2
    model = MobileNetV2(0).onnx_model(image=32).SerializeToString()
    rng = np.random.default_rng(3)
    calib = [{"x": rng.standard_normal((2, 3, 32, 32), dtype=np.float32)} for _ in range(3)]
    x = rng.standard_normal((2, 3, 32, 32), dtype=np.float32)
    with mkcache.onnx.load(model) as f32, \
            mkcache.onnx.load(model, precision="int8", calibration=calib) as q:
        want, got = f32.run(x=x), q.run(x=x)
        (name, w), = want.items()
        assert cosine(w, got[name]) > 0.99
        plan = q.plan()
        assert "(conv2d" not in plan.split("plan program")[1]  # every conv quantized
        # The depthwise ones too run on oneDNN's int8 kernels.
        steps = [l for l in plan.splitlines() if "(quantized_conv2d" in l]
        assert len(steps) == 52 and all(" onednn:" in l for l in steps), plan
    ort = pytest.importorskip("onnxruntime")
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "f32.onnx", Path(d) / "int8.onnx"
        src.write_bytes(model)
        quantization.quantize_static(str(src), str(dst), Reader(),
                                     quant_format=quantization.QuantFormat.QDQ,
                                     per_channel=True, reduce_range=True)
        sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
        theirs = sess.run(None, {"x": x})[0]
    # Two calibrations of the same model (min/max both): close, not equal.
    assert cosine(theirs, got[name]) > 0.98


def test_int8_transformer_layer_adds_residuals_in_the_linear_layers():
    """A small BERT layer (hidden 24, 2 heads, ffn 40; batch 2, sequence 7):
    the residual adds after the attention output and the second FFN
    linear fuse into those linear layers (in float32 too), and the int8
    plan keeps them as the quantized layers' sums; against the float32
    program, and against the same plan on the reference kernels."""
    from mkcache.models import BertLayer
    layer = BertLayer(0, hidden=24, heads=2, ffn=40)
    rng = np.random.default_rng(9)
    calib = [{"x": rng.standard_normal((2, 7, 24), dtype=np.float32)} for _ in range(3)]
    with layer.graph(batch=2, seq=7) as g, g.compile() as f32:
        x = rng.standard_normal((2, 7, 24), dtype=np.float32)
        want = f32.run(x=x)["y"]
        f32_plan = f32.plan()
        assert f32_plan.count("(linear") >= 2 and f32_plan.count("as its sum") >= 2, f32_plan
        # The float32 program against the layer op by op in float64.
        np.testing.assert_allclose(want, layer.reference(x), rtol=1e-4, atol=1e-4)
        impls = {"quantized_linear": "reference", "quantized_conv2d": "reference"}
        with g.compile(precision="int8", calibration=calib) as q, \
                g.compile(precision="int8", calibration=calib, impl=impls) as ref:
            got, exact = q.run(x=x)["y"], ref.run(x=x)["y"]
            plan = q.plan()
    assert "adds its residual in" in plan, plan
    assert cosine(want, got) > 0.99
    assert cosine(exact, got) > 0.9999
