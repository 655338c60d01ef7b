"""The URIs of nbrelay's notebook resources (``nbrelay://notebook/{+path}/...``): built from a
path, cell and output, and read back to the notebook they are about."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

SCHEME = "nbrelay://notebook/"
IMAGE_EXTENSIONS = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "svg": "image/svg+xml",
}
_EXT_OF = {mime: ext for ext, mime in IMAGE_EXTENSIONS.items()}
_NOTEBOOK_IN_URI = re.compile(r"^(.+?\.ipynb)(?:/|$)")


def notebook_uri(path: str) -> str:
    return SCHEME + quote(path, safe="/")


def cell_uri(path: str, cell: str) -> str:
    return f"{notebook_uri(path)}/cells/{quote(cell, safe='')}"


def output_uri(path: str, cell: str, output: int, mime: str | None = None) -> str:
    base = f"{cell_uri(path, cell)}/outputs/{output}"
    return f"{base}.{_EXT_OF[mime]}" if mime in _EXT_OF else base


def changes_uri(path: str) -> str:
    return f"{notebook_uri(path)}/changes"


def history_uri(path: str) -> str:
    return f"{notebook_uri(path)}/history"


def export_uri(path: str, fmt: str = "pdf") -> str:
    return f"{notebook_uri(path)}/export.{fmt}"


def notebook_of(uri: str) -> str | None:
    """The notebook path a resource URI is about, or None for other URIs."""
    if not uri.startswith(SCHEME):
        return None
    found = _NOTEBOOK_IN_URI.match(uri[len(SCHEME) :])
    return unquote(found.group(1)) if found else None
