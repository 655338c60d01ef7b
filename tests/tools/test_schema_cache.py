"""A server lists its tools from argument schemas kept on disk (``nbrelay.tools.schema_cache``)
and builds a tool's pydantic argument model on the tool's first call: the listing is the one
built live, byte for byte, and listing the tools builds no argument model.

Each server here starts in a process of its own, with a private runtime folder of the test's
(``XDG_RUNTIME_DIR``), so that the first start finds no schemas kept and the second finds them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbrelay.server import PROFILES

START = """
import gc, json, sys
from pathlib import Path

import anyio
from mcp import Client
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import ListToolsResult

from nbrelay.config import Settings
from nbrelay.server import build_server


def models():
    gc.collect()  # argument models nothing holds (resource templates' are thrown away)
    return sorted(c.__name__ for c in ArgModelBase.__subclasses__())


root = Path(sys.argv[1])
server = build_server(Settings(root=root, profile=sys.argv[2], lock_dir=root / "locks"))
# The resource templates' argument models, which the SDK builds (they are not tools').
templates = server._resource_manager.list_templates()
out = {"templates": sorted(f"{t.fn.__name__}Arguments" for t in templates)}


async def main():
    tools = await server.list_tools()
    out["listing"] = ListToolsResult(tools=tools).model_dump_json(by_alias=True, exclude_none=True)
    out["after_listing"] = models()
    if sys.argv[3:]:
        tool, arguments = sys.argv[3], json.loads(sys.argv[4])
        async with Client(server) as client:
            first = await client.call_tool(tool, arguments)
            again = await client.call_tool(tool, arguments)
            wrong = await client.call_tool(tool, {**arguments, "limt": 3})
        out["results"] = [r.content[0].text for r in (first, again, wrong)]
        out["after_calls"] = models()


anyio.run(main)
sys.stdout.write(json.dumps(out))
"""


def start(runtime: Path, root: Path, profile: str, *call: str) -> dict[str, Any]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run(
        [sys.executable, "-c", START, str(root), profile, *call],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def kept(runtime: Path) -> list[Path]:
    return sorted((runtime / "nbrelay").glob("tool-schemas-*.json"))


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_listing_from_kept_schemas_is_the_listing_built_live(
    profile: str, runtime: Path, tmp_path: Path
) -> None:
    built = start(runtime, tmp_path, profile)  # nothing kept yet: every schema built
    assert len(kept(runtime)) == 1
    from_disk = start(runtime, tmp_path, profile)
    assert from_disk["listing"] == built["listing"]  # the bytes a client is sent
    assert json.loads(built["listing"])["tools"]


def test_listing_builds_no_argument_model_and_a_call_builds_only_its_own(
    runtime: Path, tmp_path: Path
) -> None:
    (tmp_path / "a.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    call = ("read_notebook", json.dumps({"path": "a.ipynb"}))
    cold = start(runtime, tmp_path, "canonical", *call)
    warm = start(runtime, tmp_path, "canonical", *call)
    assert warm["templates"]  # the probe sees the models there are
    assert warm["after_listing"] == warm["templates"]  # no tool's
    # The first call builds read_notebook's model, the next call reuses it.
    assert warm["after_calls"] == sorted([*warm["templates"], "read_notebookArguments"])
    # What the calls answered, a refused argument included, is what they answered when every
    # model was built at start.
    assert warm["results"] == cold["results"]
    assert "read_notebook has no argument `limt`. Did you mean `limit`?" in warm["results"][2]


def test_a_damaged_or_foreign_file_is_not_used(runtime: Path, tmp_path: Path) -> None:
    built = start(runtime, tmp_path, "canonical")
    (path,) = kept(runtime)
    data = json.loads(path.read_text())
    # Another fingerprint's schemas in the file: not used (the file is written anew).
    first = next(iter(data["schemas"]))
    data["fingerprint"] = "0" * 32
    data["schemas"][first] = {"properties": {"planted": {"type": "string"}}}
    path.write_text(json.dumps(data))
    assert start(runtime, tmp_path, "canonical")["listing"] == built["listing"]
    path.write_text("{not json")
    assert start(runtime, tmp_path, "canonical")["listing"] == built["listing"]
    assert json.loads(path.read_text())["fingerprint"] != "0" * 32
