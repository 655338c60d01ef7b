"""The field types a notebook must have before nbrelay reads it.

``shape_problem`` names the first field whose type nbrelay cannot read (a cell that is not an
object, a source that is a number, metadata nested too deeply, an output without its fields).
The schema's finer rules are reported by validation instead, and only stop edits.
"""

from __future__ import annotations

from typing import Any

_JSON_MIME_SUFFIX = "+json"


def is_json_mime(mime: str) -> bool:
    return mime == "application/json" or (
        mime.startswith("application/") and mime.endswith(_JSON_MIME_SUFFIX)
    )


_MAX_DEPTH = 64  # nesting of free-form JSON (metadata, JSON outputs) that nbrelay reads


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _text_problem(value: Any, what: str) -> str | None:
    """A multi-line text field: a string or a list of strings."""
    if isinstance(value, str):
        return None
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return None
    if isinstance(value, list):
        return f"{what} is a list holding something other than strings"
    return f"{what} is {_kind(value)}, not text"


def _too_deep(value: Any, what: str) -> str | None:
    """Free-form JSON nested deeper than ``_MAX_DEPTH`` (iterative: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return f"{what} nests values over {_MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return None


def _bundle_problem(bundle: Any, what: str) -> str | None:
    """A mime bundle (output data, an attachment): mime type -> text, or JSON for JSON types."""
    if not isinstance(bundle, dict):
        return f"{what} is {_kind(bundle)}, not an object"
    for mime, value in bundle.items():
        if is_json_mime(mime):
            problem = _too_deep(value, f"{what}[{mime!r}]")
        else:
            problem = _text_problem(value, f"{what}[{mime!r}]")
        if problem:
            return problem
    return None


def _output_problem(out: Any, what: str) -> str | None:
    if not isinstance(out, dict):
        return f"{what} is {_kind(out)}, not an object"
    kind = out.get("output_type")
    if not isinstance(kind, str):
        return (
            f"{what} has no output_type"
            if kind is None
            else f"{what}'s output_type is {_kind(kind)}"
        )
    if "metadata" in out and not isinstance(out["metadata"], dict):
        return f"{what}'s metadata is {_kind(out['metadata'])}, not an object"
    if "metadata" in out:
        deep = _too_deep(out["metadata"], f"{what}'s metadata")
        if deep:
            return deep
    if kind == "stream":
        if "name" in out and not isinstance(out["name"], str):
            return f"{what}'s stream name is {_kind(out['name'])}, not a string"
        return _text_problem(out.get("text", ""), f"{what}'s text")
    if kind in ("display_data", "execute_result"):
        if kind == "execute_result" and not _count_ok(out.get("execution_count")):
            return f"{what}'s execution_count is {out['execution_count']!r:.30}, not a count"
        return _bundle_problem(out.get("data", {}), f"{what}'s data")
    if kind == "error":
        for key in ("ename", "evalue"):
            if key in out and not isinstance(out[key], str):
                return f"{what}'s {key} is {_kind(out[key])}, not a string"
        tb = out.get("traceback", [])
        if not isinstance(tb, list) or not all(isinstance(x, str) for x in tb):
            return f"{what}'s traceback is not a list of strings"
    return None


def _count_ok(count: Any) -> bool:
    return count is None or (type(count) is int and count >= 0)


def _cell_problem(cell: Any, where: str) -> str | None:
    if not isinstance(cell, dict):
        return f"{where} is {_kind(cell)}, not an object"
    if not isinstance(cell.get("cell_type"), str):
        return (
            f"{where} has no cell_type"
            if "cell_type" not in cell
            else (f"{where}'s cell_type is {_kind(cell['cell_type'])}, not a string")
        )
    if "metadata" in cell:
        if not isinstance(cell["metadata"], dict):
            return f"{where}'s metadata is {_kind(cell['metadata'])}, not an object"
        deep = _too_deep(cell["metadata"], f"{where}'s metadata")
        if deep:
            return deep
    problem = _text_problem(cell.get("source", ""), f"{where}'s source")
    if problem:
        return problem
    if "attachments" in cell and cell["attachments"] is not None:
        attachments = cell["attachments"]
        if not isinstance(attachments, dict):
            return f"{where}'s attachments are {_kind(attachments)}, not an object"
        for key, bundle in attachments.items():
            problem = _bundle_problem(bundle, f"{where}'s attachment {key!r}")
            if problem:
                return problem
    if cell["cell_type"] == "code":
        if not _count_ok(cell.get("execution_count")):
            return f"{where}'s execution_count is {cell['execution_count']!r:.30}, not a count"
        outputs = cell.get("outputs", [])
        if not isinstance(outputs, list):
            return f"{where}'s outputs are {_kind(outputs)}, not a list"
        for k, out in enumerate(outputs):
            problem = _output_problem(out, f"{where}, output {k}")
            if problem:
                return problem
    return None


def shape_problem(data: dict[str, Any]) -> str | None:
    """The first field whose type nbrelay cannot read (the schema's finer rules are reported by
    validation instead, and only stop edits)."""
    minor = data.get("nbformat_minor", 0)
    if type(minor) is not int or not 0 <= minor < 1000:
        return f"nbformat_minor is {minor!r:.40}, not a small whole number"
    if "metadata" in data:
        if not isinstance(data["metadata"], dict):
            return f"its metadata is {_kind(data['metadata'])}, not an object"
        deep = _too_deep(data["metadata"], "its metadata")
        if deep:
            return deep
    for i, cell in enumerate(data["cells"]):
        cid = cell.get("id") if isinstance(cell, dict) else None
        where = f"cell {i}" + (f" (id {cid[:40]!r})" if isinstance(cid, str) else "")
        problem = _cell_problem(cell, where)
        if problem:
            return problem
    return None
