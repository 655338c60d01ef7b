"""The rooms of the room store: reached through a way in, kept, left, saved.

The room store (``stores.rtc``) works on notebooks in jupyter-collaboration's rooms. How it
reaches a room is its **way in** (``RoomWay``): over a WebSocket, as a browser tab does (live mode,
``stores.rtc_websocket``), or in the Jupyter Server's own process (the server extension,
``extension.store``). Everything else is here, once for both:

* A notebook's room is joined on first use and kept while the agent works on it, so an edit
  costs no connection. A room that ended is never reused: the next call joins again on a fresh
  document and tells the agent.
* Edits the server acknowledged but may not have saved when a room ended (the server stopped or
  crashed) are recovered into the fresh room: what nothing else changed since is applied again,
  the rest is named to the agent (``rtc_saving.recover``). A room whose connection dropped with
  such edits is joined again as soon as the server answers, without waiting for a call.
* When the server reloads a room from its file (the file changed on disk; or a save the server
  failed wrote the file and left it newer than the server recorded, which its next save takes
  for a change from outside), nbrelay's acknowledged edits the file did not hold are recovered
  the same way, in the room as reloaded (``_follow_reloads``).
* One saver per room saves the file shortly after nbrelay's edits (``rtc_saving.saver``).
* Rooms nobody used for ``idle_close`` seconds are saved and left, as are all rooms when nbrelay
  stops; ``save_all`` saves every room with unsaved edits without leaving it, for a server that
  is about to let its rooms go.
* Open sessions (``open_session``) keep a room joined however idle.
* Who may: each operation of the store is handed its caller and asks the store's access check
  about it first (``allow``: in process, Jupyter's authorizer). The rooms' own work that follows
  (the saver, rejoining to recover, leaving idle rooms, ``save_all``) asks no one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Self

import anyio
from anyio.abc import TaskGroup

from nbrelay.caller import Caller
from nbrelay.errors import NbrelayError, NotebookNotFound, RemoteError, Unsupported, act
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.ydoc import placeholder
from nbrelay.stores.base import EditOutcome, Snapshot
from nbrelay.stores.contents import ContentsStore, Paths
from nbrelay.stores.editing import LockedEdits, Readers
from nbrelay.stores.rtc_room import RoomLost, SharedRoom
from nbrelay.stores.rtc_saving import (
    Recovery,
    Unsaved,
    keep,
    recover,
    recovery_note,
    save_room,
    saver,
)
from nbrelay.stores.shelf import Shelf

logger = logging.getLogger("nbrelay.rtc")

# Seconds after the server said it reloads a room at which nbrelay looks for its own edits the
# reload discarded (each delay after the last look).
RELOAD_LOOKS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
# Seconds before nbrelay asks again for the room of a notebook the server could not load into one.
UNLOADABLE_RETRY = 60.0

# Asked before each operation of the store, with the caller it is done for and "read" or "write".
Access = Callable[[Caller, str], Awaitable[None]]
# What the store reads on its own, below the operations that ask (a room's file, as it joins).
_OWN_READS = Caller.server("the room store reading the file of a room it joins")


class Unloadable(Exception):
    """Raised by ``RoomWay.join``: the server cannot load this notebook into a room (what is in
    the file, not a passing fault); the contents API serves it, and its room is not asked for
    again for ``UNLOADABLE_RETRY`` seconds."""


class RoomWay(ABC):
    """How the room store reaches jupyter-collaboration's rooms."""

    name = ""
    # Whether the server has real-time collaboration (None until the first notebook tells).
    rtc: bool | None = None
    # Seconds between writes of a running cell's outputs into its room.
    output_interval = 0.1

    def attach(self, tg: TaskGroup) -> None:  # noqa: B027 - nothing to run by default
        """Run the way's background work in ``tg`` (the store's task group)."""

    @abstractmethod
    async def join(self, rel: str, full: str) -> SharedRoom | None:
        """The synced room of the notebook at server path ``full``; None when it has none (no
        real-time collaboration: the store falls back on the contents API).

        Raises:
            NotebookNotFound: there is no such notebook.
            Unloadable: the server cannot load the notebook into a room.
        """

    def confine(self, full: str) -> None:  # noqa: B027 - the server confines its own paths
        """Refuse server path ``full`` where nbrelay may not go (in process: a symlink out of
        the root, which Jupyter's contents manager would follow). Called on every use of a
        room, not only when it is joined: the file may have been swapped for a link since."""

    async def journaled(self) -> list[str]:
        """Server paths of notebooks whose journal holds edits a crash kept from their file
        (the rooms of a process that dies with the server; none by default)."""
        return []

    async def announce(self, full: str) -> None:  # noqa: B027 - no presence by default
        """Be shown as working on ``full`` (JupyterLab's online collaborators)."""

    async def alone(self) -> None:  # noqa: B027
        """No room is joined any more: stop being shown."""

    async def reap(self, idle: float) -> None:  # noqa: B027 - nothing of its own by default
        """Close what the way opened that no joined room holds, once idle for ``idle`` seconds
        (in process: rooms the server loaded for a call that gave up)."""

    async def stop(self) -> None:  # noqa: B027
        """nbrelay stops: end what the way started that no room holds."""


class RoomHost(LockedEdits):
    """The joined rooms of one Jupyter Server, by notebook path (see the module docstring)."""

    def __init__(
        self,
        api: JupyterAPI,
        way: RoomWay,
        *,
        folder: str = "",
        idle_close: float = 120.0,
        save_delay: float = 0.5,
        save_pace: float = 2.0,
        save_each_edit: bool = False,
        access: Access | None = None,
        shared_state: bool = False,
    ) -> None:
        self.api = api
        self.way = way
        self.paths = Paths(folder)
        self.contents = ContentsStore(api, folder=folder)
        self.idle_close = idle_close
        # The file is saved this many seconds after the last edit (coalesced).
        self.save_delay = save_delay
        # After a save that took T seconds, the next waits until pace × T have passed (a big
        # notebook's save keeps the server busy: see ``saver``).
        self.save_pace = save_pace
        # Edits return once the server has them in the room, and the saver saves the file
        # after; with ``save_each_edit``, before each edit returns (``flush`` waits on demand).
        self.save_each_edit = save_each_edit
        # Read the empty cell a room gives a notebook without cells as a cell, as JupyterLab
        # shows it (``SharedRoom.placeholder_is_a_cell``); by default the notebook has none.
        self.placeholder_is_a_cell = False
        # How long nbrelay keeps trying to give a restarted server back the edits it lost.
        self.recover_within = 600.0
        # Asked before every read ("read") and change ("write") with the caller it is for:
        # Jupyter's authorizer, in process; over the network the server asks it itself. The
        # rooms' own work below those operations (joining, saving, leaving, recovering) asks
        # nothing: it only follows what an operation that asked began.
        self._access = access
        # What each MCP session (reader) last saw: the guard against stale positions.
        self.state_key = f"jupyter:{api.identity}#{self.paths.folder}"
        self._seen = Readers(Shelf(self.state_key) if shared_state else None)
        self._seen_reloads: dict[str, tuple[SharedRoom, int]] = {}
        self._rooms: dict[str, SharedRoom] = {}
        # Notebooks the server could not load into a room (the contents API serves them), and
        # the monotonic time until which their room is not asked for again: each attempt has the
        # server log the failure.
        self._unloadable: dict[str, float] = {}
        self._reconnected: set[str] = set()  # rooms joined again since the agent was told
        self._lost: dict[str, str] = {}  # notes of acknowledged edits the notebook lost
        # "contents" once the server turns out to have no real-time collaboration.
        self.mode = "contents" if way.rtc is False else "live"
        self._tg: TaskGroup | None = None
        self._closed = False
        self._stopping = False  # the rooms were closed for good: start no new one

    def relative(self, path: str) -> str:
        return self.paths.relative(path)

    async def allow(self, caller: Caller, action: str) -> None:
        """Refuse ``caller`` ``action`` ("read", "write") if the server would."""
        if self._access is not None:
            await self._access(caller, action)

    @property
    def output_interval(self) -> float:
        """Seconds between writes of a running cell's outputs (into its room, or its file)."""
        return self.way.output_interval if self.way.rtc is not False else 2.0

    # -- lifetime -------------------------------------------------------------------------

    def attach(self, tg: TaskGroup) -> None:
        """Run the rooms' background tasks in ``tg`` (the workspace's, while the server runs)."""
        self._tg = tg
        self._stopping = False
        self.way.attach(tg)
        tg.start_soon(self._reap_idle)
        tg.start_soon(self._recover_journaled)

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

    async def save_all(self, within: float = 10.0) -> None:
        """Save every room with edits the file does not hold yet (the server is about to let
        its rooms go: their own pending saves would be cancelled with them)."""
        rooms = [r for r in self._rooms.values() if r.alive and r.pending]
        with anyio.move_on_after(within, shield=True):
            async with anyio.create_task_group() as tg:
                for room in rooms:
                    tg.start_soon(self._save_quietly, room)

    @staticmethod
    async def _save_quietly(room: SharedRoom) -> None:
        try:
            async with room.lock:
                saved = await save_room(room) if room.alive and room.pending else None
        except (RoomLost, NbrelayError) as exc:
            saved = str(exc)
        if saved is not None:
            logger.warning("saving %s did not succeed: %s", room.name, saved)

    async def _close_rooms(self) -> None:
        rooms = list(self._rooms.values())
        self._rooms.clear()
        for room in rooms:
            await self._leave(room)
        await self.way.stop()

    async def _leave(self, room: SharedRoom) -> None:
        """Save what nbrelay changed in the room if the saver has not yet, then leave it."""
        if room.alive and room.pending:
            with anyio.move_on_after(10, shield=True), contextlib.suppress(RoomLost, NbrelayError):
                await save_room(room)
        await room.close()

    async def _reap_idle(self) -> None:
        """Leave rooms nobody used for ``idle_close`` seconds; when the task group ends, save
        and leave every room (rooms outlive its cancellation for this)."""
        try:
            while True:
                await anyio.sleep(min(5.0, max(self.idle_close / 4, 0.05)))
                try:
                    await self._close_idle()
                    await self.way.reap(self.idle_close)
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
            if room.unsaved and not room.alive and now - room.last_used < self.recover_within:
                continue  # its edits wait for the server to come back (``_keep``)
            if idle and not room.held and not room.lock.locked():
                self._rooms.pop(rel, None)
                self._seen.let_go(rel)  # with the room: no call sees one without the other
                await self._leave(room)
        if not self._rooms:
            await self.way.alone()

    # -- rooms ----------------------------------------------------------------------------

    async def _room(self, rel: str) -> SharedRoom | None:
        """The synced room of a notebook, joining it if needed; None without real-time
        collaboration (the contents API serves it)."""
        if self.mode == "contents":
            return None
        self.way.confine(self.paths.server(rel))
        room = self._rooms.get(rel)
        if room is not None and room.alive:
            room.last_used = time.monotonic()
            return room
        if self._closed or self._stopping:
            raise RemoteError("nbrelay is shutting down; the notebook was not opened.")
        if self._tg is None:
            raise RemoteError(
                "the room store is not running (internal: it was used outside running()).",
                hint="This is a bug in nbrelay; please report it.",
            )
        # If the room ended, it stays listed until a fresh one is joined: its acknowledged
        # edits the server may not have saved are recovered into the fresh one.
        if self._unloadable.get(rel, 0.0) > time.monotonic():
            return None
        try:
            fresh = await self.way.join(rel, self.paths.server(rel))
        except Unloadable as exc:
            logger.info(
                "the Jupyter Server cannot load %s into a room (%s): its file is read and "
                "written through the contents API",
                rel,
                exc,
            )
            self._unloadable[rel] = time.monotonic() + UNLOADABLE_RETRY
            fresh = None
        if fresh is None:
            if self.way.rtc is False:
                self.mode = "contents"
            self._rooms.pop(rel, None)
            return None
        self._unloadable.pop(rel, None)
        if not self.placeholder_is_a_cell:
            fresh.placeholder_id = await self._placeholder_of(rel, fresh)
        unsaved = None
        if room is not None:
            if room.lost:
                self._reconnected.add(rel)
            if room.unsaved:  # with the room as nbrelay last had it
                outcomes = [outcome for _, outcome in room.unsaved]
                unsaved = Unsaved.of(outcomes, room.snapshot()[0])
                unsaved.forgotten = room.forgotten
            await room.close()
        if unsaved is None and fresh.journal is not None:  # from before this process began
            records = await fresh.journal.read(fresh.key)
            if records:
                unsaved = Unsaved()
                for record in records:
                    with contextlib.suppress(KeyError, TypeError, ValueError):
                        unsaved.add_entry(record)
                if not unsaved:
                    await fresh.journal.replace(fresh.key, [])
        if unsaved:
            await self._recover(rel, unsaved, fresh)
        self._rooms[rel] = fresh
        self._tg.start_soon(self._keep, rel, fresh)
        self._tg.start_soon(self._follow_reloads, rel, fresh)
        await self.way.announce(self.paths.server(rel))
        return fresh

    async def _placeholder_of(self, rel: str, room: SharedRoom) -> str | None:
        """The id of the empty cell the room gave the notebook when it loaded a file without
        cells (``notebook.ydoc.PLACEHOLDER``); None when the room's cells are others, or the
        file has cells (a file's own empty cell is the notebook's)."""
        found = placeholder(room.ycells)
        if found is None:
            return None
        try:
            on_disk = await self.contents.peek(rel, _OWN_READS)
        except NbrelayError:
            return None
        return None if on_disk.notebook.cells else found

    async def _recover(self, rel: str, unsaved: Unsaved | None, fresh: SharedRoom) -> bool:
        """Apply again to ``fresh`` what the server lost of nbrelay's ``unsaved`` edits (it
        stopped before saving them), where that is safe; tell the agent on its next call.
        Without ``unsaved``, the server reloaded ``fresh`` from its file, and the edits are
        the room's own unsaved ones (taken over by what is recovered now). Whether any was
        missing."""
        reloaded = unsaved is None
        async with fresh.lock:
            await fresh.barrier()
            if unsaved is None:
                unsaved = Unsaved.of([outcome for _, outcome in fresh.unsaved])
                unsaved.forgotten = fresh.forgotten
            nb, version, problems = fresh.snapshot()
            found = recover(unsaved, nb)
            if reloaded:
                if not (found.restored or found.lost or found.forgotten):
                    return False  # the notebook as reloaded has them, or is still to come
                fresh.unsaved.clear()  # taken over by what is restored now
                fresh.forgotten = 0
                if fresh.journal is not None:
                    await fresh.journal.replace(fresh.key, [])
            # Told from the moment a read can see the restored edits (reads take no lock): a
            # call made while they travel to the server or are saved is the one told.
            note = recovery_note(rel, found, reloaded=reloaded)
            if note:
                self._lost[rel] = note
            if found.edits:
                before = Snapshot(path=rel, notebook=nb, version=version, problems=problems)
                try:
                    fresh.apply(list(nb.ids), found.edits)
                    await fresh.barrier()
                except NbrelayError as exc:
                    logger.warning("restoring edits to %s failed: %s", rel, exc)
                    found = Recovery((), (), (*found.restored, *found.lost), found.forgotten)
                    self._lost[rel] = note = recovery_note(rel, found, reloaded=reloaded)
                else:
                    after, version, problems = fresh.snapshot()
                    plan = Plan(edits=found.edits, touched=())
                    snap = Snapshot(path=rel, notebook=after, version=version, problems=problems)
                    await keep(fresh, EditOutcome(before, snap, plan))
            with contextlib.suppress(NbrelayError, RoomLost):
                await save_room(fresh)  # also clears the journal
        return bool(note)

    async def _follow_reloads(self, rel: str, room: SharedRoom) -> None:
        """While the room lasts: each time the server reloads it from its file with edits of
        nbrelay's the file may not hold, recover them (``_recover``)."""
        while room.alive:
            async with anyio.create_task_group() as tg:

                async def either(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(either, room.reloaded)
                tg.start_soon(either, room.closed)
            room.reloaded = anyio.Event()
            # The server's event can come before the notebook it reloads (its file watcher
            # says so, then reads the file): look again a few times until it is here.
            for delay in RELOAD_LOOKS:
                with anyio.move_on_after(delay):
                    await room.closed.wait()
                if room.closed.is_set() or not (room.unsaved or room.forgotten):
                    break
                try:
                    if await self._recover(rel, None, room):
                        break
                except (NbrelayError, RoomLost) as exc:  # the room ended: its rejoin recovers
                    logger.warning("restoring edits to %s after a reload failed: %s", rel, exc)
                    break

    async def _recover_journaled(self) -> None:
        """Give the server back the edits its previous run acknowledged and never saved (in its
        journal), without waiting for a call on those notebooks."""
        for full in await self.way.journaled():
            try:
                rel = self.relative(self.paths.back(full))
                async with self.lock(rel):
                    await self._room(rel)
            except (NbrelayError, RoomLost) as exc:
                logger.warning("recovering the unsaved edits of %s failed: %s", full, exc)

    async def _keep(self, rel: str, room: SharedRoom) -> None:
        """Save the room's file after nbrelay's edits while the room lasts; if its connection
        dropped with edits the server may not have saved, join it again as soon as the server
        answers (within ``recover_within`` seconds), to recover them."""
        await saver(room, self.save_delay, pace=self.save_pace)
        if not (room.lost and room.unsaved):
            return
        delay, deadline = 0.5, time.monotonic() + self.recover_within
        while not (self._stopping or self._closed) and time.monotonic() < deadline:
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)
            if self._rooms.get(rel) is not room:
                return  # a call joined the room again meanwhile
            try:
                async with self.lock(rel):
                    if self._rooms.get(rel) is room:
                        await self._room(rel)
                return
            except NotebookNotFound:
                return
            except (NbrelayError, RoomLost, OSError) as exc:
                logger.info("the server of %s does not answer yet: %s", rel, exc)

    async def _drop(self, rel: str) -> None:
        room = self._rooms.pop(rel, None)
        if room is not None:
            await self._leave(room)

    # -- sessions -------------------------------------------------------------------------

    async def open_session(self, path: str, caller: Caller) -> tuple[str, str]:
        """Join the notebook's room for ``caller`` and keep it joined until ``close_session``;
        return the room's (session id, file id)."""
        rel = self.relative(path)
        await self.allow(caller, "read")
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
        if not self._rooms:
            await self.way.alone()
        return True


async def settle(room: SharedRoom, rel: str, notebook: Notebook, within: float = 10.0) -> None:
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
