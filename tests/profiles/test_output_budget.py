"""Every read tool of every compatibility profile stays within the output budget on a notebook of
huge outputs (a plotly page, a figure's JSON, 3 M printed characters, an image), in its original's
result shape. mcp-jupyter's view returned 2,987,102 characters for jupytext's "World population"
demo: its original shows HTML formats as "HTML data present", nbrelay showed them whole.

ipynb-mcp's get_full_output is the one exception: its name and its original promise the
complete output, so calling it is asking for more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import text_of, write_notebook
from tests.profiles.conftest import ProfileClient
from tests.tools.test_output_budget import BUDGET, PRINTED, huge_notebook

pytestmark = pytest.mark.anyio

# (profile, calls made in order: tool and arguments, the path given as NB)
NB = "huge.ipynb"
READS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "ipynb-mcp": [("get_formatted_content", {"filepath": NB})],
    "jupyterlab-rtc": [
        ("get_nb_stat", {"path": NB}),
        ("read_nb_cells", {"path": NB}),
        ("read_nb_cells", {"path": NB, "ranges": [{"start": 0, "end": 1}]}),
        ("get_document_info", {"path": NB}),
    ],
    "mcp-jupyter": [
        ("query_notebook", {"notebook_path": NB, "query_type": "view_source"}),
        *[
            (
                "query_notebook",
                {"notebook_path": NB, "query_type": "view_source", "position_index": i},
            )
            for i in range(5)
        ],
    ],
    "notebook-lr": [
        ("load_notebook", {"path": NB}),
        ("get_notebook_info", {}),
        ("list_cells", {}),
        *[("get_cell", {"index": i}) for i in range(5)],
    ],
}


@pytest.mark.parametrize("profile", sorted(READS))
async def test_every_read_tool_stays_within_the_budget(
    profile: str, profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / NB, huge_notebook())
    # mcp-jupyter shares four budgets in one call (its original returns whole notebooks).
    bound = (4 if profile == "mcp-jupyter" else 1) * BUDGET + 3000
    async with profile_client(profile) as client:
        for tool, args in READS[profile]:
            result = await client.call_tool(tool, args)
            assert not result.is_error, (tool, text_of(result))
            assert len(text_of(result)) < bound, (tool, args, len(text_of(result)))
            if result.structured_content is not None:
                assert len(json.dumps(result.structured_content)) < bound + 1000, (tool, args)


async def test_get_full_output_gives_the_complete_output_it_promises(
    profile_client: ProfileClient, root: Path
) -> None:
    write_notebook(root / NB, huge_notebook())
    async with profile_client("ipynb-mcp") as client:
        full = await client.call_tool(
            "get_full_output", {"filepath": NB, "cell_index": 3, "output_index": 1}
        )
    assert json.loads(text_of(full))["full_output_data"] == PRINTED
