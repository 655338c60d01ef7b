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

Change feed: a client that listens (``subscriptions/listen`` with resource URIs, or the older
``resources/subscribe``) gets ``notifications/resources/updated`` for the notebook URI, its
``changes`` URI, and the URIs of the cells and outputs that changed. The notebook files that have
listeners are polled (a ``stat`` every 0.2 s; a changed file is read and compared by cell id with
the version seen before), so edits by another nbrelay process or by a person in an editor are
reported as well as this server's own. The ``changes`` resource says what changed: cells added,
removed, edited, with new outputs, and whether cells moved.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote, unquote

import anyio
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from nbrelay.errors import InvalidArgument, NbrelayError, NotebookInvalid, NotebookNotFound
from nbrelay.notebook import changes, render
from nbrelay.notebook.address import resolve_one
from nbrelay.notebook.model import Notebook
from nbrelay.stores.base import Snapshot
from nbrelay.timestamps import utc_iso
from nbrelay.tools import results
from nbrelay.workspace import Workspace

logger = logging.getLogger("nbrelay")

SCHEME = "nbrelay://notebook/"
POLL_INTERVAL = 0.2
LOG_DEPTH = 100
IMAGE_EXTENSIONS = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "svg": "image/svg+xml",
}
_EXT_OF = {mime: ext for ext, mime in IMAGE_EXTENSIONS.items()}
_NOTEBOOK_IN_URI = re.compile(r"^(.+?\.ipynb)(?:/|$)")
_P = ParamSpec("_P")
_T = TypeVar("_T")


def notebook_uri(path: str) -> str:
    return SCHEME + quote(path, safe="/")


def cell_uri(path: str, cell: str) -> str:
    return f"{notebook_uri(path)}/cells/{quote(cell, safe='')}"


def output_uri(path: str, cell: str, output: int, mime: str | None = None) -> str:
    base = f"{cell_uri(path, cell)}/outputs/{output}"
    return f"{base}.{_EXT_OF[mime]}" if mime in _EXT_OF else base


def changes_uri(path: str) -> str:
    return f"{notebook_uri(path)}/changes"


def history_uri(path: str) -> str:
    return f"{notebook_uri(path)}/history"


def export_uri(path: str, fmt: str = "pdf") -> str:
    return f"{notebook_uri(path)}/export.{fmt}"


def notebook_of(uri: str) -> str | None:
    """The notebook path a resource URI is about, or None for other URIs."""
    if not uri.startswith(SCHEME):
        return None
    found = _NOTEBOOK_IN_URI.match(uri[len(SCHEME) :])
    return unquote(found.group(1)) if found else None


# -- the change feed ------------------------------------------------------------------------


# Notebooks that are files on this machine (one stat) are checked every round; notebooks on a
# Jupyter Server (live mode) at most this often each.
REMOTE_INTERVAL = 0.5


@dataclass
class _Watched:
    """A notebook with listeners: what the feed saw last."""

    seen: bool = False
    version: str | None = None
    notebook: Notebook | None = None
    checked: float = 0.0


@dataclass
class ChangeFeed:
    """Tracks who listens to which notebook URIs, polls those notebooks, and publishes
    resource-updated events for the URIs a change touches."""

    ws: Workspace
    interval: float = POLL_INTERVAL
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    _streams: dict[object, frozenset[str]] = field(default_factory=dict)
    _legacy: dict[str, dict[object, Any]] = field(default_factory=dict)
    _watched: dict[str, _Watched] = field(default_factory=dict)
    _log: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)
    _aliases: list[Callable[[str], str | None]] = field(default_factory=list)

    def add_alias(self, resolve: Callable[[str], str | None]) -> None:
        """Let URIs of another scheme stand for a notebook (a profile's own resources): whoever
        listens to such a URI hears of every change to the notebook ``resolve`` maps it to."""
        self._aliases.append(resolve)

    def _alias_of(self, uri: str) -> str | None:
        return next((p for p in (resolve(uri) for resolve in self._aliases) if p), None)

    # which URIs have listeners

    def _uris(self) -> set[str]:
        found: set[str] = set(self._legacy)
        for uris in self._streams.values():
            found.update(uris)
        return found

    def _notebooks(self) -> set[str]:
        found: set[str] = set()
        for uri in self._uris():
            path = notebook_of(uri) or self._alias_of(uri)
            if path is None:
                continue
            with contextlib.suppress(NbrelayError):
                found.add(self.ws.relative(path))
        return found

    async def _start_watching(self, uris: frozenset[str]) -> None:
        """Take a baseline of the notebooks ``uris`` name, so the first change is reported."""
        for uri in uris:
            path = notebook_of(uri) or self._alias_of(uri)
            if path is None:
                continue
            with contextlib.suppress(NbrelayError):
                rel = self.ws.relative(path)
                if rel not in self._watched:
                    self._watched[rel] = _Watched()
                    await self._check(rel)

    async def middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Note the resource URIs of each ``subscriptions/listen`` stream while it is open."""
        if ctx.method != "subscriptions/listen" or ctx.request_id is None:
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, dict) else {}
        wanted = (params.get("notifications") or {}).get("resourceSubscriptions") or []
        uris = frozenset(u for u in wanted if isinstance(u, str))
        token = object()
        self._streams[token] = uris
        try:
            await self._start_watching(uris)
            return await call_next(ctx)
        finally:
            self._streams.pop(token, None)

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        """``resources/subscribe`` (protocol versions before 2026-07-28)."""
        self._legacy.setdefault(str(params.uri), {})[_connection(ctx)] = ctx.session
        await self._start_watching(frozenset({str(params.uri)}))
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        sessions = self._legacy.get(str(params.uri))
        if sessions is not None:
            sessions.pop(_connection(ctx), None)
            if not sessions:
                del self._legacy[str(params.uri)]
        return EmptyResult()

    # polling

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ChangeFeed]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._poll)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            wanted = self._notebooks()
            for rel in list(self._watched):
                if rel not in wanted:
                    del self._watched[rel]
            for rel in wanted:
                self._watched.setdefault(rel, _Watched())
                try:
                    await self._check(rel)
                except Exception:  # one notebook's trouble must not stop the feed
                    logger.exception("change feed: checking %s failed", rel)

    async def _check(self, rel: str) -> None:
        """Compare the notebook with what was seen last; record and publish a change. The
        first look only takes the baseline. Works on every store through ``peek``, which does
        not count as the agent's read."""
        watched = self._watched.get(rel)
        if watched is None:
            return
        now = time.monotonic()
        if self.ws.capabilities.files is None and now - watched.checked < REMOTE_INTERVAL:
            return
        watched.checked = now
        notebook: Notebook | None = None
        version: str | None = None
        try:
            snap = await self.ws.peek(rel)
        except NotebookNotFound:
            pass  # deleted: reported as such
        except NbrelayError:
            return  # unreadable for now (half-written, server busy): look again next round
        else:
            notebook, version = snap.notebook, snap.version
        if watched.seen and version == watched.version:
            return
        first = not watched.seen
        found = changes.diff(watched.notebook, notebook)
        watched.seen = True
        watched.version, watched.notebook = version, notebook
        if first or (found.empty and notebook is not None):
            return
        entry = self._record(rel, found, version)
        await self._publish(rel, found, entry)

    def _record(self, rel: str, found: changes.CellChanges, version: str | None) -> dict[str, Any]:
        log = self._log.setdefault(rel, deque(maxlen=LOG_DEPTH))
        previous = log[-1]["version"] if log else None
        entry: dict[str, Any] = {
            "version": version,
            "previous": previous,
            "at": utc_iso(time.time()),
        }
        if version is None:
            entry["deleted"] = True
        for name in ("added", "removed", "edited", "outputs"):
            ids = getattr(found, name)
            if ids:
                entry[name] = list(ids)
        if found.moved:
            entry["moved"] = True
        if found.metadata:
            entry["metadata"] = True
        log.append(entry)
        return entry

    async def _publish(self, rel: str, found: changes.CellChanges, entry: dict[str, Any]) -> None:
        base = notebook_uri(rel)
        for uri in sorted(self._uris()):
            if notebook_of(uri) is None and self._alias_of(uri) == rel:
                await self.bus.publish(ResourceUpdated(uri=uri))
                await self._notify_legacy(uri, entry)
                continue
            if notebook_of(uri) is None or not (uri == base or uri.startswith(base + "/")):
                continue
            if _affected(uri[len(base) :], found):
                await self.bus.publish(ResourceUpdated(uri=uri))
                await self._notify_legacy(uri, entry)

    async def _notify_legacy(self, uri: str, entry: dict[str, Any]) -> None:
        from mcp_types import ResourceUpdatedNotification, ResourceUpdatedNotificationParams

        note = ResourceUpdatedNotification(
            params=ResourceUpdatedNotificationParams(uri=uri, _meta={"nbrelay/change": entry})
        )
        for key, session in list(self._legacy.get(uri, {}).items()):
            try:
                with anyio.fail_after(5):
                    await session.send_notification(note)
            except Exception:  # a client that went away stops listening
                self._legacy.get(uri, {}).pop(key, None)

    async def announce(self, uri: str, entry: dict[str, Any]) -> None:
        """Tell whoever listens to ``uri`` that it changed, for resources that change without
        their notebook changing (srcbook's event log)."""
        if uri in self._uris():
            await self.bus.publish(ResourceUpdated(uri=uri))
            await self._notify_legacy(uri, entry)

    def changes_of(self, rel: str, since: str | None = None) -> list[dict[str, Any]]:
        log = list(self._log.get(rel, ()))
        if since:
            at = next((i for i, e in enumerate(log) if e["version"] == since), None)
            log = log[at + 1 :] if at is not None else log
        return log

    def listening(self, rel: str) -> bool:
        return rel in self._watched


def _connection(ctx: ServerRequestContext[Any, Any]) -> object:
    """The client connection a request came on (its session object is made per request)."""
    return getattr(ctx.session, "_connection", None) or ctx.session


def _affected(rest: str, found: changes.CellChanges) -> bool:
    """Whether the resource at ``<notebook URI><rest>`` changed with ``found``."""
    if rest in ("", "/changes") or rest.startswith("/changes?"):
        return True
    if rest == "/history":
        return bool(found.outputs)
    parts = rest.split("/")
    if len(parts) >= 3 and parts[1] == "cells":
        cell = unquote(parts[2])
        if len(parts) == 3:
            return found.touches(cell) or found.moved
        return cell in found.outputs or cell in found.added or cell in found.removed
    return False


# -- the resources -------------------------------------------------------------------------


def guarded(fn: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """A resource reader whose ``NbrelayError`` becomes a ``ResourceError``, whose message
    reaches the client (used by every profile's resources)."""

    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await fn(*args, **kwargs)
        except NbrelayError as exc:
            raise ResourceError(str(exc)) from exc

    return wrapper


def _json(model: Any) -> str:
    data = (
        model.model_dump(mode="json", exclude_none=True) if hasattr(model, "model_dump") else model
    )
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


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


def register(server: MCPServer[Any], ws: Workspace, feed: ChangeFeed) -> None:
    """Register the notebook resources on ``server`` and the legacy subscribe handlers."""
    low = server._lowlevel_server
    low.add_request_handler("resources/subscribe", SubscribeRequestParams, feed.subscribe)
    low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, feed.unsubscribe)

    def image(ext: str, mime: str) -> None:
        @server.resource(
            SCHEME + "{+path}/cells/{cell}/outputs/{output}." + ext,
            name=f"output_{ext}",
            description=f"A {mime} output of a cell, as a blob.",
            mime_type=mime,
        )
        @guarded
        async def read_image(path: str, cell: str, output: int) -> bytes:
            snap = await ws.read(path)
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
    @guarded
    async def read_output(path: str, cell: str, output: int) -> str:
        snap = await ws.read(path)
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
    @guarded
    async def read_cell(path: str, cell: str) -> str:
        snap = await ws.read(path)
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
    @guarded
    async def read_changes(path: str, since: str | None = None) -> str:
        rel = ws.relative(path)
        snap = await ws.read(rel)
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
    @guarded
    async def read_pdf(path: str) -> bytes:
        done = await ws.export_notebook(path, "pdf")
        return done.exported.data

    @server.resource(
        SCHEME + "{+path}/history",
        name="history",
        description="Executions of the notebook's cells, oldest first: job, cell, code, status, "
        "start time, seconds, execution count.",
        mime_type="application/json",
    )
    @guarded
    async def read_history(path: str) -> str:
        rel = ws.relative(path)
        await ws.read(rel)  # the notebook must exist
        return _json({"path": rel, "executions": ws.execution_history(rel)})

    @server.resource(
        SCHEME + "{+path}",
        name="notebook",
        description="A notebook: version and an overview of every cell (as read_notebook).",
        mime_type="application/json",
    )
    @guarded
    async def read_state(path: str) -> str:
        return _json(notebook_state(ws, await ws.read(path)))
