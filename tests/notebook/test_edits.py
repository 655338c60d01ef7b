"""Planners and primitive edits: each request compiles to edits addressed by id."""

from __future__ import annotations

import pytest

from nbrelay.errors import InvalidArgument
from nbrelay.notebook import edits
from nbrelay.notebook.edits import CellSpec, DeleteCells, InsertCells, MoveCells, UpdateCell
from nbrelay.notebook.model import Notebook
from tests.helpers import counter_ids, notebook


def run(nb: Notebook, plan: edits.Plan) -> Notebook:
    return nb.with_cells(edits.apply(nb.cells, plan.edits))


def sources(nb: Notebook) -> list[str]:
    return [c["source"] for c in nb.cells]


def test_insert_creates_cells_with_fresh_ids_before_the_index() -> None:
    nb = notebook("a", "b")
    plan = edits.plan_insert(
        nb, 1, [CellSpec("markdown", "# x"), CellSpec("code", "y")], counter_ids()
    )
    out = run(nb, plan)
    assert sources(out) == ["a", "# x", "y", "b"]
    assert plan.touched == ("cell-1", "cell-2")
    assert out.cells[1]["cell_type"] == "markdown"
    assert "outputs" not in out.cells[1]
    assert out.cells[2]["outputs"] == []
    assert out.cells[2]["execution_count"] is None


def test_insert_refuses_unknown_cell_types() -> None:
    with pytest.raises(InvalidArgument) as info:
        edits.plan_insert(notebook(), 0, [CellSpec("sql", "x")], counter_ids())
    assert "not one of code, markdown, raw" in info.value.message


def test_apply_never_mutates_the_original_cells() -> None:
    nb = notebook("a", "b")
    before = [dict(c) for c in nb.cells]
    run(nb, edits.plan_set_source(nb, 0, "changed"))
    assert nb.cells == before


def test_find_replace_returns_a_diff_and_counts() -> None:
    nb = notebook("df.head()\ndf.tail()")
    plan = edits.plan_find_replace(nb, 0, "head()", "head(10)")
    assert sources(run(nb, plan)) == ["df.head(10)\ndf.tail()"]
    assert "-df.head()" in plan.detail["diff"]
    assert "+df.head(10)" in plan.detail["diff"]
    assert plan.detail["replacements"] == 1


def test_find_replace_refuses_missing_and_ambiguous_text() -> None:
    nb = notebook("x = 1\nx = 1\nprint(x)")
    with pytest.raises(InvalidArgument) as missing:
        edits.plan_find_replace(nb, 0, "print(y)", "z")
    assert "does not occur" in missing.value.message
    assert "print(x)" in missing.value.hint
    with pytest.raises(InvalidArgument) as twice:
        edits.plan_find_replace(nb, 0, "x = 1", "x = 2")
    assert "occurs 2 times" in twice.value.message
    plan = edits.plan_find_replace(nb, 0, "x = 1", "x = 2", replace_all=True)
    assert sources(run(nb, plan)) == ["x = 2\nx = 2\nprint(x)"]
    assert plan.detail["replacements"] == 2


def test_set_type_converts_fields_both_ways() -> None:
    nb = notebook("text")
    md = run(nb, edits.plan_set_type(nb, 0, "markdown"))
    assert md.cells[0]["cell_type"] == "markdown"
    assert "outputs" not in md.cells[0]
    assert "execution_count" not in md.cells[0]
    back = run(md, edits.plan_set_type(md, 0, "code"))
    assert back.cells[0]["outputs"] == []
    assert back.cells[0]["execution_count"] is None


def test_metadata_merges_deletes_and_sets_tags() -> None:
    nb = notebook("a")
    nb = run(nb, edits.plan_metadata(nb, 0, metadata={"k": 1, "j": 2}, tags=["t1"]))
    nb = run(
        nb, edits.plan_metadata(nb, 0, metadata={"j": None}, add_tags=["t2"], remove_tags=["t1"])
    )
    assert nb.cells[0]["metadata"] == {"k": 1, "tags": ["t2"]}
    with pytest.raises(InvalidArgument):
        edits.plan_metadata(nb, 0, tags=["a,b"])


def test_delete_and_move_address_cells_by_id() -> None:
    nb = notebook("a", "b", "c", "d")
    plan = edits.plan_move(nb, [2, 3], 0)
    assert plan.edits == (MoveCells(("c2", "c3"), 0),)
    assert sources(run(nb, plan)) == ["c", "d", "a", "b"]
    assert sources(run(nb, edits.plan_move(nb, [0], 3))) == ["b", "c", "d", "a"]
    with pytest.raises(InvalidArgument) as info:
        edits.plan_move(nb, [0, 1], 3)
    assert "can start at 0-2" in info.value.message
    assert edits.plan_delete(nb, [1, 3]).edits == (DeleteCells(("c1", "c3")),)


def test_merge_joins_adjacent_cells_into_the_first() -> None:
    nb = notebook("a = 1\n", "b = 2", "c")
    plan = edits.plan_merge(nb, [0, 1])
    out = run(nb, plan)
    assert sources(out) == ["a = 1\nb = 2", "c"]
    assert out.ids == ["c0", "c2"]
    with pytest.raises(InvalidArgument) as info:
        edits.plan_merge(nb, [0, 2])
    assert "not adjacent" in info.value.message


def test_split_keeps_the_id_on_the_first_part() -> None:
    nb = notebook("l0\nl1\nl2\nl3")
    plan = edits.plan_split(nb, 0, [1, 3], counter_ids())
    out = run(nb, plan)
    assert sources(out) == ["l0", "l1\nl2", "l3"]
    assert out.ids == ["c0", "cell-1", "cell-2"]
    with pytest.raises(InvalidArgument):
        edits.plan_split(nb, 0, [0], counter_ids())
    with pytest.raises(InvalidArgument):
        edits.plan_split(nb, 0, [4], counter_ids())


def test_clear_outputs_skips_cells_that_have_none() -> None:
    nb = notebook("a", "b")
    nb.cells[1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    nb.cells[1]["execution_count"] = 2
    plan = edits.plan_clear_outputs(nb, [0, 1])
    assert plan.edits == (UpdateCell("c1", {"outputs": [], "execution_count": None}),)
    assert run(nb, plan).cells[1]["outputs"] == []


def test_edits_on_a_deleted_cell_explain_what_happened() -> None:
    nb = notebook("a")
    with pytest.raises(InvalidArgument) as info:
        edits.apply(nb.cells, [UpdateCell("gone", {"source": "x"})])
    assert "no longer in the notebook" in info.value.message
    assert edits.apply(nb.cells, [InsertCells(99, ())]) == nb.cells


def test_a_whole_source_is_merged_with_the_change_since_the_read_also_with_a_type_change() -> None:
    """edit_cell(cell_type=..., source=...) plans the type change first; the source is still
    merged with what someone changed since the caller read the cell."""
    from nbrelay.errors import ConflictError
    from nbrelay.notebook.edits import Plan, UpdateCell
    from nbrelay.notebook.merge_read import merge_with_read

    read = {"c0": "a\nb\nc\nd"}
    nb = notebook("A\nb\nc\nd")  # someone changed line 1 since
    plan = Plan(
        edits=(
            UpdateCell("c0", {"cell_type": "markdown"}),
            UpdateCell("c0", {"source": "a\nb\nc\nD"}, base_source="A\nb\nc\nd", merge=True),
        ),
        touched=("c0",),
    )
    merged = merge_with_read(plan, nb, read)
    update = merged.edits[1]
    assert isinstance(update, UpdateCell)
    assert update.changes["source"] == "A\nb\nc\nD"
    assert (update.base_source, update.intended) == ("a\nb\nc\nd", "a\nb\nc\nD")
    assert [m["id"] for m in merged.detail["merged"]] == ["c0"]
    clash = Plan(
        edits=(UpdateCell("c0", {"source": "X\nb\nc\nd"}, base_source="A\nb\nc\nd", merge=True),),
        touched=("c0",),
    )
    with pytest.raises(ConflictError, match="changed since you last read it"):
        merge_with_read(clash, nb, read)
    # Nothing read, or nothing changed since: the plan is as it was.
    assert merge_with_read(plan, nb, None) is plan
    assert merge_with_read(plan, nb, {"c0": "A\nb\nc\nd"}).edits == plan.edits


def test_a_source_holding_the_cells_shortened_preview_is_refused() -> None:
    """An overview's preview written back (with or without more text) is refused; a source that
    truly reads like a preview, or a short cell's whole text, is not."""
    from nbrelay.errors import InvalidArgument
    from nbrelay.notebook.edits import plan_set_source
    from nbrelay.notebook.model import new_cell, new_notebook
    from nbrelay.notebook.output_text import holds_preview, source_preview

    wide, tall = "a" * 700, "\n".join(str(i) for i in range(12))
    nb = new_notebook([new_cell("code", wide, "w"), new_cell("code", tall, "t")])
    for i, source in enumerate((wide, tall)):
        preview = source_preview(source)
        assert preview != source
        for written in (preview, preview + "\nmore", "# note\n" + preview):
            with pytest.raises(InvalidArgument, match="shortened preview"):
                plan_set_source(nb, i, written)
        plan_set_source(nb, i, source + "\nmore")  # the whole text, and more: taken
        plan_set_source(nb, i, preview, merge=False)  # derived by nbrelay, not written back
    real = "b" * 600 + "…" + "c" * 50  # its text has the "…" where a preview would cut it
    assert not holds_preview(real + "x", real)
    assert not holds_preview("a" * 599 + "…", wide)  # cut elsewhere: not this cell's preview
    assert not holds_preview("short…", "short")
