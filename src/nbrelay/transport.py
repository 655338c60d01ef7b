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

import contextlib
import errno
import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from nbrelay.config import TOKEN_ENV, Secret, Settings, is_credential_name
from nbrelay.errors import InvalidArgument

logger = logging.getLogger("nbrelay.http")

MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or IP literal, IPv6 with or without brackets) is loopback."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def _bracketed(host: str) -> str:
    """A host as it appears in a Host header or URL: IPv6 literals in brackets."""
    name = host.strip().lower()
    if ":" in name and not name.startswith("["):
        return f"[{name}]"
    return name


def _split_host(value: str) -> tuple[str, int | None] | None:
    """Split a Host header (``name``, ``name:port``, ``[v6]:port``) into name and port."""
    value = value.strip().lower()
    if not value or any(c in value for c in " /\\@?#\x00"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        if not rest:
            return name, None
        if not rest.startswith(":") or not rest[1:].isdigit():
            return None
        return name, int(rest[1:])
    if ":" in value:
        name, _, port = value.rpartition(":")
        if not port.isdigit() or ":" in name:
            return None
        return name, int(port)
    return value, None


@dataclass(frozen=True)
class _OriginRule:
    scheme: str
    host: str
    port: int | str | None  # None: the scheme's default port; "*": any port


def _origin_parts(origin: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, _bracketed(parts.hostname), None if port in (None, default) else port


def _origin_rule(entry: str) -> _OriginRule:
    text = entry.strip()
    any_port = text.endswith(":*")
    parts = _origin_parts(text[:-2] if any_port else text)
    if text in ("*", "null") or parts is None:
        raise InvalidArgument(
            f"--allowed-origins: {entry!r} is not an origin.",
            hint="Give origins like https://lab.example.com or http://localhost:* (scheme, host "
            "and an optional port); wildcards and null are never allowed.",
        )
    scheme, host, port = parts
    return _OriginRule(scheme, host, "*" if any_port else port)


@dataclass(frozen=True)
class Allowlists:
    """The Host names and browser origins a server accepts."""

    hosts: frozenset[str]  # "name" (any port) or "name:port"
    origins: tuple[_OriginRule, ...]

    def host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        split = _split_host(value)
        if split is None:
            return False
        name, port = split
        return name in self.hosts or (port is not None and f"{name}:{port}" in self.hosts)

    def origin_ok(self, origin: str) -> bool:
        parts = _origin_parts(origin)
        if parts is None:
            return False
        scheme, host, port = parts
        return any(
            r.scheme == scheme and r.host == host and (r.port == "*" or r.port == port)
            for r in self.origins
        )

    def sdk_settings(self) -> Any:
        """The same lists in the SDK's TransportSecuritySettings form (checked a second time)."""
        from mcp.server.transport_security import TransportSecuritySettings

        hosts = sorted({h for name in self.hosts for h in (name, f"{name}:*")})
        origins: list[str] = []
        for r in self.origins:
            base = f"{r.scheme}://{r.host}"
            if r.port == "*":
                origins += [base, f"{base}:*"]
            else:
                origins.append(base if r.port is None else f"{base}:{r.port}")
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )


def allowlists(settings: Settings) -> Allowlists:
    """Loopback names, ``--host`` (unless a wildcard address) and ``--allowed-hosts``; loopback
    origins (any port) and ``--allowed-origins``."""
    hosts = set(_LOOPBACK_HOSTS)
    if settings.host not in ("0.0.0.0", "::", ""):  # noqa: S104 - a comparison, not a bind
        hosts.add(_bracketed(settings.host))
    for entry in settings.allowed_hosts:
        split = _split_host(entry)
        if split is None or entry.strip() in ("*", ""):
            raise InvalidArgument(
                f"--allowed-hosts: {entry!r} is not a host name.",
                hint="Give names clients use in URLs, like nb.example.com or nb.example.com:8443.",
            )
        name, port = split
        hosts.add(name if port is None else f"{name}:{port}")
    origins = [_OriginRule(s, h, "*") for h in _LOOPBACK_HOSTS for s in ("http", "https")]
    origins += [_origin_rule(o) for o in settings.allowed_origins]
    return Allowlists(frozenset(hosts), tuple(origins))


# -- tokens ---------------------------------------------------------------------------------


def new_token() -> str:
    """A new random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _check_token(token: str, where: str) -> Secret:
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidArgument(
            f"the token from {where} is too short ({len(token)} characters).",
            hint=f"Use at least {MIN_TOKEN_CHARS} random characters, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`.",
        )
    if not all(33 <= ord(c) < 127 for c in token):
        raise InvalidArgument(
            f"the token from {where} contains spaces or non-ASCII characters.",
            hint="A bearer token is printable ASCII without spaces.",
        )
    return Secret(token)


def _create_token_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(new_token() + "\n")
    sys.stderr.write(f"nbrelay: wrote a new random token to {path} (readable by you only)\n")


def read_token_file(path: Path) -> list[Secret]:
    """The tokens in ``path`` (one per line; blank lines and ``#`` comments skipped).

    A missing file is created with a new random token and mode 0600. A file other users can
    read is refused, as ssh refuses such keys.
    """
    if not os.path.lexists(path):
        _create_token_file(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        detail = "is a symlink" if exc.errno == errno.ELOOP else exc.strerror
        raise InvalidArgument(
            f"--token-file {path}: cannot read it ({detail}).",
            hint="Point --token-file at a regular file that only you can read.",
        ) from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"--token-file {path} is not a regular file.")
        if st.st_mode & 0o077:
            raise InvalidArgument(
                f"--token-file {path} can be read by other users (mode "
                f"{stat.S_IMODE(st.st_mode):03o}).",
                hint=f"Run `chmod 600 {path}`.",
            )
        raw = fh.read(64 * 1024)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"--token-file {path} is not ASCII text.", hint="Put one token per line."
        ) from exc
    lines = [ln.strip() for ln in text.splitlines()]
    tokens = [ln for ln in lines if ln and not ln.startswith("#")]
    return [_check_token(t, f"--token-file {path} (line {lines.index(t) + 1})") for t in tokens]


def load_tokens(settings: Settings) -> tuple[Secret, ...]:
    """Every token the server accepts: ``$NBRELAY_TOKEN`` and the lines of ``--token-file``.

    Raises:
        InvalidArgument: no token at all (HTTP always needs one), or a token that is unusable.
    """
    tokens: list[Secret] = []
    if settings.token is not None:
        tokens.append(_check_token(settings.token.reveal(), f"${TOKEN_ENV}"))
    if settings.token_file is not None:
        tokens += read_token_file(settings.token_file)
    if not tokens:
        where = (
            ""
            if is_loopback(settings.host)
            else f" {settings.host} is not a loopback address: anyone who can reach it could "
            "read and change your notebooks."
        )
        raise InvalidArgument(
            "serving over HTTP needs a bearer token; none was given." + where,
            hint=f"Set ${TOKEN_ENV}, or pass --token-file FILE (a missing FILE is created with a "
            "new random token).",
        )
    return tuple(tokens)


def token_matches(given: str, tokens: Sequence[Secret]) -> bool:
    """Constant-time comparison against every token (no early exit on a match)."""
    candidate = given.encode("utf-8", "surrogateescape")
    found = False
    for token in tokens:
        found |= hmac.compare_digest(candidate, token.reveal().encode("ascii"))
    return found


# -- the guard ------------------------------------------------------------------------------


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
        if origin is not None:
            send = _with_cors(send, origin)
        if _header(scope, b"mcp-session-id") is None:
            send = self._explain_session_limit(send)
        await self.app(scope, receive, send)

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
) -> None:
    body = json.dumps({"error": error, "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
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
        url = f"http://{_bracketed(settings.host)}:{bound[0]}{MCP_PATH}"
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
