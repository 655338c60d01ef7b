"""The jupyterlab-rtc sequence: notebooks, sessions and documents on a running JupyterLab.

The original (complyue/jupyterlab-rtc-mcp at the commit whose DESIGN.md is the seed) talks to a
JupyterLab with jupyter-collaboration; it was recorded on one serving the fixture folder, so the
paths here are relative to the server's root. nbrelay answers in live mode on the suite's
JupyterLab, confined to a fresh folder that holds the same fixtures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.profiles.differential.harness import Mask, Step

ORIGINAL = "complyue/jupyterlab-rtc-mcp@bac78b9"
LIVE = True
NBRELAY: dict[str, Any] = {}


def _write(path: Path, nb: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")


def write_fixtures(root: Path) -> None:
    demo = new_notebook(
        cells=[
            new_markdown_cell("# Demo"),
            new_code_cell(
                "print('hello')",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text="hello\n")],
            ),
            new_code_cell("x = 1"),
            new_code_cell(
                "x + 1",
                execution_count=2,
                outputs=[new_output("execute_result", execution_count=2, data={"text/plain": "2"})],
            ),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    _write(root / "demo.ipynb", demo)
    _write(root / "empty.ipynb", new_notebook())
    _write(root / "sub" / "inner.ipynb", new_notebook(cells=[new_code_cell("inner = True")]))
    (root / "notes.txt").write_text("# Notes\n\nplain text\n", encoding="utf-8")


def make_fixtures(folder: Path) -> Path:
    root = folder / "root"
    write_fixtures(root)
    return root


def _r(start: int, end: int | None = None) -> dict[str, int]:
    return {"start": start} if end is None else {"start": start, "end": end}


STEPS = [
    Step("list notebooks", "list_nbs", {}),
    Step("list notebooks of a folder", "list_nbs", {"path": "sub"}),
    Step("list notebooks of a missing folder", "list_nbs", {"path": "missing"}, True),
    Step("stat a notebook", "get_nb_stat", {"path": "demo.ipynb"}),
    Step("stat a missing notebook", "get_nb_stat", {"path": "missing.ipynb"}, True),
    Step("stat a text file", "get_nb_stat", {"path": "notes.txt"}, True),
    Step("read every cell", "read_nb_cells", {"path": "demo.ipynb"}),
    Step("read a range", "read_nb_cells", {"path": "demo.ipynb", "ranges": [_r(1, 2)]}),
    Step("read a range without end", "read_nb_cells", {"path": "demo.ipynb", "ranges": [_r(2)]}),
    Step(
        "read two ranges", "read_nb_cells", {"path": "demo.ipynb", "ranges": [_r(0, 1), _r(3, 4)]}
    ),
    Step(
        "read a range past the end", "read_nb_cells", {"path": "demo.ipynb", "ranges": [_r(2, 10)]}
    ),
    Step("read out of range", "read_nb_cells", {"path": "demo.ipynb", "ranges": [_r(10)]}, True),
    Step("read an empty notebook", "read_nb_cells", {"path": "empty.ipynb"}, True),
    Step("read a missing notebook", "read_nb_cells", {"path": "missing.ipynb"}, True),
    Step("read a text file", "read_nb_cells", {"path": "notes.txt"}, True),
    Step(
        "read with ranges of the wrong type",
        "read_nb_cells",
        {"path": "demo.ipynb", "ranges": "0-2"},
        True,
    ),
    Step(
        "modify a cell",
        "modify_nb_cells",
        {
            "path": "demo.ipynb",
            "exec": False,
            "modifications": [{"range": _r(2, 3), "content": "x = 2"}],
        },
    ),
    Step(
        "modify out of range",
        "modify_nb_cells",
        {
            "path": "demo.ipynb",
            "exec": False,
            "modifications": [{"range": _r(50), "content": "never"}],
        },
        True,
    ),
    Step(
        "modify a missing notebook",
        "modify_nb_cells",
        {
            "path": "missing.ipynb",
            "exec": False,
            "modifications": [{"range": _r(0), "content": "x"}],
        },
        True,
    ),
    Step(
        "insert a markdown cell",
        "insert_nb_cells",
        {
            "path": "demo.ipynb",
            "position": 1,
            "exec": False,
            "cells": [{"type": "markdown", "content": "## Inserted"}],
        },
    ),
    Step(
        "insert two cells at the end",
        "insert_nb_cells",
        {
            "path": "demo.ipynb",
            "position": 5,
            "exec": False,
            "cells": [{"content": "a = 1"}, {"content": "b = 2"}],
        },
    ),
    Step(
        "insert past the end",
        "insert_nb_cells",
        {"path": "demo.ipynb", "position": 99, "exec": False, "cells": [{"content": "far = 1"}]},
        True,
    ),
    Step(
        "insert into an empty notebook",
        "insert_nb_cells",
        {"path": "empty.ipynb", "position": 0, "exec": False, "cells": [{"content": "first = 1"}]},
    ),
    Step(
        "insert into a missing notebook",
        "insert_nb_cells",
        {"path": "missing.ipynb", "position": 0, "exec": False, "cells": [{"content": "x"}]},
        True,
    ),
    Step(
        "insert a raw cell",
        "insert_nb_cells",
        {
            "path": "demo.ipynb",
            "position": 0,
            "exec": False,
            "cells": [{"type": "raw", "content": "raw"}],
        },
        True,
    ),
    Step("delete a cell", "delete_nb_cells", {"path": "demo.ipynb", "ranges": [_r(1, 2)]}),
    Step(
        "delete out of range", "delete_nb_cells", {"path": "demo.ipynb", "ranges": [_r(40)]}, True
    ),
    Step(
        "delete in a missing notebook",
        "delete_nb_cells",
        {"path": "missing.ipynb", "ranges": [_r(0)]},
        True,
    ),
    Step("read after the edits", "read_nb_cells", {"path": "demo.ipynb"}),
    Step("read the notebook inserted into", "read_nb_cells", {"path": "empty.ipynb"}),
    Step("stat after the edits", "get_nb_stat", {"path": "demo.ipynb"}),
    Step("begin a session", "begin_nb_session", {"path": "demo.ipynb"}),
    Step("query the sessions", "query_nb_sessions", {}),
    Step("end the session", "end_nb_session", {"path": "demo.ipynb"}),
    Step("end a session never begun", "end_nb_session", {"path": "sub/inner.ipynb"}, True),
    Step(
        "begin a session on a missing notebook", "begin_nb_session", {"path": "missing.ipynb"}, True
    ),
    Step(
        "restart a kernel that never ran",
        "restart_nb_kernel",
        {"path": "sub/inner.ipynb", "exec": False},
        True,
    ),
    Step("list documents", "list_documents", {}),
    Step("list documents of a missing folder", "list_documents", {"path": "missing"}, True),
    Step(
        "create a markdown document",
        "create_document",
        {"path": "new.md", "type": "markdown", "content": "# New\n"},
    ),
    Step(
        "create it again",
        "create_document",
        {"path": "new.md", "type": "markdown", "content": "# Again\n"},
        True,
    ),
    Step("create a notebook", "create_document", {"path": "made.ipynb", "type": "notebook"}),
    Step("document info", "get_document_info", {"path": "notes.txt"}),
    Step("info of a missing document", "get_document_info", {"path": "missing.md"}, True),
    Step("a document exists", "document_exists", {"path": "notes.txt"}),
    Step("a document does not exist", "document_exists", {"path": "missing.md"}),
    Step("copy a document", "copy_document", {"path": "notes.txt", "copyPath": "copy.md"}),
    Step(
        "copy a missing document",
        "copy_document",
        {"path": "missing.md", "copyPath": "copy2.md"},
        True,
    ),
    Step("rename a document", "rename_document", {"path": "copy.md", "newPath": "renamed.md"}),
    Step(
        "rename a missing document",
        "rename_document",
        {"path": "missing.md", "newPath": "other.md"},
        True,
    ),
    Step("delete a document", "delete_document", {"path": "renamed.md"}),
    Step("delete a missing document", "delete_document", {"path": "missing.md"}, True),
]

MASK = Mask(ids=frozenset({"id", "session_id", "file_id", "kernel_id"}))

# The original (at bac78b9, on JupyterLab 4.6 with jupyter-collaboration) reads through the
# contents API, but its edits never reach the document ("Invalid access: Add Yjs type to a
# document before reading data"): modify/insert/delete answer success and change nothing, and
# its document tools call endpoints JupyterLab does not have (404). nbrelay does each of those
# for real, so every step after the first edit sees a different notebook.
_NO_EDIT = "the original answers success but its edit never reaches the document (broken on JupyterLab 4.6)"
_EDITED = "after the edits: the original's edits did nothing, nbrelay's were made"
_NO_DOCS = "the original's document tools fail on JupyterLab 4.6 (404 from endpoints it assumes)"
_SILENT = "the original answers success for {what} and does nothing; nbrelay refuses with an error naming the problem"
ACCEPTED: dict[str, str] = {
    "list notebooks": "the original lists only the root folder's notebooks, not sub/ (its"
    " 'recursively' is not done) and adds the contents model's created/size/writable; nbrelay"
    " lists recursively with the seed's three fields",
    "list notebooks of a folder": "the original adds the contents model's created/size/writable;"
    " nbrelay gives the seed's path, name and last_modified",
    "stat a text file": "the original reports a text file as a notebook of 0 cells; nbrelay says"
    " it is not a notebook",
    "read with ranges of the wrong type": "the original ignores a string for ranges and returns"
    " no cells; nbrelay refuses it (ranges is an array of {start, end})",
    "modify a cell": _NO_EDIT,
    "modify out of range": _SILENT.format(what="a range past the end"),
    "modify a missing notebook": _SILENT.format(what="a missing notebook"),
    "insert a markdown cell": _NO_EDIT,
    "insert two cells at the end": _NO_EDIT,
    "insert past the end": _SILENT.format(what="a position past the end"),
    "insert into an empty notebook": _NO_EDIT,
    "insert into a missing notebook": _SILENT.format(what="a missing notebook"),
    "insert a raw cell": _SILENT.format(what="a raw cell (the seed allows code and markdown)"),
    "delete a cell": "the original deletes nothing ('Successfully deleted 0 cells'); nbrelay"
    " deletes the cell ('Successfully deleted 1 cells')",
    "delete out of range": _SILENT.format(what="a range past the end"),
    "delete in a missing notebook": _SILENT.format(what="a missing notebook"),
    "read after the edits": _EDITED,
    "read the notebook inserted into": _EDITED,
    "stat after the edits": _EDITED,
    "begin a session": "nbrelay also names the kernel the session starts (an extra field)",
    "query the sessions": "the original lists every notebook with status not_found even while"
    " its own session runs; nbrelay lists the session begun, connected",
    "end the session": "the original finds no session it began itself (not_found); nbrelay ends"
    " it (disconnected, as the seed's example)",
    "end a session never begun": "message wording: nbrelay says 'No active session for this"
    " notebook'",
    "begin a session on a missing notebook": "the original starts a room for a file that does not"
    " exist (and creates it); nbrelay refuses: the notebook does not exist",
    "restart a kernel that never ran": "the original fails when no kernel runs; nbrelay starts"
    " the notebook's kernel",
    "list documents": _EDITED,
    "create a markdown document": _NO_DOCS,
    "create a notebook": _NO_DOCS,
    "document info": _NO_DOCS,
    "a document exists": _NO_DOCS,
    "a document does not exist": _NO_DOCS,
    "copy a document": _NO_DOCS,
    "rename a document": _NO_DOCS,
    "delete a document": _NO_DOCS,
}
