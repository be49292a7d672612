"""Dims bound at run time followed through reshape, transpose, matmul and
concat: a residual add after them fuses into the linear layer before it as
its sum where the two shapes are equal in every run, and only there. Each
program is checked against float64 numpy at several lengths."""
from __future__ import annotations

import re

import numpy as np
import pytest

import mkcache
import reference as ref

RNG = np.random.default_rng(23)
HIDDEN, HEADS = 12, 3
HEAD = HIDDEN // HEADS


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def sums(prog) -> int:
    """How many adds the program fused as sums (its plan's first line)."""
    found = re.search(r"(\d+) sum", prog.plan().splitlines()[0])
    return int(found.group(1)) if found else 0


def check(got, exact, reduction):
    ref.assert_close(got, exact, np.abs(exact) + 1, reduction)


W = {name: rand(HIDDEN, HIDDEN) for name in ("q", "k", "v", "o")}
B = {name: rand(HIDDEN) for name in W}


def attention_block(g, x):
    """x [1, S, hidden] -> output linear of multi-head attention, + x."""
    def heads(v):
        return g.transpose(g.reshape(v, (0, 0, HEADS, HEAD)), (0, 2, 1, 3))

    q, k, v = (heads(g.linear(x, W[n], B[n])) for n in ("q", "k", "v"))
    probs = g.softmax(g.matmul(q, k, transpose_b=True), -1)
    ctx = g.reshape(g.transpose(g.matmul(probs, v), (0, 2, 1, 3)), (0, 0, HIDDEN))
    return g.add(g.linear(ctx, W["o"], B["o"]), x)


def attention_exact(x):
    x = x.astype(np.float64)

    def heads(v):
        return v.reshape(1, -1, HEADS, HEAD).transpose(0, 2, 1, 3)

    q, k, v = (heads(x @ W[n].T.astype(np.float64) + B[n]) for n in ("q", "k", "v"))
    probs = ref.softmax(q @ k.transpose(0, 1, 3, 2), -1)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(1, -1, HIDDEN)
    return ctx @ W["o"].T.astype(np.float64) + B["o"] + x


def test_a_residual_after_attention_fuses_with_the_length_bound_at_run_time():
    with mkcache.Graph() as g:
        g.output(attention_block(g, g.input("x", (1, None, HIDDEN))), "y")
        with g.compile() as prog:
            for seq in (3, 17, 5):
                x = rand(1, seq, HIDDEN)
                check(prog.run(x=x)["y"], attention_exact(x), 3 * HIDDEN + seq)
            assert sums(prog) == 1, prog.plan()


def test_reshapes_keep_a_symbol_where_it_moves_whole():
    """(0, 8) and (-1, 8) keep the length; the residual is the input."""
    w = rand(8, 8)
    for shape in ((0, 8), (-1, 8)):
        with mkcache.Graph() as g:
            x = g.input("x", (None, 4, 2))
            flat = g.reshape(x, shape)
            g.output(g.add(g.linear(flat, w), flat), "y")
            with g.compile() as prog:
                for n in (2, 7):
                    xs = rand(n, 4, 2)
                    f = xs.reshape(n, 8).astype(np.float64)
                    check(prog.run(x=xs)["y"], f @ w.T.astype(np.float64) + f, 8)
                assert sums(prog) == 1, (shape, prog.plan())


def test_concat_keeps_its_other_axes():
    """Concatenated along the hidden axis: the length passes, and the add
    with the input fuses."""
    w = rand(HIDDEN, 2 * HIDDEN)
    with mkcache.Graph() as g:
        x = g.input("x", (1, None, HIDDEN))
        both = g.concat([x, g.relu(x)], axis=2)
        g.output(g.add(g.linear(both, w), x), "y")
        with g.compile() as prog:
            for seq in (4, 9):
                xs = rand(1, seq, HIDDEN)
                b = np.concatenate([xs, np.maximum(xs, 0)], axis=2).astype(np.float64)
                check(prog.run(x=xs)["y"], b @ w.T.astype(np.float64) + xs, 2 * HIDDEN)
            assert sums(prog) == 1, prog.plan()


@pytest.mark.parametrize("case", ["two inputs", "a doubled length", "a sum"])
def test_shapes_equal_in_some_runs_only_are_not_fused(case):
    """Two lengths bound apart, a length doubled, or lengthened
    by a concat: the add cannot be a sum (its operands' shapes differ in
    some runs). It runs where they agree and is refused where they do not."""
    w = rand(4, 4)
    pad = rand(1, 2, 4)
    with mkcache.Graph() as g:
        a = g.input("a", (1, None, 4))
        b = g.input("b", (1, None, 4))
        if case == "two inputs":
            left = a
        elif case == "a doubled length":
            # a through [1, 2S, 2] and back (the length returns), then
            # beside a along the rows: [1, 2S, 4]
            left = g.concat([a, g.reshape(g.reshape(a, (1, -1, 2)), (1, -1, 4))], axis=1)
        else:
            left = g.concat([a, g.constant(pad)], axis=1)  # [1, S + 2, 4]
        g.output(g.add(g.linear(left, w), b), "y")
        with g.compile() as prog:
            xa = rand(1, 3, 4)
            la = {"two inputs": xa, "a doubled length": np.concatenate([xa, xa], axis=1),
                  "a sum": np.concatenate([xa, pad], axis=1)}[case]
            xb = rand(*la.shape)
            exact = la.astype(np.float64) @ w.T.astype(np.float64) + xb
            check(prog.run(a=xa, b=xb)["y"], exact, 4)
            assert sums(prog) == 0, prog.plan()
            with pytest.raises(mkcache.Error):
                prog.run(a=xa, b=rand(1, la.shape[1] + 1, 4))
