"""Task status notifications (SEP-2663's ``notifications/tasks``) through ``subscriptions/listen``
(SEP-2575), with the official MCP client and real kernels: a client that declared the tasks
extension listens with task ids; the acknowledgement names the ids agreed to (the caller's own
only); each notification is the task as ``tasks/get`` answers it; the standard kinds ride the
same stream as before; a listen for task ids without the extension gets -32021."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, ResourceUpdated

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import notebook, write_notebook
from tests.http.harness import auth_headers, canary_token, http_server
from tests.tools.tasks_client import (
    TASK_NOTE,
    TASKS,
    Tasks,
    listening,
    start_task,
    tasks_request,
    wait_task,
)

pytestmark = pytest.mark.anyio

NB = "nbrelay://notebook/n.ipynb"
# prints a line every 0.3 s for about 3 s, then ends
STEPS = "import time\nfor i in range(10):\n    print('step', i, flush=True)\n    time.sleep(0.3)"
SLOW = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    served = tmp_path / "root"
    served.mkdir()
    write_notebook(served / "n.ipynb", notebook("x = 6 * 7", "print('x is', x)"))
    return served


@contextlib.asynccontextmanager
async def served(
    root: Path, tmp_path: Path, *, opt_in: bool = True
) -> AsyncIterator[tuple[Client, Tasks]]:
    """A client in process; ``opt_in``: it declares the tasks extension."""
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    tasks = Tasks()
    async with Client(
        build_server(settings),
        mode="auto",
        extensions=[tasks] if opt_in else [],
        message_handler=tasks.on_message,
    ) as client:
        yield client, tasks


def as_got(state: dict[str, Any]) -> dict[str, Any]:
    """A task as a notification or ``tasks/get`` carries it, without what the protocol stamps
    on every frame or result (``_meta`` keys of ``io.modelcontextprotocol/``: the stream's
    subscription id, the server's identity) and without the result type: the task itself."""
    task = {k: v for k, v in state.items() if k not in ("_meta", "resultType")}
    meta = {
        k: v
        for k, v in (state.get("_meta") or {}).items()
        if not k.startswith("io.modelcontextprotocol/")
    }
    if meta:
        task["_meta"] = meta
    return task


async def answer(client: Client, task_id: str) -> dict[str, Any]:
    """``tasks/get``'s answer: the task itself."""
    return as_got(await tasks_request(client.session, "tasks/get", task_id))


async def test_a_task_is_followed_from_working_to_completed(root: Path, tmp_path: Path) -> None:
    async with served(root, tmp_path) as (client, tasks):
        created = await start_task(client, "execute", path="n.ipynb", code=STEPS)
        task_id = created["taskId"]
        async with listening(client, tasks, taskIds=[task_id]) as stream:
            assert stream.honored == {"taskIds": [task_id]}
            final = await stream.ended(task_id)
        states = stream.states(task_id)
        # the state at once, then on each change: working (with what it printed), then the end
        assert states[0]["status"] == "working"
        assert [s["status"] for s in states][-1] == "completed"
        assert {s["status"] for s in states[:-1]} == {"working"}
        assert any("step" in s.get("statusMessage", "") for s in states[:-1]), states
        assert states[0]["ttlMs"] is None  # as tasks/get says it: null while it works
        # every frame names the stream; the final one is exactly tasks/get's answer
        assert all(s["_meta"][SUBSCRIPTION_ID_META_KEY] == stream.subscription_id for s in states)
        assert as_got(final) == await answer(client, task_id)
        out = final["result"]["structuredContent"]["cells"][0]["outputs"][0]["text"]
        assert out == "".join(f"step {i}\n" for i in range(10))
        # a listen after the end still learns it: the final state right after the ack
        async with listening(client, tasks, taskIds=[task_id]) as late:
            again = await late.ended(task_id)
        assert late.states(task_id) == [again]
        assert as_got(again) == as_got(final)


async def test_unknown_ids_are_left_out_and_a_cancelled_task_says_so(
    root: Path, tmp_path: Path
) -> None:
    async with served(root, tmp_path) as (client, tasks):
        slow = await start_task(client, "execute", path="n.ipynb", code=SLOW)
        task_id = slow["taskId"]
        async with listening(client, tasks, taskIds=["no-such-task", task_id, task_id]) as stream:
            assert stream.honored == {"taskIds": [task_id]}
            await stream.until(
                lambda s: any("tick" in p.get("statusMessage", "") for p in s.states(task_id))
            )
            await tasks_request(client.session, "tasks/cancel", task_id)
            ended = await stream.ended(task_id)
        assert ended["status"] == "cancelled"
        assert "handle" in ended["statusMessage"]
        assert as_got(ended) == await answer(client, task_id)
        assert {p["taskId"] for p in stream.frames(TASK_NOTE)} == {task_id}
        # only unknown ids: no taskIds in the ack, and nothing is sent
        async with listening(client, tasks, taskIds=["no-such-task"]) as none:
            assert none.honored == {}


async def test_task_ids_need_the_extension(root: Path, tmp_path: Path) -> None:
    async with served(root, tmp_path) as (client, tasks):
        created = await start_task(client, "execute", path="n.ipynb", code="1")
        await wait_task(client, created["taskId"])
    async with served(root, tmp_path, opt_in=False) as (client, tasks):
        with pytest.raises(MCPError) as refused:
            async with listening(client, tasks, taskIds=[created["taskId"]]):
                pass
        assert refused.value.error.code == -32021
        assert refused.value.error.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        with pytest.raises(MCPError) as bad:
            async with listening(client, tasks, taskIds="not a list"):
                pass
        assert bad.value.error.code == -32602


async def test_resource_updates_ride_the_same_stream(root: Path, tmp_path: Path) -> None:
    """The change feed's resource updates and a task's states on one stream; a client that
    does not declare the extension listens to resources exactly as before, and gets no task
    notifications even while tasks run."""
    write_notebook(root / "s.ipynb", notebook(STEPS))
    nb = "nbrelay://notebook/s.ipynb"
    async with served(root, tmp_path) as (client, tasks):
        created = await start_task(client, "execute", path="s.ipynb", cells=[":"])
        task_id = created["taskId"]
        async with listening(
            client, tasks, taskIds=[task_id], resourceSubscriptions=[nb]
        ) as stream:
            assert stream.honored == {"resourceSubscriptions": [nb], "taskIds": [task_id]}
            await stream.ended(task_id)
            await stream.until(lambda s: bool(s.frames("notifications/resources/updated")))
        assert {p["uri"] for p in stream.frames("notifications/resources/updated")} == {nb}
    # a client without the extension, and one with it that asks for no task: as before
    async with (
        served(root, tmp_path, opt_in=False) as (client, _),
        served(root, tmp_path) as (runner, runner_tasks),
        client.listen(resource_subscriptions=[nb]) as sub,
        listening(runner, runner_tasks, resourceSubscriptions=[nb]) as stream,
    ):
        assert sub.honored.model_dump(by_alias=True, exclude_none=True) == {
            "resourceSubscriptions": [nb]
        }
        assert stream.honored == {"resourceSubscriptions": [nb]}
        created = await start_task(runner, "execute", path="s.ipynb", cells=[":"])
        await wait_task(runner, created["taskId"])
        with anyio.fail_after(60):
            event = await sub.__anext__()
        assert event == ResourceUpdated(uri=nb)
        await stream.until(lambda s: bool(s.frames("notifications/resources/updated")))
        assert stream.frames(TASK_NOTE) == []
    saved = json.loads((root / "s.ipynb").read_text())
    assert saved["cells"][0]["outputs"][0]["text"][-1] == "step 9\n"


async def test_over_stdio(root: Path, tmp_path: Path) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nbrelay", "serve", "--root", str(root), "--lock-dir", str(tmp_path / "l")],
    )
    tasks = Tasks()
    async with Client(server, extensions=[tasks], message_handler=tasks.on_message) as client:
        created = await start_task(client, "execute", path="n.ipynb", code=STEPS)
        async with listening(client, tasks, taskIds=[created["taskId"]]) as stream:
            final = await stream.ended(created["taskId"])
        assert final["status"] == "completed"
        assert as_got(final) == await answer(client, created["taskId"])
        assert stream.states(created["taskId"])[0]["status"] == "working"


@contextlib.asynccontextmanager
async def http_client(url: str, token: str, tasks: Tasks) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(60.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=auth_headers(token), timeout=timeout) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="auto",
            extensions=[tasks],
            message_handler=tasks.on_message,
        ) as client,
    ):
        yield client


async def test_over_http_another_tokens_task_is_not_agreed_to(root: Path, tmp_path: Path) -> None:
    """Streamable HTTP (sessionless, 2026-07-28) with two bearer tokens: each listen is agreed
    only its own token's tasks; the other's id is left out as an unknown one is."""
    other = canary_token("second")
    tokens = tmp_path / "tokens"
    tokens.write_text(other + "\n")
    tokens.chmod(0o600)
    with http_server(root, tmp_path, "--token-file", str(tokens)) as server:
        owner_tasks, stranger_tasks = Tasks(), Tasks()
        async with (
            http_client(server.url, server.token, owner_tasks) as owner,
            http_client(server.url, other, stranger_tasks) as stranger,
        ):
            mine = await start_task(owner, "execute", path="n.ipynb", code=STEPS)
            theirs = await start_task(stranger, "execute", path="n.ipynb", code="print(1)")
            both = [mine["taskId"], theirs["taskId"]]
            async with listening(stranger, stranger_tasks, taskIds=both) as peek:
                assert peek.honored == {"taskIds": [theirs["taskId"]]}
                await peek.ended(theirs["taskId"])
            assert {p["taskId"] for p in peek.frames(TASK_NOTE)} == {theirs["taskId"]}
            async with listening(owner, owner_tasks, taskIds=both) as stream:
                assert stream.honored == {"taskIds": [mine["taskId"]]}
                final = await stream.ended(mine["taskId"])
            assert final["status"] == "completed"
            assert as_got(final) == await answer(owner, mine["taskId"])


@pytest.mark.usefixtures("runtime")
async def test_a_task_of_another_replica_is_followed_through_its_record(
    root: Path, tmp_path: Path
) -> None:
    """With --shared-state: a listen through B on a task made through A follows the task's
    record to its end; when A is killed (kill -9) under a task, B's stream says it failed."""
    shared = ("--shared-state",)
    with http_server(root, tmp_path, *shared, name="b") as b:
        via_b_tasks = Tasks()
        async with http_client(b.url, b.token, via_b_tasks) as via_b:
            with http_server(root, tmp_path, *shared, name="a", token=b.token) as a:
                async with http_client(a.url, a.token, Tasks()) as via_a:
                    made = await start_task(via_a, "execute", path="n.ipynb", code=STEPS)
                    async with listening(via_b, via_b_tasks, taskIds=[made["taskId"]]) as stream:
                        assert stream.honored == {"taskIds": [made["taskId"]]}
                        final = await stream.ended(made["taskId"])
                    states = stream.states(made["taskId"])
                    assert states[0]["status"] == "working"
                    assert final["status"] == "completed"
                    assert as_got(final) == await answer(via_b, made["taskId"])
                    assert final["result"] == (await answer(via_a, made["taskId"]))["result"]
                    slow = await start_task(via_a, "execute", path="n.ipynb", code=SLOW)
                async with listening(via_b, via_b_tasks, taskIds=[slow["taskId"]]) as stream:
                    await stream.until(
                        lambda s: any(
                            "tick" in p.get("statusMessage", "") for p in s.states(slow["taskId"])
                        )
                    )
                    a.proc.kill()
                    a.proc.wait(timeout=10)
                    ended = await stream.ended(slow["taskId"], limit=60)
            assert ended["status"] == "failed", ended
            assert "ended before it did" in ended["statusMessage"]
            assert as_got(ended) == await answer(via_b, slow["taskId"])


def _modern_meta(*, opt_in: bool) -> dict[str, Any]:
    extensions: dict[str, Any] = {"extensions": {TASKS: {}}} if opt_in else {}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": extensions,
    }


async def test_the_wire_order_over_http(root: Path, tmp_path: Path) -> None:
    """The frames as they are written on the listen's SSE response: the acknowledgement first,
    then the task's state (``ttlMs: null`` while it works, as tasks/get says it), each stamped
    with the listen's id; without the extension the listen is an HTTP error with -32021."""
    with http_server(root, tmp_path) as server:
        headers = {
            **auth_headers(server.token),
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
        }
        async with httpx2.AsyncClient(timeout=60) as http:
            call_tool = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "execute",
                    "arguments": {"path": "n.ipynb", "code": STEPS},
                    "_meta": _modern_meta(opt_in=True),
                },
            }
            made = await http.post(
                server.url,
                json=call_tool,
                headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": "execute"},
            )
            task_id = made.json()["result"]["taskId"]
            frames: dict[bool, list[dict[str, Any]]] = {}
            for opt_in in (False, True):
                listen = {
                    "jsonrpc": "2.0",
                    "id": "L",
                    "method": "subscriptions/listen",
                    "params": {
                        "notifications": {"taskIds": [task_id]},
                        "_meta": _modern_meta(opt_in=opt_in),
                    },
                }
                got = frames[opt_in] = []
                async with http.stream(
                    "POST",
                    server.url,
                    json=listen,
                    headers={**headers, "Mcp-Method": "subscriptions/listen"},
                ) as answer:
                    if answer.status_code != 200:
                        got.append(json.loads(await answer.aread()))
                        continue
                    with anyio.fail_after(120):
                        async for line in answer.aiter_lines():
                            if line.startswith("data: "):
                                got.append(json.loads(line[len("data: ") :]))
                                if got[-1]["params"].get("status") == "completed":
                                    break
    assert [f["error"]["code"] for f in frames[False]] == [-32021]
    listened = frames[True]
    assert listened[0]["method"] == "notifications/subscriptions/acknowledged"
    assert listened[0]["params"]["notifications"] == {"taskIds": [task_id]}
    assert {f["method"] for f in listened[1:]} == {TASK_NOTE}
    assert listened[1]["params"]["status"] == "working"
    assert listened[1]["params"]["ttlMs"] is None
    assert listened[-1]["params"]["status"] == "completed"
    assert all(f["params"]["_meta"][SUBSCRIPTION_ID_META_KEY] == "L" for f in listened)
