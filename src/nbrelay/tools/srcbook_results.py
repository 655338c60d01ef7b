"""Profile ``srcbook``: the results the tools return and the events ``cell_execute`` sends."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel

from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import render
from nbrelay.notebook.text import clean_text
from nbrelay.tools.results import VisualData


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


def error_message(out: dict[str, Any]) -> str:
    """An error output's message, never empty (``throw new Error()`` has no text of its own)."""
    value = render.strip_ansi(str(out.get("evalue") or "")).strip()
    return value or f"{out.get('ename') or 'Error'} (raised without a message)"


def failure(job: Job, cell: CellRun) -> str:
    """What went wrong in a cell that did not end ``ok``, in words (for ``notebook.error``)."""
    for out in job.cell_outputs(cell):
        if out.get("output_type") == "error":
            return f"{out.get('ename') or 'Error'}: {error_message(out)}"
    return cell.message or f"the cell ended with status {cell.status}"


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
