"""The execution history resource: what ran, when, how long, with what status."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import PATIENCE, call
from tests.resources.test_feed import next_uris
from tests.resources.test_resources import read_json

pytestmark = pytest.mark.anyio

NB = "nbrelay://notebook/run.ipynb"


@pytest.fixture
async def runner(root: Path, tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    async with Client(build_server(settings), mode="auto") as c:
        await call(
            c,
            "create_notebook",
            path="run.ipynb",
            cells=["import time\ntime.sleep(0.3)\nx = 1", "1 / 0", "print('never')"],
        )
        yield c


async def test_history_records_each_cell_run(runner: Client) -> None:
    view = await call(runner, "read_notebook", path="run.ipynb")
    ids = [c["id"] for c in view["cells"]]
    assert (await read_json(runner, f"{NB}/history"))["executions"] == []
    before = time.time()
    async with runner.listen(resource_subscriptions=[f"{NB}/history"]) as sub:
        await call(runner, "execute", path="run.ipynb", cells=[":"], wait=60)
        await next_uris(sub, {f"{NB}/history"})
    await call(runner, "execute", path="run.ipynb", code="y = 2", wait=60)
    runs = (await read_json(runner, f"{NB}/history"))["executions"]
    assert [(r["cell"], r["status"]) for r in runs] == [
        (ids[0], "ok"),
        (ids[1], "error"),
        (ids[2], "skipped"),
        (None, "ok"),
    ]
    first = runs[0]
    assert first["code"] == "import time"
    assert first["seconds"] >= 0.3
    assert first["execution_count"] == 1
    started = dt.datetime.fromisoformat(first["started"].replace("Z", "+00:00")).timestamp()
    assert before - 1 <= started <= time.time()
    assert runs[1]["job"] == first["job"] != runs[3]["job"]
    assert "ZeroDivisionError" in runs[1].get("message", "") or runs[1]["status"] == "error"


async def test_history_of_a_missing_notebook_is_an_error(runner: Client) -> None:
    with pytest.raises(Exception, match="does not exist"):
        await runner.read_resource("nbrelay://notebook/none.ipynb/history")
    with anyio.fail_after(PATIENCE):
        assert (await read_json(runner, f"{NB}/history"))["path"] == "run.ipynb"
