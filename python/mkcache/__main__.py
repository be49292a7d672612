"""python -m mkcache info | demo [--ops] | bench [--models] | run MODEL.onnx"""
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


def _step(label: str):
    """Prints `label` and, when the block ends, the seconds it took."""
    class Step:
        def __enter__(self):
            sys.stdout.write(f"  {label} ...")
            sys.stdout.flush()
            self.t0 = time.perf_counter()
            return self

        def __exit__(self, kind, *_):
            if kind is None:
                print(f" {time.perf_counter() - self.t0:.2f} s")
    return Step()


def _alternating(fns: dict, runs: int, block: int = 5, settle: float = 0.25) -> dict:
    """{name: median seconds per call} of functions of different runtimes:
    blocks of `block` calls of each in turn, with a pause before each block.
    A runtime's idle threads keep spinning a while after its last call, and
    on a machine of few cores they would slow the other runtime's next
    calls."""
    times = {name: [] for name in fns}
    for r in range(max(1, -(-runs // block))):
        names = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for name in names:
            time.sleep(settle)
            for _ in range(block):
                t0 = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def demo(args) -> int:
    """ResNet-18 (mkcache.models: seeded random weights, nothing downloaded)
    compiled into a program: its plan, its agreement with and speed against
    the same network called op by op, and, where onnx and onnxruntime are
    installed, the network's ONNX model imported and timed against ONNX
    Runtime on the same threads. --ops: the operator cache at work instead."""
    if args.ops:
        return demo_ops(args)
    from . import models  # noqa: PLC0415 (the demo's model, loaded when asked)
    threads = mkcache.build_info()["max_threads"]
    image, runs = args.image, args.runs
    print(f"mkcache {mkcache.__version__} demo: ResNet-18, batch 1, 3x{image}x{image}, "
          f"random weights; ISA {mkcache.build_info()['isa']}, {threads} threads")
    x = np.random.default_rng(0).standard_normal((1, 3, image, image), dtype=np.float32)
    with _step("weights"):
        net = models.ResNet18(seed=0)
    with _step("graph and compile"):
        prog = net.graph(batch=1, image=image).compile()
    with _step("first run (binds the plan)"):
        got = prog.run(x=x)["logits"]
    print("plan: " + models.plan_summary(prog))
    print("memory: " + models.memory_summary(prog))
    eager = net.eager(x)
    print(f"program against op-by-op calls: max |diff| / max |value| = "
          f"{models.max_relative_error(got, eager):.1e}")
    with _step(f"timing, {runs} interleaved runs each"):
        t = models.interleaved({"program": lambda: prog.run(x=x), "eager": lambda: net.eager(x)},
                               runs)
    print(f"  program {t['program'] * 1e3:.2f} ms, op by op {t['eager'] * 1e3:.2f} ms "
          f"({t['eager'] / t['program']:.2f}x)")
    prog.close()
    try:
        import onnxruntime as ort  # noqa: PLC0415 (optional: the comparison)
        from . import onnx as mkonnx  # noqa: PLC0415
        model = net.onnx_model(batch=1, image=image)
    except ImportError as e:
        print(f"ONNX Runtime comparison skipped ({e.name} is not installed: "
              "pip install 'mkcache[onnx]' onnxruntime)")
        return 0
    data = model.SerializeToString()
    with _step("ONNX model imported (mkcache.onnx.load)"):
        imported = mkonnx.load(data)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    with _step("ONNX Runtime session"):
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    want = session.run(None, {name: x})[0]
    out = imported.run(**{name: x})
    print(f"imported against ONNX Runtime: max |diff| / max |value| = "
          f"{models.max_relative_error(next(iter(out.values())), want):.1e}")
    with _step(f"timing, {runs} runs each in alternating blocks"):
        t = _alternating({"imported": lambda: imported.run(**{name: x}),
                          "onnxruntime": lambda: session.run(None, {name: x})}, runs)
    print(f"  imported {t['imported'] * 1e3:.2f} ms, onnxruntime {t['onnxruntime'] * 1e3:.2f} ms "
          f"(imported / onnxruntime {t['imported'] / t['onnxruntime']:.2f})")
    imported.close()
    return 0


def demo_ops(args) -> int:
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


def _profile_lines(prog, feeds: dict, top: int, runs: int = 5) -> list:
    """The program's slowest steps (medians over `runs` profiles) with
    their GFLOP/s and share of the peak of their own arithmetic, then the
    totals."""
    profiles = [prog.profile(**feeds) for _ in range(runs)]
    steps = [dict(s, us=statistics.median(p[i]["us"] for p in profiles))
             for i, s in enumerate(profiles[0])]
    threads = mkcache.get_num_threads()
    for s in steps:
        if s["flops"]:
            s["gflops"] = s["flops"] / s["us"] / 1e3
            s["peak"] = s["gflops"] * 1e9 / (mkcache.peak_flops(s["arithmetic"]) * threads)
    total = sum(s["us"] for s in steps) or 1.0
    kinds = sorted({s["arithmetic"] for s in steps if s["flops"]}) or ["f32"]
    peaks = ", ".join(f"{k} {mkcache.peak_flops(k) / 1e9:.1f}" for k in kinds)
    lines = [f"slowest steps (GFLOP/s and share of the peak: {threads} threads x {peaks} "
             f"GFLOP/s measured):"]
    for s in sorted(steps, key=lambda s: -s["us"])[:top]:
        rate = (f"{s['gflops']:7.1f} GFLOP/s {100 * s['peak']:4.0f}% {s['arithmetic']:4}"
                if s["flops"] else " " * 25)
        lines.append(f"  {s['us']:9.1f} us {100 * s['us'] / total:5.1f}%  {rate}  {s['what']}  "
                     f"{s['impl']}")
    heavy = [s for s in steps if s["flops"]]
    if heavy:
        flops, us = sum(s["flops"] for s in heavy), sum(s["us"] for s in heavy)
        limit = sum(mkcache.peak_flops(s["arithmetic"]) * threads * s["us"] for s in heavy) / us
        lines.append(f"  steps with a product: {100 * us / total:.0f}% of the time, "
                     f"{flops / us / 1e3:.1f} GFLOP/s, {100 * flops / us * 1e6 / limit:.0f}% of "
                     f"the peak; all steps {total / 1e3:.3f} ms")
    return lines


def bench_models(args) -> int:
    """ResNet-18, ResNet-50 (batch 1) and the BERT-base layer (seq 128),
    compiled from mkcache.models: each program's run time and its slowest
    steps against the machine's measured peak."""
    from . import models  # noqa: PLC0415
    info = mkcache.build_info()
    print(f"mkcache {mkcache.__version__} models: ISA {info['isa']}, "
          f"{mkcache.get_num_threads()} threads, float32, random weights")
    rng = np.random.default_rng(0)
    cases = [("ResNet-18 b1 224x224", models.ResNet18, dict(batch=1), (1, 3, 224, 224)),
             ("ResNet-50 b1 224x224", models.ResNet50, dict(batch=1), (1, 3, 224, 224)),
             ("BERT-base layer seq 128", models.BertLayer, dict(batch=1, seq=128), (1, 128, 768))]
    for title, model, shape, x_shape in cases:
        feeds = {"x": rng.standard_normal(x_shape, dtype=np.float32)}
        with model(0).graph(**shape) as g, g.compile() as prog:
            prog.run(**feeds)
            t = models.interleaved({"run": lambda: prog.run(**feeds)}, args.runs)["run"]
            print(f"\n{title}: {t * 1e3:.3f} ms per run (median of {args.runs})")
            print("\n".join(_profile_lines(prog, feeds, args.top)))
    return 0


def bench(args) -> int:
    if args.models:
        return bench_models(args)
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


def _parse_inputs(items) -> dict:
    """--input name=2x3x224x224 (a ? or -1 keeps a dim bound at run time)."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise SystemExit(f"--input {item!r}: expected name=shape, as x=1x3x224x224")
        try:
            shapes[name] = tuple(None if d in ("?", "-1") else int(d) for d in dims.split("x"))
        except ValueError:
            raise SystemExit(f"--input {item!r}: dims must be integers joined by x") from None
    return shapes


def _index_bounds(model) -> dict:
    """{input name: n} for the graph inputs a Gather reads as indices into
    a constant table, n the size of the table's gathered axis (the smallest
    where several read it)."""
    tables = {i.name: tuple(i.dims) for i in model.graph.initializer}
    bounds = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[0] not in tables:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        dims = tables[node.input[0]]
        if dims and -len(dims) <= axis < len(dims):
            name = node.input[1]
            bounds[name] = min(bounds.get(name, dims[axis]), dims[axis])
    return bounds


def _random_feeds(model, shapes: dict, rng) -> dict:
    """Inputs of the model's dtypes and shapes (a symbolic dim 1 unless
    --input gave it): floats normal; integers that index a table (token ids,
    token types) uniform over it; other integers (masks) and booleans ones,
    "attend to everything"."""
    from .onnx._base import INPUT_TYPES  # noqa: PLC0415 (needs the onnx extra)
    initializers = {i.name for i in model.graph.initializer}
    bounds = _index_bounds(model)
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        t = info.type.tensor_type
        given = shapes.get(info.name)
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                for d in t.shape.dim]
        if given is not None:
            dims = [g if g is not None else d for g, d in zip(given, dims)]
        dtype = INPUT_TYPES.get(t.elem_type, np.float32)
        if dtype == np.float32:
            feeds[info.name] = rng.standard_normal(dims, dtype=np.float32)
        elif info.name in bounds and bounds[info.name] > 0:
            feeds[info.name] = rng.integers(0, bounds[info.name], size=dims).astype(dtype)
        else:
            feeds[info.name] = np.ones(dims, dtype=dtype)
    return feeds


def run(args) -> int:
    """Loads an ONNX model, compiles it, runs it on random inputs and tells
    how it went (and, with --compare, against ONNX Runtime)."""
    try:
        import onnx  # noqa: PLC0415
        import mkcache.onnx as mkonnx  # noqa: PLC0415
    except ImportError:
        print("run needs the onnx package: pip install 'mkcache[onnx]'", file=sys.stderr)
        return 1
    shapes = _parse_inputs(args.input)
    model = onnx.load(args.model)
    feeds = _random_feeds(model, shapes, np.random.default_rng(args.seed))
    print(f"{args.model}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, "
          f"mkcache {mkcache.__version__}, ISA {mkcache.build_info().get('isa')}, "
          f"{mkcache.build_info()['max_threads']} threads")
    print("  compiling ...", end="", flush=True)
    t0 = time.perf_counter()
    prog = mkonnx.load(model, input_shapes=shapes or None,
                       choose="measure" if args.measure else "priority")
    first = prog.run(**feeds)
    t1 = time.perf_counter()
    print(f"\r  load + compile + first run: {(t1 - t0) * 1e3:.1f} ms")
    plan = prog.plan()
    totals = [line for line in plan.splitlines() if line.startswith(("plan ", "converters "))]
    print("  " + "\n  ".join(totals))
    if args.plan:
        print(plan)

    def timed(fn):
        fn()
        ts = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
        return statistics.median(ts) * 1e3

    mine = timed(lambda: prog.run(**feeds))
    print(f"  run: {mine:.3f} ms (median of {args.runs})")
    if args.profile:
        print("  " + "\n  ".join(_profile_lines(prog, feeds, 15, runs=1)))
    if args.compare:
        try:
            import onnxruntime as ort  # noqa: PLC0415
        except ImportError:
            print("--compare needs onnxruntime (pip install onnxruntime)", file=sys.stderr)
            return 1
        so = ort.SessionOptions()
        so.intra_op_num_threads = mkcache.build_info()["max_threads"]
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for name, got in first.items():
            w = want[name].reshape(got.shape) if want[name].ndim == 0 else want[name]
            diff = float(np.abs(got - w).max())
            scale = float(np.abs(w).max()) or 1.0
            print(f"  {name}: max |difference| {diff:.3g} ({diff / scale:.3g} of the largest)")
        # Interleaved, so a drift of the machine hits both alike.
        a, b = [], []
        for _ in range(5):
            a.append(timed(lambda: prog.run(**feeds)))
            b.append(timed(lambda: sess.run(None, feeds)))
        ratio = statistics.median(x / y for x, y in zip(a, b))
        print(f"  onnxruntime: {statistics.median(b):.3f} ms; mkcache / onnxruntime "
              f"{ratio:.3f} (median of 5 interleaved rounds)")
    prog.close()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mkcache")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print versions, ISA and threads")
    d = sub.add_parser("demo", help="compile ResNet-18 (random weights) and time it against "
                                    "op-by-op calls and ONNX Runtime")
    d.add_argument("--image", type=int, default=224, help="image side (default 224)")
    d.add_argument("--runs", type=int, default=20, help="timed runs per column (median)")
    d.add_argument("--ops", action="store_true",
                   help="instead: a conv-relu block over several shapes, the cache at work")
    d.add_argument("--iterations", type=int, default=50, help="with --ops: calls per shape")
    bp = sub.add_parser("bench", help="time mkcache against bare oneDNN, numpy and torch")
    bp.add_argument("--budget", type=float, default=0.15, help="seconds per measurement")
    bp.add_argument("--markdown", help="also write the table to this file")
    bp.add_argument("--plot", help="also draw the ratios to this PNG (needs matplotlib)")
    bp.add_argument("--models", action="store_true",
                    help="instead: ResNet-18/50 and a BERT layer, each step's GFLOP/s and share "
                         "of the machine's peak")
    bp.add_argument("--runs", type=int, default=20, help="with --models: timed runs (median)")
    bp.add_argument("--top", type=int, default=8, help="with --models: steps shown per model")
    rp = sub.add_parser("run", help="load an ONNX model, compile it and run random inputs")
    rp.add_argument("model", help="the .onnx file")
    rp.add_argument("--input", action="append", metavar="NAME=SHAPE",
                    help="an input's shape, as x=1x3x224x224 (? keeps a dim open); repeat")
    rp.add_argument("--plan", action="store_true", help="print the whole plan")
    rp.add_argument("--profile", action="store_true", help="time every step once")
    rp.add_argument("--runs", type=int, default=20, help="timed runs (median)")
    rp.add_argument("--measure", action="store_true", help='compile with choose="measure"')
    rp.add_argument("--compare", choices=["onnxruntime"],
                    help="check the outputs and time against ONNX Runtime")
    rp.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return {"info": info, "demo": demo, "bench": bench, "run": run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
