"""Idle kernels in live mode: nbrelay lets go of a person's session kernel after
--kernel-idle-timeout without stopping it, and the next run says its variables were kept; a
kernel nbrelay started is stopped, its variables kept with --persist-sessions; a Jupyter
Server's kernels are not capped by nbrelay's default --max-kernels."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.kernels.remote import RemoteKernels
from nbrelay.server import build_server
from nbrelay.workspace import Workspace
from tests.helpers import PATIENCE, call, counter_ids, notebook, write_notebook
from tests.live.conftest import live_store
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio


async def test_a_persons_kernel_left_idle_keeps_its_variables(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    folder, local = live_folder
    path = f"{folder}/n.ipynb"
    write_notebook(local / "n.ipynb", notebook("1"))
    headers = {"Authorization": f"token {jupyter.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        # The person opens the notebook in JupyterLab: a session and its kernel.
        made = await http.post(
            f"{jupyter.url}api/sessions",
            json={
                "path": path,
                "type": "notebook",
                "name": "n.ipynb",
                "kernel": {"name": "python3"},
            },
        )
        assert made.status_code == 201, made.text
        kernel_id = made.json()["kernel"]["id"]
        settings = Settings(kernel_pool=0, kernel_idle_timeout=1)
        store = live_store(jupyter, folder)
        kernels = RemoteKernels(store.api, server_path=store.paths.server)
        ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
        assert ws.kernels.max_kernels(kernels) == 0  # the server's kernels: no default cap
        async with Client(build_server(settings, ws)) as client:
            await call(client, "execute", path="n.ipynb", code="answer = 41")
            with anyio.fail_after(PATIENCE):
                while True:
                    listed = (await call(client, "list_kernels"))["kernels"]
                    if [k["state"] for k in listed] == ["suspended"]:
                        break
                    await anyio.sleep(0.2)
            again = await call(client, "execute", path="n.ipynb", code="print(answer + 1)")
        assert again["cells"][0]["outputs"][0]["text"] == "42\n"
        assert again["note"].startswith("reconnected to the notebook's kernel, variables kept")
        assert "state_lost" not in again
        running = (await http.get(f"{jupyter.url}api/kernels/{kernel_id}")).status_code
        assert running == 200  # still the person's kernel, still running
        await http.delete(f"{jupyter.url}api/sessions/{made.json()['id']}")


async def test_persisted_sessions_keep_their_variables_on_a_jupyter_server(
    jupyter: JupyterServer, live_folder: tuple[str, Path]
) -> None:
    """--persist-sessions in live mode: the kernel nbrelay started saves its variables beside
    the notebook when it is suspended; the next run's new kernel finds the file (only the
    kernel sees it), restores them and removes it."""
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("1"))
    saved = local / ".nbrelay-state" / "n.ipynb.session.dill"
    settings = Settings(kernel_pool=0, kernel_idle_timeout=1, persist_sessions=True)
    store = live_store(jupyter, folder)
    kernels = RemoteKernels(store.api, server_path=store.paths.server)
    ws = Workspace(settings, store, id_factory=counter_ids(), kernels=kernels)
    async with Client(build_server(settings, ws)) as client:
        await call(
            client, "execute", path="n.ipynb", code="answer = 41\ndef twice(x): return 2 * x"
        )
        with anyio.fail_after(PATIENCE):
            while True:
                listed = (await call(client, "list_kernels"))["kernels"]
                if [k["state"] for k in listed] == ["suspended"]:
                    break
                await anyio.sleep(0.2)
        assert saved.is_file()  # written by the kernel, next to the notebook
        again = await call(client, "execute", path="n.ipynb", code="print(twice(answer) + 0)")
        assert again["cells"][0]["outputs"][0]["text"] == "82\n", again
        assert again["note"].startswith("the idle session was resumed: 2 saved variable(s)")
        assert "state_lost" not in again
        assert not saved.exists()  # removed by the kernel that restored it
        await call(client, "execute", path="n.ipynb", code="answer += 1")
    # nbrelay stopped: the running kernel saved its variables first.
    assert saved.is_file()
