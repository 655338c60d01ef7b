"""nbrelay against the MCP servers people use for notebooks today: one workload, one run.

The workload is a 200-cell notebook with outputs, driven over stdio by the official MCP client
(``mcp.Client``, the initialize handshake every client does), each operation the median of
``--repeat`` calls (20): start → tools listed, read all cells (overview, and whole cells with
outputs), read one cell, insert / edit / delete a cell, run ``1+1`` on a warm kernel (as scratch
code and as a notebook cell), run a cell printing 100,000 lines and one drawing a matplotlib PNG
(time and bytes returned), the server's peak memory (RSS of its process tree; kernels, and the
Jupyter Server a competitor needs, apart) and the size of its ``tools/list``.

Floors, measured in the same run and alternated call by call with the server under test (so load
on the machine hits both alike):

* a bare ``mcp`` SDK server (one empty tool): start → tools listed, an empty tool call, memory;
* raw ``jupyter_client`` round trips (``execute_interactive``) of the same code on a kernel of the
  same kernelspec;
* ``nbformat.reads`` of the notebook, and json load + dump + fsync + rename of it.

``--with live`` adds nbrelay's own live mode ("nbrelay live mode"), talking to a JupyterLab the
benchmark starts (below); its "× nbrelay" column is then live mode against file mode, same run.
``--with dl,bk`` adds datalayer jupyter-mcp-server 2.2.4 ("DL") and block mcp-jupyter 2.0.2
("BK"), installed from PyPI into virtual environments of their own under ``--cache``
(``~/.cache/nbrelay-bench``, outside the repository). Each talks to a Jupyter Server (JupyterLab
with jupyter-collaboration, from this Python, so every server runs the same kernel) that the
benchmark starts on 127.0.0.1, on a free port with a random token, and stops by PID. Operations
are mapped onto each competitor's own tools; "cannot" means it has no tool for it.

``--many 100`` then opens 100 copies of the notebook in one nbrelay, all at once, each with its
kernel, and compares the edit p50 across them (round robin, every notebook already open) with
the edit p50 on one notebook; ``--max-kernels`` (default 25) runs the 100 again against that cap,
to show the kernels beyond it queue instead of failing. ``--many-only`` runs just that part.

Run: ``python bench/compare.py [--with live,dl,bk] [--repeat 20] [--many 100]`` (prints a table; not
part of the test run). Competitor runs take about half an hour (block mcp-jupyter spends about
3 s on every edit); nbrelay and the floors alone, about five minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import nbformat
import psutil
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, ImageContent, TextContent

from nbrelay.notebook.model import new_cell, new_notebook, serialize

CELLS = 200
AT = 100  # where cells are inserted, edited and deleted
RUN_1 = 197  # the cells the run operations run
RUN_100K = 198
RUN_PNG = 199
CODE_1 = "1+1"
CODE_100K = "for i in range(100_000):\n    print(i)"  # 589 KB of output
CODE_PNG = (
    "import matplotlib.pyplot as plt\n"
    "plt.figure(figsize=(4, 3))\nplt.plot([1, 3, 2, 4])\nplt.title('bench')\nplt.show()"
)
NAME = "bench.ipynb"
# The 100k-line cell's first lines (as text, JSON text, or a JSON list of lines), and a note of
# how much was left out.
_SEP = r'(?:\\n|\n|",\s*")'
FIRST_LINES = re.compile(rf'(?<![0-9])0{_SEP}1{_SEP}2{_SEP}3(?:\\n|\n|")')
SAYS_CUT = re.compile(r'"cut"\s*:|characters? (?:cut|omitted|dropped)|truncat', re.IGNORECASE)

# title, and the requirements installed into its own virtual environment. mcp-jupyter 2.0.2
# asks for "mcp>=1.13.1" and "jupyter-kernel-client>=0.8.0" but imports names that the 2.x and 1.x
# majors of those removed, so it gets the last releases it was written against.
LIVE_TITLE = "nbrelay live mode (same JupyterLab)"
COMPETITORS = {
    "dl": ("datalayer jupyter-mcp-server 2.2.4", ("jupyter-mcp-server==2.2.4",)),
    "bk": (
        "block mcp-jupyter 2.0.2",
        ("mcp-jupyter==2.0.2", "mcp[cli]<2", "jupyter-kernel-client<1"),
    ),
}

BARE_SERVER = '''
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("bare")


@mcp.tool()
async def noop() -> str:
    """Do nothing."""
    return "ok"


mcp.run("stdio")
'''


# -- the workload ---------------------------------------------------------------------------


def make_notebook() -> bytes:
    """200 cells: code cells with stream and result outputs, markdown every fifth cell, and the
    three cells the run operations execute at the end."""
    cells = []
    for i in range(CELLS - 3):
        if i % 5 == 0:
            cells.append(
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
        cells.append(cell)
    cells += [
        new_cell("code", CODE_1, "run-1"),
        new_cell("code", CODE_100K, "run-100k"),
        new_cell("code", CODE_PNG, "run-png"),
    ]
    return serialize(new_notebook(cells))


# -- measuring ------------------------------------------------------------------------------


def content_bytes(result: CallToolResult) -> int:
    """What a tool result puts in the model's context: text and image data of its content."""
    total = 0
    for block in result.content:
        if isinstance(block, TextContent):
            total += len(block.text.encode())
        elif isinstance(block, ImageContent):
            total += len(block.data)
        else:
            total += len(json.dumps(block.model_dump(mode="json")))
    return total


def result_text(result: CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextContent))


@dataclass
class Figure:
    """One operation on one server: times (s) and bytes returned, or why it could not."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)  # the paired floor, call by call
    error: str | None = None
    text: str = ""  # the last result's text

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def size(self) -> int:
        return int(statistics.median(self.sizes)) if self.sizes else 0


class ToolFailed(Exception):
    pass


class TreeMemory:
    """Peak RSS of a process tree, sampled every 0.1 s: the server itself, and kernels apart
    (with the processes that are becoming kernels: a child forked from the server, not yet
    exec'd, shares the server's pages and would count them twice)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.kernels = 0
        self.kernel_count = 0

    @staticmethod
    def is_kernel(proc: psutil.Process) -> bool:
        try:
            return any("ipykernel" in part for part in proc.cmdline())
        except psutil.Error:
            return False

    def sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        own = kern = count = 0
        try:
            command = root.cmdline()
        except psutil.Error:
            return
        for p in procs:
            try:
                rss = p.memory_info().rss
                forked = p is not root and p.cmdline() == command
            except psutil.Error:
                continue
            if forked or self.is_kernel(p):
                kern += rss
                count += 1
            else:
                own += rss
        self.peak = max(self.peak, own)
        self.kernels = max(self.kernels, kern)
        self.kernel_count = max(self.kernel_count, count)

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[TreeMemory]:
        async with anyio.create_task_group() as tg:

            async def loop() -> None:
                while True:
                    await anyio.to_thread.run_sync(self.sample)
                    await anyio.sleep(0.1)

            tg.start_soon(loop)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
        self.sample()


def child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children()}


@contextlib.asynccontextmanager
async def connect(params: StdioServerParameters) -> AsyncIterator[tuple[Client, int]]:
    """An MCP client over stdio, and the PID of the server process it started."""
    before = child_pids()
    async with Client(params, mode="legacy") as client:
        new = child_pids() - before
        if len(new) != 1:
            raise RuntimeError(f"cannot tell the server process apart: {new}")
        yield client, new.pop()


async def call(client: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise ToolFailed(f"{tool}: {result_text(result)[:300]}")
    return result


def tools_list_size(tools: list[Any]) -> int:
    dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return len(json.dumps({"tools": dumped}, separators=(",", ":")).encode())


async def start_time(params: StdioServerParameters) -> float:
    """Seconds from spawning the server to its tools/list answer."""
    t = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
        took = time.perf_counter() - t
    return took


# -- floors ---------------------------------------------------------------------------------


class Floors:
    """The floors, kept open so that they can be alternated call by call with a server."""

    def __init__(self, folder: Path, raw: bytes) -> None:
        self.folder = folder
        self.raw = raw
        self.text = raw.decode()
        self.script = folder / "bare_server.py"
        self.script.write_text(BARE_SERVER)
        self.params = StdioServerParameters(command=sys.executable, args=[str(self.script)])
        self.bare: Client | None = None
        self.bare_pid = 0
        self.kc: Any = None
        self.memory = 0

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Floors]:
        from jupyter_client.manager import AsyncKernelManager

        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(self.folder), stdout=subprocess.DEVNULL)
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=120)
            self.kc = kc
            async with connect(self.params) as (client, pid):
                self.bare, self.bare_pid = client, pid
                memory = TreeMemory(pid)
                async with memory.watching():
                    yield self
                self.memory = memory.peak
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    async def sdk_call(self) -> None:
        assert self.bare is not None
        await call(self.bare, "noop", {})

    async def raw_run(self, code: str) -> int:
        """A raw jupyter_client round trip; returns the characters of output received."""
        received = 0

        def hook(msg: dict[str, Any]) -> None:
            nonlocal received
            received += len(json.dumps(msg.get("content", {})))

        reply = await self.kc.execute_interactive(code, output_hook=hook, timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
        return received

    def reads(self) -> None:
        nbformat.reads(self.text, as_version=4)  # type: ignore[no-untyped-call]

    def save(self) -> None:
        path = self.folder / "floor.ipynb"
        if not path.exists():
            path.write_bytes(self.raw)
        data = json.loads(path.read_bytes())
        data["cells"][AT]["source"] = [f"y = {secrets.randbelow(1000)}\n"]
        text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        tmp = path.with_name("." + path.name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(text.encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


# -- servers --------------------------------------------------------------------------------

Op = Callable[[int], tuple[str, dict[str, Any]]] | None


@dataclass
class Target:
    key: str
    title: str
    params: StdioServerParameters
    ops: dict[str, Op]
    setup: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    jupyter_pid: int | None = None


OPS = {
    "read_all": "read all 200 cells (overview)",
    "read_full": "read all 200 cells with outputs",
    "read_one": "read one cell",
    "insert": "insert a cell",
    "edit": "edit a cell (whole source)",
    "delete": "delete a cell",
    "run_scratch": "run `1+1`, scratch code (warm kernel)",
    "run_cell": "run a cell `1+1` (warm kernel)",
    "run_png": "run a cell making a matplotlib PNG",
    "run_100k": "run a cell printing 100k lines",
}
SIZED = {"read_all", "read_full", "read_one", "run_png", "run_100k"}
HEAVY = {"run_png", "run_100k"}


def nbrelay_target(root: Path, live: tuple[str, str] | None = None) -> Target:
    """nbrelay in file mode; with ``live`` (url, token), in live mode on that JupyterLab."""
    args = ["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(root / ".locks")]
    env = None
    if live is not None:
        args = ["-m", "nbrelay", "serve", "--jupyter-url", live[0]]
        env = {**os.environ, "JUPYTER_TOKEN": live[1]}
    p = NAME
    return Target(
        "live" if live else "nbrelay",
        LIVE_TITLE if live else "nbrelay",
        StdioServerParameters(command=sys.executable, args=args, env=env),
        {
            "read_all": lambda i: ("read_notebook", {"path": p, "limit": CELLS}),
            "read_full": lambda i: ("read_notebook", {"path": p, "limit": CELLS, "full": True}),
            "read_one": lambda i: ("read_cell", {"path": p, "cell": AT}),
            "insert": lambda i: ("insert_cells", {"path": p, "index": AT, "cells": [f"x = {i}"]}),
            "edit": lambda i: ("edit_cell", {"path": p, "cell": AT, "source": f"y = {i}"}),
            "delete": lambda i: ("delete_cells", {"path": p, "cells": [AT]}),
            "run_scratch": lambda i: ("execute", {"path": p, "code": CODE_1}),
            "run_cell": lambda i: ("execute", {"path": p, "cells": [RUN_1]}),
            "run_png": lambda i: ("execute", {"path": p, "cells": [RUN_PNG]}),
            "run_100k": lambda i: ("execute", {"path": p, "cells": [RUN_100K]}),
        },
    )


def dl_target(venv: Path, url: str, token: str) -> Target:
    nb = {"notebook_name": "bench"}
    exe = str(venv / "bin" / "jupyter-mcp-server")
    args = ["start", "--transport", "stdio", "--jupyter-url", url, "--jupyter-token", token]
    return Target(
        "dl",
        COMPETITORS["dl"][0],
        StdioServerParameters(command=exe, args=args),
        {
            "read_all": lambda i: (
                "read_notebook",
                {**nb, "response_format": "brief", "start_index": 0, "limit": CELLS},
            ),
            "read_full": lambda i: (
                "read_notebook",
                {**nb, "response_format": "detailed", "start_index": 0, "limit": CELLS},
            ),
            "read_one": lambda i: ("read_cell", {**nb, "cell_index": AT}),
            "insert": lambda i: (
                "insert_cell",
                {**nb, "cell_index": AT, "cell_type": "code", "cell_source": f"x = {i}"},
            ),
            "edit": lambda i: (
                "overwrite_cell_source",
                {**nb, "cell_index": AT, "cell_source": f"y = {i}"},
            ),
            "delete": lambda i: ("delete_cell", {**nb, "cell_indices": [AT]}),
            "run_scratch": lambda i: ("execute_code", {"code": CODE_1}),
            "run_cell": lambda i: ("execute_cell", {"cell_index": RUN_1}),
            "run_png": lambda i: ("execute_cell", {"cell_index": RUN_PNG}),
            "run_100k": lambda i: ("execute_cell", {"cell_index": RUN_100K, "timeout": 300}),
        },
        setup=[("use_notebook", {**nb, "notebook_path": NAME, "mode": "connect"})],
    )


def bk_target(venv: Path, url: str, token: str) -> Target:
    nb = {"notebook_path": NAME}

    def run(index: int) -> Op:
        return lambda i: (
            "execute_notebook_code",
            {**nb, "execution_type": "execute_cell", "position_index": index},
        )

    view: Op = lambda i: ("query_notebook", {**nb, "query_type": "view_source"})  # noqa: E731
    return Target(
        "bk",
        COMPETITORS["bk"][0],
        StdioServerParameters(
            command=str(venv / "bin" / "mcp-jupyter"), args=[], env={"TOKEN": token}
        ),
        {
            "read_all": view,
            "read_full": view,  # its one way to read: every cell with its outputs
            "read_one": lambda i: (
                "query_notebook",
                {**nb, "query_type": "view_source", "position_index": AT},
            ),
            "insert": lambda i: (
                "modify_notebook_cells",
                {
                    **nb,
                    "operation": "add_code",
                    "cell_content": f"x = {i}",
                    "position_index": AT,
                    "execute": False,
                },
            ),
            "edit": lambda i: (
                "modify_notebook_cells",
                {
                    **nb,
                    "operation": "edit_code",
                    "cell_content": f"y = {i}",
                    "position_index": AT,
                    "execute": False,
                },
            ),
            "delete": lambda i: (
                "modify_notebook_cells",
                {**nb, "operation": "delete", "position_index": AT},
            ),
            "run_scratch": None,
            "run_cell": run(RUN_1),
            "run_png": run(RUN_PNG),
            "run_100k": run(RUN_100K),
        },
        setup=[("setup_notebook", {**nb, "server_url": url})],
    )


# -- competitors' environments and their Jupyter Server -------------------------------------


def ensure_venv(cache: Path, key: str) -> Path:
    """The competitor's virtual environment, created and installed from PyPI if missing."""
    venv = cache / key
    requirements = COMPETITORS[key][1]
    marker = venv / ".installed"
    if marker.exists() and marker.read_text() == " ".join(requirements):
        return venv
    print(f"installing {' '.join(requirements)} into {venv} …", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *requirements], check=True, timeout=1800)
    marker.write_text(" ".join(requirements))
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_server(root: Path) -> Iterator[tuple[str, str, int]]:
    """JupyterLab (with jupyter-collaboration) on 127.0.0.1: (url, token, pid); stopped by PID,
    its kernels too."""
    port, token = free_port(), secrets.token_hex(16)
    log = open(root.parent / f"jupyter-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            f"--YDocExtension.session_store_path={root.parent / 'collaboration_sessions.json'}",
            f"--SQLiteYStore.db_path={root.parent / 'ystore.db'}",
        ],
        cwd=root.parent,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                req = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
                    f"{url}/api/status", headers={"Authorization": f"token {token}"}
                )
                with urllib.request.urlopen(req, timeout=5) as answer:  # noqa: S310
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Jupyter Server did not start; see {log.name}")
            time.sleep(0.3)
        yield url, token, proc.pid
    finally:
        stop_tree(proc.pid)
        proc.wait(timeout=30)
        log.close()


def stop_tree(pid: int) -> None:
    """SIGTERM the process and its descendants (known by PID), SIGKILL what is left."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=15)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


# -- one server's run -----------------------------------------------------------------------


@dataclass
class Run:
    target: Target
    start: Figure = field(default_factory=Figure)
    floor_start: Figure = field(default_factory=Figure)
    figures: dict[str, Figure] = field(default_factory=dict)
    tools_bytes: int = 0
    tools_count: int = 0
    memory: int = 0
    kernels: int = 0
    jupyter_memory: int = 0
    error: str | None = None


FloorFn = Callable[[], Awaitable[None]]


def floor_for(op: str, floors: Floors) -> FloorFn:
    async def read() -> None:
        await floors.sdk_call()
        floors.reads()

    async def save() -> None:
        await floors.sdk_call()
        floors.save()

    def run(code: str) -> FloorFn:
        async def go() -> None:
            await floors.sdk_call()
            await floors.raw_run(code)

        return go

    table: dict[str, FloorFn] = {
        "read_all": read,
        "read_full": read,
        "read_one": read,
        "insert": save,
        "edit": save,
        "delete": save,
        "run_scratch": run(CODE_1),
        "run_cell": run(CODE_1),
        "run_png": run(CODE_PNG),
        "run_100k": run(CODE_100K),
    }
    return table[op]


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t = time.perf_counter()
    value = await fn()
    return time.perf_counter() - t, value


async def measure(
    target: Target, floors: Floors, repeat: int, heavy_repeat: int, starts: int
) -> Run:
    run = Run(target)
    for _ in range(starts):  # start-up alternated with the bare SDK server's
        run.floor_start.times.append(await start_time(floors.params))
        run.start.times.append(await start_time(target.params))
    async with connect(target.params) as (client, pid):
        tools = (await client.list_tools()).tools
        run.tools_bytes, run.tools_count = tools_list_size(tools), len(tools)
        memory = TreeMemory(pid)
        jupyter = TreeMemory(target.jupyter_pid) if target.jupyter_pid else None
        async with memory.watching(), contextlib.AsyncExitStack() as stack:
            if jupyter is not None:
                await stack.enter_async_context(jupyter.watching())
            for tool, args in target.setup:
                await call(client, tool, args)
            await measure_ops(run, client, floors, repeat, heavy_repeat)
        run.memory, run.kernels = memory.peak, memory.kernels
        if jupyter is not None:
            run.jupyter_memory, run.kernels = jupyter.peak, jupyter.kernels
    return run


async def measure_ops(
    run: Run, client: Client, floors: Floors, repeat: int, heavy_repeat: int
) -> None:
    ops = run.target.ops
    for op in OPS:
        run.figures[op] = Figure(error="cannot" if ops[op] is None else None)

    async def once(op: str, i: int, *, keep: bool = True) -> None:
        figure = run.figures[op]
        make = ops[op]
        if figure.error or make is None:
            return
        tool, args = make(i)
        floor = floor_for(op, floors)
        try:
            took_floor, _ = await timed(floor)
            took, result = await timed(lambda: call(client, tool, args))
        except (ToolFailed, TimeoutError) as exc:
            figure.error = f"error: {exc}"[:200]
            return
        figure.text = result_text(result)
        if keep:
            figure.times.append(took)
            figure.floor.append(took_floor)
            figure.sizes.append(content_bytes(result))

    # warm up: the notebook is read and the kernel started before anything is timed
    for op in ("read_all", "read_one", "run_scratch", "run_cell", "run_png"):
        await once(op, 0, keep=False)
    for op in ("read_all", "read_full", "read_one"):
        for i in range(repeat):
            await once(op, i)
    for i in range(repeat):  # insert, edit, delete: the notebook keeps its 200 cells
        for op in ("insert", "edit", "delete"):
            await once(op, i)
    for op in ("run_scratch", "run_cell"):
        for i in range(repeat):
            await once(op, i)
    for op in ("run_png", "run_100k"):
        for i in range(heavy_repeat):
            await once(op, i)


# -- the table ------------------------------------------------------------------------------


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds * 1000:.1f} ms"


def fmt_bytes(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} KB"
    return f"{n:.0f} B"


def cell(fig: Figure, op: str) -> str:
    if fig.error:
        return fig.error if fig.error == "cannot" else "failed"
    text = fmt_time(fig.median)
    return f"{text}, {fmt_bytes(fig.size)}" if op in SIZED else text


def table(runs: list[Run], floors_memory: int) -> str:
    ours = runs[0]
    others = runs[1:]
    head = ["operation", "floor (same run)", "nbrelay", "× floor", "target"]
    for r in others:
        head += [r.target.title, "× nbrelay"]
    rows = [head]

    def add(label: str, floor: str, mine: str, ratio: str, target: str, theirs: list[str]) -> None:
        rows.append([label, floor, mine, ratio, target, *theirs])

    fs = ours.floor_start.median
    theirs = []
    for r in others:
        theirs += [fmt_time(r.start.median), f"{r.start.median / ours.start.median:.1f}×"]
    add(
        "start → tools listed",
        f"{fmt_time(fs)} (bare SDK server)",
        fmt_time(ours.start.median),
        f"{ours.start.median / fs:.2f}×",
        "≤ 1.2× floor",
        theirs,
    )
    floor_names = {
        "read_all": "SDK call + nbformat.reads",
        "read_full": "SDK call + nbformat.reads",
        "read_one": "SDK call + nbformat.reads",
        "insert": "SDK call + json save",
        "edit": "SDK call + json save",
        "delete": "SDK call + json save",
        "run_scratch": "SDK call + raw jupyter_client",
        "run_cell": "SDK call + raw jupyter_client",
        "run_png": "SDK call + raw jupyter_client",
        "run_100k": "SDK call + raw jupyter_client",
    }
    targets = {
        "read_all": "≤ 10 ms",
        "read_full": "≤ 10 ms",
        "read_one": "≤ 10 ms",
        "insert": "≤ 10 ms",
        "edit": "≤ 10 ms",
        "delete": "≤ 10 ms",
        "run_scratch": "≤ 1.5× floor",
        "run_cell": "",
        "run_png": "",
        "run_100k": "≤ floor + 0.5 s, ≤ 20 KB",
    }
    for op, label in OPS.items():
        mine = ours.figures[op]
        floor = statistics.median(mine.floor) if mine.floor else float("nan")
        if mine.error:
            ratio = ""
        elif op == "run_100k":
            ratio = f"{(mine.median - floor) * 1000:+.0f} ms"
        else:
            ratio = f"{mine.median / floor:.2f}×"
        theirs = []
        for r in others:
            fig = r.figures[op]
            theirs.append(cell(fig, op))
            theirs.append("" if fig.error or mine.error else f"{fig.median / mine.median:.1f}×")
        add(
            label,
            f"{fmt_time(floor)} ({floor_names[op]})",
            cell(mine, op),
            ratio,
            targets[op],
            theirs,
        )
    theirs = []
    for r in others:
        theirs += [fmt_bytes(r.memory), f"{r.memory / ours.memory:.1f}×"]
    add(
        "server memory (peak RSS, without kernels)",
        f"{fmt_bytes(floors_memory)} (bare SDK server)",
        fmt_bytes(ours.memory),
        f"{ours.memory / floors_memory:.2f}×",
        "≤ 100 MB",
        theirs,
    )
    theirs = []
    for r in others:
        theirs += [f"{fmt_bytes(r.jupyter_memory)} (Jupyter Server)", ""]
    add("+ the Jupyter Server it needs", "", "none needed", "", "", theirs)
    theirs = []
    for r in others:
        theirs += [fmt_bytes(r.kernels), ""]
    add("kernels (peak RSS)", "", fmt_bytes(ours.kernels), "", "", theirs)
    theirs = []
    for r in others:
        theirs += [
            f"{fmt_bytes(r.tools_bytes)}, {r.tools_count} tools",
            f"{r.tools_bytes / ours.tools_bytes:.1f}×",
        ]
    add(
        "`tools/list` size",
        "",
        f"{fmt_bytes(ours.tools_bytes)}, {ours.tools_count} tools",
        "",
        "≤ 20 KB",
        theirs,
    )
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * len(head))
    return "\n".join(lines)


# -- many notebooks -------------------------------------------------------------------------


async def many_notebooks(
    folder: Path, raw: bytes, count: int, max_kernels: int, repeat: int
) -> str:
    """``count`` notebooks open at once, each with a kernel: edit p50 against one notebook's;
    then the same with ``--max-kernels``: every run succeeds, kernels beyond the cap queue."""
    root = folder / "many"
    root.mkdir()
    names = [f"nb{i:03d}.ipynb" for i in range(count)]
    for name in names:
        (root / name).write_bytes(raw)
    base = ["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(root / ".locks")]
    out = []

    async def edit(client: Client, name: str, i: int) -> float:
        took, _ = await timed(
            lambda: call(client, "edit_cell", {"path": name, "cell": AT, "source": f"y = {i}"})
        )
        return took

    async def open_all(client: Client, which: list[str]) -> tuple[float, list[str]]:
        failures: list[str] = []

        async def one(name: str) -> None:
            try:
                await call(client, "execute", {"path": name, "code": CODE_1, "wait": 600})
            except ToolFailed as exc:
                failures.append(str(exc))

        t = time.perf_counter()
        with anyio.fail_after(1800):
            async with anyio.create_task_group() as tg:
                for name in which:
                    tg.start_soon(one, name)
        return time.perf_counter() - t, failures

    params = StdioServerParameters(command=sys.executable, args=base)
    async with connect(params) as (client, pid):
        memory = TreeMemory(pid)
        async with memory.watching():
            await call(client, "execute", {"path": names[0], "code": CODE_1})
            for name in names:  # every notebook open (read and edited once) before timing
                await call(client, "read_notebook", {"path": name, "limit": 1})
                await edit(client, name, -1)
            rounds = max(1, repeat // 10)

            async def round_robin() -> float:
                return statistics.median(
                    [await edit(client, name, r) for r in range(rounds) for name in names]
                )

            single = statistics.median([await edit(client, names[0], i) for i in range(repeat)])
            open_no_kernels = await round_robin()
            took, failures = await open_all(client, names[1:])
            await anyio.sleep(5)  # the warm pool refills
            many = await round_robin()
        out.append(
            f"{count} notebooks open at once, each with a kernel (opened concurrently in "
            f"{took:.0f} s, {len(failures)} failed; at most {memory.kernel_count} kernels, "
            f"{fmt_bytes(memory.kernels)}; server {fmt_bytes(memory.peak)}): edit p50 "
            f"{fmt_time(many)} against {fmt_time(single)} on one notebook: {many / single:.2f}× "
            f"(target ≤ 2×); the same {count} notebooks before their kernels started: "
            f"{fmt_time(open_no_kernels)}"
        )
    if max_kernels:
        params = StdioServerParameters(
            command=sys.executable, args=[*base, "--max-kernels", str(max_kernels)]
        )
        async with connect(params) as (client, pid):
            memory = TreeMemory(pid)
            async with memory.watching():
                took, failures = await open_all(client, names)
            out.append(
                f"the same {count} with --max-kernels {max_kernels}: all run in {took:.0f} s, "
                f"{len(failures)} failed, at most {memory.kernel_count} kernels at once "
                f"(the pool's warm kernel included)"
                + (f"; first failure: {failures[0]}" if failures else "")
            )
    return "\n".join(out)


# -- main -----------------------------------------------------------------------------------


def compile_nbrelay() -> None:
    """Byte-compile nbrelay as ``pip install`` does for every package it installs (the SDK's and
    the competitors' included): from a checkout, with PYTHONDONTWRITEBYTECODE set, each start
    would otherwise compile the changed sources again."""
    import compileall

    import nbrelay

    compileall.compile_dir(str(Path(nbrelay.__file__).parent), quiet=1)


async def main(args: argparse.Namespace) -> int:
    raw = make_notebook()
    wanted = [w for w in args.with_.split(",") if w]
    unknown = set(wanted) - {*COMPETITORS, "live"}
    if unknown:
        print(f"unknown competitor(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    venvs = {key: ensure_venv(args.cache, key) for key in wanted if key != "live"}
    compile_nbrelay()
    with tempfile.TemporaryDirectory(prefix="nbrelay-bench-") as tmp:
        folder = Path(tmp)
        if args.many_only:
            print(
                await many_notebooks(folder, raw, args.many or 100, args.max_kernels, args.repeat)
            )
            return 0
        floors = Floors(folder, raw)
        runs = []
        async with floors.running():
            root = folder / "nbrelay"
            root.mkdir()
            (root / NAME).write_bytes(raw)
            runs.append(
                await measure(nbrelay_target(root), floors, args.repeat, args.heavy, args.starts)
            )
            for key in wanted:
                root = folder / key
                root.mkdir()
                (root / NAME).write_bytes(raw)
                with jupyter_server(root) as (url, token, pid):
                    if key == "live":
                        target = nbrelay_target(root, (url, token))
                    else:
                        make = dl_target if key == "dl" else bk_target
                        target = make(venvs[key], url, token)
                    target.jupyter_pid = pid
                    try:
                        runs.append(
                            await measure(target, floors, args.repeat, args.heavy, args.starts)
                        )
                    except Exception as exc:  # a competitor that breaks is reported, not fatal
                        print(f"{target.title} could not be measured: {exc!r}", file=sys.stderr)
        print(
            f"\n{CELLS}-cell notebook with outputs; median of {args.repeat} calls "
            f"({args.heavy} for the PNG and 100k-line cells, {args.starts} start-ups), "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n"
        )
        print(table(runs, floors.memory))
        for r in runs:
            fig = r.figures["run_100k"]
            if not fig.error:
                first = FIRST_LINES.search(fig.text)
                last = "99999" in fig.text
                told = SAYS_CUT.search(fig.text)
                print(
                    f"\n{r.target.title}, 100k-line cell: first lines shown: {bool(first)}, last "
                    f"line shown: {last}, says what was cut: {bool(told)}"
                )
            for op, fig in r.figures.items():
                if fig.error and fig.error != "cannot":
                    print(f"\n{r.target.title}, {OPS[op]}: {fig.error}")
        if args.many:
            print()
            print(await many_notebooks(folder, raw, args.many, args.max_kernels, args.repeat))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--with",
        dest="with_",
        default="",
        help="Others to measure too, comma-separated: live (nbrelay's live mode), dl, bk.",
    )
    parser.add_argument("--repeat", type=int, default=20, help="Calls per operation.")
    parser.add_argument(
        "--heavy", type=int, default=20, help="Calls for the PNG and 100k-line cells."
    )
    parser.add_argument("--starts", type=int, default=5, help="Start-ups to time per server.")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "nbrelay-bench",
        help="Folder for the competitors' virtual environments (outside the repository).",
    )
    parser.add_argument("--many", type=int, default=0, help="Notebooks to open at once (100).")
    parser.add_argument("--many-only", action="store_true", help="Only the --many part (no table).")
    parser.add_argument(
        "--max-kernels", type=int, default=25, help="The cap the --many run is repeated with."
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
