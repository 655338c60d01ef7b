"""import_notebook: every input format, clear errors that create nothing, and round trips."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from mcp import Client

from tests.helpers import call, call_error

pytestmark = pytest.mark.anyio

PERCENT = "# %% [markdown]\n# # Loading\n\n# %%\nimport math\nx = math.pi\n\n# %%\nprint(x)\n"
LIGHT = "# # Loading\n\nimport math\nx = math.pi\n\nprint(x)\n"
MARKDOWN = "# Loading\n\nSome words.\n\n```python\nimport math\nx = math.pi\n```\n\nThe end.\n"
MYST = (
    "---\nkernelspec:\n  name: python3\n  display_name: Python 3\n  language: python\n---\n\n"
    "# Loading\n\n```{code-cell}\nimport math\nx = math.pi\n```\n"
)


async def sources(client: Client, path: str) -> list[tuple[str, str]]:
    view = await call(client, "read_notebook", path=path, full=True)
    return [(c["type"], c["source"]) for c in view["cells"]]


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        (
            "percent",
            PERCENT,
            [("markdown", "# Loading"), ("code", "import math\nx = math.pi"), ("code", "print(x)")],
        ),
        (
            "light",
            LIGHT,
            [("markdown", "# Loading"), ("code", "import math\nx = math.pi"), ("code", "print(x)")],
        ),
        (
            "markdown",
            MARKDOWN,
            [
                ("markdown", "# Loading\n\nSome words."),
                ("code", "import math\nx = math.pi"),
                ("markdown", "The end."),
            ],
        ),
        ("myst", MYST, [("markdown", "# Loading"), ("code", "import math\nx = math.pi")]),
    ],
)
async def test_text_formats_become_notebooks(
    client: Client, served: Path, fmt: str, text: str, expected: list[tuple[str, str]]
) -> None:
    for given in (fmt, "auto"):
        target = f"{fmt}-{given}.ipynb"
        done = await call(client, "import_notebook", path=target, content=text, format=given)
        assert len(done["changed"]) == len(expected)
        assert await sources(client, target) == expected
        nb = nbformat.read(served / target, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        assert "jupytext" not in nb.metadata


async def test_ipynb_json_and_an_old_nbformat_3_notebook(client: Client) -> None:
    v4 = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1", id="keep-me")])
    await call(client, "import_notebook", path="v4.ipynb", content=nbformat.writes(v4))
    view = await call(client, "read_notebook", path="v4.ipynb")
    assert [c["id"] for c in view["cells"]] == ["keep-me"]
    as_object = json.loads(nbformat.writes(v4))
    await call(client, "import_notebook", path="object.ipynb", content=as_object)
    assert await sources(client, "object.ipynb") == [("code", "a = 1")]
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {},
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "code", "input": "b = 2", "outputs": [], "language": "python"}
                ]
            }
        ],
    }
    await call(client, "import_notebook", path="v3.ipynb", content=json.dumps(v3), format="json")
    assert await sources(client, "v3.ipynb") == [("code", "b = 2")]


async def test_import_from_a_file_under_the_root(client: Client, served: Path) -> None:
    (served / "scripts").mkdir()
    (served / "scripts" / "analysis.py").write_text(PERCENT)
    await call(client, "import_notebook", path="analysis.ipynb", source="scripts/analysis.py")
    assert await sources(client, "analysis.ipynb") == [
        ("markdown", "# Loading"),
        ("code", "import math\nx = math.pi"),
        ("code", "print(x)"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"content": "{not json"}, "is not valid JSON: Expecting property name"),
        ({"content": "   \n"}, "the content to import is empty"),
        ({"content": '{"nbformat": 4, "cells": "nope"}'}, "has no 'cells' list"),
        ({"content": "42", "format": "ipynb"}, "is not a notebook"),
        ({"content": "x", "source": "a.py"}, "give either content"),
        ({}, "give either content"),
        ({"source": "../outside.py"}, "contains '..'"),
        ({"source": "/etc/passwd"}, "outside the root"),
        ({"source": "missing.md"}, "does not exist"),
        ({"content": "x = 1", "format": "docx"}, "docx"),
    ],
)
async def test_bad_input_is_a_clear_error_and_creates_nothing(
    client: Client, served: Path, args: dict[str, str], message: str
) -> None:
    before = sorted(p.name for p in served.parent.rglob("*"))
    error = await call_error(client, "import_notebook", path="new.ipynb", **args)
    assert message in error
    assert sorted(p.name for p in served.parent.rglob("*")) == before


async def test_an_existing_notebook_is_replaced_only_when_asked(
    client: Client, served: Path
) -> None:
    original = (served / "report.ipynb").read_bytes()
    error = await call_error(client, "import_notebook", path="report.ipynb", content=PERCENT)
    assert "already exists" in error
    assert (served / "report.ipynb").read_bytes() == original
    await call(client, "import_notebook", path="report.ipynb", content=PERCENT, overwrite=True)
    assert (await sources(client, "report.ipynb"))[2] == ("code", "print(x)")


@pytest.mark.parametrize(("fmt", "text"), [("percent", PERCENT), ("myst", MYST), ("light", LIGHT)])
async def test_import_then_export_keeps_the_sources(client: Client, fmt: str, text: str) -> None:
    await call(client, "import_notebook", path="round.ipynb", content=text, format=fmt)
    first = await sources(client, "round.ipynb")
    out_fmt = "script" if fmt == "light" else fmt
    exported = await call(client, "export_notebook", path="round.ipynb", format=out_fmt)
    await call(
        client, "import_notebook", path="again.ipynb", content=exported["content"], format=fmt
    )
    assert await sources(client, "again.ipynb") == first


async def test_ipynb_and_markdown_round_trips_keep_the_sources(client: Client) -> None:
    original = await sources(client, "report.ipynb")
    exported = await call(client, "export_notebook", path="report.ipynb", format="ipynb")
    await call(client, "import_notebook", path="copy.ipynb", content=exported["content"])
    assert await sources(client, "copy.ipynb") == original
    md = await call(
        client, "export_notebook", path="report.ipynb", format="markdown", outputs=False
    )
    await call(client, "import_notebook", path="md.ipynb", content=md["content"], format="markdown")
    back = await sources(client, "md.ipynb")
    assert [s for t, s in back if t == "code"] == [s for t, s in original if t == "code"]
