"""Who is calling travels as an argument: reads, edits, runs, undo and every store operation take
the caller they act for, and no module reads a caller from a context (there is none to read)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nbrelay import caller as caller_module
from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import ConflictError, UndoRefused
from nbrelay.notebook.edits import CellSpec, Plan, plan_delete, plan_insert
from nbrelay.notebook.model import Notebook, new_notebook
from nbrelay.stores.files import FileStore
from nbrelay.workspace import Workspace

SRC = Path(__file__).resolve().parents[1] / "src" / "nbrelay"


def _caller_context_uses(tree: ast.Module) -> list[str]:
    """What in a module would carry a caller outside the arguments: ``current``/``acting``
    imported from ``nbrelay.caller``, or a context variable that holds a ``Caller``."""
    found = [
        f"import of {alias.name} at line {node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "nbrelay.caller"
        for alias in node.names
        if alias.name in ("current", "acting")
    ]
    found += [
        f"a context variable of callers at line {node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ContextVar"
        and "Caller" in ast.unparse(node.slice)
    ]
    return found


def test_no_module_carries_the_caller_in_a_context() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        uses = _caller_context_uses(ast.parse(path.read_text(encoding="utf-8")))
        if uses:
            found[rel] = uses
    assert found == {}, f"the caller must be passed as an argument here: {found}"


def test_the_scan_finds_a_caller_carried_in_a_context() -> None:
    """The scan above is not vacuous: it finds both ways a caller used to travel."""
    old = (
        "from contextvars import ContextVar\n"
        "from nbrelay.caller import Caller, acting, current\n"
        '_current: ContextVar[Caller] = ContextVar("nbrelay_caller")\n'
    )
    assert len(_caller_context_uses(ast.parse(old))) == 3


def test_the_caller_has_no_context_to_be_read_from() -> None:
    """``nbrelay.caller`` keeps no current caller: no context variable, nothing that reads or
    sets one, so a caller can only arrive as an argument."""
    assert not hasattr(caller_module, "current")
    assert not hasattr(caller_module, "acting")
    tree = ast.parse(Path(caller_module.__file__ or "").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom | ast.Import)
        for alias in node.names
    }
    assert not imported & {"ContextVar", "contextvars", "contextmanager"}, imported


@pytest.mark.anyio
async def test_an_edit_belongs_to_the_caller_it_is_made_for(tmp_path: Path) -> None:
    """No caller is current (no tool call): the caller passed decides whose undo history
    the edit joins and whose view it keeps current."""
    ws = Workspace(Settings(root=tmp_path), FileStore(tmp_path))
    alice, bob = Caller("alice"), Caller("bob")
    await ws.notebooks.create_notebook("a.ipynb", alice, [CellSpec("code", "x = 1")])
    await ws.notebooks.view("a.ipynb", alice)
    await ws.notebooks.view("a.ipynb", bob)

    await ws.editing.edit_cell("a.ipynb", alice, 0, source="x = 2")

    await ws.notebooks.unchanged_since_viewed("a.ipynb", alice)  # her own edit
    with pytest.raises(ConflictError):
        await ws.notebooks.unchanged_since_viewed("a.ipynb", bob)  # someone else's
    with pytest.raises(UndoRefused):
        await ws.editing.undo("a.ipynb", bob)
    done = await ws.editing.undo("a.ipynb", alice)
    assert done.labels == ("edit cell",)
    assert (await ws.notebooks.read("a.ipynb", alice)).notebook.cells[0]["source"] == "x = 1"


@pytest.mark.anyio
async def test_a_read_belongs_to_the_caller_it_is_made_for(tmp_path: Path) -> None:
    """No caller is current: the caller passed to a store's read decides whose read it is, so
    an edit by position is refused only to the caller that has not read the change since."""
    store = FileStore(tmp_path)
    alice, bob = Caller("alice"), Caller("bob")
    await store.create("a.ipynb", alice, new_notebook(), overwrite=False)
    await store.load("a.ipynb", alice)
    await store.load("a.ipynb", bob)

    def insert(nb: Notebook) -> Plan:
        return plan_insert(nb, 0, [CellSpec("code", "x = 1")], lambda: "c1")

    await store.edit("a.ipynb", bob, insert, expected_version=None, guard_positions=True)

    def delete(nb: Notebook) -> Plan:
        return plan_delete(nb, [0])

    with pytest.raises(ConflictError, match="changed by someone else"):
        await store.edit("a.ipynb", alice, delete, expected_version=None, guard_positions=True)
    await store.load("a.ipynb", alice)  # she reads the change: her edit by position is hers
    done = await store.edit("a.ipynb", alice, delete, expected_version=None, guard_positions=True)
    assert done.after.notebook.cells == []
