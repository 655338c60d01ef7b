"""Reading a Y notebook cell by cell (``notebook.ymirror``) gives exactly what converting the
whole document gives, whatever sequence of local and remote changes came before, and converts
only the cells that changed."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import pycrdt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook import model, ymirror
from nbrelay.notebook import serialize as serialize_module
from nbrelay.notebook.edits import MoveCells
from nbrelay.notebook.model import new_cell, new_notebook, serialize, version_of
from nbrelay.notebook.ydoc import apply_edit, replace_all, ycell, youtput
from nbrelay.notebook.ymirror import Mirror, read_whole


def _doc() -> tuple[pycrdt.Doc[Any], pycrdt.Map[Any], pycrdt.Array[Any]]:
    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    return doc, doc.get("meta", type=pycrdt.Map), doc.get("cells", type=pycrdt.Array)


def _start(cells: int = 6) -> list[Any]:
    made = []
    for i in range(cells):
        if i % 3 == 2:
            made.append(new_cell("markdown", f"# title {i}\n\nwords", f"m{i}"))
            continue
        cell = new_cell("code", f"x_{i} = {i}\nx_{i}", f"c{i}")
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"{i}\n"}]
        cell["execution_count"] = i
        made.append(cell)
    return made


def _same(mirror: Mirror, ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any]) -> None:
    nb, version, problems = mirror.read()
    whole_nb, whole_version, whole_problems = read_whole(ymeta, ycells, name="t")
    assert nb.data == whole_nb.data
    assert (version, problems) == (whole_version, whole_problems)
    assert version == version_of(serialize(nb))


def _op(doc: pycrdt.Doc[Any], ycells: pycrdt.Array[Any], ymeta: pycrdt.Map[Any], op: Any) -> None:
    kind, at, n = op
    count = len(ycells)
    if kind == "insert" or not count:
        cell = new_cell("code" if n % 2 else "raw", f"new {n}", f"n{n}-{at}-{count}")
        ycells.insert(min(at, count), ycell(cell))
        return
    at %= count
    target = ycells[at]
    if not isinstance(target, pycrdt.Map) or (
        kind == "move" and not all(isinstance(c, pycrdt.Map) for c in ycells)
    ):
        return  # a plain value someone put in the cell list (see ``_person``)
    if kind == "delete":
        del ycells[at]
    elif kind == "type":
        text = target["source"]
        text.insert(min(n, len(str(text))), "typed")
    elif kind == "erase":
        text = target["source"]
        if len(str(text)):
            del text[0 : min(n + 1, len(str(text)))]
    elif kind == "tag":
        target["metadata"]["tags"] = [f"t{n}"]
    elif kind == "output" and target.get("cell_type") == "code":
        outputs = target["outputs"]
        outputs.append(youtput({"output_type": "stream", "name": "stdout", "text": f"{n}\n"}))
    elif kind == "count" and target.get("cell_type") == "code":
        target["execution_count"] = n
    elif kind == "move":
        order = [str(c["id"]) for c in ycells]
        apply_edit(ycells, order, MoveCells((order[at],), n % count))
    elif kind == "meta":
        meta = ymeta["metadata"]
        meta["kernelspec"] = {"name": f"k{n}", "display_name": f"K {n}"}


ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["insert", "delete", "type", "erase", "tag", "output", "count", "move", "meta"]
        ),
        st.integers(min_value=0, max_value=12),
        st.integers(min_value=0, max_value=9),
    ),
    max_size=12,
)


@given(st.lists(st.tuples(st.booleans(), ops), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_local_and_remote_changes_read_as_the_whole_conversion(
    steps: list[tuple[bool, list[Any]]],
) -> None:
    """Each step is a transaction, made here or in another copy of the document and then synced
    in as one update (several events, positions shifted by the cell list's own change)."""
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    other, other_meta, other_cells = _doc()
    replace_all(other, other_meta, other_cells, new_notebook(_start()))
    doc.apply_update(other.get_update())
    _same(mirror, ymeta, ycells)
    for remote, batch in steps:
        where = (other, other_meta, other_cells) if remote else (doc, ymeta, ycells)
        with where[0].transaction():
            for op in batch:
                _op(where[0], where[2], where[1], op)
        if remote:
            doc.apply_update(other.get_update(doc.get_state()))
        else:
            other.apply_update(doc.get_update(other.get_state()))
        _same(mirror, ymeta, ycells)


def test_one_changed_cell_is_the_only_cell_converted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(30)))
    mirror.read()
    converted: list[Any] = []
    real = ymirror._convert_cell

    def counted(raw: Any, name: str, work: Any) -> Any:
        converted.append(raw)
        return real(raw, name, work)

    monkeypatch.setattr(ymirror, "_convert_cell", counted)
    text = ycells[12]["source"]
    text.insert(0, "# edited\n")
    nb, _, _ = mirror.read()
    assert [c["id"] for c in converted] == ["c12"]
    assert nb.cells[12]["source"].startswith("# edited\n")
    assert mirror.read()[0] is nb  # nothing changed: nothing converted, the same snapshot
    _same(mirror, ymeta, ycells)


def _python_calls_of_a_read_after_one_edit(cells: int) -> int:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(cells)))
    mirror.read()
    at = cells // 2 - cells // 2 % 3  # a code cell with an output, as ``_start`` makes them
    text = ycells[at]["source"]
    text.insert(0, "# edited\n")
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":  # Python code entered (a generator resumed counts too)
            calls += 1

    sys.setprofile(count)
    try:
        nb, _, _ = mirror.read()
    finally:
        sys.setprofile(None)
    assert nb.cells[at]["source"].startswith("# edited\n")
    _same(mirror, ymeta, ycells)
    return calls


def test_a_read_after_one_cell_changed_runs_no_python_per_unchanged_cell() -> None:
    """Past converting the changed cell, a read derives the notebook in passes of C over the
    cells: no Python code runs per cell (finding the changed cells by a list search used to call
    a dataclass ``__eq__`` per cell, and each pass was a loop in Python), so the Python calls of
    a read are as many at 2,000 cells as at 100."""
    small = _python_calls_of_a_read_after_one_edit(100)
    big = _python_calls_of_a_read_after_one_edit(2000)
    assert big == small, (small, big)


def test_a_read_after_one_cell_changed_hashes_that_cell_not_the_notebook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version of a read costs the cells that changed (and the 16-byte digests of the
    others), not the notebook's bytes: an edit in a room of 200 cells hashes no other cell."""
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(200)))
    mirror.read()
    size = len(serialize(mirror.read()[0]))
    hashed: list[int] = []
    real = hashlib

    class Counting:
        @staticmethod
        def blake2b(data: Any, **kw: Any) -> Any:
            hashed.append(len(data))
            return real.blake2b(data, **kw)

    monkeypatch.setattr(model, "hashlib", Counting)
    for at in (100, 0, 199):  # a middle cell, and the first and last (their pieces hold more)
        hashed.clear()
        ycells[at]["source"].insert(0, "# edited\n")
        nb, version, _ = mirror.read()
        cell = len(json.dumps(nb.cells[at], indent=1)) + 200  # its bytes, and the head or tail
        assert sum(hashed) < 2 * cell + 16 * 200, (at, sum(hashed), size)
        assert version == version_of(serialize(nb))
    _same(mirror, ymeta, ycells)


def test_duplicated_and_missing_ids_read_as_the_whole_conversion() -> None:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(4)))
    mirror.read()
    ycells.append(ycell(new_cell("code", "again", "c0")))
    _same(mirror, ymeta, ycells)
    assert mirror.read()[0].ids_made  # the later duplicate got a new id, as a file read does
    nameless = ycell(new_cell("code", "no id", "x"))
    ycells.append(nameless)
    del ycells[len(ycells) - 1]["id"]
    _same(mirror, ymeta, ycells)
    del ycells[len(ycells) - 2 :]
    _same(mirror, ymeta, ycells)
    assert not mirror.read()[0].ids_made


def test_a_cell_nbrelay_cannot_read_is_refused_as_by_the_whole_conversion() -> None:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(4)))
    mirror.read()
    ycells[1]["metadata"] = "not an object"
    with pytest.raises(NotebookInvalid) as whole:
        read_whole(ymeta, ycells, name="t")
    with pytest.raises(NotebookInvalid) as cheap:
        mirror.read()
    assert cheap.value.message == whole.value.message
    assert "cell 1" in cheap.value.message


def test_schema_problems_name_the_cell_as_the_whole_conversion() -> None:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(4)))
    mirror.read()
    ycells[3]["outputs"].append(youtput({"output_type": "display_data", "metadata": {}}))
    _same(mirror, ymeta, ycells)
    problems = mirror.read()[2]
    assert problems
    assert problems[0].startswith("cell 3 (id 'c3')")


def test_an_empty_document_and_metadata_only_changes() -> None:
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    _same(mirror, ymeta, ycells)
    replace_all(doc, ymeta, ycells, new_notebook([]))
    _same(mirror, ymeta, ycells)
    first = mirror.read()[1]
    ymeta["metadata"]["authors"] = [{"name": "A. Person"}]
    _same(mirror, ymeta, ycells)
    assert mirror.read()[1] != first
    assert json.loads(serialize(mirror.read()[0]))["cells"] == []


def _loaded(nb: dict[str, Any]) -> pycrdt.Doc[Any]:
    """A Y document as a collaboration room loads ``nb``: jupyter_ydoc's own YNotebook.set."""
    from jupyter_ydoc import YNotebook

    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    YNotebook(doc).set(nb)
    return doc


def test_the_room_s_empty_cell_of_a_notebook_without_cells_is_not_the_notebook_s() -> None:
    from nbrelay.notebook.model import from_dict
    from nbrelay.notebook.ydoc import placeholder

    empty = new_notebook([]).data
    doc = _loaded(empty)
    ymeta, ycells = doc.get("meta", type=pycrdt.Map), doc.get("cells", type=pycrdt.Array)
    assert len(ycells) == 1  # jupyter_ydoc gives it one empty code cell
    found = placeholder(ycells)
    assert found == ycells[0]["id"]
    read = Mirror(ymeta, ycells, name="e").read()
    shown, hidden = ymirror.without_placeholder(read, ycells, name="e")
    assert hidden == found
    assert shown[0].cells == []
    alone = from_dict({**read[0].data, "cells": []}, name="e", scrub=False)
    assert shown[1] == version_of(serialize(alone))
    # Typed in, it is a cell like any other.
    ycells[0]["source"].insert(0, "x")
    assert placeholder(ycells) is None
    read = Mirror(ymeta, ycells, name="e").read()
    assert ymirror.without_placeholder(read, ycells, name="e") == (read, None)


def test_a_file_s_own_empty_cell_is_the_notebook_s() -> None:
    from nbrelay.notebook.ydoc import placeholder

    doc = _loaded(new_notebook([new_cell("code", "", "c0")]).data)
    assert placeholder(doc.get("cells", type=pycrdt.Array)) is None


def _same_kept(mirror: Mirror, ymeta: pycrdt.Map[Any], ycells: pycrdt.Array[Any]) -> None:
    """``_same``, and what the notebook derived from its cells: its ids, its map of positions,
    and the cells it says it shares with the last read."""
    message: str | None = None
    try:
        whole = read_whole(ymeta, ycells, name="t")
    except NotebookInvalid as refused:
        message = refused.message
    if message is not None:
        with pytest.raises(NotebookInvalid) as cheap:
            mirror.read()
        assert cheap.value.message == message
        return
    nb, version, problems = mirror.read()
    assert nb.data == whole[0].data
    assert (version, problems) == whole[1:]
    assert nb.ids == whole[0].ids == [c["id"] for c in nb.cells]
    assert nb.ids_made == whole[0].ids_made
    assert all(nb.position(cid) == i for i, cid in enumerate(nb.ids))


def _person(ycells: pycrdt.Array[Any], ymeta: pycrdt.Map[Any], op: Any) -> None:
    """What a person's JupyterLab does to the document (jupyter_ydoc's own cell operations),
    and what a careless client could: ids repeated or changed, cells that are not objects,
    outputs the schema refuses."""
    from jupyter_ydoc import YNotebook

    kind, at, n = op
    count = len(ycells)
    ynb = YNotebook.__new__(YNotebook)  # its methods on this document's roots
    ynb._ycells, ynb._ymeta = ycells, ymeta
    if kind == "append":
        ynb.append_cell({"cell_type": "markdown", "source": f"p{n}", "id": f"p{n}-{count}"})
        return
    if not count:
        return
    at %= count
    if kind not in {"junk", "cut", "paste"} and not isinstance(ycells[at], pycrdt.Map):
        return
    if kind == "set":
        cell = {"cell_type": "code", "source": f"s{n}", "id": f"s{n}-{at}", "outputs": []}
        ynb.set_cell(at, {**cell, "execution_count": None, "metadata": {}})
    elif kind == "repeat_id" and isinstance(ycells[(at + n) % count], pycrdt.Map):
        ycells[at]["id"] = str(ycells[(at + n) % count]["id"])
    elif kind == "rename_id":
        ycells[at]["id"] = f"r{n}-{at}"
    elif kind == "junk":
        ycells.insert(at, f"not a cell {n}")
    elif kind == "bad_output" and ycells[at].get("cell_type") == "code":
        ycells[at]["outputs"].append(youtput({"output_type": "display_data", "metadata": {}}))
    elif kind == "fix_outputs" and ycells[at].get("cell_type") == "code":
        ycells[at]["outputs"].clear()
    elif kind == "cut":
        del ycells[at : min(count, at + 1 + n % 3)]
    elif kind == "paste":
        cells = [new_cell("code", f"q{n}{k}", f"q{n}-{k}-{count}") for k in range(1 + n % 3)]
        for k, cell in enumerate(cells):
            ycells.insert(at + k, ycell(cell))
    elif kind == "drag":  # as JupyterLab moves a cell: its copy put in, the cell taken out
        copy = ynb.create_ycell(ycells[at].to_py())
        del ycells[at]
        ycells.insert((at + n) % count, copy)


_PERSON = ["append", "set", "repeat_id", "rename_id", "junk", "bad_output", "fix_outputs"]
_PERSON += ["cut", "paste", "drag"] * 3
person_ops = st.lists(
    st.tuples(
        st.sampled_from(_PERSON),
        st.integers(min_value=0, max_value=40),
        st.integers(min_value=0, max_value=9),
    ),
    max_size=5,
)


@given(
    st.lists(
        st.tuples(st.sampled_from(["agent", "remote", "person"]), ops | person_ops, st.booleans()),
        min_size=1,
        max_size=10,
    )
)
@settings(max_examples=120, deadline=None)
def test_the_kept_lists_read_as_a_fresh_whole_conversion(
    steps: list[tuple[str, list[Any], bool]],
) -> None:
    """Random transactions (the agent's edits, another copy's synced in, a person's through
    jupyter_ydoc; edits, inserts, deletes, moves, repeated and changed ids, cells that are not
    objects, schema problems), read after some of them only: each read is what a fresh whole
    conversion gives, ids, positions and problems included."""
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    other, other_meta, other_cells = _doc()
    replace_all(other, other_meta, other_cells, new_notebook(_start(40)))
    doc.apply_update(other.get_update())
    _same_kept(mirror, ymeta, ycells)
    for who, batch, read in steps:
        where = (other, other_meta, other_cells) if who == "remote" else (doc, ymeta, ycells)
        with where[0].transaction():
            for op in batch:
                if op[0] in _PERSON:
                    _person(where[2], where[1], op)
                else:
                    _op(where[0], where[2], where[1], op)
        if who == "remote":
            doc.apply_update(other.get_update(doc.get_state()))
        else:
            other.apply_update(doc.get_update(other.get_state()))
        if read:
            _same_kept(mirror, ymeta, ycells)
    _same_kept(mirror, ymeta, ycells)


def _entry_reads_of_a_read_after(change: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """How often a read after one change (a cell edited, put in, taken out or moved) reads
    something the mirror keeps for a cell (its conversion or its bytes), in 2,000 cells."""
    reads = 0

    class CountedCell(ymirror._Cell):
        def __getattribute__(self, name: str) -> Any:
            nonlocal reads
            reads += 1
            return super().__getattribute__(name)

    class CountedEncoded(serialize_module.Encoded):
        def __getattribute__(self, name: str) -> Any:
            nonlocal reads
            reads += 1
            return super().__getattribute__(name)

    monkeypatch.setattr(ymirror, "_Cell", CountedCell)
    monkeypatch.setattr(ymirror, "Encoded", CountedEncoded)
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(2000)))
    mirror.read()
    order = mirror.read()[0].ids
    if change == "edit":
        ycells[1000]["source"].insert(0, "# edited\n")
    elif change == "insert":
        ycells.insert(1000, ycell(new_cell("code", "new", "new")))
    elif change == "delete":
        del ycells[1000]
    else:
        apply_edit(ycells, order, MoveCells((order[1000],), 10))
    reads = 0
    mirror.read()
    counted = reads
    _same_kept(mirror, ymeta, ycells)
    return counted


@pytest.mark.parametrize("change", ["edit", "insert", "delete", "move"])
def test_a_read_after_one_change_reads_nothing_kept_for_the_other_cells(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lists a read derives (the cells, ids, bytes, digests, problems, repeated ids) are
    kept by position and updated where cells changed: a read after one change reads what the
    mirror keeps for the changed cell and the first and last (whose pieces hold the file's head
    and tail), not the 2,000 others (each of which a pass building those lists reads)."""
    assert _entry_reads_of_a_read_after(change, monkeypatch) < 40


def _replayed(cells: list[Any], steps: Any) -> list[Any]:
    for at, removed, added in steps:
        cells = [*cells[:at], *added, *cells[at + removed :]]
    return cells


def test_a_read_after_cells_were_put_in_and_taken_out_knows_the_splices() -> None:
    """Undo's record of an insert, delete or move in a room compares only the cells the splices
    moved (``history.record``); a cell kept in place that changed too (a person typing in the
    same transactions) leaves the splices unknown, so the record compares the lists whole."""
    doc, ymeta, ycells = _doc()
    mirror = Mirror(ymeta, ycells, name="t")
    replace_all(doc, ymeta, ycells, new_notebook(_start(30)))
    first = mirror.read()[0]
    with doc.transaction():
        ycells.insert(20, ycell(new_cell("code", "late = 1", "late")))
        del ycells[3:5]
    ycells.insert(0, ycell(new_cell("markdown", "top", "top")))
    mid = mirror.read()[0]
    apply_edit(ycells, list(mid.ids), MoveCells((mid.ids[10],), 2))
    nb = mirror.read()[0]
    for old, new in ((first, mid), (mid, nb)):
        steps = new.spliced_from(old.cells)
        assert steps is not None
        assert _replayed(old.cells, steps) == new.cells
        # Every cell no splice put in is the very object of the read before.
        known = {id(c) for c in old.cells} | {id(c) for _, _, put in steps for c in put}
        assert all(id(c) in known for c in new.cells)
    assert nb.ids != mid.ids  # moved
    assert sorted(nb.ids) == sorted(mid.ids)
    _same(mirror, ymeta, ycells)
    # A person's typing in a cell kept in place, between two reads: no splices claimed.
    ycells.insert(5, ycell(new_cell("code", "more = 1", "more")))
    ycells[12]["source"].insert(0, "# typed\n")
    after = mirror.read()[0]
    assert after.spliced_from(nb.cells) is None
    assert after.cells[12]["source"].startswith("# typed\n")
    _same(mirror, ymeta, ycells)
