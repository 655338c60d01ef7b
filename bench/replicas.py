"""What sharing a root between nbrelay processes costs (replicas behind one address).

Every process on a root keeps what each client last read (the stale-edit guard), its undo
history and its runs' journals in the root's state folder, so that any of them can serve the
client's next call. Two measurements, each against a baseline measured in the same run:

* **per call, in process**: ``read_cell`` then ``edit_cell`` on a 200-cell notebook through an
  in-process MCP client, with the shared state (as shipped) against the same server with that
  state kept in memory only (as a single process did before); calls alternate, medians, ratio.
* **throughput over HTTP**: 4 sessionless clients doing ``read_cell`` + ``edit_cell`` (each on a
  notebook of its own) for a fixed time against one nbrelay process, then spread over two
  processes on the same root (round robin, as a load balancer would); calls/s and the ratio.

Run: ``python bench/replicas.py [--quick]`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import anyio
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.server import build_server, build_workspace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.http.harness import http_client, http_server

QUICK = "--quick" in sys.argv
CELLS = 200


def notebook_bytes() -> bytes:
    cells = [new_cell("code", f"x_{i} = {i}\nprint(x_{i})", f"c{i}") for i in range(CELLS)]
    return serialize(new_notebook(cells))


async def step(client: Client, path: str, k: int) -> None:
    read = await client.call_tool("read_cell", {"path": path, "cell": 7})
    assert not read.is_error, read
    edit = await client.call_tool("edit_cell", {"path": path, "cell": 7, "source": f"y = {k}"})
    assert not edit.is_error, edit


async def paired(
    rounds: int, ours: Callable[[int], Awaitable[None]], base: Callable[[int], Awaitable[None]]
) -> tuple[float, float]:
    a: list[float] = []
    b: list[float] = []
    for k in range(rounds):
        for fn, into in ((ours, a), (base, b)):
            start = time.perf_counter()
            await fn(k)
            into.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


async def in_process(folder: Path) -> tuple[float, float]:
    (folder / "s.ipynb").write_bytes(notebook_bytes())
    (folder / "m.ipynb").write_bytes(notebook_bytes())
    shared = Settings(root=folder, kernel_pool=0, lock_dir=folder / ".locks", shared_state=True)
    # The same server with each client's reads and undo history in memory only (the default).
    alone = build_workspace(replace(shared, shared_state=False))
    rounds = 30 if QUICK else 150
    async with (
        Client(build_server(shared)) as with_shared,
        Client(build_server(shared, alone)) as memory_only,
    ):

        async def ours(k: int) -> None:
            await step(with_shared, "s.ipynb", k)

        async def base(k: int) -> None:
            await step(memory_only, "m.ipynb", k)

        return await paired(rounds, ours, base)


async def throughput(urls: list[str], token: str, seconds: float, clients: int = 4) -> float:
    done = 0
    targets = itertools.cycle(urls)

    async def worker(n: int) -> None:
        nonlocal done
        url = next(targets)
        async with http_client(url, token) as client:
            deadline = time.monotonic() + seconds
            k = 0
            while time.monotonic() < deadline:
                await step(client, f"w{n}.ipynb", k)
                k += 1
                done += 2

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(worker, n)
    return done / (time.monotonic() - start)


def over_http(folder: Path) -> tuple[float, float]:
    root = folder / "root"
    root.mkdir()
    for n in range(4):
        (root / f"w{n}.ipynb").write_bytes(notebook_bytes())
    seconds = 8.0 if QUICK else 30.0
    with (
        http_server(root, folder, "--shared-state", name="a") as a,
        http_server(root, folder, "--shared-state", name="b", token=a.token) as b,
    ):
        one = anyio.run(throughput, [a.url], a.token, seconds)
        two = anyio.run(throughput, [a.url, b.url], a.token, seconds)
    return one, two


def main() -> None:
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ours, base = anyio.run(in_process, Path(tmp))
        rows.append(
            (
                f"read_cell + edit_cell, {CELLS} cells, in process",
                f"{ours * 1000:.1f} ms shared vs {base * 1000:.1f} ms memory only: "
                f"{ours / base:.2f}x",
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        one, two = over_http(Path(tmp))
        rows.append(
            (
                "4 HTTP clients, read_cell + edit_cell",
                f"{one:.0f} calls/s on one process, {two:.0f} calls/s on two: {two / one:.2f}x",
            )
        )
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
