"""Whose edits `undo` takes back, with several agents on one real `nbrelay serve --http`, and
over stdio.

Over HTTP "you" is the MCP session; a client without one (protocol 2026-07-28) is the bearer
token it holds, so two agents with their own tokens undo only their own edits, and two agents
sharing a token are one caller (docs/deploy/http.md says so). Over stdio the one client keeps its
history from call to call.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from nbrelay.notebook.model import parse
from tests.helpers import call, call_error, notebook, write_notebook
from tests.http.harness import canary_token, http_client, http_server, server_env

pytestmark = pytest.mark.anyio


def sources(path: Path) -> list[str]:
    return [c["source"] for c in parse(path.read_bytes()).cells]


async def undo_in_either_order(a: Client, b: Client, root: Path, name: str, first: str) -> None:
    """A edits a cell, B inserts one; the first to undo takes back its own change only, then
    has nothing left, and the other's undo takes back the other change."""
    write_notebook(root / name, notebook("shared", "other"))
    await call(a, "edit_cell", path=name, cell="c0", source="A's edit")
    await call(b, "insert_cells", path=name, after="c1", cells=["B's cell"])
    assert sources(root / name) == ["A's edit", "other", "B's cell"]
    (one, mine), (two, theirs) = (
        [(a, "edit cell"), (b, "insert cells")]
        if first == "a"
        else [(b, "insert cells"), (a, "edit cell")]
    )
    assert (await call(one, "undo", path=name))["undone"] == [mine]
    left = ["shared", "other", "B's cell"] if first == "a" else ["A's edit", "other"]
    assert sources(root / name) == left
    assert "nothing to undo" in await call_error(one, "undo", path=name)
    assert sources(root / name) == left
    assert (await call(two, "undo", path=name))["undone"] == [theirs]
    assert sources(root / name) == ["shared", "other"]


async def test_each_http_client_undoes_only_its_own_edits(tmp_path: Path) -> None:
    """Two MCP sessions with one token, and two sessionless clients with a token each: in both
    orders, each undoes only its own edit. Two sessionless clients with one token are one
    caller: the second's undo takes back the first's edit."""
    root = tmp_path / "root"
    root.mkdir()
    other_token = canary_token("second")
    tokens = tmp_path / "tokens"
    tokens.write_text(other_token + "\n")
    tokens.chmod(0o600)
    with http_server(root, tmp_path, "--token-file", str(tokens)) as server:
        async with (
            http_client(server.url, server.token, mode="legacy") as a,
            http_client(server.url, server.token, mode="legacy") as b,
        ):
            for first in ("a", "b"):
                await undo_in_either_order(a, b, root, f"sessions-{first}.ipynb", first)
        async with (
            http_client(server.url, server.token) as a,
            http_client(server.url, other_token) as b,
        ):
            for first in ("a", "b"):
                await undo_in_either_order(a, b, root, f"tokens-{first}.ipynb", first)
        async with (
            http_client(server.url, other_token) as a,
            http_client(server.url, other_token) as b,
        ):
            write_notebook(root / "one.ipynb", notebook("start"))
            await call(a, "edit_cell", path="one.ipynb", cell="c0", source="A's edit")
            assert (await call(b, "undo", path="one.ipynb"))["undone"] == ["edit cell"]
            assert sources(root / "one.ipynb") == ["start"]


async def test_a_stdio_client_keeps_its_undo_history_between_calls(tmp_path: Path) -> None:
    """Over stdio a 2026-07-28 client sends each request on its own; its history still holds
    from one call to the next."""
    write_notebook(tmp_path / "n.ipynb", notebook("a", "b"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(tmp_path), "--no-execute"],
        env=server_env(None),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            await call(client, "delete_cells", path="n.ipynb", cells=["c0"])
            await call(client, "insert_cells", path="n.ipynb", index=0, cells=["z"])
            done = await call(client, "undo", path="n.ipynb", steps=2)
    assert done["undone"] == ["insert cells", "delete cells"]
    assert sources(tmp_path / "n.ipynb") == ["a", "b"]
