"""Live mode's way into the rooms: a WebSocket per notebook, as a browser tab joins it.

Joining asks the server for the notebook's collaboration session (which also tells whether it
has jupyter-collaboration at all), then opens the room's WebSocket on a fresh document and waits
until the server has filled it (``stores.yprotocol``). Each room runs in the store's task group,
shielded until it is closed, so that the store can save it even while that group is being
cancelled. While any room is open, the agent is listed among JupyterLab's online collaborators
under its own name (the global awareness room), and nbrelay listens to the server's events
WebSocket (``api/events/subscribe``) for what jupyter-collaboration says of its saves
(``stores.rtc_events``: a save it failed is reported with its reason). A server that refuses that
WebSocket (no ``events`` permission, a Jupyter Server before 2.0) is asked again a minute later;
meanwhile a failed save is still reported, saying that nbrelay cannot tell why.
"""

from __future__ import annotations

import json
import logging
import time

import anyio
from anyio.abc import TaskGroup, TaskStatus

from nbrelay.errors import NbrelayError, NotebookNotFound, RemoteError, act
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.stores.rtc_events import EVENTS_URI, SaveEvents
from nbrelay.stores.rtc_rooms import RoomWay, Unloadable
from nbrelay.stores.yprotocol import GLOBAL_AWARENESS, Room, agent_user

logger = logging.getLogger("nbrelay.rtc")

EVENTS_RETRY = 60.0  # seconds before asking again for an events WebSocket the server refused
EVENTS_OPEN = 5.0  # seconds the events WebSocket may take to open
# A room holding less than this share of its file's bytes (as a Y update) may still be loading
# (see ``WebSocketWay._loaded``); it is watched for ``LOAD_QUIET`` seconds at a time, at most
# ``LOAD_WAIT`` seconds in all. A loaded room holds about its file's bytes (more for small
# cells; JSON outputs pretty-printed in the file, plotly's, half or less); a room the server
# has just begun to load, its metadata.
PARTIAL_SHARE = 0.25
LOAD_QUIET = 0.5
LOAD_WAIT = 30.0
LOADING_KEPT = 600.0  # seconds a notebook found still loading is watched at every join


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
        self.events = SaveEvents()
        self._events_scope: anyio.CancelScope | None = None  # while the events socket is open
        self._events_retry = 0.0  # monotonic time before which a refused socket is not asked
        self._loading: dict[str, float] = {}  # notebooks found still loading, until when
        self._events_opening = anyio.Lock()  # one socket, however many rooms join at once
        self._run_states: bool | None = None  # what the last room told (``_keeps_run_states``)

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
        try:
            model = await self.api.get_contents(full, content=False)
        except NotebookNotFound:
            raise NotebookNotFound(
                f"notebook {rel!r} does not exist.", hint=act("missing")
            ) from None
        session = await self.api.collaboration_session(full)
        if session is None:
            self.rtc = False
            return None
        self.rtc = True
        room = Room(
            self.api,
            f"json:notebook:{session['fileId']}",
            session_id=str(session.get("sessionId") or ""),
            handshakes=session.get("server") == "jupyter-server-documents",
            name=rel,
            user=self.user,
            path=full,
            events=self.events,
        )
        await self._start(room)
        try:
            await room.wait_synced(self.sync_timeout)
        except RemoteError as exc:
            await room.close()
            if room.unloadable:  # as in process: the contents API serves this notebook
                raise Unloadable(room.close_reason) from exc
            raise
        except BaseException:
            await room.close()
            raise
        try:
            await self._loaded(room, rel, model.get("size"))
        except BaseException:
            await room.close()
            raise
        self._loading.pop(rel, None)
        room.run_states = self._keeps_run_states(room)
        await self._hear_events()
        return room

    def _keeps_run_states(self, room: Room) -> bool:
        """Whether the server's documents keep code cells' run state (``execution_state``).

        jupyter_ydoc 3.0 and later gives every code cell it loads one (and JupyterLab shows
        ``[*]`` from it); an older one (jupyter-collaboration 2.x, and 3.x may have it) writes
        the key into the file, which nbformat then rejects. The first code cell of the room
        tells (the placeholder of an empty notebook is one); a room without one goes by what
        another room of the server told, or gets none."""
        for cell in room.ycells:
            if cell.get("cell_type") == "code":
                self._run_states = "execution_state" in cell
                return self._run_states
        return bool(self._run_states)

    async def _loaded(self, room: Room, rel: str, size: object) -> None:
        """Wait for the rest of a notebook the server is still loading a few cells at a time.

        With jupyter-collaboration's ``document_load_progressively`` the server syncs a room
        once the notebook's metadata is in, and its cells follow over seconds or minutes: a
        20,000-cell notebook read as 0 cells, then 6,035. A WebSocket client is not told when
        the load ends (in process nbrelay waits for the room's own future). So a room that
        holds much less than its file (``PARTIAL_SHARE`` of its bytes) is watched: while cells
        keep arriving it is waited for, up to ``LOAD_WAIT``; once none arrive for
        ``LOAD_QUIET`` it is taken as it is (a person may have deleted cells, unsaved). A
        notebook found still loading is watched at every join for ``LOADING_KEPT`` seconds
        (the room it was found in goes on loading past the share)."""
        watch = self._loading.get(rel, 0.0) > time.monotonic()
        if not watch and (not isinstance(size, int) or size <= 0):
            return
        if not watch and isinstance(size, int):
            # A cell costs a Y update at least its keys (~60 bytes): enough cells settle it
            # without encoding the document.
            if len(room.ycells) * 60 >= PARTIAL_SHARE * size:
                return
            if len(room.doc.get_update()) >= PARTIAL_SHARE * size:
                return
        count = len(room.ycells)
        with anyio.move_on_after(LOAD_WAIT):
            while True:
                await anyio.sleep(LOAD_QUIET)
                if len(room.ycells) == count:
                    return
                count = len(room.ycells)
        self._loading[rel] = time.monotonic() + LOADING_KEPT
        raise RemoteError(
            f"the Jupyter Server is still loading {rel!r} into its room a few cells at a time "
            f"(its YDocExtension.document_load_progressively setting): {count:,} cells after "
            f"{LOAD_WAIT:g} s, and more arriving; what it holds so far is not the whole notebook.",
            hint="Retry in a minute: a notebook of thousands of cells can take minutes.",
        )

    async def _hear_events(self) -> None:
        """Open the server's events WebSocket unless it is open (it closes with the server:
        the next join opens it again) or was refused less than ``EVENTS_RETRY`` seconds ago."""
        async with self._events_opening:
            if (
                self._events_scope is not None
                or self._stopping
                or self._tg is None
                or time.monotonic() < self._events_retry
            ):
                return
            try:
                with anyio.fail_after(EVENTS_OPEN):  # never holds up the call that joined
                    await self._tg.start(self._events)
            except Exception as exc:  # refused (a RemoteError naming the status), unreachable
                self._events_retry = time.monotonic() + EVENTS_RETRY
                logger.warning(
                    "the Jupyter Server's events WebSocket is not available (%s): a save the "
                    "server fails is reported without its reason",
                    str(exc) or f"{type(exc).__name__} after {EVENTS_OPEN:g} s",
                )

    async def _events(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hear the server's events until the socket closes (``stores.rtc_events``)."""
        from websockets.exceptions import ConnectionClosed

        with anyio.CancelScope() as scope:
            async with self.api.websocket("api/events/subscribe") as ws:
                self._events_scope = scope
                self.events.listening = True
                task_status.started()
                try:
                    async for message in ws:
                        try:
                            data = json.loads(message)
                        except ValueError:
                            continue
                        if isinstance(data, dict) and data.get("schema_id") == EVENTS_URI:
                            self.events.heard(data)
                except ConnectionClosed as exc:
                    logger.info("the events WebSocket closed: %s", exc)
                except Exception as exc:  # never let it end the store's task group
                    logger.warning("the events WebSocket failed: %r", exc)
                finally:
                    self.events.listening = False
                    self._events_scope = None

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
        if self._events_scope is not None:
            self._events_scope.cancel()
        await self.alone()
        for room in list(self._started):  # rooms being joined, which no list holds yet
            await room.close()
