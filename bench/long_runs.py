"""A long run as an MCP task, across a client that reconnects every minute.

An nbrelay server over streamable HTTP (a real process on 127.0.0.1, bearer token) runs a cell
(in the notebook) that prints one numbered line a second for ``--minutes`` minutes. The official MCP client
declares the tasks extension (``io.modelcontextprotocol/tasks``), calls ``execute`` and is
answered with a task; it polls ``tasks/get`` and, every ``--reconnect`` seconds, closes its
connection and opens a new one (a new session), going on by task id. At the end it counts the
lines the task's result holds and the lines the notebook file holds, against the lines printed.

Figures: outputs lost (target 0) in the result and in the notebook; the run's wall time against
its floor (the cell's own running time, measured by the kernel) as a ratio; polls and
reconnects.

Run: ``python bench/long_runs.py --minutes 10`` from the repository root (not part of the test
run; it takes the minutes asked for).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import notebook, write_notebook
from tests.http.harness import auth_headers, http_server
from tests.tools.tasks_client import Tasks, start_task, tasks_request


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(60.0, read=120.0)
    async with (
        httpx2.AsyncClient(headers=auth_headers(token), timeout=timeout) as http,
        Client(
            streamable_http_client(url, http_client=http), mode="auto", extensions=[Tasks()]
        ) as client,
    ):
        yield client


def lines_in(text: str) -> set[int]:
    found = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "line" and parts[1].isdigit():
            found.add(int(parts[1]))
    return found


async def run(minutes: float, reconnect: float, poll: float) -> dict[str, Any]:
    seconds = int(minutes * 60)
    code = (
        "import time\nt0 = time.monotonic()\n"
        f"for i in range({seconds}):\n"
        "    print('line', i, flush=True)\n"
        "    time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))\n"
        "print('took', round(time.monotonic() - t0, 2))"
    )
    with tempfile.TemporaryDirectory(prefix="nbrelay-long-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        write_notebook(root / "long.ipynb", notebook(code))
        with http_server(root, Path(tmp)) as server:
            async with connect(server.url, server.token) as client:
                # warm the kernel, so the floor is the cell's time alone
                await client.call_tool("execute", {"path": "long.ipynb", "code": "1"})
                started = time.monotonic()
                created = await start_task(
                    client, "execute", path="long.ipynb", cells=[":"], timeout=seconds + 300
                )
            task_id = created["taskId"]
            polls = reconnects = 0
            state: dict[str, Any] = {}
            with anyio.fail_after(seconds + 600):
                while state.get("status") not in ("completed", "failed", "cancelled"):
                    reconnects += 1
                    async with connect(server.url, server.token) as client:
                        until = time.monotonic() + reconnect
                        while time.monotonic() < until:
                            state = await tasks_request(client.session, "tasks/get", task_id)
                            polls += 1
                            if state["status"] != "working":
                                break
                            await anyio.sleep(poll)
            wall = time.monotonic() - started
            saved = json.loads((root / "long.ipynb").read_text())
    result = CallToolResult.model_validate(state.get("result") or {"content": []})
    data = result.structured_content or {}
    printed = "".join(
        str(o.get("text", "")) for c in data.get("cells", []) for o in c.get("outputs") or []
    )
    in_file = "".join(
        "".join(o.get("text", []))
        for c in saved["cells"]
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )
    took = next(
        (float(line.split()[1]) for line in printed.splitlines() if line.startswith("took ")),
        None,
    )
    expected = set(range(seconds))
    return {
        "minutes": minutes,
        "status": state.get("status"),
        "lines printed": seconds,
        "lost in the task's result": len(expected - lines_in(printed)),
        "lost in the notebook file": len(expected - lines_in(in_file)),
        "reconnects": reconnects,
        "polls": polls,
        "wall s": round(wall, 1),
        "cell's own s (floor)": took,
        "wall / floor": round(wall / took, 3) if took else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--reconnect", type=float, default=60.0, help="seconds per connection")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between tasks/get")
    args = parser.parse_args()
    figures = anyio.run(run, args.minutes, args.reconnect, args.poll)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
