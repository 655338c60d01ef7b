"""Cell addressing: indexes, ids and ranges, and the errors that name the valid range."""

from __future__ import annotations

import pytest

from nbrelay.errors import CellNotFound, InvalidArgument
from nbrelay.notebook.address import insertion_index, resolve, resolve_many, resolve_one

IDS = ["a1", "b2", "c3", "d4", "e5"]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (0, [0]),
        (4, [4]),
        (-1, [4]),
        ("c3", [2]),
        ("1:3", [1, 2]),
        (":2", [0, 1]),
        ("-2:", [3, 4]),
        ("3", [3]),
    ],
)
def test_references_resolve_to_indexes(ref: int | str, expected: list[int]) -> None:
    assert resolve(IDS, ref) == expected


def test_an_id_made_of_digits_wins_over_the_index_reading() -> None:
    assert resolve(["x", "0", "y"], "0") == [1]


def test_out_of_range_index_names_the_valid_range() -> None:
    with pytest.raises(CellNotFound) as info:
        resolve_one(IDS, 7)
    assert (
        info.value.message
        == "cell index 7 is out of range: the notebook has 5 cells (indexes 0-4)."
    )


def test_unknown_id_suggests_close_ids() -> None:
    with pytest.raises(CellNotFound) as info:
        resolve_one(IDS, "c4")
    assert "no cell has id 'c4'" in info.value.message
    assert "Did you mean" in info.value.message


def test_empty_and_reversed_ranges_are_errors() -> None:
    with pytest.raises(CellNotFound):
        resolve(IDS, "3:3")
    with pytest.raises(CellNotFound):
        resolve(IDS, "0:9")


def test_one_cell_tools_refuse_ranges() -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve_one(IDS, "0:2")
    assert "names 2 cells" in info.value.message


def test_many_references_are_sorted_and_deduplicated() -> None:
    assert resolve_many(IDS, [4, "a1", "0:2"]) == [0, 1, 4]
    with pytest.raises(InvalidArgument):
        resolve_many(IDS, [])


def test_booleans_are_not_indexes() -> None:
    with pytest.raises(InvalidArgument):
        resolve(IDS, True)


def test_insertion_index_appends_by_default_and_checks_bounds() -> None:
    assert insertion_index(5, None) == 5
    assert insertion_index(5, -1) == 5
    assert insertion_index(5, 0) == 0
    assert insertion_index(5, 5) == 5
    with pytest.raises(CellNotFound) as info:
        insertion_index(5, 6)
    assert "new cells can go at 0-5" in info.value.message


def test_empty_notebook_bounds_are_explained() -> None:
    with pytest.raises(CellNotFound) as info:
        resolve_one([], 0)
    assert "the notebook has no cells" in info.value.message


def test_all_is_every_cell_unless_a_cell_has_that_id() -> None:
    assert resolve(IDS, "all") == resolve(IDS, ":") == [0, 1, 2, 3, 4]
    assert resolve(IDS, " ALL ") == [0, 1, 2, 3, 4]
    assert resolve(["x", "all", "y"], "all") == [1]
    with pytest.raises(CellNotFound, match="selects no cells"):
        resolve([], "all")
