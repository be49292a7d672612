"""The hit path: a cached mkcache call against the bare oneDNN primitive, a
call that re-creates the primitive (oneDNN's own cache only), numpy, and
torch when installed - all in one run.

    pytest tests/bench --benchmark-only            # full measurement
    pytest tests/bench --benchmark-disable         # quick check that it works
"""
import numpy as np
import pytest

import mkcache
from conftest import NOTES, RESULTS, SPLIT_RESULTS, record
from numpy_ops import conv2d_nchw

try:
    import torch
except ImportError:  # torch is optional
    torch = None

CONV = {"conv2d 3x3 64->64 56x56 b1": (1, 64, 64, 56, 56, 3, 1, 1),
        # The same code path on a tiny problem: its paired overhead is
        # resolvable in wall-clock time (on the large one, noise is ±µs).
        "conv2d 3x3 8->8 8x8 b1": (1, 8, 8, 8, 8, 3, 1, 1)}
# Calls per timed round and per paired block.
CONV_CALLS = {"conv2d 3x3 64->64 56x56 b1": (10, 5), "conv2d 3x3 8->8 8x8 b1": (5000, 2000)}
RELU = {"relu 1x16": (1, 16), "relu 1x64x56x56": (1, 64, 56, 56)}
C_MODES = ["bare", "cached", "cached_new", "recreate"]


def _c_bench(benchmark, helper, op, case, mode, params, calls):
    handle = helper.create(op, mode, params)
    try:
        benchmark.pedantic(helper.lib.mkcb_run, args=(handle, calls), rounds=15,
                           iterations=1, warmup_rounds=2)
        record(benchmark, case, mode, calls)
        if mode in ("cached", "cached_new"):
            reorders = helper.lib.mkcb_reorders_since_create(handle)
            if reorders:
                NOTES[case].append(f"{mode}: {reorders} layout conversions during timing")
    finally:
        helper.lib.mkcb_destroy(handle)


@pytest.mark.parametrize("mode", C_MODES)
@pytest.mark.parametrize("case", list(CONV))
def test_conv2d_c(benchmark, helper, case, mode):
    benchmark.group = case
    _c_bench(benchmark, helper, "conv2d", case, mode, CONV[case], calls=CONV_CALLS[case][0])


@pytest.mark.parametrize("mode", C_MODES)
@pytest.mark.parametrize("case", list(RELU))
def test_relu_c(benchmark, helper, case, mode):
    benchmark.group = case
    calls = 20000 if np.prod(RELU[case]) < 1024 else 500
    _c_bench(benchmark, helper, "relu", case, mode, RELU[case], calls)


@pytest.mark.parametrize("threads", [0, 1], ids=["default threads", "1 thread"])
@pytest.mark.parametrize("case", list(CONV) + list(RELU))
def test_hit_overhead_paired(benchmark, helper, case, threads):
    """Alternates blocks of bare and cached calls; the median per-block
    difference is the cache's per-call overhead. With one OpenMP thread the
    serial parts compare like for like; with the default count, activations
    of <= 1024 elements run on the calling thread alone in mkcache (not in
    bare oneDNN), so there the difference may be negative."""
    benchmark.group = case
    op, params = ("conv2d", CONV[case]) if case in CONV else ("relu", RELU[case])
    calls = CONV_CALLS[case][1] if op == "conv2d" else (5000 if np.prod(params) < 1024 else 200)
    bare = helper.create(op, "bare", params)
    cached = helper.create(op, "cached", params)
    try:
        result = {}

        def measure():
            result["v"] = helper.paired(bare, cached, calls, 31, threads)

        benchmark.pedantic(measure, rounds=1, iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            suffix = "_1t" if threads == 1 else ""
            RESULTS[case]["paired_overhead" + suffix] = result["v"][2]
            RESULTS[case]["paired_bare" + suffix] = result["v"][0]
            benchmark.extra_info["overhead_seconds_per_call"] = result["v"][2]
    finally:
        helper.lib.mkcb_destroy(bare)
        helper.lib.mkcb_destroy(cached)


@pytest.mark.parametrize("case", list(CONV))
def test_conv_overhead_split(benchmark, helper, case):
    """Splits the convolution's paired overhead (1 OpenMP thread): a bare
    primitive built with the scratchpad passed at execution (as mkcache's
    are) against the plain bare one, then mkcache against that bare."""
    benchmark.group = case
    params, calls = CONV[case], CONV_CALLS[case][1]
    bare = helper.create("conv2d", "bare", params)
    bare_user = helper.create("conv2d", "bare_user_scratchpad", params)
    cached = helper.create("conv2d", "cached", params)
    try:
        result = {}

        def measure():
            result["scratchpad"] = helper.paired(bare, bare_user, calls, 31, 1)[2]
            result["over_same"] = helper.paired(bare_user, cached, calls, 31, 1)[2]

        benchmark.pedantic(measure, rounds=1, iterations=1)
        if getattr(benchmark, "stats", None) is not None:
            SPLIT_RESULTS[case].update(result)
    finally:
        for handle in (bare, bare_user, cached):
            helper.lib.mkcb_destroy(handle)


def _conv_inputs(params):
    n, ic, oc, h, w, k, stride, pad = params
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, ic, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, ic, k, k), dtype=np.float32) * 0.05
    b = rng.standard_normal(oc, dtype=np.float32)
    return x, wt, b, pad


@pytest.mark.parametrize("mode", ["python", "numpy", "torch"])
@pytest.mark.parametrize("case", list(CONV))
def test_conv2d_py(benchmark, case, mode):
    benchmark.group = case
    x, wt, b, pad = _conv_inputs(CONV[case])
    if mode == "python":
        # Inside a model: input already a library tensor, weights constant.
        xt = mkcache.conv2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                            np.eye(x.shape[1], dtype=np.float32)[:, :, None, None],
                            data_format="NHWC", name="bench_py_producer")
        wt_t = mkcache.Tensor(wt, constant=True)
        b_t = mkcache.Tensor(b, constant=True)
        fn = lambda: mkcache.conv2d(xt, wt_t, b_t, padding=pad, data_format="NHWC",  # noqa: E731
                                    name="bench_py_conv")
    elif mode == "numpy":
        fn = lambda: conv2d_nchw(x, wt, b, pad)  # noqa: E731
    else:
        if torch is None:
            pytest.skip("torch is not installed")
        tx = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
        tw, tb = torch.from_numpy(wt), torch.from_numpy(b)

        def fn():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, tb, padding=pad)
    benchmark(fn)
    record(benchmark, case, mode)


@pytest.mark.parametrize("mode", ["python", "numpy", "torch"])
@pytest.mark.parametrize("case", list(RELU))
def test_relu_py(benchmark, case, mode):
    benchmark.group = case
    x = np.random.default_rng(0).standard_normal(RELU[case], dtype=np.float32)
    out = np.empty_like(x)
    if mode == "python":
        fn = lambda: mkcache.relu(x)  # noqa: E731  (the call a user makes)
    elif mode == "numpy":
        fn = lambda: np.maximum(x, 0, out=out)  # noqa: E731
    else:
        if torch is None:
            pytest.skip("torch is not installed")
        tx = torch.from_numpy(x)
        fn = lambda: torch.relu(tx)  # noqa: E731
    benchmark(fn)
    record(benchmark, case, mode)


def test_paired_processes_tool(benchmark, capsys):
    """tests/bench/paired_processes.py (the README's across-process overhead
    figures) runs: one child process of the relu case."""
    import paired_processes
    benchmark.group = "tools"
    benchmark.pedantic(paired_processes.main, args=(["relu", "--processes", "1"],), rounds=1,
                       iterations=1)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "relu overhead median of 1 processes" in line and "bare" in line
