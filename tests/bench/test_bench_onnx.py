"""ONNX models through mkcache.onnx.load against the other runtimes that take
the same ONNX file: ResNet-18, ResNet-50 and MobileNetV2 (batch 1 and 8,
NCHW 224x224) and a BERT-base encoder layer (batch 1, seq 32, 128 and 512),
each built with
onnx.helper by mkcache.models (onnx_model(), random weights from a
seed), at 1 and at 2 threads. Columns: the imported program, onnxruntime
(intra-op threads, one inter-op thread), OpenVINO (CPU, latency hint, f32)
and torch (torchvision's resnet50 / mobilenet_v2, torch's encoder layer,
with the same weights), each skipped with its reason where it is not
installed. Every column of a row runs on the row's thread count; the
columns are interleaved round-robin per repetition (one run of each in
turn, the order rotating, the threads of one runtime left to settle before
the next one's turn) and reported as medians, with the ratio imported /
other (below 1: mkcache is faster).

And the time to load a model: mkcache.onnx.load of the bytes against
onnxruntime's InferenceSession and OpenVINO's read_model + compile_model
(static shapes, so that each can prepare everything at load), interleaved,
medians; and the first run after the load.

    python -m pytest tests/bench/test_bench_onnx.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mkcache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optional import WHY_NOT, installed  # noqa: E402
from report import machine_isa, register  # noqa: E402
from mkcache.models import (BertLayer, MobileNetV2, ResNet18, ResNet50,  # noqa: E402
                            max_relative_error)

pytest.importorskip("onnx")
import mkcache.onnx  # noqa: E402

ISA = machine_isa()
THREAD_COUNTS = (1, 2)
MODELS = {"resnet18": ResNet18, "resnet50": ResNet50, "mobilenetv2": MobileNetV2,
          "bert": BertLayer}
# case -> (model, batch (CNNs) or seq (BERT), timed repetitions): fewer
# where a run is long, more where it is short and a median needs them, so
# that the module with its settle pauses stays a sitting on 2 shared cores
CASES = {
    "ResNet-18 b1 224x224": ("resnet18", 1, 40),
    "ResNet-18 b8 224x224": ("resnet18", 8, 15),
    "ResNet-50 b1 224x224": ("resnet50", 1, 25),
    "ResNet-50 b8 224x224": ("resnet50", 8, 10),
    "MobileNetV2 b1 224x224": ("mobilenetv2", 1, 40),
    "MobileNetV2 b8 224x224": ("mobilenetv2", 8, 15),
    "BERT layer seq 32": ("bert", 32, 40),
    "BERT layer seq 128": ("bert", 128, 25),
    "BERT layer seq 512": ("bert", 512, 15),
}
MODES = ["imported", "onnxruntime", "openvino", "torch"]
MODE_TITLES = {"imported": "mkcache, the model imported (ms)", "onnxruntime": "onnxruntime",
               "openvino": "OpenVINO", "torch": "torch"}
# "imported": mkcache's blob cache (and oneDNN's primitive cache) emptied
# before each load, as in a fresh process; "imported_cached": loaded again
# with the entries of the previous load still there, mkcache's own case of a
# model reloaded in a process that ran it before.
LOAD_MODES = ["imported", "imported_cached", "onnxruntime", "openvino"]
FRAMEWORK_LOADS = LOAD_MODES[2:]
LOAD_REPS = 7
# Load-time models: static shapes (batch 1; BERT seq 128).
LOAD_CASES = {"ResNet-50 b1 224x224": ("resnet50", 1), "MobileNetV2 b1 224x224": ("mobilenetv2", 1),
              "BERT layer seq 128": ("bert", 128)}
# Idle threads of a runtime keep spinning a while after a run (mkcache's
# OpenMP workers for KMP_BLOCKTIME, onnxruntime's for a shorter spell); on 2
# cores that slows the next runtime's run, so each turn waits for them (as
# test_bench_programs does).
SETTLE = 0.25  # seconds
# (case, threads) -> mode -> seconds per run (median)
RESULTS: dict = defaultdict(dict)
# case -> mode -> {"load": seconds, "first": seconds of the first run}
LOAD_RESULTS: dict = defaultdict(dict)
NOTES: dict = defaultdict(list)


_MODELS: dict = {}


def _model(kind):
    if kind not in _MODELS:
        _MODELS[kind] = MODELS[kind](0)
    return _MODELS[kind]


def _image(benchmark):
    """The CNNs' image side: 224, or 64 when the benchmarks are disabled
    (the regular test run only checks that every column works and agrees;
    the nodes are the same at 64)."""
    return 64 if benchmark.disabled else 224


def _onnx_bytes(kind, size=None, image=224):
    """The ONNX model's bytes: batch (CNNs) or seq (BERT) symbolic, or static
    at size (BERT then at batch 1)."""
    model = _model(kind)
    if kind == "bert":
        m = model.onnx_model(batch=1 if size else None, seq=size)
    else:
        m = model.onnx_model(batch=size, image=image)
    return m.SerializeToString()


def _input(kind, size, image=224):
    rng = np.random.default_rng(1)
    shape = (1, size, 768) if kind == "bert" else (size, 3, image, image)
    return rng.standard_normal(shape, dtype=np.float32)


@contextlib.contextmanager
def _openmp_threads(threads):
    """mkcache's thread count for the calling thread (mkcache.set_num_threads)
    within the block."""
    previous = mkcache.get_num_threads()
    mkcache.set_num_threads(threads)
    try:
        yield
    finally:
        mkcache.set_num_threads(previous)


# -------------------------------------------------------------- the columns

def _runner(mode, kind, threads, image):
    """-> (make, close, skip reason): make(x) is a zero-argument callable
    running the runtime's model on x and returning the output array, built
    for `threads` threads; close() lets the model go."""
    data = _onnx_bytes(kind, image=image)
    if mode == "imported":
        # Loaded under the row's thread count: oneDNN picks its kernels'
        # blocking for the threads it sees when they are created.
        with _openmp_threads(threads):
            prog = mkcache.onnx.load(data)
        out = "y" if kind == "bert" else "logits"
        return (lambda x: lambda: prog.run(x=x)[out]), prog.close, None
    if mode == "onnxruntime":
        ort = installed("onnxruntime")
        if ort is None:
            return None, None, WHY_NOT["onnxruntime"]
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return (lambda x: lambda: sess.run(None, {"x": x})[0]), lambda: None, None
    if mode == "openvino":
        ov = installed("openvino")
        if ov is None:
            return None, None, WHY_NOT["openvino"]
        core = ov.Core()
        compiled = core.compile_model(core.read_model(data), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"})  # not bf16 where the CPU has it
        request = compiled.create_infer_request()
        out = compiled.output(0)
        return (lambda x: lambda: request.infer({"x": x})[out]), lambda: None, None
    torch = installed("torch")
    if torch is None:
        return None, None, WHY_NOT["torch"]
    if kind != "bert" and installed("torchvision") is None:
        return None, None, WHY_NOT["torchvision"]
    module = _model(kind).torch_module()

    def make(x):
        tx = torch.from_numpy(x)

        def run():
            with torch.inference_mode():
                return module(tx).numpy()
        return run
    return make, lambda: None, None


class _Columns:
    """The columns of one (model, threads): the runtimes' models built once
    for the rows that share them (batch and seq are bound at run time), let
    go when the next (model, threads) comes."""

    def __init__(self):
        self.key, self.runners, self.skipped = None, {}, {}

    def get(self, kind, threads, image):
        if self.key != (kind, threads, image):
            self.close()
            self.key = (kind, threads, image)
            for mode in MODES:
                make, close, reason = _runner(mode, kind, threads, image)
                if make is None:
                    self.skipped[mode] = reason
                else:
                    self.runners[mode] = (make, close)
        return self.runners, self.skipped

    def close(self):
        for _, close in self.runners.values():
            close()
        self.key, self.runners, self.skipped = None, {}, {}


_COLUMNS = _Columns()


@contextlib.contextmanager
def _threads_everywhere(threads):
    """The row's thread count for the runtimes whose count is process-wide
    or per calling thread: mkcache's OpenMP and torch's intra-op pool
    (onnxruntime and OpenVINO got theirs when their models were made)."""
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        with _openmp_threads(threads):
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(previous)


def _interleaved(fns: dict, reps: int) -> dict:
    """{mode: median seconds per run}: each repetition runs every column
    once, SETTLE seconds before each, the order rotating from repetition to
    repetition (every column is a runtime of its own here)."""
    modes = list(fns)
    times = {mode: [] for mode in modes}
    for r in range(reps):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            time.sleep(SETTLE)
            t0 = time.perf_counter()
            fns[mode]()
            times[mode].append(time.perf_counter() - t0)
    return {mode: statistics.median(t) for mode, t in times.items()}


# Rows grouped by model and thread count, so each runtime's model is made
# once for the rows that share it.
ROWS = [(case, threads) for kind in MODELS for threads in THREAD_COUNTS
        for case in CASES if CASES[case][0] == kind]


@pytest.mark.parametrize("case,threads", ROWS,
                         ids=[f"{c} {t}t".replace(" ", "-") for c, t in ROWS])
def test_onnx_runtimes(benchmark, case, threads):
    """One run of every column per repetition (_interleaved), medians;
    every column's output checked against the imported program's in the
    warm-up."""
    benchmark.group = f"{case}, {threads} thread(s)"
    kind, size, reps = CASES[case]
    image = _image(benchmark)
    runners, skipped = _COLUMNS.get(kind, threads, image)
    x = _input(kind, size, image)
    fns = {mode: make(x) for mode, (make, _) in runners.items()}
    result = {}
    with _threads_everywhere(threads):
        want = fns["imported"]()
        for mode, fn in fns.items():  # warm-up (plans, sessions) and agreement
            for _ in range(1 if benchmark.disabled else 2):
                got = fn()
            err = max_relative_error(got, want)
            assert err < 1e-4, f"{mode}: max |diff| / max |imported| = {err:.2e}"

        def measure():
            result.update(_interleaved(fns, 1 if benchmark.disabled else reps))

        benchmark.pedantic(measure, rounds=1, iterations=1)
    if getattr(benchmark, "stats", None) is not None:
        RESULTS[(case, threads)].update(result)
        NOTES[case] = [f"{mode}: {reason}" for mode, reason in skipped.items()]
        benchmark.extra_info.update({f"{m}_seconds": v for m, v in result.items()})


# ---------------------------------------------------------------- load time

def _loader(mode, data):
    """-> (load, skip reason): load() makes the runtime's model from the
    bytes and returns (a zero-argument run on the model's input, close)."""
    if mode in ("imported", "imported_cached"):
        def load():
            prog = mkcache.onnx.load(data)
            return (lambda x: prog.run(x=x)), prog.close
        return load, None
    if mode == "onnxruntime":
        ort = installed("onnxruntime")
        if ort is None:
            return None, WHY_NOT["onnxruntime"]

        def load():
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = max(THREAD_COUNTS), 1
            sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            return (lambda x: sess.run(None, {"x": x})), lambda: None
        return load, None
    ov = installed("openvino")
    if ov is None:
        return None, WHY_NOT["openvino"]
    core = ov.Core()

    def load():
        compiled = core.compile_model(core.read_model(data), "CPU", {
            "INFERENCE_NUM_THREADS": max(THREAD_COUNTS), "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        return (lambda x: request.infer({"x": x})), lambda: None
    return load, None


@pytest.mark.parametrize("case", list(LOAD_CASES))
def test_onnx_load_time(benchmark, case):
    """Each runtime makes its model from the same bytes LOAD_REPS times,
    interleaved round-robin (a settle pause before each), then runs it once;
    medians of the load and of that first run."""
    benchmark.group = f"load {case}"
    kind, size = LOAD_CASES[case]
    _COLUMNS.close()  # nothing of the timed rows left holding cache entries
    image = _image(benchmark)
    data, x = _onnx_bytes(kind, size, image), _input(kind, size, image)
    loaders, skipped = {}, {}
    for mode in LOAD_MODES:
        load, reason = _loader(mode, data)
        if load is None:
            skipped[mode] = reason
        else:
            loaders[mode] = load
    reps = 1 if benchmark.disabled else LOAD_REPS
    times = {mode: {"load": [], "first": []} for mode in loaders}

    def measure():
        modes = list(loaders)
        for r in range(reps):
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                if mode == "imported":
                    mkcache.cache.clear()
                time.sleep(SETTLE)
                t0 = time.perf_counter()
                run, close = loaders[mode]()
                t1 = time.perf_counter()
                run(x)
                t2 = time.perf_counter()
                close()
                times[mode]["load"].append(t1 - t0)
                times[mode]["first"].append(t2 - t1)

    with _openmp_threads(max(THREAD_COUNTS)):
        benchmark.pedantic(measure, rounds=1, iterations=1)
    if getattr(benchmark, "stats", None) is not None:
        for mode, t in times.items():
            LOAD_RESULTS[case][mode] = {k: statistics.median(v) for k, v in t.items()}
        NOTES["load " + case] = [f"{mode}: {reason}" for mode, reason in skipped.items()]


# ------------------------------------------------------------------- report

def _ms(v):
    return f"{v * 1e3:.2f}"


def render_table() -> str:
    lines = ["| case | threads | " + " | ".join(MODE_TITLES[m] for m in MODES) + " |",
             "|---|---" + "|---" * len(MODES) + "|"]
    for (case, threads), res in RESULTS.items():
        imported = res.get("imported")
        row = []
        for m in MODES:
            v = res.get(m)
            if v is None:
                row.append("-")
            elif m == "imported":
                row.append(_ms(v))
            else:
                row.append(f"{_ms(v)} ({imported / v:.2f})")
        lines.append(f"| {case} | {threads} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def render_load_table() -> str:
    titles = {"imported": "mkcache.onnx.load, empty cache",
              "imported_cached": "mkcache.onnx.load again, cache kept",
              "onnxruntime": "ort.InferenceSession",
              "openvino": "OpenVINO read_model + compile_model"}
    lines = ["| model | " + " | ".join(f"{titles[m]}: load (ms) | first run" for m in LOAD_MODES)
             + " |", "|---" + "|---|---" * len(LOAD_MODES) + "|"]
    for case, res in LOAD_RESULTS.items():
        imported = res.get("imported", {}).get("load")
        row = []
        for m in LOAD_MODES:
            r = res.get(m)
            if r is None:
                row += ["-", "-"]
                continue
            ratio = f" ({imported / r['load']:.2f})" if imported and m in FRAMEWORK_LOADS else ""
            row += [_ms(r["load"]) + ratio, _ms(r["first"])]
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _versions() -> str:
    found = [f"mkcache {mkcache.__version__} (oneDNN {mkcache.build_info()['onednn_version']})"]
    for name in ("onnxruntime", "openvino", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            version = getattr(module, "__version__", "?")
            found.append(f"{name} {version.split('-')[0]}")  # OpenVINO's carries its build
    return ", ".join(found)


def _sections():
    parts = []
    if RESULTS:
        counts = " and ".join(str(t) for t in THREAD_COUNTS)
        parts.append((f"ONNX models, medians per run on {ISA} at {counts} threads (interleaved "
                      "round-robin, every column of a row on the row's thread count); (ratio) "
                      "= imported / other, below 1: mkcache faster", render_table()))
    if LOAD_RESULTS:
        parts.append((f"loading an ONNX model from its bytes, medians of {LOAD_REPS} on {ISA} "
                      f"({max(THREAD_COUNTS)} threads, static shapes); (ratio) = mkcache / other",
                      render_load_table()))
    return parts


@pytest.fixture(scope="module", autouse=True)
def _report_and_close(request):
    register(request, "mkcache-onnx-report", _sections, footer=_versions,
             notes=lambda: [f"[{case}] {n}" for case, notes in NOTES.items() for n in notes])
    yield
    _COLUMNS.close()
    _MODELS.clear()
