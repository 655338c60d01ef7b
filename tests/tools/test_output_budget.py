"""Huge outputs through the canonical read tools: every result stays within the output budget
unless the agent asks for more, every output says what it holds (type, formats, sizes) even when
its text is not shown, and a read does work bounded by what it shows, not by the output's size.

The outputs have the shapes found in notebooks people share: a plotly page (jupytext's "World
population" demo stores ``plotly.offline.init_notebook_mode()`` as 2.9 MB of ``text/html`` and
``text/vnd.plotly.v1+html`` that hold only a script, which read_cell showed as empty text and
read_output returned whole: 3,117,689 characters), a figure's JSON beside its HTML, 3 M printed
characters (read_output returned 1,000,210), and an image.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ImageContent

from nbrelay.config import Settings
from nbrelay.notebook import output_text, render
from nbrelay.notebook.model import new_notebook
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, call_error, code, counter_ids, text_of, write_notebook

pytestmark = pytest.mark.anyio

BUDGET = 6000  # the default --output-budget
PLOTLY_JS = "window.PlotlyConfig = {MathJaxConfig: 'local'};\n" + "!function(t){var e={};" * 120_000
PAGE = f'<script type="text/javascript">{PLOTLY_JS}</script>'
PRINTED = "".join(f"line {i:07d} " + "x" * 88 + "\n" for i in range(30_000))  # 3 M characters


def _png(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (30, 90, 200)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def figure(points: int) -> dict[str, Any]:
    return {
        "data": [
            {"type": "scatter", "x": list(range(points)), "y": [i * i for i in range(points)]}
        ],
        "layout": {"title": "World population"},
    }


def huge_notebook() -> Any:
    cells = [
        code(
            "offline.init_notebook_mode()",
            "plotly",
            [_rich({"text/html": PAGE, "text/vnd.plotly.v1+html": PAGE})],
        ),
        code(
            "offline.iplot(fig)",
            "figure",
            [
                _rich(
                    {
                        "application/vnd.plotly.v1+json": figure(40_000),
                        "text/html": '<div class="plotly-graph-div"></div><script>Plotly.newPlot()</script>',
                    }
                )
            ],
        ),
        code(
            "print(big)", "printed", [{"output_type": "stream", "name": "stdout", "text": PRINTED}]
        ),
        code(
            "plt.show()", "plot", [_rich({"image/png": _png(3000, 1000), "text/plain": "<Figure>"})]
        ),
        code("1 + 1", "small", [_rich({"text/plain": "2"}, result=True)]),
    ]
    return new_notebook(cells)


def _rich(data: dict[str, Any], *, result: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"output_type": "display_data", "data": data, "metadata": {}}
    if result:
        out.update(output_type="execute_result", execution_count=1)
    return out


def chars(result: Any) -> int:
    return len(text_of(result))


async def test_reads_stay_within_the_budget_and_describe_every_output(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", huge_notebook())
    cells = (await call(client, "read_notebook", path="nb.ipynb", full=True))["cells"]
    outputs = [c["outputs"][0] for c in cells]
    assert sum(len(o["text"]) for o in outputs) <= BUDGET + 2 * render.HEAD
    plotly, fig, printed, plot, small = outputs
    # The plotly page has no text to read: it says so, with its formats and their sizes.
    assert plotly["mimes"] == {"text/html": len(PAGE), "text/vnd.plotly.v1+html": len(PAGE)}
    assert plotly["text"].startswith("[no text to read: text/html (")
    assert fig["mimes"]["application/vnd.plotly.v1+json"] == len(json.dumps(figure(40_000)))
    assert (printed["type"], printed["size"]) == ("stream", len(PRINTED))
    marker = re.search(r"\n… \[([\d,]+) characters cut; [^\]]*\] …\n", printed["text"])
    assert marker is not None
    assert int(marker[1].replace(",", "")) == printed["cut"]
    assert len(PRINTED) - printed["cut"] == len(printed["text"]) - len(marker[0])
    assert plot["mimes"]["image/png"] > 0
    assert plot["image"] == "image/png"
    assert small == {"output": 0, "type": "execute_result", "text": "2"}  # shown whole
    for ref in ("plotly", "figure", "printed"):
        one = await client.call_tool("read_cell", {"path": "nb.ipynb", "cell": ref})
        assert chars(one) < BUDGET + 2000, ref


async def test_read_output_returns_a_slice_and_says_how_to_read_the_next(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", huge_notebook())
    first = await call(client, "read_output", path="nb.ipynb", cell="printed")
    assert (first["total"], first["offset"], first["next_offset"]) == (len(PRINTED), 0, BUDGET)
    assert first["text"] == PRINTED[:BUDGET]
    assert 'read_output(path="nb.ipynb", cell="printed", output=0, offset=6000)' in first[
        "note"
    ].replace("'", '"')
    # Paging by next_offset reads the stored text, slice after slice.
    got, offset = first["text"], first["next_offset"]
    for _ in range(3):
        page = await call(client, "read_output", path="nb.ipynb", cell="printed", offset=offset)
        got += page["text"]
        offset = page["next_offset"]
    assert got == PRINTED[:offset]
    # Asking for more gets more; the last slice has no next_offset and no note.
    last = await call(
        client,
        "read_output",
        path="nb.ipynb",
        cell="printed",
        offset=len(PRINTED) - 50_000,
        length=100_000,
    )
    assert last["text"] == PRINTED[-50_000:]
    assert "next_offset" not in last
    assert "note" not in last
    # The plotly page: the default format is its HTML, a slice of it.
    html = await client.call_tool("read_output", {"path": "nb.ipynb", "cell": "plotly"})
    assert chars(html) < BUDGET + 1000
    # Any format of a rich output: the figure's JSON, sliced without encoding all of it.
    data = await call(
        client, "read_output", path="nb.ipynb", cell="figure", mime="application/vnd.plotly.v1+json"
    )
    whole = json.dumps(figure(40_000), sort_keys=True)
    assert (data["text"], data["total"]) == (whole[:BUDGET], len(whole))
    error = await call_error(client, "read_output", path="nb.ipynb", cell="figure", mime="text/csv")
    assert "has no 'text/csv' data" in error
    assert "application/vnd.plotly.v1+json" in error
    # Images stay images, downscaled.
    shown = await client.call_tool("read_output", {"path": "nb.ipynb", "cell": "plot"})
    assert isinstance(shown.content[1], ImageContent)
    assert len(text_of(shown)) < 1000


Counter = dict[str, int]


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Characters the text conversions of outputs handle (ANSI codes, progress bars, HTML), and
    JSON encoded, wherever they are called from."""
    counted: Counter = {"text": 0, "json": 0}

    def counting(
        fn: Callable[..., Any], key: str, measure: Callable[..., int]
    ) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            counted[key] += measure(args, result)
            return result

        return wrapper

    by_input = lambda args, _result: len(args[0])  # noqa: E731
    by_output = lambda _args, result: len(result)  # noqa: E731
    for name, key, measure in [
        ("strip_ansi", "text", by_input),
        ("collapse_cr", "text", by_input),
        ("html_to_text", "text", by_input),
        ("json_text", "json", by_output),
        ("json_head", "json", by_output),
    ]:
        fn = getattr(output_text, name, None)
        if fn is None:
            continue
        monkeypatch.setattr(output_text, name, counting(fn, key, measure))
        monkeypatch.setattr(render, name, counting(fn, key, measure), raising=False)
    return counted


@pytest.mark.parametrize("store_mode", ["files"])  # the work counted is the tools' own
async def test_reads_of_a_huge_output_work_on_what_they_show(
    root: Path, tmp_path: Path, work: Counter
) -> None:
    """Four reads of a notebook with one 50 MB cell took over 30 s (a 50 MB HTML table: minutes):
    each converted the whole output. Now each read converts about what it can show; JSON data is
    encoded once to learn its size, then only as far as a slice reaches."""
    size = 5_000_000
    line = "\x1b[31mred\x1b[0m 0123456789 abcdefghij klmnopqrst progress 10%\r50%\r99%\n"
    table = "<table>" + "<tr><td>a</td><td>b</td></tr>" * (size // 27) + "</table>"
    fig = figure(200_000)
    nb = new_notebook(
        [
            code(
                "print(log)",
                "log",
                [{"output_type": "stream", "name": "stdout", "text": line * (size // len(line))}],
            ),
            code("df", "table", [_rich({"text/html": table})]),
            code("fig", "fig", [_rich({"application/json": fig})]),
        ]
    )
    write_notebook(root / "nb.ipynb", nb)
    budget = 2000
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0, output_budget=budget)
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    reads: list[tuple[str, dict[str, Any]]] = [
        ("read_notebook", {"full": False}),
        ("read_notebook", {"full": True}),
    ]
    for cell in ("log", "table", "fig"):
        reads += [("read_cell", {"cell": cell}), ("read_output", {"cell": cell})]
    json_size = len(json.dumps(fig, ensure_ascii=False, sort_keys=True))
    async with Client(build_server(settings, ws)) as client:
        for _ in range(4):
            for tool, args in reads:
                work["text"] = 0
                result = await client.call_tool(tool, {"path": "nb.ipynb", **args})
                assert not result.is_error, text_of(result)
                assert chars(result) < 6 * budget, (tool, args)
                # Bounded by the budget (a few windows of it), whatever the output's size.
                assert work["text"] <= 40 * budget, (tool, args, work["text"])
    # The figure was encoded whole once (its size), then only in windows of the budget.
    assert work["json"] <= json_size + 4 * len(reads) * 10 * budget
