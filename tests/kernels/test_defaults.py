"""The defaults that keep an agent session on a laptop: at most 8 kernels of nbrelay's own at
once (the least recently used idle one stopped to make room, and its next run says its
variables are gone), idle kernels stopped after 15 minutes, both said in ``serve --help``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from nbrelay.cli import main
from nbrelay.config import Settings
from nbrelay.workspace.runners import LOCAL_MAX_KERNELS
from tests.helpers import call, notebook, write_notebook
from tests.kernels.conftest import serve

pytestmark = pytest.mark.anyio


def printed(done: dict[str, Any]) -> str:
    return "".join(o.get("text", "") for o in done["cells"][0].get("outputs", []))


async def test_by_default_an_agent_holds_at_most_eight_kernels(root: Path, tmp_path: Path) -> None:
    """Ten notebooks run one after the other on the default settings: the eight most recently
    used keep a kernel, the other two are suspended; the first, run again, gets a new kernel
    and the result says its variables are gone."""
    names = [f"n{i}.ipynb" for i in range(LOCAL_MAX_KERNELS + 2)]
    for name in names:
        write_notebook(root / name, notebook("1"))
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    assert settings.max_kernels is None  # nothing given: the default for local kernels
    async with serve(settings) as client:
        with anyio.fail_after(600):
            for i, name in enumerate(names):
                done = await call(client, "execute", path=name, code=f"x = {i}\nprint(x)")
                assert printed(done) == f"{i}\n"
            kernels = (await call(client, "list_kernels"))["kernels"]
            states = {k["path"]: k["state"] for k in kernels}
            suspended = sorted(p for p, s in states.items() if s == "suspended")
            assert suspended == names[:2]
            assert len(states) - len(suspended) == LOCAL_MAX_KERNELS
            again = await call(client, "execute", path=names[0], code="print('x' in globals())")
    assert printed(again) == "False\n"
    assert again["state_lost"] is True
    assert "resumed with a new kernel: its variables are gone" in again["note"]


def test_serve_help_says_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default 900: 15 minutes" in text
    assert "Default: 8 for the kernels nbrelay starts on this machine" in text
