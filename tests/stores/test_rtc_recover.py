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
    UpdateCell,
    apply,
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
    after = nb.with_cells(apply(nb.cells, plan.edits))
    return after, EditOutcome(_snap(nb), _snap(after), plan)


def _sources(nb: Notebook) -> list[str]:
    return [str(c["source"]) for c in nb.cells]


def _apply(nb: Notebook, edits: tuple[object, ...]) -> Notebook:
    return nb.with_cells(apply(nb.cells, edits))  # type: ignore[arg-type]


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
