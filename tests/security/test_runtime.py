"""The per-user runtime folder (locks, kernel files, nbrelay's kernelspecs) cannot be taken over
by another local user: two real users, real nbrelay processes.

The attack: on a shared machine another user creates ``nbrelay-<victim uid>`` in the temp folder
before the victim's nbrelay does, and plants a kernelspec of theirs, a symlink where nbrelay
writes its Deno kernelspec, and a lock file they hold. nbrelay must refuse such a folder at
start-up, saying why, and use a private one (``$XDG_RUNTIME_DIR``) when there is one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from nbrelay import runtime
from nbrelay.errors import PathError
from tests.helpers import notebook, text_of, write_notebook
from tests.http.harness import report
from tests.security.users import (
    User,
    end_group,
    local_user,
    private_dir,
    require_users,
    shared_base,
    shared_tmp,
    user_env,
)

pytestmark = pytest.mark.anyio


class Machine:
    """A victim and an attacker sharing a temp folder; the victim's notebooks in their home."""

    def __init__(self, base: Path, victim: User, attacker: User) -> None:
        self.base, self.victim, self.attacker = base, victim, attacker
        self.tmp = shared_tmp(base)
        self.home = private_dir(base / "victim", victim)
        self.root = private_dir(self.home / "notebooks", victim)
        write_notebook(self.root / "a.ipynb", notebook("x = 1"))
        self.important = self.home / "important.txt"
        self.important.write_text("the victim's own file\n")
        for path in (self.root / "a.ipynb", self.important):
            os.chown(path, victim.uid, victim.gid)
        self.squat = self.tmp / f"nbrelay-{victim.uid}"
        self.marker = self.base / "attacker-code-ran"
        self.lock = hashlib.sha256(str(self.root / "a.ipynb").encode()).hexdigest()[:32] + ".lock"

    def env(self, **extra: str) -> dict[str, str]:
        return user_env(self.home, self.tmp, **extra)

    def as_attacker(self, script: str) -> None:
        subprocess.run(
            self.attacker.argv("/bin/sh", "-c", script),
            check=True,
            capture_output=True,
            timeout=60,
            env=user_env(self.base, self.tmp),
        )

    def serve_argv(self, *extra: str) -> list[str]:
        return self.victim.argv(
            sys.executable, "-m", "nbrelay", "serve", "--root", str(self.root), *extra
        )

    def start(self, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Start the victim's nbrelay over stdio with no client: it builds the server (where
        start-up checks run), reads end-of-file and exits."""
        return subprocess.run(
            self.serve_argv(*extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env(**env),
            check=False,
        )

    def client(self, *extra: str, **env: str) -> Client:
        argv = self.serve_argv("--lock-timeout", "2", *extra)
        return Client(StdioServerParameters(command=argv[0], args=argv[1:], env=self.env(**env)))


@pytest.fixture
def machine() -> Iterator[Machine]:
    require_users()
    with (
        shared_base() as base,
        local_user("victim") as victim,
        local_user("attacker") as attacker,
    ):
        yield Machine(base, victim, attacker)


def _plant(m: Machine) -> subprocess.Popen[bytes]:
    """As the attacker: the victim's folder, made first, with a kernelspec, a symlink and a lock
    file of theirs; returns the attacker's process that holds the lock."""
    spec = {
        "argv": ["/bin/sh", "-c", f"id -u > {m.marker}"],
        "display_name": "R",
        "language": "R",
    }
    lock = m.lock
    m.base.chmod(0o777)  # the attacker's code, run as the victim, leaves its mark here
    m.as_attacker(
        f"umask 0; mkdir -m 777 {m.squat} {m.squat}/kernels {m.squat}/kernels/ir "
        f"{m.squat}/kernels/deno {m.squat}/locks && "
        f"printf '%s' '{json.dumps(spec)}' > {m.squat}/kernels/ir/kernel.json && "
        f"ln -s {m.important} {m.squat}/kernels/deno/kernel.json && "
        f"touch {m.squat}/locks/{lock} && chmod 666 {m.squat}/locks/{lock}"
    )
    holder = subprocess.Popen(
        m.attacker.argv("flock", "--exclusive", str(m.squat / "locks" / lock), "sleep", "600"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=user_env(m.base, m.tmp),
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not _locked(m.squat / "locks" / lock):
        assert time.monotonic() < deadline, "the attacker's flock did not take the lock"
        time.sleep(0.05)
    return holder


def _locked(path: Path) -> bool:
    import fcntl

    with path.open("rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


async def _harm_done(m: Machine) -> dict[str, bool]:
    """Drive the victim's nbrelay as an agent would; report what the attacker achieved."""
    blocked = False
    with anyio.fail_after(300):
        async with m.client() as client:
            await client.call_tool("list_kernels", {})  # registers nbrelay's own kernelspecs
            edit = await client.call_tool(
                "edit_cell", {"path": "a.ipynb", "cell": 0, "source": "y"}
            )
            blocked = edit.is_error and "lock" in text_of(edit)
            await client.call_tool("create_notebook", {"path": "r.ipynb", "kernel": "ir"})
            await client.call_tool("execute", {"path": "r.ipynb", "code": "1"})
    return {
        "the attacker's kernelspec ran as the victim": m.marker.exists()
        and m.marker.read_text().strip() == str(m.victim.uid),
        "the victim's file was overwritten through the planted symlink": m.important.read_text()
        != "the victim's own file\n",
        "the victim's edit was blocked by the attacker's lock": blocked,
    }


async def test_a_runtime_folder_made_by_another_user_is_refused(
    machine: Machine, request: pytest.FixtureRequest
) -> None:
    m = machine
    holder = _plant(m)
    try:
        started = m.start()
        harm = dict.fromkeys(("kernelspec", "symlink", "lock"), False)
        if started.returncode == 0:  # not refused: see what the attacker got
            harm = await _harm_done(m)
    finally:
        end_group(holder)
    done = [what for what, happened in harm.items() if happened]
    assert not done, f"{len(done)} of 3 attacks worked: " + "; ".join(done)
    assert started.returncode == 2, started.stderr
    said = started.stderr
    assert f"the folder {m.squat} belongs to {m.attacker.name} (uid {m.attacker.uid})" in said
    assert f"not to you ({m.victim.name} (uid {m.victim.uid}))" in said
    assert "XDG_RUNTIME_DIR or TMPDIR" in said
    assert m.important.read_text() == "the victim's own file\n"
    assert not m.marker.exists()
    assert [p.name for p in (m.squat / "locks").iterdir()] == [m.lock], "nbrelay made files there"
    report(
        request,
        "runtime folder squatted by another user (kernelspec, symlink, held lock): nbrelay "
        "refused to start naming the folder and its owner; attacker's kernelspec ran 0 times, "
        "victim files overwritten 0, edits blocked 0",
    )


async def test_a_private_runtime_folder_is_used_and_nobody_else_can_write_in_it(
    machine: Machine,
) -> None:
    m = machine
    with anyio.fail_after(300):
        async with m.client() as client:
            edit = await client.call_tool(
                "edit_cell", {"path": "a.ipynb", "cell": 0, "source": "y"}
            )
            assert not edit.is_error, text_of(edit)
            ran = await client.call_tool("execute", {"path": "a.ipynb", "code": "print(6 * 7)"})
            assert "42" in text_of(ran), text_of(ran)
            # While the kernel runs: its connection file is in the private folder.
            files = [p.name for p in m.squat.iterdir()]
            assert any(n.startswith("kernel-") and n.endswith(".json") for n in files), files
            for path in [m.squat, *m.squat.iterdir()]:
                st = path.lstat()
                assert st.st_uid == m.victim.uid, path
                if stat.S_ISDIR(st.st_mode):
                    assert stat.S_IMODE(st.st_mode) & 0o077 == 0, (path, oct(st.st_mode))
                else:
                    assert stat.S_IMODE(st.st_mode) == 0o600, (path, oct(st.st_mode))
    with pytest.raises(subprocess.CalledProcessError):
        m.as_attacker(f"mkdir {m.squat}/kernels/evil")
    with pytest.raises(subprocess.CalledProcessError):
        m.as_attacker(f"touch {m.squat}/locks/evil.lock")


async def test_xdg_runtime_dir_is_preferred_and_a_squatted_temp_folder_then_does_not_matter(
    machine: Machine,
) -> None:
    m = machine
    holder = _plant(m)
    xdg = private_dir(m.base / "run-user", m.victim)
    try:
        started = m.start(XDG_RUNTIME_DIR=str(xdg))
        assert started.returncode == 0, started.stderr
        with anyio.fail_after(300):
            async with m.client(XDG_RUNTIME_DIR=str(xdg)) as client:
                edit = await client.call_tool(
                    "edit_cell", {"path": "a.ipynb", "cell": 0, "source": "y"}
                )
                assert not edit.is_error, text_of(edit)
                kernels = await client.call_tool("list_kernels", {})
                assert "ir" not in json.dumps(kernels.structured_content)
    finally:
        end_group(holder)
    assert (xdg / "nbrelay" / "locks").is_dir()
    assert stat.S_IMODE((xdg / "nbrelay").stat().st_mode) == 0o700
    assert m.important.read_text() == "the victim's own file\n"
    assert not m.marker.exists()


async def test_a_lock_dir_in_another_users_folder_is_refused(machine: Machine) -> None:
    m = machine
    theirs = m.base / "theirs"
    m.base.chmod(0o1777)
    m.as_attacker(f"mkdir -m 777 {theirs}")
    for lock_dir in (theirs, theirs / "locks"):
        started = m.start("--lock-dir", str(lock_dir))
        assert started.returncode == 2, started.stderr
        assert str(theirs) in started.stderr
        assert f"{m.attacker.name} (uid {m.attacker.uid})" in started.stderr
    assert not list(theirs.iterdir()), "nbrelay made something in another user's folder"


def test_open_folder_refuses_symlinks_unsafe_parents_and_writable_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same checks in process, on folders a test can set up alone."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all and not sticky
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    with pytest.raises(PathError, match=r"other users can write in .* not sticky"):
        runtime.folder_path()
    shared.chmod(0o1777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, shared / f"nbrelay-{os.geteuid()}")
    with pytest.raises(PathError, match="a symlink or a file is in its place"):
        runtime.folder_path(None, "locks")
    assert not list(elsewhere.iterdir())
    os.unlink(shared / f"nbrelay-{os.geteuid()}")
    old = shared / f"nbrelay-{os.geteuid()}"
    old.mkdir(mode=0o755)
    old.chmod(0o755)  # as older versions left it: made private again
    assert runtime.folder_path(None, "locks") == old / "locks"
    assert stat.S_IMODE(old.stat().st_mode) == 0o700
    old.chmod(0o775)  # others could have planted files in it: refused, never "fixed"
    with pytest.raises(PathError, match="other users can write in the folder"):
        runtime.folder_path()
    assert stat.S_IMODE(old.stat().st_mode) == 0o775
