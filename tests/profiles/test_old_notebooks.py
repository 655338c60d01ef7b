"""A compatibility profile edits nbformat 4.0-4.4 notebooks as the canonical one does: every
ipynb-mcp edit tool succeeds on one, and the file is then a valid nbformat 4.5 notebook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers import call
from tests.profiles.conftest import ProfileClient

pytestmark = pytest.mark.anyio

OLD = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# Old"},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "a = 1"},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "a"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 1,
}  # fmt: skip

EDITS: dict[str, dict[str, Any]] = {
    "edit_cell": {"cell_index": 2, "new_source_content": "a = 2"},
    "add_cell": {"cell_index": 2, "cell_type": "code", "source_content": "b = 3"},
    "delete_cell": {"cell_index": 3},
    "merge_cells": {"cell_index1": 2, "cell_index2": 3},
}


@pytest.mark.parametrize("tool", sorted(EDITS))
async def test_ipynb_mcp_edits_an_nbformat_4_1_notebook(
    profile_client: ProfileClient, root: Path, tool: str
) -> None:
    (root / "old.ipynb").write_text(json.dumps(OLD), encoding="utf-8")
    async with profile_client("ipynb-mcp") as client:
        done = await call(client, tool, filepath="old.ipynb", **EDITS[tool])
    assert done["success"], done
    nb = nbformat.read(root / "old.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat_minor == 5
    assert all(c.get("id") for c in nb.cells)
