"""The `reference` implementation of programs on every forward operator:
each case, a function of the eager operators, traced into a program with
every node forced to `reference` and compared with the same function run
eagerly (oneDNN) - odd shapes, channels not a multiple of 16, batch > 1,
both layouts where the operator has a channel axis, stride, padding and
dilation varied. Also a program forced to `onednn`, which must match too.

Tolerance: rtol 2e-5 and an atol of 2e-5 times the output's largest
magnitude: the reference sums in double and computes transcendental
functions exactly, oneDNN in float32 with its approximations (for log and
the LRN power a few 1e-6 relative; the kernels' own C++ tests bound each
operator more tightly); a wrong index or window is far beyond it."""
import numpy as np
import pytest

import mkcache

RNG = np.random.default_rng(8)
ALL = ("conv2d", "conv3d", "conv2d_transpose", "activation", "softmax", "binary", "pool", "linear",
       "matmul", "layer_norm", "batch_norm", "lrn", "concat", "transpose", "reshape")


def rand(*shape, scale=1.0, positive=False):
    a = RNG.standard_normal(shape) * scale
    return (np.abs(a) + 0.1 if positive else a).astype(np.float32)


def nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


W2 = rand(6, 3, 3, 3, scale=0.3)        # conv2d, groups 1
WG = rand(6, 2, 3, 3, scale=0.3)        # conv2d, groups 2 (4 input channels)
WT = rand(6, 3, 3, 3, scale=0.3)        # conv2d_transpose, groups 2: [I=6, O/g=3, k, k]
W3 = rand(5, 3, 2, 3, 3, scale=0.3)     # conv3d
B6, B5 = rand(6), rand(5)


def case_inputs(layout, *shape):
    x = rand(*shape)
    return (nhwc(x) if layout == "NHWC" else x), {"x": layout} if layout == "NHWC" else {}


CASES = {
    "conv2d": lambda L: (lambda x: mkcache.conv2d(
        x, W2, B6, stride=(2, 1), padding=(1, 2), dilation=(1, 2), data_format=L,
        activation="relu"), (2, 3, 9, 11)),
    "conv2d groups": lambda L: (lambda x: mkcache.conv2d(
        x, WG, None, padding=1, groups=2, data_format=L), (3, 4, 7, 5)),
    "conv2d_transpose": lambda L: (lambda x: mkcache.conv2d_transpose(
        x, WT, B6, stride=2, padding=1, output_padding=1, groups=2, data_format=L), (2, 6, 5, 4)),
    "conv3d": lambda L: (lambda x: mkcache.conv3d(
        x, W3, B5, stride=(1, 2, 1), padding=1, data_format="NDHWC" if L == "NHWC" else "NCDHW"),
        (2, 3, 4, 7, 6)),
    "max_pool2d": lambda L: (lambda x: mkcache.max_pool2d(
        x, 3, 2, padding=1, ceil_mode=True, data_format=L), (2, 5, 9, 10)),
    "avg_pool2d": lambda L: (lambda x: mkcache.avg_pool2d(
        x, (2, 3), (2, 2), padding=(1, 1), count_include_pad=False, data_format=L),
        (2, 5, 7, 9)),
    "avg_pool2d ceil include pad": lambda L: (lambda x: mkcache.avg_pool2d(
        x, (3, 2), (2, 3), padding=(1, 0, 0, 1), ceil_mode=True, count_include_pad=True,
        data_format=L), (2, 17, 8, 9)),
    "avg_pool3d ceil include pad": lambda L: (lambda x: mkcache.avg_pool3d(
        x, (2, 3, 2), 2, padding=(0, 1, 1, 0, 1, 0), ceil_mode=True,
        data_format="NDHWC" if L == "NHWC" else "NCDHW"), (2, 3, 5, 6, 7)),
    "avg_pool3d": lambda L: (lambda x: mkcache.avg_pool3d(
        x, 2, data_format="NDHWC" if L == "NHWC" else "NCDHW"), (2, 3, 4, 6, 5)),
    "global_max_pool": lambda L: (lambda x: mkcache.global_max_pool(x, data_format=L),
                                  (3, 5, 4, 7)),
    "batch_norm": lambda L: (lambda x, s=(rand(5), rand(5, positive=True), rand(5), rand(5)):
                             mkcache.batch_norm(x, *s, epsilon=1e-3, data_format=L), (2, 5, 3, 7)),
    "lrn 3": lambda L: (lambda x: mkcache.lrn(x, 3, 0.5, 0.75, 1.0, data_format=L), (2, 7, 4, 5)),
    "lrn 4": lambda L: (lambda x: mkcache.lrn(x, 4, 0.5, 0.75, 2.0, data_format=L), (2, 9, 3, 3)),
}
LAYOUT_FREE = {  # constants made once (default arguments): traced and eager see the same
    **{f"activation {k}": (lambda k: lambda x: mkcache.activation(x, k))(k)
       for k in mkcache.ACTIVATIONS},
    "softmax axis 1": lambda x: mkcache.softmax(x, 1),
    "log_softmax": lambda x: mkcache.log_softmax(x, -1),
    "add broadcast": lambda x, b=rand(1, 5, 1, 7): mkcache.add(x, b),
    "sub": lambda x, b=rand(5, 3, 7): mkcache.sub(x, b),
    "mul": lambda x, b=rand(7): mkcache.mul(x, b),
    "div": lambda x, b=rand(2, 1, 3, 1, positive=True): mkcache.div(x, b),
    "maximum": lambda x, b=rand(1, 1, 3, 7): mkcache.maximum(x, b),
    "minimum": lambda x, b=rand(2, 5, 3, 7): mkcache.minimum(x, b),
    "linear": lambda x, w=rand(9, 7, scale=0.4), b=rand(9): mkcache.linear(
        x, w, b, activation="gelu"),
    "matmul": lambda x, w=rand(1, 5, 6, 7), b=rand(6): mkcache.matmul(
        x, w, b, transpose_b=True, scale=0.5),
    "layer_norm": lambda x, s=rand(3, 7), h=rand(3, 7): mkcache.layer_norm(
        x, s, h, begin_norm_axis=-2),
    "concat": lambda x, c=rand(2, 2, 3, 7): mkcache.concat([x, c, x], axis=1),
    "transpose": lambda x: mkcache.transpose(x, (2, 0, 3, 1)),
    "reshape": lambda x: mkcache.reshape(x, (10, 21)),
}
POSITIVE = {"activation sqrt", "activation log"}  # their inputs: > 0


def close(got, want):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * max(np.abs(want).max(), 1e-30))


def check(fn, x, layouts):
    """With in-place off too: a reshape or transpose is then a step (with
    it on, a view: no step, no implementation)."""
    want = np.asarray(fn(x))
    for impl in ("reference", "onednn"):
        for inplace in (True, False):
            with mkcache.trace(fn, x, layouts=layouts, impl={op: impl for op in ALL},
                               inplace=inplace) as prog:
                close(prog.run(x=x)["output"], want)
                nodes = [s for s in prog.steps() if s["kind"] == "node"]
                assert nodes or inplace
                assert all(s["choice"] == "override (option)" for s in nodes)
                assert all((s["impl"] == "reference") == (impl == "reference") for s in nodes)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_operators_with_a_channel_axis(case, layout):
    fn, shape = CASES[case](layout)
    x, layouts = case_inputs(layout, *shape)
    check(fn, x, layouts)


@pytest.mark.parametrize("case", sorted(LAYOUT_FREE))
def test_operators_without_one(case):
    check(LAYOUT_FREE[case], rand(2, 5, 3, 7, positive=case in POSITIVE), {})
