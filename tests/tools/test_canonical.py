"""The canonical tools through a real MCP client (in process, auto and legacy modes)."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from mcp import Client
from mcp_types import ToolAnnotations

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook.model import parse
from tests.helpers import PATIENCE, call, call_error, notebook, text_of, write_notebook
from tests.tools.conftest import SomeoneElse

pytestmark = pytest.mark.anyio

CANONICAL = [
    "list_notebooks",
    "create_notebook",
    "read_notebook",
    "read_cell",
    "insert_cells",
    "edit_cell",
    "delete_cells",
    "move_cells",
    "merge_cells",
    "split_cell",
    "clear_outputs",
    "search_notebook",
    "replace_in_notebook",
    "undo",
]


def sources(root: Path, name: str = "n.ipynb") -> list[str]:
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            return [c["source"] for c in parse((root / name).read_bytes()).cells]
        except NotebookInvalid:  # live mode: Jupyter Server rewrites files in place
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


async def test_the_tool_list_has_the_canonical_names_and_annotations(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(CANONICAL) <= set(tools)
    assert tools["read_notebook"].annotations is not None
    assert tools["read_notebook"].annotations.read_only_hint is True
    # delete_cells sends no annotations: the spec's defaults (may destroy) are what it is
    deleting = tools["delete_cells"].annotations or ToolAnnotations()
    assert deleting.read_only_hint is not True
    assert deleting.destructive_hint is not False
    assert tools["insert_cells"].annotations is not None
    assert tools["insert_cells"].annotations.destructive_hint is False
    for t in tools.values():
        assert t.description
        assert not t.description.startswith(" ")
        assert "title" not in t.input_schema.get("properties", {}).get("path", {})
        # no example in tools/list: the schemas show the shapes, and a wrong call's error gives
        # the tool's example
        assert "Example" not in t.description, t.name
    wrong = await client.call_tool("create_notebook", {"path": "x.ipynb", "cells": [{"kind": 1}]})
    assert wrong.is_error
    assert 'Example: create_notebook(path="eda.ipynb", cells=[' in text_of(wrong)


async def test_create_insert_edit_read_round_trip(client: Client, root: Path) -> None:
    created = await call(
        client,
        "create_notebook",
        path="n.ipynb",
        cells=["a = 1", {"type": "markdown", "source": "# T"}],
    )
    assert created["changed"] == [{"index": 0, "id": "cell-1"}, {"index": 1, "id": "cell-2"}]
    ins = await call(
        client,
        "insert_cells",
        path="n.ipynb",
        cells=["b = 2"],
        after="cell-1",
        expected_version=created["version"],
    )
    assert ins["changed"] == [{"index": 1, "id": "cell-3"}]
    ed = await call(client, "edit_cell", path="n.ipynb", cell="cell-3", find="2", replace="3")
    assert "+b = 3" in ed["diff"]
    assert sources(root) == ["a = 1", "b = 3", "# T"]
    view = await call(client, "read_notebook", path="n.ipynb")
    assert view["version"] == ed["version"]
    assert [(c["index"], c["id"], c["type"]) for c in view["cells"]] == [
        (0, "cell-1", "code"),
        (1, "cell-3", "code"),
        (2, "cell-2", "markdown"),
    ]
    nbformat.validate(nbformat.read(root / "n.ipynb", as_version=4))


async def test_create_refuses_to_overwrite(client: Client) -> None:
    await call(client, "create_notebook", path="n.ipynb")
    text = await call_error(client, "create_notebook", path="n.ipynb")
    assert "'n.ipynb' already exists" in text
    assert "overwrite=true" in text
    await call(client, "create_notebook", path="n.ipynb", overwrite=True, cells=["x"])


async def test_stale_version_is_refused_and_nothing_changes(client: Client, root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    v1 = (await call(client, "read_notebook", path="n.ipynb"))["version"]
    await call(client, "delete_cells", path="n.ipynb", cells=[0])
    raw = (root / "n.ipynb").read_bytes()
    text = await call_error(
        client, "edit_cell", path="n.ipynb", cell=0, source="z", expected_version=v1
    )
    assert f"changed since version {v1}" in text
    assert (root / "n.ipynb").read_bytes() == raw


async def test_read_notebook_paginates_and_budgets_outputs(client: Client, root: Path) -> None:
    nb = notebook(*[f"x{i}" for i in range(7)])
    nb.cells[6]["outputs"] = [
        {
            "output_type": "stream",
            "name": "stdout",
            "text": "".join(f"line {i}\n" for i in range(5000)),
        }
    ]
    write_notebook(root / "n.ipynb", nb)
    page = await call(client, "read_notebook", path="n.ipynb", start=2, limit=3)
    assert [c["index"] for c in page["cells"]] == [2, 3, 4]
    assert page["next_start"] == 5
    assert page["cell_count"] == 7
    full = await call(
        client, "read_notebook", path="n.ipynb", start=5, full=True, output_budget=500
    )
    out = full["cells"][1]["outputs"][0]
    assert out["text"].startswith("line 0\n")
    assert out["text"].rstrip().endswith("line 4999")
    assert out["cut"] > 0
    assert "next_start" not in full
    summary = (await call(client, "read_notebook", path="n.ipynb", start=6))["cells"][0]
    assert summary["output_summary"] == "[1 output] line 0"


async def test_the_overview_follows_every_change_between_reads(
    client: Client, root: Path, someone_else: SomeoneElse
) -> None:
    """Overviews are remembered per cell between reads; each read still shows the notebook as
    it is now: edited, inserted, cleared and outside-changed cells, and shifted indexes."""
    nb = notebook("a", "b", "c", "d")
    nb.cells[3]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "done\n"}]
    write_notebook(root / "n.ipynb", nb)

    async def overview(**page: int) -> list[tuple[int, str, str, str | None]]:
        cells = (await call(client, "read_notebook", path="n.ipynb", **page))["cells"]
        return [(c["index"], c["id"], c["source"], c.get("output_summary")) for c in cells]

    first = await overview()
    assert first[3] == (3, "c3", "d", "[1 output] done")
    assert await overview() == first
    await call(client, "edit_cell", path="n.ipynb", cell="c1", source="B")
    await call(client, "insert_cells", path="n.ipynb", index=0, cells=["new"])
    await call(client, "clear_outputs", path="n.ipynb", cells=["c3"])
    now = await overview()
    assert [(i, s, o) for i, _, s, o in now] == [
        (0, "new", None),
        (1, "a", None),
        (2, "B", None),
        (3, "c", None),
        (4, "d", None),
    ]
    assert await overview(start=3, limit=2) == now[3:]
    await someone_else("n.ipynb", "c2", "theirs")
    assert [s for _, _, s, _ in await overview()] == ["new", "a", "B", "theirs", "d"]


async def test_read_cell_by_id_and_negative_index(client: Client, root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    assert (await call(client, "read_cell", path="n.ipynb", cell="c1"))["cell"]["source"] == "b"
    assert (await call(client, "read_cell", path="n.ipynb", cell=-2))["cell"]["id"] == "c0"
    text = await call_error(client, "read_cell", path="n.ipynb", cell=5)
    assert "cell index 5 is out of range: the notebook has 2 cells (indexes 0-1)." in text


async def test_delete_move_merge_split_and_their_results(client: Client, root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b", "c", "d", "e"))
    deleted = await call(client, "delete_cells", path="n.ipynb", cells=["c1", "3:5"])
    assert deleted["removed"] == [
        {"index": 1, "id": "c1"},
        {"index": 3, "id": "c3"},
        {"index": 4, "id": "c4"},
    ]
    assert sources(root) == ["a", "c"]
    moved = await call(client, "move_cells", path="n.ipynb", cells=[1], to=0)
    assert moved["changed"] == [{"index": 0, "id": "c2"}]
    merged = await call(client, "merge_cells", path="n.ipynb", cells=["0:2"])
    assert sources(root) == ["c\na"]
    assert merged["removed"] == [{"index": 1, "id": "c0"}]
    split = await call(client, "split_cell", path="n.ipynb", cell=0, lines=[1])
    assert sources(root) == ["c", "a"]
    assert [c["index"] for c in split["changed"]] == [0, 1]


async def test_edit_cell_type_metadata_and_tags(client: Client, root: Path) -> None:
    write_notebook(root / "n.ipynb", notebook("# title"))
    await call(
        client,
        "edit_cell",
        path="n.ipynb",
        cell=0,
        cell_type="markdown",
        metadata={"k": 1},
        tags=["intro"],
    )
    cell = parse((root / "n.ipynb").read_bytes()).cells[0]
    assert cell["cell_type"] == "markdown"
    assert cell["metadata"] == {"k": 1, "tags": ["intro"]}
    assert "outputs" not in cell
    text = await call_error(client, "edit_cell", path="n.ipynb", cell=0)
    assert "nothing to change" in text


async def test_clear_outputs_and_search(client: Client, root: Path) -> None:
    nb = notebook("import pandas as pd", "df = pd.read_csv('x')", "print('PD')")
    nb.cells[2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "PD\n"}]
    nb.cells[2]["execution_count"] = 4
    write_notebook(root / "n.ipynb", nb)
    found = await call(client, "search_notebook", path="n.ipynb", pattern="pd")
    assert [m["index"] for m in found["matches"]] == [0, 1, 2]
    found = await call(
        client,
        "search_notebook",
        path="n.ipynb",
        pattern=r"read_\w+",
        regex=True,
        case_sensitive=True,
    )
    assert found["matches"] == [
        {"index": 1, "id": "c1", "line": 0, "text": "df = pd.read_csv('x')"}
    ]
    found = await call(
        client, "search_notebook", path="n.ipynb", pattern="PD", case_sensitive=True, outputs=True
    )
    assert {m.get("where", "source") for m in found["matches"]} == {"source", "output"}
    assert "regular expression is invalid" in await call_error(
        client, "search_notebook", path="n.ipynb", pattern="(", regex=True
    )
    cleared = await call(client, "clear_outputs", path="n.ipynb")
    assert [c["id"] for c in cleared["changed"]] == ["c0", "c1", "c2"]
    assert parse((root / "n.ipynb").read_bytes()).cells[2]["outputs"] == []


async def test_undo_reverts_the_last_changes_and_refuses_past_history(
    client: Client, root: Path
) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    await call(client, "delete_cells", path="n.ipynb", cells=[0])
    await call(client, "insert_cells", path="n.ipynb", cells=["z"], index=0)
    assert sources(root) == ["z", "b"]
    undone = await call(client, "undo", path="n.ipynb", steps=2)
    assert undone["undone"] == ["insert cells", "delete cells"]
    assert sources(root) == ["a", "b"]
    text = await call_error(client, "undo", path="n.ipynb")
    assert "nothing to undo" in text


async def test_undo_refuses_when_someone_changed_the_cell(
    client: Client, root: Path, someone_else: SomeoneElse
) -> None:
    write_notebook(root / "n.ipynb", notebook("a"))
    await call(client, "edit_cell", path="n.ipynb", cell="c0", source="mine")
    await someone_else("n.ipynb", "c0", "theirs")
    text = await call_error(client, "undo", path="n.ipynb")
    assert "cell 'c0' was changed after it" in text
    assert sources(root) == ["theirs"]


async def test_list_notebooks_reports_size_and_time(client: Client, root: Path) -> None:
    write_notebook(root / "a.ipynb", notebook("a"))
    write_notebook(root / "sub/b.ipynb", notebook("b"))
    listed = await call(client, "list_notebooks")
    assert [n["path"] for n in listed["notebooks"]] == ["a.ipynb", "sub/b.ipynb"]
    assert all(n["size"] > 0 and n["modified"].endswith("Z") for n in listed["notebooks"])
    assert (await call(client, "list_notebooks", folder="sub"))["count"] == 1


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("read_notebook", {"path": "../x.ipynb"}, "contains '..'"),
        ("read_notebook", {"path": "missing.ipynb"}, "'missing.ipynb' does not exist"),
        (
            "insert_cells",
            {"path": "n.ipynb", "cells": [{"type": "sql", "source": "x"}]},
            'Invalid `cells`: [{"type": "sql", "source": "x"}] (a list): '
            "cells[0].cell_type should be 'code', 'markdown' or 'raw'. It takes a list",
        ),
        (
            "insert_cells",
            {"path": "n.ipynb", "cells": ["x"], "index": 9},
            "insertion index 9 is out of range",
        ),
        ("edit_cell", {"path": "n.ipynb", "cell": "zzz", "source": "x"}, "no cell has id 'zzz'"),
        (
            "edit_cell",
            {"path": "n.ipynb", "cell": 0, "find": "nope", "replace": "x"},
            "does not occur",
        ),
        ("move_cells", {"path": "n.ipynb", "cells": [0], "to": 5}, "can start at 0-1"),
        ("merge_cells", {"path": "n.ipynb", "cells": [0]}, "at least two cells"),
        ("split_cell", {"path": "n.ipynb", "cell": 0, "lines": [3]}, "split lines [3]"),
        ("delete_cells", {"path": "n.ipynb", "cells": []}, "no cells given"),
    ],
)
async def test_bad_input_is_a_clear_error_and_changes_nothing(
    client: Client, root: Path, tool: str, args: dict[str, object], message: str
) -> None:
    write_notebook(root / "n.ipynb", notebook("a", "b"))
    raw = (root / "n.ipynb").read_bytes()
    text = await call_error(client, tool, **args)
    assert message in text
    assert text.startswith(f"Error executing tool {tool}: ")
    assert (root / "n.ipynb").read_bytes() == raw
    assert sorted(p.name for p in root.iterdir()) == ["n.ipynb"]


FIVE = "l1 = 1\nl2 = 2\nl3 = 3\nl4 = 4\nl5 = 5"


async def test_an_edit_after_someone_else_s_change_says_it_was_made_to_the_notebook_as_it_is(
    client: Client, root: Path, someone_else: SomeoneElse
) -> None:
    write_notebook(root / "n.ipynb", notebook("a = 1", "b = 2"))
    await call(client, "read_notebook", path="n.ipynb")
    await someone_else("n.ipynb", "c0", "a = 10")
    done = await call(client, "edit_cell", path="n.ipynb", cell="c1", find="2", replace="3")
    assert done["note"] == (
        "The notebook had changed since you last read it (another client, a person or a "
        "program); your edit was made to it as it is now."
    )
    assert sources(root) == ["a = 10", "b = 3"]


async def test_a_whole_source_edit_is_merged_with_a_change_made_since_the_read(
    client: Client, root: Path, someone_else: SomeoneElse
) -> None:
    """A person edits line 1 after the agent read the cell; the agent then replaces the whole
    source with line 5 changed (no expected_version): both changes are kept, and the result
    says so. Changes to the same line are refused, showing the person's change; nothing is
    written."""
    write_notebook(root / "n.ipynb", notebook("a", FIVE))
    await call(client, "read_notebook", path="n.ipynb")
    theirs = FIVE.replace("l1 = 1", "l1 = 100")
    await someone_else("n.ipynb", "c1", theirs)
    done = await call(
        client, "edit_cell", path="n.ipynb", cell="c1", source=FIVE.replace("l5 = 5", "l5 = 500")
    )
    both = theirs.replace("l5 = 5", "l5 = 500")
    assert sources(root)[1] == both
    assert [(m["index"], m["id"]) for m in done["merged"]] == [(1, "c1")]
    assert "-l1 = 1\n+l1 = 100" in done["merged"][0]["theirs"]
    assert done["note"] == (  # the merge's own note, once, says what happened
        "Cell 1 had been changed since you last read it (by a person or another client); your "
        "new source was merged with that change, which is kept (see merged)."
    )
    assert "+l5 = 500" in done["diff"]
    assert "l1" not in done["diff"].replace("l1 = 100\n", "")  # the diff is only the agent's

    # Now the agent's base is `both`; the person and the agent change the same line.
    await someone_else("n.ipynb", "c1", both.replace("l5 = 500", "l5 = 7"))
    text = await call_error(
        client, "edit_cell", path="n.ipynb", cell="c1", source=both.replace("l5 = 500", "l5 = 9")
    )
    assert "was changed since you last read it" in text
    assert "-l5 = 500\n+l5 = 7\nRead the cell again" in text  # the hint after the diff
    assert "Nothing was changed" in text
    assert sources(root)[1] == both.replace("l5 = 500", "l5 = 7")
    # Having read it again, the agent's whole-source edit applies as written.
    await call(client, "read_cell", path="n.ipynb", cell="c1")
    again = await call(client, "edit_cell", path="n.ipynb", cell="c1", source="l5 = 9")
    assert "merged" not in again
    assert sources(root)[1] == "l5 = 9"


async def test_replace_in_notebook_renames_across_cells_in_one_undoable_edit(
    client: Client, root: Path
) -> None:
    write_notebook(
        root / "n.ipynb",
        notebook("df = load()\ndf.head()", "pdf = df.describe()", "plot(df)", "print('df')"),
    )
    read = await call(client, "read_notebook", path="n.ipynb")
    done = await call(
        client,
        "replace_in_notebook",
        path="n.ipynb",
        find=r"\bdf\b",
        replace="sales",
        regex=True,
        cells=["0:3"],
        expected_version=read["version"],
    )
    assert sources(root) == [
        "sales = load()\nsales.head()",
        "pdf = sales.describe()",
        "plot(sales)",
        "print('df')",
    ]
    assert done["replacements"] == 4
    assert [(d["index"], d["id"], d["replacements"]) for d in done["diffs"]] == [
        (0, "c0", 2),
        (1, "c1", 1),
        (2, "c2", 1),
    ]
    assert "-pdf = df.describe()\n+pdf = sales.describe()" in done["diffs"][1]["diff"]
    assert [c["id"] for c in done["changed"]] == ["c0", "c1", "c2"]
    # A stale version is refused; one undo reverts the whole rename.
    stale = await call_error(
        client,
        "replace_in_notebook",
        path="n.ipynb",
        find="x",
        replace="y",
        expected_version=read["version"],
    )
    assert "Nothing was changed" in stale
    await call(client, "undo", path="n.ipynb")
    assert sources(root)[:3] == ["df = load()\ndf.head()", "pdf = df.describe()", "plot(df)"]
    # Literal text (a regex character is just a character); groups with regex.
    await call(client, "replace_in_notebook", path="n.ipynb", find="(df)", replace="(data)")
    assert sources(root)[2] == "plot(data)"
    await call(
        client,
        "replace_in_notebook",
        path="n.ipynb",
        find=r"print\('(\w+)'\)",
        replace=r"print(\1.upper())",
        regex=True,
        cells=["c3"],
    )
    assert sources(root)[3] == "print(df.upper())"
    missing = await call_error(
        client, "replace_in_notebook", path="n.ipynb", find="nope", replace="x"
    )
    assert "'nope' does not occur in any cell's source; nothing was changed." in missing
    bad = await call_error(
        client, "replace_in_notebook", path="n.ipynb", find="(a", replace="x", regex=True
    )
    assert "regular expression is invalid" in bad
