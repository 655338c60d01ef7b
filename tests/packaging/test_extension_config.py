"""The wheel enables the Jupyter Server extension: its ``jupyter_server_config.d`` file, the
build mapping that installs it into ``etc/jupyter``, and the entry point it names.
(``scripts/wheel-smoke`` checks the built wheel and an installed copy.)"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import nbrelay

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "jupyter-config/jupyter_server_config.d/nbrelay.json"


def test_the_wheel_installs_a_config_d_file_that_enables_the_nbrelay_extension() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shared = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared[CONFIG] == "etc/jupyter/jupyter_server_config.d/nbrelay.json"
    enabled = json.loads((ROOT / CONFIG).read_text())
    assert enabled == {"ServerApp": {"jpserver_extensions": {"nbrelay": True}}}


def test_the_nbrelay_package_is_the_extensions_entry_point() -> None:
    from nbrelay.extension.app import NbrelayExtension

    (point,) = nbrelay._jupyter_server_extension_points()
    assert point == {"module": "nbrelay.extension", "app": NbrelayExtension}
    assert NbrelayExtension.name == "nbrelay"
    traits = NbrelayExtension.class_own_traits() | NbrelayExtension.class_traits(config=True)
    assert {"profile", "tools", "read_only", "no_execute", "output_budget"} <= set(traits)


def test_the_extension_page_lists_every_trait_of_the_extension() -> None:
    from nbrelay.extension.app import EXTENSION_OPTIONS

    section = (ROOT / "docs" / "modes" / "extension.md").read_text(encoding="utf-8")
    listed = [
        line.split("`")[1].removeprefix("c.NbrelayExtension.")
        for line in section.splitlines()
        if line.startswith("| `c.NbrelayExtension.")
    ]
    assert listed == list(EXTENSION_OPTIONS)
