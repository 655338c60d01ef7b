"""Runs ``deno jupyter`` under nbrelay's rules: Deno's own permission checks, answered here.

``deno jupyter`` grants its code every permission and takes no permission flags, but every
permission check Deno makes goes to a *permission broker* when ``DENO_PERMISSION_BROKER_PATH``
names a Unix socket (Deno 2.x; the broker's answer wins even over "allow all", and Deno exits
with code 87 if the broker goes away, so it fails closed). This program is that broker, for one
kernel: it starts ``deno jupyter`` with the variable set and answers each check
(``{"permission": "read", "value": "../x"}``) with the rules it was given:

* ``read``/``write``: with ``--folder``, only paths inside those folders, resolved (symlinks
  and ``..`` included) against the kernel's current folder at the time of the check; a check
  for every file at once (``Deno.symlink``, ``Deno.makeTempDir`` in the system temp folder) is
  refused. Without ``--folder``, any path.
* ``net`` and ``import`` (remote modules): the kernel's own channels on loopback, always; others
  by ``--network``: ``all``, ``none``, or ``hosts`` (``--allow-host`` entries, minus
  ``--deny-host`` entries, which also apply under ``all``).
* ``run`` and ``ffi``: refused with ``--folder`` or a host list (a subprocess or a native
  library would step outside Deno's checks); allowed otherwise. ``env`` and ``sys``: allowed (the environment
  nbrelay gives kernels holds no credentials).

With ``--forward`` the connection file names ZeroMQ's ``ipc`` transport (the kernel runs in a
network namespace of its own, which nbrelay cannot reach over TCP), which ``deno jupyter`` does
not support: the kernel then listens on loopback TCP inside its namespace, and this program
carries each channel between the Unix socket nbrelay connects to and that port.

Standard library only: it runs as a script (``python -I -S deno_guard.py``), also inside the
sandbox, where nbrelay's own package may not be visible.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

PR_SET_PDEATHSIG = 1
CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


@dataclass
class Rules:
    """What one Deno kernel may do (see the module docstring)."""

    folders: tuple[str, ...] = ()  # empty: files are not confined
    network: str = "all"  # "all", "none" or "hosts"
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    own: set[tuple[str, int]] = field(default_factory=set)  # the kernel's channels
    start_cwd: str = "."

    def decide(self, permission: str, value: str | None, pid: int | None) -> str | None:
        """None if the check passes, else the reason it does not (shown to the cell)."""
        if permission in ("read", "write"):
            return self._path(permission, value, pid)
        if permission in ("net", "import"):
            return self._net(permission, value)
        if permission in ("env", "sys"):
            return None
        if permission in ("run", "ffi"):
            # A program or a native library is outside Deno's checks: refused wherever files
            # are confined or the network is held to a list (without network, the namespace
            # holds them too).
            if not self.folders and self.network != "hosts" and not self.deny_hosts:
                return None
            what = "run programs" if permission == "run" else "load native libraries"
            return (
                f"nbrelay's sandbox does not let TypeScript/JavaScript cells {what}, which "
                f"would escape its file and network rules (Deno permission {permission!r})."
            )
        return f"nbrelay does not grant the Deno permission {permission!r}."

    def _path(self, permission: str, value: str | None, pid: int | None) -> str | None:
        if not self.folders:
            return None
        verb = "read" if permission == "read" else "write"
        inside = " or ".join(self.folders)
        if value is None or value.startswith("<"):
            return (
                f"nbrelay's sandbox lets TypeScript/JavaScript cells {verb} files only inside "
                f"the session's folder ({inside}), so it refuses access to every file at once "
                f"({value or 'all files'})."
            )
        cwd = self.start_cwd
        if pid:
            with contextlib.suppress(OSError):
                cwd = os.readlink(f"/proc/{pid}/cwd")
        try:
            real = os.path.realpath(os.path.join(cwd, value))
        except (OSError, ValueError) as exc:
            # A link replaced while it is resolved (realpath's readlink then fails) or a NUL in
            # the path: refused; before, the error ended this connection and Deno with it.
            return (
                f"nbrelay's sandbox lets TypeScript/JavaScript cells {verb} files only inside "
                f"the session's folder ({inside}); {value!r} could not be resolved ({exc}), "
                "so it is refused."
            )
        for folder in self.folders:
            if real == folder or real.startswith(folder.rstrip("/") + "/"):
                return None
        return (
            f"nbrelay's sandbox lets TypeScript/JavaScript cells {verb} files only inside the "
            f"session's folder ({inside}); {value!r} is {real}, outside it."
        )

    def _net(self, permission: str, value: str | None) -> str | None:
        host, port = split_host(value or "")
        if value and (host, port) in self.own:
            return None
        what = "import remote modules from" if permission == "import" else "connect to"
        target = value or "any host"
        if self.network == "none":
            return (
                f"network access is off for kernels (allowNetworkAccess: false / "
                f"--no-kernel-network), so cells cannot {what} {target}."
            )
        if value is None:
            return None if self.network == "all" and not self.deny_hosts else _no_list(target)
        if any(host_matches(rule, host, port) for rule in self.deny_hosts):
            return (
                f"{target} is on nbrelay's network deny list (networkDenyList / --kernel-net-deny)."
            )
        if self.network == "hosts" and not any(
            host_matches(rule, host, port) for rule in self.allow_hosts
        ):
            return (
                f"{target} is not on nbrelay's network allow list (networkAllowList / "
                f"--kernel-net-allow: "
                f"{', '.join(self.allow_hosts)}), so cells cannot {what} it."
            )
        return None


def _no_list(target: str) -> str:
    return f"nbrelay's network lists do not allow access to {target}."


def split_host(value: str) -> tuple[str, int | None]:
    """``("example.com", 443)`` from ``example.com:443``; IPv6 in brackets; no port: None."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    return host.lower(), int(port) if port.isdigit() else None


def host_matches(rule: str, host: str, port: int | None) -> bool:
    """Whether a list entry (``example.com``, ``*.example.com``, ``10.0.0.1:8080``) covers
    ``host`` on ``port``."""
    want_host, want_port = split_host(rule.strip())
    if want_port is not None and want_port != port:
        return False
    if want_host.startswith("*."):
        return host.endswith(want_host[1:])
    return host == want_host


# -- the broker ----------------------------------------------------------------------------


def serve_broker(listener: socket.socket, rules: Rules) -> None:
    """Answer Deno's permission checks, one connection per Deno process."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_answer, args=(conn, rules), daemon=True).start()


def _answer(conn: socket.socket, rules: Rules) -> None:
    with conn, conn.makefile("rwb") as stream:
        for line in stream:
            try:
                request = json.loads(line)
                check_id = request["id"]
                permission = str(request.get("permission"))
                value = request.get("value")
                pid = request.get("pid")
            except (ValueError, KeyError, TypeError):
                return  # Deno then exits (code 87): a broken exchange never allows anything
            try:
                reason = rules.decide(
                    permission,
                    value if isinstance(value, str) else None,
                    pid if isinstance(pid, int) else None,
                )
            except Exception as exc:  # a check that fails is refused, never fatal
                reason = f"nbrelay could not check the Deno permission {permission!r}: {exc}."
            answer: dict[str, object] = {"id": check_id, "result": "allow"}
            if reason is not None:
                answer = {"id": check_id, "result": "deny", "reason": reason}
            stream.write(json.dumps(answer).encode() + b"\n")
            stream.flush()


# -- ipc <-> loopback TCP ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tcp_connection(info: dict[str, object]) -> dict[str, object]:
    """An ``ipc`` connection file's twin on loopback TCP (free ports, the same key)."""
    return {**info, "transport": "tcp", "ip": "127.0.0.1"} | {n: free_port() for n in CHANNELS}


def forward(unix_path: str, tcp_port: int) -> None:
    """Accept on the Unix socket ``unix_path`` and carry each connection to ``tcp_port``."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(unix_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(unix_path)
    listener.listen(16)
    threading.Thread(target=_accept_loop, args=(listener, tcp_port), daemon=True).start()


def _accept_loop(listener: socket.socket, tcp_port: int) -> None:
    while True:
        try:
            outer, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_pipe, args=(outer, tcp_port), daemon=True).start()


def _pipe(outer: socket.socket, tcp_port: int) -> None:
    inner: socket.socket | None = None
    for _ in range(600):  # the kernel may not listen yet: up to a minute
        try:
            inner = socket.create_connection(("127.0.0.1", tcp_port))
            break
        except OSError:
            time.sleep(0.1)
    if inner is None:
        outer.close()
        return
    pairs = {outer: inner, inner: outer}
    with outer, inner, selectors.DefaultSelector() as sel:
        for sock in pairs:
            sel.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = src.recv(65536)
                    if not data:
                        return
                    pairs[src].sendall(data)
                except OSError:
                    return


# -- the program ---------------------------------------------------------------------------


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deno_guard")
    parser.add_argument("--folder", action="append", default=[])
    parser.add_argument("--network", choices=("all", "none", "hosts"), default="all")
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--deny-host", action="append", default=[])
    parser.add_argument("--forward", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if "--conn" not in command or command.index("--conn") + 1 >= len(command):
        parser.error("the deno command has no --conn <connection file>")
    at = command.index("--conn") + 1
    with open(command[at], encoding="utf-8") as fh:
        info = json.load(fh)
    private = tempfile.mkdtemp(prefix="nbrelay-deno-")
    rules = Rules(
        folders=tuple(os.path.realpath(f) for f in args.folder),
        network=args.network,
        allow_hosts=tuple(args.allow_host),
        deny_hosts=tuple(args.deny_host),
        start_cwd=os.getcwd(),
    )
    if args.forward:
        twin = tcp_connection(info)
        path = os.path.join(private, "connection.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            json.dump(twin, fh)
        command[at] = path
        for name in CHANNELS:
            port = int(str(twin[name]))
            forward(f"{info['ip']}-{info[name]}", port)
            rules.own.add(("127.0.0.1", port))
    else:
        for name in CHANNELS:
            rules.own.add((str(info.get("ip") or "127.0.0.1"), int(info[name])))
    broker_path = os.path.join(private, "broker.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(broker_path)
    listener.listen(4)
    threading.Thread(target=serve_broker, args=(listener, rules), daemon=True).start()
    env = {**os.environ, "DENO_PERMISSION_BROKER_PATH": broker_path}
    # Signals reach the kernel's whole process group (jupyter_client's interrupt and stop):
    # this program outlives an interrupt and ends with the kernel.
    signal.signal(signal.SIGINT, lambda *_: None)
    child = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    code = child.wait()
    shutil.rmtree(private, ignore_errors=True)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
