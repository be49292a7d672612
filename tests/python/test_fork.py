"""fork() while other threads run operators.

A child process gets a copy of every lock as it was at the fork, but only
the thread that called fork(). A lock another thread held at that moment
stays locked in the child for good, and the child's first call that needs
it hangs. These tests fork again and again while eight threads run
operators (creating primitives, hitting and clearing the cache, evicting in
clearing mode); every child runs operators of its own, checks them against
numpy and exits with a code. A child that does not finish in time is
killed and counted as hung.

MKCACHE_FORK_COUNT sets how many children the fork test makes (100 by
default; 1000 for a longer soak); MKCACHE_FORK_TIMEOUT the seconds a child
may take.
"""
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

import mkcache
from reference import EPS_F32, conv2d_nchw, layer_norm, relu, softmax


def _sanitizer_loaded():
    try:
        with open("/proc/self/maps") as maps:
            text = maps.read()
    except OSError:
        return False
    return "libasan" in text or "libtsan" in text


# The sanitizer runtimes are not fork-safe themselves: AddressSanitizer's
# allocator (GCC 12's) keeps the locks other threads held at the fork, so a
# child's malloc can hang in it whatever this library does.
pytestmark = pytest.mark.skipif(_sanitizer_loaded(), reason="a sanitizer runtime is loaded")

FORK_COUNT = int(os.environ.get("MKCACHE_FORK_COUNT", "100"))
CHILD_TIMEOUT = float(os.environ.get("MKCACHE_FORK_TIMEOUT", "20"))

# Exit codes of a child.
OK, WRONG, RAISED = 0, 1, 2


def _conv_case(rng, n, c, h, w, o):
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
    exact, mag = conv2d_nchw(x, wt, pads=(1, 1, 1, 1))
    bound = 4.0 * (c * 9 + 1) * EPS_F32 * mag + 1e-30
    return x, wt, relu(exact), bound


class _Cases:
    """Inputs and numpy results, made once in the parent (a child only
    compares: it has no time to spend on references)."""

    def __init__(self, rng):
        # The busy threads cycle through these shapes (after a clear, every
        # one is created again).
        self.convs = [_conv_case(rng, *s) for s in
                      [(1, 3, 9, 9, 8), (2, 5, 7, 11, 6), (1, 16, 8, 8, 16), (1, 4, 12, 6, 4)]]
        self.vectors = [rng.standard_normal((2, n), dtype=np.float32) for n in (17, 64, 200, 768)]
        # Constant weights shared by the busy threads and the children: the
        # library keeps converted copies of them behind the tensor's lock.
        wt = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
        self.shared_x = rng.standard_normal((1, 16, 10, 10), dtype=np.float32)
        exact, mag = conv2d_nchw(self.shared_x, wt, pads=(1, 1, 1, 1))
        self.shared_w = mkcache.Tensor(wt, constant=True)
        self.shared_want = exact
        self.shared_bound = 4.0 * (16 * 9 + 1) * EPS_F32 * mag + 1e-30
        # Shapes only children use: a child creates these primitives itself,
        # through oneDNN's primitive cache, on its first parallel region.
        self.child_convs = [_conv_case(rng, 1, 6, 5 + k % 7, 9, 3 + k % 5) for k in range(12)]
        self.child_vector = rng.standard_normal((3, 37), dtype=np.float32)


def _close(got, want, atol):
    got = np.asarray(got, dtype=np.float64)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= atol))


def _check_ops(cases, k):
    """Runs conv2d (+relu), add, layer_norm and softmax; True if all match."""
    x, wt, want, bound = cases.child_convs[k % len(cases.child_convs)]
    ok = _close(mkcache.conv2d(x, wt, padding=1, activation="relu"), want, bound)
    y = mkcache.conv2d(cases.shared_x, cases.shared_w, padding=1)
    ok = ok and _close(y, cases.shared_want, cases.shared_bound)
    v = cases.child_vector
    ok = ok and _close(mkcache.add(v, v[::-1].copy()), v.astype(np.float64) + v[::-1], 1e-5)
    ok = ok and _close(mkcache.layer_norm(v), layer_norm(v, -1), 1e-4)
    ok = ok and _close(mkcache.softmax(v), softmax(v, -1), 1e-5)
    big = cases.vectors[k % len(cases.vectors)]
    ok = ok and _close(mkcache.relu(big), relu(big), 0.0)
    return ok


class _Busy:
    """Eight threads running operators until stopped: conv2d (fused relu,
    shared constant weights), relu, add, layer_norm, softmax; one of them
    clears the whole cache now and then, two run in clearing mode at
    capacity 1 over alternating input shapes (every call there evicts a
    group, which also flushes oneDNN's primitive cache)."""

    def __init__(self, cases, nthreads=8):
        self.cases = cases
        self.stop = threading.Event()
        self.errors = []
        self.calls = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(nthreads)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        # Let every thread get going before the first fork.
        deadline = time.monotonic() + 30
        while self.calls < 4 * len(self.threads) and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads), "a busy thread did not stop"
        assert self.errors == [], self.errors[:5]

    def _run(self, index):
        rng = np.random.default_rng(index)
        cases = self.cases
        try:
            if index in (1, 2):
                with mkcache.cache.session(50 + index), mkcache.cache.clearing_mode(1):
                    self._loop(index, rng, cases, evict=True)
            else:
                self._loop(index, rng, cases, evict=False)
        except Exception as exc:  # pragma: no cover - reported by __exit__
            self.errors.append(f"thread {index}: {exc!r}")

    def _loop(self, index, rng, cases, evict):
        i = 0
        while not self.stop.is_set():
            i += 1
            k = int(rng.integers(len(cases.convs)))
            if evict:
                with mkcache.cache.input_shape((i % 2, k)):
                    self._step(index, i, k, cases)
            else:
                self._step(index, i, k, cases)
            if index == 0 and i % 5 == 0:
                mkcache.cache.clear()
            self.calls += 1

    def _step(self, index, i, k, cases):
        x, wt, want, bound = cases.convs[k]
        y = mkcache.conv2d(x, wt, padding=1, activation="relu")
        if i % 8 == 0 and not _close(y, want, bound):
            self.errors.append(f"thread {index} call {i}: conv2d differs")
        mkcache.conv2d(cases.shared_x, cases.shared_w, padding=1)
        v = cases.vectors[(i + index) % len(cases.vectors)]
        mkcache.relu(v)
        mkcache.add(v, v)
        mkcache.layer_norm(v)
        mkcache.softmax(v)


def _child_main(cases, k):
    """The whole life of a forked child: never returns into pytest."""
    code = RAISED
    try:
        code = OK if _check_ops(cases, k) else WRONG
    finally:
        os._exit(code)


def _wait(pid, timeout):
    """The child's exit code, or None if it hung (then it is killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (Python >= 3.12)
def test_fork_while_threads_run_operators(rng):
    cases = _Cases(rng)
    _check_ops(cases, 0)  # the forking thread has entries and a stream of its own too
    hung, wrong = [], []
    started = time.monotonic()
    with _Busy(cases):
        for k in range(FORK_COUNT):
            pid = os.fork()
            if pid == 0:
                _child_main(cases, k)
            code = _wait(pid, CHILD_TIMEOUT)
            if code is None:
                hung.append(k)
            elif code != OK:
                wrong.append((k, code))
    summary = (f"{FORK_COUNT} forks in {time.monotonic() - started:.1f} s: "
               f"{len(hung)} hung, {len(wrong)} failed")
    print(summary)
    assert not hung and not wrong, f"{summary}; hung {hung[:10]}, failed (child, code) {wrong[:10]}"


# multiprocessing's workers run this; the cases are in place before the pool
# forks them (a "fork" pool needs nothing pickled but the index).
_POOL_CASES = None


def _pool_task(k):
    return _check_ops(_POOL_CASES, k)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_multiprocessing_fork_pool_while_threads_run_operators(rng):
    global _POOL_CASES
    _POOL_CASES = cases = _Cases(rng)
    ctx = multiprocessing.get_context("fork")
    rounds = max(3, FORK_COUNT // 20)
    try:
        with _Busy(cases):
            for r in range(rounds):
                pool = ctx.Pool(2)
                try:
                    result = pool.map_async(_pool_task, range(r, r + 4))
                    try:
                        got = result.get(timeout=max(CHILD_TIMEOUT, 60))
                    except multiprocessing.TimeoutError:
                        pytest.fail(f"round {r}: a pool worker hung")
                    assert all(got), f"round {r}: a worker computed a wrong result: {got}"
                finally:
                    pool.terminate()
                    pool.join()
    finally:
        _POOL_CASES = None


def _stats_and_keys():
    return mkcache.cache.stats(), mkcache.cache.keys()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_child_threads_do_not_inherit_entries_of_parent_threads(rng):
    """Default-mode entries belong to the thread that made them (its key
    carries a hash of the thread's id). A child has only the forking thread;
    a thread it starts may get the very id of a parent thread (the child
    reuses the stacks of the threads it lost), and must not find that
    thread's entries: its first call is a miss, as in any new thread."""
    x = rng.standard_normal((1, 3, 6, 6), dtype=np.float32)
    wt = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    v = rng.standard_normal((2, 9), dtype=np.float32)
    ready, release = threading.Event(), threading.Event()

    def parent_thread():
        mkcache.conv2d(x, wt, padding=1)
        mkcache.relu(v)
        ready.set()
        release.wait()

    threads = [threading.Thread(target=parent_thread) for _ in range(4)]
    for t in threads:
        t.start()
    ready.wait(30)
    while not all(t.ident for t in threads):
        time.sleep(0.001)
    mkcache.relu(v)  # the forking thread's own entry: the child keeps it
    try:
        pid = os.fork()
        if pid == 0:
            code = RAISED
            try:
                before = mkcache.cache.stats()
                # Only the forking thread's entry is left.
                code = WRONG if before["entries"] != 1 else OK
                hits = []

                def child_thread():
                    s0 = mkcache.cache.stats()
                    mkcache.conv2d(x, wt, padding=1)
                    mkcache.relu(v)
                    s1 = mkcache.cache.stats()
                    hits.append(s1["hits"] - s0["hits"])

                for _ in range(4):
                    t = threading.Thread(target=child_thread)
                    t.start()
                    t.join()
                if code == OK and hits != [0, 0, 0, 0]:
                    code = WRONG + 10
                # The forking thread still finds its own entry.
                s0 = mkcache.cache.stats()
                mkcache.relu(v)
                if code == OK and mkcache.cache.stats()["hits"] != s0["hits"] + 1:
                    code = WRONG + 20
            finally:
                os._exit(code)
        code = _wait(pid, CHILD_TIMEOUT)
    finally:
        release.set()
        for t in threads:
            t.join()
    assert code == OK, {None: "the child hung", WRONG: "parent threads' entries survived",
                        WRONG + 10: "a child thread hit a parent thread's entries",
                        WRONG + 20: "the forking thread lost its entry"}.get(code, code)


_CHILD_CPUS = "import os; print(sorted(os.sched_getaffinity(0)))"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="this process may run on one CPU only")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_children_keep_every_cpu_of_their_parent(rng):
    """Intel's OpenMP runtime, started again in a forked child (as the
    library does there), binds the child's thread to one CPU; whatever the
    child then starts (a subprocess, Ray's workers) would share that CPU.
    Forked children, and processes started through a fork after the library
    ran with two threads, keep every CPU their parent may use."""
    import subprocess
    import sys
    mkcache.set_num_threads(2)
    x = rng.standard_normal((4, 64, 32, 32), dtype=np.float32)
    np.testing.assert_array_equal(mkcache.relu(x).numpy(), relu(x))
    parent = sorted(os.sched_getaffinity(0))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            mkcache.relu(x)  # the child's own OpenMP run
            os.write(write, repr(sorted(os.sched_getaffinity(0))).encode())
        finally:
            os._exit(0)
    os.close(write)
    assert _wait(pid, CHILD_TIMEOUT) == OK
    with os.fdopen(read) as f:
        assert f.read() == repr(parent)
    # preexec_fn makes subprocess fork (not vfork), so the fork handlers run.
    spawned = subprocess.run([sys.executable, "-c", _CHILD_CPUS], preexec_fn=lambda: None,
                             capture_output=True, text=True, check=True, timeout=60)
    assert spawned.stdout.strip() == repr(parent)
