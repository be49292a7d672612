"""The implementations that compute a node on oneDNN otherwise than its row's
own primitive: `onednn_matmul` and `onednn_conv1x1` (a linear layer on the
matmul primitive or as a 1x1 convolution, not the inner product) and
`onednn_contiguous` (a node that reads or writes
strided views, an attention's heads, on contiguous copies of them). Each
against float64 numpy, by override; and `choose="measure"` weighing them
only where they apply."""
import numpy as np
import pytest

import mkcache
import reference as ref
from bf16_support import needs_bf16
from mkcache.models import BertLayer

ACTIVATIONS = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0)}


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def node_steps(prog, **feeds):
    """The program's node steps by what they compute ("node 3 (linear
    'fc')"), as its profile names them."""
    what = {row["step"]: row["what"] for row in prog.profile(**feeds)}
    return {what[s["step"]]: s for s in prog.steps() if s["kind"] == "node"}


KERNELS = ["onednn_matmul", "onednn_conv1x1"]


@pytest.mark.parametrize("impl", KERNELS)
@pytest.mark.parametrize("shape, out, bias, activation, residual", [
    ((7, 37), 29, True, None, False),
    ((2, 5, 37), 19, False, "relu", False),
    ((3, 1, 4, 17), 33, True, "relu", True),
    ((1, 64), 48, True, None, True),
    ((3, 67, 40), 72, True, None, True),
])
def test_linear_on_another_kernel_against_numpy(impl, shape, out, bias, activation, residual):
    x = rand(*shape, seed=1)
    w = (rand(out, shape[-1], seed=2) / np.sqrt(shape[-1])).astype(np.float32)
    b = rand(out, seed=3) if bias else None
    r = rand(*shape[:-1], out, seed=4)
    with mkcache.Graph() as g:
        xv = g.input("x", shape)
        y = g.linear(xv, w, b, activation=activation, name="fc")
        if residual:  # fused into the layer as its sum
            y = g.add(y, g.input("r", r.shape))
        g.output(y, "y")
        feeds = {"x": x, **({"r": r} if residual else {})}
        with g.compile(impl={"linear": impl}) as prog:
            got = prog.run(**feeds)["y"]
            nodes = [s for s in prog.steps() if s["kind"] == "node"]
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    if bias:
        exact += b
    exact = ACTIVATIONS[activation](exact)
    if residual:
        exact += r
    magnitude = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T + 1
    ref.assert_close(got, exact, magnitude, shape[-1])
    # A residual add is the layer's sum (not after an activation).
    assert len(nodes) == (2 if residual and activation else 1), nodes
    assert nodes[0]["impl"].startswith(impl + ":"), nodes
    assert nodes[0]["choice"] == "override (option)"


@pytest.mark.parametrize("impl, inputs, outputs", [
    ("onednn_matmul", 24, 40),
    ("onednn_conv1x1", 24, 40),
    ("onednn_conv1x1", 768, 96),
])
def test_linear_on_another_kernel_reads_its_weights_converted_once(impl, inputs, outputs):
    """The kernel's weights ([in, out] for the matmul, [out, in, 1, 1] for
    the convolution, in its own arrangement) are the [out, in] constant
    permuted or reshaped: converted once, and the runs of every input shape
    read the copy (a new input right, the same shapes again add nothing).
    The convolution's kernel may take another arrangement for some row
    counts (oneDNN's AVX2 1x1 convolution blocks the outputs by 24 or 16 as
    the rows divide), then those shapes convert a copy of their own."""
    w, b = rand(outputs, inputs, seed=5), rand(outputs, seed=6)
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", (None, inputs)), w, b), "y")
        with g.compile(impl={"linear": impl}) as prog:
            held = []
            for rows in (3, 1, 17, 1100, 3, 1, 17, 1100):
                x = rand(rows, inputs, seed=rows)
                got = prog.run(x=x)["y"]
                exact = x.astype(np.float64) @ w.T.astype(np.float64) + b
                ref.assert_close(got, exact, np.abs(x) @ np.abs(w.T) + 1, inputs)
                held.append(prog.memory["held_constant_bytes"])
    assert held[0] >= w.nbytes and held[3:] == [held[3]] * 5, held
    copies = 1 if impl == "onednn_matmul" or mkcache.build_info()["isa"].startswith("avx512") \
        else 2
    assert held[3] <= copies * held[0], held


@needs_bf16
@pytest.mark.parametrize("impl", KERNELS)
def test_linear_on_another_kernel_in_bfloat16(impl):
    x, w, b = rand(9, 40, seed=7), rand(33, 40, seed=8) / np.float32(6), rand(33, seed=9)
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", x.shape), w, b, name="fc"), "y")
        with g.compile(precision="bf16") as inner, \
                g.compile(precision="bf16", impl={"linear": impl}) as other:
            want, got = inner.run(x=x)["y"], other.run(x=x)["y"]
            assert any(s["impl"].startswith(impl + ":") for s in other.steps())
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + b
    scale = np.abs(x) @ np.abs(w.T) + 1
    assert np.all(np.abs(got - exact) <= 2.0 ** -6 * scale)
    assert np.all(np.abs(got - want) <= 2.0 ** -6 * scale)


@pytest.mark.parametrize("batch, seq", [(1, 16), (2, 11)])
def test_attention_on_contiguous_copies(batch, seq):
    layer = BertLayer(0, hidden=48, heads=4, ffn=80)
    x = rand(batch, seq, 48, seed=seq)
    with layer.graph(batch=batch, seq=None) as g, g.compile() as views, \
            g.compile(impl={"matmul": "onednn_contiguous"}) as copies:
        want, got = views.run(x=x)["y"], copies.run(x=x)["y"]
        plan_views, plan_copies = views.plan(), copies.plan()
        steps = node_steps(copies, x=x)
    exact = layer.reference(x)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    matmuls = [s for w, s in steps.items() if "(matmul " in w]
    assert len(matmuls) == 2 and all(s["impl"].startswith("onednn_contiguous:")
                                     for s in matmuls)
    # The heads are copied for it (and the context copied back for the
    # output layer); on views they are not.
    assert plan_copies.count(": convert ") > plan_views.count(": convert ")


def test_measure_weighs_the_variants_where_they_apply(monkeypatch, tmp_path):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    layer = BertLayer(0, hidden=48, heads=4, ffn=80)
    x = rand(2, 9, 48, seed=11)
    with layer.graph(batch=2, seq=9) as g:
        with g.compile(choose="measure") as prog:
            got = prog.run(x=x)["y"]
            steps = node_steps(prog, x=x)
            text = prog.choices()
            prog.save_choices(tmp_path / "choices.txt")
        np.testing.assert_allclose(got, layer.reference(x), rtol=1e-4, atol=1e-4)
        for what, s in steps.items():
            # The node's own times; the attention chain's (one step against
            # three) are timed too, and follow on the scores matmul's line
            # when the three steps won.
            own = s["choice"].split("; the attention in three steps")[0]
            timed = {part.split()[0] for part in own.split(": ", 1)[1].split(", ")}
            if "as one attention step" in what:
                assert timed == {"onednn_attention", "three_steps"}, s
                continue
            if "(linear " in what:
                assert timed == {"onednn", "onednn_matmul", "onednn_conv1x1", "reference"}, s
            elif "(matmul " in what:  # reads the heads as views
                assert timed == {"onednn", "onednn_contiguous", "reference"}, s
            else:
                assert not timed & {"onednn_matmul", "onednn_conv1x1", "onednn_contiguous"}, s
            assert s["impl"].split(":")[0] in timed
        for line in text.splitlines():  # the chosen one is within the margin of the fastest
            _, chosen, times = line.split("\t")
            us = {n: float(t) for n, t in (p.split("=") for p in times.split(","))}
            assert us[chosen] * 0.97 <= min(us.values()) + 1e-9 or chosen == min(us, key=us.get)
        with g.compile(choices=tmp_path / "choices.txt") as again:
            assert again.choices() == text
            assert [s["impl"].split(":")[0] for s in again.steps() if s["kind"] == "node"] == \
                [s["impl"].split(":")[0] for s in steps.values()]
            np.testing.assert_allclose(again.run(x=x)["y"], got, rtol=1e-6, atol=1e-6)


def test_a_matmul_without_views_is_not_measured_on_copies(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    a, b = rand(3, 5, 7, seed=12), rand(3, 7, 4, seed=13)
    with mkcache.Graph() as g:
        g.output(g.matmul(g.input("a", a.shape), g.input("b", b.shape), name="mm"), "y")
        with g.compile(choose="measure") as prog:
            got = prog.run(a=a, b=b)["y"]
            step = next(s for s in prog.steps() if s["kind"] == "node")
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert "onednn_contiguous" not in step["choice"] and "onednn " in step["choice"]


@pytest.mark.parametrize("impl, words", [
    ({"conv2d": "onednn_matmul"}, "implementation 'onednn_matmul' was asked for (option) but "
                                  "cannot run it: conv2d has no other primitive family"),
    ({"softmax": "onednn_conv1x1"}, "implementation 'onednn_conv1x1' was asked for (option) "
                                    "but cannot run it: softmax has no other primitive family"),
    ({"softmax": "onednn_contiguous"}, "implementation 'onednn_contiguous' was asked for "
                                       "(option) but cannot run it: softmax reads no strided "
                                       "views"),
])
def test_variants_refuse_what_they_cannot_run(monkeypatch, impl, words):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    with mkcache.Graph() as g:
        x = g.input("x", (1, 3, 8, 8))
        y = g.conv2d(x, rand(4, 3, 3, 3), padding=1, name="c")
        g.output(g.softmax(y, 1, name="s"), "y")
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            g.compile(impl=impl)
    assert words in str(info.value)


def test_the_priority_choice_of_a_float32_linear_is_the_matmul(monkeypatch):
    """A float32 linear runs on oneDNN's matmul by priority, on every ISA;
    the inner product is one override away, and both agree."""
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x, w = rand(6, 70, seed=14), rand(64, 70, seed=15)
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", x.shape), w, name="fc"), "y")
        with g.compile() as prog, g.compile(impl={"linear": "onednn"}) as other:
            got, alt = prog.run(x=x)["y"], other.run(x=x)["y"]
            step = next(s for s in prog.steps() if s["kind"] == "node")
            alt_step = next(s for s in other.steps() if s["kind"] == "node")
    assert step["impl"].startswith("onednn_matmul:") and step["choice"] == "priority", step
    assert alt_step["impl"].startswith("onednn:") and alt_step["choice"].startswith("override")
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    ref.assert_close(got, exact, np.abs(x) @ np.abs(w.T) + 1, 70)
    ref.assert_close(alt, exact, np.abs(x) @ np.abs(w.T) + 1, 70)
