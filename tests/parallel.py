"""The full run's tests in parallel (pytest-xdist, ``scripts/test``), loaded by the root conftest.

The full run spreads test files over worker processes (``--dist loadfile``: a file's tests, and
so its module-scoped servers, stay in one worker). Figures that the corpus and differential
suites gather in their test modules live in the worker that ran them, so each worker runs the
``pytest_terminal_summary`` hooks into lines at its end and the controller prints them in its
own summary (the controller loads no test folder's conftest, so it would print none).
"""

from __future__ import annotations

from typing import Any

import pytest

SUMMARY = "nbrelay_summary"
LINES = pytest.StashKey[list[str]]()


class _Recorder:
    """What a summary hook needs of a terminal reporter, writing into a list of lines."""

    def __init__(self, stats: dict[str, list[Any]]) -> None:
        self.lines: list[str] = []
        self.stats = stats  # the worker's test reports, for figures kept as user_properties

    def write_sep(self, sep: str, title: str = "", **_: Any) -> None:
        self.lines.append(f" {title} ".center(80, sep))

    def write_line(self, line: str, **_: Any) -> None:
        self.lines.append(str(line))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None:
        return  # not a worker
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    recorder = _Recorder(getattr(reporter, "stats", {}))
    config.hook.pytest_terminal_summary(
        terminalreporter=recorder, exitstatus=exitstatus, config=config
    )
    workeroutput[SUMMARY] = recorder.lines


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    lines = getattr(node, "workeroutput", {}).get(SUMMARY) or []
    node.config.stash.setdefault(LINES, []).extend(lines)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for line in config.stash.get(LINES, []):
        terminalreporter.write_line(line)
