"""A journal of acknowledged edits that a notebook's file may not hold yet, kept beside the server.

The server extension lives and dies with the Jupyter Server: if the server crashes, what nbrelay
remembered of its unsaved edits (``SharedRoom.unsaved``) dies with it. So the in-process way keeps
that memory in files too, in the server's runtime folder: one file per room (named by the
notebook's file id, which follows renames), one JSON line per edit (``rtc_saving.entry``: the cells
it touched, before and after), appended before the edit is acknowledged to the agent, and removed
once a save the server confirmed holds every edit. When the restarted server's room is joined
again, the store recovers from it as from its own memory (``rtc_saving.recover``). The file is
written without fsync: it outlives the process being killed, not the machine losing power.

A room's file stays open while it has entries, and an entry of ordinary size is one ``write`` on
the event loop into the operating system's cache (microseconds, done before the edit is
acknowledged, so a kill -9 right after still finds it); a hop to a worker thread for it cost an
edit more than the write itself. Only a big entry (cells with large outputs) is written from a
worker thread.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

logger = logging.getLogger("nbrelay.rtc")

_KEY = re.compile(r"[^A-Za-z0-9_-]")
_ON_LOOP = 64 * 1024  # an entry up to this size is written on the event loop (see above)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Journal:
    """The unsaved edits of the rooms of one server, a file per room (see the module
    docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._open: dict[Path, int] = {}  # the files appended to, open for appending
        self._lock = anyio.Lock()  # an append waits for a file being replaced

    def _file(self, key: str) -> Path:
        return self.folder / f"{_KEY.sub('_', key)}.jsonl"

    async def rooms(self) -> list[str]:
        """The rooms with a journal (their file ids)."""
        return await anyio.to_thread.run_sync(self._rooms)

    def _rooms(self) -> list[str]:
        try:
            return sorted(p.stem for p in self.folder.glob("*.jsonl"))
        except OSError:
            return []

    async def append(self, key: str, record: dict[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        path = self._file(key)
        async with self._lock:
            fd = self._open.get(path)
            if fd is None:
                fd = await anyio.to_thread.run_sync(self._open_file, path)
                self._open[path] = fd
            if len(data) <= _ON_LOOP:
                _write_all(fd, data)
            else:
                await anyio.to_thread.run_sync(_write_all, fd, data)

    def _open_file(self, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _close(self, path: Path) -> None:
        fd = self._open.pop(path, None)
        if fd is not None:
            os.close(fd)

    async def replace(self, key: str, records: Sequence[dict[str, Any]]) -> None:
        """Keep only ``records`` (none: remove the room's journal)."""
        path = self._file(key)
        async with self._lock:
            self._close(path)  # later appends go to the file that replaces it
            await anyio.to_thread.run_sync(self._replace, path, list(records))

    def _replace(self, path: Path, records: list[dict[str, Any]]) -> None:
        if not records:
            path.unlink(missing_ok=True)
            return
        temp = path.with_suffix(".tmp")
        with temp.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        os.replace(temp, path)

    async def read(self, key: str) -> list[dict[str, Any]]:
        return await anyio.to_thread.run_sync(self._read, self._file(key))

    def _read(self, path: Path) -> list[dict[str, Any]]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records = []
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # the last line, cut short when the process was killed
                logger.info("skipping a cut journal line in %s", path)
                continue
            if isinstance(record, dict):
                records.append(record)
        return records
