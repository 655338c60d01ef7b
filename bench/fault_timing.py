"""How fast nbrelay reacts to faults and changes: the timing targets the test suite does not
assert (tests assert what happened; a busy machine must not fail them), measured here against
baselines from the same run.

1. A cell past its time limit (``while True: pass``, limit 1.5 s): from the call to its reply.
   Baseline: the limit. Target: ≤ limit + 2 s.
2. A cell that ignores SIGINT (limit 1 s, grace 3 s): interrupted, then restarted. Baseline:
   limit + grace. Target: ≤ limit + grace + 11 s.
3. A kernel that dies mid-run (``kill -9``, ``exit 3``, 0.5 s after it starts): from its death to
   the reply, and the next run after it. Baseline: a warm run of ``1``. Targets: ≤ 3 s each.
4. A run cancelled by the client (the MCP request cancelled): from the cancellation to the next
   run's reply. Baseline: a warm run of ``1``. Target: ≤ 10 s.
5. The change feed: a notebook rewritten by another program, to the listener's
   ``resources/updated``. Baseline: the feed's poll interval (0.2 s). Target: ≤ 1 s.
6. nbrelay SIGKILLed with 3 kernels running: until every kernel is gone; then a new server on
   the folder, until it answers. Baseline: the first server's start-up. Targets: ≤ 5 s; ≤ 3 s.

Run: ``python bench/fault_timing.py [--repeat N]`` from the repository root (it uses the test
suite's fault kernels and server harness; prints a table; not part of the test run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.tools.feed import POLL_INTERVAL
from tests.fault_kernels.install import install
from tests.helpers import call, notebook, write_notebook
from tests.http.harness import http_client, http_server

Row = tuple[str, list[float], float, float]  # measure, figures (s), baseline (s), target (s)


async def timed(client: Client, code: str, **extra: Any) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    with anyio.fail_after(300):
        result = await call(client, "execute", path="k.ipynb", code=code, **extra)
    return result, time.perf_counter() - start


async def _until(check: Callable[[], bool]) -> None:
    with anyio.fail_after(300):
        while not check():  # noqa: ASYNC110 - polling a file another process creates
            await anyio.sleep(0.01)


def _settings(root: Path, **changes: Any) -> Settings:
    return Settings(root=root, lock_dir=root.parent / "locks", kernel_pool=0).replace(**changes)


async def kernel_faults(root: Path, repeat: int) -> list[Row]:
    write_notebook(root / "k.ipynb", notebook())
    limit, grace = 1.5, 3.0
    timeouts, deaf, detect, recover, cancel, warm = [], [], [], [], [], []
    async with Client(build_server(_settings(root, interrupt_grace=grace)), mode="legacy") as c:
        await timed(c, "x = 1")
        for _ in range(repeat):
            warm.append((await timed(c, "1"))[1])
            result, took = await timed(c, "while True: pass", timeout=limit)
            assert result["cells"][0]["status"] == "timeout"
            timeouts.append(took)
            for kill in ("os.kill(os.getpid(), 9)", "os._exit(3)"):
                code = f"import os, time\nprint('before', flush=True)\ntime.sleep(0.5)\n{kill}"
                result, took = await timed(c, code)
                assert result["cells"][0]["status"] == "died"
                detect.append(took - 0.5)
                recover.append((await timed(c, "1"))[1])
            marker = root / "running"
            marker.unlink(missing_ok=True)
            code = "import time\nopen('running', 'w').close()\ntime.sleep(3600)"
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def run(scope: anyio.CancelScope = scope, code: str = code) -> None:
                    with scope:
                        await c.call_tool("execute", {"path": "k.ipynb", "code": code})

                tg.start_soon(run)
                await _until(marker.exists)
                scope.cancel()
            start = time.perf_counter()
            await timed(c, "1")
            cancel.append(time.perf_counter() - start)
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
    async with Client(build_server(_settings(root, interrupt_grace=grace)), mode="legacy") as c:
        for _ in range(repeat):
            await timed(c, "x = 1")
            result, took = await timed(c, code, timeout=1.0)
            assert result["state_lost"] is True
            deaf.append(took)
    base = statistics.median(warm)
    return [
        ("cell past its time limit: reply", timeouts, limit, limit + 2),
        ("cell ignoring SIGINT: reply after restart", deaf, 1.0 + grace, 1.0 + grace + 11),
        ("kernel death (kill -9, exit 3): detected", detect, base, 3.0),
        ("kernel death: the next run answered", recover, base, 3.0),
        ("cancelled run: the next run answered", cancel, base, 10.0),
    ]


async def feed(root: Path, repeat: int) -> list[Row]:
    write_notebook(root / "f.ipynb", notebook("a = 1"))
    uri = "nbrelay://notebook/f.ipynb"
    took = []
    async with (
        Client(build_server(_settings(root)), mode="auto") as c,
        c.listen(resource_subscriptions=[uri]) as sub,
    ):
        for n in range(repeat * 4):
            raw = json.loads((root / "f.ipynb").read_text())
            raw["cells"][0]["source"] = f"a = {n}"
            start = time.perf_counter()
            (root / "f.ipynb").write_text(json.dumps(raw, indent=1))
            with anyio.fail_after(300):
                async for event in sub:
                    if getattr(event, "uri", None) == uri:
                        break
            took.append(time.perf_counter() - start)
    return [("file rewritten elsewhere: listener notified", took, POLL_INTERVAL, 1.0)]


def killed_server(root: Path, tmp: Path) -> list[Row]:
    for name in ("a", "b", "c"):
        write_notebook(root / f"{name}.ipynb", notebook("import time\ntime.sleep(600)"))
    begin = time.perf_counter()
    with http_server(root, tmp, "--kernel-pool", "0", name="doomed") as server:
        first_start = time.perf_counter() - begin

        async def start_three() -> None:
            async with http_client(server.url, server.token) as client:
                for name in ("a", "b", "c"):
                    await call(client, "execute", path=f"{name}.ipynb", cells=[0], wait=0.5)

        anyio.run(start_three)
        kernels = [c.pid for c in psutil.Process(server.proc.pid).children(recursive=True)]
        server.proc.kill()
        server.proc.wait(timeout=60)
        start = time.perf_counter()
        while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in kernels):
            time.sleep(0.01)
        gone = time.perf_counter() - start
    begin = time.perf_counter()
    with http_server(root, tmp, "--kernel-pool", "0", name="again"):
        ready = time.perf_counter() - begin
    return [
        ("server SIGKILLed: its 3 kernels gone", [gone], first_start, 5.0),
        ("server SIGKILLed: a new one ready", [ready], first_start, 3.0),
    ]


def main() -> None:
    logging.disable(logging.INFO)  # the HTTP client logs every request
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each fault (default 5).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nbrelay-faults-") as folder:
        tmp = Path(folder)
        data = tmp / "jupyter-data"
        install(data)  # the fault kernels' kernelspecs
        os.environ["JUPYTER_DATA_DIR"] = str(data)
        for name in ("kernels", "feed", "killed", "killed-tmp"):
            (tmp / name).mkdir()
        rows: list[Row] = [
            *anyio.run(kernel_faults, tmp / "kernels", args.repeat),
            *anyio.run(feed, tmp / "feed", args.repeat),
            *killed_server(tmp / "killed", tmp / "killed-tmp"),
        ]
    print(
        f"{'measure':46} {'median':>8} {'worst':>8} {'baseline':>9} {'worst/base':>10} "
        f"{'target':>8}  worst met"
    )
    for measure, figures, baseline, target in rows:
        worst, median = max(figures), statistics.median(figures)
        ratio = worst / baseline if baseline else float("nan")
        met = "yes" if worst <= target else "NO"
        print(
            f"{measure:46} {median:7.2f}s {worst:7.2f}s {baseline:8.2f}s {ratio:9.1f}× "
            f"{target:7.1f}s  {met}"
        )


if __name__ == "__main__":
    main()
