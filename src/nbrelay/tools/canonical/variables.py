"""What the kernel holds: its variables, saving and restoring them, a value shown as a picture."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp_types import ImageContent
from pydantic import BaseModel, Field

from nbrelay.caller import Caller
from nbrelay.tools.arguments import NbPath, Ref
from nbrelay.tools.results import VisualData
from nbrelay.workspace import Workspace


class Variables(BaseModel):
    path: str
    total: int
    variables: list[dict[str, Any]]


class VariableView(BaseModel):
    path: str
    name: str
    info: dict[str, Any]


class StateResult(BaseModel):
    path: str
    names: list[str]
    skipped: dict[str, str] | None = None
    note: str


class VisualResult(VisualData):
    path: str
    cell: str


async def list_variables(ws: Workspace, caller: Caller, path: NbPath) -> Variables:
    """List the kernel's variables: name, type, short value, size (Python). Example: list_variables(path="a.ipynb")."""
    found = await ws.inspect.list_variables(path, caller, limit=200)
    rows = [{k: v for k, v in r.items() if v is not None} for r in found["rows"]]
    return Variables(path=ws.notebooks.relative(path), total=found["total"], variables=rows)


async def inspect_variable(ws: Workspace, caller: Caller, path: NbPath, name: str) -> VariableView:
    """Inspect a variable: type, shape, dtype, columns, len, repr. Example: inspect_variable(path="a.ipynb", name="df")."""
    info = await ws.inspect.inspect_variable(path, caller, name, limit=4000)
    return VariableView(path=ws.notebooks.relative(path), name=name, info=info)


async def save_kernel_state(ws: Workspace, caller: Caller, path: NbPath) -> StateResult:
    """Save the kernel's variables (dill) next to the notebook. Example: save_kernel_state(path="a.ipynb")."""
    found = await ws.inspect.save_kernel_state(path, caller)
    names = [*found.get("saved", []), *found.get("modules", [])]
    return StateResult(
        path=ws.notebooks.relative(path),
        names=sorted(names),
        skipped=found.get("skipped") or None,
        note=f"saved {len(names)} names ({found.get('bytes', 0):,} bytes)",
    )


async def restore_kernel_state(ws: Workspace, caller: Caller, path: NbPath) -> StateResult:
    """Load the variables save_kernel_state saved. Example: restore_kernel_state(path="a.ipynb")."""
    found = await ws.inspect.restore_kernel_state(path, caller)
    names = list(found.get("restored", []))
    return StateResult(
        path=ws.notebooks.relative(path),
        names=names,
        skipped=found.get("failed") or None,
        note=f"restored {len(names)} names",
    )


async def visualize_cell(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cell: Ref,
    type: Literal["auto", "chart", "table", "graph"] = "auto",
    options: Annotated[
        dict[str, Any] | None,
        Field(description="x, y, chart (line|bar|scatter|hist|pie), title, max_rows, expression."),
    ] = None,
) -> Any:
    """Show a run cell's last expression as a chart or graph image, or as table rows.

    Example:
    visualize_cell(path="eda.ipynb", cell="a1b2c3d4", options={"x": "month", "chart": "bar"}).
    """
    done = await ws.inspect.visualize_cell(path, caller, cell, kind=type, options=options)
    png = done.pop("png", None)
    result = VisualResult(**done)
    if png is None:
        return result
    result.rows = None  # the picture shows them
    return result, ImageContent(type="image", data=png, mime_type="image/png")
