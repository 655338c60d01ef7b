"""Notebooks as most of the world has them: nbformat 4.0-4.4 (no cell ids), 3.x, and metadata
slips Jupyter tolerates. Every edit tool changes them, ``execute`` saves their outputs, ``undo``
reverts; the first write stores nbformat 4.5 with ids and the result says so; the file is valid
for nbformat after every write. In file mode and live mode (a Jupyter Server's rooms)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import PATIENCE, call, counter_ids, text_of
from tests.tools.conftest import live_workspace

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(
    request: pytest.FixtureRequest, store_mode: str, root: Path, tmp_path: Path
) -> AsyncIterator[Client]:
    """The canonical profile in one client mode (what is tested here is the same in both)."""
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    if store_mode == "live":
        ws = live_workspace(settings, request, root)
    else:
        store = FileStore(root, lock_dir=tmp_path / "locks")
        ws = Workspace(settings, store, id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as c:
        yield c


def v4(minor: int, *, kernelspec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A notebook as Jupyter wrote nbformat 4.``minor`` (no cell ids before 4.5)."""
    spec = kernelspec or {"display_name": "Python 3", "language": "python", "name": "python3"}
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Factorials\n", "A table."]},
            {
                "cell_type": "code",
                "execution_count": 1,
                "metadata": {"collapsed": False},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["1\n"]}],
                "source": ["n = 1\n", "print(n)"],
            },
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": ["for i in range(1, 4):\n", "    n *= i\n", "n"],
            },
        ],
        "metadata": {"kernelspec": spec, "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": minor,
    }


V3 = {
    "metadata": {"name": "", "signature": "sha256:0"},
    "nbformat": 3,
    "nbformat_minor": 0,
    "worksheets": [
        {
            "cells": [
                {"cell_type": "heading", "level": 1, "metadata": {}, "source": ["Factorials"]},
                {
                    "cell_type": "code",
                    "collapsed": False,
                    "input": ["n = 1\n", "print(n)"],
                    "language": "python",
                    "metadata": {},
                    "outputs": [{"output_type": "stream", "stream": "stdout", "text": ["1\n"]}],
                    "prompt_number": 1,
                },
                {
                    "cell_type": "code",
                    "collapsed": False,
                    "input": ["for i in range(1, 4):\n", "    n *= i\n", "n"],
                    "language": "python",
                    "metadata": {},
                    "outputs": [],
                },
            ],
            "metadata": {},
        }
    ],
}

# One call of each edit tool, on a notebook of the cells above (markdown, code, code).
EDITS: dict[str, tuple[str, dict[str, Any]]] = {
    "edit_cell source": ("edit_cell", {"cell": 1, "source": "n = 2\nprint(n)"}),
    "edit_cell find": ("edit_cell", {"cell": 2, "find": "range(1, 4)", "replace": "range(1, 5)"}),
    "edit_cell type": ("edit_cell", {"cell": 0, "cell_type": "raw"}),
    "edit_cell metadata": ("edit_cell", {"cell": 1, "metadata": {"a": 1}, "tags": ["t"]}),
    "insert_cells": ("insert_cells", {"cells": [{"type": "code", "source": "n"}], "index": 1}),
    "delete_cells": ("delete_cells", {"cells": [0]}),
    "move_cells": ("move_cells", {"cells": [2], "to": 0}),
    "merge_cells": ("merge_cells", {"cells": "1:3"}),
    "split_cell": ("split_cell", {"cell": 2, "lines": [1]}),
    "clear_outputs": ("clear_outputs", {}),
    "replace_in_notebook": ("replace_in_notebook", {"find": "n", "replace": "m"}),
}

STORED_NOTE = "stored as nbformat 4.5"


def valid_45(path: Path) -> Any:
    """The file as nbformat reads it: valid, nbformat 4.5, every cell with an id."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    assert all(c.get("id") for c in nb.cells)
    return nb


@pytest.mark.parametrize("minor", [0, 2, 4])
@pytest.mark.parametrize("what", sorted(EDITS))
async def test_every_edit_tool_changes_an_old_notebook_and_undo_reverts_it(
    client: Client, root: Path, what: str, minor: int
) -> None:
    name = f"old-{minor}-{what.replace(' ', '-')}.ipynb"
    (root / name).write_text(json.dumps(v4(minor), indent=1), encoding="utf-8")
    read = await call(client, "read_notebook", path=name)
    assert not read.get("problems"), read
    tool, args = EDITS[what]
    result = await call(client, tool, path=name, **args)
    assert STORED_NOTE in result["note"], result
    assert f"it was 4.{minor}" in result["note"], result
    ids = [c["id"] for c in read["cells"]]
    first = valid_45(root / name)
    kept = [c.id for c in first.cells if c.id in ids]
    assert len(kept) == len(first.cells) - len(result.get("changed") or []) or kept
    if tool != "clear_outputs":  # outputs are not in undo history; the rest is
        await call(client, "undo", path=name)
    back = valid_45(root / name)
    assert [c.id for c in back.cells] == ids  # the ids read are the ids stored
    assert [c.source for c in back.cells] == ["".join(c["source"]) for c in v4(minor)["cells"]]


async def test_import_over_an_old_notebook(client: Client, root: Path) -> None:
    (root / "old.ipynb").write_text(json.dumps(v4(2)), encoding="utf-8")
    content = json.dumps(v4(1))
    await call(client, "import_notebook", path="old.ipynb", content=content, overwrite=True)
    assert [c.source for c in valid_45(root / "old.ipynb").cells][1] == "n = 1\nprint(n)"


async def test_running_an_old_notebook_saves_its_outputs(
    client: Client, root: Path, store_mode: str
) -> None:
    (root / "run.ipynb").write_text(json.dumps(v4(3)), encoding="utf-8")
    ran = await call(client, "execute", path="run.ipynb", cells="all", wait=PATIENCE)
    assert ran["status"] == "done", ran
    assert "could not be saved" not in (ran.get("note") or ""), ran
    assert STORED_NOTE in ran["note"], ran
    saved = valid_45(root / "run.ipynb")
    assert saved.cells[2].outputs[0]["data"]["text/plain"] == "6"
    assert saved.cells[2].execution_count is not None


async def test_an_nbformat_3_notebook_is_read_edited_and_stored_as_4_5(
    client: Client, root: Path, store_mode: str
) -> None:
    (root / "v3.ipynb").write_text(json.dumps(V3), encoding="utf-8")
    read = await call(client, "read_notebook", path="v3.ipynb", full=True)
    assert [c["type"] for c in read["cells"]] == ["markdown", "code", "code"]
    assert read["cells"][0]["source"] == "# Factorials"  # a heading, as nbformat upgrades it
    if store_mode == "files":  # a Jupyter Server upgrades it itself when it opens the room
        assert "nbformat 3" in read["note"]
    assert json.loads((root / "v3.ipynb").read_text())["nbformat"] == 3  # reading changes nothing
    result = await call(client, "edit_cell", path="v3.ipynb", cell=1, find="1", replace="5")
    if store_mode == "files":
        assert "stored as nbformat 4.5 (it was 3)" in result["note"]
    stored = valid_45(root / "v3.ipynb")
    assert stored.cells[1].source == "n = 5\nprint(n)"
    assert [c.id for c in stored.cells] == [c["id"] for c in read["cells"]]


async def test_metadata_slips_jupyter_tolerates_are_repaired_on_write(
    client: Client, root: Path
) -> None:
    slipped = v4(5, kernelspec={"display_name": "Python 3", "language": "python"})
    for i, cell in enumerate(slipped["cells"]):
        cell["id"] = f"c{i}"
    slipped["cells"][1]["metadata"] = {"tags": "not-a-list", "jupyter": "x", "keep": 1}
    slipped["metadata"]["authors"] = "not a list"
    (root / "slips.ipynb").write_text(json.dumps(slipped), encoding="utf-8")
    with pytest.raises(nbformat.ValidationError):
        nbformat.validate(nbformat.read(root / "slips.ipynb", as_version=4))
    read = await call(client, "read_notebook", path="slips.ipynb")
    assert read["cell_count"] == 3
    result = await call(client, "edit_cell", path="slips.ipynb", cell=2, source="n")
    note = result["note"]
    for said in ("kernelspec had no name", "'python3'", "'authors'", "cell 1"):
        assert said in note, note
    stored = valid_45(root / "slips.ipynb")
    assert stored.metadata.kernelspec == {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    assert "authors" not in stored.metadata
    assert stored.cells[1].metadata == {"keep": 1}
    # Undo reverts the edit, not the repair: the file stays valid.
    await call(client, "undo", path="slips.ipynb")
    assert valid_45(root / "slips.ipynb").cells[2].source.startswith("for i")


async def test_a_notebook_broken_beyond_metadata_is_still_refused(
    client: Client, root: Path
) -> None:
    broken = v4(5)
    for i, cell in enumerate(broken["cells"]):
        cell["id"] = f"c{i}"
    del broken["cells"][1]["outputs"][0]["name"]  # a stream without its name
    (root / "broken.ipynb").write_text(json.dumps(broken), encoding="utf-8")
    before = (root / "broken.ipynb").read_bytes()
    result = await client.call_tool("edit_cell", {"path": "broken.ipynb", "cell": 2, "source": "1"})
    assert result.is_error
    assert "fails nbformat validation" in text_of(result)
    assert (root / "broken.ipynb").read_bytes() == before
