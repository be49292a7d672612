"""Bad input raises mkcache.Error (with a message naming the argument) and
never crashes the process."""
import ctypes

import numpy as np
import pytest

import mkcache
from mkcache import _capi

lib = _capi.lib
X = np.ones((1, 4, 6, 6), dtype=np.float32)
W = np.ones((8, 4, 3, 3), dtype=np.float32)


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(x=X.astype(np.float64)), mkcache.DTypeError, "float32"),
    (dict(x=X.astype(np.int32)), TypeError, "float32"),
    (dict(x=np.asfortranarray(np.ones((1, 4, 6, 7), np.float32))), ValueError, "contiguous"),
    (dict(x=X[:, :, ::2]), ValueError, "contiguous"),
    (dict(x=np.ones((4, 6, 6), np.float32)), ValueError, "4-D"),
    (dict(x=None), mkcache.Error, "None"),
    (dict(x=[[1.0]]), TypeError, "numpy"),
    (dict(weight=np.ones((8, 3, 3, 3), np.float32)), ValueError, "channels"),
    (dict(weight=np.ones((8, 4, 3), np.float32)), ValueError, "weights"),
    (dict(weight=np.ones((6, 1, 3, 3), np.float32), groups=4), ValueError, "divisible"),
    (dict(weight=np.ones((8, 4, 3, 3), np.float32), groups=0), ValueError, "groups"),
    (dict(stride=0), ValueError, "stride"),
    (dict(stride=-1), ValueError, "stride"),
    (dict(padding=-1), ValueError, "padding"),
    (dict(padding=(1, 2, 3)), ValueError, "padding"),
    (dict(dilation=0), ValueError, "dilation"),
    (dict(weight=np.ones((8, 4, 9, 9), np.float32)), ValueError, "larger than"),
    (dict(bias=np.ones(7, np.float32)), ValueError, "bias"),
    (dict(data_format="NCWH"), ValueError, "data_format"),
    (dict(activation="bogus"), ValueError, "activation"),
    (dict(stride=2 ** 40), ValueError, "absurd"),
    (dict(x=np.ones((1, 4, 0, 6), np.float32)), ValueError, "zero-size"),
    (dict(name=5), ValueError, "name"),
])
def test_conv2d_bad_input(kwargs, exc, words):
    args = dict(x=X, weight=W)
    args.update(kwargs)
    x, w = args.pop("x"), args.pop("weight")
    with pytest.raises(exc) as info:
        mkcache.conv2d(x, w, **args)
    assert isinstance(info.value, mkcache.Error)
    assert words.lower() in str(info.value).lower()


def test_relu_bad_input():
    with pytest.raises(mkcache.DTypeError):
        mkcache.relu(np.ones(3, dtype=np.float16))
    with pytest.raises(mkcache.Error):
        mkcache.relu(None)
    with pytest.raises(mkcache.Error):
        mkcache.relu(np.ones((1,) * 7, dtype=np.float32))
    with pytest.raises(mkcache.Error, match="shape"):
        mkcache.relu(np.ones(3, np.float32), out=mkcache.Tensor(np.ones(4, np.float32)))


def test_c_level_bad_handles_and_sizes():
    t = _capi.tensor_p()
    dims = (ctypes.c_int64 * 2)(2, 3)
    with pytest.raises(mkcache.InvalidArgumentError, match="data"):
        lib.mkc_tensor_wrap(_capi.DTYPE_F32, 2, dims, 1, None, ctypes.byref(t))
    huge = (ctypes.c_int64 * 4)(2 ** 20, 2 ** 20, 2 ** 20, 2 ** 20)
    with pytest.raises(mkcache.InvalidArgumentError, match="too large"):
        lib.mkc_tensor_create(_capi.DTYPE_F32, 4, huge, 1, ctypes.byref(t))
    neg = (ctypes.c_int64 * 2)(2, -3)
    with pytest.raises(mkcache.InvalidArgumentError, match=">= 1"):
        lib.mkc_tensor_create(_capi.DTYPE_F32, 2, neg, 1, ctypes.byref(t))
    with pytest.raises(mkcache.UnsupportedError, match="dtype"):
        lib.mkc_tensor_create(99, 2, dims, 1, ctypes.byref(t))
    with pytest.raises(mkcache.InvalidArgumentError, match="layout"):
        lib.mkc_tensor_create(_capi.DTYPE_F32, 2, dims, 9, ctypes.byref(t))
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        lib.mkc_tensor_create(_capi.DTYPE_F32, 0, dims, 1, ctypes.byref(t))
    # A foreign pointer is reported, not dereferenced.
    fake = ctypes.create_string_buffer(256)
    shape = (ctypes.c_int64 * 6)()
    nd = ctypes.c_int()
    with pytest.raises(mkcache.InvalidHandleError, match="live tensor"):
        lib.mkc_tensor_get_shape(ctypes.addressof(fake), ctypes.byref(nd), shape)
    with pytest.raises(mkcache.InvalidHandleError):
        lib.mkc_tensor_destroy(ctypes.addressof(fake))
    # A destroyed handle too.
    lib.mkc_tensor_create(_capi.DTYPE_F32, 2, dims, 1, ctypes.byref(t))
    dead = t.value
    lib.mkc_tensor_destroy(t)
    with pytest.raises(mkcache.InvalidHandleError):
        lib.mkc_tensor_get_shape(dead, ctypes.byref(nd), shape)
    # NULL out-parameters and a too-small export buffer.
    with pytest.raises(mkcache.InvalidArgumentError):
        lib.mkc_get_version(None, None, None)
    good = mkcache.Tensor(np.ones((2, 3), np.float32))
    small = ctypes.create_string_buffer(8)
    with pytest.raises(mkcache.BufferTooSmallError):
        lib.mkc_tensor_export(good.handle, 1, ctypes.addressof(small), 8)
    with pytest.raises(mkcache.InvalidArgumentError):
        lib.mkc_cache_set_capacity(-1)
    with pytest.raises(mkcache.InvalidArgumentError, match="key"):
        lib.mkc_cache_set_blob(None, ctypes.addressof(small), 1, _capi.DELETER())
    with pytest.raises(mkcache.InvalidArgumentError):
        lib.mkc_set_target_layout(0)


def test_failed_call_leaves_out_parameter_and_state_alone():
    out = mkcache.Tensor(np.zeros((1, 8, 4, 4), np.float32))
    with pytest.raises(mkcache.Error):
        mkcache.conv2d(X, np.ones((8, 5, 3, 3), np.float32), out=out)
    np.testing.assert_array_equal(np.asarray(out), 0)
    # The library still works afterwards.
    assert mkcache.conv2d(X, W).shape == (1, 8, 4, 4)


def test_status_strings_and_last_error():
    assert lib.mkc_status_string(2) == b"MKC_STATUS_INVALID_HANDLE"
    assert lib.mkc_status_string(1234) == b"MKC_STATUS_UNKNOWN"
    with pytest.raises(mkcache.Error) as info:
        lib.mkc_cache_set_capacity(-5)
    assert info.value.status == "MKC_STATUS_INVALID_ARGUMENT"
    assert b"capacity" in lib.mkc_last_error()


@pytest.mark.parametrize("bad", [1, b"conv", ["a"], 2.5])
def test_name_must_be_text(bad):
    """A cache name is a str (or None): anything else is refused before C
    sees it, also unhashable values."""
    x = np.ones((1, 4), dtype=np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="name must be a str"):
        mkcache.sigmoid(mkcache.Tensor(x), name=bad)


def test_a_name_is_its_text_wherever_it_lies():
    """Names built anew for every call (new bytes at a new address each
    time) find their entries like one kept name would: the library tells
    calls apart by a name's text."""
    x = mkcache.Tensor(np.ones((1, 4), dtype=np.float32))
    mkcache.sigmoid(x, name="".join(["text", "-", "name"]))
    before = mkcache.cache.stats()
    for i in range(5):
        mkcache.sigmoid(x, name="".join(["text", "-", "name"]))
    after = mkcache.cache.stats()
    assert after["misses"] == before["misses"] and after["hits"] >= before["hits"] + 5



# Memory that never holds a tensor. (A destroyed handle's address does not
# do: malloc hands it to the next tensor made, which is live.)
_NOT_A_TENSOR = ctypes.create_string_buffer(256)


def _dead_handle() -> int:
    """An address that is no live tensor handle."""
    return ctypes.addressof(_NOT_A_TENSOR)


def test_norms_name_the_dead_handle():
    """batch_norm and layer_norm check all their tensor arguments in one go
    and name the one that is not live; nothing is created."""
    dead = _dead_handle()
    x = mkcache.Tensor(np.ones((2, 3, 4, 4), np.float32))
    vec = [mkcache.Tensor(np.ones(3, np.float32)) for _ in range(4)]
    bp = _capi.BatchNormParams()
    lib.mkc_batch_norm_params_init(ctypes.byref(bp))
    for i, arg in enumerate(["mean", "variance", "scale", "shift"]):
        args = [v.handle for v in vec]
        args[i] = dead
        dst = _capi.tensor_p()
        with pytest.raises(mkcache.InvalidHandleError, match=f"batch_norm: {arg}"):
            lib.mkc_batch_norm(ctypes.byref(bp), x.handle, *args, None, None, ctypes.byref(dst))
        assert not dst
    y = mkcache.Tensor(np.ones((2, 3), np.float32))
    lp = _capi.LayerNormParams()
    lib.mkc_layer_norm_params_init(ctypes.byref(lp))
    dst = _capi.tensor_p()
    with pytest.raises(mkcache.InvalidHandleError, match="layer_norm: shift"):
        lib.mkc_layer_norm(ctypes.byref(lp), y.handle, None, dead, ctypes.byref(dst))
    dst = _capi.tensor_p(dead)
    with pytest.raises(mkcache.InvalidHandleError, match=r"layer_norm: \*dst"):
        lib.mkc_layer_norm(ctypes.byref(lp), y.handle, None, None, ctypes.byref(dst))


def test_backward_ops_name_the_dead_handle():
    """Every backward entry point checks its tensor inputs in one go and
    names the one that is not live (op: argument); no gradient is made."""
    dead = _dead_handle()
    live = mkcache.Tensor(np.ones((2, 3, 4, 4), np.float32))
    ref = ctypes.byref
    params = {name: cls() for name, cls in (("conv", _capi.ConvParams), ("pool", _capi.PoolParams),
                                            ("linear", _capi.LinearParams),
                                            ("ln", _capi.LayerNormParams),
                                            ("bn", _capi.BatchNormParams), ("lrn", _capi.LrnParams),
                                            ("mm", _capi.MatmulParams))}
    # function, arguments before the tensors, tensor argument names, gradient outputs
    cases = [
        ("mkc_conv2d_backward", [ref(params["conv"])], ["src", "weights", "diff_dst"], 3),
        ("mkc_pool_backward", [ref(params["pool"])], ["src", "diff_dst"], 1),
        ("mkc_activation_backward", [1, ctypes.c_float(0), ctypes.c_float(0), None],
         ["src", "diff_dst"], 1),
        ("mkc_softmax_backward", [-1, 0, None], ["dst", "diff_dst"], 1),
        ("mkc_linear_backward", [ref(params["linear"])], ["src", "weights", "diff_dst"], 3),
        ("mkc_layer_norm_backward", [ref(params["ln"])], ["src", "scale", "shift", "diff_dst"],
         3),
        ("mkc_batch_norm_backward", [ref(params["bn"])],
         ["src", "mean", "variance", "scale", "shift", "diff_dst"], 3),
        ("mkc_lrn_backward", [ref(params["lrn"])], ["src", "diff_dst"], 1),
        ("mkc_binary_backward", [1, None], ["a", "b", "diff_dst"], 2),
        ("mkc_matmul_backward", [ref(params["mm"])], ["a", "b", "bias", "diff_dst"], 3),
    ]
    for fn, head, names, n_out in cases:
        op = fn[len("mkc_"):]
        for i, arg in enumerate(names):
            tensors = [live.handle] * len(names)
            tensors[i] = dead
            outs = [_capi.tensor_p() for _ in range(n_out)]
            with pytest.raises(mkcache.InvalidHandleError, match=f"{op}: {arg} is not a live"):
                getattr(lib, fn)(*head, *tensors, *[ref(o) for o in outs])
            assert not any(outs), fn


def test_remembered_batch_norm_still_checks_every_vector():
    """An inference batch_norm remembered for its arguments still refuses a
    call whose (unused in inference) batch statistics are malformed: every
    argument the checks read is part of what is remembered."""
    x = mkcache.Tensor(np.ones((2, 3, 4, 4), np.float32))
    vec = [mkcache.Tensor(np.ones(3, np.float32)) for _ in range(6)]
    bad = mkcache.Tensor(np.ones(5, np.float32))
    bp = _capi.BatchNormParams()
    lib.mkc_batch_norm_params_init(ctypes.byref(bp))
    handles = [v.handle for v in vec]
    for _ in range(3):  # remembered from the second call on
        dst = _capi.tensor_p()
        lib.mkc_batch_norm(ctypes.byref(bp), x.handle, *handles, ctypes.byref(dst))
        mkcache.Tensor._adopt(dst).close()
    for i, arg in ((4, "batch_mean"), (5, "batch_variance"), (0, "mean")):
        args = list(handles)
        args[i] = bad.handle
        dst = _capi.tensor_p()
        with pytest.raises(mkcache.InvalidArgumentError, match=arg):
            lib.mkc_batch_norm(ctypes.byref(bp), x.handle, *args, ctypes.byref(dst))
        assert not dst
