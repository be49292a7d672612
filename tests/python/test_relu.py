"""relu: plain and blocked inputs, in place, no reorder after a conv."""
import numpy as np
import pytest

import mkcache
from reference import conv2d_nchw, relu


@pytest.mark.parametrize("shape", [(1, 16), (7,), (3, 5, 7), (2, 17, 9, 5), (1, 3, 2, 5, 7)])
def test_relu_matches_reference(shape, rng):
    x = rng.standard_normal(shape, dtype=np.float32)
    y = mkcache.relu(x)
    assert y.shape == shape
    np.testing.assert_array_equal(np.asarray(y), relu(x))


def test_relu_in_place_equals_out_of_place(rng):
    x = rng.standard_normal((2, 5, 6, 7), dtype=np.float32)
    expected = relu(x)
    t = mkcache.Tensor(x.copy())
    same = mkcache.relu(t, out=t)
    assert same is t
    np.testing.assert_array_equal(np.asarray(t), expected)
    np.testing.assert_array_equal(np.asarray(mkcache.relu(x)), expected)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_conv_then_relu_performs_no_reorder(data_format, rng):
    x = rng.standard_normal((2, 16, 9, 9), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
    exact, _ = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
    xin = x if data_format == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = mkcache.conv2d(xin, w, padding=1, data_format=data_format)
    before = mkcache.cache.reorder_count()
    z = mkcache.relu(y)
    assert mkcache.cache.reorder_count() == before, "relu converted its input"
    assert z.format == y.format
    assert z.layout == data_format
    out = np.asarray(z)
    if data_format == "NHWC":
        out = out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, relu(exact), rtol=1e-4, atol=1e-4)


def test_relu_into_wrapped_buffer(rng):
    x = rng.standard_normal((3, 4), dtype=np.float32)
    buf = np.full((3, 4), 7, dtype=np.float32)
    mkcache.relu(x, out=mkcache.Tensor(buf))
    np.testing.assert_array_equal(buf, relu(x))


def test_numpy_fast_path_result_is_a_full_tensor(rng):
    """relu(numpy) takes mkc_activation_plain (no handles); its result gets a
    handle only when used, and then behaves like any Tensor."""
    x = rng.standard_normal((2, 4, 5, 3), dtype=np.float32)
    with mkcache.target_layout("NHWC"):
        y = mkcache.relu(x)
    assert y._owner is None  # nothing wrapped yet
    assert y.shape == x.shape
    np.testing.assert_array_equal(y.numpy(), relu(x))
    assert y.layout == "NHWC"  # the label a wrapped array would have had
    assert y._owner is not None
    z = mkcache.sigmoid(y)  # used as an operator input
    np.testing.assert_allclose(z.numpy(), 1 / (1 + np.exp(-relu(x))), rtol=1e-6, atol=1e-6)
    with mkcache.target_layout("NHWC"):
        mkcache.relu(x, out=z)  # and as out= (x wrapped with the same label)
    np.testing.assert_array_equal(z.numpy(), relu(x))
    y.close()
    with pytest.raises(mkcache.InvalidHandleError):
        y.numpy("NCHW")
    lazy = mkcache.gelu(x)
    lazy.close()  # closing one never wrapped
    with pytest.raises(mkcache.InvalidHandleError):
        _ = lazy.handle


def test_numpy_fast_path_rejects_like_the_general_path(rng):
    with pytest.raises(mkcache.InvalidArgumentError, match="C-contiguous"):
        mkcache.relu(rng.standard_normal((4, 6), dtype=np.float32)[:, ::2])
    with pytest.raises(mkcache.DTypeError, match="float32"):
        mkcache.relu(np.ones((3, 3)))


def test_activation_plain_c_entry(rng):
    """The C fast entry: in place (dst == src), and its errors."""
    import ctypes
    from mkcache._capi import ActivationCall, lib
    x = rng.standard_normal((3, 7), dtype=np.float32)
    expected = relu(x)
    call = ActivationCall(1, 0.0, 0.0, None, 2)
    call.dims[:2] = (3, 7)
    ptr = x.ctypes.data
    lib.mkc_activation_plain(ctypes.byref(call), ptr, ptr)
    np.testing.assert_array_equal(x, expected)
    with pytest.raises(mkcache.InvalidArgumentError, match="NULL"):
        lib.mkc_activation_plain(ctypes.byref(call), None, ptr)
    with pytest.raises(mkcache.InvalidArgumentError, match="NULL"):
        lib.mkc_activation_plain(None, ptr, ptr)
    for field, value, match in [("ndims", 0, "ndims"), ("ndims", 7, "ndims"),
                                ("kind", 77, "unsupported kind")]:
        bad = ActivationCall.from_buffer_copy(call)
        setattr(bad, field, value)
        with pytest.raises(mkcache.InvalidArgumentError, match=match):
            lib.mkc_activation_plain(ctypes.byref(bad), ptr, ptr)
    bad = ActivationCall.from_buffer_copy(call)
    bad.dims[1] = 0
    with pytest.raises(mkcache.InvalidArgumentError):
        lib.mkc_activation_plain(ctypes.byref(bad), ptr, ptr)
    np.testing.assert_array_equal(x, expected)  # nothing written by a failed call


def test_activation_plain_ref_c_entry(rng):
    """The entry the fast path calls reads the buffers from where their
    addresses are kept (here ctypes pointer cells; numpy's data fields on the
    fast path): into another buffer, in place, and its errors, which write
    nothing."""
    import ctypes
    from mkcache._capi import ActivationCall, lib
    x = rng.standard_normal((5, 3, 3), dtype=np.float32)
    y = np.full_like(x, 7.0)
    call = ActivationCall(1, 0.0, 0.0, None, 3)
    call.dims[:3] = (5, 3, 3)
    src, dst = ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data)
    lib.mkc_activation_plain_ref(ctypes.byref(call), ctypes.addressof(src), ctypes.addressof(dst))
    np.testing.assert_array_equal(y, relu(x))
    np.testing.assert_array_equal(mkcache.relu(x).numpy(), relu(x))  # the fast path agrees
    before = x.copy()
    null = ctypes.c_void_p(None)
    for refs in [(None, ctypes.addressof(dst)), (ctypes.addressof(src), None),
                 (ctypes.addressof(null), ctypes.addressof(dst))]:
        with pytest.raises(mkcache.InvalidArgumentError, match="NULL"):
            lib.mkc_activation_plain_ref(ctypes.byref(call), *refs)
    with pytest.raises(mkcache.InvalidArgumentError, match="NULL"):
        lib.mkc_activation_plain_ref(None, ctypes.addressof(src), ctypes.addressof(dst))
    np.testing.assert_array_equal(x, before)
    lib.mkc_activation_plain_ref(ctypes.byref(call), ctypes.addressof(src), ctypes.addressof(src))
    np.testing.assert_array_equal(x, relu(before))  # in place


def test_data_address_reads_the_array_data_pointer():
    """The fast path reads an array's data pointer from the object itself
    (verified at import); it must agree with NumPy for views, read-only and
    odd-offset arrays."""
    from mkcache.tensor import data_address
    base = np.arange(64, dtype=np.float32)
    ro = base.copy()
    ro.flags.writeable = False
    for a in [base, base[5:], base[1:].reshape(9, 7), ro, np.frombuffer(bytes(40), np.float32)]:
        assert data_address(a).value == a.__array_interface__["data"][0]


def test_fast_path_on_read_only_and_sliced_arrays(rng):
    base = rng.standard_normal(41, dtype=np.float32)
    view = base[1:].reshape(5, 8)  # data not at the start of its buffer
    ro = view.copy()
    ro.flags.writeable = False
    for x in (view, ro):
        np.testing.assert_array_equal(mkcache.relu(x).numpy(), relu(x))
        np.testing.assert_array_equal(mkcache.leaky_relu(x, 0.2).numpy(),
                                      np.where(x > 0, x, np.float32(0.2) * x))


def test_fast_path_prepared_calls_follow_shape_and_parameters(rng):
    """Prepared calls are cached per kind, parameters, name and shape: a
    new shape or slope never reuses another's."""
    for shape in [(4,), (2, 3), (3, 2), (2, 3, 4), (1, 2, 3, 4, 5)]:
        x = rng.standard_normal(shape, dtype=np.float32)
        for slope in (0.1, 0.3):
            np.testing.assert_allclose(mkcache.leaky_relu(x, slope).numpy(),
                                       np.where(x > 0, x, np.float32(slope) * x), rtol=1e-6)
        np.testing.assert_array_equal(mkcache.relu(x, name="named").numpy(), relu(x))
        np.testing.assert_array_equal(mkcache.relu(x).numpy(), relu(x))


def test_fast_path_names(rng):
    """A named relu on numpy takes the fast path too: its entry carries the
    name; a name that is not a str is rejected every time."""
    x = rng.standard_normal((2, 5), dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(mkcache.relu(x, name="fast|named").numpy(), relu(x))
    assert mkcache.cache.make_key("fast|named", (2, 5), suffix=1) in \
        [k for _, k in mkcache.cache.keys()]
    for _ in range(2):
        with pytest.raises(mkcache.InvalidArgumentError, match="name"):
            mkcache.relu(x, name=5)


@pytest.mark.parametrize("size", [1023, 1024, 1025, 40000])
def test_fast_path_on_both_sides_of_the_gil_threshold(size, rng):
    """Arrays up to SERIAL_ELEMENTS are computed with the GIL held, larger
    ones release it: both give the reference result (and the same as the
    general path for another activation)."""
    x = rng.standard_normal((1, size), dtype=np.float32)
    np.testing.assert_array_equal(mkcache.relu(x).numpy(), relu(x))
    np.testing.assert_allclose(mkcache.gelu(x).numpy(),
                               mkcache.gelu(mkcache.Tensor(x)).numpy(), rtol=1e-6)


def test_large_fast_path_from_many_threads(rng):
    """Large arrays run with the GIL released: four Python threads at once
    still each get the reference result."""
    import threading
    x = rng.standard_normal((64, 64, 64), dtype=np.float32)
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(np.array_equal(mkcache.relu(x).numpy(), relu(x)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80 and all(results)
