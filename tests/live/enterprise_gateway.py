"""Jupyter Enterprise Gateway 3.3.0, in a virtual environment of its own
(``.originals/enterprise-gateway-3.3.0``, or under ``$NBRELAY_ORIGINALS``): it pins
``jupyter_client<7`` and ``jupyter_server<2``, so it cannot share the suite's environment. Its
kernels run on ipykernel 6 from that environment (Enterprise Gateway launches the kernelspec's
``python`` as its own interpreter), its default process proxy, on this machine.

``python -m tests.live.enterprise_gateway`` installs it (scripts/test does); the tests install
it too when it is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests import originals

REQUIREMENTS = ("jupyter_enterprise_gateway==3.3.0", "ipykernel==6.29.5")


def ensure() -> Path:
    """The gateway's command, installed first if missing (``tests.originals``)."""
    return originals.ensure("enterprise-gateway-3.3.0", REQUIREMENTS, "jupyter-enterprisegateway")


if __name__ == "__main__":
    sys.stdout.write(f"{ensure()}\n")
