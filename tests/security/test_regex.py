"""A catastrophic regex never freezes the server: every tool that takes a pattern (search, find,
replace, in every profile) matches off the event loop under a time limit, and a search that
runs over it is refused with a clear error while other calls go on.

Before the fix the match ran in the event loop with Python's ``re``: ``(a+)+$`` on a 34-character
cell blocked every session for minutes.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import notebook, text_of, write_notebook

pytestmark = pytest.mark.anyio

# Exponential for a backtracking engine: ``re`` needs about 10 s for this line on a quiet
# machine (each extra "a" multiplies that by 1.6), so before the fix the quick call below
# waited for it.
CATASTROPHIC = r"(a|aa)+$"
LINE = "a" * 36 + "!"


@asynccontextmanager
async def stdio(root: Path, *args: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "nbrelay", "serve", "--root", str(root), *args]
    )
    async with Client(params) as client:
        yield client


async def race(
    client: Client, slow: tuple[str, dict[str, Any]], quick: tuple[str, dict[str, Any]]
) -> tuple[str, list[str]]:
    """Start the slow call, then the quick one once the slow one is in flight; return the slow
    call's text and the order in which the two finished."""
    order: list[str] = []
    said: dict[str, str] = {}

    async def run(label: str, call: tuple[str, dict[str, Any]]) -> None:
        result = await client.call_tool(*call)
        said[label] = text_of(result)
        if label == "quick":
            assert not result.is_error, said[label]
        order.append(label)

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "slow", slow)
            await anyio.sleep(0.3)  # the slow call is matching by now (it needs >= 2 s)
            tg.start_soon(run, "quick", quick)
    return said["slow"], order


def served(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write_notebook(root / "r.ipynb", notebook("x = 1", LINE, "y = 2"))
    write_notebook(root / "notebook.ipynb", notebook("x = 1", LINE, "y = 2"))
    return root


async def test_catastrophic_search_is_refused_while_other_calls_go_on(tmp_path: Path) -> None:
    root = served(tmp_path)
    before = (root / "r.ipynb").read_bytes()
    async with stdio(root) as client:
        slow = ("search_notebook", {"path": "r.ipynb", "pattern": CATASTROPHIC, "regex": True})
        quick = ("read_notebook", {"path": "r.ipynb"})
        said, order = await race(client, slow, quick)
        assert order == ["quick", "slow"]
        assert "took over 2 s" in said
        assert "catastrophically" in said
        # The pattern from the report: the engine answers it at once (no match, no refusal).
        fast = await client.call_tool(
            "search_notebook", {"path": "r.ipynb", "pattern": "(a+)+$", "regex": True}
        )
        assert not fast.is_error, text_of(fast)
        assert (fast.structured_content or {}).get("count", 0) == 0
        # Ordinary regexes (lookarounds, groups) still work.
        ok = await client.call_tool(
            "search_notebook", {"path": "r.ipynb", "pattern": r"(?<=x )= \d", "regex": True}
        )
        assert not ok.is_error, text_of(ok)
        assert (ok.structured_content or {})["matches"][0]["index"] == 0
    assert (root / "r.ipynb").read_bytes() == before


async def test_notebook_lr_find_and_replace_are_bounded_too(tmp_path: Path) -> None:
    root = served(tmp_path)
    before = (root / "notebook.ipynb").read_bytes()
    async with stdio(root, "--profile", "notebook-lr", "--notebook", "notebook.ipynb") as client:
        quick: tuple[str, dict[str, Any]] = ("get_notebook_info", {})
        find = ("find_in_cells", {"query": CATASTROPHIC, "regex": True})
        said, order = await race(client, find, quick)
        assert order == ["quick", "slow"]
        assert "took over" in said
        replace = ("replace_in_cells", {"find": CATASTROPHIC, "replace": "b", "regex": True})
        said, order = await race(client, replace, quick)
        assert order == ["quick", "slow"]
        assert "took over" in said
        assert "nothing was changed" in said
        done = await client.call_tool(
            "replace_in_cells", {"find": r"(\w) = (\d)", "replace": r"\1 = 4\2", "regex": True}
        )
        assert not done.is_error, text_of(done)
        assert (done.structured_content or {})["replacements"] == 2
    after = (root / "notebook.ipynb").read_text()
    assert '"x = 41"' in after
    assert before != after.encode()


async def test_an_argument_parsed_by_a_regex_cannot_stall_the_server(tmp_path: Path) -> None:
    """mcp-jupyter parses ``execution_count`` ("3", "[3]") with a regex that took cubic time on
    a long run of spaces: 20,000 of them froze the server for minutes."""
    root = served(tmp_path)
    async with stdio(root, "--profile", "mcp-jupyter") as client:
        with anyio.fail_after(20):  # answered at once (a bound generous for a busy machine)
            result = await client.call_tool(
                "query_notebook",
                {
                    "notebook_path": "r.ipynb",
                    "query_type": "view_source",
                    "execution_count": " " * 20_000 + "x",
                },
            )
        assert result.is_error
        assert "is not a number" in text_of(result)
        ok = await client.call_tool(
            "query_notebook",
            {"notebook_path": "r.ipynb", "query_type": "view_source", "execution_count": " [1] "},
        )
        assert "is not a number" not in text_of(ok)
