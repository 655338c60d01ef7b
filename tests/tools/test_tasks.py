"""Long runs as MCP tasks (``io.modelcontextprotocol/tasks``, SEP-2663, protocol 2026-07-28),
with the official MCP client: one that declares the extension gets a task for ``execute``,
``restart_kernel(run_all)``, ``install_packages`` and ``export_notebook(pdf)`` and the call's
result through ``tasks/get``; one that does not (or speaks an older revision) gets today's
result. ``tasks/cancel`` stops a run as ``cancel_execution`` does; a client that reconnects gets
the result by task id; a request that did not declare the extension is refused ``tasks/*``."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from nbrelay.config import Secret, Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, counter_ids, data_of, notebook, write_notebook
from tests.http.harness import auth_headers, canary_token, http_server
from tests.modes import MODES as MODES_
from tests.servers import Folders
from tests.tools.tasks_client import (
    TASKS,
    Tasks,
    listening,
    start_task,
    tasks_request,
    wait_task,
)

pytestmark = pytest.mark.anyio

_folders = Folders("task")  # its own prefix: tests/live/fixtures.py counts "t" folders
SLOW = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"


@contextlib.asynccontextmanager
async def served(
    root: Path, tmp_path: Path, *, tasks: bool, mode: str = "auto"
) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    extensions = [Tasks()] if tasks else []
    async with Client(build_server(settings), mode=mode, extensions=extensions) as client:
        yield client


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """File mode only: tasks are the tool layer's, the same over every store."""
    served = tmp_path / "root"
    served.mkdir()
    return served


def result_data(state: dict[str, Any]) -> dict[str, Any]:
    assert state["status"] == "completed", state
    return data_of(CallToolResult.model_validate(state["result"]))


async def printing(session: Any, task_id: str) -> dict[str, Any]:
    """The task's state once its run has printed (its status says what), within 120 s."""
    with anyio.fail_after(120):
        while True:
            state = await tasks_request(session, "tasks/get", task_id)
            if "tick" in state.get("statusMessage", ""):
                return state
            await anyio.sleep(0.2)


def fixture_notebook(root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("x = 6 * 7", "print('x is', x)"))


async def test_the_extension_is_advertised(root: Path, tmp_path: Path) -> None:
    async with served(root, tmp_path, tasks=False) as client:
        caps = client.session.server_capabilities
        assert caps is not None
        assert caps.extensions is not None
        assert caps.extensions[TASKS] == {}


async def test_execute_answers_a_task_whose_result_is_the_calls(root: Path, tmp_path: Path) -> None:
    fixture_notebook(root)
    async with served(root, tmp_path, tasks=True) as client:
        created = await start_task(client, "execute", path="n.ipynb", cells=[":"])
        assert created["resultType"] == "task"
        assert created["status"] == "working"
        assert len(created["taskId"]) >= 32
        assert created["pollIntervalMs"] > 0
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", created["createdAt"])
        state = await wait_task(client, created["taskId"])
        assert state["resultType"] == "complete"
        done = result_data(state)
        assert done["status"] == "done"
        assert "handle" not in done
        assert [c["status"] for c in done["cells"]] == ["ok", "ok"]
        assert done["cells"][1]["outputs"][0]["text"] == "x is 42\n"
        # tasks/get is a pure read: asked again, the same result
        again = await tasks_request(client.session, "tasks/get", created["taskId"])
        assert again["result"] == state["result"]
        # the run's outputs are in the notebook, as without a task
        saved = json.loads((root / "n.ipynb").read_text())
        assert saved["cells"][1]["outputs"][0]["text"] == ["x is 42\n"]


async def test_a_client_without_the_extension_gets_todays_result(
    root: Path, tmp_path: Path
) -> None:
    fixture_notebook(root)
    for mode, tasks in (("auto", False), ("legacy", True)):  # legacy: not defined before 2026
        async with served(root, tmp_path, tasks=tasks, mode=mode) as client:
            answer = await client.session.call_tool(
                "execute", {"path": "n.ipynb", "cells": [":"]}, allow_claimed=True
            )
            assert isinstance(answer, CallToolResult), (mode, answer)
            done = data_of(answer)
            assert done["status"] == "done"
            assert done["cells"][1]["outputs"][0]["text"] == "x is 42\n"
            # past `wait` a handle, as today
            started = await call(client, "execute", path="n.ipynb", code=SLOW, wait=0.5)
            assert started["status"] in ("queued", "running")
            assert started["handle"]
            stopped = await call(client, "cancel_execution", handle=started["handle"])
            assert stopped["status"] == "done"


async def test_a_host_that_resolves_tasks_gets_the_result_from_call_tool(
    root: Path, tmp_path: Path
) -> None:
    """The SDK's claim: ``call_tool`` on an opted-in client returns the task's final result,
    and a run past ``wait`` is followed to its end (no handle to poll)."""
    fixture_notebook(root)
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.5)"
    async with served(root, tmp_path, tasks=True) as client:
        done = await call(client, "execute", path="n.ipynb", code=code, wait=0.1)
        assert done["status"] == "done"
        assert "handle" not in done
        assert done["cells"][0]["outputs"][0]["text"] == "0\n1\n2\n"


async def test_restart_with_run_all_is_a_task_and_without_it_is_not(
    root: Path, tmp_path: Path
) -> None:
    fixture_notebook(root)
    async with served(root, tmp_path, tasks=True) as client:
        plain = await client.session.call_tool(
            "restart_kernel", {"path": "n.ipynb"}, allow_claimed=True
        )
        assert isinstance(plain, CallToolResult)
        assert data_of(plain)["note"] == "kernel restarted"
        created = await start_task(client, "restart_kernel", path="n.ipynb", run_all=True)
        done = result_data(await wait_task(client, created["taskId"]))
        assert done["note"] == "kernel restarted"
        assert done["execution"]["status"] == "done"
        assert done["execution"]["cells"][1]["outputs"][0]["text"] == "x is 42\n"
    async with served(root, tmp_path, tasks=False) as client:
        today = await call(client, "restart_kernel", path="n.ipynb", run_all=True)
        assert today["execution"]["cells"][1]["outputs"][0]["text"] == "x is 42\n"


async def test_install_packages_is_a_task(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network: pip finds the package installed already (anyio, which nbrelay needs)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    fixture_notebook(root)
    async with served(root, tmp_path, tasks=False) as client:
        today = await call(client, "install_packages", path="n.ipynb", packages=["anyio"])
    async with served(root, tmp_path, tasks=True) as client:
        created = await start_task(client, "install_packages", path="n.ipynb", packages=["anyio"])
        done = result_data(await wait_task(client, created["taskId"]))
    assert done == today
    assert done["ok"] is True
    assert done["unchanged"][0].startswith("anyio ")


async def test_export_to_pdf_is_a_task_and_other_formats_are_not(
    root: Path, tmp_path: Path
) -> None:
    from pypdf import PdfReader

    fixture_notebook(root)
    async with served(root, tmp_path, tasks=True) as client:
        md = await client.session.call_tool(
            "export_notebook", {"path": "n.ipynb", "format": "markdown"}, allow_claimed=True
        )
        assert isinstance(md, CallToolResult)
        assert "x = 6 * 7" in data_of(md)["content"]
        created = await start_task(client, "export_notebook", path="n.ipynb", format="pdf")
        state = await wait_task(client, created["taskId"], limit=240)
        assert state["status"] == "completed", state
        blobs = [b for b in state["result"]["content"] if b["type"] == "resource"]
        pdf = base64.b64decode(blobs[0]["resource"]["blob"])
        text = " ".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages)
        assert "x = 6 * 7" in text


async def test_a_cancelled_task_interrupts_the_run_as_cancel_execution_does(
    root: Path, tmp_path: Path
) -> None:
    fixture_notebook(root)
    async with served(root, tmp_path, tasks=True) as client:
        created = await start_task(client, "execute", path="n.ipynb", code=SLOW)
        task_id = created["taskId"]
        state = await printing(client.session, task_id)
        assert state["status"] == "working"
        assert state["statusMessage"].startswith("scratch code running")
        handle = state["_meta"]["io.github.nbrelay/run"]["handle"]
        ack = await tasks_request(client.session, "tasks/cancel", task_id)
        assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
        ended = await wait_task(client, task_id)
        assert ended["status"] == "cancelled", ended
        assert handle in ended["statusMessage"]
        assert "result" not in ended
        # the run is stopped, its handle still answers, and the kernel lives on
        run = await call(client, "get_execution", handle=handle)
        assert run["status"] == "done"
        assert run["cells"][0]["status"] in ("interrupted", "cancelled")
        after = await call(client, "execute", path="n.ipynb", code="print('alive')")
        assert after["cells"][0]["outputs"][0]["text"] == "alive\n"
        # cancelling a finished task changes nothing
        await tasks_request(client.session, "tasks/cancel", task_id)
        assert (await tasks_request(client.session, "tasks/get", task_id))["status"] == "cancelled"


async def test_tasks_methods_need_the_extension_and_a_known_id(root: Path, tmp_path: Path) -> None:
    fixture_notebook(root)
    async with served(root, tmp_path, tasks=True) as client:
        created = await start_task(client, "execute", path="n.ipynb", code="1")
        await wait_task(client, created["taskId"])
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            with pytest.raises(MCPError) as unknown:
                await tasks_request(client.session, method, "no-such-task")
            assert unknown.value.error.code == -32602, method
        await tasks_request(client.session, "tasks/update", created["taskId"])  # an ack
    async with served(root, tmp_path, tasks=False) as client:
        with pytest.raises(MCPError) as refused:
            await tasks_request(client.session, "tasks/get", created["taskId"])
        assert refused.value.error.code == -32021
        assert refused.value.error.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_a_tool_error_completes_the_task_with_the_error_result(
    root: Path, tmp_path: Path
) -> None:
    """SEP-2663: a tool result with isError is a completed task, not a failed one."""
    async with served(root, tmp_path, tasks=True) as client:
        created = await start_task(client, "execute", path="missing.ipynb", code="1")
        state = await wait_task(client, created["taskId"])
        assert state["status"] == "completed"
        assert state["result"]["isError"] is True
        assert "missing.ipynb" in state["result"]["content"][0]["text"]


@contextlib.asynccontextmanager
async def http_client(url: str, token: str, tasks: Tasks | None) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(60.0, read=120.0)
    async with (
        httpx2.AsyncClient(headers=auth_headers(token), timeout=timeout) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="auto",
            extensions=[tasks] if tasks else [],
        ) as client,
    ):
        yield client


async def test_a_client_that_reconnects_gets_the_result_by_task_id(
    root: Path, tmp_path: Path
) -> None:
    """Over HTTP: the client that started the run goes away; a new connection gets every
    output by task id. Another token's client does not see the task at all."""
    fixture_notebook(root)
    other = canary_token("second")
    tokens = tmp_path / "tokens"
    tokens.write_text(other + "\n")
    tokens.chmod(0o600)
    code = "import time\nfor i in range(20):\n    print('line', i, flush=True)\n    time.sleep(0.2)"
    with http_server(root, tmp_path, "--token-file", str(tokens)) as server:
        async with http_client(server.url, server.token, Tasks()) as first:
            created = await start_task(first, "execute", path="n.ipynb", code=code)
        async with http_client(server.url, other, Tasks()) as stranger:
            with pytest.raises(MCPError) as hidden:
                await tasks_request(stranger.session, "tasks/get", created["taskId"])
            assert hidden.value.error.code == -32602
        async with http_client(server.url, server.token, Tasks()) as second:
            state = await wait_task(second, created["taskId"], limit=240)
    done = result_data(state)
    assert done["status"] == "done"
    assert done["cells"][0]["outputs"][0]["text"] == "".join(f"line {i}\n" for i in range(20))


@pytest.mark.usefixtures("runtime")
async def test_tasks_made_through_one_replica_are_answered_and_cancelled_through_the_other(
    root: Path, tmp_path: Path
) -> None:
    """Two processes on one root with --shared-state (replicas behind one address): a task made
    through A is followed, answered and cancelled through B; another token's client sees no
    task on either."""
    fixture_notebook(root)
    other = canary_token("second")
    tokens = tmp_path / "tokens"
    tokens.write_text(other + "\n")
    tokens.chmod(0o600)
    shared = ("--shared-state", "--token-file", str(tokens))
    with (
        http_server(root, tmp_path, *shared, name="a") as a,
        http_server(root, tmp_path, *shared, name="b", token=a.token) as b,
    ):
        async with (
            http_client(a.url, a.token, Tasks()) as via_a,
            http_client(b.url, b.token, Tasks()) as via_b,
        ):
            # A short run made through A: its result, exactly the call's, through B.
            made = await start_task(via_a, "execute", path="n.ipynb", code="print('from a')")
            done = result_data(await wait_task(via_b, made["taskId"], limit=120))
            assert done["cells"][0]["outputs"][0]["text"] == "from a\n"

            # A long run made through A: followed through B (the running cell, what it
            # printed, the run's handle), then cancelled through B.
            slow = await start_task(via_a, "execute", path="n.ipynb", code=SLOW)
            state = await printing(via_b.session, slow["taskId"])
            assert state["status"] == "working"
            assert state["statusMessage"].startswith("scratch code running")
            handle = state["_meta"]["io.github.nbrelay/run"]["handle"]
            await tasks_request(via_b.session, "tasks/cancel", slow["taskId"])
            ended = await wait_task(via_b, slow["taskId"], limit=120)
            assert ended["status"] == "cancelled", ended
            assert handle in ended["statusMessage"]
            assert (await tasks_request(via_a.session, "tasks/get", slow["taskId"]))[
                "status"
            ] == "cancelled"
            run = await call(via_a, "get_execution", handle=handle)
            assert run["cells"][0]["status"] in ("interrupted", "cancelled")
            assert run["status"] == "done"

        async with http_client(b.url, other, Tasks()) as stranger:
            for task_id in (made["taskId"], slow["taskId"]):
                with pytest.raises(MCPError) as hidden:
                    await tasks_request(stranger.session, "tasks/get", task_id)
                assert hidden.value.error.code == -32602


@pytest.mark.usefixtures("runtime")
async def test_a_task_whose_replica_was_killed_is_answered_as_failed_by_the_other(
    root: Path, tmp_path: Path
) -> None:
    """kill -9 of the process running a task: the other replica does not report it working
    forever; it says the task failed and names the run's handle, whose outputs it returns."""
    fixture_notebook(root)
    with http_server(root, tmp_path, "--shared-state", name="b") as b:
        with http_server(root, tmp_path, "--shared-state", name="a", token=b.token) as a:
            async with (
                http_client(a.url, a.token, Tasks()) as via_a,
                http_client(b.url, b.token, Tasks()) as via_b,
            ):
                slow = await start_task(via_a, "execute", path="n.ipynb", code=SLOW)
                with anyio.fail_after(120):  # B follows the run: its handle is recorded
                    while True:
                        got = await tasks_request(via_b.session, "tasks/get", slow["taskId"])
                        if "tick" in got.get("statusMessage", ""):
                            break
                        await anyio.sleep(0.2)
                assert got["status"] == "working"
            a.proc.kill()
            a.proc.wait(timeout=10)
        async with http_client(b.url, b.token, Tasks()) as via_b:
            state = await wait_task(via_b, slow["taskId"], limit=60)
            assert state["status"] == "failed", state
            assert "ended before it did" in state["statusMessage"]
            handle = re.search(r"handle='([^']+)'", state["statusMessage"])
            assert handle is not None, state
            run = await call(via_b, "get_execution", handle=handle.group(1))
            assert "tick 0" in run["cells"][0]["outputs"][0]["text"]


MODES = [pytest.param(m, marks=[pytest.mark.jupyter] if m != "files" else []) for m in MODES_]


@pytest.fixture(params=MODES)
async def opted_in(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Client, Path, str, Tasks]]:
    """A client that declares the extension, in each mode: (client, local folder, path prefix,
    its extension, which hears its listen streams)."""
    mode = str(request.param)
    tasks = Tasks()
    if mode == "extension":
        from tests.extension.conftest import mcp_url

        server = request.getfixturevalue("ext_session_server")
        name, folder = _folders.fresh(server.root)
        headers = {"Authorization": f"token {server.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(
                streamable_http_client(mcp_url(server), http_client=http),
                extensions=[tasks],
                message_handler=tasks.on_message,
            ) as client,
        ):
            yield client, folder, f"{name}/", tasks
        return
    settings = Settings(root=tmp_path / "root", lock_dir=tmp_path / "locks", kernel_pool=0)
    if mode == "live":
        from nbrelay.jupyter_api import JupyterAPI
        from nbrelay.kernels.remote import RemoteKernels
        from nbrelay.stores.rtc import RTCStore

        server = request.getfixturevalue("jupyter")
        name, folder = _folders.fresh(server.root)
        api = JupyterAPI(server.url, Secret(server.token))
        store = RTCStore(api, agent_name="nbrelay test agent", folder=name, save_each_edit=True)
        kernels = RemoteKernels(api, server_path=store.paths.server)
        ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
    else:
        folder = tmp_path / "root"
        folder.mkdir()
        ws = Workspace(
            settings, FileStore(folder, lock_dir=tmp_path / "locks"), id_factory=counter_ids()
        )
    async with Client(
        build_server(settings, ws), extensions=[tasks], message_handler=tasks.on_message
    ) as client:
        yield client, folder, "", tasks


async def test_in_every_mode_a_run_as_a_task_completes_and_one_is_cancelled(
    opted_in: tuple[Client, Path, str, Tasks],
) -> None:
    """File mode, live mode (a JupyterLab's rooms and kernels) and extension mode (nbrelay inside
    the Jupyter Server): the task's result is the run's, its outputs reach the notebook, and a
    cancelled task interrupts its run."""
    client, folder, prefix, _ = opted_in
    fixture_notebook(folder)
    path = f"{prefix}n.ipynb"
    created = await start_task(client, "execute", path=path, cells=[":"])
    done = result_data(await wait_task(client, created["taskId"], limit=240))
    assert done["cells"][1]["outputs"][0]["text"] == "x is 42\n"
    with anyio.fail_after(120):  # the file holds the outputs (live: once the server saved)
        while True:
            if "x is 42" in (folder / "n.ipynb").read_text():
                break
            await anyio.sleep(0.2)
    slow = await start_task(client, "execute", path=path, code=SLOW)
    await printing(client.session, slow["taskId"])
    await tasks_request(client.session, "tasks/cancel", slow["taskId"])
    ended = await wait_task(client, slow["taskId"], limit=120)
    assert ended["status"] == "cancelled", ended
    after = await call(client, "execute", path=path, code="print(x)")
    assert after["cells"][0]["outputs"][0]["text"] == "42\n"  # interrupted, not restarted


async def test_in_every_mode_a_task_is_followed_through_listen(
    opted_in: tuple[Client, Path, str, Tasks],
) -> None:
    """``notifications/tasks`` on a ``subscriptions/listen`` stream in every mode (extension
    mode: over the Jupyter Server's HTTP): the task's state at once, its end, and the end is
    what ``tasks/get`` answers."""
    client, folder, prefix, tasks = opted_in
    fixture_notebook(folder)
    code = "import time\nfor i in range(5):\n    print('step', i, flush=True)\n    time.sleep(0.3)"
    created = await start_task(client, "execute", path=f"{prefix}n.ipynb", code=code)
    task_id = created["taskId"]
    async with listening(client, tasks, taskIds=[task_id]) as stream:
        assert stream.honored == {"taskIds": [task_id]}
        final = await stream.ended(task_id, limit=240)
    assert stream.states(task_id)[0]["taskId"] == task_id
    assert final["status"] == "completed", final
    got = await tasks_request(client.session, "tasks/get", task_id)
    assert final["result"] == got["result"]
    assert final["lastUpdatedAt"] == got["lastUpdatedAt"]
    assert final["ttlMs"] == got["ttlMs"]
    text = final["result"]["structuredContent"]["cells"][0]["outputs"][0]["text"]
    assert text == "".join(f"step {i}\n" for i in range(5))


def test_finished_tasks_are_kept_newest_first_within_the_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finished tasks hold their results (a PDF is megabytes): the newest are kept, within the
    count and the characters allowed; a task still working is never dropped."""
    from nbrelay.tools import tasks

    monkeypatch.setattr(tasks, "KEEP_FINISHED", 3)
    monkeypatch.setattr(tasks, "KEEP_BYTES", 2_500)
    book = tasks.RunTasks()
    working = tasks.RunTask("w", "execute", None)
    book._tasks["w"] = working
    for k in range(5):
        task = tasks.RunTask(f"t{k}", "export_notebook", None)
        task.result = {"content": [{"type": "text", "text": "x" * (1000 if k >= 3 else 10)}]}
        task.finish("completed")
        book._tasks[task.task_id] = task
    book._prune()
    # the count keeps the newest three; t2 is small, so the three fit the characters too
    assert sorted(book._tasks) == ["t2", "t3", "t4", "w"]
    big = tasks.RunTask("t5", "export_notebook", None)
    big.result = {"content": [{"type": "text", "text": "x" * 1000}]}
    big.finish("completed")
    book._tasks["t5"] = big
    book._prune()  # t5, t4 fit; with t3 the characters are over
    assert sorted(book._tasks) == ["t4", "t5", "w"]
