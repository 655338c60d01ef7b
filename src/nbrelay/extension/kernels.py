"""The kernels of the Jupyter Server nbrelay runs in: its session and kernel managers.

A notebook's kernel is its Jupyter session's kernel, so the agent runs code in the kernel a
person with the notebook open in JupyterLab uses (and JupyterLab shows the agent's runs). A
notebook without a session gets one, as JupyterLab would make it. Messages go over the
kernel's ZeroMQ channels with a client of nbrelay's own (the person's connection is untouched);
``kernels.execution`` keeps only the replies to nbrelay's requests. nbrelay shuts down only the
sessions it started; a person's kernel is only disconnected from. Every operation asks
Jupyter's authorizer first (``kernels`` execute; listing kernelspecs, ``kernelspecs`` read).
The lifecycle is ``kernels.sessions``'s, shared with the remote kernels.

A server whose kernels run on a Kernel Gateway or Enterprise Gateway (``--gateway-url``) has
no ZeroMQ channels to them: there nbrelay opens the kernel's WebSocket on the gateway
(``GatewaySession``), with the server's own gateway settings (URL, token, headers, TLS), as the
server does for JupyterLab; a kernel the gateway lost (it restarted, or culled it) is
forgotten by the server and replaced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import posixpath
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio
from jupyter_core.utils import ensure_async

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, RemoteError
from nbrelay.extension.access import require
from nbrelay.jupyter_api import MAX_MESSAGE, ack_socket_at_once
from nbrelay.kernels.base import KernelSpecInfo, specs_by_name
from nbrelay.kernels.sessions import (
    READY_TIMEOUT,
    RESTART_RETRIES,
    JupyterKernels,
    JupyterSession,
    ZmqChannels,
)
from nbrelay.kernels.ws_channels import ChannelClosed, Frames, WebSocketSession, connect_in
from nbrelay.redaction import redact, safe_url

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

logger = logging.getLogger("nbrelay.extension")

GONE = "is gone from the Jupyter Server (shut down or culled)"
GONE_FROM_GATEWAY = "is gone from the gateway (shut down, culled, or the gateway restarted)"


def _reason(exc: Exception) -> str:
    """What a server-side exception says (tornado's HTTPError keeps it in ``log_message``),
    without credentials (a gateway's messages name its URL)."""
    return redact(str(getattr(exc, "log_message", None) or str(exc) or type(exc).__name__))


class _InServer(JupyterSession):
    """A kernel of this server: its lifecycle through the server's kernel manager."""

    provider: ServerKernels
    _log = logger

    def _kernel(self) -> Any | None:
        km = self.provider.kernel_manager
        return km.get_kernel(self.kernel_id) if self.kernel_id in km else None

    def _gone(self) -> bool:
        return self._kernel() is None

    def _pid(self) -> int | None:
        process = getattr(getattr(self._kernel(), "provisioner", None), "process", None)
        pid = getattr(process, "pid", None)
        return pid if isinstance(pid, int) else None

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        kernel = self._kernel()
        if kernel is None:
            return GONE
        if not await ensure_async(kernel.is_alive()):
            return "died"
        return None

    async def interrupt(self, caller: Caller) -> None:
        self.last_activity = time.time()
        await require(caller, "execute", "kernels")
        try:
            await ensure_async(self.provider.kernel_manager.interrupt_kernel(self.kernel_id))
        except Exception as exc:
            raise KernelError(f"could not interrupt the {self.name} kernel: {exc}.") from exc

    async def restart(self, caller: Caller) -> None:
        await require(caller, "execute", "kernels")
        await super().restart(caller)

    async def _lost(self) -> bool:
        """Whether the kernel is known to be lost though the server still lists it (then the
        server has forgotten it on return)."""
        return False

    async def _restart_kernel(self) -> None:
        km = self.provider.kernel_manager
        for pause in (*RESTART_RETRIES, None):
            try:
                if self.kernel_id in km and not await self._lost():
                    await ensure_async(km.restart_kernel(self.kernel_id))
                else:  # the kernel is gone (culled): a new session for the notebook
                    await self.provider.replace(cast("ServerSession | GatewaySession", self))
                return
            except KernelError:
                self._state = "dead"
                raise
            except Exception as exc:  # the server's restarter may be restarting it: retried
                await self._refused(exc, f"{exc}.", pause)

    async def _delete(self) -> None:
        if self.session_id:
            await self.provider.session_manager.delete_session(self.session_id)
        elif self.kernel_id in self.provider.kernel_manager:
            await ensure_async(self.provider.kernel_manager.shutdown_kernel(self.kernel_id))


async def _launched(kernel: Any, name: str) -> None:
    """Until the server has launched ``kernel``. With pending kernels
    (``c.MappingKernelManager.use_pending_kernels``) the server answers a new session (or a
    restart) while the kernel is still being launched, before its ports are known: a client
    made then never reaches it. Its ``ready`` future says when it is launched, or why not."""
    ready = getattr(kernel, "ready", None)
    if isinstance(ready, concurrent.futures.Future):
        ready = asyncio.wrap_future(ready)
    if not isinstance(ready, asyncio.Future):
        return
    try:
        with anyio.fail_after(READY_TIMEOUT):
            await asyncio.shield(ready)
    except TimeoutError:
        raise KernelError(
            f"the Jupyter Server did not launch the {name} kernel within {READY_TIMEOUT:g} s.",
            hint="Check the Jupyter Server's log for the kernel's errors, then retry.",
        ) from None
    except Exception as exc:
        raise KernelError(
            f"the Jupyter Server could not launch the {name} kernel: {_reason(exc)}.",
            hint="Check the Jupyter Server's log for the kernel's errors, then retry.",
        ) from exc


class ServerSession(ZmqChannels, _InServer):
    """One kernel of the server, through a ZeroMQ client of its own (see ``KernelSession``)."""

    async def connect(self) -> None:
        kernel = self._kernel()
        if kernel is None:
            raise KernelError(f"the Jupyter Server has no kernel {self.kernel_id!r} any more.")
        await _launched(kernel, self.name)
        self.kc = kernel.client()
        self.kc.start_channels()

    def _disconnect(self) -> None:
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None

    async def _after_restart(self) -> None:
        self._disconnect()
        await self.connect()


class _GatewayFrames:
    """A Tornado WebSocket client connection as ``ws_channels.Frames`` (the JSON form: no
    subprotocol is offered, every gateway speaks it)."""

    binary = False

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def __aiter__(self) -> AsyncIterator[str | bytes]:
        while (frame := await self._conn.read_message()) is not None:
            yield frame

    async def send(self, data: str | bytes) -> None:
        from tornado.websocket import WebSocketClosedError

        try:
            await self._conn.write_message(data, binary=isinstance(data, bytes))
        except WebSocketClosedError as exc:
            raise ChannelClosed from exc

    def acknowledge(self) -> None:
        stream = getattr(getattr(self._conn, "protocol", None), "stream", None)
        ack_socket_at_once(getattr(stream, "socket", None))


class GatewaySession(WebSocketSession, _InServer):
    """One kernel of the server that runs on its gateway (``--gateway-url``), reached through
    the gateway's WebSocket (see the module docstring)."""

    _not_ready = " on the gateway"

    def __init__(self, provider: ServerKernels, **ids: Any) -> None:
        super().__init__(provider, **ids)
        self._open_channels()

    def _gone(self) -> bool:
        return bool(self._died) or self._kernel() is None

    @contextlib.asynccontextmanager
    async def _websocket(self) -> AsyncIterator[Frames]:
        from jupyter_server.gateway.gateway_client import GatewayClient
        from jupyter_server.utils import url_path_join
        from tornado.escape import url_escape
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        gateway = GatewayClient.instance()
        url = url_path_join(
            gateway.ws_url or "", gateway.kernels_endpoint, url_escape(self.kernel_id), "channels"
        )
        request = HTTPRequest(
            f"{url}?session_id={url_escape(self.client_session)}",
            **gateway.load_connection_args(),  # type: ignore[no-untyped-call]
        )
        try:
            conn = await websocket_connect(request, max_message_size=MAX_MESSAGE)
        except Exception as exc:
            raise RemoteError(
                f"cannot open the {self.name} kernel's WebSocket on the gateway at "
                f"{safe_url(gateway.url or '')}: {type(exc).__name__}: {_reason(exc)}",
                hint="Check that the gateway is running and the server's gateway settings, "
                "then retry.",
            ) from exc
        try:
            yield _GatewayFrames(conn)
        finally:
            conn.close()

    async def connect(self) -> None:
        await connect_in(self.provider.task_group, self)

    async def _lost(self) -> bool:
        """As the gateway says: the server keeps its own model of a gateway's kernel and asks
        the gateway only when it lists kernels, so a kernel the gateway lost (it restarted, or
        culled it) stayed "idle" there, and restarting it failed. One the gateway lost is
        forgotten by the server, as its own listing does, so that the notebook's next session
        starts a new one. An unreachable gateway says nothing about the kernel (False)."""
        kernel = self._kernel()
        if kernel is None:
            return True
        try:
            model = await kernel.refresh_model()
        except Exception:
            return False
        if model is None:
            self.provider.kernel_manager.remove_kernel(self.kernel_id)
            return True
        if model.get("execution_state") == "dead":
            self._died = "died"
        return False

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        if not self._died and await self._lost():
            self._died = GONE_FROM_GATEWAY
        return self._died


class ServerKernels(JupyterKernels["ServerSession | GatewaySession"]):
    """The kernels a workspace uses in this server (see the module docstring)."""

    def __init__(
        self,
        session_manager: Any,
        kernel_manager: Any,
        kernel_spec_manager: Any,
        *,
        server_path: Callable[[str], str] = lambda key: key,
    ) -> None:
        from jupyter_server.gateway.managers import GatewayMappingKernelManager

        on_gateway = isinstance(kernel_manager, GatewayMappingKernelManager)
        super().__init__(GatewaySession if on_gateway else ServerSession, server_path)
        self.session_manager = session_manager
        self.kernel_manager = kernel_manager
        self.kernel_spec_manager = kernel_spec_manager
        self.task_group: TaskGroup | None = None  # where gateway kernels' WebSockets are read

    def attach(self, tg: TaskGroup) -> None:
        self.task_group = tg

    async def replace(self, session: ServerSession | GatewaySession) -> None:
        await super().replace(session)
        if isinstance(session, GatewaySession):  # its WebSocket is the old kernel's
            session._ws = None
            await session.connect()

    async def _authorize(self, caller: Caller, action: str, resource: str) -> None:
        await require(caller, action, resource)

    async def _kernelspecs(self) -> dict[str, KernelSpecInfo]:
        try:
            found = await ensure_async(self.kernel_spec_manager.get_all_specs())
        except Exception as exc:  # a gateway that does not answer: tornado's HTTPError
            raise RemoteError(
                f"the Jupyter Server could not list its kernelspecs: {_reason(exc)}",
                hint="Check the Jupyter Server's log (and the gateway its kernels run on, if "
                "any), then retry.",
            ) from exc
        return specs_by_name(found)

    async def _find_or_start(
        self, key: str, path: str, kernel_name: str
    ) -> tuple[Mapping[str, Any], bool]:
        for model in await self.session_manager.list_sessions():
            if model.get("path") == path and model.get("kernel"):
                return model, False
        try:
            model = await self.session_manager.create_session(
                path=path, name=posixpath.basename(path), type="notebook", kernel_name=kernel_name
            )
        except Exception as exc:
            raise KernelError(
                f"the Jupyter Server could not start a {kernel_name} kernel for {key!r}: {exc}.",
                hint="Check the Jupyter Server's log for the kernel's errors.",
            ) from exc
        return model, True
