"""Every notebook of the world corpus (``tests.corpus.world``: the notebooks in other projects'
sdists, nbformat 4.0 to 4.99) edited through jupyter-collaboration's rooms, both ways into them
(``tests.live.rooms``), as ``tests/corpus/test_world.py`` does in file mode: read (overview and
whole), an edit of the first cell, an insert at the end, a delete undone, a save. The file is then
valid for nbformat and holds the edits, and every other cell keeps its source, outputs,
metadata and attachments as the file had them. And every runnable one (its imports installed
here) is run whole in its room, on the server's kernel, and its saved outputs compared cell by
cell with nbclient's run of it, as file mode's are (``test_world.outputs_of``: what is random
masked).

The notebooks whose jupytext pairing needs pandoc (not installed here) cannot be saved by the
server; ``tests/live/test_saving.py`` covers that case.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client

from tests.corpus import world
from tests.corpus.test_world import (
    _NBCLIENT,
    KNOWN_MISMATCHES,
    NOT_RUN,
    RANDOM,
    nbclient_result,
    official,
    outputs_of,
    runnable,
)
from tests.extension.conftest import ext_client
from tests.helpers import PATIENCE, call
from tests.live.conftest import agent
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio

EDITED = "# edited by the agent\n"
ADDED = "added_by_the_agent = 1"


def _editable() -> list[Path]:
    """The corpus's notebooks nbformat reads and validates, of three cells or more, that the
    server can save (no pairing with a format that needs pandoc)."""
    found = []
    for path in world.notebooks():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # nbformat's notes on what it would fix
                notebook = _read(path)
                nbformat.validate(notebook)
        except Exception:  # noqa: S112 - the sdists' own damaged cases
            continue
        formats = str(notebook.metadata.get("jupytext", {}).get("formats", ""))
        if len(notebook.cells) >= 3 and "pandoc" not in formats:
            found.append(path)
    return found


async def _edit(client: Client, path: str) -> None:
    await call(client, "read_notebook", path=path)
    await call(client, "read_notebook", path=path, full=True, limit=5)
    await call(client, "edit_cell", path=path, cell=0, source=EDITED)
    await call(client, "insert_cells", path=path, cells=[ADDED])
    await call(client, "delete_cells", path=path, cells=[1])
    await call(client, "undo", path=path)
    await call(client, "save_notebook", path=path)


def _read(path: Path) -> nbformat.NotebookNode:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbformat's notes on what it would fix
        notebook: nbformat.NotebookNode = nbformat.reads(
            path.read_text(encoding="utf-8"), as_version=4
        )
        return notebook


def _compare(saved_at: Path, original_at: Path) -> list[str]:
    name = world.name_of(original_at)
    saved = _read(saved_at)
    nbformat.validate(saved)
    original = _read(original_at)
    wrong = []
    if len(saved.cells) != len(original.cells) + 1:
        wrong.append(f"{name}: {len(saved.cells)} cells, not {len(original.cells)} + 1")
    elif saved.cells[0].source != EDITED or saved.cells[-1].source != ADDED:
        wrong.append(f"{name}: the edit or the insert is not in the file")
    else:
        pairs = enumerate(zip(original.cells[1:], saved.cells[1:-1], strict=True), start=1)
        wrong.extend(
            f"{name}: the {key} of cell {index} changed"
            for index, (was, now) in pairs
            for key in ("source", "outputs", "metadata", "attachments")
            if was.get(key) != now.get(key)
        )
    return wrong


async def test_every_world_notebook_is_edited_in_its_room(jupyter: JupyterServer, way: str) -> None:
    notebooks = _editable()
    assert len(notebooks) >= 80, len(notebooks)
    folder = jupyter.root / f"world-{way}"
    folder.mkdir()
    names = {}
    for n, source in enumerate(notebooks):
        names[f"{n:03d}.ipynb"] = source
        shutil.copy(source, folder / f"{n:03d}.ipynb")
    if way == "websocket":
        async with agent(jupyter, folder.name) as client:
            for name in names:
                await _edit(client, name)
    else:
        async with ext_client(jupyter) as client:
            for name in names:
                await _edit(client, f"{folder.name}/{name}")
    wrong = [w for name, source in names.items() for w in _compare(folder / name, source)]
    assert not wrong, "\n".join(wrong)


@functools.cache
def _runnable() -> list[Path]:
    return [
        path
        for path in world.notebooks()
        if world.name_of(path) not in NOT_RUN
        and (notebook := official(path)) is not None
        and runnable(notebook)
    ]


def _with_its_files(source: Path, folder: Path) -> Path:
    """A copy of ``source`` in ``folder`` with the files beside it (the data it reads)."""
    folder.mkdir(parents=True)
    for found in source.parent.iterdir():
        if found.is_file() and found.stat().st_size < 5_000_000:
            shutil.copy(found, folder / found.name)
    return folder / source.name


@pytest.fixture(scope="module")
async def nbclient_runs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[Path]]:
    """nbclient's runs of the runnable notebooks, in ``_runnable`` order, written by a process
    of its own as each finishes (beside the tests)."""
    base = tmp_path_factory.mktemp("nbclient-rooms")
    targets = [base / f"{n:03d}" / "ran.ipynb" for n in range(len(_runnable()))]
    pairs = []
    for n, source in enumerate(_runnable()):
        copied = _with_its_files(source, base / f"{n:03d}")
        pairs.append((str(copied), str(targets[n])))
    command = [sys.executable, "-c", _NBCLIENT, json.dumps(pairs)]
    async with await anyio.open_process(command) as process:
        yield targets
        with anyio.fail_after(PATIENCE * 10):
            await process.wait()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _streams_unordered(shown: list[Any]) -> list[Any]:
    """``outputs_of`` with each run of stream outputs in a fixed order: ipykernel flushes stdout
    and stderr each on its own, so which of a cell's ``print`` and ``sys.stderr.write`` comes
    first varies from run to run (seen on a loaded machine); their texts must still match."""
    out: list[Any] = []
    run: list[Any] = []
    for item in shown:
        if isinstance(item, tuple) and item and item[0] == "stream":
            run.append(item)
            continue
        out.extend(sorted(run))
        run = []
        out.append(item)
    return [*out, *sorted(run)]


async def _run(client: Client, path: str, kernel: Any) -> None:
    if not isinstance(kernel, dict) or kernel.get("name", "python3") != "python3":
        # A kernel this machine does not have: switch, as a user would (and as nbclient runs it).
        await call(client, "notebook_metadata", path=path, kernel="python3")
    ran = await call(
        client, "execute", path=path, cells="all", stop_on_error=False, wait=PATIENCE, timeout=60
    )
    assert ran["status"] == "done", (path, ran)
    await call(client, "save_notebook", path=path)
    await call(client, "restart_kernel", path=path, shutdown=True)


async def test_every_runnable_world_notebook_runs_in_its_room_as_nbclient_runs_it(
    jupyter: JupyterServer, way: str, nbclient_runs: list[Path]
) -> None:
    notebooks = _runnable()
    assert len(notebooks) >= 50, len(notebooks)
    folder = jupyter.root / f"world-runs-{way}"
    copies = [_with_its_files(p, folder / f"{n:03d}") for n, p in enumerate(notebooks)]
    paths = [c.relative_to(jupyter.root if way == "in-process" else folder) for c in copies]
    client_of = agent(jupyter, folder.name) if way == "websocket" else ext_client(jupyter)
    async with client_of as client:
        for source, path in zip(notebooks, paths, strict=True):
            kernel = official(source).metadata.get("kernelspec")  # type: ignore[union-attr]
            await _run(client, path.as_posix(), kernel)
    wrong = {}
    for source, copy, theirs_at in zip(notebooks, copies, nbclient_runs, strict=True):
        name = world.name_of(source)
        ours, theirs = _read(copy), await nbclient_result(theirs_at)
        differ = {
            i
            for i, (a, b) in enumerate(zip(ours.cells, theirs.cells, strict=True))
            if a.cell_type == "code"
            and _streams_unordered(outputs_of(a, random=(name, i) in RANDOM))
            != _streams_unordered(outputs_of(b, random=(name, i) in RANDOM))
        }
        unexpected = differ - set(KNOWN_MISMATCHES.get(name, {}))  # file mode's, listed there
        if unexpected:
            i = min(unexpected)
            wrong[name] = (
                sorted(unexpected),
                outputs_of(ours.cells[i]),
                outputs_of(theirs.cells[i]),
            )
    assert not wrong, wrong
