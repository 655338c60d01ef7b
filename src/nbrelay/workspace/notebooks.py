"""Notebooks as the workspace holds them: reading, creating, the one edit primitive, undo history
and what the agent has viewed.

``Notebooks.edit`` runs a planner against the freshest notebook under the store's lock and
records the change for ``undo``; every editing operation (``editing.py``) and every saved output
(``runs.py``) goes through it. Undo history and viewed versions belong to the caller
(``nbrelay.caller``: one MCP session, or what identifies a client without one): a client undoes
only its own edits, and what it viewed says nothing about what another client viewed.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from nbrelay.caller import Caller
from nbrelay.config import Settings
from nbrelay.errors import (
    ConflictError,
    InvalidArgument,
    NotebookInvalid,
    PathError,
    RemoteError,
    StoreError,
)
from nbrelay.notebook import edits, history, nblr
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import IdFactory, Notebook, new_notebook
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
from nbrelay.stores.paths import Glob, is_glob
from nbrelay.stores.rtc_events import RELOADED
from nbrelay.stores.rtc_rooms import RoomHost
from nbrelay.workspace.caller_state import CallerState, SharedCallerState

SEARCH_SECONDS = 20.0  # one search over many notebooks; then it returns what it found so far
_MATCH_CHARS = 50  # what a match costs in a result besides its notebook's path, id and line
_AT_ONCE = 8  # notebooks a search over many reads and searches at a time


@dataclass
class ManyFound:
    """What a search over many notebooks found: (notebook path, match) in listing order."""

    where: str
    matches: list[tuple[str, Match]] = field(default_factory=list)
    total: int = 0  # matches in the notebooks searched (more than shown if one was cut)
    searched: int = 0
    next_start: int | None = None
    out_of_time: bool = False
    unreadable: list[str] = field(default_factory=list)
    cut: tuple[str, int, int] | None = None  # (notebook, matches shown, matches in it)


def names_one_notebook(path: str) -> bool:
    """Whether ``path`` names one notebook, rather than a folder or a glob of many."""
    return not is_glob(path) and path.strip().endswith((".ipynb", nblr.SUFFIX))


def _cost(path: str, m: Match) -> int:
    """About the characters one match of a search over many adds to the result."""
    return len(path) + len(m.id) + len(m.text) + _MATCH_CHARS


def _within(path: str, hits: list[Match], limit: int, chars: int) -> list[Match]:
    """The first matches of one notebook that fit ``limit`` and ``chars`` (at least one)."""
    kept: list[Match] = []
    size = 0
    for m in hits[:limit]:
        size += _cost(path, m)
        if kept and size > chars:
            break
        kept.append(m)
    return kept


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
    """The notebooks of one store: reads, creation, edits with each caller's undo history, and
    the version of each notebook each caller last viewed."""

    def __init__(self, settings: Settings, store: NotebookStore, id_factory: IdFactory) -> None:
        self.settings = settings
        self.store = store
        self.id_factory = id_factory
        # What each caller viewed and may undo: with --shared-state, shared by every process
        # on the root (replicas behind one address), else this process's.
        key = store.capabilities.state_key
        self.callers: CallerState = (
            SharedCallerState(settings.undo_depth, key)
            if key is not None and settings.shared_state
            else CallerState(settings.undo_depth)
        )

    @property
    def capabilities(self) -> Capabilities:
        """What the store can do (asked each time: the live store learns late whether the
        server has real-time collaboration)."""
        return self.store.capabilities

    def read_room_placeholder_as_a_cell(self) -> None:
        """Read the empty code cell a collaboration room gives a notebook without cells as a
        cell, as JupyterLab shows it to a person, instead of as no cells (the store's default):
        for a profile whose original reads the room so. Nothing to do without rooms."""
        if isinstance(self.store, RoomHost):
            self.store.placeholder_is_a_cell = True

    # -- reading --------------------------------------------------------------------------

    def relative(self, path: str) -> str:
        """Validate a notebook path and return its normal form relative to the root, as every
        result names it (raises ``PathError``)."""
        return self.store.relative(path)

    async def peek(self, path: str, caller: Caller) -> Snapshot:
        """The notebook as it is now, without counting as ``caller``'s read (the guard on edits
        by position is left as it was): for watchers such as the change feed."""
        return await self.store.peek(path, caller)

    async def list_notebooks(
        self,
        folder: str,
        caller: Caller,
        *,
        recursive: bool = True,
        pattern: str | None = None,
        limit: int | None = None,
    ) -> list[Entry]:
        """The notebooks under ``folder`` in walk order (the first ``limit``), those ``pattern``
        matches (a ``paths.Glob``, which also decides which folders are walked)."""
        glob = Glob(pattern) if pattern is not None else None
        return await self.store.find(folder, caller, recursive=recursive, glob=glob, limit=limit)

    async def read(self, path: str, caller: Caller) -> Snapshot:
        """The notebook, read by ``caller`` (an edit by position is checked against it)."""
        return await self.store.load(path, caller)

    async def search(
        self,
        path: str,
        caller: Caller,
        pattern: str,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        outputs: bool = False,
        cell_types: Sequence[str] = ("code", "markdown", "raw"),
    ) -> tuple[Snapshot, list[Match]]:
        pat = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        snap = await self.store.load(path, caller)
        # Off the event loop: the regex engine releases the GIL and stops at its time limit.
        found = await anyio.to_thread.run_sync(
            functools.partial(search, snap.notebook, pat, cell_types=cell_types, outputs=outputs)
        )
        return snap, found

    async def search_many(
        self,
        where: str,
        caller: Caller,
        pattern: str,
        *,
        regex: bool = False,
        case_sensitive: bool = False,
        outputs: bool = False,
        start: int = 0,
        limit: int = 100,
        chars: int = 6000,
        seconds: float = SEARCH_SECONDS,
    ) -> ManyFound:
        """Search the notebooks a folder holds (recursively) or a glob matches, in listing
        order from the ``start``-th, and stop before the notebook whose matches would pass
        ``limit`` matches or about ``chars`` characters, or after ``seconds``; ``next_start``
        says where to go on. Notebooks that cannot be read are skipped and named."""
        compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)  # refuse it early
        if is_glob(where):
            entries = await self.store.find("", caller, glob=Glob(where))
        else:
            entries = await self.store.find(where, caller)
        found = ManyFound(where=where)
        deadline = anyio.current_time() + seconds
        size = 0
        hits: list[list[Match] | None] = [None] * _AT_ONCE
        failed: list[InvalidArgument] = []

        async def one(slot: int, path: str) -> None:
            try:
                snap = await self.store.scan(path, caller)
            except (NotebookInvalid, PathError, StoreError):  # broken, or gone since listed
                return
            # A pattern of its own per notebook: each search has the whole time limit.
            pat = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
            try:
                hits[slot] = await anyio.to_thread.run_sync(
                    functools.partial(search, snap.notebook, pat, outputs=outputs)
                )
            except InvalidArgument as exc:  # the pattern ran out of time: said as for one
                failed.append(exc)

        k = start
        while k < len(entries) and found.next_start is None:
            if k > start and anyio.current_time() > deadline:
                found.next_start, found.out_of_time = k, True
                break
            window = entries[k : k + _AT_ONCE]
            hits[:] = [None] * _AT_ONCE
            async with anyio.create_task_group() as tg:  # a few at once: threads' wake-ups overlap
                for slot, entry in enumerate(window):
                    tg.start_soon(one, slot, entry.path)
            if failed:
                raise failed[0]
            for slot, entry in enumerate(window):
                got = hits[slot]
                if got is None:
                    found.unreadable.append(entry.path)
                    continue
                cost = sum(_cost(entry.path, m) for m in got)
                if got and (len(found.matches) + len(got) > limit or size + cost > chars):
                    after = k + slot
                    if not found.matches:  # the first notebook alone is over: its first matches
                        kept = _within(entry.path, got, limit, chars)
                        found.matches += [(entry.path, m) for m in kept]
                        found.total += len(got)
                        found.cut = (entry.path, len(kept), len(got))
                        after += 1
                    found.next_start = after if after < len(entries) else None
                    found.searched = after - start
                    return found
                found.matches += [(entry.path, m) for m in got]
                found.total += len(got)
                size += cost
            k += len(window)
        found.searched = max((found.next_start or len(entries)) - start, 0)
        return found

    # -- what the agent has seen ----------------------------------------------------------

    async def view(self, path: str, caller: Caller) -> Snapshot:
        """Read a notebook and remember its version as the one ``caller`` has now seen."""
        snap = await self.store.load(path, caller)
        await self.callers.set_viewed(caller, snap.path, snap.version)
        return snap

    async def unchanged_since_viewed(
        self, path: str, caller: Caller, *, hint: str = "Read the notebook again, then retry."
    ) -> Snapshot:
        """The current notebook, if it is the version ``caller`` last viewed (nbrelay's own edits
        and saved outputs keep a view current); otherwise ``ConflictError``, nothing done."""
        snap = await self.store.load(path, caller)
        seen = await self.callers.viewed(caller, snap.path)
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
        caller: Caller,
        cells: Sequence[CellSpec] = (),
        *,
        kernel_name: str = "python3",
        language: str | None = None,
        display_name: str | None = None,
        overwrite: bool = False,
    ) -> Snapshot:
        nb = new_notebook(
            kernel_name=kernel_name,
            display_name=display_name,
            language=language or _language_of(kernel_name),
        )
        if cells:
            plan = edits.plan_insert(nb, 0, cells, self.id_factory)
            nb = nb.with_cells(edits.apply([], plan.edits))
        return await self.create_from(path, caller, nb, overwrite=overwrite)

    async def create_from(
        self, path: str, caller: Caller, notebook: Notebook, *, overwrite: bool
    ) -> Snapshot:
        """Create a notebook from a parsed notebook (used by import)."""
        snap = await self.store.create(path, caller, notebook, overwrite=overwrite)
        await self.callers.forget(self.store.relative(path))
        return snap

    async def save(self, path: str, caller: Caller) -> Snapshot:
        """Wait until the notebook's file holds every edit made so far (live mode saves in the
        background); the notebook as saved, with a note if the server did not confirm it."""
        rel = self.store.relative(path)
        why = await self.store.flush(rel, caller) if isinstance(self.store, Flushing) else None
        if why is None:
            return await self.store.load(rel, caller)
        if why.startswith("failed:"):
            hint = (
                "The edits are live in JupyterLab but the server cannot write the file: fix what "
                "its message names (the server's log has the details), then call save_notebook "
                "again."
            )
        elif why == RELOADED:
            hint = (
                "nbrelay applies again those of your edits the file lacked, unless the file "
                "changed the same cells (your next result names each); then call save_notebook "
                "again."
            )
        else:
            hint = "The edits are live in JupyterLab; retry save_notebook in a moment."
        raise RemoteError(f"the Jupyter Server did not confirm saving {rel!r} ({why}).", hint=hint)

    async def forget(self, rel: str) -> None:
        """A notebook went away (deleted or moved): drop its undo histories and viewed versions."""
        await self.callers.forget(rel)

    # -- editing --------------------------------------------------------------------------

    async def edit(
        self,
        path: str,
        caller: Caller,
        label: str,
        planner: Planner,
        *,
        expected_version: str | None = None,
        positional: bool = True,
        record: bool = True,
    ) -> EditOutcome:
        """Run ``planner`` against the current notebook and apply its edits atomically.

        ``positional`` says whether the request addressed cells by position (then a change made
        by someone else since the last read is a conflict); ``record`` adds it to ``caller``'s
        undo history.
        """
        outcome = await self.store.edit(
            path, caller, planner, expected_version=expected_version, guard_positions=positional
        )
        detail = outcome.plan.detail
        if detail.get("repaired"):  # upgraded or repaired on this write: say so
            outcome = dataclasses.replace(outcome, notes=(*outcome.notes, _repaired(detail)))
        if record and outcome.plan.edits:
            # Repairs made on the way are not the caller's change: undo keeps them.
            repairs = detail.get("repairs")
            before = outcome.before.notebook
            before = edits.apply_notebook(before, repairs) if repairs else before
            change = history.record(
                label,
                before.cells,
                outcome.after.notebook.cells,
                (
                    before.data.get("metadata") or {},
                    outcome.after.notebook.data.get("metadata") or {},
                ),
                order=before.ids,
                changed=outcome.after.notebook.changed_from(before.cells),
                spliced=outcome.after.notebook.spliced_from(before.cells),
            )
            if not change.empty and self.settings.undo_depth > 0:
                await self.callers.record(caller, self.store.relative(path), change)
        # The caller's own edits (and saved outputs) do not make its view stale.
        if outcome.before.version != outcome.after.version:
            await self.callers.keep_viewed(
                caller, outcome.after.path, outcome.before.version, outcome.after.version
            )
        return outcome

    async def changes(self, rel: str, caller: Caller) -> list[history.Change]:
        """``caller``'s recorded changes of a notebook that ``undo`` may revert (newest last)."""
        return await self.callers.changes(caller, rel)


def _repaired(detail: Mapping[str, Any]) -> str:
    """The note of a write that upgraded or repaired the notebook on the way."""
    return " ".join(detail["repaired"])


def _language_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    if "python" in lowered:
        return "python"
    if "deno" in lowered or "typescript" in lowered:
        return "typescript"
    return {"ir": "R"}.get(lowered, lowered)
