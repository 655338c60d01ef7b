"""Profile jupyterlab-rtc: the seed's exact tools, range-based cells, sessions and documents."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from nbrelay.notebook.model import new_cell, new_notebook, parse
from tests.helpers import call_error, notebook, text_of, write_notebook
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

# Transcribed from the seed: name -> (first line of the description,
#   {parameter: (JSON type, required, default)}); `...` means "no default".
SEED_TOOLS: dict[str, tuple[str, dict[str, tuple[Any, bool, Any]]]] = {
    "begin_nb_session": (
        "Begin a real-time collaboration session for a notebook.",
        {"path": ("string", True, ...)},
    ),
    "end_nb_session": (
        "End a real-time collaboration session for a notebook.",
        {"path": ("string", True, ...)},
    ),
    "query_nb_sessions": (
        "Query the status of real-time collaboration sessions for notebooks in a directory.",
        {"root_path": ("string", False, ...)},
    ),
    "list_nbs": (
        "List all notebook files under a specified directory, recursively.",
        {"path": ("string", False, ...)},
    ),
    "get_nb_stat": (
        "Get status information about a notebook, including cell count and kernel information.",
        {"path": ("string", True, ...)},
    ),
    "read_nb_cells": (
        "Read multiple cells by specifying ranges.",
        {"path": ("string", True, ...), "ranges": ("array", False, ...)},
    ),
    "modify_nb_cells": (
        "Modify multiple cells by specifying ranges, with optional execution.",
        {
            "path": ("string", True, ...),
            "modifications": ("array", True, ...),
            "exec": ("boolean", False, True),
        },
    ),
    "insert_nb_cells": (
        "Insert multiple cells at a specified location, with optional execution.",
        {
            "path": ("string", True, ...),
            "position": ("integer", True, ...),
            "cells": ("array", True, ...),
            "exec": ("boolean", False, True),
        },
    ),
    "delete_nb_cells": (
        "Delete multiple cells by specifying ranges.",
        {"path": ("string", True, ...), "ranges": ("array", True, ...)},
    ),
    "restart_nb_kernel": (
        "Restart the kernel of a specified notebook, with options to clear contents and execute cells.",
        {
            "path": ("string", True, ...),
            "clear_contents": ("boolean", False, False),
            "exec": ("boolean", False, True),
        },
    ),
    "list_documents": (
        "List available documents in JupyterLab from a specified path.",
        {"path": ("string", False, ...)},
    ),
    "create_document": (
        "Create a new document in JupyterLab.",
        {
            "path": ("string", True, ...),
            "type": ("string", False, "notebook"),
            "content": ("string", False, ...),
        },
    ),
    "get_document_info": ("Get information about a document.", {"path": ("string", True, ...)}),
    "delete_document": ("Delete a document in JupyterLab.", {"path": ("string", True, ...)}),
    "rename_document": (
        "Rename a document in JupyterLab.",
        {"path": ("string", True, ...), "newPath": ("string", True, ...)},
    ),
    "copy_document": (
        "Copy a document in JupyterLab.",
        {"path": ("string", True, ...), "copyPath": ("string", True, ...)},
    ),
    "document_exists": (
        "Check if a document exists in JupyterLab.",
        {"path": ("string", True, ...)},
    ),
}
# The array items, also from the seed: {field: (JSON type, required, default)}.
RANGE = {"start": ("integer", True, ...), "end": ("integer", False, ...)}
SEED_ITEMS: dict[tuple[str, str], dict[str, tuple[Any, bool, Any]]] = {
    ("read_nb_cells", "ranges"): RANGE,
    ("delete_nb_cells", "ranges"): RANGE,
    ("modify_nb_cells", "modifications"): {
        "range": ("object", True, ...),
        "content": ("string", True, ...),
    },
    ("insert_nb_cells", "cells"): {
        "type": ("string", False, "code"),
        "content": ("string", True, ...),
    },
}


def _deref(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    found = schema["$defs"][ref.rsplit("/", 1)[1]]
    return {**found, **{k: v for k, v in node.items() if k != "$ref"}}


def _check_object(
    schema: dict[str, Any], obj: dict[str, Any], params: dict[str, tuple[Any, bool, Any]]
) -> None:
    obj = _deref(schema, obj)
    assert sorted(obj["properties"]) == sorted(params)
    assert sorted(obj.get("required", [])) == sorted(p for p, (_, r, _) in params.items() if r)
    for name, (kind, _, default) in params.items():
        prop = _deref(schema, obj["properties"][name])
        assert prop.get("type", "object" if "properties" in prop else None) == kind, name
        if default is ...:
            assert "default" not in prop, name
        else:
            assert prop["default"] == default, name


async def rcall(client: Client, tool: str, **args: Any) -> Any:
    """Call a tool; return the JSON value of its text, checking the structured content agrees."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    first = result.content[0]
    assert isinstance(first, TextContent)
    if tool in ("modify_nb_cells", "delete_nb_cells"):
        # The original's plain message as text; the counts (and the run) in structured content.
        assert isinstance(result.structured_content, dict)
        assert first.text == result.structured_content["message"]
        return result.structured_content
    value = json.loads(text_of(result))
    expected = value if isinstance(value, dict) else {"result": value}
    assert result.structured_content == expected
    return value


ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _cells(n: int, prefix: str) -> Any:
    return new_notebook(
        [new_cell("code", f"{prefix}_{i} = {i}", f"{prefix}-{i}") for i in range(n)]
    )


async def test_tools_list_matches_the_seed_exactly(profile_client: ProfileClient) -> None:
    async with profile_client("jupyterlab-rtc") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(SEED_TOOLS)
    for name, (first_line, params) in SEED_TOOLS.items():
        tool = tools[name]
        assert (tool.description or "").splitlines()[0] == first_line
        _check_object(tool.input_schema, tool.input_schema, params)
    for (name, param), fields in SEED_ITEMS.items():
        schema = tools[name].input_schema
        _check_object(schema, schema["properties"][param]["items"], fields)
    modify = tools["modify_nb_cells"].input_schema
    item = _deref(modify, modify["properties"]["modifications"]["items"])
    _check_object(modify, item["properties"]["range"], RANGE)
    insert = tools["insert_nb_cells"].input_schema
    cell = _deref(insert, insert["properties"]["cells"]["items"])
    assert cell["properties"]["type"]["enum"] == ["code", "markdown"]
    create = tools["create_document"].input_schema
    assert create["properties"]["type"]["enum"] == ["notebook", "file", "markdown"]
    # What a client may auto-approve: reads are read-only; tools that run code by default
    # (exec=true) are not announced as harmless edits.
    hints = {n: t.annotations for n, t in tools.items()}
    reads = {n for n, h in hints.items() if h is not None and h.read_only_hint}
    assert reads == {
        "query_nb_sessions",
        "list_nbs",
        "get_nb_stat",
        "read_nb_cells",
        "list_documents",
        "get_document_info",
        "document_exists",
    }
    for name in ("modify_nb_cells", "insert_nb_cells", "restart_nb_kernel"):
        found = hints[name]
        assert found is not None
        assert found.destructive_hint is None, name
        assert found.open_world_hint is None, name


async def test_the_seed_examples(kernel_client: ProfileClient, root: Path) -> None:
    """Every JSON example of the seed, reproduced: sessions, list_nbs, get_nb_stat,
    read_nb_cells, list_documents, get_document_info (paths written with a leading /)."""
    write_notebook(root / "example" / "notebook1.ipynb", _cells(5, "a"))
    write_notebook(root / "example" / "notebook2.ipynb", _cells(3, "b"))
    hello = new_notebook([new_cell("code", "print('Hello, World!')", "cell-1")])
    write_notebook(root / "example" / "hello.ipynb", hello)
    (root / "example" / "document.md").write_text("# Document Content")
    async with kernel_client("jupyterlab-rtc") as client:
        begun = await rcall(client, "begin_nb_session", path="/example/notebook1.ipynb")
        assert set(begun) == {"path", "session_id", "file_id", "status", "message", "kernel"}
        assert begun["path"] == "/example/notebook1.ipynb"
        assert begun["status"] == "connected"
        assert begun["message"].startswith("Session started successfully")
        assert begun["session_id"]
        assert begun["file_id"]
        assert begun["kernel"]["name"] == "python3"
        await rcall(client, "begin_nb_session", path="/example/notebook2.ipynb")
        ended = await rcall(client, "end_nb_session", path="/example/notebook2.ipynb")
        assert ended == {
            "path": "/example/notebook2.ipynb",
            "status": "disconnected",
            "message": "Session ended successfully",
        }
        again = await rcall(client, "end_nb_session", path="/example/notebook2.ipynb")
        assert again["status"] == "not_found"

        sessions = await rcall(client, "query_nb_sessions", root_path="/example")
        assert sessions["root_path"] == "/example"
        assert sessions["total_sessions"] == 2
        assert sessions["active_sessions"] == 1
        one, two = sessions["sessions"]
        assert set(one) == {
            "path",
            "session_id",
            "file_id",
            "status",
            "cell_count",
            "last_activity",
            "message",
        }
        assert (one["path"], one["status"], one["cell_count"]) == (
            "/example/notebook1.ipynb",
            "connected",
            5,
        )
        assert (one["session_id"], one["file_id"]) == (begun["session_id"], begun["file_id"])
        assert one["message"] == "Session is active"
        assert ISO.match(one["last_activity"])
        assert (two["path"], two["status"], two["cell_count"]) == (
            "/example/notebook2.ipynb",
            "disconnected",
            3,
        )
        assert two["message"] == "Session ended"
        elsewhere = await rcall(client, "query_nb_sessions", root_path="/")
        assert elsewhere["total_sessions"] == 2

        listed = await rcall(client, "list_nbs", path="/example")
        assert [n["path"] for n in listed["notebooks"]] == [
            "/example/hello.ipynb",
            "/example/notebook1.ipynb",
            "/example/notebook2.ipynb",
        ]
        assert listed["notebooks"][1]["name"] == "notebook1.ipynb"
        assert ISO.match(listed["notebooks"][1]["last_modified"])
        # Paths come back in the caller's style: relative when asked relative.
        plain = await rcall(client, "list_nbs", path="example")
        assert [n["path"] for n in plain["notebooks"]] == [
            "example/hello.ipynb",
            "example/notebook1.ipynb",
            "example/notebook2.ipynb",
        ]

        stat = await rcall(client, "get_nb_stat", path="/example/notebook1.ipynb")
        assert stat["path"] == "/example/notebook1.ipynb"
        assert stat["cell_count"] == 5
        assert ISO.match(stat["last_modified"])
        assert stat["kernel"]["name"] == "python3"
        assert stat["kernel"]["id"] == begun["session_id"]
        assert stat["kernel"]["state"] in ("idle", "busy", "starting")
        idle = await rcall(client, "get_nb_stat", path="example/hello.ipynb")
        assert idle["kernel"] == {"name": "none", "id": "", "state": "not running"}

        read = await rcall(client, "read_nb_cells", path="/example/hello.ipynb")
        assert read == {
            "cells": [
                {
                    "index": 0,
                    "id": "cell-1",
                    "content": "print('Hello, World!')",
                    "type": "code",
                    # A code cell never run: both fields there, as the original gives them.
                    "execution_count": None,
                    "outputs": [],
                }
            ]
        }

        docs = await rcall(client, "list_documents", path="/example")
        assert [d["name"] for d in docs] == [
            "document.md",
            "hello.ipynb",
            "notebook1.ipynb",
            "notebook2.ipynb",
        ]
        md = docs[0]
        assert set(md) == {
            "name",
            "path",
            "type",
            "created",
            "last_modified",
            "size",
            "writable",
        }
        assert (md["path"], md["type"], md["size"], md["writable"]) == (
            "/example/document.md",
            "file",
            18,
            True,
        )
        assert ISO.match(md["created"])
        assert docs[1]["type"] == "notebook"
        top = await rcall(client, "list_documents")
        assert [(d["name"], d["type"], d["size"]) for d in top] == [("example", "directory", None)]

        info = await rcall(client, "get_document_info", path="/example/document.md")
        assert info == {
            "name": "document.md",
            "path": "/example/document.md",
            "type": "file",
            "format": "text",
            "created": md["created"],
            "last_modified": md["last_modified"],
            "size": 18,
            "writable": True,
            "mimetype": "text/markdown",
            "content": "# Document Content",
        }
        assert await rcall(client, "document_exists", path="/example/document.md") == {
            "exists": True
        }
        assert await rcall(client, "document_exists", path="example/nothing.md") == {
            "exists": False
        }


def _outputs_text(cell: dict[str, Any]) -> str:
    """A read cell's outputs as text: they come in the notebook's shape (``output_type``)."""
    parts = []
    for o in cell.get("outputs") or []:
        assert "output_type" in o, o
        parts.append(
            o.get("text")
            or o.get("data", {}).get("text/plain")
            or "\n".join(o.get("traceback", []))
        )
    return "".join(parts)


async def test_agent_workflow_on_a_real_kernel(kernel_client: ProfileClient, root: Path) -> None:
    """An agent sets up an analysis notebook, runs it, fixes a cell, restarts and re-runs it,
    tidies up, and manages the files around it."""
    (root / "data").mkdir()
    (root / "data" / "sales.csv").write_text("q,sales\nQ1,10\nQ2,20\nQ3,30\n")
    async with kernel_client("jupyterlab-rtc") as client:
        made = await rcall(client, "create_document", path="analysis/sales", type="notebook")
        assert made == {
            "message": "Document analysis/sales.ipynb created successfully",
            "path": "analysis/sales.ipynb",
        }
        nb = "/analysis/sales.ipynb"
        session = await rcall(client, "begin_nb_session", path=nb)
        assert session["status"] == "connected"

        inserted = await rcall(
            client,
            "insert_nb_cells",
            path=nb,
            position=0,
            cells=[
                {"type": "markdown", "content": "# Quarterly sales"},
                {"content": "import csv\nrows = list(csv.DictReader(open('../data/sales.csv')))"},
                {"content": "total = sum(int(r['sales']) for r in rows)\nprint('total', total)"},
            ],
        )
        assert inserted["message"] == ("Successfully inserted 3 cells and executed them (done)")
        assert len(inserted["cell_ids"]) == 3
        assert inserted["executed"] is True
        run = inserted["execution"]["cells"]
        assert [c["status"] for c in run] == ["ok", "ok"]
        assert run[1]["outputs"][0]["text"] == "total 60\n"

        read = await rcall(client, "read_nb_cells", path=nb, ranges=[{"start": 1, "end": 3}])
        assert [c["index"] for c in read["cells"]] == [1, 2]
        assert read["cells"][1]["id"] == inserted["cell_ids"][2]
        assert _outputs_text(read["cells"][1]) == "total 60\n"
        assert read["cells"][1]["execution_count"] == 2

        modified = await rcall(
            client,
            "modify_nb_cells",
            path=nb,
            modifications=[
                {
                    "range": {"start": 2},
                    "content": "total = sum(int(r['sales']) for r in rows)\nprint('mean', total / len(rows))",
                }
            ],
        )
        assert modified["modified_ranges"] == 1
        assert modified["executed"] is True
        assert modified["execution"]["cells"][0]["outputs"][0]["text"] == "mean 20.0\n"

        appended = await rcall(
            client,
            "insert_nb_cells",
            path=nb,
            position=3,
            cells=[{"content": "print(undefined_name)"}, {"content": "print('never')"}],
            exec=False,
        )
        assert "executed" not in appended
        assert appended["message"] == "Successfully inserted 2 cells"

        restarted = await rcall(
            client, "restart_nb_kernel", path=nb, clear_contents=True, exec=True
        )
        assert restarted["cleared"] is True
        assert restarted["executed"] is True
        statuses = [c["status"] for c in restarted["execution"]["cells"]]
        assert statuses[:3] == ["ok", "ok", "error"], statuses
        assert "NameError" in restarted["execution"]["cells"][2]["outputs"][0]["text"]

        deleted = await rcall(client, "delete_nb_cells", path=nb, ranges=[{"start": 3, "end": 5}])
        assert deleted == {"message": "Successfully deleted 2 cells", "deleted": 2}
        stat = await rcall(client, "get_nb_stat", path=nb)
        assert stat["cell_count"] == 3
        assert stat["kernel"]["state"] == "idle"

        ended = await rcall(client, "end_nb_session", path=nb)
        assert ended["status"] == "disconnected"
        assert (await rcall(client, "get_nb_stat", path=nb))["kernel"]["state"] == "not running"

        copied = await rcall(
            client, "copy_document", path=nb, copyPath="/analysis/sales-backup.ipynb"
        )
        assert copied["path"] == "/analysis/sales-backup.ipynb"
        renamed = await rcall(
            client, "rename_document", path="data/sales.csv", newPath="analysis/sales.csv"
        )
        assert renamed == {
            "message": "Document renamed from data/sales.csv to analysis/sales.csv",
            "path": "analysis/sales.csv",
        }
        note = await rcall(
            client, "create_document", path="analysis/README", type="markdown", content="Notes"
        )
        assert note["path"] == "analysis/README.md"
        assert (await rcall(client, "delete_document", path="/data"))["path"] == "/data"
        listing = await rcall(client, "list_documents", path="analysis")
        assert [d["name"] for d in listing] == [
            "README.md",
            "sales-backup.ipynb",
            "sales.csv",
            "sales.ipynb",
        ]
        info = await rcall(client, "get_document_info", path="analysis/sales.ipynb")
        assert info["format"] == "json"
        assert [c["cell_type"] for c in info["content"]["cells"]] == ["markdown", "code", "code"]
        await rcall(client, "delete_document", path="analysis/sales-backup.ipynb")
        assert not (await rcall(client, "document_exists", path="analysis/sales-backup.ipynb"))[
            "exists"
        ]

    saved = nbformat.read(root / "analysis" / "sales.ipynb", as_version=4)
    nbformat.validate(saved)
    assert [c.cell_type for c in saved.cells] == ["markdown", "code", "code"]
    assert saved.cells[2].outputs[0]["text"] == "mean 20.0\n"
    assert (root / "analysis" / "README.md").read_text() == "Notes"
    assert not (root / "data").exists()


async def test_ranges_are_checked_before_anything_changes(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b", "c"))
    raw = (root / "n.ipynb").read_bytes()
    async with profile_client("jupyterlab-rtc") as client:
        error = await call_error(
            client,
            "modify_nb_cells",
            path="n.ipynb",
            modifications=[
                {"range": {"start": 0}, "content": "x"},
                {"range": {"start": 2, "end": 9}, "content": "y"},
            ],
            exec=False,
        )
        assert "reaches outside the notebook" in error
        error = await call_error(client, "delete_nb_cells", path="n.ipynb", ranges=[{"start": 3}])
        assert "reaches outside the notebook" in error
        error = await call_error(client, "delete_nb_cells", path="n.ipynb", ranges=[{"start": 4}])
        assert "reaches outside the notebook" in error
        error = await call_error(
            client, "delete_nb_cells", path="n.ipynb", ranges=[{"start": 2, "end": 1}]
        )
        assert "selects no cells" in error
        error = await call_error(
            client, "insert_nb_cells", path="n.ipynb", position=7, cells=[{"content": "z"}]
        )
        assert "3 cells" in error
        assert (root / "n.ipynb").read_bytes() == raw
        # Reading clamps the end: "to the end" is never an error.
        read = await rcall(
            client, "read_nb_cells", path="n.ipynb", ranges=[{"start": 1, "end": 99}]
        )
        assert [c["content"] for c in read["cells"]] == ["b", "c"]
        # Several ranges in one call: every cell in a range gets the content, in one edit.
        done = await rcall(
            client,
            "modify_nb_cells",
            path="n.ipynb",
            modifications=[
                {"range": {"start": 0, "end": 2}, "content": "same"},
                {"range": {"start": 2}, "content": "last"},
            ],
            exec=False,
        )
        assert done == {"message": "Successfully modified 2 cell ranges", "modified_ranges": 2}
    assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == [
        "same",
        "same",
        "last",
    ]


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("get_nb_stat", {"path": "../outside.ipynb"}, "contains '..'"),
        ("read_nb_cells", {"path": ".hidden/n.ipynb"}, "hidden"),
        ("get_document_info", {"path": "/etc/passwd"}, "does not exist"),
        ("get_document_info", {"path": "link/secret.txt"}, "outside the root"),
        ("document_exists", {"path": "../x.txt"}, "contains '..'"),
        ("list_documents", {"path": "../"}, "contains '..'"),
        ("create_document", {"path": "n.ipynb"}, "already exists"),
        ("create_document", {"path": "notes.txt", "type": "file"}, "already exists"),
        ("create_document", {"path": "bad.ipynb", "content": "{not json"}, "not valid JSON"),
        ("rename_document", {"path": "notes.txt", "newPath": "../notes.txt"}, "contains '..'"),
        ("rename_document", {"path": "notes.txt", "newPath": "n.ipynb"}, "already exists"),
        ("rename_document", {"path": "notes.txt", "newPath": "x.ipynb"}, "not valid JSON"),
        ("copy_document", {"path": "n.ipynb", "copyPath": "notes.txt"}, "already exists"),
        ("copy_document", {"path": "sub", "copyPath": "sub2"}, "is a folder"),
        ("delete_document", {"path": "sub"}, "is not empty"),
        ("delete_document", {"path": "link"}, "outside the root"),
        ("begin_nb_session", {"path": "notes.txt"}, "not a .ipynb file"),
    ],
)
async def test_bad_paths_and_input_change_nothing(
    profile_client: ProfileClient,
    root: Path,
    tmp_path: Path,
    tool: str,
    args: dict[str, Any],
    message: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "link").symlink_to(outside)
    write_notebook(root / "n.ipynb", notebook("a"))
    (root / "notes.txt").write_text("notes")
    (root / "sub").mkdir()
    (root / "sub" / "keep.txt").write_text("keep")
    before = sorted((p.relative_to(root), p.read_bytes()) for p in root.rglob("*") if p.is_file())
    async with profile_client("jupyterlab-rtc") as client:
        error = await call_error(client, tool, **args)
    assert message in error
    assert "secret" not in error.replace("secret.txt", "")
    after = sorted((p.relative_to(root), p.read_bytes()) for p in root.rglob("*") if p.is_file())
    assert after == before
    assert (outside / "secret.txt").read_text() == "secret"


async def test_no_execute_edits_without_running(profile_client: ProfileClient, root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("a = 1"))
    async with profile_client("jupyterlab-rtc", no_execute=True) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "restart_nb_kernel" not in listed
        insert_hints = listed["insert_nb_cells"].annotations
        assert insert_hints is not None
        assert insert_hints.destructive_hint is False
        done = await rcall(
            client, "insert_nb_cells", path="n.ipynb", position=1, cells=[{"content": "b = 2"}]
        )
        assert "executed" not in done
        assert "not executed: this server runs no code" in done["message"]
        begun = await rcall(client, "begin_nb_session", path="n.ipynb")
        assert "no kernel was started" in begun["message"]
        assert (await rcall(client, "get_nb_stat", path="n.ipynb"))["kernel"]["state"] == (
            "not running"
        )
    assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == ["a = 1", "b = 2"]


async def test_live_mode_sessions_are_rtc_rooms_a_person_sees(
    live_client: tuple[ProfileClient, Path], request: pytest.FixtureRequest
) -> None:
    """Against a real JupyterLab: the session is the notebook's room (its server file id), a
    person in the room sees the inserted cells and their outputs, and the document tools work
    through the contents API."""
    from tests.live.person import person, session
    from tests.live.server import wait_for

    open_client, local = live_client
    server = request.getfixturevalue("jupyter")
    write_notebook(local / "nb.ipynb", new_notebook([new_cell("code", "x = 20", "c0")]))
    server_path = f"{local.name}/nb.ipynb"
    async with open_client("jupyterlab-rtc") as client:
        begun = await rcall(client, "begin_nb_session", path="/nb.ipynb")
        assert begun["status"] == "connected"
        assert begun["message"] == "RTC session started successfully"
        assert begun["file_id"] == (await session(server, server_path))["fileId"]
        async with person(server, server_path) as someone:
            done = await rcall(
                client,
                "insert_nb_cells",
                path="nb.ipynb",
                position=1,
                cells=[
                    {"type": "markdown", "content": "Double it:"},
                    {"content": "y = 20\nprint(y * 2)"},
                ],
            )
            assert done["execution"]["cells"][0]["outputs"][0]["text"] == "40\n"
            await wait_for(
                lambda: someone.sources() == ["x = 20", "Double it:", "y = 20\nprint(y * 2)"],
                seconds=20,
            )
            await wait_for(lambda: len(someone.nb.ycells[2]["outputs"]) == 1, seconds=20)
        sessions = await rcall(client, "query_nb_sessions")
        assert [(s["path"], s["file_id"], s["status"]) for s in sessions["sessions"]] == [
            ("nb.ipynb", begun["file_id"], "connected")
        ]
        stat = await rcall(client, "get_nb_stat", path="nb.ipynb")
        assert stat["cell_count"] == 3
        assert ISO.match(stat["last_modified"])

        made = await rcall(
            client, "create_document", path="notes", type="markdown", content="# Notes"
        )
        assert made["path"] == "notes.md"
        copied = await rcall(client, "copy_document", path="notes.md", copyPath="old/notes.md")
        assert copied["path"] == "old/notes.md"
        await rcall(client, "rename_document", path="notes.md", newPath="README.md")
        info = await rcall(client, "get_document_info", path="README.md")
        assert (info["type"], info["format"], info["content"]) == ("file", "text", "# Notes")
        listed = await rcall(client, "list_documents")
        assert [(d["name"], d["type"]) for d in listed] == [
            ("README.md", "file"),
            ("nb.ipynb", "notebook"),
            ("old", "directory"),
        ]
        assert "not empty" in await call_error(client, "delete_document", path="old")
        await rcall(client, "delete_document", path="old/notes.md")
        await rcall(client, "delete_document", path="old")
        assert not (await rcall(client, "document_exists", path="old"))["exists"]
        ended = await rcall(client, "end_nb_session", path="nb.ipynb")
        assert ended["message"] == "RTC session ended successfully"
        # The kernel runs on after the room is left; the session is still reported ended.
        after = await rcall(client, "query_nb_sessions", root_path="/")
        assert [(s["path"], s["file_id"], s["status"]) for s in after["sessions"]] == [
            ("/nb.ipynb", begun["file_id"], "disconnected")
        ]
    assert (local / "README.md").read_text() == "# Notes"
    assert not (local / "old").exists()
    saved = nbformat.read(local / "nb.ipynb", as_version=4)
    assert [c.source for c in saved.cells] == ["x = 20", "Double it:", "y = 20\nprint(y * 2)"]


async def test_nbrelay_serve_over_stdio(root: Path) -> None:
    """`nbrelay serve --profile jupyterlab-rtc --root DIR`, driven by a real MCP client."""

    write_notebook(root / "n.ipynb", notebook("a = 1"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--profile", "jupyterlab-rtc", "--root", str(root)],
    )
    async with Client(params) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(SEED_TOOLS)
        read = await rcall(client, "read_nb_cells", path="/n.ipynb", ranges=[{"start": 0}])
        assert read["cells"][0]["content"] == "a = 1"
        await rcall(client, "create_document", path="t.txt", type="file", content="hi")
    assert (root / "t.txt").read_text() == "hi"


async def test_a_range_without_end_is_the_one_cell_at_start(
    profile_client: ProfileClient, root: Path
) -> None:
    """The seed's `end` is optional: without it a range is the one cell at `start`, for reading,
    modifying and deleting alike (the original: `end = start + 1`); a read past the end gives no
    cells, as the original's."""
    write_notebook(root / "n.ipynb", notebook("a", "b", "c", "d"))
    async with profile_client("jupyterlab-rtc") as client:
        read = await rcall(client, "read_nb_cells", path="/n.ipynb", ranges=[{"start": 1}])
        assert [c["content"] for c in read["cells"]] == ["b"]
        past = await rcall(client, "read_nb_cells", path="/n.ipynb", ranges=[{"start": 9}])
        assert past == {"cells": []}
        done = await client.call_tool(
            "modify_nb_cells",
            {
                "path": "/n.ipynb",
                "modifications": [{"range": {"start": 2}, "content": "z"}],
                "exec": False,
            },
        )
        assert text_of(done) == "Successfully modified 1 cell ranges"
        assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == [
            "a",
            "b",
            "z",
            "d",
        ]
        deleted = await client.call_tool(
            "delete_nb_cells", {"path": "/n.ipynb", "ranges": [{"start": 1}]}
        )
        assert text_of(deleted) == "Successfully deleted 1 cells"
    assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == ["a", "z", "d"]


async def test_an_ended_session_stays_ended_while_a_kernel_runs(
    kernel_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "n.ipynb", notebook("x = 1"))
    async with kernel_client("jupyterlab-rtc") as client:
        begun = await rcall(client, "begin_nb_session", path="n.ipynb")
        await rcall(client, "end_nb_session", path="n.ipynb")
        # Running a cell after the session ended starts a kernel again, without a session.
        ran = await rcall(
            client,
            "modify_nb_cells",
            path="n.ipynb",
            modifications=[{"range": {"start": 0}, "content": "x = 2"}],
        )
        assert ran["executed"] is True
        found = await rcall(client, "query_nb_sessions")
        assert [(s["path"], s["session_id"], s["status"]) for s in found["sessions"]] == [
            ("n.ipynb", begun["session_id"], "disconnected")
        ]
        assert found["active_sessions"] == 0
