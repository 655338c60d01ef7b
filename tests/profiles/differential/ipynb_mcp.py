"""The ipynb-mcp sequence: its fixtures, its calls and the differences kept on purpose.

The original (Minhao-Zhang/ipynb-mcp, ``main.py``) takes paths as given, relative to its working
folder; it is recorded with the fixture folder as its working folder, so the same relative paths
name the same files for both servers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import (
    new_code_cell,
    new_markdown_cell,
    new_notebook,
    new_output,
    new_raw_cell,
)

from tests.profiles.differential.harness import Kept, Mask, Step, blank, notebook_facts

ORIGINAL = "Minhao-Zhang/ipynb-mcp@28d5fc4dea08c7b3b2a4974bd07b02808cc43adc"
# A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TABLE = (
    '<table border="1" class="dataframe">\n  <thead>\n    <tr style="text-align: right;">\n'
    "      <th></th>\n      <th>a</th>\n      <th>b</th>\n    </tr>\n  </thead>\n  <tbody>\n"
    + "".join(
        f"    <tr>\n      <th>{i}</th>\n      <td>{i}</td>\n      <td>{i * i}</td>\n    </tr>\n"
        for i in range(7)
    )
    + "  </tbody>\n</table>"
)
TRACEBACK = [
    "\x1b[0;31m-----------------------------------------------------------------------\x1b[0m",
    "\x1b[0;31mZeroDivisionError\x1b[0m                         Traceback (most recent call last)",
    "Cell \x1b[0;32mIn[5], line 1\x1b[0m\n\x1b[0;32m----> 1\x1b[0m \x1b[38;5;241m1\x1b[39m/\x1b[38;5;241m0\x1b[39m",
    "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",
]


def _demo() -> Any:
    cells = [
        new_markdown_cell("# Demo\n\nA notebook with one output of each kind."),
        new_code_cell(
            "print('hello')",
            execution_count=1,
            outputs=[new_output("stream", name="stdout", text="hello\n")],
        ),
        new_code_cell(
            "df",
            execution_count=2,
            outputs=[
                new_output(
                    "execute_result",
                    execution_count=2,
                    data={
                        "text/plain": "   a   b\n0  0   0\n1  1   1\n2  2   4",
                        "text/html": TABLE,
                    },
                )
            ],
        ),
        new_code_cell(
            "plot()",
            execution_count=3,
            outputs=[
                new_output(
                    "display_data",
                    data={"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"},
                )
            ],
        ),
        new_code_cell(
            "1/0",
            execution_count=4,
            outputs=[
                new_output(
                    "error",
                    ename="ZeroDivisionError",
                    evalue="division by zero",
                    traceback=TRACEBACK,
                )
            ],
        ),
        new_code_cell(
            "print('x' * 6000)",
            execution_count=5,
            outputs=[new_output("stream", name="stdout", text="x" * 6000 + "\n")],
        ),
        new_code_cell(
            "import sys; print('careful', file=sys.stderr)",
            execution_count=6,
            outputs=[new_output("stream", name="stderr", text="careful\n")],
        ),
        new_raw_cell("raw text, left as it is"),
        new_code_cell("x = 1"),
        new_code_cell(
            "show(data)",
            execution_count=7,
            outputs=[new_output("display_data", data={"application/json": {"a": 1, "b": [1, 2]}})],
        ),
        new_code_cell(
            "from IPython.display import HTML; HTML('<b>bold</b>')",
            execution_count=8,
            outputs=[
                new_output(
                    "execute_result",
                    execution_count=8,
                    data={
                        "text/html": "<b>bold</b>",
                        "text/plain": "<IPython.core.display.HTML object>",
                    },
                )
            ],
        ),
    ]
    return new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )


def _edit() -> Any:
    cells = [
        new_code_cell(
            "a = 1", execution_count=1, outputs=[new_output("stream", name="stdout", text="one\n")]
        ),
        new_markdown_cell("## Notes"),
        new_code_cell("b = a + 1"),
        new_code_cell("print(b)"),
    ]
    return new_notebook(cells=cells)


def _write(path: Path, nb: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")


def make_fixtures(folder: Path) -> Path:
    """Write the fixtures under ``folder``; the served root is ``folder/root`` (a notebook beside
    it, outside the root, is what a ``../`` path reaches). Returns the root."""
    root = folder / "root"
    _write(root / "demo.ipynb", _demo())
    _write(root / "edit.ipynb", _edit())
    _write(root / "empty.ipynb", new_notebook())
    _write(root / "blank.ipynb", new_notebook())
    (root / "notes.txt").write_text("not a notebook\n", encoding="utf-8")
    (root / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    _write(folder / "outside.ipynb", new_notebook(cells=[new_code_cell("secret = 42")]))
    return root


def _full(cell: Any, output: Any, hint: str | None = None) -> dict[str, Any]:
    args = {"filepath": "demo.ipynb", "cell_index": cell, "output_index": output}
    if hint is not None:
        args["type_hint"] = hint
    return args


STEPS = [
    Step("read demo", "get_formatted_content", {"filepath": "demo.ipynb"}),
    Step("read empty notebook", "get_formatted_content", {"filepath": "empty.ipynb"}),
    Step("read missing file", "get_formatted_content", {"filepath": "missing.ipynb"}, True),
    Step("read a text file", "get_formatted_content", {"filepath": "notes.txt"}, True),
    Step("read broken JSON", "get_formatted_content", {"filepath": "broken.ipynb"}, True),
    Step("stream output", "get_full_output", _full(2, 1)),
    Step("table output, no hint", "get_full_output", _full(3, 1)),
    Step("table output as table", "get_full_output", _full(3, 1, "table")),
    Step("table output as text", "get_full_output", _full(3, 1, "text")),
    Step("table output as image (absent)", "get_full_output", _full(3, 1, "image")),
    Step("image output, no hint", "get_full_output", _full(4, 1)),
    Step("image output as image", "get_full_output", _full(4, 1, "image")),
    Step("error output", "get_full_output", _full(5, 1)),
    Step("long stream output", "get_full_output", _full(6, 1)),
    Step("stderr output", "get_full_output", _full(7, 1)),
    Step("JSON-only output", "get_full_output", _full(10, 1)),
    Step("HTML output, no hint", "get_full_output", _full(11, 1)),
    Step("output of a markdown cell", "get_full_output", _full(1, 1), True),
    Step("output of a cell without outputs", "get_full_output", _full(9, 1), True),
    Step("output of a raw cell", "get_full_output", _full(8, 1), True),
    Step("cell out of range", "get_full_output", _full(99, 1), True),
    Step("output out of range", "get_full_output", _full(2, 5), True),
    Step("cell index 0", "get_full_output", _full(0, 1), True),
    Step("output index 0", "get_full_output", _full(2, 0), True),
    Step("unknown type_hint", "get_full_output", _full(2, 1, "video"), True),
    Step("cell index of the wrong type", "get_full_output", _full("two", 1), True),
    Step(
        "output of an empty notebook",
        "get_full_output",
        {"filepath": "empty.ipynb", "cell_index": 1, "output_index": 1},
        True,
    ),
    Step(
        "output of a missing file",
        "get_full_output",
        {"filepath": "missing.ipynb", "cell_index": 1, "output_index": 1},
        True,
    ),
    Step(
        "edit a code cell",
        "edit_cell",
        {"filepath": "edit.ipynb", "cell_index": 1, "new_source_content": "a = 2"},
    ),
    Step(
        "edit a markdown cell",
        "edit_cell",
        {"filepath": "edit.ipynb", "cell_index": 2, "new_source_content": "## Notes, edited"},
    ),
    Step(
        "edit out of range",
        "edit_cell",
        {"filepath": "edit.ipynb", "cell_index": 9, "new_source_content": "x"},
        True,
    ),
    Step(
        "edit cell 0",
        "edit_cell",
        {"filepath": "edit.ipynb", "cell_index": 0, "new_source_content": "x"},
        True,
    ),
    Step(
        "edit a missing file",
        "edit_cell",
        {"filepath": "missing.ipynb", "cell_index": 1, "new_source_content": "x"},
        True,
    ),
    Step(
        "edit an empty notebook",
        "edit_cell",
        {"filepath": "empty.ipynb", "cell_index": 1, "new_source_content": "x"},
        True,
    ),
    Step(
        "add a markdown cell",
        "add_cell",
        {
            "filepath": "edit.ipynb",
            "cell_index": 2,
            "cell_type": "markdown",
            "source_content": "Inserted.",
        },
    ),
    Step(
        "add a code cell at the end",
        "add_cell",
        {"filepath": "edit.ipynb", "cell_index": 6, "cell_type": "code", "source_content": "c = 3"},
    ),
    Step(
        "add past the end",
        "add_cell",
        {
            "filepath": "edit.ipynb",
            "cell_index": 10,
            "cell_type": "code",
            "source_content": "d = 4",
        },
        True,
    ),
    Step(
        "add at index 0",
        "add_cell",
        {"filepath": "edit.ipynb", "cell_index": 0, "cell_type": "code", "source_content": "e = 5"},
        True,
    ),
    Step(
        "add a raw cell",
        "add_cell",
        {"filepath": "edit.ipynb", "cell_index": 1, "cell_type": "raw", "source_content": "raw"},
        True,
    ),
    Step(
        "add to an empty notebook",
        "add_cell",
        {
            "filepath": "blank.ipynb",
            "cell_index": 1,
            "cell_type": "code",
            "source_content": "first = True",
        },
    ),
    Step(
        "add to a missing file",
        "add_cell",
        {"filepath": "missing.ipynb", "cell_index": 1, "cell_type": "code", "source_content": "x"},
        True,
    ),
    Step("delete a cell", "delete_cell", {"filepath": "edit.ipynb", "cell_index": 4}),
    Step("delete out of range", "delete_cell", {"filepath": "edit.ipynb", "cell_index": 99}, True),
    Step(
        "delete from an empty notebook",
        "delete_cell",
        {"filepath": "empty.ipynb", "cell_index": 1},
        True,
    ),
    Step(
        "merge code and markdown",
        "merge_cells",
        {"filepath": "edit.ipynb", "cell_index1": 1, "cell_index2": 2},
    ),
    Step(
        "merge cells not consecutive",
        "merge_cells",
        {"filepath": "edit.ipynb", "cell_index1": 1, "cell_index2": 3},
        True,
    ),
    Step(
        "merge out of range",
        "merge_cells",
        {"filepath": "edit.ipynb", "cell_index1": 4, "cell_index2": 5},
        True,
    ),
    Step(
        "merge two code cells",
        "merge_cells",
        {"filepath": "edit.ipynb", "cell_index1": 3, "cell_index2": 4},
    ),
    Step("read the edited notebook", "get_formatted_content", {"filepath": "edit.ipynb"}),
    Step("read the notebook added to", "get_formatted_content", {"filepath": "blank.ipynb"}),
    Step("read outside the root", "get_formatted_content", {"filepath": "../outside.ipynb"}, True),
    Step(
        "edit outside the root",
        "edit_cell",
        {"filepath": "../outside.ipynb", "cell_index": 1, "new_source_content": "secret = 0"},
        True,
    ),
]

MASK = Mask(messages=frozenset({"error"}))

# Steps where nbrelay keeps its own behaviour, with the reason (the README's ipynb-mcp section
# says the same, with the original's behaviour beside it).
ACCEPTED: dict[str, str | Kept] = {
    "read demo": Kept(
        "a table's summary rows: the original leaves out each row's header cells (<th> in the"
        " body: a DataFrame's index), so its rows have a column fewer than its header; nbrelay"
        " keeps them ('| 0 | 0 | 0 |' where the original writes '| 0 | 0 |')",
        only=blank(r"^\| \d+ \| .*\|$"),
    ),
    "read outside the root": "the original reads any file the process can (here ../outside.ipynb);"
    " nbrelay keeps every path under the root and answers with the error field",
    "edit outside the root": "the original rewrites any notebook the process can; nbrelay keeps"
    " every path under the root and answers with the error field",
}
LIVE = False


def files_after(root: Path, mask: Mask) -> dict[str, Any]:
    """The notebooks the sequence changed, as they are on disk after it."""
    return {name: notebook_facts(root / name) for name in ("edit.ipynb", "blank.ipynb")}


NBRELAY: dict[str, Any] = {}
