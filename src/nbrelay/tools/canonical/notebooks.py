"""Finding, creating and reading notebooks (and the MCP Apps view's own tool)."""

from __future__ import annotations

import json
from typing import Annotated, Any, cast

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from nbrelay.caller import Caller
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.stores.base import Snapshot
from nbrelay.tools import apps, results
from nbrelay.tools.arguments import Budget, NbPath, NewCells, Ref, Version, specs
from nbrelay.tools.results import CellRead, EditResult, NotebookList, NotebookView
from nbrelay.workspace import Workspace


async def list_notebooks(
    ws: Workspace,
    caller: Caller,
    folder: str = "",
    recursive: bool = True,
    pattern: Annotated[
        str | None, Field(description="Glob: 'eda*' (a name, any folder), 'reports/**/*.ipynb'.")
    ] = None,
    start: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=1000)] = 50,
) -> NotebookList:
    """List notebooks (.ipynb) under a folder with size and modified time (UTC); `next_start` if more remain.

    Example: list_notebooks(folder="reports", pattern="*sales*").
    """
    found = await ws.notebooks.list_notebooks(
        folder, caller, recursive=recursive, pattern=pattern, limit=start + limit + 1
    )
    return results.notebook_list(folder, found, start, limit, ws.settings.output_budget)


async def create_notebook(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cells: NewCells | None = None,
    kernel: str = "python3",
    overwrite: bool = False,
) -> EditResult:
    """Create a notebook, optionally with cells; overwrite=true replaces a file.

    Example: create_notebook(path="eda.ipynb", cells=["import pandas as pd", {"cell_type": "markdown", "source": "# EDA"}]).
    """
    # Another kernel than the default must be installed: its notebook could not run otherwise
    # (its display name and language are the kernelspec's, as JupyterLab writes them).
    spec = None if kernel == "python3" else await ws.kernels.installed_spec(kernel, caller)
    snap = await ws.notebooks.create_notebook(
        path,
        caller,
        specs(cells or []),
        kernel_name=kernel,
        language=spec.language if spec else None,
        display_name=spec.display_name if spec else None,
        overwrite=overwrite,
    )
    return results.created_result(snap)


async def read_notebook(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    ctx: Context,
    start: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=500)] = 50,
    full: bool = False,
    output_budget: Budget = None,
) -> NotebookView:
    """Read a notebook: per cell its id, type, first lines, output summary (full=true: whole cells); `next_start` if more remain.

    In all tools: paths are relative to the served folder;
    cells are 0-based indexes (-1 = last) or ids, in lists also 'start:end' ranges (end excluded).
    Edits given this `version` as expected_version refuse if the notebook changed.
    Example: read_notebook(path="eda.ipynb", start=50, full=true).
    """
    snap = await ws.notebooks.read(path, caller)
    cells = snap.notebook.cells
    end = min(start + limit, len(cells))
    views = (
        results.full_views(snap.path, cells, range(start, end), _budget(ws, output_budget))
        if full
        else results.OverviewMemo.of(ws).views(snap.path, cells, start, end)
    )
    view = NotebookView(
        path=snap.path,
        version=snap.version,
        cell_count=len(cells),
        kernel=snap.notebook.kernel_name,
        cells=views,
        next_start=end if end < len(cells) else None,
        note=results.snapshot_note(snap),
        problems=list(snap.problems) or None,
    )
    # A client that shows MCP Apps views gets the same result with the view's data in _meta.
    return cast(NotebookView, apps.with_view(ctx, view, snap))


class NotebookMetadata(BaseModel):
    path: str
    version: str
    metadata: dict[str, Any]
    note: str | None = None


async def notebook_metadata(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    metadata: dict[str, Any] | None = None,
    kernel: str | None = None,
    expected_version: Version = None,
) -> NotebookMetadata:
    """Read or merge notebook-level metadata (null deletes a key); `kernel` switches kernelspec, restarting a running kernel (variables lost).

    Example: notebook_metadata(path="eda.ipynb", kernel="python3", metadata={"title": "EDA"}).
    """
    note = None
    if kernel is not None:
        outcome, note = await ws.kernels.switch_kernel(
            path, caller, kernel, metadata, expected_version=expected_version
        )
    elif metadata is not None:
        outcome = await ws.editing.set_notebook_metadata(
            path, caller, metadata, expected_version=expected_version
        )
    else:
        snap = await ws.notebooks.read(path, caller)
        return _metadata_view(snap, results.snapshot_note(snap))
    said = results.edit_result(outcome).note
    told = note and note[0].upper() + note[1:] + "."
    return _metadata_view(outcome.after, " ".join(n for n in (told, said) if n) or None)


_BIG_VALUE = 10_000  # characters of JSON: widget state and the like, not for reading here


def _metadata_view(snap: Snapshot, note: str | None) -> NotebookMetadata:
    """The notebook's metadata, each value too big to read here (widget state) described."""
    shown: dict[str, Any] = {}
    left_out = []
    for key, value in (snap.notebook.data.get("metadata") or {}).items():
        size = len(json.dumps(value, ensure_ascii=False))
        if size > _BIG_VALUE:
            shown[key] = f"({type(value).__name__} of {size:,} characters of JSON, not shown)"
            left_out.append(key)
        else:
            shown[key] = value
    if left_out:
        keys = ", ".join(repr(k) for k in left_out)
        said = f"{keys} {'is' if len(left_out) == 1 else 'are'} too big to show here."
        note = f"{note} {said}" if note else said
    return NotebookMetadata(path=snap.path, version=snap.version, metadata=shown, note=note)


async def notebook_view(ws: Workspace, caller: Caller, path: NbPath, ctx: Context[Any]) -> Any:
    """For the MCP Apps view only."""
    return await apps.poll(ctx, ws, caller, path)


async def read_cell(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    cell: Ref,
    output_budget: Budget = None,
) -> CellRead:
    """Read one cell whole: source, metadata, outputs (cut to output_budget).

    Example: read_cell(path="eda.ipynb", cell="a1b2c3d4") or read_cell(path="eda.ipynb", cell=-1).
    """
    snap = await ws.notebooks.read(path, caller)
    i = resolve_one(snap.notebook.ids, cell)
    view = results.cell_view(
        snap.notebook.cells[i], i, full=True, budget=_budget(ws, output_budget), path=snap.path
    )
    note = results.snapshot_note(snap)
    return CellRead(path=snap.path, version=snap.version, cell=view, note=note)


def _budget(ws: Workspace, asked: int | None) -> render.Budget:
    """The output budget a read asked for (default: the server's), within the server's."""
    limit = ws.settings.output_budget
    return render.Budget(asked if asked is not None else limit, limit)
