"""visualize_cell: charts and graphs drawn by matplotlib in the real kernel, tables as data."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, ImageContent

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import call, call_error, data_of

pytestmark = pytest.mark.anyio

CELLS = [
    "sales = {'month': ['Oct', 'Nov', 'Dec'], 'revenue': [125, 148, 172], 'units': [5, 6, 7]}\n"
    "sales",
    "[{'name': 'ada', 'lang': 'en'}, {'name': 'bo', 'lang': 'sv'}]",
    "{'a': ['b', 'c'], 'b': ['c'], 'c': []}",
    "x = 1",
    "import numpy as np\nnp.arange(12).reshape(4, 3)",
]


@pytest.fixture
async def viz(root: Path, tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    async with Client(build_server(settings), mode="auto") as c:
        await call(c, "create_notebook", path="v.ipynb", cells=CELLS)
        await call(c, "execute", path="v.ipynb", cells=[0, 1, 2, 3], wait=60)
        yield c


def png_size(result: CallToolResult) -> tuple[int, int]:
    images = [b for b in result.content if isinstance(b, ImageContent)]
    assert len(images) == 1
    assert images[0].mime_type == "image/png"
    raw = base64.b64decode(images[0].data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    return int(width), int(height)


async def visual(client: Client, **args: Any) -> tuple[dict[str, Any], CallToolResult]:
    result = await client.call_tool("visualize_cell", {"path": "v.ipynb", **args})
    return data_of(result), result


async def test_a_numeric_result_becomes_a_chart(viz: Client) -> None:
    data, result = await visual(viz, cell=0)
    assert (data["kind"], data["chart"], data["x"], data["y"]) == (
        "chart",
        "bar",
        "month",
        ["revenue", "units"],
    )
    assert data["columns"] == ["month", "revenue", "units"]
    assert png_size(result) == (700, 450)
    line, result = await visual(
        viz, cell=0, type="chart", options={"chart": "line", "y": "revenue", "title": "Q4"}
    )
    assert (line["chart"], line["y"]) == ("line", ["revenue"])
    png_size(result)


async def test_records_are_a_table_and_a_table_can_be_asked_for(viz: Client) -> None:
    data, result = await visual(viz, cell=1)
    assert data["kind"] == "table"
    assert data["rows"] == [["ada", "en"], ["bo", "sv"]]
    assert not any(isinstance(b, ImageContent) for b in result.content)
    table, _ = await visual(viz, cell=0, type="table", options={"max_rows": 2})
    assert table["rows"] == [["Oct", 125, 5], ["Nov", 148, 6]]
    assert table["total_rows"] == 3


async def test_an_adjacency_mapping_is_drawn_as_a_graph(viz: Client) -> None:
    data, result = await visual(viz, cell=2)
    assert (data["kind"], data["nodes"], data["edges"]) == ("graph", 3, 3)
    png_size(result)


async def test_an_expression_and_a_numpy_array(viz: Client) -> None:
    data, _ = await visual(viz, cell=3, type="table", options={"expression": "sales['units']"})
    assert data["rows"] == [[5], [6], [7]]
    await call(viz, "execute", path="v.ipynb", cells=[4], wait=60)
    arr, result = await visual(viz, cell=4)
    assert (arr["kind"], arr["columns"]) == ("chart", ["col0", "col1", "col2"])
    png_size(result)


async def test_clear_errors(viz: Client) -> None:
    assert "has no result to visualise: it has not run" in await call_error(
        viz, "visualize_cell", path="v.ipynb", cell=4
    )
    error = await call_error(viz, "visualize_cell", path="v.ipynb", cell=3)
    assert "the kernel has no result for cell" in error
    assert "expression" in error
    error = await call_error(viz, "visualize_cell", path="v.ipynb", cell=1, type="graph")
    assert "a list is not a graph" in error
    error = await call_error(viz, "visualize_cell", path="v.ipynb", cell=0, options={"y": "profit"})
    assert "there is no column 'profit'" in error
    error = await call_error(
        viz, "visualize_cell", path="v.ipynb", cell=0, options={"chart": "radar"}
    )
    assert "unknown chart 'radar'" in error


async def test_the_notebook_namespace_is_left_clean(viz: Client) -> None:
    await visual(viz, cell=0)
    names = await call(
        viz,
        "execute",
        path="v.ipynb",
        code="print(sorted(k for k in globals() if 'nbrelay' in k))",
        wait=60,
    )
    assert names["cells"][0]["outputs"][0]["text"] == "[]\n"
