"""Profile ``srcbook``: the tools, resources and events of Srcbook's MCP specification.

A *session* is a notebook that ``notebook_create`` or ``notebook_import`` made, in a working
folder of its own under the root (``<id>/<id>.ipynb``; in live mode directly in the root; its
``metadata.srcbook`` holds the name, description, language and tsconfig); its id is the file
name without ``.ipynb``: a slug of the name and six hex digits
(``sales-analysis-q4-2024-3f9a2c``), so sessions persist with their notebooks (the registry is
``workspace/srcbook_sessions.py``). TypeScript and JavaScript run on the Deno kernel; an imported
Python notebook keeps its Python kernel. A session is *active* while its kernel runs or for
``--kernel-idle-timeout`` (Srcbook's ``sessionTimeout``) after its last use, *suspended*
otherwise; using it resumes it. Timeouts are in milliseconds.

Events: during ``cell_execute`` each ``notebook.cell.executing``, ``notebook.cell.output``,
``notebook.cell.completed`` and ``notebook.error`` event is a progress notification whose message
is the event as JSON; every tool that changes a session ends with ``notebook.state.changed``.
Every event is also kept in the session's event log, the resource
``notebook://session/{id}/events``, whose listeners hear of each (``resources``).

The tools are module-level functions taking ``Served`` (the workspace and its sessions) first:
``notebooks`` (create, list, delete, export, import) and ``cells`` (add, run, update, delete,
visualize); ``TOOLS`` lists them in the order tools/list shows them. Their results and events
are in ``views``.
"""

from __future__ import annotations

from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.srcbook import cells, notebooks
from nbrelay.tools.srcbook.context import WORDS, Served
from nbrelay.tools.srcbook.resources import register_resources as register_resources
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (notebooks.notebook_create, "write"),
    (notebooks.notebook_list, "read"),
    (notebooks.notebook_delete, "destructive"),
    (cells.cell_add, "write"),
    (cells.cell_execute, "execute"),
    (cells.cell_update, "write"),
    (cells.cell_delete, "destructive"),
    (notebooks.notebook_export, "read"),
    (notebooks.notebook_import, "write"),
    (cells.cell_visualize, "execute"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the Srcbook tools."""
    reg.words = WORDS
    reg.add(TOOLS, Served(ws))
