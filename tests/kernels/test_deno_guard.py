"""deno_guard's answers to Deno's permission checks, on real files (the kernel itself runs in
tests/profiles/test_srcbook.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from nbrelay.kernels.deno_guard import Rules, _answer, host_matches, split_host


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    inside = tmp_path / "session"
    (inside / "sub").mkdir(parents=True)
    (inside / "data.txt").write_text("x")
    (tmp_path / "secret.txt").write_text("s")
    os.symlink(tmp_path / "secret.txt", inside / "link-out")
    os.symlink(inside / "data.txt", inside / "sub" / "link-in")
    return inside


def test_files_inside_the_folder_only(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = Rules(folders=(str(folder),), start_cwd=str(folder))
    for ok in ("data.txt", "./sub/../data.txt", str(folder / "new.txt"), "sub/link-in", "."):
        assert rules.decide("read", ok, None) is None, ok
        assert rules.decide("write", ok, None) is None, ok
    for bad in ("../secret.txt", "link-out", "/etc/hostname", "sub/../../secret.txt", ".."):
        reason = rules.decide("read", bad, None)
        assert reason is not None, bad
        assert "only inside the session's folder" in reason, bad
    # A check for every file at once (Deno.symlink) or the system temp folder is refused.
    assert rules.decide("write", None, None) is not None
    assert rules.decide("write", "<TMP>", None) is not None
    # Relative paths are resolved against the kernel's current folder (here: this process's).
    monkeypatch.chdir(folder / "sub")
    assert rules.decide("read", "../../secret.txt", os.getpid()) is not None
    assert rules.decide("read", "../data.txt", os.getpid()) is None
    assert rules.decide("run", None, None) is not None
    assert rules.decide("ffi", "libc.so.6", None) is not None
    assert rules.decide("env", "HOME", None) is None
    assert rules.decide("made-up", None, None) is not None
    unconfined = Rules()
    assert unconfined.decide("read", "/etc/hostname", None) is None
    assert unconfined.decide("run", None, None) is None


def test_network_rules() -> None:
    own = {("127.0.0.1", 4000)}
    none = Rules(network="none", own=own)
    assert none.decide("net", "127.0.0.1:4000", None) is None  # the kernel's own channel
    assert "network access is off" in (none.decide("net", "example.com:443", None) or "")
    assert none.decide("import", "jsr.io:443", None) is not None
    listed = Rules(network="hosts", allow_hosts=("*.example.com", "10.0.0.5:8080"), own=own)
    assert listed.decide("net", "api.example.com:443", None) is None
    assert listed.decide("net", "10.0.0.5:8080", None) is None
    assert listed.decide("net", "10.0.0.5:22", None) is not None
    assert listed.decide("net", "example.org:443", None) is not None
    assert listed.decide("net", "0.0.0.0:0", None) is not None
    assert listed.decide("run", None, None) is not None  # a program would escape the list
    assert none.decide("run", None, None) is None  # its namespace has no network either
    everything = Rules(network="all", deny_hosts=("evil.test",))
    assert everything.decide("ffi", "libc.so.6", None) is not None
    assert everything.decide("net", "evil.test:80", None) is not None
    assert everything.decide("net", "good.test:80", None) is None
    assert split_host("[::1]:8080") == ("::1", 8080)
    assert split_host("Example.COM") == ("example.com", None)
    assert host_matches("example.com", "example.com", 1)
    assert not host_matches("example.com", "sub.example.com", 1)


def test_a_path_that_changes_while_it_resolves_is_refused_and_the_broker_answers_on(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link replaced while the broker resolves it makes realpath's readlink fail (a race the
    real-kernel test in test_srcbook.py causes; here the failure is forced): the check is
    refused with the reason, and the connection, which Deno exits without, stays open."""
    rules = Rules(folders=(str(folder),), start_cwd=str(folder))

    def changing(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os.path, "realpath", changing)
    reason = rules.decide("read", "link", None)
    assert reason is not None
    assert "could not be resolved" in reason
    ours, deno = socket.socketpair()
    thread = threading.Thread(target=_answer, args=(ours, rules), daemon=True)
    thread.start()
    with deno, deno.makefile("rwb") as stream:
        for check_id in (1, 2):
            request = {"id": check_id, "permission": "read", "value": "link"}
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            answer = json.loads(stream.readline())
            assert answer["id"] == check_id
            assert answer["result"] == "deny"
        stream.write(json.dumps({"id": 3, "permission": "env", "value": "HOME"}).encode() + b"\n")
        stream.flush()
        assert json.loads(stream.readline()) == {"id": 3, "result": "allow"}
    thread.join(10)
    assert not thread.is_alive()
