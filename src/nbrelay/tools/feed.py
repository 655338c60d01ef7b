"""The change feed: who listens to which notebook URIs, polling those notebooks, and telling
listening clients what changed.

A client that listens (``subscriptions/listen`` with resource URIs, or the older
``resources/subscribe``) gets ``notifications/resources/updated`` for the notebook URI, its
``changes`` URI, and the URIs of the cells and outputs that changed. The notebook files that have
listeners are polled (a ``stat`` every 0.2 s; a changed file is read and compared by cell id with
the version seen before), so edits by another nbrelay process or by a person in an editor are
reported as well as this server's own. The ``changes`` resource says what changed: cells added,
removed, edited, with new outputs, and whether cells moved.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import anyio
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from nbrelay.caller import Caller
from nbrelay.errors import AccessDenied, NbrelayError, NotebookNotFound
from nbrelay.notebook import changes
from nbrelay.notebook.model import Notebook
from nbrelay.timestamps import utc_iso
from nbrelay.tools import sdk
from nbrelay.tools.uris import notebook_of, notebook_uri
from nbrelay.workspace import Workspace

logger = logging.getLogger("nbrelay")

POLL_INTERVAL = 0.2
LOG_DEPTH = 100

# Notebooks that are files on this machine (one stat) are checked every round; notebooks on a
# Jupyter Server (live mode) at most this often each.
REMOTE_INTERVAL = 0.5
# Who polls the notebooks that have listeners: the server on its own, after a client's first
# look (``_start_watching``, for the client that asked to listen).
_POLLING = Caller.server("watching notebooks for the change feed")


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
                found.add(self.ws.notebooks.relative(path))
        return found

    async def _start_watching(self, uris: frozenset[str], caller: Caller) -> None:
        """Take a baseline of the notebooks ``uris`` name, so the first change is reported: a
        first look for ``caller``, who asked to listen. A caller who may not read one of them
        (in Jupyter: its authorizer refuses ``contents:read``) is refused the whole listen or
        subscription, as a read would be: the feed would otherwise tell them when it changes,
        and which cells."""
        for uri in uris:
            path = notebook_of(uri) or self._alias_of(uri)
            if path is None:
                continue
            try:
                rel = self.ws.notebooks.relative(path)
            except NbrelayError:
                continue
            try:
                if rel not in self._watched:
                    self._watched[rel] = _Watched()
                    await self._check(rel, caller)
                else:
                    await self._may_read(rel, caller)
            except AccessDenied as exc:
                raise MCPError(INVALID_PARAMS, f"{uri}: {exc.render()}") from exc

    async def _may_read(self, rel: str, caller: Caller) -> None:
        """Raise ``AccessDenied`` if ``caller`` may not read the notebook (a first look for it,
        which does not count as its read); any other trouble is the first look's to meet."""
        try:
            await self.ws.notebooks.peek(rel, caller)
        except AccessDenied:
            raise
        except NbrelayError:
            pass

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
            await self._start_watching(uris, sdk.caller_of_request(ctx))
            return await call_next(ctx)
        finally:
            self._streams.pop(token, None)

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        """``resources/subscribe`` (protocol versions before 2026-07-28)."""
        await self._start_watching(frozenset({str(params.uri)}), sdk.caller_of_request(ctx))
        self._legacy.setdefault(str(params.uri), {})[_connection(ctx)] = ctx.session
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
                    await self._check(rel, _POLLING)
                except Exception:  # one notebook's trouble must not stop the feed
                    logger.exception("change feed: checking %s failed", rel)

    async def _check(self, rel: str, caller: Caller) -> None:
        """Compare the notebook with what was seen last; record and publish a change. The
        first look only takes the baseline. Works on every store through ``peek`` for
        ``caller``, which does not count as its read."""
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
            snap = await self.ws.notebooks.peek(rel, caller)
        except NotebookNotFound:
            pass  # deleted: reported as such
        except AccessDenied:
            self._watched.pop(rel, None)  # taken for this caller, who may not: nothing to watch
            raise
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
    return sdk.connection_of(ctx.session) or ctx.session


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
