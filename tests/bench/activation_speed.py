"""The eager activations' time on a 1M-element array, for one build or
several compared (e.g. before and after a kernel change): each process
times every op (median of many calls into a preallocated output), and the
builds' processes alternate, so machine drift hits all alike.

    python tests/bench/activation_speed.py                          # this build
    python tests/bench/activation_speed.py --build /old/build --build build
    python tests/bench/activation_speed.py --ops log,exp --processes 9
    python tests/bench/activation_speed.py --grad        # the gradients (dy = 1)

A build is a CMake build directory holding libmkcache.so.0 (default: the
library the environment resolves); the package is the one on PYTHONPATH.
The first build given is the baseline of the ratios printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

OPS = "log,exp,sqrt,tanh,sigmoid,gelu,gelu_tanh,elu,swish,mish,relu"

# Runs in each child: per op, the median microseconds of `calls` calls.
CHILD = """
import statistics, sys, time
import numpy as np
import mkcache
ops, n, calls = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
grad = sys.argv[4] == "1"
x = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 4
src = {False: mkcache.Tensor(x), True: mkcache.Tensor(np.abs(x) + 0.01)}
out = mkcache.Tensor(np.empty(n, np.float32))
dy = mkcache.Tensor(np.ones(n, np.float32))
def call(t, op):
    if grad:  # a new diff_src each call (the gradient takes no out=)
        return mkcache.grad.activation(dy, t, op)
    return mkcache.activation(t, op, out=out)
for op in ops:
    t = src[op in ("log", "sqrt")]
    call(t, op)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call(t, op)
        times.append(time.perf_counter() - t0)
    print(op, statistics.median(times) * 1e6)
"""


def run_child(build, ops, n, calls, grad):
    env = dict(os.environ)
    if build is not None:
        env["MKCACHE_LIBRARY"] = os.path.join(build, "libmkcache.so.0")
    out = subprocess.run([sys.executable, "-c", CHILD, ops, str(n), str(calls), str(int(grad))],
                         env=env, capture_output=True, text=True, check=True).stdout
    return {op: float(us) for op, us in (line.split() for line in out.splitlines())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=OPS)
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--grad", action="store_true", help="time the gradients instead")
    parser.add_argument("--build", action="append", default=None,
                        help="a build directory (repeat to alternate several)")
    args = parser.parse_args(argv)
    builds = args.build or [None]
    runs = {b: [] for b in builds}
    for _ in range(args.processes):
        for b in builds:
            runs[b].append(run_child(b, args.ops, args.elements, args.calls, args.grad))
    ops = args.ops.split(",")
    medians = {b: {op: statistics.median(r[op] for r in runs[b]) for op in ops} for b in builds}
    names = [b or "this build" for b in builds]
    print(f"{'gradients' if args.grad else 'forward'}, {args.elements} elements, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'default')}: "
          f"median us per call over {args.processes} processes")
    print(f"{'op':<10}" + "".join(f"{n[-24:]:>26}" for n in names)
          + ("".join(f"{'ratio ' + str(i + 2):>10}" for i in range(len(builds) - 1))))
    for op in ops:
        base = medians[builds[0]][op]
        print(f"{op:<10}" + "".join(f"{medians[b][op]:>26.1f}" for b in builds)
              + "".join(f"{medians[b][op] / base:>10.2f}" for b in builds[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
