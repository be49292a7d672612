"""Layout names <-> C enum values, and the thread-local target layout."""
from __future__ import annotations

import contextlib
import ctypes
import threading

from . import _capi
from .errors import InvalidArgumentError

_BY_NAME = {
    "NCHW": _capi.LAYOUT_CHANNELS_FIRST, "NCDHW": _capi.LAYOUT_CHANNELS_FIRST,
    "NC": _capi.LAYOUT_CHANNELS_FIRST, "NCW": _capi.LAYOUT_CHANNELS_FIRST,
    "NHWC": _capi.LAYOUT_CHANNELS_LAST, "NDHWC": _capi.LAYOUT_CHANNELS_LAST,
    "NWC": _capi.LAYOUT_CHANNELS_LAST,
    "CHANNELS_FIRST": _capi.LAYOUT_CHANNELS_FIRST, "CHANNELS_LAST": _capi.LAYOUT_CHANNELS_LAST,
}

class _Explicit(threading.local):
    """Set while a `target_layout(...)` block is active on this thread:
    numpy() then converts to that layout instead of the tensor's own. The
    class attribute is every thread's default (reading an attribute a
    thread never set would otherwise raise and catch an AttributeError on
    every operator call)."""

    value = None


_explicit = _Explicit()


def to_enum(name, argument: str = "layout") -> int:
    if name is None:
        return _capi.LAYOUT_TARGET
    key = str(name).upper()
    if key not in _BY_NAME:
        raise InvalidArgumentError(
            f"{argument} must be one of NCHW, NHWC, NCDHW, NDHWC, got {name!r}")
    return _BY_NAME[key]


def to_name(value: int, ndims: int) -> str:
    last = value == _capi.LAYOUT_CHANNELS_LAST
    if ndims == 5:
        return "NDHWC" if last else "NCDHW"
    if ndims == 3:
        return "NWC" if last else "NCW"
    if ndims == 4:
        return "NHWC" if last else "NCHW"
    return "row-major"


def get_target_layout() -> str:
    """The calling thread's target layout, "NCHW" or "NHWC"."""
    value = ctypes.c_int()
    _capi.lib.mkc_get_target_layout(ctypes.byref(value))
    return "NHWC" if value.value == _capi.LAYOUT_CHANNELS_LAST else "NCHW"


def set_target_layout(layout: str) -> None:
    _capi.lib.mkc_set_target_layout(to_enum(layout, "target layout"))


def explicit_target():
    """The enum of an active target_layout() block, or None."""
    return _explicit.value


@contextlib.contextmanager
def target_layout(layout: str):
    """Within the block, this thread exports (``numpy()``) in `layout` and
    wraps 4-D/5-D arrays in it by default."""
    value = to_enum(layout, "target layout")
    if value == _capi.LAYOUT_TARGET:
        raise InvalidArgumentError("target layout must be NCHW or NHWC")
    previous_c = get_target_layout()
    previous_py = explicit_target()
    _capi.lib.mkc_set_target_layout(value)
    _explicit.value = value
    try:
        yield
    finally:
        _explicit.value = previous_py
        set_target_layout(previous_c)
