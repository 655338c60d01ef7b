"""Who may reach the HTTP transport: the Host and Origin allowlists and the bearer tokens (made,
read from a token file or the environment, compared in constant time). ``transport.HttpGuard``
applies them to every request."""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nbrelay.config import TOKEN_ENV, Secret, Settings
from nbrelay.errors import InvalidArgument

MIN_TOKEN_CHARS = 16
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or IP literal, IPv6 with or without brackets) is loopback."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def bracketed(host: str) -> str:
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
    return parts.scheme, bracketed(parts.hostname), None if port in (None, default) else port


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

    def host_form(self, value: str) -> str:
        """An accepted Host header as the lists spell it (names are case-insensitive)."""
        split = _split_host(value)
        if split is None:
            return value
        name, port = split
        return name if port is None else f"{name}:{port}"

    def origin_form(self, origin: str) -> str:
        """An accepted Origin as the lists spell it: lower case, the scheme's default port
        left out (``HTTP://LOCALHOST:80`` is ``http://localhost``)."""
        parts = _origin_parts(origin)
        if parts is None:
            return origin
        scheme, host, port = parts
        return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"

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
        hosts.add(bracketed(settings.host))
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


def token_identity(token: str) -> str:
    """Who holds ``token`` (an accepted one), as per-caller state is keyed for clients without
    an MCP session: a digest, so the token itself is kept nowhere."""
    return "token:" + hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def token_matches(given: str, tokens: Sequence[Secret]) -> bool:
    """Constant-time comparison against every token (no early exit on a match)."""
    candidate = given.encode("utf-8", "surrogateescape")
    found = False
    for token in tokens:
        found |= hmac.compare_digest(candidate, token.reveal().encode("ascii"))
    return found


# -- the guard ------------------------------------------------------------------------------
