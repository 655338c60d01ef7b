"""How a Jupyter Server runs its kernels, as deployments configure it, in live mode (nbrelay
reaching the server over REST and WebSocket) and extension mode (nbrelay inside that server), on
one server: kernels on a Kernel Gateway (``--gateway-url``), as JupyterHub deployments with
Enterprise Gateway run them, pending kernels (``use_pending_kernels``), and idle kernels culled
(``cull_idle_timeout``).

What went wrong here before: in extension mode no code ran at all (nbrelay opened ZeroMQ
channels the gateway's kernels do not have, and every run was an internal error); in live mode,
after the gateway restarted, every run waited for ever (the server answered for the lost kernel
from its memory, "idle", and dropped what nbrelay sent it), and ``restart_kernel`` failed.
With pending kernels, extension mode ran nothing: it made its client of a kernel the server was
still launching, whose ports were not known yet, and waited 60 s for an answer on each call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from nbrelay.config import Secret, Settings
from nbrelay.jupyter_api import JupyterAPI
from nbrelay.kernels.execution import RESTARTED_ELSEWHERE
from nbrelay.kernels.remote import RemoteKernels
from nbrelay.server import build_server
from nbrelay.stores.rtc import RTCStore
from nbrelay.workspace import Workspace
from tests.extension.conftest import ext_client
from tests.helpers import PATIENCE, call, counter_ids, text_of
from tests.live.person import restart_kernel_as_a_person
from tests.live.server import JupyterServer, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.kernel]

MODES = ("live", "extension")


@pytest.fixture
def gateway_and_server(
    start_jupyter: Callable[..., JupyterServer],
) -> tuple[JupyterServer, JupyterServer]:
    """A Kernel Gateway, and a JupyterLab (with nbrelay's extension) whose kernels run on it."""
    gateway = start_jupyter(kind="gateway")
    server = start_jupyter(
        args=[f"--gateway-url={gateway.url}", f"--GatewayClient.auth_token={gateway.token}"]
    )
    return gateway, server


@contextlib.asynccontextmanager
async def agent_on(mode: str, server: JupyterServer, tmp_path: Path) -> AsyncIterator[Client]:
    if mode == "extension":
        async with ext_client(server) as client:
            yield client
        return
    settings = Settings(root=tmp_path / "root", lock_dir=tmp_path / "locks", kernel_pool=0)
    api = JupyterAPI(server.url, Secret(server.token))
    store = RTCStore(api, agent_name="nbrelay test agent")
    kernels = RemoteKernels(api, server_path=store.paths.server)
    ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
    async with Client(build_server(settings, ws)) as client:
        yield client


async def run(client: Client, **args: Any) -> dict[str, Any]:
    """``execute`` to its end (bounded: a run that never ends fails the test)."""
    done = await call(client, "execute", wait=PATIENCE, **args)
    assert done["status"] == "done", done
    return done


@pytest.mark.parametrize("mode", MODES)
async def test_code_runs_on_the_servers_gateway_and_survives_its_faults(
    mode: str, gateway_and_server: tuple[JupyterServer, JupyterServer], tmp_path: Path
) -> None:
    gateway, server = gateway_and_server
    async with agent_on(mode, server, tmp_path) as c:
        await call(c, "create_notebook", path="g.ipynb", cells=["x = 41", "x + 1"])
        ran = await run(c, path="g.ipynb", cells="all")
        assert [cell["status"] for cell in ran["cells"]] == ["ok", "ok"], ran
        assert ran["cells"][1]["outputs"][0]["text"] == "42"
        listed = await call(c, "list_variables", path="g.ipynb")
        assert [v["name"] for v in listed["variables"]] == ["x"], listed

        # An interrupt reaches a run on the gateway; the variables stay.
        polled = await call(
            c, "execute", path="g.ipynb", code="import time\ntime.sleep(120)", wait=0.5
        )
        assert polled["status"] == "running", polled
        interrupted = await call(c, "interrupt_kernel", path="g.ipynb")
        assert interrupted["note"] == "interrupted", interrupted
        ended = await call(c, "get_execution", handle=polled["handle"], wait=PATIENCE)
        assert ended["cells"][0]["status"] == "interrupted", ended

        # A person's "Restart Kernel" is said on the next run.
        await restart_kernel_as_a_person(server, "g.ipynb")
        after = await c.call_tool(
            "execute", {"path": "g.ipynb", "code": "print('x' in dir())", "wait": PATIENCE}
        )
        assert RESTARTED_ELSEWHERE in text_of(after), text_of(after)
        assert after.structured_content is not None
        assert after.structured_content["cells"][0]["outputs"][0]["text"] == "False\n"

        # A kernel that dies on the gateway is said, and replaced.
        died = await run(c, path="g.ipynb", code="import os\nos._exit(1)")
        assert died["cells"][0]["status"] == "died", died
        alive = await run(c, path="g.ipynb", code="y = 6 * 7\nprint(y)")
        assert alive["cells"][0]["outputs"][0]["text"] == "42\n", alive

        # The gateway restarts (its kernels die with it): the next run says the kernel is gone,
        # starts another, and runs.
        gateway.kill()
        gateway.start()
        again = await run(c, path="g.ipynb", code="print('y' in dir())")
        assert again["cells"][0]["status"] == "ok", again
        assert again["cells"][0]["outputs"][0]["text"] == "False\n"
        assert again["state_lost"] is True
        assert "is gone from the" in again["cells"][0]["note"], again
        next_run = await run(c, path="g.ipynb", code="print('next')")
        assert next_run["cells"][0]["outputs"][0]["text"] == "next\n"

        # While the gateway is down, nothing is an internal error. (Live mode lists the
        # kernelspecs it read before; the extension asks the server, which asks the gateway.)
        gateway.stop(grace=5)
        down = await c.call_tool("list_kernels", {})
        assert "internal error" not in text_of(down), text_of(down)
        if mode == "extension":
            assert down.is_error, text_of(down)
            assert "could not list its kernelspecs" in text_of(down), text_of(down)

        # Back up after a clean stop: restart_kernel works and the notebook runs.
        gateway.start()
        restarted = await call(c, "restart_kernel", path="g.ipynb")
        assert restarted["kernel"]["state"] != "dead", restarted
        last = await run(c, path="g.ipynb", code="print(6 * 7)")
        assert last["cells"][0]["outputs"][0]["text"] == "42\n", last


@pytest.mark.parametrize("mode", MODES)
async def test_code_runs_on_a_server_that_launches_kernels_pending(
    mode: str, start_jupyter: Callable[..., JupyterServer], tmp_path: Path
) -> None:
    server = start_jupyter(args=["--MappingKernelManager.use_pending_kernels=True"])
    async with agent_on(mode, server, tmp_path) as c:
        await call(c, "create_notebook", path="p.ipynb", cells=["x = 41", "x + 1"])
        ran = await run(c, path="p.ipynb", cells="all")
        assert ran["cells"][1]["outputs"][0]["text"] == "42", ran
        restarted = await call(c, "restart_kernel", path="p.ipynb")
        assert restarted["kernel"]["state"] == "idle", restarted
        after = await run(c, path="p.ipynb", code="print('x' in dir())")
        assert after["cells"][0]["outputs"][0]["text"] == "False\n", after
        died = await run(c, path="p.ipynb", code="import os\nos._exit(1)")
        assert died["cells"][0]["status"] == "died", died
        again = await run(c, path="p.ipynb", code="print(6 * 7)")
        assert again["cells"][0]["outputs"][0]["text"] == "42\n", again


@pytest.mark.parametrize("form", ["binary", "json"])
async def test_code_runs_in_the_kernel_websocket_form_the_server_picks(
    form: str, start_jupyter: Callable[..., JupyterServer], tmp_path: Path
) -> None:
    """nbrelay offers the binary protocol JupyterLab uses (``v1.kernel.websocket.jupyter.org``),
    which Jupyter Server picks unless told to keep the JSON form; some servers speak nothing
    else (jupyter-server-documents). Output of every kind arrives whole in either form."""
    args = [] if form == "binary" else ["--ZMQChannelsWebsocketConnection.kernel_ws_protocol="]
    server = start_jupyter(args=args)
    settings = Settings(root=tmp_path / "root", lock_dir=tmp_path / "locks", kernel_pool=0)
    api = JupyterAPI(server.url, Secret(server.token))
    store = RTCStore(api, agent_name="nbrelay test agent")
    kernels = RemoteKernels(api, server_path=store.paths.server)
    ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
    cells = [
        "print('naïve ✓')",
        "from IPython.display import display, HTML\ndisplay(HTML('<b>bold</b>'))",
        "{'k': [1, 2]}",
        "1 / 0",
    ]
    async with Client(build_server(settings, ws)) as c:
        await call(c, "create_notebook", path="f.ipynb", cells=cells)
        ran = await run(c, path="f.ipynb", cells="all", stop_on_error=False)
        outs = [cell["outputs"][0] for cell in ran["cells"]]
        assert outs[0]["text"] == "naïve ✓\n", ran
        assert "bold" in outs[1]["text"], ran
        assert outs[2]["text"] == "{'k': [1, 2]}", ran
        assert "ZeroDivisionError" in outs[3]["text"], ran
        used = [s._ws.binary for s in kernels._sessions.values() if s._ws is not None]
        assert used == [form == "binary"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_notebook_from_a_machine_with_other_kernels_is_switched_and_runs(
    mode: str, start_jupyter: Callable[..., JupyterServer], tmp_path: Path
) -> None:
    """A notebook made in a conda environment names a kernelspec this server does not have: the
    run is refused naming the server's kernelspecs and the call that switches it, which works."""
    server = start_jupyter()
    made_elsewhere = {
        "cells": [{"cell_type": "code", "metadata": {}, "source": "6 * 7", "outputs": []}],
        "metadata": {
            "kernelspec": {
                "name": "conda-env-analysis-py",
                "display_name": "Python [conda env:analysis]",
                "language": "python",
            }
        },
        "nbformat": 4,
        "nbformat_minor": 2,
    }
    (server.root / "conda.ipynb").write_text(json.dumps(made_elsewhere))
    async with agent_on(mode, server, tmp_path) as c:
        refused = await c.call_tool("execute", {"path": "conda.ipynb", "cells": "all"})
        said = text_of(refused)
        assert refused.is_error, said
        assert "no kernelspec 'conda-env-analysis-py'" in said, said
        assert "python3" in said, said
        assert "notebook_metadata(path=…, kernel=…)" in said, said
        await call(c, "notebook_metadata", path="conda.ipynb", kernel="python3")
        ran = await run(c, path="conda.ipynb", cells="all")
        assert ran["cells"][0]["outputs"][0]["text"] == "42", ran


# A kernel manager that refuses the next restarts asked of it (their number in a file), as
# Jupyter Server refuses one asked while its restarter is restarting the kernel (it died): a race
# that a busy server lost now and then, and no test can bring about at will.
REFUSING_RESTARTS = """
from pathlib import Path

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import Unicode


class RefusingRestarts(AsyncMappingKernelManager):
    refusals = Unicode("", config=True)

    async def restart_kernel(self, kernel_id, now=False):
        count = Path(self.refusals)
        left = int(count.read_text() or 0) if count.is_file() else 0
        if left > 0:
            count.write_text(str(left - 1))
            raise RuntimeError("the kernel is being restarted by its restarter")
        return await super().restart_kernel(kernel_id, now=now)
"""


@pytest.mark.parametrize("mode", MODES)
async def test_a_restart_refused_while_the_server_restarts_the_kernel_is_retried(
    mode: str,
    start_jupyter: Callable[..., JupyterServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel that died is restarted by the server's own restarter, which tells its clients
    ("restarting"); nbrelay's restart, asked meanwhile, failed (500 "Exception restarting
    kernel"), the run said the restart failed, and the next run said the kernel had died again.
    Now a refused restart is tried again; refused every time, it fails saying why."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "nbrelay_test_restarts.py").write_text(REFUSING_RESTARTS)
    monkeypatch.setenv("PYTHONPATH", str(modules))
    refusals = tmp_path / "refusals"
    server = start_jupyter(
        args=[
            "--ServerApp.kernel_manager_class=nbrelay_test_restarts.RefusingRestarts",
            f"--RefusingRestarts.refusals={refusals}",
        ]
    )
    async with agent_on(mode, server, tmp_path) as c:
        await call(c, "create_notebook", path="r.ipynb", cells=["x = 41"])
        await run(c, path="r.ipynb", cells="all")
        refusals.write_text("2")
        died = await run(c, path="r.ipynb", code="import os\nos._exit(1)")
        cell = died["cells"][0]
        assert cell["status"] == "died", died
        assert "kernel restarted" in cell["note"], died
        assert refusals.read_text() == "0"  # refused twice, then restarted
        after = await run(c, path="r.ipynb", code="print('x' in dir())")
        cell = after["cells"][0]
        assert (cell["status"], cell["outputs"][0]["text"]) == ("ok", "False\n"), after
        assert "died" not in cell.get("note", ""), after  # said once, by the run it cut short
        refusals.write_text("3")
        failed = await c.call_tool("restart_kernel", {"path": "r.ipynb"})
        assert failed.is_error, text_of(failed)
        assert "could not be restarted" in text_of(failed), text_of(failed)
        assert refusals.read_text() == "0"  # asked three times
        again = await run(c, path="r.ipynb", code="print(6 * 7)")
        assert again["cells"][0]["outputs"][0]["text"] == "42\n", again


@pytest.mark.parametrize("mode", MODES)
async def test_a_kernel_the_server_culled_is_said_and_replaced(
    mode: str, start_jupyter: Callable[..., JupyterServer], tmp_path: Path
) -> None:
    """The server shuts down kernels idle for a while (``cull_connected``: even with nbrelay
    connected, as JupyterHub deployments often set it): the next run says the variables were
    lost, and runs in a new kernel."""
    server = start_jupyter(
        args=[
            "--MappingKernelManager.cull_idle_timeout=3",
            "--MappingKernelManager.cull_interval=1",
            "--MappingKernelManager.cull_connected=True",
        ]
    )
    headers = {"Authorization": f"token {server.token}"}
    async with (
        agent_on(mode, server, tmp_path) as c,
        httpx2.AsyncClient(base_url=server.url, headers=headers, timeout=PATIENCE) as http,
    ):
        await call(c, "create_notebook", path="c.ipynb", cells=["x = 41"])
        await run(c, path="c.ipynb", cells="all")

        async def culled() -> bool:
            return bool((await http.get("api/kernels")).json() == [])

        await wait_for(culled, seconds=PATIENCE, interval=0.5)
        # Listed as it is (it was "idle" in live mode, as last heard), and replaced on the next run.
        listed = await call(c, "list_kernels")
        assert [k["state"] for k in listed["kernels"] if k["path"] == "c.ipynb"] == ["dead"]
        after = await run(c, path="c.ipynb", code="print('x' in dir())")
        cell = after["cells"][0]
        assert cell["outputs"][0]["text"] == "False\n", after
        assert after["state_lost"] is True
        assert "is gone from the Jupyter Server" in cell["note"], after
