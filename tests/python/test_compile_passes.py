"""The compiler's named passes and their dump: compile(dump=path) or
MKCACHE_DUMP appends the IR after every pass, so a fusion, a choice or a
converter is found by reading two sections one after the other."""
from __future__ import annotations

import re

import numpy as np
import pytest

import mkcache

RNG = np.random.default_rng(11)
GRAPH_PASSES = ["graph as built", "after fuse"]
PLAN_PASSES = ["bind_inputs", "infer", "fold_adds", "precision", "choose", "attention", "lower",
               "outputs", "plan_memory"]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_relu_graph(batch=2):
    g = mkcache.Graph()
    x = g.input("x", (batch, 3, 9, 7))
    y = g.conv2d(x, rand(5, 3, 3, 3), rand(5), padding=1, name="c1")
    y = g.relu(y, name="act")
    g.output(g.add(y, g.constant(rand(5, 9, 7))), "y")
    return g


def sections(text):
    """{title: body} in file order."""
    parts = re.split(r"^=== (.*) ===\n", text, flags=re.M)
    assert parts[0] == ""
    return list(zip(parts[1::2], parts[2::2]))


def test_dump_has_every_pass_in_order(tmp_path):
    path = tmp_path / "ir.txt"
    with conv_relu_graph() as g, g.compile(dump=path) as prog:
        out = prog.run(x=rand(2, 3, 9, 7))["y"]
    assert out.shape == (2, 5, 9, 7)
    titles = [t for t, _ in sections(path.read_text())]
    assert len(titles) == len(GRAPH_PASSES) + len(PLAN_PASSES)
    assert titles[0].endswith(GRAPH_PASSES[0]) and titles[1].endswith(GRAPH_PASSES[1])
    for title, name in zip(titles[2:], PLAN_PASSES):
        assert title.startswith("plan ") and title.endswith("after " + name), title


def test_a_fusion_is_visible_between_two_dumps(tmp_path):
    path = tmp_path / "ir.txt"
    with conv_relu_graph() as g, g.compile(dump=path):
        pass
    (_, built), (_, fused) = sections(path.read_text())[:2]
    # As built: the conv and the activation are nodes of their own.
    assert re.search(r"^node 0 \(conv2d 'c1'\): v0, v1, v2 -> v3 \[2,5,9,7\] NCHW", built, re.M)
    assert re.search(r"^node 1 \(activation 'act'\): v3 -> v4 .*:relu$", built, re.M)
    # After fusion: one conv with the relu as its post-op, the report saying so.
    assert "node 1 (activation 'act') fused into node 0 (conv2d 'c1')" in fused
    assert "(activation" not in fused.split("\nv0 ", 1)[1]
    assert re.search(r"^node 0 \(conv2d 'c1'\): .*:relu", fused, re.M)


def test_plan_passes_fill_the_ir(tmp_path):
    path = tmp_path / "ir.txt"
    with conv_relu_graph() as g, g.compile(dump=path, fuse=False):
        pass
    plan = dict((t.rsplit("after ", 1)[1], body)
                for t, body in sections(path.read_text()) if t.startswith("plan "))
    # infer gives every value its shape before anything is lowered.
    assert re.search(r"^v4 = node 1 float32 \[2, 5, 9, 7\] NCHW$", plan["infer"], re.M)
    # choose names each node's implementation and why; lower adds the steps.
    assert "node 0 (conv2d 'c1'): onednn (priority)" in plan["choose"]
    assert "steps" not in plan["choose"] and re.search(r"^plan .* steps", plan["lower"], re.M)
    assert plan["outputs"].count("output 'y'") >= 1


def test_environment_variable_and_option(tmp_path, monkeypatch):
    env_path, option_path = tmp_path / "env.txt", tmp_path / "option.txt"
    monkeypatch.setenv("MKCACHE_DUMP", str(env_path))
    with conv_relu_graph() as g:
        g.compile().close()
        assert env_path.exists() and "after plan_memory" in env_path.read_text()
        before = env_path.read_text()
        # The option wins over the variable; sections are appended.
        g.compile(dump=option_path).close()
        assert env_path.read_text() == before
        assert option_path.read_text().count("graph as built") == 1
        g.compile(dump=option_path).close()
        assert option_path.read_text().count("graph as built") == 2
    monkeypatch.delenv("MKCACHE_DUMP")
    with conv_relu_graph() as g:
        g.compile().close()
    assert env_path.read_text() == before


def test_dynamic_shapes_dump_a_plan_each(tmp_path):
    path = tmp_path / "ir.txt"
    with conv_relu_graph(batch=None) as g, g.compile(dump=path) as prog:
        assert "plan " not in path.read_text()  # nothing to plan before a run
        prog.run(x=rand(1, 3, 9, 7))
        prog.run(x=rand(3, 3, 9, 7))
    titles = [t for t, _ in sections(path.read_text())]
    assert sum(t.endswith("after plan_memory") for t in titles) == 2
    built = sections(path.read_text())[0][1]
    assert "v0 input 'x' float32 [?1,3,9,7] NCHW" in built


def test_bad_dump_paths_are_refused(tmp_path):
    with conv_relu_graph() as g:
        with pytest.raises(mkcache.InvalidArgumentError, match="dump: cannot open"):
            g.compile(dump=tmp_path / "no-such-dir" / "ir.txt")
        with pytest.raises(mkcache.InvalidArgumentError, match="dump must be a path"):
            g.compile(dump=3)
        with pytest.raises(mkcache.InvalidArgumentError, match="NUL"):
            g.compile(dump="a\0b")
        # Nothing was lost: the graph still compiles and runs.
        with g.compile() as prog:
            assert prog.run(x=rand(2, 3, 9, 7))["y"].shape == (2, 5, 9, 7)
