"""The canonical profile: nbrelay's own tool set (the default).

Each tool is thin: parse arguments, call the workspace, shape the result. Docstrings are what the
model reads; they say the index base, the defaults and give an example.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from mcp.server.mcpserver import Context
from pydantic import Field

from nbrelay.errors import InvalidArgument
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.tools import apps, execution, live, results, services
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.arguments import (
    Budget,
    NbPath,
    NewCells,
    Ref,
    Refs,
    Version,
    compact_listing,
    specs,
)
from nbrelay.tools.results import (
    CellRead,
    EditResult,
    NotebookList,
    NotebookView,
    SearchResult,
)
from nbrelay.workspace import Workspace


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the canonical editing tools."""
    reg.brief = True

    @reg.tool(kind="read", example=False)
    async def list_notebooks(
        folder: str = "",
        recursive: bool = True,
        pattern: Annotated[str | None, Field(description="Glob, e.g. '*/eda*'.")] = None,
    ) -> NotebookList:
        """List notebooks (.ipynb) under a folder with size and modified time (UTC).

        Example: list_notebooks(folder="reports").
        """
        return results.notebook_list(
            folder, await ws.list_notebooks(folder, recursive=recursive, pattern=pattern)
        )

    @reg.tool(kind="write", example=False)
    async def create_notebook(
        path: NbPath,
        cells: NewCells | None = None,
        kernel: str = "python3",
        overwrite: bool = False,
    ) -> EditResult:
        """Create a notebook, optionally with cells; overwrite=true replaces a file.

        Example: create_notebook(path="eda.ipynb", cells=["import pandas as pd", {"type": "markdown", "source": "# EDA"}]).
        """
        snap = await ws.create_notebook(
            path, specs(cells or []), kernel_name=kernel, overwrite=overwrite
        )
        changed = [results.CellLoc(index=i, id=c) for i, c in enumerate(snap.notebook.ids)]
        return EditResult(path=snap.path, version=snap.version, changed=changed)

    @reg.tool(kind="read", example=False, meta=apps.VIEW_META)
    async def read_notebook(
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
        snap = await ws.read(path)
        cells = snap.notebook.cells
        end = min(start + limit, len(cells))
        budget = render.Budget(
            output_budget if output_budget is not None else ws.settings.output_budget,
            ws.settings.output_budget,
        )
        views = (
            results.full_views(snap.path, cells, range(start, end), budget)
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

    apps.add_view_tool(reg, ws)

    @reg.tool(kind="read", example=False)
    async def read_cell(
        path: NbPath,
        cell: Ref,
        output_budget: Budget = None,
    ) -> CellRead:
        """Read one cell whole: source, metadata, outputs (cut to output_budget).

        Example: read_cell(path="eda.ipynb", cell="a1b2c3d4") or read_cell(path="eda.ipynb", cell=-1).
        """
        snap = await ws.read(path)
        i = resolve_one(snap.notebook.ids, cell)
        budget = render.Budget(
            output_budget if output_budget is not None else ws.settings.output_budget,
            ws.settings.output_budget,
        )
        view = results.cell_view(
            snap.notebook.cells[i], i, full=True, budget=budget, path=snap.path
        )
        note = results.snapshot_note(snap)
        return CellRead(path=snap.path, version=snap.version, cell=view, note=note)

    @reg.tool(kind="write", example=False)
    async def insert_cells(
        path: NbPath,
        cells: NewCells,
        index: Annotated[
            int | None, Field(description="Before this index; default: append.")
        ] = None,
        after: Annotated[int | str | None, Field(description="Or after this cell.")] = None,
        expected_version: Version = None,
        execute: bool = False,
        ctx: Context | None = None,
    ) -> EditResult:
        """Insert cells; returns their ids and indexes.

        Example: insert_cells(path="eda.ipynb", after="a1b2c3d4", cells=["df.describe()"]).
        """
        if execute:
            ws.require_execution()
        outcome = await ws.insert_cells(
            path, specs(cells), index=index, after=after, expected_version=expected_version
        )
        result = results.edit_result(outcome)
        if execute:
            ran = await execution.run_after_edit(ws, path, list(outcome.plan.touched), ctx)
            results.add_run(result, ran)
        return result

    @reg.tool(kind="write", example=False)
    async def edit_cell(
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
            ws.require_execution()
        outcome = await ws.edit_cell(
            path,
            cell,
            source=source,
            find=find,
            replace=replace,
            replace_all=replace_all,
            cell_type=cell_type,
            metadata=metadata,
            tags=tags,
            expected_version=expected_version,
        )
        result = results.edit_result(outcome)
        if execute:
            ran = await execution.run_after_edit(ws, path, list(outcome.plan.touched), ctx)
            results.add_run(result, ran)
        return result

    @reg.tool(kind="destructive", example=False)
    async def delete_cells(
        path: NbPath, cells: Refs, expected_version: Version = None
    ) -> EditResult:
        """Delete cells; undo can restore them.

        Example: delete_cells(path="eda.ipynb", cells=[0, "a1b2c3d4", "5:8"]).
        """
        return results.edit_result(
            await ws.delete_cells(path, cells, expected_version=expected_version)
        )

    @reg.tool(kind="write", example=False)
    async def move_cells(
        path: NbPath,
        cells: Refs,
        to: Annotated[int, Field(ge=0)],
        expected_version: Version = None,
    ) -> EditResult:
        """Move cells (kept in order) so the first lands at index `to`.

        Example (cells 5 and 6 to the top): move_cells(path="eda.ipynb", cells=["5:7"], to=0).
        """
        return results.edit_result(
            await ws.move_cells(path, cells, to, expected_version=expected_version)
        )

    @reg.tool(kind="write", example=False)
    async def merge_cells(
        path: NbPath,
        cells: Refs,
        separator: str = "\n",
        expected_version: Version = None,
    ) -> EditResult:
        """Merge adjacent cells into the first (keeps its id and type); clears outputs.

        Example: merge_cells(path="eda.ipynb", cells=["2:4"]).
        """
        outcome = await ws.merge_cells(
            path, cells, separator=separator, expected_version=expected_version
        )
        return results.edit_result(outcome)

    @reg.tool(kind="write", example=False)
    async def split_cell(
        path: NbPath,
        cell: Ref,
        lines: list[int],
        expected_version: Version = None,
    ) -> EditResult:
        """Split a cell before each 0-based line in `lines`; the first part keeps the id; clears outputs.

        Example (lines 0-3 and 4-9): split_cell(path="eda.ipynb", cell=2, lines=[4]).
        """
        return results.edit_result(
            await ws.split_cell(path, cell, lines, expected_version=expected_version)
        )

    @reg.tool(kind="destructive", example=False)
    async def clear_outputs(
        path: NbPath,
        cells: Refs | None = None,
        expected_version: Version = None,
    ) -> EditResult:
        """Clear outputs and execution counts (default: all cells).

        Example: clear_outputs(path="eda.ipynb", cells=["3:6"]).
        """
        return results.edit_result(
            await ws.clear_outputs(path, cells, expected_version=expected_version)
        )

    @reg.tool(kind="read", example=False)
    async def search_notebook(
        path: NbPath,
        pattern: Annotated[str, Field(description="Text, or a regex with regex=true.")],
        regex: bool = False,
        case_sensitive: bool = False,
        outputs: Annotated[bool, Field(description="Also search outputs.")] = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> SearchResult:
        """Find lines matching text or a regex: cell index, id and 0-based line of each.

        Example: search_notebook(path="eda.ipynb", pattern="read_csv").
        """
        snap, matches = await ws.search(
            path, pattern, regex=regex, case_sensitive=case_sensitive, outputs=outputs
        )
        return results.search_result(snap, matches, limit)

    @reg.tool(kind="write", example=False)
    async def replace_in_notebook(
        path: NbPath,
        find: Annotated[str, Field(description="Text, or a regex with regex=true.")],
        replace: Annotated[str, Field(description="Regex: \\1, \\g<name>.")],
        cells: Refs | None = None,
        regex: bool = False,
        case_sensitive: bool = True,
        expected_version: Version = None,
    ) -> EditResult:
        """Find and replace in cell sources (default: all cells) as one edit; returns diffs, keeps outputs.

        Example: rename a variable: replace_in_notebook(path="eda.ipynb", find="\\bdf\\b", replace="sales", regex=true).
        """
        outcome = await ws.replace_in_cells(
            path,
            find,
            replace,
            regex=regex,
            case_sensitive=case_sensitive,
            cells=cells,
            expected_version=expected_version,
        )
        if not outcome.plan.detail.get("replacements"):
            where = "the cells given" if cells is not None else "any cell's source"
            raise InvalidArgument(
                f"{find!r} does not occur in {where}; nothing was changed.",
                hint="search_notebook shows where text occurs; check case_sensitive and regex.",
            )
        return results.edit_result(outcome)

    @reg.tool(kind="destructive", example=False)
    async def undo(
        path: NbPath,
        steps: Annotated[int, Field(ge=1, le=1000)] = 1,
        expected_version: Version = None,
    ) -> EditResult:
        """Undo your last `steps` edits (not runs); refuses if a cell involved changed since.

        Example: undo(path="eda.ipynb", steps=2).
        """
        done = await ws.undo(path, steps, expected_version=expected_version)
        result = results.edit_result(done.outcome)
        result.undone = list(done.labels)
        return result

    execution.register(reg, ws)
    services.register(reg, ws)
    live.register(reg, ws)
    for tool in reg.tools:  # what tools/list sends (call arguments are checked separately)
        tool.parameters = compact_listing(tool.parameters)
        if tool.annotations is not None and tool.annotations.open_world_hint is False:
            # Hosts judge approval by readOnly/destructive; "no external world" is implied by
            # a notebook tool and costs every agent 22 bytes a tool.
            hints = tool.annotations.model_copy(update={"open_world_hint": None})
            tool.annotations = hints if hints.model_dump(exclude_none=True) else None
