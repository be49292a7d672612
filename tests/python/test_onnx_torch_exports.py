"""Models exported by torch.onnx, loaded with mkcache.onnx.load and checked
against ONNX Runtime on the same inputs: torchvision's ResNet-50,
MobileNetV2 and EfficientNet-B0 and a small transformers BertModel, each by
the TorchScript exporter (dynamo=False, opset 17) and by the dynamo exporter
(dynamo=True, opset 18), with a batch (and for BERT a sequence) bound at run
time, run at two sizes through one program. Random weights (nothing is
downloaded); small inputs, so the module runs in well under a minute or two
on two cores. Skipped where torch, torchvision, transformers or onnxscript
is not installed."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

import mkcache.onnx  # noqa: E402
from torch_support import import_torchvision, import_transformers  # noqa: E402

RTOL = 1e-4


def _export(module, args, path, dynamo: bool, names: list, outputs: list, dynamic: dict):
    """module exported to path; dynamic: {input name: {axis: dim name}}."""
    if dynamo:
        pytest.importorskip("onnxscript")
        dims = {}
        shapes = {n: {a: dims.setdefault(d, torch.export.Dim(d, max=64 if d == "seq" else None))
                      for a, d in axes.items()} for n, axes in dynamic.items()}
        kwargs = dict(dynamo=True, opset_version=18, external_data=False,
                      dynamic_shapes=shapes)
    else:
        axes = dict(dynamic)
        kwargs = dict(dynamo=False, opset_version=17, dynamic_axes=axes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), input_names=names, output_names=outputs,
                          verbose=False, **kwargs)
    return path


def _compare(path, feeds_list, addends=0):
    """The model at `path` through one program and through ONNX Runtime for
    each feeds; the largest difference relative to each output's largest
    magnitude. `addends`: how many adds (attention masks) the plan must
    have run as their matmul's addend."""
    model = onnx.load(str(path))
    names = [o.name for o in model.graph.output]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    with mkcache.onnx.load(str(path)) as prog:
        for feeds in feeds_list:
            got = prog.run(**feeds)
            for name, want in zip(names, sess.run(None, feeds)):
                g = got[name]
                assert g.shape == want.shape, (name, g.shape, want.shape)
                scale = float(np.abs(want).max()) or 1.0
                diff = float(np.abs(g - want).max()) / scale
                assert diff <= RTOL, f"{path.name}: {name} differs by {diff:.2e} of its scale"
                worst = max(worst, diff)
        plan = prog.plan()
        assert plan.count("as its addend") == addends, plan
    return worst


# --------------------------------------------------------------- torchvision

VISION = ["resnet50", "mobilenet_v2", "efficientnet_b0"]


def _vision_model(name):
    tv = import_torchvision()
    torch.manual_seed(0)
    m = getattr(tv.models, name)(weights=None).eval()
    # Statistics as a trained network has (not 0 and 1): the normalisation
    # and everything after it see values of varied scale.
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    return m


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", VISION)
def test_torchvision(name, dynamo, tmp_path):
    m = _vision_model(name)
    rng = np.random.default_rng(5)
    path = _export(m, (torch.randn(2, 3, 64, 64),), tmp_path / f"{name}.onnx", dynamo,
                   ["x"], ["y"], {"x": {0: "batch"}})
    feeds = [{"x": rng.standard_normal((n, 3, 64, 64)).astype(np.float32)} for n in (2, 1)]
    _compare(path, feeds)


# --------------------------------------------------------------------- BERT

def _bert_config(transformers):
    return transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=100, max_position_embeddings=64, type_vocab_size=2,
        attn_implementation="eager")


def _bert_feeds(rng, batch, seq, position_ids=True):
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - 2:] = 0  # the last sequence padded
    feeds = {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64),
             "attention_mask": mask}
    if position_ids:
        feeds["position_ids"] = np.broadcast_to(np.arange(seq, dtype=np.int64),
                                                (batch, seq)).copy()
    return feeds


def _bert_example(feeds):
    return tuple(torch.from_numpy(v) for v in feeds.values())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_bert(dynamo, tmp_path):
    """BertModel with the attention mask in BERT's own additive form,
    (1 - mask) * the float minimum, token types of zeros (ConstantOfShape of
    the ids' run-time shape) and the position ids given."""
    transformers = import_transformers()
    torch.manual_seed(0)
    bert = transformers.BertModel(_bert_config(transformers)).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, position_ids):
            additive = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * \
                torch.finfo(torch.float32).min
            out = self.bert(input_ids=input_ids, attention_mask=additive,
                            token_type_ids=torch.zeros_like(input_ids),
                            position_ids=position_ids)
            return out.last_hidden_state, out.pooler_output

    rng = np.random.default_rng(7)
    names = ["input_ids", "attention_mask", "position_ids"]
    path = _export(Bert().eval(), _bert_example(_bert_feeds(rng, 2, 7)),
                   tmp_path / "bert.onnx", dynamo, names,
                   ["last_hidden_state", "pooler_output"],
                   {n: {0: "batch", 1: "seq"} for n in names})
    # Each layer's mask added to its scores inside the scores' matmul.
    _compare(path, [_bert_feeds(rng, 2, 7), _bert_feeds(rng, 3, 11)], addends=2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_bert_with_its_own_mask_builder(dynamo, tmp_path):
    """BertModel given the 2-D padding mask and nothing else: transformers
    builds the 4-D mask itself, from ranges over the run-time batch and
    sequence (GatherND of the padding mask by them for the dynamo exporter,
    a Gather of it flattened by their integer arithmetic for TorchScript's),
    and its embeddings slice the position ids' buffer to the run-time
    sequence and gather the token types' buffer by them (GatherElements)."""
    transformers = import_transformers()
    torch.manual_seed(0)
    bert = transformers.BertModel(_bert_config(transformers)).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    rng = np.random.default_rng(7)
    names = ["input_ids", "attention_mask"]
    path = _export(Bert().eval(), _bert_example(_bert_feeds(rng, 2, 7, False)),
                   tmp_path / "bert.onnx", dynamo, names,
                   ["last_hidden_state", "pooler_output"],
                   {n: {0: "batch", 1: "seq"} for n in names})
    _compare(path, [_bert_feeds(rng, 2, 7, False), _bert_feeds(rng, 3, 11, False)], addends=2)


def test_bert_long_sequences_run_each_attention_as_one_step(tmp_path):
    """The same model at a length where the scores of all heads outgrow the
    L2 caches of the threads in use: each layer's scores (with its mask),
    softmax and context run as one step in row blocks per thread, and the
    outputs still match ONNX Runtime's."""
    transformers = import_transformers()
    info = mkcache.build_info()
    threads, l2 = mkcache.get_num_threads(), info["l2_cache_bytes"]
    batch, heads = 2, 4
    seq = 256  # the fewest keys the step takes
    while batch * heads * seq * seq * 4 <= l2 * threads:
        seq += 32
    seq += 5  # odd
    if seq > 1000:
        pytest.skip(f"an L2 cache of {l2} bytes needs a longer sequence than the model takes")
    torch.manual_seed(0)
    config = _bert_config(transformers)
    config.max_position_embeddings = 1024
    bert = transformers.BertModel(config).eval()

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(8)
    names = ["input_ids", "attention_mask"]
    path = _export(Bert().eval(), _bert_example(_bert_feeds(rng, 2, 7, False)),
                   tmp_path / "bert.onnx", False, names, ["last_hidden_state"],
                   {n: {0: "batch", 1: "seq"} for n in names})
    feeds = _bert_feeds(rng, batch, seq, False)
    _compare(path, [feeds], addends=2)
    with mkcache.onnx.load(str(path)) as prog:
        prog.run(**feeds)
        plan = prog.plan()
    assert plan.count("as one attention step") == 2, plan
