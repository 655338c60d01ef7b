"""Live-mode helpers: an MCP client whose notebooks live in a Jupyter Server's rooms."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client

from nbrelay.config import Secret, Settings
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.kernels.remote import RemoteKernels
from nbrelay.server import build_server
from nbrelay.stores.rtc import RTCStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids
from tests.live.server import JupyterServer

AGENT = "nbrelay test agent"


def live_store(server: JupyterServer, folder: str = "", **options: Any) -> RTCStore:
    api = JupyterAPI(server.url, Secret(server.token))
    return RTCStore(api, agent_name=AGENT, folder=folder, **options)


@asynccontextmanager
async def agent(
    server: JupyterServer,
    folder: str = "",
    *,
    prefix: str = "cell",
    store: RTCStore | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    """An in-process MCP client on the canonical tools, in live mode on ``server``."""
    settings = Settings(kernel_pool=0)
    store = store or live_store(server, folder, **options)
    kernels = RemoteKernels(store.api, server_path=store.paths.server)
    ws = Workspace(settings, store, id_factory=counter_ids(prefix), kernels=kernels)
    async with Client(build_server(settings, ws)) as client:
        yield client
