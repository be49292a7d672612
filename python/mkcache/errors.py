"""Exceptions: every failure of the library is an :class:`Error`.

Subclasses also derive from the matching built-in exception, so
``except ValueError`` catches a bad argument as Python users expect.
"""
from __future__ import annotations


class Error(Exception):
    """A libmkcache call failed. ``status`` is the C status name."""

    status = "MKC_STATUS_UNKNOWN"

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    status = "MKC_STATUS_INVALID_ARGUMENT"


class InvalidHandleError(Error, ValueError):
    status = "MKC_STATUS_INVALID_HANDLE"


class DTypeError(Error, TypeError):
    """An array of a dtype the library does not handle (it wants float32)."""

    status = "MKC_STATUS_INVALID_ARGUMENT"


class UnsupportedError(Error, NotImplementedError):
    status = "MKC_STATUS_UNSUPPORTED"


class OutOfMemoryError(Error, MemoryError):
    status = "MKC_STATUS_OUT_OF_MEMORY"


class BufferTooSmallError(Error, ValueError):
    status = "MKC_STATUS_BUFFER_TOO_SMALL"


class OneDNNError(Error, RuntimeError):
    status = "MKC_STATUS_ONEDNN_ERROR"


class InternalError(Error, RuntimeError):
    status = "MKC_STATUS_INTERNAL_ERROR"


# The class of each failing status (by its `status` name; _capi indexes
# them by the values the library gives those names). DTypeError is an
# InvalidArgumentError the package raises itself.
STATUS_ERRORS = (InvalidArgumentError, InvalidHandleError, UnsupportedError, OutOfMemoryError,
                 BufferTooSmallError, OneDNNError, InternalError)
