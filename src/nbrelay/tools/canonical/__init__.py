"""The canonical profile: nbrelay's own tool set (the default).

Each tool is thin: parse arguments, call the workspace, shape the result. Docstrings are what the
model reads; they say the index base, the defaults and give an example (shown only in the error a
wrong call gets: every agent pays for tools/list on every turn).

The tools are module-level functions taking the workspace first, grouped by what they change:
``notebooks`` (list, create, read), ``cells`` (edits), ``search`` (find, replace), ``history``
(undo), ``execution`` (runs and their outputs), ``kernels``, ``variables`` (the kernel's state),
``files`` (export, import, save); ``TOOLS`` lists them in the order tools/list shows them.
"""

from __future__ import annotations

from nbrelay.tools import apps, links
from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.tools.arguments import SYNONYMS, compact_listing
from nbrelay.tools.canonical import (
    cells,
    execution,
    files,
    history,
    kernels,
    notebooks,
    search,
    variables,
)
from nbrelay.tools.run_text import canonical_text
from nbrelay.workspace import Workspace

TOOLS: ToolTable = [
    (notebooks.list_notebooks, "read"),
    (notebooks.create_notebook, "write"),
    (notebooks.read_notebook, "read", apps.VIEW_META),
    (notebooks.notebook_view, "read", apps.POLL_META),  # listed only for MCP Apps clients
    (notebooks.read_cell, "read"),
    (notebooks.notebook_metadata, "write"),
    (cells.insert_cells, "write"),
    (cells.edit_cell, "write"),
    (cells.delete_cells, "destructive"),
    (cells.move_cells, "write"),
    (cells.merge_cells, "write"),
    (cells.split_cell, "write"),
    (cells.clear_outputs, "destructive"),
    (search.search_notebook, "read"),
    (search.replace_in_notebook, "write"),
    (history.undo, "destructive"),
    (execution.execute, "execute", apps.VIEW_META),
    # Polling runs and listing kernels belong with running code: --no-execute and --read-only
    # drop them.
    (execution.get_execution, "execute"),
    (execution.cancel_execution, "execute"),
    (execution.read_output, "read"),
    (kernels.interrupt_kernel, "execute"),
    (kernels.restart_kernel, "destructive"),
    (kernels.list_kernels, "inspect"),
    (variables.list_variables, "inspect"),
    (variables.inspect_variable, "inspect"),
    (kernels.install_packages, "execute"),
    (variables.save_kernel_state, "execute"),
    (variables.restore_kernel_state, "execute"),
    (files.export_notebook, "write"),
    (files.import_notebook, "write"),
    (variables.visualize_cell, "execute"),
    (files.save_notebook, "write"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the canonical tools."""
    reg.brief = True
    reg.text = canonical_text  # runs as a person would write them, not as JSON
    reg.finish = links.adder(ws)
    reg.add(TOOLS, ws, example=False)
    for args in reg.arguments.values():  # edit_cell(type=...) as insert_cells' items take it
        args.synonyms = {
            k: v for k, v in SYNONYMS.items() if v in args.properties and k not in args.properties
        }
    for tool in reg.tools:  # what tools/list sends (call arguments are checked separately)
        tool.parameters = compact_listing(tool.parameters)
        if tool.annotations is not None and tool.annotations.open_world_hint is False:
            # Hosts judge approval by readOnly/destructive; "no external world" is implied by
            # a notebook tool and costs every agent 22 bytes a tool.
            hints = tool.annotations.model_copy(update={"open_world_hint": None})
            tool.annotations = hints if hints.model_dump(exclude_none=True) else None
