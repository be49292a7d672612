"""`Tensor`: a handle to data the library can use without copying.

A Tensor made from a numpy array wraps it (no copy; the array is kept
alive). Tensors returned by operators own their memory in the layout
oneDNN chose (e.g. ``aBcd16b``, oneDNN's name for nChw16c) and stay in it
between operators; ``numpy()`` / ``np.asarray`` convert to a plain layout.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import _capi, _layout
from .errors import DTypeError, InvalidArgumentError, InvalidHandleError

_lib = _capi.lib


_F32 = np.dtype(np.float32)
_new = object.__new__

# numpy dtype -> the library's mkc_dtype, for every dtype a tensor may hold
# that numpy has (the operators compute on float32; int32, int64 and bool
# hold indices and masks; int8 and uint8 quantized data).
DTYPES = {np.dtype(np.float32): _capi.enum_value("mkc_dtype", "f32"),
          np.dtype(np.int32): _capi.enum_value("mkc_dtype", "s32"),
          np.dtype(np.int64): _capi.enum_value("mkc_dtype", "s64"),
          np.dtype(np.bool_): _capi.enum_value("mkc_dtype", "bool"),
          np.dtype(np.int8): _capi.enum_value("mkc_dtype", "s8"),
          np.dtype(np.uint8): _capi.enum_value("mkc_dtype", "u8"),
          np.dtype(np.float16): _capi.enum_value("mkc_dtype", "f16")}
NUMPY_DTYPES = {value: dtype for dtype, value in DTYPES.items()}
FLOAT32_ONLY = (_F32,)
ANY_DTYPE = tuple(DTYPES)

# numpy has no bfloat16: a bfloat16 tensor reports this name as its dtype,
# exports as float32 (exactly: bfloat16 is float32's top half) and as its raw
# bits in uint16 on request, and wraps uint16 bits given with dtype=bfloat16.
bfloat16 = "bfloat16"
BF16 = _capi.enum_value("mkc_dtype", "bf16")
_U16 = np.dtype(np.uint16)
_DTYPE_NAMES = "float32, int32, int64, bool, int8, uint8, float16 or bfloat16"


def dtype_value(dtype, what: str) -> int:
    """The mkc_dtype of `dtype`: a numpy dtype (or its type or name) a tensor
    may hold, or "bfloat16" ("bf16")."""
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return BF16
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype not in DTYPES:
        raise InvalidArgumentError(f"{what} must be {_DTYPE_NAMES}, got {dtype!r}")
    return DTYPES[np_dtype]


def dtype_of_value(value: int):
    """The numpy dtype of an mkc_dtype value, or "bfloat16"."""
    return bfloat16 if value == BF16 else NUMPY_DTYPES[value]


def check_array(array, argument: str, dtypes: tuple = FLOAT32_ONLY) -> np.ndarray:
    """Checks a numpy argument before any C call: of one of `dtypes`
    (float32 unless told), C-contiguous, rank 1..6, no zero-size dims."""
    if (type(array) is np.ndarray and array.dtype is _F32 and array.flags.c_contiguous
            and 0 < array.ndim <= _capi.MAX_NDIMS and array.size):
        return array  # the common case, checked cheaply
    if array is None:
        raise InvalidArgumentError(f"{argument} is None; expected a numpy array or mkcache.Tensor")
    if getattr(type(array), "_mkcache_graph_value", False):
        raise InvalidArgumentError(
            f"{argument} is a graph value, which only graph operators take: a Graph's methods, "
            "or inside mkcache.trace the operators called as mkcache.<name> (a name bound "
            "before the trace is the eager function)")
    if not isinstance(array, np.ndarray):
        raise DTypeError(
            f"{argument} must be a numpy.ndarray or mkcache.Tensor, got {type(array).__name__}")
    if array.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise DTypeError(f"{argument} must be {allowed}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(
            f"{argument} must be C-contiguous (use numpy.ascontiguousarray)")
    if not 1 <= array.ndim <= _capi.MAX_NDIMS:
        raise InvalidArgumentError(
            f"{argument} must have rank 1..{_capi.MAX_NDIMS}, got {array.ndim}")
    if array.size == 0:
        raise InvalidArgumentError(f"{argument} has a zero-size dimension: {array.shape}")
    return array


def data_pointer(array: np.ndarray) -> int:
    """Address of an array's data; from_buffer is cheaper than
    __array_interface__ but needs a writable array."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.__array_interface__["data"][0]


def _find_data_field():
    """The offset of an ndarray's data pointer from its address, if reading
    it there is verified to work; else None.

    NumPy's ABI keeps the data pointer right after the object header
    (PyArray_DATA is inlined into every compiled extension, so it cannot
    move) and CPython's id() is an object's address. Reading it is much
    cheaper than the buffer protocol (data_pointer), which matters on the
    activation fast path. Checked here on probe arrays, so an interpreter
    or NumPy where it does not hold gets the buffer-protocol path."""
    offset = object.__basicsize__  # sizeof(PyObject): the header
    try:
        base = np.arange(24, dtype=np.float32)
        probes = [base, base[3:], base.reshape(2, 12), np.empty((5, 7), np.float32)]
        for a in probes:
            if ctypes.c_void_p.from_address(id(a) + offset).value != \
                    a.__array_interface__["data"][0]:
                return None
    except (OverflowError, ValueError, TypeError):
        return None
    return offset


_DATA_FIELD = _find_data_field()


if _DATA_FIELD is not None:
    def data_address(array: np.ndarray, _at=ctypes.c_void_p.from_address,
                     _offset=_DATA_FIELD) -> ctypes.c_void_p:
        """`array`'s data address as a ctypes argument (numpy arrays only;
        to be passed straight to a call while `array` is alive)."""
        return _at(id(array) + _offset)
else:  # pragma: no cover - CPython and NumPy keep the layout above
    def data_address(array: np.ndarray) -> ctypes.c_void_p:
        """`array`'s data address as a ctypes argument."""
        return ctypes.c_void_p(data_pointer(array))


_wrap = _capi.raw["mkc_tensor_wrap"]          # (int, int, int64*, int, void*, void**)
_export = _capi.raw["mkc_tensor_export"]      # (void*, int, void*, size_t)
_destroy = _capi.raw["mkc_tensor_destroy"]    # (void*)
_dims_types = [ctypes.c_int64 * n for n in range(_capi.MAX_NDIMS + 1)]


def wrap_handle(array: np.ndarray, layout_value: int, dtype_value: int | None = None):
    """A C handle wrapping a checked array (the caller destroys it), as
    `dtype_value` (default: the array's own dtype)."""
    ndim = array.ndim
    dims = _dims_types[ndim](*array.shape)
    handle = _capi.tensor_p()
    status = _wrap(DTYPES[array.dtype] if dtype_value is None else dtype_value, ndim, dims,
                   layout_value, ctypes.c_void_p(data_pointer(array)), ctypes.byref(handle))
    if status:
        _capi.raise_for(status)
    return handle


def check_writable(value, argument: str) -> None:
    """Refuses a read-only numpy array (or a Tensor over one) where the
    library writes: writing through it would fault (a read-only mapping) or
    change data numpy promised would not change."""
    base = value._base if isinstance(value, Tensor) else value
    if isinstance(base, np.ndarray) and not base.flags.writeable:
        raise InvalidArgumentError(
            f"{argument} is a read-only array, but the library writes into it")


class _Owner:
    """Destroys one C tensor handle when collected. A Tensor holds one only
    once it has a handle, so the fast paths' results (which may never need
    one) cost no finalizer."""

    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle

    def destroy(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            _destroy(handle)

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


# Handles for reading numpy arguments, kept between calls. Wrapping an array
# through ctypes (a C handle with its oneDNN descriptor and registry entry,
# made and destroyed) costs more than many whole operators, and a
# handle over caller memory stands for nothing but "float32 data at this
# address, these dims, this layout": the library keeps no other state of a
# non-constant wrapped tensor. So the handle made for one array serves every
# later array found at the same address with the same shape and layout (the
# key), and one whose array has died is harmless: it is used again only when
# a live array with that address and shape is passed. Bounded: emptied when
# full; a call in flight keeps its handles alive through their owners.
_INPUTS: dict = {}
_INPUTS_MAX = 1024
_read_pointer = ctypes.c_void_p.from_address


def input_owner(value, argument: str, layout_value: int,
                dtypes: tuple = FLOAT32_ONLY) -> "_Owner":
    """The owner of a handle for reading `value`, a numpy array checked here
    as check_array does, in one call (the caller holds the owner until the
    call returns and never writes through the handle, nor marks it
    constant). `layout_value` must be explicit (not MKC_LAYOUT_TARGET, which
    the library would resolve at wrapping time)."""
    # check_array's common case, tested here: one Python call less per array.
    if not (type(value) is np.ndarray and value.dtype is _F32 and value.flags.c_contiguous
            and 0 < value.ndim <= _capi.MAX_NDIMS and value.size):
        value = check_array(value, argument, dtypes)  # raises what is wrong
    if _DATA_FIELD is not None:
        address = _read_pointer(id(value) + _DATA_FIELD).value
    else:  # pragma: no cover - CPython and NumPy keep the data field's place
        address = data_pointer(value)
    key = (address, value.shape, layout_value)
    if value.dtype is not _F32:  # the same bytes read as another dtype: another handle
        key += (value.dtype,)
    owner = _INPUTS.get(key)
    if owner is None:
        owner = _Owner(wrap_handle(value, layout_value))
        if len(_INPUTS) >= _INPUTS_MAX:
            _INPUTS.clear()
        _INPUTS[key] = owner
    return owner


class Tensor:
    """A tensor held by libmkcache: float32; int32, int64 or bool data
    (indices and masks); int8 or uint8 (quantized data); float16 or bfloat16.

    ``Tensor(array, layout=None, constant=False)`` wraps a C-contiguous
    numpy array without copying. `layout` ("NCHW"/"NHWC", ...) says
    how a 4-D/5-D array is arranged (default: the layout of an active
    ``mkcache.target_layout`` block, else NCHW; weights are always OIHW).
    ``constant=True`` promises the data never changes, so operators may keep
    converted copies (e.g. reordered conv weights) and skip that work.
    ``dtype=mkcache.bfloat16`` wraps a uint16 array of bfloat16 bits; other
    conversions are ``astype``.
    """

    __slots__ = ("_owner", "_base", "_lazy_layout", "__weakref__")

    def __init__(self, array, layout=None, *, constant: bool = False, dtype=None):
        self._owner = None
        as_value = None
        if dtype is not None:
            as_value = dtype_value(dtype, "dtype")
            if as_value == BF16:
                if not (isinstance(array, np.ndarray) and array.dtype == _U16):
                    raise DTypeError(
                        "dtype=bfloat16 wraps a uint16 array of bfloat16 bits, got "
                        f"{getattr(array, 'dtype', type(array).__name__)}; to convert float32 "
                        "data use Tensor(array).astype(mkcache.bfloat16)")
                array = check_array(array, "array", (_U16,))
            elif as_value != DTYPES.get(getattr(array, "dtype", None)):
                raise DTypeError(
                    f"dtype={dtype!r} differs from the array's {getattr(array, 'dtype', None)}: "
                    "Tensor wraps without converting; use Tensor(array).astype(dtype)")
        if as_value is None:
            array = check_array(array, "array", ANY_DTYPE)
        if layout is None:
            # Not the C thread-local target: operators with a data_format
            # change that, and a wrapped array must not change meaning.
            value = _layout.explicit_target() or _capi.LAYOUT_CHANNELS_FIRST
        else:
            value = _layout.to_enum(layout)
        handle = wrap_handle(array, value, as_value)
        self._owner = _Owner(handle)
        self._base = array
        if constant:
            _lib.mkc_tensor_set_constant(handle, 1)

    @classmethod
    def _adopt(cls, handle) -> "Tensor":
        t = cls.__new__(cls)
        t._owner = _Owner(handle)
        t._base = None
        return t

    @classmethod
    def _of_array(cls, array: np.ndarray, layout_value: int) -> "Tensor":
        """A Tensor over a plain array the library just wrote (the fast
        paths); its C handle is made on first use."""
        t = _new(cls)
        t._owner = None
        t._base = array
        t._lazy_layout = layout_value
        return t

    # ------------------------------------------------------------ queries
    @property
    def handle(self):
        """The C handle (``mkc_tensor*``); raises if the tensor was closed."""
        owner = self._owner
        if owner is None:
            if self._base is None:
                raise InvalidHandleError("tensor was closed (its handle is destroyed)")
            owner = self._owner = _Owner(wrap_handle(self._base, self._lazy_layout))
        return owner.handle

    @property
    def shape(self) -> tuple:
        """Dims in the tensor's own layout (NHWC tensors report [N,H,W,C])."""
        if self._owner is None and self._base is not None:
            return self._base.shape  # not wrapped yet: the array's own shape
        ndims = ctypes.c_int()
        dims = (ctypes.c_int64 * _capi.MAX_NDIMS)()
        _lib.mkc_tensor_get_shape(self.handle, ctypes.byref(ndims), dims)
        return tuple(dims[: ndims.value])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self):
        """A numpy dtype, or mkcache.bfloat16 (numpy has none)."""
        base = self._base
        if base is not None and base.dtype != _U16:  # uint16 bases hold bfloat16 bits
            return base.dtype
        return dtype_of_value(self._dtype_value)

    @property
    def _dtype_value(self) -> int:
        value = ctypes.c_int()
        _lib.mkc_tensor_get_dtype(self.handle, ctypes.byref(value))
        return value.value

    def astype(self, dtype, *, name: str | None = None) -> "Tensor":
        """A new tensor of `dtype` (a numpy dtype or its name, or
        mkcache.bfloat16): mkcache.cast's conversion (floats to integers
        truncated toward zero and saturated, to float16 and bfloat16 rounded
        to the nearest, ties to even)."""
        from . import ops  # ops imports this module
        return ops.cast(self, dtype, name=name)

    @property
    def layout(self) -> str:
        """The plain layout the shape is expressed in: "NCHW", "NHWC", ..."""
        return _layout.to_name(self._layout_value, self.ndim)

    @property
    def _layout_value(self) -> int:
        value = ctypes.c_int()
        _lib.mkc_tensor_get_layout(self.handle, ctypes.byref(value))
        return value.value

    @property
    def format(self) -> str:
        """How the bytes are arranged, in oneDNN's notation ("abcd" = NCHW,
        "acdb" = NHWC, "aBcd16b" = nChw16c)."""
        text = ctypes.c_char_p()
        _lib.mkc_tensor_get_format(self.handle, ctypes.byref(text))
        return text.value.decode()

    @property
    def nbytes(self) -> int:
        """Bytes of the storage (blocked layouts may pad)."""
        n = ctypes.c_size_t()
        _lib.mkc_tensor_get_nbytes(self.handle, ctypes.byref(n))
        return n.value

    def set_constant(self, constant: bool = True) -> None:
        _lib.mkc_tensor_set_constant(self.handle, 1 if constant else 0)

    # ------------------------------------------------------------- export
    def numpy(self, layout=None, *, raw: bool = False) -> np.ndarray:
        """A new plain numpy array. `layout` None: the layout of an active
        ``mkcache.target_layout`` block, else the tensor's own layout.
        A bfloat16 tensor gives float32 (exactly), or with ``raw=True`` its
        bits as uint16."""
        if layout is None:
            value = _layout.explicit_target()
            if value is None and self._owner is None and self._base is not None:
                return self._base.copy()  # a plain array in its own layout already
        else:
            value = _layout.to_enum(layout)
        shape = self.shape
        # The label itself, not its name: a name is given only up to rank 5.
        own = self._layout_value if len(shape) >= 3 else _capi.LAYOUT_CHANNELS_FIRST
        if value is None:
            value = own
        if self.ndim >= 3 and value != _capi.LAYOUT_TARGET and value != own:
            # Re-order the reported dims into the requested layout.
            if value == _capi.LAYOUT_CHANNELS_LAST:
                shape = (shape[0],) + shape[2:] + (shape[1],)
            else:
                shape = (shape[0], shape[-1]) + shape[1:-1]
        dtype = self.dtype
        bits = dtype is bfloat16
        out = np.empty(shape, dtype=_U16 if bits else dtype)
        status = _export(self.handle, value, ctypes.c_void_p(data_pointer(out)),
                         ctypes.c_size_t(out.nbytes))
        if status:
            _capi.raise_for(status)
        if bits and not raw:
            return (out.astype(np.uint32) << 16).view(np.float32)
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    # ---------------------------------------------------------- lifetime
    def close(self) -> None:
        """Destroys the handle now (later use raises InvalidHandleError)."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.destroy()
        self._base = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._owner is None and self._base is None:
            return "<mkcache.Tensor closed>"
        return f"<mkcache.Tensor shape={self.shape} layout={self.layout} format={self.format}>"
