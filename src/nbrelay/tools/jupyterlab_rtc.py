"""Profile ``jupyterlab-rtc``: the tool set of the JupyterLab RTC MCP server, exactly.

Sessions, range-based cell tools (0-based, ``end`` excluded, ``exec`` on by default) and document
tools over any file under the root. Paths are relative to the root, as in JupyterLab; a leading
``/`` (``/work/a.ipynb``) also means the root. Errors are MCP tool errors, as in the original.
"""

from __future__ import annotations

import base64
import json
import posixpath
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from nbrelay.errors import InvalidArgument, NbrelayError, Vocabulary
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import address, render
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import parse
from nbrelay.stores.base import Document, Snapshot
from nbrelay.tools._boundary import Kind, Registrar, compact_json
from nbrelay.tools.execution import execution_view, follow, saved_then_run
from nbrelay.tools.results import ExecutionResult, iso
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
    """A seed range as an address: ``end`` excluded; without ``end``, to the notebook's end."""
    return f"{r.start}:" if r.end is None else f"{r.start}:{r.end}"


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
    info = ws.kernel_info(snap.path)
    if info is None:
        return {"name": snap.notebook.kernel_name or "python3", "state": "not started"}
    return {"name": info.name, "id": info.kernel_id, "state": info.state}


async def run_cells(
    ws: Workspace, path: str, ids: list[str] | None, ctx: Context | None
) -> ExecutionResult | None:
    """Run the code cells among ``ids`` (None: all) to the end; None if there is none to run."""
    snap = await ws.read(path)
    code = [
        c["id"]
        for c in snap.notebook.cells
        if c.get("cell_type") == "code" and (ids is None or c["id"] in ids)
    ]
    if not code or ws.settings.no_execute:
        return None
    with saved_then_run():
        job: Job = await ws.execute(path, code)
    patience = (ws.timeout_for(None) + ws.settings.interrupt_grace + 10) * len(code)
    await follow(ws, job, patience, ctx)
    view = execution_view(ws, job)
    return view if isinstance(view, ExecutionResult) else view[0]


def ran(execution: ExecutionResult | None, ws: Workspace) -> str:
    if execution is not None:
        return f" and executed the code cells ({execution.status})"
    return " (not executed: this server runs no code)" if ws.settings.no_execute else ""


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


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the jupyterlab-rtc tools."""
    reg.words = WORDS
    # modify/insert run code by default (exec=true), so they are announced as tools that run
    # code, unless this server runs none (then exec is ignored and they only edit).
    runs: Kind = "write" if ws.settings.no_execute else "execute"

    # -- RTC session management ---------------------------------------------------------

    @reg.tool(kind="write")
    async def begin_nb_session(path: NbPath) -> SessionResult:
        """Begin a real-time collaboration session for a notebook.

        Live mode joins the notebook's collaboration room (a person in JupyterLab sees the
        agent's edits as they happen); file mode opens the notebook and starts its kernel.
        """
        if ws.settings.no_execute:
            snap = await ws.read(lab_path(path))
            return SessionResult(
                path=as_given(path, snap.path),
                status="connected",
                message="Notebook opened (this server runs no code, so no kernel was started)",
            )
        session = await ws.begin_session(lab_path(path))
        snap = await ws.read(session.path)
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

    @reg.tool(kind="write")
    async def end_nb_session(path: NbPath) -> SessionResult:
        """End a real-time collaboration session for a notebook.

        Live mode leaves the room (the kernel keeps running); file mode shuts the kernel down.
        """
        session = await ws.end_session(lab_path(path))
        rel = as_given(path, ws.relative(lab_path(path)))
        if session is None:
            return SessionResult(
                path=rel, status="not_found", message="No active session for this notebook"
            )
        message = "RTC session ended successfully" if session.live else "Session ended successfully"
        return SessionResult(path=rel, status="disconnected", message=message)

    @reg.tool(kind="read")
    async def query_nb_sessions(
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
            await ws.list_notebooks(folder, recursive=False)  # the folder must exist
        views = [await _session_view(s, root_path) for s in ws.sessions(folder)]
        return SessionsResult(
            root_path=root_path if root_path is not None else "",
            sessions=views,
            total_sessions=len(views),
            active_sessions=sum(v.status == "connected" for v in views),
        )

    async def _session_view(s: NotebookSession, given: str | None) -> SessionView:
        count, activity = None, s.last_activity
        try:
            snap = await ws.read(s.path)
            count = len(snap.notebook.cells)
            activity = max(activity, await ws.last_modified(snap) or 0.0)
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

    # -- notebook operations ------------------------------------------------------------

    @reg.tool(kind="read")
    async def list_nbs(
        path: Annotated[
            str | None,
            Field(description="Directory path to search for notebooks (default: root directory)"),
        ] = None,
    ) -> NotebookItems:
        """List all notebook files under a specified directory, recursively."""
        found = await ws.list_notebooks(lab_path(path), recursive=True)
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

    @reg.tool(kind="read")
    async def get_nb_stat(path: NbPath) -> NotebookStat:
        """Get status information about a notebook, including cell count and kernel information."""
        snap = await ws.read(lab_path(path))
        return NotebookStat(
            path=as_given(path, snap.path),
            cell_count=len(snap.notebook.cells),
            last_modified=iso(await ws.last_modified(snap)),
            kernel=kernel_view(ws, snap),
        )

    @reg.tool(kind="read")
    async def read_nb_cells(
        path: NbPath,
        ranges: Annotated[
            list[CellRange] | None,
            Field(description="Array of cell ranges to read (default: all cells)"),
        ] = None,
    ) -> CellItems:
        """Read multiple cells by specifying ranges.

        Indexes are 0-based and `end` is excluded; a range without `end` reads to the
        notebook's end. Code cells also give their outputs as text. Example: ranges=[{"start": 0, "end": 3}].
        """
        snap = await ws.read(lab_path(path))
        nb = snap.notebook
        indexes: list[int] = []
        for r in ranges if ranges is not None else [CellRange(start=0)]:
            end = len(nb.cells) if r.end is None else min(r.end, len(nb.cells))
            if end == r.start == len(nb.cells):
                continue  # reading "to the end" from the end (of an empty notebook, say)
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
            if cell["cell_type"] == "code":
                item.execution_count = cell.get("execution_count")
                item.outputs = outputs or None
            cells.append(item)
        return CellItems(cells=cells)

    @reg.tool(kind=runs)
    async def modify_nb_cells(
        path: NbPath,
        modifications: Annotated[
            list[CellModification], Field(description="Array of cell modifications")
        ],
        ctx: Context,
        exec: Exec = True,
    ) -> Done:
        """Modify multiple cells by specifying ranges, with optional execution.

        Every cell in a range gets the content. Indexes are 0-based, `end` excluded; a range
        without `end` runs to the notebook's end. All ranges are checked first: out of range,
        nothing changes. Example: modifications=[{"range": {"start": 2, "end": 3}, "content": "x = 1"}].
        """
        rel = lab_path(path)
        outcome = await ws.set_sources(
            rel, [(range_ref(m.range), m.content) for m in modifications]
        )
        execution = await run_cells(ws, rel, list(outcome.plan.touched), ctx) if exec else None
        n = len(modifications)
        return Done(
            message=f"Successfully modified {n} cell range{'s' if n != 1 else ''}"
            + ran(execution, ws),
            modified_ranges=n,
            executed=execution is not None,
            execution=execution,
        )

    @reg.tool(kind=runs)
    async def insert_nb_cells(
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
        outcome = await ws.insert_cells(
            rel, [CellSpec(c.type, c.content) for c in cells], index=position
        )
        ids = list(outcome.plan.touched)
        execution = await run_cells(ws, rel, ids, ctx) if exec else None
        return Done(
            message=f"Successfully inserted {len(ids)} cell{'s' if len(ids) != 1 else ''}"
            + ran(execution, ws),
            cell_ids=ids,
            executed=execution is not None,
            execution=execution,
        )

    @reg.tool(kind="destructive")
    async def delete_nb_cells(
        path: NbPath,
        ranges: Annotated[list[CellRange], Field(description="Array of cell ranges to delete")],
    ) -> Done:
        """Delete multiple cells by specifying ranges.

        Indexes are 0-based, `end` excluded; a range without `end` runs to the notebook's end.
        Example: ranges=[{"start": 3, "end": 5}] deletes cells 3 and 4.
        """
        if not ranges:
            raise InvalidArgument("ranges is empty.", hint='Give ranges like [{"start": 3}].')
        outcome = await ws.delete_cells(lab_path(path), [range_ref(r) for r in ranges])
        n = len(outcome.plan.touched)
        return Done(message=f"Successfully deleted {n} cell{'s' if n != 1 else ''}", deleted=n)

    @reg.tool(kind="execute")
    async def restart_nb_kernel(
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
        await ws.restart_kernel(rel)
        if clear_contents:
            await ws.clear_outputs(rel)
        execution = await run_cells(ws, rel, None, ctx) if exec else None
        message = "Kernel restarted successfully"
        if clear_contents:
            message += ", outputs cleared"
        return Done(
            message=message + ran(execution, ws),
            cleared=clear_contents,
            executed=execution is not None,
            execution=execution,
        )

    # -- document management ------------------------------------------------------------

    @reg.tool(kind="read")
    async def list_documents(
        path: Annotated[
            str | None,
            Field(description="Path to list documents from (default: root directory)"),
        ] = None,
    ) -> CallToolResult:
        """List available documents in JupyterLab from a specified path.

        Returns an array of files, notebooks and folders directly in that folder.
        """
        return json_reply([doc_view(d, path) for d in await ws.list_documents(lab_path(path))])

    @reg.tool(kind="write")
    async def create_document(
        path: Annotated[str, Field(description="Path for the new document")],
        type: Annotated[
            Literal["notebook", "file", "markdown"], Field(description="Document type")
        ] = "notebook",
        content: Annotated[
            str | None, Field(description="Initial content for the document")
        ] = None,
    ) -> Done:
        """Create a new document in JupyterLab.

        Never replaces an existing file. A notebook path gets .ipynb and a markdown path .md if it
        has no extension; a notebook's content may be notebook JSON, Markdown or a script.
        """
        rel = lab_path(path)
        ext = posixpath.splitext(rel)[1]
        if type == "notebook" and ext != ".ipynb":
            rel += ".ipynb"
        elif type == "markdown" and not ext:
            rel += ".md"
        doc = await ws.create_document(rel, content)
        shown = as_given(path, doc.path)
        return Done(message=f"Document {shown} created successfully", path=shown)

    @reg.tool(kind="read")
    async def get_document_info(path: DocPath) -> CallToolResult:
        """Get information about a document.

        `content` is text (format "text"), base64 (format "base64"), the notebook JSON (format
        "json") or a folder's entries; files over 64 KB are cut (`truncated`: true).
        """
        doc = await ws.document(lab_path(path))
        info = doc_view(doc, path) | {"format": None, "mimetype": doc.mimetype, "content": None}
        if doc.type == "directory":
            info["format"] = "json"
            info["content"] = [doc_view(d, path) for d in await ws.list_documents(doc.path)]
            return json_reply(info)
        raw, size = await ws.read_document(doc.path, limit=MAX_CONTENT)
        cut = size > len(raw)
        if doc.type == "notebook":
            info["format"] = "json"
            info["mimetype"] = "application/x-ipynb+json"
            if cut:
                info["note"] = (
                    "the notebook is too large to return whole: read it with read_nb_cells"
                )
            else:
                parse(raw, name=doc.path)  # a damaged notebook gets an error naming the damage
                info["content"] = json.loads(raw)
            return json_reply(info)
        try:
            info["content"] = raw.decode("utf-8", errors="ignore" if cut else "strict")
            info["format"] = "text"
        except UnicodeDecodeError:
            info["content"] = base64.b64encode(raw).decode("ascii")
            info["format"] = "base64"
        if cut:
            info["truncated"] = True
            info["note"] = f"only the first {len(raw):,} of {size:,} bytes are shown"
        return json_reply(info)

    @reg.tool(kind="destructive")
    async def delete_document(
        path: Annotated[str, Field(description="Path to the document to delete")],
    ) -> Done:
        """Delete a document in JupyterLab.

        Deletes a file, a notebook (its kernel is shut down) or an empty folder.
        """
        doc = await ws.delete_document(lab_path(path))
        shown = as_given(path, doc.path)
        return Done(message=f"Document {shown} deleted successfully", path=shown)

    @reg.tool(kind="destructive")
    async def rename_document(
        path: Annotated[str, Field(description="Current path to the document")],
        newPath: Annotated[str, Field(description="New path for the document")],
    ) -> Done:
        """Rename a document in JupyterLab.

        Also moves it between folders; never replaces an existing file.
        """
        doc = await ws.move_document(lab_path(path), lab_path(newPath))
        shown = as_given(newPath, doc.path)
        return Done(message=f"Document renamed from {path} to {shown}", path=shown)

    @reg.tool(kind="write")
    async def copy_document(
        path: Annotated[str, Field(description="Path to the document to copy")],
        copyPath: Annotated[str, Field(description="Path for the copied document")],
    ) -> Done:
        """Copy a document in JupyterLab.

        Never replaces an existing file.
        """
        doc = await ws.move_document(lab_path(path), lab_path(copyPath), keep_source=True)
        shown = as_given(copyPath, doc.path)
        return Done(message=f"Document {path} copied to {shown}", path=shown)

    @reg.tool(kind="read")
    async def document_exists(
        path: Annotated[str, Field(description="Path to the document to check")],
    ) -> Exists:
        """Check if a document exists in JupyterLab."""
        return Exists(exists=await ws.document_exists(lab_path(path)))
