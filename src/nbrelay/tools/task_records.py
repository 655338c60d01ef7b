"""Tasks on disk for every nbrelay process on one root (``--shared-state``: replicas behind one
address), so that ``tasks/get``, ``tasks/cancel`` and ``tasks/update`` for a task made through
one process are answered by another.

The process that runs a task's call writes its record: when it is made, when its run starts (the
run's handle), and when it ends (its status, and its result as the call returned it). Another
process answers from that record, and, while the task works, from its run's journal (the running
cell, its time, what it printed). ``tasks/cancel`` through another process drops a cancel mark
next to the record and cancels the run through its journal (as ``cancel_execution`` does); the
process running the task sees the mark and cancels it as its own.

Records live in the root's private state folder (``tasks/<hash of the root>`` in nbrelay's
runtime folder, next to the run journal), one ``<digest of the task id>.json`` each (the task id
is a secret: it names no file), holding a digest of the identity that made the task, never the
identity itself. While the task runs, its process holds an ``flock`` on ``<digest>.live``: a
task whose record says it works but whose lock is free lost its process (killed), and is
answered as failed. Each is written and read whole under an ``flock``, in a worker thread.
A record is removed with the others of its group (``runtime.expire_groups``) once unused for
``runtime.STATE_RETENTION`` seconds, and at the next write of a record after ``KEEP_SECONDS``
past its end (``tasks.KEEP_SECONDS``, passed in).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio

from nbrelay import runtime
from nbrelay.errors import NbrelayError

_HEAD = ".json"
_CANCEL = ".cancel"
_LIVE = ".live"
_GROUP = (_HEAD, _CANCEL, _LIVE)
_SWEEP_EVERY = 600.0


def _digest(text: str, n: int = 40) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def owner_digest(owner: str | None) -> str | None:
    """How a record names the identity that made its task (None: nobody authenticated)."""
    return _digest("owner\0" + owner, 64) if owner is not None else None


class TaskRecords:
    """The task records of one root (see the module docstring); ``key`` names the root."""

    def __init__(self, key: str, keep_seconds: float, *, folder: Path | None = None) -> None:
        self._parts = ("tasks", _digest(key, 32))
        self._base = folder
        self._keep = keep_seconds
        self._swept = 0.0

    async def put(self, task_id: str, record: dict[str, Any]) -> None:
        """Write the whole record of ``task_id`` (in a worker thread)."""
        await anyio.to_thread.run_sync(self._put, task_id, record)

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The record of ``task_id`` (None: no such task on this root)."""
        return await anyio.to_thread.run_sync(self._get, task_id)

    async def ask_cancel(self, task_id: str) -> None:
        """Ask the process running ``task_id`` to cancel it."""
        await anyio.to_thread.run_sync(self._ask_cancel, task_id)

    async def cancel_asked(self, task_id: str) -> bool:
        return await anyio.to_thread.run_sync(self._cancel_asked, task_id)

    async def hold(self, task_id: str) -> int:
        """Mark ``task_id`` as running in this process until ``release``: an ``flock`` the
        kernel drops when this process dies, however it dies (as the run journal's)."""
        return await anyio.to_thread.run_sync(self._hold, task_id)

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)

    async def running(self, task_id: str) -> bool:
        """Whether a live process still runs ``task_id`` (False: it ended, or its process
        died)."""
        return await anyio.to_thread.run_sync(self._running, task_id)

    def _hold(self, task_id: str) -> int:
        name = _digest(task_id) + _LIVE
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            fd = runtime.open_file(dfd, name, os.O_RDWR | os.O_CREAT, name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_existing(self, name: str) -> int | None:
        """A descriptor of the state file ``name``, read-only (None: there is none)."""
        try:
            with runtime.folder_fd(self._base, *self._parts) as dfd:
                return runtime.open_file(dfd, name, os.O_RDONLY, name)
        except NbrelayError:
            return None

    def _running(self, task_id: str) -> bool:
        fd = self._open_existing(_digest(task_id) + _LIVE)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _put(self, task_id: str, record: dict[str, Any]) -> None:
        name = _digest(task_id) + _HEAD
        data = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            self._sweep(dfd)
            fd = runtime.open_file(dfd, name, os.O_RDWR | os.O_CREAT, name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def _get(self, task_id: str) -> dict[str, Any] | None:
        fd = self._open_existing(_digest(task_id) + _HEAD)
        if fd is None:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            raw = os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
        try:
            found = json.loads(raw) if raw else None
        except ValueError:
            return None
        if not isinstance(found, dict) or found.get("taskId") != task_id:
            return None
        return found

    def _ask_cancel(self, task_id: str) -> None:
        name = _digest(task_id) + _CANCEL
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            os.close(runtime.open_file(dfd, name, os.O_WRONLY | os.O_CREAT, name))

    def _cancel_asked(self, task_id: str) -> bool:
        try:
            with runtime.folder_fd(self._base, *self._parts) as dfd:
                os.stat(_digest(task_id) + _CANCEL, dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NbrelayError):
            return False
        return True

    def _sweep(self, dfd: int) -> None:
        now = time.time()
        if now - self._swept < _SWEEP_EVERY:
            return
        self._swept = now
        runtime.expire_groups(dfd, _GROUP)
        for base, fd in runtime.groups(dfd, _HEAD):
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(os.pread(fd, os.fstat(fd).st_size, 0) or b"{}")
                ended = record.get("endedAt") if isinstance(record, dict) else None
                if isinstance(ended, (int, float)) and now - ended > self._keep:
                    runtime.remove_group(dfd, base, _GROUP)
