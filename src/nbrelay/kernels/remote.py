"""Kernels of a remote server: the Jupyter kernels API (REST + the kernel WebSocket).

Any server that speaks it works: a Jupyter Server or JupyterLab (live mode: the notebook's own
session kernel, the one a person with the notebook open uses), and Jupyter Kernel Gateway or
Enterprise Gateway (file mode with ``--kernel-gateway-url``: kernels on another machine or a
cluster).

* **Which kernel.** With a sessions API, ``POST /api/sessions`` for the notebook's path returns
  the session JupyterLab already has for it (so the agent runs code in the person's kernel) or
  starts one. Without it (a gateway that has none), ``POST /api/kernels`` starts a kernel per
  notebook.
* **Messages.** Over the kernel's WebSocket on the server (``kernels.ws_channels``).
* **Lifetime.** nbrelay shuts down only the kernels it started; a kernel that was already there
  (the person's) is only disconnected from. The lifecycle is ``kernels.sessions``'s, shared with
  the server extension's kernels.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskGroup

from nbrelay.caller import Caller
from nbrelay.errors import NbrelayError, NotebookNotFound, RemoteError
from nbrelay.jupyter_api import JupyterAPI, ack_at_once, api_path
from nbrelay.kernels import remote_api, ws_v1
from nbrelay.kernels.base import KernelSpecInfo
from nbrelay.kernels.sessions import RESTART_RETRIES, JupyterKernels
from nbrelay.kernels.ws_channels import ChannelClosed, Frames, WebSocketSession, connect_in

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("nbrelay.kernels.remote")

GONE = "is gone from the Jupyter Server (shut down, culled, or the server restarted)"


class _Socket:
    """A ``websockets`` connection as ``ws_channels.Frames``."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self.binary = ws.subprotocol == ws_v1.SUBPROTOCOL

    async def __aiter__(self) -> AsyncIterator[str | bytes]:
        from websockets.exceptions import ConnectionClosed

        try:
            async for frame in self._ws:
                yield frame
        except ConnectionClosed as exc:
            raise ChannelClosed from exc

    async def send(self, data: str | bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise ChannelClosed from exc

    def acknowledge(self) -> None:
        ack_at_once(self._ws)


class RemoteSession(WebSocketSession):
    """One kernel of the server, reached through its WebSocket (see ``KernelSession``)."""

    provider: RemoteKernels
    _log = logger
    _not_ready = " after starting"
    _shutdown_errors = (NbrelayError,)

    def __init__(self, provider: RemoteKernels, **ids: Any) -> None:
        super().__init__(provider, **ids)
        self.api = provider.api
        self._open_channels()

    @contextlib.asynccontextmanager
    async def _websocket(self) -> AsyncIterator[Frames]:
        async with self.api.websocket(
            api_path("api/kernels", self.kernel_id, "channels"),
            params={"session_id": self.client_session},
            subprotocols=(ws_v1.SUBPROTOCOL,),
        ) as ws:
            yield _Socket(ws)

    async def connect(self) -> None:
        await self.provider.connect(self)

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        if self._died:
            return self._died
        try:
            model = await remote_api.kernel_model(self.api, self.kernel_id)
        except RemoteError:
            return None  # the server is unreachable; that says nothing about the kernel
        if model is None:
            self._died = GONE
            return self._died
        if model.get("execution_state") == "dead":
            self._died = "died"
            return self._died
        return None

    async def execution_state(self) -> str | None:
        """The kernel's state as the server reports it (busy, idle …), None if unknown."""
        try:
            model = await remote_api.kernel_model(self.api, self.kernel_id)
        except RemoteError:
            return None
        return None if model is None else str(model.get("execution_state") or "") or None

    async def interrupt(self, caller: Caller) -> None:
        self.last_activity = time.time()
        await remote_api.interrupt(self.api, self.kernel_id, self.name)

    async def _restart_kernel(self) -> None:
        for pause in (*RESTART_RETRIES, None):
            try:
                await remote_api.restart(self.api, self.kernel_id)
                return
            except NotebookNotFound:
                break  # the kernel is gone: a new one (or the person's), below
            except NbrelayError as exc:
                # Jupyter Server and Kernel Gateway answer 500 ("Exception restarting kernel")
                # for a kernel they do not have (culled, or the server restarted and forgot
                # it), and for one their own restarter is restarting (it died): ask which.
                try:
                    gone = await remote_api.kernel_model(self.api, self.kernel_id) is None
                except NbrelayError:
                    gone = False
                if gone:
                    break
                await self._refused(exc, exc.message, pause)
        await self.provider.replace(self)

    async def _delete(self) -> None:
        await remote_api.delete(self.api, self.session_id, self.kernel_id)


class RemoteKernels(JupyterKernels[RemoteSession]):
    """The kernels a workspace uses on one server (see the module docstring)."""

    def __init__(
        self,
        api: JupyterAPI,
        *,
        server_path: Callable[[str], str] = lambda key: key,
        close_api: bool = False,
    ) -> None:
        super().__init__(RemoteSession, server_path)
        self.api = api
        self._close_api = close_api
        self._specs: dict[str, KernelSpecInfo] | None = None
        self._has_sessions: bool | None = None
        self._tg: TaskGroup | None = None
        # kernel id -> the WebSocket session id a dead nbrelay process used with it: the server
        # keeps a kernel's messages for the last session that disconnected from it, and replays
        # them to a connection with the same id (``resume``).
        self._resume: dict[str, str] = {}

    def resume(self, kernel_id: str, client_session: str) -> None:
        """Connect to ``kernel_id`` next as WebSocket session ``client_session`` (a run of an
        nbrelay process that died is followed to its end with what the server kept)."""
        self._resume[kernel_id] = client_session

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    async def _kernelspecs(self) -> dict[str, KernelSpecInfo]:
        if self._specs is None:
            self._specs = await remote_api.kernelspecs(self.api)
        return self._specs

    async def _start(self, session: RemoteSession, caller: Caller) -> None:
        await self.connect(session)  # a failed connection keeps the session: requests reconnect
        if session.owned:  # a kernel that was already there (the person's) is not waited for
            await super()._start(session, caller)

    async def _find_or_start(
        self, key: str, path: str, kernel_name: str
    ) -> tuple[Mapping[str, Any], bool]:
        if self._has_sessions is not False:
            try:
                existing = await remote_api.find_session(self.api, path)
                self._has_sessions = True
            except NotebookNotFound:
                self._has_sessions = False  # a kernel gateway: bare kernels from now on
            else:
                if existing is not None:
                    return existing, False
                return await remote_api.start_session(self.api, key, path, kernel_name), True
        return {"kernel": await remote_api.start_kernel(self.api, kernel_name)}, True

    def _language(self, name: str, language: str) -> str:
        specs = self._specs or {}
        return specs[name].language if name in specs else language

    async def refresh(self) -> None:
        """Ask the server for each kernel still taken for running: one it culled, or a person
        shut down, is listed dead (the next run starts another, saying so), not as it last was."""
        for session in list(self._sessions.values()):
            if not session._closed and not session._died:
                await session.exit_status()

    async def connect(self, session: RemoteSession) -> None:
        """Open (or reopen) a session's WebSocket in the background task group."""
        if session._ws is None and (resumed := self._resume.pop(session.kernel_id, None)):
            session.client_session = resumed
        await connect_in(self._tg, session)

    async def replace(self, session: RemoteSession) -> None:
        await super().replace(session)
        session._ws = None
        await self.connect(session)

    async def aclose(self) -> None:
        await super().aclose()
        if self._close_api:
            await self.api.aclose()
