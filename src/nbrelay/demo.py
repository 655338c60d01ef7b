"""``nbrelay demo``: start the real server over stdio and drive it with the official MCP client.

It creates a notebook, inserts cells, edits one with find/replace, runs it on a local kernel,
reads it back, and prints each step, leaving a notebook a person can open in Jupyter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

NOTEBOOK = "demo.ipynb"


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _data(result: CallToolResult) -> dict[str, Any]:
    if result.is_error:
        text = "".join(b.text for b in result.content if isinstance(b, TextContent))
        raise RuntimeError(text)
    if isinstance(result.structured_content, dict):
        return result.structured_content
    text = "".join(b.text for b in result.content if isinstance(b, TextContent))
    data: dict[str, Any] = json.loads(text)
    return data


async def _session(folder: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(folder)],
    )
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        _say(f"1. started `nbrelay serve --root {folder}` over stdio: {len(tools)} tools")
        created = _data(
            await client.call_tool(
                "create_notebook",
                {
                    "path": NOTEBOOK,
                    "overwrite": True,
                    "cells": [{"type": "markdown", "source": "# nbrelay demo"}],
                },
            )
        )
        _say(f"2. create_notebook -> {created['path']} (version {created['version']})")
        inserted = _data(
            await client.call_tool(
                "insert_cells",
                {
                    "path": NOTEBOOK,
                    "cells": [
                        "numbers = [3, 1, 2]\nprint(sorted(numbers))",
                        {"type": "markdown", "source": "The list is sorted above."},
                    ],
                    "expected_version": created["version"],
                },
            )
        )
        ids = [c["id"] for c in inserted["changed"]]
        _say(f"3. insert_cells -> new cells {ids}")
        edited = _data(
            await client.call_tool(
                "edit_cell",
                {
                    "path": NOTEBOOK,
                    "cell": ids[0],
                    "find": "sorted(numbers)",
                    "replace": "sorted(numbers, reverse=True)",
                    "expected_version": inserted["version"],
                },
            )
        )
        _say("4. edit_cell (find/replace) -> diff:")
        for line in str(edited.get("diff", "")).splitlines():
            _say(f"     {line}")
        stale = await client.call_tool(
            "delete_cells",
            {"path": NOTEBOOK, "cells": [0], "expected_version": created["version"]},
        )
        first_line = "".join(b.text for b in stale.content if isinstance(b, TextContent))
        _say(f"5. an edit against an old version is refused: {first_line[:110]}…")
        ran = _data(await client.call_tool("execute", {"path": NOTEBOOK, "cells": [ids[0]]}))
        cell = ran["cells"][0]
        printed = "".join(o["text"] for o in cell.get("outputs", []))
        _say(
            f"6. execute -> cell {cell['index']} ran on a local {ran['kernel']} kernel "
            f"(execution count {cell['execution_count']}, {cell['status']}); it printed: "
            f"{printed.strip()}"
        )
        view = _data(await client.call_tool("read_notebook", {"path": NOTEBOOK}))
        _say(f"7. read_notebook -> {view['cell_count']} cells, version {view['version']}:")
        for cell in view["cells"]:
            summary = f"  -> {cell['output_summary']}" if cell.get("output_summary") else ""
            _say(
                f"     [{cell['index']}] {cell['type']:8} {cell['id']}  {cell['source']!r}{summary}"
            )
    _say(f"Done. Open {folder / NOTEBOOK} in Jupyter to see the notebook.")


def run_demo(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    anyio.run(_session, folder.resolve())
    return 0
