"""Shared fixtures: the anyio backend, a clean environment, and a served folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbrelay.config import JUPYTER_TOKEN_ENV, OPTIONS, TOKEN_ENV

# Live mode: a real Jupyter Server for the tests that need one (started on first use).
pytest_plugins = ["tests.live.fixtures"]


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
