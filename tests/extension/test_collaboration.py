"""The one adapter for jupyter-collaboration's internals (``extension.collaboration``).

Pinned against the installed release: a real Jupyter Server with jupyter-collaboration runs
nbrelay's extension, which checks every attribute it uses when it starts and on each room it
joins; the agent's edit, save and the idle close of the room it opened all go through them. And
what a release without one of them does: nbrelay refuses, naming it, instead of reporting a save
that never happened (a renamed attribute cannot be caused for real: it is removed here).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from nbrelay.extension.collaboration import (
    APP_NEEDS,
    ROOM_NEEDS,
    Collaboration,
    CollaborationChanged,
)
from tests.extension.conftest import ext_client
from tests.extension.test_extension import sources_on_disk
from tests.helpers import call, notebook, text_of, write_notebook
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio

REFUSAL = "cannot work in this server's collaboration rooms"


async def test_the_installed_collaboration_has_everything_nbrelay_uses(
    start_ext_server: Any,
) -> None:
    server: JupyterServer = start_ext_server(args=["--NbrelayExtension.room_idle_close=0.5"])
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    async with ext_client(server) as client:
        await call(client, "edit_cell", path="n.ipynb", cell=0, source="a = 2")
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert sources_on_disk(server.root / "n.ipynb") == ["a = 2"]
        assert "note" not in saved
        await wait_for(
            lambda: "nbrelay closed the room of n.ipynb" in server.log.read_text(), seconds=30
        )
    log = server.log.read_text()
    assert REFUSAL not in log
    assert "did not succeed" not in log
    assert "failed" not in log


def _app(**without: bool) -> Any:
    """A stand-in for jupyter-collaboration's extension app with every attribute nbrelay uses
    but those named."""
    server = SimpleNamespace(rooms={}, delete_room=None)
    values: dict[str, Any] = {
        "get_document": None,
        "ywebsocket_server": server,
        "file_loaders": {},
        "_room_locks": {},
        "stop_extension": None,
    }
    assert set(values) == set(APP_NEEDS)
    return SimpleNamespace(**{k: v for k, v in values.items() if k not in without})


@pytest.mark.parametrize("gone", APP_NEEDS)
async def test_an_app_without_what_nbrelay_uses_is_refused_naming_it(gone: str) -> None:
    collab = Collaboration(_app(**{gone: True}), serverapp=None)
    collab.check()
    assert collab.broken is not None
    assert gone in collab.broken.message
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.open("n.ipynb")
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.save(object(), 30)


async def test_a_room_class_without_its_save_is_refused_not_reported_saved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rooms = importlib.import_module("jupyter_server_ydoc.rooms")
    monkeypatch.delattr(rooms.DocumentRoom, "_save_to_disc")
    collab = Collaboration(_app(), serverapp=None)
    collab.check()
    with pytest.raises(CollaborationChanged, match="_save_to_disc") as refused:
        await collab.save(object(), 30)
    assert "nothing was changed" in refused.value.message
    assert refused.value.hint


@pytest.mark.parametrize("gone", ROOM_NEEDS)
async def test_a_room_without_what_nbrelay_uses_is_refused_naming_it(
    gone: str, tmp_path: Path
) -> None:
    room = SimpleNamespace(
        ydoc=None,
        clients=set(),
        ready=True,
        ready_event=None,
        _document=object(),
        _update_lock=None,
        _file=SimpleNamespace(last_modified=None, number_of_subscriptions=0),
    )
    delattr(room, gone)
    document = getattr(room, "_document", object())

    async def get_document(**kwargs: Any) -> Any:
        return document

    app = _app()
    app.get_document = get_document
    app.ywebsocket_server.rooms["json:notebook:f1"] = room
    serverapp = SimpleNamespace(
        web_app=SimpleNamespace(settings={"file_id_manager": SimpleNamespace(index=lambda p: "f1")})
    )
    collab = Collaboration(app, serverapp)
    collab.check()
    assert collab.broken is None
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.open("n.ipynb")
    # From then on every room operation refuses.
    with pytest.raises(CollaborationChanged, match=gone):
        await collab.save(room, 30)


async def test_a_room_a_browser_is_still_loading_is_waited_for_and_shared(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    """A person opens a big notebook; while the server is still loading it into the room their
    connection made, the agent edits it. The agent's edit waits for that load and lands in that
    room (jupyter-collaboration's ``get_document`` holds the room's lock until the load ends;
    nbrelay's own wait for a listed room that is not ready guards a release that does not):
    the server loads the notebook once, and the person sees the agent's cell. The server's log
    tells when the load began and ended, so the test knows the agent's call came inside."""
    from tests.live.person import person, session

    server = ext_server
    folder, local = ext_folder
    cells = 20_000  # big enough that the server's load takes a while
    write_notebook(local / "big.ipynb", notebook(*(f"x = {i}" for i in range(cells))))
    path = f"{folder}/big.ipynb"
    room = f"json:notebook:{(await session(server, path))['fileId']}"
    began, ended = f"Initializing room {room}", f"Content in room {room} loaded from file"
    joined: list[str] = []
    async with ext_client(server) as client, anyio.create_task_group() as tg:

        async def join() -> None:
            async with person(server, path) as p:
                await wait_for(lambda: p.sources()[:1] == ["from the agent"], seconds=120)
                joined.extend(p.sources()[:2])

        tg.start_soon(join)
        await wait_for(lambda: began in server.log.read_text(), seconds=60)
        assert ended not in server.log.read_text(), "the load ended before the agent's call"
        with anyio.fail_after(120):
            await call(client, "insert_cells", path=path, index=0, cells=["from the agent"])
    assert joined == ["from the agent", "x = 0"]
    log = server.log.read_text()
    assert log.count(began) == 1, "the room was loaded again"
    assert log.count(ended) == 1


PROGRESSIVE = ["--YDocExtension.document_load_progressively=True"]


async def _whole_or_still_loading(client: Any, path: str, cells: int) -> int:
    """Read until the whole notebook comes; each read is the whole notebook or says the server
    is still loading it, never a part passed off as the notebook. Returns the refusals."""
    refused = 0
    with anyio.fail_after(300):
        while True:
            result = await client.call_tool("read_notebook", {"path": path, "limit": 1})
            if not result.is_error:
                assert result.structured_content["cell_count"] == cells, result.structured_content
                return refused
            assert "is still loading" in text_of(result), text_of(result)
            refused += 1


async def test_a_notebook_the_server_loads_progressively_is_read_whole_both_ways(
    start_ext_server: Any,
) -> None:
    """jupyter-collaboration's ``document_load_progressively`` makes a room ready once the
    notebook's metadata is in; its cells follow over seconds. nbrelay read a 20,000-cell
    notebook so as 0 cells, then 6,035 (live mode and extension alike). Now it waits for the
    load (in process for the room's own future; over a WebSocket while cells keep arriving in
    a room much smaller than its file), and says so if the load outlasts its wait."""
    from tests.live.conftest import agent

    server: JupyterServer = start_ext_server(args=PROGRESSIVE)
    cells = 3_000
    for name in ("live.ipynb", "ext.ipynb"):
        write_notebook(server.root / name, notebook(*(f"x = {i}" for i in range(cells))))
    async with agent(server) as live:
        await _whole_or_still_loading(live, "live.ipynb", cells)
    async with ext_client(server) as ext:
        await _whole_or_still_loading(ext, "ext.ipynb", cells)
