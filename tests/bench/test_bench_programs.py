"""Whole models: ResNet-18 (batch 1 and 8, NCHW 224x224) and a BERT-base
encoder layer (seq 32 and 128) as an mkcache program (fused, and compiled
with fuse=False), against the same model run op by op through the eager
mkcache calls, and onnxruntime, torch and OpenVINO when installed (each
skipped otherwise; the ONNX model that onnxruntime and OpenVINO run is built
with onnx.helper, so they need onnx too). Every column runs on the
library's OpenMP thread count; the columns are interleaved round-robin per
repetition (one call of each in turn, the order rotating; the threads of
one runtime left to settle before another's turn) and reported as medians
and ratios to the program.

And the per-node cost of a program: 200 relu nodes on 1x16 against 200
executions of the bare oneDNN primitive (libmkcache_bench), mkcache's C call
on a cache hit and the eager Python call, in microseconds per node; and a
1-node program's run from Python (prog.run) against the same run from a C
loop (mkc_program_run_plain, the entry prog.run calls).

    python -m pytest tests/bench/test_bench_programs.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mkcache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optional import WHY_NOT, installed  # noqa: E402
from report import register  # noqa: E402
from mkcache.models import BertLayer, ResNet18, interleaved, max_relative_error  # noqa: E402

THREADS = mkcache.build_info()["max_threads"]
# case -> (model, batch or seq, timed repetitions)
CASES = {
    "ResNet-18 b1 224x224": ("resnet", 1, 15),
    "ResNet-18 b8 224x224": ("resnet", 8, 5),
    "BERT layer seq 32": ("bert", 32, 25),
    "BERT layer seq 128": ("bert", 128, 15),
}
MODES = ["program", "unfused", "eager", "imported", "onnxruntime", "torch", "openvino"]
FRAMEWORKS = MODES[4:]
MODE_TITLES = {"program": "mkcache program (ms)", "unfused": "program, fuse=False",
               "imported": "the ONNX model imported (mkcache.onnx)",
               "eager": "eager op by op", "onnxruntime": "onnxruntime", "torch": "torch",
               "openvino": "OpenVINO"}
# case -> mode -> seconds per run (median); case -> notes
RESULTS: dict = defaultdict(dict)
NOTES: dict = defaultdict(list)
# threads label -> {"program": seconds per node, "marginal": (200-node run -
# 1-node run) / 199, ...}
NODE_RESULTS: dict = {}
NODES = 200
# After a run, a runtime's idle threads keep spinning a while: the OpenMP
# workers of mkcache's columns for KMP_BLOCKTIME (200 ms by default; a run
# was followed by 180 ms of CPU time in the next 300 ms), onnxruntime's for
# about 40 ms (OpenVINO's not). On 2 cores that slows the next column if it
# belongs to another runtime (a BERT layer program run after onnxruntime's
# took twice as long), so a repetition lets them settle between runtimes.
SETTLE = 0.25  # seconds
RUNTIME = {"program": "mkcache", "unfused": "mkcache", "eager": "mkcache",
           "imported": "mkcache"}  # others: their own


def _rand(*shape):
    return np.random.default_rng(1).standard_normal(shape, dtype=np.float32)


def _onnx_bytes(model):
    """The ONNX model (onnx.helper) as bytes; None when onnx is not installed."""
    if installed("onnx") is None:
        return None
    return model.onnx_model().SerializeToString()


@functools.lru_cache(maxsize=None)
def _framework(name, kind):
    """-> (factory, skip reason): factory(x) is a zero-argument callable
    running the framework's model on x and returning the output array."""
    model = _model(kind)
    if name == "onnxruntime":
        ort = installed("onnxruntime")
        if ort is None:
            return None, "onnxruntime is not installed"
        data = _onnx_bytes(model)
        if data is None:
            return None, "onnx is not installed (the ONNX model is built with onnx.helper)"
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return (lambda x: lambda: sess.run(None, {"x": x})[0]), None
    if name == "openvino":
        ov = installed("openvino")
        if ov is None:
            return None, "openvino is not installed"
        data = _onnx_bytes(model)
        if data is None:
            return None, "onnx is not installed (the ONNX model is built with onnx.helper)"
        core = ov.Core()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.onnx")
            Path(path).write_bytes(data)
            compiled = core.compile_model(core.read_model(path), "CPU", {
                "INFERENCE_NUM_THREADS": THREADS, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "f32"})  # not bf16 where the CPU has it
        request = compiled.create_infer_request()
        out = compiled.output(0)
        return (lambda x: lambda: request.infer({"x": x})[out]), None
    torch = installed("torch")
    if torch is None:
        return None, WHY_NOT["torch"]
    if kind == "resnet" and installed("torchvision") is None:
        return None, WHY_NOT["torchvision"]
    torch.set_num_threads(THREADS)
    module = model.torch_module()

    def make(x):
        tx = torch.from_numpy(x)

        def run():
            with torch.inference_mode():
                return module(tx).numpy()
        return run
    return make, None


@functools.lru_cache(maxsize=None)
def _model(kind):
    return ResNet18(0) if kind == "resnet" else BertLayer(0)


_PROGRAMS: dict = {}  # closed when the module's tests are done


def _program(kind, size, fuse=True):
    key = (kind, size, fuse)
    if key not in _PROGRAMS:
        model = _model(kind)
        # ResNet: static shapes (compiled at once); BERT: seq bound at run time.
        graph = model.graph(size) if kind == "resnet" else model.graph(1)
        _PROGRAMS[key] = graph.compile(fuse=fuse)
        graph.close()
    return _PROGRAMS[key]


def _imported(kind):
    """The model's ONNX export loaded back through mkcache.onnx (its batch
    or sequence bound at run time)."""
    key = (kind, "imported")
    if key not in _PROGRAMS:
        import mkcache.onnx  # noqa: PLC0415 (needs the onnx extra)
        model = _model(kind)
        _PROGRAMS[key] = mkcache.onnx.load(model.onnx_model())
    return _PROGRAMS[key]


def _input(kind, size):
    return _rand(size, 3, 224, 224) if kind == "resnet" else _rand(1, size, 768)


def _columns(case):
    """-> ({mode: zero-argument callable returning the output}, {mode: skip reason})."""
    kind, size, _ = CASES[case]
    model, x = _model(kind), _input(kind, size)
    prog, unfused = _program(kind, size), _program(kind, size, False)
    out = "logits" if kind == "resnet" else "y"
    fns = {"program": lambda: prog.run(x=x)[out], "unfused": lambda: unfused.run(x=x)[out],
           "eager": lambda: model.eager(x)}
    skipped = {}
    if installed("onnx") is None:
        skipped["imported"] = "onnx is not installed"
    else:
        imported = _imported(kind)
        fns["imported"] = lambda: imported.run(x=x)[out]
    for name in FRAMEWORKS:
        make, reason = _framework(name, kind)
        if make is None:
            skipped[name] = reason
        else:
            fns[name] = make(x)
    return fns, skipped


def _interleaved(fns: dict, reps: int) -> dict:
    """{mode: median seconds per run}: each repetition runs every column once,
    the columns of one runtime one after the other (SETTLE seconds before
    each runtime's turn when there are several), the order of the runtimes
    and of the columns within one rotating from repetition to repetition."""
    groups: dict = {}
    for mode in fns:
        groups.setdefault(RUNTIME.get(mode, mode), []).append(mode)
    runtimes = list(groups)
    times = {mode: [] for mode in fns}
    for r in range(reps):
        for runtime in runtimes[r % len(runtimes):] + runtimes[:r % len(runtimes)]:
            if len(runtimes) > 1:
                time.sleep(SETTLE)
            modes = groups[runtime]
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                t0 = time.perf_counter()
                fns[mode]()
                times[mode].append(time.perf_counter() - t0)
    return {mode: statistics.median(t) for mode, t in times.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_model_columns(benchmark, case):
    """One run of every column per repetition (_interleaved); medians per
    column. Outputs checked against the program's first."""
    benchmark.group = case
    fns, skipped = _columns(case)
    want = fns["program"]()
    for mode, fn in fns.items():  # warm-up (plans, cache entries, sessions) and agreement
        for _ in range(1 if benchmark.disabled else 2):
            got = fn()
        err = max_relative_error(got, want)
        assert err < 1e-4, f"{mode}: max |diff| / max |program| = {err:.2e}"
    reps = 1 if benchmark.disabled else CASES[case][2]
    result = {}

    def measure():
        result.update(_interleaved(fns, reps))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    if getattr(benchmark, "stats", None) is not None:
        RESULTS[case].update(result)
        NOTES[case] = [f"{mode}: {reason}" for mode, reason in skipped.items()]
        benchmark.extra_info.update({f"{m}_seconds": v for m, v in result.items()})


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", list(CASES))
def test_framework_column_runs(case, framework):
    """Each competitor column once, against the program; skipped (with the
    reason) where the framework is not installed."""
    kind, size, _ = CASES[case]
    make, reason = _framework(framework, kind)
    if make is None:
        pytest.skip(reason)
    x = _input(kind, size)
    want = _program(kind, size).run(x=x)["logits" if kind == "resnet" else "y"]
    assert max_relative_error(make(x)(), want) < 1e-4


@contextlib.contextmanager
def _openmp_threads(threads):
    """This thread's OpenMP thread count (omp_set_num_threads of the runtime
    libdnnl loaded, as the C helper's paired timing does) within the block;
    0: unchanged."""
    omp = None
    if threads:
        try:
            omp = ctypes.CDLL("libiomp5.so", mode=os.RTLD_NOLOAD)
        except OSError:
            pytest.skip("the OpenMP runtime (libiomp5) is not loaded")
        previous = omp.omp_get_max_threads()
        omp.omp_set_num_threads(threads)
    try:
        yield
    finally:
        if omp is not None:
            omp.omp_set_num_threads(previous)


@pytest.mark.parametrize("threads", [0, 1], ids=["default threads", "1 thread"])
def test_program_per_node_cost(benchmark, helper, threads):
    """A program of 200 relu nodes on 1x16 (chained) against 200 executions
    of the bare oneDNN primitive, 200 mkcache C calls on a cache hit and 200
    eager Python calls, interleaved; per node. The program's marginal cost
    per node subtracts a 1-node program's run (the fixed cost of a run:
    the Python wrapper, the C entry, the plan lookup). With one OpenMP
    thread the serial parts compare like for like (with the default count,
    mkcache runs activations this small on the calling thread alone, bare
    oneDNN in a parallel region)."""
    benchmark.group = "program per node"
    label = "1 OpenMP thread" if threads == 1 else f"{THREADS} OpenMP threads"
    x = _rand(1, 16)
    progs, outs = {}, {}
    for nodes in (NODES, 1):
        g = mkcache.Graph()
        v = g.input("x", (1, 16))
        for _ in range(nodes):
            v = g.relu(v)
        g.output(v, "y")
        progs[nodes] = g.compile()
        g.close()
        assert progs[nodes].memory["steps"] == nodes  # one step per node: nothing merged
        outs[nodes] = np.empty((1, 16), np.float32)
    bare = helper.create("relu", "bare", (1, 16))
    cached = helper.create("relu", "cached", (1, 16))
    try:
        for nodes, prog in progs.items():
            np.testing.assert_array_equal(prog.run(x=x, outputs={"y": outs[nodes]})["y"],
                                          np.maximum(x, 0))

        def eager():
            y = x
            for _ in range(NODES):
                y = mkcache.relu(y)
            return y

        dims = (ctypes.c_int64 * 2)(1, 16)
        x_at, y_at = x.ctypes.data, outs[1].ctypes.data

        def c_runs():  # NODES runs of the 1-node program in a C loop
            assert helper.lib.mkcb_program_run(progs[1].handle, dims, x_at, y_at, NODES) == 0

        def python_runs(run=progs[1].run, y=outs[1]):  # the same from Python
            for _ in range(NODES):
                run(x=x, outputs={"y": y})

        fns = {
            "bare": lambda: helper.lib.mkcb_run(bare, NODES),
            "cached": lambda: helper.lib.mkcb_run(cached, NODES),
            "program": lambda: progs[NODES].run(x=x, outputs={"y": outs[NODES]}),
            "program_1": python_runs,
            "c_program_1": c_runs,
            "eager": eager,
        }
        np.testing.assert_array_equal(np.asarray(eager()), np.maximum(x, 0))
        reps = 1 if benchmark.disabled else 300
        result = {}

        def measure():
            result.update(interleaved(fns, reps))

        with _openmp_threads(threads):
            benchmark.pedantic(measure, rounds=1, iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            r = NODE_RESULTS[label] = {m: v / NODES for m, v in result.items()
                                       if m not in ("program_1", "c_program_1")}
            r["marginal"] = (result["program"] - result["program_1"] / NODES) / (NODES - 1)
            r["run"] = result["program_1"] / NODES
            r["c_run"] = result["c_program_1"] / NODES
            benchmark.extra_info.update({f"{m}_seconds_per_node": v for m, v in r.items()})
    finally:
        helper.lib.mkcb_destroy(bare)
        helper.lib.mkcb_destroy(cached)
        for prog in progs.values():
            prog.close()


# ------------------------------------------------------------------- report

def render_table() -> str:
    lines = ["| case | " + " | ".join(MODE_TITLES[m] for m in MODES) + " |",
             "|---" * (len(MODES) + 1) + "|"]
    for case, res in RESULTS.items():
        program = res.get("program")
        row = []
        for m in MODES:
            v = res.get(m)
            if v is None:
                row.append("-")
            elif m == "program":
                row.append(f"{v * 1e3:.2f}")
            else:
                row.append(f"{v * 1e3:.2f} ({v / program:.2f}x)")
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def render_node_table() -> str:
    lines = [f"| {NODES} relu nodes 1x16 | bare oneDNN (us/node) | mkcache C hit | program | "
             "program, marginal (less a 1-node run) | eager Python | a 1-node program run: "
             "Python prog.run (us) | the same run from C (us) | Python - C (us) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in NODE_RESULTS.items():
        bare = r["bare"]
        cell = lambda m: f"{r[m] * 1e6:.3f} ({r[m] / bare:.2f}x)"  # noqa: E731
        lines.append(f"| {label} | {bare * 1e6:.3f} | {cell('cached')} | {cell('program')} | "
                     f"{cell('marginal')} | {cell('eager')} | {r['run'] * 1e6:.2f} | "
                     f"{r['c_run'] * 1e6:.2f} | {(r['run'] - r['c_run']) * 1e6:+.2f} |")
    return "\n".join(lines)


def _sections():
    parts = []
    if RESULTS:
        parts.append(("whole models, medians per run (interleaved round-robin, "
                      f"{THREADS} threads each), ratio to the program", render_table()))
    if NODE_RESULTS:
        parts.append(("a program's cost per node", render_node_table()))
    return parts


@pytest.fixture(scope="module", autouse=True)
def _report_and_close(request):
    register(request, "mkcache-program-report", _sections,
             notes=lambda: [f"[{case}] {n}" for case, notes in NOTES.items() for n in notes])
    yield
    for prog in _PROGRAMS.values():
        prog.close()
    _PROGRAMS.clear()
