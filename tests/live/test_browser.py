"""What the person sees: a real JupyterLab page in headless Chromium (Debian's ``chromium``,
driven by Playwright; no browser is downloaded).

The person types into one cell while the agent inserts and runs another; the new cell and its
output must be in the page within 2 s of the tool call returning, and the person's typing must
survive. A screenshot is saved in the test's temporary folder.

The person types while the agent moves the cells around theirs (and changes their types), in
rounds with fixed seeds (``tests.live.browser``): every keystroke must land in their cell, in
order, and none in command mode. ``NBRELAY_FOCUS_ROUNDS`` runs more rounds (by hand: 25).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from nbrelay.formats import CHROMIUM_FLAGS
from tests.helpers import PATIENCE, call, missing_tool, notebook, write_notebook
from tests.live.browser import FOCUS_ROUNDS, type_while_the_agent_moves_cells
from tests.live.conftest import AGENT, agent
from tests.live.person import fresh_sources
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
FLAGS = list(CHROMIUM_FLAGS)
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


async def test_jupyterlab_shows_the_agents_cell_and_output_while_the_person_types(
    jupyter: JupyterServer, live_folder: tuple[str, Path], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    folder, local = live_folder
    write_notebook(local / "n.ipynb", notebook("notes = 1\n", "y = 2"))
    url = f"{jupyter.url}lab/workspaces/{folder}/tree/{folder}/n.ipynb?reset&token={jupyter.token}"
    typed = "# typed by the person in the browser"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.goto(url)
            cells = page.locator(f"{PANEL} .jp-Cell")

            async def loaded() -> bool:
                return await cells.count() >= 2

            await wait_for(loaded, seconds=90, interval=0.2)
            editor = page.locator(f"{PANEL} .jp-Cell .cm-content").first
            await editor.click()
            await page.keyboard.press("Control+End")
            async with agent(jupyter, folder) as client:
                await call(client, "execute", path="n.ipynb", code="0")  # the kernel is up
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: page.keyboard.type(typed, delay=40))
                    await anyio.sleep(0.3)
                    inserted = await call(
                        client,
                        "insert_cells",
                        path="n.ipynb",
                        cells=["print('hello from the agent')"],
                        after="c1",
                    )
                    new_cell = page.locator(
                        f"{PANEL} .jp-Cell .cm-content", has_text="hello from the agent"
                    )
                    await new_cell.first.wait_for(timeout=PATIENCE * 1000)
                    new_id = inserted["changed"][0]["id"]
                    await call(client, "execute", path="n.ipynb", cells=[new_id])
                    output = page.locator(
                        f"{PANEL} .jp-OutputArea-output", has_text="hello from the agent"
                    )
                    await output.first.wait_for(timeout=PATIENCE * 1000)
                # While it works, the agent is listed among the online collaborators.
                await page.locator('.jp-SideBar [data-id="jp-collaboration-panel"]').click()
                listed = page.locator(".jp-CollaboratorsList", has_text=AGENT)
                await listed.first.wait_for(timeout=PATIENCE * 1000)
                shot = tmp_path / "jupyterlab.png"
                await page.screenshot(path=str(shot))
            # The person's keystrokes survived, in the page and in the room.
            first = page.locator(f"{PANEL} .jp-Cell .cm-content").first

            async def typed_in_page() -> bool:
                return typed in await first.inner_text()

            await wait_for(typed_in_page, seconds=10)
            ids, sources = await fresh_sources(jupyter, f"{folder}/n.ipynb")
            assert ids == ["c0", "c1", new_id]
            assert typed in sources[0]
            assert sources[0].startswith("notes = 1")
            assert shot.stat().st_size > 10_000
        finally:
            await browser.close()


@pytest.mark.parametrize("seed", range(FOCUS_ROUNDS))
async def test_the_agent_moving_cells_never_takes_the_persons_typing_elsewhere(
    jupyter: JupyterServer, live_folder: tuple[str, Path], seed: int
) -> None:
    """Moves above, across and below the person's cell, and type changes: a change that
    JupyterLab applied in two steps put the rest of their typing at the start of another cell,
    or in command mode (where a typed ``b`` inserts a cell)."""
    folder, local = live_folder
    await type_while_the_agent_moves_cells(
        jupyter, folder, local, lambda: agent(jupyter, folder, prefix=f"f{seed}"), "n.ipynb", seed
    )
