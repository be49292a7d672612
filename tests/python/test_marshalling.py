"""How numpy arguments and parameters reach the library: read-only handles
kept between calls (tensor.input_owner) and params structs prepared once per
distinct arguments (ops._prepared). Both are caches keyed on what a call
passes; these tests change one thing at a time and check every result
against numpy."""
import threading

import numpy as np
import pytest

import mkcache
from mkcache import ops
from mkcache import tensor as tensor_module
from reference import (assert_close, assert_close_elementwise, batch_norm_nchw, conv2d_nchw,
                       layer_norm as ref_ln)


def _layer_norm_ok(y, x, scale, shift):
    assert_close_elementwise(np.asarray(y), ref_ln(x, -1, scale, shift), "layer_norm", ulps=512)


def test_changed_contents_of_one_array_are_read_again(rng):
    """The kept handle points at the array's memory, it holds no copy."""
    x = rng.standard_normal((7, 33), dtype=np.float32)
    scale, shift = rng.standard_normal(33, dtype=np.float32), rng.standard_normal(33,
                                                                                  dtype=np.float32)
    for _ in range(3):
        _layer_norm_ok(mkcache.layer_norm(x, scale, shift), x, scale, shift)
        x *= -2.0
        x += 1.0
        scale[::2] += 0.5


def test_one_address_with_other_shapes(rng):
    """Views starting at one address with different shapes are different
    arguments (the shape is part of what a kept handle stands for)."""
    buf = rng.standard_normal(6 * 40, dtype=np.float32)
    for rows, cols in ((6, 40), (40, 6), (12, 20), (6, 20)):
        x = buf[:rows * cols].reshape(rows, cols)
        assert tensor_module.data_pointer(x) == tensor_module.data_pointer(buf)
        _layer_norm_ok(mkcache.layer_norm(x), x, None, None)


def test_one_array_in_both_layouts(rng):
    """The layout label is part of what a kept handle stands for: the same
    array read as NCHW and then as NHWC is two different inputs."""
    x = rng.standard_normal((2, 5, 6, 5), dtype=np.float32)   # square so both layouts fit
    w = rng.standard_normal((3, 5, 3, 3), dtype=np.float32)
    for fmt in ("NCHW", "NHWC", "NCHW"):
        y = mkcache.conv2d(x, w, padding=1, data_format=fmt)
        xn = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        exact, magnitude = conv2d_nchw(xn, w, pads=(1, 1, 1, 1))
        assert_close(y.numpy("NCHW"), exact, magnitude, 5 * 9, f"conv2d {fmt}")


def test_freed_arrays_addresses_reused(rng):
    """Arrays made and dropped one after another often land at one address:
    each call still reads the array it is given."""
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    for i in range(20):
        x = rng.standard_normal((1, 3, 7 + i % 3, 9), dtype=np.float32)
        y = mkcache.conv2d(x, w, padding=1).numpy()
        exact, magnitude = conv2d_nchw(x, w, pads=(1, 1, 1, 1))
        assert_close(y, exact, magnitude, 27, f"conv2d call {i}")
        del x


def test_kept_handles_are_bounded(rng, monkeypatch):
    monkeypatch.setattr(tensor_module, "_INPUTS_MAX", 8)
    monkeypatch.setattr(tensor_module, "_INPUTS", {})
    arrays = [rng.standard_normal((3, 4 + i), dtype=np.float32) for i in range(30)]
    for x in arrays:
        _layer_norm_ok(mkcache.layer_norm(x), x, None, None)
        assert len(tensor_module._INPUTS) <= 8
    for x in arrays:  # evicted ones are wrapped again
        _layer_norm_ok(mkcache.layer_norm(x), x, None, None)


def test_training_batch_norm_writes_its_own_handles(rng):
    """Training updates the running statistics in place: they get handles of
    their own (not kept ones), and the next inference call reads the
    updated values."""
    x = rng.standard_normal((4, 3, 5, 5), dtype=np.float32)
    mean = np.zeros(3, np.float32)
    var = np.ones(3, np.float32)
    y_before = mkcache.batch_norm(x, mean, var)            # kept handles for mean, var
    assert_close_elementwise(np.asarray(y_before), batch_norm_nchw(x, mean, var), "inference")
    _, batch_mean, batch_var = mkcache.batch_norm(x, mean, var, training=True, momentum=0.5)
    np.testing.assert_allclose(mean, 0.5 * batch_mean, rtol=1e-5, atol=1e-6)
    y_after = mkcache.batch_norm(x, mean, var)
    assert_close_elementwise(np.asarray(y_after), batch_norm_nchw(x, mean, var), "after update")


def test_kept_handles_from_many_threads(rng):
    """Threads passing their own arrays and one shared array at once (a kept
    handle is read from many threads, as the C contract allows)."""
    shared = rng.standard_normal(64, dtype=np.float32)
    errors = []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(40):
                x = r.standard_normal((5, 64), dtype=np.float32)
                _layer_norm_ok(mkcache.layer_norm(x, shared, shared), x, shared, shared)
        except Exception as exc:  # reported below, with the thread's seed
            errors.append((seed, exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_prepared_params_follow_every_argument(rng):
    x = rng.standard_normal((3, 2, 4, 5), dtype=np.float32)
    for eps in (1e-5, 0.5, 1e-5):
        got = np.asarray(mkcache.layer_norm(x, epsilon=eps))
        assert_close_elementwise(got, ref_ln(x, -1, eps=eps), f"epsilon {eps}", ulps=512)
    for axis in (-1, 2, 1, -1):
        got = np.asarray(mkcache.layer_norm(x, begin_norm_axis=axis))
        assert_close_elementwise(got, ref_ln(x, axis), f"axis {axis}", ulps=512)


def test_prepared_params_keep_checking_types():
    """An int-valued float equals the int (one dict key) but is refused
    where an int is needed, also after the int's params were prepared."""
    x = np.ones((2, 3, 4), np.float32)
    mkcache.layer_norm(x, begin_norm_axis=1)
    with pytest.raises(mkcache.Error):
        mkcache.layer_norm(x, begin_norm_axis=1.0)
    mkcache.lrn(np.ones((1, 4, 3, 3), np.float32), 3)
    with pytest.raises(mkcache.Error):
        mkcache.lrn(np.ones((1, 4, 3, 3), np.float32), 3.0)


def test_prepared_params_unhashable_arguments():
    """A list argument cannot be a key: the struct is built for that call."""
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    a = mkcache.max_pool2d(x, [2, 2], [2, 2]).numpy()
    b = mkcache.max_pool2d(x, (2, 2), (2, 2)).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, x.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5)))


def test_prepared_params_are_bounded(monkeypatch):
    monkeypatch.setattr(ops, "_PARAMS", {})
    x = np.ones((2, 8), np.float32)
    for i in range(5000):
        mkcache.layer_norm(x, epsilon=1e-5 + i * 1e-9)
    assert len(ops._PARAMS) <= 4097
