"""Count the work, not the time: an edit through the tools, on a notebook of 1,000 cells,
encodes and hashes only the cells it changed or put in and makes no pass over all cells
(editing cells in place, inserting, deleting and moving them), and a read of an unchanged
notebook encodes and hashes nothing. The encoder, the hash and the passes over all cells
(scanning them for an id, listing their ids, mapping ids to positions, comparing the cell list
with the last one written, or with the one before the edit for undo) are counted wherever they
are called from (every module of nbrelay that holds them), so no layer can redo the whole
notebook unnoticed."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nbrelay.caller import ANYONE
from nbrelay.config import Settings
from nbrelay.notebook import edits, history, model
from nbrelay.notebook import serialize as splicing
from nbrelay.notebook.model import new_cell, new_notebook, serialize
from nbrelay.notebook.serialize import cell_bytes
from nbrelay.server import build_server
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace
from tests.helpers import call, counter_ids

pytestmark = pytest.mark.anyio

CELLS = 1000


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Cells encoded (``model.serialize``: a cell's bytes are a one-cell notebook's) and bytes
    hashed (``piece_digest``, ``version_of``), counted in every nbrelay module holding them."""
    counted = {"cells encoded": 0, "bytes hashed": 0, "cells passed over": 0}

    def spy(fn: Callable[..., Any], key: str, size: Callable[[Any], int]) -> Callable[..., Any]:
        def counting(arg: Any, *args: Any, **kwargs: Any) -> Any:
            counted[key] += size(arg)
            return fn(arg, *args, **kwargs)

        return counting

    spies = {
        model.serialize: spy(model.serialize, "cells encoded", lambda nb: len(nb.cells)),
        model.piece_digest: spy(model.piece_digest, "bytes hashed", len),
        model.version_of: spy(model.version_of, "bytes hashed", len),
        edits.scan_for: spy(edits.scan_for, "cells passed over", len),
        model.ids_of: spy(model.ids_of, "cells passed over", len),
        model.index_of: spy(model.index_of, "cells passed over", len),
        history.replaced_at: spy(history.replaced_at, "cells passed over", len),
        history.compare: spy(history.compare, "cells passed over", len),
        splicing.changed_in_place: spy(splicing.changed_in_place, "cells passed over", len),
    }
    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("nbrelay") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and value in spies:
                monkeypatch.setattr(module, attr, spies[value])
                patched += 1
    assert patched >= len(spies)
    return counted


async def test_an_edit_of_one_cell_in_1000_encodes_and_hashes_that_cell_only(
    tmp_path: Path, work: dict[str, int]
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    cells = [new_cell("code", f"x_{i} = {i}\nprint(x_{i})", f"c{i}") for i in range(CELLS)]
    (root / "big.ipynb").write_bytes(serialize(new_notebook(cells)))
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as client:
        await call(client, "read_notebook", path="big.ipynb")
        # The first save after a read encodes every cell once; from then on, only what changed.
        await call(client, "edit_cell", path="big.ipynb", cell=0, source="first = 1")
        for k, at in enumerate((500, 17, 500, CELLS - 2)):
            before = dict(work)
            source = f"y = {k}  # edited"
            done = await call(client, "edit_cell", path="big.ipynb", cell=at, source=source)
            assert done["changed"] == [{"index": at, "id": f"c{at}"}]
            body = len(cell_bytes(new_cell("code", source, f"c{at}")))
            encoded = work["cells encoded"] - before["cells encoded"]
            hashed = work["bytes hashed"] - before["bytes hashed"]
            assert encoded <= 2, f"edit {k}: {encoded} cells encoded"
            assert hashed <= body, f"edit {k}: {hashed} bytes hashed (the cell is {body})"
            passed = work["cells passed over"] - before["cells passed over"]
            assert passed == 0, f"edit {k}: {passed} cells passed over"
        # A read of the unchanged notebook encodes and hashes nothing.
        before = dict(work)
        read = await call(client, "read_notebook", path="big.ipynb", start=500, limit=3)
        assert read["cells"][0]["source"] == "y = 2  # edited"
        assert work == before


async def test_inserting_deleting_and_moving_cells_in_1000_passes_over_no_other_cell(
    tmp_path: Path, work: dict[str, int]
) -> None:
    """Cells put in are encoded and hashed, nothing else is; the undo history records the
    change from where the cells went in and out, and the next read of the notebook (its ids,
    positions and sources) follows the splices instead of making its maps again."""
    root = tmp_path / "root"
    root.mkdir()
    cells = [new_cell("code", f"x_{i} = {i}\nprint(x_{i})", f"c{i}") for i in range(CELLS)]
    (root / "big.ipynb").write_bytes(serialize(new_notebook(cells)))
    settings = Settings(root=root, lock_dir=tmp_path / "locks", kernel_pool=0)
    ws = Workspace(settings, FileStore(root, lock_dir=tmp_path / "locks"), id_factory=counter_ids())
    async with Client(build_server(settings, ws)) as client:
        await call(client, "read_notebook", path="big.ipynb")
        await call(client, "edit_cell", path="big.ipynb", cell=0, source="first = 1")
        steps: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
            ("insert_cells", {"index": 500, "cells": ["a = 1"]}, ("a = 1",)),
            ("insert_cells", {"after": "c17", "cells": ["b = 2", "c = 3"]}, ("b = 2", "c = 3")),
            ("delete_cells", {"cells": [300]}, ()),
            ("delete_cells", {"cells": ["c12", 800, "c801"]}, ()),
            ("move_cells", {"cells": ["c40"], "to": 45}, ()),
            ("insert_cells", {"index": 900, "cells": ["d = 4"]}, ("d = 4",)),
            ("edit_cell", {"cell": "c600", "source": "e = 5"}, ("e = 5",)),
        ]
        for name, args, sources in steps:
            before = dict(work)
            await call(client, name, path="big.ipynb", **args)
            bodies = sum(len(cell_bytes(new_cell("code", s, "c" * 8))) for s in sources)
            encoded = work["cells encoded"] - before["cells encoded"]
            hashed = work["bytes hashed"] - before["bytes hashed"]
            passed = work["cells passed over"] - before["cells passed over"]
            assert encoded <= len(sources) * 2, f"{name} {args}: {encoded} cells encoded"
            assert hashed <= bodies, f"{name} {args}: {hashed} bytes hashed"
            assert passed == 0, f"{name} {args}: {passed} cells passed over"
        # What the tools say of the cells is what the file holds, parsed afresh.
        read = await call(client, "read_notebook", path="big.ipynb", start=490, limit=20)
        fresh = json.loads((root / "big.ipynb").read_bytes())["cells"][490:510]
        assert [(c["id"], c["source"]) for c in read["cells"]] == [
            (c["id"], "".join(c["source"])) for c in fresh
        ]
        assert "a = 1" in [c["source"] for c in read["cells"]]
        # The history recorded from the splices undoes them, newest first.
        for _ in steps:
            await call(client, "undo", path="big.ipynb")
    on_disk = json.loads((root / "big.ipynb").read_bytes())
    assert [c["id"] for c in on_disk["cells"]] == [f"c{i}" for i in range(CELLS)]
    assert "".join(on_disk["cells"][0]["source"]) == "first = 1"


async def test_inserting_and_deleting_cells_in_a_room_of_1000_compares_no_whole_list(
    tmp_path: Path, work: dict[str, int]
) -> None:
    """In a room (the extension's way in, over a Yjs document held by a stand-in for
    jupyter-collaboration's room registry), the notebook read back after an insert or delete
    says which cells the document's own events put in and took out, so undo records the change
    from them, without comparing the cell lists whole; and the record undoes them."""
    from nbrelay.extension.store import InProcessWay
    from nbrelay.jupyter_api import JupyterAPI
    from nbrelay.stores.rtc import RTCStore
    from tests.live.test_rooms import Exists, StandInRooms

    cells = [new_cell("code", f"x_{i} = {i}", f"c{i}") for i in range(CELLS)]
    rooms = StandInRooms(new_notebook(cells))
    store = RTCStore(JupyterAPI("http://127.0.0.1:9/", None), way=InProcessWay(rooms, Exists()))  # type: ignore[arg-type]
    settings = Settings(root=tmp_path, lock_dir=tmp_path / "locks", kernel_pool=0)
    ws = Workspace(settings, store, id_factory=counter_ids())
    steps: list[tuple[str, dict[str, Any]]] = [
        ("insert_cells", {"index": 500, "cells": ["a = 1"]}),
        ("insert_cells", {"after": "c17", "cells": ["b = 2", "c = 3"]}),
        ("delete_cells", {"cells": [300]}),
        ("delete_cells", {"cells": ["c12", 800, "c801"]}),
    ]
    async with (
        contextlib.aclosing(store),
        store.running(),
        Client(build_server(settings, ws)) as client,
    ):
        await call(client, "read_notebook", path="n.ipynb", limit=1)
        for name, args in steps:
            before = work["cells passed over"]
            await call(client, name, path="n.ipynb", **args)
            passed = work["cells passed over"] - before
            assert passed == 0, f"{name} {args}: {passed} cells passed over"
        # The history recorded from the splices undoes them, newest first.
        for _ in steps:
            await call(client, "undo", path="n.ipynb")
        read = await store.load("n.ipynb", ANYONE)
    assert read.notebook.ids == [f"c{i}" for i in range(CELLS)]
