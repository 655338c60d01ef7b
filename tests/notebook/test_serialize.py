"""The byte-splicing serializer: ``splice`` writes nbformat's bytes exactly and re-encodes only
the cells that are not the objects it encoded last time."""

from __future__ import annotations

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
