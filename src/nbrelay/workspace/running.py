"""Running code: kernels per notebook, executions and their handles, limits, suspension and
persistence of sessions, and the background work (idle reaper, memory release).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import posixpath
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self

import anyio
import anyio.to_thread

from nbrelay.errors import (
    InvalidArgument,
    KernelError,
    NbrelayError,
    Unsupported,
    act,
)
from nbrelay.kernels import introspect
from nbrelay.kernels.base import KernelInfo, KernelProvider, KernelSpecInfo
from nbrelay.kernels.execution import Policy, Runner
from nbrelay.kernels.jobs import CellRun, Job, run_job
from nbrelay.notebook import address, edits
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.outputs import Limits, Output
from nbrelay.process import release_memory
from nbrelay.stores.base import LocalFiles, Snapshot
from nbrelay.stores.files import STATE_FOLDER
from nbrelay.timestamps import utc_iso
from nbrelay.workspace.editing import EditingWorkspace
from nbrelay.workspace.slots import KernelSlots

logger = logging.getLogger("nbrelay")


HISTORY_DEPTH = 500
KEPT_OUTPUT = 2_000_000  # characters of output the finished jobs kept for get_execution hold


class RunningWorkspace(EditingWorkspace):
    """Executions, kernels and sessions' lifetimes."""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """Run the background work (executions that outlast a call, the warm kernel pool, the
        idle-kernel reaper) while the server runs; close everything at the end."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self._kernels is not None:
                    self._kernels.attach(tg)
                if self.capabilities.background is not None:  # the live store's rooms
                    self.capabilities.background(tg)
                tg.start_soon(self._reap_idle_kernels)
                tg.start_soon(self._release_memory)
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._tg = None
            await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.settings.persist_sessions:
                for key, runner in list(self._runners.items()):
                    await self._persist(key, runner)
            if self._kernels is not None:
                await self._kernels.aclose()
            self._runners.clear()
        await self.store.aclose()

    # -- running code ---------------------------------------------------------------------

    def _provider(self) -> KernelProvider:
        if self._kernels is None:
            self._kernels = self._kernel_factory()
            if self._tg is not None:
                self._kernels.attach(self._tg)
        return self._kernels

    def _policy(self, language: str) -> Policy:
        return Policy(
            interrupt_grace=self.settings.interrupt_grace,
            late_output=0.0 if language == "python" else 0.05,
        )

    def _kernel_cwd(self, rel: str) -> str:
        folder = posixpath.dirname(rel)
        files = self.capabilities.files
        root = files.root if files is not None else None
        return os.path.normpath(os.path.join(str(root), folder)) if root is not None else folder

    def require_execution(self) -> None:
        """Refuse, before anything changes, a request that would run code under --no-execute."""
        if self.settings.no_execute:
            raise Unsupported(
                "this server runs no code (it was started with --no-execute).",
                hint="Notebooks can still be read and edited; run them elsewhere.",
            )

    async def _runner(self, snap: Snapshot) -> Runner:
        self.require_execution()  # every way to run code starts here, whatever the tool
        kernel_name = snap.notebook.kernel_name or "python3"
        self.kernel_slots.check(snap.path, self.settings.max_sessions)
        provider = self._provider()
        # With --max-kernels, wait in line for a slot; room is made by stopping the least
        # recently used idle kernel (its notebook is suspended, as after --kernel-idle-timeout),
        # for at most --execution-timeout seconds (the time any cell may run).
        waited = await self.kernel_slots.reserve(
            snap.path, self.settings.max_kernels, self.settings.execution_timeout
        )
        try:
            session = await provider.session(
                snap.path, kernel_name=kernel_name, cwd=self._kernel_cwd(snap.path)
            )
        finally:
            if waited is not None:
                self.kernel_slots.release(snap.path)
        runner = self._runners.get(snap.path)
        if runner is None or runner.session is not session:
            policy = self._policy(session.info.language)
            runner = self._runners[snap.path] = Runner(session, policy)
            await self._resume(snap.path, runner)
            if waited is not None and waited >= 1:
                note = f"waited {waited:.0f} s for a kernel (--max-kernels {self.settings.max_kernels})"
                self._resumed[snap.path] = "; ".join(
                    filter(None, (self._resumed.get(snap.path), note))
                )
        return runner

    async def _stop_least_recent(self, wanted: str) -> bool:
        """Stop the least recently used idle kernel, keeping its session (resumed by its next
        run); False if every kernel is busy."""
        running = {j.path for j in self._jobs.values() if not j.done.is_set()}
        idle = [
            (runner.last_used, key)
            for key, runner in self._runners.items()
            if key != wanted
            and key not in running
            and not self.kernel_slots.reserved(key)
            and not runner.busy
        ]
        if not idle:
            return False
        key = min(idle)[1]
        await self._suspend(key, self._runners.pop(key))
        return True

    def _existing_runner(self, path: str) -> Runner:
        rel = self.store.relative(path)
        runner = self._runners.get(rel)
        session = self._kernels.get(rel) if self._kernels is not None else None
        if runner is None or session is None or runner.session is not session:
            raise KernelError(
                f"{rel!r} has no running kernel.",
                hint=act("start_kernel"),
            )
        return runner

    def timeout_for(self, timeout: float | None) -> float:
        """The timeout a run gets: the call's (capped by the maximum) or the default."""
        limit = self.settings.max_execution_timeout
        if timeout is None:
            return min(self.settings.execution_timeout, limit)
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
    ) -> Job:
        """Start running cells (``None``: every code cell) or scratch ``code``; return the job.

        The job runs in the background; ``wait_job`` waits for it. Markdown and raw cells named
        in ``cells`` are skipped. Outputs and execution counts are saved into the notebook
        (not into undo history); scratch code leaves the notebook unchanged.
        """
        if self._tg is None:
            raise KernelError(
                "code can only run while the server runs.",
                hint="Use the workspace inside `async with workspace.running()`.",
            )
        if code is not None and cells is not None:
            raise InvalidArgument(
                "give either cells (to run notebook cells) or code (scratch code), not both."
            )
        limit = self.timeout_for(time_limit)
        snap = await self.store.load(path)
        nb = snap.notebook
        if code is not None:
            runs = [CellRun(id=None, index=-1, source=code)]
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
        runner = await self._runner(snap)
        job = Job(
            f"x{next(self._job_numbers)}",
            snap.path,
            runs,
            kernel=runner.session.info.name,
            timeout=limit,
            stop_on_error=stop_on_error,
            limits=Limits(limit=self.settings.cell_output_limit),
        )
        if snap.path in self._resumed:
            job.notes.append(self._resumed.pop(snap.path))
        self._remember(job)

        # Live mode: outputs stream into the shared cell as they arrive, with JupyterLab's
        # running state ([*]), which is reset when the run ends however it ends.
        caps = self.capabilities
        live, interval = caps.live_outputs, caps.output_interval

        async def save(done: Mapping[str, tuple[list[Output], int | None]]) -> str | None:
            current = job.current() if live else None
            running = current.id if current is not None else None
            return await self._store_outputs(snap.path, done, running=running, live=live)

        async def run() -> None:
            try:
                await run_job(job, runner, save, save_interval=interval)
            finally:
                if live:
                    with anyio.CancelScope(shield=True):
                        await self._end_running(snap.path, job)

        self._tg.start_soon(run)
        return job

    async def _end_running(self, path: str, job: Job) -> None:
        """Live mode: make sure no cell of a finished job still shows [*]."""
        ids = {c.id for c in job.cells if c.id is not None}

        def planner(nb: Notebook) -> Plan:
            changes = tuple(
                edits.UpdateCell(cid, {"execution_state": "idle"}) for cid in nb.ids if cid in ids
            )
            return Plan(edits=changes, touched=())

        with contextlib.suppress(NbrelayError):
            await self.edit(path, "run", planner, positional=False, record=False)

    def _remember(self, job: Job) -> None:
        self._jobs[job.handle] = job
        finished = [h for h, j in self._jobs.items() if j.done.is_set()]
        # The last 50 runs are kept, and of the finished ones only the newest that together
        # printed at most KEPT_OUTPUT characters: a job holds all its output, so runs that print
        # a lot would otherwise keep megabytes each in memory.
        drop = set(finished[: max(len(self._jobs) - 50, 0)])
        printed = 0
        for handle in reversed(finished):
            printed += self._jobs[handle].printed()
            if printed > KEPT_OUTPUT:
                drop.add(handle)
        for handle in (h for h in finished if h in drop):
            pruned = self._jobs.pop(handle)
            ran = self._ran.setdefault(pruned.path, deque(maxlen=HISTORY_DEPTH))
            ran.extend(history_entries(pruned))

    def execution_history(self, path: str) -> list[dict[str, Any]]:
        """What ran in a notebook (oldest first, at most ``HISTORY_DEPTH`` cell runs): each
        cell run's job, cell, status, start time, duration and execution count."""
        rel = self.store.relative(path)
        entries = list(self._ran.get(rel, ()))
        for job in self._jobs.values():
            if job.path == rel:
                entries.extend(history_entries(job))
        return entries[-HISTORY_DEPTH:]

    async def _store_outputs(
        self,
        path: str,
        done: Mapping[str, tuple[list[Output], int | None]],
        *,
        running: str | None = None,
        live: bool = False,
    ) -> str | None:
        def fields(cid: str, outs: list[Output], count: int | None) -> dict[str, Any]:
            changes: dict[str, Any] = {"outputs": outs, "execution_count": count}
            if live:  # JupyterLab's transient run state: [*] while running
                changes["execution_state"] = "running" if cid == running else "idle"
            return changes

        def planner(nb: Notebook) -> Plan:
            present = set(nb.ids)
            changes = tuple(
                edits.UpdateCell(cid, fields(cid, outs, count))
                for cid, (outs, count) in done.items()
                if cid in present
            )
            return Plan(edits=changes, touched=tuple(c.id for c in changes))

        outcome = await self.edit(path, "run", planner, positional=False, record=False)
        return outcome.after.version

    def job(self, handle: str) -> Job:
        found = self._jobs.get(handle)
        if found is None:
            known = ", ".join(self._jobs) or "none"
            raise InvalidArgument(
                f"no execution has handle {handle!r} (known handles: {known}).",
                hint="Handles come from execute results; finished ones are kept for the last 50 "
                "runs (fewer when they printed over 2,000,000 characters in all).",
            )
        return found

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
        grace = self.settings.interrupt_grace + 5 if wait is None else wait
        with anyio.move_on_after(grace):
            await job.done.wait()

    def jobs_of(self, path: str) -> list[Job]:
        rel = self.store.relative(path)
        return [j for j in self._jobs.values() if j.path == rel and not j.done.is_set()]

    # -- kernels --------------------------------------------------------------------------

    async def interrupt_kernel(self, path: str) -> KernelInfo:
        runner = self._existing_runner(path)
        await runner.interrupt()
        return runner.session.info

    async def restart_kernel(self, path: str) -> KernelInfo:
        """Restart a notebook's kernel (stopping its runs); all variables are lost."""
        rel = self.store.relative(path)
        for job in self.jobs_of(rel):
            job.stop.set()
        runner = self._runners.get(rel)
        if runner is None or self._kernels is None or self._kernels.get(rel) is None:
            snap = await self.store.load(rel)
            runner = await self._runner(snap)
            return runner.session.info
        await runner.restart()
        return runner.session.info

    async def shutdown_kernel(self, path: str) -> bool:
        rel = self.store.relative(path)
        for job in self.jobs_of(rel):
            job.stop.set()
            with anyio.move_on_after(2):
                await job.done.wait()
        self._runners.pop(rel, None)
        if self._kernels is None:
            return False
        return await self._kernels.shutdown(rel)

    async def list_kernels(self) -> tuple[list[KernelInfo], list[KernelSpecInfo]]:
        provider = self._provider()
        running = [*provider.running(), *self._suspended.values()]
        return running, await provider.kernelspecs()

    # -- sessions: limits, suspension, persistence ----------------------------------------

    @functools.cached_property
    def kernel_slots(self) -> KernelSlots:
        """The count of kernels running or starting, which --max-sessions and --max-kernels
        limit."""
        return KernelSlots(lambda: self._kernels, self._stop_least_recent)

    def check_session_room(self, key: str) -> None:
        """Refuse, before anything starts, a notebook that would start a kernel beyond
        --max-sessions (the one count of kernel slots, shared with --max-kernels)."""
        self.kernel_slots.check(self.store.relative(key), self.settings.max_sessions)

    def session_state_file(self, rel: str) -> str:
        """Where a suspended session's variables are kept (with --persist-sessions)."""
        return self.state_file(rel)[: -len(".dill")] + ".session.dill"

    async def _persist(self, key: str, runner: Runner) -> bool:
        """Save a Python kernel's variables for its next session; False if it could not."""
        info = runner.session.info
        if info.language != "python" or info.state == "dead":
            return False
        target = self.session_state_file(key)
        try:
            await self._state_folder(target)
            with anyio.fail_after(20):
                found = await self._ask(runner, introspect.save_state(target), "saving the session")
        except (NbrelayError, OSError, TimeoutError) as exc:
            logger.warning("could not save the session of %s: %s", key, exc)
            return False
        return not found.get("no_dill")

    async def _suspend(self, key: str, runner: Runner) -> None:
        """Stop an idle kernel but keep its session: listed as suspended, resumed by the next
        run (with its variables, when --persist-sessions saved them)."""
        if self.settings.persist_sessions:
            await self._persist(key, runner)
        info = runner.session.info
        self._suspended[key] = dataclasses.replace(
            info, state="suspended", pid=None, last_activity=time.time()
        )
        if self._kernels is not None:
            await self._kernels.shutdown(key)

    async def _resume(self, key: str, runner: Runner) -> None:
        """Give a new kernel the variables its notebook's last session saved."""
        was_suspended = self._suspended.pop(key, None) is not None
        source = self.session_state_file(key)
        if not self.settings.persist_sessions or not await self._state_exists(source):
            if was_suspended:
                self._resumed[key] = "the idle session was resumed with a new kernel"
            return
        try:
            found = await self._ask(
                runner, introspect.restore_state(source), "restoring the session"
            )
        except NbrelayError as exc:
            self._resumed[key] = f"the saved session could not be restored: {exc.message}"
            return
        await self._remove_state(source)
        restored = found.get("restored") or []
        self._resumed[key] = (
            f"the idle session was resumed: {len(restored)} saved variable(s) restored"
        )

    async def _release_memory(self) -> None:
        """Every few seconds, give the C heap's free pages back to the system: kernel output
        floods, big results and saves leave megabytes there that would otherwise count as the
        server's memory from then on (a fraction of a millisecond each time). The allocator
        is tuned once for the process by ``process.setup``."""
        while True:
            await anyio.sleep(5)
            release_memory()

    async def _reap_idle_kernels(self) -> None:
        idle = self.settings.kernel_idle_timeout
        if idle <= 0:
            return
        while True:
            await anyio.sleep(min(max(idle / 4, 0.5), 60))
            now = time.monotonic()
            for key, runner in list(self._runners.items()):
                if runner.busy or now - runner.last_used < idle:
                    continue
                if any(j.path == key and not j.done.is_set() for j in self._jobs.values()):
                    continue
                self._runners.pop(key, None)
                await self._suspend(key, runner)

    def kernel_info(self, path: str) -> KernelInfo | None:
        """The notebook's running (or suspended) kernel, or None (never starts one)."""
        rel = self.store.relative(path)
        session = self._kernels.get(rel) if self._kernels is not None else None
        return session.info if session is not None else self._suspended.get(rel)

    def state_file(self, rel: str) -> str:
        """Where a notebook's saved kernel state lives: a hidden folder next to it (in file
        mode, its real path, which the store checks and the kernel opens by descriptors), or
        --session-dir (one file per notebook path)."""
        name = posixpath.basename(rel)
        if self.settings.session_dir is not None:
            digest = hashlib.sha256(rel.encode("utf-8")).hexdigest()[:12]
            folder = os.path.realpath(self.settings.session_dir)
            return os.path.join(folder, f"{digest}-{name}.dill")
        if self.capabilities.files is not None:
            return self.capabilities.files.state_file(rel, name + ".dill")
        return os.path.join(self._kernel_cwd(rel), STATE_FOLDER, name + ".dill")

    def _state_in_store(self) -> LocalFiles | None:
        """The file store that keeps state files under the root (None: --session-dir or live
        mode, where they are not under the root nbrelay serves)."""
        return self.capabilities.files if self.settings.session_dir is None else None

    async def _state_exists(self, target: str) -> bool:
        store = self._state_in_store()
        if store is not None:
            return await store.state_exists(target)
        return await anyio.Path(target).exists()

    async def _state_folder(self, target: str) -> None:
        """Make the parents of a --session-dir state file (under the root, the kernel makes
        the one folder it needs, .nbrelay-state, itself)."""
        if self._state_in_store() is None and os.path.isabs(target):
            parent = os.path.dirname(os.path.dirname(target))
            await anyio.to_thread.run_sync(lambda: os.makedirs(parent, exist_ok=True))

    async def _remove_state(self, target: str) -> None:
        store = self._state_in_store()
        if store is not None:
            await store.remove_state(target)
            return
        with contextlib.suppress(FileNotFoundError):
            await anyio.Path(target).unlink()

    async def _ask(self, runner: Runner, code: str, what: str) -> dict[str, Any]:
        if runner.busy:
            raise KernelError(
                f"the kernel is running a cell, so {what} would have to wait for it.",
                hint=f"{act('poll')}, or {act('interrupt')}.",
            )
        outcome, outputs = await runner.evaluate(code, time_limit=60)
        if outcome.status in ("timeout", "died", "cancelled", "interrupted"):
            raise KernelError(f"{what} did not finish: {outcome.message}.")
        return introspect.parse(outputs, what)


def history_entries(job: Job) -> list[dict[str, Any]]:
    """The cell runs of a job as history entries (queued cells are left out)."""
    started = time.time() - (time.monotonic() - job.started)
    entries: list[dict[str, Any]] = []
    for cell in job.cells:
        if cell.status == "queued":
            continue
        entry: dict[str, Any] = {
            "job": job.handle,
            "cell": cell.id,
            "index": cell.index if cell.id is not None else None,
            "code": cell.source.split("\n", 1)[0][:120],
            "status": cell.status,
            "started": utc_iso(started),
            "seconds": round(cell.seconds, 3),
            "kernel": job.kernel,
        }
        if cell.execution_count is not None:
            entry["execution_count"] = cell.execution_count
        if cell.message:
            entry["message"] = cell.message[:300]
        entries.append(entry)
        started += cell.seconds
    return entries
