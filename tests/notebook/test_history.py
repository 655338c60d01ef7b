"""Undo history: a stateful property test against a plain list model (the change recorded from
what an edit told the new notebook, and the undo planned by looking cells up by position, are
the ones a comparison of the whole cell lists gives), and the refusals."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nbrelay.errors import UndoRefused
from nbrelay.notebook import edits, history
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Notebook
from tests.helpers import counter_ids, notebook


def _view(nb: Notebook) -> list[tuple[str, str, str]]:
    return [(c["id"], c["cell_type"], c["source"]) for c in nb.cells]


def _chomp(s: str) -> str:
    return s[:-1] if s.endswith("\n") else s


class EditsMatchAListModel(RuleBasedStateMachine):
    """Random edits and undos; after every step the notebook equals the model, ids are unique,
    and undo restores exactly the state before the change it reverts."""

    def __init__(self) -> None:
        super().__init__()
        self.nb = notebook("a", "b", "c")
        self.model = _view(self.nb)
        self.ids = counter_ids("n")
        self.past: list[tuple[history.Change, list[tuple[str, str, str]]]] = []

    def _do(self, label: str, plan: edits.Plan) -> None:
        before = self.nb
        before_view = _view(self.nb)
        self.nb = edits.apply_notebook(before, plan.edits)
        change = history.record(label, before.cells, self.nb.cells)
        # What the edit told the new notebook (positions changed, splices made) gives the same.
        told = history.record(
            label,
            before.cells,
            self.nb.cells,
            order=before.ids,
            changed=self.nb.changed_from(before.cells),
            spliced=self.nb.spliced_from(before.cells),
        )
        assert told == change
        if not change.empty:
            self.past.append((change, before_view))

    @rule(
        at=st.integers(0, 10), text=st.text(max_size=5), kind=st.sampled_from(["code", "markdown"])
    )
    def insert(self, at: int, text: str, kind: str) -> None:
        at = min(at, len(self.nb.cells))
        plan = edits.plan_insert(self.nb, at, [CellSpec(kind, text)], self.ids)
        self._do("insert", plan)
        self.model.insert(at, (plan.touched[0], kind, text))

    @precondition(lambda self: self.nb.cells)
    @rule(i=st.integers(0, 10), text=st.text(max_size=5))
    def set_source(self, i: int, text: str) -> None:
        i %= len(self.nb.cells)
        self._do("edit", edits.plan_set_source(self.nb, i, text))
        cid, kind, _ = self.model[i]
        self.model[i] = (cid, kind, text)

    @precondition(lambda self: self.nb.cells)
    @rule(i=st.integers(0, 10))
    def delete(self, i: int) -> None:
        i %= len(self.nb.cells)
        self._do("delete", edits.plan_delete(self.nb, [i]))
        del self.model[i]

    @precondition(lambda self: len(self.nb.cells) >= 2)
    @rule(i=st.integers(0, 10), to=st.integers(0, 10))
    def move(self, i: int, to: int) -> None:
        i %= len(self.nb.cells)
        to %= len(self.nb.cells)
        self._do("move", edits.plan_move(self.nb, [i], to))
        item = self.model.pop(i)
        self.model.insert(to, item)

    @precondition(lambda self: len(self.nb.cells) >= 2)
    @rule(i=st.integers(0, 10))
    def merge(self, i: int) -> None:
        i %= len(self.nb.cells) - 1
        self._do("merge", edits.plan_merge(self.nb, [i, i + 1]))
        a, b = self.model[i], self.model.pop(i + 1)
        self.model[i] = (a[0], a[1], _chomp(a[2]) + "\n" + _chomp(b[2]))

    @precondition(lambda self: self.past)
    @rule()
    def undo(self) -> None:
        change, before_view = self.past.pop()
        plan = history.plan_undo(self.nb.cells, change)
        assert history.plan_undo(self.nb.cells, change, where=self.nb.position) == plan
        self.nb = edits.apply_notebook(self.nb, plan)
        self.model = before_view
        assert _view(self.nb) == before_view

    @invariant()
    def matches_model(self) -> None:
        assert _view(self.nb) == self.model
        assert len(set(self.nb.ids)) == len(self.nb.ids)


TestEditsMatchAListModel = EditsMatchAListModel.TestCase
TestEditsMatchAListModel.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None
)


def test_undo_keeps_other_peoples_changes_to_other_cells() -> None:
    nb = notebook("a", "b", "c")
    after = edits.apply(nb.cells, edits.plan_set_source(nb, 0, "A").edits)
    change = history.record("edit", nb.cells, after)
    someone = edits.apply(after, edits.plan_set_source(nb.with_cells(after), 2, "C").edits)
    restored = edits.apply(someone, history.plan_undo(someone, change))
    assert [c["source"] for c in restored] == ["a", "b", "C"]


def test_undo_refuses_when_the_cell_changed_since() -> None:
    nb = notebook("a", "b")
    after = edits.apply(nb.cells, edits.plan_set_source(nb, 0, "A").edits)
    change = history.record("edit cell", nb.cells, after)
    later = edits.apply(after, edits.plan_set_source(nb.with_cells(after), 0, "AA").edits)
    with pytest.raises(UndoRefused) as info:
        history.plan_undo(later, change)
    assert info.value.message == "cannot undo 'edit cell': cell 'c0' was changed after it."


def test_undo_refuses_when_an_inserted_cell_was_deleted_since() -> None:
    nb = notebook("a")
    plan = edits.plan_insert(nb, 1, [CellSpec("code", "new")], counter_ids())
    after = edits.apply(nb.cells, plan.edits)
    change = history.record("insert", nb.cells, after)
    with pytest.raises(UndoRefused) as info:
        history.plan_undo(nb.cells, change)
    assert "has been deleted since" in info.value.message


def test_undo_of_a_delete_puts_cells_back_after_their_old_neighbour() -> None:
    nb = notebook("a", "b", "c")
    after = edits.apply(nb.cells, edits.plan_delete(nb, [1]).edits)
    change = history.record("delete", nb.cells, after)
    # someone inserts a cell at the top meanwhile
    top = edits.apply(
        after,
        edits.plan_insert(nb.with_cells(after), 0, [CellSpec("code", "t")], counter_ids()).edits,
    )
    restored = edits.apply(top, history.plan_undo(top, change))
    assert [c["source"] for c in restored] == ["t", "a", "b", "c"]
