"""Live mode on JupyterLab with the jupyter-collaboration releases before 4.1 (2.x and 3.x, which
JupyterLab 4.2 and 4.3 shipped with), each a real server from its own environment
(``tests.live.older_collaboration``).

On both, every edit used to come back doubled (a word typed twice, a moved cell twice, outputs
twice: the server's pycrdt reads no client id above 32 bits, and sent nbrelay's edits back as
someone else's), every edit said the notebook "had changed since you last read it", and
``save_notebook`` waited 30 s and failed (no room answers a request to save). On 2.x the saved
file held each cell's run state, which nbformat rejects.

The same tests run on JupyterLab with jupyter-server-documents (``tests.live.server_documents``),
whose rooms also answer no request to save; what differs there is in
``test_server_documents.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import anyio
import nbformat
import pytest

from nbrelay.stores.rtc_room import SAVED_ALONE
from nbrelay.stores.yprotocol import Room
from tests.extension.conftest import ext_client
from tests.helpers import PATIENCE, call, call_error, notebook, write_notebook
from tests.live.browser import type_while_the_agent_moves_cells
from tests.live.conftest import agent, live_store
from tests.live.older_collaboration import RELEASES, WITH_NBRELAY, ensure
from tests.live.person import fresh_sources, person
from tests.live.server import JupyterServer, wait_for
from tests.originals import REPO

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[*(f"collaboration-{r}" for r in sorted(RELEASES)), "server-documents"])
def older_lab(request: pytest.FixtureRequest, start_jupyter: Any) -> JupyterServer:
    server: JupyterServer = start_jupyter(kind=request.param)
    write_notebook(server.root / "n.ipynb", notebook("a = 1", "b = 2"))
    return server


async def test_edits_runs_and_moves_land_once_and_the_saved_file_is_valid(
    older_lab: JupyterServer,
) -> None:
    path = older_lab.root / "n.ipynb"
    async with agent(older_lab) as client:
        await call(client, "read_notebook", path="n.ipynb")
        edited = await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b = 20")
        assert "note" not in edited, edited  # nobody else changed it; in the room, not the file
        made = await call(client, "insert_cells", path="n.ipynb", index=2, cells=["print(6 * 7)"])
        new = made["changed"][0]["id"]
        ran = await call(client, "execute", path="n.ipynb", cells=[new])
        assert ran["cells"][0]["status"] == "ok"
        moved = await call(client, "move_cells", path="n.ipynb", cells=[new], to=0)
        assert "note" not in moved
        await call(client, "edit_cell", path="n.ipynb", cell="c0", find="1", replace="10")
        sources = ["print(6 * 7)", "a = 10", "b = 20"]
        # What a person joining now sees, before the save: each change once. (The person stays:
        # on jupyter-server-documents 0.3.3 a client that leaves just after its last message
        # stops the room for everyone; see the live-mode guide.)
        async with person(older_lab, "n.ipynb") as someone:
            assert (someone.ids(), someone.sources()) == ([new, "c0", "c1"], sources)
            saved = await call(client, "save_notebook", path="n.ipynb")
        assert saved["saved"] is True, saved

        # What nbrelay reads, and the file: each change once.
        read = await call(client, "read_notebook", path="n.ipynb", full=True)
        assert [c["source"] for c in read["cells"]] == sources
        assert [o["text"] for o in read["cells"][0]["outputs"]] == ["42\n"]
        on_disk = nbformat.read(path, as_version=4)
        nbformat.validate(on_disk)  # no run state (execution_state) in the cells
        assert [c.source for c in on_disk.cells] == sources
        assert [o.get("text") for o in on_disk.cells[0].outputs] == ["42\n"]
        assert all("execution_state" not in c for c in json.loads(path.read_text())["cells"])


async def test_save_notebook_confirms_the_servers_own_save_of_every_edit(
    older_lab: JupyterServer,
) -> None:
    """Also when the server saved the edit on its own before the agent asks (it then makes no
    save after the call: save_notebook waited 30 s for one, and failed)."""
    path = older_lab.root / "n.ipynb"
    async with agent(older_lab) as client:
        for i in range(3):
            await call(client, "edit_cell", path="n.ipynb", cell="c0", source=f"a = {i}")
            if i == 1:
                await anyio.sleep(2)  # the server's own save comes about a second after
            saved = await call(client, "save_notebook", path="n.ipynb")
            assert saved["saved"] is True, saved
            assert nbformat.read(path, as_version=4).cells[0].source == f"a = {i}"


async def test_a_person_typing_in_that_jupyterlab_keeps_every_keystroke_while_the_agent_moves_cells(
    older_lab: JupyterServer,
) -> None:
    """A person in headless Chromium types in one cell while the agent moves the others around
    it and changes their types (``tests.live.browser``), in the JupyterLab of that release."""
    await type_while_the_agent_moves_cells(
        older_lab,
        "f",
        older_lab.root / "f",
        lambda: agent(older_lab, "f"),
        "n.ipynb",
        0,
        via_file_browser=True,
    )


@pytest.fixture
def lab_with_nbrelay(start_jupyter: Any) -> JupyterServer:
    server: JupyterServer = start_jupyter(kind="collaboration-4.4.2")
    write_notebook(server.root / "n.ipynb", notebook("a = 1", "b = 2"))
    return server


@pytest.mark.parametrize("release", sorted(WITH_NBRELAY))
def test_installing_nbrelay_leaves_that_jupyterlab_s_pycrdt(release: str) -> None:
    """jupyter-collaboration 4's jupyter_ydoc needs pycrdt 0.13 (3.x's 0.12): with the 0.14
    nbrelay asked for, the server opened no collaboration room at all."""
    python = ensure(release)
    plan = subprocess.run(
        [shutil.which("uv") or "uv", "pip", "install", "--dry-run", "-p", str(python), str(REPO)],
        capture_output=True,
        text=True,
        check=True,
        timeout=PATIENCE,
    )
    assert "pycrdt" not in plan.stdout + plan.stderr, plan.stderr


async def test_the_extension_works_in_that_jupyterlab_and_its_rooms_still_open(
    lab_with_nbrelay: JupyterServer,
) -> None:
    path = lab_with_nbrelay.root / "n.ipynb"
    async with ext_client(lab_with_nbrelay) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b = 20")
        ran = await call(client, "execute", path="n.ipynb", cells=["c1"])
        assert ran["cells"][0]["status"] == "ok"
        await call(client, "move_cells", path="n.ipynb", cells=["c1"], to=0)
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert saved["saved"] is True
    # In the room (where a person sees it), and in the file.
    assert await fresh_sources(lab_with_nbrelay, "n.ipynb") == (["c1", "c0"], ["b = 20", "a = 1"])
    assert [c.source for c in nbformat.read(path, as_version=4).cells] == ["b = 20", "a = 1"]
    assert "cannot load" not in lab_with_nbrelay.tail(200)


@pytest.mark.parametrize("release", ["3.1.2"])
async def test_a_server_that_answers_no_save_request_is_no_longer_asked(
    start_jupyter: Any, release: str
) -> None:
    """The first save asks (in vain: no answer), the server's own save holds the edit; once the
    request went unanswered, the connection waiting for it is closed and later saves only wait
    for the server's own."""
    server: JupyterServer = start_jupyter(kind=f"collaboration-{release}")
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    store = live_store(server, save_delay=3600)  # no background saves: only the ones here
    async with agent(server, store=store) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a = 2")
        room = store._rooms["n.ipynb"]
        assert isinstance(room, Room)
        async with room.lock:
            assert await room.save(within=2.0) == SAVED_ALONE

        def answers() -> bool | None:
            return store.api.answers_saves

        assert answers() is None  # not yet known
        await wait_for(lambda: answers() is not None, seconds=PATIENCE)
        assert answers() is False
        asked = room.save_requests
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a = 3")
        saved = await call(client, "save_notebook", path="n.ipynb")
        assert saved["saved"] is True
        assert room.save_requests == asked  # waited for the server's save, asked nothing
    assert nbformat.read(server.root / "n.ipynb", as_version=4).cells[0].source == "a = 3"


async def test_the_extension_on_a_collaboration_it_cannot_use_answers_saying_what_to_do(
    start_jupyter: Any,
) -> None:
    """jupyter-collaboration 3.x lacks what the extension uses in its rooms: the endpoint still
    answers (it was HTTP 500 "Unhandled error" for every request), a tool that needs no room
    works, and one that opens a notebook names what to install or to use live mode."""
    server: JupyterServer = start_jupyter(kind="collaboration-3.1.2")
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    async with ext_client(server) as client:
        listed = await call(client, "list_notebooks")
        assert [n["path"] for n in listed["notebooks"]] == ["n.ipynb"]
        refused = await call_error(client, "read_notebook", path="n.ipynb")
    assert "jupyter-collaboration 4 or 5" in refused, refused
    assert "live mode" in refused, refused
    assert "a = 1" in (server.root / "n.ipynb").read_text()  # nothing changed
