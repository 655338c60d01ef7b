"""Profile ``srcbook``: the tools, resources and events of Srcbook's MCP specification.

A *session* is a notebook that ``notebook_create`` or ``notebook_import`` made, in a working
folder of its own under the root (``<id>/<id>.ipynb``; in live mode directly in the root; its
``metadata.srcbook`` holds the name, description, language and tsconfig); its id is the file
name without ``.ipynb``: a slug of the name and six hex digits
(``sales-analysis-q4-2024-3f9a2c``), so sessions persist with their notebooks (the registry is
``workspace/srcbook_sessions.py``). TypeScript and JavaScript run on the Deno kernel; an imported
Python notebook keeps its Python kernel. A session is *active* while its kernel runs or for
``--kernel-idle-timeout`` (Srcbook's ``sessionTimeout``) after its last use, *suspended*
otherwise; using it resumes it. Timeouts are in milliseconds.

Events: during ``cell_execute`` each ``notebook.cell.executing``, ``notebook.cell.output``,
``notebook.cell.completed`` and ``notebook.error`` event is a progress notification whose message
is the event as JSON; every tool that changes a session ends with ``notebook.state.changed``.
Every event is also kept in the session's event log, the resource
``notebook://session/{id}/events``, whose listeners hear of each (``srcbook_resources``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ImageContent, TextContent
from pydantic import Field

from nbrelay.config import OPTION_BY_NAME
from nbrelay.errors import InvalidArgument, Vocabulary
from nbrelay.notebook import address, render
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import new_notebook
from nbrelay.timestamps import utc_iso
from nbrelay.tools import resources, services
from nbrelay.tools._boundary import Registrar, compact_json
from nbrelay.tools.srcbook_resources import register_resources as register_resources
from nbrelay.tools.srcbook_results import (
    CellDeleted,
    CellPlace,
    Deleted,
    Events,
    ExecuteResult,
    SessionView,
    VisualResult,
    cell_result,
    javascript_refusal,
    script_value,
    view,
)
from nbrelay.workspace import Workspace
from nbrelay.workspace.srcbook_sessions import (
    DENO,
    check_tsconfig,
    import_name,
    prepare_import,
    sessions_of,
    tsconfig_note,
)

DEFAULT_TIMEOUT_MS = 30_000
EXPORT_MAX_CHARS = 1_000_000


def _timeout_schema(schema: dict[str, Any]) -> None:
    """Publish ``timeout`` as the document does: an integer defaulting to 30000 (ms). Leaving
    it out lets a configured execution timeout apply instead."""
    schema.pop("anyOf", None)
    schema.update(type="integer", default=DEFAULT_TIMEOUT_MS)


# -- the tools -----------------------------------------------------------------------------


_AGAIN = (
    "Read the session's state (resource notebook://session/{session_id}/state) to see the "
    "notebook as it is now, then retry."
)
# How errors say things here (see nbrelay.errors): this profile's tools and resources.
WORDS = Vocabulary(
    {
        "index_rule": "Positions are 0-based; cells are addressed by cell_id.",
        "see_cells": "The session's state (resource notebook://session/{session_id}/state) "
        "lists the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "missing": "notebook_list shows the sessions; notebook_create starts one.",
        "start_kernel": "Run a cell with cell_execute to start one.",
        "run_first": "Run it first (cell_execute)",
    }
)


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the Srcbook tools."""
    reg.words = WORDS
    sessions = sessions_of(ws)
    settings = ws.settings

    def default_timeout_ms() -> float:
        """The document's 30000 ms, unless the server was given another execution timeout."""
        if settings.execution_timeout == OPTION_BY_NAME["execution_timeout"].default:
            return DEFAULT_TIMEOUT_MS
        return settings.execution_timeout * 1000

    async def changed(ctx: Context | None, session_id: str) -> None:
        await Events(ctx, session_id, sessions.record).emit("notebook.state.changed")

    # -- Notebook Management -----------------------------------------------------------------

    @reg.tool(kind="write")
    async def notebook_create(
        ctx: Context,
        name: Annotated[str, Field(description="Human-readable notebook name")],
        language: Literal["typescript", "javascript"] = "typescript",
        description: Annotated[
            str | None, Field(description="Notebook purpose/description")
        ] = None,
        tsconfig: Annotated[
            dict[str, Any] | None, Field(description="TypeScript compiler options")
        ] = None,
    ) -> SessionView:
        """Creates a new notebook session with specified configuration.

        Returns: Session ID and notebook metadata. Code runs on the Deno kernel (TypeScript or
        JavaScript).
        """
        if not name.strip():
            raise InvalidArgument("name is empty.", hint="Give the notebook a name.")
        if tsconfig is not None:
            check_tsconfig(tsconfig)
        session_id = sessions.new_id(name)
        sessions.check_room(session_id)
        nb = new_notebook(kernel_name=DENO, display_name="Deno", language=language)
        meta: dict[str, Any] = {
            "name": name.strip(),
            "description": description,
            "language": language,
            "created": utc_iso(time.time()),
        }
        if tsconfig is not None:
            meta["tsconfig"] = tsconfig
        nb.data["metadata"]["srcbook"] = meta
        snap = await ws.notebooks.create_from(sessions.path(session_id), nb, overwrite=False)
        sessions.used[session_id] = time.time()
        await changed(ctx, session_id)
        note = tsconfig_note(tsconfig) if tsconfig is not None else None
        return view(sessions, session_id, snap, note)

    @reg.tool(kind="read")
    async def notebook_list(
        filter: Literal["active", "suspended", "all"] = "active",
    ) -> CallToolResult:
        """Lists all active notebook sessions.

        Returns: Array of notebook sessions with metadata. filter="suspended" lists the sessions
        not in use (kept on disk, resumed by the next call that uses them); "all" lists both.
        """
        views = [view(sessions, sid, snap) for sid, snap in await sessions.all()]
        if filter != "all":
            views = [v for v in views if v.status == filter]
        views.sort(key=lambda v: (v.created_at or "", v.session_id))
        items = [v.model_dump(mode="json", exclude_none=True) for v in views]
        # The specification's array: the JSON array as text; structured content must be an
        # object, so it is {"result": [...]}.
        return CallToolResult(
            content=[TextContent(text=compact_json(items))], structured_content={"result": items}
        )

    @reg.tool(kind="destructive")
    async def notebook_delete(
        ctx: Context,
        session_id: Annotated[str, Field(description="Notebook session identifier")],
    ) -> Deleted:
        """Terminates and cleans up a notebook session.

        Stops its kernel and deletes its notebook, saved state and working folder (with the
        files its cells wrote there).
        """
        snap = await sessions.open(session_id, touch=False)
        await ws.documents.delete_document(snap.path)
        await ws.inspect.forget_saved_state(snap.path)
        await sessions.remove_folder(snap.path)
        sessions.used.pop(session_id, None)
        await changed(ctx, session_id)
        return Deleted(session_id=session_id, deleted=True)

    # -- Cell Operations ---------------------------------------------------------------------

    @reg.tool(kind="write")
    async def cell_add(
        ctx: Context,
        session_id: str,
        content: Annotated[str, Field(description="Cell content (code or markdown)")],
        type: Literal["code", "markdown"] = "code",
        position: Annotated[int | None, Field(description="Insert position (default: end)")] = None,
    ) -> CellPlace:
        """Adds a new cell to the notebook.

        Returns: Cell ID and position (0-based; position -1 or none appends).
        """
        snap = await sessions.open(session_id)
        outcome = await ws.editing.insert_cells(
            snap.path, [CellSpec(type, content)], index=position
        )
        new_id = outcome.plan.touched[0]
        await changed(ctx, session_id)
        return CellPlace(cell_id=new_id, position=outcome.after.notebook.ids.index(new_id))

    @reg.tool(kind="execute")
    async def cell_execute(
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
        snap = await sessions.open(session_id)
        limit_ms = default_timeout_ms() if timeout is None else timeout
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
        events = Events(ctx, session_id, sessions.record)
        notes: list[str] = []
        # A kernel about to start gets the tsconfig's JSX options and, unless every cell runs
        # anyway, the variables of the session's earlier cells (persistSessions).
        notes += await sessions.start_kernel(snap.path, snap, seconds, replay=not run_all)
        if sessions.language(snap) == "javascript":
            refused = await javascript_refusal(sessions, events, snap, cell_id)
            if refused is not None:
                return refused
        job = await ws.runs.execute(
            snap.path, None if run_all else [cell_id], time_limit=seconds, stop_on_error=True
        )
        wait = seconds * len(job.cells) + settings.interrupt_grace + 60
        try:
            await ws.runs.wait_job(job, wait, events.follow, interval=1.0)
        except anyio.get_cancelled_exc_class():
            job.stop.set()
            raise
        if not job.done.is_set():
            await ws.runs.cancel_job(job)
        await events.follow(job)
        await events.emit("notebook.state.changed")
        budget = render.Budget(settings.output_budget, settings.output_budget)
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

    @reg.tool(kind="write")
    async def cell_update(
        ctx: Context,
        session_id: str,
        cell_id: str,
        content: Annotated[str, Field(description="New cell content")],
    ) -> CellPlace:
        """Updates an existing cell's content."""
        snap = await sessions.open(session_id)
        outcome = await ws.editing.edit_cell(snap.path, cell_id, source=content)
        changed_id = outcome.plan.touched[0]
        await changed(ctx, session_id)
        return CellPlace(cell_id=changed_id, position=outcome.after.notebook.ids.index(changed_id))

    @reg.tool(kind="destructive")
    async def cell_delete(ctx: Context, session_id: str, cell_id: str) -> CellDeleted:
        """Removes a cell from the notebook."""
        snap = await sessions.open(session_id)
        outcome = await ws.editing.delete_cells(snap.path, [cell_id])
        await changed(ctx, session_id)
        return CellDeleted(cell_id=outcome.plan.touched[0], deleted=True)

    # -- Advanced Operations -----------------------------------------------------------------

    @reg.tool(kind="read")
    async def notebook_export(
        session_id: str,
        format: Literal["json", "markdown", "html", "pdf"] = "json",
        include_outputs: bool = True,
    ) -> Any:
        """Exports notebook in various formats.

        Returns: Exported notebook content in specified format (json is the .ipynb JSON; pdf
        comes as an embedded resource).
        """
        snap = await sessions.open(session_id)
        done = await ws.transfer.export_notebook(
            snap.path,
            format,
            outputs=include_outputs,
            image_link=lambda cell, k, mime: resources.output_uri(snap.path, cell, k, mime),
            max_chars=EXPORT_MAX_CHARS,
        )
        return services.export_result(done, EXPORT_MAX_CHARS)

    @reg.tool(kind="write")
    async def notebook_import(
        ctx: Context,
        content: Annotated[str, Field(description="Notebook content to import")],
        format: Literal["json", "markdown", "ipynb"] = "json",
    ) -> SessionView:
        """Imports a notebook from various formats.

        Returns: New session ID for imported notebook (with its metadata). Markdown code blocks
        become code cells.
        """
        name = import_name(content, format)
        session_id = sessions.new_id(name)
        sessions.check_room(session_id)
        snap = await ws.transfer.import_notebook(
            sessions.path(session_id), content=content, fmt=format, prepare=prepare_import(name)
        )
        sessions.used[session_id] = time.time()
        await changed(ctx, session_id)
        return view(sessions, session_id, snap)

    @reg.tool(kind="execute")
    async def cell_visualize(
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
        snap = await sessions.open(session_id)
        nb = snap.notebook
        cell = nb.cells[address.resolve_one(nb.ids, cell_id)]
        if (nb.language or "").lower() == "python":
            done = await ws.inspect.visualize_cell(
                snap.path, cell["id"], kind=type, options=options
            )
        else:
            value = await script_value(ws, snap.path, cell, options)
            done = await ws.inspect.visualize_value(value, kind=type, options=options)
        for key in ("path", "cell"):
            done.pop(key, None)
        png = done.pop("png", None)
        result = VisualResult(session_id=session_id, cell_id=str(cell["id"]), **done)
        if png is None:
            return result
        result.rows = None  # the picture shows them
        return result, ImageContent(type="image", data=png, mime_type="image/png")
