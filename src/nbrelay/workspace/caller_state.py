"""What each caller last viewed of each notebook (the stale-edit guard) and its undo history:
in memory for one process, or on disk for every nbrelay process on the same root.

Two processes behind one address (replicas behind a load balancer) serve one client in turns, so
what that client read through one must guard its edits through the other, and it must be able to
undo through either. ``SharedCallerState`` keeps both in the root's private state folder (in
nbrelay's runtime folder, next to the run journal: ``callers/<hash of the root>``), one pair of
files per caller and notebook, named by a digest of both (the caller's key is already a digest
for a token; nothing names the caller in clear):

* ``<digest>.json``: the notebook's path, the version the caller last viewed, and where each
  recorded change starts in
* ``<digest>.undo``: the changes, one JSON line each, appended (an edit costs its own change,
  not the history's size); undo truncates; past twice ``--undo-depth`` the oldest are dropped.

Every update holds an ``flock`` on the ``.json`` file, so concurrent processes serialise; the
files are read and written in a worker thread, never on the event loop. A file
cut by a crash reads as empty: the caller is then asked to read the notebook again (the guard
errs on the safe side) and its undo history is gone. Files untouched for
``runtime.STATE_RETENTION`` seconds are removed, and past ``runtime.STATE_MAX_GROUPS`` the least
recently used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio

from nbrelay import runtime
from nbrelay.caller import Caller, PerCaller
from nbrelay.errors import NbrelayError
from nbrelay.notebook import history

_SWEEP_EVERY = 3600.0
_PAIR = (".json", ".undo")
_T = TypeVar("_T")


class CallerState:
    """One process's memory of each caller's viewed versions and undo history."""

    def __init__(self, depth: int) -> None:
        self._depth = depth
        self._history: PerCaller[list[history.Change]] = PerCaller()
        self._viewed: PerCaller[str] = PerCaller()

    async def viewed(self, caller: Caller, rel: str) -> str | None:
        return self._viewed.get(caller, rel)

    async def set_viewed(self, caller: Caller, rel: str, version: str) -> None:
        self._viewed.mine(caller)[rel] = version

    async def keep_viewed(self, caller: Caller, rel: str, before: str, after: str) -> None:
        """The caller's own write moved the notebook from ``before`` to ``after``: a view of
        ``before`` stays current."""
        if self._viewed.get(caller, rel) == before:
            self._viewed.mine(caller)[rel] = after

    async def record(self, caller: Caller, rel: str, change: history.Change) -> None:
        past = self._history.mine(caller).setdefault(rel, [])
        past.append(change)
        del past[: max(len(past) - self._depth, 0)]

    async def changes(self, caller: Caller, rel: str) -> list[history.Change]:
        """The caller's recorded changes of a notebook (newest last)."""
        return list(self._history.get(caller, rel) or ())

    async def drop(self, caller: Caller, rel: str, count: int) -> None:
        """Forget the caller's newest ``count`` changes (they were undone)."""
        past = self._history.get(caller, rel)
        if past:
            del past[max(len(past) - count, 0) :]

    async def forget(self, rel: str) -> None:
        self._history.forget(rel)
        self._viewed.forget(rel)


def _change_to_json(change: history.Change) -> dict[str, Any]:
    return {
        "label": change.label,
        "before_order": list(change.before_order),
        "before": dict(change.before),
        "after": dict(change.after),
        "added": list(change.added),
        "removed": list(change.removed),
        "moved": list(change.moved),
        "metadata": list(change.metadata) if change.metadata is not None else None,
    }


def _change_from_json(data: dict[str, Any]) -> history.Change:
    meta = data.get("metadata")
    return history.Change(
        label=str(data["label"]),
        before_order=tuple(data["before_order"]),
        before=data["before"],
        after=data["after"],
        added=tuple(data["added"]),
        removed=tuple(data["removed"]),
        moved=tuple(data["moved"]),
        metadata=(meta[0], meta[1]) if meta is not None else None,
    )


class SharedCallerState(CallerState):
    """``CallerState`` on disk, shared by the processes on one root (see the module
    docstring)."""

    def __init__(self, depth: int, key: str, *, folder: Path | None = None) -> None:
        super().__init__(depth)
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self._parts = ("callers", digest)
        self._base = folder
        self._swept = 0.0

    def _name(self, who: Caller, rel: str) -> str:
        raw = f"{who.key}\0{rel}".encode("utf-8", "surrogateescape")
        return hashlib.sha256(raw).hexdigest()[:40]

    @contextlib.contextmanager
    def _pair(
        self, who: Caller, rel: str, *, write: bool
    ) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """The caller's files for ``rel`` (meta, changes), locked, with the meta read."""
        name = self._name(who, rel)
        flags = os.O_RDWR | os.O_CREAT if write else os.O_RDONLY
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            self._sweep(dfd)
            try:
                meta_fd = runtime.open_file(dfd, name + ".json", flags, name + ".json")
            except NbrelayError:
                if write:
                    raise
                yield -1, -1, {}
                return
            try:
                undo_fd = runtime.open_file(dfd, name + ".undo", flags, name + ".undo")
            except NbrelayError:
                os.close(meta_fd)
                if write:
                    raise
                yield -1, -1, {}
                return
        try:
            fcntl.flock(meta_fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            raw = os.pread(meta_fd, 1 << 20, 0)
            try:
                meta = json.loads(raw) if raw else {}
            except ValueError:
                meta = {}
            if not isinstance(meta, dict) or meta.get("path") not in (None, rel):
                meta = {}
            meta["path"] = rel
            yield meta_fd, undo_fd, meta
        finally:
            os.close(undo_fd)
            os.close(meta_fd)

    @staticmethod
    def _write_meta(fd: int, meta: dict[str, Any]) -> None:
        data = json.dumps(meta, separators=(",", ":")).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))

    async def viewed(self, caller: Caller, rel: str) -> str | None:
        return await _off_loop(self._get_viewed, caller, rel)

    async def set_viewed(self, caller: Caller, rel: str, version: str) -> None:
        await _off_loop(self._set_viewed, caller, rel, version)

    async def keep_viewed(self, caller: Caller, rel: str, before: str, after: str) -> None:
        await _off_loop(self._keep_viewed, caller, rel, before, after)

    async def record(self, caller: Caller, rel: str, change: history.Change) -> None:
        await _off_loop(self._record, caller, rel, change)

    async def changes(self, caller: Caller, rel: str) -> list[history.Change]:
        return await _off_loop(self._changes, caller, rel)

    async def drop(self, caller: Caller, rel: str, count: int) -> None:
        await _off_loop(self._drop, caller, rel, count)

    async def forget(self, rel: str) -> None:
        """Drop every caller's state of ``rel`` (the notebook went away)."""
        await _off_loop(self._forget, rel)

    # The files' side, run in a worker thread.

    def _get_viewed(self, who: Caller, rel: str) -> str | None:
        with self._pair(who, rel, write=False) as (_, _, meta):
            seen = meta.get("viewed")
        return seen if isinstance(seen, str) else None

    def _set_viewed(self, who: Caller, rel: str, version: str) -> None:
        with self._pair(who, rel, write=True) as (fd, _, meta):
            meta["viewed"] = version
            self._write_meta(fd, meta)

    def _keep_viewed(self, who: Caller, rel: str, before: str, after: str) -> None:
        if (
            self._get_viewed(who, rel) != before
        ):  # most writes: nothing to keep (and no file to make)
            return
        with self._pair(who, rel, write=True) as (fd, _, meta):
            if meta.get("viewed") == before:
                meta["viewed"] = after
                self._write_meta(fd, meta)

    def _record(self, who: Caller, rel: str, change: history.Change) -> None:
        line = (json.dumps(_change_to_json(change), separators=(",", ":")) + "\n").encode()
        with self._pair(who, rel, write=True) as (fd, undo, meta):
            offsets = _offsets(meta)
            end = os.fstat(undo).st_size
            if offsets and end < offsets[-1]:  # cut by a crash: start again
                offsets, end = [], 0
            if len(offsets) >= 2 * self._depth:  # keep the newest depth - 1, then this one
                keep = offsets[len(offsets) - self._depth + 1 :] if self._depth > 1 else []
                start = keep[0] if keep else end
                rest = os.pread(undo, end - start, start) if keep else b""
                os.pwrite(undo, rest, 0)
                os.ftruncate(undo, len(rest))
                offsets, end = [o - start for o in keep], len(rest)
            os.pwrite(undo, line, end)
            os.ftruncate(undo, end + len(line))
            offsets.append(end)
            meta["changes"] = offsets
            self._write_meta(fd, meta)

    def _changes(self, who: Caller, rel: str) -> list[history.Change]:
        with self._pair(who, rel, write=False) as (_, undo, meta):
            offsets = _offsets(meta)
            if undo < 0 or not offsets:
                return []
            data = os.pread(undo, os.fstat(undo).st_size, 0)
        found: list[history.Change] = []
        for start in offsets[-self._depth :] if self._depth > 0 else []:
            try:
                found.append(_change_from_json(json.loads(data[start : data.index(b"\n", start)])))
            except (ValueError, KeyError, TypeError):
                return []  # cut by a crash: no history rather than a wrong one
        return found

    def _drop(self, who: Caller, rel: str, count: int) -> None:
        with self._pair(who, rel, write=True) as (fd, undo, meta):
            offsets = _offsets(meta)
            if not offsets or count <= 0:
                return
            cut = offsets[max(len(offsets) - count, 0)]
            os.ftruncate(undo, cut)
            meta["changes"] = offsets[: max(len(offsets) - count, 0)]
            self._write_meta(fd, meta)

    def _forget(self, rel: str) -> None:
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            for base, fd in runtime.groups(dfd, _PAIR[0]):
                with contextlib.suppress(OSError, ValueError):
                    meta = json.loads(os.pread(fd, 1 << 20, 0) or b"{}")
                    if isinstance(meta, dict) and meta.get("path") == rel:
                        runtime.remove_group(dfd, base, _PAIR)

    def _sweep(self, dfd: int) -> None:
        if time.time() - self._swept >= _SWEEP_EVERY:
            self._swept = time.time()
            runtime.expire_groups(dfd, _PAIR)


async def _off_loop(func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)`` in a worker thread: the files' locks and writes never block the event
    loop. Awaited to the end (a cancelled request still finishes its write), so the caller's
    next request, through this process or another, sees it."""
    return await anyio.to_thread.run_sync(func, *args)


def _offsets(meta: dict[str, Any]) -> list[int]:
    found = meta.get("changes")
    if not isinstance(found, list) or not all(isinstance(o, int) for o in found):
        return []
    return list(found)
