"""An inline export that would pass ``max_chars`` is refused before anything is converted: the
check is a lower bound on the export's length, so it never refuses an export that fits, and it
costs a pass over the cells instead of a conversion.

Before the fix the whole notebook was converted first (254 s and 6.6 GB for a million cells),
then refused.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import anyio
import pytest
from mcp import Client

from nbrelay import formats
from nbrelay.config import Settings
from nbrelay.notebook.model import Notebook
from nbrelay.server import build_server
from tests.helpers import call, code, markdown, write_notebook
from tests.services.sample import PNG_B64, report

pytestmark = pytest.mark.anyio

TEXT_FORMATS = ["ipynb", "json", "markdown", "html", "script", "percent", "myst"]


def tricky() -> Notebook:
    """Text that converters shrink: rendered Markdown, unused link definitions, tabs, CRLF,
    magics, raw cells, whitespace-only cells, ANSI colours."""
    nb = report()
    nb.data["cells"] += [
        markdown("[ref]: http://example.com/a-very-long-link-definition\n\n**b** _i_ `c`", "m9"),
        markdown("\t\t\n\r\n   ", "m10"),
        code("%matplotlib inline\n!ls\n\tx = 1\r\n", "c11"),
        code(
            "",
            "c12",
            [{"output_type": "stream", "name": "stderr", "text": "\x1b[31mred\x1b[0m\r\nb\n"}],
        ),
        {"cell_type": "raw", "id": "r13", "metadata": {}, "source": "raw <b>text</b>"},
        code(
            "img",
            "c14",
            [{"output_type": "display_data", "data": {"image/png": PNG_B64}, "metadata": {}}],
        ),
    ]
    return nb


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
@pytest.mark.parametrize("outputs", [True, False])
async def test_the_bound_never_exceeds_the_real_export(fmt: str, outputs: bool) -> None:
    nb = tricky()
    done = await formats.export(nb, fmt, outputs=outputs)
    assert formats.min_chars(nb, fmt, outputs=outputs) <= len(done.data.decode("utf-8"))
    # …and exports that fit are still returned.
    await formats.export(nb, fmt, outputs=outputs, max_chars=len(done.data.decode("utf-8")))


async def test_an_oversized_export_is_refused_before_any_conversion(
    root: Path, tmp_path: Path
) -> None:
    cells = 20_000
    write_notebook(
        root / "big.ipynb",
        Notebook(
            {
                "cells": [code(f"x{i} = {i}", f"c{i}") for i in range(cells)],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ),
    )
    settings = Settings(root=root, lock_dir=tmp_path / "locks")
    async with Client(build_server(settings), mode="auto") as client:
        await call(client, "read_notebook", path="big.ipynb", limit=1)  # loaded and cached
        for fmt in ("markdown", "html", "percent", "ipynb"):
            tracemalloc.start()
            try:
                with anyio.fail_after(120):
                    result = await client.call_tool(
                        "export_notebook", {"path": "big.ipynb", "format": fmt}
                    )
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert result.is_error
            text = result.content[0].text  # type: ignore[union-attr]
            assert "would be at least" in text, text
            assert "max_chars=100,000" in text
            # A conversion copies the notebook and builds the whole export (tens of MB here);
            # the bound reads the cells where they are.
            assert peak < 2 * 2**20, f"{fmt}: {peak / 2**20:.1f} MB allocated"
