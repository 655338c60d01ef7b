"""A client factory for any profile, in process, over both client modes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids

# open_client(profile, **settings): settings override the defaults (no warm kernel pool).
ProfileClient = Callable[..., AbstractAsyncContextManager[Client]]


def client_factory(mode: str, root: Path, tmp_path: Path) -> ProfileClient:
    @asynccontextmanager
    async def open_client(profile: str, **overrides: Any) -> AsyncIterator[Client]:
        settings = Settings(
            root=root, profile=profile, lock_dir=tmp_path / "locks", kernel_pool=0
        ).replace(**overrides)
        ws = Workspace(
            settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids()
        )
        async with Client(build_server(settings, ws), mode=mode) as client:
            yield client

    return open_client


@pytest.fixture(params=["auto", "legacy"])
def profile_client(request: pytest.FixtureRequest, root: Path, tmp_path: Path) -> ProfileClient:
    return client_factory(request.param, root, tmp_path)


@pytest.fixture
def kernel_client(root: Path, tmp_path: Path) -> ProfileClient:
    """The same factory in one client mode, for tests that run real kernels (they are slow)."""
    return client_factory("auto", root, tmp_path)


@pytest.fixture
def live_client(
    request: pytest.FixtureRequest, live_folder: tuple[str, Path], tmp_path: Path
) -> tuple[ProfileClient, Path]:
    """The factory in live mode: a profile over the session's Jupyter Server (RTC rooms, remote
    kernels), confined to a fresh folder of its root; also that folder's local path."""
    from nbrelay.config import Secret
    from nbrelay.jupyter_api import JupyterAPI
    from nbrelay.kernels.remote import RemoteKernels
    from nbrelay.stores.rtc import RTCStore

    server = request.getfixturevalue("jupyter")
    name, local = live_folder

    @asynccontextmanager
    async def open_client(profile: str, **overrides: Any) -> AsyncIterator[Client]:
        settings = Settings(
            root=tmp_path, profile=profile, lock_dir=tmp_path / "locks", kernel_pool=0
        ).replace(**overrides)
        api = JupyterAPI(server.url, Secret(server.token))
        # The tests read the file right after each call: every edit waits for its save.
        store = RTCStore(api, agent_name="nbrelay test agent", folder=name, save_each_edit=True)
        kernels = RemoteKernels(api, server_path=store.paths.server)
        ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
        async with Client(build_server(settings, ws)) as client:
            yield client

    return open_client, local
