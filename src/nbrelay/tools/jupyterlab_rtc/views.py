"""jupyterlab-rtc's parameters, results and error words, and the helpers its tools share."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from nbrelay.caller import Caller
from nbrelay.errors import NbrelayError, Vocabulary
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import address
from nbrelay.stores.base import Document, Snapshot
from nbrelay.tools._boundary import compact_json
from nbrelay.tools.results import ExecutionResult, iso
from nbrelay.tools.runs import execution_view, follow, saved_then_run
from nbrelay.workspace import NotebookSession, Workspace

NbPath = Annotated[str, Field(description="Path to the notebook file")]
DocPath = Annotated[str, Field(description="Path to the document")]
Exec = Annotated[bool, Field(description="Whether to execute the cells")]
MAX_CONTENT = 65536  # bytes of a document's content that get_document_info returns


class CellRange(BaseModel):
    start: Annotated[int, Field(description="Starting cell index")]
    end: Annotated[int | None, Field(description="Ending cell index (exclusive)")] = None


class CellModification(BaseModel):
    range: Annotated[CellRange, Field(description="Cell range to modify")]
    content: Annotated[str, Field(description="New content for the cells")]


class CellInsertion(BaseModel):
    type: Annotated[Literal["code", "markdown"], Field(description="Cell type")] = "code"
    content: Annotated[str, Field(description="Cell content")]


class SessionResult(BaseModel):
    path: str
    session_id: str | None = None
    file_id: str | None = None
    status: str
    message: str
    kernel: dict[str, Any] | None = None


class SessionView(BaseModel):
    path: str
    session_id: str
    file_id: str
    status: str
    cell_count: int | None = None
    last_activity: str | None = None
    message: str


class SessionsResult(BaseModel):
    root_path: str
    sessions: list[SessionView]
    total_sessions: int
    active_sessions: int


class NotebookItem(BaseModel):
    path: str
    name: str
    last_modified: str


class NotebookItems(BaseModel):
    notebooks: list[NotebookItem]


class NotebookStat(BaseModel):
    path: str
    cell_count: int
    last_modified: str
    kernel: dict[str, Any]


class CellItem(BaseModel):
    index: int
    id: str
    content: str
    type: str
    execution_count: int | None = None
    outputs: list[dict[str, Any]] | None = None

    @model_serializer(mode="wrap")
    def _code_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A code cell always has ``execution_count`` (null when never run) and ``outputs``, as
        the original gives them, though results leave null fields out."""
        data: dict[str, Any] = handler(self)
        if self.type == "code":
            data.setdefault("execution_count", None)
            data.setdefault("outputs", [])
        return data


class CellItems(BaseModel):
    cells: list[CellItem]


class Done(BaseModel):
    """A success message with the counts the original reports."""

    message: str
    path: str | None = None
    modified_ranges: int | None = None
    deleted: int | None = None
    cell_ids: list[str] | None = None
    executed: bool | None = None
    cleared: bool | None = None
    execution: ExecutionResult | None = None


class Exists(BaseModel):
    exists: bool


def lab_path(path: str | None) -> str:
    """A JupyterLab path: relative to the root, where a leading ``/`` also means the root."""
    return (path or "").lstrip("/")


def as_given(given: str | None, rel: str) -> str:
    """A path in the caller's style: ``/example/nb.ipynb`` for a caller who wrote a leading
    ``/``, ``example/nb.ipynb`` otherwise (a folder of ``""`` is the root, ``/``)."""
    if (given or "").startswith("/"):
        return "/" + rel
    return rel


def range_ref(r: CellRange) -> address.CellRef:
    """A seed range as an address: ``end`` excluded; without ``end``, the one cell at ``start``
    (as the original: ``end = start + 1``)."""
    return f"{r.start}:{r.start + 1}" if r.end is None else f"{r.start}:{r.end}"


def doc_view(doc: Document, given: str | None = None) -> dict[str, Any]:
    return {
        "name": doc.name,
        "path": as_given(given, doc.path),
        "type": doc.type,
        "created": iso(doc.created),
        "last_modified": iso(doc.modified),
        "size": doc.size,
        "writable": doc.writable,
    }


def json_reply(value: Any) -> CallToolResult:
    """A plain JSON result: the JSON as text; structured content is the object itself, or
    ``{"result": ...}`` for anything else (a list), as structured content must be an object."""
    structured = value if isinstance(value, dict) else {"result": value}
    return CallToolResult(
        content=[TextContent(text=compact_json(value))], structured_content=structured
    )


def kernel_view(ws: Workspace, snap: Snapshot) -> dict[str, Any]:
    info = ws.kernels.kernel_info(snap.path)
    if info is None:  # as the original says it before a kernel runs
        return {"name": "none", "id": "", "state": "not running"}
    return {"name": info.name, "id": info.kernel_id, "state": info.state}


async def run_cells(
    ws: Workspace, caller: Caller, path: str, ids: list[str] | None, ctx: Context | None
) -> ExecutionResult | None:
    """Run the code cells among ``ids`` (None: all) to the end; None if there is none to run."""
    snap = await ws.notebooks.read(path, caller)
    code = [
        c["id"]
        for c in snap.notebook.cells
        if c.get("cell_type") == "code" and (ids is None or c["id"] in ids)
    ]
    if not code or ws.settings.no_execute:
        return None
    with saved_then_run():
        job: Job = await ws.runs.execute(path, caller, code)
    patience = (ws.runs.timeout_for(None) + ws.settings.interrupt_grace + 10) * len(code)
    await follow(ws, job, patience, ctx)
    view = execution_view(ws, job)
    return view if isinstance(view, ExecutionResult) else view[0]


def done_running(
    message: str, execution: ExecutionResult | None, ws: Workspace, **counts: Any
) -> Done:
    """What a tool that runs the cells it changed (``execution``, None when it ran none) says:
    ``message`` (the original's words: "… and executed them"), then the run."""
    if execution is not None:
        message += f" and executed them ({execution.status})"
    elif ws.settings.no_execute:
        message += " (not executed: this server runs no code)"
    return Done(
        message=message,
        executed=True if execution is not None else None,
        execution=execution,
        **counts,
    )


def said(done: Done) -> CallToolResult:
    """A result the original gives as a plain success message: the message as text (then the
    run, when cells ran, as JSON text); the whole result as structured content."""
    data = done.model_dump(mode="json", exclude_none=True)
    blocks = [TextContent(text=done.message)]
    if done.execution is not None:
        blocks.append(TextContent(text=compact_json(data["execution"])))
    return CallToolResult(content=list(blocks), structured_content=data)


def nbformat_output(out: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """An output as the original gives it (the notebook's own output: ``output_type``, a
    stream's ``name`` and ``text``, rich data under ``data``), its text the readable, budgeted
    ``view`` of it (``render``); ``cut``/``omitted`` say what the budget left out."""
    kind = str(out.get("output_type", ""))
    text = str(view.get("text", ""))
    item: dict[str, Any]
    if kind == "stream":
        item = {"name": view.get("name", "stdout"), "output_type": kind, "text": text}
    elif kind == "error":
        item = {
            "ename": out.get("ename", ""),
            "evalue": out.get("evalue", ""),
            "output_type": kind,
            "traceback": text.splitlines(),
        }
    else:
        item = {"data": {"text/plain": text}, "metadata": {}, "output_type": kind}
        if kind == "execute_result":
            item["execution_count"] = out.get("execution_count")
    item.update({k: view[k] for k in ("cut", "omitted") if k in view})
    return item


def plural(n: int, noun: str) -> str:
    """``1 cell``, ``2 cells``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


_AGAIN = "Call read_nb_cells to see the notebook as it is now, then retry."
# How errors say things here (see nbrelay.errors): this profile's tools.
WORDS = Vocabulary(
    {
        "index_rule": "Indexes are 0-based; a range's end is excluded.",
        "see_cells": "Call read_nb_cells to see the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "reread_cell": "Read the cell again (read_nb_cells) and redo your edit on its current "
        "source.",
        "missing": "Call list_nbs to see the notebooks, or create_document to make one.",
        "list_all": "list_nbs with no path lists all.",
        "see_paths": "Give a path relative to the root; list_nbs shows what is there.",
        "exists": "Pick another path, or delete_document the old one first.",
        "read_it": "Read it with read_nb_cells.",
        "read_later": "Read it with read_nb_cells in a minute, or create it under another name.",
        "restart": "call restart_nb_kernel",
        "interrupt": "restart it (restart_nb_kernel)",
        "start_kernel": "Run a cell (insert_nb_cells or modify_nb_cells with exec=true) to "
        "start one.",
    }
)


async def session_view(
    ws: Workspace, caller: Caller, s: NotebookSession, given: str | None
) -> SessionView:
    count, activity = None, s.last_activity
    try:
        snap = await ws.notebooks.read(s.path, caller)
        count = len(snap.notebook.cells)
        activity = max(activity, await ws.documents.last_modified(snap, caller) or 0.0)
    except NbrelayError:
        pass
    prefix = "RTC session" if s.live else "Session"
    return SessionView(
        path=as_given(given, s.path),
        session_id=s.session_id,
        file_id=s.file_id,
        status="connected" if s.active else "disconnected",
        cell_count=count,
        last_activity=iso(activity) if activity else None,
        message=f"{prefix} is active" if s.active else f"{prefix} ended",
    )
