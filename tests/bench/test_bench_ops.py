"""The forward operator cases: the bare oneDNN primitive, mkcache's C call on
a cache hit, re-creation through oneDNN's own cache, mkcache's Python call,
numpy, and torch when installed - all in one run, reported as ratios to bare.

    python -m pytest tests/bench --benchmark-enable --benchmark-only
"""
import numpy as np
import pytest

import mkcache
import numpy_ops
from conftest import NOTES, RESULTS, record
from numpy_ops import conv2d_nchw

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is optional
    torch = None

RNG = np.random.default_rng(0)
# The channel block oneDNN's kernels use natively on this machine.
BLOCKED = "nChw16c" if mkcache.build_info()["isa"].startswith("avx512") else "nChw8c"


def _rand(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


# case -> (helper op, helper params, calls per timed round)
CASES = {
    "conv2d 3x3 64->64 56x56 b32": ("conv2d", (32, 64, 64, 56, 56, 3, 1, 1), 1),
    "conv 1x1 256->64 56x56": ("conv2d", (1, 256, 64, 56, 56, 1, 1, 0), 10),
    "max pool 3x3 s2 1x64x112x112": ("max_pool", (1, 64, 112, 112, 3, 2, 1), 50),
    "LRN 5 1x96x55x55": ("lrn", (1, 96, 55, 55, 5), 50),
    "batch norm 1x64x56x56": ("batch_norm", (1, 64, 56, 56), 100),
    "softmax 1x12x128x128 last axis": ("softmax", (1, 12, 128, 128), 50),
    "add 1x64x56x56 (residual)": ("add", (1, 64, 56, 56), 100),
    "add 1x768 (one token)": ("add", (1, 768), 2000),
    "linear 128x768 -> 3072": ("linear", (128, 768, 3072), 5),
    "gelu 128x3072": ("gelu", (128, 3072), 100),
    "layer_norm 128x768": ("layer_norm", (128, 768), 200),
    "layer_norm 1x768 (one token)": ("layer_norm", (1, 768), 2000),
    # Training (issue 4): backward data + weights (+ bias), and max-pool
    # backward with the forward's indices.
    "conv2d 3x3 64->64 56x56 backward": ("conv_bwd", (1, 64, 64, 56, 56, 3, 1, 1), 1),
    "max pool 3x3 s2 1x64x112x112 backward": ("max_pool_bwd", (1, 64, 112, 112, 3, 2, 1), 20),
}
C_MODES = ["bare", "cached", "recreate"]


@pytest.mark.parametrize("mode", C_MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_op_c(benchmark, helper, case, mode):
    benchmark.group = case
    op, params, calls = CASES[case]
    handle = helper.create(op, mode, params)
    try:
        benchmark.pedantic(helper.lib.mkcb_run, args=(handle, calls), rounds=10, iterations=1,
                           warmup_rounds=1)
        record(benchmark, case, mode, calls)
        if mode == "cached":
            reorders = helper.lib.mkcb_reorders_since_create(handle)
            if reorders:
                NOTES[case].append(f"{reorders} layout conversions during timing")
    finally:
        helper.lib.mkcb_destroy(handle)


@pytest.mark.parametrize("threads", [0, 1], ids=["default threads", "1 thread"])
@pytest.mark.parametrize("case", list(CASES))
def test_op_overhead_paired(benchmark, helper, case, threads):
    """Alternating blocks of bare and cached calls: the median per-block
    difference is the cache's overhead, robust to a noisy machine. With one
    OpenMP thread the serial parts (where the overhead lives) compare like
    for like: with two, a worker spinning on the sibling vCPU after each
    parallel region slows them unevenly."""
    benchmark.group = case
    op, params, calls = CASES[case]
    bare = helper.create(op, "bare", params)
    cached = helper.create(op, "cached", params)
    try:
        result = {}

        def measure():
            result["v"] = helper.paired(bare, cached, calls, 15, threads)

        benchmark.pedantic(measure, rounds=1, iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            suffix = "_1t" if threads == 1 else ""
            RESULTS[case]["paired_overhead" + suffix] = result["v"][2]
            RESULTS[case]["paired_bare" + suffix] = result["v"][0]
    finally:
        helper.lib.mkcb_destroy(bare)
        helper.lib.mkcb_destroy(cached)


def _python_numpy_torch(case):
    """-> {mode: zero-argument callable} for the Python-level competitors."""
    op, p, _ = CASES[case]
    fns = {}
    if op == "conv2d":
        n, ic, oc, h, w, k, s, pad = p
        x, wt, b = _rand(n, ic, h, w), _rand(oc, ic, k, k) * 0.05, _rand(oc)
        xt = mkcache.conv2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                            np.eye(ic, dtype=np.float32)[:, :, None, None], data_format="NHWC",
                            name="bench_producer_py")
        wt_t, b_t = mkcache.Tensor(wt, constant=True), mkcache.Tensor(b, constant=True)
        fns["python"] = lambda: mkcache.conv2d(xt, wt_t, b_t, padding=pad, data_format="NHWC",
                                               name="bench_py")
        fns["numpy"] = lambda: conv2d_nchw(x, wt, b, pad)
        if torch is not None:
            tx = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
            tw, tb = torch.from_numpy(wt), torch.from_numpy(b)
            fns["torch"] = lambda: F.conv2d(tx, tw, tb, padding=pad)
    elif op == "max_pool":
        n, c, h, w, k, s, pad = p
        x = _rand(n, c, h, w)
        xb = mkcache.to_layout(x, BLOCKED if c % 16 == 0 else "nChw8c")
        fns["python"] = lambda: mkcache.max_pool2d(xb, k, s, pad, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.max_pool(x, k, s, pad)
        if torch is not None:
            tx = torch.from_numpy(x)
            fns["torch"] = lambda: F.max_pool2d(tx, k, s, pad)
    elif op == "lrn":
        n, c, h, w, size = p
        x = _rand(n, c, h, w)
        xb = mkcache.to_layout(x, BLOCKED)
        fns["python"] = lambda: mkcache.lrn(xb, size, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.lrn(x, size)
        if torch is not None:
            tx = torch.from_numpy(x)
            fns["torch"] = lambda: F.local_response_norm(tx, size, 1e-4, 0.75, 1.0)
    elif op == "batch_norm":
        n, c, h, w = p
        x, mean, var = _rand(n, c, h, w), _rand(c), np.abs(_rand(c)) + 0.5
        sc, sh = _rand(c), _rand(c)
        fns["python"] = lambda: mkcache.batch_norm(x, mean, var, sc, sh, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.batch_norm(x, mean, var, sc, sh)
        if torch is not None:
            t = [torch.from_numpy(v) for v in (x, mean, var, sc, sh)]
            fns["torch"] = lambda: F.batch_norm(t[0], t[1], t[2], t[3], t[4])
    elif op == "softmax":
        x = _rand(*p)
        fns["python"] = lambda: mkcache.softmax(x, -1, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.softmax(x)
        if torch is not None:
            tx = torch.from_numpy(x)
            fns["torch"] = lambda: torch.softmax(tx, -1)
    elif op == "add":
        a, b = _rand(*p), _rand(*p)
        fns["python"] = lambda: mkcache.add(a, b, name="bench_py")
        fns["numpy"] = lambda: a + b
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            fns["torch"] = lambda: torch.add(ta, tb)
    elif op == "linear":
        m, k, n = p
        x, w, b = _rand(m, k), _rand(n, k) * 0.05, _rand(n)
        wc = mkcache.Tensor(w, constant=True)
        fns["python"] = lambda: mkcache.linear(x, wc, b, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.linear(x, w, b)
        if torch is not None:
            tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
            fns["torch"] = lambda: F.linear(tx, tw, tb)
    elif op == "gelu":
        x = _rand(*p)
        fns["python"] = lambda: mkcache.gelu(x, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.gelu_tanh(x)
        if torch is not None:
            tx = torch.from_numpy(x)
            fns["torch"] = lambda: F.gelu(tx)
    elif op == "conv_bwd":
        n, ic, oc, h, w, k, s, pad = p
        x, wt, b = _rand(n, ic, h, w), _rand(oc, ic, k, k) * 0.05, _rand(oc)
        dy = _rand(n, oc, h, w)
        xt = mkcache.Tensor(x, constant=True)  # as the forward's output would be: converted once
        dyt = mkcache.Tensor(dy, constant=True)
        wt_t = mkcache.Tensor(wt, constant=True)
        mkcache.conv2d(xt, wt_t, b, padding=pad, training=True, name="bench_py_bwd")
        fns["python"] = lambda: mkcache.grad.conv2d(dyt, xt, wt_t, b, padding=pad,
                                                    name="bench_py_bwd")
        fns["numpy"] = lambda: numpy_ops.conv2d_backward_nchw(x, wt, dy, pad)
        if torch is not None:
            tx = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
            tx.requires_grad_(True)
            tw, tb = torch.from_numpy(wt).requires_grad_(True), torch.from_numpy(b).requires_grad_(True)
            ty = F.conv2d(tx, tw, tb, padding=pad)
            tdy = torch.from_numpy(dy).contiguous(memory_format=torch.channels_last)
            fns["torch"] = lambda: torch.autograd.grad(ty, (tx, tw, tb), tdy, retain_graph=True)
    elif op == "max_pool_bwd":
        n, c, h, w, k, s, pad = p
        x = _rand(n, c, h, w)
        oh = (h + 2 * pad - k) // s + 1
        dy = _rand(n, c, oh, oh)
        xb = mkcache.to_layout(x, BLOCKED if c % 16 == 0 else "nChw8c")
        dyb = mkcache.to_layout(dy, BLOCKED if c % 16 == 0 else "nChw8c")
        mkcache.max_pool2d(xb, k, s, pad, training=True, name="bench_py_bwd")
        fns["python"] = lambda: mkcache.grad.max_pool2d(dyb, xb, k, s, pad, name="bench_py_bwd")
        fns["numpy"] = lambda: numpy_ops.max_pool_backward(x, dy, k, s, pad)
        if torch is not None:
            tx = torch.from_numpy(x).requires_grad_(True)
            ty = F.max_pool2d(tx, k, s, pad)
            tdy = torch.from_numpy(dy)
            fns["torch"] = lambda: torch.autograd.grad(ty, (tx,), tdy, retain_graph=True)
    elif op == "layer_norm":
        m, n = p
        x, sc, sh = _rand(m, n), _rand(n), _rand(n)
        fns["python"] = lambda: mkcache.layer_norm(x, sc, sh, name="bench_py")
        fns["numpy"] = lambda: numpy_ops.layer_norm(x, sc, sh)
        if torch is not None:
            t = [torch.from_numpy(v) for v in (x, sc, sh)]
            fns["torch"] = lambda: F.layer_norm(t[0], (n,), t[1], t[2])
    return fns


@pytest.mark.parametrize("mode", ["python", "numpy", "torch"])
@pytest.mark.parametrize("case", list(CASES))
def test_op_py(benchmark, case, mode):
    benchmark.group = case
    fns = _python_numpy_torch(case)
    if mode not in fns:
        pytest.skip("torch is not installed")
    fn = fns[mode]
    if torch is not None and mode == "torch" and not case.endswith("backward"):
        with torch.no_grad():
            benchmark(fn)
    else:
        benchmark(fn)
    record(benchmark, case, mode)


def test_op_results_agree(helper):
    """The benchmarked mkcache calls compute what numpy computes (a smoke
    check that the suite measures real work)."""
    for case in ("max pool 3x3 s2 1x64x112x112", "softmax 1x12x128x128 last axis",
                 "layer_norm 128x768", "add 1x64x56x56 (residual)"):
        fns = _python_numpy_torch(case)
        ours = fns["python"]()
        ours = ours.numpy("NCHW") if ours.ndim == 4 else np.asarray(ours)
        np.testing.assert_allclose(ours, fns["numpy"](), rtol=1e-4, atol=1e-4)
    fns = _python_numpy_torch("max pool 3x3 s2 1x64x112x112 backward")
    # Overlapping windows add two gradients: the order of the sum may differ.
    np.testing.assert_allclose(fns["python"]().numpy(), fns["numpy"](), rtol=1e-6, atol=1e-6)
    fns = _python_numpy_torch("conv2d 3x3 64->64 56x56 backward")
    ours, theirs = fns["python"](), fns["numpy"]()
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3)
    assert RESULTS is not None
