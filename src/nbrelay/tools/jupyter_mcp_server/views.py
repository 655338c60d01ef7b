"""How datalayer's jupyter-mcp-server 2.2.4 words its answers: the brief cell table, the detailed
listing, a cell's header, the unified diff of an edit, outputs as text, file sizes, the three
result shapes (``{kind, result}``, with ``outputs`` for outputs, with ``columns``/``items`` for a
table), and its error words. Values in, values out."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from mcp_types import CallToolResult, ContentBlock, ImageContent, TextContent

from nbrelay.errors import Vocabulary
from nbrelay.notebook.edits import unified_diff
from nbrelay.notebook.model import Cell

CELL_ID_META = "io.jupyter-mcp/cell_id"

_AGAIN = "Call read_notebook to see the notebook as it is now, then retry."
# How errors say things here (see nbrelay.errors): this profile's tools, cells numbered from 0.
WORDS = Vocabulary(
    {
        "index_rule": "Indexes are 0-based.",
        "see_cells": "Call read_notebook to see the cells.",
        "read_again": _AGAIN,
        "stale": _AGAIN,
        "positions": _AGAIN,
        "reread_cell": "Read the cell again (read_cell) and redo your edit on its current source.",
        "missing": "Call list_files to see the files, or use_notebook with mode 'create' to "
        "make it.",
        "list_all": "list_files with no path lists everything.",
        "see_paths": "Give a path relative to the root; list_files shows what is there.",
        "read_it": "Read it with read_notebook.",
        "read_later": "Read it with read_notebook in a minute, or create it under another name.",
        "restart": "call restart_notebook",
        "interrupt": "restart it (restart_notebook)",
        "start_kernel": "Run a cell with execute_cell to start one; list_kernels shows the "
        "running kernels.",
        "run_first": "Run it first (execute_cell)",
    }
)

# Every escape a kernel can write (CSI, OSC, DCS and the two-character forms).
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[P^_X][^\x1b]*\x1b\\|[ -/]*[0-~])"
)
_RICH_TEXT = ("text/markdown", "text/latex", "application/json", "text/plain")


def joined(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return "" if value is None else str(value)


def source_lines(cell: Cell) -> list[str]:
    return joined(cell.get("source")).splitlines(keepends=True)


def readable_source(cell: Cell) -> str:
    return "\n".join(line.rstrip("\n") for line in source_lines(cell))


def count_of(cell: Cell) -> Any:
    return cell.get("execution_count") or "N/A"


def overview(cell: Cell) -> str:
    """The first line, and how many more there are."""
    lines = source_lines(cell)
    if not lines:
        return ""
    first = lines[0].rstrip("\n")
    return f"{first}...({len(lines) - 1} lines hidden)" if len(lines) > 1 else first


def tsv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not headers or not rows:
        return "No data to display"
    return "\n".join(["\t".join(headers), *("\t".join(str(c) for c in row) for row in rows)])


def header(index: int, cell: Cell) -> str:
    return f"=====Cell {index} | type: {cell.get('cell_type')} | execution count: {count_of(cell)}====="


def cells_view(cells: Sequence[Cell], fmt: str = "brief", start: int = 0, limit: int = 0) -> str:
    """The cells from ``start`` (``limit`` 0: all), as a brief table or in full."""
    if not cells:
        return "Notebook is empty"
    end = len(cells) if limit == 0 else min(start + limit, len(cells))
    shown = list(enumerate(cells))[start:end]
    if not shown:
        return "No cells in the specified range"
    if fmt == "brief":
        rows = [[i, c.get("cell_type"), count_of(c), overview(c)] for i, c in shown]
        return tsv(["Index", "Type", "Count", "First Line"], rows)
    parts: list[str] = []
    for i, c in shown:
        parts += [header(i, c) + "\n", readable_source(c), "\n\n"]
    return "\n".join(parts)


def diff(old: str, new: str) -> str:
    """A source change as the original shows it: difflib's unified diff (3 lines of context,
    no file names), or what changed when only line terminators did."""
    if old == new:
        return "no changes detected"
    lines = unified_diff(old, new, context=3, labels=("", ""))
    return lines or f"@@ line terminators changed @@\n-{old!r}\n+{new!r}"


def edited(kind: str, verb: str, index: int, old: str, new: str, cell_id: str) -> CallToolResult:
    """The answer to an edit of a cell's source: ``Cell <index> <verb> successfully!`` and the
    diff, or that nothing changed."""
    changes = diff(old, new)
    text = (
        f"Cell {index} {verb} successfully - no changes detected"
        if changes == "no changes detected"
        else f"Cell {index} {verb} successfully!\n\n```diff\n{changes}\n```"
    )
    return answer(kind, text, cell_id=cell_id)


def output_text(out: dict[str, Any]) -> str | ImageContent:
    """One output as datalayer shows it: a stream's text, the richest readable text of a
    bundle (a PNG as an image), an error's traceback, without ANSI escapes."""
    kind = out.get("output_type")
    if kind == "stream":
        return _ANSI.sub("", joined(out.get("text")))
    if kind in ("display_data", "execute_result"):
        data = out.get("data") or {}
        if "image/png" in data:
            return ImageContent(mime_type="image/png", data=joined(data["image/png"]))
        for mime in _RICH_TEXT:
            if mime in data:
                value = data[mime]
                if mime == "application/json" and not isinstance(value, str):
                    return json.dumps(value, indent=2, ensure_ascii=False)
                return _ANSI.sub("", joined(value))
        if "text/html" in data:
            return "[HTML Output]"
        return f"[{kind} Data: keys={list(data)}]"
    if kind == "error":
        rendered = "\n".join(_ANSI.sub("", str(line)) for line in out.get("traceback") or [])
        if rendered.strip():
            return rendered
        parts = [str(out.get(k) or "").strip() for k in ("ename", "evalue")]
        return ": ".join(p for p in parts if p) or "[Error output with no details]"
    return f"[Unknown output type: {kind}]"


def outputs_of(outs: Sequence[dict[str, Any]]) -> list[str | ImageContent]:
    return [shown for shown in (output_text(o) for o in outs) if shown]


def size(n: int | None) -> str:
    if n is None:
        return ""
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}KB"
    return f"{n / (1024 * 1024):.1f}MB"


def _meta(cell_id: str | None) -> dict[str, Any] | None:
    return {CELL_ID_META: cell_id} if cell_id else None


def answer(kind: str, text: str, *, cell_id: str | None = None) -> CallToolResult:
    """A message: ``{kind, result}``."""
    return CallToolResult(
        content=[TextContent(text=text)],
        structured_content={"kind": kind, "result": text},
        _meta=_meta(cell_id),
    )


def table(kind: str, text: str) -> CallToolResult:
    """A tab-separated listing, also as rows keyed by its header."""
    lines = [line for line in text.splitlines() if line.strip()]
    data: dict[str, Any] = {"kind": kind, "result": text}
    if len(lines) >= 2 and "\t" in lines[0]:
        head = [c.strip() for c in lines[0].split("\t")]
        items = [
            dict(zip(head, (c.strip() for c in line.split("\t")), strict=False))
            for line in lines[1:]
            if "\t" in line
        ]
        data.update(columns=head, items=items, count=len(items))
    return CallToolResult(content=[TextContent(text=text)], structured_content=data)


def outputs(
    kind: str, values: Sequence[str | ImageContent], *, cell_id: str | None = None
) -> CallToolResult:
    """Outputs in order: text as text, an image as its own block and object."""
    blocks: list[ContentBlock] = []
    shown: list[Any] = []
    images = 0
    for v in values:
        if isinstance(v, ImageContent):
            images += 1
            blocks.append(v)
            shown.append(v.model_dump(mode="json", by_alias=True, exclude_none=True))
        else:
            blocks.append(TextContent(text=v))
            shown.append(v)
    return CallToolResult(
        content=blocks,
        structured_content={
            "kind": kind,
            "result": shown,
            "outputs": shown,
            "count": len(shown),
            "images": images,
        },
        _meta=_meta(cell_id),
    )
