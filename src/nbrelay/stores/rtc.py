"""The live store: the notebooks of a running JupyterLab, edited through its collaboration rooms.

Every notebook the agent works on is joined as a Yjs room of jupyter-collaboration, the way a
browser tab joins it, so a person with the notebook open sees each change as it happens and
their own typing is never lost. The rules (each one learnt from a way RTC clients lose data):

* **Sync first, then edit.** A room always starts from an empty ``pycrdt.Doc`` that the server's
  SYNC_STEP2 fills; nothing reads or writes it before that. A connection that drops is never
  reused: the next call opens a new session with a fresh document.
* **Granular operations only.** The four primitive edits become CRDT operations on the cells
  they name: inserted cells, deleted cells, minimal text changes for sources (rebased onto the
  text as it is now, so a person's concurrent keystrokes survive), per-key metadata changes,
  appended outputs. Moves and type changes re-create the cells concerned, as JupyterLab itself
  does. The document is never replaced as a whole and the file is never written while a room
  may be open.
* **Barrier, save, barrier.** After an edit nbrelay waits until the server has applied it (a
  SYNC_STEP1 it must answer in order), asks the server to save, and checks that no reload from
  disk discarded the edit meanwhile; the ``.ipynb`` on disk then matches the room.
* **Versions and positions.** A version is the hash of the notebook as nbformat would write it.
  An edit that addresses cells by position is refused when someone else inserted, deleted or
  moved cells since the agent last read the notebook (typing does not move cells); an edit by id
  applies to the notebook as it is.
* **Changes from outside** (the file rewritten while the room is open, which makes the server
  reload it; the server restarted) are reported in the next result, never silently merged into a
  stale index.
* **Presence.** While it has notebooks open, the agent is listed among JupyterLab's online
  collaborators under its own name (the global awareness room), and in each notebook it edits.

A server without jupyter-collaboration is served by ``stores.contents`` instead (probed once).
Background work (one reader and one writer per room, awareness renewal, closing idle rooms) runs
in the task group that ``running()`` provides while the MCP server runs.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import difflib
import itertools
import json
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from nbrelay.errors import (
    ConflictError,
    NbrelayError,
    NotebookExists,
    NotebookNotFound,
    RemoteError,
    Unsupported,
    act,
)
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.notebook import validate
from nbrelay.notebook.edits import DeleteCells, Edit, InsertCells, MoveCells, UpdateCell
from nbrelay.notebook.model import Cell, Notebook, from_dict, serialize, version_of
from nbrelay.stores.base import (
    EditOutcome,
    Entry,
    LastSeen,
    Planner,
    Snapshot,
    plan_edit,
    positions_moved,
    refuse_stale,
)
from nbrelay.stores.contents import ContentsStore, Paths

if TYPE_CHECKING:
    import pycrdt
    from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("nbrelay.rtc")

SYNC, AWARENESS, RAW = 0, 1, 2
STEP1, STEP2 = 0, 1

GLOBAL_AWARENESS = "JupyterLab:globalAwareness"

RELOAD_NOTE = (
    "Jupyter Server reloaded this notebook from its file since your last read (the file was "
    "changed outside JupyterLab); this result shows the notebook as it is now."
)
RECONNECT_NOTE = (
    "nbrelay lost its connection to the Jupyter Server (it restarted or the network dropped) "
    "and reconnected; the notebook was read afresh from the server."
)
SAVE_NOTE = (
    "The change is live in JupyterLab, but the server did not confirm saving the file ({why}); "
    "it saves again on the next change."
)


class RoomLost(Exception):
    """The room's connection ended (internal: the store reconnects or reports it)."""


_RUN_FIELDS = frozenset({"outputs", "execution_count", "execution_state"})
_STREAM_SAVE = 2.0  # seconds between saves while a cell's outputs stream in


def _streaming(edits: Iterable[Edit]) -> bool:
    """Whether edits only update the outputs of cells that are still running."""
    return all(
        isinstance(e, UpdateCell)
        and not e.remove
        and set(e.changes) <= _RUN_FIELDS
        and e.changes.get("execution_state") == "running"
        for e in edits
    )


class _Unconfirmed(Exception):
    """The connection ended after an edit was applied locally, before the server confirmed it."""

    def __init__(self, outcome: EditOutcome) -> None:
        super().__init__("unconfirmed edit")
        self.outcome = outcome


def _landed(outcome: EditOutcome, now: Notebook) -> bool:
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


# ---------------------------------------------------------------------------------------------
# Pure helpers: Y values ↔ nbformat dicts, and the rebased text diff


def _ints(value: Any) -> Any:
    """Yjs stores every number as a float; give integral ones back as ints (in place)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, float) and v.is_integer():
                value[k] = int(v)
            elif isinstance(v, dict | list):
                _ints(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, float) and v.is_integer():
                value[i] = int(v)
            elif isinstance(v, dict | list):
                _ints(v)
    return value


def cell_from_y(raw: Any) -> Cell | None:
    """One Y cell (already ``to_py()``-ed) as an nbformat cell dict."""
    if not isinstance(raw, dict):
        return None
    cell: Cell = _ints(raw)
    cell.pop("execution_state", None)
    if cell.get("cell_type") in ("markdown", "raw") and not cell.get("attachments"):
        cell.pop("attachments", None)
    if cell.get("cell_type") == "code":
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)
    cell.setdefault("metadata", {})
    cell.setdefault("source", "")
    return cell


def _youtput(output: Mapping[str, Any]) -> pycrdt.Map[Any]:
    import pycrdt

    value = copy.deepcopy(dict(output))
    if value.get("output_type") == "stream":
        text = value.get("text", "")
        value["text"] = pycrdt.Text(text if isinstance(text, str) else "".join(text))
    return pycrdt.Map(value)


def ycell(cell: Mapping[str, Any]) -> pycrdt.Map[Any]:
    """A new Y cell for an nbformat cell dict, shaped as JupyterLab makes them."""
    import pycrdt

    value = copy.deepcopy(dict(cell))
    value["source"] = pycrdt.Text(str(value.get("source", "")))
    value["metadata"] = pycrdt.Map(dict(value.get("metadata") or {}))
    if value.get("cell_type") == "code":
        value["outputs"] = pycrdt.Array([_youtput(o) for o in value.get("outputs") or []])
        value.setdefault("execution_state", "idle")
    return pycrdt.Map(value)


@dataclass(frozen=True)
class TextOp:
    """Replace ``length`` characters at ``at`` (in the current text) by ``insert``."""

    at: int
    length: int
    insert: str


_DIFF_LIMIT = 4_000_000  # above this product of lengths, a changed middle is one replacement


def _opcodes(a: str, b: str) -> list[tuple[str, int, int, int, int]]:
    """Opcodes turning ``a`` into ``b``: common prefix and suffix first, then difflib."""
    n = min(len(a), len(b))
    pre = 0
    while pre < n and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    mid_a, mid_b = a[pre : len(a) - suf], b[pre : len(b) - suf]
    ops: list[tuple[str, int, int, int, int]] = []
    if pre:
        ops.append(("equal", 0, pre, 0, pre))
    if mid_a or mid_b:
        if mid_a and mid_b and len(mid_a) * len(mid_b) <= _DIFF_LIMIT:
            matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                ops.append((tag, i1 + pre, i2 + pre, j1 + pre, j2 + pre))
        else:
            ops.append(("replace", pre, len(a) - suf, pre, len(b) - suf))
    if suf:
        ops.append(("equal", len(a) - suf, len(a), len(b) - suf, len(b)))
    return ops


def rebase_text(base: str, current: str, new: str) -> list[TextOp]:
    """The operations that make the change ``base → new`` on ``current``.

    ``current`` is ``base`` plus what others changed since. Characters of ``base`` that the change
    deletes are deleted where they still are; text others inserted is kept; inserted text goes
    where its neighbour from ``base`` now is. With ``current == base`` this is a plain minimal
    diff. Operations are returned in order of position, not overlapping.
    """
    if base == new:
        return []
    # Where each character of base is now (None if someone deleted it).
    where: list[int | None] = [None] * len(base)
    for tag, i1, i2, j1, _ in _opcodes(base, current):
        if tag == "equal":
            for k in range(i2 - i1):
                where[i1 + k] = j1 + k

    def point(p: int) -> int:
        """Where a position of base (between characters) is now."""
        for k in range(p, len(base)):
            at = where[k]
            if at is not None:
                return at
        return len(current)

    ops: list[TextOp] = []
    for tag, i1, i2, j1, j2 in _opcodes(base, new):
        if tag == "equal":
            continue
        insert = new[j1:j2]
        alive = [w for w in where[i1:i2] if w is not None]
        runs: list[tuple[int, int]] = []
        for w in alive:
            if runs and runs[-1][0] + runs[-1][1] == w:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((w, 1))
        if not runs:
            ops.append(TextOp(point(i1), 0, insert))
            continue
        first, *rest = runs
        ops.append(TextOp(first[0], first[1], insert))
        ops.extend(TextOp(start, length, "") for start, length in rest)
    ops.sort(key=lambda o: o.at)  # stable: at one position, the earlier change comes first
    return ops


def apply_text_ops(text: str, ops: Sequence[TextOp]) -> str:
    """Apply ``rebase_text`` operations to a plain string (what the Y text will hold)."""
    for op in reversed(ops):
        text = text[: op.at] + op.insert + text[op.at + op.length :]
    return text


def _set_ytext(ytext: pycrdt.Text, base: str | None, new: str) -> None:
    current = str(ytext)
    ops = rebase_text(current if base is None else base, current, new)
    if not ops:
        return
    # pycrdt addresses text by UTF-8 byte offsets; going backwards keeps earlier ones valid.
    for op in reversed(ops):
        start = len(current[: op.at].encode("utf-8"))
        if op.length:
            end = start + len(current[op.at : op.at + op.length].encode("utf-8"))
            del ytext[start:end]
        if op.insert:
            ytext.insert(start, op.insert)


def _set_ymap(ycell_: pycrdt.Map[Any], key: str, value: Mapping[str, Any]) -> None:
    """Make a cell's Y map field (metadata) equal ``value`` with per-key changes."""
    import pycrdt

    current = ycell_.get(key)
    if not isinstance(current, pycrdt.Map):
        ycell_[key] = pycrdt.Map(copy.deepcopy(dict(value)))
        return
    old = _ints(current.to_py() or {})
    for k in [k for k in old if k not in value]:
        del current[k]
    for k, v in value.items():
        if k not in old or old[k] != v:
            current[k] = copy.deepcopy(v)


def _set_youtputs(ycell_: pycrdt.Map[Any], outputs: Sequence[Mapping[str, Any]]) -> None:
    """Make a cell's outputs equal ``outputs``, keeping the common start and growing the last
    stream's text in place (so a running cell's output streams in as small changes)."""
    import pycrdt

    yarr = ycell_.get("outputs")
    if not isinstance(yarr, pycrdt.Array):
        ycell_["outputs"] = pycrdt.Array([_youtput(o) for o in outputs])
        return
    old = [_ints(o.to_py()) if isinstance(o, pycrdt.Map) else o for o in yarr]
    keep = 0
    while keep < min(len(old), len(outputs)) and old[keep] == outputs[keep]:
        keep += 1
    if (
        keep == len(old) - 1
        and keep < len(outputs)
        and isinstance(old[keep], dict)
        and old[keep].get("output_type") == "stream"
        and {k: v for k, v in old[keep].items() if k != "text"}
        == {k: v for k, v in outputs[keep].items() if k != "text"}
        and str(outputs[keep].get("text", "")).startswith(str(old[keep].get("text", "")))
    ):
        ytext = yarr[keep].get("text")
        if isinstance(ytext, pycrdt.Text):
            grown = str(outputs[keep].get("text", ""))[len(str(old[keep].get("text", ""))) :]
            if grown:
                ytext += grown
            keep += 1
    if keep < len(yarr):
        del yarr[keep:]
    if keep < len(outputs):
        yarr.extend([_youtput(o) for o in outputs[keep:]])


def notebook_from_doc(ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any], *, name: str) -> Notebook:
    """The room's notebook as an nbformat dict (ids as in the room)."""
    meta = _ints(ymeta.to_py() or {})
    cells = [c for c in (cell_from_y(y.to_py()) for y in ycells) if c is not None]
    minor = meta.get("nbformat_minor")
    data = {
        "cells": cells,
        "metadata": meta.get("metadata") or {},
        "nbformat": int(meta.get("nbformat") or 4),
        "nbformat_minor": int(minor) if isinstance(minor, int) else 5,
    }
    # A Yjs document holds Rust strings, which cannot hold unpaired surrogates: nothing to scrub.
    return from_dict(data, name=name, scrub=False)


# ---------------------------------------------------------------------------------------------
# One connection to one room


class Room:
    """A live connection to one Y room: a fresh document, its reader and writer tasks."""

    def __init__(
        self,
        api: JupyterAPI,
        room_id: str,
        *,
        session_id: str | None,
        name: str,
        user: Mapping[str, Any],
        state: Mapping[str, Any] | None = None,
    ) -> None:
        import pycrdt

        self.api = api
        self.room_id = room_id
        self.session_id = session_id
        self.name = name
        self.doc: pycrdt.Doc[Any] = pycrdt.Doc()
        self.ymeta: pycrdt.Map[Any] = self.doc.get("meta", type=pycrdt.Map)
        self.ycells: pycrdt.Array[Any] = self.doc.get("cells", type=pycrdt.Array)
        self.ystate: pycrdt.Map[Any] = self.doc.get("state", type=pycrdt.Map)
        self.awareness = pycrdt.Awareness(self.doc)
        self.awareness.set_local_state({"user": dict(user), **dict(state or {})})
        self.synced = anyio.Event()
        self.closed = anyio.Event()
        self.close_reason = ""
        self.close_code: int | None = None
        self.lost = False  # closed by the other side (not by nbrelay)
        self.held = False  # an open session keeps the room joined, however idle
        self.lock = anyio.Lock()
        self.last_used = time.monotonic()
        self.reloads = 0
        self.seen_hash = False
        self.last_save = 0.0
        self._out_send, self._out_recv = anyio.create_memory_object_stream[bytes](math.inf)
        self._barriers: deque[anyio.Event] = deque()
        self._saves: dict[int, list[Any]] = {}
        self._save_ids = itertools.count(1)
        self._remote = False
        self._dirty = True
        self._cache: tuple[Notebook, str, tuple[str, ...]] | None = None
        self._scope: anyio.CancelScope | None = None
        self.ws: ClientConnection | None = None

    # -- lifetime -------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect and serve the room until it closes. Connection errors before the start are
        raised to the caller of ``TaskGroup.start``; later ones end the room quietly."""
        params = {"sessionId": self.session_id} if self.session_id else None
        started = False
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with self.api.websocket(
                    f"api/collaboration/room/{self.room_id}", params=params
                ) as ws:
                    self.ws = ws
                    doc_sub = self.doc.observe(self._on_transaction)
                    state_sub = self.ystate.observe(self._on_state)
                    watch = self.awareness.observe(self._on_awareness)
                    try:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._writer, ws)
                            await tg.start(self.awareness.start)
                            self._send_sync_step1()
                            self._send_awareness()
                            started = True
                            task_status.started()
                            await self._reader(ws)
                            tg.cancel_scope.cancel()
                    finally:
                        self.doc.unobserve(doc_sub)
                        self.ystate.unobserve(state_sub)
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
            logger.warning("room %s ended: %r", self.name, exc)
            self._end(f"{type(exc).__name__}", lost=True)
        finally:
            self._end(self.close_reason or "closed", lost=self.lost)

    def _end(self, reason: str, *, lost: bool) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.lost = lost
        self.closed.set()
        self._out_send.close()
        self._out_recv.close()
        for ev in self._barriers:
            ev.set()
        for waiter in self._saves.values():
            waiter[0].set()

    async def close(self) -> None:
        """Leave the room (used for idle rooms and on shutdown)."""
        if self._scope is not None:
            self._scope.cancel()
        with anyio.move_on_after(5, shield=True):
            await self.closed.wait()

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

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
            raise NotebookNotFound(
                f"notebook {self.name!r} does not exist.",
                hint=act("missing"),
            )
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
        # Never read the document here (it is borrowed); just note and forward.
        self._dirty = True
        if not self._remote:
            import pycrdt

            self._send(pycrdt.create_update_message(event.update))

    def _on_state(self, event: Any) -> None:
        keys = event.keys
        if "hash" in keys:
            if keys["hash"].get("action") == "delete" and self._remote:
                self.reloads += 1
            else:
                self.seen_hash = True

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
                if isinstance(message, bytes) and message:
                    self._dispatch(message)
            self.close_code = ws.close_code
            self._end(f"closed by the server ({ws.close_code} {ws.close_reason})", lost=True)
        except ConnectionClosed as exc:
            self.close_code = exc.rcvd.code if exc.rcvd is not None else None
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
                self.awareness.apply_awareness_update(pycrdt.read_message(message[1:]), "remote")
        elif kind == RAW:
            try:
                decoder = pycrdt.Decoder(message)
                decoder.read_var_uint()
                data = json.loads(decoder.read_var_string())
            except Exception:
                return
            if not isinstance(data, dict):
                return
            if data.get("type") == "save":
                waiter = self._saves.get(int(data.get("responseTo") or 0))
                if waiter is not None:
                    waiter[1] = str(data.get("status") or "")
                    waiter[0].set()
            elif data.get("type") == "conflict":
                self._end("the server found this client's document in conflict", lost=True)
                if self._scope is not None:
                    self._scope.cancel()

    # -- operations (called by the store) ---------------------------------------------------

    def check(self) -> None:
        if self.closed.is_set():
            raise RoomLost(self.close_reason)

    async def barrier(self, within: float = 15.0) -> None:
        """Wait until the server has applied everything sent so far, and everything it had is
        here (a SYNC_STEP1 it answers in order)."""
        self.check()
        event = anyio.Event()
        self._barriers.append(event)
        self._send_sync_step1()
        with anyio.move_on_after(within):
            await event.wait()
        self.check()
        if not event.is_set():
            with contextlib.suppress(ValueError):
                self._barriers.remove(event)
            raise RemoteError(
                f"the Jupyter Server did not answer within {within:g} s (room of {self.name!r}).",
                hint="The server may be overloaded; retry.",
            )

    async def save(self, within: float = 30.0) -> str:
        """Ask the server to save the room to its file now; returns its status."""
        import pycrdt

        self.check()
        sid = next(self._save_ids)
        waiter: list[Any] = [anyio.Event(), None]
        self._saves[sid] = waiter
        encoder = pycrdt.Encoder()
        encoder.write_var_uint(RAW)
        encoder.write_var_string("save")
        encoder.write_var_uint(sid)
        self._send(encoder.to_bytes())
        try:
            with anyio.move_on_after(within):
                await waiter[0].wait()
        finally:
            self._saves.pop(sid, None)
        self.check()
        return str(waiter[1] or "timeout")

    def snapshot(self) -> tuple[Notebook, str, tuple[str, ...]]:
        """(notebook, version, problems) of the room as it is here now; cached until it changes."""
        if self._dirty or self._cache is None:
            self._dirty = False
            nb = notebook_from_doc(self.ymeta, self.ycells, name=self.name)
            self._cache = (nb, version_of(serialize(nb)), tuple(validate.problems(nb)))
        return self._cache

    def apply(self, order: list[str], edits: Iterable[Edit]) -> None:
        """Apply primitive edits as granular operations, in one transaction. ``order`` is the
        ids of the cells as the snapshot gave them (Y index = list index); it is kept in step."""
        with self.doc.transaction(origin="nbrelay"):
            for edit in edits:
                _apply_one(self.ycells, order, edit)

    def replace_all(self, nb: Notebook) -> None:
        """Make the room hold ``nb`` (create with overwrite): cells deleted and inserted, the
        notebook metadata set key by key, in one transaction."""
        import pycrdt

        with self.doc.transaction(origin="nbrelay"):
            if len(self.ycells):
                del self.ycells[0 : len(self.ycells)]
            self.ycells.extend([ycell(c) for c in nb.cells])
            self.ymeta["nbformat"] = int(nb.data.get("nbformat", 4))
            self.ymeta["nbformat_minor"] = int(nb.data.get("nbformat_minor", 5))
            meta = self.ymeta.get("metadata")
            if isinstance(meta, pycrdt.Map):
                _set_ymap(self.ymeta, "metadata", nb.data.get("metadata") or {})
            else:
                self.ymeta["metadata"] = pycrdt.Map(copy.deepcopy(nb.data.get("metadata") or {}))


def _index(order: list[str], cid: str) -> int:
    try:
        return order.index(cid)
    except ValueError:
        raise ConflictError(
            f"cell {cid!r} is no longer in the notebook (someone deleted it a moment ago).",
            current="",
            hint=act("read_again"),
        ) from None


def _apply_one(ycells: pycrdt.Array[Any], order: list[str], edit: Edit) -> None:
    if isinstance(edit, InsertCells):
        at = min(max(edit.index, 0), len(order))
        for k, cell in enumerate(edit.cells):
            ycells.insert(at + k, ycell(cell))
            order.insert(at + k, str(cell["id"]))
    elif isinstance(edit, DeleteCells):
        for i in sorted((_index(order, cid) for cid in set(edit.ids)), reverse=True):
            del ycells[i]
            order.pop(i)
    elif isinstance(edit, UpdateCell):
        _update(ycells, order, edit)
    else:
        _move(ycells, order, edit)


def _py_cell(y: Any) -> dict[str, Any]:
    raw = y.to_py()
    return _ints(raw) if isinstance(raw, dict) else {}


def _update(ycells: pycrdt.Array[Any], order: list[str], edit: UpdateCell) -> None:
    import pycrdt

    i = _index(order, edit.id)
    target: pycrdt.Map[Any] = ycells[i]
    changes = dict(edit.changes)
    new_type = changes.get("cell_type")
    if new_type is not None and new_type != target.get("cell_type"):
        # A new type is a new cell for JupyterLab: re-create it (same id), as JupyterLab does.
        cell = _py_cell(target)
        source = changes.pop("source", None)
        if source is not None:
            wanted = source if edit.intended is None else edit.intended
            base = cell.get("source", "") if edit.base_source is None else edit.base_source
            cell["source"] = apply_text_ops(
                cell["source"], rebase_text(base, cell["source"], wanted)
            )
        for key in edit.remove:
            cell.pop(key, None)
        cell.update(copy.deepcopy(changes))
        if new_type != "code":
            cell.pop("execution_state", None)
        del ycells[i]
        ycells.insert(i, ycell(cell))
        return
    for key, value in changes.items():
        if key == "source":
            ytext = target.get("source")
            if isinstance(ytext, pycrdt.Text):
                # A merged edit applies the caller's own change (read source → its source),
                # rebased onto the text as it is now, never a rewrite of others' typing.
                wanted = str(value) if edit.intended is None else edit.intended
                _set_ytext(ytext, edit.base_source, wanted)
            else:
                target["source"] = pycrdt.Text(str(value))
        elif key == "metadata":
            _set_ymap(target, "metadata", value or {})
        elif key == "outputs":
            _set_youtputs(target, value or [])
        else:
            current: Any = target.get(key)
            if isinstance(current, pycrdt.Map | pycrdt.Array | pycrdt.Text):
                current = current.to_py()
            if _ints({"v": current})["v"] != value or key not in target:
                target[key] = copy.deepcopy(value)
    for key in edit.remove:
        if key in target:
            del target[key]


def _move(ycells: pycrdt.Array[Any], order: list[str], edit: MoveCells) -> None:
    moving = set(edit.ids)
    for cid in moving:
        _index(order, cid)
    picked = [i for i, cid in enumerate(order) if cid in moving]
    cells = [_py_cell(ycells[i]) for i in picked]
    for i in reversed(picked):
        del ycells[i]
        order.pop(i)
    at = min(max(edit.index, 0), len(order))
    for k, cell in enumerate(cells):
        ycells.insert(at + k, ycell(cell))
        order.insert(at + k, str(cell.get("id")))


# ---------------------------------------------------------------------------------------------
# The store


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


class RTCStore:
    """The notebooks of a Jupyter Server, live through its rooms (see the module docstring)."""

    def __init__(
        self,
        api: JupyterAPI,
        *,
        agent_name: str = "nbrelay agent",
        folder: str = "",
        idle_close: float = 120.0,
        sync_timeout: float = 60.0,
    ) -> None:
        self.api = api
        self.paths = Paths(folder)
        self.contents = ContentsStore(api, folder=folder)
        self.user = agent_user(agent_name)
        self.idle_close = idle_close
        self.sync_timeout = sync_timeout
        self._rtc: bool | None = None
        self.mode = "live"  # "contents" once the server turns out to have no RTC
        # Running cells' outputs are written into the room this often (the workspace reads it).
        self.output_interval = 0.1
        self._rooms: dict[str, Room] = {}
        self._locks: dict[str, anyio.Lock] = {}
        # What each MCP session (reader) last saw: the guard against stale positions.
        self._known_version: LastSeen[str] = LastSeen()
        self._known_order: LastSeen[tuple[str, ...]] = LastSeen()
        self._known_sources: LastSeen[dict[str, str]] = LastSeen()
        self._seen_reloads: dict[str, tuple[Room, int]] = {}
        self._reconnected: set[str] = set()
        self._presence: Room | None = None
        self._presence_lock = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._closed = False

    def relative(self, path: str) -> str:
        return self.paths.relative(path)

    @property
    def live_outputs(self) -> bool:
        """Whether outputs stream into shared cells with JupyterLab's run state (needs RTC)."""
        return self._rtc is True

    # -- lifetime -------------------------------------------------------------------------

    def attach(self, tg: TaskGroup) -> None:
        """Run the rooms' background tasks in ``tg`` (the workspace's, while the server runs)."""
        self._tg = tg
        tg.start_soon(self._reap_idle)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RTCStore]:
        """Host the background tasks in a task group of its own (for use without a workspace)."""
        async with anyio.create_task_group() as tg:
            self.attach(tg)
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self._close_rooms()
                self._tg = None
                tg.cancel_scope.cancel()

    async def aclose(self) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._close_rooms()
            await self.api.aclose()

    async def _close_rooms(self) -> None:
        rooms = list(self._rooms.values())
        self._rooms.clear()
        if self._presence is not None:
            rooms.append(self._presence)
            self._presence = None
        for room in rooms:
            await room.close()

    async def _reap_idle(self) -> None:
        """Leave rooms nobody used for ``idle_close`` seconds (and then the presence room)."""
        while True:
            await anyio.sleep(min(5.0, max(self.idle_close / 4, 0.05)))
            try:
                await self._close_idle()
            except Exception:  # never let housekeeping take the server's task group down
                logger.exception("closing idle rooms failed")

    async def _close_idle(self) -> None:
        now = time.monotonic()
        for rel, room in list(self._rooms.items()):
            idle = now - room.last_used > self.idle_close
            if idle and not room.held and not room.lock.locked():
                self._rooms.pop(rel, None)
                await room.close()
        if not self._rooms and self._presence is not None:
            presence, self._presence = self._presence, None
            await presence.close()

    def _lock(self, rel: str) -> anyio.Lock:
        lock = self._locks.get(rel)
        if lock is None:
            lock = self._locks[rel] = anyio.Lock()
        return lock

    # -- rooms ----------------------------------------------------------------------------

    async def _start(self, room: Room) -> None:
        if self._closed:
            raise RemoteError("nbrelay is shutting down; the notebook was not opened.")
        if self._tg is None:
            raise RemoteError(
                "live mode is not running (internal: the store was used outside running()).",
                hint="This is a bug in nbrelay; please report it.",
            )
        await self._tg.start(room.run)

    async def _room(self, rel: str) -> Room | None:
        """The synced room of a notebook, joining it if needed; None without RTC on the server."""
        if self._rtc is False:
            return None
        room = self._rooms.get(rel)
        if room is not None and room.alive:
            room.last_used = time.monotonic()
            return room
        if room is not None:
            self._rooms.pop(rel, None)
            if room.lost:
                self._reconnected.add(rel)
        full = self.paths.server(rel)
        if not await self.api.exists(full):
            raise NotebookNotFound(
                f"notebook {rel!r} does not exist.",
                hint=act("missing"),
            )
        session = await self.api.collaboration_session(full)
        if session is None:
            self._rtc = False
            self.mode = "contents"
            return None
        self._rtc = True
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
        self._rooms[rel] = room
        await self._announce(full)
        return room

    async def _announce(self, full: str) -> None:
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

    async def _drop(self, rel: str) -> None:
        room = self._rooms.pop(rel, None)
        if room is not None:
            await room.close()

    # -- sessions -------------------------------------------------------------------------

    async def open_session(self, path: str) -> tuple[str, str]:
        """Join the notebook's room and keep it joined until ``close_session``; return the
        room's (session id, file id)."""
        rel = self.relative(path)
        async with self._lock(rel):
            room = await self._room(rel)
        if room is None:
            raise Unsupported(
                "this Jupyter Server has no real-time collaboration, so there is no live session "
                "to join.",
                hint="Install jupyter-collaboration on the server; the notebook tools work "
                "without it.",
            )
        room.held = True
        return room.session_id or "", room.room_id.rsplit(":", 1)[-1]

    async def close_session(self, path: str) -> bool:
        """Leave the notebook's room now (and JupyterLab's collaborator list once no room is
        left); False if the room was not joined."""
        rel = self.relative(path)
        async with self._lock(rel):
            if rel not in self._rooms:
                return False
            await self._drop(rel)
        async with self._presence_lock:
            if not self._rooms and self._presence is not None:
                presence, self._presence = self._presence, None
                await presence.close()
        return True

    def _notes(self, rel: str, room: Room, *, commit: bool = True) -> tuple[str, ...]:
        """What changed behind the agent's back since its last call on this notebook; with
        ``commit`` the agent counts as told."""
        notes: list[str] = []
        if rel in self._reconnected:
            notes.append(RECONNECT_NOTE)
        seen = self._seen_reloads.get(rel)
        if seen is not None and seen[0] is room and room.reloads > seen[1]:
            notes.append(RELOAD_NOTE)
        if commit:
            self._reconnected.discard(rel)
            self._seen_reloads[rel] = (room, room.reloads)
        return tuple(notes)

    def _snapshot(self, rel: str, room: Room) -> tuple[Snapshot, tuple[str, ...]]:
        nb, version, problems = room.snapshot()
        snap = Snapshot(path=rel, notebook=nb, version=version, problems=problems)
        return snap, tuple(nb.ids)

    # -- the protocol -----------------------------------------------------------------------

    async def list(self, folder: str, *, recursive: bool) -> builtins.list[Entry]:
        return await self.contents.list(folder, recursive=recursive)

    async def load(self, path: str) -> Snapshot:
        rel = self.relative(path)
        async with self._lock(rel):
            for attempt in range(2):
                room = await self._room(rel)
                if room is None:
                    return await self.contents.load(rel)
                try:
                    async with room.lock:
                        await room.barrier()
                        snap, order = self._snapshot(rel, room)
                        notes = self._notes(rel, room)
                except RoomLost:
                    if attempt:
                        raise self._lost(rel) from None
                    continue
                known = self._known_version.get(rel)
                self._known_version[rel] = snap.version
                self._known_order[rel] = order
                self._known_sources[rel] = snap.notebook.sources()
                changed = known is not None and known != snap.version
                return replace(snap, changed_outside=changed, notes=notes)
        raise self._lost(rel)

    async def peek(self, path: str) -> Snapshot:
        """The notebook as its room holds it now (or as the server stores it, when nbrelay is
        not in its room), without counting as the agent's read."""
        rel = self.relative(path)
        room = self._rooms.get(rel)
        if room is not None and room.alive:
            return self._snapshot(rel, room)[0]
        return await self.contents.peek(rel)

    def _lost(self, rel: str) -> RemoteError:
        return RemoteError(
            f"the connection to the Jupyter Server dropped twice while working on {rel!r}.",
            hint="Check that the server is running and reachable, then retry.",
        )

    async def edit(
        self,
        path: str,
        planner: Planner,
        *,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        rel = self.relative(path)
        async with self._lock(rel):
            outcome = await self._edit(rel, planner, expected_version, guard_positions)
            if outcome.plan.edits:
                self._known_version[rel] = outcome.after.version
                self._known_order[rel] = tuple(outcome.after.notebook.ids)
                self._known_sources[rel] = outcome.after.notebook.sources()
        return outcome

    async def _edit(
        self, rel: str, planner: Planner, expected_version: str | None, guard_positions: bool
    ) -> EditOutcome:
        for attempt in range(2):
            room = await self._room(rel)
            if room is None:
                return await self.contents.edit(
                    rel, planner, expected_version=expected_version, guard_positions=guard_positions
                )
            try:
                async with room.lock:
                    await room.barrier()
                    return await self._edit_in(
                        room, rel, planner, expected_version, guard_positions
                    )
            except RoomLost:
                # The connection ended before the edit was applied: retry on a fresh document.
                if attempt:
                    raise self._lost(rel) from None
            except _Unconfirmed as exc:
                return await self._confirm(rel, exc.outcome)
        raise self._lost(rel)

    async def _edit_in(
        self,
        room: Room,
        rel: str,
        planner: Planner,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        before, order = self._snapshot(rel, room)
        notes = self._notes(rel, room, commit=False)
        told = (" " + " ".join(notes)) if notes else ""
        refuse_stale(rel, expected_version, before.version, told)
        known = self._known_version.get(rel)
        outside = known is not None and known != before.version
        known_order = self._known_order.get(rel)
        if (
            guard_positions
            and expected_version is None
            and known_order is not None
            and known_order != order
        ):
            raise positions_moved(
                f"someone else inserted, deleted or moved cells of {rel!r}", before.version, told
            )
        plan, after_nb = plan_edit(
            before,
            planner,
            fix_hint="Fix it in JupyterLab, then retry.",
            clean=lambda c: {k: v for k, v in c.items() if k != "execution_state"},
            read=self._known_sources.get(rel),
        )
        before = replace(before, changed_outside=outside)
        self._notes(rel, room)
        if after_nb is None:
            return EditOutcome(before, before, plan, changed_outside=outside, notes=notes)
        reloads = room.reloads
        room.apply(list(order), plan.edits)
        nb, version, problems = room.snapshot()
        after = Snapshot(path=rel, notebook=nb, version=version, problems=problems)
        outcome = EditOutcome(before, after, plan, changed_outside=outside, notes=notes)
        streaming = _streaming(plan.edits) and time.monotonic() - room.last_save < _STREAM_SAVE
        try:
            if streaming:
                # Outputs of a running cell: others see them at once; the file is saved when
                # the cell ends (and by the server's autosave meanwhile).
                await room.barrier()
                saved = None
            else:
                saved = await self._save(room)
        except RoomLost:
            raise _Unconfirmed(outcome) from None
        # After a save the server records the file's hash; a reload from disk deletes it.
        lost_hash = not streaming and room.seen_hash and room.ystate.get("hash") is None
        if room.reloads != reloads or lost_hash:
            self._seen_reloads[rel] = (room, room.reloads)
            raise ConflictError(
                f"the file of {rel!r} was changed outside JupyterLab while your edit was being "
                "saved, and the Jupyter Server reloaded the notebook from that file, which may "
                "have discarded your edit.",
                current=room.snapshot()[1],
                hint=f"{act('read_again')} Redo the edit if it is missing.",
            )
        if saved is not None:
            outcome = replace(outcome, notes=(*notes, SAVE_NOTE.format(why=saved)))
        return outcome

    async def _confirm(self, rel: str, outcome: EditOutcome) -> EditOutcome:
        """The connection ended after an edit was sent: find out on a fresh document whether the
        server got it (a Y update arrives whole or not at all)."""
        room = await self._room(rel)
        if room is None:
            raise self._lost(rel)
        async with room.lock:
            await room.barrier()
            snap, _ = self._snapshot(rel, room)
            notes = self._notes(rel, room)
            if not _landed(outcome, snap.notebook):
                raise RemoteError(
                    f"the connection to the Jupyter Server dropped before your edit of {rel!r} "
                    "reached it; nbrelay reconnected, and the edit is not in the notebook.",
                    hint="Nothing was changed: read the notebook again and redo the edit.",
                )
            saved = await self._save(room)
        extra = (RECONNECT_NOTE,) if RECONNECT_NOTE not in notes else ()
        if saved is not None:
            extra = (*extra, SAVE_NOTE.format(why=saved))
        return replace(outcome, after=snap, notes=(*outcome.notes, *notes, *extra))

    async def _save(self, room: Room) -> str | None:
        """Barrier, save, barrier; None when saved, else why not."""
        room.last_save = time.monotonic()
        await room.barrier()
        status = ""
        for delay in (0.05, 0.2, 0.5):
            status = await room.save()
            if status != "skipped":
                break
            await anyio.sleep(delay)
        await room.barrier()
        return None if status == "success" else status

    async def create(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        rel = self.relative(path)
        validate.check_notebook(notebook)
        full = self.paths.server(rel)
        async with self._lock(rel):
            exists = await self.api.exists(full)
            if exists and not overwrite:
                raise NotebookExists(
                    f"{rel!r} already exists.",
                    hint=act("exists"),
                )
            if self._rtc is False:
                return await self.contents.create(rel, notebook, overwrite=overwrite)
            notes: tuple[str, ...] = ()
            if not exists:
                # No room can be open on a file that does not exist yet: write it, then join.
                await self._drop(rel)
                created = await self.contents.create(rel, notebook, overwrite=False)
                room = await self._room(rel)
                if room is None:
                    return created
                async with room.lock:
                    await self._settle(room, rel, notebook)
                    snap, order = self._snapshot(rel, room)
                    self._notes(rel, room)
            else:
                room = await self._room(rel)
                if room is None:
                    return await self.contents.create(rel, notebook, overwrite=True)
                async with room.lock:
                    await room.barrier()
                    room.replace_all(notebook)
                    snap, order = self._snapshot(rel, room)
                    saved = await self._save(room)
                    self._notes(rel, room)
                if saved is not None:
                    notes = (SAVE_NOTE.format(why=saved),)
        self._known_version[rel] = snap.version
        self._known_order[rel] = order
        self._known_sources[rel] = snap.notebook.sources()
        return replace(snap, notes=notes)

    async def _settle(self, room: Room, rel: str, notebook: Notebook, within: float = 10.0) -> None:
        """Wait until a just-created file's room shows it: a room the server still kept for an
        earlier file at the same path is reloaded from the new file within about a second."""
        want = [(c["id"], c.get("source", "")) for c in notebook.cells]
        deadline = time.monotonic() + within
        while True:
            await room.barrier()
            have = [(c["id"], c.get("source", "")) for c in room.snapshot()[0].cells]
            # JupyterLab shows a notebook without cells as one empty code cell.
            if have == want or (not want and len(have) == 1 and have[0][1] == ""):
                return
            if time.monotonic() > deadline:
                raise RemoteError(
                    f"the Jupyter Server still shows an older notebook at {rel!r} after creating "
                    "it (it keeps a closed notebook in memory for a while).",
                    hint=act("read_later"),
                )
            await anyio.sleep(0.2)

    async def remove(self, path: str) -> None:
        rel = self.relative(path)
        async with self._lock(rel):
            await self._drop(rel)
            await self.contents.remove(rel)
            self._known_version.pop(rel, None)
            self._known_order.pop(rel, None)
            self._known_sources.pop(rel, None)

    async def rename(self, src: str, dst: str, *, overwrite: bool, keep_source: bool) -> Snapshot:
        src_rel, dst_rel = self.relative(src), self.relative(dst)
        if keep_source:
            snap = await self.load(src_rel)
            return await self.create(dst_rel, snap.notebook, overwrite=overwrite)
        async with self._lock(src_rel):
            await self._drop(src_rel)
            await self._drop(dst_rel)
            await self.contents.rename(src_rel, dst_rel, overwrite=overwrite, keep_source=False)
            self._known_version.pop(src_rel, None)
            self._known_order.pop(src_rel, None)
            self._known_sources.pop(src_rel, None)
        return await self.load(dst_rel)
