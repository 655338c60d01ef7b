"""Following a run and showing it, for every profile: progress notifications while it runs,
the execution result (outputs sharing one budget), images as MCP content, and running the cells
an edit touched."""

from __future__ import annotations

import base64
import contextlib
import io
import math
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

import anyio
from mcp.server.mcpserver import Context
from mcp_types import ImageContent

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, NbrelayError, NotebookInvalid
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook import render
from nbrelay.notebook.text import clean_text
from nbrelay.stores.base import EditOutcome
from nbrelay.tools.results import (
    EditResult,
    ExecutionResult,
    RunCell,
    RunOutput,
    add_run,
    edit_result,
    image_pointer,
)
from nbrelay.workspace import Workspace

MAX_IMAGE_SIDE = 1568  # pixels; larger images are downscaled before they are sent
MAX_IMAGE_BYTES = 1_000_000
PROGRESS_EVERY = 10.0
# The images one run result carries at most (base64 characters: one image as large as
# MAX_IMAGE_BYTES, or many plots); past it, an image's text says which read_output call returns it.
RUN_IMAGE_CHARS = 1_400_000


class RunWatch(Protocol):
    """Who follows a tool call that runs as an MCP task (``nbrelay.tools.tasks``): told the job
    the call runs and its progress messages, which the task's status carries instead of
    progress notifications (a task's request has already been answered)."""

    def job(self, job: Job) -> None: ...

    def progress(self, message: str) -> None: ...


# Set while a tool call runs as a task: its runs are followed to their end, not for ``wait`` s.
watching: ContextVar[RunWatch | None] = ContextVar("nbrelay_run_watch", default=None)


def joined_text(value: Any) -> str:
    """An nbformat multiline string (a string or a list of strings) as one string."""
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


def _attach(mime: str, data: str, into: list[ImageContent]) -> bool:
    """Add the image, downscaled, to a run's ``into`` unless it is damaged or the images
    already there fill ``RUN_IMAGE_CHARS``; whether it was added."""
    try:
        image = image_content(mime, data)
    except NotebookInvalid:
        return False
    if sum(len(i.data) for i in into) + len(image.data) > RUN_IMAGE_CHARS:
        return False
    into.append(image)
    return True


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
        text, cut, any_shown = budget.take(shown.text[start:], "read_output pages through it")
        sent = False
        if images is not None and shown.image and shown.image != "image/svg+xml":
            sent = _attach(shown.image, joined_text(out["data"][shown.image]), images)
        if shown.image and cell.id is not None and not sent:
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
        described: dict[str, Any] = {}
        render.describe(described, out, cut=cut)
        view.size, view.mimes = described.get("size"), described.get("mimes")
        if not any_shown and shown.text:
            view.omitted = f"{len(shown.text) - start:,} characters not shown (output budget 0)"
        cell.delivered[k] = len(shown.text)
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


def missing_note(job: Job) -> str | None:
    """The line telling that a run resumed after nbrelay died may lack output: the kernel
    sent messages the new process never received (``kernels.sequence``; "may", because the
    kernel's count includes replies to other clients)."""
    by_key = {c.key: c for c in job.cells}
    told = []
    for key, count in job.missing.items():
        cell = by_key.get(key)
        where = f"cell {cell.index}" if cell is not None and cell.id is not None else "this code"
        told.append(
            f"{where}: {count} kernel message(s) sent while nbrelay restarted may be missing "
            "from its output"
        )
    return "; ".join(told) or None


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
    gap = missing_note(job)
    if gap is not None:
        notes.append(gap)
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
        note=_clauses(notes),
    )
    if pictures:
        return (result, *pictures)
    return result


def progress_reporter(ctx: Context | None) -> Callable[[str], Awaitable[None]] | None:
    """Send each message as an MCP progress notification of the request (numbered 1, 2, …; the
    SDK sends nothing when the client asked for no progress); None without a request."""
    watch = watching.get()
    if watch is not None:  # a task: its status carries the progress

        async def tell(message: str) -> None:
            watch.progress(clean_text(message))

        return tell
    if ctx is None:
        return None
    sent = 0

    async def report(message: str) -> None:
        nonlocal sent
        sent += 1
        await ctx.report_progress(sent, None, clean_text(message))

    return report


async def follow(ws: Workspace, job: Job, wait: float | None, ctx: Context | None) -> None:
    """Wait for a job with progress notifications; a cancelled request stops the job. In a
    task (``watching``) the job is followed to its end and its progress goes to the task."""
    seconds = ws.settings.execution_wait if wait is None else wait
    watch = watching.get()
    if watch is not None:
        watch.job(job)
        seconds = math.inf
    sent = 0

    async def progress(j: Job) -> None:
        nonlocal sent
        if ctx is None or watch is not None:
            return
        sent += 1
        current = j.current()
        where = f"cell {current.index} ({current.id}) " if current and current.id else ""
        tail = j.tail_text(300)
        message = f"{where}running {j.elapsed:.0f} s" + (f": …{tail}" if tail else "")
        gap = missing_note(j)
        if gap is not None:
            message = f"{gap}. {message}"
        await ctx.report_progress(sent, None, clean_text(message))

    try:
        await ws.runs.wait_job(job, seconds, progress, interval=PROGRESS_EVERY)
    except anyio.get_cancelled_exc_class():
        job.stop.set()
        raise


async def run_after_edit(
    ws: Workspace, caller: Caller, path: str, ids: list[str], ctx: Context | None
) -> ExecutionResult | None:
    """Run the given cells after an edit (insert-and-run, edit-and-run); None if none is code."""
    snap = await ws.notebooks.read(path, caller)
    code = [c["id"] for c in snap.notebook.cells if c["id"] in ids and c["cell_type"] == "code"]
    if not code:
        return None
    with saved_then_run():
        job = await ws.runs.execute(path, caller, code)
    return await finished(ws, job, ctx)


async def finished(ws: Workspace, job: Job, ctx: Context | None) -> ExecutionResult:
    """A run followed to its end (progress notifications on the way), as its result."""
    await follow(ws, job, None, ctx)
    view = execution_view(ws, job)
    return view if isinstance(view, ExecutionResult) else view[0]


async def edited(
    ws: Workspace,
    caller: Caller,
    path: str,
    outcome: EditOutcome,
    ctx: Context | None,
    *,
    execute: bool,
) -> EditResult:
    """An edit's result; with ``execute``, the code cells it touched are run first and that run
    is attached (insert-and-run, edit-and-run)."""
    result = edit_result(outcome)
    if execute:
        add_run(result, await run_after_edit(ws, caller, path, list(outcome.plan.touched), ctx))
    return result


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


def _clauses(notes: list[str]) -> str | None:
    """A run's notes as one text: clauses joined by "; ", a sentence a store wrote (an upgrade,
    a repair: it starts with a capital) after a full stop."""
    text = ""
    for note in notes:
        if text:
            text = text.rstrip(".") + (". " if note[:1].isupper() else "; ")
        text += note
    return text or None
