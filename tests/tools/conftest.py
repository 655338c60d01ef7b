"""An in-process MCP client on the canonical profile: file mode and live mode (a real Jupyter
Server with jupyter-collaboration), each in both client modes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.errors import NotebookInvalid
from nbrelay.notebook.model import parse
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids, write_notebook

# Every mode from one fixture (file, live, extension): tests/modes.py.
from tests.modes import anymode, ext_session_server  # noqa: F401


@pytest.fixture(params=["files", "live"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """Where notebooks live: files under a folder, or a Jupyter Server's rooms (live mode)."""
    return str(request.param)


@pytest.fixture
def root(store_mode: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The folder the tools serve; in live mode a folder of the Jupyter Server's root."""
    if store_mode == "live":
        _, path = request.getfixturevalue("live_folder")
        return Path(path)
    served = tmp_path / "root"
    served.mkdir()
    return served


def live_workspace(settings: Settings, request: pytest.FixtureRequest, root: Path) -> Workspace:
    from nbrelay.config import Secret
    from nbrelay.jupyter_api import JupyterAPI
    from nbrelay.kernels.remote import RemoteKernels
    from nbrelay.stores.rtc import RTCStore

    server = request.getfixturevalue("jupyter")
    api = JupyterAPI(server.url, Secret(server.token))
    # The tests read the file right after each call: every edit waits for its save.
    store = RTCStore(api, agent_name="nbrelay test agent", folder=root.name, save_each_edit=True)
    kernels = RemoteKernels(api, server_path=store.paths.server)
    return Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)


@pytest.fixture(params=["auto", "legacy"])
async def client(
    request: pytest.FixtureRequest, store_mode: str, root: Path, tmp_path: Path
) -> AsyncIterator[Client]:
    # No warm kernel pool: only tests that run code start kernels.
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    if store_mode == "live":
        ws = live_workspace(settings, request, root)
    else:
        store = FileStore(root, lock_dir=tmp_path / "locks")
        ws = Workspace(settings, store, id_factory=counter_ids())
    async with Client(build_server(settings, ws), mode=request.param) as c:
        yield c


SomeoneElse = Callable[[str, str, str], Awaitable[None]]


@pytest.fixture
def someone_else(store_mode: str, root: Path, request: pytest.FixtureRequest) -> SomeoneElse:
    """Set a cell's source as another person would: in file mode by rewriting the file, in live
    mode by typing in the notebook's room (an RTC client of its own)."""

    async def change(name: str, cell_id: str, source: str) -> None:
        if store_mode == "files":
            nb = parse((root / name).read_bytes())
            next(c for c in nb.cells if c["id"] == cell_id)["source"] = source
            write_notebook(root / name, nb)
            return
        from tests.live.person import fresh_sources, person
        from tests.live.server import wait_for

        server = request.getfixturevalue("jupyter")
        path = f"{root.name}/{name}"
        async with person(server, path) as p:
            p.nb.set_cell(p.ids().index(cell_id), source=source)
            i = p.ids().index(cell_id)

            # Wait until the server has it, and has saved it (autosave, about 1 s later).
            async def in_room() -> bool:
                return (await fresh_sources(server, path))[1][i] == source

            def saved() -> bool:
                try:
                    return bool(parse((root / name).read_bytes()).cells[i]["source"] == source)
                except NotebookInvalid:  # Jupyter Server rewrites files in place: mid-write
                    return False

            await wait_for(in_room, seconds=20)
            await wait_for(saved, seconds=20)

    return change
