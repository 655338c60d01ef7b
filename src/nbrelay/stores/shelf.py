"""What each reader last read of each notebook, on disk, for every nbrelay process on one root.

Replicas behind one address serve a client in turns: the edit it sends to one must be checked
against what it read through the other (the stale-edit guard: the version, the cell order, the
sources a whole-source rewrite is merged with). ``Shelf`` keeps these in the root's private
state folder (``seen/<hash of the root>`` in nbrelay's runtime folder, next to the run journal),
one pair of files per reader and notebook named by a digest of both: ``<digest>.v`` (the
version and cell order, small) and ``<digest>.s`` (the cells' sources, written only when the
version changed). Each file is written under an ``flock`` of the ``.v`` file; a file cut by a
crash reads as nothing seen (the guard then errs on the safe side). Pairs untouched for
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nbrelay import runtime
from nbrelay.errors import NbrelayError

_SWEEP_EVERY = 3600.0
_PAIR = (".v", ".s")


@dataclass(frozen=True)
class Seen:
    version: str | None
    order: tuple[str, ...] | None
    sources: dict[str, str] | None


def _digest(text: str, n: int = 40) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


class Shelf:
    """See the module docstring; ``key`` names the root."""

    def __init__(self, key: str, *, folder: Path | None = None) -> None:
        self._parts = ("seen", _digest(key, 32))
        self._base = folder
        self._swept = 0.0

    @contextlib.contextmanager
    def _files(self, reader: str, path: str, *, write: bool) -> Iterator[tuple[int, int] | None]:
        name = _digest(f"{reader}\0{path}")
        flags = os.O_RDWR | os.O_CREAT if write else os.O_RDONLY
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            if write:
                self._sweep(dfd)
            try:
                vfd = runtime.open_file(dfd, name + ".v", flags, name + ".v")
            except NbrelayError:
                if write:
                    raise
                yield None
                return
            try:
                sfd = runtime.open_file(dfd, name + ".s", flags, name + ".s")
            except NbrelayError:
                os.close(vfd)
                if write:
                    raise
                yield None
                return
        try:
            fcntl.flock(vfd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            yield vfd, sfd
        finally:
            os.close(sfd)
            os.close(vfd)

    @staticmethod
    def _load(fd: int) -> object:
        raw = os.pread(fd, os.fstat(fd).st_size, 0)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    @staticmethod
    def _store(fd: int, value: object) -> None:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))

    def get(self, reader: str, path: str, *, sources: bool = True) -> Seen | None:
        """What ``reader`` last read of ``path`` (None: nothing known)."""
        with self._files(reader, path, write=False) as fds:
            if fds is None:
                return None
            head = self._load(fds[0])
            if not isinstance(head, dict) or head.get("path") != path:
                return None
            read = self._load(fds[1]) if sources else None
        version = head.get("version")
        order = head.get("order")
        good = isinstance(read, dict) and read.get("version") == version
        return Seen(
            version if isinstance(version, str) else None,
            tuple(order) if isinstance(order, list) else None,
            read.get("sources") if good and isinstance(read, dict) else None,
        )

    def put(
        self,
        reader: str,
        path: str,
        version: str,
        order: Sequence[str] | None,
        sources: dict[str, str],
    ) -> None:
        """Remember what ``reader`` read of ``path`` now."""
        with self._files(reader, path, write=True) as fds:
            if fds is None:
                return
            head = self._load(fds[0])
            listed = list(order) if order is not None else None
            if isinstance(head, dict) and head.get("version") == version:
                if head.get("order") == listed or listed is None:
                    os.utime(fds[0])  # still used
                    return
            else:
                self._store(fds[1], {"version": version, "sources": sources})
            kept_order = listed if listed is not None else None
            self._store(fds[0], {"path": path, "version": version, "order": kept_order})

    def forget(self, path: str) -> None:
        """Forget every reader's read of ``path`` (the notebook went away)."""
        with runtime.folder_fd(self._base, *self._parts) as dfd:
            for base, fd in runtime.groups(dfd, _PAIR[0]):
                head = self._load(fd)
                if isinstance(head, dict) and head.get("path") == path:
                    runtime.remove_group(dfd, base, _PAIR)

    def _sweep(self, dfd: int) -> None:
        if time.time() - self._swept >= _SWEEP_EVERY:
            self._swept = time.time()
            runtime.expire_groups(dfd, _PAIR)
