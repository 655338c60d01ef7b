"""The notebooks of the Jupyter Server nbrelay runs in, edited in process.

With jupyter-collaboration, every notebook nbrelay works on is in a room: the one a person
with the notebook open in JupyterLab is in, or, for a notebook open nowhere, one nbrelay opens in
the server as a browser tab would (and closes again once it has been idle for ``idle_close``
seconds with nobody in it). The room's Yjs document lives in this process, so an edit is a
granular CRDT transaction on it (``notebook.ydoc``, the same operations live mode sends over a
WebSocket), which every person in the room sees at once; the room saves the file itself shortly
after (``flush`` saves at once). Without jupyter-collaboration, notebooks are read and written
through the server's contents manager (``stores.contents`` over ``ServerContents``), as the
REST API would. Every operation asks Jupyter's authorizer first (``contents`` read or write).

Versions, and the guard on edits by position, follow live mode (``stores.rtc``): a room's version
is the hash of the notebook as nbformat would write it; an edit by position is refused when
someone else inserted, deleted or moved cells since the caller's last read.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
import pycrdt

from nbrelay.errors import NotebookExists, NotebookNotFound, act
from nbrelay.extension.access import require
from nbrelay.extension.contents import ServerContents
from nbrelay.notebook import validate
from nbrelay.notebook.edits import Edit, Plan, UpdateCell
from nbrelay.notebook.model import Notebook, serialize, version_of
from nbrelay.notebook.ydoc import apply_edits, notebook_from_doc, replace_all
from nbrelay.stores.base import Capabilities, EditOutcome, Entry, Planner, Snapshot
from nbrelay.stores.contents import NOT_LIVE_NOTE, ContentsStore, Paths
from nbrelay.stores.editing import LockedEdits, Readers
from nbrelay.stores.live_extras import ContentsDocuments
from nbrelay.stores.paths import Glob

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

logger = logging.getLogger("nbrelay.extension")

# (server path, open one if none) -> the room's jupyter_ydoc document, or None.
RoomFinder = Callable[[str, bool], Awaitable[Any]]
# (server path) -> None: close a room nbrelay opened, unless someone is in it.
RoomCloser = Callable[[str], Awaitable[None]]


class _Doc:
    """A room's Yjs document, seen through the roots a notebook uses."""

    def __init__(self, ydoc: pycrdt.Doc[Any]) -> None:
        self.ydoc = ydoc
        self.ymeta: pycrdt.Map[Any] = ydoc.get("meta", type=pycrdt.Map)
        self.ycells: pycrdt.Array[Any] = ydoc.get("cells", type=pycrdt.Array)


def _without_run_state(planner: Planner) -> Planner:
    """A planner whose edits carry no ``execution_state`` (JupyterLab's run state lives in a
    room, never in a file: nbformat refuses it)."""

    def plan(nb: Notebook) -> Plan:
        made = planner(nb)
        kept: list[Edit] = []
        for edit in made.edits:
            if isinstance(edit, UpdateCell) and (
                "execution_state" in edit.changes or "execution_state" in edit.remove
            ):
                changes = {k: v for k, v in edit.changes.items() if k != "execution_state"}
                remove = tuple(k for k in edit.remove if k != "execution_state")
                if not changes and not remove:
                    continue
                edit = replace(edit, changes=changes, remove=remove)
            kept.append(edit)
        return replace(made, edits=tuple(kept))

    return plan


class ServerStore(LockedEdits):
    """Notebooks of this Jupyter Server: its rooms when open, its contents manager otherwise."""

    mode = "live"

    def __init__(
        self,
        contents_manager: Any,
        *,
        rooms: RoomFinder | None = None,
        save_room: Callable[[str], Awaitable[None]] | None = None,
        close_room: RoomCloser | None = None,
        idle_close: float = 120.0,
        folder: str = "",
    ) -> None:
        self.api = ServerContents(contents_manager)
        self.paths = Paths(folder)
        self.contents = ContentsStore(self.api, folder=folder)
        self._rooms = rooms
        self._save_room = save_room
        self._close_room = close_room
        self.idle_close = idle_close
        self._opened: dict[str, float] = {}  # rooms nbrelay opened: server path -> last use
        # The snapshot of each room's document until its next transaction, and the documents
        # observed for that.
        self._snapshots: dict[str, tuple[pycrdt.Doc[Any], Snapshot]] = {}
        self._watched: dict[str, pycrdt.Doc[Any]] = {}
        self._seen = Readers()
        # Running cells' outputs are written this often: into the room (people see them
        # stream), or into the file of a notebook nobody has open.
        self.output_interval = 0.25 if rooms is not None else 2.0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            documents=ContentsDocuments(self.api, self.paths),
            live_outputs=self._rooms is not None,
            output_interval=self.output_interval,
            background=self.attach if self._rooms is not None else None,
        )

    def attach(self, tg: TaskGroup) -> None:
        """Close idle rooms nbrelay opened, in the workspace's task group."""
        tg.start_soon(self._reap_idle)

    async def _reap_idle(self) -> None:
        while True:
            await anyio.sleep(min(10.0, max(self.idle_close / 4, 0.05)))
            now = time.monotonic()
            for path, used in list(self._opened.items()):
                if now - used > self.idle_close and self._close_room is not None:
                    self._opened.pop(path, None)
                    self._snapshots.pop(self.paths.back(path), None)
                    self._watched.pop(self.paths.back(path), None)
                    try:
                        await self._close_room(path)
                    except Exception:  # housekeeping never takes the server down
                        logger.exception("closing the room of %s failed", path)

    def relative(self, path: str) -> str:
        return self.paths.relative(path)

    async def _room(self, rel: str, *, open_one: bool = True) -> _Doc | None:
        """The notebook's room (opened if ``open_one`` and there is none), or None without
        jupyter-collaboration or when the file is not a notebook the room can load."""
        if self._rooms is None:
            return None
        full = self.paths.server(rel)
        document = await self._rooms(full, False)
        if document is None and open_one:
            if not await self.api.exists(full):
                raise NotebookNotFound(f"notebook {rel!r} does not exist.", hint=act("missing"))
            try:
                document = await self._rooms(full, True)
            except Exception as exc:  # the contents manager says what is wrong with the file
                logger.info("no room for %s: %s", full, exc)
                return None
            self._opened[full] = time.monotonic()
        elif full in self._opened:
            self._opened[full] = time.monotonic()
        ydoc = getattr(document, "ydoc", None)
        return _Doc(ydoc) if isinstance(ydoc, pycrdt.Doc) else None

    def _snapshot(self, rel: str, room: _Doc, *, valid: bool = False) -> tuple[Snapshot, list[str]]:
        """The room's notebook, kept until the document's next transaction (anyone's). After
        an edit of nbrelay's own on a valid snapshot (``valid``), the new one is not validated
        again: the edit's cells were validated before it was applied, and validating every cell
        was most of an edit's time."""
        cached = self._snapshots.get(rel)
        if cached is not None and cached[0] is room.ydoc:
            return cached[1], list(cached[1].notebook.ids)
        nb = notebook_from_doc(room.ymeta, room.ycells, name=rel)
        snap = Snapshot(
            path=rel,
            notebook=nb,
            version=version_of(serialize(nb)),
            problems=() if valid else tuple(validate.problems(nb)),
        )
        if self._watched.get(rel) is not room.ydoc:
            self._watched[rel] = room.ydoc

            def changed(_event: Any) -> None:
                self._snapshots.pop(rel, None)

            room.ydoc.observe(changed)
        self._snapshots[rel] = (room.ydoc, snap)
        return snap, list(nb.ids)

    # -- reading -------------------------------------------------------------------------

    async def list(self, folder: str, *, recursive: bool) -> builtins.list[Entry]:
        return await self.contents.list(folder, recursive=recursive)

    async def find(
        self,
        folder: str,
        *,
        recursive: bool = True,
        glob: Glob | None = None,
        limit: int | None = None,
    ) -> builtins.list[Entry]:
        return await self.contents.find(folder, recursive=recursive, glob=glob, limit=limit)

    async def scan(self, path: str) -> Snapshot:
        return await self.peek(path)

    async def load(self, path: str) -> Snapshot:
        rel = self.relative(path)
        await require("read", "contents")
        room = await self._room(rel)
        if room is None:
            return await self.contents.load(rel)
        snap, order = self._snapshot(rel, room)
        return self._seen.observe(rel, snap, order)

    async def peek(self, path: str) -> Snapshot:
        rel = self.relative(path)
        await require("read", "contents")
        room = await self._room(rel, open_one=False)  # watching opens no room
        if room is None:
            return await self.contents.peek(rel)
        return self._snapshot(rel, room)[0]

    # -- writing -------------------------------------------------------------------------

    async def _edit_target(self, path: str) -> tuple[str, str]:
        rel = self.relative(path)
        await require("write", "contents")
        return rel, rel

    async def _edit_locked(
        self, rel: str, key: str, planner: Planner, expected: str | None, guard_positions: bool
    ) -> EditOutcome:
        room = await self._room(rel)
        if room is None:
            outcome = await self.contents.edit(
                rel,
                _without_run_state(planner),
                expected_version=expected,
                guard_positions=guard_positions,
            )
            if self._rooms is None:
                return outcome
            # With jupyter-collaboration, a notebook open in a browser has a room: one
            # without a room is open nowhere, so the file is the whole truth.
            return replace(outcome, notes=tuple(n for n in outcome.notes if n != NOT_LIVE_NOTE))
        # From here to the transaction nothing awaits: no one else can change the room.
        before, order = self._snapshot(rel, room)
        before, plan, after_nb, outside = self._seen.plan_in_room(
            before, order, planner, expected, guard_positions
        )
        if after_nb is None:
            return EditOutcome(before, before, plan, changed_outside=outside)
        apply_edits(room.ydoc, room.ycells, order, plan.edits, room.ymeta)
        after, after_order = self._snapshot(rel, room, valid=not before.problems)
        self._seen.remember(rel, after, after_order)
        return EditOutcome(before, after, plan, changed_outside=outside)

    async def create(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        rel = self.relative(path)
        validate.check_notebook(notebook)
        await require("write", "contents")
        async with self.lock(rel):
            exists = await self.api.exists(self.paths.server(rel))
            if exists and not overwrite:
                raise NotebookExists(f"{rel!r} already exists.", hint=act("exists"))
            room = await self._room(rel) if exists else None
            if room is None:
                snap = await self.contents.create(rel, notebook, overwrite=overwrite)
                self._seen.remember(rel, snap, snap.notebook.ids)
                return snap
            replace_all(room.ydoc, room.ymeta, room.ycells, notebook)
            snap, order = self._snapshot(rel, room)
            self._seen.remember(rel, snap, order)
        await self.flush(rel)
        return snap

    async def flush(self, path: str) -> str | None:
        """Have the room save its file now (a notebook without a room is saved by each edit)."""
        rel = self.relative(path)
        await require("write", "contents")  # a save writes the room: others' edits too
        if self._save_room is None or await self._room(rel, open_one=False) is None:
            return None
        try:
            await self._save_room(self.paths.server(rel))
        except Exception as exc:  # the room reports its own save errors in the server log
            return f"{type(exc).__name__}: {exc}"
        return None

    async def save_opened(self) -> None:
        """Save the rooms nbrelay opened (the server is stopping: a room's pending save would be
        cancelled with it)."""
        if self._save_room is None:
            return
        for full in list(self._opened):
            try:
                await self._save_room(full)
            except Exception:
                logger.exception("saving %s failed", full)

    async def remove(self, path: str) -> None:
        rel = self.relative(path)
        await require("write", "contents")
        async with self.lock(rel):
            await self.contents.remove(rel)
            self._snapshots.pop(rel, None)
            self._seen.forget(rel)

    async def rename(self, src: str, dst: str, *, overwrite: bool, keep_source: bool) -> Snapshot:
        await require("write", "contents")
        if keep_source:
            snap = await self.load(src)
            return await self.create(dst, snap.notebook, overwrite=overwrite)
        src_rel = self.relative(src)
        async with self.lock(src_rel):
            moved = await self.contents.rename(src, dst, overwrite=overwrite, keep_source=False)
            self._snapshots.pop(src_rel, None)
            self._seen.forget(src_rel)
        return moved

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.contents.aclose()
