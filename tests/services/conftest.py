"""An in-process MCP client on the canonical profile over a folder with a sample report."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids, write_notebook
from tests.services.sample import report


@pytest.fixture
def served(root: Path) -> Path:
    write_notebook(root / "report.ipynb", report())
    return root


@pytest.fixture(params=["auto", "legacy"])
async def client(
    request: pytest.FixtureRequest, served: Path, tmp_path: Path
) -> AsyncIterator[Client]:
    settings = Settings(root=served, lock_dir=tmp_path / "locks")
    ws = Workspace(
        settings, FileStore(served, lock_dir=tmp_path / "locks"), id_factory=counter_ids()
    )
    async with Client(build_server(settings, ws), mode=request.param) as c:
        yield c
