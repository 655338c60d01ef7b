"""Nothing loses a run (live mode): the kernel belongs to the Jupyter Server, so when nbrelay is
killed (kill -9) mid-run and started again on the same JupyterLab, the run keeps its handle and
every output reaches the client and the notebook.

What makes it possible, besides nbrelay's run journal: Jupyter Server keeps (in memory) the
messages a kernel sends after the last WebSocket connected to it closes, for that connection's
session id, and replays them to a new connection with the same id. The new nbrelay process
connects as the dead one's session (the journal holds its id) and follows the request the
journal names to its end. A real Jupyter Server with jupyter-collaboration, real nbrelay
processes over HTTP, a real SIGKILL.

What the server had already written to the dead process's connection when it died is lost
(the server has no replay of what it sent): the new process tells the agent so, from the gap in
the kernel's message counters (``kernels.sequence``). A process stopped (SIGSTOP: hung) while
the cell prints, then killed, loses every line printed while it was stopped, every time, so the
note is tested on a real loss.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.http.harness import http_client, http_server, report
from tests.live.server import JupyterServer, free_port
from tests.servers import wait_until

LINES = 120
SLOW = (
    "import time\n"
    f"for i in range({LINES}):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(0.15)\n"
    "print('done')"
)

pytestmark = pytest.mark.usefixtures("runtime")


def lines_of(result: dict[str, Any]) -> list[str]:
    text = "".join(
        str(o.get("text", "")) for c in result["cells"] for o in (c.get("outputs") or [])
    )
    return [line for line in text.splitlines() if line.startswith(("line ", "done"))]


def saved_lines(path: Path) -> list[str]:
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    text = "".join("".join(o.get("text", "")) for o in nb["cells"][0].get("outputs", []))
    return [line for line in text.splitlines() if line.startswith(("line ", "done"))]


def told_missing(result: dict[str, Any]) -> int:
    """How many kernel messages the result says may be missing (0: it says nothing of it)."""
    found = re.search(
        r"(\d+) kernel message\(s\) sent while nbrelay restarted may be missing",
        result.get("note") or "",
    )
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize("hung", [False, True], ids=["killed", "stopped-then-killed"])
def test_a_live_run_outlives_kill_9_of_nbrelay(
    tmp_path: Path, request: pytest.FixtureRequest, hung: bool
) -> None:
    lab = JupyterServer(
        root=tmp_path / "lab", work=tmp_path / "work", port=free_port(), nbrelay=False
    )
    lab.start()
    expected = [f"line {i}" for i in range(LINES)] + ["done"]
    try:
        write_notebook(lab.root / "n.ipynb", notebook(SLOW))
        args = ("--jupyter-url", lab.url, "--kernel-pool", "0")
        env = {"JUPYTER_TOKEN": lab.token}
        with http_server(tmp_path / "unused", tmp_path, *args, env=env, name="doomed") as doomed:

            async def start() -> tuple[str, int]:
                async with http_client(doomed.url, doomed.token) as client:
                    started = await call(client, "execute", path="n.ipynb", cells=[0], wait=0.5)
                    seen = lines_of(started)
                    with anyio.fail_after(PATIENCE):
                        while len(seen) < 10:
                            polled = await call(
                                client, "get_execution", handle=started["handle"], wait=1
                            )
                            seen += lines_of(polled)
                    return str(started["handle"]), len(seen)

            handle, before = anyio.run(start)
            if hung:  # it stops reading; the server keeps writing into its connection
                os.kill(doomed.proc.pid, signal.SIGSTOP)
                time.sleep(1.5)
            doomed.proc.kill()
            doomed.proc.wait(timeout=10)
        killed = time.monotonic()
        with http_server(tmp_path / "unused", tmp_path, *args, env=env, name="again") as again:

            async def follow() -> tuple[dict[str, Any], list[str]]:
                async with http_client(again.url, again.token) as client:
                    got: list[str] = []
                    with anyio.fail_after(PATIENCE * 4):
                        while True:
                            polled = await call(client, "get_execution", handle=handle, wait=5)
                            got += lines_of(polled)
                            if polled["status"] == "done":
                                return polled, got

            result, got = anyio.run(follow)
            back = time.monotonic() - killed
            # Every output the dead process had received (it showed `before` of them), and
            # every one after the kill, in order. Only what the server had already written to
            # the dead process's connection when it died (in flight: sent, not yet read) can be
            # missing, and it can only be just after what it showed.
            assert got[:before] == expected[:before], result
            missing = [line for line in expected if line not in got]
            assert got == [line for line in expected if line not in missing], result
            assert result["cells"][0]["status"] == "ok", result
            assert "re-attached" in (result.get("note") or ""), result
            # Whatever is missing, the agent is told: each line was one message (printed with
            # flush, 0.15 s apart), so at least that many may be missing.
            told = told_missing(result)
            assert told >= len(missing), (missing, result)
            if hung:
                assert missing, "nothing was lost while nbrelay was stopped"
            else:
                assert all(expected.index(line) < before + 3 for line in missing), (
                    missing,
                    before,
                )

            # The notebook got them too (jupyter-collaboration saves the room to disk).
            def complete() -> list[str] | None:
                lines = saved_lines(lab.root / "n.ipynb")
                return lines if lines == got else None

            on_disk = wait_until(
                complete,
                "the notebook on disk did not get every output the client got",
                seconds=PATIENCE,
            )
    finally:
        lab.stop()
    lost_client = len(expected) - len(set(got))
    lost_disk = len(expected) - len(set(on_disk))
    report(
        request,
        f"journal (live mode): nbrelay {'stopped, then ' if hung else ''}kill -9 after {before} "
        f"of {len(expected)} outputs, a new process on the same JupyterLab {back:.1f} s later: "
        f"outputs lost {lost_client} to the client, {lost_disk} in the notebook; messages the "
        f"agent is told may be missing: {told}",
    )


QUIET = (
    "import time\n"
    "for i in range(10):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(0.05)\n"
    "time.sleep(8)\n"
    "print('done')"
)


def test_nothing_missing_is_told_when_nothing_was_lost(tmp_path: Path) -> None:
    """No false note: a run nobody killed carries none, and neither does a run whose nbrelay
    was killed while the cell printed nothing (no message in flight, so none lost: the
    counters the new process receives follow on from the journal's last)."""
    lab = JupyterServer(
        root=tmp_path / "lab", work=tmp_path / "work", port=free_port(), nbrelay=False
    )
    lab.start()
    calm = [f"line {i}" for i in range(20)] + ["done"]
    quiet = [f"line {i}" for i in range(10)] + ["done"]
    try:
        write_notebook(
            lab.root / "n.ipynb",
            notebook(SLOW.replace(f"range({LINES})", "range(20)"), QUIET),
        )
        args = ("--jupyter-url", lab.url, "--kernel-pool", "0")
        env = {"JUPYTER_TOKEN": lab.token}

        async def follow(
            url: str, token: str, cell: int | None, handle: str | None = None
        ) -> tuple[dict[str, Any], list[str]]:
            async with http_client(url, token) as client:
                if handle is None:
                    polled = await call(client, "execute", path="n.ipynb", cells=[cell], wait=0.5)
                else:
                    polled = await call(client, "get_execution", handle=handle, wait=2)
                got = lines_of(polled)
                with anyio.fail_after(PATIENCE * 2):
                    while polled["status"] != "done":
                        if handle is None and cell == 1 and len(got) >= 10:
                            return polled, got  # the quiet part: kill it now
                        polled = await call(
                            client, "get_execution", handle=polled["handle"], wait=1
                        )
                        got += lines_of(polled)
                return polled, got

        with http_server(tmp_path / "unused", tmp_path, *args, env=env, name="first") as first:
            unkilled, got = anyio.run(follow, first.url, first.token, 0)
            assert got == calm, unkilled
            assert "may be missing" not in (unkilled.get("note") or ""), unkilled
            started, before = anyio.run(follow, first.url, first.token, 1)
            assert before == quiet[:10], started
            first.proc.kill()
            first.proc.wait(timeout=10)
        with http_server(tmp_path / "unused", tmp_path, *args, env=env, name="again") as again:
            resumed, after = anyio.run(follow, again.url, again.token, None, str(started["handle"]))
    finally:
        lab.stop()
    assert after == quiet, resumed  # a new process shows the run from its start
    assert resumed["cells"][0]["status"] == "ok", resumed
    assert "re-attached" in (resumed.get("note") or ""), resumed
    assert told_missing(resumed) == 0, resumed
