"""jupyterlab-rtc's document tools: any file under the root."""

from __future__ import annotations

import base64
import json
import posixpath
from typing import Annotated, Literal

from mcp_types import CallToolResult
from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.notebook.model import parse
from nbrelay.tools.jupyterlab_rtc.views import (
    MAX_CONTENT,
    DocPath,
    Done,
    Exists,
    as_given,
    doc_view,
    json_reply,
    lab_path,
)
from nbrelay.workspace import Workspace


async def list_documents(
    ws: Workspace,
    caller: Caller,
    path: Annotated[
        str | None,
        Field(description="Path to list documents from (default: root directory)"),
    ] = None,
) -> CallToolResult:
    """List available documents in JupyterLab from a specified path.

    Returns an array of files, notebooks and folders directly in that folder.
    """
    return json_reply(
        [doc_view(d, path) for d in await ws.documents.list_documents(lab_path(path), caller)]
    )


async def create_document(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="Path for the new document")],
    type: Annotated[
        Literal["notebook", "file", "markdown"], Field(description="Document type")
    ] = "notebook",
    content: Annotated[str | None, Field(description="Initial content for the document")] = None,
) -> Done:
    """Create a new document in JupyterLab.

    Never replaces an existing file. A notebook path gets .ipynb and a markdown path .md if it
    has no extension; a notebook's content may be notebook JSON, Markdown or a script.
    """
    rel = lab_path(path)
    ext = posixpath.splitext(rel)[1]
    if type == "notebook" and ext != ".ipynb":
        rel += ".ipynb"
    elif type == "markdown" and not ext:
        rel += ".md"
    doc = await ws.documents.create_document(rel, caller, content)
    shown = as_given(path, doc.path)
    return Done(message=f"Document {shown} created successfully", path=shown)


async def get_document_info(ws: Workspace, caller: Caller, path: DocPath) -> CallToolResult:
    """Get information about a document.

    `content` is text (format "text"), base64 (format "base64"), the notebook JSON (format
    "json") or a folder's entries; files over 64 KB are cut (`truncated`: true).
    """
    doc = await ws.documents.document(lab_path(path), caller)
    info = doc_view(doc, path) | {"format": None, "mimetype": doc.mimetype, "content": None}
    if doc.type == "directory":
        info["format"] = "json"
        info["content"] = [
            doc_view(d, path) for d in await ws.documents.list_documents(doc.path, caller)
        ]
        return json_reply(info)
    raw, size = await ws.documents.read_document(doc.path, caller, limit=MAX_CONTENT)
    cut = size > len(raw)
    if doc.type == "notebook":
        info["format"] = "json"
        info["mimetype"] = "application/x-ipynb+json"
        if cut:
            info["note"] = "the notebook is too large to return whole: read it with read_nb_cells"
        else:
            parse(raw, name=doc.path)  # a damaged notebook gets an error naming the damage
            info["content"] = json.loads(raw)
        return json_reply(info)
    try:
        info["content"] = raw.decode("utf-8", errors="ignore" if cut else "strict")
        info["format"] = "text"
    except UnicodeDecodeError:
        info["content"] = base64.b64encode(raw).decode("ascii")
        info["format"] = "base64"
    if cut:
        info["truncated"] = True
        info["note"] = f"only the first {len(raw):,} of {size:,} bytes are shown"
    return json_reply(info)


async def delete_document(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="Path to the document to delete")],
) -> Done:
    """Delete a document in JupyterLab.

    Deletes a file, a notebook (its kernel is shut down) or an empty folder.
    """
    doc = await ws.documents.delete_document(lab_path(path), caller)
    shown = as_given(path, doc.path)
    return Done(message=f"Document {shown} deleted successfully", path=shown)


async def rename_document(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="Current path to the document")],
    newPath: Annotated[str, Field(description="New path for the document")],
) -> Done:
    """Rename a document in JupyterLab.

    Also moves it between folders; never replaces an existing file.
    """
    doc = await ws.documents.move_document(lab_path(path), lab_path(newPath), caller)
    shown = as_given(newPath, doc.path)
    return Done(message=f"Document renamed from {path} to {shown}", path=shown)


async def copy_document(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="Path to the document to copy")],
    copyPath: Annotated[str, Field(description="Path for the copied document")],
) -> Done:
    """Copy a document in JupyterLab.

    Never replaces an existing file.
    """
    doc = await ws.documents.move_document(
        lab_path(path), lab_path(copyPath), caller, keep_source=True
    )
    shown = as_given(copyPath, doc.path)
    return Done(message=f"Document {path} copied to {shown}", path=shown)


async def document_exists(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="Path to the document to check")],
) -> Exists:
    """Check if a document exists in JupyterLab."""
    return Exists(exists=await ws.documents.document_exists(lab_path(path), caller))
