"""Result models (structured output) and the helpers that build them from workspace values.

Field names are short and stable: agents, docs and tests rely on them. ``None`` fields are left
out of results, so optional fields cost nothing when unused.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from nbrelay.notebook import render
from nbrelay.notebook.model import Cell
from nbrelay.notebook.search import Match
from nbrelay.stores.base import EditOutcome, Entry, Snapshot
from nbrelay.timestamps import utc_iso
from nbrelay.workspace import Workspace
from nbrelay.workspace.notebooks import SEARCH_SECONDS, ManyFound


class CellLoc(BaseModel):
    index: int
    id: str


class NotebookEntry(BaseModel):
    path: str
    size: int
    modified: str


class NotebookList(BaseModel):
    folder: str
    count: int
    notebooks: list[NotebookEntry]
    next_start: int | None = None


class OutputView(BaseModel):
    output: int
    type: str
    text: str
    name: str | None = None
    image: str | None = None
    cut: int | None = None
    omitted: str | None = None
    size: int | None = None  # a stream's or an error's characters
    mimes: dict[str, int] | None = None  # a rich output's formats and their characters


class CellView(BaseModel):
    index: int
    id: str
    type: str
    source: str
    execution_count: int | None = None
    outputs: list[OutputView] | None = None
    output_summary: str | None = None
    metadata: dict[str, Any] | None = None


class NotebookView(BaseModel):
    path: str
    version: str
    cell_count: int
    kernel: str | None = None
    cells: list[CellView]
    next_start: int | None = None
    note: str | None = None
    problems: list[str] | None = None


class CellRead(BaseModel):
    path: str
    version: str
    cell: CellView
    note: str | None = None


class MergedCell(BaseModel):
    """A cell someone else changed since the caller read it; ``theirs`` is that change (a diff
    from the source as read to the source the edit was merged with)."""

    index: int
    id: str
    theirs: str


class CellDiff(BaseModel):
    index: int
    id: str
    replacements: int
    diff: str


class EditResult(BaseModel):
    path: str
    version: str
    changed: list[CellLoc]
    removed: list[CellLoc] | None = None
    diff: str | None = None
    diffs: list[CellDiff] | None = None
    merged: list[MergedCell] | None = None
    replacements: int | None = None
    undone: list[str] | None = None
    note: str | None = None
    execution: ExecutionResult | None = None


class MatchView(BaseModel):
    path: str | None = None  # a search over many notebooks: the notebook
    index: int
    id: str
    line: int
    text: str
    where: str | None = None


class SearchResult(BaseModel):
    path: str
    version: str | None = None  # one notebook's
    total: int
    matches: list[MatchView]
    searched: int | None = None  # a folder or glob: notebooks searched
    next_start: int | None = None
    note: str | None = None


def iso(ts: float | None) -> str:
    """``ts`` (epoch seconds) to the second, as ``2026-01-02T03:04:05Z``; "" for None."""
    return "" if ts is None else utc_iso(ts, timespec="seconds")


_ENTRY_CHARS = 64  # what a listed notebook costs in a result besides its path


def notebook_list(
    folder: str, entries: list[Entry], start: int = 0, limit: int | None = None, chars: int = 0
) -> NotebookList:
    """The notebooks ``entries[start:start + limit]`` (``entries`` may hold one more, to tell
    that more remain), fewer if their paths pass about ``chars`` characters (0: no bound), with
    where the next page starts."""
    end = len(entries) if limit is None else min(start + limit, len(entries))
    page = entries[start:end]
    if chars:
        size = 0
        for k, e in enumerate(page):
            size += len(e.path) + _ENTRY_CHARS
            if k and size > chars:
                page = page[:k]
                break
    after = start + len(page)
    return NotebookList(
        folder=folder or ".",
        count=len(page),
        notebooks=[NotebookEntry(path=e.path, size=e.size, modified=iso(e.modified)) for e in page],
        next_start=after if after < len(entries) else None,
    )


OUTSIDE_NOTE = (
    "The notebook changed since you last read it (another client, a person or a program); "
    "this result shows it as it is now."
)
EDITED_AFTER_CHANGE_NOTE = (
    "The notebook had changed since you last read it (another client, a person or a program); "
    "your edit was made to it as it is now."
)


def cell_view(
    cell: Cell,
    index: int,
    *,
    full: bool,
    budget: render.Budget | None,
    preview_lines: int = render.PREVIEW_LINES,
    path: str | None = None,
    outputs: list[dict[str, Any]] | None = None,
) -> CellView:
    """One cell as read tools show it; ``outputs`` are its outputs already rendered (by
    ``full_views``, which shares the budget among many cells); ``path`` lets image outputs say
    how to get them."""
    kind = str(cell.get("cell_type", ""))
    source = str(cell.get("source", ""))
    fields: dict[str, Any] = {
        "index": index,
        "id": str(cell["id"]),
        "type": kind,
        "source": source if full else render.source_preview(source, preview_lines),
    }
    if kind == "code":
        count = cell.get("execution_count")
        fields["execution_count"] = count if isinstance(count, int) else None
        if budget is not None and full:
            if outputs is None:
                outputs = render.render_many([cell], budget, image_hint=_pointer(path, [cell]))[0]
            fields["outputs"] = [OutputView(**v) for v in outputs] or None
        elif budget is not None:
            fields["output_summary"] = render.outputs_summary(cell) or None
    if full:
        meta = {k: v for k, v in (cell.get("metadata") or {}).items() if k != "trusted"}
        fields["metadata"] = meta or None
    # Built at once (pydantic's validation runs in Rust): setting fields one by one afterwards
    # cost an overview of hundreds of cells twice as much.
    return CellView(**fields)


def image_pointer(path: str, cell: str, output: int) -> str:
    """How to get an image output: the exact read_output call (canonical profile)."""
    return (
        f"read_output(path={json.dumps(path, ensure_ascii=False)}, "
        f"cell={json.dumps(cell, ensure_ascii=False)}, output={output}) returns the image"
    )


def _pointer(path: str | None, cells: list[Cell]) -> Any:
    if path is None:
        return None
    return lambda n, k: image_pointer(path, str(cells[n]["id"]), k)


def full_views(
    path: str, cells: list[Cell], indexes: range, budget: render.Budget
) -> list[CellView]:
    """Whole cells with their outputs, every output of every cell sharing ``budget``."""
    chosen = [cells[i] for i in indexes]
    rendered = render.render_many(chosen, budget, image_hint=_pointer(path, chosen))
    return [
        cell_view(cells[i], i, full=True, budget=budget, path=path, outputs=outs)
        for i, outs in zip(indexes, rendered, strict=True)
    ]


class OverviewMemo:
    """Overview views of cells (``cell_view(..., full=False)`` without the index), kept per
    notebook and found by cell identity, so that reading an unchanged notebook again, or after
    an edit elsewhere in it, renders only the cells that changed.

    Stores never change a cell dict in place (an edit makes new dicts and shares the others),
    so a cell that is the very object seen before has the same overview. Entries hold their
    cell, which keeps its ``id()`` from being reused while the entry lives; entries for cells
    no longer in the notebook are dropped at its next read."""

    NOTEBOOKS = 32  # notebooks remembered; the one read longest ago is forgotten first

    def __init__(self) -> None:
        self._by_path: dict[str, dict[int, tuple[Cell, dict[str, Any]]]] = {}

    @classmethod
    def of(cls, ws: Workspace) -> OverviewMemo:
        """The memo of a workspace (attached to it): one per server."""
        return ws.attached(cls, lambda _: cls())

    def views(self, path: str, cells: list[Cell], start: int, end: int) -> list[CellView]:
        known = self._by_path.pop(path, {})
        alive = {id(c) for c in cells}
        kept = {k: v for k, v in known.items() if k in alive}
        views = []
        for i in range(start, end):
            cell = cells[i]
            hit = kept.get(id(cell))
            if hit is None:
                fields = cell_view(cell, i, full=False, budget=_NO_BUDGET).model_dump(
                    exclude={"index"}
                )
                hit = kept[id(cell)] = (cell, fields)
            views.append(CellView(index=i, **hit[1]))
        self._by_path[path] = kept
        while len(self._by_path) > self.NOTEBOOKS:
            del self._by_path[next(iter(self._by_path))]
        return views


# An overview never spends the output budget (it shows one summary line per cell).
_NO_BUDGET = render.Budget(0, 0)


def snapshot_note(snap: Snapshot) -> str | None:
    """The note a read result carries: changed outside, plus what the store wants said."""
    notes = [OUTSIDE_NOTE] if snap.changed_outside else []
    notes.extend(snap.notes)
    return " ".join(notes) or None


def edit_result(outcome: EditOutcome, *, note: str | None = None) -> EditResult:
    after, before = outcome.after.notebook, outcome.before.notebook
    changed = [
        CellLoc(index=i, id=c) for c in outcome.plan.touched if (i := after.position(c)) is not None
    ]
    removed = [
        CellLoc(index=i, id=c)
        for c in outcome.plan.touched
        if after.position(c) is None and (i := before.position(c)) is not None
    ]
    detail = outcome.plan.detail
    merged = [MergedCell(**m) for m in detail.get("merged") or ()]
    told = outcome.changed_outside and not merged  # a merge's own note says it
    notes = [n for n in (note, EDITED_AFTER_CHANGE_NOTE if told else None) if n]
    notes.extend(outcome.notes)
    if outcome.before.notebook.replaced and outcome.plan.edits:
        notes.append(
            f"The notebook was saved with U+FFFD in place of {outcome.before.notebook.replaced} "
            "unpaired surrogate code point(s) that are not valid Unicode."
        )
    if not outcome.plan.edits:
        notes.append("Nothing needed changing; the notebook was not written.")
    if merged:
        cells = ", ".join(str(m.index) for m in merged)
        notes.insert(
            0,
            f"Cell {cells} had been changed since you last read it (by a person or another "
            "client); your new source was merged with that change, which is kept (see merged).",
        )
    return EditResult(
        path=outcome.after.path,
        version=outcome.after.version,
        changed=sorted(changed, key=lambda c: c.index),
        removed=removed or None,
        diff=detail.get("diff") or None,
        diffs=[CellDiff(**d) for d in detail.get("diffs") or ()] or None,
        merged=merged or None,
        replacements=detail.get("replacements"),
        note=" ".join(notes) or None,
    )


def created_result(snap: Snapshot) -> EditResult:
    """A notebook just created (or imported): every cell is new."""
    changed = [CellLoc(index=i, id=c) for i, c in enumerate(snap.notebook.ids)]
    return EditResult(path=snap.path, version=snap.version, changed=changed)


def add_run(result: EditResult, run: ExecutionResult | None) -> None:
    """Attach the run that followed an edit: the run saved outputs, so its version is the
    notebook's current one; the result carries that one version, at the top."""
    result.execution = run
    if run is not None and run.version is not None:
        result.version = run.version
        run.version = None


def many_result(found: ManyFound) -> SearchResult:
    """A search over the notebooks of a folder or glob: each match with its notebook."""
    notes: list[str] = []
    if found.cut is not None:
        path, shown, total = found.cut
        notes.append(
            f"{path!r} alone has {total} matches, {shown} shown: search it alone (its path, a "
            "higher limit) for the rest."
        )
    if found.out_of_time:
        notes.append(f"Stopped after {SEARCH_SECONDS:g} s; pass start=next_start to go on.")
    if found.unreadable:
        names = ", ".join(repr(p) for p in found.unreadable[:5])
        more = "…" if len(found.unreadable) > 5 else ""
        notes.append(
            f"{len(found.unreadable)} notebook(s) could not be read and were skipped: "
            f"{names}{more}."
        )
    return SearchResult(
        path=found.where or ".",
        total=found.total,
        searched=found.searched,
        matches=[
            MatchView(
                path=path,
                index=m.index,
                id=m.id,
                line=m.line,
                text=m.text,
                where="output" if m.where == "output" else None,
            )
            for path, m in found.matches
        ],
        next_start=found.next_start,
        note=" ".join(notes) or None,
    )


def search_result(snap: Snapshot, matches: list[Match], limit: int) -> SearchResult:
    return SearchResult(
        path=snap.path,
        version=snap.version,
        total=len(matches),
        matches=[
            MatchView(
                index=m.index,
                id=m.id,
                line=m.line,
                text=m.text,
                where="output" if m.where == "output" else None,
            )
            for m in matches[:limit]
        ],
    )


class RunOutput(BaseModel):
    """One output of a run; ``offset`` > 0 means the text before it was returned earlier."""

    output: int
    type: str
    text: str
    name: str | None = None
    image: str | None = None
    offset: int | None = None
    cut: int | None = None
    omitted: str | None = None
    size: int | None = None  # a stream's or an error's characters
    mimes: dict[str, int] | None = None  # a rich output's formats and their characters


class RunCell(BaseModel):
    index: int | None = None
    id: str | None = None
    status: str
    execution_count: int | None = None
    seconds: float | None = None
    outputs: list[RunOutput] | None = None
    note: str | None = None


class ExecutionResult(BaseModel):
    path: str
    status: str
    handle: str | None = None
    kernel: str
    cells: list[RunCell]
    version: str | None = None
    seconds: float
    state_lost: bool | None = None
    note: str | None = None


class VisualData(BaseModel):
    """A cell's result drawn or tabulated (shared by visualize_cell and its profile variants)."""

    kind: str
    type: str
    chart: str | None = None
    x: str | None = None
    y: list[str] | None = None
    nodes: int | None = None
    edges: int | None = None
    columns: list[str] | None = None
    rows: list[list[Any]] | None = None
    total_rows: int | None = None
