"""A notebook file without cells, opened in a JupyterLab room.

jupyter_ydoc's ``YNotebook.set`` gives a notebook that has no cells one empty code cell when its
room loads it, so a person in JupyterLab sees one empty cell. nbrelay reports the notebook's own
cells: none, with the file's version; its first inserted cells take that placeholder's place.
A placeholder someone typed in is a cell like any other. Live and extension modes (``way``), on
a real Jupyter Server with jupyter-collaboration, a person joined through pycrdt's provider.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from nbrelay.notebook.model import new_cell, new_notebook, version_of
from tests.helpers import call, write_notebook
from tests.live.person import fresh_sources, person
from tests.live.rooms import room_agent
from tests.live.server import JupyterServer, wait_for
from tests.live.test_rtc import disk

pytestmark = pytest.mark.anyio


@pytest.fixture
def empty(live_folder: tuple[str, Path]) -> tuple[str, Path]:
    """A notebook file without cells in the server's root: (its server path, its local path)."""
    folder, local = live_folder
    write_notebook(local / "e.ipynb", new_notebook([]))
    return f"{folder}/e.ipynb", local / "e.ipynb"


async def test_a_notebook_without_cells_reads_as_none_and_its_first_cells_replace_the_room_s(
    jupyter: JupyterServer, empty: tuple[str, Path], way: str
) -> None:
    n, file = empty
    async with room_agent(way, jupyter) as client:
        view = await call(client, "read_notebook", path=n)
        # What a person in JupyterLab sees: the room's one empty cell.
        ids, sources = await fresh_sources(jupyter, n)
        assert sources == [""]
        # What the notebook holds: nothing, as the file says.
        assert view["cells"] == []
        assert view["version"] == version_of(file.read_bytes())
        missing = await client.call_tool("read_cell", {"path": n, "cell": 0})
        assert missing.is_error
        await call(client, "insert_cells", path=n, index=0, cells=["x = 1"])
        view = await call(client, "read_notebook", path=n)
        assert [c["source"] for c in view["cells"]] == ["x = 1"]
        assert ids[0] not in [c["id"] for c in view["cells"]]
        # Everyone in the room has the new cell in place of the empty one, and so does the file.
        assert (await fresh_sources(jupyter, n))[1] == ["x = 1"]
        await call(client, "save_notebook", path=n)
        assert disk(file)[1] == ["x = 1"]


async def test_the_room_s_empty_cell_once_typed_in_is_the_person_s(
    jupyter: JupyterServer, empty: tuple[str, Path], way: str
) -> None:
    n, _ = empty
    async with room_agent(way, jupyter) as client:
        assert (await call(client, "read_notebook", path=n))["cells"] == []
        async with person(jupyter, n) as p:
            (theirs,) = p.ids()
            await p.type(theirs, "mine", interval=0)

            async def typed() -> bool:
                view = await call(client, "read_notebook", path=n)
                return [c["source"] for c in view["cells"]] == ["mine"]

            await wait_for(typed, seconds=15)
            await call(client, "insert_cells", path=n, index=1, cells=["after"])

            async def both() -> bool:
                return p.sources() == ["mine", "after"]

            await wait_for(both, seconds=15)
        view = await call(client, "read_notebook", path=n)
        assert [c["source"] for c in view["cells"]] == ["mine", "after"]
        assert view["cells"][0]["id"] == theirs


async def test_a_file_s_own_empty_cell_is_the_notebook_s_even_shaped_as_the_room_s(
    jupyter: JupyterServer, live_folder: tuple[str, Path], way: str
) -> None:
    # Saved through the server, a notebook without outputs is signed, so the room loads its
    # empty code cell marked trusted: the shape of the room's own empty cell. It is the file's.
    folder, _ = live_folder
    n = f"{folder}/one.ipynb"
    content = new_notebook([new_cell("code", "", "c0")]).data
    async with httpx2.AsyncClient(
        base_url=jupyter.url, headers={"Authorization": f"token {jupyter.token}"}
    ) as http:
        put = await http.put(
            f"api/contents/{n}", json={"type": "notebook", "format": "json", "content": content}
        )
        put.raise_for_status()
    async with room_agent(way, jupyter) as client:
        async with person(jupyter, n) as p:
            assert p.nb.ycells[0]["metadata"].to_py() == {"trusted": True}
        view = await call(client, "read_notebook", path=n)
        assert [(c["id"], c["source"]) for c in view["cells"]] == [("c0", "")]
