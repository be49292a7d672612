"""The tables a benchmark module prints when the run ends (after conftest's)
and appends to --bench-report's file: one plugin per module, registered once
by its autouse fixture through `register`."""
from __future__ import annotations

import pytest


class _Report:
    def __init__(self, sections, notes, footer):
        self.sections, self.notes, self.footer = sections, notes, footer

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter, config):
        parts = self.sections()
        if not parts:
            return  # nothing was measured (--benchmark-disable, or skipped)
        extra = ([self.footer()] if self.footer else []) + \
            [f"note: {n}" for n in (self.notes() if self.notes else [])]
        for title, table in parts:
            terminalreporter.write_sep("=", f"mkcache: {title}")
            terminalreporter.write_line(table)
        for line in extra:
            terminalreporter.write_line(line)
        path = config.getoption("--bench-report")
        if path:
            with open(path, "a") as f:
                for title, table in parts:
                    f.write(f"\n{title}:\n\n{table}\n")
                f.write("".join(f"\n{line}" for line in extra) + ("\n" if extra else ""))


def register(request, name: str, sections, notes=None, footer=None) -> None:
    """Registers the plugin `name` unless it is already: `sections()` gives
    the [(title, table)] to print (empty: none), `notes()` lines printed as
    "note: ...", `footer()` one line after the tables."""
    manager = request.config.pluginmanager
    if manager.get_plugin(name) is None:
        manager.register(_Report(sections, notes, footer), name)


def machine_isa() -> str:
    """The ISA a report's header names: oneDNN's, and where
    tests/bench/as_avx2.py hid AVX-512 from the process, that it did and on
    which CPU (the kernels are an AVX2 machine's, the speed this one's)."""
    import os

    import mkcache
    isa = mkcache.build_info()["isa"]
    if os.environ.get("MKCACHE_CPUID_MASK"):
        model = "this CPU"
        try:
            with open("/proc/cpuinfo") as f:
                model = next(line.split(":", 1)[1].strip() for line in f
                             if line.startswith("model name"))
        except (OSError, StopIteration):
            pass
        isa += f" (CPUID masked to AVX2 on {model})"
    return isa
