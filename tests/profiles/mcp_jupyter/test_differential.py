"""Profile mcp-jupyter against the original: block's mcp-jupyter 2.0.2 (PyPI, in a virtual
environment of its own) on a JupyterLab started here, and nbrelay's profile in live mode on the
suite's JupyterLab, with the same fixtures, through one call sequence
(tests/profiles/differential/mcp_jupyter.py), compared step by step on error flag, shape and
value with ids and times masked (tests/profiles/differential/harness.py). The steps where nbrelay
differs on purpose are listed there with their reason; any other difference fails.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.helpers import PATIENCE, missing_tool
from tests.live.server import JupyterServer
from tests.profiles.conftest import ProfileClient
from tests.profiles.differential import mcp_jupyter as seq
from tests.profiles.differential.harness import (
    FIGURES,
    Mask,
    Step,
    check_sequence,
    compare,
    play,
)
from tests.profiles.mcp_jupyter import original
from tests.servers import free_port, running

pytestmark = pytest.mark.anyio


def steps_for(url: str) -> list[Step]:
    """The sequence with ``SERVER`` replaced by the URL of the server the target is given."""

    def fill(value: Any) -> Any:
        return url if value == seq.SERVER else value

    return [
        Step(s.label, s.tool, {k: fill(v) for k, v in s.args.items()}, s.error_case)
        for s in seq.STEPS
    ]


async def _play(client: Client, steps: Sequence[Step], mask: Mask) -> list[dict[str, Any]]:
    with anyio.fail_after(PATIENCE * 4):
        return await play(client, steps, mask)


@pytest.fixture(scope="module")
def original_outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The original's masked outcomes, on a JupyterLab of its own whose root holds the
    fixtures."""
    try:
        original.ensure()
    except (OSError, subprocess.SubprocessError) as exc:
        missing_tool(f"mcp-jupyter 2.0.2 could not be installed: {exc}")
    base = tmp_path_factory.mktemp("mcp-jupyter-original")
    root = seq.make_fixtures(base)
    got: list[dict[str, Any]] = []

    async def record(server: JupyterServer) -> None:
        url = server.url.rstrip("/")
        mask = seq.MASK.with_roots(root, base)
        async with Client(original.server(server.token, base)) as client:
            got.extend(await _play(client, steps_for(url), mask))

    with running(JupyterServer(root=root, work=base / "work", port=free_port())) as s:
        anyio.run(record, s)
    return got


async def test_the_profile_answers_as_the_original_does(
    original_outcomes: list[dict[str, Any]],
    live_client: tuple[ProfileClient, Path],
    request: pytest.FixtureRequest,
) -> None:
    check_sequence(seq.STEPS)
    open_client, local = live_client
    seq.write_fixtures(local)
    server = request.getfixturevalue("jupyter")
    mask = seq.MASK.with_roots(local)
    async with open_client("mcp-jupyter") as client:
        ours = await _play(client, steps_for(server.url.rstrip("/")), mask)
    result = compare("mcp-jupyter", seq.STEPS, original_outcomes, ours, seq.ACCEPTED)
    FIGURES.append(result.report())
    assert not result.differing, result.report()
