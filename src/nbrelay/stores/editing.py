"""What every store's ``edit`` shares: the notebook's lock, the checks against what the reader
last saw, and the plan made and validated in memory.

``LockedEdits.edit`` holds the notebook's lock while the store reads the freshest content, checks
and plans the edit (``Readers.plan``) and applies it, so a plan can never be made against one
version and applied to another. Each store supplies only the step that differs: how it reads
and writes (a file, the contents API, a live room).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import anyio

from nbrelay.caller import Caller
from nbrelay.errors import ConflictError, NotebookInvalid, act
from nbrelay.notebook import validate
from nbrelay.notebook.edits import Edit, Plan, SetMetadata, apply_notebook, changed_cells
from nbrelay.notebook.merge_read import merge_with_read
from nbrelay.notebook.model import Notebook, Sources
from nbrelay.notebook.repair import repairs
from nbrelay.stores.base import EditOutcome, LastSeen, Planner, Snapshot
from nbrelay.stores.shelf import Seen, Shelf

_STALE_HINT = act("stale")

LastRead = tuple[str | None, tuple[str, ...] | None, Mapping[str, str] | None]
"""What a reader last read of a notebook: its version, cell order and sources (each None:
not known)."""


class LockedEdits(ABC):
    """``NotebookStore.edit`` for every store: one lock per notebook (``lock``, made on first
    use) is held while ``_edit_locked`` (the store's own step) plans and applies the edit."""

    @functools.cached_property
    def _locks(self) -> defaultdict[str, anyio.Lock]:
        return defaultdict(anyio.Lock)

    def lock(self, key: str) -> anyio.Lock:
        """The lock of the notebook ``key`` (its relative path; in file mode, its real path)."""
        return self._locks[key]

    @abstractmethod
    def relative(self, path: str) -> str:
        """Validate a notebook path and return its normal relative form (raises PathError)."""

    async def edit(
        self,
        path: str,
        caller: Caller,
        planner: Planner,
        *,
        expected_version: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        """See ``NotebookStore.edit``."""
        rel, key = await self._edit_target(path, caller)
        async with self.lock(key):
            return await self._edit_locked(
                rel, key, caller, planner, expected_version, guard_positions
            )

    async def _edit_target(self, path: str, caller: Caller) -> tuple[str, str]:
        """The notebook's relative path and the key of its lock (by default the same), for
        ``caller`` (a store that asks whether it may write asks here)."""
        rel = self.relative(path)
        return rel, rel

    @abstractmethod
    async def _edit_locked(
        self,
        rel: str,
        key: str,
        caller: Caller,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
    ) -> EditOutcome:
        """Read the notebook, check and plan the edit (``Readers.plan``) and apply it, the
        lock held; record what ``caller`` now knows."""


class Readers:
    """What each reader (MCP session) last saw of each notebook, by key (its path; in file mode
    its real path): the version (a change made since is reported, and may refuse an edit by
    position), the cells' sources (a whole new source written over a change made since is
    merged with it) and, in a store with live rooms, the cells' order."""

    def __init__(self, shelf: Shelf | None = None, *, notebooks_kept: bool = True) -> None:
        """``shelf``: each reader's reads are kept on disk too, for every process on the root
        (replicas behind one address); in memory only without it. The shelf's files are read
        and written in a worker thread (never on the event loop), and each method returns only
        once they are, so a reader's next request, through any process, sees its read.

        ``notebooks_kept``: the store keeps the notebooks it serves (a cache, a room) and calls
        ``let_go`` when it drops one; until then what readers saw of its sources is a view of
        its cells. A store that keeps none says False: only the sources are kept."""
        self.version: LastSeen[str] = LastSeen()
        self.order: LastSeen[tuple[str, ...]] = LastSeen()
        self.sources: LastSeen[Mapping[str, str]] = LastSeen()
        self._shelf = shelf
        self._notebooks_kept = notebooks_kept

    async def remember(
        self, key: str, caller: Caller, snap: Snapshot, order: Iterable[str] | None = None
    ) -> None:
        """``caller`` has just read (or written) ``snap`` of ``key``."""
        kept = tuple(order) if order is not None else None
        sources = snap.notebook.sources()
        self._remember_here(key, caller, snap, kept, sources)
        reader = caller.key
        if self._shelf is not None and reader:
            await anyio.to_thread.run_sync(
                self._shelf.put, reader, key, snap.version, kept, sources.as_dict()
            )

    def _remember_here(
        self,
        key: str,
        caller: Caller,
        snap: Snapshot,
        kept: tuple[str, ...] | None,
        sources: Mapping[str, str],
    ) -> None:
        self.version.set(key, caller, snap.version)
        if kept is not None:
            self.order.set(key, caller, kept)
        self.sources.set(key, caller, sources if self._notebooks_kept else _without_cells(sources))

    async def last(self, key: str, caller: Caller, *, sources: bool = True) -> LastRead:
        """What ``caller`` last read of ``key``: version, order, sources (from the shelf when
        there is one, so a read through another process counts)."""
        reader = caller.key
        if self._shelf is not None and reader:
            seen = await anyio.to_thread.run_sync(
                functools.partial(self._shelf.get, reader, key, sources=sources)
            )
            return self._known(key, caller, seen)
        return self._known(key, caller, None)

    def last_sync(self, key: str, caller: Caller, *, sources: bool = True) -> LastRead:
        """``last`` for a caller already in a worker thread (it blocks on the shelf's files)."""
        reader = caller.key
        seen = None
        if self._shelf is not None and reader:
            seen = self._shelf.get(reader, key, sources=sources)
        return self._known(key, caller, seen)

    def _known(self, key: str, caller: Caller, seen: Seen | None) -> LastRead:
        if seen is not None and seen.version is not None:
            return seen.version, seen.order, seen.sources
        return (
            self.version.get(key, caller),
            self.order.get(key, caller),
            self.sources.get(key, caller),
        )

    async def observe(
        self, key: str, caller: Caller, snap: Snapshot, order: Iterable[str] | None = None
    ) -> Snapshot:
        """Remember ``snap`` as ``caller``'s read; flagged if someone else changed the notebook
        since."""
        reader = caller.key
        if self._shelf is not None and reader:  # one trip to a worker thread, not two
            shelf, kept = self._shelf, tuple(order) if order is not None else None
            sources = snap.notebook.sources()

            def swap() -> Seen | None:
                seen = shelf.get(reader, key, sources=False)
                shelf.put(reader, key, snap.version, kept, sources.as_dict())
                return seen

            known = self._known(key, caller, await anyio.to_thread.run_sync(swap))[0]
            self._remember_here(key, caller, snap, kept, sources)
        else:
            known = self.version.get(key, caller)
            await self.remember(key, caller, snap, order)
        changed = known is not None and known != snap.version
        return replace(snap, changed_outside=True) if changed else snap

    async def forget(self, key: str) -> None:
        self._forget_here(key)
        if self._shelf is not None:
            await anyio.to_thread.run_sync(self._shelf.forget, key)

    def forget_sync(self, key: str) -> None:
        """``forget`` for a caller already in a worker thread."""
        self._forget_here(key)
        if self._shelf is not None:
            self._shelf.forget(key)

    def let_go(self, key: str) -> None:
        """The notebook at ``key`` is no longer kept: what readers saw of its sources is kept
        without its cells (their outputs above all), so that only the cache's bound decides
        how many notebooks stay in memory. Safe in a worker thread."""
        self.sources.shrink(key, _without_cells)

    def _forget_here(self, key: str) -> None:
        for seen in (self.version, self.order, self.sources):
            seen.forget(key)

    def plan(
        self,
        key: str,
        caller: Caller,
        before: Snapshot,
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
        fix_hint: str,
        *,
        order: Sequence[str] | None = None,
        told: str = "",
        seen: LastRead | None = None,
    ) -> tuple[Plan, Notebook | None, bool]:
        """Check an edit of ``before`` against what ``caller`` last saw, then plan it (see
        ``plan_edit``). Returns the plan, the new notebook (None when the plan changes nothing)
        and whether someone else changed the notebook since the reader's last read (the edit
        reports it). ``seen`` is that read (``last``); without it, it is fetched here, which
        blocks on the shelf's files: only in a worker thread, or with no shelf.

        A stale ``expected`` version is refused. An edit by position (``guard_positions``, no
        version given) is refused when its positions may point at other cells now: in a store
        that knows the cell ``order`` (live rooms), when cells were inserted, deleted or moved
        since the last read (typing moves none); in the others, when the notebook changed at
        all. ``told`` (live mode's notes) ends each refusal.
        """
        rel = before.path
        _refuse_stale(rel, expected, before.version, told)
        known, known_order, read = seen if seen is not None else self.last_sync(key, caller)
        outside = known is not None and known != before.version
        if guard_positions and expected is None:
            if order is None and outside:
                raise _positions_moved(f"{rel!r} was changed by someone else", before.version, told)
            if order is not None and known_order is not None and known_order != tuple(order):
                raise _positions_moved(
                    f"someone else inserted, deleted or moved cells of {rel!r}",
                    before.version,
                    told,
                )
        plan, after = plan_edit(before, planner, fix_hint=fix_hint, read=read)
        return plan, after, outside

    def plan_in_room(
        self,
        caller: Caller,
        before: Snapshot,
        order: Sequence[str],
        planner: Planner,
        expected: str | None,
        guard_positions: bool,
        told: str = "",
        *,
        seen: LastRead,
    ) -> tuple[Snapshot, Plan, Notebook | None, bool]:
        """``plan`` for a live room's notebook (cells in ``order``); ``before`` is returned
        flagged if it changed since. ``seen``: the reader's last read (``last``)."""
        plan, after, outside = self.plan(
            before.path,
            caller,
            before,
            planner,
            expected,
            guard_positions,
            "Fix it in JupyterLab, then retry.",
            order=order,
            told=told,
            seen=seen,
        )
        return replace(before, changed_outside=outside), plan, after, outside


def _refuse_stale(rel: str, expected: str | None, current: str, told: str = "") -> None:
    """Refuse an edit based on ``expected`` when the notebook is now ``current``."""
    if expected is not None and expected != current:
        raise ConflictError(
            f"{rel!r} changed since version {expected}: it is now version {current}. "
            f"Nothing was changed.{told}",
            current=current,
            hint=_STALE_HINT,
        )


def _positions_moved(what: str, current: str, told: str = "") -> ConflictError:
    """The refusal of an edit by position after ``what`` happened since the caller's read."""
    return ConflictError(
        f"{what} since you last read it, and this edit addresses cells by position, which may "
        f"now point at other cells. Nothing was changed.{told}",
        current=current,
        hint=act("positions"),
    )


def plan_edit(
    before: Snapshot,
    planner: Planner,
    *,
    fix_hint: str,
    read: Mapping[str, str] | None = None,
) -> tuple[Plan, Notebook | None]:
    """Run ``planner`` on ``before`` and apply its edits in memory, validating the cells they
    change. Returns the plan and the new notebook (stored as nbformat 4.5, which keeps cell
    ids), or None when the plan changes nothing.

    ``read`` is what the caller last read of each cell (``Notebook.sources``): a whole new
    source it wrote for a cell that changed since is merged three-way with that change
    (``merge_read.merge_with_read``).

    Raises:
        NotebookInvalid: ``before`` failed validation when read (nbrelay never writes an
            invalid notebook), or the edit would make a cell invalid.
        ConflictError: a whole new source changes the same lines as someone else's change
            made since the caller's read.
    """
    base = before.notebook
    fixes: list[Edit] = []
    notes: list[str] = []
    if before.problems:
        fixes, notes = repairs(base)
        if fixes:
            base = apply_notebook(base, fixes)
        found = validate.problems(base) if fixes else list(before.problems)
        if found:
            raise NotebookInvalid(
                f"{before.path!r} fails nbformat validation: {'; '.join(found)}.",
                hint=f"nbrelay never writes an invalid notebook. {fix_hint}",
            )
    plan = planner(base)
    try:
        plan = merge_with_read(plan, base, read)
    except ConflictError as exc:
        exc.current = before.version
        raise
    if not plan.edits:
        return plan, None
    minor = before.notebook.data.get("nbformat_minor")
    if not isinstance(minor, int) or minor < validate.CURRENT_MINOR:
        was = before.notebook.upgraded_from or f"4.{minor or 0}"
        notes.insert(
            0,
            f"The notebook was stored as nbformat 4.{validate.CURRENT_MINOR} (it was {was}), "
            "with its cell ids, as Jupyter stores it.",
        )
    if notes:
        plan = replace(plan, detail={**plan.detail, "repaired": notes, "repairs": fixes})
    edits = (*fixes, *plan.edits)
    after = apply_notebook(before.notebook, edits)
    changed = changed_cells(after, edits)
    future = validate.from_future(after)
    validate.check_cells(changed, future=future)
    if any(isinstance(e, SetMetadata) for e in edits):
        validate.check_top_level(after)
    if fixes:
        plan = replace(plan, edits=edits)
    after.data["nbformat_minor"] = max(validate.CURRENT_MINOR, int(minor or 0))
    after.ids_made = False
    after.problems = []  # what was said about reading the file no longer holds once written
    return plan, after


def _without_cells(seen: Mapping[str, str]) -> Mapping[str, str]:
    return seen.detached() if isinstance(seen, Sources) else seen
