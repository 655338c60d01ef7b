"""Secrets (plan G4): canary tokens never appear in logs, results, notebooks, process arguments
or kernel environments, even with debug logging on and with failed attempts that carry tokens.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import psutil
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import notebook, write_notebook
from tests.http.harness import (
    auth_headers,
    canary_token,
    http_client,
    http_server,
    report,
    server_env,
)
from tests.security.surface import everything_said

pytestmark = pytest.mark.anyio

ENV_PROBE = (
    "import os\n"
    "found = sorted(k for k, v in os.environ.items() if 'CANARY' in v)\n"
    "raw = open('/proc/self/environ', 'rb').read()\n"
    "print('CANARY-VARS', found, b'CANARY' in raw)"
)


def _processes(pid: int) -> list[psutil.Process]:
    me = psutil.Process(pid)
    return [me, *me.children(recursive=True)]


async def test_tokens_never_leak_over_http(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    token, jupyter, wrong = canary_token("mcp"), canary_token("jupyter"), canary_token("wrong")
    secrets = (token, jupyter, wrong)
    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    said: list[str] = []
    argv: list[str] = []
    kernel_env_checked = 0
    with http_server(
        root,
        tmp_path,
        "--log-level",
        "DEBUG",
        token=token,
        env={"JUPYTER_TOKEN": jupyter},
    ) as server:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        async with httpx2.AsyncClient(timeout=60) as http:
            for attempt in (
                {"headers": {**headers, **auth_headers(wrong)}},
                {"headers": headers, "params": {"token": wrong}},
                {"headers": {**headers, **auth_headers(token)}, "params": {"access_token": token}},
                {"headers": {**headers, **auth_headers(wrong), "Host": "evil.example"}},
                {"headers": {**headers, **auth_headers(wrong), "Origin": "http://evil.example"}},
            ):
                resp = await http.post(server.url, json=body, **attempt)  # type: ignore[arg-type]
                assert resp.status_code in (401, 403, 421)
                said.append(resp.text + json.dumps(dict(resp.headers)))
        async with http_client(server.url, token, mode="legacy") as client:
            for tool, args in [
                ("list_notebooks", {}),
                ("read_notebook", {"path": "a.ipynb", "full": True}),
                ("read_notebook", {"path": "../outside.ipynb"}),
                ("edit_cell", {"path": "a.ipynb", "cell": 9, "source": "y"}),
                ("insert_cells", {"path": "a.ipynb", "cells": ["z = 2"]}),
                ("execute", {"path": "a.ipynb", "code": ENV_PROBE}),
                ("execute", {"path": "a.ipynb", "code": "import os; os.environ"}),
                ("execute", {"path": "a.ipynb", "cells": [0, 1]}),
            ]:
                with anyio.fail_after(120):
                    result = await client.call_tool(tool, cast(dict[str, Any], args))
                text = everything_said(result)
                said.append(text)
                if "CANARY-VARS" in text:
                    assert "CANARY-VARS [] False" in text, text[:500]
                    kernel_env_checked += 1
            # Process arguments of the server and its kernels; the kernels' environments.
            for proc in _processes(server.proc.pid):
                argv.append(" ".join(proc.cmdline()))
                if proc.pid != server.proc.pid:
                    env = proc.environ()
                    assert not [k for k, v in env.items() if any(s in v for s in secrets)]
                    kernel_env_checked += 1
        assert len(argv) >= 2, "no kernel process was checked"
        logs = server.stderr()
    notebooks = "".join(p.read_text() for p in root.rglob("*") if p.is_file())
    places = {"stderr log": logs, "results": "\n".join(said), "argv": "\n".join(argv)}
    places["notebooks"] = notebooks
    for where, text in places.items():
        for secret in secrets:
            assert secret not in text, f"a token leaked into the {where}"
    assert "refused POST /mcp" in logs  # the log did record the refusals, without the tokens
    assert kernel_env_checked >= 2
    report(
        request,
        f"G4 HTTP: 3 canary tokens (MCP, Jupyter, a wrong one sent in headers and query strings), "
        f"debug logging: 0 hits in {len(logs):,} bytes of log, {len(said)} results, "
        f"{len(argv)} process command lines, {kernel_env_checked} kernel environments, notebooks",
    )


async def test_tokens_in_the_environment_never_reach_kernels_over_stdio(tmp_path: Path) -> None:
    token, jupyter = canary_token("mcp"), canary_token("jupyter")
    write_notebook(tmp_path / "a.ipynb", notebook("x = 1"))
    env = server_env(token, {"JUPYTER_TOKEN": jupyter})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(tmp_path), "--log-level", "DEBUG"],
        env=env,
    )
    with anyio.fail_after(180):
        async with Client(params) as client:
            result = await client.call_tool("execute", {"path": "a.ipynb", "code": ENV_PROBE})
    text = everything_said(result)
    assert "CANARY-VARS [] False" in text, text[:500]
    assert token not in text
    assert jupyter not in text
    assert token not in (tmp_path / "a.ipynb").read_text()
    assert os.environ.get("NBRELAY_TOKEN") != token
