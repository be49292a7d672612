"""One system running the BERT-base layer over many sequence lengths, in a
process of its own so that its resident memory is its own: what
test_bench_shapes.py starts per system, and a tool for looking at where the
memory goes.

    python tests/bench/shape_sweep.py mkcache            # the graph, as a program
    python tests/bench/shape_sweep.py imported           # the ONNX model, mkcache.onnx.load
    python tests/bench/shape_sweep.py onnxruntime
    python tests/bench/shape_sweep.py mkcache --lengths 8:512:8 --passes 3 --capacity 0
    python tests/bench/shape_sweep.py mkcache --exact-plans -1   # every plan exact

Prints one JSON line: the resident set after the first run (of the first
length), after each pass and at its peak (MiB), how much of the growth is
malloc's heap and how much generated code, each pass's seconds, and for
mkcache the cache's counters and the program's figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

SYSTEMS = ("mkcache", "imported", "onnxruntime")


def resident_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def resident_parts_mib() -> dict:
    """Where the resident set lies (MiB): the malloc heap ([heap]) and
    anonymous executable mappings (generated code: oneDNN's kernels)."""
    parts = {"heap": 0.0, "code": 0.0}
    kind = None
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's header line
                anonymous = len(fields) < 6
                kind = ("heap" if line.rstrip().endswith("[heap]") else
                        "code" if anonymous and "x" in fields[1] else None)
            elif kind and fields[0] == "Rss:":
                parts[kind] += int(fields[1]) / 1024
    return parts


def parse_lengths(text: str) -> list[int]:
    """"8:512:8" (start, stop inclusive, step) or "8,16,40"."""
    if ":" in text:
        start, stop, step = (int(v) for v in text.split(":"))
        return list(range(start, stop + 1, step))
    return [int(v) for v in text.split(",")]


def make_runner(system: str, threads: int, capacity: int, exact_plans: int | None = None):
    """-> (run(x) -> y, extras() -> dict of figures)."""
    import mkcache
    from mkcache.models import BertLayer

    model = BertLayer(0)
    if system == "onnxruntime":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(model.onnx_model(batch=1, seq=None).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return (lambda x: sess.run(None, {"x": x})[0]), dict
    mkcache.set_num_threads(threads)
    options = {"capacity": capacity}
    if exact_plans is not None:
        options["exact_plans"] = exact_plans
    if system == "imported":
        import mkcache.onnx
        prog = mkcache.onnx.load(model.onnx_model(batch=1, seq=None).SerializeToString(),
                                 **options)
    else:
        prog = model.graph(batch=1).compile(**options)

    def extras():
        s = mkcache.cache.stats()
        m = prog.memory
        return {"entries": s["entries"], "entry_bytes_mib": s["bytes"] / (1 << 20),
                "evictions": s["evictions"], "plans": m["plans"],
                "arena_mib": m["arena_bytes"] / (1 << 20),
                "constant_mib": m["constant_bytes"] / (1 << 20)}

    return (lambda x: prog.run(x=x)["y"]), extras


def sweep(system: str, lengths: list[int], passes: int, threads: int, capacity: int,
          exact_plans: int | None = None) -> dict:
    run, extras = make_runner(system, threads, capacity, exact_plans)
    rng = np.random.default_rng(1)
    # Every input made before the first figure, so that they are not growth.
    xs = [rng.standard_normal((1, s, 768), dtype=np.float32) for s in lengths]
    run(xs[0])
    first, _ = resident_mib()
    first_parts = resident_parts_mib()
    seconds, after = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        for x in xs:
            run(x)
        seconds.append(time.perf_counter() - t0)
        after.append(resident_mib()[0])
    parts = resident_parts_mib()
    out = {"system": system, "first_mib": first, "after_mib": after,
           "peak_mib": resident_mib()[1], "growth_mib": after[-1] - first,
           "growth_heap_mib": parts["heap"] - first_parts["heap"],
           "growth_code_mib": parts["code"] - first_parts["code"], "seconds": seconds,
           "warm_seconds": min(seconds[1:]) if passes > 1 else None}
    out.update(extras())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("--lengths", default="8:512:8")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: mkcache's thread count")
    parser.add_argument("--capacity", type=int, default=0, help="mkcache's plans kept (0: all)")
    parser.add_argument("--exact-plans", type=int, default=None,
                        help="mkcache's exact_plans (default: the library's)")
    args = parser.parse_args(argv)
    threads = args.threads
    if threads == 0:
        import mkcache
        threads = mkcache.build_info()["max_threads"]
    result = sweep(args.system, parse_lengths(args.lengths), args.passes, threads, args.capacity,
                   args.exact_plans)
    result["threads"] = threads
    result["isa"] = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
