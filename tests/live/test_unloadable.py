"""A notebook jupyter-collaboration cannot load into a room is read and edited through the
contents API, both ways into the rooms (``tests.live.rooms``), as on a server without
collaboration.

The notebook is nbformat's own test notebook of a later minor version (4.99), whose cell of an
unknown type has no source: jupyter_ydoc cannot hold it, and the server closes the room's
WebSocket with an "initialization_error" that no reload mends (``get_document`` raises, in
process). Before: live mode refused every call on it ("the Jupyter Server closed the room");
in process, the failed load left the room listed, empty, so the second call was handed that
empty notebook, and an agent's insert went into it and was saved over the file (that save
failed only because the empty room has no nbformat version). The room is not asked for again
for a minute (``UNLOADABLE_RETRY``): each attempt has the server log the failure.
"""

from __future__ import annotations

import json

import pytest

from tests.corpus import world
from tests.helpers import call, call_error
from tests.live.rooms import room_agent
from tests.live.server import JupyterServer

pytestmark = pytest.mark.anyio


def later_minor() -> str:
    """nbformat's own test notebook of nbformat 4.99 (a cell of an unknown type, no source)."""
    found = [p for p in world.notebooks() if world.name_of(p).endswith("tests/test4plus.ipynb")]
    assert found, "nbformat's test4plus.ipynb is not in the corpus"
    return found[0].read_text(encoding="utf-8")


async def test_a_notebook_collaboration_cannot_load_is_served_through_the_contents_api(
    jupyter: JupyterServer, way: str
) -> None:
    text = later_minor()
    original = json.loads(text)
    assert not all("source" in c for c in original["cells"])  # what jupyter_ydoc cannot hold
    name = f"later-{way}.ipynb"
    path = jupyter.root / name
    path.write_text(text, encoding="utf-8")
    async with room_agent(way, jupyter) as client:
        for _ in range(2):  # the second call used to get the room the failed load left
            view = await call(client, "read_notebook", path=name)
            assert view["cell_count"] == len(original["cells"]), view
        await call(client, "insert_cells", path=name, cells=["added = 1"])
        await call(client, "edit_cell", path=name, cell=0, source="# edited")
        await call(client, "save_notebook", path=name)
        view = await call(client, "read_notebook", path=name)
    assert view["cell_count"] == len(original["cells"]) + 1
    # The room was asked for once: each attempt has the server log the failure (a traceback).
    assert jupyter.log.read_text().count(f"loaded from file {name}") == 1
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert (saved["nbformat"], saved["nbformat_minor"]) == (4, 99)
    assert len(saved["cells"]) == len(original["cells"]) + 1
    assert saved["cells"][0]["source"] in ("# edited", ["# edited"])
    assert saved["cells"][-1]["source"] in ("added = 1", ["added = 1"])
    unknown = [c for c in saved["cells"] if "source" not in c]
    assert unknown == [c for c in original["cells"] if "source" not in c]  # kept as it was


async def test_a_file_that_is_no_notebook_is_refused_naming_the_problem_and_left_alone(
    jupyter: JupyterServer, way: str
) -> None:
    """A .ipynb whose JSON is cut short (a copy interrupted): the server closes the room with its
    "bad request" code (4400) or fails to load it; every call is refused with the server's
    reason and what to do, in both ways, and the file is left as it was."""
    name = f"cut-{way}.ipynb"
    path = jupyter.root / name
    path.write_text('{"cells": [{"cell_type": "code", "sour', encoding="utf-8")
    before = path.read_bytes()
    async with room_agent(way, jupyter) as client:
        for tool, args in (
            ("read_notebook", {}),
            ("insert_cells", {"cells": ["x = 1"]}),
            ("edit_cell", {"cell": 0, "source": "y"}),
        ):
            refused = await call_error(client, tool, path=name, **args)
            assert f"cannot read {name!r} as a notebook" in refused, refused
            assert "Notebook does not appear to be JSON" in refused
            assert "Jupyter Server at this Jupyter Server" not in refused
    assert path.read_bytes() == before
