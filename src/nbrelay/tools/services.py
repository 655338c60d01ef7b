"""An export as a tool result, for ``export_notebook`` and the profiles that export.

Compatibility profiles reuse the workspace's export and this shaping, and only rename the tool.
"""

from __future__ import annotations

import base64
from typing import Any

from mcp_types import BlobResourceContents, EmbeddedResource
from pydantic import BaseModel

from nbrelay.errors import InvalidArgument
from nbrelay.tools.uris import export_uri
from nbrelay.workspace import ExportOutcome

MAX_BLOB = 20 * 1024 * 1024


class ExportResult(BaseModel):
    path: str
    version: str
    format: str
    mime: str
    bytes: int
    content: str | None = None
    saved: list[str] | None = None
    resource: str | None = None
    note: str | None = None


def export_result(done: ExportOutcome, max_chars: int) -> ExportResult | tuple[Any, ...]:
    """Shape an export: saved files by path, text inline (within ``max_chars``), binary as an
    embedded resource whose URI can be read again."""
    ex, snap = done.exported, done.snapshot
    result = ExportResult(
        path=snap.path,
        version=snap.version,
        format=ex.format,
        mime=ex.mime,
        bytes=len(ex.data),
        note=" ".join(ex.notes) or None,
    )
    if done.saved:
        result.saved = list(done.saved)
        return result
    if ex.binary:
        if len(ex.data) > MAX_BLOB:
            raise InvalidArgument(
                f"the {ex.format} export is {len(ex.data):,} bytes, too large to return.",
                hint="Pass save=true to write it next to the notebook.",
            )
        uri = export_uri(snap.path, ex.format)
        result.resource = uri
        blob = BlobResourceContents(
            uri=uri, mime_type=ex.mime, blob=base64.b64encode(ex.data).decode("ascii")
        )
        return result, EmbeddedResource(type="resource", resource=blob)
    text = ex.data.decode("utf-8")
    if len(text) > max_chars:
        raise InvalidArgument(
            f"the {ex.format} export is {len(text):,} characters, over max_chars={max_chars:,}.",
            hint="Pass save=true to write it next to the notebook, or a larger max_chars.",
        )
    result.content = text
    return result
