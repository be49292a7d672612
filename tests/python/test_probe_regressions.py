"""Regressions of a bad-input and concurrency probe: each case once gave a
wrong answer, a crash or the wrong kind of error. Cases that crashed the
process run in a child interpreter, so a regression fails one test instead
of ending the run."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mkcache
import grad_reference as gref


def run_child(code: str, timeout: float = 120, env: dict | None = None
              ) -> subprocess.CompletedProcess:
    """Runs `code` (after `import numpy as np, mkcache`) in a new interpreter
    (env: variables set for it on top of this process's)."""
    prelude = "import numpy as np, mkcache\no = lambda *s: np.ones(s, np.float32)\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def expect_error_in_child(call: str, message: str):
    proc = run_child(f"""
        try:
            {call}
        except mkcache.Error as e:
            print("ERROR", type(e).__name__, e)
        else:
            print("NO ERROR")
        """)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("ERROR"), proc.stdout
    assert message in proc.stdout, proc.stdout


# ------------------------------------------------ output sizes, overflow

@pytest.mark.parametrize("call,message", [
    ("mkcache.conv2d(o(1,1,1,1), o(1,1,1,1), padding=(2**30, 2**30-1, 2**30, 2**30-1))",
     "conv2d: the result [1, 1, 2147483648, 2147483648] is too large"),
    ("mkcache.conv2d(o(1,1,1,1), o(1,1,1,1), padding=2**30)", "conv2d: the result"),
    ("mkcache.conv2d_transpose(o(1,1,2,2), o(1,1,1,1), stride=2**30)",
     "conv2d_transpose: the result [1, 1, 1073741825, 1073741825] is too large"),
    ("mkcache.max_pool2d(o(1,1,1,1), 2**30, stride=1, padding=2**30-1)",
     "the result [1, 1, 1073741824, 1073741824] is too large"),
    ("mkcache.reshape(o(3, 4), (4, 2**62 + 3))", "holds more elements than src"),
])
def test_result_sizes_refused_before_onednn_sees_them(call, message):
    expect_error_in_child(call, message)


# ------------------------------------------------ windows past 32-bit offsets

@pytest.mark.parametrize("isa", [None, "AVX2"], ids=["default-isa", "avx2"])
@pytest.mark.parametrize("call,message", [
    ("mkcache.conv2d(o(1,17,4,5), o(1,17,2,1), stride=(2**29 + 1, 2**24))",
     "conv2d: the stride (536870913) along spatial dim 0 is past 2^24"),
    ("mkcache.conv2d(o(1,5,1,17), o(4,17,1,3), stride=(21847, 536903677), "
     "padding=(0, 65536, 65536, 1073741823), dilation=(5, 3), data_format='NHWC')",
     "conv2d: the stride (536903677) along spatial dim 1"),
    ("mkcache.conv2d(o(1,3,5,5), o(2,3,2,2), dilation=(1, 2**24 + 1), "
     "padding=(0, 0, 2**24, 2**24))", "conv2d: the dilation (16777217) along spatial dim 1"),
    ("mkcache.conv3d(o(1,2,3,3,3), o(2,2,1,1,1), padding=(0, 0, 0, 0, 2**24, 2**24))",
     "conv3d: the padded size (33554435) along spatial dim 2"),
    ("mkcache.conv2d(o(1,2**16,1,4), o(1,2**16,1,2), dilation=(1, 2**13), "
     "padding=(0, 0, 0, 2**13))", "conv2d: a window step along spatial dim 1 spans"),
    ("mkcache.conv2d_transpose(o(1,1,2,2), o(1,1,1,1), stride=(1, 2**25))",
     "conv2d_transpose: the stride (33554432) along spatial dim 1"),
    ("mkcache.grad.conv2d(o(1,2,1,1), o(1,3,4,4), o(2,3,1,1), stride=2**25)",
     "conv2d_backward: the stride (33554432) along spatial dim 0"),
    ("mkcache.grad.conv2d_transpose(o(1,1,2,2**25+1), o(1,1,2,2), o(1,1,1,1), stride=(1, 2**25))",
     "conv2d_transpose_backward: the stride (33554432) along spatial dim 1"),
    ("mkcache.max_pool2d(o(1,1,3,3), 2, stride=(1, 2**25))",
     "max_pool: the stride (33554432) along spatial dim 1"),
    ("mkcache.max_pool2d(o(1,1,1,1), (1, 2**24), stride=1, padding=(0, 0, 2**24 - 1, 2**24 - 1))",
     "max_pool: the padded size (33554431) along spatial dim 1"),
    ("mkcache.avg_pool3d(o(1,1,2,2,2), 2, stride=(2**25, 1, 1), count_include_pad=False)",
     "avg_pool_exclude_pad: the stride (33554432) along spatial dim 0"),
    ("mkcache.grad.max_pool2d(o(1,1,1,2), o(1,1,3,3), 2, stride=(2**25, 1))",
     "max_pool: the stride (33554432) along spatial dim 0"),
    # A program's nodes go through the same checks.
    ("(lambda g: (g.output(g.conv2d(g.input('x', (1, 3, 4, 4)), g.constant(o(2, 3, 1, 1)), "
     "stride=2**25), 'y'), g.compile()))(mkcache.Graph())",
     "conv2d: the stride (33554432) along spatial dim 0"),
    ("(lambda g: (g.output(g.max_pool2d(g.input('x', (1, 3, 4, 4)), 2, stride=(1, 2**25)), "
     "'y'), g.compile()))(mkcache.Graph())",
     "max_pool: the stride (33554432) along spatial dim 1"),
])
def test_windows_past_32_bit_offsets_refused_before_onednn_sees_them(call, message, isa):
    """Strides, paddings, dilations and padded sizes past what oneDNN's
    kernels index: an UnsupportedError naming the dim, under this machine's
    ISA and AVX2's (whose brgemm convolution once built such a primitive
    with a kernel that failed to generate and crashed running it)."""
    proc = run_child(f"""
        try:
            {call}
        except mkcache.Error as e:
            print("ERROR", type(e).__name__, e)
        else:
            print("NO ERROR")
        y = mkcache.conv2d(np.ones((2, 17, 5, 3), np.float32), np.ones((4, 17, 1, 3), np.float32))
        assert (y.numpy() == 51).all()
        """, env={"ONEDNN_MAX_CPU_ISA": isa} if isa else None)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("ERROR UnsupportedError"), proc.stdout
    assert message in proc.stdout, proc.stdout


@pytest.mark.parametrize("call", [
    "mkcache.conv2d_transpose(o(2**16,1,2,2), o(1,2**10,1,1), stride=2**8)",
    "mkcache.add(o(2**20, 1), o(1, 2**20))",
    "mkcache.matmul(o(2**20, 1), o(1, 2**20))",
])
def test_large_but_bounded_result_is_out_of_memory_not_a_crash(call):
    expect_error_in_child(call, "OutOfMemoryError")


def test_reshape_through_the_c_abi_refuses_a_wrapping_product():
    import ctypes
    x = mkcache.Tensor(np.ones((3, 4), np.float32))
    dims = (ctypes.c_int64 * 2)(4, 2**62 + 3)
    out = mkcache._capi.tensor_p()
    with pytest.raises(mkcache.InvalidArgumentError, match="holds more elements"):
        mkcache._capi.lib.mkc_reshape(x.handle, 2, dims, ctypes.byref(out))
    assert not out.value


# ------------------------------------------------------ concat, export

@pytest.mark.parametrize("n", [1, 11, 64, 300, 1025])
def test_concat_of_any_accepted_count(rng, n):
    xs = [rng.standard_normal((2, 1 + i % 3, 3)).astype(np.float32) for i in range(n)]
    got = mkcache.concat(xs, axis=1)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(xs, axis=1))
    grads = mkcache.grad.concat(got, xs, axis=1)
    for g, x in zip(grads, xs):
        np.testing.assert_array_equal(np.asarray(g), x)


def test_rank6_results_export(rng):
    x = rng.standard_normal((2, 3, 2, 2, 3, 2)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(mkcache.relu(mkcache.Tensor(x))), np.maximum(x, 0))
    w = rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mkcache.linear(x, w)), x @ w.T, rtol=1e-5, atol=1e-5)
    a = rng.standard_normal((2, 1, 3, 1, 4, 5)).astype(np.float32)
    b = rng.standard_normal((1, 2, 1, 3, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(mkcache.matmul(a, b)), a @ b, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------- read-only arrays

def _read_only(arr, tmp_path=None):
    if tmp_path is None:
        arr = arr.copy()
        arr.flags.writeable = False
        return arr
    path = tmp_path / "data.bin"
    arr.astype(np.float32).tofile(path)
    return np.memmap(path, dtype=np.float32, mode="r", shape=arr.shape)


@pytest.mark.parametrize("mapped", [False, True], ids=["flag", "memmap"])
def test_read_only_arrays_are_never_written(rng, tmp_path, mapped):
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    ro = _read_only(x, tmp_path if mapped else None)
    t = mkcache.Tensor(ro)
    with pytest.raises(mkcache.InvalidArgumentError, match="out is a read-only array"):
        mkcache.relu(x, out=t)
    with pytest.raises(mkcache.InvalidArgumentError, match="out is a read-only array"):
        mkcache.add(x, x, out=t)
    with pytest.raises(mkcache.InvalidArgumentError, match="residual is a read-only array"):
        mkcache.conv2d(x, w, residual=t)
    np.testing.assert_array_equal(np.asarray(ro), x)
    # Reading a read-only array is fine, and a residual array is copied.
    np.testing.assert_array_equal(np.asarray(mkcache.relu(t)), np.maximum(x, 0))
    np.testing.assert_array_equal(np.asarray(mkcache.relu(ro)), np.maximum(x, 0))
    mkcache.conv2d(x, w, residual=ro)
    np.testing.assert_array_equal(np.asarray(ro), x)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_batch_norm_training_refuses_read_only_running_statistics(rng, as_tensor):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    mean, var = _read_only(np.zeros(3, np.float32)), _read_only(np.ones(3, np.float32))
    m = mkcache.Tensor(mean) if as_tensor else mean
    with pytest.raises(mkcache.InvalidArgumentError, match="mean is a read-only array"):
        mkcache.batch_norm(x, m, var, training=True)
    np.testing.assert_array_equal(mean, 0)
    # Inference only reads them.
    mkcache.batch_norm(x, m, var)


# ------------------------------- forward -> backward data and reused memory

def _pool_case(rng):
    x1, x2 = randn(rng, 2, 3, 6, 6), randn(rng, 2, 3, 6, 6)
    dy = randn(rng, 2, 3, 3, 3)
    fwd = lambda x, training: mkcache.max_pool2d(x, 2, training=training, name="mp")  # noqa
    bwd = lambda x: np.asarray(mkcache.grad.max_pool2d(dy, x, 2, name="mp"))  # noqa
    exact = lambda x: gref.pool_backward(x, dy, "max", (2, 2), (2, 2), (0, 0), (0, 0))  # noqa
    return x1, x2, fwd, bwd, exact


def _layer_norm_case(rng):
    x1, x2 = randn(rng, 4, 7), 3 * randn(rng, 4, 7) + 1
    dy = randn(rng, 4, 7)
    fwd = lambda x, training: mkcache.layer_norm(x, training=training, name="ln")  # noqa
    bwd = lambda x: np.asarray(mkcache.grad.layer_norm(dy, x, name="ln", wrt=("x",)).x)  # noqa
    exact = lambda x: gref.layer_norm_backward(x, dy, -1)[0]  # noqa
    return x1, x2, fwd, bwd, exact


def _lrn_case(rng):
    x1, x2 = randn(rng, 2, 5, 3, 3), 2 * randn(rng, 2, 5, 3, 3)
    dy = randn(rng, 2, 5, 3, 3)
    fwd = lambda x, training: mkcache.lrn(x, 3, 1e-1, 0.75, 1.0, training=training,  # noqa
                                          name="lrn")
    bwd = lambda x: np.asarray(mkcache.grad.lrn(dy, x, 3, 1e-1, 0.75, 1.0, name="lrn"))  # noqa
    exact = lambda x: gref.lrn_backward(x, dy, 3, 1e-1, 0.75, 1.0)  # noqa
    return x1, x2, fwd, bwd, exact


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", [_pool_case, _layer_norm_case, _lrn_case],
                         ids=["max_pool", "layer_norm", "lrn"])
@pytest.mark.parametrize("how", ["buffer refilled", "refilled and run in inference"])
def test_backward_never_uses_what_another_x_left(rng, case, how):
    """A training forward on x1, then x1's buffer holding x2's values (what a
    new array at a freed array's address looks like to the library): the
    backward must be x2's."""
    x1, x2, fwd, bwd, exact = case(rng)
    buf = x1.copy()
    fwd(buf, True)
    np.testing.assert_allclose(bwd(buf), exact(x1), rtol=1e-4, atol=1e-5)  # data used
    fwd(buf, True)
    buf[...] = x2
    if how == "refilled and run in inference":
        fwd(buf, False)
    np.testing.assert_allclose(bwd(buf), exact(x2), rtol=1e-4, atol=1e-5)
    # A new Tensor over the buffer, as a new array at the old address.
    fwd(mkcache.Tensor(buf), True)
    buf[...] = x1
    np.testing.assert_allclose(bwd(mkcache.Tensor(buf)), exact(x1), rtol=1e-4, atol=1e-5)


# ------------------------------------ integers, floats, errors, names

X4 = np.ones((1, 2, 5, 5), np.float32)
W4 = np.ones((2, 2, 1, 1), np.float32)

BAD_NUMBERS = [
    ("stride 2**64+2", lambda: mkcache.conv2d(X4, W4, stride=2**64 + 2)),
    ("stride float", lambda: mkcache.conv2d(X4, W4, stride=(1.9, 1.9))),
    ("padding float", lambda: mkcache.conv2d(X4, W4, padding=(0.5, 0.5))),
    ("stride string", lambda: mkcache.conv2d(X4, W4, stride="22")),
    ("stride bool", lambda: mkcache.conv2d(X4, W4, stride=True)),
    ("stride None", lambda: mkcache.max_pool2d(X4, 2, stride=[None, 1])),
    ("groups 2**63", lambda: mkcache.conv2d(X4, W4, groups=2**63)),
    ("dilation -2**70", lambda: mkcache.conv2d(X4, W4, dilation=-2**70)),
    ("kernel float", lambda: mkcache.max_pool2d(X4, 2.0)),
    ("softmax axis 2**32", lambda: mkcache.softmax(X4, axis=2**32)),
    ("softmax axis float", lambda: mkcache.softmax(X4, axis=1.0)),
    ("concat axis 2**31", lambda: mkcache.concat([X4, X4], axis=2**31)),
    ("layer_norm axis", lambda: mkcache.layer_norm(X4, begin_norm_axis=2**40)),
    ("lrn size float", lambda: mkcache.lrn(X4, 3.5)),
    ("epsilon string", lambda: mkcache.layer_norm(X4, epsilon="1e-5")),
    ("epsilon huge", lambda: mkcache.layer_norm(X4, epsilon=1e300)),
    ("alpha string", lambda: mkcache.leaky_relu(X4, "0.1")),
    ("clip bounds", lambda: mkcache.clip(X4, "a", 1)),
    ("momentum", lambda: mkcache.batch_norm(X4, np.zeros(2, np.float32),
                                            np.ones(2, np.float32), training=True,
                                            momentum=[0.9])),
    ("reshape float", lambda: mkcache.reshape(X4, (2.0, 25))),
    ("reshape 2**64", lambda: mkcache.reshape(X4, (2**64, 50))),
    ("transpose axes", lambda: mkcache.transpose(X4, (0, 1, 2, 2**32 + 3))),
    ("flatten float", lambda: mkcache.flatten(X4, 1.0)),
    ("clearing_mode 2**64", lambda: mkcache.cache.clearing_mode(2**64).__enter__()),
    ("clearing_mode 0", lambda: mkcache.cache.clearing_mode(0).__enter__()),
    ("session 2**70", lambda: mkcache.cache.session(2**70).__enter__()),
    ("executor -1", lambda: mkcache.cache.executor(-1).__enter__()),
    ("input_shape float", lambda: mkcache.cache.input_shape((1.5, 2)).__enter__()),
    ("make_key dims", lambda: mkcache.cache.make_key("a", (2**64,))),
    ("add huge scalar", lambda: mkcache.add(X4, 1e300)),
    ("add int past any float", lambda: mkcache.add(X4, 10**400)),
    ("grad.reshape of a list", lambda: mkcache.grad.reshape(X4, [1, 2, 3])),
    ("grad.concat of an int", lambda: mkcache.grad.concat(X4, tensors=5)),
]


@pytest.mark.parametrize("call", [c for _, c in BAD_NUMBERS], ids=[n for n, _ in BAD_NUMBERS])
def test_numbers_are_validated_not_masked(call):
    before = (mkcache.cache.get_session(), mkcache.cache.get_capacity(),
              mkcache.cache.get_executor())
    with pytest.raises(mkcache.InvalidArgumentError):
        call()
    assert (mkcache.cache.get_session(), mkcache.cache.get_capacity(),
            mkcache.cache.get_executor()) == before
    # Nothing was lost.
    np.testing.assert_array_equal(np.asarray(mkcache.relu(X4)), X4)


def test_numpy_integers_and_big_valid_ints_are_accepted():
    y = mkcache.conv2d(X4, W4, stride=(np.int64(2), np.int32(1)), padding=np.uint8(1))
    assert y.shape == (1, 2, 4, 7)
    with mkcache.cache.session(2**62), mkcache.cache.executor(2**64 - 1):
        assert mkcache.cache.get_session() == 2**62
        assert mkcache.cache.get_executor() == 2**64 - 1


OTHER_ERRORS = [
    ("lone surrogate name", lambda: mkcache.relu(mkcache.Tensor(X4), name="a\ud800")),
    ("NUL in name", lambda: mkcache.relu(mkcache.Tensor(X4), name="layer\0A")),
    ("NUL in key", lambda: mkcache.cache.make_key("a\0b", (1,))),
    ("batch_norm 1-D training", lambda: mkcache.batch_norm(np.ones(4, np.float32),
                                                           training=True)),
    ("flatten list", lambda: mkcache.flatten([[1.0, 2.0]], 0.5)),
    ("transpose list", lambda: mkcache.transpose([[1.0, 2.0]], "ab")),
    ("wrt int", lambda: mkcache.grad.linear(np.ones((2, 3), np.float32),
                                            np.ones((2, 4), np.float32),
                                            np.ones((3, 4), np.float32), wrt=5)),
    ("concat of an array", lambda: mkcache.concat(np.ones((2, 3), np.float32))),
    ("input_shape of an int", lambda: mkcache.cache.input_shape(5).__enter__()),
    ("float as alpha", lambda: mkcache.grad.activation(X4, X4, "elu", alpha=object())),
    ("layout with NUL", lambda: mkcache.to_layout(X4, "nChw8c\0")),
    ("layout lone surrogate", lambda: mkcache.to_layout(X4, "\udc80")),
]


@pytest.mark.parametrize("call", [c for _, c in OTHER_ERRORS], ids=[n for n, _ in OTHER_ERRORS])
def test_every_failure_is_an_mkcache_error(call):
    with pytest.raises(mkcache.Error):
        call()


def test_names_differing_after_a_nul_never_share_a_key():
    with pytest.raises(mkcache.InvalidArgumentError, match="NUL"):
        mkcache.relu(X4, name="layer\0B")
    assert not [k for _, k in mkcache.cache.keys() if k.startswith("layer|")]


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "back\\slash\\", "pipe|d", "x\t\n\\"])
def test_key_listing_is_unambiguous_for_any_name(name):
    mkcache.relu(mkcache.Tensor(X4), name=name)
    with mkcache.cache.input_shape("shape\twith\nbreaks"):
        mkcache.relu(mkcache.Tensor(X4), name=name)
    listed = mkcache.cache.keys()
    want = mkcache.cache.make_key(name, X4.shape, "1")  # relu's kind
    assert ("", want) in listed
    assert ("shape\twith\nbreaks", want) in listed
    assert all(len(item) == 2 for item in listed)


# ---------------------------------------------------------------- counters

def test_counters_insert_only_after_a_miss(rng):
    """A loop with training forwards (which leave transfers, once per entry)
    and a name reused with other arguments (which replaces its entry): every
    insertion follows a miss, transfers are counted apart, repeated passes
    all hit and leave no transfer again."""
    x = rng.standard_normal((4, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    img = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)

    def one_pass():
        h = mkcache.linear(x, w, name="fc")
        h = mkcache.layer_norm(h, training=True, name="ln1")
        h = mkcache.leaky_relu(h, 0.1, name="act")
        mkcache.leaky_relu(h, 0.2, name="act")  # same key, other arguments
        mkcache.max_pool2d(img, 2, training=True, name="mp1")
        mkcache.max_pool2d(img, 3, stride=2, padding=1, training=True, name="mp2")
        mkcache.grad.max_pool2d(dy, img, 2, name="mp1")

    for n in range(4):
        s0 = mkcache.cache.stats()
        one_pass()
        s1 = mkcache.cache.stats()
        d = {k: s1[k] - s0[k] for k in s0}
        assert d["insertions"] == d["misses"], d
        assert d["transfers"] == (0 if n else 2), d
        if n:
            assert d["misses"] == 2, d  # the two 'act' calls replace each other
            assert d["entries"] == 0, d


def test_deconvolution_oneDNN_cannot_do_is_a_clear_unsupported_error():
    """output_padding past the end padding with a dilation: a negative end
    padding oneDNN's deconvolutions refuse."""
    x, w = np.ones((2, 6, 3, 7), np.float32), np.ones((6, 3, 1, 1), np.float32)
    with pytest.raises(mkcache.UnsupportedError, match="output_padding larger than the end"):
        mkcache.conv2d_transpose(x, w, stride=(2, 1), dilation=(1, 2), padding=(2, 1, 2, 0),
                                 output_padding=(0, 1), groups=2)
    # Without the dilation, oneDNN takes it.
    import reference as ref
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(w.shape).astype(
        np.float32)
    y = mkcache.conv2d_transpose(x, w, stride=(2, 1), padding=(2, 0, 2, 0),
                                 output_padding=(1, 0), groups=2)
    exact = ref.conv_transpose2d(x, w, stride=(2, 1), pad_begin=(2, 2), pad_end=(0, 0),
                                 output_padding=(1, 0), groups=2)
    exact = exact[0] if isinstance(exact, tuple) else exact
    np.testing.assert_allclose(np.asarray(y), exact, rtol=1e-5, atol=1e-5)


def test_a_failed_kernel_generation_leaves_the_thread_working():
    """oneDNN's kernel generator keeps a per-thread error flag: after one
    failed generation every later one on that thread failed, so the library
    stopped working on the thread. Run in a child: the failure is per thread
    and process-wide state is what is checked."""
    proc = run_child("""
        import threading
        try:
            mkcache.conv2d(o(1, 5, 1, 17), o(4, 17, 1, 3), stride=(21847, 536903677),
                           padding=(0, 65536, 65536, 1073741823), dilation=(5, 3),
                           data_format="NHWC")
        except mkcache.Error as e:
            print("first:", type(e).__name__)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        for i in range(3):  # new primitives, on the same thread
            y = np.asarray(mkcache.conv2d(x, w, padding=1, stride=1 + i % 2, name=f"c{i}"))
            z = np.asarray(mkcache.leaky_relu(x, 0.1 * (i + 1)))
            assert np.allclose(z, np.where(x > 0, x, 0.1 * (i + 1) * x), rtol=1e-6)
        print("ok", y.shape)
        """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ok (2, 4, 5, 6)" in proc.stdout, proc.stdout


def test_constant_tensors_are_never_written(rng):
    x = rng.standard_normal((4, 4)).astype(np.float32)
    kept = x.copy()
    w = mkcache.Tensor(kept, constant=True)
    with pytest.raises(mkcache.InvalidArgumentError, match="marked constant"):
        mkcache.relu(x, out=w)
    with pytest.raises(mkcache.InvalidArgumentError, match="marked constant"):
        mkcache.add(x, x, out=w)
    m = mkcache.Tensor(np.zeros(4, np.float32), constant=True)
    with pytest.raises(mkcache.InvalidArgumentError, match="marked constant"):
        mkcache.batch_norm(rng.standard_normal((2, 4, 3, 3)).astype(np.float32), m,
                           np.ones(4, np.float32), training=True)
    np.testing.assert_array_equal(kept, x)


def test_concat_node_with_an_absent_input_is_refused():
    # An absent concat input was taken as optional, and the compile then
    # read through the missing value (a segfault).
    with mkcache.Graph() as g:
        x = g.input("x", (2, 3))
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"node 0 \(concat\): input 1 is required"):
            g.concat([x, None], axis=0)
        g.output(g.concat([x, x], axis=0), "y")  # nothing was lost
        with g.compile() as prog:
            assert prog.run(x=np.ones((2, 3), np.float32))["y"].shape == (4, 3)
