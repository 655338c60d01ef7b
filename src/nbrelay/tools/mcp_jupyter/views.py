"""mcp-jupyter's parameters, positions and execution counts, cells and outputs as it shows
them, and its error words."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from mcp_types import CallToolResult, TextContent
from pydantic import Field

from nbrelay import jupyter_api
from nbrelay.config import safe_url
from nbrelay.errors import InvalidArgument, Vocabulary
from nbrelay.notebook import render
from nbrelay.notebook.address import describe_bounds
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Cell, Notebook
from nbrelay.tools._boundary import compact_json
from nbrelay.tools.runs import joined_text

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


def reply(value: Any, *, wrapped: bool = False) -> CallToolResult:
    """The original's plain return values: strings as text, other values as JSON text. The
    structured content is ``{"result": ...}`` when ``wrapped`` (query_notebook and
    execute_notebook_code, whose results the original types as a union) or the value is not a
    dict, else the dict itself."""
    text = value if isinstance(value, str) else compact_json(value)
    structured = value if isinstance(value, dict) and not wrapped else {"result": value}
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


def _fitter(budget: render.Budget, hint: str) -> Callable[[str], str]:
    """Cuts a text (head and tail) to what is left of the call's shared ``budget``."""

    def fit(text: str) -> str:
        shown = render.OutputText("", text)
        cut_text, _, any_shown = budget.take_output(shown, hint)
        if not any_shown and (shown.text or shown.unread):
            size = len(shown.text) + shown.unread
            return f"[{size:,} characters not shown: the output budget is 0; {hint}]"
        return cut_text

    return fit


def _fitted(value: Any, fit: Callable[[str], str]) -> Any:
    """A MIME value cut to the budget: text as text, anything else (JSON) kept unless cut."""
    text = joined_text(value) if isinstance(value, (str, list)) else render.json_text(value)
    fitted = fit(text)
    if isinstance(value, (str, list)):
        return fitted
    return value if fitted == text else fitted


def shown_output(output: dict[str, Any], budget: render.Budget, hint: str) -> dict[str, Any]:
    """A run's output as the original returns it (its ``filter_image_outputs``): images become a
    text indicator, joined to the plain text by " - " when that names a Figure or Axes, else by
    a new line; every other format (HTML too) is kept, its text cut in the middle within the
    call's shared ``budget`` so that no format (a plotly page, a JSON figure) returns
    megabytes."""
    out = dict(output)
    fit = _fitter(budget, hint)
    kind = out.get("output_type")
    if kind in ("display_data", "execute_result") and isinstance(out.get("data"), dict):
        data = dict(out["data"])
        images = [m.split("/")[1].upper() for m in IMAGE_TYPES if data.pop(m, None) is not None]
        if images:
            indicator = f"Image generated ({', '.join(images)} format)"
            if "text/plain" in data:
                plain = joined_text(data["text/plain"])
                joint = " - " if "Figure" in plain or "Axes" in plain else "\n"
                data["text/plain"] = f"{plain}{joint}{indicator}"
            else:
                data["text/plain"] = indicator
        out["data"] = {mime: _fitted(value, fit) for mime, value in data.items()}
    elif kind == "stream":
        out["text"] = fit(joined_text(out.get("text", "")))
    elif kind == "error":
        out["traceback"] = [
            fit(render.strip_ansi(str(line))) for line in out.get("traceback") or []
        ]
    return out


def _viewed_output(output: dict[str, Any], fit: Callable[[str], str]) -> dict[str, Any]:
    """An output as the original's view_source shows it: its type, text and stream name, and
    its data unless an image or HTML is among them (then only which formats are there); error
    outputs also keep ename, evalue and the traceback (the original drops them)."""
    view: dict[str, Any] = {"output_type": output.get("output_type")}
    if "text" in output:
        view["text"] = fit(joined_text(output["text"]))
    if "name" in output:
        view["name"] = output["name"]
    data = output.get("data")
    if isinstance(data, dict):
        kinds = list(data)
        listed = ", ".join(sorted(kinds))
        if any("image" in k or "png" in k or "jpeg" in k for k in kinds):
            view["data"] = {"[filtered]": f"Image data present ({listed})"}
        elif any("html" in k for k in kinds):
            view["data"] = {"[filtered]": f"HTML data present ({listed})"}
        else:
            view["data"] = {mime: _fitted(value, fit) for mime, value in data.items()}
    if output.get("output_type") == "error":
        view["ename"] = output.get("ename", "")
        view["evalue"] = output.get("evalue", "")
        view["traceback"] = [
            fit(render.strip_ansi(str(line))) for line in output.get("traceback") or []
        ]
    return view


def shown_cell(cell: Cell, index: int, budget: render.Budget) -> dict[str, Any]:
    """A cell as the original's view_source shows it: type, source and metadata (and a code
    cell's execution count and outputs, filtered as ``_viewed_output`` says), with its ``id``
    (nbrelay's addition, for get_position_index's cell_id)."""
    view: dict[str, Any] = {
        "id": cell.get("id"),
        "cell_type": cell.get("cell_type"),
        "source": cell.get("source"),
        "metadata": cell.get("metadata", {}),
    }
    if cell.get("cell_type") == "code":
        view["execution_count"] = cell.get("execution_count")
        fit = _fitter(budget, f"view this cell alone (position_index={index}) for more")
        outs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
        view["outputs"] = [_viewed_output(o, fit) for o in outs]
    return view


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
