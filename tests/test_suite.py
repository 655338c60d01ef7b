"""The test suite's own promises (README, Quick start): under ``scripts/test``
(NBRELAY_FULL_SUITE=1) a missing test tool fails the run; by hand it skips; and no nbrelay setting
from the developer's shell reaches a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import os

from tests.helpers import missing_tool


def test_a_missing_tool() -> None:
    missing_tool("the probe's tool is not installed")


def test_the_environment() -> None:
    assert "NBRELAY_OUTPUT_BUDGET" not in os.environ  # a setting: removed
    assert "NBRELAY_TOKEN" not in os.environ
    assert os.environ.get("NBRELAY_SOAK") == "0"  # the suite's own variables: kept
"""


def _probe(tmp_path: Path, **env: str) -> str:
    """Run two probe tests under this suite's conftest; return pytest's summary line."""
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import clean_environ  # noqa: F401 - the fixture under test\n"
    )
    (tmp_path / "test_probe.py").write_text(PROBE)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "NBRELAY_FULL_SUITE")}
    environ.update(
        PYTHONPATH=str(REPO),
        NBRELAY_OUTPUT_BUDGET="999",
        NBRELAY_TOKEN="developer-token",
        NBRELAY_SOAK="0",
        **env,
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", str(tmp_path)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout


@pytest.mark.parametrize(
    ("env", "outcome"),
    [({"NBRELAY_FULL_SUITE": "1"}, "1 failed, 1 passed"), ({}, "1 passed, 1 skipped")],
    ids=["full-suite", "by-hand"],
)
def test_a_missing_tool_fails_the_full_suite_and_skips_by_hand(
    tmp_path: Path, env: dict[str, str], outcome: str
) -> None:
    out = _probe(tmp_path, **env)
    assert outcome in out, out[-3000:]
    assert "the probe's tool is not installed" in out
