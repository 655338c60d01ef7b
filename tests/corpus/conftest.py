"""Prints the world corpus's figures at the end of a run that included it (CI's log shows them)."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    module = sys.modules.get("tests.corpus.test_world")
    if module is None or not module.FIGURES:
        return
    terminalreporter.write_line(module.summary())
    top = sorted(module.SECONDS.items(), key=lambda kv: -kv[1])[:6]
    spent = ", ".join(f"{tool} {seconds:.0f} s" for tool, seconds in top)
    terminalreporter.write_line(f"  time in tools: {spent}")
    for refusal in module.REFUSALS:
        terminalreporter.write_line(f"  refused: {refusal}")
    for name, cells in sorted(module.MISMATCHES.items()):
        terminalreporter.write_line(
            f"  outputs differ from nbclient's: {name} cells {sorted(cells)}"
        )
