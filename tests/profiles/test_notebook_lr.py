"""Profile notebook-lr: the document's exact tools, one current notebook, errors raised."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mcp import Client
from mcp_types import CallToolResult, ImageContent
from nbclient import NotebookClient

from nbrelay.notebook.model import parse
from tests.helpers import call, call_error, notebook, text_of, write_notebook
from tests.live.person import person
from tests.live.server import JupyterServer, wait_for
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

# The document's input schemas, verbatim, plus the defaults of its Python signatures.
SEED_SCHEMAS: dict[str, dict[str, Any]] = {
    "get_cell_source": {
        "properties": {"index": {"type": "integer", "description": "Zero-based index of the cell"}},
        "required": ["index"],
    },
    "update_cell_source": {
        "properties": {
            "index": {"type": "integer", "description": "Zero-based index of the cell"},
            "source": {"type": "string", "description": "New source code to set"},
        },
        "required": ["index", "source"],
    },
    "add_cell": {
        "properties": {
            "cell_type": {
                "type": "string",
                "enum": ["code", "markdown"],
                "description": "Type of cell to create",
                "default": "code",
            },
            "after_index": {
                "type": "integer",
                "description": "Insert after this index. If not provided, appends to end.",
            },
            "source": {
                "type": "string",
                "description": "Initial source content for the cell",
                "default": "",
            },
        },
        "required": [],
    },
    "delete_cell": {
        "properties": {
            "index": {"type": "integer", "description": "Zero-based index of the cell to delete"}
        },
        "required": ["index"],
    },
    "move_cell": {
        "properties": {
            "index": {"type": "integer", "description": "Zero-based index of the cell to move"},
            "direction": {
                "type": "string",
                "enum": ["up", "down"],
                "description": "Direction to move the cell",
            },
        },
        "required": ["index", "direction"],
    },
    "get_cell": {
        "properties": {"index": {"type": "integer", "description": "Zero-based index of the cell"}},
        "required": ["index"],
    },
    "list_cells": {"properties": {}, "required": []},
    "get_notebook_info": {"properties": {}, "required": []},
    "save_notebook": {
        "properties": {
            "path": {"type": "string", "description": "File path to save to (.nblr format)"},
            "include_session": {
                "type": "boolean",
                "description": "Whether to include kernel session state",
                "default": False,
            },
        },
        "required": [],
    },
}
# The document's "Future Enhancements", in its order.
FUTURE_TOOLS = [
    "execute_cell",
    "execute_all",
    "load_notebook",
    "list_variables",
    "get_variable",
    "convert_cell_type",
    "find_in_cells",
    "replace_in_cells",
]
# The first line of each docstring in the document (what its users' prompts rely on).
SEED_FIRST_LINES = {
    "get_cell_source": "Get the source content of a cell at the specified index.",
    "update_cell_source": "Update the source content of a cell at the specified index.",
    "add_cell": "Add a new cell to the notebook.",
    "delete_cell": "Delete a cell at the specified index.",
    "move_cell": "Move a cell up or down in the notebook.",
    "get_cell": "Get complete information about a cell at the specified index.",
    "list_cells": "Get a list of all cells in the notebook.",
    "get_notebook_info": "Get information about the current notebook.",
    "save_notebook": "Save the notebook to a file.",
}
CELL_FIELDS = ["index", "id", "type", "source", "outputs", "execution_count"]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _ok(result: CallToolResult) -> str:
    assert not result.is_error, text_of(result)
    return text_of(result)


async def _text(client: Client, tool: str, **args: Any) -> str:
    return _ok(await client.call_tool(tool, args))


async def test_tools_list_is_the_documents(profile_client: ProfileClient) -> None:
    async with profile_client("notebook-lr") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == [*SEED_SCHEMAS, *FUTURE_TOOLS]
    for name, expected in SEED_SCHEMAS.items():
        schema = tools[name].input_schema
        assert schema["type"] == "object"
        assert schema["properties"] == expected["properties"], name
        assert sorted(schema.get("required", [])) == sorted(expected["required"]), name
        description = tools[name].description or ""
        assert description.splitlines()[0] == SEED_FIRST_LINES[name]
        assert "Args:" in description or not expected["properties"], name
    # The future tools take no path either: they act on the current notebook.
    for name in FUTURE_TOOLS:
        props = tools[name].input_schema["properties"]
        assert "path" not in props or name == "load_notebook"
    assert tools["load_notebook"].input_schema["required"] == ["path"]
    assert tools["execute_cell"].input_schema["required"] == ["index"]
    assert tools["convert_cell_type"].input_schema["properties"]["cell_type"]["enum"] == [
        "code",
        "markdown",
    ]


async def test_the_documents_example_calls(profile_client: ProfileClient, root: Path) -> None:
    async with profile_client("notebook-lr") as client:
        added = await call(
            client, "add_cell", cell_type="code", after_index=0, source="print('Hello, World!')"
        )
        assert list(added) == CELL_FIELDS
        assert added["index"] == 0  # the notebook was empty: the cell went to the end
        assert added["type"] == "code"
        assert added["outputs"] == []
        assert added["execution_count"] is None
        assert await _text(client, "get_cell_source", index=0) == "print('Hello, World!')"
        assert await _text(client, "update_cell_source", index=0, source="print('Updated!')") == (
            "true"
        )
        listed = await call(client, "list_cells")
        assert [(c["index"], c["source"]) for c in listed["cells"]] == [(0, "print('Updated!')")]
        info = await call(client, "get_notebook_info")
        assert info == {
            "name": "Untitled",
            "cell_count": 1,
            "code_count": 1,
            "markdown_count": 0,
            "executed_count": 0,
            "version": "1.0",  # the .nblr file's own version, as notebook-lr reports it
            "path": "notebook.nblr",
        }
        saved = await call(client, "save_notebook", path="my_notebook.nblr")
        assert saved == {"status": "saved", "path": "my_notebook.nblr"}
        assert (await call(client, "get_notebook_info"))["path"] == "my_notebook.nblr"
        # Later edits go to the saved notebook, as in the original.
        await call(client, "add_cell", cell_type="markdown", source="# Notes")
        # An index past the last cell is refused (notebook-lr: "out of range"), nothing added.
        refused = await call_error(client, "add_cell", after_index=5, source="never")
        assert "out of range" in refused
        # Plain values come as FastMCP gives them: structured content {"result": value}.
        source = await client.call_tool("get_cell_source", {"index": 0})
        assert source.structured_content == {"result": "print('Updated!')"}
    # notebook-lr's own format: the files are .nblr JSON, not .ipynb.
    saved_doc = json.loads((root / "my_notebook.nblr").read_text())
    assert set(saved_doc) == {"version", "cells", "metadata", "session_state"}
    assert saved_doc["version"] == "1.0"
    assert [(c["type"], c["source"]) for c in saved_doc["cells"]] == [
        ("code", "print('Updated!')"),
        ("markdown", "# Notes"),
    ]
    assert set(saved_doc["cells"][0]) == {
        "id",
        "type",
        "source",
        "outputs",
        "execution_count",
        "metadata",
    }
    assert {"created", "modified"} <= set(saved_doc["metadata"])
    assert saved_doc["metadata"]["name"] == "Untitled"
    assert saved_doc["metadata"]["path"] == "my_notebook.nblr"
    first = json.loads((root / "notebook.nblr").read_text())
    assert [c["source"] for c in first["cells"]] == ["print('Updated!')"]
    assert not list(root.glob("*.ipynb"))


async def test_reads_of_a_notebook_not_created_yet(
    profile_client: ProfileClient, root: Path
) -> None:
    async with profile_client("notebook-lr", notebook="work/fresh.ipynb") as client:
        assert await call(client, "list_cells") == {"cells": []}
        info = await call(client, "get_notebook_info")
        assert info["path"] is None
        assert info["name"] == "Untitled"
        assert info["cell_count"] == 0
        assert "no cells" in await call_error(client, "get_cell", index=0)
        assert await call(client, "find_in_cells", query="x") == {"matches": [], "count": 0}
        assert await call(client, "list_variables") == {"variables": [], "total": 0}
        assert await call(client, "execute_all") == {"cells": []}
        assert "no code has run" in await call_error(client, "get_variable", name="x")
        # Calls that fail create nothing.
        failing: list[tuple[str, dict[str, Any]]] = [
            ("update_cell_source", {"index": 0, "source": "x"}),
            ("delete_cell", {"index": 0}),
            ("move_cell", {"index": 0, "direction": "down"}),
            ("convert_cell_type", {"index": 0, "cell_type": "markdown"}),
            ("execute_cell", {"index": 0}),
        ]
        for tool, args in failing:
            error = await call_error(client, tool, **args)
            assert "work/fresh.ipynb does not exist yet" in error, tool
            assert "add_cell creates it" in error, tool
        assert await call(client, "replace_in_cells", find="a", replace="b") == {
            "ok": True,
            "replacements": 0,
            "cells": [],
        }
        assert not (root / "work").exists()
        await call(client, "add_cell", source="x = 1")
    assert parse((root / "work" / "fresh.ipynb").read_bytes()).cells[0]["source"] == "x = 1"


async def test_move_cell_boundaries_raise_and_change_nothing(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "notebook.ipynb", notebook("a", "b", "c"))
    raw = (root / "notebook.ipynb").read_bytes()
    async with profile_client("notebook-lr", notebook="notebook.ipynb") as client:
        up = await call_error(client, "move_cell", index=0, direction="up")
        assert "Cannot move cell at index 0 up" in up
        down = await call_error(client, "move_cell", index=2, direction="down")
        assert "Cannot move cell at index 2 down" in down
        assert "out of range" in await call_error(client, "move_cell", index=3, direction="up")
        assert "out of range" in await call_error(client, "move_cell", index=-1, direction="up")
        assert "left" in await call_error(client, "move_cell", index=1, direction="left")
        assert (root / "notebook.ipynb").read_bytes() == raw
        assert await call(client, "move_cell", index=0, direction="down") == {
            "ok": True,
            "new_index": 1,
        }
        assert await call(client, "move_cell", index=2, direction="up") == {
            "ok": True,
            "new_index": 1,
        }
    assert [c["source"] for c in parse((root / "notebook.ipynb").read_bytes()).cells] == [
        "b",
        "c",
        "a",
    ]


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("get_cell_source", {"index": 5}, "cell index 5 is out of range"),
        ("get_cell_source", {"index": -1}, "zero-based"),
        ("update_cell_source", {"index": 2, "source": "x"}, "cell index 2 is out of range"),
        ("delete_cell", {"index": 9}, "out of range"),
        ("get_cell", {"index": 2}, "list_cells"),
        ("add_cell", {"cell_type": "raw"}, "'code' or 'markdown'"),
        ("add_cell", {"after_index": -2}, "zero-based"),
        ("convert_cell_type", {"index": 7, "cell_type": "markdown"}, "out of range"),
        ("execute_cell", {"index": 4}, "out of range"),
        ("save_notebook", {"path": "../outside.ipynb"}, "'..'"),
        ("save_notebook", {"path": "notes.txt"}, ".ipynb"),
        ("load_notebook", {"path": "missing.ipynb"}, "does not exist"),
        ("load_notebook", {"path": "/etc/passwd"}, "outside the root"),
        ("find_in_cells", {"query": "(", "regex": True}, "regular expression is invalid"),
        ("replace_in_cells", {"find": "", "replace": "x"}, "empty"),
    ],
)
async def test_bad_input_raises_and_changes_nothing(
    profile_client: ProfileClient, root: Path, tool: str, args: dict[str, Any], message: str
) -> None:
    write_notebook(root / "notebook.ipynb", notebook("a = 1", "b = 2"))
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    async with profile_client("notebook-lr", notebook="notebook.ipynb") as client:
        assert message in await call_error(client, tool, **args)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before
    assert not (root.parent / "outside.ipynb").exists()


async def test_save_never_replaces_another_notebook(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "notebook.ipynb", notebook("mine"))
    write_notebook(root / "other.ipynb", notebook("theirs"))
    raw = (root / "other.ipynb").read_bytes()
    async with profile_client("notebook-lr", notebook="notebook.ipynb") as client:
        error = await call_error(client, "save_notebook", path="other.ipynb")
        assert "load_notebook" in error
        assert await call(client, "save_notebook") == {"status": "saved", "path": "notebook.ipynb"}
        info = await call(client, "load_notebook", path="other.ipynb")
        assert info["path"] == "other.ipynb"
        assert await _text(client, "get_cell_source", index=0) == "theirs"
    assert (root / "other.ipynb").read_bytes() == raw


async def test_find_replace_and_convert(profile_client: ProfileClient, root: Path) -> None:
    write_notebook(root / "notebook.ipynb", notebook("total = 1", "print(total)", "Total"))
    async with profile_client("notebook-lr", notebook="notebook.ipynb") as client:
        found = await call(client, "find_in_cells", query="total")
        assert found["count"] == 3
        assert [(m["index"], m["line"]) for m in found["matches"]] == [(0, 0), (1, 0), (2, 0)]
        exact = await call(client, "find_in_cells", query="total", case_sensitive=True)
        assert [m["index"] for m in exact["matches"]] == [0, 1]
        rx = await call(client, "find_in_cells", query=r"^print\(", regex=True)
        assert rx["matches"][0] == {
            "index": 1,
            "id": "c1",
            "type": "code",
            "line": 0,
            "text": "print(total)",
        }
        replaced = await call(client, "replace_in_cells", find="total", replace="revenue")
        assert replaced == {"ok": True, "replacements": 2, "cells": [0, 1]}
        swapped = await call(
            client, "replace_in_cells", find=r"(\w+) = (\d)", replace=r"\2 == \1", regex=True
        )
        assert swapped["cells"] == [0]
        converted = await call(client, "convert_cell_type", index=2, cell_type="markdown")
        assert (converted["index"], converted["type"], converted["source"]) == (
            2,
            "markdown",
            "Total",
        )
    cells = parse((root / "notebook.ipynb").read_bytes()).cells
    assert [(c["cell_type"], c["source"]) for c in cells] == [
        ("code", "1 == revenue"),
        ("code", "print(revenue)"),
        ("markdown", "Total"),
    ]


async def test_agent_workflow_on_a_real_kernel(kernel_client: ProfileClient, root: Path) -> None:
    """An agent builds an analysis in the current notebook, runs it, inspects the kernel, saves
    it with its session, and a new server picks the session up again."""
    async with kernel_client("notebook-lr", notebook="analysis.ipynb") as client:
        await call(client, "add_cell", cell_type="markdown", source="# Sales")
        await call(client, "add_cell", source="sales = [125, 148, 172]\ntotal = sum(sales)")
        await call(client, "add_cell", source="print(f'total={total}')\ntotal / len(sales)")
        await call(
            client,
            "add_cell",
            source=(
                "import base64\nfrom IPython.display import Image, display\n"
                f"display(Image(base64.b64decode('{PNG}')))"
            ),
        )
        ran = await call(client, "execute_all")
        assert [c["index"] for c in ran["cells"]] == [1, 2, 3]
        printed = ran["cells"][1]
        assert printed["outputs"][0] == {"type": "stream", "name": "stdout", "text": "total=445\n"}
        result = printed["outputs"][1]
        assert result["type"] == "execute_result"
        assert result["data"] == {"text/plain": "148.33333333333334"}
        assert result["execution_count"] == printed["execution_count"]
        assert ran["cells"][2]["outputs"][0]["image"] == "image/png"

        with_image = await client.call_tool("get_cell", {"index": 3})
        images = [b for b in with_image.content if isinstance(b, ImageContent)]
        assert len(images) == 1
        assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
        assert json.loads(text_of(with_image))["outputs"][0]["data"]["text/plain"].startswith(
            "[image/png 1x1"
        )

        # A cell that raises comes back with its error output; it is not a tool error.
        await call(client, "add_cell", after_index=2, source="1 / 0")
        failed = await call(client, "execute_cell", index=3)
        assert failed["outputs"][0]["type"] == "error"
        assert failed["outputs"][0]["ename"] == "ZeroDivisionError"
        assert any("ZeroDivisionError" in line for line in failed["outputs"][0]["traceback"])
        assert await _text(client, "delete_cell", index=3) == "true"

        variables = await call(client, "list_variables")
        names = {v["name"]: v for v in variables["variables"]}
        assert names["total"]["value"] == "445"
        assert variables["total"] >= 2
        total = await call(client, "get_variable", name="total")
        assert (total["name"], total["type"], total["value"]) == ("total", "builtins.int", "445")
        sales = await call(client, "get_variable", name="sales")
        assert sales["details"]["len"] == 3
        assert "no variable named 'nope'" in await call_error(client, "get_variable", name="nope")

        saved = await call(client, "save_notebook", include_session=True)
        assert saved["status"] == "saved with session"
        assert saved["path"] == "analysis.ipynb"
        assert {"sales", "total"} <= set(saved["session"]["variables"])
        info = await call(client, "get_notebook_info")
        assert (info["cell_count"], info["code_count"], info["markdown_count"]) == (4, 3, 1)
        assert info["executed_count"] == 3

    # A new server (a fresh kernel): the saved session comes back with load_notebook.
    async with kernel_client("notebook-lr") as client:
        info = await call(client, "load_notebook", path="analysis.ipynb", include_session=True)
        assert info["path"] == "analysis.ipynb"
        restored = await call(client, "get_variable", name="total")
        assert restored["value"] == "445"
        # Saving under a new name with the session carries the variables to it.
        await _text(client, "update_cell_source", index=1, source="sales = [1]\ntotal = 99")
        await call(client, "execute_cell", index=1)
        moved = await call(client, "save_notebook", path="copy.ipynb", include_session=True)
        assert moved["path"] == "copy.ipynb"
        assert (await call(client, "get_variable", name="total"))["value"] == "99"
        assert (await call(client, "get_notebook_info"))["path"] == "copy.ipynb"

    nb = nbformat.read(root / "copy.ipynb", as_version=4)
    nbformat.validate(nb)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert nb.cells[2].outputs[0]["text"] == "total=99\n"


async def test_timeouts_raise_with_the_kernels_story(
    kernel_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / "notebook.ipynb", notebook("import time\nprint('start')\ntime.sleep(60)"))
    async with kernel_client(
        "notebook-lr", notebook="notebook.ipynb", execution_timeout=2.0, interrupt_grace=2.0
    ) as client:
        error = await call_error(client, "execute_cell", index=0)
        assert "Cell 0 did not finish" in error
        assert "timed out" in error
        cell = await call(client, "get_cell", index=0)
        assert cell["outputs"][0]["text"] == "start\n"


async def test_live_mode_edits_and_runs_in_the_room(
    live_client: tuple[ProfileClient, Path], jupyter: JupyterServer
) -> None:
    """Live mode: the current notebook is a Jupyter Server notebook; a person in its room sees
    the agent's cells and outputs, and a save under a new name lands on the server's disk."""
    open_client, local = live_client
    async with open_client("notebook-lr", notebook="live.nblr") as client:
        await call(client, "add_cell", cell_type="markdown", source="# Live")
        added = await call(client, "add_cell", source="x = 6 * 7\nx")
        ran = await call(client, "execute_all")
        assert ran["cells"][0]["outputs"][0]["data"] == {"text/plain": "42"}
        async with person(jupyter, f"{local.name}/live.ipynb") as p:
            assert p.sources() == ["# Live", "x = 6 * 7\nx"]
            assert p.cell(added["id"])["execution_count"] == ran["cells"][0]["execution_count"]
        assert "Cannot move cell at index 0 up" in await call_error(
            client, "move_cell", index=0, direction="up"
        )
        assert await call(client, "move_cell", index=1, direction="up") == {
            "ok": True,
            "new_index": 0,
        }
        saved = await call(client, "save_notebook", path="copy.nblr")
        assert (saved["status"], saved["path"]) == ("saved", "copy.ipynb")
        # The kernel's variables move with the notebook on a Jupyter Server too (its state
        # file is written beside the kernel, which restores it).
        assert "note" not in saved, saved["note"]
        assert (await call(client, "get_variable", name="x"))["value"] == "42"
        info = await call(client, "get_notebook_info")
        assert (info["path"], info["cell_count"], info["executed_count"]) == ("copy.ipynb", 2, 1)
    await wait_for(lambda: (local / "copy.ipynb").exists(), seconds=10)
    cells = parse((local / "copy.ipynb").read_bytes()).cells
    assert [c["source"] for c in cells] == ["x = 6 * 7\nx", "# Live"]


NBLR_EXAMPLE = {
    "version": "1.0",
    "cells": [
        {
            "id": "c-intro",
            "type": "markdown",
            "source": "# Prices",
            "outputs": [],
            "execution_count": None,
            "metadata": {},
        },
        {
            "id": "c-prices",
            "type": "code",
            "source": "prices = [3, 4, 5]\nsum(prices)",
            "outputs": [
                {"type": "execute_result", "data": {"text/plain": "12"}, "execution_count": 1}
            ],
            "execution_count": 1,
            "metadata": {},
        },
        {
            "id": "c-print",
            "type": "code",
            "source": "print('hi')",
            "outputs": [{"type": "stream", "name": "stdout", "text": "hi\n"}],
            "execution_count": 2,
            "metadata": {},
        },
    ],
    "metadata": {
        "name": "Prices",
        "created": "2025-01-02T03:04:05",
        "modified": "2025-01-02T03:04:05",
    },
    "session_state": None,
}


async def test_nblr_files_are_read_and_written(kernel_client: ProfileClient, root: Path) -> None:
    """A user's .nblr file opens with load_notebook (its name from its metadata), edits and
    runs are saved back in the .nblr format, and .ipynb keeps working beside it."""
    (root / "prices.nblr").write_text(json.dumps(NBLR_EXAMPLE))
    write_notebook(root / "plain.ipynb", notebook("y = 2"))
    async with kernel_client("notebook-lr") as client:
        info = await call(client, "load_notebook", path="prices.nblr")
        assert (info["name"], info["path"], info["cell_count"], info["executed_count"]) == (
            "Prices",
            "prices.nblr",
            3,
            2,
        )
        cell = await call(client, "get_cell", index=1)
        assert cell["outputs"] == [
            {"type": "execute_result", "data": {"text/plain": "12"}, "execution_count": 1}
        ]
        assert (
            await _text(client, "update_cell_source", index=1, source="prices = [3, 4, 5, 6]")
            == "true"
        )
        await call(client, "add_cell", source="print(sum(prices))")
        ran = await call(client, "execute_all")
        assert ran["cells"][-1]["outputs"][0]["text"] == "18\n"
        ipynb = await call(client, "load_notebook", path="plain.ipynb")
        assert (ipynb["name"], ipynb["path"]) == ("Untitled", "plain.ipynb")
        await call(client, "add_cell", source="z = 3")
    doc = json.loads((root / "prices.nblr").read_text())
    assert doc["version"] == "1.0"
    assert doc["metadata"]["name"] == "Prices"
    assert doc["metadata"]["created"] == "2025-01-02T03:04:05"
    assert doc["metadata"]["modified"] != "2025-01-02T03:04:05"
    assert [c["id"] for c in doc["cells"][:3]] == ["c-intro", "c-prices", "c-print"]
    assert doc["cells"][3]["source"] == "print(sum(prices))"
    assert doc["cells"][3]["outputs"] == [{"type": "stream", "name": "stdout", "text": "18\n"}]
    assert isinstance(doc["cells"][3]["execution_count"], int)
    assert doc["cells"][0]["outputs"] == []
    assert doc["cells"][0]["execution_count"] is None
    plain = nbformat.read(root / "plain.ipynb", as_version=4)
    nbformat.validate(plain)
    assert [c.source for c in plain.cells] == ["y = 2", "z = 3"]


async def test_a_damaged_nblr_file_is_refused_and_left_alone(
    profile_client: ProfileClient, root: Path
) -> None:
    (root / "broken.nblr").write_text("{not json")
    async with profile_client("notebook-lr") as client:
        error = await call_error(client, "load_notebook", path="broken.nblr")
        assert "not a valid .nblr file" in error
    assert (root / "broken.nblr").read_text() == "{not json"


async def test_the_kernel_survives_a_save_under_a_new_name(
    kernel_client: ProfileClient, root: Path
) -> None:
    """The seed's example save, save_notebook(path="my_notebook.nblr"), after running cells:
    the notebook being worked on keeps its variables (one kernel, as in notebook-lr)."""
    async with kernel_client("notebook-lr") as client:
        await call(client, "add_cell", source="answer = 42")
        await call(client, "execute_cell", index=0)
        saved = await call(client, "save_notebook", path="my_notebook.nblr")
        assert saved == {"status": "saved", "path": "my_notebook.nblr"}
        await call(client, "add_cell", source="print(answer + 1)")
        ran = await call(client, "execute_cell", index=1)
        assert ran["outputs"] == [{"type": "stream", "name": "stdout", "text": "43\n"}]
        assert (await call(client, "get_variable", name="answer"))["value"] == "42"
    done = json.loads((root / "my_notebook.nblr").read_text())
    assert done["cells"][1]["outputs"][0]["text"] == "43\n"
