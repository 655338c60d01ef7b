"""What an agent pays for a result, in every mode: a run reads as text a person would write (the
structured result keeps every field), a long chained traceback keeps its last frames, images
come on the call that makes them when asked for, a restarted kernel says nothing of the
server's folders."""

from __future__ import annotations

import base64
import io
import json

import pytest
from mcp_types import ImageContent, TextContent

from nbrelay.notebook.model import new_notebook
from nbrelay.tools.run_text import TRACEBACK_CHARS
from tests.helpers import (
    PATIENCE,
    call,
    call_error,
    code,
    data_of,
    text_of,
    write_notebook,
)
from tests.modes import Mode

pytestmark = pytest.mark.anyio

# Forty frames deep, raised while handling another error: a chained traceback of several
# thousand characters, as a library's failure makes one.
CHAINED = """def dig(n):
    if n == 0:
        raise KeyError('missing')
    return dig(n - 1)

def load():
    try:
        dig(40)
    except KeyError as exc:
        raise ValueError('could not load the table') from exc

load()"""

PLOT = """import matplotlib.pyplot as plt
plt.figure(figsize=(24, 6), dpi=100)
plt.plot([1, 3, 2, 4])
plt.show()"""


@pytest.fixture
def notebook_of_runs(anymode: Mode) -> str:
    write_notebook(
        anymode.local("runs.ipynb"),
        new_notebook(
            [
                code("print('hi')\n1 + 1", "c0"),
                code(CHAINED, "c1"),
                code("x = 1", "c2"),
                code("x = 2", "c3"),
                code(PLOT, "c4"),
            ]
        ),
    )
    return anymode.path("runs.ipynb")


@pytest.mark.kernel
async def test_a_run_reads_as_text_and_keeps_its_structured_result(
    anymode: Mode, notebook_of_runs: str
) -> None:
    c, p = anymode.client, notebook_of_runs
    result = await c.call_tool("execute", {"path": p, "cells": ["c0"], "wait": PATIENCE})
    data = data_of(result)  # the text agrees with the structured result
    count = data["cells"][0]["execution_count"]
    seconds = data["cells"][0]["seconds"]  # said in the text only from a second on
    took = f" {seconds:g} s" if seconds >= 1 else ""
    assert text_of(result) == f"cell 0 (c0) [{count}] ok{took}\nhi\n2"
    # The structured result is the machine form, every field as before.
    assert data["path"] == p
    assert data["status"] == "done"
    assert data["version"]
    assert data["cells"][0]["outputs"] == [
        {"output": 0, "type": "stream", "text": "hi\n", "name": "stdout"},
        {"output": 1, "type": "execute_result", "text": "2"},
    ]
    # Scratch code: no cell, no count.
    scratch = await c.call_tool("execute", {"path": p, "code": "print(7 * 6)"})
    assert text_of(scratch).splitlines()[1:] == ["42"]
    assert text_of(scratch).startswith("ok")

    # An error stops the run: the cells after it are said skipped in one line.
    stopped = await c.call_tool("execute", {"path": p, "cells": ":", "wait": PATIENCE})
    data = data_of(stopped)
    assert [x["status"] for x in data["cells"]] == ["ok", "error", "skipped", "skipped", "skipped"]
    lines = text_of(stopped).splitlines()
    assert lines[-2:] == ["cells 2-4 skipped", "note: stopped early: cell 1 ended with error"]
    assert len(text_of(stopped)) < len(json.dumps(data, separators=(",", ":"))) * 0.8


@pytest.mark.kernel
async def test_a_long_chained_traceback_keeps_its_last_frames_and_says_what_it_left_out(
    anymode: Mode, notebook_of_runs: str
) -> None:
    c, p = anymode.client, notebook_of_runs
    result = await c.call_tool("execute", {"path": p, "cells": ["c1"], "wait": PATIENCE})
    data = data_of(result)
    whole = data["cells"][0]["outputs"][0]["text"]  # the structured result keeps it whole
    assert len(whole) > 2 * TRACEBACK_CHARS
    assert whole.count("in dig(n)") >= 40
    text = text_of(result)
    shown = text.split("\n", 1)[1]  # after the cell's header line
    assert len(shown) <= TRACEBACK_CHARS + 200
    assert shown.rstrip().endswith("ValueError: could not load the table")
    assert "in load()" in shown  # the last frame
    assert "-----" not in shown  # IPython's rule, decoration only
    left_out = shown.splitlines()[0]
    assert "earlier frame(s) left out" in left_out
    frames = int(left_out.split("[… ")[1].split(" ")[0])
    assert frames + shown.count("Cell In[") >= 40
    assert f'read_output(path="{p}", cell="c1", output=0) shows the whole traceback' in left_out
    full = await call(c, "read_output", path=p, cell="c1", length=100_000)
    assert full["text"].endswith("ValueError: could not load the table")
    assert full["text"].count("in dig(n)") >= 40


@pytest.mark.kernel
async def test_images_come_with_the_run_when_asked_and_are_downscaled(
    anymode: Mode, notebook_of_runs: str
) -> None:
    from PIL import Image

    c, p = anymode.client, notebook_of_runs
    plain = await c.call_tool("execute", {"path": p, "cells": ["c4"], "wait": PATIENCE})
    assert not [b for b in plain.content if isinstance(b, ImageContent)]
    assert f'read_output(path="{p}", cell="c4", output=0) returns the image' in text_of(plain)

    shown = await c.call_tool(
        "execute", {"path": p, "cells": ["c4"], "images": True, "wait": PATIENCE}
    )
    data = data_of(shown)
    assert data["cells"][0]["outputs"][0]["image"] == "image/png"
    assert isinstance(shown.content[0], TextContent)
    assert "returns the image" not in text_of(shown)
    images = [b for b in shown.content if isinstance(b, ImageContent)]
    assert len(images) == 1
    with Image.open(io.BytesIO(base64.b64decode(images[0].data))) as img:
        assert max(img.size) == 1568  # drawn about 2,400 px wide
    # As read_output gives it.
    read = await c.call_tool("read_output", {"path": p, "cell": "c4"})
    assert [b.data for b in read.content if isinstance(b, ImageContent)] == [images[0].data]


@pytest.mark.kernel
async def test_a_restarted_kernel_shows_no_process_times_or_server_folder(
    anymode: Mode, notebook_of_runs: str
) -> None:
    c, p = anymode.client, notebook_of_runs
    await call(c, "execute", path=p, cells=["c2"], wait=PATIENCE)
    result = await c.call_tool("restart_kernel", {"path": p})
    restarted = data_of(result)
    assert restarted["note"] == "kernel restarted"
    assert set(restarted["kernel"]) <= {"path", "kernel", "state", "restarts"}
    assert restarted["kernel"]["path"] == p
    assert str(anymode.folder) not in text_of(result)
    interrupted = await c.call_tool("interrupt_kernel", {"path": p})
    assert set(data_of(interrupted)["kernel"]) <= {"path", "kernel", "state", "restarts"}
    listed = await c.call_tool("list_kernels", {})
    assert str(anymode.folder) not in text_of(listed)
    mine = [k for k in data_of(listed)["kernels"] if k["path"] == p]
    assert len(mine) == 1
    assert "cwd" not in mine[0]


async def test_cell_type_is_one_name_and_type_is_taken_for_it(anymode: Mode) -> None:
    c, p = anymode.client, anymode.path("types.ipynb")
    await call(c, "create_notebook", path=p, cells=[{"cell_type": "markdown", "source": "# A"}])
    await call(
        c,
        "insert_cells",
        path=p,
        cells=[{"cell_type": "raw", "source": "r"}, {"type": "markdown", "source": "m"}, "x"],
    )
    read = await call(c, "read_notebook", path=p)
    assert [x["type"] for x in read["cells"]] == ["markdown", "raw", "markdown", "code"]
    # edit_cell takes the same name, and type for it.
    await call(c, "edit_cell", path=p, cell=3, cell_type="markdown")
    await call(c, "edit_cell", path=p, cell=1, type="code")
    read = await call(c, "read_notebook", path=p)
    assert [x["type"] for x in read["cells"]] == ["markdown", "code", "markdown", "markdown"]
    raw = anymode.local("types.ipynb").read_bytes() if not anymode.collaborative else None
    both = await call_error(c, "edit_cell", path=p, cell=1, type="raw", cell_type="markdown")
    assert "give one of them (type is a synonym of cell_type)" in both
    both = await call_error(
        c, "insert_cells", path=p, cells=[{"type": "raw", "cell_type": "code", "source": "x"}]
    )
    assert "give one of them (type is a synonym of cell_type)" in both
    assert len((await call(c, "read_notebook", path=p))["cells"]) == 4
    if raw is not None:
        assert anymode.local("types.ipynb").read_bytes() == raw
    # The listing names it cell_type.
    listed = await c.list_tools()
    insert = next(t for t in listed.tools if t.name == "insert_cells")
    assert "cell_type" in json.dumps(insert.input_schema)
    assert '"type": {"default": "code"' not in json.dumps(insert.input_schema)


NOISE = """import io, os
from PIL import Image
from IPython.display import Image as Show, display
buf = io.BytesIO()
Image.frombytes("RGB", (450, 450), os.urandom(450 * 450 * 3)).save(buf, "PNG")
display(Show(buf.getvalue()))"""


@pytest.mark.kernel
@pytest.mark.parametrize("anymode", ["files"], indirect=True)  # the bound is the tool's alone
async def test_the_images_of_a_run_are_bounded_and_the_rest_named(anymode: Mode) -> None:
    """Two photos of noise (about 810,000 base64 characters each, which downscaling does not
    shrink): the first comes with the run, the second says which read_output call returns it."""
    from nbrelay.tools.runs import RUN_IMAGE_CHARS

    c, p = anymode.client, anymode.path("noise.ipynb")
    write_notebook(
        anymode.local("noise.ipynb"), new_notebook([code(NOISE, "n0"), code(NOISE, "n1")])
    )
    shown = await c.call_tool("execute", {"path": p, "cells": ":", "images": True, "wait": 300})
    data = data_of(shown)
    assert [o["image"] for x in data["cells"] for o in x["outputs"]] == ["image/png"] * 2
    images = [b for b in shown.content if isinstance(b, ImageContent)]
    assert len(images) == 1
    assert 700_000 < len(images[0].data) <= RUN_IMAGE_CHARS
    text = text_of(shown)
    assert f'read_output(path="{p}", cell="n0", output=0)' not in text
    assert f'read_output(path="{p}", cell="n1", output=0) returns the image' in text
