"""Changing cells: insert, edit, delete, move, merge, split, clear outputs.

``insert_cells`` and ``edit_cell`` can run what they changed (``execute=true``); the run is
attached to the edit's result (``nbrelay.tools.runs.edited``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from nbrelay.caller import Caller
from nbrelay.notebook.address import resolve_many
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.merge_read import MergeConflict
from nbrelay.stores.base import EditOutcome
from nbrelay.tools import asking, results
from nbrelay.tools.arguments import NbPath, NewCells, Ref, Refs, Version, specs
from nbrelay.tools.results import EditResult
from nbrelay.tools.runs import edited
from nbrelay.workspace import Workspace

# Deleting more cells than this asks the person first (where the client can ask them).
ASK_OVER = 5


async def insert_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cells: NewCells,
    index: Annotated[int | None, Field(description="Before this index; default: append.")] = None,
    after: Annotated[int | str | None, Field(description="Or after this cell.")] = None,
    expected_version: Version = None,
    execute: bool = False,
    ctx: Context | None = None,
) -> EditResult:
    """Insert cells; returns their ids and indexes.

    Example: insert_cells(path="eda.ipynb", after="a1b2c3d4", cells=["df.describe()"]).
    """
    if execute:
        ws.kernels.require_execution()
    outcome = await ws.editing.insert_cells(
        path, caller, specs(cells), index=index, after=after, expected_version=expected_version
    )
    return await edited(ws, caller, path, outcome, ctx, execute=execute)


async def edit_cell(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cell: Ref,
    source: str | None = None,
    find: Annotated[
        str | None, Field(description="Exact text to replace; must occur once.")
    ] = None,
    replace: str | None = None,
    replace_all: bool = False,
    cell_type: Literal["code", "markdown", "raw"] | None = None,
    metadata: Annotated[
        dict[str, Any] | None, Field(description="Keys to merge; null deletes.")
    ] = None,
    tags: list[str] | None = None,
    expected_version: Version = None,
    execute: bool = False,
    ctx: Context | None = None,
) -> EditResult:
    """Change one cell: whole `source` or literal `find`/`replace` (best for small edits; returns a diff), type, metadata, tags; keeps outputs.

    Example: edit_cell(path="eda.ipynb", cell=3, find="head()", replace="head(10)").
    """
    if execute:
        ws.kernels.require_execution()
    changes: dict[str, Any] = {
        "find": find,
        "replace": replace,
        "replace_all": replace_all,
        "cell_type": cell_type,
        "metadata": metadata,
        "tags": tags,
    }
    try:
        outcome = await ws.editing.edit_cell(
            path, caller, cell, source=source, expected_version=expected_version, **changes
        )
    except MergeConflict as conflict:
        if source is None or not asking.can_ask():
            raise
        outcome = await settle(ws, caller, path, conflict, source, changes)
    return await edited(ws, caller, path, outcome, ctx, execute=execute)


class Keep(BaseModel):
    """What the person keeps of two changes to the same lines of a cell."""

    keep: Literal["mine", "theirs", "both"] = Field(
        default="both",
        title="Keep",
        description="mine: the agent's source replaces the other change; theirs: the other "
        "change stays and the agent's is dropped; both: the other change stays in the cell and "
        "the agent's source goes into a new cell just below it.",
    )


async def settle(
    ws: Workspace,
    caller: Caller,
    path: str,
    conflict: MergeConflict,
    source: str,
    changes: dict[str, Any],
) -> EditOutcome:
    """A whole new source that conflicts with someone else's change to the same lines: ask the
    person which to keep. No answer (declined, cancelled, or a client that cannot ask): the edit
    is refused as before, nothing changed."""
    rel = ws.notebooks.relative(path)
    answer = await asking.ask(
        "merge",
        f"Cell {conflict.cell} of {rel} was changed by someone else since the agent read it, "
        f"on the lines the agent is rewriting. The other change:\n{conflict.theirs}\n"
        "Keep which?",
        Keep,
    )
    if answer is None or not answer.accepted or answer.data is None:
        raise conflict
    if answer.data.keep == "theirs":
        raise asking.Declined(
            f"cell {conflict.cell!r} keeps the other change (the person chose theirs); your "
            "source was not written",
            hint="Read the cell again before you edit it.",
        )
    snap = await ws.notebooks.read(rel, caller)  # the other change is now what the caller has read
    if answer.data.keep == "mine":
        return await ws.editing.edit_cell(rel, caller, conflict.cell, source=source, **changes)
    kind = str(snap.notebook.cells[snap.notebook.ids.index(conflict.cell)].get("cell_type"))
    return await ws.editing.insert_cells(rel, caller, [CellSpec(kind, source)], after=conflict.cell)


async def delete_cells(
    ws: Workspace, caller: Caller, path: NbPath, cells: Refs, expected_version: Version = None
) -> EditResult:
    """Delete cells; undo can restore them.

    Example: delete_cells(path="eda.ipynb", cells=[0, "a1b2c3d4", "5:8"]).
    """
    if asking.can_ask():
        snap = await ws.notebooks.read(path, caller)
        n = len(set(resolve_many(snap.notebook.ids, cells)))
        if n > ASK_OVER:
            await asking.confirm(
                "delete_cells",
                f"Delete {n} cells of {snap.path}? (undo can restore them)",
                refused=f"{n} cells of {snap.path!r} were not deleted",
                hint="Delete fewer cells at a time, or ask the person first.",
            )
    return results.edit_result(
        await ws.editing.delete_cells(path, caller, cells, expected_version=expected_version)
    )


async def move_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cells: Refs,
    to: Annotated[int, Field(ge=0)],
    expected_version: Version = None,
) -> EditResult:
    """Move cells (kept in order) so the first lands at index `to`.

    Example (cells 5 and 6 to the top): move_cells(path="eda.ipynb", cells=["5:7"], to=0).
    """
    return results.edit_result(
        await ws.editing.move_cells(path, caller, cells, to, expected_version=expected_version)
    )


async def merge_cells(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cells: Refs,
    separator: str = "\n",
    expected_version: Version = None,
) -> EditResult:
    """Merge adjacent cells into the first (keeps its id and type); clears outputs.

    Example: merge_cells(path="eda.ipynb", cells=["2:4"]).
    """
    outcome = await ws.editing.merge_cells(
        path, caller, cells, separator=separator, expected_version=expected_version
    )
    return results.edit_result(outcome)


async def split_cell(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cell: Ref,
    lines: list[int],
    expected_version: Version = None,
) -> EditResult:
    """Split a cell before each 0-based line in `lines`; the first part keeps the id; clears outputs.

    Example (lines 0-3 and 4-9): split_cell(path="eda.ipynb", cell=2, lines=[4]).
    """
    return results.edit_result(
        await ws.editing.split_cell(path, caller, cell, lines, expected_version=expected_version)
    )


async def clear_outputs(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cells: Refs | None = None,
    expected_version: Version = None,
) -> EditResult:
    """Clear outputs and execution counts (default: all cells).

    Example: clear_outputs(path="eda.ipynb", cells=["3:6"]).
    """
    return results.edit_result(
        await ws.editing.clear_outputs(path, caller, cells, expected_version=expected_version)
    )
