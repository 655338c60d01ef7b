"""What the kernel sessions and providers share, written once.

* ``SessionCore``: the fields every ``KernelSession`` keeps (notebook key, kernelspec, times,
  restarts, state) and the error of a failed restart.
* ``ZmqChannels``: requests and messages over a jupyter_client kernel client's ZeroMQ channels
  (local kernels, and the server extension's kernels).
* ``JupyterSession`` and ``JupyterKernels``: the kernels of a Jupyter Server, reached in process
  (``extension.kernels``) or over REST and WebSocket (``kernels.remote``). The lifecycle is here:
  a notebook's session is looked up or started (``_find_or_start``), its channels connected
  (``connect``), and it is ready only once its kernel answers kernel_info on shell *and* on
  iopub (``base.answers_kernel_info``); a lost kernel is replaced; nbrelay shuts down only the
  sessions it started (``owned``), a person's kernel is only disconnected from. Subclasses fill
  in the hooks; ``_authorize`` is where the extension asks Jupyter's authorizer (a remote
  server checks nbrelay's token itself).
"""

from __future__ import annotations

import logging
import posixpath
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.kernels.base import (
    KernelInfo,
    KernelSession,
    KernelSpecInfo,
    Msg,
    answers_kernel_info,
    msg_type,
    server_spec,
    session_kernel,
)

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

READY_TIMEOUT = 60.0
# Seconds between the tries of a restart the server refused for a kernel it still has: its own
# restarter may be restarting it (the kernel died), and a second restart fails meanwhile.
RESTART_RETRIES = (0.5, 1.5)
State = Literal["starting", "idle", "busy", "dead"]


class SessionCore:
    """The state every kernel session keeps (see ``KernelSession``)."""

    def __init__(self, *, key: str, name: str, language: str) -> None:
        self.key = key
        self.name = name
        self.language = language
        self.started = time.time()
        self.last_activity = self.started
        self.restarts = 0
        self._state: State = "idle"
        self._closed = False

    def _restart_failed(self, detail: str) -> KernelError:
        """Mark the kernel dead; the error that says its restart failed (``detail`` ends it)."""
        self._state = "dead"
        return KernelError(
            f"the {self.name} kernel could not be restarted: {detail}",
            hint=f"Retry ({act('restart')} again), or run a cell, which starts a new kernel.",
        )

    def _restarted(self) -> None:
        self.restarts += 1
        self._state = "idle"
        self.last_activity = time.time()


class ZmqChannels(SessionCore):
    """Requests and messages through a jupyter_client kernel client ``kc`` (None: closed)."""

    kc: Any = None

    async def send(self, msg_type: str, content: Mapping[str, Any]) -> str:
        if self.kc is None:
            raise KernelError(f"the {self.name} kernel's connection is closed.")
        self.last_activity = time.time()
        msg = self.kc.session.msg(msg_type, dict(content))
        self.kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    async def _receive(self, channel: str) -> Msg:
        import zmq

        while True:
            kc = self.kc
            socket = getattr(getattr(kc, channel, None), "socket", None)
            if socket is None:
                raise KernelError(f"the {self.name} kernel's connection is closed.")
            # Cancellation can only happen while polling, never between receive and return.
            await socket.poll()
            try:
                parts = await socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                continue
            _, smsg = kc.session.feed_identities(parts)
            msg: Msg = kc.session.deserialize(smsg)
            self.last_activity = time.time()
            return msg

    async def iopub(self) -> Msg:
        msg = await self._receive("iopub_channel")
        self._saw(msg)
        return msg

    def _saw(self, msg: Msg) -> None:
        if msg_type(msg) == "status":
            state = (msg.get("content") or {}).get("execution_state")
            if state in ("idle", "busy"):
                self._state = state

    def queued_iopub(self) -> list[Msg]:
        import zmq

        kc, taken = self.kc, []
        socket = getattr(getattr(kc, "iopub_channel", None), "socket", None)
        while socket is not None:
            try:
                got = socket.recv_multipart(zmq.NOBLOCK)
                if not isinstance(got, list):  # an asyncio socket's future, done at once
                    if not got.done():
                        got.cancel()
                        break
                    got = got.result()
            except zmq.Again:
                break
            parts: list[Any] = got
            _, smsg = kc.session.feed_identities(parts)
            msg: Msg = kc.session.deserialize(smsg)
            self._saw(msg)
            taken.append(msg)
        return taken

    async def shell(self) -> Msg:
        return await self._receive("shell_channel")


class JupyterSession(SessionCore, ABC):
    """One kernel of a Jupyter Server: its ids, whether nbrelay started it, its lifecycle."""

    _log = logging.getLogger("nbrelay.kernels")
    _not_ready = ""  # the end of the sentence when the kernel does not answer
    _shutdown_errors: tuple[type[Exception], ...] = (Exception,)  # logged, not raised

    def __init__(
        self,
        provider: JupyterKernels[Any],
        *,
        key: str,
        kernel_id: str,
        session_id: str | None,
        name: str,
        language: str,
        owned: bool,
    ) -> None:
        super().__init__(key=key, name=name, language=language)
        self.provider = provider
        self.kernel_id = kernel_id
        self.session_id = session_id  # None: a bare kernel (a gateway without sessions)
        self.owned = owned

    # -- hooks ------------------------------------------------------------------------------

    def _gone(self) -> bool:
        """Whether the kernel is known to be dead or gone from the server."""
        return False

    def _pid(self) -> int | None:
        return None

    @abstractmethod
    async def connect(self) -> None:
        """Open the kernel's channels (nothing if they are open)."""

    def _disconnect(self) -> None:
        """Close the kernel's channels (they may be opened again)."""

    @abstractmethod
    async def _restart_kernel(self) -> None:
        """Have the server restart the kernel, or ``provider.replace`` a lost one; raise a
        ``KernelError`` (through ``_restart_failed``) when it cannot."""

    async def _refused(self, exc: Exception, detail: str, pause: float | None) -> None:
        """After the server refused to restart a kernel it still has (``exc``): wait ``pause``
        seconds before the next try, or, after the last (``None``), raise the error."""
        if pause is None:
            raise self._restart_failed(detail) from exc
        self._log.info("kernel %s: restart refused (%s); retrying", self.kernel_id, detail)
        await anyio.sleep(pause)

    async def _after_restart(self) -> None:
        """Get the channels ready for the restarted kernel."""

    @abstractmethod
    async def _delete(self) -> None:
        """Shut down the session (and its kernel) on the server."""

    # -- KernelSession ----------------------------------------------------------------------

    @property
    def info(self) -> KernelInfo:
        return KernelInfo(
            key=self.key,
            kernel_id=self.kernel_id,
            name=self.name,
            language=self.language,
            cwd=posixpath.dirname(self.key),
            started=self.started,
            last_activity=self.last_activity,
            state="dead" if (self._closed or self._gone()) else self._state,
            pid=self._pid(),
            restarts=self.restarts,
        )

    async def restart(self, caller: Caller) -> None:
        self._state = "starting"
        await self._restart_kernel()
        await self._after_restart()
        await self.wait_ready()
        self._restarted()

    async def wait_ready(self) -> None:
        """Until the kernel answers, with its iopub reaching nbrelay (it may still be starting)."""
        # The subclasses add the channels (send, shell, iopub) that make this a KernelSession.
        if not await answers_kernel_info(cast(KernelSession, self), READY_TIMEOUT):
            self._state = "dead"
            raise KernelError(
                f"the {self.name} kernel did not answer within {READY_TIMEOUT:g} s{self._not_ready}.",
                hint="Check the Jupyter Server's log for the kernel's errors.",
            )

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._disconnect()
        if not self.owned:
            return  # someone else's kernel (the person's): leave it running
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                await self._delete()
            except self._shutdown_errors as exc:
                self._log.info("kernel %s: shutdown failed: %s", self.kernel_id, exc)
        self._state = "dead"


S = TypeVar("S", bound=JupyterSession)


class JupyterKernels(ABC, Generic[S]):
    """The kernels a workspace uses on one Jupyter Server, one per notebook key."""

    on_this_machine = False  # the server's kernels: it limits them

    def __init__(self, session_type: type[S], server_path: Callable[[str], str]) -> None:
        self._session_type = session_type
        self._server_path = server_path
        self._sessions: dict[str, S] = {}
        # Notebooks whose session is being shut down: until the server has deleted it, a new
        # run would find it there and connect to the dying kernel (whose WebSocket never opens).
        self._stopping: dict[str, anyio.Event] = {}
        self._lock = anyio.Lock()

    # -- hooks ------------------------------------------------------------------------------

    async def _authorize(self, caller: Caller, action: str, resource: str) -> None:
        """Refuse ``caller`` ``action`` on ``resource`` (by default: allow)."""

    @abstractmethod
    async def _kernelspecs(self) -> dict[str, KernelSpecInfo]:
        """The server's kernelspecs by name."""

    @abstractmethod
    async def _find_or_start(
        self, key: str, path: str, kernel_name: str
    ) -> tuple[Mapping[str, Any], bool]:
        """The server's session model for notebook ``path`` and whether nbrelay started it."""

    def _language(self, name: str, language: str) -> str:
        """The language of kernelspec ``name`` (``language``: the one asked for)."""
        return language

    # -- KernelProvider ---------------------------------------------------------------------

    def attach(self, tg: TaskGroup) -> None:
        return None

    def get(self, key: str) -> S | None:
        return self._sessions.get(key)

    def running(self) -> list[KernelInfo]:
        return [s.info for s in self._sessions.values()]

    async def refresh(self) -> None:
        return None  # in process, the server's kernel manager says it at once (``_gone``)

    async def kernelspecs(self, caller: Caller) -> list[KernelSpecInfo]:
        await self._authorize(caller, "read", "kernelspecs")
        return list((await self._kernelspecs()).values())

    async def session(self, key: str, caller: Caller, *, kernel_name: str, cwd: str) -> S:
        await self._authorize(caller, "execute", "kernels")
        while (stopping := self._stopping.get(key)) is not None:
            await stopping.wait()  # bounded: a shutdown gives up after 10 s
        async with self._lock:
            found = self._sessions.get(key)
            if found is not None and not found._closed:
                return found
            spec = server_spec(await self._kernelspecs(), kernel_name)
            session = await self._open(key, kernel_name, spec.language)
            self._sessions[key] = session
        await self._start(session, caller)
        return session

    async def _start(self, session: S, caller: Caller) -> None:
        """Connect a new session and wait until its kernel answers; shut it down if it does not."""
        try:
            await session.connect()
            await session.wait_ready()
        except KernelError:
            await self.shutdown(session.key, caller)
            raise

    async def _ids(self, key: str, kernel_name: str) -> tuple[str, str, str | None, bool]:
        """The notebook's kernel on the server, found or started: (kernel id, kernelspec name,
        session id, whether nbrelay started it)."""
        model, owned = await self._find_or_start(key, self._server_path(key), kernel_name)
        return (*session_kernel(key, model), owned)

    async def _open(self, key: str, kernel_name: str, language: str) -> S:
        kernel_id, name, session_id, owned = await self._ids(key, kernel_name)
        return self._session_type(
            self,
            key=key,
            kernel_id=kernel_id,
            session_id=session_id,
            name=name,
            language=self._language(name, language),
            owned=owned,
        )

    async def replace(self, session: S) -> None:
        """The server lost a session's kernel (culled, or the server restarted): give the
        session the notebook's kernel now, one a person started meanwhile or a new one (state
        is lost)."""
        session._disconnect()
        kernel_id, _, session_id, owned = await self._ids(session.key, session.name)
        session.kernel_id, session.session_id, session.owned = kernel_id, session_id, owned

    async def shutdown(self, key: str, caller: Caller, *, wait: bool = True) -> bool:
        if key not in self._sessions:
            return False
        await self._authorize(caller, "execute", "kernels")
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        self._stopping[key] = stopped = anyio.Event()
        try:
            await session.shutdown()
        finally:
            if self._stopping.get(key) is stopped:
                del self._stopping[key]
            stopped.set()
        return True

    async def aclose(self) -> None:
        for key in list(self._sessions):
            await self.shutdown(key, Caller.server("closing on stop"))
