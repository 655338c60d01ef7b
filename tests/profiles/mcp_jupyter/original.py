"""block's mcp-jupyter 2.0.2, the original the profile is compared with, in a virtual environment
of its own (``.originals/mcp-jupyter-2.0.2``, or under ``$NBRELAY_ORIGINALS``).

``python -m tests.profiles.mcp_jupyter.original`` installs it (scripts/test does); the tests
install it too when it is missing. It is pinned: the differential figures are about 2.0.2. It asks
for ``mcp>=1.13.1`` and ``jupyter-kernel-client>=0.8.0`` but imports names that the 2.x and 1.x
majors of those removed, so it gets the last releases it was written against (as bench/compare.py
installs it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp import StdioServerParameters

from tests import originals

REQUIREMENTS = ("mcp-jupyter==2.0.2", "mcp[cli]<2", "jupyter-kernel-client<1")


def ensure() -> Path:
    """The original's command, installed first if missing (``tests.originals``)."""
    return originals.ensure("mcp-jupyter-2.0.2", REQUIREMENTS, "mcp-jupyter")


def server(token: str, cwd: Path) -> StdioServerParameters:
    """The original over stdio, as its README configures it: the Jupyter Server's URL comes with
    each ``setup_notebook`` (``server_url``), its token from ``TOKEN``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBRELAY"))}
    env["TOKEN"] = token
    return StdioServerParameters(command=str(ensure()), args=[], env=env, cwd=str(cwd))


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
