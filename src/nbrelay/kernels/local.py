"""Local kernels: processes started with jupyter_client's async kernel manager.

* Every kernel is launched through the workspace's ``LaunchPolicy`` (command prefix, transport,
  environment without secrets), in its own process group, with stdout on ``/dev/null`` and
  stderr on a pipe whose last lines are kept to explain a failed start: nothing reaches fd 1,
  which is the stdio MCP transport.
* No kernel outlives nbrelay: ``aclose`` shuts them all down, ``JPY_PARENT_PID`` makes ipykernel
  exit when nbrelay dies, ``setpriv --pdeathsig KILL`` (where available) does the same for any
  kernel, and an ``atexit`` hook kills the process groups that are left.
* A small pool of warm kernels of the default kernelspec makes the first run in a new notebook
  fast: a warm kernel moves to the notebook's folder when it is handed out.

jupyter_client's exceptions stop here and become ``KernelError``.
"""

from __future__ import annotations

import atexit
import base64
import collections
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from nbrelay import runtime
from nbrelay.errors import KernelError, PathError, act
from nbrelay.kernels import deno
from nbrelay.kernels.base import KernelInfo, KernelSpecInfo, LaunchPolicy, Msg, msg_type, parent_id

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from jupyter_client.asynchronous.client import AsyncKernelClient
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

logger = logging.getLogger("nbrelay.kernels.local")
_LIVE_GROUPS: set[int] = set()
_STDERR_TAIL = 4000
DENO_KERNEL = "deno"


@atexit.register
def _kill_leftovers() -> None:  # pragma: no cover - runs at interpreter exit
    for pgid in list(_LIVE_GROUPS):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def describe_exit(code: int) -> str:
    """An exit status in plain words: ``was killed by signal 9 (SIGKILL)``, ``exited with code 3``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def owned_kernels_dir() -> Path:
    """The folder of the kernelspecs nbrelay registers itself: "kernels" in nbrelay's private
    runtime folder (checked: see ``nbrelay.runtime``)."""
    return runtime.folder_path(None, "kernels")


def owned_runtime_dir() -> Path:
    """nbrelay's private runtime folder, checked (kernel connection files live there)."""
    return runtime.folder_path()


def deno_executable() -> str | None:
    """The Deno binary of the ``deno`` package (the ``nbrelay[deno]`` extra), if installed."""
    try:
        import deno  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    finder = getattr(deno, "find_deno_bin", None)
    path = finder() if callable(finder) else None
    return str(path) if path and os.path.exists(str(path)) else None


def register_owned_kernelspecs() -> list[str]:
    """Write the kernelspecs nbrelay owns (Deno, when its package is installed) into
    ``owned_kernels_dir()``."""
    names: list[str] = []
    deno_bin = deno_executable()
    if deno_bin is None:
        return names
    spec = {
        "argv": [deno_bin, "jupyter", "--kernel", "--conn", "{connection_file}"],
        "display_name": "Deno (TypeScript, JavaScript)",
        "language": "typescript",
        "metadata": {"nbrelay": {"owned": True}},
        "env": {"NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"},
    }
    text = json.dumps(spec, indent=1).encode("utf-8")
    where = str(runtime.default_dir() / "kernels" / DENO_KERNEL / "kernel.json")
    with runtime.folder_fd(None, "kernels", DENO_KERNEL) as dfd:
        try:
            fd = runtime.open_file(dfd, "kernel.json", os.O_RDONLY, where)
        except PathError:
            current = b""
        else:
            with os.fdopen(fd, "rb") as fh:
                current = fh.read()
        if current != text:  # written beside it, then renamed over it (never through a link)
            tmp = f".kernel.json.{os.getpid()}.tmp"
            fd = runtime.open_file(dfd, tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, tmp)
            with os.fdopen(fd, "wb") as fh:
                fh.write(text)
            os.replace(tmp, "kernel.json", src_dir_fd=dfd, dst_dir_fd=dfd)
    names.append(DENO_KERNEL)
    return names


class _StderrTail:
    """Reads a kernel's stderr pipe in a thread, keeping only its last characters."""

    def __init__(self) -> None:
        self._chunks: collections.deque[str] = collections.deque(maxlen=64)

    def follow(self, stream: Any) -> None:
        if stream is None:
            return
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        thread.start()

    def _read(self, stream: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                chunk = stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096)
                if not chunk:
                    break
                self._chunks.append(chunk.decode("utf-8", "replace"))
        with contextlib.suppress(OSError):
            stream.close()

    def text(self) -> str:
        return "".join(self._chunks)[-_STDERR_TAIL:].strip()


# Run at ipykernel start-up (as an exec_lines entry): cap what one flush of stdout/stderr sends,
# so a single huge print (``print("x" * 10**9)``) never reaches nbrelay as one giant message.
# The class is patched because IPython re-wraps the stream instances' ``write`` on every cell.
# The marker where it cuts is counted by the output fold (notebook/outputs.py, kernel_cut), so
# the cell's notice says how much was dropped.
_OUTPUT_CAP = """
def _nbrelay_output_cap(limit):
    import sys
    cls = type(sys.stdout)
    original = getattr(cls, "_flush_buffers", None)
    if original is None or getattr(cls, "_nbrelay_capped", False):
        return
    def _flush_buffers(self):
        for parent, data in original(self):
            if isinstance(data, str) and len(data) > limit:
                cut = len(data) - 2 * (limit // 2)
                data = (data[: limit // 2] + f"\\n… [{cut:,} characters cut: over {limit:,} "
                        f"printed at once] …\\n" + data[-(limit // 2):])
            yield parent, data
    cls._flush_buffers = _flush_buffers
    cls._nbrelay_capped = True
_nbrelay_output_cap(%d)
del _nbrelay_output_cap
"""


def output_cap_argument(limit: int) -> str:
    """The ipykernel command-line argument that installs the output cap in the kernel."""
    code = base64.b64encode((_OUTPUT_CAP % limit).encode()).decode()
    return f"--IPKernelApp.exec_lines=exec(__import__('base64').b64decode('{code}').decode())"


def _manager_class() -> type[AsyncKernelManager]:
    from jupyter_client.manager import AsyncKernelManager

    class PolicyKernelManager(AsyncKernelManager):
        """An AsyncKernelManager whose command line goes through a LaunchPolicy."""

        policy: LaunchPolicy = LaunchPolicy()
        output_cap: int = 0
        cwd_fds: tuple[int, ...] = ()  # descriptors of the kernel's folder, for this launch

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            argv: list[str] = super().format_kernel_cmd(extra_arguments)
            if self.output_cap and any("ipykernel" in part for part in argv):
                argv.append(output_cap_argument(self.output_cap))
            launch = self.policy.for_launch(
                cwd=str((self._launch_args or {}).get("cwd") or os.getcwd()),
                connection_file=str(self.connection_file),
                ipc_dir=os.path.dirname(self.ip) if self.transport == "ipc" else None,
                cwd_fds=self.cwd_fds,
            )
            return launch.command(argv)

    return PolicyKernelManager


class LocalSession:
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
        stderr: _StderrTail,
        startup_timeout: float,
        folder_fds: Callable[[], tuple[int, ...]] | None = None,
    ) -> None:
        self.km = km
        self._folder_fds = folder_fds
        self.kc = kc
        self.key = key
        self.name = name
        self.language = language
        self.cwd = cwd
        self.started = time.time()
        self.last_activity = self.started
        self.restarts = 0
        self._stderr = stderr
        self._startup_timeout = startup_timeout
        self._state: Literal["starting", "idle", "busy", "dead"] = "idle"
        self._closed = False
        self._remember_group()

    def _remember_group(self) -> None:
        pgid = getattr(self.km.provisioner, "pgid", None)
        if isinstance(pgid, int):
            _LIVE_GROUPS.add(pgid)

    def _forget_group(self) -> None:
        pgid = getattr(self.km.provisioner, "pgid", None)
        if isinstance(pgid, int):
            _LIVE_GROUPS.discard(pgid)

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

    async def send(self, msg_type: str, content: Mapping[str, Any]) -> str:
        self.last_activity = time.time()
        msg = self.kc.session.msg(msg_type, dict(content))
        self.kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    async def _receive(self, channel: Any) -> Msg:
        import zmq

        socket = channel.socket
        if socket is None:
            raise KernelError(f"the {self.name} kernel's connection is closed.")
        while True:
            # Cancellation can only happen while polling, never between receive and return.
            await socket.poll()
            try:
                parts = await socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                continue
            _, smsg = self.kc.session.feed_identities(parts)
            msg: Msg = self.kc.session.deserialize(smsg)
            self.last_activity = time.time()
            return msg

    async def iopub(self) -> Msg:
        msg = await self._receive(self.kc.iopub_channel)
        if msg_type(msg) == "status":
            state = (msg.get("content") or {}).get("execution_state")
            if state in ("idle", "busy"):
                self._state = state
        return msg

    async def shell(self) -> Msg:
        return await self._receive(self.kc.shell_channel)

    async def exit_status(self) -> str | None:
        code = self._returncode()
        if code is None:
            return None
        if self._closed:
            return "was shut down"
        return describe_exit(code)

    async def interrupt(self) -> None:
        self.last_activity = time.time()
        if self._returncode() is not None:
            return
        try:
            await self.km.interrupt_kernel()
        except (RuntimeError, OSError) as exc:
            raise KernelError(f"could not interrupt the {self.name} kernel: {exc}.") from exc

    async def restart(self) -> None:
        self._forget_group()
        self._state = "starting"
        fds: tuple[int, ...] = ()
        try:
            if self._folder_fds is not None:  # the folder checked again, for this launch
                fds = self._folder_fds()
                km: Any = self.km
                km.cwd_fds = fds
                km._launch_args["pass_fds"] = fds
            await self.km.restart_kernel(now=True)
            self._stderr = _StderrTail()
            process = getattr(self.km.provisioner, "process", None)
            self._stderr.follow(getattr(process, "stderr", None))
            self._remember_group()
            await _wait_ready(self.kc, self.name, self._startup_timeout, self._stderr)
        except KernelError:
            self._state = "dead"
            raise
        except (RuntimeError, OSError) as exc:
            self._state = "dead"
            raise KernelError(
                f"the {self.name} kernel could not be restarted: {exc}.",
                hint=f"Retry ({act('restart')} again), or run a cell, which starts a new kernel.",
            ) from exc
        finally:
            _close_all(fds)
        await _drain(self.kc)
        self.restarts += 1
        self._state = "idle"
        self.last_activity = time.time()

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


async def _abandon(km: Any) -> None:
    """End a kernel whose start did not finish, and its connection file."""
    try:
        if km.has_kernel:
            await km.shutdown_kernel(now=True)
        else:
            km.cleanup_resources()
    except Exception:
        logger.debug("could not end a half-started kernel", exc_info=True)


async def _drain(kc: AsyncKernelClient) -> None:
    """Discard messages already queued (from a previous process, after a restart)."""
    from queue import Empty

    for channel in (kc.iopub_channel, kc.shell_channel):
        for _ in range(10_000):
            try:
                await channel.get_msg(timeout=0)
            except Empty:
                break


async def _wait_ready(kc: AsyncKernelClient, name: str, limit: float, stderr: _StderrTail) -> None:
    try:
        with anyio.fail_after(limit):
            await kc.wait_for_ready(timeout=limit)
    except (RuntimeError, TimeoutError) as exc:
        await anyio.sleep(0.2)  # let the stderr reader catch the last lines
        tail = stderr.text()
        why = "died during start-up" if "died" in str(exc) else f"did not answer within {limit:g} s"
        raise KernelError(
            f"the {name!r} kernel {why}."
            + (f" Its last stderr lines:\n{tail}" if tail else " It wrote nothing on stderr."),
            hint="Check that the kernelspec's command works (jupyter kernelspec list), or pick "
            "another kernel in the notebook's metadata.",
        ) from exc


class LocalKernels:
    """Kernels as local processes (see the module docstring and ``KernelProvider``)."""

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

    async def kernelspecs(self) -> list[KernelSpecInfo]:
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
                    hint=hint + " Set the notebook's kernelspec to one of them.",
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

    async def session(self, key: str, *, kernel_name: str, cwd: str) -> LocalSession:
        if self._closed:
            raise KernelError("nbrelay is shutting down; no kernel can start now.")
        lock = self._starting.setdefault(key, anyio.Lock())
        async with lock:
            found = self._sessions.get(key)
            if found is not None and found.name == kernel_name:
                return found
            if found is not None:
                await self.shutdown(key)
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
            return await self._launch(kernel_name, key, cwd)

    async def _launch(self, kernel_name: str, key: str, cwd: str) -> LocalSession:
        language = self._language(kernel_name)
        km_class = _manager_class()
        km: Any = km_class(kernel_name=kernel_name, kernel_spec_manager=self._spec_manager())
        policy = deno.launch_policy(self.policy, kernel_name)  # Deno: V8 heap flags
        km.policy = _with_pdeathsig(policy)
        km.output_cap = self.output_cap
        km.transport = policy.transport
        # The connection file (and, over ipc, the socket folder) in the private runtime folder.
        km.connection_file = str(owned_runtime_dir() / f"kernel-{uuid.uuid4()}.json")
        if policy.transport == "ipc":
            km.ip = str(Path(runtime.make_temp_folder("ipc-")) / "kernel")
        km.shutdown_wait_time = 2.0
        env = policy.environment(os.environ)
        env["JPY_SESSION_NAME"] = key
        stderr = _StderrTail()
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
                await _abandon(km)
            raise
        finally:
            _close_all(fds)
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
            await _wait_ready(kc, kernel_name, self.startup_timeout, stderr)
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

    async def shutdown(self, key: str) -> bool:
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        with anyio.CancelScope(shield=True):
            await session.shutdown()
        return True

    async def aclose(self) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            sessions = [*self._sessions.values(), *self._pool]
            self._sessions.clear()
            self._pool.clear()
            async with anyio.create_task_group() as tg:
                for s in sessions:
                    tg.start_soon(s.shutdown)


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _with_pdeathsig(policy: LaunchPolicy) -> LaunchPolicy:
    """On Linux, make the kernel die with nbrelay even when killed (``setpriv --pdeathsig``)."""
    if not sys.platform.startswith("linux"):
        return policy
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return policy
    from dataclasses import replace

    return replace(policy, argv_prefix=(setpriv, "--pdeathsig", "KILL", *policy.argv_prefix))
