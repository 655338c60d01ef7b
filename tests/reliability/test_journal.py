"""Nothing loses a run (file mode): a run's outputs are journaled as they arrive, so another nbrelay
process on the same root follows and cancels it by handle, and a process started after the one
running it was killed (kill -9) still returns every output it had received.

Real nbrelay processes over HTTP, real kernels, real signals; the runtime folder (where journals
live) is private to each test and shared by its processes, as it is by a user's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.workspace.journal import (
    RETENTION,
    RunJournal,
    root_folder_name,
    sweep_other_roots,
)
from tests.helpers import PATIENCE, call, notebook, write_notebook
from tests.http.harness import http_client, http_server, report

PRINTS = 40
COUNTING = (
    "import time\n"
    f"for i in range({PRINTS}):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(0.05)\n"
    "time.sleep(600)"
)

pytestmark = pytest.mark.usefixtures("runtime")


def lines_of(result: dict[str, Any]) -> list[str]:
    text = "".join(
        str(o.get("text", "")) for c in result["cells"] for o in (c.get("outputs") or [])
    )
    return [line for line in text.splitlines() if line.startswith("line ")]


def test_a_run_is_followed_and_cancelled_through_another_process(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook(COUNTING, "print('after')"))
    with (
        http_server(root, tmp_path, "--kernel-pool", "0", name="a") as a,
        http_server(root, tmp_path, "--kernel-pool", "0", name="b", token=a.token) as b,
    ):

        async def scenario() -> None:
            async with (
                http_client(a.url, a.token) as via_a,
                http_client(b.url, b.token) as via_b,
            ):
                started = await call(via_a, "execute", path="n.ipynb", cells=[":"], wait=0.2)
                handle = started["handle"]
                assert started["status"] != "done"
                seen: list[str] = []
                with anyio.fail_after(PATIENCE):
                    while len(seen) < PRINTS:
                        polled = await call(via_b, "get_execution", handle=handle, wait=1)
                        seen += lines_of(polled)
                        assert polled["status"] != "done", polled
                # B returned each line once, in order, though A holds the kernel.
                assert seen == [f"line {i}" for i in range(PRINTS)]
                cancelled = await call(via_b, "cancel_execution", handle=handle)
                assert cancelled["status"] == "done", cancelled
                statuses = [c["status"] for c in cancelled["cells"]]
                assert statuses == ["interrupted", "cancelled"], cancelled
                # A, which ran it, says the same: the interrupt reached its kernel.
                again = await call(via_a, "get_execution", handle=handle, wait=5)
                assert [c["status"] for c in again["cells"]] == statuses
                # A second run gets a handle of its own, whichever process starts it.
                other = await call(via_b, "execute", path="n.ipynb", code="print(2)", wait=30)
                assert other["status"] == "done"
                assert other["cells"][0]["outputs"][0]["text"] == "2\n"

        anyio.run(scenario)
    saved = json.loads((root / "n.ipynb").read_text())
    texts = "".join("".join(o.get("text", "")) for o in saved["cells"][0]["outputs"])
    assert "line 0" in texts  # the run's outputs were saved by the process that ran it


def test_outputs_survive_kill_9_of_the_process_running_them(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """File mode: the kernel dies with nbrelay (it is its child), but every output nbrelay had
    received is returned by a new process, with the run ended as the death left it."""
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook(COUNTING, "print('after')"))
    with http_server(root, tmp_path, "--kernel-pool", "0", name="doomed") as doomed:

        async def start() -> str:
            async with http_client(doomed.url, doomed.token) as client:
                started = await call(client, "execute", path="n.ipynb", cells=[":"], wait=0.2)
                seen: list[str] = lines_of(started)
                with anyio.fail_after(PATIENCE):
                    while len(seen) < PRINTS:
                        polled = await call(
                            client, "get_execution", handle=started["handle"], wait=1
                        )
                        seen += lines_of(polled)
                return str(started["handle"])

        handle = anyio.run(start)
        doomed.proc.kill()
        doomed.proc.wait(timeout=10)
    begin = time.monotonic()
    with http_server(root, tmp_path, "--kernel-pool", "0", name="again") as again:

        async def recover() -> dict[str, Any]:
            async with http_client(again.url, again.token) as client:
                return await call(client, "get_execution", handle=handle)

        result = anyio.run(recover)
        recovered = time.monotonic() - begin
    got = lines_of(result)
    lost = PRINTS - len(set(got))
    assert got == [f"line {i}" for i in range(PRINTS)], result
    assert result["status"] == "done"
    assert [c["status"] for c in result["cells"]] == ["died", "cancelled"], result
    assert "ended before the run did" in result["note"], result
    report(
        request,
        f"journal: nbrelay (file mode) kill -9 mid-run: {lost} of {PRINTS} received outputs lost; "
        f"a new process returned the run by handle {recovered:.1f} s after it was started",
    )


def test_unknown_handle_still_says_so(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook("print(1)"))
    with http_server(root, tmp_path, name="a") as a:

        async def scenario() -> None:
            async with http_client(a.url, a.token) as client:
                result = await client.call_tool("get_execution", {"handle": "x999"})
                assert result.is_error
                text = str(result.content[0].text)  # type: ignore[union-attr]
                assert "no execution has handle 'x999'" in text

        anyio.run(scenario)


def journaled_job(journal: RunJournal, handle: str, text: str) -> Job:
    """A run of one cell that printed ``text`` and ended, written to ``journal``."""
    job = Job(
        handle,
        "n.ipynb",
        [CellRun(id="c0", index=0, source="print()")],
        kernel="python3",
        timeout=None,
    )
    writer = journal.open(job)
    cell = job.cells[0]
    cell.status = "running"
    writer.cell_started(job, cell)
    msg = {"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": text}}
    job._feed(cell, msg)
    cell.status = "ok"
    writer.cell_ended(job, cell)
    writer.ended(job)
    return job


def test_journals_are_replayed_whole_and_removed_after_retention(runtime: Path) -> None:
    journal = RunJournal("file:/somewhere")
    assert [journal.new_number() for _ in range(3)] == [1, 2, 3]
    assert RunJournal("file:/somewhere").new_number() == 4  # shared, not per object
    journaled_job(journal, "x1", "hello\n")
    recorded = journal.load("x1")
    assert recorded is not None
    assert recorded.ended
    assert not recorded.running_elsewhere
    assert recorded.job.cell_outputs(recorded.job.cells[0]) == [
        {"output_type": "stream", "name": "stdout", "text": "hello\n"}
    ]
    # A record cut by a crash is ignored; the ones before it are kept.
    path = journal.path() / "x1.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole.rsplit(b"\n", 2)[0] + b'\n{"t":"end","at')
    cut = journal.load("x1")
    assert cut is not None
    assert not cut.ended
    assert cut.job.cell_outputs(cut.job.cells[0])[0]["text"] == "hello\n"
    path.write_bytes(whole)
    # Kept within the retention period, removed after it.
    assert journal.sweep(force=True) == []
    assert journal.sweep(now=time.time() + RETENTION + 1, force=True) == ["x1"]
    assert journal.load("x1") is None
    assert not path.exists()


def test_a_journal_keeps_the_last_kernel_message_and_what_may_be_missing(
    runtime: Path,
) -> None:
    """What a process resuming the run needs (the id of the last kernel message handled, the
    outputs' and the status messages' alike), and the gap it found, read back by whoever
    follows the run."""
    from jupyter_client.session import Session

    kernel = Session()
    journal = RunJournal("file:/somewhere")
    job = Job(
        "x7",
        "n.ipynb",
        [CellRun(id="c0", index=0, source="print(1)")],
        kernel="python3",
        timeout=None,
    )
    writer = journal.open(job)
    cell = job.cells[0]
    writer.cell_started(job, cell)
    out = kernel.msg("stream", {"name": "stdout", "text": "1\n"})
    writer.message(job, cell, out)
    status = kernel.msg("status", {"execution_state": "idle"})
    writer.seen(job, cell, status)
    writer.seen(job, cell, {"header": {"msg_id": "6f1c2a8e-7d1b-4a55-9a40-1f5c0b9e2d11"}})
    recorded = journal.load(job.handle)
    assert recorded is not None
    assert not recorded.ended
    assert recorded.job.kernel_msg == status["header"]["msg_id"]  # a UUID id tells nothing
    writer.gap(job, cell, 3)
    followed = journal.load(job.handle)
    assert followed is not None
    assert followed.job.missing == {"c0": 3}
    job.missing = {"c0": 3}
    writer.ended(job)
    ended = journal.load(job.handle)
    assert ended is not None
    assert ended.ended
    assert ended.job.missing == {"c0": 3}
    # Past the journal's bound, messages are not journaled: the last one handled is unknown.
    with (journal.path() / "x7.jsonl").open("a") as appended:
        appended.write('{"t":"overflow"}\n')
    over = journal.load(job.handle)
    assert over is not None
    assert over.job.kernel_msg is None


def test_journal_handles_are_never_paths(runtime: Path) -> None:
    journal = RunJournal("file:/somewhere")
    for bad in ("../x1", "x1/..", "x1.jsonl", "", "x 1"):
        assert journal.load(bad) is None


def test_state_of_roots_nobody_uses_is_removed_after_retention(runtime: Path) -> None:
    """The journals (and read state) of a root no process used for the retention period go;
    the current root's, and a root with a run still going, stay."""
    gone = RunJournal("file:/deleted-root")
    journaled_job(gone, "x1", "old\n")
    going = RunJournal("file:/busy-root")
    busy = Job("x1", "n.ipynb", [CellRun(id="c0", index=0, source="")], kernel="k", timeout=None)
    writer = going.open(busy)  # holds the journal's lock: a run still going
    mine = RunJournal("file:/mine")
    journaled_job(mine, "x1", "mine\n")
    later = time.time() + RETENTION + 1
    try:
        removed = sweep_other_roots(None, root_folder_name("file:/mine"), later)
    finally:
        writer.close()
    assert removed == [f"runs/{root_folder_name('file:/deleted-root')}"]
    assert gone.load("x1") is None
    assert going.load("x1") is not None
    assert mine.load("x1") is not None
