"""Text that can always be sent: unpaired surrogates replaced by U+FFFD.

JSON allows escapes such as ``"\\ud800"`` that decode to a lone UTF-16 surrogate, which Python
keeps in a ``str`` but no UTF-8 encoder accepts: one such character in a result makes its
serialisation fail (over stdio the server's writer died with it). Text from notebooks, kernels
and clients goes through :func:`scrub` on its way in, so every reply can be encoded.
Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON escape of a code point in U+D800-U+DFFF; raw UTF-8 bytes cannot encode one.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def has_surrogates(text: str) -> bool:
    # isascii is a fast scan in C; the class search costs milliseconds per megabyte.
    return not text.isascii() and _SURROGATE.search(text) is not None


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether JSON bytes may decode to text with surrogates (a cheap test on the bytes)."""
    return _ESCAPED_SURROGATE.search(raw) is not None


def clean_text(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD."""
    if not has_surrogates(text):
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def first_surrogate(value: Any) -> str | None:
    """The first surrogate in a JSON-like value, as an escape (``\\ud800``), or None."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return f"\\u{ord(found.group()):04x}" if found else None
    if isinstance(value, dict):
        for k, v in value.items():
            hit = first_surrogate(k) or first_surrogate(v)
            if hit:
                return hit
    elif isinstance(value, list):
        for v in value:
            hit = first_surrogate(v)
            if hit:
                return hit
    return None


def scrub(value: Any) -> tuple[Any, int]:
    """``value`` (str, or dicts and lists of them) with surrogates replaced by U+FFFD, and how
    many were replaced. Unchanged parts are returned as they are (not copied)."""
    if isinstance(value, str):
        if not has_surrogates(value):
            return value, 0
        return _SURROGATE.subn(REPLACEMENT, value)
    if isinstance(value, dict):
        total = 0
        out: dict[Any, Any] | None = None
        for k, v in value.items():
            new_k, nk = scrub(k) if isinstance(k, str) else (k, 0)
            new_v, nv = scrub(v)
            if nk or nv:
                if out is None:
                    out = {}
                    for k2, v2 in value.items():
                        if k2 == k:
                            break
                        out[k2] = v2
                total += nk + nv
            if out is not None:
                out[new_k] = new_v
        return (out if out is not None else value), total
    if isinstance(value, list):
        total = 0
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new_v, n = scrub(v)
            if n and items is None:
                items = list(value[:i])
            if items is not None:
                items.append(new_v)
            total += n
        return (items if items is not None else value), total
    return value, 0
