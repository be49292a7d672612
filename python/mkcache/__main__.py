"""python -m mkcache info | demo | bench"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import mkcache


def info(_args) -> int:
    print(json.dumps({"package": mkcache.__version__, **mkcache.build_info()}, indent=2))
    return 0


def _progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = width * done // total
    sys.stdout.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<24}")
    sys.stdout.flush()
    if done == total:
        sys.stdout.write("\n")


def demo(args) -> int:
    """A conv-relu-conv-relu block over a few input shapes in both layouts:
    the first call of each op builds its primitive, later calls hit the cache."""
    rng = np.random.default_rng(0)
    c_in, c_mid, c_out = 3, 24, 40
    w1 = mkcache.Tensor(rng.standard_normal((c_mid, c_in, 3, 3), dtype=np.float32) * 0.2,
                        constant=True)
    w2 = mkcache.Tensor(rng.standard_normal((c_out, c_mid, 3, 3), dtype=np.float32) * 0.1,
                        constant=True)
    b2 = mkcache.Tensor(rng.standard_normal(c_out, dtype=np.float32), constant=True)
    shapes = [(1, 56, 56), (2, 33, 47), (4, 28, 28)]
    ops = ["conv1", "relu1", "conv2", "relu2"]
    first = {op: [] for op in ops}
    cached = {op: [] for op in ops}
    reorders = []
    total = 2 * len(shapes) * args.iterations
    done = 0
    print(f"mkcache {mkcache.__version__} demo: conv3x3({c_in}->{c_mid})-relu-"
          f"conv3x3({c_mid}->{c_out}, bias)-relu, shapes {shapes}, NCHW and NHWC, "
          f"{args.iterations} runs each")
    for fmt in ("NCHW", "NHWC"):
        for n, h, w in shapes:
            shape = (n, c_in, h, w) if fmt == "NCHW" else (n, h, w, c_in)
            x = rng.standard_normal(shape, dtype=np.float32)
            for it in range(args.iterations):
                times = {}
                t0 = time.perf_counter()
                y = mkcache.conv2d(x, w1, padding=1, data_format=fmt, name="conv1")
                t1 = time.perf_counter()
                y = mkcache.relu(y, name="relu1", out=y)
                t2 = time.perf_counter()
                before = mkcache.cache.reorder_count()
                z = mkcache.conv2d(y, w2, b2, padding=1, data_format=fmt, name="conv2")
                t3 = time.perf_counter()
                z = mkcache.relu(z, name="relu2", out=z)
                t4 = time.perf_counter()
                reorders.append(mkcache.cache.reorder_count() - before)
                times = dict(zip(ops, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)))
                for op, t in times.items():
                    (first if it == 0 else cached)[op].append(t * 1e6)
                done += 1
                if done % 10 == 0 or done == total:
                    _progress(done, total, f"{fmt} {n}x{h}x{w}")
            out = np.asarray(z)
            expect = (n, c_out, h, w) if fmt == "NCHW" else (n, h, w, c_out)
            assert out.shape == expect, (out.shape, expect)
    print(f"\n{'op':<8}{'first call (us)':>18}{'cached call (us)':>18}{'speed-up':>10}")
    for op in ops:
        f = statistics.median(first[op])
        c = statistics.median(cached[op])
        print(f"{op:<8}{f:>18.1f}{c:>18.1f}{f / c:>9.1f}x")
    print(f"\nlast tensor: shape={z.shape} layout={z.layout} oneDNN format={z.format}")
    print(f"layout conversions per cached run of conv2+relu2: {statistics.median(reorders[1:]):.0f} "
          "(a consumer converts only when oneDNN picked different layouts)")
    stats = mkcache.cache.stats()
    print("cache:", ", ".join(f"{k}={v}" for k, v in stats.items()))
    return 0


def bench(args) -> int:
    from . import bench as b
    print(f"mkcache {mkcache.__version__} short benchmark (full suite: pytest tests/bench "
          "--benchmark-enable --benchmark-only)")
    rows = b.run(budget=args.budget)
    text = b.table(rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
        print(f"wrote {args.markdown}")
    if args.plot:
        try:
            b.plot(rows, args.plot)
            print(f"wrote {args.plot}")
        except ImportError:
            print("--plot needs matplotlib (pip install 'mkcache[plot]')", file=sys.stderr)
            return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mkcache")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print versions, ISA and threads")
    d = sub.add_parser("demo", help="run a small CNN block and show the cache at work")
    d.add_argument("--iterations", type=int, default=50)
    bp = sub.add_parser("bench", help="time mkcache against bare oneDNN, numpy and torch")
    bp.add_argument("--budget", type=float, default=0.15, help="seconds per measurement")
    bp.add_argument("--markdown", help="also write the table to this file")
    bp.add_argument("--plot", help="also draw the ratios to this PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    return {"info": info, "demo": demo, "bench": bench}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
