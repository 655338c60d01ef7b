"""The room store's cost: an edit costs what it changed, not the notebook, both ways in.

Counted, not timed: each room keeps its notebook converted cell by cell (``notebook.ymirror``),
which counts the cells it converts and the times it had to convert the whole document. Over a
WebSocket the store works on a real Jupyter Server's room; in process it works on a Yjs document
held by a stand-in for jupyter-collaboration's room registry (the in-process room, way and store
are nbrelay's own; only the server's bookkeeping around the document is stood in for).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nbrelay.caller import ANYONE
from nbrelay.notebook.edits import CellSpec, Plan, plan_insert, plan_set_source
from nbrelay.notebook.model import Notebook
from nbrelay.stores.rtc import RTCStore
from nbrelay.stores.rtc_events import SaveEvents
from tests.helpers import counter_ids, notebook, write_notebook
from tests.live.conftest import live_store
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio

CELLS = 400


class StandInRooms:
    """The part of ``extension.collaboration.Collaboration`` the in-process way calls, over
    one Yjs document loaded as jupyter-collaboration loads a notebook (jupyter_ydoc)."""

    session_id = "session"

    def __init__(self, nb: Notebook) -> None:
        from jupyter_ydoc import YNotebook
        from pycrdt import Doc

        doc: Doc[Any] = Doc()
        YNotebook(doc).set(nb.data)
        self.room = SimpleNamespace(ydoc=doc, clients=set())
        self.saves = 0
        self.abandoned: dict[str, Any] = {}  # no call gives up on a load here
        self.events = SaveEvents()  # no server sends any here

    def room_id(self, path: str) -> tuple[str, str]:
        return "file", "json:notebook:file"

    def current(self, room_id: str) -> Any:
        return self.room

    async def open(self, path: str) -> tuple[Any, bool]:
        return self.room, False

    @staticmethod
    def ydoc(room: Any) -> Any:
        return room.ydoc

    async def settled(self, room: Any, within: float) -> None:
        return None

    async def save(self, room: Any, within: float, late: Any = None) -> str:
        self.saves += 1
        return "success"


class Exists:
    """The part of ``extension.contents.ServerContents`` the in-process way calls: every file
    exists, on no local disk (so no real-path rule applies)."""

    def __init__(self) -> None:
        from nbrelay.extension.contents import Confinement

        self.confinement = Confinement(object())

    async def exists(self, path: str) -> bool:
        return True


@contextlib.asynccontextmanager
async def room_store(
    way: str, request: pytest.FixtureRequest, nb: Notebook
) -> AsyncIterator[RTCStore]:
    if way == "websocket":
        jupyter: JupyterServer = request.getfixturevalue("jupyter")
        folder, local = request.getfixturevalue("live_folder")
        write_notebook(Path(local) / "n.ipynb", nb)
        store = live_store(jupyter, folder)
    else:
        from nbrelay.extension.store import InProcessWay
        from nbrelay.jupyter_api import JupyterAPI

        way_in = InProcessWay(StandInRooms(nb), Exists())  # type: ignore[arg-type]
        store = RTCStore(JupyterAPI("http://127.0.0.1:9/", None), way=way_in)
    async with contextlib.aclosing(store), store.running():
        yield store


async def test_an_edit_converts_only_the_cells_it_changed(
    request: pytest.FixtureRequest, way: str
) -> None:
    nb = notebook(*(f"x{i} = {i}" for i in range(CELLS)))
    ids = counter_ids("new")
    async with room_store(way, request, nb) as store:
        first = await store.load("n.ipynb", ANYONE)
        mirror = store._rooms["n.ipynb"].mirror
        assert len(first.notebook.cells) == CELLS
        assert (mirror.cells_converted, mirror.whole_reads) == (CELLS, 0)

        target = first.notebook.ids[CELLS // 2]

        def edit_one(nb: Notebook) -> Plan:
            return plan_set_source(nb, nb.ids.index(target), f"edited = {len(nb.cells)}")

        def insert_one(nb: Notebook) -> Plan:
            return plan_insert(nb, CELLS // 3, [CellSpec("code", "inserted = 1")], ids)

        for planner in (edit_one, insert_one, edit_one):
            await store.edit(
                "n.ipynb", ANYONE, planner, expected_version=None, guard_positions=False
            )
        read = await store.load("n.ipynb", ANYONE)
        again = await store.load("n.ipynb", ANYONE)
    # Three edits and two reads converted the cells the edits made or changed, nothing else.
    assert mirror.cells_converted == CELLS + 3
    assert mirror.whole_reads == 0
    assert read.notebook.cells[CELLS // 2 + 1]["source"] == f"edited = {CELLS + 1}"
    assert read.notebook.cells[CELLS // 3]["source"] == "inserted = 1"
    assert again.version == read.version
