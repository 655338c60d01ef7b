"""Moving one cell a step up or down (notebook-lr's ``move_cell``), as an edit plan."""

from __future__ import annotations

from typing import Literal

from nbrelay.errors import InvalidArgument
from nbrelay.notebook import address, edits
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook

Direction = Literal["up", "down"]


def step_target(index: int, direction: Direction) -> int:
    """The index a cell at ``index`` lands on after one step."""
    return index - 1 if direction == "up" else index + 1


def plan_step(nb: Notebook, index: int, direction: Direction) -> Plan:
    """Move the cell at ``index`` one place ``direction``; a step past either end is refused
    (naming the edge), as an index outside the notebook is."""
    i = address.resolve_one(nb.ids, index)
    to = step_target(index, direction)
    if not 0 <= to < len(nb.cells):
        edge = "first" if direction == "up" else "last"
        raise InvalidArgument(
            f"Cannot move cell at index {index} {direction}: it is already the {edge} cell."
        )
    return edits.plan_move(nb, [i], to)
