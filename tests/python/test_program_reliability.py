"""Programs stay right and alive under what a hostile or careless caller
does: in-place steps never write bytes a later step reads, outputs that
share memory with inputs, size-1 dims, closing a program while other
threads run it, fork() while threads run programs, impossible static
shapes, and plans dropped and compiled again. Cases that once crashed or
hung run in a child interpreter, so a regression fails one test instead of
ending the run."""
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import mkcache
import reference as ref
from test_fork import _wait  # a child's exit code, or None if it hung (then killed)


def run_child(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)


def sigmoid(x):
    return 1 / (1 + np.exp(-x.astype(np.float64)))


# ------------------------------------------- in place over a shared copy

@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_in_place_never_writes_over_a_copy_a_later_reader_shares(rng, inplace, data_format):
    """A blocked conv result flattened twice: both flattens read one plain
    copy; the sigmoid of the first must not be written over it."""
    x = rng.standard_normal((2, 3, 7, 5)).astype(np.float32)
    w = rng.standard_normal((17, 3, 3, 3)).astype(np.float32)
    xin = x if data_format == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    g = mkcache.Graph()
    xi = g.input("x", xin.shape, layout=data_format)
    y = g.conv2d(xi, w, padding=1, data_format=data_format)
    g.output(g.sigmoid(g.flatten(y)), "a")
    g.output(g.flatten(y), "b")
    g.output(g.relu(g.flatten(y)), "c")
    with g.compile(inplace=inplace) as prog:
        out = prog.run(x=xin)
    y64, mag = ref.conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    if data_format == "NHWC":
        y64 = y64.transpose(0, 2, 3, 1)
    flat = y64.reshape(2, -1)
    tol = 1e-5 * mag.max()
    np.testing.assert_allclose(out["b"], flat, atol=tol, rtol=1e-5)
    np.testing.assert_allclose(out["a"], sigmoid(flat), atol=1e-6)
    np.testing.assert_allclose(out["c"], np.maximum(flat, 0), atol=tol, rtol=1e-5)


# --------------------------------------------- outputs sharing memory

def _two_readers_of_x():
    g = mkcache.Graph()
    x = g.input("x", (3, 37))
    g.output(g.relu(x), "r")         # written first ...
    g.output(g.sigmoid(x), "s")      # ... while x is still read here
    g.output(g.linear(x, np.eye(37, dtype=np.float32)[:5]), "l")
    return g.compile()


def test_an_output_that_is_an_input_is_computed_apart(rng):
    x = rng.standard_normal((3, 37)).astype(np.float32)
    want_r, want_s = np.maximum(x, 0), sigmoid(x)
    with _two_readers_of_x() as prog:
        for how in ("arrays", "tensors"):
            buf = x.copy()
            inp = buf if how == "arrays" else mkcache.Tensor(buf)
            out = prog.run(outputs={"r": buf}, x=inp)
            assert out["r"] is buf
            np.testing.assert_array_equal(buf, want_r if how == "arrays" else out["r"])
            np.testing.assert_allclose(out["s"], want_s, atol=1e-6)
            np.testing.assert_allclose(out["l"], x[:, :5], atol=1e-6)


def test_an_output_partly_overlapping_an_input_is_computed_apart(rng):
    n = 3 * 37
    x = rng.standard_normal(n).astype(np.float32)
    with _two_readers_of_x() as prog:
        buf = np.zeros(2 * n, np.float32)
        buf[:n] = x
        xin = buf[:n].reshape(3, 37)
        r = buf[n // 2:n // 2 + n].reshape(3, 37)  # starts in the middle of x
        out = prog.run(outputs={"r": r}, x=xin)
        np.testing.assert_array_equal(out["r"], np.maximum(x, 0).reshape(3, 37))
        np.testing.assert_allclose(out["s"], sigmoid(x).reshape(3, 37), atol=1e-6)


def test_two_outputs_in_one_array_are_refused(rng):
    x = rng.standard_normal((3, 37)).astype(np.float32)
    with _two_readers_of_x() as prog:
        buf = np.zeros((3, 37), np.float32)
        with pytest.raises(mkcache.InvalidArgumentError, match="share memory"):
            prog.run(outputs={"r": buf, "s": buf}, x=x)
        with pytest.raises(mkcache.InvalidArgumentError, match="share memory"):
            prog.run(outputs={"r": buf, "s": buf}, x=mkcache.Tensor(x))
        # Nothing was lost: the program still runs.
        np.testing.assert_array_equal(prog.run(x=x)["r"], np.maximum(x, 0))


# ----------------------------------------------------------- size-1 dims

@pytest.mark.parametrize("shape", [(1, 1, 4), (1, 4, 1), (4, 1, 1), (1, 1, 1), (2, 1, 5)])
def test_size_one_dims_compile_and_compute(rng, shape):
    """Broadcast operands of different ranks with size-1 dims ([1, 4] and
    [1, 1, 4]) view alike but are read differently: one program holds both."""
    x = rng.standard_normal(shape).astype(np.float32)
    c = rng.standard_normal(shape[-2:]).astype(np.float32)
    g = mkcache.Graph()
    xi = g.input("x", shape)
    g.output(g.add(xi, c), "a")
    g.output(g.add(g.relu(xi), xi), "b")
    g.output(g.mul(c[..., :1], xi), "m")
    with g.compile() as prog:
        out = prog.run(x=x)
    np.testing.assert_allclose(out["a"], x + c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["b"], np.maximum(x, 0) + x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["m"], c[..., :1] * x, rtol=1e-6, atol=1e-6)


# ------------------------------------------------- impossible static dims

def test_static_dims_whose_element_count_overflows_are_refused_at_the_graph():
    g = mkcache.Graph()
    with pytest.raises(mkcache.InvalidArgumentError, match="too large"):
        g.input("x", (2**32, 2**32, 16))
    with pytest.raises(mkcache.InvalidArgumentError, match="too large"):
        g.input("y", (None, 2**31, 2**31, 4))
    x = g.input("x", (None, 4))  # the graph is untouched by the refusals
    g.output(g.relu(x), "y")
    with g.compile() as prog:
        np.testing.assert_array_equal(prog.run(x=-np.ones((2, 4), np.float32))["y"], 0)


# ------------------------------------------ close while other threads run

CLOSE_WHILE_RUNNING = """
import threading, time
import numpy as np, mkcache
rng = np.random.default_rng(0)
w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
def build(capacity):
    g = mkcache.Graph()
    xi = g.input("x", (1, 3, None, None))
    g.output(g.relu(g.conv2d(xi, w, padding=1)), "y")
    return g.compile(capacity=capacity)
want = build(0).run(x=x)["y"]
bad = []
for round_ in range(ROUNDS):
    prog = build(round_ % 2)
    prog.run(x=x)
    stop = threading.Event()
    def worker(k):
        while not stop.is_set():
            try:
                xs = x if k % 2 == 0 else x[:, :, :11, :].copy()
                y = prog.run(x=xs)["y"]
                if k % 2 == 0 and not np.allclose(y, want, atol=1e-4):
                    bad.append("wrong")
                prog.plan(); prog.steps()
            except mkcache.Error:
                pass  # refused cleanly: closed under it
            except Exception as e:
                bad.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    time.sleep(0.005 * (round_ % 4))
    prog.close()
    stop.set()
    for t in threads: t.join()
assert not bad, bad[:5]
print("OK")
"""


def test_close_while_other_threads_run_the_program():
    proc = run_child(CLOSE_WHILE_RUNNING.replace("ROUNDS", "30"))
    assert proc.returncode == 0 and "OK" in proc.stdout, \
        f"child exited {proc.returncode}: {proc.stderr[-2000:]}"


# -------------------------------------------- fork while programs run

FORKS = int(os.environ.get("MKCACHE_TEST_FORKS", "60"))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (Python >= 3.12)
def test_fork_while_threads_run_compile_and_query_programs(rng):
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)

    def build(capacity):
        g = mkcache.Graph()
        xi = g.input("x", (1, 3, None, None))
        g.output(g.sigmoid(g.conv2d(xi, w, padding=1)), "y")
        return g.compile(capacity=capacity)

    static, dynamic = build(0), build(1)
    want = static.run(x=x)["y"]
    stop = threading.Event()

    def busy(k):
        sizes = [x[:, :, :h, :h].copy() for h in range(5, 9)]
        i = 0
        while not stop.is_set():
            static.run(x=x)
            dynamic.run(x=sizes[i % len(sizes)])  # compiles: capacity 1
            if k == 0:
                static.plan(), dynamic.steps(), static.profile(x=x)
            i += 1

    threads = [threading.Thread(target=busy, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    hung, failed = [], []
    try:
        for k in range(FORKS):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    ok = (np.allclose(static.run(x=x)["y"], want, atol=1e-4)
                          and np.allclose(dynamic.run(x=x)["y"], want, atol=1e-4))
                    dynamic.close()
                    code = 0 if ok else 2
                finally:
                    os._exit(code)
            code = _wait(pid, 60)
            if code is None:
                hung.append(k)
            elif code != 0:
                failed.append((k, code))
    finally:
        stop.set()
        for t in threads:
            t.join()
    static.close()
    dynamic.close()
    assert not hung and not failed, f"{FORKS} forks: hung {hung[:10]}, failed {failed[:10]}"


# ------------------------------------------- plans dropped and compiled again

# Each measurement runs in a fresh interpreter: the suite's earlier tests
# leave the heap fragmented in ways that move this process's resident size
# by megabytes on their own, which a per-cycle leak must not hide behind.
RSS_PRELUDE = """
import os
import numpy as np, mkcache
def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
rng = np.random.default_rng(0)
"""


def rss_growth_in_child(code: str) -> int:
    """Runs `code` (after RSS_PRELUDE; it prints the growth in bytes last)
    in a new interpreter and returns the growth."""
    done = run_child(RSS_PRELUDE + textwrap.dedent(code))
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine holds freed memory on purpose")
def test_rss_flat_while_a_capacity_one_program_alternates_two_shapes():
    """Each run drops the other shape's plan and compiles its own again,
    with fused post-ops on every convolution."""
    growth = rss_growth_in_child("""
        w1 = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
        w2 = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
        g = mkcache.Graph()
        x = g.input("x", (1, 8, None, None))
        y = g.conv2d(x, w1, padding=1, activation="relu")
        y = g.relu(g.add(g.conv2d(y, w2, padding=1), x))  # fused: a sum, then relu
        g.output(y, "y")
        xs = [rng.standard_normal((1, 8, h, 12)).astype(np.float32) for h in (10, 11)]
        with g.compile(capacity=1) as prog:
            for i in range(60):  # warm-up: allocator pools, JIT paths
                prog.run(x=xs[i % 2])
            before = rss_bytes()
            for i in range(400):
                prog.run(x=xs[i % 2])
            growth = rss_bytes() - before
            assert prog.memory["plans"] == 1
        print(growth)
    """)
    print(f"RSS growth over 400 recompiles: {growth / 1024:.0f} KiB")
    assert growth <= 2 * 1024 * 1024, f"RSS grew {growth / 1024:.0f} KiB over 400 recompiles"


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine holds freed memory on purpose")
def test_rss_flat_over_compile_close_churn():
    cycles = int(os.environ.get("MKCACHE_TEST_CHURN", "3000"))
    growth = rss_growth_in_child(f"""
        w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        g = mkcache.Graph()
        xi = g.input("x", x.shape)
        g.output(g.relu(g.conv2d(xi, w, padding=1, activation="relu")), "y")

        def churn(n):
            for _ in range(n):
                with g.compile() as prog:
                    prog.run(x=x)

        churn(300)
        before = rss_bytes()
        churn({cycles})
        print(rss_bytes() - before)
    """)
    print(f"RSS growth over {cycles} compile/run/close cycles: {growth / 1024:.0f} KiB")
    assert growth <= 2 * 1024 * 1024, f"RSS grew {growth / 1024:.0f} KiB"


# ------------------------------------------------- arguments of programs

def _tiny_graph():
    g = mkcache.Graph()
    g.output(g.relu(g.input("x", (2, 3))), "y")
    return g


def test_compile_choices_must_be_a_path_or_bytes(tmp_path):
    g = _tiny_graph()
    r, w = os.pipe()
    try:
        with pytest.raises(mkcache.InvalidArgumentError, match="choices must be"):
            g.compile(choices=r)  # never read as a file descriptor (nor closed)
        os.fstat(r)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(mkcache.InvalidArgumentError, match="cannot read"):
        g.compile(choices=tmp_path / "missing.txt")


@pytest.mark.parametrize("options", [dict(impl={"activation": "reference\0onednn"}),
                                     dict(choices=b"key\tonednn\t\0more")])
def test_text_after_a_nul_is_refused_not_dropped(options):
    with pytest.raises(mkcache.InvalidArgumentError, match="NUL"):
        _tiny_graph().compile(**options)


def test_a_value_index_past_int32_is_refused_not_wrapped():
    g = _tiny_graph()
    x = g.input("x2", (2, 3))
    wrapped = mkcache.graph.Value(g, x.index + 2**32)
    with pytest.raises(mkcache.InvalidArgumentError):
        g.relu(wrapped)
    with pytest.raises(mkcache.InvalidArgumentError):
        g.output(wrapped, "z")


def test_a_conv_node_with_sum_set_is_refused_at_the_node():
    import ctypes
    from mkcache import _capi
    g = mkcache.Graph()
    x = g.input("x", (1, 2, 4, 4))
    w = g.constant(np.ones((3, 2, 1, 1), np.float32))
    p = _capi.ConvParams()
    _capi.lib.mkc_conv_params_init(ctypes.byref(p))
    p.sum = 1
    with pytest.raises(mkcache.InvalidArgumentError, match="sum must be 0"):
        g._node("conv2d", p, [x.index, w.index])


def test_plans_dropped_by_capacity_count_as_evictions(rng):
    g = mkcache.Graph()
    x = g.input("x", (None, 5))
    g.output(g.linear(x, rng.standard_normal((3, 5)).astype(np.float32)), "y")
    before = mkcache.cache.stats()
    with g.compile(capacity=1) as prog:
        for n in (1, 2, 3, 1):
            prog.run(x=np.ones((n, 5), np.float32))
        after = mkcache.cache.stats()
    assert after["evictions"] - before["evictions"] == 3
    assert after["evicted_entries"] - before["evicted_entries"] >= 3
