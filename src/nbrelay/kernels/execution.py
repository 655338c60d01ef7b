"""One execution at a time on one kernel: the message loop both backends share.

``Runner.execute`` sends an ``execute_request`` and watches three things together in one task
group, as nbclient does: the shell reply, the IOPub messages of the request (filtered by parent,
finished on ``status: idle``), and the kernel's liveness (polled every ``poll_interval`` seconds,
because a dead kernel never replies). It applies one policy:

* **timeout or stop** → interrupt → wait ``interrupt_grace`` seconds → restart if still running;
* **death** → outputs so far are kept, the kernel is restarted (at most ``max_restarts`` times in
  a row) and the outcome says that state was lost.

Each step is recorded in plain words (``"timed out after 5 s"``, ``"kernel interrupted"``,
``"variables kept"``) so the agent reads what happened. Messages go to the caller's ``on_message``
(the output fold lives in ``notebook/outputs.py``); no exception is used for control flow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.kernels import sequence
from nbrelay.kernels.base import KernelSession, Msg, answers_kernel_info, msg_type, parent_id
from nbrelay.notebook.outputs import CellOutputs, Output

# ok: ran to its end; error: the code raised; interrupted: stopped by an interrupt (Ctrl-C from
# interrupt_kernel or JupyterLab, or a cancelled run), variables kept; timeout: interrupted at
# its time limit; died: the kernel died or had to be restarted; aborted: the kernel refused it
# (after an earlier error); cancelled: never started (its run was cancelled while it waited).
Status = Literal["ok", "error", "interrupted", "aborted", "timeout", "cancelled", "died"]

# How long ``Runner.interrupt`` watches for a kernel the interrupt ended (seconds): an idle one
# that does not answer meanwhile, and one running code.
INTERRUPT_SETTLE = 3.0
RUNNING_SETTLE = 0.25

# How long a run waits for a kernel someone else restarted to answer (seconds).
READY_WAIT = 60.0

_ELSEWHERE = (
    "the kernel was restarted outside nbrelay (in JupyterLab, by another client, or by the "
    "Jupyter Server after it died)"
)
RESTARTED_ELSEWHERE = f"{_ELSEWHERE}: the variables defined before were lost"
CUT_SHORT_ELSEWHERE = (
    f"{_ELSEWHERE} while running this code; the outputs it produced before are kept; the "
    "variables were lost"
)


@dataclass(frozen=True)
class Policy:
    """Timing of one kernel's executions (seconds)."""

    interrupt_grace: float = 5.0
    poll_interval: float = 1.0
    idle_wait: float = 3.0  # after the reply, how long to wait for the last outputs
    # After "idle", how long to keep listening for output of the same request. ipykernel
    # flushes before it goes idle; some kernels (Deno's) publish stdout a moment later.
    late_output: float = 0.0
    max_restarts: int = 5  # automatic restarts in a row before giving up


@dataclass
class Outcome:
    """How an execution ended. ``steps`` tell it in plain words, in order."""

    status: Status
    execution_count: int | None = None
    reply: Mapping[str, Any] | None = None
    steps: list[str] = field(default_factory=list)
    state_lost: bool = False
    seconds: float = 0.0

    @property
    def message(self) -> str:
        return "; ".join(self.steps)


def _secs(value: float) -> str:
    return f"{value:g} s" if value < 10 else f"{value:.0f} s"


class Runner:
    """Serialises the executions on one kernel session and applies the policy above."""

    def __init__(self, session: KernelSession, policy: Policy = Policy()) -> None:
        self.session = session
        self.policy = policy
        self._lock = anyio.Lock()
        self._restarts_in_a_row = 0
        # The execution count of this runner's last run, None after a restart of nbrelay's: a
        # count below it means the kernel was restarted by someone else.
        self._last_count: int | None = None
        self._unsettled = False  # the kernel process was replaced; is its output reaching us?
        self._stop: anyio.Event | None = None
        self._skip_interrupt = False
        self.last_used = time.monotonic()
        self.holder: str | None = None  # what runs now, in words ("run x1, cell 3")

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    async def execute(
        self,
        code: str,
        on_message: Callable[[Msg], object],
        *,
        caller: Caller,
        time_limit: float | None,
        stop: anyio.Event | None = None,
        silent: bool = False,
        store_history: bool = True,
        label: str = "another execution",
        on_start: Callable[[], object] | None = None,
        on_sent: Callable[[str], object] | None = None,
        resume: str | None = None,
        on_seen: Callable[[Msg], object] | None = None,
        resume_after: str | None = None,
        on_gap: Callable[[int], object] | None = None,
    ) -> Outcome:
        """Run ``code``; ``on_message`` receives the request's IOPub messages (no ``status``).

        Executions on one kernel wait their turn: ``on_start`` is called when this one's comes
        (``holder`` then names it by ``label``). ``stop`` (set by the caller) ends the run like
        a timeout, reported as interrupted. Raises ``KernelError`` only when the kernel cannot
        run anything (it does not start, or died too often); every other ending is an
        ``Outcome``. ``on_sent`` is told the request's message id once it is sent.

        ``resume`` (a message id this client session sent before, from a process of nbrelay
        that died) sends nothing: the execution already under way is followed to its end, from
        the messages the server kept for the session (``kernels.remote``). If the kernel goes
        idle with nothing arriving for it, the rest of its outputs were not kept: the outcome
        says so. The interrupts and restarts the run needs are made for ``caller``.
        ``resume_after`` is the id of the last kernel message that process handled: when the
        first messages of the request arrive, ``on_gap`` is told how many messages the kernel
        sent in between (``kernels.sequence``: they may be missing), if any.

        ``on_seen`` is told the request's messages ``on_message`` is not (its status messages
        and its reply), so a journal can note the last kernel message handled.
        """
        async with self._lock:
            if stop is not None and stop.is_set():  # cancelled while it waited its turn
                return Outcome(status="cancelled", steps=["cancelled before it started"])
            self._stop = stop or anyio.Event()
            self._skip_interrupt = False
            self.holder = label
            if on_start is not None:
                on_start()
            try:
                return await self._execute(
                    code,
                    on_message,
                    caller,
                    time_limit,
                    silent,
                    store_history,
                    on_sent,
                    resume,
                    _Taps(on_seen, resume_after if resume is not None else None, on_gap),
                )
            finally:
                self._stop = None
                self.holder = None
                self.last_used = time.monotonic()

    async def evaluate(
        self, code: str, caller: Caller, *, time_limit: float = 30.0
    ) -> tuple[Outcome, list[Output]]:
        """Run helper code without counting it or keeping it in history; return its outputs.

        (Not ``silent``: a silent request publishes no output at all.)
        """
        cell = CellOutputs()
        outcome = await self.execute(
            code,
            cell.feed,
            caller=caller,
            time_limit=time_limit,
            silent=False,
            store_history=False,
            label="nbrelay's own helper code (variables, packages or state)",
        )
        return outcome, cell.outputs()

    async def interrupt(self, caller: Caller) -> str | None:
        """Interrupt whatever runs now (a no-op for an idle kernel that handles interrupts).

        A kernel that cannot take an interrupt exits on it (Deno's, xeus-python's PyPI build;
        as under JupyterLab). Returns what became of such a kernel, None when it lived through
        the interrupt. An idle kernel is asked for its ``kernel_info`` meanwhile: its answer
        ends the wait at once; one that does not answer is watched for up to
        ``INTERRUPT_SETTLE`` (Deno's took over 0.25 s to exit on a loaded machine) and
        restarted here if it ended. A run in progress reports a death itself (and restarts the
        kernel); it is watched only briefly.
        """
        self.last_used = time.monotonic()
        if await self.session.exit_status() is not None:
            return None  # already dead: the next run restarts it and says how it ended
        if self._lock.locked():  # a run is going: its readers take the kernel's replies
            await self.session.interrupt(caller)
            ended = await self._ended_within(RUNNING_SETTLE)
            if ended is None:
                return None
            return (
                f"the kernel {ended} when interrupted: it does not survive an interrupt "
                "(Ctrl-C); the run in progress reports it and restarts the kernel"
            )
        async with self._lock:
            await self.session.interrupt(caller)
            ended = await self._ended_unless_it_answers()
            if ended is None:
                return None
            await self.session.restart(caller)
            self._last_count = None
            self.last_used = time.monotonic()
        return (
            f"the kernel {ended} when interrupted: it does not survive an interrupt (Ctrl-C); "
            "kernel restarted: all variables were lost"
        )

    async def _ended_within(self, seconds: float) -> str | None:
        """How the kernel ended if it does within ``seconds`` (polled: a process's exit has no
        event to wait on here), else None."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if (ended := await self.session.exit_status()) is not None:
                return ended
            await anyio.sleep(0.05)
        return None

    async def _ended_unless_it_answers(self) -> str | None:
        """After an idle kernel's interrupt (the runner's lock held): None as soon as it
        answers a ``kernel_info_request``; how it ended if it ends first; None after
        ``INTERRUPT_SETTLE``."""
        msg_id = await self.session.send("kernel_info_request", {})
        ended: str | None = None
        async with anyio.create_task_group() as tg:

            async def answered() -> None:
                while parent_id(await self.session.shell()) != msg_id:
                    pass
                tg.cancel_scope.cancel()

            async def exited() -> None:
                nonlocal ended
                ended = await self._ended_within(INTERRUPT_SETTLE)
                tg.cancel_scope.cancel()

            tg.start_soon(answered)
            tg.start_soon(exited)
        return ended

    def stop_current(self, *, interrupt: bool = True) -> bool:
        """End the running execution (if any), with an interrupt unless ``interrupt`` is false.
        Returns whether something was running."""
        if self._stop is None:
            return False
        self._skip_interrupt = not interrupt
        self._stop.set()
        return True

    async def restart(self, caller: Caller) -> None:
        """Restart the kernel, ending any running execution first. All state is lost."""
        self.stop_current(interrupt=False)
        async with self._lock:
            await self.session.restart(caller)
            self._restarts_in_a_row = 0
            self._last_count = None
            self.last_used = time.monotonic()

    # -- one execution --------------------------------------------------------------------

    async def _execute(
        self,
        code: str,
        on_message: Callable[[Msg], object],
        caller: Caller,
        time_limit: float | None,
        silent: bool,
        store_history: bool,
        on_sent: Callable[[str], object] | None = None,
        resume: str | None = None,
        taps: _Taps | None = None,
    ) -> Outcome:
        started = time.monotonic()
        outcome = Outcome(status="ok")
        ended = await self.session.exit_status()
        if ended is not None:
            outcome.steps.append(f"the kernel {ended} after its last run")
            outcome.state_lost = True
            if resume is not None:  # what it ran died with it
                outcome.status = "died"
                return outcome
            await self._recover(outcome, caller)
        elif resume is None:
            await self._replaced_meanwhile(outcome)
        if resume is not None:
            msg_id = resume
        else:
            msg_id = await self.session.send(
                "execute_request",
                {
                    "code": code,
                    "silent": silent,
                    "store_history": store_history,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
            )
            if on_sent is not None:
                on_sent(msg_id)
        run = _Run(
            self.session,
            msg_id,
            on_message,
            self.policy,
            taps or _Taps(),
            known=self._last_count is not None and not outcome.state_lost,
        )
        stop = self._stop or anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.read_iopub)
            tg.start_soon(run.read_shell)
            tg.start_soon(run.watch_liveness)
            if resume is not None:
                tg.start_soon(run.watch_resumed)
            tg.start_soon(run.finish_after_reply)
            tg.start_soon(_set_when, stop, run.wake)
            with anyio.move_on_after(time_limit if time_limit is not None else float("inf")):
                await run.wake.wait()
            unanswered = False
            if not run.finished.is_set() and run.died is None and run.replaced != "during":
                unanswered = await self._interrupt_and_wait(
                    run, outcome, caller, stop.is_set(), time_limit
                )
            tg.cancel_scope.cancel()
        if run.replaced == "during" and run.died is None and not run.finished.is_set():
            # Replaced because the process died (the server restarted it on its own): said as
            # a death, and restarted as one, which also clears what the session noted of it.
            run.died = await self.session.exit_status()
        run.check_gap()  # nothing of the request arrived (it ended unseen, or died)
        if run.replaced is not None:
            self._last_count = None
            outcome.state_lost = True
            if run.replaced == "before" or run.finished.is_set():
                outcome.steps.append(RESTARTED_ELSEWHERE)
        elif run.execution_count is not None:  # before a restart below starts counting anew
            self._restarted_elsewhere(outcome, run.execution_count)
        # Restarts happen only once the readers have stopped: they would take the new
        # process's replies.
        if unanswered and run.died is None:
            outcome.state_lost = True
            await self._recover(outcome, caller)
        elif run.died is not None:
            outcome.status = "died"
            outcome.steps.append(
                f"the kernel {run.died} while running this code; the outputs it produced "
                "before are kept"
            )
            outcome.state_lost = True
            await self._recover(outcome, caller)
        elif run.replaced == "during" and not run.finished.is_set():
            self._unsettled = True  # the next run waits for the new process (see above)
            outcome.status = "died"
            outcome.steps.append(CUT_SHORT_ELSEWHERE)
        elif run.unkept:
            outcome.status = "ok"
            outcome.steps.append(
                "it ended while nbrelay was not running, and the server kept no messages of "
                "the rest of it (another client was connected to the kernel): its last outputs "
                "are missing; run the cell again to see them"
            )
        elif outcome.status == "ok":
            self._restarts_in_a_row = 0
            content = dict((run.reply or {}).get("content") or {})
            status = str(content.get("status", "ok"))
            outcome.status = (
                "error" if status == "error" else "aborted" if status == "aborted" else "ok"
            )
            if status == "error" and content.get("ename") == "KeyboardInterrupt":
                outcome.status = "interrupted"  # Ctrl-C from interrupt_kernel or JupyterLab
                outcome.steps.append("interrupted; variables kept")
        content = dict((run.reply or {}).get("content") or {})
        count = content.get("execution_count")
        outcome.execution_count = count if isinstance(count, int) else run.execution_count
        outcome.reply = content or None
        outcome.seconds = time.monotonic() - started
        return outcome

    async def _interrupt_and_wait(
        self, run: _Run, outcome: Outcome, caller: Caller, stopped: bool, time_limit: float | None
    ) -> bool:
        """Interrupt and wait the grace period; True if the code is still running."""
        grace = self.policy.interrupt_grace
        if stopped:
            outcome.status = "interrupted"
            outcome.steps.append("run cancelled")
        else:
            outcome.status = "timeout"
            outcome.steps.append(f"timed out after {_secs(time_limit or 0)}")
        if stopped and self._skip_interrupt:
            return False
        try:
            await self.session.interrupt(caller)
        except KernelError as exc:
            outcome.steps.append(f"the interrupt failed ({exc.message})")
        else:
            outcome.steps.append("kernel interrupted")
        run.wake = anyio.Event()
        with anyio.move_on_after(grace):
            await run.wake.wait()
        if run.died is not None or run.replaced == "during":
            return False
        if run.finished.is_set():
            outcome.steps.append("variables kept")
            return False
        outcome.steps.append(f"it did not stop within {_secs(grace)} of the interrupt")
        return True

    async def _replaced_meanwhile(self, outcome: Outcome) -> None:
        """Before a run: whether the kernel said, since the last one, that its process was
        replaced. If so, the state is lost, and the run waits until the new process's output
        reaches nbrelay (a server's IOPub subscription lags behind a restart: output sent before
        it is in place is lost)."""
        queued = self.session.queued_iopub()
        if self._last_count is not None and any(_replacing(msg) for msg in queued):
            self._last_count = None
            outcome.state_lost = True
            outcome.steps.append(RESTARTED_ELSEWHERE)
            self._unsettled = True
        if self._unsettled:
            self._unsettled = False
            await answers_kernel_info(self.session, READY_WAIT)

    def _restarted_elsewhere(self, outcome: Outcome, count: int) -> None:
        """The count a run's ``execute_input`` carries never goes down in one kernel process
        (ipykernel repeats it for runs kept out of the history; xeus-python and bash_kernel
        add one for every run) and starts at 1 in a new one. Below the last run's, the process
        was replaced by someone other than nbrelay (a person's "Restart Kernel" in JupyterLab,
        or the Jupyter Server after the process died), which nothing else tells. (A restart
        after a single run, whose count was 1, cannot be told this way.)"""
        last, self._last_count = self._last_count, count
        if last is None or count >= last:
            return
        outcome.state_lost = True
        outcome.steps.insert(0, RESTARTED_ELSEWHERE)

    async def _recover(self, outcome: Outcome, caller: Caller) -> None:
        """Restart after a death or an unanswered interrupt, within the restart budget."""
        if self._restarts_in_a_row >= self.policy.max_restarts:
            outcome.steps.append(
                f"not restarted again: it needed {self._restarts_in_a_row} restarts in a row"
            )
            raise KernelError(
                "the kernel keeps dying: " + outcome.message + ".",
                hint=f"Fix the code that crashes it, then {act('restart')}.",
            )
        self._restarts_in_a_row += 1
        await self.session.restart(caller)
        self._last_count = None
        outcome.steps.append(
            "kernel restarted; all variables were lost: re-run the cells that define them"
        )


async def _set_when(source: anyio.Event, target_holder: anyio.Event) -> None:
    await source.wait()
    target_holder.set()


@dataclass(frozen=True)
class _Taps:
    """What else a caller of ``Runner.execute`` is told (see there)."""

    on_seen: Callable[[Msg], object] | None = None
    resume_after: str | None = None
    on_gap: Callable[[int], object] | None = None


def _replacing(msg: Msg) -> bool:
    """Whether a kernel message says its process is being replaced: ipykernel's
    ``shutdown_reply`` with ``restart`` (published on IOPub too), or the ``starting`` status a
    new process publishes (xeus-python's reaches every subscriber; ipykernel's is usually
    published before the server listens)."""
    content = msg.get("content") or {}
    kind = msg_type(msg)
    if kind == "shutdown_reply":
        return bool(content.get("restart"))
    return kind == "status" and content.get("execution_state") == "starting"


class _Run:
    """The shared state of the tasks watching one request. ``known``: the kernel process ran
    an earlier request of the runner's (so a new process means state was lost)."""

    def __init__(
        self,
        session: KernelSession,
        msg_id: str,
        on_message: Callable[[Msg], object],
        policy: Policy,
        taps: _Taps,
        known: bool = False,
    ) -> None:
        self.session = session
        self.known = known
        self.msg_id = msg_id
        self.on_message = on_message
        self.policy = policy
        self.taps = taps
        self._gap_checked = taps.resume_after is None or taps.on_gap is None
        self.reply: Msg | None = None
        self.execution_count: int | None = None
        self.died: str | None = None
        self.replaced: Literal["before", "during"] | None = None  # see ``_replaced``
        self.unkept = False  # resumed, and the kernel went idle with nothing for this request
        self.heard = False
        self.replied = anyio.Event()
        self.idle = anyio.Event()
        self.finished = anyio.Event()
        self.wake = anyio.Event()

    def _finish(self) -> None:
        self.finished.set()
        self.wake.set()

    def check_gap(self) -> None:
        """A resumed request, once its first message arrived (the server replays what it kept
        before anything newer): tell how many kernel messages may be missing, if any."""
        if self._gap_checked:
            return
        self._gap_checked = True
        received = getattr(self.session, "received", None)
        if not isinstance(received, sequence.Received) or self.taps.on_gap is None:
            return
        gap = sequence.missing(self.taps.resume_after, received)
        if gap:
            self.taps.on_gap(gap)

    def _replaced(self) -> None:
        """The kernel process was replaced by someone else (a person in JupyterLab, another
        client; nbrelay's own restarts drop what the old process said). Before this request's
        first message: it runs in the new process. After: the process running it is gone, and
        nothing more of it will come."""
        if self.heard and not self.finished.is_set():
            self.replaced = "during"
            self.wake.set()
        elif not self.heard:
            self.replaced = "before"

    def _seen(self, msg: Msg) -> None:
        if self.taps.on_seen is not None:
            self.taps.on_seen(msg)

    async def read_iopub(self) -> None:
        while True:
            msg = await self.session.iopub()
            if self.known and _replacing(msg):
                self._replaced()
            if parent_id(msg) != self.msg_id:
                continue
            self.heard = True
            self.check_gap()
            kind = msg_type(msg)
            if kind == "status":
                self._seen(msg)
                if (msg.get("content") or {}).get("execution_state") == "idle":
                    await self._late_outputs()
                    self.idle.set()
                    if self.replied.is_set():
                        self._finish()
                    return
                continue
            if kind == "execute_input":
                count = (msg.get("content") or {}).get("execution_count")
                self.execution_count = count if isinstance(count, int) else None
            self.on_message(msg)

    async def _late_outputs(self) -> None:
        with anyio.move_on_after(self.policy.late_output):
            while self.policy.late_output > 0:
                msg = await self.session.iopub()
                if parent_id(msg) == self.msg_id and msg_type(msg) != "status":
                    self.on_message(msg)

    async def read_shell(self) -> None:
        while True:
            msg = await self.session.shell()
            if parent_id(msg) == self.msg_id:
                self.check_gap()
                self._seen(msg)
                self.reply = msg
                self.replied.set()
                return

    async def finish_after_reply(self) -> None:
        await self.replied.wait()
        with anyio.move_on_after(self.policy.idle_wait):
            await self.idle.wait()
        self._finish()

    async def watch_resumed(self) -> None:
        """A resumed execution: if the kernel is idle twice in a row with nothing heard of the
        request, it ended unseen (its messages went to nobody)."""
        # Only a remote server's sessions are resumed; they say what the server sees.
        ask = getattr(self.session, "execution_state", None)
        if ask is None:
            return
        idle_polls = 0
        while True:
            await anyio.sleep(self.policy.poll_interval)
            if self.heard:
                return
            idle_polls = idle_polls + 1 if await ask() == "idle" else 0
            if idle_polls >= 2:
                self.unkept = True
                self._finish()
                return

    async def watch_liveness(self) -> None:
        # A kernel process the server's restarter replaced between two polls (it died, and was
        # started again) is alive, but the request died with the old one; with pending kernels
        # (``use_pending_kernels``) nothing else tells this client.
        pid = self.session.info.pid
        while True:
            await anyio.sleep(self.policy.poll_interval)
            ended = await self.session.exit_status()
            if ended is None and pid is not None and self.session.info.pid not in (pid, None):
                ended = "died"
            if ended is not None:
                self.died = ended
                self.wake.set()
                return
