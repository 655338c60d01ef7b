"""A real Jupyter Server (JupyterLab + jupyter-collaboration) with nbrelay's server extension.

``ext_server`` is one server for the module's tests (each test works in a folder of its own);
``start_ext_server`` starts others (a denying authorizer, a profile trait, the extension turned
off), stopped by PID at the end. The extension is enabled the way ``jupyter server extension
enable --user`` does it, in the server's own config folder, so these tests do not depend on how
nbrelay was installed (the packaging test checks the wheel's own ``config.d`` file).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.live.server import JupyterServer
from tests.servers import Folders, free_port, running, servers_of_a_test

_folders = Folders("e")

# Jupyter authorizers: one lets its users read everything and change or run nothing; one lets
# them run code but not change notebooks; one lets them use the server but not its notebooks.
READ_ONLY_AUTHORIZER = """
from jupyter_server.auth.authorizer import Authorizer


class ReadOnly(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return action == "read"


class RunNotWrite(Authorizer):  # may run code, may not change notebooks
    def is_authorized(self, handler, user, action, resource):
        return not (resource == "contents" and action == "write")


class NoContents(Authorizer):  # may use the server, may not read or change notebooks
    def is_authorized(self, handler, user, action, resource):
        return resource != "contents"


class NoEvents(Authorizer):  # may do everything but hear the server's events
    def is_authorized(self, handler, user, action, resource):
        return resource != "events"
"""

# Contents managers whose next notebook save (``SlowSave``: after the file is written, as a big
# notebook's does on a slow, busy disk: the file written, its model not yet read back) or next read
# (``SlowLoad``: before the file is read, as a big notebook's first load), once a flag file exists,
# take ``seconds`` longer. The call it slows removes the flag, and leaves ``<flag>.done`` when it
# ends. A slow disk is the one fault here that a test cannot cause for real at a small size.
SLOW_SAVE = """
import asyncio
from pathlib import Path

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from traitlets import Float, Unicode


class SlowSave(AsyncLargeFileManager):
    flag = Unicode("", config=True)
    seconds = Float(0.0, config=True)

    async def save(self, model, path=""):
        saved = await super().save(model, path)
        flag = Path(self.flag) if self.flag else None
        if flag is not None and model.get("type") == "notebook" and flag.exists():
            flag.unlink()
            await asyncio.sleep(self.seconds)
            Path(self.flag + ".done").touch()
        return saved


class SlowLoad(AsyncLargeFileManager):  # the next notebook read, once a flag file exists
    flag = Unicode("", config=True)
    seconds = Float(0.0, config=True)

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        flag = Path(self.flag) if self.flag else None
        if flag is not None and content and flag.exists():
            flag.unlink()
            await asyncio.sleep(self.seconds)
            Path(self.flag + ".done").touch()
        return await super().get(
            path, content=content, type=type, format=format, require_hash=require_hash
        )
"""


# Another server extension that loads notebooks into rooms as some do (datalayer's
# jupyter-mcp-server run as an extension, for one): jupyter-collaboration's ``get_document``,
# asked for over ``GET {base_url}other/load?path=...``.
OTHER_EXTENSION = """
from jupyter_server.base.handlers import APIHandler
from tornado import web


class Load(APIHandler):
    @web.authenticated
    async def get(self):
        path = self.get_argument("path")
        for apps in self.serverapp.extension_manager.extension_apps.values():
            for app in apps:
                if hasattr(app, "get_document") and hasattr(app, "ywebsocket_server"):
                    try:
                        await app.get_document(
                            path=path, content_type="notebook", file_format="json",
                            copy=False, create=True,
                        )
                    except Exception as exc:
                        self.finish({"loaded": False, "error": repr(exc)})
                        return
                    self.finish({"loaded": True})
                    return
        self.finish({"loaded": None})


def _jupyter_server_extension_points():
    return [{"module": "nbrelay_test_other"}]


def _load_jupyter_server_extension(serverapp):
    serverapp.web_app.add_handlers(".*$", [(serverapp.base_url + "other/load", Load)])
"""

# Jupyter reads the user's config folder before the environment's: the test server's own
# folder then decides whether nbrelay is on, whatever the test environment's config.d says.
USER_FIRST = {"JUPYTER_PREFER_ENV_PATH": "0"}


class ExtServer(JupyterServer):
    """A JupyterLab server whose own config folder comes first."""

    def _command(self) -> list[str]:
        return ["/usr/bin/env", *(f"{k}={v}" for k, v in USER_FIRST.items()), *super()._command()]


def make_server(
    base: Path,
    *,
    enable: bool = True,
    collaboration: bool = True,
    args: Sequence[str] = (),
    root: Path | None = None,
    other: bool = False,
) -> JupyterServer:
    """A server (not started) whose config folder enables nbrelay (or leaves it as is), serving
    ``root`` (by default ``base/root``) with its own files in ``base/work``; with ``other``, the
    other extension above too."""
    work = base / "work"
    server = ExtServer(
        root=root or base / "root",
        work=work,
        port=free_port(),
        collaboration=collaboration,
        extra_args=list(args),
    )
    confd = work / "config" / "jupyter_server_config.d"
    confd.mkdir(parents=True, exist_ok=True)
    if enable:
        extensions = {"ServerApp": {"jpserver_extensions": {"nbrelay": True}}}
        (confd / "nbrelay.json").write_text(json.dumps(extensions))
    # ``python -m jupyter_server`` runs in the work folder, which is on its sys.path.
    (work / "nbrelay_test_authz.py").write_text(READ_ONLY_AUTHORIZER)
    (work / "nbrelay_test_slow.py").write_text(SLOW_SAVE)
    if other:
        (work / "nbrelay_test_other.py").write_text(OTHER_EXTENSION)
        others = {"ServerApp": {"jpserver_extensions": {"nbrelay_test_other": True}}}
        (confd / "nbrelay_test_other.json").write_text(json.dumps(others))
    return server


@pytest.fixture(scope="module")
def ext_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    with running(make_server(tmp_path_factory.mktemp("ext"))) as server:
        yield server


@pytest.fixture
def ext_folder(ext_server: JupyterServer) -> tuple[str, Path]:
    """A fresh folder in the server's root: (its server path, its local path)."""
    return _folders.fresh(ext_server.root)


@pytest.fixture
def start_ext_server(tmp_path: Path) -> Iterator[Callable[..., JupyterServer]]:
    """Start servers of a test's own (stopped by PID at the end)."""

    def make(
        n: int,
        *,
        enable: bool = True,
        collaboration: bool = True,
        args: Sequence[str] = (),
        other: bool = False,
    ) -> JupyterServer:
        return make_server(
            tmp_path / f"s{n}", enable=enable, collaboration=collaboration, args=args, other=other
        )

    with servers_of_a_test(make) as start:
        yield start


def mcp_url(server: JupyterServer) -> str:
    return f"{server.url}mcp"


@asynccontextmanager
async def ext_client(server: JupyterServer, token: str | None = None) -> AsyncIterator[Client]:
    """The official MCP client on the server's ``/mcp``, with Jupyter's token."""
    headers = {"Authorization": f"token {token or server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(mcp_url(server), http_client=http)) as client,
    ):
        yield client
