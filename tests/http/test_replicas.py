"""Two nbrelay processes on one root behind one address (replicas behind a load balancer): a
client's reads through one guard its edits through the other, and it undoes through either.

The client is sessionless (protocol 2026-07-28: no MCP session to pin it to one process), so it
is known by its bearer token on both; what it last read and its undo history live in the root's
state folder, shared by both processes. Real processes over HTTP, an outside writer on the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.helpers import call, call_error, notebook, write_notebook
from tests.http.harness import auth_headers, http_client, http_server
from tests.http.test_http import INIT

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("runtime")]

FIVE = "l1 = 1\nl2 = 2\nl3 = 3\nl4 = 4\nl5 = 5"


def sources(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]


def someone_else_writes(path: Path, index: int, source: str) -> None:
    """A person's editor saves the file with one cell changed."""
    nb = json.loads(path.read_text())
    nb["cells"][index]["source"] = source
    path.write_text(json.dumps(nb, indent=1))


async def test_reads_through_one_replica_guard_and_undo_through_the_other(tmp_path: Path) -> None:
    root = tmp_path / "root"
    nb = root / "n.ipynb"
    write_notebook(nb, notebook("a", FIVE))
    with (
        http_server(root, tmp_path, "--shared-state", name="a") as a,
        http_server(root, tmp_path, "--shared-state", name="b", token=a.token) as b,
    ):
        async with http_client(a.url, a.token) as via_a, http_client(b.url, b.token) as via_b:
            # Read through A; a person changes line 1; a whole-source edit through B changes
            # line 5: merged with the person's change (B knows what the client read), not
            # written over it.
            await call(via_a, "read_notebook", path="n.ipynb")
            theirs = FIVE.replace("l1 = 1", "l1 = 100")
            someone_else_writes(nb, 1, theirs)
            mine = FIVE.replace("l5 = 5", "l5 = 500")
            done = await call(via_b, "edit_cell", path="n.ipynb", cell="c1", source=mine)
            assert sources(nb)[1] == theirs.replace("l5 = 5", "l5 = 500")
            assert [m["id"] for m in done["merged"]] == ["c1"]

            # Undo through A takes back the edit made through B.
            undone = await call(via_a, "undo", path="n.ipynb")
            assert undone["undone"] == ["edit cell"]
            assert sources(nb) == ["a", theirs]
            assert "nothing to undo" in await call_error(via_b, "undo", path="n.ipynb")

            # Read through B; the file changes; an edit by position through A is refused.
            await call(via_b, "read_notebook", path="n.ipynb")
            someone_else_writes(nb, 0, "changed")
            text = await call_error(via_a, "delete_cells", path="n.ipynb", cells=[0])
            assert "since you last read it" in text
            assert sources(nb) == ["changed", theirs]


async def test_one_process_keeps_reads_and_undo_in_memory(tmp_path: Path, runtime: Path) -> None:
    # Without --shared-state nothing of a client's reads or undo history is written to disk:
    # an edit costs no write besides the notebook's (the journal of runs is another matter).
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook("a", FIVE))
    with http_server(root, tmp_path, name="alone") as alone:
        async with http_client(alone.url, alone.token) as client:
            await call(client, "read_notebook", path="n.ipynb")
            await call(client, "edit_cell", path="n.ipynb", cell="c0", source="b")
            await call(client, "undo", path="n.ipynb")
    assert sources(root / "n.ipynb")[0] == "a"
    kept = [p for p in runtime.rglob("*") if p.is_file() and "seen" in p.parts]
    kept += [p for p in runtime.rglob("*") if p.is_file() and "callers" in p.parts]
    assert kept == []
    assert runtime.is_dir()  # the processes did use this runtime folder


async def test_an_mcp_session_lives_in_the_process_that_made_it(tmp_path: Path) -> None:
    # A sessionful client (protocol 2025-11-25) that reaches the other replica is told its
    # session is unknown (404): it must initialize again there, as docs/durability.md says.
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook("a"))
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with (
        http_server(root, tmp_path, "--shared-state", name="a") as a,
        http_server(root, tmp_path, "--shared-state", name="b", token=a.token) as b,
    ):
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
            **auth_headers(a.token),
        }
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            made = await http.post(a.url, json=INIT)
            assert made.status_code == 200
            session = {"Mcp-Session-Id": made.headers["mcp-session-id"]}
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(a.url, json=done, headers=session)).status_code == 202
            assert (await http.post(a.url, json=listing, headers=session)).status_code == 200
            elsewhere = await http.post(b.url, json=listing, headers=session)
            assert elsewhere.status_code == 404
            again = await http.post(b.url, json=INIT)  # a new session, on the other replica
            assert again.status_code == 200
            assert again.headers["mcp-session-id"] != session["Mcp-Session-Id"]
