"""nbformat validation with bounded, specific error text.

The schema is nbformat's own v4.5 JSON schema, compiled once with fastjsonschema (as nbformat
does). Whole notebooks are validated when read; edits validate only the cells they change plus
the notebook's top level, which keeps a one-cell edit on a 5,000-cell notebook cheap.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from typing import Any

import fastjsonschema

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook.model import Cell, Notebook

_Validator = Callable[[Any], Any]
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


@cache
def _compiled(ref: str | None) -> _Validator:
    schema = _schema()
    if ref is not None:
        schema = {"$ref": f"#/definitions/{ref}", "definitions": schema["definitions"]}
    validator: _Validator = fastjsonschema.compile(schema)
    return validator


def _message(exc: Exception) -> str:
    return str(getattr(exc, "message", exc))


def _bounded(text: str) -> str:
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


def cell_problem(cell: Any) -> str | None:
    """Return why a cell fails the schema, or None if it is valid."""
    if not isinstance(cell, dict):
        return f"is a {type(cell).__name__}, not an object"
    kind = cell.get("cell_type")
    ref = {"code": "code_cell", "markdown": "markdown_cell", "raw": "raw_cell"}.get(str(kind))
    if ref is None:
        return f"has cell_type {kind!r}; it must be code, markdown or raw"
    try:
        _compiled(ref)(cell)
    except fastjsonschema.JsonSchemaException as exc:
        return _bounded(_message(exc).replace("data", "cell", 1))
    return None


def _top_level_problem(nb: Notebook) -> str | None:
    top = {k: v for k, v in nb.data.items() if k != "cells"}
    top["cells"] = []
    try:
        _compiled(None)(top)
    except fastjsonschema.JsonSchemaException as exc:
        return _bounded(_message(exc).replace("data", "notebook", 1))
    return None


def problems(nb: Notebook, *, limit: int = 5) -> list[str]:
    """Every schema problem of a notebook (at most ``limit``), each naming the cell and field."""
    found: list[str] = []
    top = _top_level_problem(nb)
    if top:
        found.append(top)
    try:
        _compiled(None)(_with_minor(nb))
        return found
    except fastjsonschema.JsonSchemaException:
        pass
    for i, cell in enumerate(nb.cells):
        why = cell_problem(cell)
        if why:
            found.append(f"cell {i}{_id_of(cell)} {why}")
            if len(found) >= limit:
                break
    return found


def _with_minor(nb: Notebook) -> dict[str, Any]:
    # Ids may have been filled in memory for nbformat < 4.5; validate what would be written.
    data = dict(nb.data)
    data["nbformat_minor"] = max(5, int(data.get("nbformat_minor") or 0))
    return data


def _id_of(cell: Any) -> str:
    if isinstance(cell, dict) and isinstance(cell.get("id"), str):
        return f" (id {cell['id']!r})"
    return ""


def check_cells(cells: Iterable[Cell]) -> None:
    """Raise NotebookInvalid naming the first cell that fails the schema."""
    for cell in cells:
        why = cell_problem(cell)
        if why:
            raise NotebookInvalid(
                f"the change would make an invalid notebook: cell{_id_of(cell)} {why}.",
                hint="Nothing was written. Check the cell type, metadata and outputs you passed.",
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
