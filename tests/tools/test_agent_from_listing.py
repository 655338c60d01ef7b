"""A scripted agent that knows only what every agent gets (the server instructions and the trimmed
``tools/list``) does a whole task: each fact it relies on must be in that text, and each call is
built from the listed schemas. It also recovers from a wrong call with what the error says (the
examples left out of the listing are there)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import parse
from nbrelay.server import build_server
from tests.helpers import PATIENCE, data_of, text_of

pytestmark = pytest.mark.anyio


class ListedAgent:
    """Builds calls only from the tools/list it was given, and checks what it relies on."""

    def __init__(self, instructions: str, tools: list[Any]) -> None:
        self.instructions = instructions
        self.tools = {t.name: t for t in tools}

    def knows(self, tool: str, fact: str) -> None:
        listed = self.tools[tool]
        text = f"{listed.description} {json.dumps(listed.input_schema)} {self.instructions}"
        assert fact in text, f"the listing never tells an agent {fact!r} (for {tool})"

    def args(self, tool: str, **args: Any) -> dict[str, Any]:
        schema = self.tools[tool].input_schema
        props = schema.get("properties", {})
        unknown = set(args) - set(props)
        assert not unknown, f"{tool} lists no {unknown}"
        missing = set(schema.get("required", [])) - set(args)
        assert not missing, f"{tool} needs {missing}"
        return args


async def test_an_agent_that_knows_only_the_listing_does_the_task(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    server = build_server(Settings(root=root, lock_dir=tmp_path / "locks"))
    async with Client(server) as client:
        agent = ListedAgent(client.instructions or "", (await client.list_tools()).tools)

        async def do(tool: str, **args: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, agent.args(tool, **args))
            assert not result.is_error, text_of(result)
            return data_of(result)

        # Paths are relative to the served folder; cells may be plain strings or typed objects.
        agent.knows("create_notebook", "relative to the served folder")
        agent.knows("create_notebook", "a plain string is a code cell")
        agent.knows("create_notebook", '{"type": "markdown", "source":')
        made = await do(
            "create_notebook",
            path="work/sales.ipynb",
            cells=[{"type": "markdown", "source": "# Sales"}, "total = 0"],
        )
        # Every read returns `version`, to pass as expected_version when editing.
        agent.knows("read_notebook", "expected_version")
        read = await do("read_notebook", path="work/sales.ipynb")
        version, first_code = read["version"], read["cells"][1]["id"]
        assert made["changed"][1]["id"] == first_code
        agent.knows("insert_cells", "after")
        inserted = await do(
            "insert_cells",
            path="work/sales.ipynb",
            after=first_code,
            cells=["total += 5", "print(total)", "scratch = 1"],
            expected_version=version,
        )
        # find/replace inside a cell: literal text that must occur once
        agent.knows("edit_cell", "must occur once")
        await do(
            "edit_cell",
            path="work/sales.ipynb",
            cell=inserted["changed"][0]["id"],
            find="+= 5",
            replace="+= 7",
        )
        # ranges are 'start:end' with the end excluded; index -1 is the last cell
        agent.knows("delete_cells", "'start:end'")
        agent.knows("read_cell", "-1 = last")
        await do("delete_cells", path="work/sales.ipynb", cells=["4:5"])
        last = await do("read_cell", path="work/sales.ipynb", cell=-1)
        assert "print(total)" in json.dumps(last)
        # every cell: [":"]; a long run hands back a handle to poll
        agent.knows("execute", '[\\":\\"]')
        agent.knows("execute", "handle")
        ran = await do("execute", path="work/sales.ipynb", cells=[":"], wait=PATIENCE)
        assert ran["status"] == "done", ran
        printed = json.dumps(ran["cells"])
        assert "7" in printed
        # read-only inspection, marked as such
        assert agent.tools["inspect_variable"].annotations.read_only_hint is True
        seen = await do("inspect_variable", path="work/sales.ipynb", name="total")
        assert "7" in json.dumps(seen)

        # A wrong call (the agent forgot `path`) is answered with what to send, example included.
        wrong = await client.call_tool("move_cells", {"cells": [0], "to": 1})
        assert wrong.is_error
        said = text_of(wrong)
        assert "Missing argument `path`" in said
        example = re.search(r"Example: (move_cells\(.*\))", said)
        assert example, said
    nb = parse((root / "work" / "sales.ipynb").read_bytes())
    assert [c["source"] for c in nb.cells] == ["# Sales", "total = 0", "total += 7", "print(total)"]
