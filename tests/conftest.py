"""Shared fixtures: the anyio backend, a clean environment, and a served folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Live mode: a real Jupyter Server for the tests that need one (started on first use).
pytest_plugins = ["tests.live.fixtures"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NBRELAY_* or JUPYTER_TOKEN setting from the developer's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith("NBRELAY_") or key in ("JUPYTER_TOKEN",):
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty folder to serve, with a private lock folder."""
    served = tmp_path / "root"
    served.mkdir()
    return served
