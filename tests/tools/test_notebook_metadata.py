"""``notebook_metadata``: read and merge a notebook's own metadata, switch its kernel; and
``cell_type`` as a synonym of a new cell's ``type``."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from mcp import Client

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.helpers import PATIENCE, call, call_error, notebook, write_notebook

pytestmark = pytest.mark.anyio


def metadata_on_disk(path: Path) -> dict[str, object]:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return dict(nb.metadata)


async def test_read_merge_delete_and_undo_notebook_metadata(client: Client, root: Path) -> None:
    write_notebook(root / "m.ipynb", notebook("x = 1"))
    read = await call(client, "notebook_metadata", path="m.ipynb")
    assert read["metadata"]["kernelspec"]["name"] == "python3"
    set_ = await call(
        client,
        "notebook_metadata",
        path="m.ipynb",
        metadata={"title": "EDA", "authors": [{"name": "Ada"}], "language_info": None},
        expected_version=read["version"],
    )
    assert set_["version"] != read["version"]
    on_disk = metadata_on_disk(root / "m.ipynb")
    assert on_disk["title"] == "EDA"
    assert on_disk["authors"] == [{"name": "Ada"}]
    assert "language_info" not in on_disk
    assert set_["metadata"] == on_disk
    # A stale version is refused and nothing is written.
    before = (root / "m.ipynb").read_bytes()
    error = await call_error(
        client,
        "notebook_metadata",
        path="m.ipynb",
        metadata={"t": 1},
        expected_version=read["version"],
    )
    assert "changed since version" in error
    assert (root / "m.ipynb").read_bytes() == before
    # Metadata that fails nbformat's schema is refused, not written.
    error = await call_error(
        client, "notebook_metadata", path="m.ipynb", metadata={"kernelspec": 3}
    )
    assert "kernelspec" in error
    assert (root / "m.ipynb").read_bytes() == before
    undone = await call(client, "undo", path="m.ipynb")
    assert undone["undone"] == ["set notebook metadata"]
    back = metadata_on_disk(root / "m.ipynb")
    assert "title" not in back
    assert back["language_info"] == {"name": "python"}


async def test_big_metadata_values_are_described_not_shown(client: Client, root: Path) -> None:
    nb = notebook("1")
    nb.data["metadata"]["widgets"] = {"state": {str(i): "x" * 100 for i in range(200)}}
    write_notebook(root / "w.ipynb", nb)
    read = await call(client, "notebook_metadata", path="w.ipynb")
    assert "not shown" in read["metadata"]["widgets"]
    assert "'widgets'" in read["note"]
    assert len(json.dumps(read)) < 2_000


async def test_new_cells_take_cell_type_as_a_synonym_of_type(client: Client, root: Path) -> None:
    await call(
        client,
        "create_notebook",
        path="s.ipynb",
        cells=[{"cell_type": "markdown", "source": "# Title"}, "x = 1"],
    )
    await call(
        client,
        "insert_cells",
        path="s.ipynb",
        cells=[{"cell_type": "raw", "source": "r"}, {"cell_type": "code", "type": "code"}],
    )
    cells = nbformat.read(root / "s.ipynb", as_version=4).cells
    assert [c.cell_type for c in cells] == ["markdown", "code", "raw", "code"]
    before = (root / "s.ipynb").read_bytes()
    error = await call_error(
        client,
        "insert_cells",
        path="s.ipynb",
        cells=[{"cell_type": "markdown", "type": "code", "source": "# no"}],
    )
    assert "cell_type 'markdown' and type 'code'" in error
    assert (root / "s.ipynb").read_bytes() == before
    error = await call_error(
        client, "insert_cells", path="s.ipynb", cells=[{"cell_type": "heading", "source": "# no"}]
    )
    assert "cells[0]" in error
    assert (root / "s.ipynb").read_bytes() == before


async def test_switching_the_kernel_restarts_it_and_says_variables_were_lost(
    root: Path, tmp_path: Path
) -> None:
    root.mkdir(exist_ok=True)
    write_notebook(root / "k.ipynb", notebook("x = 41"))
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    async with Client(build_server(settings)) as client:
        ran = await call(client, "execute", path="k.ipynb", cells="all", wait=PATIENCE)
        assert ran["status"] == "done", ran
        error = await call_error(client, "notebook_metadata", path="k.ipynb", kernel="nope")
        assert "no kernelspec named 'nope'" in error
        assert "python3" in error
        switched = await call(client, "notebook_metadata", path="k.ipynb", kernel="deno")
        assert "variables were lost" in switched["note"], switched
        assert switched["metadata"]["kernelspec"]["name"] == "deno"
        assert metadata_on_disk(root / "k.ipynb")["kernelspec"]["name"] == "deno"  # type: ignore[index]
        kernels = await call(client, "list_kernels")
        assert [(k["path"], k["kernel"]) for k in kernels["kernels"]] == [("k.ipynb", "deno")]
        back = await call(client, "notebook_metadata", path="k.ipynb", kernel="python3")
        assert "variables were lost" in back["note"]
        gone = await call(client, "execute", path="k.ipynb", code="x", wait=PATIENCE)
        assert "NameError" in json.dumps(gone), gone
        # Undo puts the kernelspec back as it was before the last switch.
        await call(client, "undo", path="k.ipynb")
        assert metadata_on_disk(root / "k.ipynb")["kernelspec"]["name"] == "deno"  # type: ignore[index]
