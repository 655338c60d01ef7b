"""Two nbrelay processes on one real Jupyter Server with jupyter-collaboration, with
``--shared-state`` (replicas behind one address, live mode): a sessionless client reads through
one and edits through the other, the stale-edit guard and undo hold through either, and a run
started through one is followed and cancelled through the other. Real processes over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import PATIENCE, call, call_error, notebook, write_notebook
from tests.http.harness import canary_token, http_client, http_server
from tests.live.server import JupyterServer, free_port

pytestmark = [pytest.mark.jupyter, pytest.mark.usefixtures("runtime")]

COUNTING = (
    "import time\nfor i in range(600):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)"
)


def printed(result: dict[str, Any]) -> str:
    return "".join(str(o.get("text", "")) for c in result["cells"] for o in c.get("outputs") or [])


def test_live_replicas_share_reads_undo_and_runs(tmp_path: Path) -> None:
    lab = JupyterServer(
        root=tmp_path / "lab", work=tmp_path / "work", port=free_port(), nbrelay=False
    )
    lab.start()
    try:
        write_notebook(lab.root / "n.ipynb", notebook("a = 1", "b = 2", COUNTING))
        person = canary_token("person")
        tokens = tmp_path / "tokens"
        tokens.write_text(person + "\n")
        tokens.chmod(0o600)
        args = ["--jupyter-url", lab.url, "--kernel-pool", "0", "--shared-state"]
        args += ["--token-file", str(tokens)]
        env = {"JUPYTER_TOKEN": lab.token}
        unused = tmp_path / "unused"
        with (
            http_server(unused, tmp_path, *args, env=env, name="a") as a,
            http_server(unused, tmp_path, *args, env=env, name="b", token=a.token) as b,
        ):

            async def scenario() -> None:
                async with (
                    http_client(a.url, a.token) as via_a,
                    http_client(b.url, b.token) as via_b,
                    http_client(a.url, person) as someone,
                ):
                    # Read through A; another client inserts a cell; a delete by position
                    # through B is refused: B knows what the client read through A.
                    await call(via_a, "read_notebook", path="n.ipynb")
                    await call(someone, "insert_cells", path="n.ipynb", index=0, cells=["z = 0"])
                    text = await call_error(via_b, "delete_cells", path="n.ipynb", cells=[0])
                    assert "since you last read it" in text

                    # Read again through B, edit through B, undo through A.
                    await call(via_b, "read_notebook", path="n.ipynb")
                    await call(via_b, "edit_cell", path="n.ipynb", cell="c0", source="a = 10")
                    undone = await call(via_a, "undo", path="n.ipynb")
                    assert undone["undone"] == ["edit cell"]
                    cells = (await call(via_b, "read_notebook", path="n.ipynb"))["cells"]
                    assert [c["source"] for c in cells[:3]] == ["z = 0", "a = 1", "b = 2"]
                    assert "nothing to undo" in await call_error(via_b, "undo", path="n.ipynb")

                    # A run started through A, followed and cancelled through B.
                    started = await call(via_a, "execute", path="n.ipynb", cells=["c2"], wait=0.2)
                    handle = started["handle"]
                    seen = ""
                    with anyio.fail_after(PATIENCE):
                        while "line 5\n" not in seen:
                            polled = await call(via_b, "get_execution", handle=handle, wait=1)
                            seen += printed(polled)
                            assert polled["status"] != "done", polled
                    cancelled = await call(via_b, "cancel_execution", handle=handle)
                    assert cancelled["status"] == "done", cancelled
                    assert cancelled["cells"][0]["status"] in ("interrupted", "cancelled")
                    again = await call(via_a, "get_execution", handle=handle, wait=5)
                    assert again["cells"][0]["status"] == cancelled["cells"][0]["status"]
                    assert "line 599" not in printed(again)

            anyio.run(scenario)
        saved = json.loads((lab.root / "n.ipynb").read_text())
        assert "".join(saved["cells"][1]["source"]) == "a = 1"
    finally:
        lab.stop()
