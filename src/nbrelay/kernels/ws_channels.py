"""Requests and messages over a kernel's WebSocket at ``api/kernels/{id}/channels``, in the form
the server picked: the binary ``v1.kernel.websocket.jupyter.org`` (``kernels.ws_v1``) when nbrelay
offered it and the server took it, as JupyterLab's connections do, else the JSON form that Jupyter
Server, Kernel Gateway and Enterprise Gateway all speak.

``WebSocketChannels`` is the channel half of a ``KernelSession`` whose kernel is reached that
way: one reader task (``run``, in a task group of the provider's) holds the WebSocket open and
puts shell replies and IOPub messages on two queues. Messages are not filtered by parent:
``kernels.execution`` does that (a shared kernel also carries the person's traffic). A
subclass says how to open the WebSocket (``_websocket``); live mode opens it on the Jupyter
Server (``kernels.remote``), the server extension on the gateway that holds the server's
kernels (``extension.kernels``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import uuid
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from nbrelay.errors import KernelError, NbrelayError, RemoteError, act
from nbrelay.kernels import remote_api, sequence, ws_v1
from nbrelay.kernels.base import Msg, msg_type
from nbrelay.kernels.sessions import JupyterSession, SessionCore

logger = logging.getLogger("nbrelay.kernels.remote")


class ChannelClosed(Exception):
    """The WebSocket closed (raised by a ``Frames`` while sending or reading)."""


class Frames(Protocol):
    """An open kernel WebSocket: the frames it receives, and a way to send one. ``binary``:
    the server picked ``ws_v1.SUBPROTOCOL`` (messages are binary frames, not JSON text)."""

    binary: bool

    def __aiter__(self) -> AsyncIterator[str | bytes]: ...

    async def send(self, data: str | bytes) -> None: ...

    def acknowledge(self) -> None:
        """Called after each frame received (see ``jupyter_api.ack_at_once``)."""


def _parsed(frame: str) -> Msg | None:
    """A message in the JSON form, or None if ``frame`` is not one."""
    try:
        parsed: Any = json.loads(frame)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _stream() -> tuple[MemoryObjectSendStream[Msg], MemoryObjectReceiveStream[Msg]]:
    return anyio.create_memory_object_stream[Msg](math.inf)


class WebSocketChannels(SessionCore):
    """Requests and messages through a kernel WebSocket (see the module docstring)."""

    kernel_id: str
    _log = logger

    def _open_channels(self) -> None:
        """The channels' state (call from ``__init__``)."""
        self.client_session = uuid.uuid4().hex  # the WebSocket's session id
        self._died: str | None = None
        self._ws: Frames | None = None
        self._scope: anyio.CancelScope | None = None
        self._connected = anyio.Event()
        # The kernel's message counters this connection received (``kernels.sequence``): a run
        # resumed after nbrelay died tells from them whether messages may be missing.
        self.received = sequence.Received()
        self._iopub_send, self._iopub_recv = _stream()
        self._shell_send, self._shell_recv = _stream()

    @abstractmethod
    def _websocket(self) -> AbstractAsyncContextManager[Frames]:
        """Open the kernel's WebSocket (``NbrelayError`` when it cannot)."""

    def _gone(self) -> bool:
        return bool(self._died)

    # -- the connection ---------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the kernel WebSocket open and read it until it closes (in the provider's task
        group); connection errors before the start are raised to the caller."""
        started = False
        mine: Frames | None = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with self._websocket() as ws:
                    self._ws = mine = ws
                    self.received = sequence.Received()
                    self._connected.set()
                    started = True
                    task_status.started()
                    with contextlib.suppress(ChannelClosed):
                        async for frame in ws:
                            ws.acknowledge()
                            if isinstance(frame, str):
                                self._dispatch(_parsed(frame))
                            elif ws.binary:
                                self._dispatch(ws_v1.decode(frame))
        except Exception as exc:
            if not started:
                if isinstance(exc, NbrelayError):
                    raise
                raise RemoteError(
                    f"cannot open the {self.name} kernel's WebSocket ({type(exc).__name__}).",
                    hint="Check that the server is running, then retry.",
                ) from exc
            self._log.warning("kernel %s: its connection failed: %r", self.kernel_id, exc)
        finally:
            # A replaced kernel's connection may end after its successor's opened.
            if self._ws is mine:
                self._ws = None
                self._connected = anyio.Event()
            if not self._closed and started:
                self._log.info("kernel %s: its WebSocket closed", self.kernel_id)

    def _dispatch(self, msg: Msg | None) -> None:
        if msg is None:
            return
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

    @abstractmethod
    async def connect(self) -> None:
        """Open the WebSocket (``run`` in the provider's task group); nothing if it is open."""

    def _disconnect(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _ensure_connected(self) -> Frames:
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
        try:
            await ws.send(ws_v1.encode(msg) if ws.binary else json.dumps(msg))
        except ChannelClosed as exc:
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

    def _drain(self) -> None:
        for stream in (self._iopub_recv, self._shell_recv):
            while True:
                try:
                    stream.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break

    def _close_channels(self) -> None:
        for stream in (self._iopub_send, self._iopub_recv, self._shell_send, self._shell_recv):
            stream.close()


class WebSocketSession(WebSocketChannels, JupyterSession):
    """A Jupyter Server's session kernel reached through a WebSocket: what the channels add to
    its lifecycle (queues drained after a restart and once it answers, closed at shutdown)."""

    async def _after_restart(self) -> None:
        self._died = None
        self._drain()

    async def wait_ready(self) -> None:
        await super().wait_ready()
        self._drain()

    async def shutdown(self) -> None:
        self._close_channels()
        await super().shutdown()


async def connect_in(tg: TaskGroup | None, session: WebSocketChannels) -> None:
    """Open (or reopen) a session's WebSocket: its ``run`` in the provider's task group."""
    if tg is None:
        raise KernelError(
            "remote kernels are not running (internal: no task group).",
            hint="This is a bug in nbrelay; please report it.",
        )
    if session._ws is not None:
        return
    try:
        await tg.start(session.run)
    except NbrelayError as exc:
        raise KernelError(
            f"cannot connect to the {session.name} kernel: {exc.raw_message}", hint=exc.raw_hint
        ) from exc
