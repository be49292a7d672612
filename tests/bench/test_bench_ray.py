"""Batch inference on one machine, scaled three ways: ResNet-50 imported from
ONNX (mkcache.models, batch symbolic) through a Ray Data pipeline of 1 and of
2 workers x 1 OpenMP thread (mkcache.ray.Predictor), against one process
running the same batches at 2 threads without Ray, and against the same
three with onnxruntime in their place (intra-op threads as the column's,
one inter-op thread). The configurations run in turn, the order rotating
per repetition, medians; a local Ray of 2 CPUs is shared by them.

Throughput is counted two ways: "steady", rows over the span from the
first batch's start to the last one's end as the workers timed them (the
workers' start and the model's load left out), and "end to end", rows over
the whole pipeline's wall time, start and load included.

    python -m pytest tests/bench/test_bench_ray.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import os
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

pytest.importorskip("onnx")
from mkcache.models import ResNet50, max_relative_error  # noqa: E402
from mkcache.ray import Predictor  # noqa: E402

ISA = machine_isa()
# (rows, image, batch) timed, and when the benchmarks are disabled (the
# regular test run only checks that every configuration runs and agrees)
SIZES = {"timed": (128, 224, 16), "check": (8, 32, 4)}
REPS = 3
SETTLE = 1.0  # seconds between configurations: the last one's threads and actors wind down
# (label, workers (None: this process, no Ray), threads)
CONFIGS = [("1 process x 2 threads", None, 2), ("Ray, 1 worker x 1 thread", 1, 1),
           ("Ray, 2 workers x 1 thread", 2, 1)]
# The regular test run checks one Ray configuration and the process.
CHECKED = ("1 process x 2 threads", "Ray, 2 workers x 1 thread")
RUNTIMES = ["mkcache", "onnxruntime"]
# (runtime, config label) -> {"steady": rows/s, "end_to_end": rows/s}
RESULTS: dict = defaultdict(dict)
NOTES: list = []


class Timed:
    """A runtime's predictor that adds each batch's start and end time
    (time.time(), comparable across the machine's processes) as columns."""

    def __init__(self, runtime, model, threads):
        if runtime == "mkcache":
            self.predict = Predictor(model, threads=threads)
        else:
            import onnxruntime as ort  # noqa: PLC0415
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            self.predict = lambda b: {"id": b["id"], "logits": sess.run(None, {"x": b["x"]})[0]}

    def __call__(self, batch):
        t0 = time.time()
        out = self.predict(batch)
        n = len(out["id"])
        out["start"], out["end"] = np.full(n, t0), np.full(n, time.time())
        return out


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray of 2 CPUs for the module (see tests/python/test_ray.py:
    skipped under a preloaded sanitizer runtime; workers get the package,
    the library and this directory by absolute paths)."""
    preload = os.environ.get("LD_PRELOAD", "")
    if any(r in preload for r in ("libasan", "libtsan", "libubsan", "libmsan")):
        pytest.skip("LD_PRELOAD holds a sanitizer runtime: no timings from an instrumented run")
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'mkcache[ray]')")
    pytest.importorskip("ray.data", reason="ray[data] is not installed")
    paths = [str(Path(mkcache.__file__).resolve().parents[1]), str(Path(__file__).parent)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    if os.environ.get("MKCACHE_LIBRARY"):
        env["MKCACHE_LIBRARY"] = str(Path(os.environ["MKCACHE_LIBRARY"]).resolve())
    # A test run reports no usage statistics to Ray's servers (on by default).
    quiet = "RAY_USAGE_STATS_ENABLED" not in os.environ
    if quiet:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()
        if quiet:
            del os.environ["RAY_USAGE_STATS_ENABLED"]


def _run(ray, ds, data, runtime, model, workers, threads, batch):
    """-> ({"id", "logits"} in id order, steady rows/s, end-to-end rows/s)."""
    t0 = time.time()
    if workers is None:
        timed = Timed(runtime, model, threads)
        parts = [timed({k: v[lo:lo + batch] for k, v in data.items()})
                 for lo in range(0, len(data["id"]), batch)]
    else:
        out = ds.map_batches(Timed, fn_constructor_args=(runtime, model, threads),
                             compute=ray.data.ActorPoolStrategy(size=workers),
                             num_cpus=threads, batch_size=batch, batch_format="numpy")
        parts = list(out.iter_batches(batch_format="numpy", batch_size=None))
    wall = time.time() - t0
    got = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(got["id"])
    rows = len(order)
    steady = rows / (got["end"].max() - got["start"].min())
    return {k: got[k][order] for k in ("id", "logits")}, steady, rows / wall


def test_ray_throughput(benchmark, ray_session):
    ray = ray_session
    benchmark.group = "ResNet-50 batch inference on Ray"
    rows, image, batch = SIZES["check" if benchmark.disabled else "timed"]
    model = ResNet50(0).onnx_model(image=image).SerializeToString()
    rng = np.random.default_rng(0)
    data = {"id": np.arange(rows, dtype=np.int64),
            "x": rng.standard_normal((rows, 3, image, image), dtype=np.float32)}
    ds = ray.data.from_items([{"id": i, "x": x} for i, x in zip(data["id"], data["x"])],
                             override_num_blocks=rows // batch)
    runtimes = [r for r in RUNTIMES if r == "mkcache" or installed(r) is not None]
    skipped = [f"{r}: {WHY_NOT[r]}" for r in RUNTIMES if r not in runtimes]
    cases = [(r, c) for r in runtimes for c in CONFIGS
             if not benchmark.disabled or c[0] in CHECKED]
    times = {(r, c[0]): {"steady": [], "end_to_end": []} for r, c in cases}
    want = Predictor(model)(data)["logits"]

    def measure():
        reps = 1 if benchmark.disabled else REPS
        for rep in range(reps):
            for runtime, (label, workers, threads) in cases[rep % len(cases):] + \
                    cases[:rep % len(cases)]:
                time.sleep(0 if benchmark.disabled else SETTLE)
                got, steady, end_to_end = _run(ray, ds, data, runtime, model, workers, threads,
                                               batch)
                assert np.array_equal(got["id"], data["id"]), (runtime, label)
                err = max_relative_error(got["logits"], want)
                assert err < 1e-4, f"{runtime}, {label}: {err:.1e}"
                times[(runtime, label)]["steady"].append(steady)
                times[(runtime, label)]["end_to_end"].append(end_to_end)

    load_before = os.getloadavg()[0]
    benchmark.pedantic(measure, rounds=1, iterations=1)
    if getattr(benchmark, "stats", None) is not None:
        for key, t in times.items():
            RESULTS[key] = {k: statistics.median(v) for k, v in t.items()}
        # The machine's load from others shows in the 2-thread columns
        # first: an OpenMP run waits for its slowest thread at every step.
        NOTES[:] = skipped + [f"{rows} rows of 3x{image}x{image}, batches of {batch}, "
                              f"{REPS} repetitions; {os.cpu_count()} CPUs, load average "
                              f"{load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after"]


def render_table() -> str:
    base = RESULTS.get(("mkcache", CONFIGS[0][0]))
    lines = ["| configuration | " + " | ".join(
        f"{r}: steady (rows/s) | end to end" for r in RUNTIMES)
        + " | mkcache / onnxruntime, steady |", "|---" * (2 * len(RUNTIMES) + 2) + "|"]
    for label, _, _ in CONFIGS:
        cells = []
        for r in RUNTIMES:
            res = RESULTS.get((r, label))
            if res is None:
                cells += ["-", "-"]
                continue
            for k in ("steady", "end_to_end"):
                ratio = f" ({res[k] / base[k]:.2f})" if base else ""
                cells.append(f"{res[k]:.1f}{ratio}")
        m, o = RESULTS.get(("mkcache", label)), RESULTS.get(("onnxruntime", label))
        cells.append(f"{m['steady'] / o['steady']:.2f}" if m and o else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    register(request, "mkcache-ray-report", lambda: [
        (f"ResNet-50 batch inference on a local Ray (2 CPUs), rows per second on {ISA}, "
         "medians of configurations run in turn; (ratio) = to mkcache in 1 process x 2 "
         "threads, above 1: more rows/s", render_table())] if RESULTS else [],
        notes=lambda: NOTES)
    yield
