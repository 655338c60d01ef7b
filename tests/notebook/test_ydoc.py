"""The live mode's pure parts: rebasing an agent's text change onto a person's concurrent typing,
and the Y ↔ nbformat cell conversions (on a local pycrdt document, no server)."""

from __future__ import annotations

from typing import Any

import pycrdt
from hypothesis import given, settings
from hypothesis import strategies as st

from nbrelay.notebook.edits import DeleteCells, InsertCells, MoveCells, UpdateCell
from nbrelay.notebook.merge import merge3
from nbrelay.notebook.model import new_cell
from nbrelay.notebook.rebase import apply_text_ops, rebase_text
from nbrelay.notebook.ydoc import apply_edit, cell_from_y, notebook_from_doc, ycell

# The agent's text and the person's text use different letters, so each can be traced.
agent_text = st.text(alphabet="abc \n", max_size=40)
person_text = st.text(alphabet="XYZ", min_size=1, max_size=8)


@given(agent_text, agent_text)
def test_without_concurrent_typing_the_ops_are_a_plain_diff(base: str, new: str) -> None:
    ops = rebase_text(base, base, new)
    assert apply_text_ops(base, ops) == new
    if base == new:
        assert ops == []


@given(agent_text, agent_text, person_text, st.integers(min_value=0, max_value=40))
@settings(max_examples=300)
def test_a_persons_insert_survives_and_the_agents_change_applies(
    base: str, new: str, typed: str, at: int
) -> None:
    at = min(at, len(base))
    current = base[:at] + typed + base[at:]
    result = apply_text_ops(current, rebase_text(base, current, new))
    # Every keystroke is kept, in one piece and in order...
    assert typed in result
    # ...and without it the text is exactly what the agent asked for.
    assert result.replace(typed, "", 1) == new


@given(agent_text, agent_text, agent_text, st.integers(0, 40), st.integers(0, 40))
def test_text_the_person_deleted_stays_deleted(
    head: str, tail: str, new_tail: str, a: int, b: int
) -> None:
    # The person deletes part of the start while the agent rewrites the end (after a marker).
    base, new = head + "|" + tail, head + "|" + new_tail
    lo, hi = sorted((min(a, len(head)), min(b, len(head))))
    current = base[:lo] + base[hi:]
    result = apply_text_ops(current, rebase_text(base, current, new))
    assert result == head[:lo] + head[hi:] + "|" + new_tail


def test_a_replacement_next_to_typing_keeps_both() -> None:
    base = "df.head()\nprint(df)\n"
    current = base + "# notes by a person"
    new = "df.head(10)\nprint(df)\n"
    result = apply_text_ops(current, rebase_text(base, current, new))
    assert result == "df.head(10)\nprint(df)\n# notes by a person"


def test_non_ascii_text_is_edited_by_character() -> None:
    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    text = doc.get("t", type=pycrdt.Text)
    text += "héllo wörld 👋"
    from nbrelay.notebook.ydoc import set_ytext

    set_ytext(text, None, "héllo, wörld 👋!")
    assert str(text) == "héllo, wörld 👋!"


def _doc_with(cells: list[dict[str, Any]]) -> tuple[pycrdt.Doc[Any], pycrdt.Array[Any]]:
    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    ycells = doc.get("cells", type=pycrdt.Array)
    ymeta = doc.get("meta", type=pycrdt.Map)
    ymeta["nbformat"] = 4
    ymeta["nbformat_minor"] = 5
    ymeta["metadata"] = pycrdt.Map({})
    for c in cells:
        ycells.append(ycell(c))
    return doc, ycells


def _code(source: str, cid: str) -> dict[str, Any]:
    cell = new_cell("code", source, cid)
    cell["execution_count"] = 3
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
    return cell


def test_cells_round_trip_through_y_with_ints_and_stream_text() -> None:
    doc, ycells = _doc_with([_code("x = 1", "a"), new_cell("markdown", "# T", "b")])
    back = [cell_from_y(y.to_py()) for y in ycells]
    assert back[0] == _code("x = 1", "a")
    assert back[1] == new_cell("markdown", "# T", "b")
    assert isinstance(ycells[0]["outputs"][0]["text"], pycrdt.Text)
    nb = notebook_from_doc(doc.get("meta", type=pycrdt.Map), ycells, name="n")
    assert nb.ids == ["a", "b"]
    assert nb.data["nbformat_minor"] == 5


def test_primitive_edits_become_granular_changes() -> None:
    doc, ycells = _doc_with([_code("x = 1", "a"), _code("y = 2", "b"), _code("z = 3", "c")])
    a_text = ycells[0]["source"]
    order = ["a", "b", "c"]
    with doc.transaction():
        apply_edit(ycells, order, InsertCells(1, (new_cell("code", "new", "n"),)))
        apply_edit(ycells, order, UpdateCell("a", {"source": "x = 10"}, base_source="x = 1"))
        apply_edit(ycells, order, DeleteCells(("b",)))
        apply_edit(ycells, order, MoveCells(("c",), 0))
    assert order == ["c", "a", "n"] == [str(y["id"]) for y in ycells]
    # The edited cell kept its shared text object (a person's cursor and typing stay valid).
    assert str(a_text) == "x = 10"


def test_streamed_outputs_grow_in_place() -> None:
    from nbrelay.notebook.ydoc import set_youtputs

    doc, ycells = _doc_with([_code("print(1)", "a")])
    first = ycells[0]["outputs"][0]["text"]
    with doc.transaction():
        set_youtputs(
            ycells[0],
            [{"output_type": "stream", "name": "stdout", "text": "hi\nmore\n"}],
        )
    assert str(first) == "hi\nmore\n"  # the same Y text, appended to
    with doc.transaction():
        set_youtputs(ycells[0], [])
    assert len(ycells[0]["outputs"]) == 0


LINE = st.text(alphabet="abc =1(\t", max_size=6)


@settings(max_examples=300)
@given(st.lists(LINE, min_size=3, max_size=12, unique=True), st.data())
def test_a_merged_edit_rebased_live_gives_the_merged_text(
    lines: list[str], data: st.DataObject
) -> None:
    """Live mode applies the agent's own change (read source → its source) rebased onto the text
    as it is now; for changes to different lines that is exactly the three-way merge the file
    store writes, so both modes keep the same text."""
    n = len(lines)
    i = data.draw(st.integers(0, n - 1))
    j = data.draw(st.integers(0, n - 1).filter(lambda j: abs(j - i) >= 2))
    mine = data.draw(LINE.filter(lambda s: s not in lines))
    yours = data.draw(LINE.filter(lambda s: s not in lines and s != mine))
    ours, theirs = list(lines), list(lines)
    ours[i], theirs[j] = mine, yours
    base, new, now = "\n".join(lines), "\n".join(ours), "\n".join(theirs)
    merged = merge3(base, new, now).text
    assert merged is not None
    assert apply_text_ops(now, rebase_text(base, now, new)) == merged


# What a person in JupyterLab goes through when the agent's transaction arrives (JupyterLab 4's
# notebook widget): the cell list's changes are applied to the widgets one run of the delta at a
# time; each insertion or removal above the active cell shifts the active index by one
# (onCellInserted / onCellRemoved), and after each run the active index is set to where the
# active cell's id is in the *final* list of cells (Notebook._onCellsChanged), clamped.
def _jupyterlab_active_cell(widgets: list[str], active: str, deltas: list[list[Any]]) -> str:
    final_of: list[str] = list(widgets)
    for delta in deltas:
        final_of = _applied(final_of, delta)
        index = widgets.index(active)
        at = 0
        for op in delta:
            if "retain" in op:
                at += op["retain"]
                continue  # no event
            if "insert" in op:
                for k, y in enumerate(op["insert"]):
                    widgets.insert(at + k, str(y["id"]))
                    if at + k <= index:
                        index += 1
                at += len(op["insert"])
            else:
                for _ in range(op["delete"]):
                    widgets.pop(at)
                    if at <= index:
                        index -= 1
            index = min(max(index, 0), len(widgets) - 1)
            active = widgets[index]
            if active in final_of:  # the override: the active id's index in the final list
                index = min(max(final_of.index(active), 0), len(widgets) - 1)
                active = widgets[index]
    return active


def _applied(ids: list[str], delta: list[Any]) -> list[str]:
    out, at = list(ids), 0
    for op in delta:
        if "retain" in op:
            at += op["retain"]
        elif "insert" in op:
            out[at:at] = [str(y["id"]) for y in op["insert"]]
            at += len(op["insert"])
        else:
            del out[at : at + op["delete"]]
    return out


def _record(ycells: pycrdt.Array[Any]) -> list[list[Any]]:
    """The deltas of the cells array, one a transaction (inserted cells as their ids)."""
    deltas: list[list[Any]] = []

    def seen(event: Any) -> None:
        deltas.append(
            [
                {"insert": [{"id": str(y["id"])} for y in op["insert"]]} if "insert" in op else op
                for op in event.delta
            ]
        )

    ycells.observe(seen)
    return deltas


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["move", "retype", "delete", "insert"]),
            st.lists(st.integers(0, 9), min_size=1, max_size=3),
            st.integers(0, 9),
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(0, 9),
)
@settings(max_examples=300, deadline=None)
def test_no_change_of_the_agent_moves_a_persons_focus_in_jupyterlab(
    steps: list[tuple[str, list[int], int]], person: int
) -> None:
    from nbrelay.notebook.ydoc import apply_edits

    ids = [f"c{i}" for i in range(10)]
    doc, ycells = _doc_with([_code(f"x{i} = {i}", cid) for i, cid in enumerate(ids)])
    mine = ids[person]
    order = list(ids)
    plan: list[Any] = []
    made = 0
    for kind, picks, to in steps:
        current = edits_apply_ids(order, plan)
        others = [current[p % len(current)] for p in picks if current[p % len(current)] != mine]
        if not others and kind != "insert":
            continue
        if kind == "move":
            rest = len(current) - len(set(others))
            plan.append(MoveCells(tuple(dict.fromkeys(others)), to % (rest + 1)))
        elif kind == "retype":
            plan.append(UpdateCell(others[0], {"cell_type": "markdown"}))
        elif kind == "delete":
            plan.append(DeleteCells(tuple(set(others))))
        else:
            made += 1
            plan.append(InsertCells(to % (len(current) + 1), (_code("new", f"n{made}"),)))
    deltas = _record(ycells)
    apply_edits(doc, ycells, order, plan)
    assert order == [str(y["id"]) for y in ycells] == edits_apply_ids(ids, plan)
    # Every transaction changed the list of cells in one place at most...
    assert all(sum("retain" not in op for op in delta) <= 1 for delta in deltas), deltas
    # ...so the person's active cell is still theirs after each one.
    assert _jupyterlab_active_cell(list(ids), mine, deltas) == mine


def edits_apply_ids(ids: list[str], plan: list[Any]) -> list[str]:
    from nbrelay.notebook.edits import apply

    cells = [new_cell("code", "", cid) for cid in ids]
    return [str(c["id"]) for c in apply(cells, plan)]


def test_a_move_above_the_persons_cell_is_a_deletion_then_an_insertion() -> None:
    from nbrelay.notebook.ydoc import apply_edits

    ids = ["a", "b", "c", "d", "e"]
    doc, ycells = _doc_with([_code("x", cid) for cid in ids])
    deltas = _record(ycells)
    order = list(ids)
    apply_edits(doc, ycells, order, [MoveCells(("a",), 2)])
    assert order == ["b", "c", "a", "d", "e"]
    assert [[k for op in d for k in op if k != "retain"] for d in deltas] == [
        ["delete"],
        ["insert"],
    ]
    # As one transaction ([delete a, retain b c, insert a]), a person typing in "d" would have
    # gone on typing in "e".
    one = [{"delete": 1}, {"retain": 2}, {"insert": [{"id": "a"}]}]
    assert _jupyterlab_active_cell(list(ids), "d", [one]) == "e"
    assert _jupyterlab_active_cell(list(ids), "d", deltas) == "d"
