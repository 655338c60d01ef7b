"""Streamable HTTP: the MCP server behind a guard that checks Host, Origin and a bearer token.

``nbrelay serve --http`` listens on 127.0.0.1 by default and serves MCP at ``/mcp``. Every
request passes :class:`HttpGuard` before it reaches the SDK's app:

1. ``Host`` must name this server (loopback names, ``--host``, ``--allowed-hosts``): else **421**.
   The SDK switches its own check off when bound to anything but loopback; this one never is.
2. ``Origin``, when present, must be a loopback origin or one of ``--allowed-origins`` (``null``
   never is): else **403**. CORS answers echo an allowed origin, never ``*``.
3. ``Authorization: Bearer <token>`` must match a configured token, compared with
   ``hmac.compare_digest``: else **401** with ``WWW-Authenticate: Bearer``. A query string that
   carries a credential is refused (a parameter named like one, ``?token=``, ``?api_key=``…, or
   any parameter whose value is a valid token), and no token is ever logged.

The SDK's app then applies its own Host/Origin settings (the same lists), the JSON content type
(**400**), the 4 MiB body limit (**413**) and the cap on open sessions (``--max-http-sessions``:
**503**, with a body naming the limit and what to do).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

from nbrelay.caller import IDENTITY_SCOPE_KEY
from nbrelay.config import Secret, Settings, is_credential_name
from nbrelay.errors import InvalidArgument
from nbrelay.http_access import (
    Allowlists,
    allowlists,
    bracketed,
    load_tokens,
    read_token_file,
    token_identity,
    token_matches,
)

logger = logging.getLogger("nbrelay.http")

MCP_PATH = "/mcp"
_CORS_ALLOW_HEADERS = (
    "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID"
)
_CORS_EXPOSE_HEADERS = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# -- addresses ------------------------------------------------------------------------------


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class HttpGuard:
    """ASGI middleware: Host, Origin and bearer-token checks, and CORS without wildcards."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: Sequence[Secret],
        lists: Allowlists,
        *,
        on_started: Callable[[], None] | None = None,
        max_sessions: int = 0,
    ) -> None:
        if not tokens:
            raise InvalidArgument("the HTTP guard needs at least one token.")
        self.app = app
        self.max_sessions = max_sessions
        self._tokens = tuple(tokens)
        self.lists = lists
        self._on_started = on_started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan_send(send))
            return
        if scope["type"] != "http":
            await _refuse_websocket(send)
            return
        method = scope.get("method", "")
        where = f"{method} {scope.get('path', '')}"
        if _header(scope, b"transfer-encoding") is not None and (
            _header(scope, b"content-length") is not None
        ):
            logger.warning("refused %s: both Content-Length and Transfer-Encoding", where)
            await _reply(
                send,
                400,
                "invalid_request",
                "the request has both Content-Length and Transfer-Encoding, which proxies may "
                "read differently (request smuggling); send one of them. The connection is "
                "closed.",
                close=True,
            )
            return
        host = _header(scope, b"host")
        if not self.lists.host_ok(host):
            logger.warning("refused %s: Host %r is not this server's", where, (host or "")[:100])
            await _reply(
                send,
                421,
                "misdirected_request",
                "the Host header does not name this server; add the name with --allowed-hosts "
                "if clients reach it that way.",
            )
            return
        origin = _header(scope, b"origin")
        if origin is not None and not self.lists.origin_ok(origin):
            logger.warning("refused %s: Origin %r is not allowed", where, origin[:100])
            await _reply(
                send,
                403,
                "forbidden_origin",
                "this Origin may not call the server; allow it with --allowed-origins.",
            )
            return
        if method == "OPTIONS" and _header(scope, b"access-control-request-method") is not None:
            await _preflight(send, origin)
            return
        if self._credential_in_query(scope):
            logger.warning("refused %s: a credential was sent in the URL", where)
            await _reply(
                send,
                401,
                "invalid_request",
                "tokens in URLs are refused (URLs end up in logs and browser history); send "
                "the header Authorization: Bearer <token>.",
                challenge='Bearer realm="nbrelay", error="invalid_request"',
                origin=origin,
            )
            return
        auth = _header(scope, b"authorization") or ""
        scheme, _, given = auth.strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            logger.info("refused %s: no bearer token", where)
            await _reply(
                send,
                401,
                "invalid_token",
                "this server needs the header Authorization: Bearer <token>.",
                challenge='Bearer realm="nbrelay"',
                origin=origin,
            )
            return
        if not token_matches(given.strip(), self._tokens):
            logger.warning("refused %s: wrong bearer token", where)
            await _reply(
                send,
                401,
                "invalid_token",
                "the bearer token is not valid for this server.",
                challenge='Bearer realm="nbrelay", error="invalid_token"',
                origin=origin,
            )
            return
        # Who sent it, for a client without an MCP session: the token it holds (nbrelay.caller).
        scope[IDENTITY_SCOPE_KEY] = token_identity(given.strip())
        if origin is not None:
            send = _with_cors(send, origin)
        if _header(scope, b"mcp-session-id") is None:
            send = self._explain_session_limit(send)
        await self.app(self._normal_names(scope), receive, send)

    def _normal_names(self, scope: Scope) -> Scope:
        """The request with its Host and Origin as the allowlists spell them: names are
        case-insensitive (``Host: LOCALHOST``), but the SDK's own second check compares them
        as strings and refused such a request after this guard had let it through."""
        headers = []
        for key, value in scope.get("headers") or ():
            name = bytes(key).lower()
            if name == b"host":
                value = self.lists.host_form(bytes(value).decode("latin-1")).encode("latin-1")
            elif name == b"origin":
                value = self.lists.origin_form(bytes(value).decode("latin-1")).encode("latin-1")
            headers.append((key, value))
        return {**scope, "headers": headers}

    def _credential_in_query(self, scope: Scope) -> bool:
        """A query parameter named like a credential, or whose name or value (or a word of it,
        as in ``Bearer <token>``) is one of the server's tokens."""
        query = bytes(scope.get("query_string") or b"").decode("latin-1")
        found = False
        for key, value in parse_qsl(query, keep_blank_values=True):
            found |= is_credential_name(key)
            for candidate in (key, value, *value.split()):
                found |= token_matches(candidate, self._tokens)
        return found

    def _explain_session_limit(self, send: Send) -> Send:
        """The SDK answers a new session past ``max_sessions`` with a bare 503 "Too many open
        sessions"; say which limit it is and what to do."""
        state = {"limited": False}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 503:
                state["limited"] = True
                return
            if state["limited"] and message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                logger.warning(
                    "refused a new MCP session: %d are open (--max-http-sessions)",
                    self.max_sessions,
                )
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32000,
                            "message": (
                                f"this server already has {self.max_sessions} MCP sessions "
                                "open, its --max-http-sessions limit. Close clients you no "
                                "longer use (they end their session with DELETE), wait for idle "
                                "sessions to end (after 30 minutes), or start the server with a "
                                "higher --max-http-sessions."
                            ),
                        },
                    }
                ).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"60"),
                ]
                await send({"type": "http.response.start", "status": 503, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        return wrapped

    def _lifespan_send(self, send: Send) -> Send:
        async def wrapped(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete" and self._on_started:
                self._on_started()

        return wrapped


def _with_cors(send: Send, origin: str) -> Send:
    async def send_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *_cors_headers(origin)]
        await send(message)

    return send_cors


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", _CORS_EXPOSE_HEADERS.encode()),
        (b"vary", b"Origin"),
    ]


async def _preflight(send: Send, origin: str | None) -> None:
    headers = [(b"content-length", b"0"), (b"allow", b"GET, POST, DELETE, OPTIONS")]
    if origin is not None:
        headers += [
            *_cors_headers(origin),
            (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
            (b"access-control-allow-headers", _CORS_ALLOW_HEADERS.encode()),
            (b"access-control-max-age", b"600"),
        ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _reply(
    send: Send,
    status: int,
    error: str,
    description: str,
    *,
    challenge: str | None = None,
    origin: str | None = None,
    close: bool = False,
) -> None:
    body = json.dumps({"error": error, "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if close:
        headers.append((b"connection", b"close"))
    if challenge:
        headers.append((b"www-authenticate", challenge.encode()))
    if origin is not None:
        headers += _cors_headers(origin)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(send: Send) -> None:
    await send({"type": "websocket.close", "code": 1008})


# -- the app and the server -----------------------------------------------------------------


def build_app(
    server: Any,
    settings: Settings,
    tokens: Sequence[Secret],
    *,
    on_started: Callable[[], None] | None = None,
) -> HttpGuard:
    """The guarded ASGI app for an MCPServer (its lifespan runs the session manager)."""
    lists = allowlists(settings)
    inner = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=lists.sdk_settings(),
        host=settings.host,
        max_sessions=settings.max_http_sessions,
    )
    return HttpGuard(
        inner, tokens, lists, on_started=on_started, max_sessions=settings.max_http_sessions
    )


_TIMED_OUT_TEXT = b"the request did not arrive in time (--http-timeout); send it again.\n"
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TIMED_OUT_TEXT), _TIMED_OUT_TEXT)
)
_BODY_TIMES = 10  # a request's whole body may take this many --http-timeout


def deadline_protocol(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (h11) with deadlines for slow clients, which uvicorn does not
    have: it waits forever for a first request, for the rest of a request's headers, and for a
    body, so a few clients that trickle bytes (slowloris) hold connections open without end.
    Here a connection is closed when it stays idle ``timeout`` seconds (before its first request
    or between requests, as uvicorn's keep-alive timeout, set to the same), when a request's
    line and headers take longer than ``timeout`` from their first byte, or when its body pauses
    longer than ``timeout`` or takes more than ten times it in all; a request cut short gets a
    408 first. A real client sends its headers at once and its body as fast as the network
    goes, so it never meets these deadlines. uvicorn's internals used: ``H11Protocol``'s
    ``conn`` (the h11 connection), ``cycle``, ``flow``, ``loop``, ``transport`` and the hooks
    overridden below; tests/http/test_limits.py pins them with a real server."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Deadlines(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.timeout_keep_alive = timeout  # type: ignore[assignment]
            self._timer: asyncio.TimerHandle | None = None
            self._phase = ""
            self._body_ends = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm("idle", timeout)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _follow(self) -> None:
            """Set the deadline for what the connection waits for now."""
            if self.transport.is_closing():
                self._disarm()
                return
            state = self.conn.their_state
            if state is h11.IDLE:  # between requests: a head begun, or nothing (keep-alive)
                if self._phase != "head" and self.conn.trailing_data[0]:
                    self._arm("head", timeout)
            elif state is h11.SEND_BODY:
                now = self.loop.time()
                if self._phase != "body":
                    self._body_ends = now + _BODY_TIMES * timeout
                self._arm("body", min(timeout, self._body_ends - now))
            else:  # the request is in: the application takes the time it needs
                self._disarm()

        def _arm(self, phase: str, delay: float) -> None:
            self._disarm()
            self._phase = phase
            self._timer = self.loop.call_later(max(delay, 0.0), self._expired, phase)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._phase = ""

        def _expired(self, phase: str) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if phase == "body" and self.flow.read_paused:  # nbrelay is not reading: not slow
                self._arm("body", timeout)
                return
            logger.info("closed a connection that was %s for over %g s", _WAITING[phase], timeout)
            started = getattr(self.cycle, "response_started", False)  # None before a request
            if phase == "head" or (phase == "body" and not started):
                self.transport.write(_TIMED_OUT)
            self.transport.close()

    return Deadlines


_WAITING = {
    "idle": "idle",
    "head": "sending a request's headers",
    "body": "sending a request's body",
}


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise InvalidArgument(
            f"--host {host!r} is not an address of this machine ({exc.strerror}).",
            hint="Use 127.0.0.1 (the default), ::1, or an address of one of its interfaces.",
        ) from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidArgument(
            f"cannot listen on {host} port {port}: {exc.strerror}.",
            hint="Pick another --port (0 picks a free one), or stop what is using it.",
        ) from exc
    sock.set_inheritable(False)
    return sock


async def serve(settings: Settings) -> None:
    """Run ``nbrelay serve --http`` until interrupted (SIGINT or SIGTERM)."""
    tokens = load_tokens(settings)
    lists = allowlists(settings)

    import uvicorn

    from nbrelay.server import build_server

    bound: list[int] = []

    def announce() -> None:
        url = f"http://{bracketed(settings.host)}:{bound[0]}{MCP_PATH}"
        names = ", ".join(sorted(lists.hosts))
        sys.stderr.write(
            f"nbrelay: serving MCP over streamable HTTP at {url} "
            f"(bearer token required; Host names accepted: {names})\n"
        )
        sys.stderr.flush()

    # Everything that can refuse to start does so before the port is taken.
    app = build_app(build_server(settings), settings, tokens, on_started=announce)
    sock = _bind(settings.host, settings.port)
    bound.append(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        http=deadline_protocol(settings.http_timeout),
        log_config=None,
        access_log=False,
        lifespan="on",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=5,
    )
    try:
        await uvicorn.Server(config).serve([sock])
    finally:
        sock.close()


__all__ = ["HttpGuard", "build_app", "read_token_file", "serve", "token_matches"]
