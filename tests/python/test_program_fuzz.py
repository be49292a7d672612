"""Differential fuzzing of programs (mkcache.Graph -> Program).

Random DAGs of every operator a Graph offers (program_strategies.py:
conv2d, conv2d_transpose and conv3d with varied stride / padding /
dilation / groups and a fused activation, 2-D, 3-D and global pooling,
linear, matmul, every activation kind, binary ops with numpy broadcasting,
softmax, layer_norm, batch_norm, lrn, concat, transpose, reshape /
flatten), on shapes with size-1 and odd dims, channels that are not
multiples of 16, batch > 1, NCHW and NHWC (NCDHW / NDHWC), a dynamic
batch, several outputs (values other nodes read too, views, an input given
back, one value under two names). Each graph is compiled with every
combination of fuse / inplace / reuse, with every node forced to the
reference implementation, and with choose="measure"; every output is
checked against the same graph run by the eager operators and against a
float64 numpy reference, within bounds carried through the graph (see
program_strategies.py).

Every graph's first program also runs into outputs= arrays, from Tensors
and from blocked inputs (the same bits), and one runs after its graph is
closed. Then: graphs valid for any batch, run at two batches and back
(capacity 0 and 1); outputs= arrays that alias an input or each other (the
program must give the right answer or refuse with mkcache.Error, never
garbage); threads running a program, each with its own data, while another
compiles or closes it (right answers or mkcache.Error; the process must not
crash: these run in a child process).

Budgets as test_fuzz.py's (MKCACHE_FUZZ_PROFILE / _SCALE / _EXAMPLES /
_RANDOM / _SHRINK, see fuzz_strategies.py). Figures (graphs, compiles,
mismatches, ...) print at the end of the module (pytest -s), or:

    python tests/python/test_program_fuzz.py --budget 500

Known bugs of the library are excused where a failure matches them (KNOWN
below; MKCACHE_FUZZ_STRICT=1 excuses nothing) and marked xfail(strict=False)
where a whole test stands for one (their smallest forms are tests of their
own at the end). Once a bug is fixed: delete its KNOWN entry and its marks.
A failure prints the graph as Python source (Spec.source) to reproduce it.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, note, settings
from hypothesis import strategies as st

import fuzz_strategies as fs
import mkcache
import program_strategies as ps

# ------------------------------------------------------------------ settings

_PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + ((Phase.shrink,) if fs.SHRINK else ())
_SUPPRESS = [getattr(HealthCheck, name) for name in
             ("too_slow", "data_too_large", "filter_too_much", "large_base_example")
             if hasattr(HealthCheck, name)]


def fuzz(ci: int):
    """Settings of a test whose CI budget is `ci` examples: the same
    examples every run (derandomized, no database), no deadline."""
    return settings(max_examples=fs.examples(ci), derandomize=not fs.RANDOM, database=None,
                    deadline=None, print_blob=False, suppress_health_check=_SUPPRESS,
                    phases=_PHASES)


STRICT = os.environ.get("MKCACHE_FUZZ_STRICT", "") not in ("", "0")

# The compile options every graph is compiled with: every combination of
# fuse / inplace / reuse (inplace also makes reshape / transpose views of
# their input's bytes: there is no option of its own for views), every node
# forced to the reference implementation, and implementations chosen by
# timing them.
OPERATORS = ("conv2d", "conv2d_transpose", "activation", "softmax", "binary", "pool",
             "linear", "matmul", "layer_norm", "batch_norm", "lrn", "concat", "transpose",
             "reshape")
OPTIONS = [dict(fuse=f, inplace=i, reuse=r) for f in (True, False) for i in (True, False)
           for r in (True, False)]
OPTIONS += [dict(impl={op: "reference" for op in OPERATORS}, inplace=i) for i in (True, False)]
OPTIONS += [dict(choose="measure")]

# What the module found, printed at its end (and by --budget).
STATS = Counter()
FINDINGS = []
ERRORS = Counter()  # the messages of the errors, known or not


def _options_text(options):
    if "graph closed" in options:
        return "default options, run after the graph was closed"
    if "impl" in options:
        return f"impl=reference, inplace={options['inplace']}"
    if "choose" in options:
        return f"choose={options['choose']}"
    return ", ".join(f"{k}={v}" for k, v in options.items())


# ------------------------------------------------------------- known bugs
# Failures of the library known today, each recognised by what the failing
# graph and options look like; a failure that matches none fails the test.
# Once a bug is fixed, delete its entry (or run with MKCACHE_FUZZ_STRICT=1
# to see everything).


KNOWN = {}


def _flat(args):
    for a in args:
        if isinstance(a, list):
            yield from _flat(a)
        else:
            yield a


def _known(spec, problem):
    if STRICT:
        return None
    for what, matches in KNOWN.items():
        if matches(spec, problem):
            return what
    return None


# ------------------------------------------------------------ comparisons

def _off(got, exact, bound, factor=1.0):
    """None if got is within factor * bound of exact, else what is wrong."""
    got = np.asarray(got)
    if got.shape != exact.shape:
        return f"shape {got.shape}, want {exact.shape}"
    err = np.abs(got.astype(np.float64) - exact)
    bad = ~(err <= factor * bound + 1e-30)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements off, first at {first}: got {got[first]!r}, "
            f"want {exact[first]!r} (bound {factor * bound[first]:.3g})")


def _check_outputs(spec, got, refs, eager, checkable=False):
    """[(output name, what is wrong)] of one run's outputs. checkable:
    skip the outputs that data other than the graph's own leave without a
    usable reference (non-finite, huge or too loosely bounded)."""
    wrong = []
    for name, j in spec.outputs:
        if checkable and not ps.usable(refs[j]):
            continue
        exact, bound = refs[j]
        off = _off(got[name], exact, bound)
        if off is None:
            # Both are within `bound` of the exact value.
            off = _off(got[name], eager[j].astype(np.float64), 2 * bound)
            off = off and f"vs eager: {off}"
        if off:
            wrong.append((name, off))
    return wrong


def _fail(spec, problems, what):
    text = "\n".join(f"  [{_options_text(p['options'])}] {p['kind']}: {p['message']}"
                     for p in problems)
    raise AssertionError(f"{what}\n{text}\nreproducer:\n{spec.source()}")


def _record(spec, problems):
    """Counts the problems; fails on any that no known bug explains."""
    new = []
    for p in problems:
        why = _known(spec, p)
        STATS["errors" if p["kind"] == "error" else "mismatches"] += 1
        if p["kind"] == "error":
            ERRORS[p["message"]] += 1
        if why is None:
            new.append(p)
        else:
            STATS[f"known: {why}"] += 1
    if new:
        STATS["graphs with new problems"] += 1
        FINDINGS.append(spec)
        _fail(spec, new, "programs disagree with the eager operators / the float64 reference")


# ================================================ programs vs eager and numpy

# The known bugs' smallest graphs run first every time, so that what
# excuses them (KNOWN) is exercised even when no random graph hits them.
KNOWN_VIEW_SPEC = ps.Spec(
    inputs=[("x0", (1, 3, 5, 5), "NCHW", False)],
    nodes=[("conv2d", [("v", 0), ("c", 1, (16, 3, 3, 3), "normal")], {}),
           ("flatten", [("v", 1)], {}), ("sigmoid", [("v", 2)], {}),
           ("flatten", [("v", 1)], {})],
    outputs=[("a", 3), ("b", 4)], seed=1)
KNOWN_SIZE_ONE_SPEC = ps.Spec(
    inputs=[("x0", (1, 1, 4), "NCHW", False)],
    nodes=[("add", [("v", 0), ("c", 2, (1, 4), "normal")], {}), ("relu", [("v", 0)], {}),
           ("add", [("v", 2), ("v", 0)], {})],
    outputs=[("a", 1), ("b", 3)], seed=1)


@fuzz(ci=60)
@given(spec=ps.specs())
@example(spec=KNOWN_VIEW_SPEC)
@example(spec=KNOWN_SIZE_ONE_SPEC)
def test_programs_match_eager_and_reference(spec):
    note(spec.source())
    check_programs(spec)


def _other_runs(spec, prog, arrays, first):
    """Runs of `prog` other ways, which must give `first` to the bit: into
    the caller's outputs= arrays, from Tensors labelled as the inputs (the
    handle path instead of the plain buffers), and with the channels-first
    4-D / 5-D inputs in oneDNN's blocked nChw8c / nCdhw8c (converted at the
    program's door)."""
    filled = {n: np.full(v.shape, np.nan, np.float32) for n, v in first.items()}
    yield "into outputs= arrays", prog.run(outputs=filled, **arrays)
    layouts = {name: layout for name, _, layout, _ in spec.inputs}
    tensors = {n: mkcache.Tensor(a, layouts[n]) if a.ndim in (4, 5) else mkcache.Tensor(a)
               for n, a in arrays.items()}
    yield "from Tensors", prog.run(**tensors)
    blocked = {n: mkcache.to_layout(a, {"NCHW": "nChw8c", "NCDHW": "nCdhw8c"}[layouts[n]])
               if layouts[n] in ("NCHW", "NCDHW") and a.ndim in (4, 5) else a
               for n, a in arrays.items()}
    if any(isinstance(v, mkcache.Tensor) for v in blocked.values()):
        yield "from blocked Tensors", prog.run(**blocked)


def check_programs(spec):
    """Compiles `spec` with every option combination and checks each run
    (see _record for what fails)."""
    STATS["graphs"] += 1
    STATS["nodes"] += len(spec.nodes)
    STATS["outputs"] += len(spec.outputs)
    arrays = spec.input_arrays()
    before = {n: a.copy() for n, a in arrays.items()}
    refs = spec.reference(arrays)
    eager = spec.eager(arrays)
    for name, j in spec.outputs:  # the oracles agree (else the test itself is wrong)
        off = _off(eager[j], *refs[j])
        assert off is None, f"eager {name}: {off}\n{spec.source()}"
    graph = spec.graph()
    problems = []
    # A program outlives its graph: this one runs after the graph is closed.
    try:
        late = graph.compile()
    except mkcache.Error:
        late = None  # the loop below reports it
    try:
        for options in OPTIONS:
            STATS["compiles"] += 1
            try:
                with graph.compile(**options) as prog:
                    got = prog.run(**arrays)
                    STATS["runs"] += 1
                    if options == OPTIONS[0]:
                        for how, again in _other_runs(spec, prog, arrays, got):
                            STATS["runs"] += 1
                            for name in got:
                                if not np.array_equal(again[name], got[name]):
                                    problems.append(dict(
                                        options=options, kind="mismatch",
                                        message=f"{name}: a run {how} differs from the first"))
            except mkcache.Error as exc:
                problems.append(dict(options=options, kind="error",
                                     message=f"{type(exc).__name__}: {exc}"))
                continue
            for name, a in arrays.items():
                if not np.array_equal(a, before[name]):
                    problems.append(dict(options=options, kind="mismatch",
                                         message=f"the run modified input {name}"))
                    a[...] = before[name]
            for name, off in _check_outputs(spec, got, refs, eager):
                problems.append(dict(options=options, kind="mismatch",
                                     message=f"{name}: {off}"))
    finally:
        graph.close()
    if late is not None:
        closed = {"graph closed": True}
        with late:
            STATS["runs"] += 1
            try:  # a dynamic shape is planned on its first run
                got = late.run(**arrays)
            except mkcache.Error as exc:
                problems.append(dict(options=closed, kind="error",
                                     message=f"{type(exc).__name__}: {exc}"))
            else:
                for name, off in _check_outputs(spec, got, refs, eager):
                    problems.append(dict(options=closed, kind="mismatch",
                                         message=f"{name}: {off}"))
    _record(spec, problems)


# ============================================================ dynamic batch

@fuzz(ci=25)
@given(spec=ps.specs(max_nodes=6, batch_free=True), other=st.integers(1, 4),
       capacity=st.sampled_from([0, 1]))
def test_programs_follow_a_dynamic_batch(spec, other, capacity):
    """A graph valid for any batch, run by one program at its batch, at
    another, and back (with capacity=1 each change of batch plans anew)."""
    note(spec.source())
    batch = spec.inputs[0][1][0]
    note(f"batches {batch} and {other}, capacity {capacity}")
    STATS["dynamic batch graphs"] += 1
    cases = {}
    for b in {batch, other}:
        arrays = spec.input_arrays(batch=b)
        with np.errstate(all="ignore"):
            cases[b] = (arrays, spec.reference(arrays), spec.eager(arrays))
    problems = []
    with spec.graph() as graph:
        for options in (dict(capacity=capacity), dict(capacity=capacity, inplace=False)):
            try:
                with graph.compile(**options) as prog:
                    for b in (batch, other, batch, other):
                        arrays, refs, eager = cases[b]
                        got = prog.run(**arrays)
                        STATS["dynamic batch runs"] += 1
                        for name, off in _check_outputs(spec, got, refs, eager, checkable=True):
                            problems.append(dict(options=options, kind="mismatch",
                                                 message=f"batch {b}: {name}: {off}"))
            except mkcache.Error as exc:
                problems.append(dict(options=options, kind="error",
                                     message=f"{type(exc).__name__}: {exc}"))
    _record(spec, problems)


# ========================================================= outputs= aliasing

def _aliasing_plans(spec, refs):
    """Ways to alias outputs= arrays: (output name -> input name) for an
    output of an input's shape, and groups of outputs of one shape."""
    by_input = {}
    for name, j in spec.outputs:
        for iname, shape, *_ in spec.inputs:
            if refs[j][0].shape == tuple(shape):
                by_input.setdefault(name, []).append(iname)
    groups = {}
    for name, j in spec.outputs:
        groups.setdefault(refs[j][0].shape, []).append(name)
    return by_input, [g for g in groups.values() if len(g) > 1]


@fuzz(ci=40)
@given(spec=ps.specs(max_nodes=4, min_outputs=2), data=st.data())
def test_aliased_outputs_give_the_right_values_or_refuse(spec, data):
    arrays = spec.input_arrays()
    refs = spec.reference(arrays)
    by_input, groups = _aliasing_plans(spec, refs)
    assume(by_input or groups)
    outputs = {}
    how = data.draw(st.sampled_from(["input"] * bool(by_input) + ["shared"] * bool(groups)))
    if how == "input":
        name = data.draw(st.sampled_from(sorted(by_input)))
        outputs[name] = arrays[data.draw(st.sampled_from(by_input[name]))]
    else:
        names = data.draw(st.sampled_from(groups))
        shared = np.zeros(refs[dict(spec.outputs)[names[0]]][0].shape, np.float32)
        for name in names:
            outputs[name] = shared
    note(spec.source())
    note(f"outputs= {{{', '.join(f'{n}: array {id(a):#x}' for n, a in outputs.items())}}}")
    options = data.draw(st.sampled_from(OPTIONS))
    note(_options_text(options))
    STATS["aliasing graphs"] += 1
    with spec.graph() as graph, graph.compile(**options) as prog:
        try:
            got = prog.run(outputs=outputs, **arrays)
        except mkcache.Error:
            STATS["aliasing refused"] += 1
            return
    # As if into fresh buffers; an array given for several outputs holds
    # one of them (which one is not specified).
    index = dict(spec.outputs)
    wrong = []
    for name, j in spec.outputs:
        sharing = [n for n, a in outputs.items() if outputs.get(name) is a]
        candidates = [refs[index[n]] for n in sharing] or [refs[j]]
        offs = [_off(got[name], *c) for c in candidates]
        if all(offs):
            wrong.append(f"{name}: {offs[0]}")
    if wrong:
        STATS["aliasing wrong"] += 1
        raise AssertionError("outputs= aliasing gave wrong values:\n  " + "\n  ".join(wrong)
                             + f"\nreproducer:\n{spec.source()}")
    STATS["aliasing right"] += 1


# ================================================================== threads
# Each case runs in a child process (a crash is a failure, not the end of
# pytest): python test_program_fuzz.py --race {compile,close} < pickled spec.

def _race(spec, kind: str, seconds: float = 0.3, rounds: int = 20) -> dict:
    """Two threads run a program and check every output while a third
    compiles, runs and closes programs of the same graph ("compile"; with
    "batches" the two run a graph valid for any batch at two batches, the
    program keeping one plan: each run may plan anew), or closes the
    program the two run, once they are under way ("close", `rounds` times
    with a new program each). -> counts."""
    # Each runner its own data (where the graph's values stay checkable
    # with it): runs that shared state would mix them up.
    cases = []
    batch = spec.inputs[0][1][0]
    for k in range(2):
        other = (batch % 3) + 1 if kind == "batches" and k else None
        arrays = spec.input_arrays(spec.seed + 7919 * k, batch=other)
        with np.errstate(all="ignore"):
            refs = spec.reference(arrays)
        if not all(ps.usable(v) for v in refs[len(spec.inputs):]):
            arrays = spec.input_arrays(batch=other)
            refs = spec.reference(arrays)
        cases.append((arrays, refs, spec.eager(arrays)))
    arrays, refs, eager = cases[0]
    graph = spec.graph()
    counts = Counter()
    lock = threading.Lock()
    rng = np.random.default_rng(spec.seed)

    def count(what):
        with lock:
            counts[what] += 1

    def runner(prog, stop, started, case):
        arrays, refs, eager = case
        while not stop.is_set():
            try:
                got = prog.run(**arrays)
            except mkcache.Error:
                count("refused")
                if kind == "close":
                    return
                continue
            started.set()
            count("wrong" if _check_outputs(spec, got, refs, eager, checkable=True)
                  else "right")

    def compiler(stop):
        for options in OPTIONS * 3:
            if stop.is_set():
                return
            with graph.compile(**options) as mine:
                if _check_outputs(spec, mine.run(**arrays), refs, eager):
                    count("wrong (compiling thread)")
                count("compiled")

    def closer(prog, stop, started):
        started.wait(5.0)
        time.sleep(float(rng.uniform(0.0, 0.003)))
        prog.close()  # the runners are between or inside runs
        count("closed")
        time.sleep(0.01)
        stop.set()

    def one_round(third, duration):
        prog = graph.compile(capacity=1 if kind == "batches" else 0)
        stop, started = threading.Event(), threading.Event()
        threads = [threading.Thread(target=runner, args=(prog, stop, started, case))
                   for case in cases]
        threads.append(threading.Thread(target=third, args=(
            (prog, stop, started) if third is closer else (stop,))))
        for t in threads:
            t.start()
        if duration:
            time.sleep(duration)
            stop.set()
        for t in threads:
            t.join()
        prog.close()

    if kind == "close":
        for _ in range(rounds):
            one_round(closer, 0)
    else:
        one_round(compiler, seconds)
    graph.close()
    return dict(counts)


def _race_in_child(spec, kind: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--race", kind],
                          input=pickle.dumps(spec), capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [here] + [p for p in sys.path if p])})
    if proc.returncode:
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exited with status {proc.returncode}")
        STATS[f"crashes ({kind})"] += 1
        raise AssertionError(f"the child racing '{kind}' {how}; stderr ends with:\n"
                             f"{proc.stderr.decode(errors='replace')[-1500:]}\n"
                             f"graph:\n{spec.source()}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _check_race(spec, kind):
    STATS[f"races ({kind})"] += 1
    counts = _race_in_child(spec, kind)
    note(f"{counts}")
    wrong = {k: v for k, v in counts.items() if k.startswith("wrong")}
    assert not wrong, f"wrong outputs while racing '{kind}': {counts}\n{spec.source()}"
    assert counts.get("right", 0) > 0 or kind == "close", counts


@fuzz(ci=3)
@given(spec=ps.specs(max_nodes=5))
def test_threads_run_while_another_compiles(spec):
    _check_race(spec, "compile")


@fuzz(ci=3)
@given(spec=ps.specs(max_nodes=5, batch_free=True))
def test_threads_run_two_batches_while_another_compiles(spec):
    _check_race(spec, "batches")


@fuzz(ci=3)
@given(spec=ps.specs(max_nodes=5))
def test_threads_run_while_another_closes(spec):
    _check_race(spec, "close")


# ====================================================== found bugs, minimised
# The smallest forms of the bugs this fuzzer and a probe found, kept as
# regression tests.

RNG = np.random.default_rng(5)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_known_view_output_overwritten_in_place():
    x, w = _rand(1, 3, 5, 5), _rand(16, 3, 3, 3)
    with mkcache.Graph() as g:
        y = g.conv2d(g.input("x", x.shape), w)
        g.output(g.sigmoid(g.flatten(y)), "a")
        g.output(g.flatten(y), "b")
        with g.compile() as prog:
            got = prog.run(x=x)
    want = np.asarray(mkcache.flatten(mkcache.conv2d(x, w)))
    np.testing.assert_allclose(got["b"], want, rtol=1e-5, atol=1e-5)


def test_known_transposed_view_output_overwritten_in_place():
    """The same family as the one above without a convolution or a blocked
    layout: the fuzzer's smallest form of it."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    with mkcache.Graph() as g:
        t = g.transpose(g.input("x", x.shape), (1, 0))
        g.output(g.reshape(t, (6,)), "b")
        g.output(g.relu(t), "a")
        with g.compile() as prog:
            got = prog.run(x=x)
    np.testing.assert_array_equal(got["b"], x.T.ravel())
    np.testing.assert_array_equal(got["a"], np.maximum(x.T, 0))


def test_known_output_aliasing_an_input():
    x = _rand(2, 3)
    want = np.exp(x.astype(np.float64))
    with mkcache.Graph() as g:
        v = g.input("x", x.shape)
        g.output(g.relu(v), "y")
        g.output(g.exp(v), "z")
        with g.compile() as prog:
            try:
                got = prog.run(outputs={"y": x}, x=x)
            except mkcache.Error:
                return
    np.testing.assert_allclose(got["z"], want, rtol=1e-5)


def test_known_size_one_dims_compile():
    """Each output alone compiles; the two together did not."""
    x, c = _rand(1, 1, 4), _rand(1, 4)
    with mkcache.Graph() as g:
        v = g.input("x", x.shape)
        g.output(g.add(v, c), "a")
        g.output(g.add(g.relu(v), v), "b")
        with g.compile() as prog:
            got = prog.run(x=x)
    np.testing.assert_allclose(got["a"], x + c, rtol=1e-6)
    np.testing.assert_allclose(got["b"], np.maximum(x, 0) + x, rtol=1e-6)


def test_known_broadcast_constants_of_two_ranks_compile():
    """No value has a size-1 dim here: only the second constant."""
    x, c4, c14 = _rand(2, 4), _rand(4), _rand(1, 4)
    with mkcache.Graph() as g:
        g.output(g.add(g.add(g.input("x", x.shape), c4), c14), "y")
        with g.compile() as prog:
            got = prog.run(x=x)["y"]
    np.testing.assert_allclose(got, x + c4 + c14, rtol=1e-6)


def test_found_softmax_after_a_channels_last_tensor_of_the_same_dims():
    """Eager, not a program: the differential test met it as a wrong eager
    oracle after another graph. A grouped conv2d_transpose's NHWC output
    is stored plain channels-first ("abcd"), labelled NHWC: its axis 1 is
    H, the array's axis 1 is C."""
    x = _rand(1, 2, 3, 4)
    w = _rand(4, 3, 1, 1)
    y = mkcache.conv2d_transpose(mkcache.Tensor(x, "NHWC"), w, groups=2, data_format="NHWC")
    mkcache.softmax(y, axis=1)
    z = _rand(1, 6, 2, 3)
    want = np.exp(z - z.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(mkcache.softmax(z, axis=1)), want, rtol=1e-5,
                               atol=1e-6)


# ================================================================== figures

@pytest.fixture(scope="module", autouse=True)
def _figures():
    yield
    print("\n" + summary())


def summary() -> str:
    options = ", ".join(f"[{_options_text(o)}]" for o in OPTIONS)
    lines = [f"program fuzz ({fs.PROFILE}, scale {fs.SCALE}, ISA "
             f"{os.environ.get('ONEDNN_MAX_CPU_ISA', 'default')}): "
             f"{len(OPTIONS)} option combinations: {options}"]
    lines += [f"  {k}: {v}" for k, v in sorted(STATS.items())]
    lines += [f"  error {v}x: {k}" for k, v in ERRORS.most_common()]
    lines += [f"  new finding:\n{spec.source()}" for spec in FINDINGS]
    return "\n".join(lines)


def _main(argv):
    if argv[:1] == ["--race"]:
        spec = pickle.loads(sys.stdin.buffer.read())
        print(json.dumps(_race(spec, argv[1])))
        return 0
    if argv[:1] == ["--budget"]:
        fs.FIXED = int(argv[1])  # read by fs.examples() when the tests are decorated
        return pytest.main([os.path.abspath(__file__), "-s", "-q", "-p", "no:cacheprovider"]
                           + argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
