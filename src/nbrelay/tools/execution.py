"""The canonical tools that run code: execution, handles, outputs, kernels and their state.

Registered by ``canonical.register``. Long runs send MCP progress notifications with what the
cell printed (at least every 10 s) and, past ``wait`` seconds, return a handle to poll.
Cancelling the MCP request interrupts the kernel.
"""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp_types import ImageContent
from pydantic import BaseModel, Field

from nbrelay.errors import InvalidArgument, KernelError, NbrelayError, NotebookInvalid
from nbrelay.kernels.base import KernelInfo
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import render
from nbrelay.notebook.address import resolve_one
from nbrelay.notebook.text import clean_text
from nbrelay.tools import apps
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.arguments import NbPath, Ref, Wait
from nbrelay.tools.results import ExecutionResult, RunCell, RunOutput, image_pointer, iso
from nbrelay.workspace import Workspace

MAX_IMAGE_SIDE = 1568  # pixels; larger images are downscaled before they are sent
MAX_IMAGE_BYTES = 1_000_000
PROGRESS_EVERY = 10.0


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


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else str(value)


def image_content(mime: str, data: str) -> ImageContent:
    """An MCP image, downscaled (as PNG, or JPEG for photos) when over the size limits."""
    from PIL import Image

    try:
        raw = base64.b64decode(data)
        with Image.open(io.BytesIO(raw)) as img:
            if len(raw) > MAX_IMAGE_BYTES or max(img.size) > MAX_IMAGE_SIDE:
                img.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
                out = io.BytesIO()
                if mime == "image/jpeg":
                    img.convert("RGB").save(out, "JPEG", quality=85)
                else:
                    img.save(out, "PNG", optimize=True)
                    mime = "image/png"
                raw = out.getvalue()
    except (ValueError, OSError, MemoryError, Image.DecompressionBombError) as exc:
        # Bad base64 (binascii.Error is a ValueError), not an image, truncated, or a bomb.
        raise NotebookInvalid(
            f"the output's {mime} image is damaged and cannot be shown ({type(exc).__name__}: "
            f"{str(exc)[:120]}).",
            hint="Its other representations (text/plain) are still readable; run the cell "
            "again to make the image anew.",
        ) from exc
    return ImageContent(mime_type=mime, data=base64.b64encode(raw).decode("ascii"))


def images_or_skip(mime: str, data: str, into: list[ImageContent]) -> None:
    """Add the image to ``into`` unless it is damaged (a list of pictures shows what it can)."""
    with contextlib.suppress(NotebookInvalid):
        into.append(image_content(mime, data))


_Pending = list[tuple[int, dict[str, Any], render.OutputText, int]]


def _pending(job: Job, cell: CellRun) -> _Pending:
    """The outputs of a cell with text not returned before: (index, output, text, offset)."""
    pending: _Pending = []
    for k, out in enumerate(job.cell_outputs(cell)):
        shown = render.output_text(out)
        start = cell.delivered.get(k, 0)
        if start > len(shown.text):
            start = 0
        if start == len(shown.text) and k in cell.delivered:
            continue
        pending.append((k, out, shown, start))
    return pending


def _cell_view(
    job: Job,
    cell: CellRun,
    pending: _Pending,
    budget: render.Budget,
    images: list[ImageContent] | None,
) -> RunCell:
    views: list[RunOutput] = []
    for k, out, shown, start in pending:
        text, cut, any_shown = budget.take(shown.text[start:], "read_output for all of it")
        if shown.image and cell.id is not None and images is None:
            text = f"{text} ({image_pointer(job.path, cell.id, k)})"
        view = RunOutput(
            output=k,
            type=shown.kind,
            text=text,
            name=out.get("name") if out.get("output_type") == "stream" else None,
            image=shown.image,
            offset=start or None,
            cut=cut or None,
        )
        if not any_shown and shown.text:
            view.omitted = f"{len(shown.text) - start:,} characters not shown (output budget 0)"
        cell.delivered[k] = len(shown.text)
        if images is not None and shown.image and shown.image != "image/svg+xml":
            images_or_skip(shown.image, _text(out["data"][shown.image]), images)
        views.append(view)
    status = cell.status
    return RunCell(
        index=cell.index if cell.id is not None else None,
        id=cell.id,
        status=status,
        execution_count=cell.execution_count if cell.id is not None else None,
        seconds=round(cell.seconds, 2) if cell.seconds else None,
        outputs=views or None,
        note=cell.message or None,
    )


def execution_view(
    ws: Workspace, job: Job, *, budget: int | None = None, images: bool = False
) -> ExecutionResult | tuple[ExecutionResult, *tuple[ImageContent, ...]]:
    limit = ws.settings.output_budget
    shared = render.Budget(budget if budget is not None else limit, limit)
    pictures: list[ImageContent] | None = [] if images else None
    # The budget is shared by every output of every cell: a flood in one cell leaves the
    # others their heads (a cell's short result is never crowded out by an earlier one).
    pending = [_pending(job, c) for c in job.cells]
    shared.plan([s.text[start:] for p in pending for _, _, s, start in p])
    cells = [
        _cell_view(job, c, p, shared, pictures) for c, p in zip(job.cells, pending, strict=True)
    ]
    notes = list(job.notes)
    if job.error and job.state == "done" and any(c.status == "skipped" for c in job.cells):
        notes.insert(0, f"stopped early: {job.error}")
    if job.state != "done":
        notes.append(f'still {job.state}: poll get_execution(handle="{job.handle}")')
    if job.state_lost:
        notes.append("the kernel restarted, so its variables were lost")
    unencodable = sum(c.unencodable for c in job.outputs.cells.values())
    if unencodable:
        notes.append(
            f"the kernel sent {unencodable} unpaired surrogate code point(s), which are not valid "
            "Unicode; they are shown and saved as U+FFFD"
        )
    result = ExecutionResult(
        path=job.path,
        status=job.state,
        handle=job.handle if job.state != "done" else None,
        kernel=job.kernel,
        cells=cells,
        version=job.version,
        seconds=round(job.elapsed, 2),
        state_lost=job.state_lost or None,
        note="; ".join(notes) or None,
    )
    if pictures:
        return (result, *pictures)
    return result


async def follow(ws: Workspace, job: Job, wait: float | None, ctx: Context | None) -> None:
    """Wait for a job with progress notifications; a cancelled request stops the job."""
    seconds = ws.settings.execution_wait if wait is None else wait
    sent = 0

    async def progress(j: Job) -> None:
        nonlocal sent
        if ctx is None:
            return
        sent += 1
        current = j.current()
        where = f"cell {current.index} ({current.id}) " if current and current.id else ""
        tail = j.tail_text(300)
        message = f"{where}running {j.elapsed:.0f} s" + (f": …{tail}" if tail else "")
        await ctx.report_progress(sent, None, clean_text(message))

    try:
        await ws.wait_job(job, seconds, progress, interval=PROGRESS_EVERY)
    except anyio.get_cancelled_exc_class():
        job.stop.set()
        raise


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
        text = _text(value)
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


async def run_after_edit(
    ws: Workspace, path: str, ids: list[str], ctx: Context | None
) -> ExecutionResult | None:
    """Run the given cells after an edit (insert-and-run, edit-and-run); None if none is code."""
    snap = await ws.read(path)
    code = [c["id"] for c in snap.notebook.cells if c["id"] in ids and c["cell_type"] == "code"]
    if not code:
        return None
    with saved_then_run():
        job = await ws.execute(path, code)
    await follow(ws, job, None, ctx)
    view = execution_view(ws, job)
    return view if isinstance(view, ExecutionResult) else view[0]


@contextlib.contextmanager
def saved_then_run() -> Iterator[None]:
    """Around starting the run that follows an edit: a failure to start (no such kernel, a
    limit) must say that the edit itself was saved, or the agent would make it twice."""
    try:
        yield
    except NbrelayError as exc:
        raise KernelError(
            f"the change was saved, but its cells could not be run: {exc.message}",
            hint=exc.hint,
        ) from exc
