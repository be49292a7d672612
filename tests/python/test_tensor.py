"""Tensors: wrapping without copy, shapes in the caller's layout, export."""
import numpy as np
import pytest

import mkcache


def test_wrap_does_not_copy(rng):
    x = rng.standard_normal((2, 3), dtype=np.float32)
    t = mkcache.Tensor(x)
    x[0, 0] = 42.0
    assert np.asarray(t)[0, 0] == 42.0
    assert t.shape == (2, 3)
    assert t.dtype == np.float32
    assert t.nbytes == x.nbytes
    assert t.format == "ab"


def test_nhwc_shape_and_export(rng):
    x = rng.standard_normal((2, 4, 5, 3), dtype=np.float32)  # NHWC
    t = mkcache.Tensor(x, "NHWC")
    assert t.shape == (2, 4, 5, 3)
    assert t.layout == "NHWC"
    assert t.format == "acdb"
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(t.numpy("NCHW"), x.transpose(0, 3, 1, 2))
    with mkcache.target_layout("NCHW"):
        np.testing.assert_array_equal(np.asarray(t), x.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(np.asarray(t), x)


def test_target_layout_context_and_conv_sets_it(rng):
    assert mkcache.get_target_layout() == "NCHW"
    with mkcache.target_layout("NHWC"):
        assert mkcache.get_target_layout() == "NHWC"
        t = mkcache.Tensor(rng.standard_normal((1, 2, 3, 4), dtype=np.float32))
        assert t.layout == "NHWC"
    assert mkcache.get_target_layout() == "NCHW"
    x = rng.standard_normal((1, 5, 5, 2), dtype=np.float32)
    w = rng.standard_normal((3, 2, 1, 1), dtype=np.float32)
    mkcache.conv2d(x, w, data_format="NHWC")
    # Seed 001: a model run in NHWC makes NHWC the thread's target layout.
    assert mkcache.get_target_layout() == "NHWC"


def test_blocked_result_exports_in_both_layouts(rng):
    x = rng.standard_normal((1, 16, 6, 6), dtype=np.float32)
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    y = mkcache.conv2d(x, w, padding=1)
    nchw = y.numpy("NCHW")
    nhwc = y.numpy("NHWC")
    np.testing.assert_array_equal(nchw.transpose(0, 2, 3, 1), nhwc)
    assert y.nbytes >= nchw.nbytes


def test_closed_tensor_raises():
    t = mkcache.Tensor(np.ones((2, 2), dtype=np.float32))
    t.close()
    with pytest.raises(mkcache.InvalidHandleError):
        t.numpy()
    with pytest.raises(mkcache.Error):
        mkcache.relu(t)
    t.close()  # closing twice is harmless
    assert "closed" in repr(t)


def test_context_manager_closes():
    with mkcache.Tensor(np.ones(3, dtype=np.float32)) as t:
        assert t.shape == (3,)
    with pytest.raises(mkcache.Error):
        _ = t.shape


def test_wrapping_after_nhwc_conv_keeps_nchw_default(rng):
    x = rng.standard_normal((1, 5, 5, 2), dtype=np.float32)
    mkcache.conv2d(x, np.ones((3, 2, 1, 1), np.float32), data_format="NHWC")
    # The C thread-local target is NHWC now, but a freshly wrapped 4-D array
    # (e.g. OIHW weights) must not silently change meaning.
    w = mkcache.Tensor(np.ones((4, 2, 3, 3), np.float32))
    assert w.layout == "NCHW" and w.shape == (4, 2, 3, 3)


def test_target_layout_block_is_per_thread(rng):
    """A target_layout block on one thread changes neither another thread's
    wrapping default nor its exports; a thread that never opened a block
    sees none."""
    import threading
    from mkcache import _layout

    x = rng.standard_normal((1, 3, 4, 5), dtype=np.float32)
    inside, seen = threading.Event(), {}

    def other():
        inside.wait()
        seen["explicit"] = _layout.explicit_target()
        seen["shape"] = np.asarray(mkcache.relu(mkcache.Tensor(x))).shape

    t = threading.Thread(target=other)
    t.start()
    with mkcache.target_layout("NHWC"):
        assert _layout.explicit_target() == _layout.to_enum("NHWC")
        inside.set()
        t.join()
    assert seen == {"explicit": None, "shape": (1, 3, 4, 5)}
    assert _layout.explicit_target() is None
