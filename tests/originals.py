"""Software the suite runs as it is published, each in a virtual environment of its own under
``.originals/`` (or ``$NBRELAY_ORIGINALS``): the original servers the profiles are compared with,
and servers whose pins conflict with the suite's (Enterprise Gateway). ``scripts/test`` installs
them; a test installs one too when it is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT = 900.0


def venv(name: str) -> Path:
    return Path(os.environ.get("NBRELAY_ORIGINALS") or REPO / ".originals") / name


def ensure(name: str, requirements: tuple[str, ...], command: str) -> Path:
    """``command`` of virtual environment ``name``, which ``requirements`` are installed in from
    PyPI first if they are not yet (with uv when there is one, else pip); raises ``OSError`` or
    ``subprocess.SubprocessError`` if they cannot be installed."""
    folder = venv(name)
    marker, executable = folder / ".installed", folder / "bin" / command
    wanted = " ".join(requirements)
    if marker.exists() and marker.read_text() == wanted and executable.exists():
        return executable
    uv = shutil.which("uv")
    python = str(folder / "bin" / "python")
    if uv:
        subprocess.run([uv, "venv", "-q", "--clear", "-p", sys.executable, str(folder)], check=True)
        install = [uv, "pip", "install", "-q", "-p", python, *requirements]
    else:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        install = [python, "-m", "pip", "install", "-q", *requirements]
    subprocess.run(install, check=True, timeout=INSTALL_TIMEOUT)
    marker.write_text(wanted)
    return executable
