"""The kernel variants against the priority choice, in the same run: the
BERT-base layer (batch 1) at sequence lengths 32, 128 and 512 compiled
seven ways - by priority (float32 linears on oneDNN's matmul; the
attention's matmuls on strided views, or the
attention as one step in row blocks where its scores outgrow the L2
caches), the attention in three steps (impl matmul=onednn), every
linear on oneDNN's inner product (impl linear=onednn), every linear on
its matmul (impl linear=onednn_matmul), every linear as a 1x1
convolution (impl linear=onednn_conv1x1), the attention's matmuls on
contiguous copies (impl matmul=onednn_contiguous), and choose="measure" -
run interleaved
round-robin on the library's thread count. The first table gives each
program's median time and its ratio to the priority one; the second the
median time of each kind of step (from interleaved profiles), so that
which variant wins where is read per shape. The header names the ISA: run
it again with ONEDNN_MAX_CPU_ISA=AVX2 for the AVX2 kernels.

    python -m pytest tests/bench/test_bench_variants.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mkcache
from mkcache.models import BertLayer, interleaved

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import machine_isa, register  # noqa: E402

ISA = machine_isa()
THREADS = mkcache.build_info()["max_threads"]
SEQS = {32: 200, 128: 80, 512: 20}  # sequence length -> timed repetitions
PROFILES = 15
VARIANTS = {
    "priority": {},
    "linear on inner product": dict(impl={"linear": "onednn"}),
    "linear on matmul": dict(impl={"linear": "onednn_matmul"}),
    "linear as 1x1 conv": dict(impl={"linear": "onednn_conv1x1"}),
    "attention on copies": dict(impl={"matmul": "onednn_contiguous"}),
    # A matmul implementation asked for by name keeps the attention in three
    # steps where the priority plan runs it as one (long sequences).
    "attention in three steps": dict(impl={"matmul": "onednn"}),
    "measure": dict(choose="measure"),
}
# seq -> variant -> seconds per run
RESULTS: dict = defaultdict(dict)
# seq -> variant -> step kind -> microseconds (sum over the layer's steps of that kind)
STEPS: dict = defaultdict(dict)


def _kind(what: str) -> str | None:
    """The kind of step a profile row is: a linear by its shape, the two
    attention matmuls and the softmax between them (or the one step they
    make), or the conversions (None: the rest)."""
    if "as one attention step" in what:
        return "attention as one step"
    for name, kind in (("query", "q/k/v linears"), ("key", "q/k/v linears"),
                       ("value", "q/k/v linears"), ("attention.output.dense", "out linear"),
                       ("intermediate.dense", "ffn up linear"), ("output.dense", "ffn down linear"),
                       ("attention.scores", "scores matmul"), ("attention.probs", "softmax"),
                       ("attention.context", "context matmul")):
        if f".{name}'" in what or f"'{name}'" in what:
            return kind
    return "conversions" if what.startswith("convert") else None


@pytest.mark.parametrize("seq", list(SEQS))
def test_variants_against_priority(benchmark, seq):
    benchmark.group = f"BERT layer seq {seq}"
    layer = BertLayer(0)
    x = np.random.default_rng(seq).standard_normal((1, seq, 768)).astype(np.float32)
    with layer.graph(batch=1, seq=seq) as g:
        programs = {name: g.compile(**options) for name, options in VARIANTS.items()}
    try:
        want = programs["priority"].run(x=x)["y"]
        for name, prog in programs.items():  # the same layer, whichever kernels
            np.testing.assert_allclose(prog.run(x=x)["y"], want, rtol=2e-4, atol=2e-4,
                                       err_msg=name)
        fns = {name: (lambda prog=prog: prog.run(x=x)) for name, prog in programs.items()}
        reps = 1 if benchmark.disabled else SEQS[seq]
        result = {}
        benchmark.pedantic(lambda: result.update(interleaved(fns, reps)), rounds=1,
                           iterations=1)
        if getattr(benchmark, "stats", None) is None:
            return
        RESULTS[seq] = result
        samples = {name: defaultdict(list) for name in programs}
        for r in range(PROFILES):
            names = list(programs)
            for name in names[r % len(names):] + names[:r % len(names)]:
                per_kind = defaultdict(float)
                for row in programs[name].profile(x=x):
                    kind = _kind(row["what"])
                    if kind:
                        per_kind[kind] += row["us"]
                for kind, us in per_kind.items():
                    samples[name][kind].append(us)
        STEPS[seq] = {name: {kind: statistics.median(v) for kind, v in kinds.items()}
                      for name, kinds in samples.items()}
    finally:
        for prog in programs.values():
            prog.close()


def render_tables() -> str:
    names = list(VARIANTS)
    lines = [f"BERT-base layer, batch 1, {ISA}, {THREADS} threads; ms per run (median), "
             "ratio to priority (below 1: faster)", "",
             "| seq | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for seq, r in RESULTS.items():
        base = r["priority"]
        cells = [f"{base * 1e3:.3f}"] + [f"{r[n] * 1e3:.3f} ({r[n] / base:.3f})"
                                         for n in names[1:]]
        lines.append(f"| {seq} | " + " | ".join(cells) + " |")
    lines += ["", "Per kind of step, us (median of profiles):", "",
              "| seq | step | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for seq, by_name in STEPS.items():
        kinds = sorted({k for kinds in by_name.values() for k in kinds})
        for kind in kinds:
            cells = [f"{by_name[n][kind]:.1f}" if kind in by_name[n] else "-" for n in names]
            lines.append(f"| {seq} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    register(request, "mkcache-variants-report", lambda: [
        ("kernel variants against the priority choice (interleaved round-robin)",
         render_tables())] if RESULTS else [])
    yield
