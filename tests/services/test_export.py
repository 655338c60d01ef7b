"""export_notebook: every format opened or parsed, with and without outputs, inline and saved."""

from __future__ import annotations

import base64
import io
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import anyio
import nbformat
import pytest
from mcp import Client
from mcp_types import BlobResourceContents, EmbeddedResource

from tests.helpers import call, call_error
from tests.services.sample import png

pytestmark = pytest.mark.anyio


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.images: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.extend(v or "" for k, v in attrs if k == "src")


async def test_ipynb_and_json_are_valid_notebooks_with_or_without_outputs(client: Client) -> None:
    full = await call(client, "export_notebook", path="report.ipynb", format="ipynb")
    nb = nbformat.reads(full["content"], as_version=4)
    nbformat.validate(nb)
    assert [c.id for c in nb.cells] == ["m0", "c1", "c2", "c3"]
    assert nb.cells[1].outputs[0].text == "total is 42\n"
    bare = await call(client, "export_notebook", path="report.ipynb", format="json", outputs=False)
    assert bare["mime"] == "application/json"
    nb = nbformat.reads(bare["content"], as_version=4)
    assert all(c.get("outputs") == [] for c in nb.cells if c.cell_type == "code")
    assert nb.cells[1].source == "total = 6 * 7\nprint('total is', total)"


async def test_markdown_has_sources_outputs_and_links_images_to_resources(client: Client) -> None:
    md = (await call(client, "export_notebook", path="report.ipynb", format="markdown"))["content"]
    assert "# Quarterly report" in md
    assert "print('total is', total)" in md
    assert "total is 42" in md
    assert "<td>alpha</td>" in md
    assert "![png](nbrelay://notebook/report.ipynb/cells/c2/outputs/0.png)" in md
    image = await client.read_resource("nbrelay://notebook/report.ipynb/cells/c2/outputs/0.png")
    blob = image.contents[0]
    assert isinstance(blob, BlobResourceContents)
    assert base64.b64decode(blob.blob) == png()
    bare = await call(
        client, "export_notebook", path="report.ipynb", format="markdown", outputs=False
    )
    assert "total is 42" not in bare["content"]
    assert "print('total is', total)" in bare["content"]


async def test_an_old_notebook_without_language_info_gets_fenced_code(
    client: Client, served: Path
) -> None:
    # As nbconvert's own tests/files/notebook2.ipynb: nbformat 4.0, no metadata but a signature.
    old = {
        "nbformat": 4,
        "nbformat_minor": 0,
        "metadata": {"signature": "sha256:9fffd84e"},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Old"]},
            {
                "cell_type": "code",
                "metadata": {"collapsed": False},
                "execution_count": 1,
                "source": ["x = 1"],
                "outputs": [],
            },
        ],
    }
    (served / "old.ipynb").write_text(json.dumps(old), encoding="utf-8")
    md = (await call(client, "export_notebook", path="old.ipynb", format="markdown"))["content"]
    assert "```python\nx = 1\n```" in md
    assert json.loads((served / "old.ipynb").read_text(encoding="utf-8")) == old  # unchanged


async def test_html_shows_the_outputs(client: Client) -> None:
    done = await call(
        client, "export_notebook", path="report.ipynb", format="html", max_chars=2_000_000
    )
    parser = _Text()
    parser.feed(done["content"])
    text = "".join(parser.text)
    assert "total is 42" in text
    assert "alpha" in text
    assert "Quarterly report" in text
    assert any(src.startswith("data:image/png;base64,") for src in parser.images)


async def test_scripts_run_and_keep_markdown_as_comments(client: Client, tmp_path: Path) -> None:
    for fmt in ("script", "percent"):
        done = await call(client, "export_notebook", path="report.ipynb", format=fmt)
        assert "no outputs" in done["note"]
        source = done["content"].replace("plot()", "pass").replace("\ntable\n", "\npass\n")
        script = tmp_path / f"{fmt}.py"
        script.write_text(source)
        with anyio.fail_after(60):
            ran = await anyio.run_process([sys.executable, str(script)], check=False)
        assert ran.returncode == 0, ran.stderr.decode()
        assert ran.stdout.decode() == "total is 42\n"
        assert "# # Quarterly report" in source
    percent = await call(client, "export_notebook", path="report.ipynb", format="percent")
    assert percent["content"].count("# %%") == 4


async def test_myst_parses_back_with_jupytext(client: Client) -> None:
    import jupytext

    text = (await call(client, "export_notebook", path="report.ipynb", format="myst"))["content"]
    nb = jupytext.reads(text, fmt="md:myst")
    assert [c.source for c in nb.cells][:2] == [
        "# Quarterly report\nRevenue grew.",
        "total = 6 * 7\nprint('total is', total)",
    ]


async def test_pdf_is_rendered_with_pages_and_the_cell_text(client: Client) -> None:
    from pypdf import PdfReader

    result = await client.call_tool("export_notebook", {"path": "report.ipynb", "format": "pdf"})
    assert not result.is_error
    data = result.structured_content
    assert data is not None
    assert data["resource"] == "nbrelay://notebook/report.ipynb/export.pdf"
    embedded = [b for b in result.content if isinstance(b, EmbeddedResource)]
    assert len(embedded) == 1
    blob = embedded[0].resource
    assert isinstance(blob, BlobResourceContents)
    assert blob.mime_type == "application/pdf"
    pdf = base64.b64decode(blob.blob)
    assert len(pdf) == data["bytes"]
    reader = PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) >= 1
    text = " ".join(page.extract_text() for page in reader.pages)
    for expected in ("Quarterly report", "print('total is', total)", "total is 42", "alpha"):
        assert expected in text, f"{expected!r} missing from the PDF text: {text[:500]}"


async def test_saving_writes_next_to_the_notebook_and_never_over_a_file(
    client: Client, served: Path
) -> None:
    done = await call(client, "export_notebook", path="report.ipynb", format="markdown", save=True)
    assert done["saved"] == ["report.md", "report_files/report_2_0.png"]
    assert "content" not in done
    assert (served / "report_files" / "report_2_0.png").read_bytes() == png()
    md = (served / "report.md").read_text()
    assert "![png](report_files/report_2_0.png)" in md
    before = (served / "report.md").read_bytes()
    error = await call_error(
        client, "export_notebook", path="report.ipynb", format="markdown", save=True
    )
    assert "'report.md' already exists" in error
    assert "overwrite=true" in error
    assert (served / "report.md").read_bytes() == before
    again = await call(
        client,
        "export_notebook",
        path="report.ipynb",
        format="markdown",
        save=True,
        outputs=False,
        overwrite=True,
    )
    assert again["saved"] == ["report.md"]
    assert "total is 42" not in (served / "report.md").read_text()


async def test_saving_a_pdf_and_an_ipynb_copy(client: Client, served: Path) -> None:
    pdf = await call(client, "export_notebook", path="report.ipynb", format="pdf", to="out/r.pdf")
    assert pdf["saved"] == ["out/r.pdf"]
    assert (served / "out" / "r.pdf").read_bytes().startswith(b"%PDF")
    copy = await call(
        client,
        "export_notebook",
        path="report.ipynb",
        format="ipynb",
        to="clean.ipynb",
        outputs=False,
    )
    assert copy["saved"] == ["clean.ipynb"]
    read = await call(client, "read_notebook", path="clean.ipynb", full=True)
    assert [c["id"] for c in read["cells"]] == ["m0", "c1", "c2", "c3"]
    assert all("outputs" not in c for c in read["cells"])


@pytest.mark.parametrize(
    "target",
    [
        "../escape.md",
        "/etc/escape.md",
        ".hidden/x.md",
        "a/../../x.md",
        "file:///tmp/x.md",
        "x.html",
    ],
)
async def test_targets_outside_the_root_or_of_the_wrong_kind_are_refused(
    client: Client, served: Path, target: str
) -> None:
    before = sorted(p.name for p in served.parent.rglob("*"))
    error = await call_error(
        client, "export_notebook", path="report.ipynb", format="markdown", to=target
    )
    assert any(
        word in error
        for word in ("outside the root", "contains '..'", "hidden", "URL", "does not end in .md")
    ), error
    assert sorted(p.name for p in served.parent.rglob("*")) == before


async def test_large_text_is_refused_inline_with_the_way_out(client: Client) -> None:
    error = await call_error(
        client, "export_notebook", path="report.ipynb", format="html", max_chars=1000
    )
    assert "over max_chars=1,000" in error
    assert "save=true" in error


async def test_unknown_notebook_and_format(client: Client) -> None:
    assert "does not exist" in await call_error(client, "export_notebook", path="nope.ipynb")
    error = await call_error(client, "export_notebook", path="report.ipynb", format="docx")
    assert "docx" in error


async def test_pdf_without_a_browser_is_a_clear_error(served: Path, tmp_path: Path) -> None:
    from nbrelay.config import Settings
    from nbrelay.server import build_server

    settings = Settings(root=served, lock_dir=tmp_path / "locks", browser=tmp_path / "no-chromium")
    async with Client(build_server(settings)) as c:
        error = await call_error(c, "export_notebook", path="report.ipynb", format="pdf")
    assert "is not an executable file" in error
    assert "--browser" in error
