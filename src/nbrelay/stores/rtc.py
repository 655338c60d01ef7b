"""The room store: notebooks edited through jupyter-collaboration's rooms, the way people are.

Live mode (a Jupyter Server over the network) and the server extension (nbrelay inside the Jupyter
Server) are this one store; they differ only in how they reach a room (``stores.rtc_rooms``: a
WebSocket, ``stores.rtc_websocket``, or in process, ``extension.store``). Every notebook the agent
works on is joined as a room, so a person with the notebook open sees each change as it happens
and their own typing is never lost. The rules (each one learnt from a way RTC clients lose data):

* **Sync first, then edit** (``stores.yprotocol``): a room joined over a WebSocket starts from an
  empty document the server fills; a room that ended is never reused.
* **Granular operations only** (``notebook.ydoc``): the four primitive edits become CRDT
  operations on the cells they name; the document is never replaced as a whole and the file is
  never written while a room may be open.
* **Barrier, edit, barrier.** Before an edit nbrelay makes sure it has everything the server
  had, and after it waits until the server has applied the edit (over a WebSocket, a SYNC_STEP1
  it must answer in order; in process, no reload of the file is under way) and checks that no
  reload from disk discarded it. The file is saved then, coalesced (``stores.rtc_saving``:
  barrier, save, barrier).
* **Reading costs no round trip.** A read is the room as nbrelay holds it: every edit nbrelay
  made and every change the server relayed, kept converted cell by cell (``notebook.ymirror``).
  It never waits behind the server (which answers nothing on a connection while it saves a big
  notebook there); an edit still checks against everything the server had.
* **Versions and positions.** A version is the hash of the notebook as nbformat would write it.
  An edit that addresses cells by position is refused when someone else inserted, deleted or
  moved cells since the agent last read the notebook (typing does not move cells); an edit by id
  applies to the notebook as it is.
* **Changes from outside** (the file rewritten while the room is open, which makes the server
  reload it; the server restarted) are reported in the next result, never silently merged into a
  stale index; so are nbrelay's own acknowledged edits that a crashed server never saved.

A server without jupyter-collaboration (or a notebook no room can load) is served through the
contents API instead (``stores.contents``).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Collection, Iterable
from dataclasses import replace

from nbrelay.caller import Caller
from nbrelay.errors import ConflictError, NotebookExists, RemoteError, act
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook import validate
from nbrelay.notebook.edits import Edit, UpdateCell
from nbrelay.notebook.model import Notebook
from nbrelay.stores import rtc_saving
from nbrelay.stores.base import Capabilities, EditOutcome, Entry, Planner, Snapshot
from nbrelay.stores.contents import NOT_LIVE_NOTE
from nbrelay.stores.live_extras import ContentsDocuments
from nbrelay.stores.paths import Glob
from nbrelay.stores.rtc_room import RoomLost, SharedRoom
from nbrelay.stores.rtc_rooms import Access, RoomHost, RoomWay, settle
from nbrelay.stores.rtc_saving import SAVE_NOTE, keep, landed, save_room

__all__ = ["RECONNECT_NOTE", "RELOAD_NOTE", "SAVE_NOTE", "RTCStore"]

RELOAD_NOTE = (
    "Jupyter Server reloaded this notebook from its file since your last read (the file was "
    "changed outside JupyterLab); this result shows the notebook as it is now."
)
RECONNECT_NOTE = (
    "nbrelay lost its connection to the Jupyter Server (it restarted or the network dropped) "
    "and reconnected; the notebook was read afresh from the server."
)

_OUTPUT_FIELDS = frozenset({"outputs", "execution_count"})


def _streaming(edits: Iterable[Edit], running: Collection[str]) -> bool:
    """Whether edits only update the outputs of cells nbrelay shows running (a run's outputs
    streaming in: neither journaled nor saved one by one)."""
    return all(
        isinstance(e, UpdateCell)
        and not e.remove
        and set(e.changes) <= _OUTPUT_FIELDS
        and e.id in running
        for e in edits
    )


class _Unconfirmed(Exception):
    """The connection ended after an edit was applied locally, before the server confirmed it."""

    def __init__(self, outcome: EditOutcome) -> None:
        super().__init__("unconfirmed edit")
        self.outcome = outcome


class RTCStore(RoomHost):
    """The notebooks of a Jupyter Server, live through its rooms (see the module docstring).

    Without ``way``, rooms are reached over WebSockets with ``api`` (live mode)."""

    def __init__(
        self,
        api: JupyterAPI,
        *,
        way: RoomWay | None = None,
        agent_name: str = "nbrelay agent",
        folder: str = "",
        idle_close: float = 120.0,
        sync_timeout: float = 60.0,
        save_delay: float = 0.5,
        save_pace: float = 2.0,
        save_each_edit: bool = False,
        access: Access | None = None,
        shared_state: bool = False,
    ) -> None:
        if way is None:
            from nbrelay.stores.rtc_websocket import WebSocketWay

            way = WebSocketWay(api, agent_name=agent_name, sync_timeout=sync_timeout)
        super().__init__(
            api,
            way,
            folder=folder,
            idle_close=idle_close,
            save_delay=save_delay,
            save_pace=save_pace,
            save_each_edit=save_each_edit,
            access=access,
            shared_state=shared_state,
        )

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            documents=ContentsDocuments(self.api, self.paths, self.allow),
            sessions=self,
            run_state=self if self.way.rtc is True else None,
            output_interval=self.output_interval,
            background=self.attach if self.way.rtc is not False else None,
            state_key=self.state_key,
        )

    async def show_running(
        self, path: str, caller: Caller, running: Collection[str], idle: Collection[str]
    ) -> None:
        """Show cells running or not in the notebook's room, as JupyterLab does (``[*]``): a
        display for the people in the room, so it is neither confirmed, journaled nor saved
        (the file never holds it). Without a room (no collaboration) there is nothing to show."""
        rel = self.relative(path)
        await self.allow(caller, "write")
        async with self.lock(rel):
            room = await self._room(rel)
            if room is None:
                return
            with contextlib.suppress(RoomLost):
                async with room.lock:
                    room.check()
                    room.show_running(running, idle)

    def _notes(self, rel: str, room: SharedRoom, *, commit: bool = True) -> tuple[str, ...]:
        """What changed behind the agent's back since its last call on this notebook; with
        ``commit`` the agent counts as told."""
        notes: list[str] = []
        if rel in self._reconnected:
            notes.append(RECONNECT_NOTE)
        lost = self._lost.get(rel)
        if lost:
            notes.append(lost)
        seen = self._seen_reloads.get(rel)
        if seen is not None and seen[0] is room and room.reloads > seen[1]:
            notes.append(RELOAD_NOTE)
        if commit:
            self._reconnected.discard(rel)
            self._lost.pop(rel, None)
            self._seen_reloads[rel] = (room, room.reloads)
        return tuple(notes)

    def _snapshot(self, rel: str, room: SharedRoom) -> tuple[Snapshot, tuple[str, ...]]:
        nb, version, problems = room.snapshot()
        snap = Snapshot(path=rel, notebook=nb, version=version, problems=problems)
        return snap, tuple(nb.ids)

    # -- the protocol -----------------------------------------------------------------------

    async def list(self, folder: str, caller: Caller, *, recursive: bool) -> builtins.list[Entry]:
        await self.allow(caller, "read")
        return await self.contents.list(folder, caller, recursive=recursive)

    async def find(
        self,
        folder: str,
        caller: Caller,
        *,
        recursive: bool = True,
        glob: Glob | None = None,
        limit: int | None = None,
    ) -> builtins.list[Entry]:
        await self.allow(caller, "read")
        return await self.contents.find(folder, caller, recursive=recursive, glob=glob, limit=limit)

    async def scan(self, path: str, caller: Caller) -> Snapshot:
        return await self.peek(path, caller)

    async def load(self, path: str, caller: Caller) -> Snapshot:
        rel = self.relative(path)
        await self.allow(caller, "read")
        async with self.lock(rel):
            room = await self._room(rel)
        if room is None:
            return await self.contents.load(rel, caller)
        # No round trip (see the module docstring): the room as nbrelay holds it now.
        snap, order = self._snapshot(rel, room)
        notes = self._notes(rel, room)
        return replace(await self._seen.observe(rel, caller, snap, order), notes=notes)

    async def peek(self, path: str, caller: Caller) -> Snapshot:
        """The notebook as its room holds it now (or as the server stores it, when nbrelay is
        not in its room), without counting as ``caller``'s read."""
        rel = self.relative(path)
        await self.allow(caller, "read")
        room = self._rooms.get(rel)
        if room is not None and room.alive:
            self.way.confine(self.paths.server(rel))
            return self._snapshot(rel, room)[0]
        return await self.contents.peek(rel, caller)

    def _lost_twice(self, rel: str) -> RemoteError:
        return RemoteError(
            f"the connection to the Jupyter Server dropped twice while working on {rel!r}.",
            hint="Check that the server is running and reachable, then retry.",
        )

    async def _edit_target(self, path: str, caller: Caller) -> tuple[str, str]:
        rel = self.relative(path)
        await self.allow(caller, "write")
        return rel, rel

    async def _edit_locked(
        self,
        rel: str,
        key: str,
        caller: Caller,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        outcome = await self._edit(rel, caller, planner, expected, guard_positions)
        if outcome.plan.edits:
            await self._seen.remember(rel, caller, outcome.after, outcome.after.notebook.ids)
        return outcome

    async def _edit(
        self,
        rel: str,
        caller: Caller,
        planner: Planner,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        for attempt in range(2):
            room = await self._room(rel)
            if room is None:
                return await self._edit_file(
                    rel, caller, planner, expected_version, guard_positions
                )
            try:
                async with room.lock:
                    await room.barrier()
                    return await self._edit_in(
                        room, rel, caller, planner, expected_version, guard_positions
                    )
            except RoomLost:
                # The connection ended before the edit was applied: retry on a fresh document.
                if attempt:
                    raise self._lost_twice(rel) from None
            except _Unconfirmed as exc:
                return await self._confirm(rel, exc.outcome)
        raise self._lost_twice(rel)

    async def _edit_file(
        self,
        rel: str,
        caller: Caller,
        planner: Planner,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        """An edit through the contents API (no room: no real-time collaboration)."""
        outcome = await self.contents.edit(
            rel,
            caller,
            planner,
            expected_version=expected_version,
            guard_positions=guard_positions,
        )
        if self.way.rtc is not True:
            return outcome
        # The server has real-time collaboration but no room could load this notebook: it is
        # open nowhere, so the file is the whole truth.
        return replace(outcome, notes=tuple(n for n in outcome.notes if n != NOT_LIVE_NOTE))

    async def _edit_in(
        self,
        room: SharedRoom,
        rel: str,
        caller: Caller,
        planner: Planner,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        seen = await self._seen.last(
            rel, caller
        )  # before the snapshot: no await between it and the plan
        before, order = self._snapshot(rel, room)
        notes = self._notes(rel, room, commit=False)
        told = (" " + " ".join(notes)) if notes else ""
        before, plan, after_nb, outside = self._seen.plan_in_room(
            caller, before, order, planner, expected_version, guard_positions, told, seen=seen
        )
        self._notes(rel, room)
        if after_nb is None:
            return EditOutcome(before, before, plan, changed_outside=outside, notes=notes)
        reloads, sent = room.reloads, room.sent
        room.apply(list(order), plan.edits)
        after, _ = self._snapshot(rel, room)
        outcome = EditOutcome(before, after, plan, changed_outside=outside, notes=notes)
        if room.sent == sent:
            # The edits restated what the room holds (a finished run's cells already idle): the
            # document did not change, so there is nothing to confirm or save.
            return outcome
        try:
            # The edit is done once the server has it in the room: every person in the notebook
            # sees it from then on. The file is saved after, by the saver (or now, if asked).
            await room.barrier()
        except RoomLost:
            raise _Unconfirmed(outcome) from None
        streaming = _streaming(plan.edits, room.running)
        await keep(room, outcome, journal=not streaming)
        if room.reloads != reloads:
            self._seen_reloads[rel] = (room, room.reloads)
            raise ConflictError(
                f"the file of {rel!r} was changed outside JupyterLab while your edit was being "
                "applied, and the Jupyter Server reloaded the notebook from that file, which may "
                "have discarded your edit.",
                current=room.snapshot()[1],
                hint=f"{act('read_again')} nbrelay applies your edit again unless the file "
                "changed the same cells (the next result says which).",
            )
        if self.save_each_edit and not streaming:
            saved = await save_room(room)
            if saved is not None:
                outcome = replace(outcome, notes=(*notes, SAVE_NOTE.format(why=saved)))
        else:
            room.save_wanted.set()
        return outcome

    async def _confirm(self, rel: str, outcome: EditOutcome) -> EditOutcome:
        """The connection ended after an edit was sent: find out on a fresh document whether the
        server got it (a Y update arrives whole or not at all)."""
        room = await self._room(rel)
        if room is None:
            raise self._lost_twice(rel)
        async with room.lock:
            await room.barrier()
            snap, _ = self._snapshot(rel, room)
            notes = self._notes(rel, room)
            if not landed(outcome, snap.notebook):
                raise RemoteError(
                    f"the connection to the Jupyter Server dropped before your edit of {rel!r} "
                    "reached it; nbrelay reconnected, and the edit is not in the notebook.",
                    hint="Nothing was changed: read the notebook again and redo the edit.",
                )
            await keep(room, outcome)
            saved = await save_room(room)
        extra = (RECONNECT_NOTE,) if RECONNECT_NOTE not in notes else ()
        if saved is not None:
            extra = (*extra, SAVE_NOTE.format(why=saved))
        return replace(outcome, after=snap, notes=(*outcome.notes, *notes, *extra))

    async def flush(self, path: str, caller: Caller) -> str | None:
        """Wait until the notebook's file holds every edit nbrelay made to it (a save the server
        confirmed); None when it does, else why not. Without a room there is nothing pending:
        edits through the contents API are written before they return."""
        rel = self.relative(path)
        await self.allow(caller, "write")  # a save writes the room: others' edits too
        room = self._rooms.get(rel)
        if room is not None:
            self.way.confine(self.paths.server(rel))
        return await rtc_saving.flush(room)

    async def create(
        self, path: str, caller: Caller, notebook: Notebook, *, overwrite: bool
    ) -> Snapshot:
        rel = self.relative(path)
        validate.check_notebook(notebook)
        await self.allow(caller, "write")
        full = self.paths.server(rel)
        async with self.lock(rel):
            exists = await self.api.exists(full)
            if exists and not overwrite:
                raise NotebookExists(
                    f"{rel!r} already exists.",
                    hint=act("exists"),
                )
            if self.way.rtc is False:
                return await self.contents.create(rel, caller, notebook, overwrite=overwrite)
            notes: tuple[str, ...] = ()
            if not exists:
                # No room can be open on a file that does not exist yet: write it, then join.
                await self._drop(rel)
                created = await self.contents.create(rel, caller, notebook, overwrite=False)
                room = await self._room(rel)
                if room is None:
                    return created
                async with room.lock:
                    await settle(room, rel, notebook)
                    # Created without cells, it has none in the room either (the room gives
                    # such a file one empty cell when it loads it): everyone sees the file.
                    if not notebook.cells and room.drop_placeholder():
                        await room.barrier()
                    snap, order = self._snapshot(rel, room)
                    self._notes(rel, room)
            else:
                room = await self._room(rel)
                if room is None:
                    return await self.contents.create(rel, caller, notebook, overwrite=True)
                async with room.lock:
                    await room.barrier()
                    room.replace_all(notebook)
                    room.acknowledged()
                    snap, order = self._snapshot(rel, room)
                    saved = await save_room(room)
                    self._notes(rel, room)
                if saved is not None:
                    notes = (SAVE_NOTE.format(why=saved),)
        await self._seen.remember(rel, caller, snap, order)
        return replace(snap, notes=notes)

    async def remove(self, path: str, caller: Caller) -> None:
        rel = self.relative(path)
        await self.allow(caller, "write")
        async with self.lock(rel):
            await self._drop(rel)
            await self.contents.remove(rel, caller)
            await self._seen.forget(rel)

    async def rename(
        self, src: str, dst: str, caller: Caller, *, overwrite: bool, keep_source: bool
    ) -> Snapshot:
        src_rel, dst_rel = self.relative(src), self.relative(dst)
        await self.allow(caller, "write")
        if keep_source:
            snap = await self.load(src_rel, caller)
            return await self.create(dst_rel, caller, snap.notebook, overwrite=overwrite)
        async with self.lock(src_rel):
            await self._drop(src_rel)
            await self._drop(dst_rel)
            await self.contents.rename(
                src_rel, dst_rel, caller, overwrite=overwrite, keep_source=False
            )
            await self._seen.forget(src_rel)
        return await self.load(dst_rel, caller)
