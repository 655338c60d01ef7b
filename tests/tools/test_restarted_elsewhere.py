"""A kernel restarted by someone other than the agent, in the modes where a person shares it
(live and extension: the notebook's session kernel on a real Jupyter Server). A person's
"Restart Kernel" in JupyterLab is the server's ``POST /api/kernels/{id}/restart``, made here as
JupyterLab makes it. The agent was not told: its next run said only ``ok``, and a name it had
defined failed as if its code were wrong; a run cut short by the restart waited for a reply the
old process would never send."""

from __future__ import annotations

import re

import pytest

from nbrelay.kernels.execution import CUT_SHORT_ELSEWHERE, RESTARTED_ELSEWHERE
from tests.helpers import PATIENCE, call, text_of
from tests.live.person import restart_kernel_as_a_person
from tests.modes import Mode

pytestmark = pytest.mark.anyio

SHARED = [
    pytest.param(m, marks=[pytest.mark.jupyter, pytest.mark.kernel]) for m in ("live", "extension")
]


async def restart_as_a_person(mode: Mode, name: str) -> None:
    """What JupyterLab's "Restart Kernel" does: restart the notebook's session kernel."""
    server = mode.server
    assert server is not None
    await restart_kernel_as_a_person(
        server, (mode.folder / name).relative_to(server.root).as_posix()
    )


@pytest.mark.parametrize("anymode", SHARED, indirect=True)
async def test_a_restart_between_runs_is_said_on_the_next_run(anymode: Mode) -> None:
    c, p = anymode.client, anymode.path("r.ipynb")
    await call(c, "create_notebook", path=p)
    await call(c, "execute", path=p, code="x = 41", wait=PATIENCE)  # one run: its count is 1

    await restart_as_a_person(anymode, "r.ipynb")

    after = await c.call_tool("execute", {"path": p, "code": "print('after')", "wait": PATIENCE})
    first, *rest = text_of(after).splitlines()
    assert re.fullmatch(rf"ok( [\d.]+ s)?: {re.escape(RESTARTED_ELSEWHERE)}", first), first
    # The output is there: the run waited until the new process's output reached nbrelay.
    assert rest == ["after", "note: the kernel restarted, so its variables were lost"], rest
    assert after.structured_content is not None
    assert after.structured_content["state_lost"] is True
    # Said once: the run after that is an ordinary one.
    again = await c.call_tool("execute", {"path": p, "code": "print('again')", "wait": PATIENCE})
    assert text_of(again) == "ok\nagain"


@pytest.mark.parametrize("anymode", SHARED, indirect=True)
async def test_a_restart_during_a_run_ends_it_with_what_it_printed(anymode: Mode) -> None:
    c, p = anymode.client, anymode.path("d.ipynb")
    await call(c, "create_notebook", path=p)
    await call(
        c,
        "insert_cells",
        path=p,
        cells=[
            "x = 41",
            "import time\nprint('started', flush=True)\ntime.sleep(120)\nprint('ended')",
            "print('third')",
        ],
    )
    polled = await c.call_tool("execute", {"path": p, "cells": "all", "wait": 0.2})
    assert polled.structured_content is not None
    handle = polled.structured_content["handle"]
    while "started" not in text_of(polled):  # each poll shows what came since the last
        assert polled.structured_content is not None
        assert polled.structured_content["status"] != "done", text_of(polled)
        polled = await c.call_tool("get_execution", {"handle": handle, "wait": 1})

    await restart_as_a_person(anymode, "d.ipynb")

    ended = await c.call_tool("get_execution", {"handle": handle, "wait": PATIENCE})
    lines = text_of(ended).splitlines()
    cut = CUT_SHORT_ELSEWHERE
    assert re.fullmatch(r"cell 0 \([\w-]+\) \[1\] ok", lines[0]), lines
    assert re.fullmatch(rf"cell 1 \([\w-]+\) \[2\] died( [\d.]+ s)?: {re.escape(cut)}", lines[1])
    assert lines[2] == "cell 2 skipped", lines  # its output ("started") came with a poll before
    assert "ended\n" not in text_of(ended)  # the cell's last print never ran
    # The kernel runs again, without a second restart, and its output reaches the agent (the
    # run waits for the new process's output to come through).
    again = await c.call_tool("execute", {"path": p, "code": "print('again')", "wait": PATIENCE})
    assert re.fullmatch(r"ok( [\d.]+ s)?\nagain", text_of(again)), text_of(again)
