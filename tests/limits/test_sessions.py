"""Sessions: the most kernels at once, idle sessions suspended and resumed, saved variables."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import PATIENCE, call, call_error

pytestmark = pytest.mark.anyio


async def session(settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings), mode="auto") as c:
        for name in ("a.ipynb", "b.ipynb"):
            await call(c, "create_notebook", path=name)
        yield c


async def run(client: Client, path: str, code: str) -> dict[str, Any]:
    done = await call(client, "execute", path=path, code=code, wait=60)
    assert done["status"] == "done", done
    return done


def printed(done: dict[str, Any]) -> str:
    return "".join(o.get("text", "") for o in done["cells"][0].get("outputs", []))


async def wait_for_state(client: Client, path: str, state: str) -> None:
    with anyio.fail_after(PATIENCE):
        while True:
            kernels = (await call(client, "list_kernels"))["kernels"]
            if any(k["path"] == path and k["state"] == state for k in kernels):
                return
            await anyio.sleep(0.2)


async def test_no_more_sessions_than_allowed(root: Path, tmp_path: Path) -> None:
    settings = Settings(root=root, lock_dir=tmp_path / "l", kernel_pool=0, max_sessions=1)
    async for c in session(settings):
        assert printed(await run(c, "a.ipynb", "print('a')")) == "a\n"
        error = await call_error(c, "execute", path="b.ipynb", code="print('b')")
        assert "1 kernels are running, the most this server allows (--max-sessions 1)" in error
        assert printed(await run(c, "a.ipynb", "print('again')")) == "again\n"


async def test_an_idle_session_is_suspended_and_resumed_with_its_variables(
    root: Path, tmp_path: Path
) -> None:
    store = tmp_path / "sessions"
    settings = Settings(
        root=root,
        lock_dir=tmp_path / "l",
        kernel_pool=0,
        kernel_idle_timeout=1,
        persist_sessions=True,
        session_dir=store,
    )
    async for c in session(settings):
        await run(c, "a.ipynb", "answer = 41\nimport math")
        await wait_for_state(c, "a.ipynb", "suspended")
        saved = list(store.glob("*a.ipynb.session.dill"))
        assert len(saved) == 1
        resumed = await run(c, "a.ipynb", "print(answer + 1, math.floor(2.5))")
        assert printed(resumed) == "42 2\n"
        assert "resumed: 2 saved variable(s) restored" in resumed["note"]
        assert not saved[0].exists()  # used once


async def test_without_persistence_a_resumed_session_starts_fresh(
    root: Path, tmp_path: Path
) -> None:
    settings = Settings(root=root, lock_dir=tmp_path / "l", kernel_pool=0, kernel_idle_timeout=1)
    async for c in session(settings):
        await run(c, "b.ipynb", "answer = 41")
        await wait_for_state(c, "b.ipynb", "suspended")
        fresh = await run(c, "b.ipynb", "print('answer' in globals())")
        assert printed(fresh) == "False\n"
        assert "resumed with a new kernel" in fresh["note"]
        kernels = (await call(c, "list_kernels"))["kernels"]
        assert [k["state"] for k in kernels if k["path"] == "b.ipynb"] == ["idle"]
