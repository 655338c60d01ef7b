"""Live mode on JupyterLab with jupyter-server-documents (the real-time collaboration of Jupyter
AI's ``rtc-jsd`` deployments) in place of jupyter-collaboration: a real server from its own
environment (``tests.live.server_documents``).

There nbrelay ran no code at all (its kernel WebSocket speaks only the binary protocol, and each
run waited 60 s for a kernel that "did not answer"), and no edit was live: the server has no
``api/collaboration/session`` endpoint, so nbrelay took it for one without collaboration and
wrote the file under the person's open notebook, saying a reload would show it.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import nbformat
import pytest

from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.live.browser import type_while_the_agent_moves_cells
from tests.live.conftest import agent
from tests.live.person import person
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def jsd_lab(start_jupyter: Any) -> JupyterServer:
    server: JupyterServer = start_jupyter(kind="server-documents")
    write_notebook(server.root / "n.ipynb", notebook("a = 1", "b = 2"))
    return server


async def test_edits_and_runs_are_live_once_and_the_saved_file_holds_them(
    jsd_lab: JupyterServer,
) -> None:
    path = jsd_lab.root / "n.ipynb"
    async with agent(jsd_lab) as client:
        await call(client, "read_notebook", path="n.ipynb")
        edited = await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b = 20")
        assert "note" not in edited, edited  # in the room: no "saved to the file, not live"
        made = await call(client, "insert_cells", path="n.ipynb", index=2, cells=["print(6 * 7)"])
        new = made["changed"][0]["id"]
        ran = await call(client, "execute", path="n.ipynb", cells=[new])
        assert ran["cells"][0]["status"] == "ok", ran
        assert ran["cells"][0]["outputs"][0]["text"] == "42\n", ran
        moved = await call(client, "move_cells", path="n.ipynb", cells=[new], to=0)
        assert "note" not in moved, moved
        await call(client, "edit_cell", path="n.ipynb", cell="c0", find="1", replace="10")
        sources = ["print(6 * 7)", "a = 10", "b = 20"]
        # What a person joining now sees, before any save: each change once. (The person stays:
        # a client that leaves just after its last message stops the room for everyone, a bug
        # of jupyter-server-documents 0.3.3; see the live-mode guide.)
        async with person(jsd_lab, "n.ipynb") as someone:
            assert (someone.ids(), someone.sources()) == ([new, "c0", "c1"], sources)
            saved = await call(client, "save_notebook", path="n.ipynb")
        assert saved["saved"] is True, saved
        read = await call(client, "read_notebook", path="n.ipynb", full=True)
        assert [c["source"] for c in read["cells"]] == sources
    on_disk = nbformat.read(path, as_version=4)
    nbformat.validate(on_disk)
    assert [c.source for c in on_disk.cells] == sources
    assert [o.get("text") for o in on_disk.cells[0].outputs] == ["42\n"]
    assert all("execution_state" not in c for c in json.loads(path.read_text())["cells"])


async def test_save_notebook_confirms_the_servers_own_save_of_every_edit(
    jsd_lab: JupyterServer,
) -> None:
    """The rooms answer no request to save and save on their own, often before the agent asks:
    save_notebook confirms such a save (it waited 30 s for another, and failed)."""
    path = jsd_lab.root / "n.ipynb"
    async with agent(jsd_lab) as client:
        for i in range(3):
            await call(client, "edit_cell", path="n.ipynb", cell="c0", source=f"a = {i}")
            if i == 1:
                await anyio.sleep(2)  # the server saved it before the agent asks
            saved = await call(client, "save_notebook", path="n.ipynb")
            assert saved["saved"] is True, saved
            assert nbformat.read(path, as_version=4).cells[0].source == f"a = {i}"


async def test_a_person_typing_keeps_every_keystroke_while_the_agent_edits_beside_them(
    jsd_lab: JupyterServer,
) -> None:
    typed = "# typed by a person"
    async with agent(jsd_lab) as client, person(jsd_lab, "n.ipynb") as someone:
        async with anyio.create_task_group() as tg:
            tg.start_soon(someone.type, "c0", typed)
            for i in range(5):
                await call(client, "edit_cell", path="n.ipynb", cell="c1", source=f"b = {i}")
                await call(client, "insert_cells", path="n.ipynb", cells=[f"c = {i}"])
        sources = ["a = 1" + typed, "b = 4", *[f"c = {i}" for i in range(5)]]

        async def all_there() -> bool:  # the person's last keystrokes are still on their way
            read = await call(client, "read_notebook", path="n.ipynb", full=True)
            return [c["source"] for c in read["cells"]] == sources

        await wait_for(all_there, seconds=PATIENCE, interval=0.2)
        await call(client, "save_notebook", path="n.ipynb")
    assert [c.source for c in nbformat.read(jsd_lab.root / "n.ipynb", as_version=4).cells] == (
        sources
    )


async def test_a_person_in_that_jupyterlab_keeps_every_keystroke_while_the_agent_moves_cells(
    jsd_lab: JupyterServer,
) -> None:
    """A person in headless Chromium types in one cell while the agent moves the others around
    it and changes their types (``tests.live.browser``), in that JupyterLab's own page."""
    await type_while_the_agent_moves_cells(
        jsd_lab,
        "f",
        jsd_lab.root / "f",
        lambda: agent(jsd_lab, "f"),
        "n.ipynb",
        0,
        via_file_browser=True,
    )


async def test_the_room_keeps_working_for_the_person_after_the_agent_leaves(
    jsd_lab: JupyterServer,
) -> None:
    """That server stops reading a room's messages, for everyone, when it reads a change from a
    client that has already left: nbrelay leaves a room only once the server has read all of
    its changes, and the person's typing after that still reaches the room and the file."""
    async with person(jsd_lab, "n.ipynb") as someone:
        async with agent(jsd_lab) as client:
            for i in range(5):
                await call(client, "insert_cells", path="n.ipynb", cells=[f"c = {i}"])
        await someone.type("c0", "  # after the agent left")
        async with agent(jsd_lab) as client:

            async def typed_there() -> bool:
                read = await call(client, "read_notebook", path="n.ipynb", full=True)
                return bool(read["cells"][0]["source"] == "a = 1  # after the agent left")

            await wait_for(typed_there, seconds=PATIENCE, interval=0.2)

        def in_the_file() -> bool:  # the server's own save (save_notebook waits for the agent's)
            cells = nbformat.read(jsd_lab.root / "n.ipynb", as_version=4).cells
            return bool(cells[0].source == "a = 1  # after the agent left")

        await wait_for(in_the_file, seconds=PATIENCE, interval=0.2)
