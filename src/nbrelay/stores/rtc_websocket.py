"""Live mode's way into the rooms: a WebSocket per notebook, as a browser tab joins it.

Joining asks the server for the notebook's collaboration session (which also tells whether it
has jupyter-collaboration at all), then opens the room's WebSocket on a fresh document and waits
until the server has filled it (``stores.yprotocol``). Each room runs in the store's task group,
shielded until it is closed, so that the store can save it even while that group is being
cancelled. While any room is open, the agent is listed among JupyterLab's online collaborators
under its own name (the global awareness room).
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskGroup, TaskStatus

from nbrelay.errors import NbrelayError, NotebookNotFound, RemoteError, act
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.stores.rtc_rooms import RoomWay
from nbrelay.stores.yprotocol import GLOBAL_AWARENESS, Room, agent_user

logger = logging.getLogger("nbrelay.rtc")


class WebSocketWay(RoomWay):
    """Rooms over WebSockets to a Jupyter Server (see the module docstring)."""

    name = "websocket"
    output_interval = 0.1

    def __init__(
        self, api: JupyterAPI, *, agent_name: str = "nbrelay agent", sync_timeout: float = 60.0
    ) -> None:
        self.api = api
        self.user = agent_user(agent_name)
        self.sync_timeout = sync_timeout
        self._tg: TaskGroup | None = None
        self._presence: Room | None = None
        self._presence_lock = anyio.Lock()
        # Every room started and not yet ended, listed or not: a room runs shielded until it is
        # closed, so one that no list holds (joined while the server stopped) would keep the
        # server's task group open forever. ``stop`` closes these too.
        self._started: set[Room] = set()
        self._stopping = False

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._stopping = False

    async def _start(self, room: Room) -> None:
        if self._stopping or self._tg is None:
            await room.close()
            raise RemoteError("nbrelay is shutting down; the notebook was not opened.")
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

    async def join(self, rel: str, full: str) -> Room | None:
        if not await self.api.exists(full):
            raise NotebookNotFound(f"notebook {rel!r} does not exist.", hint=act("missing"))
        session = await self.api.collaboration_session(full)
        if session is None:
            self.rtc = False
            return None
        self.rtc = True
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
        return room

    async def announce(self, full: str) -> None:
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

    async def alone(self) -> None:
        async with self._presence_lock:
            presence, self._presence = self._presence, None
        if presence is not None:
            await presence.close()

    async def stop(self) -> None:
        self._stopping = True
        await self.alone()
        for room in list(self._started):  # rooms being joined, which no list holds yet
            await room.close()
