"""A long run as an MCP task, across a client that reconnects every minute.

An nbrelay server over streamable HTTP (a real process on 127.0.0.1, bearer token) runs a cell
(in the notebook) that prints one numbered line a second for ``--minutes`` minutes. The official
MCP client declares the tasks extension (``io.modelcontextprotocol/tasks``), calls ``execute``
and is answered with a task; it polls ``tasks/get`` and, every ``--reconnect`` seconds, closes
its connection and opens a new one (a new session), going on by task id. At the end it counts
the lines the task's result holds and the lines the notebook file holds, against the lines
printed.

``--live`` runs it in live mode: a real JupyterLab with jupyter-collaboration on a free
127.0.0.1 port, nbrelay with ``--jupyter-url`` and ``--shared-state`` (tasks recorded in a
private runtime folder, so another process answers them). ``--kill-at SECONDS`` (live only)
kills the nbrelay process with SIGKILL that many seconds into the run, between two of the
client's connections, and starts a new one with the same arguments and token (on a new port:
the client is given its URL). The client asks the new process for the task by id (it is
answered ``failed``, naming the run's handle) and then follows the run with
``get_execution(handle)`` to its end; the lines it counts are those ``get_execution`` returned.
The notebook file is read from disk once the run has ended and the room's save has settled
(bounded: up to 60 s for the last line, then 3 s more).

Figures: outputs lost (target 0) in what the client got (the task's result, or after a kill
``get_execution``'s outputs) and in the notebook file, with the numbers of any line lost and,
after a kill, when each was printed against it (the cell prints its start on the machine's
monotonic clock, which the bench shares); the run's wall time against its floor (the cell's own
running time, measured by the kernel) as a ratio; polls and reconnects; with a kill, when it
happened, the last line the dead process had shown in the task's status, how soon the new
process answered, and how many kernel messages the run's note told the agent may be missing
(every lost line should be covered: each line is one message).

Run: ``python bench/long_runs.py --minutes 10`` from the repository root (not part of the test
run; it takes the minutes asked for), or ``python bench/long_runs.py --live --minutes 10
--kill-at 240``. Every process it starts is stopped by PID when it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
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
from tests.http.harness import RunningServer, auth_headers, canary_token, http_server
from tests.live.server import JupyterServer, free_port
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


ENDED = ("completed", "failed", "cancelled")


def told_missing(note: str) -> int:
    """How many kernel messages a run's note says may be missing (0: it says nothing)."""
    found = re.search(
        r"(\d+) kernel message\(s\) sent while nbrelay restarted may be missing", note
    )
    return int(found.group(1)) if found else 0


def handle_of(state: dict[str, Any]) -> str | None:
    """The run's handle a task names (its ``_meta``, else its status message)."""
    run_meta = (state.get("_meta") or {}).get("io.github.nbrelay/run") or {}
    if run_meta.get("handle"):
        return str(run_meta["handle"])
    found = re.search(r"handle[ =:\"']+([A-Za-z0-9_-]+)", str(state.get("statusMessage", "")))
    return found.group(1) if found else None


def stream_text(cells: list[dict[str, Any]]) -> str:
    return "".join(str(o.get("text", "")) for c in cells for o in c.get("outputs") or [])


def file_text(path: Path) -> str:
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    return "".join(
        "".join(o.get("text", []))
        for c in saved["cells"]
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )


async def run(
    minutes: float, reconnect: float, poll: float, live: bool = False, kill_at: float | None = None
) -> dict[str, Any]:
    seconds = int(minutes * 60)
    code = (
        # t0 on the machine's monotonic clock, which the bench shares: it places each line
        # (printed at t0 + i) against the kill
        "import time\nt0 = time.monotonic()\nprint('t0', t0, flush=True)\n"
        f"for i in range({seconds}):\n"
        "    print('line', i, flush=True)\n"
        "    time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))\n"
        "print('took', round(time.monotonic() - t0, 2))"
    )
    figures: dict[str, Any] = {"mode": "live" if live else "file", "minutes": minutes}
    with (
        tempfile.TemporaryDirectory(prefix="nbrelay-long-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        args: tuple[str, ...] = ()
        env: dict[str, str] = {}
        if live:
            runtime = Path(tmp) / "run-user"
            runtime.mkdir(mode=0o700)
            lab = JupyterServer(
                root=Path(tmp) / "lab", work=Path(tmp) / "work", port=free_port(), nbrelay=False
            )
            lab.start()
            stack.callback(lab.stop)
            root, served = lab.root, Path(tmp) / "unused"
            args = ("--jupyter-url", lab.url, "--kernel-pool", "0", "--shared-state")
            env = {"JUPYTER_TOKEN": lab.token, "XDG_RUNTIME_DIR": str(runtime)}
        else:
            root = served = Path(tmp) / "root"
            root.mkdir()
        write_notebook(root / "long.ipynb", notebook(code))
        token = canary_token("bench")

        def serve(name: str) -> RunningServer:
            return stack.enter_context(
                http_server(served, Path(tmp), *args, token=token, env=env, name=name)
            )

        server = serve("first")
        async with connect(server.url, token) as client:
            # warm the kernel, so the floor is the cell's time alone
            await client.call_tool("execute", {"path": "long.ipynb", "code": "1"})
            started = time.monotonic()
            created = await start_task(
                client, "execute", path="long.ipynb", cells=[":"], timeout=seconds + 300
            )
        task_id = created["taskId"]
        polls = reconnects = 0
        state: dict[str, Any] = {}
        kill_due = None if kill_at is None else started + kill_at
        killed: float | None = None
        with anyio.fail_after(seconds + 600):
            while state.get("status") not in ENDED:
                reconnects += 1
                async with connect(server.url, token) as client:
                    until = time.monotonic() + reconnect
                    if kill_due is not None:
                        until = min(until, kill_due)
                    while time.monotonic() < until:
                        state = await tasks_request(client.session, "tasks/get", task_id)
                        polls += 1
                        if state["status"] != "working":
                            break
                        await anyio.sleep(max(0.0, min(poll, until - time.monotonic())))
                if kill_due is not None and time.monotonic() >= kill_due:
                    # kill -9 mid-run; a new process with the same arguments and token (a new
                    # port: the client is given the new URL) answers the task by id
                    shown = lines_in(str(state.get("statusMessage", "")).lstrip("…"))
                    figures["last line the dead process showed"] = max(shown, default=None)
                    killed = time.monotonic()
                    server.proc.kill()
                    server.proc.wait(timeout=10)
                    figures["killed at s"] = round(killed - started, 1)
                    kill_due = None
                    server = serve("again")
                    figures["new process answering after s"] = round(
                        time.monotonic() - started - figures["killed at s"], 1
                    )
        figures["task status"] = state.get("status")
        printed = ""
        executions = 0
        told = 0
        if "killed at s" in figures:
            figures["task's message"] = str(state.get("statusMessage", ""))[:120]
            handle = handle_of(state)
            if handle is None:
                raise SystemExit(f"the failed task names no run handle: {state}")
            # follow the run by its handle to its end (get_execution returns only new output)
            done = False
            with anyio.fail_after(seconds + 600):
                while not done:
                    reconnects += 1
                    async with connect(server.url, token) as client:
                        until = time.monotonic() + reconnect
                        while not done and time.monotonic() < until:
                            wait = max(1, min(30, int(until - time.monotonic())))
                            answer = await client.call_tool(
                                "get_execution", {"handle": handle, "wait": wait}
                            )
                            executions += 1
                            data = answer.structured_content or {}
                            if answer.is_error:
                                raise SystemExit(f"get_execution failed: {answer.content}")
                            printed += stream_text(data.get("cells", []))
                            told = max(told, told_missing(str(data.get("note") or "")))
                            done = data.get("status") == "done"
            figures["re-attached"] = "re-attached" in str(data.get("note", ""))
            figures["messages told may be missing"] = told
        else:
            result = CallToolResult.model_validate(state.get("result") or {"content": []})
            printed = stream_text((result.structured_content or {}).get("cells", []))
        wall = time.monotonic() - started
        # the notebook file: jupyter-collaboration saves the room to disk a moment after the
        # last change (live); nbrelay has saved it before the result (file)
        expected = set(range(seconds))
        settle_until = time.monotonic() + (60.0 if live else 0.0)
        in_file = file_text(root / "long.ipynb")
        while "took " not in in_file and time.monotonic() < settle_until:
            await anyio.sleep(1.0)
            in_file = file_text(root / "long.ipynb")
        if live:
            await anyio.sleep(3.0)  # one more save, if one was under way
            in_file = file_text(root / "long.ipynb")
    took = next(
        (float(line.split()[1]) for line in printed.splitlines() if line.startswith("took ")),
        None,
    )
    lost_result = sorted(expected - lines_in(printed))
    lost_file = sorted(expected - lines_in(in_file))
    figures.update(
        {
            "lines printed": seconds,
            "lost in what the client got": len(lost_result),
            "lost in the notebook file": len(lost_file),
            "reconnects": reconnects,
            "polls": polls,
        }
    )
    if "killed at s" in figures:
        figures["get_execution calls"] = executions
    t0 = next(
        (float(line.split()[1]) for line in printed.splitlines() if line.startswith("t0 ")),
        None,
    )

    def placed(lost: list[int]) -> list[str]:
        """Each lost line, with when it was printed against the kill (if there was one)."""
        if killed is None or t0 is None:
            return [str(i) for i in lost]
        return [f"{i} (printed {t0 + i - killed:+.2f} s from the kill)" for i in lost]

    if lost_result:
        figures["lines lost (client)"] = placed(lost_result)
    if lost_file:
        figures["lines lost (file)"] = placed(lost_file)
    figures.update(
        {
            "wall s": round(wall, 1),
            "cell's own s (floor)": took,
            "wall / floor": round(wall / took, 3) if took else None,
        }
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--reconnect", type=float, default=60.0, help="seconds per connection")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between tasks/get")
    parser.add_argument(
        "--live", action="store_true", help="live mode: a real JupyterLab with collaboration"
    )
    parser.add_argument(
        "--kill-at", type=float, default=None, help="kill -9 nbrelay this many seconds in (live)"
    )
    args = parser.parse_args()
    if args.kill_at is not None and not args.live:
        parser.error("--kill-at needs --live: in file mode the kernel dies with nbrelay")
    if args.kill_at is not None and not 0 < args.kill_at < args.minutes * 60:
        parser.error("--kill-at must fall inside the run (0 < SECONDS < --minutes * 60)")
    figures = anyio.run(run, args.minutes, args.reconnect, args.poll, args.live, args.kill_at)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
