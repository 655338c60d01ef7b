"""Every notebook of the pinned sdists (``world.py``) through the canonical tools, by the official
MCP client: read (overview and full), find/replace, insert, delete, undo, run (outputs compared
cell by cell with nbclient's, where the notebook's imports are installed), export to every format
and import back. After every write the file is valid for nbformat.

What counts (printed at the end of the run, see ``conftest.py``): notebooks, calls, refusals of
valid input (an error on a notebook nbformat reads and validates, or whose only slips are
metadata nbformat's normalize strips; target 0) and output mismatches with nbclient outside
what is masked (times, addresses, ids, tracebacks). Mismatches the output fold still has are
listed in ``KNOWN_MISMATCHES``; each notebook's mismatches must be exactly its listed ones, so a
fix turns a listed mismatch into a failure until the list is updated.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import nbformat
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent
from nbformat.validator import normalize

from nbrelay.config import Settings
from nbrelay.server import build_server
from tests.corpus import world
from tests.helpers import PATIENCE, missing_tool

pytestmark = pytest.mark.anyio

try:
    NOTEBOOKS = world.notebooks()
except subprocess.CalledProcessError:  # no network and no .corpus/: test_the_world_is_here says
    NOTEBOOKS = []
FIGURES: Counter[str] = Counter()
SECONDS: defaultdict[str, float] = defaultdict(float)  # time in each tool, shown with figures
REFUSALS: list[str] = []
MISMATCHES: dict[str, set[int]] = {}

# Not run: they wait for what never comes in a batch run, or break their kernel on purpose.
NOT_RUN = {
    "nbclient-0.11.0/tests/files/Interrupt.ipynb": "loops until interrupted",
    "nbclient-0.11.0/tests/files/Autokill.ipynb": "kills its own kernel",
    "nbclient-0.11.0/tests/files/Disable Stdin.ipynb": "asks for input",
    "nbclient-0.11.0/tests/files/Sleep1s.ipynb": "prints the time it ran at",
}

# (notebook, 0-based cell): why nbrelay's stored outputs differ from nbclient's. The output fold
# (notebook/outputs.py) has these; each is a failure once it is fixed, until removed here.
_EMPTY = (
    "an empty cell that has outputs or a count: run, JupyterLab (and nbrelay) clear them; nbclient "
    "leaves the cell as it was"
)
KNOWN_MISMATCHES: dict[str, dict[int, str]] = {
    "nbconvert-7.17.2/tests/exporters/files/notebook_inject.ipynb": dict.fromkeys(
        range(3, 12), _EMPTY
    ),
    "nbconvert-7.17.2/tests/exporters/files/prompt_numbers.ipynb": {4: _EMPTY},
    "nbclient-0.11.0/tests/files/Skip Execution with Cell Tag.ipynb": {
        0: "the skip-execution tag is nbclient's own: nbrelay (like JupyterLab) runs the cell",
        1: "the execution count follows from cell 0 having run",
    },
    "nbclient-0.11.0/tests/files/Check History in Memory.ipynb": {
        1: "nbclient starts kernels with HistoryManager.hist_file=:memory:; nbrelay's keep a file",
    },
}

# Cells whose outputs are random (numbers drawn at random, and figures of them): compared by
# their outputs' types and MIME types only.
RANDOM = {
    ("nbconvert-7.17.2/tests/exporters/files/notebook2.ipynb", 10),
    ("nbconvert-7.17.2/tests/files/notebook2.ipynb", 13),
}

# Exports that cannot be imported back, and why (each must still fail, and nothing else may).
KNOWN_IMPORT_FAILURES = {
    ("jupytext-1.19.6/tests/data/notebooks/inputs/ipynb_py/jupyter_with_raw_cell_with_invalid_yaml"
     ".ipynb", "markdown"): "jupytext reads a raw cell on top of Markdown as a YAML header",
    ("jupytext-1.19.6/tests/data/notebooks/inputs/ipynb_py/raw_cell_with_complex_yaml_like_content"
     ".ipynb", "markdown"): "jupytext reads a raw cell on top of Markdown as a YAML header",
    ("jupytext-1.19.6/tests/data/notebooks/inputs/ipynb_py/raw_cell_with_non_dict_yaml_content"
     ".ipynb", "markdown"): "jupytext reads a raw cell on top of Markdown as a YAML header",
    ("jupytext-1.19.6/tests/data/notebooks/outputs/myst_to_ipynb/reference_link.ipynb",
     "markdown"): "its jupytext metadata asks for Pandoc Markdown, and pandoc is not installed",
}  # fmt: skip

# Exports jupytext cannot make, and why (each must still fail, and nothing else may).
_FUTURE = "jupytext cannot write a cell type from nbformat 4.99 ('future cell') as text"
KNOWN_EXPORT_FAILURES = {
    ("nbformat-5.11.1/tests/test4plus.ipynb", fmt): _FUTURE for fmt in ("script", "percent", "myst")
}

EXPORTS = ("ipynb", "json", "markdown", "html", "script", "percent", "myst")
IMPORTS = {"ipynb": "ipynb", "markdown": "markdown", "myst": "myst", "percent": "percent"}
PDF_SAMPLE = 2  # PDF (headless Chromium) for the first notebooks only: seconds each


def official(path: Path) -> Any | None:
    """The notebook as nbformat reads it (upgraded to 4), or None if nbformat refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return nbformat.read(path, as_version=4)
        except Exception:  # nbformat refuses it: not a notebook Jupyter opens
            return None


def jupyter_valid(nb: Any) -> bool:
    """Valid for nbformat as read, or once nbformat's normalize strips invalid metadata."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            nbformat.validate(nb)
            return True
        except nbformat.ValidationError:
            pass
        try:
            _, fixed = normalize(copy.deepcopy(dict(nb)), strip_invalid_metadata=True)
            nbformat.validate(nbformat.from_dict(fixed))
            return True
        except Exception:  # still invalid
            return False


def stays_valid(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)


def runnable(nb: Any) -> bool:
    """A Python notebook whose imports are all installed here."""
    spec, info = nb.metadata.get("kernelspec"), nb.metadata.get("language_info")
    spec = spec if isinstance(spec, dict) else {}
    lang = (info if isinstance(info, dict) else {}).get("name") or spec.get("language")
    if not str(spec.get("name", "python3")).startswith("python") or lang not in (None, "python"):
        return False
    if not any(c.cell_type == "code" and c.source.strip() for c in nb.cells):
        return False  # nothing to run
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        text = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.split("\n")
        )
        if cell.source.lstrip().startswith("%%"):
            return False  # cell magics (R, bash, …) need more than Python
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return False
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(importlib.util.find_spec(n.split(".")[0]) is None for n in names):
                return False
    return True


_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{27}\b"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?"), "<time>"),
    (re.compile(r"\d+(\.\d+)?\s*(s|ms|µs|us|ns|sec|seconds)\b"), "<duration>"),
    (re.compile(r"/tmp/\S+|ipykernel_\d+/\d+\.py"), "<path>"),
    (re.compile(r'id=\\?"[^"\\]*\\?"|url\(#[^)]*\)|xlink:href=\\?"#[^"\\]*\\?"'), "<svg id>"),
    (re.compile(r"<dc:date>[^<]*</dc:date>"), "<svg date>"),
)


def masked(text: Any) -> str:
    out = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
    for pattern, replacement in _MASKS:
        out = pattern.sub(replacement, out)
    return out


def outputs_of(cell: Any, *, random: bool = False) -> list[Any]:
    """A code cell's stored outputs and count, what is random masked, tracebacks left out
    (``random``: only the outputs' types and MIME types)."""
    shown: list[Any] = [cell.get("execution_count")]
    if random:
        return [*shown, *((o["output_type"], sorted(o.get("data", {}))) for o in cell.outputs)]
    streamed: list[str] = []  # the raw text of the stream being shown last
    for out in cell.get("outputs", []):
        kind = out["output_type"]
        if kind == "stream":
            # Adjacent writes to one stream are one output, as JupyterLab shows them: how a
            # kernel splits a print into messages depends on timing (nbclient keeps the pieces).
            text = "".join(out["text"]) if isinstance(out["text"], list) else str(out["text"])
            last = shown[-1]
            if streamed and isinstance(last, tuple) and last[:2] == (kind, out["name"]):
                streamed.append(text)
                shown[-1] = (kind, out["name"], masked("".join(streamed)))
                continue
            streamed = [text]
            shown.append((kind, out["name"], masked(text)))
            continue
        streamed = []
        if kind == "error":
            shown.append((kind, out["ename"], masked(out["evalue"])))
        else:
            data = {mime: masked(value) for mime, value in out.get("data", {}).items()}
            shown.append((kind, data, out.get("execution_count")))
    return shown


# nbclient runs every runnable notebook in one process of its own (as `jupyter execute` would
# each), started when the module's first test starts, beside nbrelay's work: one interpreter
# start-up instead of one per notebook.
_NBCLIENT = """
import json, sys, nbformat
from nbclient import NotebookClient
for source, target in json.loads(sys.argv[1]):
    nb = nbformat.read(source, as_version=4)
    try:
        NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": target.rsplit("/", 1)[0]}}).execute()
    except Exception as exc:
        nb.metadata["nbclient_failed"] = repr(exc)
    with open(target + ".tmp", "w", encoding="utf-8") as out:
        out.write(nbformat.writes(nb))
    __import__("os").replace(target + ".tmp", target)
"""


@pytest.fixture(scope="module")
async def nbclient_runs(
    served: Path, request: pytest.FixtureRequest
) -> AsyncIterator[dict[str, Path]]:
    """Where nbclient's run of each runnable notebook of this run will be (written as each
    finishes)."""
    folder = served.parent / "nbclient"
    folder.mkdir()
    todo = {}
    chosen = {
        item.callspec.params["path"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
    }
    for k, path in enumerate(NOTEBOOKS):
        nb = official(path) if path in chosen else None
        if nb is not None and runnable(nb) and world.name_of(path) not in NOT_RUN:
            work = folder / f"n{k:03d}"
            work.mkdir()
            todo[world.name_of(path)] = (path, work / path.name)
    pairs = json.dumps([(str(a), str(b)) for a, b in todo.values()])
    async with await anyio.open_process([sys.executable, "-c", _NBCLIENT, pairs]) as process:
        yield {name: target for name, (_, target) in todo.items()}
        with anyio.fail_after(PATIENCE * 10):
            await process.wait()


async def nbclient_result(target: Path) -> Any:
    """nbclient's run of a notebook, once its process has written it (it runs the notebooks in
    order, beside the tests: the ones before may still be running)."""
    with anyio.fail_after(PATIENCE * 10):
        while not target.exists():  # noqa: ASYNC110 (another process writes it)
            await anyio.sleep(0.2)
    nb = nbformat.read(target, as_version=4)
    assert "nbclient_failed" not in nb.metadata, nb.metadata["nbclient_failed"]
    return nb


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("world")


@pytest.fixture(scope="module")
async def client(served: Path) -> AsyncIterator[Client]:
    settings = Settings(root=served, lock_dir=served.parent / "world-locks", kernel_pool=1)
    async with Client(build_server(settings)) as c:
        yield c


class Calls:
    """Tool calls on one notebook, counted; an error on valid input is a refusal."""

    def __init__(self, client: Client, name: str, valid: bool) -> None:
        self.client, self.name, self.valid = client, name, valid

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any] | None:
        FIGURES["calls"] += 1
        started = time.monotonic()
        result: CallToolResult = await self.client.call_tool(tool, args)
        SECONDS[tool] += time.monotonic() - started
        text = "".join(b.text for b in result.content if isinstance(b, TextContent))
        if result.is_error:
            if self.valid:
                REFUSALS.append(f"{self.name}: {tool}: {text[:300]}")
                FIGURES["refusals"] += 1
            else:
                FIGURES["refusals of invalid input"] += 1
            return None
        assert result.structured_content is not None, text[:300]
        return dict(result.structured_content)

    async def known_failure(self, tool: str, **args: Any) -> None:
        """A call listed as failing for a known reason: it must still fail."""
        FIGURES["calls"] += 1
        FIGURES["known failures"] += 1
        result = await self.client.call_tool(tool, args)
        assert result.is_error, f"{self.name}: {tool} now succeeds: take it off the known list"


def a_word(cells: list[dict[str, Any]]) -> str | None:
    """Some text of the notebook to find and replace: a word of its first non-empty cell."""
    for cell in cells:
        words = re.findall(r"[A-Za-z_]{3,}", cell.get("source", ""))
        if words:
            return str(words[0])
    return None


def test_the_world_is_here() -> None:
    if not NOTEBOOKS:
        missing_tool("the world corpus is not downloaded: run `python -m tests.corpus.world`")
    assert len(NOTEBOOKS) >= 150  # every notebook of the four sdists


# nbconvert warns (it does not fail) on an output it cannot show in a format, or a language it
# has no highlighter for, jupytext on a minor newer than it knows; the suite turns warnings into
# errors, which a user never sees.
@pytest.mark.filterwarnings("ignore:Your element with mimetype:UserWarning")
@pytest.mark.filterwarnings("ignore:No lexer found:UserWarning")
@pytest.mark.filterwarnings("ignore:Notebooks in nbformat version:UserWarning")  # jupytext, 4.99
@pytest.mark.parametrize("path", NOTEBOOKS, ids=world.name_of)
async def test_a_notebook_from_the_world(
    client: Client, served: Path, nbclient_runs: dict[str, Path], path: Path
) -> None:
    name = world.name_of(path)
    nb = official(path)
    if nb is None:
        FIGURES["refused by nbformat"] += 1
        return  # nbformat.read refuses it: Jupyter cannot open it either
    FIGURES["notebooks"] += 1
    valid = jupyter_valid(nb)
    call = Calls(client, name, valid)
    folder = served / f"n{NOTEBOOKS.index(path):03d}"
    folder.mkdir()
    target = folder / path.name
    shutil.copyfile(path, target)
    rel = f"{folder.name}/{path.name}"

    # Reading works on every notebook nbformat reads.
    overview = await call("read_notebook", path=rel, limit=500)
    assert overview is not None, REFUSALS[-1:]
    assert await call("read_notebook", path=rel, full=True, limit=500) is not None
    original = [c.get("source") for c in nb.cells]
    FIGURES["cells"] += len(original)

    # Edits: find/replace, insert, delete; each leaves a valid file; undo restores the sources.
    writes = 0
    word = a_word([c.model_dump() if hasattr(c, "model_dump") else c for c in overview["cells"]])
    if word is not None and await call(
        "replace_in_notebook", path=rel, find=word, replace=word + "_x"
    ):
        writes += 1
        stays_valid(target)
    inserted = await call(
        "insert_cells", path=rel, cells=[{"type": "markdown", "source": "Checked."}]
    )
    if inserted is not None:
        writes += 1
        stays_valid(target)
        if await call("delete_cells", path=rel, cells=[inserted["changed"][0]["id"]]):
            writes += 1
            stays_valid(target)
    if writes:
        assert await call("undo", path=rel, steps=writes) is not None
        stays_valid(target)
        assert [c.get("source") for c in nbformat.read(target, as_version=4).cells] == original
    if not valid:
        return  # an invalid notebook is read, never written

    # Running, compared with nbclient cell by cell.
    if runnable(nb) and name not in NOT_RUN:
        FIGURES["notebooks run"] += 1
        spec = nb.metadata.get("kernelspec")
        if not isinstance(spec, dict) or spec.get("name", "python3") != "python3":
            # A kernel this machine does not have (python2, a conda env's): switch, as a user
            # would, to the one nbclient runs it with.
            switched = await call("notebook_metadata", path=rel, kernel="python3")
            assert switched is not None
            stays_valid(target)
        ran = await call(
            "execute", path=rel, cells="all", stop_on_error=False, wait=PATIENCE, timeout=60
        )
        assert ran is not None
        assert ran["status"] == "done", ran
        stays_valid(target)
        await call("restart_kernel", path=rel, shutdown=True)
        ours = nbformat.read(target, as_version=4)
        theirs = await nbclient_result(nbclient_runs[name])
        differ = {
            i
            for i, (a, b) in enumerate(zip(ours.cells, theirs.cells, strict=True))
            if a.cell_type == "code"
            and outputs_of(a, random=(name, i) in RANDOM)
            != outputs_of(b, random=(name, i) in RANDOM)
        }
        FIGURES["cells compared"] += sum(c.cell_type == "code" for c in ours.cells)
        if differ:
            MISMATCHES[name] = differ
        FIGURES["output mismatches"] += len(differ - set(KNOWN_MISMATCHES.get(name, {})))
        FIGURES["known output mismatches"] += len(differ & set(KNOWN_MISMATCHES.get(name, {})))
        assert differ == set(KNOWN_MISMATCHES.get(name, {})), (
            name,
            {i: (outputs_of(ours.cells[i]), outputs_of(theirs.cells[i])) for i in differ},
        )

    # Export to every format, and import back what can be imported.
    stem = path.name.removesuffix(".ipynb")
    formats = [*EXPORTS, "pdf"] if NOTEBOOKS.index(path) < PDF_SAMPLE else EXPORTS
    for fmt in formats:
        export = {"path": rel, "format": fmt, "save": True, "overwrite": True}
        if (name, fmt) in KNOWN_EXPORT_FAILURES:
            await call.known_failure("export_notebook", **export)
            continue
        done = await call("export_notebook", **export)
        if done is None:
            continue
        FIGURES["exports"] += 1
        to = done["saved"][0]
        back_fmt = IMPORTS.get(fmt) or ("light" if fmt == "script" else None)
        if back_fmt is None or not nb.cells:
            continue  # a notebook without cells exports as an empty text, which is no import
        back = f"{folder.name}/back/{stem}-{fmt}.ipynb"
        known = (name, fmt) in KNOWN_IMPORT_FAILURES
        args = {"path": back, "source": to, "format": back_fmt, "overwrite": True}
        imported = await (call.known_failure if known else call)("import_notebook", **args)
        if imported:
            FIGURES["imports"] += 1
            stays_valid(served / back)
    assert not [r for r in REFUSALS if r.startswith(f"{name}:")]


def summary() -> str:
    """The line CI's log shows: the figures of this run."""
    f = FIGURES
    return (
        f"world corpus: {f['notebooks']} notebooks ({f['refused by nbformat']} more that "
        f"nbformat refuses), {f['cells']} cells, {f['calls']} calls, {f['refusals']} refusals of "
        f"valid input, {f['refusals of invalid input']} of invalid input; "
        f"{f['notebooks run']} notebooks run, {f['cells compared']} code cells compared with "
        f"nbclient: {f['output mismatches']} output mismatches, {f['known output mismatches']} "
        f"known ones; {f['exports']} exports, {f['imports']} imports back "
        f"({f['known failures']} exports and imports known to fail, listed)"
    )
