"""Benchmark suite plumbing: the C timing helper, a results table of ratios
printed at the end of the run (and written as markdown with
--bench-report=FILE)."""
from __future__ import annotations

import ctypes
from collections import defaultdict
from pathlib import Path

import pytest

from mkcache import _loader

MODES = ["bare", "cached", "cached_new", "recreate", "python", "numpy", "torch"]
MODE_TITLES = {
    "bare": "oneDNN bare (us)",
    "cached": "mkcache C hit (us)",
    "cached_new": "C hit, new output",
    "recreate": "re-create each call",
    "python": "mkcache Python",
    "numpy": "numpy",
    "torch": "torch",
}
# case -> mode -> seconds per call (median)
RESULTS: dict = defaultdict(dict)
NOTES: dict = defaultdict(list)


def pytest_addoption(parser):
    parser.addoption("--bench-report", default=None,
                     help="write the ratio table as markdown to this file")


class Helper:
    """libmkcache_bench: times operator calls in C loops (see bench_helper.cpp)."""

    MODES = {"bare": 0, "cached": 1, "cached_new": 2, "recreate": 3}

    def __init__(self):
        self.lib = _loader.load_bench_helper()
        self.lib.mkcb_create.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
        self.lib.mkcb_create.restype = ctypes.c_void_p
        self.lib.mkcb_run.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        self.lib.mkcb_run.restype = None
        self.lib.mkcb_destroy.argtypes = [ctypes.c_void_p]
        self.lib.mkcb_destroy.restype = None
        self.lib.mkcb_reorders_since_create.argtypes = [ctypes.c_void_p]
        self.lib.mkcb_reorders_since_create.restype = ctypes.c_uint64
        self.lib.mkcb_last_error.argtypes = []
        self.lib.mkcb_last_error.restype = ctypes.c_char_p
        self.lib.mkcb_paired.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int] + [ctypes.POINTER(ctypes.c_double)] * 3
        self.lib.mkcb_paired.restype = None

    def paired(self, a, b, calls: int, blocks: int):
        """(median a, median b, median of per-block b - a), seconds per call."""
        out = [ctypes.c_double() for _ in range(3)]
        self.lib.mkcb_paired(a, b, calls, blocks, *out)
        return tuple(v.value for v in out)

    def create(self, op: str, mode: str, params):
        arr = (ctypes.c_int64 * len(params))(*params)
        handle = self.lib.mkcb_create(op.encode(), self.MODES[mode], arr, len(params))
        if not handle:
            raise RuntimeError(self.lib.mkcb_last_error().decode())
        return handle


@pytest.fixture(scope="session")
def helper():
    import mkcache  # noqa: F401  (loads libmkcache before the helper)
    return Helper()


def record(benchmark, case: str, mode: str, calls_per_round: int = 1):
    stats = getattr(benchmark, "stats", None)
    if stats is None or getattr(stats, "stats", None) is None:
        return  # --benchmark-disable: the call ran once, nothing timed
    RESULTS[case][mode] = stats.stats.median / calls_per_round
    benchmark.extra_info["seconds_per_call"] = RESULTS[case][mode]


def _fmt_us(seconds):
    return f"{seconds * 1e6:.2f}" if seconds is not None else "-"


def render_table() -> str:
    lines = ["| case | " + " | ".join(MODE_TITLES[m] for m in MODES)
             + " | C hit - bare, paired (us, % of bare) |",
             "|---" * (len(MODES) + 2) + "|"]
    for case, res in RESULTS.items():
        bare = res.get("bare")
        cells = []
        for m in MODES:
            v = res.get(m)
            if v is None:
                cells.append("-")
            elif m == "bare" or bare is None:
                cells.append(_fmt_us(v))
            else:
                cells.append(f"{_fmt_us(v)} ({v / bare:.2f}x)")
        # The overhead figure comes from alternating blocks of bare and cached
        # calls (robust to a noisy machine), not from the two medians above.
        delta = "-"
        if "paired_overhead" in res:
            delta = f"{res['paired_overhead'] * 1e6:+.2f}"
            if "paired_bare" in res:
                delta += f" ({res['paired_overhead'] / res['paired_bare'] * 100:+.1f}%)"
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {delta} |")
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, config):
    if not RESULTS:
        return
    table = render_table()
    terminalreporter.write_sep("=", "mkcache: medians per call, ratio to bare oneDNN")
    terminalreporter.write_line(table)
    for case, notes in NOTES.items():
        for n in notes:
            terminalreporter.write_line(f"note [{case}]: {n}")
    path = config.getoption("--bench-report")
    if path:
        Path(path).write_text(
            "Medians per call on this machine; ratios are to the bare oneDNN primitive "
            "measured in the same run.\n\n" + table + "\n")
