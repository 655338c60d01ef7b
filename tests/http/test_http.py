"""`nbrelay serve --http` on a real socket: the status matrix, binding, tokens, real clients."""

from __future__ import annotations

import hmac
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import pytest

from nbrelay import transport
from nbrelay.config import Secret, Settings
from nbrelay.server import build_server
from tests.helpers import data_of, notebook, write_notebook
from tests.http.harness import (
    RunningServer,
    auth_headers,
    canary_token,
    http_client,
    http_server,
    run_refused,
)

MIB = 1024 * 1024
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("http-root")
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    logs = tmp_path_factory.mktemp("http-logs")
    with http_server(root, logs) as server:
        yield server


def post(
    server: RunningServer,
    body: Any = INIT,
    *,
    headers: dict[str, str] | None = None,
    token: bool = True,
    raw: bytes | None = None,
    query: str = "",
) -> httpx2.Response:
    sent = dict(JSON_HEADERS)
    if token:
        sent.update(auth_headers(server.token))
    sent.update(headers or {})
    content = raw if raw is not None else json.dumps(body).encode()
    with httpx2.Client(timeout=30) as http:
        return http.post(server.url + query, content=content, headers=sent)


def test_default_start_binds_loopback_only(served: RunningServer) -> None:
    assert served.url.startswith("http://127.0.0.1:")
    listening = [
        c for c in psutil.Process(served.proc.pid).net_connections() if c.status == "LISTEN"
    ]
    assert [(c.laddr.ip, c.laddr.port) for c in listening] == [("127.0.0.1", served.port)]


def test_a_valid_request_is_served(served: RunningServer) -> None:
    resp = post(served)
    assert resp.status_code == 200
    assert "nbrelay" in resp.text
    assert resp.headers.get("mcp-session-id")
    assert "access-control-allow-origin" not in resp.headers


@pytest.mark.parametrize(
    ("case", "kwargs", "status"),
    [
        ("Host: evil.example", {"headers": {"Host": "evil.example"}}, 421),
        ("Host: evil.example:PORT", {"headers": {"Host": "evil.example:1234"}}, 421),
        ("Host: evil without token", {"headers": {"Host": "evil.example"}, "token": False}, 421),
        ("Origin: http://evil.example", {"headers": {"Origin": "http://evil.example"}}, 403),
        ("Origin: null", {"headers": {"Origin": "null"}}, 403),
        ("look-alike origin", {"headers": {"Origin": "http://127.0.0.1.evil.example"}}, 403),
        ("no token", {"token": False}, 401),
        ("wrong token", {"headers": {"Authorization": "Bearer " + "w" * 43}}, 401),
        ("basic auth", {"headers": {"Authorization": "Basic dXNlcjpwYXNz"}}, 401),
        ("bearer without token", {"headers": {"Authorization": "Bearer"}}, 401),
        ("Content-Type: text/plain", {"headers": {"Content-Type": "text/plain"}}, 400),
        ("unknown session", {"headers": {"Mcp-Session-Id": "f" * 32}, "body": {}}, 404),
    ],
)
def test_status_matrix(
    served: RunningServer, case: str, kwargs: dict[str, Any], status: int
) -> None:
    body = kwargs.pop("body", INIT)
    if case == "unknown session":
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    resp = post(served, body, **kwargs)
    assert resp.status_code == status, (case, resp.status_code, resp.text)
    assert "access-control-allow-origin" not in {k.lower() for k in resp.headers}
    if status == 401:
        assert resp.headers["www-authenticate"].startswith("Bearer")


def test_valid_token_but_bad_origin_is_403(served: RunningServer) -> None:
    resp = post(served, headers={"Origin": "https://evil.example"})
    assert resp.status_code == 403


@pytest.mark.parametrize("query", ["?token=", "?access_token=", "?api_key="])
def test_a_token_in_the_query_string_is_refused(served: RunningServer, query: str) -> None:
    only_query = post(served, token=False, query=query + served.token)
    assert only_query.status_code == 401
    assert only_query.headers["www-authenticate"].startswith("Bearer")
    both = post(served, query=query + served.token)
    assert both.status_code == 401
    assert "URL" in both.json()["error_description"]


def test_body_over_4_mib_is_413(served: RunningServer) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (4 * MIB) + b'"}}'
    assert len(body) > 4 * MIB
    assert post(served, raw=body).status_code == 413
    exactly = b" " * (4 * MIB + 1)
    assert post(served, raw=exactly).status_code == 413


def test_cors_preflight(served: RunningServer) -> None:
    with httpx2.Client(timeout=30) as http:
        foreign = http.options(
            served.url,
            headers={
                "Origin": "http://evil.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        local_origin = f"http://localhost:{served.port + 1}"
        local = http.options(
            served.url,
            headers={"Origin": local_origin, "Access-Control-Request-Method": "POST"},
        )
    assert foreign.status_code == 403
    assert "access-control-allow-origin" not in foreign.headers
    assert local.status_code == 204
    assert local.headers["access-control-allow-origin"] == local_origin
    assert "authorization" in local.headers["access-control-allow-headers"].lower()
    # An allowed origin gets its own origin echoed on real responses too, never "*".
    resp = post(served, headers={"Origin": local_origin})
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == local_origin


@pytest.mark.anyio
async def test_several_real_clients_at_once(served: RunningServer) -> None:
    async def one(mode: str, n: int, seen: list[int]) -> None:
        async with http_client(served.url, served.token, mode=mode) as client:
            view = data_of(await client.call_tool("read_notebook", {"path": "a.ipynb"}))
            assert view["cells"][0]["source"] == "x = 1"
            seen.append(n)

    seen: list[int] = []
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(one, ("auto", "legacy")[n % 2], n, seen)
    assert sorted(seen) == list(range(6))


def test_http_always_needs_a_token(tmp_path: Path) -> None:
    loop = run_refused(tmp_path)
    assert loop.returncode == 2
    assert "needs a bearer token" in loop.stderr
    wide = run_refused(tmp_path, "--host", "0.0.0.0")
    assert wide.returncode == 2
    assert "0.0.0.0 is not a loopback address" in wide.stderr
    assert "NBRELAY_TOKEN" in wide.stderr


def test_wildcard_origins_are_refused(tmp_path: Path) -> None:
    for bad in ("*", "null", "evil.example"):
        proc = run_refused(tmp_path, "--allowed-origins", bad, token=canary_token())
        assert proc.returncode == 2, proc.stderr
        assert "is not an origin" in proc.stderr


def test_host_and_origin_checked_when_bound_to_another_address(tmp_path: Path) -> None:
    """On any address but 127.0.0.1/localhost/::1 the SDK switches its own checks off."""
    with http_server(tmp_path, tmp_path, "--host", "127.0.0.2") as server:
        assert server.url.startswith("http://127.0.0.2:")
        assert post(server, headers={"Host": "evil.example"}).status_code == 421
        assert post(server, headers={"Origin": "http://evil.example"}).status_code == 403
        assert post(server).status_code == 200


@pytest.mark.anyio
async def test_host_evil_is_421_when_bound_to_all_interfaces(tmp_path: Path) -> None:
    """Bound to 0.0.0.0: the SDK's app alone accepts any Host; the guard still answers 421.

    (In process, so the test never listens on every interface of the machine.)
    """
    token = canary_token()
    settings = Settings(root=tmp_path, host="0.0.0.0", allowed_hosts=("nb.example.com",))
    sdk_only = build_server(settings).streamable_http_app(host="0.0.0.0")
    app = transport.build_app(build_server(settings), settings, [Secret(token)])
    headers = {**JSON_HEADERS, **auth_headers(token)}
    statuses = {}
    for name, asgi in (("sdk", sdk_only), ("guarded", app)):
        starlette: Any = asgi if name == "sdk" else app.app
        async with (
            starlette.router.lifespan_context(starlette),
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=asgi), base_url="http://nb.example.com:8765"
            ) as http,
        ):
            for host in ("evil.example", "nb.example.com:8765", "evil.example:8765"):
                resp = await http.post("/mcp", json=INIT, headers={**headers, "Host": host})
                statuses[name, host] = resp.status_code
    assert statuses["sdk", "evil.example"] == 200  # what the SDK alone would do
    assert statuses["guarded", "evil.example"] == 421
    assert statuses["guarded", "evil.example:8765"] == 421
    assert statuses["guarded", "nb.example.com:8765"] == 200


def test_token_file_is_created_private_and_accepts_each_line(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "token"
    tokens = transport.read_token_file(path)
    assert len(tokens) == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(tokens[0].reveal()) >= 40
    second = canary_token("second")
    path.write_text(f"# team tokens\n{tokens[0].reveal()}\n\n{second}\n")
    with http_server(tmp_path, tmp_path, "--token-file", str(path), token="") as server:
        env_less = {**JSON_HEADERS}
        with httpx2.Client(timeout=30) as http:
            for tok in (tokens[0].reveal(), second):
                resp = http.post(server.url, json=INIT, headers={**env_less, **auth_headers(tok)})
                assert resp.status_code == 200
            assert http.post(server.url, json=INIT, headers=env_less).status_code == 401


def test_unsafe_token_files_and_tokens_are_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared-token"
    shared.write_text(canary_token() + "\n")
    os.chmod(shared, 0o644)
    proc = run_refused(tmp_path, "--token-file", str(shared))
    assert proc.returncode == 2
    assert "can be read by other users" in proc.stderr
    assert "chmod 600" in proc.stderr
    short = run_refused(tmp_path, token="short")
    assert short.returncode == 2
    assert "too short" in short.stderr
    assert "short" not in short.stderr.replace("too short", "")


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    tokens = [Secret("a" * 20), Secret("b" * 20), Secret("c" * 20)]
    assert transport.token_matches("a" * 20, tokens)
    assert not transport.token_matches("d" * 20, tokens)
    # Every configured token is compared every time: no early exit on the first match.
    assert len(calls) == 6
    assert {len(b) for _, b in calls} == {20}


def test_settings_never_show_the_token() -> None:
    token = canary_token()
    from nbrelay.config import load

    settings = load({}, {"NBRELAY_TOKEN": token}, {})
    assert settings.token is not None
    assert settings.token.reveal() == token
    assert token not in repr(settings)
    assert token not in str(settings.token)
