"""Who the extension's operations act for: every one asks Jupyter's authorizer about the caller
it is given (``nbrelay.caller.Caller.jupyter``); one with no Jupyter user is refused unless it is
the server's own work; a run that outlasts its tool call
saves its outputs as the user who started it."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import ResourceTemplateReference

from nbrelay.caller import ANYONE, Caller
from nbrelay.errors import AccessDenied, Unsupported
from nbrelay.extension.access import JupyterUser
from nbrelay.extension.store import server_store
from nbrelay.notebook.edits import Plan, plan_set_source
from nbrelay.notebook.model import Notebook
from nbrelay.stores.base import DocumentStore, RunState
from nbrelay.stores.paths import Glob
from nbrelay.stores.rtc import RTCStore
from tests.extension.conftest import ext_client, mcp_url
from tests.helpers import PATIENCE, call, call_error, notebook, write_notebook
from tests.live.conftest import agent
from tests.live.server import JupyterServer
from tests.live.test_rtc import disk

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
        # Reached without going through Jupyter's authentication.
        with pytest.raises(AccessDenied) as refused:
            await store.load("n.ipynb", ANYONE)
        assert "without the Jupyter user" in str(refused.value)
        assert "contents:read" in str(refused.value)
        with pytest.raises(AccessDenied):
            await store.create("m.ipynb", ANYONE, notebook("b = 2"), overwrite=False)
        assert not (tmp_path / "m.ipynb").exists()
        denied = Caller("k", jupyter=JupyterUser(_Handler(allow=False), None))
        with pytest.raises(AccessDenied, match="does not allow"):
            await store.load("n.ipynb", denied)
        allowed = Caller("k", jupyter=JupyterUser(_Handler(allow=True), None))
        assert (await store.load("n.ipynb", allowed)).notebook.cells[0]["source"] == "a = 1"
        own = Caller.server("a test of the server's own work")
        assert (await store.load("n.ipynb", own)).notebook.cells[0]["source"] == "a = 1"
    assert (tmp_path / "n.ipynb").read_bytes() == before


def _documents(store: RTCStore) -> DocumentStore:
    found = store.capabilities.documents
    assert found is not None
    return found


def _run_state(store: RTCStore) -> RunState:
    return store  # what the workspace calls when the server has rooms (``capabilities.run_state``)


def _set_source(nb: Notebook) -> Plan:
    return plan_set_source(nb, 0, "a = 2")


# Every operation of the extension's store that reaches Jupyter's contents, with the permission
# it needs: (name, action, operation). None of them reads a caller from anywhere but its
# arguments.
_OPERATIONS: list[tuple[str, str, Callable[[RTCStore, Caller], Awaitable[object]]]] = [
    ("list", "read", lambda s, c: s.list("", c, recursive=True)),
    ("find", "read", lambda s, c: s.find("", c, glob=Glob("*.ipynb"))),
    ("scan", "read", lambda s, c: s.scan("n.ipynb", c)),
    ("peek", "read", lambda s, c: s.peek("n.ipynb", c)),
    ("load", "read", lambda s, c: s.load("n.ipynb", c)),
    ("create", "write", lambda s, c: s.create("m.ipynb", c, notebook("b"), overwrite=False)),
    (
        "edit",
        "write",
        lambda s, c: s.edit(
            "n.ipynb", c, _set_source, expected_version=None, guard_positions=False
        ),
    ),
    ("remove", "write", lambda s, c: s.remove("n.ipynb", c)),
    (
        "rename",
        "write",
        lambda s, c: s.rename("n.ipynb", "m.ipynb", c, overwrite=False, keep_source=False),
    ),
    ("flush", "write", lambda s, c: s.flush("n.ipynb", c)),
    ("show_running", "write", lambda s, c: _run_state(s).show_running("n.ipynb", c, ["x"], ())),
    ("list_documents", "read", lambda s, c: _documents(s).list_documents("", c)),
    ("stat_document", "read", lambda s, c: _documents(s).stat_document("t.txt", c)),
    ("read_document", "read", lambda s, c: _documents(s).read_document("t.txt", c)),
    (
        "write_document",
        "write",
        lambda s, c: _documents(s).write_document("u.txt", c, b"new", overwrite=False),
    ),
    ("remove_document", "write", lambda s, c: _documents(s).remove_document("t.txt", c)),
    (
        "move_document",
        "write",
        lambda s, c: _documents(s).move_document("t.txt", "u.txt", c, keep_source=False),
    ),
]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("name", "action", "operation"), _OPERATIONS, ids=[o[0] for o in _OPERATIONS]
)
async def test_every_operation_asks_about_the_caller_it_is_given(
    tmp_path: Path,
    name: str,
    action: str,
    operation: Callable[[RTCStore, Caller], Awaitable[object]],
) -> None:
    """Each operation of the extension's store (its notebooks, its other files, the run state it
    shows) asks Jupyter's authorizer about the caller it is handed, and about nothing else: no
    caller is current anywhere. A caller without a Jupyter user, and one Jupyter refuses, are
    refused with nothing changed on disk; one it allows, and the server's own work, are served."""
    for who in ("anyone", "denied", "allowed", "server"):
        root = tmp_path / who
        root.mkdir()
        write_notebook(root / "n.ipynb", notebook("a = 1"))
        (root / "t.txt").write_text("text")
        before = _tree(root)
        store = server_store(AsyncLargeFileManager(root_dir=str(root)), None)
        caller = {
            "anyone": ANYONE,
            "denied": Caller("k", jupyter=JupyterUser(_Handler(allow=False), None)),
            "allowed": Caller("k", jupyter=JupyterUser(_Handler(allow=True), None)),
            "server": Caller.server("a test of the server's own work"),
        }[who]
        async with store.running():
            if who in ("anyone", "denied"):
                with pytest.raises(AccessDenied, match=f"contents:{action}"):
                    await operation(store, caller)
                assert _tree(root) == before, (name, who)
            else:
                await operation(store, caller)
                if action == "write" and name not in ("flush", "show_running"):
                    assert _tree(root) != before, (name, who)


async def test_a_live_session_is_opened_for_the_caller_it_is_given(tmp_path: Path) -> None:
    """Without jupyter-collaboration there is no live session to open, but the caller is asked
    about first: refused to a caller Jupyter refuses, unsupported to one it allows."""
    write_notebook(tmp_path / "n.ipynb", notebook("a = 1"))
    store = server_store(AsyncLargeFileManager(root_dir=str(tmp_path)), None)
    async with store.running():
        with pytest.raises(AccessDenied, match="without the Jupyter user"):
            await store.open_session("n.ipynb", ANYONE)
        denied = Caller("k", jupyter=JupyterUser(_Handler(allow=False), None))
        with pytest.raises(AccessDenied, match="does not allow"):
            await store.open_session("n.ipynb", denied)
        allowed = Caller("k", jupyter=JupyterUser(_Handler(allow=True), None))
        with pytest.raises(Unsupported, match="no real-time collaboration"):
            await store.open_session("n.ipynb", allowed)


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


async def test_a_user_who_may_not_read_a_notebook_cannot_listen_to_it(
    start_ext_server: Any,
) -> None:
    """The change feed would tell a listener when a notebook changes (and, on the older
    ``resources/subscribe``, which cells): a Jupyter user its authorizer refuses
    ``contents:read`` is refused the listen and the subscription, as a read would be."""
    server: JupyterServer = start_ext_server(
        args=["--ServerApp.authorizer_class=nbrelay_test_authz.NoContents"]
    )
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    uri = "nbrelay://notebook/n.ipynb"
    async with ext_client(server) as client:
        # twice: the first look for the refused user must not leave the notebook watched
        for _ in range(2):
            with pytest.raises(MCPError) as refused, anyio.fail_after(PATIENCE):
                async with client.listen(resource_subscriptions=[uri]):
                    pass
            assert "contents:read" in refused.value.error.message, refused.value.error
    headers = {"Authorization": f"token {server.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(mcp_url(server), http_client=http), mode="legacy") as old,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            with pytest.raises(MCPError) as refused:
                await old.subscribe_resource(uri)
        assert "contents:read" in refused.value.error.message, refused.value.error


async def test_a_user_who_may_read_listens_as_before(start_ext_server: Any) -> None:
    """The same check lets a user who may read listen, and the feed reports a change."""
    server: JupyterServer = start_ext_server(
        args=["--ServerApp.authorizer_class=nbrelay_test_authz.ReadOnly"]
    )
    write_notebook(server.root / "n.ipynb", notebook("a = 1"))
    uri = "nbrelay://notebook/n.ipynb"
    async with ext_client(server) as client, client.listen(resource_subscriptions=[uri]) as sub:
        write_notebook(server.root / "n.ipynb", notebook("a = 2"))  # from outside
        with anyio.fail_after(PATIENCE):
            async for event in sub:
                if getattr(event, "uri", None) == uri:
                    break


async def test_live_mode_on_a_server_that_refuses_its_events_saves_and_says_what_it_cannot_tell(
    start_ext_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A user whom the server does not let hear its events (``events``): live mode works as
    before, saves are saved, and a save the server failed is reported as what nbrelay can tell
    of it (no write, and why it cannot say which), not as a later change's doing."""
    server: JupyterServer = start_ext_server(
        args=[
            "--ServerApp.authorizer_class=nbrelay_test_authz.NoEvents",
            "--YDocExtension.document_save_delay=3600",  # only nbrelay saves
        ]
    )
    write_notebook(server.root / "n.ipynb", notebook("a", "b"))
    paired = notebook("a = 1")
    paired.data["metadata"]["jupytext"] = {"formats": "ipynb,scripts//py:percent"}
    write_notebook(server.root / "p.ipynb", paired)
    (server.root / "scripts").write_text("a file where the pair's folder would be\n")
    caplog.set_level(logging.INFO, logger="nbrelay.rtc")
    async with agent(server, save_delay=3600) as client:
        await call(client, "edit_cell", path="n.ipynb", cell="c0", source="a1")
        await call(client, "save_notebook", path="n.ipynb")
        await call(client, "edit_cell", path="p.ipynb", cell=0, source="a = 2")
        failed = await call_error(client, "save_notebook", path="p.ipynb")
    assert disk(server.root / "n.ipynb") == (["c0", "c1"], ["a1", "b"])
    assert "a later change interrupted it, or the server failed to save" in failed, failed
    assert "nbrelay cannot hear its events" in failed
    refused = [r.getMessage() for r in caplog.records if "events WebSocket" in r.getMessage()]
    assert refused, caplog.text
    assert "not available" in refused[0], refused
    assert "403" in refused[0], refused
