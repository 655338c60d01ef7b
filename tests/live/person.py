"""A second RTC client standing in for a person in JupyterLab.

It is deliberately built from upstream parts only, not from nbrelay's room client: pycrdt's own
``Provider`` keeps a ``jupyter_ydoc.YNotebook`` in sync over a ``websockets`` connection, exactly
as the recipe for a Python collaborator describes. ``type`` sends keystrokes one character at a
time, as a browser does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from jupyter_ydoc import YNotebook
from pycrdt import Doc, Provider, Text
from websockets.asyncio.client import ClientConnection, connect

from tests.helpers import PATIENCE
from tests.live.server import JupyterServer


class _Channel:
    """pycrdt's ``Channel`` over a websockets connection."""

    def __init__(self, ws: ClientConnection, path: str) -> None:
        self._ws = ws
        self._path = path

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self) -> _Channel:
        return self

    async def __anext__(self) -> bytes:
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                message = await self._ws.recv()
            except ConnectionClosed:
                raise StopAsyncIteration from None
            if isinstance(message, bytes):
                return message

    async def send(self, message: bytes) -> None:
        await self._ws.send(message)

    async def recv(self) -> bytes:
        return await self.__anext__()


class Person:
    """A synced notebook document that a test can read and type into."""

    def __init__(self, nb: YNotebook, doc: Doc[Any]) -> None:
        self.nb = nb
        self.doc = doc

    def ids(self) -> list[str]:
        return [str(c["id"]) for c in self.nb.ycells]

    def sources(self) -> list[str]:
        return [str(c["source"]) for c in self.nb.ycells]

    def cell(self, cell_id: str) -> Any:
        for c in self.nb.ycells:
            if c["id"] == cell_id:
                return c
        raise KeyError(cell_id)

    def source(self, cell_id: str) -> str:
        return str(self.cell(cell_id)["source"])

    def type_at_end(self, cell_id: str, char: str) -> None:
        text: Text = self.cell(cell_id)["source"]
        text.insert(len(text), char)

    async def type(self, cell_id: str, text: str, *, interval: float = 0.05) -> None:
        for ch in text:
            self.type_at_end(cell_id, ch)
            await anyio.sleep(interval)


async def session(server: JupyterServer, path: str) -> dict[str, Any]:
    """The room of ``path`` as JupyterLab's page finds it: jupyter-collaboration's session, or
    on jupyter-server-documents (no such endpoint) the file id its page asks for."""
    async with httpx2.AsyncClient(
        base_url=server.url, headers={"Authorization": f"token {server.token}"}
    ) as http:
        resp = await http.put(
            f"api/collaboration/session/{path}", json={"format": "json", "type": "notebook"}
        )
        if resp.status_code == 404 and server.kind == "server-documents":
            indexed = await http.post("api/fileid/index", params={"path": path})
            indexed.raise_for_status()
            return {"fileId": indexed.json()["id"], "sessionId": ""}
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data


@asynccontextmanager
async def person(server: JupyterServer, path: str) -> AsyncIterator[Person]:
    """Join a notebook's room as a person would and yield once it is synced."""
    sess = await session(server, path)
    url = f"ws://127.0.0.1:{server.port}/api/collaboration/room/json:notebook:{sess['fileId']}"
    if sess["sessionId"]:
        url += f"?sessionId={sess['sessionId']}"
    async with connect(
        url, additional_headers={"Authorization": f"token {server.token}"}, max_size=None
    ) as ws:
        doc: Doc[Any] = Doc()
        nb = YNotebook(doc)
        async with Provider(doc, _Channel(ws, url)) as provider:
            with anyio.fail_after(30):
                await provider.synced.wait()
            yield Person(nb, doc)


async def fresh_sources(server: JupyterServer, path: str) -> tuple[list[str], list[str]]:
    """(ids, sources) as a client that joins now sees them."""
    async with person(server, path) as p:
        return p.ids(), p.sources()


async def restart_kernel_as_a_person(server: JupyterServer, path: str) -> None:
    """JupyterLab's "Restart Kernel": the server restarts notebook ``path``'s session kernel."""
    headers = {"Authorization": f"token {server.token}"}
    async with httpx2.AsyncClient(base_url=server.url, headers=headers, timeout=PATIENCE) as http:
        sessions = (await http.get("api/sessions")).json()
        kernel = next(s["kernel"]["id"] for s in sessions if s["path"] == path)
        answer = await http.post(f"api/kernels/{kernel}/restart")
        assert answer.status_code == 200, answer.text
