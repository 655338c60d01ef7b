"""Notebook-level services of the canonical profile: export, import and visualise.

Compatibility profiles reuse these through the workspace (and the result models here) and only
rename them.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal

from mcp_types import BlobResourceContents, EmbeddedResource, ImageContent
from pydantic import BaseModel, Field

from nbrelay.errors import InvalidArgument
from nbrelay.tools import results
from nbrelay.tools._boundary import Registrar
from nbrelay.tools.arguments import NbPath, Ref
from nbrelay.tools.results import VisualData
from nbrelay.tools.uris import export_uri, output_uri
from nbrelay.workspace import ExportOutcome, Workspace

ExportFormat = Literal["ipynb", "json", "markdown", "html", "pdf", "script", "percent", "myst"]
ImportFormat = Literal["auto", "ipynb", "json", "markdown", "myst", "percent", "light"]

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


class VisualResult(VisualData):
    path: str
    cell: str


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


def register(reg: Registrar, ws: Workspace) -> None:
    """Register export_notebook, import_notebook and visualize_cell."""

    @reg.tool(kind="write", example=False)
    async def export_notebook(
        path: NbPath,
        format: ExportFormat = "ipynb",
        outputs: bool = True,
        save: Annotated[bool, Field(description="Write it next to the notebook.")] = False,
        to: Annotated[str | None, Field(description="Or write it to this path.")] = None,
        overwrite: bool = False,
        max_chars: Annotated[int, Field(ge=1000, le=5_000_000)] = 100_000,
    ) -> Any:
        """Export a notebook: text in `content`, PDF as an embedded resource; save/to write a file (overwrite=true replaces one).

        Example: export_notebook(path="eda.ipynb", format="pdf", save=true).
        """
        done = await ws.export_notebook(
            path,
            format,
            outputs=outputs,
            save=save,
            to=to,
            overwrite=overwrite,
            image_link=lambda cell, k, mime: output_uri(ws.relative(path), cell, k, mime),
            max_chars=max_chars,
        )
        return export_result(done, max_chars)

    @reg.tool(kind="write", example=False)
    async def import_notebook(
        path: NbPath,
        content: Annotated[
            str | dict[str, Any] | None, Field(description="Text or notebook JSON.")
        ] = None,
        source: Annotated[str | None, Field(description="Or a file under the root.")] = None,
        format: ImportFormat = "auto",
        overwrite: bool = False,
    ) -> results.EditResult:
        """Create a notebook from ipynb/JSON, Markdown, MyST, or a percent (# %%) or light script.

        Example: import_notebook(path="a.ipynb", source="a.py").
        """
        text = json.dumps(content) if isinstance(content, dict) else content
        snap = await ws.import_notebook(
            path, content=text, source=source, fmt=format, overwrite=overwrite
        )
        changed = [results.CellLoc(index=i, id=c) for i, c in enumerate(snap.notebook.ids)]
        return results.EditResult(path=snap.path, version=snap.version, changed=changed)

    @reg.tool(kind="execute", example=False)
    async def visualize_cell(
        path: NbPath,
        cell: Ref,
        type: Literal["auto", "chart", "table", "graph"] = "auto",
        options: Annotated[
            dict[str, Any] | None,
            Field(
                description="x, y, chart (line|bar|scatter|hist|pie), title, max_rows, expression."
            ),
        ] = None,
    ) -> Any:
        """Show a run cell's last expression as a chart or graph image, or as table rows.

        Example:
        visualize_cell(path="eda.ipynb", cell="a1b2c3d4", options={"x": "month", "chart": "bar"}).
        """
        done = await ws.visualize_cell(path, cell, kind=type, options=options)
        png = done.pop("png", None)
        result = VisualResult(**done)
        if png is None:
            return result
        result.rows = None  # the picture shows them
        return result, ImageContent(type="image", data=png, mime_type="image/png")
