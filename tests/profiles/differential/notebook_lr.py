"""The notebook-lr sequence: its 9 tools from an empty notebook, and the files saved.

The original (tmdgusya/notebook-lr, ``notebook_lr/mcp_server.py`` at the commit that added the
9 tools) keeps one notebook in memory, new and empty at start, and writes ``.nblr`` files only
when ``save_notebook`` is called, relative to its working folder (the fixture root here). nbrelay
starts on its default notebook, ``notebook.nblr``, which does not exist yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.profiles.differential.harness import Kept, Mask, Step

ORIGINAL = "tmdgusya/notebook-lr@568a92731d384c90c2d41e84293557781146ccf3"
LIVE = False
NBRELAY: dict[str, Any] = {}


def make_fixtures(folder: Path) -> Path:
    root = folder / "root"
    root.mkdir(parents=True)
    return root


STEPS = [
    Step("info of the empty notebook", "get_notebook_info", {}),
    Step("list the empty notebook", "list_cells", {}),
    Step("get a cell of the empty notebook", "get_cell", {"index": 0}, True),
    Step("source of the empty notebook", "get_cell_source", {"index": 0}, True),
    Step("update in the empty notebook", "update_cell_source", {"index": 0, "source": "x"}, True),
    Step("delete in the empty notebook", "delete_cell", {"index": 0}, True),
    Step("move in the empty notebook", "move_cell", {"index": 0, "direction": "up"}, True),
    Step("add with the defaults", "add_cell", {}),
    Step(
        "add markdown after 0",
        "add_cell",
        {"cell_type": "markdown", "after_index": 0, "source": "# Title"},
    ),
    Step("add code at the end", "add_cell", {"cell_type": "code", "source": "print('hi')"}),
    Step("add after an index out of range", "add_cell", {"after_index": 99, "source": "z"}, True),
    Step("add after a negative index", "add_cell", {"after_index": -1, "source": "z"}, True),
    Step("add a raw cell", "add_cell", {"cell_type": "raw", "source": "z"}, True),
    Step("add with a cell type of the wrong type", "add_cell", {"cell_type": 5}, True),
    Step("source of cell 1", "get_cell_source", {"index": 1}),
    Step("source out of range", "get_cell_source", {"index": 3}, True),
    Step("source of a negative index", "get_cell_source", {"index": -1}, True),
    Step("source of an index of the wrong type", "get_cell_source", {"index": "one"}, True),
    Step("update cell 0", "update_cell_source", {"index": 0, "source": "x = 1"}),
    Step("update out of range", "update_cell_source", {"index": 5, "source": "y"}, True),
    Step(
        "update with a source of the wrong type",
        "update_cell_source",
        {"index": 0, "source": ["a"]},
        True,
    ),
    Step("get cell 0", "get_cell", {"index": 0}),
    Step("list three cells", "list_cells", {}),
    Step("move the last cell up", "move_cell", {"index": 2, "direction": "up"}),
    Step("move the first cell up", "move_cell", {"index": 0, "direction": "up"}, True),
    Step("move the last cell down", "move_cell", {"index": 2, "direction": "down"}, True),
    Step("move sideways", "move_cell", {"index": 1, "direction": "sideways"}, True),
    Step("move out of range", "move_cell", {"index": 9, "direction": "down"}, True),
    Step("move cell 0 down", "move_cell", {"index": 0, "direction": "down"}),
    Step("info of three cells", "get_notebook_info", {}),
    Step("delete cell 1", "delete_cell", {"index": 1}),
    Step("delete out of range", "delete_cell", {"index": 7}, True),
    Step("list two cells", "list_cells", {}),
    Step("save under a name", "save_notebook", {"path": "my_notebook.nblr"}),
    Step("info after saving", "get_notebook_info", {}),
    Step("add after saving", "add_cell", {"source": "after = 'save'"}),
    Step("save again", "save_notebook", {}),
    Step("save under a second name", "save_notebook", {"path": "other.nblr"}),
    Step("save a copy in a new folder", "save_notebook", {"path": "nested/copy.nblr"}),
    Step("save with a path of the wrong type", "save_notebook", {"path": 123}, True),
    Step("info after the copy", "get_notebook_info", {}),
    Step(
        "save with the session", "save_notebook", {"path": "session.nblr", "include_session": True}
    ),
    Step("save over another notebook", "save_notebook", {"path": "other.nblr"}, True),
    Step("get the last cell", "get_cell", {"index": 2}),
]

MASK = Mask(times=frozenset({"created", "modified", "saved_at"}))

# Steps where nbrelay keeps its own behaviour (see the README's notebook-lr section).
ACCEPTED: dict[str, str] = {
    "info of three cells": "nbrelay saves every edit at once (nothing is lost if the server stops),"
    " so the notebook has its path (notebook.nblr) from the first edit; the original keeps it in"
    " memory and reports path null until save_notebook",
    "save with the session": "the original fails there (it writes the kernel's whole namespace,"
    " modules included, with json.dump, which raises); nbrelay saves the variables it can"
    " (dill) and names them",
    "save over another notebook": "the original overwrites an existing .nblr without asking;"
    " nbrelay refuses to replace another notebook (save to a new path, or load_notebook it)",
}


def files_after(root: Path, mask: Mask) -> dict[str, Any]:
    """The ``.nblr`` files the sequence saved (those no accepted difference touches), as they
    are after it."""
    out: dict[str, Any] = {}
    for name in ("my_notebook.nblr", "nested/copy.nblr"):
        path = root / name
        try:
            out[name] = mask(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            out[name] = f"<unreadable: {type(exc).__name__}>"
    return out


def _copy_path(files: Any) -> Any:
    copy = files.get("nested/copy.nblr")
    if isinstance(copy, dict) and isinstance(copy.get("metadata"), dict):
        copy = {**copy, "metadata": {**copy["metadata"], "path": "<kept>"}}
    return {**files, "nested/copy.nblr": copy}


# The files left: one field differs on purpose.
FILES_KEPT = Kept(
    "a .nblr saved under a new name records, in the original, the path the notebook had before"
    " (nested/copy.nblr says other.nblr); nbrelay records where the file is",
    only=_copy_path,
)
