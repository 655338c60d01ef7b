"""The embedded default store: ``.ipynb`` files under a root folder.

Every file operation goes through ``RootDir`` (``rootdir.py``): path confinement, reads and
atomic writes by descriptors from the root, cross-process locks, temp-file sweeping. This module
is what a notebook store adds: the stat-validated cache, the edit path, documents, state files.

Guarantees:

* **Confinement.** Every path is checked before it is used: no ``..``, no hidden component, no
  backslash or NUL, and the resolved real path (symlinks followed) must stay inside the real root
  (compared by path components, so ``/r-evil`` is not inside ``/r``). Files are opened with
  ``O_NOFOLLOW`` and must be regular files.
* **Atomic, durable writes.** A unique hidden temp file in the same folder, fsync, ``os.replace``,
  fsync of the folder; the file's mode is kept. A crash leaves the old or the new notebook.
* **No lost edits.** An in-process lock plus ``fcntl.flock`` on a per-notebook lock file
  serialise writers across processes; the file's bytes are re-hashed just before the replace, so
  a change made by someone else is reported as a conflict, never overwritten.
* **Cheap reads.** Parsed notebooks are cached and revalidated by ``stat`` (size, mtime, ctime,
  inode): an unchanged notebook is never re-read or re-parsed.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import mimetypes
import os
import posixpath
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import cast

import anyio
import anyio.to_thread

from nbrelay.errors import (
    InvalidArgument,
    NotebookExists,
    NotebookNotFound,
    PathError,
    StoreError,
    act,
)
from nbrelay.notebook import nblr, validate
from nbrelay.notebook.model import Notebook, parse, serialize, version_of
from nbrelay.notebook.serialize import CellBytes, splice
from nbrelay.process import map_big_buffers, release_memory
from nbrelay.stores.base import (
    Capabilities,
    Document,
    EditOutcome,
    Entry,
    LastSeen,
    NotebookStore,
    Planner,
    Snapshot,
    check_edit,
    plan_edit,
)
from nbrelay.stores.rootdir import RootDir, is_inside

STATE_FOLDER = ".nbrelay-state"  # kernel states saved next to notebooks (hidden, never served)
_TRIM_AFTER = 64 * 1024  # bytes of cells encoded after which the C heap is trimmed

StatKey = tuple[int, int, int, int, int]


@dataclass
class _Cached:
    key: StatKey
    snapshot: Snapshot


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class FileStore(NotebookStore):
    """Notebooks as files under ``root`` (see the module docstring for the guarantees)."""

    mode = "files"

    def __init__(
        self, root: Path, *, lock_dir: Path | None = None, lock_timeout: float = 10.0
    ) -> None:
        self.fs = RootDir(root, lock_dir=lock_dir, lock_timeout=lock_timeout)
        self.root = self.fs.root
        self._locks: dict[str, anyio.Lock] = {}
        self._cache: dict[str, _Cached] = {}
        self._known: LastSeen[str] = LastSeen()
        self._read: LastSeen[dict[str, str]] = LastSeen()  # each cell's source as last read
        # The last written notebook's cells as serialised (by cell identity), so that an edit
        # re-encodes only the cells it made; see _serialize.
        self._cell_bytes: dict[str, CellBytes] = {}

    @property
    def capabilities(self) -> Capabilities:
        """Files on this machine, any document under the root; no live sessions."""
        return Capabilities(files=self, documents=self)

    # -- paths ----------------------------------------------------------------------------

    def relative(self, path: str) -> str:
        rel, _ = self.fs.resolve(path)
        return rel

    # -- locking --------------------------------------------------------------------------

    def _lock(self, real: str) -> anyio.Lock:
        lock = self._locks.get(real)
        if lock is None:
            lock = self._locks[real] = anyio.Lock()
        return lock

    # -- reading --------------------------------------------------------------------------

    def _snapshot(self, rel: str, real: str, *, fresh: bool = False) -> Snapshot:
        """The current snapshot; with ``fresh`` the bytes are always re-read and re-hashed."""
        cached = self._cache.get(real)
        if not fresh and cached is not None:
            try:
                st = os.stat(real, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and _stat_key(st) == cached.key:
                return cached.snapshot
        raw, st = self.fs.read_bytes(real, rel)
        version = version_of(raw)
        if cached is not None and cached.snapshot.version == version:
            snap = replace(cached.snapshot, size=st.st_size, modified=st.st_mtime)
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
        self._cache[real] = _Cached(_stat_key(st), snap)
        return snap

    def _observe(self, real: str, snap: Snapshot) -> Snapshot:
        """Record that the agent has seen ``snap``; flag it if someone else changed the file."""
        known = self._known.get(real)
        self._known[real] = snap.version
        self._read[real] = snap.notebook.sources()
        changed = known is not None and known != snap.version
        return replace(snap, changed_outside=changed) if changed else snap

    async def load(self, path: str) -> Snapshot:
        rel, real = self.fs.resolve(path)
        self.fs.sweep_soon(real)
        async with self._lock(real):
            snap = self._unchanged(real)  # the common case needs one stat, not a thread
            if snap is None:
                snap = await anyio.to_thread.run_sync(self._snapshot, rel, real)
        return self._observe(real, snap)

    async def peek(self, path: str) -> Snapshot:
        rel, real = self.fs.resolve(path)
        snap = self._unchanged(real)
        if snap is None:
            snap = await anyio.to_thread.run_sync(self._snapshot, rel, real)
        return snap

    def _unchanged(self, real: str) -> Snapshot | None:
        """The cached snapshot, if the file's stat says it has not changed since."""
        cached = self._cache.get(real)
        if cached is None:
            return None
        try:
            st = os.stat(real, follow_symlinks=False)
        except OSError:
            return None
        return cached.snapshot if _stat_key(st) == cached.key else None

    async def list(self, folder: str, *, recursive: bool) -> builtins.list[Entry]:
        rel, real = self.fs.folder(folder)
        return await anyio.to_thread.run_sync(self._list_sync, rel, real, recursive)

    def _list_sync(self, rel: str, real: str, recursive: bool) -> builtins.list[Entry]:
        """Walk the folder by descriptors (``os.fwalk`` from the folder's descriptor, never into
        a symlink), so a folder swapped for a symlink is neither listed nor swept."""
        found: builtins.list[Entry] = []
        try:
            top = self.fs.open_folder(real)
        except (PathError, StoreError):
            return found
        try:
            for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=top):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                if not recursive:
                    dirnames[:] = []
                folder = os.path.normpath(os.path.join(real, dirpath))
                self.fs.sweep_fd(dfd, folder)
                for name in sorted(filenames):
                    if name.startswith(".") or not name.endswith(".ipynb"):
                        continue
                    full = os.path.join(folder, name)
                    rel_path = os.path.relpath(full, self.fs.root_s).replace(os.sep, "/")
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):  # a link inside the root: its target's
                            _, target = self.fs.resolve(rel_path)
                            st = self.fs.lstat(target)
                    except (PathError, StoreError, OSError):
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append(Entry(rel_path, st.st_size, st.st_mtime))
        finally:
            os.close(top)
        return found

    # -- temp files -----------------------------------------------------------------------

    # -- writing --------------------------------------------------------------------------

    async def create(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        rel, real = self.fs.resolve(path)
        validate.check_notebook(notebook)
        data = nblr.dump(notebook) if nblr.is_nblr(rel) else serialize(notebook)
        async with self._lock(real):
            snap = await anyio.to_thread.run_sync(self._create_sync, rel, real, data, overwrite)
        return self._observe(real, snap)

    def _create_sync(self, rel: str, real: str, data: bytes, overwrite: bool) -> Snapshot:
        return self._remember(rel, real, data, self._put_sync(rel, real, data, overwrite))

    def _put_sync(
        self, rel: str, real: str, data: bytes, overwrite: bool, *, suffix: str = ".ipynb"
    ) -> os.stat_result:
        """Write a whole file, making its folders; an existing file is replaced only when
        ``overwrite`` is given, and only if it did not change while being replaced."""
        os.close(self.fs.open_folder(os.path.dirname(real), create=True))
        self.fs.resolve(rel, suffix=suffix)  # the folders just made must not change where it leads
        with self.fs.flock(real):
            expect: str | None = None
            if self.fs.lexists(real):
                if not overwrite:
                    raise NotebookExists(
                        f"{rel!r} already exists.",
                        hint=act("exists"),
                    )
                expect = self._snapshot_version(real, rel)
            return self.fs.write_atomic(real, data, expect=expect)

    def _snapshot_version(self, real: str, rel: str) -> str:
        raw, _ = self.fs.read_bytes(real, rel)
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
        self._cache[real] = _Cached(_stat_key(st), snap)
        return snap

    async def edit(
        self,
        path: str,
        planner: Planner,
        *,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        rel, real = self.fs.resolve(path)
        self.fs.sweep_soon(real)
        async with self._lock(real):
            outcome = await anyio.to_thread.run_sync(
                self._edit_sync, rel, real, planner, expected_version, guard_positions
            )
        self._known[real] = outcome.after.version
        self._read[real] = outcome.after.notebook.sources()
        return outcome

    def _edit_sync(
        self,
        rel: str,
        real: str,
        planner: Planner,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        with self.fs.flock(real):
            before = self._snapshot(rel, real, fresh=True)
            outside = check_edit(
                rel,
                before,
                expected_version,
                self._known.get(real),
                guard_positions=guard_positions,
            )
            plan, after_nb = plan_edit(
                before,
                planner,
                fix_hint="Fix the file by hand or restore it from version control, then retry.",
                read=self._read.get(real),
            )
            if after_nb is None:
                return EditOutcome(before, before, plan, changed_outside=outside)
            data = self._serialize(real, after_nb)
            st = self.fs.write_atomic(real, data, expect=before.version)
            after = Snapshot(rel, after_nb, version_of(data), size=st.st_size, modified=st.st_mtime)
            self._cache[real] = _Cached(_stat_key(st), after)
            return EditOutcome(before, after, plan, changed_outside=outside)

    def _serialize(self, real: str, nb: Notebook) -> bytes:
        """``serialize(nb)`` byte for byte, re-encoding only the cells written since the last
        save of this file (see :mod:`nbrelay.notebook.serialize`)."""
        if nblr.is_nblr(real):
            return nblr.dump(nb)
        data, self._cell_bytes[real], encoded = splice(nb, self._cell_bytes.get(real, {}))
        if encoded > _TRIM_AFTER:  # encoding goes through many small strings: give them back
            release_memory()
        return data

    # -- whole-file operations ------------------------------------------------------------

    async def remove(self, path: str) -> None:
        rel, real = self.fs.resolve(path)
        async with self._lock(real):
            await anyio.to_thread.run_sync(self._remove_sync, rel, real)

    def _remove_sync(self, rel: str, real: str) -> None:
        with self.fs.flock(real):
            self.fs.read_bytes(real, rel)  # exists, regular, not a symlink swap
            self.fs.unlink(real)
            self._cache.pop(real, None)
            self._known.pop(real, None)
            self._read.pop(real, None)

    async def rename(self, src: str, dst: str, *, overwrite: bool, keep_source: bool) -> Snapshot:
        src_rel, src_real = self.fs.resolve(src)
        dst_rel, dst_real = self.fs.resolve(dst)
        if src_real == dst_real:
            raise PathError(f"{src!r} and {dst!r} are the same file.")
        first, second = sorted([src_real, dst_real])
        async with self._lock(first), self._lock(second):
            snap = await anyio.to_thread.run_sync(
                self._rename_sync, src_rel, src_real, dst_rel, dst_real, overwrite, keep_source
            )
        return self._observe(dst_real, cast(Snapshot, snap))

    def _rename_sync(
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
                if nblr.is_nblr(src_rel) != nblr.is_nblr(dst_rel):  # .ipynb <-> .nblr
                    raw = nblr.dump(nb) if nblr.is_nblr(dst_rel) else serialize(nb)
            expect: str | None = None
            if self.fs.lexists(dst_real):
                if not overwrite:
                    raise NotebookExists(
                        f"{dst_rel!r} already exists.",
                        hint=act("exists"),
                    )
                expect = self._snapshot_version(dst_real, dst_rel)
            os.close(self.fs.open_folder(os.path.dirname(dst_real), create=True))
            st = self.fs.write_atomic(dst_real, raw, expect=expect)
            if not keep_source:
                self.fs.unlink(src_real)
                self._cache.pop(src_real, None)
                self._known.pop(src_real, None)
                self._read.pop(src_real, None)
            if not notebook:
                self._cache.pop(dst_real, None)
                return None
            return self._remember(dst_rel, dst_real, raw, st)

    # -- other files under the root (exports, imports) -----------------------------------

    async def read_file(self, path: str) -> tuple[str, bytes]:
        """Read any regular file under the root, with the notebook path rules (no suffix rule)."""
        rel, real = self.fs.resolve(path, suffix="")
        raw, _ = await anyio.to_thread.run_sync(self.fs.read_bytes, real, rel)
        return rel, raw

    def file_path(self, path: str) -> str:
        """Validate a non-notebook file path under the root; return its relative form."""
        rel, _ = self.fs.resolve(path, suffix="")
        return rel

    async def write_files(self, files: Mapping[str, bytes], *, overwrite: bool) -> None:
        """Write files under the root, each atomically; if one exists and not ``overwrite``,
        nothing is written."""
        targets = [(*self.fs.resolve(p, suffix=""), data) for p, data in files.items()]
        if not overwrite:
            for rel, real, _ in targets:
                if await anyio.to_thread.run_sync(self.fs.lexists, real):
                    raise NotebookExists(
                        f"{rel!r} already exists.",
                        hint=act("exists"),
                    )
        for rel, real, data in targets:
            async with self._lock(real):
                await anyio.to_thread.run_sync(self._write_file_sync, rel, real, data, overwrite)

    def _write_file_sync(self, rel: str, real: str, data: bytes, overwrite: bool) -> None:
        self._put_sync(rel, real, data, overwrite, suffix="")
        self._cache.pop(real, None)

    # -- documents: any file or folder under the root ------------------------------------

    def _document(self, rel: str, st: os.stat_result, writable: bool) -> Document:
        name = PurePosixPath(rel).name
        created = getattr(st, "st_birthtime", st.st_ctime)
        if stat.S_ISDIR(st.st_mode):
            return Document(rel, name, "directory", None, created, st.st_mtime, writable)
        if name.endswith(".ipynb"):
            return Document(rel, name, "notebook", st.st_size, created, st.st_mtime, writable)
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Document(rel, name, "file", st.st_size, created, st.st_mtime, writable, mime)

    def _stat_document(self, rel: str, real: str) -> Document:
        try:
            dfd = self.fs.open_folder(os.path.dirname(real))
        except NotebookNotFound as exc:
            raise NotebookNotFound(f"{rel!r} does not exist.", hint=act("missing")) from exc
        try:
            return self._document_at(dfd, os.path.basename(real), rel)
        finally:
            os.close(dfd)

    def _document_at(self, dfd: int, name: str, rel: str) -> Document:
        """The document ``name`` in an open folder (its final name never followed)."""
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotebookNotFound(f"{rel!r} does not exist.", hint=act("missing")) from exc
        if stat.S_ISLNK(st.st_mode):
            raise PathError(f"{rel!r} changed into a symlink while being opened.")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise PathError(f"{rel!r} is not a regular file or folder.")
        writable = os.access(name, os.W_OK, dir_fd=dfd, follow_symlinks=False)
        return self._document(rel, st, writable)

    async def list_documents(self, folder: str) -> builtins.list[Document]:
        rel, real = self.fs.folder(folder)
        return await anyio.to_thread.run_sync(self._list_documents_sync, rel, real)

    def _list_documents_sync(self, rel: str, real: str) -> builtins.list[Document]:
        found: builtins.list[Document] = []
        try:
            dfd = self.fs.open_folder(real)
        except NotebookNotFound as exc:
            raise NotebookNotFound(f"folder {rel!r} does not exist.", hint=act("missing")) from exc
        try:
            for name in sorted(os.listdir(dfd)):
                if name.startswith("."):
                    continue
                child = f"{rel}/{name}" if rel else name
                try:
                    if not stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                        found.append(self._document_at(dfd, name, child))
                        continue
                    child_rel, child_real = self.fs.resolve(child, suffix="")  # a link: its target
                    found.append(self._stat_document(child_rel, child_real))
                except (PathError, StoreError, OSError):
                    continue
        finally:
            os.close(dfd)
        return found

    async def stat_document(self, path: str) -> Document:
        rel, real = self.fs.resolve(path, suffix="")
        return await anyio.to_thread.run_sync(self._stat_document, rel, real)

    async def read_document(self, path: str, *, limit: int | None = None) -> tuple[bytes, int]:
        rel, real = self.fs.resolve(path, suffix="")
        if limit is None:
            raw, st = await anyio.to_thread.run_sync(self.fs.read_bytes, real, rel)
            return raw, st.st_size
        return await anyio.to_thread.run_sync(self._read_head, real, rel, limit)

    def _read_head(self, real: str, rel: str, limit: int) -> tuple[bytes, int]:
        fd = self.fs.open_file(real, rel)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathError(f"{rel!r} is not a regular file.")
            chunks: builtins.list[bytes] = []
            left = limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks), st.st_size
        finally:
            os.close(fd)

    async def write_document(self, path: str, data: bytes, *, overwrite: bool) -> Document:
        await self.write_files({path: data}, overwrite=overwrite)
        return await self.stat_document(path)

    async def remove_document(self, path: str) -> None:
        rel, real = self.fs.resolve(path, suffix="")
        async with self._lock(real):
            await anyio.to_thread.run_sync(self._remove_document_sync, rel, real)

    def _remove_document_sync(self, rel: str, real: str) -> None:
        """Delete a file or an empty folder through its folder's descriptor: a name swapped for
        a symlink is removed itself (or refused), never what it points to."""
        try:
            dfd = self.fs.open_folder(os.path.dirname(real))
        except NotebookNotFound as exc:
            raise NotebookNotFound(f"{rel!r} does not exist.", hint=act("missing")) from exc
        name = os.path.basename(real)
        try:
            if self._document_at(dfd, name, rel).type == "directory":
                try:
                    os.rmdir(name, dir_fd=dfd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise InvalidArgument(
                            f"folder {rel!r} is not empty.",
                            hint="Delete the files in it first; only empty folders are deleted.",
                        ) from exc
                    raise StoreError(f"cannot delete folder {rel!r}: {exc.strerror}.") from exc
                return
            with self.fs.flock(real):
                if self._document_at(dfd, name, rel).type == "directory":
                    raise PathError(f"{rel!r} changed into a folder while being deleted.")
                os.unlink(name, dir_fd=dfd)
                self._cache.pop(real, None)
                self._known.pop(real, None)
                self._read.pop(real, None)
        finally:
            os.close(dfd)

    async def move_document(self, src: str, dst: str, *, keep_source: bool) -> Document:
        src_rel, src_real = self.fs.resolve(src, suffix="")
        dst_rel, dst_real = self.fs.resolve(dst, suffix="")
        if src_real == dst_real:
            raise PathError(f"{src!r} and {dst!r} are the same file.")
        first, second = sorted([src_real, dst_real])
        async with self._lock(first), self._lock(second):
            await anyio.to_thread.run_sync(
                functools.partial(
                    self._rename_sync,
                    src_rel,
                    src_real,
                    dst_rel,
                    dst_real,
                    False,
                    keep_source,
                    notebook=False,
                )
            )
        return await self.stat_document(dst_rel)

    def open_kernel_folder(self, cwd: str) -> int:
        """A descriptor of a kernel's folder (a folder under the root, given as a path),
        opened by descriptors from the root like every file operation: what a sandbox binds is
        the folder that was checked, even if a symlink takes its name a moment later."""
        rel = os.path.relpath(os.path.normpath(cwd), self.fs.root_s)
        _, real = self.fs.folder("" if rel == "." else rel)
        return self.fs.open_folder(real)

    # -- kernel state files: .nbrelay-state/ next to a notebook (hidden, never served) ------

    def state_file(self, path: str, name: str) -> str:
        """Where the kernel state file ``name`` of notebook ``path`` is kept: the hidden folder
        ``.nbrelay-state`` in the notebook's folder, as a real path (checked like every path).
        Kernels write and read it through ``kernels.introspect``, by descriptors from ``/``."""
        rel = self.relative(path)
        _, folder = self.fs.folder(posixpath.dirname(rel))
        return os.path.join(folder, STATE_FOLDER, name)

    def _state_parts(self, real: str) -> str:
        if os.path.basename(os.path.dirname(real)) != STATE_FOLDER or not is_inside(
            real, self.fs.root_s
        ):
            raise PathError(f"{real!r} is not a kernel state file of this root.")
        return real

    async def state_exists(self, real: str) -> bool:
        return await anyio.to_thread.run_sync(self.fs.lexists, self._state_parts(real))

    async def remove_state(self, real: str) -> None:
        """Delete a state file through its folder's descriptor (if it exists)."""
        self._state_parts(real)

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError, NotebookNotFound):
                self.fs.unlink(real)

        await anyio.to_thread.run_sync(remove)

    async def aclose(self) -> None:
        self._cache.clear()
        self._cell_bytes.clear()


__all__ = ["STATE_FOLDER", "FileStore", "map_big_buffers", "release_memory"]
