"""Kernels held after an ordinary agent session, on the old defaults and on today's.

One session, driven through the official MCP client over stdio against ``nbrelay serve``:
30 notebooks, each read, run (an import and a small computation), edited and run again; then
the agent goes back to the first 5. Measured 3 s after the session's last call returns: the kernels
still running, and the memory of nbrelay with its kernels (RSS, and PSS, which counts shared
pages once), for

* ``before``: ``--kernel-idle-timeout 3600 --max-kernels 0`` (the defaults until now: an hour,
  no cap);
* ``after``: no flags (idle kernels stopped after 15 minutes; at most 8 kernels of nbrelay's own,
  the least recently used idle one stopped to make room);
* ``persist``: ``--persist-sessions`` (as ``after``, and a stopped kernel's variables are saved
  with dill and restored when its notebook runs again).

"revisits lost" counts the runs of the revisited notebooks whose variables were gone.

Both run in the same invocation, one after the other, with the warm pool at its default.
Run: ``python bench/kernels_held.py`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp import Client, StdioServerParameters

from nbrelay.notebook.model import new_cell, new_notebook, serialize

NOTEBOOKS = 30
REVISITS = 5
CELLS = (
    "import json, random, statistics",
    "data = [random.random() for _ in range(200_000)]\nlen(data)",
    "summary = {'mean': statistics.mean(data), 'max': max(data)}\nprint(json.dumps(summary))",
)


def write_notebooks(root: Path) -> list[str]:
    names = []
    for i in range(NOTEBOOKS):
        nb = new_notebook([new_cell("code", src, f"c{k}") for k, src in enumerate(CELLS)])
        name = f"analysis-{i:02d}.ipynb"
        (root / name).write_bytes(serialize(nb))
        names.append(name)
    return names


def server_process(pid_file: Path) -> psutil.Process:
    return psutil.Process(int(pid_file.read_text()))


def memory(proc: psutil.Process) -> tuple[int, float, float]:
    """(kernels running, RSS MiB, PSS MiB) of nbrelay and every process under it."""
    kernels = 0
    rss = pss = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:  # a kernel stopping in the background may be gone (or a zombie) by now
            is_kernel = p is not proc and "ipykernel" in " ".join(p.cmdline())
            info = p.memory_full_info()
        except psutil.Error:
            continue
        kernels += is_kernel
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return kernels, rss / 2**20, pss / 2**20


async def session(root: Path, flags: list[str]) -> dict[str, Any]:
    names = write_notebooks(root)
    pid_file = root.parent / "server.pid"
    # A tiny wrapper so the benchmark knows nbrelay's PID (the client owns the process).
    wrapper = f"import os, sys\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
    wrapper += "from nbrelay.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", wrapper, "serve", "--root", str(root), *flags],
    )
    started = time.perf_counter()
    lost = 0
    async with Client(params) as client:
        for name in names:
            await client.call_tool("read_notebook", {"path": name})
            await client.call_tool("execute", {"path": name, "cells": [":"]})
            await client.call_tool(
                "edit_cell", {"path": name, "cell": "c2", "find": "'max'", "replace": "'top'"}
            )
            await client.call_tool("execute", {"path": name, "cells": ["c2"]})
        for name in names[:REVISITS]:
            done = await client.call_tool("execute", {"path": name, "cells": ["c2"]})
            data = done.structured_content or {}
            lost += bool(data.get("state_lost"))
        seconds = time.perf_counter() - started
        await anyio.sleep(3)  # kernels stopped to make room finish stopping in the background
        kernels, rss, pss = memory(server_process(pid_file))
    return {"kernels": kernels, "rss": rss, "pss": pss, "seconds": seconds, "lost": lost}


async def main() -> None:
    results = {}
    for label, flags in (
        ("before", ["--kernel-idle-timeout", "3600", "--max-kernels", "0"]),
        ("after", []),
        ("persist", ["--persist-sessions"]),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "root"
            root.mkdir()
            results[label] = await session(root, flags)
    print(f"{NOTEBOOKS} notebooks, then {REVISITS} revisited; nbrelay + its kernels afterwards:")
    print(
        f"{'':8} {'kernels':>8} {'RSS MiB':>9} {'PSS MiB':>9} {'session s':>10} {'revisits lost':>14}"
    )
    for label, r in results.items():
        print(
            f"{label:8} {r['kernels']:>8} {r['rss']:>9.0f} {r['pss']:>9.0f} "
            f"{r['seconds']:>10.1f} {r['lost']:>14}"
        )
    b = results["before"]
    for label in ("after", "persist"):
        a = results[label]
        print(
            f"{label}/before: kernels {a['kernels'] / b['kernels']:.2f}, "
            f"RSS {a['rss'] / b['rss']:.2f}, PSS {a['pss'] / b['pss']:.2f}, "
            f"session time {a['seconds'] / b['seconds']:.2f}"
        )


if __name__ == "__main__":
    anyio.run(main)
