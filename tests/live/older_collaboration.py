"""JupyterLab with the jupyter-collaboration releases before 4.1, each in a virtual environment
of its own (``.originals/jupyter-collaboration-<version>``, or under ``$NBRELAY_ORIGINALS``): the
real-time collaboration of JupyterLab 4.1–4.4 deployments. They
differ from today's in what live mode meets: a server on pycrdt before 0.13 reads no Yjs client
id above 32 bits, jupyter_ydoc before 3.0 writes a cell's run state into the file, and no room
answers a request to save (it saves on its own, a second after a change).

``python -m tests.live.older_collaboration`` installs them (scripts/test does); the tests install
one too when it is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests import originals

RELEASES: dict[str, tuple[str, ...]] = {
    # JupyterLab 4.2's: jupyter_ydoc 2 (no run state), no hash of the saved file in the room.
    "2.1.5": (
        "jupyter-collaboration==2.1.5",
        "jupyter-ydoc==2.1.5",
        "jupyterlab==4.2.7",
        "pycrdt==0.12.50",
        "pycrdt-websocket==0.15.5",
        "ipykernel==6.29.5",
    ),
    # jupyter_ydoc 3 (run state), the saved file's hash in the room; its page extension needs
    # JupyterLab 4.4 (on 4.3 the page is not collaborative). With nbrelay installed in it, whose
    # server extension cannot use this release's rooms.
    "3.1.2": (
        "jupyter-collaboration==3.1.2",
        "jupyter-server-ydoc==1.1.2",
        "jupyter-ydoc==3.4.1",
        "jupyterlab==4.4.10",
        "pycrdt==0.12.50",
        "pycrdt-websocket==0.15.5",
        "ipykernel==7.4.0",
        "-e",
        str(originals.REPO),
    ),
    # JupyterLab 4.4's, on pycrdt 0.13, with nbrelay installed in it as a user would (its server
    # extension on): installing it must leave that pycrdt (jupyter_ydoc 3 needs it: with 0.14 the
    # server opens no room at all), and the extension works with it.
    "4.4.2": (
        "jupyter-collaboration==4.4.2",
        "jupyter-server-ydoc==2.4.2",
        "jupyter-ydoc==3.5.0",
        "jupyterlab==4.4.10",
        "pycrdt==0.13.1",
        "pycrdt-websocket==0.16.2",
        "ipykernel==7.4.0",
        "-e",
        str(originals.REPO),
    ),
}
# The releases whose environment has nbrelay (and its server extension).
WITH_NBRELAY = frozenset({"3.1.2", "4.4.2"})


def ensure(release: str) -> Path:
    """The Python of the environment with jupyter-collaboration ``release``, installed first if
    missing (``tests.originals``)."""
    return originals.ensure(f"jupyter-collaboration-{release}", RELEASES[release], "python")


if __name__ == "__main__":
    for release in RELEASES:
        sys.stdout.write(f"{ensure(release)}\n")
