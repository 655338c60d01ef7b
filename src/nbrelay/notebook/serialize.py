"""Serialising a notebook by splicing bytes: re-encode only the cells that changed.

``serialize(nb)`` (nbformat's writer: one-space indent, sorted keys) encodes the whole notebook.
After a single-cell edit every other cell is the very object written last time (an edit makes
new cell dicts and shares the others; cells are never changed in place), so its bytes are the
bytes written last time. :func:`splice` reuses them and encodes only the new cells, which turns
the cost of a one-cell save from the whole notebook's JSON into one cell's. The result is
``serialize(nb)`` byte for byte.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses

from nbrelay.notebook.model import Cell, Notebook, encode_json_text, serialize

CellBytes = dict[int, tuple[Cell, bytes]]
"""Cells as serialised, keyed by ``id(cell)`` (the cell is kept so the id stays its own)."""

_CELLS_OPEN = b'{\n "cells": [\n  '
_NO_CELLS = b'{\n "cells": []'
_ONE_CELL_TAIL = b'\n ],\n "metadata": {},\n "nbformat": 4,\n "nbformat_minor": 5\n}\n'
_LONG_TEXT = 64 * 1024  # characters of stream text written slice by slice


def splice(nb: Notebook, known: Mapping[int, tuple[Cell, bytes]]) -> tuple[bytes, CellBytes, int]:
    """``serialize(nb)``, reusing the bytes in ``known`` of cells that are the same objects.

    Returns the bytes, the cells' bytes to pass as ``known`` next time, and how many bytes of
    cells were encoded afresh (a caller may give memory back after a big encode).
    """
    skeleton = serialize(nb.with_cells([]))
    if not nb.cells or not skeleton.startswith(_NO_CELLS):
        data = serialize(nb)
        return data, {}, len(data)
    current: CellBytes = {}
    parts = []
    encoded = 0
    for cell in nb.cells:
        hit = known.get(id(cell))
        if hit is None or hit[0] is not cell:
            hit = (cell, cell_bytes(cell))
            encoded += len(hit[1])
        current[id(cell)] = hit
        parts.append(hit[1])
    data = _CELLS_OPEN + b",\n  ".join(parts) + b"\n ]" + skeleton[len(_NO_CELLS) :]
    return data, current, encoded


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
