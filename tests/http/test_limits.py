"""HTTP limits on a real socket: a query string that carries a token under any name is refused,
and open MCP sessions are capped by ``--max-http-sessions`` with an answer that names the limit.

Before the fix only five parameter names were refused (``?x=<token>`` got in), and sessions had
no cap but the SDK's 10,000 (2,000 idle sessions cost the server 80 MB).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx2
import psutil
import pytest

from tests.helpers import notebook, write_notebook
from tests.http.harness import RunningServer, auth_headers, http_server, report
from tests.http.test_http import INIT, JSON_HEADERS, post

CAP = 5


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("limits-root")
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    with http_server(
        root, tmp_path_factory.mktemp("limits-logs"), "--max-http-sessions", str(CAP)
    ) as server:
        yield server


@pytest.mark.parametrize(
    "query",
    [
        "?x={token}",
        "?q=Bearer%20{token}",
        "?{token}",
        "?auth_token={token}",
        "?apikey=whatever",
        "?X-API-Key=whatever",
        "?client_secret=whatever",
        "?password=whatever",
        "?jwt=whatever",
        "?a=1&b={token}",
    ],
)
def test_a_credential_anywhere_in_the_query_string_is_refused(
    capped: RunningServer, query: str
) -> None:
    url_query = query.format(token=quote(capped.token))
    with_header = post(capped, query=url_query)
    assert with_header.status_code == 401, with_header.text
    assert "URL" in with_header.json()["error_description"]
    assert capped.token not in capped.stderr()


def test_other_query_parameters_are_still_served(capped: RunningServer) -> None:
    resp = post(capped, query="?page=2&author=me")
    assert resp.status_code == 200, resp.text
    delete(capped, resp.headers["mcp-session-id"])


def open_session(server: RunningServer) -> httpx2.Response:
    return post(server, INIT)


def delete(server: RunningServer, session: str) -> None:
    with httpx2.Client(timeout=30) as http:
        resp = http.delete(
            server.url, headers={**auth_headers(server.token), "Mcp-Session-Id": session}
        )
    assert resp.status_code in (200, 204), resp.text


def test_sessions_are_capped_with_a_clear_refusal(
    capped: RunningServer, request: pytest.FixtureRequest
) -> None:
    rss = psutil.Process(capped.proc.pid).memory_info().rss
    sessions = []
    for _ in range(CAP):
        resp = open_session(capped)
        assert resp.status_code == 200, resp.text
        sessions.append(resp.headers["mcp-session-id"])
    refused = [open_session(capped) for _ in range(3 * CAP)]
    assert {r.status_code for r in refused} == {503}
    error = refused[0].json()["error"]["message"]
    assert f"already has {CAP} MCP sessions open" in error
    assert "--max-http-sessions" in error
    assert refused[0].headers["retry-after"]
    assert "--max-http-sessions" in capped.stderr()
    # The open sessions are unaffected.
    listed = post(
        capped,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={"Mcp-Session-Id": sessions[0], "Mcp-Protocol-Version": "2025-11-25"},
    )
    assert listed.status_code == 200, listed.text
    # Ending one makes room for the next.
    delete(capped, sessions.pop())
    again = open_session(capped)
    assert again.status_code == 200, again.text
    sessions.append(again.headers["mcp-session-id"])
    grown = psutil.Process(capped.proc.pid).memory_info().rss - rss
    for session in sessions:
        delete(capped, session)
    report(
        request,
        f"G8 sessions: --max-http-sessions {CAP}: {CAP} opened, {3 * CAP} more refused with 503 "
        f"naming the limit; server grew {grown / 2**20:.1f} MB",
    )


def test_the_default_cap_keeps_idle_sessions_cheap(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """2,000 clients that open a session and never close it: the default cap (100) holds."""
    write_notebook(tmp_path / "root" / "a.ipynb", notebook("x = 1"))
    with http_server(tmp_path / "root", tmp_path) as server:
        proc = psutil.Process(server.proc.pid)
        open_session(server)  # warm up
        rss = proc.memory_info().rss
        codes: dict[int, int] = {}
        with httpx2.Client(timeout=30) as http:
            for _ in range(2000):
                resp = http.post(
                    server.url,
                    content=json.dumps(INIT).encode(),
                    headers={**JSON_HEADERS, **auth_headers(server.token)},
                )
                codes[resp.status_code] = codes.get(resp.status_code, 0) + 1
        grown = proc.memory_info().rss - rss
    report(
        request,
        f"G8 sessions: 2,000 initialize calls without DELETE against the default cap: "
        f"{codes.get(200, 0)} more opened, {codes.get(503, 0)} refused; server grew "
        f"{grown / 2**20:.1f} MB",
    )
    assert codes == {200: 99, 503: 1901}
