"""Editing operations: each request becomes a planner that resolves cell references against the
freshest notebook, then goes through ``Notebooks.edit``; ``undo`` reverts what it recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from nbrelay.caller import Caller
from nbrelay.errors import InvalidArgument, UndoRefused
from nbrelay.notebook import address, edits, history
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import Notebook
from nbrelay.notebook.search import compile_pattern, substitute
from nbrelay.stores.base import EditOutcome, Planner
from nbrelay.workspace.notebooks import Notebooks
from nbrelay.workspace.notebooks import positional as _positional

logger = logging.getLogger("nbrelay")


@dataclass(frozen=True)
class UndoOutcome:
    outcome: EditOutcome
    labels: tuple[str, ...]


class Editing:
    """Insert, edit, delete, move, merge, split, clear, replace and undo, on ``notebooks``."""

    def __init__(self, notebooks: Notebooks) -> None:
        self._notebooks = notebooks

    async def set_sources(
        self,
        path: str,
        caller: Caller,
        changes: Sequence[tuple[CellRef, str]],
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        """Replace the source of several cells in one atomic edit; a range sets every cell in
        it. Outputs are kept (as JupyterLab keeps them until the cell runs again)."""
        if not changes:
            raise InvalidArgument("no cells given.", hint="Give at least one cell and its source.")

        def planner(nb: Notebook) -> Plan:
            current, steps = nb, []
            for ref, source in changes:
                for i in address.resolve(current.ids, ref):
                    step = edits.plan_set_source(current, i, source)
                    current = edits.apply_notebook(current, step.edits)
                    steps.append(step)
            return _chained(steps, tuple(dict.fromkeys(t for s in steps for t in s.touched)))

        return await self._edit(
            path, caller, "edit cells", planner, expected_version, (ref for ref, _ in changes)
        )

    async def insert_cells(
        self,
        path: str,
        caller: Caller,
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
            return edits.plan_insert(nb, at, cells, self._notebooks.id_factory)

        positional = (index is not None and index not in (-1,)) or _positional(after)
        return await self._notebooks.edit(
            path,
            caller,
            "insert cells",
            planner,
            expected_version=expected_version,
            positional=positional,
        )

    async def edit_cell(
        self,
        path: str,
        caller: Caller,
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
                current = edits.apply_notebook(current, steps[-1].edits)
            if source is not None:
                steps.append(edits.plan_set_source(current, i, source, clear_outputs=clear_outputs))
            elif find is not None and replace is not None:
                steps.append(
                    edits.plan_find_replace(current, i, find, replace, replace_all=replace_all)
                )
            if source is not None or find is not None:
                current = edits.apply_notebook(current, steps[-1].edits)
            if metadata is not None or tags is not None:
                steps.append(edits.plan_metadata(current, i, metadata=metadata, tags=tags))
            detail: dict[str, Any] = {}
            for s in steps:
                detail.update(s.detail)
            return _chained(steps, (nb.cells[i]["id"],), detail)

        return await self._edit(path, caller, "edit cell", planner, expected_version, (cell,))

    async def delete_cells(
        self,
        path: str,
        caller: Caller,
        cells: Sequence[CellRef],
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            return edits.plan_delete(nb, address.resolve_many(nb.ids, cells))

        return await self._edit(path, caller, "delete cells", planner, expected_version, cells)

    async def move_cells(
        self,
        path: str,
        caller: Caller,
        cells: Sequence[CellRef],
        to: int,
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            return edits.plan_move(nb, address.resolve_many(nb.ids, cells), to)

        return await self._notebooks.edit(
            path, caller, "move cells", planner, expected_version=expected_version, positional=True
        )

    async def merge_cells(
        self,
        path: str,
        caller: Caller,
        cells: Sequence[CellRef],
        *,
        separator: str = "\n",
        cell_type: str | None = None,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            idx = address.resolve_many(nb.ids, cells)
            return edits.plan_merge(nb, idx, separator, cell_type)

        return await self._edit(path, caller, "merge cells", planner, expected_version, cells)

    async def split_cell(
        self,
        path: str,
        caller: Caller,
        cell: CellRef,
        lines: Sequence[int],
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            i = address.resolve_one(nb.ids, cell)
            return edits.plan_split(nb, i, lines, self._notebooks.id_factory)

        return await self._edit(path, caller, "split cell", planner, expected_version, (cell,))

    async def clear_outputs(
        self,
        path: str,
        caller: Caller,
        cells: Sequence[CellRef] | None = None,
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            idx = (
                list(range(len(nb.cells))) if cells is None else address.resolve_many(nb.ids, cells)
            )
            return edits.plan_clear_outputs(nb, idx)

        return await self._edit(
            path, caller, "clear outputs", planner, expected_version, cells or (), record=False
        )

    async def replace_in_cells(
        self,
        path: str,
        caller: Caller,
        pattern: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        cell_types: Sequence[str] = ("code", "markdown", "raw"),
        cells: Sequence[CellRef] | None = None,
        expected_version: str | None = None,
    ) -> EditOutcome:
        """Replace every match in the sources of the notebook's cells (all, or ``cells``), in
        one edit and one undo step; outputs are kept. ``plan.detail`` has the count
        (``replacements``) and each changed cell's diff (``diffs``). With ``regex``,
        ``replacement`` may use ``\\1`` and ``\\g<name>``; otherwise both are literal text."""
        pat = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        kinds = set(cell_types)

        def substitute_all(nb: Notebook) -> dict[str, tuple[str, int]]:
            pat.restart()
            sources = {str(c.get("source", "")) for c in nb.cells if c.get("cell_type") in kinds}
            return {source: substitute(pat, replacement, source, regex=regex) for source in sources}

        # The matching runs on a worker thread, against the notebook as it is now (the regex
        # engine releases the GIL and stops at its time limit); the planner, which may run on
        # the event loop, then only looks the results up (and matches a cell changed meanwhile).
        done = await anyio.to_thread.run_sync(
            substitute_all, (await self._notebooks.peek(path, caller)).notebook
        )

        def planner(nb: Notebook) -> Plan:
            steps: list[Plan] = []
            diffs: list[dict[str, Any]] = []
            total = 0
            pat.restart()
            chosen = range(len(nb.cells)) if cells is None else address.resolve_many(nb.ids, cells)
            for i in chosen:
                cell = nb.cells[i]
                if cell.get("cell_type") not in kinds:
                    continue
                source = str(cell.get("source", ""))
                hit = done.get(source)
                new, count = (
                    hit if hit is not None else substitute(pat, replacement, source, regex=regex)
                )
                if count and new != source:
                    total += count
                    steps.append(edits.plan_set_source(nb, i, new, merge=False))
                    diff = edits.unified_diff(source, new, context=1)
                    diffs.append(
                        {"index": i, "id": cell["id"], "replacements": count, "diff": diff}
                    )
            touched = tuple(c for s in steps for c in s.touched)
            return _chained(steps, touched, {"replacements": total, "diffs": diffs})

        return await self._edit(
            path, caller, "replace in cells", planner, expected_version, cells or ()
        )

    async def set_notebook_metadata(
        self,
        path: str,
        caller: Caller,
        metadata: Mapping[str, Any],
        *,
        expected_version: str | None = None,
    ) -> EditOutcome:
        """Merge keys into the notebook's own metadata (a None value deletes the key)."""
        if not metadata:
            raise InvalidArgument(
                "no metadata keys given.", hint='Give keys to set, e.g. {"title": "EDA"}.'
            )

        def planner(nb: Notebook) -> Plan:
            return edits.plan_notebook_metadata(nb, metadata)

        return await self._edit(
            path, caller, "set notebook metadata", planner, expected_version, ()
        )

    async def undo(
        self, path: str, caller: Caller, steps: int = 1, *, expected_version: str | None = None
    ) -> UndoOutcome:
        """Revert ``caller``'s newest ``steps`` edits of ``path`` (its own only)."""
        if steps < 1:
            raise InvalidArgument("steps must be at least 1.")
        key = self._notebooks.relative(path)
        past = await self._notebooks.changes(key, caller)
        if not past:
            raise UndoRefused(
                f"there is nothing to undo in {key!r}: you have made no edits to it through "
                "nbrelay since it started (or they were already undone).",
                hint="Undo reverts only your own edits (this MCP session's); another client's "
                "edits are theirs to undo.",
            )
        if steps > len(past):
            raise UndoRefused(
                f"only {len(past)} change(s) can be undone in {key!r}, not {steps}.",
                hint=f"Pass steps={len(past)} or less.",
            )
        changes = list(past)[-steps:][::-1]

        def planner(nb: Notebook) -> Plan:
            now = nb  # each change is undone on the notebook the later ones' undos left
            all_edits: list[edits.Edit] = []
            for change in changes:
                metadata = now.data.get("metadata") or {}
                step = history.plan_undo(now.cells, change, metadata, where=now.position)
                now = edits.apply_notebook(now, step)
                all_edits.extend(step)
            touched = tuple(
                dict.fromkeys(cid for ch in changes for cid in (*ch.before, *ch.after, *ch.moved))
            )
            return Plan(edits=tuple(all_edits), touched=touched)

        outcome = await self._notebooks.edit(
            path,
            caller,
            "undo",
            planner,
            expected_version=expected_version,
            positional=False,
            record=False,
        )
        await self._notebooks.callers.drop(caller, key, len(changes))
        return UndoOutcome(outcome, tuple(c.label for c in changes))

    async def _edit(
        self,
        path: str,
        caller: Caller,
        label: str,
        planner: Planner,
        expected_version: str | None,
        refs: Iterable[CellRef | None],
        *,
        record: bool = True,
    ) -> EditOutcome:
        """Run ``planner`` through ``Notebooks.edit``, as a positional request when any of
        ``refs`` names a cell by position (an index or a range, not an id)."""
        return await self._notebooks.edit(
            path,
            caller,
            label,
            planner,
            expected_version=expected_version,
            positional=any(_positional(ref) for ref in refs),
            record=record,
        )


def _chained(
    steps: Sequence[Plan], touched: tuple[str, ...], detail: Mapping[str, Any] | None = None
) -> Plan:
    """One plan making the edits of ``steps`` in order (each planned on the one before)."""
    return Plan(
        edits=tuple(e for s in steps for e in s.edits), touched=touched, detail=detail or {}
    )
