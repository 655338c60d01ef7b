"""The in-process way's journal of unsaved edits (``stores.rtc_journal``): what a file holds
after appends and replacements, and that an edit's append costs no worker-thread hop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from nbrelay.stores.rtc_journal import Journal


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_appends_and_replacements_keep_every_entry_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        journal = Journal(tmp_path / "unsaved")
        for n in range(3):
            await journal.append("room:1", {"n": n})
        assert await journal.read("room:1") == [{"n": 0}, {"n": 1}, {"n": 2}]
        await journal.replace("room:1", [{"n": 2}])
        await journal.append("room:1", {"n": 3})  # into the file that replaced the old one
        assert await journal.read("room:1") == [{"n": 2}, {"n": 3}]
        await journal.replace("room:1", [])  # saved: no journal left
        assert await journal.rooms() == []
        await journal.append("room:1", {"n": 4})
        assert await journal.read("room:1") == [{"n": 4}]
        big = {"n": 5, "text": "x" * 1_000_000}  # a big entry: written from a worker thread
        await journal.append("room:1", big)
        assert await journal.read("room:1") == [{"n": 4}, big]
        # Another process reading the folder (the restarted server) sees it all, unbuffered.
        (path,) = (tmp_path / "unsaved").glob("*.jsonl")
        assert [e["n"] for e in _lines(path)] == [4, 5]

    anyio.run(main)


def test_an_edits_append_is_no_worker_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hop to a worker thread cost an edit more than the write itself: only the first
    append of a room opens its file from a thread."""
    hops: list[str] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", "?"))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)

    async def main() -> None:
        journal = Journal(tmp_path / "unsaved")
        for n in range(20):
            await journal.append("room:1", {"n": n, "cells": {"c1": [None, {"source": "x"}]}})
        assert len(await journal.read("room:1")) == 20

    anyio.run(main)
    assert hops.count("_read") == 1
    assert len(hops) - 1 <= 1, hops
