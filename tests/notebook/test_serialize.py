"""The byte-splicing serializer: ``splice`` writes nbformat's bytes exactly and re-encodes only
the cells that are not the objects it encoded last time."""

from __future__ import annotations

from nbrelay.notebook.model import Notebook, new_cell, new_notebook, serialize
from nbrelay.notebook.serialize import cell_bytes, splice
from tests.helpers import counter_ids


def _notebook(n: int) -> Notebook:
    ids = counter_ids()
    cells = [new_cell("code", f"x = {i}\nprint(x)", ids()) for i in range(n)]
    return new_notebook(cells)


def test_splice_writes_serializes_bytes_and_reuses_unchanged_cells() -> None:
    nb = _notebook(5)
    first, known, encoded = splice(nb, {})
    assert first == serialize(nb)
    assert encoded == sum(len(cell_bytes(c)) for c in nb.cells)

    changed = new_cell("markdown", '# *new* "quoted" é\n', "changed")
    edited = nb.with_cells([*nb.cells[:2], changed, *nb.cells[3:]])
    second, known, encoded = splice(edited, known)
    assert second == serialize(edited)
    assert encoded == len(cell_bytes(changed))  # only the new cell was encoded

    again, _, encoded = splice(edited, known)
    assert again == second
    assert encoded == 0


def test_an_equal_but_new_cell_object_is_encoded_afresh() -> None:
    nb = _notebook(2)
    _, known, _ = splice(nb, {})
    copy = nb.with_cells([dict(c) for c in nb.cells])
    data, _, encoded = splice(copy, known)
    assert data == serialize(copy)
    assert encoded > 0


def test_long_stream_text_is_written_as_nbformat_writes_lines() -> None:
    cell = new_cell("code", "for i in range(10**5): print(i)", "long")
    cell["execution_count"] = 1
    text = "".join(f"line {i} \u2028 é\r\n" if i % 7 == 0 else f"{i}\n" for i in range(30_000))
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
    nb = new_notebook([cell])
    assert splice(nb, {})[0] == serialize(nb)


def test_an_empty_notebook_is_serialized_whole() -> None:
    nb = new_notebook([])
    data, known, _ = splice(nb, {})
    assert data == serialize(nb)
    assert known == {}
