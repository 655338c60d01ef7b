"""datalayer's jupyter-mcp-server 2.2.4, the original the profile is compared with, in a virtual
environment of its own (``.originals/jupyter-mcp-server-2.2.4``, or ``$NBRELAY_ORIGINALS``).

``python -m tests.profiles.jupyter_mcp_server.original`` installs it (scripts/test does); the
tests install it too when it is missing. It is pinned: the differential figures are about 2.2.4.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp import StdioServerParameters

from tests import originals

REQUIREMENT = "jupyter-mcp-server==2.2.4"


def ensure() -> Path:
    """The original's command, installed first if missing (``tests.originals``)."""
    return originals.ensure("jupyter-mcp-server-2.2.4", (REQUIREMENT,), "jupyter-mcp-server")


def server(url: str, token: str, cwd: Path) -> StdioServerParameters:
    """The original over stdio on a Jupyter Server, as its README configures it, with no kernel
    started before code first runs (``--start-new-code-sandbox false``: nbrelay's way too)."""
    args = ["start", "--transport", "stdio", "--jupyter-url", url.rstrip("/")]
    args += ["--jupyter-token", token, "--start-new-code-sandbox", "false"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBRELAY"))}
    return StdioServerParameters(command=str(ensure()), args=args, env=env, cwd=str(cwd))


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
