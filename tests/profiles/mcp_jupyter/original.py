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
import shutil
import subprocess
import sys
from pathlib import Path

from mcp import StdioServerParameters

REQUIREMENTS = ("mcp-jupyter==2.0.2", "mcp[cli]<2", "jupyter-kernel-client<1")
REPO = Path(__file__).resolve().parents[3]
INSTALL_TIMEOUT = 900.0


def venv() -> Path:
    base = Path(os.environ.get("NBRELAY_ORIGINALS") or REPO / ".originals")
    return base / "mcp-jupyter-2.0.2"


def executable() -> Path:
    return venv() / "bin" / "mcp-jupyter"


def ensure() -> Path:
    """The original's command, installed from PyPI first if missing (with uv when there is one,
    else pip); raises ``OSError`` or ``subprocess.SubprocessError`` if it cannot be installed."""
    folder, marker = venv(), venv() / ".installed"
    wanted = " ".join(REQUIREMENTS)
    if marker.exists() and marker.read_text() == wanted and executable().exists():
        return executable()
    uv = shutil.which("uv")
    python = str(folder / "bin" / "python")
    if uv:
        subprocess.run([uv, "venv", "-q", "--clear", "-p", sys.executable, str(folder)], check=True)
        install = [uv, "pip", "install", "-q", "-p", python, *REQUIREMENTS]
    else:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        install = [python, "-m", "pip", "install", "-q", *REQUIREMENTS]
    subprocess.run(install, check=True, timeout=INSTALL_TIMEOUT)
    marker.write_text(wanted)
    return executable()


def server(token: str, cwd: Path) -> StdioServerParameters:
    """The original over stdio, as its README configures it: the Jupyter Server's URL comes with
    each ``setup_notebook`` (``server_url``), its token from ``TOKEN``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBRELAY"))}
    env["TOKEN"] = token
    return StdioServerParameters(command=str(executable()), args=[], env=env, cwd=str(cwd))


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
