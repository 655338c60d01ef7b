"""Real nbrelay servers for the HTTP, reliability and security suites.

``http_server(...)`` starts ``python -m nbrelay serve --http --port 0`` as a subprocess (the token
in ``$NBRELAY_TOKEN``, never in argv), waits for its "serving" line on stderr, and stops it by PID
when the block ends. ``http_client`` connects the official MCP client with the bearer token.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.servers import stop_by_pid, wait_until

N = TypeVar("N", int, float)
SERVING = re.compile(r"serving MCP over streamable HTTP at (http://\S+/mcp)")
START_TIMEOUT = 60.0

# Soak sizes: NBRELAY_SOAK=1 runs every suite at the plan's large size.
SOAK = os.environ.get("NBRELAY_SOAK", "") not in ("", "0")
# Read at import: the test fixtures clear NBRELAY_* variables while a test runs.
FIGURES = os.environ.get("NBRELAY_FIGURES", "")


def size(ci: N, soak: N) -> N:
    return soak if SOAK else ci


def canary_token(label: str = "tok") -> str:
    """A token that is easy to find if it ever leaks."""
    return f"CANARY{label}{secrets.token_hex(16)}"


@dataclass
class RunningServer:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    stderr_path: Path
    argv: list[str]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def base(self) -> str:
        return self.url.rsplit("/mcp", 1)[0]

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def server_env(token: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NBRELAY_") and k not in ("JUPYTER_TOKEN",)
    }
    if token:
        env["NBRELAY_TOKEN"] = token
    env.update(extra or {})
    return env


@contextlib.contextmanager
def http_server(
    root: Path,
    log_dir: Path,
    *args: str,
    token: str | None = None,
    env: dict[str, str] | None = None,
    name: str = "server",
) -> Iterator[RunningServer]:
    """Run ``nbrelay serve --http --port 0 --root ROOT ARGS`` until the block ends.

    ``token`` goes to ``$NBRELAY_TOKEN`` (a new canary token by default; "" sets none).
    """
    token = canary_token() if token is None else token
    stderr_path = log_dir / f"{name}-{secrets.token_hex(3)}.stderr"
    argv = [
        sys.executable,
        "-m",
        "nbrelay",
        "serve",
        "--http",
        "--port",
        "0",
        "--root",
        str(root),
        *args,
    ]
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=server_env(token, env),
        )
    try:
        found = wait_until(
            lambda: SERVING.search(stderr_path.read_text(encoding="utf-8", errors="replace")),
            "nbrelay did not start",
            seconds=START_TIMEOUT,
            proc=proc,
            log=stderr_path.read_text,
            interval=0.05,
        )
        yield RunningServer(proc, found.group(1), token, stderr_path, argv)
    finally:
        stop_by_pid(proc)


def run_refused(
    root: Path, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``nbrelay serve --http`` expecting it to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "nbrelay", "serve", "--http", "--root", str(root), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(token),
        check=False,
    )


def auth_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def http_client(url: str, token: str, *, mode: str = "auto") -> AsyncIterator[Client]:
    """The official MCP client over streamable HTTP, with the bearer token."""
    timeout = httpx2.Timeout(60.0, read=120.0)
    async with (
        httpx2.AsyncClient(headers=auth_headers(token), timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def tree_digest(folder: Path, *, skip: Sequence[Path] = ()) -> dict[str, bytes]:
    """Every file under ``folder`` (symlinks not followed) mapped to its bytes."""
    out: dict[str, bytes] = {}
    skipped = {str(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skipped]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if full in skipped:
                continue
            try:
                if os.path.islink(full):
                    out[full] = b"->" + os.readlink(full).encode()
                    continue
                import stat as _stat

                mode = os.stat(full).st_mode
                if not _stat.S_ISREG(mode):
                    out[full] = b"<special>"
                    continue
                with open(full, "rb") as fh:
                    out[full] = fh.read()
            except FileNotFoundError:
                continue
    return out


def report(request: pytest.FixtureRequest, line: str) -> None:
    """Record a measured figure: shown in the run's summary (see ``summarize``) and appended to
    $NBRELAY_FIGURES when that is set."""
    request.node.user_properties.append(("figure", line))
    if FIGURES:
        with open(FIGURES, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def summarize(reporter: Any, prefix: str) -> None:
    """``pytest_terminal_summary`` body: print the figures of the tests under ``prefix``."""
    lines = [
        value
        for reports in reporter.stats.values()
        for rep in reports
        if isinstance(rep, pytest.TestReport)
        and rep.when == "call"
        and rep.nodeid.startswith(prefix)
        for key, value in rep.user_properties
        if key == "figure"
    ]
    if lines:
        reporter.write_sep("-", f"figures measured by {prefix}")
        for line in lines:
            reporter.write_line(str(line))
