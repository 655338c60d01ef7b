"""The kernels of the Jupyter Server nbrelay runs in: its session and kernel managers.

A notebook's kernel is its Jupyter session's kernel, so the agent runs code in the kernel a
person with the notebook open in JupyterLab uses (and JupyterLab shows the agent's runs). A
notebook without a session gets one, as JupyterLab would make it. Messages go over the
kernel's ZeroMQ channels with a client of nbrelay's own (the person's connection is untouched);
``kernels.execution`` keeps only the replies to nbrelay's requests. nbrelay shuts down only the
sessions it started; a person's kernel is only disconnected from. Every operation asks
Jupyter's authorizer first (``kernels`` execute; listing kernelspecs, ``kernelspecs`` read).
The lifecycle is ``kernels.sessions``'s, shared with the remote kernels.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
from collections.abc import Callable, Mapping
from typing import Any

from jupyter_core.utils import ensure_async

from nbrelay.caller import Caller
from nbrelay.errors import KernelError
from nbrelay.extension.access import require
from nbrelay.kernels.base import KernelSpecInfo, specs_by_name
from nbrelay.kernels.sessions import JupyterKernels, JupyterSession, ZmqChannels

logger = logging.getLogger("nbrelay.extension")


class ServerSession(ZmqChannels, JupyterSession):
    """One kernel of the server, through a ZeroMQ client of its own (see ``KernelSession``)."""

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

    async def connect(self) -> None:
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

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        kernel = self._kernel()
        if kernel is None:
            return "is gone from the Jupyter Server (shut down or culled)"
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

    async def _restart_kernel(self) -> None:
        km = self.provider.kernel_manager
        try:
            if self.kernel_id in km:
                await ensure_async(km.restart_kernel(self.kernel_id))
            else:  # the kernel is gone (culled): a new session for the notebook
                await self.provider.replace(self)
        except KernelError:
            self._state = "dead"
            raise
        except Exception as exc:
            raise self._restart_failed(f"{exc}.") from exc

    async def _after_restart(self) -> None:
        self._disconnect()
        await self.connect()

    async def _delete(self) -> None:
        if self.session_id:
            await self.provider.session_manager.delete_session(self.session_id)
        elif self.kernel_id in self.provider.kernel_manager:
            await ensure_async(self.provider.kernel_manager.shutdown_kernel(self.kernel_id))


class ServerKernels(JupyterKernels[ServerSession]):
    """The kernels a workspace uses in this server (see the module docstring)."""

    def __init__(
        self,
        session_manager: Any,
        kernel_manager: Any,
        kernel_spec_manager: Any,
        *,
        server_path: Callable[[str], str] = lambda key: key,
    ) -> None:
        super().__init__(ServerSession, server_path)
        self.session_manager = session_manager
        self.kernel_manager = kernel_manager
        self.kernel_spec_manager = kernel_spec_manager

    async def _authorize(self, caller: Caller, action: str, resource: str) -> None:
        await require(caller, action, resource)

    async def _kernelspecs(self) -> dict[str, KernelSpecInfo]:
        found = await ensure_async(self.kernel_spec_manager.get_all_specs())
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
