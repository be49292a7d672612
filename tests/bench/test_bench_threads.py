"""Throughput from several Python threads against one thread using all the
cores: one imported program run from N Python threads with one OpenMP
thread each, against the same program run from one thread with N OpenMP
threads, and against N processes of one OpenMP thread each running the
same model at once (what N threads should scale like); beside onnxruntime
with N sessions of one intra-op thread each,
each session in its own Python thread, against one session with N intra-op
threads. N is the library's thread count (the machine's cores).

Each system runs in a process of its own (their thread pools never meet),
kept for the whole test and told what to measure over a pipe; the rounds
alternate the systems and modes so that machine drift hits all alike. A
measurement is the runs completed in a fixed time, all threads started
together; the table gives medians over rounds of runs per second and the
ratio of the threaded mode to the single-thread one.

    python -m pytest tests/bench/test_bench_threads.py --benchmark-enable --benchmark-only
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mkcache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from optional import WHY_NOT, installed  # noqa: E402
from report import machine_isa, register  # noqa: E402

ISA = machine_isa()
THREADS = mkcache.build_info()["max_threads"]
ROUNDS = 5
SECONDS = 1.5  # per measurement
RESULTS: dict = {}

# The child: builds its system's model once, then for each "threads" or
# "single" line on stdin runs for SECONDS and prints the runs per second.
CHILD = r"""
import sys, threading, time
import numpy as np
system, kind, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
from mkcache.models import BertLayer, ResNet18
model = BertLayer(0) if kind == "bert" else ResNet18(0)
if kind == "bert":
    data = model.onnx_model(batch=1, seq=128).SerializeToString()
    x = np.random.default_rng(1).standard_normal((1, 128, 768), dtype=np.float32)
else:
    data = model.onnx_model(batch=1).SerializeToString()
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224), dtype=np.float32)

if system == "mkcache":
    import mkcache, mkcache.onnx
    prog = mkcache.onnx.load(data)
    def runner(threads):
        def run():
            mkcache.set_num_threads(threads)  # the calling thread's OpenMP count
            prog.run(x=x)
        return run
    single = [runner(n)]
    many = [runner(1) for _ in range(n)]
else:
    import onnxruntime as ort
    def session(threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return lambda: s.run(None, {"x": x})
    single = [session(n)]
    many = [session(1) for _ in range(n)]

def measure(fns):
    # Each function in a thread of its own, started together, counting its
    # runs until the time is up.
    counts = [0] * len(fns)
    start = threading.Barrier(len(fns) + 1)
    deadline = [0.0]
    def work(i):
        fns[i]()  # warm: this thread's plan / arena / session state
        start.wait()
        while time.perf_counter() < deadline[0]:
            fns[i]()
            counts[i] += 1
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + 1e9
    start.wait()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)

print("ready", flush=True)
for line in sys.stdin:
    mode = line.strip()
    print(measure(many if mode == "threads" else single), flush=True)
"""


class Child:
    def __init__(self, system, kind, threads=THREADS):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, system, kind, str(threads), str(SECONDS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"{system} child did not start ({line!r})")

    def measure(self, mode) -> float:
        self.start(mode)
        return self.result()

    def start(self, mode):
        self.proc.stdin.write(mode + "\n")
        self.proc.stdin.flush()

    def result(self) -> float:
        return float(self.proc.stdout.readline())

    def close(self):
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def processes_measure(children) -> float:
    """Runs per second of single-thread processes running at once (each
    told to start, then each read): what N threads should scale like."""
    for c in children:
        c.start("single")
    return sum(c.result() for c in children)


@pytest.mark.parametrize("kind", ["resnet18", "bert"])
def test_threads_against_onnxruntime_sessions(benchmark, kind):
    benchmark.group = f"{kind}: {THREADS} Python threads x 1 OpenMP thread"
    if installed("onnx") is None:
        pytest.skip(WHY_NOT["onnx"])
    systems = ["mkcache"] + (["onnxruntime"] if installed("onnxruntime") else [])
    rounds = ROUNDS if not benchmark.disabled else 1
    children = {s: Child(s, kind) for s in systems}
    # THREADS processes of 1 OpenMP thread each, running the same model.
    processes = [Child("mkcache", kind, threads=1) for _ in range(THREADS)]
    got = {(s, m): [] for s in systems for m in ("single", "threads")}
    got[("mkcache", "processes")] = []
    try:
        def run():
            for r in range(rounds):
                order = [(s, m) for s in systems for m in ("single", "threads")]
                order.append(("mkcache", "processes"))
                k = r % len(order)
                for s, m in order[k:] + order[:k]:
                    got[(s, m)].append(processes_measure(processes) if m == "processes"
                                       else children[s].measure(m))
                    time.sleep(0.2)  # a runtime's idle threads spin a while
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        for c in list(children.values()) + processes:
            c.close()
    for key, values in got.items():
        assert values and all(v > 0 for v in values), key
    RESULTS[kind] = {key: statistics.median(v) for key, v in got.items()}


def render_table() -> str:
    rows = [f"Throughput, runs per second (medians of {ROUNDS} rounds of {SECONDS} s), "
            f"{THREADS} threads, ISA {ISA}: 'threads' = {THREADS} Python threads x 1 "
            "OpenMP thread (onnxruntime: that many sessions of 1 intra-op thread), 'single' "
            f"= one thread with {THREADS}.",
            "",
            "| model | mkcache single | mkcache threads | ratio | mkcache processes | "
            "threads / processes | onnxruntime single | onnxruntime threads | ratio | "
            "mkcache threads / onnxruntime threads |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, r in RESULTS.items():
        ms, mt = r[("mkcache", "single")], r[("mkcache", "threads")]
        mp = r[("mkcache", "processes")]
        os_, ot = r.get(("onnxruntime", "single")), r.get(("onnxruntime", "threads"))
        ort_cols = (f"{os_:.1f} | {ot:.1f} | {ot / os_:.2f}x | {mt / ot:.2f}"
                    if os_ else "- | - | - | -")
        rows.append(f"| {kind} | {ms:.1f} | {mt:.1f} | {mt / ms:.2f}x | {mp:.1f} | "
                    f"{mt / mp:.2f} | {ort_cols} |")
    return "\n".join(rows)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    register(request, "mkcache-threads-report", lambda: [
        ("Python threads against onnxruntime sessions", render_table())] if RESULTS else [])
    yield
