"""Profile ``srcbook``: the results the tools return, the events they send, and the values
``cell_visualize`` draws for TypeScript/JavaScript cells."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import address, render
from nbrelay.notebook.jsvalue import js_literal
from nbrelay.notebook.text import clean_text
from nbrelay.stores.base import Snapshot
from nbrelay.timestamps import utc_iso
from nbrelay.tools.results import VisualData
from nbrelay.workspace import Workspace
from nbrelay.workspace.srcbook_sessions import Sessions, session_meta


class SessionView(BaseModel):
    session_id: str
    name: str
    language: str
    status: Literal["active", "suspended"]
    cell_count: int
    path: str
    kernel: str | None = None
    description: str | None = None
    tsconfig: dict[str, Any] | None = None
    created_at: str | None = None
    last_activity: str | None = None
    note: str | None = None


class Deleted(BaseModel):
    session_id: str
    deleted: bool


class CellPlace(BaseModel):
    cell_id: str
    position: int


class CellDeleted(BaseModel):
    cell_id: str
    deleted: bool


class RunError(BaseModel):
    name: str
    message: str
    traceback: str | None = None


class CellResult(BaseModel):
    cell_id: str
    position: int
    status: str
    stdout: str
    stderr: str
    result: str | None = None
    display: list[str] | None = None
    error: RunError | None = None
    execution_count: int | None = None
    execution_time_ms: int


class ExecuteResult(BaseModel):
    session_id: str
    cell_id: str
    status: str
    stdout: str
    stderr: str
    result: str | None = None
    display: list[str] | None = None
    error: RunError | None = None
    execution_count: int | None = None
    execution_time_ms: int
    cells: list[CellResult] | None = None
    note: str | None = None


class VisualResult(VisualData):
    session_id: str
    cell_id: str


# -- execution results ---------------------------------------------------------------------


SILENT_ERROR = (
    "the kernel reported an error without an error output, a name or a message (Deno's kernel "
    "does so for a cell it cannot run at all, such as one that starts with a %% cell magic)"
)


def error_message(out: dict[str, Any]) -> str:
    """An error output's message, never empty (``throw new Error()`` has no text of its own)."""
    value = render.strip_ansi(str(out.get("evalue") or "")).strip()
    return value or f"{out.get('ename') or 'Error'} (raised without a message)"


def failure(job: Job, cell: CellRun) -> str:
    """What went wrong in a cell that did not end ``ok``, in words (for ``notebook.error``)."""
    for out in job.cell_outputs(cell):
        if out.get("output_type") == "error":
            return f"{out.get('ename') or 'Error'}: {error_message(out)}"
    if cell.message:
        return cell.message
    return (
        f"Error: {SILENT_ERROR}"
        if cell.status == "error"
        else f"the cell ended with status {cell.status}"
    )


def cell_result(job: Job, cell: CellRun, budget: render.Budget) -> CellResult:
    outputs = job.cell_outputs(cell)
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    result: str | None = None
    display: list[str] = []
    error: RunError | None = None
    for out in outputs:
        shown = render.output_text(out)
        kind = out.get("output_type")
        if kind == "stream":
            streams["stderr" if out.get("name") == "stderr" else "stdout"].append(shown.text)
        elif kind == "execute_result":
            result = budget.take(shown.text, "the rest is in the notebook")[0]
        elif kind == "error":
            text = budget.take(shown.text, "the rest is in the notebook")[0]
            error = RunError(
                name=str(out.get("ename") or "Error"),
                message=error_message(out),
                traceback=text or None,
            )
        else:
            display.append(budget.take(shown.text, "the rest is in the notebook")[0])
    status = str(cell.status)
    if status == "died" and cell.message.startswith("timed out"):
        status = "timeout"  # the cause; a kernel that dies of the interrupt (Deno) says so below
    if status in ("timeout", "died", "cancelled", "interrupted") and error is None:
        names = {
            "timeout": "TimeoutError",
            "died": "KernelDied",
            "cancelled": "Cancelled",
            "interrupted": "Interrupted",
        }
        error = RunError(name=names[status], message=cell.message or status)
    elif status == "error" and error is None:
        error = RunError(name="Error", message=cell.message or SILENT_ERROR)
    return CellResult(
        cell_id=cell.id or "",
        position=cell.index,
        status=status,
        stdout=budget.take("".join(streams["stdout"]), "the rest is in the notebook")[0],
        stderr=budget.take("".join(streams["stderr"]), "the rest is in the notebook")[0],
        result=result,
        display=display or None,
        error=error,
        execution_count=cell.execution_count,
        execution_time_ms=round(cell.seconds * 1000),
    )


class Events:
    """Srcbook's events: kept in the session's event log (``record``) and, during a tool call,
    sent as progress notifications (message = the event as JSON)."""

    def __init__(
        self,
        ctx: Context | None,
        session_id: str,
        record: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.session_id = session_id
        self.record = record
        self.sent = 0
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self.printed: dict[str, int] = {}

    async def emit(self, event: str, **data: Any) -> None:
        payload = {"event": event, "session_id": self.session_id, **data}
        if self.record is not None:
            await self.record(payload)
        if self.ctx is None:
            return
        self.sent += 1
        message = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        await self.ctx.report_progress(self.sent, None, clean_text(message))

    async def follow(self, job: Job) -> None:
        for cell in job.cells:
            if cell.status == "queued" or cell.id is None:
                continue
            if cell.id not in self.started:
                self.started.add(cell.id)
                await self.emit("notebook.cell.executing", cell_id=cell.id)
            text = "".join(render.output_text(o).text for o in job.cell_outputs(cell))
            seen = self.printed.get(cell.id, 0)
            if len(text) > seen:
                self.printed[cell.id] = len(text)
                await self.emit("notebook.cell.output", cell_id=cell.id, text=text[seen:][-2000:])
            if cell.status not in ("running", "queued") and cell.id not in self.finished:
                self.finished.add(cell.id)
                if cell.status != "ok":
                    await self.emit(
                        "notebook.error",
                        cell_id=cell.id,
                        status=cell.status,
                        message=failure(job, cell),
                    )
                await self.emit(
                    "notebook.cell.completed",
                    cell_id=cell.id,
                    status=cell.status,
                    execution_count=cell.execution_count,
                )


# -- sessions, refusals and values ----------------------------------------------------------


def view(
    sessions: Sessions, session_id: str, snap: Snapshot, note: str | None = None
) -> SessionView:
    """The session as the tools return it."""
    meta = session_meta(snap.notebook) or {}
    kernel = sessions.ws.kernels.kernel_info(snap.path)
    last = max(sessions.used.get(session_id, 0.0), kernel.last_activity if kernel else 0.0)
    tsconfig = meta.get("tsconfig")
    return SessionView(
        session_id=session_id,
        name=str(meta.get("name") or session_id),
        language=sessions.language(snap),
        status="active" if sessions.active(session_id, snap.path) else "suspended",
        cell_count=len(snap.notebook.cells),
        path=snap.path,
        kernel=snap.notebook.kernel_name,
        description=meta.get("description") or None,
        tsconfig=tsconfig if isinstance(tsconfig, dict) else None,
        created_at=meta.get("created") or None,
        last_activity=utc_iso(last) if last else None,
        note=note,
    )


async def javascript_refusal(
    sessions: Sessions, caller: Caller, events: Events, snap: Snapshot, cell_id: str
) -> ExecuteResult | None:
    """In a JavaScript session, the result for cells that are not JavaScript (Deno would run
    them as TypeScript): each cell to run is parsed as JavaScript first, and the first that
    fails is reported as a SyntaxError without running anything. None if all parse."""
    nb = snap.notebook
    indexes = range(len(nb.cells)) if cell_id == "all" else [address.resolve_one(nb.ids, cell_id)]
    for i in indexes:
        cell = nb.cells[i]
        if cell.get("cell_type") != "code":
            continue
        problem = await sessions.javascript_error(snap.path, caller, str(cell.get("source", "")))
        if problem is None:
            continue
        error = RunError(name="SyntaxError", message=problem)
        await events.emit("notebook.error", cell_id=cell["id"], status="error", message=problem)
        await events.emit("notebook.cell.completed", cell_id=cell["id"], status="error")
        one = CellResult(
            cell_id=cell["id"],
            position=i,
            status="error",
            stdout="",
            stderr="",
            error=error,
            execution_time_ms=0,
        )
        return ExecuteResult(
            session_id=events.session_id,
            cell_id=cell_id if cell_id == "all" else cell["id"],
            status="error",
            stdout="",
            stderr="",
            error=error,
            execution_time_ms=0,
            cells=[one] if cell_id == "all" else None,
            note=f"this is a JavaScript session: cell {cell['id']!r} is not JavaScript (type "
            "annotations and other TypeScript syntax are errors here), so nothing ran",
        )
    return None


async def script_value(
    ws: Workspace, caller: Caller, path: str, cell: dict[str, Any], options: dict[str, Any] | None
) -> Any:
    """The data a TypeScript/JavaScript cell shows: ``options.expression`` evaluated in the
    session's kernel, or the cell's result as Deno displayed it (read as data, never run)."""
    expression = (options or {}).get("expression")
    if isinstance(expression, str) and expression.strip():
        return await ws.inspect.evaluate_json(path, caller, expression)
    for out in cell.get("outputs") or []:
        if isinstance(out, dict) and out.get("output_type") == "execute_result":
            text = render.output_text(out).text
            try:
                return js_literal(text)
            except ValueError as exc:
                raise InvalidArgument(
                    f"the result of cell {cell['id']!r} is not plain data ({exc}).",
                    hint='Pass options={"expression": "name"} naming the data to show.',
                ) from exc
    raise InvalidArgument(
        f"cell {cell['id']!r} has no result to visualise: it has not run, or its last line is "
        "not an expression.",
        hint='Run it with cell_execute, end it with the value, or pass options={"expression": '
        '"name"}.',
    )
