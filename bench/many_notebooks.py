"""Finding things among 1,000 notebooks, through the MCP client, against doing it one notebook
at a time in the same run.

* listing: every page of ``list_notebooks`` (the default page, and ``limit=1000``, which the
  output budget cuts): how many calls and characters the whole listing takes;
* search: ``search_notebook`` over the folder, following ``next_start``, against a
  ``search_notebook`` call per notebook (what an agent had to do before): calls, characters read
  by the agent, and time.

Run: ``python -m bench.many_notebooks`` (prints a table; not part of the test run).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from nbrelay.config import Settings
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.server import build_server

COUNT = 1000


def make_tree(root: Path) -> None:
    for i in range(COUNT):
        cells = [
            new_cell("code", f"import pandas as pd\ndf = pd.read_csv('data_{i}.csv')", "a"),
            new_cell("code", "needle = 42" if i in (17, 777) else "df.describe()", "b"),
            new_cell("markdown", f"# Analysis {i}\nNotes on team {i % 10}.", "c"),
        ]
        path = root / f"team{i % 10}" / f"project{i // 10 % 10}" / f"analysis_{i:04d}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(serialize(new_notebook(cells)))


async def paged(client: Client, tool: str, **args: Any) -> tuple[int, int, list[Any]]:
    """(calls, characters, items) of every page of a paged result."""
    calls = chars = 0
    items: list[Any] = []
    start: int | None = 0
    while start is not None:
        result = await client.call_tool(tool, {**args, "start": start})
        calls += 1
        chars += sum(len(getattr(b, "text", "")) for b in result.content)
        data = result.structured_content or {}
        items += data.get("notebooks") or data.get("matches") or []
        start = data.get("next_start")
    return calls, chars, items


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root)
        settings = Settings(root=root, lock_dir=root / ".locks", kernel_pool=0)
        async with Client(build_server(settings)) as client:
            rows = []
            t = time.perf_counter()
            calls, chars, listed = await paged(client, "list_notebooks")
            rows.append(("list, default pages", calls, chars, time.perf_counter() - t))
            t = time.perf_counter()
            calls, chars, _ = await paged(client, "list_notebooks", limit=1000)
            rows.append(("list, limit=1000", calls, chars, time.perf_counter() - t))
            t = time.perf_counter()
            calls, chars, found = await paged(client, "search_notebook", path="", pattern="needle")
            many = time.perf_counter() - t
            rows.append(("search the folder", calls, chars, many))
            t = time.perf_counter()
            one_chars = hits = 0
            for entry in listed:
                result = await client.call_tool(
                    "search_notebook", {"path": entry["path"], "pattern": "needle"}
                )
                one_chars += sum(len(getattr(b, "text", "")) for b in result.content)
                hits += len((result.structured_content or {}).get("matches") or [])
            each = time.perf_counter() - t
            rows.append(("search each notebook", len(listed), one_chars, each))
        assert len(listed) == COUNT
        assert len(found) == hits == 2
        print(f"{COUNT} notebooks in 100 folders")
        print(f"{'':24} {'calls':>6} {'chars':>8} {'seconds':>8}")
        for name, n, c, s in rows:
            print(f"{name:24} {n:>6} {c:>8} {s:>8.2f}")
        print(f"search the folder / search each: time {many / each:.2f}x, calls 1/{COUNT}")


if __name__ == "__main__":
    anyio.run(main)
