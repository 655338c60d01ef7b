"""nbrelay served by Jupyter Server itself: ``{base_url}mcp`` on a real server with
jupyter-collaboration, called by the official MCP client over streamable HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import nbformat
import psutil
import pytest
from websockets.asyncio.client import connect

from nbrelay.extension.collaboration import READY_WAIT
from tests.extension.conftest import USER_FIRST, ext_client, make_server, mcp_url
from tests.helpers import PATIENCE, call, call_error, notebook, text_of, write_notebook
from tests.live.person import person
from tests.live.server import JupyterServer, wait_for
from tests.live.test_unloadable import later_minor
from tests.servers import rewrite_and_wait_reloaded

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def sources_on_disk(path: Path) -> list[str] | None:
    """The file's cell sources, or None while it is being written (a save in progress)."""
    try:
        return [c.source for c in nbformat.read(str(path), as_version=4).cells]
    except (OSError, ValueError, nbformat.reader.NotJSONError):
        return None


async def test_requests_without_jupyters_credentials_are_refused(ext_server: JupyterServer) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        refused = [
            await http.post(mcp_url(ext_server), json=INITIALIZE, headers=MCP_HEADERS),
            await http.get(mcp_url(ext_server), headers={"Accept": "text/event-stream"}),
            await http.post(
                mcp_url(ext_server),
                json=INITIALIZE,
                headers={**MCP_HEADERS, "Authorization": "token not-the-token"},
            ),
        ]
        for resp in refused:
            assert resp.status_code in (401, 403), resp.text
            assert "jsonrpc" not in resp.text
        # With the token the same request opens an MCP session.
        ok = await http.post(
            mcp_url(ext_server),
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"token {ext_server.token}"},
        )
        assert ok.status_code == 200
        assert ok.headers.get("mcp-session-id")
        assert '"serverInfo"' in ok.text


async def test_a_notebook_open_nowhere_is_edited_in_a_room_whose_file_is_saved(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    path = f"{folder}/n.ipynb"
    write_notebook(local / "n.ipynb", notebook("a = 1", "b = 2"))
    async with ext_client(ext_server) as client:
        listed = await call(client, "list_notebooks", folder=folder)
        assert [e["path"] for e in listed["notebooks"]] == [path]
        read = await call(client, "read_notebook", path=path)
        await call(client, "insert_cells", path=path, cells=["c = 3"], index=2)
        edited = await call(
            client,
            "edit_cell",
            path=path,
            cell=0,
            find="1",
            replace="10",
            expected_version=(await call(client, "read_notebook", path=path))["version"],
        )
        assert edited["version"] != read["version"]
        assert "note" not in edited
        # The room saves the file shortly after the edit; save_notebook waits for it.
        await call(client, "save_notebook", path=path)
        await wait_for(
            lambda: sources_on_disk(local / "n.ipynb") == ["a = 10", "b = 2", "c = 3"], seconds=30
        )
        # A person who opens it now joins the same room.
        async with person(ext_server, path) as someone:
            assert someone.sources() == ["a = 10", "b = 2", "c = 3"]
        # A missing notebook is an error naming it, not a room.
        missing = await client.call_tool("read_notebook", {"path": f"{folder}/none.ipynb"})
        assert missing.is_error
        assert "none.ipynb" in text_of(missing)
        assert not (local / "none.ipynb").exists()


async def test_the_person_in_the_room_sees_the_agents_edit_and_the_agent_reads_their_typing(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    path = f"{folder}/n.ipynb"
    write_notebook(local / "n.ipynb", notebook("x = 1", "y = 2"))
    async with person(ext_server, path) as someone, ext_client(ext_server) as client:
        first, second = someone.ids()
        await call(client, "edit_cell", path=path, cell=first, find="x = 1", replace="x = 100")
        await call(client, "insert_cells", path=path, cells=["z = 3"], after=second)
        await wait_for(lambda: someone.sources() == ["x = 100", "y = 2", "z = 3"], seconds=30)
        someone.type_at_end(second, "0")

        async def agent_sees_typing() -> bool:
            read = await call(client, "read_cell", path=path, cell=second)
            return bool(read["cell"]["source"] == "y = 20")

        await wait_for(agent_sees_typing, seconds=30)
        # The room saves its file itself, shortly after the last change.
        await wait_for(
            lambda: sources_on_disk(local / "n.ipynb") == ["x = 100", "y = 20", "z = 3"],
            seconds=30,
        )


async def _person_runs(server: JupyterServer, kernel_id: str, code: str) -> None:
    """Run ``code`` in a kernel through the server's kernel WebSocket, as JupyterLab does."""
    session = uuid.uuid4().hex
    url = f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels?session_id={session}"
    msg_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "session": session,
            "username": "person",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
        "channel": "shell",
    }
    async with connect(
        url, additional_headers={"Authorization": f"token {server.token}"}, max_size=None
    ) as ws:
        await ws.send(json.dumps(request))
        while True:
            msg = json.loads(await ws.recv())
            mine = msg.get("parent_header", {}).get("msg_id") == msg_id
            if mine and msg.get("msg_type") == "execute_reply":
                assert msg["content"]["status"] == "ok", msg["content"]
                return


async def test_a_notebook_created_without_cells_has_none_as_in_file_mode(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    """The room opened on the new file shows it as one empty code cell (jupyter_ydoc adds it);
    nbrelay takes it out, so the agent's positions count as in file mode."""
    folder, local = ext_folder
    async with ext_client(ext_server) as client:
        created = await call(client, "create_notebook", path=f"{folder}/e.ipynb")
        assert not created.get("changed"), created
        assert (await call(client, "read_notebook", path=f"{folder}/e.ipynb"))["cells"] == []
        await call(client, "insert_cells", path=f"{folder}/e.ipynb", cells=["first"], index=0)
        await call(client, "save_notebook", path=f"{folder}/e.ipynb")
    assert sources_on_disk(local / "e.ipynb") == ["first"]


async def test_execute_runs_in_the_session_kernel_the_persons_jupyterlab_uses(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    path = f"{folder}/k.ipynb"
    write_notebook(local / "k.ipynb", notebook("print(shared)"))
    auth = {"Authorization": f"token {ext_server.token}"}
    async with httpx2.AsyncClient(base_url=ext_server.url, headers=auth, timeout=60) as http:
        # Opening the notebook in JupyterLab makes this session.
        made = await http.post(
            "api/sessions",
            json={
                "path": path,
                "type": "notebook",
                "name": "k.ipynb",
                "kernel": {"name": "python3"},
            },
        )
        kernel_id = made.json()["kernel"]["id"]
        await _person_runs(ext_server, kernel_id, "shared = 'set by the person'")
        async with ext_client(ext_server) as client:
            ran = await call(client, "execute", path=path, cells="all")
            assert "set by the person" in json.dumps(ran["cells"][0]["outputs"])
            await call(client, "execute", path=path, code="from_agent = 7")
        await _person_runs(ext_server, kernel_id, "assert from_agent == 7")
        sessions = [s for s in (await http.get("api/sessions")).json() if s["path"] == path]
        assert [s["kernel"]["id"] for s in sessions] == [kernel_id]  # no second kernel
        # The agent's client disconnected; the person's kernel still runs.
        assert (await http.get(f"api/kernels/{kernel_id}")).status_code == 200


@pytest.mark.parametrize("crash", [True, False], ids=["killed", "stopped"])
async def test_after_the_server_restarts_code_runs_in_a_new_kernel(
    start_ext_server: Any, crash: bool
) -> None:
    """nbrelay restarts with the server; the sessions the server kept in its database name a
    kernel that died with it: the next run gets a new kernel, never the stale id."""
    # The server runs in its work folder: the database is kept there across the restart.
    server: JupyterServer = start_ext_server(
        args=["--SessionManager.database_filepath=sessions.db"]
    )
    write_notebook(server.root / "n.ipynb", notebook("x = 5"))
    auth = {"Authorization": f"token {server.token}"}
    async with ext_client(server) as client:
        await call(client, "execute", path="n.ipynb", cells=[0])
    async with httpx2.AsyncClient(base_url=server.url, headers=auth, timeout=60) as http:
        (before,) = [s["kernel"]["id"] for s in (await http.get("api/sessions")).json()]
    if crash:
        server.kill()
    else:
        server.stop(grace=5)
    server.start()
    async with ext_client(server) as client:
        ran = await call(client, "execute", path="n.ipynb", code="'x' in globals()")
        assert ran["cells"][0]["status"] == "ok", ran
        assert ran["cells"][0]["outputs"][0]["text"] == "False"
        async with httpx2.AsyncClient(base_url=server.url, headers=auth, timeout=60) as http:
            sessions = (await http.get("api/sessions")).json()
            assert [s["path"] for s in sessions] == ["n.ipynb"]
            assert sessions[0]["kernel"]["id"] != before
            assert (await http.get(f"api/kernels/{before}")).status_code == 404


async def test_jupyters_authorizer_decides_what_each_tool_may_do(start_ext_server: Any) -> None:
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.authorizer_class=nbrelay_test_authz.ReadOnly",
            "--NbrelayExtension.tools=read_notebook,edit_cell,execute,save_notebook",
        ]
    )
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    before = (server.root / "n.ipynb").read_bytes()
    written = (server.root / "n.ipynb").stat().st_mtime_ns
    async with ext_client(server) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert tools == ["edit_cell", "execute", "read_notebook", "save_notebook"]  # the trait
        read = await call(client, "read_notebook", path="n.ipynb")
        assert read["cells"][0]["source"] == "a = 1"
        refused = await call_error(
            client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2"
        )
        assert "does not allow" in refused
        assert "contents:write" in refused
        # Saving writes the file (with whatever the room holds): a change like any other.
        not_saved = await call_error(client, "save_notebook", path="n.ipynb")
        assert "contents:write" in not_saved
        not_run = await call_error(client, "execute", path="n.ipynb", code="import os")
        assert "kernels:execute" in not_run
    assert (server.root / "n.ipynb").read_bytes() == before
    assert (server.root / "n.ipynb").stat().st_mtime_ns == written  # not even rewritten
    async with httpx2.AsyncClient(timeout=60) as http:
        auth = {"Authorization": f"token {server.token}"}
        assert (await http.get(f"{server.url}api/sessions", headers=auth)).json() == []


async def test_the_profile_comes_from_a_trait(start_ext_server: Any) -> None:
    server: JupyterServer = start_ext_server(args=["--NbrelayExtension.profile=ipynb-mcp"])
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    async with ext_client(server) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"get_formatted_content", "add_cell", "merge_cells"} <= tools
        assert "read_notebook" not in tools  # the canonical profile's
        shown = await client.call_tool("get_formatted_content", {"filepath": "n.ipynb"})
        assert not shown.is_error, text_of(shown)
        assert "a = 1" in text_of(shown)
        added = await client.call_tool(
            "add_cell",
            {"filepath": "n.ipynb", "cell_index": 2, "cell_type": "code", "source_content": "b"},
        )
        assert not added.is_error, text_of(added)
    await wait_for(lambda: sources_on_disk(server.root / "n.ipynb") == ["a = 1", "b"], seconds=30)


async def test_jupyter_server_extension_disable_turns_the_endpoint_off(tmp_path: Path) -> None:
    server = make_server(tmp_path / "off")
    # --user: the test's own config folder (without it the command would write the test
    # environment's sys.prefix config, which the wheel's enabling file lives in).
    env = {**os.environ, **USER_FIRST, "JUPYTER_CONFIG_DIR": str(server.work / "config")}
    disable = [
        sys.executable,
        "-m",
        "jupyter",
        "server",
        "extension",
        "disable",
        "--user",
        "nbrelay",
    ]
    await anyio.to_thread.run_sync(
        lambda: subprocess.run(disable, env=env, check=True, capture_output=True, timeout=120)
    )
    await anyio.to_thread.run_sync(server.start)
    try:
        async with httpx2.AsyncClient(timeout=60) as http:
            resp = await http.post(
                mcp_url(server),
                json=INITIALIZE,
                headers={**MCP_HEADERS, "Authorization": f"token {server.token}"},
            )
            status = await http.get(
                f"{server.url}api/status", headers={"Authorization": f"token {server.token}"}
            )
        assert status.status_code == 200  # the server runs, without nbrelay
        assert resp.status_code == 404
        assert "nbrelay | extension was successfully loaded" not in server.log.read_text()
    finally:
        server.stop()


async def test_without_collaboration_notebooks_go_through_the_contents_manager(
    start_ext_server: Any,
) -> None:
    server: JupyterServer = start_ext_server(collaboration=False)
    write_notebook(server.root / "n.ipynb", notebook("print(6 * 7)"))
    async with ext_client(server) as client:
        inserted = await call(client, "insert_cells", path="n.ipynb", cells=["b = 2"])
        # Written before the call returns, and the agent is told no tab shows it live.
        assert sources_on_disk(server.root / "n.ipynb") == ["print(6 * 7)", "b = 2"]
        assert "no jupyter-collaboration" in inserted["note"]
        ran = await call(client, "execute", path="n.ipynb", cells=[0])
        # Its outputs too went to the file only, and the run says so (nothing else to say).
        assert ran["note"] == inserted["note"]
    saved = nbformat.read(str(server.root / "n.ipynb"), as_version=4)
    assert saved.cells[0].outputs[0]["text"] == "42\n"
    assert "execution_state" not in saved.cells[0]


async def test_a_room_nbrelay_opened_is_saved_and_closed_once_idle(start_ext_server: Any) -> None:
    server: JupyterServer = start_ext_server(args=["--NbrelayExtension.room_idle_close=0.5"])
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    closed = "nbrelay closed the room of n.ipynb"
    async with ext_client(server) as client:
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2")
        await wait_for(lambda: closed in server.log.read_text(), seconds=30)
        assert sources_on_disk(server.root / "n.ipynb") == ["a = 2"]  # saved before closing
        # The next call opens a room again, from the file.
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="2", replace="3")
        read = await call(client, "read_notebook", path="n.ipynb")
        assert read["cells"][0]["source"] == "a = 3"
        await wait_for(lambda: server.log.read_text().count(closed) >= 2, seconds=30)
    assert sources_on_disk(server.root / "n.ipynb") == ["a = 3"]


OUT_OF_BAND = "Out-of-band changes"
SLOW_SAVE = 36.0  # longer than nbrelay waits for one save (30 s)


@pytest.mark.parametrize("poll", ["1", "0"], ids=["file-watched", "checked-when-saving"])
async def test_a_save_slower_than_nbrelays_wait_goes_on_and_loses_no_edit(
    start_ext_server: Any, tmp_path: Path, poll: str
) -> None:
    # A save that outlasts nbrelay's wait (a big notebook on a busy disk) must go on holding its
    # file: cut short, it let the server take its own write for a change from outside and reload
    # the room from the file (the file watcher, every second by default; or the next save, when
    # the server checks the file only then), discarding the edits made while it saved.
    flag = tmp_path / "slow-save"
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.contents_manager_class=nbrelay_test_slow.SlowSave",
            f"--SlowSave.flag={flag}",
            f"--SlowSave.seconds={SLOW_SAVE}",
            f"--YDocExtension.file_poll_interval={poll}",
        ]
    )
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1"))
    async with ext_client(server) as client:
        await call(client, "read_notebook", path="n.ipynb")
        flag.touch()
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2")
        # nbrelay saves the edit: the file is written, and the save goes on for SLOW_SAVE s.
        await wait_for(lambda: not flag.exists() and sources_on_disk(file) == ["a = 2"], seconds=30)
        added = await call(client, "insert_cells", path="n.ipynb", index=1, cells=["b = 3"])
        assert "note" not in added
        await wait_for(
            lambda: (
                sources_on_disk(file) == ["a = 2", "b = 3"] or OUT_OF_BAND in server.log.read_text()
            ),
            seconds=SLOW_SAVE + 30,
        )
        read = await call(client, "read_notebook", path="n.ipynb")
        assert [c["source"] for c in read["cells"]] == ["a = 2", "b = 3"]
        assert "note" not in read
        await call(client, "save_notebook", path="n.ipynb")
    assert sources_on_disk(file) == ["a = 2", "b = 3"]
    assert OUT_OF_BAND not in server.log.read_text()


def journaled(server: JupyterServer) -> list[Path]:
    """The files of nbrelay's journal of unsaved edits beside the server (one per room)."""
    return sorted((server.work / "runtime" / "nbrelay-unsaved").glob("*/*.jsonl"))


def slow_saving(start_ext_server: Any, flag: Path) -> JupyterServer:
    """A server whose saves are slow once ``flag`` exists (SLOW_SAVE s after the write), whose
    rooms only nbrelay saves and never closes for idleness."""
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.contents_manager_class=nbrelay_test_slow.SlowSave",
            f"--SlowSave.flag={flag}",
            f"--SlowSave.seconds={SLOW_SAVE}",
            "--YDocExtension.document_save_delay=3600",
            "--NbrelayExtension.room_idle_close=3600",
        ]
    )
    return server


async def test_edits_a_save_held_past_nbrelays_wait_wrote_count_as_saved_once_it_ends(
    start_ext_server: Any, tmp_path: Path
) -> None:
    # nbrelay stops waiting for a slow save after 30 s and reports it unconfirmed; once the
    # server's save ends, the edits it wrote count as saved (the notebook did not change after
    # it began). Still counted unsaved, they stayed in the journal nbrelay keeps for a crash:
    # after one, the restarted server's nbrelay told the agent that an edit the file held was
    # lost, because the file had been changed from outside since.
    flag = tmp_path / "slow-save"
    server = slow_saving(start_ext_server, flag)
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1", "b = 1"))
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(ext_client(server))
        await call(client, "read_notebook", path="n.ipynb")
        flag.touch()
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2")
        assert journaled(server)  # written before the edit returned
        # nbrelay's saver saves: the file is written, the save goes on for SLOW_SAVE s, past
        # nbrelay's wait (30 s), then ends.
        await wait_for(lambda: Path(f"{flag}.done").exists(), seconds=SLOW_SAVE + 30)
        assert sources_on_disk(file) == ["a = 2", "b = 1"]
        assert "saving n.ipynb did not succeed: timeout" in server.log.read_text()
        await wait_for(lambda: not journaled(server), seconds=20)
        # The file changes from outside; the server reloads the room from it; then it crashes.
        await rewrite_and_wait_reloaded(client, file, "a = 9", "b = 1")
        server.kill()
        stack.push_async_exit(_quietly)
    server.start()
    async with ext_client(server) as again:
        view = await call(again, "read_notebook", path="n.ipynb")
    assert "note" not in view, view["note"]
    assert [c["source"] for c in view["cells"]] == ["a = 9", "b = 1"]


async def test_edits_a_held_save_wrote_stay_unsaved_if_the_notebook_changed_meanwhile(
    start_ext_server: Any, tmp_path: Path
) -> None:
    # A person types while the server's save is held past nbrelay's wait: the notebook changed
    # after the save began, so the agent's edits do not count as saved when it ends, and
    # save_notebook saves again (writing the person's typing too).
    flag = tmp_path / "slow-save"
    server = slow_saving(start_ext_server, flag)
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1", "b = 1"))
    async with ext_client(server) as client, person(server, "n.ipynb") as someone:
        await call(client, "read_notebook", path="n.ipynb")
        flag.touch()
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2")
        await wait_for(lambda: not flag.exists(), seconds=30)  # the save is held
        someone.type_at_end(someone.ids()[1], "0")

        async def agent_sees_typing() -> bool:
            read = await call(client, "read_cell", path="n.ipynb", cell=1)
            return bool(read["cell"]["source"] == "b = 10")

        await wait_for(agent_sees_typing, seconds=30)
        await wait_for(lambda: Path(f"{flag}.done").exists(), seconds=SLOW_SAVE + 30)
        assert "saving n.ipynb did not succeed: timeout" in server.log.read_text()
        await anyio.sleep(1)  # the save's end follows its hold within milliseconds
        assert sources_on_disk(file) == ["a = 2", "b = 1"]
        assert journaled(server)
        await call(client, "save_notebook", path="n.ipynb")
        assert sources_on_disk(file) == ["a = 2", "b = 10"]
        assert not journaled(server)


async def _quietly(*exc: Any) -> bool:
    """Swallow what closing an MCP session of a server that stopped may raise."""
    return True


async def give_up_once_taken(client: Any, tool: str, args: dict[str, Any], flag: Path) -> None:
    """Call ``tool`` and cancel the call (as a client that gives up does) once the slow contents
    manager has taken ``flag``: the server is then inside the slowed save or load."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, tool, args)
        await wait_for(lambda: not flag.exists(), seconds=30)
        tg.cancel_scope.cancel()


async def test_a_cancelled_save_notebook_leaves_the_servers_save_to_end(
    start_ext_server: Any, tmp_path: Path
) -> None:
    # The agent gives up on save_notebook (its client cancels the call) while the server is still
    # saving: the save goes on holding its file, and the server does not take it for a change
    # from outside (which would reload the room from the file, as above).
    flag = tmp_path / "slow-save"
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.contents_manager_class=nbrelay_test_slow.SlowSave",
            f"--SlowSave.flag={flag}",
            "--SlowSave.seconds=8",
            "--NbrelayExtension.room_save_delay=60",  # only save_notebook saves
        ]
    )
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1"))
    async with ext_client(server) as client:
        await call(client, "read_notebook", path="n.ipynb")
        flag.touch()
        await call(client, "edit_cell", path="n.ipynb", cell=0, find="1", replace="2")
        # The file is written, the save goes on for 8 s: the client gives up on the call.
        await give_up_once_taken(client, "save_notebook", {"path": "n.ipynb"}, flag)
        done = Path(f"{flag}.done")
        await wait_for(lambda: done.exists() or OUT_OF_BAND in server.log.read_text(), seconds=60)
        await call(client, "insert_cells", path="n.ipynb", index=1, cells=["b = 3"])
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert "note" not in saved
    assert sources_on_disk(file) == ["a = 2", "b = 3"]
    assert OUT_OF_BAND not in server.log.read_text()


async def test_the_next_save_waits_the_pace_after_the_last(start_ext_server: Any) -> None:
    """``room_save_pace`` reaches the room store: after a save, the next waits pace times as
    long as it took (capped at 30 s); save_notebook does not wait."""
    server: JupyterServer = start_ext_server(
        args=[
            "--NbrelayExtension.room_save_pace=100000",  # the cap: 30 s
            "--YDocExtension.document_save_delay=3600",  # only nbrelay saves
        ]
    )
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1"))
    async with ext_client(server) as client:
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell=0, source="a = 2")
        await wait_for(lambda: sources_on_disk(file) == ["a = 2"], seconds=PATIENCE)
        await call(client, "edit_cell", path="n.ipynb", cell=0, source="a = 3")
        await anyio.sleep(4)  # the saver would have saved 0.5 s after the edit
        assert sources_on_disk(file) == ["a = 2"]
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert "note" not in saved
        assert sources_on_disk(file) == ["a = 3"]


def _running(pid: int) -> bool:
    """Whether a process runs (a zombie, waiting to be reaped, has stopped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_sigint_stops_a_server_after_an_agent_ran_code(start_ext_server: Any) -> None:
    # Started without a terminal (as a service or JupyterHub's spawner starts it): SIGINT
    # must stop the server, shut down the kernel nbrelay started and let the process exit,
    # with the room nbrelay opened (and its store's worker thread) still there.
    # A service manager starts the server with SIGINT at its default; this test's own process
    # may have it ignored (a disposition a child inherits through exec), which would make the
    # server ignore SIGINT too. A handler set here is reset to the default in the child.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server: JupyterServer = start_ext_server(args=["--ServerApp.answer_yes=True"])
    finally:
        signal.signal(signal.SIGINT, before)
    async with ext_client(server) as client:
        await call(
            client, "create_notebook", path="n.ipynb", cells=["import os; print(os.getpid())"]
        )
        ran = await call(client, "execute", path="n.ipynb", cells="all")
    assert ran["status"] == "done", ran
    kernel_pid = int(ran["cells"][0]["outputs"][0]["text"])
    assert _running(kernel_pid)
    proc = server.proc
    assert proc is not None
    try:
        os.kill(proc.pid, signal.SIGINT)
        # A bound against hanging (without a clean stop the process never exits), no target.
        exited = await anyio.to_thread.run_sync(lambda: _exited(proc, 60))
        assert exited, f"the server did not exit after SIGINT:\n{server.tail()}"
        await wait_for(lambda: not _running(kernel_pid), seconds=30)
        assert "Kernel shutdown" in server.log.read_text()
    finally:
        server.stop()  # by PID: the server's process group, if it is still there
        if _running(kernel_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(kernel_pid, signal.SIGKILL)


def _exited(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


async def test_listing_pages_and_a_search_over_a_folder_in_the_extension(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    for i in range(60):
        write_notebook(local / f"t{i % 3}" / f"n{i:02d}.ipynb", notebook(f"v = {i}"))
    write_notebook(local / "t1" / "hit.ipynb", notebook("x = 1", "needle = 2"))
    async with ext_client(ext_server) as client:
        first = await call(client, "list_notebooks", folder=folder)
        assert first["count"] == 50
        assert first["next_start"] == 50
        rest = await call(client, "list_notebooks", folder=folder, start=50)
        assert first["count"] + rest["count"] == 61
        assert "next_start" not in rest
        only = await call(client, "list_notebooks", folder=folder, pattern=f"{folder}/t2/*")
        assert only["count"] == 20
        assert all(n["path"].startswith(f"{folder}/t2/") for n in only["notebooks"])
        found = await call(client, "search_notebook", path=folder, pattern="needle")
        assert found["searched"] == 61
        assert [(m["path"], m["index"]) for m in found["matches"]] == [
            (f"{folder}/t1/hit.ipynb", 1)
        ]


def _nbformat_4_2(*sources: str) -> str:
    """A notebook as Jupyter wrote nbformat 4.2 (no cell ids), with a kernelspec lacking `name`."""
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
        for s in sources
    ]
    metadata = {"kernelspec": {"display_name": "Python 3", "language": "python"}}
    return json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 2})


@pytest.mark.parametrize("collaboration", [True, False])
async def test_an_old_notebook_is_edited_run_and_stored_as_4_5(
    start_ext_server: Any, collaboration: bool
) -> None:
    server: JupyterServer = start_ext_server(collaboration=collaboration)
    (server.root / "old.ipynb").write_text(_nbformat_4_2("x = 6", "x * 7"), encoding="utf-8")
    async with ext_client(server) as client:
        edited = await call(client, "edit_cell", path="old.ipynb", cell=0, find="6", replace="6.0")
        if not collaboration:  # a room keeps its own ids and minor until the server saves
            assert "stored as nbformat 4.5" in edited["note"]
        meta = await call(client, "notebook_metadata", path="old.ipynb", metadata={"title": "T"})
        assert meta["metadata"]["title"] == "T"
        ran = await call(client, "execute", path="old.ipynb", cells="all")
        assert "could not be saved" not in ran.get("note", "")
        await call(client, "save_notebook", path="old.ipynb")

    def stored() -> bool:
        try:
            nb = nbformat.read(str(server.root / "old.ipynb"), as_version=4)
            nbformat.validate(nb)
        except (nbformat.ValidationError, ValueError):
            return False
        return bool(
            nb.nbformat_minor == 5
            and nb.metadata.get("title") == "T"
            and nb.metadata.kernelspec.get("name") == "python3"
            and nb.cells[1].outputs
            and nb.cells[1].outputs[0]["data"]["text/plain"] == "42.0"
        )

    await wait_for(stored, seconds=30)


async def test_persisted_sessions_keep_their_variables_in_the_extension(
    start_ext_server: Any,
) -> None:
    """c.NbrelayExtension.persist_sessions: a session nbrelay started and shut down for
    idleness saved its variables beside the notebook (where only the kernel sees them); the
    next run's new kernel restores them and removes the file."""
    server: JupyterServer = start_ext_server(
        args=[
            "--NbrelayExtension.persist_sessions=True",
            "--NbrelayExtension.kernel_idle_timeout=1",
        ]
    )
    (server.root / "d").mkdir()
    write_notebook(server.root / "d" / "n.ipynb", notebook("1"))
    saved = server.root / "d" / ".nbrelay-state" / "n.ipynb.session.dill"
    async with ext_client(server) as client:
        await call(client, "execute", path="d/n.ipynb", code="answer = 41")
        with anyio.fail_after(PATIENCE):
            while True:
                listed = (await call(client, "list_kernels"))["kernels"]
                if [k["state"] for k in listed] == ["suspended"]:
                    break
                await anyio.sleep(0.2)
        assert saved.is_file()  # written by the kernel, next to the notebook
        again = await call(client, "execute", path="d/n.ipynb", code="print(answer + 1)")
        assert again["cells"][0]["outputs"][0]["text"] == "42\n", again
        assert again["note"].startswith("the idle session was resumed: 1 saved variable(s)")
        assert "state_lost" not in again
        assert not saved.exists()  # removed by the kernel that restored it


async def test_a_call_cancelled_while_the_server_loads_the_notebook_leaves_it_whole(
    start_ext_server: Any, tmp_path: Path
) -> None:
    # The agent gives up on its first read of a notebook (its client cancels the call) while the
    # server is still loading the notebook into its room: the load goes on, and the next call
    # finds the whole notebook, never a room left half made (whose first save would have
    # written what little it held over the file).
    flag = tmp_path / "slow-load"
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.contents_manager_class=nbrelay_test_slow.SlowLoad",
            f"--SlowLoad.flag={flag}",
            "--SlowLoad.seconds=6",
        ]
    )
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1", "b = 2"))
    async with ext_client(server) as client:
        flag.touch()
        # The room is being loaded (the read is held for 6 s): the client gives up.
        await give_up_once_taken(client, "read_notebook", {"path": "n.ipynb"}, flag)
        read_again = await call(client, "read_notebook", path="n.ipynb")
        assert [c["source"] for c in read_again["cells"]] == ["a = 1", "b = 2"]
        await call(client, "insert_cells", path="n.ipynb", index=2, cells=["c = 3"])
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert "note" not in saved
    assert sources_on_disk(file) == ["a = 1", "b = 2", "c = 3"]


async def test_a_room_loaded_for_a_call_that_gave_up_is_closed_once_idle(
    start_ext_server: Any, tmp_path: Path
) -> None:
    # The load of a room a call gave up on goes on (above); the room is nbrelay's as any room it
    # opens: closed once idle, whether no call came back for it or the next call joined it.
    flag = tmp_path / "slow-load"
    done = Path(f"{flag}.done")
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.contents_manager_class=nbrelay_test_slow.SlowLoad",
            f"--SlowLoad.flag={flag}",
            "--SlowLoad.seconds=4",
            "--NbrelayExtension.room_idle_close=1",
        ]
    )
    file = server.root / "n.ipynb"
    write_notebook(file, notebook("a = 1"))
    closed = "nbrelay closed the room of n.ipynb"
    async with ext_client(server) as client:
        flag.touch()
        await give_up_once_taken(client, "read_notebook", {"path": "n.ipynb"}, flag)
        # No call comes back for it: closed once idle.
        await wait_for(lambda: done.exists() and closed in server.log.read_text(), seconds=30)
        # The next call comes back at once, and finds the room the server loaded meanwhile.
        done.unlink()
        flag.touch()
        await give_up_once_taken(client, "read_notebook", {"path": "n.ipynb"}, flag)
        await call(client, "insert_cells", path="n.ipynb", index=1, cells=["b = 2"])
        assert done.exists()  # the call waited for that load
        await wait_for(lambda: server.log.read_text().count(closed) >= 2, seconds=30)
    assert sources_on_disk(file) == ["a = 1", "b = 2"]  # saved as it closed


async def test_a_room_another_extension_failed_to_load_is_not_handed_to_the_agent(
    start_ext_server: Any,
) -> None:
    """Another extension of the server asks jupyter-collaboration for the room of a notebook it
    cannot load (nbformat's 4.99 test notebook): the load fails and leaves the room listed,
    stopped and empty. nbrelay's calls are not handed that empty notebook (they were: 0 cells,
    and an insert went into it and was saved over the file), nor held up waiting for it to load
    (it never will): the room is taken out of the server, and the notebook read and written
    through the contents manager."""
    server: JupyterServer = start_ext_server(other=True)
    text = later_minor()
    cells = len(json.loads(text)["cells"])
    (server.root / "later.ipynb").write_text(text, encoding="utf-8")
    headers = {"Authorization": f"token {server.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=PATIENCE) as http:
        loaded = await http.get(f"{server.url}other/load", params={"path": "later.ipynb"})
    assert loaded.json()["loaded"] is False, loaded.text  # the other extension's load failed
    async with ext_client(server) as client:
        with anyio.fail_after(0.8 * READY_WAIT):  # a stopped room is not waited for
            view = await call(client, "read_notebook", path="later.ipynb")
        assert view["cell_count"] == cells, view
        await call(client, "insert_cells", path="later.ipynb", cells=["added = 1"])
        await call(client, "save_notebook", path="later.ipynb")
    saved = json.loads((server.root / "later.ipynb").read_text(encoding="utf-8"))
    assert len(saved["cells"]) == cells + 1
    assert saved["cells"][-1]["source"] in ("added = 1", ["added = 1"])
