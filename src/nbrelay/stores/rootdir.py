"""The root folder of the file store, and every file operation under it.

* **Confinement.** Every path is checked before it is used: no ``..``, no hidden component, no
  backslash or NUL, and the resolved real path (symlinks followed) must stay inside the real root
  (compared by path components, so ``/r-evil`` is not inside ``/r``). Files and folders are
  opened by descriptors from the root, one name at a time, with ``O_NOFOLLOW``: a folder swapped
  for a symlink after the checks is refused, never followed.
* **Atomic, durable writes.** A unique hidden temp file in the same folder, fsync, ``os.replace``,
  fsync of the folder; the file's mode is kept. A crash leaves the old or the new file. The
  file's bytes are re-hashed just before the replace, so a change made by someone else is
  reported as a conflict, never overwritten.
* **Cross-process locks.** ``fcntl.flock`` on a per-file lock file in nbrelay's private lock
  folder; temp files left by nbrelay processes that no longer run are swept.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from nbrelay import process, runtime
from nbrelay.errors import (
    ConflictError,
    NotebookExists,
    NotebookInvalid,
    NotebookNotFound,
    PathError,
    StoreError,
    act,
)
from nbrelay.notebook import nblr
from nbrelay.notebook.model import version_of
from nbrelay.notebook.serialize import Work
from nbrelay.stores import paths

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_TMP_MARK = ".nbrelay-"
_TMP_SUFFIX = ".tmp"
_MAX_BYTES = 512 * 1024 * 1024
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


StatKey = tuple[int, int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    """What a file's stat says of its content: size, mtime, ctime, inode, device."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _write_all(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    """Write the parts in order (``os.writev``, ``IOV_MAX`` at a time: nothing is joined)."""
    at = 0
    while at < len(parts):
        batch = parts[at : at + _IOV_MAX]
        written = os.writev(fd, batch)
        if written == sum(map(len, batch)):
            at += len(batch)
            continue
        for part in batch:  # a short write: finish the part it stopped in
            at += 1
            if written < len(part):
                view = memoryview(part)[written:]
                while view:
                    view = view[os.write(fd, view) :]
                break
            written -= len(part)


def is_inside(child: str, root: str) -> bool:
    return child == root or os.path.commonpath([child, root]) == root


class Root:
    """The real root folder ``root``: its path rules and the confined reads under it (also
    applied by the server extension to the paths it hands Jupyter's contents manager)."""

    def __init__(self, root: Path) -> None:
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            raise PathError(
                f"root folder {root} does not exist or is not a folder.",
                hint="Pass --root with an existing folder.",
            )
        self.root = Path(real)
        self.root_s = real
        self.work = Work()  # bytes hashed to check files unchanged (with the store's saves)

    def _relative(self, path: str, suffix: str) -> str:
        """The text rules of ``resolve``: the relative posix path, or a PathError."""
        paths.check_text(path)
        if suffix == ".ipynb" and nblr.is_nblr(path):  # notebook-lr's format, read as a notebook
            suffix = nblr.SUFFIX
        raw = PurePosixPath(path)
        if raw.is_absolute():
            if not is_inside(os.path.normpath(path), self.root_s):
                raise PathError(
                    f"the path {path!r} is outside the root folder.",
                    hint=act("see_paths"),
                )
            raw = PurePosixPath(os.path.relpath(os.path.normpath(path), self.root_s))
        return paths.relative(path, raw.parts, suffix)

    def resolve_stat(
        self, path: str, *, suffix: str = ".ipynb"
    ) -> tuple[str, str, os.stat_result | None]:
        """``resolve``, and the stat of what the real path names (None: nothing there yet),
        in one ``lstat`` per part of the path below the root: the root is a real path already,
        so when no part below it is a symlink (and none is hidden: the text rules saw to that),
        the path is its own real path. A part that is a symlink takes ``resolve``'s full
        rules (``realpath``, which also walks the root's own parts), then a ``stat``."""
        rel = self._relative(path, suffix)
        at = self.root_s
        found: os.stat_result | None = None
        for part in rel.split("/"):
            at = os.path.join(at, part)
            try:
                found = os.lstat(at)
            except OSError:  # not there (nor anything below it): no link on the way
                return rel, os.path.join(self.root_s, rel), None
            if stat.S_ISLNK(found.st_mode):
                rel, real = self.resolve(path, suffix=suffix)
                try:
                    return rel, real, os.stat(real)
                except OSError:
                    return rel, real, None
        return rel, at, found

    def resolve(self, path: str, *, suffix: str = ".ipynb") -> tuple[str, str]:
        """Return (relative posix path, real absolute path) or raise PathError."""
        rel = self._relative(path, suffix)
        try:
            real = os.path.realpath(os.path.join(self.root_s, rel))
        except OSError as exc:  # a link on the path was replaced while it was being followed
            raise PathError(
                f"the path {path!r} changed while it was being checked ({exc.strerror}).",
                hint="Retry; if this keeps happening, something keeps replacing files there.",
            ) from exc
        if not is_inside(real, self.root_s):
            raise PathError(
                f"the path {path!r} leads outside the root folder (through a symlink).",
                hint="Only files inside the root are served.",
            )
        real_rel = os.path.relpath(real, self.root_s)
        if any(p.startswith(".") for p in Path(real_rel).parts if p != "."):
            raise PathError(
                f"the path {path!r} leads to a hidden file.", hint="Hidden files are not served."
            )
        return rel, real

    def folder(self, folder: str) -> tuple[str, str]:
        if folder in ("", ".", "/"):
            return "", self.root_s
        rel, real = self.resolve(folder, suffix="")
        if not os.path.isdir(real):
            raise NotebookNotFound(
                f"folder {folder!r} does not exist.",
                hint=act("list_all"),
            )
        return rel, real

    def open_file(self, real: str, rel: str) -> int:
        """Open the regular file ``real`` for reading through its folder's descriptor (see
        ``walk``), without following a symlink or blocking on a FIFO."""
        try:
            dfd = self.open_folder(os.path.dirname(real))
        except NotebookNotFound as exc:
            raise paths.missing(rel) from exc
        try:
            return os.open(
                os.path.basename(real),
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=dfd,
            )
        except FileNotFoundError as exc:
            raise paths.missing(rel) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathError(f"{rel!r} changed into a symlink while being opened.") from exc
            raise StoreError(f"cannot open {rel!r}: {exc.strerror}.") from exc
        finally:
            os.close(dfd)

    def read_bytes(self, real: str, rel: str) -> tuple[bytes, os.stat_result]:
        fd = self.open_file(real, rel)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathError(
                    f"{rel!r} is not a regular file.",
                    hint="Only regular notebook files are served.",
                )
            if st.st_size > _MAX_BYTES:
                raise NotebookInvalid(
                    f"{rel!r} is {st.st_size:,} bytes, over the {_MAX_BYTES:,}-byte limit."
                )
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks), st
        finally:
            os.close(fd)

    def lstat(self, real: str) -> os.stat_result:
        """``lstat`` of a real path inside the root, through its folder's descriptor."""
        dfd = self.open_folder(os.path.dirname(real))
        try:
            return os.stat(os.path.basename(real), dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)

    def lexists(self, real: str) -> bool:
        try:
            self.lstat(real)
        except (FileNotFoundError, NotebookNotFound):
            return False
        return True

    def check_inside(self, fd: int, rel: str) -> None:
        """Refuse (and close) an open folder that lies outside the root."""
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc here: the walk by descriptors is all there is
        if not is_inside(where.removesuffix(" (deleted)"), self.root_s):
            os.close(fd)
            raise PathError(
                f"{rel!r} leads outside the root folder: a folder on its path was just replaced "
                "by a symlink. Nothing was read or changed.",
                hint="Only files inside the root are served.",
            )

    def walk(self, folder: str, *, create: bool) -> int:
        """Open ``folder`` (a real path inside the root) from the root one name at a time,
        never following a symlink; with ``create``, missing folders are made on the way."""
        rel = os.path.relpath(folder, self.root_s)
        parts = [] if rel == "." else rel.split(os.sep)
        if parts[:1] == [".."] or os.path.isabs(rel):
            raise PathError(f"{rel!r} is outside the root folder.")
        fd = os.open(self.root_s, _DIR_FLAGS)
        return runtime.descend(fd, parts, functools.partial(runtime.open_subfolder, make=create))

    def open_folder(self, folder: str, *, create: bool = False) -> int:
        """Open a folder inside the root (making it and its parents with ``create``) by
        descriptors from the root (``walk``). Every operation on a file or folder under the root
        goes through such a descriptor, so a folder on the path swapped for a symlink after the
        path checks is refused, never followed: nothing outside the root is read, listed,
        written, made or deleted."""
        rel = os.path.relpath(folder, self.root_s)
        try:
            dfd = self.walk(folder, create=create)
        except FileNotFoundError as exc:
            raise NotebookNotFound(f"folder {rel!r} does not exist.", hint=act("missing")) from exc
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux says ENOTDIR for a symlink
                raise PathError(
                    f"folder {rel!r} changed into a symlink (or a file) while being opened. "
                    "Nothing was read or changed.",
                    hint="Only files inside the root are served.",
                ) from exc
            raise StoreError(
                f"cannot {'write' if create else 'open'} in {rel!r}: {exc.strerror}.",
                hint="Nothing was changed. Check the folder's permissions and free space.",
            ) from exc
        self.check_inside(dfd, rel)  # the root itself may have moved: belt and braces
        return dfd


class RootDir(Root):
    """The root folder and every file operation under it: reads, atomic writes, locks."""

    def __init__(
        self, root: Path, *, lock_dir: Path | None = None, lock_timeout: float = 10.0
    ) -> None:
        super().__init__(root)
        # The lock folder is private (checked here, so start-up refuses one another user holds,
        # and again at each lock): --lock-dir, else "locks" in nbrelay's runtime folder.
        self._lock_at: tuple[Path | None, tuple[str, ...]] = (
            (lock_dir, ()) if lock_dir is not None else (None, ("locks",))
        )
        self._lock_dir = runtime.folder_path(self._lock_at[0], *self._lock_at[1])
        self._lock_timeout = lock_timeout
        self._swept: set[str] = set()

    @contextlib.contextmanager
    def flock(self, real: str) -> Iterator[None]:
        name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".lock"
        with runtime.folder_fd(self._lock_at[0], *self._lock_at[1]) as dfd:
            fd = runtime.open_file(
                dfd, name, os.O_RDWR | os.O_CREAT, os.path.join(self._lock_dir, name)
            )
        try:
            deadline = time.monotonic() + self._lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if time.monotonic() > deadline:
                        raise StoreError(
                            f"another process has held the lock on this notebook for over "
                            f"{self._lock_timeout:g} s.",
                            hint="Retry in a moment; if it persists, check for a stuck nbrelay.",
                        ) from exc
                    time.sleep(0.002)
            yield
        finally:
            os.close(fd)

    def sweep_soon(self, real: str) -> None:
        folder = os.path.dirname(real)
        if folder not in self._swept:
            self.sweep_dir(folder)

    def sweep_dir(self, folder: str) -> None:
        """Remove temp files left by nbrelay processes that no longer run."""
        self._swept.add(folder)
        try:
            dfd = self.open_folder(folder)
        except (PathError, StoreError):
            return
        try:
            self.sweep_fd(dfd, folder)
        finally:
            os.close(dfd)

    def sweep_fd(self, dfd: int, folder: str) -> None:
        self._swept.add(folder)
        try:
            names = os.listdir(dfd)
        except OSError:
            return
        for name in names:
            if not (name.startswith(".") and _TMP_MARK in name and name.endswith(_TMP_SUFFIX)):
                continue
            try:
                pid = int(name.split(_TMP_MARK, 1)[1].split("-", 1)[0])
            except ValueError:
                continue
            if pid != os.getpid() and process.pid_alive(pid):
                continue
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)

    def write_atomic(
        self,
        real: str,
        data: bytes | Sequence[bytes | memoryview],
        *,
        expect: str | None,
        expect_key: StatKey | None = None,
        mtime_ns: int | None = None,
    ) -> os.stat_result:
        """Write ``data`` to ``real`` atomically; ``expect`` is the version the file must still
        have just before the replace (None: the file must not exist). With ``expect_key``, a
        file whose stat still has that key is taken as unchanged without hashing it (the caller
        knows the key proves it: see ``FileStore``). ``mtime_ns`` stamps the new file's times."""
        folder, name = os.path.split(real)
        tail = f"{_TMP_MARK}{os.getpid()}-{secrets.token_hex(6)}{_TMP_SUFFIX}"
        tmp = paths.fitted(name, tail, prefix=".")
        dfd = self.open_folder(folder)
        try:
            try:
                old_mode: int | None = stat.S_IMODE(
                    os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
                )
            except FileNotFoundError:
                old_mode = None
            try:
                fd = os.open(
                    tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dfd
                )
            except OSError as exc:
                raise StoreError(
                    f"cannot write in {os.path.relpath(folder, self.root_s)!r}: {exc.strerror}.",
                    hint="Nothing was changed. Check the folder's permissions and free space.",
                ) from exc
            try:
                try:
                    _write_all(fd, [data] if isinstance(data, bytes) else data)
                    os.fchmod(fd, old_mode if old_mode is not None else 0o666 & ~process.umask())
                    if mtime_ns is not None:
                        os.utime(fd, ns=(mtime_ns, mtime_ns))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.check_unchanged(real, expect, dfd=dfd, expect_key=expect_key)
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                if isinstance(exc, OSError):
                    raise StoreError(
                        f"writing {os.path.relpath(real, self.root_s)!r} failed: {exc.strerror} "
                        f"(errno {exc.errno}).",
                        hint="Nothing was changed; the notebook on disk is as it was.",
                    ) from exc
                raise
            os.fsync(dfd)
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        finally:
            os.close(dfd)

    def check_unchanged(
        self,
        real: str,
        expect: str | None,
        *,
        dfd: int | None = None,
        expect_key: StatKey | None = None,
    ) -> None:
        rel = os.path.relpath(real, self.root_s)
        target, where = (os.path.basename(real), dfd) if dfd is not None else (real, None)
        try:
            fd = os.open(
                target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=where
            )
        except FileNotFoundError:
            current: str | None = None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathError(f"{rel!r} changed into a symlink while being written.") from exc
            raise
        else:
            with os.fdopen(fd, "rb") as fh:
                if expect_key is not None and stat_key(os.fstat(fh.fileno())) == expect_key:
                    return
                raw = fh.read()
                self.work.bytes_hashed += len(raw)
                current = version_of(raw)
        if current != expect:
            if expect is None:
                raise NotebookExists(
                    f"{rel!r} was created by someone else a moment ago.",
                    hint=act("read_it"),
                )
            raise ConflictError(
                f"{rel!r} was changed by someone else while nbrelay was writing it; "
                "your change was not applied.",
                current=current or "",
                hint="Read the notebook again and retry.",
            )

    def unlink(self, real: str) -> None:
        """Remove a file through its folder's descriptor (checked inside the root)."""
        dfd = self.open_folder(os.path.dirname(real))
        try:
            os.unlink(os.path.basename(real), dir_fd=dfd)
        finally:
            os.close(dfd)
