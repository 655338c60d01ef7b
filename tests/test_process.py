"""Process set-up: the umask is read without being changed, and setup is idempotent."""

from __future__ import annotations

import os
import subprocess
import sys

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
