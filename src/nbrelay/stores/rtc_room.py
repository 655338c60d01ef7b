"""A notebook's collaboration room as the room store sees it, however the room is reached.

Live mode reaches a room over a WebSocket (``stores.yprotocol``), the server extension in the
Jupyter Server's own process (``extension.store``). Either way the store works on the room's Yjs
document (jupyter_ydoc's roots ``meta``, ``cells`` and ``state``) through ``SharedRoom``:

* the notebook, version and problems kept converted cell by cell from the document's change
  events (``notebook.ymirror``): an edit or a read costs the cells that changed;
* the primitive edits (cells, and the notebook's metadata) as granular CRDT operations
  (``notebook.ydoc``), flagged as nbrelay's own while they are applied;
* what nbrelay changed and what the file holds: ``edits`` acknowledged, the first ``saved`` of
  them confirmed written, and the acknowledged edits not yet confirmed (``unsaved``), so that after
  a crash nbrelay can tell the agent which of its edits the file did not get;
* the placeholder: a room gives a notebook without cells one empty code cell (jupyter_ydoc's
  ``YNotebook.set``; JupyterLab shows it to a person so they have somewhere to type). When the
  store found that the file has no cells (``placeholder_id``), nbrelay reads the notebook as it
  is, without cells, while that cell is the only one and untouched; nbrelay's first inserted cells
  take its place (``apply``). Once someone types in it, it is a cell like any other.
* reloads: the server deletes the document state's ``hash`` when it reloads the notebook from its
  file (someone rewrote the file), which ``reloads`` counts.

A way in (``RoomWay``) supplies what differs: joining and leaving, ``barrier`` (everything nbrelay
sent is applied and everything the server had is here), ``save`` (the server writes the file),
``alive`` and ``close``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay.notebook.edits import DeleteCells, Edit, InsertCells
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.ydoc import apply_edits, placeholder, replace_all, set_run_states
from nbrelay.notebook.ymirror import Mirror, Read, without_placeholder

if TYPE_CHECKING:
    import pycrdt

    from nbrelay.stores.base import EditOutcome
    from nbrelay.stores.rtc_journal import Journal

EMPTY_UPDATE = b"\x00\x00"  # a Yjs update with no structs and an empty delete set
# ``SharedRoom.save``'s status when the server saved the edits on its own (not an answer).
SAVED_ALONE = "saved on its own"
_REMEMBERED = 100  # acknowledged edits remembered until saved (beyond that, only counted)


class RoomLost(Exception):
    """The room's connection ended, or the server let the room go (internal: the store joins
    again or reports it)."""


class SharedRoom(ABC):
    """One joined room: its document, mirror and counts (see the module docstring)."""

    # Whether ``save`` reaches the server apart from the edits (so that an edit arriving during
    # it can cancel it while the server still answers "success"; ``rtc_saving.save`` checks).
    saves_apart = False

    def __init__(self, doc: pycrdt.Doc[Any], *, name: str, room_id: str) -> None:
        import pycrdt

        self.name = name
        self.room_id = room_id
        self.session_id: str | None = None
        self.doc = doc
        self.ymeta: pycrdt.Map[Any] = doc.get("meta", type=pycrdt.Map)
        self.ycells: pycrdt.Array[Any] = doc.get("cells", type=pycrdt.Array)
        self.ystate: pycrdt.Map[Any] = doc.get("state", type=pycrdt.Map)
        self.mirror = Mirror(self.ymeta, self.ycells, name=name)
        self.lock = anyio.Lock()
        # One save of the room at a time (``rtc_saving.save_room``): the server cancels a save in
        # progress when another is asked for, and answers the cancelled one "success" unwritten.
        self.save_lock = anyio.Lock()
        self.last_used = time.monotonic()
        self.held = False  # an open session keeps the room joined, however idle
        self.reloads = 0
        self.hashes = 0  # saves of the file the server recorded in the document's state
        # Times the server reset the document state's ``dirty`` flag: after each save, whether
        # the save held every change or a change interrupted it, and after a reload.
        self.cleaned = 0
        self._hash_kept = False  # the document's state was seen holding a hash (``records_hashes``)
        self._state_news = anyio.Event()  # set at the next change of the state by the server
        self.edits = 0  # edits nbrelay made in this room (acknowledged) …
        self.saved = 0  # … of which the file holds the first ``saved`` (a confirmed save)
        self.sent = 0  # nbrelay's own transactions that changed the document
        self.unsaved: list[tuple[int, EditOutcome]] = []  # (edit number, outcome), oldest first
        self.forgotten = 0  # unsaved edits beyond those remembered
        self.save_requests = 0  # saves nbrelay asked the server for
        self.journal_behind = False  # the journal still lists edits a late save holds
        self.save_wanted = anyio.Event()  # set by an edit; the store's saver coalesces them
        self.reloaded = anyio.Event()  # set when the server reloads the notebook from its file
        self.closed = anyio.Event()
        self.close_reason = ""
        self.lost = False  # ended by the other side (not by nbrelay)
        # Where the unsaved edits are also kept, for a process that dies with the server.
        self.journal: Journal | None = None
        # The cells nbrelay shows running (JupyterLab's ``[*]``): edits of only their outputs
        # are a run's outputs streaming in (``show_running``).
        self.running: set[str] = set()
        self.key = room_id.rsplit(":", 1)[-1]  # the notebook's file id
        # Whether the server's document keeps code cells' run state (``execution_state``,
        # jupyter_ydoc 3.0 and later; an older one would write it into the file).
        self.run_states = True
        self._own = False  # nbrelay is applying a transaction of its own
        # The room's empty cell of a file without cells, when the store checked the file.
        self.placeholder_id: str | None = None
        # The last read, and it as nbrelay reports it (without the placeholder) and its id.
        self._shown: tuple[Read, Read, str | None] | None = None
        self._subscriptions: list[tuple[Any, Any]] = []

    def _watch(self) -> None:
        """Observe the document (call once the room is there to be observed)."""
        self._subscriptions = [
            (self.doc, self.doc.observe(self._on_transaction)),
            (self.ystate, self.ystate.observe(self._on_state)),
        ]

    def _unwatch(self) -> None:
        for target, sub in self._subscriptions:
            target.unobserve(sub)
        self._subscriptions = []

    # Observers: never read the document here (it is borrowed), only note what happened.

    def _on_transaction(self, event: Any) -> None:
        if event.update != EMPTY_UPDATE and self._own:
            self.sent += 1

    def _on_state(self, event: Any) -> None:
        if self._own:
            return
        change = event.keys.get("hash")
        if change is not None:
            self._hash_kept = True
        if change is not None and change.get("action") == "delete":
            self.reloads += 1
            self.reloaded.set()
        elif change is not None:
            self.hashes += 1  # the server saved the file (it sets the hash of what it wrote)
        dirty = event.keys.get("dirty")
        if dirty is not None and dirty.get("newValue") is False:
            self.cleaned += 1
        self._state_news.set()
        self._state_news = anyio.Event()

    @property
    def records_hashes(self) -> bool:
        """Whether the server records the hash of the file it saved in the document's state
        (jupyter-collaboration 3 and later; 2.x only resets ``dirty``)."""
        if not self._hash_kept:
            self._hash_kept = "hash" in self.ystate
        return self._hash_kept

    def save_mark(self) -> tuple[int, int]:
        """Where the server's record of its saves stands (for ``saved_after``)."""
        return self.hashes, self.cleaned

    def saved_after(self, mark: tuple[int, int]) -> bool:
        """Whether the server recorded a save since ``mark`` (``save_mark``): it set the hash
        of the file or, on a server that records none, it reset ``dirty``."""
        hashes, cleaned = mark
        if self.hashes > hashes:
            return True
        return not self.records_hashes and self.cleaned > cleaned

    async def saved_since(self, mark: tuple[int, int]) -> None:
        """Wait until the server recorded a save since ``mark`` (``saved_after``), or the room
        ended."""
        while not self.saved_after(mark) and not self.closed.is_set():
            news = self._state_news
            with anyio.move_on_after(1.0):  # the room's end sets no state
                await news.wait()

    # -- what differs between the ways in ----------------------------------------------------

    @property
    @abstractmethod
    def alive(self) -> bool:
        """Whether the room can still be used (connected, and still the server's room)."""

    @abstractmethod
    async def barrier(self, within: float = 15.0) -> None:
        """Wait until the server has applied everything nbrelay sent, and everything it had is
        here. Raises ``RoomLost`` when the room ended."""

    @abstractmethod
    async def save(self, within: float = 30.0) -> str:
        """Have the server write the room's notebook to its file now; its status ("success",
        ``SAVED_ALONE`` when the server saved the edits on its own meanwhile, "skipped" while it
        cannot, "failed", "timeout")."""

    @abstractmethod
    async def close(self) -> None:
        """Stop using the room (the store saved it first, if it had to)."""

    def server_reloaded(self) -> None:
        """The server said it reloads the notebook from its file (one of its events)."""
        self.reloaded.set()

    @property
    def hears_events(self) -> bool:
        """Whether the server's events reach this way into the room now."""
        return False

    def events_heard(self) -> int:
        """How many of jupyter-collaboration's events this way into the room has heard so far
        (``stores.rtc_events``; 0 for a way that hears none)."""
        return 0

    async def save_said(self, since: int) -> str | None:
        """Why the server did not save the room in a save begun when ``events_heard`` was
        ``since``, if one of its events said so (it failed, or it reloaded the file instead);
        None when none did, or the way hears no events."""
        return None

    # -- the store's operations ------------------------------------------------------------------

    def check(self) -> None:
        if not self.alive:
            raise RoomLost(self.close_reason or "the room ended")

    def snapshot(self) -> tuple[Notebook, str, tuple[str, ...]]:
        """(notebook, version, problems) of the room as it is here now (only the cells changed
        since the last call are converted again: ``notebook.ymirror``), without the untouched
        placeholder cell of a notebook that has none (see the module docstring)."""
        read = self.mirror.read()
        if self.placeholder_id is None:
            return read
        if self._shown is None or self._shown[0] is not read:
            shown, found = without_placeholder(read, self.ycells, name=self.name)
            if found != self.placeholder_id:
                shown, found = read, None
            self._shown = (read, shown, found)
        return self._shown[1]

    def apply(self, order: list[str], edits: Iterable[Edit]) -> None:
        """Apply primitive edits to the document, the notebook's metadata edits included (see
        ``notebook.ydoc.apply_edits``: a notebook older than nbformat 4.5 becomes 4.5).
        ``order`` is the cells as ``snapshot`` gave them; inserted cells take the place of an
        untouched placeholder (it is deleted after them, so the notebook is never empty for a
        person in it)."""
        self.snapshot()
        shown = self._shown if self.placeholder_id is not None else None
        found = shown[2] if shown is not None else None
        if found is not None and found not in order:
            edits = list(edits)
            order = [*order, found]
            if any(isinstance(e, InsertCells) and e.cells for e in edits):
                edits.append(DeleteCells((found,)))
        self._own = True
        try:
            apply_edits(self.doc, self.ycells, order, edits, self.ymeta, run_states=self.run_states)
        finally:
            self._own = False

    def show_running(self, running: Collection[str], idle: Collection[str]) -> None:
        """Show cells ``running`` as running and ``idle`` as not (``ydoc.set_run_states``)."""
        states = dict.fromkeys(idle, "idle") | dict.fromkeys(running, "running")
        if self.run_states:
            self._own = True
            try:
                set_run_states(self.doc, self.ycells, self.snapshot()[0].ids, states)
            finally:
                self._own = False
        self.running.difference_update(idle)
        self.running.update(running)

    def drop_placeholder(self) -> bool:
        """Delete the untouched placeholder cell (for a notebook nbrelay created without cells:
        it has none in the room too); whether there was one."""
        found = placeholder(self.ycells)
        if found is None:
            return False
        self._own = True
        try:
            apply_edits(self.doc, self.ycells, [found], [DeleteCells((found,))])
        finally:
            self._own = False
        return True

    def replace_all(self, nb: Notebook) -> None:
        """Make the document hold ``nb`` (see ``notebook.ydoc.replace_all``). nbrelay's
        unsaved edits before it are no longer the notebook's: none is ever applied again."""
        self._own = True
        try:
            replace_all(self.doc, self.ymeta, self.ycells, nb, run_states=self.run_states)
        finally:
            self._own = False
        self.unsaved.clear()
        self.forgotten = 0

    def acknowledged(self, outcome: EditOutcome | None = None) -> None:
        """Count an edit the server has (and remember it until the file has it too)."""
        self.edits += 1
        if outcome is not None and outcome.plan.edits:
            self.unsaved.append((self.edits, outcome))
            if len(self.unsaved) > _REMEMBERED:
                self.forgotten += len(self.unsaved) - _REMEMBERED
                del self.unsaved[:-_REMEMBERED]

    def written(self, upto: int) -> None:
        """The file holds the first ``upto`` edits (a save the server confirmed)."""
        self.saved = max(self.saved, upto)
        self.unsaved = [(n, o) for n, o in self.unsaved if n > self.saved]
        if not self.unsaved:
            self.forgotten = 0

    def written_late(self, upto: int) -> None:
        """A save whose end nbrelay did not wait for holds the first ``upto`` edits: they are
        saved, and the saver brings the journal up to date."""
        self.written(upto)
        self.journal_behind = True
        self.save_wanted.set()

    def save_begins(self) -> tuple[int, int]:
        """What a save that begins now covers, for ``ended_late``: (nbrelay's edits so far, the
        notebook's changes so far)."""
        return self.edits, self.mirror.changes

    def ended_late(self, begun: tuple[int, int]) -> None:
        """A save nbrelay stopped waiting for (``begun``: ``save_begins`` when it began) ended,
        having written the file: if the notebook did not change after it began (the file holds
        the notebook as it was then), the edits it covered are saved (``written_late``)."""
        upto, changes = begun
        if self.alive and self.mirror.changes == changes:
            self.written_late(upto)

    @property
    def pending(self) -> bool:
        """Whether nbrelay made edits the file may not hold yet."""
        return self.saved < self.edits
