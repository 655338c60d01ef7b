"""The profiles' sequences by name (each module has ``STEPS``, ``MASK``, ``ACCEPTED``,
``ORIGINAL``, ``LIVE`` and ``make_fixtures``)."""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = {
    "ipynb-mcp": "ipynb_mcp",
    "notebook-lr": "notebook_lr",
    "jupyterlab-rtc": "jupyterlab_rtc",
    "mcp-jupyter": "mcp_jupyter",
}
# The originals recorded once as transcripts.
RECORDED = ("ipynb-mcp", "notebook-lr", "jupyterlab-rtc")


def get(profile: str) -> ModuleType:
    return importlib.import_module(f"tests.profiles.differential.{MODULES[profile]}")
