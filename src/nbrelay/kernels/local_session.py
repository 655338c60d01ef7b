"""One local kernel: its process (through jupyter_client's kernel manager) and its client."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError
from nbrelay.kernels.base import KernelInfo, parent_id
from nbrelay.kernels.launch import (
    LIVE_GROUPS,
    PORT_TRIES,
    StderrTail,
    close_all,
    describe_exit,
    drain,
    port_taken,
    wait_ready,
)
from nbrelay.kernels.sessions import ZmqChannels

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager

logger = logging.getLogger("nbrelay.kernels.local")


class LocalSession(ZmqChannels):
    """One local kernel process and its client (see ``KernelSession``)."""

    def __init__(
        self,
        km: AsyncKernelManager,
        kc: AsyncKernelClient,
        *,
        key: str,
        name: str,
        language: str,
        cwd: str,
        stderr: StderrTail,
        startup_timeout: float,
        folder_fds: Callable[[], tuple[int, ...]] | None = None,
    ) -> None:
        super().__init__(key=key, name=name, language=language)
        self.km = km
        self._folder_fds = folder_fds
        self.kc = kc
        self.cwd = cwd
        self._stderr = stderr
        self._startup_timeout = startup_timeout
        self._remember_group()

    def _remember_group(self) -> None:
        pgid = getattr(self.km.provisioner, "pgid", None)
        if isinstance(pgid, int):
            LIVE_GROUPS.add(pgid)

    def _forget_group(self) -> None:
        pgid = getattr(self.km.provisioner, "pgid", None)
        if isinstance(pgid, int):
            LIVE_GROUPS.discard(pgid)

    @property
    def pid(self) -> int | None:
        process = getattr(self.km.provisioner, "process", None)
        pid = getattr(process, "pid", None)
        return pid if isinstance(pid, int) else None

    @property
    def info(self) -> KernelInfo:
        state = self._state
        if self._returncode() is not None:
            state = "dead"
        return KernelInfo(
            key=self.key,
            kernel_id=str(self.km.kernel_id),
            name=self.name,
            language=self.language,
            cwd=self.cwd,
            started=self.started,
            last_activity=self.last_activity,
            state=state,
            pid=self.pid,
            restarts=self.restarts,
        )

    def _returncode(self) -> int | None:
        process = getattr(self.km.provisioner, "process", None)
        if process is None:
            return 0 if self._closed else None
        code = process.poll()
        return code if isinstance(code, int) else None

    async def exit_status(self) -> str | None:
        code = self._returncode()
        if code is None:
            return None
        if self._closed:
            return "was shut down"
        return describe_exit(code)

    async def interrupt(self, caller: Caller) -> None:
        self.last_activity = time.time()
        if self._returncode() is not None:
            return
        try:
            await self.km.interrupt_kernel()
        except (RuntimeError, OSError) as exc:
            raise KernelError(f"could not interrupt the {self.name} kernel: {exc}.") from exc

    async def restart(self, caller: Caller) -> None:
        self._forget_group()
        self._state = "starting"
        for attempt in range(1, PORT_TRIES + 1):
            try:
                await self._relaunch(new_ports=attempt > 1)
                break
            except KernelError as exc:
                # The kernel binds the same ports again; another process can take one in the
                # moment between the old process's exit and the new one's bind.
                if attempt == PORT_TRIES or not port_taken(exc):
                    self._state = "dead"
                    raise
                logger.info(
                    "a port of the %r kernel was taken while it restarted; "
                    "restarting it on new ports",
                    self.name,
                )
        await drain(self.kc)
        self._restarted()

    async def _relaunch(self, *, new_ports: bool) -> None:
        fds: tuple[int, ...] = ()
        km: Any = self.km
        try:
            if self._folder_fds is not None:  # the folder checked again, for this launch
                fds = self._folder_fds()
                km.cwd_fds = fds
                km._launch_args["pass_fds"] = fds
            if new_ports:
                # jupyter_client's local provisioner picks ports once per kernel manager and
                # keeps them across restarts; forgetting them makes it pick free ones again.
                km.provisioner.ports_cached = False
            await km.restart_kernel(now=True)
            if new_ports:  # a client of the kernel's new ports
                old, self.kc = self.kc, km.client()
                old.stop_channels()
                self.kc.start_channels(hb=False)
            self._stderr = StderrTail()
            process = getattr(km.provisioner, "process", None)
            self._stderr.follow(getattr(process, "stderr", None))
            self._remember_group()
            await wait_ready(self.kc, self.name, self._startup_timeout, self._stderr)
        except KernelError:
            raise
        except (RuntimeError, OSError) as exc:
            raise self._restart_failed(f"{exc}.") from exc
        finally:
            close_all(fds)

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._forget_group()
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        try:
            with anyio.fail_after(10):
                await self.km.shutdown_kernel(now=self._returncode() is not None)
        except Exception:  # the process must go whatever went wrong in the polite path
            with contextlib.suppress(Exception):
                await self.km.shutdown_kernel(now=True)
        if self.km.transport == "ipc":  # the kernel's socket folder goes with it
            await anyio.to_thread.run_sync(
                lambda: shutil.rmtree(os.path.dirname(self.km.ip), ignore_errors=True)
            )
        self._state = "dead"

    async def prepare(self, key: str, cwd: str) -> None:
        """Move a warm (pool) kernel to a notebook: its key, folder and session name."""
        self.key = key
        self.cwd = cwd
        if self.language != "python":
            return
        code = (
            "import os as __nbrelay_os\n"
            f"__nbrelay_os.chdir({cwd!r})\n"
            f"__nbrelay_os.environ['JPY_SESSION_NAME'] = {key!r}\n"
            "del __nbrelay_os\n"
        )
        msg_id = await self.send(
            "execute_request",
            {"code": code, "silent": True, "store_history": False, "allow_stdin": False},
        )
        with anyio.fail_after(self._startup_timeout):
            while True:
                reply = await self.shell()
                if parent_id(reply) == msg_id:
                    break
        if (reply.get("content") or {}).get("status") != "ok":
            raise KernelError(f"the warm kernel could not move to {cwd!r}.")
