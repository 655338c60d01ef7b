"""Tool registration: the one place where nbrelay errors become MCP tool errors.

``Registrar.tool(kind=...)`` registers an ``async def`` whose docstring (cleaned with
``inspect.cleandoc``) is the description the model reads. The wrapper

* turns ``NbrelayError`` into ``ToolError`` with the message and its hint, in the words of the
  profile (``Registrar.words``: its tool names and index base; see ``nbrelay.errors``);
* turns any other exception into a short "internal error" with an error id (the traceback goes
  to the log on stderr, never to the client);
* returns pydantic results as compact JSON text plus ``structuredContent`` (no ``null`` fields),
  and passes MCP content (images) through.

Output schemas are declared only with ``output_schemas`` (``--output-schemas``).
``kind`` sets the annotations (``read``, ``write``, ``destructive``, ``execute``) and lets the
server leave out every non-``read`` tool in read-only mode, and every ``execute`` tool in
no-execute mode.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel

from nbrelay.errors import CANONICAL_WORDS, NbrelayError, Vocabulary
from nbrelay.stores.base import current_reader

logger = logging.getLogger("nbrelay")

Kind = Literal["read", "write", "destructive", "execute"]
P = ParamSpec("P")

# Only hints that differ from the spec's defaults (readOnly false, destructive true,
# idempotent false, openWorld true) are spelled out.
_ANNOTATIONS: dict[Kind, ToolAnnotations] = {
    "read": ToolAnnotations(read_only_hint=True, open_world_hint=False),
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


@dataclass
class Registrar:
    """Collects a profile's tools, honouring the tool allow-list and read-only mode."""

    only: Collection[str] = ()
    read_only: bool = False
    no_execute: bool = False
    output_schemas: bool = False
    exact: bool = False  # compatibility profiles: keep null fields in results and null defaults
    words: Vocabulary = CANONICAL_WORDS  # how errors name actions and number cells
    tools: list[Tool] = field(default_factory=list)
    kinds: dict[str, Kind] = field(default_factory=dict)

    @property
    def registered(self) -> list[str]:
        return [t.name for t in self.tools]

    def explain(self, exc: NbrelayError) -> str:
        """An error's text in this profile's words (for profiles that return errors as fields)."""
        return exc.render(self.words)

    def tool(
        self, *, kind: Kind, name: str | None = None, title: str | None = None
    ) -> Callable[[Callable[P, Awaitable[Any]]], Callable[P, Awaitable[Any]]]:
        def decorator(fn: Callable[P, Awaitable[Any]]) -> Callable[P, Awaitable[Any]]:
            tool_name = name or fn.__name__
            if self.only and tool_name not in self.only:
                return fn
            if self.read_only and kind != "read":
                return fn
            if self.no_execute and kind == "execute":
                return fn
            annotations = _ANNOTATIONS[kind].model_copy(update={"title": title})
            tool = Tool.from_function(
                _guard(tool_name, fn, self, keep_none=self.exact),
                name=tool_name,
                description=inspect.cleandoc(fn.__doc__ or ""),
                annotations=annotations,
                # Without --output-schemas no output schema is built at all: generating them
                # was most of the server's start-up, only to be dropped below.
                structured_output=None if self.output_schemas else False,
            )
            if tool.context_kwarg is None:  # the wrapper learns which client calls (_reader_of)
                tool.context_kwarg = _CONTEXT_KWARG
            tool.parameters = slim_schema(tool.parameters, keep_null=self.exact)
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
    name: str, fn: Callable[P, Awaitable[Any]], reg: Registrar, *, keep_none: bool = False
) -> Callable[P, Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        ctx = cast(dict[str, Any], kwargs).pop(_CONTEXT_KWARG, None)
        if ctx is None:  # the tool declares its own Context parameter
            ctx = next((v for v in kwargs.values() if isinstance(v, Context)), None)
        reader = current_reader.set(_reader_of(ctx)) if ctx is not None else None
        try:
            return to_result(await fn(*args, **kwargs), keep_none=keep_none)
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
