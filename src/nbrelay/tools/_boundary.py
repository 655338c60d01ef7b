"""Tool registration: the one place where nbrelay errors become MCP tool errors.

``Registrar.tool(kind=...)`` registers an ``async def`` whose docstring (cleaned with
``inspect.cleandoc``) is the description the model reads. The wrapper

* turns ``NbrelayError`` into ``ToolError`` with the message and its hint, in the words of the
  profile (``Registrar.words``: its tool names and index base; see ``nbrelay.errors``);
* turns any other exception into a short "internal error" with an error id (the traceback goes
  to the log on stderr, never to the client);
* returns pydantic results as compact JSON text plus ``structuredContent`` (no ``null`` fields),
  and passes MCP content (images) through;
* validates the call's arguments itself (``Arguments``): a string parameter gets any string
  unchanged (the SDK would json-decode ``"[1]"`` or ``"null"`` sent to a ``str | None``
  parameter), one value is taken for a list, and a bad argument is an error that names the
  parameter, what it takes and an example, instead of pydantic's text.

Output schemas are declared only with ``output_schemas`` (``--output-schemas``).
``kind`` sets the annotations (``read``, ``write``, ``destructive``, ``execute``) and lets the
server leave out every non-``read`` tool in read-only mode, and every ``execute`` tool in
no-execute mode.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel, ValidationError

from nbrelay.errors import CANONICAL_WORDS, InvalidArgument, NbrelayError, Vocabulary
from nbrelay.stores.base import current_reader

logger = logging.getLogger("nbrelay")

# ``inspect``: reads a running kernel (its variables, its list) without changing anything; it is
# marked read-only for clients, yet left out like ``execute`` under --read-only/--no-execute since
# it talks to a kernel that runs code.
Kind = Literal["read", "inspect", "write", "destructive", "execute"]
P = ParamSpec("P")

# Only hints that differ from the spec's defaults (readOnly false, destructive true,
# idempotent false, openWorld true) are spelled out; openWorld only where it qualifies a change
# (a tool that reads changes nothing, whatever it reads).
_ANNOTATIONS: dict[Kind, ToolAnnotations] = {
    "read": ToolAnnotations(read_only_hint=True),
    "inspect": ToolAnnotations(read_only_hint=True),
    "write": ToolAnnotations(destructive_hint=False, open_world_hint=False),
    "destructive": ToolAnnotations(open_world_hint=False),
    "execute": ToolAnnotations(),
}


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def to_result(value: Any, *, keep_none: bool = False) -> Any:
    """Shape a tool's return value: models become JSON text + structured content; a
    ``CallToolResult`` the tool built itself passes through."""
    if isinstance(value, CallToolResult):
        return value
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json", exclude_none=not keep_none, by_alias=True)
        return CallToolResult(
            content=[TextContent(text=compact_json(data))], structured_content=data
        )
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        model, extra = value[0], list(value[1:])
        data = model.model_dump(mode="json", exclude_none=not keep_none, by_alias=True)
        blocks: list[ContentBlock] = [TextContent(text=compact_json(data)), *extra]
        return CallToolResult(content=blocks, structured_content=data)
    return value


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


@dataclass
class Registrar:
    """Collects a profile's tools, honouring the tool allow-list and read-only mode."""

    only: Collection[str] = ()
    read_only: bool = False
    no_execute: bool = False
    output_schemas: bool = False
    exact: bool = False  # compatibility profiles: keep null fields in results and null defaults
    # nbrelay's own profile: schemas without what JSON Schema implies (additionalProperties
    # true, "type" next to an enum of strings), in fewer bytes of every agent's context.
    brief: bool = False
    words: Vocabulary = CANONICAL_WORDS  # how errors name actions and number cells
    tools: list[Tool] = field(default_factory=list)
    kinds: dict[str, Kind] = field(default_factory=dict)
    arguments: dict[str, Arguments] = field(default_factory=dict)

    @property
    def registered(self) -> list[str]:
        return [t.name for t in self.tools]

    def explain(self, exc: NbrelayError) -> str:
        """An error's text in this profile's words (for profiles that return errors as fields)."""
        return exc.render(self.words)

    def tool(
        self,
        *,
        kind: Kind,
        name: str | None = None,
        title: str | None = None,
        example: bool = True,
        meta: dict[str, Any] | None = None,
    ) -> Callable[[Callable[P, Awaitable[Any]]], Callable[P, Awaitable[Any]]]:
        """Register a tool. ``example=False``: the docstring's closing ``Example: …`` is left
        out of tools/list (every agent pays for it on every turn) and shown only in the error
        a wrong call gets, where it helps. ``meta``: the tool's ``_meta`` (an MCP Apps view)."""

        def decorator(fn: Callable[P, Awaitable[Any]]) -> Callable[P, Awaitable[Any]]:
            tool_name = name or fn.__name__
            if self.only and tool_name not in self.only:
                return fn
            if self.read_only and kind != "read":
                return fn
            if self.no_execute and kind in ("execute", "inspect"):
                return fn
            hints = _ANNOTATIONS[kind].model_copy(update={"title": title})
            # nbrelay's own tools send no empty annotations object (all hints at their defaults)
            brief_none = self.brief and not hints.model_dump(exclude_none=True)
            annotations = None if brief_none else hints
            description = inspect.cleandoc(fn.__doc__ or "")
            listed = description if example else without_example(description)
            slot: dict[str, Arguments] = {}
            tool = Tool.from_function(
                _guard(tool_name, fn, self, slot, keep_none=self.exact),
                name=tool_name,
                description=listed,
                annotations=annotations,
                # Without --output-schemas no output schema is built at all: generating them
                # was most of the server's start-up, only to be dropped below.
                structured_output=None if self.output_schemas else False,
                meta=meta,
            )
            if tool.context_kwarg is None:  # the wrapper learns which client calls (_reader_of)
                tool.context_kwarg = _CONTEXT_KWARG
            slot["arguments"] = self.arguments[tool_name] = Arguments(
                tool_name, _take_over_arguments(tool), tool.parameters, example_of(description)
            )
            tool.parameters = slim_schema(tool.parameters, keep_null=self.exact)
            if self.brief:
                tool.parameters = brief_schema(tool.parameters)
            schema = tool.fn_metadata.output_schema
            # Results always carry structuredContent; declaring its schema is opt-in because it
            # nearly doubles the tools/list every agent pays for.
            tool.fn_metadata.output_schema = (
                slim_schema(schema, keep_null=self.exact)
                if self.output_schemas and schema is not None
                else None
            )
            self.tools.append(tool)
            self.kinds[tool_name] = kind
            return fn

        return decorator


def _guard(
    name: str,
    fn: Callable[P, Awaitable[Any]],
    reg: Registrar,
    slot: Mapping[str, Arguments],
    *,
    keep_none: bool = False,
) -> Callable[P, Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        passed = cast(dict[str, Any], kwargs)
        raw = passed.pop(_RAW, None)
        ctx = passed.pop(_CONTEXT_KWARG, None)
        if ctx is None:  # the tool declares its own Context parameter
            ctx = next((v for v in passed.values() if isinstance(v, Context)), None)
        reader = current_reader.set(_reader_of(ctx)) if ctx is not None else None
        try:
            if raw is None:
                raise RuntimeError("the MCP SDK did not hand the call's arguments over")
            values = slot["arguments"].validate(raw)
            return to_result(await fn(*args, **values, **passed), keep_none=keep_none)
        except NbrelayError as exc:
            raise ToolError(reg.explain(exc)) from exc
        except (ToolError, anyio.get_cancelled_exc_class()):
            raise
        except Exception as exc:
            error_id = secrets.token_hex(4)
            logger.exception("tool %s failed (error id %s)", name, error_id)
            raise ToolError(
                f"internal error in nbrelay ({type(exc).__name__}, error id {error_id}). "
                "The notebook was not changed by the failed step; retry, and report the error id "
                "if it persists."
            ) from exc
        finally:
            if reader is not None:
                current_reader.reset(reader)

    return wrapper


_CONTEXT_KWARG = "_nbrelay_context"
_READERS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _reader_of(ctx: Any) -> str:
    """A stable key for the client (MCP session) a tool call comes from, so that "changed since
    you last read it" is judged per client when several share one server. Sessionless requests
    (protocol 2026-07-28 over HTTP) get a new key each time, so the process-wide guard applies."""
    try:
        context = ctx.request_context
    except (AttributeError, ValueError):
        return ""
    headers = getattr(getattr(context, "request", None), "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    if session_id:
        return f"http-{session_id}"
    connection = getattr(context.session, "_connection", None)  # one per client connection
    if connection is None:
        return ""
    try:
        reader = _READERS.get(connection)
        if reader is None:
            reader = _READERS[connection] = secrets.token_hex(8)
    except TypeError:  # not weak-referenceable
        return f"connection-{id(connection)}"
    return reader


# -- The SDK's argument handling (private API of mcp.server.mcpserver) ------------------------
# MCPServer validates a call's arguments with ``FuncMetadata.validate_arguments`` before the tool
# runs. It json-decodes any string sent to a parameter not annotated exactly ``str`` ("[1, 2]"
# sent to a ``str | None`` parameter arrives as a list, "null" as None) and reports failures in
# pydantic's words. Here, and only here, nbrelay takes that over: the SDK hands the caller's
# arguments on untouched and ``Arguments`` validates them in the tool's wrapper.
# tests/tools/test_arguments.py pins the behaviour, so an SDK upgrade that changes the hook
# fails there.

_RAW = "_nbrelay_arguments"


class _HandOver(FuncMetadata):
    """The SDK's argument metadata, validating nothing: the arguments go to the wrapper as sent."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {_RAW: dict(arguments_to_validate)}


def _take_over_arguments(tool: Tool) -> type[BaseModel]:
    """Make the SDK hand ``tool``'s arguments over unvalidated; returns the argument model the
    SDK built from the function's signature (its fields are the tool's parameters)."""
    meta = tool.fn_metadata
    tool.fn_metadata = _HandOver(
        arg_model=meta.arg_model,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
    )
    return meta.arg_model


# -- Arguments ------------------------------------------------------------------------------------


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
        self, tool: str, model: type[BaseModel], schema: Mapping[str, Any], example: str = ""
    ) -> None:
        self.tool = tool
        self.model = model
        self.example = example
        self.defs: dict[str, Any] = dict(schema.get("$defs") or {})
        self.properties: dict[str, Any] = dict(schema.get("properties") or {})
        # wire name (an alias where the SDK renamed a parameter) -> field name
        self.fields = {info.alias or name: name for name, info in model.model_fields.items()}
        self.required = [
            wire for wire, name in self.fields.items() if model.model_fields[name].is_required()
        ]
        types = {wire: _types(self.properties.get(wire, {}), self.defs) for wire in self.fields}
        self._strings = {wire for wire, found in types.items() if "string" in found}
        self._lists = {wire for wire, found in types.items() if "array" in found}

    def takes_string(self, name: str) -> bool:
        return name in self._strings

    def takes_list(self, name: str) -> bool:
        return name in self._lists

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call the tool with.

        Raises:
            InvalidArgument: an unknown, missing or invalid argument (all of them, each named).
        """
        problems = [self._unknown(k) for k in raw if k not in self.fields]
        problems += [self._missing(k) for k in self.required if k not in raw]
        values = self.model.model_construct()
        for wire, value in raw.items():
            if wire in self.fields:
                problem = self._assign(values, wire, value)
                if problem:
                    problems.append(problem)
        if problems:
            raise InvalidArgument(
                " ".join(problems),
                hint=f"Example: {self.example}." if self.example else self._signature(),
            )
        return {wire: getattr(values, name) for wire, name in self.fields.items()}

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

    def _assign(self, values: BaseModel, wire: str, value: Any) -> str:
        """Validate one argument into ``values``; returns what is wrong with it ("" if nothing).

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
        return self._invalid(wire, value, next(e for c, e in failed if c is value))

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
