"""Tool schemas and descriptions as agents read them: JSON schemas in fewer bytes
(``slim_schema``, ``brief_schema``), and the ``Example: …`` call a description closes with
(``without_example``, ``example_of``, ``example_argument``)."""

from __future__ import annotations

import re
from typing import Any


def _drop_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter whose default is null: omitting it is how to say null."""
    if schema.get("default", 0) is not None:
        return schema
    out = {k: v for k, v in schema.items() if k != "default"}
    any_of = out.get("anyOf")
    if isinstance(any_of, list):
        rest = [s for s in any_of if s != {"type": "null"}]
        if len(rest) == 1:
            del out["anyOf"]
            out.update(rest[0])
        else:
            out["anyOf"] = rest
    elif isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        out["type"] = types[0] if len(types) == 1 else types
    return out


def slim_schema(schema: Any, *, keep_null: bool = False) -> Any:
    """The same schema in fewer bytes of every agent's context: no auto-generated titles,
    ``anyOf`` of plain types folded into a ``type`` list, null defaults left implicit (unless
    ``keep_null``: compatibility profiles keep a seed's exact defaults)."""
    if isinstance(schema, list):
        return [slim_schema(s, keep_null=keep_null) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    required = set(schema.get("required") or ())
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties":
            out[key] = {
                name: slim_schema(
                    sub if name in required or keep_null else _drop_null(sub), keep_null=keep_null
                )
                for name, sub in value.items()
            }
        elif key == "$defs":
            out[key] = {name: slim_schema(sub, keep_null=keep_null) for name, sub in value.items()}
        else:
            out[key] = slim_schema(value, keep_null=keep_null)
    any_of = out.get("anyOf")
    if isinstance(any_of, list) and all(set(s) == {"type"} for s in any_of):
        types = [s["type"] for s in any_of]
        if all(isinstance(t, str) for t in types):
            del out["anyOf"]
            out["type"] = types
    return out


def brief_schema(schema: Any) -> Any:
    """The same schema without what goes without saying: ``additionalProperties: true``, a
    ``"type": "string"`` beside an ``enum`` of strings, ``"default": false`` on a flag."""
    if isinstance(schema, list):
        return [brief_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: brief_schema(v)
        for k, v in schema.items()
        if k != "additionalProperties" or v is not True
    }
    if out.get("type") == "boolean" and out.get("default") is False:
        del out["default"]  # an optional flag is off unless given
    enum = out.get("enum")
    if (
        out.get("type") == "string"
        and isinstance(enum, list)
        and all(isinstance(e, str) for e in enum)
    ):
        del out["type"]
    return out


_EXAMPLE_TAIL = re.compile(r"\s*\bExample(?: \([^)]*\))?:.*\Z", re.DOTALL)


def without_example(description: str) -> str:
    """The description without its closing ``Example: …`` (kept for error messages)."""
    return _EXAMPLE_TAIL.sub("", description).rstrip()


_EXAMPLE = re.compile(r"(?m)^.*?\bExample(?: \([^)]*\))?:\s*(\w+\(.*\))\.?\s*$")


def example_of(description: str) -> str:
    """The example call a tool's description gives (``Example: tool(a=1).``), if any."""
    found = _EXAMPLE.search(description)
    return found.group(1) if found else ""


def example_argument(example: str, name: str) -> str | None:
    """The text of argument ``name`` in an example call (``cells=["a", "2:5"]`` → ``["a", "2:5"]``)."""
    found = re.search(rf"[(,]\s*{re.escape(name)}=", example)
    if not found:
        return None
    depth, quote, out = 0, "", list[str]()
    for char in example[found.end() :]:
        if quote:
            quote = "" if char == quote and (not out or out[-1] != "\\") else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            break
        out.append(char)
    return "".join(out).strip() or None
