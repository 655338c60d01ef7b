"""Running code in live mode (the notebook's session kernel on the Jupyter Server), and on a
Jupyter Kernel Gateway in file mode.

A person's RTC client watches the cell: outputs must arrive while the cell runs, with
JupyterLab's running state (``[*]``), which must be reset however the run ends.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from nbrelay.config import Secret, Settings
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.kernels.remote import RemoteKernels
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import PATIENCE, call, counter_ids, notebook, text_of, write_notebook
from tests.live.conftest import agent
from tests.live.person import person
from tests.live.rooms import room_agent
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio

# Each tick waits until the test has seen the one before in the person's copy of the cell, so
# "the outputs streamed in while it ran" is observed, not a race with sampling.
TICKS = (
    "import os, time\n"
    "for i in range(6):\n"
    "    print(i, flush=True)\n"
    "    while i < 5 and not os.path.exists(f'seen-{i}'):\n"
    "        time.sleep(0.02)"
)


def stored(path: Path) -> list[dict[str, Any]]:
    """The file's cells (Jupyter Server rewrites files in place: a read mid-write is retried)."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            cells: list[dict[str, Any]] = json.loads(path.read_text())["cells"]
            return cells
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


async def test_outputs_stream_into_the_shared_cell_while_it_runs(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook(TICKS, "1/0"))
    async with agent(jupyter, folder) as client, person(jupyter, f"{folder}/n.ipynb") as p:
        await call(client, "execute", path="n.ipynb", code="1")  # the kernel is up

        def shows(state: str, text: str) -> bool:
            cell = p.cell("c0")
            outs = cell["outputs"]
            return (
                cell.get("execution_state") == state
                and (str(outs[0]["text"]) if len(outs) else "") == text
            )

        async def follow() -> None:
            for i in range(5):
                # the person sees the cell running ([*]) with the lines printed so far
                want = "".join(f"{j}\n" for j in range(i + 1))
                await wait_for(functools.partial(shows, "running", want), seconds=PATIENCE)
                (local / f"seen-{i}").touch()

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            result = await call(client, "execute", path="n.ipynb", cells=["c0"], wait=PATIENCE)
        assert result["cells"][0]["status"] == "ok"
        await wait_for(lambda: shows("idle", "".join(f"{i}\n" for i in range(6))), seconds=PATIENCE)
        # A failing run ends idle too, with its error in the cell.
        failed = await call(client, "execute", path="n.ipynb", cells=["c1"])
        assert failed["cells"][0]["status"] == "error"
        await wait_for(lambda: p.cell("c1").get("execution_state") == "idle", seconds=5)
        assert p.cell("c1")["outputs"][0]["output_type"] == "error"
    on_disk = stored(local / "n.ipynb")
    assert on_disk[0]["outputs"][0]["text"] == [f"{i}\n" for i in range(6)]
    assert on_disk[0]["execution_count"] == result["cells"][0]["execution_count"]
    assert on_disk[1]["outputs"][0]["ename"] == "ZeroDivisionError"
    assert all("execution_state" not in c for c in on_disk)


async def test_a_timed_out_run_is_interrupted_and_shows_idle(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("import time\ntime.sleep(60)"))
    async with agent(jupyter, folder) as client, person(jupyter, f"{folder}/n.ipynb") as p:
        result = await call(client, "execute", path="n.ipynb", cells=[0], timeout=2)
        assert result["cells"][0]["status"] == "timeout"
        await wait_for(lambda: p.cell("c0").get("execution_state") == "idle", seconds=10)
        after = await call(client, "execute", path="n.ipynb", code="21 * 2")
        assert after["cells"][0]["outputs"][0]["text"] == "42"


async def test_a_person_sees_the_agents_cell_running_then_its_count(
    jupyter: JupyterServer, live_folder: tuple[str, Path], way: str
) -> None:
    # Live mode and the server extension alike: the room store shows JupyterLab's [*].
    folder, local = live_folder
    path = f"{folder}/n.ipynb"
    write_notebook(
        local / "n.ipynb",
        notebook("import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.02)"),
    )
    async with room_agent(way, jupyter) as client, person(jupyter, path) as p:
        await call(client, "execute", path=path, code="1")  # the kernel is up

        async def release() -> None:  # the cell ends once the person saw it running
            running = lambda: p.cell("c0").get("execution_state") == "running"  # noqa: E731
            await wait_for(running, seconds=PATIENCE)
            (local / "go").touch()

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            result = await call(client, "execute", path=path, cells=["c0"], wait=PATIENCE)
        count = result["cells"][0]["execution_count"]
        assert isinstance(count, int)

        def counted() -> bool:
            cell = p.cell("c0")
            return bool(cell.get("execution_state") == "idle" and cell["execution_count"] == count)

        await wait_for(counted, seconds=PATIENCE)
    assert all("execution_state" not in c for c in stored(local / "n.ipynb"))


async def _sessions(server: JupyterServer) -> list[dict[str, Any]]:
    async with httpx2.AsyncClient(
        base_url=server.url, headers={"Authorization": f"token {server.token}"}
    ) as http:
        resp = await http.get("api/sessions")
        data: list[dict[str, Any]] = resp.json()
        return data


async def test_the_agent_runs_code_in_the_persons_kernel_and_leaves_it_running(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("shared = 'from the agent'"))
    path = f"{folder}/n.ipynb"
    # The person opens the notebook in JupyterLab, which starts its session kernel.
    async with httpx2.AsyncClient(
        base_url=jupyter.url, headers={"Authorization": f"token {jupyter.token}"}
    ) as http:
        resp = await http.post(
            "api/sessions",
            json={
                "path": path,
                "name": "n.ipynb",
                "type": "notebook",
                "kernel": {"name": "python3"},
            },
        )
        kernel_id = resp.json()["kernel"]["id"]
    async with agent(jupyter, folder) as client:
        await call(client, "execute", path="n.ipynb", cells=[0])
        value = await call(client, "execute", path="n.ipynb", code="shared")
        assert value["cells"][0]["outputs"][0]["text"] == "'from the agent'"
    mine = [s for s in await _sessions(jupyter) if s["path"] == path]
    assert [s["kernel"]["id"] for s in mine] == [kernel_id]  # one session: the person's, alive


@contextlib.asynccontextmanager
async def file_mode_on(gateway: JupyterServer, root: Path, locks: Path) -> AsyncIterator[Client]:
    """nbrelay in file mode on ``root``, its kernels on ``gateway`` (``--kernel-gateway-url``)."""
    settings = Settings(root=root, lock_dir=locks, kernel_pool=0)
    kernels = RemoteKernels(JupyterAPI(gateway.url, Secret(gateway.token)), close_api=True)
    ws = Workspace(
        settings, FileStore(root, lock_dir=locks), id_factory=counter_ids(), kernels=kernels
    )
    async with Client(build_server(settings, ws)) as client:
        yield client


async def test_kernels_on_a_kernel_gateway_run_file_mode_notebooks(
    start_jupyter: Any, tmp_path: Path
) -> None:
    gateway: JupyterServer = start_jupyter(kind="gateway")
    root = tmp_path / "files"
    write_notebook(root / "g.ipynb", notebook("import os\nx = 6", "x * 7", "print(os.getpid())"))
    async with file_mode_on(gateway, root, tmp_path / "locks") as client:
        result = await call(client, "execute", path="g.ipynb", cells=[":"])
        assert [c["status"] for c in result["cells"]] == ["ok", "ok", "ok"]
        assert result["cells"][1]["outputs"][0]["text"] == "42"
        remote_pid = int(result["cells"][2]["outputs"][0]["text"])
        listed = await call(client, "list_kernels")
        assert [k["path"] for k in listed["kernels"]] == ["g.ipynb"]
        await call(client, "restart_kernel", path="g.ipynb")
        after = await call(client, "execute", path="g.ipynb", code="'x' in globals()")
        assert after["cells"][0]["outputs"][0]["text"] == "False"
    cells = stored(root / "g.ipynb")
    assert cells[1]["outputs"][0]["data"]["text/plain"] == ["42"]
    assert remote_pid > 0
    # nbrelay started that kernel, so it shut it down when it stopped.
    async with httpx2.AsyncClient(
        base_url=gateway.url, headers={"Authorization": f"token {gateway.token}"}
    ) as http:
        assert (await http.get("api/kernels")).json() == []


async def test_a_kernel_gateway_with_its_defaults_runs_file_mode_notebooks(
    start_jupyter: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernel Gateway and Enterprise Gateway list neither kernels nor sessions unless told to
    (403): every run failed with advice to check the token. nbrelay now starts bare kernels
    there, passes its ``KERNEL_*`` variables (Enterprise Gateway refuses a kernel without
    ``KERNEL_USERNAME``), and a kernel the gateway restarts after it died is reported once, by
    the run it cut short, not restarted again by the next run."""
    monkeypatch.setenv("KERNEL_USERNAME", "nbrelay-test-user")
    gateway: JupyterServer = start_jupyter(
        kind="gateway", args=["--JupyterWebsocketPersonality.list_kernels=False"]
    )
    root = tmp_path / "files"
    write_notebook(root / "g.ipynb", notebook("import os\nx = 6"))
    async with file_mode_on(gateway, root, tmp_path / "locks") as client:
        await call(client, "execute", path="g.ipynb", cells=[0])
        user = await call(
            client, "execute", path="g.ipynb", code="print(os.environ.get('KERNEL_USERNAME'))"
        )
        assert user["cells"][0]["outputs"][0]["text"] == "nbrelay-test-user\n", user
        died = await call(client, "execute", path="g.ipynb", code="os._exit(1)", wait=PATIENCE)
        assert died["cells"][0]["status"] == "died", died
        after = await call(client, "execute", path="g.ipynb", code="print('x' in dir())")
        cell = after["cells"][0]
        assert cell["status"] == "ok", after
        assert cell["outputs"][0]["text"] == "False\n"
        assert "died" not in cell.get("note", ""), after  # said once, by the run it cut short
        restarted = await call(client, "restart_kernel", path="g.ipynb")
        assert restarted["kernel"]["state"] == "idle", restarted
        again = await call(client, "execute", path="g.ipynb", code="6 * 7")
        assert again["cells"][0]["outputs"][0]["text"] == "42"


async def test_enterprise_gateway_runs_file_mode_notebooks(
    start_jupyter: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jupyter Enterprise Gateway 3.3 (its own environment: ipykernel 6, jupyter_server 1), which
    lists neither kernels nor sessions and starts a kernel only for a user it authorizes, named
    by ``KERNEL_USERNAME``: refused with what to set, then run, interrupted, died and restarted
    with the gateway killed under it."""
    gateway: JupyterServer = start_jupyter(
        kind="enterprise-gateway",
        args=['--EnterpriseGatewayApp.authorized_users={"nbrelay-test-user"}'],
    )
    root = tmp_path / "files"
    write_notebook(root / "e.ipynb", notebook("import os\nx = 6", "x * 7"))
    monkeypatch.delenv("KERNEL_USERNAME", raising=False)
    async with file_mode_on(gateway, root, tmp_path / "locks") as client:
        refused = await client.call_tool("execute", {"path": "e.ipynb", "cells": [0]})
        assert refused.is_error, text_of(refused)
        assert "KERNEL_USERNAME" in text_of(refused), text_of(refused)
        monkeypatch.setenv("KERNEL_USERNAME", "nbrelay-test-user")
        ran = await call(client, "execute", path="e.ipynb", cells="all")
        assert ran["cells"][1]["outputs"][0]["text"] == "42", ran
        user = await call(
            client, "execute", path="e.ipynb", code="print(os.environ.get('KERNEL_USERNAME'))"
        )
        assert user["cells"][0]["outputs"][0]["text"] == "nbrelay-test-user\n", user

        polled = await call(
            client, "execute", path="e.ipynb", code="os.system('sleep 120')", wait=0.5
        )
        interrupted = await call(client, "interrupt_kernel", path="e.ipynb")
        assert interrupted["note"] == "interrupted", interrupted
        ended = await call(client, "get_execution", handle=polled["handle"], wait=PATIENCE)
        assert ended["status"] == "done", ended
        kept = await call(client, "execute", path="e.ipynb", code="print(x)")
        assert kept["cells"][0]["outputs"][0]["text"] == "6\n", kept

        died = await call(client, "execute", path="e.ipynb", code="os._exit(1)", wait=PATIENCE)
        assert died["cells"][0]["status"] == "died", died
        after = await call(client, "execute", path="e.ipynb", code="print('x' in dir())")
        assert after["cells"][0]["outputs"][0]["text"] == "False\n", after
        assert "died" not in after["cells"][0].get("note", ""), after  # said once

        gateway.kill()
        gateway.start()
        again = await call(client, "execute", path="e.ipynb", code="print('again')")
        assert again["cells"][0]["status"] == "ok", again
        assert again["cells"][0]["outputs"][0]["text"] == "again\n"
        assert again["state_lost"] is True
        assert "is gone from the" in again["cells"][0]["note"], again


async def _open_as_a_person(server: JupyterServer, path: str) -> str:
    """What JupyterLab does when a person opens a notebook: a session (and kernel) for it."""
    async with httpx2.AsyncClient(
        base_url=server.url, headers={"Authorization": f"token {server.token}"}
    ) as http:
        resp = await http.post(
            "api/sessions",
            json={"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}},
        )
        resp.raise_for_status()
        kernel_id: str = resp.json()["kernel"]["id"]
        return kernel_id


@pytest.mark.parametrize("crash", [True, False], ids=["killed", "stopped"])
async def test_after_the_server_restarts_code_runs_again_in_a_new_or_the_persons_kernel(
    start_jupyter: Any, crash: bool
) -> None:
    """The server forgets every kernel and session when it stops: the next run notices, starts
    a new kernel (or joins the one a person's JupyterLab started meanwhile), says the variables
    were lost, and runs; restart_kernel works too."""
    server: JupyterServer = start_jupyter()
    write_notebook(server.root / "n.ipynb", notebook("x = 1"))
    write_notebook(server.root / "m.ipynb", notebook("y = 1"))
    async with agent(server) as client:
        for path in ("n.ipynb", "m.ipynb"):
            ran = await call(client, "execute", path=path, cells=[0])
            assert ran["cells"][0]["status"] == "ok"
        if crash:
            server.kill()
        else:
            server.stop(grace=5)
        server.start()
        # n.ipynb: run code again; nbrelay starts a new kernel and says the variables are gone.
        again = await call(client, "execute", path="n.ipynb", code="'x' in globals()")
        cell = again["cells"][0]
        assert cell["status"] == "ok", again
        assert cell["outputs"][0]["text"] == "False"
        assert again["state_lost"] is True
        assert "gone from the Jupyter Server" in cell["note"]
        assert "variables were lost" in cell["note"]
        then = await call(client, "execute", path="n.ipynb", code="1 + 1")
        assert then["cells"][0]["outputs"][0]["text"] == "2"
        assert "state_lost" not in then
        # m.ipynb: the person opened it in JupyterLab first; restart_kernel joins their kernel.
        persons = await _open_as_a_person(server, "m.ipynb")
        restarted = await call(client, "restart_kernel", path="m.ipynb")
        assert restarted["kernel"]["state"] in ("idle", "busy"), restarted
        mine = await call(client, "execute", path="m.ipynb", code="'y' in globals()")
        assert mine["cells"][0]["outputs"][0]["text"] == "False"
        # One session per notebook: the person's for m.ipynb, nbrelay's new one for n.ipynb.
        during = sorted((s["path"], s["kernel"]["id"] == persons) for s in await _sessions(server))
        assert during == [("m.ipynb", True), ("n.ipynb", False)]
    sessions = {s["path"]: s["kernel"]["id"] for s in await _sessions(server)}
    assert sessions == {"m.ipynb": persons}  # nbrelay shut down its own kernel, not the person's


async def test_after_a_kernel_gateway_restarts_its_notebooks_run_again(
    start_jupyter: Any, tmp_path: Path
) -> None:
    gateway: JupyterServer = start_jupyter(kind="gateway")
    root = tmp_path / "files"
    write_notebook(root / "g.ipynb", notebook("x = 6"))
    async with file_mode_on(gateway, root, tmp_path / "locks") as client:
        await call(client, "execute", path="g.ipynb", cells=[0])
        gateway.kill()
        gateway.start()
        again = await call(client, "execute", path="g.ipynb", code="'x' in globals()")
        assert again["cells"][0]["status"] == "ok", again
        assert again["cells"][0]["outputs"][0]["text"] == "False"
        assert again["state_lost"] is True
        gateway.stop(grace=5)
        gateway.start()
        restarted = await call(client, "restart_kernel", path="g.ipynb")
        assert restarted["kernel"]["state"] != "dead", restarted
        after = await call(client, "execute", path="g.ipynb", code="6 * 7")
        assert after["cells"][0]["outputs"][0]["text"] == "42"
