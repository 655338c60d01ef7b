"""The notebook as a file: export it to another format, import one, and wait until it is saved.

In live mode an edit returns once JupyterLab has it, and the file is saved just after;
``save_notebook`` waits until the file holds every edit so far.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nbrelay.caller import Caller
from nbrelay.tools import results
from nbrelay.tools.arguments import NbPath
from nbrelay.tools.services import export_result
from nbrelay.tools.uris import output_uri
from nbrelay.workspace import Workspace

ExportFormat = Literal["ipynb", "json", "markdown", "html", "pdf", "script", "percent", "myst"]
ImportFormat = Literal["auto", "ipynb", "json", "markdown", "myst", "percent", "light"]


class SaveResult(BaseModel):
    path: str
    version: str
    saved: bool = True


async def export_notebook(
    ws: Workspace,
    caller: Caller,
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
    done = await ws.transfer.export_notebook(
        path,
        caller,
        format,
        outputs=outputs,
        save=save,
        to=to,
        overwrite=overwrite,
        image_link=lambda cell, k, mime: output_uri(ws.notebooks.relative(path), cell, k, mime),
        max_chars=max_chars,
    )
    return export_result(done, max_chars)


async def import_notebook(
    ws: Workspace,
    caller: Caller,
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
    snap = await ws.transfer.import_notebook(
        path, caller, content=text, source=source, fmt=format, overwrite=overwrite
    )
    return results.created_result(snap)


async def save_notebook(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
) -> SaveResult:
    """Wait until the file holds every edit so far (live mode saves ~0.5 s after an edit);
    use before git or any other program reads it."""
    snap = await ws.notebooks.save(path, caller)
    return SaveResult(path=snap.path, version=snap.version)
