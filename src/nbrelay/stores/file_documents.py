"""Files of any kind under the file store's root: what export, import and the document tools
read and write (``DocumentStore``), kernels' folders and their saved state (``LocalFiles``).

The same confinement as notebooks (``RootDir``), without the ``.ipynb`` suffix rule; writes take
the store's locks (``FileStore``) so a notebook is never written two ways at once.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import mimetypes
import os
import posixpath
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Protocol

import anyio
import anyio.to_thread

from nbrelay.caller import Caller
from nbrelay.errors import (
    InvalidArgument,
    NotebookExists,
    NotebookNotFound,
    PathError,
    StoreError,
    act,
)
from nbrelay.stores.base import Document, Snapshot
from nbrelay.stores.rootdir import RootDir, is_inside

STATE_FOLDER = ".nbrelay-state"  # kernel states saved next to notebooks (hidden, never served)


class NotebookFiles(Protocol):
    """What the documents need of the file store (``FileStore``; a protocol, so this module does
    not import the store that imports it): its locks, cache and whole-file writes."""

    def lock(self, key: str) -> anyio.Lock: ...

    def relative(self, path: str) -> str: ...

    def forget(self, real: str) -> None: ...

    def drop_cached(self, real: str) -> None: ...

    def put_sync(
        self, rel: str, real: str, data: bytes, overwrite: bool, *, suffix: str = ".ipynb"
    ) -> os.stat_result: ...

    def rename_sync(
        self,
        src_rel: str,
        src_real: str,
        dst_rel: str,
        dst_real: str,
        overwrite: bool,
        keep_source: bool,
        notebook: bool = True,
    ) -> Snapshot | None: ...


class FileDocuments:
    """Documents, exports/imports, kernel folders and state files under ``fs``'s root."""

    def __init__(self, fs: RootDir, store: NotebookFiles) -> None:
        self.fs = fs
        self.root: Path = fs.root
        self._store = store

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
            async with self._store.lock(real):
                await anyio.to_thread.run_sync(self._write_file_sync, rel, real, data, overwrite)

    def _write_file_sync(self, rel: str, real: str, data: bytes, overwrite: bool) -> None:
        self._store.put_sync(rel, real, data, overwrite, suffix="")
        self._store.drop_cached(real)

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

    async def list_documents(self, folder: str, caller: Caller) -> builtins.list[Document]:
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

    async def stat_document(self, path: str, caller: Caller) -> Document:
        rel, real = self.fs.resolve(path, suffix="")
        return await anyio.to_thread.run_sync(self._stat_document, rel, real)

    async def read_document(
        self, path: str, caller: Caller, *, limit: int | None = None
    ) -> tuple[bytes, int]:
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

    async def write_document(
        self, path: str, caller: Caller, data: bytes, *, overwrite: bool
    ) -> Document:
        await self.write_files({path: data}, overwrite=overwrite)
        return await self.stat_document(path, caller)

    async def remove_document(self, path: str, caller: Caller) -> None:
        rel, real = self.fs.resolve(path, suffix="")
        async with self._store.lock(real):
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
                self._store.forget(real)
        finally:
            os.close(dfd)

    async def move_document(
        self, src: str, dst: str, caller: Caller, *, keep_source: bool
    ) -> Document:
        src_rel, src_real = self.fs.resolve(src, suffix="")
        dst_rel, dst_real = self.fs.resolve(dst, suffix="")
        if src_real == dst_real:
            raise PathError(f"{src!r} and {dst!r} are the same file.")
        first, second = sorted([src_real, dst_real])
        async with self._store.lock(first), self._store.lock(second):
            await anyio.to_thread.run_sync(
                functools.partial(
                    self._store.rename_sync,
                    src_rel,
                    src_real,
                    dst_rel,
                    dst_real,
                    False,
                    keep_source,
                    notebook=False,
                )
            )
        return await self.stat_document(dst_rel, caller)

    def open_kernel_folder(self, cwd: str) -> int:
        """A descriptor of a kernel's folder (a folder under the root, given as a path),
        opened by descriptors from the root like every file operation: what a sandbox binds is
        the folder that was checked, even if a symlink takes its name a moment later."""
        rel = os.path.relpath(os.path.normpath(cwd), self.fs.root_s)
        _, real = self.fs.folder("" if rel == "." else rel)
        return self.fs.open_folder(real)

    async def remove_tree(self, folder: str) -> None:
        """Delete a folder under the root and everything in it (a session's working folder),
        through its parent's descriptor: links inside are removed, never followed, and a
        folder swapped for a link is refused. A folder that does not exist is no error."""

        def remove() -> None:
            try:
                rel, real = self.fs.folder(folder)
                if real == self.fs.root_s:
                    raise PathError("the root folder itself is never deleted.")
                dfd = self.fs.open_folder(os.path.dirname(real))
            except NotebookNotFound:
                return
            try:
                shutil.rmtree(os.path.basename(real), dir_fd=dfd)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StoreError(
                    f"cannot delete folder {rel!r}: {exc.strerror}.",
                    hint="Check the folder's permissions; delete what is left by hand.",
                ) from exc
            finally:
                os.close(dfd)

        await anyio.to_thread.run_sync(remove)

    # -- kernel state files: .nbrelay-state/ next to a notebook (hidden, never served) ------

    def state_file(self, path: str, name: str) -> str:
        """Where the kernel state file ``name`` of notebook ``path`` is kept: the hidden folder
        ``.nbrelay-state`` in the notebook's folder, as a real path (checked like every path).
        Kernels write and read it through ``kernels.introspect``, by descriptors from ``/``."""
        rel = self._store.relative(path)
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
