"""--max-kernels: notebooks beyond the cap wait their turn for a kernel instead of failing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import call

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def served(root: Path, tmp_path: Path, cap: int, names: list[str]) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0, max_kernels=cap)
    async with Client(build_server(settings), mode="auto") as client:
        for name in names:
            await call(client, "create_notebook", path=name)
        yield client


async def running(client: Client) -> int:
    kernels = (await call(client, "list_kernels"))["kernels"]
    return sum(1 for k in kernels if k["state"] != "suspended")


def printed(done: dict[str, Any]) -> str:
    return "".join(o.get("text", "") for o in done["cells"][0].get("outputs", []))


async def test_notebooks_beyond_the_cap_queue_and_all_run(root: Path, tmp_path: Path) -> None:
    names = [f"n{i}.ipynb" for i in range(5)]
    async with served(root, tmp_path, 2, names) as client:
        results: dict[str, dict[str, Any]] = {}
        most = 0

        async def run(name: str) -> None:
            # Each run holds its kernel for 1.5 s, so a notebook that waits for one waits past
            # the 1 s from which its result says so, however fast kernels start.
            code = f"import time; time.sleep(1.5); print({name!r})"
            results[name] = await call(client, "execute", path=name, code=code, wait=120)

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(run, name)

                async def watch() -> None:
                    nonlocal most
                    while len(results) < len(names):
                        most = max(most, await running(client))
                        await anyio.sleep(0.05)

                tg.start_soon(watch)
        assert {n: r["status"] for n, r in results.items()} == dict.fromkeys(names, "done")
        assert {n: printed(r) for n, r in results.items()} == {n: f"{n}\n" for n in names}
        assert most == 2  # never more kernels than the cap, and the cap was used
        assert await running(client) == 2
        waited = [
            n for n, r in results.items() if "for a kernel (--max-kernels 2)" in r.get("note", "")
        ]
        assert len(waited) >= 3  # the three beyond the cap waited their turn

        # A notebook whose kernel was stopped to make room resumes with a new one.
        kernels = (await call(client, "list_kernels"))["kernels"]
        suspended = [k["path"] for k in kernels if k["state"] == "suspended"]
        assert len(suspended) == 3
        again = await call(client, "execute", path=suspended[0], code="print('back')", wait=120)
        assert printed(again) == "back\n"
        assert "resumed with a new kernel" in again["note"]
        assert await running(client) == 2


async def test_a_notebook_waits_while_every_kernel_is_busy(root: Path, tmp_path: Path) -> None:
    async with served(root, tmp_path, 1, ["busy.ipynb", "next.ipynb"]) as client:
        await call(client, "execute", path="busy.ipynb", code="1")
        started = await call(
            client, "execute", path="busy.ipynb", code="import time; time.sleep(3)", wait=0
        )
        assert started["status"] != "done"
        with anyio.fail_after(120):
            done = await call(client, "execute", path="next.ipynb", code="print('next')", wait=60)
        assert printed(done) == "next\n"
        polled = await call(client, "get_execution", handle=started["handle"], wait=0)
        assert polled["status"] == "done"  # the busy kernel was left to finish its cell first
        assert polled["cells"][0]["status"] == "ok"
        assert await running(client) == 1
