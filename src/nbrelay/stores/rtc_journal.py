"""A journal of acknowledged edits that a notebook's file may not hold yet, kept beside the server.

The server extension lives and dies with the Jupyter Server: if the server crashes, what nbrelay
remembered of its unsaved edits (``SharedRoom.unsaved``) dies with it. So the in-process way keeps
that memory in files too, in the server's runtime folder: one file per room (named by the
notebook's file id, which follows renames), one JSON line per edit (``rtc_saving.entry``: the cells
it touched, before and after), appended before the edit is acknowledged to the agent, and removed
once a save the server confirmed holds every edit. When the restarted server's room is joined
again, the store recovers from it as from its own memory (``rtc_saving.recover``). The file is
written without fsync: it outlives the process being killed, not the machine losing power.
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


class Journal:
    """The unsaved edits of the rooms of one server, a file per room (see the module
    docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

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
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        await anyio.to_thread.run_sync(self._append, self._file(key), line)

    def _append(self, path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with path.open("a", encoding="utf-8") as out:
            out.write(line)

    async def replace(self, key: str, records: Sequence[dict[str, Any]]) -> None:
        """Keep only ``records`` (none: remove the room's journal)."""
        await anyio.to_thread.run_sync(self._replace, self._file(key), list(records))

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
