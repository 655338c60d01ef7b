"""HTTP connections on a real socket, as odd or hostile clients make them: slow clients are cut
off (--http-timeout), a request framed two ways is refused and its connection closed (RFC 9112
section 6.3), and Host and Origin names are compared without regard to case.

Before: 20 slow connections stayed open for as long as they trickled (0 of 20 closed in 60 s),
``Content-Length`` with ``Transfer-Encoding`` was served, and ``Host: LOCALHOST`` got 421.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import pytest
from anyio.abc import SocketStream

from tests.helpers import data_of, notebook, write_notebook
from tests.http.harness import RunningServer, http_client, http_server
from tests.http.test_http import INIT, post

pytestmark = pytest.mark.anyio

TIMEOUT = 1  # --http-timeout of the server under test, in seconds
PATIENCE = 60  # the longest any connection here is waited for


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("connections-root")
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    write_notebook(root / "slow.ipynb", notebook("a" * 60 + "!"))
    logs = tmp_path_factory.mktemp("connections-logs")
    with http_server(root, logs, "--http-timeout", str(TIMEOUT)) as server:
        yield server


def head(server: RunningServer, *, length: int | None = None, extra: str = "") -> bytes:
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        f"Authorization: Bearer {server.token}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


async def until_closed(
    stream: SocketStream, first: bytes, drip: bytes = b"", every: float = 0.0
) -> bytes:
    """Send ``first``, then ``drip`` every ``every`` seconds (none if empty), and read until the
    server closes the connection (or resets it). Returns what was read; fails if the server
    keeps it open past PATIENCE."""
    got = bytearray()

    async def read() -> None:
        try:
            while True:
                got.extend(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
            pass

    async def write() -> None:
        await stream.send(first)
        while drip:
            await anyio.sleep(every)
            try:
                await stream.send(drip)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return

    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await read()
            tg.cancel_scope.cancel()
    await stream.aclose()
    return bytes(got)


async def test_slow_connections_are_closed_and_real_clients_are_not(
    served: RunningServer,
) -> None:
    body = json.dumps(INIT).encode()
    kinds = {
        "silent": lambda: (b"", b"", 0.0),
        "stalled head": lambda: (head(served)[:-10], b"", 0.0),
        "trickled head": lambda: (b"POST /mcp HTTP/1.1\r\n", b"X", TIMEOUT / 4),
        "stalled body": lambda: (head(served, length=len(body)) + body[:10], b"", 0.0),
        "trickled body": lambda: (head(served, length=10**6), b" ", TIMEOUT / 3),
        "idle after a request": lambda: (head(served, length=len(body)) + body, b"", 0.0),
    }
    results: dict[str, list[bytes]] = {name: [] for name in kinds}

    async def one(name: str) -> None:
        first, drip, every = kinds[name]()
        stream = await anyio.connect_tcp("127.0.0.1", served.port)
        results[name].append(await until_closed(stream, first, drip, every))

    async with http_client(served.url, served.token) as client, anyio.create_task_group() as tg:
        for name in kinds:
            for _ in range(4):
                tg.start_soon(one, name)
        # Meanwhile a real client works, with pauses shorter and longer than the timeout:
        # after a long one its pooled connection is gone and it simply opens another.
        for pause in (0, TIMEOUT / 2, TIMEOUT * 2, 0):
            await anyio.sleep(pause)
            listed = await client.call_tool("list_notebooks", {})
            assert data_of(listed)["count"] == 2

    assert sum(len(v) for v in results.values()) == 24  # every one was closed by the server
    for name in ("stalled head", "stalled body"):
        for got in results[name]:
            assert got.startswith(b"HTTP/1.1 408 "), (name, got[:200])
            assert b"--http-timeout" in got
    for got in results["silent"]:
        assert got == b""
    for got in results["idle after a request"]:
        assert got.startswith(b"HTTP/1.1 200 ")
        assert b" 408 " not in got


async def test_a_request_that_takes_longer_than_the_timeout_is_answered(
    served: RunningServer,
) -> None:
    """The deadlines are for the client's bytes, never for the server's work: a call that runs
    twice the timeout and more (a regex stopped at its 2 s limit) gets its answer, also when
    the request arrived in one packet on a new connection."""
    session = post(served).headers["mcp-session-id"]
    arguments = {"path": "slow.ipynb", "pattern": "(a|aa)+$", "regex": True}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "search_notebook", "arguments": arguments},
    }
    body = json.dumps(call).encode()
    extra = f"Mcp-Session-Id: {session}\r\nConnection: close\r\n"
    stream = await anyio.connect_tcp("127.0.0.1", served.port)
    got = await until_closed(stream, head(served, length=len(body), extra=extra) + body)
    assert got.startswith(b"HTTP/1.1 200 "), got[:300]
    assert b"took over 2 s" in got, got[-500:]

    async with http_client(served.url, served.token) as client:  # and through a real client
        with anyio.fail_after(PATIENCE):
            result = await client.call_tool("search_notebook", arguments)
        assert result.is_error
        assert "took over 2 s" in json.dumps(result.model_dump(mode="json"))


async def test_content_length_with_transfer_encoding_is_refused_and_closed(
    served: RunningServer,
) -> None:
    smuggled = (
        f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
        f"Authorization: Bearer {served.token}\r\n\r\n"
    ).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled), smuggled)
    request = head(served, length=5, extra="Transfer-Encoding: chunked\r\n") + chunked
    stream = await anyio.connect_tcp("127.0.0.1", served.port)
    got = await until_closed(stream, request)
    assert got.startswith(b"HTTP/1.1 400 "), got[:300]
    assert b"connection: close" in got.lower()
    assert b"Content-Length and Transfer-Encoding" in got
    assert got.count(b"HTTP/1.1 ") == 1  # the request hidden in the body was never served


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "LOCALHOST:{port}"},
        {"Host": "LocalHost"},
        {"Host": "127.0.0.1:{port}", "Origin": "HTTP://LOCALHOST:1"},
        {"Host": "localhost:{port}", "Origin": "Http://LocalHost"},
        {"Host": "localhost:{port}", "Origin": "http://localhost:80"},
        {"Host": "localhost:{port}", "Origin": "HTTPS://127.0.0.1:443"},
    ],
)
def test_host_and_origin_names_are_case_insensitive(
    served: RunningServer, headers: dict[str, str]
) -> None:
    sent = {k: v.format(port=served.port) for k, v in headers.items()}
    resp = post(served, headers=sent)
    assert resp.status_code == 200, (sent, resp.status_code, resp.text)
    if "Origin" in sent:  # CORS echoes the origin as the browser sent it
        assert resp.headers["access-control-allow-origin"] == sent["Origin"]
    bad = post(served, headers={**sent, "Host": "EVIL.example"})
    assert bad.status_code == 421
