"""Serialising a notebook by splicing bytes: re-encode and re-hash only the cells that changed.

``serialize(nb)`` (nbformat's writer: one-space indent, sorted keys) encodes the whole notebook.
After a single-cell edit every other cell is the very object written last time (an edit makes
new cell dicts and shares the others; cells are never changed in place), so its bytes are the
bytes written last time, and so is the digest of its piece of the file (``model.version_of``
hashes the pieces between cells). :func:`splice` reuses both and encodes and hashes only the new
cells; what it still does for every cell is a loop in C (comparing two lists, joining digests),
and the file is written from the cells' bytes as they are, never joined into one copy. The
bytes are ``serialize(nb)``'s, byte for byte, and the version is ``version_of`` of them.
"""

from __future__ import annotations

import contextlib
import json
import operator
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses
from typing import cast, overload

from nbrelay.notebook.model import (
    CELL_SEAM,
    Cell,
    Notebook,
    Step,
    encode_json_text,
    piece_digest,
    serialize,
    version_from_digests,
    version_of,
)

_CELLS_OPEN = b'{\n "cells": [\n  '
_NO_CELLS = b'{\n "cells": []'
_ONE_CELL_TAIL = b'\n ],\n "metadata": {},\n "nbformat": 4,\n "nbformat_minor": 5\n}\n'
_SEP = b",\n  "  # between two cells' bytes: with their ends it makes CELL_SEAM
_CELL_END = b"\n  }"
_LONG_TEXT = 64 * 1024  # characters of stream text written slice by slice


@dataclass
class Work:
    """What saves cost, added up: cells encoded (and their bytes), and bytes hashed for the
    version (the digests of the cells' pieces are combined on top: 16 bytes a cell)."""

    cells_encoded: int = 0
    bytes_encoded: int = 0
    bytes_hashed: int = 0


class Encoded:
    """A cell as serialised, and the digest of its piece of the file between two seams (see
    ``model.version_of``); as first or last cell its piece also holds the file's head or tail,
    whose digests are made when first needed."""

    __slots__ = ("cell", "chunk", "first", "last", "middle", "seamed")

    def __init__(self, cell: Cell, body: bytes, work: Work) -> None:
        self.cell = cell  # kept, so that no other object takes its id while this is known
        self.chunk = body + _SEP  # as written before a next cell (the last cell's drops _SEP)
        # A cell in nbformat's layout starts with "{\n" and its only line at the cells' own
        # indent is its last ("  }"), so the seams of the file fall exactly between cells.
        self.seamed = body.startswith(b"{\n") and body.find(_CELL_END) == len(body) - 4
        self.middle = piece_digest(memoryview(body)[2:-4]) if self.seamed else b""
        work.cells_encoded += 1
        work.bytes_encoded += len(body)
        work.bytes_hashed += len(body) - 6
        self.first: bytes | None = None
        self.last: tuple[bytes, bytes] | None = None

    def first_digest(self, work: Work) -> bytes:
        if self.first is None:
            self.first = piece_digest(_CELLS_OPEN + self.chunk[:-_CUT])
            work.bytes_hashed += len(self.chunk)
        return self.first

    def last_digest(self, tail: bytes, work: Work) -> bytes:
        if self.last is None or self.last[0] != tail:
            self.last = (tail, piece_digest(self.chunk[2 : -len(_SEP)] + tail))
            work.bytes_hashed += len(self.chunk) + len(tail)
        return self.last[1]


@dataclass
class CellBytes:
    """The cells of the last save as serialised, in order: the cells, their entries (each keeps
    its cell, so no other object can take the cell's id while this is kept), their bytes and
    their pieces' digests, and how many cells do not fit the seams. ``splice`` updates it."""

    cells: list[Cell] = field(default_factory=list)
    entries: list[Encoded] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    middles: list[bytes] = field(default_factory=list)
    unseamed: int = 0
    mirrors: list[Cell] | None = None  # the notebook's cell list these are the bytes of
    blocks: list[bytes | None] = field(default_factory=list)  # see digest_blocks

    def by_id(self) -> dict[int, Encoded]:
        return dict(zip(map(id, self.cells), self.entries, strict=True))

    def digest_blocks(self) -> list[bytes]:
        """The pieces' digests joined, ``_BLOCK`` cells a block; a block is joined again only
        when one of its cells changed (``changed``), so hashing them touches no other cell."""
        count = -(-len(self.middles) // _BLOCK)
        if len(self.blocks) > count:
            del self.blocks[count:]
        self.blocks.extend([None] * (count - len(self.blocks)))
        for b, block in enumerate(self.blocks):
            if block is None:
                self.blocks[b] = b"".join(self.middles[b * _BLOCK : (b + 1) * _BLOCK])
        return cast(list[bytes], self.blocks)

    def changed(self, at: int) -> None:
        """The cell at ``at`` has new bytes: its block of digests is out of date."""
        if at // _BLOCK < len(self.blocks):
            self.blocks[at // _BLOCK] = None

    def moved(self, at: int) -> None:
        """Cells were put in or taken out at ``at``: the blocks from there on are out of date."""
        del self.blocks[at // _BLOCK :]


_FEW = 16  # cells changed in place up to which no map of all cells is made
_BLOCK = 256  # cells whose digests are joined together (CellBytes.digest_blocks)

_CHUNK = operator.attrgetter("chunk")
_CUT = len(_CELL_END) + len(_SEP)  # a chunk's last bytes that the next seam holds
_MIDDLE = operator.attrgetter("middle")
_SEAMED = operator.attrgetter("seamed")


class Parts(Sequence[bytes | memoryview]):
    """A notebook's bytes as parts to write as they are (``os.writev``): the head, the cells'
    chunks (the last without its separator) and the tail. Joining them would copy every cell."""

    def __init__(self, head: bytes, chunks: list[bytes], tail: bytes) -> None:
        self.head, self.chunks, self.tail = head, chunks, tail
        self.last: bytes | memoryview = memoryview(chunks[-1])[: -len(_SEP)] if chunks else b""

    def __len__(self) -> int:
        return len(self.chunks) + 2

    @overload
    def __getitem__(self, index: int) -> bytes | memoryview: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes | memoryview]: ...

    def __getitem__(self, index: int | slice) -> bytes | memoryview | list[bytes | memoryview]:
        n = len(self.chunks)
        if isinstance(index, int):
            index = index + n + 2 if index < 0 else index
            if not 0 <= index < n + 2:
                raise IndexError(index)
            if index == 0:
                return self.head
            if index == n + 1:
                return self.tail
            return self.last if index == n else self.chunks[index - 1]
        start, stop, step = index.indices(n + 2)
        if step != 1:
            return [self[i] for i in range(start, stop, step)]
        out: list[bytes | memoryview] = [self.head] if start == 0 and stop > 0 else []
        lo = max(start, 1) - 1  # parts 1 … n-1 are chunks 0 … n-2, whole
        out.extend(self.chunks[lo : max(min(stop, n) - 1, lo)])
        if start <= n < stop and n:
            out.append(self.last)
        if stop == n + 2 and start <= n + 1:
            out.append(self.tail)
        return out

    def __iter__(self) -> Iterator[bytes | memoryview]:
        return iter(self[:])


@dataclass
class Spliced:
    parts: Sequence[bytes | memoryview]  # the file's bytes, to write as they are
    known: CellBytes  # to pass to the next ``splice`` of this notebook
    version: str  # ``version_of(data)``

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)


def splice(nb: Notebook, known: CellBytes | None, work: Work | None = None) -> Spliced:
    """``serialize(nb)`` and its ``version_of``, reusing the bytes and digests in ``known`` of
    cells that are the same objects (``known`` is updated to ``nb``'s cells and returned); only
    the other cells are encoded and hashed (``work`` counts it).

    An edit that replaced a few cells in place updates ``known`` at their positions only, and
    one that inserted, deleted or moved cells slices its lists where it did (``_splice_known``); the
    steps over all cells left (finding them, joining the digests, writing) are loops in C that
    do not even look into the other cells' entries.
    """
    work = work if work is not None else Work()
    skeleton = serialize(nb.with_cells([]))
    cells = nb.cells
    if not cells or not skeleton.startswith(_NO_CELLS):
        data = serialize(nb)
        work.bytes_encoded += len(data)
        work.bytes_hashed += len(data)
        return Spliced([data], CellBytes(), version_of(data))
    known = known or CellBytes()
    changed: Sequence[int] | None = None
    steps: Sequence[Step] | None = None
    if known.mirrors is not None:  # made from the last cell list by replacing a few cells?
        changed = nb.changed_from(known.mirrors)
        if changed is None:  # or by inserting, deleting or moving cells?
            steps = nb.spliced_from(known.mirrors)
    if changed is None and steps is None:
        changed = changed_in_place(known.cells, cells)
    if steps is not None:
        _splice_known(known, steps, work)
    elif changed is not None:  # the common edit: a few cells replaced, none moved
        for at in changed:
            entry = Encoded(cells[at], cell_bytes(cells[at]), work)
            known.unseamed += (not entry.seamed) - (not known.entries[at].seamed)
            known.cells[at], known.entries[at] = cells[at], entry
            known.chunks[at], known.middles[at] = entry.chunk, entry.middle
            known.changed(at)
    else:
        entries: list[Encoded | None] = list(map(known.by_id().get, map(id, cells)))
        at = -1
        with contextlib.suppress(ValueError):  # no cell left to encode
            while True:
                at = entries.index(None, at + 1)
                entries[at] = Encoded(cells[at], cell_bytes(cells[at]), work)
        done = cast(list[Encoded], entries)
        known = CellBytes(
            list(cells),
            done,
            list(map(_CHUNK, done)),
            list(map(_MIDDLE, done)),
            len(done) - sum(map(_SEAMED, done)),
        )
    known.mirrors = cells
    tail = b"\n ]" + skeleton[len(_NO_CELLS) :]
    parts = Parts(_CELLS_OPEN, known.chunks, tail)
    blocks = None if known.unseamed or len(cells) < 2 else known.digest_blocks()
    version = cells_version(known.entries, known.middles, known.unseamed, tail, work, parts, blocks)
    return Spliced(parts, known, version)


def _splice_known(known: CellBytes, steps: Sequence[Step], work: Work) -> None:
    """Update ``known`` by the splices that made the new cell list from the one it holds the
    bytes of (cells inserted, deleted, moved): only the cells put in that it holds no bytes of
    (a moved cell keeps its own) are encoded, and the lists are sliced, not rebuilt."""
    spare: dict[int, Encoded] = {}
    for at, removed, added in steps:
        gone = known.entries[at : at + removed]
        spare.update(zip(map(id, (e.cell for e in gone)), gone, strict=True))
        new = [_reused(spare, c) or Encoded(c, cell_bytes(c), work) for c in added]
        known.unseamed += sum(not e.seamed for e in new) - sum(not e.seamed for e in gone)
        known.cells[at : at + removed] = added
        known.entries[at : at + removed] = new
        known.chunks[at : at + removed] = [e.chunk for e in new]
        known.middles[at : at + removed] = [e.middle for e in new]
        del known.blocks[at // _BLOCK :]  # the digests from here on have moved


def _reused(spare: dict[int, Encoded], cell: Cell) -> Encoded | None:
    return spare.pop(id(cell), None)


def cells_version(
    entries: Sequence[Encoded],
    middles: Sequence[bytes],
    unseamed: int,
    tail: bytes,
    work: Work,
    parts: Sequence[bytes | memoryview] | None = None,
    blocks: Sequence[bytes] | None = None,
) -> str:
    """``version_of`` the notebook whose cells are ``entries`` (at least one; ``middles`` their
    pieces' digests, ``unseamed`` how many do not fit the seams) followed by ``tail`` (from the
    cells' closing ``\n ]`` on), hashing only what no entry holds a digest of yet: the first
    and last cells' pieces with the head and tail, unless they are known. ``parts``: the file's
    bytes, if already at hand (for a notebook whose seams do not fall between cells);
    ``blocks``: ``middles`` joined in consecutive blocks, if already at hand."""
    if len(entries) < 2 or unseamed or CELL_SEAM in tail:
        if parts is None:
            parts = Parts(_CELLS_OPEN, [e.chunk for e in entries], tail)
        data = b"".join(parts)
        work.bytes_hashed += len(data)
        return version_of(data)
    views = [memoryview(b) for b in (blocks if blocks is not None else [b"".join(middles)])]
    views[0] = views[0][len(middles[0]) :]  # the first and last cells' pieces are hashed
    views[-1] = views[-1][: len(views[-1]) - len(middles[-1])]  # with the head and tail
    first, last = entries[0].first_digest(work), entries[-1].last_digest(tail, work)
    return version_from_digests(first, *views, last)


def changed_in_place(old: list[Cell], new: list[Cell]) -> list[int] | None:
    """The positions whose cell is not the same object, if the lists are as long and they are
    few (None: look the cells up by identity)."""
    if len(old) != len(new) or not old:
        return None
    flags = list(map(operator.is_not, old, new))
    found: list[int] = []
    with contextlib.suppress(ValueError):
        while len(found) <= _FEW:
            found.append(flags.index(True, found[-1] + 1 if found else 0))
    return found if len(found) <= _FEW else None


def cell_bytes(cell: Cell) -> bytes:
    """A cell as nbformat's writer puts it inside a notebook, cut out of a one-cell notebook.

    A long stream text (a print loop's) stands in as a marker and its lines are then written
    slice by slice, exactly as the writer writes a list of lines, instead of first becoming a
    list with a Python string per line: that list was most of the server's peak memory.
    """
    outputs = cell.get("outputs")
    texts: dict[bytes, str] = {}
    if isinstance(outputs, list) and any(_long_stream(o) for o in outputs):
        token = secrets.token_hex(8)
        shown = []
        for k, out in enumerate(outputs):
            if _long_stream(out):
                mark = f"\x00nbrelay-{token}-{k}\x00"
                texts[json.dumps(mark).encode()] = out["text"]
                out = {**out, "text": mark}
            shown.append(out)
        cell = {**cell, "outputs": shown}
    one = serialize(Notebook({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    body = one[len(_CELLS_OPEN) : -len(_ONE_CELL_TAIL)]
    for quoted, text in texts.items():
        at = body.index(quoted)
        indent = body[body.rindex(b"\n", 0, at) + 1 : at]
        body = body[:at] + _json_lines(text, b",\n" + indent) + body[at + len(quoted) :]
    return body


def _long_stream(out: object) -> bool:
    return (
        isinstance(out, dict)
        and out.get("output_type") == "stream"
        and isinstance(out.get("text"), str)
        and len(out["text"]) > _LONG_TEXT
    )


def _json_lines(text: str, separator: bytes) -> bytes:
    """The JSON strings of ``text.splitlines(True)`` joined by ``separator``, made a slice of
    lines at a time (a slice ends after a newline, so no line break is split)."""
    sep = separator.decode()
    pieces = []
    start = 0
    while start < len(text):
        end = text.find("\n", start + _LONG_TEXT // 4)
        end = len(text) if end < 0 else end + 1
        lines = sep.join(map(encode_basestring, text[start:end].splitlines(True)))
        pieces.append(encode_json_text(lines))
        start = end
    return separator.join(pieces)
