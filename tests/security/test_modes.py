"""Cautious modes and the tool surface (plan G1 note, G6): --no-execute and --read-only in every
profile, and tool descriptions free of instruction-like markup."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ToolAnnotations

from nbrelay.config import Settings
from nbrelay.server import PROFILES, build_server, build_workspace
from nbrelay.tools import apps
from nbrelay.tools._boundary import Registrar

pytestmark = pytest.mark.anyio

INJECTION = re.compile(r"(?i)<\s*important\s*>|ignore (all |any )?previous|system prompt|you must")


def _settings(tmp_path: Path, profile: str, no_execute: bool, read_only: bool) -> Settings:
    return Settings(
        root=tmp_path,
        profile=profile,
        lock_dir=tmp_path / "locks",
        no_execute=no_execute,
        read_only=read_only,
    )


async def _tools(
    tmp_path: Path, profile: str, *, no_execute: bool = False, read_only: bool = False
) -> dict[str, Any]:
    settings = _settings(tmp_path, profile, no_execute, read_only)
    async with Client(build_server(settings)) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


def _kinds(profile: str, tmp_path: Path, *, no_execute: bool = False) -> dict[str, str]:
    """Every tool's kind as the profile registers it (profiles may register a tool that runs
    code as one that does not under --no-execute), but the MCP Apps view's own tool, which a
    client without Apps (as here) is not shown."""
    reg = Registrar()
    settings = _settings(tmp_path, profile, no_execute, False)
    PROFILES[profile](reg, build_workspace(settings))
    assert apps.POLL_TOOL in reg.kinds
    return {name: kind for name, kind in reg.kinds.items() if name != apps.POLL_TOOL}


@pytest.mark.parametrize("profile", PROFILES)
async def test_no_execute_and_read_only_leave_out_the_right_tools(
    profile: str, tmp_path: Path
) -> None:
    kinds = _kinds(profile, tmp_path)
    kinds_no_exec = _kinds(profile, tmp_path, no_execute=True)
    every = await _tools(tmp_path, profile)
    no_exec = await _tools(tmp_path, profile, no_execute=True)
    read_only = await _tools(tmp_path, profile, read_only=True)
    assert set(every) == set(kinds)
    assert set(no_exec) == {n for n, k in kinds_no_exec.items() if k not in ("execute", "inspect")}
    assert set(read_only) == {n for n, k in kinds.items() if k == "read"}
    if profile == "canonical":
        assert "execute" in every
        assert "execute" not in no_exec
        assert "read_notebook" in no_exec


@pytest.mark.parametrize("profile", PROFILES)
async def test_descriptions_hold_no_instructions_and_hints_match_kinds(
    profile: str, tmp_path: Path
) -> None:
    kinds = _kinds(profile, tmp_path)
    for name, tool in (await _tools(tmp_path, profile)).items():
        text = f"{tool.description} {tool.input_schema}"
        assert not INJECTION.search(text), (profile, name)
        hints = tool.annotations or ToolAnnotations()  # none: every hint at its default
        if kinds[name] in ("read", "inspect"):
            assert hints.read_only_hint is True, (profile, name)
        else:
            assert not hints.read_only_hint, (profile, name)
        if kinds[name] in ("destructive", "execute"):
            assert hints.destructive_hint is not False, (profile, name)


async def test_no_execute_runs_no_code_through_any_tool(tmp_path: Path) -> None:
    """Tools that can run code as a side effect (insert_cells(execute=true), ...) refuse to."""
    import psutil

    settings = _settings(tmp_path, "canonical", True, False)
    me = psutil.Process()
    # Kernels other tests started for the whole session (a Jupyter Server's) are not ours.
    before = {c.pid for c in me.children(recursive=True)}
    async with Client(build_server(settings)) as client:
        made = await client.call_tool("create_notebook", {"path": "n.ipynb", "cells": ["1 + 1"]})
        assert not made.is_error
        written = (tmp_path / "n.ipynb").read_bytes()
        for tool, args in [
            ("insert_cells", {"path": "n.ipynb", "cells": ["2 + 2"], "execute": True}),
            ("edit_cell", {"path": "n.ipynb", "cell": 0, "source": "3", "execute": True}),
        ]:
            result = await client.call_tool(tool, args)
            said = " ".join(getattr(b, "text", "") for b in result.content)
            assert result.is_error, (tool, said)
            assert "runs no code" in said, said
            # refused before the edit: the notebook is as it was
            assert (tmp_path / "n.ipynb").read_bytes() == written
    started = [c for c in me.children(recursive=True) if c.pid not in before]
    assert [c for c in started if "kernel" in " ".join(c.cmdline())] == []
