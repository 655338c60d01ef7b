"""The kernels of one workspace: a runner per notebook, kernel slots and limits, suspension and
persistence of idle sessions, and the kernel lifecycle requests (interrupt, restart, shut down).

Every way to run code starts at ``Kernels.runner``, which refuses under ``--no-execute``,
applies ``--max-sessions``/``--max-kernels`` and resumes a suspended session. Kernels nbrelay
starts on this machine are capped by default (``LOCAL_MAX_KERNELS``), so an agent that opens
many notebooks holds a laptop's worth of kernels, not one per notebook.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, KernelError, NbrelayError, Unsupported, act
from nbrelay.kernels import introspect
from nbrelay.kernels.base import KernelInfo, KernelProvider, KernelSpecInfo
from nbrelay.kernels.execution import Policy, Runner
from nbrelay.notebook import edits
from nbrelay.notebook.edits import Plan
from nbrelay.notebook.model import DEFAULT_KERNEL, Notebook
from nbrelay.stores.base import EditOutcome, Snapshot
from nbrelay.workspace.jobbook import JobBook
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.slots import KernelSlots
from nbrelay.workspace.state_files import StateFiles

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

_SAVING = Caller.server("saving sessions")
_REAPING = Caller.server("stopping idle kernels")
logger = logging.getLogger("nbrelay")

# --max-kernels when not given, for the kernels nbrelay starts itself (a Jupyter Server's or a
# gateway's are theirs to limit): a Python kernel holds 50-100 MB before it imports anything.
LOCAL_MAX_KERNELS = 8


@dataclasses.dataclass(frozen=True)
class Resumed:
    """What the next run of a notebook should tell: its session was resumed (``state_lost``:
    with a new kernel, its variables gone), or it waited for a slot."""

    note: str
    state_lost: bool = False


class Kernels:
    """A runner (kernel session + execution policy) per notebook, made on first use.

    ``provider`` is where code runs; ``make_provider`` makes it when code first runs.
    """

    def __init__(
        self,
        settings: Settings,
        notebooks: Notebooks,
        state: StateFiles,
        jobs: JobBook,
        *,
        provider: KernelProvider | None,
        make_provider: Callable[[], KernelProvider],
    ) -> None:
        self._settings = settings
        self._notebooks = notebooks
        self._state = state
        self._jobs = jobs
        self._provider = provider
        self._make_provider = make_provider
        self._tg: TaskGroup | None = None
        self._runners: dict[str, Runner] = {}
        self._suspended: dict[str, KernelInfo] = {}  # idle sessions whose kernel was stopped
        self._resumed: dict[str, Resumed] = {}  # for the next run of a resumed session

    # -- lifetime -------------------------------------------------------------------------

    @property
    def task_group(self) -> TaskGroup | None:
        """The task group the server runs (None outside ``Workspace.running``)."""
        return self._tg

    def attach(self, tg: TaskGroup | None) -> None:
        """Run background work (the warm pool, executions) in ``tg``; None when it ends."""
        self._tg = tg
        if tg is not None and self._provider is not None:
            self._provider.attach(tg)

    @property
    def current(self) -> KernelProvider | None:
        """The kernel provider, if code has run (or one was given); never makes one."""
        return self._provider

    def provider(self) -> KernelProvider:
        """The kernel provider, made on first use."""
        if self._provider is None:
            self._provider = self._make_provider()
            if self._tg is not None:
                self._provider.attach(self._tg)
        return self._provider

    async def save_sessions(self) -> None:
        """With --persist-sessions, save every kernel's variables for its next session; called
        while the background task group still runs (a Jupyter Server's kernel is reached
        through a connection that runs there), and by ``aclose`` for what is left."""
        if self._settings.persist_sessions:
            for key, runner in list(self._runners.items()):
                if self._runners.pop(key, None) is runner:
                    await self._persist(key, runner, _SAVING)

    async def aclose(self) -> None:
        """Save sessions (with --persist-sessions) and stop every kernel."""
        await self.save_sessions()
        if self._provider is not None:
            await self._provider.aclose()
        self._runners.clear()

    def max_kernels(self, provider: KernelProvider) -> int:
        """--max-kernels, or its default: ``LOCAL_MAX_KERNELS`` for kernels nbrelay starts on
        this machine, no limit (0) for a Jupyter Server's or a gateway's."""
        given = self._settings.max_kernels
        if given is not None:
            return given
        return LOCAL_MAX_KERNELS if provider.on_this_machine else 0

    # -- runners --------------------------------------------------------------------------

    def require_execution(self) -> None:
        """Refuse, before anything changes, a request that would run code under --no-execute."""
        if self._settings.no_execute:
            raise Unsupported(
                "this server runs no code (it was started with --no-execute).",
                hint="Notebooks can still be read and edited; run them elsewhere.",
            )

    def _policy(self, language: str) -> Policy:
        return Policy(
            interrupt_grace=self._settings.interrupt_grace,
            late_output=0.0 if language == "python" else 0.05,
        )

    async def runner(self, snap: Snapshot, caller: Caller) -> Runner:
        """The notebook's runner, starting (or resuming) its kernel for ``caller`` if needed."""
        self.require_execution()  # every way to run code starts here, whatever the tool
        settings = self._settings
        kernel_name = snap.notebook.kernel_name or DEFAULT_KERNEL
        self.slots.check(snap.path, settings.max_sessions)
        provider = self.provider()
        # With --max-kernels, wait in line for a slot; room is made by stopping the least
        # recently used idle kernel (its notebook is suspended, as after --kernel-idle-timeout),
        # for at most --execution-timeout seconds (the time any cell may run).
        cap = self.max_kernels(provider)
        waited = await self.slots.reserve(snap.path, caller, cap, settings.execution_timeout)
        try:
            session = await provider.session(
                snap.path, caller, kernel_name=kernel_name, cwd=self._state.kernel_cwd(snap.path)
            )
        finally:
            if waited is not None:
                self.slots.release(snap.path)
        runner = self._runners.get(snap.path)
        if runner is None or runner.session is not session:
            policy = self._policy(session.info.language)
            runner = self._runners[snap.path] = Runner(session, policy)
            await self._resume(snap.path, runner, caller)
            if waited is not None and waited >= 1:
                note = f"waited {waited:.0f} s for a kernel (--max-kernels {cap})"
                before = self._resumed.get(snap.path)
                self._resumed[snap.path] = (
                    Resumed(f"{before.note}; {note}", before.state_lost)
                    if before is not None
                    else Resumed(note)
                )
        return runner

    def take_note(self, rel: str) -> Resumed | None:
        """What the next run of ``rel`` should tell (a resumed session, a wait for a slot)."""
        return self._resumed.pop(rel, None)

    def existing(self, path: str) -> Runner:
        """The notebook's runner if its kernel runs (never starts one)."""
        rel = self._notebooks.relative(path)
        runner = self._runners.get(rel)
        session = self._provider.get(rel) if self._provider is not None else None
        if runner is None or session is None or runner.session is not session:
            raise KernelError(f"{rel!r} has no running kernel.", hint=act("start_kernel"))
        return runner

    def kernel_info(self, path: str) -> KernelInfo | None:
        """The notebook's running (or suspended) kernel, or None (never starts one)."""
        rel = self._notebooks.relative(path)
        session = self._provider.get(rel) if self._provider is not None else None
        return session.info if session is not None else self._suspended.get(rel)

    async def ask(self, runner: Runner, caller: Caller, code: str, what: str) -> dict[str, Any]:
        """Run nbrelay's own introspection ``code`` in an idle kernel for ``caller`` and parse
        its answer."""
        if runner.busy:
            raise KernelError(
                f"the kernel is running a cell, so {what} would have to wait for it.",
                hint=f"{act('poll')}, or {act('interrupt')}.",
            )
        outcome, outputs = await runner.evaluate(code, caller, time_limit=60)
        if outcome.status in ("timeout", "died", "cancelled", "interrupted"):
            raise KernelError(f"{what} did not finish: {outcome.message}.")
        return introspect.parse(outputs, what)

    async def state_exists(self, runner: Runner, caller: Caller, source: str) -> bool:
        """Whether the state file ``source`` exists: asked of the kernel where only it sees the
        file (a Jupyter Server's kernel), else looked for on this machine."""
        if self._state.in_kernel:
            seen = await self.ask(
                runner, caller, introspect.state_exists(source), "looking for the saved state"
            )
            return bool(seen.get("exists"))
        return await self._state.exists(source)

    # -- lifecycle requests ---------------------------------------------------------------

    async def interrupt_kernel(self, path: str, caller: Caller) -> tuple[KernelInfo, str | None]:
        """The kernel after the interrupt, and what became of it if the interrupt ended it."""
        runner = self.existing(path)
        ended = await runner.interrupt(caller)
        return runner.session.info, ended

    async def restart_kernel(self, path: str, caller: Caller) -> KernelInfo:
        """Restart a notebook's kernel (stopping its runs); all variables are lost."""
        rel = self._notebooks.relative(path)
        for job in self._jobs.running(rel):
            job.stop.set()
        runner = self._runners.get(rel)
        if runner is None or self._provider is None or self._provider.get(rel) is None:
            runner = await self.runner(await self._notebooks.read(rel, caller), caller)
            return runner.session.info
        await runner.restart(caller)
        return runner.session.info

    async def shutdown_kernel(self, path: str, caller: Caller) -> bool:
        rel = self._notebooks.relative(path)
        for job in self._jobs.running(rel):
            job.stop.set()
            with anyio.move_on_after(2):
                await job.done.wait()
        self._runners.pop(rel, None)
        if self._provider is None:
            return False
        return await self._provider.shutdown(rel, caller)

    async def switch_kernel(
        self,
        path: str,
        caller: Caller,
        kernel: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        expected_version: str | None = None,
    ) -> tuple[EditOutcome, str]:
        """Set the notebook's kernelspec (and ``language_info``) to the installed kernelspec
        ``kernel``, merging ``metadata`` in the same edit (one undo step); a kernel the notebook
        has running is stopped and the new one started. Returns the edit and what happened."""
        spec = await self.installed_spec(kernel, caller)
        wanted = {
            **(metadata or {}),
            "kernelspec": {
                "display_name": spec.display_name,
                "language": spec.language,
                "name": spec.name,
            },
            "language_info": {"name": spec.language},
        }

        def planner(nb: Notebook) -> Plan:
            return edits.plan_notebook_metadata(nb, wanted)

        rel = self._notebooks.relative(path)
        running = self.kernel_info(rel)
        outcome = await self._notebooks.edit(
            rel, caller, "set notebook metadata", planner, expected_version=expected_version,
            positional=False,
        )  # fmt: skip
        if running is None:
            return outcome, f"the notebook's kernel is now {spec.name!r}; it starts on the next run"
        if running.name == spec.name:
            return outcome, f"the notebook's kernel already was {spec.name!r}; it was left running"
        await self.shutdown_kernel(rel, caller)
        self._suspended.pop(rel, None)
        await self.runner(outcome.after, caller)
        return outcome, (
            f"the notebook's {running.name!r} kernel was stopped and a {spec.name!r} kernel "
            "started: its variables were lost (run the cells again to rebuild them)"
        )

    async def installed_spec(self, kernel: str, caller: Caller) -> KernelSpecInfo:
        """The installed kernelspec named ``kernel``; a clear error naming those installed if
        there is none."""
        _, specs = await self.list_kernels(caller)
        spec = next((s for s in specs if s.name == kernel), None)
        if spec is None:
            names = ", ".join(sorted(s.name for s in specs)) or "none"
            raise InvalidArgument(
                f"no kernelspec named {kernel!r} is installed (installed: {names}).",
                hint="Give one of the installed kernelspec names (list_kernels lists them).",
            )
        return spec

    async def list_kernels(self, caller: Caller) -> tuple[list[KernelInfo], list[KernelSpecInfo]]:
        provider = self.provider()
        await provider.refresh()
        running = [*provider.running(), *self._suspended.values()]
        return running, await provider.kernelspecs(caller)

    # -- slots, suspension, persistence ---------------------------------------------------

    @functools.cached_property
    def slots(self) -> KernelSlots:
        """The count of kernels running or starting, which --max-sessions and --max-kernels
        limit."""
        return KernelSlots(lambda: self._provider, self._stop_least_recent)

    def check_session_room(self, key: str) -> None:
        """Refuse, before anything starts, a notebook that would start a kernel beyond
        --max-sessions (the one count of kernel slots, shared with --max-kernels)."""
        self.slots.check(self._notebooks.relative(key), self._settings.max_sessions)

    async def _stop_least_recent(self, wanted: str, caller: Caller) -> bool:
        """Stop the least recently used idle kernel for ``caller`` (who waits for a kernel),
        keeping its session (resumed by its next run); False if every kernel is busy."""
        running = self._jobs.busy_paths()
        idle = [
            (runner.last_used, key)
            for key, runner in self._runners.items()
            if key != wanted
            and key not in running
            and not self.slots.reserved(key)
            and not runner.busy
        ]
        if not idle:
            return False
        key = min(idle)[1]
        await self._suspend(key, self._runners.pop(key), caller, wait=False)
        return True

    async def _persist(self, key: str, runner: Runner, caller: Caller) -> bool:
        """Save a Python kernel's variables for its next session; False if it could not."""
        info = runner.session.info
        if info.language != "python" or info.state == "dead":
            return False
        target = self._state.session_state_file(key)
        try:
            await self._state.make_folder(target)
            with anyio.fail_after(20):
                found = await self.ask(
                    runner, caller, introspect.save_state(target), "saving the session"
                )
        except (NbrelayError, OSError, TimeoutError) as exc:
            logger.warning("could not save the session of %s: %s", key, exc)
            return False
        return not found.get("no_dill")

    async def _suspend(
        self, key: str, runner: Runner, caller: Caller, *, wait: bool = True
    ) -> None:
        """Stop an idle kernel but keep its session: listed as suspended, resumed by the next
        run (with its variables, when --persist-sessions saved them). ``wait=False``: the
        kernel may finish stopping in the background (its slot is free at once)."""
        if self._settings.persist_sessions:
            await self._persist(key, runner, caller)
        info = runner.session.info
        self._suspended[key] = dataclasses.replace(
            info, state="suspended", pid=None, last_activity=time.time()
        )
        if self._provider is not None:
            await self._provider.shutdown(key, caller, wait=wait)

    async def _resume(self, key: str, runner: Runner, caller: Caller) -> None:
        """Give a new kernel the variables its notebook's last session saved."""
        was = self._suspended.pop(key, None)
        if was is not None and was.kernel_id == runner.session.info.kernel_id:
            # a kernel nbrelay did not start (the person's, on a Jupyter Server) kept running
            self._resumed[key] = Resumed("reconnected to the notebook's kernel, variables kept")
            return
        source = self._state.session_state_file(key)
        try:
            saved = self._settings.persist_sessions and await self.state_exists(
                runner, caller, source
            )
        except NbrelayError as exc:
            self._resumed[key] = Resumed(
                f"the saved session could not be looked for: {exc.message}", state_lost=True
            )
            return
        if not saved:
            if was is not None:
                self._resumed[key] = Resumed(
                    "the idle session was resumed with a new kernel: its variables are gone "
                    "(run the cells that make them again; --persist-sessions would keep them)",
                    state_lost=True,
                )
            return
        try:
            # A Jupyter Server's kernel removes the file it restored (nbrelay cannot see it).
            code = introspect.restore_state(source, remove=self._state.in_kernel)
            found = await self.ask(runner, caller, code, "restoring the session")
        except NbrelayError as exc:
            self._resumed[key] = Resumed(
                f"the saved session could not be restored: {exc.message}", state_lost=True
            )
            return
        await self._state.remove(source)
        restored = found.get("restored") or []
        self._resumed[key] = Resumed(
            f"the idle session was resumed: {len(restored)} saved variable(s) restored"
        )

    async def reap_idle(self) -> None:
        """Suspend kernels idle for --kernel-idle-timeout (runs while the server runs)."""
        idle = self._settings.kernel_idle_timeout
        if idle <= 0:
            return
        while True:
            await anyio.sleep(min(max(idle / 4, 0.5), 60))
            now = time.monotonic()
            for key, runner in list(self._runners.items()):
                if runner.busy or now - runner.last_used < idle:
                    continue
                if self._jobs.running(key):
                    continue
                self._runners.pop(key, None)
                await self._suspend(key, runner, _REAPING)
