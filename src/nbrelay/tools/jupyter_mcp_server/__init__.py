"""Profile ``jupyter-mcp-server``: the 18 tools of datalayer's jupyter-mcp-server 2.2.4, exactly.

A client names notebooks with ``use_notebook(notebook_name, notebook_path)``; the last one used is
the *current notebook* that cell tools act on unless given ``notebook_name`` (``execute_cell``,
``insert_execute_code_cell`` and ``execute_code`` always use the current one, as in the original).
Indexes are 0-based. Results are what the original answers: the same text, as one text block per
message (one per output for the outputs of a cell or a run, an image as image content), and the
same structured content: ``{kind, result}``, with ``outputs``/``count``/``images`` for outputs and
``columns``/``items``/``count`` for a table. Failures are tool errors worded
``Error executing tool <name>: <reason>`` (bad arguments in pydantic's words, as the original's
MCP SDK reports them); where the original answers a failure as text (a notebook
not in use, a missing file for ``use_notebook``, a cell index past the end for ``read_cell``), so
does this profile.

A notebook's kernel starts when its code first runs, as the original does when started with
``--start-new-code-sandbox false``; ``connect_to_jupyter`` accepts only the server nbrelay serves.

The tools are module-level functions taking ``InUse`` (the workspace and the notebooks in use)
first: ``notebooks`` (notebooks, files, kernels, the server) and ``cells`` (cells and runs);
``TOOLS`` lists them in the order tools/list shows them (by name, as the original does).
"""

from __future__ import annotations

from typing import Any

from mcp_types import ToolAnnotations

from nbrelay.tools import sdk
from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.jupyter_mcp_server import cells, notebooks
from nbrelay.tools.jupyter_mcp_server.state import InUse
from nbrelay.tools.jupyter_mcp_server.views import WORDS
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (cells.clear_cell_output, "destructive"),
    (notebooks.connect_to_jupyter, "destructive"),
    (cells.delete_cell, "destructive"),
    (cells.edit_cell_source, "destructive"),
    (cells.execute_cell, "execute"),
    (cells.execute_code, "execute"),
    (cells.insert_cell, "destructive"),
    (cells.insert_execute_code_cell, "execute"),
    (notebooks.list_files, "read"),
    (notebooks.list_kernels, "read"),
    (notebooks.list_notebooks, "read"),
    (cells.move_cell, "destructive"),
    (cells.overwrite_cell_source, "destructive"),
    (cells.read_cell, "read"),
    (notebooks.read_notebook, "read"),
    (notebooks.restart_notebook, "execute"),
    (notebooks.unuse_notebook, "destructive"),
    (notebooks.use_notebook, "write"),
]

# The original's annotations: title, then (readOnly, destructive, idempotent, openWorld).
_HINTS: dict[str, tuple[str, bool, bool, bool]] = {
    "clear_cell_output": ("Clear Cell Output", False, True, False),
    "connect_to_jupyter": ("Connect to Jupyter Server", False, True, False),
    "delete_cell": ("Delete Cell", False, False, False),
    "edit_cell_source": ("Edit Cell Source", False, False, False),
    "execute_cell": ("Execute Cell", False, False, True),
    "execute_code": ("Execute Code", False, False, True),
    "insert_cell": ("Insert Cell", False, False, False),
    "insert_execute_code_cell": ("Insert and Execute Code Cell", False, False, True),
    "list_files": ("List Files", True, True, False),
    "list_kernels": ("List Kernels", True, True, False),
    "list_notebooks": ("List Notebooks", True, True, False),
    "move_cell": ("Move Cell", False, False, False),
    "overwrite_cell_source": ("Overwrite Cell Source", False, True, False),
    "read_cell": ("Read Cell", True, True, False),
    "read_notebook": ("Read Notebook", True, True, False),
    "restart_notebook": ("Restart Notebook", False, False, False),
    "unuse_notebook": ("Unuse Notebook", False, True, False),
    "use_notebook": ("Use Notebook", False, True, False),
}

_KIND = {"type": "string", "description": "What this result is: 'cell.read', 'notebooks.list' …"}
_RESULT = {"description": "The answer: a message, a listing's text, or the outputs in order."}
ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": _KIND, "result": _RESULT},
    "required": ["kind"],
}
OUTPUTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": _KIND,
        "result": _RESULT,
        "outputs": {
            "type": "array",
            "items": {},
            "description": "Text as text, images as objects.",
        },
        "count": {"type": "integer", "default": 0},
        "images": {"type": "integer", "default": 0},
    },
    "required": ["kind"],
}
TABLE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": _KIND,
        "result": _RESULT,
        "columns": {"type": "array", "items": {"type": "string"}},
        "items": {"type": "array", "items": {"type": "object"}},
        "count": {"type": "integer", "default": 0},
    },
    "required": ["kind"],
}
_SHAPES = {
    "execute_cell": OUTPUTS,
    "execute_code": OUTPUTS,
    "insert_execute_code_cell": OUTPUTS,
    "read_cell": OUTPUTS,
    "list_files": TABLE,
    "list_kernels": TABLE,
    "list_notebooks": TABLE,
}


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the jupyter-mcp-server tools."""
    reg.exact = True
    reg.argument_errors = "pydantic"  # the original refuses bad arguments in the SDK's words
    # The original reads notebooks through their rooms, where a notebook without cells has the
    # one empty cell JupyterLab shows; in live and extension modes, so does this profile.
    ws.notebooks.read_room_placeholder_as_a_cell()
    reg.words = WORDS
    state = InUse(ws)
    reg.current_notebook = lambda: state.paths.get(state.current or "", "")
    before = len(reg.tools)
    reg.add(TOOLS, state, example=False)
    for tool in reg.tools[before:]:
        title, read_only, idempotent, open_world = _HINTS[tool.name]
        tool.annotations = ToolAnnotations(
            title=title,
            read_only_hint=read_only or None,
            destructive_hint=None if read_only else True,
            idempotent_hint=idempotent,
            open_world_hint=open_world,
        )
        # The original declares an output schema on every tool; so does this profile.
        sdk.set_output_schema(tool, _SHAPES.get(tool.name, ANSWER))
