"""What a room store does with its acknowledged edits a stopped server never saved
(``stores.rtc_saving.recover``): pure, on notebooks as the room had them and as the server
reopened them."""

from __future__ import annotations

from nbrelay.notebook.edits import (
    CellSpec,
    DeleteCells,
    InsertCells,
    MoveCells,
    Plan,
    SetMetadata,
    UpdateCell,
    apply_notebook,
    plan_insert,
)
from nbrelay.notebook.model import Notebook
from nbrelay.stores.base import EditOutcome, Snapshot
from nbrelay.stores.rtc_saving import Unsaved, entry, recover, recovery_note
from tests.helpers import counter_ids, notebook


def _snap(nb: Notebook) -> Snapshot:
    return Snapshot(path="n.ipynb", notebook=nb, version="v")


def _edit(nb: Notebook, *edits: object) -> tuple[Notebook, EditOutcome]:
    plan = Plan(edits=tuple(edits), touched=())  # type: ignore[arg-type]
    after = apply_notebook(nb, plan.edits)
    return after, EditOutcome(_snap(nb), _snap(after), plan)


def _sources(nb: Notebook) -> list[str]:
    return [str(c["source"]) for c in nb.cells]


def _apply(nb: Notebook, edits: tuple[object, ...]) -> Notebook:
    return apply_notebook(nb, edits)  # type: ignore[arg-type]


def test_what_the_reopened_notebook_lacks_is_restored_where_nothing_else_changed_it() -> None:
    file = notebook("a", "b", "c", "d")
    new = plan_insert(file, 2, [CellSpec("code", "new")], counter_ids("n")).edits[0]
    room, first = _edit(file, UpdateCell("c0", {"source": "a1"}))
    room, second = _edit(room, new, DeleteCells(("c3",)))
    room, third = _edit(room, UpdateCell("c1", {"source": "b1"}))
    # The server reopened the file as it was, but someone changed c1 there meanwhile.
    now = file.with_cells([dict(c) for c in file.cells])
    now.cells[1]["source"] = "b from outside"
    found = recover(Unsaved.of([first, second, third], room), now)
    assert _sources(_apply(now, found.edits)) == ["a1", "b from outside", "new", "c"]
    assert found.restored == (
        "the source of cell 'c0'",
        "the new cell 'n-1' ('new')",
        "the deletion of cell 'c3'",
    )
    assert found.lost == ("the source of cell 'c1'",)
    note = recovery_note("n.ipynb", found)
    assert "applied these again" in note
    assert "did not apply them again" in note


def test_edits_the_file_has_are_left_alone_and_nothing_is_said() -> None:
    file = notebook("a", "b")
    room, outcome = _edit(file, UpdateCell("c0", {"source": "a1"}), InsertCells(2, ()))
    found = recover(Unsaved.of([outcome], room), room)
    assert (found.edits, found.restored, found.lost) == ((), (), ())
    assert recovery_note("n.ipynb", found) == ""


def test_a_deleted_cell_changed_meanwhile_and_a_move_are_only_named() -> None:
    file = notebook("a", "b", "c")
    room, deleted = _edit(file, DeleteCells(("c1",)))
    room, moved = _edit(room, MoveCells(("c0",), 1))
    now = file.with_cells([dict(c) for c in file.cells])
    now.cells[1]["source"] = "b changed"
    found = recover(Unsaved.of([deleted, moved], room), now)
    assert found.edits == ()
    assert found.lost == ("the deletion of cell 'c1'", "the move of cell 'c0'")


def test_the_journal_entries_recover_as_the_memory_does() -> None:
    import json

    file = notebook("a", "b")
    _room, outcome = _edit(file, UpdateCell("c1", {"source": "b1"}))
    from_memory = recover(Unsaved.of([outcome]), file)
    journaled = Unsaved()
    journaled.add_entry(json.loads(json.dumps(entry(outcome))))
    assert recover(journaled, file) == from_memory
    assert _sources(_apply(file, from_memory.edits)) == ["a", "b1"]


def test_the_notebooks_metadata_is_recovered_key_by_key_from_memory_and_journal() -> None:
    import json

    file = notebook("a")
    file.data["metadata"] = {"title": "old", "tags": ["x"], "kept": 1}
    room, first = _edit(file, SetMetadata({"title": "new", "kernelspec": {"name": "python3"}}))
    room, second = _edit(room, SetMetadata({}, ("tags",)), UpdateCell("c0", {"source": "a1"}))
    # The server reopened the file as it was, except that someone retitled it meanwhile.
    now = file.with_cells([dict(c) for c in file.cells])
    now.data["metadata"] = {**file.data["metadata"], "title": "from outside"}
    found = recover(Unsaved.of([first, second], room), now)
    after = _apply(now, found.edits)
    assert after.data["metadata"] == {
        "title": "from outside",
        "kernelspec": {"name": "python3"},
        "kept": 1,
    }
    assert _sources(after) == ["a1"]
    assert "the notebook's metadata 'kernelspec'" in found.restored
    assert "the notebook's metadata 'tags'" in found.restored
    assert found.lost == ("the notebook's metadata 'title'",)
    journaled = Unsaved()
    for outcome in (first, second):
        journaled.add_entry(json.loads(json.dumps(entry(outcome))))
    assert recover(journaled, now) == found
    # Once the file has them, there is nothing to say.
    assert recover(Unsaved.of([first, second], room), room).restored == ()
