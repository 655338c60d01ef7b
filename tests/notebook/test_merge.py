"""Three-way merges of a cell's source: non-overlapping changes are both kept, overlapping ones
are conflicts (never a silent choice of one side)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nbrelay.notebook.merge import merge3

LINE = st.text(alphabet="abc =1(\t", max_size=6)
TEXT = st.lists(LINE, max_size=8).map("\n".join)


@given(TEXT, TEXT)
def test_one_sided_changes_take_that_side(base: str, other: str) -> None:
    assert merge3(base, other, base).text == other
    assert merge3(base, base, other).text == other
    assert merge3(base, other, other).text == other


@given(
    st.lists(LINE, min_size=3, max_size=12),
    st.data(),
)
def test_changes_to_lines_apart_are_both_kept(lines: list[str], data: st.DataObject) -> None:
    """The agent changes one line, someone else another line at least two lines away: the
    merge holds both changes and everything else as it was."""
    n = len(lines)
    i = data.draw(st.integers(0, n - 1), label="ours")
    j = data.draw(st.integers(0, n - 1).filter(lambda j: abs(j - i) >= 2), label="theirs")
    mine = data.draw(LINE.filter(lambda s: s != lines[i]), label="our line")
    yours = data.draw(LINE.filter(lambda s: s != lines[j]), label="their line")
    ours, theirs = list(lines), list(lines)
    ours[i], theirs[j] = mine, yours
    expected = list(lines)
    expected[i], expected[j] = mine, yours
    merged = merge3("\n".join(lines), "\n".join(ours), "\n".join(theirs))
    # A line may equal its neighbour, which can make the diff align it elsewhere: then the
    # merge may be a conflict, never a wrong text.
    assert merged.text in ("\n".join(expected), None)
    if len(set(lines)) == n and mine not in lines and yours not in lines and mine != yours:
        assert merged.text == "\n".join(expected)


def test_changes_to_the_same_line_conflict_and_name_it() -> None:
    base = "a\nb\nc\nd"
    merged = merge3(base, "a\nb\nc\nOURS", "a\nb\nc\nTHEIRS")
    assert merged.text is None
    assert [(c.base_start, c.base_end) for c in merged.conflicts] == [(3, 4)]
    assert merged.conflicts[0].theirs.startswith("THEIRS")


def test_a_line_added_at_the_end_is_not_a_change_of_the_last_line() -> None:
    assert merge3("a\nb\nc", "A\nb\nc", "a\nb\nc\nd").text == "A\nb\nc\nd"
    assert merge3("a\nb\nc\n", "A\nb\nc\n", "a\nb\nc\nd\n").text == "A\nb\nc\nd\n"
