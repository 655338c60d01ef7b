"""Whose edits `undo` takes back at nbrelay's endpoint inside Jupyter Server: each MCP session
its own; a client without a session is the token it authenticates with (one token, one
caller), as over ``nbrelay serve --http``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.extension.conftest import mcp_url
from tests.helpers import call, call_error, notebook, write_notebook
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def client_of(server: JupyterServer, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"token {server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(mcp_url(server), http_client=http), mode=mode) as client,
    ):
        yield client


async def sources(client: Client, path: str) -> list[str]:
    return [c["source"] for c in (await call(client, "read_notebook", path=path))["cells"]]


async def test_each_session_undoes_only_its_own_edits(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    async with client_of(ext_server, "legacy") as a, client_of(ext_server, "legacy") as b:
        for first in ("a", "b"):
            path = f"{folder}/{first}.ipynb"
            write_notebook(local / f"{first}.ipynb", notebook("shared", "other"))
            await call(a, "edit_cell", path=path, cell="c0", source="A's edit")
            await call(b, "insert_cells", path=path, after="c1", cells=["B's cell"])
            one, mine, two, theirs = (
                (a, "edit cell", b, "insert cells")
                if first == "a"
                else (b, "insert cells", a, "edit cell")
            )
            assert (await call(one, "undo", path=path))["undone"] == [mine]
            left = ["shared", "other", "B's cell"] if first == "a" else ["A's edit", "other"]
            assert await sources(one, path) == left
            assert "nothing to undo" in await call_error(one, "undo", path=path)
            assert (await call(two, "undo", path=path))["undone"] == [theirs]
            assert await sources(two, path) == ["shared", "other"]


async def test_clients_without_a_session_are_their_token(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    """Two 2026-07-28 clients with Jupyter's one token are one caller: either undoes the other's
    last edit (as docs/deploy/http.md says), and a client's own history holds from call to call although
    Jupyter gives each token-authenticated request without its cookie a new anonymous user."""
    folder, local = ext_folder
    path = f"{folder}/n.ipynb"
    write_notebook(local / "n.ipynb", notebook("start"))
    async with client_of(ext_server, "auto") as a, client_of(ext_server, "auto") as b:
        await call(a, "edit_cell", path=path, cell="c0", source="A's edit")
        assert (await call(b, "undo", path=path))["undone"] == ["edit cell"]
        assert await sources(a, path) == ["start"]
        await call(a, "edit_cell", path=path, cell="c0", source="again")
        assert (await call(a, "undo", path=path))["undone"] == ["edit cell"]
        assert await sources(a, path) == ["start"]
