"""Profile mcp-jupyter: the four consolidated tools of MCP Jupyter 2.0.2, its stale-state refusal,
package installs and notebook setup."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client, StdioServerParameters

from nbrelay.notebook.model import new_cell, new_notebook, parse, serialize
from tests.helpers import call_error, text_of, write_notebook
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

NULLABLE_NUMBER = ["integer", "number", "null"]
# Transcribed from block/mcp-jupyter 2.0.2 (server.py): {tool: {parameter: (JSON types, required,
# default)}}; `...` means no default.
SEED_TOOLS: dict[str, dict[str, tuple[Any, bool, Any]]] = {
    "query_notebook": {
        "notebook_path": ("string", True, ...),
        "query_type": ("string", True, ...),
        "execution_count": (["string", "integer", "number", "null"], False, None),
        "position_index": (NULLABLE_NUMBER, False, None),
        "cell_id": (["string", "null"], False, None),
        "server_url": (["string", "null"], False, None),
    },
    "modify_notebook_cells": {
        "notebook_path": ("string", True, ...),
        "operation": ("string", True, ...),
        "cell_content": (["string", "null"], False, None),
        "position_index": (NULLABLE_NUMBER, False, None),
        "execute": ("boolean", False, True),
    },
    "execute_notebook_code": {
        "notebook_path": ("string", True, ...),
        "execution_type": ("string", True, ...),
        "position_index": (NULLABLE_NUMBER, False, None),
        "package_names": (["string", "null"], False, None),
    },
    "setup_notebook": {
        "notebook_path": ("string", True, ...),
        "cells": (["array", "null"], False, None),
        "server_url": (["string", "null"], False, None),
    },
}
FIRST_LINES = {
    "query_notebook": "Query notebook information and metadata on the user-provided server.",
    "modify_notebook_cells": "Modify notebook cells (add, edit, delete) on the user-provided server.",
    "execute_notebook_code": "Execute code in a Jupyter notebook on the user-provided server.",
    "setup_notebook": "Prepare notebook for use and connect to the kernel on the user-provided server.",
}


def _types(prop: dict[str, Any]) -> Any:
    if "anyOf" in prop:
        return [s["type"] for s in prop["anyOf"]]
    return prop["type"]


async def mcall(client: Client, tool: str, **args: Any) -> Any:
    """Call a tool; return its value as the original returns it (a string stays text, anything
    else is JSON), checking that the structured content agrees."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    text = text_of(result)
    structured = result.structured_content
    assert isinstance(structured, dict)
    if isinstance(structured.get("result"), str) and len(structured) == 1:
        assert structured["result"] == text
        return text
    value = json.loads(text)
    # query_notebook and execute_notebook_code wrap every result (the original types them as a
    # union); the others send a dict as it is.
    wrapped = tool in ("query_notebook", "execute_notebook_code") or not isinstance(value, dict)
    assert structured == ({"result": value} if wrapped else value)
    return value


def _stream(result: dict[str, Any]) -> str:
    return "".join(o["text"] for o in result["outputs"] if o["output_type"] == "stream")


async def test_tools_list_matches_the_seed_exactly(profile_client: ProfileClient) -> None:
    async with profile_client("mcp-jupyter") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(SEED_TOOLS)
    for name, params in SEED_TOOLS.items():
        assert (tools[name].description or "").splitlines()[0] == FIRST_LINES[name]
        schema = tools[name].input_schema
        assert sorted(schema["properties"]) == sorted(params), name
        assert sorted(schema.get("required", [])) == sorted(
            p for p, (_, req, _) in params.items() if req
        )
        for param, (kind, _, default) in params.items():
            prop = schema["properties"][param]
            assert _types(prop) == kind, (name, param)
            if default is ...:
                assert "default" not in prop
            else:
                assert prop["default"] == default, (name, param)
    query = tools["query_notebook"].description or ""
    for query_type in ("view_source", "check_server", "list_sessions", "get_position_index"):
        assert (
            query_type
            in tools["query_notebook"].input_schema["properties"]["query_type"]["description"]
        )
    assert 'query_notebook("my_notebook.ipynb", "view_source", execution_count=3)' in query
    hints = {n: t.annotations for n, t in tools.items()}
    assert [n for n, h in hints.items() if h is not None and h.read_only_hint] == ["query_notebook"]
    for name in ("modify_notebook_cells", "execute_notebook_code"):
        found = hints[name]
        assert found is not None
        assert found.destructive_hint is None, name  # runs code: not announced as harmless


def _docstring_notebook(path: Path) -> None:
    """The notebook behind the examples of query_notebook's docstring."""
    cells = [
        new_cell("markdown", "# Report", "intro"),
        new_cell("code", "a = 1", "205658d6-093c-4722-854c-90b149f254ad"),
        new_cell("code", "b = 2", "c-two"),
        new_cell("code", "print(a + b)", "c-three"),
    ]
    cells[1]["execution_count"] = 3
    cells[2]["execution_count"] = 5
    cells[3]["execution_count"] = 6
    cells[3]["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": "3\n"},
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {
                "image/png": base64.b64encode(b"\x89PNG fake").decode(),
                "text/plain": "<Figure size 640x480 with 1 Axes>",
            },
        },
        {
            "output_type": "execute_result",
            "execution_count": 6,
            "metadata": {},
            "data": {"text/html": "<table><tr><td>Q1</td></tr></table>"},
        },
    ]
    write_notebook(path, new_notebook(cells))


async def test_the_query_examples(profile_client: ProfileClient, root: Path) -> None:
    """The examples of query_notebook's docstring, and check_server / list_sessions."""
    _docstring_notebook(root / "my_notebook.ipynb")
    async with profile_client("mcp-jupyter") as client:
        cells = await mcall(
            client, "query_notebook", notebook_path="my_notebook.ipynb", query_type="view_source"
        )
        assert [c["id"] for c in cells] == [
            "intro",
            "205658d6-093c-4722-854c-90b149f254ad",
            "c-two",
            "c-three",
        ]
        assert set(cells[1]) == {
            "cell_type",
            "execution_count",
            "id",
            "metadata",
            "outputs",
            "source",
        }
        figure, table = cells[3]["outputs"][1:]
        # view_source shows what formats an image or HTML output holds, as the original does
        assert figure["data"] == {"[filtered]": "Image data present (image/png, text/plain)"}
        assert table["data"] == {"[filtered]": "HTML data present (text/html)"}

        by_count = await mcall(
            client,
            "query_notebook",
            notebook_path="my_notebook.ipynb",
            query_type="view_source",
            execution_count=3,
        )
        assert by_count["source"] == "a = 1"
        for spelled in ("3", "(3)", 3.0):
            assert (
                await mcall(
                    client,
                    "query_notebook",
                    notebook_path="my_notebook",
                    query_type="view_source",
                    execution_count=spelled,
                )
            ) == by_count
        first = await mcall(
            client,
            "query_notebook",
            notebook_path="my_notebook.ipynb",
            query_type="view_source",
            position_index=0,
        )
        assert first["source"] == "# Report"
        assert (
            await mcall(
                client,
                "query_notebook",
                notebook_path="my_notebook.ipynb",
                query_type="get_position_index",
                execution_count=5,
            )
        ) == 2
        assert (
            await mcall(
                client,
                "query_notebook",
                notebook_path="my_notebook.ipynb",
                query_type="get_position_index",
                cell_id="205658d6-093c-4722-854c-90b149f254ad",
            )
        ) == 1
        assert (
            await mcall(client, "query_notebook", notebook_path="", query_type="check_server")
        ) == "Jupyter server is running"
        assert (
            await mcall(client, "query_notebook", notebook_path="", query_type="list_sessions")
        ) == []

        errors: list[tuple[dict[str, Any], str]] = [
            ({"query_type": "view_all"}, "Invalid query_type: view_all. Must be one of"),
            (
                {"query_type": "view_source", "execution_count": 3, "position_index": 0},
                "Cannot provide both execution_count and position_index",
            ),
            (
                {"query_type": "get_position_index"},
                "Must provide either execution_count or cell_id (got neither)",
            ),
            (
                {"query_type": "get_position_index", "execution_count": 9},
                "No cell found with execution_count=9. Available execution_counts: [3, 5, 6]",
            ),
            ({"query_type": "get_position_index", "execution_count": 0}, "start from 1"),
            ({"query_type": "view_source", "position_index": 1.5}, "not a whole number"),
            ({"query_type": "view_source", "position_index": 4}, "out of range"),
        ]
        for args, message in errors:
            error = await call_error(
                client, "query_notebook", notebook_path="my_notebook.ipynb", **args
            )
            assert message in error, (args, error)


async def test_refuses_to_modify_a_notebook_changed_since_viewed(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "shared.ipynb", new_notebook([new_cell("code", "x = 1", "c0")]))
    path = root / "shared.ipynb"
    async with profile_client("mcp-jupyter") as client:
        never = await call_error(
            client,
            "modify_notebook_cells",
            notebook_path="shared",
            operation="add_markdown",
            cell_content="# notes",
        )
        assert "you have not viewed 'shared.ipynb' yet" in never
        assert "query_notebook(query_type='view_source')" in never

        await mcall(client, "query_notebook", notebook_path="shared", query_type="view_source")
        added = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="shared",
            operation="add_code",
            cell_content="y = 2",
            execute=False,
        )
        assert added == {}
        # nbrelay's own edits keep the view current: a second edit needs no new view.
        again = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="shared",
            operation="add_markdown",
            cell_content="## Done",
            position_index=0,
        )
        assert again == {"message": "Markdown cell inserted at position 0", "error": ""}

        # A person edits the notebook in the meantime.
        person = parse(path.read_bytes())
        person.cells[1]["source"] = "x = 100  # changed by a person"
        path.write_bytes(serialize(person))
        raw = path.read_bytes()
        for operation, extra in (
            ("edit_code", {"position_index": 1, "cell_content": "x = 2"}),
            ("delete", {"position_index": 2}),
            ("add_markdown", {"cell_content": "more"}),
        ):
            error = await call_error(
                client,
                "modify_notebook_cells",
                notebook_path="shared",
                operation=operation,
                **extra,
            )
            assert "has changed since you last viewed it" in error
        assert path.read_bytes() == raw

        seen = await mcall(
            client, "query_notebook", notebook_path="shared", query_type="view_source"
        )
        assert seen[1]["source"] == "x = 100  # changed by a person"
        deleted = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="shared",
            operation="delete",
            position_index=2,
        )
        assert deleted == {"message": "Cell deleted", "error": ""}
    assert [c["source"] for c in parse(path.read_bytes()).cells] == [
        "## Done",
        "x = 100  # changed by a person",
    ]


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("query_notebook", {"notebook_path": "../x", "query_type": "view_source"}, "contains '..'"),
        ("query_notebook", {"notebook_path": ".secret/n", "query_type": "view_source"}, "hidden"),
        ("setup_notebook", {"notebook_path": "/etc/evil"}, "outside the root"),
        ("setup_notebook", {"notebook_path": "fresh", "cells": [3]}, "is not a cell"),
        (
            "modify_notebook_cells",
            {"notebook_path": "n", "operation": "rename"},
            "Invalid operation: rename. Must be one of: add_code",
        ),
        (
            "modify_notebook_cells",
            {"notebook_path": "n", "operation": "edit_code", "cell_content": "x"},
            "position_index is required for edit_code operation",
        ),
        (
            "modify_notebook_cells",
            {"notebook_path": "n", "operation": "add_code"},
            "cell_content is required for add_code operation",
        ),
        (
            "modify_notebook_cells",
            {
                "notebook_path": "n",
                "operation": "edit_code",
                "cell_content": "x",
                "position_index": 7,
            },
            "out of range",
        ),
        (
            "execute_notebook_code",
            {"notebook_path": "n", "execution_type": "run_all"},
            "Invalid execution_type: run_all",
        ),
        (
            "execute_notebook_code",
            {"notebook_path": "n", "execution_type": "execute_cell"},
            "position_index is required for execute_cell operation",
        ),
        (
            "execute_notebook_code",
            {"notebook_path": "n", "execution_type": "install_packages", "package_names": " "},
            "package_names is required",
        ),
        (
            "execute_notebook_code",
            {
                "notebook_path": "n",
                "execution_type": "install_packages",
                "package_names": "--index-url=http://evil.example pandas",
            },
            "options such as --index-url or -e are refused",
        ),
    ],
)
async def test_bad_paths_and_input_change_nothing(
    profile_client: ProfileClient, root: Path, tool: str, args: dict[str, Any], message: str
) -> None:
    write_notebook(root / "n.ipynb", new_notebook([new_cell("code", "a = 1", "c0")]))
    raw = (root / "n.ipynb").read_bytes()
    async with profile_client("mcp-jupyter") as client:
        await mcall(client, "query_notebook", notebook_path="n", query_type="view_source")
        error = await call_error(client, tool, **args)
    assert message in error
    assert (root / "n.ipynb").read_bytes() == raw
    assert sorted(p.name for p in root.iterdir()) == ["n.ipynb"]


async def test_markdown_and_delete_failures_come_back_as_error_fields(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "n.ipynb", new_notebook([new_cell("code", "a = 1", "c0")]))
    raw = (root / "n.ipynb").read_bytes()
    async with profile_client("mcp-jupyter") as client:
        await mcall(client, "query_notebook", notebook_path="n", query_type="view_source")
        for operation, extra in (
            ("edit_markdown", {"cell_content": "# x", "position_index": 5}),
            ("delete", {"position_index": 5}),
        ):
            result = await mcall(
                client, "modify_notebook_cells", notebook_path="n", operation=operation, **extra
            )
            assert result["message"] == ""
            assert "out of range" in result["error"]
    assert (root / "n.ipynb").read_bytes() == raw


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel (no dependencies), so an install needs no network."""
    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{name}-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: nbrelay-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{name}-0.1.dist-info/RECORD,,")
    files[f"{name}-0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
    return wheel


@pytest.fixture
def probe_wheel(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A uniquely named package to install into the kernel's Python; uninstalled afterwards."""
    name = f"nbrelay_probe_{secrets.token_hex(4)}"
    folder = tmp_path / "wheels"
    folder.mkdir()
    try:
        yield name, _wheel(folder, name)
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-y", "-q", name],
            check=False,
            capture_output=True,
            timeout=120,
        )


def _path_without_uv() -> str:
    """$PATH with every folder that holds a uv command left out (pip is used then)."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(p for p in parts if p and not (Path(p) / "uv").exists())


async def test_agent_workflow_on_a_real_kernel(
    kernel_client: ProfileClient,
    root: Path,
    probe_wheel: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent sets up a notebook, adds and runs code, fixes a failing cell, installs a package
    it lacks (with pip: no uv on $PATH), documents the work and cleans up, as the original's
    integration tests do."""
    monkeypatch.setenv("PATH", _path_without_uv())
    probe, wheel = probe_wheel
    async with kernel_client("mcp-jupyter") as client:
        made = await mcall(
            client, "setup_notebook", notebook_path="eda/analysis", cells=["import math"]
        )
        assert made["message"] == "Notebook eda/analysis.ipynb created"
        assert made["path"] == "eda/analysis.ipynb"
        assert made["name"] == "analysis.ipynb"
        assert made["type"] == "notebook"
        assert made["format"] == "json"
        assert [c["source"] for c in made["content"]["cells"]] == ["import math"]
        again = await mcall(client, "setup_notebook", notebook_path="eda/analysis", cells=[])
        assert again["message"] == "Notebook eda/analysis.ipynb already exists"

        sessions = await mcall(
            client, "query_notebook", notebook_path="", query_type="list_sessions"
        )
        assert [(s["path"], s["type"], s["kernel"]["name"]) for s in sessions] == [
            ("eda/analysis.ipynb", "notebook", "python3")
        ]

        first = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="eda/analysis",
            execution_type="execute_cell",
            position_index=0,
        )
        assert first == {"execution_count": 1, "outputs": [], "status": "ok"}
        area = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="add_code",
            cell_content="radius = 5\nprint(f'Area: {math.pi * radius ** 2:.2f}')",
        )
        assert area["status"] == "ok"
        assert _stream(area) == "Area: 78.54\n"
        broken = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="add_code",
            cell_content="print(circumference)",
        )
        assert broken["status"] == "error"
        assert broken["outputs"][0]["ename"] == "NameError"
        assert not any("\x1b[" in line for line in broken["outputs"][0]["traceback"])
        at = await mcall(
            client,
            "query_notebook",
            notebook_path="eda/analysis",
            query_type="get_position_index",
            execution_count=broken["execution_count"],
        )
        assert at == 2
        fixed = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="edit_code",
            cell_content="circumference = 2 * math.pi * radius\nprint(f'{circumference:.2f}')",
            position_index=2.0,
        )
        assert (fixed["status"], _stream(fixed)) == ("ok", "31.42\n")

        missing = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="add_code",
            cell_content=f"import {probe}",
        )
        assert missing["outputs"][0]["ename"] == "ModuleNotFoundError"
        installed = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="eda/analysis",
            execution_type="install_packages",
            package_names=f"{probe}@{wheel.as_uri()}",
        )
        assert installed.startswith(f"Installation of packages [{probe}@")
        # pip names the package in its normal form (dashes or underscores, by version).
        assert "Successfully installed" in installed
        assert probe.replace("_", "-") in installed.replace("_", "-").split("Successfully")[1]
        retried = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="eda/analysis",
            execution_type="execute_cell",
            position_index=3,
        )
        assert retried["status"] == "ok"
        value = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="edit_code",
            cell_content=f"print({probe}.VALUE)",
            position_index=3,
        )
        assert _stream(value) == "42\n"

        doc = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="add_markdown",
            cell_content="# Circle\nArea and circumference of a circle.",
            position_index=0,
        )
        assert doc == {"message": "Markdown cell inserted at position 0", "error": ""}
        cells = await mcall(
            client, "query_notebook", notebook_path="eda/analysis", query_type="view_source"
        )
        heading = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
        edited = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="edit_markdown",
            cell_content="# Circle properties",
            position_index=heading,
        )
        assert edited == {"message": "Markdown cell edited", "error": ""}
        gone = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="eda/analysis",
            operation="delete",
            position_index=len(cells) - 1,
        )
        assert gone == {"message": "Cell deleted", "error": ""}
        assert (
            await mcall(client, "query_notebook", notebook_path="", query_type="check_server")
        ) == "Jupyter server is running"

    saved = nbformat.read(root / "eda" / "analysis.ipynb", as_version=4)
    nbformat.validate(saved)
    # The last cell deleted was the install's (``!uv pip install …``, as the original adds).
    assert [c.cell_type for c in saved.cells] == ["markdown", "code", "code", "code", "code"]
    assert saved.cells[0].source == "# Circle properties"
    assert saved.cells[3].outputs[0]["text"] == "31.42\n"
    assert saved.cells[4].source == f"print({probe}.VALUE)"


async def test_no_execute_sets_up_and_edits_without_a_kernel(
    profile_client: ProfileClient, root: Path
) -> None:
    async with profile_client("mcp-jupyter", no_execute=True) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"query_notebook", "modify_notebook_cells", "setup_notebook"}
        made = await mcall(client, "setup_notebook", notebook_path="n", cells=["a = 1"])
        assert [c["source"] for c in made["content"]["cells"]] == ["a = 1"]
        sessions = {"notebook_path": "n", "query_type": "list_sessions"}
        assert await mcall(client, "query_notebook", **sessions) == []  # no kernel started
        assert (
            await mcall(
                client,
                "modify_notebook_cells",
                notebook_path="n",
                operation="add_code",
                cell_content="b = 2",
            )
        ) == {}
    assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == ["a = 1", "b = 2"]


async def test_live_mode_refuses_after_a_person_types_in_the_room(
    live_client: tuple[ProfileClient, Path], request: pytest.FixtureRequest
) -> None:
    """Against a real JupyterLab: setup creates the notebook and connects a server kernel; a
    person typing in the notebook makes the next modification wait for a fresh view."""
    open_client, local = live_client
    server = request.getfixturevalue("jupyter")
    with anyio.fail_after(150):  # a hang fails here, with the await it hung in
        await _live_person_scenario(open_client, local, server)
    saved = nbformat.read(local / "work" / "live.ipynb", as_version=4)
    assert [c.source for c in saved.cells] == ["base = 8", "print(base * 6)"]


async def _live_person_scenario(open_client: Any, local: Path, server: Any) -> None:
    from tests.live.person import person
    from tests.live.server import wait_for

    async with open_client("mcp-jupyter") as client:
        made = await mcall(client, "setup_notebook", notebook_path="work/live", cells=["base = 7"])
        assert made["message"] == "Notebook work/live.ipynb created"
        assert [c["source"] for c in made["content"]["cells"]] == ["base = 7"]
        ran = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="work/live",
            execution_type="execute_cell",
            position_index=0,
        )
        assert ran["status"] == "ok"
        added = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="work/live",
            operation="add_code",
            cell_content="print(base * 6)",
        )
        assert _stream(added) == "42\n"
        sessions = await mcall(
            client, "query_notebook", notebook_path="", query_type="list_sessions"
        )
        assert [s["path"] for s in sessions] == ["work/live.ipynb"]
        async with person(server, f"{local.name}/work/live.ipynb") as someone:
            first = someone.ids()[0]
            await someone.type(first, "  # tuned", interval=0.01)
            await wait_for(
                lambda: local.joinpath("work/live.ipynb").read_text().count("# tuned") == 1,
                seconds=20,
            )
        error = await call_error(
            client,
            "modify_notebook_cells",
            notebook_path="work/live",
            operation="edit_code",
            cell_content="base = 8",
            position_index=0,
        )
        assert "has changed since you last viewed it" in error
        cells = await mcall(
            client, "query_notebook", notebook_path="work/live", query_type="view_source"
        )
        assert cells[0]["source"] == "base = 7  # tuned"
        edited = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="work/live",
            operation="edit_code",
            cell_content="base = 8",
            position_index=0,
        )
        assert edited["status"] == "ok"
        assert (
            await mcall(client, "query_notebook", notebook_path="", query_type="check_server")
        ) == "Jupyter server is running"


async def test_nbrelay_serve_over_stdio(root: Path) -> None:
    """`nbrelay serve --profile mcp-jupyter --root DIR`, driven by a real MCP client."""

    write_notebook(root / "n.ipynb", new_notebook([new_cell("code", "a = 1", "c0")]))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--profile", "mcp-jupyter", "--root", str(root)],
    )
    async with Client(params) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(SEED_TOOLS)
        cell = await mcall(
            client, "query_notebook", notebook_path="n", query_type="view_source", position_index=0
        )
        assert cell["source"] == "a = 1"
        added = await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="n",
            operation="add_markdown",
            cell_content="# Notes",
        )
        assert added == {"message": "Markdown cell added", "error": ""}
    assert [c["source"] for c in parse((root / "n.ipynb").read_bytes()).cells] == [
        "a = 1",
        "# Notes",
    ]


async def test_long_outputs_are_cut_within_one_budget_per_call(
    profile_client: ProfileClient, root: Path
) -> None:
    cells = []
    for i in range(6):
        cell = new_cell("code", f"print('x' * 5000)  # {i}", f"c{i}")
        cell["execution_count"] = i + 1
        text = f"START{i}" + "x" * 5000 + f"END{i}"
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
        cells.append(cell)
    write_notebook(root / "big.ipynb", new_notebook(cells))
    async with profile_client("mcp-jupyter", output_budget=300) as client:
        view = await mcall(client, "query_notebook", notebook_path="big", query_type="view_source")
        texts = [c["outputs"][0]["text"] for c in view]
        assert sum(len(t) for t in texts) < 6 * 400
        assert texts[0].startswith("START0")
        assert texts[0].endswith("END0")
        assert "characters cut" in texts[0]
        # The budget is shared: every cell's output shows its head and tail, none is dropped.
        for i, text in enumerate(texts):
            assert text.startswith(f"START{i}"), texts
            assert text.endswith(f"END{i}")
            assert f"position_index={i}" in text
        alone = await mcall(
            client,
            "query_notebook",
            notebook_path="big",
            query_type="view_source",
            position_index=5,
        )
        assert alone["outputs"][0]["text"].startswith("START5")
    assert "x" * 5000 in (root / "big.ipynb").read_text()


async def test_install_packages_uses_uv_pip_when_uv_is_installed(
    kernel_client: ProfileClient,
    probe_wheel: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seed: "install_packages - Install packages using uv pip". uv (a test dependency)
    is put on $PATH; the install goes through it, into the kernel's Python."""
    uv = Path(sys.executable).parent / "uv"
    assert uv.exists(), "uv is a test dependency (pip install -e '.[test]')"
    monkeypatch.setenv("PATH", os.pathsep.join([str(uv.parent), _path_without_uv()]))
    probe, wheel = probe_wheel
    async with kernel_client("mcp-jupyter") as client:
        await mcall(client, "setup_notebook", notebook_path="n", cells=[f"import {probe}"])
        installed = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="n",
            execution_type="install_packages",
            package_names=f"{probe}@{wheel.as_uri()}",
        )
        # uv's own report ("Installed 1 package in ..."), not pip's ("Successfully installed").
        assert "Installed 1 package" in installed, installed
        assert "Successfully installed" not in installed
        ran = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="n",
            execution_type="execute_cell",
            position_index=0,
        )
        assert ran["status"] == "ok"


class _JupyterLike(http.server.BaseHTTPRequestHandler):
    """Answers GET /api as a Jupyter Server does (its version, no token needed)."""

    def do_GET(self) -> None:
        body = b'{"version": "2.14.0"}' if self.path == "/api" else b"{}"
        self.send_response(200 if self.path == "/api" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP server on a free port of 127.0.0.1 that answers like a Jupyter Server."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _JupyterLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_server_urls_are_remembered_and_checked(
    profile_client: ProfileClient, http_server: str
) -> None:
    """Server URL tracking: setup_notebook's server_url is remembered for the notebook, and
    check_server probes it (or the one given): a server that answers is running, a closed port
    or a server that is not Jupyter is not accessible."""
    closed = f"http://127.0.0.1:{_closed_port()}"
    async with profile_client("mcp-jupyter", no_execute=True) as client:

        async def check(**args: Any) -> Any:
            return await mcall(client, "query_notebook", query_type="check_server", **args)

        assert await check(notebook_path="", server_url=http_server) == (
            "Jupyter server is running"
        )
        assert await check(notebook_path="", server_url=closed) == (
            "Jupyter server is not accessible"
        )
        assert await check(notebook_path="", server_url=http_server + "/nothing-here/") == (
            "Jupyter server is not accessible"
        )
        # No server_url: the folder nbrelay serves (file mode) is there.
        assert await check(notebook_path="") == "Jupyter server is running"

        await mcall(client, "setup_notebook", notebook_path="up", server_url=http_server)
        await mcall(client, "setup_notebook", notebook_path="down", server_url=closed)
        assert await check(notebook_path="up") == "Jupyter server is running"
        assert await check(notebook_path="down.ipynb") == "Jupyter server is not accessible"

        for bad in ("ftp://127.0.0.1/", "http://user:secret@127.0.0.1:8888/"):
            error = await call_error(
                client,
                "query_notebook",
                notebook_path="",
                query_type="check_server",
                server_url=bad,
            )
            assert "server_url" in error
            assert "secret" not in error


async def test_live_setup_of_a_new_notebook_makes_no_cell_as_the_original(
    live_client: tuple[ProfileClient, Path], request: pytest.FixtureRequest
) -> None:
    """mcp-jupyter 2.0.2 creates a new notebook without cells on the same JupyterLab (its
    view_source is []), so every position it computes counts from there; a collaboration room
    shows such a file as one empty cell, which must not shift nbrelay's positions by one."""
    from tests.live.person import person

    open_client, local = live_client
    server = request.getfixturevalue("jupyter")
    async with open_client("mcp-jupyter") as client:
        made = await mcall(client, "setup_notebook", notebook_path="fresh")
        assert made["message"] == "Notebook fresh.ipynb created"
        assert made["content"]["cells"] == []
        view = {"notebook_path": "fresh", "query_type": "view_source"}
        assert await mcall(client, "query_notebook", **view) == []
        async with person(server, f"{local.name}/fresh.ipynb") as someone:
            assert someone.ids() == []  # the room too: nothing for a person to see shifted
        await mcall(
            client,
            "modify_notebook_cells",
            notebook_path="fresh",
            operation="add_code",
            cell_content="a = 1",
            execute=False,
        )
        assert [c["source"] for c in await mcall(client, "query_notebook", **view)] == ["a = 1"]
        # The original's positions: 0 is the cell just added, 1 is past the end.
        out_of_range = await call_error(
            client,
            "execute_notebook_code",
            notebook_path="fresh",
            execution_type="execute_cell",
            position_index=1,
        )
        assert "out of range" in out_of_range
    assert [c.source for c in nbformat.read(local / "fresh.ipynb", as_version=4).cells] == ["a = 1"]


def test_run_outputs_are_filtered_as_the_originals_filter_image_outputs() -> None:
    """The expected data are what mcp-jupyter 2.0.2's ``filter_image_outputs`` returns for the
    same outputs (run on it): an image's indicator is joined by " - " to a text naming a Figure
    or Axes, else by a new line; HTML stays beside the plain text, and alone when it is alone."""
    from nbrelay.notebook import render
    from nbrelay.tools.mcp_jupyter.views import shown_output

    outputs = [
        {"image/png": "x", "text/plain": "<Figure size 640x480 with 1 Axes>"},
        {"image/png": "x", "text/plain": "<PIL.Image>"},
        {"image/png": "x"},
        {"text/html": "<b>x</b>", "text/plain": "obj"},
        {"text/html": "<b>only</b>"},
    ]
    budget = render.Budget(100_000, 10_000)
    shown = [
        shown_output({"output_type": "display_data", "metadata": {}, "data": d}, budget, "")
        for d in outputs
    ]
    assert [s["data"] for s in shown] == [
        {"text/plain": "<Figure size 640x480 with 1 Axes> - Image generated (PNG format)"},
        {"text/plain": "<PIL.Image>\nImage generated (PNG format)"},
        {"text/plain": "Image generated (PNG format)"},
        {"text/html": "<b>x</b>", "text/plain": "obj"},
        {"text/html": "<b>only</b>"},
    ]


async def test_install_packages_leaves_its_cell_as_the_original_does(
    kernel_client: ProfileClient,
    root: Path,
    probe_wheel: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mcp-jupyter 2.0.2 installs by appending a code cell ``!uv pip install <names>`` and
    running it, so the notebook keeps a record of the install: so does the profile (the install
    itself is nbrelay's, not a shell line: the cell is not run, and carries the output)."""
    monkeypatch.setenv("PATH", _path_without_uv())
    probe, wheel = probe_wheel
    names = f"{probe}@{wheel.as_uri()}"
    async with kernel_client("mcp-jupyter") as client:
        await mcall(client, "setup_notebook", notebook_path="n", cells=["x = 1"])
        installed = await mcall(
            client,
            "execute_notebook_code",
            notebook_path="n",
            execution_type="install_packages",
            package_names=names,
        )
        assert "Successfully installed" in installed
    cells = parse((root / "n.ipynb").read_bytes()).cells
    assert [c["source"] for c in cells] == ["x = 1", f"!uv pip install {names}"]
    assert cells[1]["cell_type"] == "code"
    assert cells[1]["execution_count"] is None
    assert "Successfully installed" in cells[1]["outputs"][0]["text"]
