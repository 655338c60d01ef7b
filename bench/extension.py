"""Extension mode against file mode: the time of one ``edit_cell`` tool call, as the agent sees it.

Measured in the same run, each through the official MCP client over streamable HTTP on
127.0.0.1, on the same 30-cell notebook:

* **file mode** (the baseline): ``nbrelay serve --http`` on a folder;
* **extension, open nowhere**: nbrelay inside a Jupyter Server (with jupyter-collaboration), the
  notebook open nowhere (nbrelay opens its room in the server; nobody else is in it);
* **extension, person in room**: the same, with a person (an RTC client, in a process of its own) in the
  notebook's room, so each edit is a CRDT transaction on the room's document in the server's
  process, sent on to the person.

Target: extension p50 ≤ file mode p50 + 2 ms.

Run: ``python bench/extension.py`` (about a minute; not part of the test run).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp import Client

from tests.extension.conftest import ext_client, make_server
from tests.helpers import call, notebook, write_notebook
from tests.http.harness import http_client, http_server
from tests.live.server import JupyterServer

ROUNDS = 60
WARMUP = 5
CELLS = 30


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def edit_once(client: Client, path: str, k: int) -> float:
    """Seconds of one edit_cell call (a find/replace in the middle cell, alternating)."""
    old, new = ("x = 0", "x = 1") if k % 2 == 0 else ("x = 1", "x = 0")
    start = time.perf_counter()
    await call(client, "edit_cell", path=path, cell=CELLS // 2, find=old, replace=new)
    return time.perf_counter() - start


PERSON = """
import sys, anyio
sys.path.insert(0, sys.argv[1])
from tests.live.person import person
from tests.live.server import JupyterServer

async def main():
    server = JupyterServer(root=None, work=None, port=int(sys.argv[2]), token=sys.argv[3])
    async with person(server, sys.argv[4]):
        print("joined", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)

anyio.run(main)
"""


@asynccontextmanager
async def person_elsewhere(server: JupyterServer, path: str) -> AsyncIterator[None]:
    """A person in the notebook's room, in a process of its own (its CPU is not the bench's)."""
    repo = str(Path(__file__).resolve().parent.parent)
    argv = [sys.executable, "-c", PERSON, repo, str(server.port), server.token, path]
    proc = await anyio.to_thread.run_sync(
        lambda: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    )
    try:
        assert proc.stdout is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == b"joined", line
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await anyio.to_thread.run_sync(lambda: proc.wait(30))


def sample() -> object:
    sources = [f"# cell {i}\ny{i} = {i} * 2\nprint(y{i})" for i in range(CELLS)]
    sources[CELLS // 2] = "x = 0"
    return notebook(*sources)


async def main() -> None:
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="nbrelay-bench-ext-") as tmp:
        base = Path(tmp)
        files = base / "files"
        files.mkdir()
        write_notebook(files / "n.ipynb", sample())  # type: ignore[arg-type]
        server = make_server(base / "jupyter")
        server.root.mkdir(parents=True, exist_ok=True)
        write_notebook(server.root / "a.ipynb", sample())  # type: ignore[arg-type]
        write_notebook(server.root / "b.ipynb", sample())  # type: ignore[arg-type]
        server.start()
        try:
            with http_server(files, base) as running:
                async with (
                    http_client(running.url, running.token) as file_client,
                    ext_client(server) as ext,
                    person_elsewhere(server, "b.ipynb"),
                ):
                    # Interleaved, so that the machine's load weighs the same on each.
                    runs = (
                        ("file mode", file_client, "n.ipynb"),
                        ("extension, open nowhere", ext, "a.ipynb"),
                        ("extension, person in room", ext, "b.ipynb"),
                    )
                    for k in range(WARMUP + ROUNDS):
                        for name, client, path in runs:
                            took = await edit_once(client, path, k)
                            if k >= WARMUP:
                                results.setdefault(name, []).append(took)
        finally:
            server.stop()
    floor = statistics.median(results["file mode"])
    print(f"edit_cell on a {CELLS}-cell notebook, {ROUNDS} calls each (ms)")
    for name, values in results.items():
        p50, p95 = statistics.median(values), pct(values, 0.95)
        print(
            f"  {name:<26} p50 {p50 * 1000:7.2f}  p95 {p95 * 1000:7.2f}  "
            f"p50 - file mode {(p50 - floor) * 1000:+6.2f}  ratio {p50 / floor:5.2f}"
        )
    worst = max(statistics.median(v) for k, v in results.items() if k != "file mode")
    verdict = "met" if worst - floor <= 0.002 else "MISSED"
    print(f"target extension p50 <= file mode p50 + 2 ms: {verdict}")


if __name__ == "__main__":
    anyio.run(main)
