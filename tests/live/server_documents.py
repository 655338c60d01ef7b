"""JupyterLab with jupyter-server-documents in place of jupyter-collaboration, in a virtual
environment of its own (``.originals/jupyter-server-documents-<version>``, or under
``$NBRELAY_ORIGINALS``): the real-time collaboration of Jupyter AI's ``rtc-jsd`` deployments.

What live mode meets there: no ``api/collaboration/session`` endpoint (a room is named by the
file id ``POST api/fileid/index`` gives), rooms that answer no request to save and save on their
own within a second of a change, and a kernel WebSocket that speaks only the binary protocol
(``v1.kernel.websocket.jupyter.org``).

``python -m tests.live.server_documents`` installs it (scripts/test does); the tests install it
too when it is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests import originals

VERSION = "0.3.3"
REQUIREMENTS = (
    f"jupyter-server-documents=={VERSION}",
    "jupyterlab==4.6.6",
    "jupyter-server==2.21.1",
    "jupyter-server-fileid==0.9.3",
    "jupyter-ydoc==4.2.1",
    "pycrdt==0.14.13",
    "ipykernel==7.4.0",
)


def ensure() -> Path:
    """The Python of the environment, installed first if missing (``tests.originals``)."""
    return originals.ensure(f"jupyter-server-documents-{VERSION}", REQUIREMENTS, "python")


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
