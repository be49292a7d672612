"""compile(precision="int8") on attention: with VNNI, the matmuls between
two values (the scores and the context) run as quantized_matmul on the
8-bit bytes the query, key and value layers write (their heads viewed by
reshape and transpose, no copy), the mask folded in as the scores'
addend; without VNNI they stay float32, and the plan says why. Against
the float32 program, and the same plan on the reference kernels."""
import numpy as np
import pytest

import mkcache
from mkcache.models import BertLayer

NO_VNNI = mkcache.build_info()["isa"] in ("sse41", "avx", "avx2", "avx512_core")
REFERENCE = {"quantized_linear": "reference", "quantized_matmul": "reference",
             "quantized_conv2d": "reference"}


def cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


def calibration(shape, n=3, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(shape, dtype=np.float32)} for _ in range(n)]


def test_bert_layer_attention_in_eight_bits():
    layer = BertLayer(0, hidden=48, heads=4, ffn=64)
    calib = calibration((2, 11, 48))
    x = np.random.default_rng(2).standard_normal((2, 11, 48), dtype=np.float32)
    with layer.graph(batch=2, seq=None) as g, g.compile() as f32, \
            g.compile(precision="int8", calibration=calib) as q, \
            g.compile(precision="int8", calibration=calib, impl=REFERENCE) as ref:
        want, got, exact = f32.run(x=x)["y"], q.run(x=x)["y"], ref.run(x=x)["y"]
        report = plan = q.plan()
    assert cosine(want, got) > 0.99
    assert cosine(exact, got) > 0.9999
    if NO_VNNI:
        assert "2 matmul(s) of two values kept float32: this CPU has no VNNI" in report
        assert "quantized_matmul" not in plan
        return
    assert "(2 matmul(s) of two values)" in report, report
    assert "b int8 scale" in report and "result int8 scale" in report  # key and value layers
    steps = [line for line in plan.splitlines() if "quantized_matmul" in line]
    assert len(steps) == 2 and all("onednn" in s for s in steps), plan
    # The heads are viewed where the layers wrote them: no converter at all
    # between the query / key / value layers and the matmuls.
    head = plan.split("quantized_matmul 'attention.scores'")[0]
    assert "convert" not in head.split("attention.self.query")[-1], plan
    # The context is written in uint8 for the output layer, through its views.
    assert "node 11 (matmul 'attention.context'): a uint8" in report
    assert "result uint8" in report.split("attention.context")[1].splitlines()[0]


def masked_attention(hidden=32, heads=4, seed=3):
    """x [B, S, hidden] and mask [B, 1, 1, S] -> softmax(q k^T / sqrt(d) +
    mask) v, heads merged back."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    w = {n: (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
         for n in "qkv"}
    g = mkcache.Graph()
    x = g.input("x", (None, None, hidden))
    m = g.input("mask", (None, 1, 1, None))

    def split(v):
        return g.transpose(g.reshape(v, (0, 0, heads, d)), (0, 2, 1, 3))

    q, k, v = (split(g.linear(x, w[n], name=n)) for n in "qkv")
    scores = g.add(g.mul(g.matmul(q, k, transpose_b=True, name="scores"), 1 / np.sqrt(d)), m)
    ctx = g.matmul(g.softmax(scores, -1), v, name="context")
    g.output(g.reshape(g.transpose(ctx, (0, 2, 1, 3)), (0, 0, hidden)), "y")
    return g


def test_mask_folds_into_the_eight_bit_scores():
    rng = np.random.default_rng(4)
    calib = [{"x": rng.standard_normal((2, 9, 32), dtype=np.float32),
              "mask": np.zeros((2, 1, 1, 9), np.float32)} for _ in range(3)]
    x = rng.standard_normal((2, 9, 32), dtype=np.float32)
    mask = np.zeros((2, 1, 1, 9), np.float32)
    mask[1, ..., 6:] = -10000.0  # the second sequence is 6 tokens long
    with masked_attention() as g, g.compile() as f32, \
            g.compile(precision="int8", calibration=calib) as q:
        want, got = f32.run(x=x, mask=mask)["y"], q.run(x=x, mask=mask)["y"]
        plan = q.plan()
        # The padded tokens change nothing of the first 6 rows' results.
        mask2 = mask.copy()
        x2 = x.copy()
        x2[1, 6:] = 5.0
        got2 = q.run(x=x2, mask=mask2)["y"]
    assert cosine(want, got) > 0.99
    if not NO_VNNI:
        assert "(quantized_matmul 'scores') + node" in plan and "as its addend" in plan, plan
    # q, k and v of the padding differ, but masked keys weigh nothing:
    # the real tokens' rows are the same up to their own quantization.
    np.testing.assert_allclose(got2[1, :6], got[1, :6], atol=0.05 * np.abs(got).max())


def test_a_value_read_as_both_operands_stays_float32():
    """h @ h^T: h would be uint8 as a and int8 as b; the matmul stays
    float32 rather than quantize h twice."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    with mkcache.Graph() as g:
        x = g.input("x", (None, 5, 16))
        h = g.linear(x, w, name="h")
        g.output(g.matmul(h, h, transpose_b=True, name="gram"), "y")
        calib = calibration((2, 5, 16))
        with g.compile() as f32, g.compile(precision="int8", calibration=calib) as q:
            xs = rng.standard_normal((2, 5, 16), dtype=np.float32)
            want, got = f32.run(x=xs)["y"], q.run(x=xs)["y"]
            report = q.plan()
    assert "(0 matmul(s) of two values)" in report, report
    assert cosine(want, got) > 0.999


def test_a_viewed_operand_also_read_in_float32():
    """The key's heads feed the scores in int8 and are also a graph output:
    that output is the 8-bit view dequantized, equal to float32 within a
    step of its form."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((16, 16)) / 4).astype(np.float32)
    with mkcache.Graph() as g:
        x = g.input("x", (None, 5, 16))
        q = g.transpose(g.reshape(g.linear(x, w, name="q"), (0, 0, 2, 8)), (0, 2, 1, 3))
        k = g.transpose(g.reshape(g.linear(x, -w, name="k"), (0, 0, 2, 8)), (0, 2, 1, 3))
        g.output(g.matmul(q, k, transpose_b=True, name="scores"), "scores")
        g.output(k, "k")
        calib = calibration((2, 5, 16))
        with g.compile() as f32, g.compile(precision="int8", calibration=calib) as qp:
            xs = calib[0]["x"]
            want, got = f32.run(x=xs), qp.run(x=xs)
    step = np.abs(want["k"]).max() / 63  # int8: at most a step of 1/127 of the peak, twice
    np.testing.assert_allclose(got["k"], want["k"], atol=step)
    assert cosine(want["scores"], got["scores"]) > 0.99


@pytest.mark.skipif(NO_VNNI, reason="8-bit attention matmuls need VNNI (this CPU: "
                    f"{mkcache.build_info()['isa']})")
def test_full_size_bert_layer_cosine():
    layer = BertLayer(0)
    calib = calibration((1, 64, 768), n=2)
    x = np.random.default_rng(7).standard_normal((1, 64, 768), dtype=np.float32)
    with layer.graph(batch=1, seq=None) as g, g.compile() as f32, \
            g.compile(precision="int8", calibration=calib) as q:
        assert cosine(f32.run(x=x)["y"], q.run(x=x)["y"]) > 0.999
