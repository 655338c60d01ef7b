"""notebook-lr's notebook tools: its info, save and load (with the kernel's session state),
running cells, and the kernel's variables."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, NotebookExists
from nbrelay.notebook.model import new_notebook
from nbrelay.tools.notebook_lr.context import Current, ran_cells
from nbrelay.tools.notebook_lr.views import (
    CellList,
    CellOutput,
    Index,
    NotebookInfo,
    SaveResult,
    Variable,
    VariableList,
    omit_null_default,
    output_view,
    with_images,
    zero_based,
)


async def get_notebook_info(lr: Current, caller: Caller) -> NotebookInfo:
    """Get information about the current notebook.

    Returns:
        NotebookInfo with metadata including name, cell counts, and version
    """
    snap = await lr.snapshot(caller)
    if snap is None:
        return lr.info(None, new_notebook())
    return lr.info(snap.path, snap.notebook)


async def save_notebook(
    lr: Current,
    caller: Caller,
    path: Annotated[
        str | None,
        Field(
            description="File path to save to (.nblr format)",
            json_schema_extra=omit_null_default,
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
        lr.no_code("include_session")
    source = lr.path
    target = lr.where(path) if path else source
    note = None
    if target != source:
        nb = await lr.notebook(caller)
        try:
            await lr.ws.notebooks.create_from(target, caller, nb, overwrite=False)
        except NotebookExists as exc:
            exc.hint = (
                "save_notebook never replaces another notebook: save to a new path, or "
                "load_notebook it first to work on it."
            )
            raise
        lr.path = target
        if not include_session and lr.ws.kernels.kernel_info(source) is not None:
            note = await lr.carry_kernel(caller, source, target)
    elif await lr.snapshot(caller) is None:
        with contextlib.suppress(NotebookExists):
            await lr.ws.notebooks.create_notebook(target, caller)
    if not include_session:
        return SaveResult(status="saved", path=target, note=note)
    carried = target != source and lr.ws.kernels.kernel_info(source) is not None
    found = await lr.ws.inspect.save_kernel_state(source if carried else target, caller, to=target)
    if carried:
        await lr.ws.inspect.restore_kernel_state(target, caller)
        await lr.ws.kernels.shutdown_kernel(source, caller)
    session: dict[str, Any] = {
        "variables": sorted([*found.get("saved", []), *found.get("modules", [])]),
    }
    if found.get("skipped"):
        session["skipped"] = found["skipped"]
    return SaveResult(status="saved with session", path=target, session=session)


async def execute_cell(lr: Current, caller: Caller, index: Index, ctx: Context) -> Any:
    """Execute a code cell and store its outputs in the notebook.

    Args:
        index: Zero-based index of the cell

    Returns:
        CellOutput with the cell's new outputs and execution count (images also come as
        image content)

    Raises:
        ValueError: If index is out of range, the cell is not code, or the run timed out
    """
    zero_based(index)
    job = await lr.on_current(lambda p: lr.ws.runs.execute(p, caller, [index]))
    await lr.run(job, ctx)
    cell = job.cells[0]
    outputs = job.cell_outputs(cell)
    model = CellOutput(
        index=cell.index,
        id=cell.id or "",
        type="code",
        source=cell.source,
        outputs=lr.budget().share(lambda b: [output_view(o, b) for o in outputs]),
        execution_count=cell.execution_count,
    )
    return with_images(model, outputs)


async def execute_all(lr: Current, caller: Caller, ctx: Context) -> CellList:
    """Execute every code cell in order, stopping at the first cell that raises.

    Returns:
        CellList with the cells that ran, in order, with their new outputs

    Raises:
        ValueError: If a cell timed out or the kernel died
    """
    nb = await lr.notebook(caller)
    if not any(c.get("cell_type") == "code" for c in nb.cells):
        return CellList(cells=[])
    job = await lr.on_current(lambda p: lr.ws.runs.execute(p, caller, None))
    await lr.run(job, ctx)
    return lr.budget().share(
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
                for c in ran_cells(job)
            ]
        )
    )


async def load_notebook(
    lr: Current,
    caller: Caller,
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
    target = lr.where(path)
    snap = await lr.ws.notebooks.read(target, caller)
    if include_session:
        lr.no_code("include_session")
        await lr.ws.inspect.restore_kernel_state(target, caller)
    lr.path = target
    return lr.info(snap.path, snap.notebook)


async def list_variables(lr: Current, caller: Caller) -> VariableList:
    """List the variables defined in the kernel.

    Returns:
        Dict with 'variables' (each with name, type, value preview and size) and 'total'
    """
    if await lr.snapshot(caller) is None:  # no notebook, so nothing has run
        return VariableList(variables=[], total=0)
    found = await lr.ws.inspect.list_variables(lr.path, caller, limit=200)
    rows = [{k: v for k, v in r.items() if v is not None} for r in found["rows"]]
    return VariableList(variables=rows, total=found["total"])


async def get_variable(
    lr: Current,
    caller: Caller,
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
    if await lr.snapshot(caller) is None:
        raise InvalidArgument(
            f"the kernel has no variable named {name!r}: no code has run yet.",
            hint="Run cells with execute_cell or execute_all first.",
        )
    found = dict(await lr.ws.inspect.inspect_variable(lr.path, caller, name, limit=4000))
    kind = str(found.pop("type", ""))
    value = str(found.pop("repr", ""))
    return Variable(name=name, type=kind, value=value, details=found or None)
