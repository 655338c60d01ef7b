"""Who the extension's operations act for: every one asks Jupyter's authorizer about the caller
it is given (``nbrelay.caller.Caller.jupyter``); one with no Jupyter user is refused unless it is
the server's own work; a run that outlasts its tool call
saves its outputs as the user who started it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from mcp_types import ResourceTemplateReference

from nbrelay.caller import ANYONE, Caller, acting
from nbrelay.extension.access import AccessDenied, JupyterUser
from nbrelay.extension.store import server_store
from tests.extension.conftest import ext_client
from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio


class _Handler:
    """What ``require`` asks of a Jupyter handler: its authorizer (Jupyter's own class)."""

    def __init__(self, allow: bool) -> None:
        from jupyter_server.auth.authorizer import AllowAllAuthorizer

        class Deny(AllowAllAuthorizer):
            def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
                return allow

        self.authorizer = Deny()


async def test_an_operation_without_the_jupyter_user_is_refused(tmp_path: Path) -> None:
    write_notebook(tmp_path / "n.ipynb", notebook("a = 1"))
    before = (tmp_path / "n.ipynb").read_bytes()
    contents = AsyncLargeFileManager(root_dir=str(tmp_path))
    store = server_store(contents, None)
    async with store.running():
        with acting(ANYONE):  # reached without going through Jupyter's authentication
            with pytest.raises(AccessDenied) as refused:
                await store.load("n.ipynb", ANYONE)
            assert "without the Jupyter user" in str(refused.value)
            assert "contents:read" in str(refused.value)
            with pytest.raises(AccessDenied):
                await store.create("m.ipynb", ANYONE, notebook("b = 2"), overwrite=False)
        assert not (tmp_path / "m.ipynb").exists()
        denied = Caller("k", jupyter=JupyterUser(_Handler(allow=False), None))
        with acting(denied), pytest.raises(AccessDenied, match="does not allow"):
            await store.load("n.ipynb", denied)
        allowed = Caller("k", jupyter=JupyterUser(_Handler(allow=True), None))
        with acting(allowed):
            assert (await store.load("n.ipynb", allowed)).notebook.cells[0]["source"] == "a = 1"
        own = Caller.server("a test of the server's own work")
        with acting(own):
            assert (await store.load("n.ipynb", own)).notebook.cells[0]["source"] == "a = 1"
    assert (tmp_path / "n.ipynb").read_bytes() == before


async def test_the_kernels_ask_about_the_caller_they_are_given() -> None:
    """No caller is current (no tool call): the caller passed to the kernel provider is the one
    Jupyter's authorizer is asked about, for listing kernelspecs and for starting a kernel."""
    from jupyter_client.kernelspec import KernelSpecManager

    from nbrelay.extension.kernels import ServerKernels

    kernels = ServerKernels(None, None, KernelSpecManager())
    allowed = Caller("k", jupyter=JupyterUser(_Handler(allow=True), None))
    denied = Caller("k", jupyter=JupyterUser(_Handler(allow=False), None))
    assert "python3" in {s.name for s in await kernels.kernelspecs(allowed)}
    assert await kernels.kernelspecs(Caller.server("a test of the server's own work"))
    with pytest.raises(AccessDenied, match="see the installed kernels"):
        await kernels.kernelspecs(denied)
    with pytest.raises(AccessDenied, match="without the Jupyter user"):
        await kernels.kernelspecs(ANYONE)
    with pytest.raises(AccessDenied, match="run code in kernels"):
        await kernels.session("n.ipynb", denied, kernel_name="python3", cwd="")
    assert kernels.running() == []  # refused before anything started


async def test_a_run_saves_its_outputs_as_the_user_who_started_it(start_ext_server: Any) -> None:
    server: JupyterServer = start_ext_server(
        args=["--ServerApp.authorizer_class=nbrelay_test_authz.RunNotWrite"]
    )
    write_notebook(server.root / "n.ipynb", notebook("import time; time.sleep(2); print('ran')"))
    before = (server.root / "n.ipynb").read_bytes()
    async with ext_client(server) as client:
        started = await call(client, "execute", path="n.ipynb", cells=[0], wait=0)
        handle = started["handle"]  # the call returned; the run goes on in the background
        with anyio.fail_after(PATIENCE):
            polled = await call(client, "get_execution", handle=handle, wait=5)
            while polled["status"] != "done":
                polled = await call(client, "get_execution", handle=handle, wait=5)
        # The save of its outputs was refused for that user, and the run says so.
        assert "contents:write" in str(polled), polled
        read = await call(client, "read_notebook", path="n.ipynb")
        assert "ran" not in str(read["cells"][0].get("outputs"))
    assert (server.root / "n.ipynb").read_bytes() == before


async def test_a_completion_outside_a_tool_call_acts_for_the_user(
    ext_server: JupyterServer, ext_folder: tuple[str, Path]
) -> None:
    folder, local = ext_folder
    write_notebook(local / "n.ipynb", notebook("a = 1"))
    template = ResourceTemplateReference(uri="nbrelay://notebook/{+path}/cells/{cell}")
    async with ext_client(ext_server) as client:
        paths = await client.complete(template, {"name": "path", "value": f"{folder}/n"})
        assert paths.completion.values == [f"{folder}/n.ipynb"]
        cells = await client.complete(
            template, {"name": "cell", "value": "c"}, {"path": f"{folder}/n.ipynb"}
        )
        assert cells.completion.values == ["c0"]
