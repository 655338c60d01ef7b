"""jupyterlab-rtc's session and notebook tools: sessions, notebooks, range-based cells, the
kernel."""

from __future__ import annotations

import posixpath
from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.notebook import address, render
from nbrelay.notebook.edits import CellSpec
from nbrelay.tools.jupyterlab_rtc.views import (
    CellInsertion,
    CellItem,
    CellItems,
    CellModification,
    CellRange,
    Done,
    Exec,
    NbPath,
    NotebookItem,
    NotebookItems,
    NotebookStat,
    SessionResult,
    SessionsResult,
    as_given,
    done_running,
    kernel_view,
    lab_path,
    nbformat_output,
    range_ref,
    run_cells,
    said,
    session_view,
)
from nbrelay.tools.results import iso
from nbrelay.workspace import Workspace


async def begin_nb_session(ws: Workspace, caller: Caller, path: NbPath) -> SessionResult:
    """Begin a real-time collaboration session for a notebook.

    Live mode joins the notebook's collaboration room (a person in JupyterLab sees the
    agent's edits as they happen); file mode opens the notebook and starts its kernel.
    """
    if ws.settings.no_execute:
        snap = await ws.notebooks.read(lab_path(path), caller)
        return SessionResult(
            path=as_given(path, snap.path),
            status="connected",
            message="Notebook opened (this server runs no code, so no kernel was started)",
        )
    session = await ws.notebook_sessions.begin_session(lab_path(path), caller)
    snap = await ws.notebooks.read(session.path, caller)
    message = (
        "RTC session started successfully"
        if session.live
        else "Session started successfully (file mode: the notebook is open and its kernel "
        "runs; there is no live collaboration)"
    )
    return SessionResult(
        path=as_given(path, session.path),
        session_id=session.session_id,
        file_id=session.file_id,
        status="connected",
        message=message,
        kernel=kernel_view(ws, snap),
    )


async def end_nb_session(ws: Workspace, caller: Caller, path: NbPath) -> SessionResult:
    """End a real-time collaboration session for a notebook.

    Live mode leaves the room (the kernel keeps running); file mode shuts the kernel down.
    """
    session = await ws.notebook_sessions.end_session(lab_path(path), caller)
    rel = as_given(path, ws.notebooks.relative(lab_path(path)))
    if session is None:
        return SessionResult(
            path=rel, status="not_found", message="No active session for this notebook"
        )
    message = "RTC session ended successfully" if session.live else "Session ended successfully"
    return SessionResult(path=rel, status="disconnected", message=message)


async def query_nb_sessions(
    ws: Workspace,
    caller: Caller,
    root_path: Annotated[
        str | None,
        Field(
            description="Directory path to search for notebook sessions (default: lab root directory)"
        ),
    ] = None,
) -> SessionsResult:
    """Query the status of real-time collaboration sessions for notebooks in a directory."""
    folder = lab_path(root_path)
    if folder:
        await ws.notebooks.list_notebooks(folder, caller, recursive=False)  # the folder must exist
    views = [
        await session_view(ws, caller, s, root_path) for s in ws.notebook_sessions.listing(folder)
    ]
    return SessionsResult(
        root_path=root_path if root_path is not None else "",
        sessions=views,
        total_sessions=len(views),
        active_sessions=sum(v.status == "connected" for v in views),
    )


async def list_nbs(
    ws: Workspace,
    caller: Caller,
    path: Annotated[
        str | None,
        Field(description="Directory path to search for notebooks (default: root directory)"),
    ] = None,
) -> NotebookItems:
    """List all notebook files under a specified directory, recursively."""
    found = await ws.notebooks.list_notebooks(lab_path(path), caller, recursive=True)
    return NotebookItems(
        notebooks=[
            NotebookItem(
                path=as_given(path, e.path),
                name=posixpath.basename(e.path),
                last_modified=iso(e.modified),
            )
            for e in found
        ]
    )


async def get_nb_stat(ws: Workspace, caller: Caller, path: NbPath) -> NotebookStat:
    """Get status information about a notebook, including cell count and kernel information."""
    snap = await ws.notebooks.read(lab_path(path), caller)
    return NotebookStat(
        path=as_given(path, snap.path),
        cell_count=len(snap.notebook.cells),
        last_modified=iso(await ws.documents.last_modified(snap, caller)),
        kernel=kernel_view(ws, snap),
    )


async def read_nb_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ranges: Annotated[
        list[CellRange] | None,
        Field(description="Array of cell ranges to read (default: all cells)"),
    ] = None,
) -> CellItems:
    """Read multiple cells by specifying ranges.

    Indexes are 0-based and `end` is excluded; a range without `end` is the one cell at
    `start`; cells past the end are left out. Code cells also give their outputs as text.
    Example: ranges=[{"start": 0, "end": 3}].
    """
    snap = await ws.notebooks.read(lab_path(path), caller)
    nb = snap.notebook
    indexes: list[int] = []
    for r in ranges if ranges is not None else [CellRange(start=0, end=len(nb.cells))]:
        end = min(r.start + 1 if r.end is None else r.end, len(nb.cells))
        if r.start >= end:
            continue  # nothing there (past the end, an empty notebook): no cells, as the original
        ref = range_ref(CellRange(start=r.start, end=end))
        indexes += [i for i in address.resolve(nb.ids, ref) if i not in indexes]
    budget = render.Budget(ws.settings.output_budget, ws.settings.output_budget)
    rendered = render.render_many([nb.cells[i] for i in indexes], budget)
    cells = []
    for i, outputs in zip(indexes, rendered, strict=True):
        cell = nb.cells[i]
        item = CellItem(
            index=i, id=cell["id"], content=str(cell.get("source", "")), type=cell["cell_type"]
        )
        if cell["cell_type"] == "code":  # both always there, as the original gives them
            item.execution_count = cell.get("execution_count")
            raw = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
            item.outputs = [nbformat_output(raw[v["output"]], v) for v in outputs]
        cells.append(item)
    return CellItems(cells=cells)


async def modify_nb_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    modifications: Annotated[
        list[CellModification], Field(description="Array of cell modifications")
    ],
    ctx: Context,
    exec: Exec = True,
) -> Annotated[CallToolResult, Done]:
    """Modify multiple cells by specifying ranges, with optional execution.

    Every cell in a range gets the content. Indexes are 0-based, `end` excluded; a range
    without `end` is the one cell at `start`. All ranges are checked first: out of range,
    nothing changes. Example: modifications=[{"range": {"start": 2, "end": 3}, "content": "x = 1"}].
    """
    rel = lab_path(path)
    outcome = await ws.editing.set_sources(
        rel, caller, [(range_ref(m.range), m.content) for m in modifications]
    )
    execution = await run_cells(ws, caller, rel, list(outcome.plan.touched), ctx) if exec else None
    n = len(modifications)
    message = f"Successfully modified {n} cell ranges"  # the original's words, for any n
    return said(done_running(message, execution, ws, modified_ranges=n))


async def insert_nb_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    position: Annotated[int, Field(description="Position to insert the cells")],
    cells: Annotated[list[CellInsertion], Field(description="Array of cells to insert")],
    ctx: Context,
    exec: Exec = True,
) -> Done:
    """Insert multiple cells at a specified location, with optional execution.

    `position` is the 0-based index the first new cell gets (the cell count appends).
    Example: position=0, cells=[{"type": "markdown", "content": "# Title"}].
    """
    rel = lab_path(path)
    outcome = await ws.editing.insert_cells(
        rel, caller, [CellSpec(c.type, c.content) for c in cells], index=position
    )
    ids = list(outcome.plan.touched)
    execution = await run_cells(ws, caller, rel, ids, ctx) if exec else None
    return done_running(f"Successfully inserted {len(ids)} cells", execution, ws, cell_ids=ids)


async def delete_nb_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ranges: Annotated[list[CellRange], Field(description="Array of cell ranges to delete")],
) -> Annotated[CallToolResult, Done]:
    """Delete multiple cells by specifying ranges.

    Indexes are 0-based, `end` excluded; a range without `end` is the one cell at `start`.
    Example: ranges=[{"start": 3, "end": 5}] deletes cells 3 and 4.
    """
    if not ranges:
        raise InvalidArgument("ranges is empty.", hint='Give ranges like [{"start": 3}].')
    outcome = await ws.editing.delete_cells(lab_path(path), caller, [range_ref(r) for r in ranges])
    n = len(outcome.plan.touched)
    return said(Done(message=f"Successfully deleted {n} cells", deleted=n))


async def restart_nb_kernel(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ctx: Context,
    clear_contents: Annotated[
        bool, Field(description="Whether to clear cell contents after restart")
    ] = False,
    exec: Annotated[bool, Field(description="Whether to execute cells after restart")] = True,
) -> Done:
    """Restart the kernel of a specified notebook, with options to clear contents and execute cells.

    clear_contents clears the cells' outputs (their source is kept); exec then runs every
    code cell from the top.
    """
    rel = lab_path(path)
    await ws.kernels.restart_kernel(rel, caller)
    if clear_contents:
        await ws.editing.clear_outputs(rel, caller)
    execution = await run_cells(ws, caller, rel, None, ctx) if exec else None
    message = "Kernel restarted successfully"
    if clear_contents:
        message += ", outputs cleared"
    return done_running(message, execution, ws, cleared=clear_contents)
