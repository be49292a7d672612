"""mkcache.trace: a function written with the eager operators, run once on
symbolic values and compiled, computes what the function computes eagerly;
other threads keep computing eagerly while a trace runs; what cannot be
traced is refused with a clear message."""
import threading
import time

import numpy as np
import pytest

import mkcache
from mkcache import relu as bound_relu  # bound before any trace: the eager function

RNG = np.random.default_rng(21)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


W1, B1 = rand(8, 3, 3, 3, scale=0.3), rand(8, scale=0.1)
W2 = rand(10, 8, scale=0.3)


def cnn(x):
    y = mkcache.conv2d(x, W1, B1, padding=1, activation="relu", name="conv")
    y = mkcache.max_pool2d(y, 2)
    y = mkcache.flatten(mkcache.global_avg_pool(y))
    return mkcache.softmax(mkcache.linear(y, W2))


def close(got, want):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_a_traced_cnn_computes_what_the_function_computes():
    x = rand(2, 3, 9, 11)
    with mkcache.trace(cnn, x, dynamic={"x": 0}) as prog:
        assert prog.input_names == ["x"] and prog.output_names == ["output"]
        for batch in (2, 5):
            xb = rand(batch, 3, 9, 11)
            close(prog.run(x=xb)["output"], cnn(xb))
        assert "(conv2d 'conv')" in prog.plan()  # name= names the node
    assert mkcache.relu is bound_relu and mkcache.conv2d.__module__ == "mkcache.ops"


def test_a_traced_attention_block():
    """Heads by reshape + transpose, scaled scores, softmax, context: the
    shape nodes become views, the scale the matmul's."""
    b, s, h, d = 2, 7, 3, 8
    wq, wk, wv = (rand(h * d, h * d, scale=0.3) for _ in range(3))

    def attention(x):
        def heads(w):
            return mkcache.transpose(mkcache.reshape(mkcache.linear(x, w), (b, s, h, d)),
                                     (0, 2, 1, 3))
        q, k, v = heads(wq), heads(wk), heads(wv)
        p = mkcache.softmax(mkcache.mul(mkcache.matmul(q, k, transpose_b=True), 1 / np.sqrt(d)))
        ctx = mkcache.matmul(p, v)
        return mkcache.reshape(mkcache.transpose(ctx, (0, 2, 1, 3)), (b, s, h * d))

    x = rand(b, s, h * d)
    with mkcache.trace(attention, x) as prog:
        close(prog.run(x=x)["output"], attention(x))
        m = prog.memory
        assert m["views"] == 8 and m["converters"] == 0
        assert "scale" in prog.plan().splitlines()[0]


def test_outputs_and_inputs_are_named():
    def two(a, b):
        return mkcache.add(a, b), mkcache.mul(a, b)

    def named(a, b):
        return {"sum": mkcache.add(a, b), "relu": mkcache.relu(a)}

    a, b = rand(3, 4), rand(3, 4)
    with mkcache.trace(two, a, b) as prog:
        assert prog.input_names == ["a", "b"]
        out = prog.run(a=a, b=b)
        close(out["output0"], a + b)
        close(out["output1"], a * b)
    with mkcache.trace(named, a, b) as prog:
        out = prog.run(a=a, b=b)
        assert set(out) == {"sum", "relu"}
        close(out["relu"], np.maximum(a, 0))
    with mkcache.trace(lambda *xs: mkcache.add(*xs), a, b) as prog:  # no names to match
        assert prog.input_names == ["x0", "x1"]


def test_channels_last_inputs():
    x = rand(2, 3, 9, 11)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    w = rand(8, 3, 3, 3)

    def f(x):
        return mkcache.conv2d(x, w, padding=1, data_format="NHWC")

    with mkcache.trace(f, nhwc, layouts={"x": "NHWC"}) as prog:
        close(prog.run(x=nhwc)["output"], f(nhwc))


def test_what_cannot_be_traced_is_refused():
    x = rand(2, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match="out= cannot be traced"):
        mkcache.trace(lambda x: mkcache.relu(x, out=np.empty((2, 4), np.float32)), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="training=True cannot be traced"):
        mkcache.trace(lambda x: mkcache.layer_norm(x, training=True), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="must return what it computed"):
        mkcache.trace(lambda x: np.zeros(3), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="must return what it computed"):
        mkcache.trace(lambda x: (mkcache.relu(x), 3), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="a name bound before the trace"):
        mkcache.trace(lambda x: bound_relu(x), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="no input named 'y'"):
        mkcache.trace(lambda x: mkcache.relu(x), x, dynamic={"y": 0})
    with pytest.raises(mkcache.InvalidArgumentError, match="already tracing"):
        mkcache.trace(lambda x: mkcache.trace(lambda y: y, x), x)
    with pytest.raises(mkcache.InvalidArgumentError, match="must be an array"):
        mkcache.trace(lambda x: mkcache.relu(x), 3.0)
    # A shape error names the operator, as the graph's own does.
    with pytest.raises(mkcache.InvalidArgumentError, match="inner dims"):
        mkcache.trace(lambda x: mkcache.matmul(x, x), x)
    # Every refusal restored the eager functions.
    assert mkcache.relu is bound_relu
    np.testing.assert_array_equal(np.asarray(mkcache.relu(x)), np.maximum(x, 0))


def test_other_threads_compute_eagerly_while_a_trace_runs():
    x = rand(4, 16)
    tracing, done = threading.Event(), threading.Event()
    errors = []

    def slow(v):
        tracing.set()
        done.wait(5)  # the names stay swapped meanwhile
        return mkcache.relu(v)

    def eager():
        tracing.wait(5)
        try:
            for _ in range(200):
                y = mkcache.relu(x)  # the recording wrapper, computing eagerly
                assert isinstance(y, mkcache.Tensor)
                np.testing.assert_array_equal(np.asarray(y), np.maximum(x, 0))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=eager)
    t.start()
    with mkcache.trace(slow, x) as prog:
        np.testing.assert_array_equal(prog.run(v=x)["output"], np.maximum(x, 0))
    t.join()
    assert not errors, errors
    assert mkcache.relu is bound_relu


def test_traces_in_two_threads_at_once():
    x = rand(3, 5)
    results, barrier = {}, threading.Barrier(2)

    def f(v):
        barrier.wait(5)  # both traces run at once
        time.sleep(0.01)
        return mkcache.sigmoid(v)

    def work(k):
        with mkcache.trace(f, x) as prog:
            results[k] = prog.run(v=x)["output"]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        close(results[k], 1 / (1 + np.exp(-x)))
    assert mkcache.sigmoid.__module__ == "mkcache.ops"
