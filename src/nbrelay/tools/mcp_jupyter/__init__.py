"""Profile ``mcp-jupyter``: the four consolidated tools of MCP Jupyter (block/mcp-jupyter 2.0.2).

Positions are 0-based; ``execution_count`` is the ``[n]`` number Jupyter shows. A notebook must be
viewed (``setup_notebook``, ``query_notebook`` view_source or get_position_index) before
``modify_notebook_cells`` may change it, and is refused again once someone else changes it, until
it is viewed again. Results are plain JSON values (dicts, lists, strings, integers) as in the
original; outputs have images replaced by a text indicator. Errors are MCP tool errors, except that
the markdown and delete operations report failures in an ``error`` field, as the original does.

The tools are module-level functions taking ``Served`` (the workspace and the servers notebooks
were set up with) first: ``query`` (query_notebook, execute_notebook_code) and ``cells``
(modify_notebook_cells, setup_notebook); ``TOOLS`` lists them in the order tools/list shows them.
"""

from __future__ import annotations

from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.mcp_jupyter import cells, query
from nbrelay.tools.mcp_jupyter.context import Served
from nbrelay.tools.mcp_jupyter.views import WORDS
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (query.query_notebook, "read"),
    (cells.modify_notebook_cells, "runs"),
    (query.execute_notebook_code, "execute"),
    (cells.setup_notebook, "write"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the mcp-jupyter tools."""
    reg.exact = True
    reg.words = WORDS
    served = Served(ws)
    # modify_notebook_cells runs code by default (execute=true), so it is announced as a tool that
    # runs code, unless this server runs none (then execute is ignored).
    reg.add(TOOLS, served, runs="destructive" if ws.settings.no_execute else "execute")
