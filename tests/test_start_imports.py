"""A lean start: listing the tools loads none of the heavy libraries the tools use later.

A server's start (spawn → ``tools/list`` answered) and its resident memory until the first call
that needs a library are those of the MCP SDK plus nbrelay's own modules; each library below is
imported on first use (``bench/scale.py`` measures the start and memory this buys).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "fastjsonschema",  # the notebook schema: first read of a notebook
    "httpx",
    "jsonschema",
    "jupyter_client",  # kernels: first run
    "jupyter_server",
    "jupyter_ydoc",  # live mode: first notebook opened through a Jupyter Server
    "nbclient",
    "nbconvert",  # exports: first export
    "nbformat",
    "pycrdt",
    "psutil",
    "regex",  # search: first search
    "tornado",
    "traitlets",
    "zmq",
)

LIST_TOOLS = """
import json, sys
from pathlib import Path

import anyio

from nbrelay import stdio  # what `nbrelay serve` imports to serve over stdio
from nbrelay.config import Settings
from nbrelay.server import build_server

server = build_server(Settings(root=Path(sys.argv[1])))
tools = anyio.run(server.list_tools)
assert len(tools) > 10, tools
sys.stdout.write(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
"""


def test_listing_the_tools_imports_no_heavy_library(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LIST_TOOLS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert "mcp" in loaded  # the probe ran the server's own start
    early = sorted(set(HEAVY) & loaded)
    assert not early, f"imported before their first use: {early}"
