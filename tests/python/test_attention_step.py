"""An attention's scores -> softmax -> context chain run as one plan step, in
blocks of rows per thread, where the scores of all heads outgrow the L2
caches of the threads in use. Results against float64 numpy and against the
same chain run as three steps (a matmul implementation asked for by name),
with masks of every broadcast, b and v read transposed, the BERT layer's
strided views, odd sizes, batch > 1, one and two OpenMP threads, and two
Python threads on one program; where the chain must stay three steps, it
does."""
import threading

import numpy as np
import pytest

import mkcache
from mkcache.models import BertLayer

L2 = mkcache.build_info()["l2_cache_bytes"]
FUSED = "as one attention step"
# Odd sizes, neither a multiple of 16: batch 2, 3 heads, depth 40, width 24.
B, H, D, DV, COLS = 2, 3, 40, 24, 389


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def rows_that_fire(slices, cols, threads):
    """An odd row count for which the scores of all slices outgrow the L2
    caches of `threads` threads (the rule the compiler applies)."""
    return (L2 * threads // (slices * cols * 4) + 17) | 1


def fires(slices, rows, cols, threads):
    return cols >= 256 and slices * rows * cols * 4 > L2 * threads


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def want(q, k, v, mask=None, scale=0.125, transposed_v=False):
    s = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2) * scale
    if mask is not None:
        s = s + mask
    v = v.astype(np.float64)
    return softmax(s) @ (np.swapaxes(v, -1, -2) if transposed_v else v)


def chain(q_shape, k_shape, v_shape, mask_shape=None, scale=0.125, transposed_v=False):
    g = mkcache.Graph()
    q, k, v = g.input("q", q_shape), g.input("k", k_shape), g.input("v", v_shape)
    s = g.mul(g.matmul(q, k, transpose_b=True), scale)
    if mask_shape is not None:
        s = g.add(s, g.input("mask", mask_shape))
    g.output(g.matmul(g.softmax(s, -1), v, transpose_b=transposed_v), "y")
    return g


MASKS = {
    "none": None,
    "per-batch key mask": lambda rows: (B, 1, 1, COLS),
    "full mask": lambda rows: (B, 1, rows, COLS),
    "one full mask": lambda rows: (1, 1, rows, COLS),
    "rank-1": lambda rows: (COLS,),
}


def inputs_for(rows, mask, transposed_v=False, seed=0):
    got = {"q": rand(B, H, rows, D, seed=seed + 1), "k": rand(B, H, COLS, D, seed=seed + 2),
           "v": rand(B, H, DV, COLS, seed=seed + 3) if transposed_v
           else rand(B, H, COLS, DV, seed=seed + 3)}
    if MASKS[mask] is not None:
        m = np.random.default_rng(seed + 4).random(MASKS[mask](rows)) < 0.3
        got["mask"] = np.where(m, -1e4, 0).astype(np.float32)
    return got


def check_against_three_steps(g, feeds, expect, fused=True):
    with g.compile() as p, g.compile(impl={"matmul": "onednn"}) as apart:
        got, three = p.run(**feeds)["y"], apart.run(**feeds)["y"]
        assert (FUSED in p.plan()) == fused, p.plan()
        assert FUSED not in apart.plan()
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(got, three, rtol=1e-4, atol=2e-5)
    return got


@pytest.mark.parametrize("mask", list(MASKS))
def test_chain_runs_as_one_step(mask):
    threads = mkcache.get_num_threads()
    rows = rows_that_fire(B * H, COLS, threads)
    feeds = inputs_for(rows, mask)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV),
              None if MASKS[mask] is None else feeds["mask"].shape)
    check_against_three_steps(g, feeds, want(feeds["q"], feeds["k"], feeds["v"],
                                             feeds.get("mask")))


def test_v_read_transposed():
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    feeds = inputs_for(rows, "per-batch key mask", transposed_v=True, seed=10)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, DV, COLS), feeds["mask"].shape,
              transposed_v=True)
    check_against_three_steps(g, feeds, want(feeds["q"], feeds["k"], feeds["v"], feeds["mask"],
                                             transposed_v=True))


@pytest.mark.parametrize("threads", [1, 2])
def test_one_and_two_openmp_threads(threads):
    before = mkcache.get_num_threads()
    mkcache.set_num_threads(threads)
    try:
        rows = rows_that_fire(B * H, COLS, threads)
        feeds = inputs_for(rows, "full mask", seed=20)
        g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV), feeds["mask"].shape)
        check_against_three_steps(g, feeds, want(feeds["q"], feeds["k"], feeds["v"],
                                                 feeds["mask"]))
    finally:
        mkcache.set_num_threads(before)


def test_the_step_counts_both_products():
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    feeds = inputs_for(rows, "none", seed=30)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV))
    with g.compile() as p:
        steps = [s for s in p.profile(**feeds) if FUSED in s["what"]]
    assert len(steps) == 1
    assert steps[0]["impl"].startswith("onednn_attention:")
    assert steps[0]["flops"] == 2 * B * H * rows * COLS * (D + DV)


def test_small_scores_stay_three_steps():
    rows = 9
    assert not fires(B * H, rows, 17, 1)
    q, k, v = rand(B, H, rows, D, seed=40), rand(B, H, 17, D, seed=41), rand(B, H, 17, DV, seed=42)
    g = chain(q.shape, k.shape, v.shape)
    check_against_three_steps(g, {"q": q, "k": k, "v": v}, want(q, k, v), fused=False)


def test_many_short_sequences_stay_three_steps():
    # Their scores outgrow the caches, but 128 keys a slice are too few for
    # one thread's kernels.
    h, rows, cols = 12, 128, 128
    threads = mkcache.get_num_threads()
    b = L2 * threads // (h * rows * cols * 4) + 1
    assert b * h * rows * cols * 4 > L2 * threads and not fires(b * h, rows, cols, threads)
    q, k, v = rand(b, h, rows, D, seed=43), rand(b, h, cols, D, seed=44), rand(b, h, cols, DV,
                                                                               seed=45)
    g = chain(q.shape, k.shape, v.shape)
    check_against_three_steps(g, {"q": q, "k": k, "v": v}, want(q, k, v), fused=False)


def test_stays_three_steps_without_fusion_or_with_a_matmul_asked_for():
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    feeds = inputs_for(rows, "none", seed=50)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV))
    expect = want(feeds["q"], feeds["k"], feeds["v"])
    for options in ({"fuse": False}, {"impl": {"matmul": "reference"}},
                    {"impl": {"softmax": "onednn"}}):
        with g.compile(**options) as p:
            np.testing.assert_allclose(p.run(**feeds)["y"], expect, rtol=1e-4, atol=2e-5)
            assert FUSED not in p.plan(), options


def test_k_and_v_shared_by_the_batch():
    # k and v of batch 1 broadcast into q's batch: every batch reads the
    # same slices of them.
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    q, k, v = rand(B, H, rows, D, seed=60), rand(1, H, COLS, D, seed=61), rand(1, H, COLS, DV,
                                                                             seed=62)
    g = chain(q.shape, k.shape, v.shape)
    check_against_three_steps(g, {"q": q, "k": k, "v": v}, want(q, k, v))


def test_q_shared_by_the_batch_stays_three_steps():
    # The result's batch comes from k and v: the step takes its slices from q.
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    q, k, v = rand(1, H, rows, D, seed=63), rand(B, H, COLS, D, seed=64), rand(B, H, COLS, DV,
                                                                             seed=65)
    g = chain(q.shape, k.shape, v.shape)
    check_against_three_steps(g, {"q": q, "k": k, "v": v}, want(q, k, v), fused=False)


def test_bert_layer_reads_its_heads_as_strided_views():
    threads = mkcache.get_num_threads()
    seq = next(s for s in range(8, 4096, 8) if fires(12, s, s, threads)) + 3
    model = BertLayer(0)
    x = rand(1, seq, 768, seed=70)
    with model.graph(batch=1) as g, g.compile() as p, \
            g.compile(impl={"matmul": "onednn"}) as apart:
        got, three = p.run(x=x)["y"], apart.run(x=x)["y"]
        plan = p.plan()
    assert FUSED in plan and "acbd" in plan.split(FUSED)[1].splitlines()[0], plan
    np.testing.assert_allclose(got, model.reference(x), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got, three, rtol=1e-4, atol=1e-4)


def test_two_python_threads_on_one_program():
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV), (B, 1, 1, COLS))
    feeds = [inputs_for(rows, "per-batch key mask", seed=80 + 10 * t) for t in range(2)]
    expect = [want(f["q"], f["k"], f["v"], f["mask"]) for f in feeds]
    errors = []
    with g.compile() as p:
        assert FUSED in p.plan()

        def worker(t):
            try:
                for _ in range(5):
                    np.testing.assert_allclose(p.run(**feeds[t])["y"], expect[t], rtol=1e-4,
                                               atol=2e-5)
            except Exception as e:  # reported below, on the main thread
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert not errors, errors


def test_bfloat16_plans_keep_three_steps():
    if mkcache.build_info()["bf16"] == "none":
        pytest.skip(f"no bfloat16 kernels on {mkcache.build_info()['isa']}")
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads())
    feeds = inputs_for(rows, "none", seed=90)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV))
    with g.compile(precision="bf16") as p:
        got = p.run(**feeds)["y"]
        assert FUSED not in p.plan()
    np.testing.assert_allclose(got, want(feeds["q"], feeds["k"], feeds["v"]), atol=3e-2)


@pytest.mark.parametrize("rows", ["fire", 12])
def test_measured_plans_time_the_chain_as_one_step_and_as_three(rows, tmp_path):
    """Measuring, every chain is timed both ways, where the rule fires and
    where it does not: the faster kept (the rule's choice first, the other
    by more than 3%), remembered in the choices and read back as it is."""
    rows = rows_that_fire(B * H, COLS, mkcache.get_num_threads()) if rows == "fire" else rows
    feeds = inputs_for(rows, "per-batch key mask", seed=100)
    g = chain((B, H, rows, D), (B, H, COLS, D), (B, H, COLS, DV), feeds["mask"].shape)
    exact = want(feeds["q"], feeds["k"], feeds["v"], feeds["mask"])
    with g.compile(choose="measure") as p:
        got = p.run(**feeds)["y"]
        plan = p.plan()
        lines = [line for line in p.choices().splitlines() if line.startswith("attention|")]
        p.save_choices(tmp_path / "choices.txt")
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=2e-5)
    assert len(lines) == 1, lines
    _, chosen, times = lines[0].split("\t")
    us = {n: float(t) for n, t in (part.split("=") for part in times.split(","))}
    assert set(us) == {"onednn_attention", "three_steps"} and chosen in us, lines
    assert us[chosen] * 0.97 <= min(us.values()) + 1e-9 or chosen == list(us)[0], lines
    assert (FUSED in plan) == (chosen == "onednn_attention"), plan
    assert "measured: " in plan and "three_steps " in plan, plan
    with g.compile(choices=tmp_path / "choices.txt") as again:  # read back, not timed again
        np.testing.assert_allclose(again.run(**feeds)["y"], exact, rtol=1e-4, atol=2e-5)
        assert (FUSED in again.plan()) == (chosen == "onednn_attention")
        assert "measured (loaded): " in again.plan()


def test_a_chain_choice_of_an_unknown_kind_is_refused():
    g = chain((B, H, 12, D), (B, H, COLS, D), (B, H, COLS, DV))
    with pytest.raises(mkcache.InvalidArgumentError, match="unknown implementation 'one_step'"):
        g.compile(choices=b"attention|isa1|t1|node0\tone_step\tone_step=1\n")
