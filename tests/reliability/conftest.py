"""Figures measured by the reliability suite are listed at the end of the run."""

from __future__ import annotations

from typing import Any

from tests.http.harness import summarize


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summarize(terminalreporter, "tests/reliability/")
