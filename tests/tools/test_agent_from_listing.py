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
        """``fact`` is in the tool's entry, or said once for every tool in the listing (which an
        agent holds whole), or in the instructions."""
        listed = self.tools[tool]
        text = f"{listed.description} {json.dumps(listed.input_schema)} {self.instructions}"
        every = _listing_text(list(self.tools.values()))
        assert fact in text or fact in every, f"the listing never tells an agent {fact!r} ({tool})"

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
        agent.knows("create_notebook", "A string is a code cell")
        agent.knows(
            "create_notebook", '"cell_type": {"default": "code", "enum": ["code", "markdown"'
        )
        made = await do(
            "create_notebook",
            path="work/sales.ipynb",
            cells=[{"cell_type": "markdown", "source": "# Sales"}, "total = 0"],
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
        agent.knows("read_cell", "(-1 =")
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


# -- What the listing alone must say -------------------------------------------------------------
# Some clients never show the server's instructions to the model: the tools/list as sent must be
# enough. A parameter every tool shares is explained once in the listing (JSON Schema cannot share
# a definition between tools, and saying it on each of 30 tools would cost every agent ~2 KB a
# turn); this is where, in words an agent reads.
SHARED = {
    "path": "paths are relative to the served folder",
    "cell": "cells are 0-based indexes (-1 =",
    "cells": "in lists also 'start:end' ranges (end excluded)",
    "after": "cells are 0-based indexes (-1 =",
    "expected_version": "as expected_version refuse if the notebook changed",
    "handle": "returns a `handle` for get_execution",
}
# Write tools that take no expected_version, and why: they make a new file, write another file,
# or touch no cell.
NO_VERSION = {
    "create_notebook": "makes a new notebook (refuses an existing one unless overwrite=true)",
    "import_notebook": "makes a new notebook (refuses an existing one unless overwrite=true)",
    "export_notebook": "writes another file (refuses an existing one unless overwrite=true)",
    "save_notebook": "changes no cell: waits for the file to hold what is there",
    "restart_kernel": "changes the kernel, not the notebook (clear_outputs=true clears all)",
}
# A required parameter whose meaning the tool's name gives: inspect_variable(name).
EVIDENT = {("inspect_variable", "name")}


def _listing_text(tools: list[Any]) -> str:
    return "\n".join(
        f"{t.name}: {t.description} {json.dumps(t.input_schema, ensure_ascii=False)}" for t in tools
    )


def _cell_shape(schema: dict[str, Any], name: str) -> list[str] | None:
    """The JSON types a cell parameter takes (of its items, for a list)."""
    prop = schema.get("properties", {}).get(name)
    if prop is None:
        return None
    if prop.get("type") == "array":
        prop = prop.get("items", {})
    kind = prop.get("type")
    return sorted(kind) if isinstance(kind, list) else [kind]


async def test_the_listing_alone_says_what_each_tool_needs(tmp_path: Path) -> None:
    from nbrelay.server import build_workspace
    from nbrelay.tools import canonical
    from nbrelay.tools._boundary import Registrar

    settings = Settings(root=tmp_path, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings)) as client:
        listed = (await client.list_tools()).tools
    models = [
        t for t in listed if ((t.meta or {}).get("ui") or {}).get("visibility", [""])[0] != "app"
    ]
    text = _listing_text(listed)
    for name, said in SHARED.items():  # each shared parameter is explained once
        assert said in text, f"the listing never says {said!r} (for `{name}`)"
    reg = Registrar()  # the kinds say which tools write
    canonical.register(reg, build_workspace(settings))

    problems: list[str] = []
    for tool in models:
        schema = tool.input_schema
        description = tool.description or ""
        if not description.strip():
            problems.append(f"{tool.name}: no description")
        for param in schema.get("required", []):
            prop = schema["properties"][param]
            documented = (
                prop.get("description")
                or param in SHARED
                or re.search(rf"\b{re.escape(param)}\b", description)
                or (tool.name, param) in EVIDENT
            )
            if not documented:
                problems.append(f"{tool.name}: required `{param}` is explained nowhere")
        # every cell address form is accepted where the listing says cells are taken
        for param in ("cell", "cells", "after"):
            shape = _cell_shape(schema, param)
            new_cells = param == "cells" and tool.name in ("insert_cells", "create_notebook")
            if shape not in (None, ["integer", "string"]) and not new_cells:
                problems.append(f"{tool.name}.{param} takes {shape}, not indexes and ids")
        writes = reg.kinds[tool.name] in ("write", "destructive")
        versioned = "expected_version" in schema.get("properties", {})
        if writes and not versioned and tool.name not in NO_VERSION:
            problems.append(f"{tool.name} writes but takes no expected_version")
    assert not problems, "\n".join(problems)
    # execute's own forms (every cell) are said where it takes them
    execute = next(t for t in models if t.name == "execute")
    assert '[\\":\\"]' in json.dumps(execute.input_schema["properties"]["cells"])
    assert set(NO_VERSION) <= {t.name for t in models}


async def test_a_tool_without_its_shared_parameter_explained_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a listing whose conventions sentence is gone is reported."""
    settings = Settings(root=tmp_path, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings)) as client:
        listed = (await client.list_tools()).tools
    stripped = [
        t.model_copy(update={"description": "Read a notebook."}) if t.name == "read_notebook" else t
        for t in listed
    ]
    text = _listing_text(stripped)
    assert [n for n, said in SHARED.items() if said not in text] == [
        "path",
        "cell",
        "cells",
        "after",
        "expected_version",
    ]
