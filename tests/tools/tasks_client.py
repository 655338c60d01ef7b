"""A client of the MCP tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) on the
official SDK: the SDK 2.3 has the extension framework (a ``ClientExtension`` that declares the
extension and claims the ``"task"`` result shape) but no tasks client, so this is the few lines
a host writes. Used by the tests and by ``bench/long_runs.py``."""

from __future__ import annotations

from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class CreatedTask(Result):
    """``CreateTaskResult``: the task a server answered a call with."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"


class _Params(RequestParams):
    model_config = ConfigDict(extra="allow")


class _Answer(Result):
    model_config = ConfigDict(extra="allow")


class Tasks(ClientExtension):
    """Declares the extension; a task a call is answered with is polled to its end, so
    ``client.call_tool`` returns the final result (``poll`` seconds between polls)."""

    identifier = TASKS

    def __init__(self, poll: float = 0.2, limit: float = 600.0) -> None:
        self.poll, self.limit = poll, limit
        self.seen: list[dict[str, Any]] = []  # every task state polled, in order

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

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
