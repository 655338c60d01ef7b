"""Edits: four primitive changes every store can apply, and planners that compile tool requests.

Primitives are plain data, so the file store applies them to dicts and the live (RTC) store turns
them into granular CRDT operations. Each addresses cells by id, so a plan stays correct if other
cells move before it is applied:

* ``InsertCells(index, cells)``        new cells before ``index`` (``len`` appends)
* ``DeleteCells(ids)``
* ``UpdateCell(id, changes, remove, base_source)``  set or remove fields of one cell;
  ``base_source`` is the source the change was planned against (the live store rebases onto it);
  ``merge`` marks a whole new source the caller wrote against what it last read (see
  ``merge_read.merge_with_read``); ``intended`` is that source when it was merged with changes since
* ``MoveCells(ids, index)``            take the cells out, then insert them, in notebook order,
  before ``index`` of the remaining list
* ``SetMetadata(changes, remove)``     set or remove keys of the notebook's own metadata

Planners take a ``Notebook`` and tool arguments and return ``Plan(edits, touched)``; they never
change the notebook they are given.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbrelay.errors import InvalidArgument, act, cell_number
from nbrelay.notebook.model import (
    CELL_TYPES,
    Cell,
    IdFactory,
    Notebook,
    Step,
    new_cell,
    unique_id,
)
from nbrelay.notebook.output_text import holds_preview


@dataclass(frozen=True)
class InsertCells:
    index: int
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class DeleteCells:
    ids: tuple[str, ...]


@dataclass(frozen=True)
class UpdateCell:
    id: str
    changes: Mapping[str, Any] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    base_source: str | None = None
    merge: bool = False
    intended: str | None = None


@dataclass(frozen=True)
class MoveCells:
    ids: tuple[str, ...]
    index: int


@dataclass(frozen=True)
class SetMetadata:
    """Set (``changes``) or remove (``remove``) top-level keys of the notebook's metadata."""

    changes: Mapping[str, Any] = field(default_factory=dict)
    remove: tuple[str, ...] = ()


Edit = InsertCells | DeleteCells | UpdateCell | MoveCells | SetMetadata
_CELL_ID = operator.itemgetter("id")


@dataclass(frozen=True)
class Plan:
    """What a tool request compiles to: the edits, and the ids the agent should hear about."""

    edits: tuple[Edit, ...]
    touched: tuple[str, ...]
    detail: Mapping[str, Any] = field(default_factory=dict)


def apply(
    cells: Sequence[Cell], edits: Iterable[Edit], where: Callable[[str], int | None] | None = None
) -> list[Cell]:
    """Return a new cell list with the edits applied; unchanged cells are shared, not copied
    (edits of the notebook's metadata are left to ``apply_notebook``). ``where``: the position
    of a cell id in ``cells`` (a map made already), tried before looking through the cells."""
    out = cells if isinstance(cells, list) else list(cells)
    for edit in edits:
        if not isinstance(edit, SetMetadata):
            out = _apply_one(out, edit, where)  # a new list each time
    return list(out) if out is cells else out


def apply_metadata(metadata: Mapping[str, Any], edits: Iterable[Edit]) -> dict[str, Any]:
    """The notebook's metadata with the ``SetMetadata`` edits among ``edits`` applied."""
    out = dict(metadata)
    for edit in edits:
        if isinstance(edit, SetMetadata):
            out = {k: v for k, v in out.items() if k not in edit.remove}
            out.update(copy.deepcopy(dict(edit.changes)))
    return out


def apply_notebook(nb: Notebook, edits: Sequence[Edit]) -> Notebook:
    """A new notebook with the edits applied (cells and notebook metadata); ``nb`` is kept.

    What it knows of how the cells changed is kept for the next steps (``Notebook.derive``,
    ``Notebook.derive_spliced``): the few cells replaced in place, or the cells inserted,
    deleted or moved, so that none of them passes over the cells the edit left alone."""
    if any(isinstance(e, InsertCells | DeleteCells | MoveCells) for e in edits) and not any(
        isinstance(e, UpdateCell) for e in edits
    ):
        after = _splice_notebook(nb, edits)
    else:
        after = nb.with_cells(apply(nb.cells, edits, nb.position))
    if any(isinstance(e, SetMetadata) for e in edits):
        after.data["metadata"] = apply_metadata(nb.data.get("metadata") or {}, edits)
    updated: set[str] = set()
    for e in edits:
        if isinstance(e, UpdateCell):
            if "id" in e.changes or "id" in e.remove:
                return after
            updated.add(e.id)
        elif not isinstance(e, SetMetadata):  # cells inserted, deleted or moved
            return after
    after.derive(nb, True, sorted(i for i in map(nb.position, updated) if i is not None))
    return after


def _splice_notebook(nb: Notebook, edits: Sequence[Edit]) -> Notebook:
    """``nb`` with edits that insert, delete and move cells applied one by one, each new
    notebook told the splices that made it (positions found in the map of the one before)."""
    now = nb
    for edit in edits:
        if not isinstance(edit, InsertCells | DeleteCells | MoveCells):
            continue  # the notebook's metadata: see apply_metadata
        cells, steps = _splice_one(now.cells, edit, now.position)
        after = now.with_cells(cells)
        after.derive_spliced(now, steps, origin=nb)
        now = after
    return now if now is not nb else nb.with_cells(list(nb.cells))


def _splice_one(
    cells: list[Cell],
    edit: InsertCells | DeleteCells | MoveCells,
    where: Callable[[str], int | None],
) -> tuple[list[Cell], tuple[Step, ...]]:
    """An insert, delete or move applied to ``cells`` by slicing, and the splices it made."""
    if isinstance(edit, InsertCells):
        index = min(max(edit.index, 0), len(cells))
        new = [copy.deepcopy(c) for c in edit.cells]
        return [*cells[:index], *new, *cells[index:]], ((index, 0, new),)
    at = sorted({_position(cells, cid, where) for cid in edit.ids})
    out = list(cells)
    steps: list[Step] = []
    gone = 0  # cells the runs before this one took out, shifting it left
    for start, count in _runs(at):
        steps.append((start - gone, count, []))
        gone += count
    for start, count in reversed(_runs(at)):
        del out[start : start + count]
    if isinstance(edit, MoveCells):
        moved = [cells[i] for i in at]
        index = min(max(edit.index, 0), len(out))
        out[index:index] = moved
        steps.append((index, 0, moved))
    return out, tuple(steps)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Sorted positions as runs of consecutive ones: (first, how many)."""
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((p, 1))
    return runs


def plan_notebook_metadata(
    nb: Notebook, metadata: Mapping[str, Any], *, touched: Sequence[str] = ()
) -> Plan:
    """Merge keys into the notebook's own metadata (a None value deletes the key)."""
    current = nb.data.get("metadata") or {}
    changes = {k: v for k, v in metadata.items() if v is not None and current.get(k) != v}
    remove = tuple(k for k, v in metadata.items() if v is None and k in current)
    if not changes and not remove:
        return Plan(edits=(), touched=tuple(touched))
    return Plan(edits=(SetMetadata(changes, remove),), touched=tuple(touched))


def _position(cells: list[Cell], cid: str, where: Callable[[str], int | None] | None) -> int:
    """The position of the cell ``cid``: ``where``'s answer when it holds, else a pass over
    the cells (a loop in C)."""
    at = where(cid) if where is not None else None
    if at is not None and at < len(cells) and cells[at]["id"] == cid:
        return at
    at = scan_for(cells, cid)
    if at is not None:
        return at
    raise InvalidArgument(
        f"cell {cid!r} is no longer in the notebook.",
        hint=f"Someone else deleted it. {act('read_again')}",
    )


def scan_for(cells: list[Cell], cid: str) -> int | None:
    """The position of the cell ``cid`` found by a pass over all cells (a loop in C)."""
    with contextlib.suppress(ValueError):
        return list(map(_CELL_ID, cells)).index(cid)
    return None


def _apply_one(
    cells: list[Cell], edit: Edit, where: Callable[[str], int | None] | None
) -> list[Cell]:
    if isinstance(edit, InsertCells):
        index = min(max(edit.index, 0), len(cells))
        return cells[:index] + [copy.deepcopy(c) for c in edit.cells] + cells[index:]
    if isinstance(edit, DeleteCells):
        gone = set(edit.ids)
        for cid in gone:
            _position(cells, cid, where)
        return [c for c in cells if c["id"] not in gone]
    if isinstance(edit, UpdateCell):
        i = _position(cells, edit.id, where)
        cell = {k: v for k, v in cells[i].items() if k not in edit.remove}
        cell.update(copy.deepcopy(dict(edit.changes)))
        out = list(cells)
        out[i] = cell
        return out
    if isinstance(edit, SetMetadata):  # the notebook's metadata: see apply_metadata
        return cells
    moving = set(edit.ids)
    for cid in moving:
        _position(cells, cid, where)
    moved = [c for c in cells if c["id"] in moving]
    rest = [c for c in cells if c["id"] not in moving]
    index = min(max(edit.index, 0), len(rest))
    return rest[:index] + moved + rest[index:]


# ---------------------------------------------------------------------------------------------
# Planners


@dataclass(frozen=True)
class CellSpec:
    """A cell to create: its type, source and optional metadata."""

    cell_type: str = "code"
    source: str = ""
    metadata: Mapping[str, Any] | None = None


def _check_type(cell_type: str) -> None:
    if cell_type not in CELL_TYPES:
        raise InvalidArgument(
            f"cell type {cell_type!r} is not one of code, markdown, raw.",
            hint='Use "code", "markdown" or "raw".',
        )


def plan_insert(nb: Notebook, index: int, specs: Sequence[CellSpec], id_factory: IdFactory) -> Plan:
    """Insert new cells before ``index`` (already resolved; ``len(cells)`` appends)."""
    if not specs:
        raise InvalidArgument("no cells to insert.", hint="Give at least one cell.")
    existing = set(nb.ids)
    new: list[Cell] = []
    for spec in specs:
        _check_type(spec.cell_type)
        metadata = dict(spec.metadata or {})
        new.append(new_cell(spec.cell_type, spec.source, unique_id(existing, id_factory), metadata))
    ids = tuple(c["id"] for c in new)
    return Plan(edits=(InsertCells(index, tuple(new)),), touched=ids)


def plan_set_source(
    nb: Notebook, index: int, source: str, *, clear_outputs: bool = False, merge: bool = True
) -> Plan:
    """Replace a cell's whole source. With ``merge`` (a source the caller wrote, rather than one
    derived from the current text) the store merges it with changes made since the caller's
    last read of the cell (``merge_with_read``), and a source that holds the cell's shortened
    preview (what an overview of the notebook shows of it) is refused: written back, it would
    delete the rest of the cell."""
    cell = nb.cells[index]
    changes: dict[str, Any] = {"source": source}
    if clear_outputs and cell.get("cell_type") == "code":
        changes.update(outputs=[], execution_count=None)
    old = cell.get("source", "")
    if merge and isinstance(old, str) and holds_preview(source, old):
        raise InvalidArgument(
            f"the new source of cell {cell_number(index)} holds the shortened preview of the "
            "cell (its text cut off with '…'), not its whole text: writing it would delete the "
            "rest of the cell. Nothing was changed.",
            hint=act("reread_cell"),
        )
    return Plan(
        edits=(UpdateCell(cell["id"], changes, base_source=old, merge=merge),),
        touched=(cell["id"],),
        detail={"diff": unified_diff(old, source)},
    )


def plan_find_replace(
    nb: Notebook, index: int, old: str, new: str, *, replace_all: bool = False
) -> Plan:
    """Replace a literal substring of one cell's source; ambiguity is an error unless replace_all."""
    cell = nb.cells[index]
    source: str = cell.get("source", "")
    if not old:
        raise InvalidArgument(
            "find text is empty.", hint="Give the exact text to replace, or pass source= instead."
        )
    count = source.count(old)
    if count == 0:
        hint = "Read the cell and copy the text exactly (whitespace included)."
        near = difflib.get_close_matches(old.strip(), source.splitlines(), n=1, cutoff=0.6)
        if near:
            hint += f" A similar line is: {near[0].strip()!r}."
        raise InvalidArgument(
            f"the text to find does not occur in cell {cell_number(index)}.", hint=hint
        )
    if count > 1 and not replace_all:
        raise InvalidArgument(
            f"the text to find occurs {count} times in cell {cell_number(index)}.",
            hint="Include more surrounding text so it occurs once, or pass replace_all=true.",
        )
    updated = source.replace(old, new) if replace_all else source.replace(old, new, 1)
    plan = plan_set_source(nb, index, updated, merge=False)
    return Plan(
        edits=plan.edits,
        touched=plan.touched,
        detail={**plan.detail, "replacements": count if replace_all else 1},
    )


def plan_set_type(nb: Notebook, index: int, cell_type: str) -> Plan:
    _check_type(cell_type)
    cell = nb.cells[index]
    if cell.get("cell_type") == cell_type:
        return Plan(edits=(), touched=(cell["id"],))
    changes: dict[str, Any] = {"cell_type": cell_type}
    remove: tuple[str, ...] = ()
    if cell_type == "code":
        changes.update(outputs=[], execution_count=None)
        remove = ("attachments",)
    else:
        remove = ("outputs", "execution_count")
    return Plan(edits=(UpdateCell(cell["id"], changes, remove),), touched=(cell["id"],))


def plan_metadata(
    nb: Notebook,
    index: int,
    *,
    metadata: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    add_tags: Sequence[str] = (),
    remove_tags: Sequence[str] = (),
) -> Plan:
    """Merge keys into a cell's metadata (a None value deletes the key) and edit its tags."""
    cell = nb.cells[index]
    meta = copy.deepcopy(dict(cell.get("metadata") or {}))
    for key, value in (metadata or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    if tags is not None or add_tags or remove_tags:
        current = list(tags) if tags is not None else list(meta.get("tags") or [])
        for t in add_tags:
            if t not in current:
                current.append(t)
        current = [t for t in current if t not in set(remove_tags)]
        bad = [t for t in current if not isinstance(t, str) or not t or "," in t]
        if bad:
            raise InvalidArgument(
                f"tags {bad!r} are not valid: a tag is a non-empty string without commas.",
                hint='Give tags like ["parameters", "skip-execution"].',
            )
        if current:
            meta["tags"] = current
        else:
            meta.pop("tags", None)
    return Plan(edits=(UpdateCell(cell["id"], {"metadata": meta}),), touched=(cell["id"],))


def plan_delete(nb: Notebook, indexes: Sequence[int]) -> Plan:
    ids = tuple(nb.cells[i]["id"] for i in indexes)
    return Plan(edits=(DeleteCells(ids),), touched=ids)


def plan_move(nb: Notebook, indexes: Sequence[int], to: int) -> Plan:
    """Move cells (kept in notebook order) so the first lands at index ``to`` of the result."""
    n = len(nb.cells)
    k = len(indexes)
    if not 0 <= to <= n - k:
        raise InvalidArgument(
            f"cannot move {k} cell(s) to index {cell_number(to)}: with {n} cells the block can "
            f"start at {cell_number(0)}-{cell_number(n - k)}.",
            hint="`to` is the index the first moved cell will have after the move.",
        )
    ids = tuple(nb.cells[i]["id"] for i in indexes)
    return Plan(edits=(MoveCells(ids, to),), touched=ids)


def plan_merge(
    nb: Notebook, indexes: Sequence[int], separator: str = "\n", cell_type: str | None = None
) -> Plan:
    """Merge adjacent cells into the first one; code outputs are cleared (the code changed).

    The merged cell keeps the first cell's type unless ``cell_type`` is given.
    """
    if len(indexes) < 2:
        raise InvalidArgument(
            "merging needs at least two cells.", hint='Give a range such as "3:5" or two indexes.'
        )
    if list(indexes) != list(range(indexes[0], indexes[0] + len(indexes))):
        raise InvalidArgument(
            f"cells {', '.join(cell_number(i) for i in indexes)} are not adjacent.",
            hint="Move them next to each other first with move_cells, then merge.",
        )
    cells = [nb.cells[i] for i in indexes]
    first = cells[0]
    parts = [c.get("source", "") for c in cells]
    merged = separator.join(p[:-1] if p.endswith("\n") else p for p in parts)
    changes: dict[str, Any] = {"source": merged}
    remove: tuple[str, ...] = ()
    if cell_type is not None and cell_type != first.get("cell_type"):
        _check_type(cell_type)
        changes["cell_type"] = cell_type
        remove = ("attachments",) if cell_type == "code" else ("outputs", "execution_count")
    if (cell_type or first.get("cell_type")) == "code":
        changes.update(outputs=[], execution_count=None)
    rest = tuple(c["id"] for c in cells[1:])
    update = UpdateCell(first["id"], changes, remove, base_source=first.get("source", ""))
    return Plan(
        edits=(update, DeleteCells(rest)),
        touched=(first["id"], *rest),
        detail={"kept": first["id"], "removed": list(rest)},
    )


def plan_split(nb: Notebook, index: int, lines: Sequence[int], id_factory: IdFactory) -> Plan:
    """Split a cell before each given 0-based line; the first part keeps the id, outputs clear."""
    cell = nb.cells[index]
    source: str = cell.get("source", "")
    src_lines = source.splitlines(True)
    points = sorted(set(lines))
    if not points or points[0] <= 0 or points[-1] >= len(src_lines):
        raise InvalidArgument(
            f"split lines {list(lines)} are not inside cell {index}, which has "
            f"{len(src_lines)} line(s); split points can be 1-{max(len(src_lines) - 1, 0)}.",
            hint="A split point is the 0-based line that starts a new cell.",
        )
    bounds = [0, *points, len(src_lines)]
    pieces = ["".join(src_lines[a:b]) for a, b in itertools.pairwise(bounds)]
    pieces = [p[:-1] if p.endswith("\n") else p for p in pieces]
    existing = set(nb.ids)
    new = tuple(
        new_cell(
            cell["cell_type"],
            p,
            unique_id(existing, id_factory),
            {k: v for k, v in (cell.get("metadata") or {}).items() if k != "tags"},
        )
        for p in pieces[1:]
    )
    changes: dict[str, Any] = {"source": pieces[0]}
    if cell.get("cell_type") == "code":
        changes.update(outputs=[], execution_count=None)
    first = UpdateCell(cell["id"], changes, base_source=source)
    ids = (cell["id"], *(c["id"] for c in new))
    return Plan(edits=(first, InsertCells(index + 1, new)), touched=ids)


def plan_clear_outputs(nb: Notebook, indexes: Sequence[int]) -> Plan:
    edits: list[Edit] = []
    touched: list[str] = []
    for i in indexes:
        cell = nb.cells[i]
        if cell.get("cell_type") != "code":
            continue
        touched.append(cell["id"])
        if cell.get("outputs") or cell.get("execution_count") is not None:
            edits.append(UpdateCell(cell["id"], {"outputs": [], "execution_count": None}))
    return Plan(edits=tuple(edits), touched=tuple(touched))


def unified_diff(
    old: str, new: str, *, context: int = 2, labels: tuple[str, str] = ("before", "after")
) -> str:
    """A compact unified diff of two cell sources (empty if equal)."""
    if old == new:
        return ""
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), *labels, n=context, lineterm=""
    )
    return "\n".join(lines)


def changed_cells(nb: Notebook, edits: Iterable[Edit]) -> list[Cell]:
    """The cells of ``nb`` that ``edits`` inserted or updated (the ones to validate), in order."""
    ids: set[str] = set()
    for e in edits:
        if isinstance(e, InsertCells):
            ids.update(str(c["id"]) for c in e.cells)
        elif isinstance(e, UpdateCell):
            ids.add(e.id)
    found = (nb.position(cid) for cid in ids)
    return [nb.cells[i] for i in sorted(i for i in found if i is not None)]
