"""Per-caller state through the in-process MCP client: two clients with an MCP session each
(handshake-era clients; the in-process 2026-07-28 client has neither a session nor a channel of
its own, so two of them are one caller) on one server, in file and live mode. Each undoes only
its own edits, whichever undoes first; what one has viewed says nothing about what the other
has. tests/http/test_callers.py does the same over streamable HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import parse
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, call_error, counter_ids, notebook, text_of, write_notebook
from tests.tools.conftest import live_workspace

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def two_clients(
    request: pytest.FixtureRequest,
    store_mode: str,
    root: Path,
    tmp_path: Path,
    mode: str,
    profile: str = "canonical",
) -> AsyncIterator[tuple[Client, Client]]:
    """Two MCP clients of one server (one workspace): agent A and agent B."""
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0, profile=profile)
    if store_mode == "live":
        ws = live_workspace(settings, request, root)
    else:
        ws = Workspace(
            settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids()
        )
    server = build_server(settings, ws)
    async with Client(server, mode=mode) as a, Client(server, mode=mode) as b:
        yield a, b


def sources(root: Path, name: str = "n.ipynb") -> list[str]:
    return [c["source"] for c in parse((root / name).read_bytes()).cells]


@pytest.mark.parametrize("first", ["a", "b"])
async def test_each_client_undoes_only_its_own_edits(
    request: pytest.FixtureRequest, store_mode: str, root: Path, tmp_path: Path, first: str
) -> None:
    """A edits a cell, B inserts one; whichever undoes first reverts its own change only, and
    the other's undo then reverts the other change: never each other's."""
    write_notebook(root / "n.ipynb", notebook("shared", "other"))
    async with two_clients(request, store_mode, root, tmp_path, "legacy") as (a, b):
        await call(a, "edit_cell", path="n.ipynb", cell="c0", source="A's edit")
        await call(b, "insert_cells", path="n.ipynb", after="c1", cells=["B's cell"])
        assert sources(root) == ["A's edit", "other", "B's cell"]
        order = [(a, "edit cell"), (b, "insert cells")]
        if first == "b":
            order.reverse()
        (one, label_one), (two, label_two) = order
        done = await call(one, "undo", path="n.ipynb")
        assert done["undone"] == [label_one]
        expected = ["shared", "other", "B's cell"] if first == "a" else ["A's edit", "other"]
        assert sources(root) == expected
        # The first client has nothing left to undo: the other's edit is not its to take back.
        refused = await call_error(one, "undo", path="n.ipynb")
        assert "nothing to undo" in refused
        assert sources(root) == expected
        done = await call(two, "undo", path="n.ipynb")
        assert done["undone"] == [label_two]
        assert sources(root) == ["shared", "other"]


async def test_undo_of_a_cell_someone_else_changed_since_is_refused(
    request: pytest.FixtureRequest, store_mode: str, root: Path, tmp_path: Path
) -> None:
    """B edits the cell A edited: A's undo would overwrite B's edit, so it is refused; B's own
    undo goes back to A's text."""
    write_notebook(root / "n.ipynb", notebook("start"))
    async with two_clients(request, store_mode, root, tmp_path, "legacy") as (a, b):
        await call(a, "edit_cell", path="n.ipynb", cell="c0", source="A")
        await call(b, "edit_cell", path="n.ipynb", cell="c0", source="B")
        refused = await call_error(a, "undo", path="n.ipynb")
        assert "was changed after it" in refused
        assert sources(root) == ["B"]
        await call(b, "undo", path="n.ipynb")
        assert sources(root) == ["A"]
        await call(a, "undo", path="n.ipynb")
        assert sources(root) == ["start"]


async def _outcome(client: Client, tool: str, **args: object) -> str:
    """A call's text, prefixed "error: " when it was refused (mcp-jupyter answers in text)."""
    result = await client.call_tool(tool, args)
    return ("error: " if result.is_error else "") + text_of(result)


async def test_what_one_client_viewed_does_not_count_for_another(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """mcp-jupyter's guard (an edit needs the notebook viewed since its last change) is judged
    per client: A's view does not let B edit a notebook B has never seen, and A's edit makes
    B's view stale but keeps A's current."""
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook("x = 1", "y = 2"))
    edit = {"operation": "edit_code", "notebook_path": "n", "position_index": 0, "execute": False}
    view = {"query_type": "view_source", "notebook_path": "n"}
    async with two_clients(request, "files", root, tmp_path, "legacy", "mcp-jupyter") as (a, b):
        assert not (await _outcome(a, "query_notebook", **view)).startswith("error")
        refused = await _outcome(b, "modify_notebook_cells", cell_content="x = 10", **edit)
        assert refused.startswith("error")
        assert "have not viewed" in refused
        assert not (await _outcome(b, "query_notebook", **view)).startswith("error")
        done = await _outcome(a, "modify_notebook_cells", cell_content="x = 10", **edit)
        assert not done.startswith("error"), done
        stale = await _outcome(b, "modify_notebook_cells", cell_content="x = 20", **edit)
        assert stale.startswith("error")
        assert "changed since you last viewed it" in stale
        done = await _outcome(a, "modify_notebook_cells", cell_content="x = 3", **edit)
        assert not done.startswith("error"), done
    assert sources(root)[0] == "x = 3"


async def test_a_resource_read_counts_as_the_readers_read(
    request: pytest.FixtureRequest, store_mode: str, root: Path, tmp_path: Path
) -> None:
    """A read the notebook, B inserted a cell at the top, A read it again as a resource: A's
    edit by index is checked against what A saw last (the resource), so it is not refused as
    made against cells that moved."""
    write_notebook(root / "n.ipynb", notebook("first", "second"))
    async with two_clients(request, store_mode, root, tmp_path, "legacy") as (a, b):
        await call(a, "read_notebook", path="n.ipynb")
        await call(b, "insert_cells", path="n.ipynb", index=0, cells=["B's cell"])
        refused = await call_error(a, "edit_cell", path="n.ipynb", cell="0", source="A's edit")
        assert "Nothing was changed" in refused or "nothing was changed" in refused.lower()
        assert sources(root) == ["B's cell", "first", "second"]
        await a.read_resource("nbrelay://notebook/n.ipynb")
        await call(a, "edit_cell", path="n.ipynb", cell="0", source="A's edit")
        assert sources(root) == ["A's edit", "first", "second"]
