"""Shared fixtures: the anyio backend, a clean environment, and a served folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbrelay.config import JUPYTER_TOKEN_ENV, OPTIONS, TOKEN_ENV

# Live mode: a real Jupyter Server for the tests that need one (started on first use); the
# markers of what a test starts, and the quick loop (--quick); figures from parallel workers.
pytest_plugins = ["tests.live.fixtures", "tests.markers", "tests.parallel"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Every variable nbrelay's settings are read from (each option's NBRELAY_*, and the tokens).
SETTINGS_ENV = frozenset({opt.env for opt in OPTIONS} | {TOKEN_ENV, JUPYTER_TOKEN_ENV})


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No nbrelay setting or token from the developer's shell leaks into a test. The suite's own
    variables (NBRELAY_FULL_SUITE, NBRELAY_SOAK, NBRELAY_FIGURES, ...) are kept."""
    for key in SETTINGS_ENV & set(os.environ):
        monkeypatch.delenv(key)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty folder to serve, with a private lock folder."""
    served = tmp_path / "root"
    served.mkdir()
    return served


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runtime folder (journals, lock files, shared state) for the test's nbrelay
    processes, which share it; its path. Modules that start processes use it for every test
    (``pytest.mark.usefixtures("runtime")``)."""
    folder = tmp_path / "run-user"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder / "nbrelay"
