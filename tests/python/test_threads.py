"""Real threads: many threads, many sessions, clearing mode at capacity,
resets while other threads run."""
import threading

import numpy as np
import pytest

import mkcache
from reference import conv2d_nchw, relu

CONFIGS = [  # (N, C, H, W, O, pad)
    (1, 3, 9, 9, 8, 1), (2, 5, 7, 11, 6, 0), (1, 16, 8, 8, 16, 1), (3, 4, 5, 5, 12, 2),
]


def _references(rng):
    refs = []
    for n, c, h, w, o, p in CONFIGS:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
        exact, mag = conv2d_nchw(x, wt, pads=(p, p, p, p))
        refs.append((x, wt, p, relu(exact), mag, c * 9))
    return refs


def _worker(refs, calls, seed, errors, named=True):
    rng = np.random.default_rng(seed)
    try:
        for i in range(calls):
            k = int(rng.integers(len(refs)))
            x, wt, p, want, mag, red = refs[k]
            y = mkcache.conv2d(x, wt, padding=p, activation="relu",
                               name=f"conv{k}" if named else None)
            z = np.asarray(mkcache.relu(y, name=f"relu{k}" if named else None))
            err = np.abs(z - want)
            if not np.all(err <= 4 * (red + 1) * np.finfo(np.float32).eps * mag + 1e-30):
                errors.append(f"seed {seed} call {i} config {k}: max error {err.max()}")
    except Exception as exc:  # pragma: no cover - reported below
        errors.append(repr(exc))


def _run(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_eight_threads_two_hundred_mixed_calls(rng):
    refs = _references(rng)
    errors = []
    _run([threading.Thread(target=_worker, args=(refs, 200, s, errors, s % 2 == 0))
          for s in range(8)])
    assert errors == []


def test_clearing_mode_sessions_at_capacity_with_concurrent_resets(rng):
    refs = _references(rng)
    errors = []
    stop = threading.Event()

    def session_worker(sid):
        try:
            with mkcache.cache.session(100 + sid), mkcache.cache.clearing_mode(2):
                for i in range(60):
                    k = i % len(refs)
                    with mkcache.cache.input_shape(refs[k][0].shape):
                        _worker([refs[k]], 1, sid * 1000 + i, errors)
                    groups = mkcache.cache.stats(session=100 + sid)["groups"]
                    if groups > 2:
                        errors.append(f"session {sid} holds {groups} groups > capacity 2")
        except Exception as exc:  # pragma: no cover
            errors.append(repr(exc))

    def resetter():
        while not stop.is_set():
            mkcache.cache.clear()
            stop.wait(0.002)

    r = threading.Thread(target=resetter)
    r.start()
    try:
        _run([threading.Thread(target=session_worker, args=(s,)) for s in range(6)])
    finally:
        stop.set()
        r.join()
    assert errors == []


def test_shared_tensor_inputs_across_threads(rng):
    x = rng.standard_normal((2, 8, 10, 10), dtype=np.float32)
    w = mkcache.Tensor(rng.standard_normal((8, 8, 3, 3), dtype=np.float32), constant=True)
    exact, mag = conv2d_nchw(x, np.asarray(w), pads=(1, 1, 1, 1))
    xt = mkcache.Tensor(x)
    errors = []

    def work():
        for _ in range(50):
            y = np.asarray(mkcache.conv2d(xt, w, padding=1, name="shared"))
            if not np.all(np.abs(y - exact) <= 4 * 73 * np.finfo(np.float32).eps * mag + 1e-30):
                errors.append("mismatch")

    _run([threading.Thread(target=work) for _ in range(4)])
    assert errors == []


def test_cached_primitive_used_by_threads_other_than_its_creator(rng):
    """A clearing-mode session driven by one thread after another (as a
    thread pool serves a model), and reset from yet another thread. The
    primitives need a scratchpad: oneDNN's default one belongs to the thread
    that created the primitive, which is why the library supplies its own."""
    x = rng.standard_normal((2, 16, 12, 12), dtype=np.float32)
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    exact, mag = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    bound = 4 * (16 * 9 + 1) * np.finfo(np.float32).eps * mag + 1e-30
    errors = []

    def step(i):
        try:
            with mkcache.cache.session(77), mkcache.cache.clearing_mode(2):
                with mkcache.cache.input_shape(x.shape):
                    y = np.asarray(mkcache.conv2d(x, w, padding=1, name="pooled"))
                    if not np.all(np.abs(y - exact) <= bound):
                        errors.append(f"step {i}: wrong result")
                    if mkcache.cache.stats(session=77)["bytes"] == 0:
                        errors.append("the primitive uses no scratchpad: the test tests nothing")
        except Exception as exc:  # pragma: no cover
            errors.append(repr(exc))

    for i in range(12):  # a new thread each time, reusing the entry
        _run([threading.Thread(target=step, args=(i,))])
        if i % 4 == 3:
            _run([threading.Thread(target=mkcache.cache.clear)])
    assert errors == []
    assert mkcache.cache.stats(session=77)["hits"] >= 6


def _race(session_id, call, threads=8):
    """Runs call() on `threads` threads released together, each in clearing
    mode (keys threads share) in `session_id`; -> (results, errors)."""
    barrier = threading.Barrier(threads)
    results, errors = [None] * threads, [None] * threads

    def work(i):
        with mkcache.cache.session(session_id), mkcache.cache.clearing_mode(4):
            barrier.wait()
            try:
                results[i] = call()
            except mkcache.Error as exc:
                errors[i] = exc

    _run([threading.Thread(target=work, args=(i,)) for i in range(threads)])
    return results, errors


def test_threads_missing_one_shared_key_build_it_once(rng, monkeypatch):
    # The library's test delay holds each build long enough that all eight
    # calls miss the key while the first is making it (set only here: it is
    # read at each build).
    monkeypatch.setenv("MKCACHE_TEST_BUILD_DELAY_MS", "20")
    for session_id, channels in zip(range(9100, 9103), range(21, 24)):
        x = rng.standard_normal((2, channels, 13, 11), dtype=np.float32)
        w = rng.standard_normal((10, channels, 3, 3), dtype=np.float32)
        exact, mag = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
        want = relu(exact)
        tol = 4 * (channels * 9 + 1) * np.finfo(np.float32).eps * mag + 1e-30
        results, errors = _race(session_id, lambda: np.asarray(
            mkcache.conv2d(x, w, padding=1, activation="relu", name="raced")))
        assert errors == [None] * 8
        for r in results:
            assert np.all(np.abs(r - want) <= tol)
        # Every thread missed the conv's key (and those of the layout
        # conversions around it); each key was made once.
        s = mkcache.cache.stats(session_id)
        assert s["misses"] >= 8 and s["insertions"] == s["entries"], s


def test_a_failed_shared_build_leaves_nothing_and_the_waiters_go_on(monkeypatch):
    # oneDNN refuses this transposed convolution when its primitive is made:
    # every racing call gets the error (none hangs on the failed builder),
    # nothing is stored, and the key then builds normally.
    monkeypatch.setenv("MKCACHE_TEST_BUILD_DELAY_MS", "20")
    x, w = np.ones((2, 6, 3, 7), np.float32), np.ones((6, 3, 1, 1), np.float32)
    bad = dict(stride=(2, 1), dilation=(1, 2), padding=(2, 1, 2, 0), output_padding=(0, 1),
               groups=2)
    results, errors = _race(9110, lambda: mkcache.conv2d_transpose(x, w, name="t", **bad))
    assert all(isinstance(e, mkcache.UnsupportedError) for e in errors), errors
    assert mkcache.cache.stats(9110)["entries"] == 0
    results, errors = _race(9110, lambda: np.asarray(
        mkcache.conv2d_transpose(x, w, name="t", groups=2)))
    assert errors == [None] * 8
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    s = mkcache.cache.stats(9110)
    assert (s["insertions"], s["entries"]) == (1, 1), s


def test_set_num_threads_gives_a_plan_and_entries_per_thread_count(rng):
    """oneDNN fixes how a convolution splits its work when it creates it:
    a run under another OpenMP thread count gets its own plan (and
    primitives), with the same results; the count is per thread."""
    before = mkcache.get_num_threads()
    x = rng.standard_normal((2, 16, 20, 20), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32) * 0.2
    g = mkcache.Graph()
    g.output(g.relu(g.conv2d(g.input("x", x.shape), w, padding=1)), "y")
    try:
        with g.compile() as prog:
            mkcache.set_num_threads(1)
            assert mkcache.get_num_threads() == 1
            one = prog.run(x=x)["y"]
            eager_one = np.asarray(mkcache.relu(mkcache.conv2d(x, w, padding=1)))
            mkcache.set_num_threads(2)
            two = prog.run(x=x)["y"]
            eager_two = np.asarray(mkcache.relu(mkcache.conv2d(x, w, padding=1)))
            assert prog.memory["plans"] == 2
            np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(eager_one, eager_two, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(one, eager_one, rtol=1e-5, atol=1e-5)
            mkcache.set_num_threads(1)
            prog.run(x=x)
            assert prog.memory["plans"] == 2  # the first plan again

            seen = []
            t = threading.Thread(target=lambda: seen.append(mkcache.get_num_threads()))
            t.start()
            t.join()
            assert mkcache.get_num_threads() == 1 and seen and seen[0] >= 1
    finally:
        mkcache.set_num_threads(before)
    with pytest.raises(mkcache.InvalidArgumentError, match="threads must be >= 1"):
        mkcache.set_num_threads(0)
    with pytest.raises(mkcache.InvalidArgumentError):
        mkcache.set_num_threads(1.5)
    assert mkcache.get_num_threads() == before
