"""A convolution whose only reader is another convolution writes its result
in the arrangement that one reads, where oneDNN has a kernel for it and that
moves fewer bytes than a converter between them would: a network's first
convolution over 3 channels feeding a depthwise one (MobileNetV2's stem)
then has its small input converted instead of its 32-channel result. The
results stay those of float64 numpy on odd shapes, channels that are not a
multiple of 16, batch > 1, stride 2 and both data formats, whichever
arrangement each CPU's kernels take."""
from __future__ import annotations

import re

import numpy as np
import pytest

import mkcache
from reference import assert_close, conv2d_nchw, relu, to_nchw, to_nhwc

RNG = np.random.default_rng(41)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def stem_graph(batch, c_in, c_mid, c_out, hw, data_format):
    """conv 3x3 stride 2 + relu -> depthwise 3x3 + relu -> pointwise 1x1:
    the graph, its weights and the input's caller shape."""
    w = {"stem": rand(c_mid, c_in, 3, 3, scale=0.3), "stem_b": rand(c_mid, scale=0.1),
         "dw": rand(c_mid, 1, 3, 3, scale=0.3), "dw_b": rand(c_mid, scale=0.1),
         "pw": rand(c_out, c_mid, 1, 1, scale=0.3)}
    shape = (batch, c_in, *hw) if data_format == "NCHW" else (batch, *hw, c_in)
    g = mkcache.Graph()
    x = g.input("x", shape, layout=data_format)
    y = g.conv2d(x, w["stem"], w["stem_b"], stride=2, padding=1, activation="relu",
                 data_format=data_format, name="stem")
    y = g.conv2d(y, w["dw"], w["dw_b"], padding=1, groups=c_mid, activation="relu",
                 data_format=data_format, name="dw")
    y = g.conv2d(y, w["pw"], data_format=data_format, name="pw")
    g.output(y, "y")
    return g, w, shape


def reference(x_nchw, w):
    y, m = conv2d_nchw(x_nchw, w["stem"], w["stem_b"], stride=(2, 2), pads=(1, 1, 1, 1))
    y = relu(y)
    c = w["dw"].shape[0]
    y2, m2 = conv2d_nchw(y, w["dw"], w["dw_b"], pads=(1, 1, 1, 1), groups=c)
    # The magnitude carries the first layer's through the second.
    _, m2 = conv2d_nchw(m, np.abs(w["dw"]), np.abs(w["dw_b"]), pads=(1, 1, 1, 1), groups=c)
    y2 = relu(y2)
    y3, _ = conv2d_nchw(y2, w["pw"])
    _, m3 = conv2d_nchw(m2, np.abs(w["pw"]))
    return y3, m3


def step_lines(plan: str) -> list:
    return [line for line in plan.splitlines() if re.match(r"^\d+: ", line)]


def arrangements(line: str):
    """(the arrangement a step reads its first input in, the one it writes)."""
    ins, outs = line.split("->", 1)
    first_in = re.search(r"\[(?:input '\w+' |arena@\d+\+\d+ )(\w+)", ins)
    out = re.search(r"\[(?:output '\w+' |arena@\d+\+\d+ )(\w+)", outs)
    assert first_in and out, line
    return first_in.group(1), out.group(1)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("batch,c_mid,hw", [(2, 32, (29, 23)), (1, 20, (17, 31)), (3, 48, (16, 16))])
def test_stem_then_depthwise_against_float64(data_format, batch, c_mid, hw):
    g, w, shape = stem_graph(batch, 3, c_mid, 24, hw, data_format)
    x = rand(*shape)
    with g, g.compile() as prog:
        out = prog.run(x=x)["y"]
        plan = prog.plan()
    x_nchw = x if data_format == "NCHW" else to_nchw(x)
    exact, magnitude = reference(x_nchw, w)
    got = out if data_format == "NCHW" else to_nchw(out)
    assert_close(got, exact, magnitude, reduction=3 * 9 + 9 + c_mid)
    # No converter between the stem and the depthwise convolution: the stem
    # writes what the depthwise one reads.
    steps = step_lines(plan)
    stem = next(i for i, s in enumerate(steps) if "'stem'" in s)
    dw = next(i for i, s in enumerate(steps) if "'dw'" in s)
    assert dw == stem + 1, plan
    assert arrangements(steps[stem])[1] == arrangements(steps[dw])[0], plan


def test_the_stem_writes_channels_last_where_the_depthwise_reads_it():
    """Where the depthwise convolution reads channels-last (acdb) and the
    stem would write blocked channels, the stem writes acdb and its
    3-channel input is what gets converted."""
    g, w, shape = stem_graph(2, 3, 32, 24, (30, 30), "NCHW")
    x = rand(*shape)
    with g, g.compile() as prog:
        out = prog.run(x=x)["y"]
        steps = step_lines(prog.plan())
    dw = next(s for s in steps if "'dw'" in s)
    if arrangements(dw)[0] != "acdb":
        pytest.skip(f"the depthwise convolution reads {arrangements(dw)[0]} on "
                    f"{mkcache.build_info()['isa']}, not channels-last")
    stem = next(s for s in steps if "'stem'" in s)
    assert arrangements(stem) == ("acdb", "acdb"), stem
    converts = [s for s in steps if " convert " in s]
    assert len(converts) <= 2 and "input 'x'" in converts[0], steps  # the input, the output
    exact, magnitude = reference(x, w)
    assert_close(out, exact, magnitude, reduction=3 * 9 + 9 + 32)


def test_unfused_and_reference_kernels_agree():
    """The same chain with fusion off (the activations their own steps:
    the stem's only reader is then no convolution) and on the reference
    kernels gives the same results within float32 rounding."""
    g, w, shape = stem_graph(2, 3, 32, 24, (21, 19), "NCHW")
    x = rand(*shape)
    with g:
        with g.compile() as a, g.compile(fuse=False) as b, \
                g.compile(impl={"conv2d": "reference"}) as c:
            ya, yb, yc = (p.run(x=x)["y"] for p in (a, b, c))
    exact, magnitude = reference(x, w)
    for y in (ya, yb, yc):
        assert_close(y, exact, magnitude, reduction=3 * 9 + 9 + 32)
