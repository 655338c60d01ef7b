"""A Y notebook document read as an nbformat notebook, cell by cell as it changes.

Reading a room's notebook used to mean converting the whole document on every call: one JSON
dump of every cell, normalising, validating and serialising all of them again (to hash the
version), about 50 ms for 200 cells with outputs, most of an edit's time. ``Mirror`` keeps each
cell's conversion (the nbformat cell, its bytes as nbformat writes them, its schema problem) and
redoes only the cells a transaction touched, known from the document's deep events: an edit of
one cell costs one cell. The result is the same notebook, version and problems as converting
the whole document (``read_whole``), which is still used whenever the cheap path cannot be sure:
cells without a valid id or with duplicated ids, a cell nbrelay cannot read, an event it cannot
place. Pure data, like ``notebook.ydoc``: no sockets, files or event loop.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from nbrelay.errors import NbrelayError
from nbrelay.notebook import validate
from nbrelay.notebook.model import (
    Cell,
    Notebook,
    Step,
    from_dict,
    new_notebook,
    serialize,
    version_of,
)
from nbrelay.notebook.serialize import CellBytes, Encoded, Work, cells_version
from nbrelay.notebook.ydoc import cell_from_y, ints, notebook_from_doc, placeholder

if TYPE_CHECKING:
    import pycrdt

Read = tuple[Notebook, str, tuple[str, ...]]

_OPEN = b'{\n "cells": ['
_LIMIT = 5  # problems reported, as ``validate.problems``


_CELL = operator.attrgetter("cell")
_ENCODED = operator.attrgetter("encoded")
_PROBLEM = operator.attrgetter("problem")
_MIDDLE = operator.attrgetter("middle")
_SEAMED = operator.attrgetter("seamed")
_ID = operator.itemgetter("id")


class _Unsure(Exception):
    """The cheap path cannot reproduce the whole conversion here: convert the whole document."""


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity: a list search is C
class _Cell:
    cell: Cell | None  # None: not an object (dropped, as the whole conversion drops it)
    # The cell as it appears in the file and its piece's digest (``notebook.serialize``).
    encoded: Encoded | None
    problem: str | None


@dataclass(frozen=True)
class _Top:
    data: dict[str, Any]  # the notebook without its cells (``cells`` empty)
    head: bytes  # the file up to its cells (exclusive) …
    tail: bytes  # … and after them
    problems: tuple[str, ...]


def without_placeholder(
    read: Read, ycells: pycrdt.Array[Any], *, name: str
) -> tuple[Read, str | None]:
    """``read`` without the placeholder cell a room gives a notebook that has none
    (``notebook.ydoc.PLACEHOLDER``): the notebook's own cells, none, and its version and
    problems as the file without cells has them; with the placeholder's id (None: no
    placeholder, ``read`` as it is)."""
    nb = read[0]
    found = placeholder(ycells) if len(nb.cells) == 1 else None
    if found is None or found != nb.cells[0].get("id"):
        return read, None
    empty = from_dict({**nb.data, "cells": []}, name=name, scrub=False)
    return (empty, version_of(serialize(empty)), tuple(validate.problems(empty))), found


def read_whole(ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any], *, name: str) -> Read:
    """(notebook, version, problems) of the whole document, converted from scratch."""
    nb = notebook_from_doc(ymeta, ycells, name=name)
    return nb, version_of(serialize(nb)), tuple(validate.problems(nb))


def _split(raw: bytes, cells: int) -> tuple[bytes, bytes, bytes]:
    """A serialised notebook's bytes as (before its cells, its cells, after them)."""
    if not raw.startswith(_OPEN):
        raise _Unsure
    if not cells:
        if raw[len(_OPEN) : len(_OPEN) + 1] != b"]":
            raise _Unsure
        return _OPEN, b"", raw[len(_OPEN) + 1 :]
    # Cells' own lines are indented deeper: the first line at this depth closes the list.
    end = raw.find(b"\n ]", len(_OPEN))
    if end == -1:
        raise _Unsure
    return _OPEN, raw[len(_OPEN) + 1 : end], raw[end + 3 :]


def _convert_top(ymeta: pycrdt.Map[Any], name: str) -> _Top:
    try:
        meta = ints(json.loads(str(ymeta)) or {})
    except ValueError:
        meta = ints(ymeta.to_py() or {})
    minor = meta.get("nbformat_minor")
    data: dict[str, Any] = {
        "cells": [],
        "metadata": meta.get("metadata") or {},
        "nbformat": int(meta.get("nbformat") or 4),
        "nbformat_minor": int(minor) if isinstance(minor, int) else 5,
    }
    try:
        nb = from_dict(data, name=name, scrub=False)
        head, _, tail = _split(serialize(nb), 0)
    except NbrelayError:
        raise _Unsure from None
    return _Top(nb.data, head, tail, tuple(validate.problems(nb)))


def _plain(y: Any) -> Any:
    """One element of the cell list as plain data (a cell is a Y map; a careless client can
    put in a plain value, which the whole conversion drops)."""
    to_py = getattr(y, "to_py", None)
    if to_py is None:
        return y
    try:
        return json.loads(str(y))
    except ValueError:  # a value JSON cannot hold (binary): walk the cell
        return to_py()


def _convert_cell(raw: Any, name: str, work: Work) -> _Cell:
    cell = cell_from_y(raw)
    if cell is None:
        return _Cell(None, None, None)
    cid = cell.get("id")
    if not isinstance(cid, str) or not cid:
        raise _Unsure  # the whole conversion makes ids, knowing every other cell's
    try:
        one = from_dict({**new_notebook([]).data, "cells": [cell]}, name=name, scrub=False)
        _, chunk, _ = _split(serialize(one), 1)
    except NbrelayError:
        raise _Unsure from None  # the whole conversion raises it, naming the right cell
    if not chunk.startswith(b"  "):
        raise _Unsure
    converted = one.cells[0]
    encoded = Encoded(converted, chunk[2:], work)
    return _Cell(converted, encoded, validate.cell_problem(converted))


def _spliced(runs: Sequence[tuple[int, int, int]], cells: list[Cell]) -> tuple[Step, ...] | None:
    """The splices ``runs`` (position, cells taken out, cells put in; each in the list the
    ones before made) as ``Notebook.spliced_from`` gives them, the cells put in taken from
    ``cells`` (the list they all made); None when a later run took out cells an earlier one
    put in (no splice then holds the cells it put in)."""
    steps: list[Step] = []
    for k, (at, removed, added) in enumerate(runs):
        where = list(range(at, at + added))
        for later, out, put in runs[k + 1 :]:
            if any(later <= p < later + out for p in where):
                return None
            where = [p if p < later else p - out + put for p in where]
        steps.append((at, removed, [cells[p] for p in where]))
    return tuple(steps)


class Mirror:
    """The notebook of one Y document, kept converted cell by cell (see the module docstring).

    The first read converts every cell; later reads convert the cells changed since (the
    document's own change events say which). ``read`` gives the same (notebook, version,
    problems) as ``read_whole``; ``close`` stops following a document that lives on.

    What a read derives from the cells (their ids and how often each occurs, their bytes and
    pieces' digests, which have schema problems) is kept in lists by position, updated where
    cells changed, were put in or taken out: a read after an edit of one cell costs that cell
    and two copies of lists (the notebook's own cell and id lists), no pass over the others.
    """

    def __init__(self, ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any], *, name: str) -> None:
        self.ymeta = ymeta
        self.ycells = ycells
        self.name = name
        self._cells: list[_Cell | None] = []  # by position; None: changed since converted
        self._pending: set[int] = set()  # the positions holding None
        self._top: _Top | None = None
        self._whole = True  # convert every cell again on the next read
        self._last: Read | None = None
        self._reset()
        # What reading cost so far: cells converted one by one, and whole conversions.
        self.cells_converted = 0
        self.whole_reads = 0
        self.work = Work()  # cells encoded and bytes hashed for the versions
        # Transactions that changed the notebook (its cells or top-level fields) since the
        # mirror began following it: equal counts, the same notebook.
        self.changes = 0
        self._subscriptions = [
            (ycells, ycells.observe_deep(self._on_cells)),
            (ymeta, ymeta.observe_deep(self._on_meta)),
        ]

    def _reset(self) -> None:
        """Forget what was derived from the cells (the next read converts every cell)."""
        self._cells = []
        self._pending = set()
        # Derived from the converted cells, by position (a position in ``_pending`` holds a
        # stand-in that counts for nothing): the cells, their bytes and digests (``bytes``),
        # ids, how often each id occurs and how many occurrences are repeats, which cells have
        # a schema problem and how many, and how many cells are dropped (not objects).
        self._bytes = CellBytes()
        self._ids: list[str | None] = []
        self._seen: dict[str, int] = {}
        self._repeats = 0
        self._flags: list[bool] = []
        self._flagged = 0
        self._dropped = 0
        # The last notebook read and whether cells were put in or taken out since (for
        # ``Notebook.derive``: the next one takes over its map of positions).
        self._prev: Notebook | None = None
        self._moved = False
        # The runs of cells taken out and put in since the last read, in order, as (position,
        # cells taken out, cells put in); None: not only that (a cell kept in place changed),
        # so the next read cannot say it was made from the last one by splices alone.
        self._steps: list[tuple[int, int, int]] | None = None

    def close(self) -> None:
        """Stop following the document (a room nbrelay leaves, whose document lives on)."""
        for target, sub in self._subscriptions:
            target.unobserve(sub)
        self._subscriptions = []
        self._whole = True
        self._reset()
        self._last = None

    # Observers: never read the document here (it is borrowed), only note what changed.

    def _on_meta(self, events: Sequence[Any]) -> None:
        self.changes += 1
        self._top = None
        self._last = None

    def _on_cells(self, events: Sequence[Any]) -> None:
        self.changes += 1
        self._last = None
        if self._whole:
            return
        try:
            # The cell list's own change first (positions before → after), then the cells
            # changed inside, whose paths count positions after the transaction.
            for event in events:
                if not event.path:
                    self._splice(event.delta)
            for event in events:
                path = event.path
                if path:
                    at = path[0]
                    if not isinstance(at, int) or not 0 <= at < len(self._cells):
                        raise _Unsure
                    if self._cells[at] is not None:  # a cell converted before changed
                        self._steps = None
                    self._take(at)
        except Exception:
            self._whole = True
            self._steps = None

    def _splice(self, delta: Sequence[dict[str, Any]]) -> None:
        at = 0
        for step in delta:
            if "retain" in step:
                at += int(step["retain"])
            elif "delete" in step:
                n = int(step["delete"])
                if at + n > len(self._cells):
                    raise _Unsure
                self._cut(at, n)
                if self._steps is not None:
                    self._steps.append((at, n, 0))
            elif "insert" in step:
                n = len(step["insert"])
                self._open(at, n)
                if self._steps is not None:
                    self._steps.append((at, 0, n))
                at += n
            else:
                raise _Unsure

    # The derived lists, kept by position.

    def _take(self, at: int) -> None:
        """The cell at ``at`` changed: take what it counted for out, leave a stand-in."""
        entry = self._cells[at]
        if entry is None:
            return
        self._cells[at] = None
        self._pending.add(at)
        if entry.cell is None:
            self._dropped -= 1
            return
        known = self._bytes
        known.unseamed -= not cast("Encoded", entry.encoded).seamed
        known.changed(at)
        cid = cast(str, self._ids[at])
        count = self._seen[cid]
        if count > 1:
            self._seen[cid] = count - 1
            self._repeats -= 1
        else:
            del self._seen[cid]
        self._ids[at] = None
        if self._flags[at]:
            self._flags[at] = False
            self._flagged -= 1

    def _put(self, at: int, entry: _Cell) -> None:
        """The cell at ``at`` (a stand-in) converted: count it in."""
        self._cells[at] = entry
        if entry.cell is None or entry.encoded is None:
            self._dropped += 1
            return
        known, encoded = self._bytes, entry.encoded
        known.cells[at], known.entries[at] = entry.cell, encoded
        known.chunks[at], known.middles[at] = encoded.chunk, encoded.middle
        known.unseamed += not encoded.seamed
        known.changed(at)
        cid = entry.cell["id"]
        self._ids[at] = cid
        count = self._seen.get(cid, 0)
        self._seen[cid] = count + 1
        self._repeats += count > 0
        if entry.problem is not None:
            self._flags[at] = True
            self._flagged += 1

    def _cut(self, at: int, n: int) -> None:
        """Cells ``at`` … ``at + n - 1`` taken out."""
        for i in range(at, at + n):
            self._take(i)
        end = at + n
        for kept, _ in self._lists(at):
            del kept[at:end]
        self._pending = {p if p < at else p - n for p in self._pending if not at <= p < end}
        self._moved = True

    def _open(self, at: int, n: int) -> None:
        """``n`` cells put in at ``at`` (stand-ins until converted)."""
        for kept, filler in self._lists(at):
            kept[at:at] = [filler] * n
        self._pending = {p if p < at else p + n for p in self._pending}
        self._pending.update(range(at, at + n))
        self._moved = True

    def _lists(self, at: int) -> list[tuple[list[Any], Any]]:
        """The lists kept by position, each with its stand-in; the digests' blocks from ``at``
        on are dropped (their cells moved: joined again on the next read, in C)."""
        known = self._bytes
        known.moved(at)
        return [
            (self._cells, None),
            (known.cells, None),
            (known.entries, None),
            (known.chunks, b""),
            (known.middles, b""),
            (self._ids, None),
            (self._flags, False),
        ]

    # Reading.

    def read(self) -> Read:
        """(notebook, version, problems) of the document as it is now."""
        if self._last is not None:
            return self._last
        try:
            self._last = self._read()
        except _Unsure:
            self._whole = True
            self._reset()
            self.whole_reads += 1
            self._last = read_whole(self.ymeta, self.ycells, name=self.name)
        return self._last

    def _read(self) -> Read:
        if self._top is None:
            self._top = _convert_top(self.ymeta, self.name)
        top = self._top
        changed: list[int] = []
        if self._whole or len(self._cells) != len(self.ycells):
            try:
                raw = json.loads(str(self.ycells))
            except ValueError:  # a value JSON cannot hold (binary): walk the document
                raw = [y.to_py() for y in self.ycells]
            self._whole = True
            self._reset()
            self._open(0, len(raw))
            for i, one in enumerate(raw):
                self._put(i, _convert_cell(one, self.name, self.work))
            self._pending.clear()
            self.cells_converted += len(raw)
            self._whole = False
            self._moved = True
        else:
            changed = sorted(self._pending)
            for i in changed:
                self._put(i, _convert_cell(_plain(self.ycells[i]), self.name, self.work))
                self.cells_converted += 1
            self._pending.clear()
        if self._dropped:
            return self._derived(top, cast("list[_Cell]", self._cells))
        if self._repeats:
            raise _Unsure  # the whole conversion renames the later ones
        known = self._bytes
        cells = known.cells.copy()
        ids = cast("list[str]", self._ids.copy())
        if cells:
            # Only the changed cells' pieces are hashed: the others' digests are kept, joined
            # by blocks of cells (a block is joined again when one of its cells changed).
            tail = b"\n ]" + top.tail
            blocks = None if known.unseamed or len(cells) < 2 else known.digest_blocks()
            version = cells_version(
                known.entries, known.middles, known.unseamed, tail, self.work, None, blocks
            )
        else:
            raw_file = top.head + b"]" + top.tail
            self.work.bytes_hashed += len(raw_file)
            version = version_of(raw_file)
        problems = list(top.problems)
        at = -1
        with contextlib.suppress(ValueError):
            while self._flagged and len(problems) < _LIMIT:
                at = self._flags.index(True, at + 1)
                problem = cast("_Cell", self._cells[at]).problem
                problems.append(f"cell {at} (id {ids[at]!r}) {problem}")
        nb = Notebook(data={**top.data, "cells": cells})
        prev = self._prev
        if prev is not None and not self._moved and changed:
            same = all(prev.ids[i] == ids[i] for i in changed)
            nb.derive(prev, same, changed)  # its map of positions, if no id moved
        elif prev is not None and self._moved and self._steps:
            steps = _spliced(self._steps, cells)
            if steps is not None:  # cells only put in and taken out: undo's record uses them
                nb.derive_spliced(prev, steps)
        nb._current().ids = ids  # made above: the store, the journal and the readers use them
        self._prev, self._moved, self._steps = nb, False, []
        return nb, version, tuple(problems)

    def _derived(self, top: _Top, known: list[_Cell]) -> Read:
        """The read of cells some of which are dropped (not objects), as the whole conversion
        does: the others' positions shift, so this one derives everything again."""
        self._prev = None
        kept = [c for c in known if c.cell is not None]
        cells = cast("list[Cell]", list(map(_CELL, kept)))
        ids = list(map(_ID, cells))
        if len(set(ids)) != len(ids):
            raise _Unsure
        if kept:
            encoded = cast("list[Encoded]", list(map(_ENCODED, kept)))
            middles = list(map(_MIDDLE, encoded))
            unseamed = len(encoded) - sum(map(_SEAMED, encoded))
            tail = b"\n ]" + top.tail
            version = cells_version(encoded, middles, unseamed, tail, self.work)
        else:
            raw_file = top.head + b"]" + top.tail
            self.work.bytes_hashed += len(raw_file)
            version = version_of(raw_file)
        problems = list(top.problems)
        found = list(map(_PROBLEM, kept))
        flagged = list(map(operator.is_not, found, itertools.repeat(None)))
        at = -1
        with contextlib.suppress(ValueError):
            while len(problems) < _LIMIT:
                at = flagged.index(True, at + 1)
                problems.append(f"cell {at} (id {ids[at]!r}) {found[at]}")
        nb = Notebook(data={**top.data, "cells": cells})
        nb._current().ids = ids
        return nb, version, tuple(problems)
