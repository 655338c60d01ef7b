"""jupyter-mcp-server's cell tools: read, insert, overwrite, edit, delete, move, clear outputs,
and running cells and code. Each acts on the notebook named by ``notebook_name``, else on the
current one; cells are addressed by 0-based index or by id (the id wins)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import NotebookInvalid
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import render
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Cell
from nbrelay.tools.jupyter_mcp_server import views
from nbrelay.tools.jupyter_mcp_server.state import InUse, cell_index, cell_indices
from nbrelay.tools.runs import follow, image_content

NotebookName = Annotated[
    str | None,
    Field(
        description="A notebook in use, by name, instead of the current one (safer when several clients share this server)."
    ),
]
CellId = Annotated[
    str | None,
    Field(
        description="The cell's id instead of its index (ids do not shift); given both, the id wins."
    ),
]
Timeout = Annotated[int, Field(description="Seconds the cell may run (0: the server's default).")]
Stream = Annotated[bool, Field(description="Send progress notifications while the cell runs.")]
ProgressInterval = Annotated[int, Field(description="Seconds between progress notifications.")]


CellIndex = Annotated[
    int | None,
    Field(ge=0, description="The cell's index (0-based). Omit when passing cell_id."),
]


def _shown(state: InUse, outs: list[Any]) -> list[str | ImageContent]:
    """Outputs as the original shows them, within nbrelay's budgets: each text at most
    --output-budget characters and four times that in all (head and tail kept, the notebook keeps
    every output whole), images downscaled past 1568 pixels or 1 MB."""
    limit = state.ws.settings.output_budget
    budget = render.Budget(limit * 4, limit)
    shown: list[str | ImageContent] = []
    texts = [v for v in views.outputs_of(outs) if isinstance(v, str)]
    fitted = iter(budget.take_all(texts, "the whole output is saved in the notebook"))
    for value in views.outputs_of(outs):
        if isinstance(value, str):
            shown.append(next(fitted)[0])
            continue
        try:
            shown.append(image_content(value.mime_type, value.data))
        except NotebookInvalid:
            shown.append("[Image Output (PNG) - Error processing image]")
    return shown


# -- reading and editing ----------------------------------------------------------------------


async def read_cell(
    state: InUse,
    caller: Caller,
    *,
    cell_index: CellIndex = None,
    include_outputs: Annotated[bool, Field(description="Include a code cell's outputs.")] = True,
    notebook_name: NotebookName = None,
    cell_id: CellId = None,
) -> CallToolResult:
    """Read one cell: a header (index, type, execution count), its source, then its outputs as
    text (images as images)."""
    _, snap = await state.read(caller, notebook_name)
    i = _resolve(snap, cell_index, cell_id)
    cells = snap.notebook.cells
    if i >= len(cells):
        return views.outputs(
            "cell.read", [f"Cell index {i} is out of range. Notebook has {len(cells)} cells."]
        )
    cell = cells[i]
    shown: list[str | ImageContent] = [views.header(i, cell), views.readable_source(cell)]
    if cell.get("cell_type") == "code" and include_outputs:
        shown += _shown(state, cell.get("outputs") or [])
    return views.outputs("cell.read", shown, cell_id=cell["id"])


def _resolve(snap: Any, index: int | None, cell_id: str | None) -> int:
    return cell_index(snap, index, cell_id)


async def _source_to_edit(
    state: InUse,
    caller: Caller,
    notebook_name: str | None,
    index: int | None,
    cell_id: str | None,
) -> tuple[str, int, Cell, str]:
    """(path, index, cell, its source) of the cell an edit of a source names; an index past
    the end is refused as the original refuses it."""
    path, snap = await state.peek(caller, notebook_name)
    i = _resolve(snap, index, cell_id)
    if i >= len(snap.notebook.cells):
        raise ToolError(f"Cell index {i} out of range")
    cell = snap.notebook.cells[i]
    return path, i, cell, views.joined(cell.get("source"))


def _ref(index: int, cell_id: str | None) -> int | str:
    """How an edit names its cell: by the id the agent gave, else by its index (which nbrelay
    checks against what the agent last saw there)."""
    return cell_id if cell_id is not None else index


def _around(cells: list[Any], start: int, limit: int) -> str:
    return views.cells_view(cells, "brief", start, limit)


async def insert_cell(
    state: InUse,
    caller: Caller,
    *,
    cell_index: Annotated[
        int, Field(ge=-1, description="Where the new cell goes (0-based); -1 appends.")
    ],
    cell_type: Annotated[
        Literal["code", "markdown", "raw"], Field(description="The new cell's type.")
    ],
    cell_source: Annotated[str, Field(description="The new cell's source.")],
    notebook_name: NotebookName = None,
) -> CallToolResult:
    """Insert a cell (it is not run); returns the cells around it as a table."""
    path, snap = await state.read(caller, notebook_name)
    total = len(snap.notebook.cells)
    if cell_index < -1 or cell_index > total:
        raise ToolError(
            f"Index {cell_index} is outside valid range [-1, {total}]. Use -1 to append at end."
        )
    at = total if cell_index == -1 else cell_index
    done = await state.ws.editing.insert_cells(
        path, caller, [CellSpec(cell_type, cell_source)], index=at
    )
    cells = list(done.after.notebook.cells)
    n = len(cells)
    start = max(0, n - 10) if n - at < 5 else max(0, at - 5)
    text = (
        f"Cell inserted successfully at index {at} ({cell_type})!\n"
        f"Notebook now has {n} cells, showing surrounding cells:\n" + _around(cells, start, 10)
    )
    return views.answer("cell.insert", text, cell_id=done.plan.touched[0])


async def overwrite_cell_source(
    state: InUse,
    caller: Caller,
    *,
    cell_index: CellIndex = None,
    cell_source: Annotated[str, Field(description="The cell's whole new source.")],
    notebook_name: NotebookName = None,
    cell_id: CellId = None,
) -> CallToolResult:
    """Replace a cell's whole source (outputs are kept); returns a unified diff. To change part
    of a source, use edit_cell_source."""
    path, i, cell, old = await _source_to_edit(state, caller, notebook_name, cell_index, cell_id)
    await state.ws.editing.edit_cell(path, caller, _ref(i, cell_id), source=cell_source)
    return views.edited("cell.overwrite", "overwritten", i, old, cell_source, cell["id"])


async def edit_cell_source(
    state: InUse,
    caller: Caller,
    *,
    cell_index: CellIndex = None,
    old_string: Annotated[str, Field(description="Exact text to find in the cell's source.")],
    new_string: Annotated[str, Field(description="Its replacement.")],
    replace_all: Annotated[
        bool, Field(description="Replace every occurrence (default: exactly one must exist).")
    ] = False,
    notebook_name: NotebookName = None,
    cell_id: CellId = None,
) -> CallToolResult:
    """Replace text in one cell's source; returns a unified diff.

    Without replace_all, old_string must occur exactly once.
    """
    path, i, cell, old = await _source_to_edit(state, caller, notebook_name, cell_index, cell_id)
    if not old_string:
        raise ToolError("old_string must not be empty")
    first = old.find(old_string)
    if first == -1:
        raise ToolError("old_string not found in cell source")
    if not replace_all and old.find(old_string, first + 1) != -1:
        raise ToolError(
            "old_string is not unique in cell source (multiple occurrences). "
            "Use replace_all=True to replace all occurrences."
        )
    new = (
        old.replace(old_string, new_string)
        if replace_all
        else old.replace(old_string, new_string, 1)
    )
    # The replacement itself is made inside the workspace's locked edit, on the cell as it is
    # then (a change since the read above is not overwritten).
    await state.ws.editing.edit_cell(
        path, caller, _ref(i, cell_id), find=old_string, replace=new_string, replace_all=replace_all
    )
    return views.edited("cell.edit", "edited", i, old, new, cell["id"])


async def delete_cell(
    state: InUse,
    caller: Caller,
    *,
    cell_indices: Annotated[
        list[int] | None,
        Field(
            min_length=1,
            description="Indices of the cells to delete (0-based). Omit when passing cell_ids_to_delete.",
        ),
    ] = None,
    include_source: Annotated[bool, Field(description="Return the deleted cells' sources.")] = True,
    notebook_name: NotebookName = None,
    cell_ids_to_delete: Annotated[
        list[str] | None,
        Field(
            description="The cells' ids instead of indices; given both, the ids win. Every id is checked before any cell goes."
        ),
    ] = None,
) -> CallToolResult:
    """Delete cells; returns each one's type and (include_source) source."""
    path, snap = await state.peek(caller, notebook_name)
    indices = cell_indices_of(snap, cell_indices, cell_ids_to_delete)
    total = len(snap.notebook.cells)
    if len(set(indices)) != len(indices):
        raise ToolError(f"cell_indices contains duplicate values: {indices}")
    for i in indices:
        if i < 0 or i >= total:
            raise ToolError(f"Cell index {i} is out of range. Notebook has {total} cells.")
    cells = [snap.notebook.cells[i] for i in indices]
    refs = [c["id"] for c in cells] if cell_ids_to_delete else indices
    await state.ws.editing.delete_cells(path, caller, refs)
    lines: list[str] = []
    for i, cell in zip(indices, cells, strict=True):
        lines.append(f"Cell {i} ({cell.get('cell_type')}) deleted successfully.")
        if include_source:
            lines += [f"deleted cell source:\n{views.joined(cell.get('source'))}", "\n---\n"]
    return views.answer("cell.delete", "\n".join(lines))


cell_indices_of = cell_indices


async def move_cell(
    state: InUse,
    caller: Caller,
    *,
    source_index: Annotated[
        int | None,
        Field(ge=0, description="The cell to move (0-based). Omit when passing source_cell_id."),
    ] = None,
    target_index: Annotated[
        int | None,
        Field(ge=0, description="Where it ends up (0-based). Omit when passing target_cell_id."),
    ] = None,
    notebook_name: NotebookName = None,
    source_cell_id: Annotated[str | None, Field(description="The cell to move, by id.")] = None,
    target_cell_id: Annotated[
        str | None, Field(description="Put the cell where this cell is now, by id.")
    ] = None,
) -> CallToolResult:
    """Move a cell to another position; returns the cells around it as a table."""
    path, snap = await state.peek(caller, notebook_name)
    src = _resolve(snap, source_index, source_cell_id)
    dst = _resolve(snap, target_index, target_cell_id)
    total = len(snap.notebook.cells)
    if total == 0:
        raise ToolError("Notebook has no cells.")
    for what, i in (("Source", src), ("Target", dst)):
        if i < 0 or i >= total:
            raise ToolError(
                f"{what} index {i} is out of range. Notebook has {total} cells "
                f"(valid: 0-{total - 1})."
            )
    cell = snap.notebook.cells[src]
    done = await state.ws.editing.move_cells(path, caller, [_ref(src, source_cell_id)], dst)
    cells = list(done.after.notebook.cells)
    text = (
        f"Cell moved successfully from index {src} to {dst} ({cell.get('cell_type')}).\n"
        f"Notebook has {len(cells)} cells, showing surrounding cells:\n"
        + _around(cells, max(0, dst - 3), 7)
    )
    return views.answer("cell.move", text, cell_id=cell["id"])


async def clear_cell_output(
    state: InUse,
    caller: Caller,
    *,
    cell_index: CellIndex = None,
    notebook_name: NotebookName = None,
    cell_id: CellId = None,
) -> CallToolResult:
    """Clear a code cell's outputs and execution count."""
    path, snap = await state.peek(caller, notebook_name)
    i = _resolve(snap, cell_index, cell_id)
    cells = snap.notebook.cells
    if i >= len(cells):
        raise ToolError(f"Cell index {i} is out of range. Notebook has {len(cells)} cells.")
    cell = cells[i]
    if cell.get("cell_type") != "code":
        raise ToolError(f"Cell {i} is not a code cell, cannot clear output.")
    count = len(cell.get("outputs") or [])
    if count == 0:
        return views.answer(
            "cell.clear_output", f"Cell {i} had no output to clear.", cell_id=cell["id"]
        )
    await state.ws.editing.clear_outputs(path, caller, [_ref(i, cell_id)])
    return views.answer(
        "cell.clear_output",
        f"Cell {i} output cleared successfully ({count} output(s) removed).",
        cell_id=cell["id"],
    )


# -- running ----------------------------------------------------------------------------------


async def _run(state: InUse, job: Job, ctx: Context | None) -> None:
    patience = state.ws.runs.timeout_for(job.timeout) + state.ws.settings.interrupt_grace + 10
    await follow(state.ws, job, patience, ctx)


def _limit(timeout: int) -> float | None:
    return float(timeout) if timeout > 0 else None


async def _run_cell(
    state: InUse, caller: Caller, path: str, cell_id: str, seconds: int, ctx: Context | None
) -> list[str | ImageContent]:
    """Run one cell to its end: its outputs, then how the run ended."""
    job = await state.ws.runs.execute(path, caller, [cell_id], time_limit=_limit(seconds))
    await _run(state, job, ctx)
    run = job.cells[0]
    shown = _shown(state, job.cell_outputs(run))
    if run.status == "timeout":
        limit = seconds or int(state.ws.runs.timeout_for(None))
        shown.append(
            f"[TIMEOUT ERROR: Cell execution exceeded {limit} seconds and was interrupted]"
        )
    elif run.status in ("ok", "error"):
        shown.append(f"[COMPLETED in {run.seconds:.1f}s]")
    else:
        shown.append(f"[ERROR: {run.message or run.status}]")
    return shown


async def execute_cell(
    state: InUse,
    caller: Caller,
    *,
    ctx: Context,
    cell_index: CellIndex = None,
    timeout: Timeout = 0,  # noqa: ASYNC109 - the cell's time limit, not this call's
    stream: Stream = True,
    progress_interval: ProgressInterval = 5,
    cell_id: CellId = None,
) -> CallToolResult:
    """Run a cell of the current notebook and wait for it; returns its outputs (text, images
    as images), then how long it took. Outputs are saved in the notebook."""
    path, snap = await state.read(caller, None)
    # As in the original, an execution attaches the notebook's kernel before anything is checked.
    await state.ws.notebook_sessions.begin_session(path, caller)
    i = _resolve(snap, cell_index, cell_id)
    n = len(snap.notebook.cells)
    if i >= n:
        raise ToolError(f"Cell index {i} out of range (notebook has {n} cells)")
    cid = snap.notebook.cells[i]["id"]
    shown = await _run_cell(state, caller, path, cid, timeout, ctx)
    if not stream:
        shown = shown[:-1] or ["[No output generated]"]
    return views.outputs("cell.execute", shown, cell_id=cid)


async def insert_execute_code_cell(
    state: InUse,
    caller: Caller,
    *,
    ctx: Context,
    cell_index: Annotated[
        int, Field(ge=-1, description="Where the new cell goes (0-based); -1 appends.")
    ],
    cell_source: Annotated[str, Field(description="The new code cell's source.")],
    timeout: Timeout = 0,  # noqa: ASYNC109 - the cell's time limit, not this call's
    stream: Stream = True,
    progress_interval: ProgressInterval = 5,
) -> CallToolResult:
    """Insert a code cell into the current notebook and run it; returns its outputs."""
    path, snap = await state.read(caller, None)
    total = len(snap.notebook.cells)
    if cell_index < -1 or cell_index > total:
        raise ToolError(
            f"Index {cell_index} is outside valid range [-1, {total}]. Use -1 to append at end."
        )
    at = total if cell_index == -1 else cell_index
    done = await state.ws.editing.insert_cells(
        path, caller, [CellSpec("code", cell_source)], index=at
    )
    cid = done.plan.touched[0]
    shown = await _run_cell(state, caller, path, cid, timeout, ctx)
    if not stream:
        shown = shown[:-1] or ["[No output generated]"]
    return views.outputs("cell.insert_execute", shown, cell_id=cid)


async def execute_code(
    state: InUse,
    caller: Caller,
    *,
    ctx: Context,
    code: Annotated[str, Field(description="Code to run; %magics and !shell lines work.")],
    timeout: Annotated[  # noqa: ASYNC109 - the code's time limit, not this call's
        int, Field(description="Seconds it may run (0: the server's default).")
    ] = 30,
    kernel_id: Annotated[
        str | None,
        Field(
            description="Run in the kernel with this id (from list_kernels) instead of the current notebook's."
        ),
    ] = None,
    progress_interval: ProgressInterval = 5,
) -> CallToolResult:
    """Run scratch code in the current notebook's kernel without adding a cell; returns its
    outputs. Use it to inspect variables or try code; use insert_execute_code_cell to keep it."""
    if kernel_id is not None:
        running, _ = await state.ws.kernels.list_kernels(caller)
        found = next((k for k in running if k.kernel_id == kernel_id), None)
        if found is None:
            return views.outputs(
                "code.execute",
                [
                    f"[ERROR: Kernel '{kernel_id}' not found in jupyter server, please check "
                    "whether the kernel already exists using 'list_kernels' tool.]"
                ],
            )
        path = found.key
    else:
        path = state.path_of(None)
    # As in the original, scratch code counts in the kernel's history ([n]).
    job = await state.ws.runs.execute(
        path, caller, None, code=code, time_limit=_limit(timeout), history=True
    )
    await _run(state, job, ctx)
    run = job.cells[0]
    shown = _shown(state, job.cell_outputs(run))
    if run.status == "timeout":
        limit = timeout or int(state.ws.runs.timeout_for(None))
        shown.append(
            f"[TIMEOUT ERROR: IPython execution exceeded {limit} seconds and was interrupted]"
        )
    elif run.status not in ("ok", "error"):
        shown.append(f"[ERROR: {run.message or run.status}]")
    return views.outputs("code.execute", shown)
