"""ResNet-18 or ResNet-50 as an mkcache program, against the same model run
op by op.

    python examples/resnet.py                       # ResNet-18, batch 1, NCHW, 224x224
    python examples/resnet.py --batch 8 --layout NHWC
    python examples/resnet.py --arch resnet50

Builds torchvision's ResNet-18 or ResNet-50 (random seeded weights, BN as
nodes of their own with constant statistics; mkcache.models) as an
mkcache.Graph, compiles it (which folds the BNs into the convolutions and
fuses the relus and residual adds into them; --no-fuse keeps every node a
step), prints the plan's totals and the memory figures, then times the
program against the eager mkcache calls (interleaved, median of --runs
after a warm-up, both on the library's OpenMP threads) and checks that the
two agree, and agree with a float64 numpy run of the first image.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mkcache
from mkcache.models import (ResNet18, ResNet50, interleaved, max_relative_error, memory_summary,
                    plan_summary)

ARCHS = {m.NAME: m for m in (ResNet18, ResNet50)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=sorted(ARCHS), default="resnet18")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW")
    ap.add_argument("--image", type=int, default=224, help="height and width")
    ap.add_argument("--runs", type=int, default=10, help="timed runs of each (after 2 warm-ups)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fuse", action="store_true",
                    help="compile without fusion (every node a step of its own)")
    ap.add_argument("--no-inplace", action="store_true",
                    help="compile without in-place sums and views (reshapes and transposes "
                         "copy)")
    args = ap.parse_args(argv)

    threads = mkcache.build_info()["max_threads"]
    model = ARCHS[args.arch]
    print(f"{model.TITLE}, batch {args.batch}, {args.layout}, {args.image}x{args.image}, "
          f"mkcache {mkcache.__version__}, {threads} OpenMP threads")
    net = model(args.seed)
    rng = np.random.default_rng(args.seed + 1)
    x = rng.standard_normal(model.input_shape(args.batch, args.image, args.layout),
                            dtype=np.float32)

    t0 = time.perf_counter()
    graph = net.graph(args.batch, args.image, args.layout)
    t1 = time.perf_counter()
    with graph.compile(fuse=not args.no_fuse, inplace=not args.no_inplace) as prog:
        t2 = time.perf_counter()
        graph.close()
        got = prog.run(x=x)["logits"]
        t3 = time.perf_counter()
        print(f"graph built in {t1 - t0:.2f} s, compiled in {t2 - t1:.2f} s, first run "
              f"{(t3 - t2) * 1e3:.1f} ms")
        print("plan: " + plan_summary(prog))
        print("memory: " + memory_summary(prog))

        want = net.eager(x, args.layout)  # warm-up of the eager calls too
        first = np.ascontiguousarray(x[:1].transpose(0, 3, 1, 2) if args.layout == "NHWC"
                                     else x[:1])
        ref = net.reference(first)
        err, err_ref = max_relative_error(got, want), max_relative_error(got[:1], ref)
        print(f"program vs eager: max |diff| / max |eager| = {err:.2e}; "
              f"vs float64 numpy (image 0): {err_ref:.2e}")

        for _ in range(2):
            prog.run(x=x)
            net.eager(x, args.layout)
        med = interleaved({"program": lambda: prog.run(x=x),
                           "eager": lambda: net.eager(x, args.layout)}, args.runs)
        print(f"median of {args.runs}: program {med['program'] * 1e3:.2f} ms, eager op by op "
              f"{med['eager'] * 1e3:.2f} ms ({med['eager'] / med['program']:.2f}x), "
              f"{args.batch / med['program']:.1f} images/s")
    if err > 1e-4 or err_ref > 1e-4:
        print("the outputs disagree")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
