"""The byte-splicing serializer: ``splice`` writes nbformat's bytes exactly and re-encodes only
the cells that are not the objects it encoded last time."""

from __future__ import annotations

from typing import Any

import pytest

from nbrelay.notebook import edits
from nbrelay.notebook import serialize as splicing
from nbrelay.notebook.edits import DeleteCells, InsertCells, MoveCells, SetMetadata, UpdateCell
from nbrelay.notebook.model import (
    CELL_SEAM,
    Notebook,
    new_cell,
    new_notebook,
    serialize,
    version_of,
)
from nbrelay.notebook.serialize import Work, cell_bytes, splice
from tests.helpers import counter_ids


def _notebook(n: int) -> Notebook:
    ids = counter_ids()
    cells = [new_cell("code", f"x = {i}\nprint(x)", ids()) for i in range(n)]
    return new_notebook(cells)


def test_splice_writes_serializes_bytes_and_reuses_unchanged_cells() -> None:
    nb = _notebook(5)
    work = Work()
    first = splice(nb, None, work)
    assert first.data == serialize(nb)
    assert first.version == version_of(first.data)
    assert work.bytes_encoded == sum(len(cell_bytes(c)) for c in nb.cells)

    changed = new_cell("markdown", '# *new* "quoted" é\n', "changed")
    edited = nb.with_cells([*nb.cells[:2], changed, *nb.cells[3:]])
    work = Work()
    second = splice(edited, first.known, work)
    assert second.data == serialize(edited)
    assert second.version == version_of(second.data) != first.version
    assert work.bytes_encoded == len(cell_bytes(changed))  # only the new cell was encoded

    work = Work()
    again = splice(edited, second.known, work)
    assert (again.data, again.version) == (second.data, second.version)
    assert work == Work()


def test_an_equal_but_new_cell_object_is_encoded_afresh() -> None:
    nb = _notebook(2)
    known = splice(nb, None).known
    copy = nb.with_cells([dict(c) for c in nb.cells])
    work = Work()
    assert splice(copy, known, work).data == serialize(copy)
    assert work.cells_encoded == 2


def test_long_stream_text_is_written_as_nbformat_writes_lines() -> None:
    cell = new_cell("code", "for i in range(10**5): print(i)", "long")
    cell["execution_count"] = 1
    text = "".join(f"line {i} \u2028 é\r\n" if i % 7 == 0 else f"{i}\n" for i in range(30_000))
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
    nb = new_notebook([cell])
    spliced = splice(nb, None)
    assert spliced.data == serialize(nb)
    assert spliced.version == version_of(spliced.data)


def test_an_empty_notebook_is_serialized_whole() -> None:
    nb = new_notebook([])
    spliced = splice(nb, None)
    assert spliced.data == serialize(nb)
    assert spliced.version == version_of(spliced.data)
    assert spliced.known.entries == []


def test_an_edit_of_a_large_notebook_encodes_and_hashes_only_its_cell() -> None:
    nb = _notebook(5000)
    first = splice(nb, None)
    changed = new_cell("code", "y = 'changed'", "changed")
    edited = nb.with_cells([*nb.cells[:2500], changed, *nb.cells[2501:]])
    work = Work()
    second = splice(edited, first.known, work)
    body = len(cell_bytes(changed))
    assert (work.cells_encoded, work.bytes_encoded) == (1, body)
    assert work.bytes_hashed <= body  # no other cell's bytes
    assert second.data == serialize(edited)
    assert second.version == version_of(second.data)
    # the same edit made at either end: the cell's piece holds the file's head or tail
    for at in (0, len(nb.cells) - 1):
        edited = nb.with_cells([*nb.cells[:at], changed, *nb.cells[at + 1 :]])
        spliced = splice(edited, first.known)
        assert spliced.data == serialize(edited)
        assert spliced.version == version_of(spliced.data)


def test_edits_made_by_apply_notebook_are_spliced_without_comparing_the_cell_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notebook made from the last one written by updates of cells in place says which
    positions changed (``changed_from``), and one made by inserting, deleting or moving cells
    says where (``spliced_from``), so ``splice`` compares no cell lists. Every step's bytes and
    version are ``serialize``'s."""
    compared: list[int] = []
    real = splicing.changed_in_place

    def counting(old: list[Any], new: list[Any]) -> Any:
        compared.append(len(new))
        return real(old, new)

    monkeypatch.setattr(splicing, "changed_in_place", counting)
    nb = _notebook(400)
    known = splice(nb, None).known
    steps: list[tuple[edits.Edit, ...]] = [
        (UpdateCell("cell-200", {"source": "a"}),),
        (UpdateCell("cell-256", {"source": "e"}), UpdateCell("cell-257", {"source": "f"})),
        (UpdateCell("cell-1", {"source": "b"}), UpdateCell("cell-399", {"source": "c"})),
        (SetMetadata({"title": "t"}),),
        (InsertCells(3, (new_cell("code", "new", "fresh"),)),),
        (UpdateCell("cell-7", {"outputs": [], "source": "d"}),),
        (DeleteCells(("cell-2", "cell-300", "cell-301")),),
        (MoveCells(("fresh", "cell-399"), 100),),
        (InsertCells(0, (new_cell("markdown", "top", "top"),)), DeleteCells(("cell-398",))),
    ]
    for k, step in enumerate(steps):
        compared.clear()
        nb = edits.apply_notebook(nb, step)
        spliced = splice(nb, known)
        known = spliced.known
        assert spliced.data == serialize(nb), k
        assert spliced.version == version_of(spliced.data), k
        assert compared == [], k


def test_the_sources_a_reader_saw_stay_as_they_were_after_an_edit() -> None:
    nb = _notebook(5)
    seen = nb.sources()
    after = edits.apply_notebook(nb, (UpdateCell("cell-3", {"source": "new"}),))
    assert dict(seen) == {f"cell-{i + 1}": f"x = {i}\nprint(x)" for i in range(5)}
    assert after.sources()["cell-3"] == "new"
    assert dict(after.sources()) == {**seen, "cell-3": "new"}
    assert after.changed_from(nb.cells) == (2,)
    assert after.changed_from(after.cells) is None


def test_versions_change_with_any_byte_and_only_then() -> None:
    nb = _notebook(3)
    data = serialize(nb)
    assert CELL_SEAM in data  # the cells' pieces are hashed apart
    assert version_of(data) == version_of(bytes(bytearray(data)))
    seen = {version_of(data)}
    for at in (0, 20, len(data) // 2, data.index(CELL_SEAM) + 3, len(data) - 1):
        for changed in (data[:at] + b"x" + data[at + 1 :], data[:at] + data[at + 1 :]):
            seen.add(version_of(changed))
    # moving a seam's bytes from one piece to the next changes the version too
    seen.add(version_of(data.replace(CELL_SEAM, b"\n" + CELL_SEAM[:-1], 1)))
    assert len(seen) == 12


def test_cells_that_do_not_fit_the_seams_are_hashed_with_the_whole_file() -> None:
    nb = _notebook(3)
    odd = new_notebook([*nb.cells])
    odd.data["zz"] = [{"a": 1}, {"b": 2}]  # a seam in the tail, after the cells
    spliced = splice(odd, splice(nb, None).known)
    assert spliced.data == serialize(odd)
    assert CELL_SEAM in spliced.data.split(b'"zz"', 1)[1]
    assert spliced.version == version_of(spliced.data)
