"""The canonical tools that run code: execution, handles, outputs, kernels and their state.

Registered by ``canonical.register``. Long runs send MCP progress notifications with what the
cell printed (at least every 10 s) and, past ``wait`` seconds, return a handle to poll.
Cancelling the MCP request interrupts the kernel.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from nbrelay.errors import InvalidArgument
from nbrelay.kernels.base import KernelInfo
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.tools import apps
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.arguments import NbPath, Ref, Wait
from nbrelay.tools.results import ExecutionResult, iso
from nbrelay.tools.runs import execution_view, follow, image_content, joined_text
from nbrelay.tools.runs import run_after_edit as run_after_edit
from nbrelay.workspace import Workspace


class KernelView(BaseModel):
    path: str
    kernel: str
    state: str
    pid: int | None = None
    cwd: str | None = None
    started: str | None = None
    last_activity: str | None = None
    restarts: int | None = None


class SpecView(BaseModel):
    name: str
    display_name: str
    language: str


class KernelList(BaseModel):
    kernels: list[KernelView]
    kernelspecs: list[SpecView]


class KernelResult(BaseModel):
    path: str
    kernel: KernelView | None = None
    note: str
    execution: ExecutionResult | None = None


class Variables(BaseModel):
    path: str
    total: int
    variables: list[dict[str, Any]]


class VariableView(BaseModel):
    path: str
    name: str
    info: dict[str, Any]


class InstallResult(BaseModel):
    path: str
    python: str
    ok: bool
    log: str


class StateResult(BaseModel):
    path: str
    names: list[str]
    skipped: dict[str, str] | None = None
    note: str


class OutputRead(BaseModel):
    path: str
    cell: int
    id: str
    output: int
    type: str
    mime: str
    total: int
    offset: int
    text: str | None = None
    next_offset: int | None = None


def kernel_view(info: KernelInfo) -> KernelView:
    return KernelView(
        path=info.key,
        kernel=info.name,
        state=info.state,
        pid=info.pid,
        cwd=info.cwd,
        started=iso(info.started),
        last_activity=iso(info.last_activity),
        restarts=info.restarts or None,
    )


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the tools that run code."""

    @reg.tool(kind="execute", example=False, meta=apps.VIEW_META)
    async def execute(
        path: NbPath,
        ctx: Context,
        cells: Annotated[
            list[int | str] | None,
            Field(description='Index, id or "a:b"; [":"] or "all" = every cell.'),
        ] = None,
        code: Annotated[str | None, Field(description="Scratch code, not stored.")] = None,
        wait: Wait = None,
        timeout: Annotated[  # noqa: ASYNC109 - the cells' time limit, not this call's
            float | None, Field(gt=0, description="Seconds per cell.")
        ] = None,
        stop_on_error: bool = True,
        images: bool = False,
    ) -> Any:
        """Run cells or scratch `code` in the notebook's kernel; outputs are saved.

        Past `wait` s it returns a `handle` for get_execution and keeps running. Example: execute(path="a.ipynb", cells=["a1b2c3d4", "3:5"]).
        """
        if cells is None and code is None:
            raise InvalidArgument(
                "no cells and no code given: execute runs only what it is asked to run.",
                hint='To run every cell pass cells=[":"] (or cells="all"); some cells: '
                'cells=[0, "a1b2c3d4", "2:5"]; scratch code: code="print(1)".',
            )
        job = await ws.execute(
            path, cells, code=code, time_limit=timeout, stop_on_error=stop_on_error
        )
        await follow(ws, job, wait, ctx)
        result = execution_view(ws, job, images=images)
        if apps.wants_view(ctx):  # the notebook as the run left it, for the client's view
            ran = [c.id for c in job.cells if c.id is not None]
            return apps.with_view(ctx, result, await ws.read(job.path), ran=ran)
        return result

    # Polling and listing kernels belong with running code: --no-execute and --read-only drop them.
    @reg.tool(kind="execute", example=False)
    async def get_execution(handle: str, ctx: Context, wait: Wait = None) -> Any:
        """Poll a run by handle: waits up to `wait` s; returns only new output. Example: get_execution(handle="x1", wait=30)."""
        job = ws.job(handle)
        await follow(ws, job, wait, ctx)
        return execution_view(ws, job)

    @reg.tool(kind="execute", example=False)
    async def cancel_execution(handle: str) -> Any:
        """Stop a run: interrupt its cell, skip the rest. Example: cancel_execution(handle="x1")."""
        job = ws.job(handle)
        await ws.cancel_job(job)
        return execution_view(ws, job)

    @reg.tool(kind="read", example=False)
    async def read_output(
        path: NbPath,
        cell: Ref,
        output: Annotated[int, Field(ge=0)] = 0,
        offset: Annotated[int, Field(ge=0)] = 0,
        length: Annotated[int | None, Field(ge=1)] = None,
    ) -> Any:
        """Read one output (0-based) in full, or a character slice; images as images.

        Example: read_output(path="a.ipynb", cell=3, offset=6000, length=6000).
        """
        snap = await ws.read(path)
        i = resolve_one(snap.notebook.ids, cell)
        outs = snap.notebook.cells[i].get("outputs") or []
        if output >= len(outs):
            raise InvalidArgument(
                f"cell {i} has {len(outs)} output(s); output {output} does not exist.",
                hint="Outputs are numbered from 0, as read_cell shows them.",
            )
        out = outs[output]
        mime, value = render.full_output(out)
        base = OutputRead(
            path=snap.path,
            cell=i,
            id=snap.notebook.ids[i],
            output=output,
            type=str(out.get("output_type")),
            mime=mime,
            total=0,
            offset=offset,
        )
        if mime.startswith("image/") and mime != "image/svg+xml":
            base.total = render.image_bytes_len(str(value))
            return (base, image_content(mime, str(value)))
        text = joined_text(value)
        end = len(text) if length is None else min(offset + length, len(text))
        base.total, base.text = len(text), text[offset:end]
        base.next_offset = end if end < len(text) else None
        return base

    @reg.tool(kind="execute", example=False)
    async def interrupt_kernel(path: NbPath) -> KernelResult:
        """Interrupt the running cell (Ctrl-C); variables are kept. Example: interrupt_kernel(path="a.ipynb")."""
        info = await ws.interrupt_kernel(path)
        return KernelResult(path=info.key, kernel=kernel_view(info), note="interrupted")

    @reg.tool(kind="destructive", example=False)
    async def restart_kernel(
        path: NbPath,
        ctx: Context,
        clear_outputs: bool = False,
        run_all: bool = False,
        shutdown: bool = False,
    ) -> KernelResult:
        """Restart the kernel (variables lost), optionally clear outputs and run all; shutdown=true stops it.

        Example: restart_kernel(path="a.ipynb", run_all=true).
        """
        if shutdown:
            stopped = await ws.shutdown_kernel(path)
            note = "kernel shut down" if stopped else "the notebook had no running kernel"
            return KernelResult(path=ws.relative(path), note=note)
        info = await ws.restart_kernel(path)
        result = KernelResult(path=info.key, kernel=kernel_view(info), note="kernel restarted")
        if clear_outputs:
            await ws.clear_outputs(path)
        if run_all:
            job = await ws.execute(path, [":"])
            await follow(ws, job, None, ctx)
            view = execution_view(ws, job)
            result.execution = view if isinstance(view, ExecutionResult) else view[0]
        return result

    @reg.tool(kind="inspect", example=False)
    async def list_kernels() -> KernelList:
        """List running kernels (one per notebook) and kernelspecs. Example: list_kernels()."""
        running, specs = await ws.list_kernels()
        return KernelList(
            kernels=[kernel_view(k) for k in running],
            kernelspecs=[
                SpecView(name=s.name, display_name=s.display_name, language=s.language)
                for s in specs
            ],
        )

    @reg.tool(kind="inspect", example=False)
    async def list_variables(path: NbPath) -> Variables:
        """List the kernel's variables: name, type, short value, size (Python). Example: list_variables(path="a.ipynb")."""
        found = await ws.list_variables(path, limit=200)
        rows = [{k: v for k, v in r.items() if v is not None} for r in found["rows"]]
        return Variables(path=ws.relative(path), total=found["total"], variables=rows)

    @reg.tool(kind="inspect", example=False)
    async def inspect_variable(path: NbPath, name: str) -> VariableView:
        """Inspect a variable: type, shape, dtype, columns, len, repr. Example: inspect_variable(path="a.ipynb", name="df")."""
        info = await ws.inspect_variable(path, name, limit=4000)
        return VariableView(path=ws.relative(path), name=name, info=info)

    @reg.tool(kind="execute", example=False)
    async def install_packages(
        path: NbPath,
        packages: Annotated[list[str], Field(description='PEP 508: ["pandas>=2"].')],
    ) -> InstallResult:
        """pip-install into the kernel's Python; options (-e, --index-url) are refused.

        Example: install_packages(path="a.ipynb", packages=["polars>=1"]).
        """
        python, code, log = await ws.install_packages(path, packages)
        return InstallResult(path=ws.relative(path), python=python, ok=code == 0, log=log)

    @reg.tool(kind="execute", example=False)
    async def save_kernel_state(path: NbPath) -> StateResult:
        """Save the kernel's variables (dill) next to the notebook. Example: save_kernel_state(path="a.ipynb")."""
        found = await ws.save_kernel_state(path)
        names = [*found.get("saved", []), *found.get("modules", [])]
        return StateResult(
            path=ws.relative(path),
            names=sorted(names),
            skipped=found.get("skipped") or None,
            note=f"saved {len(names)} names ({found.get('bytes', 0):,} bytes)",
        )

    @reg.tool(kind="execute", example=False)
    async def restore_kernel_state(path: NbPath) -> StateResult:
        """Load the variables save_kernel_state saved. Example: restore_kernel_state(path="a.ipynb")."""
        found = await ws.restore_kernel_state(path)
        names = list(found.get("restored", []))
        return StateResult(
            path=ws.relative(path),
            names=names,
            skipped=found.get("failed") or None,
            note=f"restored {len(names)} names",
        )
