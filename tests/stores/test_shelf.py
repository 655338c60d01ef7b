"""The readers' reads kept on disk for replicas (``--shared-state``): kept, forgotten with their
notebook, removed once unused for the retention period, and written off the event loop."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from nbrelay import runtime
from nbrelay.caller import Caller
from nbrelay.notebook import history
from nbrelay.stores.files import FileStore
from nbrelay.stores.shelf import Shelf
from nbrelay.workspace.caller_state import SharedCallerState
from tests.helpers import notebook, write_notebook


def test_reads_are_kept_forgotten_and_expire(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    shelf = Shelf("file:/root", folder=folder)
    shelf.put("token:a", "n.ipynb", "v1", ["c0"], {"c0": "x"})
    shelf.put("token:a", "m.ipynb", "v2", None, {"c0": "y"})
    seen = shelf.get("token:a", "n.ipynb")
    assert seen is not None
    assert (seen.version, seen.order, seen.sources) == ("v1", ("c0",), {"c0": "x"})
    assert shelf.get("token:b", "n.ipynb") is None  # another reader read nothing

    shelf.forget("n.ipynb")
    assert shelf.get("token:a", "n.ipynb") is None
    assert shelf.get("token:a", "m.ipynb") is not None

    # Unused past the retention period: removed at the next sweep (a new process's first write).
    old = time.time() - runtime.STATE_RETENTION - 60
    for path in folder.rglob("*.v"):
        os.utime(path, (old, old))
    Shelf("file:/root", folder=folder).put("token:c", "k.ipynb", "v3", None, {})
    assert shelf.get("token:a", "m.ipynb") is None
    assert shelf.get("token:c", "k.ipynb") is not None
    assert sorted(p.suffix for p in folder.rglob("*") if p.is_file()) == [".s", ".v"]


class SlowDisk:
    """A filesystem whose writes hang until the event loop has run something else: a fault
    nothing here can cause for real (a stalled network or overloaded disk under the runtime
    folder). Each write waits, bounded, for a ticking coroutine to tick three times; a write
    made on the event loop stops that coroutine, so it waits in vain and is counted stalled."""

    def __init__(self) -> None:
        self.ticks = 0
        self.writes = 0
        self.stalled = 0

    def wrap(self, write: Callable[..., None]) -> Callable[..., None]:
        def slow(*args: object) -> None:
            start, deadline = self.ticks, time.monotonic() + 5.0
            while self.ticks < start + 3 and time.monotonic() < deadline:
                time.sleep(0.005)
            self.writes += 1
            self.stalled += self.ticks < start + 3
            write(*args)

        return slow

    async def tick(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            self.ticks += 1
            await anyio.sleep(0.005)


@pytest.mark.anyio
async def test_shared_state_is_written_off_the_event_loop(
    tmp_path: Path, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With --shared-state a read and an edit write the reader's shelf and the caller's undo
    # state to disk; on a slow disk the event loop must keep serving other work meanwhile.
    disk = SlowDisk()
    monkeypatch.setattr(Shelf, "_store", staticmethod(disk.wrap(Shelf._store)))
    meta = SharedCallerState._write_meta
    monkeypatch.setattr(SharedCallerState, "_write_meta", staticmethod(disk.wrap(meta)))
    root = tmp_path / "root"
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    store = FileStore(root, shared_state=True)
    callers = SharedCallerState(5, "file:" + str(root))
    change = history.record("edit cell", (), (), None)
    stop = anyio.Event()
    someone = Caller("token:someone")
    async with anyio.create_task_group() as tg:
        tg.start_soon(disk.tick, stop)
        snap = await store.load("n.ipynb", someone)
        assert (disk.writes, disk.stalled) == (2, 0)  # the shelf's two files
        await callers.set_viewed(someone, snap.path, snap.version)
        await callers.record(someone, snap.path, change)
        stop.set()
    # What was written is what the next request (through any process) reads.
    assert await callers.viewed(someone, "n.ipynb") == snap.version
    assert [c.label for c in await callers.changes(someone, "n.ipynb")] == ["edit cell"]
    seen = Shelf(store.state_key).get("token:someone", store.fs.resolve("n.ipynb")[1])
    assert seen is not None
    assert seen.version == snap.version
    assert disk.writes == 4  # and the callers' meta, twice
    assert disk.stalled == 0
