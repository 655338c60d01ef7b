"""MCP over stdio: the SDK's transport, with an answer to every request line it cannot decode.

The SDK drops a line that is not a JSON-RPC message without answering it, so the client waits
forever for its request: a string holding a lone surrogate escape (``"\\ud800"``, which is not
Unicode text), values nested deeper than the SDK's JSON parser takes (about 200 levels), or JSON
that is no JSON-RPC request. Over HTTP the same body gets a 400 with a JSON-RPC error. Here each
such line gets a JSON-RPC error as well: ``Parse error`` (-32700) or ``Invalid Request``
(-32600), with the request's ``id`` when the line has one at its top level (found by scanning
the top level only, so what cannot be parsed further in does not matter), else ``id: null``, as
JSON-RPC 2.0 says. A line that is a notification or a response gets no answer.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from nbrelay.tools import sdk

logger = logging.getLogger("nbrelay.stdio")

_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_STRUCTURE = re.compile(r'[\[\]{}"]')
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


async def serve(server: MCPServer[Any]) -> None:
    """Serve ``server`` on stdin/stdout until the client closes stdin."""
    await sdk.serve_stdio(server, answer)


def answer(exc: Exception) -> SessionMessage | None:
    """The JSON-RPC error for a line the transport could not decode (None: the line was a
    notification or a response, which get no answer)."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if bad_json is not None or not errors:
        text = bad_json.get("input") if bad_json is not None else None
        members, whole = top_level(text) if isinstance(text, str) else ({}, False)
        code, message = PARSE_ERROR, f"Parse error: {_why(bad_json, exc)} Nothing was done."
    else:
        members = next(
            (
                e["input"]
                for e in errors
                if isinstance(e.get("input"), dict) and len(e.get("loc", ())) <= 2
            ),
            {},
        )
        whole = True
        first = errors[0]
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "the message"
        code = INVALID_REQUEST
        message = (
            "Invalid Request: the line is JSON but not a JSON-RPC 2.0 request "
            f"({where}: {first.get('msg', 'invalid')}). Nothing was done."
        )
    rid = members.get("id")
    known = isinstance(rid, (int, str)) and not isinstance(rid, bool) and _sendable(rid)
    message = message.encode("utf-8", "replace").decode("utf-8")  # no lone surrogate goes out
    method = "method" in members
    if whole and (method != ("id" in members)):  # a notification or a response: no answer
        logger.warning("dropped an undecodable notification or response: %s", message)
        return None
    logger.warning("answered an undecodable line (id %r): %s", rid if known else None, message)
    error = JSONRPCError(
        jsonrpc="2.0", id=rid if known else None, error=ErrorData(code=code, message=message)
    )
    return SessionMessage(error)


def _sendable(rid: int | str) -> bool:
    """Whether an id can go back in an answer: a string with a lone surrogate cannot be
    encoded (the SDK's writer would fail, and stdout with it)."""
    try:
        str(rid).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _why(bad_json: Any, exc: Exception) -> str:
    said = str(bad_json.get("msg", "")) if bad_json is not None else str(exc)
    if "hex escape" in said or "surrogate" in said:
        return (
            "a string holds a lone surrogate escape (\\ud800 to \\udfff without its pair), which "
            "is not Unicode text; send the character itself (UTF-8) or its full escape pair."
        )
    if "recursion limit" in said:
        return (
            "values are nested deeper than the about 200 levels this server's JSON parser takes; "
            "send flatter data (a notebook as a JSON string, for instance)."
        )
    return f"the line is not valid JSON ({said[:200]}); send each message as one line of JSON."


def top_level(text: str) -> tuple[dict[str, Any], bool]:
    """The scalar members (strings, numbers, true, false, null) at the top level of the JSON
    object ``text``, found without parsing nested values (which are skipped, however deep); and
    whether the object was scanned to its end. Python's own string scanner reads the strings: it
    takes lone surrogates."""
    found: dict[str, Any] = {}
    try:
        i = _skip(text, 0)
        if text[i] != "{":
            return found, False
        i = _skip(text, i + 1)
        if text[i] == "}":
            return found, True
        while True:
            if text[i] != '"':
                return found, False
            key, i = _scanstring(text, i + 1)
            i = _skip(text, i)
            if text[i] != ":":
                return found, False
            i = _skip(text, i + 1)
            if text[i] in "[{":
                i = _past_nested(text, i)
            elif text[i] == '"':
                found[key], i = _scanstring(text, i + 1)
            else:
                scalar = _SCALAR.match(text, i)
                if scalar is None:
                    return found, False
                found[key] = json.loads(scalar.group())
                i = scalar.end()
            i = _skip(text, i)
            if text[i] == "}":
                return found, True
            if text[i] != ",":
                return found, False
            i = _skip(text, i + 1)
    except (IndexError, ValueError):
        return found, False


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match is not None else i


def _past_nested(text: str, i: int) -> int:
    """The index just past the array or object that starts at ``i`` (without recursion)."""
    depth = 0
    while True:
        match = _STRUCTURE.search(text, i)
        if match is None:
            raise ValueError("unterminated")
        c, i = match.group(), match.end()
        if c == '"':
            _, i = _scanstring(text, i)
        elif c in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i
