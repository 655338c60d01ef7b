"""Every mode from one fixture: ``anymode`` is the canonical tools through the official MCP client
in file mode, live mode and extension mode, with the local folder the notebooks are in.

A test writes its fixture notebooks into ``mode.folder`` once, calls the tools with
``mode.path(name)`` and reads the files back from ``mode.local(name)``: the same calls and the
same assertions in every mode. The servers are the session's: one JupyterLab with
jupyter-collaboration for live mode (``jupyter``), one Jupyter Server running nbrelay's
extension (``ext_session_server``); each test works in a folder of its own in their roots.

- file mode: nbrelay in process on a folder of its own, local kernels;
- live mode: nbrelay in process on the JupyterLab's rooms (a folder of its root), its kernels;
- extension mode: nbrelay inside the Jupyter Server, at ``{base_url}mcp`` over streamable HTTP.
  It serves the whole root, so the agent names the test's folder in every path.

Its fixtures are imported by ``tests/tools/conftest.py`` (import them into another folder's
conftest to use them there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Secret, Settings
from nbrelay.server import build_server
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids
from tests.live.server import JupyterServer
from tests.servers import Folders, running

MODES = ("files", "live", "extension")
# Live and extension mode start a Jupyter Server (the session's): marked so, as the fixtures
# that start one are (``-m "not jupyter"`` leaves them out).
_PARAMS = [pytest.param(m, marks=[pytest.mark.jupyter] if m != "files" else []) for m in MODES]

_folders = Folders("m")


@dataclass(frozen=True)
class Mode:
    """One mode's client, and where its notebooks are on disk."""

    name: str
    client: Client
    folder: Path  # the local folder the test's notebooks are in
    prefix: str  # what the agent puts before a name in that folder ("" or "m0001/")
    server: JupyterServer | None = None  # the Jupyter Server (live and extension modes)

    def path(self, name: str) -> str:
        """The path the agent passes for ``name`` in the test's folder."""
        return f"{self.prefix}{name}"

    def local(self, name: str) -> Path:
        return self.folder / name

    @property
    def collaborative(self) -> bool:
        """Whether a Jupyter Server's rooms hold the notebooks (saved by the server)."""
        return self.name != "files"


@pytest.fixture(scope="session")
def ext_session_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """One Jupyter Server (JupyterLab + jupyter-collaboration) with nbrelay's extension on, for
    the session."""
    from tests.extension.conftest import make_server

    with running(make_server(tmp_path_factory.mktemp("modes-ext"))) as server:
        yield server


@pytest.fixture(params=_PARAMS)
async def anymode(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Mode]:
    """The canonical tools in one mode, on a fresh folder (no warm kernel pool: only tests that
    run code start kernels)."""
    mode = str(request.param)
    if mode == "extension":
        from tests.extension.conftest import ext_client

        server: JupyterServer = request.getfixturevalue("ext_session_server")
        name, folder = _folders.fresh(server.root)
        async with ext_client(server) as client:
            yield Mode(mode, client, folder, f"{name}/", server)
        return
    settings = Settings(root=tmp_path / "root", lock_dir=tmp_path / "locks", kernel_pool=0)
    if mode == "live":
        from nbrelay.jupyter_api import JupyterAPI
        from nbrelay.kernels.remote import RemoteKernels
        from nbrelay.stores.rtc import RTCStore

        server = request.getfixturevalue("jupyter")
        name, folder = _folders.fresh(server.root)
        api = JupyterAPI(server.url, Secret(server.token))
        store = RTCStore(api, agent_name="nbrelay test agent", folder=name)
        kernels = RemoteKernels(api, server_path=store.paths.server)
        ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
        async with Client(build_server(settings, ws)) as client:
            yield Mode(mode, client, folder, "", server)
        return
    from nbrelay.stores.files import FileStore

    folder = tmp_path / "root"
    folder.mkdir()
    files = FileStore(folder, lock_dir=tmp_path / "locks")
    ws = Workspace(settings, files, id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as client:
        yield Mode(mode, client, folder, "")
