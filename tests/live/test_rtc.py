"""Live mode against a real Jupyter Server with jupyter-collaboration.

A second RTC client (``tests.live.person``, built from upstream pycrdt parts only) plays the person
in JupyterLab. What must hold: the person's keystrokes and the agent's edits both survive, cells
are never duplicated, the person's document, a fresh client and the file on disk agree; changes
made outside (the file rewritten under an open room, the server restarted) reach the agent as a
conflict or a note, never as an edit applied at a stale index.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import websockets
from mcp import Client

from nbrelay.config import Secret
from nbrelay.errors import InvalidArgument, NotebookInvalid, RemoteError
from nbrelay.jupyter_api import JupyterAPI, base_url
from nbrelay.notebook.model import Sources, parse
from nbrelay.stores.contents import NOT_LIVE_NOTE
from nbrelay.stores.rtc import RECONNECT_NOTE, RELOAD_NOTE, RTCStore
from nbrelay.stores.yprotocol import Room
from tests.helpers import PATIENCE, call, call_error, code, notebook, write_notebook
from tests.live.conftest import AGENT, agent, live_store
from tests.live.person import fresh_sources, person
from tests.live.rooms import room_agent
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio


def disk(path: Path) -> tuple[list[str], list[str]]:
    """(ids, sources) of the file; Jupyter Server rewrites files in place, so a read can land
    mid-write: it is retried for a moment."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            nb = parse(path.read_bytes())
            return nb.ids, [str(c["source"]) for c in nb.cells]
        except NotebookInvalid:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


async def until_on_disk(path: Path, want: tuple[list[str], list[str]], seconds: float = 15) -> None:
    def saved() -> bool:
        try:
            return disk(path) == want
        except NotebookInvalid:  # Jupyter Server rewrites files in place: caught mid-write
            return False

    await wait_for(saved, seconds=seconds)


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_person_types_while_the_agent_works_and_nothing_is_lost(
    jupyter: JupyterServer, live_folder: tuple[str, Path], seed: int, way: str
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("x = 0\n", "y = 0", "z = 0", "w = 0"))
    rng = random.Random(seed)
    typed = "".join(rng.choice(string.ascii_letters + " ") for _ in range(60))
    expected: dict[str, str] = {"c0": "x = 0\n", "c1": "y = 0", "c2": "z = 0", "c3": "w = 0"}
    agent_ops = 0
    n = f"{folder}/n.ipynb"
    async with room_agent(way, jupyter, prefix=f"s{seed}") as client:
        await call(client, "read_notebook", path=n)
        await call(client, "execute", path=n, code="0")  # the kernel is up
        async with person(jupyter, f"{folder}/n.ipynb") as p:
            done = anyio.Event()

            async def type_keys() -> None:
                await p.type("c0", typed, interval=0.05)  # 20 keystrokes a second
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(type_keys)
                while not done.is_set():
                    agent_ops += 1
                    others = [cid for cid in expected if cid != "c0"]
                    op = rng.choice(["insert", "edit", "move", "same", "run", "delete"])
                    if op == "insert" or len(others) < 2:
                        out = await call(
                            client,
                            "insert_cells",
                            path=n,
                            cells=[f"v{agent_ops} = 1"],
                            after=rng.choice(others),
                        )
                        expected[out["changed"][0]["id"]] = f"v{agent_ops} = 1"
                    elif op == "edit":
                        cid = rng.choice(others)
                        await call(client, "edit_cell", path=n, cell=cid, source=f"e{agent_ops}")
                        expected[cid] = f"e{agent_ops}"
                    elif op == "move":
                        cid = rng.choice(others)
                        to = rng.randrange(len(expected))
                        await call(client, "move_cells", path=n, cells=[cid], to=to)
                    elif op == "same":
                        # The agent edits the line above the one the person is typing on.
                        old = expected["c0"]
                        await call(
                            client,
                            "edit_cell",
                            path=n,
                            cell="c0",
                            find=old.strip(),
                            replace=f"x = {agent_ops}",
                        )
                        expected["c0"] = f"x = {agent_ops}\n"
                    elif op == "run":
                        # Run another cell, or the very cell the person is typing in.
                        cid = rng.choice([*others, "c0"])
                        await call(client, "execute", path=n, cells=[cid], timeout=30)
                    else:
                        cid = rng.choice(others)
                        await call(client, "delete_cells", path=n, cells=[cid])
                        del expected[cid]
            assert agent_ops >= 10

            # Let the last keystrokes reach the server, then compare every view.
            async def agreed() -> bool:
                return await fresh_sources(jupyter, f"{folder}/n.ipynb") == (p.ids(), p.sources())

            await wait_for(agreed, seconds=10)
            ids, sources = p.ids(), p.sources()

            # A read is the room as nbrelay holds it: the server relays the last keystrokes to
            # it within moments.
            async def read_agrees() -> bool:
                view = await call(client, "read_notebook", path=n, full=True)
                return [c["source"] for c in view["cells"]] == sources

            await wait_for(read_agrees, seconds=10)
        view = await call(client, "read_notebook", path=n, full=True)
    assert len(ids) == len(set(ids)), f"duplicated cells: {ids}"
    assert set(ids) == set(expected)
    by_id = dict(zip(ids, sources, strict=True))
    assert by_id["c0"] == expected["c0"] + typed, "a keystroke or the agent's edit was lost"
    assert {cid: by_id[cid] for cid in expected if cid != "c0"} == {
        cid: src for cid, src in expected.items() if cid != "c0"
    }
    assert [c["id"] for c in view["cells"]] == ids
    assert [c["source"] for c in view["cells"]] == sources
    await until_on_disk(local / "n.ipynb", (ids, sources))


async def test_the_file_rewritten_under_an_open_room_is_reported_not_overwritten(
    jupyter: JupyterServer, live_folder: tuple[str, Path], way: str
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a", "b"))
    n = f"{folder}/n.ipynb"
    async with room_agent(way, jupyter) as client:
        # The room is open, the edit saved.
        await call(client, "edit_cell", path=n, cell="c1", source="b1")
        await call(client, "save_notebook", path=n)
        # Someone rewrites the file behind JupyterLab's back: a new first cell, c0 changed.
        outside = notebook("a", "b1")
        outside.cells.insert(0, code("new", "n0"))
        outside.cells[1]["source"] = "A"
        write_notebook(local / "n.ipynb", outside)

        async def reloaded() -> bool:  # the server notices within its poll interval
            return (await fresh_sources(jupyter, n))[0] == ["n0", "c0", "c1"]

        await wait_for(reloaded, seconds=15)
        # An edit by position is refused: index 0 is now another cell.
        text = await call_error(client, "edit_cell", path=n, cell=0, source="zzz")
        assert "inserted, deleted or moved cells" in text
        view = await call(client, "read_notebook", path=n)
        assert RELOAD_NOTE in view["note"]
        assert [c["id"] for c in view["cells"]] == ["n0", "c0", "c1"]
        # An edit by id applies to the notebook as it is now.
        await call(client, "edit_cell", path=n, cell="c1", source="B")
        await call(client, "save_notebook", path=n)
    assert disk(local / "n.ipynb") == (["n0", "c0", "c1"], ["new", "A", "B"])


@pytest.mark.parametrize("crash", [True, False], ids=["killed", "stopped"])
async def test_a_server_restart_means_a_fresh_document_and_a_note(
    start_jupyter: Any, crash: bool
) -> None:
    server: JupyterServer = start_jupyter()
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    async with agent(server) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        if crash:
            server.kill()
        else:
            server.stop(grace=5)
        # While it is down the file changes and the server's update history is lost.
        changed = notebook("a1", "b")
        changed.cells.insert(0, code("top", "t0"))
        write_notebook(server.root / "n.ipynb", changed)
        (server.work / "ystore.db").unlink(missing_ok=True)
        server.start()
        text = await call_error(client, "edit_cell", path="n.ipynb", cell=1, source="no")
        assert "inserted, deleted or moved cells" in text
        assert RECONNECT_NOTE in text or "changed" in text
        view = await call(client, "read_notebook", path="n.ipynb")
        assert [c["id"] for c in view["cells"]] == ["t0", "c0", "c1"]
        await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b2")
        fresh = await fresh_sources(server, "n.ipynb")
    assert fresh == (["t0", "c0", "c1"], ["top", "a1", "b2"])
    assert disk(server.root / "n.ipynb") == fresh


async def test_a_dropped_connection_is_replaced_by_a_fresh_one_and_reported(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a"))
    store = live_store(jupyter, folder)
    async with agent(jupyter, folder, store=store) as client:
        await call(client, "read_notebook", path="n.ipynb")
        room = store._rooms["n.ipynb"]
        assert isinstance(room, Room)
        assert room.ws is not None
        room.ws.transport.abort()  # the network drops
        with anyio.fail_after(PATIENCE):
            await room.closed.wait()
        view = await call(client, "read_notebook", path="n.ipynb")
        assert RECONNECT_NOTE in view["note"]
        assert store._rooms["n.ipynb"] is not room
        await call(client, "edit_cell", path="n.ipynb", cell=0, source="after")
    assert disk(local / "n.ipynb") == (["c0"], ["after"])


async def test_without_collaboration_the_rest_api_is_used_and_the_agent_is_told(
    start_jupyter: Any,
) -> None:
    server: JupyterServer = start_jupyter(collaboration=False)
    async with agent(server) as client:
        created = await call(client, "create_notebook", path="sub/n.ipynb", cells=["a = 1"])
        edited = await call(
            client,
            "insert_cells",
            path="sub/n.ipynb",
            cells=["b = 2"],
            expected_version=created["version"],
        )
        assert NOT_LIVE_NOTE in edited["note"]
        assert disk(server.root / "sub" / "n.ipynb")[1] == ["a = 1", "b = 2"]
        text = await call_error(
            client,
            "edit_cell",
            path="sub/n.ipynb",
            cell=0,
            source="x",
            expected_version=created["version"],
        )
        assert f"changed since version {created['version']}" in text
        listed = await call(client, "list_notebooks")
        assert [n["path"] for n in listed["notebooks"]] == ["sub/n.ipynb"]
        # The version is the Jupyter Server's hash of the file: the first 16 hex digits of its
        # sha256, so a change made by anyone through the server changes it.
        read = await call(client, "read_notebook", path="sub/n.ipynb")
        raw = (server.root / "sub" / "n.ipynb").read_bytes()
        assert read["version"] == hashlib.sha256(raw).hexdigest()[:16]
    assert disk(server.root / "sub" / "n.ipynb")[1] == ["a = 1", "b = 2"]


async def _awareness_states(
    server: JupyterServer, seen: list[dict[str, Any]], connected: anyio.Event, stop: anyio.Event
) -> None:
    """Listen to JupyterLab's global awareness room as a browser would, appending each state to
    ``seen``; ``connected`` is set once the server has answered. Closes when ``stop`` is set."""
    import pycrdt

    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    awareness = pycrdt.Awareness(doc)
    url = f"ws://127.0.0.1:{server.port}/api/collaboration/room/JupyterLab:globalAwareness"
    async with (
        websockets.connect(
            url, additional_headers={"Authorization": f"token {server.token}"}
        ) as ws,
        anyio.create_task_group() as tg,
    ):

        async def close_on_stop() -> None:
            await stop.wait()
            await ws.close()  # ends the loop below

        tg.start_soon(close_on_stop)
        await ws.send(pycrdt.create_sync_message(doc))
        async for message in ws:
            assert isinstance(message, bytes)
            connected.set()
            if message[0] == 0:
                reply = pycrdt.handle_sync_message(message[1:], doc)
                if reply is not None:
                    await ws.send(reply)
            elif message[0] == 1:
                awareness.apply_awareness_update(pycrdt.read_message(message[1:]), "remote")
                seen.append(json.loads(json.dumps(awareness.states)))


def _agent_in(state: dict[str, Any]) -> dict[str, Any] | None:
    return next((s for s in state.values() if s and s.get("user", {}).get("name") == AGENT), None)


async def test_the_agent_is_listed_among_online_collaborators_while_it_works(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a"))
    seen: list[dict[str, Any]] = []
    connected, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_awareness_states, jupyter, seen, connected, stop)
        with anyio.fail_after(PATIENCE):
            await connected.wait()
        async with agent(jupyter, folder, idle_close=1.0) as client:
            await call(client, "read_notebook", path="n.ipynb")
            await wait_for(lambda: any(_agent_in(s) for s in seen), seconds=PATIENCE)
            listed = next(a for a in map(_agent_in, seen) if a)
            # still connected, but idle: the agent leaves after idle_close
            await wait_for(lambda: _agent_in(seen[-1]) is None, seconds=PATIENCE)
        stop.set()
    assert listed["current"] == f"notebook:{folder}/n.ipynb"
    assert listed["user"]["username"].startswith("nbrelay-")


def _sources_seen(store: RTCStore, rel: str) -> list[Sources]:
    entries = list(store._seen.sources._seen.items())
    return [v for k, v in entries if k[1] == rel and isinstance(v, Sources)]


async def test_a_room_left_when_idle_keeps_only_the_sources_its_readers_saw(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    """A room nbrelay leaves lets its notebook go: what readers saw of it stays only as the
    sources the merge of their next edit needs, not the cells with their outputs."""
    folder, local = live_folder
    nb = notebook("a = 1", "b = 2")
    for cell in nb.cells:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * 1000}]
    write_notebook(local / "n.ipynb", nb)
    store = live_store(jupyter, folder, idle_close=0.5)
    async with agent(jupyter, folder, store=store) as client:
        await call(client, "read_notebook", path="n.ipynb")
        assert _sources_seen(store, "n.ipynb")
        assert all(v.holds_cells for v in _sources_seen(store, "n.ipynb"))
        await wait_for(lambda: "n.ipynb" not in store._rooms, seconds=PATIENCE)
        seen = _sources_seen(store, "n.ipynb")
        assert seen
        assert not any(v.holds_cells for v in seen)
        assert all(dict(v) == {"c0": "a = 1", "c1": "b = 2"} for v in seen)
        # the next edit, in a room joined again, still goes by what the reader saw
        await call(client, "edit_cell", path="n.ipynb", cell=1, source="b = 3")
    assert disk(local / "n.ipynb") == (["c0", "c1"], ["a = 1", "b = 3"])


async def test_wrong_token_and_unreachable_server_are_clear_errors(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a"))
    bad = JupyterAPI(jupyter.url, Secret("not-the-token"))
    with pytest.raises(RemoteError) as info:
        await bad.get_contents(f"{folder}/n.ipynb")
    assert "refused the request (403" in str(info.value)
    assert "JUPYTER_TOKEN" in info.value.hint
    assert "not-the-token" not in str(info.value)
    await bad.aclose()
    from tests.live.server import free_port

    gone = JupyterAPI(f"http://127.0.0.1:{free_port()}/", Secret("t"))
    with pytest.raises(RemoteError) as info:
        await gone.get_contents("n.ipynb")
    assert "cannot reach Jupyter Server at http://127.0.0.1:" in str(info.value)
    await gone.aclose()
    with pytest.raises(InvalidArgument, match="carries a credential"):
        base_url("http://127.0.0.1:8888/lab?token=abc")
    assert (
        base_url("http://127.0.0.1:8888/user/a/lab/tree/x.ipynb") == "http://127.0.0.1:8888/user/a/"
    )
    # The token never appears in a URL: the server logs every failed request's URL.
    async with agent(jupyter, folder) as client:
        await call_error(client, "read_notebook", path="missing.ipynb")
    assert jupyter.token not in jupyter.log.read_text(errors="replace")


async def test_nbrelay_serve_in_live_mode_over_stdio(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    import os
    import sys

    from mcp import StdioServerParameters

    folder, local = live_folder
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBRELAY_", "JUPYTER"))}
    env["JUPYTER_TOKEN"] = jupyter.token
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--jupyter-url", jupyter.url, "--kernel-pool", "0"],
        env=env,
    )
    async with Client(params) as client:
        created = await call(client, "create_notebook", path=f"{folder}/s.ipynb", cells=["1 + 1"])
        await call(
            client,
            "edit_cell",
            path=f"{folder}/s.ipynb",
            cell=0,
            source="2 + 2",
            expected_version=created["version"],
        )
        ran = await call(client, "execute", path=f"{folder}/s.ipynb", cells=[0])
        assert ran["cells"][0]["outputs"][0]["text"] == "4"
    assert disk(local / "s.ipynb")[1] == ["2 + 2"]


async def test_rooms_being_joined_when_nbrelay_stops_are_closed_and_none_starts_after(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    """A room runs (shielded) until it is closed, so the server's task group cannot end while
    one runs. A room still being joined (started, held by no list yet) is closed with the
    others, and a room closed before it began never connects."""
    from nbrelay.stores.rtc_websocket import WebSocketWay

    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a"))
    store = live_store(jupyter, folder)
    way = store.way
    assert isinstance(way, WebSocketWay)
    session = await store.api.collaboration_session(store.paths.server("n.ipynb"))
    assert session is not None

    def new_room() -> Room:
        return Room(
            store.api,
            f"json:notebook:{session['fileId']}",
            session_id=str(session.get("sessionId") or ""),
            name="n.ipynb",
            user=way.user,
        )

    joining, late = new_room(), new_room()
    with anyio.fail_after(PATIENCE):
        async with store.running():
            try:
                await way._start(joining)  # connected, in no list (as while it syncs)
                await store._close_rooms()
                assert joining.closed.is_set(), "a room being joined was left running"
                await late.close()  # closed before it began: the server is stopping
                with pytest.raises(RemoteError, match="shutting down"):
                    await way._start(late)
                assert late.ws is None
            finally:  # without the fix, let the test fail instead of hanging the run
                await joining.close()
                await late.close()
    await store.aclose()


async def test_a_notebook_created_without_cells_has_none_as_in_file_mode(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    """The room shows a file without cells as one empty code cell (jupyter_ydoc adds it when it
    loads the file); nbrelay takes it out again, so positions count as in file mode."""
    folder, local = live_folder
    async with agent(jupyter, folder, save_each_edit=True) as client:
        created = await call(client, "create_notebook", path="e.ipynb")
        assert not created.get("changed"), created
        assert (await call(client, "read_notebook", path="e.ipynb"))["cells"] == []
        async with person(jupyter, f"{folder}/e.ipynb") as p:
            assert p.ids() == []
        await call(client, "insert_cells", path="e.ipynb", cells=["first"], index=0)
        view = await call(client, "read_notebook", path="e.ipynb")
        assert [c["source"] for c in view["cells"]] == ["first"]
    assert disk(local / "e.ipynb")[1] == ["first"]
