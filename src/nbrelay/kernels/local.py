"""Local kernels: processes started with jupyter_client's async kernel manager.

* Every kernel is launched through the workspace's ``LaunchPolicy`` (command prefix, transport,
  environment without secrets), in its own process group, with stdout on ``/dev/null`` and
  stderr on a pipe whose last lines are kept to explain a failed start: nothing reaches fd 1,
  which is the stdio MCP transport.
* No kernel outlives nbrelay: ``aclose`` shuts them all down, ``JPY_PARENT_PID`` makes ipykernel
  exit when nbrelay dies, ``setpriv --pdeathsig KILL`` (where available) does the same for any
  kernel, and an ``atexit`` hook kills the process groups that are left.
* A kernel that dies at start-up (or at a restart) because another process bound one of its
  ports first is started again on new ports (``PORT_TRIES`` starts in all).
* A small pool of warm kernels of the default kernelspec makes the first run in a new notebook
  fast: a warm kernel moves to the notebook's folder when it is handed out.

jupyter_client's exceptions stop here and become ``KernelError``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay import runtime
from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.kernels import deno
from nbrelay.kernels.base import KernelInfo, KernelSpecInfo, LaunchPolicy
from nbrelay.kernels.launch import (
    DENO_KERNEL,
    PORT_TRIES,
    StderrTail,
    abandon,
    close_all,
    manager_class,
    owned_kernels_dir,
    owned_runtime_dir,
    port_taken,
    register_owned_kernelspecs,
    wait_ready,
    with_pdeathsig,
)
from nbrelay.kernels.local_session import LocalSession

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from jupyter_client.kernelspec import KernelSpecManager

    from nbrelay.config import Settings

logger = logging.getLogger("nbrelay.kernels.local")


class LocalKernels:
    """Kernels as local processes (see the module docstring and ``KernelProvider``)."""

    on_this_machine = True

    def __init__(
        self,
        *,
        policy: LaunchPolicy | None = None,
        pool_size: int = 1,
        default_kernel: str = "python3",
        pool_cwd: str | None = None,
        startup_timeout: float = 60.0,
        output_cap: int = 0,
        open_folder: Callable[[str], int] | None = None,
    ) -> None:
        self.policy = policy or LaunchPolicy()
        # Opens a kernel's folder as the store checked it (a descriptor), for a sandbox to bind.
        self.open_folder = open_folder
        self.output_cap = output_cap  # characters one stdout/stderr flush may send (0: no cap)
        self.pool_size = pool_size
        self.default_kernel = default_kernel
        self.pool_cwd = pool_cwd or os.getcwd()
        self.startup_timeout = startup_timeout
        self._sessions: dict[str, LocalSession] = {}
        self._pool: list[LocalSession] = []
        self._filling = False
        self._tg: TaskGroup | None = None
        self._ksm: KernelSpecManager | None = None
        # jupyter_client's spec manager is not thread-safe (it imports ipykernel lazily, and a
        # listing runs on a worker thread while a start reads a spec on the event loop).
        self._ksm_lock = threading.Lock()
        self._starting: dict[str, anyio.Lock] = {}
        self._closed = False
        self._start_slots: anyio.Semaphore | None = None

    # -- kernelspecs ----------------------------------------------------------------------

    def _spec_manager(self) -> KernelSpecManager:
        if self._ksm is None:
            from jupyter_client.kernelspec import KernelSpecManager
            from jupyter_core.paths import jupyter_path

            owned = owned_kernels_dir()
            register_owned_kernelspecs()
            # jupyter_client's default folders plus nbrelay's own, named here because computing
            # the default imports all of IPython (megabytes) just to find ~/.ipython.
            ipython = os.environ.get("IPYTHONDIR") or os.path.join(
                os.path.expanduser("~"), ".ipython"
            )
            kernel_dirs = [*jupyter_path("kernels"), os.path.join(ipython, "kernels"), str(owned)]
            self._ksm = KernelSpecManager(kernel_dirs=kernel_dirs)
        return self._ksm

    async def kernelspecs(self, caller: Caller) -> list[KernelSpecInfo]:
        def read() -> dict[str, Any]:
            with self._ksm_lock:
                return self._spec_manager().get_all_specs()

        specs = await anyio.to_thread.run_sync(read)
        owned = str(owned_kernels_dir())
        out = []
        for name, entry in sorted(specs.items()):
            spec = entry.get("spec") or {}
            out.append(
                KernelSpecInfo(
                    name=name,
                    display_name=str(spec.get("display_name", name)),
                    language=str(spec.get("language", "")),
                    owned=str(entry.get("resource_dir", "")).startswith(owned),
                )
            )
        return out

    def _language(self, name: str) -> str:
        from jupyter_client.kernelspec import NoSuchKernel

        with self._ksm_lock:
            manager = self._spec_manager()
            try:
                spec = manager.get_kernel_spec(name)
            except NoSuchKernel as exc:
                known = ", ".join(sorted(manager.find_kernel_specs())) or "none"
                hint = f"Installed kernelspecs: {known}."
                if name == DENO_KERNEL:
                    hint += " The Deno kernel comes with `pip install nbrelay[deno]`."
                raise KernelError(
                    f"no kernelspec named {name!r} is installed.",
                    hint=f"{hint} {act('set_kernel')}",
                ) from exc
            except (OSError, ValueError) as exc:  # unreadable folder, broken kernel.json
                raise KernelError(
                    f"the kernelspec {name!r} could not be read: {type(exc).__name__}: {exc}.",
                    hint="Check it with `jupyter kernelspec list` and fix or reinstall it.",
                ) from exc
        return str(spec.language or "")

    # -- sessions -------------------------------------------------------------------------

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    @property
    def closed(self) -> bool:
        return self._closed

    def get(self, key: str) -> LocalSession | None:
        return self._sessions.get(key)

    def running(self) -> list[KernelInfo]:
        return [s.info for s in self._sessions.values()]

    async def refresh(self) -> None:
        return None  # nbrelay's own processes: it knows their state

    async def session(
        self, key: str, caller: Caller, *, kernel_name: str, cwd: str
    ) -> LocalSession:
        if self._closed:
            raise KernelError("nbrelay is shutting down; no kernel can start now.")
        lock = self._starting.setdefault(key, anyio.Lock())
        async with lock:
            found = self._sessions.get(key)
            if found is not None and found.name == kernel_name:
                return found
            if found is not None:
                await self.shutdown(key, caller)
            session = await self._take_warm(kernel_name, key, cwd)
            if session is None:
                session = await self._start(kernel_name, key, cwd)
            self._sessions[key] = session
            self._refill()
            return session

    async def _take_warm(self, kernel_name: str, key: str, cwd: str) -> LocalSession | None:
        while self._pool:
            warm = self._pool.pop(0)
            if warm.name != kernel_name or await warm.exit_status() is not None:
                await warm.shutdown()
                continue
            try:
                await warm.prepare(key, cwd)
            except (KernelError, TimeoutError):
                await warm.shutdown()
                continue
            return warm
        return None

    def _refill(self) -> None:
        if self._tg is None or self._filling or self._closed:
            return
        if len(self._pool) >= self.pool_size:
            return
        self._filling = True
        self._tg.start_soon(self._fill_pool)

    async def _fill_pool(self) -> None:
        try:
            while not self._closed and len(self._pool) < self.pool_size:
                try:
                    warm = await self._start(self.default_kernel, "", self.pool_cwd)
                except KernelError:
                    return
                if self.closed:
                    await warm.shutdown()
                    return
                self._pool.append(warm)
        finally:
            self._filling = False

    async def _start(self, kernel_name: str, key: str, cwd: str) -> LocalSession:
        # Kernels start a few at a time (one per core): a burst of notebooks that all need one
        # queues here instead of starving every start past its time limit.
        if self._start_slots is None:
            self._start_slots = anyio.Semaphore(max(2, os.cpu_count() or 2))
        async with self._start_slots:
            for _ in range(PORT_TRIES - 1):
                try:
                    return await self._launch(kernel_name, key, cwd)
                except KernelError as exc:
                    # jupyter_client picks free TCP ports, then the kernel binds them: on a busy
                    # machine another process can take one in between. New ports, a new try.
                    if not port_taken(exc):
                        raise
                    logger.info(
                        "a port given to the %r kernel was taken before it bound it; "
                        "starting it again on new ports",
                        kernel_name,
                    )
            return await self._launch(kernel_name, key, cwd)

    async def _launch(self, kernel_name: str, key: str, cwd: str) -> LocalSession:
        language = self._language(kernel_name)
        km_class = manager_class()
        km: Any = km_class(kernel_name=kernel_name, kernel_spec_manager=self._spec_manager())
        policy = deno.launch_policy(self.policy, kernel_name)  # Deno: V8 heap flags
        km.policy = with_pdeathsig(policy)
        km.output_cap = self.output_cap
        km.transport = policy.transport
        # The connection file (and, over ipc, the socket folder) in the private runtime folder.
        km.connection_file = str(owned_runtime_dir() / f"kernel-{uuid.uuid4()}.json")
        if policy.transport == "ipc":
            # jupyter_client names each socket "<ip>-<port>": "kernel-<n>" in that folder.
            km.ip = str(Path(runtime.make_socket_folder("ipc-", len("kernel-65535"))) / "kernel")
        km.shutdown_wait_time = 2.0
        env = policy.environment(os.environ)
        env["JPY_SESSION_NAME"] = key
        stderr = StderrTail()
        folder_fds = self._folder_opener(cwd)
        fds = folder_fds() if folder_fds is not None else ()
        km.cwd_fds = fds
        try:
            await km.start_kernel(
                cwd=cwd or None,  # a store without local files gives no folder
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                **policy.popen_kwargs(),
                **({"pass_fds": fds} if fds else {}),
            )
        except (OSError, RuntimeError, ValueError) as exc:
            raise KernelError(
                f"the {kernel_name!r} kernel could not start: {exc}.",
                hint="Check the kernelspec's command (jupyter kernelspec list), or pick another "
                "kernel in the notebook's metadata.",
            ) from exc
        except BaseException:
            # Cancelled mid-start (a pool refill when nbrelay stops): the process may exist
            # already, and nothing else holds it, so it goes now.
            with anyio.CancelScope(shield=True):
                await abandon(km)
            raise
        finally:
            close_all(fds)
        stderr.follow(getattr(getattr(km.provisioner, "process", None), "stderr", None))
        kc = km.client()
        kc.start_channels(hb=False)  # liveness is watched on the process, not a heartbeat thread
        session = LocalSession(
            km,
            kc,
            key=key,
            name=kernel_name,
            language=language,
            cwd=cwd,
            stderr=stderr,
            startup_timeout=self.startup_timeout,
            folder_fds=folder_fds,
        )
        try:
            await wait_ready(kc, kernel_name, self.startup_timeout, stderr)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.shutdown()
            raise
        return session

    def _folder_opener(self, cwd: str) -> Callable[[], tuple[int, ...]] | None:
        """For a policy that binds the kernel's folder: a function that opens it (checked by
        the store) twice, for the folder's path and its real path."""
        opener = self.open_folder
        if not cwd or opener is None or not self.policy.binds_folder():
            return None

        def open_twice() -> tuple[int, ...]:
            first = opener(cwd)
            try:
                return (first, os.dup(first))
            except OSError:
                os.close(first)
                raise

        return open_twice

    async def shutdown(self, key: str, caller: Caller, *, wait: bool = True) -> bool:
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        if not wait and self._tg is not None and not self._closed:
            # A polite shutdown takes about a second; the slot is free once it is unlisted.
            self._tg.start_soon(self._stop, session)
            return True
        await self._stop(session)
        return True

    @staticmethod
    async def _stop(session: LocalSession) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await session.shutdown()
            except Exception:  # in the background: the server must live on
                logger.exception("stopping the kernel of %s failed", session.key)

    async def aclose(self) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            sessions = [*self._sessions.values(), *self._pool]
            self._sessions.clear()
            self._pool.clear()
            async with anyio.create_task_group() as tg:
                for s in sessions:
                    tg.start_soon(s.shutdown)


def local_kernels(
    settings: Settings, *, root: str | None = None, open_folder: Callable[[str], int] | None = None
) -> LocalKernels:
    """Local kernels as ``settings`` ask for them. ``root`` is where warm kernels wait (None:
    no warm kernel knows its folder in advance); ``open_folder`` opens a kernel's folder as the
    store checked it (file mode), for a sandbox to bind."""
    from nbrelay.kernels.sandbox import launch_policy

    return LocalKernels(
        policy=launch_policy(settings),
        # a warm kernel would have to see every folder: sandboxed kernels start cold
        pool_size=0 if settings.sandbox else settings.kernel_pool,
        pool_cwd=root,
        output_cap=settings.cell_output_limit,
        open_folder=open_folder,
    )


__all__ = ["LocalKernels", "LocalSession", "local_kernels"]
