"""Start an unpacked Claude Desktop bundle (.mcpb) as a host does and use it as an agent would.

``python -m tests.packaging.bundle_check UNPACKED`` reads the bundle's manifest.json, fills in
``${__dirname}`` (the unpacked folder) and ``${user_config.root}`` (a fresh folder holding one
notebook, as if the user had chosen it), runs ``server.mcp_config``'s command with its
environment over stdio with the official MCP client, and checks that the server lists its tools,
lists that folder's notebook (so it serves the folder chosen, not the bundle's own) and runs its
cell on a kernel of the bundle's environment. ``scripts/bundle`` runs it on the bundle it built.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import nbformat
from mcp import Client, StdioServerParameters

from tests.helpers import PATIENCE, call

# The first start installs the bundle's environment (uv run: nbrelay and its dependencies).
FIRST_START = 5 * PATIENCE
# How this machine reaches the package index: a host passes the user's environment on, and the
# MCP client's stdio transport keeps only a few variables (HOME, PATH …). Behind a proxy that
# signs with its own certificate authority, uv needs SSL_CERT_FILE to download anything.
NETWORK = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


def substitute(value: str, variables: dict[str, str]) -> str:
    """A manifest value with its ``${...}`` variables filled in; an unknown one is an error."""

    def one(match: re.Match[str]) -> str:
        name = match[1]
        if name not in variables:
            raise SystemExit(f"manifest.json uses ${{{name}}}, which this check cannot fill in")
        return variables[name]

    return re.sub(r"\$\{([^}]+)\}", one, value)


def server_parameters(unpacked: Path, root: Path) -> StdioServerParameters:
    manifest: dict[str, Any] = json.loads((unpacked / "manifest.json").read_text("utf-8"))
    config = manifest["server"]["mcp_config"]
    variables = {"__dirname": str(unpacked), "user_config.root": str(root)}
    return StdioServerParameters(
        command=substitute(config["command"], variables),
        args=[substitute(a, variables) for a in config.get("args", [])],
        env={
            **{k: v for k, v in os.environ.items() if k in NETWORK or k.startswith("UV_")},
            **{k: substitute(v, variables) for k, v in config.get("env", {}).items()},
        },
    )


async def check(unpacked: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="nbrelay-bundle-root-") as folder:
        root = Path(folder)
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")])
        (root / "chosen.ipynb").write_text(nbformat.writes(notebook), encoding="utf-8")
        params = server_parameters(unpacked, root)
        started = time.monotonic()
        with anyio.fail_after(FIRST_START):
            async with Client(params) as client:
                tools = [t.name for t in (await client.list_tools()).tools]
                ready = time.monotonic() - started
                for needed in ("read_notebook", "execute", "list_notebooks"):
                    if needed not in tools:
                        raise SystemExit(f"the bundle's server lists no {needed}: {tools}")
                listed = await call(client, "list_notebooks")
                if "chosen.ipynb" not in json.dumps(listed):
                    raise SystemExit(f"the bundle's server does not serve {root}: {listed}")
                done = await call(client, "execute", path="chosen.ipynb", cells="all", wait=60)
                if done.get("status") != "done" or "42" not in json.dumps(done):
                    raise SystemExit(f"the bundle's kernel did not run the cell: {done}")
    return f"{len(tools)} tools listed {ready:.0f} s after the start, a notebook listed and run"


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.packaging.bundle_check UNPACKED_BUNDLE_FOLDER")
    summary = anyio.run(check, Path(sys.argv[1]).resolve())
    sys.stdout.write(f"bundle check: {summary}\n")


if __name__ == "__main__":
    main()
