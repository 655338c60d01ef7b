"""Process set-up: the umask is read without being changed, and setup is idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import anyio
import pytest

from nbrelay import process


def test_the_umask_is_read_in_a_fresh_process_and_setup_runs_once() -> None:
    code = (
        "import os\n"
        "os.umask(0o027)\n"
        "from nbrelay import process\n"
        "process.setup()\n"
        "os.umask(0o077)\n"
        "process.setup()\n"  # a second call keeps what the first recorded
        "print(oct(process.umask()), oct(os.umask(0o077)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["0o27", "0o77"]


def test_pid_alive_tells_live_from_gone() -> None:
    assert process.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    assert not process.pid_alive(child.pid)


@pytest.mark.anyio
async def test_the_periodic_memory_release_runs_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside a Jupyter Server holding big rooms a trim of the heap takes milliseconds; every
    client of that server would wait behind it on the event loop."""
    from nbrelay.workspace import facade

    threads: list[threading.Thread] = []
    done = anyio.Event()

    def trim() -> None:
        threads.append(threading.current_thread())
        done.set()

    monkeypatch.setattr(facade, "release_memory", trim)
    async with anyio.create_task_group() as tg:
        tg.start_soon(facade._release_memory, 0.01)
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert threads
    assert threads[0] is not threading.current_thread()
