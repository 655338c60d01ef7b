"""Profiles are independent of each other: import-linter's independence contract names every
profile the server offers, so a profile added later is held to it too."""

from __future__ import annotations

import tomllib
from pathlib import Path

from nbrelay.server import PROFILES

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_independence_contract_names_every_profile() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    independent = [c for c in contracts if c["type"] == "independence"]
    assert len(independent) == 1
    modules = set(independent[0]["modules"])
    assert modules == {f"nbrelay.tools.{p.replace('-', '_')}" for p in PROFILES}
