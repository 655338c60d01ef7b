"""nbrelay stores the outputs nbclient stores, cell by cell, on nbclient's own test notebooks.

The notebooks in ``nbclient_files/`` are nbclient 0.11.0's test files, as its sdist ships them
(``nbclient-0.11.0.tar.gz``, sha256 04a134a5…6081a; BSD-3-Clause, see ``LICENSE`` there). Each is
run twice on real kernels: by nbclient (``NotebookClient.execute``) and by nbrelay (``execute`` of
every cell through the MCP client); the stored outputs and execution counts must be equal. Only
what is random is masked: a widget's model id, and a traceback's frames (ename and evalue stay).

Before the fix nbrelay differed on three things: ``clear_output()`` inside an ipywidgets
``Output`` widget wiped the cell's own printed lines (and what was printed into the widget was
stored in the cell); ``update_display_data`` did not reach an earlier ``execute_result`` with that
display id; an empty cell got an execution count.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers import PATIENCE, call
from tests.kernels.conftest import serve, settings_for

pytestmark = pytest.mark.anyio

FILES = Path(__file__).parent / "nbclient_files"
NOTEBOOKS = sorted(p.name for p in FILES.glob("*.ipynb"))


def prepared(name: str) -> Any:
    """The notebook as a user would run it again: outputs and counts cleared, stored as 4.5
    with ids (as Jupyter does on its first save), on the python3 kernel."""
    nb = nbformat.read(FILES / name, as_version=4)
    nb.nbformat_minor = 5
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def masked(outputs: list[Any]) -> list[dict[str, Any]]:
    shown = []
    for output in json.loads(json.dumps(outputs)):
        for key in ("text", "traceback"):
            if isinstance(output.get(key), list) and key == "text":
                output[key] = "".join(output[key])
        data = output.get("data") or {}
        for mime, value in data.items():
            if isinstance(value, list):
                data[mime] = "".join(value)
        view = data.get("application/vnd.jupyter.widget-view+json")
        if isinstance(view, dict):
            view["model_id"] = "<model id>"
        if output.get("output_type") == "error":
            output["traceback"] = "<frames>"
        shown.append(output)
    return shown


# nbclient answers an Output widget's messages by sending on the shell channel while another of
# its tasks waits on that channel for the cell's reply, and that wait sometimes misses the reply
# (4 of 6 runs of Output.ipynb here, each cell's outputs complete): nbclient alone then waits out
# its whole cell timeout. For the notebooks whose widgets it answers, its reference run gives a
# cell this long and then takes the outputs it has (interrupting an idle kernel changes none).
_WIDGET_ANSWER_WAIT = 10


async def run_with_nbclient(nb: Any, folder: Path) -> None:
    answers_widgets = any(
        "widgets.Output(" in cell.source for cell in nb.cells if cell.cell_type == "code"
    )
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=_WIDGET_ANSWER_WAIT if answers_widgets else int(PATIENCE),
        interrupt_on_timeout=answers_widgets,
        allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )
    await client.async_execute()


@pytest.mark.parametrize("name", NOTEBOOKS)
async def test_the_outputs_are_those_nbclient_stores(name: str, root: Path, tmp_path: Path) -> None:
    shutil.copy(FILES / "python.png", root / "python.png")
    nb = prepared(name)
    expected = copy.deepcopy(nb)
    with anyio.fail_after(PATIENCE + _WIDGET_ANSWER_WAIT * len(nb.cells)):
        await run_with_nbclient(expected, root)
    (root / "nb.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    async with serve(settings_for(root, tmp_path)) as client:
        with anyio.fail_after(PATIENCE):
            ran = await call(
                client, "execute", path="nb.ipynb", cells=[":"], stop_on_error=False, wait=100
            )
    assert ran["status"] == "done", ran
    stored = nbformat.read(root / "nb.ipynb", as_version=4)
    nbformat.validate(stored)
    compared = 0
    for want, got in zip(expected.cells, stored.cells, strict=True):
        if want.cell_type != "code":
            continue
        compared += 1
        assert masked(got.outputs) == masked(want.outputs), (name, want.id, want.source)
        assert got.execution_count == want.execution_count, (name, want.id, want.source)
    assert compared > 0
