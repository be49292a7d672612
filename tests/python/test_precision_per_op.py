"""Precision per operator: a program-wide precision with operators that
compute otherwise ("bf16,layer_norm=f32", "int8,matmul=f32", "f32,conv2d=bf16",
or precision_per_op={...}), against the float32 program; bad overrides refused
by name."""
import numpy as np
import pytest

import mkcache
from mkcache.models import BertLayer

INFO = mkcache.build_info()
NO_VNNI = INFO["isa"] in ("sse41", "avx", "avx2", "avx512_core")
needs_bf16 = pytest.mark.skipif(INFO["bf16"] == "none",
                                reason=f"oneDNN has no bfloat16 kernels for {INFO['isa']}")


def cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


def steps(plan, op):
    return [line for line in plan.splitlines() if f"({op}" in line and "onednn" in line]


def in_bf16(step):
    """The plan marks bfloat16 bytes (" bf16"): a step computing in
    bfloat16 writes them."""
    return " bf16" in step.split("->")[1]


@pytest.fixture(scope="module")
def bert():
    layer = BertLayer(0, hidden=48, heads=4, ffn=64)
    x = np.random.default_rng(2).standard_normal((2, 11, 48), dtype=np.float32)
    with layer.graph(batch=2, seq=None) as g, g.compile() as f32:
        yield g, x, f32.run(x=x)["y"]


@needs_bf16
@pytest.mark.parametrize("spelling", ["text", "dict"])
def test_bf16_plan_keeps_named_operators_float32(bert, spelling):
    g, x, want = bert
    kw = (dict(precision="bf16,layer_norm=f32,softmax=f32") if spelling == "text" else
          dict(precision="bf16", precision_per_op={"layer_norm": "f32", "softmax": "f32"}))
    with g.compile(**kw) as prog:
        got = prog.run(x=x)["y"]
        plan = prog.plan()
    assert "precision per operator: layer_norm=f32 softmax=f32" in plan
    assert steps(plan, "layer_norm") and steps(plan, "softmax")
    assert not any(in_bf16(s) for s in steps(plan, "layer_norm") + steps(plan, "softmax"))
    assert all(in_bf16(s) for s in steps(plan, "linear"))
    assert cosine(want, got) > 0.999


@needs_bf16
def test_f32_plan_computes_named_operators_in_bf16(bert):
    g, x, want = bert
    with g.compile(precision="f32", precision_per_op={"linear": "bf16"}) as prog:
        got = prog.run(x=x)["y"]
        plan = prog.plan()
    assert steps(plan, "linear") and all(in_bf16(s) for s in steps(plan, "linear"))
    assert not any(in_bf16(s) for s in steps(plan, "layer_norm") + steps(plan, "matmul"))
    assert cosine(want, got) > 0.999


def test_int8_plan_keeps_named_operators_float32(bert):
    g, x, want = bert
    rng = np.random.default_rng(3)
    calib = [{"x": rng.standard_normal((2, 11, 48), dtype=np.float32)} for _ in range(2)]
    with g.compile(precision="int8,matmul=f32", calibration=calib) as q:
        got = q.run(x=x)["y"]
        plan = q.plan()
    assert "quantized_matmul" not in plan and "quantized_linear" in plan
    assert "(0 matmul(s) of two values)" in plan
    assert cosine(want, got) > 0.99
    with g.compile(precision="int8", precision_per_op={"linear": "f32", "matmul": "f32"},
                   calibration=calib) as q:
        np.testing.assert_allclose(q.run(x=x)["y"], want, rtol=1e-4, atol=1e-4)
        plan = q.plan()
    assert "quantized" not in plan.split("plan program")[1]


@pytest.mark.skipif(INFO["bf16"] != "none", reason="the CPU has bfloat16 kernels "
                    f"({INFO['isa']}): nothing to refuse")
def test_bf16_per_operator_without_kernels_is_refused(bert):
    g, _, _ = bert
    with pytest.raises(mkcache.UnsupportedError, match="needs a CPU with AVX-512"):
        g.compile(precision="f32,linear=bf16")


@pytest.mark.parametrize("precision,per_op,message", [
    ("bf16,conv9=f32", None, "unknown operator 'conv9'"),
    ("bf16,linear=f16", None, "unknown precision 'f16'"),
    ("bf16,linear", None, "'linear' is not operator=precision"),
    ("bf16,linear=f32,linear=bf16", None, "linear is given twice"),
    ("f32", {"linear": "int8"}, "linear=int8: 8 bits are the program's"),
    ("int8", {"softmax": "bf16"}, "softmax=bf16 in an int8 plan"),
    ("f64", None, "precision must be"),
    ("f32", ["linear"], "precision_per_op must be a dict"),
])
def test_bad_overrides_are_refused(bert, precision, per_op, message):
    g, x, _ = bert
    calib = [{"x": x}] if precision.startswith("int8") else None
    with pytest.raises(mkcache.InvalidArgumentError, match=message):
        g.compile(precision=precision, precision_per_op=per_op, calibration=calib)
