"""mkcache.models: reference networks with seeded random weights, for the
demo, the examples, the benchmarks and the tests (and for a first look at a
model without downloading one): ResNet-18, ResNet-50 and a BERT-base encoder
layer, each written twice from the same weights, and MobileNetV2 as an ONNX
model and a PyTorch module only:

    net = ResNet18(seed=0)                     # or ResNet50(seed=0)
    g = net.graph(batch=1, layout="NHWC")      # an mkcache.Graph
    with g.compile() as prog:
        logits = prog.run(x=x)["logits"]
    logits = net.eager(x, layout="NHWC")       # the same math, mkcache.* op by op
    want = net.reference(x_nchw)               # float64 numpy

    layer = BertLayer(seed=0)                  # hidden 768, 12 heads, FFN 3072
    g = layer.graph(batch=1)                   # seq bound at run time
    y = layer.eager(x)                         # x: [batch, seq, 768]

The weights are kept under the names PyTorch gives them (torchvision's
resnet18 / resnet50 / mobilenet_v2 state_dict; Hugging Face's BertLayer), so
real weights can be passed in (``ResNet50(params={k: v.numpy() for k, v in
torchvision.models.resnet50(weights=...).state_dict().items()})``).
``torch_module()`` builds the PyTorch counterparts when torch (and
torchvision for the ResNets and MobileNetV2) is installed, and ``onnx_model()`` the ONNX
ones when onnx is: neither is needed for the rest.
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

import mkcache

# ------------------------------------------------------------------ ResNets

STAGE_WIDTHS = (64, 128, 256, 512)  # a block's width per stage (output: x expansion)
BN_EPS = 1e-5


class ResNet:
    """torchvision's ResNet: conv 7x7/2 + BN + relu, max pool 3x3/2 pad 1,
    four stages of blocks (the first block of stages 2-4 strided 2; a
    downsample 1x1 conv + BN on the shortcut where the first block changes
    the stride or the channels), global average pool, fc. BN is inference
    batch normalization with constant statistics, a node of its own in the
    graph (compiling folds it into the convolution's weights unless
    fuse=False; the eager form runs it as a call of its own).

    A subclass gives the blocks per stage (LAYERS) and the block: BasicBlock
    (two 3x3 convs, EXPANSION 1) or Bottleneck (1x1, 3x3 with the stride,
    1x1 to EXPANSION 4 times the width: torchvision's "ResNet v1.5")."""

    NAME, TITLE = "resnet", "ResNet"
    LAYERS: tuple = ()
    EXPANSION = 1

    def __init__(self, seed: int = 0, num_classes: int = 1000, params: dict | None = None):
        self.params = _float32(params) if params is not None else \
            self.random_params(seed, num_classes)
        self.num_classes = self.params["fc.weight"].shape[0]
        self._constants = None

    @classmethod
    def random_params(cls, seed: int = 0, num_classes: int = 1000) -> dict:
        """He-initialized convolutions, BN statistics near (0, 1) and a BN
        scale of 0.5 on each block's last BN and on the downsample's, so the
        residual sums stay within a few units through the blocks (float32
        comparisons then mean something at the output)."""
        p, rng = {}, np.random.default_rng(seed)
        conv, bn = _random_conv_bn(p, rng)
        conv("conv1", 64, 3, 7)
        bn("bn1", 64)
        cin = 64
        for pre, stride, down, width in cls.blocks():
            chans = cin
            for name, bn_name, out, k, _, relu in cls.block_convs(pre, stride, width):
                conv(name, out, chans, k)
                bn(bn_name, out, 1.0 if relu else 0.5)
                chans = out
            if down:
                conv(pre + "downsample.0", chans, cin, 1)
                bn(pre + "downsample.1", chans, 0.5)
            cin = chans
        p["fc.weight"] = (rng.standard_normal((num_classes, cin))
                          / math.sqrt(cin)).astype(np.float32)
        p["fc.bias"] = (rng.standard_normal(num_classes) * 0.01).astype(np.float32)
        return p

    @classmethod
    def blocks(cls):
        """(prefix, stride, has downsample, width) of the blocks, in order."""
        cin = 64
        for s, (width, count) in enumerate(zip(STAGE_WIDTHS, cls.LAYERS), 1):
            for b in range(count):
                stride = 2 if b == 0 and s > 1 else 1
                down = b == 0 and (stride != 1 or cin != width * cls.EXPANSION)
                yield f"layer{s}.{b}.", stride, down, width
                cin = width * cls.EXPANSION

    @classmethod
    def block_convs(cls, pre: str, stride: int, width: int) -> list:
        """A block's convolutions on its main path, in order: (conv name, BN
        name, output channels, kernel size, stride, relu after the BN); the
        last one's relu comes after the residual add. Padding: kernel // 2."""
        if cls.EXPANSION == 1:
            return [(pre + "conv1", pre + "bn1", width, 3, stride, True),
                    (pre + "conv2", pre + "bn2", width, 3, 1, False)]
        return [(pre + "conv1", pre + "bn1", width, 1, 1, True),
                (pre + "conv2", pre + "bn2", width, 3, stride, True),
                (pre + "conv3", pre + "bn3", width * cls.EXPANSION, 1, 1, False)]

    @staticmethod
    def input_shape(batch, image: int = 224, layout: str = "NCHW") -> tuple:
        return (batch, image, image, 3) if layout == "NHWC" else (batch, 3, image, image)

    def _bn(self, name):
        p = self.params
        return (p[name + ".running_mean"], p[name + ".running_var"], p[name + ".weight"],
                p[name + ".bias"])

    def _trunk(self, x, conv_bn, max_pool, add_relu):
        """The stem and the blocks, written once for every form below:
        conv_bn(v, conv name, BN name, stride, padding, relu), max_pool(v)
        and add_relu(main, shortcut) are the form's own."""
        y = max_pool(conv_bn(x, "conv1", "bn1", 2, 3, True))
        for pre, stride, down, width in self.blocks():
            out = y
            for name, bn_name, _, k, s, relu in self.block_convs(pre, stride, width):
                out = conv_bn(out, name, bn_name, s, k // 2, relu)
            if down:
                y = conv_bn(y, pre + "downsample.0", pre + "downsample.1", stride, 0, False)
            y = add_relu(out, y)
        return y

    # ----------------------------------------------------------- the graph
    def graph(self, batch=1, image: int = 224, layout: str = "NCHW") -> mkcache.Graph:
        """x [batch, 3, image, image] (NHWC: [batch, image, image, 3]) ->
        "logits" [batch, num_classes]. batch None: bound at run time."""
        f, p = layout, self.params
        g = mkcache.Graph()
        x = g.input("x", self.input_shape(batch, image, layout), layout=layout)

        def conv_bn(v, name, bn_name, stride, padding, relu):
            v = g.conv2d(v, p[name + ".weight"], stride=stride, padding=padding, data_format=f,
                         name=name)
            v = g.batch_norm(v, *self._bn(bn_name), epsilon=BN_EPS, data_format=f, name=bn_name)
            return g.relu(v) if relu else v

        y = self._trunk(x, conv_bn,
                        lambda v: g.max_pool2d(v, 3, 2, 1, data_format=f, name="maxpool"),
                        lambda a, b: g.relu(g.add(a, b)))
        y = g.flatten(g.global_avg_pool(y, data_format=f, name="avgpool"))
        g.output(g.linear(y, p["fc.weight"], p["fc.bias"], name="fc"), "logits")
        return g

    # ------------------------------------------------------------ eagerly
    def constants(self) -> dict:
        """The parameters as constant Tensors (made once): the eager calls
        convert weights to oneDNN's arrangement once, as a program does."""
        if self._constants is None:
            self._constants = {k: mkcache.Tensor(v, constant=True)
                               for k, v in self.params.items()}
        return self._constants

    def eager(self, x, layout: str = "NCHW") -> np.ndarray:
        """The graph's math, one mkcache call per node -> logits (numpy)."""
        f, c = layout, self.constants()

        def conv_bn(v, name, bn_name, stride, padding, relu):
            v = mkcache.conv2d(v, c[name + ".weight"], stride=stride, padding=padding,
                               data_format=f, name=name)
            v = mkcache.batch_norm(v, c[bn_name + ".running_mean"], c[bn_name + ".running_var"],
                                   c[bn_name + ".weight"], c[bn_name + ".bias"],
                                   epsilon=BN_EPS, data_format=f, name=bn_name)
            return mkcache.relu(v) if relu else v

        y = self._trunk(x, conv_bn,
                        lambda v: mkcache.max_pool2d(v, 3, 2, 1, data_format=f, name="maxpool"),
                        lambda a, b: mkcache.relu(mkcache.add(a, b)))
        y = mkcache.flatten(mkcache.global_avg_pool(y, data_format=f, name="avgpool"))
        return np.asarray(mkcache.linear(y, c["fc.weight"], c["fc.bias"], name="fc"))

    # ---------------------------------------------------------- reference
    def reference(self, x) -> np.ndarray:
        """float64 numpy of NCHW x (im2col convolutions)."""
        p = {k: v.astype(np.float64) for k, v in self.params.items()}

        def conv_bn(v, name, bn_name, stride, padding, relu):
            v = _conv2d_f64(v, p[name + ".weight"], stride, padding)
            inv = p[bn_name + ".weight"] / np.sqrt(p[bn_name + ".running_var"] + BN_EPS)
            v = v * inv[:, None, None] + (p[bn_name + ".bias"]
                                          - p[bn_name + ".running_mean"] * inv)[:, None, None]
            return np.maximum(v, 0) if relu else v

        y = self._trunk(np.asarray(x, np.float64), conv_bn,
                        lambda v: _max_pool_f64(v, 3, 2, 1), lambda a, b: np.maximum(a + b, 0))
        return y.mean(axis=(2, 3)) @ p["fc.weight"].T + p["fc.bias"]

    # ------------------------------------------------------ other frameworks
    def torch_module(self):
        """torchvision's model of this name with these weights, in eval mode
        (needs torch and torchvision)."""
        return _torchvision_model(self.NAME, self.num_classes, self.params)

    def onnx_model(self, batch=None, image: int = 224):
        """An ONNX model (opset 17) of the same nodes, NCHW input "x" (batch
        None: symbolic) (needs onnx)."""
        b = _OnnxBuilder()
        const, node = b.const, b.node

        def conv_bn(v, name, bn_name, stride, padding, relu):
            w = self.params[name + ".weight"]
            k = w.shape[2]
            out = node("Conv", [v, const(name, w)], kernel_shape=[k, k], strides=[stride] * 2,
                       pads=[padding] * 4)
            mean, var, scale, shift = self._bn(bn_name)
            out = node("BatchNormalization",
                       [out, const(bn_name + ".weight", scale), const(bn_name + ".bias", shift),
                        const(bn_name + ".running_mean", mean),
                        const(bn_name + ".running_var", var)], epsilon=BN_EPS)
            return node("Relu", [out]) if relu else out

        y = self._trunk("x", conv_bn,
                        lambda v: node("MaxPool", [v], kernel_shape=[3, 3], strides=[2, 2],
                                       pads=[1, 1, 1, 1]),
                        lambda a, b: node("Relu", [node("Add", [a, b])]))
        flat = node("Flatten", [node("GlobalAveragePool", [y])])
        node("Gemm", [flat, const("fc.weight", self.params["fc.weight"]),
                      const("fc.bias", self.params["fc.bias"])], transB=1, out="logits")
        return b.model(self.NAME, [batch or "batch", 3, image, image],
                       [batch or "batch", self.num_classes], "logits")


class ResNet18(ResNet):
    """torchvision's resnet18: BasicBlocks [2, 2, 2, 2]; 20 convolutions."""
    NAME, TITLE = "resnet18", "ResNet-18"
    LAYERS = (2, 2, 2, 2)
    EXPANSION = 1


class ResNet50(ResNet):
    """torchvision's resnet50: Bottleneck blocks [3, 4, 6, 3], expansion 4,
    the stride on the 3x3 conv; 53 convolutions."""
    NAME, TITLE = "resnet50", "ResNet-50"
    LAYERS = (3, 4, 6, 3)
    EXPANSION = 4


# --------------------------------------------------------------- MobileNetV2

# torchvision's inverted residual setting: (expansion, output channels,
# blocks, stride of the first block)
MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2:
    """torchvision's mobilenet_v2 (width 1.0): conv 3x3/2 to 32 + BN +
    ReLU6; 17 inverted residual blocks (a 1x1 expand conv + BN + ReLU6
    unless the expansion is 1, a 3x3 depthwise conv with the block's stride
    + BN + ReLU6, a 1x1 project conv + BN, the input added back when the
    stride is 1 and the channels stay); a 1x1 conv to 1280 + BN + ReLU6,
    global average pool, flatten, linear. Written as an ONNX model and as
    the PyTorch module; the weights keep torchvision's state_dict names."""

    NAME, TITLE = "mobilenet_v2", "MobileNetV2"
    STEM, LAST = 32, 1280

    def __init__(self, seed: int = 0, num_classes: int = 1000, params: dict | None = None):
        self.params = _float32(params) if params is not None else \
            self.random_params(seed, num_classes)
        self.num_classes = self.params["classifier.1.weight"].shape[0]

    @classmethod
    def blocks(cls):
        """(prefix, input channels, expansion, output channels, stride) of
        the inverted residual blocks, in order (features.1 to features.17)."""
        cin, index = cls.STEM, 1
        for t, c, n, s in MOBILENET_V2_SETTING:
            for b in range(n):
                yield f"features.{index}.conv.", cin, t, c, s if b == 0 else 1
                cin, index = c, index + 1

    @classmethod
    def block_convs(cls, pre: str, cin: int, t: int, cout: int, stride: int) -> list:
        """A block's convolutions in order: (conv name, BN name, output
        channels, kernel size, stride, groups, ReLU6 after the BN). The
        names follow torchvision's nn.Sequential: Conv2dNormActivation
        entries hold the conv at .0 and the BN at .1; the project conv and
        its BN are plain entries of their own."""
        hidden = cin * t
        convs, i = [], 0
        if t != 1:
            convs.append((f"{pre}0.0", f"{pre}0.1", hidden, 1, 1, 1, True))
            i = 1
        convs.append((f"{pre}{i}.0", f"{pre}{i}.1", hidden, 3, stride, hidden, True))
        convs.append((f"{pre}{i + 1}", f"{pre}{i + 2}", cout, 1, 1, 1, False))
        return convs

    @classmethod
    def random_params(cls, seed: int = 0, num_classes: int = 1000) -> dict:
        """He-initialized convolutions (fan-in per group), BN statistics near
        (0, 1), a BN scale of 0.5 on each block's project BN so the residual
        sums stay within a few units."""
        p, rng = {}, np.random.default_rng(seed)
        conv, bn = _random_conv_bn(p, rng)
        conv("features.0.0", cls.STEM, 3, 3)
        bn("features.0.1", cls.STEM)
        cin = cls.STEM
        for pre, _, t, cout, stride in cls.blocks():
            chans = cin
            for name, bn_name, out, k, _, groups, relu6 in cls.block_convs(pre, cin, t, cout,
                                                                          stride):
                conv(name, out, chans // groups, k)
                bn(bn_name, out, 1.0 if relu6 else 0.5)
                chans = out
            cin = chans
        last = f"features.{len(list(cls.blocks())) + 1}"
        conv(last + ".0", cls.LAST, cin, 1)
        bn(last + ".1", cls.LAST)
        p["classifier.1.weight"] = (rng.standard_normal((num_classes, cls.LAST))
                                    / math.sqrt(cls.LAST)).astype(np.float32)
        p["classifier.1.bias"] = (rng.standard_normal(num_classes) * 0.01).astype(np.float32)
        return p

    @staticmethod
    def input_shape(batch, image: int = 224) -> tuple:
        return (batch, 3, image, image)

    def _trunk(self, x, conv_bn, add):
        """The stem, the blocks and the last conv, written once for every
        form: conv_bn(v, conv name, BN name, stride, padding, groups, relu6)
        and add(block output, block input) are the form's own."""
        y = conv_bn(x, "features.0.0", "features.0.1", 2, 1, 1, True)
        index = 1
        for pre, cin, t, cout, stride in self.blocks():
            out = y
            for name, bn_name, _, k, s, groups, relu6 in self.block_convs(pre, cin, t, cout,
                                                                          stride):
                out = conv_bn(out, name, bn_name, s, k // 2, groups, relu6)
            y = add(out, y) if stride == 1 and cin == cout else out
            index += 1
        return conv_bn(y, f"features.{index}.0", f"features.{index}.1", 1, 0, 1, True)

    # ------------------------------------------------------ other frameworks
    def torch_module(self):
        """torchvision's mobilenet_v2 with these weights, in eval mode (needs
        torch and torchvision)."""
        return _torchvision_model(self.NAME, self.num_classes, self.params)

    def onnx_model(self, batch=None, image: int = 224):
        """An ONNX model (opset 17) of the same nodes, NCHW input "x" (batch
        None: symbolic) (needs onnx). ReLU6 is Clip with its bounds given as
        inputs (the form since opset 11), as PyTorch's exporter writes it."""
        p, b = self.params, _OnnxBuilder()
        const, node = b.const, b.node
        low, high = const("relu6_min", np.array(0.0)), const("relu6_max", np.array(6.0))

        def conv_bn(v, name, bn_name, stride, padding, groups, relu6):
            w = p[name + ".weight"]
            k = w.shape[2]
            out = node("Conv", [v, const(name + ".weight", w)], kernel_shape=[k, k],
                       strides=[stride] * 2, pads=[padding] * 4, group=groups)
            out = node("BatchNormalization",
                       [out] + [const(bn_name + s, p[bn_name + s])
                                for s in (".weight", ".bias", ".running_mean", ".running_var")],
                       epsilon=BN_EPS)
            return node("Clip", [out, low, high]) if relu6 else out

        y = self._trunk("x", conv_bn, lambda a, b: node("Add", [a, b]))
        flat = node("Flatten", [node("GlobalAveragePool", [y])])
        node("Gemm", [flat, const("classifier.1.weight", p["classifier.1.weight"]),
                      const("classifier.1.bias", p["classifier.1.bias"])], transB=1,
             out="logits")
        return b.model(self.NAME, [batch or "batch", 3, image, image],
                       [batch or "batch", self.num_classes], "logits")


def _conv2d_f64(x, w, stride, pad):
    """im2col + one matmul."""
    n, (o, c, k, _) = x.shape[0], w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    cols = cols[:, :, ::stride, ::stride]  # N, C, OH, OW, K, K
    oh, ow = cols.shape[2:4]
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k)
    return (cols @ w.reshape(o, -1).T).reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def _max_pool_f64(x, k, stride, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    return win[:, :, ::stride, ::stride].max(axis=(4, 5))


# ----------------------------------------------------------------- BERT layer

LN_EPS = 1e-12  # BERT's


class BertLayer:
    """One BERT-base encoder layer (Hugging Face's BertLayer, inference):
    self-attention (Q, K, V linears; heads by reshape + transpose; scores by
    matmul with transpose_b, scaled by a binary mul with 1/sqrt(head dim);
    softmax; context matmul), output linear, residual add + layer norm
    (post-LN), then FFN linear with a fused exact gelu, linear, residual add
    + layer norm. No attention mask (every token attends to every token)."""

    LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value",
               "attention.output.dense", "intermediate.dense", "output.dense")

    def __init__(self, seed: int = 0, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 params: dict | None = None):
        if hidden % heads:
            raise ValueError("hidden must be a multiple of heads")
        self.hidden, self.heads, self.ffn = hidden, heads, ffn
        self.head_dim = hidden // heads
        self.params = _float32(params) if params is not None else self.random_params(seed)
        self._constants = None

    def random_params(self, seed: int = 0) -> dict:
        """Linears with std 1/sqrt(fan_in) (attention scores then spread
        over a few units, so the softmax is far from uniform), small biases,
        layer-norm scales near 1."""
        rng = np.random.default_rng(seed)
        h, f = self.hidden, self.ffn
        shapes = {"attention.self.query": (h, h), "attention.self.key": (h, h),
                  "attention.self.value": (h, h), "attention.output.dense": (h, h),
                  "intermediate.dense": (f, h), "output.dense": (h, f)}
        p = {}
        for name, (o, i) in shapes.items():
            p[name + ".weight"] = (rng.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32)
            p[name + ".bias"] = (rng.standard_normal(o) * 0.02).astype(np.float32)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            p[name + ".weight"] = (1 + rng.standard_normal(h) * 0.1).astype(np.float32)
            p[name + ".bias"] = (rng.standard_normal(h) * 0.1).astype(np.float32)
        return p

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    # ----------------------------------------------------------- the graph
    def graph(self, batch=1, seq=None) -> mkcache.Graph:
        """x [batch, seq, hidden] -> "y" [batch, seq, hidden]; None dims
        (seq by default) are bound at run time."""
        p, nh, hd = self.params, self.heads, self.head_dim
        g = mkcache.Graph()
        x = g.input("x", (batch, seq, self.hidden))

        def linear(v, name, activation=None):
            return g.linear(v, p[name + ".weight"], p[name + ".bias"], activation=activation,
                            name=name)

        def heads(v):  # [B, S, hidden] -> [B, heads, S, head_dim]
            return g.transpose(g.reshape(v, (0, 0, nh, hd)), (0, 2, 1, 3))

        q = heads(linear(x, "attention.self.query"))
        k = heads(linear(x, "attention.self.key"))
        v = heads(linear(x, "attention.self.value"))
        scores = g.mul(g.matmul(q, k, transpose_b=True, name="attention.scores"), self.scale)
        probs = g.softmax(scores, -1, name="attention.probs")
        ctx = g.matmul(probs, v, name="attention.context")
        ctx = g.reshape(g.transpose(ctx, (0, 2, 1, 3)), (0, 0, self.hidden))
        a = linear(ctx, "attention.output.dense")
        h = g.layer_norm(g.add(a, x), p["attention.output.LayerNorm.weight"],
                         p["attention.output.LayerNorm.bias"], epsilon=LN_EPS,
                         name="attention.output.LayerNorm")
        i = linear(h, "intermediate.dense", activation="gelu")
        o = linear(i, "output.dense")
        y = g.layer_norm(g.add(o, h), p["output.LayerNorm.weight"], p["output.LayerNorm.bias"],
                         epsilon=LN_EPS, name="output.LayerNorm")
        g.output(y, "y")
        return g

    # ------------------------------------------------------------ eagerly
    def constants(self) -> dict:
        if self._constants is None:
            self._constants = {k: mkcache.Tensor(v, constant=True)
                               for k, v in self.params.items()}
        return self._constants

    def eager(self, x) -> np.ndarray:
        """The graph's math, one mkcache call per node -> y (numpy)."""
        c, nh, hd = self.constants(), self.heads, self.head_dim
        b, s, hidden = x.shape

        def linear(v, name, activation=None):
            return mkcache.linear(v, c[name + ".weight"], c[name + ".bias"],
                                  activation=activation, name=name)

        def heads(v):
            return mkcache.transpose(mkcache.reshape(v, (b, s, nh, hd)), (0, 2, 1, 3))

        q = heads(linear(x, "attention.self.query"))
        k = heads(linear(x, "attention.self.key"))
        v = heads(linear(x, "attention.self.value"))
        scores = mkcache.mul(mkcache.matmul(q, k, transpose_b=True, name="attention.scores"),
                             self.scale)
        probs = mkcache.softmax(scores, -1, name="attention.probs")
        ctx = mkcache.matmul(probs, v, name="attention.context")
        ctx = mkcache.reshape(mkcache.transpose(ctx, (0, 2, 1, 3)), (b, s, hidden))
        a = linear(ctx, "attention.output.dense")
        h = mkcache.layer_norm(mkcache.add(a, x), c["attention.output.LayerNorm.weight"],
                               c["attention.output.LayerNorm.bias"], epsilon=LN_EPS,
                               name="attention.output.LayerNorm")
        i = linear(h, "intermediate.dense", activation="gelu")
        o = linear(i, "output.dense")
        y = mkcache.layer_norm(mkcache.add(o, h), c["output.LayerNorm.weight"],
                               c["output.LayerNorm.bias"], epsilon=LN_EPS, name="output.LayerNorm")
        return np.asarray(y)

    # ---------------------------------------------------------- reference
    def reference(self, x) -> np.ndarray:
        """float64 numpy."""
        p = {k: v.astype(np.float64) for k, v in self.params.items()}
        x = np.asarray(x, np.float64)
        b, s, hidden = x.shape

        def linear(v, name):
            return v @ p[name + ".weight"].T + p[name + ".bias"]

        def heads(v):
            return v.reshape(b, s, self.heads, self.head_dim).transpose(0, 2, 1, 3)

        def layer_norm(v, name):
            v = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + LN_EPS)
            return v * p[name + ".weight"] + p[name + ".bias"]

        q, k, v = (heads(linear(x, "attention.self." + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) * self.scale
        e = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = (e / e.sum(-1, keepdims=True)) @ v
        ctx = ctx.transpose(0, 2, 1, 3).reshape(b, s, hidden)
        h = layer_norm(linear(ctx, "attention.output.dense") + x, "attention.output.LayerNorm")
        i = linear(h, "intermediate.dense")
        i = 0.5 * i * (1 + _erf(i / math.sqrt(2)))
        return layer_norm(linear(i, "output.dense") + h, "output.LayerNorm")

    # ------------------------------------------------------ other frameworks
    def torch_module(self):
        """torch.nn.TransformerEncoderLayer (batch first, post-LN, exact gelu,
        no dropout) with these weights, in eval mode (needs torch)."""
        import torch
        p = {k: torch.from_numpy(np.array(v)) for k, v in self.params.items()}
        m = torch.nn.TransformerEncoderLayer(self.hidden, self.heads, self.ffn, dropout=0.0,
                                             activation="gelu", layer_norm_eps=LN_EPS,
                                             batch_first=True, norm_first=False)
        qkv = ("attention.self.query", "attention.self.key", "attention.self.value")
        state = {
            "self_attn.in_proj_weight": torch.cat([p[n + ".weight"] for n in qkv]),
            "self_attn.in_proj_bias": torch.cat([p[n + ".bias"] for n in qkv]),
            "self_attn.out_proj.weight": p["attention.output.dense.weight"],
            "self_attn.out_proj.bias": p["attention.output.dense.bias"],
            "linear1.weight": p["intermediate.dense.weight"],
            "linear1.bias": p["intermediate.dense.bias"],
            "linear2.weight": p["output.dense.weight"], "linear2.bias": p["output.dense.bias"],
            "norm1.weight": p["attention.output.LayerNorm.weight"],
            "norm1.bias": p["attention.output.LayerNorm.bias"],
            "norm2.weight": p["output.LayerNorm.weight"], "norm2.bias": p["output.LayerNorm.bias"],
        }
        m.load_state_dict(state)
        return m.eval()

    def onnx_model(self, batch=None, seq=None):
        """An ONNX model (opset 17) of the same nodes, input "x" [batch, seq,
        hidden] (None: symbolic) (needs onnx)."""
        p, b = self.params, _OnnxBuilder()
        const, node = b.const, b.node

        def linear(v, name):  # weights stored transposed: MatMul + Add
            y = node("MatMul", [v, const(name + ".weight_t", p[name + ".weight"].T)])
            return node("Add", [y, const(name + ".bias", p[name + ".bias"])])

        const("heads_shape", np.array([0, 0, self.heads, self.head_dim], np.int64))
        const("hidden_shape", np.array([0, 0, self.hidden], np.int64))

        def heads(v):
            return node("Transpose", [node("Reshape", [v, "heads_shape"])], perm=[0, 2, 1, 3])

        def layer_norm(v, name):
            return node("LayerNormalization", [v, const(name + ".weight", p[name + ".weight"]),
                                               const(name + ".bias", p[name + ".bias"])],
                        axis=-1, epsilon=LN_EPS)

        q, k, v = (heads(linear("x", "attention.self." + n)) for n in ("query", "key", "value"))
        kt = node("Transpose", [k], perm=[0, 1, 3, 2])
        scores = node("Mul", [node("MatMul", [q, kt]),
                              const("scale", np.array(self.scale, np.float32))])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), "hidden_shape"])
        h = layer_norm(node("Add", [linear(ctx, "attention.output.dense"), "x"]),
                       "attention.output.LayerNorm")
        i = linear(h, "intermediate.dense")  # gelu: 0.5 i (1 + erf(i / sqrt 2))
        e = node("Erf", [node("Mul", [i, const("inv_sqrt2", np.array(1 / math.sqrt(2),
                                                                     np.float32))])])
        i = node("Mul", [node("Mul", [i, const("half", np.array(0.5, np.float32))]),
                         node("Add", [e, const("one", np.array(1.0, np.float32))])])
        y = layer_norm(node("Add", [linear(i, "output.dense"), h]), "output.LayerNorm")
        node("Identity", [y], out="y")
        dims = [batch or "batch", seq or "seq", self.hidden]
        return b.model("bert_layer", dims, dims, "y")


_erf = np.vectorize(math.erf, otypes=[np.float64])


# ----------------------------------------------------------------- shared bits

def _torchvision_model(name: str, num_classes: int, params: dict):
    """torchvision's model `name` (no downloaded weights) holding `params`
    (its state_dict's names), in eval mode."""
    import torch  # noqa: PLC0415 (torch only when asked)
    import torchvision  # noqa: PLC0415
    model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    state = model.state_dict()
    for k, v in params.items():
        state[k] = torch.from_numpy(np.array(v))
    model.load_state_dict(state)
    return model.eval()


def _random_conv_bn(params: dict, rng):
    """conv(name, out, in_per_group, k) and bn(name, channels, scale=1.0),
    which add a He-initialized convolution's weights and a batch norm's
    parameters (statistics near (0, 1), its scale within [0.5, 1] * scale)
    to `params` under PyTorch's names."""
    def conv(name, o, i, k):
        params[name + ".weight"] = (rng.standard_normal((o, i, k, k))
                                    * math.sqrt(2.0 / (i * k * k))).astype(np.float32)

    def bn(name, c, scale=1.0):
        params[name + ".weight"] = (rng.uniform(0.5, 1.0, c) * scale).astype(np.float32)
        params[name + ".bias"] = (rng.standard_normal(c) * 0.1).astype(np.float32)
        params[name + ".running_mean"] = (rng.standard_normal(c) * 0.1).astype(np.float32)
        params[name + ".running_var"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    return conv, bn


class _OnnxBuilder:
    """What the onnx_model() methods write with (onnx.helper underneath):
    initializers, nodes with numbered outputs, and the model (opset 17,
    float32 input "x")."""

    def __init__(self):
        from onnx import helper, numpy_helper  # noqa: PLC0415 (onnx only when asked)
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, name, array):
        """An initializer (float arrays as float32, integer ones as they are)."""
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op, inputs, out=None, **attrs):
        if out is None:
            out, self.count = f"t{self.count}", self.count + 1
        self.nodes.append(self.helper.make_node(op, inputs, [out], **attrs))
        return out

    def model(self, name, input_dims, output_dims, output):
        from onnx import TensorProto  # noqa: PLC0415
        h = self.helper
        graph = h.make_graph(self.nodes, name,
                             [h.make_tensor_value_info("x", TensorProto.FLOAT, input_dims)],
                             [h.make_tensor_value_info(output, TensorProto.FLOAT, output_dims)],
                             self.inits)
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _float32(params: dict) -> dict:
    """C-contiguous float32 copies (a state_dict's num_batches_tracked left out)."""
    return {k: np.ascontiguousarray(v, np.float32) for k, v in params.items()
            if not k.endswith("num_batches_tracked")}


def interleaved(fns: dict, runs: int, settle: float = 0.0) -> dict:
    """{name: median seconds per call}: each repetition calls every function
    once, in turn (round-robin, the first one rotating), so a slow spell of
    a shared machine falls on all of them alike. `settle`: seconds to wait
    before each call, while the previous runtime's idle threads stop
    spinning (untimed)."""
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(runs):
        for name in names[r % len(names):] + names[:r % len(names)]:  # first one rotates
            fn = fns[name]
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def max_relative_error(got, want) -> float:
    """max |got - want| / max |want|: one number for "how far apart"."""
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


def plan_summary(prog) -> str:
    """The plan's last line (its totals), with the step and converter counts
    (and its first line when it says what was fused)."""
    m = prog.memory
    lines = prog.plan().strip().splitlines()
    fused = f"\n  {lines[0]}" if lines[0].startswith("fused") else ""
    return (f"{lines[-1]}\n  {m['steps']} steps, {m['converters']} converters, "
            f"{m['plans']} plan(s)" + fused)


def memory_summary(prog) -> str:
    m = prog.memory
    mib = 1 << 20
    return (f"arena {m['arena_bytes'] / mib:.2f} MiB, lower bound "
            f"{m['lower_bound_bytes'] / mib:.2f} MiB, naive {m['naive_bytes'] / mib:.2f} MiB, "
            f"constants {m['constant_bytes'] / mib:.2f} MiB")
