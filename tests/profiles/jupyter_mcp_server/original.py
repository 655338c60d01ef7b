"""datalayer's jupyter-mcp-server 2.2.4, the original the profile is compared with, in a virtual
environment of its own (``.originals/jupyter-mcp-server-2.2.4``, or ``$NBRELAY_ORIGINALS``).

``python -m tests.profiles.jupyter_mcp_server.original`` installs it (scripts/test does); the
tests install it too when it is missing. It is pinned: the differential figures are about 2.2.4.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcp import StdioServerParameters

REQUIREMENT = "jupyter-mcp-server==2.2.4"
REPO = Path(__file__).resolve().parents[3]
INSTALL_TIMEOUT = 900.0


def venv() -> Path:
    base = Path(os.environ.get("NBRELAY_ORIGINALS") or REPO / ".originals")
    return base / "jupyter-mcp-server-2.2.4"


def executable() -> Path:
    return venv() / "bin" / "jupyter-mcp-server"


def ensure() -> Path:
    """The original's command, installed from PyPI first if missing (with uv when there is one,
    else pip); raises ``OSError`` or ``subprocess.SubprocessError`` if it cannot be installed."""
    folder, marker = venv(), venv() / ".installed"
    if marker.exists() and marker.read_text() == REQUIREMENT and executable().exists():
        return executable()
    uv = shutil.which("uv")
    python = str(folder / "bin" / "python")
    if uv:
        subprocess.run([uv, "venv", "-q", "--clear", "-p", sys.executable, str(folder)], check=True)
        install = [uv, "pip", "install", "-q", "-p", python, REQUIREMENT]
    else:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        install = [python, "-m", "pip", "install", "-q", REQUIREMENT]
    subprocess.run(install, check=True, timeout=INSTALL_TIMEOUT)
    marker.write_text(REQUIREMENT)
    return executable()


def server(url: str, token: str, cwd: Path) -> StdioServerParameters:
    """The original over stdio on a Jupyter Server, as its README configures it, with no kernel
    started before code first runs (``--start-new-code-sandbox false``: nbrelay's way too)."""
    args = ["start", "--transport", "stdio", "--jupyter-url", url.rstrip("/")]
    args += ["--jupyter-token", token, "--start-new-code-sandbox", "false"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBRELAY"))}
    return StdioServerParameters(command=str(executable()), args=args, env=env, cwd=str(cwd))


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
