"""nbformat validation with bounded, specific error text.

The schema is nbformat's own v4.5 JSON schema, compiled once with fastjsonschema (as nbformat
does). Whole notebooks are validated when read; edits validate only the cells they change plus
the notebook's top level, which keeps a one-cell edit on a 5,000-cell notebook cheap.

What is validated is what a write would store: a notebook older than 4.5 (4.0-4.4, or 3.x that
nbformat upgraded) is written as 4.5 with its cell ids, so it is checked as 4.5. A notebook from
a newer minor (4.6 and up) is checked as nbformat checks it: unknown fields, cell types and
output types are allowed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from typing import Any

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook.model import Cell, Notebook

_Validator = Callable[[Any], Any]


def _fjs() -> Any:
    """``fastjsonschema``, imported when the first notebook is checked (not to list tools)."""
    import fastjsonschema

    return fastjsonschema


_MAX_ERROR = 300


@cache
def _schema() -> dict[str, Any]:
    # Locate nbformat's schema file without importing nbformat: its import pulls in jsonschema
    # and compiles a grammar, which delayed the first read of a new server by seconds.
    spec = importlib.util.find_spec("nbformat")
    folders = list(spec.submodule_search_locations or ()) if spec else []
    for folder in folders:
        path = os.path.join(folder, "v4", "nbformat.v4.5.schema.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                schema: dict[str, Any] = json.load(fh)
            return schema
    text = (resources.files("nbformat.v4") / "nbformat.v4.5.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


CURRENT_MINOR = 5  # the newest nbformat 4 minor whose schema nbformat ships


@cache
def _compiled(ref: str | None, future: bool = False) -> _Validator:
    schema = _schema()
    if future:  # as nbformat's get_validator does for a minor newer than its own
        schema = _relaxed(copy.deepcopy(schema))
        definitions = schema["definitions"]
        definitions["cell"]["oneOf"].append({"$ref": "#/definitions/unrecognized_cell"})
        definitions["output"]["oneOf"].append({"$ref": "#/definitions/unrecognized_output"})
    if ref is not None:
        schema = {"$ref": f"#/definitions/{ref}", "definitions": schema["definitions"]}
    validator: _Validator = _fjs().compile(schema)
    return validator


def _relaxed(obj: Any) -> Any:
    """Every ``additionalProperties`` of a schema set to true (nbformat's relaxation)."""
    if isinstance(obj, dict):
        return {k: True if k == "additionalProperties" else _relaxed(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_relaxed(v) for v in obj]
    return obj


def from_future(nb: Notebook | dict[str, Any]) -> bool:
    """Whether a notebook is of a newer nbformat 4 minor than nbformat's schemas know."""
    data = nb.data if isinstance(nb, Notebook) else nb
    minor = data.get("nbformat_minor")
    return type(minor) is int and minor > CURRENT_MINOR


def _message(exc: Exception) -> str:
    return str(getattr(exc, "message", exc))


def _bounded(text: str) -> str:
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


def cell_problem(cell: Any, *, future: bool = False) -> str | None:
    """Return why a cell fails the schema, or None if it is valid (``future``: of a notebook
    from a newer minor, checked as nbformat checks those)."""
    if not isinstance(cell, dict):
        return f"is a {type(cell).__name__}, not an object"
    kind = cell.get("cell_type")
    ref = {"code": "code_cell", "markdown": "markdown_cell", "raw": "raw_cell"}.get(str(kind))
    if ref is None and future:
        ref = "unrecognized_cell"
    if ref is None:
        return f"has cell_type {kind!r}; it must be code, markdown or raw"
    try:
        _compiled(ref, future)(cell)
    except _fjs().JsonSchemaException as exc:
        return _bounded(_message(exc).replace("data", "cell", 1))
    return None


def top_level_ok(data: dict[str, Any]) -> bool:
    """Whether a notebook's top level (a dict, its cells left out) passes the schema."""
    try:
        _compiled(None)(data)
    except _fjs().JsonSchemaException:
        return False
    return True


def _top_level_problem(nb: Notebook) -> str | None:
    top = _as_written(nb)
    top["cells"] = []
    try:
        _compiled(None, from_future(nb))(top)
    except _fjs().JsonSchemaException as exc:
        return _bounded(_message(exc).replace("data", "notebook", 1))
    return None


def problems(nb: Notebook, *, limit: int = 5) -> list[str]:
    """Every schema problem of a notebook (at most ``limit``), each naming the cell and field."""
    found: list[str] = []
    top = _top_level_problem(nb)
    if top:
        found.append(top)
    future = from_future(nb)
    try:
        _compiled(None, future)(_as_written(nb))
        return found
    except _fjs().JsonSchemaException:
        pass
    for i, cell in enumerate(nb.cells):
        why = cell_problem(cell, future=future)
        if why:
            found.append(f"cell {i}{_id_of(cell)} {why}")
            if len(found) >= limit:
                break
    return found


def _as_written(nb: Notebook) -> dict[str, Any]:
    """The notebook as a write would store it: nbformat < 4.5 (ids filled in memory) is written
    as 4.5, the first minor that stores cell ids (``model.serialize``)."""
    data = dict(nb.data)
    data["nbformat_minor"] = max(CURRENT_MINOR, int(data.get("nbformat_minor") or 0))
    return data


def _id_of(cell: Any) -> str:
    if isinstance(cell, dict) and isinstance(cell.get("id"), str):
        return f" (id {cell['id']!r})"
    return ""


def check_cells(cells: Iterable[Cell], *, future: bool = False) -> None:
    """Raise NotebookInvalid naming the first cell that fails the schema (``future``: cells of a
    notebook from a newer minor, see ``from_future``)."""
    for cell in cells:
        why = cell_problem(cell, future=future)
        if why:
            raise NotebookInvalid(
                f"the change would make an invalid notebook: cell{_id_of(cell)} {why}.",
                hint="Nothing was written. Check the cell type, metadata and outputs you passed.",
            )


def check_top_level(nb: Notebook) -> None:
    """Raise NotebookInvalid if the notebook's top level (its metadata) fails the schema."""
    why = _top_level_problem(nb)
    if why:
        raise NotebookInvalid(
            f"the change would make an invalid notebook: {why}.",
            hint="Nothing was written. Check the metadata you passed (a kernelspec needs "
            "`name` and `display_name` strings, language_info a `name`).",
        )


def check_notebook(nb: Notebook) -> None:
    """Raise NotebookInvalid listing the notebook's schema problems, if any."""
    found = problems(nb)
    if found:
        raise NotebookInvalid(
            "the notebook fails nbformat validation: " + "; ".join(found) + ".",
            hint="nbrelay never writes an invalid notebook. Fix the file (or restore it from "
            "version control), then retry.",
        )
