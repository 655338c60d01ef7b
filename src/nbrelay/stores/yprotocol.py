"""The Yjs wire protocol of jupyter-collaboration, as a client: one connection to one room.

A room always starts from an empty ``pycrdt.Doc`` that the server's SYNC_STEP2 fills; nothing
reads or writes it before that, and a connection that drops is never reused (the store opens a
new session with a fresh document). Frames are y-protocols messages, each starting with a
varuint type: SYNC (STEP1 state vector, STEP2 missing updates, UPDATE), AWARENESS (presence) and
RAW (jupyter-collaboration's own JSON messages, such as ``save``). Local transactions are sent
through one ordered queue; a save request goes over a connection of its own (``Room.save``),
after a barrier on this one, so it never overtakes the edit it is meant to save, and that
connection waits for the server's answer even after nbrelay stopped waiting for it. The reader
never touches the document inside an observer callback, and a frame that fails to apply ends
the connection rather than leaving a document that differs from the room.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import secrets
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from nbrelay.errors import NbrelayError, RemoteError
from nbrelay.jupyter_api import JupyterAPI, ack_at_once
from nbrelay.stores import paths
from nbrelay.stores.rtc_events import SaveEvents
from nbrelay.stores.rtc_room import EMPTY_UPDATE, SAVED_ALONE, RoomLost, SharedRoom

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from nbrelay.notebook.model import Notebook

logger = logging.getLogger("nbrelay.rtc")

SYNC, AWARENESS, RAW = 0, 1, 2
STEP1, STEP2 = 0, 1

GLOBAL_AWARENESS = "JupyterLab:globalAwareness"
# What a barrier that timed out adds on jupyter-server-documents: its room stops reading every
# client's messages for good when one comes from a client that has just left (0.3.3 raises
# UnboundLocalError in ``YjsClientGroup.get``, which ends the room's message task).
STALLED = (
    " If it keeps failing: jupyter-server-documents stops reading a room's messages when a"
    " client leaves just after sending one (its log shows an UnboundLocalError); restart"
    " JupyterLab, or close the notebook everywhere until the server drops the room."
)
# The field of nbrelay's awareness state that numbers its barriers on a server that answers each
# SYNC_STEP1 with a whole handshake (``Room.barrier``).
ECHO = "nbrelayBarrier"
# Seconds nbrelay still listens, in the background, for the end of a save it stopped waiting for
# (``Room.save``), at most (and never past the room's end).
LATE_SAVE = 300.0
# jupyter-collaboration's close code for a room whose file the contents manager could not read as
# a notebook (a bad request; not 4500, its own error, which may pass).
UNLOADABLE_CODES = frozenset({4400})
# A server that answers no request to save (jupyter-collaboration before 4.1) and did not save
# on its own either.
UNASKED = (
    "the server did not save within {within:g} s: this jupyter-collaboration (before 4.1) cannot "
    "be asked to save and saves on its own about a second after a change, unless its "
    "YDocExtension.document_save_delay setting is null (autosave off)"
)

__all__ = ["GLOBAL_AWARENESS", "Room", "RoomLost", "agent_user", "client_id"]


def _outline(nb: Notebook) -> list[tuple[Any, Any, Any]]:
    """What a person sees of a notebook's cells: their ids, types and sources."""
    return [(c.get("id"), c.get("cell_type"), c.get("source")) for c in nb.cells]


def client_id() -> int:
    """A document's Yjs client id, as a browser picks one: 32 random bits (never 0).

    pycrdt draws 53 bits by default, and a server on pycrdt before 0.13 (jupyter-collaboration
    up to 3.x pins it) reads no more than 32: it holds nbrelay's edits under another client id
    and sends them back as someone else's, which this document then applies a second time (an
    inserted word twice, a moved cell twice, outputs twice)."""
    return secrets.randbelow(2**32 - 1) + 1


class Room(SharedRoom):
    """A live connection to one Y room: a fresh document, its reader and writer tasks."""

    saves_apart = True

    def __init__(
        self,
        api: JupyterAPI,
        room_id: str,
        *,
        session_id: str | None,
        name: str,
        user: Mapping[str, Any],
        path: str | None = None,
        state: Mapping[str, Any] | None = None,
        events: SaveEvents | None = None,
        handshakes: bool = False,
    ) -> None:
        import pycrdt

        super().__init__(pycrdt.Doc(client_id=client_id()), name=name, room_id=room_id)
        self.api = api
        self.path = name if path is None else path  # the notebook's path on the server
        self.events = events  # what the server's events WebSocket says of saves
        if events is not None:
            events.on_reload[room_id] = self.server_reloaded
        self.session_id = session_id
        self.awareness = pycrdt.Awareness(self.doc)
        self.awareness.set_local_state({"user": dict(user), **dict(state or {})})
        self.synced = anyio.Event()
        self.close_code: int | None = None
        self.close_message = ""  # the reason the server gave when it closed the room
        self._out_send, self._out_recv = anyio.create_memory_object_stream[bytes](math.inf)
        self._barriers: deque[anyio.Event] = deque()
        # A server that answers each SYNC_STEP1 with a whole handshake (jupyter-server-documents:
        # it holds back every client's updates meanwhile, then sends them as one, and a move
        # that is one update puts a person's typing in another cell): barriers are nbrelay's
        # own awareness state, numbered, coming back in order instead (``barrier``).
        self.handshakes = handshakes
        self._echoes: deque[tuple[int, anyio.Event]] = deque()
        self._echo_ids = itertools.count(1)
        self._save_ids = itertools.count(1)
        self._remote = False
        self._scope: anyio.CancelScope | None = None
        self._close_wanted = False  # ``close`` ran, perhaps before ``run`` had its scope
        self._tg: TaskGroup | None = None  # the room's own tasks, while it runs
        self.ws: ClientConnection | None = None

    # -- lifetime -------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect and serve the room until it closes. Connection errors before the start are
        raised to the caller of ``TaskGroup.start``; later ones end the room quietly."""
        params = {"sessionId": self.session_id} if self.session_id else None
        started = False
        try:
            # Shielded: a room ends when it is closed (``close``), so that the store can save it
            # first even while the task group around it is being cancelled.
            if self._close_wanted:  # closed before it began (the server is stopping)
                raise RemoteError("nbrelay is shutting down; the notebook was not opened.")
            with anyio.CancelScope(shield=True) as scope:
                self._scope = scope
                async with self.api.websocket(
                    f"api/collaboration/room/{self.room_id}", params=params
                ) as ws:
                    self.ws = ws
                    self._watch()
                    watch = self.awareness.observe(self._on_awareness)
                    try:
                        async with anyio.create_task_group() as tg:
                            self._tg = tg
                            tg.start_soon(self._writer, ws)
                            await tg.start(self.awareness.start)
                            self._send_sync_step1()
                            self._send_awareness()
                            started = True
                            task_status.started()
                            await self._reader(ws)
                            tg.cancel_scope.cancel()
                    finally:
                        self._tg = None
                        self._unwatch()
                        self.awareness.unobserve(watch)
                        with contextlib.suppress(Exception):
                            # Say goodbye so the person's JupyterLab drops the agent at once.
                            self.awareness.set_local_state(None)
                            with anyio.move_on_after(1, shield=True):
                                await ws.send(self._awareness_message())
        except NbrelayError as exc:
            if not started:
                raise
            self._end(str(exc), lost=True)
        except Exception as exc:
            if not started:
                raise RemoteError(
                    f"the connection to the room of {self.name!r} failed ({type(exc).__name__}).",
                    hint="Check that the Jupyter Server is running, then retry.",
                ) from exc
            # After the server closed the room, a task still sending meets the closed socket.
            log = logger.info if self.closed.is_set() else logger.warning
            log("room %s ended: %r", self.name, exc)
            self._end(f"{type(exc).__name__}", lost=True)
        finally:
            self._end(self.close_reason or "closed", lost=self.lost)

    def _end(self, reason: str, *, lost: bool) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.lost = lost
        self.closed.set()
        if self.events is not None and self.events.on_reload.get(self.room_id) == (
            self.server_reloaded
        ):
            del self.events.on_reload[self.room_id]
        self._out_send.close()
        self._out_recv.close()
        for ev in (*self._barriers, *(ev for _, ev in self._echoes)):
            ev.set()
        self.save_wanted.set()  # wakes the saver, which then ends

    async def close(self) -> None:
        """Leave the room (used for idle rooms and on shutdown)."""
        self._close_wanted = True
        if self._scope is None:  # it never began: nothing runs to end it
            self._end("closed before it began", lost=False)
            return
        if self.handshakes and self.alive:
            # jupyter-server-documents stops reading the room's messages, for every client,
            # when it reads a change from a client that has left (``STALLED``): leave once the
            # server has read all of nbrelay's.
            with contextlib.suppress(NbrelayError, RoomLost), anyio.CancelScope(shield=True):
                await self.barrier(within=5.0)
        self._scope.cancel()
        with anyio.move_on_after(5, shield=True):
            await self.closed.wait()

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

    @property
    def hears_events(self) -> bool:
        return self.events is not None and self.events.listening

    def events_heard(self) -> int:
        return self.events.count if self.events is not None else 0

    async def save_said(self, since: int) -> str | None:
        if self.events is None or not self.events.listening:
            return None
        # The server sends a save's event before its answer, but on another connection: the
        # wait covers the two crossing.
        return await self.events.said(self.room_id, since, within=0.5)

    async def wait_synced(self, within: float) -> None:
        with anyio.move_on_after(within):
            async with anyio.create_task_group() as tg:

                async def on_closed() -> None:
                    await self.closed.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_closed)
                await self.synced.wait()
                tg.cancel_scope.cancel()
        if self.closed.is_set() and self.close_code == 4404:
            raise paths.missing(self.name)
        if self.closed.is_set():
            raise RemoteError(
                f"the Jupyter Server closed the room of {self.name!r} while nbrelay was joining "
                f"it ({self.close_reason}).",
                hint="Retry; if it keeps failing, open the notebook in JupyterLab to see why.",
            )
        if not self.synced.is_set():
            raise RemoteError(
                f"the room of {self.name!r} did not finish syncing within {within:g} s.",
                hint="The server may be overloaded or the notebook very large; retry.",
            )

    @property
    def unloadable(self) -> bool:
        """Whether the server closed the room because it cannot load the notebook into one:
        jupyter-collaboration's "initialization_error" that no reload mends (jupyter_ydoc cannot
        hold the notebook: a cell with no source, as a notebook of a later nbformat may have),
        or its code for a file the contents manager could not read as a notebook (4400)."""
        if self.close_code in UNLOADABLE_CODES:
            return True
        if self.close_code != 1003:
            return False
        try:
            said = json.loads(self.close_message)
        except ValueError:
            return False
        return (
            isinstance(said, dict)
            and said.get("reason") == "initialization_error"
            and not said.get("reloadable", True)
        )

    # -- frames ---------------------------------------------------------------------------

    def _send(self, message: bytes) -> None:
        if not self.closed.is_set():
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._out_send.send_nowait(message)

    def _send_sync_step1(self) -> None:
        import pycrdt

        self._send(pycrdt.create_sync_message(self.doc))

    def _awareness_message(self) -> bytes:
        import pycrdt

        update = self.awareness.encode_awareness_update([self.awareness.client_id])
        return pycrdt.create_awareness_message(update)

    def _send_awareness(self) -> None:
        self._send(self._awareness_message())

    def set_state(self, field: str, value: Any) -> None:
        self.awareness.set_local_state_field(field, value)

    def _on_transaction(self, event: Any) -> None:
        # Never read the document here (it is borrowed); just note and forward. Every local
        # change goes to the server (only nbrelay changes this document).
        if event.update == EMPTY_UPDATE or self._remote:  # nothing new, or the server's own
            return
        import pycrdt

        self.sent += 1
        self._send(pycrdt.create_update_message(event.update))

    def _on_awareness(self, topic: str, change: tuple[dict[str, Any], Any]) -> None:
        if topic == "update" and change[1] == "local":
            self._send_awareness()

    async def _writer(self, ws: ClientConnection) -> None:
        async with self._out_recv:
            async for message in self._out_recv:
                await ws.send(message)

    async def _reader(self, ws: ClientConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for message in ws:
                ack_at_once(ws)
                if isinstance(message, bytes) and message:
                    self._dispatch(message)
            self.close_code = ws.close_code
            self.close_message = ws.close_reason or ""
            self._end(f"closed by the server ({ws.close_code} {ws.close_reason})", lost=True)
        except ConnectionClosed as exc:
            self.close_code = exc.rcvd.code if exc.rcvd is not None else None
            self.close_message = exc.rcvd.reason if exc.rcvd is not None else ""
            self._end(f"connection closed ({exc})", lost=True)

    def _dispatch(self, message: bytes) -> None:
        import pycrdt

        kind = message[0]
        if kind == SYNC and len(message) > 1:
            self._remote = True
            try:
                reply = pycrdt.handle_sync_message(message[1:], self.doc)
            except Exception as exc:
                logger.warning("room %s: a sync message failed (%r)", self.name, exc)
                # The document may now differ from the room: never reuse it.
                self._end("a sync message could not be applied", lost=True)
                if self._scope is not None:
                    self._scope.cancel()
                return
            finally:
                self._remote = False
            if reply is not None:
                self._send(reply)
            if message[1] == STEP2:
                if not self.synced.is_set():
                    self.synced.set()
                elif self._barriers:
                    self._barriers.popleft().set()
        elif kind == AWARENESS:
            with contextlib.suppress(Exception):
                update = pycrdt.read_message(message[1:])
                if self._echoes:
                    self._echoed(update)
                self.awareness.apply_awareness_update(update, "remote")
        elif kind == RAW:
            try:
                decoder = pycrdt.Decoder(message)
                decoder.read_var_uint()
                data = json.loads(decoder.read_var_string())
            except Exception:
                return
            if not isinstance(data, dict):
                return
            if data.get("type") == "conflict":
                self._end("the server found this client's document in conflict", lost=True)
                if self._scope is not None:
                    self._scope.cancel()

    # -- operations (called by the store) ---------------------------------------------------

    def _echoed(self, update: bytes) -> None:
        """Set the barriers (``barrier``) whose number nbrelay's own awareness state, as the
        server sent it back in ``update``, has reached."""
        import pycrdt

        decoder = pycrdt.Decoder(update)
        for _ in range(decoder.read_var_uint()):
            client, _clock = decoder.read_var_uint(), decoder.read_var_uint()
            state = json.loads(decoder.read_var_string())
            if client != self.awareness.client_id or not isinstance(state, dict):
                continue
            reached = state.get(ECHO)
            while isinstance(reached, int) and self._echoes and self._echoes[0][0] <= reached:
                self._echoes.popleft()[1].set()

    def check(self) -> None:
        if self.closed.is_set():
            raise RoomLost(self.close_reason)

    async def barrier(self, within: float = 15.0) -> None:
        """Wait until the server has applied everything sent so far, and everything it had is
        here (a SYNC_STEP1 it answers in order)."""
        self.check()
        event = anyio.Event()
        if self.handshakes:
            echo = (next(self._echo_ids), event)
            self._echoes.append(echo)
            self.set_state(ECHO, echo[0])  # sent at once (``_on_awareness``)
        else:
            self._barriers.append(event)
            self._send_sync_step1()
        with anyio.move_on_after(within):
            await event.wait()
        self.check()
        if not event.is_set():
            with contextlib.suppress(ValueError):
                if self.handshakes:
                    self._echoes.remove(echo)
                else:
                    self._barriers.remove(event)
            hint = "The server may be overloaded; retry."
            if self.handshakes:
                hint += STALLED
            raise RemoteError(
                f"the Jupyter Server did not answer within {within:g} s (room of {self.name!r}).",
                hint=hint,
            )

    async def save(self, within: float = 30.0) -> str:
        """Ask the server to save the room to its file now; returns its status.

        The request goes over a connection of its own to the room, which never syncs the
        document: jupyter-collaboration answers a save only once the file is written and reads
        nothing else from that connection meanwhile (seconds for a big notebook), so on the
        room's own connection every edit and barrier would wait behind the save. The caller
        orders it after the edits it saves (a barrier first) and checks the result (``saves_apart``:
        an edit arriving during the save can cancel it, and the server still says "success").

        A save the server makes on its own meanwhile (its autosave, a second after a change)
        holds the edits too: the first of the answer and such a save ends the wait
        (``_saved_alone``). jupyter-collaboration before 4.1 never answers a request to save; a
        server that let one go unanswered for ``within`` seconds while it saved on its own is
        no longer asked (``JupyterAPI.answers_saves``), only waited for.

        The save goes on in the server when nbrelay stops waiting for it ("timeout" after
        ``within`` seconds, or the call cancelled), and the server still answers once the file is
        written: the room listens for that answer in the background (``_listen``), and counts the
        edits the save covered as saved if it succeeded and the notebook did not change after
        it began (``SharedRoom.ended_late``)."""
        import pycrdt

        self.check()
        if self._tg is None:
            raise RoomLost(self.close_reason or "the room is not running")
        recorded = self.save_mark()
        if self.api.answers_saves is False:
            with anyio.move_on_after(within):
                return await self._saved_alone(recorded)
            self.check()
            return UNASKED.format(within=within)
        sid = next(self._save_ids)
        encoder = pycrdt.Encoder()
        encoder.write_var_uint(RAW)
        encoder.write_var_string("save")
        encoder.write_var_uint(sid)
        self.save_requests += 1
        asked = _Save(encoder.to_bytes(), sid, self.save_begins(), recorded)
        self._tg.start_soon(self._listen, asked, within + LATE_SAVE)
        alone: str | None = None
        try:
            with anyio.move_on_after(within):
                async with anyio.create_task_group() as tg:

                    async def answered() -> None:
                        await asked.answered.wait()
                        tg.cancel_scope.cancel()

                    async def saved_alone() -> None:
                        nonlocal alone
                        try:
                            alone = await self._saved_alone(recorded)
                        except (RoomLost, NbrelayError):
                            return  # the answer decides (and the room's end, checked below)
                        tg.cancel_scope.cancel()

                    tg.start_soon(answered)
                    tg.start_soon(saved_alone)
        finally:
            asked.late = True  # from now on, nobody waits for the answer but the room
        self.check()
        if asked.answered.is_set():
            return asked.status
        if alone is not None:
            if self.api.answers_saves is None:
                self._tg.start_soon(self._unanswered, asked, within)
            return alone
        return "timeout"

    async def _saved_alone(self, recorded: tuple[int, int]) -> str:
        """Wait for a save the server makes on its own after ``recorded`` (see ``save``); its
        status. Such a save began after the edits before it were applied (each change cancels
        an autosave under way, and a save it cancelled records no hash); but a server that
        records no hash (jupyter-collaboration 2.x, jupyter-server-documents) resets ``dirty``
        after a cancelled save too, so there the file is read to check that it holds nbrelay's
        unsaved edits. It is read first as well, unless the server is known to answer requests
        to save: one that does not may have saved the edits on its own already, before the call
        (a second after a change), and then makes no save after it."""
        if (
            not self.records_hashes or self.api.answers_saves is not True
        ) and await self._file_holds_unsaved():
            return SAVED_ALONE
        while True:
            await self.saved_since(recorded)
            self.check()
            recorded = self.save_mark()
            if self.records_hashes or await self._file_holds_unsaved():
                return SAVED_ALONE

    async def _file_holds_unsaved(self) -> bool:
        """Whether the file holds the room as it is here: its cells (ids, types and sources)
        as here, which a person's typing the server has not saved yet keeps it from, and
        nbrelay's last unsaved edit (then the save read the document after it, with every edit
        before it)."""
        from nbrelay.notebook.model import from_dict
        from nbrelay.stores.rtc_saving import landed

        model = await self.api.get_contents(self.path, content=True, type="notebook")
        on_disk = from_dict(model.get("content"), name=self.name)
        if _outline(on_disk) != _outline(self.mirror.read()[0]):
            return False
        return not self.unsaved or landed(self.unsaved[-1][1], on_disk)

    async def _unanswered(self, asked: _Save, within: float) -> None:
        """A save request the server's own save overtook: a server that leaves it unanswered
        ``within`` seconds after it was made answers none (see ``save``), and the connection
        that waits for the answer is closed."""
        with anyio.move_on_after(within):
            await asked.answered.wait()
        if not asked.answered.is_set():
            self.api.answers_saves = False
            if asked.scope is not None:
                asked.scope.cancel()

    async def _listen(self, asked: _Save, within: float) -> None:
        """Ask for a save (``_ask``) and hold the server's answer in ``asked``; an answer that
        comes after nbrelay stopped waiting for it (``late``) is judged here (``_ended``)."""
        status = "failed (the room ended)"  # unless asking ends otherwise
        try:
            with anyio.CancelScope() as asked.scope:
                status = await self._ask(asked, within)
                if status != "timeout":
                    self.api.answers_saves = True
            if asked.scope.cancelled_caught:  # ``_unanswered`` gave up on it
                status = "timeout"
        except NbrelayError as exc:
            status = f"failed ({exc})"
        except Exception as exc:
            status = f"failed ({type(exc).__name__})"
        finally:
            asked.status = status
            asked.answered.set()
        if asked.late and status == "success":
            await self._ended(asked)

    async def _ask(self, asked: _Save, within: float) -> str:
        """Send a save request over a connection of its own and return the server's answer,
        or "timeout" after ``within`` seconds. The connection pings nothing: the server reads
        nothing from it until the save ended, pongs included."""
        params = {"sessionId": self.session_id} if self.session_id else None
        with anyio.move_on_after(within):
            async with self.api.websocket(
                f"api/collaboration/room/{self.room_id}", params=params, keepalive=False
            ) as ws:
                answered = False
                try:
                    await ws.send(asked.request)
                    async for message in ws:
                        ack_at_once(ws)
                        reply = _save_reply(message, asked.sid)
                        if reply is not None:
                            answered = True
                            return reply
                finally:
                    if not answered:  # the server answers no goodbye while it saves
                        ws.transport.abort()
        return "timeout"

    async def _ended(self, asked: _Save) -> None:
        """A save nbrelay stopped waiting for says it succeeded: once everything the server had
        is here (a barrier), it counts if the server recorded a save (the hash it sets; none when
        an edit interrupted the save) and the notebook did not change since it began."""
        try:
            await self.barrier()
        except (RoomLost, NbrelayError):
            return
        if self.saved_after(asked.recorded):
            self.ended_late(asked.begun)


class _Save:
    """One save request of ``Room.save``, and the server's answer once it came."""

    def __init__(
        self, request: bytes, sid: int, begun: tuple[int, int], recorded: tuple[int, int]
    ) -> None:
        self.request = request
        self.sid = sid
        self.begun = begun  # ``SharedRoom.save_begins`` as the request was made
        self.recorded = recorded  # the room's ``save_mark`` then
        self.status = "timeout"
        self.answered = anyio.Event()
        self.late = False  # nbrelay stopped waiting for the answer
        self.scope: anyio.CancelScope | None = None  # while the answer is waited for


def _save_reply(message: Any, sid: int) -> str | None:
    """The status of the server's answer to save request ``sid``, or None when ``message`` is
    something else."""
    import pycrdt

    if not isinstance(message, bytes) or not message or message[0] != RAW:
        return None
    try:
        decoder = pycrdt.Decoder(message)
        decoder.read_var_uint()
        data = json.loads(decoder.read_var_string())
    except Exception:
        return None
    if not isinstance(data, dict) or data.get("type") != "save":
        return None
    if int(data.get("responseTo") or 0) != sid:
        return None
    return str(data.get("status") or "")


def agent_user(name: str) -> dict[str, Any]:
    """The awareness ``user`` JupyterLab shows: a username unlike any browser user's."""
    words = [w for w in name.replace("-", " ").split() if w]
    initials = "".join(w[0] for w in words[:2]).upper() or "AI"
    return {
        "username": f"nbrelay-{secrets.token_hex(4)}",
        "name": name,
        "display_name": name,
        "initials": initials,
        "color": "var(--jp-collaborator-color7)",
        "avatar_url": None,
    }
