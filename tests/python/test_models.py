"""Whole models (mkcache.models): ResNet-18, a BERT-base encoder layer
and the digits example's CNN (examples/train_digits.py) as programs against
the same models run op by op through the eager calls, fused and not, with
arena reuse and in-place each on and off, and against float64 numpy (and
torch, onnxruntime when installed).

Tolerances: rtol 1e-4 plus an atol of 1e-5 (program vs eager) or 2e-5 (vs
float64) times the output's largest magnitude. Each float32 layer adds a
rounding error of about 1e-7 relative to its output; through ResNet-18's 20
convolutions and 8 residual sums the logits measured 1e-6 of their largest
value away from float64, BERT's layer 6e-7, and the fused program (batch
norms folded into the weights) 5e-7 away from the eager calls: the bounds
leave 10x room for another machine's kernels (another summation order where
the program picks another arrangement than the eager calls) and still catch
a wrong node, which moves the outputs by far more. The atol is scaled because logits
cross zero, where a relative bound alone means nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from mkcache.models import BertLayer, ResNet18, max_relative_error  # noqa: E402
from torch_support import import_torchvision  # noqa: E402
from train_digits import Net as DigitsNet  # noqa: E402

RNG = np.random.default_rng(11)
IMAGE = 64
# Graph nodes: a plan has one step per node (fewer where it fuses) plus its converters.
RESNET_NODES = 69  # 20 conv, 20 batch_norm, 17 relu, 8 add, 2 pools, reshape, linear
BERT_NODES = 22


@pytest.fixture(scope="module")
def resnet():
    return ResNet18(seed=3)


@pytest.fixture(scope="module")
def bert():
    return BertLayer(seed=3)


def close(got, want, atol_scale=1e-5):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol_scale * np.abs(want).max())


def nchw_input(batch, image=IMAGE):
    return RNG.standard_normal((batch, 3, image, image), dtype=np.float32)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no reuse"])
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_resnet18_program_equals_the_eager_calls(resnet, layout, reuse, fuse):
    x = nchw_input(2)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    graph = resnet.graph(2, IMAGE, layout)
    with graph.compile(fuse=fuse, reuse=reuse) as prog:
        graph.close()
        got = prog.run(x=x)["logits"]
        assert got.shape == (2, 1000)
        close(got, resnet.eager(x, layout))
        m = prog.memory
        assert m["steps"] - m["converters"] <= RESNET_NODES
        assert prog.plan().startswith("fused") == fuse  # the batch norms at least
        assert m["lower_bound_bytes"] <= m["arena_bytes"] <= m["naive_bytes"]
        if reuse:
            assert m["arena_bytes"] < m["naive_bytes"] / 2  # 69 values, ~3 live at a time
        else:
            assert m["arena_bytes"] == m["naive_bytes"]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_resnet18_program_at_224_equals_the_eager_calls(resnet, layout):
    """The full-size image, batch 1, in both layouts (the other tests use 64x64)."""
    x = nchw_input(1, 224)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    with resnet.graph(1, 224, layout).compile() as prog:
        close(prog.run(x=x)["logits"], resnet.eager(x, layout))


def test_resnet18_against_float64_numpy(resnet):
    x = nchw_input(1)
    want = resnet.reference(x)
    with resnet.graph(None, IMAGE).compile() as prog:  # batch bound at run time
        close(prog.run(x=x)["logits"], want, 2e-5)
        close(prog.run(x=np.concatenate([x, x]))["logits"], np.concatenate([want, want]), 2e-5)
        assert prog.memory["plans"] == 2
    close(resnet.eager(x), want, 2e-5)


def test_resnet18_layouts_agree(resnet):
    """The same image in NCHW and NHWC gives the same logits."""
    x = nchw_input(1)
    with resnet.graph(1, IMAGE, "NHWC").compile() as prog:
        got = prog.run(x=np.ascontiguousarray(x.transpose(0, 2, 3, 1)))["logits"]
    close(got, resnet.eager(x))


@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "no inplace"])
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no reuse"])
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_bert_layer_program_equals_the_eager_calls(bert, reuse, fuse, inplace):
    graph = bert.graph(1)  # seq bound at run time: one plan per length
    with graph.compile(fuse=fuse, reuse=reuse, inplace=inplace) as prog:
        graph.close()
        for seq in (16, 5):
            x = RNG.standard_normal((1, seq, 768), dtype=np.float32)
            got = prog.run(x=x)["y"]
            assert got.shape == (1, seq, 768)
            close(got, bert.eager(x))
        m = prog.memory
        assert m["plans"] == 2 and m["steps"] - m["converters"] <= BERT_NODES
        # The heads' 4 reshapes and 4 transposes are views (the matmuls read
        # them where they are; the context is written for the transpose
        # after it); fused, the scores' scale is the matmul's own, and each
        # residual add the sum of the linear before it, whose residual is
        # copied to where the linear writes unless it may be written over
        # there (in place; the layer's input never may).
        assert m["views"] == (8 if inplace else 0)
        assert m["converters"] == ((1 if inplace else 2) if fuse else 0)
        assert m["steps"] == BERT_NODES - m["views"] - (3 - m["converters"] if fuse else 0)
        if reuse:
            assert m["lower_bound_bytes"] <= m["arena_bytes"] < m["naive_bytes"]
        else:
            assert m["arena_bytes"] == m["naive_bytes"]


@pytest.mark.parametrize("off", [None, "fuse", "inplace", "reuse"])
def test_bert_layer_program_at_seq_128_equals_the_eager_calls(bert, off):
    """The full sequence length, with every option on and each one off."""
    x = RNG.standard_normal((1, 128, 768), dtype=np.float32)
    options = {"fuse": True, "inplace": True, "reuse": True}
    if off:
        options[off] = False
    with bert.graph(1).compile(**options) as prog:
        close(prog.run(x=x)["y"], bert.eager(x))


def test_bert_layer_against_float64_numpy(bert):
    x = RNG.standard_normal((2, 16, 768), dtype=np.float32)
    want = bert.reference(x)
    with bert.graph(2, 16).compile() as prog:  # every dim static
        close(prog.run(x=x)["y"], want, 2e-5)
    close(bert.eager(x), want, 2e-5)
    # The attention is not near-uniform: the test would see a wrong softmax.
    q = x[0] @ bert.params["attention.self.query.weight"].T
    k = x[0] @ bert.params["attention.self.key.weight"].T
    assert np.std(q[:, :64] @ k[:, :64].T * bert.scale) > 0.5


@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "no inplace"])
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no reuse"])
@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_digits_cnn_program_equals_the_eager_calls(fuse, reuse, inplace):
    """The digits example's CNN (examples/train_digits.py), batch bound at
    run time: an odd batch and a full one."""
    net = DigitsNet(np.random.default_rng(5))
    for k in net.params:  # non-zero biases, so a dropped bias shows
        net.params[k] += np.float32(0.05) * RNG.standard_normal(net.params[k].shape,
                                                                dtype=np.float32)
    graph = net.graph()
    with graph.compile(fuse=fuse, reuse=reuse, inplace=inplace) as prog:
        graph.close()
        for batch in (7, 32):
            x = RNG.random((batch, 1, 8, 8), dtype=np.float32)
            got = prog.run(x=x)["logp"]
            assert got.shape == (batch, 10)
            close(got, net.forward(x, training=False)[0].numpy())
        m = prog.memory
        assert m["plans"] == 2
        assert m["steps"] - m["converters"] == (7 if fuse else 9) - (m["views"])
        assert m["views"] == (1 if inplace else 0)  # the flatten


ALL_REFERENCE = {op: "reference" for op in (
    "conv2d", "activation", "softmax", "binary", "pool", "linear", "matmul", "layer_norm",
    "batch_norm", "concat", "transpose", "reshape")}


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_resnet18_forced_to_reference_agrees_with_onednn(resnet, fuse):
    x = nchw_input(1, 32)
    graph = resnet.graph(1, 32)
    with graph.compile(fuse=fuse) as a, graph.compile(fuse=fuse, impl=ALL_REFERENCE) as b:
        graph.close()
        close(b.run(x=x)["logits"], a.run(x=x)["logits"], 2e-5)
        impls = {s["impl"] for s in b.steps() if s["kind"] == "node"}
        assert impls == {"reference"}
        assert all(s["choice"] == "override (option)" for s in b.steps() if s["kind"] == "node")


def test_bert_layer_forced_to_reference_agrees_with_onednn(bert):
    x = RNG.standard_normal((1, 9, 768), dtype=np.float32)
    graph = bert.graph(1)
    with graph.compile() as a, graph.compile(impl=ALL_REFERENCE) as b:
        graph.close()
        close(b.run(x=x)["y"], a.run(x=x)["y"], 2e-5)
        # The reference matmuls read plain bytes: the heads' views get
        # converters. (Both copy the layer's input to where the first
        # residual sum writes.)
        assert b.memory["converters"] > a.memory["converters"] == 1


def test_models_are_seeded(resnet, bert):
    a, b = ResNet18(seed=3), BertLayer(seed=4)
    assert all(np.array_equal(a.params[k], resnet.params[k]) for k in resnet.params)
    assert not np.array_equal(b.params["output.dense.weight"], bert.params["output.dense.weight"])
    assert len([k for k in a.params if k.endswith(".weight") and a.params[k].ndim == 4]) == 20
    # A state_dict's way: float64 values and num_batches_tracked are fine.
    c = ResNet18(params={**{k: v.astype(np.float64) for k, v in a.params.items()},
                         "bn1.num_batches_tracked": np.array(7)})
    assert c.params.keys() == a.params.keys() and c.params["conv1.weight"].dtype == np.float32


# ------------------------------------------- other frameworks, when installed

def test_resnet18_against_torchvision(resnet):
    torch = pytest.importorskip("torch")
    import_torchvision()
    x = nchw_input(1)
    with torch.inference_mode():
        want = resnet.torch_module()(torch.from_numpy(x)).numpy()
    close(resnet.eager(x), want, 2e-5)


def test_bert_layer_against_torch(bert):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((1, 16, 768), dtype=np.float32)
    with torch.inference_mode():
        want = bert.torch_module()(torch.from_numpy(x)).numpy()
    close(bert.eager(x), want, 2e-5)


@pytest.mark.parametrize("model", ["resnet", "bert"])
def test_onnx_models_agree_in_onnxruntime(resnet, bert, model):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    net = resnet if model == "resnet" else bert
    x = nchw_input(2) if model == "resnet" else RNG.standard_normal((2, 9, 768),
                                                                    dtype=np.float32)
    onnx_model = net.onnx_model(image=IMAGE) if model == "resnet" else net.onnx_model()
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert max_relative_error(sess.run(None, {"x": x})[0], net.eager(x)) < 1e-5
