"""jupyter-collaboration's internals, all in one place: what nbrelay's in-process rooms touch.

Inside a Jupyter Server, nbrelay works on the very rooms the people in JupyterLab are in, through
jupyter-collaboration's extension app (``YDocExtension``, package jupyter-server-ydoc). Its public
surface hands out a room's document (``get_document``) but not the rest a store needs: the room
itself (to save it as JupyterLab's save button does, to see who is in it, to wait while the server
reloads it from its file, to close a room nbrelay opened), the session id clients join with, and a
moment before the extension lets its rooms go when the server stops. Each of those attributes is
named here, once, and checked when the extension starts (``Collaboration.check``): a release that
renames one makes nbrelay refuse to work on rooms with an error naming it, instead of saving
nothing and saying "saved". ``tests/extension/test_collaboration.py`` pins them against the
installed release.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from nbrelay.errors import RemoteError
from nbrelay.stores.rtc_events import EVENTS_URI, SaveEvents

logger = logging.getLogger("nbrelay.extension")

# What nbrelay uses, by owner. The extension app and its websocket server are public objects
# of jupyter-server-ydoc; the underscored names are its internals. A room's and a file loader's
# own attributes are checked on each room nbrelay joins.
APP_NEEDS = ("get_document", "ywebsocket_server", "file_loaders", "_room_locks", "stop_extension")
SERVER_NEEDS = ("rooms", "delete_room")
ROOM_CLASS_NEEDS = ("_save_to_disc",)
ROOM_NEEDS = ("ydoc", "clients", "ready", "ready_event", "_document", "_update_lock", "_file")
# Seconds to wait for a room that a browser's connection made, and is loading, to be loaded.
READY_WAIT = 30.0
LOADER_NEEDS = ("last_modified", "number_of_subscriptions")


def release() -> str:
    """The installed jupyter-server-ydoc release (for messages)."""
    try:
        return "jupyter-server-ydoc " + importlib.metadata.version("jupyter-server-ydoc")
    except importlib.metadata.PackageNotFoundError:
        return "jupyter-server-ydoc (version unknown)"


class CollaborationChanged(RemoteError):
    """jupyter-collaboration no longer has something nbrelay's in-process rooms rely on."""


def changed(what: str) -> CollaborationChanged:
    return CollaborationChanged(
        f"nbrelay cannot work in this server's collaboration rooms: {release()} has no {what}, "
        "which nbrelay's server extension relies on; nothing was changed.",
        hint="Install a jupyter-collaboration release nbrelay supports (jupyter-collaboration "
        "4 or 5), or use nbrelay in live mode (nbrelay serve --jupyter-url), which needs only "
        "the collaboration protocol.",
    )


def _missing(owner: Any, names: tuple[str, ...], label: str) -> list[str]:
    return [f"{label}.{name}" for name in names if not hasattr(owner, name)]


class Collaboration:
    """jupyter-collaboration's rooms in this server (see the module docstring)."""

    def __init__(self, app: Any, serverapp: Any) -> None:
        self.app = app
        self.serverapp = serverapp
        self.broken: CollaborationChanged | None = None
        # The rooms nbrelay's loads made (by room id), which nbrelay closes when done with them.
        self.made: dict[str, Any] = {}
        # Of those, the ones a call asked for and gave up on while the server loaded them:
        # (room, server path, when the load ended), until a call joins them or they are closed.
        self.abandoned: dict[str, tuple[Any, str, float]] = {}
        # jupyter-collaboration's events (its saves' outcomes: a save that raised ends its task
        # normally, and only its event tells it failed).
        self.events = SaveEvents()

    @classmethod
    def find(cls, serverapp: Any) -> Collaboration | None:
        """jupyter-collaboration's extension app in this server, if it runs one."""
        for apps in serverapp.extension_manager.extension_apps.values():
            for app in apps:
                if hasattr(app, "get_document") and hasattr(app, "ywebsocket_server"):
                    return cls(app, serverapp)
        return None

    def check(self) -> None:
        """Check that everything nbrelay uses is there; remember what is not, so that every room
        operation refuses, naming it (logged at once, too)."""
        missing = _missing(self.app, APP_NEEDS, "YDocExtension")
        if not missing:
            missing = _missing(self.app.ywebsocket_server, SERVER_NEEDS, "its websocket server")
        if not missing:
            try:
                rooms = importlib.import_module("jupyter_server_ydoc.rooms")
                utils = importlib.import_module("jupyter_server_ydoc.utils")
            except ImportError as exc:
                missing = [f"module {exc.name or exc}"]
            else:
                missing = _missing(rooms, ("DocumentRoom",), "jupyter_server_ydoc.rooms")
                missing += _missing(utils, ("SERVER_SESSION",), "jupyter_server_ydoc.utils")
                if not missing:
                    missing = _missing(rooms.DocumentRoom, ROOM_CLASS_NEEDS, "DocumentRoom")
        with contextlib.suppress(CollaborationChanged):
            self._fail(missing)
        if not missing:
            self._listen()

    def _listen(self) -> None:
        """Hear jupyter-collaboration's events (its saves' outcomes) through the server's event
        logger; without them a save that raised is taken for one that wrote nothing."""
        events = getattr(self.serverapp, "event_logger", None)
        uri = getattr(
            importlib.import_module("jupyter_server_ydoc.utils"),
            "JUPYTER_COLLABORATION_EVENTS_URI",
            None,
        )
        if events is None or uri != EVENTS_URI:
            logger.warning(
                "%s sends no events nbrelay can hear: a failed save may go unseen", release()
            )
            return
        events.add_listener(schema_id=uri, listener=self._heard)
        self.events.listening = True

    async def _heard(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        self.events.heard(data)

    def _broken_by(self, missing: list[str]) -> CollaborationChanged:
        """Remember (and log) that ``missing`` are gone; the error to raise."""
        self.broken = changed(", ".join(missing))
        logger.error("%s", self.broken.message)
        return self.broken

    def _fail(self, missing: list[str]) -> None:
        if missing:
            raise self._broken_by(missing)

    def _check_room(self, room: Any) -> None:
        missing = _missing(room, ROOM_NEEDS, "DocumentRoom")
        if not missing:
            missing = _missing(room._file, LOADER_NEEDS, "FileLoader")
        self._fail(missing)

    def _ok(self) -> None:
        if self.broken is not None:
            raise self.broken

    @property
    def session_id(self) -> str:
        """The session id this server's collaboration clients join with."""
        return str(importlib.import_module("jupyter_server_ydoc.utils").SERVER_SESSION)

    # -- rooms ------------------------------------------------------------------------------

    def room_id(self, path: str) -> tuple[str, str]:
        """(file id, room id) of the notebook at server path ``path``."""
        file_id = str(self.serverapp.web_app.settings["file_id_manager"].index(path))
        return file_id, f"json:notebook:{file_id}"

    def path_of(self, file_id: str) -> str | None:
        """The server path of the file with id ``file_id`` now (None: gone)."""
        path = self.serverapp.web_app.settings["file_id_manager"].get_path(file_id)
        return str(path) if path else None

    def current(self, room_id: str) -> Any | None:
        """The room now serving ``room_id``, if any (a dictionary lookup)."""
        return self.app.ywebsocket_server.rooms.get(room_id)

    async def open(self, path: str) -> tuple[Any, bool]:
        """The notebook's room, made (and loaded from its file) if there is none; and whether it
        was made now. Raises what the contents manager says of a file no room can load.

        The server's making and loading of the room is never cancelled, not even when the call
        that asked for it is (a client that gives up on a big notebook's first read): a room
        whose loading is cut short stays in the server unloaded, and is then served as an empty
        notebook (to the next call, to JupyterLab), whose first save writes what little it holds
        over the file. A cancelled call stops waiting; the load goes on, and a room it makes is
        listed in ``abandoned`` once loaded (the way closes it when idle, unless a call joins it
        first: then it is nbrelay's like any room it made)."""
        self._ok()
        _, room_id = self.room_id(path)
        made = self.current(room_id) is None
        loading = asyncio.ensure_future(
            self.app.get_document(
                path=path, content_type="notebook", file_format="json", copy=False, create=True
            )
        )
        loading.add_done_callback(_retrieve)
        loaded = anyio.Event()
        loading.add_done_callback(lambda _: loaded.set())
        try:
            await loaded.wait()
        except BaseException:  # the call gave up: the load goes on
            if made:
                loading.add_done_callback(lambda done: self._abandon(done, room_id, path))
            raise
        if not loading.cancelled() and loading.exception() is not None:
            await self._drop_unloaded(room_id)  # get_document stopped it
        document = loading.result()
        room = self.current(room_id)
        if document is None or room is None:
            raise self._broken_by(["room for the document get_document returned"])
        self._check_room(room)
        if not room.ready:  # a browser's connection made it and is loading it: wait
            # pycrdt's YRoom sets ``_stopped`` when it stops (the leftover of a failed load
            # stops; without the attribute nbrelay only waits longer for such a room).
            stopped = getattr(room, "_stopped", None)
            with anyio.move_on_after(READY_WAIT):
                while not room.ready and not (stopped is not None and stopped.is_set()):
                    with anyio.move_on_after(0.1):
                        await room.ready_event.wait()
            if not room.ready:
                if stopped is not None and stopped.is_set():
                    await self._drop_unloaded(room_id)  # never one a browser still loads
                raise RemoteError(
                    f"the Jupyter Server has not loaded {path!r} into its room after "
                    f"{READY_WAIT:g} s.",
                    hint="Retry; if it keeps failing, open the notebook in JupyterLab to see why.",
                )
        await self._loaded_progressively(room, path)
        if room._document is not document:
            self._fail(["DocumentRoom._document (it is not the room's document)"])
        if made:
            self.made[room_id] = room
        self.abandoned.pop(room_id, None)
        return room, self.made.get(room_id) is room

    async def _loaded_progressively(self, room: Any, path: str) -> None:
        """Wait for the rest of a notebook the server loads a few cells at a time.

        With jupyter-collaboration's ``document_load_progressively`` a room is ready once the
        notebook's metadata is in, and its cells follow over seconds or minutes (about 2,000 a
        minute here): read then, a 20,000-cell notebook showed 0 cells, then 6,035. The load
        holds the room's ``_update_lock`` until it ends and then resolves
        ``_document_progressively_loaded`` (which the server's own ``get_document(copy=True)``
        waits for; a room loaded from its YStore never resolves it, and lets the lock go at
        once). nbrelay waits while both say the load goes on, up to ``READY_WAIT``, then says
        why it cannot work in the notebook yet. A release without progressive loading has none
        of these: nothing to wait for; one with the setting and not the other two is refused
        (``_broken_by``)."""
        if getattr(room, "_document_load_progressively", False) is not True:
            return
        loading = getattr(room, "_document_progressively_loaded", None)
        lock = getattr(room, "_update_lock", None)
        if not isinstance(loading, asyncio.Future) or not isinstance(lock, asyncio.Lock):
            # progressive loading on, and no way to tell when it ends: refuse, as for any
            # attribute nbrelay needs (a partial notebook must not pass for the notebook)
            raise self._broken_by(
                ["DocumentRoom._document_progressively_loaded", "DocumentRoom._update_lock"]
            )
        with anyio.move_on_after(READY_WAIT):
            while not loading.done() and lock.locked():
                with anyio.move_on_after(0.1):
                    await asyncio.wait([loading])
        if loading.done():
            if not loading.cancelled() and (error := loading.exception()) is not None:
                raise RemoteError(
                    f"the Jupyter Server failed to load {path!r} into its room: {error!r}.",
                    hint="Open the notebook in JupyterLab to see why, or fix the file.",
                )
        elif lock.locked():
            raise RemoteError(
                f"the Jupyter Server is still loading {path!r} into its room a few cells at a "
                f"time (its YDocExtension.document_load_progressively setting) after "
                f"{READY_WAIT:g} s; what it holds so far is not the whole notebook.",
                hint="Retry in a minute: a notebook of thousands of cells can take minutes.",
            )

    async def _drop_unloaded(self, room_id: str) -> None:
        """Take out of the server a room it failed to load (stopped) that nobody is in.

        jupyter-collaboration's ``get_document`` stops such a room but leaves it listed, empty:
        the next ``get_document`` would hand out its empty document without loading the file
        again, and a save of it would write an empty notebook over the file. A browser's
        connection to the notebook would find it too, and try loading it again."""
        room = self.current(room_id)
        if room is None or room.ready or room.clients:
            return
        with contextlib.suppress(Exception):  # stopped already, by the server: still unlisted
            await self.app.ywebsocket_server.delete_room(room=room)

    def _abandon(self, loading: asyncio.Future[Any], room_id: str, path: str) -> None:
        """The load a cancelled ``open`` began ended: list the room it made as abandoned."""
        room = self.current(room_id)
        if loading.cancelled() or loading.exception() is not None or room is None:
            return
        self.made[room_id] = room
        self.abandoned[room_id] = (room, path, time.monotonic())

    @staticmethod
    def ydoc(room: Any) -> Any:
        return room.ydoc

    @staticmethod
    def occupied(room: Any) -> bool:
        """Whether anyone (a browser tab, a live-mode client) is in the room."""
        return bool(room.clients)

    async def settled(self, room: Any, within: float) -> None:
        """Wait until the server is not loading or reloading the room's document (it changes
        the document over several turns of the event loop then)."""
        self._ok()
        lock: asyncio.Lock = room._update_lock
        if not lock.locked():
            return
        with anyio.move_on_after(within):
            async with lock:
                return
        raise RemoteError(
            f"the Jupyter Server was still reloading the notebook after {within:g} s.",
            hint="The server may be overloaded or the notebook very large; retry.",
        )

    async def save(
        self, room: Any, within: float, late: Callable[[str], None] | None = None
    ) -> str:
        """Save the room to its file as JupyterLab's save button does; "success" once the file
        was written, "skipped" when the server could not start a save now (it is reloading the
        file, or a newer save replaced this one before writing), "failed" when it raised
        ("failed: <the server's message>" when jupyter-collaboration caught the error and
        reported it as an event), "timeout" when it was still saving after ``within`` seconds
        (it goes on).

        nbrelay waits for the server's save but never cancels it, not even when its own wait
        ends (a timeout, a cancelled tool call): a save task cancelled twice lets go of its
        file's lock while the file is still being written (jupyter-collaboration's
        ``FileLoader.maybe_save_content`` swallows one cancellation, and anyio delivers one
        again and again), and the next look at the file (the file watcher, the next save) takes
        that save for a change from outside and reloads the room from the file, discarding every
        edit made since the save began. When nbrelay stopped waiting before the save ended,
        ``late`` is called with the save's status once it ends."""
        self._ok()
        before = room._file.last_modified
        since = self.events.count
        task = room._save_to_disc()
        if task is None:
            return "skipped"
        done = anyio.Event()
        task.add_done_callback(lambda _: done.set())
        try:
            with anyio.move_on_after(within):
                await done.wait()
        finally:
            if not task.done() and late is not None:
                task.add_done_callback(lambda ended: late(_status(ended, room, before)))
        if not task.done():
            return "timeout"
        room_id = getattr(room, "_room_id", None)
        if not task.cancelled() and isinstance(room_id, str):
            # jupyter_events schedules its listeners when the event is emitted, so a save's
            # event has been heard by the time its end reaches nbrelay; the wait is for a save
            # that ended without one (e.g. one a newer save cancelled).
            error = await self.events.said(room_id, since, within=0.25)
            if error is not None:  # it raised (logged by the server) and ended normally
                return error
        return _status(task, room, before)

    async def close_if_unused(self, room: Any, path: str) -> None:
        """Close a room nbrelay opened, unless someone joined it meanwhile (then it is theirs,
        and jupyter-collaboration closes it after they leave)."""
        self._ok()
        file_id, room_id = self.room_id(path)
        async with self.app._room_locks[room_id]:
            if self.made.get(room_id) is room:  # closed now, or someone else's from now on
                del self.made[room_id]
            if self.abandoned.get(room_id, (None,))[0] is room:
                del self.abandoned[room_id]
            if self.current(room_id) is not room or self.occupied(room):
                return
            await self.app.ywebsocket_server.delete_room(room=room)
            loaders = self.app.file_loaders
            if file_id in loaders and loaders[file_id].number_of_subscriptions == 0:
                await loaders.remove(file_id)
        self.serverapp.log.info("nbrelay closed the room of %s (idle, nobody in it)", path)

    # -- stopping ---------------------------------------------------------------------------

    def before_stop(self, first: Callable[[], Awaitable[None]]) -> None:
        """Run ``first`` when the server stops, before jupyter-collaboration lets its rooms go
        (its own stop deletes them, cancelling their pending saves)."""
        self._ok()
        stop = self.app.stop_extension

        async def stop_extension() -> None:
            try:
                await first()
            except Exception:
                logger.exception("saving the rooms before the server stops failed")
            await stop()

        self.app.stop_extension = stop_extension


def _status(task: asyncio.Future[Any], room: Any, before: Any) -> str:
    """The status of a room's save that ended (see ``Collaboration.save``)."""
    if task.cancelled():  # a newer save replaced it before it began
        return "skipped"
    try:
        task.result()
    except Exception:  # jupyter-collaboration logs its own save errors
        logger.exception("saving %s failed", getattr(room._file, "path", "?"))
        return "failed"
    return "success" if room._file.last_modified != before else "skipped"


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a finished room load's exception as seen, so that one nobody waits for any more (its
    call was cancelled) is not reported as "never retrieved" (jupyter-collaboration logs the
    failure of a room's load itself)."""
    if not task.cancelled():
        task.exception()
