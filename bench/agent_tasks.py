"""What an agent pays to get notebook work done: ten tasks, each server's own tools, one run.

Public benchmarks of notebook agents (DABench, BLADE, DSBench …) measure a model's analysis
skill; this one measures the tool surface. Each task starts from a notebook written here, is
scripted once per server as the shortest sequence of calls a careful agent would make with that
server's own tools (reading what it needs to know before it edits: which cell failed, which cells
hold a name), replayed through the official MCP client over stdio, and checked on the final
``.ipynb`` on disk (sources and outputs), never on what the server says:

=================  ==========================================================================
fix_failing        a 60-cell notebook fails at one cell: find it, fix it, run to the end
rename             rename a variable used in 5 of 12 cells, everywhere, and re-run
restart_run_all    stale outputs: restart the kernel and run every cell in order (counts 1..n)
read_plot          run a cell that draws a chart and get the picture to the model
parametrise        run the notebook with three values of its parameter, keep the last
add_analysis       append a heading and a code cell, run it
refactor           turn three cells into one function and its call, outputs unchanged
clean_outputs      clear every output and count (a notebook ready to commit)
long_run           a cell that runs ``--long`` seconds against a client that gives up on a call
                   after ``--client-timeout`` seconds (60): outputs complete in the file
two_agents         two agents at once, each adding and running cells in its own notebook
=================  ==========================================================================

A person typing in JupyterLab while the agent edits nearby cells is the subject of nbrelay's live
tests (``tests/live``); the peers have no stale-edit guard to compare, so it is not a task here.

Per task and server: solved (the check, and why not), calls, characters of results (text, and
image data as sent), wall time. Per server: characters of ``tools/list`` as sent. The targets
(issue "Fast at every size"): nbrelay solves every task; per task its calls ≤ the best peer's
and its characters (results + listing) ≤ 0.5× the best peer's.

Servers: nbrelay (file mode), datalayer jupyter-mcp-server 2.2.4 ("dl") and block mcp-jupyter
2.0.2 ("bk"), installed by ``bench/compare.py``'s ``ensure_venv`` under ``--cache``, each against
one JupyterLab (with jupyter-collaboration) this script starts on 127.0.0.1 and stops by PID.
Run: ``python -m bench.agent_tasks [--with dl,bk] [--only task,…]`` (about 10 minutes with both
peers; not part of the test run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import nbformat
from mcp import Client, StdioServerParameters
from mcp_types import ImageContent, TextContent

from bench.compare import COMPETITORS, ensure_venv, jupyter_server, tools_list_size
from nbrelay.notebook.model import new_cell, new_notebook, serialize

NB = "nb.ipynb"

# -- the notebooks -----------------------------------------------------------------------


def notebook(sources: Sequence[str | tuple[str, str]]) -> bytes:
    """A notebook of code cells (a string) and markdown cells (``("markdown", text)``)."""
    cells = []
    for i, s in enumerate(sources):
        kind, text = s if isinstance(s, tuple) else ("code", s)
        cells.append(new_cell(kind, text, cell_id=f"c{i}"))
    return serialize(new_notebook(cells, display_name="Python 3"))


BUG_AT = 37
FIX_FAILING = (
    ["import math\nvals = []"]
    + [
        f"vals.append(math.{'sqrtt' if i == BUG_AT else 'sqrt'}({i}))\nprint({i}, round(vals[-1], 3))"
        for i in range(1, 59)
    ]
    + ["print('total', round(sum(vals), 3))"]
)
FIX_TOTAL = f"total {round(sum(i**0.5 for i in range(1, 59)), 3)}"

RENAME_CELLS = [0, 2, 5, 8, 11]
RENAME = [
    "df_raw = [3, 1, 4, 1, 5]"
    if i == 0
    else f"n{i} = len(df_raw) + {i}\nprint(n{i})"
    if i in RENAME_CELLS
    else f"print({i})"
    for i in range(12)
]

RESTART = ["total = 0"] + [f"total += {i}\nprint(total)" for i in range(1, 15)]

PLOT = [
    "import matplotlib.pyplot as plt",
    "plt.figure(figsize=(3, 2))\nplt.bar(['A', 'B', 'C'], [3, 1, 7])\nplt.title('sales')\nplt.show()",
]

PARAMS = ["n = 5", "sq = n * n", "print('result', sq)"]

ANALYSIS = [f"x{i} = {i}\nprint(x{i})" for i in range(20)]

REFACTOR = [
    "data = [3, 1, 4, 1, 5, 9, 2, 6]",
    "m = sum(data) / len(data)\nprint('mean', m)",
    "s = sorted(data)\nprint('median', (s[3] + s[4]) / 2)",
    "print('max', max(data))",
]
REFACTORED = (
    "def summarize(values):\n"
    "    print('mean', sum(values) / len(values))\n"
    "    s = sorted(values)\n"
    "    print('median', (s[3] + s[4]) / 2)\n"
    "    print('max', max(values))\n\n\n"
    "summarize(data)"
)
REFACTOR_OUT = "mean 3.875\nmedian 3.5\nmax 9\n"

CLEAN = [f"print({i})" for i in range(20)]


def long_code(seconds: int) -> str:
    steps = max(1, seconds // 5)
    return f"import time\nfor i in range({steps}):\n    time.sleep(5)\n    print('step', i, flush=True)"


def with_outputs(raw: bytes) -> bytes:
    """The notebook with a stale output and count on every code cell."""
    nb = json.loads(raw)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            cell["execution_count"] = 40 + i
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "stale\n"}]
    return json.dumps(nb, indent=1).encode()


# -- checks on the file --------------------------------------------------------------------


def read(path: Path) -> Any:
    return nbformat.reads(path.read_text(), as_version=4)  # type: ignore[no-untyped-call]


def text_of(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(str(out["data"].get("text/plain", "")))
    return "".join(parts)


def errors(nb: Any) -> list[int]:
    return [
        i
        for i, c in enumerate(nb.cells)
        if any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]


def code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code"]


Check = Callable[[Path, "Tally"], str | None]  # why it is not solved, or None


def check_fix(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    if errors(nb):
        return f"errors in cells {errors(nb)}"
    if "sqrtt" in nb.cells[BUG_AT].source:
        return "the failing cell was not fixed"
    missing = [i for i, c in enumerate(nb.cells) if i and not c.get("outputs")]
    if missing:
        return f"cells without outputs: {missing[:5]}"
    return None if FIX_TOTAL in text_of(nb.cells[-1]) else "wrong total"


def check_rename(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    if any("df_raw" in c.source for c in nb.cells):
        return "df_raw is still used"
    if errors(nb) or any(i and not c.get("outputs") for i, c in enumerate(nb.cells)):
        return "not every cell ran cleanly"
    return None if text_of(nb.cells[11]).strip() == "16" else "wrong output in the last cell"


def check_restart(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    counts = [c.get("execution_count") for c in code_cells(nb)]
    if counts != list(range(1, len(counts) + 1)):
        return f"execution counts {counts[:6]}…, not 1..n in order"
    return None if text_of(nb.cells[-1]).strip() == str(sum(range(15))) else "wrong last output"


def check_plot(path: Path, tally: Tally) -> str | None:
    return None if tally.images else "no image reached the model"


def check_params(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    seen = [f"result {n * n}" for n in (2, 3, 4) if f"result {n * n}" in tally.text]
    if len(seen) < 3:
        return f"the model saw only {seen}"
    if nb.cells[0].source.strip() != "n = 4" or "result 16" not in text_of(nb.cells[2]):
        return "the notebook does not end with n = 4 and its result"
    return None


def check_analysis(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    if len(nb.cells) != 22 or nb.cells[20].cell_type != "markdown":
        return f"{len(nb.cells)} cells, expected the 20 and a heading and a code cell"
    return None if text_of(nb.cells[21]).strip() == "45" else "the new cell's output is not 45"


def check_refactor(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    cells = code_cells(nb)
    if len(cells) != 2 or "def summarize" not in cells[1].source:
        return f"{len(cells)} code cells; expected the data and one function with its call"
    return None if text_of(cells[1]) == REFACTOR_OUT else f"outputs {text_of(cells[1])!r}"


def check_clean(path: Path, tally: Tally) -> str | None:
    nb = read(path)
    dirty = [i for i, c in enumerate(nb.cells) if c.get("outputs") or c.get("execution_count")]
    return f"outputs or counts left in cells {dirty[:5]}" if dirty else None


def check_long(steps: int) -> Check:
    def check(path: Path, tally: Tally) -> str | None:
        out = text_of(read(path).cells[1])
        got = [i for i in range(steps) if f"step {i}\n" in out]
        return None if len(got) == steps else f"{len(got)} of {steps} steps in the file"

    return check


def check_two(path: Path, tally: Tally) -> str | None:
    for name in ("a", "b"):
        nb = read(path.parent / f"{name}.ipynb")
        outs = [text_of(c).strip() for c in code_cells(nb)]
        want = [f"{name} {k}" for k in range(3)]
        if outs != want:
            return f"{name}.ipynb has outputs {outs}, expected {want}"
    return None


# -- an agent: calls, and what it read ----------------------------------------------------


@dataclass
class Tally:
    calls: int = 0
    chars: int = 0
    images: int = 0
    timeouts: int = 0
    text: str = ""


@dataclass
class Reply:
    text: str
    error: bool
    structured: Any = None


class Agent:
    """One client session, counting what its calls put in the model's context."""

    def __init__(self, client: Client, tally: Tally, call_timeout: float) -> None:
        self.client, self.tally, self.call_timeout = client, tally, call_timeout

    async def __call__(self, tool: str, **args: Any) -> Reply:
        self.tally.calls += 1
        with anyio.move_on_after(self.call_timeout) as scope:
            result = await self.client.call_tool(tool, args)
        if scope.cancelled_caught:  # the client gave up, as hosts do after their timeout
            self.tally.timeouts += 1
            return Reply("(the call timed out)", True)
        text = ""
        for block in result.content:
            if isinstance(block, TextContent):
                text += block.text
            elif isinstance(block, ImageContent):
                self.tally.images += 1
                self.tally.chars += len(block.data)
        self.tally.chars += len(text)
        self.tally.text += text + "\n"
        return Reply(text, bool(result.is_error), result.structured_content)


# -- the tasks, one script per server ------------------------------------------------------

Script = Callable[[Agent, str], Awaitable[None]]


@dataclass
class Task:
    name: str
    files: dict[str, bytes]
    check: Check
    scripts: dict[str, Script] = field(default_factory=dict)
    agents: int = 1


def handle_of(reply: Reply) -> str | None:
    s = reply.structured if isinstance(reply.structured, dict) else {}
    h = s.get("handle")
    return h if isinstance(h, str) and s.get("status") in ("running", "queued") else None


def failed_cell(reply: Reply) -> int | None:
    """The index of the cell an nbrelay run stopped at, read from its result."""
    s = reply.structured if isinstance(reply.structured, dict) else {}
    for cell in s.get("cells", []):
        if cell.get("status") == "error":
            index = cell.get("index")
            return index if isinstance(index, int) else None
    return None


# nbrelay ------------------------------------------------------------------------------


async def nb_fix(ag: Agent, p: str) -> None:
    run = await ag("execute", path=p, cells=["all"])
    bad = failed_cell(run)
    if bad is None:
        return
    await ag("edit_cell", path=p, cell=bad, find="sqrtt", replace="sqrt")
    await ag("execute", path=p, cells=[f"{bad}:"])


async def nb_rename(ag: Agent, p: str) -> None:
    await ag("replace_in_notebook", path=p, find="df_raw", replace="table")
    await ag("execute", path=p, cells=["all"])


async def nb_restart(ag: Agent, p: str) -> None:
    await ag("restart_kernel", path=p, run_all=True)


async def nb_plot(ag: Agent, p: str) -> None:
    await ag("execute", path=p, cells=["all"], images=True)


async def nb_params(ag: Agent, p: str) -> None:
    for n in (2, 3, 4):
        await ag("edit_cell", path=p, cell=0, source=f"n = {n}")
        await ag("execute", path=p, cells=["all"])


async def nb_analysis(ag: Agent, p: str) -> None:
    cells = [{"type": "markdown", "source": "## Summary"}, "print(sum(range(10)))"]
    await ag("insert_cells", path=p, cells=cells, execute=True)


async def nb_refactor(ag: Agent, p: str) -> None:
    await ag("read_notebook", path=p)
    await ag("delete_cells", path=p, cells=[2, 3])
    await ag("edit_cell", path=p, cell=1, source=REFACTORED)
    await ag("execute", path=p, cells=["all"])


async def nb_clean(ag: Agent, p: str) -> None:
    await ag("clear_outputs", path=p)


def nb_long(timeout: float) -> Script:
    async def script(ag: Agent, p: str) -> None:
        reply = await ag("execute", path=p, cells=["all"], wait=timeout - 10)
        handle = handle_of(reply)
        while handle is not None:
            reply = await ag("get_execution", handle=handle, wait=timeout - 10)
            handle = handle_of(reply)

    return script


def nb_two(name: str) -> Script:
    async def script(ag: Agent, p: str) -> None:
        path = str(Path(p).parent / f"{name}.ipynb")
        cells = [f"print('{name}', {k})" for k in range(3)]
        await ag("insert_cells", path=path, cells=cells, execute=True)

    return script


# datalayer jupyter-mcp-server --------------------------------------------------------------


async def dl_use(ag: Agent, p: str) -> None:
    await ag("use_notebook", notebook_name=p, notebook_path=p, mode="connect")


async def dl_run(ag: Agent, indexes: range | list[int]) -> Reply | None:
    """Run cells one by one (it has no run-all), stopping at the first error."""
    for i in indexes:
        reply = await ag("execute_cell", cell_index=i)
        if reply.error or "Traceback" in reply.text or "Error" in reply.text:
            return reply
    return None


async def dl_fix(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    cells = len(FIX_FAILING)
    failed = await dl_run(ag, range(cells))
    if failed is None:
        return
    bad = ag.tally.calls - 2  # the index of the cell run last
    await ag("edit_cell_source", cell_index=bad, old_string="sqrtt", new_string="sqrt")
    await dl_run(ag, range(bad, cells))


async def dl_rename(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    listing = await ag("read_notebook", notebook_name=p, response_format="detailed", limit=100)
    hits = [i for i in range(len(RENAME)) if "df_raw" in _dl_cell(listing.text, i)]
    for i in hits or RENAME_CELLS:
        await ag(
            "edit_cell_source",
            cell_index=i,
            old_string="df_raw",
            new_string="table",
            replace_all=True,
        )
    await dl_run(ag, range(len(RENAME)))


def _dl_cell(text: str, index: int) -> str:
    """The part of a datalayer ``read_notebook`` answer about one cell (it numbers them)."""
    marks = [f"Cell {index}", f"[{index}]", f"index {index}", f"Index: {index}"]
    for mark in marks:
        at = text.find(mark)
        if at >= 0:
            return text[at : at + 200]
    return text


async def dl_restart(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    await ag("restart_notebook", notebook_name=p)
    await dl_run(ag, range(len(RESTART)))


async def dl_plot(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    await dl_run(ag, range(len(PLOT)))


async def dl_params(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    for n in (2, 3, 4):
        await ag("overwrite_cell_source", cell_index=0, cell_source=f"n = {n}")
        await dl_run(ag, range(3))


async def dl_analysis(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    await ag("insert_cell", cell_index=-1, cell_type="markdown", cell_source="## Summary")
    await ag("insert_execute_code_cell", cell_index=-1, cell_source="print(sum(range(10)))")


async def dl_refactor(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    await ag("read_notebook", notebook_name=p, response_format="detailed")
    await ag("delete_cell", cell_indices=[2, 3])
    await ag("overwrite_cell_source", cell_index=1, cell_source=REFACTORED)
    await dl_run(ag, range(2))


async def dl_clean(ag: Agent, p: str) -> None:
    await dl_use(ag, p)
    for i in range(len(CLEAN)):
        await ag("clear_cell_output", cell_index=i)


def dl_long(timeout: float, steps: int) -> Script:
    async def script(ag: Agent, p: str) -> None:
        await dl_use(ag, p)
        await dl_run(ag, [0])
        reply = await ag("execute_cell", cell_index=1, timeout=int(timeout - 10))
        for _ in range(20):  # until the last step shows, looking every half timeout
            if f"step {steps - 1}" in reply.text:
                break
            await anyio.sleep(timeout / 2)
            reply = await ag("read_cell", cell_index=1, include_outputs=True)

    return script


def dl_two(name: str) -> Script:
    async def script(ag: Agent, p: str) -> None:
        path = str(Path(p).parent / f"{name}.ipynb")
        await dl_use(ag, path)
        for k in range(3):
            await ag("insert_execute_code_cell", cell_index=-1, cell_source=f"print('{name}', {k})")

    return script


# block mcp-jupyter ---------------------------------------------------------------------


def bk_args(p: str, **more: Any) -> dict[str, Any]:
    return {"notebook_path": p, **more}


async def bk_setup(ag: Agent, p: str, url: str) -> None:
    await ag("setup_notebook", notebook_path=p, server_url=url)


async def bk_run(ag: Agent, p: str, indexes: range | list[int]) -> Reply | None:
    for i in indexes:
        reply = await ag(
            "execute_notebook_code", **bk_args(p, execution_type="execute_cell", position_index=i)
        )
        if reply.error or "Traceback" in reply.text or '"error"' in reply.text:
            return reply
    return None


def bk_scripts(url: str, timeout: float, steps: int) -> dict[str, Script]:
    async def fix(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        first = ag.tally.calls
        failed = await bk_run(ag, p, range(len(FIX_FAILING)))
        if failed is None:
            return
        bad = ag.tally.calls - first - 1
        source = FIX_FAILING[bad].replace("sqrtt", "sqrt")
        await ag(
            "modify_notebook_cells",
            **bk_args(p, operation="edit_code", position_index=bad, cell_content=source),
        )
        await bk_run(ag, p, range(bad + 1, len(FIX_FAILING)))

    async def rename(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        await ag("query_notebook", **bk_args(p, query_type="view_source"))
        for i in RENAME_CELLS:
            await ag(
                "modify_notebook_cells",
                **bk_args(
                    p,
                    operation="edit_code",
                    position_index=i,
                    cell_content=RENAME[i].replace("df_raw", "table"),
                    execute=False,
                ),
            )
        await bk_run(ag, p, range(len(RENAME)))

    async def restart(ag: Agent, p: str) -> None:  # no restart tool: a fresh kernel at setup
        await bk_setup(ag, p, url)
        await bk_run(ag, p, range(len(RESTART)))

    async def plot(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        await bk_run(ag, p, range(len(PLOT)))

    async def params(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        for n in (2, 3, 4):
            await ag(
                "modify_notebook_cells",
                **bk_args(p, operation="edit_code", position_index=0, cell_content=f"n = {n}"),
            )
            await bk_run(ag, p, [1, 2])

    async def analysis(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        await ag(
            "modify_notebook_cells",
            **bk_args(p, operation="add_markdown", cell_content="## Summary"),
        )
        await ag(
            "modify_notebook_cells",
            **bk_args(p, operation="add_code", cell_content="print(sum(range(10)))"),
        )

    async def refactor(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        await ag("query_notebook", **bk_args(p, query_type="view_source"))
        for i in (3, 2):
            await ag("modify_notebook_cells", **bk_args(p, operation="delete", position_index=i))
        await bk_run(ag, p, [0])
        await ag(
            "modify_notebook_cells",
            **bk_args(p, operation="edit_code", position_index=1, cell_content=REFACTORED),
        )

    async def long(ag: Agent, p: str) -> None:
        await bk_setup(ag, p, url)
        await bk_run(ag, p, [0, 1])  # the second call outlives the client's patience
        for _ in range(20):
            reply = await ag(
                "query_notebook", **bk_args(p, query_type="view_source", position_index=1)
            )
            if f"step {steps - 1}" in reply.text:
                break
            await anyio.sleep(timeout / 2)

    def two(name: str) -> Script:
        async def script(ag: Agent, p: str) -> None:
            path = str(Path(p).parent / f"{name}.ipynb")
            await bk_setup(ag, path, url)
            for k in range(3):
                await ag(
                    "modify_notebook_cells",
                    **bk_args(path, operation="add_code", cell_content=f"print('{name}', {k})"),
                )

        return script

    return {
        "fix_failing": fix,
        "rename": rename,
        "restart_run_all": restart,
        "read_plot": plot,
        "parametrise": params,
        "add_analysis": analysis,
        "refactor": refactor,
        "long_run": long,
        "two_agents:a": two("a"),
        "two_agents:b": two("b"),
    }


def tasks(long_seconds: int, timeout: float) -> list[Task]:
    steps = max(1, long_seconds // 5)
    both = {f"{n}.ipynb": notebook([("markdown", f"# {n}")]) for n in "ab"}
    return [
        Task(
            "fix_failing", {NB: notebook(FIX_FAILING)}, check_fix, {"nbrelay": nb_fix, "dl": dl_fix}
        ),
        Task(
            "rename", {NB: notebook(RENAME)}, check_rename, {"nbrelay": nb_rename, "dl": dl_rename}
        ),
        Task(
            "restart_run_all",
            {NB: with_outputs(notebook(RESTART))},
            check_restart,
            {"nbrelay": nb_restart, "dl": dl_restart},
        ),
        Task("read_plot", {NB: notebook(PLOT)}, check_plot, {"nbrelay": nb_plot, "dl": dl_plot}),
        Task(
            "parametrise",
            {NB: notebook(PARAMS)},
            check_params,
            {"nbrelay": nb_params, "dl": dl_params},
        ),
        Task(
            "add_analysis",
            {NB: with_outputs(notebook(ANALYSIS))},
            check_analysis,
            {"nbrelay": nb_analysis, "dl": dl_analysis},
        ),
        Task(
            "refactor",
            {NB: notebook(REFACTOR)},
            check_refactor,
            {"nbrelay": nb_refactor, "dl": dl_refactor},
        ),
        Task(
            "clean_outputs",
            {NB: with_outputs(notebook(CLEAN))},
            check_clean,
            {"nbrelay": nb_clean, "dl": dl_clean},
        ),
        Task(
            "long_run",
            {NB: notebook(["x = 1", long_code(long_seconds)])},
            check_long(steps),
            {"nbrelay": nb_long(timeout), "dl": dl_long(timeout, steps)},
        ),
        Task(
            "two_agents",
            both,
            check_two,
            {
                "nbrelay:a": nb_two("a"),
                "nbrelay:b": nb_two("b"),
                "dl:a": dl_two("a"),
                "dl:b": dl_two("b"),
            },
            agents=2,
        ),
    ]


# -- running -------------------------------------------------------------------------------


@dataclass
class Outcome:
    tally: Tally
    wall: float
    why: str | None  # why it is not solved; None: solved


@dataclass
class Server:
    key: str
    title: str
    params: StdioServerParameters
    root: Path  # where its notebooks live
    prefix: str  # a task's folder is prefix + task name
    scripts: dict[str, Script]
    listing: int = 0


async def run_task(server: Server, task: Task, call_timeout: float, settle: float) -> Outcome:
    folder = server.root / f"{server.prefix}{task.name}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, raw in task.files.items():
        (folder / name).write_bytes(raw)
    p = f"{server.prefix}{task.name}/{NB}" if server.prefix else f"{task.name}/{NB}"
    tally = Tally()
    keys = [server.key] if task.agents == 1 else [f"{server.key}:{c}" for c in "ab"]
    scripts = [
        task.scripts.get(k) or server.scripts.get(k.replace(server.key, task.name, 1)) for k in keys
    ]
    if any(s is None for s in scripts):
        return Outcome(tally, 0.0, "cannot: no script for this server")
    start = time.perf_counter()
    why: str | None = None
    try:
        async with anyio.create_task_group() as tg:
            for script in scripts:
                assert script is not None
                tg.start_soon(_one_agent, server, script, tally, p, call_timeout)
    except Exception as exc:
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
    wall = time.perf_counter() - start
    if why is None:  # the file may reach the disk a moment later (a room's autosave)
        deadline = time.monotonic() + settle
        while True:
            try:
                why = task.check(folder / NB, tally)
            except Exception as exc:
                why = f"unreadable: {type(exc).__name__}: {str(exc)[:120]}"
            if why is None or time.monotonic() > deadline:
                break
            await anyio.sleep(0.5)
    return Outcome(tally, wall, why)


async def _one_agent(server: Server, script: Script, tally: Tally, p: str, patience: float) -> None:
    async with Client(server.params, mode="legacy") as client:
        if not server.listing:
            server.listing = tools_list_size((await client.list_tools()).tools)
        await script(Agent(client, tally, patience), p)


def nbrelay_server(root: Path) -> Server:
    args = ["-m", "nbrelay", "serve", "--root", str(root)]
    return Server(
        "nbrelay", "nbrelay", StdioServerParameters(command=sys.executable, args=args), root, "", {}
    )


def peer_server(
    key: str, venv: Path, url: str, token: str, jroot: Path, timeout: float, steps: int
) -> Server:
    from bench.compare import bk_target, dl_target

    target = dl_target(venv, url, token) if key == "dl" else bk_target(venv, url, token)
    scripts = bk_scripts(url, timeout, steps) if key == "bk" else {}
    return Server(key, COMPETITORS[key][0], target.params, jroot, f"{key}-", scripts)


def report(
    servers: list[Server], results: dict[tuple[str, str], Outcome], task_names: list[str]
) -> str:
    lines = [
        "| task | server | solved | calls | characters of results | wall s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for t in task_names:
        for s in servers:
            o = results[(t, s.key)]
            solved = "yes" if o.why is None else f"no: {o.why}"
            lines.append(
                f"| {t} | {s.title} | {solved} | {o.tally.calls} | "
                f"{o.tally.chars:,} | {o.wall:.1f} |"
            )
    lines += [
        "",
        "| server | tools/list characters | solved | calls | characters of results |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in servers:
        mine = [results[(t, s.key)] for t in task_names]
        lines.append(
            f"| {s.title} | {s.listing:,} | {sum(o.why is None for o in mine)}/"
            f"{len(mine)} | {sum(o.tally.calls for o in mine)} | "
            f"{sum(o.tally.chars for o in mine):,} |"
        )
    peers = [s for s in servers if s.key != "nbrelay"]
    if peers:
        lines += [
            "",
            "Against the best peer that solved the task (calls; characters of results "
            "+ the listing, once per task):",
            "",
            "| task | nbrelay calls / best peer | characters × best peer |",
            "|---|---:|---:|",
        ]
        listing = {s.key: s.listing for s in servers}
        for t in task_names:
            won = [(s.key, results[(t, s.key)]) for s in peers if results[(t, s.key)].why is None]
            if not won:
                lines.append(f"| {t} | no peer solved it | |")
                continue
            ours = results[(t, "nbrelay")]
            calls = min(o.tally.calls for _, o in won)
            chars = min(o.tally.chars + listing[k] for k, o in won)
            ratio = (ours.tally.chars + listing["nbrelay"]) / chars
            lines.append(f"| {t} | {ours.tally.calls} / {calls} | {ratio:.2f}× |")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="nbrelay-agent-tasks-"))
    chosen = tasks(args.long, args.client_timeout)
    if args.only:
        chosen = [t for t in chosen if t.name in args.only.split(",")]
    names = [t.name for t in chosen]
    steps = max(1, args.long // 5)
    results: dict[tuple[str, str], Outcome] = {}
    servers = [nbrelay_server(work / "nbrelay")]
    peers = [k for k in args.with_.split(",") if k]
    try:
        with contextlib.ExitStack() as stack:
            if peers:
                jroot = work / "jupyter"
                jroot.mkdir()
                url, token, _ = stack.enter_context(jupyter_server(jroot))
                for key in peers:
                    venv = ensure_venv(Path(args.cache).expanduser(), key)
                    servers.append(
                        peer_server(key, venv, url, token, jroot, args.client_timeout, steps)
                    )
            for task in chosen:  # server order alternates from task to task
                order = servers if len(results) % 2 == 0 else servers[::-1]
                for server in order:
                    print(f"{task.name} on {server.title} …", file=sys.stderr)
                    results[(task.name, server.key)] = await run_task(
                        server, task, args.client_timeout, args.settle
                    )
        print(report(servers, results, names))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--with", dest="with_", default="", help="Peers to run beside nbrelay: dl, bk or dl,bk."
    )
    parser.add_argument("--only", default="", help="Tasks to run (comma-separated names).")
    parser.add_argument("--long", type=int, default=150, help="Seconds the long run takes.")
    parser.add_argument(
        "--client-timeout",
        type=float,
        default=60.0,
        help="Seconds a client waits for one call before giving up.",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="Seconds to wait for a server's file to reach the disk.",
    )
    parser.add_argument(
        "--cache",
        default="~/.cache/nbrelay-bench",
        help="Where the peers' virtual environments live.",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args()))
