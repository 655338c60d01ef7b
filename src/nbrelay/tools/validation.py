"""The validation of a tool call's arguments, and the error that names what is wrong.

nbrelay validates every call's arguments itself (the SDK hands them over untouched, see
``nbrelay.tools.sdk``): a string parameter gets any string unchanged (the SDK would json-decode
``"[1]"`` or ``"null"`` sent to a ``str | None`` parameter), one value is taken for a list, and a
bad argument is an error that names the parameter, what it takes and an example, instead of
pydantic's text. A profile whose original refuses bad arguments in pydantic's words (the MCP
SDK's own validation: datalayer's jupyter-mcp-server) gets those words instead
(``wording="pydantic"``); which arguments are refused stays the same.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails

from nbrelay.errors import InvalidArgument
from nbrelay.tools.schemas import example_argument

# How a profile words a refused argument: nbrelay's way (the parameter, what it takes, an
# example) or pydantic's, as the MCP SDK's own validation reports it.
Wording = Literal["nbrelay", "pydantic"]


class Arguments:
    """A tool's parameters, and the validation of a call's arguments against them.

    * A parameter that takes a string gets the string as sent, whatever it looks like.
    * A parameter that cannot take a string but gets JSON text for a list or an object (some
      clients send those as strings) gets the decoded value.
    * A parameter that takes a list and gets one value gets a list of that value (``cells=3``).
    * Unknown, missing and invalid arguments are refused with the parameter's name, what it
      takes and an example.
    """

    def __init__(
        self,
        tool: str,
        model: Callable[[], type[BaseModel]],
        schema: Mapping[str, Any],
        example: str = "",
        wording: Wording = "nbrelay",
    ) -> None:
        """``model`` makes the tool's argument model (called when a call first needs it: a
        server that only lists its tools builds none); ``schema`` is that model's JSON schema,
        whose ``properties`` are the parameters by the names callers send."""
        self.tool = tool
        self.wording = wording
        self._model = model
        self.example = example
        self.defs: dict[str, Any] = dict(schema.get("$defs") or {})
        self.properties: dict[str, Any] = dict(schema.get("properties") or {})
        self.synonyms: dict[str, str] = {}  # another name a caller may use -> the wire name
        types = {wire: _types(prop, self.defs) for wire, prop in self.properties.items()}
        self._strings = {wire for wire, found in types.items() if "string" in found}
        self._lists = {wire for wire, found in types.items() if "array" in found}

    @functools.cached_property
    def model(self) -> type[BaseModel]:
        return self._model()

    @functools.cached_property
    def fields(self) -> dict[str, str]:
        """Wire name (an alias where the SDK renamed a parameter) -> field name."""
        return {info.alias or name: name for name, info in self.model.model_fields.items()}

    @functools.cached_property
    def required(self) -> list[str]:
        fields = self.model.model_fields
        return [wire for wire, name in self.fields.items() if fields[name].is_required()]

    def takes_string(self, name: str) -> bool:
        return name in self._strings

    def takes_list(self, name: str) -> bool:
        return name in self._lists

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call the tool with.

        Raises:
            InvalidArgument: an unknown, missing or invalid argument (all of them, each named).
        """
        problems: list[str] = []
        raw = self._named(raw, problems)
        problems += [self._unknown(k) for k in raw if k not in self.fields]
        problems += [self._missing(k) for k in self.required if k not in raw]
        # The same problems as pydantic words them (for ``wording="pydantic"``), in its order.
        details: list[InitErrorDetails] = [
            {"type": "missing", "loc": (k,), "input": dict(raw)}
            for k in self.required
            if k not in raw
        ]
        values = self.model.model_construct()
        for wire, value in raw.items():
            if wire not in self.fields:
                details.append({"type": "extra_forbidden", "loc": (wire,), "input": value})
                continue
            problem = self._assign(values, wire, value, details)
            if problem:
                problems.append(problem)
        if problems and self.wording == "pydantic":
            raise InvalidArgument(
                str(ValidationError.from_exception_data(f"{self.tool}Arguments", details))
            )
        if problems:
            raise InvalidArgument(
                " ".join(problems),
                hint=f"Example: {self.example}." if self.example else self._signature(),
            )
        return {wire: getattr(values, name) for wire, name in self.fields.items()}

    def _named(self, raw: Mapping[str, Any], problems: list[str]) -> Mapping[str, Any]:
        """``raw`` with synonyms given their wire name (both, disagreeing, are a problem)."""
        if not any(k in self.synonyms for k in raw):
            return raw
        named: dict[str, Any] = {}
        for key, value in raw.items():
            wire = self.synonyms.get(key, key)
            if wire != key and wire in raw and raw[wire] != value:
                problems.append(
                    f"{wire!r} is {raw[wire]!r} and {key!r} is {value!r}: give one of them "
                    f"({key} is a synonym of {wire})."
                )
            named.setdefault(wire, value)
        return named

    def value(self, wire: str, raw: Any) -> Any:
        """One argument as the tool receives it.

        Raises:
            InvalidArgument: the tool has no such parameter, or the value is not valid for it.
        """
        if wire not in self.fields:
            raise InvalidArgument(self._unknown(wire))
        values = self.model.model_construct()
        problem = self._assign(values, wire, raw)
        if problem:
            raise InvalidArgument(problem)
        return getattr(values, self.fields[wire])

    def _assign(
        self,
        values: BaseModel,
        wire: str,
        value: Any,
        details: list[InitErrorDetails] | None = None,
    ) -> str:
        """Validate one argument into ``values``; returns what is wrong with it ("" if nothing),
        and adds pydantic's account of it to ``details``.

        Tried in order, the first valid one wins: JSON text decoded (for a parameter that takes
        no string), the value as sent, the value as a list of one (for a list parameter)."""
        tries: list[Any] = []
        if isinstance(value, str) and not self.takes_string(wire):
            try:
                decoded = json.loads(value)
            except (ValueError, RecursionError):
                pass
            else:
                if isinstance(decoded, list | dict):
                    tries.append(decoded)
        tries.append(value)
        if self.takes_list(wire) and value is not None and not isinstance(value, list):
            tries.append([value])
        name = self.fields[wire]
        validator = self.model.__pydantic_validator__
        failed: list[tuple[Any, ValidationError]] = []
        for candidate in tries:
            try:
                validator.validate_assignment(values, name, candidate)
                return ""
            except ValidationError as exc:
                failed.append((candidate, exc))
        # the value as sent is what the message speaks of
        error = next(e for c, e in failed if c is value)
        if details is not None:
            for item in error.errors(include_url=False):
                detail: InitErrorDetails = {
                    "type": item["type"],
                    "loc": (wire, *item["loc"][1:]),
                    "input": item["input"],
                }
                if "ctx" in item:
                    detail["ctx"] = item["ctx"]
                details.append(detail)
        return self._invalid(wire, value, error)

    # -- messages ----------------------------------------------------------------------------

    def _takes(self, wire: str) -> str:
        prop = self.properties.get(wire, {})
        text = f"It takes {describe(prop, self.defs)}."
        if prop.get("description"):
            text += " " + prop["description"].strip().rstrip(".") + "."
        if example_argument(self.example, wire) is not None:
            return text  # the whole example call follows
        shown = json.dumps(example_value(prop, self.defs, wire), ensure_ascii=False)
        return f"{text} For example {wire}={shown}."

    def _unknown(self, wire: str) -> str:
        close = difflib.get_close_matches(wire, list(self.fields), n=1, cutoff=0.6)
        maybe = f" Did you mean `{close[0]}`?" if close else ""
        known = ", ".join(f"`{k}`" for k in self.fields) or "no arguments"
        return f"{self.tool} has no argument `{wire}`.{maybe} It takes {known}."

    def _missing(self, wire: str) -> str:
        return f"Missing argument `{wire}`. {self._takes(wire)}"

    def _invalid(self, wire: str, value: Any, error: ValidationError) -> str:
        reasons = "; ".join(_reasons(wire, error))
        return f"Invalid `{wire}`: {_shown(value)}{': ' + reasons if reasons else ''}. " + (
            self._takes(wire)
        )

    def _signature(self) -> str:
        shown = [k if k in self.required else f"{k}=…" for k in self.fields]
        return f"Call it as {self.tool}({', '.join(shown)})."


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return cast(Mapping[str, Any], defs.get(ref.rsplit("/", 1)[1], {}))
    return prop


def _types(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> set[str]:
    """The JSON types a parameter's schema admits (any type when it names none)."""
    prop = _resolve(prop, defs)
    found: set[str] = set()
    for option in prop.get("anyOf") or prop.get("oneOf") or ():
        found |= _types(option, defs)
    kind = prop.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for value in [*(prop.get("enum") or ()), *(["const"] if "const" in prop else [])]:
        found.add("string" if isinstance(value, str) else "other")
    if "properties" in prop:
        found.add("object")
    if not found and not (prop.get("anyOf") or prop.get("oneOf")):
        found = {"string", "number", "integer", "boolean", "array", "object"}
    return found


_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
}


def describe(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """What a parameter's schema takes, in words ("a list of integers or strings")."""
    prop = _resolve(prop, defs)
    options = [o for o in prop.get("anyOf") or prop.get("oneOf") or () if o != {"type": "null"}]
    if options:
        return " or ".join(dict.fromkeys(describe(o, defs) for o in options))
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"] if v is not None)
    if "properties" in prop:
        return "an object with " + ", ".join(f"`{k}`" for k in prop["properties"])
    kinds = prop.get("type")
    kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds or () if k != "null"]
    if not kinds:
        return "any JSON value"
    words: list[str] = []
    for kind in kinds:
        if kind == "array":
            items = prop.get("items")
            words.append(f"a list (each item {describe(items, defs)})" if items else "a list")
            continue
        words.append(
            _NAMES.get(kind, kind) + _bounds(prop)
            if kind in ("integer", "number")
            else _NAMES.get(kind, kind)
        )
    return " or ".join(words)


def _bounds(prop: Mapping[str, Any]) -> str:
    low, high = prop.get("minimum"), prop.get("maximum")
    if prop.get("exclusiveMinimum") is not None:
        return f" over {prop['exclusiveMinimum']}"
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" ≥ {low}"
    if high is not None:
        return f" ≤ {high}"
    return ""


def example_value(prop: Mapping[str, Any], defs: Mapping[str, Any], name: str = "") -> Any:
    """A plausible value for a parameter, to show in an error."""
    prop = _resolve(prop, defs)
    if prop.get("enum"):
        return prop["enum"][0]
    options = [o for o in prop.get("anyOf") or prop.get("oneOf") or () if o != {"type": "null"}]
    if options:
        return example_value(options[0], defs, name)
    if "properties" in prop:
        return {k: example_value(v, defs, k) for k, v in prop["properties"].items()}
    kinds = prop.get("type")
    kind = kinds if isinstance(kinds, str) else next((k for k in kinds or () if k != "null"), "")
    if kind == "array":
        return [example_value(prop.get("items") or {"type": "string"}, defs, name)]
    if kind in ("integer", "number"):
        low = prop.get("minimum", prop.get("exclusiveMinimum", 0))
        value = low + 1 if "exclusiveMinimum" in prop else max(low, 0)
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    if kind == "object":
        return {}
    return "notebook.ipynb" if "path" in name.lower() else "text"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    text = text if len(text) <= 60 else text[:40] + "…" + text[-10:]
    kind = {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    return text if value is None else f"{text} ({kind})"


_TYPE_MISMATCH = re.compile(r"_(type|parsing)$|^(union_tag|model_attributes)")
_UNION_TAG = re.compile(r"^[A-Z]\w*$|^(str|int|float|bool|list|dict|none)$|\[")


def _reasons(wire: str, error: ValidationError) -> list[str]:
    """The constraints a value broke, in words; plain type mismatches are left to "It takes"."""
    found: list[str] = []
    for item in error.errors(include_url=False):
        if _TYPE_MISMATCH.search(item["type"]):
            continue
        where = "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}"
            for p in item["loc"][1:]
            if not (isinstance(p, str) and _UNION_TAG.search(p))
        )
        message = item["msg"].replace("Input should be", "should be")
        message = message[0].lower() + message[1:] if message else message
        found.append(f"{wire}{where} {message}" if where else message)
    return list(dict.fromkeys(found))
