"""Extension and live modes against file mode, with another MCP server working in the same Jupyter.

Measured in one run, each tool call through the official MCP client over streamable HTTP on
127.0.0.1, interleaved call by call (so the machine's load weighs the same on each), on notebooks
of 200 and 10,000 cells with outputs (``--sizes``):

* **file mode** (the baseline): ``nbrelay serve --http`` on a folder;
* **extension**: nbrelay inside a Jupyter Server (JupyterLab with jupyter-collaboration), on a
  copy of the notebook in that server;
* **live**: ``nbrelay serve --http --jupyter-url`` on another copy in the same Jupyter Server;
* **datalayer** (``--with dl``, the other client): datalayer jupyter-mcp-server 2.2.4, installed
  from PyPI into a virtual environment of its own under ``--cache`` as ``bench/compare.py`` does,
  working on a copy of its own in the same Jupyter Server, its own tool for each operation,
  interleaved with the others' calls.

The operations: read the notebook (``read_notebook``'s first page), read one cell, insert a cell,
edit a cell (whole source), delete a cell, in the middle of the notebook. Then the reads again
**while the server saves**: a process of its own keeps the Jupyter Server saving the extension's
and live mode's notebooks (a keystroke in each, then a save request over the collaboration
protocol, again as soon as the server answers).

Targets: extension insert/edit/delete p50 ≤ file mode + 2 ms at 200 cells and ≤ file mode at
10,000 cells; live reads ≤ 2× file mode at 10,000 cells, also while the server saves.

"Open" is each target's first read of the notebook (datalayer: its ``use_notebook`` and first
read), timed once. Notebooks above 1,000 cells get fewer calls (``--repeat-large``, said in the
table's title); a call slower than ``--limit`` seconds is given up, and that target is reported as
"did not finish" for the rest of that size. Each size's tables are printed as soon as measured.
``--settle S`` has the other client wait S seconds after each of its calls, so that what its call
leaves the Jupyter Server doing (closing and reopening its room, saving) runs between the others'
calls rather than only during its own. ``--keep-logs DIR`` keeps the servers' logs (the Jupyter
Server's, with jupyter-collaboration's and nbrelay's lines) when the run ends.

Run: ``python bench/extension.py [--with dl] [--repeat 15] [--sizes 200,10000]`` (200 cells in a
few minutes, 10,000 in about 20 more on two loaded cores; not part of the test run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp import Client, StdioServerParameters

from bench.compare import COMPETITORS, connect, ensure_venv
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from tests.extension.conftest import ext_client, make_server
from tests.http.harness import SERVING, http_client, http_server, server_env
from tests.live.server import JupyterServer
from tests.servers import stop_by_pid, wait_until

OPS = ("read", "read_one", "insert", "edit", "delete")
TITLES = {
    "open": "open (first read)",
    "read": "read the notebook (first page)",
    "read_one": "read one cell",
    "insert": "insert a cell",
    "edit": "edit a cell (whole source)",
    "delete": "delete a cell",
}
EDITS = ("insert", "edit", "delete")


def make_notebook(cells: int) -> bytes:
    """``cells`` cells as ``bench/compare.py`` makes them: code cells with a stream and a result
    output, a markdown cell every fifth."""
    out = []
    for i in range(cells):
        if i % 5 == 0:
            out.append(
                new_cell("markdown", f"## Step {i}\n\nWhat this step does, in words.", f"m{i}")
            )
            continue
        source = (
            f"values_{i} = [x * {i} for x in range(10)]\ntotal_{i} = sum(values_{i})\ntotal_{i}"
        )
        cell = new_cell("code", source, f"c{i}")
        cell["execution_count"] = i
        cell["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": f"step {i} done\n" * 3},
            {
                "output_type": "execute_result",
                "execution_count": i,
                "data": {"text/plain": str(45 * i)},
                "metadata": {},
            },
        ]
        out.append(cell)
    return serialize(new_notebook(out))


Call = Callable[[str, int], tuple[str, dict[str, Any]]]


def nbrelay_ops(path: str, at: int) -> Call:
    def make(op: str, i: int) -> tuple[str, dict[str, Any]]:
        calls: dict[str, tuple[str, dict[str, Any]]] = {
            "read": ("read_notebook", {"path": path}),
            "read_one": ("read_cell", {"path": path, "cell": at}),
            "insert": ("insert_cells", {"path": path, "index": at, "cells": [f"x = {i}"]}),
            "edit": ("edit_cell", {"path": path, "cell": at, "source": f"y = {i}"}),
            "delete": ("delete_cells", {"path": path, "cells": [at]}),
        }
        return calls[op]

    return make


def dl_ops(name: str, at: int) -> Call:
    nb = {"notebook_name": name}

    def make(op: str, i: int) -> tuple[str, dict[str, Any]]:
        calls: dict[str, tuple[str, dict[str, Any]]] = {
            "read": (
                "read_notebook",
                {**nb, "response_format": "brief", "start_index": 0, "limit": 50},
            ),
            "read_one": ("read_cell", {**nb, "cell_index": at}),
            "insert": (
                "insert_cell",
                {**nb, "cell_index": at, "cell_type": "code", "cell_source": f"x = {i}"},
            ),
            "edit": ("overwrite_cell_source", {**nb, "cell_index": at, "cell_source": f"y = {i}"}),
            "delete": ("delete_cell", {**nb, "cell_indices": [at]}),
        }
        return calls[op]

    return make


@dataclass
class Target:
    title: str
    client: Client
    ops: Call
    times: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    limit: float = 120.0
    gave_up: str = ""
    settle: float = 0.0
    """Seconds to wait after each of this target's calls (``--settle``, for the other client)."""


async def timed_call(target: Target, op: str, i: int, *, keep: bool, as_: str = "") -> None:
    """One call, timed; a call slower than ``target.limit`` is given up, and so is the target."""
    if target.gave_up:
        return
    tool, args = target.ops(op, i)
    start = time.perf_counter()
    result = None
    with anyio.move_on_after(target.limit):
        try:
            result = await target.client.call_tool(tool, args)
        except Exception as exc:  # a target that fails is reported, the run goes on
            target.errors.append(f"{op}: {exc!r}"[:300])
            return
    took = time.perf_counter() - start
    if result is None:
        target.gave_up = f"{op} did not finish in {target.limit:.0f} s"
        return
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        target.errors.append(f"{op}: {text}"[:300])
        return
    if keep:
        target.times.setdefault(as_ or op, []).append(took)


async def rounds(
    targets: list[Target],
    ops: tuple[str, ...],
    repeat: int,
    warmup: int,
    other: Target | None = None,
) -> None:
    """Each op ``repeat`` times on every target, interleaved call by call; insert, edit and
    delete in turn, so the notebooks keep their size. ``other`` works meanwhile, in a loop of
    its own (its first round untimed)."""
    async with anyio.create_task_group() as tg:
        if other is not None:
            tg.start_soon(keep_working, other, ops)
        for target in targets:  # the first read opens the notebook: timed apart
            if "open" not in target.times and "read" in ops:
                await timed_call(target, "read", -1, keep=True, as_="open")
        for i in range(warmup + repeat):
            for op in ops:
                for target in targets:
                    await timed_call(target, op, i, keep=i >= warmup)
                    await anyio.sleep(target.settle)
        tg.cancel_scope.cancel()


async def keep_working(target: Target, ops: tuple[str, ...]) -> None:
    i = 0
    while True:
        for op in ops:
            await timed_call(target, op, i, keep=i > 0)
        i += 1


SAVER = """
import sys, json, time, anyio, httpx2, pycrdt
from websockets.asyncio.client import connect

port, token, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]

async def keep_saving(path):
    headers = {"Authorization": f"token {token}"}
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}/", headers=headers) as http:
        resp = await http.put(f"api/collaboration/session/{path}", json={"format": "json", "type": "notebook"})
        sess = resp.json()
    url = (f"ws://127.0.0.1:{port}/api/collaboration/room/json:notebook:{sess['fileId']}"
           f"?sessionId={sess['sessionId']}")
    doc = pycrdt.Doc()
    cells = doc.get("cells", type=pycrdt.Array)
    synced, answered = anyio.Event(), [anyio.Event()]
    remote = [False]
    async with connect(url, additional_headers=headers, max_size=None) as ws:
        def local(event):
            if not remote[0]:
                ws_queue.append(pycrdt.create_update_message(event.update))
        ws_queue = []
        doc.observe(local)
        await ws.send(pycrdt.create_sync_message(doc))
        async def reader():
            async for msg in ws:
                if msg[0] == 0:
                    remote[0] = True
                    try:
                        reply = pycrdt.handle_sync_message(msg[1:], doc)
                    finally:
                        remote[0] = False
                    if reply is not None:
                        await ws.send(reply)
                    if msg[1] == 1:
                        synced.set()
                elif msg[0] == 2:
                    answered[0].set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await synced.wait()
            print("saving", flush=True)
            k = 0
            while True:
                k += 1
                text = cells[len(cells) - 1]["source"]
                if k % 2:
                    text.insert(len(text), "#")
                else:
                    del text[len(text) - 1]
                while ws_queue:
                    await ws.send(ws_queue.pop(0))
                answered[0] = anyio.Event()
                enc = pycrdt.Encoder()
                enc.write_var_uint(2)
                enc.write_var_string("save")
                enc.write_var_uint(k)
                await ws.send(enc.to_bytes())
                with anyio.move_on_after(60):
                    await answered[0].wait()

async def main():
    async with anyio.create_task_group() as tg:
        for p in paths:
            tg.start_soon(keep_saving, p)
        await anyio.to_thread.run_sync(sys.stdin.read)
        tg.cancel_scope.cancel()

anyio.run(main)
"""


@contextlib.contextmanager
def saving(server: JupyterServer, paths: list[str]) -> Iterator[None]:
    """A process that keeps the server saving ``paths`` (see the module docstring)."""
    argv = [sys.executable, "-c", SAVER, str(server.port), server.token, *paths]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        for _ in paths:
            line = proc.stdout.readline()
            assert line.strip() == b"saving", line
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        stop_by_pid(proc)


@contextlib.contextmanager
def live_server(jupyter: JupyterServer, log_dir: Path) -> Iterator[tuple[str, str]]:
    """``nbrelay serve --http --jupyter-url``: (MCP url, bearer token); stopped by PID."""
    token = secrets.token_hex(16)
    err = log_dir / "live.stderr"
    argv = [sys.executable, "-m", "nbrelay", "serve", "--http", "--port", "0"]
    argv += ["--jupyter-url", jupyter.url]
    env = {**server_env(token), "JUPYTER_TOKEN": jupyter.token}
    with err.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, env=env
        )
    try:
        found = wait_until(
            lambda: SERVING.search(err.read_text(errors="replace")),
            "nbrelay (live mode) did not start",
            seconds=90,
            proc=proc,
            log=err.read_text,
        )
        yield found.group(1), token
    finally:
        stop_by_pid(proc)


@contextlib.asynccontextmanager
async def datalayer(cache: Path, jupyter: JupyterServer) -> AsyncIterator[Client]:
    venv = ensure_venv(cache, "dl")
    args = ["start", "--transport", "stdio", "--jupyter-url", jupyter.url.rstrip("/")]
    args += ["--jupyter-token", jupyter.token]
    params = StdioServerParameters(command=str(venv / "bin" / "jupyter-mcp-server"), args=args)
    async with connect(params) as (client, _pid):
        yield client


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds == seconds else "—"


def report(title: str, targets: list[Target], ops: tuple[str, ...]) -> list[str]:
    """A table of p50s, with each target's ratio to file mode (the first target)."""
    base = targets[0]
    lines = [f"\n{title} (load average {os.getloadavg()[0]:.1f})", ""]
    head = ["operation", base.title]
    for t in targets[1:]:
        head += [t.title, "× file", "− file"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for op in ops:
        floor = p50(base.times.get(op, []))
        row = [TITLES[op], ms(floor)]
        if op == "open":  # timed once
            row[0] += ", once"
        for t in targets[1:]:
            mine = p50(t.times.get(op, []))
            row += [ms(mine), f"{mine / floor:.2f}×", f"{(mine - floor) * 1000:+.1f} ms"]
        lines.append("| " + " | ".join(row) + " |")
    lines.extend(f"  {t.title} error: {error}" for t in targets for error in t.errors[:3])
    lines.extend(f"  {t.title}: {t.gave_up}, given up" for t in targets if t.gave_up)
    return lines


def verdicts(cells: int, quiet: dict[str, Target], saving_: dict[str, Target]) -> list[str]:
    out = []
    file_, ext = quiet["file"], quiet["extension"]
    for op in EDITS:
        floor, mine = p50(file_.times.get(op, [])), p50(ext.times.get(op, []))
        if cells <= 200:
            ok, want = mine <= floor + 0.002, "≤ file + 2 ms"
        else:
            ok, want = mine <= floor, "≤ file"
        out.append(f"  {cells} cells, extension {op} {want}: {'met' if ok else 'MISSED'}")
    if cells > 200:
        for phase, targets in (("quiet", quiet), ("while the server saves", saving_)):
            if "live" not in targets:
                continue
            for op in ("read", "read_one"):
                floor = p50(targets["file"].times.get(op, []))
                mine = p50(targets["live"].times.get(op, []))
                ok = mine <= 2 * floor
                out.append(
                    f"  {cells} cells, live {op} ≤ 2× file ({phase}): {'met' if ok else 'MISSED'}"
                )
    return out


async def main(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    wanted = [w for w in args.with_.split(",") if w]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    checks: list[str] = []

    def show(lines: list[str]) -> None:
        print("\n".join(lines), flush=True)

    with tempfile.TemporaryDirectory(prefix="nbrelay-bench-ext-") as tmp:
        base = Path(tmp)
        files = base / "files"
        files.mkdir()
        jupyter = make_server(base / "jupyter")
        jupyter.extra_args.extend(args.jupyter_arg)
        jupyter.root.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            raw = make_notebook(n)
            (files / f"n{n}.ipynb").write_bytes(raw)
            for who in ("ext", "live", "dl"):
                (jupyter.root / f"{who}{n}.ipynb").write_bytes(raw)
        jupyter.start(timeout=180)
        try:
            with (
                http_server(files, base, "--lock-dir", str(base / "locks")) as running,
                live_server(jupyter, base) as (live_url, live_token),
            ):
                async with contextlib.AsyncExitStack() as stack:
                    file_client = await stack.enter_async_context(
                        http_client(running.url, running.token)
                    )
                    ext = await stack.enter_async_context(ext_client(jupyter))
                    live = await stack.enter_async_context(http_client(live_url, live_token))
                    dl = None
                    if "dl" in wanted:
                        dl = await stack.enter_async_context(datalayer(args.cache, jupyter))
                    for n in sizes:
                        at = n // 2
                        large = n > 1000
                        repeat = args.repeat_large if large else args.repeat
                        warmup = args.warmup_large if large else args.warmup
                        quiet = {
                            "file": Target(
                                "file mode", file_client, nbrelay_ops(f"n{n}.ipynb", at)
                            ),
                            "extension": Target("extension", ext, nbrelay_ops(f"ext{n}.ipynb", at)),
                            "live": Target("live", live, nbrelay_ops(f"live{n}.ipynb", at)),
                        }
                        if dl is not None:
                            quiet["datalayer"] = other = Target(
                                COMPETITORS["dl"][0] + " (same Jupyter)",
                                dl,
                                dl_ops(f"dl{n}", at),
                                limit=args.limit,
                                settle=args.settle,
                            )
                            setup = {"notebook_name": f"dl{n}", "notebook_path": f"dl{n}.ipynb"}
                            started = time.perf_counter()
                            with anyio.move_on_after(args.limit):
                                await dl.call_tool("use_notebook", {**setup, "mode": "connect"})
                                await timed_call(other, "read", -1, keep=False)
                                other.times["open"] = [time.perf_counter() - started]
                            if "open" not in other.times:
                                other.gave_up = f"use_notebook did not finish in {args.limit:.0f} s"
                        order = list(quiet.values())
                        await rounds(order, OPS, repeat, warmup)
                        show(
                            report(
                                f"{n} cells, p50 of {repeat} calls"
                                + (" (fewer at this size)" if large else "")
                                + (", datalayer working in the same Jupyter" if dl else ""),
                                order,
                                ("open", *OPS),
                            )
                        )
                        saving_ = {
                            "file": Target(
                                "file mode", file_client, nbrelay_ops(f"n{n}.ipynb", at)
                            ),
                            "extension": Target("extension", ext, nbrelay_ops(f"ext{n}.ipynb", at)),
                            "live": Target("live", live, nbrelay_ops(f"live{n}.ipynb", at)),
                        }
                        with saving(jupyter, [f"ext{n}.ipynb", f"live{n}.ipynb"]):
                            await anyio.sleep(1)
                            for t in saving_.values():
                                t.times["open"] = []  # open already: not timed again
                            await rounds(list(saving_.values()), ("read", "read_one"), repeat, 1)
                        show(
                            report(
                                f"{n} cells, reads while the server saves, p50 of {repeat} calls",
                                list(saving_.values()),
                                ("read", "read_one"),
                            )
                        )
                        checks += verdicts(n, quiet, saving_)
                        show(["", "Targets so far:", *checks])
        finally:
            if jupyter.proc is not None and jupyter.proc.poll() is None:
                import psutil

                cpu = psutil.Process(jupyter.proc.pid).cpu_times()
                print(  # the Jupyter Server's own work (kernels are other processes)
                    f"\nJupyter Server process: {cpu.user + cpu.system:.1f} s of CPU in the run",
                    flush=True,
                )
            jupyter.stop()
            if args.keep_logs is not None:
                keep_logs(base, args.keep_logs)
    print(f"\n{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    return 0


def keep_logs(base: Path, to: Path) -> None:
    """Copy the run's logs (the Jupyter Server's, live mode's, file mode's) to ``to``, before
    the temporary folder goes."""
    to.mkdir(parents=True, exist_ok=True)
    for log in (base / "jupyter" / "work" / "server.log", *base.glob("*.stderr")):
        if log.is_file():
            shutil.copy2(log, to / log.name)
    print(f"logs kept in {to}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--with", dest="with_", default="", help="Others: dl (datalayer).")
    parser.add_argument("--repeat", type=int, default=15, help="Calls per operation.")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed rounds first.")
    parser.add_argument("--sizes", default="200,10000", help="Notebook sizes, in cells.")
    parser.add_argument(
        "--repeat-large", type=int, default=5, help="Calls per operation above 1,000 cells."
    )
    parser.add_argument("--warmup-large", type=int, default=1, help="Untimed rounds, large.")
    parser.add_argument(
        "--limit", type=float, default=120.0, help="Seconds before a call is given up."
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="Seconds to wait after each of the other client's calls, so that what its call "
        "leaves the Jupyter Server doing is over before nbrelay's next call.",
    )
    parser.add_argument(
        "--jupyter-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="An argument for the Jupyter Server (repeatable), e.g. "
        "--jupyter-arg=--NbrelayExtension.linear_notebook_reads=False.",
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        metavar="DIR",
        help="Copy the servers' logs (the Jupyter Server's among them) to DIR at the end.",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "nbrelay-bench",
        help="Where the competitors' virtual environments are kept.",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
