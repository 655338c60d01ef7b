"""The attack surface, discovered from the servers themselves: every profile's tools, which of
their parameters take paths, and plausible values for the rest.

Nothing here lists tool names: a tool or profile added later is covered automatically.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import PROFILES, build_server

_PATH_NAME = re.compile(r"(?i)(path|folder|directory|file)")
_MAYBE_PATH_NAME = re.compile(r"(?i)^(dir|to|source|src|dst|dest|destination|target)$")
_PATH_WORDS = re.compile(r"(?i)\b(path|file|folder|directory)\b")
_URL_NAME = re.compile(r"(?i)url")


@dataclass(frozen=True)
class Tool:
    profile: str
    name: str
    schema: dict[str, Any]
    kind: str  # "read" if readOnlyHint, else "write"

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.schema.get("properties") or {}
        return props

    @property
    def required(self) -> list[str]:
        return list(self.schema.get("required") or [])

    @property
    def path_params(self) -> list[str]:
        return [k for k, v in self.properties.items() if is_path_param(k, v)]

    @property
    def id(self) -> str:
        return f"{self.profile}:{self.name}"


def _types(prop: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    kind = prop.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for sub in prop.get("anyOf") or prop.get("oneOf") or ():
        if isinstance(sub, dict):
            found |= _types(sub)
    return found


def is_path_param(name: str, prop: dict[str, Any]) -> bool:
    """A string parameter named like a path, or a short name described as a path."""
    if "string" not in _types(prop) or _URL_NAME.search(name) or name == "direction":
        return False
    if _PATH_NAME.search(name):
        return True
    return bool(_MAYBE_PATH_NAME.match(name) and _PATH_WORDS.search(prop.get("description", "")))


def settings_for(profile: str, root: Path, locks: Path, **extra: Any) -> Settings:
    return Settings(root=root, profile=profile, lock_dir=locks, **extra)


@asynccontextmanager
async def connect(
    profile: str, root: Path, locks: Path, *, mode: str = "legacy", **extra: Any
) -> AsyncIterator[Client]:
    server = build_server(settings_for(profile, root, locks, **extra))
    async with Client(server, mode=mode) as client:
        yield client


async def discover(root: Path, locks: Path) -> list[Tool]:
    """Every tool of every profile, as tools/list describes it."""
    found: list[Tool] = []
    for profile in PROFILES:
        async with connect(profile, root, locks) as client:
            for t in (await client.list_tools()).tools:
                hints = t.annotations
                kind = "read" if hints is not None and hints.read_only_hint else "write"
                found.append(Tool(profile, t.name, dict(t.input_schema), kind))
    return found


def filler(name: str, prop: dict[str, Any]) -> Any:
    """A plausible value for a non-path parameter (the smallest that is likely valid)."""
    if "enum" in prop:
        return prop["enum"][0]
    if "const" in prop:
        return prop["const"]
    types = _types(prop)
    if "integer" in types:
        return max(int(prop.get("minimum", 0)), 1 if "index" in name.lower() else 0)
    if "number" in types:
        return max(float(prop.get("minimum", 0)), 0.0)
    if "boolean" in types:
        return False
    if "string" in types:
        return "x"
    if "array" in types:
        items = prop.get("items") or {}
        return [filler(name, items)] if prop.get("minItems", 0) or items else []
    if "object" in types:
        return {}
    return None


def baseline(tool: Tool, valid_paths: dict[str, str]) -> dict[str, Any]:
    """Arguments with every required parameter filled and path parameters valid."""
    args: dict[str, Any] = {}
    for name, prop in tool.properties.items():
        if name in tool.path_params:
            args[name] = valid_paths.get(name, "ok.ipynb")
        elif name in tool.required:
            args[name] = filler(name, prop)
    return args


def refused(result: mcp_types.CallToolResult) -> bool:
    """An MCP tool error, or a result that reports failure in its own fields (compat profiles)."""
    if result.is_error:
        return True
    data = result.structured_content
    if isinstance(data, dict):
        if data.get("error") or data.get("success") is False:
            return True
        if data.get("status") in ("not_found", "error", "failed"):
            return True  # a not-found answer: nothing was opened
        inner = data.get("result")
        if isinstance(inner, str) and inner.lower().startswith("error"):
            return True
    return any(
        isinstance(b, mcp_types.TextContent) and b.text.lower().startswith("error")
        for b in result.content
    )


def everything_said(result: mcp_types.CallToolResult) -> str:
    """All text a client receives from a result (content blocks and structured content)."""
    parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    parts += [json.dumps(b.model_dump(mode="json"), ensure_ascii=False) for b in result.content]
    return "\n".join(parts)


def path_tools(tools: Iterable[Tool]) -> list[Tool]:
    return [t for t in tools if t.path_params]
