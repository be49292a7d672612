"""The hit path's wall-clock overhead, robust to a noisy machine.

One paired measurement (``Helper.paired``: blocks of bare and cached calls
alternated in one process, one OpenMP thread) is stable within a process,
but separate processes of the same library differ by a few hundredths of a
microsecond (where code and buffers land). This runs the paired measurement
in many short processes and reports the median over processes; given
several library builds it alternates them process by process, so machine
drift hits all alike. What the README's "processes" figures come from.

    python tests/bench/paired_processes.py relu                   # this build
    python tests/bench/paired_processes.py conv --processes 12
    python tests/bench/paired_processes.py conv --build /old/build=/old/python --build build

A build is a CMake build directory holding libmkcache.so.0 and
libmkcache_bench.so (default: the libraries the environment resolves:
MKCACHE_LIBRARY / MKCACHE_BENCH_LIBRARY or the installed package),
optionally with "=DIR" naming the Python package directory to import with it
(an older library lacks functions a newer package declares); otherwise the
package found on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

# case -> (helper op, params, calls per paired block)
CASES = {
    "relu": ("relu", (1, 16), 5000),
    "conv": ("conv2d", (1, 8, 8, 8, 8, 3, 1, 1), 2000),
}

# Runs in each child: one paired measurement of `blocks` blocks, repeated
# `repeats` times, printing the medians (bare, overhead) in microseconds.
CHILD = """
import statistics, sys
from mkcache.bench import Helper
op, calls, blocks, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
params = [int(v) for v in sys.argv[5].split(",")]
h = Helper()
bare, cached = h.create(op, "bare", params), h.create(op, "cached", params)
runs = [h.paired(bare, cached, calls, blocks, 1) for _ in range(repeats)]
print(statistics.median(r[0] for r in runs) * 1e6, statistics.median(r[2] for r in runs) * 1e6)
h.lib.mkcb_destroy(bare)
h.lib.mkcb_destroy(cached)
"""


def run_child(build: str | None, op: str, params, calls: int) -> tuple[float, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if build is not None:
        build, _, python = build.partition("=")
        if python:
            env["PYTHONPATH"] = python
        env["MKCACHE_LIBRARY"] = os.path.join(build, "libmkcache.so.0")
        env["MKCACHE_BENCH_LIBRARY"] = os.path.join(build, "libmkcache_bench.so")
    out = subprocess.run([sys.executable, "-c", CHILD, op, str(calls), "31", "5",
                          ",".join(str(p) for p in params)],
                         env=env, capture_output=True, text=True, check=True).stdout
    bare, overhead = (float(v) for v in out.split())
    return bare, overhead


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--build", action="append", default=None,
                        help="a build directory (repeat to alternate several)")
    args = parser.parse_args(argv)
    op, params, calls = CASES[args.case]
    builds = args.build or [None]
    results = {b: [] for b in builds}
    for _ in range(args.processes):
        for b in builds:
            results[b].append(run_child(b, op, params, calls))
    for b in builds:
        bare = statistics.median(r[0] for r in results[b])
        overheads = sorted(r[1] for r in results[b])
        print(f"{b or 'default libraries'}: {args.case} overhead median of {args.processes} "
              f"processes {statistics.median(overheads):+.3f} us (bare {bare:.3f} us); "
              f"spread {overheads[0]:+.3f} .. {overheads[-1]:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
