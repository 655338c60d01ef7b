"""The rules every store applies to a notebook path an agent gives, before any I/O.

File mode then resolves the path on disk (symlinks, the root); live mode sends it to a Jupyter
Server, which enforces its own root on top.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from nbrelay.errors import NotebookNotFound, PathError, act

MAX_PATH = 1024
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
    if suffix and not kept[-1].endswith(suffix):
        raise PathError(
            f"the path {path!r} is not a {suffix} file.", hint=f"Notebook paths end in {suffix}."
        )
    return "/".join(kept)


def missing(rel: str) -> NotebookNotFound:
    """The error for a notebook ``rel`` that is not there."""
    return NotebookNotFound(f"notebook {rel!r} does not exist.", hint=act("missing"))
