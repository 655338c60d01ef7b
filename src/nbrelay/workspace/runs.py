"""Running notebook cells (or scratch code) as jobs: their limits, the outputs they save into
the notebook, and waiting for or cancelling them.

Every run is journaled as it goes (``workspace.journal``), so a handle this process does not
hold (a run of another nbrelay process on the same root, or of one that ended) is read from its
journal: followed while the other process runs it, cancelled through it, and, when the process
that ran it died, told as it ended (see ``_orphaned``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, KernelError, NbrelayError
from nbrelay.kernels.execution import Runner
from nbrelay.kernels.jobs import CellRun, Job, run_job
from nbrelay.notebook import address, edits
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.outputs import Limits, Output
from nbrelay.stores.base import EditOutcome, RunState
from nbrelay.workspace.jobbook import JobBook
from nbrelay.workspace.journal import CANCEL_POLL, Recorded, Replay, RunJournal, Writer
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.runners import Kernels

logger = logging.getLogger("nbrelay.runs")
# Who a run taken over after a restart saves its outputs for: the server itself.
_RESUMING = Caller.server("resuming runs after a restart")


class Runs:
    """Executions of one workspace: started in its task group, kept in ``jobs``."""

    def __init__(
        self,
        settings: Settings,
        notebooks: Notebooks,
        kernels: Kernels,
        jobs: JobBook,
        journal: RunJournal | None = None,
    ) -> None:
        self._settings = settings
        self._notebooks = notebooks
        self._kernels = kernels
        self.jobs = jobs
        self.journal = journal or RunJournal(None)
        self._elsewhere: dict[str, Job] = {}  # runs read from journals, by handle
        self._resuming: set[str] = set()  # runs of dead processes being taken over
        self._following: dict[str, Replay] = {}  # how far each journal was read

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
        caller: Caller,
        cells: Sequence[CellRef] | None = None,
        *,
        code: str | None = None,
        time_limit: float | None = None,
        stop_on_error: bool = True,
        history: bool = False,
    ) -> Job:
        """Start running cells (``None``: every code cell) or scratch ``code``; return the job.

        The job runs in the background, saving its outputs for ``caller`` (who started it, even
        after its call returned); ``wait_job`` waits for it. Markdown and raw cells named
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
        snap = await self._notebooks.read(path, caller)
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
        runner = await self._kernels.runner(snap, caller)
        job = Job(
            self.jobs.new_handle(),
            snap.path,
            runs,
            kernel=runner.session.info.name,
            timeout=limit,
            stop_on_error=stop_on_error,
            limits=Limits(
                limit=self._settings.cell_output_limit,
                display_limit=self._settings.cell_display_limit,
            ),
        )
        resumed = self._kernels.take_note(snap.path)
        if resumed is not None:
            job.notes.append(resumed.note)
            job.state_lost |= resumed.state_lost
        self.jobs.remember(job)
        journaled = self.journal.enabled
        if journaled:
            session = runner.session
            self.journal.open(
                job,
                kernel_id=getattr(session, "kernel_id", None),
                client_session=getattr(session, "client_session", None),
            )

        self._launch(tg, job, snap.path, runner, journaled, caller)
        return job

    def _launch(
        self,
        tg: TaskGroup,
        job: Job,
        path: str,
        runner: Runner,
        journaled: bool,
        starter: Caller,
    ) -> None:
        """Run the job in the workspace's task group, saving its outputs into the notebook
        for ``starter`` (who started the run)."""
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
                await _show(shown, path, starter, running, showing - running)
                showing.clear()
                showing.update(running)
            outcome = await self._store_outputs(path, starter, done)
            for told in outcome.notes:  # the notebook was upgraded or repaired on this save
                if told not in job.notes:
                    job.notes.append(told)
            return outcome.after.version

        async def run() -> None:
            try:
                async with anyio.create_task_group() as watch:
                    if journaled:
                        watch.start_soon(self._watch_cancel, job)
                    await run_job(job, runner, save, starter, save_interval=interval)
                    watch.cancel_scope.cancel()
            finally:
                if shown is not None:  # no cell of a finished job still shows [*]
                    ids = {c.id for c in job.cells if c.id is not None}
                    with anyio.CancelScope(shield=True):
                        await _show(shown, path, starter, (), ids)

        tg.start_soon(run)

    async def resume_orphans(self) -> None:
        """At start: take over the runs whose nbrelay process died before they ended. A run
        on a Jupyter Server's kernel (live mode) is followed to its end from where its journal
        stops: nbrelay connects to the kernel as the WebSocket session the dead process used,
        so the server replays what it kept, and the run's outputs reach the notebook; its
        cells not yet sent are then run. A run on a kernel of the dead process (file mode) is
        ended as its death left it (the kernel died with it)."""
        if not self.journal.enabled:
            return
        try:
            handles = self.journal.unfinished()
        except (NbrelayError, OSError):
            return
        for handle in handles:
            claimed = self.journal.claim(handle)
            if claimed is None:
                continue  # still running in another process
            writer, recorded = claimed
            try:
                await self._reattach(writer, recorded)
            except NbrelayError as exc:
                logger.warning("run %s could not be resumed: %s", handle, exc)
                job = recorded.job
                job.observer = writer
                self._orphaned(recorded, f"its kernel could not be reached again: {exc.message}")
                writer.ended(job)
            except BaseException:
                writer.close()
                raise

    async def _reattach(self, writer: Writer, recorded: Recorded) -> None:
        job, start = recorded.job, recorded.start
        kernel_id, client_session = start.get("kernel_id"), start.get("client_session")
        tg = self._kernels.task_group
        resume = None
        if kernel_id and client_session:  # a Jupyter Server's kernel, reached over WebSocket
            resume = getattr(self._kernels.provider(), "resume", None)
        if not (kernel_id and client_session and resume is not None and tg is not None):
            job.observer = writer
            self._orphaned(recorded)
            writer.ended(job)
            return
        resume(str(kernel_id), str(client_session))
        snap = await self._notebooks.read(job.path, _RESUMING)
        runner = await self._kernels.runner(snap, _RESUMING)
        if getattr(runner.session, "kernel_id", None) != kernel_id:
            raise KernelError("the kernel that ran it is gone from the Jupyter Server")
        for cell in job.cells:
            if cell.status == "running" and cell.msg_id is None:
                # Killed between starting the cell and journaling its request: run it now.
                cell.status = "queued"
        job.notes.append(
            "nbrelay restarted while this ran; a new process re-attached to the kernel and "
            "followed the run from there"
        )
        writer.note({"t": "note", "note": job.notes[-1]})
        job.observer = writer
        self.jobs.remember(job)
        self._launch(tg, job, snap.path, runner, True, _RESUMING)

    async def _store_outputs(
        self, path: str, caller: Caller, done: Mapping[str, tuple[list[Output], int | None]]
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            changes = tuple(
                edits.UpdateCell(cid, {"outputs": outs, "execution_count": count})
                for cid, (outs, count) in done.items()
                if nb.position(cid) is not None  # the index of ids kept over edits
            )
            return Plan(edits=changes, touched=tuple(c.id for c in changes))

        return await self._notebooks.edit(
            path, caller, "run", planner, positional=False, record=False
        )

    def execution_history(self, path: str) -> list[dict[str, Any]]:
        """What ran in a notebook (oldest first, at most ``HISTORY_DEPTH`` cell runs): each
        cell run's job, cell, status, start time, duration and execution count."""
        return self.jobs.history(self._notebooks.relative(path))

    async def _watch_cancel(self, job: Job) -> None:
        """Stop the job when a client of another process cancels it (through the journal)."""
        while not job.done.is_set():
            await anyio.sleep(CANCEL_POLL)
            if self.journal.cancel_asked(job.handle):
                job.stop.set()
                return

    def job(self, handle: str) -> Job:
        """The run ``handle``: this process's, or one read from the root's journal."""
        found = self.jobs.find(handle)
        if found is not None and handle not in self._elsewhere:
            return found
        held = self._elsewhere.get(handle)
        if held is not None:
            if not held.done.is_set():
                self._look(held)
            return held
        recorded = self.journal.load(handle)
        if recorded is None:
            return self.jobs.job(handle)  # raises: no such handle
        return self._adopt(recorded)

    def _adopt(self, recorded: Recorded) -> Job:
        """Keep one ``Job`` per journaled run, fed what its journal says as it grows (so what
        this process's clients were shown of it is remembered)."""
        job = recorded.job
        self._elsewhere[job.handle] = job
        for old in [h for h, j in self._elsewhere.items() if j.done.is_set()][:-50]:
            self._elsewhere.pop(old, None)  # finished ones are read again from the journal
            self._following.pop(old, None)
        if recorded.replay is not None:
            self._following[job.handle] = recorded.replay
        if not recorded.ended and not recorded.running_elsewhere and not job.done.is_set():
            tg = self._kernels.task_group
            if recorded.start.get("client_session") and tg is not None:
                # A Jupyter Server's kernel still runs it: take it over (followed meanwhile
                # through its journal, as a run of another process).
                if job.handle not in self._resuming:
                    self._resuming.add(job.handle)
                    tg.start_soon(self.resume_orphans)
            else:
                self._orphaned(recorded)
        return job

    def _look(self, job: Job) -> bool:
        """Read what a run of another process journaled since the last look; False when its
        journal is gone."""
        recorded = self.journal.load(job.handle, self._following.get(job.handle))
        if recorded is None:
            return False
        self._adopt(recorded)
        return True

    def _orphaned(self, recorded: Recorded, why: str | None = None) -> None:
        """A run whose process died before it ended: end it as that death left it. In file
        mode its kernel was that process's child and died with it; what the journal holds
        (every output up to the death) is what there is."""
        job = recorded.job
        pid = recorded.start.get("pid")
        note = f"the nbrelay process that ran this (pid {pid}) ended before the run did; " + (
            why or "its kernel ended with it, so the outputs are those up to then"
        )
        for cell in job.cells:
            if cell.status == "running":
                cell.status = "died"
                cell.message = "its nbrelay process ended while it ran"
            elif cell.status == "queued":
                cell.status = "cancelled"
        job.state_lost = True
        job.notes.append(note)
        job.finished = time.monotonic()
        job.done.set()
        if why is None and job.observer is None:
            self.journal.finish(job)

    def _is_elsewhere(self, job: Job) -> bool:
        return self._elsewhere.get(job.handle) is job

    def jobs_of(self, path: str) -> list[Job]:
        return self.jobs.running(self._notebooks.relative(path))

    async def wait_job(
        self, job: Job, wait: float, on_progress: Any | None = None, *, interval: float = 10.0
    ) -> None:
        """Wait up to ``wait`` seconds for the job to end, calling ``on_progress(job)`` when it
        prints (at most once a second) and at least every ``interval`` seconds."""
        deadline = time.monotonic() + wait
        last = time.monotonic()
        if self._is_elsewhere(job):
            await self._wait_elsewhere(job, deadline, on_progress, interval)
            return
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
        grace = self._settings.interrupt_grace + 5 if wait is None else wait
        if self._is_elsewhere(job):
            if not job.done.is_set():
                self.journal.cancel(job.handle)
                await self._wait_elsewhere(job, time.monotonic() + grace, None, grace)
            return
        job.stop.set()
        with anyio.move_on_after(grace):
            await job.done.wait()

    async def _wait_elsewhere(
        self, job: Job, deadline: float, on_progress: Any | None, interval: float
    ) -> None:
        """Follow a run of another process through its journal until it ends or the
        deadline passes."""
        last = time.monotonic()
        printed = job.printed()
        while not job.done.is_set() and time.monotonic() < deadline:
            await anyio.sleep(min(CANCEL_POLL / 2, max(deadline - time.monotonic(), 0)))
            if not self._look(job):
                return  # its journal was removed
            now = time.monotonic()
            grew = job.printed() != printed
            printed = job.printed()
            due = now - last >= interval or (grew and now - last >= 1.0)
            if on_progress is not None and not job.done.is_set() and due:
                last = now
                await on_progress(job)


async def _show(
    shown: RunState, path: str, starter: Caller, running: Collection[str], idle: Collection[str]
) -> None:
    """Show the run state for ``starter`` (who started the run); a failure (refused to that
    caller, too) costs the person the display only, never the run."""
    with contextlib.suppress(NbrelayError):
        await shown.show_running(path, starter, running, idle)
