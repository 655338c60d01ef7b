"""The tools that run code, through the in-process MCP client, on real kernels."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ImageContent

from tests.helpers import PATIENCE, call, call_error, notebook, write_notebook
from tests.kernels.conftest import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_mode() -> str:
    """Local kernels run notebooks served from files (live mode runs them on the server)."""
    return "files"


def stored(root: Path, name: str = "nb.ipynb") -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads((root / name).read_text())["cells"]
    return cells


async def test_execute_runs_cells_by_index_id_and_range_and_saves_outputs(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", notebook("x = 20", "x + 1", "print(x * 2)", "x + 3"))
    result = await call(client, "execute", path="nb.ipynb", cells=[0, "c1", "2:4"])
    assert result["status"] == "done"
    assert "handle" not in result
    assert [(c["index"], c["id"], c["status"], c["execution_count"]) for c in result["cells"]] == [
        (0, "c0", "ok", 1),
        (1, "c1", "ok", 2),
        (2, "c2", "ok", 3),
        (3, "c3", "ok", 4),
    ]
    assert result["cells"][1]["outputs"] == [{"output": 0, "type": "execute_result", "text": "21"}]
    assert result["cells"][2]["outputs"] == [
        {"output": 0, "type": "stream", "text": "40\n", "name": "stdout"}
    ]
    cells = stored(root)
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4]
    assert cells[3]["outputs"][0]["data"]["text/plain"] == ["23"]
    read = await call(client, "read_notebook", path="nb.ipynb")
    assert read["version"] == result["version"]


async def test_execute_without_cells_or_code_is_refused_and_runs_nothing(
    client: Client, root: Path
) -> None:
    """It used to run every cell (and so re-ran a cell that wrote a file)."""
    write_notebook(root / "nb.ipynb", notebook("open('side-effect', 'a').write('x')", "1 + 1"))
    before = (root / "nb.ipynb").read_bytes()
    error = await call_error(client, "execute", path="nb.ipynb")
    assert error == (
        "Error executing tool execute: no cells and no code given: execute runs only what it is "
        'asked to run. To run every cell pass cells=[":"] (or cells="all"); some cells: '
        'cells=[0, "a1b2c3d4", "2:5"]; scratch code: code="print(1)".'
    )
    assert (root / "nb.ipynb").read_bytes() == before
    assert not (root / "side-effect").exists()
    kernels = await call(client, "list_kernels")
    assert kernels["kernels"] == []


@pytest.mark.parametrize("every", ["all", ["all"], [":"], ":"])
async def test_every_cell_runs_when_asked_for(client: Client, root: Path, every: object) -> None:
    write_notebook(root / "nb.ipynb", notebook("x = 20", "x + 1"))
    result = await call(client, "execute", path="nb.ipynb", cells=every)
    assert [(c["index"], c["status"]) for c in result["cells"]] == [(0, "ok"), (1, "ok")]
    one = await call(client, "execute", path="nb.ipynb", cells=1)  # one value for the list
    assert one["cells"][0]["outputs"][0]["text"] == "21"


async def test_stop_on_error_skips_the_cells_after_the_failing_one(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", notebook("1/0", "print('never')"))
    result = await call(client, "execute", path="nb.ipynb", cells=[":"])
    assert [c["status"] for c in result["cells"]] == ["error", "skipped"]
    assert "ZeroDivisionError: division by zero" in result["cells"][0]["outputs"][0]["text"]
    assert "\x1b[" not in result["cells"][0]["outputs"][0]["text"]
    assert result["note"] == "stopped early: cell 0 ended with error"
    assert stored(root)[1]["outputs"] == []
    result = await call(client, "execute", path="nb.ipynb", cells=[":"], stop_on_error=False)
    assert [c["status"] for c in result["cells"]] == ["error", "ok"]


async def test_scratch_code_runs_in_the_kernel_without_changing_the_notebook(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", notebook("y = 5"))
    await call(client, "execute", path="nb.ipynb", cells=[0])
    before = (root / "nb.ipynb").read_bytes()
    result = await call(client, "execute", path="nb.ipynb", code="print(y * 3)")
    assert result["cells"] == [
        {
            "status": "ok",
            "seconds": result["cells"][0]["seconds"],
            "outputs": [{"output": 0, "type": "stream", "text": "15\n", "name": "stdout"}],
        }
    ]
    assert (root / "nb.ipynb").read_bytes() == before
    error = await call_error(client, "execute", path="nb.ipynb", cells=[0], code="1")
    assert "give either cells" in error


async def test_a_long_run_returns_a_handle_then_polls_show_only_new_output(
    client: Client, root: Path
) -> None:
    code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.5)"
    write_notebook(root / "nb.ipynb", notebook(code))
    first = await call(client, "execute", path="nb.ipynb", cells=[0], wait=0.6)
    assert first["status"] == "running"
    handle = first["handle"]
    assert first["note"] == f'still running: poll get_execution(handle="{handle}")'
    seen = "".join(o["text"] for c in first["cells"] for o in c.get("outputs", []))
    done: dict[str, Any] = {}
    with anyio.fail_after(PATIENCE):
        while done.get("status") != "done":
            done = await call(client, "get_execution", handle=handle, wait=5)
            seen += "".join(o["text"] for c in done["cells"] for o in c.get("outputs", []))
    assert seen == "tick 0\ntick 1\ntick 2\ntick 3\n"
    assert stored(root)[0]["outputs"][0]["text"] == ["tick 0\n", "tick 1\n", "tick 2\n", "tick 3\n"]
    assert "unknown" not in await call_error(client, "get_execution", handle="x999")


async def test_progress_notifications_carry_what_the_cell_printed(
    client: Client, root: Path
) -> None:
    # The cell keeps printing until the test has had a progress notification (it creates 'go').
    code = (
        "import os, time\nprint('loading data', flush=True)\n"
        "while not os.path.exists('go'):\n    print('.', end='', flush=True)\n    time.sleep(0.5)\n"
        "print('done')"
    )
    write_notebook(root / "nb.ipynb", notebook(code))
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        (root / "go").touch()

    with anyio.fail_after(PATIENCE):
        result = await client.call_tool(
            "execute", {"path": "nb.ipynb", "cells": [0]}, progress_callback=on_progress
        )
    assert not result.is_error
    assert any("cell 0 (c0) running" in m and "loading data" in m for m in messages), messages


async def test_cancel_execution_interrupts_the_running_cell(client: Client, root: Path) -> None:
    code = "import time\nopen('running', 'w').close()\ntime.sleep(3600)"
    write_notebook(root / "nb.ipynb", notebook(code, "print('after')"))
    started = await call(client, "execute", path="nb.ipynb", cells=[":"], wait=0)
    await eventually((root / "running").exists, PATIENCE)  # the first cell is in its sleep
    with anyio.fail_after(PATIENCE):
        cancelled = await call(client, "cancel_execution", handle=started["handle"])
    assert cancelled["status"] == "done"
    assert [c["status"] for c in cancelled["cells"]] == ["interrupted", "cancelled"]
    assert cancelled["cells"][0]["note"] == "run cancelled; kernel interrupted; variables kept"
    result = await call(client, "execute", path="nb.ipynb", code="'alive'")
    assert result["cells"][0]["outputs"][0]["text"] == "'alive'"


async def test_cancelling_the_request_interrupts_the_kernel(client: Client, root: Path) -> None:
    code = "import time\nopen('running', 'w').close()\ntime.sleep(3600)"
    write_notebook(root / "nb.ipynb", notebook(code))
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def execute() -> None:
            with scope:
                await client.call_tool("execute", {"path": "nb.ipynb", "cells": [0]})

        tg.start_soon(execute)
        await eventually((root / "running").exists, PATIENCE)  # the cell is in its sleep
        scope.cancel()
    with anyio.fail_after(PATIENCE):
        while True:
            cells = stored(root)
            if cells[0]["outputs"] and cells[0]["outputs"][-1].get("ename") == "KeyboardInterrupt":
                break
            await anyio.sleep(0.2)
    result = await call(client, "execute", path="nb.ipynb", code="1 + 1")
    assert result["cells"][0]["status"] == "ok"


async def test_a_timeout_says_what_happened_in_plain_words(client: Client, root: Path) -> None:
    write_notebook(root / "nb.ipynb", notebook("n = 3", "while True: n += 1"))
    result = await call(client, "execute", path="nb.ipynb", cells=[":"], timeout=1.5)
    cell = result["cells"][1]
    assert cell["status"] == "timeout"
    assert cell["note"] == "timed out after 1.5 s; kernel interrupted; variables kept"
    assert "state_lost" not in result
    assert "KeyboardInterrupt" in cell["outputs"][-1]["text"]
    error = await call_error(client, "execute", path="nb.ipynb", cells=[0], timeout=10**6)
    assert "over the 7200 s maximum" in error


async def test_insert_and_edit_can_run_the_cell(client: Client, root: Path) -> None:
    write_notebook(root / "nb.ipynb", notebook("a = 2"))
    inserted = await call(
        client,
        "insert_cells",
        path="nb.ipynb",
        cells=["a * 10", {"type": "markdown", "source": "# note"}],
        execute=True,
    )
    run = inserted["execution"]
    assert [(c["index"], c["status"]) for c in run["cells"]] == [(1, "error")]
    assert "note" not in run  # nothing was skipped: no "stopped early"
    assert "NameError" in run["cells"][0]["outputs"][0]["text"]
    edited = await call(client, "edit_cell", path="nb.ipynb", cell=0, source="a = 3", execute=True)
    assert edited["execution"]["cells"][0]["status"] == "ok"
    again = await call(client, "execute", path="nb.ipynb", cells=[1])
    assert again["cells"][0]["outputs"][0]["text"] == "30"
    assert stored(root)[1]["outputs"][0]["data"]["text/plain"] == ["30"]


def _png(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def test_read_output_gives_a_slice_or_an_image(client: Client, root: Path) -> None:
    nb = notebook("print(...)", "plot()")
    nb.cells[0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "0123456789"}]
    nb.cells[1]["outputs"] = [
        {
            "output_type": "display_data",
            "data": {"image/png": _png(3000, 1000), "text/plain": "<Figure>"},
            "metadata": {},
        }
    ]
    write_notebook(root / "nb.ipynb", nb)
    part = await call(client, "read_output", path="nb.ipynb", cell="c0", offset=3, length=4)
    assert (part["text"], part["total"], part["next_offset"]) == ("3456", 10, 7)
    result = await client.call_tool("read_output", {"path": "nb.ipynb", "cell": 1})
    image = result.content[1]
    assert isinstance(image, ImageContent)
    assert image.mime_type == "image/png"
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(image.data))) as img:
        assert img.size == (1568, 523)
    error = await call_error(client, "read_output", path="nb.ipynb", cell=0, output=5)
    assert "cell 0 has 1 output(s); output 5 does not exist" in error


async def test_kernels_can_be_listed_inspected_restarted_and_shut_down(
    client: Client, root: Path
) -> None:
    write_notebook(root / "nb.ipynb", notebook("import math\nrows = [1, 2, 3]", "len(rows)"))
    await call(client, "execute", path="nb.ipynb", cells=[0])
    listed = await call(client, "list_kernels")
    assert [(k["path"], k["kernel"], k["state"]) for k in listed["kernels"]] == [
        ("nb.ipynb", "python3", "idle")
    ]
    assert "python3" in [s["name"] for s in listed["kernelspecs"]]
    variables = await call(client, "list_variables", path="nb.ipynb")
    by_name = {v["name"]: v for v in variables["variables"]}
    assert by_name["rows"] == {
        "name": "rows",
        "type": "list",
        "kind": "value",
        "value": "[1, 2, 3]",
        "size": "len 3",
        "bytes": by_name["rows"]["bytes"],
    }
    assert by_name["math"]["kind"] == "module"
    info = await call(client, "inspect_variable", path="nb.ipynb", name="rows")
    assert info["info"]["repr"] == "[1, 2, 3]"
    assert info["info"]["len"] == 3
    assert "Defined names: math, rows" in await call_error(
        client, "inspect_variable", path="nb.ipynb", name="nope"
    )

    restarted = await call(
        client, "restart_kernel", path="nb.ipynb", clear_outputs=True, run_all=True
    )
    assert restarted["note"] == "kernel restarted"
    assert [c["status"] for c in restarted["execution"]["cells"]] == ["ok", "ok"]
    assert stored(root)[1]["outputs"][0]["data"]["text/plain"] == ["3"]
    assert stored(root)[1]["execution_count"] == 2

    down = await call(client, "restart_kernel", path="nb.ipynb", shutdown=True)
    assert down["note"] == "kernel shut down"
    assert (await call(client, "list_kernels"))["kernels"] == []
    assert "has no running kernel" in await call_error(client, "interrupt_kernel", path="nb.ipynb")


async def test_kernel_state_survives_a_restart_through_save_and_restore(
    client: Client, root: Path
) -> None:
    write_notebook(
        root / "nb.ipynb", notebook("import json\ndata = {'k': [1, 2]}\nsq = lambda v: v * v")
    )
    await call(client, "execute", path="nb.ipynb", cells=[0])
    saved = await call(client, "save_kernel_state", path="nb.ipynb")
    assert saved["names"] == ["data", "json", "sq"]
    assert (root / ".nbrelay-state" / "nb.ipynb.dill").is_file()
    assert [e["path"] for e in (await call(client, "list_notebooks"))["notebooks"]] == ["nb.ipynb"]
    await call(client, "restart_kernel", path="nb.ipynb")
    restored = await call(client, "restore_kernel_state", path="nb.ipynb")
    assert restored["names"] == ["data", "json", "sq"]
    result = await call(client, "execute", path="nb.ipynb", code="print(json.dumps(data), sq(4))")
    assert result["cells"][0]["outputs"][0]["text"] == '{"k": [1, 2]} 16\n'


@pytest.mark.parametrize(
    ("package", "why"),
    [
        (
            "--index-url=https://evil.example/simple",
            "options such as --index-url or -e are refused",
        ),
        ("-e .", "options such as --index-url or -e are refused"),
        ("pandas; rm -rf /", "is not a valid PEP 508 requirement"),
        ("requests>>2", "is not a valid PEP 508 requirement"),
    ],
)
async def test_install_packages_refuses_anything_but_requirements(
    client: Client, root: Path, package: str, why: str
) -> None:
    write_notebook(root / "nb.ipynb", notebook("1"))
    error = await call_error(client, "install_packages", path="nb.ipynb", packages=[package])
    assert why in error
    assert (await call(client, "list_kernels"))["kernels"] == []


async def test_one_flood_does_not_starve_the_outputs_of_later_cells(
    client: Client, root: Path
) -> None:
    """A 50,000-line print followed by 20 cells printing one short line: every short line
    comes back whole, in execute's result and in read_notebook(full=true)."""
    cells = ["print('\\n'.join(f'line {i}' for i in range(50_000)))"]
    cells += [f"print('cell {i} ok')" for i in range(1, 21)]
    write_notebook(root / "nb.ipynb", notebook(*cells))
    result = await call(client, "execute", path="nb.ipynb", cells=[":"])
    short = [c["outputs"][0] for c in result["cells"][1:]]
    assert [o["text"] for o in short] == [f"cell {i} ok\n" for i in range(1, 21)]
    assert not any("omitted" in o or "cut" in o for o in short)
    flood = result["cells"][0]["outputs"][0]
    assert flood["text"].startswith("line 0\n")
    assert flood["text"].rstrip().endswith("line 49999")
    full = await call(client, "read_notebook", path="nb.ipynb", full=True)
    assert [c["outputs"][0]["text"] for c in full["cells"][1:]] == [
        f"cell {i} ok\n" for i in range(1, 21)
    ]


async def test_an_image_in_a_result_says_how_to_get_it(client: Client, root: Path) -> None:
    nb = notebook("plot()")
    nb.cells[0]["outputs"] = [
        {
            "output_type": "display_data",
            "data": {"image/png": _png(40, 20), "text/plain": "<Figure size 640x480>"},
            "metadata": {},
        }
    ]
    write_notebook(root / "nb.ipynb", nb)
    pointer = 'read_output(path="nb.ipynb", cell="c0", output=0)'
    cell = (await call(client, "read_cell", path="nb.ipynb", cell=0))["cell"]
    assert cell["outputs"][0]["text"].startswith("[image/png 40x20, 1 KB image]")
    assert pointer in cell["outputs"][0]["text"]
    full = await call(client, "read_notebook", path="nb.ipynb", full=True)
    assert pointer in full["cells"][0]["outputs"][0]["text"]
    code = "from IPython.display import Image, display\n"
    code += f"display(Image(data=__import__('base64').b64decode('{_png(8, 8)}')))"
    write_notebook(root / "run.ipynb", notebook(code))
    ran = await call(client, "execute", path="run.ipynb", cells=[0])
    out = ran["cells"][0]["outputs"][0]
    assert out["image"] == "image/png"
    assert 'read_output(path="run.ipynb", cell="c0", output=0) returns the image' in out["text"]


async def test_edit_and_run_returns_one_current_version(client: Client, root: Path) -> None:
    """The run saves outputs after the edit: the result's one version is the notebook's current
    one, so the next edit based on it is accepted."""
    write_notebook(root / "nb.ipynb", notebook("a = 2", "a * 10"))
    edited = await call(client, "edit_cell", path="nb.ipynb", cell=0, source="a = 3", execute=True)
    assert "version" not in edited["execution"]
    assert edited["version"] == (await call(client, "read_notebook", path="nb.ipynb"))["version"]
    inserted = await call(
        client,
        "insert_cells",
        path="nb.ipynb",
        cells=["a + 1"],
        execute=True,
        expected_version=edited["version"],
    )
    assert "version" not in inserted["execution"]
    again = await call(
        client,
        "edit_cell",
        path="nb.ipynb",
        cell=1,
        find="10",
        replace="100",
        expected_version=inserted["version"],
    )
    assert again["diff"]


async def test_interrupt_and_cancel_report_the_same_status(client: Client, root: Path) -> None:
    """A cell stopped by interrupt_kernel is `interrupted`, as one stopped by cancel_execution
    is; the cells after it are `skipped` (stop_on_error), not run."""
    write_notebook(root / "nb.ipynb", notebook("import time\ntime.sleep(60)", "print('after')"))
    started = await call(client, "execute", path="nb.ipynb", cells=[":"], wait=0.5)
    await call(client, "interrupt_kernel", path="nb.ipynb")
    with anyio.fail_after(30):
        done = await call(client, "get_execution", handle=started["handle"], wait=20)
    assert [c["status"] for c in done["cells"]] == ["interrupted", "skipped"]
    assert done["cells"][0]["note"] == "interrupted; variables kept"
    assert "KeyboardInterrupt" in done["cells"][0]["outputs"][-1]["text"]


async def test_a_run_waiting_for_a_busy_kernel_is_queued_and_says_behind_what(
    client: Client, root: Path
) -> None:
    write_notebook(
        root / "nb.ipynb",
        notebook("import time\ntime.sleep(4)\nprint('first')", "print('second')"),
    )
    first = await call(client, "execute", path="nb.ipynb", cells=[0], wait=0.5)
    assert first["status"] == "running"
    second = await call(client, "execute", path="nb.ipynb", cells=[1], wait=0.2)
    assert second["status"] == "queued"
    waiting = second["cells"][0]
    assert waiting["status"] == "queued"
    assert waiting["note"].startswith(f"waiting for the kernel, busy with run {first['handle']}")
    assert "cell 0" in waiting["note"]
    assert f'still queued: poll get_execution(handle="{second["handle"]}")' in second["note"]
    # Cancelled while it waits, it never runs.
    cancelled = await call(client, "cancel_execution", handle=second["handle"])
    assert [c["status"] for c in cancelled["cells"]] == ["cancelled"]
    with anyio.fail_after(30):
        done = await call(client, "get_execution", handle=first["handle"], wait=20)
    assert done["cells"][0]["status"] == "ok"
    assert stored(root)[1]["outputs"] == []
    assert stored(root)[1]["execution_count"] is None
