"""A linear layer's rows in two parts, whose primitives the plans of other
input shapes share (`onednn_matmul_shared`): what a program's plans take by
priority once it has compiled its `exact_plans`, and what impl= asks for.
Each against float64 numpy on odd row counts (one part, two parts, a whole
multiple of 128), with a bias, an activation and a fused residual; the rule
that picks it; measuring; threads."""
import ctypes
import threading

import numpy as np
import pytest

import mkcache
import reference as ref
from bf16_support import needs_bf16

ACTIVATIONS = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0)}
ISA = mkcache.build_info()["isa"]


def _matmul_on_brgemm() -> bool:
    """Whether oneDNN's matmul runs a float32 linear on its brgemm kernels
    here (AVX-512), whose code is made per row count: where a linear goes
    in row parts. Its gemm kernels (AVX2) serve any rows as one part."""
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", (200, 16)), np.ones((8, 16), np.float32)), "y")
        with g.compile(impl={"linear": "onednn_matmul"}) as prog:
            prog.run(x=np.ones((200, 16), np.float32))
            return ":brg" in next(s["impl"] for s in prog.steps() if s["kind"] == "node")


BRGEMM = _matmul_on_brgemm()
needs_brgemm = pytest.mark.skipif(
    not BRGEMM, reason=f"oneDNN's matmul runs gemm kernels on {ISA}: a linear is one part")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def linear_steps(prog):
    return [s for s in prog.steps() if s["kind"] == "node" and "onednn_matmul" in s["impl"]]


def exact_linear(x, w, b=None, activation=None, residual=None):
    y = x.astype(np.float64) @ w.astype(np.float64).T
    if b is not None:
        y += b
    y = ACTIVATIONS[activation](y)
    if residual is not None:
        y += residual
    return y


def check(got, x, w, b=None):
    magnitude = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T + 1
    ref.assert_close(got, exact_linear(x, w, b), magnitude, x.shape[-1])


@pytest.mark.parametrize("shape, out, bias, activation, residual, parts", [
    ((129, 37), 29, True, None, False, "128+1"),
    ((3, 67, 40), 19, False, "relu", False, "128+73"),  # batch 3: 201 rows
    ((389, 24), 48, True, "relu", True, "384+5"),
    ((2, 130, 17), 33, True, None, True, "256+4"),
    ((256, 20), 16, True, None, False, ""),  # a whole multiple: one part
    ((97, 31), 23, False, None, True, ""),  # fewer than 128 rows: one part
])
def test_linear_in_row_parts_against_numpy(shape, out, bias, activation, residual, parts):
    x = rand(*shape, seed=1)
    w = (rand(out, shape[-1], seed=2) / np.sqrt(shape[-1])).astype(np.float32)
    b = rand(out, seed=3) if bias else None
    r = rand(*shape[:-1], out, seed=4)
    with mkcache.Graph() as g:
        y = g.linear(g.input("x", shape), w, b, activation=activation, name="fc")
        if residual:  # fused into the layer as its sum, in each part's rows
            y = g.add(y, g.input("r", r.shape))
        g.output(y, "y")
        feeds = {"x": x, **({"r": r} if residual else {})}
        with g.compile(impl={"linear": "onednn_matmul_shared"}) as prog:
            got = prog.run(**feeds)["y"]
            again = prog.run(**feeds)["y"]  # the parts bound once, run again
            steps = linear_steps(prog)
    exact = exact_linear(x, w, b, activation, r if residual else None)
    magnitude = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T + 1 + np.abs(r)
    ref.assert_close(got, exact, magnitude, shape[-1])
    np.testing.assert_array_equal(got, again)
    assert len(steps) == 1 and steps[0]["impl"].startswith("onednn_matmul_shared:"), steps
    assert steps[0]["impl"].endswith(f" rows {parts}") == bool(parts and BRGEMM), steps
    assert steps[0]["choice"] == "override (option)", steps


def in_threads(work, args_per_thread) -> list:
    """Runs work(*args) in one thread per args at once; -> what they raised."""
    errors = []

    def worker(*args):
        try:
            work(*args)
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=worker, args=args) for args in args_per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def dynamic_linear(g, width=37, out=29):
    w = (rand(out, width, seed=5) / np.sqrt(width)).astype(np.float32)
    b = rand(out, seed=6)
    g.output(g.linear(g.input("x", (None, width)), w, b, name="fc"), "y")
    return w, b


def test_plans_past_the_exact_ones_share_row_parts(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        with g.compile(exact_plans=2) as prog:
            seen = []
            for rows in (10, 300, 200, 300, 131):
                x = rand(rows, 37, seed=rows)
                check(prog.run(x=x)["y"], x, w, b)
                step = linear_steps(prog)[0]
                seen.append((rows, step["impl"].split(":")[0], step["choice"]))
    assert seen == [
        (10, "onednn_matmul", "priority"),
        (300, "onednn_matmul", "priority"),  # the second plan: still exact
        (200, "onednn_matmul_shared", "priority, past the program's exact plans"),
        (300, "onednn_matmul", "priority"),  # its plan is kept as it was made
        (131, "onednn_matmul_shared", "priority, past the program's exact plans"),
    ], seen


@pytest.mark.parametrize("exact_plans, shared", [(0, True), (-1, False), (8, False)])
def test_exact_plans_bounds(monkeypatch, exact_plans, shared):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x = rand(200, 37, seed=7)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        with g.compile(exact_plans=exact_plans) as prog:
            check(prog.run(x=x)["y"], x, w, b)
            impl = linear_steps(prog)[0]["impl"]
    assert impl.startswith("onednn_matmul_shared:" if shared else "onednn_matmul:"), impl
    assert impl.endswith(" rows 128+72") == (shared and BRGEMM), impl


def test_an_override_keeps_its_implementation_past_the_exact_plans(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x = rand(200, 37, seed=8)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        for impl in ("onednn_matmul", "onednn"):
            with g.compile(exact_plans=0, impl={"linear": impl}) as prog:
                check(prog.run(x=x)["y"], x, w, b)
                step = [s for s in prog.steps() if s["kind"] == "node"][0]
            assert step["impl"].split(":")[0] == impl and "rows" not in step["impl"], step


def test_exact_plans_is_checked():
    with mkcache.Graph() as g:
        dynamic_linear(g)
        for bad in (1.5, "8", True):
            with pytest.raises(mkcache.InvalidArgumentError, match="exact_plans must be"):
                g.compile(exact_plans=bad)


def test_measuring_times_the_shared_parts_only_where_they_are_the_priority(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x = rand(200, 37, seed=9)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        timed_always = {"onednn", "onednn_matmul", "onednn_conv1x1", "reference"}
        for exact_plans, want in ((-1, timed_always),
                                  (0, timed_always | {"onednn_matmul_shared"})):
            with g.compile(choose="measure", exact_plans=exact_plans) as prog:
                check(prog.run(x=x)["y"], x, w, b)
                step = linear_steps(prog) or [s for s in prog.steps() if s["kind"] == "node"]
                choice = step[0]["choice"]
            timed = {part.split()[0] for part in choice.split(": ", 1)[1].split(", ")}
            assert timed == want, choice


def test_plans_in_row_parts_from_two_threads(monkeypatch):
    """Plans of other shapes share the parts' primitives, each run with the
    scratchpad of its own thread: two threads running shapes whose parts
    coincide (128+72 and 256+72; 128 and 128+72)."""
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g, width=64, out=48)
        with g.compile(exact_plans=0) as prog:
            def work(rows_list):
                for _ in range(5):
                    for rows in rows_list:
                        x = rand(rows, 64, seed=rows)
                        check(prog.run(x=x)["y"], x, w, b)

            errors = in_threads(work, [((200, 328, 128),), ((328, 200, 72),)])
    assert not errors, errors


@needs_bf16
def test_linear_in_row_parts_in_bfloat16():
    x, w, b = rand(150, 40, seed=7), rand(33, 40, seed=8) / np.float32(6), rand(33, seed=9)
    with mkcache.Graph() as g:
        g.output(g.linear(g.input("x", x.shape), w, b, name="fc"), "y")
        with g.compile(precision="bf16", impl={"linear": "onednn_matmul"}) as whole, \
                g.compile(precision="bf16", impl={"linear": "onednn_matmul_shared"}) as parts:
            want, got = whole.run(x=x)["y"], parts.run(x=x)["y"]
            # In parts where the bfloat16 matmul is brgemm (native bfloat16);
            # its gemm kernels (bfloat16 emulated) take the rows as one part.
            brgemm = any(":brg" in s["impl"] for s in whole.steps())
            assert any(s["impl"].endswith(" rows 128+22") for s in parts.steps()) == brgemm
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + b
    scale = np.abs(x) @ np.abs(w.T) + 1
    assert np.all(np.abs(got - exact) <= 2.0 ** -6 * scale)
    assert np.all(np.abs(got - want) <= 2.0 ** -6 * scale)


EXACT_AFTER_RUNS = 32  # a plan in row parts run this often is compiled again exact


@needs_brgemm
def test_a_plan_in_row_parts_run_often_is_compiled_again_exact(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x, other = rand(200, 37, seed=10), rand(150, 37, seed=11)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        with g.compile(exact_plans=0) as prog:
            impls = []
            for _ in range(EXACT_AFTER_RUNS):
                impls.append(linear_steps(prog)[0]["impl"] if impls else None)
                check(prog.run(x=x)["y"], x, w, b)
            check(prog.run(x=other)["y"], other, w, b)  # another plan in between
            check(prog.run(x=x)["y"], x, w, b)
            after = linear_steps(prog)[0]["impl"]
            assert prog.memory["plans"] == 2
    assert all(i.endswith(" rows 128+72") and i.startswith("onednn_matmul_shared:")
               for i in impls[1:]), impls
    assert after.startswith("onednn_matmul:") and "rows" not in after, after


@needs_brgemm
def test_compiled_again_exact_while_two_threads_run_it(monkeypatch):
    monkeypatch.delenv("MKCACHE_IMPL", raising=False)
    x = rand(300, 37, seed=12)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        with g.compile(exact_plans=0) as prog:
            def work():
                for _ in range(EXACT_AFTER_RUNS):
                    check(prog.run(x=x)["y"], x, w, b)

            errors = in_threads(work, [(), ()])
            assert not errors, errors
            assert linear_steps(prog)[0]["impl"].startswith("onednn_matmul:")


def test_older_program_options_get_the_default_exact_plans():
    """A caller built against options ending before exact_plans (an older
    header) gets the default: its first plans are exact whatever the bytes
    past its size hold."""
    from mkcache import _capi
    from mkcache.graph import Program
    x = rand(200, 37, seed=13)
    with mkcache.Graph() as g:
        w, b = dynamic_linear(g)
        for cut, want in ((False, "onednn_matmul_shared:"), (True, "onednn_matmul:")):
            o = _capi.ProgramOptions()
            _capi.lib.mkc_program_options_init(ctypes.byref(o))
            o.exact_plans = 0
            if cut:
                o.struct_size = _capi.ProgramOptions.exact_plans.offset
            handle = ctypes.c_void_p()
            _capi.lib.mkc_program_compile(g._handle, ctypes.byref(o), ctypes.byref(handle))
            with Program(handle, dict(g._input_layouts), dict(g._input_ranks),
                         dict(g._input_dtypes)) as prog:
                check(prog.run(x=x)["y"], x, w, b)
                impl = linear_steps(prog)[0]["impl"]
            assert impl.startswith(want), impl
