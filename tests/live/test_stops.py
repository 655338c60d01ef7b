"""A Jupyter Server stopped right after the agent was told its edits succeeded.

An edit returns once the server has it in the notebook's room; the file is written a moment
later. What the room store promises (both ways into the rooms, ``tests.live.rooms``):

* a clean stop (SIGTERM: what JupyterHub's "Stop My Server" and ``docker stop`` send) loses
  nothing acknowledged. In process, nbrelay saves its rooms before jupyter-collaboration lets them
  go; over a WebSocket, nbrelay gives the restarted server back what it lost, on its own;
* after a crash (SIGKILL), nbrelay applies its lost edits again where nothing else changed them
  meanwhile, and its next result names each of them, and those it could not apply again. Over a
  WebSocket nbrelay outlives the server and remembers them; in process it dies with the server
  and finds them in the journal it keeps beside it.

The servers here save only when nbrelay asks (no autosave, nbrelay's saver an hour away), so the
edits are in no file when the signal comes; the signal is sent the moment the last call returns.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.helpers import call, code, notebook, write_notebook
from tests.live.rooms import room_agent, store_args
from tests.live.server import JupyterServer, wait_for
from tests.live.test_rtc import disk

pytestmark = pytest.mark.anyio

# The server never autosaves, nor does nbrelay's saver (an hour away).
QUIET = ["--YDocExtension.document_save_delay=3600", *store_args(save_delay=3600)]


async def test_a_clean_stop_right_after_the_edits_loses_none_of_them(
    start_jupyter: Any, way: str
) -> None:
    server: JupyterServer = start_jupyter(args=QUIET)
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    path = server.root / "n.ipynb"
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(room_agent(way, server, save_delay=3600))
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        await call(client, "insert_cells", path="n.ipynb", cells=["c = 3"], index=2)
        # SIGTERM at once (then SIGKILL if the server hangs, as it does with an RTC client in).
        await anyio.to_thread.run_sync(server.stop)
        if way == "in-process":  # saved before jupyter-collaboration let the room go
            assert disk(path)[1] == ["a1", "b", "c = 3"]
        server.start()
        # The file has both edits: saved before the rooms went, or given back to the restarted
        # server by nbrelay without being asked.
        await wait_for(lambda: disk(path)[1] == ["a1", "b", "c = 3"], seconds=60)
        if way == "in-process":
            # nbrelay stopped with the server: a new agent sees the notebook as it was left.
            stack.push_async_exit(_quietly)
            async with room_agent(way, server) as again:
                view = await call(again, "read_notebook", path="n.ipynb")
            assert "note" not in view
        else:
            view = await call(client, "read_notebook", path="n.ipynb")
            assert "applied these again" in view["note"]
        assert [c["source"] for c in view["cells"]] == ["a1", "b", "c = 3"]


async def _quietly(*exc: Any) -> bool:
    """Swallow what closing an MCP session of a server that stopped may raise."""
    return True


async def test_after_a_crash_the_lost_edits_are_applied_again_or_named(
    start_jupyter: Any, way: str
) -> None:
    server: JupyterServer = start_jupyter(args=QUIET)
    write_notebook(server.root / "n.ipynb", notebook("a", "b", "c"))
    path = server.root / "n.ipynb"
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(room_agent(way, server, save_delay=3600))
        await call(client, "read_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        await call(client, "edit_cell", path="n.ipynb", cell="c1", source="b1")
        await call(client, "delete_cells", path="n.ipynb", cells=["c2"])
        server.kill()
        assert disk(path)[1] == ["a", "b", "c"]
        # While it is down someone changes the second cell in the file.
        changed = notebook("a", "b from outside", "c")
        changed.cells.insert(0, code("top", "t0"))
        write_notebook(path, changed)
        server.start()
        # nbrelay gives the restarted server what nothing changed meanwhile, on its own (over a
        # WebSocket from what it remembers; in process from its journal, beside the server)...
        await wait_for(lambda: disk(path)[1] == ["top", "a1", "b from outside"], seconds=60)
        # ...and the agent's next result names what came back and what did not.
        if way == "in-process":  # the agent's session ended with the server
            stack.push_async_exit(_quietly)
            client = await stack.enter_async_context(room_agent(way, server))
        view = await call(client, "read_notebook", path="n.ipynb")
    note = view["note"]
    assert "The Jupyter Server stopped before saving some of your edits" in note
    restored, lost = note.split("did not apply them again")
    assert "the source of cell 'c0'" in restored
    assert "the deletion of cell 'c2'" in restored
    assert "the source of cell 'c1'" in lost
    assert [c["source"] for c in view["cells"]] == ["top", "a1", "b from outside"]


async def test_after_a_crash_the_notebooks_lost_metadata_is_applied_again(
    start_jupyter: Any, way: str
) -> None:
    """The notebook's own metadata (notebook_metadata) is given back as cells are: key by key,
    where nothing else changed it meanwhile."""
    import nbformat

    server: JupyterServer = start_jupyter(args=QUIET)
    write_notebook(server.root / "n.ipynb", notebook("a"))
    path = server.root / "n.ipynb"
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(room_agent(way, server, save_delay=3600))
        await call(client, "notebook_metadata", path="n.ipynb", metadata={"title": "T"})
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        server.kill()
        assert "title" not in nbformat.read(str(path), as_version=4).metadata
        server.start()

        def back() -> bool:
            try:
                nb = nbformat.read(str(path), as_version=4)
            except (OSError, ValueError):
                return False
            return nb.metadata.get("title") == "T" and [c.source for c in nb.cells] == ["a1"]

        await wait_for(back, seconds=60)
        if way == "in-process":  # the agent's session ended with the server
            stack.push_async_exit(_quietly)
            client = await stack.enter_async_context(room_agent(way, server))
        view = await call(client, "read_notebook", path="n.ipynb")
    assert "the notebook's metadata 'title'" in view["note"]
    assert "did not apply them again" not in view["note"]
