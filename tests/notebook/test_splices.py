"""Inserting, deleting and moving cells is followed, not recomputed: after any run of such
edits (mixed with edits of cells in place), the ids, positions and sources a notebook derives
from its predecessor's, the bytes ``splice`` writes and the change undo records from the
splices are exactly what a fresh pass over the whole notebook gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nbrelay.notebook import edits, history
from nbrelay.notebook.edits import DeleteCells, InsertCells, MoveCells, SetMetadata, UpdateCell
from nbrelay.notebook.model import Notebook, ids_of, new_cell, new_notebook, serialize, version_of
from nbrelay.notebook.serialize import splice


def _fresh_view(nb: Notebook) -> tuple[list[str], dict[str, int], dict[str, str]]:
    ids = ids_of(nb.cells)
    return ids, {c: i for i, c in enumerate(ids)}, {c["id"]: c["source"] for c in nb.cells}


@st.composite
def _plans(draw: st.DrawFn) -> list[list[tuple[str, Any]]]:
    """Plans as (kind, choices) to turn into edits against the notebook of the moment."""
    step = st.tuples(
        st.sampled_from(["insert", "delete", "move", "update", "meta"]),
        st.tuples(st.integers(0, 60), st.integers(1, 4), st.integers(0, 10**6)),
    )
    return draw(st.lists(st.lists(step, min_size=1, max_size=3), min_size=1, max_size=45))


def _edit(nb: Notebook, kind: str, choice: tuple[int, int, int], made: list[int]) -> Any:
    cells = nb.cells
    at, count, seed = choice
    if kind == "insert" or not cells:
        made[0] += 1
        new = tuple(new_cell("code", f"new {made[0]}.{k}", f"n{made[0]}-{k}") for k in range(count))
        return InsertCells(at % (len(cells) + 1), new)
    picked = tuple(dict.fromkeys(cells[(at + seed * k) % len(cells)]["id"] for k in range(count)))
    if kind == "delete":
        return DeleteCells(picked)
    if kind == "move":
        return MoveCells(picked, seed % (len(cells) - len(picked) + 1))
    if kind == "update":
        return UpdateCell(picked[0], {"source": f"edited {seed}"})
    return SetMetadata({"k": seed})


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 40), plans=_plans())
def test_splices_give_what_a_pass_over_all_cells_gives(
    size: int, plans: list[list[tuple[str, Any]]]
) -> None:
    nb = new_notebook([new_cell("code", f"x = {i}", f"c{i}") for i in range(size)])
    nb.sources()  # the maps a read makes, to be followed from here on
    known = splice(nb, None).known
    made = [0]
    for plan in plans:
        steps: list[Any] = []
        now = nb
        for kind, choice in plan:
            edit = _edit(now, kind, choice, made)
            steps.append(edit)
            now = edits.apply_notebook(now, [edit])
        after = edits.apply_notebook(nb, steps)
        assert after.cells == edits.apply(nb.cells, steps)
        ids, index, sources = _fresh_view(after)
        assert after.ids == ids
        assert dict(after.sources()) == after.sources().as_dict() == sources
        assert all(after.position(c) == i for c, i in index.items())
        assert all(after.position(c) is None for c in nb.ids if c not in index)
        spliced = after.spliced_from(nb.cells)
        structural = any(isinstance(e, InsertCells | DeleteCells | MoveCells) for e in steps)
        if structural and not any(isinstance(e, UpdateCell) for e in steps):
            assert spliced is not None
            seen = history.record("e", nb.cells, after.cells, order=nb.ids, spliced=spliced)
            assert seen == history.record("e", nb.cells, after.cells)
        written = splice(after, known)
        known = written.known
        assert written.data == serialize(after)
        assert written.version == version_of(written.data)
        nb = after
