"""Argument checks shared by every wrapper, run before ctypes sees a value.

ctypes converts silently: an int too large for a C field is masked (2**64 + 2
becomes 2), int() truncates a float (1.9 becomes 1), and a string is a
sequence of characters ("22" becomes (2, 2)). Every integer and float the
package passes to the library goes through here instead, so each is a real
number of the right kind, within its C field's range, or an
InvalidArgumentError naming the argument.
"""
from __future__ import annotations

import math
import numbers
import operator

from .errors import InvalidArgumentError

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
_FLOAT32_MAX = 3.4028234663852886e38


def integer(value, argument: str, bounds: tuple = INT64) -> int:
    """`value` as a Python int: anything operator.index accepts (int, numpy
    integers), not bool, not a float, within `bounds` (inclusive)."""
    if type(value) is not int:  # the common case skips the protocol
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise InvalidArgumentError(f"{argument} must be an integer, got {value!r}")
        value = operator.index(value)
    lo, hi = bounds
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{argument} must be in [{lo}, {hi}], got {value}")
    return value


def integers(value, count: int, argument: str, bounds: tuple = INT64,
             counts: tuple = ()) -> tuple:
    """An integer repeated `count` times, or a sequence (not a string) of
    `count` integers (or of one of `counts`, when given)."""
    if type(value) is int or (hasattr(type(value), "__index__") and not isinstance(value, bool)):
        return (integer(value, argument, bounds),) * count
    allowed = counts or (count,)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") \
            or len(value) not in allowed:
        wanted = " or ".join(str(n) for n in allowed)
        raise InvalidArgumentError(
            f"{argument} must be an integer or {wanted} integers, got {value!r}")
    return tuple(integer(v, argument, bounds) for v in value)


def real(value, argument: str) -> float:
    """`value` as a float for a C float field: a real number (not bool, not a
    string), NaN and infinities allowed, finite values within float32's
    range."""
    if type(value) is not float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidArgumentError(f"{argument} must be a real number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:  # an int past any float
            raise InvalidArgumentError(f"{argument} is beyond the float32 range "
                                       f"(|x| <= {_FLOAT32_MAX:.7g}), got {value!r}") from None
    if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
        raise InvalidArgumentError(
            f"{argument} is beyond the float32 range (|x| <= {_FLOAT32_MAX:.7g}), got {value!r}")
    return value


def name_bytes(name, argument: str = "name") -> bytes:
    """A cache name's UTF-8 bytes: a str without NUL (C ends the name there)
    and without lone surrogates (not encodable)."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{argument} must be a str or None, got {type(name).__name__}")
    if "\0" in name:
        raise InvalidArgumentError(f"{argument} must not contain a NUL character: {name!r}")
    try:
        return name.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{argument} is not encodable as UTF-8: {exc}") from None
