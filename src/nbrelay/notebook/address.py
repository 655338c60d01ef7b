"""Cell addressing: an index, a cell id, or a range, resolved against a notebook's cell ids.

A reference is one of:

* an ``int``: a 0-based index; negative counts from the end (``-1`` is the last cell);
* a ``str`` that is a cell id (``"a1b2c3d4"``);
* a ``str`` range ``"start:end"`` with Python slice meaning (end excluded; either side may be
  empty): ``"2:5"`` is cells 2, 3 and 4, ``":3"`` the first three, ``"-2:"`` the last two;
* a ``str`` of digits that is not a cell id is read as an index (``"3"`` is cell 3);
* ``"all"`` (when no cell has that id) is every cell, as ``":"`` is.

Errors name the valid range, so the agent can correct itself in one step.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from nbrelay.errors import CellNotFound, InvalidArgument, act, cell_number

CellRef = int | str

_RANGE = re.compile(r"^\s*(-?\d*)\s*:\s*(-?\d*)\s*$")
_INT = re.compile(r"^\s*-?\d+\s*$")


def describe_bounds(n: int) -> str:
    if n == 0:
        return "the notebook has no cells"
    if n == 1:
        return f"the notebook has 1 cell (index {cell_number(0)})"
    return f"the notebook has {n} cells (indexes {cell_number(0)}-{cell_number(n - 1)})"


def _index(ids: Sequence[str], i: int, ref: object) -> int:
    n = len(ids)
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        shown = cell_number(ref) if isinstance(ref, int) else ref
        raise CellNotFound(
            f"cell index {shown} is out of range: {describe_bounds(n)}.",
            hint=f"{act('index_rule')} {act('see_cells')}",
        )
    return j


def _by_id(ids: Sequence[str], ref: str) -> int | None:
    try:
        return ids.index(ref)
    except ValueError:
        return None


def _not_found(ids: Sequence[str], ref: str) -> CellNotFound:
    close = difflib.get_close_matches(ref, ids, n=3, cutoff=0.5)
    suggestion = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return CellNotFound(
        f"no cell has id {ref!r} ({describe_bounds(len(ids))}).{suggestion}",
        hint=f"The cell may have been deleted or the notebook changed. {act('see_cells')}",
    )


def resolve(ids: Sequence[str], ref: CellRef) -> list[int]:
    """Resolve one reference (index, id or range) to a list of indexes, in notebook order."""
    if isinstance(ref, bool):
        raise InvalidArgument(f"cell reference {ref!r} is a boolean; give an index, id or range.")
    if isinstance(ref, int):
        return [_index(ids, ref, ref)]
    value: object = ref
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(
            f"cell reference {ref!r} is empty or not a string or integer.",
            hint='Give a 0-based index (2), a cell id ("a1b2c3d4") or a range ("2:5").',
        )
    found = _by_id(ids, ref)
    if found is not None:
        return [found]
    if ref.strip().lower() == "all":
        return _range(ids, ref, "", "")
    m = _RANGE.match(ref)
    if m:
        return _range(ids, ref, m.group(1), m.group(2))
    if _INT.match(ref):
        return [_index(ids, int(ref), ref)]
    raise _not_found(ids, ref)


def _range(ids: Sequence[str], ref: str, start_s: str, end_s: str) -> list[int]:
    n = len(ids)
    start = int(start_s) if start_s else 0
    end = int(end_s) if end_s else n
    if start < 0:
        start += n
    if end < 0:
        end += n
    if not (0 <= start <= n and 0 <= end <= n):
        raise CellNotFound(
            f"range {ref!r} reaches outside the notebook: {describe_bounds(n)}.",
            hint='Ranges are "start:end" with the end excluded, like Python slices: '
            '"0:3" is cells 0, 1 and 2.',
        )
    if start >= end:
        raise CellNotFound(
            f"range {ref!r} selects no cells ({describe_bounds(n)}).",
            hint='Ranges are "start:end" with the end excluded: "2:3" is cell 2 alone.',
        )
    return list(range(start, end))


def resolve_one(ids: Sequence[str], ref: CellRef) -> int:
    """Resolve a reference that must name exactly one cell."""
    found = resolve(ids, ref)
    if len(found) != 1:
        raise InvalidArgument(
            f"cell reference {ref!r} names {len(found)} cells; this tool acts on one cell.",
            hint="Give one index or cell id.",
        )
    return found[0]


def resolve_many(ids: Sequence[str], refs: Sequence[CellRef] | CellRef) -> list[int]:
    """Resolve several references to sorted, de-duplicated indexes."""
    items: Sequence[CellRef] = [refs] if isinstance(refs, int | str) else refs
    if not items:
        raise InvalidArgument(
            "no cells given.",
            hint='Give indexes, ids or ranges, for example [0, "a1b2c3d4", "4:6"].',
        )
    out: set[int] = set()
    for ref in items:
        out.update(resolve(ids, ref))
    return sorted(out)


def insertion_index(n: int, position: int | None) -> int:
    """Resolve an insertion position: None or -1 appends; 0..n inserts before that index."""
    if position is None or position == -1:
        return n
    if position < -1:
        position = n + position + 1
    if not 0 <= position <= n:
        raise CellNotFound(
            f"insertion index {cell_number(position)} is out of range: {describe_bounds(n)}, so "
            f"new cells can go at {cell_number(0)}-{cell_number(n)}.",
            hint=act("insert_rule"),
        )
    return position
