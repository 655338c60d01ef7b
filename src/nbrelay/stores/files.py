"""The embedded default store: ``.ipynb`` files under a root folder.

Every file operation goes through ``RootDir`` (``rootdir.py``: confinement to the root, reads
and atomic, durable writes by descriptors, cross-process locks, temp-file sweeping); files of
other kinds, kernels' folders and state files are ``FileDocuments`` (``file_documents.py``).
What this module adds:

* **No lost edits.** An in-process lock plus ``fcntl.flock`` on a per-notebook lock file
  serialise writers across processes; the file's bytes are re-hashed just before the replace, so
  a change made by someone else is reported as a conflict, never overwritten.
* **Cheap reads and edits.** Parsed notebooks are cached and revalidated by ``stat`` (size,
  mtime, ctime, inode, device): an unchanged notebook is never re-read or re-parsed, and an edit
  hashes only the cells it wrote (``notebook.serialize``). A stat proves a file unchanged only
  when no write can have kept its key: nbrelay stamps the files it writes with a nanosecond mtime
  that a later write cannot hit (it gets the clock's tick, or a later time), and trusts the stat
  of a file written by others once its mtime is further past than time stamps are coarse (50 ms;
  2.1 s where they are whole milliseconds or seconds). Until then, and where the stamp did not
  hold, the file is re-hashed, as when its stat changed.
"""

from __future__ import annotations

import builtins
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import anyio
import anyio.to_thread

from nbrelay.caller import Caller
from nbrelay.errors import NotebookExists, PathError, StoreError, act
from nbrelay.notebook import nblr, validate
from nbrelay.notebook.model import Notebook, parse, serialize, version_of
from nbrelay.notebook.serialize import CellBytes, Work, splice
from nbrelay.options import OPTION_BY_NAME
from nbrelay.process import map_big_buffers, release_memory
from nbrelay.stores.base import Capabilities, EditOutcome, Entry, NotebookStore, Planner, Snapshot
from nbrelay.stores.editing import LockedEdits, Readers
from nbrelay.stores.file_documents import STATE_FOLDER, FileDocuments
from nbrelay.stores.lru import BytesLRU
from nbrelay.stores.paths import Glob
from nbrelay.stores.rootdir import RootDir, StatKey, stat_key
from nbrelay.stores.shelf import Shelf

_TRIM_AFTER = 64 * 1024  # bytes of cells encoded after which the C heap is trimmed

# Bytes of notebooks kept parsed (an edited one counts twice: its cells' bytes are kept too);
# parsed, a notebook of many small cells takes over twice its bytes of memory. --cache-mb.
CACHE_BYTES = OPTION_BY_NAME["cache_mb"].default * 2**20

_SETTLED_NS = 50_000_000  # a file's stat proves it unchanged once its mtime is this far past…
_SETTLED_COARSE_NS = 2_100_000_000  # …or this far, where time stamps are whole ms or seconds


@dataclass
class _Cached:
    key: StatKey
    snapshot: Snapshot
    proven: bool  # the key alone proves the file unchanged while the stat keeps it (see below)


def _proves(st: os.stat_result, stamped: int | None = None) -> bool:
    """Whether a later write of the file must change its stat key.

    A write sets the mtime to the clock's coarse tick (or a finer, later time); a write within
    the tick of the last one may keep the key of a same-size file. So the key proves the content
    when the mtime is nbrelay's own nanosecond ``stamped`` time (kept exactly by the file system:
    no tick falls on it), or when the mtime is further past than the time stamps' granularity.
    """
    mtime = st.st_mtime_ns
    if stamped is not None and mtime == stamped and mtime % 1_000_000:
        return True
    coarse = mtime % 1_000_000 == 0
    return time.time_ns() - mtime > (_SETTLED_COARSE_NS if coarse else _SETTLED_NS)


class FileStore(LockedEdits, NotebookStore):
    """Notebooks as files under ``root`` (see the module docstring for the guarantees)."""

    mode = "files"

    def __init__(
        self,
        root: Path,
        *,
        lock_dir: Path | None = None,
        lock_timeout: float = 10.0,
        shared_state: bool = False,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        """``shared_state``: what each reader last read is kept on disk for every process on
        the root (replicas), not only in this process's memory. ``cache_bytes``: the notebooks
        kept parsed, least recently used dropped first (see ``CACHE_BYTES``)."""
        self.fs = RootDir(root, lock_dir=lock_dir, lock_timeout=lock_timeout)
        self.root = self.fs.root
        self.documents = FileDocuments(self.fs, self)
        self.open_kernel_folder = self.documents.open_kernel_folder  # the local kernels' binding
        self._cache: BytesLRU[_Cached] = BytesLRU(cache_bytes, self._weigh, self._evicted)
        self.work: Work = self.fs.work  # cells encoded and bytes hashed, for the tests to count
        self._seen = Readers(Shelf(self.state_key) if shared_state else None)
        # The last written notebook's cells as serialised (by cell identity), so that an edit
        # re-encodes only the cells it made; see _serialize.
        self._cell_bytes: dict[str, CellBytes] = {}

    def _weigh(self, real: str, cached: _Cached) -> int:
        size = cached.snapshot.size or 0
        return 2 * size if real in self._cell_bytes else size

    def _evicted(self, real: str) -> None:
        self._cell_bytes.pop(real, None)
        self._seen.let_go(real)

    @property
    def capabilities(self) -> Capabilities:
        """Files on this machine, any document under the root; no live sessions."""
        return Capabilities(
            files=self.documents, documents=self.documents, state_key=self.state_key
        )

    @property
    def state_key(self) -> str:
        """Names the root for the state the processes on it share (``Capabilities``)."""
        return f"file:{self.root}"

    # -- paths ----------------------------------------------------------------------------

    def relative(self, path: str) -> str:
        rel, _ = self.fs.resolve(path)
        return rel

    # -- reading --------------------------------------------------------------------------

    def _snapshot(self, rel: str, real: str) -> Snapshot:
        """The current snapshot: the cached one while the file's stat proves it unchanged, else
        the bytes re-read and re-hashed (and re-parsed if they changed)."""
        cached = self._unchanged(real)
        if cached is not None:
            return cached
        cached_entry = self._cache.get(real)
        raw, st = self.fs.read_bytes(real, rel)
        self.work.bytes_hashed += len(raw)
        version = version_of(raw)
        if cached_entry is not None and cached_entry.snapshot.version == version:
            snap = replace(cached_entry.snapshot, size=st.st_size, modified=st.st_mtime)
        else:
            nb = parse(nblr.decode(rel, raw), name=rel)
            found = tuple(validate.problems(nb))
            snap = Snapshot(
                path=rel,
                notebook=nb,
                version=version,
                size=st.st_size,
                modified=st.st_mtime,
                problems=found,
                notes=tuple(nb.problems),
            )
            release_memory()
        self._cache[real] = _Cached(stat_key(st), snap, _proves(st))
        return snap

    async def load(self, path: str, caller: Caller) -> Snapshot:
        rel, real = self.fs.resolve(path)
        self.fs.sweep_soon(real)
        async with self.lock(real):
            snap = self._unchanged(real)  # the common case needs one stat, not a thread
            if snap is None:
                snap = await anyio.to_thread.run_sync(self._snapshot, rel, real)
        return await self._seen.observe(real, caller, snap)

    async def peek(self, path: str, caller: Caller) -> Snapshot:
        rel, real = self.fs.resolve(path)
        snap = self._unchanged(real)
        if snap is None:
            snap = await anyio.to_thread.run_sync(self._snapshot, rel, real)
        return snap

    async def scan(self, path: str, caller: Caller) -> Snapshot:
        """The notebook for a pass over many (a search): the cached snapshot if it is current,
        else the file parsed and not kept, so one search of a large folder does not hold every
        notebook in memory afterwards."""
        rel, real = self.fs.resolve(path)
        snap = self._unchanged(real)
        if snap is None:
            snap = await anyio.to_thread.run_sync(self._parse_once, rel, real)
        return snap

    def _parse_once(self, rel: str, real: str) -> Snapshot:
        raw, st = self.fs.read_bytes(real, rel)
        nb = parse(nblr.decode(rel, raw), name=rel)
        return Snapshot(rel, nb, version_of(raw), size=st.st_size, modified=st.st_mtime)

    def _unchanged(self, real: str) -> Snapshot | None:
        """The cached snapshot, if the file's stat proves it has not changed since."""
        cached = self._cache.get(real)
        if cached is None or not cached.proven:
            return None
        try:
            st = os.stat(real, follow_symlinks=False)
        except OSError:
            return None
        return cached.snapshot if stat_key(st) == cached.key else None

    async def list(self, folder: str, caller: Caller, *, recursive: bool) -> builtins.list[Entry]:
        return await self.find(folder, caller, recursive=recursive)

    async def find(
        self,
        folder: str,
        caller: Caller,
        *,
        recursive: bool = True,
        glob: Glob | None = None,
        limit: int | None = None,
    ) -> builtins.list[Entry]:
        _, real = self.fs.folder(folder)
        return await anyio.to_thread.run_sync(self._find_sync, real, recursive, glob, limit)

    def _find_sync(
        self, real: str, recursive: bool, glob: Glob | None, limit: int | None
    ) -> builtins.list[Entry]:
        """Walk the folder by descriptors (``os.fwalk`` from the folder's descriptor, never into
        a symlink), so a folder swapped for a symlink is neither listed nor swept. Folders the
        glob cannot match in are not entered, names it does not match are not looked at, and
        the walk stops at ``limit`` notebooks."""
        found: builtins.list[Entry] = []
        try:
            top = self.fs.open_folder(real)
        except (PathError, StoreError):
            return found
        try:
            # Leaving the loop early drops the walk, which closes its folders' descriptors.
            for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=top):
                folder = os.path.normpath(os.path.join(real, dirpath))
                here = os.path.relpath(folder, self.fs.root_s).replace(os.sep, "/")
                here = "" if here == "." else here + "/"
                dirnames[:] = (
                    sorted(
                        d
                        for d in dirnames
                        if not d.startswith(".") and (glob is None or glob.enter(here + d))
                    )
                    if recursive
                    else []
                )
                self.fs.sweep_fd(dfd, folder)
                for name in sorted(filenames):
                    if name.startswith(".") or not name.endswith(".ipynb"):
                        continue
                    rel_path = here + name
                    if glob is not None and not glob.match(rel_path):
                        continue
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):  # a link inside the root: its target's
                            _, target = self.fs.resolve(rel_path)
                            st = self.fs.lstat(target)
                    except (PathError, StoreError, OSError):
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append(Entry(rel_path, st.st_size, st.st_mtime))
                        if limit is not None and len(found) >= limit:
                            return found
        finally:
            os.close(top)
        return found

    # -- temp files -----------------------------------------------------------------------

    # -- writing --------------------------------------------------------------------------

    async def create(
        self, path: str, caller: Caller, notebook: Notebook, *, overwrite: bool
    ) -> Snapshot:
        rel, real = self.fs.resolve(path)
        validate.check_notebook(notebook)
        data = nblr.dump(notebook, path=rel) if nblr.is_nblr(rel) else serialize(notebook)
        async with self.lock(real):
            snap = await anyio.to_thread.run_sync(self._create_sync, rel, real, data, overwrite)
        return await self._seen.observe(real, caller, snap)

    def _create_sync(self, rel: str, real: str, data: bytes, overwrite: bool) -> Snapshot:
        return self._remember(rel, real, data, self.put_sync(rel, real, data, overwrite))

    def put_sync(
        self, rel: str, real: str, data: bytes, overwrite: bool, *, suffix: str = ".ipynb"
    ) -> os.stat_result:
        """Write a whole file, making its folders; an existing file is replaced only when
        ``overwrite`` is given, and only if it did not change while being replaced."""
        os.close(self.fs.open_folder(os.path.dirname(real), create=True))
        self.fs.resolve(rel, suffix=suffix)  # the folders just made must not change where it leads
        with self.fs.flock(real):
            return self.fs.write_atomic(
                real, data, expect=self._replacing(rel, real, overwrite), mtime_ns=time.time_ns()
            )

    def _replacing(self, rel: str, real: str, overwrite: bool) -> str | None:
        """The version of the file a write is about to replace (None: there is none); refused
        unless ``overwrite``. Called with the file's lock held."""
        if not self.fs.lexists(real):
            return None
        if not overwrite:
            raise NotebookExists(f"{rel!r} already exists.", hint=act("exists"))
        raw, _ = self.fs.read_bytes(real, rel)
        self.work.bytes_hashed += len(raw)
        return version_of(raw)

    def _remember(self, rel: str, real: str, data: bytes, st: os.stat_result) -> Snapshot:
        nb = parse(nblr.decode(rel, data), name=rel)
        snap = Snapshot(
            rel,
            nb,
            version_of(data),
            size=st.st_size,
            modified=st.st_mtime,
            notes=tuple(nb.problems),
        )
        self._cache[real] = _Cached(stat_key(st), snap, _proves(st))
        return snap

    async def _edit_target(self, path: str, caller: Caller) -> tuple[str, str]:
        """Notebooks are locked by real path (two links to one file share its lock)."""
        rel, real = self.fs.resolve(path)
        self.fs.sweep_soon(real)
        return rel, real

    async def _edit_locked(
        self,
        rel: str,
        key: str,
        caller: Caller,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        outcome = await anyio.to_thread.run_sync(
            self._edit_sync, rel, key, caller, planner, expected, guard_positions
        )
        await self._seen.remember(key, caller, outcome.after)
        return outcome

    def _edit_sync(
        self,
        rel: str,
        real: str,
        caller: Caller,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        with self.fs.flock(real):
            before = self._snapshot(rel, real)
            seen = self._cache.get(real)  # None if another notebook's read evicted it since
            fix = "Fix the file by hand or restore it from version control, then retry."
            plan, after_nb, outside = self._seen.plan(
                real, caller, before, planner, expected, guard_positions, fix
            )
            if after_nb is None:
                return EditOutcome(before, before, plan, changed_outside=outside)
            data, version = self._serialize(rel, real, after_nb)
            stamp = time.time_ns()
            st = self.fs.write_atomic(
                real,
                data,
                expect=before.version,
                expect_key=seen.key if seen is not None and seen.proven else None,
                mtime_ns=stamp,
            )
            after = Snapshot(rel, after_nb, version, size=st.st_size, modified=st.st_mtime)
            self._cache[real] = _Cached(stat_key(st), after, _proves(st, stamp))
            return EditOutcome(before, after, plan, changed_outside=outside)

    def _serialize(
        self, rel: str, real: str, nb: Notebook
    ) -> tuple[Sequence[bytes | memoryview], str]:
        """``serialize(nb)`` byte for byte and its version, re-encoding and re-hashing only the
        cells written since the last save of this file (see :mod:`nbrelay.notebook.serialize`)."""
        if nblr.is_nblr(real):
            data = nblr.dump(nb, path=rel)
            self.work.bytes_hashed += len(data)
            return [data], version_of(data)
        encoded = self.work.bytes_encoded
        spliced = splice(nb, self._cell_bytes.get(real), self.work)
        self._cell_bytes[real] = spliced.known
        if self.work.bytes_encoded - encoded > _TRIM_AFTER:  # encoding makes many small strings
            release_memory()
        return spliced.parts, spliced.version

    # -- whole-file operations ------------------------------------------------------------

    async def remove(self, path: str, caller: Caller) -> None:
        rel, real = self.fs.resolve(path)
        async with self.lock(real):
            await anyio.to_thread.run_sync(self._remove_sync, rel, real)

    def _remove_sync(self, rel: str, real: str) -> None:
        with self.fs.flock(real):
            self.fs.read_bytes(real, rel)  # exists, regular, not a symlink swap
            self.fs.unlink(real)
            self.forget(real)

    async def rename(
        self, src: str, dst: str, caller: Caller, *, overwrite: bool, keep_source: bool
    ) -> Snapshot:
        src_rel, src_real = self.fs.resolve(src)
        dst_rel, dst_real = self.fs.resolve(dst)
        if src_real == dst_real:
            raise PathError(f"{src!r} and {dst!r} are the same file.")
        first, second = sorted([src_real, dst_real])
        async with self.lock(first), self.lock(second):
            snap = await anyio.to_thread.run_sync(
                self.rename_sync, src_rel, src_real, dst_rel, dst_real, overwrite, keep_source
            )
        return await self._seen.observe(dst_real, caller, cast(Snapshot, snap))

    def rename_sync(
        self,
        src_rel: str,
        src_real: str,
        dst_rel: str,
        dst_real: str,
        overwrite: bool,
        keep_source: bool,
        notebook: bool = True,
    ) -> Snapshot | None:
        """Move or copy a file; a notebook (checked to parse) is cached and returned."""
        first, second = sorted([src_real, dst_real])
        with self.fs.flock(first), self.fs.flock(second):
            raw, _ = self.fs.read_bytes(src_real, src_rel)
            if notebook:
                nb = parse(nblr.decode(src_rel, raw), name=src_rel)
                if nblr.is_nblr(dst_rel):  # .nblr metadata names where the file is
                    raw = nblr.dump(nb, path=dst_rel)
                elif nblr.is_nblr(src_rel):  # .nblr -> .ipynb
                    raw = serialize(nb)
            expect = self._replacing(dst_rel, dst_real, overwrite)
            os.close(self.fs.open_folder(os.path.dirname(dst_real), create=True))
            st = self.fs.write_atomic(dst_real, raw, expect=expect)
            if not keep_source:
                self.fs.unlink(src_real)
                self.forget(src_real)
            if not notebook:
                self._cache.pop(dst_real, None)
                return None
            return self._remember(dst_rel, dst_real, raw, st)

    def forget(self, real: str) -> None:
        """A file is gone: drop its cached snapshot and what readers last saw of it."""
        self._cache.pop(real, None)
        self._seen.forget_sync(real)

    def drop_cached(self, real: str) -> None:
        """A file was written by other means than an edit: its cached snapshot is stale."""
        self._cache.pop(real, None)

    async def aclose(self) -> None:
        self._cache.clear()
        self._cell_bytes.clear()


__all__ = ["STATE_FOLDER", "FileStore", "map_big_buffers", "release_memory"]
