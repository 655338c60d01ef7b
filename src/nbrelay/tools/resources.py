"""Notebooks as MCP resources, and the change feed that tells listening clients what changed.

URIs (``{+path}`` is the notebook path relative to the root, ``/`` kept, other characters
percent-encoded; cells by id, or by 0-based index; outputs by 0-based index):

* ``nbrelay://notebook/{+path}``                             the notebook: version and cell overview
  (the same JSON as ``read_notebook``)
* ``nbrelay://notebook/{+path}/cells/{cell}``                one cell (the same JSON as ``read_cell``)
* ``nbrelay://notebook/{+path}/cells/{cell}/outputs/{output}``  one output, text in full
* ``nbrelay://notebook/{+path}/cells/{cell}/outputs/{output}.png`` (``.jpeg``, ``.gif``,
  ``.webp``, ``.svg``)                                        an image output as a blob
* ``nbrelay://notebook/{+path}/changes{?since}``              recent changes, by cell id
* ``nbrelay://notebook/{+path}/history``                      executions: what ran, when, how
  long, with what status
* ``nbrelay://notebook/{+path}/export.pdf``                   the notebook printed to PDF

Every read goes through the workspace, so paths are confined exactly as for the tools.

The change feed that tells listening clients what changed is ``nbrelay.tools.feed``; the URIs
are built in ``nbrelay.tools.uris``.
"""

from __future__ import annotations

import base64
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    CompleteRequestParams,
    CompleteResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NbrelayError, NotebookInvalid
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.stores.base import Snapshot
from nbrelay.tools import results, sdk
from nbrelay.tools._boundary import Registrar, compact_json
from nbrelay.tools.feed import ChangeFeed as ChangeFeed
from nbrelay.tools.uris import IMAGE_EXTENSIONS, SCHEME
from nbrelay.tools.uris import output_uri as output_uri
from nbrelay.workspace import Workspace


def _json(model: Any) -> str:
    data = (
        model.model_dump(mode="json", exclude_none=True) if hasattr(model, "model_dump") else model
    )
    return compact_json(data)


def notebook_state(ws: Workspace, snap: Snapshot) -> results.NotebookView:
    """The notebook overview, as ``read_notebook`` returns it for all cells."""
    cells = snap.notebook.cells
    return results.NotebookView(
        path=snap.path,
        version=snap.version,
        cell_count=len(cells),
        kernel=snap.notebook.kernel_name,
        cells=results.OverviewMemo.of(ws).views(snap.path, cells, 0, len(cells)),
        note=results.OUTSIDE_NOTE if snap.changed_outside else None,
        problems=list(snap.problems) or None,
    )


def _output(snap: Snapshot, cell: str, output: int) -> tuple[int, str, dict[str, Any]]:
    i = resolve_one(snap.notebook.ids, cell)
    found = snap.notebook.cells[i]
    outs = [o for o in found.get("outputs") or [] if isinstance(o, dict)]
    if not 0 <= output < len(outs):
        raise InvalidArgument(
            f"cell {found['id']!r} has {len(outs)} output(s); there is no output {output}.",
            hint="Outputs are numbered from 0; read the cell to see them.",
        )
    return i, str(found["id"]), outs[output]


# What completion/complete answers with at most (the spec's limit), and how many notebooks a
# path completion looks at (a big root is not walked whole for a keystroke).
COMPLETIONS = 100
COMPLETION_WALK = 5000


async def complete(
    ws: Workspace,
    caller: Caller,
    ref: PromptReference | ResourceTemplateReference,
    argument: CompletionArgument,
    context: CompletionContext | None,
) -> Completion | None:
    """Completions for the notebook resource templates' arguments: ``path`` (notebooks under
    the root whose path starts with what was typed) and ``cell`` (the notebook's cell ids, then
    its indexes, given its ``path`` among the arguments already resolved)."""
    if not isinstance(ref, ResourceTemplateReference) or not ref.uri.startswith(SCHEME):
        return None
    typed = argument.value
    try:
        if argument.name == "path":
            folder = typed.rpartition("/")[0]
            found = await ws.notebooks.list_notebooks(folder, caller, limit=COMPLETION_WALK)
            values = [e.path for e in found if e.path.startswith(typed)]
        elif argument.name == "cell":
            path = (context.arguments or {}).get("path") if context is not None else None
            if not path:
                return Completion(values=[])
            ids = (await ws.notebooks.read(path, caller)).notebook.ids
            values = [c for c in ids if c.startswith(typed)]
            values += [str(i) for i in range(len(ids)) if str(i).startswith(typed)]
        else:
            return None
    except NbrelayError:  # no such folder or notebook: nothing to offer
        return Completion(values=[])
    return Completion(
        values=values[:COMPLETIONS],
        total=len(values),
        has_more=len(values) > COMPLETIONS,
    )


def register(server: MCPServer[Any], ws: Workspace, feed: ChangeFeed, reg: Registrar) -> None:
    """Register the notebook resources on ``server``, completions of their arguments and the
    legacy subscribe handlers; the resources' errors go through ``reg``'s boundary (in its
    profile's words)."""

    async def completion(ctx: Any, params: CompleteRequestParams) -> CompleteResult:
        """``complete`` for the client asking (its reads are its own)."""
        caller = sdk.caller_of_request(ctx)
        found = await complete(ws, caller, params.ref, params.argument, params.context)
        return CompleteResult(completion=found or Completion(values=[]))

    sdk.add_request_handler(server, "completion/complete", CompleteRequestParams, completion)
    sdk.add_request_handler(server, "resources/subscribe", SubscribeRequestParams, feed.subscribe)
    sdk.add_request_handler(
        server, "resources/unsubscribe", UnsubscribeRequestParams, feed.unsubscribe
    )

    def image(ext: str, mime: str) -> None:
        @server.resource(
            SCHEME + "{+path}/cells/{cell}/outputs/{output}." + ext,
            name=f"output_{ext}",
            description=f"A {mime} output of a cell, as a blob.",
            mime_type=mime,
        )
        @reg.resource
        async def read_image(path: str, caller: Caller, cell: str, output: int) -> bytes:
            snap = await ws.notebooks.read(path, caller)
            _, cid, out = _output(snap, cell, output)
            data = (out.get("data") or {}).get(mime)
            if not isinstance(data, str | list):
                raise InvalidArgument(
                    f"output {output} of cell {cid!r} has no {mime} data.",
                    hint=f"Its formats: {', '.join(out.get('data') or {}) or 'none'}.",
                )
            text = "".join(data) if isinstance(data, list) else data
            if mime == "image/svg+xml":
                return text.encode("utf-8")
            try:
                return base64.b64decode(text)
            except ValueError as exc:
                raise NotebookInvalid(
                    f"output {output} of cell {cid!r}: its {mime} data is not valid base64 "
                    "(the image is damaged).",
                    hint="Run the cell again to make the image anew.",
                ) from exc

    for ext, mime in IMAGE_EXTENSIONS.items():
        image(ext, mime)

    @server.resource(
        SCHEME + "{+path}/cells/{cell}/outputs/{output}",
        name="output",
        description="One output of a cell with its whole text; images are linked by URI.",
        mime_type="application/json",
    )
    @reg.resource
    async def read_output(path: str, caller: Caller, cell: str, output: int) -> str:
        snap = await ws.notebooks.read(path, caller)
        i, cid, out = _output(snap, cell, output)
        ot = render.output_text(out)
        data: dict[str, Any] = {
            "path": snap.path,
            "version": snap.version,
            "index": i,
            "id": cid,
            "output": output,
            "type": ot.kind,
            "text": ot.text,
        }
        if out.get("output_type") == "stream":
            data["name"] = out.get("name", "stdout")
        images = [m for m in IMAGE_EXTENSIONS.values() if m in (out.get("data") or {})]
        if images:
            data["images"] = {m: output_uri(snap.path, cid, output, m) for m in images}
        if ot.mimes:
            data["mimes"] = list(ot.mimes)
        return _json(data)

    @server.resource(
        SCHEME + "{+path}/cells/{cell}",
        name="cell",
        description="One cell: source, metadata, outputs (as read_cell returns it).",
        mime_type="application/json",
    )
    @reg.resource
    async def read_cell(path: str, caller: Caller, cell: str) -> str:
        snap = await ws.notebooks.read(path, caller)
        i = resolve_one(snap.notebook.ids, cell)
        budget = render.Budget(ws.settings.output_budget, ws.settings.output_budget)
        # As read_cell returns it; an image says how to get it only where read_output exists.
        pointer = snap.path if ws.settings.profile == "canonical" else None
        view = results.cell_view(snap.notebook.cells[i], i, full=True, budget=budget, path=pointer)
        note = results.OUTSIDE_NOTE if snap.changed_outside else None
        return _json(results.CellRead(path=snap.path, version=snap.version, cell=view, note=note))

    @server.resource(
        SCHEME + "{+path}/changes{?since}",
        name="changes",
        description="Recent changes to a notebook by cell id (added, removed, edited, outputs, "
        "moved), recorded while a client listens; ?since=VERSION gives the later ones.",
        mime_type="application/json",
    )
    @reg.resource
    async def read_changes(path: str, caller: Caller, since: str | None = None) -> str:
        rel = ws.notebooks.relative(path)
        snap = await ws.notebooks.read(rel, caller)
        data: dict[str, Any] = {
            "path": rel,
            "version": snap.version,
            "changes": feed.changes_of(rel, since),
        }
        if not feed.listening(rel):
            data["note"] = "Changes are recorded while a client listens to this notebook's URIs."
        return _json(data)

    @server.resource(
        SCHEME + "{+path}/export.pdf",
        name="export_pdf",
        description="The notebook printed to PDF (with outputs).",
        mime_type="application/pdf",
    )
    @reg.resource
    async def read_pdf(path: str, caller: Caller) -> bytes:
        done = await ws.transfer.export_notebook(path, caller, "pdf")
        return done.exported.data

    @server.resource(
        SCHEME + "{+path}/history",
        name="history",
        description="Executions of the notebook's cells, oldest first: job, cell, code, status, "
        "start time, seconds, execution count.",
        mime_type="application/json",
    )
    @reg.resource
    async def read_history(path: str, caller: Caller) -> str:
        rel = ws.notebooks.relative(path)
        await ws.notebooks.read(rel, caller)  # the notebook must exist
        return _json({"path": rel, "executions": ws.runs.execution_history(rel)})

    @server.resource(
        SCHEME + "{+path}",
        name="notebook",
        description="A notebook: version and an overview of every cell (as read_notebook).",
        mime_type="application/json",
    )
    @reg.resource
    async def read_state(path: str, caller: Caller) -> str:
        return _json(notebook_state(ws, await ws.notebooks.read(path, caller)))
