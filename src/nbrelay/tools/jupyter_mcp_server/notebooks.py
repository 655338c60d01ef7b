"""jupyter-mcp-server's notebook and server tools: use_notebook, unuse_notebook, list_notebooks,
read_notebook, restart_notebook, list_files, list_kernels, connect_to_jupyter."""

from __future__ import annotations

import posixpath
import re
import time
from typing import Annotated, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from nbrelay import jupyter_api
from nbrelay.caller import Caller
from nbrelay.config import safe_url
from nbrelay.errors import InvalidArgument, NotebookNotFound
from nbrelay.notebook.edits import CellSpec
from nbrelay.tools.jupyter_mcp_server import views
from nbrelay.tools.jupyter_mcp_server.state import InUse, not_connected

NEW_NOTEBOOK_TEXT = "New Notebook Created by Jupyter MCP Server"

NotebookName = Annotated[str, Field(description="Name the notebook is in use under.")]


NO_KERNEL_YET = (
    "[INFO] Notebook opened. No active sandbox or Jupyter session was found, so no kernel was "
    "created; a kernel can be attached on first execution.\n"
)


def _kernel_line(state: InUse, path: str) -> str:
    """A notebook's kernel starts when its code first runs (as datalayer's server does with
    --start-new-code-sandbox false); one already running is named."""
    kernel = state.ws.kernels.kernel_info(path)
    return f"[INFO] Connected to kernel '{kernel.kernel_id}'.\n" if kernel else NO_KERNEL_YET


async def _exists(state: InUse, caller: Caller, path: str) -> bool:
    try:
        await state.ws.notebooks.read(path, caller)
        return True
    except NotebookNotFound:
        return False


async def use_notebook(
    state: InUse,
    caller: Caller,
    notebook_name: Annotated[
        str, Field(description="A name for the notebook; later calls pass it as notebook_name.")
    ],
    notebook_path: Annotated[
        str, Field(description="Path of the notebook, relative to the served root.")
    ],
    mode: Annotated[
        Literal["connect", "create"],
        Field(description="'connect' to open an existing notebook, 'create' to make a new one."),
    ] = "connect",
    kernel_id: Annotated[
        str | None,
        Field(description="Accepted for compatibility; each notebook runs in its own kernel."),
    ] = None,
) -> CallToolResult:
    """Open a notebook under a name, start its kernel, and make it the current notebook.

    Cell tools act on the current notebook unless given notebook_name. Returns the first 20 cells
    as a table (0-based Index, Type, Count, First Line).
    """
    # A path that leaves the root, is too long or is not a regular file is refused first.
    exists = await _exists(state, caller, notebook_path)
    known = state.paths.get(notebook_name)
    lines: list[str] = []
    if known is not None:
        if mode == "create":
            text = (
                f"Notebook '{notebook_name}'(path: {notebook_path}) is already created. DO NOT CREATE AGAIN."
                if known == notebook_path
                else f"Notebook '{notebook_name}' is already used. Use different notebook_name to create a new notebook on {notebook_path}."
            )
            return views.answer("notebook.use", text)
        if known != notebook_path:
            return views.answer(
                "notebook.use",
                f"The path '{notebook_path}' is not the correct path for notebook "
                f"'{notebook_name}'. Do you mean connect to '{known}'?",
            )
        if state.current == notebook_name:
            kernel = state.ws.kernels.kernel_info(known)
            backend = (
                f"It runs on execution backend '{kernel.kernel_id}'."
                if kernel
                else "No execution backend is attached yet; the first execution attaches one."
            )
            return views.answer(
                "notebook.use",
                f"Notebook '{notebook_name}' is already connected — no need to call "
                f"use_notebook again. {backend}",
            )
        lines.append(
            f"[INFO] Reactivating notebook '{notebook_name}' and deactivating '{state.current}'."
        )
        state.current = notebook_name
    else:
        if mode == "connect" and not exists:
            folder = posixpath.dirname(notebook_path)
            if folder and not await state.ws.documents.document_exists(folder, caller):
                text = f"'{folder}' not found in jupyter server, please check the directory path already exists."
            else:
                text = f"'{notebook_path}' not found in jupyter server, please check the notebook already exists."
            return views.answer("notebook.use", text)
        if mode == "create":
            if exists:
                return views.answer(
                    "notebook.use",
                    f"'{notebook_path}' already exists in jupyter server, please use a different "
                    "path or use_mode='connect' to open it.",
                )
            await state.ws.notebooks.create_notebook(
                notebook_path, caller, [CellSpec("markdown", NEW_NOTEBOOK_TEXT)]
            )
        lines.append(_kernel_line(state, notebook_path))
        state.paths[notebook_name] = notebook_path
        state.current = notebook_name
        lines.append(f"[INFO] Successfully activate notebook '{notebook_name}'.\n")
    snap = await state.ws.notebooks.read(state.paths[notebook_name], caller)
    cells = list(snap.notebook.cells)
    text = "".join(lines)
    text += f"\nNotebook has {len(cells)} cells.\nShowing first {min(20, len(cells))} cells:\n\n"
    text += views.cells_view(cells, "brief", 0, 20)
    return views.answer("notebook.use", text)


async def unuse_notebook(state: InUse, notebook_name: NotebookName) -> CallToolResult:
    """Stop using a notebook (its kernel keeps running until nbrelay's idle reaper stops it).

    When it was the current notebook, the first one still in use becomes current.
    """
    if notebook_name not in state.paths:
        return views.answer("notebook.unuse", not_connected(notebook_name, state.names))
    was_current = state.current == notebook_name
    state.forget(notebook_name)
    text = f"Notebook '{notebook_name}' unused successfully."
    if was_current:
        text += (
            f" Current notebook switched to '{state.current}'."
            if state.current
            else " No notebooks remaining."
        )
    return views.answer("notebook.unuse", text)


async def list_notebooks(state: InUse) -> CallToolResult:
    """List the notebooks in use (from use_notebook, not a folder scan): name, path, kernel,
    and which one is current (✓)."""
    if not state.paths:
        return views.table(
            "notebooks.list",
            "No managed notebooks. Use the use_notebook tool to manage notebooks first.",
        )
    rows = []
    for name in sorted(state.paths):
        path = state.paths[name]
        kernel = state.ws.kernels.kernel_info(path)
        status = (
            "not_initialized" if kernel is None else "dead" if kernel.state == "dead" else "alive"
        )
        rows.append(
            [
                name,
                path,
                kernel.kernel_id if kernel else "-",
                status,
                "✓" if name == state.current else "",
            ]
        )
    text = views.tsv(["Name", "Path", "Kernel_ID", "Kernel_Status", "Activate"], rows)
    return views.table("notebooks.list", text)


async def read_notebook(
    state: InUse,
    caller: Caller,
    notebook_name: NotebookName,
    response_format: Annotated[
        Literal["brief", "detailed"],
        Field(description="'brief': first line and line count per cell; 'detailed': full sources."),
    ] = "brief",
    start_index: Annotated[int, Field(ge=0, description="First cell (0-based).")] = 0,
    limit: Annotated[int, Field(ge=0, description="How many cells (0: all).")] = 20,
) -> CallToolResult:
    """Read a notebook in use: per cell its 0-based index, type, execution count and source."""
    if notebook_name not in state.paths:
        return views.answer("notebook.read", not_connected(notebook_name, state.names))
    _, snap = await state.read(caller, notebook_name)
    cells = list(snap.notebook.cells)
    if start_index >= len(cells) and not (start_index == 0 and not cells):
        return views.answer(
            "notebook.read",
            f"Start index {start_index} is out of range. Notebook has {len(cells)} cells.",
        )
    text = f"Notebook {notebook_name} has {len(cells)} cells.\n\n"
    text += views.cells_view(cells, response_format, start_index, limit)
    return views.answer("notebook.read", text)


async def restart_notebook(
    state: InUse, caller: Caller, notebook_name: NotebookName
) -> CallToolResult:
    """Restart a notebook's kernel: its variables and imports are lost; cells are kept."""
    if notebook_name not in state.paths:
        return views.answer("notebook.restart", not_connected(notebook_name, state.names))
    await state.ws.kernels.restart_kernel(state.paths[notebook_name], caller)
    return views.answer(
        "notebook.restart",
        f"Notebook '{notebook_name}' kernel restarted successfully. Memory state and imported "
        "packages have been cleared.",
    )


def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` within a folder, ``**/`` any folders, ``**`` anything."""
    parts, at = [], 0
    for token in re.finditer(r"\*\*/|\*\*|[*?]|\[[^\]]*\]", pattern):
        parts.append(re.escape(pattern[at : token.start()]))
        text = token.group()
        parts.append(
            {"**/": r"(?:[^/]+/)*", "**": r".*", "*": r"[^/]*", "?": r"[^/]"}.get(text)
            or "[" + ("^" + text[2:-1] if text.startswith("[!") else text[1:-1]) + "]"
        )
        at = token.end()
    parts.append(re.escape(pattern[at:]))
    return re.compile("".join(parts) + r"\Z")


async def _walk(
    state: InUse, caller: Caller, folder: str, depth: int, max_depth: int, into: list[list[str]]
) -> None:
    try:
        if (
            depth == 0
            and folder
            and (await state.ws.documents.document(folder, caller)).type != "directory"
        ):
            raise InvalidArgument(f"'{folder}' is a file, not a folder: list_files lists folders.")
        found = await state.ws.documents.list_documents(folder, caller)
    except NotebookNotFound:
        # A missing folder is a row, as the Jupyter Server says it (a path leaving the root,
        # absolute or through a link, is refused).
        error = f"Error: 404: file or directory '/{folder}' does not exist"
        into.append([folder or "root", "error", "", error])
        return
    for doc in found:
        modified = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(doc.modified)) if doc.modified else ""
        )
        into.append([doc.path, doc.type, views.size(doc.size), modified])
        if doc.type == "directory" and depth < max_depth:
            await _walk(state, caller, doc.path, depth + 1, max_depth, into)


async def list_files(
    state: InUse,
    caller: Caller,
    path: Annotated[str, Field(description="Folder to list ('': the root).")] = "",
    max_depth: Annotated[int, Field(ge=0, le=3, description="How deep to go into subfolders.")] = 1,
    start_index: Annotated[int, Field(ge=0, description="First row (0-based).")] = 0,
    limit: Annotated[int, Field(ge=0, description="How many rows (0: all).")] = 25,
    pattern: Annotated[str, Field(description="Glob filter on paths, e.g. '**/*.ipynb'.")] = "",
) -> CallToolResult:
    """List files and folders under the served root, as a table (Path, Type, Size,
    Last_Modified), sorted by path."""
    rows: list[list[str]] = []
    await _walk(state, caller, "" if path in ("", "/") else path.rstrip("/"), 0, max_depth, rows)
    where = path or "root"
    if not rows:
        return views.answer("files.list", f"No files found in path '{where}'")
    rows.sort(key=lambda r: r[0])
    text = ""
    if pattern:
        matcher = _glob(pattern)
        rows = [r for r in rows if matcher.match(r[0])]
    if not rows:
        return views.answer(
            "files.list",
            f"No files matching pattern '{pattern}' found in path '{where}'"
            if pattern
            else f"No files found in path '{where}'",
        )
    if start_index >= len(rows):
        text += (
            "[WARNING] Start index is greater than the number of files: "
            f"start_index={start_index}, total_files={len(rows)}. Reset start_index to 0. \n"
        )
        start_index = 0
    end = min(start_index + limit, len(rows)) if limit > 0 else len(rows)
    text += f"Showing {start_index}-{end} of {len(rows)} files\n\n"
    text += views.tsv(["Path", "Type", "Size", "Last_Modified"], rows[start_index:end])
    return views.table("files.list", text)


async def list_kernels(state: InUse, caller: Caller) -> CallToolResult:
    """List the running kernels: id, kernelspec, language, state, last activity."""
    if state.ws.settings.no_execute:
        return views.table("kernels.list", "No kernels found on the Jupyter server.")
    running, specs = await state.ws.kernels.list_kernels(caller)
    if not running:
        return views.table("kernels.list", "No kernels found on the Jupyter server.")
    display = {s.name: s.display_name for s in specs}
    rows = [
        [
            k.kernel_id,
            k.name,
            display.get(k.name, "unknown"),
            k.language or "unknown",
            k.state,
            "unknown",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(k.last_activity)),
            "unknown",
        ]
        for k in running
    ]
    headers = ["ID", "Name", "Display_Name", "Language", "State", "Connections"]
    text = views.tsv([*headers, "Last_Activity", "Environment"], rows)
    return views.table("kernels.list", text)


async def connect_to_jupyter(
    state: InUse,
    jupyter_url: Annotated[str, Field(description="The Jupyter Server's URL.")],
    jupyter_token: Annotated[
        str | None, Field(description="Its token (nbrelay takes tokens from its own settings).")
    ] = None,
    document_provider: Annotated[
        str, Field(description="Where notebooks live; 'jupyter' is the only one.")
    ] = "jupyter",
) -> CallToolResult:
    """Check that nbrelay serves this Jupyter Server.

    nbrelay is pointed at its server when it starts (--jupyter-url, or as a server extension) and
    does not switch servers at run time: the URL it serves is accepted, any other refused.
    """
    configured = state.ws.settings.jupyter_url
    url = safe_url(jupyter_url)
    if configured is None:
        raise ToolError(
            f"Failed to connect to Jupyter server {url}: this nbrelay serves the notebooks under "
            "its root folder; start it with --jupyter-url to work with a running Jupyter Server."
        )
    if jupyter_api.base_url(jupyter_url) != jupyter_api.base_url(configured):
        raise ToolError(
            f"Failed to connect to Jupyter server {url}: this nbrelay serves "
            f"{safe_url(configured)}; start another nbrelay with --jupyter-url for that server."
        )
    auth = "Token-based" if jupyter_token else "None (anonymous)"
    return views.answer(
        "jupyter.connect",
        f"Successfully connected to Jupyter server: {url}\nDocumentProvider: "
        f"{document_provider}\nAuthentication: {auth}",
    )
