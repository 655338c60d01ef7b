"""The MCP Apps notebook view (``ui://nbrelay/notebook.html``).

A client that negotiated the extension gets the view's data in the result's ``_meta``; any other
client gets the same result as before, byte for byte. The view itself runs in headless Chromium
(Debian's ``chromium``, no browser downloaded) inside a small host page that speaks the
extension's postMessage JSON-RPC as hosts do: it answers ``ui/initialize``, waits for
``ui/notifications/initialized`` and sends ``ui/notifications/tool-result``.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp_types import CallToolResult, TextResourceContents

from nbrelay.config import Settings
from nbrelay.formats import CHROMIUM_FLAGS
from nbrelay.server import build_server
from nbrelay.tools.apps import VIEW_KEY, VIEW_URI
from tests.helpers import PATIENCE, missing_tool, notebook, text_of, write_notebook

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
APP_MIME = "text/html;profile=mcp-app"
# Where the README's picture comes from: NBRELAY_SCREENSHOT_DIR=docs python -m pytest this file.
SCREENSHOT_DIR = os.environ.get("NBRELAY_SCREENSHOT_DIR")

PLOT = (
    "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
    "import matplotlib.pyplot as plt\n"
    "plt.figure(figsize=(4, 2.5))\nplt.plot([1, 3, 2, 5], marker='o')\nplt.title('sales')\nplt.show()"
)
CELLS = (
    "# A short analysis",
    "numbers = [3, 1, 2]\nprint(sorted(numbers))",
    "from IPython.display import HTML\n"
    "HTML('<table><tr><th>month</th><th>sales</th></tr><tr><td>May</td><td>12</td></tr>"
    '<script>document.title = "ran"</script></table>\')',
    PLOT,
    "1 / 0",
)


class AppsSupport(ClientExtension):
    """What a host that renders MCP Apps advertises."""

    identifier = "io.modelcontextprotocol/ui"

    def settings(self) -> dict[str, Any]:
        return {"mimeTypes": [APP_MIME]}


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    nb = notebook(*CELLS)
    nb.cells[0]["cell_type"] = "markdown"
    for key in ("outputs", "execution_count"):
        nb.cells[0].pop(key, None)
    write_notebook(root / "a.ipynb", nb)
    return root


def _server(root: Path) -> Any:
    return build_server(Settings(root=root, lock_dir=root.parent / "locks"))


def _wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def test_tools_point_at_the_view_and_the_view_is_served(tmp_path: Path) -> None:
    async with Client(_server(_root(tmp_path)), extensions=[AppsSupport()]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("read_notebook", "execute"):
            assert (tools[name].meta or {}).get("ui") == {"resourceUri": VIEW_URI}, name
        read = await client.read_resource(VIEW_URI)
    (page,) = read.contents
    assert isinstance(page, TextResourceContents)
    assert page.mime_type == APP_MIME
    html = page.text
    assert "ui/initialize" in html
    # self-contained: nothing is fetched (no external script, style, font or image)
    for needle in ("http://", "https://", 'src="//', "@import", "url("):
        assert needle not in html, needle


async def test_clients_without_apps_get_todays_result_and_no_view_data(tmp_path: Path) -> None:
    root = _root(tmp_path)
    async with Client(_server(root)) as plain:
        before = await plain.call_tool("read_notebook", {"path": "a.ipynb"})
    async with Client(_server(root), extensions=[AppsSupport()]) as apps:
        with_view = await apps.call_tool("read_notebook", {"path": "a.ipynb"})
    assert before.meta is None or VIEW_KEY not in before.meta
    # what the model reads is the same either way: the view rides in _meta only
    assert text_of(with_view) == text_of(before)
    assert with_view.structured_content == before.structured_content
    assert with_view.meta is not None
    view = with_view.meta[VIEW_KEY]
    assert [c["type"] for c in view["cells"]] == ["markdown", "code", "code", "code", "code"]
    assert view["cells"][1]["source"] == CELLS[1]


async def _run_with_view(root: Path) -> dict[str, Any]:
    async with Client(_server(root), extensions=[AppsSupport()]) as client:
        with anyio.fail_after(PATIENCE):
            result = await client.call_tool(
                "execute", {"path": "a.ipynb", "cells": [":"], "stop_on_error": False, "wait": 90}
            )
    assert not result.is_error, text_of(result)
    return _wire(result)


def _host_page(view_html: str, result: dict[str, Any]) -> str:
    """A minimal MCP Apps host: the view in a sandboxed frame, spoken to over postMessage."""

    def script_json(value: Any) -> str:  # JSON inside <script>: "</" must not end it
        return json.dumps(value).replace("</", "<\\/")

    return f"""<!DOCTYPE html><html><body style="margin:0">
<iframe id="view" sandbox="allow-scripts" style="width:860px;height:900px;border:0"></iframe>
<script>
const result = {script_json(result)};
window.log = [];
const frame = document.getElementById("view");
window.addEventListener("message", (e) => {{
  if (e.source !== frame.contentWindow) return;
  const m = e.data; window.log.push(m.method || "reply");
  const reply = (r) => frame.contentWindow.postMessage({{jsonrpc: "2.0", id: m.id, result: r}}, "*");
  if (m.method === "ui/initialize") reply({{protocolVersion: m.params.protocolVersion,
      hostInfo: {{name: "test-host", version: "1"}}, hostCapabilities: {{}},
      hostContext: {{theme: "light"}}}});
  else if (m.method === "ui/notifications/initialized")
    frame.contentWindow.postMessage({{jsonrpc: "2.0", method: "ui/notifications/tool-result",
      params: result}}, "*");
  else if (m.method === "ui/notifications/size-changed") window.size = m.params;
}});
frame.srcdoc = {script_json(view_html)};
</script></body></html>"""


async def test_the_view_shows_cells_outputs_and_an_image_in_chromium(tmp_path: Path) -> None:
    from PIL import Image
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    root = _root(tmp_path)
    result = await _run_with_view(root)
    view = result["_meta"][VIEW_KEY]
    kinds = [o["kind"] for c in view["cells"] for o in c.get("outputs", [])]
    assert {"stream", "html", "image", "error"} <= set(kinds), kinds
    async with Client(_server(root)) as client:
        (page_data,) = (await client.read_resource(VIEW_URI)).contents
    assert isinstance(page_data, TextResourceContents)
    fetched: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 880, "height": 920})
            page.on("request", lambda r: fetched.append(r.url))
            await page.set_content(_host_page(page_data.text, result))
            frame = page.frame_locator("#view")
            await frame.locator("section.cell").nth(len(CELLS) - 1).wait_for(timeout=30_000)
            image = frame.locator(".out.image img")
            await image.wait_for(timeout=30_000)
            assert await image.evaluate("(img) => img.complete && img.naturalWidth") > 100
            cells = frame.locator("section.cell")
            assert await cells.count() == len(CELLS)
            assert await frame.locator("#title").text_content() == "a.ipynb"
            prompts = await frame.locator(".prompt").all_text_contents()
            assert prompts == ["", "[1]:", "[2]:", "[3]:", "[4]:"]
            assert "[1, 2, 3]" in (await cells.nth(1).locator(".out").text_content() or "")
            table = cells.nth(2).locator(".out table td")
            assert await table.all_text_contents() == ["May", "12"]
            assert await cells.nth(2).locator("script").count() == 0  # HTML rebuilt, no scripts
            assert "ZeroDivisionError" in (
                await cells.nth(4).locator(".out.error").text_content() or ""
            )
            assert await frame.locator(".src .k").count() > 0  # keywords highlighted in the page
            log = await page.evaluate("window.log")
            assert log[:2] == ["ui/initialize", "ui/notifications/initialized"]
            assert await page.evaluate("window.size && window.size.height") > 200
            shot = await page.locator("#view").screenshot()
            picture = await image.screenshot()
        finally:
            await browser.close()
    # nothing was fetched: the host page and the view are all there is
    assert all(u.startswith(("about:", "data:")) for u in fetched), fetched
    (tmp_path / "notebook-view.png").write_bytes(shot)
    if SCREENSHOT_DIR:
        Path(SCREENSHOT_DIR).mkdir(parents=True, exist_ok=True)
        (Path(SCREENSHOT_DIR) / "notebook-view.png").write_bytes(shot)
    whole = Image.open(io.BytesIO(shot)).convert("RGB")
    assert whole.size[0] >= 800
    plot = Image.open(io.BytesIO(picture)).convert("RGB")
    colours = plot.getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 20, "the image output is blank"


def _live_host_page(view_html: str, arguments: dict[str, Any]) -> str:
    """A host that proxies the view's ``tools/call`` to the server (``window.callTool``, bound
    by the test to an MCP client) and holds the result back until the test hands it over."""

    def script_json(value: Any) -> str:
        return json.dumps(value).replace("</", "<\\/")

    return f"""<!DOCTYPE html><html><body style="margin:0">
<iframe id="view" sandbox="allow-scripts" style="width:860px;height:600px;border:0"></iframe>
<script>
window.log = []; window.calls = [];
const frame = document.getElementById("view");
const send = (m) => frame.contentWindow.postMessage(Object.assign({{jsonrpc: "2.0"}}, m), "*");
window.sendResult = (result) => send({{method: "ui/notifications/tool-result", params: result}});
window.addEventListener("message", async (e) => {{
  if (e.source !== frame.contentWindow) return;
  const m = e.data; window.log.push(m.method || "reply");
  if (m.method === "ui/initialize") send({{id: m.id, result: {{protocolVersion: m.params.protocolVersion,
      hostInfo: {{name: "test-host", version: "1"}}, hostCapabilities: {{serverTools: {{}}}},
      hostContext: {{theme: "light"}}}}}});
  else if (m.method === "ui/notifications/initialized")
    send({{method: "ui/notifications/tool-input", params: {{arguments: {script_json(arguments)}}}}});
  else if (m.method === "tools/call") {{
    window.calls.push(m.params);
    send({{id: m.id, result: JSON.parse(await window.callTool(JSON.stringify(m.params)))}});
  }}
}});
frame.srcdoc = {script_json(view_html)};
</script></body></html>"""


async def test_the_view_follows_a_run_as_it_goes_in_chromium(tmp_path: Path) -> None:
    """The view polls ``notebook_view`` through the host while ``execute`` runs: the first
    cell's output and the running cell show before the call returns; then the result."""
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    root = tmp_path / "root"
    go = tmp_path / "go"
    cells = (
        "print('first part', flush=True)",
        "import pathlib, time\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n    time.sleep(0.05)\n"
        "print('second part')",
    )
    write_notebook(root / "run.ipynb", notebook(*cells))
    arguments = {"path": "run.ipynb", "cells": [":"], "wait": PATIENCE}
    async with Client(_server(root), extensions=[AppsSupport()]) as client:
        (page_data,) = (await client.read_resource(VIEW_URI)).contents
        assert isinstance(page_data, TextResourceContents)

        async def call_tool(raw: str) -> str:  # the host's proxy to the server
            params = json.loads(raw)
            result = await client.call_tool(params["name"], params.get("arguments") or {})
            return json.dumps(_wire(result))

        finished: list[dict[str, Any]] = []
        returned = anyio.Event()

        async def run() -> None:
            result = await client.call_tool("execute", arguments)
            assert not result.is_error, text_of(result)
            finished.append(_wire(result))
            returned.set()

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
            )
            try:
                page = await browser.new_page(viewport={"width": 880, "height": 620})
                await page.expose_function("callTool", call_tool)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    await page.set_content(_live_host_page(page_data.text, arguments))
                    frame = page.frame_locator("#view")
                    # during the run: the first output, and the second cell marked running
                    await (
                        frame.locator("section.cell")
                        .nth(0)
                        .locator(".out")
                        .filter(has_text="first part")
                        .wait_for(timeout=PATIENCE * 1000)
                    )
                    running = frame.locator("section.cell.running")
                    await running.wait_for(timeout=PATIENCE * 1000)
                    assert await running.get_attribute("data-id") == "c1"
                    assert await running.locator(".prompt").text_content() == "[*]:"
                    assert "running" in (await frame.locator("#meta").text_content() or "")
                    assert not finished  # all of that came before the call returned
                    go.write_text("go")
                with anyio.fail_after(PATIENCE):
                    await returned.wait()
                await page.evaluate("(r) => window.sendResult(r)", finished[0])
                second = frame.locator("section.cell").nth(1)
                await (
                    second.locator(".out")
                    .filter(has_text="second part")
                    .wait_for(timeout=PATIENCE * 1000)
                )
                assert await frame.locator("section.cell.running").count() == 0
                assert await second.locator(".prompt").text_content() == "[2]:"
                calls = await page.evaluate("window.calls")
            finally:
                await browser.close()
    assert calls, "the view never asked for the notebook during the run"
    assert {c["name"] for c in calls} == {"notebook_view"}
    assert all(c["arguments"] == {"path": "run.ipynb"} for c in calls)


async def test_notebook_view_is_for_views_only_and_hidden_from_models(tmp_path: Path) -> None:
    root = _root(tmp_path)
    async with Client(_server(root)) as plain:
        unseen = {t.name: t for t in (await plain.list_tools()).tools}
        refused = await plain.call_tool("notebook_view", {"path": "a.ipynb"})
    # Without Apps: not listed (no context spent on it), and refused if called anyway.
    assert "notebook_view" not in unseen
    assert all("ui" not in (t.meta or {}) for t in unseen.values())
    assert refused.is_error
    assert "read_notebook" in text_of(refused)
    async with Client(_server(root), extensions=[AppsSupport()]) as apps:
        tools = {t.name: t for t in (await apps.list_tools()).tools}
        polled = await apps.call_tool("notebook_view", {"path": "a.ipynb"})
    assert (tools["notebook_view"].meta or {})["ui"]["visibility"] == ["app"]
    assert not polled.is_error, text_of(polled)
    assert polled.structured_content == {
        "path": "a.ipynb",
        "version": polled.structured_content["version"],
        "busy": False,
    }
    assert polled.meta is not None
    assert [c["source"] for c in polled.meta[VIEW_KEY]["cells"]][1] == CELLS[1]
