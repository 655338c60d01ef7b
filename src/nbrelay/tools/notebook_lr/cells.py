"""notebook-lr's cell tools: read, edit, add, delete, move, convert, find and replace cells of
the current notebook."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

from mcp_types import CallToolResult
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import NotebookExists, NotebookNotFound
from nbrelay.notebook import address, moves
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import Notebook
from nbrelay.tools.notebook_lr.context import Current
from nbrelay.tools.notebook_lr.views import (
    CellList,
    CellOutput,
    FindResult,
    FoundLine,
    Index,
    MoveResult,
    ReplaceResult,
    cell_output,
    omit_null_default,
    scalar,
    with_images,
    zero_based,
)


async def get_cell_source(
    lr: Current, caller: Caller, index: Index
) -> Annotated[CallToolResult, str]:
    """Get the source content of a cell at the specified index.

    Args:
        index: Zero-based index of the cell

    Returns:
        The cell's source code as a string

    Raises:
        ValueError: If index is out of range
    """
    nb = await lr.notebook(caller)
    return scalar(str(nb.cells[address.resolve_one(nb.ids, zero_based(index))].get("source", "")))


async def update_cell_source(
    lr: Current,
    caller: Caller,
    index: Index,
    source: Annotated[str, Field(description="New source code to set")],
) -> Annotated[CallToolResult, bool]:
    """Update the source content of a cell at the specified index.

    Args:
        index: Zero-based index of the cell
        source: New source code to set

    Returns:
        True if successful

    Raises:
        ValueError: If index is out of range
    """
    await lr.on_current(
        lambda p: lr.ws.editing.edit_cell(p, caller, zero_based(index), source=source)
    )
    return scalar(True)


async def add_cell(
    lr: Current,
    caller: Caller,
    cell_type: Annotated[
        Literal["code", "markdown"], Field(description="Type of cell to create")
    ] = "code",
    after_index: Annotated[
        int | None,
        Field(
            description="Insert after this index. If not provided, appends to end.",
            json_schema_extra=omit_null_default,
        ),
    ] = None,
    source: Annotated[str, Field(description="Initial source content for the cell")] = "",
) -> CellOutput:
    """Add a new cell to the notebook.

    Args:
        cell_type: Type of cell - 'code' or 'markdown' (default: 'code')
        after_index: Insert after this index. If None, append to end. (default: None)
        source: Initial source content (default: empty string)

    Returns:
        CellOutput with index, id, type, and source of the new cell
    """
    after = None if after_index is None else zero_based(after_index, "after_index")
    new = [CellSpec(cell_type, source)]
    snap = await lr.snapshot(caller)
    ids = snap.notebook.ids if snap else []
    if after is not None and (ids or after != 0):
        # An existing cell, as notebook-lr checks ("out of range"), never appended instead; only
        # the seed's own example, after_index=0 in an empty notebook, makes the first cell.
        address.resolve_one(ids, after)
    if snap is None:
        # The first cell makes the notebook (live mode: no placeholder cell before it).
        with contextlib.suppress(NotebookExists):
            made = await lr.ws.notebooks.create_notebook(lr.path, caller, new)
            return lr.budget().share(lambda b: cell_output(made.notebook.cells[0], 0, b))
    outcome = await lr.on_current(lambda p: lr.ws.editing.insert_cells(p, caller, new, after=after))
    new_id = outcome.plan.touched[0]
    at = outcome.after.notebook.ids.index(new_id)
    return lr.budget().share(lambda b: cell_output(outcome.after.notebook.cells[at], at, b))


async def delete_cell(
    lr: Current,
    caller: Caller,
    index: Annotated[int, Field(description="Zero-based index of the cell to delete")],
) -> Annotated[CallToolResult, bool]:
    """Delete a cell at the specified index.

    Args:
        index: Zero-based index of the cell to delete

    Returns:
        True if successful

    Raises:
        ValueError: If index is out of range
    """
    await lr.on_current(lambda p: lr.ws.editing.delete_cells(p, caller, [zero_based(index)]))
    return scalar(True)


async def move_cell(
    lr: Current,
    caller: Caller,
    index: Annotated[int, Field(description="Zero-based index of the cell to move")],
    direction: Annotated[Literal["up", "down"], Field(description="Direction to move the cell")],
) -> MoveResult:
    """Move a cell up or down in the notebook.

    Args:
        index: Zero-based index of the cell to move
        direction: Direction to move - 'up' or 'down'

    Returns:
        Dict with 'ok' (bool) and 'new_index' (int) if successful

    Raises:
        ValueError: If move is not possible (at boundaries)
    """
    zero_based(index)

    def planner(nb: Notebook) -> Plan:
        return moves.plan_step(nb, index, direction)

    await lr.on_current(
        lambda p: lr.ws.notebooks.edit(p, caller, "move cells", planner, positional=True)
    )
    return MoveResult(ok=True, new_index=moves.step_target(index, direction))


async def get_cell(lr: Current, caller: Caller, index: Index) -> Any:
    """Get complete information about a cell at the specified index.

    Args:
        index: Zero-based index of the cell

    Returns:
        CellOutput with all cell properties including outputs

    Raises:
        ValueError: If index is out of range
    """
    nb = await lr.notebook(caller)
    i = address.resolve_one(nb.ids, zero_based(index))
    cell = nb.cells[i]
    return with_images(
        lr.budget().share(lambda b: cell_output(cell, i, b)), cell.get("outputs") or []
    )


async def list_cells(lr: Current, caller: Caller) -> CellList:
    """Get a list of all cells in the notebook.

    Returns:
        CellList containing an array of all cells with their indices
    """
    nb = await lr.notebook(caller)
    shared = lr.budget()
    return shared.share(
        lambda b: CellList(cells=[cell_output(c, i, b) for i, c in enumerate(nb.cells)])
    )


async def convert_cell_type(
    lr: Current,
    caller: Caller,
    index: Index,
    cell_type: Annotated[
        Literal["code", "markdown"], Field(description="Type to convert the cell to")
    ],
) -> CellOutput:
    """Convert a cell to a code or markdown cell, keeping its source.

    Args:
        index: Zero-based index of the cell
        cell_type: Type to convert the cell to - 'code' or 'markdown'

    Returns:
        CellOutput of the converted cell

    Raises:
        ValueError: If index is out of range
    """
    outcome = await lr.on_current(
        lambda p: lr.ws.editing.edit_cell(p, caller, zero_based(index), cell_type=cell_type)
    )
    nb = outcome.after.notebook
    at = nb.ids.index(outcome.plan.touched[0])
    return lr.budget().share(lambda b: cell_output(nb.cells[at], at, b))


async def find_in_cells(
    lr: Current,
    caller: Caller,
    query: Annotated[str, Field(description="Text (or regular expression) to find")],
    case_sensitive: Annotated[bool, Field(description="Match case")] = False,
    regex: Annotated[bool, Field(description="Treat query as a regular expression")] = False,
) -> FindResult:
    """Find the cells whose source contains a text.

    Args:
        query: Text to find (a regular expression with regex=True)
        case_sensitive: Whether case must match (default: False)
        regex: Whether query is a regular expression (default: False)

    Returns:
        Dict with 'matches' (index, id, type, zero-based line and the line's text of each
        matching line) and 'count'
    """
    try:
        _, found = await lr.ws.notebooks.search(
            lr.path, caller, query, regex=regex, case_sensitive=case_sensitive
        )
    except NotebookNotFound:
        found = []
    return FindResult(
        matches=[
            FoundLine(index=m.index, id=m.id, type=m.cell_type, line=m.line, text=m.text)
            for m in found
        ],
        count=len(found),
    )


async def replace_in_cells(
    lr: Current,
    caller: Caller,
    find: Annotated[str, Field(description="Text (or regular expression) to replace")],
    replace: Annotated[str, Field(description="Replacement text")],
    case_sensitive: Annotated[bool, Field(description="Match case")] = True,
    regex: Annotated[bool, Field(description="Treat find as a regular expression")] = False,
) -> ReplaceResult:
    """Replace a text in the source of every cell; outputs are kept.

    Args:
        find: Text to replace (a regular expression with regex=True)
        replace: Replacement text (with regex=True it may use \\1 or \\g<name>)
        case_sensitive: Whether case must match (default: True)
        regex: Whether find is a regular expression (default: False)

    Returns:
        Dict with 'ok', 'replacements' (how many) and 'cells' (indexes of changed cells)
    """
    try:
        outcome = await lr.ws.editing.replace_in_cells(
            lr.path, caller, find, replace, regex=regex, case_sensitive=case_sensitive
        )
    except NotebookNotFound:
        return ReplaceResult(ok=True, replacements=0, cells=[])
    ids = outcome.after.notebook.ids
    changed = sorted(ids.index(c) for c in outcome.plan.touched if c in ids)
    count = int(outcome.plan.detail.get("replacements", 0))
    return ReplaceResult(ok=True, replacements=count, cells=changed)
