"""The two ways into jupyter-collaboration's rooms, for the room store's tests.

The room store (``stores.rtc``) reaches a room over a WebSocket (live mode) or in the Jupyter
Server's own process (the server extension). Tests of what the store promises take the ``way``
fixture (``tests.live.fixtures``) and run once each way, against the same kind of real server: every test Jupyter Server
runs nbrelay's extension, so ``room_agent`` gives either an in-process MCP client on nbrelay's
live mode or the official MCP client on the server's own ``/mcp``. Paths are relative to the
server's root in both. Settings of the store that a test changes are given to both: to the live
store directly, to the extension as traits when its server starts (``store_args``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client

from tests.extension.conftest import ext_client
from tests.live.conftest import agent
from tests.live.server import JupyterServer

WAYS = ("websocket", "in-process")


def store_args(*, save_delay: float | None = None, idle_close: float | None = None) -> list[str]:
    """The extension's traits for these store settings (for the server's command line)."""
    args = []
    if save_delay is not None:
        args.append(f"--NbrelayExtension.room_save_delay={save_delay}")
    if idle_close is not None:
        args.append(f"--NbrelayExtension.room_idle_close={idle_close}")
    return args


@asynccontextmanager
async def room_agent(
    way: str,
    server: JupyterServer,
    *,
    prefix: str = "cell",
    save_delay: float | None = None,
    idle_close: float | None = None,
) -> AsyncIterator[Client]:
    """An MCP client whose notebooks are ``server``'s rooms, reached ``way``. For the extension
    the settings must match the traits its server was started with (``store_args``)."""
    if way == "websocket":
        options: dict[str, Any] = {}
        if save_delay is not None:
            options["save_delay"] = save_delay
        if idle_close is not None:
            options["idle_close"] = idle_close
        async with agent(server, prefix=prefix, **options) as client:
            yield client
    else:
        async with ext_client(server) as client:
            yield client
