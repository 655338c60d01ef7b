"""Hypothesis strategies for tool arguments, driven by each tool's input JSON schema.

Leaf schemas (strings, numbers, enums, ...) go to ``hypothesis_jsonschema.from_schema``; objects,
arrays, ``anyOf`` and ``$ref`` are composed here (hypothesis-jsonschema's own object strategy uses
Hypothesis internals that newer Hypothesis releases changed).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

# Arguments that would run code: fuzzing of argument handling never starts kernels (the kernel
# suites test running code); they are pinned to false.
NO_RUN = ("execute", "exec", "run_all")

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        merged = dict(defs[ref.rsplit("/", 1)[1]])
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        return merged
    return schema


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [str(kind)] if isinstance(kind, str) else []


def value_strategy(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> Any:
    schema = _resolve(schema, defs)
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        return st.one_of([value_strategy(o, defs, depth + 1) for o in options])
    if "enum" in schema or "const" in schema:
        return from_schema({k: v for k, v in schema.items() if k != "description"})
    types = _types(schema)
    if len(types) > 1:
        return st.one_of([value_strategy({**schema, "type": t}, defs, depth) for t in types])
    kind = types[0] if types else None
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        if not props:
            return st.dictionaries(st.text(max_size=8), JSON, max_size=3)
        return object_strategy(schema, defs, depth + 1)
    if kind == "array":
        items = schema.get("items") or {}
        low = int(schema.get("minItems", 0))
        high = min(int(schema.get("maxItems", low + 4)), low + 4)
        inner = value_strategy(items, defs, depth + 1) if items else JSON
        return st.lists(inner, min_size=low, max_size=high)
    if kind is None:
        return JSON
    leaf = {k: v for k, v in schema.items() if k not in ("description", "title", "default")}
    if kind == "string":
        leaf.setdefault("maxLength", 60)
    return from_schema(leaf)


def object_strategy(
    schema: dict[str, Any], defs: dict[str, Any], depth: int = 0
) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    fixed: dict[str, Any] = {}
    optional: dict[str, Any] = {}
    for name, sub in props.items():
        if name in NO_RUN:
            fixed[name] = st.just(False)
            continue
        target = fixed if name in required else optional
        target[name] = value_strategy(sub, defs, depth)
    return st.fixed_dictionaries(fixed, optional=optional)


def arguments(
    schema: dict[str, Any], *, paths: dict[str, list[str]] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments for a tool; with ``paths``, path parameters half the time name real files."""
    defs = schema.get("$defs") or {}
    plain = object_strategy(schema, defs)
    if not paths:
        return plain
    biased = dict(schema)
    biased["properties"] = {
        name: ({"enum": paths[name]} if name in paths else sub)
        for name, sub in (schema.get("properties") or {}).items()
    }
    either: st.SearchStrategy[dict[str, Any]] = st.one_of(plain, object_strategy(biased, defs))
    return either


WRONG_VALUES: dict[str, list[Any]] = {
    "string": [12345, ["x"], {"a": 1}, True],
    "integer": ["three", 1.5, [1], {"n": 1}],
    "number": ["not a number", [1.0], {"x": 1}],
    "boolean": ["maybe", 2, [True]],
    "array": ["not a list", 7, {"a": 1}],
    "object": ["not an object", [1, 2], 3],
}
ODD_VALUES: list[Any] = [
    "a\x00b",
    "\ud800 lone surrogate",
    "x" * (1 << 20),
    10**30,
    -(10**30),
    -1,
    math.pi,
    "",
    " ",
    None,
]


@st.composite
def invalid_arguments(draw: Any, schema: dict[str, Any], valid: Any) -> tuple[dict[str, Any], bool]:
    """A mutated argument set and whether it is certainly invalid (so must be refused).

    Mutations: drop a required argument, give a property a value of the wrong type (certainly
    invalid); or put NUL bytes, lone surrogates, 1 MB strings, huge or negative numbers, nulls or
    an unknown extra property in (must not crash or change anything, may still be accepted).
    """
    args = dict(draw(valid))
    props: dict[str, Any] = schema.get("properties") or {}
    required = [r for r in schema.get("required") or () if r in args]
    choices = ["wrong-type", "odd", "extra"] + (["drop"] if required else [])
    how = draw(st.sampled_from(choices))
    if how == "drop":
        del args[draw(st.sampled_from(sorted(required)))]
        return args, True
    if how == "extra":
        args["zz_unknown"] = draw(JSON)
        return args, False
    if not props:
        args["zz_unknown"] = draw(st.sampled_from(ODD_VALUES))
        return args, False
    name = draw(st.sampled_from(sorted(props)))
    defs = schema.get("$defs") or {}
    sub = _resolve(props[name], defs)
    types = set(_types(sub))
    for option in sub.get("anyOf") or ():
        types |= set(_types(_resolve(option, defs)))
    if how == "wrong-type" and types:
        # One value for a list parameter is taken as a list of that value (cells=3): a value
        # the list's items admit is not certainly invalid.
        accepted = set(types)
        if "array" in types:
            for holder in [sub, *(_resolve(o, defs) for o in sub.get("anyOf") or ())]:
                if "items" not in holder:
                    continue
                items = _resolve(holder["items"], defs)
                if not _types(items) and not items.get("anyOf"):  # items of any type
                    accepted |= set(WRONG_VALUES)
                accepted |= set(_types(items))
                for option in items.get("anyOf") or ():
                    accepted |= set(_types(_resolve(option, defs))) | {"object"}
        wrong = [
            v
            for t in sorted(types)
            for v in WRONG_VALUES.get(t, [])
            if not _matches_any(v, accepted)
        ]
        if wrong:
            args[name] = draw(st.sampled_from(wrong))
            return args, name not in NO_RUN
    args[name] = draw(st.sampled_from(ODD_VALUES))
    return args, False


def _matches_any(value: Any, types: set[str]) -> bool:
    checks = {
        "string": isinstance(value, str),
        # pydantic's lax mode (the SDK's argument validation) takes true/false as 1/0
        "integer": isinstance(value, int),
        "number": isinstance(value, int | float),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
        "null": value is None,
    }
    return any(checks.get(t, False) for t in types)
