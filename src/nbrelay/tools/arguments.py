"""Argument types the canonical tools share (one declaration each).

Their descriptions are what every agent reads in ``tools/list`` on every turn, so they are
short; what holds for every tool (paths are relative to the root, cells are addressed by 0-based
index or id, ``version``/``expected_version``) is said once in the listing (``read_notebook``'s
description) and once in the server's instructions (some clients drop instructions).

JSON Schema cannot share a definition between tools: each ``inputSchema`` stands alone, so a
``$defs`` entry pays for itself only when one tool uses it twice. ``inline_defs`` puts each
single-use definition in place (``NewCell`` costs 45 bytes less per tool that way).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nbrelay.notebook.edits import CellSpec

# Said once for every tool (in read_notebook's description), not on each parameter:
NbPath = str  # relative to the served folder
Ref = int | str  # a cell: 0-based index (-1 = last) or id
Refs = list[int | str]  # cells: indexes, ids or 'start:end' ranges (end excluded)
Version = str | None  # expected_version: a read's `version`; the edit refuses if it changed
Budget = Annotated[int | None, Field(ge=0, description="Max output characters.")]
# Seconds to wait (execute and get_execution say what for, in their descriptions).
Wait = Annotated[float | None, Field(ge=0, le=3600)]


class NewCell(BaseModel):
    model_config = ConfigDict(extra="forbid")  # {"content": ...} is a mistake, not an empty cell

    source: str = ""
    cell_type: Literal["code", "markdown", "raw"] = "code"  # as edit_cell and nbformat say it
    metadata: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        """``type`` is taken as ``cell_type`` (as read results name it); unlisted, so it costs
        the listing nothing. Both, disagreeing, are refused."""
        if not isinstance(value, dict) or "type" not in value:
            return value
        given = {k: v for k, v in value.items() if k != "type"}
        if "cell_type" in given and given["cell_type"] != value["type"]:
            raise ValueError(
                f"the cell gives cell_type {given['cell_type']!r} and type {value['type']!r}; "
                "give one of them (type is a synonym of cell_type)"
            )
        given["cell_type"] = value["type"]
        return given


# Argument names taken for another (unlisted): where a tool has the second and not the first.
SYNONYMS = {"type": "cell_type"}


NewCells = Annotated[
    list[NewCell | str],
    Field(description="A string is a code cell."),
]


def inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` to a definition it uses only once put in place."""
    defs = schema.get("$defs")
    if not isinstance(defs, dict):
        return schema
    text = json.dumps(schema)
    once = {name for name in defs if text.count(f'"#/$defs/{name}"') == 1}

    def put(node: Any) -> Any:
        if isinstance(node, list):
            return [put(n) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in once:
            return put({**defs[ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}})
        return {k: put(v) for k, v in node.items() if not (k == "$defs" and node is schema)}

    out = cast(dict[str, Any], put(schema))
    kept = {name: put(body) for name, body in defs.items() if name not in once}
    if kept:
        out["$defs"] = kept
    return out


def compact_listing(schema: dict[str, Any]) -> dict[str, Any]:
    """A canonical tool's ``inputSchema`` as listed: single-use definitions in place, ``anyOf``
    of plain types as a list of types, no ``default`` or ``minimum`` that goes without saying
    (a default of 0 or "", a minimum of 0, an integer's minimum of 1), no ``maximum`` and no
    ``additionalProperties: false``. Calls are still checked against the full schema, so a
    value past a bound or an unknown key is refused with an error that names it."""

    def drop(node: Any) -> Any:
        if isinstance(node, list):
            return [drop(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: drop(v) for k, v in node.items()}
        if out.get("default") in (0, "") and out["default"] is not False:
            del out["default"]
        if out.get("minimum") == 0 or (out.get("type") == "integer" and out.get("minimum") == 1):
            del out["minimum"]  # counts, indexes, offsets and seconds are never negative
        # Upper bounds are safety limits an agent meets only by asking for extreme values (the
        # refusal names the bound); unknown keys in a cell object are refused the same way.
        out.pop("maximum", None)
        if out.get("additionalProperties") is False:
            del out["additionalProperties"]
        options = out.get("anyOf")
        if isinstance(options, list) and all(set(o) == {"type"} for o in options):
            del out["anyOf"]  # {"anyOf": [{"type": "string"}, {"type": "object"}]}
            out["type"] = [o["type"] for o in options]
        return out

    listed = cast(dict[str, Any], drop(inline_defs(schema)))
    if not listed.get("properties"):
        listed.pop("properties", None)  # a tool without parameters
    return listed


def specs(cells: list[NewCell | str]) -> list[CellSpec]:
    return [
        CellSpec("code", c) if isinstance(c, str) else CellSpec(c.cell_type, c.source, c.metadata)
        for c in cells
    ]
