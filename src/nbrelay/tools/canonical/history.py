"""Taking edits back: undo, from the workspace's edit history (runs are not undone)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.tools import results
from nbrelay.tools.arguments import NbPath, Version
from nbrelay.tools.results import EditResult
from nbrelay.workspace import Workspace


async def undo(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    steps: Annotated[int, Field(ge=1, le=1000)] = 1,
    expected_version: Version = None,
) -> EditResult:
    """Undo your last `steps` edits (not runs); refuses if a cell involved changed since.

    Example: undo(path="eda.ipynb", steps=2).
    """
    done = await ws.editing.undo(path, caller, steps, expected_version=expected_version)
    result = results.edit_result(done.outcome)
    result.undone = list(done.labels)
    return result
