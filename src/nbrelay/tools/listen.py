"""``subscriptions/listen`` (protocol 2026-07-28, SEP-2575) with task status notifications.

nbrelay serves the method itself, in place of the SDK's handler, so that a stream can carry the
tasks extension's ``notifications/tasks`` (SEP-2663) beside the four standard kinds. For those
four it does what the SDK's handler does, with the SDK's own pieces (the event bus the change
feed publishes on, ``event_matches``, ``event_to_notification``, the subscription id stamped on
every frame): the acknowledgement first, with the subset of the filter honored; then each
matching event; a bounded number of streams and a bounded backlog per stream (a stream whose
client stopped reading is ended, with the listen result as its last frame).

A filter with ``taskIds`` needs the request to declare the tasks extension (else -32021, as
for ``tasks/*``). The acknowledgement's ``taskIds`` are the ids the caller may read, under the
rule of ``tasks/get``; an unknown id, a forgotten one and another identity's are left out alike,
so a listen tells no one whether a task exists. Right after the acknowledgement each agreed
task's state is sent (a client that listens after the task ended still learns how it ended),
then one on each change of its status or ``statusMessage`` (``RunTasks.follow``). Each
``notifications/tasks`` holds the task exactly as ``tasks/get`` answers it at that moment, with
the stream's subscription id added to its ``_meta``. The stream stays open after the tasks end:
the client closes it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Literal, cast

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, ServerEvent, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import event_matches, event_to_notification
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    Notification,
    NotificationParams,
    ServerNotification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict, model_serializer

from nbrelay.tools.tasks import RunTask, RunTasks, missing_capability, opted_in

logger = logging.getLogger("nbrelay.listen")

TASK_IDS = "taskIds"  # the tasks extension's key in a listen's filter and its acknowledgement
MAX_TASK_IDS = 100  # task ids one listen may ask for
MAX_STREAMS = 1024  # open listen streams (the SDK's handler's bound)
MAX_BACKLOG = 1024  # frames waiting for a client that does not read (the SDK's handler's bound)


@dataclasses.dataclass(frozen=True, eq=False)
class TaskState:
    """A task's state to send on a stream (``RunTask.wire``)."""

    state: dict[str, Any]


class _TaskParams(NotificationParams):
    """``notifications/tasks`` params: the task exactly as ``tasks/get`` answers it, its nulls
    included (``ttlMs`` is null while it works; the SDK leaves None fields out of what it
    sends)."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="plain")
    def _verbatim(self) -> dict[str, Any]:
        return {**(self.model_extra or {}), "_meta": self.meta}


class TaskNotification(Notification[_TaskParams, Literal["notifications/tasks"]]):
    method: Literal["notifications/tasks"] = "notifications/tasks"


def task_notification(state: dict[str, Any], meta: dict[str, Any]) -> TaskNotification:
    params = {**state, "_meta": {**(state.get("_meta") or {}), **meta}}
    return TaskNotification(params=_TaskParams.model_validate(params))


def asked_task_ids(requested: SubscriptionFilter) -> list[str] | None:
    """The filter's ``taskIds`` (None: not asked), each once, in the order given."""
    extra = requested.model_extra or {}
    if TASK_IDS not in extra or extra[TASK_IDS] is None:
        return None
    ids = extra[TASK_IDS]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise MCPError(
            INVALID_PARAMS,
            "notifications.taskIds must be a list of task id strings (the taskId of a "
            "CreateTaskResult).",
        )
    unique = list(dict.fromkeys(ids))
    if len(unique) > MAX_TASK_IDS:
        raise MCPError(
            INVALID_PARAMS,
            f"notifications.taskIds names {len(unique)} tasks; one listen follows at most "
            f"{MAX_TASK_IDS}: open another listen for the rest.",
        )
    return unique


def honored(requested: SubscriptionFilter, task_ids: list[str]) -> SubscriptionFilter:
    """What the acknowledgement says the stream will carry: every standard kind asked for (as
    the SDK's handler: a kind nbrelay never publishes is honored and never fires), and the
    task ids agreed to; false flags and empty lists are left out."""
    agreed: dict[str, Any] = {TASK_IDS: task_ids} if task_ids else {}
    return SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
        resource_subscriptions=list(requested.resource_subscriptions)
        if requested.resource_subscriptions
        else None,
        **agreed,
    )


class Listen:
    """The ``subscriptions/listen`` handler: one call is one stream."""

    def __init__(
        self,
        bus: SubscriptionBus,
        tasks: RunTasks,
        *,
        max_streams: int = MAX_STREAMS,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self._bus = bus
        self._tasks = tasks
        self._max_streams = max_streams
        self._max_backlog = max_backlog
        self._streams: set[MemoryObjectSendStream[ServerEvent | TaskState]] = set()

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        asked = asked_task_ids(params.notifications)
        if asked is not None and not opted_in(ctx):
            raise missing_capability("task notifications (notifications.taskIds)")
        followed: list[RunTask] = []
        for task_id in asked or ():
            task = await self._tasks.readable(ctx, task_id)
            if task is not None:
                followed.append(task)
        if len(self._streams) >= self._max_streams:  # no wait from here to the stream's count
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        agreed = honored(params.notifications, [t.task_id for t in followed])
        uris = frozenset(agreed.resource_subscriptions or ())
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        # Buffered: a publisher never waits for a slow client; the writes happen here.
        send, recv = anyio.create_memory_object_stream[ServerEvent | TaskState](self._max_backlog)

        def put(item: ServerEvent | TaskState) -> None:
            try:
                send.send_nowait(item)
            except anyio.ClosedResourceError:
                pass  # the stream is ending
            except anyio.WouldBlock:  # a client that stopped reading: end its stream
                logger.warning("listen stream %r backlog full; ending the stream", subscription_id)
                self._streams.discard(send)
                send.close()

        def deliver(event: ServerEvent) -> None:
            if event_matches(agreed, uris, event):
                put(event)

        def tell(state: dict[str, Any]) -> None:
            put(TaskState(state))

        # Subscribed before the acknowledgement, so nothing published while it is written is
        # lost; it is still the first frame, since only this task writes the stream.
        unsubscribe = self._bus.subscribe(deliver)
        self._streams.add(send)
        try:
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(
                        notifications=agreed, _meta=meta
                    )
                ),
                related_request_id=subscription_id,
            )
            # Each task's state right after the acknowledgement, before any other frame.
            first = [task.wire() for task in followed]
            for state in first:
                await ctx.session.send_notification(
                    cast("ServerNotification", task_notification(state, meta)),
                    related_request_id=subscription_id,
                )
            async with anyio.create_task_group() as tg:
                for task, state in zip(followed, first, strict=True):
                    tg.start_soon(self._follow, ctx, task, tell, state)
                async for item in recv:
                    if isinstance(item, TaskState):
                        note = cast("ServerNotification", task_notification(item.state, meta))
                    else:
                        note = event_to_notification(item, meta)
                    await ctx.session.send_notification(note, related_request_id=subscription_id)
                tg.cancel_scope.cancel()
        finally:
            try:
                unsubscribe()
            except Exception:  # a custom bus's fault must not keep the stream's slot
                logger.exception("listen stream %r: unsubscribing failed", subscription_id)
            self._streams.discard(send)
            send.close()
            recv.close()
        return SubscriptionsListenResult(_meta=meta)

    async def _follow(
        self,
        ctx: ServerRequestContext[Any, Any],
        task: RunTask,
        tell: Callable[[dict[str, Any]], None],
        told: dict[str, Any],
    ) -> None:
        try:
            await self._tasks.follow(ctx, task, tell, told)
        except Exception:  # one task's trouble must not end the stream
            logger.exception("listen: following task %s failed", task.tool)
