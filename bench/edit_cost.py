"""What an edit, a run and a read cost as a notebook grows, against the bare write measured in
the same run.

Floor: the bare write of the notebook's bytes (write a temp file, fsync it, ``os.replace``,
fsync the folder), the least any safe save of the same bytes costs: without the folder's fsync
the rename is not durable (after a crash the old file may be back), and nbrelay's save does it. Each measured call alternates with a floor write of
the same size, so that load on the machine weighs on both alike; medians, ratios to the floor.

Rows (targets in parentheses):
* edit one cell's source through the file store (lock, outside-change check, plan, apply,
  validate, serialise, atomic write), at 10,000 cells (~5 MB), 50,000 cells (~25 MB) and 1,000
  cells with ~100 KB of outputs each (~110 MB) (≤ 2× the bare write);
* insert one cell, and delete one cell, through the file store at 10,000 cells (≤ 2× the bare
  write: the cells around them are neither re-encoded nor walked);
* the ``edit_cell``, ``insert_cells`` and ``delete_cells`` tools through an in-process MCP
  client, at 10,000 cells;
* the ``execute`` tool running ``1+1`` in a cell of a 10,000-cell notebook (outputs saved),
  against the bare write plus a raw jupyter_client round trip on a warm kernel (≤ 2×);
* a warm ``read_cell`` of one cell at 1,000, 10,000 and 50,000 cells (constant in the size).

Run: ``python bench/edit_cost.py [--quick]`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from nbrelay.caller import ANYONE, Caller
from nbrelay.config import Settings
from nbrelay.kernels.local import LocalKernels
from nbrelay.notebook import edits
from nbrelay.notebook.model import Cell, new_cell, new_notebook, serialize
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore

QUICK = "--quick" in sys.argv

ME = Caller("bench")  # who asks: local kernels ask no one


def small_cell(i: int) -> Cell:
    cell = new_cell("code", f"x_{i} = {i}\nprint(x_{i} * 2)\n# a comment line", f"c{i}")
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": f"{i * 2}\n" * 3 + "x" * 300}
    ]
    cell["execution_count"] = i + 1
    return cell


def big_cell(i: int) -> Cell:
    cell = small_cell(i)
    lines = "".join(f"{i:>6} {'y' * 60} {i * k}\n" for k in range(1400))
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": lines}]
    return cell


def notebook_bytes(n: int, make: Callable[[int], Cell] = small_cell) -> bytes:
    cells = [make(i) for i in range(n)]
    cells.insert(0, new_cell("code", "1+1", "run"))
    return serialize(new_notebook(cells))


def bare_write(path: Path, data: bytes) -> None:
    tmp = path.with_name("." + path.name + ".floor")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # the rename's durability, as nbrelay's save
    finally:
        os.close(dfd)


async def paired(
    rounds: int, fn: Callable[[], Awaitable[Any]], floor: Callable[[], Awaitable[Any]]
) -> tuple[float, float]:
    """Median seconds of ``fn`` and of ``floor``, called alternately (after one warm-up each)."""
    await fn()
    await floor()
    ours: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        for f, times in ((fn, ours), (floor, base)):
            t = time.perf_counter()
            await f()
            times.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(base)


def floor_of(folder: Path, data: bytes) -> Callable[[], Awaitable[None]]:
    path = folder / "floor.ipynb"

    async def floor() -> None:
        bare_write(path, data)

    return floor


async def store_edit(folder: Path, n: int, make: Callable[[int], Cell], rounds: int) -> Row:
    data = notebook_bytes(n, make)
    (folder / "s.ipynb").write_bytes(data)
    store = FileStore(folder, lock_dir=folder / ".locks")
    await store.load("s.ipynb", ANYONE)
    counter = iter(range(10**9))

    async def edit() -> None:
        k = next(counter)
        await store.edit(
            "s.ipynb",
            ANYONE,
            lambda nb: edits.plan_set_source(nb, n // 2, f"y = {k}\n"),
            expected_version=None,
            guard_positions=False,
        )

    ours, floor = await paired(rounds, edit, floor_of(folder, data))
    return f"edit one cell, store, {len(data) / 1e6:.0f} MB, {n:,} cells", ours, floor


Row = tuple[str, float, float]


async def store_splices(folder: Path, n: int, rounds: int) -> list[Row]:
    """Insert one cell, then delete one cell, in the middle of an ``n``-cell notebook."""
    data = notebook_bytes(n)
    (folder / "i.ipynb").write_bytes(data)
    store = FileStore(folder, lock_dir=folder / ".locks")
    await store.load("i.ipynb", ANYONE)
    counter = iter(range(10**9))
    ids = iter(f"new{k}" for k in range(10**9))

    async def insert() -> None:
        k = next(counter)
        await store.edit(
            "i.ipynb",
            ANYONE,
            lambda nb: edits.plan_insert(
                nb, n // 2, [edits.CellSpec("code", f"y = {k}")], lambda: next(ids)
            ),
            expected_version=None,
            guard_positions=False,
        )

    async def delete() -> None:
        await store.edit(
            "i.ipynb",
            ANYONE,
            lambda nb: edits.plan_delete(nb, [n // 3]),
            expected_version=None,
            guard_positions=False,
        )

    floor = floor_of(folder, data)
    rows: list[Row] = []
    for what, fn in (("insert one cell", insert), ("delete one cell", delete)):
        ours, base = await paired(rounds, fn, floor)
        rows.append((f"{what}, store, {len(data) / 1e6:.0f} MB, {n:,} cells", ours, base))
    return rows


async def tool_rows(folder: Path, rounds: int) -> list[Row]:
    sizes = (1000, 10_000) if QUICK else (1000, 10_000, 50_000)
    for n in sizes:
        (folder / f"r{n}.ipynb").write_bytes(notebook_bytes(n))
    data = (folder / "r10000.ipynb").read_bytes()
    floor = floor_of(folder, data)
    rows: list[Row] = []
    settings = Settings(root=folder, kernel_pool=0, lock_dir=folder / ".locks")
    provider = LocalKernels(pool_size=0)
    try:
        session = await provider.session("raw.ipynb", ME, kernel_name="python3", cwd=str(folder))

        async def raw_run() -> None:
            await session.kc.execute_interactive("1+1", output_hook=lambda m: None, timeout=30)
            bare_write(folder / "floor.ipynb", data)

        async with Client(build_server(settings)) as client:
            for n in sizes:

                async def read(n: int = n) -> None:
                    await client.call_tool("read_cell", {"path": f"r{n}.ipynb", "cell": 5})

                ours, base = await paired(rounds * 3, read, floor)
                rows.append((f"warm read_cell, {n:,} cells", ours, base))
            counter = iter(range(10**9))

            async def tool_edit() -> None:
                k = next(counter)
                result = await client.call_tool(
                    "edit_cell", {"path": "r10000.ipynb", "cell": 7, "source": f"y = {k}"}
                )
                assert not result.is_error, result

            ours, base = await paired(rounds, tool_edit, floor)
            rows.append(("edit_cell tool, 10,000 cells", ours, base))

            async def tool_insert() -> None:
                k = next(counter)
                result = await client.call_tool(
                    "insert_cells", {"path": "r10000.ipynb", "index": 5000, "cells": [f"z = {k}"]}
                )
                assert not result.is_error, result

            async def tool_delete() -> None:
                result = await client.call_tool(
                    "delete_cells", {"path": "r10000.ipynb", "cells": [3000]}
                )
                assert not result.is_error, result

            ours, base = await paired(rounds, tool_insert, floor)
            rows.append(("insert_cells tool, 10,000 cells", ours, base))
            ours, base = await paired(rounds, tool_delete, floor)
            rows.append(("delete_cells tool, 10,000 cells", ours, base))
            await client.call_tool("execute", {"path": "r10000.ipynb", "cells": [0]})
            ours, base = await paired(
                rounds,
                lambda: client.call_tool("execute", {"path": "r10000.ipynb", "cells": [0]}),
                raw_run,
            )
            rows.append(("execute 1+1, 10,000 cells (floor + kernel)", ours, base))
    finally:
        await provider.aclose()
    return rows


async def main() -> None:
    rounds = 5 if QUICK else 15
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows.append(await store_edit(folder, 10_000, small_cell, rounds))
        rows.extend(await store_splices(folder, 10_000, rounds))
        if not QUICK:
            rows.append(await store_edit(folder, 50_000, small_cell, max(5, rounds // 2)))
            rows.append(await store_edit(folder, 1000, big_cell, 5))
        rows.extend(await tool_rows(folder, rounds))
    sys.stdout.write(f"{'':52} {'nbrelay':>10} {'floor':>10} {'ratio':>7}\n")
    for name, ours, base in rows:
        sys.stdout.write(f"{name:52} {ours * 1e3:8.2f}ms {base * 1e3:8.2f}ms {ours / base:6.2f}x\n")
    reads = [ours for name, ours, _ in rows if name.startswith("warm read_cell")]
    sys.stdout.write(
        f"warm read_cell, largest over smallest notebook: {reads[-1] / reads[0]:.2f}x\n"
    )


if __name__ == "__main__":
    anyio.run(main)
