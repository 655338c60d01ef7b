"""The kernels of the Jupyter Server nbrelay runs in: its session and kernel managers.

A notebook's kernel is its Jupyter session's kernel, so the agent runs code in the kernel a
person with the notebook open in JupyterLab uses (and JupyterLab shows the agent's runs). A
notebook without a session gets one, as JupyterLab would make it. Messages go over the
kernel's ZeroMQ channels with a client of nbrelay's own (the person's connection is untouched);
``kernels.execution`` keeps only the replies to nbrelay's requests. nbrelay shuts down only the
sessions it started; a person's kernel is only disconnected from. Every operation asks
Jupyter's authorizer first (``kernels`` execute; listing kernelspecs, ``kernelspecs`` read).
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio
from jupyter_core.utils import ensure_async

from nbrelay.errors import KernelError, act
from nbrelay.extension.access import require
from nbrelay.kernels.base import (
    KernelInfo,
    KernelSpecInfo,
    Msg,
    answers_kernel_info,
    msg_type,
    server_spec,
    session_kernel,
    specs_by_name,
)

logger = logging.getLogger("nbrelay.extension")

_READY_TIMEOUT = 60.0
State = Literal["starting", "idle", "busy", "dead"]


class ServerSession:
    """One kernel of the server, through a ZeroMQ client of its own (see ``KernelSession``)."""

    def __init__(
        self,
        provider: ServerKernels,
        *,
        key: str,
        kernel_id: str,
        session_id: str | None,
        name: str,
        language: str,
        owned: bool,
    ) -> None:
        self.provider = provider
        self.key = key
        self.kernel_id = kernel_id
        self.session_id = session_id
        self.name = name
        self.language = language
        self.owned = owned
        self.started = time.time()
        self.last_activity = self.started
        self.restarts = 0
        self._state: State = "idle"
        self._closed = False
        self.kc: Any = None

    def _kernel(self) -> Any | None:
        km = self.provider.kernel_manager
        return km.get_kernel(self.kernel_id) if self.kernel_id in km else None

    @property
    def info(self) -> KernelInfo:
        kernel = self._kernel()
        process = getattr(getattr(kernel, "provisioner", None), "process", None)
        pid = getattr(process, "pid", None)
        return KernelInfo(
            key=self.key,
            kernel_id=self.kernel_id,
            name=self.name,
            language=self.language,
            cwd=posixpath.dirname(self.key),
            started=self.started,
            last_activity=self.last_activity,
            state="dead" if (self._closed or kernel is None) else self._state,
            pid=pid if isinstance(pid, int) else None,
            restarts=self.restarts,
        )

    def connect(self) -> None:
        kernel = self._kernel()
        if kernel is None:
            raise KernelError(f"the Jupyter Server has no kernel {self.kernel_id!r} any more.")
        self.kc = kernel.client()
        self.kc.start_channels()

    def _disconnect(self) -> None:
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None

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
        if msg_type(msg) == "status":
            state = (msg.get("content") or {}).get("execution_state")
            if state in ("idle", "busy"):
                self._state = state
        return msg

    async def shell(self) -> Msg:
        return await self._receive("shell_channel")

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        kernel = self._kernel()
        if kernel is None:
            return "is gone from the Jupyter Server (shut down or culled)"
        if not await ensure_async(kernel.is_alive()):
            return "died"
        return None

    async def interrupt(self) -> None:
        self.last_activity = time.time()
        await require("execute", "kernels")
        try:
            await ensure_async(self.provider.kernel_manager.interrupt_kernel(self.kernel_id))
        except Exception as exc:
            raise KernelError(f"could not interrupt the {self.name} kernel: {exc}.") from exc

    async def restart(self) -> None:
        await require("execute", "kernels")
        self._state = "starting"
        km = self.provider.kernel_manager
        try:
            if self.kernel_id in km:
                await ensure_async(km.restart_kernel(self.kernel_id))
            else:  # the kernel is gone (culled): a new session for the notebook
                self._disconnect()
                await self.provider.replace(self)
        except KernelError:
            self._state = "dead"
            raise
        except Exception as exc:
            self._state = "dead"
            raise KernelError(
                f"the {self.name} kernel could not be restarted: {exc}.",
                hint=f"Retry ({act('restart')} again), or run a cell, which starts a new kernel.",
            ) from exc
        self._disconnect()
        self.connect()
        await self.wait_ready()
        self.restarts += 1
        self._state = "idle"
        self.last_activity = time.time()

    async def wait_ready(self) -> None:
        if not await answers_kernel_info(self, _READY_TIMEOUT):
            self._state = "dead"
            raise KernelError(
                f"the {self.name} kernel did not answer within {_READY_TIMEOUT:g} s.",
                hint="Check the Jupyter Server's log for the kernel's errors.",
            )

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._disconnect()
        if not self.owned:
            return  # the person's kernel: leave it running
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                if self.session_id:
                    await self.provider.session_manager.delete_session(self.session_id)
                elif self.kernel_id in self.provider.kernel_manager:
                    await ensure_async(self.provider.kernel_manager.shutdown_kernel(self.kernel_id))
            except Exception as exc:
                logger.info("kernel %s: shutdown failed: %s", self.kernel_id, exc)
        self._state = "dead"


class ServerKernels:
    """The kernels a workspace uses in this server (see the module docstring)."""

    def __init__(
        self,
        session_manager: Any,
        kernel_manager: Any,
        kernel_spec_manager: Any,
        *,
        server_path: Callable[[str], str] = lambda key: key,
    ) -> None:
        self.session_manager = session_manager
        self.kernel_manager = kernel_manager
        self.kernel_spec_manager = kernel_spec_manager
        self._server_path = server_path
        self._sessions: dict[str, ServerSession] = {}
        self._lock = anyio.Lock()

    def attach(self, tg: Any) -> None:
        return None

    def get(self, key: str) -> ServerSession | None:
        return self._sessions.get(key)

    def running(self) -> list[KernelInfo]:
        return [s.info for s in self._sessions.values()]

    async def _specs(self) -> dict[str, KernelSpecInfo]:
        found = await ensure_async(self.kernel_spec_manager.get_all_specs())
        return specs_by_name(found)

    async def kernelspecs(self) -> list[KernelSpecInfo]:
        await require("read", "kernelspecs")
        return list((await self._specs()).values())

    async def session(self, key: str, *, kernel_name: str, cwd: str) -> ServerSession:
        await require("execute", "kernels")
        async with self._lock:
            found = self._sessions.get(key)
            if found is not None and not found._closed:
                return found
            spec = server_spec(await self._specs(), kernel_name)
            session = await self._open(key, kernel_name, spec.language)
            self._sessions[key] = session
        try:
            session.connect()
            await session.wait_ready()
        except KernelError:
            await self.shutdown(key)
            raise
        return session

    async def _open(self, key: str, kernel_name: str, language: str) -> ServerSession:
        path = self._server_path(key)
        for model in await self.session_manager.list_sessions():
            if model.get("path") == path and model.get("kernel"):
                return self._make(key, model, owned=False, language=language)
        try:
            model = await self.session_manager.create_session(
                path=path, name=posixpath.basename(path), type="notebook", kernel_name=kernel_name
            )
        except Exception as exc:
            raise KernelError(
                f"the Jupyter Server could not start a {kernel_name} kernel for {key!r}: {exc}.",
                hint="Check the Jupyter Server's log for the kernel's errors.",
            ) from exc
        return self._make(key, model, owned=True, language=language)

    def _make(
        self, key: str, model: Mapping[str, Any], *, owned: bool, language: str
    ) -> ServerSession:
        kernel_id, name, session_id = session_kernel(key, model)
        return ServerSession(
            self,
            key=key,
            kernel_id=kernel_id,
            session_id=session_id,
            name=name,
            language=language,
            owned=owned,
        )

    async def replace(self, session: ServerSession) -> None:
        """The server lost a session's kernel: give the session a new one (state is lost)."""
        fresh = await self._open(session.key, session.name, session.language)
        session.kernel_id = fresh.kernel_id
        session.session_id = fresh.session_id
        session.owned = fresh.owned

    async def shutdown(self, key: str) -> bool:
        if key not in self._sessions:
            return False
        await require("execute", "kernels")  # no caller: the idle reaper, allowed
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        await session.shutdown()
        return True

    async def aclose(self) -> None:
        for key in list(self._sessions):
            await self.shutdown(key)
