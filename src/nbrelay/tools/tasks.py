"""Long runs as MCP tasks: the ``io.modelcontextprotocol/tasks`` extension (SEP-2663, protocol
2026-07-28).

A client that declares the extension in a request's capabilities and calls ``execute``,
``restart_kernel`` with ``run_all``, ``install_packages`` or ``export_notebook`` with
``format="pdf"`` gets a task (``resultType: "task"``) at once instead of the tool's result. The
call goes on in the server's background: runs are followed to their end (not for ``wait`` s),
and what would have been progress notifications becomes the task's ``statusMessage``.
``tasks/get`` answers the task's state: while a run goes on, the running cell, its time and the
end of what it printed, and the run's handle (``_meta``); when it is over, the tool's result,
exactly what the call would have returned. ``tasks/cancel`` stops the run as
``cancel_execution`` does (the running cell is interrupted, the rest skipped; the outputs so far
stay in the notebook); a call that is not a run is cancelled outright. ``tasks/update`` has
nothing to answer (nbrelay's tasks never ask for input) and only acknowledges.

Every other client, and every other call, gets today's behaviour exactly: the run handles
(``get_execution``, ``cancel_execution``) are unchanged, and a task's run has a handle too.

Tasks live in this process, shared by every session: a client that reconnects (a new session,
a new connection) gets the result by task id. With ``--shared-state`` they are also recorded in
the root's state folder (``tools.task_records``), so every nbrelay process on the root (replicas
behind one address) answers and cancels them. Task ids are unguessable; where the request was
authenticated (a bearer token, a Jupyter user), only the same identity may read or cancel the
task. A finished task is kept for ``KEEP_SECONDS`` after it ended (at most ``KEEP_FINISHED``
of them, whose results hold at most ``KEEP_BYTES`` characters in all: the newest are kept).

Clients poll ``tasks/get`` at ``pollIntervalMs``, or listen: ``subscriptions/listen`` with
``taskIds`` (served by ``tools.listen``) is agreed to the tasks ``readable`` gives the caller
(the rule of ``tasks/get``), and ``follow`` sends each task's state, as ``tasks/get`` answers it,
at once and on each change of its status or message (a working task's at most once per poll
interval, its end at once; a task of another process from its record, read each interval).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field

from nbrelay.caller import IDENTITY_SCOPE_KEY
from nbrelay.errors import NbrelayError
from nbrelay.notebook.text import clean_text
from nbrelay.timestamps import utc_iso
from nbrelay.tools import runs
from nbrelay.tools.task_records import TaskRecords, owner_digest

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from nbrelay.kernels.jobs import Job
    from nbrelay.workspace import Workspace

logger = logging.getLogger("nbrelay.tasks")

TASKS = "io.modelcontextprotocol/tasks"
RUN_META = "io.github.nbrelay/run"  # in tasks/get: the run's handle, notebook and state
KEEP_SECONDS = 3600.0  # a finished task is kept this long after it ended
KEEP_FINISHED = 200  # and at most this many finished tasks
KEEP_BYTES = 64_000_000  # whose results (PDFs are big) take at most this many characters in all
POLL_MS = 1000
CANCEL_POLL = 0.5  # seconds between a task's checks for a cancel asked through another process

Status = Literal["working", "input_required", "completed", "failed", "cancelled"]
_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")


def wants_task(params: CallToolRequestParams) -> bool:
    """Whether a call is one nbrelay answers with a task (for a client that opted in)."""
    args = params.arguments or {}
    match params.name:
        case "execute" | "install_packages":
            return True
        case "restart_kernel":
            return bool(args.get("run_all")) and not args.get("shutdown")
        case "export_notebook":
            return args.get("format") == "pdf"
    return False


def opted_in(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request declared the tasks extension (only on the 2026-07-28 wire: the
    extension is not defined on older ones)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    try:
        caps = ctx.session.client_capabilities
    except (AttributeError, LookupError, ValueError):
        return False
    extensions = caps.extensions if caps is not None else None
    return bool(extensions) and TASKS in (extensions or {})


def missing_capability(what: str) -> MCPError:
    """The error for a request that needs the extension and did not declare it (-32021)."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: declare the {TASKS} extension in the "
        f"request's capabilities to use {what}.",
        {"requiredCapabilities": {"extensions": {TASKS: {}}}},
    )


def identity_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Who authenticated the request (its bearer token, its Jupyter user), if anyone did."""
    scope = getattr(ctx.request, "scope", None)
    found = scope.get(IDENTITY_SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, str) and found else None


@dataclasses.dataclass(eq=False)
class RunTask:
    """One tool call running as a task."""

    task_id: str
    tool: str
    owner: str | None
    created: float = dataclasses.field(default_factory=time.time)
    updated: float = dataclasses.field(default_factory=time.time)
    status: Status = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    run: Job | None = None
    scope: anyio.CancelScope | None = None
    cancel_asked: bool = False
    ended: float | None = None  # time.monotonic() when it reached a terminal status
    ended_at: float | None = None  # and time.time(): its ttlMs is fixed from then on
    elsewhere: bool = False  # another process on the root runs it (read from its record)
    # held while its record is written: a working state never overwrites the final one
    saving: anyio.Lock = dataclasses.field(default_factory=anyio.Lock)
    over: anyio.Event = dataclasses.field(default_factory=anyio.Event)  # set when it ends
    size: int = 0  # characters of its result, once it ended

    # runs.RunWatch: what the tool call tells its task
    def job(self, job: Job) -> None:
        self.run = job
        self.updated = time.time()

    def progress(self, message: str) -> None:
        self.message = message
        self.updated = time.time()

    def finish(self, status: Status, message: str | None = None) -> None:
        self.status, self.ended, self.updated = status, time.monotonic(), time.time()
        self.ended_at = self.updated
        self.message = message
        if self.result is not None:
            self.size = len(json.dumps(self.result))
        self.over.set()

    def ttl_ms(self) -> int | None:
        """Unlimited while it works; then until ``KEEP_SECONDS`` after it ended."""
        if self.ended is None:
            return None
        ended = self.ended_at if self.ended_at is not None else time.time()
        return max(int((ended - self.created + KEEP_SECONDS) * 1000), 0)

    def status_message(self) -> str | None:
        job = self.run
        if self.status != "working" or job is None or job.done.is_set():
            return self.message
        current = job.current()
        if current is None:
            return f"{job.state}, {job.elapsed:.0f} s"
        where = f"cell {current.index} ({current.id})" if current.id else "scratch code"
        done = sum(1 for c in job.cells if c.status not in ("queued", "running"))
        count = f", {done} of {len(job.cells)} cells done" if len(job.cells) > 1 else ""
        tail = job.tail_text(300)
        gap = runs.missing_note(job)
        return clean_text(
            (f"{gap}. " if gap is not None else "")
            + f"{where} running {job.elapsed:.0f} s{count}"
            + (f": …{tail}" if tail else "")
        )

    def record(self) -> dict[str, Any]:
        """The task as ``TaskRecords`` keeps it for the other processes on the root."""
        job = self.run
        ended = self.ended_at if self.ended is not None else None
        return {
            "taskId": self.task_id,
            "tool": self.tool,
            "owner": owner_digest(self.owner),
            "created": self.created,
            "updated": self.updated,
            "status": self.status,
            "message": self.message,
            "result": self.result,
            "error": self.error,
            "handle": job.handle if job is not None else None,
            "endedAt": ended,
        }

    @classmethod
    def recorded(cls, found: dict[str, Any], run: Job | None, *, orphaned: bool) -> RunTask:
        """A task of another process, from its record (``run``: its run, from the journal;
        ``orphaned``: the record says it works, but no process runs it any more)."""
        status = found.get("status")
        task = cls(
            str(found["taskId"]),
            str(found.get("tool") or ""),
            None,
            created=float(found.get("created") or time.time()),
            updated=float(found.get("updated") or time.time()),
            status=status if status in _STATUSES else "failed",
            message=found.get("message") if isinstance(found.get("message"), str) else None,
            result=found.get("result") if isinstance(found.get("result"), dict) else None,
            error=found.get("error") if isinstance(found.get("error"), dict) else None,
            run=run,
        )
        ended = found.get("endedAt")
        if isinstance(ended, (int, float)):
            task.ended = time.monotonic() - (time.time() - ended)
            task.ended_at = float(ended)
        elif orphaned:
            task.status, task.ended = "failed", time.monotonic()
            task.ended_at = task.updated
            handle = found.get("handle")
            task.message = "the nbrelay process running this task ended before it did" + (
                f"; the run's outputs: get_execution(handle={handle!r})" if handle else ""
            )
            task.error = {"code": INTERNAL_ERROR, "message": task.message}
        return task

    def wire(self) -> dict[str, Any]:
        """The task as ``tasks/get`` answers it (a ``DetailedTask``)."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": utc_iso(self.created),
            "lastUpdatedAt": utc_iso(max(self.updated, self.created)),
            "ttlMs": self.ttl_ms(),
        }
        if self.status == "working":
            out["pollIntervalMs"] = POLL_MS
        message = self.status_message()
        if message:
            out["statusMessage"] = message
        if self.status == "completed":
            out["result"] = self.result or {"content": []}
        if self.status == "failed":
            out["error"] = self.error or {"code": INTERNAL_ERROR, "message": "the task failed"}
        if self.run is not None:
            job = self.run
            out["_meta"] = {RUN_META: {"handle": job.handle, "path": job.path, "state": job.state}}
        return out


class TaskIdParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")


_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)


class RunTasks(Extension):
    """The tasks extension: answers long calls with tasks and serves ``tasks/*``."""

    identifier = TASKS

    def __init__(self, records: TaskRecords | None = None) -> None:
        """``records``: tasks are recorded for the other processes on the root too."""
        self._tasks: dict[str, RunTask] = {}
        self._tg: TaskGroup | None = None
        self._records = records

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the server runs: the task group the calls run in (cancelled when it stops)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=_MODERN),
            MethodBinding(
                "tasks/update", UpdateTaskParams, self._update, protocol_versions=_MODERN
            ),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=_MODERN),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if self._tg is None or not wants_task(params) or not opted_in(ctx):
            return await call_next(ctx)
        self._prune()
        task = RunTask(secrets.token_urlsafe(24), params.name, identity_of(ctx))
        self._tasks[task.task_id] = task  # tasks/get finds it before the answer is sent
        held = None
        if self._records is not None:  # and so does every other process on the root
            try:
                held = await self._records.hold(task.task_id)
                await self._records.put(task.task_id, task.record())
            except BaseException:
                self._tasks.pop(task.task_id, None)
                if held is not None:
                    TaskRecords.release(held)
                raise
        self._tg.start_soon(self._work, task, ctx, call_next, held)
        created = task.wire()
        created.pop("_meta", None)
        created["statusMessage"] = f"{params.name} started; poll tasks/get"
        return {"resultType": "task", **created}

    async def _work(
        self,
        task: RunTask,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        held: int | None = None,
    ) -> None:
        token = runs.watching.set(task)
        watcher = anyio.CancelScope()
        if self._records is not None and self._tg is not None:
            self._tg.start_soon(self._share, task, ctx, self._records, watcher)
        try:
            with anyio.CancelScope() as scope:
                task.scope = scope
                if task.cancel_asked:
                    scope.cancel()
                try:
                    result = await call_next(ctx)
                except MCPError as exc:
                    error = exc.error.model_dump(mode="json", by_alias=True, exclude_none=True)
                    task.error = error
                    task.finish("failed", f"{task.tool} failed: {exc.error.message}")
                    return
                except Exception as exc:  # a fault of the server: the task says so
                    task.error = {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}"}
                    task.finish("failed", f"{task.tool} failed: {type(exc).__name__}: {exc}")
                    return
            if scope.cancelled_caught:
                task.finish("cancelled", f"{task.tool} was cancelled before it finished")
                return
            task.result = _dumped(result)
            if self._records is not None and not task.cancel_asked:  # asked through another
                task.cancel_asked = await self._records.cancel_asked(task.task_id)
            if task.cancel_asked and task.run is not None and _stopped(task.run):
                task.finish("cancelled", _cancelled_message(task.run))
            else:
                task.finish("completed", _summary(task))
        finally:
            runs.watching.reset(token)
            watcher.cancel()
            if task.status == "working":  # the server stopped under it
                task.finish("cancelled", "the server stopped before the call finished")
            if self._records is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    async with task.saving:
                        await _save(self._records, task)
            if held is not None:
                TaskRecords.release(held)

    async def _share(
        self,
        task: RunTask,
        ctx: ServerRequestContext[Any, Any],
        records: TaskRecords,
        watcher: anyio.CancelScope,
    ) -> None:
        """While a call runs as a task: record its run's handle once it has one, and cancel it
        when a client asks through another process."""
        written: Job | None = None
        with watcher:
            while True:
                await anyio.sleep(CANCEL_POLL)
                if task.run is not written:
                    written = task.run
                    async with task.saving:
                        if task.status == "working":
                            await _save(records, task)
                if not task.cancel_asked and await records.cancel_asked(task.task_id):
                    self._cancel_here(task, ctx)

    async def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunTask:
        if not opted_in(ctx):
            raise missing_capability("tasks/*")
        task = await self.readable(ctx, task_id)
        if task is None:
            raise MCPError(
                INVALID_PARAMS,
                f"Failed to retrieve task: no task has id {task_id!r} (finished tasks are kept "
                f"{KEEP_SECONDS / 60:.0f} minutes; the run's outputs stay in the notebook).",
            )
        return task

    async def readable(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunTask | None:
        """The task ``task_id`` if the caller may read it: None when there is none (unknown,
        forgotten) or it is another identity's, which look the same to the caller."""
        self._prune()
        task = self._tasks.get(task_id)
        if task is None and self._records is not None:
            task = await self._elsewhere(ctx, task_id, self._records)
        if task is None or (task.owner is not None and task.owner != identity_of(ctx)):
            return None
        return task

    async def follow(
        self,
        ctx: ServerRequestContext[Any, Any],
        task: RunTask,
        tell: Callable[[dict[str, Any]], None],
        told: dict[str, Any] | None = None,
    ) -> None:
        """Tell ``tell`` the task's state as ``tasks/get`` answers it (``notifications/tasks``):
        now (unless it is ``told``, the state the caller sent last), then on each change of its
        status or ``statusMessage`` until it ends. While it works a new message is told at most
        once per poll interval; its end at once when this process runs it, within a poll
        interval when another one does (its record is read again each interval)."""
        last = None if told is None else (told["status"], told.get("statusMessage"))
        while True:
            state = task.wire()
            now = (state["status"], state.get("statusMessage"))
            if now != last:
                tell(state)
                last = now
            if task.ended is not None:
                return
            with anyio.move_on_after(POLL_MS / 1000):
                await task.over.wait()
            if task.elsewhere:
                again = await self.readable(ctx, task.task_id)
                if again is None:  # its record is gone: the task was forgotten
                    return
                task = again

    async def _elsewhere(
        self, ctx: ServerRequestContext[Any, Any], task_id: str, records: TaskRecords
    ) -> RunTask | None:
        """A task another process on the root made, from its record (None: none, or not the
        caller's)."""
        # Whether its process still runs it, before the record: that process writes the final
        # record and then lets go, so a record read after a free lock is the last one.
        running = await records.running(task_id)
        found = await records.get(task_id)
        if found is None or found.get("owner") != owner_digest(identity_of(ctx)):
            return None
        run: Job | None = None
        handle = found.get("handle")
        if isinstance(handle, str) and found.get("status") == "working":
            ws: Workspace = ctx.lifespan_context
            with contextlib.suppress(NbrelayError):  # its journal is gone: the record is all
                run = ws.runs.job(handle)
        orphaned = found.get("status") == "working" and not running
        task = RunTask.recorded(found, run, orphaned=orphaned)
        task.elsewhere = True
        return task

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        return {"resultType": "complete", **(await self._find(ctx, params.task_id)).wire()}

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> Any:
        await self._find(ctx, params.task_id)  # nbrelay's tasks never ask for input
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> Any:
        task = await self._find(ctx, params.task_id)
        if task.elsewhere:
            if task.status == "working" and self._records is not None:
                # The process running it cancels it as its own; its run is stopped through
                # the journal too, as cancel_execution does across processes.
                await self._records.ask_cancel(task.task_id)
                if task.run is not None and not task.run.done.is_set():
                    ws: Workspace = ctx.lifespan_context
                    await ws.runs.cancel_job(task.run, wait=0)
            return {"resultType": "complete"}
        self._cancel_here(task, ctx)
        return {"resultType": "complete"}

    def _cancel_here(self, task: RunTask, ctx: ServerRequestContext[Any, Any]) -> None:
        """Cancel a task of this process."""
        if task.status == "working" and not task.cancel_asked:
            task.cancel_asked = True
            task.updated = time.time()
            job = task.run
            if job is not None and self._tg is not None:
                # As cancel_execution: interrupt the running cell, skip the rest; the call
                # then ends with the run's result, and the task as cancelled.
                ws: Workspace = ctx.lifespan_context
                self._tg.start_soon(_cancel_job, ws, job)
            elif task.scope is not None:
                task.scope.cancel()

    def _prune(self) -> None:
        now = time.monotonic()
        finished = [t for t in self._tasks.values() if t.ended is not None]
        finished.sort(key=lambda t: t.ended or 0.0)
        excess = len(finished) - KEEP_FINISHED
        kept = 0
        for k, task in reversed(list(enumerate(finished))):  # the newest first
            kept += task.size
            if k < excess or kept > KEEP_BYTES or now - (task.ended or now) > KEEP_SECONDS:
                self._tasks.pop(task.task_id, None)


async def _save(records: TaskRecords, task: RunTask) -> None:
    """Write a task's record; a failure is logged (the task goes on in this process)."""
    try:
        await records.put(task.task_id, task.record())
    except (NbrelayError, OSError) as exc:
        logger.warning("could not record task %s for the other processes: %s", task.tool, exc)


async def _cancel_job(ws: Workspace, job: Job) -> None:
    await ws.runs.cancel_job(job)


def _stopped(job: Job) -> bool:
    return any(c.status == "cancelled" for c in job.cells) or (
        job.stop.is_set() and any(c.status not in ("ok", "queued") for c in job.cells)
    )


def _cancelled_message(job: Job) -> str:
    return (
        f"cancelled: the run was stopped (handle {job.handle}); the outputs so far are saved in "
        f"{job.path}, and get_execution(handle={job.handle!r}) shows them"
    )


def _summary(task: RunTask) -> str:
    job = task.run
    if job is None:
        return f"{task.tool} finished"
    return f"{task.tool} finished in {job.elapsed:.0f} s"


def _dumped(result: Any) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(result, dict):
        dumped = dict(result)
    else:
        dumped = {"content": [{"type": "text", "text": str(result)}]}
    dumped.pop("resultType", None)
    return dumped


def extension(shared_key: str | None = None) -> RunTasks:
    """The tasks extension; ``shared_key`` (the root's state key, with ``--shared-state``):
    tasks are recorded for every process on the root."""
    return RunTasks(TaskRecords(shared_key, KEEP_SECONDS) if shared_key is not None else None)
