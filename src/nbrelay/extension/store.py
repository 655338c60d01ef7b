"""The server extension's way into the rooms: in process, on the Jupyter Server's own documents.

The extension's notebooks are served by the room store (``stores.rtc``), the same store as live
mode's; only how it reaches a room differs. With jupyter-collaboration, every notebook nbrelay
works on is in a room: the one a person with the notebook open in JupyterLab is in, or, for a
notebook open nowhere, one nbrelay opens in the server as a browser tab would (and closes again
once it has been idle for ``idle_close`` seconds with nobody in it). The room's Yjs document lives
in this process, so an edit is a granular CRDT transaction on it, which every person in the room
sees at once, and a "barrier" only waits while the server reloads the document from its file.
Everything nbrelay touches of jupyter-collaboration beyond its public API is in
``extension.collaboration``. Without jupyter-collaboration, notebooks are read and written
through the server's contents manager (``stores.contents`` over ``extension.contents``), as the
REST API would. Every operation of the store (its notebooks, its other files, its live sessions,
the run state it shows) asks Jupyter's authorizer first about the caller it is handed
(``contents`` read or write; ``_access``, which the store calls), and every path, a joined room's included, passes file mode's real-path check each time
(``extension.contents.Confinement``): Jupyter's contents manager, through which rooms load and
save their files, follows symlinks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from nbrelay.caller import Caller
from nbrelay.errors import PathError
from nbrelay.extension.access import require
from nbrelay.extension.collaboration import Collaboration, CollaborationChanged
from nbrelay.extension.contents import Confinement, ServerContents
from nbrelay.stores import paths
from nbrelay.stores.rtc import RTCStore
from nbrelay.stores.rtc_journal import Journal
from nbrelay.stores.rtc_room import SharedRoom
from nbrelay.stores.rtc_rooms import RoomWay, Unloadable

logger = logging.getLogger("nbrelay.extension")


class InProcessRoom(SharedRoom):
    """A room of this server, its document shared with everyone in it."""

    def __init__(
        self,
        collab: Collaboration,
        room: Any,
        *,
        name: str,
        path: str,
        room_id: str,
        made: bool,
        confinement: Confinement,
    ) -> None:
        super().__init__(collab.ydoc(room), name=name, room_id=room_id)
        self.session_id = collab.session_id
        self.path = path
        self._collab = collab
        self._confinement = confinement
        self._room = room
        self._made = made  # nbrelay opened it: it closes it too, when nobody is in it
        self._watch()
        collab.events.on_reload[room_id] = self.server_reloaded

    @property
    def alive(self) -> bool:
        return not self.closed.is_set() and self._collab.current(self.room_id) is self._room

    @property
    def hears_events(self) -> bool:
        return self._collab.events.listening

    async def barrier(self, within: float = 15.0) -> None:
        self.check()
        await self._collab.settled(self._room, within)
        self.check()

    async def save(self, within: float = 30.0) -> str:
        self.check()
        try:  # the room writes its file through the contents manager, which follows links
            self._confinement.check(self.path)
        except PathError as exc:
            return f"refused: {exc.message}"
        begun = self.save_begins()
        return await self._collab.save(
            self._room, within, late=lambda status: self._ended(status, begun)
        )

    def _ended(self, status: str, begun: tuple[int, int]) -> None:
        """A save nbrelay stopped waiting for ended (``SharedRoom.ended_late`` if it wrote the
        file)."""
        if status == "success":
            self.ended_late(begun)

    async def close(self) -> None:
        if self.closed.is_set():
            return
        self.close_reason = "left"
        self.closed.set()
        if self._collab.events.on_reload.get(self.room_id) == self.server_reloaded:
            del self._collab.events.on_reload[self.room_id]
        self.save_wanted.set()  # wakes the saver, which then ends
        self._unwatch()
        self.mirror.close()
        if self._made:
            try:
                await self._collab.close_if_unused(self._room, self.path)
            except Exception:  # housekeeping never takes the server down
                logger.exception("closing the room of %s failed", self.path)


class InProcessWay(RoomWay):
    """The rooms of the Jupyter Server nbrelay runs in (see the module docstring)."""

    name = "in process"
    output_interval = 0.25

    def __init__(
        self, collab: Collaboration | None, contents: ServerContents, journal: Journal | None = None
    ) -> None:
        self.collab = collab
        self.contents = contents
        self.journal = journal
        self.rtc = collab is not None
        self._joined: dict[str, InProcessRoom] = {}  # the last room joined, by room id

    def confine(self, full: str) -> None:
        self.contents.confinement.check(full)

    async def journaled(self) -> list[str]:
        if self.collab is None or self.journal is None:
            return []
        found = []
        for key in await self.journal.rooms():
            path = self.collab.path_of(key)
            if path is not None:
                found.append(path)
        return found

    async def join(self, rel: str, full: str) -> InProcessRoom | None:
        if self.collab is None:
            return None
        if not await self.contents.exists(full):
            raise paths.missing(rel)
        try:
            room, made = await self.collab.open(full)
        except CollaborationChanged:
            raise
        except Exception as exc:  # the contents manager says what is wrong with the file
            logger.info("no room for %s: %s", full, exc)
            if getattr(exc, "status_code", 400) >= 500:  # the server's fault: this call only
                return None
            raise Unloadable(f"{type(exc).__name__}: {exc}") from exc
        _, room_id = self.collab.room_id(full)
        joined = InProcessRoom(
            self.collab,
            room,
            name=rel,
            path=full,
            room_id=room_id,
            made=made,
            confinement=self.contents.confinement,
        )
        joined.journal = self.journal
        self._joined[room_id] = joined
        return joined

    async def reap(self, idle: float) -> None:
        """Close the rooms nbrelay's calls gave up on while the server loaded them, once idle
        for ``idle`` seconds (``Collaboration.abandoned``); one a call joined meanwhile is
        nbrelay's like any room it opened."""
        if self.collab is None:
            return
        now = time.monotonic()
        for room_id, (room, path, since) in list(self.collab.abandoned.items()):
            held = self._joined.get(room_id)
            if held is not None and held.alive and held._room is room:
                held._made = True  # the call that joined it found it made: it closes it
                self.collab.abandoned.pop(room_id, None)
            elif self.collab.current(room_id) is not room:
                self.collab.abandoned.pop(room_id, None)  # the server let it go meanwhile
            elif now - since > idle:
                await self._close(self.collab, room, path)
        for room_id, held in list(self._joined.items()):
            if held.closed.is_set():
                del self._joined[room_id]

    @staticmethod
    async def _close(collab: Collaboration, room: Any, path: str) -> None:
        try:
            await collab.close_if_unused(room, path)
        except CollaborationChanged:
            raise
        except Exception:  # housekeeping never takes the server down
            logger.exception("closing the room of %s failed", path)
        finally:
            for room_id, (there, _, _) in list(collab.abandoned.items()):
                if there is room:
                    del collab.abandoned[room_id]

    async def stop(self) -> None:
        if self.collab is None:
            return
        for room, path, _ in list(self.collab.abandoned.values()):
            await self._close(self.collab, room, path)


async def _access(caller: Caller, action: str) -> None:
    """Before each operation of the store (``RoomHost.allow``): Jupyter's authorizer about the
    caller it is done for (``contents`` read or write)."""
    await require(caller, action, "contents")


def server_store(
    contents_manager: Any,
    collab: Collaboration | None,
    *,
    idle_close: float = 120.0,
    save_delay: float = 0.5,
    save_pace: float = 2.0,
    journal: Path | None = None,
) -> RTCStore:
    """The room store of this Jupyter Server: its rooms in process (its contents manager when it
    has no jupyter-collaboration), every operation asking Jupyter's authorizer first; edits not
    yet saved are journaled in the folder ``journal``."""
    api = ServerContents(contents_manager)
    way = InProcessWay(collab, api, Journal(journal) if journal is not None else None)
    return RTCStore(
        api,
        way=way,
        idle_close=idle_close,
        save_delay=save_delay,
        save_pace=save_pace,
        access=_access,
    )
