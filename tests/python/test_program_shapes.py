"""A program over many input shapes: what its plans share and which it keeps.

- Results over many sequence lengths (a small BERT layer, its length bound
  at run time) against float64 numpy, and against a program that only ever
  saw that length.
- A linear layer's weights converted once for every length: the plans of
  later lengths read the arrangement the first plan converted them to
  (oneDNN picks another for long sequences when asked afresh), which the
  plan text names and held_constant_bytes counts once.
- capacity drops the plan used least recently: a repeated set of shapes
  within the capacity compiles nothing after its first pass, and every
  plan dropped counts one eviction of its entries in the cache counters.
- Threads running different lengths at once, with and without a capacity.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import mkcache
from mkcache.models import BertLayer, max_relative_error

MODEL = BertLayer(3, hidden=64, heads=4, ffn=256)
HIDDEN = MODEL.hidden


def _x(seq, seed=0):
    return np.random.default_rng(seed + seq).standard_normal((1, seq, HIDDEN), dtype=np.float32)


def _program(**options):
    g = MODEL.graph(batch=1)  # seq bound at run time
    try:
        return g.compile(**options)
    finally:
        g.close()


def _linear_format(prog, node_name):
    # The node's step (the lines before them say what was fused into it).
    lines = [line for line in prog.plan().splitlines()
             if line.split(":")[0].isdigit() and f"(linear '{node_name}')" in line]
    assert len(lines) == 1, prog.plan()
    # "... [input 'x' abc, const#0 AB16b32a, const#1 a] -> ..."
    return lines[0].split("const#")[1].split(" ", 1)[1].rstrip(",]").split(",")[0]


def _executor_entries(prog):
    """{shape group: entries} of the program's cache entries."""
    tag = f"|e{prog.executor_id:x}"
    found: dict = {}
    for group, key in mkcache.cache.keys(0):
        if key.endswith(tag) or f"{tag}|" in key:
            found[group] = found.get(group, 0) + 1
    return found


LENGTHS = [1, 8, 37, 64, 200, 512, 3, 129]


def test_many_lengths_against_float64_and_the_single_shape_program():
    with _program() as prog:
        for seq in LENGTHS:
            x = _x(seq)
            got = prog.run(x=x)["y"]
            assert got.shape == (1, seq, HIDDEN)
            assert max_relative_error(got, MODEL.reference(x)) < 1e-5, seq
            with _program() as alone:
                np.testing.assert_allclose(got, alone.run(x=x)["y"], rtol=1e-5, atol=1e-5)
        assert prog.memory["plans"] == len(LENGTHS)
        # Known lengths again, in another order: the same plans.
        for seq in reversed(LENGTHS):
            x = _x(seq)
            assert max_relative_error(prog.run(x=x)["y"], MODEL.reference(x)) < 1e-5, seq
        assert prog.memory["plans"] == len(LENGTHS)


def test_batch_and_length_both_bound_at_run_time():
    g = MODEL.graph(batch=None)
    with g.compile() as prog:
        for batch, seq in ((2, 5), (3, 64), (1, 300), (2, 64)):
            x = np.random.default_rng(batch * seq).standard_normal((batch, seq, HIDDEN),
                                                                    dtype=np.float32)
            assert max_relative_error(prog.run(x=x)["y"], MODEL.reference(x)) < 1e-5
    g.close()


@pytest.mark.parametrize("first", [8, 512])
def test_a_linears_weights_are_converted_once_for_every_length(first):
    with _program() as prog:
        prog.run(x=_x(first))
        one_plan = prog.memory["constant_bytes"]
        formats = {name: _linear_format(prog, name) for name in BertLayer.LINEARS}
        assert one_plan > 0 and prog.memory["held_constant_bytes"] == one_plan
        for seq in (512, 8, 1, 100, 257):
            prog.run(x=_x(seq))
            # Each plan reads the copies the first one made.
            assert {name: _linear_format(prog, name) for name in BertLayer.LINEARS} == formats
            assert prog.memory["constant_bytes"] == one_plan
            assert prog.memory["held_constant_bytes"] == one_plan


def test_a_copy_goes_with_the_last_plan_holding_it():
    with _program(capacity=1) as prog:
        prog.run(x=_x(8))
        held = prog.memory["held_constant_bytes"]
        for seq in (512, 9, 300):
            prog.run(x=_x(seq))
            assert prog.memory["plans"] == 1
            assert prog.memory["held_constant_bytes"] == held


def test_capacity_drops_the_plan_used_least_recently():
    with _program(capacity=2) as prog:
        a, b, c = _x(5), _x(6), _x(7)
        prog.run(x=a)
        prog.run(x=b)
        prog.run(x=a)  # a used after b: b goes first
        before = mkcache.cache.stats()
        prog.run(x=c)
        after = mkcache.cache.stats()
        assert after["evictions"] - before["evictions"] == 1
        groups = _executor_entries(prog)
        assert "program:1x6x64" not in groups, groups
        assert {"program:1x5x64", "program:1x7x64"} <= set(groups), groups
        # a is kept: running it compiles nothing.
        before = mkcache.cache.stats()
        np.testing.assert_allclose(prog.run(x=a)["y"], MODEL.reference(a), rtol=1e-4, atol=1e-4)
        after = mkcache.cache.stats()
        assert after["insertions"] == before["insertions"]
        assert after["evictions"] == before["evictions"]
        assert prog.memory["plans"] == 2


def test_a_repeated_set_within_the_capacity_compiles_once():
    lengths = [11, 12, 13, 14]
    with _program(capacity=4) as prog:
        for seq in lengths:
            prog.run(x=_x(seq))
        before = mkcache.cache.stats()
        for _ in range(3):
            for seq in lengths[::-1] + lengths:
                prog.run(x=_x(seq))
        after = mkcache.cache.stats()
        assert after["insertions"] == before["insertions"]
        assert after["misses"] == before["misses"]
        assert after["evictions"] == before["evictions"]
        assert prog.memory["plans"] == 4


def test_every_plan_dropped_counts_one_eviction_of_its_entries():
    lengths = [21, 22, 23]
    with _program(capacity=2) as prog:
        per_plan = {}
        before = mkcache.cache.stats()
        for k, seq in enumerate(lengths * 2):  # 6 compiles, each past the capacity once 2 are kept
            held = _executor_entries(prog)
            prog.run(x=_x(seq))
            if k >= 2:
                # The plan dropped is the one used least recently: lengths[k - 2].
                dropped = f"program:1x{lengths[(k - 2) % 3]}x64"
                per_plan[k] = held[dropped]
                assert dropped not in _executor_entries(prog)
        after = mkcache.cache.stats()
        assert after["evictions"] - before["evictions"] == 4
        assert after["evicted_entries"] - before["evicted_entries"] == sum(per_plan.values())
        assert all(n > 0 for n in per_plan.values())
        session = mkcache.cache.stats(0)
        assert session["evictions"] >= 4


@pytest.mark.parametrize("capacity", [0, 2])
def test_threads_running_different_lengths_at_once(capacity):
    lengths = [4, 9, 16, 33, 64, 130]
    inputs = {seq: _x(seq, seed=7) for seq in lengths}
    wants = {seq: MODEL.reference(x) for seq, x in inputs.items()}
    errors = []
    with _program(capacity=capacity) as prog:
        start = threading.Barrier(4)

        def worker(i):
            try:
                start.wait()
                for k in range(24):
                    seq = lengths[(i * 5 + k) % len(lengths)]
                    got = prog.run(x=inputs[seq])["y"]
                    assert max_relative_error(got, wants[seq]) < 1e-5, seq
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        assert prog.memory["plans"] == (len(lengths) if capacity == 0 else 2)
        # The weights stayed one copy, whoever compiled first.
        assert prog.memory["held_constant_bytes"] == prog.memory["constant_bytes"]


def test_memory_fields_need_a_plan():
    with _program() as prog:
        with pytest.raises(mkcache.InvalidArgumentError):
            prog.memory  # noqa: B018 (the property's call is the test)
