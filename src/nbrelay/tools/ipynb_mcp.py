"""Profile ``ipynb-mcp``: the tool set of the ipynb-mcp server, exactly.

Cell and output indexes are 1-based; errors come back as an ``error`` field (with
``success: false``) rather than as MCP tool errors; editing a code cell clears its outputs; merging
two cells gives a code cell only when both were code, otherwise markdown.

The tools are module-level functions taking the workspace first; ``TOOLS`` lists them in the
order tools/list shows them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nbrelay.caller import Caller
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
# How get_formatted_content cuts outputs (ipynb-mcp's own limits and wording).
TEXT_LIMIT = 5000
TABLE_ROWS = 5
CUT = "[TRUNCATED]"
FULL_OUTPUT_HINT = "Use `get_full_output` for full content."
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
    formatted_content: str
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


def _pointer(cell: int, output: int, *, based: bool = True) -> str:
    where = (
        f"(cell {cell} [1-based], output {output} [1-based])"
        if based
        else (f"(cell {cell}, output {output})")
    )
    return f"{FULL_OUTPUT_HINT} {where}"


def _text_summary(text: str, cell: int, output: int) -> str:
    if len(text) > TEXT_LIMIT:
        return f"Text: {text[:TEXT_LIMIT]}... {CUT} {_pointer(cell, output)}"
    return f"Text: {text}"


def _table_summary(html: str, cell: int, output: int) -> str:
    head, body = render.html_table_rows(html)
    lines: list[str] = []
    if head:
        lines.append("| " + " | ".join(head[-1]) + " |")
        lines.append("|" + "---|" * len(head[-1]))
    lines += ["| " + " | ".join(row) + " |" for row in body[:TABLE_ROWS]]
    if not lines:
        return f"HTML content (truncated): {html[:TEXT_LIMIT]}... {CUT} {_pointer(cell, output)}"
    if len(body) > TABLE_ROWS:
        lines.append(f"... {CUT}")
    table = "\n".join(lines)
    return f"Table (HTML): \n```markdown\n{table}\n```\n{_pointer(cell, output)}"


def _output_summary(out: dict[str, Any], cell: int, k: int) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return _text_summary(render.as_text(out.get("text", "")), cell, k)
    if kind == "error":
        return f"Error: {out.get('ename', '')}: {out.get('evalue', '')} {_pointer(cell, k, based=False)}"
    data = out.get("data")
    data = data if isinstance(data, dict) else {}
    image = next((m for m in render.IMAGE_MIMES if m in data), None)
    if image is not None:
        label = image.split("/")[1].split("+")[0].upper()
        return f"Image ({label}) - IMG_ID{cell:03d}{k:03d} {_pointer(cell, k)}"
    html = render.as_text(data.get("text/html", ""))
    if "<table" in html.lower():
        return _table_summary(html, cell, k)
    if "text/plain" in data:
        return _text_summary(render.as_text(data["text/plain"]), cell, k)
    return f"Other data type: {', '.join(data)} {_pointer(cell, k, based=False)}"


def format_notebook(nb: Notebook) -> str:
    """The agent-readable summary of a notebook, as ipynb-mcp lays it out: each cell as
    ``[[Cell N - Type]]`` and its fenced source, then ``[[Cell N - Output]]`` with one line per
    output (text cut at 5,000 characters, tables at 5 rows, images named), each pointing to
    ``get_full_output``. An empty notebook is an empty string."""
    parts: list[str] = []
    for i, cell in enumerate(nb.cells, start=1):
        kind = str(cell.get("cell_type", ""))
        source = render.as_text(cell.get("source", "")).strip()
        parts.append(f"[[Cell {i} - {kind.capitalize()}]]\n```\n{source}\n```\n")
        outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
        if kind == "code" and outputs:
            parts.append(f"[[Cell {i} - Output]]\n")
            parts += [f"- {_output_summary(o, i, k)}\n" for k, o in enumerate(outputs, start=1)]
        parts.append("\n")
    return "".join(parts)


def full_output(out: dict[str, Any], type_hint: str | None) -> tuple[str | None, Any]:
    """One output whole, as ipynb-mcp gives it: a stream as its text (``text/stdout`` or
    ``text/stderr``); an error as ``{ename, evalue, traceback}`` (``application/json``); rich data
    by the hint, else ``text/plain`` first, then an image, else all its data as JSON text."""
    kind = out.get("output_type")
    if kind == "stream":
        return f"text/{out.get('name', 'stdout')}", render.as_text(out.get("text", ""))
    if kind == "error":
        error = {k: out.get(k) for k in ("ename", "evalue", "traceback")}
        return "application/json", error
    data = out.get("data")
    data = data if isinstance(data, dict) else {}
    images = [m for m in render.IMAGE_MIMES if m in data]
    wanted: list[str] = {"image": images, "text": ["text/plain"], "table": ["text/html"]}.get(
        type_hint or "", []
    )
    for mime in [*wanted, "text/plain", *images]:
        if mime in data:
            return mime, render.as_text(data[mime])
    return "application/json", json.dumps(data)


async def get_formatted_content(
    ws: Workspace, caller: Caller, filepath: FilePath
) -> FormattedContent:
    """Retrieves a formatted, summarized view of the entire Jupyter notebook's content, including cell types, source code/markdown, and truncated outputs. This tool is useful for getting a quick overview of the notebook without loading all large outputs. Cells and outputs are numbered from 1."""
    try:
        snap = await ws.notebooks.read(filepath, caller)
    except NbrelayError as exc:
        return FormattedContent(formatted_content="", filepath=filepath, error=exc.render(WORDS))
    return FormattedContent(formatted_content=format_notebook(snap.notebook), filepath=filepath)


async def get_full_output(
    ws: Workspace,
    caller: Caller,
    filepath: NotebookFile,
    cell_index: Annotated[
        int,
        Field(description="The 1-based index of the cell containing the desired output.", ge=1),
    ],
    output_index: Annotated[
        int, Field(description="The 1-based index of the specific output within the cell.", ge=1)
    ],
    type_hint: Annotated[
        Literal["text", "image", "table"] | None,
        Field(
            description='An optional hint about the expected output type ("text", "image", "table").'
        ),
    ] = None,
) -> FullOutput:
    """Fetches the complete, untruncated content of a specific output from a Jupyter notebook cell. This is particularly useful for retrieving full text, image data (base64), or large table outputs (HTML) that are truncated in `get_formatted_content`. Without type_hint, text/plain comes first; an error output is {ename, evalue, traceback}."""
    try:
        snap = await ws.notebooks.read(filepath, caller)
        cell = snap.notebook.cells[_cell_index(snap.notebook, cell_index)]
        outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
        if cell.get("cell_type") != "code" or not outputs:
            raise InvalidArgument(
                f"Cell {cell_index} is not a code cell or has no outputs.",
                hint="Call get_formatted_content to see which cells have outputs.",
            )
        k = _zero_based(output_index, "output_index")
        if k >= len(outputs):
            raise InvalidArgument(
                f"output_index {output_index} is out of range: cell {cell_index} has "
                f"{len(outputs)} output(s).",
                hint="Call get_formatted_content to see the outputs.",
            )
        mime, data = full_output(outputs[k], type_hint)
    except NbrelayError as exc:
        return FullOutput(full_output_data=None, mime_type=None, error=exc.render(WORDS))
    return FullOutput(full_output_data=data, mime_type=mime)


async def edit_cell(
    ws: Workspace,
    caller: Caller,
    filepath: NotebookFile,
    cell_index: Annotated[int, Field(description="The 1-based index of the cell to edit.", ge=1)],
    new_source_content: Annotated[
        str, Field(description="The new source code or markdown content for the cell.")
    ],
) -> Success:
    """Modifies the source content of an existing cell in a Jupyter notebook. When a code cell is edited, its existing outputs are automatically cleared as they become stale. cell_index is 1-based."""
    return await _succeeded(
        filepath,
        lambda: ws.editing.edit_cell(
            filepath,
            caller,
            _zero_based(cell_index, "cell_index"),
            source=new_source_content,
            clear_outputs=True,
        ),
    )


async def add_cell(
    ws: Workspace,
    caller: Caller,
    filepath: NotebookFile,
    cell_index: Annotated[
        int,
        Field(
            description="The 1-based index at which to insert the new cell. Cells at and after this index will be shifted down.",
            ge=0,
        ),
    ],
    cell_type: Annotated[
        Literal["code", "markdown"],
        Field(description='The type of cell to add ("code" or "markdown").'),
    ],
    source_content: Annotated[
        str, Field(description="The initial source content for the new cell.")
    ],
) -> AddCellResult:
    """Adds a new cell (either `code` or `markdown`) to the Jupyter notebook at a specified 1-based index. To append, pass the number of cells + 1; an index past that is refused (new_cell_actual_index -1)."""
    try:
        at = _zero_based(cell_index, "cell_index")
        snap = await ws.notebooks.read(filepath, caller)
        count = len(snap.notebook.cells)
        if at > count:
            raise InvalidArgument(
                f"cell_index {cell_index} is out of range for adding: the notebook has {count} "
                f"cells, so 1-{count + 1} (the last appends).",
                hint=f"Pass cell_index={count + 1} to append.",
            )
        outcome = await ws.editing.insert_cells(
            filepath,
            caller,
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
    caller: Caller,
    filepath: NotebookFile,
    cell_index: Annotated[int, Field(description="The 1-based index of the cell to delete.", ge=1)],
) -> Success:
    """Deletes a cell from the Jupyter notebook at the specified 1-based index."""
    return await _succeeded(
        filepath,
        lambda: ws.editing.delete_cells(filepath, caller, [_zero_based(cell_index, "cell_index")]),
    )


async def merge_cells(
    ws: Workspace,
    caller: Caller,
    filepath: NotebookFile,
    cell_index1: Annotated[int, Field(description="The 1-based index of the first cell.", ge=1)],
    cell_index2: Annotated[
        int,
        Field(
            description="The 1-based index of the second cell, which must be immediately consecutive to `cell_index1` (i.e., `cell_index2 = cell_index1 + 1`).",
            ge=1,
        ),
    ],
) -> Success:
    """Merges two consecutive cells in a Jupyter notebook. The content of the second cell (`cell_index2`) is appended to the first cell (`cell_index1`), and the second cell is then deleted. The merged cell's type will be 'code' if both original cells were 'code', otherwise it will be 'markdown'."""

    async def merge() -> None:
        snap = await ws.notebooks.read(filepath, caller)
        nb = snap.notebook
        first = _cell_index(nb, cell_index1)
        second = _cell_index(nb, cell_index2)
        if second != first + 1:
            raise InvalidArgument(
                f"cell_index2 must be cell_index1 + 1 ({cell_index1 + 1}), not {cell_index2}.",
                hint="Only consecutive cells can be merged.",
            )
        both_code = all(nb.cells[i].get("cell_type") == "code" for i in (first, second))
        merged: Literal["code", "markdown"] = "code" if both_code else "markdown"
        await ws.editing.merge_cells(
            filepath, caller, [first, second], cell_type=merged, expected_version=snap.version
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
