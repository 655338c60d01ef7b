"""Tool and resource registration: the one place where nbrelay errors become MCP errors.

``Registrar.tool(kind=...)`` registers an ``async def`` whose docstring (cleaned with
``inspect.cleandoc``) is the description the model reads. The wrapper

* turns ``NbrelayError`` into ``ToolError`` with the message and its hint, in the words of the
  profile (``Registrar.words``: its tool names and index base; see ``nbrelay.errors``);
* turns any other exception into a short "internal error" with an error id (the traceback goes
  to the log on stderr, never to the client);
* returns pydantic results as compact JSON text (or the profile's own text of them,
  ``Registrar.text``) plus ``structuredContent`` (no ``null`` fields), and passes MCP content
  (images) through;
* validates the call's arguments itself (``nbrelay.tools.validation.Arguments``; the SDK hands
  them over untouched, see ``nbrelay.tools.sdk``).

Resource readers go through the same boundary (``Registrar.resource``): their ``NbrelayError``
becomes a ``ResourceError`` in the same profile's words (resource URIs number cells from 0 in
every profile).

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
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, TypeVar, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel

from nbrelay.caller import ANYONE, Caller
from nbrelay.errors import CANONICAL_WORDS, NEUTRAL, NbrelayError, Vocabulary
from nbrelay.tools import asking, sdk
from nbrelay.tools.schema_cache import SCHEMAS
from nbrelay.tools.schemas import brief_schema, example_of, slim_schema, without_example
from nbrelay.tools.validation import Arguments, Wording

logger = logging.getLogger("nbrelay")


# ``inspect``: reads a running kernel (its variables, its list) without changing anything; it is
# marked read-only for clients, yet left out like ``execute`` under --read-only/--no-execute since
# it talks to a kernel that runs code.
Kind = Literal["read", "inspect", "write", "destructive", "execute"]
P = ParamSpec("P")
T = TypeVar("T")
# The name under which a resource reader gets the request's Context (no URI has a variable so
# named; the SDK refuses names that start with "_").
_RESOURCE_CONTEXT = "nbrelay_context"
# A profile's tools: module-level functions ``fn(state, ...)`` and their kinds, in the order
# tools/list shows them; a third item is the tool's ``_meta`` (an MCP Apps view). ``"runs"``: a
# tool that runs code by default (exec=true), registered with the kind the profile gives for it
# (it only edits on a server that runs no code).
ToolFunction = Callable[..., Awaitable[Any]]
ToolKind = Kind | Literal["runs"]
ToolTable = Sequence[tuple[ToolFunction, ToolKind] | tuple[ToolFunction, ToolKind, dict[str, Any]]]

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


# A profile's text for a result model (given the model and its structured data); None: the
# compact JSON of the data.
TextOf = Callable[[BaseModel, dict[str, Any]], str | None]


def to_result(value: Any, *, keep_none: bool = False, text: TextOf | None = None) -> Any:
    """Shape a tool's return value: models become text (compact JSON, or what ``text`` makes
    of them) + structured content; a ``CallToolResult`` the tool built itself passes through."""
    if isinstance(value, CallToolResult):
        return value
    if isinstance(value, BaseModel):
        value = (value,)
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        model, extra = value[0], list(value[1:])
        data = model.model_dump(mode="json", exclude_none=not keep_none, by_alias=True)
        shown = text(model, data) if text is not None else None
        blocks: list[ContentBlock] = [
            TextContent(text=compact_json(data) if shown is None else shown),
            *extra,
        ]
        return CallToolResult(content=blocks, structured_content=data)
    return value


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
    text: TextOf | None = None  # the text of results (default: their compact JSON)
    argument_errors: Wording = "nbrelay"  # how a refused argument is worded (validation.py)
    # The notebook a profile's path-less tools act on (notebook-lr's current one), for the view.
    current_notebook: Callable[[], str] | None = None
    # What the profile adds to every result (the canonical profile's resource links), for
    # the call's caller.
    finish: Callable[[Any, Caller], Awaitable[Any]] | None = None
    tools: list[Tool] = field(default_factory=list)
    kinds: dict[str, Kind] = field(default_factory=dict)
    arguments: dict[str, Arguments] = field(default_factory=dict)

    @property
    def registered(self) -> list[str]:
        return [t.name for t in self.tools]

    def explain(self, exc: NbrelayError) -> str:
        """An error's text in this profile's words (for profiles that return errors as fields)."""
        return exc.render(self.words)

    def resource(self, fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        """A resource reader that acts for the client reading it (what it read counts as that
        client's read, as a tool's would: a reader that declares ``caller: Caller`` is passed
        it, and it is no parameter of the resource) and whose ``NbrelayError`` becomes a
        ``ResourceError`` (its message reaches the client) in this profile's words."""
        signature = inspect.signature(fn)
        wants_caller = CALLER in signature.parameters

        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            passed = cast(dict[str, Any], kwargs)
            ctx = passed.pop(_RESOURCE_CONTEXT, None)
            if wants_caller:
                passed[CALLER] = sdk.caller_of(ctx) if ctx is not None else ANYONE
            try:
                return await fn(*args, **kwargs)
            except NbrelayError as exc:
                raise ResourceError(exc.render(resource_words(self.words))) from exc

        # The SDK passes the request's Context to a parameter annotated with it.
        context = inspect.Parameter(
            _RESOURCE_CONTEXT, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context
        )
        kept = [p for name, p in signature.parameters.items() if name != CALLER]
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*kept, context]
        )
        wrapper.__annotations__ = {
            **{k: v for k, v in fn.__annotations__.items() if k != CALLER},
            _RESOURCE_CONTEXT: Context,
        }
        return wrapper

    def add(
        self, tools: ToolTable, state: Any, *, runs: Kind = "execute", example: bool = True
    ) -> None:
        """Register a profile's ``tools`` with ``state`` (its workspace or context) bound;
        ``example`` as in ``tool``."""
        for fn, kind, *meta in tools:
            self.tool(
                kind=runs if kind == "runs" else kind,
                example=example,
                meta=meta[0] if meta else None,
            )(bind(fn, state))

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
            guarded = _guard(tool_name, fn, self, slot, keep_none=self.exact, text=self.text)
            if self.output_schemas:  # the SDK builds the output schema from the return type
                tool = Tool.from_function(
                    guarded, name=tool_name, description=listed, annotations=annotations, meta=meta
                )
                sdk.pass_context(tool)  # the wrapper learns which client calls (sdk.caller_of)
                built: type[BaseModel] | None = sdk.hand_over_arguments(tool)
                schema_in = tool.parameters
            else:
                # Without --output-schemas no output schema is built at all, and the argument
                # schema comes from the schema cache: the argument model is built on the
                # tool's first call (building every tool's was most of the server's start-up).
                schema_in, built = SCHEMAS.schema_of(guarded)
                tool = sdk.described_tool(
                    guarded,
                    name=tool_name,
                    description=listed,
                    parameters=schema_in,
                    annotations=annotations,
                    meta=meta,
                )
            slot["arguments"] = self.arguments[tool_name] = Arguments(
                tool_name,
                (lambda: built)
                if built is not None
                else functools.partial(sdk.argument_model, guarded),
                schema_in,
                example_of(description),
                self.argument_errors,
            )
            tool.parameters = slim_schema(tool.parameters, keep_null=self.exact)
            if self.brief:
                tool.parameters = brief_schema(tool.parameters)
            schema = sdk.output_schema(tool)
            # Results always carry structuredContent; declaring its schema is opt-in because it
            # nearly doubles the tools/list every agent pays for.
            sdk.set_output_schema(
                tool,
                slim_schema(schema, keep_null=self.exact)
                if self.output_schemas and schema is not None
                else None,
            )
            self.tools.append(tool)
            self.kinds[tool_name] = kind
            return fn

        return decorator


# The parameter of a tool function (``bind``) that receives the caller the boundary built.
CALLER = "caller"
_WANTS_CALLER = "_nbrelay_wants_caller"


def resource_words(words: Vocabulary) -> Vocabulary:
    """A profile's words for its resources: the same actions, cells numbered from 0 (as in
    every resource URI)."""
    if words.index_base == 0:
        return words
    rules = {k: NEUTRAL[k] for k in ("index_rule", "insert_rule")}
    return Vocabulary({**words.words, **rules}, index_base=0)


def bind(fn: Callable[..., Awaitable[Any]], state: Any) -> Callable[..., Awaitable[Any]]:
    """A module-level tool ``fn(state, ...)`` as the SDK registers it: ``state`` (the profile's
    workspace or context) bound, the tool's parameters, name and docstring kept."""

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await fn(state, *args, **kwargs)

    signature = inspect.signature(fn, eval_str=True)
    first, *rest = signature.parameters
    # A ``caller: Caller`` parameter is no argument of the tool: the boundary passes the
    # caller it built for the call (``_guard``).
    hidden = {first, CALLER} if signature.parameters.get(CALLER) is not None else {first}
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[signature.parameters[p] for p in rest if p not in hidden]
    )
    call.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k not in hidden}
    setattr(call, _WANTS_CALLER, CALLER in hidden)
    return call


def _guard(
    name: str,
    fn: Callable[P, Awaitable[Any]],
    reg: Registrar,
    slot: Mapping[str, Arguments],
    *,
    keep_none: bool = False,
    text: TextOf | None = None,
) -> Callable[P, Awaitable[Any]]:
    wants_caller = bool(getattr(fn, _WANTS_CALLER, False))

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        passed = cast(dict[str, Any], kwargs)
        raw = passed.pop(sdk.RAW_ARGUMENTS, None)
        ctx = passed.pop(sdk.CONTEXT_KWARG, None)
        if ctx is None:  # the tool declares its own Context parameter
            ctx = next((v for v in passed.values() if isinstance(v, Context)), None)
        # The caller is built here, once per call, and passed to a tool that declares
        # ``caller`` (and to the profile's ``finish``).
        caller = sdk.caller_of(ctx) if ctx is not None else ANYONE
        if wants_caller:
            passed[CALLER] = caller
        with asking.through(ctx):
            try:
                if raw is None:
                    raise RuntimeError("the MCP SDK did not hand the call's arguments over")
                values = slot["arguments"].validate(raw)
                value = await fn(*args, **values, **passed)
                result = to_result(value, keep_none=keep_none, text=text)
                return await reg.finish(result, caller) if reg.finish is not None else result
            except asking.InputNeeded as needed:  # a question for the person (2026-07-28)
                return needed.result
            except NbrelayError as exc:
                raise ToolError(reg.explain(exc)) from exc
            except (ToolError, anyio.get_cancelled_exc_class()):
                raise
            except Exception as exc:
                error_id = secrets.token_hex(4)
                logger.exception("tool %s failed (error id %s)", name, error_id)
                raise ToolError(
                    f"internal error in nbrelay ({type(exc).__name__}, error id {error_id}). "
                    "The notebook was not changed by the failed step; retry, and report the "
                    "error id if it persists."
                ) from exc

    return wrapper
