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
