"""Throw-away local users for the attacks that need two of them (a victim running nbrelay, an
attacker on the same machine), made with ``useradd`` and removed with ``userdel``.

Processes run as a user through ``setpriv`` (real uid, gid and groups changed, no capabilities).
When this interpreter lives under a folder other users cannot enter (``/root/.pyenv``), the
victim's processes run in a mount namespace (``bwrap`` as root, before ``setpriv``) where that
folder is a tmpfs holding only the interpreter's installation, so the same Python (and the
kernels it starts) works for them; their view of everything else is the host's.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import missing_tool


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def argv(self, *command: str) -> list[str]:
        """``command`` run as this user."""
        ids = ["--reuid", str(self.uid), "--regid", str(self.gid), "--clear-groups"]
        return [*_exposing_python(), _tool("setpriv"), *ids, "--", *command]


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found is not None, name
    return found


def require_users() -> None:
    if os.geteuid() != 0:
        missing_tool("these tests create throw-away users, which needs root (CI runs as root)")
    for tool in ("useradd", "userdel", "setpriv", "bwrap", "flock"):
        if shutil.which(tool) is None:
            missing_tool(f"these tests need {tool} on PATH")


def _hidden_ancestor(path: str) -> str | None:
    """The highest folder above ``path`` that other users cannot enter, if any."""
    found = None
    parts = Path(path).parts
    for n in range(2, len(parts)):
        folder = os.path.join(*parts[:n])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            found = found or folder
    return found


def _exposing_python() -> list[str]:
    prefix = os.path.realpath(sys.base_prefix)
    hidden = _hidden_ancestor(os.path.join(prefix, "bin"))
    if hidden is None:
        return []
    argv = [_tool("bwrap"), "--dev-bind", "/", "/", "--perms", "0755", "--tmpfs", hidden]
    folder = hidden
    for part in Path(prefix).relative_to(hidden).parts[:-1]:
        folder = os.path.join(folder, part)
        argv += ["--perms", "0755", "--dir", folder]
    return [*argv, "--ro-bind", prefix, prefix]


@contextlib.contextmanager
def local_user(label: str) -> Iterator[User]:
    """A new user (no home, no login shell), removed afterwards."""
    name = f"nbr{label}{secrets.token_hex(3)}"[:31]
    subprocess.run(
        [
            _tool("useradd"),
            "--no-create-home",
            "--user-group",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run([_tool("userdel"), name], check=False, capture_output=True, timeout=60)


@contextlib.contextmanager
def shared_base() -> Iterator[Path]:
    """A folder every user can enter (0755), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="nbrelay-users-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def shared_tmp(base: Path) -> Path:
    """A temp folder like /tmp: world-writable and sticky."""
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    return tmp


def private_dir(path: Path, user: User, mode: int = 0o700) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, user.uid, user.gid)
    path.chmod(mode)
    return path


def user_env(home: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """A plain environment for a user's processes (no XDG_RUNTIME_DIR unless given)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process we started in its own session, and everything in its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
