"""nbrelay's profiles against the original servers they stand in for, call by call.

Each profile has one call sequence (``<profile>.py`` beside this file: at least 30 calls, a third
of them error cases: out of range, missing file, wrong type, empty notebook) that runs against
the original and against nbrelay on identical fixtures; the masked outcomes (error flag, result
shape and value, ids and times masked: ``harness.py``) must be equal, step by step, except the
steps a profile lists in ``ACCEPTED`` with the reason nbrelay keeps its own behaviour there (the
original is broken or unsafe). The figures (steps identical / steps) are printed at the end of
the run.

Where the originals come from: **ipynb-mcp**, **notebook-lr** and **jupyterlab-rtc** exist only
as source on GitHub, so their answers were recorded once as golden transcripts
(``transcripts/``), facts about their behaviour, by ``python -m
tests.profiles.differential.record PROFILE CHECKOUT`` (its docstring says which commit of each,
how it was built and run). Their code is not in this repository. ipynb-mcp and notebook-lr are
answered by nbrelay in file mode; jupyterlab-rtc in live mode on the suite's JupyterLab.

A transcript is tied to its sequence: changing a sequence fails here until it is recorded again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import counter_ids
from tests.profiles.conftest import ProfileClient
from tests.profiles.differential import sequences
from tests.profiles.differential.harness import (
    FIGURES,
    Kept,
    Transcript,
    check_sequence,
    compare,
    play,
)

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def nbrelay_files(
    profile: str, root: Path, locks: Path, **overrides: Any
) -> AsyncIterator[Client]:
    """nbrelay in file mode over ``root``, in process, through the official client."""
    settings = Settings(root=root, profile=profile, lock_dir=locks, kernel_pool=0).replace(
        **overrides
    )
    ws = Workspace(settings, FileStore(root, lock_dir=locks), id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as client:
        yield client


@pytest.mark.parametrize("profile", ["ipynb-mcp", "notebook-lr"])
async def test_file_profile_answers_as_its_recorded_original(profile: str, tmp_path: Path) -> None:
    seq = sequences.get(profile)
    check_sequence(seq.STEPS)
    transcript = Transcript.load(profile)
    theirs = transcript.outcomes(seq.STEPS)
    folder = tmp_path / "fixtures"
    root = seq.make_fixtures(folder)
    mask = seq.MASK.with_roots(root, folder)
    async with nbrelay_files(profile, root, tmp_path / "locks", **seq.NBRELAY) as client:
        ours = await play(client, seq.STEPS, mask)
    result = compare(profile, seq.STEPS, theirs, ours, seq.ACCEPTED)
    FIGURES.append(result.report())
    assert not result.differing, result.report()
    if transcript.files:
        kept: Kept | None = getattr(seq, "FILES_KEPT", None)
        only = kept.only if kept is not None and kept.only is not None else (lambda v: v)
        assert only(seq.files_after(root, mask)) == only(transcript.files), "the files left differ"


async def test_live_profile_answers_as_its_recorded_original(
    live_client: tuple[ProfileClient, Path],
) -> None:
    """jupyterlab-rtc in live mode on the suite's JupyterLab, against the original's answers
    recorded on a JupyterLab serving the same fixtures."""
    profile = "jupyterlab-rtc"
    seq = sequences.get(profile)
    check_sequence(seq.STEPS)
    theirs = Transcript.load(profile).outcomes(seq.STEPS)
    open_client, local = live_client
    seq.write_fixtures(local)
    mask = seq.MASK.with_roots(local)
    async with open_client(profile) as client:
        ours = await play(client, seq.STEPS, mask)
    result = compare(profile, seq.STEPS, theirs, ours, seq.ACCEPTED)
    FIGURES.append(result.report())
    assert not result.differing, result.report()
