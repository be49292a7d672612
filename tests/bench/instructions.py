"""Noise-free overhead: instructions per call that mkcache adds to a primitive.

Wall-clock overheads of a few hundred nanoseconds drown in the noise of a
shared machine. Instruction counts do not: this runs each case under
valgrind's callgrind (one OpenMP thread) with n and 2n calls, for the bare
primitive and for the cached mkcache call. Only the instructions inside the
bench's call() are counted (process start-up and set-up are outside it),
and those inside oneDNN's dnnl_primitive_execute (the kernels, whose counts
may differ between two primitives of one problem) are taken out, so what is
left is the calling code; then

    overhead = [O_cached(2n) - O_cached(n) - O_bare(2n) + O_bare(n)] / n

instructions per call, O = inside call() - inside dnnl_primitive_execute
(the first, building calls cancel out). Needs valgrind and
callgrind_annotate; takes ~35 minutes for every case on this machine.

    python tests/bench/instructions.py                 # every case
    python tests/bench/instructions.py relu layer_norm # cases whose name contains these

History: counting the whole process instead made the larger cases vary
between runs by thousands to tens of thousands of instructions per call,
in both signs: Python's start-up does a different amount of dict work each
run (hash randomisation, addresses), divided by a small n. Counting inside
call() removed that; the hash seed is fixed as well.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

# case -> (helper op, params, n): n calls per measurement, small for heavy cases.
CASES = {
    "relu 1x16": ("relu", (1, 16), 2000),
    "relu 1x64x56x56": ("relu", (1, 64, 56, 56), 200),
    "conv2d 3x3 64->64 56x56 b1": ("conv2d", (1, 64, 64, 56, 56, 3, 1, 1), 4),
    "conv 1x1 256->64 56x56": ("conv2d", (1, 256, 64, 56, 56, 1, 1, 0), 4),
    "conv2d 3x3 8->8 8x8 b1": ("conv2d", (1, 8, 8, 8, 8, 3, 1, 1), 200),
    "max pool 3x3 s2 1x64x112x112": ("max_pool", (1, 64, 112, 112, 3, 2, 1), 40),
    "LRN 5 1x96x55x55": ("lrn", (1, 96, 55, 55, 5), 10),
    "batch norm 1x64x56x56": ("batch_norm", (1, 64, 56, 56), 200),
    "softmax 1x12x128x128 last axis": ("softmax", (1, 12, 128, 128), 20),
    "gelu 128x3072": ("gelu", (128, 3072), 20),
    "layer_norm 128x768": ("layer_norm", (128, 768), 200),
    "layer_norm 1x768": ("layer_norm", (1, 768), 1000),
    "softmax 1x12x1x64": ("softmax", (1, 12, 1, 64), 1000),
    "add 1x64x56x56": ("add", (1, 64, 56, 56), 100),
    "add 1x768": ("add", (1, 768), 1000),
    "max pool 3x3 s2 1x64x112x112 backward": ("max_pool_bwd", (1, 64, 112, 112, 3, 2, 1), 10),
}

DRIVER = """
import sys
from mkcache.bench import Helper
h = Helper()
op, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[4])
params = [int(v) for v in sys.argv[3].split(",")]
b = h.create(op, mode, params)
h.lib.mkcb_run(b, n)
h.lib.mkcb_destroy(b)
"""


def instructions(op, mode, params, n, workdir) -> tuple:
    """-> (instructions inside the bench's calls, instructions inside
    dnnl_primitive_execute)."""
    out = os.path.join(workdir, f"cg.{op}.{mode}.{n}")
    driver = os.path.join(workdir, "driver.py")
    with open(driver, "w") as f:
        f.write(DRIVER)
    # A fixed hash seed: Python's start-up otherwise does a different amount
    # of dict work each run (tens of thousands of instructions), which was
    # the run-to-run variation this tool used to show for the larger cases.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                    driver, op, mode, ",".join(map(str, params)), str(n)],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total = execute = None
    report = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                            check=True, capture_output=True, text=True).stdout
    for line in report.splitlines():
        # Only what the bench's calls execute: inside its call() (process
        # start-up and the bench's set-up are outside it). The outermost
        # call() is the first listed (inclusive costs, largest first).
        if total is None and "::call() [" in line and "libmkcache_bench" in line:
            total = int(line.split()[0].replace(",", ""))
        if execute is None and ":dnnl_primitive_execute [" in line:
            execute = int(line.split()[0].replace(",", ""))
    if total is None or execute is None:
        raise RuntimeError(f"no instruction totals in {out}")
    return total, execute


def main(argv) -> int:
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind (with callgrind_annotate) is not installed")
        return 1
    wanted = [c for c in CASES if not argv[1:] or any(a in c for a in argv[1:])]
    print("| case | primitive execution (instructions / call) | mkcache overhead (instructions / call) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for case in wanted:
            op, params, n = CASES[case]
            count = {(mode, k): instructions(op, mode, params, k * n, tmp)
                     for mode in ("bare", "cached") for k in (1, 2)}
            def per_call(mode, outside):
                (t2, e2), (t1, e1) = count[mode, 2], count[mode, 1]
                return ((t2 - e2) - (t1 - e1)) / n if outside else (e2 - e1) / n

            overhead = per_call("cached", True) - per_call("bare", True)
            print(f"| {case} | {per_call('bare', False):,.0f} | {overhead:+,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
