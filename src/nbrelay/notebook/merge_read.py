"""A whole new cell source written against an older read, merged with what changed since.

An agent that replaces a cell's whole source wrote it against the source it last read; if
someone changed the cell since, the two changes are merged three-way (``merge.merge3``), and
changes to the same lines are refused, showing the other change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nbrelay.errors import ConflictError, act, cell_number
from nbrelay.notebook.edits import Edit, Plan, UpdateCell, unified_diff
from nbrelay.notebook.merge import merge3
from nbrelay.notebook.model import Notebook

_MAX_SHOWN_CHANGE = 3000


class MergeConflict(ConflictError):
    """A whole new source for ``cell`` changes the same lines as someone else's change made
    since the caller read it (``theirs``: that change, as a diff)."""

    def __init__(self, message: str, *, current: str, hint: str, cell: str, theirs: str) -> None:
        super().__init__(message, current=current, hint=hint)
        self.cell, self.theirs = cell, theirs


def merge_with_read(plan: Plan, nb: Notebook, read: Mapping[str, str] | None) -> Plan:
    """Merge the whole new sources of ``plan`` with what changed since the caller's last read.

    ``read`` maps cell ids to their sources as the caller last read them (None: unknown). A
    ``merge`` update of a cell whose source changed since then was written against that older
    source: it is merged three-way (read source, the caller's source, the source now). A clean
    merge replaces the update's source (``intended`` keeps the caller's, ``base_source`` becomes
    the read source, so a live store applies the caller's change rebased onto the text as it is
    then); ``plan.detail["merged"]`` says which cells and what the other change was. Changes to
    the same lines are refused with ``ConflictError``, showing the other change: a whole-source
    replacement never silently overwrites someone else's edit.
    """
    if not read or not any(isinstance(e, UpdateCell) and e.merge for e in plan.edits):
        return plan
    current = nb.sources()
    out: list[Edit] = []
    merged: list[dict[str, Any]] = []
    seen: set[str] = set()  # cells whose source an earlier edit of the plan already set
    for edit in plan.edits:
        sets_source = isinstance(edit, UpdateCell) and "source" in edit.changes
        first = sets_source and isinstance(edit, UpdateCell) and edit.id not in seen
        if isinstance(edit, UpdateCell) and sets_source:
            seen.add(edit.id)
        if not (isinstance(edit, UpdateCell) and edit.merge and first):
            out.append(edit)
            continue
        base, now = read.get(edit.id), current.get(edit.id)
        ours = str(edit.changes["source"])
        if base is None or now is None or base == now or ours == now:
            out.append(edit)
            continue
        found = nb.position(edit.id)
        index = -1 if found is None else found
        theirs = unified_diff(base, now, context=1, labels=("as you read it", "now"))
        if len(theirs) > _MAX_SHOWN_CHANGE:
            theirs = (
                theirs[:_MAX_SHOWN_CHANGE]
                + f"\n… [{len(theirs) - _MAX_SHOWN_CHANGE:,} more characters of diff]"
            )
        result = merge3(base, ours, now)
        if result.text is None:
            lines = ", ".join(
                f"{c.base_start + 1}"
                if c.base_end - c.base_start <= 1
                else f"{c.base_start + 1}-{c.base_end}"
                for c in result.conflicts
            )
            raise MergeConflict(
                f"cell {cell_number(index)} ({edit.id}) was changed since you last read it, and your new "
                f"source changes the same lines (line {lines} of the source you read). Nothing "
                f"was changed. The other change:\n{theirs}\n",
                current="",
                hint=act("reread_cell"),
                cell=edit.id,
                theirs=theirs,
            )
        changes = {**edit.changes, "source": result.text}
        out.append(replace(edit, changes=changes, base_source=base, intended=ours))
        merged.append({"index": index, "id": edit.id, "theirs": theirs})
    if not merged:
        return plan
    detail = dict(plan.detail)
    detail["merged"] = merged
    if "diff" in detail and len(merged) == 1 and len(seen) == 1:
        cid = merged[0]["id"]
        final = next(
            str(e.changes["source"])
            for e in out
            if isinstance(e, UpdateCell) and e.id == cid and "source" in e.changes
        )
        detail["diff"] = unified_diff(current[cid], final)
    return Plan(edits=tuple(out), touched=plan.touched, detail=detail)
