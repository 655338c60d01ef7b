"""The canonical profile: nbrelay's own tool set (the default).

Each tool is thin: parse arguments, call the workspace, shape the result. Docstrings are what the
model reads; they say the index base, the defaults and give an example.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from nbrelay.errors import InvalidArgument
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.notebook.edits import CellSpec
from nbrelay.tools import live, results, services
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.results import (
    CellRead,
    EditResult,
    NotebookList,
    NotebookView,
    SearchResult,
)
from nbrelay.workspace import Workspace

NbPath = Annotated[str, Field(description="Notebook path relative to the root.")]
Ref = Annotated[
    int | str,
    Field(description="Cell: 0-based index (-1 = last) or cell id."),
]
Refs = Annotated[
    list[int | str],
    Field(description="Cells: 0-based indexes, cell ids, or ranges 'start:end' (end excluded)."),
]
Version = Annotated[
    str | None,
    Field(description="`version` from your last read; refused if it changed since."),
]


class NewCell(BaseModel):
    """A cell to insert."""

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


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the canonical editing tools."""
    from nbrelay.tools import execution  # it builds on this module's argument types

    @reg.tool(kind="read")
    async def list_notebooks(
        folder: Annotated[str, Field(description="Folder relative to the root.")] = "",
        recursive: bool = True,
        pattern: Annotated[
            str | None, Field(description="Glob on the path, e.g. '*/eda*'.")
        ] = None,
    ) -> NotebookList:
        """List the notebooks (.ipynb) under the root, with size in bytes and last-modified time (UTC).

        Searches sub-folders unless recursive=false; hidden files are never listed.
        Example: list_notebooks(folder="reports").
        """
        return results.notebook_list(
            folder, await ws.list_notebooks(folder, recursive=recursive, pattern=pattern)
        )

    @reg.tool(kind="write")
    async def create_notebook(
        path: NbPath,
        cells: NewCells | None = None,
        kernel: Annotated[str, Field(description="Kernelspec name.")] = "python3",
        overwrite: Annotated[bool, Field(description="Replace an existing file.")] = False,
    ) -> EditResult:
        """Create a new notebook, optionally with cells. Refuses to replace an existing file unless overwrite=true.

        Folders are created as needed. Example: create_notebook(path="eda.ipynb", cells=["import pandas as pd", {"type": "markdown", "source": "# EDA"}]).
        """
        snap = await ws.create_notebook(
            path, specs(cells or []), kernel_name=kernel, overwrite=overwrite
        )
        changed = [results.CellLoc(index=i, id=c) for i, c in enumerate(snap.notebook.ids)]
        return EditResult(path=snap.path, version=snap.version, changed=changed)

    @reg.tool(kind="read")
    async def read_notebook(
        path: NbPath,
        start: Annotated[int, Field(ge=0, description="First cell index (0-based).")] = 0,
        limit: Annotated[int, Field(ge=1, le=500, description="Cells to return.")] = 50,
        full: Annotated[bool, Field(description="Whole sources, outputs and metadata.")] = False,
        output_budget: Annotated[
            int | None, Field(ge=0, description="Max output characters.")
        ] = None,
    ) -> NotebookView:
        """Read a notebook: an overview of its cells (id, type, first lines, output summary), or full cells.

        Returns `version` for expected_version and `next_start` when more cells remain. Long
        outputs are cut in the middle within output_budget; read_output gives them whole.
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
        return NotebookView(
            path=snap.path,
            version=snap.version,
            cell_count=len(cells),
            kernel=snap.notebook.kernel_name,
            cells=views,
            next_start=end if end < len(cells) else None,
            note=results.snapshot_note(snap),
            problems=list(snap.problems) or None,
        )

    @reg.tool(kind="read")
    async def read_cell(
        path: NbPath,
        cell: Ref,
        output_budget: Annotated[
            int | None, Field(ge=0, description="Max output characters.")
        ] = None,
    ) -> CellRead:
        """Read one cell in full: source, metadata and outputs (cut within output_budget).

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

    @reg.tool(kind="write")
    async def insert_cells(
        path: NbPath,
        cells: NewCells,
        index: Annotated[
            int | None, Field(description="Insert before this 0-based index; default: append.")
        ] = None,
        after: Annotated[
            int | str | None, Field(description="Insert right after this cell (index or id).")
        ] = None,
        expected_version: Version = None,
        execute: Annotated[bool, Field(description="Then run the new code cells.")] = False,
        ctx: Context | None = None,
    ) -> EditResult:
        """Insert one or more cells (code, markdown or raw). Appends unless index or after is given.

        Returns the new cells' ids and indexes. Example: insert_cells(path="eda.ipynb", after="a1b2c3d4", cells=["df.describe()"]).
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

    @reg.tool(kind="write")
    async def edit_cell(
        path: NbPath,
        cell: Ref,
        source: Annotated[str | None, Field(description="New whole source.")] = None,
        find: Annotated[
            str | None, Field(description="Exact text to replace (must occur once).")
        ] = None,
        replace: Annotated[str | None, Field(description="Replacement for find.")] = None,
        replace_all: bool = False,
        cell_type: Literal["code", "markdown", "raw"] | None = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Keys to merge; null deletes.")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="New tag list.")] = None,
        expected_version: Version = None,
        execute: Annotated[bool, Field(description="Then run the cell.")] = False,
        ctx: Context | None = None,
    ) -> EditResult:
        """Change one cell: its whole source, a literal find/replace inside it, its type, metadata or tags.

        Prefer find/replace for small changes: it returns a diff and fails if the text is absent
        or ambiguous. Outputs are kept. Example: edit_cell(path="eda.ipynb", cell=3, find="head()", replace="head(10)").
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

    @reg.tool(kind="destructive")
    async def delete_cells(
        path: NbPath, cells: Refs, expected_version: Version = None
    ) -> EditResult:
        """Delete cells by index, id or range; undo can restore them.

        Example: delete_cells(path="eda.ipynb", cells=[0, "a1b2c3d4", "5:8"]).
        """
        return results.edit_result(
            await ws.delete_cells(path, cells, expected_version=expected_version)
        )

    @reg.tool(kind="write")
    async def move_cells(
        path: NbPath,
        cells: Refs,
        to: Annotated[
            int, Field(ge=0, description="0-based index the first moved cell will have.")
        ],
        expected_version: Version = None,
    ) -> EditResult:
        """Move cells (kept in their order) so the first lands at index `to`.

        Example: move cells 5 and 6 to the top: move_cells(path="eda.ipynb", cells=["5:7"], to=0).
        """
        return results.edit_result(
            await ws.move_cells(path, cells, to, expected_version=expected_version)
        )

    @reg.tool(kind="write")
    async def merge_cells(
        path: NbPath,
        cells: Refs,
        separator: Annotated[str, Field(description="Text put between sources.")] = "\n",
        expected_version: Version = None,
    ) -> EditResult:
        """Merge adjacent cells into the first one (which keeps its id and type); code outputs are cleared.

        Example: merge_cells(path="eda.ipynb", cells=["2:4"]).
        """
        outcome = await ws.merge_cells(
            path, cells, separator=separator, expected_version=expected_version
        )
        return results.edit_result(outcome)

    @reg.tool(kind="write")
    async def split_cell(
        path: NbPath,
        cell: Ref,
        lines: Annotated[list[int], Field(description="0-based lines that start a new cell.")],
        expected_version: Version = None,
    ) -> EditResult:
        """Split a cell before each given line; the first part keeps the id, outputs are cleared.

        Example: a 10-line cell into lines 0-3 and 4-9: split_cell(path="eda.ipynb", cell=2, lines=[4]).
        """
        return results.edit_result(
            await ws.split_cell(path, cell, lines, expected_version=expected_version)
        )

    @reg.tool(kind="destructive")
    async def clear_outputs(
        path: NbPath,
        cells: Annotated[list[int | str] | None, Field(description="Cells; default: all.")] = None,
        expected_version: Version = None,
    ) -> EditResult:
        """Clear outputs and execution counts of code cells (all cells by default).

        Example: clear_outputs(path="eda.ipynb", cells=["3:6"]).
        """
        return results.edit_result(
            await ws.clear_outputs(path, cells, expected_version=expected_version)
        )

    @reg.tool(kind="read")
    async def search_notebook(
        path: NbPath,
        pattern: Annotated[str, Field(description="Text, or a regex with regex=true.")],
        regex: bool = False,
        case_sensitive: bool = False,
        outputs: Annotated[bool, Field(description="Also search outputs.")] = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> SearchResult:
        """Find lines matching text or a regex across a notebook's cells; each match gives the cell index, id and 0-based line.

        Example: search_notebook(path="eda.ipynb", pattern="read_csv").
        """
        snap, matches = await ws.search(
            path, pattern, regex=regex, case_sensitive=case_sensitive, outputs=outputs
        )
        return results.search_result(snap, matches, limit)

    @reg.tool(kind="write")
    async def replace_in_notebook(
        path: NbPath,
        find: Annotated[str, Field(description="Text, or a regex with regex=true.")],
        replace: Annotated[str, Field(description="Replacement; regex: \\1, \\g<name>.")],
        cells: Annotated[list[int | str] | None, Field(description="Cells; default: all.")] = None,
        regex: bool = False,
        case_sensitive: bool = True,
        expected_version: Version = None,
    ) -> EditResult:
        """Find and replace across a notebook's cell sources (all cells, or the ones given) in one edit; returns each changed cell's diff.

        Outputs are kept; one undo step reverts it. Refuses if nothing matches.
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

    @reg.tool(kind="destructive")
    async def undo(
        path: NbPath,
        steps: Annotated[int, Field(ge=1, le=1000, description="How many changes to revert.")] = 1,
        expected_version: Version = None,
    ) -> EditResult:
        """Revert the last `steps` cell edits nbrelay made to a notebook in this session.

        Refuses if a cell involved was changed since (by anyone). Outputs and executions are not
        undone. Example: undo(path="eda.ipynb", steps=2).
        """
        done = await ws.undo(path, steps, expected_version=expected_version)
        result = results.edit_result(done.outcome)
        result.undone = list(done.labels)
        return result

    execution.register(reg, ws)
    services.register(reg, ws)
    live.register(reg, ws)
