"""One real stdio subprocess: `nbrelay serve` driven by the official MCP client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import call, call_error

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stdio-root")


@pytest.fixture(scope="module")
async def stdio_client(served: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "nbrelay",
            "serve",
            "--root",
            str(served),
            "--tools",
            "create_notebook,insert_cells,read_notebook,edit_cell",
        ],
    )
    async with Client(params) as client:
        yield client


async def test_serve_over_stdio_exposes_only_the_chosen_tools(stdio_client: Client) -> None:
    names = sorted(t.name for t in (await stdio_client.list_tools()).tools)
    assert names == ["create_notebook", "edit_cell", "insert_cells", "read_notebook"]


async def test_serve_over_stdio_edits_files_on_disk(stdio_client: Client, served: Path) -> None:
    created = await call(stdio_client, "create_notebook", path="s.ipynb", cells=["1 + 1"])
    await call(
        stdio_client,
        "edit_cell",
        path="s.ipynb",
        cell=0,
        source="2 + 2",
        expected_version=created["version"],
    )
    assert '"2 + 2"' in (served / "s.ipynb").read_text()
    assert "outside the root" in await call_error(stdio_client, "read_notebook", path="/etc/passwd")
