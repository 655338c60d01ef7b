"""notebook.changes.diff: what changed between two versions, by cell id."""

from __future__ import annotations

import copy

from nbrelay.notebook.changes import CellChanges, diff
from nbrelay.notebook.model import Notebook
from tests.helpers import notebook


def changed(nb: Notebook) -> Notebook:
    return Notebook(data=copy.deepcopy(nb.data))


def test_no_change_is_empty() -> None:
    nb = notebook("a", "b")
    assert diff(nb, changed(nb)).empty


def test_added_removed_edited_outputs_and_moved() -> None:
    before = notebook("a", "b", "c")
    after = changed(before)
    cells = after.data["cells"]
    cells[0]["source"] = "a2"
    cells[1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    del cells[2]
    cells.insert(0, {**copy.deepcopy(cells[0]), "id": "new"})
    cells[1], cells[2] = cells[2], cells[1]
    found = diff(before, after)
    assert found == CellChanges(
        added=("new",), removed=("c2",), edited=("c0",), outputs=("c1",), moved=True
    )
    assert found.touches("c0")
    assert found.touches("c2")
    assert not found.touches("zz")


def test_execution_count_is_an_output_change_and_metadata_is_noticed() -> None:
    before = notebook("a")
    after = changed(before)
    after.data["cells"][0]["execution_count"] = 4
    after.data["metadata"]["title"] = "x"
    found = diff(before, after)
    assert (found.outputs, found.edited, found.metadata) == (("c0",), (), True)


def test_creation_and_deletion() -> None:
    nb = notebook("a", "b")
    assert diff(None, nb).added == ("c0", "c1")
    assert diff(nb, None).removed == ("c0", "c1")
