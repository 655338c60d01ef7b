"""Saving a room's notebook to its file: on demand, and coalesced in the background.

An edit returns as soon as the server has it in the room (everyone in the notebook sees it from
then on); the ``.ipynb`` is written by the server when nbrelay asks it to save. A save is
**barrier, save, barrier**: the server has applied everything sent before the request, saves,
and nothing it reloaded from disk meanwhile is missed. ``saver`` runs one per room and makes one
save for the edits of the last ``delay`` seconds (another after it if more came meanwhile).
"""

from __future__ import annotations

import logging

import anyio

from nbrelay.errors import NbrelayError
from nbrelay.stores.yprotocol import Room, RoomLost

logger = logging.getLogger("nbrelay.rtc")

SAVE_NOTE = (
    "The change is live in JupyterLab, but the server did not confirm saving the file ({why}); "
    "it saves again on the next change."
)
LOST = "the connection to the Jupyter Server dropped; nbrelay reconnects on the next call"


async def save(room: Room) -> str | None:
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


async def save_room(room: Room) -> str | None:
    """Save the room's edits so far (see ``save``); the count of saved edits follows."""
    upto = room.edits
    saved = await save(room)
    if saved is None:
        room.saved = max(room.saved, upto)
    return saved


async def flush(room: Room | None) -> str | None:
    """Wait until the file holds every edit nbrelay made in the room (a save the server
    confirmed); None when it does (or there is nothing to save), else why not."""
    if room is None or not room.alive or room.saved >= room.edits:
        return None
    try:
        async with room.lock:
            return await save_room(room)
    except RoomLost:
        return LOST


async def saver(room: Room, delay: float) -> None:
    """Save a room's file after its edits, coalesced (ends with the room)."""
    while True:
        await room.save_wanted.wait()
        if room.closed.is_set():
            return
        await anyio.sleep(delay)
        room.save_wanted = anyio.Event()
        if room.closed.is_set():
            return
        if room.saved >= room.edits:
            continue
        try:
            saved = await save_room(room)
        except (RoomLost, NbrelayError) as exc:
            saved = str(exc)
        if saved is not None:
            logger.warning("saving %s did not succeed: %s", room.name, saved)
