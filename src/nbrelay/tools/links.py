"""Resource links in the canonical profile's results: where a result names a call to make for the
rest (an image placeholder, an output cut by the budget, a PDF export saved to a file), a
``resource_link`` content block gives the resource's URI, mime type and size, so that the model or
its host can fetch it (``nbrelay.tools.resources`` serves every one of these URIs).

The text stays as it is; the links follow it. Compatibility profiles keep their originals'
result shapes and get none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult, ResourceLink

from nbrelay.caller import Caller
from nbrelay.errors import NbrelayError
from nbrelay.notebook.address import resolve_one
from nbrelay.stores.base import Snapshot
from nbrelay.tools.uris import IMAGE_EXTENSIONS, export_uri, output_uri
from nbrelay.workspace import Workspace

# A result rarely needs more: each link costs the agent's context a few dozen bytes.
MAX_LINKS = 20
_IMAGE_MIMES = set(IMAGE_EXTENSIONS.values())


@dataclass(frozen=True)
class _Output:
    """An output a result shows and links to: its image format, or None for its whole text."""

    cell: str
    output: int
    image: str | None


def adder(ws: Workspace) -> Callable[[Any, Caller], Awaitable[Any]]:
    """What the canonical profile does to each result: ``add_links`` with ``ws``."""

    async def finish(result: Any, caller: Caller) -> Any:
        return await add_links(ws, caller, result)

    return finish


async def add_links(ws: Workspace, caller: Caller, result: Any) -> Any:
    """``result`` (a tool's ``CallToolResult``, made for ``caller``) with a ``resource_link``
    after its text for each image, cut output and saved PDF export it reports."""
    if not isinstance(result, CallToolResult) or result.is_error:
        return result
    data = result.structured_content
    if not isinstance(data, dict) or not isinstance(data.get("path"), str):
        return result
    path: str = data["path"]
    links = _export_links(data)
    outputs = list(_outputs(data))[: MAX_LINKS - len(links)]
    if outputs:
        snap = await _snapshot(ws, caller, path) if any(o.image for o in outputs) else None
        links.extend(_output_link(path, o, _image_size(snap, o)) for o in outputs)
    known = {b.uri for b in result.content if isinstance(b, ResourceLink)}
    links = [link for link in links if link.uri not in known]
    if not links:
        return result
    return result.model_copy(update={"content": [*result.content, *links]})


def _export_links(data: dict[str, Any]) -> list[ResourceLink]:
    if data.get("saved") and data.get("format") == "pdf" and "mime" in data:
        return [
            ResourceLink(
                name="export.pdf",
                uri=export_uri(data["path"]),
                mime_type="application/pdf",
                size=data.get("bytes"),
                description="The notebook printed to PDF.",
            )
        ]
    return []


def _outputs(data: dict[str, Any]) -> Iterator[_Output]:
    if "format" in data:  # an export
        return
    if "output" in data and "mime" in data:  # read_output
        if data.get("next_offset") is not None:  # more to read: the output's whole text
            yield _Output(str(data["id"]), int(data["output"]), None)
        return
    for cell in _cells(data):
        cid = cell.get("id")
        if not isinstance(cid, str):  # scratch code (execute(code=)) is not in the notebook
            continue
        for out in cell.get("outputs") or ():
            if not isinstance(out, dict) or not isinstance(out.get("output"), int):
                continue
            image = out.get("image")
            if isinstance(image, str) and image in _IMAGE_MIMES:
                yield _Output(cid, out["output"], image)
            elif out.get("cut") or out.get("omitted"):
                yield _Output(cid, out["output"], None)


def _cells(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The cells a result shows: a notebook's, one read cell, a finished run's (a run still
    going has not saved its outputs to the notebook yet), an edit's run."""
    for holder in (data, data.get("execution")):
        if not isinstance(holder, dict) or holder.get("status") not in (None, "done"):
            continue
        cells = holder.get("cells")
        if isinstance(cells, list):
            yield from (c for c in cells if isinstance(c, dict))
        cell = holder.get("cell")
        if isinstance(cell, dict):
            yield cell


async def _snapshot(ws: Workspace, caller: Caller, path: str) -> Snapshot | None:
    try:
        return await ws.notebooks.read(path, caller)
    except NbrelayError:  # gone since: the links say what they can without a size
        return None


def _image_size(snap: Snapshot | None, out: _Output) -> int | None:
    """The size in bytes of the image a link serves (results show its base64 characters)."""
    if snap is None or out.image is None:
        return None
    try:
        cell = snap.notebook.cells[resolve_one(snap.notebook.ids, out.cell)]
    except NbrelayError:
        return None
    outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
    found = outputs[out.output] if out.output < len(outputs) else {}
    value = (found.get("data") or {}).get(out.image)
    if not isinstance(value, str | list):
        return None
    text = "".join(value) if isinstance(value, list) else value
    if out.image == "image/svg+xml":
        return len(text.encode("utf-8"))
    b64 = "".join(text.split())
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def _output_link(path: str, out: _Output, size: int | None) -> ResourceLink:
    name = f"output {out.output} of cell {out.cell}"
    uri = output_uri(path, out.cell, out.output, out.image)
    if out.image is not None:
        return ResourceLink(
            name=name, uri=uri, mime_type=out.image, size=size, description="The image."
        )
    return ResourceLink(
        name=name,
        uri=uri,
        mime_type="application/json",
        description="The output with its whole text.",
    )
