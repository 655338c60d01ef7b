"""Srcbook's notebook management and advanced operations: create, list, delete, export and
import sessions."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.notebook.model import new_notebook
from nbrelay.timestamps import utc_iso
from nbrelay.tools import resources, services
from nbrelay.tools._boundary import compact_json
from nbrelay.tools.srcbook.context import EXPORT_MAX_CHARS, Served
from nbrelay.tools.srcbook.views import (
    Deleted,
    SessionView,
    view,
)
from nbrelay.workspace.srcbook_sessions import (
    DENO,
    check_tsconfig,
    import_name,
    prepare_import,
    tsconfig_note,
)


async def notebook_create(
    sb: Served,
    caller: Caller,
    ctx: Context,
    name: Annotated[str, Field(description="Human-readable notebook name")],
    language: Literal["typescript", "javascript"] = "typescript",
    description: Annotated[str | None, Field(description="Notebook purpose/description")] = None,
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
    session_id = sb.sessions.new_id(name)
    sb.sessions.check_room(session_id)
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
    snap = await sb.ws.notebooks.create_from(
        sb.sessions.path(session_id), caller, nb, overwrite=False
    )
    sb.sessions.used[session_id] = time.time()
    await sb.changed(ctx, session_id)
    note = tsconfig_note(tsconfig) if tsconfig is not None else None
    return view(sb.sessions, session_id, snap, note)


async def notebook_list(
    sb: Served,
    caller: Caller,
    filter: Literal["active", "suspended", "all"] = "active",
) -> CallToolResult:
    """Lists all active notebook sessions.

    Returns: Array of notebook sessions with metadata. filter="suspended" lists the sessions
    not in use (kept on disk, resumed by the next call that uses them); "all" lists both.
    """
    views = [view(sb.sessions, sid, snap) for sid, snap in await sb.sessions.all(caller)]
    if filter != "all":
        views = [v for v in views if v.status == filter]
    views.sort(key=lambda v: (v.created_at or "", v.session_id))
    items = [v.model_dump(mode="json", exclude_none=True) for v in views]
    # The specification's array: the JSON array as text; structured content must be an
    # object, so it is {"result": [...]}.
    return CallToolResult(
        content=[TextContent(text=compact_json(items))], structured_content={"result": items}
    )


async def notebook_delete(
    sb: Served,
    caller: Caller,
    ctx: Context,
    session_id: Annotated[str, Field(description="Notebook session identifier")],
) -> Deleted:
    """Terminates and cleans up a notebook session.

    Stops its kernel and deletes its notebook, saved state and working folder (with the
    files its cells wrote there).
    """
    snap = await sb.sessions.open(session_id, caller, touch=False)
    await sb.ws.documents.delete_document(snap.path, caller)
    await sb.ws.inspect.forget_saved_state(snap.path)
    await sb.sessions.remove_folder(snap.path)
    sb.sessions.used.pop(session_id, None)
    await sb.changed(ctx, session_id)
    return Deleted(session_id=session_id, deleted=True)


async def notebook_export(
    sb: Served,
    caller: Caller,
    session_id: str,
    format: Literal["json", "markdown", "html", "pdf"] = "json",
    include_outputs: bool = True,
) -> Any:
    """Exports notebook in various formats.

    Returns: Exported notebook content in specified format (json is the .ipynb JSON; pdf
    comes as an embedded resource).
    """
    snap = await sb.sessions.open(session_id, caller)
    done = await sb.ws.transfer.export_notebook(
        snap.path,
        caller,
        format,
        outputs=include_outputs,
        image_link=lambda cell, k, mime: resources.output_uri(snap.path, cell, k, mime),
        max_chars=EXPORT_MAX_CHARS,
    )
    return services.export_result(done, EXPORT_MAX_CHARS)


async def notebook_import(
    sb: Served,
    caller: Caller,
    ctx: Context,
    content: Annotated[str, Field(description="Notebook content to import")],
    format: Literal["json", "markdown", "ipynb"] = "json",
) -> SessionView:
    """Imports a notebook from various formats.

    Returns: New session ID for imported notebook (with its metadata). Markdown code blocks
    become code cells.
    """
    name = import_name(content, format)
    session_id = sb.sessions.new_id(name)
    sb.sessions.check_room(session_id)
    snap = await sb.ws.transfer.import_notebook(
        sb.sessions.path(session_id),
        caller,
        content=content,
        fmt=format,
        prepare=prepare_import(name),
    )
    sb.sessions.used[session_id] = time.time()
    await sb.changed(ctx, session_id)
    return view(sb.sessions, session_id, snap)
