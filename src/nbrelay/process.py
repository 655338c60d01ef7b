"""Process-wide set-up and facts about the running process, kept in one place.

:func:`setup` is called once by the CLI before a server starts: it records the process umask
(new files are created with ``0o666 & ~umask``, as ``open`` would) and tunes glibc's allocator so
notebook-sized buffers go back to the system when freed. Everything here works without
:func:`setup` too (tests build stores directly): the umask is then read on first use.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable

_umask: int | None = None
_set_up = False


def setup() -> None:
    """At start-up, before any thread runs: record the umask, tune the allocator. Later calls
    do nothing (the CLI calls it first, then the server it builds)."""
    global _umask, _set_up
    if _set_up:
        return
    _set_up = True
    _umask = _read_umask()
    map_big_buffers()


def umask() -> int:
    """The process umask (recorded by :func:`setup`, else read once now)."""
    global _umask
    if _umask is None:
        _umask = _read_umask()
    return _umask


def _read_umask() -> int:
    # Linux reports it without changing it (a set-and-restore would briefly give any file
    # another thread creates the mode 0o666).
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="ascii", errors="replace") as f,
    ):
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def _glibc(name: str) -> Callable[..., int] | None:
    """A function of glibc's allocator, or None where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        found: Callable[..., int] = getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    return found


def release_memory() -> None:
    """Give the C heap's free pages back to the system. glibc keeps them otherwise, so the
    megabytes that parsing, validating (the first time: compiling the schema) or serialising a
    big notebook go through would count as the server's memory for as long as it runs."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


def map_big_buffers() -> None:
    """Have glibc give every buffer of 128 KiB or more a mapping of its own, which goes back to
    the system when it is freed. By default the threshold rises to the largest buffer freed so
    far, after which notebook-sized buffers (file bytes, serialised cells, kernel output) are
    carved from the heap and linger there."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
