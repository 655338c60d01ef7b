"""The MCP Registry's ``server.json`` shape (schema 2025-12-11), written from the published
specification (static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json) for the
parts nbrelay uses; checked offline."""

from __future__ import annotations

from typing import Any

_INPUT: dict[str, Any] = {
    "description": {"type": "string"},
    "isRequired": {"type": "boolean"},
    "isSecret": {"type": "boolean"},
    "format": {"enum": ["string", "number", "boolean", "filepath"]},
    "value": {"type": "string"},
    "default": {"type": "string"},
    "choices": {"type": "array", "items": {"type": "string"}},
    "placeholder": {"type": "string"},
}
_INPUT_WITH_VARIABLES: dict[str, Any] = {
    **_INPUT,
    "variables": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": _INPUT,
            "additionalProperties": False,
        },
    },
}
_KEY_VALUE = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1}, **_INPUT_WITH_VARIABLES},
    "additionalProperties": False,
}
_ARGUMENT = {
    "oneOf": [
        {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"const": "positional"},
                "valueHint": {"type": "string"},
                "isRepeated": {"type": "boolean"},
                **_INPUT_WITH_VARIABLES,
            },
            "anyOf": [{"required": ["value"]}, {"required": ["valueHint"]}],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["type", "name"],
            "properties": {
                "type": {"const": "named"},
                "name": {"type": "string", "pattern": "^-"},
                "valueHint": {"type": "string"},
                "isRepeated": {"type": "boolean"},
                **_INPUT_WITH_VARIABLES,
            },
            "additionalProperties": False,
        },
    ]
}
_TRANSPORT = {
    "oneOf": [
        {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"const": "stdio"}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["type", "url"],
            "properties": {
                "type": {"enum": ["streamable-http", "sse"]},
                "url": {"type": "string", "pattern": "^https?://"},
                "headers": {"type": "array", "items": _KEY_VALUE},
            },
            "additionalProperties": False,
        },
    ]
}
_PACKAGE = {
    "type": "object",
    "required": ["registryType", "identifier", "transport"],
    "properties": {
        "registryType": {"enum": ["npm", "pypi", "oci", "nuget", "mcpb"]},
        "registryBaseUrl": {"type": "string", "format": "uri"},
        "identifier": {"type": "string", "minLength": 1},
        "version": {"type": "string", "minLength": 1, "not": {"pattern": "^(latest|[<>=^~])"}},
        "fileSha256": {"type": "string", "pattern": "^[a-f0-9]{64}$"},
        "runtimeHint": {"type": "string"},
        "transport": _TRANSPORT,
        "runtimeArguments": {"type": "array", "items": _ARGUMENT},
        "packageArguments": {"type": "array", "items": _ARGUMENT},
        "environmentVariables": {"type": "array", "items": _KEY_VALUE},
    },
    "additionalProperties": False,
}

SERVER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "description", "version"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "name": {
            "type": "string",
            "minLength": 3,
            "maxLength": 200,
            "pattern": "^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$",
        },
        "title": {"type": "string", "minLength": 1, "maxLength": 100},
        "description": {"type": "string", "minLength": 1, "maxLength": 100},
        "version": {"type": "string", "maxLength": 255},
        "websiteUrl": {"type": "string", "format": "uri"},
        "repository": {
            "type": "object",
            "required": ["url", "source"],
            "properties": {
                "url": {"type": "string", "format": "uri"},
                "source": {"type": "string"},
                "id": {"type": "string"},
                "subfolder": {"type": "string"},
            },
        },
        "packages": {"type": "array", "items": _PACKAGE},
        "remotes": {"type": "array"},
        "_meta": {"type": "object"},
    },
    "additionalProperties": False,
}
