"""Executions that can outlast a tool call: a job runs cells one after another on a ``Runner``.

A ``Job`` is created by ``Runs.execute`` and runs in the workspace's task group, so a tool
call can return a handle after ``wait`` seconds while the cells keep running. While it runs, the
job folds each cell's messages into outputs (``notebook/outputs.py``), wakes whoever waits for new
output, and saves outputs through the ``save`` callback at most every ``save_interval`` seconds
(so a viewer, or a crash, sees progress) and when each cell ends.

``CellRun.delivered`` remembers how much of each output an agent has already been shown, so a
poll returns only what is new.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, NbrelayError
from nbrelay.kernels.base import Msg
from nbrelay.kernels.execution import Outcome, Runner
from nbrelay.notebook.outputs import Limits, Output, RunOutputs

# As execution.Status, and: queued (waiting: for the kernel, or for earlier cells of its run),
# running, skipped (not run: an earlier cell of its run failed, with stop_on_error).
CellStatus = Literal[
    "queued",
    "running",
    "ok",
    "error",
    "interrupted",
    "aborted",
    "timeout",
    "cancelled",
    "died",
    "skipped",
]
# Called with {cell id: (outputs, execution_count)}; returns the notebook's new version.
Save = Callable[[Mapping[str, tuple[list[Output], int | None]]], Awaitable[str | None]]


class JobObserver(Protocol):
    """Told of everything a job does as it happens (the workspace journals runs with one)."""

    def cell_started(self, job: Job, cell: CellRun) -> None: ...
    def sent(self, job: Job, cell: CellRun) -> None: ...
    def message(self, job: Job, cell: CellRun, msg: Msg) -> None: ...
    def seen(self, job: Job, cell: CellRun, msg: Msg) -> None: ...
    def gap(self, job: Job, cell: CellRun, count: int) -> None: ...
    def cell_ended(self, job: Job, cell: CellRun) -> None: ...
    def ended(self, job: Job) -> None: ...


@dataclass
class CellRun:
    """One cell of a job (``id`` is None for scratch code, which is never stored)."""

    id: str | None
    index: int
    source: str
    status: CellStatus = "queued"
    execution_count: int | None = None
    message: str = ""
    seconds: float = 0.0
    delivered: dict[int, int] = field(default_factory=dict)
    # Whether the kernel counts the run in its history ([n]); None: only notebook cells do.
    history: bool | None = None
    # The execute request's message id, once sent (a run resumed by a new nbrelay process
    # follows the request with this id to its end instead of sending it again).
    msg_id: str | None = None

    @property
    def key(self) -> str:
        return self.id or "<scratch>"


class Job:
    """A run of one or more cells; see the module docstring."""

    def __init__(
        self,
        handle: str,
        path: str,
        cells: list[CellRun],
        *,
        kernel: str,
        timeout: float | None,
        stop_on_error: bool = True,
        limits: Limits | None = None,
    ) -> None:
        self.handle = handle
        self.path = path
        self.cells = cells
        self.kernel = kernel
        self.timeout = timeout
        self.stop_on_error = stop_on_error
        self.outputs = RunOutputs(limits or Limits())
        self.started = time.monotonic()
        self.finished: float | None = None
        self.done = anyio.Event()
        self.stop = anyio.Event()
        self.version: str | None = None
        self.error: str | None = None
        self.state_lost = False
        self.notes: list[str] = []
        # A run resumed after nbrelay died: the id of the last kernel message the dead process
        # handled (from its journal), and, per cell key, how many kernel messages may be
        # missing from that cell's outputs (``kernels.sequence``).
        self.kernel_msg: str | None = None
        self.missing: dict[str, int] = {}
        self.observer: JobObserver | None = None
        self._changed = anyio.Event()
        self._dirty: set[str] = set()

    @property
    def scratch(self) -> bool:
        return len(self.cells) == 1 and self.cells[0].id is None

    @property
    def state(self) -> Literal["queued", "running", "done"]:
        if self.done.is_set():
            return "done"
        if all(c.status == "queued" for c in self.cells):
            return "queued"
        return "running"

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def current(self) -> CellRun | None:
        return next((c for c in self.cells if c.status == "running"), None)

    def cell_outputs(self, cell: CellRun) -> list[Output]:
        return self.outputs.cell(cell.key).outputs()

    def printed(self) -> int:
        """Characters of output received so far (all cells)."""
        return sum(c.printed for c in self.outputs.cells.values())

    def tail_text(self, limit: int = 400) -> str:
        """The end of what the running (or last) cell printed, for progress messages."""
        from nbrelay.notebook.render import output_text

        cell = self.current() or next(
            (c for c in reversed(self.cells) if c.status != "queued"), None
        )
        if cell is None:
            return ""
        text = "".join(output_text(o).text for o in self.cell_outputs(cell)).rstrip()
        return text[-limit:]

    async def changed(self, seconds: float) -> None:
        """Wait until new output arrives or the job ends (at most ``seconds``)."""
        if self.done.is_set():
            return
        with anyio.move_on_after(seconds):
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _feed(self, cell: CellRun, msg: Msg) -> None:
        if self.observer is not None:
            self.observer.message(self, cell, msg)
        changed = self.outputs.feed(cell.key, msg)
        if changed:
            self._dirty.update(k for k in changed if k != "<scratch>")
            self._notify()

    def _seen(self, cell: CellRun, msg: Msg) -> None:
        if self.observer is not None:
            self.observer.seen(self, cell, msg)

    def _gap(self, cell: CellRun, count: int) -> None:
        self.missing[cell.key] = self.missing.get(cell.key, 0) + count
        if self.observer is not None:
            self.observer.gap(self, cell, count)
        self._notify()

    def _pending(self) -> dict[str, tuple[list[Output], int | None]]:
        by_key = {c.key: c for c in self.cells}
        out = {}
        for key in sorted(self._dirty):
            cell = by_key.get(key)
            if cell is not None and cell.id is not None:
                out[cell.id] = (self.cell_outputs(cell), cell.execution_count)
        self._dirty.clear()
        return out


async def run_job(
    job: Job, runner: Runner, save: Save, caller: Caller, *, save_interval: float = 2.0
) -> None:
    """Run the job's cells in order for ``caller`` (who started it: the interrupts and restarts
    it needs are made for them); always ends with ``job.done`` set."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_save_periodically, job, save, save_interval)
            try:
                await _run_cells(job, runner, caller)
            finally:
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await _flush(job, save)
    finally:
        job.finished = time.monotonic()
        if job.observer is not None:
            job.observer.ended(job)
        job.done.set()
        job._notify()


async def _run_cells(job: Job, runner: Runner, caller: Caller) -> None:
    for cell in job.cells:
        resume = cell.msg_id if cell.status == "running" else None
        if cell.status != "queued" and resume is None:
            continue  # a resumed job: this cell ended before
        if job.stop.is_set() or job.error:
            cell.status = "cancelled" if job.stop.is_set() else "skipped"
            continue
        if runner.busy:
            # Another run holds the kernel: this cell stays queued, and says behind what.
            cell.message = f"waiting for the kernel, busy with {runner.holder}"
            job._notify()

        def start(cell: CellRun = cell, resume: str | None = resume) -> None:
            cell.status = "running"
            cell.message = ""
            if cell.id is not None:
                # As in JupyterLab: a cell's old outputs go when it starts running.
                job.outputs.cell(cell.key)
                job._dirty.add(cell.key)
            if job.observer is not None and resume is None:
                job.observer.cell_started(job, cell)
            job._notify()

        def sent(msg_id: str, cell: CellRun = cell) -> None:
            cell.msg_id = msg_id
            if job.observer is not None:
                job.observer.sent(job, cell)

        if cell.id is not None and not cell.source.strip():
            # As JupyterLab and nbclient: an empty cell is not sent to the kernel, so it gets
            # no execution count (and, as in JupyterLab, no outputs).
            job.outputs.cell(cell.key)
            _record(job, cell, Outcome(status="ok", steps=["empty: nothing to run"]))
            continue
        label = f"run {job.handle}" + (f", cell {cell.index}" if cell.id is not None else "")
        try:
            outcome = await runner.execute(
                cell.source,
                lambda msg, c=cell: job._feed(c, msg),  # type: ignore[misc]
                caller=caller,
                time_limit=job.timeout,
                stop=job.stop,
                silent=False,
                store_history=cell.id is not None if cell.history is None else cell.history,
                label=label,
                on_start=start,
                on_sent=sent,
                resume=resume,
                on_seen=lambda msg, c=cell: job._seen(c, msg),  # type: ignore[misc]
                resume_after=job.kernel_msg,
                on_gap=lambda count, c=cell: job._gap(c, count),  # type: ignore[misc]
            )
        except KernelError as exc:
            cell.status = "died"
            cell.message = exc.message
            job.error = str(exc)
            job.state_lost = True
            if job.observer is not None:
                job.observer.cell_ended(job, cell)
            continue
        _record(job, cell, outcome)
        if job.stop.is_set():
            continue  # the run was cancelled: the cells after this one are marked cancelled
        if outcome.status != "ok" and job.stop_on_error:
            job.error = f"cell {cell.index} ended with {outcome.status}"


def _record(job: Job, cell: CellRun, outcome: Outcome) -> None:
    cell.status = outcome.status
    cell.execution_count = outcome.execution_count
    cell.message = outcome.message
    cell.seconds = outcome.seconds
    if outcome.state_lost:
        job.state_lost = True
    if cell.id is not None:
        job._dirty.add(cell.key)
    if job.observer is not None:
        job.observer.cell_ended(job, cell)
    job._notify()


async def _save_periodically(job: Job, save: Save, interval: float) -> None:
    while True:
        await anyio.sleep(interval)
        # A save under way finishes even if the run ends meanwhile: cancelled half-way, it would
        # drop the outputs it took (they are no longer pending) and what its write reported
        # (the notebook upgraded on the way). Every store bounds its own waits.
        with anyio.CancelScope(shield=True):
            await _flush(job, save)


async def _flush(job: Job, save: Save) -> None:
    pending = job._pending()
    if not pending:
        return
    try:
        version = await save(pending)
    except NbrelayError as exc:  # a failed save must not stop the run; the agent is told
        note = f"outputs could not be saved to the notebook: {exc}"
        if note not in job.notes:
            job.notes.append(note)
        return
    if version is not None:
        job.version = version
