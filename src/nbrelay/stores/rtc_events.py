"""What jupyter-collaboration says of its saves, heard from its events.

jupyter-collaboration catches an error in a room's save (a jupytext pair it cannot write, a full
disk after the notebook's own file was written), logs it and ends the save normally: the room's
save request is answered "success", and the saved hash in the document stays as it was, which
nbrelay would otherwise take for a save a later change interrupted. It also answers "success"
when it reloaded the room from a file that changed on disk instead of saving. Only its events
(jupyter_events, schema ``EVENTS_URI``: a level, an action, a message, per room) tell these
apart. ``SaveEvents`` counts them and answers, for a save begun at a given count, what the server
said of it; and it tells a joined room when the server reloads it (``on_reload``): the only sign
of a reload when the server never saved the room (the document's saved hash, whose deletion
otherwise marks one, is set by a save). The server extension hears the events in process (the
server's event logger); live mode over the Jupyter Server's events WebSocket
(``stores.rtc_websocket``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio

EVENTS_URI = "https://schema.jupyter.org/jupyter_collaboration/session/v1"
RELOADED = (
    "the file had changed on disk since the server last saved it, so the server reloaded the "
    "notebook from the file instead of saving"
)


class SaveEvents:
    """jupyter-collaboration's events, counted: per room id the count at its last event, and
    at its last failed or replaced save, with why."""

    def __init__(self) -> None:
        self.count = 0
        self.listening = False  # events reach this object now
        self.last_event: dict[str, int] = {}
        self.save_errors: dict[str, tuple[int, str]] = {}
        self._news: anyio.Event | None = None  # set at the next event
        # Called when the server reloads a room from its file (by room id: the room joined).
        self.on_reload: dict[str, Callable[[], None]] = {}

    def heard(self, data: Mapping[str, Any]) -> None:
        """Take one event of jupyter-collaboration's session schema."""
        room_id = data.get("room")
        if not isinstance(room_id, str):
            return
        self.count += 1
        self.last_event[room_id] = self.count
        if data.get("level") == "ERROR":
            message = " ".join(str(data.get("msg") or "an error").split())
            self.save_errors[room_id] = (
                self.count,
                f"failed: {message} (the Jupyter Server's log has the details)",
            )
        elif data.get("action") == "overwrite":  # the file had changed: reloaded, not saved
            self.save_errors[room_id] = (self.count, RELOADED)
            reloaded = self.on_reload.get(room_id)
            if reloaded is not None:
                reloaded()
        if self._news is not None:
            self._news.set()
            self._news = None

    async def said(self, room_id: str, since: int, within: float) -> str | None:
        """Why the server did not save ``room_id`` in a save begun at count ``since`` (it
        failed, with its message; or it reloaded the room instead), if an event said so; waits
        up to ``within`` seconds for the room's next event when none came since."""
        with anyio.move_on_after(within):
            while self.last_event.get(room_id, 0) <= since:
                if self._news is None:
                    self._news = anyio.Event()
                await self._news.wait()
        count, message = self.save_errors.get(room_id, (0, ""))
        return message if count > since else None
