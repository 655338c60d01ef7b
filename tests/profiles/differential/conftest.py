"""Prints the differential figures (steps identical / steps, per profile) at the end of a run."""

from __future__ import annotations

import pytest

from tests.profiles.differential.harness import FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    terminalreporter.write_sep("-", "differential tests: nbrelay against the original servers")
    for lines in FIGURES:
        for line in lines.splitlines():
            terminalreporter.write_line(line)
