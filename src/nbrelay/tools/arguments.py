"""Argument types the canonical tools share (one declaration each).

Their descriptions are what every agent reads in ``tools/list`` on every turn, so they are
short; what holds for every tool (paths are relative to the root, cells are addressed by 0-based
index or id, ``version``/``expected_version``) is said once, in the server's instructions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nbrelay.notebook.edits import CellSpec

NbPath = str  # relative to the root: the server instructions say it once for every tool
Ref = Annotated[int | str, Field(description="Cell index (-1 = last) or id.")]
Refs = Annotated[
    list[int | str],
    Field(description="Cell indexes, ids or 'start:end' ranges (end excluded)."),
]
Version = str | None  # expected_version: explained once, in the server instructions
Wait = Annotated[float | None, Field(ge=0, le=3600, description="Seconds before a handle.")]


class NewCell(BaseModel):
    model_config = ConfigDict(extra="forbid")  # {"content": ...} is a mistake, not an empty cell

    source: str = ""
    type: Literal["code", "markdown", "raw"] = "code"
    metadata: dict[str, Any] | None = None


NewCells = Annotated[
    list[NewCell | str],
    Field(description="Cells to add; a plain string is a code cell."),
]


def specs(cells: list[NewCell | str]) -> list[CellSpec]:
    return [
        CellSpec("code", c) if isinstance(c, str) else CellSpec(c.type, c.source, c.metadata)
        for c in cells
    ]
