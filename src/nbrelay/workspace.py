"""The workspace: the one service API every tool of every profile calls.

It owns the store (where notebooks live), the edit history that ``undo`` reverts, and turns each
editing request into a planner that the store runs against the freshest notebook under its lock.
Cell references are resolved inside the planner, never against an older read.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbrelay.config import Settings
from nbrelay.errors import InvalidArgument, UndoRefused
from nbrelay.notebook import address, edits, history
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import IdFactory, Notebook, new_notebook, random_id
from nbrelay.notebook.search import Match, compile_pattern, search
from nbrelay.stores.base import EditOutcome, Entry, NotebookStore, Planner, Snapshot


def _positional(ref: CellRef | None, ids: Sequence[str] | None = None) -> bool:
    """Whether a reference depends on cell positions (an index or range, not an id)."""
    if ref is None:
        return False
    if isinstance(ref, int):
        return True
    return ids is None or ref not in ids


@dataclass(frozen=True)
class UndoOutcome:
    outcome: EditOutcome
    labels: tuple[str, ...]


class Workspace:
    """Notebook operations over one store; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        store: NotebookStore,
        *,
        id_factory: IdFactory = random_id,
    ) -> None:
        self.settings = settings
        self.store = store
        self._id_factory = id_factory
        self._history: dict[str, deque[history.Change]] = {}

    async def aclose(self) -> None:
        await self.store.aclose()

    # -- reading --------------------------------------------------------------------------

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
        return snap, search(snap.notebook, pat, cell_types=cell_types, outputs=outputs)

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
            plan = edits.plan_insert(nb, 0, cells, self._id_factory)
            nb = nb.with_cells(edits.apply([], plan.edits))
        snap = await self.store.create(path, nb, overwrite=overwrite)
        self._history.pop(self.store.relative(path), None)
        return snap

    async def create_from(self, path: str, notebook: Notebook, *, overwrite: bool) -> Snapshot:
        """Create a notebook from a parsed notebook (used by import)."""
        snap = await self.store.create(path, notebook, overwrite=overwrite)
        self._history.pop(self.store.relative(path), None)
        return snap

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
        return outcome

    async def insert_cells(
        self,
        path: str,
        cells: Sequence[CellSpec],
        *,
        index: int | None = None,
        after: CellRef | None = None,
        expected_version: str | None = None,
    ) -> EditOutcome:
        if index is not None and after is not None:
            raise InvalidArgument(
                "give either index or after, not both.",
                hint="index places the new cells before that position; after places them "
                "right after the given cell.",
            )

        def planner(nb: Notebook) -> Plan:
            if after is not None:
                at = address.resolve_one(nb.ids, after) + 1
            else:
                at = address.insertion_index(len(nb.cells), index)
            return edits.plan_insert(nb, at, cells, self._id_factory)

        positional = (index is not None and index not in (-1,)) or _positional(after)
        return await self.edit(
            path, "insert cells", planner, expected_version=expected_version, positional=positional
        )

    async def edit_cell(
        self,
        path: str,
        cell: CellRef,
        *,
        source: str | None = None,
        find: str | None = None,
        replace: str | None = None,
        replace_all: bool = False,
        cell_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        clear_outputs: bool = False,
        expected_version: str | None = None,
    ) -> EditOutcome:
        if source is not None and find is not None:
            raise InvalidArgument(
                "give either source (the whole new text) or find/replace, not both."
            )
        if find is not None and replace is None:
            raise InvalidArgument("find needs replace (the text to put instead).")
        if replace is not None and find is None:
            raise InvalidArgument("replace needs find (the exact text to replace).")
        if (
            source is None
            and find is None
            and cell_type is None
            and metadata is None
            and tags is None
        ):
            raise InvalidArgument(
                "nothing to change.",
                hint="Give source, find+replace, cell_type, metadata or tags.",
            )

        def planner(nb: Notebook) -> Plan:
            i = address.resolve_one(nb.ids, cell)
            steps: list[Plan] = []
            current = nb
            if cell_type is not None:
                steps.append(edits.plan_set_type(current, i, cell_type))
                current = current.with_cells(edits.apply(current.cells, steps[-1].edits))
            if source is not None:
                steps.append(edits.plan_set_source(current, i, source, clear_outputs=clear_outputs))
            elif find is not None and replace is not None:
                steps.append(
                    edits.plan_find_replace(current, i, find, replace, replace_all=replace_all)
                )
            if source is not None or find is not None:
                current = current.with_cells(edits.apply(current.cells, steps[-1].edits))
            if metadata is not None or tags is not None:
                steps.append(edits.plan_metadata(current, i, metadata=metadata, tags=tags))
            detail: dict[str, Any] = {}
            for s in steps:
                detail.update(s.detail)
            return Plan(
                edits=tuple(e for s in steps for e in s.edits),
                touched=(nb.cells[i]["id"],),
                detail=detail,
            )

        return await self.edit(
            path,
            "edit cell",
            planner,
            expected_version=expected_version,
            positional=_positional(cell),
        )

    async def delete_cells(
        self, path: str, cells: Sequence[CellRef], *, expected_version: str | None = None
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            return edits.plan_delete(nb, address.resolve_many(nb.ids, cells))

        return await self.edit(
            path,
            "delete cells",
            planner,
            expected_version=expected_version,
            positional=any(_positional(c) for c in cells),
        )

    async def move_cells(
        self, path: str, cells: Sequence[CellRef], to: int, *, expected_version: str | None = None
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            return edits.plan_move(nb, address.resolve_many(nb.ids, cells), to)

        return await self.edit(
            path, "move cells", planner, expected_version=expected_version, positional=True
        )

    async def merge_cells(
        self,
        path: str,
        cells: Sequence[CellRef],
        *,
        separator: str = "\n",
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            return edits.plan_merge(nb, address.resolve_many(nb.ids, cells), separator)

        return await self.edit(
            path,
            "merge cells",
            planner,
            expected_version=expected_version,
            positional=any(_positional(c) for c in cells),
        )

    async def split_cell(
        self,
        path: str,
        cell: CellRef,
        lines: Sequence[int],
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            i = address.resolve_one(nb.ids, cell)
            return edits.plan_split(nb, i, lines, self._id_factory)

        return await self.edit(
            path,
            "split cell",
            planner,
            expected_version=expected_version,
            positional=_positional(cell),
        )

    async def clear_outputs(
        self,
        path: str,
        cells: Sequence[CellRef] | None = None,
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            idx = (
                list(range(len(nb.cells))) if cells is None else address.resolve_many(nb.ids, cells)
            )
            return edits.plan_clear_outputs(nb, idx)

        return await self.edit(
            path,
            "clear outputs",
            planner,
            expected_version=expected_version,
            positional=cells is not None and any(_positional(c) for c in cells),
            record=False,
        )

    async def undo(
        self, path: str, steps: int = 1, *, expected_version: str | None = None
    ) -> UndoOutcome:
        if steps < 1:
            raise InvalidArgument("steps must be at least 1.")
        key = self.store.relative(path)
        past = self._history.get(key)
        if not past:
            raise UndoRefused(
                f"there is nothing to undo in {key!r}: nbrelay has made no edits to it since it "
                "started (or they were already undone).",
                hint="Undo only reverts edits made through nbrelay's tools in this session.",
            )
        if steps > len(past):
            raise UndoRefused(
                f"only {len(past)} change(s) can be undone in {key!r}, not {steps}.",
                hint=f"Pass steps={len(past)} or less.",
            )
        changes = list(past)[-steps:][::-1]

        def planner(nb: Notebook) -> Plan:
            cells = nb.cells
            all_edits: list[edits.Edit] = []
            for change in changes:
                step = history.plan_undo(cells, change)
                cells = edits.apply(cells, step)
                all_edits.extend(step)
            touched = tuple(
                dict.fromkeys(cid for ch in changes for cid in (*ch.before, *ch.after, *ch.moved))
            )
            return Plan(edits=tuple(all_edits), touched=touched)

        outcome = await self.edit(
            path, "undo", planner, expected_version=expected_version, positional=False, record=False
        )
        for _ in changes:
            past.pop()
        return UndoOutcome(outcome, tuple(c.label for c in changes))


def _language_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    if "python" in lowered:
        return "python"
    if "deno" in lowered or "typescript" in lowered:
        return "typescript"
    return {"ir": "R"}.get(lowered, lowered)
