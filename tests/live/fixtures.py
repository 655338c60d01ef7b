"""Fixtures for live mode, loaded as a pytest plugin by the root conftest.

``jupyter`` is one JupyterLab server (with jupyter-collaboration and nbrelay's extension) for the
whole session; each test gets a folder of its own in its root (``live_folder``), so tests never
see each other's notebooks. Tests that restart or break a server start their own with
``start_jupyter``. ``way`` runs a room store test over a WebSocket and in process
(``tests.live.rooms``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.live.older_collaboration import WITH_NBRELAY
from tests.live.rooms import WAYS
from tests.live.server import JupyterServer
from tests.servers import Folders, free_port, running, servers_of_a_test

_folders = Folders("t")


@pytest.fixture(scope="session")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    base = tmp_path_factory.mktemp("jupyter")
    server = JupyterServer(root=base / "root", work=base / "work", port=free_port(), nbrelay=True)
    with running(server):
        yield server


@pytest.fixture(params=WAYS)
def way(request: pytest.FixtureRequest) -> str:
    """How the room store reaches the rooms (``tests.live.rooms``): "websocket" (live mode) or
    "in-process" (the server extension)."""
    return str(request.param)


@pytest.fixture
def live_folder(jupyter: JupyterServer) -> tuple[str, Path]:
    """A fresh folder in the session server's root: (its server path, its local path)."""
    return _folders.fresh(jupyter.root)


@pytest.fixture
def start_jupyter(tmp_path: Path) -> Iterator[Callable[..., JupyterServer]]:
    """Start servers of a test's own (stopped by PID at the end)."""

    def make(
        n: int, *, collaboration: bool = True, kind: str = "lab", args: Sequence[str] = ()
    ) -> JupyterServer:
        return JupyterServer(
            root=tmp_path / f"root{n}",
            work=tmp_path / f"work{n}",
            port=free_port(),
            collaboration=collaboration,
            kind=kind,
            extra_args=list(args),
            nbrelay=kind == "lab" or kind.removeprefix("collaboration-") in WITH_NBRELAY,
        )

    with servers_of_a_test(make) as start:
        yield start
