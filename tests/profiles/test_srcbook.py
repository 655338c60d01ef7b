"""Profile srcbook: the specification's tools, sessions, TypeScript on Deno, resources, events."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import itertools
import json
import sys
import threading
import tomllib
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import (
    EmbeddedResource,
    ImageContent,
    ResourceUpdatedNotification,
    TextResourceContents,
)

from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument
from nbrelay.notebook.model import parse
from nbrelay.server import build_server
from tests.helpers import PATIENCE, call, call_error, text_of
from tests.live.person import person
from tests.live.server import JupyterServer, wait_for
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

# The specification's input schemas: name -> (properties, required). Each property is
# (JSON type, enum or None, default or MISSING, description or None).
MISSING = object()
SEED_TOOLS: dict[str, tuple[dict[str, tuple[str, Any, Any, str | None]], list[str]]] = {
    "notebook_create": (
        {
            "name": ("string", None, MISSING, "Human-readable notebook name"),
            "language": ("string", ["typescript", "javascript"], "typescript", None),
            "description": ("string", None, MISSING, "Notebook purpose/description"),
            "tsconfig": ("object", None, MISSING, "TypeScript compiler options"),
        },
        ["name"],
    ),
    "notebook_list": (
        {"filter": ("string", ["active", "suspended", "all"], "active", None)},
        [],
    ),
    "notebook_delete": (
        {"session_id": ("string", None, MISSING, "Notebook session identifier")},
        ["session_id"],
    ),
    "cell_add": (
        {
            "session_id": ("string", None, MISSING, None),
            "type": ("string", ["code", "markdown"], "code", None),
            "content": ("string", None, MISSING, "Cell content (code or markdown)"),
            "position": ("integer", None, MISSING, "Insert position (default: end)"),
        },
        ["session_id", "content"],
    ),
    "cell_execute": (
        {
            "session_id": ("string", None, MISSING, None),
            "cell_id": ("string", None, MISSING, "Specific cell ID or 'all' for all cells"),
            "timeout": ("integer", None, 30000, "Execution timeout in milliseconds"),
        },
        ["session_id", "cell_id"],
    ),
    "cell_update": (
        {
            "session_id": ("string", None, MISSING, None),
            "cell_id": ("string", None, MISSING, None),
            "content": ("string", None, MISSING, "New cell content"),
        },
        ["session_id", "cell_id", "content"],
    ),
    "cell_delete": (
        {
            "session_id": ("string", None, MISSING, None),
            "cell_id": ("string", None, MISSING, None),
        },
        ["session_id", "cell_id"],
    ),
    "notebook_export": (
        {
            "session_id": ("string", None, MISSING, None),
            "format": ("string", ["json", "markdown", "html", "pdf"], "json", None),
            "include_outputs": ("boolean", None, True, None),
        },
        ["session_id"],
    ),
    "notebook_import": (
        {
            "content": ("string", None, MISSING, "Notebook content to import"),
            "format": ("string", ["json", "markdown", "ipynb"], "json", None),
        },
        ["content"],
    ),
    "cell_visualize": (
        {
            "session_id": ("string", None, MISSING, None),
            "cell_id": ("string", None, MISSING, None),
            "type": ("string", ["chart", "table", "graph", "auto"], "auto", None),
            "options": ("object", None, MISSING, "Visualization-specific options"),
        },
        ["session_id", "cell_id"],
    ),
}
SEED_FIRST_LINES = {
    "notebook_create": "Creates a new notebook session with specified configuration.",
    "notebook_list": "Lists all active notebook sessions.",
    "notebook_delete": "Terminates and cleans up a notebook session.",
    "cell_add": "Adds a new cell to the notebook.",
    "cell_execute": "Executes a code cell and returns results.",
    "cell_update": "Updates an existing cell's content.",
    "cell_delete": "Removes a cell from the notebook.",
    "notebook_export": "Exports notebook in various formats.",
    "notebook_import": "Imports a notebook from various formats.",
    "cell_visualize": "Generates visualizations from cell data.",
}

STATE = "notebook://session/{}/state"
HISTORY = "notebook://session/{}/history"
EVENTS = "notebook://session/{}/events"

# The specification's Example 1 and Example 2, verbatim.
SALES_DATA = """
    const salesData = [
      { month: 'Oct', revenue: 125000, units: 543 },
      { month: 'Nov', revenue: 148000, units: 621 },
      { month: 'Dec', revenue: 172000, units: 701 }
    ];
    console.log('Data loaded:', salesData.length, 'months');
  """
SALES_SUMMARY = """
    const totalRevenue = salesData.reduce((sum, m) => sum + m.revenue, 0);
    const avgRevenue = totalRevenue / salesData.length;
    console.log('Q4 Summary:');
    console.log('- Total Revenue: $' + totalRevenue.toLocaleString());
    console.log('- Average Monthly: $' + avgRevenue.toLocaleString());
  """
BUBBLE = """
    // Bubble sort implementation
    function bubbleSort(arr: number[]): number[] {
      const n = arr.length;
      for (let i = 0; i < n - 1; i++) {
        for (let j = 0; j < n - i - 1; j++) {
          if (arr[j] > arr[j + 1]) {
            [arr[j], arr[j + 1]] = [arr[j + 1], arr[j]];
          }
        }
      }
      return arr;
    }
  """
QUICK = """
    // Quick sort implementation
    function quickSort(arr: number[]): number[] {
      if (arr.length <= 1) return arr;
      const pivot = arr[0];
      const left = arr.slice(1).filter(x => x < pivot);
      const right = arr.slice(1).filter(x => x >= pivot);
      return [...quickSort(left), pivot, ...quickSort(right)];
    }
  """
BENCH = """
    const testData = Array.from({length: 1000}, () => Math.random() * 1000);

    console.time('Bubble Sort');
    bubbleSort([...testData]);
    console.timeEnd('Bubble Sort');

    console.time('Quick Sort');
    quickSort([...testData]);
    console.timeEnd('Quick Sort');
  """


def notebook_file(root: Path, session_id: str) -> Path:
    """Where a session's notebook is kept: in its own working folder under the root."""
    return root / session_id / f"{session_id}.ipynb"


async def session_list(client: Client, **args: Any) -> list[dict[str, Any]]:
    """notebook_list's result: the specification's array (structured: {"result": [...]})."""
    result = await client.call_tool("notebook_list", args)
    assert not result.is_error, text_of(result)
    items = json.loads(text_of(result))
    assert isinstance(items, list)
    assert result.structured_content == {"result": items}
    return items


async def test_tools_list_is_the_specifications(profile_client: ProfileClient) -> None:
    async with profile_client("srcbook") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == list(SEED_TOOLS)
    for name, (props, required) in SEED_TOOLS.items():
        schema = tools[name].input_schema
        assert sorted(schema["properties"]) == sorted(props), name
        assert sorted(schema.get("required", [])) == sorted(required), name
        for param, (kind, enum, default, description) in props.items():
            prop = schema["properties"][param]
            assert prop["type"] == kind, (name, param)
            assert prop.get("enum") == enum, (name, param)
            assert prop.get("default", MISSING) == default, (name, param)
            if description is not None:
                assert prop["description"] == description, (name, param)
        assert (tools[name].description or "").splitlines()[0] == SEED_FIRST_LINES[name]


async def test_example_1_data_analysis_workflow(kernel_client: ProfileClient, root: Path) -> None:
    """The specification's Example 1, call for call, on the Deno kernel; then what an agent does
    next with the same session: visualise, export, re-import, read the resources, delete."""
    events: list[dict[str, Any]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        events.append(json.loads(message or "{}"))

    async with kernel_client("srcbook") as client:
        created = await call(
            client,
            "notebook_create",
            name="Sales Analysis Q4 2024",
            description="Quarterly sales data analysis",
        )
        session_id = created["session_id"]
        assert session_id.startswith("sales-analysis-q4-2024-")
        assert created["language"] == "typescript"
        assert created["status"] == "active"
        assert created["kernel"] == "deno"
        data_cell = (await call(client, "cell_add", session_id=session_id, content=SALES_DATA))[
            "cell_id"
        ]
        executed = await client.call_tool(
            "cell_execute",
            {"session_id": session_id, "cell_id": data_cell},
            progress_callback=progress,
        )
        first = json.loads(text_of(executed))
        assert first["stdout"] == "Data loaded: 3 months\n"
        assert first["status"] == "ok"
        assert first["execution_count"] == 1
        assert [e["event"] for e in events] == [
            "notebook.cell.executing",
            "notebook.cell.output",
            "notebook.cell.completed",
            "notebook.state.changed",
        ]
        assert events[1]["text"] == "Data loaded: 3 months\n"
        assert {e["session_id"] for e in events} == {session_id}

        await call(client, "cell_add", session_id=session_id, content=SALES_SUMMARY)
        results = await call(client, "cell_execute", session_id=session_id, cell_id="all")
        assert results["status"] == "ok"
        assert [c["status"] for c in results["cells"]] == ["ok", "ok"]
        assert results["stdout"] == (
            "Data loaded: 3 months\n"
            "Q4 Summary:\n"
            "- Total Revenue: $445,000\n"
            "- Average Monthly: $148,333.333\n"
        )

        # Show the data: the cell's result as a chart (drawn from what Deno displayed), and a
        # derived table through an expression evaluated in the session's kernel.
        shown = await call(client, "cell_add", session_id=session_id, content="salesData")
        await call(client, "cell_execute", session_id=session_id, cell_id=shown["cell_id"])
        chart = await client.call_tool(
            "cell_visualize",
            {"session_id": session_id, "cell_id": shown["cell_id"], "type": "chart"},
        )
        picture = [b for b in chart.content if isinstance(b, ImageContent)]
        assert len(picture) == 1
        assert base64.b64decode(picture[0].data).startswith(b"\x89PNG")
        described = json.loads(text_of(chart))
        assert (described["kind"], described["x"], described["y"]) == (
            "chart",
            "month",
            ["revenue", "units"],
        )
        table = await call(
            client,
            "cell_visualize",
            session_id=session_id,
            cell_id=shown["cell_id"],
            type="table",
            options={
                "expression": "salesData.map(m => ({ month: m.month, price: m.revenue / m.units }))"
            },
        )
        assert table["columns"] == ["month", "price"]
        assert table["rows"][0][0] == "Oct"
        assert round(table["rows"][0][1], 2) == 230.2

        markdown = await call(client, "notebook_export", session_id=session_id, format="markdown")
        assert "```typescript" in markdown["content"]
        assert "Q4 Summary:" in markdown["content"]
        exported = await call(client, "notebook_export", session_id=session_id)
        nb = nbformat.reads(exported["content"], as_version=4)
        nbformat.validate(nb)
        assert nb.metadata["srcbook"]["name"] == "Sales Analysis Q4 2024"
        bare = await call(client, "notebook_export", session_id=session_id, include_outputs=False)
        stripped = nbformat.reads(bare["content"], as_version=4)
        assert [c.outputs for c in stripped.cells if c.cell_type == "code"] == [[], [], []]

        copy = await call(client, "notebook_import", content=exported["content"])
        assert copy["session_id"] != session_id
        assert copy["name"] == "Sales Analysis Q4 2024"
        assert copy["cell_count"] == 3
        rerun = await call(client, "cell_execute", session_id=copy["session_id"], cell_id="all")
        assert rerun["stdout"].startswith("Data loaded: 3 months\nQ4 Summary:")

        state = await client.read_resource(f"notebook://session/{session_id}/state")
        block = state.contents[0]
        assert isinstance(block, TextResourceContents)
        assert block.mime_type == "application/json"
        view = json.loads(block.text)
        assert next(c["cell_id"] for c in view["cells"]) == data_cell
        assert view["cells"][1]["outputs"][0]["text"].startswith("Q4 Summary:")
        history = await client.read_resource(f"notebook://session/{session_id}/history")
        runs = json.loads(history.contents[0].text)["executions"]  # type: ignore[union-attr]
        assert [r["status"] for r in runs] == ["ok"] * len(runs)
        assert len(runs) == 4

        listed = await session_list(client)
        assert {s["session_id"] for s in listed} == {session_id, copy["session_id"]}
        assert (await call(client, "notebook_delete", session_id=session_id))["deleted"]
        listed = await session_list(client, filter="all")
        assert [s["session_id"] for s in listed] == [copy["session_id"]]
        assert "no session has id" in await call_error(
            client, "cell_add", session_id=session_id, content="1"
        )
    assert not (root / session_id).exists()  # its folder went with it


async def test_example_2_code_testing(kernel_client: ProfileClient) -> None:
    async with kernel_client("srcbook") as client:
        session_id = (
            await call(
                client, "notebook_create", name="Algorithm Comparison", language="typescript"
            )
        )["session_id"]
        for content in (BUBBLE, QUICK, BENCH):
            await call(client, "cell_add", session_id=session_id, content=content)
        results = await call(client, "cell_execute", session_id=session_id, cell_id="all")
    assert results["status"] == "ok"
    lines = results["stdout"].splitlines()
    assert [line.split(":")[0] for line in lines] == ["Bubble Sort", "Quick Sort"]
    assert all(line.endswith("ms") for line in lines)
    assert len(results["cells"]) == 3


async def test_errors_timeouts_and_javascript(kernel_client: ProfileClient) -> None:
    async with kernel_client("srcbook", interrupt_grace=1.0) as client:
        session_id = (
            await call(client, "notebook_create", name="Edge cases", language="javascript")
        )["session_id"]
        ok = await call(client, "cell_add", session_id=session_id, content="let n = 41; n + 1")
        bad = await call(
            client, "cell_add", session_id=session_id, content="throw new Error('boom')"
        )
        after = await call(client, "cell_add", session_id=session_id, content="'still here'")
        ran = await call(client, "cell_execute", session_id=session_id, cell_id="all")
        assert ran["status"] == "error"
        assert [c["cell_id"] for c in ran["cells"]] == [ok["cell_id"], bad["cell_id"]]
        assert "result" not in ran  # the cell that failed returned nothing
        assert ran["cells"][0]["result"] == "42"
        assert ran["error"]["name"] == "Error"
        assert ran["error"]["message"] == "boom"
        slow = await call(
            client,
            "cell_add",
            session_id=session_id,
            content="console.log('waiting'); await new Promise(r => setTimeout(r, 20000));",
        )
        timed = await call(
            client, "cell_execute", session_id=session_id, cell_id=slow["cell_id"], timeout=1500
        )
        assert timed["status"] == "timeout"
        assert timed["error"]["name"] == "TimeoutError"
        assert "timed out after 1.5 s" in timed["error"]["message"]
        assert timed["stdout"] == "waiting\n"
        assert timed["execution_time_ms"] < 15000
        # Whether the kernel survived the interrupt (Deno does not) is said in plain words.
        assert ("variables kept" in timed["error"]["message"]) != ("note" in timed)
        again = await call(client, "cell_execute", session_id=session_id, cell_id=after["cell_id"])
        assert (again["status"], again["result"]) == ("ok", '"still here"')
        assert "more than 0" in await call_error(
            client, "cell_execute", session_id=session_id, cell_id=ok["cell_id"], timeout=0
        )


async def test_cell_operations_and_bad_input(profile_client: ProfileClient, root: Path) -> None:
    async with profile_client("srcbook") as client:
        session_id = (await call(client, "notebook_create", name="Cells"))["session_id"]
        a = await call(
            client, "cell_add", session_id=session_id, content="# Title", type="markdown"
        )
        b = await call(client, "cell_add", session_id=session_id, content="const b = 2;")
        c = await call(
            client, "cell_add", session_id=session_id, content="const a = 1;", position=1
        )
        assert (a["position"], b["position"], c["position"]) == (0, 1, 1)
        updated = await call(
            client, "cell_update", session_id=session_id, cell_id=b["cell_id"], content="b * 2"
        )
        assert updated == {"cell_id": b["cell_id"], "position": 2}
        assert await call(client, "cell_delete", session_id=session_id, cell_id=c["cell_id"]) == {
            "cell_id": c["cell_id"],
            "deleted": True,
        }
        path = notebook_file(root, session_id)
        before = path.read_bytes()
        for tool, args, message in [
            ("cell_add", {"session_id": "../outside", "content": "x"}, "not a session id"),
            ("cell_add", {"session_id": "nope-000000", "content": "x"}, "no session has id"),
            ("cell_add", {"session_id": session_id, "content": "x", "position": 9}, "out of range"),
            ("cell_update", {"session_id": session_id, "cell_id": "zzz", "content": "x"}, "zzz"),
            ("cell_delete", {"session_id": session_id, "cell_id": "zzz"}, "no cell has id"),
            ("cell_add", {"session_id": session_id, "content": "x", "type": "raw"}, "'code'"),
            ("notebook_export", {"session_id": session_id, "format": "docx"}, "'json'"),
            ("notebook_import", {"content": "{not json", "format": "json"}, "JSON"),
            ("notebook_create", {"name": "  "}, "name is empty"),
            ("cell_visualize", {"session_id": session_id, "cell_id": b["cell_id"]}, "not run"),
        ]:
            assert message in await call_error(client, tool, **args), tool
        assert path.read_bytes() == before
        assert sorted(p.name for p in root.iterdir()) == [session_id]
        assert sorted(p.name for p in (root / session_id).iterdir()) == [path.name]
    cells = parse(path.read_bytes()).cells
    assert [(x["cell_type"], x["source"]) for x in cells] == [
        ("markdown", "# Title"),
        ("code", "b * 2"),
    ]
    meta = parse(path.read_bytes()).data["metadata"]
    assert meta["kernelspec"]["name"] == "deno"
    assert meta["srcbook"]["name"] == "Cells"


async def test_sessions_persist_suspend_and_resume(
    kernel_client: ProfileClient, root: Path
) -> None:
    profile_client = kernel_client
    async with profile_client("srcbook", max_sessions=2) as client:
        one = (await call(client, "notebook_create", name="One"))["session_id"]
        two = await call(
            client, "notebook_create", name="Two", tsconfig={"strict": True}, description="d"
        )
        # maxSessions counts sessions whose kernel runs (the workspace's one count of kernel
        # slots): two running kernels refuse a third session, and its kernel.
        for session in (one, two["session_id"]):
            cell = await call(client, "cell_add", session_id=session, content="1")
            await call(client, "cell_execute", session_id=session, cell_id=cell["cell_id"])
        error = await call_error(client, "notebook_create", name="Three")
        assert "2 kernels are running" in error
        assert "--max-sessions 2" in error
        await call(client, "notebook_delete", session_id=one)
        three = await call(client, "notebook_import", content="# Three\n", format="markdown")
        assert three["name"] == "Three"
        active = await session_list(client)
        assert [s["name"] for s in active] == ["Two", "Three"]
    # A new server: the sessions persist (on disk) and are suspended until used.
    async with profile_client("srcbook") as client:
        assert (await session_list(client)) == []
        suspended = await session_list(client, filter="suspended")
        names = {s["name"]: s for s in suspended}
        assert sorted(names) == ["Three", "Two"]
        assert names["Two"]["tsconfig"] == {"strict": True}
        assert names["Two"]["description"] == "d"
        await call(client, "cell_add", session_id=two["session_id"], content="1 + 1")
        resumed = await session_list(client)
        assert [s["session_id"] for s in resumed] == [two["session_id"]]
        assert len(await session_list(client, filter="all")) == 2
    # Plain notebooks under the root are not sessions.
    (root / "plain.ipynb").write_bytes(notebook_file(root, two["session_id"]).read_bytes())
    raw = json.loads((root / "plain.ipynb").read_text())
    del raw["metadata"]["srcbook"]
    (root / "plain.ipynb").write_text(json.dumps(raw))
    async with profile_client("srcbook") as client:
        every = await session_list(client, filter="all")
        assert "plain" not in {s["session_id"] for s in every}
        assert "no session" in await call_error(client, "notebook_delete", session_id="plain")
    assert (root / "plain.ipynb").exists()


async def test_import_formats_and_python_sessions(kernel_client: ProfileClient) -> None:
    markdown = (
        "# Imported analysis\n\nSome prose.\n\n```typescript\nconst xs = [1, 2, 3];\n"
        "xs.reduce((a, b) => a + b, 0)\n```\n"
    )
    python = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Python session"),
            nbformat.v4.new_code_cell("rows = [{'q': 'Q1', 'v': 3}, {'q': 'Q2', 'v': 5}]\nrows"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    async with kernel_client("srcbook") as client:
        ts = await call(client, "notebook_import", content=markdown, format="markdown")
        assert (ts["name"], ts["kernel"], ts["language"]) == (
            "Imported analysis",
            "deno",
            "typescript",
        )
        assert ts["cell_count"] == 2
        summed = await call(client, "cell_execute", session_id=ts["session_id"], cell_id="all")
        assert summed["result"] == "6"

        py = await call(client, "notebook_import", content=nbformat.writes(python), format="ipynb")
        assert (py["name"], py["kernel"], py["language"]) == (
            "Python session",
            "python3",
            "python",
        )
        ran = await call(client, "cell_execute", session_id=py["session_id"], cell_id="all")
        assert ran["status"] == "ok"
        assert "Q2" in ran["result"]
        cell = ran["cells"][0]["cell_id"]
        table = await call(
            client, "cell_visualize", session_id=py["session_id"], cell_id=cell, type="table"
        )
        assert table["columns"] == ["q", "v"]
        assert table["rows"] == [["Q1", 3], ["Q2", 5]]
        pdf = await client.call_tool(
            "notebook_export", {"session_id": py["session_id"], "format": "pdf"}
        )
        blobs = [b for b in pdf.content if isinstance(b, EmbeddedResource)]
        assert len(blobs) == 1
        assert base64.b64decode(blobs[0].resource.blob).startswith(b"%PDF")  # type: ignore[union-attr]
        html = await call(client, "notebook_export", session_id=py["session_id"], format="html")
        assert "Q2" in html["content"]


@pytest.fixture
async def modern(root: Path, tmp_path: Path) -> AsyncIterator[Client]:
    """A client on the current protocol (subscriptions/listen)."""
    settings = Settings(root=root, profile="srcbook", lock_dir=tmp_path / "locks", kernel_pool=0)
    async with Client(build_server(settings), mode="auto") as client:
        yield client


async def test_state_listeners_hear_of_changes(modern: Client, root: Path) -> None:
    session_id = (await call(modern, "notebook_create", name="Watched"))["session_id"]
    state = f"notebook://session/{session_id}/state"
    history = f"notebook://session/{session_id}/history"
    # entering waits for the server's acknowledgement, sent once the feed has its baseline
    async with modern.listen(resource_subscriptions=[state, history]) as sub:
        # A change made outside nbrelay (a person's editor) is reported too.
        raw = json.loads(notebook_file(root, session_id).read_text())
        raw["cells"].append({"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "note"})
        notebook_file(root, session_id).write_text(json.dumps(raw, indent=1))
        seen: set[str] = set()
        with anyio.fail_after(PATIENCE):
            async for event in sub:
                assert isinstance(event, ResourceUpdated)
                seen.add(event.uri)
                if {state, history} <= seen:
                    break
    view = json.loads((await modern.read_resource(state)).contents[0].text)  # type: ignore[union-attr]
    assert view["cells"][0]["content"] == "note"
    assert "no session has id" in str(
        await _resource_error(modern, "notebook://session/missing-000000/state")
    )


async def _resource_error(client: Client, uri: str) -> Exception:
    try:
        await client.read_resource(uri)
    except Exception as exc:  # the client raises the server's resource error
        return exc
    raise AssertionError(f"{uri} was read")


async def test_each_session_has_its_own_folder_and_older_sessions_are_still_found(
    profile_client: ProfileClient, root: Path
) -> None:
    """A session lives in a working folder of its own (``<id>/<id>.ipynb``), which
    notebook_delete removes with what the cells left there; a session kept in the root, as
    sessions were before they had folders, is still listed, used and deleted."""
    async with profile_client("srcbook") as client:
        new = await call(client, "notebook_create", name="Foldered")
        old = await call(client, "notebook_create", name="Older")
    assert new["path"] == f"{new['session_id']}/{new['session_id']}.ipynb"
    (root / new["session_id"] / "scratch.tmp").write_text("left by a cell")
    moved = root / f"{old['session_id']}.ipynb"
    notebook_file(root, old["session_id"]).rename(moved)
    (root / old["session_id"]).rmdir()
    async with profile_client("srcbook") as client:
        listed = await session_list(client, filter="all")
        assert {s["session_id"]: s["path"] for s in listed} == {
            new["session_id"]: new["path"],
            old["session_id"]: moved.name,
        }
        await call(client, "cell_add", session_id=old["session_id"], content="1")
        assert len(parse(moved.read_bytes()).cells) == 1
        for session in (new, old):
            await call(client, "notebook_delete", session_id=session["session_id"])
        assert await session_list(client, filter="all") == []
    assert sorted(root.iterdir()) == []


async def test_session_ids_are_never_paths(tmp_path: Path) -> None:
    """Session ids name files under the root: the security suite's attack paths, given as a
    session id to every tool and resource that takes one, are all refused and leak nothing."""
    from tests.security.surface import connect, everything_said
    from tests.security.test_paths import attacks, make_layout

    layout = make_layout(tmp_path / "attack")
    before = layout.outside_digest()
    calls = 0
    async with connect("srcbook", layout.root, layout.locks, kernel_pool=0) as client:
        tools = [
            t
            for t in (await client.list_tools()).tools
            if "session_id" in t.input_schema["properties"]
        ]
        assert len(tools) == 7
        for attack in attacks(layout):
            for tool in tools:
                args = {"session_id": attack, "cell_id": "0", "content": "x"}
                wanted = {k: v for k, v in args.items() if k in tool.input_schema["properties"]}
                result = await client.call_tool(tool.name, wanted)
                said = everything_said(result)
                assert result.is_error, (tool.name, attack)
                assert not [c for c in layout.canaries if c in said], (tool.name, attack)
                calls += 1
            for template in (STATE, HISTORY, EVENTS):
                with pytest.raises(
                    Exception, match=r"not a session id|no session|Unknown resource"
                ):
                    await client.read_resource(template.format(attack.replace("/", "%2F")))
    assert calls >= 7 * 40
    assert layout.outside_digest() == before


async def test_live_mode_sessions_on_a_jupyter_server(
    live_client: tuple[ProfileClient, Path], jupyter: JupyterServer
) -> None:
    """Live mode: sessions are notebooks of the Jupyter Server (its rooms and kernels). The
    test server has no Deno kernelspec, so code runs in an imported Python session there."""
    open_client, local = live_client
    python = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# Remote"), nbformat.v4.new_code_cell("6 * 7")],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    async with open_client("srcbook") as client:
        ts = await call(client, "notebook_create", name="Live TS")
        added = await call(client, "cell_add", session_id=ts["session_id"], content="1 + 1")
        async with person(jupyter, f"{local.name}/{ts['session_id']}.ipynb") as p:
            # A new session has no cells (as in file mode): the agent's is the first.
            assert p.ids() == [added["cell_id"]]
            assert p.sources() == ["1 + 1"]
            assert added["position"] == 0
        py = await call(client, "notebook_import", content=nbformat.writes(python))
        ran = await call(client, "cell_execute", session_id=py["session_id"], cell_id="all")
        assert (ran["status"], ran["result"]) == ("ok", "42")
        listed = await session_list(client)
        assert {s["name"] for s in listed} == {"Live TS", "Remote"}
        state = await client.read_resource(f"notebook://session/{py['session_id']}/state")
        view = json.loads(state.contents[0].text)  # type: ignore[union-attr]
        assert view["cells"][1]["outputs"][0]["text"] == "42"
        await call(client, "notebook_delete", session_id=ts["session_id"])
    await wait_for(lambda: not (local / f"{ts['session_id']}.ipynb").exists(), seconds=10)
    assert (local / f"{py['session_id']}.ipynb").exists()


async def test_typescript_runs_under_the_seeds_memory_limit(kernel_client: ProfileClient) -> None:
    """srcbook-mcp.json's default maxMemoryPerSession is "512MB": a Deno kernel must start under
    it, its V8 heap capped at that size (an address-space limit kept V8 from starting at all)."""
    async with kernel_client("srcbook", kernel_memory=512) as client:
        session_id = (await call(client, "notebook_create", name="Limited"))["session_id"]
        cell = await call(
            client,
            "cell_add",
            session_id=session_id,
            content='const v8 = await import("node:v8");\n'
            "Math.round(v8.getHeapStatistics().heap_size_limit / 2 ** 20)",
        )
        ran = await call(client, "cell_execute", session_id=session_id, cell_id=cell["cell_id"])
        assert ran["status"] == "ok", ran
        assert 512 <= int(ran["result"]) < 1024, ran["result"]


async def test_javascript_markdown_imports_run_and_errors_carry_text(
    kernel_client: ProfileClient,
) -> None:
    """Markdown with ```javascript blocks imports as working JavaScript cells; a cell that
    fails, even with an exception that has no message, reports its error in words, in the
    result and in the notebook.error event."""
    markdown = (
        "# Shapes\n\n```javascript\nconst sides = [3, 4, 5];\nsides.length\n```\n\n"
        "```javascript\nthrow new Error();\n```\n"
    )
    async with kernel_client("srcbook") as client:
        session = await call(client, "notebook_import", content=markdown, format="markdown")
        assert (session["language"], session["kernel"]) == ("javascript", "deno")
        events: list[dict[str, Any]] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if message:
                events.append(json.loads(message))

        ran = await client.call_tool(
            "cell_execute",
            {"session_id": session["session_id"], "cell_id": "all"},
            progress_callback=progress,
        )
        result = json.loads(text_of(ran))
        assert [c["status"] for c in result["cells"]] == ["ok", "error"]
        assert result["cells"][0]["result"] == "3"
        error = result["cells"][1]["error"]
        assert error["name"] == "Error"
        assert error["message"].strip()
        failed = [e for e in events if e["event"] == "notebook.error"]
        assert len(failed) == 1
        assert failed[0]["message"] == f"Error: {error['message']}"


async def test_a_javascript_block_in_a_typescript_markdown_import_runs(
    kernel_client: ProfileClient,
) -> None:
    """Markdown whose first block is ```typescript and a later one ```javascript (which jupytext
    makes a "%%javascript" cell) imports as a TypeScript session whose cells all run on Deno;
    a cell Deno's kernel refuses without saying anything (a %% cell magic) fails with words."""
    markdown = (
        "# Mixed\n\n```typescript\nconst n: number = 2;\n```\n\n"
        "```javascript\nconsole.log('javascript ran', n * 21);\n```\n"
    )
    async with kernel_client("srcbook") as client:
        session = await call(client, "notebook_import", content=markdown, format="markdown")
        assert (session["language"], session["kernel"]) == ("typescript", "deno")
        ran = await call(client, "cell_execute", session_id=session["session_id"], cell_id="all")
        assert [c["status"] for c in ran["cells"]] == ["ok", "ok"], ran
        assert ran["stdout"] == "javascript ran 42\n"
        events: list[dict[str, Any]] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if message:
                events.append(json.loads(message))

        cell = await call(
            client, "cell_add", session_id=session["session_id"], content="%%javascript\n1"
        )
        refused = await client.call_tool(
            "cell_execute",
            {"session_id": session["session_id"], "cell_id": cell["cell_id"]},
            progress_callback=progress,
        )
        failed = json.loads(text_of(refused))
        assert failed["status"] == "error", failed
        assert "cell magic" in failed["error"]["message"], failed
        said = [e["message"] for e in events if e["event"] == "notebook.error"]
        assert len(said) == 1, events
        assert "cell magic" in said[0], events


async def test_storage_directory_is_the_sessions_folder(tmp_path: Path) -> None:
    """`nbrelay serve --profile srcbook --config srcbook-mcp.json` with the seed's
    storageDirectory ("./notebook-sessions", relative to the file): sessions are kept there."""
    config = tmp_path / "srcbook-mcp.json"
    config.write_text(
        json.dumps({"options": {"storageDirectory": "./notebook-sessions", "maxSessions": 10}})
    )
    (tmp_path / "notebook-sessions").mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--profile", "srcbook", "--config", str(config)],
        cwd=str(tmp_path.parent),
    )
    async with Client(params) as client:
        made = await call(client, "notebook_create", name="Stored")
        listed = await session_list(client, filter="all")
    assert [s["session_id"] for s in listed] == [made["session_id"]]
    assert notebook_file(tmp_path / "notebook-sessions", made["session_id"]).exists()


# The specification's srcbook-mcp.json, verbatim.
SEED_CONFIG_TEXT = """{
  "name": "srcbook-notebook",
  "version": "1.0.0",
  "description": "Srcbook notebook execution for AI agents",
  "main": "./dist/mcp-server.js",
  "capabilities": {
    "tools": true,
    "resources": true,
    "events": true
  },
  "options": {
    "maxSessions": 10,
    "sessionTimeout": 3600000,
    "executionTimeout": 30000,
    "maxMemoryPerSession": "512MB",
    "allowNetworkAccess": false,
    "persistSessions": true,
    "storageDirectory": "./notebook-sessions"
  }
}
"""


async def test_the_seeds_configuration_starts_and_confines_typescript(tmp_path: Path) -> None:
    """`nbrelay serve --profile srcbook --config srcbook-mcp.json` with the specification's file
    as written: the sessions' folder it names is created, and a TypeScript cell is "sandboxed to
    notebook working directory" with "no access to parent directories": it cannot read
    /etc/hostname or a file next to the sessions' folder, and reads and writes inside it."""
    (tmp_path / "srcbook-mcp.json").write_text(SEED_CONFIG_TEXT)
    (tmp_path / "canary.txt").write_text("secret-canary")
    storage = tmp_path / "notebook-sessions"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--profile", "srcbook", "--config", "srcbook-mcp.json"],
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        session_id = (await call(client, "notebook_create", name="Seed"))["session_id"]
        assert storage.is_dir()
        for target in ("/etc/hostname", str(tmp_path / "canary.txt"), "../canary.txt"):
            denied = await _one_cell(client, session_id, f"Deno.readTextFileSync({target!r})")
            assert denied["status"] == "error", (target, denied)
            assert denied["error"]["name"] == "NotCapable", denied
            assert "only inside the session's folder" in denied["error"]["message"]
            assert "secret-canary" not in json.dumps(denied)
        inside = await _one_cell(
            client,
            session_id,
            'Deno.writeTextFileSync("note.txt", "kept"); Deno.readTextFileSync("note.txt")',
        )
        assert (inside["status"], inside["result"]) == ("ok", '"kept"'), inside
        offline = await _one_cell(client, session_id, 'await fetch("https://example.com/")')
        assert "network access is off" in offline["error"]["message"]
    assert [p.name for p in storage.glob("*/*.ipynb")] == [f"{session_id}.ipynb"]


async def _one_cell(client: Client, session_id: str, content: str) -> dict[str, Any]:
    """Add a cell to the session and run it; the execution result."""
    cell = await call(client, "cell_add", session_id=session_id, content=content)
    return await call(client, "cell_execute", session_id=session_id, cell_id=cell["cell_id"])


async def test_typescript_cells_are_sandboxed_by_denos_permissions(
    kernel_client: ProfileClient, root: Path, tmp_path: Path
) -> None:
    """Under --sandbox (srcbook-mcp.json "sandbox": true) a TypeScript cell reads and writes
    inside the session's folder only and has no network: Deno's own permission checks,
    answered by nbrelay, say so in a clear error (and bwrap hides the rest). The kernel's
    channels still work: it runs in a network namespace of its own, on loopback TCP."""
    canary = tmp_path / "canary.txt"
    canary.write_text("secret-canary")
    async with kernel_client("srcbook", sandbox=True) as client:
        session_id = (await call(client, "notebook_create", name="Boxed"))["session_id"]
        folder = root / session_id
        (folder / "data.txt").write_text("inside")
        other = (await call(client, "notebook_create", name="Neighbour"))["session_id"]
        (root / other / "theirs.txt").write_text("secret-canary")
        for target in (
            str(canary),
            "/etc/hostname",
            "../canary.txt",
            f"../{other}/theirs.txt",  # another session's folder
            f"../{other}/{other}.ipynb",
            str(root / other / "theirs.txt"),
        ):
            denied = await _one_cell(client, session_id, f"Deno.readTextFileSync({target!r})")
            assert denied["status"] == "error", target
            assert denied["error"]["name"] == "NotCapable", denied
            assert "only inside the session's folder" in denied["error"]["message"]
            assert str(folder) in denied["error"]["message"]
            assert "secret-canary" not in json.dumps(denied)
        written = await _one_cell(
            client,
            session_id,
            'Deno.writeTextFileSync("out.txt", "written by TS");\n'
            'Deno.readTextFileSync("data.txt") + " / " + Deno.readTextFileSync("./out.txt")',
        )
        assert (written["status"], written["result"]) == ("ok", '"inside / written by TS"')
        assert (folder / "out.txt").read_text() == "written by TS"
        escape = await _one_cell(client, session_id, 'Deno.writeTextFileSync("/tmp/x", "1")')
        assert "only inside the session's folder" in escape["error"]["message"]
        offline = await _one_cell(client, session_id, 'await fetch("https://example.com/")')
        assert offline["error"]["name"] == "NotCapable"
        assert "network access is off" in offline["error"]["message"]
        ran = await _one_cell(client, session_id, 'new Deno.Command("id").outputSync()')
        assert "run programs" in ran["error"]["message"]
        # Ending the session removes its folder with the files its cells left there.
        await call(client, "notebook_delete", session_id=session_id)
        assert not folder.exists()
        assert (root / other / "theirs.txt").exists()
    assert canary.read_text() == "secret-canary"


# A cell that reads "link" 20 at a time, 1,000 times, and counts what it got.
RACING_READS = """let leaked = 0, inside = 0, denied = 0, missing = 0; const other = new Set();
const one = async () => {
  try {
    const text = await Deno.readTextFile("link");
    if (text === "inside") inside++; else leaked++;
  } catch (e) {
    if (e.name === "NotCapable") denied++;
    else if (e.name === "NotFound") missing++;
    else other.add(e.name);
  }
};
for (let i = 0; i < 50; i++) await Promise.all(Array.from({length: 20}, one));
JSON.stringify({leaked, inside, denied, missing, other: [...other]})"""


@pytest.fixture
def swapper(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Starts a thread that swaps ``folder/link`` as fast as it can between a file inside the
    folder, links to /etc/passwd, /etc/hostname and a canary outside the root, and nothing
    (each swap an atomic rename, every third one after an unlink)."""
    (tmp_path / "canary.txt").write_text("secret-canary")
    targets: list[str | None] = ["/etc/passwd", None, str(tmp_path / "canary.txt"), "/etc/hostname"]
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def swap(folder: Path) -> None:
        link, spare = folder / "link", folder / "link.new"
        for turn in itertools.count():
            if stop.is_set():
                return
            target = targets[turn % len(targets)]
            with contextlib.suppress(OSError):
                if turn % 3 == 0:
                    link.unlink()
                if target is None:
                    spare.write_text("inside")
                else:
                    spare.symlink_to(target)
                spare.rename(link)

    def start(folder: Path) -> None:
        threads.append(threading.Thread(target=swap, args=(folder,), daemon=True))
        threads[-1].start()

    try:
        yield start
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


async def test_a_link_swapped_between_denos_check_and_its_open_reaches_nothing_outside(
    kernel_client: ProfileClient, root: Path, swapper: Callable[[Path], None]
) -> None:
    """Deno asks nbrelay's broker about a path, then opens the path again itself: a link swapped
    in between is opened as it is then. With the link swapped for real while a TypeScript cell
    reads it 1,000 times per round, no round reads /etc/passwd, /etc/hostname or a file outside
    the root (the mount namespace shows a Deno kernel the session's folder and only the system
    files it needs), and the kernel survives every round (a link replaced while the broker
    resolved it used to end the broker's connection, and Deno with it)."""
    async with kernel_client("srcbook", sandbox=True, kernel_network=False) as client:
        session_id = (await call(client, "notebook_create", name="Racing"))["session_id"]
        swapper(root / session_id)
        totals: dict[str, int] = {"leaked": 0, "inside": 0, "denied": 0}
        for _ in range(4):
            ran = await _one_cell(client, session_id, RACING_READS)
            assert ran["status"] == "ok", ran
            shown = ran["result"]  # Deno shows the string in single quotes
            assert shown[0] == shown[-1] == "'", shown
            counts = json.loads(shown[1:-1])
            assert counts["other"] == [], counts
            for key in totals:
                totals[key] += counts[key]
        assert totals["leaked"] == 0, totals
        assert totals["denied"] > 0, totals  # the race did run
        assert totals["inside"] > 0, totals


async def test_typescript_runs_without_network_outside_the_file_sandbox(
    kernel_client: ProfileClient, tmp_path: Path
) -> None:
    """The seed's allowNetworkAccess: false alone (--no-kernel-network): the Deno kernel starts
    (it did not before: it cannot use ZeroMQ's ipc transport), files are not confined, and
    every connection but its own channels is refused."""
    outside = tmp_path / "outside.txt"
    outside.write_text("readable")
    async with kernel_client("srcbook", kernel_network=False) as client:
        session_id = (await call(client, "notebook_create", name="Offline"))["session_id"]
        read = await _one_cell(client, session_id, f"Deno.readTextFileSync({str(outside)!r})")
        assert (read["status"], read["result"]) == ("ok", '"readable"')
        listen = await _one_cell(client, session_id, 'Deno.listen({hostname: "0.0.0.0", port: 0})')
        assert listen["error"]["name"] == "NotCapable"
        assert "network access is off" in listen["error"]["message"]


async def test_javascript_sessions_run_javascript(kernel_client: ProfileClient) -> None:
    """language "javascript" runs JavaScript: TypeScript syntax is a SyntaxError and nothing of
    the cell runs (Deno compiles every cell as TypeScript; nbrelay parses JS cells first)."""
    async with kernel_client("srcbook") as client:
        js = (await call(client, "notebook_create", name="Plain", language="javascript"))[
            "session_id"
        ]
        typed = await _one_cell(client, js, 'console.log("ran"); let b: number = 5; b')
        assert typed["status"] == "error"
        assert typed["error"]["name"] == "SyntaxError"
        assert typed["stdout"] == ""
        assert "not JavaScript" in typed["note"]
        plain = await _one_cell(client, js, "let c = 5; c * 2")
        assert (plain["status"], plain["result"]) == ("ok", "10")
        both = await call(client, "cell_execute", session_id=js, cell_id="all")
        assert both["status"] == "error"
        assert [c["cell_id"] for c in both["cells"]] == [typed["cell_id"]]  # the first bad one
        assert both["stdout"] == ""
        ts = (await call(client, "notebook_create", name="Typed"))["session_id"]
        accepted = await _one_cell(client, ts, "let b: number = 5; b")
        assert (accepted["status"], accepted["result"]) == ("ok", "5")


async def test_persisted_typescript_sessions_get_their_variables_back(
    kernel_client: ProfileClient,
) -> None:
    """persistSessions: a TypeScript session whose kernel stopped (here: the server restarted)
    runs its executed cells again, in execution order, before the cell asked for, and says so."""
    async with kernel_client("srcbook", persist_sessions=True) as client:
        session_id = (await call(client, "notebook_create", name="Kept"))["session_id"]
        first = await _one_cell(client, session_id, "let total = 40;")
        await _one_cell(client, session_id, "total += 1;")
        again = first["cell_id"]
    async with kernel_client("srcbook", persist_sessions=True) as client:
        resumed = await _one_cell(client, session_id, "total + 1")
        assert (resumed["status"], resumed["result"]) == ("ok", "42")
        assert "2 executed cell(s) were run again" in resumed["note"]
        # A running kernel is not replayed again.
        twice = await call(client, "cell_execute", session_id=session_id, cell_id=again)
        assert "note" not in twice
    async with kernel_client("srcbook") as client:  # without persistSessions: nothing replayed
        lost = await _one_cell(client, session_id, "total")
        assert lost["error"]["name"] == "ReferenceError"


async def test_cell_visualize_with_the_documented_install(kernel_client: ProfileClient) -> None:
    """`pip install "nbrelay[deno]"` (the srcbook page's install) brings matplotlib: cell_visualize
    with its default type (auto) and with "chart" returns a PNG for a TypeScript result."""
    extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("matplotlib") for d in extras["deno"])
    assert 'pip install "nbrelay[deno]"' in Path("docs/profiles/srcbook.md").read_text()
    async with kernel_client("srcbook") as client:
        session_id = (await call(client, "notebook_create", name="Charts"))["session_id"]
        shown = await _one_cell(client, session_id, SALES_DATA + "\nsalesData")
        for kind in (None, "chart"):
            args = {"session_id": session_id, "cell_id": shown["cell_id"]}
            drawn = await client.call_tool(
                "cell_visualize", args | ({"type": kind} if kind else {})
            )
            assert not drawn.is_error, text_of(drawn)
            images = [b for b in drawn.content if isinstance(b, ImageContent)]
            assert len(images) == 1, kind
            assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
            assert json.loads(text_of(drawn))["kind"] == "chart"


@pytest.fixture
def web() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 (its port) answering "hello from <path>"."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello from {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_network_allow_and_deny_lists(kernel_client: ProfileClient, web: int) -> None:
    """srcbook-mcp.json networkAllowList / networkDenyList (--kernel-net-allow/-deny): Deno
    kernels reach exactly the hosts the lists allow, even with allowNetworkAccess: false; a
    Python session, which cannot be held to a list, gets no network at all."""
    fetch = "await (await fetch('http://{}/x')).text()"
    python = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import urllib.request\n"
                "try:\n"
                f"    print(urllib.request.urlopen('http://127.0.0.1:{web}/py', timeout=5).read())\n"
                "except OSError as exc:\n"
                "    print('offline', type(exc).__name__)"
            )
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    allowed = f"127.0.0.1:{web}"
    async with kernel_client(
        "srcbook", kernel_network=False, kernel_net_allow=(allowed,)
    ) as client:
        ts = (await call(client, "notebook_create", name="Listed"))["session_id"]
        ok = await _one_cell(client, ts, fetch.format(allowed))
        assert (ok["status"], ok["result"]) == ("ok", '"hello from /x"')
        other = await _one_cell(client, ts, fetch.format(f"localhost:{web}"))
        assert other["error"]["name"] == "NotCapable"
        assert "not on nbrelay's network allow list" in other["error"]["message"]
        py = await call(client, "notebook_import", content=nbformat.writes(python))
        ran = await call(client, "cell_execute", session_id=py["session_id"], cell_id="all")
        assert ran["stdout"].startswith("offline"), ran
    async with kernel_client("srcbook", kernel_net_deny=(allowed,)) as client:
        ts = (await call(client, "notebook_create", name="Denied"))["session_id"]
        denied = await _one_cell(client, ts, fetch.format(allowed))
        assert "on nbrelay's network deny list" in denied["error"]["message"]
        ok = await _one_cell(client, ts, fetch.format(f"localhost:{web}"))
        assert (ok["status"], ok["result"]) == ("ok", '"hello from /x"')
    for bad in ("not a host", "http://example.com", ""):
        with pytest.raises(InvalidArgument, match="is not a host"):
            build_server(Settings(root=Path("."), kernel_net_allow=(bad,)))


async def test_tsconfig_jsx_options_apply_to_the_sessions_kernel(
    kernel_client: ProfileClient,
) -> None:
    """Of a tsconfig, Deno's kernel honours the JSX transform (its REPL does not type-check):
    jsxFactory makes `<b>` call the session's own factory, and the result says which options
    apply; a session without them uses React's default (so `h` is never called)."""
    factory = "function h(tag, props, ...children) { return { tag, children }; }"
    tsconfig = {"compilerOptions": {"jsx": "react", "jsxFactory": "h", "strict": True}}
    async with kernel_client("srcbook") as client:
        made = await call(client, "notebook_create", name="JSX", tsconfig=tsconfig)
        assert "applies jsx, jsxFactory" in made["note"]
        assert "these change nothing: strict" in made["note"]
        await _one_cell(client, made["session_id"], factory)
        tag = await _one_cell(client, made["session_id"], "JSON.stringify(<b>hi</b>)")
        assert (tag["status"], tag["result"]) == ("ok", '\'{"tag":"b","children":["hi"]}\'')
        plain = (await call(client, "notebook_create", name="No JSX options"))["session_id"]
        await _one_cell(client, plain, factory)
        react = await _one_cell(client, plain, "JSON.stringify(<b>hi</b>)")
        assert react["error"]["name"] == "ReferenceError"
        assert "React" in react["error"]["message"]
        bad = await call_error(
            client, "notebook_create", name="Bad", tsconfig={"jsxFactory": "h */ evil()"}
        )
        assert "is not a name or module specifier" in bad


async def test_events_stream_to_subscribers_outside_cell_execute(
    kernel_client: ProfileClient,
) -> None:
    """The specification's event stream outside cell_execute's own progress notifications:
    notebook://session/{id}/events holds the session's events in order, and a listener on its
    own stream hears of each new one (resource-updated) while a cell_execute runs."""
    async with kernel_client("srcbook") as runner:
        session_id = (await call(runner, "notebook_create", name="Streamed"))["session_id"]
        cell = await call(runner, "cell_add", session_id=session_id, content="console.log('hi')")
        uri = f"notebook://session/{session_id}/events"
        async with (
            runner.listen(resource_subscriptions=[uri]) as sub,
            anyio.create_task_group() as tg,
        ):
            run = functools.partial(call, runner, "cell_execute", cell_id="all")
            tg.start_soon(functools.partial(run, session_id=session_id))
            heard: list[str] = []
            with anyio.fail_after(PATIENCE):
                async for event in sub:
                    assert isinstance(event, ResourceUpdated)
                    assert event.uri == uri
                    log = json.loads((await runner.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
                    heard = [e["event"] for e in log["events"]]
                    if "notebook.cell.completed" in heard[-2:-1]:
                        break
        assert heard == [
            "notebook.state.changed",  # notebook_create
            "notebook.state.changed",  # cell_add
            "notebook.cell.executing",
            "notebook.cell.output",
            "notebook.cell.completed",
            "notebook.state.changed",
        ]
        seqs = [e["seq"] for e in log["events"]]
        assert seqs == sorted(seqs)
        assert log["events"][3]["text"] == "hi\n"
        assert log["events"][2]["cell_id"] == cell["cell_id"]


async def test_event_stream_for_clients_on_older_protocols(root: Path, tmp_path: Path) -> None:
    """resources/subscribe (protocols before subscriptions/listen) to the event log: each event
    is announced with its name and number in the notification's _meta."""
    heard: list[ResourceUpdatedNotification] = []
    got = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message)
            got.set()

    settings = Settings(root=root, profile="srcbook", lock_dir=tmp_path / "locks", kernel_pool=0)
    async with Client(build_server(settings), mode="legacy", message_handler=on_message) as c:
        session_id = (await call(c, "notebook_create", name="Old client"))["session_id"]
        uri = f"notebook://session/{session_id}/events"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await c.subscribe_resource(uri)
        await call(c, "cell_add", session_id=session_id, content="1")
        with anyio.fail_after(PATIENCE):
            await got.wait()
        change = (heard[0].params.meta or {})["nbrelay/change"]
        assert heard[0].params.uri == uri
        assert change["event"] == "notebook.state.changed"
        log = json.loads((await c.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
        assert [e["seq"] for e in log["events"]][-1] == change["seq"]
