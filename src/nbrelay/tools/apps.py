"""MCP Apps (the ``io.modelcontextprotocol/ui`` extension): a notebook view hosts show in the chat.

``read_notebook`` and ``execute`` point at ``ui://nbrelay/notebook.html`` (``_meta.ui`` on the
tool). For a client that negotiated the extension, their results carry the notebook's cells,
sources, outputs (text, HTML tables, images, errors) and execution counts in the result's
``_meta`` under ``VIEW_KEY``: the host hands the result to the view, and ``_meta`` is not text the
model reads, so the view costs the agent nothing. Every other client gets exactly today's result
(no ``_meta``, no extra bytes).

The view is one self-contained HTML file (package data): no network fetches, no external
scripts, styles or fonts; notebook HTML outputs are shown in sandboxed frames without scripts.

Profiles can reuse it: ``VIEW_META`` for the tool and ``with_view(ctx, result, snapshot)`` for
the result.
"""

from __future__ import annotations

import base64
import re
from functools import cache
from importlib import resources
from typing import Any

from mcp.server.apps import Apps, ResourceCsp, client_supports_apps
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult

from nbrelay.notebook.text import clean_text
from nbrelay.stores.base import Snapshot
from nbrelay.tools._boundary import to_result

VIEW_URI = "ui://nbrelay/notebook.html"
VIEW_META: dict[str, Any] = {"ui": {"resourceUri": VIEW_URI}}
VIEW_KEY = "io.github.nbrelay/notebook"

# What one result may carry to the view: beyond these, outputs are cut or replaced by a note.
_MAX_TEXT = 20_000  # characters per text output
_MAX_IMAGE = 2_000_000  # base64 characters per image
_MAX_TOTAL = 8_000_000  # characters for the whole view
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")


@cache
def view_html() -> str:
    return resources.files("nbrelay.tools").joinpath("notebook_view.html").read_text("utf-8")


def extension() -> Apps:
    """The Apps extension serving the view (tools are bound through ``VIEW_META``)."""
    apps = Apps()
    apps.add_html_resource(
        VIEW_URI,
        view_html(),
        name="notebook",
        title="Notebook",
        description="The notebook's cells, sources, outputs and execution counts.",
        csp=ResourceCsp(connect_domains=[], resource_domains=[]),
        prefers_border=True,
    )
    return apps


def wants_view(ctx: Context[Any] | None) -> bool:
    """Whether the calling client negotiated MCP Apps (and so shows the view)."""
    if ctx is None:
        return False
    try:
        return client_supports_apps(ctx)
    except (AttributeError, LookupError, ValueError):  # no request in flight
        return False


def with_view(ctx: Context[Any] | None, value: Any, snap: Snapshot, **extra: Any) -> Any:
    """``value`` (a tool's return) with the notebook view in its ``_meta`` if the client shows
    views; unchanged otherwise."""
    if not wants_view(ctx):
        return value
    result = to_result(value)
    if not isinstance(result, CallToolResult):
        return value
    data = notebook_view(snap, **extra)
    result.meta = {**(result.meta or {}), VIEW_KEY: data}
    return result


def notebook_view(snap: Snapshot, *, ran: list[str] | None = None) -> dict[str, Any]:
    """The view's data: every cell with its source, execution count and outputs."""
    budget = [_MAX_TOTAL]
    cells = []
    for cell in snap.notebook.cells:
        source = str(cell.get("source", ""))
        budget[0] -= len(source)
        entry: dict[str, Any] = {
            "id": cell.get("id"),
            "type": cell.get("cell_type", "code"),
            "source": source,
        }
        if entry["type"] == "code":
            entry["count"] = cell.get("execution_count")
            entry["outputs"] = [_output(o, budget) for o in cell.get("outputs") or []]
        cells.append(entry)
    return {
        "path": snap.path,
        "version": snap.version,
        "language": snap.notebook.language or "python",
        "cells": cells,
        "ran": ran or [],
    }


def _text(value: Any) -> str:
    text = "".join(value) if isinstance(value, list) else str(value or "")
    return clean_text(text)


def _cut(text: str, budget: list[int]) -> str:
    limit = min(_MAX_TEXT, max(budget[0], 0))
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    budget[0] -= len(text)
    return text


def _output(out: dict[str, Any], budget: list[int]) -> dict[str, Any]:
    kind = out.get("output_type")
    if kind == "stream":
        return {
            "kind": "stream",
            "name": out.get("name", "stdout"),
            "text": _cut(_text(out.get("text")), budget),
        }
    if kind == "error":
        trace = _ANSI.sub("", "\n".join(_text(line) for line in out.get("traceback") or []))
        return {
            "kind": "error",
            "ename": str(out.get("ename", "")),
            "evalue": str(out.get("evalue", "")),
            "traceback": _cut(trace, budget),
        }
    data = out.get("data") or {}
    for mime in _IMAGES:
        if mime in data:
            raw = _text(data[mime])
            if mime == "image/svg+xml":
                raw = base64.b64encode(raw.encode("utf-8")).decode("ascii")
            raw = "".join(raw.split())
            if len(raw) <= min(_MAX_IMAGE, budget[0]):
                budget[0] -= len(raw)
                return {"kind": "image", "mime": mime, "data": raw}
            return {
                "kind": "text",
                "text": f"[{mime} image, {len(raw) * 3 // 4} bytes: too large for the view]",
            }
    if "text/html" in data:
        return {"kind": "html", "html": _cut(_text(data["text/html"]), budget)}
    if "text/markdown" in data:
        return {"kind": "text", "text": _cut(_text(data["text/markdown"]), budget)}
    if "text/plain" in data:
        return {"kind": "text", "text": _cut(_text(data["text/plain"]), budget)}
    return {"kind": "text", "text": f"[{', '.join(sorted(data)) or kind} output]"}
