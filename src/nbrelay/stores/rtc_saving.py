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
from dataclasses import dataclass

import anyio

from nbrelay.errors import NbrelayError
from nbrelay.notebook.edits import DeleteCells, Edit, InsertCells, MoveCells, UpdateCell
from nbrelay.notebook.model import Cell, Notebook
from nbrelay.stores.base import EditOutcome
from nbrelay.stores.rtc_room import RoomLost, SharedRoom

logger = logging.getLogger("nbrelay.rtc")

SAVE_NOTE = (
    "The change is live in JupyterLab, but the server did not confirm saving the file ({why}); "
    "it saves again on the next change."
)
LOST = "the connection to the Jupyter Server dropped; nbrelay reconnects on the next call"
_FIELDS = {"source": "source", "outputs": "outputs", "metadata": "metadata"}
_SHOWN = 12  # lost changes named one by one; the rest are counted


async def save(room: SharedRoom) -> str | None:
    """Barrier, save, barrier; None when saved, else why not."""
    await room.barrier()
    status = ""
    for delay in (0.05, 0.2, 0.5):
        status = await room.save()
        if status != "skipped":
            break
        await anyio.sleep(delay)
    await room.barrier()
    return None if status == "success" else status


async def save_room(room: SharedRoom) -> str | None:
    """Save the room's edits so far (see ``save``); the count of saved edits follows."""
    upto = room.edits
    saved = await save(room)
    if saved is None:
        room.written(upto)
    return saved


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


async def saver(room: SharedRoom, delay: float, ceiling: float = 5.0) -> None:
    """Save a room's file once ``delay`` seconds passed without an edit of nbrelay's, or
    ``ceiling`` seconds after the first edit not yet saved in a longer burst (ends with the
    room)."""
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
        if room.closed.is_set():
            return
        if not room.pending:
            continue
        try:
            saved = await save_room(room)
        except (RoomLost, NbrelayError) as exc:
            saved = str(exc)
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


def recover(unsaved: Sequence[EditOutcome], last: Notebook, now: Notebook) -> Recovery:
    """Compare the room as nbrelay last had it (``last``, every acknowledged edit in it) with
    the notebook as the server reopened it (``now``), for the changes nbrelay's ``unsaved``
    edits made. A change missing from ``now`` is restored when nothing else changed what it
    changed since (the cell is still as it was before nbrelay's first unsaved edit: the file
    did not move on meanwhile); otherwise it is only named. Moves are only named."""
    if not unsaved:
        return Recovery((), (), ())
    base = {c["id"]: c for c in unsaved[0].before.notebook.cells}
    had = {c["id"]: c for c in last.cells}
    has = {c["id"]: c for c in now.cells}
    inserts: list[str] = []
    deletes: list[str] = []
    updates: dict[str, dict[str, object]] = {}
    restored: list[str] = []
    lost: list[str] = []

    def note(into: list[str], what: str) -> None:
        if what not in restored and what not in lost:
            into.append(what)

    for outcome in unsaved:
        for edit in outcome.plan.edits:
            if isinstance(edit, InsertCells):
                for cell in edit.cells:
                    cid = str(cell["id"])
                    if cid in had and cid not in has and cid not in inserts:
                        inserts.append(cid)
                        note(restored, f"the new cell {cid!r} ({_first_line(had[cid])!r})")
            elif isinstance(edit, DeleteCells):
                for cid in edit.ids:
                    if cid in has and cid not in had and cid not in deletes:
                        if cid in base and has[cid] == base[cid]:
                            deletes.append(cid)
                            note(restored, f"the deletion of cell {cid!r}")
                        else:
                            note(lost, f"the deletion of cell {cid!r}")
            elif isinstance(edit, UpdateCell):
                if edit.id not in had or edit.id not in has:
                    continue
                for key in [k for k in (*edit.changes, *edit.remove) if k in _FIELDS]:
                    if had[edit.id].get(key) == has[edit.id].get(key):
                        continue
                    what = f"the {_FIELDS[key]} of cell {edit.id!r}"
                    before = base.get(edit.id)
                    if before is not None and before.get(key) == has[edit.id].get(key):
                        updates.setdefault(edit.id, {})[key] = had[edit.id].get(key)
                        note(restored, what)
                    else:
                        note(lost, what)
            elif isinstance(edit, MoveCells):
                common = [cid for cid in last.ids if cid in has]
                kept = [cid for cid in now.ids if cid in had]
                moved = [cid for cid in edit.ids if cid in had and cid in has]
                if moved and [common.index(c) for c in moved] != [kept.index(c) for c in moved]:
                    note(
                        lost,
                        "the move of cell" + ("s " if len(moved) > 1 else " ") + ", ".join(moved),
                    )
    edits: list[Edit] = []
    if deletes:
        edits.append(DeleteCells(tuple(deletes)))
    order = [cid for cid in now.ids if cid not in deletes]
    for cid in [c for c in last.ids if c in inserts]:  # in the order the room had them
        at = last.ids.index(cid)
        anchor = next((c for c in reversed(last.ids[:at]) if c in order), None)
        index = order.index(anchor) + 1 if anchor is not None else 0
        edits.append(InsertCells(index, (copy.deepcopy(had[cid]),)))
        order.insert(index, cid)
    for cid, changes in updates.items():
        edits.append(UpdateCell(cid, {k: copy.deepcopy(v) for k, v in changes.items()}))
    return Recovery(tuple(edits), tuple(restored), tuple(lost))


def recovery_note(path: str, recovery: Recovery) -> str:
    """What the agent is told about its unsaved edits after the room reopened (empty when
    nothing was missing)."""
    if not recovery.restored and not recovery.lost:
        return ""
    parts = [f"The Jupyter Server stopped before saving some of your edits to {path!r}."]
    if recovery.restored:
        parts.append(
            "nbrelay applied these again to the notebook as the server reopened it: "
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
    return " ".join(parts)


def _listed(phrases: Sequence[str]) -> str:
    shown = "; ".join(phrases[:_SHOWN])
    return shown + (f"; and {len(phrases) - _SHOWN} more" if len(phrases) > _SHOWN else "")
