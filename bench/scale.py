"""nbrelay's start, memory and many-agent throughput, each against a baseline from the same run.

* **start → tools listed**: ``nbrelay serve`` over stdio against a bare ``mcp`` SDK server (one
  empty tool), spawned alternately, ``--starts`` times each; medians and their ratio, of the
  time and of the server's CPU seconds (user + system) until its tools are listed.
* **memory, no kernels**: the resident set (``VmRSS`` from ``/proc``) of each of those two
  servers once its tools are listed (nbrelay after one ``read_notebook`` of a small notebook too).
* **many agents**: one real ``nbrelay serve --http`` process on a free 127.0.0.1 port; N official
  MCP clients, each with its own session and its own notebook, call ``edit_cell`` and
  ``read_cell`` on it in a loop for ``--window`` seconds. Calls per second at N = 50 and
  N = 100 (alternated, ``--rounds`` times; medians), and the server's CPU seconds per call.
* **memory after opening big notebooks**: ``--big-mb`` MB of notebooks (``--big-cells`` 10,000
  cells each with ``--big-output`` 300 bytes of output: about 6 MB a notebook, the shape whose
  parsed form costs the most memory per byte), every one opened with ``read_notebook``; the
  server's resident set against the bytes of the notebooks opened.

Run: ``python -m bench.scale [--rows start,memory,agents,big]`` (prints a table; not part of the
test run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.compare import BARE_SERVER
from nbrelay.notebook.model import new_cell, new_notebook, serialize

SERVING = re.compile(r"serving MCP over streamable HTTP at (http://\S+/mcp)")
ROWS = ("start", "memory", "agents", "big")


def rss(pid: int) -> int:
    """The resident set of one process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children() -> set[int]:
    me = os.getpid()
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == me:
                out.add(int(entry.name))
    return out


def small_notebook(tag: str, cells: int = 200) -> bytes:
    return serialize(
        new_notebook([new_cell("code", f"x_{i} = {i}  # {tag}", f"c{i}") for i in range(cells)])
    )


def big_notebook(tag: str, cells: int = 1000, output: int = 10_000) -> bytes:
    line = ("y" * 99 + "\n") * (output // 100)
    made = []
    for i in range(cells):
        cell = new_cell("code", f"print('{tag}', {i})", f"c{i}")
        cell["execution_count"] = i + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"{i}\n{line}"}]
        made.append(cell)
    return serialize(new_notebook(made))


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


# -- start and memory over stdio ------------------------------------------------------------


async def stdio_start(
    params: StdioServerParameters, read: str | None
) -> tuple[float, float, int, int]:
    """Seconds from spawn to tools listed; the server's CPU seconds then (user + system: what
    the start costs, whatever else the machine runs); RSS then; RSS after a read_notebook of
    ``read``."""
    before = children()
    t = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
        took = time.perf_counter() - t
        (pid,) = children() - before
        cpu = cpu_seconds(pid)
        listed = rss(pid)
        after = listed
        if read is not None:
            result = await client.call_tool("read_notebook", {"path": read, "limit": 20})
            assert not result.is_error, result
            after = rss(pid)
    return took, cpu, listed, after


async def start_and_memory(starts: int) -> list[tuple[str, str, str, str]]:
    with tempfile.TemporaryDirectory(prefix="nbrelay-scale-") as tmp:
        root = Path(tmp)
        (root / "bare.py").write_text(BARE_SERVER)
        (root / "nb.ipynb").write_bytes(small_notebook("start"))
        bare = StdioServerParameters(command=sys.executable, args=[str(root / "bare.py")])
        ours = StdioServerParameters(
            command=sys.executable,
            args=["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(root / ".l")],
        )
        b_t, b_c, b_m, o_t, o_c, o_m, o_r = [], [], [], [], [], [], []
        for _ in range(starts):  # alternated, so that load on the machine hits both alike
            t, c, m, _r = await stdio_start(bare, None)
            b_t.append(t)
            b_c.append(c)
            b_m.append(m)
            t, c, m, r = await stdio_start(ours, "nb.ipynb")
            o_t.append(t)
            o_c.append(c)
            o_m.append(m)
            o_r.append(r)
    bt, ot = statistics.median(b_t), statistics.median(o_t)
    bc, oc = statistics.median(b_c), statistics.median(o_c)
    bm, om, orr = statistics.median(b_m), statistics.median(o_m), statistics.median(o_r)
    return [
        ("start → tools listed", f"{bt * 1000:.0f} ms", f"{ot * 1000:.0f} ms", f"{ot / bt:.2f}×"),
        ("CPU, start → tools listed", f"{bc:.2f} s", f"{oc:.2f} s", f"{oc / bc:.2f}×"),
        ("RSS, tools listed, no kernels", mb(bm), mb(om), f"{om / bm:.2f}×"),
        ("RSS after one read_notebook", mb(bm), mb(orr), f"{orr / bm:.2f}×"),
    ]


# -- one HTTP server, many clients ----------------------------------------------------------


@contextlib.contextmanager
def http_server(root: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBRELAY_")}
    env["NBRELAY_TOKEN"] = token
    log = root / f"server-{secrets.token_hex(3)}.log"
    argv = [sys.executable, "-m", "nbrelay", "serve", "--http", "--port", "0"]
    argv += ["--root", str(root), "--lock-dir", str(root / ".locks"), *args]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := SERVING.search(log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nbrelay did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield proc, found.group(1), token
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@contextlib.asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(120.0, read=300.0)
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


async def call(client: Client, tool: str, args: dict[str, Any]) -> None:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")


async def agents_window(clients: list[Client], names: list[str], seconds: float) -> int:
    """Every client edits and reads its own notebook in a loop; the calls done in ``seconds``."""
    done = 0
    stop = time.monotonic() + seconds

    async def agent(client: Client, name: str) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < stop:
            if i % 2:
                await call(client, "read_cell", {"path": name, "cell": i % 50})
            else:
                await call(client, "edit_cell", {"path": name, "cell": i % 50, "source": f"v={i}"})
            done += 1
            i += 1

    async with anyio.create_task_group() as tg:
        for client, name in zip(clients, names, strict=True):
            tg.start_soon(agent, client, name)
    return done


async def many_agents(sizes: list[int], rounds: int, window: float) -> list[tuple[str, ...]]:
    most = max(sizes)
    with tempfile.TemporaryDirectory(prefix="nbrelay-agents-") as tmp:
        root = Path(tmp)
        names = [f"agent{i:03d}.ipynb" for i in range(most)]
        for name in names:
            (root / name).write_bytes(small_notebook(name))
        with http_server(root) as (proc, url, token):
            async with contextlib.AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(http_client(url, token)) for _ in names]
                for client, name in zip(clients, names, strict=True):  # every notebook open
                    await call(client, "read_cell", {"path": name, "cell": 0})
                rates: dict[int, list[float]] = {n: [] for n in sizes}
                cpu: dict[int, list[float]] = {n: [] for n in sizes}
                mine: dict[int, list[float]] = {n: [] for n in sizes}
                for _ in range(rounds):
                    for n in sizes:
                        c0, m0 = cpu_seconds(proc.pid), time.process_time()
                        t0 = time.perf_counter()
                        calls = await agents_window(clients[:n], names[:n], window)
                        took = time.perf_counter() - t0
                        rates[n].append(calls / took)
                        cpu[n].append((cpu_seconds(proc.pid) - c0) / calls)
                        mine[n].append((time.process_time() - m0) / calls)
    base = statistics.median(rates[sizes[0]])
    rows: list[tuple[str, ...]] = []
    for n in sizes:
        r = statistics.median(rates[n])
        ms = statistics.median(cpu[n]) * 1000
        own = statistics.median(mine[n]) * 1000
        rows.append(
            (
                f"{n} HTTP agents, own notebooks",
                f"{base:.0f} calls/s at N={sizes[0]}",
                f"{r:.0f} calls/s",
                f"{r / base:.2f}× (CPU/call: server {ms:.1f} ms, clients {own:.1f} ms)",
            )
        )
    return rows


async def big_notebooks(total_mb: int, cells: int, output: int) -> list[tuple[str, ...]]:
    with tempfile.TemporaryDirectory(prefix="nbrelay-big-") as tmp:
        root = Path(tmp)
        one = big_notebook("big", cells, output)
        count = max(1, round(total_mb * 1e6 / len(one)))
        names = [f"big{i:03d}.ipynb" for i in range(count)]
        for i, name in enumerate(names):
            (root / name).write_bytes(big_notebook(f"big{i}", cells, output))
        size = sum((root / n).stat().st_size for n in names)
        with http_server(root) as (proc, url, token):
            async with http_client(url, token) as client:
                await call(client, "read_cell", {"path": names[0], "cell": 0})
                idle = rss(proc.pid)
                for name in names:
                    await call(client, "read_notebook", {"path": name, "limit": 10})
                full = rss(proc.pid)
    return [
        (
            f"RSS after opening {count} notebooks",
            f"{mb(size)} of notebooks",
            f"{mb(full)} ({mb(idle)} before)",
            f"{full / size:.2f}× their bytes",
        )
    ]


async def main(args: argparse.Namespace) -> int:
    rows: list[tuple[str, ...]] = []
    wanted = set(args.rows.split(","))
    if unknown := wanted - set(ROWS):
        raise SystemExit(f"unknown rows {sorted(unknown)}; choose from {','.join(ROWS)}")
    if "start" in wanted or "memory" in wanted:
        rows += await start_and_memory(args.starts)
    if "agents" in wanted:
        rows += await many_agents([50, 100], args.rounds, args.window)
    if "big" in wanted:
        rows += await big_notebooks(args.big_mb, args.big_cells, args.big_output)
    header = ("measure", "baseline (same run)", "nbrelay", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in [header, *rows]:
        sys.stdout.write(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "\n")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="Which rows: " + ",".join(ROWS))
    parser.add_argument("--starts", type=int, default=7, help="Start-ups per server.")
    parser.add_argument("--rounds", type=int, default=3, help="Windows per agent count.")
    parser.add_argument("--window", type=float, default=10.0, help="Seconds per window.")
    parser.add_argument("--big-mb", type=int, default=424, help="MB of notebooks to open.")
    parser.add_argument("--big-cells", type=int, default=10_000, help="Cells per big notebook.")
    parser.add_argument(
        "--big-output", type=int, default=300, help="Bytes of output per cell of a big notebook."
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
