"""Make the corpus notebooks (run by hand; the files it writes are committed).

Code cells are run in a real Python kernel (nbclient), so outputs are what Jupyter produces: a
matplotlib figure, a traceback, a long stream, rich reprs. What a Python kernel cannot make here
(widget views, another language's kernel, old nbformat minors, attachments) is written as
nbformat stores it. Run: ``python tests/corpus/make_notebooks.py`` from the repository root.
"""

from __future__ import annotations

import base64
import copy
import io
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat import v4

HERE = Path(__file__).parent / "notebooks"


def _ids(nb: Any, prefix: str) -> None:
    for k, cell in enumerate(nb.cells):
        cell.id = f"{prefix}-{k}"


def _run(nb: Any) -> Any:
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return nb


def _write(name: str, nb: Any, *, minor: int | None = None) -> None:
    data = copy.deepcopy(nb)
    if minor is not None and minor < 5:  # before 4.5, cells had no ids
        data.nbformat_minor = minor
        for cell in data.cells:
            cell.pop("id", None)
    (HERE / name).write_text(nbformat.writes(data, version=4) + "\n", encoding="utf-8")


def analysis() -> Any:
    nb = v4.new_notebook(
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        }
    )
    nb.cells = [
        v4.new_markdown_cell("# Sales analysis\n\nA figure, a table and a summary."),
        v4.new_code_cell(
            "%matplotlib inline\nimport matplotlib.pyplot as plt\n"
            "xs = list(range(12))\nys = [x * x % 7 for x in xs]"
        ),
        v4.new_code_cell(
            "fig, ax = plt.subplots(figsize=(3, 2), dpi=40)\nax.plot(xs, ys)\n"
            "ax.set_title('monthly')\nplt.show()"
        ),
        v4.new_code_cell(
            "class Table:\n    def _repr_html_(self):\n"
            "        return '<table><tr><th>m</th><th>v</th></tr>' + ''.join(\n"
            "            f'<tr><td>{x}</td><td>{y}</td></tr>' for x, y in zip(xs, ys)) + '</table>'\n"
            "    def __repr__(self):\n        return f'Table({len(xs)} rows)'\nTable()"
        ),
        v4.new_code_cell("total = sum(ys)\nprint(f'total: {total}')\ntotal / len(ys)"),
    ]
    _ids(nb, "analysis")
    return _run(nb)


def errors() -> Any:
    nb = v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nb.cells = [
        v4.new_code_cell("def load(path):\n    with open(path) as f:\n        return f.read()"),
        v4.new_code_cell("load('missing.csv')"),
        v4.new_code_cell("import sys\nprint('to stderr', file=sys.stderr)\n1 / 0"),
        v4.new_code_cell("raise ValueError('bad \\x1b[31mred\\x1b[0m value')"),
    ]
    _ids(nb, "errors")
    return _run(nb)


def big_output() -> Any:
    nb = v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nb.cells = [
        v4.new_code_cell("for i in range(6000):\n    print(f'line {i:05d}', 'x' * 20)"),
        v4.new_code_cell(
            "import sys\nfor i in range(0, 101, 5):\n"
            "    sys.stdout.write(f'\\rprogress {i:3d}%')\nprint()"
        ),
        v4.new_code_cell("list(range(3000))"),
    ]
    _ids(nb, "big")
    return _run(nb)


def widgets() -> Any:
    """A widget view as JupyterLab saves it (widget state in the notebook metadata)."""
    model = "8a1c2b3d4e5f40718293a4b5c6d7e8f9"
    nb = v4.new_notebook(
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "widgets": {
                "application/vnd.jupyter.widget-state+json": {
                    "version_major": 2,
                    "version_minor": 0,
                    "state": {
                        model: {
                            "model_name": "IntSliderModel",
                            "model_module": "@jupyter-widgets/controls",
                            "model_module_version": "2.0.0",
                            "state": {"value": 3, "min": 0, "max": 10, "description": "n"},
                        }
                    },
                }
            },
        }
    )
    cell = v4.new_code_cell("import ipywidgets as w\nw.IntSlider(3, 0, 10, description='n')")
    cell.execution_count = 1
    cell.outputs = [
        v4.new_output(
            "display_data",
            data={
                "application/vnd.jupyter.widget-view+json": {
                    "model_id": model,
                    "version_major": 2,
                    "version_minor": 0,
                },
                "text/plain": "IntSlider(value=3, description='n', max=10)",
            },
        )
    ]
    nb.cells = [v4.new_markdown_cell("Pick **n**:"), cell]
    _ids(nb, "widgets")
    return nb


def typescript() -> Any:
    """A Deno (TypeScript) notebook as the Deno kernel saves it."""
    nb = v4.new_notebook(
        metadata={
            "kernelspec": {"name": "deno", "display_name": "Deno", "language": "typescript"},
            "language_info": {
                "name": "typescript",
                "file_extension": ".ts",
                "mimetype": "text/x.typescript",
                "codemirror_mode": "typescript",
                "nbconvert_exporter": "script",
                "pygments_lexer": "typescript",
                "version": "5.6.2",
            },
        }
    )
    first = v4.new_code_cell("const xs: number[] = [1, 2, 3];\nconsole.log(xs.map((x) => x * 2));")
    first.execution_count = 1
    first.outputs = [v4.new_output("stream", name="stdout", text="[ 2, 4, 6 ]\n")]
    second = v4.new_code_cell('JSON.parse("{oops")')
    second.execution_count = 2
    second.outputs = [
        v4.new_output(
            "error",
            ename="SyntaxError",
            evalue="Expected property name or '}' in JSON at position 1",
            traceback=[
                "Stack trace:",
                "SyntaxError: Expected property name or '}' in JSON at position 1",
                "    at JSON.parse (<anonymous>)",
                "    at <anonymous>:1:27",
            ],
        )
    ]
    nb.cells = [v4.new_markdown_cell("## TypeScript in Deno"), first, second]
    _ids(nb, "ts")
    return nb


def attachments() -> Any:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 40, 40)).save(buf, format="PNG")
    png = base64.b64encode(buf.getvalue()).decode("ascii")
    nb = v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    md = v4.new_markdown_cell(
        "The logo: ![logo](attachment:logo.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    )
    md.attachments = {"logo.png": {"image/png": png}}
    raw = v4.new_raw_cell("\\section{Raw LaTeX}", metadata={"format": "text/latex"})
    nb.cells = [md, raw, v4.new_code_cell("# not run yet\nx = 1")]
    _ids(nb, "attach")
    return nb


def main() -> int:
    HERE.mkdir(exist_ok=True)
    simple = errors()
    _write("analysis.ipynb", analysis())
    _write("errors.ipynb", simple)
    _write("big-output.ipynb", big_output())
    _write("widgets.ipynb", widgets())
    _write("typescript-deno.ipynb", typescript())
    _write("attachments.ipynb", attachments())
    for minor in (0, 4):  # the same notebook as older minors wrote it (no cell ids)
        _write(f"errors-v4.{minor}.ipynb", simple, minor=minor)
    for path in sorted(HERE.glob("*.ipynb")):
        nbformat.validate(nbformat.read(path, as_version=4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
