"""The room store (live mode and the server extension): when the .ipynb file holds an edit.

An edit returns once the Jupyter Server has it in the room (a person in the notebook sees it from
then on); the file is saved just after, coalesced, as JupyterLab does for a person's typing.
``save_notebook`` waits for the file; ``--live-save-wait`` makes every edit wait for it.
The server here never autosaves on its own (``document_save_delay`` of an hour), so whatever
reaches the file was saved by nbrelay. Each test of the store runs both ways into the rooms
(``tests.live.rooms``).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from nbrelay.caller import ANYONE
from nbrelay.config import Secret
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook.model import version_of
from nbrelay.stores.rtc import RTCStore
from nbrelay.stores.rtc_websocket import EVENTS_OPEN
from tests.helpers import call, call_error, notebook, write_notebook
from tests.live.conftest import agent
from tests.live.person import fresh_sources
from tests.live.rooms import room_agent, store_args
from tests.live.server import JupyterServer, wait_for
from tests.live.stall import stalling_proxy
from tests.live.test_rtc import disk
from tests.servers import rewrite_and_wait_reloaded

pytestmark = pytest.mark.anyio

NO_AUTOSAVE = ["--YDocExtension.document_save_delay=3600"]


@pytest.fixture
def quiet_server(start_jupyter: Any) -> JupyterServer:
    server: JupyterServer = start_jupyter(args=NO_AUTOSAVE)
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    return server


@pytest.fixture
def lazy_server(start_jupyter: Any) -> JupyterServer:
    """A quiet server whose extension saves only when asked (or when it leaves a room)."""
    server: JupyterServer = start_jupyter(args=[*NO_AUTOSAVE, *store_args(save_delay=3600)])
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    return server


async def test_an_edit_is_live_before_it_is_saved_and_save_notebook_waits_for_the_file(
    lazy_server: JupyterServer, way: str
) -> None:
    path = lazy_server.root / "n.ipynb"
    async with room_agent(way, lazy_server, save_delay=3600) as client:
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        # Everyone in the notebook has it...
        assert await fresh_sources(lazy_server, "n.ipynb") == (["c0", "c1"], ["a1", "b"])
        # ...and the file does not yet: nbrelay's saver waits (an hour here).
        assert disk(path) == (["c0", "c1"], ["a", "b"])
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert disk(path) == (["c0", "c1"], ["a1", "b"])
        assert saved["version"] == version_of(path.read_bytes())
        # Nothing pending: a second save returns at once with the same version.
        again = await call(client, "save_notebook", path="n.ipynb")
        assert again["version"] == saved["version"]


async def test_the_file_follows_the_edits_without_being_asked(
    quiet_server: JupyterServer, way: str
) -> None:
    path = quiet_server.root / "n.ipynb"
    async with room_agent(way, quiet_server) as client:
        for i in range(5):
            await call(client, "edit_cell", path="n.ipynb", cell="c1", source=f"b{i}")
        await call(client, "insert_cells", path="n.ipynb", index=0, cells=["top"])

        def saved() -> bool:
            return disk(path)[1] == ["top", "a", "b4"]

        await wait_for(saved, seconds=15)


async def test_leaving_saves_what_the_saver_had_not_yet(quiet_server: JupyterServer) -> None:
    path = quiet_server.root / "n.ipynb"
    async with agent(quiet_server, save_delay=3600) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b1")
        assert disk(path)[1] == ["a", "b"]
    assert disk(path)[1] == ["a", "b1"]


async def test_a_room_left_when_idle_is_saved_first(start_jupyter: Any, way: str) -> None:
    server: JupyterServer = start_jupyter(
        args=[*NO_AUTOSAVE, *store_args(save_delay=3600, idle_close=0.5)]
    )
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    path = server.root / "n.ipynb"
    async with room_agent(way, server, save_delay=3600, idle_close=0.5) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b1")
        # Only leaving the room (idle for half a second here) saves it.
        await wait_for(lambda: disk(path)[1] == ["a", "b1"], seconds=30)
        # The next call joins the room again, from the file.
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        await wait_for(lambda: disk(path)[1] == ["a1", "b1"], seconds=30)


async def test_live_save_wait_saves_before_each_edit_returns(
    quiet_server: JupyterServer,
) -> None:
    path = quiet_server.root / "n.ipynb"
    async with agent(quiet_server, save_delay=3600, save_each_edit=True) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a2")
        assert disk(path)[1] == ["a2", "b"]
        await call(client, "delete_cells", path="n.ipynb", cells=["c1"])
        assert disk(path) == (["c0"], ["a2"])


def test_the_option_reaches_the_store(tmp_path: Path) -> None:
    from nbrelay.config import Secret, Settings
    from nbrelay.server import build_workspace

    settings = Settings(
        jupyter_url="http://127.0.0.1:9/",
        jupyter_token=Secret("t"),
        live_save_wait=True,
        kernel_pool=0,
    )
    ws = build_workspace(settings)
    assert getattr(ws.store, "save_each_edit", None) is True


async def test_a_cell_made_invalid_by_someone_else_is_repaired_by_the_agents_next_edit(
    jupyter: JupyterServer, live_folder: tuple[str, Path], way: str
) -> None:
    # nbrelay does not re-validate the notebook after its own (validated) edits; a change that
    # came from the room is validated again, and a metadata slip Jupyter tolerates is repaired
    # as nbformat's normalize would, the result saying so.
    from tests.live.person import person

    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a", "b"))
    n = f"{folder}/n.ipynb"
    async with room_agent(way, jupyter) as client:
        await call(client, "edit_cell", path=n, cell="c0", source="a1")
        async with person(jupyter, f"{folder}/n.ipynb") as p:
            p.cell("c1")["metadata"]["collapsed"] = "not a boolean"  # the schema says boolean

            async def seen() -> bool:  # the server has it
                async with person(jupyter, f"{folder}/n.ipynb") as other:
                    return "collapsed" in other.cell("c1")["metadata"]

            await wait_for(seen, seconds=15)
            edited = await call(client, "edit_cell", path=n, cell="c0", source="a2")
        assert "failed nbformat's schema was removed" in edited["note"]
        assert "cell 1 (collapsed)" in edited["note"]

        async def repaired() -> bool:  # the room holds the repaired cell
            async with person(jupyter, f"{folder}/n.ipynb") as other:
                return "collapsed" not in other.cell("c1")["metadata"]

        await wait_for(repaired, seconds=15)
        read = await call(client, "read_cell", path=n, cell="c0")
        assert read["cell"]["source"] == "a2"


async def test_an_edit_that_restates_the_room_sends_nothing_and_leaves_nothing_to_save(
    quiet_server: JupyterServer,
) -> None:
    # A cell given the source it has makes no change to send, confirm or save.
    from nbrelay.notebook.edits import Plan, UpdateCell
    from nbrelay.notebook.model import Notebook
    from tests.live.conftest import live_store

    store = live_store(quiet_server, save_delay=3600)

    def restate(nb: Notebook) -> Plan:
        return Plan(edits=(UpdateCell("c0", {"source": "a"}),), touched=())

    def retype(nb: Notebook) -> Plan:
        return Plan(edits=(UpdateCell("c0", {"source": "a3"}),), touched=())

    async with contextlib.aclosing(store), store.running():
        before = await store.load("n.ipynb", ANYONE)
        room = store._rooms["n.ipynb"]
        sent = room.sent
        outcome = await store.edit(
            "n.ipynb", ANYONE, restate, expected_version=None, guard_positions=False
        )
        assert outcome.after.version == before.version
        assert (room.sent, room.edits) == (sent, 0)
        assert await store.flush("n.ipynb", ANYONE) is None
        outcome = await store.edit(
            "n.ipynb", ANYONE, retype, expected_version=None, guard_positions=False
        )
        assert outcome.after.version != before.version
        assert (room.sent, room.edits) == (sent + 1, 1)
        assert await fresh_sources(quiet_server, "n.ipynb") == (["c0", "c1"], ["a3", "b"])
        assert await store.flush("n.ipynb", ANYONE) is None
        assert disk(quiet_server.root / "n.ipynb")[1] == ["a3", "b"]


async def test_run_state_is_shown_in_the_room_only_and_is_no_notebook_field(
    quiet_server: JupyterServer,
) -> None:
    # JupyterLab's [*] is a capability of the room store, not an edit: it is neither
    # confirmed, journaled nor saved, and the edit path refuses it as nbformat does.
    from nbrelay.errors import NotebookInvalid
    from nbrelay.notebook.edits import Plan, UpdateCell
    from nbrelay.notebook.model import Notebook
    from tests.live.conftest import live_store
    from tests.live.person import person

    store = live_store(quiet_server, save_delay=3600)

    def running(nb: Notebook) -> Plan:
        return Plan(edits=(UpdateCell("c0", {"execution_state": "running"}),), touched=())

    async with contextlib.aclosing(store), store.running():
        before = await store.load("n.ipynb", ANYONE)
        shown = store.capabilities.run_state
        assert shown is not None
        room = store._rooms["n.ipynb"]
        sent = room.sent
        await shown.show_running("n.ipynb", ANYONE, (), ["c0", "c1", "gone"])  # idle already
        assert room.sent == sent
        await shown.show_running("n.ipynb", ANYONE, ["c0"], ())
        assert room.sent == sent + 1
        async with person(quiet_server, "n.ipynb") as p:
            assert p.cell("c0")["execution_state"] == "running"
            assert p.cell("c1")["execution_state"] == "idle"
        assert room.edits == 0
        assert await store.flush("n.ipynb", ANYONE) is None
        assert (await store.load("n.ipynb", ANYONE)).version == before.version
        with pytest.raises(NotebookInvalid, match="execution_state"):
            await store.edit(
                "n.ipynb", ANYONE, running, expected_version=None, guard_positions=False
            )
        await shown.show_running("n.ipynb", ANYONE, (), ["c0"])
        async with person(quiet_server, "n.ipynb") as p:
            assert p.cell("c0")["execution_state"] == "idle"
    assert "execution_state" not in (quiet_server.root / "n.ipynb").read_text()


GATED = """
import asyncio, pathlib
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

GATE = pathlib.Path({gate!r})
ENTERED = pathlib.Path({entered!r})


class Gated(AsyncLargeFileManager):
    async def save(self, model, path=""):
        # While the gate file exists, a notebook's save waits for it to go (at most 30 s).
        for _ in range(600):
            if model.get("type") != "notebook" or not GATE.exists():
                break
            ENTERED.touch()
            await asyncio.sleep(0.05)
        return await super().save(model, path)


c.ServerApp.contents_manager_class = Gated
"""


async def test_an_edit_does_not_wait_behind_a_save_the_server_is_writing(
    start_jupyter: Any, tmp_path: Path
) -> None:
    # jupyter-collaboration answers a save request only once the file is written, and reads
    # nothing else from that connection meanwhile: a save asked for on the room's own connection
    # held up every edit behind it (seconds for a big notebook). Here the server's write waits
    # on a gate while the agent edits: the edit is acknowledged before the save answers, the save
    # it interrupted is not taken as saved, and the next one saves both edits.
    from nbrelay.notebook.edits import Plan, UpdateCell
    from nbrelay.notebook.model import Notebook
    from nbrelay.stores.rtc_saving import save_room
    from tests.live.conftest import live_store

    gate = tmp_path / "gate"
    config = tmp_path / "gated_config.py"
    entered = tmp_path / "entered"
    config.write_text(GATED.format(gate=str(gate), entered=str(entered)))
    server: JupyterServer = start_jupyter(args=[*NO_AUTOSAVE, f"--config={config}"])
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    store = live_store(server, save_delay=3600)

    def typing(cid: str, text: str) -> Any:
        def plan(nb: Notebook) -> Plan:
            return Plan(edits=(UpdateCell(cid, {"source": text}),), touched=())

        return plan

    async with contextlib.aclosing(store), store.running():
        await store.load("n.ipynb", ANYONE)
        room = store._rooms["n.ipynb"]
        await store.edit(
            "n.ipynb", ANYONE, typing("c0", "a1"), expected_version=None, guard_positions=False
        )
        gate.touch()
        order: list[str] = []
        saved: list[str | None] = []

        async def saving() -> None:
            saved.append(await save_room(room))
            order.append("saved")

        async with anyio.create_task_group() as tg:
            tg.start_soon(saving)
            await wait_for(entered.exists, seconds=15)  # the server is writing the file
            await store.edit(
                "n.ipynb", ANYONE, typing("c1", "b1"), expected_version=None, guard_positions=False
            )
            order.append("edited")
            gate.unlink()
        assert order == ["edited", "saved"]
        # The save that edit interrupted is not taken as saved.
        assert saved[0] is not None
        assert room.pending
        assert await store.flush("n.ipynb", ANYONE) is None
        assert disk(server.root / "n.ipynb")[1] == ["a1", "b1"]
        assert room.save_requests == 2


def _slow_save_server(start_jupyter: Any, tmp_path: Path, seconds: float) -> tuple[Any, Path]:
    """A quiet server whose next notebook save, once the returned flag file exists, takes
    ``seconds`` longer after writing the file (``SlowSave``: a slow disk)."""
    from tests.extension.conftest import SLOW_SAVE

    flag = tmp_path / "slow-save"
    config = tmp_path / "slow_config.py"
    config.write_text(
        f"{SLOW_SAVE}\nc.ServerApp.contents_manager_class = SlowSave\n"
        f"c.SlowSave.flag = {str(flag)!r}\nc.SlowSave.seconds = {seconds}\n"
    )
    return start_jupyter(args=[*NO_AUTOSAVE, f"--config={config}"]), flag


# Longer than nbrelay waits for one save (30 s), and than a connection that pings lives on a
# server that answers none (40 s: Jupyter Server reads nothing from a connection while it saves).
HELD_SAVE = 45.0


async def test_edits_a_save_held_past_nbrelays_wait_wrote_count_as_saved_once_it_ends(
    start_jupyter: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # nbrelay stops waiting for a slow save after 30 s and reports it unconfirmed; the server's
    # save goes on, and once it ends the edits it wrote count as saved (the notebook did not
    # change after it began). Still counted unsaved, they were taken for lost in a crash: the
    # server restarted, nbrelay told the agent that an edit the file held was lost, because the
    # file had been changed from outside since. (In process: tests/extension/test_extension.py.)
    from tests.live.conftest import live_store

    server, flag = _slow_save_server(start_jupyter, tmp_path, HELD_SAVE)
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1", "b = 1"))
    store = live_store(server, idle_close=3600)  # leaving the room would save it
    caplog.set_level(logging.WARNING, logger="nbrelay.rtc")

    def timed_out() -> bool:
        return "saving n.ipynb did not succeed: timeout" in caplog.text

    async with agent(server, store=store) as client:
        await call(client, "read_notebook", path="n.ipynb")
        flag.touch()
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a = 2")
        # nbrelay's saver saves: the file is written, the save goes on for HELD_SAVE s, past
        # nbrelay's wait, then ends.
        await wait_for(lambda: not flag.exists(), seconds=30)
        await wait_for(timed_out, seconds=HELD_SAVE)
        room = store._rooms["n.ipynb"]
        assert room.pending  # the save has not ended yet
        await wait_for(lambda: Path(f"{flag}.done").exists(), seconds=HELD_SAVE)
        assert disk(file)[1] == ["a = 2", "b = 1"]
        await wait_for(lambda: not room.pending, seconds=20)
        # The file changes from outside; the server reloads the room from it; then it crashes.
        await rewrite_and_wait_reloaded(client, file, "a = 9", "b = 1")
        server.kill()
        server.start()
        view = await call(client, "read_notebook", path="n.ipynb")
    assert "stopped before saving" not in view.get("note", ""), view["note"]
    assert [c["source"] for c in view["cells"]] == ["a = 9", "b = 1"]


async def test_save_notebook_is_not_cancelled_by_the_background_save(
    start_jupyter: Any, tmp_path: Path, way: str
) -> None:
    """The background saver's save, asked for while save_notebook's is in progress, made the
    server cancel save_notebook's and answer it "success" unwritten: the agent was told "the
    save was interrupted by a later change" though nobody changed anything (seen once in 64
    notebooks run in their rooms). A slow disk (``SlowSave``, 3 s) holds save_notebook's save
    while the saver's delay (0.5 s) runs out: the saver now waits for it."""
    server, flag = _slow_save_server(start_jupyter, tmp_path, 3.0)
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1", "b = 1"))
    async with room_agent(way, server) as client:
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a = 2")
        flag.touch()  # the next save, save_notebook's, is slow; the saver's comes during it
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert saved["saved"] is True, saved
        assert Path(f"{flag}.done").exists()  # save_notebook's save was the slow one
    assert disk(file)[1] == ["a = 2", "b = 1"]


async def test_a_save_the_server_fails_is_reported_with_the_servers_reason(
    lazy_server: JupyterServer, way: str
) -> None:
    """jupytext pairs the notebook with a script in a folder that cannot be made (a file holds
    its name): the server's save writes the .ipynb, then fails on the pair, and
    jupyter-collaboration logs the error and answers the save "success". save_notebook says it
    failed with the server's message (from its events), not "saved", nor that a later change
    interrupted it."""
    nb = notebook("a = 1")
    nb.data["metadata"]["jupytext"] = {"formats": "ipynb,scripts//py:percent"}
    write_notebook(lazy_server.root / "p.ipynb", nb)
    (lazy_server.root / "scripts").write_text("a file where the pair's folder would be\n")
    async with room_agent(way, lazy_server, save_delay=3600) as client:
        await call(client, "read_notebook", path="p.ipynb")
        await call(client, "edit_cell", path="p.ipynb", cell=0, source="a = 2")
        failed = await call_error(client, "save_notebook", path="p.ipynb")
        assert "did not confirm saving 'p.ipynb' (failed: Error saving file: p.ipynb" in failed, (
            failed
        )
        assert "interrupted" not in failed
        assert "then call save_notebook again" in failed  # not "retry in a moment"
        # A notebook the server can save is still saved (the events change no verdict of a
        # save that wrote).
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        await call(client, "save_notebook", path="n.ipynb")
    assert disk(lazy_server.root / "n.ipynb") == (["c0", "c1"], ["a1", "b"])


async def test_an_events_websocket_that_never_opens_holds_up_nothing_and_is_asked_for_once(
    quiet_server: JupyterServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server (behind a proxy here) that accepts the events WebSocket and never answers it:
    two notebooks joined at the same moment open, and ask for one events socket between them;
    the attempt is given up after EVENTS_OPEN seconds and logged; edits are made and saved; a
    notebook joined after that does not ask again within the minute."""
    write_notebook(quiet_server.root / "m.ipynb", notebook("x"))
    write_notebook(quiet_server.root / "o.ipynb", notebook("y"))
    caplog.set_level(logging.INFO, logger="nbrelay.rtc")
    async with stalling_proxy(quiet_server.port, "/api/events/subscribe") as proxy:
        api = JupyterAPI(proxy.url, Secret(quiet_server.token))
        store = RTCStore(api, agent_name="stalled agent", save_delay=3600)
        with anyio.fail_after(10 * EVENTS_OPEN):  # not held up for ever by the socket
            async with agent(quiet_server, store=store) as client:
                views: dict[str, Any] = {}

                async def read(name: str) -> None:
                    views[name] = await call(client, "read_notebook", path=name)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(read, "n.ipynb")
                    tg.start_soon(read, "m.ipynb")
                assert sorted(views) == ["m.ipynb", "n.ipynb"]
                await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
                await call(client, "save_notebook", path="n.ipynb")
                await call(client, "read_notebook", path="o.ipynb")
        held = proxy.held
    assert held == 1, held  # one socket asked for, by the two joins together, none after
    assert disk(quiet_server.root / "n.ipynb") == (["c0", "c1"], ["a1", "b"])
    given_up = [r.getMessage() for r in caplog.records if "events WebSocket" in r.getMessage()]
    assert len(given_up) == 1, given_up
    assert f"TimeoutError after {EVENTS_OPEN:g} s" in given_up[0], given_up


async def test_edits_a_reload_after_a_failed_save_discarded_are_applied_again(
    start_jupyter: Any, way: str
) -> None:
    """A save the server fails after writing the .ipynb (a jupytext pair it cannot write)
    leaves the file newer than the server recorded; its next save takes that for a change from
    outside and reloads the room from the file, discarding the edits made since the failed
    write. nbrelay acknowledged them: it applies them again in the room as reloaded (nothing
    else changed those cells), saves them, and tells the agent. (The server's file watcher is
    slowed so that the reload comes from the save, every run.)"""
    server: JupyterServer = start_jupyter(
        args=[
            *NO_AUTOSAVE,
            "--YDocExtension.file_poll_interval=3600",
            *store_args(save_delay=3600),
        ]
    )
    nb = notebook("a = 1", "b = 1")
    nb.data["metadata"]["jupytext"] = {"formats": "ipynb,scripts//py:percent"}
    path = server.root / "p.ipynb"
    write_notebook(path, nb)
    (server.root / "scripts").write_text("a file where the pair's folder would be\n")
    async with room_agent(way, server, save_delay=3600) as client:
        await call(client, "read_notebook", path="p.ipynb")
        await call(client, "edit_cell", path="p.ipynb", cell="c0", source="a = 2")
        first = await call_error(client, "save_notebook", path="p.ipynb")
        assert "failed: Error saving file" in first, first
        assert disk(path) == (["c0", "c1"], ["a = 2", "b = 1"])  # written before the pair failed
        await call(client, "edit_cell", path="p.ipynb", cell="c1", source="b = 2")
        second = await call_error(client, "save_notebook", path="p.ipynb")
        assert "reloaded the notebook from the file instead of saving" in second, second

        # The person in the notebook, and the file, get the discarded edit back.
        async def restored() -> bool:
            return await fresh_sources(server, "p.ipynb") == (["c0", "c1"], ["a = 2", "b = 2"])

        await wait_for(restored, seconds=20, interval=0.5)
        await wait_for(lambda: disk(path) == (["c0", "c1"], ["a = 2", "b = 2"]), seconds=20)
        read = await call(client, "read_cell", path="p.ipynb", cell="c1")
    notes = read["note"]
    assert "reloaded 'p.ipynb' from its file before saving some of your edits" in notes, read
    assert "the source of cell 'c1'" in notes, read


async def test_edits_a_reload_discarded_in_a_room_never_saved_are_applied_again(
    lazy_server: JupyterServer, way: str
) -> None:
    """The server never saved this room (nbrelay's saver waits an hour, the server's own
    autosave is off), so its document has no saved hash whose deletion would mark a reload:
    only the server's event says it reloads, and its file watcher sends that event before it
    reads the file. The file rewritten outside JupyterLab (the other cell changed) discards the
    agent's unsaved edit; nbrelay applies it again once the reloaded notebook is there."""
    path = lazy_server.root / "n.ipynb"
    async with room_agent(way, lazy_server, save_delay=3600) as client:
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        write_notebook(path, notebook("a", "b from outside"))

        async def merged() -> bool:
            sources = await fresh_sources(lazy_server, "n.ipynb")
            return sources == (["c0", "c1"], ["a1", "b from outside"])

        await wait_for(merged, seconds=20, interval=0.5)
        read = await call(client, "read_cell", path="n.ipynb", cell="c0")
        await call(client, "save_notebook", path="n.ipynb")
    assert "nbrelay applied these again" in read["note"], read
    assert "the source of cell 'c0'" in read["note"], read
    assert disk(path) == (["c0", "c1"], ["a1", "b from outside"])
