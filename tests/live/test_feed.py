"""The change feed in live mode: a listener hears a person's edit in JupyterLab, whether or not
nbrelay is in the notebook's room. How soon is measured by bench/live_latency.py."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.client.subscriptions import ResourceUpdated, Subscription

from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.live.conftest import agent
from tests.live.person import person
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio


async def _updated(sub: Subscription, uri: str) -> None:
    with anyio.fail_after(PATIENCE):
        async for event in sub:
            assert isinstance(event, ResourceUpdated)
            if event.uri == uri:
                return


@pytest.mark.parametrize("joined", [True, False], ids=["in-room", "not-in-room"])
async def test_a_persons_edit_reaches_listeners(
    jupyter: JupyterServer, live_folder: tuple[str, Path], joined: bool
) -> None:
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("a = 1", "b = 2"))
    uri = "nbrelay://notebook/n.ipynb"
    async with agent(jupyter, folder) as client:
        if joined:
            await call(client, "read_notebook", path="n.ipynb")  # nbrelay joins the room
        # entering waits for the server's acknowledgement, sent once the feed has its baseline
        async with (
            client.listen(resource_subscriptions=[uri, f"{uri}/cells/c1"]) as sub,
            person(jupyter, f"{folder}/n.ipynb") as someone,
        ):
            someone.type_at_end("c1", "0")
            await _updated(sub, f"{uri}/cells/c1")
        changes = await client.read_resource(f"{uri}/changes")
    text = "".join(getattr(c, "text", "") for c in changes.contents)
    assert '"edited":["c1"]' in text.replace(" ", "")
