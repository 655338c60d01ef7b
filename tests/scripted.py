"""A kernel whose replies are scripted per code string, for the quick test loop.

In the style of httpx's ``MockTransport``: ``ScriptedKernels`` is a real ``KernelProvider`` (see
``nbrelay.kernels.base``) whose sessions answer an ``execute_request`` from a ``Script`` instead
of a process. nbrelay's own message loop (``kernels.execution.Runner``), job book, output fold
and stores run unchanged on top; only the kernel is scripted. A reply is a list of steps,
played in order on the Jupyter wire protocol as ipykernel sends it: ``status: busy``,
``execute_input``, the outputs, the ``execute_reply`` on shell, ``status: idle``::

    Script({
        "x = 20": [],
        "x + 1": [result("21")],
        "print(x * 2)": [out("40\\n")],
        "1/0": [error("ZeroDivisionError", "division by zero")],
        "time.sleep(60)": [touch("running"), until_interrupt()],
        "a * 10": runs([error("NameError", "name 'a' is not defined")], [result("30")]),
    })

``runs`` gives the successive runs of one code string their own replies. A step may also be
any ``async def step(call: Call)``; ``call`` emits outputs and waits (interruptibly).

An interrupt ends a waiting step with ``KeyboardInterrupt`` (variables kept), as SIGINT does in
ipykernel; ``hang()`` ignores interrupts (only a restart ends it); ``die()`` ends the kernel as a
``kill -9`` would. Code with no script gets an error output and is recorded in ``missing``: the
quick loop fails such a test with the code to add.

The scripts of the tests that run on this kernel in ``--quick`` are in each folder's
``kernel_scripts.py`` (``SCRIPTS``, keyed ``"test_file.py::test_name"``); the full run runs
the same tests on real kernels.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import KernelError, act
from nbrelay.kernels.base import KernelInfo, KernelSpecInfo, Msg
from nbrelay.kernels.sessions import SessionCore

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

RED, RESET = "\x1b[0;31m", "\x1b[0m"


class Interrupted(Exception):
    """Raised inside a step by an interrupt (ipykernel's KeyboardInterrupt)."""


class Raised(Exception):
    """Ends a run with an error reply (the ``error`` step)."""

    def __init__(self, content: dict[str, Any]) -> None:
        super().__init__(content["ename"])
        self.content = content


class Died(Exception):
    """Ends a run and the kernel (the ``die`` step)."""


@dataclass
class Call:
    """One execution as a step sees it: the code, the kernel's folder, and ways to answer."""

    code: str
    cwd: Path
    execution_count: int
    _emit: Callable[[str, dict[str, Any]], None]
    _interrupt: anyio.Event

    def stream(self, text: str, name: str = "stdout") -> None:
        self._emit("stream", {"name": name, "text": text})

    def result(self, data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
        content = {"data": dict(data), "metadata": dict(metadata or {})}
        self._emit("execute_result", {"execution_count": self.execution_count, **content})

    def display(self, data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
        content = {"data": dict(data), "metadata": dict(metadata or {}), "transient": {}}
        self._emit("display_data", content)

    async def pause(self, seconds: float = float("inf")) -> None:
        """Wait ``seconds`` (forever by default); an interrupt ends the wait with ``Interrupted``."""
        with anyio.move_on_after(seconds):
            await self._interrupt.wait()
            raise Interrupted

    async def until(self, check: Callable[[], bool], *, every: float = 0.05) -> None:
        """Wait until ``check()`` holds (interruptibly)."""
        while not check():
            await self.pause(every)


Step = Callable[[Call], Awaitable[None]]


def out(text: str) -> Step:
    """A ``stream`` output on stdout."""

    async def step(call: Call) -> None:
        call.stream(text)

    return step


def err(text: str) -> Step:
    """A ``stream`` output on stderr."""

    async def step(call: Call) -> None:
        call.stream(text, "stderr")

    return step


def result(value: str | Mapping[str, Any]) -> Step:
    """An ``execute_result``: a ``text/plain`` repr, or a whole mimebundle."""
    data = {"text/plain": value} if isinstance(value, str) else dict(value)

    async def step(call: Call) -> None:
        call.result(data)

    return step


def display(data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Step:
    """A ``display_data`` output."""

    async def step(call: Call) -> None:
        call.display(data, metadata)

    return step


def traceback(ename: str, evalue: str, line: str = "") -> list[str]:
    """An IPython-style traceback, coloured as ipykernel sends it."""
    frames = [
        f"{RED}---------------------------------------------------------------------------{RESET}",
        f"{RED}{ename}{RESET}                         Traceback (most recent call last)",
    ]
    if line:
        frames.append(f"Cell {RED}In[1], line 1{RESET}\n{RED}----> 1{RESET} {line}\n")
    return [*frames, f"{RED}{ename}{RESET}: {evalue}"]


def error(ename: str, evalue: str, line: str = "") -> Step:
    """The code raises: an ``error`` output, then an error reply (the run ends here)."""

    async def step(call: Call) -> None:
        raise Raised(
            {"ename": ename, "evalue": evalue, "traceback": traceback(ename, evalue, line)}
        )

    return step


def sleep(seconds: float) -> Step:
    """``time.sleep``: interruptible."""

    async def step(call: Call) -> None:
        await call.pause(seconds)

    return step


def until_interrupt() -> Step:
    """An endless loop or sleep that an interrupt stops (``KeyboardInterrupt``)."""

    async def step(call: Call) -> None:
        await call.pause()

    return step


def touch(name: str) -> Step:
    """Create an empty file in the kernel's folder (``open(name, 'w').close()``)."""

    async def step(call: Call) -> None:
        (call.cwd / name).touch()

    return step


def hang() -> Step:
    """Code that ignores SIGINT: only a restart (or shutdown) ends it."""

    async def step(call: Call) -> None:
        await anyio.sleep_forever()

    return step


def die() -> Step:
    """The kernel process is killed (``os.kill(os.getpid(), 9)``): no reply, no idle."""

    async def step(call: Call) -> None:
        raise Died

    return step


@dataclass(frozen=True)
class Runs:
    """Successive runs of one code string, each with its own steps (one more run fails)."""

    replies: tuple[Sequence[Step], ...]


def runs(*replies: Sequence[Step]) -> Runs:
    return Runs(replies)


Reply = Sequence[Step] | Runs


@dataclass(frozen=True)
class Script:
    """Replies by code string, and the kernelspecs (name: language) the kernel offers."""

    replies: Mapping[str, Reply]
    kernelspecs: Mapping[str, str] = field(default_factory=lambda: {"python3": "python"})


class _Channel:
    """Messages in order; a receive cancelled while it waits loses nothing."""

    def __init__(self) -> None:
        self.items: deque[Msg] = deque()
        self.changed = anyio.Event()

    def put(self, msg: Msg) -> None:
        self.items.append(msg)
        self.changed.set()
        self.changed = anyio.Event()

    async def get(self) -> Msg:
        while not self.items:
            await self.changed.wait()
        return self.items.popleft()


class ScriptedSession(SessionCore):
    """One scripted kernel (a ``KernelSession``)."""

    def __init__(self, provider: ScriptedKernels, key: str, name: str, cwd: str) -> None:
        super().__init__(key=key, name=name, language=provider.script.kernelspecs[name])
        self.provider = provider
        self.cwd = cwd
        self.kernel_id = str(uuid.uuid4())
        self._count = 0
        self._died: str | None = None
        self._lock = anyio.Lock()
        self._fresh()

    def _fresh(self) -> None:
        """A new process: empty channels, nothing running."""
        self._iopub = _Channel()
        self._shell = _Channel()
        self._interrupt = anyio.Event()
        self._requests: set[anyio.CancelScope] = set()  # every request not answered yet
        self._running = False

    @property
    def info(self) -> KernelInfo:
        state = "dead" if self._died or self._closed else self._state
        return KernelInfo(
            key=self.key,
            kernel_id=self.kernel_id,
            name=self.name,
            language=self.language,
            cwd=self.cwd,
            started=self.started,
            last_activity=self.last_activity,
            state=state,
            restarts=self.restarts,
        )

    # -- the wire -------------------------------------------------------------------------

    def _msg(self, kind: str, content: Mapping[str, Any], parent: str) -> Msg:
        header = {"msg_id": str(uuid.uuid4()), "msg_type": kind, "session": self.kernel_id}
        return {
            "header": header,
            "parent_header": {"msg_id": parent},
            "msg_type": kind,
            "content": dict(content),
            "metadata": {},
        }

    def _status(self, state: str, parent: str) -> None:
        self._state = "busy" if state == "busy" else "idle"
        self._iopub.put(self._msg("status", {"execution_state": state}, parent))

    async def send(self, msg_type: str, content: Mapping[str, Any]) -> str:
        if self._closed:
            raise KernelError(f"the {self.name} kernel's connection is closed.")
        self.last_activity = time.time()
        msg_id = str(uuid.uuid4())
        tg = self.provider.task_group
        if tg is None:
            raise KernelError("the scripted kernel runs only while its workspace runs.")
        if self._died is None:
            scope = anyio.CancelScope()
            self._requests.add(scope)
            tg.start_soon(self._answer, msg_type, dict(content), msg_id, scope)
        return msg_id

    async def iopub(self) -> Msg:
        return await self._iopub.get()

    def queued_iopub(self) -> list[Msg]:
        taken = list(self._iopub.items)
        self._iopub.items.clear()
        return taken

    async def shell(self) -> Msg:
        return await self._shell.get()

    # -- answering ------------------------------------------------------------------------

    async def _answer(
        self, kind: str, content: dict[str, Any], msg_id: str, scope: anyio.CancelScope
    ) -> None:
        with scope:
            try:
                await self._answer_in_turn(kind, content, msg_id)
            finally:
                self._requests.discard(scope)

    async def _answer_in_turn(self, kind: str, content: dict[str, Any], msg_id: str) -> None:
        async with self._lock:  # one request at a time, as a kernel's shell does
            if self._died is not None:
                return
            self._status("busy", msg_id)
            if kind == "execute_request":
                reply = await self._execute(content, msg_id)
                if reply is None:  # died: no reply, no idle
                    return
            elif kind == "kernel_info_request":
                reply = self._kernel_info()
            else:
                reply = {"status": "error", "ename": "NotScripted", "evalue": kind}
            self._shell.put(self._msg(kind.replace("_request", "_reply"), reply, msg_id))
            self._status("idle", msg_id)

    def _kernel_info(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "protocol_version": "5.3",
            "implementation": "scripted",
            "language_info": {"name": self.language},
        }

    async def _execute(self, content: Mapping[str, Any], msg_id: str) -> dict[str, Any] | None:
        code = str(content.get("code", ""))
        silent = bool(content.get("silent"))
        if content.get("store_history", True) and not silent:
            self._count += 1
        count = self._count
        if not silent:
            self._iopub.put(
                self._msg("execute_input", {"code": code, "execution_count": count}, msg_id)
            )

        def emit(kind: str, body: dict[str, Any]) -> None:
            if not silent:
                self._iopub.put(self._msg(kind, body, msg_id))

        self._interrupt = anyio.Event()
        call = Call(code, Path(self.cwd or "."), count, emit, self._interrupt)
        self._running = True
        try:
            for step in self.provider.steps_for(code):
                await step(call)
        except Interrupted:
            failure = {
                "ename": "KeyboardInterrupt",
                "evalue": "",
                "traceback": traceback("KeyboardInterrupt", ""),
            }
        except Raised as raised:
            failure = raised.content
        except Died:
            self._died = "was killed by signal 9 (SIGKILL)"
            return None
        else:
            return {"status": "ok", "execution_count": count, "user_expressions": {}, "payload": []}
        finally:
            self._running = False
        emit("error", failure)
        return {"status": "error", "execution_count": count, **failure}

    # -- lifecycle ------------------------------------------------------------------------

    async def exit_status(self) -> str | None:
        if self._closed:
            return "was shut down"
        return self._died

    async def interrupt(self, caller: Caller) -> None:
        self.last_activity = time.time()
        if self._running:
            self._interrupt.set()

    def _kill(self) -> None:
        """End the process: every request it has not answered is dropped."""
        for scope in self._requests:
            scope.cancel()
        self._requests.clear()

    async def restart(self, caller: Caller) -> None:
        self._kill()
        self._fresh()
        self._died = None
        self._count = 0
        self._restarted()

    async def shutdown(self) -> None:
        self._kill()
        self._closed = True


class ScriptedKernels:
    """A ``KernelProvider`` whose kernels answer from ``script`` (see the module docstring)."""

    on_this_machine = True  # stands in for local kernels: nbrelay's --max-kernels applies

    def __init__(self, script: Script) -> None:
        self.script = script
        self.task_group: TaskGroup | None = None
        self.missing: list[str] = []  # code that ran without a script
        self._sessions: dict[str, ScriptedSession] = {}
        self._runs: dict[str, itertools.count[int]] = {}

    def steps_for(self, code: str) -> Sequence[Step]:
        reply = self.script.replies.get(code)
        if reply is None:
            self.missing.append(code)
            return [error("ScriptMissing", f"no scripted reply for {code!r}")]
        if isinstance(reply, Runs):
            n = next(self._runs.setdefault(code, itertools.count()))
            if n >= len(reply.replies):
                self.missing.append(f"{code!r} (run {n + 1}; the script has {len(reply.replies)})")
                return [error("ScriptMissing", f"no scripted reply for run {n + 1} of {code!r}")]
            return reply.replies[n]
        return reply

    def attach(self, tg: TaskGroup) -> None:
        self.task_group = tg

    async def session(
        self, key: str, caller: Caller, *, kernel_name: str, cwd: str
    ) -> ScriptedSession:
        if kernel_name not in self.script.kernelspecs:
            known = ", ".join(sorted(self.script.kernelspecs))
            raise KernelError(
                f"no kernelspec named {kernel_name!r} is installed.",
                hint=f"Installed kernelspecs: {known}. {act('set_kernel')}",
            )
        found = self._sessions.get(key)
        if found is not None and found.name == kernel_name:
            return found
        if found is not None:
            await found.shutdown()
        session = self._sessions[key] = ScriptedSession(self, key, kernel_name, cwd)
        return session

    def get(self, key: str) -> ScriptedSession | None:
        return self._sessions.get(key)

    def running(self) -> list[KernelInfo]:
        return [s.info for s in self._sessions.values()]

    async def refresh(self) -> None:
        return None  # scripted kernels change only as scripted

    async def kernelspecs(self, caller: Caller) -> list[KernelSpecInfo]:
        return [
            KernelSpecInfo(name=name, display_name=name, language=language)
            for name, language in sorted(self.script.kernelspecs.items())
        ]

    async def shutdown(self, key: str, caller: Caller, *, wait: bool = True) -> bool:
        session = self._sessions.pop(key, None)
        if session is None:
            return False
        await session.shutdown()
        return True

    async def aclose(self) -> None:
        for key in list(self._sessions):
            await self.shutdown(key, Caller.server("closing on stop"))
