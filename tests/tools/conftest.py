"""An in-process MCP client on the canonical profile, in both client modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids


@pytest.fixture(params=["auto", "legacy"])
async def client(
    request: pytest.FixtureRequest, root: Path, tmp_path: Path
) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks")
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    async with Client(build_server(settings, ws), mode=request.param) as c:
        yield c
