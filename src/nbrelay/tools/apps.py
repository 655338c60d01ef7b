"""MCP Apps (the ``io.modelcontextprotocol/ui`` extension): a notebook view hosts show in the chat.

``read_notebook`` and ``execute`` point at ``ui://nbrelay/notebook.html`` (``_meta.ui`` on the
tool). For a client that negotiated the extension, their results carry the notebook's cells,
sources, outputs (text, HTML tables, images, errors) and execution counts in the result's
``_meta`` under ``VIEW_KEY``: the host hands the result to the view, and ``_meta`` is not text the
model reads, so the view costs the agent nothing. Every other client gets exactly today's result
(no ``_meta``, no extra bytes).

The view is one self-contained HTML file (package data): no network fetches, no external
scripts, styles or fonts. It renders markdown and math as JupyterLab does, with two small
libraries vendored in ``tools/vendor/`` (``scripts/vendor-view``) and inlined into the page:
marked (the markdown parser JupyterLab uses) and Temml (LaTeX to MathML, which the browser draws
with no fonts to fetch). Whatever the notebook holds (HTML outputs, markdown, math) is rebuilt in
the page from allow-lists: no script, event handler or URL but data: images survives, and the
page's CSP allows only its own inline code and data: images.

While a run goes on, the view updates itself: the host hands it the call's arguments
(``ui/notifications/tool-input``) long before the result, and the view polls ``notebook_view``
(``POLL_TOOL``) through the host (``tools/call``, a host with ``serverTools``) until the run is
over. That tool is listed with ``visibility: ["app"]``, so hosts keep it from the model; it reads
with ``Notebooks.peek`` (the view's reads never count as the agent's) and reports which cells are
queued or running. Outputs reach the notebook while a cell runs (at most every 2 s), so the view
shows them as they come.

Profiles: ``VIEW_TOOLS`` says which of a profile's tools show the view and where their
arguments name the notebook. ``extension(profile, tools)`` stamps ``_meta.ui`` on those tools,
adds their results' view data when the client shows views, and lists ``notebook_view`` for the
profile. A profile whose tools take no notebook path (notebook-lr acts on its current notebook)
says which notebook that is (``Registrar.current_notebook``); ``with_view(ctx, result, snapshot)``
serves a tool that holds the snapshot already.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

from mcp.server.apps import Apps, ResourceCsp, client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NbrelayError
from nbrelay.notebook.text import clean_text
from nbrelay.stores.base import Snapshot
from nbrelay.tools import sdk
from nbrelay.tools._boundary import Registrar, compact_json, to_result
from nbrelay.tools.arguments import NbPath

if TYPE_CHECKING:
    from mcp.server.mcpserver.tools import Tool

    from nbrelay.kernels.jobs import Job
    from nbrelay.workspace import Workspace

VIEW_URI = "ui://nbrelay/notebook.html"
VIEW_META: dict[str, Any] = {"ui": {"resourceUri": VIEW_URI}}
VIEW_KEY = "io.github.nbrelay/notebook"
POLL_TOOL = "notebook_view"
POLL_META: dict[str, Any] = {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}}

# Where a tool's arguments name its notebook: (argument, suffix), e.g. srcbook's session ids are
# the notebook's path without ".ipynb".
PathArg = tuple[str, str]
# A profile's tools that show the view: tool name -> where its arguments name the notebook, or
# None for a tool that attaches the view itself (``attach``). The canonical tools attach it
# themselves (read_notebook, execute).
VIEW_TOOLS: dict[str, dict[str, PathArg | None]] = {
    "ipynb-mcp": {"get_formatted_content": ("filepath", "")},
    "jupyter-mcp-server": {"execute_cell": None, "insert_execute_code_cell": None},
    "jupyterlab-rtc": {
        "read_nb_cells": ("path", ""),
        "modify_nb_cells": ("path", ""),
        "insert_nb_cells": ("path", ""),
    },
    "mcp-jupyter": {
        "query_notebook": ("notebook_path", ""),
        "execute_notebook_code": ("notebook_path", ""),
    },
    "notebook-lr": {"list_cells": None, "execute_cell": None, "execute_all": None},
    "srcbook": {"cell_execute": ("session_id", ".ipynb")},
}

# What one result may carry to the view: beyond these, outputs are cut or replaced by a note.
_MAX_TEXT = 20_000  # characters per text output
_MAX_IMAGE = 2_000_000  # base64 characters per image
_MAX_TOTAL = 8_000_000  # characters for the whole view
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")


def _path_args() -> list[PathArg]:
    found = {("path", "")}
    for tools in VIEW_TOOLS.values():
        found.update(where for where in tools.values() if where is not None)
    return sorted(found)


# The renderers the page inlines (tools/vendor/, written by scripts/vendor-view).
VENDORED = {"marked": "marked.umd.js", "temml": "temml.min.js"}
_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.MULTILINE)


def _vendored(name: str) -> str:
    code = resources.files("nbrelay.tools").joinpath("vendor", VENDORED[name]).read_text("utf-8")
    code = _SOURCE_MAP.sub("", code)  # nothing for a browser to fetch, even with devtools open
    if re.search(r"<(/?)script", code, re.IGNORECASE):
        raise RuntimeError(f"tools/vendor/{VENDORED[name]} cannot be inlined in a <script>")
    return code


@cache
def view_html() -> str:
    """The view's page: the renderers inlined, told which call arguments name the notebook
    (to poll during a run)."""
    page = resources.files("nbrelay.tools").joinpath("notebook_view.html").read_text("utf-8")
    for name in VENDORED:
        page = page.replace(
            f"<script>/*VENDOR:{name}*/</script>", f"<script>{_vendored(name)}</script>"
        )
    return page.replace("/*PATH_ARGS*/[]", json.dumps(_path_args()))


class NotebookApps(Apps):
    """The Apps extension for a compatibility profile: its view tools get ``_meta.ui`` and, for
    clients that show views, their results get the view's data."""

    def __init__(
        self,
        views: Mapping[str, PathArg | None],
        *,
        slash_is_root: bool = False,
        current: Callable[[], str] | None = None,
    ) -> None:
        super().__init__()
        self.views = dict(views)
        self.slash_is_root = slash_is_root  # jupyterlab-rtc: "/a.ipynb" is a.ipynb in the root
        self.current = current  # the notebook path-less tools act on (notebook-lr)

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        result = await call_next(ctx)
        if (
            params.name not in self.views
            or not isinstance(result, CallToolResult)
            or result.is_error
            or VIEW_KEY in (result.meta or {})
            or not _supports_apps(ctx)
        ):
            return result
        where = self.views[params.name]
        given: object
        if where is None:  # a path-less tool: the profile's current notebook
            if self.current is None:
                return result
            given, suffix = self.current(), ""
        else:
            name, suffix = where
            given = (params.arguments or {}).get(name)
        if not isinstance(given, str) or not given:
            return result
        ws, caller = _workspace(ctx), sdk.caller_of_request(ctx)
        path = (given.lstrip("/") if self.slash_is_root else given) + suffix
        try:
            snap = await ws.notebooks.peek(path, caller)
        except NbrelayError:  # mcp-jupyter adds ".ipynb" to a path without it
            if path.endswith(".ipynb"):
                return result
            try:
                snap = await ws.notebooks.peek(path + ".ipynb", caller)
            except NbrelayError:  # the tool said what it had to; the view stays as it was
                return result
        result.meta = {**(result.meta or {}), VIEW_KEY: notebook_view(snap)}
        return result


def extension(
    profile: str = "canonical",
    tools: Sequence[Tool] = (),
    *,
    current: Callable[[], str] | None = None,
) -> Apps:
    """The Apps extension serving the view. The canonical tools bind it through ``VIEW_META``
    themselves; for another profile, pass its registered ``tools`` and the ones ``VIEW_TOOLS``
    names get the view; its path-less tools show ``current()``, the notebook they act on. The
    view's own tool is registered with the profile's (``add_view_tool``)."""
    views = VIEW_TOOLS.get(profile, {})
    apps = (
        NotebookApps(views, slash_is_root=profile == "jupyterlab-rtc", current=current)
        if views
        else Apps()
    )
    for tool in tools:
        if tool.name in views:
            tool.meta = {**(tool.meta or {}), **VIEW_META}

    apps.add_html_resource(
        VIEW_URI,
        view_html(),
        name="notebook",
        title="Notebook",
        description="The notebook's cells, sources, outputs and execution counts.",
        csp=ResourceCsp(connect_domains=[], resource_domains=[]),
        prefers_border=True,
    )
    return apps


def add_view_tool(reg: Registrar, ws: Workspace, profile: str) -> None:
    """Register ``notebook_view``, the view's own tool, for a compatibility profile that shows
    the view (listed with visibility ["app"]: hosts that show views keep it from the model); the
    view polls it while a run goes on. Registered like the profile's tools, so ``--tools`` and
    the argument checks apply to it too. The canonical tool set lists its own
    (``tools.canonical.notebooks.notebook_view``)."""
    if profile not in VIEW_TOOLS:
        return
    slash_is_root = profile == "jupyterlab-rtc"

    @reg.tool(kind="read", name=POLL_TOOL, meta=POLL_META)
    async def notebook_view(path: NbPath, ctx: Context[Any]) -> Any:
        """For the MCP Apps view only."""
        path = path.lstrip("/") if slash_is_root else path
        return await poll(ctx, ws, sdk.caller_of(ctx), path)


async def views_for_apps_clients(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Middleware: a client that did not negotiate MCP Apps gets ``tools/list`` exactly as
    without the view (no view-only tool, no ``_meta.ui``): compatibility profiles list exactly
    their seed's tools, and the view costs such a client no bytes of context."""
    result = await call_next(ctx)
    if ctx.method != "tools/list" or _supports_apps(ctx):
        return result
    if isinstance(result, ListToolsResult):
        data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(result, dict):
        data = dict(result)
    else:
        return result
    tools = []
    for tool in data.get("tools") or []:
        meta = dict(tool.get("_meta") or {})
        ui = meta.pop("ui", None)
        if isinstance(ui, dict) and ui.get("visibility") == ["app"]:
            continue  # for views only
        if ui is not None:
            tool = {k: v for k, v in tool.items() if k != "_meta"} | (
                {"_meta": meta} if meta else {}
            )
        tools.append(tool)
    data["tools"] = tools
    return data


def wants_view(ctx: Context[Any] | None) -> bool:
    """Whether the calling client negotiated MCP Apps (and so shows the view)."""
    if ctx is None:
        return False
    try:
        return client_supports_apps(ctx)
    except (AttributeError, LookupError, ValueError):  # no request in flight
        return False


def _supports_apps(ctx: ServerRequestContext[Any, Any]) -> bool:
    try:
        return client_supports_apps(ctx)
    except (AttributeError, LookupError, ValueError):
        return False


def _workspace(ctx: ServerRequestContext[Any, Any]) -> Workspace:
    """The server's workspace (what its lifespan yields)."""
    return cast("Workspace", ctx.lifespan_context)


async def poll(
    ctx: Context[Any] | None, ws: Workspace, caller: Caller, path: str
) -> CallToolResult:
    """``notebook_view``: the notebook as it is now, and which of its cells are queued or
    running, for the view to show while a run goes on."""
    if not wants_view(ctx):
        raise InvalidArgument(
            f"{POLL_TOOL} serves the notebook view of MCP Apps hosts.",
            hint="To read the notebook, use read_notebook.",
        )
    snap = await ws.notebooks.peek(path, caller)
    state = run_state(ws.runs.jobs_of(snap.path))
    status = state["status"]
    summary = {"path": snap.path, "version": snap.version, "busy": bool(status)}
    data = notebook_view(snap, **state)
    return CallToolResult(
        content=[TextContent(text=compact_json(summary))],
        structured_content=summary,
        _meta={VIEW_KEY: data},
    )


def run_state(jobs: Iterable[Job]) -> dict[str, Any]:
    """``notebook_view``'s ``status`` and ``fresh`` for runs that go on: the cells they have
    queued or are running, and what they hold now for the cells they started (a finished cell's
    count and outputs reach the notebook at the run's next periodic save; until then the
    notebook shows it cleared)."""
    status: dict[str, str] = {}
    fresh: dict[str, tuple[list[dict[str, Any]], int | None]] = {}
    for job in jobs:
        for cell in job.cells:
            if cell.id is None:
                continue
            if cell.status in ("queued", "running"):
                status[cell.id] = cell.status
            if cell.status not in ("queued", "skipped", "cancelled"):
                fresh[cell.id] = (job.cell_outputs(cell), cell.execution_count)
    return {"status": status, "fresh": fresh}


def with_view(ctx: Context[Any] | None, value: Any, snap: Snapshot, **extra: Any) -> Any:
    """``value`` (a tool's return) with the notebook view in its ``_meta`` if the client shows
    views; unchanged otherwise."""
    if not wants_view(ctx):
        return value
    result = to_result(value)
    if not isinstance(result, CallToolResult):
        return value
    data = notebook_view(snap, **extra)
    result.meta = {**(result.meta or {}), VIEW_KEY: data}
    return result


def notebook_view(
    snap: Snapshot,
    *,
    ran: list[str] | None = None,
    status: Mapping[str, str] | None = None,
    fresh: Mapping[str, tuple[list[dict[str, Any]], int | None]] | None = None,
) -> dict[str, Any]:
    """The view's data: every cell with its source, execution count and outputs (a markdown
    cell with the images it shows from its attachments); ``status``: the cells a run has queued
    or is running (by id); ``fresh``: outputs and counts a run holds that the notebook does not
    show yet (by id)."""
    budget = [_MAX_TOTAL]
    cells = []
    for cell in snap.notebook.cells:
        source = str(cell.get("source", ""))
        budget[0] -= len(source)
        entry: dict[str, Any] = {
            "id": cell.get("id"),
            "type": cell.get("cell_type", "code"),
            "source": source,
        }
        if entry["type"] == "code":
            outputs, count = (fresh or {}).get(
                str(cell.get("id")), (cell.get("outputs") or [], cell.get("execution_count"))
            )
            entry["count"] = count
            entry["outputs"] = [_output(o, budget) for o in outputs]
        elif entry["type"] == "markdown" and cell.get("attachments"):
            entry["attachments"] = _attachments(source, cell["attachments"], budget)
        cells.append(entry)
    return {
        "path": snap.path,
        "version": snap.version,
        "language": snap.notebook.language or "python",
        "cells": cells,
        "ran": ran or [],
        "status": dict(status or {}),
        "busy": bool(status),
    }


def _text(value: Any) -> str:
    text = "".join(value) if isinstance(value, list) else str(value or "")
    return clean_text(text)


def _cut(text: str, budget: list[int]) -> str:
    limit = min(_MAX_TEXT, max(budget[0], 0))
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    budget[0] -= len(text)
    return text


def _output(out: dict[str, Any], budget: list[int]) -> dict[str, Any]:
    kind = out.get("output_type")
    if kind == "stream":
        return {
            "kind": "stream",
            "name": out.get("name", "stdout"),
            "text": _cut(_text(out.get("text")), budget),
        }
    if kind == "error":
        trace = _ANSI.sub("", "\n".join(_text(line) for line in out.get("traceback") or []))
        return {
            "kind": "error",
            "ename": str(out.get("ename", "")),
            "evalue": str(out.get("evalue", "")),
            "traceback": _cut(trace, budget),
        }
    data = out.get("data") or {}
    for mime in _IMAGES:
        if mime in data:
            raw = _image_data(mime, data[mime])
            if len(raw) <= min(_MAX_IMAGE, budget[0]):
                budget[0] -= len(raw)
                return {"kind": "image", "mime": mime, "data": raw}
            return {
                "kind": "text",
                "text": f"[{mime} image, {len(raw) * 3 // 4} bytes: too large for the view]",
            }
    if "text/html" in data:
        return {"kind": "html", "html": _cut(_text(data["text/html"]), budget)}
    if "text/markdown" in data:
        return {"kind": "markdown", "text": _cut(_text(data["text/markdown"]), budget)}
    if "text/latex" in data:
        return {"kind": "latex", "text": _cut(_text(data["text/latex"]), budget)}
    if "text/plain" in data:
        return {"kind": "text", "text": _cut(_text(data["text/plain"]), budget)}
    return {"kind": "text", "text": f"[{', '.join(sorted(data)) or kind} output]"}


def _attachments(source: str, attachments: Any, budget: list[int]) -> dict[str, Any]:
    """The images of a markdown cell's attachments that its source shows (``attachment:NAME``),
    within the view's budget."""
    shown: dict[str, Any] = {}
    if not isinstance(attachments, dict):
        return shown
    for name, bundle in attachments.items():
        if f"attachment:{name}" not in source or not isinstance(bundle, dict):
            continue
        for mime in _IMAGES:
            if mime in bundle:
                raw = _image_data(mime, bundle[mime])
                if len(raw) <= min(_MAX_IMAGE, budget[0]):
                    budget[0] -= len(raw)
                    shown[str(name)] = {"mime": mime, "data": raw}
                break
    return shown


def _image_data(mime: str, value: Any) -> str:
    """An image of a MIME bundle as base64 (SVG is stored as text)."""
    raw = _text(value)
    if mime == "image/svg+xml":
        raw = base64.b64encode(raw.encode("utf-8")).decode("ascii")
    return "".join(raw.split())
