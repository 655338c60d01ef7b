"""What changed between two versions of a notebook, by cell id.

Used by the change feed: a watcher compares the notebook it saw last with the one on disk now,
whoever wrote it (this process, another nbrelay, a person in an editor), and reports the cells
added, removed, edited (source, type, metadata, attachments) and whose outputs changed (outputs or
execution count), and whether the order of the remaining cells changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbrelay.notebook.model import Cell, Notebook

_CONTENT = ("cell_type", "source", "metadata", "attachments")
_OUTPUTS = ("outputs", "execution_count")


@dataclass(frozen=True)
class CellChanges:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    edited: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    moved: bool = False
    metadata: bool = False  # the notebook's own metadata

    @property
    def empty(self) -> bool:
        return not (
            self.added or self.removed or self.edited or self.outputs or self.moved or self.metadata
        )

    def touches(self, cell_id: str) -> bool:
        return (
            cell_id in self.added
            or cell_id in self.removed
            or cell_id in self.edited
            or (cell_id in self.outputs)
        )


def _pick(cell: Cell, keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(cell.get(k) for k in keys)


def diff(before: Notebook | None, after: Notebook | None) -> CellChanges:
    """The changes that turn ``before`` into ``after`` (None: the notebook did not exist)."""
    old = {c["id"]: c for c in before.cells} if before is not None else {}
    new = {c["id"]: c for c in after.cells} if after is not None else {}
    added = tuple(cid for cid in new if cid not in old)
    removed = tuple(cid for cid in old if cid not in new)
    common = [cid for cid in new if cid in old]
    edited = tuple(cid for cid in common if _pick(old[cid], _CONTENT) != _pick(new[cid], _CONTENT))
    outputs = tuple(cid for cid in common if _pick(old[cid], _OUTPUTS) != _pick(new[cid], _OUTPUTS))
    moved = [cid for cid in old if cid in new] != common
    meta = (
        before is not None
        and after is not None
        and before.data.get("metadata") != after.data.get("metadata")
    )
    return CellChanges(added, removed, edited, outputs, moved, meta)
