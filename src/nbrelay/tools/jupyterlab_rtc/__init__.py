"""Profile ``jupyterlab-rtc``: the tool set of the JupyterLab RTC MCP server, exactly.

Sessions, range-based cell tools (0-based, ``end`` excluded, ``exec`` on by default) and document
tools over any file under the root. Paths are relative to the root, as in JupyterLab; a leading
``/`` (``/work/a.ipynb``) also means the root. Errors are MCP tool errors, as in the original.

The tools are module-level functions taking the workspace first: ``notebooks`` (sessions,
notebooks, cells, the kernel) and ``documents`` (any file); ``TOOLS`` lists them in the order
tools/list shows them.
"""

from __future__ import annotations

from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.jupyterlab_rtc import documents, notebooks
from nbrelay.tools.jupyterlab_rtc.views import WORDS
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (notebooks.begin_nb_session, "write"),
    (notebooks.end_nb_session, "write"),
    (notebooks.query_nb_sessions, "read"),
    (notebooks.list_nbs, "read"),
    (notebooks.get_nb_stat, "read"),
    (notebooks.read_nb_cells, "read"),
    (notebooks.modify_nb_cells, "runs"),
    (notebooks.insert_nb_cells, "runs"),
    (notebooks.delete_nb_cells, "destructive"),
    (notebooks.restart_nb_kernel, "execute"),
    (documents.list_documents, "read"),
    (documents.create_document, "write"),
    (documents.get_document_info, "read"),
    (documents.delete_document, "destructive"),
    (documents.rename_document, "destructive"),
    (documents.copy_document, "write"),
    (documents.document_exists, "read"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the jupyterlab-rtc tools."""
    reg.words = WORDS
    # modify/insert run code by default (exec=true), so they are announced as tools that run code,
    # unless this server runs none (then exec is ignored and they only edit).
    reg.add(TOOLS, ws, runs="write" if ws.settings.no_execute else "execute")
