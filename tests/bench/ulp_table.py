"""Error in float32 ulps of every transcendental activation, over its whole
float32 domain, against the same float32 inputs evaluated in float64.

    python tests/bench/ulp_table.py                 # eager and reference
    python tests/bench/ulp_table.py --ops log,exp   # some of them
    python tests/bench/ulp_table.py --fused          # also fused into linear
    python tests/bench/ulp_table.py --grad           # also the gradient
    ONEDNN_MAX_CPU_ISA=AVX2 python tests/bench/ulp_table.py

Columns, per operator: the eager call (mkcache.activation), a one-node
program compiled with impl={"activation": "reference"}, optionally the op
fused into linear as oneDNN's post-op, and numpy's float32 function (or
the usual float32 composition of numpy's functions) where numpy has one;
each as the largest error, the 99.9th percentile, the largest where the
exact result is a normal float (not below 2^-126: what is left when
results flushed or lost below float's normal range are set aside), and
the input of the largest. The sample: every 2^11-th
float32 bit pattern over the finite range (both signs: denormals, zero,
the largest magnitudes), every 2^6-th in 1/16 <= |x| < 128 (where the
functions bend and saturate) and every pattern within 2^16 of 1.0 (log's
cancellation). An error is |got - exact| / ulp(exact), the ulp being the
float32 spacing at the exact value's magnitude (denormal spacing below the
normal range); an infinite exact value is met only by the same infinity,
a NaN only by a NaN.

The same measure bounds the operators in tests/python/test_accuracy.py."""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # accuracy: the exact functions

import mkcache  # noqa: E402
from accuracy import EXACT, GRAD, NUMPY, domain, ulp_error  # noqa: E402


def sample(op: str) -> np.ndarray:
    """The measuring sample of `op`'s domain (see the module text)."""
    finite = np.arange(0, 0x7F800000, 1 << 11, dtype=np.uint32)
    bend = np.arange(0x3D800000, 0x43000000, 1 << 6, dtype=np.uint32)  # 1/16 .. 128
    one = np.arange(0x3F800000 - (1 << 16), 0x3F800000 + (1 << 16), dtype=np.uint32)
    bits = np.concatenate([finite, bend, one])
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    return domain(op, np.unique(bits).view(np.float32))


def eager(op: str, x: np.ndarray) -> np.ndarray:
    return np.asarray(mkcache.activation(x, op))


def reference(op: str, x: np.ndarray) -> np.ndarray:
    with mkcache.trace(lambda x: mkcache.activation(x, op), x,
                       impl={"activation": "reference"}) as prog:
        return np.asarray(prog.run(x=x)["output"])


def fused(op: str, x: np.ndarray) -> np.ndarray:
    """x through linear with an identity weight and `op` fused as its
    post-op (a column of 16 so the blocked kernels run)."""
    cols = 16
    rows = -(-x.size // cols)
    padded = np.ones(rows * cols, np.float32)
    padded[:x.size] = x
    y = mkcache.linear(padded.reshape(rows, cols), np.eye(cols, dtype=np.float32),
                       activation=op)
    return np.asarray(y).reshape(-1)[:x.size]


def grad(op: str, x: np.ndarray) -> np.ndarray:
    """The eager gradient (mkcache.grad.activation) with dy = 1: the
    derivative, measured against GRAD's."""
    return np.asarray(mkcache.grad.activation(np.ones_like(x), x, op))


def stats(err: np.ndarray, x: np.ndarray, exact: np.ndarray) -> str:
    worst = int(np.argmax(err))
    normal = err[~(np.abs(exact) < np.finfo(np.float32).tiny)]  # NaN and inf count
    q = np.quantile(err, 0.999, method="higher")  # no interpolation between infinities
    return f"{err[worst]:>8.3g} {q:>7.3g} {normal.max():>8.3g}  x={x[worst]:<11.5g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(EXACT), help="comma-separated activation names")
    ap.add_argument("--fused", action="store_true", help="also the op fused into linear")
    ap.add_argument("--grad", action="store_true",
                    help="also the eager gradient (against the exact derivative)")
    args = ap.parse_args(argv)
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "default")
    columns = (["eager", "reference"] + (["fused"] if args.fused else [])
               + (["grad"] if args.grad else []) + ["numpy"])
    print(f"mkcache {mkcache.__version__}, ONEDNN_MAX_CPU_ISA={isa}: ulps (max, 99.9th "
          f"percentile, max where the exact result is a normal float, the input of the max)")
    print(f"{'op':<10}" + "".join(f"| {c:<42}" for c in columns))
    for op in args.ops.split(","):
        x = sample(op)
        exact = EXACT[op](x)
        cells = []
        for c in columns:
            if c == "numpy" and op not in NUMPY:
                cells.append("-")
                continue
            got = {"eager": eager, "reference": reference, "fused": fused, "grad": grad,
                   "numpy": lambda op, x: NUMPY[op](x)}[c](op, x)
            want = GRAD[op](x) if c == "grad" else exact
            cells.append(stats(ulp_error(got, want), x, want))
        print(f"{op:<10}" + "".join(f"| {c:<42}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
