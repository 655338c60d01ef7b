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
import re
from html.parser import HTMLParser
from importlib import resources
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
from tests.servers import wait_for

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
APP_MIME = "text/html;profile=mcp-app"
# Where the picture of docs/apps.md comes from: NBRELAY_SCREENSHOT_DIR=docs python -m pytest this file.
SCREENSHOT_DIR = os.environ.get("NBRELAY_SCREENSHOT_DIR")

PLOT = (
    "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
    "import matplotlib.pyplot as plt\n"
    "plt.figure(figsize=(4, 2.5))\nplt.plot([1, 3, 2, 5], marker='o')\nplt.title('sales')\nplt.show()"
)
CELLS = (
    "# A short analysis\n\nMonthly *sales* $s_t$ and their mean "
    "$\\bar{s} = \\frac{1}{n}\\sum_{t=1}^{n} s_t$.",
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
    _assert_self_contained(html)


class _Page(HTMLParser):
    """The view page's tags, attributes, style and script text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self.scripts: list[str] = []
        self._in = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag

    def handle_endtag(self, tag: str) -> None:
        self._in = ""

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.style += data
        elif self._in == "script":
            self.scripts.append(data)


def _assert_self_contained(html: str) -> None:
    """Nothing in the page is fetched: no element names a URL, the style imports nothing, no
    script opens a connection (the renderers are inlined: their text names URLs only in comments
    and the MathML namespace)."""
    page = _Page()
    page.feed(html)
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "object", "embed", "base", "img"), tag
        for name in ("src", "href", "srcset", "action", "data"):
            assert name not in attrs, (tag, name)
    assert "url(" not in page.style
    assert "@import" not in page.style
    assert len(page.scripts) == 3  # marked, Temml, the view
    assert "marked v" in page.scripts[0]
    assert 'version:"' in page.scripts[1]
    for code in page.scripts:
        for api in (
            r"(?<![\w.])fetch\((?!\)\{)",
            "XMLHttpRequest",
            "WebSocket",
            "EventSource",
            "sendBeacon",
        ):
            assert not re.search(api, code), api
        assert "sourceMappingURL" not in code


def test_the_vendored_renderers_are_the_pinned_versions() -> None:
    """tools/vendor/ holds what scripts/vendor-view pins (and says so in VERSIONS)."""
    script = (Path(__file__).parents[2] / "scripts" / "vendor-view").read_text()
    pins = dict(re.findall(r"^(MARKED|TEMML)=(\S+)$", script, re.MULTILINE))
    vendor = resources.files("nbrelay.tools").joinpath("vendor")
    assert vendor.joinpath("VERSIONS").read_text().split() == [
        "marked",
        pins["MARKED"],
        "temml",
        pins["TEMML"],
    ]
    assert f"marked v{pins['MARKED']} " in vendor.joinpath("marked.umd.js").read_text()
    assert f'version:"{pins["TEMML"]}"' in vendor.joinpath("temml.min.js").read_text()
    for name in ("marked.LICENSE.md", "temml.LICENSE.md"):
        assert "Permission is hereby granted" in vendor.joinpath(name).read_text()


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


def _host_page(view_html: str, result: dict[str, Any], *, sized: bool = False) -> str:
    """A minimal MCP Apps host: the view in a sandboxed frame, spoken to over postMessage. It
    logs every message (``window.messages``), answers ``ui/open-link``, can hand the result over
    again (``window.resend()``) and, ``sized``, sizes the frame from the view's size reports as
    hosts do."""

    def script_json(value: Any) -> str:  # JSON inside <script>: "</" must not end it
        return json.dumps(value).replace("</", "<\\/")

    height = "120px" if sized else "900px"
    return f"""<!DOCTYPE html><html><body style="margin:0">
<iframe id="view" sandbox="allow-scripts" style="width:860px;height:{height};border:0"></iframe>
<script>
const result = {script_json(result)};
window.log = []; window.messages = [];
const frame = document.getElementById("view");
const send = (m) => frame.contentWindow.postMessage(Object.assign({{jsonrpc: "2.0"}}, m), "*");
window.resend = () => send({{method: "ui/notifications/tool-result", params: result}});
window.addEventListener("message", (e) => {{
  if (e.source !== frame.contentWindow) return;
  const m = e.data; window.log.push(m.method || "reply"); window.messages.push(m);
  if (m.method === "ui/initialize") send({{id: m.id, result: {{protocolVersion: m.params.protocolVersion,
      hostInfo: {{name: "test-host", version: "1"}}, hostCapabilities: {{openLinks: {{}}}},
      hostContext: {{theme: "light"}}}}}});
  else if (m.method === "ui/notifications/initialized") window.resend();
  else if (m.method === "ui/open-link") send({{id: m.id, result: {{}}}});
  else if (m.method === "ui/notifications/size-changed") {{
    window.size = m.params;
    if ({"true" if sized else "false"}) frame.style.height = m.params.height + "px";
  }}
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
            heading = cells.nth(0).locator("h1")
            assert await heading.all_text_contents() == ["A short analysis"]
            assert await cells.nth(0).locator("math").count() == 2
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
                    # the first cell may still show [*] for a moment after its output
                    running = frame.locator('section.cell.running[data-id="c1"]')
                    await running.wait_for(timeout=PATIENCE * 1000)
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


def _view_frame(page: Any) -> Any:
    """The view's frame (to evaluate in it)."""
    return next(f for f in page.frames if f is not page.main_frame)


async def _chromium(pw: Any) -> Any:
    if not Path(CHROMIUM).exists():
        missing_tool(f"Debian's chromium is not installed at {CHROMIUM} (scripts/test installs it)")
    return await pw.chromium.launch(
        executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
    )


async def _view_page(root: Path) -> str:
    async with Client(_server(root)) as client:
        (page_data,) = (await client.read_resource(VIEW_URI)).contents
    assert isinstance(page_data, TextResourceContents)
    return page_data.text


MARKDOWN = r"""# A short analysis

Some *emphasis*, `code`, a [link](https://example.org/docs) and math $e^{i\pi} + 1 = 0$;
prices like $5 and $10 stay text.

$$\int_0^1 x\,dx = \frac{1}{2}$$

\begin{eqnarray} a &=& b + c \\ d &=& e \end{eqnarray}

| month | sales |
|-------|-------|
| May   | 12    |

![a dot](attachment:dot.png)
"""
DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
RICH = (
    "from IPython.display import Markdown, Math, display\n"
    "display(Markdown('**bold** and $a_1$'))\n"
    "Math(r'\\frac{1}{2}')",
    "from IPython.display import Latex\nLatex(r'$\\sqrt{2}$ is irrational')",
)


async def test_the_view_renders_markdown_and_math_as_jupyterlab_does(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    root = tmp_path / "root"
    nb = notebook(MARKDOWN, *RICH)
    nb.cells[0] = {
        "cell_type": "markdown",
        "id": "m",
        "metadata": {},
        "source": MARKDOWN,
        "attachments": {"dot.png": {"image/png": DOT}},
    }
    write_notebook(root / "a.ipynb", nb)
    result = await _run_with_view(root)
    kinds = [o["kind"] for c in result["_meta"][VIEW_KEY]["cells"] for o in c.get("outputs", [])]
    assert kinds == ["markdown", "latex", "latex"]
    async with async_playwright() as pw:
        browser = await _chromium(pw)
        try:
            page = await browser.new_page(viewport={"width": 880, "height": 920})
            await page.set_content(_host_page(await _view_page(root), result))
            frame = page.frame_locator("#view")
            cells = frame.locator("section.cell")
            await cells.nth(2).locator(".out math").wait_for(timeout=30_000)
            md = cells.nth(0)
            # The heading is a heading, and only the heading: the rest is a paragraph.
            assert await md.locator("h1").all_text_contents() == ["A short analysis"]
            assert await md.locator("em").all_text_contents() == ["emphasis"]
            assert await md.locator("code").all_text_contents() == ["code"]
            assert await md.locator("td").all_text_contents() == ["May", "12"]
            assert await md.locator("math").count() == 3  # inline, $$ and eqnarray
            assert await md.locator('math[display="block"]').count() == 2
            assert await md.locator(".math-error").count() == 0
            # The cell's attached image, shown from the attachment.
            dot = md.locator("img")
            assert await dot.get_attribute("alt") == "a dot"
            assert (await dot.get_attribute("src") or "").startswith("data:image/png;base64,")
            text = await md.inner_text()
            assert "prices like $5 and $10 stay text" in text
            assert "\\frac" not in text
            assert "i\\pi" not in text
            # A link opens through the host, never in the frame.
            await md.locator(".link").click()
            opened = await page.evaluate(
                "window.messages.filter((m) => m.method === 'ui/open-link').map((m) => m.params)"
            )
            assert opened == [{"url": "https://example.org/docs"}]
            # Outputs: Markdown rendered, Math and Latex typeset, never their repr.
            outs = cells.nth(1).locator(".out")
            assert await outs.nth(0).locator("strong").all_text_contents() == ["bold"]
            assert await outs.nth(0).locator("math").count() == 1
            assert await outs.nth(1).locator("mfrac").count() == 1
            latex = cells.nth(2).locator(".out")
            assert await latex.locator("msqrt").count() == 1
            assert "is irrational" in await latex.inner_text()
            whole = await frame.locator("main").inner_text()
            assert "IPython.core.display" not in whole
        finally:
            await browser.close()


PWN = "parent.postMessage({jsonrpc:'2.0',method:'pwned'},'*');document.title='ran'"
ATTACKS = (
    f"<script>{PWN}</script>",
    f'<img src="x" onerror="{PWN}">',
    f'<svg onload="{PWN}"><script>{PWN}</script></svg>',
    f'<details open ontoggle="{PWN}"><summary>toggle me</summary>inside</details>',
    f'<iframe srcdoc="<script>{PWN}</script>"></iframe>',
    f'<a href="javascript:{PWN}">click me</a>',
    f'<math><mtext><table><mglyph><style><img src=x onerror="{PWN}">',
    f'<noscript><p title="</noscript><img src=x onerror={PWN}>"></noscript>',
    f'<form><button formaction="javascript:{PWN}">press</button></form>',
    f'<object data="javascript:{PWN}"></object><embed src="javascript:{PWN}">',
    "<style>body{background:url(http://127.0.0.1:9/bg.png)}</style>",
    f'<div style="background:url(http://127.0.0.1:9/div.png)" onclick="{PWN}">styled</div>',
)


async def test_no_script_in_markdown_html_or_math_ever_runs(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    root = tmp_path / "root"
    attacks = "\n\n".join(ATTACKS)
    source = (
        f"# Notes\n\n{attacks}\n\n![remote](http://127.0.0.1:9/remote.png)\n\n"
        r"$\href{javascript:alert(1)}{x}$ and $\includegraphics{http://127.0.0.1:9/m.png}$"
    )
    nb = notebook(
        "",
        f"from IPython.display import HTML\nHTML({attacks!r})",
        f"from IPython.display import Markdown\nMarkdown({attacks!r})",
    )
    nb.cells[0] = {"cell_type": "markdown", "id": "m", "metadata": {}, "source": source}
    write_notebook(root / "a.ipynb", nb)
    result = await _run_with_view(root)
    fetched: list[str] = []
    async with async_playwright() as pw:
        browser = await _chromium(pw)
        try:
            page = await browser.new_page(viewport={"width": 880, "height": 920})
            page.on("request", lambda r: fetched.append(r.url))
            await page.set_content(_host_page(await _view_page(root), result))
            frame = page.frame_locator("#view")
            cells = frame.locator("section.cell")
            await cells.nth(2).locator(".out").wait_for(timeout=30_000)
            # Everything a person could click, clicked.
            for text in ("click me", "toggle me", "press", "styled"):
                for k in range(await frame.get_by_text(text).count()):
                    await frame.get_by_text(text).nth(k).click()
            # A data: image decodes: by then an image's error handler would have run.
            view = _view_frame(page)
            await view.evaluate(
                "() => new Promise((done) => { const i = new Image(); i.onload = done;"
                " i.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=' ; setTimeout(done, 500); })"
            )
            methods = await page.evaluate("window.messages.map((m) => m.method)")
            assert "pwned" not in methods
            assert await view.evaluate("document.title") == "Notebook"
            # What is in the page: the text, no handler, no script, no frame, no URL.
            found = await view.evaluate(
                """() => [...document.querySelectorAll('#cells *')].flatMap((e) =>
                  [e.localName, ...[...e.attributes].map((a) => a.name + '=' + a.value)])"""
            )
            assert not [f for f in found if f.startswith("on")], found
            banned = {"script", "iframe", "object", "embed", "form", "button", "style", "svg", "a"}
            assert not banned & set(found), found
            assert not [f for f in found if "javascript:" in f or "http" in f], found
            assert "inside" in (await cells.nth(0).text_content() or "")  # harmless text stays
        finally:
            await browser.close()
    assert all(u.startswith(("about:", "data:")) for u in fetched), fetched


FOLD = "def f(n):\n    return f(n - 1) if n else {}['missing']\n\nf(12)"


async def test_the_frame_is_sized_to_the_view_after_images_and_a_traceback_unfolds(
    tmp_path: Path,
) -> None:
    """A host that sizes the frame from the view's reports shows all of it: the size is told
    again when the plot has decoded and when a traceback unfolds (a long one is folded to its
    error line) or folds again."""
    from playwright.async_api import async_playwright

    root = tmp_path / "root"
    write_notebook(root / "a.ipynb", notebook(PLOT, FOLD))
    result = await _run_with_view(root)
    async with async_playwright() as pw:
        browser = await _chromium(pw)
        try:
            page = await browser.new_page(viewport={"width": 880, "height": 1400})
            await page.set_content(_host_page(await _view_page(root), result, sized=True))
            frame = page.frame_locator("#view")
            view = _view_frame(page)
            await frame.locator(".out.image img").wait_for(timeout=30_000)

            async def shown_whole() -> bool:
                done = await view.evaluate(
                    """() => [...document.images].every((i) => i.complete && i.naturalWidth)
                      && Math.ceil(document.body.getBoundingClientRect().height) <= innerHeight"""
                )
                return bool(done)

            await wait_for(shown_whole, seconds=30)
            error = frame.locator(".out.error")
            summary = error.locator("summary")
            assert "KeyError: 'missing'" in (await summary.text_content() or "")
            assert not await error.locator("details").evaluate("(d) => d.open")
            folded = await page.evaluate("window.size.height")
            await summary.click()
            await wait_for(shown_whole, seconds=30)
            assert await page.evaluate("window.size.height") > folded
            last = error.locator("pre")
            assert "KeyError" in (await last.text_content() or "").splitlines()[-1]
            bottom = await last.evaluate("(p) => p.getBoundingClientRect().bottom")
            assert bottom <= await view.evaluate("innerHeight")
            # The view updates (the host hands the result over again): still unfolded.
            await page.evaluate("window.resend()")
            await wait_for(shown_whole, seconds=30)
            assert await error.locator("details").evaluate("(d) => d.open")
            await summary.click()
            await wait_for(shown_whole, seconds=30)

            async def folded_again() -> bool:
                return bool(await page.evaluate("window.size.height") == folded)

            await wait_for(folded_again, seconds=30)
        finally:
            await browser.close()


async def test_a_finished_cell_keeps_its_count_while_the_run_goes_on(tmp_path: Path) -> None:
    """A cell that finished shows its count at once, not ``[ ]:`` until the run's next periodic
    save writes it to the notebook (the view hears it from the run itself)."""
    from playwright.async_api import async_playwright

    root = tmp_path / "root"
    go = [tmp_path / "go0", tmp_path / "go1"]
    cells = tuple(
        "import pathlib, time\n"
        f"while not pathlib.Path({str(g)!r}).exists():\n    time.sleep(0.05)\n"
        f"print('part {k}')"
        for k, g in enumerate(go)
    )
    path = root / "run.ipynb"
    write_notebook(path, notebook(*cells))
    arguments = {"path": "run.ipynb", "cells": [":"], "wait": PATIENCE}
    async with Client(_server(root), extensions=[AppsSupport()]) as client:
        (page_data,) = (await client.read_resource(VIEW_URI)).contents
        assert isinstance(page_data, TextResourceContents)

        async def call_tool(raw: str) -> str:
            params = json.loads(raw)
            polled = await client.call_tool(params["name"], params.get("arguments") or {})
            return json.dumps(_wire(polled))

        async def run() -> None:
            done = await client.call_tool("execute", arguments)
            assert not done.is_error, text_of(done)

        async with async_playwright() as pw:
            browser = await _chromium(pw)
            try:
                page = await browser.new_page(viewport={"width": 880, "height": 620})
                await page.expose_function("callTool", call_tool)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    await page.set_content(_live_host_page(page_data.text, arguments))
                    frame = page.frame_locator("#view")
                    first = frame.locator('section.cell[data-id="c0"] .prompt')
                    await frame.locator("section.cell.running").first.wait_for(
                        timeout=PATIENCE * 1000
                    )
                    # Every prompt the first cell shows from now on.
                    await _view_frame(page).evaluate(
                        """() => { window.seen = [];
                          const note = () => { const p = document.querySelector(
                            'section.cell[data-id="c0"] .prompt'); if (p) seen.push(p.textContent); };
                          note(); new MutationObserver(note).observe(document.getElementById('cells'),
                            {childList: true, subtree: true, characterData: true}); }"""
                    )
                    assert await first.text_content() == "[*]:"
                    # A periodic save while the first cell runs writes it as running (no count);
                    # it ends just after, and the second cell runs until the test lets it go.
                    saved = path.stat().st_mtime_ns

                    def rewritten() -> bool:
                        return path.stat().st_mtime_ns != saved

                    await wait_for(rewritten, seconds=30, interval=0.02)
                    go[0].write_text("go")
                    second = frame.locator('section.cell.running[data-id="c1"]')
                    await second.wait_for(timeout=PATIENCE * 1000)
                    # Two polls more (the view polls each second): the next save is still ahead.
                    polls = await page.evaluate("window.calls.length")

                    async def polled_twice() -> bool:
                        return bool(await page.evaluate("window.calls.length") >= polls + 2)

                    await wait_for(polled_twice, seconds=30)
                    shown = await first.text_content()
                    go[1].write_text("go")
                seen = await _view_frame(page).evaluate("window.seen")
            finally:
                await browser.close()
    assert shown == "[1]:"
    assert set(seen) <= {"[*]:", "[1]:"}, seen
