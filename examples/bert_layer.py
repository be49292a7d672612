"""A BERT-base encoder layer as an mkcache program, against the same layer
run op by op.

    python examples/bert_layer.py                 # seq 128
    python examples/bert_layer.py --seq 32 --batch 2

Builds one post-LN encoder layer (hidden 768, 12 heads, FFN 3072, gelu;
random seeded weights; mkcache.models) as an mkcache.Graph whose
sequence length is bound at run time, compiles it, runs it at --seq // 2
and at --seq (one plan per length), prints the plan's totals and the memory
figures of the --seq plan, times the program against the eager mkcache
calls (interleaved, median of --runs after a warm-up, both on the library's
OpenMP threads) and checks both against float64 numpy.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mkcache
from mkcache.models import BertLayer, interleaved, max_relative_error, memory_summary, plan_summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30, help="timed runs of each (after 3 warm-ups)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fuse", action="store_true",
                    help="compile without fusion (every node a step of its own)")
    ap.add_argument("--no-inplace", action="store_true",
                    help="compile without in-place sums and views (reshapes and transposes "
                         "copy)")
    args = ap.parse_args(argv)
    if args.seq < 2:
        ap.error("--seq must be >= 2")

    threads = mkcache.build_info()["max_threads"]
    print(f"BERT-base encoder layer, batch {args.batch}, seq {args.seq}, "
          f"mkcache {mkcache.__version__}, {threads} OpenMP threads")
    layer = BertLayer(args.seed)
    rng = np.random.default_rng(args.seed + 1)
    inputs = {s: rng.standard_normal((args.batch, s, layer.hidden), dtype=np.float32)
              for s in (args.seq // 2, args.seq)}
    x = inputs[args.seq]

    t0 = time.perf_counter()
    graph = layer.graph(args.batch)  # seq: None, bound at run time
    t1 = time.perf_counter()
    worst = 0.0
    with graph.compile(fuse=not args.no_fuse, inplace=not args.no_inplace) as prog:
        graph.close()
        print(f"graph built in {t1 - t0:.2f} s")
        for s, xs in inputs.items():
            t2 = time.perf_counter()
            got = prog.run(x=xs)["y"]
            t3 = time.perf_counter()
            eager = layer.eager(xs)  # warm-up of the eager calls too
            ref = layer.reference(xs)
            err, err_ref = max_relative_error(got, eager), max_relative_error(got, ref)
            worst = max(worst, err, err_ref, max_relative_error(eager, ref))
            print(f"seq {s}: first run (compiles its plan) {(t3 - t2) * 1e3:.1f} ms; program vs "
                  f"eager {err:.2e}, vs float64 numpy {err_ref:.2e} (max |diff| / max |ref|)")
        print("plan: " + plan_summary(prog))
        print("memory: " + memory_summary(prog))

        for _ in range(3):
            prog.run(x=x)
            layer.eager(x)
        med = interleaved({"program": lambda: prog.run(x=x), "eager": lambda: layer.eager(x)},
                          args.runs)
        print(f"median of {args.runs}: program {med['program'] * 1e3:.2f} ms, eager op by op "
              f"{med['eager'] * 1e3:.2f} ms ({med['eager'] / med['program']:.2f}x), "
              f"{args.batch * args.seq / med['program']:.0f} tokens/s")
    if worst > 1e-4:
        print("the outputs disagree")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
