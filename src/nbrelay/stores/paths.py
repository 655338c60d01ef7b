"""The rules every store applies to a notebook path an agent gives, before any I/O.

File mode then resolves the path on disk (symlinks, the root); live mode sends it to a Jupyter
Server, which enforces its own root on top.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable

from nbrelay.errors import NotebookNotFound, PathError, act

MAX_PATH = 1024
# The longest name (one part of a path) file systems take: 255 bytes of UTF-8 on Linux, macOS
# and in Jupyter Server's contents; a longer one fails deep inside the OS with ENAMETOOLONG.
MAX_NAME_BYTES = 255
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_STRUCTURAL = frozenset("./\\:%~")


def check_text(path: object) -> str:
    """Refuse what no notebook path may contain: empty, NUL, too long, lone surrogates,
    backslashes, URLs, percent escapes and look-alikes of '.', '/' or '\\'."""
    if not isinstance(path, str) or not path.strip():
        raise PathError("the path is empty.", hint='Give a path like "analysis.ipynb".')
    if "\x00" in path or len(path) > MAX_PATH:
        raise PathError(
            "the path contains a NUL byte or is too long.", hint="Give a normal file path."
        )
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PathError(
            f"the path {path!r} contains characters no file name can hold (a lone surrogate).",
            hint="Give a normal file path.",
        ) from exc
    if "\\" in path:
        raise PathError(
            f"the path {path!r} contains a backslash.",
            hint='Use "/" to separate folders, relative to the root.',
        )
    if "://" in path:
        raise PathError(
            f"the path {path!r} looks like a URL.",
            hint="Give a path relative to the root folder, not a URL.",
        )
    if _PERCENT_ESCAPE.search(path):
        raise PathError(
            f"the path {path!r} contains percent-encoded characters.",
            hint="Give the path as it is on disk, not URL-encoded ('%2e' is '.').",
        )
    folded = unicodedata.normalize("NFKC", path)
    if [c for c in folded if c in _STRUCTURAL] != [c for c in path if c in _STRUCTURAL]:
        raise PathError(
            f"the path {path!r} contains look-alikes of '.', '/' or '\\' (such as fullwidth "
            "forms), which other tools may read as those characters.",
            hint="Use plain '.' and '/' in paths.",
        )
    return path


def relative(path: str, parts: Iterable[str], suffix: str) -> str:
    """Join the parts of ``path`` (relative to the root) with '/': no '..', no hidden part, not
    the root itself, and ending in ``suffix`` when one is asked for."""
    kept = [p for p in parts if p not in ("", ".")]
    if any(p == ".." for p in kept):
        raise PathError(
            f"the path {path!r} contains '..'.",
            hint="Paths may not leave the root folder; give a path relative to the root.",
        )
    if any(p.startswith(".") for p in kept):
        raise PathError(
            f"the path {path!r} is hidden (a part starts with '.').",
            hint="Hidden files and folders are not served.",
        )
    if not kept:
        raise PathError("the path names the root folder, not a notebook.")
    for part in kept:
        size = len(part.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            raise PathError(
                f"the name {part[:40] + '…'!r} in the path is {size} bytes long; file and folder "
                f"names are at most {MAX_NAME_BYTES} bytes (UTF-8). Nothing was read or changed.",
                hint="Give a shorter name.",
            )
    if suffix and not kept[-1].endswith(suffix):
        raise PathError(
            f"the path {path!r} is not a {suffix} file.", hint=f"Notebook paths end in {suffix}."
        )
    return "/".join(kept)


def missing(rel: str) -> NotebookNotFound:
    """The error for a notebook ``rel`` that is not there."""
    return NotebookNotFound(f"notebook {rel!r} does not exist.", hint=act("missing"))


def fitted(name: str, suffix: str = "", *, prefix: str = "", spare: int = 0) -> str:
    """``prefix + name + suffix`` as a file name, shortened to fit ``MAX_NAME_BYTES`` (less
    ``spare`` bytes for a suffix added later) when it is too long: the start of ``name`` and a
    hash of all of it. For the files nbrelay names after a notebook (temp files, saved kernel
    states), whose own name may use every byte allowed."""
    limit = MAX_NAME_BYTES - spare
    whole = prefix + name + suffix
    if len(whole.encode("utf-8")) <= limit:
        return whole
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    room = limit - len((prefix + suffix).encode("utf-8")) - len(digest) - 1
    head = name.encode("utf-8")[: max(room, 0)].decode("utf-8", "ignore")
    return f"{prefix}{head}-{digest}{suffix}"


# -- globs over notebook paths ----------------------------------------------------------------

_GLOB_CHARS = frozenset("*?[")


def is_glob(text: str) -> bool:
    """Whether ``text`` is a pattern rather than a path (it has ``*``, ``?`` or ``[``)."""
    return any(c in _GLOB_CHARS for c in text)


class Glob:
    """A pattern over notebook paths (relative to the root, as results show them).

    Without ``/`` it matches a notebook's name in any folder (``eda*``); with ``/`` it matches
    the whole path part by part (``reports/*/eda*.ipynb``), where ``**`` stands for any number of
    folders and a trailing ``/`` for everything below. ``*``, ``?`` and ``[...]`` match within
    one name; case counts. ``enter`` says whether a folder can hold a match, so a walk skips the
    folders that cannot.
    """

    def __init__(self, pattern: str) -> None:
        text = pattern.strip()
        if not text or "\x00" in text or len(text) > MAX_PATH or "\\" in text:
            raise PathError(
                f"the pattern {pattern[:100]!r} is empty, too long or has a backslash or NUL.",
                hint="Give a glob like 'eda*' or 'reports/**/*.ipynb'.",
            )
        self.pattern = text
        if "/" not in text:
            self.name: str | None = text
            self.parts: tuple[str, ...] = ()
            return
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if text.endswith("/"):
            parts.append("**")
        if ".." in parts:
            raise PathError(
                f"the pattern {pattern[:100]!r} contains '..'.",
                hint="Patterns are relative to the root and stay inside it.",
            )
        collapsed: list[str] = []
        for p in parts:
            if not (p == "**" and collapsed[-1:] == ["**"]):
                collapsed.append(p)
        self.name = None
        self.parts = tuple(collapsed) or ("**",)

    def match(self, path: str) -> bool:
        """Whether the notebook at ``path`` (relative to the root) matches."""
        if self.name is not None:
            return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], self.name)
        return _match(tuple(path.split("/")), self.parts)

    def enter(self, folder: str) -> bool:
        """Whether a notebook below ``folder`` (relative to the root; "" is the root) can match."""
        if self.name is not None or not folder:
            return True
        return _could_hold(tuple(folder.split("/")), self.parts)


@functools.lru_cache(maxsize=4096)
def _match(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pats[0]) and _match(parts[1:], pats[1:])


def _could_hold(folder: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    """Whether some path below the folder ``folder`` matches ``pats``."""
    for i, part in enumerate(folder):
        if i >= len(pats):
            return False
        if pats[i] == "**":
            return True
        if not fnmatch.fnmatchcase(part, pats[i]):
            return False
    return len(pats) > len(folder)
