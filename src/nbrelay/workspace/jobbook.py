"""The executions of one workspace: running jobs by handle, and what finished ones ran.

A job holds all its output, so only the last 50 runs are kept, and of the finished ones only
the newest that together printed at most ``KEPT_OUTPUT`` characters; the cell runs of a pruned
job stay in the notebook's execution history (``HISTORY_DEPTH`` cell runs).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from nbrelay.errors import InvalidArgument
from nbrelay.kernels.jobs import Job
from nbrelay.timestamps import utc_iso

HISTORY_DEPTH = 500
KEPT_OUTPUT = 2_000_000  # characters of output the finished jobs kept for get_execution hold


class JobBook:
    """Jobs by handle (``x1``, ``x2``, …) and the execution history of each notebook."""

    def __init__(self, numbers: Callable[[], int] | None = None) -> None:
        """``numbers`` hands out run numbers (shared by the processes on a root); default
        1, 2, … in this process."""
        self._jobs: dict[str, Job] = {}
        self._numbers = numbers or itertools.count(1).__next__
        self._ran: dict[str, deque[dict[str, Any]]] = {}  # execution history of pruned jobs

    def new_handle(self) -> str:
        return f"x{self._numbers()}"

    def find(self, handle: str) -> Job | None:
        """The job ``handle`` of this process, if it still holds it."""
        return self._jobs.get(handle)

    def remember(self, job: Job) -> None:
        self._jobs[job.handle] = job
        finished = [h for h, j in self._jobs.items() if j.done.is_set()]
        drop = set(finished[: max(len(self._jobs) - 50, 0)])
        printed = 0
        for handle in reversed(finished):
            printed += self._jobs[handle].printed()
            if printed > KEPT_OUTPUT:
                drop.add(handle)
        for handle in (h for h in finished if h in drop):
            pruned = self._jobs.pop(handle)
            ran = self._ran.setdefault(pruned.path, deque(maxlen=HISTORY_DEPTH))
            ran.extend(history_entries(pruned))

    def job(self, handle: str) -> Job:
        found = self._jobs.get(handle)
        if found is None:
            known = ", ".join(self._jobs) or "none"
            raise InvalidArgument(
                f"no execution has handle {handle!r} (known handles: {known}).",
                hint="Handles come from execute results; finished ones are kept for the last 50 "
                "runs (fewer when they printed over 2,000,000 characters in all).",
            )
        return found

    def running(self, rel: str) -> list[Job]:
        """The jobs of notebook ``rel`` that have not ended."""
        return [j for j in self._jobs.values() if j.path == rel and not j.done.is_set()]

    def busy_paths(self) -> set[str]:
        """The notebooks that have a job that has not ended."""
        return {j.path for j in self._jobs.values() if not j.done.is_set()}

    def history(self, rel: str) -> list[dict[str, Any]]:
        """What ran in a notebook (oldest first, at most ``HISTORY_DEPTH`` cell runs): each
        cell run's job, cell, status, start time, duration and execution count."""
        entries = list(self._ran.get(rel, ()))
        for job in self._jobs.values():
            if job.path == rel:
                entries.extend(history_entries(job))
        return entries[-HISTORY_DEPTH:]


def history_entries(job: Job) -> list[dict[str, Any]]:
    """The cell runs of a job as history entries (queued cells are left out)."""
    started = time.time() - (time.monotonic() - job.started)
    entries: list[dict[str, Any]] = []
    for cell in job.cells:
        if cell.status == "queued":
            continue
        entry: dict[str, Any] = {
            "job": job.handle,
            "cell": cell.id,
            "index": cell.index if cell.id is not None else None,
            "code": cell.source.split("\n", 1)[0][:120],
            "status": cell.status,
            "started": utc_iso(started),
            "seconds": round(cell.seconds, 3),
            "kernel": job.kernel,
        }
        if cell.execution_count is not None:
            entry["execution_count"] = cell.execution_count
        if cell.message:
            entry["message"] = cell.message[:300]
        entries.append(entry)
        started += cell.seconds
    return entries
