"""The mcp-jupyter sequence: block's mcp-jupyter 2.0.2 and nbrelay's profile of it, live.

The original (PyPI, in ``.originals/``: tests/profiles/mcp_jupyter/original.py) talks to a
Jupyter Server by REST and kernel websocket; it runs here on a JupyterLab of its own whose root
holds the fixtures. nbrelay answers in live mode on the suite's JupyterLab, confined to a fresh
folder that holds the same fixtures. ``SERVER`` in an argument stands for the URL of the server
each one is given (``setup_notebook``'s and ``check_server``'s ``server_url``).

The original keeps one "last viewed" hash for all notebooks, so the steps view a notebook right
before they change it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.profiles.differential.harness import Kept, Mask, Step

ORIGINAL = "mcp-jupyter 2.0.2 (PyPI)"
LIVE = True
SERVER = "<server>"


def _write(path: Path, nb: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")


def write_fixtures(root: Path) -> None:
    """demo.ipynb (a markdown cell; a code cell with a stream output; a code cell whose result
    has HTML beside its text), empty.ipynb (no cells) and a text file."""
    demo = new_notebook(
        cells=[
            new_markdown_cell("# Demo"),
            new_code_cell(
                "print('hello')",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text="hello\n")],
            ),
            new_code_cell("from IPython.display import HTML\nHTML('<b>bold</b>')"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    _write(root / "demo.ipynb", demo)
    _write(root / "empty.ipynb", new_notebook())
    (root / "notes.txt").write_text("plain text\n", encoding="utf-8")


def make_fixtures(folder: Path) -> Path:
    root = folder / "root"
    write_fixtures(root)
    return root


DEMO = {"notebook_path": "demo.ipynb"}
EMPTY = {"notebook_path": "empty"}


def _q(kind: str, **args: Any) -> dict[str, Any]:
    return {**DEMO, "query_type": kind, **args}


def _m(operation: str, **args: Any) -> dict[str, Any]:
    return {**DEMO, "operation": operation, **args}


def _x(kind: str, **args: Any) -> dict[str, Any]:
    return {**DEMO, "execution_type": kind, **args}


STEPS = [
    Step("set up a notebook", "setup_notebook", {**DEMO, "server_url": SERVER}),
    Step("view every cell", "query_notebook", _q("view_source")),
    Step("view one cell", "query_notebook", _q("view_source", position_index=1)),
    Step("view by execution count", "query_notebook", _q("view_source", execution_count=1)),
    Step("view out of range", "query_notebook", _q("view_source", position_index=99), True),
    Step(
        "view with a position of the wrong type",
        "query_notebook",
        _q("view_source", position_index="one"),
        True,
    ),
    Step(
        "view by position and count",
        "query_notebook",
        _q("view_source", position_index=0, execution_count=1),
        True,
    ),
    Step("position of a count", "query_notebook", _q("get_position_index", execution_count=1)),
    Step(
        "position of a count never run",
        "query_notebook",
        _q("get_position_index", execution_count=9),
        True,
    ),
    Step("position of nothing", "query_notebook", _q("get_position_index"), True),
    Step("an unknown query", "query_notebook", _q("bogus"), True),
    Step("check the server", "query_notebook", _q("check_server", server_url=SERVER)),
    Step("run the HTML cell", "execute_notebook_code", _x("execute_cell", position_index=2)),
    Step("run out of range", "execute_notebook_code", _x("execute_cell", position_index=50), True),
    Step(
        "run a markdown cell", "execute_notebook_code", _x("execute_cell", position_index=0), True
    ),
    Step("an unknown execution type", "execute_notebook_code", _x("run_all"), True),
    Step("view before editing", "query_notebook", _q("view_source")),
    Step(
        "add a code cell without running it",
        "modify_notebook_cells",
        _m("add_code", cell_content="z = 3", execute=False),
    ),
    Step(
        "add a markdown cell at a position",
        "modify_notebook_cells",
        _m("add_markdown", cell_content="## Part", position_index=1),
    ),
    Step(
        "edit a code cell and run it",
        "modify_notebook_cells",
        _m("edit_code", cell_content="z = 4\nz", position_index=4),
    ),
    Step(
        "edit a markdown cell",
        "modify_notebook_cells",
        _m("edit_markdown", cell_content="## Part two", position_index=1),
    ),
    Step(
        "edit out of range",
        "modify_notebook_cells",
        _m("edit_code", cell_content="never", position_index=42, execute=False),
        True,
    ),
    Step("view after the edit", "query_notebook", _q("view_source", position_index=4)),
    Step(
        "delete out of range",
        "modify_notebook_cells",
        _m("delete", position_index=77),
        True,
    ),
    Step("delete a cell", "modify_notebook_cells", _m("delete", position_index=1)),
    Step("an unknown operation", "modify_notebook_cells", _m("move", position_index=0), True),
    Step(
        "add without content",
        "modify_notebook_cells",
        _m("add_code", execute=False),
        True,
    ),
    Step(
        "add and run a cell",
        "modify_notebook_cells",
        _m("add_code", cell_content="print(z * 2)"),
    ),
    Step("view after the changes", "query_notebook", _q("view_source")),
    Step(
        "change a missing notebook",
        "modify_notebook_cells",
        {"notebook_path": "missing.ipynb", "operation": "delete", "position_index": 0},
        True,
    ),
    Step(
        "view a missing notebook",
        "query_notebook",
        {"notebook_path": "missing", "query_type": "view_source"},
        True,
    ),
    Step("set up the empty notebook", "setup_notebook", {**EMPTY, "server_url": SERVER}),
    Step("view the empty notebook", "query_notebook", {**EMPTY, "query_type": "view_source"}),
    Step(
        "view a cell of the empty notebook",
        "query_notebook",
        {**EMPTY, "query_type": "view_source", "position_index": 0},
        True,
    ),
    Step(
        "delete in the empty notebook",
        "modify_notebook_cells",
        {**EMPTY, "operation": "delete", "position_index": 0},
        True,
    ),
    Step(
        "run in the empty notebook",
        "execute_notebook_code",
        {**EMPTY, "execution_type": "execute_cell", "position_index": 0},
        True,
    ),
    Step(
        "install without packages",
        "execute_notebook_code",
        _x("install_packages"),
        True,
    ),
    Step("list the sessions", "query_notebook", _q("list_sessions", server_url=SERVER)),
]

MASK = Mask(
    ids=frozenset({"id", "cell_id", "session_id", "kernel_id", "hash"}),
    times=frozenset({"last_modified", "created", "last_activity"}),
    messages=frozenset({"error"}),
)


def _without(*keys: str) -> Callable[[Any], Any]:
    """An ``only`` for ``Kept``: the outcome with ``keys`` left out wherever they are."""

    def apply(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: apply(v) for k, v in value.items() if k not in keys}
        if isinstance(value, list):
            return [apply(v) for v in value]
        return value

    return apply


# A view of cells: nbrelay adds each cell's id (get_position_index takes a cell_id; the original
# shows none), and it reads the notebook from the collaboration room, where the contents API's
# notebook-signature flag ("trusted": false in each code cell's metadata) does not exist.
_VIEW = Kept(
    "nbrelay adds each cell's id (for get_position_index's cell_id); the original reads the"
    ' contents API, which adds "trusted": false to each code cell\'s metadata',
    _without("id", "trusted"),
)


# What jupyter_ydoc's YNotebook.set gives a notebook's metadata where the file has none (the
# room writes them into the file when it next saves).
_ROOM_METADATA = {"language_info": {"name": ""}, "kernelspec": {"name": "", "display_name": ""}}


def _room_defaults(value: Any) -> Any:
    """A contents model without the ``"trusted"`` flags, and without the ``language_info`` and
    ``kernelspec`` defaults a collaboration room gives a notebook's metadata when the file has
    none."""
    value = _without("trusted")(value)
    if isinstance(value, dict) and isinstance(value.get("value"), dict):
        metadata = value["value"].get("content", {}).get("metadata", {})
        for key, default in _ROOM_METADATA.items():
            if metadata.get(key) == default:
                metadata.pop(key)
    return value


ACCEPTED: dict[str, str | Kept] = {
    "set up a notebook": Kept(
        'the original reads the contents API, which adds "trusted": false to each code cell\'s'
        " metadata; nbrelay reads the collaboration room, whose metadata has a language_info"
        ' of {"name": ""} where the file has none (a live-mode artifact)',
        _room_defaults,
    ),
    "set up the empty notebook": Kept(
        "nbrelay reads the collaboration room, which gives a notebook whose file has no"
        ' language_info or kernelspec the empty ones ({"name": ""}, {"name": "", "display_name":'
        ' ""}; the room saves them into the file); the original reads the file',
        _room_defaults,
    ),
    "view every cell": _VIEW,
    "view one cell": _VIEW,
    "view by execution count": _VIEW,
    "view before editing": _VIEW,
    "view after the edit": _VIEW,
    "view after the changes": _VIEW,
    "view a missing notebook": "the original creates the notebook it is asked to view (a read"
    " that writes a file, here missing.ipynb) and shows its no cells; nbrelay refuses: the notebook"
    " does not exist (setup_notebook creates one)",
    "list the sessions": Kept(
        "the sessions nbrelay began, without the Jupyter Server's count of websocket"
        " connections; a kernel still starting on the server shows as idle",
        _without("connections", "execution_state"),
    ),
}
