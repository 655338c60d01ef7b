"""mcp-jupyter's query_notebook (view source, check the server, list sessions, find a position)
and execute_notebook_code (run a cell, install packages)."""

from __future__ import annotations

import posixpath
from typing import Annotated, cast

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from nbrelay import jupyter_api
from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NbrelayError
from nbrelay.notebook.address import describe_bounds
from nbrelay.notebook.edits import CellSpec, InsertCells, Plan, plan_insert
from nbrelay.notebook.model import Notebook
from nbrelay.tools.mcp_jupyter.context import Served
from nbrelay.tools.mcp_jupyter.views import (
    EXECUTION_TYPES,
    QUERY_TYPES,
    NotebookPath,
    count_of,
    index_of,
    ipynb,
    need_position,
    notebook_key,
    position,
    reply,
    server_of,
    shown_cell,
)
from nbrelay.tools.results import iso
from nbrelay.tools.runs import progress_reporter


def reply_union(value: object) -> CallToolResult:
    """query_notebook's and execute_notebook_code's results: structured as ``{"result": ...}``
    whatever their type, as the original's (typed as a union) are."""
    return reply(value, wrapped=True)


async def query_notebook(
    state: Served,
    caller: Caller,
    notebook_path: NotebookPath,
    query_type: Annotated[
        str,
        Field(
            description="One of: 'view_source' (view source code of notebook, single cell or all cells), 'check_server' (check if Jupyter server is running and accessible), 'list_sessions' (list all notebook sessions on the server), 'get_position_index' (get the index of a code cell)."
        ),
    ],
    execution_count: Annotated[
        str | int | float | None,
        Field(
            description='(For view_source/get_position_index) The execution count to look for: the number shown in square brackets like [3] in Jupyter. Can be 3, 3.0, "3" or "(3)". Don\'t confuse it with position_index.'
        ),
    ] = None,
    position_index: Annotated[
        int | float | None,
        Field(
            description="(For view_source) The cell's position in the notebook starting from 0 (first cell = 0, second = 1, etc). Works for all cell types."
        ),
    ] = None,
    cell_id: Annotated[
        str | None,
        Field(
            description='(For get_position_index) Cell ID like "205658d6-093c-4722-854c-90b149f254ad".'
        ),
    ] = None,
    server_url: Annotated[
        str | None,
        Field(
            description="(For check_server) Server URL to check; default: the server the notebook was set up with (setup_notebook's server_url), else the server (or folder) nbrelay serves."
        ),
    ] = None,
) -> CallToolResult:
    """Query notebook information and metadata on the user-provided server.

    This consolidates all read-only operations into a single tool following MCP best practices.

    Returns: view_source: dict (single cell) or list of dicts (all cells) with cell contents/metadata; check_server: str status message; list_sessions: list of notebook sessions; get_position_index: int positional index.

    Examples:
        query_notebook("my_notebook.ipynb", "view_source")
        query_notebook("my_notebook.ipynb", "view_source", execution_count=3)
        query_notebook("my_notebook.ipynb", "view_source", position_index=0)
        query_notebook("my_notebook.ipynb", "get_position_index", execution_count=5)
        query_notebook("my_notebook.ipynb", "get_position_index", cell_id="205658d6-093c-4722-854c-90b149f254ad")
    """
    if query_type == "check_server":
        url = (
            server_of(server_url) if server_url else state.servers.get(notebook_key(notebook_path))
        )
        if url is not None and not state.served_here(url):
            reachable = await jupyter_api.probe(url)
            return reply_union(
                "Jupyter server is running" if reachable else "Jupyter server is not accessible"
            )
        try:
            await state.ws.notebooks.list_notebooks("", caller, recursive=False)
        except NbrelayError:
            return reply_union("Jupyter server is not accessible")
        return reply_union("Jupyter server is running")
    if query_type == "list_sessions":
        sessions = []
        for s in state.ws.notebook_sessions.listing():
            info = state.ws.kernels.kernel_info(s.path) if s.active else None
            if info is None:
                continue
            name = posixpath.basename(s.path)
            sessions.append(
                {
                    "id": s.session_id,
                    "path": s.path,
                    "name": name,
                    "type": "notebook",
                    "kernel": {
                        "id": info.kernel_id,
                        "name": info.name,
                        "last_activity": iso(info.last_activity),
                        "execution_state": info.state,
                    },
                    "notebook": {"path": s.path, "name": name},
                }
            )
        return reply_union(sessions)
    if query_type not in QUERY_TYPES:
        raise InvalidArgument(
            f"Invalid query_type: {query_type}. Must be one of: {', '.join(QUERY_TYPES)}"
        )
    path = ipynb(notebook_path)
    if query_type == "get_position_index":
        if (execution_count is None) == (cell_id is None):
            got = "neither" if execution_count is None else "both"
            raise InvalidArgument(f"Must provide either execution_count or cell_id (got {got}).")
        snap = await state.ws.notebooks.view(path, caller)
        count = None if execution_count is None else count_of(execution_count)
        return reply_union(index_of(snap.notebook, execution_count=count, cell_id=cell_id))
    if execution_count is not None and position_index is not None:
        raise InvalidArgument("Cannot provide both execution_count and position_index.")
    snap = await state.ws.notebooks.view(path, caller)
    nb = snap.notebook
    if execution_count is None and position_index is None:
        return reply_union(
            state.budget().share(lambda b: [shown_cell(c, i, b) for i, c in enumerate(nb.cells)])
        )
    index = position(position_index)
    if index is None:
        index = index_of(nb, execution_count=count_of(execution_count or 0))
    if index >= len(nb.cells):
        raise InvalidArgument(
            f"position_index={index} is out of range: {describe_bounds(len(nb.cells))}."
        )
    return reply_union(state.budget().share(lambda b: shown_cell(nb.cells[index], index, b)))


async def execute_notebook_code(
    state: Served,
    caller: Caller,
    notebook_path: NotebookPath,
    execution_type: Annotated[
        str,
        Field(
            description="One of: 'execute_cell' (execute an existing code cell), 'install_packages' (install packages into the notebook's Python environment, with uv pip when uv is installed, pip otherwise)."
        ),
    ],
    ctx: Context,
    position_index: Annotated[
        int | float | None,
        Field(description="(For execute_cell) Positional index of cell to execute (0-indexed)"),
    ] = None,
    package_names: Annotated[
        str | None,
        Field(
            description="(For install_packages) Space-separated list of package names to install"
        ),
    ] = None,
) -> CallToolResult:
    """Execute code in a Jupyter notebook on the user-provided server.

    This consolidates all code execution operations into a single tool following MCP best practices.

    Returns: execute_cell: dict with execution_count, outputs, status; install_packages: str with installation result message.
    """
    if execution_type not in EXECUTION_TYPES:
        raise InvalidArgument(
            f"Invalid execution_type: {execution_type}. Must be one of: {', '.join(EXECUTION_TYPES)}"
        )
    path = ipynb(notebook_path)
    if execution_type == "execute_cell":
        index = need_position(position(position_index), execution_type)
        result = await state.run_cell(caller, path, index, ctx)
        await state.ws.notebooks.view(path, caller)
        return reply_union(result)
    if not package_names or not package_names.strip():
        raise InvalidArgument("package_names is required for install_packages operation.")
    names = package_names.replace(",", " ").split()
    done = await state.ws.inspect.install_packages(
        path, caller, names, prefer_uv=True, progress=progress_reporter(ctx)
    )
    await _record_install(state, caller, path, package_names, done.output)
    await state.ws.notebooks.view(path, caller)
    note = f"\nNote: {done.note}" if done.note else ""
    if not done.ok:
        return reply_union(
            f"Error: installing [{package_names}] failed (exit code {done.exit_code}): "
            f"{done.output}{note}"
        )
    return reply_union(f"Installation of packages [{package_names}]: {done.output}{note}")


async def _record_install(
    state: Served, caller: Caller, path: str, package_names: str, output: str
) -> None:
    """Leave the install in the notebook as the original does: a code cell
    ``!uv pip install <package_names>`` at the end, with the installer's output. The original
    runs that line in the kernel's shell; nbrelay ran the installer itself (the names checked as
    requirements, never a shell line), so the cell records it without being run (no execution
    count)."""

    def planner(nb: Notebook) -> Plan:
        plan = plan_insert(
            nb,
            len(nb.cells),
            [CellSpec("code", f"!uv pip install {package_names}")],
            state.ws.notebooks.id_factory,
        )
        inserted = cast(InsertCells, plan.edits[0])
        stream = {"output_type": "stream", "name": "stdout", "text": output}
        cell = {**inserted.cells[0], "outputs": [stream] if output else []}
        return Plan(edits=(InsertCells(inserted.index, (cell,)),), touched=plan.touched)

    await state.ws.notebooks.edit(path, caller, "record the install", planner, positional=False)
