"""Starting local kernel processes: the kernelspecs nbrelay owns (Deno), the kernel manager
that launches through a ``LaunchPolicy``, the stderr tail that explains a failed start, and the
process groups killed at exit so that no kernel outlives nbrelay.

jupyter_client's exceptions stop here (and in ``local``) and become ``KernelError``.
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
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay import runtime
from nbrelay.errors import KernelError, PathError
from nbrelay.kernels.base import LaunchPolicy
from nbrelay.notebook.outputs import Limits

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager

logger = logging.getLogger("nbrelay.kernels.local")
LIVE_GROUPS: set[int] = set()  # process groups of running kernels, killed at exit
_STDERR_TAIL = 4000
DENO_KERNEL = "deno"


@atexit.register
def _kill_leftovers() -> None:  # pragma: no cover - runs at interpreter exit
    for pgid in list(LIVE_GROUPS):
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


class StderrTail:
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
# It keeps what the output fold keeps of a cut output (notebook/outputs.py, Limits): the start and
# the last ``kept_tail`` characters, so a flush far over the limit still leaves the cell its end.
# The class is patched because IPython re-wraps the stream instances' ``write`` on every cell.
# The marker where it cuts is counted by the output fold (kernel_cut), so the cell's notice says
# how much was dropped.
_OUTPUT_CAP = """
def _nbrelay_output_cap(limit, start, end):
    import sys
    cls = type(sys.stdout)
    original = getattr(cls, "_flush_buffers", None)
    if original is None or getattr(cls, "_nbrelay_capped", False):
        return
    def _flush_buffers(self):
        for parent, data in original(self):
            if isinstance(data, str) and len(data) > limit:
                cut = len(data) - start - end
                data = (data[:start] + f"\\n… [{cut:,} characters cut: over {limit:,} "
                        f"printed at once] …\\n" + data[len(data) - end:])
            yield parent, data
    cls._flush_buffers = _flush_buffers
    cls._nbrelay_capped = True
_nbrelay_output_cap(%d, %d, %d)
del _nbrelay_output_cap
"""


def output_cap_argument(limit: int) -> str:
    """The ipykernel command-line argument that installs the output cap in the kernel."""
    limits = Limits(limit=limit)
    code = _OUTPUT_CAP % (limit, limits.kept_start, limits.kept_tail)
    encoded = base64.b64encode(code.encode()).decode()
    return f"--IPKernelApp.exec_lines=exec(__import__('base64').b64decode('{encoded}').decode())"


def manager_class() -> type[AsyncKernelManager]:
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


async def abandon(km: Any) -> None:
    """End a kernel whose start did not finish, and its connection file."""
    try:
        if km.has_kernel:
            await km.shutdown_kernel(now=True)
        else:
            km.cleanup_resources()
    except Exception:
        logger.debug("could not end a half-started kernel", exc_info=True)


async def drain(kc: AsyncKernelClient) -> None:
    """Discard messages already queued (from a previous process, after a restart)."""
    from queue import Empty

    for channel in (kc.iopub_channel, kc.shell_channel):
        for _ in range(10_000):
            try:
                await channel.get_msg(timeout=0)
            except Empty:
                break


async def wait_ready(kc: AsyncKernelClient, name: str, limit: float, stderr: StderrTail) -> None:
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


PORT_TRIES = 3  # starts (or restarts) of one kernel whose port another process took first


def port_taken(error: KernelError) -> bool:
    """Whether a kernel died at start-up because a port it was given was in use (ZeroMQ's
    EADDRINUSE, whatever the kernel's language)."""
    return "Address already in use" in str(error)


def close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def with_pdeathsig(policy: LaunchPolicy) -> LaunchPolicy:
    """On Linux, make the kernel die with nbrelay even when killed (``setpriv --pdeathsig``)."""
    if not sys.platform.startswith("linux"):
        return policy
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return policy
    from dataclasses import replace

    return replace(policy, argv_prefix=(setpriv, "--pdeathsig", "KILL", *policy.argv_prefix))
