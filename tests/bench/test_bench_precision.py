"""int8 and bfloat16 against float32 on the same layer, in the same run: a
3x3 64->64 convolution on 56x56 (batch 1, channels-last in and out, as
inside a network) and a linear layer 128x768 -> 3072, each compiled as a
one-node program (weights converted once), run
interleaved round-robin on the library's thread count; the table gives
medians and the speed-ups. The int8 layers read uint8 data and write uint8
(the conv, with its relu) or float32 (the linear), with 7-bit weights so
that CPUs without VNNI run them on oneDNN's int8 kernels too. The bfloat16
programs (where oneDNN has bfloat16 kernels) are the float32 graph compiled
with precision="bf16": float32 in and out, converted at the edges.

Training steps (forward with training=True, then the data, weights and
bias gradients) of the same two layers in float32 and in bfloat16 mixed
precision (the float32 master weights cast to bfloat16 in each step, the
data bfloat16 already, float32 weight gradients), interleaved.

And whole models: ResNet-50, MobileNetV2 and a BERT layer (random weights,
batch 1), their ONNX exports imported in float32, with precision="int8"
(calibrated on float32 runs of random inputs) and with precision="bf16",
beside onnxruntime running the same export in float32 and quantized by its
own tools, and OpenVINO in float32 and (where the CPU has it) bfloat16
inference precision, all interleaved on the same thread count.

    python -m pytest tests/bench/test_bench_precision.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mkcache
from mkcache.models import interleaved

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optional import WHY_NOT, installed  # noqa: E402
from report import machine_isa, register  # noqa: E402

ISA = machine_isa()
THREADS = mkcache.build_info()["max_threads"]
RNG = np.random.default_rng(0)
# case -> timed repetitions
CASES = {"conv 3x3 64->64 56x56 b1": 200, "linear 128x768 -> 3072": 200}
RESULTS: dict = defaultdict(dict)
MODEL_RESULTS: dict = {}
TRAIN_RESULTS: dict = {}
# training case -> timed repetitions
TRAIN_CASES = {"conv 3x3 64->64 28x28 b8": 30, "linear 256x1024 -> 1024": 30}
NO_VNNI = mkcache.build_info()["isa"] in ("sse41", "avx", "avx2", "avx512_core")
BF16 = mkcache.build_info()["bf16"]  # native, emulated or none


def _programs(case):
    """{precision: (program, inputs)} computing the same layer."""
    if case.startswith("conv"):
        # Channels-last in and out, as a layer inside a network reads and
        # writes it (the kernels' own arrangement in every precision), so
        # that no converter is timed with the layer.
        x = RNG.uniform(0, 4, (1, 56, 56, 64)).astype(np.float32)
        w = RNG.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
        b = RNG.standard_normal(64).astype(np.float32)
        nhwc = dict(padding=1, activation="relu", data_format="NHWC")
        with mkcache.Graph() as g:
            g.output(g.conv2d(g.input("x", x.shape, layout="NHWC"), w, b, **nhwc), "y")
            f32 = g.compile()
            bf16 = g.compile(precision="bf16") if BF16 != "none" else None
        w_scale = np.abs(w).reshape(64, -1).max(1) / 63
        wq = np.round(w / w_scale[:, None, None, None]).astype(np.int8)
        xq = np.clip(np.round(x / 0.02), 0, 255).astype(np.uint8)
        with mkcache.Graph() as g:
            g.output(g.quantized_conv2d(g.input("x", x.shape, layout="NHWC", dtype="uint8"), wq,
                                        b, src_scale=0.02, weight_scale=w_scale, dst_scale=0.05,
                                        dst_dtype="uint8", **nhwc), "y")
            int8 = g.compile()
        return _with_bf16({"float32": (f32, {"x": x}), "int8": (int8, {"x": xq})}, bf16, x)
    x = RNG.standard_normal((128, 768)).astype(np.float32)
    w = RNG.standard_normal((3072, 768)).astype(np.float32) * 0.03
    b = RNG.standard_normal(3072).astype(np.float32)
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", x.shape), w, b), "y")
        f32 = g.compile()
        bf16 = g.compile(precision="bf16") if BF16 != "none" else None
    w_scale = np.abs(w).max(1) / 63
    wq = np.round(w / w_scale[:, None]).astype(np.int8)
    xq = (np.clip(np.round(x / 0.03), -127, 127) + 128).astype(np.uint8)
    with mkcache.Graph() as g:
        g.output(g.quantized_linear(g.input("x", x.shape, dtype="uint8"), wq, b, src_scale=0.03,
                                    weight_scale=w_scale, src_zero_point=128), "y")
        int8 = g.compile()
    return _with_bf16({"float32": (f32, {"x": x}), "int8": (int8, {"x": xq})}, bf16, x)


def _with_bf16(programs, bf16, x):
    if bf16 is not None:
        programs["bfloat16"] = (bf16, {"x": x})
    return programs


@pytest.mark.parametrize("case", list(CASES))
def test_int8_against_float32(benchmark, case):
    benchmark.group = case
    programs = _programs(case)
    try:
        outs = {p: prog.run(**inputs)["y"] for p, (prog, inputs) in programs.items()}
        # The same layer: the int8 result dequantized is near the float32 one.
        ref = outs["float32"]
        got = outs["int8"].astype(np.float32) * (0.05 if case.startswith("conv") else 1.0)
        cos = float(np.dot(ref.ravel(), got.ravel()) /
                    (np.linalg.norm(ref) * np.linalg.norm(got)))
        assert cos > 0.99, f"{case}: cosine similarity of int8 to float32 is {cos:.4f}"
        if "bfloat16" in outs:
            cos_bf16 = _cosine(ref, outs["bfloat16"])
            assert cos_bf16 > 0.999, f"{case}: cosine of bfloat16 to float32 is {cos_bf16:.5f}"
        fns = {p: (lambda prog=prog, inputs=inputs: prog.run(**inputs))
               for p, (prog, inputs) in programs.items()}
        for fn in fns.values():  # warm-up
            fn()
        reps = 1 if benchmark.disabled else CASES[case]
        result = {}
        benchmark.pedantic(lambda: result.update(interleaved(fns, reps)), rounds=1,
                           iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            RESULTS[case] = dict(result, cosine=cos)
    finally:
        for prog, _ in programs.values():
            prog.close()


def _training_steps(case):
    """{precision: a training step returning its gradients (dx, dw, db)}."""
    from mkcache import grad  # noqa: PLC0415
    if case.startswith("conv"):
        x = RNG.standard_normal((8, 64, 28, 28)).astype(np.float32)
        w = RNG.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
        forward = lambda x, w, b, name: mkcache.conv2d(  # noqa: E731
            x, w, b, padding=1, training=True, name=name)
        backward = lambda dy, x, w, b, name: grad.conv2d(  # noqa: E731
            dy, x, w, b, padding=1, name=name)
    else:
        x = RNG.standard_normal((256, 1024)).astype(np.float32)
        w = RNG.standard_normal((1024, 1024)).astype(np.float32) * 0.03
        forward = lambda x, w, b, name: mkcache.linear(  # noqa: E731
            x, w, b, training=True, name=name)
        backward = lambda dy, x, w, b, name: grad.linear(dy, x, w, b, name=name)  # noqa: E731
    b = RNG.standard_normal(w.shape[0]).astype(np.float32)
    x32 = mkcache.Tensor(x)
    y = forward(x32, w, b, "step.f32")
    dy32 = mkcache.Tensor(RNG.standard_normal(y.shape).astype(np.float32))

    def f32_step():
        forward(x32, w, b, "step.f32")
        return backward(dy32, x32, w, b, "step.f32")
    steps = {"float32": f32_step}
    if BF16 != "none":
        x16, dy16 = mkcache.cast(x32, mkcache.bfloat16), mkcache.cast(dy32, mkcache.bfloat16)

        def bf16_step():
            w16 = mkcache.cast(w, mkcache.bfloat16)  # the master weights, each step
            forward(x16, w16, b, "step.bf16")
            return backward(dy16, x16, w16, b, "step.bf16")
        steps["bfloat16"] = bf16_step
    return steps


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_training_step_bf16_against_float32(benchmark, case):
    if BF16 == "none":
        pytest.skip(f"oneDNN has no bfloat16 kernels for {ISA}")
    benchmark.group = "training step " + case
    steps = _training_steps(case)
    want, got = steps["float32"](), steps["bfloat16"]()
    assert got.x.dtype == mkcache.bfloat16 and got.weight.dtype == np.float32
    cosines = {k: _cosine(getattr(want, k).numpy(), getattr(got, k).numpy())
               for k in ("x", "weight", "bias")}
    assert min(cosines.values()) > 0.999, cosines
    reps = 1 if benchmark.disabled else TRAIN_CASES[case]
    result = {}
    benchmark.pedantic(lambda: result.update(interleaved(steps, reps)), rounds=1, iterations=1)
    if getattr(benchmark, "stats", None) is not None:
        TRAIN_RESULTS[case] = dict(result, cosine=min(cosines.values()))


def render_training_table() -> str:
    lines = [f"| training step ({ISA}, bf16 {BF16}, {THREADS} threads) | float32 (ms) "
             "| bfloat16 (ms) | bfloat16 speed-up | least gradient cosine |",
             "|---|---|---|---|---|"]
    for case, r in TRAIN_RESULTS.items():
        lines.append(f"| {case} | {r['float32'] * 1e3:.3f} | {r['bfloat16'] * 1e3:.3f} | "
                     f"{r['float32'] / r['bfloat16']:.2f}x | {r['cosine']:.5f} |")
    return "\n".join(lines)


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _ort_int8(model_bytes, batches, path, dynamic=False):
    """The model quantized by onnxruntime's quantize_static (or, `dynamic`,
    quantize_dynamic: what its transformers' int8 recipe uses), saved at
    `path`."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat,  # noqa: PLC0415
                                          QuantType, quantize_dynamic, quantize_static)
    src = path.with_name("f32.onnx")
    src.write_bytes(model_bytes)
    if dynamic:
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8,
                         reduce_range=NO_VNNI)
        return path

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(src), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=NO_VNNI, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return path


@pytest.mark.parametrize("model_name", ["ResNet-50", "MobileNetV2", "BERT layer seq 128"])
def test_model_precisions_against_onnxruntime_and_openvino(benchmark, tmp_path, model_name):
    """A model's ONNX export, batch 1: imported in float32, in int8
    (mkcache.onnx.load(precision="int8")) and in bfloat16 where oneDNN has
    its kernels; onnxruntime's float32 and int8 sessions and OpenVINO's
    float32 and bfloat16 (where the CPU computes it natively) when they are
    installed, interleaved. The CNNs at 224x224 (64 untimed), onnxruntime's
    int8 from quantize_static; the BERT layer at sequence 128 (16 untimed),
    onnxruntime's from quantize_dynamic."""
    pytest.importorskip("onnx")
    import mkcache.onnx  # noqa: PLC0415
    from mkcache.models import BertLayer, MobileNetV2, ResNet50  # noqa: PLC0415
    benchmark.group = f"{model_name} precisions"
    rng = np.random.default_rng(7)
    bert = model_name.startswith("BERT")
    if bert:
        seq = 16 if benchmark.disabled else 128
        model = BertLayer(0).onnx_model(batch=1, seq=seq).SerializeToString()
        shape = (1, seq, 768)
    else:
        image = 64 if benchmark.disabled else 224
        m = {"ResNet-50": ResNet50, "MobileNetV2": MobileNetV2}[model_name](0)
        model = m.onnx_model(image=image).SerializeToString()
        shape = (1, 3, image, image)
    calib = [{"x": rng.standard_normal(shape, dtype=np.float32)}
             for _ in range(1 if benchmark.disabled else 8)]
    x = rng.standard_normal(shape, dtype=np.float32)
    shapes = {"x": x.shape}
    programs = {"float32": mkcache.onnx.load(model, input_shapes=shapes),
                "int8": mkcache.onnx.load(model, input_shapes=shapes, precision="int8",
                                          calibration=calib)}
    if BF16 != "none":
        programs["bf16"] = mkcache.onnx.load(model, input_shapes=shapes, precision="bf16")
    fns = {f"mkcache {p}": (lambda prog=prog: prog.run(x=x)) for p, prog in programs.items()}
    outs = {f"mkcache {p}": list(prog.run(x=x).values())[0] for p, prog in programs.items()}
    notes = []
    int8_model = None  # onnxruntime's quantized export, which OpenVINO runs too
    ort = installed("onnxruntime")
    if ort is None:
        notes.append(WHY_NOT["onnxruntime"])
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        sessions = {"float32": ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])}
        try:
            q = _ort_int8(model, calib, tmp_path / "int8.onnx", dynamic=bert)
            int8_model = str(q)
            sessions["int8"] = ort.InferenceSession(str(q), so,
                                                    providers=["CPUExecutionProvider"])
        except ImportError as e:
            notes.append(f"onnxruntime.quantization does not import: {e}")
        for p, sess in sessions.items():
            fns[f"onnxruntime {p}"] = lambda sess=sess: sess.run(None, {"x": x})
            outs[f"onnxruntime {p}"] = sess.run(None, {"x": x})[0]
    ov = installed("openvino")
    if ov is None:
        notes.append(WHY_NOT["openvino"])
    else:
        core = ov.Core()
        # OpenVINO computes in bfloat16 by default where the CPU has it:
        # each precision asked for by name. Its int8 is onnxruntime's
        # quantized export, whose quantized parts its CPU plugin runs in 8
        # bits (the rest float32).
        runs = [("float32", "f32", model)]
        if BF16 == "native":
            runs.append(("bf16", "bf16", model))
        if int8_model is not None:
            runs.append(("int8", "f32", int8_model))
        for name, p, source in runs:
            compiled = core.compile_model(core.read_model(source), "CPU", {
                "INFERENCE_NUM_THREADS": THREADS, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": p})
            request = compiled.create_infer_request()
            out = compiled.output(0)
            name = "openvino " + name
            fns[name] = lambda request=request, out=out: request.infer({"x": x})[out]
            outs[name] = np.array(request.infer({"x": x})[out])
    try:
        want = outs["mkcache float32"]
        cos = {k: _cosine(v, want) for k, v in outs.items()}
        assert cos["mkcache int8"] > 0.99, cos
        assert "mkcache bf16" not in cos or cos["mkcache bf16"] > 0.999, cos
        for fn in fns.values():
            fn()
        reps = 1 if benchmark.disabled else 30
        result = {}
        # Idle threads of a runtime spin a while after its run (OpenMP's,
        # onnxruntime's): each call waits for the last one's to stop.
        benchmark.pedantic(lambda: result.update(interleaved(fns, reps, settle=0.25)),
                           rounds=1, iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            MODEL_RESULTS[model_name] = dict(times=result, cosine=cos, notes=notes)
    finally:
        for prog in programs.values():
            prog.close()


def render_model_table() -> str:
    lines = [f"| batch 1 ({ISA}, {THREADS} threads) | ms | / mkcache float32 "
             "| cosine to mkcache float32 |", "|---|---|---|---|"]
    notes = []
    for name, r in MODEL_RESULTS.items():
        t, cos = r["times"], r["cosine"]
        base = t["mkcache float32"]
        for k, v in t.items():
            lines.append(f"| {name}: {k} | {v * 1e3:.2f} | {v / base:.2f} | {cos[k]:.4f} |")
        notes += [f"note: {n}" for n in r["notes"] if f"note: {n}" not in notes]
    return "\n".join(lines + notes)


def render_table() -> str:
    lines = [f"| case ({ISA}, bf16 {BF16}, {THREADS} threads) | float32 (ms) | int8 (ms) "
             "| int8 speed-up | cosine int8 / float32 | bfloat16 (ms) | bfloat16 speed-up |",
             "|---|---|---|---|---|---|---|"]
    for case, r in RESULTS.items():
        bf16 = (f"{r['bfloat16'] * 1e3:.3f} | {r['float32'] / r['bfloat16']:.2f}x"
                if "bfloat16" in r else "- | -")
        lines.append(f"| {case} | {r['float32'] * 1e3:.3f} | {r['int8'] * 1e3:.3f} | "
                     f"{r['float32'] / r['int8']:.2f}x | {r['cosine']:.4f} | {bf16} |")
    return "\n".join(lines)


def _sections():
    tables = ([render_table()] if RESULTS else []) + \
        ([render_training_table()] if TRAIN_RESULTS else []) + \
        ([render_model_table()] if MODEL_RESULTS else [])
    return [("int8 and bfloat16 against float32, medians per run (interleaved round-robin)",
             "\n\n".join(tables))] if tables else []


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    register(request, "mkcache-precision-report", _sections)
    yield
