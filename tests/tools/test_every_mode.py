"""Every canonical tool in every mode: the same calls, the same results and the same file on disk
after ``save_notebook`` in file mode, live mode (a JupyterLab's rooms) and extension mode (nbrelay
inside the Jupyter Server), so that no mode falls behind unnoticed (``tests.modes``).

Where a mode legitimately differs, the difference is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbrelay.notebook.model import new_notebook
from tests.helpers import PATIENCE, call, call_error, code, markdown, write_notebook
from tests.modes import Mode

pytestmark = pytest.mark.anyio


def on_disk(path: Path) -> Any:
    """The file as nbformat reads it, valid (version 4.5, every cell with an id)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    return nb


async def saved(mode: Mode, name: str) -> Any:
    """``save_notebook``, then the file as it is on disk."""
    done = await call(mode.client, "save_notebook", path=mode.path(name))
    assert done["path"] == mode.path(name)
    assert done["saved"] is True
    return on_disk(mode.local(name))


def sample(name: str, folder: Path) -> None:
    """A notebook as a person left it: a heading, code with an output, more code."""
    run = code(
        "x = 6\nx * 7",
        "c1",
        [
            {
                "output_type": "execute_result",
                "data": {"text/plain": "42"},
                "metadata": {},
                "execution_count": 1,
            }
        ],
    )
    write_notebook(
        folder / name,
        new_notebook(
            [markdown("# Title", "c0"), run, code("for i in range(3):\n    x += i", "c2")]
        ),
    )


async def test_reading_every_edit_and_undo_reach_the_file(anymode: Mode) -> None:
    m, c = anymode, anymode.client
    sample("n.ipynb", m.folder)
    p = m.path("n.ipynb")
    read = await call(c, "read_notebook", path=p)
    assert read["cell_count"] == 3
    assert [(x["index"], x["id"], x["type"]) for x in read["cells"]] == [
        (0, "c0", "markdown"),
        (1, "c1", "code"),
        (2, "c2", "code"),
    ]
    assert read["cells"][1]["output_summary"] == "[1 output] 42"
    page = await call(c, "read_notebook", path=p, start=1, limit=1, full=True)
    assert [x["id"] for x in page["cells"]] == ["c1"]
    assert page["next_start"] == 2
    assert page["cells"][0]["outputs"][0]["text"] == "42"
    assert (await call(c, "read_cell", path=p, cell=-1))["cell"]["source"].startswith("for i")

    ins = await call(c, "insert_cells", path=p, cells=["y = 1", "z = 2"], after="c1")
    new = [x["id"] for x in ins["changed"]]
    assert [x["index"] for x in ins["changed"]] == [2, 3]
    await call(c, "edit_cell", path=p, cell=new[0], find="1", replace="10")
    await call(c, "edit_cell", path=p, cell="c2", source="total = x")
    await call(c, "edit_cell", path=p, cell="c0", cell_type="raw", metadata={"k": 1}, tags=["t"])
    moved = await call(c, "move_cells", path=p, cells=[new[1]], to=0)
    assert moved["changed"] == [{"index": 0, "id": new[1]}]
    merged = await call(c, "merge_cells", path=p, cells=[new[0], "c2"])
    assert [x["id"] for x in merged["removed"]] == ["c2"]
    split = await call(c, "split_cell", path=p, cell=new[0], lines=[1])
    assert len(split["changed"]) == 2
    renamed = await call(c, "replace_in_notebook", path=p, find="total", replace="sum_")
    assert renamed["replacements"] == 1
    found = await call(c, "search_notebook", path=p, pattern="sum_")
    assert [(f["id"], f["text"]) for f in found["matches"]] == [
        (split["changed"][1]["id"], "sum_ = x")
    ]
    gone = await call(c, "delete_cells", path=p, cells=[new[1]])
    assert gone["removed"] == [{"index": 0, "id": new[1]}]
    cleared = await call(c, "clear_outputs", path=p, cells=["c1"])
    assert [x["id"] for x in cleared["changed"]] == ["c1"]

    nb = await saved(m, "n.ipynb")
    assert [(x.cell_type, x.source) for x in nb.cells] == [
        ("raw", "# Title"),
        ("code", "x = 6\nx * 7"),
        ("code", "y = 10"),
        ("code", "sum_ = x"),
    ]
    assert nb.cells[0].metadata == {"k": 1, "tags": ["t"]}
    assert nb.cells[1].outputs == []
    assert nb.cells[1].execution_count is None
    ids = [x.id for x in nb.cells]
    assert ids[:2] == ["c0", "c1"]
    view = await call(c, "read_notebook", path=p)
    assert [x["id"] for x in view["cells"]] == ids

    # Undo walks back through the history: the delete, then the rename.
    undone = await call(c, "undo", path=p, steps=2)
    assert undone["undone"] == ["delete cells", "replace in cells"]
    nb = await saved(m, "n.ipynb")
    assert [x.source for x in nb.cells] == [
        "z = 2",
        "# Title",
        "x = 6\nx * 7",
        "y = 10",
        "total = x",
    ]


async def test_create_list_metadata_export_and_import(anymode: Mode) -> None:
    m, c = anymode, anymode.client
    created = await call(
        c,
        "create_notebook",
        path=m.path("a.ipynb"),
        cells=["a = 1", {"type": "markdown", "source": "# A"}],
    )
    assert [x["index"] for x in created["changed"]] == [0, 1]
    refused = await call_error(c, "create_notebook", path=m.path("a.ipynb"))
    assert f"'{m.path('a.ipynb')}' already exists" in refused
    empty = await call(c, "create_notebook", path=m.path("sub/b.ipynb"))
    assert "changed" not in empty or empty["changed"] == []
    assert on_disk(m.local("sub/b.ipynb")).cells == []  # no cells, as in file mode
    nb = await saved(m, "a.ipynb")
    assert [(x.cell_type, x.source) for x in nb.cells] == [("code", "a = 1"), ("markdown", "# A")]
    assert nb.metadata.kernelspec.name == "python3"

    # Listing, with paging and a folder.
    folder = m.prefix.rstrip("/") or "."
    listed = await call(c, "list_notebooks", folder=folder, recursive=True)
    assert [n["path"] for n in listed["notebooks"]] == [m.path("a.ipynb"), m.path("sub/b.ipynb")]
    assert all(n["size"] > 0 and n["modified"].endswith("Z") for n in listed["notebooks"])
    first = await call(c, "list_notebooks", folder=folder, recursive=True, limit=1)
    assert [n["path"] for n in first["notebooks"]] == [m.path("a.ipynb")]
    rest = await call(
        c, "list_notebooks", folder=folder, recursive=True, limit=1, start=first["next_start"]
    )
    assert [n["path"] for n in rest["notebooks"]] == [m.path("sub/b.ipynb")]
    assert (await call(c, "list_notebooks", folder=m.path("sub")))["count"] == 1

    # The notebook's metadata: read, merge, delete a key, undo.
    meta = await call(c, "notebook_metadata", path=m.path("a.ipynb"))
    assert meta["metadata"]["kernelspec"]["name"] == "python3"
    await call(
        c,
        "notebook_metadata",
        path=m.path("a.ipynb"),
        metadata={"title": "A", "language_info": None},
        expected_version=meta["version"],
    )
    stored = (await saved(m, "a.ipynb")).metadata
    assert stored["title"] == "A"
    assert "language_info" not in stored
    assert (await call(c, "undo", path=m.path("a.ipynb")))["undone"] == ["set notebook metadata"]
    assert "title" not in (await saved(m, "a.ipynb")).metadata

    # Export inline and to a file, and import it back as a new notebook.
    inline = await call(c, "export_notebook", path=m.path("a.ipynb"), format="percent")
    script = inline["content"]
    assert "# %%\na = 1" in script
    assert "# %% [markdown]\n# # A" in script
    if m.collaborative:
        # Files other than notebooks are written and read in file mode only; the way out is
        # the inline export and an import from content.
        for tool, args in (
            (
                "export_notebook",
                {"path": m.path("a.ipynb"), "format": "percent", "to": m.path("a.py")},
            ),
            ("import_notebook", {"path": m.path("b.ipynb"), "source": m.path("a.ipynb")}),
        ):
            refused = await call_error(c, tool, **args)
            assert "needs file mode (--root)" in refused
            assert "import from content" in refused
        assert not m.local("a.py").exists()
        assert not m.local("b.ipynb").exists()
        await call(c, "import_notebook", path=m.path("b.ipynb"), content=script, format="percent")
    else:
        await call(
            c, "export_notebook", path=m.path("a.ipynb"), format="percent", to=m.path("a.py")
        )
        assert m.local("a.py").read_text() == script
        await call(c, "import_notebook", path=m.path("b.ipynb"), source=m.path("a.py"))
    back = await saved(m, "b.ipynb")
    assert [(x.cell_type, x.source) for x in back.cells] == [("code", "a = 1"), ("markdown", "# A")]
    replaced = await call(
        c,
        "import_notebook",
        path=m.path("b.ipynb"),
        content="# %%\nb = 2\n",
        format="percent",
        overwrite=True,
    )
    assert replaced["path"] == m.path("b.ipynb")
    assert [x.source for x in (await saved(m, "b.ipynb")).cells] == ["b = 2"]
    exported = await call(c, "export_notebook", path=m.path("b.ipynb"), format="ipynb")
    assert [nbformat.reads(exported["content"], as_version=4).cells[0].source] == ["b = 2"]
    # An export as a notebook is written as one, in every mode.
    done = await call(
        c, "export_notebook", path=m.path("b.ipynb"), format="ipynb", to=m.path("c.ipynb")
    )
    assert done["saved"] == [m.path("c.ipynb")], done
    assert [x.source for x in (await saved(m, "c.ipynb")).cells] == ["b = 2"]


async def test_stale_edits_and_bad_input_change_nothing(anymode: Mode) -> None:
    m, c = anymode, anymode.client
    sample("n.ipynb", m.folder)
    p = m.path("n.ipynb")
    v1 = (await call(c, "read_notebook", path=p))["version"]
    await call(c, "edit_cell", path=p, cell="c2", source="mine", expected_version=v1)
    before = (await saved(m, "n.ipynb")).cells
    raw = m.local("n.ipynb").read_bytes()
    stale = await call_error(c, "edit_cell", path=p, cell=0, source="z", expected_version=v1)
    assert f"changed since version {v1}" in stale
    errors: list[tuple[str, dict[str, Any], str]] = [
        ("read_cell", {"path": p, "cell": 5}, "cell index 5 is out of range"),
        ("edit_cell", {"path": p, "cell": "zzz", "source": "x"}, "no cell has id 'zzz'"),
        ("edit_cell", {"path": p, "cell": 1, "find": "nope", "replace": "x"}, "does not occur"),
        ("move_cells", {"path": p, "cells": [0], "to": 9}, "can start at 0-2"),
        ("merge_cells", {"path": p, "cells": [0]}, "at least two cells"),
        ("delete_cells", {"path": p, "cells": []}, "no cells given"),
        ("insert_cells", {"path": p, "cells": ["x"], "index": 9}, "out of range"),
        ("search_notebook", {"path": p, "pattern": "(", "regex": True}, "is invalid"),
        ("undo", {"path": m.path("other.ipynb")}, "there is nothing to undo"),
        (
            "read_notebook",
            {"path": m.path("missing.ipynb")},
            f"'{m.path('missing.ipynb')}' does not exist",
        ),
        ("read_notebook", {"path": "../x.ipynb"}, "contains '..'"),
        (
            "create_notebook",
            {"path": m.path("bad.ipynb"), "cells": [{"type": "sql"}]},
            "cells[0].cell_type",
        ),
    ]
    for tool, args, message in errors:
        text = await call_error(c, tool, **args)
        assert message in text, (tool, text)
        assert text.startswith(f"Error executing tool {tool}: ")
    assert (await saved(m, "n.ipynb")).cells == before
    assert m.local("n.ipynb").read_bytes() == raw
    # Jupyter Server keeps its checkpoints beside the notebook; nothing else was created.
    hidden = [".ipynb_checkpoints"] if m.collaborative else []
    assert sorted(x.name for x in m.folder.iterdir()) == [*hidden, "n.ipynb"]


async def test_a_preview_written_back_as_the_whole_source_is_refused(anymode: Mode) -> None:
    """read_notebook shows long cells cut short (600 characters, or 8 lines); an agent that
    appends to what it was shown and writes that back as the whole source would delete the rest
    of the cell, so the edit is refused, even with the version it read, and nothing changes."""
    m, c = anymode, anymode.client
    wide = "x = [" + ", ".join(str(i) for i in range(200)) + "]"
    tall = "\n".join(f"line_{i} = {i}" for i in range(12))
    write_notebook(m.folder / "n.ipynb", new_notebook([code(wide, "w"), code(tall, "t")]))
    p = m.path("n.ipynb")
    read = await call(c, "read_notebook", path=p)
    shown = {x["id"]: x["source"] for x in read["cells"]}
    assert shown["w"] != wide  # both cut short
    assert shown["t"] != tall
    before = (await saved(m, "n.ipynb")).cells
    for cid in ("w", "t"):
        text = await call_error(
            c,
            "edit_cell",
            path=p,
            cell=cid,
            source=shown[cid] + "\n# mine",
            expected_version=read["version"],
        )
        assert "holds the shortened preview of the cell" in text, text
        assert "Nothing was changed" in text, text
        assert "read_cell" in text, text
    assert (await saved(m, "n.ipynb")).cells == before
    # The whole source, as read_cell gives it, is taken.
    whole = (await call(c, "read_cell", path=p, cell="w"))["cell"]["source"]
    assert whole == wide
    await call(c, "edit_cell", path=p, cell="w", source=whole + "\n# mine")
    assert (await saved(m, "n.ipynb")).cells[0].source == wide + "\n# mine"


@pytest.mark.kernel
async def test_execute_saves_outputs_and_the_kernel_tools_work(anymode: Mode) -> None:
    m, c = anymode, anymode.client
    write_notebook(
        m.local("sub/run.ipynb"),
        new_notebook(
            [
                code("import json\ndata = {'k': [1, 2]}\nlen(data['k'])", "c0"),
                code("print('hi')", "c1"),
            ]
        ),
    )
    p = m.path("sub/run.ipynb")
    ran = await call(c, "execute", path=p, cells="all", wait=PATIENCE)
    assert ran["status"] == "done", ran
    assert [x["status"] for x in ran["cells"]] == ["ok", "ok"]
    assert ran["cells"][1]["outputs"][0]["text"] == "hi\n"
    nb = await saved(m, "sub/run.ipynb")
    assert nb.cells[0].outputs[0]["data"]["text/plain"] == "2"
    assert nb.cells[1].outputs[0]["text"] == "hi\n"
    assert nb.cells[0].execution_count is not None
    assert nb.cells[1].execution_count is not None
    out = await call(c, "read_output", path=p, cell=1)
    assert out["text"] == "hi\n"
    kernels = (await call(c, "list_kernels"))["kernels"]
    assert p in [k["path"] for k in kernels]
    variables = await call(c, "list_variables", path=p)
    assert {"data", "json"} <= {v["name"] for v in variables["variables"]}
    seen = await call(c, "inspect_variable", path=p, name="data")
    assert "'k'" in seen["info"]["repr"]

    # A long run returns a handle; polls, then a cancel, end it; the kernel stays usable.
    long = await call(
        c, "execute", path=p, code="import time\nprint('go')\ntime.sleep(60)", wait=0.2
    )
    assert long["status"] == "running"
    polled = await call(c, "get_execution", handle=long["handle"], wait=0.5)
    assert polled["status"] == "running"
    cancelled = await call(c, "cancel_execution", handle=long["handle"])
    assert cancelled["cells"][0]["status"] == "interrupted", cancelled
    assert "kernel interrupted; variables kept" in cancelled["cells"][0]["note"]
    again = await call(c, "execute", path=p, code="print(json.dumps(data))", wait=PATIENCE)
    assert again["cells"][0]["outputs"][0]["text"] == '{"k": [1, 2]}\n'
    assert (await call(c, "interrupt_kernel", path=p))["note"] == "interrupted"

    # Kernel state through a restart, kept beside the notebook (in a folder of the root).
    missing = await call_error(c, "restore_kernel_state", path=p)
    assert f"{p!r} has no saved kernel state" in missing
    assert (await call(c, "save_kernel_state", path=p))["names"] == ["data", "json", "time"]
    assert m.local("sub/.nbrelay-state/run.ipynb.dill").is_file()
    restarted = await call(c, "restart_kernel", path=p)
    assert restarted["note"] == "kernel restarted"
    lost = await call(c, "execute", path=p, code="data", wait=PATIENCE)
    assert lost["cells"][0]["status"] == "error"
    assert (await call(c, "restore_kernel_state", path=p))["names"] == ["data", "json", "time"]
    back = await call(c, "execute", path=p, code="data['k'][1]", wait=PATIENCE)
    assert back["cells"][0]["outputs"][0]["text"] == "2"
    refused = await call_error(c, "install_packages", path=p, packages=["-e ."])
    assert "options such as --index-url or -e are refused" in refused
    assert (await call(c, "restart_kernel", path=p, shutdown=True))["note"] == "kernel shut down"
    assert p not in [k["path"] for k in (await call(c, "list_kernels"))["kernels"]]
    # Scratch code ran in the kernel only: the notebook is what the cells' run left.
    assert [x.source for x in (await saved(m, "sub/run.ipynb")).cells][1] == "print('hi')"


@pytest.mark.kernel
async def test_a_cell_that_draws_a_dozen_plots_keeps_them_all(anymode: Mode) -> None:
    """Twelve ~90 KB images and a flood of text in one cell (a loop over columns with its log):
    every image reaches the file, as Jupyter keeps them; the text is bounded as before. Images
    shared the text's 1,000,000 characters, and five of the twelve were dropped."""
    m, c = anymode, anymode.client
    draw = (
        "import base64, os\n"
        "from IPython.display import display\n"
        "for i in range(12):\n"
        "    print(f'column {i}: ' + 'x' * 100_000)\n"
        "    png = base64.b64encode(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(90_000)).decode()\n"
        "    display({'image/png': png, 'text/plain': f'<Figure {i}>'}, raw=True)"
    )
    write_notebook(m.local("plots.ipynb"), new_notebook([code(draw, "p0")]))
    ran = await call(c, "execute", path=m.path("plots.ipynb"), cells="all", wait=PATIENCE)
    assert ran["cells"][0]["status"] == "ok", ran
    nb = await saved(m, "plots.ipynb")
    outputs = nb.cells[0].outputs
    figures = [o["data"]["text/plain"] for o in outputs if o["output_type"] == "display_data"]
    assert figures == [f"<Figure {i}>" for i in range(12)]
    text = "".join(o["text"] for o in outputs if o["output_type"] == "stream")
    assert "-character limit stored per cell: " in text  # 1.2 MB printed: bounded, said
    assert len(text) < 1_100_000
