"""Profile ``notebook-lr``: the tool set of notebook-lr's MCP server, exactly.

notebook-lr works on one *current notebook*, so its tools take no path. Here the current notebook
is ``--notebook`` (default ``notebook.ipynb`` under the root, created by the first edit);
``load_notebook`` switches to another one, and ``save_notebook(path=...)`` saves a copy that
becomes the current notebook. Every edit is saved at once, as notebook-lr's server did. Indexes are
zero-based; errors are MCP tool errors (FastMCP turned the original's ``ValueError`` into those).
Outputs keep notebook-lr's shape (``{"type": "stream", "name", "text"}``,
``{"type": "execute_result", "data", "execution_count"}``, ``{"type": "error", "ename", "evalue",
"traceback"}``) with their text made readable and cut within the output budget; ``get_cell`` and
``execute_cell`` also send a cell's images as image content.

The tools are module-level functions taking the current notebook (``Current``) first:
``cells`` (cells) and ``runs`` (the notebook, runs, variables);
``TOOLS`` lists them in the order tools/list shows them.
"""

from __future__ import annotations

from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.notebook_lr import cells, runs
from nbrelay.tools.notebook_lr.context import WORDS, Current
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (cells.get_cell_source, "read"),
    (cells.update_cell_source, "write"),
    (cells.add_cell, "write"),
    (cells.delete_cell, "destructive"),
    (cells.move_cell, "write"),
    (cells.get_cell, "read"),
    (cells.list_cells, "read"),
    (runs.get_notebook_info, "read"),
    (runs.save_notebook, "write"),
    (runs.execute_cell, "execute"),
    (runs.execute_all, "execute"),
    (runs.load_notebook, "read"),
    (runs.list_variables, "execute"),
    (runs.get_variable, "execute"),
    (cells.convert_cell_type, "write"),
    (cells.find_in_cells, "read"),
    (cells.replace_in_cells, "write"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the notebook-lr tools."""
    reg.exact = True
    reg.words = WORDS
    current = Current(ws)
    reg.current_notebook = lambda: current.path
    reg.add(TOOLS, current)
