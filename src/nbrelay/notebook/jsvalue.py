"""JavaScript values as Deno prints them, read as data (never evaluated).

``js_literal('[ { month: "Oct", revenue: 125000n } ]')`` is ``[{"month": "Oct", "revenue":
125000}]``: arrays, objects with bare or quoted keys, strings in any of JavaScript's three
quotes, numbers (BigInt too), booleans, null and undefined. Anything else (functions, classes,
cut-off output) is a ``ValueError``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`(?:[^`\\$]|\\.)*`)
  | (?P<num>-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)n?)
  | (?P<word>[A-Za-z_$][\w$]*)
  | (?P<punct>[\[\]{}:,])
    )""",
    re.VERBOSE,
)


def js_literal(text: str) -> Any:
    """Read a value as Deno prints it (``[ { month: "Oct", revenue: 125000 } ]``): arrays,
    objects with bare or quoted keys, strings, numbers, booleans, null and undefined. Anything
    else (functions, classes, cut-off output) is a ``ValueError``; nothing is ever evaluated."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    stripped = text.strip()
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"unexpected {stripped[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    value, end = _parse(tokens, 0)
    if end != len(tokens):
        raise ValueError("more than one value")
    return value


def _parse(tokens: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    if i >= len(tokens):
        raise ValueError("the value ends early")
    kind, text = tokens[i]
    if kind == "str":
        body = text[1:-1]
        if text[0] != '"':  # 'single' or `backtick` (Deno's choice when the text has quotes)
            quote = text[0]
            body = body.replace('\\"', '"').replace('"', '\\"').replace("\\" + quote, quote)
        return json.loads(f'"{body}"'), i + 1
    if kind == "num":
        return (int(text[:-1]) if text.endswith("n") else json.loads(text)), i + 1
    if kind == "word":
        words = {"true": True, "false": False, "null": None, "undefined": None}
        if text in words:
            return words[text], i + 1
        raise ValueError(f"{text!r} is not data")
    if text == "[":
        items: list[Any] = []
        i += 1
        while i < len(tokens) and tokens[i][1] != "]":
            item, i = _parse(tokens, i)
            items.append(item)
            if i < len(tokens) and tokens[i][1] == ",":
                i += 1
        if i >= len(tokens):
            raise ValueError("an array is not closed")
        return items, i + 1
    if text == "{":
        obj: dict[str, Any] = {}
        i += 1
        while i < len(tokens) and tokens[i][1] != "}":
            key_kind, key = tokens[i]
            if key_kind == "str":
                key = _parse(tokens, i)[0]
            elif key_kind not in ("word", "num"):
                raise ValueError(f"unexpected {key!r} in an object")
            if i + 1 >= len(tokens) or tokens[i + 1][1] != ":":
                raise ValueError("an object key has no value")
            obj[key], i = _parse(tokens, i + 2)
            if i < len(tokens) and tokens[i][1] == ",":
                i += 1
        if i >= len(tokens):
            raise ValueError("an object is not closed")
        return obj, i + 1
    raise ValueError(f"unexpected {text!r}")
