"""Real threads: many threads, many sessions, clearing mode at capacity,
resets while other threads run."""
import threading

import numpy as np

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
