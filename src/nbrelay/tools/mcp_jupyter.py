"""Profile ``mcp-jupyter``: the four consolidated tools of MCP Jupyter (block/mcp-jupyter 2.0.2).

Positions are 0-based; ``execution_count`` is the ``[n]`` number Jupyter shows. A notebook must be
viewed (``setup_notebook``, ``query_notebook`` view_source or get_position_index) before
``modify_notebook_cells`` may change it, and is refused again once someone else changes it, until
it is viewed again. Results are plain JSON values (dicts, lists, strings, integers) as in the
original; outputs have images replaced by a text indicator. Errors are MCP tool errors, except that
the markdown and delete operations report failures in an ``error`` field, as the original does.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from nbrelay import jupyter_api
from nbrelay.config import safe_url
from nbrelay.errors import InvalidArgument, NbrelayError, NotebookNotFound, Vocabulary
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import render
from nbrelay.notebook.address import describe_bounds
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Cell, Notebook
from nbrelay.tools._boundary import Kind, Registrar, compact_json
from nbrelay.tools.execution import follow, saved_then_run
from nbrelay.tools.results import iso
from nbrelay.workspace import Workspace

QUERY_TYPES = ("view_source", "check_server", "list_sessions", "get_position_index")
OPERATIONS = ("add_code", "edit_code", "add_markdown", "edit_markdown", "delete")
EXECUTION_TYPES = ("execute_cell", "install_packages")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
VIEW_HINT = (
    "Call query_notebook(query_type='view_source') to see the notebook as it is now, then retry."
)

# How errors say things here (see nbrelay.errors): this profile's tools and positions.
WORDS = Vocabulary(
    {
        "index_rule": "Positions (position_index) are 0-based.",
        "see_cells": "View the notebook with query_notebook to see the positions.",
        "read_again": VIEW_HINT,
        "stale": VIEW_HINT,
        "positions": VIEW_HINT,
        "reread_cell": "View the cell again (query_notebook) and redo your edit on its current "
        "source.",
        "missing": "Call setup_notebook to create it.",
        "read_it": "View it with query_notebook.",
        "read_later": "View it with query_notebook in a minute, or create it under another name.",
        "start_kernel": "Run a cell with execute_notebook_code to start one.",
    }
)

NotebookPath = Annotated[
    str,
    Field(
        description="Path to the notebook file (.ipynb extension will be added if missing), relative to the Jupyter server root."
    ),
]
PositionIndex = Annotated[
    int | float | None,
    Field(description="Cell position, 0-indexed (first cell = 0). Floats like 2.0 are accepted."),
]


def reply(value: Any) -> CallToolResult:
    """The original's plain return values: strings as text, other values as JSON text; the
    structured content is a dict itself, anything else wrapped as ``{"result": ...}``."""
    text = value if isinstance(value, str) else compact_json(value)
    structured = value if isinstance(value, dict) else {"result": value}
    return CallToolResult(content=[TextContent(text=text)], structured_content=structured)


def ipynb(path: str) -> str:
    return path if path.endswith(".ipynb") else f"{path}.ipynb"


def position(value: int | float | None) -> int | None:
    """``position_index`` as an int (models send 2.0); None stays None."""
    if value is None:
        return None
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgument(
                f"position_index={value} is not a whole number.",
                hint="Positions are 0-indexed integers: first cell = 0.",
            )
        value = int(value)
    if value < 0:
        raise InvalidArgument(
            f"position_index={value} is negative.", hint="Positions start at 0 (first cell)."
        )
    return value


def server_of(url: str) -> str:
    """A ``server_url`` as the server's base URL; refused unless http(s), without credentials."""
    if not url.strip().lower().startswith(("http://", "https://")):
        raise InvalidArgument(
            f"server_url {safe_url(url)!r} is not an http(s) URL.",
            hint="Give the address JupyterLab runs at, e.g. http://localhost:8888.",
        )
    try:
        return jupyter_api.base_url(url)
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"server_url cannot be used: {exc.message}",
            hint="Give the address JupyterLab runs at, e.g. http://localhost:8888, without a "
            "token in it.",
        ) from exc


def notebook_key(path: str) -> str:
    """The key a notebook's server is remembered under (its path relative to the root)."""
    return posixpath.normpath(ipynb(path)).lstrip("/")


def need_position(value: int | None, operation: str) -> int:
    if value is None:
        raise InvalidArgument(f"position_index is required for {operation} operation.")
    return value


def need_content(value: str | None, operation: str) -> str:
    if not value:
        raise InvalidArgument(f"cell_content is required for {operation} operation.")
    return value


def count_of(value: str | int | float) -> int:
    """``execution_count`` given as 3, 3.0, "3", "(3)" or "[3]"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    # Stripped first and bounded: with \s* on both sides the match took cubic time on a long
    # run of spaces (5,000 of them: 2.8 s in the event loop).
    text = str(value).strip()
    m = re.fullmatch(r"[\[(]?\s*(\d+)\s*[\])]?", text) if len(text) <= 100 else None
    if m is None:
        raise InvalidArgument(
            f"execution_count={value!r} is not a number.",
            hint="Give the number shown in square brackets, like 3 for [3].",
        )
    return int(m.group(1))


def index_of(
    nb: Notebook, *, execution_count: int | None = None, cell_id: str | None = None
) -> int:
    """The position of the one cell with that execution count or id."""
    if execution_count is not None:
        if execution_count < 1:
            raise InvalidArgument(
                f"execution_count={execution_count} is invalid. Execution counts start from 1.",
                hint="If you meant a position (0-indexed), use position_index instead.",
            )
        found = [i for i, c in enumerate(nb.cells) if c.get("execution_count") == execution_count]
        what = f"execution_count={execution_count}"
    else:
        found = [i for i, c in enumerate(nb.cells) if c.get("id") == cell_id]
        what = f"cell_id={cell_id}"
    if len(found) == 1:
        return found[0]
    if found:
        raise InvalidArgument(f"Found {len(found)} cells with {what} at positions {found}.")
    counts = sorted(c["execution_count"] for c in nb.cells if c.get("execution_count"))
    available = (
        f"Available execution_counts: {counts}"
        if counts
        else "No cells have been executed yet (all execution_counts are None)"
    )
    raise InvalidArgument(
        f"No cell found with {what}. {available}. {describe_bounds(len(nb.cells))}.",
        hint="Try position_index instead, or view the notebook with query_notebook.",
    )


def _text(value: Any) -> str:
    return "".join(str(v) for v in value) if isinstance(value, list) else str(value)


def shown_output(output: dict[str, Any], budget: render.Budget, hint: str) -> dict[str, Any]:
    """An output as the original returns it: images become a text indicator and HTML its text;
    long text is cut in the middle, within the call's shared ``budget``."""
    out = dict(output)

    def fit(text: str) -> str:
        shown, _, any_shown = budget.take(text, hint)
        if not any_shown and text:
            return f"[{len(text):,} characters not shown: the output budget is 0; {hint}]"
        return shown

    kind = out.get("output_type")
    if kind in ("display_data", "execute_result") and isinstance(out.get("data"), dict):
        data = dict(out["data"])
        images = [m.split("/")[1].upper() for m in IMAGE_TYPES if data.pop(m, None) is not None]
        html = data.pop("text/html", None)
        if html is not None and "text/plain" not in data:
            data["text/plain"] = render.html_to_text(_text(html))
        if images:
            indicator = f"Image generated ({', '.join(images)} format)"
            plain = _text(data.get("text/plain", ""))
            data["text/plain"] = f"{plain} - {indicator}" if plain else indicator
        if "text/plain" in data:
            data["text/plain"] = fit(_text(data["text/plain"]))
        out["data"] = data
    elif kind == "stream":
        out["text"] = fit(_text(out.get("text", "")))
    elif kind == "error":
        out["traceback"] = [
            fit(render.strip_ansi(str(line))) for line in out.get("traceback") or []
        ]
    return out


def shown_cell(cell: Cell, index: int, budget: render.Budget) -> dict[str, Any]:
    view = dict(cell)
    if "outputs" in view:
        hint = f"view this cell alone (position_index={index}) for more"
        outs = [o for o in view["outputs"] if isinstance(o, dict)]
        view["outputs"] = [shown_output(o, budget, hint) for o in outs]
    return view


def register(reg: Registrar, ws: Workspace) -> None:
    """Register the mcp-jupyter tools."""
    reg.exact = True
    reg.words = WORDS

    def budget() -> render.Budget:
        """The text one call may return: --output-budget per output, four times that in all."""
        limit = ws.settings.output_budget
        return render.Budget(limit * 4, limit)

    # Server URL tracking: the server each notebook was set up with (setup_notebook's
    # server_url), which check_server probes when it is given no server_url of its own.
    servers: dict[str, str] = {}
    configured = ws.settings.jupyter_url

    def served_here(url: str) -> bool:
        return configured is not None and url == jupyter_api.base_url(configured)

    # modify_notebook_cells runs code by default (execute=true), so it is announced as a tool
    # that runs code, unless this server runs none (then execute is ignored).
    runs: Kind = "destructive" if ws.settings.no_execute else "execute"

    async def run_cell(path: str, index: int, ctx: Context | None) -> dict[str, Any]:
        """Run the code cell at ``index`` to its end: {execution_count, outputs, status}."""
        snap = await ws.read(path)
        if index >= len(snap.notebook.cells):
            raise InvalidArgument(
                f"position_index={index} is out of range: {describe_bounds(len(snap.notebook.cells))}.",
                hint="View the notebook with query_notebook to see the positions.",
            )
        cell = snap.notebook.cells[index]
        if cell.get("cell_type") != "code":
            raise InvalidArgument(f"Cell at position {index} is not a code cell.")
        job: Job = await ws.execute(path, [cell["id"]])
        patience = ws.timeout_for(None) + ws.settings.interrupt_grace + 10
        await follow(ws, job, patience, ctx)
        run = job.cells[0]
        outputs = job.cell_outputs(run)
        result: dict[str, Any] = {
            "execution_count": run.execution_count,
            "outputs": budget().share(
                lambda b: [
                    shown_output(dict(o), b, "the whole output is saved in the notebook")
                    for o in outputs
                ]
            ),
            "status": run.status,
        }
        if run.message:
            result["message"] = run.message
        return result

    @reg.tool(kind="read")
    async def query_notebook(
        notebook_path: NotebookPath,
        query_type: Annotated[
            str,
            Field(
                description="One of: 'view_source' (view source code of notebook, single cell or all cells), 'check_server' (check if Jupyter server is running and accessible), 'list_sessions' (list all notebook sessions on the server), 'get_position_index' (get the index of a code cell)."
            ),
        ],
        execution_count: Annotated[
            str | int | float | None,
            Field(
                description='(For view_source/get_position_index) The execution count to look for: the number shown in square brackets like [3] in Jupyter. Can be 3, 3.0, "3" or "(3)". Don\'t confuse it with position_index.'
            ),
        ] = None,
        position_index: Annotated[
            int | float | None,
            Field(
                description="(For view_source) The cell's position in the notebook starting from 0 (first cell = 0, second = 1, etc). Works for all cell types."
            ),
        ] = None,
        cell_id: Annotated[
            str | None,
            Field(
                description='(For get_position_index) Cell ID like "205658d6-093c-4722-854c-90b149f254ad".'
            ),
        ] = None,
        server_url: Annotated[
            str | None,
            Field(
                description="(For check_server) Server URL to check; default: the server the notebook was set up with (setup_notebook's server_url), else the server (or folder) nbrelay serves."
            ),
        ] = None,
    ) -> CallToolResult:
        """Query notebook information and metadata on the user-provided server.

        This consolidates all read-only operations into a single tool following MCP best practices.

        Returns: view_source: dict (single cell) or list of dicts (all cells) with cell contents/metadata; check_server: str status message; list_sessions: list of notebook sessions; get_position_index: int positional index.

        Examples:
            query_notebook("my_notebook.ipynb", "view_source")
            query_notebook("my_notebook.ipynb", "view_source", execution_count=3)
            query_notebook("my_notebook.ipynb", "view_source", position_index=0)
            query_notebook("my_notebook.ipynb", "get_position_index", execution_count=5)
            query_notebook("my_notebook.ipynb", "get_position_index", cell_id="205658d6-093c-4722-854c-90b149f254ad")
        """
        if query_type == "check_server":
            url = server_of(server_url) if server_url else servers.get(notebook_key(notebook_path))
            if url is not None and not served_here(url):
                reachable = await jupyter_api.probe(url)
                return reply(
                    "Jupyter server is running" if reachable else "Jupyter server is not accessible"
                )
            try:
                await ws.list_notebooks("", recursive=False)
            except NbrelayError:
                return reply("Jupyter server is not accessible")
            return reply("Jupyter server is running")
        if query_type == "list_sessions":
            sessions = []
            for s in ws.sessions():
                info = ws.kernel_info(s.path) if s.active else None
                if info is None:
                    continue
                name = posixpath.basename(s.path)
                sessions.append(
                    {
                        "id": s.session_id,
                        "path": s.path,
                        "name": name,
                        "type": "notebook",
                        "kernel": {
                            "id": info.kernel_id,
                            "name": info.name,
                            "last_activity": iso(info.last_activity),
                            "execution_state": info.state,
                        },
                        "notebook": {"path": s.path, "name": name},
                    }
                )
            return reply(sessions)
        if query_type not in QUERY_TYPES:
            raise InvalidArgument(
                f"Invalid query_type: {query_type}. Must be one of: {', '.join(QUERY_TYPES)}"
            )
        path = ipynb(notebook_path)
        if query_type == "get_position_index":
            if (execution_count is None) == (cell_id is None):
                got = "neither" if execution_count is None else "both"
                raise InvalidArgument(
                    f"Must provide either execution_count or cell_id (got {got})."
                )
            snap = await ws.view(path)
            count = None if execution_count is None else count_of(execution_count)
            return reply(index_of(snap.notebook, execution_count=count, cell_id=cell_id))
        if execution_count is not None and position_index is not None:
            raise InvalidArgument("Cannot provide both execution_count and position_index.")
        snap = await ws.view(path)
        nb = snap.notebook
        if execution_count is None and position_index is None:
            return reply(
                budget().share(lambda b: [shown_cell(c, i, b) for i, c in enumerate(nb.cells)])
            )
        index = position(position_index)
        if index is None:
            index = index_of(nb, execution_count=count_of(execution_count or 0))
        if index >= len(nb.cells):
            raise InvalidArgument(
                f"position_index={index} is out of range: {describe_bounds(len(nb.cells))}."
            )
        return reply(budget().share(lambda b: shown_cell(nb.cells[index], index, b)))

    @reg.tool(kind=runs)
    async def modify_notebook_cells(
        notebook_path: NotebookPath,
        operation: Annotated[
            str,
            Field(
                description="One of: 'add_code' (add and optionally execute a code cell at end or specific position), 'edit_code' (edit a code cell at specific position), 'add_markdown' (add a markdown cell at end or specific position), 'edit_markdown' (edit an existing markdown cell at specific position), 'delete' (delete a cell at specific position)."
            ),
        ],
        ctx: Context,
        cell_content: Annotated[
            str | None,
            Field(
                description="Content for the cell (required for add_code, edit_code, add_markdown, edit_markdown)"
            ),
        ] = None,
        position_index: Annotated[
            int | float | None,
            Field(
                description="Position index for all operations (0-indexed). Optional for add_code/add_markdown (if not provided, cells are added at the end). Required for edit_code, edit_markdown, and delete."
            ),
        ] = None,
        execute: Annotated[
            bool, Field(description="Whether to execute code cells after adding/editing")
        ] = True,
    ) -> CallToolResult:
        """Modify notebook cells (add, edit, delete) on the user-provided server.

        This consolidates all cell modification operations into a single tool following MCP best practices.
        Default to execute=True unless the user requests otherwise or you have good reason not to
        execute immediately. Refused if the notebook changed since you last viewed it: view it again
        with query_notebook first.

        Returns: add_code/edit_code with execute=True: execution_count, outputs, status; with execute=False: empty dict; add_markdown/edit_markdown/delete: message and error fields.
        """
        if operation not in OPERATIONS:
            raise InvalidArgument(
                f"Invalid operation: {operation}. Must be one of: {', '.join(OPERATIONS)}"
            )
        path = ipynb(notebook_path)
        index = position(position_index)
        if operation in ("add_code", "edit_code", "add_markdown", "edit_markdown"):
            need_content(cell_content, operation)
        if operation in ("edit_code", "edit_markdown", "delete"):
            need_position(index, operation)
        snap = await ws.unchanged_since_viewed(path, hint=VIEW_HINT)
        run = execute and not ws.settings.no_execute
        content = cell_content or ""
        if operation == "add_code":
            at = None if index is None else min(index, len(snap.notebook.cells))
            outcome = await ws.insert_cells(
                path, [CellSpec("code", content)], index=at, expected_version=snap.version
            )
            if not run:
                return reply({})
            new = outcome.after.notebook.ids.index(outcome.plan.touched[0])
            try:
                return reply(await run_cell(path, new, ctx))
            except NbrelayError as exc:
                return reply(
                    {"error": reg.explain(exc), "message": "Cell was added but execution failed"}
                )
        if operation == "edit_code":
            await ws.edit_cell(
                path,
                need_position(index, operation),
                source=content,
                cell_type="code",
                clear_outputs=True,
                expected_version=snap.version,
            )
            if not run:
                return reply({})
            with saved_then_run():
                return reply(await run_cell(path, need_position(index, operation), ctx))
        result = {"message": "", "error": ""}
        try:
            if operation == "add_markdown":
                at = None if index is None else min(index, len(snap.notebook.cells))
                await ws.insert_cells(
                    path, [CellSpec("markdown", content)], index=at, expected_version=snap.version
                )
                result["message"] = (
                    "Markdown cell added"
                    if at is None
                    else f"Markdown cell inserted at position {at}"
                )
            elif operation == "edit_markdown":
                await ws.edit_cell(
                    path,
                    need_position(index, operation),
                    source=content,
                    cell_type="markdown",
                    expected_version=snap.version,
                )
                result["message"] = "Markdown cell edited"
            else:
                await ws.delete_cells(
                    path, [need_position(index, operation)], expected_version=snap.version
                )
                result["message"] = "Cell deleted"
        except NbrelayError as exc:
            result["error"] = reg.explain(exc)
        return reply(result)

    @reg.tool(kind="execute")
    async def execute_notebook_code(
        notebook_path: NotebookPath,
        execution_type: Annotated[
            str,
            Field(
                description="One of: 'execute_cell' (execute an existing code cell), 'install_packages' (install packages into the notebook's Python environment, with uv pip when uv is installed, pip otherwise)."
            ),
        ],
        ctx: Context,
        position_index: Annotated[
            int | float | None,
            Field(description="(For execute_cell) Positional index of cell to execute (0-indexed)"),
        ] = None,
        package_names: Annotated[
            str | None,
            Field(
                description="(For install_packages) Space-separated list of package names to install"
            ),
        ] = None,
    ) -> CallToolResult:
        """Execute code in a Jupyter notebook on the user-provided server.

        This consolidates all code execution operations into a single tool following MCP best practices.

        Returns: execute_cell: dict with execution_count, outputs, status; install_packages: str with installation result message.
        """
        if execution_type not in EXECUTION_TYPES:
            raise InvalidArgument(
                f"Invalid execution_type: {execution_type}. Must be one of: {', '.join(EXECUTION_TYPES)}"
            )
        path = ipynb(notebook_path)
        if execution_type == "execute_cell":
            index = need_position(position(position_index), execution_type)
            result = await run_cell(path, index, ctx)
            await ws.view(path)
            return reply(result)
        if not package_names or not package_names.strip():
            raise InvalidArgument("package_names is required for install_packages operation.")
        names = package_names.replace(",", " ").split()
        _, code, log = await ws.install_packages(path, names, prefer_uv=True)
        await ws.view(path)
        if code != 0:
            return reply(f"Error: installing [{package_names}] failed (exit code {code}): {log}")
        return reply(f"Installation of packages [{package_names}]: {log}")

    @reg.tool(kind="write")
    async def setup_notebook(
        notebook_path: Annotated[
            str,
            Field(
                description="Path to the notebook, relative to the Jupyter server root (.ipynb is added if missing)."
            ),
        ],
        cells: Annotated[
            list[Any] | None,
            Field(description="Optional list of initial cell contents for a new notebook."),
        ] = None,
        server_url: Annotated[
            str | None,
            Field(
                description="Optional Jupyter server URL, remembered for this notebook (check_server probes it). In live mode it must be the server nbrelay serves."
            ),
        ] = None,
    ) -> CallToolResult:
        """Prepare notebook for use and connect to the kernel on the user-provided server.
        Will create a new Jupyter notebook if needed on the server.

        Call it first for every notebook. Note that notebook_path must be relative to the Jupyter
        server root, not an absolute filesystem path.

        Returns: dict with information about the notebook and a status message.
        """
        path = ipynb(notebook_path)
        url = server_of(server_url) if server_url else None
        if url is not None and configured is not None and not served_here(url):
            raise InvalidArgument(
                f"server_url {safe_url(url)!r} is not the Jupyter Server this nbrelay serves "
                f"({jupyter_api.base_url(configured)}).",
                hint="Leave server_url out, or start nbrelay with --jupyter-url set to that "
                "server.",
            )
        try:
            await ws.read(path)
            message = f"Notebook {path} already exists"
        except NotebookNotFound:
            await ws.create_notebook(path, initial_cells(cells or []))
            message = f"Notebook {path} created"
        if not ws.settings.no_execute:
            await ws.begin_session(path)
        snap = await ws.view(path)
        if url is not None:
            servers[snap.path] = url
        info: dict[str, Any] = {
            "message": message,
            "name": posixpath.basename(snap.path),
            "path": snap.path,
            "type": "notebook",
            "last_modified": iso(await ws.last_modified(snap)) or None,
            "cell_count": len(snap.notebook.cells),
            "kernel": None,
        }
        kernel = ws.kernel_info(snap.path)
        if kernel is not None:
            info["kernel"] = {
                "id": kernel.kernel_id,
                "name": kernel.name,
                "execution_state": kernel.state,
            }
        return reply(info)


def initial_cells(cells: Sequence[Any]) -> list[CellSpec]:
    """setup_notebook's ``cells``: strings are code cells; dicts may give cell_type and source."""
    out: list[CellSpec] = []
    for item in cells:
        if isinstance(item, str):
            out.append(CellSpec("code", item))
        elif isinstance(item, dict) and item.get("cell_type", "code") in ("code", "markdown"):
            source = item.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            out.append(CellSpec(str(item.get("cell_type", "code")), text))
        else:
            raise InvalidArgument(
                f"cells item {item!r} is not a cell.",
                hint='Give strings (code cells) or {"cell_type": "markdown", "source": "..."}.',
            )
    return out
