"""Every use of the MCP SDK's internals, in one place.

nbrelay builds on ``mcp`` 2.x's public API (``MCPServer``, ``Tool.from_function``,
``Context``, ``ToolError``). Where it needs more than that API gives, it reaches into the SDK
here and nowhere else, so an SDK upgrade that moves these parts breaks this module alone:

* argument hand-over: ``FuncMetadata.validate_arguments`` (``mcp.server.mcpserver.utilities``)
  is replaced so the SDK passes a call's arguments on untouched and nbrelay validates them
  (``nbrelay.tools.validation``); pinned by tests/tools/test_arguments.py;
* a tool listed from a given argument schema (``described_tool``: the ``Tool`` made without
  ``Tool.from_function``, so no pydantic argument model is built at start) and the argument
  model ``Tool.from_function`` builds (``argument_model``, from ``func_metadata``), built when
  a call first needs it;
* the context parameter: a tool that declares no ``Context`` still receives one
  (``Tool.context_kwarg``), to learn which client calls;
* the output schema a tool declares (``Tool.fn_metadata.output_schema``);
* the client connection behind a request (``ServerSession._connection``: the session object is
  made per request) and its outbound channel (``Connection.outbound``: the one thing a
  2026-07-28 client over stdio keeps from request to request), the HTTP session id (``request_context.request.headers``) and the request's
  ASGI scope (``request_context.request.scope``), to learn who calls (``caller_of``);
* request handlers the high-level server does not register (``MCPServer._lowlevel_server``:
  the legacy ``resources/subscribe``), and one it does, replaced: ``subscriptions/listen``,
  served by ``nbrelay.tools.listen`` for the tasks extension's ``taskIds``;
* the SDK's log set-up (``mcp.server.mcpserver.server.configure_logging``), kept from importing
  ``rich``;
* the stdio run loop (``MCPServer.run_stdio_async``, rebuilt from ``mcp.server.stdio`` and
  ``MCPServer._lowlevel_server.run``), so that a line the transport cannot decode, which the SDK
  drops without an answer, is answered (``nbrelay.stdio``).

tests/tools/test_sdk.py checks each of these against the installed SDK, and
tests/tools/golden/ holds every profile's ``tools/list`` as a client receives it.
"""

from __future__ import annotations

import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcp.server import connection as sdk_connection
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata, func_metadata
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from nbrelay.caller import ANYONE, IDENTITY_SCOPE_KEY, JUPYTER_SCOPE_KEY, Caller

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

# The keyword arguments the SDK passes to a tool's wrapper in place of the call's own.
RAW_ARGUMENTS = "_nbrelay_arguments"
CONTEXT_KWARG = "_nbrelay_context"


class _HandOver(FuncMetadata):
    """The SDK's argument metadata, validating nothing: the arguments go to the wrapper as sent."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {RAW_ARGUMENTS: dict(arguments_to_validate)}


def hand_over_arguments(tool: Tool) -> type[BaseModel]:
    """Make the SDK hand ``tool``'s arguments over unvalidated, as one keyword argument named
    ``RAW_ARGUMENTS``; returns the argument model the SDK built from the function's signature
    (its fields are the tool's parameters).

    MCPServer validates a call's arguments with ``FuncMetadata.validate_arguments`` before the
    tool runs. It json-decodes any string sent to a parameter not annotated exactly ``str``
    ("[1, 2]" sent to a ``str | None`` parameter arrives as a list, "null" as None) and reports
    failures in pydantic's words; nbrelay validates them itself instead."""
    meta = tool.fn_metadata
    tool.fn_metadata = _HandOver(
        arg_model=meta.arg_model,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
    )
    return meta.arg_model


def described_tool(
    fn: Callable[..., Awaitable[Any]],
    *,
    name: str,
    description: str,
    parameters: dict[str, Any],
    annotations: ToolAnnotations | None,
    meta: dict[str, Any] | None,
) -> Tool:
    """The ``Tool`` ``Tool.from_function(fn, structured_output=False)`` makes, with
    ``parameters`` (what ``argument_schema`` gives for ``fn``) as its argument schema, its
    arguments handed over (``hand_over_arguments``) and the context passed (``pass_context``):
    no argument model is built (the SDK uses one only to validate, which nbrelay does)."""
    tool = Tool(
        fn=fn,
        name=name,
        description=description,
        parameters=parameters,
        fn_metadata=_HandOver(arg_model=ArgModelBase),
        is_async=True,
        context_kwarg=find_context_parameter(fn),
        annotations=annotations,
        meta=meta,
    )
    pass_context(tool)
    return tool


def argument_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """The model of ``fn``'s arguments, as ``Tool.from_function`` builds it (its fields are the
    tool's parameters; a ``Context`` parameter is none of them)."""
    context = find_context_parameter(fn)
    skip = [context] if context is not None else []
    return func_metadata(fn, skip_names=skip, structured_output=False).arg_model


def argument_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A tool's argument schema as ``Tool.from_function`` makes it from ``argument_model``."""
    return model.model_json_schema(by_alias=True)


def pass_context(tool: Tool) -> None:
    """Have the SDK pass the request's ``Context`` as ``CONTEXT_KWARG`` to a tool whose function
    declares none (one that declares its own gets it under its own name)."""
    if tool.context_kwarg is None:
        tool.context_kwarg = CONTEXT_KWARG


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The output schema the SDK built for ``tool`` (None without structured output)."""
    return tool.fn_metadata.output_schema


def set_output_schema(tool: Tool, schema: dict[str, Any] | None) -> None:
    """Declare ``schema`` as ``tool``'s output schema in tools/list (None: declare none)."""
    tool.fn_metadata.output_schema = schema


def connection_of(session: Any) -> object | None:
    """The client connection a request came on: the SDK makes a session object per request,
    the connection under it lives as long as the client stays connected."""
    return getattr(session, "_connection", None)


# The SDK's one "no channel" outbound, shared by every connection that has none of its own.
NO_CHANNEL: object | None = getattr(sdk_connection, "_NO_CHANNEL", None)


def stream_of(session: Any) -> object | None:
    """What lasts as long as a client's stream (stdio, in process): its connection's outbound
    channel. A 2026-07-28 client gets a new connection object per request, all on one channel;
    a handshake-era client keeps one connection, and its channel with it. None for a client with
    no channel of its own (the in-process 2026-07-28 client shares the SDK's "no channel")."""
    connection = connection_of(session)
    outbound: object | None = getattr(connection, "outbound", None)
    if outbound is None or outbound is NO_CHANNEL:
        return None
    return outbound


_STREAMS: weakref.WeakKeyDictionary[Any, Caller] = weakref.WeakKeyDictionary()


def caller_of(ctx: Any) -> Caller:
    """Who a tool call or resource read comes from (``nbrelay.caller``): its key
    (``_caller_key``) and, in Jupyter, who Jupyter authenticated (the request's scope)."""
    try:
        context = ctx.request_context
    except (AttributeError, ValueError):
        return ANYONE
    return caller_of_request(context)


def caller_of_request(context: Any) -> Caller:
    """``caller_of`` from the request's context (``ServerRequestContext``): what an MCP
    middleware or low-level handler has."""
    found = _caller_key(context)
    scope = getattr(getattr(context, "request", None), "scope", None)
    jupyter = scope.get(JUPYTER_SCOPE_KEY) if isinstance(scope, dict) else None
    return found if jupyter is None else replace(found, jupyter=jupyter)


def _caller_key(context: Any) -> Caller:
    """Who a tool call comes from (``nbrelay.caller``): its MCP session over HTTP; for a
    sessionless HTTP request (protocol 2026-07-28), the identity that authenticated it (the
    transport put it in the request's scope); otherwise its client's stream (stdio, in
    process: ``stream_of``), which keeps one key while it lasts; ``ANYONE`` when none is
    known."""
    request = getattr(context, "request", None)
    headers = getattr(request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    if session_id:
        return Caller(f"session:{session_id}")
    scope = getattr(request, "scope", None)
    identity = scope.get(IDENTITY_SCOPE_KEY) if isinstance(scope, dict) else None
    if isinstance(identity, str) and identity:
        return Caller(identity)
    if request is not None:  # a sessionless request nobody vouched for: anyone
        return ANYONE
    stream = stream_of(context.session)
    if stream is None:
        return ANYONE
    try:
        caller = _STREAMS.get(stream)
        if caller is None:
            caller = _STREAMS[stream] = Caller(f"stream:{secrets.token_hex(8)}")
    except TypeError:  # not weak-referenceable
        return Caller(f"stream:{id(stream)}")
    return caller


def add_request_handler(
    server: MCPServer[Any],
    method: str,
    params: type[BaseModel],
    handler: Callable[[Any, Any], Awaitable[Any]],
) -> None:
    """Answer ``method`` with ``handler`` on a request the high-level server does not handle."""
    server._lowlevel_server.add_request_handler(method, params, handler)


def plain_logging() -> None:
    """Keep the SDK from importing ``rich`` for its log handler (a tenth of start-up, and
    memory): nbrelay logs plain lines to stderr, and once logging is configured the SDK's own
    ``basicConfig`` call does nothing anyway."""
    import mcp.server.mcpserver.server as sdk

    def configure(level: str = "INFO") -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=level, format="%(message)s")

    if hasattr(sdk, "configure_logging"):
        sdk.configure_logging = configure


Answer = Callable[[Exception], "SessionMessage | None"]


async def serve_stdio(server: MCPServer[Any], answer: Answer) -> None:
    """``server.run("stdio")`` as the SDK does it (its transport, which claims fds 0 and 1, and
    its run loop), except that each line the transport could not decode goes to ``answer``, and
    the message that returns (if any) is sent back to the client. The SDK puts such a line's
    exception in the read stream, where the server drops it: the client waited forever."""
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        answering = _Answering(read_stream, write_stream, answer)
        await low.run(answering, write_stream, low.create_initialization_options())


class _Answering:
    """The transport's read stream without its exceptions: each is answered on the write stream
    instead of reaching the server. The sender's context (``last_context``) is the inner
    stream's."""

    def __init__(self, inner: Any, write: Any, answer: Answer) -> None:
        self._inner = inner
        self._write = write
        self._answer = answer

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            try:
                reply = self._answer(item)
            except Exception:  # an answer must never cost the connection
                logging.getLogger("nbrelay.stdio").exception("could not answer a bad line")
                continue
            if reply is not None:
                await self._write.send(reply)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
