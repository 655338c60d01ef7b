"""Every profile's tool that replaces a cell's whole source merges it with a change a person made
since the agent's read, and refuses (showing that change, writing nothing) when both changed the
same lines. In live mode: these profiles address cells by index, which file mode refuses outright
after any outside change, while live mode lets typing through (it moves no cell)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import notebook, text_of, write_notebook
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

FIVE = "l1 = 1\nl2 = 2\nl3 = 3\nl4 = 4\nl5 = 5"

# profile: (notebook file, read the cell, replace cell 1's source)
Call = Callable[[Client, str], Awaitable[Any]]
PROFILES: dict[str, tuple[str, Call, Call]] = {
    "notebook-lr": (
        "notebook.ipynb",
        lambda c, _: c.call_tool("get_cell", {"index": 1}),
        lambda c, s: c.call_tool("update_cell_source", {"index": 1, "source": s}),
    ),
    "jupyterlab-rtc": (
        "n.ipynb",
        lambda c, _: c.call_tool("read_nb_cells", {"path": "n.ipynb"}),
        lambda c, s: c.call_tool(
            "modify_nb_cells",
            {"path": "n.ipynb", "modifications": [{"range": {"start": 1, "end": 2}, "content": s}]},
        ),
    ),
    "ipynb-mcp": (
        "n.ipynb",
        lambda c, _: c.call_tool("get_formatted_content", {"filepath": "n.ipynb"}),
        lambda c, s: c.call_tool(
            "edit_cell", {"filepath": "n.ipynb", "cell_index": 2, "new_source_content": s}
        ),
    ),
}


def _error(result: Any) -> str:
    """The error a result carries: an MCP tool error, or ipynb-mcp's ``error`` field."""
    if result.is_error:
        return text_of(result)
    data = result.structured_content or {}
    return str(data.get("error") or "")


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_whole_source_edits_merge_or_refuse_in_every_profile(
    live_client: tuple[ProfileClient, Path], request: pytest.FixtureRequest, profile: str
) -> None:
    from tests.live.person import fresh_sources, person
    from tests.live.server import wait_for

    open_client, folder = live_client
    server = request.getfixturevalue("jupyter")
    name, read, replace = PROFILES[profile]
    path = f"{folder.name}/{name}"

    async def cell() -> str:
        return str((await fresh_sources(server, path))[1][1])

    async def types(source: str) -> None:
        async with person(server, path) as p:
            p.nb.set_cell(1, source=source)

            async def arrived() -> bool:
                return await cell() == source

            await wait_for(arrived, seconds=20)

    write_notebook(folder / name, notebook("a", FIVE))
    async with open_client(profile) as client:
        assert not _error(await read(client, ""))
        theirs = FIVE.replace("l1 = 1", "l1 = 100")
        await types(theirs)
        assert not _error(await replace(client, FIVE.replace("l5 = 5", "l5 = 500")))
        both = theirs.replace("l5 = 5", "l5 = 500")
        assert await cell() == both

        await types(both.replace("l5 = 500", "l5 = 7"))
        error = _error(await replace(client, both.replace("l5 = 500", "l5 = 9")))
        assert "changed since you last read it" in error
        assert "-l5 = 500\n+l5 = 7" in error
        assert await cell() == both.replace("l5 = 500", "l5 = 7")
