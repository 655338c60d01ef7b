"""Finding text in a notebook, and replacing it across cells as one edit."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument
from nbrelay.tools import results
from nbrelay.tools.arguments import NbPath, Refs, Version
from nbrelay.tools.results import EditResult, SearchResult
from nbrelay.workspace import Workspace
from nbrelay.workspace.notebooks import names_one_notebook


async def search_notebook(
    ws: Workspace,
    caller: Caller,
    path: Annotated[str, Field(description="A notebook, folder or glob ('**/eda*').")],
    pattern: Annotated[str, Field(description="Text, or a regex with regex=true.")],
    regex: bool = False,
    case_sensitive: bool = False,
    outputs: Annotated[bool, Field(description="Also search outputs.")] = False,
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    start: Annotated[int, Field(ge=0)] = 0,
) -> SearchResult:
    """Find lines matching text or a regex: cell index, id, 0-based line; for a folder or glob also the notebook; `next_start` pages on.

    Example: search_notebook(path="eda.ipynb", pattern="read_csv") or search_notebook(path="reports", pattern="read_csv").
    """
    if not names_one_notebook(path):
        found = await ws.notebooks.search_many(
            path,
            caller,
            pattern,
            regex=regex,
            case_sensitive=case_sensitive,
            outputs=outputs,
            start=start,
            limit=limit,
            chars=ws.settings.output_budget,
        )
        return results.many_result(found)
    snap, matches = await ws.notebooks.search(
        path, caller, pattern, regex=regex, case_sensitive=case_sensitive, outputs=outputs
    )
    return results.search_result(snap, matches, limit)


async def replace_in_notebook(
    ws: Workspace,
    caller: Caller,
    path: NbPath,
    find: Annotated[str, Field(description="Text, or a regex with regex=true.")],
    replace: Annotated[str, Field(description="Regex: \\1, \\g<name>.")],
    cells: Refs | None = None,
    regex: bool = False,
    case_sensitive: bool = True,
    expected_version: Version = None,
) -> EditResult:
    """Find and replace in cell sources (default: all cells) as one edit; returns diffs, keeps outputs.

    Example: rename a variable: replace_in_notebook(path="eda.ipynb", find="\\bdf\\b", replace="sales", regex=true).
    """
    outcome = await ws.editing.replace_in_cells(
        path,
        caller,
        find,
        replace,
        regex=regex,
        case_sensitive=case_sensitive,
        cells=cells,
        expected_version=expected_version,
    )
    if not outcome.plan.detail.get("replacements"):
        where = "the cells given" if cells is not None else "any cell's source"
        raise InvalidArgument(
            f"{find!r} does not occur in {where}; nothing was changed.",
            hint="search_notebook shows where text occurs; check case_sensitive and regex.",
        )
    return results.edit_result(outcome)
