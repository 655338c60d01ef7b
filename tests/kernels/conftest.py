"""Kernel fixtures: a private Jupyter data and runtime folder with the fault kernels, and
servers whose kernels are real processes (stopped by the fixtures that start them)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.fault_kernels.install import install, install_others
from tests.helpers import counter_ids
from tests.servers import wait_for


@pytest.fixture(autouse=True)
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Kernelspecs of the fault kernels and of other real kernels (xeus-python, bash_kernel)
    in a private data folder; a private runtime folder
    ($XDG_RUNTIME_DIR: nbrelay keeps kernel connection files in its "nbrelay" folder there)."""
    data = tmp_path / "jupyter-data"
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    install(data)
    install_others(data)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime / "nbrelay"


# Poll an outside state (a process, a file) until ``check`` holds (bounded: see ``wait_for``).
eventually = wait_for


def settings_for(root: Path, tmp_path: Path, **changes: object) -> Settings:
    base = Settings(
        root=root,
        lock_dir=tmp_path / "locks",
        kernel_pool=0,
        interrupt_grace=3.0,
    )
    return base.replace(**changes)


@contextlib.asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[Client]:
    ws = Workspace(
        settings,
        FileStore(settings.root, lock_dir=settings.lock_dir),
        id_factory=counter_ids(),
    )
    async with Client(build_server(settings, ws), mode="legacy") as client:
        yield client


@pytest.fixture
async def client(root: Path, tmp_path: Path) -> AsyncIterator[Client]:
    """An MCP client on a server that runs code on local kernels (no warm pool)."""
    async with serve(settings_for(root, tmp_path)) as c:
        yield c
