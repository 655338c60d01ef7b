"""The notebook as a Yjs document (jupyter_ydoc's shape) and back, and edits as CRDT operations.

Pure data: a ``pycrdt`` document is an in-memory CRDT (no sockets, files or event loop); the wire
protocol that syncs it with a Jupyter Server lives in ``stores.yprotocol``. The rules these
functions keep (each one learnt from a way RTC clients lose data):

* **Granular operations only.** Inserted cells, deleted cells, minimal text changes for sources
  (rebased onto the text as it is now: ``notebook.rebase``), per-key metadata changes, appended
  outputs. Moves and type changes re-create the cells concerned, as JupyterLab itself does.
* **One change to the list of cells per transaction** (one run of inserted or of deleted cells;
  content changes ride along): see ``apply_edits``.
* **Never ``ycell["source"] += ...``** (pycrdt re-assigns the integrated text, emptying it): text
  grows through a local variable.
* Yjs stores every number as a float; integral ones come back as ints.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbrelay.errors import ConflictError, act
from nbrelay.notebook.edits import (
    DeleteCells,
    Edit,
    InsertCells,
    MoveCells,
    SetMetadata,
    UpdateCell,
    apply_metadata,
)
from nbrelay.notebook.model import Cell, Notebook, from_dict
from nbrelay.notebook.rebase import apply_text_ops, rebase_text
from nbrelay.notebook.validate import CURRENT_MINOR as _CURRENT_MINOR

if TYPE_CHECKING:
    import pycrdt


def ints(value: Any) -> Any:
    """Yjs stores every number as a float; give integral ones back as ints (in place)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, float) and v.is_integer():
                value[k] = int(v)
            elif isinstance(v, dict | list):
                ints(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, float) and v.is_integer():
                value[i] = int(v)
            elif isinstance(v, dict | list):
                ints(v)
    return value


def cell_from_y(raw: Any) -> Cell | None:
    """One Y cell (already ``to_py()``-ed) as an nbformat cell dict."""
    if not isinstance(raw, dict):
        return None
    cell: Cell = ints(raw)
    cell.pop("execution_state", None)
    if cell.get("cell_type") in ("markdown", "raw") and not cell.get("attachments"):
        cell.pop("attachments", None)
    if cell.get("cell_type") == "code":
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)
    cell.setdefault("metadata", {})
    cell.setdefault("source", "")
    return cell


def youtput(output: Mapping[str, Any]) -> pycrdt.Map[Any]:
    import pycrdt

    value = copy.deepcopy(dict(output))
    if value.get("output_type") == "stream":
        text = value.get("text", "")
        value["text"] = pycrdt.Text(text if isinstance(text, str) else "".join(text))
    return pycrdt.Map(value)


def ycell(cell: Mapping[str, Any], *, run_state: bool = True) -> pycrdt.Map[Any]:
    """A new Y cell for an nbformat cell dict, shaped as JupyterLab makes them: a code cell
    with its run state (``execution_state``) unless ``run_state`` is false (a server on
    jupyter_ydoc before 3.0 would write that key into the file, which nbformat then rejects)."""
    import pycrdt

    value = copy.deepcopy(dict(cell))
    value["source"] = pycrdt.Text(str(value.get("source", "")))
    value["metadata"] = pycrdt.Map(dict(value.get("metadata") or {}))
    if value.get("cell_type") == "code":
        value["outputs"] = pycrdt.Array([youtput(o) for o in value.get("outputs") or []])
        if run_state:
            value.setdefault("execution_state", "idle")
    if not run_state:
        value.pop("execution_state", None)
    return pycrdt.Map(value)


def set_ytext(ytext: pycrdt.Text, base: str | None, new: str) -> None:
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


def set_ymap(ycell_: pycrdt.Map[Any], key: str, value: Mapping[str, Any]) -> None:
    """Make a cell's Y map field (metadata) equal ``value`` with per-key changes."""
    import pycrdt

    current = ycell_.get(key)
    if not isinstance(current, pycrdt.Map):
        ycell_[key] = pycrdt.Map(copy.deepcopy(dict(value)))
        return
    old = ints(current.to_py() or {})
    for k in [k for k in old if k not in value]:
        del current[k]
    for k, v in value.items():
        if k not in old or old[k] != v:
            current[k] = copy.deepcopy(v)


def set_youtputs(ycell_: pycrdt.Map[Any], outputs: Sequence[Mapping[str, Any]]) -> None:
    """Make a cell's outputs equal ``outputs``, keeping the common start and growing the last
    stream's text in place (so a running cell's output streams in as small changes)."""
    import pycrdt

    yarr = ycell_.get("outputs")
    if not isinstance(yarr, pycrdt.Array):
        ycell_["outputs"] = pycrdt.Array([youtput(o) for o in outputs])
        return
    old = [ints(o.to_py()) if isinstance(o, pycrdt.Map) else o for o in yarr]
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
        yarr.extend([youtput(o) for o in outputs[keep:]])


def notebook_from_doc(ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any], *, name: str) -> Notebook:
    """The room's notebook as an nbformat dict (ids as in the room)."""
    try:
        # One JSON dump made by the CRDT library itself (Rust): an order of magnitude faster
        # than walking a 200-cell document item by item in Python.
        meta = ints(json.loads(str(ymeta)) or {})
        raw = json.loads(str(ycells))
    except ValueError:  # a value JSON cannot hold (binary): walk the document instead
        meta = ints(ymeta.to_py() or {})
        raw = [y.to_py() for y in ycells]
    cells = [c for c in (cell_from_y(y) for y in raw or []) if c is not None]
    minor = meta.get("nbformat_minor")
    data = {
        "cells": cells,
        "metadata": meta.get("metadata") or {},
        "nbformat": int(meta.get("nbformat") or 4),
        "nbformat_minor": int(minor) if isinstance(minor, int) else 5,
    }
    # A Yjs document holds Rust strings, which cannot hold unpaired surrogates: nothing to scrub.
    return from_dict(data, name=name, scrub=False)


def _index(order: list[str], cid: str) -> int:
    try:
        return order.index(cid)
    except ValueError:
        raise ConflictError(
            f"cell {cid!r} is no longer in the notebook (someone deleted it a moment ago).",
            current="",
            hint=act("read_again"),
        ) from None


class _Transactions:
    """The transactions of one ``apply_edits``: content changes join the open transaction; a
    change to the list of cells opens a new one if the open one changed the list already.
    Without a document, the caller's transaction holds everything. ``run_states``: whether new
    code cells get a run state (``ycell``)."""

    def __init__(self, doc: pycrdt.Doc[Any] | None, *, run_states: bool = True) -> None:
        self._doc = doc
        self.run_states = run_states
        self._open: Any = None
        self._listed = False

    def content(self) -> None:
        if self._open is None:
            self._begin()

    def listing(self) -> None:
        if self._open is None or self._listed:
            self.close()
            self._begin()
        self._listed = True

    def _begin(self) -> None:
        if self._doc is None:
            return
        self._open = self._doc.transaction(origin="nbrelay")
        self._open.__enter__()
        self._listed = False

    def close(self) -> None:
        txn, self._open = self._open, None
        if txn is not None:
            txn.__exit__(None, None, None)


def _runs(indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indexes as runs of consecutive ones: [(start, stop), ...], last run first."""
    runs: list[tuple[int, int]] = []
    for i in sorted(set(indexes)):
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs[::-1]


def _delete(
    ycells: pycrdt.Array[Any], order: list[str], ids: Iterable[str], tx: _Transactions
) -> None:
    """Delete cells by id, each run of neighbours in a transaction of its own (last run first,
    so the indexes of the runs before it hold)."""
    indexes = [_index(order, cid) for cid in set(ids)]  # every id checked before any change
    for start, stop in _runs(indexes):
        tx.listing()
        del ycells[start:stop]
        del order[start:stop]


def _insert(
    ycells: pycrdt.Array[Any],
    order: list[str],
    at: int,
    cells: Sequence[Mapping[str, Any]],
    tx: _Transactions,
) -> None:
    tx.listing()
    for k, cell in enumerate(cells):
        ycells.insert(at + k, ycell(cell, run_state=tx.run_states))
        order.insert(at + k, str(cell.get("id")))


def apply_edit(ycells: pycrdt.Array[Any], order: list[str], edit: Edit) -> None:
    """Apply one edit in the caller's transaction (``apply_edits`` makes its own)."""
    _apply(ycells, order, edit, _Transactions(None))


def _apply(ycells: pycrdt.Array[Any], order: list[str], edit: Edit, tx: _Transactions) -> None:
    if isinstance(edit, InsertCells):
        _insert(ycells, order, min(max(edit.index, 0), len(order)), edit.cells, tx)
    elif isinstance(edit, DeleteCells):
        _delete(ycells, order, edit.ids, tx)
    elif isinstance(edit, UpdateCell):
        _update(ycells, order, edit, tx)
    elif isinstance(edit, MoveCells):
        _move(ycells, order, edit, tx)


# The cell jupyter_ydoc's ``YNotebook.set`` gives a notebook that has none when its room loads it
# (and JupyterLab puts in a notebook a person empties), so that a person has a cell to type in.
# Its metadata says ``trusted``, which no file holds (nbformat strips it on write): so a room's
# only cell of exactly this shape is that placeholder, not the notebook's.
PLACEHOLDER: dict[str, Any] = {
    "cell_type": "code",
    "source": "",
    "outputs": [],
    "execution_count": None,
    "metadata": {"trusted": True},
}


def placeholder(ycells: pycrdt.Array[Any]) -> str | None:
    """The id of the document's only cell when it is the untouched placeholder (see
    ``PLACEHOLDER``); None when there is another cell, or someone typed in it, ran it …"""
    if len(ycells) != 1:
        return None
    cell = py_cell(ycells[0])
    rest = set(cell) - set(PLACEHOLDER) - {"id", "execution_state", "attachments"}
    if rest or cell.get("attachments") or not isinstance(cell.get("id"), str):
        return None
    if any(cell.get(k) != v for k, v in PLACEHOLDER.items()):
        return None
    return str(cell["id"])


def py_cell(y: Any) -> dict[str, Any]:
    raw = y.to_py()
    return ints(raw) if isinstance(raw, dict) else {}


def _update(
    ycells: pycrdt.Array[Any], order: list[str], edit: UpdateCell, tx: _Transactions
) -> None:
    import pycrdt

    i = _index(order, edit.id)
    target: pycrdt.Map[Any] = ycells[i]
    changes = dict(edit.changes)
    new_type = changes.get("cell_type")
    if new_type is not None and new_type != target.get("cell_type"):
        # A new type is a new cell for JupyterLab: re-create it (same id), as JupyterLab does.
        cell = py_cell(target)
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
        _delete(ycells, order, [edit.id], tx)
        _insert(ycells, order, i, [cell], tx)
        return
    tx.content()
    for key, value in changes.items():
        if key == "source":
            ytext = target.get("source")
            if isinstance(ytext, pycrdt.Text):
                # A merged edit applies the caller's own change (read source → its source),
                # rebased onto the text as it is now, never a rewrite of others' typing.
                wanted = str(value) if edit.intended is None else edit.intended
                set_ytext(ytext, edit.base_source, wanted)
            else:
                target["source"] = pycrdt.Text(str(value))
        elif key == "metadata":
            set_ymap(target, "metadata", value or {})
        elif key == "outputs":
            set_youtputs(target, value or [])
        else:
            current: Any = target.get(key)
            if isinstance(current, pycrdt.Map | pycrdt.Array | pycrdt.Text):
                current = current.to_py()
            if ints({"v": current})["v"] != value or key not in target:
                target[key] = copy.deepcopy(value)
    for key in edit.remove:
        if key in target:
            del target[key]


def _move(ycells: pycrdt.Array[Any], order: list[str], edit: MoveCells, tx: _Transactions) -> None:
    moving = set(edit.ids)
    for cid in moving:
        _index(order, cid)
    cells = [py_cell(ycells[i]) for i, cid in enumerate(order) if cid in moving]
    _delete(ycells, order, moving, tx)
    _insert(ycells, order, min(max(edit.index, 0), len(order)), cells, tx)


def apply_edits(
    doc: pycrdt.Doc[Any],
    ycells: pycrdt.Array[Any],
    order: list[str],
    edits: Iterable[Edit],
    ymeta: pycrdt.Map[Any] | None = None,
    *,
    run_states: bool = True,
) -> None:
    """Apply primitive edits as granular operations. ``order`` is the ids of the cells as the
    snapshot gave them (Y index = list index); it is kept in step.

    Each transaction changes the list of cells in one place at most: one run of inserted or of
    deleted cells (a move is its deletions, then its insertion; content changes join the open
    transaction). JupyterLab applies a remote transaction to its cell widgets one run at a time,
    and after each run puts the person's active cell at its index in the *final* list: with two
    runs above the person's cell (a move, a type change, two separate deletions), that index
    names another widget in between, and the rest of their typing lands at the start of another
    cell, or in command mode once the cell they were in is disposed. A transaction of one run is
    in step after its only run, for every person wherever their cell is.

    With the document's ``ymeta``, the notebook's metadata edits are applied too, and a
    notebook older than nbformat 4.5 becomes 4.5 (the room then saves its cell ids), as every
    store writes it. ``run_states`` false: new code cells get no run state (see ``ycell``)."""
    import pycrdt

    tx = _Transactions(doc, run_states=run_states)
    try:
        for edit in edits:
            if not isinstance(edit, SetMetadata):
                _apply(ycells, order, edit, tx)
                continue
            if ymeta is None:
                raise TypeError("an edit of the notebook's metadata needs the document's meta")
            tx.content()
            current = ymeta.get("metadata")
            meta = ints(current.to_py() or {}) if isinstance(current, pycrdt.Map) else {}
            set_ymap(ymeta, "metadata", apply_metadata(meta, (edit,)))
        minor = ymeta.get("nbformat_minor") if ymeta is not None else None
        if ymeta is not None and isinstance(minor, int | float) and minor < _CURRENT_MINOR:
            tx.content()
            ymeta["nbformat_minor"] = _CURRENT_MINOR
    finally:
        tx.close()


def replace_all(
    doc: pycrdt.Doc[Any],
    ymeta: pycrdt.Map[Any],
    ycells: pycrdt.Array[Any],
    nb: Notebook,
    *,
    run_states: bool = True,
) -> None:
    """Make the document hold ``nb`` (create with overwrite): cells deleted and inserted, the
    notebook metadata set key by key, in one transaction (``run_states``: see ``ycell``)."""
    import pycrdt

    with doc.transaction(origin="nbrelay"):
        if len(ycells):
            del ycells[0 : len(ycells)]
        ycells.extend([ycell(c, run_state=run_states) for c in nb.cells])
        ymeta["nbformat"] = int(nb.data.get("nbformat", 4))
        # Stored as 4.5 at least, with cell ids, as model.serialize writes every notebook.
        ymeta["nbformat_minor"] = max(_CURRENT_MINOR, int(nb.data.get("nbformat_minor", 5)))
        meta = ymeta.get("metadata")
        if isinstance(meta, pycrdt.Map):
            set_ymap(ymeta, "metadata", nb.data.get("metadata") or {})
        else:
            ymeta["metadata"] = pycrdt.Map(copy.deepcopy(nb.data.get("metadata") or {}))


def set_run_states(
    doc: pycrdt.Doc[Any],
    ycells: pycrdt.Array[Any],
    order: Sequence[str],
    states: Mapping[str, str],
) -> None:
    """Set JupyterLab's run state (``execution_state``: "running" shows ``[*]``, "idle" the
    count) of code cells by id, in one transaction, as JupyterLab does while it runs a cell. A
    cell that already shows its state, a cell that is not code, and an id not in ``order`` (the
    document's ids, as the snapshot gave them) are left alone: nothing changes, nothing is sent.
    The state lives in the document only; ``cell_from_y`` leaves it out of the notebook."""
    where = {cid: i for i, cid in enumerate(order) if cid in states}
    changes = []
    for cid, i in where.items():
        target: pycrdt.Map[Any] = ycells[i]
        if target.get("cell_type") == "code" and target.get("execution_state") != states[cid]:
            changes.append((target, states[cid]))
    if not changes:
        return
    with doc.transaction(origin="nbrelay"):
        for target, state in changes:
            target["execution_state"] = state
