"""Kernel round trips and first runs, against baselines measured in the same run.

1. ``1+1`` on a warm kernel. Baseline: a raw jupyter_client round trip (``execute_interactive``
   on the kernel's ``AsyncKernelClient``, output collected by a hook), alternated run by run
   with nbrelay's on the same kernel. Measured for nbrelay:
   * ``Runner.execute`` (the shared message loop and the output fold);
   * the ``execute`` tool with scratch code, through an in-process MCP client;
   * the ``execute`` tool on a notebook cell (the outputs are also saved: an atomic, fsynced
     write of the notebook).
   Target: the loop and the scratch tool call ≤ 1.5× the raw round trip.
2. The first run in a new notebook, from the ``execute`` call to its result, with the warm pool
   (``--kernel-pool 1``, after the pool has filled) and without (``--kernel-pool 0``: the kernel
   starts cold). Target: ≤ 1 s with the pool.

Run: ``python bench/kernel_ops.py`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.kernels.execution import Runner
from nbrelay.kernels.local import LocalKernels
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.notebook.outputs import CellOutputs
from nbrelay.server import build_server

ROUNDS = 200

ME = Caller("bench")  # who asks: local kernels ask no one


async def median_ms(fn: Callable[[], Awaitable[Any]], rounds: int = ROUNDS) -> float:
    for _ in range(10):
        await fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


async def paired_round_trips(folder: Path) -> tuple[float, float]:
    """Raw jupyter_client round trips and ``Runner.execute`` on the same kernel and client,
    alternating run by run so that load on the machine affects both alike."""
    provider = LocalKernels(pool_size=0)
    try:
        session = await provider.session("b.ipynb", ME, kernel_name="python3", cwd=str(folder))
        runner = Runner(session)
        outputs: list[dict[str, Any]] = []

        async def raw() -> None:
            outputs.clear()
            await session.kc.execute_interactive("1+1", output_hook=outputs.append, timeout=30)

        async def ours() -> None:
            cell = CellOutputs()
            await runner.execute("1+1", cell.feed, caller=ME, time_limit=30)

        for _ in range(10):
            await raw()
            await ours()
        raw_times: list[float] = []
        our_times: list[float] = []
        for _ in range(ROUNDS):
            for fn, times in ((raw, raw_times), (ours, our_times)):
                t = time.perf_counter()
                await fn()
                times.append(time.perf_counter() - t)
        return statistics.median(raw_times) * 1000, statistics.median(our_times) * 1000
    finally:
        await provider.aclose()


def write(path: Path, *sources: str) -> None:
    cells = [new_cell("code", s, f"c{i}") for i, s in enumerate(sources)]
    path.write_bytes(serialize(new_notebook(cells)))


async def tool_round_trips(folder: Path) -> tuple[float, float]:
    write(folder / "t.ipynb", "1+1")
    settings = Settings(root=folder, kernel_pool=0, lock_dir=folder / ".locks")
    async with Client(build_server(settings)) as client:
        await client.call_tool("execute", {"path": "t.ipynb", "code": "0"})
        scratch = await median_ms(
            lambda: client.call_tool("execute", {"path": "t.ipynb", "code": "1+1"})
        )
        cell = await median_ms(
            lambda: client.call_tool("execute", {"path": "t.ipynb", "cells": [0]}), rounds=100
        )
    return scratch, cell


async def first_run(folder: Path, pool: int) -> float:
    for name in ("seed", "fresh"):
        write(folder / f"{name}.ipynb", "1+1")
    settings = Settings(root=folder, kernel_pool=pool, lock_dir=folder / ".locks")
    async with Client(build_server(settings)) as client:
        await client.call_tool("execute", {"path": "seed.ipynb", "cells": [0]})
        await anyio.sleep(5 if pool else 0.5)  # the pool refills in the background
        t = time.perf_counter()
        result = await client.call_tool("execute", {"path": "fresh.ipynb", "cells": [0]})
        took = time.perf_counter() - t
        assert not result.is_error
    return took * 1000


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        raw, loop = await paired_round_trips(root)
        scratch, cell = await tool_round_trips(root)
        cold = statistics.median([await first_run(root, 0) for _ in range(3)])
        warm = statistics.median([await first_run(root, 1) for _ in range(3)])
    rows = [
        ("raw jupyter_client round trip (baseline)", raw, 1.0),
        ("Runner.execute (loop + fold)", loop, loop / raw),
        ("execute tool, scratch code", scratch, scratch / raw),
        ("execute tool, a cell (+ notebook save)", cell, cell / raw),
    ]
    sys.stdout.write(f"1+1 on a warm kernel, median of {ROUNDS} runs\n")
    for name, ms, ratio in rows:
        sys.stdout.write(f"  {name:45} {ms:8.2f} ms  {ratio:5.2f}x\n")
    sys.stdout.write("first run in a new notebook (execute call to result), median of 3\n")
    sys.stdout.write(f"  {'cold kernel (--kernel-pool 0, baseline)':45} {cold:8.0f} ms  1.00x\n")
    sys.stdout.write(f"  {'warm pool (--kernel-pool 1)':45} {warm:8.0f} ms  {warm / cold:5.2f}x\n")


if __name__ == "__main__":
    anyio.run(main)
