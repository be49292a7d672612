"""A matmul's addend: activation(scale * (a @ b + bias) + addend), the
addend broadcast into the product - given to Graph.matmul, or an add after
the matmul (an attention's mask) that a plan folds into it as oneDNN's
binary post-op. Results against float64 numpy on oneDNN and the reference
kernel, in float32 and bfloat16; the adds a plan must not fold (the add
widens the product, the product has another reader, an activation comes
first, the addend is computed after the matmul, fusion off) stay adds."""
import numpy as np
import pytest

import mkcache

HAS_BF16 = mkcache.build_info()["bf16"] != "none"


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention_graph(mask_shape, scale=0.25, activation=None):
    """softmax(q @ k^T * scale + mask) over dims bound at run time."""
    g = mkcache.Graph()
    q = g.input("q", (None, 3, None, 8))
    k = g.input("k", (None, 3, None, 8))
    m = g.input("mask", mask_shape)
    s = g.mul(g.matmul(q, k, transpose_b=True, activation=activation), scale)
    g.output(g.softmax(g.add(s, m), -1), "p")
    return g


def want_attention(q, k, mask, scale=0.25):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) * scale + mask
    return softmax(s)


MASKS = {
    "per-batch key mask": lambda b, s: (b, 1, 1, s),
    "full mask": lambda b, s: (b, 1, s, s),
    "one key mask": lambda b, s: (1, 1, 1, s),
    "rank-1": lambda b, s: (s,),
}


@pytest.mark.parametrize("impl", ["onednn", "reference"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_mask_add_folds_into_the_scores(mask, impl):
    rank = len(MASKS[mask](1, 1))
    shape = tuple(None if d != 1 else 1 for d in MASKS[mask](2, 2))
    if rank == 1:
        shape = (None,)
    impls = {"matmul": "reference"} if impl == "reference" else None
    with attention_graph(shape) as g, g.compile(impl=impls) as p:
        for b, s in ((2, 7), (3, 13)):
            q, k = rand(b, 3, s, 8, seed=1), rand(b, 3, s, 8, seed=2)
            m = np.where(np.random.default_rng(3).random(MASKS[mask](b, s)) < 0.3, -1e4,
                         0).astype(np.float32)
            got = p.run(q=q, k=k, mask=m)["p"]
            np.testing.assert_allclose(got, want_attention(q, k, m), atol=2e-6)
            plan = p.plan()
            # No step of its own: the scores' matmul, then the softmax.
            assert "as its addend" in plan and ": 2 steps" in plan, plan


def test_adds_that_must_not_fold_stay_adds():
    # The add widens the product (scores of batch 1, a mask of batch 2).
    q, k = rand(1, 3, 5, 8, seed=4), rand(1, 3, 5, 8, seed=5)
    m = rand(2, 1, 1, 5, seed=6)
    with attention_graph((None, 1, 1, None)) as g, g.compile() as p:
        got = p.run(q=q, k=k, mask=m)["p"]
        assert got.shape == (2, 3, 5, 5)
        np.testing.assert_allclose(got, want_attention(q, k, m), atol=2e-6)
        assert "as its addend" not in p.plan()
    # An activation on the product comes before the add.
    with attention_graph((None, 1, 1, None), activation="relu") as g, g.compile() as p:
        q, k, m = rand(2, 3, 5, 8, seed=7), rand(2, 3, 5, 8, seed=8), rand(2, 1, 1, 5, seed=9)
        s = np.maximum(q.astype(np.float64) @ np.swapaxes(k, -1, -2), 0) * 0.25 + m
        np.testing.assert_allclose(p.run(q=q, k=k, mask=m)["p"], softmax(s), atol=2e-6)
        assert "as its addend" not in p.plan()
    # The product has a second reader; the addend is computed after it;
    # fusion is off.
    g = mkcache.Graph()
    a, b = g.input("a", (4, 6)), g.input("b", (6, 5))
    y = g.matmul(a, b)
    g.output(g.add(y, g.relu(y)), "two_readers")
    g.output(g.add(g.matmul(a, b), g.relu(g.matmul(a, b))), "later_addend")
    av, bv = rand(4, 6, seed=10), rand(6, 5, seed=11)
    prod = av.astype(np.float64) @ bv
    for fuse in (True, False):
        with g.compile(fuse=fuse) as p:
            out = p.run(a=av, b=bv)
            for name in ("two_readers", "later_addend"):
                np.testing.assert_allclose(out[name], prod + np.maximum(prod, 0), rtol=1e-5,
                                           atol=1e-5)
            assert "as its addend" not in p.plan()
    with attention_graph((None, 1, 1, None)) as g, g.compile(fuse=False) as p:
        q, k, m = rand(2, 3, 5, 8, seed=12), rand(2, 3, 5, 8, seed=13), rand(2, 1, 1, 5, seed=14)
        np.testing.assert_allclose(p.run(q=q, k=k, mask=m)["p"], want_attention(q, k, m),
                                   atol=2e-6)
        assert "as its addend" not in p.plan()


@pytest.mark.parametrize("impl", ["onednn", "reference"])
def test_graph_matmul_addend(impl):
    """Given to Graph.matmul: after the scale and bias, before the
    activation; one that would widen the product is refused at compile."""
    g = mkcache.Graph()
    a, b, e = g.input("a", (2, 5, 6)), g.input("b", (6, 7)), g.input("e", (1, 7))
    g.output(g.matmul(a, b, rand(7, seed=15), scale=0.5, activation="relu", addend=e), "y")
    av, bv, ev = rand(2, 5, 6, seed=16), rand(6, 7, seed=17), rand(1, 7, seed=18)
    want = np.maximum((av.astype(np.float64) @ bv + rand(7, seed=15)) * 0.5 + ev, 0)
    impls = {"matmul": "reference", "activation": "reference"} if impl == "reference" else None
    with g.compile(impl=impls) as p:
        np.testing.assert_allclose(p.run(a=av, b=bv, e=ev)["y"], want, rtol=1e-5, atol=1e-5)
    g.close()
    g = mkcache.Graph()
    a, b, e = g.input("a", (1, 5, 6)), g.input("b", (6, 7)), g.input("e", (3, 5, 7))
    g.output(g.matmul(a, b, addend=e), "y")
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"matmul: the addend \[3, 5, 7\] does not broadcast into the "
                             r"result \[1, 5, 7\]"):
        g.compile().run(a=rand(1, 5, 6), b=rand(6, 7), e=rand(3, 5, 7))
    g.close()


@pytest.mark.skipif(not HAS_BF16, reason=f"oneDNN has no bfloat16 kernels for "
                                         f"{mkcache.build_info()['isa']}")
def test_bf16_attention_with_mask():
    with attention_graph((None, 1, 1, None)) as g, g.compile(precision="bf16") as p:
        q, k = rand(2, 3, 9, 8, seed=19), rand(2, 3, 9, 8, seed=20)
        m = np.where(np.random.default_rng(21).random((2, 1, 1, 9)) < 0.3, -1e4,
                     0).astype(np.float32)
        got = p.run(q=q, k=k, mask=m)["p"]
        np.testing.assert_allclose(got, want_attention(q, k, m), atol=2e-2)
        assert "as its addend" in p.plan()
