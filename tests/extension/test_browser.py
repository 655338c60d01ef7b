"""What the person sees when the agent works through the server extension: a real JupyterLab
page in headless Chromium (Debian's ``chromium``, driven by Playwright; no browser is
downloaded). The agent's new cell, its edit of the person's cell and its run's output appear in
the page live, while the person types; their keystrokes survive."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from nbrelay.formats import CHROMIUM_FLAGS
from tests.extension.conftest import ext_client
from tests.helpers import PATIENCE, call, missing_tool, notebook, write_notebook
from tests.live.browser import FOCUS_ROUNDS, type_while_the_agent_moves_cells
from tests.live.person import fresh_sources
from tests.live.server import JupyterServer, wait_for

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


async def test_jupyterlab_shows_the_agents_edits_made_through_the_extension_live(
    ext_server: JupyterServer, ext_folder: tuple[str, Path], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    folder, local = ext_folder
    path = f"{folder}/n.ipynb"
    write_notebook(local / "n.ipynb", notebook("notes = 1\n", "y = 2"))
    url = f"{ext_server.url}lab/workspaces/{folder}/tree/{path}?reset&token={ext_server.token}"
    typed = "# typed by the person"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.goto(url)
            cells = page.locator(f"{PANEL} .jp-Cell")

            async def loaded() -> bool:
                return await cells.count() >= 2

            await wait_for(loaded, seconds=90, interval=0.2)
            await page.locator(f"{PANEL} .jp-Cell .cm-content").first.click()
            await page.keyboard.press("Control+End")
            async with ext_client(ext_server) as client:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: page.keyboard.type(typed, delay=40))
                    inserted = await call(
                        client,
                        "insert_cells",
                        path=path,
                        cells=["print('hello from the extension')"],
                        after="c1",
                    )
                    await call(client, "edit_cell", path=path, cell="c1", find="2", replace="20")
                    new_cell = page.locator(
                        f"{PANEL} .jp-Cell .cm-content", has_text="hello from the extension"
                    )
                    await new_cell.first.wait_for(timeout=PATIENCE * 1000)
                    edited = page.locator(f"{PANEL} .jp-Cell .cm-content", has_text="y = 20")
                    await edited.first.wait_for(timeout=PATIENCE * 1000)
                    new_id = inserted["changed"][0]["id"]
                    await call(client, "execute", path=path, cells=[new_id])
                    output = page.locator(
                        f"{PANEL} .jp-OutputArea-output", has_text="hello from the extension"
                    )
                    await output.first.wait_for(timeout=PATIENCE * 1000)
                await page.screenshot(path=str(tmp_path / "jupyterlab.png"))
            first = page.locator(f"{PANEL} .jp-Cell .cm-content").first

            async def typed_in_page() -> bool:
                return typed in await first.inner_text()

            await wait_for(typed_in_page, seconds=10)
            ids, sources = await fresh_sources(ext_server, path)
            assert ids == ["c0", "c1", new_id]
            assert sources[0].startswith("notes = 1")
            assert typed in sources[0]
            assert sources[1] == "y = 20"
        finally:
            await browser.close()


@pytest.mark.parametrize("seed", range(FOCUS_ROUNDS))
async def test_the_agent_moving_cells_through_the_extension_never_moves_the_persons_cursor(
    ext_server: JupyterServer, ext_folder: tuple[str, Path], seed: int
) -> None:
    """The same rounds as live mode's (``tests.live.browser``): the extension edits the room in
    the server, with the same transactions."""
    folder, local = ext_folder
    await type_while_the_agent_moves_cells(
        ext_server, folder, local, lambda: ext_client(ext_server), f"{folder}/n.ipynb", seed + 100
    )
