"""A client of the MCP tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) on the
official SDK: the SDK 2.3 has the extension framework (a ``ClientExtension`` that declares the
extension, claims the ``"task"`` result shape and observes ``notifications/tasks``) but no tasks
client, so this is the few lines a host writes. Its ``Client.listen`` takes the four standard
kinds only: ``listening`` sends ``subscriptions/listen`` with any filter (``taskIds``) and
collects what the stream brings. Used by the tests and by ``bench/long_runs.py``."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import CallToolResult, NotificationParams, Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")
ACK = "notifications/subscriptions/acknowledged"
TASK_NOTE = "notifications/tasks"


class CreatedTask(Result):
    """``CreateTaskResult``: the task a server answered a call with."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"


class _Params(RequestParams):
    model_config = ConfigDict(extra="allow")


class _Answer(Result):
    model_config = ConfigDict(extra="allow")


class _Heard(NotificationParams):
    model_config = ConfigDict(extra="allow")


class Tasks(ClientExtension):
    """Declares the extension; a task a call is answered with is polled to its end, so
    ``client.call_tool`` returns the final result (``poll`` seconds between polls). Give
    ``on_message`` to the client as its ``message_handler`` to follow listen streams."""

    identifier = TASKS

    def __init__(self, poll: float = 0.2, limit: float = 600.0) -> None:
        self.poll, self.limit = poll, limit
        self.seen: list[dict[str, Any]] = []  # every task state polled, in order
        self.heard: list[tuple[str, dict[str, Any]]] = []  # listen-stream frames, as they came
        self._news = anyio.Event()

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method=TASK_NOTE, params_type=_Heard, handler=self._task_note)]

    async def _task_note(self, params: _Heard) -> None:
        self.hear(TASK_NOTE, params.model_dump(mode="json", by_alias=True))

    async def on_message(self, message: IncomingMessage) -> None:
        """The client's ``message_handler``: the other frames of listen streams (the
        acknowledgement, resource updates)."""
        params = getattr(message, "params", None)
        if isinstance(params, NotificationParams):
            dumped = params.model_dump(mode="json", by_alias=True, exclude_none=True)
            if SUBSCRIPTION_ID_META_KEY in (dumped.get("_meta") or {}):
                self.hear(str(getattr(message, "method", "")), dumped)

    def hear(self, method: str, params: dict[str, Any]) -> None:
        self.heard.append((method, params))
        self._news.set()
        self._news = anyio.Event()

    async def news(self) -> None:
        """Until a frame arrives."""
        await self._news.wait()

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        task_id = str(task_of(created)["taskId"])
        with anyio.fail_after(self.limit):
            while True:
                state = await tasks_request(ctx.session, "tasks/get", task_id)
                self.seen.append(state)
                if state["status"] in TERMINAL:
                    break
                await anyio.sleep(self.poll)
        if state["status"] != "completed":
            raise RuntimeError(f"task {task_id} ended {state['status']}: {state}")
        return CallToolResult.model_validate(state["result"])


def task_of(created: Result) -> dict[str, Any]:
    return created.model_dump(mode="json", by_alias=True, exclude_none=False)


async def tasks_request(session: ClientSession, method: str, task_id: str) -> dict[str, Any]:
    """``tasks/get``, ``tasks/cancel`` or ``tasks/update`` (its wire result, as a dict)."""
    params = _Params.model_validate({"taskId": task_id})
    if method == "tasks/update":
        params = _Params.model_validate({"taskId": task_id, "inputResponses": {}})
    answer = await session.send_request(
        Request[_Params, str](method=method, params=params), _Answer
    )
    return answer.model_dump(mode="json", by_alias=True, exclude_none=True)


async def start_task(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """Call ``tool`` and return the task it was answered with (fails on any other answer)."""
    answer = await client.session.call_tool(tool, args, allow_claimed=True)
    assert isinstance(answer, CreatedTask), f"{tool} was not answered with a task: {answer}"
    return task_of(answer)


async def wait_task(
    client: Client, task_id: str, *, poll: float = 0.2, limit: float = 300.0
) -> dict[str, Any]:
    """Poll ``tasks/get`` until the task ends; its last state."""
    with anyio.fail_after(limit):
        while True:
            state = await tasks_request(client.session, "tasks/get", task_id)
            if state["status"] in TERMINAL:
                return state
            await anyio.sleep(poll)


@dataclasses.dataclass
class Stream:
    """One listen stream: its acknowledgement's filter and the frames that came after it."""

    tasks: Tasks
    subscription_id: Any
    honored: dict[str, Any]

    def frames(self, method: str | None = None) -> list[dict[str, Any]]:
        """The stream's frames after the acknowledgement (of ``method``), in arrival order."""
        return [
            params
            for m, params in self.tasks.heard
            if m != ACK
            and (method is None or m == method)
            and (params.get("_meta") or {}).get(SUBSCRIPTION_ID_META_KEY) == self.subscription_id
        ]

    def states(self, task_id: str) -> list[dict[str, Any]]:
        """The ``notifications/tasks`` of a task, in arrival order."""
        return [p for p in self.frames(TASK_NOTE) if p["taskId"] == task_id]

    async def until(
        self, done: Callable[[Stream], bool], limit: float = 120.0
    ) -> list[dict[str, Any]]:
        """Wait (at most ``limit`` s) until ``done(self)``; the frames so far."""
        with anyio.fail_after(limit):
            while not done(self):
                await self.tasks.news()
        return self.frames()

    async def ended(self, task_id: str, limit: float = 300.0) -> dict[str, Any]:
        """The notification of the task's end."""
        await self.until(lambda s: any(p["status"] in TERMINAL for p in s.states(task_id)), limit)
        return next(p for p in self.states(task_id) if p["status"] in TERMINAL)


class _ListenParams(RequestParams):
    model_config = ConfigDict(extra="allow")


@contextlib.asynccontextmanager
async def listening(
    client: Client, tasks: Tasks, limit: float = 60.0, **notifications: Any
) -> AsyncIterator[Stream]:
    """Open a ``subscriptions/listen`` stream whose filter is ``notifications`` (wire keys:
    ``taskIds=[...]``, ``resourceSubscriptions=[...]``); yields once it is acknowledged, and
    closes it at the end. One listen at a time per ``tasks``. Raises the server's error."""
    params = _ListenParams.model_validate({"notifications": notifications})
    request = Request[_ListenParams, str](method="subscriptions/listen", params=params)
    before = len(tasks.heard)
    failed: list[MCPError] = []

    async def run() -> None:
        try:
            await client.session.send_request(request, _Answer)
        except MCPError as exc:
            failed.append(exc)
            tasks.hear("error", {})

    ack: dict[str, Any] | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(limit):
            while not failed and ack is None:
                ack = next((p for m, p in tasks.heard[before:] if m == ACK), None)
                if ack is None and not failed:
                    await tasks.news()
        if ack is not None:
            try:
                yield Stream(tasks, ack["_meta"][SUBSCRIPTION_ID_META_KEY], ack["notifications"])
            finally:
                tg.cancel_scope.cancel()
        else:
            tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
