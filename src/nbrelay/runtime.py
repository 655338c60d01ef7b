"""nbrelay's private runtime folder: lock files, kernel connection files, kernel socket folders
and the kernelspecs nbrelay registers. Every user of such a folder goes through ``open_folder``.

The folder is ``$XDG_RUNTIME_DIR/nbrelay`` when ``$XDG_RUNTIME_DIR`` is a private folder of this
user (as systemd makes it), else ``nbrelay-<uid>`` in the temp folder (``$TMPDIR``, ``/tmp``).
A shared temp folder is where another local user can create ``nbrelay-<uid>`` first, then plant
kernelspecs, symlinks or held locks in it; so a folder is used only once it is verified, through
descriptors (no path is followed twice):

* the folder it is made in belongs to this user or to root, and if others may write there it is
  sticky (as ``/tmp`` is), so nobody else can rename or replace what is made in it;
* each folder is made with mode 0700, or, when it exists, is a real folder (not a symlink) owned
  by this user that no other user can write; one that others could only read or enter is made
  0700 again (folders of older versions were 0755);
* files in it are opened without following symlinks and must belong to this user.

Anything else stops with an error that names the folder, its owner and the way out: nothing is
ever made, opened or written in a folder another user controls.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from nbrelay.errors import PathError

logger = logging.getLogger("nbrelay.runtime")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OTHERS_ANY = 0o077
_WAY_OUT = (
    "Remove it (ask its owner or an administrator), or give nbrelay a private folder: "
    "set XDG_RUNTIME_DIR or TMPDIR to a folder of your own (or --lock-dir for the locks)."
)


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _private_xdg() -> str | None:
    """``$XDG_RUNTIME_DIR`` if it is a real folder of this user that nobody else can enter."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if not xdg or not os.path.isabs(xdg):
        return None
    try:
        st = os.lstat(xdg)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & _OTHERS_ANY:
        return xdg
    if xdg not in _WARNED:
        _WARNED.add(xdg)
        logger.warning(
            "XDG_RUNTIME_DIR=%s is not a private folder of yours; using the temp folder instead",
            xdg,
        )
    return None


_WARNED: set[str] = set()


def default_dir() -> Path:
    """Where nbrelay's runtime folder is (not checked: ``open_folder`` checks it)."""
    xdg = _private_xdg()
    if xdg is not None:
        return Path(xdg) / "nbrelay"
    return Path(tempfile.gettempdir()) / f"nbrelay-{os.geteuid()}"


def _refuse(message: str, *, hint: str = _WAY_OUT) -> PathError:
    return PathError(message, hint=hint)


def _check_parent(fd: int, where: str) -> None:
    """The folder nbrelay makes its own folder in: this user's or root's, and sticky if others
    may write in it (or they could rename nbrelay's folder and put theirs in its place)."""
    st = os.fstat(fd)
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        raise _refuse(
            f"nbrelay keeps private files in {where}, which belongs to {_user(st.st_uid)}, "
            "not to you or root; nothing was made there."
        )
    if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        raise _refuse(
            f"other users can write in {where} (mode {stat.S_IMODE(st.st_mode):04o}, not "
            "sticky), so they could replace the private folder nbrelay keeps there; nothing was "
            "made there."
        )


def _check_own(fd: int, where: str, *, tighten: bool) -> None:
    """A folder nbrelay uses: owned by this user, writable by nobody else."""
    st = os.fstat(fd)
    uid = os.geteuid()
    if st.st_uid != uid:
        raise _refuse(
            f"the folder {where} belongs to {_user(st.st_uid)}, not to you ({_user(uid)}): "
            "another user may have made it to run their code as you, or to block or redirect "
            "nbrelay's files. nbrelay did not use it."
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & _OTHERS_WRITE:
        raise _refuse(
            f"other users can write in the folder {where} (mode {mode:04o}), so what is in it "
            "cannot be trusted. nbrelay did not use it.",
            hint=f"Check what is in it and make it private (chmod 700 {where}), or remove it.",
        )
    if tighten and mode & _OTHERS_ANY:
        os.fchmod(fd, stat.S_IRWXU | (mode & stat.S_ISVTX))


def descend(fd: int, names: Iterable[str], open_child: Callable[[int, str], int]) -> int:
    """Open the folders ``names``, each inside the one before, from the open folder ``fd``: one
    descriptor at a time, each child opened from its parent's descriptor by ``open_child``
    (which must not follow a symlink), so no path is ever followed twice and a folder swapped
    for a symlink on the way is refused. Takes ``fd`` over: a parent is closed once its child
    is open, and on any error the descriptor held is closed. Returns the last one (the caller
    closes it). The kernels run this very function too (``kernels.introspect``), so it uses
    nothing but its arguments and ``os``."""
    try:
        for name in names:
            child = open_child(fd, name)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_subfolder(parent: int, name: str, *, make: bool = False, mode: int = 0o777) -> int:
    """Open the folder ``name`` in ``parent`` without following a symlink; with ``make``,
    make it first (``mode``) if it is missing."""
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=parent)
    return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)


def _open_child(parent: int, name: str, where: str, *, tighten: bool) -> int:
    """Make (mode 0700) or open the folder ``name`` in ``parent``, without following a symlink,
    and check it."""
    try:
        fd = open_subfolder(parent, name, make=True, mode=0o700)
    except OSError as exc:
        raise _refuse(
            f"{where} is not a folder nbrelay can use ({exc.strerror}): a symlink or a file is "
            "in its place. nbrelay did not use it."
        ) from exc
    return _checked(fd, lambda d: _check_own(d, where, tighten=tighten))


def _checked(fd: int, check: Callable[[int], None]) -> int:
    """``fd`` once ``check`` passed on it; closed if it failed."""
    try:
        check(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_chain(start: str, names: list[str], *, tighten: bool) -> int:
    try:
        fd = os.open(start, _DIR_FLAGS)
    except OSError as exc:
        raise _refuse(
            f"nbrelay cannot open the folder {start} for its private files: {exc.strerror}.",
            hint="Create it, or set XDG_RUNTIME_DIR or TMPDIR (or --lock-dir) to a folder of yours.",
        ) from exc
    if names:
        _checked(fd, lambda d: _check_parent(d, start))
    else:
        _checked(fd, lambda d: _check_own(d, start, tighten=tighten))
    wheres = itertools.accumulate(names, os.path.join, initial=start)  # for the messages
    next(wheres)
    return descend(
        fd, names, lambda parent, name: _open_child(parent, name, next(wheres), tighten=tighten)
    )


def open_folder(folder: Path | None = None, *parts: str) -> tuple[int, Path]:
    """Open a private folder, making what is missing, and check it (see the module docstring).

    ``folder`` None is nbrelay's runtime folder, whose existing folders are made 0700 again when
    others could read them; ``parts`` are sub-folders in it. A folder the user chose (such as
    ``--lock-dir``) is made if missing, but never has its mode changed: if others can write in
    it, it is refused. Returns an open descriptor (the caller closes it) and the path.
    """
    ours = folder is None
    top = os.path.abspath(default_dir() if folder is None else folder)
    target = os.path.join(top, *parts)
    if ours:
        base = os.path.dirname(top)
        names = os.path.relpath(target, base).split(os.sep)
    else:
        base, names = target, []
        while not os.path.lexists(base):  # made below the deepest folder that exists
            base, name = os.path.split(base)
            names.insert(0, name)
        if not names:
            base, name = os.path.split(target)
            names = [name]
    fd = _open_chain(base, names, tighten=ours)
    return fd, Path(target)


def folder_path(folder: Path | None = None, *parts: str) -> Path:
    """``open_folder`` for a caller that needs the path only (checked, then closed)."""
    fd, path = open_folder(folder, *parts)
    os.close(fd)
    return path


@contextlib.contextmanager
def folder_fd(folder: Path | None = None, *parts: str) -> Iterator[int]:
    """``open_folder`` as a context: the checked folder's descriptor, closed at the end."""
    fd, _ = open_folder(folder, *parts)
    try:
        yield fd
    finally:
        os.close(fd)


def open_file(dir_fd: int, name: str, flags: int, where: str) -> int:
    """Open (or create, mode 0600) the file ``name`` in a checked folder, without following a
    symlink; it must be a regular file of this user."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise _refuse(
            f"nbrelay cannot open its private file {where}: {exc.strerror}.",
            hint=f"Remove {where} (and check who made it).",
        ) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise _refuse(
            f"the file {where} belongs to {_user(st.st_uid)} or is not a regular file; nbrelay "
            "did not use it.",
            hint=f"Remove {where} (and check who made it).",
        )
    return fd


def make_temp_folder(prefix: str) -> str:
    """A new, uniquely named folder (mode 0700) in the checked runtime folder."""
    return tempfile.mkdtemp(prefix=prefix, dir=str(folder_path()))


SOCKET_PATH_MAX = 103  # bytes of a Unix socket's path (sun_path: 108 on Linux, 104 on macOS)


def make_socket_folder(prefix: str, longest: int) -> str:
    """A new, uniquely named folder (mode 0700) for Unix sockets named up to ``longest`` bytes:
    in the runtime folder, or, when that folder's path leaves no room for a socket's name (a
    deep ``$XDG_RUNTIME_DIR``), in the system's temp folder (``tempfile.mkdtemp``: made by
    this user, private, under a name nobody can guess)."""
    folder = make_temp_folder(prefix)
    if len(os.fsencode(folder)) + 1 + longest <= SOCKET_PATH_MAX:
        return folder
    os.rmdir(folder)
    folder = tempfile.mkdtemp(prefix=f"nbrelay-{prefix}")
    if len(os.fsencode(folder)) + 1 + longest <= SOCKET_PATH_MAX:
        return folder
    os.rmdir(folder)
    raise PathError(
        f"cannot make kernel sockets: the runtime folder ({folder_path()}) and the temp folder "
        f"({tempfile.gettempdir()}) have paths too long for a Unix socket's "
        f"({SOCKET_PATH_MAX} bytes)",
        hint="Set XDG_RUNTIME_DIR or TMPDIR to a folder of yours with a shorter path.",
    )


# -- groups of state files --------------------------------------------------------------------
# A state folder (the shared readers' reads, callers' undo histories) holds one group of files
# per entry, named ``<base><suffix>``; the group's first suffix is its head, whose mtime says
# when the entry was last used.

STATE_RETENTION = 7 * 24 * 3600.0  # seconds a group may go unused before it is removed
STATE_MAX_GROUPS = 10_000  # past this, the least recently used groups are removed


def remove_group(dir_fd: int, base: str, suffixes: Sequence[str]) -> None:
    """Remove the files of one group (those already gone are no error)."""
    for suffix in suffixes:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(base + suffix, dir_fd=dir_fd)


def groups(dir_fd: int, head: str) -> Iterator[tuple[str, int]]:
    """Each group's base name and an open descriptor of its head (read only, closed after)."""
    for name in os.listdir(dir_fd):
        if not name.endswith(head):
            continue
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            yield name[: -len(head)], fd
        finally:
            os.close(fd)


def expire_groups(dir_fd: int, suffixes: Sequence[str]) -> None:
    """Remove the groups unused for ``STATE_RETENTION`` seconds, and the least recently used
    past ``STATE_MAX_GROUPS``."""
    now = time.time()
    used: list[tuple[float, str]] = []
    for base, fd in groups(dir_fd, suffixes[0]):
        with contextlib.suppress(OSError):
            used.append((os.fstat(fd).st_mtime, base))
    used.sort(reverse=True)
    for k, (mtime, base) in enumerate(used):
        if k >= STATE_MAX_GROUPS or now - mtime > STATE_RETENTION:
            remove_group(dir_fd, base, suffixes)
