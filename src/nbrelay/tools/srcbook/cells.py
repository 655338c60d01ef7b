"""Srcbook's cell operations: add, run, update, delete and visualize a session's cells."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp_types import ImageContent
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.notebook import address, render
from nbrelay.notebook.edits import CellSpec
from nbrelay.tools.srcbook.context import DEFAULT_TIMEOUT_MS, Served
from nbrelay.tools.srcbook.views import (
    CellDeleted,
    CellPlace,
    Events,
    ExecuteResult,
    VisualResult,
    cell_result,
    javascript_refusal,
    script_value,
)


def _timeout_schema(schema: dict[str, Any]) -> None:
    """Publish ``timeout`` as the document does: an integer defaulting to 30000 (ms). Leaving
    it out lets a configured execution timeout apply instead."""
    schema.pop("anyOf", None)
    schema.update(type="integer", default=DEFAULT_TIMEOUT_MS)


async def cell_add(
    sb: Served,
    caller: Caller,
    ctx: Context,
    session_id: str,
    content: Annotated[str, Field(description="Cell content (code or markdown)")],
    type: Literal["code", "markdown"] = "code",
    position: Annotated[int | None, Field(description="Insert position (default: end)")] = None,
) -> CellPlace:
    """Adds a new cell to the notebook.

    Returns: Cell ID and position (0-based; position -1 or none appends).
    """
    snap = await sb.sessions.open(session_id, caller)
    outcome = await sb.ws.editing.insert_cells(
        snap.path, caller, [CellSpec(type, content)], index=position
    )
    new_id = outcome.plan.touched[0]
    await sb.changed(ctx, session_id)
    return CellPlace(cell_id=new_id, position=outcome.after.notebook.ids.index(new_id))


async def cell_execute(
    sb: Served,
    caller: Caller,
    ctx: Context,
    session_id: str,
    cell_id: Annotated[str, Field(description="Specific cell ID or 'all' for all cells")],
    timeout: Annotated[  # noqa: ASYNC109 - the cells' time limit, not this call's
        int | None,
        Field(
            description="Execution timeout in milliseconds",
            json_schema_extra=_timeout_schema,
        ),
    ] = None,
) -> ExecuteResult:
    """Executes a code cell and returns results.

    Returns: Execution results with stdout, stderr, and return values. cell_id "all" runs
    every code cell in order and stops at the first that fails; the timeout is per cell.
    """
    snap = await sb.sessions.open(session_id, caller)
    limit_ms = sb.default_timeout_ms() if timeout is None else timeout
    if limit_ms <= 0:
        raise InvalidArgument("timeout must be more than 0 milliseconds.")
    seconds = limit_ms / 1000
    run_all = cell_id == "all"
    if run_all and not any(c.get("cell_type") == "code" for c in snap.notebook.cells):
        return ExecuteResult(
            session_id=session_id,
            cell_id=cell_id,
            status="ok",
            stdout="",
            stderr="",
            execution_time_ms=0,
            cells=[],
            note="the notebook has no code cells",
        )
    events = Events(ctx, session_id, sb.sessions.record)
    notes: list[str] = []
    # A kernel about to start gets the tsconfig's JSX options and, unless every cell runs
    # anyway, the variables of the session's earlier cells (persistSessions).
    notes += await sb.sessions.start_kernel(snap.path, caller, snap, seconds, replay=not run_all)
    if sb.sessions.language(snap) == "javascript":
        refused = await javascript_refusal(sb.sessions, caller, events, snap, cell_id)
        if refused is not None:
            return refused
    job = await sb.ws.runs.execute(
        snap.path, caller, None if run_all else [cell_id], time_limit=seconds, stop_on_error=True
    )
    wait = seconds * len(job.cells) + sb.settings.interrupt_grace + 60
    try:
        await sb.ws.runs.wait_job(job, wait, events.follow, interval=1.0)
    except anyio.get_cancelled_exc_class():
        job.stop.set()
        raise
    if not job.done.is_set():
        await sb.ws.runs.cancel_job(job)
    await events.follow(job)
    await events.emit("notebook.state.changed")
    budget = render.Budget(sb.settings.output_budget, sb.settings.output_budget)
    ran = budget.share(
        lambda b: [cell_result(job, c, b) for c in job.cells if c.status != "queued"]
    )
    ran = [r for r in ran if r.status != "skipped"]
    first_error = next((r.error for r in ran if r.error is not None), None)
    status = next((r.status for r in ran if r.status != "ok"), "ok")
    last = ran[-1] if ran else None
    notes += job.notes
    if job.state_lost:
        notes.append("the kernel restarted, so its variables were lost")
    return ExecuteResult(
        session_id=session_id,
        cell_id=cell_id if run_all or last is None else last.cell_id,
        status=status,
        stdout="".join(r.stdout for r in ran),
        stderr="".join(r.stderr for r in ran),
        result=last.result if last else None,
        display=[d for r in ran for d in r.display or []] or None,
        error=first_error,
        execution_count=None if run_all or last is None else last.execution_count,
        execution_time_ms=round(job.elapsed * 1000),
        cells=ran if run_all else None,
        note="; ".join(notes) or None,
    )


async def cell_update(
    sb: Served,
    caller: Caller,
    ctx: Context,
    session_id: str,
    cell_id: str,
    content: Annotated[str, Field(description="New cell content")],
) -> CellPlace:
    """Updates an existing cell's content."""
    snap = await sb.sessions.open(session_id, caller)
    outcome = await sb.ws.editing.edit_cell(snap.path, caller, cell_id, source=content)
    changed_id = outcome.plan.touched[0]
    await sb.changed(ctx, session_id)
    return CellPlace(cell_id=changed_id, position=outcome.after.notebook.ids.index(changed_id))


async def cell_delete(
    sb: Served, caller: Caller, ctx: Context, session_id: str, cell_id: str
) -> CellDeleted:
    """Removes a cell from the notebook."""
    snap = await sb.sessions.open(session_id, caller)
    outcome = await sb.ws.editing.delete_cells(snap.path, caller, [cell_id])
    await sb.changed(ctx, session_id)
    return CellDeleted(cell_id=outcome.plan.touched[0], deleted=True)


async def cell_visualize(
    sb: Served,
    caller: Caller,
    session_id: str,
    cell_id: str,
    type: Literal["chart", "table", "graph", "auto"] = "auto",
    options: Annotated[
        dict[str, Any] | None, Field(description="Visualization-specific options")
    ] = None,
) -> Any:
    """Generates visualizations from cell data.

    Returns: Visualization as base64 image or structured data. options: x, y, chart (line,
    bar, scatter, hist, pie), title, max_rows, expression (a value to show instead of the
    cell's result).
    """
    snap = await sb.sessions.open(session_id, caller)
    nb = snap.notebook
    cell = nb.cells[address.resolve_one(nb.ids, cell_id)]
    if (nb.language or "").lower() == "python":
        done = await sb.ws.inspect.visualize_cell(
            snap.path, caller, cell["id"], kind=type, options=options
        )
    else:
        value = await script_value(sb.ws, caller, snap.path, cell, options)
        done = await sb.ws.inspect.visualize_value(value, kind=type, options=options)
    for key in ("path", "cell"):
        done.pop(key, None)
    png = done.pop("png", None)
    result = VisualResult(session_id=session_id, cell_id=str(cell["id"]), **done)
    if png is None:
        return result
    result.rows = None  # the picture shows them
    return result, ImageContent(type="image", data=png, mime_type="image/png")
