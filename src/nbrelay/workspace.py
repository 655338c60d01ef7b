"""The workspace: the one service API every tool of every profile calls.

It owns the store (where notebooks live), the edit history that ``undo`` reverts, and turns each
editing request into a planner that the store runs against the freshest notebook under its lock.
Cell references are resolved inside the planner, never against an older read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import itertools
import json
import logging
import os
import posixpath
import re
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.to_thread

from nbrelay import formats
from nbrelay.config import Settings
from nbrelay.errors import (
    ConflictError,
    InvalidArgument,
    KernelError,
    NbrelayError,
    NotebookExists,
    NotebookInvalid,
    NotebookNotFound,
    UndoRefused,
    Unsupported,
)
from nbrelay.kernels import introspect, visualize
from nbrelay.kernels.base import KernelInfo, KernelProvider, KernelSpecInfo
from nbrelay.kernels.execution import Policy, Runner
from nbrelay.kernels.jobs import CellRun, Job, run_job
from nbrelay.notebook import address, edits, history
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec, Plan
from nbrelay.notebook.model import IdFactory, Notebook, new_notebook, parse, random_id
from nbrelay.notebook.outputs import Limits, Output
from nbrelay.notebook.search import Match, compile_pattern, search
from nbrelay.stores.base import (
    Document,
    DocumentStore,
    EditOutcome,
    Entry,
    LiveSessions,
    NotebookStore,
    Planner,
    Snapshot,
)
from nbrelay.stores.files import FileStore, map_big_buffers, release_memory

if TYPE_CHECKING:
    from anyio.abc import TaskGroup


logger = logging.getLogger("nbrelay")


def _positional(ref: CellRef | None, ids: Sequence[str] | None = None) -> bool:
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


@dataclass(frozen=True)
class ExportOutcome:
    snapshot: Snapshot
    exported: formats.Exported
    saved: tuple[str, ...] = ()  # files written, relative to the root (the export first)


@dataclass
class NotebookSession:
    """A notebook held open for an agent: its kernel and, in live mode, its room (epoch times)."""

    path: str
    session_id: str
    file_id: str
    live: bool
    started: float
    last_activity: float
    active: bool = True


def file_id(rel: str) -> str:
    """A stable id for a notebook path (file mode has no file id service)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nbrelay:" + rel))


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
        kernels: KernelProvider | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self._id_factory = id_factory
        self._history: dict[str, deque[history.Change]] = {}
        self._kernels = kernels
        self._runners: dict[str, Runner] = {}
        self._jobs: dict[str, Job] = {}
        self._job_numbers = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._ran: dict[str, deque[dict[str, Any]]] = {}  # execution history of pruned jobs
        self._suspended: dict[str, KernelInfo] = {}  # idle sessions whose kernel was stopped
        self._resumed: dict[str, str] = {}  # notes for the next run of a resumed session
        self._viewed: dict[str, str] = {}  # notebook -> the version the agent last viewed
        self._sessions: dict[str, NotebookSession] = {}
        self._kernel_line: anyio.Lock | None = None  # --max-kernels: notebooks waiting for one
        self._reserved: set[str] = set()  # notebooks given a kernel slot, kernel not yet running

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Workspace]:
        """Run the background work (executions that outlast a call, the warm kernel pool, the
        idle-kernel reaper) while the server runs; close everything at the end."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self._kernels is not None:
                    self._kernels.attach(tg)
                attach_store = getattr(self.store, "attach", None)
                if attach_store is not None:  # the live store keeps its rooms open in tg
                    attach_store(tg)
                tg.start_soon(self._reap_idle_kernels)
                tg.start_soon(self._release_memory)
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._tg = None
            await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.settings.persist_sessions:
                for key, runner in list(self._runners.items()):
                    await self._persist(key, runner)
            if self._kernels is not None:
                await self._kernels.aclose()
            self._runners.clear()
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

    # -- export and import ----------------------------------------------------------------

    def _files(self, what: str) -> FileStore:
        if not isinstance(self.store, FileStore):
            raise Unsupported(
                f"{what} needs file mode (--root).",
                hint="Export without save, or import from content, and handle the file yourself.",
            )
        return self.store

    async def export_notebook(
        self,
        path: str,
        fmt: str = "ipynb",
        *,
        outputs: bool = True,
        save: bool = False,
        to: str | None = None,
        overwrite: bool = False,
        image_link: formats.ImageLink | None = None,
    ) -> ExportOutcome:
        """Convert a notebook; with ``save`` or ``to`` write it (default: next to the notebook,
        same name, the format's extension) instead of returning it inline."""
        formats.export_info(fmt)
        if to is not None:
            self._files("saving an export").file_path(to)
        snap = await self.store.load(path)
        target = to
        if target is None and save:
            self._files("saving an export")
        stem = posixpath.splitext(posixpath.basename(target or snap.path))[0]
        exported = await formats.export(
            snap.notebook,
            fmt,
            outputs=outputs,
            stem=stem,
            image_link=None if (save or to) else image_link,
            browser=self.settings.browser,
            time_limit=self.settings.export_timeout,
        )
        if not (save or to):
            return ExportOutcome(snap, exported)
        target = target or posixpath.splitext(snap.path)[0] + exported.extension
        if not target.endswith(exported.extension):
            raise InvalidArgument(
                f"{target!r} does not end in {exported.extension}, the {fmt} file extension.",
                hint=f'Give a path like "{posixpath.splitext(target)[0]}{exported.extension}".',
            )
        if target.endswith(".ipynb"):
            await self.create_from(target, parse(exported.data, name=target), overwrite=overwrite)
            return ExportOutcome(snap, exported, (self.store.relative(target),))
        store = self._files("saving an export")
        folder = posixpath.dirname(target)
        files = {target: exported.data}
        files.update({posixpath.join(folder, n): b for n, b in exported.files.items()})
        await store.write_files(files, overwrite=overwrite)
        return ExportOutcome(snap, exported, tuple(store.file_path(p) for p in files))

    async def import_notebook(
        self,
        path: str,
        *,
        content: str | None = None,
        source: str | None = None,
        fmt: str = "auto",
        overwrite: bool = False,
        prepare: Callable[[Notebook], None] | None = None,
    ) -> Snapshot:
        """Create notebook ``path`` from text (``content``) or a file under the root
        (``source``) in an import format; nothing is written if the input is bad. ``prepare``
        may adjust the parsed notebook (its metadata, say) before it is written."""
        if (content is None) == (source is None):
            raise InvalidArgument(
                "give either content (the text to import) or source (a file under the root).",
            )
        self.store.relative(path)
        filename = None
        if source is not None:
            filename, raw = await self._files("importing a file").read_file(source)
            try:
                content = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise NotebookInvalid(
                    f"{filename!r} is not UTF-8 text (byte {exc.start} is invalid).",
                    hint="Import text files: ipynb, Markdown, MyST or a script.",
                ) from exc
        text = content or ""
        nb = await anyio.to_thread.run_sync(
            lambda: formats.import_notebook(text, fmt, filename=filename)
        )
        if prepare is not None:
            prepare(nb)
        return await self.create_from(path, nb, overwrite=overwrite)

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

    async def set_sources(
        self,
        path: str,
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
                    current = current.with_cells(edits.apply(current.cells, step.edits))
                    steps.append(step)
            return Plan(
                edits=tuple(e for s in steps for e in s.edits),
                touched=tuple(dict.fromkeys(t for s in steps for t in s.touched)),
            )

        return await self.edit(
            path,
            "edit cells",
            planner,
            expected_version=expected_version,
            positional=any(_positional(ref) for ref, _ in changes),
        )

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
        cell_type: str | None = None,
        expected_version: str | None = None,
    ) -> EditOutcome:
        def planner(nb: Notebook) -> Plan:
            idx = address.resolve_many(nb.ids, cells)
            return edits.plan_merge(nb, idx, separator, cell_type)

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

    async def replace_in_cells(
        self,
        path: str,
        pattern: str,
        replacement: str,
        *,
        regex: bool = False,
        case_sensitive: bool = True,
        cell_types: Sequence[str] = ("code", "markdown", "raw"),
        expected_version: str | None = None,
    ) -> EditOutcome:
        """Replace every match in the sources of the notebook's cells (outputs are kept); the
        count is ``plan.detail["replacements"]``. With ``regex``, ``replacement`` may use
        ``\\1`` and ``\\g<name>``; otherwise both are literal text."""
        pat = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        kinds = set(cell_types)

        def planner(nb: Notebook) -> Plan:
            steps: list[Plan] = []
            total = 0
            for i, cell in enumerate(nb.cells):
                if cell.get("cell_type") not in kinds:
                    continue
                source = str(cell.get("source", ""))
                try:
                    if regex:
                        new, count = pat.subn(replacement, source)
                    else:
                        new, count = pat.subn(lambda _: replacement, source)
                except (re.error, IndexError) as exc:
                    raise InvalidArgument(
                        f"the replacement {replacement!r} is invalid: {exc}.",
                        hint="Group references are \\1 or \\g<name>; pass regex=false for "
                        "literal text.",
                    ) from exc
                if count and new != source:
                    total += count
                    steps.append(edits.plan_set_source(nb, i, new))
            return Plan(
                edits=tuple(e for s in steps for e in s.edits),
                touched=tuple(c for s in steps for c in s.touched),
                detail={"replacements": total},
            )

        return await self.edit(
            path, "replace in cells", planner, expected_version=expected_version, positional=False
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

    # -- running code ---------------------------------------------------------------------

    def _provider(self) -> KernelProvider:
        if self._kernels is None:
            from nbrelay.kernels.local import LocalKernels
            from nbrelay.kernels.sandbox import launch_policy

            root = getattr(self.store, "root", None)
            self._kernels = LocalKernels(
                policy=launch_policy(self.settings),
                # a warm kernel would have to see every folder: sandboxed kernels start cold
                pool_size=0 if self.settings.sandbox else self.settings.kernel_pool,
                pool_cwd=str(root) if root is not None else None,
                output_cap=self.settings.cell_output_limit,
            )
            if self._tg is not None:
                self._kernels.attach(self._tg)
        return self._kernels

    def _policy(self, language: str) -> Policy:
        return Policy(
            interrupt_grace=self.settings.interrupt_grace,
            late_output=0.0 if language == "python" else 0.05,
        )

    def _kernel_cwd(self, rel: str) -> str:
        folder = posixpath.dirname(rel)
        root = getattr(self.store, "root", None)
        return os.path.normpath(os.path.join(str(root), folder)) if root is not None else folder

    async def _runner(self, snap: Snapshot) -> Runner:
        if self.settings.no_execute:  # every way to run code starts here, whatever the tool
            raise Unsupported(
                "this server runs no code (it was started with --no-execute).",
                hint="Notebooks can still be read and edited; run them elsewhere.",
            )
        kernel_name = snap.notebook.kernel_name or "python3"
        self._check_sessions(snap.path)
        provider = self._provider()
        waited = await self._kernel_slot(snap.path)
        try:
            session = await provider.session(
                snap.path, kernel_name=kernel_name, cwd=self._kernel_cwd(snap.path)
            )
        finally:
            if waited is not None:
                self._reserved.discard(snap.path)
        runner = self._runners.get(snap.path)
        if runner is None or runner.session is not session:
            policy = self._policy(session.info.language)
            runner = self._runners[snap.path] = Runner(session, policy)
            await self._resume(snap.path, runner)
            if waited is not None and waited >= 1:
                note = f"waited {waited:.0f} s for a kernel (--max-kernels {self.settings.max_kernels})"
                self._resumed[snap.path] = "; ".join(
                    filter(None, (self._resumed.get(snap.path), note))
                )
        return runner

    async def _kernel_slot(self, key: str) -> float | None:
        """With --max-kernels, wait in line (first come, first served) until ``key`` may start a
        kernel, and reserve the slot; returns the seconds waited (None: no slot was needed). Room is made by stopping the
        least recently used idle kernel (its notebook is suspended, as after
        --kernel-idle-timeout); while every kernel is busy, the wait lasts until one is free, at
        most --execution-timeout seconds (the time any cell may run)."""
        limit = self.settings.max_kernels
        kernels = self._kernels
        if not limit or kernels is None or kernels.get(key) is not None or key in self._reserved:
            return None
        if self._kernel_line is None:
            self._kernel_line = anyio.Lock()
        started = time.monotonic()
        try:
            with anyio.fail_after(self.settings.execution_timeout):
                async with self._kernel_line:
                    while len({k.key for k in kernels.running()} | self._reserved) >= limit:
                        if not await self._stop_least_recent(key):
                            await anyio.sleep(0.1)
                    self._reserved.add(key)
        except TimeoutError as exc:
            raise KernelError(
                f"{key!r} waited {self.settings.execution_timeout:g} s for a kernel: all "
                f"{limit} kernels this server runs at once (--max-kernels) stayed busy.",
                hint="Retry when a run has ended, or interrupt one (interrupt_kernel).",
            ) from exc
        return time.monotonic() - started

    async def _stop_least_recent(self, wanted: str) -> bool:
        """Stop the least recently used idle kernel, keeping its session (resumed by its next
        run); False if every kernel is busy."""
        running = {j.path for j in self._jobs.values() if not j.done.is_set()}
        idle = [
            (runner.last_used, key)
            for key, runner in self._runners.items()
            if key != wanted
            and key not in running
            and key not in self._reserved
            and not runner.busy
        ]
        if not idle:
            return False
        key = min(idle)[1]
        await self._suspend(key, self._runners.pop(key))
        return True

    def _existing_runner(self, path: str) -> Runner:
        rel = self.store.relative(path)
        runner = self._runners.get(rel)
        session = self._kernels.get(rel) if self._kernels is not None else None
        if runner is None or session is None or runner.session is not session:
            raise KernelError(
                f"{rel!r} has no running kernel.",
                hint="execute a cell to start one; list_kernels shows the running kernels.",
            )
        return runner

    def timeout_for(self, timeout: float | None) -> float:
        """The timeout a run gets: the call's (capped by the maximum) or the default."""
        limit = self.settings.max_execution_timeout
        if timeout is None:
            return min(self.settings.execution_timeout, limit)
        if timeout <= 0:
            raise InvalidArgument("timeout must be more than 0 seconds.")
        if timeout > limit:
            raise InvalidArgument(
                f"timeout {timeout:g} s is over the {limit:g} s maximum this server allows.",
                hint="Ask for less, or start nbrelay with a larger --max-execution-timeout.",
            )
        return timeout

    async def execute(
        self,
        path: str,
        cells: Sequence[CellRef] | None = None,
        *,
        code: str | None = None,
        time_limit: float | None = None,
        stop_on_error: bool = True,
    ) -> Job:
        """Start running cells (``None``: every code cell) or scratch ``code``; return the job.

        The job runs in the background; ``wait_job`` waits for it. Markdown and raw cells named
        in ``cells`` are skipped. Outputs and execution counts are saved into the notebook
        (not into undo history); scratch code leaves the notebook unchanged.
        """
        if self._tg is None:
            raise KernelError(
                "code can only run while the server runs.",
                hint="Use the workspace inside `async with workspace.running()`.",
            )
        if code is not None and cells is not None:
            raise InvalidArgument(
                "give either cells (to run notebook cells) or code (scratch code), not both."
            )
        limit = self.timeout_for(time_limit)
        snap = await self.store.load(path)
        nb = snap.notebook
        if code is not None:
            runs = [CellRun(id=None, index=-1, source=code)]
        else:
            indexes = (
                list(range(len(nb.cells))) if cells is None else address.resolve_many(nb.ids, cells)
            )
            runs = [
                CellRun(id=nb.cells[i]["id"], index=i, source=str(nb.cells[i].get("source", "")))
                for i in indexes
                if nb.cells[i].get("cell_type") == "code"
            ]
            if not runs:
                raise InvalidArgument(
                    "none of the cells given is a code cell, so there is nothing to run.",
                    hint="Markdown and raw cells do not run; give code cells.",
                )
        runner = await self._runner(snap)
        job = Job(
            f"x{next(self._job_numbers)}",
            snap.path,
            runs,
            kernel=runner.session.info.name,
            timeout=limit,
            stop_on_error=stop_on_error,
            limits=Limits(limit=self.settings.cell_output_limit),
        )
        if snap.path in self._resumed:
            job.notes.append(self._resumed.pop(snap.path))
        self._remember(job)

        # Live mode: outputs stream into the shared cell as they arrive, with JupyterLab's
        # running state ([*]), which is reset when the run ends however it ends.
        live = bool(getattr(self.store, "live_outputs", False))
        interval = float(getattr(self.store, "output_interval", 2.0))

        async def save(done: Mapping[str, tuple[list[Output], int | None]]) -> str | None:
            current = job.current() if live else None
            running = current.id if current is not None else None
            return await self._store_outputs(snap.path, done, running=running, live=live)

        async def run() -> None:
            try:
                await run_job(job, runner, save, save_interval=interval)
            finally:
                if live:
                    with anyio.CancelScope(shield=True):
                        await self._end_running(snap.path, job)

        self._tg.start_soon(run)
        return job

    async def _end_running(self, path: str, job: Job) -> None:
        """Live mode: make sure no cell of a finished job still shows [*]."""
        ids = {c.id for c in job.cells if c.id is not None}

        def planner(nb: Notebook) -> Plan:
            changes = tuple(
                edits.UpdateCell(cid, {"execution_state": "idle"}) for cid in nb.ids if cid in ids
            )
            return Plan(edits=changes, touched=())

        with contextlib.suppress(NbrelayError):
            await self.edit(path, "run", planner, positional=False, record=False)

    def _remember(self, job: Job) -> None:
        self._jobs[job.handle] = job
        finished = [h for h, j in self._jobs.items() if j.done.is_set()]
        # The last 50 runs are kept, and of the finished ones only the newest that together
        # printed at most KEPT_OUTPUT characters: a job holds all its output, so runs that print
        # a lot would otherwise keep megabytes each in memory.
        drop = set(finished[: max(len(self._jobs) - 50, 0)])
        printed = 0
        for handle in reversed(finished):
            printed += self._jobs[handle].printed()
            if printed > KEPT_OUTPUT:
                drop.add(handle)
        for handle in (h for h in finished if h in drop):
            pruned = self._jobs.pop(handle)
            ran = self._ran.setdefault(pruned.path, deque(maxlen=HISTORY_DEPTH))
            ran.extend(history_entries(pruned))

    def execution_history(self, path: str) -> list[dict[str, Any]]:
        """What ran in a notebook (oldest first, at most ``HISTORY_DEPTH`` cell runs): each
        cell run's job, cell, status, start time, duration and execution count."""
        rel = self.store.relative(path)
        entries = list(self._ran.get(rel, ()))
        for job in self._jobs.values():
            if job.path == rel:
                entries.extend(history_entries(job))
        return entries[-HISTORY_DEPTH:]

    async def _store_outputs(
        self,
        path: str,
        done: Mapping[str, tuple[list[Output], int | None]],
        *,
        running: str | None = None,
        live: bool = False,
    ) -> str | None:
        def fields(cid: str, outs: list[Output], count: int | None) -> dict[str, Any]:
            changes: dict[str, Any] = {"outputs": outs, "execution_count": count}
            if live:  # JupyterLab's transient run state: [*] while running
                changes["execution_state"] = "running" if cid == running else "idle"
            return changes

        def planner(nb: Notebook) -> Plan:
            present = set(nb.ids)
            changes = tuple(
                edits.UpdateCell(cid, fields(cid, outs, count))
                for cid, (outs, count) in done.items()
                if cid in present
            )
            return Plan(edits=changes, touched=tuple(c.id for c in changes))

        outcome = await self.edit(path, "run", planner, positional=False, record=False)
        return outcome.after.version

    def job(self, handle: str) -> Job:
        found = self._jobs.get(handle)
        if found is None:
            known = ", ".join(self._jobs) or "none"
            raise InvalidArgument(
                f"no execution has handle {handle!r} (known handles: {known}).",
                hint="Handles come from execute results; finished ones are kept for the last 50 "
                "runs (fewer when they printed over 2,000,000 characters in all).",
            )
        return found

    async def wait_job(
        self, job: Job, wait: float, on_progress: Any | None = None, *, interval: float = 10.0
    ) -> None:
        """Wait up to ``wait`` seconds for the job to end, calling ``on_progress(job)`` when it
        prints (at most once a second) and at least every ``interval`` seconds."""
        deadline = time.monotonic() + wait
        last = time.monotonic()
        while not job.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await job.changed(min(left, interval))
            now = time.monotonic()
            if on_progress is not None and not job.done.is_set() and now - last >= 1.0:
                last = now
                await on_progress(job)
            if not job.done.is_set() and now - last < 1.0:
                with anyio.move_on_after(min(1.0, max(deadline - now, 0))):
                    await job.done.wait()

    async def cancel_job(self, job: Job, *, wait: float | None = None) -> None:
        """Stop a job: the running cell is interrupted (restarted if it ignores the interrupt)
        and the cells after it do not run."""
        job.stop.set()
        grace = self.settings.interrupt_grace + 5 if wait is None else wait
        with anyio.move_on_after(grace):
            await job.done.wait()

    def jobs_of(self, path: str) -> list[Job]:
        rel = self.store.relative(path)
        return [j for j in self._jobs.values() if j.path == rel and not j.done.is_set()]

    # -- kernels --------------------------------------------------------------------------

    async def interrupt_kernel(self, path: str) -> KernelInfo:
        runner = self._existing_runner(path)
        await runner.interrupt()
        return runner.session.info

    async def restart_kernel(self, path: str) -> KernelInfo:
        """Restart a notebook's kernel (stopping its runs); all variables are lost."""
        rel = self.store.relative(path)
        for job in self.jobs_of(rel):
            job.stop.set()
        runner = self._runners.get(rel)
        if runner is None or self._kernels is None or self._kernels.get(rel) is None:
            snap = await self.store.load(rel)
            runner = await self._runner(snap)
            return runner.session.info
        await runner.restart()
        return runner.session.info

    async def shutdown_kernel(self, path: str) -> bool:
        rel = self.store.relative(path)
        for job in self.jobs_of(rel):
            job.stop.set()
            with anyio.move_on_after(2):
                await job.done.wait()
        self._runners.pop(rel, None)
        if self._kernels is None:
            return False
        return await self._kernels.shutdown(rel)

    async def list_kernels(self) -> tuple[list[KernelInfo], list[KernelSpecInfo]]:
        provider = self._provider()
        running = [*provider.running(), *self._suspended.values()]
        return running, await provider.kernelspecs()

    # -- sessions: limits, suspension, persistence ----------------------------------------

    def _check_sessions(self, key: str) -> None:
        limit = self.settings.max_sessions
        if not limit or self._kernels is None or self._kernels.get(key) is not None:
            return
        running = self._kernels.running()
        if len(running) >= limit:
            raise KernelError(
                f"{len(running)} kernels are running, the most this server allows "
                f"(--max-sessions {limit}), so {key!r} cannot start one.",
                hint="Wait until an idle kernel is stopped (--kernel-idle-timeout), or ask the "
                "person running nbrelay for a larger --max-sessions.",
            )

    def session_state_file(self, rel: str) -> str:
        """Where a suspended session's variables are kept (with --persist-sessions)."""
        return self.state_file(rel)[: -len(".dill")] + ".session.dill"

    async def _persist(self, key: str, runner: Runner) -> bool:
        """Save a Python kernel's variables for its next session; False if it could not."""
        info = runner.session.info
        if info.language != "python" or info.state == "dead":
            return False
        target = self.session_state_file(key)
        try:
            await anyio.to_thread.run_sync(
                lambda: os.makedirs(os.path.dirname(target), exist_ok=True)
            )
            with anyio.fail_after(20):
                found = await self._ask(runner, introspect.save_state(target), "saving the session")
        except (NbrelayError, OSError, TimeoutError) as exc:
            logger.warning("could not save the session of %s: %s", key, exc)
            return False
        return not found.get("no_dill")

    async def _suspend(self, key: str, runner: Runner) -> None:
        """Stop an idle kernel but keep its session: listed as suspended, resumed by the next
        run (with its variables, when --persist-sessions saved them)."""
        if self.settings.persist_sessions:
            await self._persist(key, runner)
        info = runner.session.info
        self._suspended[key] = dataclasses.replace(
            info, state="suspended", pid=None, last_activity=time.time()
        )
        if self._kernels is not None:
            await self._kernels.shutdown(key)

    async def _resume(self, key: str, runner: Runner) -> None:
        """Give a new kernel the variables its notebook's last session saved."""
        was_suspended = self._suspended.pop(key, None) is not None
        source = self.session_state_file(key)
        if not self.settings.persist_sessions or not await anyio.Path(source).exists():
            if was_suspended:
                self._resumed[key] = "the idle session was resumed with a new kernel"
            return
        try:
            found = await self._ask(
                runner, introspect.restore_state(source), "restoring the session"
            )
        except NbrelayError as exc:
            self._resumed[key] = f"the saved session could not be restored: {exc.message}"
            return
        await anyio.to_thread.run_sync(os.unlink, source)
        restored = found.get("restored") or []
        self._resumed[key] = (
            f"the idle session was resumed: {len(restored)} saved variable(s) restored"
        )

    async def _release_memory(self) -> None:
        """Every few seconds, give the C heap's free pages back to the system: kernel output
        floods, big results and saves leave megabytes there that would otherwise count as the
        server's memory from then on (a fraction of a millisecond each time)."""
        map_big_buffers()
        while True:
            await anyio.sleep(5)
            release_memory()

    async def _reap_idle_kernels(self) -> None:
        idle = self.settings.kernel_idle_timeout
        if idle <= 0:
            return
        while True:
            await anyio.sleep(min(max(idle / 4, 0.5), 60))
            now = time.monotonic()
            for key, runner in list(self._runners.items()):
                if runner.busy or now - runner.last_used < idle:
                    continue
                if any(j.path == key and not j.done.is_set() for j in self._jobs.values()):
                    continue
                self._runners.pop(key, None)
                await self._suspend(key, runner)

    def kernel_info(self, path: str) -> KernelInfo | None:
        """The notebook's running (or suspended) kernel, or None (never starts one)."""
        rel = self.store.relative(path)
        session = self._kernels.get(rel) if self._kernels is not None else None
        return session.info if session is not None else self._suspended.get(rel)

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

    # -- sessions: notebooks held open with their kernel ----------------------------------

    async def begin_session(self, path: str) -> NotebookSession:
        """Open a notebook for work: start (or reuse) its kernel and, in live mode, join and keep
        its collaboration room. Beginning an open session again returns it."""
        snap = await self.store.load(path)
        now = time.time()
        found = self._sessions.get(snap.path)
        if found is not None and found.active:
            found.last_activity = now
            await self._runner(snap)
            return found
        runner = await self._runner(snap)
        session_id, fid, live = runner.session.info.kernel_id, file_id(snap.path), False
        if isinstance(self.store, LiveSessions):
            with contextlib.suppress(Unsupported):  # a server without collaboration
                session_id, fid = await self.store.open_session(snap.path)
                live = True
        session = NotebookSession(snap.path, session_id, fid, live, now, now)
        self._sessions[snap.path] = session
        return session

    async def end_session(self, path: str) -> NotebookSession | None:
        """Close a session: leave the live room (live mode) or shut down the notebook's kernel
        (file mode). None if the notebook had no open session."""
        rel = self.store.relative(path)
        session = self._sessions.get(rel)
        if session is None or not session.active:
            return None
        if not session.live:
            await self.shutdown_kernel(rel)
        elif isinstance(self.store, LiveSessions):
            await self.store.close_session(rel)
        session.active = False
        session.last_activity = time.time()
        return session

    def sessions(self, folder: str = "") -> list[NotebookSession]:
        """Sessions of notebooks under ``folder``: those begun (open or ended) and, as open
        sessions, notebooks whose kernel runs without one."""
        found = dict(self._sessions)
        kernels = self._kernels.running() if self._kernels is not None else []
        for info in kernels:
            current = found.get(info.key)
            if current is None or not current.active:
                found[info.key] = NotebookSession(
                    info.key, info.kernel_id, file_id(info.key), False, info.started, 0.0
                )
        for info in kernels:
            session = found[info.key]
            session.last_activity = max(session.last_activity, info.last_activity)
        prefix = folder.strip("/")
        return [
            s
            for key, s in sorted(found.items())
            if not prefix or key == prefix or key.startswith(prefix + "/")
        ]

    async def _forget(self, rel: str) -> None:
        """A notebook is going away (deleted or moved): stop its kernel, drop its state."""
        session = self._sessions.pop(rel, None)
        live = session is not None and session.active and session.live
        if live and isinstance(self.store, LiveSessions):
            await self.store.close_session(rel)
        await self.shutdown_kernel(rel)
        self._history.pop(rel, None)
        self._viewed.pop(rel, None)

    # -- documents: any file or folder under the root -------------------------------------

    def _documents(self) -> DocumentStore:
        if isinstance(self.store, DocumentStore):
            return self.store
        from nbrelay.stores import live_extras

        found = live_extras.for_store(self.store)
        if found is not None:
            return found
        raise Unsupported(
            f"this store ({self.store.mode}) does not serve files other than notebooks.",
            hint="Use the notebook tools, or serve the folder in file mode (--root).",
        )

    async def list_documents(self, folder: str = "") -> list[Document]:
        return await self._documents().list_documents(folder)

    async def document(self, path: str) -> Document:
        return await self._documents().stat_document(path)

    async def last_modified(self, snap: Snapshot) -> float | None:
        """When a notebook's file last changed (live snapshots do not carry it); None if the
        store cannot tell."""
        if snap.modified is not None:
            return snap.modified
        try:
            return (await self.document(snap.path)).modified
        except NbrelayError:
            return None

    async def document_exists(self, path: str) -> bool:
        try:
            await self.document(path)
        except NotebookNotFound:
            return False
        return True

    async def read_document(self, path: str, *, limit: int | None = None) -> tuple[bytes, int]:
        """The first ``limit`` bytes of a file (all if None) and its full size."""
        return await self._documents().read_document(path, limit=limit)

    async def create_document(self, path: str, content: str | None = None) -> Document:
        """Create a file, never over an existing one. A ``.ipynb`` path becomes a notebook: empty,
        or imported from ``content`` (notebook JSON, Markdown or a script)."""
        if path.endswith(".ipynb"):
            if content and content.strip():
                await self.import_notebook(path, content=content)
            else:
                await self.create_notebook(path)
            return await self.document(path)
        try:
            data = (content or "").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                "the content is not valid Unicode (it holds an unpaired surrogate); nothing was "
                "written.",
                hint="Remove unpaired surrogate characters (U+D800-U+DFFF) from the content.",
            ) from exc
        return await self._documents().write_document(path, data, overwrite=False)

    async def delete_document(self, path: str) -> Document:
        """Delete a file or an empty folder; a notebook's kernel is shut down first."""
        doc = await self.document(path)
        if doc.type == "notebook":
            await self._forget(doc.path)
            await self.store.remove(doc.path)
        else:
            await self._documents().remove_document(doc.path)
        return doc

    async def move_document(self, src: str, dst: str, *, keep_source: bool = False) -> Document:
        """Rename (or copy) a file, never over an existing one. A notebook that is moved loses
        its kernel; a file moved to a ``.ipynb`` path must be a valid notebook."""
        doc = await self.document(src)
        if doc.type == "directory":
            raise Unsupported(
                f"{doc.path!r} is a folder; only files can be renamed or copied.",
                hint="Create the new folder and move the files into it one by one.",
            )
        documents = self._documents()
        if await self.document_exists(dst):
            raise NotebookExists(
                f"{dst!r} already exists.", hint="Pick another path; nothing was changed."
            )
        if not keep_source and doc.type == "notebook":
            await self._forget(doc.path)
        if dst.endswith(".ipynb") and doc.type == "notebook":
            await self.store.rename(doc.path, dst, overwrite=False, keep_source=keep_source)
        elif dst.endswith(".ipynb"):
            raw, _ = await documents.read_document(doc.path)
            await self.store.create(dst, parse(raw, name=doc.path), overwrite=False)
            if not keep_source:
                await documents.remove_document(doc.path)
        else:
            await documents.move_document(doc.path, dst, keep_source=keep_source)
        return await self.document(dst)

    # -- looking inside the kernel --------------------------------------------------------

    async def _python_runner(self, path: str, what: str) -> Runner:
        snap = await self.store.load(path)
        runner = await self._runner(snap)
        if runner.session.info.language != "python":
            raise Unsupported(
                f"{what} needs a Python kernel; {snap.path!r} runs "
                f"{runner.session.info.name!r} ({runner.session.info.language}).",
                hint="Run code in the notebook (execute with code=...) to look at its state.",
            )
        return runner

    async def _ask(self, runner: Runner, code: str, what: str) -> dict[str, Any]:
        if runner.busy:
            raise KernelError(
                f"the kernel is running a cell, so {what} would have to wait for it.",
                hint="Wait for the run to end (get_execution), or interrupt it.",
            )
        outcome, outputs = await runner.evaluate(code, time_limit=60)
        if outcome.status in ("timeout", "died", "cancelled"):
            raise KernelError(f"{what} did not finish: {outcome.message}.")
        return introspect.parse(outputs, what)

    async def visualize_cell(
        self,
        path: str,
        cell: CellRef,
        *,
        kind: str = "auto",
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Draw a cell's result (or ``options['expression']``) as a chart or graph (PNG, base64
        in ``png``) or give it as table data, in the notebook's Python kernel."""
        opts = dict(options or {})
        if kind not in visualize.KINDS:
            raise InvalidArgument(
                f"unknown visualisation {kind!r}.", hint=f"Kinds: {', '.join(visualize.KINDS)}."
            )
        if opts.get("chart") not in (None, *visualize.CHARTS):
            raise InvalidArgument(
                f"unknown chart {opts['chart']!r}.", hint=f"Charts: {', '.join(visualize.CHARTS)}."
            )
        snap = await self.store.load(path)
        found = snap.notebook.cells[address.resolve_one(snap.notebook.ids, cell)]
        count = found.get("execution_count")
        if not opts.get("expression") and (found.get("cell_type") != "code" or count is None):
            raise InvalidArgument(
                f"cell {found['id']!r} has no result to visualise: it has not run.",
                hint="Run it first (execute), or pass options={'expression': 'df'}.",
            )
        runner = await self._python_runner(path, "visualize_cell")
        code = visualize.snippet(count if isinstance(count, int) else None, kind, opts)
        done = await self._ask(runner, code, "visualising the cell")
        if done.get("error") is None:
            return {**done, "path": snap.path, "cell": found["id"]}
        _visual_error(done, f"cell {found['id']!r}'s result", count)

    async def visualize_value(
        self, value: Any, *, kind: str = "auto", options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``visualize_cell`` for a JSON value that comes from a kernel without Python (Deno):
        the same code draws it, in a child Python process (matplotlib from nbrelay's own
        environment), with a time limit."""
        opts = {k: v for k, v in dict(options or {}).items() if k != "expression"}
        if kind not in visualize.KINDS:
            raise InvalidArgument(
                f"unknown visualisation {kind!r}.", hint=f"Kinds: {', '.join(visualize.KINDS)}."
            )
        if opts.get("chart") not in (None, *visualize.CHARTS):
            raise InvalidArgument(
                f"unknown chart {opts['chart']!r}.", hint=f"Charts: {', '.join(visualize.CHARTS)}."
            )
        shim = (
            "import json as _j, sys as _s\n"
            "class _Shell:\n    user_ns = {'_nbrelay_value': _j.loads(_s.stdin.read())}\n"
            "def get_ipython():\n    return _Shell\n"
        )
        code = shim + visualize.snippet(None, kind, {**opts, "expression": "_nbrelay_value"})
        from nbrelay.kernels.base import LaunchPolicy

        env = LaunchPolicy().environment(os.environ)
        env["MPLBACKEND"] = "Agg"
        try:
            with anyio.fail_after(120):
                ran = await anyio.run_process(
                    [sys.executable, "-c", code],
                    input=json.dumps(value).encode("utf-8"),
                    check=False,
                    env=env,
                )
        except TimeoutError as exc:
            raise KernelError("drawing the value did not finish within 120 s.") from exc
        printed = ran.stdout.decode("utf-8", "replace")
        if introspect.MARKER not in printed:
            tail = ran.stderr.decode("utf-8", "replace").strip()[-500:]
            raise KernelError(
                f"drawing the value failed ({sys.executable}): {tail or 'no output'}."
            )
        done = introspect.parse([{"output_type": "stream", "text": printed}], "visualising")
        if done.get("error") == "no_matplotlib":
            raise Unsupported(
                "drawing a chart of this value needs matplotlib in nbrelay's own environment.",
                hint='Install it next to nbrelay (pip install matplotlib), or use type="table".',
            )
        if done.get("error") is None:
            return done
        _visual_error(done, "the value", None)

    async def evaluate_json(self, path: str, expression: str) -> Any:
        """The value of a TypeScript/JavaScript expression in the notebook's (Deno) kernel, as
        JSON (``JSON.stringify``); Python kernels use ``inspect_variable``."""
        snap = await self.store.load(path)
        runner = await self._runner(snap)
        language = runner.session.info.language.lower()
        if language not in ("typescript", "javascript"):
            raise Unsupported(
                f"evaluating a JavaScript expression needs a TypeScript/JavaScript kernel; "
                f"{snap.path!r} runs {runner.session.info.name!r} ({language}).",
            )
        code = (
            f"console.log({json.dumps(introspect.MARKER)} + JSON.stringify("
            f"{{ value: await (\n{expression}\n) }}))"
        )
        found = await self._ask(runner, code, "evaluating the expression")
        return found.get("value")

    async def forget_saved_state(self, path: str) -> None:
        """Remove the kernel states saved for a notebook (save_kernel_state, persisted
        sessions), as when its session ends for good."""
        rel = self.store.relative(path)
        for name in (self.state_file(rel), self.session_state_file(rel)):
            with contextlib.suppress(FileNotFoundError):
                await anyio.Path(name).unlink()

    async def list_variables(self, path: str, *, limit: int = 100) -> dict[str, Any]:
        runner = await self._python_runner(path, "list_variables")
        return await self._ask(runner, introspect.list_variables(limit), "listing variables")

    async def inspect_variable(self, path: str, name: str, *, limit: int) -> dict[str, Any]:
        if not name.isidentifier():
            raise InvalidArgument(
                f"{name!r} is not a variable name.", hint="Give a plain name such as df."
            )
        runner = await self._python_runner(path, "inspect_variable")
        found = await self._ask(runner, introspect.inspect_variable(name, limit), "inspecting")
        if found.get("missing"):
            names = ", ".join(found.get("names") or []) or "none"
            raise InvalidArgument(
                f"the kernel has no variable named {name!r}.",
                hint=f"Defined names: {names}.",
            )
        return found

    async def install_packages(
        self, path: str, requirements: Sequence[str], *, time_limit: float = 600
    ) -> tuple[str, int, str]:
        """pip-install into the kernel's own Python: (python, exit code, output tail)."""
        checked = validate_requirements(requirements)
        runner = await self._python_runner(path, "install_packages")
        python = str(
            (await self._ask(runner, introspect.python_executable(), "finding Python"))["python"]
        )
        from nbrelay.kernels.base import LaunchPolicy

        env = LaunchPolicy().environment(os.environ)
        env["PIP_NO_INPUT"] = "1"
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--", *checked]
        try:
            with anyio.fail_after(time_limit):
                done = await anyio.run_process(argv, check=False, env=env, stdin=None)
        except TimeoutError as exc:
            raise KernelError(f"pip did not finish within {time_limit:g} s.") from exc
        except OSError as exc:
            raise KernelError(f"could not run pip with {python}: {exc}.") from exc
        text = (done.stdout + done.stderr).decode("utf-8", "replace")
        if done.returncode == 0:
            await self._ask(runner, introspect.refresh_imports(), "refreshing imports")
        return python, done.returncode, text[-3000:]

    def state_file(self, rel: str) -> str:
        """Where a notebook's saved kernel state lives: a hidden folder next to it, or
        --session-dir (one file per notebook path)."""
        name = posixpath.basename(rel)
        if self.settings.session_dir is not None:
            digest = hashlib.sha256(rel.encode("utf-8")).hexdigest()[:12]
            return os.path.join(str(self.settings.session_dir), f"{digest}-{name}.dill")
        return os.path.join(self._kernel_cwd(rel), ".nbrelay-state", name + ".dill")

    async def save_kernel_state(self, path: str, *, to: str | None = None) -> dict[str, Any]:
        """Save ``path``'s kernel variables into the state file of ``to`` (default: ``path``)."""
        runner = await self._python_runner(path, "save_kernel_state")
        target = self.state_file(self.store.relative(to or path))
        found = await self._ask(runner, introspect.save_state(target), "saving the state")
        if found.get("no_dill"):
            raise Unsupported(
                "the kernel cannot import dill, which saves its state.",
                hint='Install it first: install_packages(packages=["dill"]).',
            )
        return found

    async def restore_kernel_state(self, path: str) -> dict[str, Any]:
        runner = await self._python_runner(path, "restore_kernel_state")
        source = self.state_file(self.store.relative(path))
        if not await anyio.Path(source).exists():
            raise InvalidArgument(
                f"{self.store.relative(path)!r} has no saved kernel state.",
                hint="Call save_kernel_state first.",
            )
        found = await self._ask(runner, introspect.restore_state(source), "restoring the state")
        if found.get("no_dill"):
            raise Unsupported(
                "the kernel cannot import dill, which restores its state.",
                hint='Install it first: install_packages(packages=["dill"]).',
            )
        return found


HISTORY_DEPTH = 500
KEPT_OUTPUT = 2_000_000  # characters of output the finished jobs kept for get_execution hold


def history_entries(job: Job) -> list[dict[str, Any]]:
    """The cell runs of a job as history entries (queued cells are left out)."""
    started = time.time() - (time.monotonic() - job.started)
    entries: list[dict[str, Any]] = []
    for cell in job.cells:
        if cell.status == "queued":
            continue
        entry: dict[str, Any] = {
            "job": job.handle,
            "cell": cell.id,
            "index": cell.index if cell.id is not None else None,
            "code": cell.source.split("\n", 1)[0][:120],
            "status": cell.status,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started))
            + f".{int(started * 1000) % 1000:03d}Z",
            "seconds": round(cell.seconds, 3),
            "kernel": job.kernel,
        }
        if cell.execution_count is not None:
            entry["execution_count"] = cell.execution_count
        if cell.message:
            entry["message"] = cell.message[:300]
        entries.append(entry)
        started += cell.seconds
    return entries


def validate_requirements(requirements: Sequence[str]) -> list[str]:
    """Each requirement as PEP 508 (``pandas>=2``, ``requests[socks]``); options are refused."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not requirements:
        raise InvalidArgument("no packages given.", hint='Give requirements like ["pandas>=2"].')
    out = []
    for item in requirements:
        text = item.strip()
        if not text or text.startswith("-"):
            raise InvalidArgument(
                f"{item!r} is not a package requirement: options such as --index-url or -e are "
                "refused.",
                hint='Give PEP 508 requirements only, like "pandas>=2" or "requests[socks]".',
            )
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidArgument(
                f"{item!r} is not a valid PEP 508 requirement: {exc}.",
                hint='Write it like "pandas>=2.0" or "scikit-learn==1.5.*".',
            ) from exc
        out.append(text)
    return out


def _language_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    if "python" in lowered:
        return "python"
    if "deno" in lowered or "typescript" in lowered:
        return "typescript"
    return {"ir": "R"}.get(lowered, lowered)


def _visual_error(done: Mapping[str, Any], what: str, count: Any) -> NoReturn:
    """Raise the error a failed visualisation (``done["error"]``) stands for."""
    problem = done.get("error")
    messages = {
        "no_result": (
            f"the kernel has no result for {what} (execution {count}): the cell's last line is "
            "not an expression, or the kernel restarted since it ran.",
            "Run the cell again, end it with the value to show, or pass "
            "options={'expression': 'name'}.",
        ),
        "expression": (
            f"the expression failed in the kernel: {done.get('detail')}.",
            "Pass a Python expression that names the data, e.g. options={'expression': 'df'}.",
        ),
        "not_tabular": (
            f"a {done.get('type')} cannot be shown as a table or chart.",
            "Give a DataFrame, Series, array, dict, or list of rows, numbers or records.",
        ),
        "not_graph": (
            f"a {done.get('type')} is not a graph.",
            "Give a networkx graph or an adjacency dict {node: [neighbours]}.",
        ),
        "no_numbers": (
            f"none of the columns {done.get('columns')} is numeric, so there is nothing to chart.",
            "Use type='table', or name numeric columns in options y.",
        ),
        "no_column": (
            f"there is no column {done.get('column')!r}; the columns are {done.get('columns')}.",
            "Name one of those columns in options x or y.",
        ),
        "no_matplotlib": (
            "the kernel cannot import matplotlib, which draws the chart.",
            'Install it (install_packages(packages=["matplotlib"])) or use type="table".',
        ),
    }
    message, hint = messages.get(str(problem), (f"visualising failed: {problem}.", ""))
    if problem == "no_matplotlib":
        raise Unsupported(message, hint=hint)
    raise InvalidArgument(message, hint=hint)
