"""Malformed JSON-RPC on both transports (plan F2): HTTP never answers 5xx, and a stdio server
stays alive with an uncorrupted stdout, answering the next valid request.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.helpers import PATIENCE, notebook, write_notebook
from tests.http.harness import RunningServer, auth_headers, http_server, report, server_env, size
from tests.security.strategies import JSON

CASES = size(1000, 10_000)
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def init(n: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "wire", "version": "0"},
        },
    }


def fixed_cases() -> list[bytes]:
    """Hand-picked malformed messages."""
    deep = b"[" * 100_000 + b"]" * 100_000
    valid = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}).encode()
    return [
        b"",
        b"{",
        valid[: len(valid) // 2],
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}',
        deep,
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":' + deep + b"}",
        b"\xff\xfe\x00garbage",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/\xff"}',
        b"[]",
        b"[" + valid + b"," + valid + b"]",
        b"null",
        b"42",
        b'"a string"',
        b'{"jsonrpc":"2.0","id":null,"method":"tools/list","params":{}}',
        b'{"jsonrpc":"1.0","id":1,"method":"tools/list","params":{}}',
        b'{"id":1,"method":"tools/list","params":{}}',
        b'{"jsonrpc":"2.0","id":1,"method":"no/such/method","params":{}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"not an object"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_notebook","arguments":[1]}}',
        b'{"jsonrpc":"2.0","id":{"nested":1},"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized","id":5}',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}',
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
        b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{},"extra":' + b"1" * 5000 + b"}",
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
        ).encode(),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "read_notebook",
                    "arguments": {"path": "a.ipynb"},
                    "_meta": META,
                },
            }
        ).encode(),
    ]


def generated_cases(count: int) -> list[bytes]:
    """Random JSON values, JSON-RPC-shaped objects with random fields, and random bytes."""
    method = st.sampled_from(
        ["tools/list", "tools/call", "initialize", "ping", "resources/read", "x", ""]
    )
    shaped = st.fixed_dictionaries(
        {"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "method": method | JSON},
        optional={"id": JSON, "params": JSON},
    )
    case = st.one_of(
        JSON.map(lambda v: json.dumps(v).encode()),
        shaped.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=200),
    )
    got: list[bytes] = []

    @settings(
        max_examples=count // 20 + 5,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(case, min_size=20, max_size=20))
    def collect(batch: list[bytes]) -> None:
        got.extend(batch)

    collect()
    return got[:count]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("wire-root")
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    with http_server(root, tmp_path_factory.mktemp("wire-logs")) as server:
        yield server


def test_http_never_answers_5xx(served: RunningServer, request: pytest.FixtureRequest) -> None:
    cases = fixed_cases() + generated_cases(CASES - len(fixed_cases()))
    statuses: Counter[int] = Counter()
    headers = {
        **auth_headers(served.token),
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    with httpx2.Client(timeout=60) as http:
        resp = http.post(served.url, json=init(), headers=headers)
        assert resp.status_code == 200
        session = {"Mcp-Session-Id": resp.headers["mcp-session-id"]}
        http.post(
            served.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**headers, **session},
        )
        variants = [
            {},
            session,
            {"MCP-Protocol-Version": MODERN},
            {**session, "MCP-Protocol-Version": LEGACY},
        ]
        for n, body in enumerate(cases):
            extra = variants[n % len(variants)]
            resp = http.post(served.url, content=body, headers={**headers, **extra})
            statuses[resp.status_code] += 1
            assert resp.status_code < 500, (body[:200], resp.status_code, resp.text[:300])
        big = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"p":"'
            + b"x" * (5 << 20)
            + b'"}}'
        )
        assert http.post(served.url, content=big, headers=headers).status_code == 413
        statuses[413] += 1
        # Still serving: a valid request in the session works.
        listed = http.post(
            served.url,
            json={"jsonrpc": "2.0", "id": 77, "method": "tools/list", "params": {}},
            headers={**headers, **session},
        )
        assert listed.status_code == 200
        assert "read_notebook" in listed.text
    assert served.proc.poll() is None
    assert "Traceback" not in served.stderr()
    report(
        request,
        f"F2 HTTP: {sum(statuses.values())} malformed or odd JSON-RPC bodies: "
        f"statuses {dict(sorted(statuses.items()))}, 0 5xx, server alive and serving",
    )


class StdioServer:
    """``nbrelay serve`` over stdio, driven line by line."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nbrelay", "serve", "--root", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(None),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[bytes] = []
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def ask(
        self, message: dict[str, Any], timeout: float = PATIENCE
    ) -> tuple[dict[str, Any], float]:
        """Send a request; return its response (every stdout line must be JSON-RPC)."""
        start = time.monotonic()
        self.send(json.dumps(message).encode())
        while True:
            line = self.lines.get(timeout=max(0.0, start + timeout - time.monotonic()))
            data = json.loads(line)  # a non-JSON line would be stdout corruption
            assert data.get("jsonrpc") == "2.0", line[:200]
            if data.get("id") == message["id"]:
                return data, time.monotonic() - start

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for thread in self.threads:
            thread.join(timeout=10)
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()


def test_stdio_survives_malformed_lines_with_clean_stdout(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    write_notebook(tmp_path / "a.ipynb", notebook("x = 1"))
    server = StdioServer(tmp_path)
    try:
        reply, _ = server.ask(init(0), timeout=120)
        assert reply["result"]["serverInfo"]["name"] == "nbrelay"
        server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        cases = fixed_cases() + generated_cases(CASES - len(fixed_cases()))
        worst = 0.0
        for n, body in enumerate(cases, start=1000):
            server.send(body.replace(b"\n", b" ").replace(b"\r", b" "))
            reply, took = server.ask({"jsonrpc": "2.0", "id": n, "method": "ping"})
            assert "result" in reply, reply
            worst = max(worst, took)
        reply, _ = server.ask(
            {
                "jsonrpc": "2.0",
                "id": "last",
                "method": "tools/call",
                "params": {"name": "read_notebook", "arguments": {"path": "a.ipynb"}},
            }
        )
        assert "x = 1" in json.dumps(reply)
        assert server.proc.poll() is None
    finally:
        server.close()
    leftover = list(server.lines.queue)
    assert all(json.loads(x).get("jsonrpc") == "2.0" for x in leftover), leftover[:3]
    assert b"Traceback" not in b"".join(server.stderr)
    report(
        request,
        f"F2 stdio: {len(cases)} malformed lines, each followed by a ping: all answered (slowest "
        f"{worst * 1000:.0f} ms), stdout only JSON-RPC, server alive",
    )
