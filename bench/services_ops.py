"""Benchmark the notebook services: export, the change feed, and kernel start with limits/sandbox.

Run by hand: ``python bench/services_ops.py``. Each figure is printed with a baseline measured
in the same run:

* export to HTML through nbrelay (MCP call, in process) against nbconvert's HTMLExporter alone,
  and export to PDF against the same HTML baseline (the cost of printing with Chromium);
* change-feed latency (file written by another writer → notification received) against the
  feed's polling interval;
* time to a first result on a new kernel with --kernel-memory/--kernel-cpu-time and with
  --sandbox, against a plain kernel.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.tools.feed import POLL_INTERVAL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.helpers import write_notebook
from tests.services.sample import report


async def median_of(runs: int, step: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def exports(root: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    node = nbformat.read(root / "report.ipynb", as_version=4)  # type: ignore[no-untyped-call]

    async def raw() -> None:
        exporter = HTMLExporter()  # type: ignore[no-untyped-call]
        await anyio.to_thread.run_sync(lambda: exporter.from_notebook_node(node))

    baseline = await median_of(5, raw)
    async with Client(build_server(Settings(root=root))) as c:

        async def html() -> None:
            r = await c.call_tool(
                "export_notebook", {"path": "report.ipynb", "format": "html", "max_chars": 2000000}
            )
            assert not r.is_error

        async def pdf() -> None:
            r = await c.call_tool("export_notebook", {"path": "report.ipynb", "format": "pdf"})
            assert not r.is_error

        t_html = await median_of(5, html)
        t_pdf = await median_of(3, pdf)
    print(
        f"export html      {t_html * 1000:8.1f} ms   nbconvert alone {baseline * 1000:8.1f} ms   ratio {t_html / baseline:5.2f}x"
    )
    print(
        f"export pdf       {t_pdf * 1000:8.1f} ms   nbconvert html  {baseline * 1000:8.1f} ms   ratio {t_pdf / baseline:5.2f}x"
    )


async def feed(root: Path) -> None:
    uri = "nbrelay://notebook/report.ipynb"
    path = root / "report.ipynb"
    latencies = []
    server = build_server(Settings(root=root))
    async with Client(server, mode="auto") as c, c.listen(resource_subscriptions=[uri]) as sub:
        for i in range(10):
            nb = json.loads(path.read_text())
            nb["cells"][0]["source"] = f"# edit {i}"
            path.write_text(json.dumps(nb))
            start = time.perf_counter()
            with anyio.fail_after(5):
                async for _event in sub:
                    break
            latencies.append(time.perf_counter() - start)
            await anyio.sleep(0.05)
    med = statistics.median(latencies)
    print(
        f"feed latency     {med * 1000:8.1f} ms   poll interval   {POLL_INTERVAL * 1000:8.1f} ms   ratio {med / POLL_INTERVAL:5.2f}x (max {max(latencies) * 1000:.0f} ms)"
    )


async def kernels(root: Path) -> None:
    async def first_result(settings: Settings) -> float:
        async with Client(build_server(settings)) as c:
            await c.call_tool("create_notebook", {"path": "k.ipynb", "overwrite": True})
            start = time.perf_counter()
            r = await c.call_tool("execute", {"path": "k.ipynb", "code": "1 + 1", "wait": 60})
            assert not r.is_error
            return time.perf_counter() - start

    base = Settings(root=root, kernel_pool=0)
    plain = statistics.median([await first_result(base) for _ in range(3)])
    limited = statistics.median(
        [
            await first_result(base.replace(kernel_memory=2048, kernel_cpu_time=600))
            for _ in range(3)
        ]
    )
    boxed = statistics.median([await first_result(base.replace(sandbox=True)) for _ in range(3)])
    print(
        f"kernel, limits   {limited * 1000:8.1f} ms   plain kernel    {plain * 1000:8.1f} ms   ratio {limited / plain:5.2f}x"
    )
    print(
        f"kernel, sandbox  {boxed * 1000:8.1f} ms   plain kernel    {plain * 1000:8.1f} ms   ratio {boxed / plain:5.2f}x"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_notebook(root / "report.ipynb", report())
        await exports(root)
        await feed(root)
        await kernels(root)


if __name__ == "__main__":
    anyio.run(main)
