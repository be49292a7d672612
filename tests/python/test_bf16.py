"""bfloat16: the arithmetic operators on bfloat16 tensors (eager, on oneDNN's
kernels where the CPU has them) and compile(precision="bf16") / "auto"
(programs on oneDNN, and on the reference kernels on every CPU), each
against float64 references of the bfloat16-rounded inputs with tolerances
derived from the format; the errors where the CPU has no bfloat16 kernels
or the arguments do not agree."""
import numpy as np
import pytest

import mkcache
import reference as ref
from bf16_support import (HAS_KERNELS, INFO, ISA, assert_bf16_close, bf16, needs_bf16, rand,
                          run_child, values)
from mkcache.models import BertLayer, ResNet18, ResNet50


def cosine(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------ eager


@needs_bf16
@pytest.mark.parametrize("case", [
    dict(n=2, c=5, h=9, w=11, o=7, k=3, stride=1, pad=1, dil=1, groups=1),
    dict(n=1, c=17, h=8, w=7, o=19, k=3, stride=2, pad=2, dil=2, groups=1),
    dict(n=3, c=6, h=10, w=10, o=9, k=1, stride=1, pad=0, dil=1, groups=3),
    dict(n=2, c=12, h=7, w=9, o=12, k=3, stride=1, pad=1, dil=1, groups=12),
], ids=["3x3", "strided-dilated", "grouped-1x1", "depthwise"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("bias_dtype", ["f32", "bf16"])
def test_conv2d(case, layout, bias_dtype):
    c, o, g = case["c"], case["o"], case["groups"]
    x, xv = bf16(rand(case["n"], c, case["h"], case["w"], seed=1))
    w, wv = bf16(rand(o, c // g, case["k"], case["k"], seed=2, scale=0.3))
    b = rand(o, seed=3)
    bias, bv = bf16(b) if bias_dtype == "bf16" else (b, b.astype(np.float64))
    p = case["pad"]
    exact, magnitude = ref.conv2d_nchw(xv, wv, bv, (case["stride"],) * 2, (p,) * 4,
                                       (case["dil"],) * 2, g)
    src = x
    if layout == "NHWC":
        src = mkcache.Tensor(np.ascontiguousarray(np.transpose(xv, (0, 2, 3, 1)), np.float32),
                             layout="NHWC").astype("bf16")
    y = mkcache.conv2d(src, w, bias, stride=case["stride"], padding=p, dilation=case["dil"],
                       groups=g, data_format=layout, activation="relu")
    got = values(y)
    if layout == "NHWC":
        got = np.transpose(got, (0, 3, 1, 2))
    k = c // g * case["k"] ** 2
    assert_bf16_close(got, ref.relu(exact), magnitude, k, what="conv2d")


@needs_bf16
def test_conv3d_and_transposed():
    x, xv = bf16(rand(2, 3, 5, 6, 7, seed=4))
    w, wv = bf16(rand(5, 3, 3, 3, 3, seed=5, scale=0.3))
    exact, magnitude = ref.conv_nd(xv, wv, None, (1, 1, 1), (1, 1, 1), (1, 1, 1))
    assert_bf16_close(values(mkcache.conv3d(x, w, padding=1)), exact, magnitude, 81, what="conv3d")
    x, xv = bf16(rand(2, 6, 5, 4, seed=6))
    w, wv = bf16(rand(6, 3, 3, 3, seed=7, scale=0.3))
    exact, magnitude = ref.conv_transpose2d(xv, wv, None, (2, 2), (1, 1), (1, 1))
    got = values(mkcache.conv2d_transpose(x, w, stride=2, padding=1))
    assert_bf16_close(got, exact, magnitude, 54, what="conv2d_transpose")


@needs_bf16
def test_linear_with_residual_and_matmul():
    x, xv = bf16(rand(3, 5, 37, seed=8))
    w, wv = bf16(rand(23, 37, seed=9, scale=0.2))
    b = rand(23, seed=10)
    r, rv = bf16(rand(3, 5, 23, seed=11))
    exact = xv @ wv.T + b
    magnitude = np.abs(xv) @ np.abs(wv).T + np.abs(b)
    assert_bf16_close(values(mkcache.linear(x, w, b, activation="gelu")),
                      ref.activation("gelu", exact), magnitude, 37, what="linear+gelu")
    assert_bf16_close(values(mkcache.linear(x, w, b, residual=r)), exact + rv,
                      magnitude + np.abs(rv), 38, what="linear+residual")
    a, av = bf16(rand(2, 1, 6, 13, seed=12))
    m, mv = bf16(rand(3, 11, 13, seed=13))
    exact = np.matmul(av, np.swapaxes(mv, -1, -2)) * 0.5
    magnitude = np.matmul(np.abs(av), np.abs(np.swapaxes(mv, -1, -2))) * 0.5
    got = values(mkcache.matmul(a, m, transpose_b=True, scale=0.5))
    assert_bf16_close(got, exact, magnitude, 13, what="matmul")


@needs_bf16
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling(layout):
    xv32 = rand(2, 5, 9, 11, seed=14)
    x, xv = bf16(xv32)
    if layout == "NHWC":
        x = mkcache.Tensor(np.ascontiguousarray(np.transpose(xv, (0, 2, 3, 1)), np.float32),
                           layout="NHWC").astype("bf16")

    def back(t):
        got = values(t)
        return np.transpose(got, (0, 3, 1, 2)) if layout == "NHWC" else got
    got = back(mkcache.max_pool2d(x, 3, 2, 1, data_format=layout))
    np.testing.assert_array_equal(got, ref.pool(xv, "max", (3, 3), (2, 2), (1, 1), (1, 1)))
    got = back(mkcache.avg_pool2d(x, 3, 2, 1, ceil_mode=True, data_format=layout))
    want = ref.pool(xv, "avg_include", (3, 3), (2, 2), (1, 1), (1, 1), ceil_mode=True)
    # An average is rounded once, and once more where ceil mode rescales it.
    assert_bf16_close(got, want, reduction=9, roundings=2, what="avg_pool2d")


@needs_bf16
@pytest.mark.parametrize("kind", ["relu", "gelu", "tanh", "sigmoid", "elu", "swish"])
def test_activations(kind):
    x, xv = bf16(rand(3, 7, 33, seed=15, scale=2.0))
    got = values(mkcache.activation(x, kind))
    _, alpha, beta = mkcache.ACTIVATIONS[kind]
    assert_bf16_close(got, ref.activation(kind, xv, alpha, beta), floor=1e-6, what=kind)


@needs_bf16
def test_softmax_norms_binary_concat():
    x, xv = bf16(rand(4, 6, 29, seed=16, scale=3.0))
    # oneDNN's bfloat16 softmax writes its exponentials to dst and scales
    # them there: two roundings.
    want = ref.softmax(xv, -1)
    assert_bf16_close(values(mkcache.softmax(x, axis=-1)), want, floor=1e-6, roundings=2,
                      what="softmax")
    scale, shift = rand(29, seed=17), rand(29, seed=18)
    got = values(mkcache.layer_norm(x, scale, shift))
    want = ref.layer_norm(xv, -1, scale.astype(np.float64), shift.astype(np.float64))
    assert_bf16_close(got, want, floor=1e-4 * np.abs(want).max(), what="layer_norm")
    b, bv = bf16(rand(6, 1, seed=19))
    for name, f in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                    ("div", np.divide)):
        # b broadcast, and b first (the operands swapped inside).
        assert_bf16_close(values(getattr(mkcache, name)(x, b)), f(xv, bv), what=name)
        assert_bf16_close(values(getattr(mkcache, name)(b, x)), f(bv, xv), what=name + " swapped")
    y, yv = bf16(rand(4, 3, 29, seed=20))
    got = values(mkcache.concat([x, y], axis=1))
    np.testing.assert_array_equal(got, np.concatenate([xv, yv], axis=1))
    # Inference batch norm: statistics, scale and shift in float32.
    c, cv = bf16(rand(2, 6, 5, 7, seed=33))
    mean, var = rand(6, seed=34), np.abs(rand(6, seed=35)) + 0.5
    gamma, beta = rand(6, seed=36), rand(6, seed=37)
    got = values(mkcache.batch_norm(c, mean, var, gamma, beta))
    want = ref.batch_norm_nchw(cv, mean, var, gamma, beta)
    assert_bf16_close(got, want, floor=1e-4 * np.abs(want).max(), what="batch_norm")


def test_dtypes_must_agree():
    x, _ = bf16(rand(1, 4, 5, 5))
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="conv2d: weights is float32 but src is bfloat16"):
        mkcache.conv2d(x, rand(3, 4, 3, 3))
    with pytest.raises(mkcache.InvalidArgumentError, match="linear: weights is bfloat16 but src"):
        mkcache.linear(rand(2, 8), bf16(rand(3, 8))[0])
    with pytest.raises(mkcache.InvalidArgumentError, match="add: b is float32 but src is bfloat16"):
        mkcache.add(x, rand(1, 4, 5, 5))
    with pytest.raises(mkcache.InvalidArgumentError, match="concat: input 1 must be float32 or "
                                                           "bfloat16, as input 0"):
        mkcache.concat([x, rand(1, 4, 5, 5)], axis=1)
    q = mkcache.Tensor(rand(2, 3)).astype("int8")
    with pytest.raises(mkcache.InvalidArgumentError, match="src must be float32 or bfloat16, got int8"):
        mkcache.relu(q)


@needs_bf16
def test_wrong_residual_refused():
    xl, _ = bf16(rand(2, 8))
    wl, _ = bf16(rand(3, 8))
    with pytest.raises(mkcache.InvalidArgumentError, match="residual .dst. must be bfloat16"):
        mkcache.linear(xl, wl, residual=rand(2, 3))


def test_without_bf16_kernels_errors_name_the_isa():
    """Under AVX2's kernels (on any CPU): an eager bfloat16 call and a
    bfloat16 program are UnsupportedErrors naming the ISA; "auto" falls back
    to float32, and the reference kernels still compute bfloat16 plans."""
    proc = run_child("""
        x = mkcache.Tensor(np.ones((1, 2, 4, 4), np.float32)).astype("bf16")
        for call in (lambda: mkcache.conv2d(x, x), lambda: mkcache.relu(x)):
            try:
                call()
            except mkcache.UnsupportedError as e:
                print("EAGER", e)
        g = mkcache.Graph()
        v = g.input("x", (1, 2, 4, 4))
        g.output(g.relu(g.conv2d(v, np.ones((3, 2, 3, 3), np.float32), padding=1)), "y")
        try:
            g.compile(precision="bf16")
        except mkcache.UnsupportedError as e:
            print("PROGRAM", e)
        auto = g.compile(precision="auto")
        auto.run(x=np.ones((1, 2, 4, 4), np.float32))
        print("AUTO", [s for s in auto.plan().splitlines() if s.startswith("precision")][0])
        p = g.compile(precision="bf16", impl={"conv2d": "reference", "activation": "reference"})
        print("REFERENCE", float(p.run(x=np.ones((1, 2, 4, 4), np.float32))["y"][0, 0, 1, 1]))
        """, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    eager = [s for s in lines if s.startswith("EAGER")]
    assert len(eager) == 2 and all("oneDNN has no bfloat16 kernels for avx2" in s for s in eager)
    program = [s for s in lines if s.startswith("PROGRAM")]
    assert len(program) == 1 and "precision \"bf16\" needs a CPU with AVX-512" in program[0]
    assert "node 0 (conv2d)" in program[0] and '"reference"' in program[0]
    assert "AUTO precision auto: f32 (avx2" in proc.stdout
    assert "REFERENCE 18.0" in proc.stdout


# ------------------------------------------------------------------ programs


def small_graph(layout="NCHW"):
    """conv (grouped too) + residual add + batch norm + pool + linear +
    layer norm + softmax, and an erf, which only computes in float32."""
    g = mkcache.Graph()
    shape = (None, 9, 11, 5) if layout == "NHWC" else (None, 5, 9, 11)
    x = g.input("x", shape, layout=layout)
    c1 = g.conv2d(x, rand(12, 5, 3, 3, seed=21, scale=0.3), rand(12, seed=22), padding=1,
                  activation="relu", data_format=layout)
    c2 = g.conv2d(c1, rand(12, 4, 3, 3, seed=23, scale=0.3), None, padding=1, groups=3,
                  data_format=layout)
    # A batch norm after an add stays a node (nothing to fold it into).
    s = g.batch_norm(g.add(c2, c1), rand(12, seed=38), np.abs(rand(12, seed=39)) + 0.5,
                     rand(12, seed=40), rand(12, seed=41), data_format=layout)
    s = g.relu(s)
    p = g.avg_pool2d(s, 2, 2, data_format=layout)
    if layout == "NHWC":
        p = g.transpose(p, (0, 3, 1, 2))
    f = g.linear(g.flatten(p), rand(30, 12 * 4 * 5, seed=24, scale=0.05), rand(30, seed=25))
    f = g.erf(f)
    n = g.layer_norm(f, rand(30, seed=26), rand(30, seed=27))
    g.output(g.softmax(n), "probs")
    g.output(f, "features")
    return g


IMPLS_ALL_REFERENCE = {op: "reference" for op in (
    "conv2d", "activation", "binary", "batch_norm", "pool", "linear", "layer_norm", "softmax",
    "transpose", "erf")}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("impl", ["onednn", "reference"])
def test_program_agrees_with_float32(layout, impl):
    if impl == "onednn" and not HAS_KERNELS:
        pytest.skip(f"oneDNN has no bfloat16 kernels for {ISA}")
    impls = IMPLS_ALL_REFERENCE if impl == "reference" else None
    shape = (3, 9, 11, 5) if layout == "NHWC" else (3, 5, 9, 11)
    x = rand(*shape, seed=28)
    with small_graph(layout) as g, g.compile() as f32, \
            g.compile(precision="bf16", impl=impls) as b:
        want, got = f32.run(x=x), b.run(x=x)
        for name in ("probs", "features"):
            assert got[name].dtype == np.float32
            assert cosine(want[name], got[name]) > 0.999, name
        np.testing.assert_allclose(got["probs"].sum(-1), 1, rtol=1e-2)
        plan = b.plan()
        assert " bf16" in plan and "node(s) compute in bfloat16" in plan
        # The erf reads float32: its input is converted back.
        assert plan.count("convert") >= 2


@needs_bf16
def test_onednn_and_reference_bf16_plans_agree():
    x = rand(2, 5, 9, 11, seed=29)
    with small_graph() as g, g.compile(precision="bf16") as a, \
            g.compile(precision="bf16", impl=IMPLS_ALL_REFERENCE) as r:
        ya, yr = a.run(x=x), r.run(x=x)
        # Two bfloat16 computations: each within a few roundings of the truth.
        for name in ya:
            scale = np.abs(yr[name]).max()
            np.testing.assert_allclose(ya[name], yr[name], atol=2 ** -5 * scale, err_msg=name)


@needs_bf16
def test_resnet50_and_bert_layer():
    """Whole models: cosine >= 0.999 to float32, top-1 agreement reported
    (ResNet-50 on random weights, batch 2)."""
    m = ResNet50()
    x = rand(*m.input_shape(2), seed=30)
    with m.graph(batch=2) as g, g.compile() as f32, g.compile(precision="bf16") as b:
        want = next(iter(f32.run(x=x).values()))
        got = next(iter(b.run(x=x).values()))
    assert cosine(want, got) >= 0.999
    assert (want.argmax(1) == got.argmax(1)).all()
    layer = BertLayer(hidden=96, heads=4, ffn=384)
    xs = rand(2, 33, 96, seed=31)
    with layer.graph(batch=2, seq=33) as g, g.compile() as f32, g.compile(precision="bf16") as b:
        want = next(iter(f32.run(x=xs).values()))
        got = next(iter(b.run(x=xs).values()))
        assert "matmul" in b.plan() and " bf16" in b.plan()
    assert cosine(want, got) >= 0.999


def test_precision_auto_and_bad_precision():
    x = rand(2, 5, 9, 11, seed=32)
    with small_graph() as g:
        with g.compile(precision="auto") as p:
            p.run(x=x)
            first = p.plan().splitlines()
            line = next(s for s in first if s.startswith("precision auto:"))
            expected = "bf16" if INFO["bf16"] == "native" else "f32"
            assert line.startswith(f"precision auto: {expected} ({ISA}")
        with g.compile(precision="auto", calibration=[{"x": x}]) as q:
            q.run(x=x)
            assert "precision auto: int8" in q.plan()
            assert "quantized_conv2d" in q.plan()
        with pytest.raises(mkcache.InvalidArgumentError, match="precision must be 'f32', 'bf16'"):
            g.compile(precision="fp16")
        with pytest.raises(mkcache.InvalidArgumentError, match="calibration is for precision"):
            g.compile(precision="bf16", calibration=[{"x": x}])


@needs_bf16
def test_bf16_program_from_threads():
    """One bfloat16 program run from several threads at once gives each the
    single-threaded answer."""
    import concurrent.futures as cf
    xs = [rand(2, 5, 9, 11, seed=40 + i) for i in range(8)]
    with small_graph() as g, g.compile(precision="bf16") as p:
        want = [p.run(x=x)["probs"] for x in xs]
        with cf.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda x: p.run(x=x)["probs"], xs * 3))
    for i, y in enumerate(got):
        np.testing.assert_array_equal(y, want[i % len(xs)])


@needs_bf16
@pytest.mark.parametrize("model", ["ResNet-18", "BERT layer"])
def test_imported_models_against_onnxruntime(model):
    """mkcache.onnx.load(precision="bf16") on ONNX exports, against
    onnxruntime's float32 on the same file: cosine >= 0.999 (and the same
    top-1 class for the CNN)."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import mkcache.onnx  # noqa: PLC0415
    if model == "BERT layer":
        data = BertLayer(0, hidden=96, heads=4, ffn=384).onnx_model(batch=2, seq=17)
        x = rand(2, 17, 96, seed=42)
    else:
        data = ResNet18(0).onnx_model(image=64)
        x = rand(2, 3, 64, 64, seed=43)
    data = data.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    prog = mkcache.onnx.load(data, input_shapes={"x": x.shape}, precision="bf16")
    try:
        got = next(iter(prog.run(x=x).values()))
        assert " bf16" in prog.plan()
    finally:
        prog.close()
    assert got.dtype == np.float32 and got.shape == want.shape
    assert cosine(want, got) >= 0.999
    if model == "ResNet-18":
        assert (want.argmax(1) == got.argmax(1)).all()
