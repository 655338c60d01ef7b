"""A person typing in JupyterLab in headless Chromium while the agent moves the cells around
theirs (and changes their types), for live and extension mode alike (``tests/live`` and
``tests/extension``)."""

from __future__ import annotations

import os
import random
import string
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
from mcp import Client

from nbrelay.formats import CHROMIUM_FLAGS
from tests.helpers import PATIENCE, call, missing_tool, notebook, write_notebook
from tests.live.person import fresh_sources
from tests.live.server import JupyterServer, wait_for

CHROMIUM = "/usr/bin/chromium"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# Rounds with fixed seeds (0, 1, ...); more by hand: NBRELAY_FOCUS_ROUNDS=25.
FOCUS_ROUNDS = int(os.environ.get("NBRELAY_FOCUS_ROUNDS", "2"))


async def type_while_the_agent_moves_cells(
    server: JupyterServer,
    folder: str,
    local: Path,
    connect: Callable[[], AbstractAsyncContextManager[Client]],
    path: str,
    seed: int,
    *,
    via_file_browser: bool = False,
) -> None:
    """The person types 60 letters at the end of the 4th of 7 cells while the agent (``connect``,
    which names the notebook ``path``) moves the other cells to random places and changes their
    types; then every keystroke must be in the person's cell, in order, no other cell touched or
    added (a letter typed in command mode is a command: ``b`` adds a cell), and the notebook
    still in edit mode. ``via_file_browser``: the person opens the notebook from JupyterLab's
    file browser (before JupyterLab 4.3 only that opens it in its collaboration room; a
    notebook's URL opens it alone)."""
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    count, mine = 7, "c3"
    sources = {f"c{i}": f"a{i} = {i}" for i in range(count)}
    write_notebook(local / "n.ipynb", notebook(*sources.values()))
    rng = random.Random(seed)
    typed = "".join(rng.choice(string.ascii_lowercase) for _ in range(60))
    opened = folder if via_file_browser else f"{folder}/n.ipynb"
    url = f"{server.url}lab/workspaces/{folder}/tree/{opened}?reset&token={server.token}"
    room_path = f"{folder}/n.ipynb"
    want = sources | {mine: sources[mine] + typed}
    changes = 0
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await page.goto(url)
            if via_file_browser:
                entry = page.locator(".jp-DirListing-item", has_text="n.ipynb").first
                await entry.dblclick(timeout=PATIENCE * 1000)
            cells = page.locator(f"{PANEL} .jp-Cell")

            async def loaded() -> bool:
                return await cells.count() >= count

            await wait_for(loaded, seconds=90, interval=0.2)
            await page.locator(f"{PANEL} .jp-Cell .cm-content").nth(3).click()
            await page.keyboard.press("Control+End")
            async with connect() as client:
                done = anyio.Event()

                async def keys() -> None:
                    await page.keyboard.type(typed, delay=40)
                    done.set()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(keys)
                    while not done.is_set():
                        cid = rng.choice([c for c in sources if c != mine])
                        if rng.random() < 0.8:
                            to = rng.randrange(count)
                            await call(client, "move_cells", path=path, cells=[cid], to=to)
                        else:
                            kind = rng.choice(["markdown", "raw", "code"])
                            await call(client, "edit_cell", path=path, cell=cid, cell_type=kind)
                        changes += 1
                        await anyio.sleep(rng.uniform(0, 0.15))
            panel = page.locator(f"{PANEL} .jp-Notebook")
            edit_mode = await panel.evaluate("(n) => n.classList.contains('jp-mod-editMode')")
            # The page's last keystrokes reach the room: until it holds what is wanted, or holds
            # still (the same for a second) if something went elsewhere.
            room: dict[str, str] = {}
            with anyio.fail_after(PATIENCE):
                while True:
                    now = dict(zip(*await fresh_sources(server, room_path), strict=True))
                    if now in (want, room):
                        break
                    room = now
                    await anyio.sleep(1)
        finally:
            await browser.close()
    assert changes >= 5
    # Every keystroke in the person's cell, in order; no other cell touched, none added.
    assert now == want, {
        c: (now.get(c), want.get(c)) for c in {*now, *want} if now.get(c) != want.get(c)
    }
    assert edit_mode, "the person's notebook fell into command mode"
