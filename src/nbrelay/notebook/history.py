"""Edit history for undo: what one change did, and the edits that revert it.

A ``Change`` records, by cell id, the cells a change added, removed, modified and moved. Undo
turns it back into primitive edits against the notebook as it is *now*, so changes other people
made to other cells are kept; if a cell the change touched was changed again since, undo refuses.
"""

from __future__ import annotations

import bisect
import contextlib
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbrelay.errors import UndoRefused
from nbrelay.notebook.edits import (
    DeleteCells,
    Edit,
    InsertCells,
    MoveCells,
    SetMetadata,
    UpdateCell,
)
from nbrelay.notebook.model import Cell, Step

_ID = operator.itemgetter("id")

# What "changed since" compares: outputs and counts may change by running, which undo ignores.
_CONTENT_KEYS = ("cell_type", "source", "metadata", "attachments")


@dataclass(frozen=True)
class Change:
    label: str
    before_order: tuple[str, ...]
    before: Mapping[str, Cell]  # modified and removed cells, as they were
    after: Mapping[str, Cell]  # modified and added cells, as they became
    added: tuple[str, ...]
    removed: tuple[str, ...]
    moved: tuple[str, ...]
    # The notebook's own metadata either side, when the change set or removed keys of it.
    metadata: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None

    @property
    def empty(self) -> bool:
        return not (self.before or self.after or self.moved or self.metadata)


def _content(cell: Cell) -> tuple[Any, ...]:
    return tuple(cell.get(k) for k in _CONTENT_KEYS)


def _longest_increasing(seq: Sequence[int]) -> set[int]:
    """Indexes (into ``seq``) of one longest strictly increasing subsequence."""
    tails: list[int] = []
    tail_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        j = bisect.bisect_left(tails, v)
        if j == len(tails):
            tails.append(v)
            tail_idx.append(i)
        else:
            tails[j] = v
            tail_idx[j] = i
        prev[i] = tail_idx[j - 1] if j else -1
    keep: set[int] = set()
    k = tail_idx[-1] if tail_idx else -1
    while k != -1:
        keep.add(k)
        k = prev[k]
    return keep


def record(
    label: str,
    before: Sequence[Cell],
    after: Sequence[Cell],
    metadata: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    *,
    order: Sequence[str] | None = None,
    changed: Sequence[int] | None = None,
    spliced: Sequence[Step] | None = None,
) -> Change:
    """Describe the change from ``before`` to ``after`` (cells that are identical objects are
    unchanged, which is how ``edits.apply`` shares them); ``metadata`` is the notebook's own
    metadata before and after, if the change touched it. ``order``: the ids of ``before``;
    ``changed``: the only positions whose cells are not the same objects; ``spliced``: the
    splices that made ``after`` from ``before`` (cells inserted, deleted or moved); each when
    already known (``Notebook.ids``, ``Notebook.changed_from``, ``Notebook.spliced_from``).

    A change that kept every cell in place (the cells it made have the ids of the cells they
    replaced) is found by loops in C over the cells (none when ``changed`` is given), and
    Python looks at the changed ones only; so does a change whose splices are given: only the
    cells the splices took out and put in are compared (``_hunks``). Otherwise the two lists
    are compared whole (``compare``).
    """
    metadata = metadata if metadata is not None and metadata[0] != metadata[1] else None
    b_order = tuple(order) if order is not None else tuple(map(_ID, before))
    if spliced is not None:
        hunks = _hunks(spliced)
        diffs = [_diff(before[b0:b1], after[a0:a1]) for b0, b1, a0, a1 in hunks]
        if len(diffs) > 1 and {i for d in diffs for i in d.added} & {
            i for d in diffs for i in d.removed
        }:  # a cell taken out in one place and put in at another: moved, seen in one window
            b0, b1, a0, a1 = _window(spliced)
            diffs = [_diff(before[b0:b1], after[a0:a1])]
        return _change(label, b_order, diffs, metadata)
    if len(before) == len(after):
        at = list(changed) if changed is not None else _true_at(replaced_at(before, after))
        if all(before[k]["id"] == after[k]["id"] for k in at):
            modified = [b_order[k] for k in at if before[k] != after[k]]
            return Change(
                label=label,
                before_order=b_order,
                before={before[k]["id"]: before[k] for k in at if b_order[k] in modified},
                after={after[k]["id"]: after[k] for k in at if b_order[k] in modified},
                added=(),
                removed=(),
                moved=(),
                metadata=metadata,
            )
    return _change(label, b_order, [compare(before, after)], metadata)


@dataclass(frozen=True)
class _Diff:
    """How two runs of cells differ, by id (see ``record``)."""

    added: list[str]
    removed: list[str]
    modified: list[str]
    moved: list[str]
    before: dict[str, Cell]
    after: dict[str, Cell]


def compare(before: Sequence[Cell], after: Sequence[Cell]) -> _Diff:
    """The difference of two whole cell lists (a pass over all their cells)."""
    return _diff(before, after)


def _diff(before: Sequence[Cell], after: Sequence[Cell]) -> _Diff:
    b_ids = [c["id"] for c in before]
    a_ids = [c["id"] for c in after]
    b_by = {c["id"]: c for c in before}
    a_by = {c["id"]: c for c in after}
    common = [i for i in b_ids if i in a_by]
    pos = {cid: k for k, cid in enumerate(a_ids)}
    keep = _longest_increasing([pos[i] for i in common])
    return _Diff(
        added=[i for i in a_ids if i not in b_by],
        removed=[i for i in b_ids if i not in a_by],
        modified=[i for i in a_ids if i in b_by and a_by[i] is not b_by[i] and a_by[i] != b_by[i]],
        moved=[cid for k, cid in enumerate(common) if k not in keep],
        before=b_by,
        after=a_by,
    )


def _change(
    label: str,
    b_order: tuple[str, ...],
    diffs: Sequence[_Diff],
    metadata: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
) -> Change:
    """The change whose cells differ as ``diffs`` say, window after window, in order."""
    modified = [i for d in diffs for i in d.modified]
    added = [i for d in diffs for i in d.added]
    removed = [i for d in diffs for i in d.removed]
    b_by = {i: c for d in diffs for i, c in d.before.items()}
    a_by = {i: c for d in diffs for i, c in d.after.items()}
    return Change(
        label=label,
        before_order=b_order,
        before={i: b_by[i] for i in (*modified, *removed)},
        after={i: a_by[i] for i in (*modified, *added)},
        added=tuple(added),
        removed=tuple(removed),
        moved=tuple(i for d in diffs for i in d.moved),
        metadata=metadata,
    )


def _hunks(steps: Sequence[Step]) -> list[tuple[int, int, int, int]]:
    """Where ``steps`` changed the cells, as (start, end) before and (start, end) after: one
    window per step when each lies past the one before (cells deleted or inserted here and
    there), else one window around them all. Every cell outside the windows is the same object
    at the same place relative to them, so comparing the windows finds the whole change."""
    hunks: list[tuple[int, int, int, int]] = []
    shift = end = 0
    for at, removed, added in steps:
        if at < end:
            return [_window(steps)]
        hunks.append((at - shift, at - shift + removed, at, at + len(added)))
        shift += len(added) - removed
        end = at + len(added)
    return hunks


def _window(steps: Sequence[Step]) -> tuple[int, int, int, int]:
    """One window (start, end before, start, end after) holding every cell ``steps`` moved."""
    lo, hi, b_hi = steps[0][0], steps[0][0] + len(steps[0][2]), steps[0][0] + steps[0][1]
    for at, removed, added in steps[1:]:
        end = max(hi, at + removed)  # in the list before this step; its start before all
        lo, hi, b_hi = min(lo, at), end + len(added) - removed, end - (hi - b_hi)
    return lo, b_hi, lo, hi


def replaced_at(before: Sequence[Cell], after: Sequence[Cell]) -> list[bool]:
    """For each position, whether its cell is another object in ``after`` (a loop in C)."""
    return list(map(operator.is_not, before, after))


def _true_at(flags: list[bool]) -> list[int]:
    """The indexes of the true items (found by ``list.index``, a loop in C)."""
    found: list[int] = []
    with contextlib.suppress(ValueError):
        while True:
            found.append(flags.index(True, found[-1] + 1 if found else 0))
    return found


def plan_undo(
    current: Sequence[Cell],
    change: Change,
    metadata: Mapping[str, Any] | None = None,
    *,
    where: Callable[[str], int | None] | None = None,
) -> list[Edit]:
    """Return the edits that revert ``change`` on the current cells (and ``metadata``, the
    notebook's own metadata now). ``where``: the position of a cell id in ``current``
    (``Notebook.position``), so that undoing an insert or an edit looks at its cells only.

    Raises:
        UndoRefused: a cell the change added or modified was changed or deleted since, or a
            notebook metadata key it set was changed since.
    """
    meta_edits: list[Edit] = []
    if change.metadata is not None:
        old, new = change.metadata
        now = dict(metadata or {})
        keys = {k for k in {*old, *new} if old.get(k, _GONE) != new.get(k, _GONE)}
        if any(now.get(k, _GONE) != new.get(k, _GONE) for k in keys):
            raise UndoRefused(
                f"cannot undo {change.label!r}: the notebook's metadata was changed after it.",
                hint="Undo the later change first, or set the metadata directly.",
            )
        restore = {k: old[k] for k in keys if k in old}
        gone = tuple(k for k in keys if k not in old)
        meta_edits.append(SetMetadata(restore, gone))
    return meta_edits + _plan_undo_cells(current, change, where)


_GONE = object()


def _plan_undo_cells(
    current: Sequence[Cell], change: Change, where: Callable[[str], int | None] | None
) -> list[Edit]:
    find = _finder(current, where)
    for cid, after in change.after.items():
        now = find(cid)
        if now is None:
            raise UndoRefused(
                f"cannot undo {change.label!r}: cell {cid!r} it touched has been deleted since.",
                hint="Undo only reverts changes whose cells are as nbrelay left them; edit the "
                "notebook directly instead.",
            )
        if _content(now) != _content(after):
            raise UndoRefused(
                f"cannot undo {change.label!r}: cell {cid!r} was changed after it.",
                hint="Undo the later change first, or edit the cell directly.",
            )
    for cid in change.removed:
        if find(cid) is not None:
            raise UndoRefused(
                f"cannot undo {change.label!r}: a cell with id {cid!r} exists again.",
                hint="Edit the notebook directly instead.",
            )
    edits: list[Edit] = []
    if change.added:
        edits.append(DeleteCells(change.added))
    for cid, before in change.before.items():
        if cid in change.removed:
            continue
        now = find(cid)
        if now is None:  # not so: a cell in ``before`` and not removed is in ``after`` too
            continue
        changes = {k: v for k, v in before.items() if k not in now or now[k] != v}
        remove = tuple(k for k in now if k not in before)
        if changes or remove:
            edits.append(UpdateCell(cid, changes, remove, base_source=now.get("source")))
    place = set(change.removed) | set(change.moved)
    if not place:
        return edits
    order = [c["id"] for c in current]
    if change.added:
        gone = set(change.added)
        order = [i for i in order if i not in gone]
    for k, cid in enumerate(change.before_order):
        if cid not in place:
            continue
        moving = cid in order
        if moving:
            order.remove(cid)
        target = next(
            (order.index(p) + 1 for p in reversed(change.before_order[:k]) if p in order), 0
        )
        if moving:
            edits.append(MoveCells((cid,), target))
        else:
            edits.append(InsertCells(target, (change.before[cid],)))
        order.insert(target, cid)
    return edits


def _finder(
    current: Sequence[Cell], where: Callable[[str], int | None] | None
) -> Callable[[str], Cell | None]:
    """Each cell by id: through ``where``, else through a map of all cells made here."""
    if where is None:
        return {c["id"]: c for c in current}.get

    def find(cid: str) -> Cell | None:
        at = where(cid)
        found = current[at] if at is not None and at < len(current) else None
        return found if found is not None and found["id"] == cid else None

    return find
