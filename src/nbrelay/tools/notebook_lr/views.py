"""notebook-lr's results: its result models, and cells and outputs in its shape."""

from __future__ import annotations

from typing import Annotated, Any

from mcp_types import ImageContent
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from nbrelay.errors import InvalidArgument
from nbrelay.notebook import render
from nbrelay.notebook.model import Cell
from nbrelay.tools.runs import images_or_skip

INDEX_HINT = "Indexes are zero-based; call list_cells to see the cells."
CUT_HINT = "raise --output-budget to see more"


def omit_null_default(schema: dict[str, Any]) -> None:
    """Publish an optional parameter as the document does: its plain type, no null default."""
    schema.pop("default", None)
    any_of = schema.pop("anyOf", None)
    if isinstance(any_of, list):
        schema.update(next(s for s in any_of if s != {"type": "null"}))


Index = Annotated[int, Field(description="Zero-based index of the cell")]


class CellOutput(BaseModel):
    """Output data from a cell execution."""

    index: int = Field(description="Cell index in the notebook")
    id: str = Field(description="Unique cell identifier")
    type: str = Field(description="Cell type: 'code' or 'markdown'")
    source: str = Field(description="Cell source content")
    outputs: list[dict[str, Any]] = Field(default_factory=list, description="Execution outputs")
    execution_count: int | None = Field(default=None, description="Execution count for code cells")


class NotebookInfo(BaseModel):
    """Information about the notebook."""

    name: str = Field(description="Notebook name")
    cell_count: int = Field(description="Total number of cells")
    code_count: int = Field(description="Number of code cells")
    markdown_count: int = Field(description="Number of markdown cells")
    executed_count: int = Field(description="Number of cells that have been executed")
    version: str = Field(description="Notebook format version")
    path: str | None = Field(default=None, description="File path if loaded/saved")


class CellList(BaseModel):
    """List of cells in the notebook."""

    cells: list[CellOutput] = Field(description="Array of cell data")


class MoveResult(BaseModel):
    ok: bool
    new_index: int


class _Sparse(BaseModel):
    """A result whose optional fields are left out when unset (the seed's 'optionally')."""

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None}


class SaveResult(_Sparse):
    status: str
    path: str
    session: dict[str, Any] | None = None
    note: str | None = None


class VariableList(BaseModel):
    variables: list[dict[str, Any]]
    total: int


class Variable(_Sparse):
    name: str
    type: str
    value: str
    details: dict[str, Any] | None = None


class FoundLine(BaseModel):
    index: int
    id: str
    type: str
    line: int
    text: str


class FindResult(BaseModel):
    matches: list[FoundLine]
    count: int


class ReplaceResult(BaseModel):
    ok: bool
    replacements: int
    cells: list[int]


def zero_based(value: int, name: str = "index") -> int:
    if value < 0:
        raise InvalidArgument(
            f"Cell index {value} out of range: {name} is zero-based (0 is the first cell).",
            hint=INDEX_HINT,
        )
    return value


def output_view(out: dict[str, Any], budget: render.Budget) -> dict[str, Any]:
    """One nbformat output in notebook-lr's shape, its text readable and within ``budget``."""
    kind = str(out.get("output_type", ""))
    shown = render.output_text(out, budget.window)
    text, cut, any_shown = budget.take_output(shown, CUT_HINT)
    view: dict[str, Any] = {"type": kind}
    if kind == "stream":
        view["name"] = out.get("name", "stdout")
        view["text"] = text
    elif kind == "error":
        view["ename"] = out.get("ename", "")
        view["evalue"] = out.get("evalue", "")
        view["traceback"] = text.split("\n") if text else []
    else:
        view["data"] = {"text/plain": text}
        if shown.image:
            view["image"] = shown.image
        if kind == "execute_result":
            view["execution_count"] = out.get("execution_count")
    if not any_shown and (shown.text or shown.unread):
        view["omitted"] = f"{cut:,} characters not shown (output budget 0)"
    return view


def cell_output(
    cell: Cell, index: int, budget: render.Budget, outputs: list[dict[str, Any]] | None = None
) -> CellOutput:
    """One cell in notebook-lr's shape (outputs take their texts from ``budget`` one by one:
    share it with ``Budget.share``)."""
    kind = str(cell.get("cell_type", "code"))
    raw = cell.get("outputs") if outputs is None else outputs
    count = cell.get("execution_count")
    return CellOutput(
        index=index,
        id=str(cell["id"]),
        type=kind,
        source=str(cell.get("source", "")),
        outputs=[output_view(o, budget) for o in raw or [] if isinstance(o, dict)],
        execution_count=count if isinstance(count, int) else None,
    )


def images_of(outputs: list[dict[str, Any]]) -> list[ImageContent]:
    """A cell's raster images as MCP image content (downscaled past the size limits)."""
    found: list[ImageContent] = []
    for out in outputs:
        data = out.get("data")
        if not isinstance(data, dict):
            continue
        mime = next((m for m in render.IMAGE_MIMES if m in data and m != "image/svg+xml"), None)
        if mime is not None:
            value = data[mime]
            images_or_skip(mime, "".join(value) if isinstance(value, list) else value, found)
    return found


def with_images(model: CellOutput, outputs: list[dict[str, Any]]) -> Any:
    pictures = images_of(outputs)
    return (model, *pictures) if pictures else model
