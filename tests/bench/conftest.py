"""Benchmark suite plumbing: the C timing helper, a results table of ratios
printed at the end of the run (and written as markdown with
--bench-report=FILE)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from mkcache.bench import cells


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
# (entries, threads, "hit"/"miss") -> lookups per second
CACHE_RESULTS: dict = {}
# case -> paired per-call differences (seconds, 1 OpenMP thread) that split a
# convolution's overhead: "scratchpad" (bare built with the scratchpad passed
# at execution, as mkcache builds it, minus bare) and "over_same" (mkcache
# minus that bare)
SPLIT_RESULTS: dict = defaultdict(dict)


def pytest_addoption(parser):
    parser.addoption("--bench-report", default=None,
                     help="write the ratio table as markdown to this file")


@pytest.fixture(scope="session")
def helper():
    from mkcache.bench import Helper
    return Helper()


def record(benchmark, case: str, mode: str, calls_per_round: int = 1):
    stats = getattr(benchmark, "stats", None)
    if stats is None or getattr(stats, "stats", None) is None:
        return  # --benchmark-disable: the call ran once, nothing timed
    RESULTS[case][mode] = stats.stats.median / calls_per_round
    benchmark.extra_info["seconds_per_call"] = RESULTS[case][mode]


def render_table() -> str:
    lines = ["| case | " + " | ".join(MODE_TITLES[m] for m in MODES)
             + " | C hit - bare, paired (us, % of bare) | the same, 1 OpenMP thread |",
             "|---" * (len(MODES) + 3) + "|"]
    for case, res in RESULTS.items():
        row = cells(res, MODES)
        # The overhead figures come from alternating blocks of bare and cached
        # calls (robust to a noisy machine), not from the two medians above.
        deltas = [_paired_cell(res, ""), _paired_cell(res, "_1t")]
        lines.append(f"| {case} | " + " | ".join(row + deltas) + " |")
    return "\n".join(lines)


def _paired_cell(res: dict, suffix: str) -> str:
    overhead, bare = res.get("paired_overhead" + suffix), res.get("paired_bare" + suffix)
    if overhead is None:
        return "-"
    text = f"{overhead * 1e6:+.2f}"
    return text + (f" ({overhead / bare * 100:+.1f}%)" if bare else "")


def render_split_table() -> str:
    lines = ["| case | bare with the scratchpad passed at execution - bare (us) "
             "| mkcache C hit - that bare (us) | sum (us) |", "|---|---|---|---|"]
    for case, res in SPLIT_RESULTS.items():
        pad, over = res.get("scratchpad"), res.get("over_same")
        fmt = lambda v: "-" if v is None else f"{v * 1e6:+.3f}"  # noqa: E731
        total = None if pad is None or over is None else pad + over
        lines.append(f"| {case} | {fmt(pad)} | {fmt(over)} | {fmt(total)} |")
    return "\n".join(lines)


def render_cache_table() -> str:
    lines = ["| entries | threads | hit (M lookups/s) | miss (M lookups/s) |", "|---|---|---|---|"]
    for entries, threads in sorted({(e, t) for e, t, _ in CACHE_RESULTS}):
        hit = CACHE_RESULTS.get((entries, threads, "hit"))
        miss = CACHE_RESULTS.get((entries, threads, "miss"))
        fmt = lambda v: f"{v / 1e6:.2f}" if v else "-"  # noqa: E731
        lines.append(f"| {entries} | {threads} | {fmt(hit)} | {fmt(miss)} |")
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, config):
    if CACHE_RESULTS:
        terminalreporter.write_sep("=", "mkcache: blob cache lookups through the C ABI")
        terminalreporter.write_line(render_cache_table())
    if not RESULTS:
        return
    table = render_table()
    terminalreporter.write_sep("=", "mkcache: medians per call, ratio to bare oneDNN")
    terminalreporter.write_line(table)
    for case, notes in NOTES.items():
        for n in notes:
            terminalreporter.write_line(f"note [{case}]: {n}")
    split = ""
    if SPLIT_RESULTS:
        split = render_split_table()
        terminalreporter.write_sep("=", "mkcache: a convolution's hit overhead split "
                                        "(paired, 1 OpenMP thread)")
        terminalreporter.write_line(split)
    path = config.getoption("--bench-report")
    if path:
        Path(path).write_text(
            "Medians per call on this machine; ratios are to the bare oneDNN primitive "
            "measured in the same run.\n\n" + table + "\n"
            + ("\nA convolution's C hit overhead split (paired, 1 OpenMP thread): the part "
               "oneDNN spends on a scratchpad passed at execution (mkcache's primitives take "
               "it so, for thread safety), and the rest:\n\n" + split + "\n" if split else "")
            + ("\nBlob cache lookups through the C ABI:\n\n" + render_cache_table() + "\n"
               if CACHE_RESULTS else ""))
