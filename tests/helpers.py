"""Small helpers shared by tests: build notebooks, counting id factories, tool-call shortcuts."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from nbrelay.notebook.model import Cell, Notebook, new_cell, new_notebook

# The longest any test waits for a condition (a kernel to start, a notification to arrive, a
# process to exit). Waits end as soon as their condition holds, so this bound costs nothing when
# things work; it is generous so that a busy machine (CI, other jobs) never fails a test. How
# fast things happen is measured in bench/, not asserted here.
PATIENCE = 120.0


def counter_ids(prefix: str = "cell") -> Callable[[], str]:
    """Deterministic ids: cell-1, cell-2, ..."""
    numbers = itertools.count(1)
    return lambda: f"{prefix}-{next(numbers)}"


def code(source: str, cid: str, outputs: list[dict[str, Any]] | None = None) -> Cell:
    cell = new_cell("code", source, cid)
    if outputs:
        cell["outputs"] = outputs
        cell["execution_count"] = 1
    return cell


def markdown(source: str, cid: str) -> Cell:
    return new_cell("markdown", source, cid)


def notebook(*sources: str) -> Notebook:
    """A notebook of code cells with ids c0, c1, ..."""
    return new_notebook([code(s, f"c{i}") for i, s in enumerate(sources)])


def write_notebook(path: Path, nb: Notebook) -> None:
    from nbrelay.notebook.model import serialize

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(serialize(nb))


def text_of(result: CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextContent))


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    data = result.structured_content
    text = text_of(result)
    if text.startswith("{") and "\n" not in text:  # the same JSON as the structured content
        assert json.loads(text) == data
    else:  # canonical runs: the run as text, after the rest of the result as JSON if any
        assert text == _run_text(data), text
    return data


def _run_text(data: dict[str, Any]) -> str:
    from nbrelay.tools.run_text import run_text

    if "execution" not in data:
        return run_text(data)
    rest = {k: v for k, v in data.items() if k != "execution"}
    return (
        json.dumps(rest, ensure_ascii=False, separators=(",", ":"))
        + "\n"
        + run_text(data["execution"])
    )


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    return data_of(await client.call_tool(tool, args))


async def call_error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} unexpectedly succeeded: {text_of(result)}"
    return text_of(result)


def missing_tool(message: str) -> None:
    """A system tool a test needs is absent: a skip when pytest is run by hand, a failure in the
    full suite (``scripts/test`` installs every such tool and sets NBRELAY_FULL_SUITE)."""
    if os.environ.get("NBRELAY_FULL_SUITE") or os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def draw(strategy: Any, count: int, *, batch: int = 20) -> list[Any]:
    """``count`` distinct examples of a Hypothesis strategy, the same on every run (derandomized).
    They are drawn in batches so Hypothesis's engine runs a few times rather than ``count`` times."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    got: list[Any] = []

    @settings(
        max_examples=count // 10 + 5,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(strategy, min_size=batch, max_size=batch))
    def collect(examples: list[Any]) -> None:
        got.extend(examples)

    collect()
    return list({repr(x): x for x in got}.values())[:count]
