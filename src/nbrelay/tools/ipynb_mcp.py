"""Profile ``ipynb-mcp``: the tool set of the ipynb-mcp server, exactly.

Cell and output indexes are 1-based; errors come back as an ``error`` field (with
``success: false``) rather than as MCP tool errors; editing a code cell clears its outputs; merging
two cells gives a code cell only when both were code, otherwise markdown.

The tools are module-level functions taking the workspace first; ``TOOLS`` lists them in the
order tools/list shows them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nbrelay.errors import InvalidArgument, NbrelayError, Vocabulary
from nbrelay.notebook import render
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Notebook
from nbrelay.tools._boundary import Registrar, ToolTable
from nbrelay.workspace import Workspace

FilePath = Annotated[
    str, Field(description="The path to the Jupyter notebook file (e.g., `test/example.ipynb`).")
]
NotebookFile = Annotated[str, Field(description="The path to the Jupyter notebook file.")]
OUTPUT_PREVIEW = 500
_AGAIN = "Call get_formatted_content to see the notebook as it is now, then retry."
# How errors say things here (see nbrelay.errors): this profile's tools, cells numbered from 1.
WORDS = Vocabulary(
    {
        "index_rule": "Indexes are 1-based (1 is the first cell).",
        "see_cells": "Call get_formatted_content to see the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "reread_cell": "Read the cell again (get_formatted_content) and redo your edit on its "
        "current source.",
        "missing": "Check the path: it is relative to the root folder, and the notebook must "
        "exist.",
        "insert_rule": "Indexes are 1-based; an index past the end appends.",
    },
    index_base=1,
)


class FormattedContent(BaseModel):
    formatted_content: str | None
    filepath: str
    error: str | None = None


class FullOutput(BaseModel):
    full_output_data: Any
    mime_type: str | None
    error: str | None = None


class Success(BaseModel):
    success: bool
    filepath: str
    error: str | None = None


class AddCellResult(BaseModel):
    success: bool
    filepath: str
    new_cell_actual_index: int
    error: str | None = None


def _zero_based(value: int, name: str) -> int:
    if value < 1:
        raise InvalidArgument(
            f"{name} {value} is not valid: indexes here are 1-based (1 is the first).",
            hint=f"Pass {name}=1 for the first one.",
        )
    return value - 1


def _cell_index(nb: Notebook, cell_index: int) -> int:
    i = _zero_based(cell_index, "cell_index")
    if i >= len(nb.cells):
        raise InvalidArgument(
            f"cell_index {cell_index} is out of range: the notebook has {len(nb.cells)} cells "
            f"(1-{len(nb.cells)}).",
            hint="Call get_formatted_content to see the cells.",
        )
    return i


async def _succeeded(filepath: str, change: Callable[[], Awaitable[object]]) -> Success:
    """Make ``change``; an error it raises comes back as ``success: false`` with ``error``."""
    try:
        await change()
    except NbrelayError as exc:
        return Success(success=False, filepath=filepath, error=exc.render(WORDS))
    return Success(success=True, filepath=filepath)


def format_notebook(path: str, nb: Notebook) -> str:
    """The agent-readable summary of a notebook: every cell, outputs cut to a preview."""
    lines = [f"Notebook: {path} ({len(nb.cells)} cells)"]
    for i, cell in enumerate(nb.cells, start=1):
        kind = cell.get("cell_type", "")
        count = cell.get("execution_count")
        head = f"--- Cell {i} [{kind}]" + (f" (execution count {count})" if count else "") + " ---"
        lines += ["", head, str(cell.get("source", ""))]
        outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
        if outputs:
            lines.append("Outputs:")
        for k, out in enumerate(outputs, start=1):
            ot = render.output_text(out, OUTPUT_PREVIEW)
            hint = "image" if ot.image else ("table" if "text/html" in ot.mimes else "text")
            label = out.get("name") if out.get("output_type") == "stream" else ot.image or ot.kind
            pointer = f"get_full_output(cell_index={i}, output_index={k}, type_hint={hint!r})"
            text, cut = render.truncate_middle(
                ot.text, OUTPUT_PREVIEW, hint=pointer, unread=ot.unread, seam=ot.seam
            )
            if ot.image and not cut:
                text = f"{text} (full image: {pointer})"
            lines.append(f"  [{k}] {label}: {text}")
    return "\n".join(lines)


async def get_formatted_content(ws: Workspace, filepath: FilePath) -> FormattedContent:
    """Retrieves a formatted, summarized view of the entire Jupyter notebook's content, including cell types, source code/markdown, and truncated outputs. This tool is useful for getting a quick overview of the notebook without loading all large outputs. Cells and outputs are numbered from 1."""
    try:
        snap = await ws.read(filepath)
    except NbrelayError as exc:
        return FormattedContent(formatted_content=None, filepath=filepath, error=exc.render(WORDS))
    return FormattedContent(
        formatted_content=format_notebook(snap.path, snap.notebook), filepath=filepath
    )


async def get_full_output(
    ws: Workspace,
    filepath: NotebookFile,
    cell_index: Annotated[
        int, Field(description="The 1-based index of the cell containing the desired output.")
    ],
    output_index: Annotated[
        int, Field(description="The 1-based index of the specific output within the cell.")
    ],
    type_hint: Annotated[
        str | None,
        Field(
            description='An optional hint about the expected output type ("text", "image", "table").'
        ),
    ] = None,
) -> FullOutput:
    """Fetches the complete, untruncated content of a specific output from a Jupyter notebook cell. This is particularly useful for retrieving full text, image data (base64), or large table outputs (HTML) that are truncated in `get_formatted_content`."""
    try:
        if type_hint is not None and type_hint not in ("text", "image", "table"):
            raise InvalidArgument(
                f"type_hint {type_hint!r} is not one of text, image, table.",
                hint="Leave it out to get the richest format.",
            )
        snap = await ws.read(filepath)
        cell = snap.notebook.cells[_cell_index(snap.notebook, cell_index)]
        outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
        k = _zero_based(output_index, "output_index")
        if k >= len(outputs):
            raise InvalidArgument(
                f"output_index {output_index} is out of range: cell {cell_index} has "
                f"{len(outputs)} output(s).",
                hint="Call get_formatted_content to see the outputs.",
            )
        mime, data = render.full_output(outputs[k], type_hint)
    except NbrelayError as exc:
        return FullOutput(full_output_data=None, mime_type=None, error=exc.render(WORDS))
    return FullOutput(full_output_data=data, mime_type=mime)


async def edit_cell(
    ws: Workspace,
    filepath: NotebookFile,
    cell_index: Annotated[int, Field(description="The 1-based index of the cell to edit.")],
    new_source_content: Annotated[
        str, Field(description="The new source code or markdown content for the cell.")
    ],
) -> Success:
    """Modifies the source content of an existing cell in a Jupyter notebook. When a code cell is edited, its existing outputs are automatically cleared as they become stale. cell_index is 1-based."""
    return await _succeeded(
        filepath,
        lambda: ws.edit_cell(
            filepath,
            _zero_based(cell_index, "cell_index"),
            source=new_source_content,
            clear_outputs=True,
        ),
    )


async def add_cell(
    ws: Workspace,
    filepath: NotebookFile,
    cell_index: Annotated[
        int,
        Field(
            description="The 1-based index at which to insert the new cell. Cells at and after this index will be shifted down."
        ),
    ],
    cell_type: Annotated[str, Field(description='The type of cell to add ("code" or "markdown").')],
    source_content: Annotated[
        str, Field(description="The initial source content for the new cell.")
    ],
) -> AddCellResult:
    """Adds a new cell (either `code` or `markdown`) to the Jupyter notebook at a specified 1-based index. An index past the end appends; the result gives the 1-based index actually used."""
    try:
        if cell_type not in ("code", "markdown"):
            raise InvalidArgument(
                f"cell_type {cell_type!r} is not supported.", hint='Use "code" or "markdown".'
            )
        at = _zero_based(cell_index, "cell_index")
        snap = await ws.read(filepath)
        at = min(at, len(snap.notebook.cells))
        outcome = await ws.insert_cells(
            filepath,
            [CellSpec(cell_type, source_content)],
            index=at,
            expected_version=snap.version,
        )
    except NbrelayError as exc:
        return AddCellResult(
            success=False, filepath=filepath, new_cell_actual_index=-1, error=exc.render(WORDS)
        )
    new_id = outcome.plan.touched[0]
    actual = outcome.after.notebook.ids.index(new_id) + 1
    return AddCellResult(success=True, filepath=filepath, new_cell_actual_index=actual)


async def delete_cell(
    ws: Workspace,
    filepath: NotebookFile,
    cell_index: Annotated[int, Field(description="The 1-based index of the cell to delete.")],
) -> Success:
    """Deletes a cell from the Jupyter notebook at the specified 1-based index."""
    return await _succeeded(
        filepath, lambda: ws.delete_cells(filepath, [_zero_based(cell_index, "cell_index")])
    )


async def merge_cells(
    ws: Workspace,
    filepath: NotebookFile,
    cell_index1: Annotated[int, Field(description="The 1-based index of the first cell.")],
    cell_index2: Annotated[
        int,
        Field(
            description="The 1-based index of the second cell, which must be immediately consecutive to `cell_index1` (i.e., `cell_index2 = cell_index1 + 1`)."
        ),
    ],
) -> Success:
    """Merges two consecutive cells in a Jupyter notebook. The content of the second cell (`cell_index2`) is appended to the first cell (`cell_index1`), and the second cell is then deleted. The merged cell's type will be 'code' if both original cells were 'code', otherwise it will be 'markdown'."""

    async def merge() -> None:
        first = _zero_based(cell_index1, "cell_index1")
        second = _zero_based(cell_index2, "cell_index2")
        if second != first + 1:
            raise InvalidArgument(
                f"cell_index2 must be cell_index1 + 1 ({cell_index1 + 1}), not {cell_index2}.",
                hint="Only consecutive cells can be merged.",
            )
        snap = await ws.read(filepath)
        nb = snap.notebook
        _cell_index(nb, cell_index2)
        both_code = all(nb.cells[i].get("cell_type") == "code" for i in (first, second))
        merged: Literal["code", "markdown"] = "code" if both_code else "markdown"
        await ws.merge_cells(
            filepath, [first, second], cell_type=merged, expected_version=snap.version
        )

    return await _succeeded(filepath, merge)


TOOLS: ToolTable = [
    (get_formatted_content, "read"),
    (get_full_output, "read"),
    (edit_cell, "write"),
    (add_cell, "write"),
    (delete_cell, "destructive"),
    (merge_cells, "write"),
]


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the ipynb-mcp tools."""
    reg.exact = True
    reg.words = WORDS
    reg.add(TOOLS, ws)
