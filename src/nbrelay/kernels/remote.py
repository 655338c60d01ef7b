"""Kernels of a remote server: the Jupyter kernels API (REST + the kernel WebSocket).

Any server that speaks it works: a Jupyter Server or JupyterLab (live mode: the notebook's own
session kernel, the one a person with the notebook open uses), and Jupyter Kernel Gateway or
Enterprise Gateway (file mode with ``--kernel-gateway-url``: kernels on another machine or a
cluster).

* **Which kernel.** With a sessions API, ``POST /api/sessions`` for the notebook's path returns
  the session JupyterLab already has for it (so the agent runs code in the person's kernel) or
  starts one. Without it (a gateway that has none), ``POST /api/kernels`` starts a kernel per
  notebook.
* **Messages.** The kernel WebSocket speaks the JSON form of the Jupyter protocol; one reader
  task puts shell replies and IOPub messages on two queues. Messages are not filtered by parent:
  ``kernels.execution`` does that (a shared kernel also carries the person's traffic).
* **Lifetime.** nbrelay shuts down only the kernels it started; a kernel that was already there
  (the person's) is only disconnected from. The lifecycle is ``kernels.sessions``'s, shared with
  the server extension's kernels.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, NbrelayError, NotebookNotFound, RemoteError, act
from nbrelay.jupyter_api import JupyterAPI, ack_at_once, api_path
from nbrelay.kernels import remote_api, sequence
from nbrelay.kernels.base import KernelSpecInfo, Msg, msg_type
from nbrelay.kernels.sessions import JupyterKernels, JupyterSession

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("nbrelay.kernels.remote")

GONE = "is gone from the Jupyter Server (shut down, culled, or the server restarted)"


class RemoteSession(JupyterSession):
    """One kernel of the server, reached through its WebSocket (see ``KernelSession``)."""

    provider: RemoteKernels
    _log = logger
    _not_ready = " after starting"
    _shutdown_errors = (NbrelayError,)

    def __init__(self, provider: RemoteKernels, **ids: Any) -> None:
        super().__init__(provider, **ids)
        self.api = provider.api
        self.client_session = uuid.uuid4().hex
        self._died: str | None = None
        self._ws: ClientConnection | None = None
        self._scope: anyio.CancelScope | None = None
        self._connected = anyio.Event()
        # The kernel's message counters this connection received (``kernels.sequence``): a run
        # resumed after nbrelay died tells from them whether messages may be missing.
        self.received = sequence.Received()
        self._iopub_send, self._iopub_recv = self._stream()
        self._shell_send, self._shell_recv = self._stream()

    @staticmethod
    def _stream() -> tuple[MemoryObjectSendStream[Msg], MemoryObjectReceiveStream[Msg]]:
        return anyio.create_memory_object_stream[Msg](math.inf)

    def _gone(self) -> bool:
        return bool(self._died)

    # -- the connection ---------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the kernel WebSocket open and read it until it closes (in the provider's task
        group); connection errors before the start are raised to the caller."""
        from websockets.exceptions import ConnectionClosed

        started = False
        mine: ClientConnection | None = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with self.api.websocket(
                    api_path("api/kernels", self.kernel_id, "channels"),
                    params={"session_id": self.client_session},
                ) as ws:
                    self._ws = mine = ws
                    self.received = sequence.Received()
                    self._connected.set()
                    started = True
                    task_status.started()
                    try:
                        async for frame in ws:
                            ack_at_once(ws)
                            if isinstance(frame, str):
                                self._dispatch(frame)
                    except ConnectionClosed:
                        pass
        except Exception as exc:
            if not started:
                if isinstance(exc, NbrelayError):
                    raise
                raise RemoteError(
                    f"cannot open the {self.name} kernel's WebSocket ({type(exc).__name__}).",
                    hint="Check that the server is running, then retry.",
                ) from exc
            logger.warning("kernel %s: its connection failed: %r", self.kernel_id, exc)
        finally:
            # A replaced kernel's connection may end after its successor's opened.
            if self._ws is mine:
                self._ws = None
                self._connected = anyio.Event()
            if not self._closed and started:
                logger.info("kernel %s: its WebSocket closed", self.kernel_id)

    def _dispatch(self, frame: str) -> None:
        try:
            parsed: Any = json.loads(frame)
        except ValueError:
            return
        if not isinstance(parsed, dict):
            return
        msg: Msg = parsed
        self.last_activity = time.time()
        self.received.see(msg)
        channel = msg.get("channel")
        if channel == "iopub":
            if msg_type(msg) == "status":
                state = (msg.get("content") or {}).get("execution_state")
                if state in ("idle", "busy", "starting"):
                    self._state = state
                elif state in ("dead", "restarting"):
                    # The server saw the process die (and may be restarting it itself).
                    self._died = self._died or "died"
                    self._state = "dead"
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._iopub_send.send_nowait(msg)
        elif channel == "shell":
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._shell_send.send_nowait(msg)

    async def connect(self) -> None:
        await self.provider.connect(self)

    def _disconnect(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _ensure_connected(self) -> ClientConnection:
        if self._closed:
            raise KernelError(f"the {self.name} kernel was shut down.")
        if self._ws is None:
            await self.connect()
        ws = self._ws
        if ws is None:
            raise KernelError(
                f"cannot reach the {self.name} kernel on the Jupyter Server.",
                hint=f"Check that the server is running, then {act('restart')}.",
            )
        return ws

    # -- KernelSession ----------------------------------------------------------------------

    async def send(self, msg_type: str, content: Mapping[str, Any]) -> str:
        ws = await self._ensure_connected()
        msg = remote_api.shell_request(msg_type, content, self.client_session)
        msg_id = str(msg["header"]["msg_id"])
        self.last_activity = time.time()
        from websockets.exceptions import ConnectionClosed

        try:
            await ws.send(json.dumps(msg))
        except ConnectionClosed as exc:
            raise KernelError(
                f"the connection to the {self.name} kernel closed while sending a request.",
                hint=f"Retry; if it keeps happening, {act('restart')}.",
            ) from exc
        return msg_id

    async def iopub(self) -> Msg:
        return await self._receive(self._iopub_recv)

    def queued_iopub(self) -> list[Msg]:
        taken: list[Msg] = []
        while True:
            try:
                taken.append(self._iopub_recv.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return taken

    async def shell(self) -> Msg:
        return await self._receive(self._shell_recv)

    async def _receive(self, stream: MemoryObjectReceiveStream[Msg]) -> Msg:
        try:
            return await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError) as exc:
            raise KernelError(f"the {self.name} kernel was shut down.") from exc

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
        try:
            await remote_api.restart(self.api, self.kernel_id)
        except NotebookNotFound:
            await self.provider.replace(self)  # the kernel is gone: a new one (or the person's)
        except NbrelayError as exc:
            # Jupyter Server and Kernel Gateway answer 500 ("Exception restarting kernel") for
            # a kernel they do not have (culled, or the server restarted and forgot it): ask.
            try:
                gone = await remote_api.kernel_model(self.api, self.kernel_id) is None
            except NbrelayError:
                gone = False
            if not gone:
                raise self._restart_failed(exc.message) from exc
            await self.provider.replace(self)

    async def _after_restart(self) -> None:
        self._died = None
        self._drain()

    def _drain(self) -> None:
        for stream in (self._iopub_recv, self._shell_recv):
            while True:
                try:
                    stream.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break

    async def wait_ready(self) -> None:
        await super().wait_ready()
        self._drain()

    async def shutdown(self) -> None:
        for stream in (self._iopub_send, self._iopub_recv, self._shell_send, self._shell_recv):
            stream.close()
        await super().shutdown()

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

    async def connect(self, session: RemoteSession) -> None:
        """Open (or reopen) a session's WebSocket in the background task group."""
        if self._tg is None:
            raise KernelError(
                "remote kernels are not running (internal: no task group).",
                hint="This is a bug in nbrelay; please report it.",
            )
        if session._ws is not None:
            return
        resumed = self._resume.pop(session.kernel_id, None)
        if resumed is not None:
            session.client_session = resumed
        try:
            await self._tg.start(session.run)
        except NbrelayError as exc:
            raise KernelError(
                f"cannot connect to the {session.name} kernel: {exc.raw_message}", hint=exc.raw_hint
            ) from exc

    async def replace(self, session: RemoteSession) -> None:
        await super().replace(session)
        session._ws = None
        await self.connect(session)

    async def aclose(self) -> None:
        await super().aclose()
        if self._close_api:
            await self.api.aclose()
