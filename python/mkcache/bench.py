"""A short benchmark of mkcache against bare oneDNN, numpy and torch:
``python -m mkcache bench`` (the full suite is ``pytest tests/bench``).

For each case it times, in this process: the oneDNN primitive created once
and executed directly, mkcache's C call on a cache hit, a call that
re-creates the primitive through oneDNN's own cache (all three in C loops in
libmkcache_bench), the mkcache Python call, numpy, and torch when it is
installed; and prints medians and ratios to bare.
"""
from __future__ import annotations

import ctypes
import statistics
import sys
import time

import numpy as np

from . import _loader


class Helper:
    """libmkcache_bench: operator calls timed in C loops (tests/bench/helper)."""

    MODES = {"bare": 0, "cached": 1, "cached_new": 2, "recreate": 3, "bare_user_scratchpad": 4}

    def __init__(self):
        import mkcache  # noqa: F401  (libmkcache must be loaded first)
        self.lib = _loader.load_bench_helper()
        lib = self.lib
        lib.mkcb_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                    ctypes.c_int]
        lib.mkcb_create.restype = ctypes.c_void_p
        lib.mkcb_run.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.mkcb_run.restype = None
        lib.mkcb_program_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        lib.mkcb_program_run.restype = ctypes.c_int
        lib.mkcb_destroy.argtypes = [ctypes.c_void_p]
        lib.mkcb_destroy.restype = None
        lib.mkcb_reorders_since_create.argtypes = [ctypes.c_void_p]
        lib.mkcb_reorders_since_create.restype = ctypes.c_uint64
        lib.mkcb_last_error.argtypes = []
        lib.mkcb_last_error.restype = ctypes.c_char_p
        lib.mkcb_paired.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int, ctypes.c_int] + [ctypes.POINTER(ctypes.c_double)] * 3
        lib.mkcb_paired.restype = None
        lib.mkcb_cache_lookups.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_double]
        lib.mkcb_cache_lookups.restype = ctypes.c_double

    def cache_lookups(self, entries: int, threads: int, hit: bool, seconds: float) -> float:
        """Lookups per second through mkc_cache_get_blob (+ release on a hit)."""
        rate = self.lib.mkcb_cache_lookups(entries, threads, 1 if hit else 0, seconds)
        if rate <= 0:
            raise RuntimeError("cache microbenchmark failed")
        return rate

    def create(self, op: str, mode: str, params):
        arr = (ctypes.c_int64 * len(params))(*params)
        handle = self.lib.mkcb_create(op.encode(), self.MODES[mode], arr, len(params))
        if not handle:
            raise RuntimeError(self.lib.mkcb_last_error().decode())
        return handle

    def paired(self, a, b, calls: int, blocks: int, openmp_threads: int = 0):
        """(median a, median b, median of per-block b - a), seconds per call.
        `openmp_threads` > 0 measures with that many OpenMP threads."""
        out = [ctypes.c_double() for _ in range(3)]
        self.lib.mkcb_paired(a, b, calls, blocks, openmp_threads, *out)
        return tuple(v.value for v in out)

    def time_c(self, op, mode, params, budget: float) -> float:
        """Median seconds per call of one C mode within about `budget` s."""
        handle = self.create(op, mode, params)
        try:
            return _median_per_call(lambda n: self.lib.mkcb_run(handle, n), budget)
        finally:
            self.lib.mkcb_destroy(handle)


def _median_per_call(run, budget: float) -> float:
    """Calibrates a batch size, then returns the median of batches."""
    n = 1
    while True:
        t0 = time.perf_counter()
        run(n)
        dt = time.perf_counter() - t0
        if dt > budget / 20 or n >= 1 << 20:
            break
        n *= 4
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 50):
        t0 = time.perf_counter()
        run(n)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def _python_loop(fn):
    def run(n):
        for _ in range(n):
            fn()
    return run


def _cases():
    """(name, helper op, params, {mode: python callable})."""
    import mkcache
    rng = np.random.default_rng(0)
    try:
        import torch
        import torch.nn.functional as F
        torch.set_grad_enabled(False)
    except ImportError:
        torch = None
    r = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    cases = []

    x16 = r(1, 16)
    cases.append(("relu 1x16", "relu", (1, 16), {
        "python": lambda: mkcache.relu(x16, name="cli"),
        "numpy": lambda: np.maximum(x16, 0),
        **({"torch": (lambda t=torch.from_numpy(x16): torch.relu(t))} if torch else {}),
    }))
    xr = r(1, 64, 56, 56)
    cases.append(("relu 1x64x56x56", "relu", (1, 64, 56, 56), {
        "python": lambda: mkcache.relu(xr, name="cli"),
        "numpy": lambda: np.maximum(xr, 0),
        **({"torch": (lambda t=torch.from_numpy(xr): torch.relu(t))} if torch else {}),
    }))
    xc, wc = r(1, 64, 56, 56), r(64, 64, 3, 3) * 0.05
    xct = mkcache.conv2d(np.ascontiguousarray(xc.transpose(0, 2, 3, 1)),
                         np.eye(64, dtype=np.float32)[:, :, None, None], data_format="NHWC",
                         name="cli_producer")
    wct = mkcache.Tensor(wc, constant=True)
    cases.append(("conv2d 3x3 64->64 56x56", "conv2d", (1, 64, 64, 56, 56, 3, 1, 1), {
        "python": lambda: mkcache.conv2d(xct, wct, padding=1, data_format="NHWC", name="cli"),
        **({"torch": (lambda t=torch.from_numpy(xc).contiguous(memory_format=torch.channels_last),
                      w=torch.from_numpy(wc): F.conv2d(t, w, padding=1))} if torch else {}),
    }))
    xs = r(1, 12, 128, 128)
    cases.append(("softmax 1x12x128x128", "softmax", (1, 12, 128, 128), {
        "python": lambda: mkcache.softmax(xs, name="cli"),
        "numpy": lambda: np.exp(xs - xs.max(-1, keepdims=True)) /
        np.exp(xs - xs.max(-1, keepdims=True)).sum(-1, keepdims=True),
        **({"torch": (lambda t=torch.from_numpy(xs): torch.softmax(t, -1))} if torch else {}),
    }))
    xl, wl, bl = r(128, 768), r(3072, 768) * 0.05, r(3072)
    wlt = mkcache.Tensor(wl, constant=True)
    cases.append(("linear 128x768->3072", "linear", (128, 768, 3072), {
        "python": lambda: mkcache.linear(xl, wlt, bl, name="cli"),
        "numpy": lambda: xl @ wl.T + bl,
        **({"torch": (lambda t=torch.from_numpy(xl), w=torch.from_numpy(wl),
                      b=torch.from_numpy(bl): F.linear(t, w, b))} if torch else {}),
    }))
    xn, sn, hn = r(128, 768), r(768), r(768)
    cases.append(("layer_norm 128x768", "layer_norm", (128, 768), {
        "python": lambda: mkcache.layer_norm(xn, sn, hn, name="cli"),
        "numpy": lambda: (xn - xn.mean(-1, keepdims=True)) /
        np.sqrt(xn.var(-1, keepdims=True) + 1e-5) * sn + hn,
        **({"torch": (lambda t=torch.from_numpy(xn), s=torch.from_numpy(sn),
                      h=torch.from_numpy(hn): F.layer_norm(t, (768,), s, h))} if torch else {}),
    }))
    return cases


MODES = ["bare", "cached", "recreate", "python", "numpy", "torch"]


def run(budget: float = 0.15, out=sys.stdout) -> list:
    """Runs the short benchmark; returns rows of (case, {mode: seconds})."""
    helper = Helper()
    cases = _cases()
    total = sum(3 + len(fns) for _, _, _, fns in cases)
    done = 0
    rows = []
    for name, op, params, fns in cases:
        res = {}
        for mode in ("bare", "cached", "recreate"):
            _progress(out, done, total, f"{name}: {mode}")
            res[mode] = helper.time_c(op, mode, params, budget)
            done += 1
        for mode, fn in fns.items():
            _progress(out, done, total, f"{name}: {mode}")
            fn()  # warm-up (builds the cache entry)
            res[mode] = _median_per_call(_python_loop(fn), budget)
            done += 1
        rows.append((name, res))
    _progress(out, total, total, "done")
    out.write("\n")
    return rows


def _progress(out, done, total, label):
    width = 30
    filled = width * done // total
    out.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}")
    out.flush()


def cells(res: dict, modes) -> list:
    """Table cells of one case: microseconds per call, and the ratio to
    res["bare"] for the other modes ("-" where a mode did not run)."""
    bare = res.get("bare")
    out = []
    for m in modes:
        v = res.get(m)
        if v is None:
            out.append("-")
        elif m == "bare" or bare is None:
            out.append(f"{v * 1e6:.2f}")
        else:
            out.append(f"{v * 1e6:.2f} ({v / bare:.2f}x)")
    return out


def table(rows) -> str:
    """A markdown table: medians in us, ratios to bare."""
    head = "| case | bare (us) | " + " | ".join(MODES[1:]) + " |"
    lines = [head, "|---" * (len(MODES) + 1) + "|"]
    for name, res in rows:
        lines.append(f"| {name} | " + " | ".join(cells(res, MODES)) + " |")
    return "\n".join(lines)


def plot(rows, path: str) -> None:
    """A bar chart of ratios to bare (needs matplotlib: pip install mkcache[plot])."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = [m for m in MODES if m != "bare"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        ratios = [res[m] / res["bare"] if m in res else 0 for _, res in rows]
        ax.bar([j + i * width for j in range(len(rows))], ratios, width, label=m)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([name for name, _ in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("time / bare oneDNN (log)")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
