"""Profile ``notebook-lr``: the tool set of notebook-lr's MCP server, exactly.

notebook-lr works on one *current notebook*, so its tools take no path. Here the current notebook
is ``--notebook`` (default ``notebook.ipynb`` under the root, created by the first edit);
``load_notebook`` switches to another one, and ``save_notebook(path=...)`` saves a copy that
becomes the current notebook. Every edit is saved at once, as notebook-lr's server did. Indexes are
zero-based; errors are MCP tool errors (FastMCP turned the original's ``ValueError`` into those).
Outputs keep notebook-lr's shape (``{"type": "stream", "name", "text"}``,
``{"type": "execute_result", "data", "execution_count"}``, ``{"type": "error", "ename", "evalue",
"traceback"}``) with their text made readable and cut within the output budget; ``get_cell`` and
``execute_cell`` also send a cell's images as image content.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context
from mcp_types import ImageContent
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from nbrelay.errors import (
    CellNotFound,
    InvalidArgument,
    KernelError,
    NbrelayError,
    NotebookExists,
    NotebookNotFound,
    PathError,
    Unsupported,
    Vocabulary,
)
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import address, moves, render
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import Cell, Notebook, new_notebook
from nbrelay.stores.base import Snapshot
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.execution import follow, images_or_skip
from nbrelay.workspace import Workspace

T = TypeVar("T")

INDEX_HINT = "Indexes are zero-based; call list_cells to see the cells."
_AGAIN = "Call list_cells to see the notebook as it is now, then retry."
# How errors say things here (see nbrelay.errors): this profile's tools, zero-based indexes.
WORDS = Vocabulary(
    {
        "index_rule": "Indexes are zero-based.",
        "see_cells": "Call list_cells to see the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "reread_cell": "Read the cell again (get_cell_source) and redo your edit on its current "
        "source, or change only the text you mean with replace_in_cells.",
        "missing": "Check the path: it is relative to the root folder.",
        "read_it": "Load it with load_notebook.",
        "read_later": "Load it with load_notebook in a minute, or save under another name.",
        "restart": "run the cell again (a new kernel starts)",
        "interrupt": "wait for it to end",
        "start_kernel": "Run a cell with execute_cell to start one.",
        "save_state": "Save it first with save_notebook(include_session=true).",
        "run_first": "Run it first (execute_cell)",
    }
)
CUT_HINT = "raise --output-budget to see more"
FAILED = ("timeout", "died", "cancelled", "interrupted")


def _omit_null_default(schema: dict[str, Any]) -> None:
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


@dataclass
class _Current:
    """The notebook the path-less tools act on (shared by every client of this server)."""

    path: str


def _as_ipynb(path: str) -> str:
    """In live mode a Jupyter Server holds the notebooks, and it knows only .ipynb: there a
    .nblr name means the .ipynb of the same name."""
    return path[: -len(".nblr")] + ".ipynb" if path.endswith(".nblr") else path


def _zero_based(value: int, name: str = "index") -> int:
    if value < 0:
        raise InvalidArgument(
            f"Cell index {value} out of range: {name} is zero-based (0 is the first cell).",
            hint=INDEX_HINT,
        )
    return value


def output_view(out: dict[str, Any], budget: render.Budget) -> dict[str, Any]:
    """One nbformat output in notebook-lr's shape, its text readable and within ``budget``."""
    kind = str(out.get("output_type", ""))
    shown = render.output_text(out)
    text, _, any_shown = budget.take(shown.text, CUT_HINT)
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
    if not any_shown and shown.text:
        view["omitted"] = f"{len(shown.text):,} characters not shown (output budget 0)"
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


def _with_images(model: CellOutput, outputs: list[dict[str, Any]]) -> Any:
    pictures = images_of(outputs)
    return (model, *pictures) if pictures else model


def _ran(job: Job) -> list[CellRun]:
    return [c for c in job.cells if c.status not in ("queued", "skipped")]


def _check_finished(job: Job) -> None:
    """A run that timed out, lost its kernel or was stopped is an error, as in notebook-lr."""
    for cell in job.cells:
        if cell.status in FAILED:
            raise KernelError(
                f"Cell {cell.index} did not finish: {cell.message or cell.status}.",
                hint=f"The output it printed is saved in the cell (get_cell(index={cell.index})).",
            )
    if not job.done.is_set():
        raise KernelError(
            "the run did not end in time.", hint="Call execute_cell again once it has finished."
        )


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the notebook-lr tools."""
    reg.exact = True
    reg.words = WORDS
    settings = ws.settings

    def where(path: str) -> str:
        """A notebook path as the store names it: .nblr files where the store keeps them (file
        mode), else the .ipynb of the same name (see _as_ipynb)."""
        try:
            return ws.relative(path)
        except PathError:
            if path == _as_ipynb(path):
                raise
            return ws.relative(_as_ipynb(path))

    current = _Current(where(settings.notebook))

    def budget() -> render.Budget:
        return render.Budget(settings.output_budget, settings.output_budget)

    async def snapshot() -> Snapshot | None:
        try:
            return await ws.read(current.path)
        except NotebookNotFound:
            return None

    async def notebook() -> Notebook:
        snap = await snapshot()
        return snap.notebook if snap is not None else new_notebook()

    async def on_current(op: Callable[[str], Awaitable[T]]) -> T:
        """Run ``op`` on the current notebook; one not created yet has no cells (nothing is
        created by a call that fails)."""
        try:
            return await op(current.path)
        except NotebookNotFound as exc:
            raise CellNotFound(
                f"the notebook has no cells: {current.path} does not exist yet.",
                hint="add_cell creates it with its first cell.",
            ) from exc

    def info(path: str | None, nb: Notebook) -> NotebookInfo:
        cells = nb.cells
        name = (nb.data.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            name = "Untitled"  # notebook-lr: notebook.metadata.get("name", "Untitled")
        return NotebookInfo(
            name=name,
            cell_count=len(cells),
            code_count=sum(1 for c in cells if c.get("cell_type") == "code"),
            markdown_count=sum(1 for c in cells if c.get("cell_type") == "markdown"),
            executed_count=sum(1 for c in cells if c.get("execution_count") is not None),
            version=f"{nb.data.get('nbformat', 4)}.{nb.data.get('nbformat_minor', 0)}",
            path=path,
        )

    async def carry_kernel(source: str, target: str) -> str | None:
        """notebook-lr has one kernel for the notebook being worked on: after a save under a
        new name the variables must still be there. The kernel's variables move to the new
        notebook's kernel (saved and restored); what cannot move is said in the note."""
        try:
            found = await ws.save_kernel_state(source, to=target)
            await ws.restore_kernel_state(target)
        except NbrelayError as exc:  # not a Python kernel, no dill, a state it cannot read
            return (
                f"The kernel's variables stay with {source} ({exc.message}); cells run now start "
                "a fresh kernel."
            )
        await ws.shutdown_kernel(source)
        skipped = found.get("skipped") or []
        if skipped:
            names = ", ".join(sorted(skipped))
            return f"The kernel's variables moved with the notebook, except: {names}."
        return None

    def no_code(what: str) -> None:
        if settings.no_execute or settings.read_only:
            raise Unsupported(
                f"{what} runs code in the kernel, and this server was started with "
                f"{'--read-only' if settings.read_only else '--no-execute'}.",
                hint="Call it with include_session=false.",
            )

    async def run(job: Job, ctx: Context | None) -> None:
        wait = job.timeout + settings.interrupt_grace + 60 if job.timeout else None
        await follow(ws, job, wait, ctx)
        if not job.done.is_set():
            await ws.cancel_job(job)
        _check_finished(job)

    # -- Cell Content Operations ------------------------------------------------------------

    @reg.tool(kind="read")
    async def get_cell_source(index: Index) -> str:
        """Get the source content of a cell at the specified index.

        Args:
            index: Zero-based index of the cell

        Returns:
            The cell's source code as a string

        Raises:
            ValueError: If index is out of range
        """
        nb = await notebook()
        return str(nb.cells[address.resolve_one(nb.ids, _zero_based(index))].get("source", ""))

    @reg.tool(kind="write")
    async def update_cell_source(
        index: Index, source: Annotated[str, Field(description="New source code to set")]
    ) -> bool:
        """Update the source content of a cell at the specified index.

        Args:
            index: Zero-based index of the cell
            source: New source code to set

        Returns:
            True if successful

        Raises:
            ValueError: If index is out of range
        """
        await on_current(lambda p: ws.edit_cell(p, _zero_based(index), source=source))
        return True

    # -- Cell Management Operations ---------------------------------------------------------

    @reg.tool(kind="write")
    async def add_cell(
        cell_type: Annotated[
            Literal["code", "markdown"], Field(description="Type of cell to create")
        ] = "code",
        after_index: Annotated[
            int | None,
            Field(
                description="Insert after this index. If not provided, appends to end.",
                json_schema_extra=_omit_null_default,
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
        after = None if after_index is None else _zero_based(after_index, "after_index")
        new = [CellSpec(cell_type, source)]
        if await snapshot() is None:
            # The first cell makes the notebook (live mode: no placeholder cell before it).
            with contextlib.suppress(NotebookExists):
                made = await ws.create_notebook(current.path, new)
                return budget().share(lambda b: cell_output(made.notebook.cells[0], 0, b))
        try:
            outcome = await on_current(lambda p: ws.insert_cells(p, new, after=after))
        except CellNotFound:  # past the last cell: appended, as the document's list insert does
            outcome = await on_current(lambda p: ws.insert_cells(p, new))
        new_id = outcome.plan.touched[0]
        at = outcome.after.notebook.ids.index(new_id)
        return budget().share(lambda b: cell_output(outcome.after.notebook.cells[at], at, b))

    @reg.tool(kind="destructive")
    async def delete_cell(
        index: Annotated[int, Field(description="Zero-based index of the cell to delete")],
    ) -> bool:
        """Delete a cell at the specified index.

        Args:
            index: Zero-based index of the cell to delete

        Returns:
            True if successful

        Raises:
            ValueError: If index is out of range
        """
        await on_current(lambda p: ws.delete_cells(p, [_zero_based(index)]))
        return True

    @reg.tool(kind="write")
    async def move_cell(
        index: Annotated[int, Field(description="Zero-based index of the cell to move")],
        direction: Annotated[
            Literal["up", "down"], Field(description="Direction to move the cell")
        ],
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
        _zero_based(index)

        def planner(nb: Notebook) -> Plan:
            return moves.plan_step(nb, index, direction)

        await on_current(lambda p: ws.edit(p, "move cells", planner, positional=True))
        return MoveResult(ok=True, new_index=moves.step_target(index, direction))

    @reg.tool(kind="read")
    async def get_cell(index: Index) -> Any:
        """Get complete information about a cell at the specified index.

        Args:
            index: Zero-based index of the cell

        Returns:
            CellOutput with all cell properties including outputs

        Raises:
            ValueError: If index is out of range
        """
        nb = await notebook()
        i = address.resolve_one(nb.ids, _zero_based(index))
        cell = nb.cells[i]
        return _with_images(
            budget().share(lambda b: cell_output(cell, i, b)), cell.get("outputs") or []
        )

    @reg.tool(kind="read")
    async def list_cells() -> CellList:
        """Get a list of all cells in the notebook.

        Returns:
            CellList containing an array of all cells with their indices
        """
        nb = await notebook()
        shared = budget()
        return shared.share(
            lambda b: CellList(cells=[cell_output(c, i, b) for i, c in enumerate(nb.cells)])
        )

    # -- Notebook Operations ----------------------------------------------------------------

    @reg.tool(kind="read")
    async def get_notebook_info() -> NotebookInfo:
        """Get information about the current notebook.

        Returns:
            NotebookInfo with metadata including name, cell counts, and version
        """
        snap = await snapshot()
        if snap is None:
            return info(None, new_notebook())
        return info(snap.path, snap.notebook)

    @reg.tool(kind="write")
    async def save_notebook(
        path: Annotated[
            str | None,
            Field(
                description="File path to save to (.nblr format)",
                json_schema_extra=_omit_null_default,
            ),
        ] = None,
        include_session: Annotated[
            bool, Field(description="Whether to include kernel session state")
        ] = False,
    ) -> SaveResult:
        """Save the notebook to a file.

        Args:
            path: File path to save to. If None, uses existing path or 'notebook.nblr'
            include_session: Whether to include kernel session state (default: False)

        Returns:
            Dict with 'status', 'path', and optionally session info
        """
        if include_session:
            no_code("include_session")
        source = current.path
        target = where(path) if path else source
        note = None
        if target != source:
            nb = await notebook()
            try:
                await ws.create_from(target, nb, overwrite=False)
            except NotebookExists as exc:
                exc.hint = (
                    "save_notebook never replaces another notebook: save to a new path, or "
                    "load_notebook it first to work on it."
                )
                raise
            current.path = target
            if not include_session and ws.kernel_info(source) is not None:
                note = await carry_kernel(source, target)
        elif await snapshot() is None:
            with contextlib.suppress(NotebookExists):
                await ws.create_notebook(target)
        if not include_session:
            return SaveResult(status="saved", path=target, note=note)
        carried = target != source and ws.kernel_info(source) is not None
        found = await ws.save_kernel_state(source if carried else target, to=target)
        if carried:
            await ws.restore_kernel_state(target)
            await ws.shutdown_kernel(source)
        session: dict[str, Any] = {
            "variables": sorted([*found.get("saved", []), *found.get("modules", [])]),
        }
        if found.get("skipped"):
            session["skipped"] = found["skipped"]
        return SaveResult(status="saved with session", path=target, session=session)

    # -- The document's future tools --------------------------------------------------------

    @reg.tool(kind="execute")
    async def execute_cell(index: Index, ctx: Context) -> Any:
        """Execute a code cell and store its outputs in the notebook.

        Args:
            index: Zero-based index of the cell

        Returns:
            CellOutput with the cell's new outputs and execution count (images also come as
            image content)

        Raises:
            ValueError: If index is out of range, the cell is not code, or the run timed out
        """
        _zero_based(index)
        job = await on_current(lambda p: ws.execute(p, [index]))
        await run(job, ctx)
        cell = job.cells[0]
        outputs = job.cell_outputs(cell)
        model = CellOutput(
            index=cell.index,
            id=cell.id or "",
            type="code",
            source=cell.source,
            outputs=budget().share(lambda b: [output_view(o, b) for o in outputs]),
            execution_count=cell.execution_count,
        )
        return _with_images(model, outputs)

    @reg.tool(kind="execute")
    async def execute_all(ctx: Context) -> CellList:
        """Execute every code cell in order, stopping at the first cell that raises.

        Returns:
            CellList with the cells that ran, in order, with their new outputs

        Raises:
            ValueError: If a cell timed out or the kernel died
        """
        nb = await notebook()
        if not any(c.get("cell_type") == "code" for c in nb.cells):
            return CellList(cells=[])
        job = await on_current(lambda p: ws.execute(p, None))
        await run(job, ctx)
        return budget().share(
            lambda b: CellList(
                cells=[
                    CellOutput(
                        index=c.index,
                        id=c.id or "",
                        type="code",
                        source=c.source,
                        outputs=[output_view(o, b) for o in job.cell_outputs(c)],
                        execution_count=c.execution_count,
                    )
                    for c in _ran(job)
                ]
            )
        )

    @reg.tool(kind="read")
    async def load_notebook(
        path: Annotated[str, Field(description="File path of the notebook to load")],
        include_session: Annotated[
            bool, Field(description="Whether to restore the kernel session state saved with it")
        ] = False,
    ) -> NotebookInfo:
        """Load a notebook from a file and make it the current notebook.

        Args:
            path: File path of the notebook to load (.nblr or .ipynb)
            include_session: Whether to restore the kernel session state saved with it by
                save_notebook(include_session=True) (default: False)

        Returns:
            NotebookInfo of the loaded notebook

        Raises:
            ValueError: If the file does not exist or is not a valid notebook
        """
        target = where(path)
        snap = await ws.read(target)
        if include_session:
            no_code("include_session")
            await ws.restore_kernel_state(target)
        current.path = target
        return info(snap.path, snap.notebook)

    @reg.tool(kind="execute")
    async def list_variables() -> VariableList:
        """List the variables defined in the kernel.

        Returns:
            Dict with 'variables' (each with name, type, value preview and size) and 'total'
        """
        if await snapshot() is None:  # no notebook, so nothing has run
            return VariableList(variables=[], total=0)
        found = await ws.list_variables(current.path, limit=200)
        rows = [{k: v for k, v in r.items() if v is not None} for r in found["rows"]]
        return VariableList(variables=rows, total=found["total"])

    @reg.tool(kind="execute")
    async def get_variable(
        name: Annotated[str, Field(description="Name of the variable")],
    ) -> Variable:
        """Get the value of a variable defined in the kernel.

        Args:
            name: Name of the variable

        Returns:
            Dict with 'name', 'type', 'value' (its repr, cut past 4000 characters) and 'details'
            (shape, dtype, columns, len when they apply)

        Raises:
            ValueError: If no variable has that name
        """
        if await snapshot() is None:
            raise InvalidArgument(
                f"the kernel has no variable named {name!r}: no code has run yet.",
                hint="Run cells with execute_cell or execute_all first.",
            )
        found = dict(await ws.inspect_variable(current.path, name, limit=4000))
        kind = str(found.pop("type", ""))
        value = str(found.pop("repr", ""))
        return Variable(name=name, type=kind, value=value, details=found or None)

    @reg.tool(kind="write")
    async def convert_cell_type(
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
        outcome = await on_current(
            lambda p: ws.edit_cell(p, _zero_based(index), cell_type=cell_type)
        )
        nb = outcome.after.notebook
        at = nb.ids.index(outcome.plan.touched[0])
        return budget().share(lambda b: cell_output(nb.cells[at], at, b))

    @reg.tool(kind="read")
    async def find_in_cells(
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
            _, found = await ws.search(
                current.path, query, regex=regex, case_sensitive=case_sensitive
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

    @reg.tool(kind="write")
    async def replace_in_cells(
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
            outcome = await ws.replace_in_cells(
                current.path, find, replace, regex=regex, case_sensitive=case_sensitive
            )
        except NotebookNotFound:
            return ReplaceResult(ok=True, replacements=0, cells=[])
        ids = outcome.after.notebook.ids
        changed = sorted(ids.index(c) for c in outcome.plan.touched if c in ids)
        count = int(outcome.plan.detail.get("replacements", 0))
        return ReplaceResult(ok=True, replacements=count, cells=changed)
