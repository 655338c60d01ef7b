"""The rooms of the live store: joining them, keeping them, leaving them.

A notebook's room is joined on first use (a collaboration session, then a synced document: see
``stores.yprotocol``) and kept while the agent works on it, so an edit costs no connection. A
room that dropped is never reused: the next call joins again on a fresh document and tells the
agent (``reconnected``). Rooms nobody used for ``idle_close`` seconds are saved and left, as are
all rooms when the server stops. While any room is open, the agent is listed among JupyterLab's
online collaborators (the global awareness room). The store operations are in ``stores.rtc``,
saving in ``stores.rtc_saving``. Also here: whether an edit sent before a connection dropped
reached the server (``landed``), and waiting for a just-created file's room (``settle``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

from nbrelay.errors import NbrelayError, NotebookNotFound, RemoteError, Unsupported, act
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook.edits import DeleteCells, InsertCells, SetMetadata, UpdateCell
from nbrelay.notebook.model import Notebook
from nbrelay.stores.base import EditOutcome
from nbrelay.stores.contents import ContentsStore, Paths
from nbrelay.stores.editing import LockedEdits, Readers
from nbrelay.stores.rtc_saving import save_room, saver
from nbrelay.stores.yprotocol import GLOBAL_AWARENESS, Room, RoomLost, agent_user

logger = logging.getLogger("nbrelay.rtc")


class RoomHost(LockedEdits):
    """The joined rooms of one Jupyter Server, by notebook path (see the module docstring)."""

    def __init__(
        self,
        api: JupyterAPI,
        *,
        agent_name: str = "nbrelay agent",
        folder: str = "",
        idle_close: float = 120.0,
        sync_timeout: float = 60.0,
        save_delay: float = 0.5,
        save_each_edit: bool = False,
    ) -> None:
        self.api = api
        self.paths = Paths(folder)
        self.contents = ContentsStore(api, folder=folder)
        self.user = agent_user(agent_name)
        self.idle_close = idle_close
        self.sync_timeout = sync_timeout
        # The file is saved this many seconds after the last edit (coalesced).
        self.save_delay = save_delay
        # Edits return once the server has them in the room, and the saver saves the file
        # after; with ``save_each_edit``, before each edit returns (``flush`` waits on demand).
        self.save_each_edit = save_each_edit
        # Running cells' outputs are written into the room this often (the workspace reads it).
        self.output_interval = 0.1
        # What each MCP session (reader) last saw: the guard against stale positions.
        self._seen = Readers()
        self._seen_reloads: dict[str, tuple[Room, int]] = {}
        self._rtc: bool | None = None
        self.mode = "live"  # "contents" once the server turns out to have no RTC
        self._rooms: dict[str, Room] = {}
        self._reconnected: set[str] = set()  # rooms joined again since the agent was told
        self._presence: Room | None = None
        self._presence_lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._closed = False
        # Every room started and not yet ended, listed or not: a room runs shielded until it is
        # closed, so one that no list holds (joined while the server stopped) would keep the
        # server's task group open forever. Closing the rooms closes these too.
        self._started: set[Room] = set()
        self._stopping = False  # the rooms were closed for good: start no new one

    def relative(self, path: str) -> str:
        return self.paths.relative(path)

    # -- lifetime -------------------------------------------------------------------------

    def attach(self, tg: TaskGroup) -> None:
        """Run the rooms' background tasks in ``tg`` (the workspace's, while the server runs)."""
        self._tg = tg
        self._stopping = False
        tg.start_soon(self._reap_idle)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """Host the background tasks in a task group of its own (for use without a workspace)."""
        async with anyio.create_task_group() as tg:
            self.attach(tg)
            try:
                yield self
            finally:
                self._stopping = True
                with anyio.CancelScope(shield=True):
                    await self._close_rooms()
                self._tg = None
                tg.cancel_scope.cancel()

    async def aclose(self) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._close_rooms()
            await self.api.aclose()

    async def _close_rooms(self) -> None:
        rooms = list(self._rooms.values())
        self._rooms.clear()
        if self._presence is not None:
            rooms.append(self._presence)
            self._presence = None
        for room in rooms:
            await self._leave(room)
        for room in list(self._started):  # rooms being joined, which no list holds yet
            await room.close()

    async def _leave(self, room: Room) -> None:
        """Save what nbrelay changed in the room if the saver has not yet, then leave it."""
        if room.alive and room.saved < room.edits and room.room_id != GLOBAL_AWARENESS:
            with anyio.move_on_after(10, shield=True), contextlib.suppress(RoomLost, NbrelayError):
                await save_room(room)
        await room.close()

    async def _reap_idle(self) -> None:
        """Leave rooms nobody used for ``idle_close`` seconds (and then the presence room); when
        the task group ends, save and leave every room (rooms outlive its cancellation for this:
        ``Room.run`` ends only when the room is closed)."""
        try:
            while True:
                await anyio.sleep(min(5.0, max(self.idle_close / 4, 0.05)))
                try:
                    await self._close_idle()
                except Exception:  # never let housekeeping take the server's task group down
                    logger.exception("closing idle rooms failed")
        finally:
            self._stopping = True
            with anyio.CancelScope(shield=True):
                await self._close_rooms()

    async def _close_idle(self) -> None:
        now = time.monotonic()
        for rel, room in list(self._rooms.items()):
            idle = now - room.last_used > self.idle_close
            if idle and not room.held and not room.lock.locked():
                self._rooms.pop(rel, None)
                await self._leave(room)
        if not self._rooms and self._presence is not None:
            presence, self._presence = self._presence, None
            await presence.close()

    # -- rooms ----------------------------------------------------------------------------

    async def _start(self, room: Room) -> None:
        if self._closed or self._stopping:
            raise RemoteError("nbrelay is shutting down; the notebook was not opened.")
        if self._tg is None:
            raise RemoteError(
                "live mode is not running (internal: the store was used outside running()).",
                hint="This is a bug in nbrelay; please report it.",
            )
        self._started.add(room)
        try:
            await self._tg.start(self._host, room)
        except BaseException:
            self._started.discard(room)
            raise

    async def _host(
        self, room: Room, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            await room.run(task_status=task_status)
        finally:
            self._started.discard(room)

    async def _room(self, rel: str) -> Room | None:
        """The synced room of a notebook, joining it if needed; None without RTC on the server."""
        if self._rtc is False:
            return None
        room = self._rooms.get(rel)
        if room is not None and room.alive:
            room.last_used = time.monotonic()
            return room
        if room is not None:
            self._rooms.pop(rel, None)
            if room.lost:
                self._reconnected.add(rel)
        full = self.paths.server(rel)
        if not await self.api.exists(full):
            raise NotebookNotFound(
                f"notebook {rel!r} does not exist.",
                hint=act("missing"),
            )
        session = await self.api.collaboration_session(full)
        if session is None:
            self._rtc = False
            self.mode = "contents"
            return None
        self._rtc = True
        room = Room(
            self.api,
            f"json:notebook:{session['fileId']}",
            session_id=str(session.get("sessionId") or ""),
            name=rel,
            user=self.user,
        )
        await self._start(room)
        try:
            await room.wait_synced(self.sync_timeout)
        except BaseException:
            await room.close()
            raise
        self._rooms[rel] = room
        if self._tg is not None:
            self._tg.start_soon(saver, room, self.save_delay)
        await self._announce(full)
        return room

    async def _announce(self, full: str) -> None:
        """Be listed among JupyterLab's online collaborators, working on ``full``."""
        async with self._presence_lock:
            presence = self._presence
            if presence is None or not presence.alive:
                presence = Room(
                    self.api,
                    GLOBAL_AWARENESS,
                    session_id=None,
                    name="presence",
                    user=self.user,
                    state={"current": f"notebook:{full}"},
                )
                try:
                    await self._start(presence)
                except NbrelayError as exc:
                    logger.info("presence unavailable: %s", exc)
                    return
                self._presence = presence
            else:
                presence.set_state("current", f"notebook:{full}")

    async def _drop(self, rel: str) -> None:
        room = self._rooms.pop(rel, None)
        if room is not None:
            await self._leave(room)

    # -- sessions -------------------------------------------------------------------------

    async def open_session(self, path: str) -> tuple[str, str]:
        """Join the notebook's room and keep it joined until ``close_session``; return the
        room's (session id, file id)."""
        rel = self.relative(path)
        async with self.lock(rel):
            room = await self._room(rel)
        if room is None:
            raise Unsupported(
                "this Jupyter Server has no real-time collaboration, so there is no live session "
                "to join.",
                hint="Install jupyter-collaboration on the server; the notebook tools work "
                "without it.",
            )
        room.held = True
        return room.session_id or "", room.room_id.rsplit(":", 1)[-1]

    async def close_session(self, path: str) -> bool:
        """Leave the notebook's room now (and JupyterLab's collaborator list once no room is
        left); False if the room was not joined."""
        rel = self.relative(path)
        async with self.lock(rel):
            if rel not in self._rooms:
                return False
            await self._drop(rel)
        async with self._presence_lock:
            if not self._rooms and self._presence is not None:
                presence, self._presence = self._presence, None
                await presence.close()
        return True


def landed(outcome: EditOutcome, now: Notebook) -> bool:
    """Whether the notebook as the server has it now contains an edit's effects."""
    cells = {c["id"]: c for c in now.cells}
    meant = {c["id"]: c for c in outcome.after.notebook.cells}
    order = [c["id"] for c in now.cells]
    for edit in outcome.plan.edits:
        if isinstance(edit, InsertCells):
            if any(c["id"] not in cells for c in edit.cells):
                return False
        elif isinstance(edit, DeleteCells):
            if any(cid in cells for cid in edit.ids):
                return False
        elif isinstance(edit, UpdateCell):
            if edit.id not in cells or edit.id not in meant:
                return False
            if any(cells[edit.id].get(k) != meant[edit.id].get(k) for k in edit.changes):
                return False
        elif isinstance(edit, SetMetadata):
            have_meta = now.data.get("metadata") or {}
            if any(have_meta.get(k) != v for k, v in edit.changes.items()):
                return False
            if any(k in have_meta for k in edit.remove):
                return False
        else:
            want = [cid for cid in (c["id"] for c in outcome.after.notebook.cells) if cid in order]
            have = [cid for cid in order if cid in meant]
            if want != have:
                return False
    return True


async def settle(room: Room, rel: str, notebook: Notebook, within: float = 10.0) -> None:
    """Wait until a just-created file's room shows it: a room the server still kept for an
    earlier file at the same path is reloaded from the new file within about a second."""
    want = [(c["id"], c.get("source", "")) for c in notebook.cells]
    deadline = time.monotonic() + within
    while True:
        await room.barrier()
        have = [(c["id"], c.get("source", "")) for c in room.snapshot()[0].cells]
        # JupyterLab shows a notebook without cells as one empty code cell.
        if have == want or (not want and len(have) == 1 and have[0][1] == ""):
            return
        if time.monotonic() > deadline:
            raise RemoteError(
                f"the Jupyter Server still shows an older notebook at {rel!r} after creating "
                "it (it keeps a closed notebook in memory for a while).",
                hint=act("read_later"),
            )
        await anyio.sleep(0.2)
