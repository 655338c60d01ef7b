"""Profile ipynb-mcp: the seed's exact tools, 1-based indexes, errors as fields."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from nbrelay.notebook.model import parse
from tests.helpers import call, notebook, write_notebook
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

# Transcribed from the seed: name -> {parameter: (JSON type, required, default)}.
SEED_TOOLS: dict[str, dict[str, tuple[Any, bool, Any]]] = {
    "get_formatted_content": {"filepath": ("string", True, None)},
    "get_full_output": {
        "filepath": ("string", True, None),
        "cell_index": ("integer", True, None),
        "output_index": ("integer", True, None),
        "type_hint": (["string", "null"], False, None),
    },
    "edit_cell": {
        "filepath": ("string", True, None),
        "cell_index": ("integer", True, None),
        "new_source_content": ("string", True, None),
    },
    "add_cell": {
        "filepath": ("string", True, None),
        "cell_index": ("integer", True, None),
        "cell_type": ("string", True, None),
        "source_content": ("string", True, None),
    },
    "delete_cell": {"filepath": ("string", True, None), "cell_index": ("integer", True, None)},
    "merge_cells": {
        "filepath": ("string", True, None),
        "cell_index1": ("integer", True, None),
        "cell_index2": ("integer", True, None),
    },
}


async def test_tools_list_matches_the_seed_exactly(profile_client: ProfileClient) -> None:
    async with profile_client("ipynb-mcp") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(SEED_TOOLS)
    for name, params in SEED_TOOLS.items():
        schema = tools[name].input_schema
        assert sorted(schema["properties"]) == sorted(params), name
        assert sorted(schema.get("required", [])) == sorted(
            p for p, (_, req, _) in params.items() if req
        )
        for param, (kind, required, default) in params.items():
            prop = schema["properties"][param]
            # An enum with null is an anyOf, as the original's listing has it.
            types = prop["type"] if "type" in prop else [a["type"] for a in prop["anyOf"]]
            assert types == kind, (name, param)
            if not required:
                assert prop["default"] == default


def _executed_notebook(path: Path) -> None:
    """A notebook whose outputs come from a real kernel: text, a long stream, a table, an image."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Sales"),
            nbformat.v4.new_code_cell("print('\\n'.join(f'row {i}' for i in range(400)))"),
            nbformat.v4.new_code_cell(
                "from IPython.display import HTML, Image, display\n"
                "import base64\n"
                "display(HTML('<table><tr><th>q</th><th>sales</th></tr><tr><td>Q1</td><td>10</td></tr></table>'))\n"
                "png = base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==')\n"
                "display(Image(png))"
            ),
            nbformat.v4.new_code_cell("total = 10\ntotal"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    nbformat.write(nb, path)  # noqa: TID251 - building a fixture file outside nbrelay


async def test_agent_workflow_on_real_kernel_outputs(
    profile_client: ProfileClient, root: Path
) -> None:
    _executed_notebook(root / "sales.ipynb")
    async with profile_client("ipynb-mcp") as client:
        view = await call(client, "get_formatted_content", filepath="sales.ipynb")
        text = view["formatted_content"]
        assert view["error"] is None
        assert view["filepath"] == "sales.ipynb"
        assert text.startswith("[[Cell 1 - Markdown]]\n```\n# Sales\n```\n")
        assert (
            "[[Cell 4 - Code]]\n```\ntotal = 10\ntotal\n```\n[[Cell 4 - Output]]\n- Text: 10\n"
            in text
        )
        assert "- Text: row 0\nrow 1\n" in text
        assert "row 399" in text
        assert "- Table (HTML): \n```markdown\n| q | sales |\n|---|---|\n| Q1 | 10 |\n```\n" in text
        assert (
            "- Image (PNG) - IMG_ID003002 Use `get_full_output` for full content. (cell 3 [1-based], output 2 [1-based])"
            in text
        )

        full = await call(
            client, "get_full_output", filepath="sales.ipynb", cell_index=2, output_index=1
        )
        assert full["mime_type"] == "text/stdout"
        assert full["full_output_data"].count("row ") == 400
        image = await call(
            client,
            "get_full_output",
            filepath="sales.ipynb",
            cell_index=3,
            output_index=2,
            type_hint="image",
        )
        assert image["mime_type"] == "image/png"
        assert base64.b64decode(image["full_output_data"]).startswith(b"\x89PNG")
        table = await call(
            client,
            "get_full_output",
            filepath="sales.ipynb",
            cell_index=3,
            output_index=1,
            type_hint="table",
        )
        assert table["mime_type"] == "text/html"
        assert "<td>Q1</td>" in table["full_output_data"]

        edited = await call(
            client,
            "edit_cell",
            filepath="sales.ipynb",
            cell_index=4,
            new_source_content="total = 20\ntotal",
        )
        assert edited == {"success": True, "filepath": "sales.ipynb", "error": None}
        added = await call(
            client,
            "add_cell",
            filepath="sales.ipynb",
            cell_index=2,
            cell_type="markdown",
            source_content="Raw rows:",
        )
        assert added == {
            "success": True,
            "filepath": "sales.ipynb",
            "new_cell_actual_index": 2,
            "error": None,
        }
        refused = await call(
            client,
            "add_cell",
            filepath="sales.ipynb",
            cell_index=99,
            cell_type="code",
            source_content="print(total)",
        )
        assert refused["success"] is False
        assert refused["new_cell_actual_index"] == -1
        assert "cell_index=6 to append" in refused["error"]
        appended = await call(
            client,
            "add_cell",
            filepath="sales.ipynb",
            cell_index=6,
            cell_type="code",
            source_content="print(total)",
        )
        assert appended["new_cell_actual_index"] == 6
        assert (
            await call(client, "merge_cells", filepath="sales.ipynb", cell_index1=1, cell_index2=2)
        )["success"]
        assert (await call(client, "delete_cell", filepath="sales.ipynb", cell_index=3))["success"]

    cells = parse((root / "sales.ipynb").read_bytes()).cells
    assert [(c["cell_type"], c["source"]) for c in cells] == [
        ("markdown", "# Sales\nRaw rows:"),
        ("code", "print('\\n'.join(f'row {i}' for i in range(400)))"),
        ("code", "total = 20\ntotal"),
        ("code", "print(total)"),
    ]
    assert cells[2]["outputs"] == []
    assert cells[2]["execution_count"] is None
    assert cells[1]["outputs"], "untouched cells keep their outputs"
    nbformat.validate(nbformat.read(root / "sales.ipynb", as_version=4))
    # The edited notebook still runs on a real kernel.
    nb = nbformat.read(root / "sales.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[3].outputs[0]["text"] == "20\n"


async def test_merge_type_rule_code_only_when_both_are_code(
    profile_client: ProfileClient, root: Path
) -> None:
    nb = notebook("a = 1", "b = 2")
    nb.cells.insert(1, {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "note"})
    write_notebook(root / "n.ipynb", nb)
    async with profile_client("ipynb-mcp") as client:
        assert (
            await call(client, "merge_cells", filepath="n.ipynb", cell_index1=1, cell_index2=2)
        )["success"]
        cells = parse((root / "n.ipynb").read_bytes()).cells
        assert [(c["cell_type"], c["source"]) for c in cells] == [
            ("markdown", "a = 1\nnote"),
            ("code", "b = 2"),
        ]
        assert "outputs" not in cells[0]
        write_notebook(root / "c.ipynb", notebook("x = 1", "y = 2"))
        assert (
            await call(client, "merge_cells", filepath="c.ipynb", cell_index1=1, cell_index2=2)
        )["success"]
        assert parse((root / "c.ipynb").read_bytes()).cells[0]["cell_type"] == "code"


@pytest.mark.parametrize(
    ("tool", "args", "fields", "message"),
    [
        (
            "get_formatted_content",
            {"filepath": "../x.ipynb"},
            {"formatted_content": ""},
            "contains '..'",
        ),
        (
            "get_full_output",
            {"filepath": "n.ipynb", "cell_index": 1, "output_index": 1},
            {"full_output_data": None, "mime_type": None},
            "not a code cell or has no outputs",
        ),
        (
            "edit_cell",
            {"filepath": "n.ipynb", "cell_index": 9, "new_source_content": "x"},
            {"success": False},
            "out of range",
        ),
        (
            "add_cell",
            {"filepath": "n.ipynb", "cell_index": 4, "cell_type": "code", "source_content": "x"},
            {"success": False, "new_cell_actual_index": -1},
            "out of range for adding",
        ),
        (
            "delete_cell",
            {"filepath": "missing.ipynb", "cell_index": 1},
            {"success": False},
            "does not exist",
        ),
        (
            "merge_cells",
            {"filepath": "n.ipynb", "cell_index1": 2, "cell_index2": 1},
            {"success": False},
            "must be cell_index1 + 1",
        ),
    ],
)
async def test_errors_come_back_as_fields_and_change_nothing(
    profile_client: ProfileClient,
    root: Path,
    tool: str,
    args: dict[str, Any],
    fields: dict[str, Any],
    message: str,
) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    raw = (root / "n.ipynb").read_bytes()
    async with profile_client("ipynb-mcp") as client:
        result = await call(client, tool, **args)
    assert message in result["error"]
    for key, value in fields.items():
        assert result[key] == value
    assert (root / "n.ipynb").read_bytes() == raw


async def test_out_of_range_errors_speak_of_1_based_indexes(
    profile_client: ProfileClient, root: Path
) -> None:
    """An index past the end, in every tool that takes one: the error field numbers cells from 1
    and names this profile's tools (never "0-based" or read_notebook)."""
    write_notebook(root / "n.ipynb", notebook("a = 1", "b = 2"))
    raw = (root / "n.ipynb").read_bytes()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("edit_cell", {"cell_index": 3, "new_source_content": "x"}),
        ("delete_cell", {"cell_index": 3}),
        ("merge_cells", {"cell_index1": 2, "cell_index2": 3}),
        ("get_full_output", {"cell_index": 3, "output_index": 1}),
    ]
    async with profile_client("ipynb-mcp") as client:
        for tool, args in calls:
            result = await call(client, tool, filepath="n.ipynb", **args)
            error = result["error"]
            assert error, tool
            assert "out of range" in error, (tool, error)
            assert "1-2" in error or "(indexes 1-2)" in error, (tool, error)
            assert "0-based" not in error, (tool, error)
            assert "read_notebook" not in error, (tool, error)
            assert "get_formatted_content" in error, (tool, error)
    assert (root / "n.ipynb").read_bytes() == raw


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_full_output", {"cell_index": 0, "output_index": 1}),
        ("get_full_output", {"cell_index": 1, "output_index": 0}),
        ("get_full_output", {"cell_index": 1, "output_index": 1, "type_hint": "video"}),
        ("edit_cell", {"cell_index": 0, "new_source_content": "x"}),
        ("add_cell", {"cell_index": -1, "cell_type": "code", "source_content": "x"}),
        ("add_cell", {"cell_index": 1, "cell_type": "raw", "source_content": "x"}),
        ("delete_cell", {"cell_index": 0}),
        ("merge_cells", {"cell_index1": 0, "cell_index2": 1}),
    ],
)
async def test_arguments_outside_the_schema_are_refused_before_the_tool_runs(
    profile_client: ProfileClient, root: Path, tool: str, args: dict[str, Any]
) -> None:
    """As in the original, a 0 index, an unknown type_hint or a raw cell type breaks the schema
    (minimum 1, enums): an MCP tool error, not a ``success: false`` field; nothing changes."""
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    raw = (root / "n.ipynb").read_bytes()
    async with profile_client("ipynb-mcp") as client:
        result = await client.call_tool(tool, {"filepath": "n.ipynb", **args})
    assert result.is_error, result
    assert (root / "n.ipynb").read_bytes() == raw


async def test_full_output_answers_as_the_original(
    profile_client: ProfileClient, root: Path
) -> None:
    """text/plain first without a hint; streams as text/stdout or text/stderr; an error output as
    its fields; data with neither text nor image as JSON text."""
    nb = notebook("x", "y", "z", "w")
    nb.cells[0]["outputs"] = [
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t1", "t2"]},
    ]
    nb.cells[1]["outputs"] = [
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"text/html": "<b>b</b>", "text/plain": "<HTML>", "image/png": "iVBO"},
        },
        {"output_type": "display_data", "metadata": {}, "data": {"application/json": {"a": 1}}},
    ]
    write_notebook(root / "o.ipynb", nb)

    async def full(cell: int, output: int, hint: str | None = None) -> tuple[Any, Any]:
        args: dict[str, Any] = {"filepath": "o.ipynb", "cell_index": cell, "output_index": output}
        if hint:
            args["type_hint"] = hint
        got = await call(client, "get_full_output", **args)
        assert got["error"] is None
        return got["mime_type"], got["full_output_data"]

    async with profile_client("ipynb-mcp") as client:
        assert await full(1, 1) == ("text/stderr", "warn\n")
        assert await full(1, 2) == (
            "application/json",
            {"ename": "E", "evalue": "v", "traceback": ["t1", "t2"]},
        )
        assert await full(2, 1) == ("text/plain", "<HTML>")
        assert await full(2, 1, "table") == ("text/html", "<b>b</b>")
        assert await full(2, 1, "image") == ("image/png", "iVBO")
        assert await full(2, 2) == ("application/json", '{"application/json": {"a": 1}}')
