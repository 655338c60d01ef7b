"""The change feed: listeners hear about edits by anyone, and learn what changed.

How soon (docs/export.md's "within a second") is measured by bench/fault_timing.py; here every wait
is for the notification itself, bounded generously.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated, Subscription
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import ResourceUpdatedNotification

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import PATIENCE, call
from tests.resources.test_resources import read_json

pytestmark = pytest.mark.anyio

NB = "nbrelay://notebook/report.ipynb"
OTHER = "nbrelay://notebook/other.ipynb"


@pytest.fixture
async def modern(served: Path, tmp_path: Path) -> AsyncIterator[Client]:
    """A client on the current protocol (subscriptions/listen)."""
    settings = Settings(root=served, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings), mode="auto") as c:
        yield c


async def next_uris(sub: Subscription, want: set[str]) -> set[str]:
    """Collect resource-updated URIs until every one of ``want`` has arrived."""
    seen: set[str] = set()
    with anyio.fail_after(PATIENCE):
        async for event in sub:
            assert isinstance(event, ResourceUpdated)
            seen.add(event.uri)
            if want <= seen:
                return seen
    raise AssertionError(f"the stream ended; saw {seen}")


def edit_file(path: Path, change: Any) -> None:
    """Edit the notebook as a person's editor would: read the JSON, change it, write it back."""
    nb = json.loads(path.read_text())
    change(nb)
    path.write_text(json.dumps(nb, indent=1))


async def last_change(client: Client) -> dict[str, Any]:
    changes = (await read_json(client, f"{NB}/changes"))["changes"]
    assert changes, "no change recorded"
    entry: dict[str, Any] = changes[-1]
    return entry


async def test_an_edit_in_the_file_is_reported(modern: Client, served: Path) -> None:
    watched = [NB, f"{NB}/cells/c1", f"{NB}/cells/c3", f"{NB}/changes"]
    async with modern.listen(resource_subscriptions=watched) as sub:

        def change(nb: dict[str, Any]) -> None:
            nb["cells"][1]["source"] = "total = 7 * 6\n"

        edit_file(served / "report.ipynb", change)
        seen = await next_uris(sub, {NB, f"{NB}/cells/c1", f"{NB}/changes"})
        assert f"{NB}/cells/c3" not in seen
    entry = await last_change(modern)
    assert entry["edited"] == ["c1"]
    assert "added" not in entry
    assert "outputs" not in entry
    state = await read_json(modern, NB)
    assert entry["version"] == state["version"]
    assert state["cells"][1]["source"] == "total = 7 * 6"


async def test_an_edit_by_another_nbrelay_process_is_reported(
    modern: Client, served: Path, tmp_path: Path
) -> None:
    other = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(served), "--lock-dir", str(tmp_path / "lk")],
    )
    async with Client(other) as second, modern.listen(resource_subscriptions=[NB]) as sub:
        done = await call(second, "insert_cells", path="report.ipynb", cells=["x = 1"], after="c1")
        await next_uris(sub, {NB})
        new_id = done["changed"][0]["id"]
        await call(second, "delete_cells", path="report.ipynb", cells=["m0"])
        await next_uris(sub, {NB})
    changes = (await read_json(modern, f"{NB}/changes"))["changes"]
    assert changes[-2]["added"] == [new_id]
    assert changes[-1]["removed"] == ["m0"]
    assert changes[-1]["previous"] == changes[-2]["version"]
    since = await read_json(modern, f"{NB}/changes?since={changes[-2]['version']}")
    assert since["changes"] == changes[-1:]


async def test_outputs_edits_and_this_servers_own_edits(modern: Client, served: Path) -> None:
    out = f"{NB}/cells/c2/outputs/0"
    async with modern.listen(resource_subscriptions=[NB, out, f"{NB}/cells/c1"]) as sub:

        def change(nb: dict[str, Any]) -> None:
            nb["cells"][2]["outputs"] = []

        edit_file(served / "report.ipynb", change)
        seen = await next_uris(sub, {NB, out})
        assert f"{NB}/cells/c1" not in seen
        await call(modern, "edit_cell", path="report.ipynb", cell="c1", source="pass")
        await next_uris(sub, {NB, f"{NB}/cells/c1"})
    changes = (await read_json(modern, f"{NB}/changes"))["changes"]
    assert changes[-2]["outputs"] == ["c2"]
    assert changes[-1]["edited"] == ["c1"]


async def test_a_deleted_notebook_is_reported(modern: Client, served: Path) -> None:
    async with modern.listen(resource_subscriptions=[NB]) as sub:
        (served / "report.ipynb").unlink()
        await next_uris(sub, {NB})


async def test_clients_on_older_protocols_subscribe(served: Path, tmp_path: Path) -> None:
    got: list[ResourceUpdatedNotification] = []
    both = anyio.Event()
    other_heard = [anyio.Event()]

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            got.append(message)
            if {n.params.uri for n in got} == {NB, f"{NB}/cells/c3"}:
                both.set()
            if message.params.uri == OTHER:
                other_heard[0].set()

    shutil.copy(served / "report.ipynb", served / "other.ipynb")
    settings = Settings(root=served, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings), mode="legacy", message_handler=on_message) as c:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await c.subscribe_resource(NB)
            await c.subscribe_resource(f"{NB}/cells/c3")
            await c.subscribe_resource(OTHER)

        def change(nb: dict[str, Any]) -> None:
            nb["cells"][3]["metadata"] = {"tags": ["new"]}

        edit_file(served / "report.ipynb", change)
        with anyio.fail_after(PATIENCE):
            await both.wait()
        meta = got[0].params.meta or {}
        assert meta["nbrelay/change"]["edited"] == ["c3"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await c.unsubscribe_resource(NB)
            await c.unsubscribe_resource(f"{NB}/cells/c3")
        got.clear()
        edit_file(served / "report.ipynb", lambda nb: nb["cells"][3].update(source="y"))
        # The feed checks every watched notebook in turn: two later changes of another notebook
        # still listened to are each heard after a full round, so a notification of the first
        # change, had it been sent, would have come before the second of them.
        for n in range(2):
            other_heard[0] = anyio.Event()
            edit_file(served / "other.ipynb", lambda nb, n=n: nb["cells"][0].update(source=f"{n}"))
            with anyio.fail_after(PATIENCE):
                await other_heard[0].wait()
        assert {m.params.uri for m in got} == {OTHER}


async def test_a_client_listening_over_stdio_hears_a_persons_edit(
    served: Path, tmp_path: Path
) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(served), "--lock-dir", str(tmp_path / "l")],
    )
    async with Client(server) as c, c.listen(resource_subscriptions=[NB]) as sub:

        def change(nb: dict[str, Any]) -> None:
            nb["cells"].append(
                {"cell_type": "markdown", "id": "late", "metadata": {}, "source": "x"}
            )

        edit_file(served / "report.ipynb", change)
        await next_uris(sub, {NB})
        changes = (await read_json(c, f"{NB}/changes"))["changes"]
    assert changes[-1]["added"] == ["late"]
