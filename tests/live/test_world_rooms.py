"""Every notebook of the world corpus (``tests.corpus.world``: the notebooks in other projects'
sdists, nbformat 4.0 to 4.99) edited through jupyter-collaboration's rooms, both ways into them
(``tests.live.rooms``), as ``tests/corpus/test_world.py`` does in file mode: read (overview and
whole), an edit of the first cell, an insert at the end, a delete undone, a save. The file is then
valid for nbformat and holds the edits, and every other cell keeps its source, outputs,
metadata and attachments as the file had them.

The notebooks whose jupytext pairing needs pandoc (not installed here) cannot be saved by the
server; ``tests/live/test_saving.py`` covers that case.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import nbformat
import pytest
from mcp import Client

from tests.corpus import world
from tests.extension.conftest import ext_client
from tests.helpers import call
from tests.live.conftest import agent
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio

EDITED = "# edited by the agent\n"
ADDED = "added_by_the_agent = 1"


def _editable() -> list[Path]:
    """The corpus's notebooks nbformat reads and validates, of three cells or more, that the
    server can save (no pairing with a format that needs pandoc)."""
    found = []
    for path in world.notebooks():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # nbformat's notes on what it would fix
                notebook = _read(path)
                nbformat.validate(notebook)
        except Exception:  # noqa: S112 - the sdists' own damaged cases
            continue
        formats = str(notebook.metadata.get("jupytext", {}).get("formats", ""))
        if len(notebook.cells) >= 3 and "pandoc" not in formats:
            found.append(path)
    return found


async def _edit(client: Client, path: str) -> None:
    await call(client, "read_notebook", path=path)
    await call(client, "read_notebook", path=path, full=True, limit=5)
    await call(client, "edit_cell", path=path, cell=0, source=EDITED)
    await call(client, "insert_cells", path=path, cells=[ADDED])
    await call(client, "delete_cells", path=path, cells=[1])
    await call(client, "undo", path=path)
    await call(client, "save_notebook", path=path)


def _read(path: Path) -> nbformat.NotebookNode:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbformat's notes on what it would fix
        notebook: nbformat.NotebookNode = nbformat.reads(
            path.read_text(encoding="utf-8"), as_version=4
        )
        return notebook


def _compare(saved_at: Path, original_at: Path) -> list[str]:
    name = world.name_of(original_at)
    saved = _read(saved_at)
    nbformat.validate(saved)
    original = _read(original_at)
    wrong = []
    if len(saved.cells) != len(original.cells) + 1:
        wrong.append(f"{name}: {len(saved.cells)} cells, not {len(original.cells)} + 1")
    elif saved.cells[0].source != EDITED or saved.cells[-1].source != ADDED:
        wrong.append(f"{name}: the edit or the insert is not in the file")
    else:
        pairs = enumerate(zip(original.cells[1:], saved.cells[1:-1], strict=True), start=1)
        wrong.extend(
            f"{name}: the {key} of cell {index} changed"
            for index, (was, now) in pairs
            for key in ("source", "outputs", "metadata", "attachments")
            if was.get(key) != now.get(key)
        )
    return wrong


async def test_every_world_notebook_is_edited_in_its_room(jupyter: JupyterServer, way: str) -> None:
    notebooks = _editable()
    assert len(notebooks) >= 80, len(notebooks)
    folder = jupyter.root / f"world-{way}"
    folder.mkdir()
    names = {}
    for n, source in enumerate(notebooks):
        names[f"{n:03d}.ipynb"] = source
        shutil.copy(source, folder / f"{n:03d}.ipynb")
    if way == "websocket":
        async with agent(jupyter, folder.name) as client:
            for name in names:
                await _edit(client, name)
    else:
        async with ext_client(jupyter) as client:
            for name in names:
                await _edit(client, f"{folder.name}/{name}")
    wrong = [w for name, source in names.items() for w in _compare(folder / name, source)]
    assert not wrong, "\n".join(wrong)
