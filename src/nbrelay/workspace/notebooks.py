"""Notebooks as the workspace holds them: reading, creating, the one edit primitive, undo history
and what the agent has viewed.

``Notebooks.edit`` runs a planner against the freshest notebook under the store's lock and
records the change for ``undo``; every editing operation (``editing.py``) and every saved output
(``runs.py``) goes through it.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections import deque
from collections.abc import Sequence

import anyio
import anyio.to_thread

from nbrelay.config import Settings
from nbrelay.errors import ConflictError, RemoteError
from nbrelay.notebook import edits, history
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import Cell, IdFactory, Notebook, new_notebook
from nbrelay.notebook.search import Match, compile_pattern, search
from nbrelay.stores.base import (
    Capabilities,
    EditOutcome,
    Entry,
    Flushing,
    NotebookStore,
    Planner,
    Snapshot,
)


def positional(ref: CellRef | None, ids: Sequence[str] | None = None) -> bool:
    """Whether a reference depends on cell positions (an index or range, not an id)."""
    if ref is None:
        return False
    if isinstance(ref, int):
        return True
    if ids is not None:
        return ref not in ids
    # Without the ids at hand, only what reads as an index or a range ("3", "2:5") may be one;
    # any other string can only be a cell id, which stays valid when other cells move.
    return _INDEX_OR_RANGE.fullmatch(ref) is not None


_INDEX_OR_RANGE = re.compile(r"\s*-?\d*\s*(?::\s*-?\d*\s*)?")


class Notebooks:
    """The notebooks of one store: reads, creation, edits with their undo history, and the
    version of each notebook the agent last viewed."""

    def __init__(self, settings: Settings, store: NotebookStore, id_factory: IdFactory) -> None:
        self.settings = settings
        self.store = store
        self.id_factory = id_factory
        self._history: dict[str, deque[history.Change]] = {}
        self._viewed: dict[str, str] = {}  # notebook -> the version the agent last viewed

    @property
    def capabilities(self) -> Capabilities:
        """What the store can do (asked each time: the live store learns late whether the
        server has real-time collaboration)."""
        return self.store.capabilities

    # -- reading --------------------------------------------------------------------------

    def relative(self, path: str) -> str:
        """Validate a notebook path and return its normal form relative to the root, as every
        result names it (raises ``PathError``)."""
        return self.store.relative(path)

    async def peek(self, path: str) -> Snapshot:
        """The notebook as it is now, without counting as the agent's read (the guard on edits
        by position is left as it was): for watchers such as the change feed."""
        return await self.store.peek(path)

    async def list_notebooks(
        self, folder: str = "", *, recursive: bool = True, pattern: str | None = None
    ) -> list[Entry]:
        found = await self.store.list(folder, recursive=recursive)
        if pattern:
            found = [e for e in found if fnmatch.fnmatch(e.path, pattern)]
        return found

    async def read(self, path: str) -> Snapshot:
        return await self.store.load(path)

    async def search(
        self,
        path: str,
        pattern: str,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        outputs: bool = False,
        cell_types: Sequence[str] = ("code", "markdown", "raw"),
    ) -> tuple[Snapshot, list[Match]]:
        pat = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        snap = await self.store.load(path)
        # Off the event loop: the regex engine releases the GIL and stops at its time limit.
        found = await anyio.to_thread.run_sync(
            functools.partial(search, snap.notebook, pat, cell_types=cell_types, outputs=outputs)
        )
        return snap, found

    # -- what the agent has seen ----------------------------------------------------------

    async def view(self, path: str) -> Snapshot:
        """Read a notebook and remember its version as the one the agent has now seen."""
        snap = await self.store.load(path)
        self._viewed[snap.path] = snap.version
        return snap

    async def unchanged_since_viewed(
        self, path: str, *, hint: str = "Read the notebook again, then retry."
    ) -> Snapshot:
        """The current notebook, if it is the version the agent last viewed (nbrelay's own edits
        and saved outputs keep a view current); otherwise ``ConflictError``, nothing done."""
        snap = await self.store.load(path)
        seen = self._viewed.get(snap.path)
        if seen is None:
            raise ConflictError(
                f"you have not viewed {snap.path!r} yet, so nbrelay cannot tell whether your "
                "idea of its cells is current. Nothing was changed.",
                current=snap.version,
                hint=hint,
            )
        if seen != snap.version:
            raise ConflictError(
                f"{snap.path!r} has changed since you last viewed it (someone edited or ran "
                "it). Nothing was changed.",
                current=snap.version,
                hint=hint,
            )
        return snap

    # -- creating -------------------------------------------------------------------------

    async def create_notebook(
        self,
        path: str,
        cells: Sequence[CellSpec] = (),
        *,
        kernel_name: str = "python3",
        language: str | None = None,
        overwrite: bool = False,
    ) -> Snapshot:
        nb = new_notebook(kernel_name=kernel_name, language=language or _language_of(kernel_name))
        if cells:
            plan = edits.plan_insert(nb, 0, cells, self.id_factory)
            nb = nb.with_cells(edits.apply([], plan.edits))
        return await self.create_from(path, nb, overwrite=overwrite)

    async def create_from(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        """Create a notebook from a parsed notebook (used by import)."""
        snap = await self.store.create(path, notebook, overwrite=overwrite)
        if not notebook.cells and self.store.mode == "live":
            snap = await self._without_placeholder(snap.path)
        self._history.pop(self.store.relative(path), None)
        return snap

    async def _without_placeholder(self, rel: str) -> Snapshot:
        """A notebook created without cells has none, in every mode. A collaboration room shows
        a file without cells as one empty code cell (jupyter_ydoc adds it when the room loads
        the file): that cell is taken out of the room again, unless someone typed in it."""

        def plan(nb: Notebook) -> edits.Plan:
            if len(nb.cells) == 1 and _placeholder(nb.cells[0]):
                return edits.Plan(edits=(edits.DeleteCells((nb.cells[0]["id"],)),), touched=())
            return edits.Plan(edits=(), touched=())

        outcome = await self.store.edit(rel, plan, expected_version=None, guard_positions=False)
        return outcome.after

    async def save(self, path: str) -> Snapshot:
        """Wait until the notebook's file holds every edit made so far (live mode saves in the
        background); the notebook as saved, with a note if the server did not confirm it."""
        rel = self.store.relative(path)
        why = await self.store.flush(rel) if isinstance(self.store, Flushing) else None
        if why is None:
            return await self.store.load(rel)
        raise RemoteError(
            f"the Jupyter Server did not confirm saving {rel!r} ({why}).",
            hint="The edits are live in JupyterLab; retry save_notebook in a moment.",
        )

    def forget(self, rel: str) -> None:
        """A notebook went away (deleted or moved): drop its undo history and viewed version."""
        self._history.pop(rel, None)
        self._viewed.pop(rel, None)

    # -- editing --------------------------------------------------------------------------

    async def edit(
        self,
        path: str,
        label: str,
        planner: Planner,
        *,
        expected_version: str | None = None,
        positional: bool = True,
        record: bool = True,
    ) -> EditOutcome:
        """Run ``planner`` against the current notebook and apply its edits atomically.

        ``positional`` says whether the request addressed cells by position (then a change made
        by someone else since the last read is a conflict); ``record`` adds it to undo history.
        """
        outcome = await self.store.edit(
            path, planner, expected_version=expected_version, guard_positions=positional
        )
        if record and outcome.plan.edits:
            change = history.record(
                label, outcome.before.notebook.cells, outcome.after.notebook.cells
            )
            if not change.empty and self.settings.undo_depth > 0:
                key = self.store.relative(path)
                self._history.setdefault(key, deque(maxlen=self.settings.undo_depth)).append(change)
        # nbrelay's own edits (and saved outputs) do not make the agent's view stale.
        if self._viewed.get(outcome.after.path) == outcome.before.version:
            self._viewed[outcome.after.path] = outcome.after.version
        return outcome

    def changes(self, rel: str) -> deque[history.Change] | None:
        """The recorded changes of a notebook that ``undo`` may revert (newest last)."""
        return self._history.get(rel)


def _placeholder(cell: Cell) -> bool:
    """Whether a cell is the empty code cell a room shows for a notebook without cells."""
    return (
        cell.get("cell_type") == "code"
        and not cell.get("source")
        and not cell.get("outputs")
        and cell.get("execution_count") is None
    )


def _language_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    if "python" in lowered:
        return "python"
    if "deno" in lowered or "typescript" in lowered:
        return "typescript"
    return {"ir": "R"}.get(lowered, lowered)
