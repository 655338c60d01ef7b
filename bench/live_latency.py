"""Live mode: how soon an agent's edit is seen by the people in the notebook.

A real JupyterLab (with jupyter-collaboration) runs on 127.0.0.1. Measured in the same run:

* **baseline**: one plain RTC client types a character, another sees it (the server's relay; the
  floor for anything a collaborator does);
* **agent → RTC client**: from an nbrelay tool call returning (``edit_cell``, ``insert_cells``,
  through the MCP client) until another RTC client has the change (0 when it was already there
  when the call returned), and how long the call itself took;
* **agent → browser**: from ``insert_cells`` returning until the new cell is in the DOM of a
  JupyterLab page in headless Chromium (skipped without Debian's chromium).

Target: p50 ≤ 0.2 s after the call returns, for both. Each figure is also given as a ratio to the
baseline's p50.

Run: ``python bench/live_latency.py`` (about a minute; not part of the test run).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import call, notebook, write_notebook
from tests.live.conftest import agent
from tests.live.person import Person, person
from tests.live.server import JupyterServer, free_port

ROUNDS = 30
BROWSER_ROUNDS = 10
CHROMIUM = "/usr/bin/chromium"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def until(check: Callable[[], bool], seconds: float = 10.0) -> float:
    """Wait until ``check()`` holds (polling every millisecond); return when it first did."""
    with anyio.fail_after(seconds):
        while True:
            if check():
                return time.monotonic()
            await anyio.sleep(0.001)


async def baseline(a: Person, b: Person) -> list[float]:
    out = []
    for k in range(ROUNDS):
        marker = f"#b{k}"
        start = time.monotonic()
        a.type_at_end("c2", marker)
        seen = await until(lambda m=marker: m in b.source("c2"))  # type: ignore[misc]
        out.append(seen - start)
        await anyio.sleep(0.02)
    return out


async def agent_rounds(server: JupyterServer, b: Person) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "edit call": [],
        "edit seen after return": [],
        "insert call": [],
        "insert seen after return": [],
    }
    async with agent(server, prefix="bench") as client:
        await call(client, "read_notebook", path="n.ipynb")
        for k in range(ROUNDS):
            start = time.monotonic()
            await call(client, "edit_cell", path="n.ipynb", cell="c0", source=f"x = {k}")
            returned = time.monotonic()
            seen = await until(lambda k=k: b.source("c0") == f"x = {k}")  # type: ignore[misc]
            results["edit call"].append(returned - start)
            results["edit seen after return"].append(max(0.0, seen - returned))
        for k in range(ROUNDS):
            start = time.monotonic()
            out = await call(client, "insert_cells", path="n.ipynb", cells=[f"i{k} = 1"])
            returned = time.monotonic()
            new_id = out["changed"][0]["id"]
            seen = await until(lambda c=new_id: c in b.ids())  # type: ignore[misc]
            results["insert call"].append(returned - start)
            results["insert seen after return"].append(max(0.0, seen - returned))
    return results


async def browser_rounds(server: JupyterServer) -> list[float]:
    from playwright.async_api import async_playwright

    from nbrelay.formats import CHROMIUM_FLAGS

    flags = list(CHROMIUM_FLAGS)
    panel = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    out = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=flags, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 2000})
            await page.goto(
                f"{server.url}lab/workspaces/bench/tree/b.ipynb?reset&token={server.token}"
            )
            await page.locator(f"{panel} .jp-Cell").first.wait_for(timeout=90_000)
            async with agent(server, prefix="web") as client:
                for k in range(BROWSER_ROUNDS):
                    text = f"seen_in_browser_{k} = {k}"
                    await call(client, "insert_cells", path="b.ipynb", cells=[text], index=0)
                    returned = time.monotonic()
                    cell = page.locator(f"{panel} .jp-Cell .cm-content", has_text=text)
                    await cell.first.wait_for(timeout=10_000)
                    out.append(time.monotonic() - returned)
        finally:
            await browser.close()
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = JupyterServer(root=base / "root", work=base / "work", port=free_port())
        write_notebook(server.root / "n.ipynb", notebook("x = 0", "y = 0", "z = 0"))
        write_notebook(server.root / "b.ipynb", notebook("start = 0"))
        server.start()
        try:
            async with person(server, "n.ipynb") as a, person(server, "n.ipynb") as b:
                floor = await baseline(a, b)
                agent_results = await agent_rounds(server, b)
            web: list[float] = []
            if Path(CHROMIUM).exists():
                web = await browser_rounds(server)
        finally:
            server.stop()
    base_p50 = statistics.median(floor)
    rows = [("baseline: RTC client → RTC client", floor)]
    rows += [(f"agent {name}", values) for name, values in agent_results.items()]
    if web:
        rows.append(("agent insert seen in the browser after return", web))
    print(f"{'measure':52} {'p50 ms':>9} {'p95 ms':>9} {'p50 / baseline':>15}")
    for name, values in rows:
        p50, p95 = statistics.median(values), pct(values, 0.95)
        ratio = p50 / base_p50 if base_p50 else float("nan")
        print(f"{name:52} {p50 * 1000:9.1f} {p95 * 1000:9.1f} {ratio:14.2f}x")
    seen = [statistics.median(agent_results["edit seen after return"])]
    seen.append(statistics.median(agent_results["insert seen after return"]))
    if web:
        seen.append(statistics.median(web))
    verdict = "met" if max(seen) <= 0.2 else "MISSED"
    print(f"target p50 ≤ 200 ms after the call returns: {verdict}")


if __name__ == "__main__":
    anyio.run(main)
