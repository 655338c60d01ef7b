"""Secrets and their redaction: tokens that never show in reprs, logs or tracebacks, and the
rules that take credentials out of any text (URLs, headers, query strings)."""

from __future__ import annotations

import logging
import re


class Secret:
    """A secret string (a token) that never shows in reprs, logs or tracebacks.

    Every secret made is remembered, so that ``redact`` (and the log filter ``RedactSecrets``)
    can take it out of any text, whatever library wrote it.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        if len(value) >= _MIN_SECRET:
            _SECRETS.add(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__


_MIN_SECRET = 6  # shorter "secrets" would redact ordinary words
_SECRETS: set[str] = set()
REDACTED = "[redacted]"

# Query parameter names that carry credentials (compared lower-cased, without - and _), and
# the words that make any other name one.
CREDENTIAL_NAMES = frozenset(
    {
        "token", "accesstoken", "idtoken", "refreshtoken", "authtoken", "apitoken",
        "sessiontoken", "xsrf", "xsrftoken", "csrf", "csrftoken", "auth", "authorization",
        "apikey", "key", "xapikey", "secret", "clientsecret", "password", "passwd", "pass",
        "pwd", "bearer", "jwt", "sig", "signature", "credential", "credentials",
    }
)  # fmt: skip
_CREDENTIAL_WORDS = ("token", "secret", "passw", "apikey", "credential", "bearer")


def is_credential_name(name: str) -> bool:
    """Whether a query parameter (or header) named ``name`` would carry a credential."""
    plain = re.sub(r"[-_.\s]", "", name.lower())
    return plain in CREDENTIAL_NAMES or any(w in plain for w in _CREDENTIAL_WORDS)


def url_problem(url: str) -> str | None:
    """Why a server URL must be refused: credentials in it (user:password@, or a query parameter
    such as ?token=), which would show in process lists, logs and error messages."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url.strip())
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return None  # not a URL at all: the caller says so
    if userinfo or "@" in parts.netloc:
        return "it carries a user name or password (user:password@host)"
    names = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if any(is_credential_name(k) for k in names):
        return "it carries a credential in its query string (such as ?token=)"
    return None


def safe_url(url: str) -> str:
    """``url`` as it may be shown: no user name, password, query or fragment."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url.strip())
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return REDACTED


_HEADER_SECRET = re.compile(
    r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-xsrftoken|x-api-key)"
    r"(\W{1,4})([^\r\n'\"]+)"
)
_QUERY_SECRET = re.compile(r"([?&;]([\w.\-]+)=)([^&\s'\"#]+)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]+@")


def redact(text: str) -> str:
    """``text`` without credentials: every known secret, the values of Authorization and
    Cookie headers, credential query parameters, and user:password@ in URLs."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _HEADER_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _QUERY_SECRET.sub(
        lambda m: m.group(1) + REDACTED if is_credential_name(m.group(2)) else m.group(0), text
    )
    return _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


class RedactSecrets(logging.Filter):
    """A log filter that takes credentials out of every record (message, arguments,
    traceback): the SDK's HTTP client and websockets log request headers at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: log what there is
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


TOKEN_ENV = "NBRELAY_TOKEN"  # noqa: S105 - the variable's name, not a token
JUPYTER_TOKEN_ENV = "JUPYTER_TOKEN"  # noqa: S105 - the variable's name, not a token
