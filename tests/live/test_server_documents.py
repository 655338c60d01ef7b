"""Live mode on JupyterLab with jupyter-server-documents (the real-time collaboration of Jupyter
AI's ``rtc-jsd`` deployments) in place of jupyter-collaboration: a real server from its own
environment (``tests.live.server_documents``).

There nbrelay ran no code at all (its kernel WebSocket speaks only the binary protocol, and each
run waited 60 s for a kernel that "did not answer"), and no edit was live: the server has no
``api/collaboration/session`` endpoint, so nbrelay took it for one without collaboration and
wrote the file under the person's open notebook, saying a reload would show it.

The agent session, saves and a person in Chromium are tested there as on the older
jupyter-collaboration releases (``test_older_collaboration.py``); here, what differs.
"""

from __future__ import annotations

from typing import Any

import anyio
import nbformat
import pytest

from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.live.conftest import agent
from tests.live.person import person
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def jsd_lab(start_jupyter: Any) -> JupyterServer:
    server: JupyterServer = start_jupyter(kind="server-documents")
    write_notebook(server.root / "n.ipynb", notebook("a = 1", "b = 2"))
    return server


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
