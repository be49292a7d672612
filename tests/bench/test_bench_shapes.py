"""A model over many input shapes: the BERT-base layer (mkcache.models, batch
1) run over 64 sequence lengths (8, 16, ..., 512), 3 passes, by mkcache (the
graph compiled as a program; the ONNX model imported) and by onnxruntime
(the same ONNX model, sequence length symbolic), and by mkcache with every
plan exact (`exact_plans=-1`: no linear in row parts shared between the
plans). Each system runs in a
process of its own (shape_sweep.py), so that its resident memory is its own;
the processes alternate system by system, the order rotating per
repetition. Reported per system, medians over the repetitions: the resident
growth from after the first run (of length 8) to after the last pass, in
MiB, and the warm pass (the fastest of passes 2 and 3) in seconds.

And what reading a linear's weights in the arrangement an earlier plan
converted them to costs: per length, the BERT layer's program that met
length 8 first (its plan reads the weights as length 8's primitives chose
them) against a program compiled for that length alone, interleaved in one
process, medians per length. And what a linear's rows in two parts cost
(the plans past a program's exact ones): per length, the layer's plan with
its linears in row parts against the exact one, interleaved, medians.

    python -m pytest tests/bench/test_bench_shapes.py --benchmark-enable --benchmark-only

With the benchmarks disabled (the regular test run), a short sweep checks
that every column works.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mkcache

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from optional import WHY_NOT, installed  # noqa: E402
from report import machine_isa, register  # noqa: E402
from mkcache.models import BertLayer, interleaved, max_relative_error  # noqa: E402

ISA = machine_isa()
THREADS = mkcache.build_info()["max_threads"]
SYSTEMS = ["mkcache", "imported", "exact", "onnxruntime"]
TITLES = {"mkcache": "mkcache, the graph", "imported": "mkcache, the ONNX model imported",
          "exact": "mkcache, the graph, every plan exact", "onnxruntime": "onnxruntime"}
# shape_sweep.py's arguments per system.
SWEEP_ARGS = {"exact": ["mkcache", "--exact-plans", "-1"]}
REPEATS = 3
SWEEP: dict = {}  # system -> {"growth": MiB, "warm": s, "first": MiB, "runs": [...]}
HELD: dict = defaultdict(dict)  # seq -> {"held": s, "alone": s}
PARTS: dict = defaultdict(dict)  # seq -> {"parts": s, "exact": s, "impl": str}
NOTES: list = []


def _sweep_child(system: str, lengths: str, passes: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(mkcache.__file__).parent.parent),
                                                    env.get("PYTHONPATH", "")] if p)
    out = subprocess.run([sys.executable, str(HERE / "shape_sweep.py"),
                          *SWEEP_ARGS.get(system, [system]), "--lengths", lengths, "--passes", str(passes),
                          "--threads", str(THREADS)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_sweep_of_64_lengths_memory_and_warm_pass(benchmark):
    benchmark.group = "BERT layer over 64 sequence lengths"
    systems = [s for s in SYSTEMS if s != "onnxruntime" or installed("onnxruntime")]
    if "onnxruntime" not in systems:
        NOTES.append(WHY_NOT["onnxruntime"])
    if installed("onnx") is None:
        pytest.skip(WHY_NOT["onnx"])
    lengths, passes, repeats = ("8:512:8", 3, REPEATS) if not benchmark.disabled else \
        ("8:32:8", 2, 1)
    runs = {s: [] for s in systems}

    def measure():
        for r in range(repeats):
            for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                runs[system].append(_sweep_child(system, lengths, passes))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    for system, results in runs.items():
        assert all(len(r["seconds"]) == passes for r in results)
        SWEEP[system] = {"growth": statistics.median(r["growth_mib"] for r in results),
                         "heap": statistics.median(r["growth_heap_mib"] for r in results),
                         "code": statistics.median(r["growth_code_mib"] for r in results),
                         "first_pass": statistics.median(r["seconds"][0] for r in results),
                         "warm": statistics.median(r["warm_seconds"] for r in results),
                         "first": statistics.median(r["first_mib"] for r in results),
                         "extras": {k: results[-1][k] for k in ("entries", "plans", "arena_mib",
                                                                "constant_mib")
                                    if k in results[-1]}}
        benchmark.extra_info[f"{system}_growth_mib"] = SWEEP[system]["growth"]
        benchmark.extra_info[f"{system}_warm_seconds"] = SWEEP[system]["warm"]
    if benchmark.disabled:
        SWEEP.clear()


def _per_length_pairs(benchmark, lengths, seed, compile_two, runs, after=None) -> dict:
    """Per length, two programs of the BERT layer (`compile_two(g, rng)` ->
    {name: program}, each having run what it needs to first), each then
    running that one length only (so neither rebinds its arena to another
    plan between runs): both checked against the float64 reference, then
    timed interleaved. -> {(seq, name): median seconds} ({} when the
    benchmarks are disabled); `after(programs by seq)` sees them before
    they close."""
    model = BertLayer(0)
    rng = np.random.default_rng(seed)
    g = model.graph(batch=1)
    progs = {}
    try:
        fns = {}
        for seq in lengths:
            x = rng.standard_normal((1, seq, 768), dtype=np.float32)
            progs[seq] = compile_two(g, rng)
            want = model.reference(x)
            for name, p in progs[seq].items():
                assert max_relative_error(p.run(x=x)["y"], want) < 1e-5
                fns[(seq, name)] = (lambda x=x, p=p: p.run(x=x))
        result = {}

        def measure():
            result.update(interleaved(fns, 3 if benchmark.disabled else runs))

        benchmark.pedantic(measure, rounds=1, iterations=1)
        if after:
            after(progs)
        return {} if benchmark.disabled else result
    finally:
        for pair in progs.values():
            for p in pair.values():
                p.close()
        g.close()


HELD_LENGTHS = [64, 128, 256, 384, 512]


def test_weights_read_as_an_earlier_plan_converted_them(benchmark):
    benchmark.group = "a linear's weights in the arrangement length 8 chose"

    # A program that ran length 8 first (its plan for the length reads the
    # weights as length 8's primitives chose them) and one that only ever
    # runs the length.
    def compile_two(g, rng):
        held = g.compile()
        held.run(x=rng.standard_normal((1, 8, 768), dtype=np.float32))
        return {"held": held, "alone": g.compile()}

    def formats(progs):
        if not benchmark.disabled:
            HELD["formats"] = {seq: (_query_format(p["held"], seq),
                                     _query_format(p["alone"], seq))
                               for seq, p in progs.items()}

    result = _per_length_pairs(benchmark, HELD_LENGTHS if not benchmark.disabled else [64], 1,
                               compile_two, 41, formats)
    for (seq, mode), seconds in result.items():
        HELD[seq][mode] = seconds


PARTS_LENGTHS = [136, 200, 264, 328, 392, 456, 504]


def test_linears_in_row_parts(benchmark):
    benchmark.group = "a linear's rows in two parts shared between plans"

    # A program whose plans run the linears in row parts, one whose plans
    # are exact.
    def compile_two(g, rng):
        return {"parts": g.compile(exact_plans=0), "exact": g.compile(exact_plans=-1)}

    def impls(progs):
        if not benchmark.disabled:
            for seq, p in progs.items():
                PARTS[seq]["impl"] = next(s["impl"] for s in p["parts"].steps()
                                          if "onednn_matmul_shared" in s["impl"])

    result = _per_length_pairs(benchmark, PARTS_LENGTHS if not benchmark.disabled else [136], 2,
                               compile_two, 21, impls)
    for (seq, mode), seconds in result.items():
        PARTS[seq][mode] = seconds


def _query_format(prog, seq):
    """The arrangement of the query linear's weights in the plan of `seq`."""
    prog.run(x=np.zeros((1, seq, 768), np.float32))
    line = next(line for line in prog.plan().splitlines() if "'attention.self.query'" in line)
    return line.split("const#0 ")[1].split(",")[0]


def render() -> list:
    parts = []
    if SWEEP:
        lines = ["| system | resident growth (MiB) | of it heap / generated code | first pass "
                 "(s) | warm pass (s) | resident after the first run (MiB) | figures |",
                 "|---|---|---|---|---|---|---|"]
        for system, r in SWEEP.items():
            extras = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in r["extras"].items())
            lines.append(f"| {TITLES[system]} | {r['growth']:+.1f} | {r['heap']:+.1f} / "
                         f"{r['code']:+.1f} | {r['first_pass']:.2f} | {r['warm']:.2f} | "
                         f"{r['first']:.0f} | {extras} |")
        parts.append((f"BERT-base layer over 64 sequence lengths (8..512), 3 passes, each "
                      f"system in its own process, medians of {REPEATS} alternated; {ISA}, "
                      f"{THREADS} threads", "\n".join(lines)))
    if any(isinstance(k, int) for k in HELD):
        formats = HELD.get("formats", {})
        lines = ["| seq | weights as length 8 chose (ms) | compiled alone (ms) | ratio | "
                 "arrangements |", "|---|---|---|---|---|"]
        for seq, r in HELD.items():
            if not isinstance(seq, int):
                continue
            f = formats.get(seq, ("?", "?"))
            lines.append(f"| {seq} | {r['held'] * 1e3:.3f} | {r['alone'] * 1e3:.3f} | "
                         f"{r['held'] / r['alone']:.3f} | {f[0]} / {f[1]} |")
        parts.append((f"BERT layer, a plan reading the weights as length 8's plan converted "
                      f"them, against a program of that length alone (interleaved, medians "
                      f"of 41); {ISA}, {THREADS} threads", "\n".join(lines)))
    if PARTS:
        lines = ["| seq | linears in row parts (ms) | every plan exact (ms) | ratio | parts |",
                 "|---|---|---|---|---|"]
        for seq, r in PARTS.items():
            lines.append(f"| {seq} | {r['parts'] * 1e3:.3f} | {r['exact'] * 1e3:.3f} | "
                         f"{r['parts'] / r['exact']:.3f} | {r['impl'].split(' rows ')[-1]} |")
        parts.append((f"BERT layer, its linears in two row parts (a plan past the program's "
                      f"exact ones) against the exact plan (interleaved, medians of 21); {ISA}, "
                      f"{THREADS} threads", "\n".join(lines)))
    return parts


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    register(request, "mkcache-shapes-report", render, notes=lambda: NOTES)
    yield
