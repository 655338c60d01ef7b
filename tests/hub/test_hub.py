"""nbrelay on JupyterHub: each user's agent reaches MCP on that user's own server only.

A real Hub (tests/hub/conftest.py) runs alice's and bob's single-user servers. An agent holds a
JupyterHub API token of its user with the scope ``access:servers!user=<name>`` and talks to
``/user/<name>/mcp`` through the Hub's proxy, as a person's browser talks to ``/user/<name>/lab``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import nbformat
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import PATIENCE, call
from tests.http.harness import report
from tests.hub.conftest import Hub, notebook_json, user_headers
from tests.live.server import wait_for

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def agent(hub: Hub, name: str, token: str, scheme: str = "token") -> AsyncIterator[Client]:
    """The official MCP client on ``/user/<name>/mcp`` with a JupyterHub token."""
    timeout = httpx2.Timeout(60.0, read=PATIENCE)
    async with (
        httpx2.AsyncClient(headers=user_headers(token, scheme), timeout=timeout) as http,
        Client(streamable_http_client(f"{hub.user_url(name)}mcp", http_client=http)) as client,
    ):
        yield client


def stored_cells(path: Path) -> list[Any]:
    """The notebook file's cells, multi-line strings joined (as nbformat reads them)."""
    return list(nbformat.reads(path.read_text(), as_version=4).cells)


def stored_sources(path: Path) -> list[str]:
    return [c.source for c in stored_cells(path)]


def initialize_request() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def require_mcp(hub: Hub, name: str, token: str) -> None:
    """Fail with the reason when the user's server has no MCP endpoint at all."""
    answer = httpx2.post(
        f"{hub.user_url(name)}mcp",
        headers={**MCP_HEADERS, **user_headers(token)},
        json=initialize_request(),
        timeout=60,
    )
    if answer.status_code == 404:
        pytest.fail(
            f"{hub.user_url(name)}mcp answered 404: the single-user server has not loaded "
            "nbrelay's Jupyter Server extension (installing nbrelay should enable it through "
            "a jupyter_server_config.d file)"
        )


def test_each_users_token_opens_their_own_server_only(hub: Hub) -> None:
    """The Hub's own guarantees that the MCP endpoint relies on, on the contents API."""
    alice, bob = hub.token("alice"), hub.token("bob")
    contents = "api/contents/hello.ipynb"
    with httpx2.Client(timeout=60, follow_redirects=False) as http:
        for name, token, scheme in (("alice", alice, "token"), ("bob", bob, "Bearer")):
            put = http.put(
                hub.user_url(name) + contents,
                headers=user_headers(token, scheme),
                json=notebook_json(f"print('{name}')"),
            )
            assert put.status_code in (200, 201), put.text
            got = http.get(hub.user_url(name) + contents, headers=user_headers(token))
            assert got.status_code == 200, got.text
            assert got.json()["content"]["cells"][0]["source"] == f"print('{name}')"
            # The file is in that user's home, and only there.
            assert stored_sources(hub.home(name) / "hello.ipynb") == [f"print('{name}')"]
            # jupyter-collaboration is loaded: the server opens a shared room for the notebook.
            room = http.put(
                hub.user_url(name) + "api/collaboration/session/hello.ipynb",
                headers=user_headers(token),
                json={"format": "json", "type": "notebook"},
            )
            assert room.status_code in (200, 201), room.text
            assert room.json()["sessionId"]

        # alice's token on bob's server, bob's on alice's, and no token at all: refused.
        for name, headers in (
            ("bob", user_headers(alice)),
            ("bob", user_headers(alice, "Bearer")),
            ("alice", user_headers(bob)),
            ("alice", {}),
            ("bob", {}),
        ):
            for method in ("GET", "PUT"):
                body = notebook_json("stolen") if method == "PUT" else None
                refused = http.request(
                    method, hub.user_url(name) + contents, headers=headers, json=body
                )
                assert refused.status_code == 403, (name, method, refused.status_code)
        for name in ("alice", "bob"):
            assert stored_sources(hub.home(name) / "hello.ipynb") == [f"print('{name}')"]


WHO = "import os\nprint(os.environ['JUPYTERHUB_USER'], os.getcwd(), 6 * 7)"


async def test_each_agent_edits_and_runs_its_users_notebooks_over_mcp(hub: Hub) -> None:
    """Two agents at once, each with its user's token: each creates, runs and saves a notebook
    in its own user's home, in a kernel of that user's server."""
    alice, bob = hub.token("alice"), hub.token("bob")
    require_mcp(hub, "alice", alice)
    async with agent(hub, "alice", alice) as a, agent(hub, "bob", bob, "Bearer") as b:

        async def work(name: str, client: Client) -> None:
            path = f"{name}-agent.ipynb"
            await call(client, "create_notebook", path=path, cells=[WHO])
            await call(client, "insert_cells", path=path, cells=["total = sum(range(10))\ntotal"])
            done = await call(client, "execute", path=path, cells="all", wait=PATIENCE)
            assert done["status"] == "done", done
            await call(client, "save_notebook", path=path)

        async with anyio.create_task_group() as tg:
            tg.start_soon(work, "alice", a)
            tg.start_soon(work, "bob", b)

    for name, other in (("alice", "bob"), ("bob", "alice")):
        home = hub.home(name)
        cells = stored_cells(home / f"{name}-agent.ipynb")
        assert [c.source for c in cells] == [WHO, "total = sum(range(10))\ntotal"]
        # The kernel belongs to this user's server: it runs in their home, as their Hub user.
        printed = "".join(o.get("text", "") for o in cells[0].outputs)
        assert printed == f"{name} {home} 42\n"
        assert cells[1].outputs[0].data["text/plain"] == "45"
        assert not (hub.home(other) / f"{name}-agent.ipynb").exists()


def test_mcp_refuses_another_users_token_and_no_token(hub: Hub) -> None:
    alice, bob = hub.token("alice"), hub.token("bob")
    # A token of alice's that may not reach her server (no access:servers scope).
    no_access = hub.token("alice", ["read:users:name!user=alice"])
    require_mcp(hub, "alice", alice)
    with httpx2.Client(timeout=60, follow_redirects=False) as http:

        def post(name: str, headers: dict[str, str]) -> httpx2.Response:
            return http.post(
                f"{hub.user_url(name)}mcp",
                headers={**MCP_HEADERS, **headers},
                json=initialize_request(),
            )

        # The control: each user's own token is let in.
        for name, token in (("alice", alice), ("bob", bob)):
            accepted = post(name, user_headers(token))
            assert accepted.status_code == 200, (name, accepted.status_code, accepted.text)
        for name, headers in (
            ("bob", user_headers(alice)),
            ("bob", user_headers(alice, "Bearer")),
            ("alice", user_headers(bob, "Bearer")),
            ("alice", user_headers(no_access)),
            ("alice", {}),
            ("bob", {}),
            ("bob", user_headers("not-a-token")),
        ):
            refused = post(name, headers)
            assert refused.status_code == 403, (name, refused.status_code, refused.text)
            assert "serverInfo" not in refused.text


def shut_down_kernels(hub: Hub, name: str, token: str) -> None:
    with httpx2.Client(headers=user_headers(token), timeout=60) as http:
        for kernel in http.get(f"{hub.user_url(name)}api/kernels").json():
            gone = http.delete(f"{hub.user_url(name)}api/kernels/{kernel['id']}")
            assert gone.status_code == 204, gone.text


async def test_footprint_of_a_users_server_with_nbrelay_and_one_kernel(
    hub: Hub, request: pytest.FixtureRequest
) -> None:
    """Measure what sizing needs: the resident memory of one idle single-user server with
    nbrelay loaded and one kernel, of the Hub and of its proxy (docs/deploy/kubernetes.md: Sizing)."""
    token = hub.token("alice")
    require_mcp(hub, "alice", token)
    shut_down_kernels(hub, "alice", token)  # those of the tests before: one kernel is measured
    async with agent(hub, "alice", token) as client:
        await call(client, "create_notebook", path="footprint.ipynb", cells=["x = 1"])
        done = await call(client, "execute", path="footprint.ipynb", cells="all", wait=PATIENCE)
        assert done["status"] == "done", done

        server = psutil.Process(hub.server_pid("alice"))
        assert any("jupyterhub-singleuser" in part for part in server.cmdline())

        def kernels() -> list[psutil.Process]:
            return [
                p for p in server.children(recursive=True) if "ipykernel" in " ".join(p.cmdline())
            ]

        # The kernels shut down before have exited (their processes may take a moment to go).
        await wait_for(lambda: len(kernels()) == 1, seconds=PATIENCE)
        kernel = kernels()[0]
        assert hub.proc is not None
        hub_process = psutil.Process(hub.proc.pid)
        proxies = [
            p for p in hub_process.children() if "configurable-http-proxy" in " ".join(p.cmdline())
        ]
        assert len(proxies) == 1
        mib = 1024 * 1024
        figures = {
            "single-user server (JupyterLab, jupyter-collaboration, nbrelay)": server.memory_info().rss,
            "one idle ipykernel": kernel.memory_info().rss,
            "JupyterHub (2 users)": hub_process.memory_info().rss,
            "configurable-http-proxy (3 routes)": proxies[0].memory_info().rss,
        }
        for what, rss in figures.items():
            assert rss > 0
            report(request, f"hub footprint: {what}: RSS {rss / mib:.0f} MiB")
