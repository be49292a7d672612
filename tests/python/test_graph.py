"""Programs (mkcache.Graph / Program): results against the same model run op
by op through the eager functions and against float64 numpy, plans per
input shape, memory figures, cache isolation, threads and bad input."""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import mkcache
from mkcache import _capi

lib = _capi.lib
RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class SmallCnn:
    """conv(+bias, relu) -> max pool -> conv (no bias) -> avg pool (global)
    -> flatten -> linear -> softmax, channels not multiples of 16."""

    def __init__(self, layout="NCHW"):
        self.layout = layout
        self.w1, self.b1 = rand(6, 3, 3, 3), rand(6)
        self.w2 = rand(5, 6, 3, 3)
        self.w3, self.b3 = rand(4, 5), rand(4)

    def build(self, batch=None):
        g = mkcache.Graph()
        shape = (batch, 9, 11, 3) if self.layout == "NHWC" else (batch, 3, 9, 11)
        x = g.input("x", shape, layout=self.layout)
        y = g.conv2d(x, self.w1, self.b1, padding=1, activation="relu", data_format=self.layout,
                     name="c1")
        y = g.max_pool2d(y, 2, data_format=self.layout)
        y = g.conv2d(y, self.w2, stride=(1, 2), padding=(1, 0, 2, 1), dilation=(1, 1),
                     data_format=self.layout)
        y = g.global_avg_pool(y, data_format=self.layout)
        y = g.flatten(y)
        y = g.linear(y, self.w3, self.b3)
        y = g.softmax(y)
        g.output(y, "probs")
        return g

    def eager(self, x):
        f = self.layout
        y = mkcache.conv2d(x, self.w1, self.b1, padding=1, activation="relu", data_format=f)
        y = mkcache.max_pool2d(y, 2, data_format=f)
        y = mkcache.conv2d(y, self.w2, stride=(1, 2), padding=(1, 0, 2, 1), data_format=f)
        y = mkcache.global_avg_pool(y, data_format=f)
        y = mkcache.flatten(y)
        return np.asarray(mkcache.softmax(mkcache.linear(y, self.w3, self.b3)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("fuse", [True, False])
def test_program_equals_the_eager_calls(layout, reuse, fuse):
    cnn = SmallCnn(layout)
    with cnn.build(3).compile(reuse=reuse, fuse=fuse) as prog:
        x = rand(3, 9, 11, 3) if layout == "NHWC" else rand(3, 3, 9, 11)
        out = prog.run(x=x)
        np.testing.assert_allclose(out["probs"], cnn.eager(x), rtol=1e-5, atol=1e-6)
        m = prog.memory
        assert m["lower_bound_bytes"] <= m["arena_bytes"] <= m["naive_bytes"]
        if reuse:
            assert m["arena_bytes"] < m["naive_bytes"]
        else:
            assert m["arena_bytes"] == m["naive_bytes"]
        assert prog(x=x)["probs"].shape == (3, 4)  # __call__ is run
        assert "fused" not in prog.plan()  # its activations are the convs' own already


def test_program_against_float64_numpy():
    """linear -> relu -> add (broadcast) -> layer_norm, checked in float64."""
    w, b, s = rand(7, 5), rand(7), rand(7)
    g = mkcache.Graph()
    x = g.input("x", (None, 5))
    y = g.relu(g.linear(x, w, b))
    y = g.add(y, s)
    y = g.layer_norm(y, epsilon=1e-5)
    g.output(y, "y")
    with g.compile() as prog:
        for batch in (1, 4):
            xv = rand(batch, 5)
            h = np.maximum(xv.astype(np.float64) @ w.T + b, 0) + s
            h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
            np.testing.assert_allclose(prog.run(x=xv)["y"], h, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("inplace", [True, False])
def test_fused_residual_block_matches_eager(inplace):
    """conv -> batch_norm -> relu -> conv -> batch_norm -> add -> relu: two
    convolutions once fused (batch norms folded, the add as the second's sum,
    in place or into a copy of the residual)."""
    c = 10
    w0, w1, w2 = rand(c, c, 3, 3) * 0.3, rand(c, c, 3, 3) * 0.3, rand(c, c, 3, 3) * 0.3
    bn = [(rand(c), np.abs(rand(c)) + 0.5, rand(c), rand(c)) for _ in range(2)]

    def block(ops, x, conv, bnorm, add, relu):
        r = conv(x, w0)
        y = relu(bnorm(conv(r, w1), *bn[0]))
        return relu(add(bnorm(conv(y, w2), *bn[1]), r))

    g = mkcache.Graph()
    xv = g.input("x", (None, c, 6, 7))
    g.output(block(g, xv, lambda a, w: g.conv2d(a, w, padding=1), g.batch_norm, g.add, g.relu),
             "y")
    with g.compile(inplace=inplace) as prog:
        x = rand(2, c, 6, 7)
        want = np.asarray(block(mkcache, x, lambda a, w: mkcache.conv2d(a, w, padding=1),
                                mkcache.batch_norm, mkcache.add, mkcache.relu))
        np.testing.assert_allclose(prog.run(x=x)["y"], want, rtol=1e-4, atol=1e-4)
        plan = prog.plan()
        assert "fused 5 nodes: 2 activation, 1 sum, 2 batch_norm" in plan
        assert (", in place 1," in plan) == inplace


def test_numpy_and_tensor_inputs_take_the_same_plan():
    """numpy inputs run through the plain-buffer call, Tensors through the
    handles: the same results, the same plan."""
    cnn = SmallCnn("NHWC")
    with cnn.build(None).compile() as prog:
        x = rand(2, 9, 11, 3)
        by_array = prog.run(x=x)["probs"]
        by_tensor = prog.run(x=mkcache.Tensor(x, "NHWC"))["probs"]
        np.testing.assert_array_equal(by_array, by_tensor)
        assert prog.memory["plans"] == 1
        with pytest.raises(mkcache.InvalidArgumentError, match="input 'x' dim 3 must be 3"):
            prog.run(x=rand(2, 9, 11, 4))


def test_outputs_fill_preallocated_arrays_and_plans_follow_the_shapes():
    cnn = SmallCnn()
    with cnn.build(None).compile(capacity=2) as prog:
        for batch in (1, 3, 2, 3):
            x = rand(batch, 3, 9, 11)
            out = np.full((batch, 4), np.nan, np.float32)
            got = prog.run(x=x, outputs={"probs": out})
            assert got["probs"] is out
            np.testing.assert_allclose(out, cnn.eager(x), rtol=1e-5, atol=1e-6)
        assert prog.memory["plans"] == 2  # capacity: the oldest went


def test_profile_times_every_step_with_its_implementation():
    with SmallCnn().build(None).compile() as prog:
        x = rand(2, 3, 9, 11)
        steps = prog.profile(x=x)
        assert len(steps) == prog.memory["steps"]
        assert [s["step"] for s in steps] == list(range(len(steps)))
        assert all(s["us"] > 0 and s["impl"].startswith("onednn") for s in steps)
        assert steps[0]["what"] == "node 0 (conv2d 'c1')"
        assert any(":" in s["impl"] for s in steps)  # oneDNN names the kernel it chose
        with pytest.raises(mkcache.InvalidArgumentError, match="takes inputs"):
            prog.profile()


def test_profile_counts_the_arithmetic_of_convolutions_and_linear_layers():
    # x [2, 3, 9, 11]: conv1 -> [2, 6, 9, 11] over 3 x 3x3 taps; max pool ->
    # [2, 6, 4, 5]; conv2 (stride (1, 2), padding 1,0 / 2,1) -> [2, 5, 3, 3]
    # over 6 x 3x3 taps; linear 5 -> 4 on 2 rows. A multiply-add is two.
    want = {"node 0 (conv2d 'c1')": 2 * (2 * 6 * 9 * 11) * 3 * 9,
            "conv2d": 2 * (2 * 5 * 3 * 3) * 6 * 9, "linear": 2 * (2 * 4) * 5}
    with SmallCnn().build(None).compile() as prog:
        steps = prog.profile(x=rand(2, 3, 9, 11))
    counted = {s["what"]: s["flops"] for s in steps if s["flops"]}
    assert counted.pop("node 0 (conv2d 'c1')") == want["node 0 (conv2d 'c1')"]
    assert sorted(counted.values()) == sorted([want["conv2d"], want["linear"]])
    assert all(s["flops"] == 0 for s in steps if "pool" in s["what"] or "softmax" in s["what"])
    for s in steps:
        assert s["gflops"] == pytest.approx(s["flops"] / s["us"] / 1e3)
        assert 0 <= s["peak"] < 2  # a share of the measured peak (timing noise aside)
        assert s["arithmetic"] == "f32"
    # The peak: one thread's fused multiply-adds, at least a scalar core's.
    peak = mkcache.peak_flops()
    assert 1e9 < peak < 1e12 and mkcache.peak_flops() == peak  # measured once
    # 8-bit dot products: at least float32's rate (twice it with AVX2's
    # pairs, four times with VNNI, timing noise aside); bfloat16's where
    # the CPU has it, else float32's.
    assert mkcache.peak_flops("f32") == peak
    assert mkcache.peak_flops("int8") > 0.9 * peak
    assert mkcache.peak_flops("bf16") >= 0.9 * peak
    with pytest.raises(mkcache.InvalidArgumentError, match="arithmetic must be one of"):
        mkcache.peak_flops("f64")


def test_profile_names_the_arithmetic_of_eight_bit_steps():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 12)).astype(np.float32)
    with mkcache.Graph() as g:
        x = g.input("x", (None, 12))
        g.output(g.linear(x, w, name="fc"), "y")
        calib = [{"x": rng.standard_normal((4, 12)).astype(np.float32)}]
        with g.compile(precision="int8", calibration=calib) as prog:
            steps = prog.profile(x=calib[0]["x"])
    fc = [s for s in steps if "quantized_linear" in s["what"]][0]
    assert fc["arithmetic"] == "int8" and fc["flops"] == 2 * 4 * 8 * 12
    limit = mkcache.peak_flops("int8") * mkcache.get_num_threads()
    assert fc["peak"] == pytest.approx(fc["gflops"] * 1e9 / limit)


def test_plan_text_lists_every_step_and_the_totals():
    with SmallCnn("NHWC").build(2).compile() as prog:
        text = prog.plan()  # compiled at once: every dim is static
        lines = text.strip().splitlines()
        m = prog.memory
        assert len(lines) == m["steps"] + m["views"] + 2
        assert sum(": convert " in line for line in lines) == m["converters"]
        assert "node 0 (conv2d 'c1')" in text and "output 'probs'" in text
        assert f"arena {m['arena_bytes']} bytes" in lines[-1]


def test_steps_describe_the_plan_for_a_program_to_read():
    with SmallCnn("NHWC").build(2).compile() as prog:
        steps, m = prog.steps(), prog.memory
        assert len(steps) == m["steps"] + m["views"]
        assert [s["step"] for s in steps if s["kind"] != "view"] == list(range(m["steps"]))
        assert sum(s["kind"] == "convert" for s in steps) == m["converters"]
        assert sum(s["kind"] == "view" for s in steps) == m["views"] == 1  # the flatten
        assert sum(s["note"] == "in place" for s in steps) == m["in_place"]
        first = next(s for s in steps if s["kind"] == "node")
        assert first["node"] == 0 and first["impl"].startswith("onednn")
        assert any(s["inputs"][0][0] == "input:0" for s in steps if s["step"] in (0, 1))
        assert steps[-1]["outputs"] == [("output:0", steps[-1]["outputs"][0][1])]
        for s in steps:
            for place, _ in s["inputs"] + s["outputs"]:
                if place.startswith("arena:"):
                    _, offset, size = place.split(":")
                    assert int(offset) + int(size) <= m["arena_bytes"]
            if s["kind"] == "convert":
                assert s["node"] is None and s["note"]


def test_implementation_chosen_per_operator_by_option_or_environment(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    cnn = SmallCnn()
    x = rand(2, 3, 9, 11)
    with cnn.build(2).compile() as a:
        want = a.run(x=x)["probs"]
        assert all(s["choice"] == "priority" for s in a.steps() if s["kind"] == "node")
    with cnn.build(2).compile(impl={"conv2d": "reference"}) as b:
        np.testing.assert_allclose(b.run(x=x)["probs"], want, rtol=1e-5, atol=1e-7)
        convs = [s for s in b.steps() if s["kind"] == "node" and s["impl"] == "reference"]
        assert len(convs) == 2 and all(s["choice"] == "override (option)" for s in convs)
        assert "reference (override (option))" in b.plan()
    monkeypatch.setenv("MKCACHE_IMPL", "softmax=reference, conv2d=reference")
    with cnn.build(2).compile(impl={"conv2d": "onednn"}) as c:  # the option wins for conv2d
        np.testing.assert_allclose(c.run(x=x)["probs"], want, rtol=1e-5, atol=1e-7)
        by_choice = {s["choice"] for s in c.steps() if s["kind"] == "node"}
        assert by_choice == {"priority", "override (option)", "override (MKCACHE_IMPL)"}


def test_measured_choices_are_saved_and_read_back(monkeypatch, tmp_path):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x, cnn = rand(2, 3, 9, 11), SmallCnn()
    with cnn.build(2).compile(choose="measure") as a:
        want = a.run(x=x)["probs"]
        nodes = [s for s in a.steps() if s["kind"] == "node"]
        assert nodes and all(s["choice"].startswith("measured: onednn") for s in nodes)
        lines = a.choices().splitlines()
        assert len(lines) == len(nodes)
        for line in lines:  # key, chosen, times: the chosen one is the fastest
            key, chosen, times = line.split("\t")
            us = {name: float(t) for name, t in (p.split("=") for p in times.split(","))}
            # (a linear layer is also timed on the matmul primitive and as a
            # 1x1 convolution)
            assert set(us) - {"onednn_matmul", "onednn_conv1x1"} == {"onednn", "reference"}
            # the first by priority stays unless another is more than 3% faster
            assert chosen == min(us, key=us.get) or us["onednn"] <= min(us.values()) / 0.97
        a.save_choices(tmp_path / "choices.txt")
        impls = [s["impl"] for s in a.steps()]
    with cnn.build(2).compile(choices=tmp_path / "choices.txt") as b:
        np.testing.assert_allclose(b.run(x=x)["probs"], want, rtol=1e-5, atol=1e-7)
        assert b.choices() == (tmp_path / "choices.txt").read_text()  # nothing timed again
        assert [s["impl"] for s in b.steps()] == impls
        assert all(s["choice"].startswith("measured (loaded): ")
                   for s in b.steps() if s["kind"] == "node")
    g = SmallCnn().build(2)
    try:
        with pytest.raises(mkcache.InvalidArgumentError, match="choose must be"):
            g.compile(choose="fastest")
        with pytest.raises(mkcache.InvalidArgumentError, match="choices line 1: unknown "
                                                               "implementation 'fast'"):
            g.compile(choices=b"key\tfast\tonednn=1\n")
        for bad in (b"key\tonednn\n", b"key\tonednn\tonednn=1\textra\n", b"\n\nkey\n"):
            with pytest.raises(mkcache.InvalidArgumentError, match="choices line [13]: expected "
                                                                   "<key>"):
                g.compile(choices=bad)
        with pytest.raises(mkcache.InvalidArgumentError, match="choices line 1: 'onednn=x' is "
                                                               "not <implementation>="):
            g.compile(choices=b"key\tonednn\tonednn=x\n")
    finally:
        g.close()


@pytest.mark.parametrize("impl, env, words", [
    ({"conv": "reference"}, None, "compile: impl: unknown operator 'conv'"),
    ({"conv2d": "fast"}, None, "unknown implementation 'fast' in 'conv2d=fast' (known: onednn, "
                               "onednn_matmul, onednn_matmul_shared, onednn_conv1x1, "
                               "onednn_contiguous, "
                               "reference)"),
    ("conv2d=reference", None, "impl must be a dict"),
    (None, "conv2d", "MKCACHE_IMPL: 'conv2d' is not operator=implementation"),
    (None, "pool=reference,pool=onednn", "MKCACHE_IMPL: pool is given twice"),
])
def test_implementation_overrides_are_checked(monkeypatch, impl, env, words):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    if env:
        monkeypatch.setenv("MKCACHE_IMPL", env)
    g = SmallCnn().build(2)
    try:
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            g.compile(impl=impl)
        assert words in str(info.value)
    finally:
        g.close()


def _keys_of(executor):
    """The cache keys (programs keep theirs in session 0) of an executor."""
    return [key for _, key in mkcache.cache.keys(0) if f"|e{executor:x}" in key]


def test_programs_share_no_entries_and_closing_drops_theirs():
    cnn = SmallCnn()
    x = rand(2, 3, 9, 11)
    a, b = cnn.build(2).compile(), cnn.build(2).compile()
    try:
        assert a.executor_id != b.executor_id
        ra, rb = a.run(x=x)["probs"], b.run(x=x)["probs"]
        np.testing.assert_array_equal(ra, rb)
        ka, kb = _keys_of(a.executor_id), _keys_of(b.executor_id)
        assert ka and len(ka) == len(kb) and not set(ka) & set(kb)
        executor = a.executor_id
        a.close()
        assert _keys_of(executor) == []
        assert len(_keys_of(b.executor_id)) == len(kb)
    finally:
        a.close()
        b.close()


def test_threads_run_one_program_with_their_own_inputs():
    cnn = SmallCnn()
    inputs = [rand(2, 3, 9, 11) for _ in range(4)]
    wants = [cnn.eager(x) for x in inputs]
    errors = []
    with cnn.build(2).compile() as prog:
        def worker(i):
            try:
                for _ in range(50):
                    got = prog.run(x=inputs[i])["probs"]
                    np.testing.assert_allclose(got, wants[i], rtol=1e-5, atol=1e-6)
            except Exception as exc:  # reported below
                errors.append(exc)
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("capacity", [0, 2])
def test_threads_compile_and_run_their_own_shapes(capacity):
    """Threads meeting new shapes at once: plans are compiled one at a time
    while runs of known ones go on (and, at capacity 2, plans are dropped
    under the others' feet); every result right."""
    cnn = SmallCnn()
    inputs = [rand(b, 3, 9, 11) for b in (1, 2, 3, 4)]
    wants = [cnn.eager(x) for x in inputs]
    errors = []
    with cnn.build(None).compile(capacity=capacity) as prog:
        def worker(i):
            try:
                for k in range(30):
                    j = (i + k) % 4
                    got = prog.run(x=inputs[j])["probs"]
                    np.testing.assert_allclose(got, wants[j], rtol=1e-5, atol=1e-6)
            except Exception as exc:  # reported below
                errors.append(exc)
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert prog.memory["plans"] == (4 if capacity == 0 else 2)
    assert not errors, errors[0]


def test_run_refuses_bad_inputs_naming_them():
    with SmallCnn().build(2).compile() as prog:
        with pytest.raises(mkcache.InvalidArgumentError, match=r"missing \['x'\]"):
            prog.run()
        with pytest.raises(mkcache.InvalidArgumentError, match=r"unknown \['y'\]"):
            prog.run(x=rand(2, 3, 9, 11), y=rand(1))
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"input 'x' dim 0 must be 2, got 3"):
            prog.run(x=rand(3, 3, 9, 11))
        with pytest.raises(mkcache.InvalidArgumentError, match="input 'x' must be NCHW of rank 4"):
            prog.run(x=rand(2, 3, 9))
        with pytest.raises(mkcache.InvalidArgumentError, match="output 'probs' must be a plain"):
            prog.run(x=rand(2, 3, 9, 11), outputs={"probs": np.zeros((2, 5), np.float32)})
        # At the C level: counts and aliasing.
        h = ctypes.c_void_p()
        lib.mkc_tensor_create(1, 4, (ctypes.c_int64 * 4)(2, 3, 9, 11), 1, ctypes.byref(h))
        try:
            ins = (_capi.tensor_p * 1)(h)
            outs = (_capi.tensor_p * 1)()
            with pytest.raises(mkcache.InvalidArgumentError, match="takes 1 inputs, got 0"):
                lib.mkc_program_run(prog.handle, 0, ins, 1, outs)
            with pytest.raises(mkcache.InvalidArgumentError, match="gives 1 outputs, got 2"):
                lib.mkc_program_run(prog.handle, 1, ins, 2, (_capi.tensor_p * 2)())
            with pytest.raises(mkcache.InvalidArgumentError,
                               match="output 'probs' is also input 'x'"):
                lib.mkc_program_run(prog.handle, 1, ins, 1, (_capi.tensor_p * 1)(h))
        finally:
            lib.mkc_tensor_destroy(h)


def test_graph_errors_name_the_node():
    g = mkcache.Graph()
    x = g.input("x", (1, 4, 5, 5))
    y = g.conv2d(x, rand(6, 3, 3, 3), name="stem")  # expects 3 channels
    g.output(y, "y")
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"node 0 \(conv2d 'stem'\): conv2d: src has 4 channels"):
        g.compile()
    # A dynamic graph reports it at the first run of a shape.
    g = mkcache.Graph()
    x = g.input("x", (None, 4, 5, 5))
    g.output(g.conv2d(x, rand(6, 3, 3, 3), name="stem"), "y")
    with g.compile() as prog:
        with pytest.raises(mkcache.InvalidArgumentError, match=r"node 0 \(conv2d 'stem'\)"):
            prog.run(x=rand(1, 4, 5, 5))
        with pytest.raises(mkcache.InvalidArgumentError, match="no plan yet"):
            prog.plan()


def test_builder_refuses_bad_nodes():
    g = mkcache.Graph()
    x = g.input("x", (2, 3))
    out = ctypes.c_int()
    p = _capi.ActivationParams()
    lib.mkc_activation_params_init(ctypes.byref(p))
    with pytest.raises(mkcache.InvalidArgumentError, match="unknown operator 99"):
        lib.mkc_graph_node(g.handle, 99, ctypes.byref(p), 1, (ctypes.c_int * 1)(x.index),
                           ctypes.byref(out))
    with pytest.raises(mkcache.InvalidArgumentError, match=r"input 0 is not a value of this graph"):
        lib.mkc_graph_node(g.handle, _capi.OPS["activation"], ctypes.byref(p), 1,
                           (ctypes.c_int * 1)(42), ctypes.byref(out))
    with pytest.raises(mkcache.InvalidArgumentError, match=r"\(binary\): input 1 is required"):
        g.add(x, None)
    bp = _capi.BinaryParams()
    lib.mkc_binary_params_init(ctypes.byref(bp))
    with pytest.raises(mkcache.InvalidArgumentError, match=r"\(binary\): takes 2 inputs, got 1"):
        lib.mkc_graph_node(g.handle, _capi.OPS["binary"], ctypes.byref(bp), 1,
                           (ctypes.c_int * 1)(x.index), ctypes.byref(out))
    with pytest.raises(mkcache.InvalidArgumentError, match="an input of that name exists"):
        g.input("x", (1,))
    with pytest.raises(mkcache.InvalidArgumentError, match=r"dims must be >= 1 \(or -1"):
        g.input("z", (2, 0))
    with pytest.raises(mkcache.InvalidArgumentError, match="no outputs"):
        g.compile()
    other = mkcache.Graph()
    with pytest.raises(mkcache.InvalidArgumentError, match="another graph"):
        other.relu(x)
    g.output(x, "x_out")
    with pytest.raises(mkcache.InvalidArgumentError, match="an output of that name exists"):
        g.output(x, "x_out")
    with pytest.raises(mkcache.InvalidHandleError, match="graph is NULL"):
        lib.mkc_graph_output(None, 0, b"y")


def test_params_and_options_struct_sizes_are_checked():
    g = mkcache.Graph()
    x = g.input("x", (2, 3))
    out = ctypes.c_int()
    p = _capi.ActivationParams()
    lib.mkc_activation_params_init(ctypes.byref(p))
    p.struct_size = ctypes.sizeof(p) + 8
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"activation: mkc_activation_params.struct_size is \d+ \(expected"):
        lib.mkc_graph_node(g.handle, _capi.OPS["activation"], ctypes.byref(p), 1,
                           (ctypes.c_int * 1)(x.index), ctypes.byref(out))
    with pytest.raises(mkcache.InvalidArgumentError, match="params is NULL"):
        lib.mkc_graph_node(g.handle, _capi.OPS["activation"], None, 1,
                           (ctypes.c_int * 1)(x.index), ctypes.byref(out))
    g.output(g.relu(x), "y")
    o = _capi.ProgramOptions()
    lib.mkc_program_options_init(ctypes.byref(o))
    assert (o.fuse, o.inplace, o.reuse, o.capacity) == (1, 1, 1, 0)
    o.struct_size = 0
    prog = ctypes.c_void_p()
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="mkc_program_options.struct_size is 0"):
        lib.mkc_program_compile(g.handle, ctypes.byref(o), ctypes.byref(prog))
    assert not prog.value
    with pytest.raises(mkcache.InvalidArgumentError, match="capacity must be >= 0"):
        g.compile(capacity=-1)


def test_an_input_returned_as_an_output_and_a_constant_output():
    g = mkcache.Graph()
    x = g.input("x", (2, 3))
    c = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    g.output(x, "same")
    g.output(c, "c")
    g.output(g.add(x, c), "sum")
    with g.compile() as prog:
        xv = rand(2, 3)
        out = prog.run(x=xv)
        np.testing.assert_array_equal(out["same"], xv)
        np.testing.assert_array_equal(out["c"], np.arange(6).reshape(2, 3))
        np.testing.assert_allclose(out["sum"], xv + np.arange(6).reshape(2, 3), rtol=1e-6)


def test_every_forward_operator_as_a_node_matches_eager():
    x4 = rand(2, 5, 7, 6)
    xm = rand(2, 3, 4, 5)
    bn = (rand(5), np.abs(rand(5)) + 0.5, rand(5), rand(5))
    cases = {
        "conv3d": (lambda g, x: g.conv3d(g.reshape(x, (2, 5, 7, 2, 3)), W3, padding=1),
                   lambda x: mkcache.conv3d(mkcache.reshape(x, (2, 5, 7, 2, 3)), W3, padding=1)),
        "conv2d_transpose": (lambda g, x: g.conv2d_transpose(x, WT, stride=2, padding=1),
                             lambda x: mkcache.conv2d_transpose(x, WT, stride=2, padding=1)),
        "grouped conv": (lambda g, x: g.conv2d(x, WG, groups=5, dilation=2, padding=2),
                         lambda x: mkcache.conv2d(x, WG, groups=5, dilation=2, padding=2)),
        "avg_pool2d": (lambda g, x: g.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                 count_include_pad=False),
                       lambda x: mkcache.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                    count_include_pad=False)),
        "batch_norm": (lambda g, x: g.batch_norm(x, *bn),
                       lambda x: mkcache.batch_norm(x, *bn)),
        "lrn": (lambda g, x: g.lrn(x, 3), lambda x: mkcache.lrn(x, 3)),
        "gelu, sigmoid": (lambda g, x: g.sigmoid(g.gelu(x)),
                          lambda x: mkcache.sigmoid(mkcache.gelu(x))),
        "log_softmax axis 1": (lambda g, x: g.log_softmax(x, 1),
                               lambda x: mkcache.log_softmax(x, 1)),
        "mul, maximum": (lambda g, x: g.maximum(g.mul(x, 2.0), x),
                         lambda x: mkcache.maximum(mkcache.mul(x, 2.0), x)),
        "concat": (lambda g, x: g.concat([x, g.relu(x)], axis=1),
                   lambda x: mkcache.concat([x, mkcache.relu(x)], axis=1)),
        "transpose": (lambda g, x: g.transpose(x, (0, 2, 3, 1)),
                      lambda x: mkcache.transpose(x, (0, 2, 3, 1))),
        "matmul": (lambda g, x: g.matmul(x, MB, transpose_b=True, activation="tanh"),
                   lambda x: mkcache.matmul(x, MB, transpose_b=True, activation="tanh")),
    }
    for name, (build, eager) in cases.items():
        x = xm if name == "matmul" else x4
        g = mkcache.Graph()
        g.output(build(g, g.input("x", x.shape)), "y")
        with g.compile() as prog:
            np.testing.assert_allclose(prog.run(x=x)["y"], np.asarray(eager(x)), rtol=1e-5,
                                       atol=1e-5, err_msg=name)


W3 = rand(4, 5, 3, 3, 3)
WT = rand(5, 3, 3, 3)
WG = rand(10, 1, 3, 3)
MB = rand(6, 5)
