"""Profile jupyter-mcp-server beyond the original: nbrelay's output budget and its stale-edit
refusal under the original's tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrelay.notebook.model import new_cell, new_notebook, parse, serialize
from tests.helpers import text_of
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio


async def test_a_long_output_is_cut_to_the_budget_and_kept_whole(
    kernel_client: ProfileClient, root: Path
) -> None:
    """The original returns every character a cell printed; here each output is cut (head and
    tail) to --output-budget, and the notebook keeps it whole."""
    (root / "big.ipynb").write_bytes(serialize(new_notebook([])))
    async with kernel_client("jupyter-mcp-server", output_budget=2000) as client:
        await client.call_tool("use_notebook", {"notebook_name": "b", "notebook_path": "big.ipynb"})
        code = "print('\\n'.join(str(i) for i in range(20000)))"
        ran = await client.call_tool(
            "insert_execute_code_cell", {"cell_index": -1, "cell_source": code}
        )
    assert not ran.is_error, text_of(ran)
    printed, completed = ran.content[0].text, ran.content[1].text  # type: ignore[union-attr]
    assert len(printed) < 3000
    assert printed.startswith("0\n1\n")
    assert "19999" in printed
    assert completed.startswith("[COMPLETED in ")
    saved = parse((root / "big.ipynb").read_bytes())
    assert "".join(saved.cells[0]["outputs"][0]["text"]).count("\n") == 20000


async def test_an_edit_against_a_stale_index_is_refused(
    profile_client: ProfileClient, root: Path
) -> None:
    """A person inserts a cell above the one the agent read: overwrite_cell_source by that
    index now names another cell, and nbrelay's position guard refuses it (the original
    overwrites whatever cell is there now)."""
    cells = [new_cell("code", "a = 1", "c-a"), new_cell("code", "b = 2", "c-b")]
    (root / "s.ipynb").write_bytes(serialize(new_notebook(cells)))
    async with profile_client("jupyter-mcp-server") as client:
        await client.call_tool("use_notebook", {"notebook_name": "s", "notebook_path": "s.ipynb"})
        read = await client.call_tool("read_cell", {"cell_index": 1})
        assert "b = 2" in text_of(read)
        nb = parse((root / "s.ipynb").read_bytes())
        nb.cells.insert(0, new_cell("markdown", "# added by a person", "c-p"))
        (root / "s.ipynb").write_bytes(serialize(nb))
        refused = await client.call_tool(
            "overwrite_cell_source", {"cell_index": 1, "cell_source": "b = 3"}
        )
    assert refused.is_error, text_of(refused)
    after = parse((root / "s.ipynb").read_bytes())
    assert [c["source"] for c in after.cells] == ["# added by a person", "a = 1", "b = 2"]
