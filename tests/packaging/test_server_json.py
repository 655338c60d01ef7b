"""server.json for the MCP Registry: the registry's schema shape, and every argument and
environment variable it names is one the real CLI takes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nbrelay import __version__
from nbrelay.cli import build_parser
from nbrelay.config import JUPYTER_TOKEN_ENV, OPTIONS, TOKEN_ENV
from tests.packaging.registry_schema import SERVER_SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def _server() -> dict[str, Any]:
    return json.loads((ROOT / "server.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_server_json_matches_the_registry_schema() -> None:
    validator = jsonschema.Draft202012Validator(
        SERVER_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(_server()), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_the_schema_check_catches_what_the_registry_refuses() -> None:
    validator = jsonschema.Draft202012Validator(SERVER_SCHEMA)
    bad = _server()
    bad["description"] = "x" * 101
    bad["packages"][0]["version"] = "latest"
    bad["packages"][1]["transport"] = {"type": "streamable-http"}  # no url
    found = {tuple(e.absolute_path)[:2] for e in validator.iter_errors(bad)}
    assert {("description",), ("packages", 0), ("packages", 1)} <= found


def test_versions_and_the_readme_name_match_the_package() -> None:
    server = _server()
    assert server["version"] == __version__
    assert {p["version"] for p in server["packages"]} == {__version__}
    assert {p["identifier"] for p in server["packages"]} == {"nbrelay"}
    # PyPI ownership check of the registry: the package's README names the server.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {server['name']}" in readme
    transports = {p["transport"]["type"] for p in server["packages"]}
    assert transports == {"stdio", "streamable-http"}


def _argv(package: dict[str, Any]) -> list[str]:
    """The command line a registry client builds: positional values, then each named
    argument with its default or a sample for its value hint."""
    argv: list[str] = []
    for arg in package.get("packageArguments", []):
        if arg["type"] == "positional":
            argv.append(arg["value"])
            continue
        argv.append(arg["name"])
        if "valueHint" in arg or "default" in arg or "choices" in arg:
            argv.append(arg.get("default") or "/tmp/sample")
    return argv


@pytest.mark.parametrize("index", [0, 1])
def test_package_arguments_parse_with_the_real_cli(index: int) -> None:
    package = _server()["packages"][index]
    args = build_parser().parse_args(_argv(package))
    assert args.command == "serve"
    assert bool(getattr(args, "http", False)) == (package["transport"]["type"] != "stdio")
    options = {opt.flag: opt for opt in OPTIONS}
    for arg in package.get("packageArguments", []):
        if arg["type"] == "named":
            opt = options[arg["name"]]
            assert set(arg.get("choices", opt.choices)) == set(opt.choices), arg["name"]
            if "default" in arg and opt.default is not None:
                assert arg["default"] == str(opt.default), arg["name"]


def test_environment_variables_are_ones_nbrelay_reads() -> None:
    known = {opt.env for opt in OPTIONS} | {TOKEN_ENV, JUPYTER_TOKEN_ENV}
    for package in _server()["packages"]:
        for var in package.get("environmentVariables", []):
            assert var["name"] in known, var["name"]


def test_the_http_url_template_uses_declared_variables() -> None:
    (http,) = [p for p in _server()["packages"] if p["transport"]["type"] == "streamable-http"]
    hints = {a.get("valueHint") for a in http["packageArguments"]}
    for var in re.findall(r"{(\w+)}", http["transport"]["url"]):
        assert var in hints, var
    assert http["transport"]["url"].endswith("/mcp")
