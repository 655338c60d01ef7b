"""The workspace's core: its state, reading and creating notebooks, and the one edit primitive.

``edit`` runs a planner against the freshest notebook under the store's lock and records the
change for ``undo``; every editing operation (``editing.py``) goes through it.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import logging
import re
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from nbrelay import formats
from nbrelay.config import Settings
from nbrelay.errors import RemoteError
from nbrelay.kernels.base import KernelInfo, KernelProvider
from nbrelay.kernels.execution import Runner
from nbrelay.kernels.jobs import Job
from nbrelay.notebook import edits, history
from nbrelay.notebook.address import CellRef
from nbrelay.notebook.edits import CellSpec
from nbrelay.notebook.model import IdFactory, Notebook, new_notebook, random_id
from nbrelay.notebook.search import Match, compile_pattern, search
from nbrelay.stores.base import (
    Capabilities,
    EditOutcome,
    Entry,
    Flushing,
    NotebookStore,
    Planner,
    Snapshot,
    capabilities,
)

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


class CoreWorkspace:
    """State shared by every part of the workspace; reading, creating, editing."""

    def __init__(
        self,
        settings: Settings,
        store: NotebookStore,
        *,
        id_factory: IdFactory = random_id,
        kernels: KernelProvider | None = None,
        kernel_factory: Callable[[], KernelProvider] | None = None,
    ) -> None:
        """``kernels`` is where code runs; ``kernel_factory`` makes it when code first runs
        (the server passes one or the other). Without either, local kernels in the notebooks'
        folders."""
        self.settings = settings
        self.store = store
        self._kernel_factory = kernel_factory or self._local_kernels
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

    @property
    def capabilities(self) -> Capabilities:
        """What the store can do (asked each time: the live store learns late whether the
        server has real-time collaboration)."""
        return capabilities(self.store)

    def _local_kernels(self) -> KernelProvider:
        from nbrelay.kernels.local import local_kernels

        files = self.capabilities.files
        return local_kernels(
            self.settings,
            root=str(files.root) if files is not None else None,
            open_folder=files.open_kernel_folder if files is not None else None,
        )

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


def _language_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    if "python" in lowered:
        return "python"
    if "deno" in lowered or "typescript" in lowered:
        return "typescript"
    return {"ir": "R"}.get(lowered, lowered)
