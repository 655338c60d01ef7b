"""Starting and stopping the real servers the suite runs: a Jupyter Server (``tests.live.server``),
a JupyterHub (``tests/hub``) and nbrelay over HTTP (``tests.http.harness``).

Each listens on 127.0.0.1 on a free port (``free_port``), is waited for with a bounded poll of a
condition (``wait_until`` in a fixture, ``wait_for`` in an async test) and is stopped by the PID
the suite started (``stop_by_pid``). ``running`` and ``servers_of_a_test`` are the two fixture
shapes: one server for many tests (each test working in a folder of its own, ``Folders``), and
servers a test starts for itself, all stopped when it ends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import anyio

from tests.helpers import PATIENCE, call, notebook, write_notebook

P = ParamSpec("P")
T = TypeVar("T")


class Server(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Server)


def _ephemeral_low() -> int:
    """The lowest port of the range the kernel hands out for port 0 (kernels' ZeroMQ channels,
    outgoing connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, chosen below the ephemeral range:
    a port the kernel handed out for port 0 could be taken again, between this check and the
    server's start, by a Jupyter kernel's channel or an outgoing connection of another test."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    ready: Callable[[], T | None],
    what: str,
    *,
    seconds: float,
    proc: subprocess.Popen[Any] | None = None,
    log: Callable[[], str] = lambda: "",
    interval: float = 0.2,
) -> T:
    """Poll ``ready`` until it returns something true, and return that. Fail (``what``, then the
    end of the server's ``log``) as soon as ``proc`` has exited, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (result := ready()):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: it exited with {proc.returncode}:\n{log()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {seconds:g} s:\n{log()}")
        time.sleep(interval)
    return result


async def wait_for(
    check: Callable[[], Awaitable[bool] | bool], seconds: float, *, interval: float = 0.1
) -> None:
    """Poll ``check`` until it is true; fail after ``seconds`` (at least ``PATIENCE``: a bound
    against hanging, not a timing target)."""
    with anyio.fail_after(max(seconds, PATIENCE)):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await anyio.sleep(interval)


def _signal(pid: int, sig: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_by_pid(
    proc: subprocess.Popen[Any],
    *,
    grace: float = 10.0,
    term_group: bool = False,
    kill_group: bool = False,
) -> None:
    """Stop a process the suite started, by its PID: SIGTERM, then SIGKILL after ``grace``
    seconds. ``term_group``/``kill_group`` send that signal to its whole process group (it was
    started with ``start_new_session``); with ``kill_group``, whatever of the group outlives it
    (kernels a server started) is killed too."""
    if proc.poll() is not None:
        return
    _signal(proc.pid, signal.SIGTERM, group=term_group)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        _signal(proc.pid, signal.SIGKILL, group=kill_group)
        proc.wait(10)
    if kill_group:
        with contextlib.suppress(PermissionError):
            _signal(proc.pid, signal.SIGKILL, group=True)


def start_logged(
    command: list[str], *, cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own (``stop_by_pid`` ends the group), its
    output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def tail(log: Path, lines: int) -> str:
    """The last ``lines`` lines of a server's log ("" before it has one)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def running(server: S) -> Iterator[S]:
    """``server`` started, and stopped by PID when the block ends (also when it fails to start)."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def servers_of_a_test(make: Callable[Concatenate[int, P], S]) -> Iterator[Callable[P, S]]:
    """A ``start(...)`` for a test: each call makes a server with ``make(n, ...)`` (``n`` counts
    the test's servers from 0, for their folders) and starts it; all are stopped at the end."""
    started: list[S] = []

    def start(*args: P.args, **kwargs: P.kwargs) -> S:
        server = make(len(started), *args, **kwargs)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


class Folders:
    """Fresh folders in a shared server's root, one a test: ``e0001``, ``e0002``, ..."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._numbers = itertools.count(1)

    def fresh(self, root: Path) -> tuple[str, Path]:
        """A new folder in ``root``: (its server path, its local path)."""
        name = f"{self._prefix}{next(self._numbers):04d}"
        path = root / name
        path.mkdir()
        return name, path


async def rewrite_and_wait_reloaded(client: Any, file: Path, *sources: str) -> None:
    """Rewrite a notebook's file from outside nbrelay (``sources``, one cell each) and wait until
    reads through ``client`` show it: the server has reloaded the room from the file."""
    write_notebook(file, notebook(*sources))

    async def reloaded() -> bool:
        read = await call(client, "read_notebook", path=file.name)
        return [c["source"] for c in read["cells"]] == list(sources)

    await wait_for(reloaded, seconds=30)
