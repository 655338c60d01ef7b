"""mcp-jupyter's modify_notebook_cells (add, edit, delete cells; run what it adds) and
setup_notebook."""

from __future__ import annotations

import posixpath
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from nbrelay import jupyter_api
from nbrelay.caller import Caller
from nbrelay.config import safe_url
from nbrelay.errors import InvalidArgument, NbrelayError, NotebookNotFound
from nbrelay.notebook.edits import CellSpec
from nbrelay.stores.base import Document, EditOutcome, Snapshot
from nbrelay.tools.mcp_jupyter.context import Served
from nbrelay.tools.mcp_jupyter.views import (
    OPERATIONS,
    VIEW_HINT,
    WORDS,
    NotebookPath,
    initial_cells,
    ipynb,
    need_content,
    need_position,
    position,
    reply,
    server_of,
    shown_cell,
)
from nbrelay.tools.results import iso
from nbrelay.tools.runs import saved_then_run


async def modify_notebook_cells(
    state: Served,
    caller: Caller,
    notebook_path: NotebookPath,
    operation: Annotated[
        str,
        Field(
            description="One of: 'add_code' (add and optionally execute a code cell at end or specific position), 'edit_code' (edit a code cell at specific position), 'add_markdown' (add a markdown cell at end or specific position), 'edit_markdown' (edit an existing markdown cell at specific position), 'delete' (delete a cell at specific position)."
        ),
    ],
    ctx: Context,
    cell_content: Annotated[
        str | None,
        Field(
            description="Content for the cell (required for add_code, edit_code, add_markdown, edit_markdown)"
        ),
    ] = None,
    position_index: Annotated[
        int | float | None,
        Field(
            description="Position index for all operations (0-indexed). Optional for add_code/add_markdown (if not provided, cells are added at the end). Required for edit_code, edit_markdown, and delete."
        ),
    ] = None,
    execute: Annotated[
        bool, Field(description="Whether to execute code cells after adding/editing")
    ] = True,
) -> CallToolResult:
    """Modify notebook cells (add, edit, delete) on the user-provided server.

    This consolidates all cell modification operations into a single tool following MCP best practices.
    Default to execute=True unless the user requests otherwise or you have good reason not to
    execute immediately. Refused if the notebook changed since you last viewed it: view it again
    with query_notebook first.

    Returns: add_code/edit_code with execute=True: execution_count, outputs, status; with execute=False: empty dict; add_markdown/edit_markdown/delete: message and error fields.
    """
    if operation not in OPERATIONS:
        raise InvalidArgument(
            f"Invalid operation: {operation}. Must be one of: {', '.join(OPERATIONS)}"
        )
    path = ipynb(notebook_path)
    index = position(position_index)
    if operation in ("add_code", "edit_code", "add_markdown", "edit_markdown"):
        need_content(cell_content, operation)
    if operation in ("edit_code", "edit_markdown", "delete"):
        need_position(index, operation)
    snap = await state.ws.notebooks.unchanged_since_viewed(path, caller, hint=VIEW_HINT)
    run = execute and not state.ws.settings.no_execute
    content = cell_content or ""
    at = None if index is None else min(index, len(snap.notebook.cells))
    if operation in ("add_code", "edit_code"):
        outcome = await _write(state, caller, path, snap.version, operation, content, index, at)
        if not run:
            return reply({})
        if operation == "edit_code":
            with saved_then_run():
                return reply(
                    await state.run_cell(caller, path, need_position(index, operation), ctx)
                )
        new = outcome.after.notebook.ids.index(outcome.plan.touched[0])
        try:
            return reply(await state.run_cell(caller, path, new, ctx))
        except NbrelayError as exc:
            return reply(
                {"error": exc.render(WORDS), "message": "Cell was added but execution failed"}
            )
    result = {"message": "", "error": ""}
    try:
        if operation == "delete":
            await state.ws.editing.delete_cells(
                path, caller, [need_position(index, operation)], expected_version=snap.version
            )
            result["message"] = "Cell deleted"
        else:
            await _write(state, caller, path, snap.version, operation, content, index, at)
            result["message"] = (
                "Markdown cell edited"
                if operation == "edit_markdown"
                else "Markdown cell added"
                if at is None
                else f"Markdown cell inserted at position {at}"
            )
    except NbrelayError as exc:
        result["error"] = exc.render(WORDS)
    return reply(result)


async def _write(
    state: Served,
    caller: Caller,
    path: str,
    version: str,
    operation: str,
    content: str,
    index: int | None,
    at: int | None,
) -> EditOutcome:
    """add_code/add_markdown insert a cell of that type at ``at`` (None: at the end);
    edit_code/edit_markdown set the cell at ``index`` (a code cell's outputs are cleared)."""
    kind = "code" if operation.endswith("_code") else "markdown"
    if operation.startswith("add_"):
        return await state.ws.editing.insert_cells(
            path, caller, [CellSpec(kind, content)], index=at, expected_version=version
        )
    return await state.ws.editing.edit_cell(
        path,
        caller,
        need_position(index, operation),
        source=content,
        cell_type=kind,
        clear_outputs=kind == "code",
        expected_version=version,
    )


async def setup_notebook(
    state: Served,
    caller: Caller,
    notebook_path: Annotated[
        str,
        Field(
            description="Path to the notebook, relative to the Jupyter server root (.ipynb is added if missing)."
        ),
    ],
    cells: Annotated[
        list[Any] | None,
        Field(description="Optional list of initial cell contents for a new notebook."),
    ] = None,
    server_url: Annotated[
        str | None,
        Field(
            description="Optional Jupyter server URL, remembered for this notebook (check_server probes it). In live mode it must be the server nbrelay serves."
        ),
    ] = None,
) -> CallToolResult:
    """Prepare notebook for use and connect to the kernel on the user-provided server.
    Will create a new Jupyter notebook if needed on the server.

    Call it first for every notebook. Note that notebook_path must be relative to the Jupyter
    server root, not an absolute filesystem path.

    Returns: dict with information about the notebook and a status message.
    """
    path = ipynb(notebook_path)
    url = server_of(server_url) if server_url else None
    if url is not None and state.configured is not None and not state.served_here(url):
        raise InvalidArgument(
            f"server_url {safe_url(url)!r} is not the Jupyter Server this nbrelay serves "
            f"({jupyter_api.base_url(state.configured)}).",
            hint="Leave server_url out, or start nbrelay with --jupyter-url set to that server.",
        )
    try:
        await state.ws.notebooks.read(path, caller)
        message = f"Notebook {path} already exists"
    except NotebookNotFound:
        await state.ws.notebooks.create_notebook(path, caller, initial_cells(cells or []))
        message = f"Notebook {path} created"
    if not state.ws.settings.no_execute:
        await state.ws.notebook_sessions.begin_session(path, caller)
    snap = await state.ws.notebooks.view(path, caller)
    if url is not None:
        state.servers[snap.path] = url
    return reply({**await _contents_model(state, caller, snap), "message": message})


async def _contents_model(state: Served, caller: Caller, snap: Snapshot) -> dict[str, Any]:
    """The notebook as the Jupyter contents API gives it (what the original returns): name,
    path, times, ``content`` (its cells as view_source shows them, without ids), format,
    mimetype, size, writable, hash and type."""
    try:
        doc: Document | None = await state.ws.documents.document(snap.path, caller)
    except NbrelayError:
        doc = None
    data = snap.notebook.data
    cells = state.budget().share(
        lambda b: [shown_cell(c, i, b) for i, c in enumerate(snap.notebook.cells)]
    )
    modified = (
        doc.modified if doc is not None else await state.ws.documents.last_modified(snap, caller)
    )
    return {
        "name": posixpath.basename(snap.path),
        "path": snap.path,
        "last_modified": iso(modified) or None,
        "created": (iso(doc.created) or None) if doc is not None else None,
        "content": {
            "cells": [{k: v for k, v in c.items() if k != "id"} for c in cells],
            "metadata": data.get("metadata", {}),
            "nbformat": data.get("nbformat", 4),
            "nbformat_minor": data.get("nbformat_minor", 5),
        },
        "format": "json",
        "mimetype": None,
        "size": doc.size if doc is not None else None,
        "writable": doc.writable if doc is not None else True,
        "hash": None,
        "hash_algorithm": None,
        "type": "notebook",
    }
