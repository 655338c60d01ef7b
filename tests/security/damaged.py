"""Damaged notebook files, one per kind of damage: what a crash, a bad merge, a buggy tool or a
hostile file can leave on disk. Each is a name and the file's bytes.

The kinds: truncated and otherwise broken JSON; every field of the notebook, its metadata, its
cells and their outputs given a wrong type or left out; huge and deeply nested values; enormous
strings and integers; unknown nbformat versions; bad base64 images; invalid UTF-8, BOMs and
UTF-16; non-object cells; duplicate and invalid ids; outputs of the wrong shape; metadata bombs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

# Values of the wrong type, for any field.
WRONG: list[tuple[str, Any]] = [
    ("null", None),
    ("int", 7),
    ("float", 1.5),
    ("bool", True),
    ("string", "oops"),
    ("list", [1, "a", None]),
    ("object", {"a": {"b": 1}}),
]


def good() -> dict[str, Any]:
    """A small valid notebook with every kind of cell and output."""
    return {
        "cells": [
            {
                "cell_type": "markdown",
                "id": "m0",
                "metadata": {},
                "source": ["# Title\n", "Some *text*."],
                "attachments": {"a.png": {"image/png": PNG}},
            },
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "c1",
                "metadata": {"tags": ["t"]},
                "outputs": [
                    {"name": "stdout", "output_type": "stream", "text": ["3.14\n"]},
                    {
                        "data": {"image/png": PNG, "text/plain": ["<Figure>"]},
                        "metadata": {},
                        "output_type": "display_data",
                    },
                    {
                        "data": {"text/plain": ["42"], "text/html": ["<b>42</b>"]},
                        "execution_count": 1,
                        "metadata": {},
                        "output_type": "execute_result",
                    },
                    {
                        "ename": "ValueError",
                        "evalue": "bad",
                        "output_type": "error",
                        "traceback": ["\u001b[31mValueError\u001b[0m: bad"],
                    },
                ],
                "source": ["import math\n", "print(math.pi)"],
            },
            {"cell_type": "raw", "id": "r2", "metadata": {}, "source": "raw text"},
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "c3",
                "metadata": {},
                "outputs": [],
                "source": "x = 1",
            },
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _dump(value: Any) -> bytes:
    return json.dumps(value, indent=1).encode()


def _set(nb: dict[str, Any], where: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(nb)
    target = out
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return out


def _drop(nb: dict[str, Any], where: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(nb)
    target = out
    for key in where[:-1]:
        target = target[key]
    del target[where[-1]]
    return out


def _nested(levels: int, leaf: str = "[]") -> str:
    return "[" * levels + leaf + "]" * levels


# Every field a notebook has, by its path in good(): each is given each wrong type, and dropped.
FIELDS: list[list[Any]] = [
    ["cells"],
    ["metadata"],
    ["nbformat"],
    ["nbformat_minor"],
    ["metadata", "kernelspec"],
    ["metadata", "kernelspec", "name"],
    ["metadata", "kernelspec", "language"],
    ["metadata", "language_info"],
    ["metadata", "language_info", "name"],
    ["cells", 0],
    ["cells", 0, "cell_type"],
    ["cells", 0, "id"],
    ["cells", 0, "metadata"],
    ["cells", 0, "source"],
    ["cells", 0, "attachments"],
    ["cells", 0, "attachments", "a.png"],
    ["cells", 0, "attachments", "a.png", "image/png"],
    ["cells", 1, "execution_count"],
    ["cells", 1, "outputs"],
    ["cells", 1, "metadata", "tags"],
    ["cells", 1, "outputs", 0],
    ["cells", 1, "outputs", 0, "output_type"],
    ["cells", 1, "outputs", 0, "name"],
    ["cells", 1, "outputs", 0, "text"],
    ["cells", 1, "outputs", 1, "data"],
    ["cells", 1, "outputs", 1, "data", "image/png"],
    ["cells", 1, "outputs", 1, "data", "text/plain"],
    ["cells", 1, "outputs", 1, "metadata"],
    ["cells", 1, "outputs", 2, "execution_count"],
    ["cells", 1, "outputs", 2, "data", "text/html"],
    ["cells", 1, "outputs", 3, "ename"],
    ["cells", 1, "outputs", 3, "evalue"],
    ["cells", 1, "outputs", 3, "traceback"],
    ["cells", 2, "source"],
    ["cells", 3, "source"],
    ["cells", 3, "outputs"],
]


def damaged() -> Iterator[tuple[str, bytes]]:
    """Every kind of damage (a few hundred files)."""
    nb = good()
    base = _dump(nb)
    # Broken JSON and encodings.
    for cut in (0, 1, 10, len(base) // 3, len(base) // 2, len(base) - 2):
        yield f"truncated at {cut}", base[:cut]
    yield "empty", b""
    yield "only whitespace", b"  \n\t "
    yield "NUL bytes", b"\x00" * 64
    yield "not JSON", b"hello world"
    yield "trailing garbage", base + b"}}"
    yield "two documents", base + base
    yield "BOM", b"\xef\xbb\xbf" + base
    yield "two BOMs", b"\xef\xbb\xbf\xef\xbb\xbf" + base
    yield "UTF-16", base.decode().encode("utf-16")
    yield "UTF-32", base.decode().encode("utf-32")
    yield "invalid UTF-8 in a string", base.replace(b"Title", b"T\xe9tle")
    yield "invalid UTF-8 lead bytes", base.replace(b"raw text", b"raw \xff\xfe text")
    yield "overlong UTF-8", base.replace(b"raw text", b"raw \xc0\xaf text")
    yield "NaN", base.replace(b'"execution_count": 1,\n', b'"execution_count": NaN,\n', 1)
    yield "Infinity", base.replace(b'"nbformat_minor": 5', b'"nbformat_minor": Infinity')
    yield "lone surrogates", base.replace(b"raw text", b"raw \\ud800 \\udfff text")
    yield "control characters", base.replace(b"raw text", b"raw \\u0000\\u001b text")
    # The top level.
    yield "top level a list", _dump([nb])
    yield "top level a string", b'"notebook"'
    yield "top level null", b"null"
    yield "top level a number", b"4"
    yield "empty object", b"{}"
    for version in (0, 1, 2, 3, 5, 99, -4, 4.0, 4.5, "4", None, 10**30):
        yield f"nbformat {version!r}", _dump({**nb, "nbformat": version})
    for minor in (-1, 0, 4, 99, 10**30, "5", None, 4.5):
        yield f"nbformat_minor {minor!r}", _dump({**nb, "nbformat_minor": minor})
    yield (
        "nbformat 3 notebook",
        _dump({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]}),
    )
    yield "nbformat 3 broken", _dump({"nbformat": 3, "nbformat_minor": 0, "worksheets": 7})
    # Every field with a wrong type, and without it.
    for where in FIELDS:
        label = "/".join(map(str, where))
        for name, value in WRONG:
            yield f"{label} is {name}", _dump(_set(nb, where, value))
        yield f"{label} missing", _dump(_drop(nb, where))
    # Cells.
    yield "no cells", _dump({**nb, "cells": []})
    yield "cells of every JSON type", _dump({**nb, "cells": [1, "two", None, True, [], {}]})
    yield "unknown cell type", _dump(_set(nb, ["cells", 2, "cell_type"], "heading"))
    yield "duplicate ids", _dump({**nb, "cells": [nb["cells"][3]] * 3})
    yield "ids that look like indexes", _dump(_set(nb, ["cells", 3, "id"], "0"))
    yield "empty id", _dump(_set(nb, ["cells", 3, "id"], ""))
    yield "invalid id characters", _dump(_set(nb, ["cells", 3, "id"], "a b/c\n" * 20))
    yield "huge id", _dump(_set(nb, ["cells", 3, "id"], "i" * 100_000))
    yield (
        "code fields on markdown",
        _dump(_set(nb, ["cells", 0, "outputs"], [{"output_type": "stream", "text": "x"}])),
    )
    yield "source list of non-strings", _dump(_set(nb, ["cells", 3, "source"], ["a", 1, None]))
    # Outputs of the wrong shape.
    shapes: list[Any] = [
        {"output_type": "stream"},
        {"output_type": "stream", "name": "stdout", "text": 5},
        {"output_type": "stream", "name": "stdout", "text": [1, 2]},
        {"output_type": "display_data", "data": "text"},
        {"output_type": "display_data", "data": {"text/plain": 5}},
        {"output_type": "display_data", "data": {"text/plain": [1, None]}},
        {"output_type": "display_data", "data": {"application/json": "not json"}},
        {"output_type": "display_data", "data": {"image/png": "!!not base64!!"}},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}},
        {"output_type": "display_data", "data": {"image/png": 5}},
        {"output_type": "display_data", "data": {"image/svg+xml": ["<svg", 1]}},
        {"output_type": "display_data", "data": {}},
        {"output_type": "execute_result", "data": {"text/plain": "1"}, "execution_count": "x"},
        {"output_type": "error", "ename": 1, "evalue": None, "traceback": "tb"},
        {"output_type": "error", "traceback": [1, None, {}]},
        {"output_type": "weird"},
        {"text": "no type"},
        "a string output",
        None,
        [],
    ]
    for k, shape in enumerate(shapes):
        yield f"output shape {k}", _dump(_set(nb, ["cells", 1, "outputs"], [shape]))
    # Size and depth.
    deep = json.dumps(nb).replace('"raw text"', '"DEEP"')
    for levels in (100, 1_000, 100_000):
        yield f"source nested {levels} deep", deep.replace('"DEEP"', _nested(levels)).encode()
        meta = _dump({**nb, "metadata": {**nb["metadata"], "x": "DEEP"}}).decode()
        yield f"metadata nested {levels} deep", meta.replace('"DEEP"', _nested(levels)).encode()
    out = _dump(_set(nb, ["cells", 1, "outputs", 1, "data", "application/json"], "DEEP")).decode()
    yield "output JSON nested 100000 deep", out.replace('"DEEP"', _nested(100_000, "{}")).encode()
    yield "enormous source", _dump(_set(nb, ["cells", 3, "source"], "y" * 20_000_000))
    yield "enormous line count", _dump(_set(nb, ["cells", 3, "source"], ["y\n"] * 2_000_000))
    yield "enormous output", _dump(_set(nb, ["cells", 1, "outputs", 0, "text"], "z" * 20_000_000))
    yield (
        "enormous image",
        _dump(_set(nb, ["cells", 1, "outputs", 1, "data", "image/png"], "A" * 20_000_000)),
    )
    yield (
        "enormous integer",
        base.replace(b'"execution_count": 1,', b'"execution_count": 1' + b"0" * 5000 + b",", 1),
    )
    yield "huge integers", _dump(_set(nb, ["cells", 1, "execution_count"], 10**100))
    yield "huge float", base.replace(b'"nbformat_minor": 5', b'"nbformat_minor": 1e999')
    yield (
        "many cells",
        _dump({**nb, "cells": [nb["cells"][3] | {"id": f"c{i}"} for i in range(20_000)]}),
    )
    yield (
        "many outputs",
        _dump(_set(nb, ["cells", 1, "outputs"], [nb["cells"][1]["outputs"][0]] * 50_000)),
    )
    yield (
        "metadata bomb: wide",
        _dump({**nb, "metadata": {**nb["metadata"], **{f"k{i}": i for i in range(200_000)}}}),
    )
    yield (
        "metadata bomb: cell",
        _dump(_set(nb, ["cells", 3, "metadata"], {f"k{i}": [i] * 10 for i in range(50_000)})),
    )
    yield "metadata bomb: long key", _dump(_set(nb, ["metadata", "k" * 5_000_000], 1))
    yield (
        "many attachments",
        _dump(
            _set(
                nb,
                ["cells", 0, "attachments"],
                {f"a{i}.png": {"image/png": PNG} for i in range(20_000)},
            )
        ),
    )
    yield "duplicate keys", base.replace(b'"nbformat": 4,', b'"nbformat": 4, "nbformat": 3,')
