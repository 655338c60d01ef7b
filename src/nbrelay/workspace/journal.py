"""The run journal: every run's outputs, appended to a file as they arrive, so that any client of
the same root (another MCP session, another nbrelay process, the same one started again) can
follow, read and cancel a run by its handle.

* **Where.** A private folder per root in nbrelay's runtime folder (``runs/<hash of the root>``:
  the real root folder in file mode, the server's URL in live mode), checked like the lock
  folder (``nbrelay.runtime``): this user's, nobody else can write in it, files opened without
  following symlinks. Journals hold outputs, which may be secret: they never sit in the root.
* **What.** One JSON-lines file per run (``<handle>.jsonl``): a ``start`` record (the notebook,
  its cells, the kernel and, for a Jupyter Server's kernel, its id and the WebSocket session),
  each output message (``msg``, with the kernel's message id), the ids of the request's other
  messages (``seen``: its status messages and reply), each cell's start and end (``cell``:
  status, count and its final outputs) and the run's ``end``. A process that resumes the run
  after its runner died knows from those ids the last kernel message handled, and journals how
  many may be missing after it (``gap``, see ``kernels.sequence``). Appends are single
  ``write`` calls on an ``O_APPEND`` descriptor, so a reader sees whole records (a last line
  cut by a crash is ignored). Nothing is fsynced: a journal survives the death of the process
  (the page cache keeps it), not of the machine.
* **Bounded.** Messages are journaled up to ``MAX_MESSAGES_BYTES`` per run; past it, only each
  cell's end (its outputs folded and capped by ``--cell-output-limit``) is. Journals of finished
  runs are removed ``RETENTION`` seconds after they end, and past the newest ``KEEP_FINISHED``.
* **Who runs it.** The process running a run holds an ``flock`` on its journal until the run
  ends; the kernel releases it when that process dies, however it dies. So a reader knows,
  without trusting process ids, whether a run with no ``end`` is still running elsewhere or lost
  its runner.
* **Handles** come from one counter per root (a file, under ``flock``), so two processes never
  hand out the same one and a restarted process does not reuse its predecessor's.
* **Cancelling elsewhere.** ``cancel`` drops a ``<handle>.cancel`` file; the running process
  checks for it every ``CANCEL_POLL`` seconds and stops the run as ``cancel_execution`` does.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbrelay import runtime
from nbrelay.errors import NbrelayError
from nbrelay.kernels import sequence
from nbrelay.kernels.base import Msg
from nbrelay.kernels.jobs import CellRun, Job
from nbrelay.notebook.outputs import Limits, Output

logger = logging.getLogger("nbrelay.journal")

RETENTION = 24 * 3600.0  # seconds a finished run's journal is kept
KEEP_FINISHED = 200  # finished journals kept at most per root
MAX_MESSAGES_BYTES = 32 * 1024 * 1024  # per run; past it, only cell ends are journaled
CANCEL_POLL = 0.5  # seconds between a running process's checks for a cancel from elsewhere
_SUFFIX = ".jsonl"
_CANCEL = ".cancel"
_COUNTER = "handles"


def root_folder_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _slim(msg: Msg) -> dict[str, Any]:
    """What the output fold reads of a message (its type, parent, content, metadata), and its
    id (the last one a run handled, for a process that resumes it)."""
    header = msg.get("header") or {}
    parent = msg.get("parent_header") or {}
    return {
        "header": {
            "msg_type": header.get("msg_type") or msg.get("msg_type"),
            "msg_id": header.get("msg_id"),
        },
        "parent_header": {"msg_id": parent.get("msg_id")},
        "content": msg.get("content") or {},
        "metadata": msg.get("metadata") or {},
    }


def _as_messages(outputs: list[Output]) -> list[Msg]:
    """A cell's saved outputs as the IOPub messages that fold into them again."""
    msgs: list[Msg] = []
    for out in outputs:
        kind = str(out.get("output_type", ""))
        content = {k: v for k, v in out.items() if k != "output_type"}
        if kind == "stream" and isinstance(content.get("text"), list):
            content["text"] = "".join(content["text"])
        msgs.append({"header": {"msg_type": kind}, "parent_header": {}, "content": content})
    return msgs


@dataclass
class Recorded:
    """A run as its journal tells it."""

    job: Job
    ended: bool
    running_elsewhere: bool  # no end, and the process running it still holds its journal
    start: dict[str, Any] = field(default_factory=dict)
    replay: Replay | None = None


class Writer:
    """Appends one run's records (a ``JobObserver``); holds the journal's ``flock`` until the
    run ends."""

    def __init__(self, fd: int, handle: str) -> None:
        self._fd: int | None = fd
        self.handle = handle
        self._message_bytes = 0
        self._overflowed = False

    def _append(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        data = (line + "\n").encode("utf-8", "surrogatepass")
        try:
            os.write(self._fd, data)
        except OSError as exc:  # a full disk must not stop the run; the journal just stops
            logger.warning("run %s: its journal stopped: %s", self.handle, exc)
            self.close()

    def cell_started(self, job: Job, cell: CellRun) -> None:
        self._append({"t": "cell_start", "cell": cell.key})

    def sent(self, job: Job, cell: CellRun) -> None:
        self._append({"t": "sent", "cell": cell.key, "msg_id": cell.msg_id})

    def message(self, job: Job, cell: CellRun, msg: Msg) -> None:
        if self._overflowed:
            return
        slim = _slim(msg)
        size = len(json.dumps(slim.get("content"), default=str))
        self._message_bytes += size
        if self._message_bytes > MAX_MESSAGES_BYTES:
            self._overflowed = True
            self._append({"t": "overflow"})
            return
        self._append({"t": "msg", "cell": cell.key, "msg": slim})

    def seen(self, job: Job, cell: CellRun, msg: Msg) -> None:
        if self._overflowed:
            return
        msg_id = sequence.header_id(msg)
        if sequence.counter(msg_id) is not None:  # ids of other forms tell nothing
            self._append({"t": "seen", "cell": cell.key, "id": msg_id})

    def gap(self, job: Job, cell: CellRun, count: int) -> None:
        self._append({"t": "gap", "cell": cell.key, "missing": count})

    def cell_ended(self, job: Job, cell: CellRun) -> None:
        self._append(
            {
                "t": "cell",
                "cell": cell.key,
                "status": cell.status,
                "execution_count": cell.execution_count,
                "message": cell.message,
                "seconds": cell.seconds,
                "outputs": job.cell_outputs(cell),
            }
        )

    def ended(self, job: Job) -> None:
        self._append(
            {
                "t": "end",
                "at": time.time(),
                "cells": [
                    {"cell": c.key, "status": c.status, "message": c.message} for c in job.cells
                ],
                "error": job.error,
                "state_lost": job.state_lost,
                "notes": job.notes,
                "missing": job.missing,
                "version": job.version,
            }
        )
        self.close()

    def note(self, record: dict[str, Any]) -> None:
        """Add a record of the caller's (a re-attached run's facts)."""
        self._append(record)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


class RunJournal:
    """The journals of one root (see the module docstring). ``key`` None: no journal (runs are
    kept in memory only)."""

    def __init__(self, key: str | None, *, folder: Path | None = None) -> None:
        self.key = key
        self._root = root_folder_name(key) if key is not None else ""
        self._parts = ("runs", self._root) if key is not None else ()
        self._base = folder
        self._swept = 0.0

    @property
    def enabled(self) -> bool:
        return self.key is not None

    @contextlib.contextmanager
    def _dir(self) -> Iterator[int]:
        with runtime.folder_fd(self._base, *self._parts) as fd:
            yield fd

    def path(self) -> Path:
        return runtime.folder_path(self._base, *self._parts)

    # -- handles ---------------------------------------------------------------------------

    def new_number(self) -> int:
        """The next run number of this root (shared by every process on it)."""
        with self._dir() as dfd:
            fd = runtime.open_file(dfd, _COUNTER, os.O_RDWR | os.O_CREAT, _COUNTER)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            number = (int(raw) if raw.isdigit() else 0) + 1
            text = str(number).encode("ascii")
            os.pwrite(fd, text.ljust(20), 0)
            return number
        finally:
            os.close(fd)

    # -- writing ---------------------------------------------------------------------------

    def open(self, job: Job, **facts: Any) -> Writer:
        """Start a run's journal (its ``start`` record) and watch the job with it."""
        self.sweep()
        name = job.handle + _SUFFIX
        with self._dir() as dfd:
            fd = runtime.open_file(
                dfd, name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, name
            )
        fcntl.flock(fd, fcntl.LOCK_EX)
        writer = Writer(fd, job.handle)
        writer.note(
            {
                "t": "start",
                "handle": job.handle,
                "path": job.path,
                "kernel": job.kernel,
                "timeout": job.timeout,
                "stop_on_error": job.stop_on_error,
                "output_limit": job.outputs.limits.limit,
                "display_limit": job.outputs.limits.display_limit,
                "pid": os.getpid(),
                "at": time.time(),
                "cells": [{"id": c.id, "index": c.index, "source": c.source} for c in job.cells],
                "notes": list(job.notes),
                **facts,
            }
        )
        job.observer = writer
        return writer

    # -- reading ---------------------------------------------------------------------------

    def load(self, handle: str, follow: Replay | None = None) -> Recorded | None:
        """The run ``handle`` as its journal tells it, or None when it has none; with
        ``follow`` (what an earlier look read), only what was written since is read."""
        if not self.enabled or not handle.isascii() or not handle.isalnum():
            return None
        name = handle + _SUFFIX
        try:
            with self._dir() as dfd:
                fd = runtime.open_file(dfd, name, os.O_RDONLY, name)
        except (NbrelayError, OSError):
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
            state = follow or Replay()
            data = b""
            while chunk := os.pread(fd, 1 << 20, state.offset + len(data)):
                data += chunk
        finally:
            os.close(fd)
        state.feed(data)
        if state.job is None:
            return None
        return Recorded(
            job=state.job,
            ended=state.ended,
            running_elsewhere=held,
            start=state.start,
            replay=state,
        )

    def finish(self, job: Job) -> None:
        """Write the end of a run whose process died (unless another process did already)."""
        name = job.handle + _SUFFIX
        try:
            with self._dir() as dfd:
                fd = runtime.open_file(dfd, name, os.O_WRONLY | os.O_APPEND, name)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return
                if _ended_at(dfd, name) is not None:
                    os.close(fd)
                    return
        except (NbrelayError, OSError):
            return
        Writer(fd, job.handle).ended(job)

    def unfinished(self) -> list[str]:
        """The handles of runs whose journal has no end (running, or their process died)."""
        if not self.enabled:
            return []
        with self._dir() as dfd:
            names = [n for n in os.listdir(dfd) if n.endswith(_SUFFIX)]
            return [n[: -len(_SUFFIX)] for n in names if _ended_at(dfd, n) is None]

    def claim(self, handle: str) -> tuple[Writer, Recorded] | None:
        """Take over the journal of a run whose process died (None if a live process holds it,
        or it ended): the returned writer holds its lock and appends to it."""
        name = handle + _SUFFIX
        try:
            with self._dir() as dfd:
                fd = runtime.open_file(dfd, name, os.O_RDWR | os.O_APPEND, name)
        except (NbrelayError, OSError):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        data = b""
        while chunk := os.pread(fd, 1 << 20, len(data)):
            data += chunk
        recorded = replay(data)
        if recorded is None or recorded.ended:
            os.close(fd)
            return None
        if not data.endswith(b"\n"):  # a record cut by the crash: end it, so appends parse
            os.write(fd, b"\n")
        return Writer(fd, handle), recorded

    def cancel(self, handle: str) -> None:
        """Ask the process running ``handle`` to stop it."""
        name = handle + _CANCEL
        with self._dir() as dfd:
            os.close(runtime.open_file(dfd, name, os.O_WRONLY | os.O_CREAT, name))

    def cancel_asked(self, handle: str) -> bool:
        try:
            with self._dir() as dfd:
                os.stat(handle + _CANCEL, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    # -- retention -------------------------------------------------------------------------

    def sweep(self, *, now: float | None = None, force: bool = False) -> list[str]:
        """Remove the journals of runs that ended over ``RETENTION`` seconds ago, and of all
        but the newest ``KEEP_FINISHED`` finished runs; return the handles removed."""
        now = time.time() if now is None else now
        if not force and now - self._swept < 60:
            return []
        self._swept = now
        removed: list[str] = []
        with contextlib.suppress(NbrelayError, OSError):
            sweep_other_roots(self._base, self._root, now)
        with self._dir() as dfd:
            finished: list[tuple[float, str]] = []
            for name in os.listdir(dfd):
                if not name.endswith(_SUFFIX):
                    continue
                ended = _ended_at(dfd, name)
                if ended is not None:
                    finished.append((ended, name))
            finished.sort(reverse=True)
            for k, (ended, name) in enumerate(finished):
                if k >= KEEP_FINISHED or now - ended > RETENTION:
                    handle = name[: -len(_SUFFIX)]
                    for gone in (name, handle + _CANCEL):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(gone, dir_fd=dfd)
                    removed.append(handle)
        return removed


# The per-root folders of the state folder, and how long one no process used is kept.
_STATE_KINDS = (("runs", RETENTION), ("callers", 7 * 24 * 3600.0), ("seen", 7 * 24 * 3600.0))


def sweep_other_roots(base: Path | None, mine: str, now: float) -> list[str]:
    """Remove the state folders of roots no process has used for their retention period
    (roots that were deleted, temporary folders): every file in them untouched that long, and
    no run journal in them held by a running process. Returns what was removed."""
    removed: list[str] = []
    for kind, keep in _STATE_KINDS:
        try:
            kfd, _ = runtime.open_folder(base, kind)
        except (NbrelayError, OSError):
            continue
        try:
            for name in os.listdir(kfd):
                if name == mine:
                    continue
                with contextlib.suppress(OSError):
                    if _stale_folder(kfd, name, now - keep):
                        removed.append(f"{kind}/{name}")
        finally:
            os.close(kfd)
    return removed


def _stale_folder(parent: int, name: str, before: float) -> bool:
    fd = runtime.open_subfolder(parent, name)
    try:
        if os.fstat(fd).st_mtime > before:
            return False
        names = os.listdir(fd)
        for entry in names:
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if st.st_mtime > before:
                return False
            if entry.endswith(_SUFFIX):
                jfd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    fcntl.flock(jfd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False  # a run still going
                finally:
                    os.close(jfd)
        for entry in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)
    return True


def _ended_at(dfd: int, name: str) -> float | None:
    """When the run of journal ``name`` ended (from its last record), None if it has not."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, 65536, max(size - 65536, 0))
    finally:
        os.close(fd)
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        last = json.loads(lines[-1])
    except ValueError:
        return None
    if isinstance(last, dict) and last.get("t") == "end":
        return float(last.get("at") or 0)
    return None


class Replay:
    """A journal read so far, as the ``Job`` it tells of: ``feed`` it the bytes that follow
    (whole records are used, a partial last one waits for the rest), so following a run costs
    what it printed since the last look, not its whole journal."""

    def __init__(self) -> None:
        self.job: Job | None = None
        self.start: dict[str, Any] = {}
        self.ended = False
        self.offset = 0  # bytes of the journal used so far
        self._wall = 0.0
        self._by_key: dict[str, CellRun] = {}

    def feed(self, data: bytes) -> None:
        cut = data.rfind(b"\n") + 1
        for line in data[:cut].split(b"\n"):
            if not line:
                continue
            try:
                parsed = json.loads(line.decode("utf-8", "surrogatepass"))
            except (ValueError, UnicodeDecodeError):
                continue  # a record cut by a crash
            if isinstance(parsed, dict):
                self._record(parsed)
        self.offset += cut

    def _record(self, rec: dict[str, Any]) -> None:
        kind = rec.get("t")
        if self.job is None:
            if kind == "start":
                self._begin(rec)
            return
        job = self.job
        cell = self._by_key.get(str(rec.get("cell")))
        if kind == "cell_start" and cell is not None:
            cell.status = "running"
            job.outputs.cells.pop(cell.key, None)
            job.outputs.cell(cell.key)
        elif kind == "sent" and cell is not None:
            cell.msg_id = rec.get("msg_id")
        elif kind == "msg" and cell is not None:
            msg = rec.get("msg") or {}
            job.outputs.feed(cell.key, msg)
            job.kernel_msg = sequence.header_id(msg) or job.kernel_msg
        elif kind == "seen" and isinstance(rec.get("id"), str):
            job.kernel_msg = rec["id"]
        elif kind == "overflow":  # messages are no longer journaled: the last one is unknown
            job.kernel_msg = None
        elif kind == "gap" and cell is not None:
            count = rec.get("missing")
            if isinstance(count, int) and count > 0:
                job.missing[cell.key] = job.missing.get(cell.key, 0) + count
        elif kind == "cell" and cell is not None:
            cell.status = rec.get("status", cell.status)
            cell.execution_count = rec.get("execution_count")
            cell.message = str(rec.get("message") or "")
            cell.seconds = float(rec.get("seconds") or 0.0)
            job.outputs.cells.pop(cell.key, None)
            fold = job.outputs.cell(cell.key)
            for msg in _as_messages(rec.get("outputs") or []):
                fold.feed(msg)
        elif kind == "end":
            self.ended = True
            for told in rec.get("cells") or []:
                found = self._by_key.get(str(told.get("cell")))
                if found is not None:
                    found.status = told.get("status", found.status)
                    found.message = str(told.get("message") or found.message)
            job.error = rec.get("error")
            job.state_lost = bool(rec.get("state_lost"))
            job.notes = list(rec.get("notes") or job.notes)
            told = rec.get("missing")
            if isinstance(told, dict):
                job.missing = {str(k): v for k, v in told.items() if isinstance(v, int) and v > 0}
            job.version = rec.get("version")
            ended_at = float(rec.get("at") or self._wall)
            job.finished = job.started + max(ended_at - self._wall, 0.0)
            job.done.set()
            job._notify()
        elif kind == "note":
            text = str(rec.get("note") or "")
            if text and text not in job.notes:
                job.notes.append(text)
        if kind in ("cell_start", "msg", "cell", "note", "gap"):
            job._notify()

    def _begin(self, start: dict[str, Any]) -> None:
        self.start = start
        cells = [
            CellRun(id=c.get("id"), index=int(c.get("index", -1)), source=str(c.get("source", "")))
            for c in start.get("cells", [])
        ]
        job = Job(
            str(start["handle"]),
            str(start["path"]),
            cells,
            kernel=str(start.get("kernel", "")),
            timeout=start.get("timeout"),
            stop_on_error=bool(start.get("stop_on_error", True)),
            limits=Limits(
                limit=start.get("output_limit") or Limits().limit,
                display_limit=start.get("display_limit") or Limits().display_limit,
            ),
        )
        job.notes = list(start.get("notes") or [])
        self._wall = float(start.get("at") or time.time())
        job.started = time.monotonic() - (time.time() - self._wall)
        self._by_key = {c.key: c for c in cells}
        self.job = job


def replay(data: bytes, *, running_elsewhere: bool = False) -> Recorded | None:
    """Build the ``Job`` a journal tells of (whole records only)."""
    if data and not data.endswith(b"\n"):
        data += b"\n"  # a last record without its newline may still be whole
    state = Replay()
    state.feed(data)
    if state.job is None:
        return None
    return Recorded(
        job=state.job, ended=state.ended, running_elsewhere=running_elsewhere, start=state.start
    )
