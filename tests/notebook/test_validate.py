"""Validation: specific, bounded messages naming the cell and field."""

from __future__ import annotations

import pytest

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook import validate
from tests.helpers import notebook


def test_a_valid_notebook_has_no_problems() -> None:
    assert validate.problems(notebook("a", "b")) == []


def test_problems_name_the_cell_and_the_field() -> None:
    nb = notebook("a", "b")
    nb.cells[1]["outputs"] = [{"output_type": "stream", "name": "stdout"}]
    found = validate.problems(nb)
    assert len(found) == 1
    assert found[0].startswith("cell 1 (id 'c1')")


def test_bad_cell_type_is_named() -> None:
    nb = notebook("a")
    nb.cells[0]["cell_type"] = "sql"
    assert "cell_type 'sql'" in validate.problems(nb)[0]


def test_check_cells_refuses_invalid_cells_before_anything_is_written() -> None:
    nb = notebook("a")
    nb.cells[0]["execution_count"] = "one"
    with pytest.raises(NotebookInvalid) as info:
        validate.check_cells(nb.cells)
    assert "would make an invalid notebook" in info.value.message
    assert "Nothing was written" in info.value.hint
