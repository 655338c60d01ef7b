"""Repairs of the slips Jupyter tolerates: metadata of the wrong shape.

``nbformat.read``, JupyterLab and nbclient open and run a notebook whose metadata fails the
schema (a ``kernelspec`` without ``name``, a cell's ``tags`` that is a string, an output's
``jupyter`` that is not an object); nbformat's own ``normalize(strip_invalid_metadata=True)``
repairs such a notebook by dropping the keys that fail. nbrelay reads these notebooks as they
are and repairs them on their first write, the same way, with one gentler case: a ``kernelspec``
object missing ``name`` or ``display_name`` gets them (the kernel nbrelay runs it with) instead
of being dropped. Each repair is a primitive edit, so every store applies it as it applies any
edit, and a note that says what was repaired.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbrelay.notebook import validate
from nbrelay.notebook.edits import Edit, SetMetadata, UpdateCell
from nbrelay.notebook.model import DEFAULT_KERNEL, Cell, Notebook

_MAX_NAMED = 4


def repairs(nb: Notebook) -> tuple[list[Edit], list[str]]:
    """The edits that repair ``nb``'s metadata slips, and one note for each kind of repair
    (nothing when there is nothing to repair)."""
    found: list[Edit] = []
    notes: list[str] = []
    top = _notebook_metadata(nb.data.get("metadata") or {})
    if top is not None:
        found.append(top[0])
        notes.extend(top[1])
    dropped: list[str] = []
    for i, cell in enumerate(nb.cells):
        fixed = _cell(cell)
        if fixed is None:
            continue
        changes, keys = fixed
        found.append(UpdateCell(str(cell["id"]), changes))
        dropped.append(f"cell {i} ({', '.join(sorted(set(keys)))})")
    if dropped:
        more = len(dropped) - _MAX_NAMED
        named = "; ".join(dropped[:_MAX_NAMED]) + (f"; and {more} more cells" if more > 0 else "")
        notes.append(
            "Cell metadata that failed nbformat's schema was removed, as nbformat's normalize "
            f"does: {named}."
        )
    return found, notes


def _notebook_metadata(meta: Mapping[str, Any]) -> tuple[SetMetadata, list[str]] | None:
    changes: dict[str, Any] = {}
    remove: list[str] = []
    notes: list[str] = []
    for key, value in meta.items():
        if _top_ok(key, value):
            continue
        if key == "kernelspec" and isinstance(value, dict):
            spec = dict(value)
            if not isinstance(spec.get("name"), str):
                spec["name"] = DEFAULT_KERNEL
            if not isinstance(spec.get("display_name"), str):
                spec["display_name"] = spec["name"]
            if _top_ok(key, spec):
                changes[key] = spec
                filled = [k for k in ("name", "display_name") if spec[k] != value.get(k)]
                notes.append(
                    f"The notebook's kernelspec had no {' or '.join(filled)}: it was set to "
                    f"{spec['name']!r}, the kernel the notebook runs with (notebook_metadata "
                    "with `kernel` switches it)."
                )
                continue
        remove.append(key)
    if remove:
        notes.append(
            "Notebook metadata that failed nbformat's schema was removed, as nbformat's "
            f"normalize does: {', '.join(repr(k) for k in remove)}."
        )
    if not changes and not remove:
        return None
    return SetMetadata(changes, tuple(remove)), notes


def _top_ok(key: str, value: Any) -> bool:
    probe = {"cells": [], "metadata": {key: value}, "nbformat": 4, "nbformat_minor": 5}
    return validate.top_level_ok(probe)


def _cell(cell: Cell) -> tuple[dict[str, Any], list[str]] | None:
    """The metadata of a cell without the keys that fail the schema, and those keys; None if
    the cell is valid or its problem is not one of metadata."""
    if validate.cell_problem(cell) is None:
        return None
    keys: list[str] = []
    changes: dict[str, Any] = {}
    bare = {k: v for k, v in cell.items() if k not in ("metadata", "outputs")}
    bare["metadata"] = {}
    if cell.get("cell_type") == "code":
        bare["outputs"] = []
    meta = cell.get("metadata")
    if isinstance(meta, dict):
        kept = {
            k: v
            for k, v in meta.items()
            if validate.cell_problem({**bare, "metadata": {k: v}}) is None
        }
        if len(kept) != len(meta):
            keys.extend(k for k in meta if k not in kept)
            changes["metadata"] = kept
    if not changes:
        return None
    fixed = {**cell, **changes}
    if validate.cell_problem(fixed) is not None:
        return None  # not only metadata: left for the refusal that names it
    return changes, keys
