"""Running notebook cells (or scratch code) as jobs: their limits, the outputs they save into
the notebook, and waiting for or cancelling them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anyio

from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, KernelError, NbrelayError
from nbrelay.kernels.jobs import CellRun, Job, run_job
from nbrelay.notebook import address, edits
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.outputs import Limits, Output
from nbrelay.stores.base import EditOutcome, RunState
from nbrelay.workspace.jobbook import JobBook
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels


class Runs:
    """Executions of one workspace: started in its task group, kept in ``jobs``."""

    def __init__(
        self, settings: Settings, notebooks: Notebooks, kernels: Kernels, jobs: JobBook
    ) -> None:
        self._settings = settings
        self._notebooks = notebooks
        self._kernels = kernels
        self.jobs = jobs

    def timeout_for(self, timeout: float | None) -> float:
        """The timeout a run gets: the call's (capped by the maximum) or the default."""
        limit = self._settings.max_execution_timeout
        if timeout is None:
            return min(self._settings.execution_timeout, limit)
        if timeout <= 0:
            raise InvalidArgument("timeout must be more than 0 seconds.")
        if timeout > limit:
            raise InvalidArgument(
                f"timeout {timeout:g} s is over the {limit:g} s maximum this server allows.",
                hint="Ask for less, or start nbrelay with a larger --max-execution-timeout.",
            )
        return timeout

    async def execute(
        self,
        path: str,
        cells: Sequence[CellRef] | None = None,
        *,
        code: str | None = None,
        time_limit: float | None = None,
        stop_on_error: bool = True,
        history: bool = False,
    ) -> Job:
        """Start running cells (``None``: every code cell) or scratch ``code``; return the job.

        The job runs in the background; ``wait_job`` waits for it. Markdown and raw cells named
        in ``cells`` are skipped. Outputs and execution counts are saved into the notebook
        (not into undo history); scratch code leaves the notebook unchanged and, unless
        ``history``, the kernel's execution count too.
        """
        tg = self._kernels.task_group
        if tg is None:
            raise KernelError(
                "code can only run while the server runs.",
                hint="Use the workspace inside `async with workspace.running()`.",
            )
        if code is not None and cells is not None:
            raise InvalidArgument(
                "give either cells (to run notebook cells) or code (scratch code), not both."
            )
        limit = self.timeout_for(time_limit)
        snap = await self._notebooks.read(path)
        nb = snap.notebook
        if code is not None:
            runs = [CellRun(id=None, index=-1, source=code, history=history)]
        else:
            indexes = (
                list(range(len(nb.cells))) if cells is None else address.resolve_many(nb.ids, cells)
            )
            runs = [
                CellRun(id=nb.cells[i]["id"], index=i, source=str(nb.cells[i].get("source", "")))
                for i in indexes
                if nb.cells[i].get("cell_type") == "code"
            ]
            if not runs:
                raise InvalidArgument(
                    "none of the cells given is a code cell, so there is nothing to run.",
                    hint="Markdown and raw cells do not run; give code cells.",
                )
        runner = await self._kernels.runner(snap)
        job = Job(
            self.jobs.new_handle(),
            snap.path,
            runs,
            kernel=runner.session.info.name,
            timeout=limit,
            stop_on_error=stop_on_error,
            limits=Limits(limit=self._settings.cell_output_limit),
        )
        resumed = self._kernels.take_note(snap.path)
        if resumed is not None:
            job.notes.append(resumed.note)
            job.state_lost |= resumed.state_lost
        self.jobs.remember(job)

        # Live mode: outputs stream into the shared cell as they arrive, and the cell shows
        # JupyterLab's run state ([*]) while it runs, reset when the run ends however it ends.
        caps = self._notebooks.capabilities
        shown, interval = caps.run_state, caps.output_interval

        showing: set[str] = set()  # the cells this job shows running

        async def save(done: Mapping[str, tuple[list[Output], int | None]]) -> str | None:
            current = job.current()
            running = {current.id} if current is not None and current.id else set()
            if shown is not None and running != showing:
                # Before the outputs: a cell's last outputs are saved once it shows idle.
                await _show(shown, snap.path, running, showing - running)
                showing.clear()
                showing.update(running)
            outcome = await self._store_outputs(snap.path, done)
            for told in outcome.notes:  # the notebook was upgraded or repaired on this save
                if told not in job.notes:
                    job.notes.append(told)
            return outcome.after.version

        async def run() -> None:
            try:
                await run_job(job, runner, save, save_interval=interval)
            finally:
                if shown is not None:  # no cell of a finished job still shows [*]
                    ids = {c.id for c in job.cells if c.id is not None}
                    with anyio.CancelScope(shield=True):
                        await _show(shown, snap.path, (), ids)

        tg.start_soon(run)
        return job

    async def _store_outputs(
        self, path: str, done: Mapping[str, tuple[list[Output], int | None]]
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            present = set(nb.ids)
            changes = tuple(
                edits.UpdateCell(cid, {"outputs": outs, "execution_count": count})
                for cid, (outs, count) in done.items()
                if cid in present
            )
            return Plan(edits=changes, touched=tuple(c.id for c in changes))

        return await self._notebooks.edit(path, "run", planner, positional=False, record=False)

    def execution_history(self, path: str) -> list[dict[str, Any]]:
        """What ran in a notebook (oldest first, at most ``HISTORY_DEPTH`` cell runs): each
        cell run's job, cell, status, start time, duration and execution count."""
        return self.jobs.history(self._notebooks.relative(path))

    def job(self, handle: str) -> Job:
        return self.jobs.job(handle)

    def jobs_of(self, path: str) -> list[Job]:
        return self.jobs.running(self._notebooks.relative(path))

    async def wait_job(
        self, job: Job, wait: float, on_progress: Any | None = None, *, interval: float = 10.0
    ) -> None:
        """Wait up to ``wait`` seconds for the job to end, calling ``on_progress(job)`` when it
        prints (at most once a second) and at least every ``interval`` seconds."""
        deadline = time.monotonic() + wait
        last = time.monotonic()
        while not job.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await job.changed(min(left, interval))
            now = time.monotonic()
            if on_progress is not None and not job.done.is_set() and now - last >= 1.0:
                last = now
                await on_progress(job)
            if not job.done.is_set() and now - last < 1.0:
                with anyio.move_on_after(min(1.0, max(deadline - now, 0))):
                    await job.done.wait()

    async def cancel_job(self, job: Job, *, wait: float | None = None) -> None:
        """Stop a job: the running cell is interrupted (restarted if it ignores the interrupt)
        and the cells after it do not run."""
        job.stop.set()
        grace = self._settings.interrupt_grace + 5 if wait is None else wait
        with anyio.move_on_after(grace):
            await job.done.wait()


async def _show(
    shown: RunState, path: str, running: Collection[str], idle: Collection[str]
) -> None:
    """Show the run state; a failure costs the person the display only, never the run."""
    with contextlib.suppress(NbrelayError):
        await shown.show_running(path, running, idle)
