"""The Dockerfile and compose example: slim base, non-root user, a health check, and a command
line the real CLI accepts (serving HTTP with a token file off loopback)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from nbrelay.cli import build_parser, settings_from

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    out = []
    for line in logical:
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"exec form expected, got {args!r}"
    return [str(v) for v in value]


def test_the_command_line_parses_and_serves_http_with_a_token_file(tmp_path: Path) -> None:
    found = dict(_instructions())
    entry, cmd = _exec_form(found["ENTRYPOINT"]), _exec_form(found["CMD"])
    assert entry == ["nbrelay"]
    args = build_parser().parse_args(cmd)
    assert args.command == "serve"
    settings = settings_from(args, environ={})
    assert settings.http
    assert settings.host == "0.0.0.0"  # reachable through the published port
    assert settings.token_file is not None
    token_file = settings.token_file
    volumes = json.loads(found["VOLUME"])
    assert str(settings.root) in volumes
    assert str(token_file.parent) in volumes  # the token survives a new container
    assert found["EXPOSE"] == str(settings.port)
    assert f":{settings.port}/mcp" in found["HEALTHCHECK"]


def test_the_image_is_slim_and_runs_as_a_user() -> None:
    steps = _instructions()
    base = next(a for w, a in steps if w == "FROM")
    assert base.startswith("python:"), base
    assert base.endswith("-slim"), base
    users = [a for w, a in steps if w == "USER"]
    assert users
    assert users[-1] not in ("root", "0"), users
    assert "HEALTHCHECK" in dict(steps)


def test_the_health_check_program_is_valid_python() -> None:
    check = dict(_instructions())["HEALTHCHECK"]
    program = _exec_form(check[check.index("CMD") + 3 :].strip())
    assert program[:2] == ["python", "-c"]
    compile(program[2], "<healthcheck>", "exec")
    assert "401" in program[2]  # up = answering, even without the token


def test_compose_mounts_notebooks_and_keeps_the_port_local() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    (service,) = compose["services"].values()
    cmd = dict(_instructions())["CMD"]
    root = str(settings_from(build_parser().parse_args(_exec_form(cmd)), environ={}).root)
    targets = {v.split(":")[1] for v in service["volumes"]}
    assert root in targets
    assert all(p.startswith("127.0.0.1:") for p in service["ports"])
    assert shlex.split(service.get("command", "")) == []  # the image's own command line
