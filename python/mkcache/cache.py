"""The blob cache: statistics, keys, reset and the thread-local context.

Everything here is per calling thread except statistics and reset, which see
the whole process::

    with mkcache.cache.clearing_mode(4):
        for shape in shapes:
            with mkcache.cache.input_shape(shape):
                y = mkcache.conv2d(x, w)     # at most 4 shape groups kept
"""
from __future__ import annotations

import contextlib
import ctypes

from . import _capi, _checks
from .errors import InvalidArgumentError

_lib = _capi.lib


def _stats_dict(s: _capi.CacheStats) -> dict:
    return {name: getattr(s, name) for name, _ in _capi.CacheStats._fields_}


def stats(session=None) -> dict:
    """Counters (hits, misses, insertions, evictions, evicted_entries,
    entries, groups, sessions, bytes) of the whole cache, or of one session."""
    s = _capi.CacheStats()
    if session is None:
        _lib.mkc_cache_get_stats(ctypes.byref(s))
    else:
        _lib.mkc_cache_get_session_stats(_checks.integer(session, "session"), ctypes.byref(s))
    return _stats_dict(s)


def clear(executor=None) -> None:
    """Drops every entry, or only those created under `executor`."""
    if executor is None:
        _lib.mkc_cache_reset()
    else:
        _lib.mkc_cache_reset_executor(_checks.integer(executor, "executor", _checks.UINT64))


def keys(session=None) -> list:
    """[(group, key), ...] held by `session` (default: this thread's), groups
    oldest first."""
    if session is None:
        session = get_session()
    text = _capi.call_with_buffer(_lib.mkc_cache_get_keys, _checks.integer(session, "session"))
    return [tuple(_unescape(field) for field in line.split("\t"))
            for line in text.split("\n") if line]


_ESCAPES = {"\\": "\\", "t": "\t", "n": "\n"}


def _unescape(field: str) -> str:
    """Undoes the listing's escapes (backslash, tab and newline written as
    \\\\, \\t, \\n, so fields and lines split unambiguously)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field):
            out.append(_ESCAPES.get(field[i + 1], field[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def shape_string(shape) -> str:
    """(1, 3, 224, 224) -> "1x3x224x224" (strings pass through)."""
    if isinstance(shape, str):
        return shape
    if not hasattr(shape, "__len__"):
        raise InvalidArgumentError(f"shape must be a str or a sequence of integers, got {shape!r}")
    return "x".join(str(d) for d in _checks.integers(shape, len(shape), "shape"))


def make_key(name: str, shape=(), suffix=None) -> str:
    """The key an operator on this thread would build."""
    encoded = _checks.name_bytes(name)
    dims = _checks.integers(shape, len(shape), "shape") if len(shape) else ()
    arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    return _capi.call_with_buffer(
        _lib.mkc_key_make, encoded,
        None if suffix is None else _checks.name_bytes(str(suffix), "suffix"), len(dims), arr)


def get_session() -> int:
    v = ctypes.c_int64()
    _lib.mkc_cache_get_session(ctypes.byref(v))
    return v.value


def get_capacity() -> int:
    v = ctypes.c_int64()
    _lib.mkc_cache_get_capacity(ctypes.byref(v))
    return v.value


def get_input_shape() -> str:
    v = ctypes.c_char_p()
    _lib.mkc_cache_get_input_shape(ctypes.byref(v))
    return v.value.decode()


def get_executor() -> int:
    v = ctypes.c_uint64()
    _lib.mkc_get_executor(ctypes.byref(v))
    return v.value


@contextlib.contextmanager
def session(session_id: int):
    """Runs the block in another top-level cache session."""
    previous = get_session()
    _lib.mkc_cache_set_session(_checks.integer(session_id, "session_id"))
    try:
        yield
    finally:
        _lib.mkc_cache_set_session(previous)


@contextlib.contextmanager
def clearing_mode(capacity: int):
    """Clearing mode: keys carry no thread id and a session keeps at most
    `capacity` input-shape groups, evicting the oldest."""
    capacity = _checks.integer(capacity, "capacity", (1, _checks.INT64[1]))
    previous = get_capacity()
    _lib.mkc_cache_set_capacity(capacity)
    try:
        yield
    finally:
        _lib.mkc_cache_set_capacity(previous)


@contextlib.contextmanager
def input_shape(shape):
    """Puts new entries in the group of this input shape (tuple or str)."""
    previous = get_input_shape()
    _lib.mkc_cache_set_input_shape(_checks.name_bytes(shape_string(shape), "shape"))
    try:
        yield
    finally:
        _lib.mkc_cache_set_input_shape(previous.encode())


@contextlib.contextmanager
def executor(executor_id: int):
    """Tags keys and entries with an executor id (a model instance)."""
    previous = get_executor()
    _lib.mkc_set_executor(_checks.integer(executor_id, "executor_id", _checks.UINT64))
    try:
        yield
    finally:
        _lib.mkc_set_executor(previous)


def reorder_count() -> int:
    """Layout conversions executed so far in this process (debugging aid)."""
    v = ctypes.c_uint64()
    _lib.mkc_get_reorder_count(ctypes.byref(v))
    return v.value
