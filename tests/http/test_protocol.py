"""Protocol conformance (plan F5): the official MCP conformance harness over HTTP, and the MCP
Inspector CLI over stdio. Both are Node programs that ``scripts/test`` installs into ``.tools/``
(Node 22 from npm).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import missing_tool, notebook, write_notebook
from tests.http.harness import http_server, report, server_env

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools" / "node_modules"
BIN = TOOLS / ".bin"
BASELINE = REPO / ".conformance" / "server-expected-failures.yml"
PRELOAD = Path(__file__).resolve().parent / "conformance" / "bearer.mjs"


def node_tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        missing_tool(f"{path} is missing: run `bash scripts/test` (it installs the Node tools)")
    return path


def node_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = server_env(None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # its node is Node 22
    env["HOME"] = str(tmp_path)  # the Inspector keeps state in ~/.mcp-inspector
    env.update(extra)
    return env


def test_conformance_server_suite_passes_with_a_justified_baseline(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    conformance = node_tool("conformance")
    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook("x = 1"))
    with http_server(root, tmp_path) as server:
        env = node_env(
            tmp_path,
            NODE_OPTIONS=f"--import {PRELOAD.as_uri()}",
            NBRELAY_CONFORMANCE_TOKEN=server.token,
            NBRELAY_CONFORMANCE_ORIGIN=server.base,
            NBRELAY_CONFORMANCE_MODULES=str(TOOLS / "@modelcontextprotocol" / "conformance"),
        )
        proc = subprocess.run(
            [
                str(conformance),
                "server",
                "--url",
                server.url,
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(tmp_path / "results"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            check=False,
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Baseline check passed" in out, out[-2000:]
    summary = re.search(r"Total: (\d+) passed, (\d+) failed", out)
    assert summary, out[-2000:]
    passed = int(summary.group(1))
    for must in ("server-initialize", "tools-list", "ping", "dns-rebinding-protection"):
        assert re.search(rf"✓ {must}: \d+ passed, 0 failed", out), f"{must} did not pass"
    expected = [
        line.strip()[2:]
        for line in BASELINE.read_text().splitlines()
        if line.strip().startswith("- ")
    ]
    report(
        request,
        f"F5 conformance 0.1.16 over HTTP (with the bearer token): {passed} checks passed "
        f"including dns-rebinding-protection; {len(expected)} scenarios in the baseline, each "
        "needing the harness's fixture tools/prompts/resources or a capability nbrelay does not "
        "offer (justified line by line)",
    )


def inspector(tmp_path: Path, root: Path, *args: str) -> str:
    cli = node_tool("mcp-inspector")
    proc = subprocess.run(
        [
            str(cli),
            "--cli",
            sys.executable,
            "-m",
            "nbrelay",
            "serve",
            "--root",
            str(root),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=node_env(tmp_path),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_inspector_cli_lists_and_calls_the_tools_over_stdio(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    listed = json.loads(inspector(tmp_path, root, "--method", "tools/list"))
    names = [t["name"] for t in listed["tools"]]
    assert {"read_notebook", "create_notebook", "edit_cell"} <= set(names)
    assert all(t.get("description") and t.get("inputSchema") for t in listed["tools"])
    created = json.loads(
        inspector(
            tmp_path,
            root,
            "--method",
            "tools/call",
            "--tool-name",
            "create_notebook",
            "--tool-args-json",
            json.dumps({"path": "i.ipynb", "cells": ["print('inspector')"]}),
        )
    )
    assert created["structuredContent"]["path"] == "i.ipynb"
    read = json.loads(
        inspector(
            tmp_path,
            root,
            "--method",
            "tools/call",
            "--tool-name",
            "read_notebook",
            "--tool-arg",
            "path=i.ipynb",
        )
    )
    assert read["structuredContent"]["cells"][0]["source"] == "print('inspector')"
    report(
        request,
        f"F5 Inspector CLI 2.12.0 over stdio: tools/list gave {len(names)} tools, tools/call "
        "create_notebook and read_notebook round-tripped",
    )
