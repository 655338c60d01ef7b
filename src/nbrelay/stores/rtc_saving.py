"""Saving a room's notebook to its file, and knowing which edits the file holds.

An edit returns as soon as the server has it in the room (everyone in the notebook sees it from
then on); the ``.ipynb`` is written by the server when nbrelay asks it to save. A save is
**barrier, save, barrier**: the server has applied everything sent before the request, saves,
and nothing it reloaded from disk meanwhile is missed. ``saver`` runs one per room and makes one
save for a burst of edits, once the burst paused (``delay``, 0.5 s) or had gone on for a while
(``ceiling``, 5 s: a save of a big notebook keeps the server busy for seconds).

A room remembers the edits nbrelay made since the last save the server confirmed
(``SharedRoom.unsaved``). When a room ends before they were saved (the server stopped or
crashed), the store joins the room again and ``recover`` finds which of their changes the notebook,
as the server reopened it, lacks: those nothing else changed since are applied again, the others
named (``recovery_note``). ``landed`` tells whether one edit reached the server at all.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from nbrelay.errors import NbrelayError
from nbrelay.notebook.edits import (
    DeleteCells,
    Edit,
    InsertCells,
    MoveCells,
    SetMetadata,
    UpdateCell,
)
from nbrelay.notebook.model import Cell, Notebook
from nbrelay.stores.base import EditOutcome
from nbrelay.stores.rtc_room import SAVED_ALONE, RoomLost, SharedRoom

logger = logging.getLogger("nbrelay.rtc")

SAVE_NOTE = (
    "The change is live in JupyterLab, but the server did not confirm saving the file ({why}); "
    "it saves again on the next change."
)
INTERRUPTED = "the save was interrupted by a later change"
# The same answer where nbrelay hears none of the server's events (``stores.rtc_events``), which
# would tell a save the server failed apart.
INTERRUPTED_OR_FAILED = (
    "the server answered the save without writing the file: a later change interrupted it, or "
    "the server failed to save (its log says which; nbrelay cannot hear its events)"
)
# Saves the saver asks for again in a row when each was interrupted (a person typing on; or a
# file the server cannot write, which it also answers "success" without saving): past them it
# waits for nbrelay's next edit instead of asking forever.
RETRIES = 3
PACE_AT_MOST = 30.0  # seconds a paced save waits at most after the last one ended
LOST = "the connection to the Jupyter Server dropped; nbrelay reconnects on the next call"
_FIELDS = {"source": "source", "outputs": "outputs", "metadata": "metadata"}
_SHOWN = 12  # lost changes named one by one; the rest are counted


async def save(room: SharedRoom) -> str | None:
    """Barrier, save, barrier; None when saved, else why not."""
    await room.barrier()
    before = room.hashes
    since = room.events_heard()
    status = ""
    for delay in (0.05, 0.2, 0.5):
        status = await room.save()
        if status != "skipped":
            break
        await anyio.sleep(delay)
    await room.barrier()
    if status == SAVED_ALONE:  # the server saved the edits on its own (``SharedRoom.save``)
        return None
    if status == "success" and room.saves_apart and room.hashes == before:
        # The server records a save's hash once the file holds the room, and says "success"
        # all the same when it did not: it failed (caught and logged by the server, which says
        # so only in an event), it reloaded the file instead, or an edit that arrived during the
        # save cancelled it.
        said = await room.save_said(since)
        return said or (INTERRUPTED if room.hears_events else INTERRUPTED_OR_FAILED)
    return None if status == "success" else status


async def save_room(room: SharedRoom) -> str | None:
    """Save the room's edits so far (see ``save``); the count of saved edits (and the room's
    journal) follows.

    One save of a room at a time: jupyter-collaboration cancels a save in progress when another
    is asked for (the background saver's, ``save_notebook``'s) and answers the cancelled one
    "success" without writing, which would read as a save a later change interrupted. A save
    asked for while another runs waits for it, and is not made when that one held its edits."""
    upto = room.edits
    waited = room.save_lock.locked()
    async with room.save_lock:
        if waited and room.saved >= upto:  # the save it waited for holds them (and the journal)
            return None
        upto = room.edits
        saved = await save(room)
        if saved is None:
            room.written(upto)
            await _journal_saved(room)
    return saved


async def _journal_saved(room: SharedRoom) -> None:
    """Keep in the room's journal only the edits not yet saved."""
    room.journal_behind = False
    if room.journal is not None:
        await room.journal.replace(room.key, [entry(o) for _, o in room.unsaved])


async def keep(room: SharedRoom, outcome: EditOutcome, *, journal: bool = True) -> None:
    """Count an edit the server has acknowledged, and journal it (unless ``journal`` is false:
    a running cell's outputs, written again and again until it ends)."""
    room.acknowledged(outcome)
    if room.journal is not None and journal and outcome.plan.edits and not room.forgotten:
        await room.journal.append(room.key, entry(outcome))


async def flush(room: SharedRoom | None) -> str | None:
    """Wait until the file holds every edit nbrelay made in the room (a save the server
    confirmed); None when it does (or there is nothing to save), else why not."""
    if room is None or not room.alive or not room.pending:
        return None
    try:
        async with room.lock:
            return await save_room(room)
    except RoomLost:
        return LOST


async def saver(room: SharedRoom, delay: float, ceiling: float = 5.0, pace: float = 2.0) -> None:
    """Save a room's file once ``delay`` seconds passed without an edit of nbrelay's, or
    ``ceiling`` seconds after the first edit not yet saved in a longer burst, and no sooner than
    ``pace`` times the last save's duration after it ended (ends with the room).

    The pace matters for big notebooks only: the server converts and writes the whole notebook
    on each save (about a second at 10,000 cells, holding the interpreter), and everything in
    that server, edits included, waits behind it. Saves back to back would leave edits nothing
    but that wait; paced, saves take at most 1 / (1 + pace) of the server's time."""
    retries = 0
    took = ended = 0.0
    while True:
        await room.save_wanted.wait()
        first = time.monotonic()
        while not room.closed.is_set():
            room.save_wanted = anyio.Event()
            left = first + ceiling - time.monotonic()
            with anyio.move_on_after(max(0.0, min(delay, left))):
                await room.save_wanted.wait()
            if not room.save_wanted.is_set() or time.monotonic() - first >= ceiling:
                break
        rest = ended + min(pace * took, PACE_AT_MOST) - time.monotonic()
        if rest > 0:
            with anyio.move_on_after(rest):
                await room.closed.wait()
        if room.closed.is_set():
            return
        if not room.pending:
            if room.journal_behind:  # a save nbrelay stopped waiting for ended since
                try:
                    await _journal_saved(room)
                except OSError as exc:
                    logger.warning("updating the journal of %s failed: %s", room.name, exc)
            continue
        began = time.monotonic()
        try:
            saved = await save_room(room)
        except (RoomLost, NbrelayError) as exc:
            saved = str(exc)
        ended = time.monotonic()
        took = ended - began
        if saved in (INTERRUPTED, INTERRUPTED_OR_FAILED) and retries < RETRIES:
            retries += 1
            room.save_wanted.set()  # someone's change cancelled it: save again once they pause
            continue
        retries = 0
        if saved is not None:
            logger.warning("saving %s did not succeed: %s", room.name, saved)


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


def _first_line(cell: Cell) -> str:
    line = str(cell.get("source", "")).strip().split("\n", 1)[0]
    return line if len(line) <= 40 else line[:39] + "…"


@dataclass(frozen=True)
class Recovery:
    """What became of nbrelay's unsaved edits when a room reopened without them."""

    edits: tuple[Edit, ...]  # to apply to the reopened notebook: what is safe to restore
    restored: tuple[str, ...]  # one phrase per change those edits restore
    lost: tuple[str, ...]  # one phrase per change that cannot be restored safely
    forgotten: int = 0  # older unsaved edits nbrelay no longer remembered, not checked


def _cell(nb: Notebook, cid: str, ids: list[str]) -> Cell | None:
    try:
        return nb.cells[ids.index(cid)]
    except ValueError:
        return None


def _touched(edit: Edit) -> tuple[str, ...]:
    if isinstance(edit, InsertCells):
        return tuple(str(c["id"]) for c in edit.cells)
    if isinstance(edit, UpdateCell):
        return (edit.id,)
    if isinstance(edit, SetMetadata):
        return ()
    return tuple(edit.ids)


# A key of the notebook's metadata as JSON can hold it: [value], or [] when it is not there.
Held = list[Any]


def _held(nb: Notebook, key: str) -> Held:
    meta = nb.data.get("metadata") or {}
    return [copy.deepcopy(meta[key])] if key in meta else []


@dataclass
class Unsaved:
    """nbrelay's edits that the file may not hold, cell by cell: what ``recover`` needs, small
    enough to keep in a journal beside the server (``entry`` and ``add_entry``)."""

    base: dict[str, Cell | None] = field(default_factory=dict)  # before the first (None: made)
    had: dict[str, Cell | None] = field(default_factory=dict)  # after the last (None: deleted)
    keys: dict[str, list[str]] = field(default_factory=dict)  # the fields changed, by cell
    anchors: dict[str, str | None] = field(default_factory=dict)  # inserted/moved: cell before
    moved: list[str] = field(default_factory=list)
    # Keys of the notebook's metadata: before the first change, after the last.
    meta_base: dict[str, Held] = field(default_factory=dict)
    meta_had: dict[str, Held] = field(default_factory=dict)
    forgotten: int = 0  # older unsaved edits no longer remembered

    @classmethod
    def of(cls, outcomes: Sequence[EditOutcome], last: Notebook | None = None) -> Unsaved:
        """From the outcomes of the edits; ``last`` (the room as nbrelay last had it) gives
        the cells as they ended, others' changes since included."""
        unsaved = cls()
        for outcome in outcomes:
            unsaved.add_entry(entry(outcome))
        if last is not None:
            ids = last.ids
            for cid in unsaved.had:
                unsaved.had[cid] = _cell(last, cid, ids)
            for key in unsaved.meta_had:
                unsaved.meta_had[key] = _held(last, key)
        return unsaved

    def add_entry(self, record: dict[str, Any]) -> None:
        for cid, (before, after) in record["cells"].items():
            self.base.setdefault(cid, before)
            self.had[cid] = after
        for cid, keys in record["keys"].items():
            known = self.keys.setdefault(cid, [])
            known.extend(k for k in keys if k not in known)
        self.anchors.update(record["anchors"])
        self.moved.extend(c for c in record["moved"] if c not in self.moved)
        for key, (before, after) in record.get("meta", {}).items():
            self.meta_base.setdefault(key, before)
            self.meta_had[key] = after

    def __bool__(self) -> bool:
        return bool(self.had) or bool(self.meta_had) or self.forgotten > 0


def entry(outcome: EditOutcome) -> dict[str, Any]:
    """One edit's part of ``Unsaved``, as JSON: the cells it touched before and after it (and
    the keys of the notebook's metadata it set or removed)."""
    before, after = outcome.before.notebook, outcome.after.notebook
    before_ids, after_ids = before.ids, after.ids
    cells: dict[str, tuple[Cell | None, Cell | None]] = {}
    keys: dict[str, list[str]] = {}
    anchors: dict[str, str | None] = {}
    moved: list[str] = []
    meta: dict[str, tuple[Held, Held]] = {}
    for edit in outcome.plan.edits:
        if isinstance(edit, SetMetadata):
            for key in (*edit.changes, *edit.remove):
                meta.setdefault(key, (_held(before, key), _held(after, key)))
            continue
        for cid in _touched(edit):
            cells.setdefault(cid, (_cell(before, cid, before_ids), _cell(after, cid, after_ids)))
        if isinstance(edit, UpdateCell):
            keys.setdefault(edit.id, []).extend(
                k for k in (*edit.changes, *edit.remove) if k in _FIELDS
            )
        elif isinstance(edit, InsertCells | MoveCells):
            for cid in _touched(edit):
                at = after_ids.index(cid) if cid in after_ids else -1
                anchors[cid] = after_ids[at - 1] if at > 0 else None
            if isinstance(edit, MoveCells):
                moved.extend(edit.ids)
    return {"cells": cells, "keys": keys, "anchors": anchors, "moved": moved, "meta": meta}


def recover(unsaved: Unsaved, now: Notebook) -> Recovery:
    """Which of nbrelay's ``unsaved`` changes the notebook ``now`` (as the server reopened it)
    lacks. One is restored when nothing else changed what it changed since (the cell is still
    as it was before nbrelay's first unsaved edit of it: the file did not move on meanwhile);
    otherwise it is only named. Moves are only named."""
    has = {c["id"]: c for c in now.cells}
    order = list(now.ids)
    inserts: list[str] = []
    deletes: list[str] = []
    updates: dict[str, dict[str, Any]] = {}
    restored: list[str] = []
    lost: list[str] = []
    for cid, had in unsaved.had.items():
        base, is_now = unsaved.base.get(cid), has.get(cid)
        if had is not None and base is None:  # nbrelay made it
            if is_now is None:
                inserts.append(cid)
                restored.append(f"the new cell {cid!r} ({_first_line(had)!r})")
        elif had is None and base is not None:  # nbrelay deleted it
            if is_now is not None and is_now == base:
                deletes.append(cid)
                restored.append(f"the deletion of cell {cid!r}")
            elif is_now is not None:
                lost.append(f"the deletion of cell {cid!r}")
        elif had is not None and base is not None:  # nbrelay changed it
            for key in unsaved.keys.get(cid, []):
                if is_now is not None and had.get(key) == is_now.get(key):
                    continue
                what = f"the {_FIELDS[key]} of cell {cid!r}"
                if is_now is not None and base.get(key) == is_now.get(key):
                    updates.setdefault(cid, {})[key] = had.get(key)
                    restored.append(what)
                else:
                    lost.append(what)
    for cid in unsaved.moved:
        if cid in has and unsaved.had.get(cid) is not None:
            at = order.index(cid)
            if (order[at - 1] if at > 0 else None) != unsaved.anchors.get(cid):
                lost.append(f"the move of cell {cid!r}")
    edits: list[Edit] = []
    if deletes:
        edits.append(DeleteCells(tuple(deletes)))
        order = [cid for cid in order if cid not in deletes]
    made = {cid: cell for cid in inserts if (cell := unsaved.had[cid]) is not None}
    pending = list(made)
    while pending:  # each after the cell before it, once that one is back
        ready = [cid for cid in pending if unsaved.anchors.get(cid) not in pending]
        for cid in ready or pending:  # anchors pointing at each other: as they come
            anchor = unsaved.anchors.get(cid)
            if anchor in order:
                index = order.index(anchor) + 1
            else:
                index = 0 if anchor is None else len(order)
            edits.append(InsertCells(index, (copy.deepcopy(made[cid]),)))
            order.insert(index, cid)
            pending.remove(cid)
    for cid, changes in updates.items():
        edits.append(UpdateCell(cid, {k: copy.deepcopy(v) for k, v in changes.items()}))
    setting: dict[str, Any] = {}
    removing: list[str] = []
    for key, wanted in unsaved.meta_had.items():
        there = _held(now, key)
        if wanted == there:
            continue
        what = f"the notebook's metadata {key!r}"
        if unsaved.meta_base.get(key) == there:
            if wanted:
                setting[key] = copy.deepcopy(wanted[0])
            else:
                removing.append(key)
            restored.append(what)
        else:
            lost.append(what)
    if setting or removing:
        edits.append(SetMetadata(setting, tuple(removing)))
    return Recovery(tuple(edits), tuple(restored), tuple(lost), unsaved.forgotten)


RELOADED_BEFORE_SAVING = (
    "The Jupyter Server reloaded {path!r} from its file before saving some of your edits (the "
    "file changed on disk, or a save the server failed left it newer than the server recorded)."
)


def recovery_note(path: str, recovery: Recovery, *, reloaded: bool = False) -> str:
    """What the agent is told about its unsaved edits after the room reopened, or after the
    server reloaded it from its file (``reloaded``); empty when nothing was missing."""
    if not recovery.restored and not recovery.lost and not recovery.forgotten:
        return ""
    if reloaded:
        parts = [RELOADED_BEFORE_SAVING.format(path=path)]
    else:
        parts = [f"The Jupyter Server stopped before saving some of your edits to {path!r}."]
    if recovery.restored:
        parts.append(
            "nbrelay applied these again to the notebook as the server "
            + ("reloaded" if reloaded else "reopened")
            + " it: "
            + _listed(recovery.restored)
            + "."
        )
    if recovery.lost:
        parts.append(
            "These are not in the notebook now, and nbrelay did not apply them again because "
            "the notebook changed there meanwhile: "
            + _listed(recovery.lost)
            + ". Redo what you still want."
        )
    if recovery.forgotten:
        parts.append(
            f"{recovery.forgotten} earlier edits were too many to remember and were not checked: "
            "read the notebook to see whether they are there."
        )
    return " ".join(parts)


def _listed(phrases: Sequence[str]) -> str:
    shown = "; ".join(phrases[:_SHOWN])
    return shown + (f"; and {len(phrases) - _SHOWN} more" if len(phrases) > _SHOWN else "")
