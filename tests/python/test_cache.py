"""Blob cache semantics: counters, keys, clearing mode, sessions, executors,
caller blobs with deleters, name reuse."""
import ctypes
import re
import threading
import time

import numpy as np
import pytest

import mkcache
from mkcache import _capi
from reference import conv2d_nchw, assert_close

lib = _capi.lib


def relu_named(name, shape=(1, 8)):
    return mkcache.relu(np.ones(shape, dtype=np.float32), name=name)


def test_hits_and_misses_are_counted():
    s0 = mkcache.cache.stats()
    relu_named("r")
    s1 = mkcache.cache.stats()
    assert (s1["misses"] - s0["misses"], s1["insertions"] - s0["insertions"]) == (1, 1)
    relu_named("r")
    s2 = mkcache.cache.stats()
    assert s2["hits"] - s1["hits"] == 1 and s2["misses"] == s1["misses"]
    assert s2["entries"] == 1 and s2["groups"] == 1 and s2["sessions"] == 1


def test_key_format_default_mode_has_thread_hash():
    key = mkcache.cache.make_key("conv1", (1, 64, 56, 56))
    assert re.fullmatch(r"conv1\|\|1x64x56x56\|e0\|t[0-9a-f]+", key), key
    other = []
    t = threading.Thread(target=lambda: other.append(mkcache.cache.make_key("conv1", (1, 64, 56, 56))))
    t.start()
    t.join()
    assert other[0] != key and other[0].startswith("conv1||1x64x56x56|e0|t")


def test_key_format_clearing_mode_and_suffix_and_executor():
    with mkcache.cache.clearing_mode(2), mkcache.cache.executor(0xAB):
        assert mkcache.cache.make_key("sm", (2, 3), suffix=1) == "sm|1|2x3|eab"
        assert mkcache.cache.make_key("a|b", ()) == "a\\|b|||eab"


def test_separator_prevents_dim_collision():
    a = mkcache.cache.make_key("conv", (1, 64, 56, 56))
    b = mkcache.cache.make_key("conv", (16, 4, 56, 56))
    assert a != b


def test_operator_keys_match_make_key():
    relu_named("act", (2, 3))
    keys = [k for _, k in mkcache.cache.keys()]
    # Activations carry the algorithm (relu = 1) as the key's suffix.
    assert mkcache.cache.make_key("act", (2, 3), suffix=1) in keys
    x = np.ones((1, 2, 5, 5), dtype=np.float32)
    w = np.ones((3, 2, 3, 3), dtype=np.float32)
    mkcache.conv2d(x, w, name="convA")
    assert mkcache.cache.make_key("convA", (1, 2, 5, 5)) in [k for _, k in mkcache.cache.keys()]


def test_unnamed_ops_derive_distinct_names(rng):
    x = rng.standard_normal((1, 4, 6, 6), dtype=np.float32)
    w = rng.standard_normal((4, 4, 3, 3), dtype=np.float32)
    a = np.asarray(mkcache.conv2d(x, w, padding=1))
    b = np.asarray(mkcache.conv2d(x, w, padding=0))
    assert a.shape == (1, 4, 6, 6) and b.shape == (1, 4, 4, 4)
    names = [k.split("|")[0] for _, k in mkcache.cache.keys()]
    assert len(set(n for n in names if n.startswith("conv2d:"))) == 2


def test_clearing_mode_never_exceeds_capacity_and_evicts_oldest():
    with mkcache.cache.session(5), mkcache.cache.clearing_mode(3):
        for i in range(6):
            with mkcache.cache.input_shape((i, 1)):
                relu_named("r", (1, i + 1))
                assert mkcache.cache.stats(session=5)["groups"] <= 3
        groups = [g for g, _ in mkcache.cache.keys()]
        assert groups == ["3x1", "4x1", "5x1"]
        # Using the oldest group again does not make it younger: eviction is
        # by insertion order.
        with mkcache.cache.input_shape((3, 1)):
            relu_named("r", (1, 4))
        with mkcache.cache.input_shape((6, 1)):
            relu_named("r", (1, 7))
        assert [g for g, _ in mkcache.cache.keys()] == ["4x1", "5x1", "6x1"]
        s = mkcache.cache.stats(session=5)
        assert s["evictions"] == 4 and s["evicted_entries"] == 4
        # Keys carry no thread id in clearing mode.
        assert all("|t" not in k for _, k in mkcache.cache.keys())


def test_sessions_are_isolated():
    with mkcache.cache.session(1):
        relu_named("same")
    with mkcache.cache.session(2):
        relu_named("same")
    assert mkcache.cache.stats(session=1)["insertions"] == 1
    assert mkcache.cache.stats(session=2)["insertions"] == 1
    assert mkcache.cache.stats(session=2)["hits"] == 0
    assert len(mkcache.cache.keys(1)) == 1 and len(mkcache.cache.keys(2)) == 1
    assert mkcache.cache.stats(session=999)["entries"] == 0


def test_executor_reset_drops_only_its_entries():
    with mkcache.cache.executor(7):
        relu_named("a")
    with mkcache.cache.executor(8):
        relu_named("a")
    assert mkcache.cache.stats()["entries"] == 2
    mkcache.cache.clear(executor=7)
    keys = [k for _, k in mkcache.cache.keys()]
    assert len(keys) == 1 and "|e8|" in keys[0]


def test_entries_of_finished_threads_are_dropped():
    before = mkcache.cache.stats()["entries"]
    t = threading.Thread(target=lambda: relu_named("from_thread"))
    t.start()
    t.join()
    # join() returns when the Python thread is done; the OS thread runs its
    # C++ thread-exit cleanup a moment later.
    deadline = time.monotonic() + 5
    while mkcache.cache.stats()["entries"] != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mkcache.cache.stats()["entries"] == before


def test_name_reuse_with_other_attributes_is_correct(rng):
    x = rng.standard_normal((2, 6, 9, 9), dtype=np.float32)
    for stride, pads, dil, groups, oc in [(1, (1, 1, 1, 1), 1, 1, 6), (2, (0, 1, 0, 1), 1, 1, 6),
                                          (1, (2, 2, 2, 2), 2, 1, 6), (1, (1, 1, 1, 1), 1, 3, 9),
                                          (1, (1, 1, 1, 1), 1, 6, 6)]:
        w = rng.standard_normal((oc, 6 // groups, 3, 3), dtype=np.float32)
        y = mkcache.conv2d(x, w, stride=stride, padding=pads, dilation=dil, groups=groups,
                           name="reused")
        exact, mag = conv2d_nchw(x, w, None, (stride, stride), pads, (dil, dil), groups)
        assert_close(np.asarray(y), exact, mag, (6 // groups) * 9)
    # Same name, same dims, other layout of the input: still correct.
    t = mkcache.Tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NHWC")
    r1 = np.asarray(mkcache.relu(x, name="reused_relu"))
    r2 = mkcache.relu(t, name="reused_relu").numpy("NCHW")
    np.testing.assert_array_equal(r1, r2)


def _delta(before, key):
    return mkcache.cache.stats()[key] - before[key]


def test_remembered_hits_are_counted_and_end_with_a_clear():
    """A thread remembers its recent hits (the front cache): repeated calls
    skip key formatting and the shared lookup, yet count as hits, and a
    clear() ends them."""
    s0 = mkcache.cache.stats()
    for _ in range(5):
        relu_named("front")
    assert (_delta(s0, "misses"), _delta(s0, "hits")) == (1, 4)
    mkcache.cache.clear()
    s1 = mkcache.cache.stats()
    relu_named("front")
    assert (_delta(s1, "misses"), _delta(s1, "insertions"), _delta(s1, "hits")) == (1, 1, 0)


def test_remembered_hit_never_serves_an_evicted_entry():
    with mkcache.cache.session(41), mkcache.cache.clearing_mode(1):
        with mkcache.cache.input_shape((1,)):
            relu_named("ev")
            relu_named("ev")  # remembered now
        with mkcache.cache.input_shape((2,)):
            relu_named("ev")  # evicts group (1,)
        s = mkcache.cache.stats(session=41)
        with mkcache.cache.input_shape((1,)):
            y = relu_named("ev")
        s2 = mkcache.cache.stats(session=41)
        assert (s2["misses"] - s["misses"], s2["hits"] - s["hits"]) == (1, 0)
        assert s2["groups"] == 1
        np.testing.assert_array_equal(np.asarray(y), np.ones((1, 8), np.float32))


def test_remembered_hits_keep_names_suffixes_contexts_and_dims_apart():
    # Names that escape alike, differ only in the middle or in length, dims
    # that concatenate alike, executors: every combination its own entry.
    names = ["a|b", "a\\|b", "a\\b", "a", "", "layer1.conv2.out", "layer2.conv2.out"]
    names += ["n" * k for k in range(2, 19)]
    calls = [(n, (1, 8), 0) for n in names] + [("d", (1, 18), 0), ("d", (11, 8), 0),
                                              ("d", (1, 8), 1), ("d", (1, 8), 2)]
    s0 = mkcache.cache.stats()
    for round_ in range(3):
        for name, shape, executor in calls:
            with mkcache.cache.executor(executor):
                y = relu_named(name, shape)
            assert np.asarray(y).shape == shape
    entries = {k for _, k in mkcache.cache.keys()}
    assert len(entries) == len(calls)  # "" falls back to the default name "relu"
    assert _delta(s0, "misses") == len(calls)
    assert _delta(s0, "hits") == 2 * len(calls)


def test_remembered_hit_is_not_taken_after_the_name_is_rebuilt_for_other_arguments(rng):
    x = rng.standard_normal((3, 7), dtype=np.float32)
    for slope in [0.1, 0.1, 0.3, 0.1, 0.3, 0.3, 0.0]:
        y = np.asarray(mkcache.leaky_relu(x, slope, name="reslope"))
        np.testing.assert_array_equal(y, np.where(x > 0, x, np.float32(slope) * x))


def test_caller_blob_deleter_called_exactly_once():
    calls = []
    deleter = _capi.DELETER(lambda p: calls.append(p))
    buf1 = ctypes.create_string_buffer(16)
    buf2 = ctypes.create_string_buffer(16)
    a1, a2 = ctypes.addressof(buf1), ctypes.addressof(buf2)
    lib.mkc_cache_set_blob(b"blob", a1, 16, deleter)
    assert mkcache.cache.stats()["bytes"] >= 16
    ref = _capi.blob_p()
    lib.mkc_cache_get_blob(b"blob", ctypes.byref(ref))
    data = ctypes.c_void_p()
    lib.mkc_blob_get_data(ref, ctypes.byref(data))
    assert data.value == a1
    lib.mkc_cache_set_blob(b"blob", a2, 16, deleter)  # replaces: a1 still held by `ref`
    assert calls == []
    lib.mkc_blob_release(ref)
    assert calls == [a1]
    mkcache.cache.clear()
    assert calls == [a1, a2]
    with pytest.raises(mkcache.InvalidHandleError):
        lib.mkc_blob_release(ref)
    missing = _capi.blob_p(1)
    lib.mkc_cache_get_blob(b"blob", ctypes.byref(missing))
    assert not missing.value


def test_caller_blob_and_primitive_keys_never_mix():
    key = mkcache.cache.make_key("mixed", (1, 8), suffix=1)
    calls = []
    deleter = _capi.DELETER(lambda p: calls.append(p))
    buf = ctypes.create_string_buffer(8)
    lib.mkc_cache_set_blob(key.encode(), ctypes.addressof(buf), 8, deleter)
    # An operator with that exact key must not take the caller's bytes for a
    # primitive: it misses and builds its own.
    np.testing.assert_array_equal(np.asarray(relu_named("mixed")), np.ones((1, 8)))
    mkcache.cache.clear()
    assert len(calls) == 1


def test_memory_figures_follow_entries():
    relu_named("m")
    assert mkcache.cache.stats()["entries"] == 1
    mkcache.cache.clear()
    s = mkcache.cache.stats()
    assert s["entries"] == 0 and s["groups"] == 0 and s["bytes"] == 0
