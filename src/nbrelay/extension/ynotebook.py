"""A linear conversion of jupyter_ydoc's notebook documents, in the server nbrelay's extension
runs in.

jupyter-collaboration converts a room's whole Y document to a notebook each time it saves the room
(and when it loads one, to compare it with the file), with jupyter_ydoc's ``YNotebook.get`` and
``aget``. Those take the cells one by one by index, and pycrdt finds an array's item by walking
the array from its start, so one conversion costs O(cells²): measured at 0.08, 0.6 and 3 s for
2,500, 5,000 and 10,000 cells, on the Jupyter Server's event loop, after every burst of changes in
the room, from anyone. Every client of that server (people in JupyterLab, nbrelay's calls, other
MCP servers) waits behind it.

``install`` gives ``YNotebook`` a conversion that reads the cell array once (pycrdt's JSON form of
the array, one walk) and then runs jupyter_ydoc's own per-cell step (``_cell_to_py``) on each cell,
so the result is jupyter_ydoc's. It keeps jupyter_ydoc's own conversion wherever the JSON form
could differ: small notebooks (no time to gain), duplicated cell ids (jupyter_ydoc renames them in
the document), and any ``null`` other than an execution count (JSON has no NaN or infinity, which
pycrdt writes as ``null``). The one value it cannot tell apart is a byte string put into the
document by a client (no notebook file holds one; JSON gives its bytes as a list of numbers,
where jupyter_ydoc's conversion gives bytes that no notebook file can be saved with).

Before installing, it converts a sample document both ways and installs nothing if they differ,
or if jupyter_ydoc no longer has what it uses: a warning in the server's log names what changed,
and the server goes on with jupyter_ydoc's conversion. ``tests/extension/test_ynotebook.py`` pins
it against the installed release and real notebooks.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger("nbrelay.extension")

SMALL = 200  # cells below which jupyter_ydoc's own conversion is kept (it is quick there)
_STEP = 25  # cells converted between two of ``aget``'s pauses for the event loop
_NULL_ALLOWED = frozenset({"execution_count"})  # keys whose ``null`` is a notebook's own
_MARK = "_nbrelay_linear"


class _Converted:
    """A cell already converted to Python, in the shape ``_cell_to_py`` reads (``to_py``)."""

    __slots__ = ("value",)

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value

    def to_py(self) -> dict[str, Any]:
        return self.value


def _has_null(value: Any, key: str = "") -> bool:
    """Whether a ``null`` is found anywhere but under an execution count."""
    if value is None:
        return key not in _NULL_ALLOWED
    if isinstance(value, dict):
        return any(_has_null(v, k) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return False


def _nulls_allowed(text: str) -> bool:
    """Whether every ``null`` in a JSON text is an execution count's, counted on the text (one
    pass in C, where walking every decoded value took a third of a conversion).

    A key can only follow ``{`` or ``,`` in the JSON itself: inside a string its quote would be
    escaped. A ``null`` inside a string counts, and then each cell is looked at one by one."""
    allowed = sum(text.count(f'{before}"{key}":null') for key in _NULL_ALLOWED for before in "{,")
    return text.count("null") == allowed


def _unsure_cell(cell: Any, deduplicate: bool, ids: set[str], nulls: bool = True) -> bool:
    """Whether the JSON form of a cell could give another cell than jupyter_ydoc's conversion;
    ``ids`` are the ids of the cells before it; ``nulls``: whether it may hold a ``null`` that
    is not an execution count's."""
    if not isinstance(cell, dict) or (nulls and _has_null(cell)):
        return True
    cell_id = cell.get("id")
    if deduplicate and cell_id:
        if cell_id in ids:
            return True
        ids.add(cell_id)
    return False


def _decoded(text: str) -> Iterator[Any]:
    """The items of a JSON array, one at a time (so that converting them can pause between)."""
    decode = json.JSONDecoder().raw_decode
    at = text.find("[") + 1
    if not at:
        raise ValueError("not a JSON array")
    length = len(text)
    while True:
        while at < length and text[at] in " \t\r\n,":
            at += 1
        if at >= length or text[at] == "]":
            return
        item, at = decode(text, at)
        yield item


def linear(
    original: Callable[..., Iterator[dict[str, Any] | None]], cast_all: Callable[..., Any]
) -> Callable[..., Any]:
    """``YNotebook._get`` reading the cell array once, falling back to ``original``
    (``cast_all`` is jupyter_ydoc's: whole floats to ints, as it reads numbers from Yjs).

    The array's JSON form is taken in one call (a snapshot: changes made while the conversion
    pauses do not reach it; about 0.1 s at 10,000 cells with outputs, the longest the event loop
    is held), then decoded and converted a cell at a time, pausing every ``_STEP`` cells as
    jupyter_ydoc's ``aget`` expects."""

    def _get(self: Any, deduplicate: bool = True) -> Iterator[dict[str, Any] | None]:
        if len(self._ycells) < SMALL:
            yield from original(self, deduplicate)
            return
        text = str(self._ycells)  # pycrdt's JSON form: one walk of the array
        nulls = not _nulls_allowed(text)
        meta = self._ymeta.to_py()
        cast_all(meta, float, int)
        converted = []
        ids: set[str] = set()
        cells = _decoded(text)
        for index in itertools.count():
            if index % _STEP == 0:
                yield None
            try:
                cell = next(cells)
            except StopIteration:
                break
            except ValueError:  # not the JSON expected: jupyter_ydoc's own way, as always
                cell = None
            if _unsure_cell(cell, deduplicate, ids, nulls):
                yield from original(self, deduplicate)
                return
            converted.append(self._cell_to_py(_Converted(cell), meta))
        yield {
            "cells": converted,
            "metadata": meta.get("metadata", {}),
            "nbformat": int(meta.get("nbformat", 0)),
            "nbformat_minor": int(meta.get("nbformat_minor", 0)),
        }

    setattr(_get, _MARK, original)
    return _get


def _sample() -> dict[str, Any]:
    """A notebook of ``SMALL`` cells with what a conversion can get wrong."""
    cells: list[dict[str, Any]] = []
    for n in range(SMALL):
        kind = ("code", "markdown", "raw")[n % 3]
        cell: dict[str, Any] = {
            "cell_type": kind,
            "id": f"cell-{n}",
            "metadata": {"tags": ["t"], "n": n, "f": n + 0.5, "whole": 2.0, "deep": {"a": [1]}},
            "source": f"x = {n}  # é😀\n" * (n % 3),
        }
        if kind == "code":
            cell["execution_count"] = n if n % 2 else None
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": f"{n}\n"},
                {
                    "output_type": "execute_result",
                    "execution_count": n,
                    "data": {"text/plain": [f"{n}"], "application/json": {"v": [n, 1.5]}},
                    "metadata": {},
                },
            ]
        else:
            cell["attachments"] = {} if n % 2 else {"a.png": {"image/png": "iVBORw0K"}}
        cells.append(cell)
    return {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}, "v": 3.0},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def install() -> bool:
    """Give jupyter_ydoc's ``YNotebook`` the linear conversion (see the module docstring).

    Returns whether it is installed; a warning in the log says why when it is not.
    """
    try:
        from jupyter_ydoc import YNotebook
        from jupyter_ydoc.utils import cast_all
        from pycrdt import Doc
    except ImportError:
        return False
    current = getattr(YNotebook, "_get", None)
    if current is None or not hasattr(YNotebook, "_cell_to_py"):
        logger.warning(
            "nbrelay: jupyter_ydoc's YNotebook has no _get or _cell_to_py; rooms are saved "
            "with jupyter_ydoc's own conversion, which takes O(cells²) on big notebooks"
        )
        return False
    if hasattr(current, _MARK):
        return True
    candidate = linear(current, cast_all)
    try:
        document = YNotebook(Doc())
        document.set(_sample())
        expected = _drain(current(document, True))
        got = _drain(candidate(document, True))
    except Exception as exc:  # an unknown release: keep its own conversion
        logger.warning("nbrelay: the linear notebook conversion could not be checked (%s)", exc)
        return False
    if json.dumps(expected, sort_keys=True) != json.dumps(got, sort_keys=True):
        logger.warning(
            "nbrelay: the linear notebook conversion differs from this jupyter_ydoc's; rooms "
            "are saved with jupyter_ydoc's own conversion, which takes O(cells²) on big notebooks"
        )
        return False
    YNotebook._get = candidate  # type: ignore[method-assign]
    return True


def _drain(steps: Iterator[dict[str, Any] | None]) -> dict[str, Any] | None:
    *_, last = steps
    return last
